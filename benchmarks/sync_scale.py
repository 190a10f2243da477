"""One curriculum endpoint from 10 to 10,000 live envs: CPU per episode, memory per env, round trips, storms.

Run: ``OMP_NUM_THREADS=1 python benchmarks/sync_scale.py [--quick] [--write-results]`` (``--quick``: 10 and
100 envs; ``--write-results``: the output, a table and a plot, becomes the current figures of
docs/results.md and benchmarks/README.md).

For each transport (ZeroMQ: :func:`magister.serve` in a process of its own, over ``ipc://``; Ray: the
curriculum actor of :func:`magister.sync.ray_server.serve_ray`), each update mode (``episodic``: one episode
update per episode; ``step``: a curriculum whose ``requires_step_updates`` is true, each episode's steps
recorded through the feed's step recorder, then the episode; ``unbatched``: episode updates with
``prefetch=1, update_batch=1``, one report asking for one task per episode) and each number of envs ``n``, a
fresh endpoint serves a uniform curriculum over 100 tasks that counts the episodes it applies. The ``n`` envs
are real feeds (:func:`magister.sync.connect`, the library's own client and transport, default settings),
many per load process (at most ``--per-process``, sharing one socket per process; on Ray, load
actors), each driven by a tiny loop: ``next_task()``, ``--steps`` steps, ``record_episode``, the feeds of a
process in turn, all processes together at ``--rate`` episodes per second. Measured:

* **storm**: all ``n`` envs register at once (their first ``next_task()``, from ``--threads`` threads per
  load process, all released at one instant): envs admitted per second (``n`` / time to the last welcome)
  and the median time of one registration;
* **memory per env**: the endpoint process's resident memory after the storm less before it, over ``n``;
* **sweep**: one liveness sweep over the live envs (ZeroMQ: the core's ``sweep()``, timed in the endpoint
  process, median of several; the Ray actor runs the same sweep);
* **CPU per episode**: the endpoint process's CPU time (user + system, every thread: the socket thread,
  ZeroMQ's I/O thread, or the whole Ray actor process) from the start of play until the curriculum has
  applied every episode, over the episodes it applied; and per message (messages the envs sent; on Ray, the
  calls the actor received, in which a process's envs send together);
* **busy**: that CPU time over the wall time of play: near 1.0 the endpoint (one thread under one lock)
  is saturated; its capacity is then about one episode per CPU-per-episode;
* **round trip**: a few probe envs with ``prefetch=0`` (nothing kept ready) ask for each task while the
  others play: the time from ``next_task()`` asking to the task arriving, p50 and p99;
* **leave**: all envs closing their feeds at once, and the error replies the endpoint sent meanwhile.

The ``one-proc`` rows (``--one-process``) play as ``episodic`` with every env in one load process (on Ray,
one load actor): its envs share one socket (ZeroMQ: one connection per process and endpoint) or one outbox
(Ray: their sends reach the actor in shared calls), where the other rows' envs are spread over processes of
at most ``--per-process`` envs each.

With ``--relays 0 2 4`` (Ray), each Ray run is repeated with the envs spread over that many relay actors
(:func:`magister.sync.relay.serve_relays`, one load process per relay at least) in front of the same
curriculum actor; the CPU per episode is still the curriculum actor's, and the relays' own CPU and the calls
they made to it are added (section ``sync-relays`` of docs/results.md, not ``sync-scale``).

Each run ends with the invariants: the endpoint's ``sync/total/episodes_applied`` equals the episodes the
envs (and probes) reported, and no env saw an error. The load processes run at a lower priority than the
endpoint; on a machine with fewer cores than load processes they take turns, which slows play but not the
endpoint's CPU per episode.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from magister import serve
from magister.curricula import DomainRandomization
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording
from magister.sync import connect
from magister.task_spaces import Discrete

PAGES = (RESULTS_PAGE, BENCHMARKS_README)
TASKS = 100
PROBES = 4  # prefetch=0 envs timing the round trip
MODES = ["episodic", "step", "unbatched"]
ONE_PROC = "one-proc"  # episodic, every env in one load process (--one-process)
_TICK = os.sysconf("SC_CLK_TCK")


# -- the endpoint's process, read from /proc -----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields_ = f.read().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / _TICK


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid``."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Counting(DomainRandomization):
    """Uniform over the tasks; counts the episodes and step records it is given."""

    requires_step_observations = False
    requires_step_infos = False

    def __init__(self, task_space: Any, *, step_updates: bool = False, seed: int = 0) -> None:
        super().__init__(task_space, seed=seed)
        self._step_updates = step_updates
        self.episodes = 0
        self.step_records = 0

    @property
    def requires_step_updates(self) -> bool:
        return self._step_updates

    def update_on_step_batch(self, batch: Any, env_id: int | None = None) -> None:
        self.step_records += len(batch)

    def update_on_episode(self, episode_return, length, task, progress, env_id=None) -> None:
        self.episodes += 1

    def count(self) -> int:
        return self.episodes

    def pid(self) -> int:
        return os.getpid()


def sweep_seconds(server: Any) -> float:
    """One liveness sweep of ``server`` (the adapter: where the sweep lives may move)."""
    t = time.perf_counter()
    server.core.sweep()
    return time.perf_counter() - t


def _zmq_endpoint(conn: Any, step_updates: bool) -> None:
    """The ZeroMQ endpoint's process: serves, and answers the benchmark's questions over ``conn``."""
    server = serve(Counting(Discrete(TASKS), step_updates=step_updates))
    conn.send((server.address, os.getpid()))
    try:
        while True:
            what = conn.recv()
            if what == "count":
                conn.send(server.curriculum.episodes)
            elif what == "sweep":
                conn.send(statistics.median(sweep_seconds(server) for _ in range(9)))
            elif what == "metrics":
                conn.send({k: v for k, v in server.metrics().items() if not k.startswith("sync/env")
                           or k.startswith("sync/envs")})
            else:
                break
    finally:
        server.close()


class ZmqEndpoint:
    """The ZeroMQ endpoint in a process of its own."""

    name = "ZeroMQ"

    def __init__(self, step_updates: bool, index: int) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_zmq_endpoint, args=(child, step_updates), daemon=True)
        self.proc.start()
        self.address, self.pid = self._ask(None, timeout=60)

    def _ask(self, what: Any, timeout: float = 300) -> Any:
        if what is not None:
            self.conn.send(what)
        if not self.conn.poll(timeout):
            raise TimeoutError(f"the endpoint did not answer {what!r} within {timeout:g} s")
        return self.conn.recv()

    def count(self) -> int:
        return self._ask("count")

    def sweep(self) -> float | None:
        return self._ask("sweep")

    def metrics(self) -> dict[str, float]:
        return self._ask("metrics")

    def close(self) -> None:
        self.conn.send("close")
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


class RayEndpoint:
    """The curriculum actor of ``serve_ray``."""

    name = "Ray"

    def __init__(self, step_updates: bool, index: int, **options: Any) -> None:
        from magister.sync.ray_server import serve_ray

        self.server = serve_ray(Counting(Discrete(TASKS), step_updates=step_updates), name=f"scale-{index}",
                                **options)
        self.address = self.server.address
        self.pid = self.server.call("pid")

    def count(self) -> int:
        return self.server.call("count")

    def sweep(self) -> float | None:
        return None  # (the actor's liveness thread runs the core's sweep; no public call times it)

    def metrics(self) -> dict[str, float]:
        return self.server.metrics()

    def close(self) -> None:
        self.server.close()


# -- the load: many feeds per process (or Ray actor) ---------------------------------------------------------


class Holder:
    """``n`` feeds in one process, played in turn by one loop; ``probes`` feeds with ``prefetch=0``."""

    def __init__(self, address: str, n: int, probe: bool = False, unbatched: bool = False) -> None:
        os.nice(5)  # below the endpoint
        opts = {"prefetch": 0} if probe else {"prefetch": 1, "update_batch": 1} if unbatched else {}
        self.feeds = [connect(address, timeout=120.0, close_timeout=30.0, **opts) for _ in range(n)]
        self.first: list[Any] = [None] * n
        self.episodes = 0
        self.errors = 0
        self._stop = threading.Event()
        self._probe: threading.Thread | None = None
        self.round_trips: list[float] = []

    def register(self, start: float, threads: int) -> tuple[float, list[float]]:
        """All feeds take their first task at ``start`` (monotonic), from ``threads`` threads; returns when
        the last was welcomed and each one's registration time."""
        times = [0.0] * len(self.feeds)

        def work(i0: int) -> None:
            for i in range(i0, len(self.feeds), threads):
                t = time.monotonic()
                self.first[i] = self.feeds[i].next_task()
                times[i] = time.monotonic() - t

        pool = [threading.Thread(target=work, args=(i,)) for i in range(min(threads, len(self.feeds)))]
        time.sleep(max(0.0, start - time.monotonic()))
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return time.monotonic(), times

    def play(self, episodes: int, steps: int, rate: float) -> int:
        """Every feed plays ``episodes`` episodes of ``steps`` steps, in turn, ``rate`` episodes per second
        in all (0: as fast as they can); returns the episodes played."""
        start = time.monotonic()
        for _ in range(episodes):
            for i, feed in enumerate(self.feeds):
                if rate:
                    time.sleep(max(0.0, start + self.episodes / rate - time.monotonic()))
                a = self.first[i] if self.first[i] is not None else feed.next_task()
                self.first[i] = None
                record = feed.step_recorder()
                if record is not None:
                    for s in range(steps):
                        record(a, None, 1.0, s == steps - 1, False, None, 0.0)
                feed.record_episode(a, float(steps), steps, 0.0)
                self.episodes += 1
        return self.episodes

    def probe_start(self) -> None:
        """Time the round trip of the feeds (``prefetch=0``) in a loop, until :meth:`probe_stop`."""

        def loop() -> None:
            first = True
            while not self._stop.is_set():
                for i, feed in enumerate(self.feeds):
                    a = self.first[i]
                    if a is None:
                        t = time.perf_counter()
                        a = feed.next_task()
                        if not first:
                            self.round_trips.append(time.perf_counter() - t)
                    self.first[i] = None
                    feed.record_episode(a, 1.0, 1, 0.0, refill=False)
                    self.episodes += 1
                first = False
                self._stop.wait(0.05)  # (light: about 80 probe episodes per second)

        self._probe = threading.Thread(target=loop)
        self._probe.start()

    def probe_stop(self) -> tuple[list[float], int]:
        """The round trips timed, and the episodes the probes played."""
        self._stop.set()
        self._probe.join()
        return self.round_trips, self.episodes

    def close(self) -> dict[str, int]:
        """Close every feed; what they sent and the errors they saw."""
        out = {"episodes": self.episodes, "messages": 0, "errors": 0, "dropped": 0}
        for feed in self.feeds:
            feed.close()
            out["messages"] += feed.stats.get("sends", 0) + feed.stats.get("calls", 0)
            out["errors"] += feed.stats["errors_received"]
            out["dropped"] += feed.stats["updates_dropped"]
        return out

    def pid(self) -> int:
        return os.getpid()


