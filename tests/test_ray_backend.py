"""The Ray backend of the sync layer: a curriculum in a named Ray actor, envs in Ray workers.

One Ray session, a fresh local instance (``ray.init(address="local", num_cpus=2)``, no dashboard), is
shared by this module and ``test_rllib.py`` and shut down when pytest ends. Ray 2.60 no longer has
``local_mode`` (``ray.init(local_mode=True)`` raises); a small local instance started in the test process
is the lightest supported mode."""

from __future__ import annotations

import collections
import gc
import logging
import math
import os
import pickle
import time

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

ray = pytest.importorskip("ray")

from magister.curricula.base import Curriculum, TaskSample  # noqa: E402
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper  # noqa: E402
from magister.env_wrappers.task_wrapper import TaskWrapper  # noqa: E402
from magister.sync import feed as client_module  # noqa: E402
from magister.sync import protocol as P  # noqa: E402
from magister.sync import ray_server  # noqa: E402
from magister.sync.feed import ServerUnavailableError, SyncError, connect  # noqa: E402
from magister.sync.ray_server import (  # noqa: E402
    RayClient,
    RayCurriculumServer,
    parse_ray_address,
    ray_address,
    serve_ray,
)
from magister.task_spaces.discrete import Discrete  # noqa: E402

pytestmark = [pytest.mark.timeout(180)]


_names = iter(range(10**6))


def unique_name(prefix: str = "cur") -> str:
    return f"magister_test_{prefix}_{next(_names)}"


# -- a tiny env and a recording curriculum -------------------------------------------------------------


class Corridor(gym.Env):
    """Task ``t``: ``1 + t % 4`` steps of reward ``1 + t % 3``."""

    observation_space = gym.spaces.Box(-1e12, 1e12, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.task, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.task, 0.0]), {}

    def step(self, action):
        self.t += 1
        term = self.t >= 1 + self.task % 4
        return np.array([self.task, self.t], np.float64), float(1 + self.task % 3), term, False, {}


class CorridorTask(TaskWrapper):
    def change_task(self, task):
        self.env.unwrapped.task = task

    def task_progress(self, obs, rew, term, trunc, info):
        return float(term)


def make_env(address: str, **kwargs) -> GymnasiumSyncWrapper:
    return GymnasiumSyncWrapper(CorridorTask(Corridor(), Discrete(10**9)), address, **kwargs)


class Recorder(Curriculum):
    """Unique tasks 0, 1, 2, ...; every fifth is evaluation-only; records everything it is told.

    ``set_step_updates`` / ``set_broken`` change it between tests through ``server.call`` (the step-updates
    flag is read when an env connects), so one actor serves most tests.
    """

    def __init__(self, step_updates: bool = True) -> None:
        super().__init__(Discrete(10**9))
        self.requires_step_updates = step_updates
        self.broken = False
        self.next = 0
        self.episodes: list[tuple] = []
        self.steps: collections.Counter = collections.Counter()
        self.on_demand: list[dict] = []
        self.abandoned: list[tuple] = []

    def set_step_updates(self, flag: bool) -> None:
        self.requires_step_updates = flag

    def set_broken(self, flag: bool) -> None:
        self.broken = flag

    def sample(self, k=1):
        if self.broken:
            raise RuntimeError("no tasks today")
        out = list(range(self.next, self.next + k))
        self.next += k
        self.num_sampled += k
        return out

    def sample_tasks(self, k=1):
        return [TaskSample(t, t % 5 != 0) for t in self.sample(k)]

    def update_on_step_batch(self, batch, env_id=None):
        for t in batch.tasks:
            self.steps[t] += 1

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.num_episodes += 1
        self.episodes.append((task, episode_return, length, progress, env_id))

    def update_on_demand(self, metrics):
        self.on_demand.append(dict(metrics))

    def on_task_abandoned(self, task, env_id=None):
        self.abandoned.append((task, env_id))

    def records(self):
        return {"episodes": self.episodes, "steps": dict(self.steps), "on_demand": self.on_demand,
                "abandoned": self.abandoned}

    def state_dict(self):
        state = super().state_dict()
        state["next"] = self.next
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.next = int(state["next"])


# -- addresses and construction (no Ray session needed) ---------------------------------------------------

_label = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=20)


@given(name=_label, namespace=st.none() | _label)
def test_address_round_trip(name, namespace):
    address = ray_address(name, namespace)
    assert address.startswith("ray://")
    assert parse_ray_address(address) == (name, namespace)


@pytest.mark.parametrize("bad", ["tcp://127.0.0.1:1", "ray://", "ray:///cur", "ray://ns/", "cur", 3])
def test_parse_rejects_non_ray_addresses(bad):
    with pytest.raises(ValueError, match="ray://"):
        parse_ray_address(bad)


def test_ray_address_rejects_ambiguous_names():
    with pytest.raises(ValueError, match="contains '/'"):
        ray_address("a/b")
    with pytest.raises(ValueError, match="namespace"):
        ray_address("a", "x/y")
    with pytest.raises(ValueError, match="non-empty"):
        ray_address("")
    assert parse_ray_address(ray_address("a/b", "ns")) == ("a/b", "ns")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"prefetch": -1}, "prefetch"),
        ({"prefetch": True}, "prefetch"),
        ({"timeout": 0}, "timeout"),
        ({"close_timeout": -1.0}, "close_timeout"),
        ({"max_pending_updates": 0}, "max_pending_updates"),
        ({"update_batch": 0}, "update_batch"),
        ({"update_batch": 2.0}, "update_batch"),
        ({"max_update_delay": -0.1}, "max_update_delay"),
        ({"max_update_delay": float("nan")}, "max_update_delay"),
        ({"max_update_delay": "1s"}, "max_update_delay"),
    ],
)
def test_client_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RayClient("ray://cur", **kwargs)


