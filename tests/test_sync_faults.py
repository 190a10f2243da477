"""Faults: killed workers, malformed/hostile frames, wrong versions, bad tasks, NaN feedback, no server."""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import signal
import threading
import time

import msgpack
import numpy as np
import pytest
import wire as W
import zmq
import zmq.utils.monitor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magister.curricula.base import Curriculum
from magister.sync import protocol as P
from magister.sync.core import SyncRejected
from magister.sync.feed import CurriculumClient, ServerUnavailableError, SyncError
from magister.sync.options import FeedOptions
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(60)


class Recorder(Curriculum):
    requires_step_updates = True

    def __init__(self, n: int = 1000) -> None:
        super().__init__(Discrete(n))
        self.next = 0
        self.calls: list[tuple] = []

    def sample(self, k=1):
        out = [(self.next + i) % self.task_space.num_tasks for i in range(k)]
        self.next += k
        return out

    def update_on_step_batch(self, batch, env_id=None):
        self.calls.append(("steps", list(batch.tasks), batch.rewards.tolist()))

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.calls.append(("episode", task, episode_return))

    def update_task_progress(self, task, progress, env_id=None):
        self.calls.append(("progress", task, progress))


_OPENED: list = []  # raw sockets made by the tests, closed by their fixture


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    while _OPENED:
        _OPENED.pop().close(0)
    c.term()


def _raw(ctx, address, kind=zmq.DEALER):
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    if kind == zmq.DEALER:
        s.connect(address)
    _OPENED.append(s)
    return s


def _ask(sock, frames, timeout_ms=5000) -> P.Message:
    sock.send_multipart(frames)
    assert sock.poll(timeout_ms), "no reply from the server"
    return P.decode(sock.recv_multipart())


def _hello(sock) -> int:
    welcome = _ask(sock, P.encode(P.Hello(os.getpid(), "raw")))
    assert isinstance(welcome, P.Welcome)
    return welcome.env_id


def _tasks(sock, env_id, n=1) -> P.Tasks:
    tasks = _ask(sock, P.encode(W.request(env_id, n)))
    assert isinstance(tasks, P.Tasks) and tasks.env_id == env_id
    return tasks


def _still_serving(server):
    c = CurriculumClient(server.address, prefetch=0, timeout=5.0)
    a = c.next_task()
    c.record_episode(a, 1.0, 1, 1.0)
    c.close()


# -- malformed frames and invalid updates ------------------------------------------------------------------


@pytest.mark.parametrize(
    "frames",
    [
        [b""],
        [b"\xc1garbage"],
        [msgpack.packb((P.PROTOCOL_VERSION, 3))],
        [msgpack.packb((P.PROTOCOL_VERSION, 77, ()))],
        [msgpack.packb((P.PROTOCOL_VERSION, 3, ("x", 1)))],
        P.encode(W.request(0, 1)),
    ],  # the last: no hello first
)
def test_malformed_frames_get_an_error_reply_and_are_counted(ctx, frames):
    with serve(Recorder()) as server:
        sock = _raw(ctx, server.address)
        reply = _ask(sock, frames)
        assert isinstance(reply, P.Error) and reply.code in ("malformed", "unknown_env")
        m = server.metrics()
        assert m["sync/malformed_frames_unattributed"] == 1 and server.curriculum.calls == []
        _still_serving(server)


def test_a_ping_from_a_peer_the_server_no_longer_knows_asks_it_to_say_hello_and_is_not_malformed(ctx):
    """An env's ping after its goodbye (or to a restarted server) is a well-formed frame of a peer that said
    hello before: it is answered ``unknown_env`` and not counted malformed."""
    with serve(Recorder()) as server:
        sock = _raw(ctx, server.address)
        env = _hello(sock)
        assert isinstance(_ask(sock, P.encode(P.Goodbye(env))), P.Goodbye)
        sock.send(P.pack_envelope(P.PING, 0, 0))
        assert sock.poll(5000), "no reply from the server"
        reply = P.decode(sock.recv_multipart())
        assert isinstance(reply, P.Error) and reply.code == "unknown_env"
        assert server.metrics()["sync/malformed_frames_unattributed"] == 0


