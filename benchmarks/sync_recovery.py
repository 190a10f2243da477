"""How the sync layer recovers from faults: network cuts, server restarts, a learner down for a minute, a
partition longer than ``env_timeout``, a learner restored from its checkpoint under live workers, a Ray
node lost.

Run: ``python benchmarks/sync_recovery.py [--scenarios cuts,restarts,outage,partition,restore,ray]
[--cuts 40] [--outage 0.2] [--outage-s 60] [--write-results]`` (``--write-results``, which needs every
scenario: the output goes into ``docs/results.md`` and ``benchmarks/README.md``, and the table of what
survives what in ``docs/guides/remote-workers.md`` is written from it).

Every fault is made for real, from outside the library: a TCP proxy cut (``TcpProxy`` of
``tests/tcp_proxy.py``, a test helper that is not installed: every connection reset, bytes in flight lost),
a learner process SIGKILLed, a node of a Ray cluster removed. Workers are processes (Ray actors for the
Ray scenario) playing short episodes; every task a curriculum here hands out is a new number, so a task
names its lease and the learner that issued it, and each learner logs every episode it applies and every
task it is told was abandoned, one write each (a SIGKILL loses none of it). Printed per scenario:

* the time from the fault's end (the proxy restored, the new learner serving, the replacement node up) to
  each worker's next task, median and max (p99 for the repeated cuts): what a worker loses beyond the fault
  itself. These depend on the machine and its load;
* the counts on both sides afterwards: episodes played by the workers against episodes applied plus each
  counted category (``reports_late``, ``reports_orphaned``, ``episodes_lost_to_restore``, lost with a dead
  node's worker and abandoned), "uncounted" being what is left; episodes applied twice, applied and also
  abandoned; abandoned leases against ``on_task_abandoned`` calls; repeats dropped; worker errors.

Scenarios (``--scenarios``):

* ``cuts``: one worker, the proxy cut for ``--outage`` s, ``--cuts`` times;
* ``restarts``: the server closed and a new one bound to the same port, ``--restarts`` times;
* ``outage``: the learner process SIGKILLed, a new one (no checkpoint) on the same port ``--outage-s`` s
  later; the workers have ``timeout=2`` and the default ``reconnect_timeout``;
* ``partition``: the proxy cut for ``--partition-s`` s (longer than the server's ``env_timeout``, 2 s),
  ``--partitions`` times: each worker is declared gone, its leases abandoned, and comes back;
* ``restore``: the learner writes a checkpoint (curriculum and ledger) every 0.5 s, is SIGKILLed, and a new
  one restores the last checkpoint at once;
* ``ray``: a three-node ``ray.cluster_utils.Cluster`` (the curriculum actor on the head, one env worker
  actor on each of two worker nodes, ``RayClient`` feeds), one worker node removed; then a replacement
  node and worker, as RLlib would start.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from magister.curricula.base import Curriculum
from magister.examples.results import (
    BENCHMARKS_README,
    RESULTS_PAGE,
    ROOT,
    check_section,
    command_line,
    machine,
    recording,
    write_section,
)
from magister.sync.feed import CurriculumClient
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fault proxy is a test helper
from tcp_proxy import TcpProxy  # noqa: E402

SCENARIOS = ("cuts", "restarts", "outage", "partition", "restore", "ray")
#: The remote-workers guide, whose table of what survives what is written from this benchmark's output.
GUIDE = ROOT / "docs" / "guides" / "remote-workers.md"
TABLE = "what-survives-what"
#: Seconds a worker sleeps per episode in the new scenarios (the cuts and restarts use 2 ms).
EPISODE_S = 0.01
#: ``timeout`` of the workers of the new scenarios: far shorter than the faults they live through.
WORKER_TIMEOUT = 2.0


class Uniform(Curriculum):
    def sample(self, k: int = 1) -> list[int]:
        return self.rng.integers(self.task_space.num_tasks, size=k).tolist()


class Leases(Curriculum):
    """Every task it hands out is a new number, from ``base`` on: a task names its lease, and the learner
    that issued it. Keeps (and checkpoints) the tasks it applied and those it was told were abandoned;
    with ``log``, also writes each to that file at once. Refuses an episode for a task it never handed out
    (as PLR does)."""

    def __init__(self, base: int = 0, log: str | None = None) -> None:
        super().__init__(Discrete(10**7), seed=0)
        self.base = self.next = base
        self.log = log
        self.applied: list[int] = []
        self.abandoned: list[tuple[int, int]] = []
        self._fd: int | None = None

    def _write(self, line: str) -> None:
        if self.log is not None:
            if self._fd is None:
                self._fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(self._fd, line.encode())

    def sample(self, k: int = 1) -> list[int]:
        self.next += k
        return list(range(self.next - k, self.next))

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        task = int(task)
        if not self.base <= task < self.next:
            raise ValueError(f"task {task} was never sampled")
        self.applied.append(task)
        self._write(f"e {task}\n")

    def on_task_abandoned(self, task, env_id=None) -> None:
        self.abandoned.append((int(task), -1 if env_id is None else int(env_id)))
        self._write(f"a {int(task)}\n")

    def records(self) -> dict[str, list]:
        return {"applied": list(self.applied), "abandoned": [list(a) for a in self.abandoned]}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "base": self.base, "next": self.next, **self.records()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.base, self.next = int(state["base"]), int(state["next"])
        self.applied = [int(t) for t in state["applied"]]
        self.abandoned = [(int(t), int(e)) for t, e in state["abandoned"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _after(arrivals: np.ndarray, t: float) -> float:
    """Seconds from ``t`` to the first arrival after it."""
    i = np.searchsorted(arrivals, t)
    return float(arrivals[i] - t) if i < len(arrivals) else float("nan")


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def _read_log(path: Path) -> tuple[list[int], list[int]]:
    """The tasks a learner's :class:`Leases` applied, and those it was told were abandoned."""
    applied, abandoned = [], []
    if path.exists():
        for line in path.read_text().splitlines():
            kind, task = line.split()
            (applied if kind == "e" else abandoned).append(int(task))
    return applied, abandoned


