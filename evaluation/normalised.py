"""Normalised scores for multi-agent tasks (XLand) and regret against an oracle.

After *Open-Ended Learning Leads to Generally Capable Agents* (XLand), Sections 4.1 and 5.3. A policy
``pi`` is evaluated on a set of tasks, each played against every co-player of a fixed set ``C``:

* **worst case over co-players** (the paper's ``perf``): ``perf(pi | x) = min_{c in C} E[R_pi(x, c)]``,
  the mean return against the hardest co-player (:func:`worst_case`);
* **normaliser** per task, from a small population ``Pi`` of *reference* policies: ``norm(x) =
  NashValue(x | Pi) = max_{p in Delta(Pi)} min_{c in C} sum_j p_j E[R_{pi_j}(x, c)]``, the value of the
  zero-sum matrix game "mixture of reference policies against co-player" (:func:`nash_value`, a small
  linear program; with a single co-player it is the best reference's mean return);
* **normalised score** ``perf(pi | x) / norm(x)`` (:func:`normalised_scores`; may exceed 1; tasks where
  ``norm(x) = 0`` have none: ``nan``, left out of the percentiles and counted by the caller);
* **normalised percentiles** ``perc[k] = P_k(normalised scores)`` for ``k = 0 .. 50``
  (:func:`normalised_percentiles`, numpy's linear interpolation between order statistics);
* **participation**: the share of tasks on which the worst case over co-players is a non-zero reward
  (:func:`participation`).

:func:`regret` is the gap to an oracle where one exists (the optimal return of a solvable task, from a
shortest path for instance): ``oracle - achieved`` per task.

>>> import numpy as np
>>> nash_value(np.array([[1.0, 0.0], [0.0, 1.0]]))  # mixing both references 50/50 guarantees 0.5
0.5
>>> participation(np.array([[0.0, 2.0], [1.0, 3.0]]))  # task 0: nothing against co-player 0
0.5
>>> regret(np.array([0.5, 1.0]), np.array([1.0, 1.0])).tolist()
[0.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "PERCENTILES",
    "nash_value",
    "normalised_percentiles",
    "normalised_scores",
    "normalisers",
    "participation",
    "regret",
    "worst_case",
]

#: The percentiles the paper reports (0 .. 50, inclusive).
PERCENTILES: tuple[int, ...] = tuple(range(51))


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


def regret(achieved: np.ndarray, oracle: np.ndarray) -> np.ndarray:
    """Per-task regret ``oracle - achieved`` (same shape), where ``oracle`` is the best achievable score of
    each task (an optimal return from a shortest path, 1 for a solvable task's success).

    Raises ``ValueError`` for different shapes, non-finite values or an achieved score above its oracle
    (the oracle is then not one)."""
    a = np.asarray(achieved, dtype=np.float64)
    o = np.asarray(oracle, dtype=np.float64)
    if a.shape != o.shape:
        raise ValueError(f"achieved has shape {a.shape}, oracle {o.shape}: expected one oracle per score")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(o))):
        raise ValueError("achieved and oracle scores must be finite")
    over = a > o + 1e-9 * np.maximum(1.0, np.abs(o))
    if over.any():
        raise ValueError(f"achieved scores exceed the oracle at {np.flatnonzero(over.ravel())[:5].tolist()}: "
                         f"the oracle must bound every score")
    return np.maximum(o - a, 0.0)
