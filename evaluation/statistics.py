"""Aggregate statistics over runs × tasks with stratified bootstrap confidence intervals.

After Agarwal et al. 2021, *Deep Reinforcement Learning at the Edge of the Statistical Precipice*: a method's
scores form a matrix of ``runs × tasks`` (one row per training seed, one column per evaluation task, e.g.
held-out success on each difficulty). An aggregate metric reduces the whole matrix to one number, and its
uncertainty comes from the runs: the **stratified bootstrap** resamples the runs with replacement *within
each task* (the tasks are fixed, the seeds are the random draw) and recomputes the metric on every
resample; the 95% interval is the 2.5th to 97.5th percentile of those recomputed values (the percentile
bootstrap).

The resampling is :func:`scipy.stats.bootstrap` itself: each task's column of runs is passed as one
independent sample (``paired=False``), which is exactly the stratified scheme. The interquartile mean is
:func:`scipy.stats.trim_mean` with a quarter cut off each end. Metrics (names accepted by
:func:`interval_estimates`):

* ``"mean"``, ``"median"``: of all ``runs × tasks`` scores;
* ``"iqm"``: the interquartile mean, the mean of the middle 50% of all scores;
* ``"optimality_gap"`` (or ``"optimality_gap@g"``): ``mean(max(g - score, 0))``, how far the scores fall
  short of the target ``g`` (default 1); lower is better;
* ``"cvar@a"`` (e.g. ``"cvar@0.1"``): per run, the mean score of the ``a`` fraction of worst tasks
  (:func:`cvar`), averaged over runs.

Two-method comparisons: :func:`probability_of_improvement` (the probability that a run of X scores higher
than a run of Y on a task, averaged over tasks: the Mann-Whitney U statistic normalised per task) and
:func:`difference` (a metric of X minus the same metric of Y). :func:`performance_profile` is the share of
scores above each threshold. Every result is an :class:`Estimate`: the value on the data and the interval.
With a single run per task there is nothing to resample: the interval is ``(nan, nan)`` and a warning says
so.

>>> rng = np.random.default_rng(0)
>>> scores = {"dr": rng.uniform(0.0, 0.5, (5, 10)), "curriculum": rng.uniform(0.3, 0.8, (5, 10))}
>>> est = interval_estimates(scores, ("mean", "iqm"), n_resamples=500)
>>> e = est["curriculum"]["iqm"]
>>> e.low <= e.value <= e.high
True
>>> probability_of_improvement(scores["curriculum"], scores["dr"], n_resamples=500).value > 0.8
True
>>> cvar([0.0, 0.2, 0.6, 1.0], 0.5)  # the worse half
0.1
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "Estimate",
    "aggregate",
    "as_metrics",
    "cvar",
    "difference",
    "format_estimate",
    "format_table",
    "interval_estimates",
    "performance_profile",
    "probability_of_improvement",
    "score_matrix",
]

#: The metric names :func:`interval_estimates` accepts besides the parameterised ``"cvar@a"`` and
#: ``"optimality_gap@g"``.
METRICS: tuple[str, ...] = ("mean", "median", "iqm", "optimality_gap")

DEFAULT_RESAMPLES = 2000


class Estimate(NamedTuple):
    """A point estimate and its confidence interval (``low``, ``high``; ``nan`` when there is none)."""

    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies inside the interval (bounds included)."""
        return bool(self.low <= x <= self.high)

    def excludes(self, x: float) -> bool:
        """Whether the interval exists and ``x`` lies outside it (e.g. a difference's interval excludes 0)."""
        return bool(not math.isnan(self.low) and not self.contains(x))


def _scipy_stats():
    try:
        from scipy import stats
    except ImportError as e:  # pragma: no cover - scipy is a dependency of the extra
        raise ImportError("magister.evaluation needs scipy for its statistics: "
                          "pip install 'magister[eval]' (or pip install scipy)") from e
    return stats