# -- the original sections: one worker, short cuts and quick restarts ----------------------------------

def _worker(address: str, stop, out, episode_s: float) -> None:
    """Play until ``stop``; send back the (monotonic) time each task arrived and the counts."""
    c = CurriculumClient(address, timeout=30.0)
    arrivals = []
    episodes = 0
    while not stop.is_set():
        a = c.next_task()
        arrivals.append(time.monotonic())
        time.sleep(episode_s)
        c.record_episode(a, 1.0, 1, 1.0)
        episodes += 1
    c.flush()
    t = c.transport
    out.put((arrivals, episodes, dict(c.stats), t.resent, t.pings, t.rejoins))
    c.close()


def network_cuts(args: argparse.Namespace, ctx: Any) -> None:
    episode_s = 0.002
    with serve(Uniform(Discrete(100), seed=0), "tcp://127.0.0.1:*") as server:
        port = int(server.address.rsplit(":", 1)[1])
        proxy_port = _free_port()
        stop, out = ctx.Event(), ctx.Queue()
        w = ctx.Process(target=_worker, args=(f"tcp://127.0.0.1:{proxy_port}", stop, out, episode_s))
        w.start()  # (before the proxy listens: a forked child would hold its listening socket)
        restores = []
        with TcpProxy("127.0.0.1", port, proxy_port) as proxy:
            time.sleep(1.0)
            for _ in range(args.cuts):
                proxy.cut()
                time.sleep(args.outage)
                proxy.restore()
                restores.append(time.monotonic())
                time.sleep(0.6)
            stop.set()
            arrivals, episodes, stats, resent, pings, rejoins = out.get(timeout=60)
            w.join(10)
        m = server.metrics()
    gaps = np.array([_after(np.asarray(arrivals), t) for t in restores]) * 1e3
    print(f"TCP interruption ({args.cuts} cuts of {args.outage:g} s, connections reset): time from the "
          f"restore to the first task after it: median {np.nanmedian(gaps):.0f} ms, "
          f"p99 {np.nanpercentile(gaps, 99):.0f} ms")
    print(f"  episodes played {episodes}, applied by the curriculum {int(m['sync/total/episodes_applied'])}; "
          f"updates sent {stats['updates_sent']}, received {int(m['sync/total/updates_received']) - 1} "
          f"(+1 goodbye); resent {resent} messages, {int(m['sync/duplicates_dropped'])} dropped as repeats, "
          f"{int(m['sync/replies_resent'])} replies resent; {pings} pings; re-registrations {rejoins}")


def server_restarts(args: argparse.Namespace, ctx: Any) -> None:
    episode_s = 0.002
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    stop, out = ctx.Event(), ctx.Queue()
    w = ctx.Process(target=_worker, args=(address, stop, out, episode_s))
    w.start()
    starts = []
    server = serve(Uniform(Discrete(100), seed=0), address)
    for _ in range(args.restarts):
        time.sleep(0.6)
        server.close()
        time.sleep(args.outage)
        server = serve(Uniform(Discrete(100), seed=0), address)
        starts.append(time.monotonic())
    time.sleep(0.6)
    stop.set()
    arrivals, episodes, stats, resent, pings, rejoins = out.get(timeout=60)
    w.join(10)
    server.close()
    gaps = np.array([_after(np.asarray(arrivals), t) for t in starts]) * 1e3
    print(f"server restart ({args.restarts} restarts on one port, {args.outage:g} s down): time from the "
          f"new server's start to the first task after it: median {np.nanmedian(gaps):.0f} ms, "
          f"p99 {np.nanpercentile(gaps, 99):.0f} ms; re-registrations {rejoins}")


# -- workers and learners as processes -------------------------------------------------------------------

