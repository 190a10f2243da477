"""Environment speed of the bundled logic puzzles.

For each puzzle at its easiest setting and its human-easy preset (PUZZLES benchmark, Table 7), a random
agent that picks uniformly among the masked-in actions plays for a fixed wall-clock budget on one core
(``action_masks()`` is called every step and counts towards the cost; resets, which generate a new
instance, count too). The table shows env steps per second, resets per second, and the ratio of the step
rate to Gymnasium's ``CartPole-v1`` stepped with random actions in the same run — ratios are comparable
across machines, absolute rates are not.

Run: ``python benchmarks/puzzles_env_speed.py [--seconds 1.0] [--write-results]``.
"""

from __future__ import annotations

import argparse
import logging
import time

import gymnasium as gym
import numpy as np

from magister.examples.puzzles.task import LADDERS, PUZZLES
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording

logger = logging.getLogger(__name__)

PRESETS = {
    "flip": ("3x3c", "3x3c"), "flood": ("3x3c6m5", "12x12c6m5"), "sixteen": ("2x3", "3x3"),
    "fifteen": ("2x2", "4x4"), "netslide": ("2x3b1", "3x3b1"), "pegs": ("4x4random", "5x7cross"),
    "samegame": ("2x3c3s2", "5x5c3s2"), "untangle": ("4", "6"),
}


def cartpole_rate(seconds: float) -> float:
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(int(rng.integers(2)))
        n += 1
        if term or trunc:
            env.reset()
    return n / (time.perf_counter() - t0)


def puzzle_rate(puzzle: str, params: str, seconds: float) -> tuple[float, float, float]:
    """(steps/s, resets/s, success rate of the random agent's finished episodes)."""
    env = PUZZLES[puzzle](params)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps = resets = wins = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        legal = np.flatnonzero(env.action_masks())
        _, _, term, trunc, info = env.step(int(legal[rng.integers(len(legal))]) if len(legal) else 0)
        steps += 1
        if term or trunc:
            wins += bool(info["success"])
            resets += 1
            env.reset()
    dt = time.perf_counter() - t0
    return steps / dt, resets / dt, wins / max(1, resets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="wall-clock budget per measurement")
    parser.add_argument("--write-results", action="store_true",
                        help="write the output into docs/results.md and benchmarks/README.md")
    args = parser.parse_args()
    with recording("puzzles-env-speed", enabled=args.write_results, pages=(RESULTS_PAGE, BENCHMARKS_README)):
        run(args.seconds)


def run(seconds: float) -> None:
    base = cartpole_rate(seconds)
    rows = [("CartPole-v1", "-", base, float("nan"), float("nan"), 1.0)]
    for puzzle in PUZZLES:
        settings = PRESETS.get(puzzle, (LADDERS[puzzle][0], LADDERS[puzzle][-1]))
        for params in dict.fromkeys(settings):
            sps, rps, win = puzzle_rate(puzzle, params, seconds)
            rows.append((puzzle, params, sps, rps, win, sps / base))
    header = (f"{'env':<12} {'params':<11} {'steps/s':>9} {'resets/s':>9} {'random win':>10} "
              f"{'vs CartPole':>11}")
    lines = [header, "-" * len(header)]
    for name, params, sps, rps, win, ratio in rows:
        lines.append(f"{name:<12} {params:<11} {sps:>9.0f} {rps:>9.0f} {win:>10.2f} {ratio:>11.3f}")
    print(f"{machine()} at the end")
    print("\n".join(lines))  # a benchmark script's table is its output


if __name__ == "__main__":
    main()
