"""Held-out evaluation suites and a runner that plays any policy over them on Gymnasium vector envs.

A :class:`Suite` is a fixed, ordered list of decoded tasks with names: the columns of a ``runs × tasks``
score matrix. Build one from any task space:

* :meth:`Suite.holdout`: a :class:`~magister.task_spaces.config.ConfigSpace`'s held-out set;
* :meth:`Suite.split`: the held-out part of ``space.split(holdout, seed)`` (any space with ``split``);
* :meth:`Suite.of`: every task of an enumerable space (e.g. a held-out space you built);
* :meth:`Suite.from_tasks`: an explicit list;
* :meth:`Suite.sample`: a fixed sample of a generative space (the same seed gives the same tasks).

:func:`evaluate` plays a policy on every task of a suite for ``episodes`` episodes each and returns an
:class:`EvalResult` (per-episode returns, lengths and final ``task_progress``). Tasks reach the envs only
through the standard hook ``reset(options={"task": task})`` of a
:class:`~magister.env_wrappers.task_wrapper.TaskWrapper`; no curriculum is involved, so none can learn from
evaluation episodes. An env built with a
:class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` would report them to its curriculum, so
:func:`evaluate` refuses one with a ``ValueError``: build the evaluation envs without it (the same task
wrapper, no sync wrapper). Every episode record carries ``train=False`` (the meaning of
``info["task_train"] = False``: evaluation-only data, never gradients).

>>> import gymnasium as gym
>>> from magister.env_wrappers.task_wrapper import TaskWrapper
>>> from magister.task_spaces import Discrete
>>> class Limit(TaskWrapper):            # task = the episode's step limit
...     def change_task(self, task): self.limit, self.t = task, 0
...     def step(self, action):
...         obs, r, term, trunc, info = super().step(action)
...         self.t += 1
...         return obs, r, term, trunc or self.t >= self.limit, info
>>> suite = Suite.from_tasks([2, 5], space=Discrete(tasks=[2, 5, 9]))
>>> make = lambda: Limit(gym.make("CartPole-v1"), Discrete(tasks=[2, 5, 9]))
>>> result = evaluate(lambda obs, info: [0] * len(obs), make, suite, episodes=3, num_envs=2, seed=0)
>>> result.returns.tolist()           # tasks x episodes: one reward per step until the limit
[[2.0, 2.0, 2.0], [5.0, 5.0, 5.0]]
>>> result.per_task("length").tolist()
[2.0, 5.0]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from ..task_spaces.base import TaskSpace

logger = logging.getLogger(__name__)

__all__ = ["EpisodeRecord", "EvalResult", "Policy", "Suite", "evaluate", "stack_runs"]

#: A batched policy: ``policy(obs, info) -> actions``, with the vector env's observation batch and info
#: dict (action masks, for instance), returning one action per env.
Policy = Callable[[Any, dict[str, Any]], Any]


@dataclass(frozen=True)
class Suite:
    """A fixed, ordered list of decoded tasks, each with a name (the columns of a score matrix)."""

    tasks: tuple[Any, ...]
    names: tuple[str, ...]
    space: TaskSpace | None = None

    def __post_init__(self) -> None:
        if len(self.tasks) == 0:
            raise ValueError("a suite needs at least one task")
        if len(self.names) != len(self.tasks):
            raise ValueError(f"a suite needs one name per task: {len(self.tasks)} tasks, "
                             f"{len(self.names)} names")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"task names must be unique, got {list(self.names)}")
        if self.space is not None:
            bad = [t for t in self.tasks if not self.space.contains(t)]
            if bad:
                raise ValueError(f"tasks {bad[:5]!r} are not in {self.space!r}")

    def __len__(self) -> int:
        return len(self.tasks)

    @classmethod
    def from_tasks(cls, tasks: Sequence[Any], names: Sequence[str] | None = None,
                   space: TaskSpace | None = None) -> Suite:
        """An explicit list of decoded tasks (names default to ``space.describe(task)`` or ``str(task)``)."""
        tasks = tuple(tasks)
        if names is None:
            names = [space.describe(t) if space is not None else str(t) for t in tasks]
            if len(set(names)) != len(names):  # descriptions may collide: number them
                names = [f"{i}: {n}" for i, n in enumerate(names)]
        return cls(tasks, tuple(str(n) for n in names), space)

    @classmethod
    def of(cls, space: TaskSpace, names: Sequence[str] | None = None) -> Suite:
        """Every task of an enumerable ``space``, in its order."""
        return cls.from_tasks(space.tasks, names, space)

    @classmethod
    def holdout(cls, space: TaskSpace) -> Suite:
        """The held-out tasks of a :class:`~magister.task_spaces.config.ConfigSpace` (never sampled for
        training)."""
        held = getattr(space, "holdout", None)
        if not isinstance(held, list):
            raise TypeError(f"{space!r} has no held-out task list (a ConfigSpace with holdout=...); use "
                            f"Suite.split(space, holdout) instead")
        if not held:
            raise ValueError(f"{space!r} has no held-out tasks (pass holdout=[...] or use Suite.split)")
        return cls.from_tasks(held, space=space.heldout)  # the training space does not contain them

    @classmethod
    def split(cls, space: TaskSpace, holdout: float | int | Sequence[Any], seed: int | None = 0
              ) -> tuple[TaskSpace, Suite]:
        """``(train space, held-out suite)`` from ``space.split(holdout, seed)``: train on the first, evaluate
        on the second."""
        train, held = space.split(holdout, seed=seed)
        return train, cls.of(held)

    @classmethod
    def sample(cls, space: TaskSpace, n: int, seed: int = 0) -> Suite:
        """``n`` tasks drawn from a (generative) ``space`` with a generator of its own seeded by ``seed``,
        so the same seed gives the same suite and the space's own generator is left untouched."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        encoded = space.sample_encoded(int(n), rng=np.random.default_rng(seed))
        tasks = [space.decode(e) for e in encoded]
        return cls(tuple(tasks), tuple(f"{i}" for i in range(len(tasks))), space)


