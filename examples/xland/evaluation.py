"""Held-out evaluation of XLand-style agents: participation and normalised percentiles.

The metrics (worst case over co-players, Nash-value normalisers, normalised scores and percentiles,
participation; XLand, Sections 4.1 and 5.3) live in :mod:`magister.evaluation.normalised` and are
re-exported here; this module plays the rollouts against the fixed co-player set (noop, random,
goal-seeker) and holds the reference policies whose returns give the normalisers.

The rollout helpers play many (task, co-player, episode) combinations in lock step, so a torch policy is
called once per step on the whole batch. A policy for :func:`play` implements :class:`BatchPolicy`.

>>> import numpy as np
>>> nash_value(np.array([[1.0, 0.0], [0.0, 1.0]]))  # mixing both references 50/50 guarantees 0.5
0.5
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from magister.evaluation.normalised import (
    PERCENTILES,
    _matrix,
    nash_value,
    normalised_percentiles,
    normalised_scores,
    normalisers,
    participation,
    worst_case,
)

from .coplayers import LEARNER, NOOP, RANDOM, SEEKER, GoalSeeker
from .env import XLandEnv, XLandTask

logger = logging.getLogger(__name__)

__all__ = [
    "BatchPolicy",
    "EVAL_COPLAYERS",
    "EvalResult",
    "NoopPolicy",
    "PERCENTILES",
    "RandomPolicy",
    "SeekerPolicy",
    "evaluate",
    "format_table",
    "nash_value",
    "normalisers",
    "normalised_percentiles",
    "normalised_scores",
    "participation",
    "play",
    "play_grid",
    "reference_returns",
    "with_coplayer",
    "worst_case",
]

#: The fixed co-player set of the evaluation (the paper's test set plays fixed co-player policies).
EVAL_COPLAYERS: tuple[int, ...] = (NOOP, RANDOM, SEEKER)


@dataclass
class EvalResult:
    """One evaluation: mean returns ``[tasks, co-players]``, normalisers and the derived numbers."""

    returns: np.ndarray
    norms: np.ndarray
    coplayers: tuple[int, ...] = EVAL_COPLAYERS
    scores: np.ndarray = field(init=False)
    percentiles: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.returns = _matrix(self.returns, 2, "returns")
        if self.returns.shape[1] != len(self.coplayers):
            raise ValueError(f"returns has {self.returns.shape[1]} co-player columns, expected "
                             f"{len(self.coplayers)} ({self.coplayers})")
        self.scores = normalised_scores(self.returns, self.norms)
        self.percentiles = normalised_percentiles(self.scores)

    @property
    def participation(self) -> float:
        return participation(self.returns)

    def participation_vs(self) -> dict[int, float]:
        """Share of tasks with non-zero mean return, per co-player."""
        return {c: float((self.returns[:, j] > 0).mean()) for j, c in enumerate(self.coplayers)}

    @property
    def unnormalised(self) -> int:
        """Tasks without a normalised score (normaliser 0)."""
        return int(np.isnan(self.scores).sum())

    def summary(self) -> dict[str, float]:
        """Flat numbers for logging: participation, p10/p20/p50, mean worst-case return."""
        p = self.percentiles
        return {"participation": self.participation, "p10": float(p[10]), "p20": float(p[20]),
                "p50": float(p[50]), "mean_worst_return": float(worst_case(self.returns).mean()),
                "unnormalised": float(self.unnormalised)}


_NAMES = {NOOP: "noop", RANDOM: "random", SEEKER: "seeker", LEARNER: "learner"}


def format_table(results: dict[str, EvalResult]) -> str:
    """A plain-text table, one row per evaluated policy: participation (worst case and per co-player) and
    the 10th, 20th and 50th normalised percentiles."""
    if not results:
        raise ValueError("format_table needs at least one result")
    cps = next(iter(results.values())).coplayers
    head = [f"{'policy':16s}", f"{'particip.':>9s}"] + [f"{'vs ' + _NAMES.get(c, str(c)):>10s}" for c in cps]
    head += [f"{'p10':>6s}", f"{'p20':>6s}", f"{'p50':>6s}", f"{'tasks':>6s}"]
    lines = [" ".join(head)]
    for name, r in results.items():
        per = r.participation_vs()
        p = r.percentiles
        row = [f"{name:16s}", f"{r.participation:9.3f}"] + [f"{per[c]:10.3f}" for c in cps]
        row += [f"{p[10]:6.2f}", f"{p[20]:6.2f}", f"{p[50]:6.2f}", f"{r.returns.shape[0]:6d}"]
        lines.append(" ".join(row))
    return "\n".join(lines)


# -- rollouts -----------------------------------------------------------------------------------------
class BatchPolicy(Protocol):
    """Acts for the learner's slot (player 0) of many envs at once."""

    def reset(self, n: int) -> None:
        """A new batch of ``n`` episodes starts."""

    def act(self, envs: Sequence[XLandEnv], obs: Sequence[dict[str, np.ndarray]]) -> np.ndarray:
        """One action per env."""


