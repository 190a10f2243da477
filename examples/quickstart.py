"""The main job: a curriculum against domain randomisation on logic puzzles, same budget, same seeds.

    python -m magister.examples.quickstart            # the time on 2 CPU cores: the results page
    python -m magister.examples.quickstart --help
    python -m magister.examples.quickstart --write-results   # the table and plot become docs/results.md's

The task space is a ladder of difficulties of one puzzle (by default Sixteen on 3x3 and 4x4 boards shuffled by
1 to 8 moves or fully, with a 30-step limit), where a random policy solves the three shallowest difficulties
now and then and the other seven essentially never. The curriculum chooses a difficulty; every episode plays
a fresh training instance of it. Two PPO agents (:mod:`magister.examples.puzzle_ppo`) train with the same
budget and seeds: one samples difficulties uniformly (DomainRandomization), the other with a curriculum
(Sampling for Learnability, full-distribution variant, by default), five seeds each. Both are then evaluated
on held-out instances (seeds never trained on) of every difficulty: each run gives one held-out success per
difficulty, so each method gives a ``seeds × difficulties`` score matrix. The script prints a table —
held-out success per difficulty, where each run spent its training episodes, and the share of episodes
spent on instances the agent never solved — then the statistics of :mod:`magister.evaluation`: mean and
interquartile mean with stratified bootstrap 95% intervals, the probability that a curriculum run beats a
domain-randomisation run on a difficulty, and the difference of the means with its interval. It writes
``results.json`` (every run's scores, then the statistics) before it draws ``quickstart.png`` (next to each
run's own plot and TensorBoard logs), and says whether its figures fall inside the intervals the results page
quotes. It closes with a few plain lines (:func:`summary_text`): each method's held-out success with its
interval, whether the difference is significant, and where the plot, the logs and the results file are.

Needs the ``examples`` extra (torch, tqdm, TensorBoard, matplotlib, scipy); it checks at start.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from magister.evaluation import (
    Estimate,
    difference,
    format_estimate,
    format_table,
    interval_estimates,
    probability_of_improvement,
)
from magister.examples import results as results_page
from magister.examples._cli import require

if TYPE_CHECKING:
    from magister.examples.puzzle_ppo import Args, RunResult

#: What the command needs besides the core install, and the extra that installs it (checked at start, before
#: the first run, so a missing plotting library cannot end a finished run).
NEEDS = {"torch": "examples", "tqdm": "examples", "tensorboard": "examples", "matplotlib": "examples",
         "scipy": "examples"}

#: The embedded defaults of the main job: Sixteen (shift rows/columns back into order), 3x3 boards shuffled
#: by 1, 2, 3, 5, 8 moves and fully, and 4x4 boards shuffled by 3, 5, 8 moves and fully. A random policy
#: solves about 12%, 3% and 2% of the three shallowest within the 30-step limit and essentially none of the
#: other seven. The comparison (ten runs) takes about 5 minutes on 2 cores.
DEFAULTS = {
    "puzzle": "sixteen",
    "size": "3x3",
    "params": ["3x3m1", "3x3m2", "3x3m3", "3x3m5", "3x3m8", "3x3", "4x4m3", "4x4m5", "4x4m8", "4x4"],
    "curriculum": "sfl-dist",
    "total_steps": 150_000,
    "num_envs": 32,
    "num_steps": 32,
    "max_steps": 30,
    "train_seeds": 200,
    "eval_seeds": 25,
    "eval_every": 20,
    "seeds": [0, 1, 2, 3, 4],
}
#: The statistics: metrics with intervals, their confidence and the bootstrap's resamples and seed.
METRICS = ("mean", "iqm")
CONFIDENCE = 0.95
RESAMPLES = 5000
STATS_SEED = 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m magister.examples.quickstart",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--curriculum", default=DEFAULTS["curriculum"],
                   help="curriculum to compare (sfl-dist, sfl, plr, lp, ...)")
    p.add_argument("--baseline", default="dr", help="the baseline curriculum")
    p.add_argument("--puzzle", default=DEFAULTS["puzzle"])
    p.add_argument("--size", default=DEFAULTS["size"], help="board parameters of the depth ladder")
    p.add_argument("--params", nargs="*", default=DEFAULTS["params"],
                   help="explicit parameter strings (difficulties); default: the depth ladder of --size")
    p.add_argument("--total-steps", type=lambda s: int(float(s)), default=DEFAULTS["total_steps"])
    p.add_argument("--num-envs", type=int, default=DEFAULTS["num_envs"])
    p.add_argument("--num-steps", type=int, default=DEFAULTS["num_steps"])
    p.add_argument("--max-steps", type=int, default=DEFAULTS["max_steps"], help="episode step limit")
    p.add_argument("--train-seeds", type=int, default=DEFAULTS["train_seeds"])
    p.add_argument("--eval-seeds", type=int, default=DEFAULTS["eval_seeds"])
    p.add_argument("--eval-every", type=int, default=DEFAULTS["eval_every"])
    p.add_argument("--seeds", type=int, nargs="+", default=DEFAULTS["seeds"],
                   help="training seeds (runs per method); the intervals are over them")
    p.add_argument("--vector", default="sync", choices=["sync", "async"])
    p.add_argument("--run-dir", default="runs/quickstart")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--write-results", action="store_true",
                   help="write the table and the plot into docs/results.md and docs/img/ (a source checkout)")
    p.epilog = ("Needs the 'examples' extra (torch, tqdm, TensorBoard, matplotlib, scipy): "
                "pip install 'magister[examples]'.")
    return p.parse_args(argv)


def run_args(ns: argparse.Namespace, curriculum: str, seed: int) -> Args:
    from magister.examples.puzzle_ppo import Args

    return Args(puzzle=ns.puzzle, size=ns.size, params=tuple(ns.params), curriculum=curriculum,
                total_steps=ns.total_steps,
                num_envs=ns.num_envs, num_steps=ns.num_steps, max_steps=ns.max_steps,
                train_seeds=ns.train_seeds, eval_seeds=ns.eval_seeds, eval_every=ns.eval_every,
                seed=seed, vector=ns.vector, run_dir=ns.run_dir, run_name=f"{curriculum}_s{seed}",
                progress=ns.progress)


def success(runs: list[RunResult], params: str) -> float:
    """Held-out success on one difficulty, averaged over the runs (seeds)."""
    return float(np.mean([r.eval.get(params, {}).get("success", np.nan) for r in runs]))


def table(results: dict[str, list[RunResult]], params: list[str]) -> str:
    """The comparison table as text (every number is a mean over the seeds)."""
    names = list(results)
    head = f"{'difficulty':>12} | " + " | ".join(f"{n + ' success':>12}" for n in names) + " | " + \
        " | ".join(f"{n + ' episodes':>13}" for n in names)
    lines = [head, "-" * len(head)]
    for p in params:
        eps = [np.mean([r.episodes_per_difficulty.get(p, 0) for r in results[n]]) for n in names]
        tot = [np.mean([max(sum(r.episodes_per_difficulty.values()), 1) for r in results[n]]) for n in names]
        lines.append(f"{p:>12} | " + " | ".join(f"{success(results[n], p):>12.2f}" for n in names) + " | " +
                     " | ".join(f"{e:>6.0f} ({e / t:4.0%})" for e, t in zip(eps, tot)))
    lines.append("-" * len(head))
    mean = [np.mean([success(results[n], p) for p in params]) for n in names]
    lines.append(f"{'mean':>12} | " + " | ".join(f"{m:>12.3f}" for m in mean))
    lines.append("")
    for n in names:
        runs = results[n]
        wasted = np.mean([r.unsolved_episode_share for r in runs])
        lines.append(f"{n}: {runs[0].global_step} steps x {len(runs)} seed(s), "
                     f"{np.mean([r.seconds for r in runs]):.0f}s per run; {wasted:.0%} of training episodes "
                     f"were spent on instances it never solved")
    return "\n".join(lines)


def score_matrix(runs: list[RunResult], params: list[str]) -> np.ndarray:
    """Held-out success, ``runs × difficulties`` (one row per seed)."""
    return np.array([[r.eval.get(p, {}).get("success", np.nan) for p in params] for r in runs], dtype=float)


def save_results(results: dict[str, list[RunResult]], params: list[str], seeds: list[int],
                 path: Path) -> Path:
    """Every run's held-out success per difficulty, training episodes and times, as JSON (written before
    anything is plotted, so a failing plot loses nothing)."""
    data = {"difficulties": params, "seeds": list(seeds),
            "scores": {n: score_matrix(runs, params).tolist() for n, runs in results.items()},
            "episodes": {n: [[r.episodes_per_difficulty.get(p, 0) for p in params] for r in runs]
                         for n, runs in results.items()},
            "unsolved_episode_share": {n: [r.unsolved_episode_share for r in runs]
                                       for n, runs in results.items()},
            "seconds": {n: [r.seconds for r in runs] for n, runs in results.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path


def save_statistics(path: Path, text: str, est: dict[str, dict[str, Estimate]], poi: Estimate,
                    diff: Estimate, baseline: str, curriculum: str) -> None:
    """Add the statistics to the results file: the printed block (``"statistics_text"``) and each figure as
    ``[value, low, high]`` (``"statistics"``)."""
    data = json.loads(path.read_text())
    figures = {f"{m} {metric}": list(e) for m, metrics in est.items() for metric, e in metrics.items()}
    figures[f"P({curriculum} > {baseline})"] = list(poi)
    figures[f"mean({curriculum}) - mean({baseline})"] = list(diff)
    data["statistics"] = {k: [None if np.isnan(v) else v for v in vs] for k, vs in figures.items()}
    data["statistics_text"] = text
    path.write_text(json.dumps(data, indent=1))


def statistics(scores: dict[str, np.ndarray], baseline: str, curriculum: str
               ) -> tuple[dict[str, dict[str, Estimate]], Estimate, Estimate]:
    """``(interval estimates per method, P(curriculum > baseline), mean(curriculum) - mean(baseline))``,
    each with its stratified bootstrap interval (:mod:`magister.evaluation`)."""
    est = interval_estimates(scores, METRICS, confidence=CONFIDENCE, n_resamples=RESAMPLES, seed=STATS_SEED)
    x, y = scores[curriculum], scores[baseline]
    poi = probability_of_improvement(x, y, confidence=CONFIDENCE, seed=STATS_SEED, n_resamples=RESAMPLES)
    diff = difference(x, y, "mean", confidence=CONFIDENCE, seed=STATS_SEED, n_resamples=RESAMPLES)
    return est, poi, diff


def _f(e: Estimate) -> str:
    return format_estimate(e, 3)  # "0.412 [0.301, 0.522]", or "0.412 [n/a]" without an interval


def stats_text(scores: dict[str, np.ndarray], baseline: str, curriculum: str,
               seeds: list[int] | None = None) -> str:
    """The statistics block: the interval table, P(improvement), the difference and the verdict, then every
    run's scores (the data the intervals come from, so they can be recomputed from the page)."""
    est, poi, diff = statistics(scores, baseline, curriculum)
    n = {k: len(v) for k, v in scores.items()}
    lines = [f"held-out success over difficulties, {round(CONFIDENCE * 100)}% stratified bootstrap intervals "
             f"({RESAMPLES} resamples; runs: " + ", ".join(f"{k} {v}" for k, v in n.items()) + "):",
             format_table(est),
             f"P({curriculum} > {baseline}) = {_f(poi)}",
             f"mean({curriculum}) - mean({baseline}) = {_f(diff)}"]
    if diff.excludes(0.0):
        side = "higher" if diff.low > 0 else "lower"
        lines.append(f"verdict: {curriculum}'s mean held-out success is {side} than {baseline}'s; the "
                     f"{round(CONFIDENCE * 100)}% interval of the difference excludes 0")
    else:
        lines.append("verdict: no difference shown: the interval of the difference includes 0"
                     + (" (one run per method: no interval)" if min(n.values()) < 2 else ""))
    lines.append("")
    lines.append("held-out success per run (rows: method and seed; columns: the difficulties above, in "
                 "order):")
    for name, m in scores.items():
        for k, row in enumerate(m):
            seed = seeds[k] if seeds is not None else k
            lines.append(f"{name} s{seed}: " + " ".join(f"{v:.4f}" for v in row))
    return "\n".join(lines)


