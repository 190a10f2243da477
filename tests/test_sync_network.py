"""The sync layer under real network faults: a TCP proxy cut and restored, a server killed and restarted on
the same port, workers killed and replaced under ``max_envs``, envs silent past ``env_timeout``.

Counts are compared on both sides afterwards; every wait is bounded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import threading
import time

import pytest
from tcp_proxy import TcpProxy

from magister.checkpoint import CheckpointError
from magister.curricula.base import Curriculum
from magister.sync import protocol as P
from magister.sync.feed import CurriculumClient, ServerUnavailableError
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete


class Counting(Curriculum):
    """Uniform over 50 tasks; records episodes and abandoned tasks."""

    def __init__(self) -> None:
        super().__init__(Discrete(50), seed=0)
        self.episodes: list[tuple[int, float]] = []
        self.abandoned: list[tuple[int, int]] = []

    def sample(self, k: int = 1) -> list[int]:
        return [int(t) for t in self.rng.integers(50, size=k)]

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        self.episodes.append((int(task), float(episode_return)))

    def on_task_abandoned(self, task, env_id=None) -> None:
        self.abandoned.append((int(task), int(env_id)))


def _wait(pred, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _play(address: str, episodes: int, pause: float, out, started=None, tag=0, **kw) -> None:
    """A worker: play ``episodes`` episodes (``pause`` s each; episode ``i`` has return ``tag + i``), then
    report its counts and close."""
    c = CurriculumClient(address, **{"timeout": 20.0, **kw})
    for i in range(episodes):
        if i == 5 and started is not None:
            started.set()
        a = c.next_task()
        time.sleep(pause)
        c.record_episode(a, float(tag + i), 1, 1.0)
    c.flush()
    stats = dict(c.stats)
    t = c.transport
    stats.update(resent=t.resent, pings=t.pings, rejoins=t.rejoins)
    c.close()
    out.put(stats)


def _workers_behind_a_proxy(server, episodes: int, pause: float):
    """Two forked workers that will play ``episodes`` each through a TCP proxy to ``server`` (not started:
    the caller opens it, after the fork, so that they do not hold its socket)."""
    ctx = mp.get_context("fork")
    port = int(server.address.rsplit(":", 1)[1])
    proxy_port = _free_port()
    out = ctx.Queue()
    address = f"tcp://127.0.0.1:{proxy_port}"
    workers = [
        ctx.Process(target=_play, args=(address, episodes, pause, out), kwargs={"max_update_delay": 0.05})
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    return out, workers, port, proxy_port


def test_a_cut_network_loses_no_update_and_counts_none_twice():
    """Two worker processes play through a TCP proxy that is cut (connections reset, bytes in flight lost)
    for 0.2 s five times: both finish, and the server applied exactly the episodes they played."""
    with serve(Counting(), "tcp://127.0.0.1:*") as server:
        out, workers, port, proxy_port = _workers_behind_a_proxy(server, 400, 0.002)
        with TcpProxy("127.0.0.1", port, proxy_port) as proxy:
            _wait(lambda: server.metrics()["sync/total/episodes_applied"] > 20, what="first episodes")
            for _ in range(5):
                proxy.cut()
                time.sleep(0.2)
                proxy.restore()
                time.sleep(0.15)
            stats = [out.get(timeout=60) for _ in workers]
            for w in workers:
                w.join(10)
                assert w.exitcode == 0
            assert proxy.cuts == 5 and proxy.connections >= 2 + 2  # the workers reconnected
    m = server.metrics()
    assert len(server.curriculum.episodes) == 800 == m["sync/total/episodes_applied"]
    assert m["sync/total/updates_received"] == sum(s["updates_sent"] for s in stats) + 2  # + the goodbyes
    assert m["sync/total/updates_applied"] == m["sync/total/updates_received"]
    assert m["sync/total/updates_rejected"] == 0 and sum(s["errors_received"] for s in stats) == 0
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sent"]
    assert m["sync/total/tasks_in_flight"] == 0 and m["sync/total/tasks_abandoned"] == 0
    assert sum(s["rejoins"] for s in stats) == 0  # the server never forgot them: no re-registration


def _server_process(port: int, ready, env_timeout: float) -> None:
    server = serve(Counting(), f"tcp://127.0.0.1:{port}", env_timeout=env_timeout)
    ready.set()
    time.sleep(600)  # killed long before
    server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Unique(Counting):
    """Every task it hands out is a new one: a task names its lease."""

    def __init__(self) -> None:
        Curriculum.__init__(self, Discrete(10**6), seed=0)
        self.episodes, self.abandoned, self.next = [], [], 0

    def sample(self, k: int = 1) -> list[int]:
        self.next += k
        return list(range(self.next - k, self.next))


def test_a_partition_longer_than_env_timeout_gives_each_lease_one_outcome():
    """Two workers play through a TCP proxy cut twice for 2.5 s, longer than the server's ``env_timeout``:
    each is declared gone (its leases abandoned) and comes back under its identity. Every lease has one
    outcome: no task applied twice, none both applied and abandoned, and each played episode is either
    applied or counted as late."""
    cur = Unique()
    with serve(cur, "tcp://127.0.0.1:*", env_timeout=1.0) as server:
        out, workers, port, proxy_port = _workers_behind_a_proxy(server, 300, 0.005)
        with TcpProxy("127.0.0.1", port, proxy_port) as proxy:
            for _ in range(2):
                seen = server.metrics()["sync/total/episodes_applied"] + 20
                _wait(lambda s=seen: server.metrics()["sync/total/episodes_applied"] > s, what="episodes")
                proxy.cut()
                _wait(lambda: server.metrics()["sync/envs_live"] == 0, 30, "both declared gone")
                time.sleep(0.5)
                proxy.restore()
            stats = [out.get(timeout=60) for _ in workers]
            for w in workers:
                w.join(10)
                assert w.exitcode == 0
    m = server.metrics()
    applied, abandoned = [t for t, _ in cur.episodes], [t for t, _ in cur.abandoned]
    assert len(applied) == len(set(applied)) and not set(applied) & set(abandoned)
    assert len(abandoned) == len(set(abandoned)) == m["sync/total/tasks_abandoned"] > 0
    assert m["sync/total/episodes_applied"] + m["sync/total/reports_late"] == 600
    assert m["sync/envs"] == 2 and m["sync/envs_rejoined"] >= 2  # the same two envs came back
    assert sum(s["errors_received"] for s in stats) == 0


class Ledgered(Unique):
    """A :class:`Unique` whose checkpoints hold the episodes it applied and the tasks it was told were
    abandoned."""

    def state_dict(self):
        return {**super().state_dict(), "next": self.next, "applied": [t for t, _ in self.episodes],
                "gone": [t for t, _ in self.abandoned]}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.next = state["next"]
        self.episodes = [(t, 0.0) for t in state["applied"]]
        self.abandoned = [(t, -1) for t in state["gone"]]


def _checkpointing_server(port: int, ready, folder: str, restore: bool) -> None:
    import json

    import magister

    server = serve(Ledgered(), f"tcp://127.0.0.1:{port}", env_timeout=30.0)
    if restore:
        server.load_state_dict(magister.load(f"{folder}/ckpt"))
    ready.set()
    while True:  # (killed) a checkpoint every 0.2 s, and the counts next to it
        magister.save(f"{folder}/ckpt", server.state_dict())
        with open(f"{folder}/metrics.tmp", "w") as f:
            json.dump(server.metrics(), f)
        os.replace(f"{folder}/metrics.tmp", f"{folder}/metrics.json")
        time.sleep(0.2)


def test_a_learner_restored_from_its_checkpoint_under_live_workers_applies_each_episode_once(tmp_path):
    """The learner writes a checkpoint every 0.2 s, is SIGKILLed, and a new one restores the last checkpoint
    (curriculum and ledger) on the same port while two workers play on. The workers come back under their
    identities; no episode is applied twice; every played episode is in the restored curriculum or
    counted: lost to the restore (applied by the dead learner after its checkpoint) or orphaned (on a
    lease it handed out after it)."""
    import json

    import magister

    def ledger():
        """The last checkpoint and the counts written after it (None while a file is being replaced)."""
        try:
            return magister.load(str(tmp_path / "ckpt")), json.loads((tmp_path / "metrics.json").read_text())
        except (OSError, ValueError, CheckpointError):
            return None

    def settled():  # a checkpoint that accounts for every played episode (or more: asserted below)
        got = ledger()
        return got is not None and len(got[0]["applied"]) + sum(
            got[1][f"sync/total/{k}"] for k in ("episodes_lost_to_restore", "reports_orphaned")) >= 400

    folder = str(tmp_path)
    stats = _kill_and_restart_the_learner(_checkpointing_server, (folder, False), (folder, True), 200, 0.005,
                                          playing_s=0.5, timeout=2.0,
                                          after=lambda: _wait(settled, 20, "a checkpoint of the last report"))
    state, m = ledger()
    applied = state["applied"]
    assert all(s["rejoins"] == 1 and s["errors_received"] == 0 for s in stats)
    assert len(applied) == len(set(applied)) and not set(applied) & set(state["gone"])
    lost, orphaned = m["sync/total/episodes_lost_to_restore"], m["sync/total/reports_orphaned"]
    assert len(applied) + lost + orphaned == 400
    assert m["sync/envs"] == 2  # the two workers, back under their identities


def test_a_server_killed_and_restarted_on_the_same_port_is_rejoined():
    """The server process is SIGKILLed mid-run and a new one starts on the same port: the workers register
    again (the tasks they held are played and reported as their own) and finish without an error."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    ready = ctx.Event()
    first = ctx.Process(target=_server_process, args=(port, ready, 60.0))
    first.start()
    assert ready.wait(60)
    out = ctx.Queue()
    started = [ctx.Event() for _ in range(2)]
    workers = [
        ctx.Process(target=_play, args=(f"tcp://127.0.0.1:{port}", 150, 0.01, out, e)) for e in started
    ]
    for w in workers:
        w.start()
    for e in started:  # both play on the first server
        assert e.wait(60)
    os.kill(first.pid, signal.SIGKILL)
    first.join(10)
    ready.clear()
    second = ctx.Process(target=_server_process, args=(port, ready, 60.0))
    second.start()
    try:
        assert ready.wait(60)
        stats = [out.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(20)
            assert w.exitcode == 0
    finally:
        second.kill()
        second.join(10)
    assert all(s["rejoins"] == 1 for s in stats)
    assert all(s["errors_received"] == 0 for s in stats)


def _kill_and_restart_the_learner(server, first_args: tuple, second_args: tuple, episodes: int, pause: float,
                                  playing_s: float = 0.0, down_s: float = 0.0, after=None, tagged=False,
                                  **worker_options) -> list[dict]:
    """Run the learner process ``server(port, ready, *first_args)`` and two workers playing ``episodes``
    on it (``tagged``: worker ``w``'s episode returns start at ``100 * w``); ``playing_s`` after both play,
    SIGKILL the learner, and ``down_s`` later start ``server(port, ready, *second_args)`` on the same port.
    Returns the workers' counts once both finished (exit code 0) and ``after()`` returned (a wait for the
    second learner's last counts); every process is gone on return."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    ready = ctx.Event()
    first = ctx.Process(target=server, args=(port, ready, *first_args))
    first.start()
    assert ready.wait(60)
    out = ctx.Queue()
    started = [ctx.Event() for _ in range(2)]
    workers = [ctx.Process(target=_play, args=(f"tcp://127.0.0.1:{port}", episodes, pause, out, e),
                           kwargs={"tag": 100 * w if tagged else 0, **worker_options})
               for w, e in enumerate(started)]
    second = None
    try:
        for w in workers:
            w.start()
        for e in started:
            assert e.wait(60)
        time.sleep(playing_s)
        os.kill(first.pid, signal.SIGKILL)
        first.join(10)
        time.sleep(down_s)
        ready.clear()
        second = ctx.Process(target=server, args=(port, ready, *second_args))
        second.start()
        assert ready.wait(60)
        stats = [out.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(20)
            assert w.exitcode == 0
        if after is not None:
            after()
    finally:
        for p in (first, second, *workers):
            if p is not None and p.is_alive():
                p.kill()
                p.join(10)
    return stats


class Tally(Counting):
    """Counts, per episode (its return names it), how often this learner applied it, in a shared array that
    outlives a killed server process."""

    def __init__(self, applied) -> None:
        super().__init__()
        self.applied = applied

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        with self.applied.get_lock():
            self.applied[int(episode_return)] += 1


def _tally_server(port: int, ready, applied, orphaned) -> None:
    server = serve(Tally(applied), f"tcp://127.0.0.1:{port}")
    ready.set()
    while True:  # (killed) its count of reports for the dead server's leases, shared
        orphaned.value = int(server.metrics()["sync/total/reports_orphaned"])
        time.sleep(0.05)


def test_workers_wait_for_a_learner_down_far_longer_than_their_timeout():
    """The learner process is SIGKILLed and a new one starts on the same port 8 s later, eight times the
    workers' ``timeout``: the workers keep trying (``reconnect_timeout``), register again, finish without
    an error, and every episode they played was applied once or counted: reports for leases of the killed
    learner (which kept no checkpoint) are dropped and counted as orphaned by the new one."""
    ctx = mp.get_context("spawn")
    n = 40  # episodes per worker; worker w's episode i has return 100 * w + i
    first, second = ctx.Array("i", 200), ctx.Array("i", 200)
    orphaned_first, orphaned = ctx.Value("i", 0), ctx.Value("i", 0)
    stats = _kill_and_restart_the_learner(_tally_server, (first, orphaned_first), (second, orphaned), n, 0.01,
                                          down_s=8.0, timeout=1.0, prefetch=2, tagged=True,
                                          after=lambda: _wait(lambda: sum(second) + orphaned.value >= 2 * n
                                                              - sum(first), 20, "the last reports"))
    assert all(s["rejoins"] == 1 and s["errors_received"] == 0 for s in stats)
    assert all(s["updates_dropped"] == 0 and s["updates_sent"] == n for s in stats)
    played = [100 * w + i for w in range(2) for i in range(n)]
    a1, a2 = [first[e] for e in played], [second[e] for e in played]
    assert max(a1) <= 1 and max(a2) <= 1  # no learner applied an episode twice ...
    assert not any(x and y for x, y in zip(a1, a2))  # ... nor did both learners apply one
    assert orphaned_first.value == 0 and 0 < sum(a1) and 0 < sum(a2)
    unapplied = 2 * n - sum(a1) - sum(a2)
    # every episode applied by neither learner was counted orphaned by the second (whose orphans it never
    # applied); the rest of its orphans are reports the first learner applied but never acknowledged
    assert unapplied <= orphaned.value <= 2 * n - sum(a2)


class SlowToSample(Counting):
    """Takes ``seconds`` to sample (a curriculum refitting, on a loaded machine)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def sample(self, k: int = 1) -> list[int]:
        time.sleep(self.seconds)
        return super().sample(k)


def test_a_wait_for_tasks_that_spans_a_new_learner_gives_its_request_the_whole_timeout():
    """An env waits for a task (``timeout`` 3 s) from a learner that is gone; a new one starts on the port
    2 s into the wait and takes 1.5 s to sample. The env registers with it and its request, made then, is
    answered within its ``timeout``: the env gets its task (it used to give up at the first wait's end,
    the new learner having been heard within the timeout)."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    first = serve(Counting(), address)
    c = CurriculumClient(address, prefetch=0, timeout=3.0, max_update_delay=0)
    try:
        played = c.next_task()
        assert len(first.in_flight(c.env_id)) == 1  # (nothing asked ahead)
        first.close()
        c.record_episode(played, 1.0, 1, 1.0, refill=False)
        started: list = []
        later = threading.Timer(2.0, lambda: started.append(serve(SlowToSample(1.5), address)))
        later.start()
        try:
            a = c.next_task()
            later.join(30)
            assert c.stats["rejoins"] == 1 and a.task_id in started[0].in_flight(c.env_id)
        finally:
            later.join(30)
            for server in started:
                server.close()
    finally:
        c.close()


def _hold_and_hang(address: str, ready, env_timeout_hint: float) -> None:
    c = CurriculumClient(address, prefetch=2, timeout=10.0)
    c.next_task()  # plays it forever
    c.flush()
    ready.set()
    time.sleep(600)


def test_churn_under_max_envs_frees_every_slot_and_reclaims_every_task():
    """100 workers, at most 4 live at once, each SIGKILLed while holding tasks: each is declared gone after
    ``env_timeout``, its tasks are reported abandoned, its slot and state freed, so the next ones are
    served; nothing of a gone env is kept but (a bounded number of) its counters."""
    ctx = mp.get_context("fork")
    cur = Counting()
    # (env_timeout leaves a loaded machine's heartbeats a second: a live worker is never declared gone)
    with serve(cur, max_envs=4, env_timeout=1.0, keep_departed=8) as server:
        killed = 0
        while killed < 100:
            events = [ctx.Event() for _ in range(4)]
            procs = [ctx.Process(target=_hold_and_hang, args=(server.address, e, 1.0)) for e in events]
            try:
                for p in procs:
                    p.start()
                for e in events:
                    assert e.wait(30)
                assert server.metrics()["sync/envs_live"] == 4
            finally:  # (a failed check must not leave workers sleeping: the test run would wait on them)
                for p in procs:
                    if p.pid is not None:
                        os.kill(p.pid, signal.SIGKILL)
                        p.join(10)
                        killed += 1
            _wait(lambda: server.metrics()["sync/envs_live"] == 0, 10, "the killed envs declared gone")
        m = server.metrics()
        # (a worker whose heartbeats a loaded machine delays past env_timeout is declared gone and comes
        # back under its identity: still 100 envs)
        assert m["sync/envs"] == 100 == m["sync/envs_departed"]
        sent = m["sync/total/tasks_sent"]
        assert sent == m["sync/total/tasks_abandoned"] == len(cur.abandoned) and sent >= 100
        assert m["sync/total/tasks_in_flight"] == 0
        core = server.core
        assert core.live_envs == 0 and len(core.env_ids) == 8 and not core._keys  # (no index left to prune)
        assert not any(env.leases or env.contact for env in core._envs.values())
        # a fresh worker is served at once
        c = CurriculumClient(server.address, timeout=5.0)
        a = c.next_task()
        c.record_episode(a, 1.0, 1, 1.0)
        c.close()
    assert cur.episodes == [(a.task, 1.0)]


def test_max_envs_bounds_live_envs_not_history():
    with serve(Counting(), max_envs=5) as server:
        for _ in range(5):
            c = CurriculumClient(server.address, timeout=5.0)
            c.record_episode(c.next_task(), 1.0, 1, 1.0)
            c.close()
        sixth = CurriculumClient(server.address, timeout=5.0)
        sixth.record_episode(sixth.next_task(), 1.0, 1, 1.0)  # refused too_many_envs before
        sixth.close()
        m = server.metrics()
        assert m["sync/envs"] == 6 and m["sync/envs_live"] == 0 and m["sync/total/episodes_applied"] == 6


def test_an_idle_env_stays_alive_by_its_heartbeats():
    """An env that plays nothing for well over ``env_timeout`` is not declared gone: its process's background
    thread sends heartbeats (every ``env_timeout / 4``; eight of them span twice ``env_timeout``)."""
    with serve(Counting(), env_timeout=2.0) as server:
        c = CurriculumClient(server.address, timeout=5.0)
        a = c.next_task()
        pings = c.transport.pings
        _wait(lambda: c.transport.pings >= pings + 8, 60, "eight heartbeats")
        assert server.metrics()["sync/envs_live"] == 1
        c.record_episode(a, 1.0, 1, 1.0)
        c.close()
        m = server.metrics()
        assert m["sync/total/tasks_abandoned"] == 0 and m["sync/envs_departed"] == 1  # by its goodbye
        assert c.stats["rejoins"] == 0 and m["sync/total/episodes_applied"] == 1


def _pausable(address: str, out, resumed) -> None:
    # (no prefetch: its next task must come from the server, which tells it it was declared gone)
    c = CurriculumClient(address, timeout=10.0, prefetch=0)
    a = c.next_task()
    out.put("holding")
    assert resumed.wait(60)  # SIGSTOPped, then SIGCONTed, meanwhile
    c.record_episode(a, 7.0, 1, 1.0)  # a task of its previous registration
    b = c.next_task()
    c.record_episode(b, 8.0, 1, 1.0)
    c.flush()
    out.put((c.stats["rejoins"], c.stats["errors_received"], a.task, b.task))
    c.close()


@pytest.mark.parametrize("full", [False, True])
def test_a_paused_env_declared_gone_rejoins_under_its_identity_and_each_lease_has_one_outcome(full):
    """SIGSTOP a worker past ``env_timeout``: it is declared gone (its tasks abandoned, once each);
    resumed, it registers again under the same env id (``full``: even though a newcomer took the only
    slot meanwhile, ``max_envs=1``), its episode on the abandoned task is dropped and counted as late
    (never both abandoned and applied), and the episodes after it are applied."""
    ctx = mp.get_context("fork")
    cur = Counting()
    with serve(cur, env_timeout=1.0, max_envs=1 if full else 8) as server:
        out, resumed = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_pausable, args=(server.address, out, resumed))
        p.start()
        assert out.get(timeout=30) == "holding"
        os.kill(p.pid, signal.SIGSTOP)
        _wait(lambda: server.metrics()["sync/envs_live"] == 0, 10, "the paused env declared gone")
        abandoned = server.metrics()["sync/total/tasks_abandoned"]
        newcomer = CurriculumClient(server.address, timeout=5.0) if full else None
        if newcomer is not None:
            newcomer.next_task()  # the slot is taken
        os.kill(p.pid, signal.SIGCONT)
        resumed.set()
        rejoins, errors, task_a, task_b = out.get(timeout=30)
        p.join(10)
        assert p.exitcode == 0
        m = server.metrics()
        if newcomer is not None:
            newcomer.close()
    assert rejoins == 1 and errors == 0 and abandoned >= 1 == m["sync/total/reports_late"]
    assert m["sync/envs"] == 1 + full and m["sync/envs_rejoined"] == 1  # env 0, back under its id
    assert m["sync/env0/episodes_applied"] == 1 and m["sync/env0/tasks_abandoned"] == abandoned
    assert (task_a, 7.0) not in cur.episodes and (task_b, 8.0) in cur.episodes
    assert len([env for _, env in cur.abandoned if env == 0]) == abandoned  # once each


def _closes_after_a_pause(address: str, out, resumed) -> None:
    c = CurriculumClient(address, timeout=10.0, max_update_delay=60.0)  # (the episode is held)
    a = c.next_task()
    out.put("holding")
    assert resumed.wait(60)  # SIGSTOPped, then SIGCONTed, meanwhile
    c.record_episode(a, 7.0, 1, 1.0, refill=False)  # asks for nothing: the server is first heard at close
    c.close()
    out.put((dict(c.stats), a.task))


def test_a_paused_env_declared_gone_that_closes_at_once_still_has_its_last_reports_counted():
    """SIGSTOP a worker past ``env_timeout`` (declared gone); resumed, it closes without asking for anything,
    its last episode going out with the close: the server answers that it no longer knows the env, and the
    closing feed registers again, so that the episode is counted (late: its lease was abandoned) and the
    goodbye acknowledged. Both sides count the same episodes reported."""
    ctx = mp.get_context("fork")
    cur = Counting()
    with serve(cur, env_timeout=1.0) as server:
        out, resumed = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_closes_after_a_pause, args=(server.address, out, resumed))
        p.start()
        assert out.get(timeout=30) == "holding"
        os.kill(p.pid, signal.SIGSTOP)
        _wait(lambda: server.metrics()["sync/envs_live"] == 0, 10, "the paused env declared gone")
        abandoned = server.metrics()["sync/env0/tasks_abandoned"]
        os.kill(p.pid, signal.SIGCONT)
        resumed.set()
        stats, task = out.get(timeout=30)
        p.join(10)
        assert p.exitcode == 0
        m = server.metrics()
    assert stats["rejoins"] == 1 and stats["errors_received"] == 0 and abandoned >= 1
    assert m["sync/env0/episodes_reported"] == stats["episodes_reported"] == 1 == m["sync/env0/reports_late"]
    assert m["sync/envs"] == 1 and m["sync/envs_live"] == 0 and m["sync/envs_rejoined"] == 1
    assert m["sync/env0/tasks_abandoned"] == abandoned and m["sync/env0/tasks_in_flight"] == 0
    assert (task, 7.0) not in cur.episodes and m["sync/env0/updates_rejected"] == 0


def test_close_is_bounded_by_close_timeout_when_the_server_is_gone():
    server = serve(Counting(), "tcp://127.0.0.1:*")
    c = CurriculumClient(server.address, timeout=5.0, close_timeout=3.0, prefetch=0)
    a = c.next_task()
    server.close()
    c.record_episode(a, 1.0, 1, 1.0)  # held, and never acknowledged
    t0 = time.monotonic()
    c.close()
    took = time.monotonic() - t0
    # one close_timeout: it waited for the acknowledgement that never came, and no second one (it was two,
    # plus the socket's linger); the margin leaves a loaded machine three seconds
    assert 2.9 <= took < 6.0, took


def test_envelope_frames_are_validated():
    with pytest.raises(P.ProtocolError, match="envelope"):
        P.unpack_envelope(P.ENVELOPE_MAGIC + b"\x00" * 3)
    with pytest.raises(P.ProtocolError, match="kind"):
        P.unpack_envelope(P.pack_envelope(7, 1, 1))
    assert P.unpack_envelope(P.pack_envelope(P.PING, 3, 2)) == (P.PING, 3, 2)


def test_a_stream_says_what_to_send_back_for_each_envelope():
    """Each side's answer: a gap is reported (PING from the env, PONG from the server), a PING is answered
    with every unacknowledged reply and a PONG, a PONG with every unacknowledged message; acks free both."""
    env, server = P.Stream(8, pings=True), P.Stream(8)
    sent = [env.number([f"m{i}".encode()]) for i in range(3)]
    assert server.answer(*P.unpack_envelope(sent[1][0])) == ("gap", [], P.PONG)
    assert server.answer(*P.unpack_envelope(sent[2][0])) == ("ahead", [], None)  # the gap is reported once
    assert server.answer(*P.unpack_envelope(sent[0][0])) == ("deliver", [], None)
    assert server.answer(*P.unpack_envelope(sent[0][0])) == ("repeat", [], None)
    replies = [server.number([f"r{i}".encode()]) for i in range(2)]
    assert env.answer(*P.unpack_envelope(replies[1][0])) == ("gap", [], P.PING)
    verdict, resend, control = server.answer(*P.unpack_envelope(env.control(P.PING)))
    assert (verdict, resend, control) == ("control", replies, P.PONG)  # every reply the env has not acked
    verdict, resend, control = env.answer(*P.unpack_envelope(server.control(P.PONG)))
    assert (verdict, control) == ("control", None)
    assert resend == sent[1:]  # the server acknowledged the first message only
    with pytest.raises(P.ProtocolError, match="PONG"):
        server.answer(*P.unpack_envelope(env.control(P.PONG)))


def test_an_unreachable_server_raises_after_the_timeout_saying_what_was_tried():
    server = serve(Counting(), "tcp://127.0.0.1:*")
    c = CurriculumClient(server.address, timeout=1.0, reconnect_timeout=2.0, close_timeout=0.1, prefetch=0)
    a = c.next_task()
    server.close()
    c.record_episode(a, 1.0, 1, 1.0, refill=False)
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailableError, match=r"within 1s while waiting for tasks \(kept trying for "
                       r"reconnect_timeout=2s\) \(tried: reconnect"):
        c.next_task()
    assert 2.0 <= time.monotonic() - t0 < 10.0
    c.close()


def test_the_fault_proxy_doctest():
    """The proxy left the installed package (it is a test helper); its own example still runs here."""
    import doctest

    import tcp_proxy

    assert doctest.testmod(tcp_proxy).failed == 0