def _holder_process(conn: Any, args: tuple) -> None:
    holder = Holder(*args)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        method, margs = msg
        try:
            conn.send(("ok", getattr(holder, method)(*margs)))
        except Exception as exc:  # reported to the parent, which fails the run
            conn.send(("error", repr(exc)))


class ProcessHolder:
    """A :class:`Holder` in a process of its own (spawned: a process forked after ``ray.init`` may crash);
    ``call`` starts a method, ``result`` waits for it."""

    def __init__(self, *args: Any) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_holder_process, args=(child, args), daemon=True)
        self.proc.start()

    def ready(self) -> ProcessHolder:
        """Wait until it has made its feeds."""
        self._wait(120)
        return self

    def _wait(self, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"a load process did not answer within {timeout:g} s")
        return self.conn.recv()

    def call(self, method: str, *args: Any) -> ProcessHolder:
        self.conn.send((method, args))
        return self

    def result(self, timeout: float = 900) -> Any:
        status, value = self._wait(timeout)
        if status != "ok":
            raise RuntimeError(f"load process failed: {value}")
        return value

    def stop(self) -> None:
        self.conn.send(None)
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


class RayHolder:
    """A :class:`Holder` in a Ray actor (two calls at a time: the probe's stop reaches a running probe)."""

    def __init__(self, *args: Any) -> None:
        import ray

        self.actor = ray.remote(Holder).options(num_cpus=0, max_concurrency=2).remote(*args)
        self.ref = None

    def ready(self) -> RayHolder:
        import ray

        ray.get(self.actor.pid.remote(), timeout=120)
        return self

    def call(self, method: str, *args: Any) -> RayHolder:
        self.ref = getattr(self.actor, method).remote(*args)
        return self

    def result(self, timeout: float = 900) -> Any:
        import ray

        return ray.get(self.ref, timeout=timeout)

    def stop(self) -> None:
        import ray

        ray.kill(self.actor)