def test_a_goodbye_sent_again_across_its_ack_is_dropped_as_a_repeat_not_refused(ctx):
    """An env that pinged while waiting for its tasks can read the PONG after its goodbye went out, and the
    PONG's ack predates the goodbye, so it sends the goodbye again: the server, which applied the first and
    forgot the env, drops the copy as a repeat without an error reply (a leave of 10,000 envs from one
    process counted 8,000 error replies)."""
    with serve(Recorder()) as server:
        sock = _raw(ctx, server.address)
        env = _hello(sock)
        goodbye = P.Stream(8, pings=True).number(P.encode(P.Goodbye(env)))
        sock.send_multipart(goodbye)
        assert sock.poll(5000), "no ack of the goodbye"
        frames = sock.recv_multipart()
        assert isinstance(P.decode([frames[0][P.ENVELOPE_SIZE:], *frames[1:]]), P.Goodbye)
        sock.send_multipart(goodbye)
        deadline = time.monotonic() + 30
        while server.metrics()["sync/duplicates_dropped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        m = server.metrics()
        assert m["sync/duplicates_dropped"] == 1 and m["sync/errors_sent"] == 0
        assert not sock.poll(200), "the copy was answered"
        assert m["sync/malformed_frames_unattributed"] == 0 and m["sync/envs_live"] == 0


def test_wrong_protocol_version_is_answered_with_a_version_error(ctx):
    with serve(Recorder()) as server:
        sock = _raw(ctx, server.address)
        reply = _ask(sock, [msgpack.packb((99, 1, (1, "x")))])
        assert isinstance(reply, P.Error) and reply.code == "version"
        assert "version 99" in reply.message
        _still_serving(server)


def test_client_facing_a_server_of_another_version_raises_clearly(ctx):
    router = _raw(ctx, None, zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = CurriculumClient(f"tcp://127.0.0.1:{port}", timeout=5.0, close_timeout=0.1)
    import threading

    def fake_server():
        if router.poll(5000):
            ident, _ = router.recv_multipart()
            other = P.PROTOCOL_VERSION + 1
            router.send_multipart([ident, msgpack.packb((other, 2, (0, False, True, 1)))])

    t = threading.Thread(target=fake_server)
    t.start()
    with pytest.raises(P.ProtocolVersionError, match=f"version {P.PROTOCOL_VERSION + 1}"):
        client.next_task()
    t.join(5)
    client.close()


def test_updates_for_tasks_outside_the_space_or_not_held_are_refused(ctx):
    with serve(Recorder(n=10)) as server:
        sock = _raw(ctx, server.address)
        env = _hello(sock)
        held = _tasks(sock, env, 2)
        t0, t1 = held.task_ids
        cases = [
            (W.episode(env, -1, 55, 1.0, 1, 1.0), "invalid_task"),  # outside Discrete(10)
            (W.episode(env, -1, "x", 1.0, 1, 1.0), "invalid_task"),
            (W.episode(env, 10**6, 1, 1.0, 1, 1.0), "unknown_task"),  # never sent
            (W.episode(env, t0, (held.tasks[0] + 1) % 10, 1.0, 1, 1.0), "task_mismatch"),
            (W.progress(env, t0, held.tasks[0], 1.5), "bad_progress"),
            (W.episode(env, t0, held.tasks[0], float("nan"), 1, 1.0), "non_finite"),
            (W.episode(env, t0, held.tasks[0], float("inf"), 1, 1.0), "non_finite"),
            (
                W.steps(env, [t0], (held.tasks[0],), [float("nan")], [False], [False], [0.0]),
                "non_finite",
            ),
            (
                W.steps(env, [t0], (held.tasks[0],), [1.0], [False], [False], [float("inf")]),
                "non_finite",
            ),
            (
                W.steps(
                    env, [t0, 999], (held.tasks[0], 1), [1.0, 1.0], [False] * 2, [False] * 2, [0.0] * 2
                ),
                "unknown_task",
            ),
            (  # one task id, but the second step names another task
                W.steps(
                    env, [t0, t0], (held.tasks[0], (held.tasks[0] + 1) % 10), [1.0] * 2, [False] * 2,
                    [False] * 2, [0.0] * 2,
                ),
                "task_mismatch",
            ),
            (W.episode(env + 5, t0, held.tasks[0], 1.0, 1, 1.0), "unknown_env"),  # another env's id
            (P.Welcome(env, True, 1), "bad_request"),  # a server-only message
            (W.request(env, 5000), "bad_request"),
            (P.Goodbye(env, (12345,)), "unknown_task"),
        ]
        for msg, code in cases:
            reply = _ask(sock, P.encode(msg))
            assert isinstance(reply, P.Error) and reply.code == code, (msg, reply)
        assert server.curriculum.calls == []  # nothing reached the curriculum
        # a valid episode update is applied once; the same task id again is refused (no duplicates)
        sock.send_multipart(P.encode(W.episode(env, t0, held.tasks[0], 2.0, 3, 1.0)))
        reply = _ask(sock, P.encode(W.episode(env, t0, held.tasks[0], 2.0, 3, 1.0)))
        assert isinstance(reply, P.Error) and reply.code == "unknown_task"
        assert server.curriculum.calls == [("episode", held.tasks[0], 2.0)]
        m = server.metrics()
        assert m[f"sync/env{env}/tasks_consumed"] == 1 and m[f"sync/env{env}/tasks_in_flight"] == 1
        # 15 refused cases, less the task request (not an update) and the message claiming another env's id
        # (counted as a malformed frame of this env), plus the duplicate episode update
        assert m[f"sync/env{env}/updates_rejected"] == 14
        assert m[f"sync/env{env}/malformed_frames"] == 1
        assert m[f"sync/env{env}/updates_applied"] == 1
        _still_serving(server)


def test_curriculum_exceptions_become_error_replies():
    class Broken(Recorder):
        def update_on_episode(self, *a, **k):
            raise ValueError("boom")

        def sample(self, k=1):
            if self.next >= 1:
                raise RuntimeError("cannot sample")
            return super().sample(k)

    with serve(Broken()) as server:
        c = CurriculumClient(server.address, prefetch=0, timeout=5.0)
        a = c.next_task()
        c.record_episode(a, 1.0, 1, 1.0)
        with pytest.raises(SyncError, match="cannot sample"):
            c.next_task()
        c.close()
        m = server.metrics()
        assert m["sync/env0/updates_rejected"] == 1
        # the refused update's task was never acknowledged: the goodbye abandons it (nothing in flight)
        assert m["sync/env0/tasks_abandoned"] == 1 and m["sync/env0/tasks_in_flight"] == 0
        assert m["sync/errors_sent"] == 2


def _padded_episode(env, tasks, size):
    """The frames of a report of one episode on ``tasks``' lease whose extras pad it to ``size`` bytes."""
    def frames(pad):
        return P.encode(W.episode(env, tasks.task_ids[0], tasks.tasks[0], 1.0, 1, 1.0, extras={"pad": pad}))

    pad = "x" * (size - len(frames("")[0]))
    pad = pad[: len(pad) - (len(frames(pad)[0]) - size)]  # (a longer string's length takes more bytes)
    out = frames(pad)
    assert len(out) == 1 and len(out[0]) == size
    return out


def test_oversized_messages_are_dropped_without_harm(ctx):
    """ZeroMQ drops a message over ``max_message_bytes`` and the connection that sent it: the curriculum
    never sees it, no reply comes, the lease stays in flight; a message just under the limit is answered."""
    limit = 10_000
    cur = Recorder()
    with serve(cur, max_message_bytes=limit) as server:
        big = _raw(ctx, server.address)
        env_big = _hello(big)
        big_tasks = _tasks(big, env_big)
        monitor = big.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        big.send_multipart(_padded_episode(env_big, big_tasks, limit + 1))
        assert monitor.poll(10_000), "the server kept the connection that sent an oversized message"
        assert zmq.utils.monitor.recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        big.disable_monitor()
        monitor.close(0)
        assert big.poll(0) == 0  # no reply to the dropped message
        assert [c for c in cur.calls if c[0] == "episode"] == []
        m = server.metrics()
        assert m[f"sync/env{env_big}/tasks_in_flight"] == 1 and m[f"sync/env{env_big}/updates_received"] == 0

        small = _raw(ctx, server.address)
        env_small = _hello(small)
        small_tasks = _tasks(small, env_small)
        small.send_multipart(_padded_episode(env_small, small_tasks, limit - 1))
        reply = _ask(small, P.encode(W.request(env_small, 1)))  # answered after the episode, in order
        assert isinstance(reply, P.Tasks)
        assert [c for c in cur.calls if c[0] == "episode"] == [("episode", small_tasks.tasks[0], 1.0)]
        _still_serving(server)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_fuzz_random_frames_never_break_the_server(frames):
    server = _FUZZ["server"]
    sock = _FUZZ["sock"]
    sock.send_multipart(frames)
    if sock.poll(2000):
        reply = P.decode(sock.recv_multipart())
        assert isinstance(reply, (P.Error, P.Welcome))
    assert server._thread.is_alive()


_FUZZ: dict = {}


@pytest.fixture(autouse=True, scope="module")
def _fuzz_server():
    cur = Recorder()
    server = serve(cur)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.address)
    _FUZZ.update(server=server, sock=sock)
    yield
    # after the fuzzing the server still works and the curriculum saw nothing odd
    _still_serving(server)
    assert all(c[0] == "episode" for c in cur.calls)
    _FUZZ["sock"].close(0)
    ctx.term()
    server.close()


# -- dead workers and missing servers ----------------------------------------------------------------------


def _worker_holding_tasks(address, ready):
    c = CurriculumClient(address, prefetch=2, timeout=10.0, max_update_delay=math.inf)  # 2 ready at once
    a = c.next_task()
    c.step_recorder()(a, None, 1.0, False, False, None, 0.0)
    c.flush()
    ready.set()
    time.sleep(60)  # killed before this ends


def test_sigkilled_worker_loses_only_its_in_flight_tasks():
    ctx = mp.get_context("fork")
    with serve(Recorder(), step_batch_size=1) as server:
        ready = ctx.Event()
        p = ctx.Process(target=_worker_holding_tasks, args=(server.address, ready))
        p.start()
        assert ready.wait(20)
        deadline = time.monotonic() + 20  # its step update arrived, so its task requests did before it
        while server.metrics().get("sync/env0/steps_applied") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        assert p.exitcode == -signal.SIGKILL
        # the server keeps serving the others, and nothing blocks
        other = CurriculumClient(server.address, prefetch=1, timeout=5.0)
        for _ in range(20):
            a = other.next_task()
            other.record_episode(a, 1.0, 1, 1.0)
        other.close()
        m = server.metrics()
        dead = 0
        assert m[f"sync/env{dead}/tasks_in_flight"] == 3  # the task being played + 2 prefetched
        assert m[f"sync/env{dead}/connected"] == 1 and m[f"sync/env{dead}/steps_applied"] == 1
        assert m["sync/env1/tasks_consumed"] == 20 and m["sync/env1/tasks_in_flight"] == 0
        # 3 for the dead env; 2 + 20 for the other (the prefetched task and the first one, then each episode
        # update asked for the next reset's task; the 2 left over are returned at close)
        assert m["sync/total/tasks_sampled"] == 3 + 22
        assert m["sync/env1/tasks_returned"] == 2
        assert len(set(server.in_flight(dead))) == 3
    assert server.closed


def test_no_server_raises_a_clear_error_after_the_timeout(tmp_path):
    c = CurriculumClient(f"ipc://{tmp_path}/nobody.sock", timeout=0.3, close_timeout=0.1)
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailableError, match="no reply from the curriculum server"):
        c.next_task()
    assert time.monotonic() - t0 < 5
    c.close()