def _label(name: str) -> str:
    return "domain randomisation (dr)" if name == "dr" else f"curriculum ({name})"


def _interval(e: Estimate) -> str:
    return "no interval (one run)" if np.isnan(e.low) else f"95% interval {e.low:.3f} to {e.high:.3f}"


def summary_text(est: dict[str, dict[str, Estimate]], diff: Estimate, baseline: str, curriculum: str,
                 n_difficulties: int, n_seeds: int, run_dir: str | Path, results_file: str | Path) -> str:
    """The closing lines, for a reader who has not met the statistics: each method's held-out success
    (share of unseen instances solved, mean over difficulties and seeds) with its interval, whether the
    difference is significant, and where the plot, the logs and the full figures are."""
    width = max(len(_label(n)) for n in (curriculum, baseline)) + 1
    lines = [f"In short: held-out success (the share of unseen puzzle instances solved, mean over "
             f"{n_difficulties} difficulties and {n_seeds} seed{'s' if n_seeds != 1 else ''}):"]
    for name in (curriculum, baseline):
        e = est[name]["mean"]
        lines.append(f"  {_label(name) + ':':<{width}} {e.value:.3f} ({_interval(e)})")
    better = "the curriculum" if diff.value > 0 else "domain randomisation" if baseline == "dr" else baseline
    if diff.excludes(0.0):
        verdict = f"{better} does better, and the difference is significant (its 95% interval excludes zero)"
    elif np.isnan(diff.low):
        verdict = "one run per method gives no interval: run more seeds to tell"
    else:
        verdict = "no significant difference on this budget (its 95% interval includes zero)"
    lines.append(f"  {'difference:':<{width}} {diff.value:+.3f} ({_interval(diff)})")
    lines.append(f"  {verdict}")
    run_dir = Path(run_dir)
    lines.append(f"plot: {run_dir / 'quickstart.png'} "
                 f"(each run's curriculum: {run_dir}/<run>/curriculum.png)")
    lines.append(f"logs: tensorboard --logdir {run_dir}")
    lines.append(f"every run's scores and the full statistics (printed above): {results_file}")
    return "\n".join(lines)