def _player(i: int, address: str, stop, last, out) -> None:
    """A worker: play :data:`EPISODE_S` episodes until ``stop`` (``last[i]``: when its latest task came),
    then send back the arrival times, the tasks it played, its counts and its error, if any."""
    arrivals: list[float] = []
    tasks: list[int] = []
    error = ""
    c = None
    try:
        c = CurriculumClient(address, timeout=WORKER_TIMEOUT)
        while not stop.is_set():
            a = c.next_task()
            arrivals.append(time.monotonic())
            last[i] = arrivals[-1]
            time.sleep(EPISODE_S)
            tasks.append(int(a.task))  # played
            c.record_episode(a, 1.0, 1, 1.0)
        c.flush()
    except Exception as exc:  # a worker error: what this benchmark checks never happens
        error = f"{type(exc).__name__}: {exc}"
    stats = dict(c.stats) if c is not None else {}
    if c is not None:
        try:
            c.close()
        except Exception as exc:
            error = error or f"{type(exc).__name__} on close: {exc}"
    out.put({"i": i, "arrivals": arrivals, "tasks": tasks, "error": error, "stats": stats})


class Players:
    """``n`` worker processes (forked) playing against ``address``."""

    def __init__(self, ctx: Any, n: int, address: str) -> None:
        self.stop, self.out = ctx.Event(), ctx.Queue()
        self.last = ctx.Array("d", n, lock=False)
        self.procs = [ctx.Process(target=_player, args=(i, address, self.stop, self.last, self.out))
                      for i in range(n)]
        for p in self.procs:
            p.start()

    def wait_all_after(self, t: float, timeout: float, what: str) -> None:
        """Until every worker got a task after ``t``."""
        _wait(lambda: min(self.last) > t, timeout, what)

    def finish(self) -> list[dict]:
        self.stop.set()
        results = sorted((self.out.get(timeout=120) for _ in self.procs), key=lambda r: r["i"])
        for p in self.procs:
            p.join(20)
        return results

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(10)


def _learner(port: int, go, ready, stop, saved, folder: str, name: str, base: int, env_timeout: float,
             checkpoint_every: float | None, restore: bool) -> None:
    """A learner process: waits for ``go``, serves a :class:`Leases` on ``port`` (restored from the
    checkpoint with ``restore``), writes a checkpoint every ``checkpoint_every`` s if set (``saved``: when
    it wrote the last one); at ``stop``, its final metrics and records, then closes."""
    import magister

    go.wait(600)
    cur = Leases(base, f"{folder}/{name}.log")
    server = serve(cur, f"tcp://127.0.0.1:{port}", env_timeout=env_timeout)
    if restore:
        server.load_state_dict(magister.load(f"{folder}/ckpt"))
    ready.set()
    while not stop.wait(checkpoint_every or 0.2):
        if checkpoint_every:
            magister.save(f"{folder}/ckpt", server.state_dict())
            saved.value = time.monotonic()
    with open(f"{folder}/{name}.json", "w") as f:
        json.dump({"metrics": server.metrics(), "state": cur.records()}, f)
    server.close()


class Learner:
    """A learner process started now (imports done), serving once :meth:`go` is called."""

    def __init__(self, ctx: Any, port: int, folder: str, name: str, base: int = 0, env_timeout: float = 60.0,
                 checkpoint_every: float | None = None, restore: bool = False) -> None:
        self.folder, self.name = Path(folder), name
        self.go_, self.ready, self.stop = ctx.Event(), ctx.Event(), ctx.Event()
        self.saved = ctx.Value("d", 0.0)
        self.proc = ctx.Process(target=_learner, args=(port, self.go_, self.ready, self.stop, self.saved,
                                                       folder, name, base, env_timeout, checkpoint_every,
                                                       restore))
        self.proc.start()

    def go(self) -> float:
        """Serve; returns when it serves (monotonic time)."""
        self.go_.set()
        if not self.ready.wait(120):
            raise TimeoutError(f"learner {self.name} did not start within 120 s")
        return time.monotonic()

    def sigkill(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(10)
        return time.monotonic()

    def finish(self) -> dict:
        """Its final metrics and records (it closes)."""
        self.stop.set()
        self.proc.join(60)
        return json.loads((self.folder / f"{self.name}.json").read_text())

    def log(self) -> tuple[list[int], list[int]]:
        return _read_log(self.folder / f"{self.name}.log")

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)


def _recovery(results: list[dict], t: float) -> list[float]:
    """Per worker: seconds from ``t`` to its first task after it."""
    return [_after(np.asarray(r["arrivals"]), t) for r in results]


def _seconds(gaps: list[float]) -> str:
    return f"median {np.nanmedian(gaps):.2f} s, max {np.nanmax(gaps):.2f} s"


