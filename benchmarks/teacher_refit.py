"""Does a teacher's refit stall the workers? Task delivery and reset waits while the GMM teachers refit.

Run: ``python benchmarks/teacher_refit.py [--quick] [--write-results]`` (``--write-results``: the output
becomes the current figures of docs/results.md and benchmarks/README.md).

A real curriculum endpoint (:func:`magister.serve`, over ``ipc://``) in this process serves a 2-D ``Box``
task space to ``--workers`` worker processes (forked, as in :mod:`benchmarks.sync_latency`). Each worker
steps a :class:`~magister.GymnasiumSyncWrapper` over a one-step env whose episode sleeps 1-5 ms (uniform,
its own generator) and pays the toy env's reward for the task (:class:`magister.examples.teacher_toy.ToyEnv`,
one per worker), with the feed's default settings (tasks prefetched, updates held). The same run is made with

* ``dr``: :class:`~magister.curricula.DomainRandomization` (no refit: the floor);
* each GMM teacher (ALP-GMM, Covar-GMM: a Gaussian mixture fitted for every k in 2..10 on the last
  ``fit_rate`` episodes, the lowest AIC kept) with its default ``background=True`` (the fit runs on a
  snapshot in a worker thread of the learner's process, the server keeps sampling the current model), and
  again with ``background=False`` (the fit runs inside the episode update that triggers it, under the
  curriculum's lock: what a refit in line costs the workers).

``--fit-rate`` is small enough that the teachers refit many times in a run. The fit function of the
teacher's :class:`~magister.curricula._continuous.Refit` is timed, so the intervals during which a refit
runs are known. Each worker records, on the shared monotonic clock, the time it spends inside ``reset()``
(waiting for its next task) and when new tasks reached it. Printed per run: episodes played, refits
finished and the share of the run they were busy, the median fit time; the reset wait p50 / p99 / max over
all resets, and over the resets that overlapped a refit; and the longest gap in task delivery any worker
saw (the longest time between two resets that brought it new tasks).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from magister import GymnasiumSyncWrapper, serve
from magister.curricula import DomainRandomization
from magister.curricula._continuous import Refit
from magister.env_wrappers import TaskWrapper
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording
from magister.examples.teacher_toy import ToyEnv
from magister.task_spaces import Box

DIMS = 2
PAGES = (RESULTS_PAGE, BENCHMARKS_README)


# -- the worker side ---------------------------------------------------------------------------------------


class SleepEnv(gym.Env):
    """One step per episode; the step sleeps ``U(low_s, high_s)`` and pays the toy env's reward for the
    task."""

    observation_space = spaces.Box(0.0, 1.0, shape=(DIMS,), dtype=np.float64)
    action_space = spaces.Discrete(1)

    def __init__(self, low_s: float, high_s: float, seed: int) -> None:
        self.low_s, self.high_s = low_s, high_s
        self.rng = np.random.default_rng(seed)
        self.toy = ToyEnv(dims=DIMS)
        self.task = np.zeros(DIMS)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self.task.copy(), {}

    def step(self, action: Any):
        time.sleep(self.rng.uniform(self.low_s, self.high_s))
        reward = self.toy.play(self.task)
        return self.task.copy(), reward, True, False, {"success": reward}


class SleepTask(TaskWrapper):
    def change_task(self, task: Any) -> None:
        self.env.unwrapped.task = np.asarray(task, dtype=np.float64)


def worker(address: str, seconds: float, low_s: float, high_s: float, seed: int, conn: Any) -> None:
    """Play episodes for ``seconds``; send back the reset intervals and the task arrival times."""
    space = Box(0.0, 1.0, shape=(DIMS,))
    env = GymnasiumSyncWrapper(SleepTask(SleepEnv(low_s, high_s, seed), space), address)
    resets: list[tuple[float, float]] = []
    arrivals: list[float] = []
    received = 0
    env.reset(seed=seed)  # connects
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        env.step(0)
        t0 = time.monotonic()
        env.reset()
        t1 = time.monotonic()
        resets.append((t0, t1))
        now = env.feed.stats["tasks_received"]
        if now > received:
            received = now
            arrivals.append(t1)
    env.close()
    conn.send({"resets": resets, "arrivals": arrivals})


# -- the learner side --------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    seconds: float
    episodes: int
    fits: list[tuple[float, float]] = field(default_factory=list)
    resets: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    gap: float = 0.0


def time_fits(curriculum: Any) -> list[tuple[float, float]]:
    """Wrap the fit of every :class:`Refit` the curriculum holds so that each fit's (start, end) is kept."""
    spans: list[tuple[float, float]] = []
    for refit in [v for v in vars(curriculum).values() if isinstance(v, Refit)]:
        fit = refit.fit

        def timed(snapshot: Any, fit: Any = fit) -> Any:
            t0 = time.monotonic()
            try:
                return fit(snapshot)
            finally:
                spans.append((t0, time.monotonic()))

        refit.fit = timed
    return spans


