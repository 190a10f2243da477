"""A CleanRL-style PPO on MiniGrid with PLR over level seeds (task = the seed ``reset(seed=s)`` plays).

Run ``python -m magister.examples.minigrid.cleanrl_plr --help`` for the options. The PLR paper's MiniGrid
setting (Jiang et al. 2021, MultiRoom-N4-Random, 4,000 training levels)::

    python -m magister.examples.minigrid.cleanrl_plr --num-levels 4000 --curriculum plr \\
        --learning-rate 7e-4 --update-epochs 4 --total-timesteps 1e8

The loop is :mod:`magister.examples.cleanrl_ppo`'s (its :class:`~magister.examples.cleanrl_ppo.Agent`, an MLP
on the flattened 7 x 7 x 3 egocentric view, and its PPO update), with what a researcher's run needs around
it: a tqdm bar, TensorBoard logs (``--run-dir``), checkpoints every ``--checkpoint-every`` updates that
``--resume`` continues from, and a held-out evaluation on seeds never trained on
(:func:`~magister.examples.minigrid.common.evaluate_policy`, i.e. :func:`magister.evaluation.evaluate`).
magister adds the same few things as in ``cleanrl_ppo.py``: the curriculum, each env wrapped
(:func:`~magister.examples.minigrid.common.make_env`: the level-seed task wrapper inside a
:class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper`), and a
:class:`~magister.integrations.RolloutTasks` that records each step's task and feeds PLR its value-L1
scores after GAE. With ``--vector sync`` (default) the envs live in this process and call the curriculum
directly; ``--vector async`` runs them in worker processes that reach it through :func:`magister.serve`.
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
from torch.distributions.categorical import Categorical

from magister.examples._checkpoint import read_checkpoint, write_checkpoint
from magister.examples._cli import parse_dataclass, require, trainer_needs
from magister.examples._ppo import ppo_update
from magister.examples.cleanrl_ppo import Agent
from magister.examples.minigrid.common import (
    CURRICULA,
    DEFAULT_ENV,
    evaluate_policy,
    make_curriculum,
    make_env,
    make_task_spaces,
    summarise,
)
from magister.integrations import RolloutTasks
from magister.integrations.loggers import log_curriculum_metrics, summary_writer

logger = logging.getLogger(__name__)

__all__ = ["Args", "main", "train"]


@dataclass
class Args:
    """Options (each is a ``--flag``)."""

    env_id: str = DEFAULT_ENV
    """a procedurally generated MiniGrid env id (its level is a function of the reset seed)"""
    num_levels: int = 4000
    """training level seeds 0 .. N-1 (the PLR paper: 4,000 for MultiRoom-N4-Random)"""
    num_test_levels: int = 100
    """held-out seeds N .. N+M-1, never trained on"""
    curriculum: str = "plr"
    """plr, robust-plr or dr (uniform over the training seeds)"""
    temperature: float = 0.1
    """PLR's rank temperature β (paper: 0.1)"""
    staleness_coef: float = 0.3
    """PLR's staleness weight ρ (paper, MiniGrid: 0.3)"""
    seed: int = 1
    total_timesteps: int = 100_000
    learning_rate: float = 7e-4
    """Adam's step size (the PLR paper's MiniGrid runs: 7e-4)"""
    num_envs: int = 8
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    """PPO epochs per rollout (the PLR paper's MiniGrid runs: 4)"""
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    max_steps: int = 0
    """MiniGrid's episode step limit (0: the env's own)"""
    vector: str = "sync"
    """sync (envs in this process) or async (worker processes, the curriculum behind magister.serve)"""
    eval_every: int = 0
    """held-out evaluation every N updates (0: only at the end)"""
    eval_episodes: int = 1
    """episodes per held-out seed"""
    checkpoint_every: int = 10
    """write a checkpoint every N updates (0: only at the end)"""
    resume: str = ""
    """checkpoint to resume from: a checkpoint.pt (its checkpoint.state next to it)"""
    run_dir: str = "runs/minigrid"
    run_name: str = ""
    tensorboard: bool = True
    progress: bool = True
    torch_threads: int = 1