def _worker_counts(results: list[dict]) -> tuple[int, str]:
    """Episodes played by all workers, and one line of their own counts."""
    played = sum(len(r["tasks"]) for r in results)
    errors = sum(bool(r["error"]) for r in results)
    s = [r["stats"] for r in results]
    line = (f"worker errors {errors} (raised) + {sum(x.get('errors_received', 0) for x in s)} (refusals "
            f"received); re-registrations {sum(x.get('rejoins', 0) for x in s)}; updates dropped by workers "
            f"{sum(x.get('updates_dropped', 0) for x in s)}")
    for r in results:
        if r["error"]:
            line += f"\n  worker {r['i']}: {r['error']}"
    return played, line


def _twice(applied: list[int]) -> int:
    return len(applied) - len(set(applied))


def _replace_learner(ctx: Any, spawn: Any, folder: str, n: int, first_kw: dict, second_kw: dict, *,
                     play_s: float, down_s: float, after_s: float, kill_at: float | None = None) -> tuple:
    """A learner process (``first_kw``: :class:`Learner`'s arguments) serves ``n`` workers for ``play_s`` s
    and is SIGKILLed; another one (``second_kw``), started meanwhile, serves on the same port ``down_s`` s
    after the kill (``kill_at``: the kill comes that many seconds after a checkpoint of the first); the
    workers play on ``after_s`` s once each got a task from it. Returns both learners,
    the workers' results, the second's final metrics and records, and the times of the kill and of the
    second's start."""
    port = _free_port()
    first = Learner(spawn, port, folder, **first_kw)
    second = players = None
    try:
        first.go()
        players = Players(ctx, n, f"tcp://127.0.0.1:{port}")
        players.wait_all_after(time.monotonic() + play_s, 60, "the workers' first tasks")
        second = Learner(spawn, port, folder, **second_kw)  # (imports while the first one is up)
        if kill_at is not None:
            _wait(lambda: first.saved.value > 0 and
                  kill_at <= time.monotonic() - first.saved.value < kill_at + 0.05, 60, "a checkpoint")
        killed = first.sigkill()
        time.sleep(max(0.0, killed + down_s - time.monotonic()))
        back = second.go()
        players.wait_all_after(back, 120, "every worker's first task from the new learner")
        time.sleep(after_s)
        results = players.finish()
        final = second.finish()
    finally:
        for x in (players, first, second):
            if x is not None:
                x.kill()
    return first, second, results, final, killed, back


# -- outage: a learner down for a minute -----------------------------------------------------------------

def learner_outage(args: argparse.Namespace, ctx: Any, spawn: Any, folder: str) -> None:
    n = args.workers
    first, second, results, final, killed, back = _replace_learner(
        ctx, spawn, folder, n, {"name": "outage1", "base": 0}, {"name": "outage2", "base": 10**6},
        play_s=1.0, down_s=args.outage_s, after_s=1.0)
    m = final["metrics"]
    a1, ab1 = first.log()
    a2, ab2 = second.log()
    played, workers = _worker_counts(results)
    played_set = {t for r in results for t in r["tasks"]}
    not_applied = played_set - set(a1) - set(a2)
    orphaned = int(m["sync/total/reports_orphaned"])
    late = int(m["sync/total/reports_late"])
    gaps = _recovery(results, back)
    print(f"learner down {back - killed:.0f} s (SIGKILLed; a new one on the same port, no checkpoint), {n} "
          f"workers with timeout={WORKER_TIMEOUT:g} s and the default reconnect_timeout: time from the new "
          f"learner's start to each worker's next task: {_seconds(gaps)}")
    uncounted = max(0, len(not_applied) - orphaned - late)
    print(f"  episodes played {played} = applied {played - len(not_applied)} (by the killed learner "
          f"{len(set(a1))}, by the new one {len(set(a2))}) + not applied {len(not_applied)} "
          f"({sum(t < 10**6 for t in not_applied)} on the killed learner's leases), counted by the new "
          f"learner: "
          f"orphaned {orphaned} (reports on the killed learner's leases, dropped; "
          f"{orphaned - len(not_applied)} of them on episodes it had applied, its acknowledgement lost with "
          f"it), late {late}; uncounted {uncounted}; applied twice {_twice(a1 + a2)}")
    print(f"  leases abandoned {int(m['sync/total/tasks_abandoned'])}, on_task_abandoned calls "
          f"{len(ab1) + len(ab2)}; repeats dropped {int(m['sync/total/duplicates_dropped'])}; {workers}")


# -- partition: longer than env_timeout ----------------------------------------------------------------

