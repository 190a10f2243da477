"""Curriculum server + env-side client in one process: settings, accounting, batching, lifecycle, security."""

from __future__ import annotations

import gc
import math
import multiprocessing as mp
import os
import stat
import threading
import time
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magister.curricula.base import Curriculum, TaskSample
from magister.sync import feed as client_module
from magister.sync import protocol as P
from magister.sync.feed import CurriculumClient, LocalClient, ServerUnavailableError, SyncError, connect
from magister.sync.security import generate_keypair
from magister.sync.zmq_server import CurriculumServer, serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(60)


class Recorder(Curriculum):
    """Samples 0, 1, 2, ... (every task unique) and records all feedback."""

    def __init__(self, requires_steps: bool = False, n: int = 10**9) -> None:
        super().__init__(Discrete(n))
        self.requires_step_updates = requires_steps
        self.next = 0
        self.sampled: list[int] = []
        self.episodes: list[tuple] = []
        self.batches: list = []
        self.progress: list[tuple] = []
        self.demands: list[dict] = []

    def sample(self, k: int = 1) -> list[int]:
        out = list(range(self.next, self.next + k))
        self.next += k
        self.sampled.extend(out)
        return out

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        return [TaskSample(t, t % 3 != 0) for t in self.sample(k)]  # every third task is eval-only

    def update_on_step_batch(self, batch, env_id=None):
        self.batches.append(batch)

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.episodes.append((task, episode_return, length, progress, env_id))

    def update_task_progress(self, task, progress, env_id=None):
        self.progress.append((task, progress, env_id))

    def update_on_demand(self, metrics):
        self.demands.append(metrics)

    def state_dict(self):
        return {**super().state_dict(), "next": self.next}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.next = state["next"]


def _wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def _play(client, episodes, length=3, progress=1.0):
    for _ in range(episodes):
        a = client.next_task()
        record = client.step_recorder()  # (None: the curriculum wants no step updates)
        for i in range(length):
            if record is None:
                break
            record(
                a,
                np.full(2, a.task, np.float32),
                1.0,
                i == length - 1,
                False,
                {"i": i},
                progress if i == length - 1 else 0.0,
            )
        client.record_episode(a, float(length), length, progress)


def test_default_address_is_a_private_ipc_socket_and_close_cleans_up():
    threads_before = threading.active_count()
    server = serve(Recorder())
    assert isinstance(server.address, str) and server.address.startswith("ipc://")
    path = server.address[len("ipc://") :]
    d = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert os.path.exists(path)
    assert threading.active_count() == threads_before + 1
    server.close()
    server.close()  # idempotent
    assert server.closed and not os.path.exists(d)
    assert threading.active_count() == threads_before


def test_in_process_feeds_share_a_core_and_do_not_keep_the_curriculum_alive():
    """Feeds of one curriculum in its own process share one core (one accounting, distinct env ids);
    once they are closed and gone, nothing the sync layer keeps holds the curriculum."""
    import weakref

    cur = Recorder()
    first, second = connect(cur), connect(cur)
    assert first.core is second.core and first.env_id != second.env_id
    a = first.next_task()
    first.record_episode(a, 1.0, 1, 1.0)
    assert second.core.counters(first.env_id).episodes_applied == 1
    first.close()
    second.close()
    ref = weakref.ref(cur)
    del cur, first, second, a
    gc.collect()
    assert ref() is None


def test_no_leaked_file_descriptors_or_threads():
    def fds():
        return len(os.listdir("/proc/self/fd"))

    def rounds(n):
        for _ in range(n):
            with serve(Recorder()) as server:
                c = CurriculumClient(server.address)
                _play(c, 2)
                c.close()
        gc.collect()  # clients earlier tests left open: collected, the background flusher they kept ends
        thread = client_module._flusher.thread
        if thread is not None and not list(client_module._flusher.feeds):
            thread.join(timeout=5)
        return fds(), threading.active_count()

    # The first rounds may open what stays for the process (the client context, lazily opened
    # files of other tests' objects collected meanwhile); a leak grows with the number of rounds.
    rounds(2)
    after_three = rounds(3)
    after_ten = rounds(10)
    # (garbage of earlier tests collected meanwhile can only lower the counts)
    assert after_ten[0] <= after_three[0] and after_ten[1] <= after_three[1]


def test_welcome_settings_and_no_step_data_when_not_required():
    with serve(Recorder(requires_steps=False)) as server:
        c = CurriculumClient(server.address)
        _play(c, 5, length=4)
        c.close()
        assert c.env_id == 0 and c.requires_step_updates is False
        m = server.metrics()
        assert m["sync/env0/updates_received"] == 6  # 5 episode updates + goodbye, no step updates
        assert m["sync/env0/steps_applied"] == 0
        assert server.curriculum.batches == []
        assert len(server.curriculum.episodes) == 5


def test_step_updates_are_batched_every_n_steps_or_at_episode_end():
    with serve(Recorder(requires_steps=True), step_batch_size=4) as server:
        c = CurriculumClient(server.address)
        _play(c, 2, length=10)
        c.close()
        cur = server.curriculum
        assert [len(b) for b in cur.batches] == [4, 4, 2, 4, 4, 2]
        first = cur.batches[0]
        assert first.env_id == 0 and list(first.tasks) == [cur.episodes[0][0]] * 4
        assert first.obs.shape == (4, 2) and first.infos[1] == {"i": 1}
        assert first.rewards.tolist() == [1.0] * 4
        assert cur.batches[2].terminated.tolist() == [False, True]
        assert server.metrics()["sync/env0/steps_applied"] == 20


