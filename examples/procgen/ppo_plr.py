"""PPO with Prioritized Level Replay on Procgen: the PLR paper's setting in one CleanRL-style file.

M. Jiang, E. Grefenstette, T. Rocktäschel, "Prioritized Level Replay", ICML 2021: PPO with an IMPALA-ResNet
trains on the 200 levels (seeds ``0 .. 199``) of a Procgen game in easy mode; a curriculum picks the level of
every episode; the policy is tested on the full distribution of levels. Run
``python -m magister.examples.procgen.ppo_plr --help`` for the flags. The PPO flags default to the paper's
settings (γ 0.999, λ 0.95, rollouts of 256 steps, 3 epochs of 8 minibatches, clip 0.2, Adam 5e-4 with eps
1e-5, entropy 0.01, value coefficient 0.5, returns normalised, gradient norm 0.5); the size of the run is
small so that it runs on a CPU: 8 envs (the paper: 64) and 50,000 steps (the paper: 25M), evaluation on 10
training and 10 test levels (the paper: 100 test episodes). ``docs/recipes/procgen.md`` has the paper-scale
command.

Curricula (``--curriculum``):

* ``plr``: :class:`~magister.curricula.PLR` with the paper's settings: value-L1 scores (the mean absolute
  GAE of each level's rollout segments, sent after every rollout by
  :meth:`~magister.integrations.RolloutTasks.feed_scores`), rank prioritisation, temperature β 0.1,
  staleness ρ 0.1, replay with the proportion of levels seen;
* ``plr_perp``: PLR⊥ (Robust PLR, Jiang et al., NeurIPS 2021): the same, but new levels are played for
  evaluation only (no gradients; their steps are masked out of the update) and replays come with a fixed
  probability (``--replay-prob``, 0.5 as in that paper);
* ``dr``: domain randomisation, the paper's uniform baseline (each episode a level drawn uniformly).

How magister sits in the loop: the curriculum is served by :func:`magister.serve`; every env is a
:class:`~magister.examples.procgen.levels.ProcgenLevels` (a task = a level seed, set at reset on the stock
Procgen wheel) inside a :class:`~magister.GymnasiumSyncWrapper`, which takes the next level from the server at
every reset and reports every episode; a Gymnasium ``SyncVectorEnv`` (``--vector async``: ``AsyncVectorEnv``)
runs them with ``SAME_STEP`` autoreset. A :class:`~magister.integrations.RolloutTasks` records each step's
level from its ``info`` and feeds PLR's scores. Evaluation (:func:`magister.evaluation.evaluate`, no sync
wrapper: the curriculum never sees those episodes) plays a fixed sample of training levels and of the full
distribution; returns are min–max normalised by the Procgen paper's per-game bounds
(:data:`~magister.examples.procgen.levels.RETURN_BOUNDS`).

Outputs in ``--run-dir/<run name>``: TensorBoard logs, ``checkpoint.pt`` + ``checkpoint.state`` (written
every ``--checkpoint-every`` updates and at the end; ``--resume PATH`` continues a run to
``--total-steps``), and ``result.json``. ``--write-results`` trains every (game, curriculum, seed) of
``--games`` x ``--curricula`` x ``--seeds`` and writes the comparison, with bootstrap intervals over the
seeds, into ``docs/results.md``.

Needs the Procgen virtualenv: ``bash benchmarks/_procgen_env.sh .venvs/procgen``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

from magister import GymnasiumSyncWrapper, serve
from magister.curricula import PLR, DomainRandomization
from magister.evaluation import (
    Suite,
    evaluate,
    format_estimate,
    interval_estimates,
    probability_of_improvement,
)
from magister.examples._checkpoint import read_checkpoint, write_checkpoint
from magister.examples._cli import parse_dataclass
from magister.examples.procgen.levels import ProcgenLevels, all_levels, normalised_return, training_levels
from magister.integrations import RolloutTasks

logger = logging.getLogger(__name__)

__all__ = ["Agent", "Args", "evaluate_agent", "main", "make_curriculum", "train"]

CURRICULA = ("plr", "plr_perp", "dr")
MODULE = "magister.examples.procgen.ppo_plr"


@dataclass
class Args:
    """Options (each is a ``--flag``)."""

    game: str = "bigfish"
    """the Procgen game"""
    curriculum: str = "plr"
    """plr, plr_perp (PLR⊥) or dr (uniform over the training levels)"""
    num_levels: int = 200
    """training levels: level seeds 0 .. num_levels - 1 (the paper: 200 in easy mode)"""
    distribution_mode: str = "easy"
    """easy (the paper's main setting) or hard (500 levels, 200M steps in the paper)"""
    total_steps: int = 50_000
    """env steps to train for (the paper: 25M)"""
    num_envs: int = 8
    """parallel envs (the paper: 64)"""
    num_steps: int = 256
    """steps per env per rollout"""
    update_epochs: int = 3
    num_minibatches: int = 8
    learning_rate: float = 5e-4
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 (the paper keeps it constant)"""
    gamma: float = 0.999
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    norm_returns: bool = True
    """divide rewards by the running standard deviation of the discounted return"""
    plr_temperature: float = 0.1
    """PLR's β (rank prioritisation)"""
    plr_staleness: float = 0.1
    """PLR's staleness coefficient ρ"""
    replay_prob: float = 0.5
    """plr_perp only: the probability of a replay (plr replays with the share of levels seen)"""
    eval_levels: int = 10
    """evaluation episodes on the training levels and on the full distribution, one level each"""
    eval_every: int = 0
    """evaluate every this many updates as well as at the end (0: at the end only)"""
    eval_envs: int = 8
    seed: int = 1
    device: str = "auto"
    """cpu, cuda, or auto (cuda when available)"""
    torch_threads: int = 1
    vector: str = "sync"
    """sync (SyncVectorEnv) or async (AsyncVectorEnv, one process per env)"""
    run_dir: str = "runs/procgen"
    run_name: str = ""
    """default: <game>_<curriculum>_s<seed>"""
    checkpoint_every: int = 10
    """updates between checkpoints (0: at the end only)"""
    resume: str = ""
    """a checkpoint.pt to continue from (its checkpoint.state next to it)"""
    tensorboard: bool = True
    progress: bool = True
    write_results: bool = False
    """train every game x curriculum x seed below and write the comparison into docs/results.md"""
    games: tuple[str, ...] = ("bigfish",)
    """--write-results: the games"""
    curricula: tuple[str, ...] = ("plr", "dr")
    """--write-results: the curricula"""
    seeds: tuple[int, ...] = (1, 2, 3)
    """--write-results: the training seeds"""


# -- the network: the IMPALA-ResNet of Espeholt et al. 2018, as the PLR paper's PPO uses it -----------------

class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """A 3x3 convolution, a 3x3 max-pool of stride 2, two residual blocks."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res0, self.res1 = ResidualBlock(out_channels), ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res1(self.res0(self.pool(self.conv(x))))


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """IMPALA-ResNet (channels 16, 32, 32; a 256-unit layer) with a policy head and a value head."""

    def __init__(self, n_actions: int, channels: tuple[int, ...] = (16, 32, 32), hidden: int = 256) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for out in channels:
            layers.append(ConvSequence(c, out))
            c = out
        self.body = nn.Sequential(*layers, nn.Flatten(), nn.ReLU(),
                                  layer_init(nn.Linear(c * 8 * 8, hidden)), nn.ReLU())
        self.actor = layer_init(nn.Linear(hidden, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(hidden, 1), std=1.0)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs``: ``(batch, 64, 64, 3)`` uint8 images."""
        return self.body(obs.permute(0, 3, 1, 2).float() / 255.0)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(obs))

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        h = self.features(obs)
        probs = Categorical(logits=self.actor(h))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(h)