def partition(args: argparse.Namespace, ctx: Any) -> None:
    n, env_timeout = args.workers, 2.0
    cur = Leases()
    with serve(cur, "tcp://127.0.0.1:*", env_timeout=env_timeout) as server:
        port = int(server.address.rsplit(":", 1)[1])
        proxy_port = _free_port()
        players = Players(ctx, n, f"tcp://127.0.0.1:{proxy_port}")  # (forked before the proxy listens)
        restores, gone = [], []
        try:
            with TcpProxy("127.0.0.1", port, proxy_port) as proxy:
                players.wait_all_after(time.monotonic() + 1.0, 60, "the workers' first tasks")
                for _ in range(args.partitions):
                    departed = server.metrics()["sync/envs_departed"]
                    proxy.cut()
                    time.sleep(args.partition_s)
                    gone.append(server.metrics()["sync/envs_departed"] - departed)
                    proxy.restore()
                    restores.append(time.monotonic())
                    players.wait_all_after(restores[-1], 60, "every worker's first task after the restore")
                    time.sleep(1.0)
                results = players.finish()
        finally:
            players.kill()
        m = server.metrics()
    played, workers = _worker_counts(results)
    applied, abandoned = cur.applied, [t for t, _ in cur.abandoned]
    late, orphaned = int(m["sync/total/reports_late"]), int(m["sync/total/reports_orphaned"])
    gaps = [g for t in restores for g in _recovery(results, t)]
    print(f"partition longer than env_timeout ({args.partitions} cuts of {args.partition_s:g} s each, "
          f"env_timeout={env_timeout:g} s, {n} workers with timeout={WORKER_TIMEOUT:g} s): envs declared "
          f"gone per cut {', '.join(str(int(g)) for g in gone)}; time from the restore to each worker's next "
          f"task: {_seconds(gaps)}")
    print(f"  episodes played {played} = applied {len(applied)} + late {late} (reports for leases abandoned "
          f"while the env was away: dropped, counted) + orphaned {orphaned}; uncounted "
          f"{played - len(applied) - late - orphaned}; applied twice {_twice(applied)}, applied and "
          f"abandoned {len(set(applied) & set(abandoned))}")
    print(f"  leases abandoned {int(m['sync/total/tasks_abandoned'])}, on_task_abandoned calls "
          f"{len(abandoned)} ({len(set(abandoned))} distinct); envs registered {int(m['sync/envs'])} (came "
          f"back under their identity: {int(m['sync/envs_rejoined'])} returns); repeats dropped "
          f"{int(m['sync/total/duplicates_dropped'])}; {workers}")


# -- restore: a learner restored from its checkpoint under live workers ----------------------------------

def restore(args: argparse.Namespace, ctx: Any, spawn: Any, folder: str) -> None:
    n, every = args.workers, 0.5
    first, second, results, final, killed, back = _replace_learner(
        ctx, spawn, folder, n, {"name": "restore1", "base": 0, "checkpoint_every": every},
        {"name": "restore2", "base": 0, "checkpoint_every": every, "restore": True},
        play_s=2.0, down_s=3.0, after_s=2.0, kill_at=0.8 * every)  # (2 s of play: a few checkpoints)
    m = final["metrics"]
    applied = final["state"]["applied"]  # the restored curriculum's: the checkpoint's, then the new ones
    abandoned = [t for t, _ in final["state"]["abandoned"]]
    _, ab1 = first.log()
    played, workers = _worker_counts(results)
    lost, orphaned = int(m["sync/total/episodes_lost_to_restore"]), int(m["sync/total/reports_orphaned"])
    late = int(m["sync/total/reports_late"])
    refused = int(m["sync/total/updates_rejected"]) + int(m["sync/total/curriculum_errors"])
    gaps = _recovery(results, back)
    print(f"learner restored from its checkpoint under live workers (a checkpoint every {every:g} s; "
          f"SIGKILLed {0.8 * every:g} s after one; a new process restores the last checkpoint and serves "
          f"{back - killed:.1f} s after the kill; {n} workers): time from the restored learner's start to "
          f"each worker's next task: {_seconds(gaps)}")
    uncounted = played - len(applied) - lost - orphaned - late
    print(f"  episodes played {played} = in the restored curriculum {len(applied)} + lost to the restore "
          f"{lost} (applied by the killed learner after its checkpoint) + orphaned {orphaned} (on leases it "
          f"issued after its checkpoint) + late {late}; uncounted {uncounted}; "
          f"applied twice {_twice(applied)}, applied and abandoned {len(set(applied) & set(abandoned))}; "
          f"refused by the curriculum {refused}")
    print(f"  leases abandoned {int(m['sync/total/tasks_abandoned'])}, on_task_abandoned calls "
          f"{len(abandoned)} in the restored curriculum (+{len(ab1)} by the killed learner); envs registered "
          f"{int(m['sync/envs'])}; repeats dropped {int(m['sync/total/duplicates_dropped'])}; {workers}")


# -- ray: a node of the cluster lost ----------------------------------------------------------------------