def test_exactly_once_accounting_with_several_clients_and_prefetch():
    with serve(Recorder(requires_steps=True), step_batch_size=5) as server:
        clients = [CurriculumClient(server.address, prefetch=p) for p in (0, 1, 3)]
        for _ in range(20):  # interleave the clients
            for c in clients:
                _play(c, 1, length=3)
        for c in clients:
            c.close()
        received = {c.env_id: c.stats["tasks_received"] for c in clients}
        cur = server.curriculum
        m = server.metrics()
        consumed = [e[0] for e in cur.episodes]
        assert len(consumed) == 60 and len(set(consumed)) == 60  # no episode task duplicated
        assert m["sync/total/tasks_sampled"] == len(cur.sampled)
        assert m["sync/total/tasks_consumed"] == 60
        assert (
            m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
        )
        assert m["sync/total/tasks_in_flight"] == 0
        assert set(consumed) <= set(cur.sampled)
        assert m["sync/total/steps_applied"] == 180 == sum(len(b) for b in cur.batches)
        assert (
            m["sync/total/updates_rejected"] == 0
            and m["sync/total/updates_applied"] == (m["sync/total/updates_received"])
        )
        for c in clients:
            e = c.env_id
            assert m[f"sync/env{e}/tasks_sent"] == received[e]
            assert m[f"sync/env{e}/tasks_consumed"] == 20
            # each episode came from the env the task was sent to
            assert sum(1 for ep in cur.episodes if ep[4] == e) == 20
        # prefetch p keeps p spare tasks, plus the one the last episode update asked for on behalf of a
        # reset that never came: p + 1 come back at close
        assert m[f"sync/env{clients[2].env_id}/tasks_returned"] == 3 + 1
        assert m[f"sync/env{clients[0].env_id}/tasks_returned"] == 0 + 1


def test_tasks_are_addressed_to_the_requesting_env():
    with serve(Recorder()) as server:
        a, b = CurriculumClient(server.address, prefetch=2), CurriculumClient(server.address, prefetch=2)
        ta = [a.next_task() for _ in range(3)]
        tb = [b.next_task() for _ in range(3)]
        held_a = server.in_flight(a.env_id)
        held_b = server.in_flight(b.env_id)
        assert {t.task_id for t in ta} <= set(held_a) and {t.task_id for t in tb} <= set(held_b)
        assert not set(held_a) & set(held_b)
        for t in ta:
            assert held_a[t.task_id] == t.task
        a.close()
        b.close()


def test_train_flag_reaches_the_client():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address)
        flags = {a.task: a.train for a in (c.next_task() for _ in range(6))}
        assert flags == {t: t % 3 != 0 for t in flags}
        c.close()


def test_prefetch_keeps_n_tasks_ready():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=3, max_update_delay=math.inf)  # no pace to adapt to
        c.next_task()
        _wait(lambda: server.metrics()["sync/env0/tasks_sent"] == 4)  # 3 prefetched + 1 refill
        _wait(lambda: (c._drain() or True) and len(c._buffer) == 3)
        c.close()
        assert server.metrics()["sync/env0/tasks_returned"] == 3


def test_progress_updates_and_task_switch_acknowledgement():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        c.record_progress(a, 0.5)
        c.record_progress(a, 1.0, done=True)
        c.close()
        m = server.metrics()
        assert server.curriculum.progress == [(a.task, 0.5, 0), (a.task, 1.0, 0)]
        assert m["sync/env0/tasks_consumed"] == 1 and m["sync/env0/progress_applied"] == 2


def test_strip_keys_removes_keys_from_obs_and_infos():
    with serve(Recorder(requires_steps=True), step_batch_size=2) as server:
        c = CurriculumClient(server.address, strip_keys=["secret"])
        a = c.next_task()
        for i in range(2):
            c.step_recorder()(a, {"x": i, "secret": "s"}, 0.0, False, False, {"secret": 1, "keep": 2}, 0.0)
        c.record_episode(a, 0.0, 2, 0.0)
        c.close()
        b = server.curriculum.batches[0]
        assert b.obs == ({"x": 0}, {"x": 1}) and b.infos == ({"keep": 2}, {"keep": 2})


def test_send_obs_and_infos_can_be_disabled():
    with serve(Recorder(requires_steps=True), step_batch_size=2) as server:
        c = CurriculumClient(server.address, send_obs=False, send_infos=False)
        _play(c, 1, length=2)
        c.close()
        b = server.curriculum.batches[0]
        assert b.obs is None and b.infos is None and len(b) == 2


@pytest.mark.parametrize("in_process", [False, True])
def test_curriculum_that_reads_no_observations_gets_none_sent(in_process):
    """requires_step_observations / requires_step_infos = False keep observations and infos off the wire
    (and uncopied), whatever the client options say; rewards, dones and progress still arrive."""
    cur = Recorder(requires_steps=True)
    cur.requires_step_observations = False
    cur.requires_step_infos = False
    with serve(cur, step_batch_size=3) as server:
        c = LocalClient(server.core) if in_process else CurriculumClient(server.address)
        a = c.next_task()
        obs = np.zeros(4)
        for i in range(3):
            obs[:] = i  # overwritten in place, as some envs do: nothing may keep a reference
            c.step_recorder()(a, obs, float(i), False, i == 2, {"x": i}, 0.5)
        c.record_episode(a, 3.0, 3, 0.5)
        c.close()
        (b,) = cur.batches
        assert b.obs is None and b.infos is None
        assert b.rewards.tolist() == [0.0, 1.0, 2.0] and b.truncated.tolist() == [False, False, True]
        assert b.progress.tolist() == [0.5] * 3 and list(b.tasks) == [a.task] * 3


def test_composite_curricula_ask_for_observations_when_a_part_reads_them():
    from magister.curricula.constant import Constant
    from magister.curricula.sequential import Sequential

    reads, blind = Recorder(requires_steps=True), Recorder(requires_steps=True)
    blind.requires_step_observations = False
    no_steps = Constant(Discrete(3), 0)  # wants no step updates at all: its flag does not matter
    assert Sequential([blind, no_steps], ["episodes > 1"]).requires_step_observations is False
    assert Sequential([blind, reads], ["episodes > 1"]).requires_step_observations is True
    assert Sequential([blind, reads], ["episodes > 1"]).requires_step_infos is True


def test_unsendable_info_raises_a_clear_type_error():
    with serve(Recorder(requires_steps=True), step_batch_size=1) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        with pytest.raises(TypeError, match="object.*strip_keys"):
            c.step_recorder()(a, None, 0.0, False, False, {"bad": object()}, 0.0)
        c.close()