def make(name: str, fit_rate: int, seed: int) -> Any:
    space = Box(0.0, 1.0, shape=(DIMS,))
    if name == "dr":
        return DomainRandomization(space, seed=seed)
    teacher, _, how = name.partition(" ")
    if teacher == "alpgmm":
        from magister.curricula.alp_gmm import ALPGMM as cls
    elif teacher == "covargmm":
        from magister.curricula.covar_gmm import CovarGMM as cls
    else:
        raise ValueError(f"unknown run {name!r}")
    return cls(space, fit_rate=fit_rate, background=how != "inline", seed=seed)


def run(name: str, args: argparse.Namespace) -> Result:
    curriculum = make(name, args.fit_rate, seed=0)
    spans = time_fits(curriculum)
    ctx = mp.get_context("fork")
    with serve(curriculum) as server:
        pipes, procs = [], []
        t0 = time.monotonic()
        for w in range(args.workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker, args=(server.address, args.seconds, args.episode_ms[0] / 1e3,
                                                 args.episode_ms[1] / 1e3, w, child))
            p.start()
            pipes.append(parent)
            procs.append(p)
        outs = []
        for parent, p in zip(pipes, procs):
            if not parent.poll(args.seconds + 120):
                p.kill()
                raise TimeoutError(f"{name}: a worker did not finish")
            outs.append(parent.recv())
            p.join(30)
        elapsed = time.monotonic() - t0
        with server.lock:
            episodes = int(curriculum.num_episodes)
    resets = np.array([r for o in outs for r in o["resets"]])
    gap = max(float(np.diff(o["arrivals"]).max()) if len(o["arrivals"]) > 1 else 0.0 for o in outs)
    return Result(name, elapsed, episodes, list(spans), resets, gap)


def during(resets: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    """Which resets overlap a refit."""
    if not spans:
        return np.zeros(len(resets), dtype=bool)
    s = np.array(sorted(spans))
    # the last refit that started before each reset ended; overlap if it ends after the reset began
    i = np.searchsorted(s[:, 0], resets[:, 1], side="right") - 1
    ends = np.maximum.accumulate(s[:, 1])
    return (i >= 0) & (ends[np.maximum(i, 0)] > resets[:, 0])


def _ms(x: np.ndarray) -> str:
    """``p50 p99 max`` of durations ``x`` (seconds) in ms."""
    if len(x) == 0:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    x = x * 1e3
    return f"{np.median(x):7.2f} {np.percentile(x, 99):7.2f} {x.max():7.1f}"


def table(results: list[Result]) -> str:
    head = (f"{'run':16} {'episodes':>8} {'refits':>6} {'busy':>5} {'fit s':>6} | {'reset wait: p50':>15} "
            f"{'p99':>7} {'max':>7} | {'during refits: n':>16} {'p50':>7} {'p99':>7} {'max':>7} | "
            f"{'longest gap':>11}")
    lines = [head, "-" * len(head)]
    for r in results:
        waits = r.resets[:, 1] - r.resets[:, 0]
        mask = during(r.resets, r.fits)
        busy = sum(b - a for a, b in r.fits) / r.seconds
        fit_s = f"{np.median([b - a for a, b in r.fits]):6.2f}" if r.fits else f"{'-':>6}"
        lines.append(f"{r.name:16} {r.episodes:8d} {len(r.fits):6d} {busy:5.0%} {fit_s} | {'':7} "
                     f"{_ms(waits)} | {int(mask.sum()):16d} {_ms(waits[mask])} | {r.gap * 1e3:11.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (3 s each)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--episode-ms", type=float, nargs=2, default=[1.0, 5.0], help="episode length range")
    parser.add_argument("--fit-rate", type=int, default=200, help="the GMM teachers' episodes per refit")
    parser.add_argument("--runs", nargs="+", default=["dr", "alpgmm", "alpgmm inline", "covargmm",
                                                       "covargmm inline"])
    parser.add_argument("--write-results", action="store_true",
                        help="write the output into docs/results.md and benchmarks/README.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 3.0
    with recording("teacher-refit", enabled=args.write_results, pages=PAGES):
        print(f"start: {machine()}")
        results = [run(name, args) for name in args.runs]
        print(f"{args.workers} workers, episodes of {args.episode_ms[0]:g}-{args.episode_ms[1]:g} ms, "
              f"{args.seconds:g} s per run, fit_rate {args.fit_rate}, k in 2..10 (the teachers' default); "
              f"'inline': background=False")
        print(table(results))
        print("times in ms. busy: share of the run a refit was running; fit s: median seconds per refit; "
              "reset wait: time inside reset() (getting its next task); during refits: the resets that "
              "overlapped a refit; longest gap: the longest time between two resets that brought a worker "
              "new tasks, over all workers")
        print(f"end: {machine()}")


if __name__ == "__main__":
    main()