class RayEnvWorker:
    """A Ray actor (two threads: one plays, one takes calls): plays :data:`EPISODE_S` episodes through a
    :class:`~magister.sync.feed.RayClient` from :meth:`start` until :meth:`stop`, writing each task it
    played to ``log`` (one write each: a killed node loses none)."""

    def start(self, address: str, log: str) -> None:
        import ray

        from magister.sync.feed import RayClient

        self.client = RayClient(address, timeout=WORKER_TIMEOUT)
        self.fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self.halt = threading.Event()
        self.arrivals: list[float] = []
        self.error = ""
        self.node = ray.get_runtime_context().get_node_id()
        self.thread = threading.Thread(target=self._play, daemon=True)
        self.thread.start()

    def _play(self) -> None:
        try:
            while not self.halt.is_set():
                a = self.client.next_task()
                self.arrivals.append(time.monotonic())
                time.sleep(EPISODE_S)
                os.write(self.fd, f"{int(a.task)}\n".encode())  # played
                self.client.record_episode(a, 1.0, 1, 1.0)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def where(self) -> tuple[int | None, str, int]:
        """Its env id, node id and episodes so far."""
        return self.client.env_id, self.node, len(self.arrivals)

    def stop(self) -> dict:
        self.halt.set()
        self.thread.join(60)
        self.client.close()
        return {"arrivals": self.arrivals, "stats": dict(self.client.stats), "error": self.error,
                "env": self.client.env_id}


def ray_node_loss(args: argparse.Namespace, folder: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from magister.sync.ray_server import serve_ray

    mb = 1024 * 1024
    if ray.is_initialized():
        ray.shutdown()
    started = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head": 1}, "object_store_memory": 100 * mb, "include_dashboard": False})
    server = None
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * mb)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="magister_recovery", configure_logging=False,
                 log_to_driver=False)
        up = time.monotonic() - started
        server = serve_ray(Leases(), name="magister_recovery", actor_options={"resources": {"head": 1}},
                           timeout=120.0)
        Worker = ray.remote(num_cpus=1, resources={"runner": 1}, max_concurrency=2)(RayEnvWorker)
        logs = [f"{folder}/ray{i}.log" for i in range(3)]
        workers = [Worker.remote() for _ in range(2)]
        ray.get([w.start.remote(server.address, log) for w, log in zip(workers, logs)], timeout=120)

        def where(w):
            return ray.get(w.where.remote(), timeout=60)
        _wait(lambda: all(where(w)[2] > 100 for w in workers), 120, "the Ray workers' first episodes")
        (env_v, node_v, _), (_, node_s, _) = where(workers[0]), where(workers[1])
        if node_v == node_s:
            raise RuntimeError("both env workers landed on one node")
        victim = next(node for node in cluster.worker_nodes if node.node_id == node_v)
        m0 = server.metrics()
        lost_at = time.monotonic()
        cluster.remove_node(victim)  # the node, its raylet and the worker on it die
        _wait(lambda: server.metrics()[f"sync/env{env_v}/connected"] == 0, 120, "the lost env declared gone")
        declared = time.monotonic() - lost_at
        cluster.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * mb)  # its replacement
        cluster.wait_for_nodes()
        joined = time.monotonic()
        spare = Worker.remote()
        ray.get(spare.start.remote(server.address, logs[2]), timeout=120)
        _wait(lambda: where(spare)[2] > 20, 60, "the replacement's first episodes")
        ends = ray.get([workers[1].stop.remote(), spare.stop.remote()], timeout=120)
        m = server.metrics()
        records = server.call("records")
    finally:
        if server is not None:
            server.close()
        ray.shutdown()
        cluster.shutdown()
    survivor, replacement = ends
    played_v = [int(x) for x in Path(logs[0]).read_text().split()]
    played_o = [int(x) for log in logs[1:] for x in Path(log).read_text().split()]
    applied = records["applied"]
    abandoned_v = [t for t, e in records["abandoned"] if e == env_v]
    lost_v = set(played_v) - set(applied)
    t = {k.split("/")[-1]: int(v) for k, v in m.items() if k.startswith("sync/total/")}
    errors = sum(bool(r["error"]) for r in ends) + sum(r["stats"]["errors_received"] for r in ends)
    first = _after(np.asarray(replacement["arrivals"]), joined)
    lost_survivor = _after(np.asarray(survivor["arrivals"]), lost_at)
    print(f"Ray node lost (a 3-node ray.cluster_utils.Cluster, up in {up:.0f} s: the curriculum actor on the "
          f"head, one env worker actor on each worker node, RayClient feeds; one worker node removed): the "
          f"lost env declared gone {declared:.2f} s after the removal (found dead through Ray's node and "
          f"worker tables: envs_dead {int(m['sync/envs_dead'])}, envs_timed_out "
          f"{int(m['sync/envs_timed_out'])}, "
          f"env_timeout 60 s); a replacement node's worker got its first task {first:.2f} s after the node "
          f"joined; the other worker's next task came {lost_survivor:.2f} s after the loss")
    print(f"  lost env: played {len(played_v)} = applied {len(set(played_v) & set(applied))} + lost with its "
          f"node {len(lost_v)} (all among its abandoned leases: {lost_v <= set(abandoned_v)}); leases "
          f"abandoned {int(m[f'sync/env{env_v}/tasks_abandoned'])} (in flight just before the loss "
          f"{int(m0[f'sync/env{env_v}/tasks_in_flight'])}), on_task_abandoned calls {len(abandoned_v)} "
          f"({len(set(abandoned_v))} distinct), in flight now {int(m[f'sync/env{env_v}/tasks_in_flight'])}")
    played = len(played_v) + len(played_o)
    print(f"  all envs: played {played} = applied {len(applied)} + lost with the node {len(lost_v)}; "
          f"uncounted {played - len(applied) - len(lost_v)}; applied twice {_twice(applied)}; leases sent "
          f"{t['tasks_sent']} = consumed {t['tasks_consumed']} + returned "
          f"{t['tasks_returned']} + abandoned {t['tasks_abandoned']}, in flight {t['tasks_in_flight']}; "
          f"envs registered {int(m['sync/envs'])}; worker errors {errors}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"comma-separated subset of {','.join(SCENARIOS)} (default: all)")
    ap.add_argument("--cuts", type=int, default=40)
    ap.add_argument("--outage", type=float, default=0.2, help="seconds the proxy stays cut (cuts, restarts)")
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--outage-s", type=float, default=60.0, help="seconds the learner stays down (outage)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--partition-s", type=float, default=4.0, help="seconds of each partition (> 2 s)")
    ap.add_argument("--workers", type=int, default=4, help="worker processes (outage, partition, restore)")
    ap.add_argument("--write-results", action="store_true",
                    help="write the output into docs/results.md and benchmarks/README.md, and the table of "
                         "what survives what into docs/guides/remote-workers.md (needs every scenario)")
    args = ap.parse_args()
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown or not chosen:
        ap.error(f"--scenarios: unknown {unknown or chosen}; expected a comma-separated subset of "
                 f"{','.join(SCENARIOS)}")
    if args.write_results and set(chosen) != set(SCENARIOS):
        ap.error("--write-results needs every scenario (the pages show one whole run)")
    if args.partition_s <= 2.0:
        ap.error(f"--partition-s must be longer than the server's env_timeout (2 s), got "
                 f"{args.partition_s:g}")
    pages = (RESULTS_PAGE, BENCHMARKS_README)
    if args.write_results:
        check_section(GUIDE, TABLE)  # before the run
    with recording("sync-recovery", enabled=args.write_results, pages=pages) as rec:
        run(args, chosen)
    if args.write_results:
        write_section(GUIDE, TABLE, survival_table(rec.output), command_line())
        sys.stderr.write(f"wrote results section {TABLE!r} of {GUIDE.relative_to(ROOT)}\n")


def run(args: argparse.Namespace, chosen: list[str]) -> None:
    print(f"start: {machine()}")
    ctx, spawn = mp.get_context("fork"), mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="magister-recovery-") as folder:
        for name in SCENARIOS:
            if name not in chosen:
                continue
            if name == "cuts":
                network_cuts(args, ctx)
            elif name == "restarts":
                server_restarts(args, ctx)
            elif name == "outage":
                learner_outage(args, ctx, spawn, folder)
            elif name == "partition":
                partition(args, ctx)
            elif name == "restore":
                restore(args, ctx, spawn, folder)
            else:
                ray_node_loss(args, folder)
            sys.stdout.flush()