# -- one run -------------------------------------------------------------------------------------------------


@dataclass
class Row:
    transport: str
    mode: str
    envs: int
    episodes: int = 0
    applied: int = 0
    errors: int = 0
    messages: int = 0
    cpu_s: float = 0.0
    play_s: float = 0.0
    rss_per_env: float = 0.0
    storm_s: float = 0.0
    register_p50: float = 0.0
    sweep_s: float | None = None
    leave_s: float = 0.0  # all envs closing their feeds (goodbyes), at once
    leave_errors: int = 0  # error replies the endpoint sent while they did
    total_applied: int = 0  # the endpoint's sync/total/episodes_applied at the end
    relays: int = 0  # relay actors between the envs and the curriculum actor (magister.sync.relay)
    relay_cpu_s: float = 0.0  # their CPU time, all together, over the same span as cpu_s
    upstream_calls: int = 0  # the calls they made to the curriculum actor
    round_trips: list[float] = field(default_factory=list)

    @property
    def cpu_per_episode(self) -> float:
        return self.cpu_s / max(1, self.applied)

    @property
    def cpu_per_message(self) -> float:
        return self.cpu_s / max(1, self.messages)


def episodes_per_env(n: int, total: int) -> int:
    """Episodes each env plays: ``total`` over all envs, at least 2 each."""
    return max(2, math.ceil(total / n))


