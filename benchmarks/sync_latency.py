"""Sync layer measurements: task round trip, update throughput, and the prefetch default.

Run: ``python benchmarks/sync_latency.py [--quick] [--write-results]`` (``--write-results``: the output
becomes the current figures of docs/results.md and benchmarks/README.md). The server runs in this process,
each client in a forked worker process, as in real use. On a busy machine compare the ratios within one
run rather than absolute values across runs.

1. **Task round trip**: a client sends one ``Report`` asking for a task and waits for the ``Tasks`` reply
   (median and p99 in µs), over ``ipc://`` and loopback ``tcp://``, against the in-process path (direct call).
2. **Update throughput**: step records per second the server applies, for several step batch sizes,
   with and without a small observation per step.
3. **Prefetch and held updates**: for episodes of 1 ms and of 20 ms, and for each client setting (no
   prefetch and no holding; one task ahead, no holding; the defaults: up to 8 tasks ahead and updates held
   up to 32 / 0.5 s; up to 32 tasks ahead): the time an env spends in ``reset`` getting its next task
   (median, p99), how often the task was already there, messages sent per episode, how stale the tasks
   are (tasks sampled before this one and still unplayed when it was sampled, i.e. episodes between its
   sampling and its use) and how late the curriculum hears of an episode (seconds from its end to
   ``update_on_episode``). This is the trade-off the defaults are chosen from: one task ahead already
   hides the round trip; holding updates divides the messages (and their CPU on both sides) by the batch,
   at the price of tasks sampled a few episodes, and feedback applied a fraction of ``max_update_delay``,
   earlier / later. In seconds both stay within ``max_update_delay`` whatever the prefetch; in episodes
   the staleness grows with it: 32 tasks ahead sends a quarter of the messages of 8 (on NetHack ~40 µs
   of CPU less per episode, server and client together) but an adaptive curriculum then reacts ~4x more
   episodes late (in tests/test_curricula_multiprocess.py the task filter's late training share fell from
   >0.9 to ~0.9 on fast bandit episodes), so the default stays at 8.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import numpy as np

from magister.curricula.base import Curriculum
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording
from magister.sync import protocol as P
from magister.sync.feed import CurriculumClient, connect
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete


class Uniform(Curriculum):
    """Uniform over the space, accepts (and ignores) step updates."""

    requires_step_updates = True

    def sample(self, k: int = 1) -> list[int]:
        return self.rng.integers(self.task_space.num_tasks, size=k).tolist()

    def update_on_step_batch(self, batch, env_id=None) -> None:
        self.num_steps += len(batch)

    def update_on_episode(self, episode_return, length, task, progress, env_id=None, extras=None) -> None:
        if extras and "ended_at" in extras:  # how late the curriculum hears of the episode
            self.delays.append(time.time() - extras["ended_at"])


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
        c._send([P.Report(c.env_id, request=1)], 0, 1)  # (one send, asking for one task)
        while not c._buffer:
            c._receive(5.0)
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
        c.step_recorder()(a, o, 1.0, False, False, None, 0.0)
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


def _client_resets(address: str, options: dict, episodes: int, episode_s: float) -> dict:
    c = CurriculumClient(address, **options)
    a = c.next_task()
    waits, ready, stale = [], 0, []
    arrived: dict[int, int] = {}  # task id -> episodes played when it reached the env

    def note_arrivals(e: int) -> None:
        for x in c._buffer:
            arrived.setdefault(x.task_id, e)

    for e in range(episodes):
        time.sleep(episode_s)  # the episode (a vector-env worker mostly waits for its next action)
        c.record_episode(a, 0.0, 1, 0.0, extras={"ended_at": time.time()})  # as the sync wrapper does
        c._drain()  # replies that arrived during the episode
        note_arrivals(e)
        t0 = time.perf_counter()
        ready += bool(c._buffer)  # the task was there already: no waiting for the server
        a = c.next_task()
        waits.append(time.perf_counter() - t0)
        stale.append(e + 1 - arrived.get(a.task_id, e + 1))  # episodes ended since it arrived
        note_arrivals(e + 1)
    sends = c.stats["sends"]
    c.close()
    return {"waits": waits, "ready": ready / episodes, "sends": sends / episodes, "stale": stale}


def reset_wait(options: dict, episodes: int, episode_s: float) -> dict:
    """Reset wait (median, p99 µs), task ready share, messages per episode, staleness (mean episodes ended
    between a task's arrival at the env and its use) and the feedback delay (median ms)."""
    cur = Uniform(Discrete(1000), seed=0)
    cur.delays = []
    with serve(cur) as server:
        out = _in_child(_client_resets, server.address, options, episodes, episode_s)
        with server.lock:
            delays = list(cur.delays)
    med, p99 = _percentiles(out["waits"])
    return {
        "median": med, "p99": p99, "ready": out["ready"], "sends": out["sends"],
        "stale": float(np.mean(out["stale"])),
        "delay_ms": 1000 * float(np.median(delays)) if delays else float("nan"),
    }


PAGES = (RESULTS_PAGE, BENCHMARKS_README)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--write-results", action="store_true",
                        help="write the output into docs/results.md and benchmarks/README.md")
    args = parser.parse_args()
    n = 500 if args.quick else 3000
    steps = 20_000 if args.quick else 100_000

    with recording("sync-latency", enabled=args.write_results, pages=PAGES):
        run(n, steps)


def run(n: int, steps: int) -> None:
    print(f"start: {machine()}")
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

    print("\n== prefetch and held updates: reset wait, messages, staleness, feedback delay ==")
    settings = [
        ("prefetch 0, no holding", {"prefetch": 0, "max_update_delay": 0}),
        ("prefetch 1, no holding", {"prefetch": 1, "max_update_delay": 0}),
        ("defaults (<= 8 ahead, hold <= 32 / 0.5 s)", {}),
        ("<= 32 ahead, hold <= 32 / 0.5 s", {"prefetch": 32}),
    ]
    print(
        f"{'episode':>7s}  {'client setting':42s} {'wait median':>11s} {'p99 µs':>8s} {'ready':>6s} "
        f"{'msgs/ep':>7s} {'staleness':>9s} {'feedback delay':>14s}"
    )
    for episode_s in (0.001, 0.02):
        episodes = max(50, int((n // 5) * 0.001 / episode_s))
        for label, options in settings:
            r = reset_wait(options, episodes, episode_s)
            print(
                f"{episode_s * 1000:5.0f}ms  {label:42s} {r['median']:11.1f} {r['p99']:8.1f} "
                f"{r['ready']:6.0%} {r['sends']:7.2f} {r['stale']:6.1f} ep {r['delay_ms']:11.1f} ms"
            )
    print(
        "staleness: mean episodes ended between a task's arrival at the env (a round trip after its "
        "sampling) and its use; feedback delay: median time from an episode's end to the curriculum's "
        "update_on_episode."
    )


if __name__ == "__main__":
    main()