def test_learner_side_proxies_share_one_lock():
    cur = Recorder()
    with serve(cur) as server:
        assert isinstance(server, CurriculumServer)
        assert server.lock is server.core.lock
        server.update_on_demand({"loss": 1.5})
        assert cur.demands == [{"loss": 1.5}]
        state = server.state_dict()
        assert server.sample(2) == [0, 1]
        assert [s.task for s in server.sample_tasks(1)] == [2]
        server.load_state_dict(state)
        assert server.sample(1) == [0]
        m = server.metrics()
        assert "curriculum/sampled" in m and "sync/envs" in m
        # while the learner holds the lock, the server thread cannot touch the curriculum: the server thread
        # is seen waiting for the lock (the core's lock, watched, is the same lock) before the learner lets go
        c = CurriculumClient(server.address, prefetch=0, timeout=5.0)
        c._ensure()
        waiting = threading.Event()

        class Watched:
            def __init__(self, lock):
                self.lock = lock

            def __enter__(self):
                if threading.current_thread() is server._thread:
                    waiting.set()
                return self.lock.__enter__()

            def __exit__(self, *exc):
                return self.lock.__exit__(*exc)

        server.core.lock = Watched(server.lock)
        try:
            with server.lock:
                n = len(cur.sampled)
                c.transport.send([P.Report(c.env_id, request=1)])  # (never waits for the reply)
                assert waiting.wait(30), "the server thread never asked for the lock"
                assert len(cur.sampled) == n  # it waits for the learner
            _wait(lambda: len(cur.sampled) == n + 1)
        finally:
            server.core.lock = server.lock
        c.close()


def test_a_server_sent_to_another_process_arrives_as_a_handle_to_its_address():
    import pickle

    from magister.sync.core import ServerHandle

    with serve(Recorder()) as server:
        handle = pickle.loads(pickle.dumps(server))
        assert isinstance(handle, ServerHandle) and handle.address == server.address
        assert pickle.loads(pickle.dumps(handle)) == handle
        with pytest.raises(AttributeError, match="in another process"):
            handle.metrics()
        feed = connect(handle, prefetch=0)  # a handle is as good as the address
        assert isinstance(feed, CurriculumClient) and feed.address == server.address
        assert feed.next_task().task_id >= 0
        feed.close()