def run(transport: str, mode: str, n: int, args: argparse.Namespace, index: int, relays: int = 0) -> Row:
    """One endpoint, ``n`` envs (spread over ``relays`` relay actors in front of it): storm, memory, sweep,
    play, invariants."""
    row = Row(f"Ray+{relays}rel" if relays else transport, mode, n, relays=relays)
    options = {"max_tasks_in_flight": 1 << 20} if relays else {}  # (a relay holds its envs' tasks)
    endpoint = (ZmqEndpoint if transport == "ZeroMQ" else RayEndpoint)(mode == "step", index, **options)
    make = ProcessHolder if transport == "ZeroMQ" else RayHolder
    holders: list[Any] = []
    relay_servers: list[Any] = []
    try:
        if relays:
            from magister.sync.relay import serve_relays

            relay_servers = serve_relays(endpoint.address, Discrete(TASKS), relays, name=f"scale-{index}-r")
        addresses = [r.address for r in relay_servers] or [endpoint.address]
        # (each load process: one relay's envs; one-proc: every env in one)
        k = 1 if mode == ONE_PROC else max(math.ceil(n / args.per_process), len(addresses))
        sizes = [n // k + (i < n % k) for i in range(k)]
        probe = make(addresses[0], PROBES, True)
        holders = [make(addresses[i % len(addresses)], s, False, mode == "unbatched")
                   for i, s in enumerate(sizes)] + [probe]
        holders = [h.ready() for h in holders]
        probe.call("register", 0.0, PROBES).result()
        time.sleep(0.5)
        rss0 = rss_bytes(endpoint.pid)
        start = time.monotonic() + 0.5
        for h in holders[:-1]:
            h.call("register", start, args.threads)
        done = [h.result() for h in holders[:-1]]
        row.storm_s = max(end for end, _ in done) - start
        row.register_p50 = float(np.median([t for _, times in done for t in times]))
        time.sleep(0.5)
        row.rss_per_env = (rss_bytes(endpoint.pid) - rss0) / n
        row.sweep_s = endpoint.sweep()
        applied0 = endpoint.count()
        e = episodes_per_env(n, args.episodes)
        relay_pids = [r.wait(r.actor.ping.remote()) for r in relay_servers]
        relay_cpu0 = sum(cpu_seconds(pid) for pid in relay_pids)
        cpu0, t0 = cpu_seconds(endpoint.pid), time.monotonic()
        probe.call("probe_start").result()
        for h, size in zip(holders[:-1], sizes):
            h.call("play", e, args.steps, args.rate * size / n)
        played = sum(h.result() for h in holders[:-1])
        row.round_trips, probe_episodes = probe.call("probe_stop").result()
        # every episode played reaches the curriculum within max_update_delay (the held updates' bound)
        deadline = time.monotonic() + 120
        while endpoint.count() - applied0 < played + probe_episodes and time.monotonic() < deadline:
            time.sleep(0.01)
        row.cpu_s, row.play_s = cpu_seconds(endpoint.pid) - cpu0, time.monotonic() - t0
        row.relay_cpu_s = sum(cpu_seconds(pid) for pid in relay_pids) - relay_cpu0
        row.applied = endpoint.count() - applied0
        before = endpoint.metrics()
        t = time.monotonic()
        for h in holders:  # all at once
            h.call("close")
        stats = [h.result() for h in holders]
        row.leave_s = time.monotonic() - t
        row.episodes = sum(s["episodes"] for s in stats)
        row.messages = sum(s["messages"] for s in stats)
        row.errors = sum(s["errors"] + s["dropped"] for s in stats)
        row.upstream_calls = int(sum(r.metrics()["relay/calls"] for r in relay_servers))
        for r in relay_servers:  # (each sends what it holds upstream, and leaves)
            r.close()
        after = endpoint.metrics()
        if transport == "Ray" and not relays:  # (the calls the actor received: a process's envs share them)
            row.messages = int(after["sync/calls_received"])
        row.leave_errors = int(after["sync/errors_sent"] - before["sync/errors_sent"])
        total = row.total_applied = int(after["sync/total/episodes_applied"])
        if total != row.episodes or row.errors or before["sync/errors_sent"]:
            raise AssertionError(f"{transport} {mode} {n} envs: episodes reported {row.episodes}, applied "
                                 f"{total}; errors seen by envs {row.errors}, sent by the endpoint before "
                                 f"the envs left {before['sync/errors_sent']}")
    finally:
        for h in holders:
            h.stop()
        for r in relay_servers:
            r.close()
        endpoint.close()
    return row


# -- output --------------------------------------------------------------------------------------------------


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:,.1f}"


