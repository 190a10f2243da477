"""ATLAS's qualitative result in one command: DR, PLR⊥ and ACCEL over several seeds.

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs"
(Sec. 5.2, Fig. 3 and Appendix E.4): with *independent* sampling only about 3% of (level, RM) problems are
solvable; PLR⊥ and ACCEL fill their buffers with solvable problems (ACCEL over 90% in the paper), and the
policy does better on held-out solvable problems than with DR.

Every method trains with :func:`~magister.examples.minigrid_rm.ppo.train` (independent sampling, the same
PPO settings) for each seed; the run reports, over training (curves: mean ± standard deviation over seeds)
and at the end (:mod:`magister.evaluation`: stratified bootstrap 95% intervals over the seeds):

* the solvable fraction of the PLR⊥/ACCEL buffers (DR: of its training batches, the ~3% baseline);
* the replay-weighted solvable fraction (the probability that a replay, what PLR⊥ trains on, is solvable);
* on held-out solvable level-conditioned problems (the same problems for every run: seeds × problems
  scores), the mean and interquartile mean solve rate and the CVaR at 10%, and the probability that a
  PLR⊥ or ACCEL run beats a DR run on a problem.

It writes ``summary.json`` (before any plot), ``atlas.png`` (the curves) and each run's ``metrics.jsonl``
under ``--out``. Needs the ``jax`` and ``eval`` extras (checked at start).
The defaults take about 30 minutes on 2 CPU cores; ``--updates`` and ``--envs`` scale it. The seeds of a
method share its compiled functions (one compile per method). It runs on JAX's default backend and prints
it; with ``--write-results`` it writes the section ``atlas`` of the results page on the CPU and
``atlas-<backend>`` elsewhere (``atlas-gpu``, plot ``atlas-gpu.png``), so GPU figures sit beside the CPU's.

Run ``python -m magister.examples.minigrid_rm.atlas --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from magister.evaluation import Estimate, format_table, interval_estimates, probability_of_improvement
from magister.examples._cli import require

from . import ppo

logger = logging.getLogger(__name__)

__all__ = ["main", "plot", "run", "statistics", "summarize"]

METHODS = ("dr", "plr", "accel")
#: metric -> title, for the table and the plot
CURVES = {
    "solvable_fraction": "solvable fraction (buffer; DR: its batches)",
    "replay_solvable_fraction": "replay-weighted solvable fraction",
    "cvar_1.0": "held-out solve rate",
    "cvar_0.1": "held-out CVaR 10%",
}


def run(methods: Sequence[str], seeds: Sequence[int], updates: int, envs: int, steps: int, max_steps: int,
        buffer: int, log_every: int, eval_every: int, heldout: int, out: Path) -> dict[str, list[list[dict]]]:
    """Train every method for every seed; returns ``{method: [rows of seed 0, rows of seed 1, ...]}``."""
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {m!r}")
    results: dict[str, list[list[dict]]] = {m: [] for m in methods}
    compiled: dict = {}  # one compile per method, shared by its seeds
    for seed in seeds:
        for m in methods:
            cfg = ppo.TrainConfig(method=m, num_envs=envs, rollout_len=steps, max_steps=max_steps,
                                  updates=updates, seed=seed,
                                  curriculum=ppo.method_curriculum(m, buffer_size=buffer))
            t = time.perf_counter()
            rows = ppo.train(cfg, out / f"{m}_seed{seed}", log_every=log_every, eval_every=eval_every,
                             heldout=heldout, progress=False, compiled=compiled)
            if m == "dr":  # DR's solvable fraction: over all its logged training batches so far
                fr = np.cumsum([r["solvable_fraction"] for r in rows]) / np.arange(1, len(rows) + 1)
                for r, f in zip(rows, fr):
                    r["solvable_fraction"] = float(f)
                    r["replay_solvable_fraction"] = float(f)
            results[m].append(rows)
            last = {k: float("nan") for k in CURVES} | rows[-1]
            logger.info("%s seed %d: %.0f s; solvable %.3f, replay-weighted %.3f, held-out %.3f, CVaR10 %.3f",
                        m, seed, time.perf_counter() - t, last["solvable_fraction"],
                        last["replay_solvable_fraction"], last["cvar_1.0"], last["cvar_0.1"])
    return results


def _curve(runs: list[list[dict]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Env steps and mean/std over seeds of ``key`` at the rows where every seed has it."""
    per_seed = [[(r["env_steps"], r[key]) for r in rows if key in r] for rows in runs]
    n = min(len(p) for p in per_seed)
    if n == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    x = np.array([p[0] for p in per_seed[0][:n]], dtype=float)
    y = np.array([[v for _, v in p[:n]] for p in per_seed], dtype=float)
    return x, y.mean(0), y.std(0)


def summarize(results: dict[str, list[list[dict]]]) -> dict[str, dict[str, list[float]]]:
    """``{method: {metric: [mean, std] at the end of training}}`` over seeds."""
    out: dict[str, dict[str, list[float]]] = {}
    for m, runs in results.items():
        out[m] = {}
        for key in CURVES:
            _, mu, sd = _curve(runs, key)
            if mu.size:
                out[m][key] = [float(mu[-1]), float(sd[-1])]
    return out


#: end-of-training columns of :func:`statistics`: per-run scalars (an interval over the seeds) ...
FINAL = {"solvable_fraction": "solvable", "replay_solvable_fraction": "replay solvable"}
#: ... and held-out metrics over seeds × problems
HELDOUT = {"mean": "held-out mean", "iqm": "held-out IQM", "cvar@0.1": "held-out CVaR 10%"}


