"""A seeded chaos soak of the sync layer: faults made for real, several at once, for ``--minutes``, while
``--workers`` worker processes play throughout; then an invariant checker over what the workers logged and
what the curricula applied.

Run: ``python benchmarks/sync_chaos.py [--seed 40] [--minutes 2] [--workers 8] [--no-ray] [--json out.json]
[--write-results]`` (``--write-results``: the output goes into ``docs/results.md``; ``--json``: the
checker's structured result, which ``tests/test_sync_chaos.py`` asserts on).

The schedule is drawn by ``random.Random(seed)`` and printed first; the same seed gives the same schedule
(the times it runs at follow the machine's load). Fault kinds:

* ``worker_kill``: a worker process SIGKILLed, a new one started in its slot;
* ``worker_stop``: a worker SIGSTOPped, shorter or longer than the server's ``env_timeout``, then SIGCONT;
* ``learner_fresh`` / ``learner_restore``: the learner process SIGKILLed; a new one serves on the same port,
  with a new curriculum or restored from the last checkpoint (one every ``CHECKPOINT_S`` s);
* ``server_restart``: the learner closes its server and serves the same curriculum on the same port again;
* ``cut``: the TCP proxy between the workers and the learner cut (connections reset), shorter or longer
  than ``env_timeout``;
* ``garbage``: frames of random bytes and of valid msgpack that is no message, sent to the server;
* ``ray_node`` (unless ``--no-ray``): beside this ZeroMQ endpoint, a three-node ``ray.cluster_utils.Cluster``
  serves a curriculum actor to two env worker actors (``RayClient`` feeds, as in ``sync_recovery.py
  --scenarios ray``); the node of one of them is removed, then a new node and worker join. Its losses are
  drawn from their own generator, so a seed gives the same other faults with or without Ray.

Every worker connects through the proxy (``TcpProxy`` of ``tests/tcp_proxy.py``, in a process of its own)
with the default ``reconnect_timeout``; the first ones with ``timeout=2`` s, far shorter than the faults
they live through, those started in place of killed ones with :data:`REPLACEMENT_TIMEOUT` (one may start
in the middle of an outage, and a first connection waits only ``timeout``).
Each episode a worker plays is logged (one write each: a SIGKILL loses none) with its lease id, its task
and a return tag unique to it; the episode's return is that tag. Each learner's curriculum (every task it
hands out is a new number, unique across learners) logs each episode it applies (by its tag) and each task
it is told was abandoned. The checker joins the logs, follows each curriculum through its restores (a
restored curriculum holds what its checkpoint held), and reads the servers' counters (``sync/total/...``)
and the workers' ``stats``. Its verdicts (see :func:`check`):

* ``played_once``: no lease played in two episodes; ``applied_once``: no episode applied twice by one
  curriculum; ``no_phantoms``: no episode applied that no worker played;
* ``one_outcome``: no lease both applied and abandoned in one curriculum;
* ``all_counted``: every episode played is applied, lost to a restore, or counted: late, orphaned, lost
  while away (``updates_lost_away``), or lost with its SIGKILLed worker;
* ``restore_losses_agree``: the servers' ``episodes_lost_to_restore`` is at least the episodes lost to a
  restore from workers still alive (they tell the restored server what they reported) and at most all
  episodes lost to a restore;
* ``counters_agree``: for every server that closed cleanly, its ``episodes_applied`` and
  ``tasks_abandoned`` equal the episodes and abandoned tasks its curriculum logged meanwhile;
* ``no_worker_errors``: no worker raised, none received an error reply;
* ``no_learner_stall``: no turn of a learner's loop (a checkpoint) took :data:`STALL_S` (else every thread's
  stack is shown);
* ``memory_bounded`` / ``fds_bounded``: each long-lived process's resident memory and open files at the
  end are within a margin of what they were a third of the way in.

The Ray side is checked the same way where it applies (its env workers log the tasks they play, each task
a lease; its curriculum keeps the tasks it applied and those abandoned): each task played once, applied
once or lost with its removed node among the abandoned leases, none applied and abandoned, the actor's
counters against the curriculum's records, no worker error.

A failing run prints its seed. The CI run (two minutes) leaves Ray out: the cluster's own processes (three
raylets, the GCS, three actors) on top of eight workers and a learner are too heavy for a 2-core machine.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import multiprocessing as mp
import os
import queue
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_recovery import WORKER_TIMEOUT, Leases, RayEnvWorker, TcpProxy, _free_port, _wait  # noqa: E402

from magister.examples.results import RESULTS_PAGE, machine, recording  # noqa: E402

#: The server's ``env_timeout`` (seconds): faults are drawn shorter and longer than it.
ENV_TIMEOUT = 2.0
#: Seconds between two checkpoints of the learner.
CHECKPOINT_S = 0.5
#: Seconds one turn of a learner's loop (a checkpoint) may take before it writes every thread's stack.
STALL_S = 20.0
#: Task numbers of learner ``k`` start at ``k * BASE``; a return tag is ``worker uid * BASE + episode``.
BASE = 10**7
#: ``timeout`` of a worker started in place of a killed one: it may start in the middle of an outage, and
#: a first connection waits ``timeout`` (a registered worker waits out outages for ``reconnect_timeout``).
#: The first workers have :data:`sync_recovery.WORKER_TIMEOUT`, far shorter than the faults they live through.
REPLACEMENT_TIMEOUT = 120.0
#: Seconds a learner serves at least before it is killed, however late it started (a spawn on a loaded
#: machine can take longer than the schedule's gap between two learner faults).
MIN_SERVE_S = 2.0
#: Mean seconds between two faults.
MEAN_GAP_S = 2.5
FAULTS = ("worker_kill", "worker_stop", "learner_fresh", "learner_restore", "server_restart", "cut",
          "garbage")
KINDS = (*FAULTS, "ray_node")
#: Mean seconds between two Ray node losses.
RAY_GAP_S = 40.0
#: The counters read from each server (``sync/total/<name>``), and its core's own.
COUNTERS = ("episodes_applied", "tasks_abandoned", "reports_late", "reports_orphaned",
            "episodes_lost_to_restore", "duplicates_dropped")


# -- the schedule ------------------------------------------------------------------------------------------

def schedule(seed: int, minutes: float, workers: int, ray: bool = False) -> list[dict]:
    """The faults, drawn by ``random.Random(seed)``: dicts with ``t`` (seconds from the start), ``kind``
    and its parameters. A worker slot, the learner, the proxy and the Ray cluster take one fault at a time;
    different ones overlap. ``ray``: Ray nodes are lost too (the other kinds are drawn as without)."""
    rng = random.Random(seed)
    ray_rng = random.Random(seed + 1)  # (its own draws: the rest of the schedule is the same without it)
    end = minutes * 60.0 - 10.0
    faults = _ray_faults(ray_rng, end) if ray else []
    t, learner_free, proxy_free = 5.0, 5.0, 5.0
    slot_free = [5.0] * workers
    while True:
        t += rng.expovariate(1.0 / MEAN_GAP_S)
        if t > end:
            return sorted(faults, key=lambda f: f["t"])
        kind = rng.choice(FAULTS)
        f: dict[str, Any] = {"t": round(t, 2), "kind": kind}
        if kind in ("worker_kill", "worker_stop"):
            free = [i for i in range(workers) if slot_free[i] <= t]
            if not free:
                continue
            f["slot"] = rng.choice(free)
            if kind == "worker_stop":
                f["long"] = rng.random() < 0.5
                f["s"] = _duration(rng, f["long"])
            else:
                f["s"] = round(rng.uniform(0.0, 1.0), 2)  # before its replacement starts
            slot_free[f["slot"]] = t + f["s"] + 1.0
        elif kind in ("learner_fresh", "learner_restore", "server_restart"):
            if learner_free > t:
                continue
            f["s"] = round(rng.uniform(0.0, 1.0) if kind == "server_restart" else rng.uniform(0.2, 3.0), 2)
            learner_free = t + f["s"] + 6.0
        elif kind == "cut":
            if proxy_free > t:
                continue
            f["long"] = rng.random() < 0.5
            f["s"] = _duration(rng, f["long"])
            proxy_free = t + f["s"] + 1.0
        else:
            f["frames"] = rng.randint(1, 20)
            f["bytes_seed"] = rng.getrandbits(32)
        faults.append(f)


def _ray_faults(rng: random.Random, end: float) -> list[dict]:
    """Ray node losses: one every :data:`RAY_GAP_S` s or so, each naming which of the two env workers'
    nodes goes."""
    out, t = [], 0.0
    while (t := t + RAY_GAP_S * rng.uniform(0.75, 1.25)) < end:
        out.append({"t": round(t, 2), "kind": "ray_node", "worker": rng.randrange(2)})
    return out


def _duration(rng: random.Random, long: bool) -> float:
    """Seconds of a stop or a cut: longer than ``env_timeout`` (``long``) or shorter."""
    return round(ENV_TIMEOUT * (rng.uniform(1.5, 2.5) if long else rng.uniform(0.1, 0.6)), 2)


def describe(f: dict) -> str:
    kind = f["kind"]
    if kind == "worker_kill":
        return f"worker {f['slot']} SIGKILLed (a new one {f['s']:g} s later)"
    if kind == "worker_stop":
        return (f"worker {f['slot']} SIGSTOPped {f['s']:g} s "
                f"({'longer' if f['long'] else 'shorter'} than env_timeout)")
    if kind == "learner_fresh":
        return f"learner SIGKILLed, a fresh one {f['s']:g} s later"
    if kind == "learner_restore":
        return f"learner SIGKILLed, restored from its checkpoint {f['s']:g} s later"
    if kind == "server_restart":
        return f"server closed, the same curriculum served again {f['s']:g} s later"
    if kind == "cut":
        return f"proxy cut {f['s']:g} s ({'longer' if f['long'] else 'shorter'} than env_timeout)"
    if kind == "ray_node":
        return f"the Ray node of env worker {f['worker']} removed (a new node and worker after it)"
    return f"{f['frames']} garbage frames"


def actions(faults: list[dict]) -> list[tuple[float, int, str, dict]]:
    """Each fault as its timed steps (start, and end where it lasts), in order of time."""
    out = []
    for i, f in enumerate(faults):
        kind, t = f["kind"], f["t"]
        if kind == "worker_kill":
            out += [(t, i, "kill", f), (t + f["s"], i, "respawn", f)]
        elif kind == "worker_stop":
            out += [(t, i, "stop", f), (t + f["s"], i, "cont", f)]
        elif kind in ("learner_fresh", "learner_restore"):
            out += [(t, i, "learner_kill", f), (t + f["s"], i, "learner_go", f)]
        elif kind == "cut":
            out += [(t, i, "cut", f), (t + f["s"], i, "restore", f)]
        else:
            out.append((t, i, kind, f))
    return sorted(out, key=lambda a: (a[0], a[1]))


# -- the curriculum, the learner and the workers ---------------------------------------------------------

class Tagged(Leases):
    """:class:`Leases` that logs each episode it applies by its return (a tag unique to the episode) and
    keeps counts, not lists, in its state (what a restore truncates the log to)."""

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        task = int(task)
        if not task < self.next:
            raise ValueError(f"task {task} was never sampled")
        self.applied.append(task)
        self._write(f"e {int(episode_return)} {task}\n")

    def on_task_abandoned(self, task, env_id=None) -> None:
        self.abandoned.append((int(task), -1 if env_id is None else int(env_id)))
        self._write(f"a {int(task)}\n")

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["applied"], state["abandoned"] = len(self.applied), len(self.abandoned)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        applied, abandoned, base = int(state["applied"]), int(state["abandoned"]), self.base
        super().load_state_dict({**state, "applied": [], "abandoned": []})
        self.applied, self.abandoned = [-1] * applied, [(-1, -1)] * abandoned
        self.base, self.next = base, max(self.next, base)  # (its own numbers: unique across learners)


def _dump(path: str, data: Any) -> None:
    """Write ``data`` as JSON, whole or not at all (a SIGKILL leaves the previous file)."""
    with open(f"{path}.tmp", "w") as f:
        json.dump(data, f)
    os.replace(f"{path}.tmp", path)


def _totals(metrics: dict) -> dict[str, float]:
    out = {k: metrics.get(f"sync/total/{k}", 0.0) for k in COUNTERS}
    out["updates_lost_away"] = metrics.get("sync/updates_lost_away", 0.0)
    return out


def _learner(k: int, port: int, folder: str, cmds, ready) -> None:
    """Learner ``k``: waits for ``("go", restore)``, serves a :class:`Tagged` (from the last checkpoint with
    ``restore``), checkpoints every :data:`CHECKPOINT_S` s and writes its counters with each checkpoint
    (``L<k>.seg<j>.json`` per server it ran: ``start``, ``last``, ``closed``); ``("restart", s)``: closes
    its server and serves again ``s`` s later; ``("stop",)``: closes."""
    import magister
    from magister.sync.zmq_server import serve

    _, restore = cmds.get(timeout=3600)
    address = f"tcp://127.0.0.1:{port}"
    cur = Tagged(k * BASE, f"{folder}/L{k}.log")
    start = dict.fromkeys((*COUNTERS, "updates_lost_away"), 0.0)
    loaded = {"applied": 0, "abandoned": 0}
    state = None
    if restore and os.path.exists(f"{folder}/ckpt"):
        state = magister.load(f"{folder}/ckpt")
        for env in state["sync_ledger"]["envs"].values():
            for name in COUNTERS:
                start[name] += env["counters"][name]
        loaded = {"applied": int(state["applied"]), "abandoned": int(state["abandoned"])}
    elif os.path.exists(f"{folder}/ckpt"):
        os.remove(f"{folder}/ckpt")  # a fresh curriculum: a restore after it has no checkpoint of its own
    server = serve(cur, address, env_timeout=ENV_TIMEOUT)
    if state is not None:
        server.load_state_dict(state)
    _dump(f"{folder}/L{k}.start.json", {"restored": state is not None, **loaded})
    seg = 0
    seg_info = {"start": start}
    ready.set()
    stall = open(f"{folder}/L{k}.stall.txt", "w")  # (every thread's stack, should one turn take STALL_S)
    while True:
        faulthandler.dump_traceback_later(STALL_S, file=stall)
        try:
            cmd = cmds.get(timeout=CHECKPOINT_S)
        except queue.Empty:
            magister.save(f"{folder}/ckpt", server.state_dict())
            _dump(f"{folder}/L{k}.seg{seg}.json", {**seg_info, "last": _totals(server.metrics())})
            continue
        server.close()
        final = _totals(server.metrics())  # (after the close: it serves until then)
        _dump(f"{folder}/L{k}.seg{seg}.json", {**seg_info, "last": final, "closed": final})
        cur._write("r\n")  # the servers' boundary in the log
        if cmd[0] == "stop":
            return
        time.sleep(cmd[1])
        seg += 1
        seg_info = {"start": dict.fromkeys(start, 0.0)}
        server = serve(cur, address, env_timeout=ENV_TIMEOUT)


class LearnerProc:
    """A learner process, started now (spawned: its imports done by the time it is asked to serve)."""

    def __init__(self, ctx: Any, k: int, port: int, folder: str) -> None:
        self.k = k
        self.cmds, self.ready = ctx.Queue(), ctx.Event()
        self.proc = ctx.Process(target=_learner, args=(k, port, folder, self.cmds, self.ready), daemon=True)
        self.proc.start()

    def go(self, restore: bool) -> None:
        self.cmds.put(("go", restore))
        if not self.ready.wait(300):
            raise TimeoutError(f"learner {self.k} did not serve within 300 s")

    def stop(self) -> None:
        self.cmds.put(("stop",))
        self.proc.join(60)

    def sigkill(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join(10)


def _player(uid: int, slot: int, address: str, folder: str, episode_s: float, timeout: float, stop,
            last) -> None:
    """A worker: plays ``episode_s`` episodes until ``stop``, logging each (``<tag> <lease id> <task>``)
    before reporting it, its return the tag; then writes its error (if any) and ``stats``."""
    from magister.sync.feed import CurriculumClient

    fd = os.open(f"{folder}/w{uid}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    error, stats, c = "", {}, None
    try:
        c = CurriculumClient(address, timeout=timeout)
        seq = 0
        while not stop.is_set():
            a = c.next_task()
            last[slot] = time.monotonic()
            time.sleep(episode_s)
            tag = uid * BASE + seq
            seq += 1
            os.write(fd, f"{tag} {a.task_id} {int(a.task)}\n".encode())  # played
            c.record_episode(a, float(tag), 1, 1.0)
        c.flush()
    except Exception as exc:  # a worker error: what the soak checks never happens
        error = f"{type(exc).__name__}: {exc}"
    if c is not None:
        stats = dict(c.stats)
        try:
            c.close()
        except Exception as exc:
            error = error or f"{type(exc).__name__} on close: {exc}"
    _dump(f"{folder}/w{uid}.json", {"error": error, "stats": stats})


def _net(target_port: int, port: int, cmds, done) -> None:
    """The network: a :class:`TcpProxy` from ``port`` to the server (``cut`` / ``restore``), and garbage
    frames sent to the server (``("garbage", frames, seed)``)."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    with TcpProxy("127.0.0.1", target_port, port) as proxy:
        done.put("ready")
        while True:
            cmd = cmds.get(timeout=3600)
            if cmd[0] == "cut":
                proxy.cut()
            elif cmd[0] == "restore":
                proxy.restore()
            elif cmd[0] == "garbage":
                rng = random.Random(cmd[2])
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(f"tcp://127.0.0.1:{target_port}")
                for _ in range(cmd[1]):
                    if rng.random() < 0.5:
                        frame = rng.randbytes(rng.randint(0, 64))
                    else:
                        frame = msgpack.packb([rng.randint(0, 9), rng.random(), "x" * rng.randint(0, 9)])
                    sock.send_multipart([frame] * rng.randint(1, 3))
                sock.poll(200)  # (an error reply, if the server is up; the socket is closed either way)
                sock.close(0)
            else:
                break
            done.put(cmd[0])
    ctx.term()