# -- curriculum, envs, evaluation -------------------------------------------------------------------------

def make_curriculum(args: Args, task_space: Any) -> Any:
    """The curriculum named by ``args.curriculum`` over the training levels."""
    if args.curriculum == "dr":
        return DomainRandomization(task_space, seed=args.seed)
    if args.curriculum not in CURRICULA:
        raise ValueError(f"unknown curriculum {args.curriculum!r}; expected one of {CURRICULA}")
    robust = args.curriculum == "plr_perp"
    return PLR(task_space, score="value_l1", prioritization="rank", temperature=args.plr_temperature,
               staleness_coef=args.plr_staleness, buffer_size=args.num_levels,
               replay_prob=args.replay_prob if robust else None, robust=robust,
               gamma=args.gamma, gae_lambda=args.gae_lambda, seed=args.seed)


def make_env(args: Args, task_space: Any, source: Any = None) -> gym.Env:
    """A level-switching Procgen env; with ``source`` (a server's address) inside a sync wrapper."""
    env = ProcgenLevels(task_space, args.game, distribution_mode=args.distribution_mode)
    return env if source is None else GymnasiumSyncWrapper(env, source)


def evaluate_agent(agent: Agent, args: Args, device: torch.device) -> dict[str, Any]:
    """Mean return and min–max normalised return on a fixed sample of ``args.eval_levels`` training levels
    and as many levels of the full distribution (the same levels for every run of the same seed)."""
    def policy(obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        with torch.no_grad():
            action, _, _, _ = agent.get_action_and_value(torch.as_tensor(obs, device=device))
        return action.cpu().numpy()

    out: dict[str, Any] = {}
    for name, space in (("train", training_levels(args.num_levels)), ("test", all_levels())):
        suite = Suite.sample(space, args.eval_levels, seed=10_000 + args.seed)
        result = evaluate(policy, lambda s=space: make_env(args, s), suite, episodes=1,
                          num_envs=args.eval_envs, seed=args.seed)
        returns = result.returns[:, 0]
        normalised = normalised_return(args.game, returns, args.distribution_mode)
        out[name] = {"return": float(returns.mean()), "normalised": float(np.mean(normalised)),
                     "success": float(np.nanmean(result.progress)), "levels": [int(t) for t in suite.tasks]}
    return out


def _vector_env(args: Args, task_space: Any, address: str) -> gym.vector.VectorEnv:
    fns = [lambda: make_env(args, task_space, address) for _ in range(args.num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP  # an episode's last step returns the next one's first obs
    if args.vector == "async":
        envs: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="fork")
    elif args.vector == "sync":
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    else:
        raise ValueError(f"vector must be 'sync' or 'async', got {args.vector!r}")
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)  # raw returns, before normalisation
    if args.norm_returns:
        envs = gym.wrappers.vector.NormalizeReward(envs, gamma=args.gamma)
    return envs


# -- training ---------------------------------------------------------------------------------------------

def train(args: Args) -> dict[str, Any]:
    """Train PPO with the curriculum of ``args``; returns the final evaluation and the run's statistics."""
    run_name = args.run_name or f"{args.game}_{args.curriculum}_s{args.seed}"
    run_dir = Path(args.run_dir) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    rng = np.random.default_rng(args.seed)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = max(1, batch_size // args.num_minibatches)
    num_updates = max(1, args.total_steps // batch_size)

    task_space = training_levels(args.num_levels, seed=args.seed)
    curriculum = make_curriculum(args, task_space)
    # magister: the curriculum, served to the envs' sync wrappers. env_timeout=None: the envs of this process
    # (or its workers) sit silent through every PPO update and evaluation, which may outlast any timeout
    server = serve(curriculum, env_timeout=None)
    envs = _vector_env(args, task_space, server.address)
    agent = Agent(int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    start_update, global_step, history = 0, 0, []
    if args.resume:
        ckpt = read_checkpoint(args.resume)  # runs no code from the files
        agent.load_state_dict(ckpt["agent"])
        optimizer.load_state_dict(ckpt["optimizer"])
        server.load_state_dict(ckpt["curriculum"])
        if args.norm_returns and ckpt.get("return_rms"):
            rms = envs.return_rms
            rms.mean, rms.var, rms.count = (np.float64(v) for v in ckpt["return_rms"])
        start_update, global_step, history = ckpt["update"], ckpt["global_step"], ckpt["history"]
        logger.info("resumed from %s at update %d (step %d)", args.resume, start_update, global_step)

    writer = None
    if args.tensorboard:
        from magister.integrations.loggers import summary_writer

        writer = summary_writer(run_dir)
        writer.add_text("args", json.dumps(dataclasses.asdict(args)))

    shape = (args.num_steps, args.num_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape, dtype=torch.uint8, device=device)
    actions = torch.zeros(shape, dtype=torch.long, device=device)
    logprobs, rewards, dones, values = (torch.zeros(shape, device=device) for _ in range(4))
    tasks = RolloutTasks(args.num_steps, args.num_envs, done_convention="before_step")  # magister

    next_obs_np, _ = envs.reset(seed=args.seed + 1000 * start_update)
    next_obs = torch.as_tensor(next_obs_np, device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    recent_returns: list[float] = []
    last_eval: dict[str, Any] = {}
    t0 = time.time()
    bar = None
    if args.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_updates, initial=start_update, desc=f"{args.game} {args.curriculum}",
                   unit="update")
    try:
        for update in range(start_update, num_updates):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = (1.0 - update / num_updates) * args.learning_rate
            for step in range(args.num_steps):
                global_step += args.num_envs
                obs[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
                tasks.record(step, info)  # magister: the step's level and train flag, from its info
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
                next_obs = torch.as_tensor(next_obs_np, device=device)
                next_done = torch.as_tensor(np.logical_or(term, trunc), dtype=torch.float32, device=device)
                if "episode" in info:
                    recent_returns += info["episode"]["r"][info["_episode"]].tolist()

            with torch.no_grad():  # GAE; dones[t] is the done flag seen before step t
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = torch.zeros(args.num_envs, device=device)
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal, nextvalues = 1.0 - next_done, next_value
                    else:
                        nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                    delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                    lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                    advantages[t] = lastgaelam
                returns = advantages + values
            if args.curriculum != "dr":  # magister: PLR's value-L1 scores, from the same rollout
                tasks.feed_scores(server, rewards.cpu(), values.cpu(), dones.cpu(), next_value.cpu(),
                                  next_done.cpu())

            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
            b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
            b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
            b_values = values.reshape(-1)
            b_inds = tasks.train_indices()  # magister: PLR⊥'s evaluation-only steps stay out of gradients
            stats: dict[str, float] = {}
            if len(b_inds) > 1:
                adv = b_advantages[torch.as_tensor(b_inds, device=device)]
                b_advantages = (b_advantages - adv.mean()) / (adv.std() + 1e-8)
                for _epoch in range(args.update_epochs):
                    rng.shuffle(b_inds)
                    for start in range(0, len(b_inds), minibatch_size):
                        mb = torch.as_tensor(b_inds[start:start + minibatch_size], device=device)
                        _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb],
                                                                                      b_actions[mb])
                        ratio = (newlogprob - b_logprobs[mb]).exp()
                        pg_loss = torch.max(-b_advantages[mb] * ratio, -b_advantages[mb] * torch.clamp(
                            ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                        newvalue = newvalue.view(-1)
                        v_loss = (newvalue - b_returns[mb]) ** 2
                        if args.clip_vloss:
                            v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef,
                                                                   args.clip_coef)
                            v_loss = torch.max(v_loss, (v_clipped - b_returns[mb]) ** 2)
                        v_loss = 0.5 * v_loss.mean()
                        loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                        optimizer.zero_grad()
                        loss.backward()
                        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                        optimizer.step()
                stats = {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": float(
                    entropy.mean().item())}

            is_last = update + 1 == num_updates
            row: dict[str, Any] = {"update": update + 1, "global_step": global_step,
                                   "train_fraction": len(b_inds) / batch_size,
                                   "mean_return": float(np.mean(recent_returns)) if recent_returns else None}
            recent_returns = recent_returns[-100:]
            if is_last or (args.eval_every and (update + 1) % args.eval_every == 0):
                last_eval = evaluate_agent(agent, args, device)
                row["eval"] = {k: {m: v[m] for m in ("return", "normalised")} for k, v in last_eval.items()}
            history.append(row)
            if writer is not None:
                writer.add_scalar("charts/sps", global_step / max(time.time() - t0, 1e-9), global_step)
                if row["mean_return"] is not None:
                    writer.add_scalar("charts/episode_return", row["mean_return"], global_step)
                writer.add_scalar("charts/train_fraction", row["train_fraction"], global_step)
                for k, v in stats.items():
                    writer.add_scalar(f"losses/{k}", v, global_step)
                for k, v in server.metrics().items():
                    if np.isscalar(v):
                        writer.add_scalar(f"curriculum/{k}", float(v), global_step)
                for split, r in row.get("eval", {}).items():
                    writer.add_scalar(f"eval/{split}_return", r["return"], global_step)
                    writer.add_scalar(f"eval/{split}_normalised", r["normalised"], global_step)
            if bar is not None:
                if row["mean_return"] is not None:
                    bar.set_postfix(episode_return=f"{row['mean_return']:.1f}")
                bar.update(1)
            if is_last:  # the workers send their held feedback on close: the last checkpoint includes it
                envs.close()
            if is_last or (args.checkpoint_every and (update + 1) % args.checkpoint_every == 0):
                rms = envs.return_rms if args.norm_returns else None
                state = {"curriculum": server.state_dict(), "update": update + 1, "global_step": global_step,
                         "history": history, "args": dataclasses.asdict(args),
                         "return_rms": [float(rms.mean), float(rms.var), float(rms.count)] if rms else None}
                write_checkpoint(run_dir / "checkpoint.pt",
                                 {"agent": agent.state_dict(), "optimizer": optimizer.state_dict()}, state)
    finally:
        if bar is not None:
            bar.close()
        envs.close()
        server.close()
        if writer is not None:
            writer.close()
    result = {"run_dir": str(run_dir), "global_step": global_step, "seconds": time.time() - t0,
              "eval": last_eval, "curriculum": {k: float(v) for k, v in curriculum.metrics().items()
                                                if np.isscalar(v)}}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    return result


# -- the CPU-scale comparison -----------------------------------------------------------------------------

def compare(args: Args) -> str:
    """Train every (game, curriculum, seed) of ``args.games`` x ``args.curricula`` x ``args.seeds``; the
    comparison as text: each run's returns, then normalised test and train returns with bootstrap intervals
    over the seeds."""
    # scores[split][curriculum]: runs (seeds) x tasks (games), the layout of magister.evaluation
    scores: dict[str, dict[str, list[list[float]]]] = {"test": {}, "train": {}}
    rows, seconds = [], []
    for seed in args.seeds:
        for curriculum in args.curricula:
            per_game: dict[str, list[float]] = {"test": [], "train": []}
            for game in args.games:
                run = dataclasses.replace(args, game=game, curriculum=curriculum, seed=seed, run_name="",
                                          write_results=False, resume="")
                result = train(run)
                ev = result["eval"]
                seconds.append(result["seconds"])
                for split in ("test", "train"):
                    per_game[split].append(ev[split]["normalised"])
                rows.append(f"{game:>10} {curriculum:>10} {seed:>4} | {ev['test']['return']:>11.2f} "
                            f"{ev['test']['normalised']:>10.3f} | {ev['train']['return']:>12.2f} "
                            f"{ev['train']['normalised']:>10.3f} | {result['seconds']:>5.0f}")
            for split in ("test", "train"):
                scores[split].setdefault(curriculum, []).append(per_game[split])
    est = {split: interval_estimates({c: np.array(v) for c, v in scores[split].items()}, ("mean",))
           for split in ("test", "train")}
    out = [
        f"{len(args.seeds)} seeds x {len(args.curricula)} curricula x {len(args.games)} game(s), "
        f"{args.total_steps} env steps per run ({args.num_envs} envs, {args.distribution_mode} mode, "
        f"{args.num_levels} training levels);",
        f"evaluation: one episode on each of {args.eval_levels} levels of the full distribution (test) and "
        f"of {args.eval_levels} training levels (train);",
        "returns min-max normalised by the Procgen paper's per-game bounds; mean wall time per run "
        f"{np.mean(seconds):.0f} s.",
        "",
        f"{'game':>10} {'curriculum':>10} {'seed':>4} | {'test return':>11} {'normalised':>10} | "
        f"{'train return':>12} {'normalised':>10} | {'s':>5}",
        *rows,
        "",
        "normalised return, mean over games and seeds [95% stratified bootstrap interval over the seeds]:",
        *(f"{c:>10}: test {format_estimate(est['test'][c]['mean'])}, "
          f"train {format_estimate(est['train'][c]['mean'])}" for c in args.curricula),
    ]
    if "plr" in args.curricula and "dr" in args.curricula and len(args.seeds) > 1:
        p = probability_of_improvement(np.array(scores["test"]["plr"]), np.array(scores["test"]["dr"]))
        out.append(f"P(a PLR run's normalised test return > a DR run's): {format_estimate(p)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``--help`` lists the flags."""
    args = parse_dataclass(Args, argv, prog=f"python -m {MODULE}", description=__doc__.splitlines()[0],
                           epilog="Needs the Procgen virtualenv: bash benchmarks/_procgen_env.sh "
                                  ".venvs/procgen")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:  # (the command line gives tuples as strings)
        args = dataclasses.replace(args, seeds=tuple(int(s) for s in args.seeds))
    except ValueError:
        raise SystemExit(f"--seeds takes integers, got {' '.join(map(str, args.seeds))}") from None
    for name in (args.curriculum, *args.curricula):
        if name not in CURRICULA:
            raise SystemExit(f"unknown curriculum {name!r}; expected one of {CURRICULA}")
    if args.write_results:
        from magister.examples import results

        results.check_section(results.RESULTS_PAGE, "procgen-plr")
        table = compare(args)
        print(table)
        command = results.command_line(None if argv is None else ["ppo_plr", *argv], module=MODULE)
        results.write_section(results.RESULTS_PAGE, "procgen-plr", results.text_block(table), command)
        return {"table": table}
    result = train(args)
    ev = result["eval"]
    print(f"{result['global_step']} steps in {result['seconds']:.0f}s; normalised return: test "
          f"{ev['test']['normalised']:.3f}, train {ev['train']['normalised']:.3f} (return test "
          f"{ev['test']['return']:.2f}, train {ev['train']['return']:.2f})" if ev else
          f"{result['global_step']} steps: nothing left to train")
    return result


if __name__ == "__main__":
    main()
