"""What one Ray feed alone in its process costs per episode (the direct path: each send goes out at once).

A curriculum actor (``serve_ray``, uniform over 10 tasks) and one feed (``magister.sync.connect``) in this
driver; the feed plays ``--episodes`` one-step episodes (``next_task()`` then ``record_episode``) with its
default settings, then as many ``unbatched`` (``prefetch=1, update_batch=1``: a call per episode), in
``--rounds`` rounds; printed: microseconds per episode, each round and the median. The number is the whole
round trip as the env sees it, actor included, so it is meant for A/B runs of two versions back to back::

    OMP_NUM_THREADS=1 python benchmarks/sync_ray_alone.py [--episodes 3000] [--rounds 3]
    OMP_NUM_THREADS=1 PYTHONPATH=<a worktree's parent> python benchmarks/sync_ray_alone.py   # the other side
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ray
from tqdm import tqdm

import magister
from magister.curricula import DomainRandomization
from magister.sync import connect
from magister.sync.ray_server import serve_ray
from magister.task_spaces import Discrete

SETTINGS = {"default": {}, "unbatched": {"prefetch": 1, "update_batch": 1}}


def per_episode(address: str, episodes: int, options: dict) -> float:
    """Seconds per episode of a fresh feed, after 200 episodes of warm-up."""
    feed = connect(address, timeout=60.0, **options)
    for _ in range(200):
        feed.record_episode(feed.next_task(), 1.0, 1, 0.0)
    start = time.perf_counter()
    for _ in range(episodes):
        feed.record_episode(feed.next_task(), 1.0, 1, 0.0)
    seconds = (time.perf_counter() - start) / episodes
    feed.close()
    return seconds


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    server = serve_ray(DomainRandomization(Discrete(10), seed=0), name="ray-alone")
    out: dict[str, list[float]] = {name: [] for name in SETTINGS}
    try:
        for _ in tqdm(range(args.rounds), desc="rounds"):
            for name, options in SETTINGS.items():
                out[name].append(per_episode(server.address, args.episodes, options))
    finally:
        server.close()
        ray.shutdown()
    print(f"magister from {os.path.dirname(magister.__file__)}; {args.episodes} episodes per round")
    for name, values in out.items():
        rounds = " ".join(f"{v * 1e6:,.0f}" for v in values)
        print(f"{name:9} µs per episode: median {statistics.median(values) * 1e6:,.0f} (rounds: {rounds})")
    return out


if __name__ == "__main__":
    main()