def _ray_side(folder: str, cmds, done) -> None:
    """A three-node ``ray.cluster_utils.Cluster`` (the curriculum actor, a :class:`Leases`, on the head; an
    env worker actor, :class:`RayEnvWorker` of ``sync_recovery.py``, on each of two worker nodes, playing
    through ``RayClient`` feeds); ``("remove", i)``: the node of env worker ``i`` removed, then a new node
    and a new worker on it; ``("stop",)``: the survivors stop and the curriculum's records, its counters
    and the workers' results go to ``ray.json``."""
    import ray
    from ray.cluster_utils import Cluster

    from magister.sync.ray_server import serve_ray

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # (a terminated side shuts its cluster down)
    mb = 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head": 1}, "object_store_memory": 100 * mb, "include_dashboard": False})
    server = None
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * mb)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="magister_chaos", configure_logging=False,
                 log_to_driver=False)
        server = serve_ray(Leases(), name="magister_chaos", actor_options={"resources": {"head": 1}},
                           timeout=120.0)
        Worker = ray.remote(num_cpus=1, resources={"runner": 1}, max_concurrency=2)(RayEnvWorker)
        logs = 0

        def start():
            nonlocal logs
            w = Worker.remote()
            ray.get(w.start.remote(server.address, f"{folder}/ray{logs}.log"), timeout=300)
            logs += 1
            return w
        workers = [start(), start()]
        done.put("ready")
        error, removed = "", 0
        try:
            while (cmd := cmds.get(timeout=3600))[0] == "remove":
                node_id = ray.get(workers[cmd[1]].where.remote(), timeout=120)[1]
                cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == node_id))
                removed += 1
                workers[cmd[1]] = None
                cluster.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * mb)
                cluster.wait_for_nodes()
                workers[cmd[1]] = start()
        except Exception as exc:  # (a node that does not start in time on a loaded machine): it stops here
            error = f"{type(exc).__name__}: {exc}"
        results = [ray.get(w.stop.remote(), timeout=300) for w in workers if w is not None]
        _dump(f"{folder}/ray.json", {"records": server.call("records"), "metrics": server.metrics(),
                                     "results": [{k: r[k] for k in ("stats", "error")} for r in results],
                                     "error": error, "removed": removed})
    finally:
        if server is not None:
            server.close()
        ray.shutdown()
        cluster.shutdown()
        done.put("stopped")


