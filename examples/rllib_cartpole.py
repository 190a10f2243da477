"""RLlib PPO on CartPole with a curriculum over the initial-state range (Ray backend, new API stack).

The reference paper's RLlib example (Syllabus, Sullivan et al., Supplementary E.1 and F.1): CartPole made
multi-task by a task wrapper whose task is the range the initial state is drawn from, and a curriculum that
widens that range over training, so the pole starts in ever more precarious states. Here the task is the
half-width ``h`` of :class:`~magister.examples.cartpole.CartPoleTask` (Gymnasium's default is 0.05; the
task space is ``Box(0, 0.2, shape=(1,))``) and the curriculum is
:class:`~magister.curricula.expanding_box.ExpandingBox`, starting at ``[0, 0.05]`` and reaching the full box
``[0, 0.2]`` linearly after ``--expand-fraction`` of the training steps.

The curriculum runs in a named Ray actor (:func:`~magister.sync.ray_server.serve_ray`); the env creator
(:func:`~magister.integrations.rllib.make_env_creator`) wraps each env of each env runner in a
:class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` pointed at the actor, and
:class:`~magister.integrations.rllib.MagisterCallbacks` sends each iteration's training results to the
curriculum and reports its range back in the results.

    python -m magister.examples.rllib_cartpole                   # one to two minutes on 2 CPU cores
    python -m magister.examples.rllib_cartpole --iterations 40 --num-env-runners 2
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import ray
from ray.rllib.algorithms.ppo import PPOConfig

from magister.curricula.base import Curriculum
from magister.curricula.expanding_box import ExpandingBox
from magister.examples.cartpole import DEFAULT_HALF_WIDTH, CartPoleTask, default_task_space
from magister.integrations.rllib import magister_callbacks, make_env_creator
from magister.sync.ray_server import serve_ray

logger = logging.getLogger(__name__)

__all__ = ["ENV_NAME", "build_config", "main", "make_curriculum", "make_task_env", "train"]

#: The name the wrapped env is registered under with Ray Tune's registry.
ENV_NAME = "magister_cartpole"


def make_task_env(env_config: Mapping[str, Any] | None = None) -> gym.Env:
    """One CartPole whose task is the initial-state half-width (runs on the env runners)."""
    return CartPoleTask(gym.make("CartPole-v1"), default_task_space())


def make_curriculum(
    total_steps: int, *, start_high: float = DEFAULT_HALF_WIDTH, expand_fraction: float = 0.8, seed: int = 0
) -> ExpandingBox:
    """ExpandingBox from ``[0, start_high]`` to ``[0, 0.2]`` over ``expand_fraction * total_steps`` steps."""
    if not 0.0 < expand_fraction <= 1.0:
        raise ValueError(f"expand_fraction must be in (0, 1], got {expand_fraction!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")
    duration = max(1, int(expand_fraction * total_steps))
    space = default_task_space(seed)
    return ExpandingBox(
        space, start_low=0.0, start_high=start_high, duration=duration, unit="steps", seed=seed
    )


def build_config(
    address: str,
    *,
    num_env_runners: int = 0,
    envs_per_runner: int = 2,
    batch_size: int = 1000,
    minibatch_size: int = 250,
    num_epochs: int = 6,
    lr: float = 3e-4,
    seed: int = 0,
) -> PPOConfig:
    """A PPO config (new API stack) whose envs take their tasks from the curriculum at ``address``."""
    make_env_creator(make_task_env, address, register_as=ENV_NAME)
    return (
        PPOConfig()
        .environment(ENV_NAME)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=envs_per_runner)
        .learners(num_learners=0)
        .training(
            lr=lr,
            train_batch_size_per_learner=batch_size,
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
            vf_loss_coeff=0.01,
        )
        .callbacks(magister_callbacks(address))
        .debugging(seed=seed)
    )


def _row(i: int, result: Mapping[str, Any]) -> dict[str, float]:
    runners = result.get("env_runners", {})
    cur = result.get("magister", {})
    return {
        "iteration": float(i),
        "episode_return_mean": float(runners.get("episode_return_mean", float("nan"))),
        "episodes": float(runners.get("num_episodes", 0)),
        "task_progress": float(runners.get("magister", {}).get("task_progress", float("nan"))),
        "range_high": float(cur.get("expanding_box/high_0", float("nan"))),
        "curriculum_episodes": float(cur.get("curriculum/episodes", 0)),
    }


def train(
    iterations: int = 8,
    *,
    num_env_runners: int = 0,
    envs_per_runner: int = 2,
    batch_size: int = 1000,
    minibatch_size: int = 250,
    num_epochs: int = 6,
    expand_fraction: float = 0.8,
    seed: int = 0,
    name: str = "magister_rllib_cartpole",
    curriculum: Curriculum | None = None,
) -> dict[str, Any]:
    """Train PPO with the expanding-range curriculum; returns per-iteration rows and the final metrics.

    Ray must already be initialised (``main`` does it). ``curriculum`` replaces the default
    :func:`make_curriculum` (any curriculum over the half-width space).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")
    if curriculum is None:
        curriculum = make_curriculum(iterations * batch_size, expand_fraction=expand_fraction, seed=seed)
    rows: list[dict[str, float]] = []
    with serve_ray(curriculum, name=name) as server:
        config = build_config(
            server.address,
            num_env_runners=num_env_runners,
            envs_per_runner=envs_per_runner,
            batch_size=batch_size,
            minibatch_size=min(minibatch_size, batch_size),
            num_epochs=num_epochs,
            seed=seed,
        )
        algo = config.build_algo()
        try:
            start = time.monotonic()
            for i in range(1, iterations + 1):
                row = _row(i, algo.train())
                rows.append(row)
                logger.info(
                    "iteration %d/%d  return %.1f  episodes %d  progress %.2f  initial-state range [0, %.3f]"
                    "  (%.0fs)",
                    i,
                    iterations,
                    row["episode_return_mean"],
                    row["episodes"],
                    row["task_progress"],
                    row["range_high"],
                    time.monotonic() - start,
                )
        finally:
            algo.stop()  # closes the envs: they return their unused tasks
        metrics = server.metrics()
    return {"rows": rows, "metrics": metrics}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Needs the 'rllib' extra: pip install 'magister[rllib]'.")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--num-env-runners", type=int, default=0)
    parser.add_argument("--envs-per-runner", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--minibatch-size", type=int, default=250)
    parser.add_argument("--num-epochs", type=int, default=6)
    parser.add_argument("--expand-fraction", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs for the local Ray instance")
    parser.add_argument(
        "--ray-address", default=None, help="join this Ray cluster (e.g. 'auto') instead of starting one"
    )
    args = parser.parse_args(argv)
    started = not ray.is_initialized()
    if started:
        if args.ray_address is None:
            ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False)
        else:
            ray.init(address=args.ray_address)
    try:
        out = train(
            args.iterations,
            num_env_runners=args.num_env_runners,
            envs_per_runner=args.envs_per_runner,
            batch_size=args.batch_size,
            minibatch_size=args.minibatch_size,
            num_epochs=args.num_epochs,
            expand_fraction=args.expand_fraction,
            seed=args.seed,
        )
    finally:
        if started:
            ray.shutdown()
    m = out["metrics"]
    logger.info(
        "curriculum: %d episodes, final range [%.3f, %.3f]; tasks sampled %d, consumed %d, returned %d, "
        "in flight %d",
        m["curriculum/episodes"],
        m["expanding_box/low_0"],
        m["expanding_box/high_0"],
        m["sync/total/tasks_sampled"],
        m["sync/total/tasks_consumed"],
        m["sync/total/tasks_returned"],
        m["sync/total/tasks_in_flight"],
    )
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