def test_a_closure_that_names_the_server_works_in_sb3_subprocess_workers():
    """The README's pattern ``lambda: GymnasiumSyncWrapper(env, server.address)`` pickles ``server`` itself
    when SB3 sends the lambda to workers started with its default start method (forkserver, or spawn)."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from magister.curricula.domain_randomization import DomainRandomization
    from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
    from magister.examples.cartpole import CartPoleTask
    from magister.task_spaces.box import Box

    space = Box(0.01, 0.2, shape=(1,))
    with serve(DomainRandomization(space, seed=0)) as server:
        env = SubprocVecEnv(
            [lambda: GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), space), server.address)] * 2
        )
        env.reset()
        dones = 0
        for _ in range(100):
            _, _, done, infos = env.step(np.zeros(2, dtype=np.int64))
            dones += int(done.sum())
            assert all(space.contains_encoded(i["task"]) for i in infos)
        env.close()
        assert dones > 0 and server.metrics()["sync/total/episodes_applied"] == dones


def test_client_survives_serialisation_and_reconnects():
    import pickle

    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=0)
        c.next_task()
        c2 = pickle.loads(pickle.dumps(c))
        assert c2.env_id is None  # no socket travelled
        c2.next_task()
        assert c2.env_id == 1
        c.close()
        c2.close()


def _child_uses_inherited_client(client, queue):
    a = client.next_task()
    client.record_episode(a, 1.0, 1, 1.0)
    queue.put((client.env_id, a.task))
    client.close()


def test_client_after_fork_gets_its_own_socket_and_env_id():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=0)
        parent_task = c.next_task()
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_child_uses_inherited_client, args=(c, q))
        p.start()
        env_id, task = q.get(timeout=20)
        p.join(20)
        assert p.exitcode == 0
        assert env_id == 1 and task != parent_task.task
        c.record_episode(parent_task, 1.0, 1, 1.0)  # the parent's socket still works
        c.close()
        m = server.metrics()
        assert m["sync/env0/tasks_consumed"] == 1 and m["sync/env1/tasks_consumed"] == 1


def _child_reports_its_pid(queue):
    queue.put((client_module._pid, os.getpid()))


def test_the_cached_pid_follows_forks():
    """The per-episode ownership checks read a pid kept by an at-fork hook: right in a forked child (and
    so in AsyncVectorEnv/SubprocVecEnv workers), with no os.getpid() call per episode."""
    assert client_module._pid == os.getpid()
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child_reports_its_pid, args=(q,))
    p.start()
    cached, real = q.get(timeout=20)
    p.join(20)
    assert cached == real == p.pid != os.getpid()


class ExtrasRecorder(Recorder):
    def on_episode(self, episode):  # reads the record's extras
        self.episodes.append(
            (episode.task, episode.episode_return, episode.length, episode.progress, episode.extras)
        )


def test_held_updates_keep_their_order_whether_encoded_now_or_when_sent(clock):
    """Held episode updates are encoded when the held updates are sent; extras are checked at once (so that
    extras that cannot travel raise in the env's step). Mixed, they reach the curriculum in the order
    played, with their values; a refused one loses nothing else."""
    with serve(ExtrasRecorder()) as server:
        c = CurriculumClient(server.address, prefetch=4, update_batch=8, max_update_delay=math.inf)
        sent = []
        for e in range(20):
            a = c.next_task()
            extras = {"e": e, "v": [e, 0.5]} if e % 3 == 1 else None
            if e == 10:
                with pytest.raises(TypeError, match="cannot send an object of type object"):
                    c.record_episode(a, float(e), e + 1, 0.5, extras={"bad": object()})
            c.record_episode(a, float(e), e + 1, 0.25, extras=extras)
            sent.append((a.task, float(e), e + 1, 0.25, {"e": e, "v": (e, 0.5)} if extras else None))
            assert c.held_updates <= 8
        c.close()
        got = [(t, r, n, p, x or None) for t, r, n, p, x in server.curriculum.episodes]
        assert got == sent
        m = server.metrics()
        assert m["sync/env0/updates_rejected"] == 0 and m["sync/env0/tasks_consumed"] == 20


# -- in-process path ----------------------------------------------------------------------------------


def test_local_client_uses_the_same_accounting():
    cur = Recorder(requires_steps=True)
    feeds = [connect(cur), connect(cur)]
    assert all(isinstance(f, LocalClient) for f in feeds)
    assert feeds[0].core is feeds[1].core  # one lock and one set of counters per curriculum
    for f in feeds:
        _play(f, 3, length=2)
        f.close()
    m = feeds[0].core.sync_metrics()
    assert m["sync/total/tasks_consumed"] == 6 and m["sync/total/steps_applied"] == 12
    assert len(cur.episodes) == 6 and sorted(e[4] for e in cur.episodes) == [0, 0, 0, 1, 1, 1]


def test_connect_with_server_object_is_in_process():
    with serve(Recorder()) as server:
        f = connect(server)
        assert isinstance(f, LocalClient)
        _play(f, 2)
        f.close()
        assert server.metrics()["sync/total/tasks_consumed"] == 2


def test_connect_rejects_other_sources():
    with pytest.raises(TypeError, match="server address"):
        connect(42)  # type: ignore[arg-type]


def test_client_argument_validation():
    with pytest.raises(ValueError, match="address"):
        CurriculumClient("localhost:5555")
    with pytest.raises(ValueError, match="prefetch"):
        CurriculumClient("ipc:///x", prefetch=-1)
    with pytest.raises(ValueError, match="timeout"):
        CurriculumClient("ipc:///x", timeout=0)
    with pytest.raises(TypeError, match="fallback_task_space"):
        CurriculumClient("ipc:///x", fallback_task_space=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="curriculum"):
        serve(object())  # type: ignore[arg-type]


# -- security ---------------------------------------------------------------------------------------------


def test_exposed_tcp_without_keys_is_refused():
    with pytest.raises(ValueError, match="without encryption"):
        serve(Recorder(), "tcp://0.0.0.0:0")
    with pytest.raises(ValueError, match="without encryption"):
        serve(Recorder(), "tcp://*:0")
    with pytest.raises(ValueError, match="malformed address 'udp://127.0.0.1:5': unknown scheme"):
        serve(Recorder(), "udp://127.0.0.1:5")


def test_loopback_tcp_needs_no_keys():
    with serve(Recorder(), "tcp://127.0.0.1:*") as server:
        assert server.address.startswith("tcp://127.0.0.1:") and not server.address.endswith("*")
        c = CurriculumClient(server.address)
        _play(c, 2)
        c.close()
        assert server.metrics()["sync/total/tasks_consumed"] == 2


def test_curve_secured_connection_works_with_keys_and_fails_without():
    keys = generate_keypair()
    with serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=keys.secret_key) as server:
        good = CurriculumClient(server.address, curve_server_key=keys.public_key)
        _play(good, 2)
        good.close()
        plain = CurriculumClient(server.address, timeout=2.0, close_timeout=0.1)
        # (ZeroMQ reports a client without keys to a CURVE server as a failed handshake only sometimes)
        with pytest.raises((SyncError, ServerUnavailableError), match="CURVE keys"):
            plain.next_task()
        plain.close()
        wrong = CurriculumClient(
            server.address, timeout=30.0, close_timeout=0.1, curve_server_key=generate_keypair().public_key
        )
        with pytest.raises(SyncError, match="is curve_server_key .* the server's public key"):
            wrong.next_task()
        wrong.close()
        m = server.metrics()
        assert m["sync/envs"] == 1 and m["sync/total/tasks_consumed"] == 2


def test_insecure_flag_allows_exposed_tcp(caplog):
    with serve(Recorder(), "tcp://0.0.0.0:*", insecure=True) as server:
        assert server.address.startswith("tcp://0.0.0.0:")
    assert "WITHOUT encryption" in caplog.text


def test_bad_curve_key_is_refused():
    with pytest.raises(ValueError, match="40-character"):
        serve(Recorder(), "tcp://0.0.0.0:0", curve_secret_key=b"short")


def test_zmq_has_curve():
    assert zmq.has("curve")


def test_large_observations_travel_intact_over_the_socket():
    with serve(Recorder(requires_steps=True), step_batch_size=4) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        frames = [np.random.default_rng(i).integers(0, 255, (64, 64, 3), dtype=np.uint8) for i in range(4)]
        for i, f in enumerate(frames):
            c.step_recorder()(a, f, 0.0, i == 3, False, None, 0.0)
        c.record_episode(a, 0.0, 4, 0.0)
        c.close()
        obs = server.curriculum.batches[0].obs
        assert obs.shape == (4, 64, 64, 3) and obs.dtype == np.uint8  # stacked: one zero-copy frame
        assert np.array_equal(obs, np.stack(frames)) and not obs.flags.writeable


def test_obs_arrays_are_copied_when_recorded():
    with serve(Recorder(requires_steps=True), step_batch_size=2) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        buf = np.zeros(3)
        c.step_recorder()(a, buf, 0.0, False, False, None, 0.0)
        buf[:] = 7  # an env that reuses its observation buffer
        c.step_recorder()(a, buf, 0.0, False, False, None, 0.0)
        c.record_episode(a, 0.0, 2, 0.0)
        c.close()
        assert server.curriculum.batches[0].obs.tolist() == [[0, 0, 0], [7, 7, 7]]


def test_bind_failure_leaves_nothing_behind():
    threads = threading.active_count()
    with serve(Recorder(), "tcp://127.0.0.1:*") as server:
        with pytest.raises(zmq.ZMQError):
            serve(Recorder(), server.address)
        assert threading.active_count() == threads + 1
    assert threading.active_count() == threads


def _child_connects(source, queue):
    try:
        feed = connect(source)
        kind = type(feed).__name__
        a = feed.next_task()
        feed.record_episode(a, 1.0, 1, 1.0)
        feed.close()
        queue.put((kind, None))
    except Exception as exc:  # reported to the parent
        queue.put((None, f"{type(exc).__name__}: {exc}"))


def test_in_process_sources_used_from_a_forked_worker():
    ctx = mp.get_context("fork")
    with serve(Recorder()) as server:
        # a server object in a forked worker is reached through its address, never a stale copy
        q = ctx.Queue()
        p = ctx.Process(target=_child_connects, args=(server, q))
        p.start()
        assert q.get(timeout=20) == ("CurriculumClient", None)
        p.join(20)
        assert server.metrics()["sync/total/tasks_consumed"] == 1
    # a bare curriculum already used in-process cannot be updated from a fork: a clear error
    cur = Recorder()
    connect(cur).close()
    q = ctx.Queue()
    p = ctx.Process(target=_child_connects, args=(cur, q))
    p.start()
    kind, err = q.get(timeout=20)
    p.join(20)
    assert kind is None and "RuntimeError" in err and "server.address" in err


def test_ray_addresses_get_the_ray_client():
    pytest.importorskip("ray")
    from magister.sync.ray_server import RayClient

    feed = connect("ray://my_curriculum", prefetch=2, timeout=1.0, strip_keys=("x",))
    assert isinstance(feed, RayClient) and feed.prefetch == 2  # nothing connected yet: the lookup is lazy
    with pytest.raises(ValueError, match="curve_server_key applies to ZeroMQ"):
        connect("ray://my_curriculum", curve_server_key=generate_keypair().public_key)


def test_dict_observations_travel_stacked_per_key_and_arrive_per_step():
    """Dict observations of a batch are sent as one array per key; the curriculum sees one dict per step,
    equal to what the env produced (copied at record time, so in-place overwrites do not leak)."""
    from magister.sync import protocol as P

    with serve(Recorder(requires_steps=True), step_batch_size=4) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        glyphs = np.zeros((3, 5), np.int16)  # overwritten in place between steps, as NetHack does
        sent = []
        for i in range(4):
            glyphs[:] = i
            obs = {"glyphs": glyphs, "blstats": np.arange(4, dtype=np.int64) + i}
            sent.append({k: v.copy() for k, v in obs.items()})
            c.step_recorder()(a, obs, 0.0, i == 3, False, None, 0.0)
        c.record_episode(a, 0.0, 4, 0.0)
        c.close()
        (batch,) = server.curriculum.batches
    assert isinstance(batch.obs, P.StackedObs) and len(batch.obs) == 4
    assert batch.obs.arrays["glyphs"].shape == (4, 3, 5)  # one frame per key, not one per step
    for got, want in zip(batch.obs, sent):
        assert set(got) == {"glyphs", "blstats"}
        assert np.array_equal(got["glyphs"], want["glyphs"])
        assert np.array_equal(got["blstats"], want["blstats"])


def test_mixed_dict_observations_fall_back_to_one_per_step():
    from magister.sync.steps import stack_observations as _stack

    same = [{"a": np.zeros(2)}, {"a": np.ones(2)}]
    assert isinstance(_stack(same), dict)
    ragged = [{"a": np.zeros(2)}, {"a": np.ones(3)}]
    assert isinstance(_stack(ragged), tuple) and len(_stack(ragged)) == 2
    text = [{"a": np.zeros(2), "mission": "go"}, {"a": np.ones(2), "mission": "go"}]
    assert isinstance(_stack(text), tuple)


def test_observation_layout_changing_mid_batch_keeps_every_step_in_order():
    """Steps are written into per-batch arrays until one does not fit; the batch then falls back to one
    observation per step, with the earlier steps' values intact."""
    with serve(Recorder(requires_steps=True), step_batch_size=8) as server:
        c = CurriculumClient(server.address)
        a = c.next_task()
        buf = np.zeros(3)
        sent = []
        for i in range(5):
            buf[:] = i  # overwritten in place between steps
            obs = buf if i != 3 else np.full(4, 3.0)  # step 3 has another shape
            sent.append(np.array(obs))
            c.step_recorder()(a, obs, float(i), False, False, None, 0.0)
        c.record_episode(a, 0.0, 5, 0.0)  # a batch shorter than its capacity
        c.close()
        (batch,) = server.curriculum.batches
    assert isinstance(batch.obs, tuple) and len(batch.obs) == 5
    for got, want in zip(batch.obs, sent):
        assert np.array_equal(got, want)
    assert batch.rewards.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_step_buffer_columns_hold_at_most_their_capacity():
    from magister.sync.feed import Assignment
    from magister.sync.steps import StepBuffer as _StepBuffer

    steps = _StepBuffer(True, False, frozenset(), capacity=2)
    a = Assignment(0, 0, True)
    for i in range(3):  # one more than the capacity: the third step falls back, nothing is lost
        steps.add(a, {"x": np.full(2, i)}, 0.0, False, False, None, 0.0)
    msg = steps.message()  # (stacked again at send time: the layout is the same)
    assert isinstance(msg.obs, dict) and msg.obs["x"].tolist() == [[0, 0], [1, 1], [2, 2]]
    for i in range(2):
        steps.add(a, {"x": np.full(2, i)}, 0.0, False, False, None, 0.0)
    msg = steps.message()
    assert isinstance(msg.obs, dict) and msg.obs["x"].tolist() == [[0, 0], [1, 1]]


# -- held updates: one Batch for several episodes -----------------------------------------------------------


@pytest.fixture
def clock(fake_clock, monkeypatch):
    """A fake clock for the socket clients created in the test (and no background flusher)."""
    return fake_clock(client_module, monkeypatch)


def _sent_kinds(client) -> list:
    """Record the messages of every send of ``client`` (once connected), one list per send."""
    client._ensure()
    out: list = []
    transport = client.transport
    send = transport.send
    transport.send = lambda items: out.append(list(items)) or send(items)
    return out


def test_fast_episodes_are_reported_in_batches_with_their_task_requests(clock):
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=8, update_batch=8, max_update_delay=0.5)
        sent = _sent_kinds(c)
        for e in range(40):  # 10 ms episodes: 50 fit in max_update_delay, so 8 tasks are kept ready
            a = c.next_task()
            clock.t += 0.01
            c.record_episode(a, float(e), 10, 1.0)
        assert c.request_size == 8
        c.close()
        m = server.metrics()
        # every episode applied once, in order, and every task accounted for
        assert [ep[1] for ep in server.curriculum.episodes] == [float(e) for e in range(40)]
        assert m["sync/env0/tasks_consumed"] == 40 and m["sync/env0/tasks_in_flight"] == 0
        assert m["sync/env0/updates_applied"] == 40 + 1  # + the goodbye
        # once the pace is known, the episodes go out several at a time as one report, asking in it for the
        # tasks they need: one message per send
        assert all(len(s) == 1 for s in sent)
        reports = [s[0] for s in sent if isinstance(s[0], P.Report)]
        assert len(sent) <= 20 and max(len(r.episodes) for r in reports) >= 6  # vs 40 updates + goodbye
        assert sum(r.request > 0 for r in reports) >= 2
        rows = [row for r in reports for row in r.episodes]
        assert [row[2] for row in rows] == [float(e) for e in range(40)]  # every episode once, in order
        # every send is counted, the goodbye too (the first task request goes with the first reset)
        assert c.stats["updates_sent"] == 40 and c.stats["sends"] == len(sent)


