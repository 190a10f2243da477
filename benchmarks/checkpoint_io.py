"""Checkpoint size and save+load time: ``magister.save``/``magister.load`` against ``torch.save`` and
``torch.load(weights_only=False)`` (the unpickling load that the old recipe needed), on the same states in
the same run. Compare the ratio, not the milliseconds.

    python benchmarks/checkpoint_io.py [--tasks 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import magister
from magister.curricula import PLR, SFL, LearningProgress
from magister.task_spaces import Discrete


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import torch

    space = Discrete(args.tasks)
    curricula = {
        "SFL": SFL(space, seed=0),
        "LearningProgress": LearningProgress(space, seed=0),
        "PLR": PLR(space, score="return", buffer_size=4000, seed=0),
    }
    print(f"{'curriculum':<18} {'MB':>6} {'magister ms':>12} {'torch ms':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        ours, theirs = os.path.join(folder, "c.ckpt"), os.path.join(folder, "c.pt")
        for name, cur in curricula.items():
            for t in cur.sample(5000):
                cur.update_on_episode(float(t % 3 == 0), 10, t, float(t % 2))
            state = cur.state_dict()
            m = _best(lambda: (magister.save(ours, state), magister.load(ours)), args.repeats)  # noqa: B023
            t = _best(lambda: (torch.save(state, theirs),  # noqa: B023
                               torch.load(theirs, weights_only=False)), args.repeats)
            mb = os.path.getsize(ours) / 1e6
            print(f"{name:<18} {mb:>6.1f} {m * 1e3:>12.0f} {t * 1e3:>9.0f} {m / t:>6.2f}")
    print(f"command: python benchmarks/checkpoint_io.py --tasks {args.tasks} --repeats {args.repeats}")


if __name__ == "__main__":
    main()
