"""Many envs in one process share one ZeroMQ connection per endpoint: thousands register and play on one
socket, one heartbeat keeps them all alive, and faults keep their meaning per env (a restarted server is
rejoined by each env, a silent process's envs are declared gone together and come back under their ids).

Counts are compared on both sides; every wait is bounded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from magister.curricula.base import Curriculum
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.sync.feed import CurriculumClient
from magister.sync.transports import zeromq
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(180)


class OneStep(gym.Env):
    """An episode of one step (reward: the task)."""

    observation_space = spaces.Box(0, 1e9, (1,), np.float32)
    action_space = spaces.Discrete(2)
    task = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.task], np.float32), {}

    def step(self, action):
        return np.array([self.task], np.float32), float(self.task), True, False, {}


class Task(TaskWrapper):
    def __init__(self, env):
        super().__init__(env, Discrete(100))

    def change_task(self, task):
        self.env.unwrapped.task = task


class Episodes(Curriculum):
    """Uniform over 100 tasks; records the env id of every episode, and the tasks abandoned."""

    def __init__(self) -> None:
        super().__init__(Discrete(100), seed=0)
        self.envs: list[int] = []
        self.abandoned: list[int] = []

    def sample(self, k: int = 1) -> list[int]:
        return [int(t) for t in self.rng.integers(100, size=k)]

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        self.envs.append(int(env_id))

    def on_task_abandoned(self, task, env_id=None) -> None:
        self.abandoned.append(int(env_id))


def _wait(pred, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _connections_to(address: str) -> int:
    """This process's ZeroMQ connections to ``address`` (the table also holds those of the process it was
    forked from, and those of other tests' feeds left open)."""
    return sum(1 for key in zeromq._connections if key[:2] == (os.getpid(), address))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _play_one_episode(env: GymnasiumSyncWrapper) -> None:
    env.reset()
    _, _, term, _, _ = env.step(0)
    assert term


def test_two_thousand_wrapped_envs_in_one_process_play_over_one_socket():
    """2,000 ``GymnasiumSyncWrapper`` envs in this process register over ipc and play one episode each:
    the curriculum gets 2,000 episodes, one from each env id; the process's open files and ZeroMQ sockets
    are the same with 2,000 envs as with 10."""
    cur = Episodes()
    with serve(cur) as server:
        envs = [GymnasiumSyncWrapper(Task(OneStep()), server.address, timeout=60.0) for _ in range(2000)]
        for env in envs[:10]:
            _play_one_episode(env)
        fds_10, connections_10 = _fds(), _connections_to(server.address)
        for env in envs[10:]:
            _play_one_episode(env)
        fds_2000, connections_2000 = _fds(), _connections_to(server.address)
        ids = [env.env_id for env in envs]
        for env in envs:
            env.close()
        m, departures = server.metrics(), dict(server.core.departures)
        left = _connections_to(server.address)
    assert connections_10 == connections_2000 == 1
    assert fds_2000 <= fds_10 + 2  # (a socket per env would add thousands)
    assert sorted(ids) == list(range(2000)) and sorted(cur.envs) == sorted(ids)
    assert m["sync/total/episodes_applied"] == 2000 == m["sync/total/episodes_reported"]
    assert m["sync/envs_live"] == 0 and departures == {"goodbye": 2000}
    assert m["sync/total/tasks_in_flight"] == 0 and m["sync/total/tasks_abandoned"] == 0
    assert left == 0  # the last env to close closed the socket


def test_one_heartbeat_keeps_every_idle_env_of_a_connection_alive():
    """Eight idle envs on one connection stay alive past ``env_timeout`` on one heartbeat per period for
    them all: eight heartbeats take at least seven periods (eight envs beating each would take one)."""
    with serve(Episodes(), env_timeout=1.0) as server:
        feeds = [CurriculumClient(server.address, timeout=10.0) for _ in range(8)]
        held = [f.next_task() for f in feeds]
        for f in feeds:
            f.flush()
        start, period = time.monotonic(), feeds[0].transport.heartbeat
        pings0 = sum(f.transport.pings for f in feeds)
        _wait(lambda: sum(f.transport.pings for f in feeds) >= pings0 + 8, 60, "eight heartbeats")
        elapsed = time.monotonic() - start
        assert server.metrics()["sync/envs_live"] == 8
        for f, a in zip(feeds, held):
            f.record_episode(a, 1.0, 1, 1.0)
            f.close()
        m, departures = server.metrics(), dict(server.core.departures)
    assert period == 0.25 and elapsed >= 7 * period
    assert m["sync/total/tasks_abandoned"] == 0 and m["sync/total/episodes_applied"] == 8
    assert departures == {"goodbye": 8} and sum(f.stats["rejoins"] for f in feeds) == 0