def score_matrix(scores: np.ndarray | Sequence[Sequence[float]], name: str = "scores") -> np.ndarray:
    """``scores`` as a float ``runs × tasks`` matrix; a 1-d array is one run. Raises ``ValueError`` for
    another shape, an empty matrix or non-finite scores."""
    a = np.asarray(scores, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"{name} must be a non-empty runs x tasks matrix, got shape {np.shape(scores)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (runs x tasks scores), got {a!r}")
    return a


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not 0.0 < float(alpha) <= 1.0:
        raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
    return float(alpha)


def cvar(values: np.ndarray | Sequence[float], alpha: float) -> float:
    """Conditional value at risk: the mean of the ``alpha`` fraction of lowest ``values`` (at least one).

    ``cvar(x, 1.0)`` is the mean; ``cvar(x, 0.1)`` the mean of the worst tenth (rounded up).
    """
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if a.size == 0:
        raise ValueError("cvar needs at least one value")
    k = max(1, math.ceil(_check_alpha(alpha) * a.size - 1e-9))
    return float(a[:k].mean())


# -- metrics on (..., runs, tasks) arrays: leading axes are bootstrap resamples -----------------------
def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(*x.shape[:-2], -1)


def _iqm(x: np.ndarray) -> np.ndarray:
    return _scipy_stats().trim_mean(_flat(x), 0.25, axis=-1)


def _cvar_runs(alpha: float) -> Callable[[np.ndarray], np.ndarray]:
    def f(x: np.ndarray) -> np.ndarray:
        k = max(1, math.ceil(alpha * x.shape[-1] - 1e-9))
        return np.sort(x, axis=-1)[..., :k].mean(axis=-1).mean(axis=-1)

    return f