# -- the run -----------------------------------------------------------------------------------------------

def _usage(pid: int) -> tuple[int, int] | None:
    """Resident kB and open files of ``pid`` (``None`` if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


class Soak:
    def __init__(self, args: argparse.Namespace, folder: str) -> None:
        self.args, self.folder = args, folder
        self.fork, self.spawn = mp.get_context("fork"), mp.get_context("spawn")
        self.port, self.proxy_port = _free_port(), _free_port()
        self.stop = self.fork.Event()
        self.last = self.fork.Array("d", args.workers, lock=False)
        self.workers: list[Any] = [None] * args.workers
        self.uids = [-1] * args.workers
        self.next_uid = 0
        self.killed_uids: list[int] = []
        self.stopped: dict[int, Any] = {}  # fault index: the process SIGSTOPped
        self.learners: list[LearnerProc] = []
        self.standby: LearnerProc | None = None
        self.samples: dict[int, list[tuple[float, int, int]]] = {}
        self.net = self.ray = None

    def start_worker(self, slot: int, timeout: float = REPLACEMENT_TIMEOUT) -> None:
        uid, self.next_uid = self.next_uid, self.next_uid + 1
        p = self.fork.Process(target=_player, args=(uid, slot, f"tcp://127.0.0.1:{self.proxy_port}",
                                                    self.folder, self.args.episode_s, timeout, self.stop,
                                                    self.last), daemon=True)
        p.start()
        self.workers[slot], self.uids[slot] = p, uid

    def new_learner(self) -> LearnerProc:
        k = len(self.learners) + (self.standby is not None)
        return LearnerProc(self.spawn, k, self.port, self.folder)

    def learner_go(self, restore: bool) -> None:
        lp = self.standby or self.new_learner()
        self.standby = None
        self.learners.append(lp)
        lp.go(restore)
        self.served_at = time.monotonic()
        self.standby = self.new_learner()  # (imports while this one serves)

    def net_cmd(self, *cmd: Any) -> None:
        self.net_cmds.put(cmd)
        got = self.net_done.get(timeout=60)
        if got != cmd[0]:
            raise RuntimeError(f"the network process answered {got!r} to {cmd[0]!r}")

    def sample(self, t: float) -> None:
        pids = [p.pid for p in self.workers if p is not None and p.is_alive()]
        pids += [lp.proc.pid for lp in self.learners[-1:] if lp.proc.is_alive()]
        for pid in pids:
            u = _usage(pid)
            if u is not None:
                self.samples.setdefault(pid, []).append((t, *u))

    def do(self, step: str, f: dict, index: int) -> None:
        if step == "kill":
            p = self.workers[f["slot"]]
            if p.is_alive():  # (one that stopped on an error is replaced all the same, and reported)
                os.kill(p.pid, signal.SIGKILL)
                p.join(10)
                self.killed_uids.append(self.uids[f["slot"]])
        elif step == "respawn":
            self.start_worker(f["slot"])
        elif step == "stop":
            p = self.workers[f["slot"]]
            if p.is_alive():
                os.kill(p.pid, signal.SIGSTOP)
                self.stopped[index] = p
        elif step == "cont":
            p = self.stopped.pop(index, None)
            if p is not None and p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
        elif step == "learner_kill":  # (a learner that started late, on a loaded machine, serves a while)
            time.sleep(max(0.0, self.served_at + MIN_SERVE_S - time.monotonic()))
            self.learners[-1].sigkill()
        elif step == "learner_go":
            self.learner_go(f["kind"] == "learner_restore")
        elif step == "server_restart":
            self.learners[-1].cmds.put(("restart", f["s"]))
        elif step in ("cut", "restore"):
            self.net_cmd(step)
        elif step == "garbage":
            self.net_cmd("garbage", f["frames"], f["bytes_seed"])
        elif step == "ray_node":
            self.ray_cmds.put(("remove", f["worker"]))  # (it takes a while: the driver goes on)

    def run(self, faults: list[dict]) -> float:
        """Run the schedule; returns the seconds it took."""
        self.net_cmds, self.net_done = self.spawn.Queue(), self.spawn.Queue()
        self.net = self.spawn.Process(target=_net, args=(self.port, self.proxy_port, self.net_cmds,
                                                         self.net_done), daemon=True)
        self.net.start()
        if self.args.ray:
            self.ray_cmds, self.ray_done = self.spawn.Queue(), self.spawn.Queue()
            self.ray = self.spawn.Process(target=_ray_side, args=(self.folder, self.ray_cmds, self.ray_done))
            self.ray.start()
        if self.net_done.get(timeout=300) != "ready":
            raise RuntimeError("the network process did not start")
        if self.args.ray and self.ray_done.get(timeout=900) != "ready":
            raise RuntimeError("the Ray cluster did not start")
        self.standby = self.new_learner()
        self.learner_go(False)
        for slot in range(self.args.workers):
            self.start_worker(slot, WORKER_TIMEOUT)
        t0 = time.monotonic()
        _wait(lambda: min(self.last) > t0, 300, "every worker's first task")
        t0 = time.monotonic()
        steps = actions(faults)
        next_sample = 0.0
        for t, index, step, f in tqdm(steps, desc="faults", unit="step", file=sys.stderr, mininterval=5):
            while (now := time.monotonic() - t0) < t:
                if now >= next_sample:
                    self.sample(now)
                    next_sample = now + 1.0
                time.sleep(min(0.05, t - now))
            self.do(step, f, index)
        end = self.args.minutes * 60.0
        while (now := time.monotonic() - t0) < end:
            if now >= next_sample:
                self.sample(now)
                next_sample = now + 1.0
            time.sleep(0.05)
        self.sample(time.monotonic() - t0)
        settled = time.monotonic()  # every fault over: each live worker gets a task again, then they stop
        _wait(lambda: all(t > settled or not p.is_alive() for t, p in zip(self.last, self.workers)), 300,
              "every worker's task after the last fault")  # (one that stopped on an error is reported)
        took = time.monotonic() - t0
        self.stop.set()
        for p in self.workers:
            p.join(120)
        self.learners[-1].stop()
        if self.ray is not None:
            self.ray_cmds.put(("stop",))
            if self.ray_done.get(timeout=900) != "stopped":
                raise RuntimeError("the Ray side did not stop")
        return took

    def cleanup(self) -> None:
        self.stop.set()
        for p in self.stopped.values():
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
        if self.ray is not None and self.ray.is_alive():
            self.ray.terminate()  # (it shuts its cluster down)
            self.ray.join(120)
        for p in [*self.workers, *(lp.proc for lp in self.learners), self.net, self.ray,
                  self.standby.proc if self.standby else None]:
            if p is not None and p.is_alive():
                p.kill()
                p.join(10)


# -- the checker -------------------------------------------------------------------------------------------

def _read_learner(folder: Path, k: int) -> dict:
    """Learner ``k``'s log, split per server it ran, with its start and its servers' counters."""
    segs: list[dict] = [{"applied": [], "abandoned": []}]
    path = folder / f"L{k}.log"
    for line in (path.read_text().splitlines() if path.exists() else []):
        kind, *rest = line.split()
        if kind == "e":
            segs[-1]["applied"].append((int(rest[0]), int(rest[1])))
        elif kind == "a":
            segs[-1]["abandoned"].append(int(rest[0]))
        else:
            segs.append({"applied": [], "abandoned": []})
    for j, seg in enumerate(segs):
        info = folder / f"L{k}.seg{j}.json"
        seg.update(json.loads(info.read_text()) if info.exists() else {})
    start = folder / f"L{k}.start.json"
    return {"segs": segs, "start": json.loads(start.read_text()) if start.exists() else None}


def check(folder: str | Path, n_learners: int, killed_uids: list[int], samples: dict) -> dict:
    """The invariants over what the workers logged and what the curricula applied (see the module
    docstring). Returns ``{"verdicts": {name: bool}, "counts": {...}, "details": {...}}``."""
    folder = Path(folder)
    played: dict[int, tuple[int, int, int]] = {}  # tag: (uid, lease id, task)
    task_plays: Counter = Counter()
    workers: dict[int, dict] = {}
    for log in folder.glob("w*.log"):
        uid = int(log.stem[1:])
        for line in log.read_text().splitlines():
            tag, lease, task = map(int, line.split())
            played[tag] = (uid, lease, task)
            task_plays[task] += 1
        res = folder / f"w{uid}.json"
        workers[uid] = json.loads(res.read_text()) if res.exists() else None
    # each curriculum through its restores: what it holds (applied, abandoned); what restores lost
    finals: list[tuple[list, list]] = []
    lost: list[tuple[int, int]] = []
    held_a: list[tuple[int, int]] = []
    held_b: list[int] = []
    counted = Counter()
    disagree = []
    for k in range(n_learners):
        lr = _read_learner(folder, k)
        if lr["start"] is None:
            continue
        if lr["start"]["restored"]:
            m, n = lr["start"]["applied"], lr["start"]["abandoned"]
            lost += held_a[m:]
            held_a, held_b = held_a[:m], held_b[:n]
        else:
            if held_a or held_b:
                finals.append((held_a, held_b))
            held_a, held_b = [], []
        for j, seg in enumerate(lr["segs"]):
            held_a += seg["applied"]
            held_b += seg["abandoned"]
            last, start = seg.get("last"), seg.get("start")
            if last is not None:
                for name, v in last.items():
                    counted[name] += v - start.get(name, 0.0)
            closed = seg.get("closed")
            if closed is not None:
                got = (closed["episodes_applied"] - start["episodes_applied"],
                       closed["tasks_abandoned"] - start["tasks_abandoned"])
                want = (len(seg["applied"]), len(seg["abandoned"]))
                if got != want:
                    disagree.append({"learner": k, "server": j, "counters": got, "logged": want})
    finals.append((held_a, held_b))
    applied = Counter(tag for a, _ in finals for tag, _ in a)
    applied_tags = set(applied)
    lost_tags = {tag for tag, _ in lost} - applied_tags
    two_outcomes = sum(len({task for _, task in a} & set(b)) for a, b in finals)
    not_applied = set(played) - applied_tags - lost_tags
    with_worker = {tag for tag in not_applied if played[tag][0] in set(killed_uids)}
    away = not_applied - with_worker
    slack = counted["reports_late"] + counted["reports_orphaned"] + counted["updates_lost_away"]
    uncounted = max(0, len(away) - int(slack))
    restore_low = len({tag for tag in lost_tags if played.get(tag, (-1,))[0] not in set(killed_uids)})
    restore_counted = int(counted["episodes_lost_to_restore"])
    raised = [f"worker {uid}: {r['error']}" for uid, r in workers.items() if r and r["error"]]
    refusals = sum(r["stats"].get("errors_received", 0) for r in workers.values() if r)
    unfinished = [uid for uid, r in workers.items() if r is None and uid not in killed_uids]
    mem, fds = _bounded(samples)
    stalls = {f.name: f.read_text()[:2000] for f in folder.glob("L*.stall.txt") if f.stat().st_size}
    verdicts = {
        "played_once": max(task_plays.values(), default=0) <= 1,
        "applied_once": max(applied.values(), default=0) <= 1,
        "no_phantoms": applied_tags <= set(played),
        "one_outcome": two_outcomes == 0,
        "all_counted": uncounted == 0,
        "counters_agree": not disagree,
        "restore_losses_agree": restore_low <= restore_counted <= len(lost_tags),
        "no_worker_errors": not raised and refusals == 0 and not unfinished,
        "memory_bounded": not mem,
        "fds_bounded": not fds,
        "no_learner_stall": not stalls,
    }
    counts = {
        "played": len(played), "applied": len(applied_tags), "lost_to_restore": len(lost_tags),
        "not_applied": len(not_applied), "lost_with_worker": len(with_worker),
        "late": int(counted["reports_late"]), "orphaned": int(counted["reports_orphaned"]),
        "lost_away": int(counted["updates_lost_away"]), "uncounted": uncounted,
        "lost_to_restore_counted": restore_counted, "lost_to_restore_live_workers": restore_low,
        "repeats_dropped": int(counted["duplicates_dropped"]),
        "leases_played_twice": sum(v > 1 for v in task_plays.values()),
        "applied_twice": sum(v > 1 for v in applied.values()),
        "phantoms": len(applied_tags - set(played)), "two_outcomes": two_outcomes,
        "abandoned": sum(len(b) for _, b in finals), "curricula": len(finals),
        "worker_processes": len(workers), "worker_errors": len(raised), "refusals_received": refusals,
        "rejoins": sum(r["stats"].get("rejoins", 0) for r in workers.values() if r),
        "updates_dropped_by_workers": sum(r["stats"].get("updates_dropped", 0)
                                          for r in workers.values() if r),
    }
    details = {"raised": raised, "unfinished": unfinished, "disagree": disagree, "memory": mem, "fds": fds,
               "learner_stalls": stalls}
    if (folder / "ray.json").exists():
        ray_verdicts, ray_counts, details["ray_raised"] = _check_ray(folder)
        verdicts = {k: v and ray_verdicts.get(k, True) for k, v in verdicts.items()}
        verdicts["ray_side_ran"] = ray_verdicts["ray_side_ran"]
        counts.update(ray_counts)
    return {"verdicts": verdicts, "counts": counts, "details": details}


def _check_ray(folder: Path) -> tuple[dict, dict, list]:
    """The Ray side's verdicts (those of :func:`check` that apply), counts and worker errors: each task a
    Ray env worker played is applied once, or was lost with its node and is among the abandoned leases."""
    side = json.loads((folder / "ray.json").read_text())
    played = Counter(int(x) for log in folder.glob("ray*.log") for x in log.read_text().split())
    applied = Counter(side["records"]["applied"])
    abandoned = {int(t) for t, _ in side["records"]["abandoned"]}
    lost = set(played) - set(applied)
    raised = [r["error"] for r in side["results"] if r["error"]]
    refusals = sum(r["stats"].get("errors_received", 0) for r in side["results"])
    m = side["metrics"]
    verdicts = {
        "ray_side_ran": not side["error"],
        "played_once": max(played.values(), default=0) <= 1,
        "applied_once": max(applied.values(), default=0) <= 1,
        "no_phantoms": set(applied) <= set(played),
        "one_outcome": not set(applied) & abandoned,
        "all_counted": lost <= abandoned,
        "counters_agree": (m["sync/total/episodes_applied"] == sum(applied.values()) and
                           m["sync/total/tasks_abandoned"] == len(side["records"]["abandoned"])),
        "no_worker_errors": not raised and refusals == 0,
    }
    counts = {"ray_played": sum(played.values()), "ray_nodes_removed": side["removed"],
              "ray_applied": sum(applied.values()),
              "ray_lost_with_node": len(lost), "ray_uncounted": len(lost - abandoned),
              "ray_abandoned": len(abandoned), "ray_envs": int(m["sync/envs"]),
              "ray_envs_dead": int(m.get("sync/envs_dead", 0)), "ray_worker_errors": len(raised) + refusals}
    return verdicts, counts, raised + ([f"the Ray side stopped after {side['removed']} node losses: "
                                        f"{side['error']}"] if side["error"] else [])


def _bounded(samples: dict) -> tuple[list, list]:
    """Processes sampled for at least 30 s whose resident memory (open files) at the end exceeds 1.5 times
    plus 64 MB (plus 32) what it was a third of the way through their samples."""
    mem, fds = [], []
    for pid, s in samples.items():
        if len(s) < 3 or s[-1][0] - s[0][0] < 30:
            continue
        mid = s[len(s) // 3]
        if s[-1][1] > 1.5 * mid[1] + 64 * 1024:
            mem.append({"pid": pid, "kb_third": mid[1], "kb_end": s[-1][1]})
        if s[-1][2] > mid[2] + 32:
            fds.append({"pid": pid, "fds_third": mid[2], "fds_end": s[-1][2]})
    return mem, fds


# -- main --------------------------------------------------------------------------------------------------

def report(seed: int, faults: list[dict], result: dict, took: float) -> None:
    per_kind = Counter(f["kind"] for f in faults)
    long_ = Counter(f["kind"] for f in faults if f.get("long"))
    kinds = ", ".join(f"{k} {per_kind[k]}" + (f" ({long_[k]} longer than env_timeout)" if k in long_ else "")
                      for k in KINDS)
    c = result["counts"]
    print(f"seed {seed}: {len(faults)} faults in {took:.0f} s: {kinds}")
    print(f"  episodes played {c['played']} = applied {c['applied']} + lost to a restore "
          f"{c['lost_to_restore']} "
          f"(counted by the servers {c['lost_to_restore_counted']}) + lost with a SIGKILLed worker "
          f"{c['lost_with_worker']} + counted late {c['late']} / orphaned {c['orphaned']} / lost away "
          f"{c['lost_away']} (the servers' counts, for the {c['not_applied'] - c['lost_with_worker']} "
          f"others); uncounted {c['uncounted']}")
    print(f"  leases played twice {c['leases_played_twice']}, episodes applied twice {c['applied_twice']}, "
          f"applied unplayed {c['phantoms']}, leases applied and abandoned {c['two_outcomes']}; leases "
          f"abandoned {c['abandoned']}; repeats dropped {c['repeats_dropped']}; {c['curricula']} curricula, "
          f"{c['worker_processes']} worker processes, re-registrations {c['rejoins']}, worker errors "
          f"{c['worker_errors']} (raised) + {c['refusals_received']} (refusals received)")
    verdicts = result["verdicts"].items()
    print("  invariants: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in verdicts))
    if "ray_played" in c:
        print(f"  Ray side ({c['ray_nodes_removed']} nodes removed): episodes played {c['ray_played']} = "
              f"applied {c['ray_applied']} + lost with a "
              f"removed node {c['ray_lost_with_node']} ({c['ray_uncounted']} of them not among the "
              f"{c['ray_abandoned']} abandoned leases); envs registered {c['ray_envs']}, declared dead "
              f"{c['ray_envs_dead']}; worker errors {c['ray_worker_errors']}")
    for k, v in result["details"].items():
        if v:
            print(f"  {k}: {v}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--episode-s", type=float, default=0.05, help="seconds a worker plays per episode")
    ap.add_argument("--no-ray", dest="ray", action="store_false",
                    help="no Ray cluster (its node losses need a 3-node ray.cluster_utils.Cluster)")
    ap.add_argument("--json", help="write the checker's result (verdicts, counts, details) here")
    ap.add_argument("--write-results", action="store_true", help="write the output into docs/results.md")
    args = ap.parse_args()
    faults = schedule(args.seed, args.minutes, args.workers, args.ray)
    with recording("sync-chaos", enabled=args.write_results, pages=(RESULTS_PAGE,)):
        print(f"start: {machine()}; seed {args.seed}, {args.minutes:g} min, {args.workers} workers, "
              f"env_timeout {ENV_TIMEOUT:g} s, a checkpoint every {CHECKPOINT_S:g} s")
        out = sys.stderr if args.write_results else sys.stdout  # (the results page has the summary)
        for f in faults:
            print(f"  {f['t']:7.2f} s  {describe(f)}", file=out)
        sys.stdout.flush()
        with tempfile.TemporaryDirectory(prefix="magister-chaos-") as folder:
            soak = Soak(args, folder)
            try:
                took = soak.run(faults)
            except BaseException:
                print(f"the soak failed to run: seed {args.seed} (rerun with --seed {args.seed})")
                raise
            finally:
                soak.cleanup()
            result = check(folder, len(soak.learners), soak.killed_uids, soak.samples)
        report(args.seed, faults, result, took)
    result["seed"], result["faults"] = args.seed, faults
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not all(result["verdicts"].values()):
        print(f"FAILED invariants with seed {args.seed}: replay with --seed {args.seed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