@dataclass(frozen=True)
class EpisodeRecord:
    """One evaluation episode (``train`` is always False: evaluation-only data)."""

    task_index: int
    ret: float
    length: int
    progress: float
    train: bool = False


@dataclass
class EvalResult:
    """What :func:`evaluate` returns: ``tasks × episodes`` arrays of returns, lengths and final progress
    (``task_progress`` of the last step; ``nan`` where the env reports none)."""

    suite: Suite
    returns: np.ndarray
    lengths: np.ndarray
    progress: np.ndarray
    episodes: list[EpisodeRecord] = field(default_factory=list)

    def per_task(self, what: str = "return") -> np.ndarray:
        """Mean per task of ``"return"``, ``"length"``, ``"progress"`` or ``"success"`` (progress >= 1)."""
        data = {"return": self.returns, "length": self.lengths, "progress": self.progress}
        if what == "success":
            if np.isnan(self.progress).any():
                raise ValueError("success needs task_progress in every episode's info (a TaskWrapper's "
                                 "task_progress hook)")
            return (self.progress >= 1.0).mean(axis=1)
        if what not in data:
            raise ValueError(f"what must be 'return', 'length', 'progress' or 'success', got {what!r}")
        return np.asarray(data[what], dtype=np.float64).mean(axis=1)

    def as_dict(self, what: str = "return") -> dict[str, float]:
        """``{task name: mean}`` (see :meth:`per_task`)."""
        return dict(zip(self.suite.names, self.per_task(what).tolist()))


def stack_runs(results: Sequence[EvalResult], what: str = "return") -> np.ndarray:
    """A ``runs × tasks`` matrix from the results of several runs (seeds) on the same suite."""
    if not results:
        raise ValueError("stack_runs needs at least one result")
    names = results[0].suite.names
    for r in results[1:]:
        if r.suite.names != names:
            raise ValueError("every result must come from the same suite (same task names, same order)")
    return np.stack([r.per_task(what) for r in results])


def _has_sync_wrapper(env: gym.Env) -> bool:
    from ..env_wrappers.sync_wrappers import GymnasiumSyncWrapper

    e: Any = env
    while e is not None:
        if isinstance(e, GymnasiumSyncWrapper):
            return True
        e = getattr(e, "env", None)
    return False