def _gap(target: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.maximum(target - x, 0.0).mean(axis=(-2, -1))


_PARAM = re.compile(r"^(cvar|optimality_gap)@([0-9.eE+-]+)$")


def _metric(name: str) -> Callable[[np.ndarray], np.ndarray]:
    if name == "mean":
        return lambda x: x.mean(axis=(-2, -1))
    if name == "median":
        return lambda x: np.median(_flat(x), axis=-1)
    if name == "iqm":
        return _iqm
    if name == "optimality_gap":
        return _gap(1.0)
    m = _PARAM.match(name) if isinstance(name, str) else None
    if m:
        try:
            p = float(m[2])
        except ValueError:
            p = float("nan")
        if m[1] == "cvar":
            return _cvar_runs(_check_alpha(p))
        if math.isfinite(p):
            return _gap(p)
    raise ValueError(f"unknown metric {name!r}; expected one of {METRICS}, 'cvar@<alpha in (0, 1]>' or "
                     f"'optimality_gap@<target>'")


def aggregate(scores: np.ndarray, metric: str = "mean") -> float:
    """One aggregate ``metric`` of a ``runs × tasks`` matrix (no interval)."""
    return float(_metric(metric)(score_matrix(scores)))


# -- the bootstrap ----------------------------------------------------------------------------------
def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    return float(confidence)


def _bootstrap(matrices: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], *, confidence: float,
               n_resamples: int, seed: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, low, high)`` of ``statistic(*matrices)`` under the stratified bootstrap.

    Every task column of every matrix is one independent sample of :func:`scipy.stats.bootstrap`, so runs
    are resampled within each task (and each method) separately."""
    confidence = _check_confidence(confidence)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive int, got {n_resamples!r}")
    value = np.asarray(statistic(*matrices), dtype=np.float64)
    if min(m.shape[0] for m in matrices) < 2:
        logger.warning("a single run per task: there is nothing to resample, so no confidence interval")
        nan = np.full(value.shape, np.nan)
        return value, nan, nan.copy()
    widths = [m.shape[1] for m in matrices]
    columns = [m[:, j] for m in matrices for j in range(m.shape[1])]

    def resampled(*cols: np.ndarray, axis: int = -1) -> np.ndarray:
        mats, i = [], 0
        for w in widths:
            mats.append(np.stack(cols[i:i + w], axis=-1))  # (..., runs, tasks)
            i += w
        return statistic(*mats)

    # resamples per vectorised call: keeps the largest intermediate (pairs of runs per task for the
    # probability of improvement) to a few million numbers
    cells = matrices[0].size * (matrices[1].shape[0] if len(matrices) > 1 else 1)
    res = _scipy_stats().bootstrap(columns, resampled, n_resamples=int(n_resamples), paired=False,
                                   vectorized=True, confidence_level=confidence, method="percentile",
                                   batch=max(1, 4_000_000 // cells), rng=np.random.default_rng(seed))
    low = np.asarray(res.confidence_interval.low, dtype=np.float64)
    high = np.asarray(res.confidence_interval.high, dtype=np.float64)
    return value, low, high


def _estimate(value: np.ndarray, low: np.ndarray, high: np.ndarray) -> Estimate:
    return Estimate(float(value), float(low), float(high))


def interval_estimates(scores: Mapping[str, np.ndarray], metrics: Sequence[str] = ("mean", "iqm"),
                       confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int | None = 0) -> dict[str, dict[str, Estimate]]:
    """``{method: {metric: Estimate}}`` for every ``runs × tasks`` matrix in ``scores``.

    Args:
        scores: method name -> ``runs × tasks`` scores (a 1-d array is one run).
        metrics: metric names: ``"mean"``, ``"median"``, ``"iqm"``, ``"optimality_gap"``,
            ``"optimality_gap@g"``, ``"cvar@a"``.
        confidence: the interval's confidence level.
        n_resamples: bootstrap resamples per metric.
        seed: seed of the resampling (the same seed gives the same intervals).

    Raises:
        ValueError: an unknown metric, a malformed score matrix, a confidence outside (0, 1).
    """
    if not isinstance(scores, Mapping) or not scores:
        raise ValueError(f"scores must be a non-empty mapping method -> runs x tasks array, got {scores!r}")
    if isinstance(metrics, str):
        metrics = (metrics,)
    fns = {m: _metric(m) for m in metrics}
    out: dict[str, dict[str, Estimate]] = {}
    for method, s in scores.items():
        x = score_matrix(s, f"scores[{method!r}]")
        out[method] = {m: _estimate(*_bootstrap([x], f, confidence=confidence, n_resamples=n_resamples,
                                                seed=seed)) for m, f in fns.items()}
    return out


def _pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = score_matrix(x, "x"), score_matrix(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must cover the same tasks: x has {x.shape[1]} task columns, y "
                         f"{y.shape[1]}")
    return x, y


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # per task: P(X > Y) + P(X = Y) / 2 over all pairs of runs, then the mean over tasks
    xx, yy = x[..., :, None, :], y[..., None, :, :]
    p = (xx > yy).mean(axis=(-3, -2)) + 0.5 * (xx == yy).mean(axis=(-3, -2))
    return p.mean(axis=-1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, confidence: float = 0.95, seed: int | None = 0,
                               n_resamples: int = DEFAULT_RESAMPLES) -> Estimate:
    """P(X > Y): the probability that a run of method X scores higher than a run of method Y on a task
    (ties count half), averaged over tasks, with its stratified bootstrap interval.

    ``x`` and ``y`` are ``runs × tasks`` matrices over the same tasks (the run counts may differ). Per task
    this is the Mann-Whitney U statistic of X against Y divided by ``n_x * n_y``. 0.5 means no difference;
    an interval whose lower end exceeds 0.5 says X is better with that confidence.
    """
    x, y = _pairs(x, y)
    return _estimate(*_bootstrap([x, y], _improvement, confidence=confidence, n_resamples=n_resamples,
                                 seed=seed))


def difference(x: np.ndarray, y: np.ndarray, metric: str = "mean", confidence: float = 0.95,
               seed: int | None = 0, n_resamples: int = DEFAULT_RESAMPLES) -> Estimate:
    """``metric(X) - metric(Y)`` with its stratified bootstrap interval (both methods resampled
    independently). An interval that excludes 0 (:meth:`Estimate.excludes`) is a difference at that
    confidence."""
    x, y = _pairs(x, y)
    f = _metric(metric)
    return _estimate(*_bootstrap([x, y], lambda a, b: f(a) - f(b), confidence=confidence,
                                 n_resamples=n_resamples, seed=seed))


def performance_profile(scores: np.ndarray, thresholds: Sequence[float] | np.ndarray,
                        confidence: float = 0.95, seed: int | None = 0,
                        n_resamples: int = DEFAULT_RESAMPLES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The score distribution: for each threshold ``t``, the share of ``runs × tasks`` scores above ``t``.

    Returns ``(values, lows, highs)``, one entry per threshold, with stratified bootstrap intervals.
    """
    x = score_matrix(scores)
    t = np.asarray(thresholds, dtype=np.float64).ravel()
    if t.size == 0 or not np.all(np.isfinite(t)):
        raise ValueError(f"thresholds must be a non-empty sequence of finite numbers, got {thresholds!r}")

    def profile(a: np.ndarray) -> np.ndarray:
        return np.stack([(a > v).mean(axis=(-2, -1)) for v in t], axis=0)

    return _bootstrap([x], profile, confidence=confidence, n_resamples=n_resamples, seed=seed)