def test_slow_episodes_are_reported_one_message_each(clock):
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=8, max_update_delay=0.5)
        sent = _sent_kinds(c)
        for _ in range(6):  # 2 s episodes: longer than max_update_delay
            a = c.next_task()
            clock.t += 2.0
            c.record_episode(a, 1.0, 10, 1.0)
        assert c.request_size == 1 and c.held_updates == 0
        # the first reset asks for its task, then for one ahead; then one message per episode
        kinds = [(type(s[0]).__name__, len(s), len(s[0].updates)) for s in sent]
        assert kinds == [("Report", 1, 0)] * 2 + [("Report", 1, 1)] * 6
        assert all(s[0].request >= 1 for s in sent)  # each asking for the next task
        c.close()
        assert server.metrics()["sync/env0/tasks_in_flight"] == 0


def test_held_updates_are_bounded_by_count_and_delay(clock):
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=8, update_batch=3, max_update_delay=0.5)
        for _ in range(12):  # learn a fast pace: 8 tasks ready
            a = c.next_task()
            clock.t += 0.01
            c.record_episode(a, 1.0, 1, 1.0)
        c.flush()
        assert c.held_updates == 0
        a = c.next_task()
        c.record_progress(a, 0.5)  # progress updates ask for nothing: held
        c.record_progress(a, 0.6)
        assert c.held_updates == 2
        c.record_progress(a, 0.7)  # the third: update_batch reached
        assert c.held_updates == 0
        c.record_progress(a, 0.8)
        clock.t += 0.49
        c.record_progress(a, 0.9)
        assert c.held_updates == 2
        clock.t += 0.02  # the oldest has now waited max_update_delay
        c.record_progress(a, 1.0)
        assert c.held_updates == 0
        _wait(lambda: len(server.curriculum.progress) == 6)
        assert [p[1] for p in server.curriculum.progress] == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
        c.close()