_RUN_ROW = re.compile(r"^([\w-]+) s(\d+): ([0-9. ]+)$", re.M)
_EST = r"(-?[0-9.]+) \[(-?[0-9.]+|n/a)(?:, (-?[0-9.]+))?\]"


def parse_scores(text: str) -> dict[str, np.ndarray]:
    """The per-run score matrices from a :func:`stats_text` block (the results page's section)."""
    rows: dict[str, list[list[float]]] = {}
    for m in _RUN_ROW.finditer(text):
        rows.setdefault(m[1], []).append([float(v) for v in m[3].split()])
    if not rows:
        raise ValueError("no per-run scores found (lines such as 'dr s0: 0.7200 0.2800 ...')")
    return {k: np.array(v) for k, v in rows.items()}


def parse_quoted(text: str) -> dict[str, Estimate]:
    """The quoted figures of a :func:`stats_text` block: ``"<method> <metric>"``, ``"P(...)"`` and
    ``"mean(...) - mean(...)"`` -> Estimate."""
    out: dict[str, Estimate] = {}
    head = next((line for line in text.splitlines() if line.strip().startswith("method |")), None)
    metrics = [c.strip() for c in head.split("|")[1:]] if head else []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if metrics and len(cells) == len(metrics) + 1 and cells[0] != "method":
            for metric, cell in zip(metrics, cells[1:]):
                m = re.fullmatch(_EST, cell)
                if m and m[3] is not None:
                    out[f"{cells[0]} {metric}"] = Estimate(float(m[1]), float(m[2]), float(m[3]))
        m = re.match(r"^(P\(.*?\)|mean\(.*?\) - mean\(.*?\)) = " + _EST + "$", line)
        if m and m[4] is not None:
            out[m[1]] = Estimate(float(m[2]), float(m[3]), float(m[4]))
    return out