# -- reporting ------------------------------------------------------------------------------------
def format_estimate(e: Estimate, digits: int = 3) -> str:
    """``"0.412 [0.301, 0.522]"`` (``"0.412 [n/a]"`` without an interval)."""
    if math.isnan(e.low) or math.isnan(e.high):
        return f"{e.value:.{digits}f} [n/a]"
    return f"{e.value:.{digits}f} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def format_table(estimates: Mapping[str, Mapping[str, Estimate]], digits: int = 3,
                 title: str = "method") -> str:
    """A plain-text table: one row per method, one column per metric, each cell ``value [low, high]``.

    >>> print(format_table({"dr": {"mean": Estimate(0.1, 0.05, 0.15)}}))
    method | mean
    -----------------------------
        dr | 0.100 [0.050, 0.150]
    """
    if not estimates:
        raise ValueError("format_table needs at least one method")
    metrics: list[str] = []
    for row in estimates.values():
        metrics += [m for m in row if m not in metrics]
    cells = {n: [format_estimate(row[m], digits) if m in row else "-" for m in metrics]
             for n, row in estimates.items()}
    widths = [max([len(m)] + [len(c[i]) for c in cells.values()]) for i, m in enumerate(metrics)]
    first = max([len(title)] + [len(n) for n in estimates])
    head = f"{title:>{first}} | " + " | ".join(f"{m:<{w}}" for m, w in zip(metrics, widths))
    lines = [head.rstrip(), "-" * len(head)]
    for n, row in cells.items():
        lines.append((f"{n:>{first}} | " + " | ".join(f"{c:<{w}}" for c, w in zip(row, widths))).rstrip())
    return "\n".join(lines)


def as_metrics(estimates: Mapping[str, Mapping[str, Estimate]], prefix: str = "eval") -> dict[str, float]:
    """A flat ``{tag: float}`` dict for :func:`magister.integrations.loggers.log_curriculum_metrics` (or
    any TensorBoard/W&B writer): ``<prefix>/<method>/<metric>`` and ``.../<metric>_low``, ``_high``.

    >>> as_metrics({"dr": {"mean": Estimate(0.5, 0.4, 0.6)}})
    {'eval/dr/mean': 0.5, 'eval/dr/mean_low': 0.4, 'eval/dr/mean_high': 0.6}
    """
    out: dict[str, float] = {}
    for method, row in estimates.items():
        for metric, e in row.items():
            tag = f"{prefix}/{method}/{metric}" if prefix else f"{method}/{metric}"
            out[tag], out[f"{tag}_low"], out[f"{tag}_high"] = float(e.value), float(e.low), float(e.high)
    return out