def test_an_idle_client_s_held_updates_go_out_in_the_background():
    with serve(Recorder()) as server:
        c = CurriculumClient(server.address, prefetch=8, max_update_delay=0.1)
        a = c.next_task()
        c.record_progress(a, 0.5)
        assert c.held_updates == 1
        _wait(lambda: len(server.curriculum.progress) == 1, timeout=3.0)  # the env never called again
        assert c.held_updates == 0
        c.close()


def test_no_holding_sends_every_update_on_its_own():
    with serve(Recorder()) as server:
        for kw in ({"max_update_delay": 0}, {"update_batch": 1}):
            c = CurriculumClient(server.address, **kw)
            assert not c.holds_updates
            sent = _sent_kinds(c)
            _play(c, 5)
            assert all(len(s) == 1 and len(s[0].updates) <= 1 for s in sent if isinstance(s[0], P.Report))
            c.close()


def test_server_applies_a_report_in_order_and_answers_its_request_once():
    cur = Recorder()
    with serve(cur) as server:
        c = CurriculumClient(server.address, prefetch=0)
        a = c.next_task()
        b = c.next_task()
        env = c.env_id
        updates = (P.EpisodeEnd(a.task_id, a.task, 1.0, 3, 1.0),
                   P.EpisodeEnd(999, 5, 2.0, 3, 1.0),  # a task id it never held: refused
                   P.EpisodeEnd(b.task_id, b.task, 3.0, 3, 1.0))
        sock = c.transport.conn.socket
        sock.send_multipart(P.encode(P.Report(env, updates, request=3)))
        replies = []
        while len(replies) < 2:
            assert sock.poll(5000), "no reply from the server"
            frames = sock.recv_multipart()
            assert P.unpack_envelope(frames[0])[0] == P.DATA  # replies to this client are numbered
            replies.append(P.decode([frames[0][P.ENVELOPE_SIZE:], *frames[1:]]))
        err, tasks = replies
        assert isinstance(err, P.Error) and err.code == "unknown_task"
        assert isinstance(tasks, P.Tasks) and len(tasks.task_ids) == 3  # in one reply
        assert [e[1] for e in cur.episodes] == [1.0, 3.0]  # the refused one did not reach the curriculum
        m = server.metrics()
        assert m[f"sync/env{env}/updates_rejected"] == 1 and m[f"sync/env{env}/tasks_consumed"] == 2
        assert m[f"sync/env{env}/tasks_in_flight"] == 3