def test_client_rejects_bad_types():
    with pytest.raises(TypeError, match="fallback_task_space"):
        RayClient("ray://cur", fallback_task_space="Discrete(3)")
    with pytest.raises(TypeError, match="strip_keys"):
        RayClient("ray://cur", strip_keys="obs")
    with pytest.raises(ValueError, match="ZeroMQ"):
        connect("ray://cur", curve_server_key=b"k" * 40)


def test_connect_dispatches_ray_addresses_and_client_pickles():
    feed = connect("ray://team/cur", prefetch=3, timeout=1.5, strip_keys=("x",))
    assert isinstance(feed, RayClient)
    assert (feed.actor_name, feed.namespace, feed.prefetch, feed.options.timeout) == ("cur", "team", 3, 1.5)
    clone = pickle.loads(pickle.dumps(feed))
    assert (clone.address, clone.prefetch, frozenset(clone.options.strip_keys), clone.env_id) == (
        "ray://team/cur",
        3,
        frozenset({"x"}),
        None,
    )


def test_large_arrays_travel_out_of_band_and_small_messages_as_one_frame():
    small = P.Report(0, (P.EpisodeEnd(3, 7, 1.5, 10, 1.0),))
    frame = ray_server._pack(small)
    assert isinstance(frame, bytes) and ray_server._unpack(frame) == small
    obs = {"glyphs": np.arange(3 * 40_000, dtype=np.int16).reshape(3, 40_000), "tiny": np.ones((3, 2))}
    flags = np.zeros(3, bool)
    part = P.Steps(np.array([1, 1, 1]), (7, 7, 7), np.ones(3), flags, flags, np.zeros(3), obs)
    big = P.Report(0, (part,))
    frame = ray_server._pack(big)
    # the 240 KB array rides next to the header as a flat uint8 view of the original (no copy)
    assert isinstance(frame, tuple) and len(frame) == 2 and isinstance(frame[0], bytes)
    assert frame[1].dtype == np.uint8 and frame[1].nbytes == obs["glyphs"].nbytes
    assert np.shares_memory(frame[1], obs["glyphs"])
    (back,) = ray_server._unpack(frame).updates
    np.testing.assert_array_equal(back.obs["glyphs"], obs["glyphs"])
    np.testing.assert_array_equal(back.obs["tiny"], obs["tiny"])
    with pytest.raises(P.ProtocolError, match="bytes or uint8 arrays"):
        ray_server._unpack((frame[0], "not a buffer"))


# -- with a Ray session ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(ray_session):
    """One curriculum actor (in a namespace) for the tests that only look at their own env's counters."""
    with serve_ray(Recorder(), name=unique_name("shared"), namespace="magister_tests") as server:
        yield server


def test_serve_ray_validates(shared):
    with pytest.raises(TypeError, match="Curriculum"):
        serve_ray(object(), name=unique_name())
    with pytest.raises(ValueError, match="actor_options"):
        serve_ray(Recorder(), name=unique_name(), actor_options={"name": "x"})
    with pytest.raises(ValueError, match="already taken"):
        serve_ray(Recorder(), name=shared.name, namespace="magister_tests")
    assert shared.address == f"ray://magister_tests/{shared.name}"
    handle = pickle.loads(pickle.dumps(shared))  # sent to a worker: a handle to its address
    assert type(handle).__name__ == "ServerHandle" and handle.address == shared.address


def test_the_envs_of_a_process_look_the_actor_up_once_and_again_once_replaced(ray_session, monkeypatch):
    """Eight feeds in this process find the actor with one lookup; once that actor is gone for good and a
    new one serves under its name, the next feed looks it up again and registers with the new one."""
    from magister.sync.transports import ray as ray_transport

    lookups = []
    real = ray_transport.lookup_actor
    monkeypatch.setattr(ray_transport, "lookup_actor", lambda *a: lookups.append(a) or real(*a))
    name = unique_name("lookup")
    first = serve_ray(Recorder(), name=name)
    feeds = [RayClient(first.address, timeout=30) for _ in range(8)]
    for feed in feeds:
        feed.next_task()
    assert len(lookups) == 1 and first.metrics()["sync/envs_live"] == 8
    for feed in feeds:
        feed.close()
    first.close()
    with serve_ray(Recorder(), name=name) as second:
        feed = RayClient(second.address, timeout=30)
        feed.next_task()
        assert len(lookups) == 2 and second.metrics()["sync/envs_live"] == 1
        feed.close()


def test_the_envs_of_a_process_send_together_in_one_call(ray_session, monkeypatch):
    """The sends of a process's envs wait in one outbox and reach the actor as one call, each env's applied
    under its own id; with one env in the process, each send goes out at once."""
    from magister.sync.transports import ray as ray_transport

    monkeypatch.setattr(ray_transport, "BATCH_WINDOW", 600.0)  # only a read or a close sends the batch
    with serve_ray(Recorder(step_updates=False), name=unique_name("batch")) as server:
        calls = lambda: server.metrics()["sync/calls_received"]  # noqa: E731
        alone = RayClient(server.address, prefetch=0, timeout=30)
        a = alone.next_task()
        before = calls()
        alone.record_episode(a, 1.0, 1, 0.0)
        alone.flush()  # one env in the process: at once, one call
        wait_for(lambda: server.metrics()[f"sync/env{alone.env_id}/episodes_applied"] == 1, 30, "the update")
        assert calls() == before + 1
        feeds = [alone] + [RayClient(server.address, prefetch=0, timeout=30) for _ in range(19)]
        tasks = [alone.next_task()] + [f.next_task() for f in feeds[1:]]  # (each waits: a call each)
        before = calls()
        for feed, task in zip(feeds, tasks):
            feed.record_episode(task, 2.0, 3, 0.0)
            feed.flush()  # held in the outbox
        assert calls() == before
        feeds[0].close()  # its goodbye joins the batch, then the batch goes out: one call
        m = server.metrics()
        assert m["sync/calls_received"] == before + 1
        assert [m[f"sync/env{f.env_id}/episodes_applied"] for f in feeds] == [2] + [1] * 19
        assert m[f"sync/env{alone.env_id}/connected"] == 0 and m["sync/envs_live"] == 19
        for feed in feeds[1:]:
            feed.close()
        assert server.metrics()["sync/envs_live"] == 0 and sum(f.stats["errors_received"] for f in feeds) == 0
        (outbox,) = [o for (pid, name, _), o in ray_transport._outboxes.items()
                     if (pid, name) == (os.getpid(), server.name)]
        wait_for(lambda: outbox.thread is None, 30, "the outbox's thread to stop with its last env")