def heldout_matrix(runs: list[list[dict]]) -> np.ndarray | None:
    """Held-out success at each run's last evaluation, seeds × problems (``None`` without evaluations)."""
    last = [next((r["heldout_success"] for r in reversed(rows) if "heldout_success" in r), None)
            for rows in runs]
    if any(x is None for x in last):
        return None
    return np.array(last, dtype=float)


def statistics(results: dict[str, list[list[dict]]], n_resamples: int = 2000,
               seed: int = 0) -> tuple[dict[str, dict[str, Estimate]], dict[str, Estimate]]:
    """``({method: {column: Estimate}}, {"P(m > dr)": Estimate})`` at the end of training, with stratified
    bootstrap 95% intervals over the seeds (:mod:`magister.evaluation`)."""
    table: dict[str, dict[str, Estimate]] = {}
    held: dict[str, np.ndarray] = {}
    for m, runs in results.items():
        table[m] = {}
        for key, col in FINAL.items():
            last = [next((r[key] for r in reversed(rows) if key in r), None) for rows in runs]
            if all(v is not None for v in last):
                x = np.array(last, dtype=float)[:, None]  # seeds x 1
                table[m][col] = interval_estimates({m: x}, ("mean",), n_resamples=n_resamples,
                                                   seed=seed)[m]["mean"]
        h = heldout_matrix(runs)
        if h is not None:
            held[m] = h
            est = interval_estimates({m: h}, tuple(HELDOUT), n_resamples=n_resamples, seed=seed)[m]
            table[m].update({HELDOUT[k]: v for k, v in est.items()})
    better = {f"P({m} > dr)": probability_of_improvement(held[m], held["dr"], seed=seed,
                                                         n_resamples=n_resamples)
              for m in held if m != "dr" and "dr" in held}
    return table, better


def plot(results: dict[str, list[list[dict]]], path: str | Path) -> None:
    """The four curves (mean ± std over seeds) against env steps, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.6))
    for ax, (key, title) in zip(axes, CURVES.items()):
        for m, runs in results.items():
            x, mu, sd = _curve(runs, key)
            if x.size:
                ax.plot(x, mu, label=m)
                ax.fill_between(x, mu - sd, mu + sd, alpha=0.2)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def section_name(backend: str) -> str:
    """The results section (and plot name) of a ``--write-results`` run on ``backend``: ``atlas`` on the
    CPU, ``atlas-<backend>`` elsewhere."""
    return "atlas" if backend == "cpu" else f"atlas-{backend}"


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, list[float]]]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.minigrid_rm.atlas", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. seeds-1)")
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64, help="rollout length")
    ap.add_argument("--max-steps", type=int, default=128, help="episode length limit")
    ap.add_argument("--buffer", type=int, default=1000, help="PLR⊥/ACCEL buffer size")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--heldout", type=int, default=128, help="held-out solvable level-conditioned problems")
    ap.add_argument("--out", type=str, default="atlas_out")
    ap.add_argument("--write-results", action="store_true",
                    help="write the table and plot into docs/results.md and docs/img/ (a source checkout)")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        raise SystemExit(f"--seeds must be >= 1, got {a.seeds}")
    # now, not after the first run: the runs plot (matplotlib) and the summary has intervals (scipy)
    require({"matplotlib": "eval", "scipy": "eval"},
            "python -m magister.examples.minigrid_rm.atlas")
    import jax

    backend = jax.default_backend()
    name = section_name(backend)
    if a.write_results:
        from magister.examples import results as results_page

        results_page.check_section(results_page.RESULTS_PAGE, name)  # before the run, not after
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger(ppo.__name__).setLevel(logging.WARNING)  # one line per run, not per log row
    device = f"backend {backend}, device {jax.devices()[0].device_kind}"
    logger.info("%s", device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = run(a.methods, range(a.seeds), a.updates, a.envs, a.steps, a.max_steps, a.buffer, a.log_every,
                  a.eval_every, a.heldout, out)
    wall = time.perf_counter() - t0
    summary = summarize(results)
    table, better = statistics(results)
    intervals = {m: {k: list(v) for k, v in row.items()} for m, row in table.items()}
    (out / "summary.json").write_text(json.dumps(  # the results first: a failing plot loses nothing
        {"mean_std": summary, "intervals": intervals, "improvement": {k: list(v) for k, v in better.items()}},
        indent=1))
    lines = [format_table(table)] + [f"{k} on a held-out problem = {v.value:.3f} [{v.low:.3f}, {v.high:.3f}]"
                                     for k, v in better.items()]
    runs = len(a.methods) * a.seeds
    logger.info("end of training, 95%% stratified bootstrap intervals over %d seeds (%d env steps each):\n%s",
                a.seeds, a.updates * a.envs * a.steps, "\n".join(lines))
    logger.info("%s; %d runs in %.0f s (compiles included)", device, runs, wall)
    plot(results, out / "atlas.png")
    logger.info("written: %s, %s", out / "summary.json", out / "atlas.png")
    if a.write_results:
        text = (f"end of training, 95% stratified bootstrap intervals over {a.seeds} seeds "
                f"({a.updates * a.envs * a.steps} env steps each):\n" + "\n".join(lines)
                + f"\n{device}; {runs} runs in {wall:.0f} s (compiles included)")
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.minigrid_rm.atlas")
        images = [results_page.save_image(out / "atlas.png", f"{name}.png")]
        results_page.write_section(results_page.RESULTS_PAGE, name, results_page.text_block(text), command,
                                   images=images)
    return summary


if __name__ == "__main__":
    main()
