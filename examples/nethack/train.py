"""A small CleanRL-style PPO on NetHack game seeds or MiniHack env ids with a learning-progress curriculum.

Runs in the NetHack virtualenv (``bash benchmarks/_nethack_env.sh .venvs/nethack``; ``nle`` pins
``gymnasium==1.2.0``). Run ``.venvs/nethack/bin/python -m magister.examples.nethack.train --help``. Two task
spaces (:mod:`~magister.examples.nethack.common`):

* ``--task-space seeds``: task = NetHack game seed on ``NetHackScore-v0`` (Syllabus's setting: 200 training
  seeds, ``no_progress_timeout`` 150), held-out evaluation on the next ``--num-test-seeds`` seeds;
* ``--task-space minihack``: task = MiniHack env id (``--minihack-ids``), evaluation on every id.

The agent is a tiny version of NLE's baseline network: embeddings of the glyphs in a 9 x 9 crop around the
hero through two small convolutions, the bottom-line statistics (``blstats``, log-scaled) through a linear
layer, then the policy and value heads. It is small enough to train on a laptop CPU, not to play NetHack
well; put your own agent in :class:`CropAgent`'s place (any module with ``get_value`` and
``get_action_and_value`` on the flat observation rows :func:`observe` builds). The PPO update is
CleanRL's (:func:`magister.examples._ppo.ppo_update`). Around it: a tqdm bar, TensorBoard logs, checkpoints
that ``--resume`` continues from, and held-out evaluation through :func:`magister.evaluation.evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

from magister.evaluation import Suite
from magister.examples._checkpoint import read_checkpoint, write_checkpoint
from magister.examples._cli import parse_dataclass, require, trainer_needs
from magister.examples._ppo import ppo_update
from magister.examples.cleanrl_ppo import layer_init
from magister.examples.nethack.common import (
    MINIHACK_IDS,
    evaluate_policy,
    make_curriculum,
    make_minihack_env,
    make_minihack_space,
    make_seed_env,
    make_seed_spaces,
)
from magister.integrations import RolloutTasks
from magister.integrations.loggers import log_curriculum_metrics, summary_writer

logger = logging.getLogger(__name__)

__all__ = ["Args", "CropAgent", "main", "observe", "train"]

CROP = 9  # side of the glyph crop around the hero
N_BLSTATS = 27
MAX_GLYPH = 5976  # nle.nethack.MAX_GLYPH on nle 1.3.0 (checked at run time)


@dataclass
class Args:
    """Options (each is a ``--flag``)."""

    task_space: str = "seeds"
    """seeds (NetHack game seeds on NetHackScore-v0) or minihack (MiniHack env ids)"""
    num_seeds: int = 200
    """training game seeds 0 .. N-1 (Syllabus: 200, 4,000 or 80,000)"""
    num_test_seeds: int = 20
    """held-out game seeds N .. N+M-1"""
    minihack_ids: tuple[str, ...] = MINIHACK_IDS
    """MiniHack env ids (--task-space minihack)"""
    no_progress_timeout: int = 150
    """truncate after this many steps without the in-game turn counter moving (Syllabus: 150)"""
    score_target: float = 100.0
    """game seeds: the in-game score counted as full progress for learning progress"""
    max_episode_steps: int = 5000
    """NetHack's episode step limit (MiniHack keeps each env's own unless --minihack-max-steps)"""
    minihack_max_steps: int = 0
    """MiniHack's episode step limit (0: each env's own)"""
    ema_alpha: float = 0.1
    """learning progress: EMA rate (paper: 0.1)"""
    p_theta: float = 0.1
    """learning progress: reweighting p_theta (paper: 0.1)"""
    lp_update_period: int = 25
    """learning progress: success observations per EMA step (paper: 25)"""
    seed: int = 1
    total_timesteps: int = 100_000
    learning_rate: float = 2.5e-4
    num_envs: int = 8
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    vector: str = "sync"
    """sync (envs in this process) or async (worker processes, the curriculum behind magister.serve)"""
    eval_episodes: int = 1
    """episodes per held-out task at the end"""
    eval_every: int = 0
    """held-out evaluation every N updates (0: only at the end)"""
    checkpoint_every: int = 10
    """write a checkpoint every N updates (0: only at the end)"""
    resume: str = ""
    """checkpoint to resume from: a checkpoint.pt (its checkpoint.state next to it)"""
    run_dir: str = "runs/nethack"
    run_name: str = ""
    tensorboard: bool = True
    progress: bool = True
    torch_threads: int = 1


def observe(obs: dict[str, np.ndarray]) -> torch.Tensor:
    """Flat float rows for a batch of NLE observations: the 9 x 9 glyph crop around the hero (glyph ids, or
    ``MAX_GLYPH`` off the map) followed by the 27 blstats."""
    glyphs = torch.as_tensor(np.asarray(obs["glyphs"]), dtype=torch.long)
    bl = torch.as_tensor(np.asarray(obs["blstats"]), dtype=torch.float32)
    n, r = glyphs.shape[0], CROP // 2
    padded = nn.functional.pad(glyphs, (r, r, r, r), value=MAX_GLYPH)
    x, y = bl[:, 0].long(), bl[:, 1].long()  # NLE_BL_X, NLE_BL_Y
    off = torch.arange(CROP)
    rows, cols = (y[:, None] + off)[:, :, None], (x[:, None] + off)[:, None, :]
    crop = padded[torch.arange(n)[:, None, None], rows, cols]
    return torch.cat([crop.reshape(n, -1).float(), bl], dim=1)


class CropAgent(nn.Module):
    """Glyph-crop embeddings and two convolutions, log-scaled blstats, policy and value heads."""

    def __init__(self, n_actions: int, embed: int = 16, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(MAX_GLYPH + 1, embed)
        self.conv = nn.Sequential(nn.Conv2d(embed, 32, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten())
        self.stats = nn.Sequential(layer_init(nn.Linear(N_BLSTATS, 64)), nn.ReLU())
        self.trunk = nn.Sequential(layer_init(nn.Linear(32 * CROP * CROP + 64, hidden)), nn.ReLU())
        self.actor = layer_init(nn.Linear(hidden, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(hidden, 1), std=1.0)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        crop = x[:, :CROP * CROP].long().reshape(-1, CROP, CROP)
        bl = x[:, CROP * CROP:]
        g = self.conv(self.embed(crop).permute(0, 3, 1, 2))
        s = self.stats(torch.sign(bl) * torch.log1p(bl.abs()))
        return self.trunk(torch.cat([g, s], dim=1))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(x))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        h = self.features(x)
        probs = Categorical(logits=self.actor(h))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(h)


def make_setup(args: Args) -> tuple[Any, Callable[[Any], gym.Env], Suite, Callable[[], gym.Env]]:
    """The training space, an env factory given a curriculum source, the held-out suite and its env
    factory."""
    if args.task_space == "seeds":
        space, held = make_seed_spaces(args.num_seeds, args.num_test_seeds)
        kw = {"max_episode_steps": args.max_episode_steps, "no_progress_timeout": args.no_progress_timeout,
              "score_target": args.score_target}
        return (space, lambda source: make_seed_env(space, source, **kw), Suite.of(held),
                lambda: make_seed_env(held, **kw))
    if args.task_space == "minihack":
        space = make_minihack_space(list(args.minihack_ids))
        steps = args.minihack_max_steps or None
        return (space, lambda source: make_minihack_env(space, source, max_episode_steps=steps),
                Suite.of(space), lambda: make_minihack_env(space, max_episode_steps=steps))
    raise ValueError(f"task_space must be 'seeds' or 'minihack', got {args.task_space!r}")


def sampling_policy(agent: CropAgent) -> Callable[[Any, dict[str, Any]], np.ndarray]:
    """The agent's stochastic policy as a batched ``policy(obs, info) -> actions`` for evaluation."""

    @torch.no_grad()
    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        return agent.get_action_and_value(observe(obs))[0].numpy()

    return policy