def test_learner_proxies(shared):
    n = shared.state_dict()["next"]
    assert shared.sample(3) == [n, n + 1, n + 2]
    samples = shared.sample_tasks(3)
    assert [(s.task, s.train) for s in samples] == [(t, t % 5 != 0) for t in range(n + 3, n + 6)]
    before = len(shared.call("records")["on_demand"])
    shared.update_on_demand({"loss": 0.5})
    ray.get(shared.update_on_demand({"loss": 0.25}, wait=False), timeout=30)
    assert shared.call("records")["on_demand"][before:] == [{"loss": 0.5}, {"loss": 0.25}]
    state = shared.state_dict()
    assert state["next"] == n + 6 and state["class"] == "Recorder"
    shared.sample(4)
    shared.load_state_dict(state)
    assert shared.sample(1) == [n + 6]
    assert shared.metrics()["curriculum/sampled"] == state["num_sampled"] + 1
    with pytest.raises(ValueError, match="public curriculum method"):
        shared.call("_private")
    with pytest.raises(AttributeError, match="no method"):
        shared.call("does_not_exist")
    with pytest.raises(TypeError, match="dict"):
        shared.update_on_demand([1, 2])
    # a second, non-owning proxy reaches the same actor and does not kill it on close
    other = RayCurriculumServer.attach(shared.address, timeout=10)
    assert other.sample(1) == [n + 7]
    other.close()
    assert shared.sample(1) == [n + 8]
    with pytest.raises(SyncError, match="closed"):
        other.metrics()


def test_prefetch_give_back_and_close_accounting(shared):
    n = shared.state_dict()["next"]
    client = RayClient(shared.address, prefetch=2, timeout=30, max_update_delay=math.inf)
    assert client.request_size == 2  # no time bound: always `prefetch` tasks per request
    a = client.next_task()
    assert (a.task, a.train) == (n, n % 5 != 0)
    b = client.next_task()
    assert b.task == n + 1
    client.give_back(b)
    assert client.next_task() == b  # a returned task is handed out again first
    client.give_back(b)
    client.close()
    e = client.env_id
    m = shared.metrics()
    # 2 asked for at connect, 2 more when the second task emptied the buffer: 4 sampled; no episode was
    # reported, so the 3 unused ones were returned and task a, never reported, was abandoned at the goodbye
    assert m[f"sync/env{e}/tasks_sampled"] == 4
    assert m[f"sync/env{e}/tasks_returned"] == 3
    assert m[f"sync/env{e}/tasks_abandoned"] == 1 and m[f"sync/env{e}/tasks_in_flight"] == 0
    assert shared.in_flight(e) == {}
    assert m[f"sync/env{e}/connected"] == 0
    with pytest.raises(SyncError, match="closed"):
        client.next_task()


def test_no_step_updates_when_not_wanted(shared):
    shared.call("set_step_updates", False)
    try:
        env = make_env(shared.address, timeout=30.0)
        for _ in range(6):
            env.reset()
            done = False
            while not done:
                _, _, term, trunc, _ = env.step(0)
                done = term or trunc
        stats, e = env.feed.stats, env.env_id
        env.close()
    finally:
        shared.call("set_step_updates", True)
    m = shared.metrics()
    assert stats["updates_sent"] == 6  # one episode update per episode, no step updates
    assert m[f"sync/env{e}/steps_applied"] == 0 and m[f"sync/env{e}/episodes_applied"] == 6


def test_refused_update_is_counted_and_logged(shared, caplog):
    errors = shared.metrics()["sync/errors_sent"]
    client = RayClient(shared.address, prefetch=0, timeout=30)
    a = client.next_task()
    bogus = a._replace(task_id=a.task_id + 1000)
    with caplog.at_level(logging.ERROR, logger="magister.sync.ray_server"):
        client.record_episode(bogus, 1.0, 1, 1.0)
        client.close()
    m = shared.metrics()
    e = client.env_id
    assert client.stats["errors_received"] == 1
    assert "unknown_task" in caplog.text
    assert m[f"sync/env{e}/updates_rejected"] == 1 and m[f"sync/env{e}/episodes_applied"] == 0
    assert m["sync/errors_sent"] == errors + 1


def test_malformed_frame_gets_an_error_reply(shared):
    before = shared.metrics()
    ((reply,),) = ray.get(shared.actor.handle_many.remote([(0, [b"\x93\x01"], "")]), timeout=30)
    err = P.decode([reply])
    assert isinstance(err, P.Error) and err.code == "malformed"
    welcome = P.encode(P.Welcome(10**6, False, 1))[0]
    ((reply,),) = ray.get(shared.actor.handle_many.remote([(0, [welcome], "")]), timeout=30)
    assert P.decode([reply]).code == "bad_request"
    m = shared.metrics()
    assert m["sync/malformed_frames_unattributed"] == before["sync/malformed_frames_unattributed"] + 2
    assert m["sync/errors_sent"] == before["sync/errors_sent"] + 2


def test_progress_update_consumes_the_task(shared):
    client = RayClient(shared.address, prefetch=0, timeout=30)
    a = client.next_task()
    client.record_progress(a, 0.5)  # progress only
    client.record_progress(a, 1.0, done=True)  # completed mid-episode: consumed
    client.close()
    m = shared.metrics()
    e = client.env_id
    assert m[f"sync/env{e}/progress_applied"] == 2 and m[f"sync/env{e}/tasks_consumed"] == 1
    assert m[f"sync/env{e}/tasks_in_flight"] == 0 and shared.in_flight(e) == {}