class NoopPolicy:
    """Reference policy: always noop."""

    def reset(self, n: int) -> None:
        self.n = n

    def act(self, envs: Sequence[XLandEnv], obs: Sequence[dict[str, np.ndarray]]) -> np.ndarray:
        return np.zeros(len(envs), dtype=np.int64)


class RandomPolicy:
    """Reference policy: uniform random actions (the control policy of dynamic task generation)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, n: int) -> None:
        self.n = n

    def act(self, envs: Sequence[XLandEnv], obs: Sequence[dict[str, np.ndarray]]) -> np.ndarray:
        return self.rng.integers(6, size=len(envs))


class SeekerPolicy:
    """Reference policy: the scripted goal-seeker playing the learner's slot."""

    def __init__(self) -> None:
        self._seeker = GoalSeeker()

    def reset(self, n: int) -> None:
        self.n = n

    def act(self, envs: Sequence[XLandEnv], obs: Sequence[dict[str, np.ndarray]]) -> np.ndarray:
        return np.array([self._seeker.act(e, 0) for e in envs], dtype=np.int64)


def with_coplayer(task: XLandTask, coplayer: int) -> XLandTask:
    """``task`` with the learner in slot 0 and ``coplayer`` in every other slot."""
    return XLandTask(task.world, task.game, (LEARNER,) + (int(coplayer),) * (task.game.n_players - 1))


def play(tasks: Sequence[XLandTask], policy: BatchPolicy, *, episodes: int = 1, episode_length: int = 40,
         seed: int = 0) -> np.ndarray:
    """Mean return of the learner's slot per task (``[len(tasks)]``), ``episodes`` episodes each, all envs
    stepped in lock step (the policy is called once per step for the whole batch)."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    if not tasks:
        raise ValueError("play needs at least one task")
    envs, obs = [], []
    for i, task in enumerate(tasks):
        if task.coplayers[0] != LEARNER or task.coplayers.count(LEARNER) != 1:
            raise ValueError(f"evaluation tasks need the learner in slot 0 only, got co-players "
                             f"{task.coplayers}")
        for e in range(int(episodes)):
            env = XLandEnv(task, episode_length=episode_length)
            o, _ = env.reset(seed=seed + 1000 * e + i)
            envs.append(env)
            obs.append(o["player_0"])
    policy.reset(len(envs))
    for _ in range(episode_length):
        acts = policy.act(envs, obs)
        obs = [env.step({"player_0": int(a)})[0]["player_0"] for env, a in zip(envs, acts)]
    rets = np.array([env.returns[0] for env in envs]).reshape(len(tasks), int(episodes))
    for env in envs:
        env.close()
    return rets.mean(axis=1)


def play_grid(tasks: Sequence[XLandTask], policy: BatchPolicy, *, coplayers: Sequence[int] = EVAL_COPLAYERS,
              episodes: int = 1, episode_length: int = 40, seed: int = 0) -> np.ndarray:
    """Mean returns ``[tasks, co-players]`` of ``policy`` in the learner's slot of every (task, co-player)
    pair (:func:`with_coplayer`), all played in one batch by :func:`play`."""
    grid = [with_coplayer(t, c) for t in tasks for c in coplayers]
    rets = play(grid, policy, episodes=episodes, episode_length=episode_length, seed=seed)
    return rets.reshape(len(tasks), len(coplayers))


def evaluate(
    tasks: Sequence[XLandTask], policy: BatchPolicy, norms: np.ndarray, *, episodes: int = 1,
    episode_length: int = 40, coplayers: Sequence[int] = EVAL_COPLAYERS, seed: int = 0,
) -> EvalResult:
    """Play ``policy`` on every (task, co-player) pair and compute the metrics with ``norms``."""
    rets = play_grid(tasks, policy, coplayers=coplayers, episodes=episodes, episode_length=episode_length,
                     seed=seed)
    return EvalResult(rets, norms, tuple(coplayers))


def reference_returns(tasks: Sequence[XLandTask], *, episodes: int = 1, episode_length: int = 40,
                      coplayers: Sequence[int] = EVAL_COPLAYERS, seed: int = 0) -> dict[str, np.ndarray]:
    """Mean returns ``[tasks, co-players]`` of each reference policy (noop, random, seeker)."""
    refs: dict[str, BatchPolicy] = {"noop": NoopPolicy(), "random": RandomPolicy(seed),
                                    "seeker": SeekerPolicy()}
    return {name: play_grid(tasks, p, coplayers=coplayers, episodes=episodes, episode_length=episode_length,
                            seed=seed) for name, p in refs.items()}