def test_server_applies_episode_rows_one_by_one():
    """A report's episodes: every row applied in order as its own update; a refused row (a task id the env
    never held, a non-finite return) reaches no curriculum, is counted, is named in one Error reply, and
    does not stop the rows after it; the request is answered after all of them."""
    cur = Recorder()
    with serve(cur) as server:
        c = CurriculumClient(server.address, prefetch=0)
        a, b, d = c.next_task(), c.next_task(), c.next_task()
        env = c.env_id
        rows = ((a.task_id, a.task, 1.0, 3, 1.0, True, {}, ()), (999, 5, 2.0, 3, 1.0, True, {}, ()),
                (b.task_id, b.task, 3.0, 4, 0.5, False, {}, ()),
                (d.task_id, d.task, float("inf"), 5, 1.0, True, {}, ()))
        msg = P.Report(env, tuple(P.EpisodeEnd(*row) for row in rows), request=2)
        sock = c.transport.conn.socket
        sock.send_multipart(P.encode(msg))
        replies = []
        while len(replies) < 2:
            assert sock.poll(5000), "no reply from the server"
            frames = sock.recv_multipart()
            replies.append(P.decode([frames[0][P.ENVELOPE_SIZE:], *frames[1:]]))
        err, tasks = replies
        assert isinstance(err, P.Error) and err.code == "unknown_task"
        assert "2 of 4 updates" in err.message
        assert isinstance(tasks, P.Tasks) and len(tasks.task_ids) == 2
        # a's episode reached the curriculum; b's was cut short (ended False): consumed, no episode
        assert [e[:3] for e in cur.episodes] == [(a.task, 1.0, 3)]
        m = server.metrics()
        assert m[f"sync/env{env}/updates_received"] == 4 and m[f"sync/env{env}/updates_rejected"] == 2
        assert m[f"sync/env{env}/updates_applied"] == 2 and m[f"sync/env{env}/episodes_abandoned"] == 1
        assert m[f"sync/env{env}/tasks_consumed"] == 2 and m[f"sync/env{env}/tasks_in_flight"] == 1 + 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    durations=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    progress_every=st.integers(0, 3),
    update_batch=st.integers(1, 10),
    max_update_delay=st.sampled_from([0.0, 0.05, 0.5, math.inf]),
    prefetch=st.integers(0, 8),
)
def test_held_updates_arrive_exactly_once_and_in_order(
    fake_clock, durations, progress_every, update_batch, max_update_delay, prefetch
):
    from magister.sync import feed as client_module

    with pytest.MonkeyPatch.context() as patch, serve(Recorder()) as server:
        clock = fake_clock(client_module, patch)  # a fresh clock and patch per example
        c = CurriculumClient(
            server.address, prefetch=prefetch, update_batch=update_batch, max_update_delay=max_update_delay
        )
        progress_sent = []
        for e, d in enumerate(durations):
            a = c.next_task()
            if progress_every and e % progress_every == 0:
                c.record_progress(a, 0.5)
                progress_sent.append(a.task)
            clock.t += d
            c.record_episode(a, float(e), 1, 1.0)
            assert c.held_updates < update_batch or update_batch == 1
        c.close()
        cur = server.curriculum
        assert [ep[1] for ep in cur.episodes] == [float(e) for e in range(len(durations))]
        assert [p[0] for p in cur.progress] == progress_sent
        m = server.metrics()
        assert m["sync/env0/tasks_consumed"] == len(durations)
        assert m["sync/env0/tasks_in_flight"] == 0 and m["sync/env0/updates_rejected"] == 0
        assert m["sync/env0/tasks_sampled"] == m["sync/env0/tasks_consumed"] + m["sync/env0/tasks_returned"]


def _step_records(tasks: int, max_size: int) -> st.SearchStrategy:
    """Steps as (task index, reward, terminated, truncated, progress)."""
    step = st.tuples(
        st.integers(0, tasks - 1), st.floats(-5, 5), st.booleans(), st.booleans(), st.floats(0, 1)
    )
    return st.lists(step, min_size=1, max_size=max_size)


@settings(max_examples=60, deadline=None)
@given(_step_records(3, 40))
def test_step_buffer_columns_match_the_steps_recorded(steps):
    """Tasks stored as runs and flags stored sparsely expand back to exactly the steps recorded."""
    from magister.sync.feed import Assignment
    from magister.sync.steps import StepBuffer as _StepBuffer

    assignments = [Assignment(7, "a"), Assignment(8, "b"), Assignment(-1, "c", False)]
    buf = _StepBuffer(False, False, frozenset(), capacity=1000)
    for k, rew, term, trunc, prog in steps:
        buf.add(assignments[k], None, rew, term, trunc, None, prog)
    assert len(buf) == len(steps)
    for msg in (buf.message(), None):
        if msg is None:  # the same steps again, through the wire
            for k, rew, term, trunc, prog in steps:
                buf.add(assignments[k], None, rew, term, trunc, None, prog)
            (msg,) = P.decode(P.encode(P.Report(3, (buf.message(),)))).updates
        assert len(buf) == 0
        assert msg.task_ids.tolist() == [assignments[k].task_id for k, *_ in steps]
        assert list(msg.tasks) == [assignments[k].task for k, *_ in steps]
        assert msg.rewards.tolist() == [s[1] for s in steps]
        assert msg.terminated.tolist() == [s[2] for s in steps]
        assert msg.truncated.tolist() == [s[3] for s in steps]
        assert msg.progress.tolist() == [s[4] for s in steps]


