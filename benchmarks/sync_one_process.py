"""Many wrapped envs in one worker process, over one ZeroMQ connection.

``N`` Gymnasium envs (one step per episode), each wrapped in its own ``GymnasiumSyncWrapper`` pointed at the
same server address, live in this process; the server runs in another one (``serve()`` over ipc). Every env
resets (its feed registers and asks for a task), plays its episode and closes. Printed per size: the time
to register every env and play one episode on each, the time to close them all, this process's open file
descriptors before and with every env live, the connections left after the close, and what the server
saw: the episodes it applied, from how many distinct env ids, and how the envs left. The run fails if an
episode is missing, an env id repeats or an env left otherwise than by its goodbye.

    OMP_NUM_THREADS=1 python benchmarks/sync_one_process.py [--envs 2000 10000] [--write-results]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from tqdm import tqdm

from magister.curricula.base import Curriculum
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.examples.results import RESULTS_PAGE, machine, recording
from magister.sync.transports import zeromq
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete


class OneStep(gym.Env):
    """An episode of one step; the reward is the task."""

    observation_space = spaces.Box(0, 1e9, (1,), np.float32)
    action_space = spaces.Discrete(2)
    task = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.array([self.task], np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.array([self.task], np.float32), float(self.task), True, False, {}


class Tasked(TaskWrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, Discrete(100))

    def change_task(self, task: int) -> None:
        self.env.unwrapped.task = task


class EnvIds(Curriculum):
    """Uniform over 100 tasks; keeps the env id of every episode."""

    def __init__(self) -> None:
        super().__init__(Discrete(100), seed=0)
        self.envs: list[int] = []

    def sample(self, k: int = 1) -> list[int]:
        return [int(t) for t in self.rng.integers(100, size=k)]

    def update_on_episode(self, episode_return: float, length: int, task: Any, progress: float = 0.0,
                          env_id: int | None = None) -> None:
        self.envs.append(int(env_id))


def _server(pipe: Any) -> None:
    """The server process: serves :class:`EnvIds`, says its address, and what it saw when asked."""
    cur = EnvIds()
    with serve(cur) as server:
        pipe.send(server.address)
        pipe.recv()
        m = server.metrics()
        pipe.send((len(cur.envs), len(set(cur.envs)), int(m["sync/envs_live"]), dict(server.core.departures),
                   int(m["sync/errors_sent"])))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def run(n: int, progress: bool) -> str:
    """``n`` wrapped envs in this process against a server process; one line of figures."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_server, args=(theirs,), daemon=True)
    proc.start()
    try:
        address = ours.recv()
        before = _fds()
        start = time.monotonic()
        envs = [GymnasiumSyncWrapper(Tasked(OneStep()), address, timeout=120.0) for _ in range(n)]
        for env in tqdm(envs, desc=f"{n} envs: register and play", disable=not progress, leave=False):
            env.reset()
            env.step(0)
        played = time.monotonic() - start
        live = _fds()
        start = time.monotonic()
        for env in envs:
            env.close()
        closed = time.monotonic() - start
        ours.send(None)
        if not ours.poll(120):
            raise TimeoutError("the server process did not answer within 120 s")
        episodes, distinct, still_live, departures, errors = ours.recv()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    if (episodes, distinct, still_live, departures) != (n, n, 0, {"goodbye": n}):
        raise AssertionError(f"{n} envs: the server saw {episodes} episodes from {distinct} env ids, "
                             f"{still_live} still live, departures {departures}")
    return (f"{n:>6} {played:>10.1f} {n / played:>10.0f} {closed:>8.1f} {before:>10} {live:>8} "
            f"{len(zeromq._connections):>6} {episodes:>8} {distinct:>7} {errors:>6}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[2000, 10000])
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--write-results", action="store_true", help="write the output into docs/results.md")
    args = ap.parse_args(argv)
    with recording("sync-one-process", enabled=args.write_results, pages=(RESULTS_PAGE,)):
        print(f"start: {machine()}")
        print("  envs   played s     envs/s closed s  fds before fds live  conns episodes env ids errors")
        for n in args.envs:
            print(run(n, not args.no_progress), flush=True)
        print("played: every env registered, reset and played its one-step episode; closed: every env "
              "closed (its goodbye acknowledged); fds: this process's open files before the envs and with "
              "all of them live; conns: ZeroMQ connections left after the close; episodes and env ids: what "
              "the server applied, and from how many distinct envs (each env left by its goodbye); errors: "
              "error replies the server sent")
        print(f"end: {machine()}")


if __name__ == "__main__":
    main()