def compare_with_page(mine: dict[str, Estimate], page: Path = results_page.RESULTS_PAGE) -> str:
    """Whether this run's point figures lie inside the intervals the results page quotes."""
    try:
        quoted = parse_quoted(results_page.read_section(page.read_text(), "quickstart"))
    except (OSError, ValueError):
        return "not compared with the results page (no source checkout or no quoted intervals)"
    if not quoted:
        return "not compared with the results page (no quoted intervals)"
    outside = [f"{k} {v.value:.3f} (quoted {quoted[k].low:.3f}-{quoted[k].high:.3f})"
               for k, v in mine.items() if k in quoted and not quoted[k].contains(round(v.value, 3))]
    if outside:
        return ("OUTSIDE the results page's 95% intervals: " + "; ".join(outside)
                + ". Exact digits differ across CPUs (torch kernels); a figure outside its interval is worth "
                  "a look (another machine, another budget, or a change in the code)")
    return "every figure above lies inside the interval the results page quotes for it"


def plot(results: dict[str, list[RunResult]], params: list[str], path: Path) -> None:
    """Held-out success per difficulty for every curriculum: the mean over seeds and each seed's value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(results)
    x = np.arange(len(params))
    for i, (name, runs) in enumerate(results.items()):
        m = score_matrix(runs, params)
        bars = ax.bar(x + i * width, m.mean(axis=0), width, label=f"{name} (mean of {len(runs)} seeds)",
                      alpha=0.8)
        for row in m:
            ax.plot(x + i * width, row, ".", color=bars.patches[0].get_facecolor(), ms=4, alpha=0.9,
                    markeredgecolor="k", markeredgewidth=0.3)
    ax.set_xticks(x + width * (len(results) - 1) / 2, params)
    ax.set(ylabel="held-out success", ylim=(0, 1.02),
           title="held-out success per difficulty (same budget; dots: seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, list[RunResult]]:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ns = parse(argv)
    require(NEEDS, "python -m magister.examples.quickstart")
    from magister.examples.puzzle_ppo import difficulties, train

    if ns.write_results:
        results_page.check_section(results_page.RESULTS_PAGE, "quickstart")  # before the run, not after
    results: dict[str, list[RunResult]] = {ns.baseline: [], ns.curriculum: []}
    t0 = time.perf_counter()
    for seed in ns.seeds:
        for name in results:
            print(f"== {name}, seed {seed}: {ns.total_steps} steps ==", flush=True)
            results[name].append(train(run_args(ns, name, seed)))
    params = difficulties(run_args(ns, ns.curriculum, ns.seeds[0]))
    saved = save_results(results, params, ns.seeds, Path(ns.run_dir) / "results.json")
    runs = sum(len(r) for r in results.values())
    scores = {n: score_matrix(r, params) for n, r in results.items()}
    text = (table(results, params) + f"\nall {runs} runs: {time.perf_counter() - t0:.0f}s "
            f"({results_page.machine()} at the end)\n\n"
            + stats_text(scores, ns.baseline, ns.curriculum, ns.seeds))
    est, poi, diff = statistics(scores, ns.baseline, ns.curriculum)
    save_statistics(saved, text, est, poi, diff, ns.baseline, ns.curriculum)
    print()
    print(text)
    if _default_settings(ns):
        print("\n" + compare_with_page(parse_quoted(text)))
    out = Path(ns.run_dir) / "quickstart.png"
    plot(results, params, out)
    if ns.write_results:
        image = results_page.save_image(out, "quickstart.png")
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.quickstart")
        results_page.write_section(results_page.RESULTS_PAGE, "quickstart", results_page.text_block(text),
                                   command, images=[image])
    print("\n" + summary_text(est, diff, ns.baseline, ns.curriculum, len(params), len(ns.seeds), ns.run_dir,
                              saved))
    return results


def _default_settings(ns: argparse.Namespace) -> bool:
    """Whether the run's training settings are the results page's (only then are its figures comparable)."""
    same = all(getattr(ns, k) == v for k, v in DEFAULTS.items())
    return same and ns.baseline == "dr"


if __name__ == "__main__":
    main()