def test_fallback_samples_locally_and_warns_once(tmp_path, caplog):
    space = Discrete(4, seed=0)
    c = CurriculumClient(f"ipc://{tmp_path}/nobody.sock", timeout=0.2, fallback_task_space=space)
    with caplog.at_level(logging.WARNING, logger="magister.sync.feed"):
        tasks = [c.next_task() for _ in range(20)]
    assert all(a.task_id == -1 and 0 <= a.task < 4 and a.train for a in tasks)
    assert len({a.task for a in tasks}) > 1
    assert sum("sampling tasks locally" in r.message for r in caplog.records) == 1
    c.record_episode(tasks[0], 1.0, 1, 1.0)  # feedback is dropped silently
    c.close()


def test_server_that_disappears_mid_run():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=0, timeout=5.0, close_timeout=0.1)
        a = c.next_task()
        c.record_episode(a, 1.0, 1, 1.0, refill=False)  # no task asked for: the next one must wait
    c.options = FeedOptions.of(c.options, timeout=0.5, reconnect_timeout=0.5)
    with pytest.raises(ServerUnavailableError):
        c.next_task()
    c.close()


def test_wrapper_fallback_and_no_server(tmp_path):
    import gymnasium as gym

    from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
    from magister.env_wrappers.task_wrapper import TaskWrapper

    class Seeds(TaskWrapper):
        def change_task(self, task):
            self.seed_task = task

    address = f"ipc://{tmp_path}/nobody.sock"
    env = GymnasiumSyncWrapper(
        Seeds(gym.make("CartPole-v1"), Discrete(5)),
        address,
        timeout=0.2,
        fallback_task_space=Discrete(5, seed=1),
    )
    _, info = env.reset(seed=0)
    assert 0 <= info["task"] < 5 and env.unwrapped is not None
    env.step(0)
    env.close()
    env = GymnasiumSyncWrapper(Seeds(gym.make("CartPole-v1"), Discrete(5)), address, timeout=0.2)
    with pytest.raises(ServerUnavailableError):
        env.reset()
    env.close()


