"""The UED canon on JaxUED's maze in one command: held-out solve rate per prefab maze, with 95% intervals.

Every method trains with :func:`~magister.examples.maze.train.train` (the same network, PPO settings,
budget and seeds) and is evaluated on the held-out prefab mazes (SixteenRooms ... StandardMaze3) and a
fixed set of generated 60-wall mazes, 10 sampled episodes each. Statistics are
:mod:`magister.evaluation`'s (stratified bootstrap over seeds): per maze the mean solve rate over seeds
with its 95% interval; over the prefabs the mean and IQM; over all held-out mazes CVaR 10%.

``--parity`` runs the A/B instead: magister's PLR⊥ and ACCEL against the same trainer with JaxUED's
``LevelSampler`` in place of magister's buffer (``robust_plr_jaxued``, ``accel_jaxued``), reporting the
held-out solve rates, the replay statistics at the end of training (buffer solvable share, mean score,
mean staleness) with intervals over seeds, the probability that magister's arm beats JaxUED's, and the
curriculum's share of an update's time for both.

Outputs under ``--out``: ``summary.json`` (written first), ``maze.png`` (or ``maze-parity.png``) and every
run's ``metrics.jsonl``/``eval.json``/TensorBoard events. ``--write-results`` writes the section ``maze``
(``maze-parity``) of the results page on the CPU and ``maze-<backend>`` elsewhere.

Run ``python -m magister.examples.maze.canon --help`` in the jaxued virtualenv (``bash
benchmarks/_jaxued_env.sh``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import env as E

logger = logging.getLogger(__name__)

__all__ = ["PARITY_PAIRS", "main", "plot", "run", "tables"]

CANON = ("dr", "robust_plr", "accel", "paired", "repaired", "minimax")
#: magister arm -> JaxUED LevelSampler arm
PARITY_PAIRS = {"robust_plr": "robust_plr_jaxued", "accel": "accel_jaxued"}
REPLAY_STATS = ("solvable_fraction", "buffer_score_mean", "buffer_staleness_mean")


def run(methods: Sequence[str], seeds: Sequence[int], updates: int, out: Path, heldout: int,
        attempts: int, **overrides: Any) -> dict[str, list[dict[str, Any]]]:
    """Train every method for every seed; ``{method: [train() result per seed]}``."""
    from . import train as T

    results: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for seed in seeds:
        for m in methods:
            cfg = T.MazeConfig(method=m, updates=updates, seed=seed, **overrides)
            res = T.train(cfg, out / f"{m}_seed{seed}", log_every=max(1, updates // 10), heldout=heldout,
                          attempts=attempts, progress=False, plot=False)
            results[m].append(res)
            pre = np.asarray(res["eval"][:len(E.HELDOUT_PREFABS)])
            logger.info("%s seed %d: %.0f s, %d env steps, %.2f s per update after the compile; prefab "
                        "solve rate %.3f", m, seed, res["seconds"], res["env_steps"], res["update_seconds"],
                        pre.mean())
    return results


def _scores(results: dict[str, list[dict[str, Any]]]) -> dict[str, np.ndarray]:
    """``{method: seeds × held-out mazes}`` solve rates."""
    return {m: np.array([r["eval"] for r in runs]) for m, runs in results.items()}


def tables(results: dict[str, list[dict[str, Any]]], seed: int = 0) -> tuple[str, dict[str, Any]]:
    """The per-maze table (rows: mazes and aggregates, columns: methods) and its numbers."""
    from magister.evaluation import Estimate, format_table, interval_estimates

    scores = _scores(results)
    n_pre = len(E.HELDOUT_PREFABS)
    rows: dict[str, dict[str, Estimate]] = {}
    for j, maze in enumerate(E.HELDOUT_PREFABS):
        est = interval_estimates({m: s[:, j:j + 1] for m, s in scores.items()}, metrics=("mean",), seed=seed)
        rows[maze] = {m: e["mean"] for m, e in est.items()}
    pre = interval_estimates({m: s[:, :n_pre] for m, s in scores.items()}, metrics=("mean", "iqm"), seed=seed)
    rows["prefab mean"] = {m: e["mean"] for m, e in pre.items()}
    rows["prefab IQM"] = {m: e["iqm"] for m, e in pre.items()}
    if next(iter(scores.values())).shape[1] > n_pre:
        gen = interval_estimates({m: s[:, n_pre:] for m, s in scores.items()}, metrics=("mean",), seed=seed)
        rows["generated mean"] = {m: e["mean"] for m, e in gen.items()}
    allm = interval_estimates(scores, metrics=("cvar@0.1",), seed=seed)
    rows["CVaR 10% (all)"] = {m: e["cvar@0.1"] for m, e in allm.items()}
    numbers = {r: {m: list(e) for m, e in row.items()} for r, row in rows.items()}
    return format_table(rows, title="held-out maze"), numbers


def parity_tables(results: dict[str, list[dict[str, Any]]], shares: dict[str, dict[str, float]],
                  seed: int = 0) -> tuple[str, dict[str, Any]]:
    """The A/B: per arm the prefab solve rate and the replay statistics at the end (intervals over seeds),
    P(magister's arm > JaxUED's), and the curriculum's share of an update."""
    from magister.evaluation import Estimate, format_table, interval_estimates, probability_of_improvement

    scores = _scores(results)
    n_pre = len(E.HELDOUT_PREFABS)
    rows: dict[str, dict[str, Estimate]] = {}
    for m in results:
        row = dict(interval_estimates({m: scores[m][:, :n_pre]}, metrics=("mean",), seed=seed)[m])
        row = {"prefab solve rate": row["mean"]}
        for k in REPLAY_STATS:
            vals = np.array([[r["rows"][-1].get(k, np.nan)] for r in results[m]])
            if np.isfinite(vals).all():
                row[k] = interval_estimates({m: vals}, metrics=("mean",), seed=seed)[m]["mean"]
        if m in shares:
            row["curriculum share of update"] = Estimate(shares[m]["share"], float("nan"), float("nan"))
        rows[m] = row
    lines = [format_table(rows, title="arm")]
    numbers: dict[str, Any] = {m: {k: list(e) for k, e in row.items()} for m, row in rows.items()}
    for ours, theirs in PARITY_PAIRS.items():
        if ours in scores and theirs in scores:
            p = probability_of_improvement(scores[ours][:, :n_pre], scores[theirs][:, :n_pre], seed=seed)
            lines.append(f"P({ours} > {theirs}) on the prefabs: {p.value:.3f} [{p.low:.3f}, {p.high:.3f}]")
            numbers[f"P({ours}>{theirs})"] = list(p)
    return "\n".join(lines), numbers