def _pausable_envs(address: str, n: int, out, resumed) -> None:
    """``n`` feeds on one connection: each holds a task, the process is paused, then each reports its
    episode on it (late: it was abandoned) and plays one more."""
    feeds = [CurriculumClient(address, timeout=10.0, prefetch=0) for _ in range(n)]
    held = [f.next_task() for f in feeds]
    out.put(("holding", [f.env_id for f in feeds], _connections_to(address)))
    assert resumed.wait(60)  # SIGSTOPped, then SIGCONTed, meanwhile
    for f, a in zip(feeds, held):
        f.record_episode(a, 7.0, 1, 1.0)
    for f in feeds:
        f.record_episode(f.next_task(), 8.0, 1, 1.0)
        f.flush()
    out.put(([f.env_id for f in feeds], [dict(f.stats) for f in feeds]))
    for f in feeds:
        f.close()


def test_a_silent_process_has_its_envs_declared_gone_together_and_each_rejoins_under_its_id():
    """SIGSTOP a forked worker holding four envs on one connection past ``env_timeout``: all four are
    declared gone (their tasks abandoned); resumed, each registers again under its own env id, its episode
    on the abandoned task is counted late, and the next one is applied; both sides count the same."""
    ctx = mp.get_context("fork")
    cur = Episodes()
    with serve(cur, env_timeout=1.0) as server:
        out, resumed = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_pausable_envs, args=(server.address, 4, out, resumed))
        p.start()
        what, before, connections = out.get(timeout=60)
        assert what == "holding" and connections == 1
        os.kill(p.pid, signal.SIGSTOP)
        _wait(lambda: server.metrics()["sync/envs_live"] == 0, 20, "the paused envs declared gone")
        gone, departures = server.metrics(), dict(server.core.departures)
        os.kill(p.pid, signal.SIGCONT)
        resumed.set()
        after, stats = out.get(timeout=60)
        p.join(30)
        assert p.exitcode == 0
        m = server.metrics()
    assert sorted(before) == [0, 1, 2, 3] and after == before  # back under their own ids
    assert departures == {"timeout": 4} and gone["sync/total/tasks_abandoned"] == 4
    assert sorted(cur.abandoned) == [0, 1, 2, 3]
    assert all(s["rejoins"] == 1 and s["errors_received"] == 0 for s in stats)
    assert m["sync/envs"] == 4 and m["sync/envs_rejoined"] == 4
    for env, s in zip(after, stats):
        assert m[f"sync/env{env}/episodes_reported"] == s["episodes_reported"] == 2
        assert m[f"sync/env{env}/reports_late"] == 1 and m[f"sync/env{env}/episodes_applied"] == 1
    assert sorted(cur.envs) == [0, 1, 2, 3]


# -- a server killed and restarted on the same port ---------------------------------------------------------


class Tally(Episodes):
    """Counts in shared arrays, by episode (its return names it), how often this learner applied it and
    under which env id."""

    def __init__(self, applied, owner) -> None:
        super().__init__()
        self.applied, self.owner = applied, owner

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None) -> None:
        with self.applied.get_lock():
            self.applied[int(episode_return)] += 1
            self.owner[int(episode_return)] = int(env_id)


def _tally_server(port: int, ready, applied, owner, orphaned) -> None:
    server = serve(Tally(applied, owner), f"tcp://127.0.0.1:{port}")
    ready.set()
    while True:  # (killed) its count of reports for the dead server's leases, shared
        orphaned.value = int(server.metrics()["sync/total/reports_orphaned"])
        time.sleep(0.05)