def test_non_finite_values_never_reach_the_curriculum_through_the_client():
    with serve(Recorder(), step_batch_size=1) as server:
        c = CurriculumClient(server.address, prefetch=0)
        a = c.next_task()
        c.step_recorder()(a, None, float("nan"), False, False, None, 0.0)  # a buggy sender: refused
        c.record_episode(a, 1.0, 1, 1.0)
        c.close()
        cur = server.curriculum
        assert cur.calls == [("episode", a.task, 1.0)]
        assert server.metrics()["sync/env0/updates_rejected"] == 1
        assert c.stats["errors_received"] == 1
        assert not np.isnan([x for call in cur.calls for x in call[1:] if isinstance(x, float)]).any()


def test_a_flood_of_hellos_is_bounded(ctx):
    with serve(Recorder(), max_envs=3) as server:
        socks = [_raw(ctx, server.address) for _ in range(4)]
        assert [_hello(s) for s in socks[:3]] == [0, 1, 2]
        reply = _ask(socks[3], P.encode(P.Hello(1, "one too many")))
        assert isinstance(reply, P.Error) and reply.code == "too_many_envs"
        assert server.metrics()["sync/envs"] == 3
        c = CurriculumClient(server.address, timeout=5.0, reconnect_timeout=1.0)
        with pytest.raises(SyncError, match="too_many_envs"):
            c.next_task()  # asked again, backing off, for reconnect_timeout; then a clear refusal
        c.close()
        # a peer that goes away frees its slot when one is needed (ZeroMQ reports its connection closed),
        # long before env_timeout: a client asking again gets in
        socks[0].close(0)
        late = CurriculumClient(server.address, timeout=30.0)
        late.next_task()
        m = server.metrics()
        assert m["sync/envs_live"] == 3 and m["sync/env0/connected"] == 0
        late.close()