def make_vector_env(args: Args, task_space: Any, source: Any) -> gym.vector.VectorEnv:
    """``num_envs`` synced level-seed envs, ``SAME_STEP`` autoreset (the semantics the loop assumes)."""
    max_steps = args.max_steps or None
    fns = [lambda: make_env(args.env_id, task_space, source, max_steps) for _ in range(args.num_envs)]
    cls = gym.vector.SyncVectorEnv if args.vector == "sync" else gym.vector.AsyncVectorEnv
    return cls(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def sampling_policy(agent: Agent) -> Callable[[Any, dict[str, Any]], np.ndarray]:
    """The agent's stochastic policy as a batched ``policy(obs, info) -> actions`` for evaluation."""

    @torch.no_grad()
    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(len(obs), -1)
        return Categorical(logits=agent.actor(x)).sample().numpy()

    return policy


def train(args: Args, step_hook: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run PPO with the curriculum of ``args``; ``step_hook(infos)`` (if given) sees every step's infos.

    Returns the step count, the finished episodes' returns, the held-out evaluation and the curriculum's
    final metrics and state."""
    if args.vector not in ("sync", "async"):
        raise ValueError(f"vector must be 'sync' or 'async', got {args.vector!r}")
    if args.curriculum not in CURRICULA:
        raise ValueError(f"unknown curriculum {args.curriculum!r}; expected one of {CURRICULA}")
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    run_dir = Path(args.run_dir) / (args.run_name or f"{args.env_id}_{args.curriculum}_s{args.seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    batch_size = args.num_envs * args.num_steps
    num_iterations = max(1, args.total_timesteps // batch_size)

    task_space, held_out = make_task_spaces(args.num_levels, args.num_test_levels)
    curriculum = make_curriculum(args.curriculum, task_space, args.seed, temperature=args.temperature,
                                 staleness_coef=args.staleness_coef, gamma=args.gamma,
                                 gae_lambda=args.gae_lambda)
    server = None
    if args.vector == "async":
        from magister import serve

        server = serve(curriculum)
    fed = server if server is not None else curriculum  # what scores, metrics and checkpoints go through
    envs = make_vector_env(args, task_space, server.address if server is not None else curriculum)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n), args.hidden)
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

    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    tasks = RolloutTasks(args.num_steps, args.num_envs, done_convention="before_step")  # magister:

    episode_returns: list[float] = []
    episode_success: list[float] = []
    ep_return = np.zeros(args.num_envs)
    last_eval: dict[str, float] = {}
    t0 = time.time()
    bar = None
    if args.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_iterations, initial=start, unit="update", desc=args.curriculum)
    try:
        next_obs, infos = envs.reset(seed=args.seed)
        if step_hook is not None:
            step_hook(infos)
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32).reshape(args.num_envs, -1)
        next_done = torch.zeros(args.num_envs)
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
                next_obs, reward, term, trunc, infos = envs.step(action.numpy())
                if step_hook is not None:
                    step_hook(infos)
                tasks.record(step, infos)  # magister: the step's task and train flag
                done = np.logical_or(term, trunc)
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs = torch.as_tensor(next_obs, dtype=torch.float32).reshape(args.num_envs, -1)
                next_done = torch.as_tensor(done, dtype=torch.float32)
                ep_return += reward
                for i in np.flatnonzero(done):
                    episode_returns.append(float(ep_return[i]))
                    episode_success.append(float(infos["final_info"]["task_progress"][i]))
                ep_return[done] = 0.0
            stats = ppo_update(args, agent, optimizer, rng, tasks, obs, actions, logprobs, rewards, dones,
                               values, next_obs, next_done, fed if args.curriculum != "dr" else None)
            row: dict[str, Any] = {"update": iteration, "global_step": global_step,
                                   "return": _recent(episode_returns), "success": _recent(episode_success)}
            is_last = iteration == num_iterations
            if is_last or (args.eval_every and iteration % args.eval_every == 0):
                last_eval = summarise(evaluate_policy(sampling_policy(agent), args.env_id, held_out,
                                                      episodes=args.eval_episodes, seed=args.seed,
                                                      max_steps=args.max_steps or None))
                row.update(last_eval)
            history.append(row)
            if writer is not None:
                _log(writer, row, stats, fed, global_step, time.time() - t0)
            if bar is not None:
                bar.set_postfix(ret=row["return"] or 0.0, success=row["success"] or 0.0)
                bar.update(1)
            if is_last:  # workers send their held feedback on close: the last checkpoint includes it
                envs.close()
            if is_last or (args.checkpoint_every and iteration % args.checkpoint_every == 0):
                write_checkpoint(run_dir / "checkpoint.pt",
                                 {"agent": agent.state_dict(), "optimizer": optimizer.state_dict()},
                                 {"curriculum": fed.state_dict(), "iteration": iteration,
                                  "global_step": global_step, "history": history,
                                  "args": dataclasses.asdict(args)})
        metrics = fed.metrics()
        state = fed.state_dict()
    finally:
        if bar is not None:
            bar.close()
        envs.close()
        if server is not None:
            server.close()
        if writer is not None:
            writer.close()
    return {"global_step": global_step, "iterations": num_iterations, "episode_returns": episode_returns,
            "episode_success": episode_success, "eval": last_eval, "metrics": metrics,
            "curriculum_state": state, "agent": agent, "run_dir": str(run_dir), "history": history,
            "seconds": time.time() - t0}


def _recent(values: list[float], n: int = 50) -> float | None:
    return float(np.mean(values[-n:])) if values else None


def _log(writer: Any, row: dict[str, Any], stats: dict[str, float], fed: Any, step: int,
         seconds: float) -> None:
    for k, v in stats.items():
        writer.add_scalar(k, v, step)
    for k in ("return", "success"):
        if row.get(k) is not None:
            writer.add_scalar(f"charts/episodic_{k}", row[k], step)
    for k in ("eval/return", "eval/success"):
        if k in row:
            writer.add_scalar(k, row[k], step)
    writer.add_scalar("charts/sps", step / max(seconds, 1e-9), step)
    try:
        log_curriculum_metrics(fed.metrics(), step, writer)
    except Exception:  # diagnostics must never stop training
        logger.exception("curriculum metrics failed")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``--help`` lists the options."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    prog = "python -m magister.examples.minigrid.cleanrl_plr"
    args = parse_dataclass(Args, argv, prog=prog, description=__doc__.splitlines()[0],
                           epilog="Needs the 'examples' extra (torch, minigrid, tqdm, TensorBoard).")
    require(trainer_needs(args, "torch", "minigrid"), prog)
    result = train(args)
    ev = result["eval"]
    logger.info("%d steps in %.0fs, %d episodes; held-out (%d seeds): return %.3f, success %.3f; "
                "curriculum episodes %d", result["global_step"], result["seconds"],
                len(result["episode_returns"]), args.num_test_levels, ev["eval/return"], ev["eval/success"],
                int(result["metrics"].get("curriculum/episodes", 0)))
    return result


if __name__ == "__main__":
    main()