def evaluate(policy: Policy, make_env: Callable[[], gym.Env], suite: Suite, *, episodes: int = 10,
             num_envs: int = 8, seed: int = 0, max_steps: int = 100_000, vector: str = "sync") -> EvalResult:
    """Play ``policy`` on every task of ``suite``, ``episodes`` episodes each, on a vector env of
    ``num_envs`` envs from ``make_env`` (each a task wrapper: tasks are set with
    ``reset(options={"task": task})``); ``vector="async"`` runs them in worker processes.

    ``policy(obs, info)`` gets the batch of observations and the vector env's latest info dict (after an env
    was reset on its next task, that reset's info).

    Episodes are dealt to the envs in task order; each starts from its own reset seed (``seed`` plus its
    index in the suite's episode list), so a result does not depend on ``num_envs``. The vector env runs
    without autoreset: an env that ends an episode is reset on its next task before the next step.
    ``max_steps`` bounds the vector steps (``RuntimeError`` when an episode never ends).

    Raises:
        ValueError: ``make_env`` builds an env with a sync wrapper (a curriculum would learn from
            evaluation episodes), or ``episodes``/``num_envs`` is not a positive int.
    """
    for name, v in (("episodes", episodes), ("num_envs", num_envs), ("max_steps", max_steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if vector not in ("sync", "async"):
        raise ValueError(f"vector must be 'sync' or 'async', got {vector!r}")
    probe = make_env()  # checked in this process, whatever the vector env
    try:
        if _has_sync_wrapper(probe):
            raise ValueError("make_env builds a GymnasiumSyncWrapper: its curriculum would learn from "
                             "the evaluation episodes. Build the evaluation envs without it.")
    finally:
        probe.close()
    queue = [(i, e) for i in range(len(suite)) for e in range(int(episodes))]
    n = min(int(num_envs), len(queue))
    cls = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
    envs = cls([make_env for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    try:
        returns = np.zeros((len(suite), int(episodes)))
        lengths = np.zeros((len(suite), int(episodes)), dtype=np.int64)
        progress = np.full((len(suite), int(episodes)), np.nan)
        records: list[EpisodeRecord] = []
        slot: list[tuple[int, int] | None] = [None] * n
        ret, length = np.zeros(n), np.zeros(n, dtype=np.int64)
        nxt = 0
        # a full reset first (every env on the first task: no step is played on it), then every env on the
        # task of its first episode
        obs, info = envs.reset(seed=[seed + k for k in range(n)], options={"task": suite.tasks[queue[0][0]]})
        for k in range(n):
            obs, info = _reset_one(envs, k, queue[nxt], suite, seed + nxt)
            slot[k] = queue[nxt]
            nxt += 1
        steps = 0
        while any(s is not None for s in slot):
            if steps >= max_steps:
                raise RuntimeError(f"evaluate: {max_steps} vector steps and episodes are still running; do "
                                   f"the envs truncate their episodes?")
            actions = np.asarray(policy(obs, info))
            obs, rew, term, trunc, info = envs.step(actions)
            step_info = info  # the resets below replace `info`; the finished episodes' progress is here
            steps += 1
            for k in range(n):
                if slot[k] is None:
                    continue
                ret[k] += float(rew[k])
                length[k] += 1
                if term[k] or trunc[k]:
                    i, e = slot[k]
                    prog = _progress(step_info, k)
                    returns[i, e], lengths[i, e], progress[i, e] = ret[k], length[k], prog
                    records.append(EpisodeRecord(i, float(ret[k]), int(length[k]), prog))
                    ret[k], length[k] = 0.0, 0
                    if nxt < len(queue):
                        obs, info = _reset_one(envs, k, queue[nxt], suite, seed + nxt, obs, info)
                        slot[k] = queue[nxt]
                        nxt += 1
                    else:
                        slot[k] = None
            if all(s is None for s in slot):
                break
            if any(slot[k] is None and (term[k] or trunc[k]) for k in range(n)):
                # a finished env with nothing left to play: reset it on its last task so the next vector
                # step is legal; its episodes are no longer recorded
                done = np.array([slot[k] is None and bool(term[k] or trunc[k]) for k in range(n)])
                obs, info = envs.reset(options={"reset_mask": done})
        return EvalResult(suite, returns, lengths, progress, records)
    finally:
        envs.close()


def _progress(info: dict[str, Any], k: int) -> float:
    if "task_progress" not in info:
        return float("nan")
    mask = info.get("_task_progress")
    if mask is not None and not mask[k]:
        return float("nan")
    return float(info["task_progress"][k])


def _reset_one(envs: gym.vector.VectorEnv, k: int, item: tuple[int, int], suite: Suite, seed: int,
               obs: Any = None, info: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Reset env ``k`` alone on the task of ``item`` with reset seed ``seed``; the other envs' observations
    and infos are kept."""
    mask = np.zeros(envs.num_envs, dtype=bool)
    mask[k] = True
    seeds = [None] * envs.num_envs
    seeds[k] = int(seed)
    return envs.reset(seed=seeds, options={"task": suite.tasks[item[0]], "reset_mask": mask})