def train(args: Args, step_hook: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run PPO with learning progress over the task space of ``args``; ``step_hook(infos)`` (if given) sees
    every step's infos. Returns counters, the held-out evaluation and the curriculum's metrics and state."""
    import nle.nethack

    if int(nle.nethack.MAX_GLYPH) != MAX_GLYPH:
        raise RuntimeError(f"nle's MAX_GLYPH is {nle.nethack.MAX_GLYPH}, this agent expects {MAX_GLYPH}")
    if args.vector not in ("sync", "async"):
        raise ValueError(f"vector must be 'sync' or 'async', got {args.vector!r}")
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    run_dir = Path(args.run_dir) / (args.run_name or f"{args.task_space}_lp_s{args.seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    num_iterations = max(1, args.total_timesteps // (args.num_envs * args.num_steps))

    space, env_fn, suite, eval_env_fn = make_setup(args)
    curriculum = make_curriculum(space, args.seed, ema_alpha=args.ema_alpha, p_theta=args.p_theta,
                                 update_period=args.lp_update_period)
    server = None
    if args.vector == "async":
        from magister import serve

        server = serve(curriculum)
    fed = server if server is not None else curriculum
    source = server.address if server is not None else curriculum
    fns = [lambda: env_fn(source) for _ in range(args.num_envs)]
    cls = gym.vector.SyncVectorEnv if args.vector == "sync" else gym.vector.AsyncVectorEnv
    envs = cls(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = CropAgent(int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    start, global_step, history = 0, 0, []
    if args.resume:
        ckpt = read_checkpoint(args.resume)  # runs no code from the files
        agent.load_state_dict(ckpt["agent"])
        optimizer.load_state_dict(ckpt["optimizer"])
        fed.load_state_dict(ckpt["curriculum"])
        start, global_step, history = ckpt["iteration"], ckpt["global_step"], ckpt["history"]
        logger.info("resumed from %s at update %d (%d steps)", args.resume, start, global_step)
    writer = summary_writer(run_dir) if args.tensorboard else None
    if writer is not None:
        writer.add_text("args", json.dumps(dataclasses.asdict(args)))

    dim = CROP * CROP + N_BLSTATS
    obs = torch.zeros((args.num_steps, args.num_envs, dim))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    tasks = RolloutTasks(args.num_steps, args.num_envs, done_convention="before_step")  # magister:
    episode_returns: list[float] = []
    episode_progress: list[float] = []
    ep_return = np.zeros(args.num_envs)
    last_eval: dict[str, float] = {}
    t0 = time.time()
    bar = None
    if args.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_iterations, initial=start, unit="update", desc=args.task_space)
    try:
        raw, infos = envs.reset(seed=args.seed)
        if step_hook is not None:
            step_hook(infos)
        next_obs, next_done = observe(raw), torch.zeros(args.num_envs)
        for iteration in range(start + 1, num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            for step in range(args.num_steps):
                global_step += args.num_envs
                obs[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                raw, reward, term, trunc, infos = envs.step(action.numpy())
                if step_hook is not None:
                    step_hook(infos)
                tasks.record(step, infos)  # magister: the step's task
                done = np.logical_or(term, trunc)
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs, next_done = observe(raw), torch.as_tensor(done, dtype=torch.float32)
                ep_return += reward
                for i in np.flatnonzero(done):
                    episode_returns.append(float(ep_return[i]))
                    episode_progress.append(float(infos["final_info"]["task_progress"][i]))
                ep_return[done] = 0.0
            stats = ppo_update(args, agent, optimizer, rng, tasks, obs, actions, logprobs, rewards, dones,
                               values, next_obs, next_done)  # LP learns from episodes: no value scores
            row: dict[str, Any] = {"update": iteration, "global_step": global_step,
                                   "return": _recent(episode_returns), "progress": _recent(episode_progress)}
            is_last = iteration == num_iterations
            if is_last or (args.eval_every and iteration % args.eval_every == 0):
                result = evaluate_policy(sampling_policy(agent), eval_env_fn, suite,
                                         episodes=args.eval_episodes, seed=args.seed)
                last_eval = {"eval/return": float(result.per_task("return").mean()),
                             "eval/progress": float(result.per_task("progress").mean())}
                row.update(last_eval)
            history.append(row)
            if writer is not None:
                _log(writer, row, stats, fed, global_step)
            if bar is not None:
                bar.set_postfix(ret=row["return"] or 0.0, progress=row["progress"] or 0.0)
                bar.update(1)
            if is_last:  # workers send their held feedback on close: the last checkpoint includes it
                envs.close()
            if is_last or (args.checkpoint_every and iteration % args.checkpoint_every == 0):
                write_checkpoint(run_dir / "checkpoint.pt",
                                 {"agent": agent.state_dict(), "optimizer": optimizer.state_dict()},
                                 {"curriculum": fed.state_dict(), "iteration": iteration,
                                  "global_step": global_step, "history": history,
                                  "args": dataclasses.asdict(args)})
        metrics, state = fed.metrics(), fed.state_dict()
    finally:
        if bar is not None:
            bar.close()
        envs.close()
        if server is not None:
            server.close()
        if writer is not None:
            writer.close()
    return {"global_step": global_step, "iterations": num_iterations, "episode_returns": episode_returns,
            "episode_progress": episode_progress, "eval": last_eval, "metrics": metrics,
            "curriculum_state": state, "history": history, "run_dir": str(run_dir),
            "seconds": time.time() - t0}


def _recent(values: list[float], n: int = 50) -> float | None:
    return float(np.mean(values[-n:])) if values else None


def _log(writer: Any, row: dict[str, Any], stats: dict[str, float], fed: Any, step: int) -> None:
    for k, v in stats.items():
        writer.add_scalar(k, v, step)
    for k in ("return", "progress"):
        if row.get(k) is not None:
            writer.add_scalar(f"charts/episodic_{k}", row[k], step)
    for k in ("eval/return", "eval/progress"):
        if k in row:
            writer.add_scalar(k, row[k], step)
    try:
        log_curriculum_metrics(fed.metrics(), step, writer)
    except Exception:  # diagnostics must never stop training
        logger.exception("curriculum metrics failed")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``--help`` lists the options."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    prog = "python -m magister.examples.nethack.train"
    args = parse_dataclass(Args, argv, prog=prog, description=__doc__.splitlines()[0],
                           epilog="Needs nle and minihack: build their virtualenv with "
                                  "`bash benchmarks/_nethack_env.sh .venvs/nethack`.")
    require({**trainer_needs(args, "torch"), "nle": "(benchmarks/_nethack_env.sh)"}, prog)
    result = train(args)
    ev = result["eval"]
    logger.info("%d steps in %.0fs, %d episodes; held-out: return %.2f, progress %.3f; curriculum "
                "episodes %d", result["global_step"], result["seconds"], len(result["episode_returns"]),
                ev["eval/return"], ev["eval/progress"], int(result["metrics"].get("curriculum/episodes", 0)))
    return result


if __name__ == "__main__":
    main()