def test_back_pressure_waits_instead_of_dropping(shared):
    # update_batch=1: every update is its own call; prefetch=0: each task request is waited for
    client = RayClient(shared.address, prefetch=0, timeout=30, max_pending_updates=2, update_batch=1)
    tasks = [client.next_task() for _ in range(12)]
    for a in tasks:
        client.record_episode(a, 1.0, 1, 1.0)
        assert len(client.transport.calls) <= 2
    # calls 1 and 2 fit; each of the other 10 waited for the oldest reply first
    assert client.stats["send_waits"] == 10 and client.stats["updates_dropped"] == 0
    client.close()
    m = shared.metrics()
    e = client.env_id
    assert m[f"sync/env{e}/episodes_applied"] == 12 and m[f"sync/env{e}/tasks_consumed"] == 12


@pytest.fixture
def clock(fake_clock, monkeypatch):
    """A fake clock for the Ray clients created in the test (and no background flusher): the feed's."""
    return fake_clock(client_module, monkeypatch)


def test_updates_are_batched_into_few_calls_and_all_applied(shared):
    """prefetch=4 without a time bound: one call per 4 episodes carries their updates and asks for the next
    4 tasks; the last held update goes out with the goodbye. Every update is applied exactly once."""
    n = shared.state_dict()["next"]
    client = RayClient(shared.address, prefetch=4, timeout=30, update_batch=8, max_update_delay=math.inf)
    played, held = [], []
    for k in range(12):
        a = client.next_task()
        played.append(a.task)
        client.record_episode(a, float(k), k + 1, 1.0)
        held.append(client.held_updates)
    # call 1 (at connect) asks for 4 tasks; the episode update that leaves one task ready asks for 4 more
    # and carries the updates held until then (episodes 3, 7 and 11: calls 2-4)
    assert held == [1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert client.stats["calls"] == 4 and client.stats["updates_sent"] == 11
    client.close()
    assert client.stats["calls"] == 5 and client.stats["updates_sent"] == 12  # the goodbye took the last
    assert played == list(range(n, n + 12))  # tasks in the order they were sampled
    e = client.env_id
    m = shared.metrics()
    assert m[f"sync/env{e}/tasks_sampled"] == 16 and m[f"sync/env{e}/tasks_consumed"] == 12
    assert m[f"sync/env{e}/tasks_returned"] == 4 and m[f"sync/env{e}/tasks_in_flight"] == 0
    assert m[f"sync/env{e}/episodes_applied"] == 12 and m[f"sync/env{e}/updates_rejected"] == 0
    mine = [x for x in shared.call("records")["episodes"] if x[4] == e]
    assert mine == [(n + k, float(k), k + 1, 1.0, e) for k in range(12)]  # once each, in order


def test_held_updates_go_out_when_due(shared, clock):
    """An update waits at most max_update_delay: the flusher's first tick (called here by hand, the test's
    clock being fake), reset or report after that sends it."""
    shared.call("set_step_updates", False)  # read when the client connects
    try:
        client = RayClient(shared.address, prefetch=0, timeout=30, update_batch=100, max_update_delay=1.0)
        a = client.next_task()  # prefetch=0: asked for and waited for, one call
    finally:
        shared.call("set_step_updates", True)
    assert client.stats["calls"] == 1
    client.record_episode(a, 1.0, 1, 1.0)
    assert client.held_updates == 1
    clock.t += 0.5
    client._send_due()  # a flusher tick: not yet due
    assert client.held_updates == 1 and client.stats["calls"] == 1
    clock.t += 0.5
    client._send_due()  # due: sent on its own
    assert client.held_updates == 0 and client.stats["calls"] == 2
    b = client.next_task()
    client.record_episode(b, 2.0, 2, 1.0)
    clock.t += 2.0
    c = client.next_task()  # a due update rides on the task request
    assert client.held_updates == 0 and client.stats["calls"] == 4
    client.record_progress(c, 0.5)
    client.flush()  # flush sends held updates at once
    assert client.held_updates == 0 and client.stats["calls"] == 5
    client.close()
    e = client.env_id
    m = shared.metrics()
    assert m[f"sync/env{e}/episodes_applied"] == 2 and m[f"sync/env{e}/progress_applied"] == 1
    assert m[f"sync/env{e}/tasks_abandoned"] == 1  # c was never reported as consumed
    assert client.stats["updates_sent"] == 3


def test_background_flusher_sends_held_updates_of_an_idle_env(shared):
    """An env that stops stepping after an episode still gets its update out, about max_update_delay later."""
    client = RayClient(shared.address, prefetch=0, timeout=30, update_batch=100, max_update_delay=0.05)
    a = client.next_task()
    client.record_episode(a, 1.0, 1, 1.0)
    assert client.held_updates == 1
    e = client.env_id
    deadline = time.monotonic() + 20.0  # generous: a loaded machine may delay the thread
    while (shared.metrics()[f"sync/env{e}/episodes_applied"] < 1 or client.stats["calls"] < 2) \
            and time.monotonic() < deadline:  # (the flusher counts its call after making it)
        time.sleep(0.02)
    assert client.held_updates == 0 and client.stats["calls"] == 2
    assert shared.metrics()[f"sync/env{e}/episodes_applied"] == 1
    flusher = client_module._flusher
    thread = flusher.thread
    assert client in flusher.feeds and thread is not None and thread.is_alive()
    client.close()
    assert client not in flusher.feeds  # closed clients are forgotten ...
    gc.collect()  # (socket clients of earlier tests share this process's flusher until collected)
    if not list(flusher.feeds):
        thread.join(timeout=20)  # ... and with none left, the thread ends
        assert not thread.is_alive() and flusher.thread is None


def test_zero_delay_holds_nothing(shared):
    client = RayClient(shared.address, prefetch=0, timeout=30, max_update_delay=0)
    a = client.next_task()
    client.record_episode(a, 1.0, 1, 1.0)
    assert client.held_updates == 0 and client.stats["calls"] == 2
    client.close()


def test_request_size_follows_the_episode_rate(shared, clock):
    """Tasks asked for at once: as many episodes as fit in max_update_delay, between 1 and prefetch."""
    client = RayClient(shared.address, prefetch=8, timeout=30, max_update_delay=0.1)
    assert client.request_size == 1  # rate unknown
    for _ in range(6):
        a = client.next_task()
        clock.t += 0.03
        client.record_episode(a, 1.0, 1, 1.0)
    assert client.request_size == 3  # 0.1 s / 0.03 s per episode
    for _ in range(12):
        a = client.next_task()
        clock.t += 0.001
        client.record_episode(a, 1.0, 1, 1.0)
    assert client.request_size == 8  # fast episodes: capped at prefetch
    for _ in range(12):
        a = client.next_task()
        clock.t += 0.5
        client.record_episode(a, 1.0, 1, 1.0)
    assert client.request_size == 1  # slow episodes: one task ahead, as over sockets
    calls = client.stats["calls"]
    a = client.next_task()
    clock.t += 0.5
    client.record_episode(a, 1.0, 1, 1.0)  # due at once (0.5 s > 0.1 s): sent with its task request
    assert client.held_updates == 0 and client.stats["calls"] == calls + 1
    client.close()
    e = client.env_id
    m = shared.metrics()
    assert m[f"sync/env{e}/episodes_applied"] == 31 and m[f"sync/env{e}/tasks_in_flight"] == 0


def test_refused_update_still_delivers_the_tasks_it_asked_for(shared, caplog):
    client = RayClient(shared.address, prefetch=1, timeout=30, max_update_delay=math.inf)
    a = client.next_task()
    bogus = a._replace(task_id=a.task_id + 1000)
    with caplog.at_level(logging.ERROR, logger="magister.sync.ray_server"):
        client.record_episode(bogus, 1.0, 1, 1.0)  # refused; its call also asked for the next task, c
        b = client.next_task()
        assert client.stats["errors_received"] == 0  # the refusal's reply is read with task c
        c = client.next_task()
    assert a.task_id < b.task_id < c.task_id and client.stats["errors_received"] == 1
    assert "unknown_task" in caplog.text
    for x in (a, b, c):
        client.record_episode(x, 1.0, 1, 1.0)
    client.close()
    e = client.env_id
    m = shared.metrics()
    assert m[f"sync/env{e}/updates_rejected"] == 1 and m[f"sync/env{e}/episodes_applied"] == 3
    assert m[f"sync/env{e}/tasks_in_flight"] == 0


class HeldWorker:
    """A Ray actor playing episodes through a RayClient that holds its updates (killed by the test)."""

    def play(self, address: str, episodes: int):
        self.client = RayClient(address, prefetch=4, timeout=30, update_batch=100, max_update_delay=math.inf)
        played = []
        for k in range(episodes):
            a = self.client.next_task()
            played.append(a.task_id)
            self.client.record_episode(a, 1.0, k + 1, 1.0)
        return self.client.env_id, played, self.client.held_updates


def wait_for(predicate, timeout: float = 60.0, what: str = "a condition"):
    """Poll ``predicate()`` until it returns something truthy (returned), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_killed_worker_is_declared_dead_through_ray_and_its_leases_abandoned(shared):
    # the worker is SIGKILLed holding tasks and updates: Ray reports its process dead, and the actor
    # abandons its leases long before the 60 s env_timeout (on main they stayed in flight for ever)
    worker = ray.remote(num_cpus=1)(HeldWorker).remote()
    env_id, played, held = ray.get(worker.play.remote(shared.address, 6), timeout=60)
    e = env_id
    held_tasks = shared.in_flight(e)
    in_flight = set(held_tasks)
    ray.kill(worker, no_restart=True)
    # 4 tasks at connect; episode 3's update asked for 4 more and carried episodes 1-3; episodes 4-6 were
    # still held when the worker died (lost with it): their 3 tasks and the 2 never played were in flight
    assert held == 3 and set(played[3:]) <= in_flight and not set(played[:3]) & in_flight
    assert len(in_flight) == 5
    m = wait_for(lambda: (m := shared.metrics())[f"sync/env{e}/connected"] == 0 and m, 30, "the dead env")
    assert m[f"sync/env{e}/episodes_applied"] == 3 and m[f"sync/env{e}/tasks_sampled"] == 8
    assert m[f"sync/env{e}/tasks_consumed"] == 3 and m[f"sync/env{e}/tasks_abandoned"] == 5
    assert m[f"sync/env{e}/tasks_in_flight"] == 0 and shared.in_flight(e) == {}
    assert m["sync/envs_dead"] >= 1 and m["sync/envs_timed_out"] == 0
    # on_task_abandoned once for each of them, with the env's id
    mine = [t for t, env in shared.call("records")["abandoned"] if env == e]
    assert sorted(mine) == sorted(held_tasks.values())


def test_silent_env_is_declared_gone_and_a_feed_with_heartbeats_is_not(ray_session):
    with serve_ray(Recorder(step_updates=False), name=unique_name("silent"), env_timeout=2.0) as server:
        # idle feeds: their background thread sends heartbeats (every env_timeout / 4): they stay registered
        # (two in this process: the heartbeats go out in batches, by the outbox's thread)
        beating = RayClient(server.address, prefetch=1, timeout=30, max_update_delay=0)
        other = RayClient(server.address, prefetch=1, timeout=30, max_update_delay=0)
        a, b = beating.next_task(), other.next_task()
        pings, ping = [0], beating.transport.ping

        def counted_ping():
            pings[0] += 1
            ping()

        beating.transport.ping = counted_ping
        # an env that registered and asked for tasks, then went silent (no feed, so no heartbeats)
        hello = ray_server._pack(P.Hello(0, "silent"))
        ((hello,),) = ray.get(server.actor.handle_many.remote([(0, [hello], "")]), timeout=30)
        silent = P.decode([hello]).env_id
        ask = ray_server._pack(P.Report(silent, request=3))
        ray.get(server.actor.handle_many.remote([(silent, [ask], "")]), timeout=30)
        m = wait_for(lambda: (m := server.metrics())[f"sync/env{silent}/connected"] == 0 and m, 30,
                     "the silent env to be declared gone")
        assert m[f"sync/env{silent}/tasks_abandoned"] == 3 and m["sync/envs_timed_out"] == 1
        seen = pings[0]  # another two env_timeouts of idleness for the feed: eight heartbeats
        wait_for(lambda: pings[0] >= seen + 8, 60, "eight more heartbeats")
        m = server.metrics()
        assert m[f"sync/env{beating.env_id}/connected"] == 1 and m["sync/envs_timed_out"] == 1
        assert m[f"sync/env{other.env_id}/connected"] == 1
        for feed, task in ((beating, a), (other, b)):
            feed.record_episode(task, 1.0, 1, 1.0)
            feed.close()
        m = server.metrics()
        assert m[f"sync/env{beating.env_id}/episodes_applied"] == 1 and m["sync/total/tasks_in_flight"] == 0
        abandoned = server.call("records")["abandoned"]
        assert sorted(env for _, env in abandoned) == [silent] * 3


def test_feed_declared_gone_registers_again_under_its_identity(ray_session, monkeypatch):
    monkeypatch.setattr(client_module, "_background_flush", False)  # no heartbeats: it will be declared gone
    with serve_ray(Recorder(step_updates=False), name=unique_name("gone"), env_timeout=0.5) as server:
        client = RayClient(server.address, prefetch=0, timeout=30, max_update_delay=0)
        a = client.next_task()
        first = client.env_id
        wait_for(lambda: server.metrics()[f"sync/env{first}/connected"] == 0, 30, "the env declared gone")
        client.record_episode(a, 2.0, 3, 1.0)  # refused (unknown env): kept, and sent again after the rejoin
        b = client.next_task()
        client.record_episode(b, 1.0, 1, 1.0)
        client.close()
        assert client.stats["rejoins"] == 1 and client.env_id == first  # back under its identity
        rec, m = server.call("records"), server.metrics()
    # a's lease was abandoned once when the env was declared gone: its late report is dropped and counted
    assert [t for t, _ in rec["abandoned"]] == [a.task] and m[f"sync/env{first}/reports_late"] == 1
    assert [(t, r, n) for t, r, n, _, _ in rec["episodes"]] == [(b.task, 1.0, 1)]
    assert m["sync/envs_rejoined"] == 1 and m["sync/envs"] == 1 and m["sync/total/tasks_in_flight"] == 0
    assert m[f"sync/env{first}/episodes_reported"] == 2


class Player:
    """A Ray actor playing episodes one by one through a feed that holds nothing."""

    def start(self, address: str):
        self.client = RayClient(address, prefetch=2, timeout=30, max_update_delay=0, reconnect_timeout=120)
        return self.client.env_id

    def play(self, episodes: int):
        out = []
        for _ in range(episodes):
            a = self.client.next_task()
            self.client.record_episode(a, 1.0, 1, 1.0)
            out.append(a.task)
        return out, self.client.env_id, self.client.stats["rejoins"]

    def close(self):
        self.client.close()
        return self.client.stats


def test_actor_restarts_from_its_checkpoint_and_envs_register_again(ray_session, tmp_path):
    import os
    import signal

    from magister.checkpoint import save

    path = str(tmp_path / "curriculum.ckpt")
    server = serve_ray(Recorder(step_updates=False), name=unique_name("restart"), max_restarts=1,
                       checkpoint=path)
    try:
        player = ray.remote(num_cpus=0)(Player).remote()
        ray.get(player.start.remote(server.address), timeout=60)
        before, _, _ = ray.get(player.play.remote(5), timeout=60)
        save(path, server.state_dict())  # the learner's checkpoint
        ckpt_next = server.state_dict()["next"]
        more, _, _ = ray.get(player.play.remote(3), timeout=60)
        wait_for(lambda: len(server.call("records")["episodes"]) == 8, 30, "the episodes before the kill")
        os.kill(ray.get(server.actor.ping.remote(), timeout=30), signal.SIGKILL)  # the actor's process dies
        after, _, rejoins = ray.get(player.play.remote(6), timeout=120)
        stats = ray.get(player.close.remote(), timeout=60)
        rec, m = server.call("records"), server.metrics()
    finally:
        server.close()
    assert rejoins == 1 and stats["errors_received"] == 0
    assert m["sync/actor_restored"] == 1 and m["sync/envs_rejoined"] == 1
    assert m["sync/envs"] == 1  # the env came back under its identity, with its leases from the checkpoint
    # the episodes the dead actor applied after the checkpoint are counted as lost to the restore
    assert m["sync/env0/episodes_lost_to_restore"] == len(more) == 3
    assert m["sync/env0/episodes_reported"] == len(before) + len(more) + len(after)
    # the leases open at the checkpoint that the env had finished meanwhile end abandoned, once each
    assert sorted(t for t, _ in rec["abandoned"]) == [t for t in more if t < ckpt_next]
    # reports for leases the dead actor issued after the checkpoint are counted as orphaned; the restored
    # curriculum samples on from the checkpoint (ckpt_next is handed out again) and gets the rest once each
    orphaned = int(m["sync/env0/reports_orphaned"])
    assert orphaned >= 1 and [t for t, *_ in rec["episodes"]] == after[orphaned:]
    assert rec["episodes"][0][0] == ckpt_next and ckpt_next in more
    # every lease accounted
    t = {k.split("/")[-1]: v for k, v in m.items() if k.startswith("sync/total/")}
    assert t["tasks_sent"] == t["tasks_consumed"] + t["tasks_returned"] + t["tasks_abandoned"]
    assert t["tasks_in_flight"] == 0 and t["updates_rejected"] == 0


def test_the_envs_of_a_process_each_register_again_after_the_actor_restarts(ray_session, tmp_path):
    """Four feeds in this process send through one outbox; the actor's process is killed and Ray restarts
    it from the checkpoint: each env registers again once, under its own identity, and every episode is
    applied once."""
    import signal

    from magister.checkpoint import save

    path = str(tmp_path / "curriculum.ckpt")
    server = serve_ray(Recorder(step_updates=False), name=unique_name("restart4"), max_restarts=1,
                       checkpoint=path)
    feeds = [RayClient(server.address, prefetch=2, timeout=30, max_update_delay=0, reconnect_timeout=120)
             for _ in range(4)]

    def play(rounds: int) -> None:
        for _ in range(rounds):
            for feed in feeds:
                feed.record_episode(feed.next_task(), 1.0, 1, 1.0)

    try:
        play(3)
        wait_for(lambda: len(server.call("records")["episodes"]) == 12, 30, "the episodes before the kill")
        save(path, server.state_dict())
        os.kill(ray.get(server.actor.ping.remote(), timeout=30), signal.SIGKILL)
        play(4)
        for feed in feeds:
            feed.close()
        m = server.metrics()
    finally:
        server.close()
    ids = [feed.env_id for feed in feeds]
    assert [feed.stats["rejoins"] for feed in feeds] == [1] * 4 and len(set(ids)) == 4
    assert sum(feed.stats["errors_received"] + feed.stats["updates_dropped"] for feed in feeds) == 0
    assert m["sync/actor_restored"] == 1 and m["sync/envs_rejoined"] == 4 and m["sync/envs"] == 4
    assert [m[f"sync/env{e}/episodes_applied"] for e in ids] == [7] * 4
    counted = ("reports_orphaned", "episodes_lost_to_restore")
    assert sum(m[f"sync/env{e}/{k}"] for e in ids for k in counted) == 0
    t = {k.split("/")[-1]: v for k, v in m.items() if k.startswith("sync/total/")}
    assert t["tasks_in_flight"] == 0 and t["updates_rejected"] == 0


def test_serve_ray_validates_restart_options(ray_session):
    with pytest.raises(ValueError, match="max_restarts"):
        serve_ray(Recorder(), name=unique_name(), max_restarts=-2)
    with pytest.raises(ValueError, match="set max_restarts"):
        serve_ray(Recorder(), name=unique_name(), checkpoint="x.ckpt")
    with pytest.raises(TypeError, match="checkpoint"):
        serve_ray(Recorder(), name=unique_name(), max_restarts=1, checkpoint=3)
    with pytest.raises(ValueError, match="env_timeout"):
        serve_ray(Recorder(), name=unique_name(), env_timeout=0)
    with pytest.raises(ValueError, match="actor_options"):
        serve_ray(Recorder(), name=unique_name(), actor_options={"max_restarts": 3})


class ObsSums(Curriculum):
    """Records the sum of each step's observation (to check what arrived through the actor)."""

    requires_step_updates = True

    def __init__(self) -> None:
        super().__init__(Discrete(3))
        self.sums: list[int] = []

    def sample(self, k=1):
        self.num_sampled += k
        return [0] * k

    def update_on_step_batch(self, batch, env_id=None):
        self.sums.extend(int(np.asarray(o["frame"], dtype=np.int64).sum()) for o in batch.obs)

    def records(self):
        return self.sums


def test_step_observations_arrive_intact_through_the_actor(ray_session):
    with serve_ray(ObsSums(), name=unique_name("obs"), step_batch_size=4) as server:
        client = RayClient(server.address, prefetch=1, timeout=30)
        a = client.next_task()
        frame = np.zeros((160, 160, 3), np.uint8)  # 77 KB: out of band
        sums = []
        for t in range(10):
            frame[:] = t % 7  # overwritten in place, as NetHack does
            client.step_recorder()(a, {"frame": frame}, 0.0, t == 9, False, {}, 0.0)
            sums.append(int(frame.sum()))
        client.record_episode(a, 0.0, 10, 0.0)
        client.close()
        assert server.call("records") == sums
        m = server.metrics()
    assert m["sync/total/steps_applied"] == 10 and m["sync/total/updates_rejected"] == 0
    # 2 task requests (connect, first task), 3 step batches (large: each sent at once), the episode update
    # asking for the next task, the goodbye
    assert client.stats["calls"] == 7


def test_handle_many_answers_bad_input(shared):
    (reply,) = ray.get(shared.actor.handle_many.remote("not a list"), timeout=30)
    assert [P.decode([r]).code for r in reply] == ["malformed"]
    (reply,) = ray.get(shared.actor.handle_many.remote([(0, [b"\x93\x01", (b"\x93", 5)], "")]), timeout=30)
    assert [P.decode([r]).code for r in reply] == ["malformed", "malformed"]
    (reply,) = ray.get(shared.actor.handle_many.remote([(0, "not a list", "")]), timeout=30)
    assert [P.decode([r]).code for r in reply] == ["malformed"]
    assert ray.get(shared.actor.handle_many.remote([(0, [], "")]), timeout=30) == [None]


def test_sampling_failure_raises_sync_error(shared):
    shared.call("set_broken", True)
    try:
        client = RayClient(shared.address, prefetch=0, timeout=30)
        with pytest.raises(SyncError, match="no tasks today"):
            client.next_task()
        client.close()
    finally:
        shared.call("set_broken", False)


def _run_env(address: str, episodes: int, seed: int):
    env = make_env(address, timeout=60.0)
    played, steps = [], collections.Counter()
    for ep in range(episodes):
        _, info = env.reset(seed=seed + ep)
        task = info["task"]
        if ep % 7 == 3:  # a reset before any step keeps the (unused) task
            _, again = env.reset()
            assert again["task"] == task
        abandon = ep % 5 == 4 and task % 4 != 0  # reset after one step of a longer episode
        done = False
        while not done:
            _, _, term, trunc, info = env.step(0)
            steps[task] += 1
            done = term or trunc
            if abandon:
                break
        played.append((task, bool(info["task_train"]), done))
    env_id = env.env_id
    env.close()
    return env_id, played, dict(steps), env.feed.stats["calls"]


@pytest.mark.slow
@pytest.mark.parametrize("step_updates", [True, False], ids=["steps", "episodic"])
def test_exactly_once_across_ray_workers(ray_session, step_updates):
    run = ray.remote(num_cpus=1)(_run_env)
    with serve_ray(Recorder(step_updates), name=unique_name(), step_batch_size=3) as server:
        results = ray.get([run.remote(server.address, 30, 1000 * i) for i in range(3)], timeout=150)
        rec = server.call("records")
        m = server.metrics()
    # fast episodes: their updates were batched (default options), ~8 messages per call, where one call
    # per message would be more than 30 (episodic) or 60 (with step batches) calls per env
    assert all(calls < (20 if step_updates else 12) for *_, calls in results), [r[3] for r in results]
    env_ids = [r[0] for r in results]
    assert sorted(env_ids) == [0, 1, 2]
    played = [p for r in results for p in r[1]]
    tasks = [t for t, _, _ in played]
    # each task played by exactly one env, exactly once
    assert len(tasks) == len(set(tasks)) == 90
    for env_id, plays, _, _ in results:
        mine = {t for t, _, _ in plays}
        assert all(e[0] not in mine for e in rec["episodes"] if e[4] != env_id)
    # the train flag reached info
    assert all(train == (t % 5 != 0) for t, train, _ in played)
    # every finished episode reached the curriculum exactly once, with its return and length
    finished = sorted(t for t, _, done in played if done)
    assert sorted(e[0] for e in rec["episodes"]) == finished
    for task, ret, length, progress, _ in rec["episodes"]:
        assert (length, ret, progress) == (1 + task % 4, (1 + task % 4) * (1 + task % 3), 1.0)
    # every step record arrived exactly once
    steps = collections.Counter()
    for _, _, s, _ in results:
        steps.update(s)
    assert rec["steps"] == (dict(steps) if step_updates else {})
    # accounting: nothing lost or duplicated
    assert m["sync/envs"] == 3
    assert m["sync/total/tasks_sampled"] == m["curriculum/sampled"]
    assert m["sync/total/tasks_consumed"] == 90
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
    assert m["sync/total/tasks_in_flight"] == 0
    assert m["sync/total/updates_rejected"] == 0 and m["sync/errors_sent"] == 0
    assert m["sync/total/updates_received"] == m["sync/total/updates_applied"]
    assert m["sync/total/episodes_applied"] == len(finished)
    assert m["sync/total/episodes_applied"] + m["sync/total/episodes_abandoned"] == 90
    assert m["sync/total/steps_applied"] == (sum(steps.values()) if step_updates else 0)
    for e in range(3):
        assert m[f"sync/env{e}/connected"] == 0


class LayoutCycle(Curriculum):
    """Cycles through TinyTag layouts; records episodes with their per-agent returns."""

    def __init__(self) -> None:
        super().__init__(Discrete(tasks=[(5, 0.0), (7, 0.1), (9, 0.2)]))
        self.episodes: list[tuple] = []

    def sample(self, k=1):
        out = [(self.num_sampled + i) % 3 for i in range(k)]
        self.num_sampled += k
        return out

    def on_episode(self, episode):  # the record, extras included
        self.episodes.append((episode.task, episode.episode_return, episode.length, episode.extras))

    def records(self):
        return self.episodes


def test_pettingzoo_env_over_ray(ray_session):
    from magister.env_wrappers.sync_wrappers import PettingZooSyncWrapper
    from magister.examples.tiny_pz import TinyTag, TinyTagTask

    with serve_ray(LayoutCycle(), name=unique_name("pz")) as server:
        cur_space = LayoutCycle().task_space
        # a ready-made feed that holds nothing, so each episode reaches the curriculum before the check
        feed = RayClient(server.address, timeout=30, max_update_delay=0)
        env = PettingZooSyncWrapper(TinyTagTask(TinyTag(max_cycles=6), cur_space), feed)
        rng = np.random.default_rng(0)
        played = []
        for ep in range(4):
            _, infos = env.reset(seed=ep)
            played.append(infos["chaser"]["task"])
            assert env.unwrapped.grid.shape[0] == (5, 7, 9)[infos["chaser"]["task"]]
            returns = collections.Counter()
            while env.agents:
                actions = {a: int(rng.integers(5)) for a in env.agents}
                _, rewards, _, _, _ = env.step(actions)
                returns.update(rewards)
            expected = {k: float(v) for k, v in returns.items()}
            assert server.call("records")[-1][3] == {"agent_returns": expected}
        env.close()
        m = server.metrics()
    assert played == [0, 1, 2, 0]
    assert m["sync/total/episodes_applied"] == 4 and m["sync/total/tasks_in_flight"] == 0


def test_missing_actor_raises_naming_it(ray_session):
    client = RayClient("ray://magister_nobody_here", timeout=0.3)
    with pytest.raises(ServerUnavailableError, match="'magister_nobody_here'"):
        client.next_task()


def test_missing_actor_with_fallback_samples_locally(ray_session, caplog):
    space = Discrete(7)
    client = RayClient("ray://magister_nobody_here", timeout=0.2, fallback_task_space=space)
    with caplog.at_level(logging.WARNING, logger="magister.sync.ray_server"):
        tasks = [client.next_task() for _ in range(20)]
    assert all(a.task_id == -1 and 0 <= a.task < 7 and a.train for a in tasks)
    assert caplog.text.count("sampling tasks locally") == 1
    client.record_episode(tasks[0], 1.0, 1, 1.0)  # dropped, no error
    client.close()


def test_dead_actor_raises_naming_it(ray_session):
    name = unique_name("dead")
    server = serve_ray(Recorder(), name=name)
    client = RayClient(server.address, prefetch=0, timeout=20)
    client.next_task()
    ray.kill(server.actor, no_restart=True)
    with pytest.raises(ServerUnavailableError, match=f"'{name}'.*dead|dead.*'{name}'"):
        for _ in range(50):  # the kill is asynchronous: a request may still be answered
            client.next_task()
    with pytest.raises(ServerUnavailableError, match="dead"):
        server.metrics()
    client.close()  # must not raise
    server.close()
