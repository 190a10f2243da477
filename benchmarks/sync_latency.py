"""Sync layer measurements: task round trip, update throughput, and the prefetch default.

Run: ``python benchmarks/sync_latency.py [--quick]``. The server runs in this process, each client in a
forked worker process, as in real use. On a busy machine compare the ratios within one run rather than
absolute values across runs.

1. **Task round trip**: a client sends one ``TaskRequest`` and waits for the ``Tasks`` reply (median and
   p99 in µs), over ``ipc://`` and loopback ``tcp://``, against the in-process path (direct call).
2. **Update throughput**: step records per second the server applies, for several step batch sizes,
   with and without a small observation per step.
3. **Prefetch**: time an env spends in ``reset`` getting its next task, for prefetch 0, 1, 2 and
   episodes of 1 ms, which is what the default prefetch of 1 is chosen from: one task ahead already hides
   the round trip, and more prefetch only makes tasks staler (sampled from an older curriculum state).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import numpy as np

from magister.curricula.base import Curriculum
from magister.sync import protocol as P
from magister.sync.client import CurriculumClient, connect
from magister.sync.server import serve
from magister.task_spaces.discrete import Discrete


class Uniform(Curriculum):
    """Uniform over the space, accepts (and ignores) step updates."""

    requires_step_updates = True

    def sample(self, k: int = 1) -> list[int]:
        return self.rng.integers(self.task_space.num_tasks, size=k).tolist()

    def update_on_step_batch(self, batch, env_id=None) -> None:
        self.num_steps += len(batch)


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    us = np.asarray(samples_s) * 1e6
    return float(np.median(us)), float(np.percentile(us, 99))


def _in_child(fn, *args):
    """Run ``fn(*args)`` in a forked process (a worker, as in real use) and return its result.

    Keeping the client out of the server's process matters: in one process the two threads would share
    the GIL, and the server thread would wait up to the 5 ms switch interval for every message.
    """
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()

    def target():
        child.send(fn(*args))

    p = ctx.Process(target=target)
    p.start()
    if not parent.poll(300):
        p.kill()
        raise TimeoutError(f"{fn.__name__} did not finish")
    out = parent.recv()
    p.join(30)
    return out


def _client_round_trips(address: str, n: int) -> list[float]:
    c = CurriculumClient(address, prefetch=0)
    c.next_task()  # connect
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        c._send(P.TaskRequest(c.env_id, 1))
        c._outstanding += 1
        while not c._buffer:
            c._receive(5000)
        times.append(time.perf_counter() - t0)
        c._buffer.popleft()
    c.close()
    return times


def round_trip(address: str | None, n: int) -> tuple[float, float]:
    with serve(Uniform(Discrete(1000), seed=0), address) as server:
        return _percentiles(_in_child(_client_round_trips, server.address, n))


def in_process(n: int) -> tuple[float, float]:
    feed = connect(Uniform(Discrete(1000), seed=0))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        a = feed.next_task()
        times.append(time.perf_counter() - t0)
        feed.give_back(a)
        feed.next_task()
    feed.close()
    return _percentiles(times)


def _client_steps(address: str, batch: int, steps: int, obs: bool) -> float:
    c = CurriculumClient(address, prefetch=0, send_obs=obs, send_infos=False)
    a = c.next_task()
    o = np.zeros(16, np.float32)
    t0 = time.time()
    for _ in range(steps):
        c.record_step(a, o, 1.0, False, False, None, 0.0)
    c.close()  # flushes and waits until the server acknowledged everything before it
    return t0


def throughput(batch: int, steps: int, obs: bool) -> float:
    cur = Uniform(Discrete(1000), seed=0)
    with serve(cur, step_batch_size=batch) as server:
        t0 = _in_child(_client_steps, server.address, batch, steps, obs)
        dt = time.time() - t0
        applied = server.core.counters(0).steps_applied
    assert applied == steps, (applied, steps)
    return applied / dt


def _client_resets(address: str, prefetch: int, episodes: int, episode_s: float) -> tuple[list[float], float]:
    c = CurriculumClient(address, prefetch=prefetch)
    a = c.next_task()
    waits, ready = [], 0
    for _ in range(episodes):
        time.sleep(episode_s)  # the episode (a vector-env worker mostly waits for its next action)
        c.record_episode(a, 0.0, 1, 0.0)  # as the sync wrapper does: it also asks for the next task
        t0 = time.perf_counter()
        c._drain()
        ready += bool(c._buffer)  # the task was there already: no waiting for the server
        a = c.next_task()
        waits.append(time.perf_counter() - t0)
    c.close()
    return waits, ready / episodes


def reset_wait(prefetch: int, episodes: int, episode_s: float) -> tuple[float, float, float]:
    with serve(Uniform(Discrete(1000), seed=0)) as server:
        waits, ready = _in_child(_client_resets, server.address, prefetch, episodes, episode_s)
    return (*_percentiles(waits), ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    n = 500 if args.quick else 3000
    steps = 20_000 if args.quick else 100_000

    print("== task request round trip (µs) ==")
    base = None
    rows = [("in-process (direct call)", in_process(n)), ("ipc://", round_trip(None, n)),
            ("tcp://127.0.0.1", round_trip("tcp://127.0.0.1:*", n))]
    print(f"{'path':28s} {'median':>10s} {'p99':>10s} {'median / ipc':>14s}")
    base = rows[1][1][0]
    for name, (med, p99) in rows:
        print(f"{name:28s} {med:10.1f} {p99:10.1f} {med / base:14.2f}")

    print("\n== update throughput (step records applied per second) ==")
    print(f"{'step_batch_size':>16s} {'no obs':>12s} {'16-float obs':>14s} {'vs batch 1':>11s}")
    first = None
    for b in (1, 8, 64, 256):
        r0 = throughput(b, steps // (8 if b == 1 else 1), obs=False)
        r1 = throughput(b, steps // (8 if b == 1 else 1), obs=True)
        first = first or r0
        print(f"{b:16d} {r0:12,.0f} {r1:14,.0f} {r0 / first:11.1f}")

    print("\n== time an env spends in reset getting its next task (µs), 1 ms episodes ==")
    print(f"{'prefetch':>8s} {'median':>10s} {'p99':>10s} {'task ready':>11s}")
    for p in (0, 1, 2):
        med, p99, ready = reset_wait(p, n // 5, 0.001)
        print(f"{p:8d} {med:10.1f} {p99:10.1f} {ready:10.0%}")


if __name__ == "__main__":
    main()
