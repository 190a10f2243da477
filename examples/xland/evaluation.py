"""Held-out evaluation of XLand-style agents: participation and normalised percentiles.

After *Open-Ended Learning Leads to Generally Capable Agents* (XLand), Sections 4.1 and 5.3. For a policy
``pi`` evaluated on a set of tasks (a world and a game each), each played against every co-player of a fixed
set ``C`` (here the built-ins: noop, random, goal-seeker):

* **worst case over co-players** (the paper's ``perf``, a minimum over the co-player population):
  ``perf(pi | x) = min_{c in C} E[R_pi(x, c)]``, the mean return over episodes against the hardest
  co-player;
* **normaliser** per task, from a small population ``Pi`` of *reference* policies (noop, random and the
  scripted goal-seeker in the learner's slot): ``norm(x) = NashValue(x | Pi) = max_{p in Delta(Pi)}
  min_{c in C} sum_j p_j E[R_{pi_j}(x, c)]``, the value of the zero-sum matrix game "mixture of reference
  policies against co-player" (:func:`nash_value`, a small linear program). With a single co-player this is
  the best reference's mean return; in general a mixture can beat every pure reference;
* **normalised score** ``perf(pi | x) / norm(x)`` (may exceed 1 when the agent beats the references; tasks
  where ``norm(x) = 0``, on which no reference scores at all, have no normalised score and are left out of
  the percentiles, and counted);
* **normalised percentiles** ``perc[k] = P_k(normalised scores)`` for ``k = 0 .. 50`` (``numpy``'s linear
  interpolation between order statistics);
* **participation**: the share of tasks on which the agent obtains non-zero reward, in the worst case over
  co-players (``perf(pi | x) > 0``), the paper's "percentage of tasks the agent obtains a non-zero reward in".

The rollout helpers play many (task, co-player, episode) combinations in lock step, so a torch policy is
called once per step on the whole batch. A policy for :func:`play` implements :class:`BatchPolicy`.

>>> import numpy as np
>>> nash_value(np.array([[1.0, 0.0], [0.0, 1.0]]))  # mixing both references 50/50 guarantees 0.5
0.5
>>> participation(np.array([[0.0, 2.0], [1.0, 3.0]]))  # task 0: nothing against co-player 0
0.5
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

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
#: The percentiles the paper reports (0 .. 50, inclusive).
PERCENTILES: tuple[int, ...] = tuple(range(51))


# -- the metric ---------------------------------------------------------------------------------------
def _matrix(x: np.ndarray, ndim: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != ndim or 0 in a.shape:
        raise ValueError(f"{name} must be a non-empty {ndim}-d array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {a!r}")
    return a


def worst_case(returns: np.ndarray) -> np.ndarray:
    """``perf`` per task: the minimum over co-players (axis 1) of mean returns ``[tasks, co-players]``.

    >>> worst_case(np.array([[3.0, 1.0], [0.0, 2.0]])).tolist()
    [1.0, 0.0]
    """
    return _matrix(returns, 2, "returns").min(axis=1)


def participation(returns: np.ndarray) -> float:
    """Share of tasks whose worst case over co-players is a non-zero reward (``[tasks, co-players]``)."""
    return float((worst_case(returns) > 0).mean())


def nash_value(payoff: np.ndarray) -> float:
    """Value of the zero-sum matrix game ``max_p min_j (p^T A)_j`` (rows: reference policies, maximising;
    columns: co-players, minimising), by linear programming.

    >>> nash_value(np.array([[2.0, 1.0], [0.0, 3.0]]))  # row mix (3/4, 1/4) guarantees 1.5
    1.5
    """
    a = _matrix(payoff, 2, "payoff")
    n_rows, n_cols = a.shape
    if n_rows == 1 or n_cols == 1:  # no mixing needed: the best row's worst column
        return float(a.min(axis=1).max()) + 0.0
    from scipy.optimize import linprog

    # variables (p_1 .. p_n, v): maximise v  s.t.  v - sum_i p_i a_ij <= 0 for all j,  sum_i p_i = 1,  p >= 0
    c = np.zeros(n_rows + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-a.T, np.ones((n_cols, 1))])
    a_eq = np.hstack([np.ones((1, n_rows)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * n_rows + [(None, None)]
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(n_cols), A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if not res.success:  # pragma: no cover - a bounded feasible LP always solves
        raise RuntimeError(f"nash_value: the linear program failed ({res.message})")
    # the LP value lies between the best pure row and the best column-wise maximum; round off solver noise
    lo, hi = float(a.min(axis=1).max()), float(a.max(axis=0).min())
    return float(np.clip(-res.fun, lo, hi)) + 0.0  # + 0.0: no negative zero


def normalisers(reference: np.ndarray) -> np.ndarray:
    """Per-task normaliser ``NashValue`` from reference returns ``[tasks, references, co-players]``."""
    ref = _matrix(reference, 3, "reference returns")
    return np.array([nash_value(ref[i]) for i in range(ref.shape[0])])


def normalised_scores(returns: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``perf / norm`` per task; ``nan`` where the normaliser is 0 (no reference scores on the task)."""
    perf = worst_case(returns)
    norms = np.asarray(norms, dtype=np.float64)
    if norms.shape != perf.shape:
        raise ValueError(f"norms has shape {norms.shape}, expected {perf.shape} (one per task)")
    if np.any(norms < 0) or not np.all(np.isfinite(norms)):
        raise ValueError(f"normalisers must be finite and >= 0, got {norms!r}")
    out = np.full(perf.shape, np.nan)
    ok = norms > 0
    out[ok] = perf[ok] / norms[ok]
    return out


def normalised_percentiles(scores: np.ndarray, ks: Sequence[int] = PERCENTILES) -> np.ndarray:
    """Percentiles ``k`` of the normalised scores (``nan`` entries left out; all ``nan`` if none remain).

    >>> normalised_percentiles(np.array([0.0, 0.5, 1.0, 1.0, np.nan]), ks=[0, 50]).tolist()
    [0.0, 0.75]
    """
    s = np.asarray(scores, dtype=np.float64)
    s = s[~np.isnan(s)]
    ks = list(ks)
    if any(not 0 <= k <= 100 for k in ks):
        raise ValueError(f"percentiles must lie in [0, 100], got {ks}")
    if s.size == 0:
        return np.full(len(ks), np.nan)
    return np.percentile(s, ks)


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
