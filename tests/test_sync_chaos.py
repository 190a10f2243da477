"""The chaos soak (``benchmarks/sync_chaos.py``): a seeded two-minute run of faults made for real, several
at once, and its checker's verdicts; and the defect it found, made alone, beside the case it does not
touch."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magister.curricula.base import Curriculum
from magister.sync.feed import CurriculumClient
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

ROOT = Path(__file__).resolve().parents[1]
#: The soak's seed here: its two-minute schedule has every fault kind, stops and cuts longer than
#: ``env_timeout``, and a learner restored from its checkpoint after fresh learners.
SEED = 40
#: Worker errors the soak may meet on a loaded machine, by what they say; any other worker error fails the
#: soak's test.
KNOWN_WORKER_ERRORS = {
    "while waiting for tasks": "no task within the 2 s timeout from a server heard within it: a wait "
                               "across a new registration was one cause, made alone and fixed "
                               "(test_sync_network's test_a_wait_for_tasks_that_spans_a_new_learner...); "
                               "the 30-minute soak has had none since; allowed here only for a server "
                               "slower than 2 s on a loaded CI machine",
}


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    """The soak's structured result (``--json``), run once for this module in its own process group."""
    out = tmp_path_factory.mktemp("chaos") / "result.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "sync_chaos.py"), "--minutes", "2", "--seed", str(SEED),
           "--no-ray", "--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        output, _ = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert out.exists(), f"the soak wrote no result (exit {proc.returncode}):\n{output[-6000:]}"
    result = json.loads(out.read_text())
    result["output"] = output
    return result


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_soak_holds_every_invariant(soak):
    kinds = {f["kind"] for f in soak["faults"]}
    assert kinds >= {"worker_kill", "worker_stop", "learner_fresh", "learner_restore", "server_restart",
                     "cut", "garbage"}
    c = soak["counts"]
    assert c["played"] > 0 and c["applied"] > 0 and c["curricula"] >= 2 and c["worker_processes"] > 8
    failed = [k for k, ok in soak["verdicts"].items() if not ok and k != "no_worker_errors"]
    assert not failed, (f"seed {SEED}: {failed}; counts {c}; details {soak['details']}\n"
                        f"{soak['output'][-3000:]}")
    assert c["uncounted"] == 0 and c["applied_twice"] == 0 and c["leases_played_twice"] == 0
    assert c["two_outcomes"] == 0 and c["refusals_received"] == 0 and not soak["details"]["unfinished"]
    unknown = [e for e in soak["details"]["raised"] if not any(sig in e for sig in KNOWN_WORKER_ERRORS)]
    assert not unknown, f"seed {SEED}: worker errors {unknown}"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_soak_counts_restore_losses_exactly(soak):
    c = soak["counts"]
    assert soak["verdicts"]["restore_losses_agree"], (
        f"seed {SEED}: lost to a restore {c['lost_to_restore']} (from workers still alive "
        f"{c['lost_to_restore_live_workers']}), counted by the servers {c['lost_to_restore_counted']}")


# -- the defects the soak found, each made alone ---------------------------------------------------------

class Numbered(Curriculum):
    """Every task a new number from ``base`` on."""

    def __init__(self, base: int = 0) -> None:
        super().__init__(Discrete(10**7), seed=0)
        self.next = base

    def sample(self, k: int = 1) -> list[int]:
        self.next += k
        return list(range(self.next - k, self.next))

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        pass

    def state_dict(self):
        return {**super().state_dict(), "next": self.next}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.next = max(self.next, int(state["next"]))


def _player(address: str, orders, done) -> None:
    """A worker process: plays as many episodes as each order says, then says so (or what it raised)."""
    c = CurriculumClient(address, timeout=5.0)
    try:
        while (n := orders.get(timeout=120)) > 0:
            for _ in range(n):
                c.record_episode(c.next_task(), 1.0, 1, 1.0)
            c.flush()
            done.put(n)
    except Exception as exc:
        done.put(f"{type(exc).__name__}: {exc}")
    finally:
        c.close()


@contextlib.contextmanager
def _playing(address: str) -> Iterator[tuple[Any, Any, list]]:
    """A forked worker process playing at ``address`` on orders (:func:`_player`), and the list of the
    servers a test serves it with: ``(orders, done, servers)``. On exit the worker stops, every server
    closes."""
    ctx = mp.get_context("fork")
    orders, done = ctx.Queue(), ctx.Queue()
    worker = ctx.Process(target=_player, args=(address, orders, done))
    worker.start()
    servers: list = []
    try:
        yield orders, done, servers
    finally:
        orders.put(0)
        worker.join(30)
        if worker.is_alive():
            worker.kill()
            worker.join(10)
        for server in servers:
            server.close()