@settings(max_examples=60, deadline=None)
@given(_step_records(2, 30), st.integers(1, 7), st.booleans())
def test_step_buffers_send_full_batches_of_exactly_the_steps_recorded(steps, capacity, with_infos):
    """The step buffer, with or without infos, hands every ``capacity`` steps to ``on_full`` as one batch,
    the flags on the right steps, nothing lost or repeated."""
    from magister.sync.feed import Assignment
    from magister.sync.steps import StepBuffer as _StepBuffer

    sent: list = []
    buf = _StepBuffer(
        False, with_infos, frozenset(), capacity=capacity, on_full=lambda: sent.append(buf.message())
    )
    assignments = [Assignment(7, "a"), Assignment(8, "b")]
    for k, rew, term, trunc, prog in steps:
        buf.add(assignments[k], None, rew, term, trunc, {"k": k}, prog)
    if len(buf):
        sent.append(buf.message())
    n = len(steps)
    assert [len(m) for m in sent] == [capacity] * (n // capacity) + ([n % capacity] if n % capacity else [])
    assert [t for m in sent for t in m.tasks] == [assignments[k].task for k, *_ in steps]
    assert [r for m in sent for r in m.rewards.tolist()] == [s[1] for s in steps]
    assert [t for m in sent for t in m.terminated.tolist()] == [s[2] for s in steps]
    assert [t for m in sent for t in m.truncated.tolist()] == [s[3] for s in steps]
    assert [p for m in sent for p in m.progress.tolist()] == [s[4] for s in steps]
    assert all((m.infos is not None) == with_infos for m in sent)
    if with_infos:
        assert [i["k"] for m in sent for i in m.infos] == [s[0] for s in steps]


def test_background_flusher_sleeps_until_the_oldest_held_update_is_due():
    """It wakes when the oldest held update of its clients is due, at least a quarter and at most all of
    the shortest max_update_delay later (a busy env sends its own updates: the thread seldom wakes)."""

    class Held:
        def __init__(self, delay: float, due_in: float | None) -> None:
            self._flush_period = delay  # (a feed's, for max_update_delay ``delay`` and no heartbeat)
            self._held = client_module._Held()
            if due_in is not None:
                self._held.updates.append(b"update")
                self._held.send_by = 100.0 + due_in

    sleep = client_module._sleep
    client_module._now = lambda: 100.0  # (restored below)
    assert sleep([]) is None  # no client registered: sleeps until woken
    assert sleep([Held(0.5, None)]) == 0.5  # nothing held
    assert sleep([Held(0.5, 0.3), Held(0.5, 0.4)]) == pytest.approx(0.3)  # the oldest first
    assert sleep([Held(0.5, 0.01)]) == 0.125  # due very soon (or overdue: a busy client skipped)
    assert sleep([Held(0.5, -2.0)]) == 0.125
    assert sleep([Held(2.0, None), Held(0.5, None)]) == 0.5  # the shortest period
    assert sleep([Held(math.inf, None)]) is None  # (a feed whose server no longer asks for heartbeats)
    client_module._now = time.monotonic


def test_background_flusher_ends_when_its_last_client_is_collected(monkeypatch):
    flusher = client_module._Flusher()  # its own (earlier tests' clients may live on)
    monkeypatch.setattr(client_module, "_flusher", flusher)
    with serve(Recorder(), env_timeout=None) as server:  # (no heartbeats: the flusher sleeps 30 s)
        c = CurriculumClient(server.address, max_update_delay=30.0)
        c.next_task()  # connected: registered with the flusher, which now sleeps up to 30 s
        assert c in flusher.feeds and client_module._sleep(list(flusher.feeds)) == 30.0
        thread = flusher.thread
        c.close()  # closing unregisters, and the last one to go stops the thread
        assert not thread.is_alive() and flusher.thread is None
        c2 = CurriculumClient(server.address, max_update_delay=30.0)
        c2.next_task()  # a new thread; collecting an unclosed client must wake it too
        thread = flusher.thread
        assert c2 in flusher.feeds and thread.is_alive()
        c2.transport.close(wait=False)  # (an abandoned client: its socket gone, the object dropped)
        c2.transport = None
        del c2
        gc.collect()
        thread.join(timeout=5)  # woken by the collection, not by its 30 s timeout
        assert not thread.is_alive() and flusher.thread is None


def test_registrations_of_returning_envs_are_counted_as_rejoins():
    from magister.sync.core import SyncCore

    core = SyncCore(Recorder())
    first = core.register_env(P.Hello(1)).env_id
    core.depart(first, "timeout")
    again = core.register_env(P.Hello(1, rejoin=first)).env_id
    m = core.sync_metrics()
    assert again == first and m["sync/envs"] == 1 and m["sync/envs_rejoined"] == 1  # back under its id
    assert core.is_live(first) and core.register_env(P.Hello(1, rejoin=first)).env_id != first


def test_one_sweep_declares_gone_the_envs_an_endpoint_names_or_that_fell_silent(monkeypatch):
    """The core's one liveness sweep: the envs an endpoint's check names leave with its reason, a silent
    watched env leaves by timeout; each takes its contact (and its key in the core's index) with it."""
    from magister.sync import core as core_module
    from magister.sync.core import SyncCore, SyncRejected

    core = SyncCore(Recorder(), env_timeout=5.0)
    a, b, c = (core.register_env(P.Hello(1)).env_id for _ in range(3))
    for env_id, key in ((a, b"a"), (b, b"b"), (c, b"c")):
        core.attach(env_id, f"peer-{key.decode()}", key)
    with pytest.raises(ValueError, match="contact key b'a'"):
        core.attach(c, "peer-c", b"a")  # a key names one live env
    core.assign_tasks(a, 2)
    core.heard(b)
    shown = []
    later = time.monotonic() + 10.0  # past env_timeout for b, which was heard before it
    monkeypatch.setattr(core_module, "time", SimpleNamespace(monotonic=lambda: later))  # (the core's clock)
    core.heard(c)  # c speaks up: not silent
    gone = core.sweep(lambda envs: shown.extend(envs) or [a], "dead")
    assert gone == [a, b] and sorted(e for e, _, _ in shown) == [a, b, c]
    assert core.departures == {"dead": 1, "timeout": 1} and core.counters(a).tasks_abandoned == 2
    assert (core.contact(b"a"), core.contact(b"b"), core.contact(b"c")) == (None, None, "peer-c")
    m = core.sync_metrics()
    assert [m[f"sync/env{e}/connected"] for e in (a, b, c)] == [0, 0, 1] and m["sync/envs_departed"] == 2
    assert m["sync/total/tasks_sent"] == 2 == m["sync/total/tasks_abandoned"]
    with pytest.raises(SyncRejected) as refused:
        core.assign_tasks(a, 1)
    assert refused.value.code == "unknown_env"


def test_a_ledger_listing_derived_counts_loads():
    """Ledgers of earlier versions list ``tasks_sent`` and ``connected`` with the counts; both are derived."""
    from magister.sync.core import EnvCounters, SyncCore

    counts = {**asdict(EnvCounters(tasks_sampled=3, tasks_consumed=1)), "tasks_sent": 3, "connected": 1}
    core = SyncCore(Recorder())
    core.load_ledger({"envs": {"4": {"counters": counts, "leases": [], "stream": None}}, "ended": [],
                      "next_env": 5})
    assert core.counters(4).tasks_sent == 3 and core.counters(4).tasks_in_flight == 2
    assert core.sync_metrics()["sync/env4/connected"] == 0  # restored, not back yet
    with pytest.raises(TypeError):
        core.load_ledger({"envs": {"4": {"counters": {"no_such_count": 1}, "leases": [], "stream": None}},
                          "ended": [], "next_env": 5})
