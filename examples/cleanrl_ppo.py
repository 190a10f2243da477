"""A plain CleanRL-style PPO on CartPole; the lines that add a magister curriculum are marked ``# magister:``.

Run ``python -m magister.examples.cleanrl_ppo --help`` for the options; a typical run::

    python -m magister.examples.cleanrl_ppo --curriculum plr --total-timesteps 100000 --log-dir runs/plr

The loop is the usual single-file PPO (rollout of ``num_steps`` x ``num_envs``, GAE, clipped-surrogate epochs
over shuffled minibatches), written here. The task is the half-width of CartPole's initial-state range
(:class:`~magister.examples.cartpole.CartPoleTask`), ``--num-tasks`` values evenly spaced in ``[0, 0.2]``:
wider ranges start the pole further from upright. The magister lines, in order:

1. build a curriculum over the task space, and ``serve`` it when the envs run in worker processes
   (``--vector async``); with ``--vector sync`` the envs call the curriculum directly;
2. wrap each env: ``GymnasiumSyncWrapper(CartPoleTask(env, task_space), source)``;
3. keep, per step, the task and train flag the env reports in ``info`` (``info["task"]``,
   ``info["task_train"]``);
4. after GAE, ``feed_scores(..., done_convention="before_step", next_done=next_done)`` gives the PLR
   family its value-based scores from the same rollout, CleanRL's ``dones`` buffer passed as it is;
5. mask evaluation-only transitions (``task_train == False``, sent by PLR⊥/ACCEL) out of the losses;
6. log ``curriculum.metrics()`` with :class:`~magister.integrations.loggers.MetricsLogger`.

Vector envs use Gymnasium's ``SAME_STEP`` autoreset, the semantics this classic loop assumes: the step that
ends an episode already returns the next episode's first observation, and its ``info`` is the *reset* info
(the next task); the finished step's own info is in ``info["final_info"]``. So the task of step ``t`` is the
one reported *before* it (by the reset, or by the previous step), which is what the loop records.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

from magister.curricula.base import Curriculum  # magister:
from magister.curricula.scoring import VALUE_SCORES  # magister:
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper  # magister:
from magister.examples.cartpole import CartPoleTask  # magister:
from magister.integrations.loggers import MetricsLogger  # magister:
from magister.integrations.scores import feed_scores  # magister:
from magister.sync.server import serve  # magister:
from magister.task_spaces.discrete import Discrete  # magister:

logger = logging.getLogger(__name__)

__all__ = ["Agent", "Args", "make_curriculum", "make_task_space", "train"]


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
    # magister: the curriculum and how the envs reach it
    curriculum: str = "plr"
    num_tasks: int = 8
    vector: str = "async"
    context: str = ""
    feed_scores: bool = True
    log_dir: str = ""


def parse_args(argv: list[str] | None = None) -> Args:
    """``--flag value`` for every field of :class:`Args` (``--no-flag`` for booleans)."""
    parser = argparse.ArgumentParser(prog="python -m magister.examples.cleanrl_ppo",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type in (int, "int"):
            parser.add_argument(flag, type=lambda s: int(float(s)), default=f.default)
        elif f.type in (float, "float"):
            parser.add_argument(flag, type=float, default=f.default)
        else:
            parser.add_argument(flag, type=str, default=f.default)
    return Args(**vars(parser.parse_args(argv)))


# magister: the task space and the curriculum
def make_task_space(num_tasks: int, seed: int | None = None) -> Discrete:
    """``num_tasks`` half-widths evenly spaced in ``[0, 0.2]`` (decoded tasks are the floats).

    >>> make_task_space(3).tasks
    [0.0, 0.1, 0.2]
    """
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 2:
        raise ValueError(f"num_tasks must be an int >= 2, got {num_tasks!r}")
    return Discrete(tasks=[round(float(h), 6) for h in np.linspace(0.0, 0.2, num_tasks)], seed=seed)


def make_curriculum(name: str, task_space: Discrete, seed: int) -> Curriculum:
    """``plr`` (the paper's defaults), ``robust-plr`` (PLR⊥), ``lp`` (learning progress) or ``dr``."""
    if name == "plr":
        from magister.curricula.plr import PLR

        return PLR(task_space, seed=seed)
    if name == "robust-plr":
        from magister.curricula.plr import RobustPLR

        return RobustPLR(task_space, seed=seed)
    if name == "lp":
        from magister.curricula.learning_progress import LearningProgress

        return LearningProgress(task_space, seed=seed)
    if name == "dr":
        from magister.curricula.domain_randomization import DomainRandomization

        return DomainRandomization(task_space, seed=seed)
    raise ValueError(f"unknown curriculum {name!r}; expected plr, robust-plr, lp or dr")


def make_env(task_space: Discrete, source: Any):
    """A thunk for one env: CartPole with task switching, connected to the curriculum."""

    def thunk() -> gym.Env:
        env = gym.make("CartPole-v1")
        env = CartPoleTask(env, task_space)  # magister: applies a task on reset
        return GymnasiumSyncWrapper(env, source)  # magister: tasks from, feedback to, the curriculum

    return thunk


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
    """Run PPO; returns counters, per-task mean episode returns and the curriculum's final metrics."""
    if args.vector not in ("sync", "async"):
        raise ValueError(f"vector must be 'sync' or 'async', got {args.vector!r}")
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    np_rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = max(1, args.total_timesteps // batch_size)

    # magister: curriculum on the learner side; a server when the envs run in other processes
    task_space = make_task_space(args.num_tasks, seed=args.seed)
    curriculum = make_curriculum(args.curriculum, task_space, args.seed)
    server = serve(curriculum) if args.vector == "async" else None
    source = server.address if server is not None else curriculum
    feedback = server if server is not None else curriculum  # learner-side calls go through the lock
    use_scores = args.feed_scores and getattr(curriculum, "score", None) in VALUE_SCORES  # PLR family

    fns = [make_env(task_space, source) for _ in range(args.num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    try:
        if args.vector == "async":
            envs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context=args.context or None)
        else:
            envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    except Exception:
        if server is not None:
            server.close()
        raise
    mlog = MetricsLogger(feedback, args.log_dir or None, use_wandb="auto")  # magister: metrics logging

    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n), args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    train_mask = torch.ones((args.num_steps, args.num_envs))  # magister: 0 for evaluation-only steps
    step_tasks = np.zeros((args.num_steps, args.num_envs), dtype=np.int64)  # magister: task of each step

    global_step, num_feeds = 0, 0
    train_fractions: list[float] = []
    returns_by_task: dict[int, list[float]] = {}
    ep_return = np.zeros(args.num_envs)
    t0 = time.time()
    try:
        next_obs_np, info = envs.reset(seed=args.seed)
        next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
        next_done = torch.zeros(args.num_envs)
        cur_task = np.asarray(info["task"], dtype=np.int64)  # magister:
        cur_train = np.asarray(info["task_train"], dtype=bool)  # magister:
        for iteration in range(1, num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            for step in range(args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done
                step_tasks[step] = cur_task  # magister:
                train_mask[step] = torch.as_tensor(cur_train, dtype=torch.float32)  # magister:
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
                actions[step], logprobs[step] = action, logprob
                next_obs_np, reward, term, trunc, info = envs.step(action.numpy())
                done = np.logical_or(term, trunc)
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32)
                next_done = torch.as_tensor(done, dtype=torch.float32)
                ep_return += reward
                for i in np.flatnonzero(done):
                    returns_by_task.setdefault(int(cur_task[i]), []).append(float(ep_return[i]))
                    ep_return[i] = 0.0
                cur_task = np.asarray(info["task"], dtype=np.int64)  # magister: next step's task
                cur_train = np.asarray(info["task_train"], dtype=bool)  # magister:

            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(args.num_envs)
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                    lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns = advantages + values

            # magister: PLR scores from this rollout; CleanRL's dones[t] is the done flag seen *before* step t
            if use_scores:  # magister:
                feed_scores(feedback, rewards, values, dones, next_value, step_tasks,  # magister:
                            done_convention="before_step", next_done=next_done)  # magister:
                num_feeds += 1  # magister:

            b_obs = obs.reshape(-1, obs_dim)
            b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
            b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
            b_values = values.reshape(-1)
            b_train = train_mask.reshape(-1)  # magister:
            train_fractions.append(float(b_train.mean()))
            stats: dict[str, float] = {}
            for _ in range(args.update_epochs):
                b_inds = np_rng.permutation(batch_size)
                for start in range(0, batch_size, minibatch_size):
                    mb = torch.as_tensor(b_inds[start:start + minibatch_size])
                    w = b_train[mb]  # magister: evaluation-only transitions weigh 0
                    if w.sum() == 0:
                        continue
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
                    logratio = newlogprob - b_logprobs[mb]
                    ratio = logratio.exp()
                    mb_adv = b_advantages[mb]
                    if args.norm_adv and w.sum() > 1:
                        kept = mb_adv[w > 0]
                        mb_adv = (mb_adv - kept.mean()) / (kept.std() + 1e-8)
                    pg_loss = (torch.max(-mb_adv * ratio,
                                         -mb_adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)) * w)
                    pg_loss = pg_loss.sum() / w.sum()
                    newvalue = newvalue.view(-1)
                    if args.clip_vloss:
                        v_unclipped = (newvalue - b_returns[mb]) ** 2
                        v_clipped = b_values[mb] + (newvalue - b_values[mb]).clamp(-args.clip_coef,
                                                                                    args.clip_coef)
                        v_loss = 0.5 * (torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2) * w).sum()
                    else:
                        v_loss = 0.5 * (((newvalue - b_returns[mb]) ** 2) * w).sum()
                    v_loss = v_loss / w.sum()
                    entropy_loss = (entropy * w).sum() / w.sum()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()
                    stats = {"losses/policy_loss": pg_loss.item(), "losses/value_loss": v_loss.item(),
                             "losses/entropy": entropy_loss.item()}

            if mlog.tb_writer is not None:
                for k, v in stats.items():
                    mlog.tb_writer.add_scalar(k, v, global_step)
                mlog.tb_writer.add_scalar("charts/train_fraction", float(b_train.mean()), global_step)
            mlog.log(global_step)  # magister: curriculum metrics (entropy, top tasks, sync counters)
            logger.debug("iteration %d/%d, %d steps/s", iteration, num_iterations,
                         int(global_step / max(time.time() - t0, 1e-9)))
    finally:
        envs.close()  # magister: the workers report unfinished tasks before the server stops
        metrics = feedback.metrics()
        mlog.close()
        if server is not None:
            server.close()  # magister:
    return {
        "global_step": global_step,
        "iterations": num_iterations,
        "num_feeds": num_feeds,
        "returns_by_task": {t: float(np.mean(r)) for t, r in sorted(returns_by_task.items())},
        "episodes": sum(len(r) for r in returns_by_task.values()),
        "train_fraction": float(np.mean(train_fractions)) if train_fractions else 1.0,
        "metrics": metrics,
        "curriculum": curriculum,
        "seconds": time.time() - t0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``python -m magister.examples.cleanrl_ppo --help``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    result = train(args)
    task_space = make_task_space(args.num_tasks)
    logger.info("%d steps in %.0fs, %d episodes, %d score updates", result["global_step"], result["seconds"],
                result["episodes"], result["num_feeds"])
    for t, r in result["returns_by_task"].items():
        logger.info("  half-width %.3f: mean episode return %.1f", task_space.decode(t), r)
    return result


if __name__ == "__main__":
    main()