def test_a_refused_update_still_gets_the_tasks_it_asked_for(ctx):
    """An episode update that also asks for tasks (request > 0) and is refused (NaN return) is answered
    with the error and then the tasks: the env is not left waiting, the curriculum is not touched."""
    with serve(Recorder(n=10)) as server:
        sock = _raw(ctx, server.address)
        env = _hello(sock)
        held = _tasks(sock, env, 1)
        t0 = held.task_ids[0]
        error = _ask(sock, P.encode(W.episode(env, t0, held.tasks[0], float("nan"), 1, 1.0, request=2)))
        assert isinstance(error, P.Error) and error.code == "non_finite"
        assert sock.poll(5000)
        tasks = P.decode(sock.recv_multipart())
        assert isinstance(tasks, P.Tasks) and len(tasks.task_ids) == 2 and tasks.env_id == env
        assert server.curriculum.calls == []
        # a valid update with a request: applied, then answered with the tasks
        reply = _ask(sock, P.encode(W.episode(env, t0, held.tasks[0], 1.0, 1, 1.0, request=1)))
        assert isinstance(reply, P.Tasks) and len(reply.task_ids) == 1
        assert server.curriculum.calls == [("episode", held.tasks[0], 1.0)]
        m = server.metrics()
        assert m[f"sync/env{env}/tasks_sent"] == 4 and m[f"sync/env{env}/tasks_consumed"] == 1
        assert m[f"sync/env{env}/updates_rejected"] == 1 and m[f"sync/env{env}/updates_applied"] == 1


