"""Plots of interval estimates and performance profiles (matplotlib, imported when a plot is drawn).

:func:`plot_interval_estimates` draws one panel per metric, one horizontal bar per method from the
interval's low to its high end with the point estimate marked; :func:`plot_performance_profiles` draws the
share of scores above each threshold with its interval band. Both write a PNG and return its path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .statistics import Estimate, performance_profile

__all__ = ["plot_interval_estimates", "plot_performance_profiles", "require_matplotlib"]


def require_matplotlib(extra: str = "eval") -> None:
    """Raise ``ImportError`` naming the extra to install when matplotlib is missing (call it before a long
    run that plots at the end)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise ImportError(f"plotting needs matplotlib: pip install 'magister[{extra}]' "
                          f"(or pip install matplotlib)") from e


def _pyplot():
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_interval_estimates(estimates: Mapping[str, Mapping[str, Estimate]], path: str | Path,
                            metrics: Sequence[str] | None = None, title: str = "") -> Path:
    """One panel per metric: each method's interval as a bar, its point estimate as a tick."""
    if not estimates:
        raise ValueError("plot_interval_estimates needs at least one method")
    plt = _pyplot()
    methods = list(estimates)
    if metrics is None:
        metrics = [m for m in next(iter(estimates.values()))]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 0.5 + 0.45 * len(methods)),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes[0], metrics):
        for i, m in enumerate(methods):
            e = estimates[m][metric]
            c = colors[i % len(colors)]
            if not (math.isnan(e.low) or math.isnan(e.high)):
                ax.barh(i, e.high - e.low, left=e.low, height=0.6, color=c, alpha=0.6)
            ax.plot([e.value, e.value], [i - 0.3, i + 0.3], color="k", lw=1.5)
        ax.set_yticks(range(len(methods)), methods if ax is axes[0][0] else [""] * len(methods))
        ax.set_title(metric, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_performance_profiles(scores: Mapping[str, np.ndarray], path: str | Path,
                              thresholds: Sequence[float] | np.ndarray | None = None, *,
                              confidence: float = 0.95, seed: int | None = 0, n_resamples: int = 1000,
                              xlabel: str = "score threshold", title: str = "") -> Path:
    """The share of ``runs × tasks`` scores above each threshold, one line per method, with its interval
    band (:func:`~magister.evaluation.statistics.performance_profile`)."""
    if not scores:
        raise ValueError("plot_performance_profiles needs at least one method")
    plt = _pyplot()
    if thresholds is None:
        hi = max(float(np.max(s)) for s in scores.values())
        lo = min(float(np.min(s)) for s in scores.values())
        thresholds = np.linspace(lo, hi, 41)
    t = np.asarray(thresholds, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, s in scores.items():
        v, low, high = performance_profile(s, t, confidence=confidence, seed=seed, n_resamples=n_resamples)
        (line,) = ax.plot(t, v, label=name)
        if not np.isnan(low).all():
            ax.fill_between(t, low, high, color=line.get_color(), alpha=0.2)
    ax.set(xlabel=xlabel, ylabel="share of scores > threshold", ylim=(-0.02, 1.02))
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