def plot(results: dict[str, list[dict[str, Any]]], path: str | Path) -> None:
    """Per prefab maze, each method's mean solve rate over seeds with the range of its seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = _scores(results)
    n_pre = len(E.HELDOUT_PREFABS)
    fig, ax = plt.subplots(figsize=(12, 3.8))
    w = 0.8 / len(scores)
    x = np.arange(n_pre + 1)
    for i, (m, s) in enumerate(scores.items()):
        per = np.concatenate([s[:, :n_pre], s[:, :n_pre].mean(1, keepdims=True)], axis=1)
        mu = per.mean(0)
        ax.bar(x + i * w, mu, w, label=m, yerr=[mu - per.min(0), per.max(0) - mu], capsize=2)
    ax.set_xticks(x + 0.4 - w / 2, list(E.HELDOUT_PREFABS) + ["prefab mean"], rotation=20, fontsize=8)
    ax.set_ylabel("solve rate (mean over seeds; bars: min-max)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, ncol=len(scores))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def section_name(backend: str, parity: bool) -> str:
    base = "maze-parity" if parity else "maze"
    return base if backend == "cpu" else f"{base}-{backend}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.maze.canon", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=None, help=f"default: {' '.join(CANON)}")
    ap.add_argument("--parity", action="store_true", help="the A/B against JaxUED's LevelSampler")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--updates", type=int, default=120)
    ap.add_argument("--num-envs", type=int, default=32)
    ap.add_argument("--rollout-len", type=int, default=256)
    ap.add_argument("--buffer-size", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=32, help="generated held-out mazes next to the prefabs")
    ap.add_argument("--attempts", type=int, default=10, help="sampled episodes per held-out maze")
    ap.add_argument("--out", type=str, default="maze_out")
    ap.add_argument("--write-results", action="store_true",
                    help="write the table and plot into docs/results.md and docs/img/ (a source checkout)")
    a = ap.parse_args(argv)
    E.require_jaxued_or_exit()
    if a.seeds < 2:
        raise SystemExit(f"--seeds must be >= 2 for intervals over seeds, got {a.seeds}")
    methods = a.methods or ([m for pair in PARITY_PAIRS.items() for m in pair] if a.parity else list(CANON))
    import jax

    from . import train as T

    bad = [m for m in methods if m not in T.METHODS]
    if bad:
        raise SystemExit(f"unknown methods {bad}; choose from {T.METHODS}")
    backend = jax.default_backend()
    name = section_name(backend, a.parity)
    if a.write_results:
        from magister.examples import results as results_page

        results_page.check_section(results_page.RESULTS_PAGE, name)  # before the run, not after
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = f"backend {backend}, device {jax.devices()[0].device_kind}"
    logger.info("%s", device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    over = {"num_envs": a.num_envs, "rollout_len": a.rollout_len, "buffer_size": a.buffer_size,
            "hidden": a.hidden}
    t0 = time.perf_counter()
    results = run(methods, range(a.seeds), a.updates, out, a.heldout, a.attempts, **over)
    wall = time.perf_counter() - t0
    steps = a.updates * a.num_envs * a.rollout_len
    if a.parity:
        shares = {m: T.curriculum_share(T.MazeConfig(method=m, **over)) for m in methods
                  if m in T.BUFFERED + T.JAXUED_ARMS}
        table, numbers = parity_tables(results, shares)
        numbers["curriculum_share"] = shares
    else:
        table, numbers = tables(results)
    text = (f"held-out solve rate, mean over {a.seeds} seeds [95% bootstrap interval], {steps} env steps per "
            f"run ({a.updates} updates x {a.num_envs} envs x {a.rollout_len} steps), {a.attempts} episodes "
            f"per maze:\n{table}\n{device}; {len(methods) * a.seeds} runs in {wall:.0f} s "
            "(compiles included)")
    # results first, then the plot
    (out / "summary.json").write_text(json.dumps({"table": numbers, "text": text}, indent=1))
    png = out / f"{name}.png"
    plot(results, png)
    logger.info("%s", text)
    logger.info("written: %s, %s", out / "summary.json", png)
    if a.write_results:
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.maze.canon")
        images = [results_page.save_image(png, f"{name}.png")]
        results_page.write_section(results_page.RESULTS_PAGE, name, results_page.text_block(text), command,
                                   images=images)
    return numbers


if __name__ == "__main__":
    main()