def test_tasks_in_flight_per_env_are_capped(ctx):
    """One client asking again and again for the most tasks a request may carry holds at most the server's
    ``max_tasks_in_flight``: the request beyond it is refused, saying why; the server's memory stays
    bounded."""
    with serve(Recorder(n=10), max_tasks_in_flight=100) as server:
        sock = _raw(ctx, server.address)
        env = _hello(sock)
        assert len(_tasks(sock, env, 60).task_ids) == 60
        reply = _ask(sock, P.encode(W.request(env, 60)))
        assert isinstance(reply, P.Error) and reply.code == "too_many_tasks"
        assert "holding 60" in reply.message and "max_tasks_in_flight" in reply.message
        assert server.metrics()[f"sync/env{env}/tasks_in_flight"] == 60


def test_loopback_tcp_without_keys_says_every_local_user_can_connect(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="magister.sync")
    with serve(Recorder(), "tcp://127.0.0.1:*"):
        pass
    assert any("every local user" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with serve(Recorder()):  # an ipc socket file: this user's only
        pass
    assert not any("every local user" in r.getMessage() for r in caplog.records)


def test_an_error_for_a_sender_already_gone_is_not_a_warning(caplog):
    """A frame that crossed its env's goodbye (a heartbeat, a resend request) gets an ``unknown_env`` error
    that nobody is left to read: counted as undelivered, logged at debug level, not warned about. (The
    server's socket is used here while its thread is certainly parked: it waits for the lock the test
    holds.)"""
    cur = Recorder()
    with serve(cur) as server, caplog.at_level(logging.DEBUG, logger="magister"):
        waiting, lock = threading.Event(), server.lock

        class Watched:  # the server's lock, telling when the server thread waits for it
            def __enter__(self):
                if threading.current_thread() is server._thread:
                    waiting.set()
                return lock.__enter__()

            def __exit__(self, *exc):
                return lock.__exit__(*exc)

        c = CurriculumClient(server.address, prefetch=0, timeout=10.0)
        c._ensure()
        server.core.lock = Watched()
        try:
            with server.lock:
                c.transport.send([P.Report(c.env_id, request=1)])
                assert waiting.wait(30), "the server thread never asked for the lock"
                error = server.core.refuse(SyncRejected("unknown_env", "send Hello again"))
                assert not server._send((b"\x00gone", 0), error)  # no such peer (any more)
        finally:
            server.core.lock = lock
        c.close()
    undeliverable = [r for r in caplog.records if "could not deliver" in r.getMessage()]
    assert len(undeliverable) == server.replies_undelivered == 1
    assert undeliverable[0].levelno == logging.DEBUG and "Error" in undeliverable[0].getMessage()