def _serve_when_free(curriculum: Curriculum, address: str):
    """``serve(curriculum, address)`` once the port is free (a socket closed just before releases it in
    ZeroMQ's I/O thread, a moment later)."""
    import zmq

    deadline = time.monotonic() + 30
    while True:
        try:
            return serve(curriculum, address)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _wait_reported(server, n: int, start: float = 0.0) -> None:
    """Until ``server`` processed ``n`` episode reports (applied or counted) since ``start``."""
    deadline = time.monotonic() + 60
    while server.metrics()["sync/total/episodes_reported"] - start < n:
        assert time.monotonic() < deadline, f"{n} episode reports not processed within 60 s"
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_a_restore_after_a_server_restart_counts_no_episode_lost_that_was_not():
    """Server 1 applies 20 episodes and is restarted on its port (server 2, a new curriculum); server 2
    applies 10 of the worker's episodes, then its checkpoint is taken and it is closed; server 3 restores
    that checkpoint. Every episode was applied before the checkpoint: none is lost to the restore."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with _playing(address) as (orders, done, servers):
        servers.append(serve(Numbered(0), address))
        orders.put(20)
        assert done.get(timeout=60) == 20
        _wait_reported(servers[-1], 20)
        servers[-1].close()
        servers.append(serve(Numbered(10**6), address))  # the same port, a new curriculum
        orders.put(10)
        assert done.get(timeout=60) == 10
        _wait_reported(servers[-1], 10)
        state = servers[-1].state_dict()  # the checkpoint: every episode so far applied
        servers[-1].close()
        servers.append(serve(Numbered(2 * 10**6), address))
        servers[-1].load_state_dict(state)
        start = servers[-1].metrics()["sync/total/episodes_reported"]
        orders.put(5)
        assert done.get(timeout=60) == 5
        _wait_reported(servers[-1], 5, start)
        m = servers[-1].metrics()
        assert m["sync/total/episodes_lost_to_restore"] == 0


def test_an_env_declared_gone_and_back_keeps_its_count_from_earlier_instances_for_a_later_restore():
    """An env that had reported 10 episodes to another instance joins, reports 3, is declared gone and
    comes back; the checkpoint is taken, it reports 2 more, and the server dies. The restored server counts
    those 2 lost to the restore: what it reported before joining is not taken for episodes the dead
    instance received (it once was, after the env's departure forgot that count)."""
    from magister.sync import protocol as P
    from magister.sync.core import SyncCore

    core = SyncCore(Numbered(0), env_timeout=None)
    env = core.register_env(P.Hello(1, rejoin=7, server="another instance", reported=10)).env_id
    tasks = core.apply(P.Report(env, request=3))
    for task_id, task in zip(tasks.task_ids, tasks.tasks):
        core.apply(P.Report(env, (P.EpisodeEnd(task_id, task, 1.0, 1, 1.0),)))
    core.depart(env, "timeout")
    assert core.register_env(P.Hello(1, rejoin=env, server=core.token, reported=13)).env_id == env
    restored = SyncCore(Numbered(0), env_timeout=None)
    restored.load_ledger(core.ledger_state())
    welcome = restored.register_env(P.Hello(1, rejoin=env, server=core.token, reported=15))
    assert welcome.env_id == env and welcome.resumed
    assert restored.counters(env).episodes_lost_to_restore == 2


@pytest.mark.timeout(120)
def test_a_returning_env_is_not_taken_for_the_env_another_instance_numbered_alike():
    """Server A applies 10 episodes of the worker (its env 0) and its checkpoint is taken; A is closed and a
    fresh server F on the port gives the worker env id 0 again and applies 20 more; F is closed and server R
    restores A's checkpoint. The worker comes back naming env 0 of F, not of A: R gives it a new slot
    instead of A's env 0, and counts none of F's 20 episodes lost to the restore."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with _playing(address) as (orders, done, servers):
        states = []
        for base, n in ((0, 10), (10**6, 20)):
            servers.append(serve(Numbered(base), address))
            orders.put(n)
            assert done.get(timeout=60) == n
            _wait_reported(servers[-1], n)
            states.append(servers[-1].state_dict())
            servers[-1].close()
        state = states[0]  # A's
        servers.append(serve(Numbered(2 * 10**6), address))
        servers[-1].load_state_dict(state)
        orders.put(5)
        assert done.get(timeout=60) == 5
        _wait_reported(servers[-1], 5, 10)  # (A's 10, restored)
        m = servers[-1].metrics()
        assert m["sync/total/episodes_lost_to_restore"] == 0
        assert (m["sync/env0/connected"], m["sync/env1/connected"]) == (0, 1)
        # (besides its 5, R gets F's last reports again, and those it played on tasks F sent ahead: F's
        # leases, which R counts orphaned)
        assert m["sync/env1/episodes_applied"] + m["sync/env1/reports_orphaned"] >= 5


@pytest.mark.timeout(120)
def test_a_restore_counts_no_episode_lost_that_the_dead_instance_never_received():
    """The worker plays 10 episodes, all applied, and the checkpoint is taken; the network is cut and it
    plays 2 more (its reports do not arrive); the server is closed and a new one restores the checkpoint on
    the same port; the network comes back and it plays 8 more. The 2 reports are sent again, on leases the
    restored server holds open: all 10 are applied by it, none is lost to the restore."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tcp_proxy import TcpProxy

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    address = f"tcp://127.0.0.1:{ports[0]}"
    # (the worker starts before the proxy listens: a forked child would hold its listening socket)
    with _playing(f"tcp://127.0.0.1:{ports[1]}") as (orders, done, servers):
        with TcpProxy("127.0.0.1", ports[0], ports[1]) as proxy:
            servers.append(serve(Numbered(0), address))
            orders.put(10)
            assert done.get(timeout=60) == 10
            _wait_reported(servers[-1], 10)
            state = servers[-1].state_dict()  # the checkpoint: every episode so far applied
            proxy.cut()
            orders.put(2)
            assert done.get(timeout=60) == 2
            servers[-1].close()
            servers.append(serve(Numbered(10**6), address))
            servers[-1].load_state_dict(state)
            start = servers[-1].metrics()["sync/total/episodes_applied"]
            proxy.restore()
            orders.put(8)  # (more than it holds: it asks the restored server for tasks)
            assert done.get(timeout=60) == 8

            def accounted(m):  # the reports it processed since the restore, whatever their outcome
                return (m["sync/total/episodes_applied"] - start + m["sync/total/reports_late"] +
                        m["sync/total/reports_orphaned"])
            deadline = time.monotonic() + 60
            while accounted(servers[-1].metrics()) < 10:
                assert time.monotonic() < deadline, "the 10 reports were not processed within 60 s"
                time.sleep(0.02)
            m = servers[-1].metrics()
            assert (m["sync/total/episodes_applied"] - start, m["sync/total/reports_late"],
                    m["sync/total/episodes_lost_to_restore"]) == (10, 0, 0)


@pytest.mark.timeout(60)
def test_a_first_connection_through_a_proxy_to_a_server_that_is_down_waits_its_timeout():
    """The proxy accepts each connection and resets it, as the server behind it is not up (as a tunnel, a
    load balancer or a NAT does): the client knows no more than that the server does not answer, so it
    raises :class:`ServerUnavailableError` after its ``timeout`` (and would connect, had the server come
    up meanwhile), not a :class:`SyncError` blaming CURVE keys after three reset handshakes."""
    from magister.sync.feed import ServerUnavailableError

    sys.path.insert(0, str(ROOT / "tests"))
    from tcp_proxy import TcpProxy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = s.getsockname()[1]  # nothing listens here
    with TcpProxy("127.0.0.1", down) as proxy:
        c = CurriculumClient(proxy.address, timeout=5.0)
        try:
            with pytest.raises(ServerUnavailableError):
                c.next_task()
        finally:
            c.close()


@pytest.mark.timeout(120)
def test_a_hello_lost_with_a_server_that_died_is_sent_to_the_next_one():
    """The server dies between answering the worker's report with ``unknown_env`` and answering the Hello
    that follows (the soak's learners SIGKILLed moments after they started serving). The moment is made
    here by a stand-in bound to the port, which answers every frame with ``unknown_env`` but the Hello, and
    closes once it has the Hello; then a real server serves on the port. The worker must register with it
    and play on, within its timeout (5 s)."""
    import zmq

    from magister.sync import protocol as P

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with _playing(address) as (orders, done, servers):
        servers.append(serve(Numbered(0), address))
        orders.put(3)
        assert done.get(timeout=60) == 3
        servers[-1].close()
        stand_in = zmq.Context.instance().socket(zmq.ROUTER)
        stand_in.setsockopt(zmq.LINGER, 0)
        stand_in.bind(address)
        orders.put(20)  # (more than it holds: it must talk to the server)
        while True:
            assert stand_in.poll(30_000), "the worker sent nothing within 30 s"
            identity, *frames = stand_in.recv_multipart()
            if P.unpack_envelope(frames[0]) is None and isinstance(P.decode(frames), P.Hello):
                break  # the Hello, never answered: the server dies here
            error = P.Error("unknown_env", "this server does not know this env; send Hello again")
            stand_in.send_multipart([identity, *P.encode(error)])
        stand_in.close(0)
        servers.append(_serve_when_free(Numbered(10**6), address))
        assert done.get(timeout=60) == 20
