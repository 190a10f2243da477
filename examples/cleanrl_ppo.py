"""A plain CleanRL-style PPO on CartPole with a PLR⊥ curriculum: ``cleanrl_ppo_plain.py`` plus 12 lines.

Run ``python -m magister.examples.cleanrl_ppo --help`` for the options. Every line that differs from
:mod:`magister.examples.cleanrl_ppo_plain` below the docstring ends with ``# magister:`` (but the blank line
before the imports); the CleanRL guide shows the diff, and ``tests/test_cleanrl_example.py`` checks that it
stays at most 12 added or changed lines. In order:

1. the imports;
2. a curriculum, :class:`~magister.curricula.RobustPLR` (PLR⊥) over the half-width of CartPole's initial
   state range (:func:`~magister.examples.cartpole.default_task_space`, wider is harder), here in the
   learner's process: the envs of a ``SyncVectorEnv`` call it directly, with no sockets;
3. each env wrapped: :class:`~magister.examples.cartpole.CartPoleTask` applies a task on reset and
   :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` takes tasks from, and reports
   episodes to, the curriculum;
4. a :class:`~magister.integrations.RolloutTasks` records each step's task and train flag from the step's
   ``info``, feeds the PLR scores after GAE (``feed_scores`` with CleanRL's ``"before_step"`` dones) and
   gives the indices of the steps to train on: PLR⊥'s evaluation-only episodes stay out of the gradients.

The vector env uses Gymnasium's ``SAME_STEP`` autoreset, the semantics this loop assumes: the step that ends
an episode already returns the next episode's first observation.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical
from tqdm.auto import tqdm

from magister import GymnasiumSyncWrapper  # magister:
from magister.curricula import RobustPLR  # magister:
from magister.examples.cartpole import CartPoleTask, default_task_space  # magister:
from magister.integrations import RolloutTasks  # magister:

__all__ = ["Agent", "Args", "parse_args", "train"]


@dataclass
class Args:
    """Options (each is a ``--flag``)."""

    seed: int = 1
    total_timesteps: int = 50_000
    learning_rate: float = 2.5e-4
    num_envs: int = 4
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    torch_threads: int = 1
    progress: bool = True


def parse_args(argv: list[str] | None = None) -> Args:
    """``--flag value`` for every field of :class:`Args` (``--no-flag`` for booleans)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type in (int, "int"):
            parser.add_argument(flag, type=lambda s: int(float(s)), default=f.default)
        else:
            parser.add_argument(flag, type=float, default=f.default)
    return Args(**vars(parser.parse_args(argv)))


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate tanh MLPs for the value and the policy, as in CleanRL's ``ppo.py``."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, n_actions), std=0.01),
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def train(args: Args) -> dict[str, Any]:
    """Run PPO; returns the step count, the finished episodes' returns and the objects it trained."""
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = max(1, args.total_timesteps // batch_size)

    curriculum = RobustPLR(default_task_space(args.seed), seed=args.seed)  # magister:
    envs = gym.make_vec("CartPole-v1", num_envs=args.num_envs, vectorization_mode="sync",
                        wrappers=[lambda e: GymnasiumSyncWrapper(CartPoleTask(e), curriculum)],  # magister:
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n), args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    tasks = RolloutTasks(args.num_steps, args.num_envs, done_convention="before_step")  # magister:

    global_step, episode_returns = 0, []
    ep_return = np.zeros(args.num_envs)
    t0 = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32)
    next_done = torch.zeros(args.num_envs)
    bar = tqdm(range(1, num_iterations + 1), disable=not args.progress, unit="update")
    for iteration in bar:
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            next_obs, reward, terminations, truncations, infos = envs.step(action.numpy())
            tasks.record(step, infos)  # magister: the step's task and train flag
            done = np.logical_or(terminations, truncations)
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32)
            next_done = torch.as_tensor(done, dtype=torch.float32)
            ep_return += reward
            episode_returns += ep_return[done].tolist()
            ep_return[done] = 0.0

        with torch.no_grad():  # GAE; dones[t] is the done flag seen *before* step t
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                advantages[t] = lastgaelam
            returns = advantages + values
        tasks.feed_scores(curriculum, rewards, values, dones, next_value, next_done)  # magister: PLR scores

        b_obs, b_logprobs, b_actions = obs.reshape(-1, obs_dim), logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        b_inds = tasks.train_indices()  # magister: evaluation-only steps stay out of the gradients
        for _epoch in range(args.update_epochs):
            rng.shuffle(b_inds)
            for start in range(0, len(b_inds), minibatch_size):  # magister:
                mb_inds = b_inds[start:start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds],
                                                                              b_actions[mb_inds])
                ratio = (newlogprob - b_logprobs[mb_inds]).exp()
                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv and len(mb_inds) > 1:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef,
                                                                args.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        if episode_returns:
            bar.set_postfix(mean_return=f"{np.mean(episode_returns[-20:]):.1f}")
    envs.close()
    return {"global_step": global_step, "iterations": num_iterations, "episode_returns": episode_returns,
            "agent": agent, "seconds": time.time() - t0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``--help`` lists the options."""
    result = train(parse_args(argv))
    episodes = result["episode_returns"]
    print(f"{result['global_step']} steps in {result['seconds']:.0f}s, {len(episodes)} episodes, mean return "
          f"of the last {len(episodes[-20:])}: {np.mean(episodes[-20:]) if episodes else float('nan'):.1f}")
    return result


if __name__ == "__main__":
    main()
