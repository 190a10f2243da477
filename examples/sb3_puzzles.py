"""Stable-Baselines3 PPO / MaskablePPO on logic puzzles with a magister curriculum.

Run ``python -m magister.examples.sb3_puzzles --help`` for the options. A typical run::

    python -m magister.examples.sb3_puzzles --puzzle flip --size 3x3c --algo maskable --total-steps 50000

The training code is SB3's own; magister adds four things (marked ``# magister:`` below):

1. a curriculum (PLR by default, scored by value L1) served with :func:`~magister.sync.zmq_server.serve`;
2. each SB3 worker env is a :class:`~magister.examples.puzzles.task.PuzzleTaskWrapper` (applies a task on
   reset) inside a :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` given
   ``server.address``: it takes the next task on every reset and reports each finished episode;
3. :class:`~magister.integrations.sb3.CurriculumCallback` computes PLR scores from SB3's rollout buffer at the
   end of every rollout and logs the curriculum's metrics with SB3's logger;
4. (MaskablePPO) nothing: sb3-contrib's ``get_action_masks`` reaches the puzzle's ``action_masks`` through
   the wrappers with ``get_wrapper_attr``.

The task space holds the scramble-depth ladder of one board size (:func:`~magister.examples.puzzles.task.
depth_ladder`) over ``--train-seeds`` instance seeds; PLR learns which instances have the largest value
errors and replays them.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from magister.curricula.base import Curriculum
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.examples.puzzles.task import (
    PUZZLES,
    PuzzleTaskSpace,
    PuzzleTaskWrapper,
    depth_ladder,
    make_puzzle_env,
)
from magister.integrations.sb3 import CurriculumCallback
from magister.sync.zmq_server import CurriculumServer, serve

logger = logging.getLogger(__name__)

__all__ = ["SB3Result", "make_curriculum", "make_task_space", "make_vec_env", "train"]

#: Curricula selectable with ``--curriculum``.
CURRICULA = ("plr", "robust-plr", "dr")


@dataclass
class SB3Result:
    """What :func:`train` returns: the model, the curriculum's final metrics and the callback's counters."""

    model: Any
    metrics: dict[str, float]
    num_rollouts: int
    num_feeds: int
    curriculum_state: dict[str, Any]


def make_task_space(puzzle: str, size: str, train_seeds: int, seed: int = 0) -> PuzzleTaskSpace:
    """The scramble-depth ladder of ``size`` over seeds ``[0, train_seeds)``, boards no larger than ``size``.

    >>> make_task_space("flip", "3x3c", 10).choices[0]
    (0, (3, 3, 0, 1))
    """
    if puzzle not in PUZZLES:
        raise ValueError(f"unknown puzzle {puzzle!r}; expected one of {tuple(PUZZLES)}")
    w, h = PUZZLES[puzzle].params_cls.parse(size).size
    return PuzzleTaskSpace({puzzle: depth_ladder(puzzle, size)}, seed_range=(0, train_seeds),
                           max_size=(w, h), seed=seed)


def make_curriculum(name: str, task_space: PuzzleTaskSpace, seed: int = 0) -> Curriculum:
    """``plr`` (value L1, replay probability 0.5: the puzzle space is unbounded), ``robust-plr`` or ``dr``."""
    if name == "plr":
        from magister.curricula.plr import PLR

        return PLR(task_space, score="value_l1", replay_prob=0.5, seed=seed)
    if name == "robust-plr":
        from magister.curricula.plr import RobustPLR

        return RobustPLR(task_space, seed=seed)
    if name == "dr":
        from magister.curricula.domain_randomization import DomainRandomization

        return DomainRandomization(task_space, seed=seed)
    raise ValueError(f"unknown curriculum {name!r}; expected one of {CURRICULA}")


def make_vec_env(
    puzzle: str, task_space: PuzzleTaskSpace, address: str, num_envs: int, vec: str = "subproc",
    start_method: str | None = None,
) -> VecEnv:
    """``num_envs`` synced puzzle envs in an SB3 ``SubprocVecEnv`` (``vec="subproc"``) or ``DummyVecEnv``."""

    def make_env() -> gym.Env:
        env = PuzzleTaskWrapper(make_puzzle_env(puzzle, task_space), task_space)
        env = GymnasiumSyncWrapper(env, address)  # magister: tasks from, feedback to, the curriculum
        return Monitor(env)

    fns = [make_env for _ in range(num_envs)]
    if vec == "subproc":
        return SubprocVecEnv(fns, start_method=start_method)
    if vec == "dummy":
        return DummyVecEnv(fns)
    raise ValueError(f"vec must be 'subproc' or 'dummy', got {vec!r}")


def train(
    puzzle: str = "flip",
    size: str = "3x3c",
    *,
    algo: str = "maskable",
    curriculum: str = "plr",
    total_steps: int = 20_000,
    num_envs: int = 4,
    n_steps: int = 128,
    batch_size: int = 128,
    n_epochs: int = 4,
    hidden: int = 64,
    train_seeds: int = 100,
    vec: str = "subproc",
    start_method: str | None = None,
    seed: int = 0,
    torch_threads: int = 1,
    tensorboard_log: str | None = None,
    verbose: int = 0,
) -> SB3Result:
    """Train SB3 ``PPO`` (``algo="ppo"``) or sb3-contrib ``MaskablePPO`` (``"maskable"``) with a curriculum.

    ``torch_threads`` caps torch's intra-op threads (small networks on a busy machine run far faster on one).
    """
    import torch

    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    if algo == "maskable":
        from sb3_contrib import MaskablePPO as Algo
    elif algo == "ppo":
        from stable_baselines3 import PPO as Algo
    else:
        raise ValueError(f"algo must be 'ppo' or 'maskable', got {algo!r}")
    task_space = make_task_space(puzzle, size, train_seeds, seed)
    cur = make_curriculum(curriculum, task_space, seed)
    server: CurriculumServer = serve(cur)  # magister: the curriculum's endpoint
    env = None
    try:
        env = make_vec_env(puzzle, task_space, server.address, num_envs, vec, start_method)
        model = Algo("MultiInputPolicy", env, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                     policy_kwargs={"net_arch": [hidden, hidden]}, seed=seed, device="cpu",
                     tensorboard_log=tensorboard_log, verbose=verbose)
        callback = CurriculumCallback(server)  # magister: PLR scores from the rollout buffer, metrics
        model.learn(total_steps, callback=callback)
    finally:
        if env is not None:
            env.close()  # the workers report unfinished tasks before the server stops
        metrics = server.metrics()
        state = server.state_dict()
        server.close()
    return SB3Result(model, metrics, callback.num_rollouts, callback.num_feeds, state)


def main(argv: list[str] | None = None) -> SB3Result:
    """Command line: ``python -m magister.examples.sb3_puzzles --help``."""
    p = argparse.ArgumentParser(prog="python -m magister.examples.sb3_puzzles",
                                description=__doc__.splitlines()[0],
                                epilog="Needs the 'sb3' extra (Stable-Baselines3, sb3-contrib, torch): pip "
                                       "install 'magister[sb3]'; --tensorboard-log also needs TensorBoard "
                                       "(extra 'examples').",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--puzzle", default="flip", choices=tuple(PUZZLES))
    p.add_argument("--size", default="3x3c", help="board parameters whose depth ladder is the task space")
    p.add_argument("--algo", default="maskable", choices=("ppo", "maskable"))
    p.add_argument("--curriculum", default="plr", choices=CURRICULA)
    p.add_argument("--total-steps", type=lambda s: int(float(s)), default=20_000)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--n-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--train-seeds", type=int, default=100)
    p.add_argument("--vec", default="subproc", choices=("subproc", "dummy"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--tensorboard-log", default=None, help="directory for SB3's TensorBoard logs")
    args = p.parse_args(argv)
    if args.tensorboard_log:  # SB3 imports it when its logger starts: check now, not mid-run
        from magister.examples._cli import require

        require({"tensorboard": "examples"}, "python -m magister.examples.sb3_puzzles --tensorboard-log")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = train(args.puzzle, args.size, algo=args.algo, curriculum=args.curriculum,
                   total_steps=args.total_steps, num_envs=args.num_envs, n_steps=args.n_steps,
                   train_seeds=args.train_seeds, vec=args.vec, seed=args.seed,
                   torch_threads=args.torch_threads,
                   tensorboard_log=args.tensorboard_log, verbose=1)
    m = result.metrics
    logger.info("rollouts %d (scores fed %d), episodes reported %d, tasks sampled %d",
                result.num_rollouts, result.num_feeds, int(m.get("sync/total/episodes_applied", 0)),
                int(m.get("sync/total/tasks_sampled", 0)))
    for k in sorted(k for k in m if k.startswith(("plr/", "curriculum/"))):
        logger.info("  %s = %.4g", k, m[k])
    return result


if __name__ == "__main__":
    main()