def table(rows: list[Row]) -> str:
    head = (f"{'transport':9} {'mode':8} {'envs':>6} {'episodes':>8} {'msgs/ep':>7} {'CPU/ep µs':>9} "
            f"{'CPU/msg µs':>10} {'busy':>5} {'KB/env':>7} {'storm envs/s':>12} {'register p50 ms':>15} "
            f"{'sweep ms':>8} {'RTT p50 µs':>10} {'p99 µs':>8} {'leave s':>7} {'errors':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        rtt = np.asarray(r.round_trips) if r.round_trips else np.array([np.nan])
        sweep = "-" if r.sweep_s is None else f"{r.sweep_s * 1e3:.2f}"
        lines.append(
            f"{r.transport:9} {r.mode:8} {r.envs:6d} {r.applied:8d} {r.messages / max(1, r.applied):7.2f} "
            f"{_us(r.cpu_per_episode):>9} {_us(r.cpu_per_message):>10} {r.cpu_s / r.play_s:5.2f} "
            f"{r.rss_per_env / 1024:7.1f} {r.envs / r.storm_s:12,.0f} {r.register_p50 * 1e3:15.1f} "
            f"{sweep:>8} {np.median(rtt) * 1e6:10,.0f} {np.percentile(rtt, 99) * 1e6:8,.0f} "
            f"{r.leave_s:7.1f} {r.leave_errors:6d}")
    return "\n".join(lines)


def _series(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    out: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        out.setdefault((r.transport, r.mode), []).append(r)
    return out


def shape(rows: list[Row], rate: float, env_timeout: float = 60.0, per_process: int = 900) -> str:
    """The curve's shape in words, from the measured rows (``rate``: episodes per second in all)."""
    parts = []
    small, large = min(r.envs for r in rows), max(r.envs for r in rows)
    for (transport, mode), rs in _series(rows).items():
        lo, hi = rs[0], rs[-1]
        ratio = hi.cpu_per_episode / lo.cpu_per_episode
        verdict = "within" if ratio <= 1.5 else "outside"
        mpe_lo, mpe_hi = lo.messages / max(1, lo.applied), hi.messages / max(1, hi.applied)
        rtt = [np.percentile(r.round_trips, q) * 1e3 for r in (lo, hi) for q in (50, 99)]
        parts.append(
            f"**{transport} {mode}**: CPU per episode at {hi.envs:,} envs is {ratio:.2f}x its value at "
            f"{lo.envs:,} ({verdict} the 1.5x goal); messages per episode went from {mpe_lo:.2f} to "
            f"{mpe_hi:.2f} (per message {hi.cpu_per_message / lo.cpu_per_message:.2f}x); memory "
            f"{hi.rss_per_env / 1024:.1f} KB per env at {hi.envs:,} envs; task round trip p50/p99 "
            f"{rtt[0]:.1f}/{rtt[1]:.1f} ms at {lo.envs:,}, {rtt[2]:.1f}/{rtt[3]:.1f} ms at {hi.envs:,}.")
    parts.append(
        f"At a fixed {rate:,.0f} episodes per second in all, an env of {small:,} plays "
        f"{rate / small:,.1f} episodes per second and one of {large:,} plays {rate / large:,.2f}: the "
        "feed holds updates and asks for tasks for what its env plays in max_update_delay, so few envs "
        "send many episodes per message and many envs one or more messages "
        "per episode. Where messages per episode stay the same at every size (the unbatched rows: one "
        "report asking for one task per episode), the CPU per episode shows the work per message.")
    sweeps = [r for r in rows if r.sweep_s is not None]
    if sweeps:
        most = max(r.envs for r in sweeps)
        sweep = statistics.median(r.sweep_s for r in sweeps if r.envs == most)
        parts.append(
            f"The liveness sweep looks at every live env: {sweep / most * 1e9:,.0f} ns per env "
            f"({sweep * 1e3:.2f} ms at {most:,} envs, the median over its rows), once every quarter of "
            f"env_timeout ({env_timeout / 4:g} s by default): {sweep / (env_timeout / 4):.1e} of a core at "
            f"{most:,} envs.")
    for r in (r for r in rows if r.mode == ONE_PROC):
        spread = [o for o in rows if (o.transport, o.mode, o.envs) == (r.transport, "episodic", r.envs)]
        shared = "one socket" if r.transport == "ZeroMQ" else "one outbox: shared calls"
        parts.append(
            f"**{r.transport}, all {r.envs:,} envs in one process** ({shared}): endpoint CPU per episode "
            f"{_us(r.cpu_per_episode)} µs, memory {r.rss_per_env / 1024:.1f} KB per env, storm "
            f"{r.envs / r.storm_s:,.0f} envs/s" + (
                f"; the same envs spread over processes of at most {per_process:,}: "
                f"{_us(spread[0].cpu_per_episode)} µs, {spread[0].rss_per_env / 1024:.1f} KB, "
                f"{spread[0].envs / spread[0].storm_s:,.0f} envs/s." if spread else "."))
    leave = [r for r in rows if r.envs == large]
    parts.append(
        "All envs leaving at once (closing their feeds) took " + ", ".join(
            f"{r.leave_s:.1f} s ({r.transport} {r.mode}, {r.leave_errors} error replies)" for r in leave)
        + f" at {large:,} envs; the storm admitted " + ", ".join(
            f"{r.envs / r.storm_s:,.0f}" for r in leave) + " envs per second.")
    series = _series(rows)
    per_msg = {k: rs[-1].cpu_per_message / rs[0].cpu_per_message for k, rs in series.items()}
    grows = [f"{t} {m}" for (t, m), x in per_msg.items() if x > 1.5]
    parts.append(
        f"Per message, the largest size costs the endpoint {min(per_msg.values()):.2f}x to "
        f"{max(per_msg.values()):.2f}x what the smallest does: "
        + (f"work per message grows with the number of envs in {', '.join(grows)}." if grows else
           "no work per message grows with the number of envs; what grows per episode is the number of "
           "messages."))
    saturated = []
    for (t, m), rs in series.items():
        for r in rs:
            if 1 / r.cpu_per_episode < rate or (r.round_trips and np.median(r.round_trips) > 0.1):
                saturated.append(
                    f"{t} {m} at {r.envs:,} envs (one core's worth: {1 / r.cpu_per_episode:,.0f} episodes/s; "
                    f"round trip p50 {np.median(r.round_trips) * 1e3:,.0f} ms)")
                break
    capacity = ", ".join(f"{t} {m} {1 / rs[-1].cpu_per_episode:,.0f} at {rs[-1].envs:,} envs"
                         for (t, m), rs in series.items())
    parts.append(
        f"The endpoint applies everything in one thread under one lock; its capacity is about one core over "
        f"its CPU per episode ({capacity}, in episodes per second). It falls behind the offered "
        f"{rate:,.0f} episodes/s (one core's worth below it, or the round trip's median past 100 ms as "
        f"requests queue) in: " + ("; ".join(saturated) if saturated else "none of these runs") + ".")
    return "\n\n".join(parts)


def relay_summary(rows: list[Row], rate: float) -> str:
    """The relay rows in words: the curriculum actor's CPU and calls per episode with and without relays at
    each size and mode, and the relays' own CPU per episode."""
    parts = []
    for r in rows:
        if not r.relays:
            continue
        base = next((b for b in rows if not b.relays and (b.mode, b.envs) == (r.mode, r.envs)), None)
        than = "" if base is None else (
            f" ({r.cpu_per_episode / base.cpu_per_episode:.2f}x its {_us(base.cpu_per_episode)} µs without "
            f"relays, where the envs sent it {base.messages / max(1, base.applied):.2f} calls per episode)")
        parts.append(
            f"**{r.relays} relays, {r.mode}, {r.envs:,} envs**: the curriculum actor spent "
            f"{_us(r.cpu_per_episode)} µs of CPU per episode{than}, busy {r.cpu_s / r.play_s:.2f}; its "
            f"capacity at that cost is {1 / r.cpu_per_episode:,.0f} episodes/s. The relays sent it "
            f"{r.upstream_calls / max(1, r.applied):.3f} calls per episode (their envs sent them "
            f"{r.messages / max(1, r.applied):.2f}) and spent {_us(r.relay_cpu_s / max(1, r.applied))} µs of "
            f"CPU per episode (one relay at one core: {max(1, r.applied) / max(1e-9, r.relay_cpu_s):,.0f} "
            f"episodes/s); task round trip p50/p99 "
            f"{np.median(r.round_trips) * 1e3:,.1f}/{np.percentile(r.round_trips, 99) * 1e3:,.1f} ms.")
    parts.append(f"Offered: {rate:,.0f} episodes/s in all. Every episode played was applied once by the "
                 "curriculum actor in every row (the run's invariant).")
    return "\n\n".join(parts)


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for (transport, mode), rs in _series(rows).items():
        x = [r.envs for r in rs]
        style = {"marker": "o", "linestyle": "-" if transport == "ZeroMQ" else "--",
                 "label": f"{transport} {mode}"}
        axes[0].plot(x, [r.cpu_per_episode * 1e6 for r in rs], **style)
        axes[1].plot(x, [r.rss_per_env / 1024 for r in rs], **style)
        axes[2].plot(x, [np.percentile(r.round_trips, 99) * 1e3 if r.round_trips else np.nan for r in rs],
                     **style)
    titles = ["endpoint CPU per episode (µs)", "endpoint memory per env (KB)", "task round trip p99 (ms)"]
    for ax, title in zip(axes, titles):
        ax.set_xscale("log")
        ax.set_xlabel("live envs")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _start_ray() -> bool:
    """Start a local Ray instance unless one is running (a test's); whether this started it."""
    import ray

    if __name__ != "__main__":  # (imported by a test: Ray's workers cannot import this module)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if ray.is_initialized():
        return False
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    return True


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 100 envs, few episodes (seconds)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--ray-sizes", type=int, nargs="*", default=None,
                        help="sizes for the Ray actor (default: --sizes)")
    parser.add_argument("--ray-largest-modes", nargs="*", default=["episodic"], choices=MODES,
                        help="the modes run on Ray at its largest size (each takes minutes there)")
    parser.add_argument("--transports", nargs="+", default=["ZeroMQ", "Ray"], choices=["ZeroMQ", "Ray"])
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--episodes", type=int, default=10000, help="episodes per run (at least 2 per env)")
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="episodes per second, all envs together (0: as fast as they can)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode")
    parser.add_argument("--per-process", type=int, default=900, help="most feeds per load process")
    parser.add_argument("--threads", type=int, default=8, help="threads per load process in the storm")
    parser.add_argument("--one-process", type=int, nargs="*", default=[2000, 10000],
                        help="sizes of the one-proc rows (every env in one load process or actor)")
    parser.add_argument("--relays", type=int, nargs="+", default=[0],
                        help="Ray: also serve the envs through this many relay actors (0: none); the output "
                             "becomes section sync-relays, not sync-scale")
    parser.add_argument("--write-results", action="store_true",
                        help="write the output into docs/results.md and benchmarks/README.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.episodes, args.ray_largest_modes, args.one_process = [10, 100], 500, args.modes, []
    ray_sizes = args.sizes if args.ray_sizes is None else args.ray_sizes
    plan = [(t, m, n, k) for t in args.transports for m in args.modes
            for n in (args.sizes if t == "ZeroMQ" else ray_sizes)
            for k in (args.relays if t == "Ray" else [0])
            if (t == "ZeroMQ" or n < max(ray_sizes) or m in args.ray_largest_modes)
            and not (k and m == "step")]  # (relays forward no step updates)
    plan += [(t, ONE_PROC, n, 0) for t in args.transports for n in args.one_process if not any(args.relays)]
    section = "sync-relays" if any(args.relays) else "sync-scale"
    pages = PAGES[:1] if any(args.relays) else PAGES  # (the relay rows: the results page only)
    with recording(section, enabled=args.write_results, pages=pages) as rec:
        print(f"start: {machine()}")
        rows = []
        t0 = time.monotonic()
        own_ray: bool | None = None  # (None: Ray not needed yet)
        try:
            for i, (transport, mode, n, k) in enumerate(plan):
                if transport == "Ray" and own_ray is None:
                    own_ray = _start_ray()
                rows.append(run(transport, mode, n, args, i, k))
                print(f"{rows[-1].transport} {mode} {n} envs: {rows[-1].applied} episodes applied, "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
        finally:
            if own_ray:
                import ray

                ray.shutdown()
        print(f"{args.steps} steps per episode, {args.episodes} episodes per run (at least 2 per env) at "
              f"{args.rate:g} episodes/s in all, at most {args.per_process} envs per load process, default "
              f"feed settings (unbatched: prefetch=1, update_batch=1), {PROBES} probe envs (prefetch=0); "
              f"{time.monotonic() - t0:.0f} s in all")
        print(table(rows))
        print("msgs/ep: messages the envs sent (ZeroMQ; Ray with relays: calls to the relays) or calls the "
              "curriculum actor received (Ray) per episode applied; CPU: the "
              "endpoint process's, from the start of play until every episode was applied; busy: that "
              "CPU over the play's wall time; KB/env: its resident memory after the storm less before, "
              "per env; storm: all envs registering at once; sweep: one liveness sweep (ZeroMQ, timed in "
              "the endpoint); RTT: next_task() of a prefetch=0 env while the others play")
        print(f"end: {machine()}")
        rec.after = (relay_summary(rows, args.rate) if any(args.relays)
                     else shape(rows, args.rate, per_process=args.per_process))
        if args.write_results:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, f"{section}.png")
                plot(rows, path)
                rec.add_image(path, f"{section}.png")
        else:
            print(rec.after)
    return rows


if __name__ == "__main__":
    main()