def _play_envs(address: str, n: int, episodes: int, out, started) -> None:
    """``n`` feeds on one connection play ``episodes`` each in turn (feed ``k``'s episode ``i`` has return
    ``100 * k + i``); then report their env ids, counts and connections, and close."""
    feeds = [CurriculumClient(address, timeout=1.0, prefetch=2) for _ in range(n)]
    for i in range(episodes):
        if i == 5:
            started.set()
        for k, f in enumerate(feeds):
            f.record_episode(f.next_task(), float(100 * k + i), 1, 1.0)
        time.sleep(0.02)
    for f in feeds:
        f.flush()
    out.put(([f.env_id for f in feeds], [dict(f.stats) for f in feeds], _connections_to(address)))
    for f in feeds:
        f.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_restarted_server_is_rejoined_by_every_env_of_a_connection_and_each_episode_counted_once():
    """The learner process is SIGKILLed while a worker plays four envs on one connection, and a new one
    starts on the same port: each env registers again on its own (its later episodes applied under its new
    env id), and every episode was applied by at most one learner, once, or counted orphaned."""
    ctx = mp.get_context("spawn")
    port, n, episodes = _free_port(), 4, 30
    first, second = ctx.Array("i", 100 * n), ctx.Array("i", 100 * n)
    owner, owner_first = ctx.Array("i", 100 * n), ctx.Array("i", 100 * n)
    orphaned, orphaned_first = ctx.Value("i", 0), ctx.Value("i", 0)
    ready, started, out = ctx.Event(), ctx.Event(), ctx.Queue()
    learner = ctx.Process(target=_tally_server, args=(port, ready, first, owner_first, orphaned_first))
    worker = ctx.Process(target=_play_envs, args=(f"tcp://127.0.0.1:{port}", n, episodes, out, started))
    restarted = None
    try:
        learner.start()
        assert ready.wait(60)
        worker.start()
        assert started.wait(60)
        os.kill(learner.pid, signal.SIGKILL)
        learner.join(10)
        ready.clear()
        restarted = ctx.Process(target=_tally_server, args=(port, ready, second, owner, orphaned))
        restarted.start()
        assert ready.wait(60)
        ids, stats, connections = out.get(timeout=120)
        worker.join(30)
        assert worker.exitcode == 0
        _wait(lambda: sum(first) + sum(second) + orphaned.value >= n * episodes, 30, "the last reports")
    finally:
        for p in (learner, restarted, worker):
            if p is not None and p.is_alive():
                p.kill()
                p.join(10)
    assert connections == 1 and len(set(ids)) == n
    assert all(s["rejoins"] == 1 and s["errors_received"] == 0 for s in stats)
    assert all(s["updates_dropped"] == 0 and s["episodes_reported"] == episodes for s in stats)
    played = [100 * k + i for k in range(n) for i in range(episodes)]
    a1, a2 = [first[e] for e in played], [second[e] for e in played]
    assert max(a1) <= 1 and max(a2) <= 1 and not any(x and y for x, y in zip(a1, a2))
    assert 0 < sum(a1) and 0 < sum(a2)
    assert n * episodes - sum(a1) - sum(a2) <= orphaned.value  # the rest were counted orphaned
    for k, env in enumerate(ids):  # the second learner applied each env's episodes under its own id
        assert {owner[100 * k + i] for i in range(episodes) if second[100 * k + i]} == {env}


def test_the_replies_waiting_for_the_envs_of_one_socket_are_never_dropped():
    """3,000 envs on one socket each ask for a task and do not read it yet: every reply waits in the socket's
    queue, none dropped by the server for a full queue (with ZeroMQ's default limit, 1,000 messages a side,
    a third were dropped and their envs had to ask the server to send them again)."""
    with serve(Episodes()) as server:
        feeds = [CurriculumClient(server.address, timeout=60.0, prefetch=0) for _ in range(3000)]
        tasks = [feed.next_task() for feed in feeds]  # (each registers, asks and reads)
        before = server.metrics()["sync/total/tasks_sent"]
        for feed, task in zip(feeds, tasks):
            feed.record_episode(task, 1.0, 1, 0.0)  # (asks for the next task; nobody reads for a while)
        _wait(lambda: server.metrics()["sync/total/tasks_sent"] == before + 3000, 60, "the 3,000 replies")
        assert server.metrics()["sync/replies_undelivered"] == 0
        for feed in feeds:
            feed.close()
        m = server.metrics()
    assert m["sync/replies_undelivered"] == 0 and m["sync/errors_sent"] == 0  # (resends: slow acks)
    assert m["sync/total/episodes_applied"] == 3000 and m["sync/total/tasks_in_flight"] == 0
    assert m["sync/total/tasks_returned"] == 3000 and m["sync/envs_live"] == 0
