"""Puzzle PPO trainer throughput with a curriculum vs with one fixed task and no magister at all.

    python benchmarks/puzzle_trainer_speed.py                  # ~3 minutes on 2 cores
    python benchmarks/puzzle_trainer_speed.py --quick
    python benchmarks/puzzle_trainer_speed.py --write-results   # the output becomes docs/results.md's figures

Every configuration trains the same PPO (:mod:`magister.examples.puzzle_ppo`) for the same number of steps,
without evaluation, plots or TensorBoard, so the clock measures rollouts + updates only. Configurations
alternate within each round (the machine is noisy: only ratios measured in one run mean anything) and the
table shows medians over rounds:

* ``none``: the bare puzzle env on one fixed difficulty, no task wrapper, no sync wrapper, no curriculum;
* ``dr`` / ``sfl`` / ``plr``: the full path — task wrapper, sync wrapper (in-process), the curriculum
  sampling a task on every reset and receiving every episode (``plr`` also scores each rollout on the learner
  side with :func:`magister.integrations.scores.feed_scores`).

The ratio column is steps/s relative to ``none`` (issue target for a curriculum: ≥ 0.97).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from magister.examples.puzzle_ppo import Args, train
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording


def run(curriculum: str, steps: int, ns: argparse.Namespace, run_dir: str) -> float:
    args = Args(puzzle=ns.puzzle, size=ns.size, curriculum=curriculum, total_steps=steps,
                num_envs=ns.num_envs, num_steps=ns.num_steps, max_steps=ns.max_steps, eval_every=0,
                eval_seeds=1, checkpoint_every=0, tensorboard=False, progress=False, plot=False,
                run_dir=run_dir, run_name=curriculum, seed=0)
    result = train(args)
    return result.global_step / (result.seconds - result.eval_seconds)  # the final evaluation is excluded


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--puzzle", default="sixteen")
    p.add_argument("--size", default="3x3")
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--steps", type=int, default=60_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--curricula", nargs="+", default=["none", "dr", "sfl", "plr"])
    p.add_argument("--quick", action="store_true", help="a smoke run: few steps, one round")
    p.add_argument("--write-results", action="store_true",
                   help="write the output into docs/results.md and benchmarks/README.md")
    ns = p.parse_args()
    if ns.quick:
        ns.steps, ns.rounds = 8_192, 1
    with recording("puzzle-trainer-speed", enabled=ns.write_results, pages=(RESULTS_PAGE, BENCHMARKS_README)):
        measure(ns)


def measure(ns: argparse.Namespace) -> None:
    print(f"start: {machine()}", flush=True)
    sps: dict[str, list[float]] = {c: [] for c in ns.curricula}
    with tempfile.TemporaryDirectory() as tmp:
        run("none", 2048, ns, tmp)  # warm-up: imports, allocator, first compilation of kernels
        for r in range(ns.rounds):
            for c in ns.curricula:
                sps[c].append(run(c, ns.steps, ns, tmp))
                print(f"round {r + 1}/{ns.rounds} {c:>5}: {sps[c][-1]:8.0f} steps/s", flush=True)
    base = statistics.median(sps["none"]) if "none" in sps else None
    print(f"\n{ns.puzzle} {ns.size}, {ns.num_envs} envs x {ns.num_steps} steps, {ns.steps} steps per run, "
          f"median of {ns.rounds} round(s)")
    print(f"end: {machine()}")
    print(f"{'curriculum':>10} | {'steps/s':>9} | {'ratio vs none':>13}")
    for c, v in sps.items():
        m = statistics.median(v)
        ratio = f"{m / base:13.3f}" if base else f"{'n/a':>13}"
        print(f"{c:>10} | {m:9.0f} | {ratio}")


if __name__ == "__main__":
    main()
