"""The main job: a curriculum against domain randomisation on logic puzzles, same budget, same seeds.

    python -m magister.examples.quickstart            # about 2 minutes on 2 CPU cores
    python -m magister.examples.quickstart --help
    python -m magister.examples.quickstart --write-results   # the table and plot become docs/results.md's

The task space is a ladder of difficulties of one puzzle (by default Sixteen on 3x3 and 4x4 boards shuffled by
1 to 8 moves or fully, with a 30-step limit), where a random policy solves the three shallowest difficulties
now and then and the other seven essentially never. The curriculum chooses a difficulty; every episode plays
a fresh training instance of it. Two PPO agents (:mod:`magister.examples.puzzle_ppo`) train with the same
budget and seeds: one samples difficulties uniformly (DomainRandomization), the other with a curriculum
(Sampling for Learnability, full-distribution variant, by default). Both are then evaluated on held-out
instances (seeds never trained on) of every difficulty. The script prints a table — held-out success per
difficulty, where each run spent its training episodes, and the share of episodes spent on instances the
agent never solved — and writes ``quickstart.png`` next to each run's own plot and TensorBoard logs.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np

from magister.examples import results as results_page
from magister.examples.puzzle_ppo import Args, RunResult, difficulties, train

#: The embedded defaults of the main job: Sixteen (shift rows/columns back into order), 3x3 boards shuffled
#: by 1, 2, 3, 5, 8 moves and fully, and 4x4 boards shuffled by 3, 5, 8 moves and fully. A random policy
#: solves about 12%, 3% and 2% of the three shallowest within the 30-step limit and essentially none of the
#: other seven. The comparison runs in about 2 minutes on 2 cores.
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
    "seeds": [0, 1],
}


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
                   help="training seeds; the table averages over them")
    p.add_argument("--vector", default="sync", choices=["sync", "async"])
    p.add_argument("--run-dir", default="runs/quickstart")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--write-results", action="store_true",
                   help="write the table and the plot into docs/results.md and docs/img/ (a source checkout)")
    return p.parse_args(argv)


def run_args(ns: argparse.Namespace, curriculum: str, seed: int) -> Args:
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


def plot(results: dict[str, list[RunResult]], params: list[str], path: Path) -> None:
    """Bar chart of held-out success per difficulty for every curriculum (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(results)
    x = np.arange(len(params))
    for i, (name, runs) in enumerate(results.items()):
        ax.bar(x + i * width, [success(runs, p) for p in params], width, label=name)
    ax.set_xticks(x + width * (len(results) - 1) / 2, params)
    ax.set(ylabel="held-out success", ylim=(0, 1), title="held-out success per difficulty (same budget)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, list[RunResult]]:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ns = parse(argv)
    if ns.write_results:
        results_page.check_section(results_page.RESULTS_PAGE, "quickstart")  # before the run, not after
    results: dict[str, list[RunResult]] = {ns.baseline: [], ns.curriculum: []}
    t0 = time.perf_counter()
    for seed in ns.seeds:
        for name in results:
            print(f"== {name}, seed {seed}: {ns.total_steps} steps ==", flush=True)
            results[name].append(train(run_args(ns, name, seed)))
    params = difficulties(run_args(ns, ns.curriculum, ns.seeds[0]))
    runs = sum(len(r) for r in results.values())
    text = table(results, params) + f"\nall {runs} runs: {time.perf_counter() - t0:.0f}s " \
        f"({results_page.machine()} at the end)"
    print()
    print(text)
    out = Path(ns.run_dir) / "quickstart.png"
    plot(results, params, out)
    if ns.write_results:
        image = results_page.save_image(out, "quickstart.png")
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.quickstart")
        results_page.write_section(results_page.RESULTS_PAGE, "quickstart", results_page.text_block(text),
                                   command, images=[image])
    print(f"\nplots: {out} and {ns.run_dir}/<run>/curriculum.png; "
          f"TensorBoard: tensorboard --logdir {ns.run_dir}")
    return results


if __name__ == "__main__":
    main()