# -- the guide's table, from the printed output --------------------------------------------------------------

def _grab(pattern: str, text: str) -> re.Match:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise ValueError(f"the output has no line matching {pattern!r}: run every scenario")
    return m


def survival_table(output: str) -> str:
    """The table of what survives what (the remote-workers guide), its figures taken from this benchmark's
    printed ``output`` (every scenario's)."""
    num, span = r"(\d+)", r"(median \S+ s, max \S+ s)"
    errors = r"worker errors (\d+) \(raised\) \+ (\d+)"
    cuts = _grab(r"^TCP interruption .*: median (\d+ ms), p99 (\d+ ms)", output)
    restarts = _grab(r"^server restart .*: median (\d+ ms), p99 (\d+ ms)", output)
    out = _grab(rf"^learner down {num} s .* {num} workers with timeout=(\S+) s.*: {span}\n"
                rf"  episodes played {num} = applied {num} .* orphaned {num} .*uncounted {num}; "
                rf"applied twice {num}\n.*{errors}", output)
    part = _grab(rf"^partition longer than env_timeout \({num} cuts of (\S+) s each, env_timeout=(\S+) s, "
                 rf"{num} workers.*: {span}\n"
                 rf"  episodes played {num} = applied {num} \+ late {num}.*uncounted {num}; "
                 rf"applied twice {num}, applied and abandoned {num}\n"
                 rf"  leases abandoned {num}, on_task_abandoned calls {num}.*{errors}", output)
    rest = _grab(rf"^learner restored .*: {span}\n"
                 rf"  episodes played {num} = in the restored curriculum {num} \+ lost to the restore {num} "
                 rf".*\+ orphaned {num} .*uncounted {num}; applied twice {num}, applied and abandoned {num}; "
                 rf"refused by the curriculum {num}\n.*{errors}", output)
    ckpt = _grab(r"^learner restored .*a checkpoint every (\S+) s; SIGKILLed (\S+) s after one", output)
    ray = _grab(r"^Ray node lost .*declared gone (\S+) s after the removal .*first task (\S+) s after "
                rf"the node joined.*\n  lost env: played {num} .*lost with its node {num} .*leases "
                rf"abandoned {num} .*on_task_abandoned calls {num} \({num} distinct\).*\n"
                rf"  all envs: .*uncounted {num}; applied twice {num}.*worker errors {num}", output)
    rows = [
        ("the network drops (connections reset, bytes in flight lost)",
         "each worker reconnects as the same env; what either side missed is sent again, repeats are "
         "dropped: no update lost, none counted twice",
         f"median {cuts[1]}, p99 {cuts[2]} after the network is back"),
        ("the server restarts on the same address",
         "workers register again and send the new server what the old one never acknowledged; reports on "
         "the old server's leases are dropped there and counted `reports_orphaned` (a server restored from "
         "its checkpoint knows them: see below)",
         f"median {restarts[1]}, p99 {restarts[2]} after the new server starts"),
        (f"the learner is down for {out[1]} s (SIGKILLed, restarted with no checkpoint)",
         f"workers keep trying for `reconnect_timeout` (default 1 h; `timeout` bounds the first connection "
         f"and each answer while the learner is up), keep the episodes they play, and register again; "
         f"reports on the dead learner's leases are dropped and counted `reports_orphaned`. Measured: "
         f"{out[2]} workers with `timeout={out[3]}`, {int(out[10]) + int(out[11])} errors; {out[5]} episodes "
         f"played, {out[6]} applied, {out[7]} orphaned, {out[8]} uncounted, {out[9]} applied twice",
         f"{out[4]} after the new learner starts"),
        (f"a partition longer than `env_timeout` ({part[2]} s cuts, `env_timeout={part[3]}`)",
         f"each worker is declared gone (its leases abandoned, `on_task_abandoned` once each) and comes back "
         f"under its identity, even at `max_envs`; a report on an abandoned lease is dropped and counted "
         f"`reports_late`: each lease has one outcome. Measured ({part[1]} cuts, {part[4]} workers): "
         f"{part[6]} episodes played = {part[7]} applied + {part[8]} late, {part[9]} uncounted; {part[10]} "
         f"applied twice, {part[11]} applied and abandoned; {part[12]} leases abandoned, {part[13]} "
         f"`on_task_abandoned` calls; {int(part[14]) + int(part[15])} worker errors",
         f"{part[5]} after the network is back"),
        ("the learner is restored from its checkpoint under live workers",
         f"`server.state_dict()` holds the sync ledger: workers come back with their leases; each episode is "
         f"applied once or counted (`episodes_lost_to_restore`: applied by the dead learner after its "
         f"checkpoint; `reports_orphaned`: on a lease it issued after it). Measured (a checkpoint every "
         f"{ckpt[1]} s, the learner killed {ckpt[2]} s after one): {rest[2]} played = {rest[3]} in the "
         f"restored curriculum + {rest[4]} lost to the restore "
         f"+ {rest[5]} orphaned, {rest[6]} uncounted; {rest[7]} applied twice; {rest[9]} refused by the "
         f"curriculum; {int(rest[10]) + int(rest[11])} worker errors",
         f"{rest[1]} after the restored learner starts"),
        ("a worker dies or hangs",
         "after `env_timeout` (default 60 s) of silence it is declared gone: its tasks are counted "
         "`tasks_abandoned` and passed to the curriculum's `on_task_abandoned`, its slot and state freed "
         "(`max_envs` bounds live envs)",
         "—"),
        ("a Ray node is lost (with its env runners)",
         f"the curriculum actor sees the node (or worker process) dead in Ray's tables and declares its envs "
         f"gone without waiting for `env_timeout` (measured: {ray[1]} s after the node's removal); their "
         f"leases are abandoned once each ({ray[5]} leases, {ray[6]} `on_task_abandoned` calls, {ray[7]} "
         f"distinct); episodes the dead worker still held are lost with it, among its abandoned leases "
         f"({ray[4]} of {ray[3]} played); {ray[8]} uncounted, {ray[9]} applied twice, {ray[10]} worker "
         f"errors",
         f"a replacement worker's first task {ray[2]} s after its node joins"),
        ("a worker is idle (between RLlib `sample()` calls)",
         "its process sends a heartbeat every `env_timeout / 4`: it stays registered",
         "—"),
        ("the server is gone for good",
         "the worker raises `ServerUnavailableError` after `reconnect_timeout` (after `timeout` if it never "
         "connected), or, with `fallback_task_space=...`, samples locally and warns once; `close()` returns "
         "within `close_timeout`",
         "—"),
    ]
    lines = ["| fault | what happens | a worker's first task after it |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
