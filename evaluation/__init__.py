"""Evaluation: held-out suites, a policy runner, and statistics with confidence intervals.

* :mod:`~magister.evaluation.suites`: :class:`Suite` (held-out tasks from any task space) and
  :func:`evaluate` (any policy on Gymnasium vector envs, evaluation-only episodes);
* :mod:`~magister.evaluation.statistics`: mean, median, IQM, CVaR, optimality gap, probability of
  improvement and performance profiles over ``runs × tasks`` scores, each with a stratified bootstrap
  interval (:func:`scipy.stats.bootstrap`), a table printer and metrics for the logger;
* :mod:`~magister.evaluation.normalised`: XLand's normalised percentiles and participation;
  :func:`regret` against an oracle;
* :mod:`~magister.evaluation.plots`: interval estimates and performance profiles (matplotlib);
* :mod:`~magister.evaluation.on_device`: the same statistics for on-device (JAX) trainers.

The statistics need scipy and the plots matplotlib: ``pip install "magister[eval]"``.
"""

from .normalised import (
    PERCENTILES,
    nash_value,
    normalised_percentiles,
    normalised_scores,
    normalisers,
    participation,
    regret,
    worst_case,
)
from .on_device import evaluate_on_device
from .plots import plot_interval_estimates, plot_performance_profiles, require_matplotlib
from .statistics import (
    METRICS,
    Estimate,
    aggregate,
    as_metrics,
    cvar,
    difference,
    format_estimate,
    format_table,
    interval_estimates,
    performance_profile,
    probability_of_improvement,
    score_matrix,
)
from .suites import EpisodeRecord, EvalResult, Policy, Suite, evaluate, stack_runs

__all__ = [
    "METRICS",
    "PERCENTILES",
    "EpisodeRecord",
    "Estimate",
    "EvalResult",
    "Policy",
    "Suite",
    "aggregate",
    "as_metrics",
    "cvar",
    "difference",
    "evaluate",
    "evaluate_on_device",
    "format_estimate",
    "format_table",
    "interval_estimates",
    "nash_value",
    "normalised_percentiles",
    "normalised_scores",
    "normalisers",
    "participation",
    "performance_profile",
    "plot_interval_estimates",
    "plot_performance_profiles",
    "probability_of_improvement",
    "regret",
    "require_matplotlib",
    "score_matrix",
    "stack_runs",
    "worst_case",
]
