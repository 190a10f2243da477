"""The engine room's surface: the typed episode record, refusals that are counted and seen, a refused reset
that closes clean, encoded tasks in ``reset``, malformed addresses, and the length of the task's and the
episode's paths through the sync layer (counted in frames, so a refactor that lengthens them fails here)."""

from __future__ import annotations

import logging
import sys

import gymnasium as gym
import numpy as np
import pytest

from magister import GymnasiumSyncWrapper, serve
from magister.curricula import Curriculum, DomainRandomization, Episode, TaskSample
from magister.env_wrappers import TaskWrapper
from magister.sync import FeedOptions, SyncRejected, check_address, connect
from magister.task_spaces import Discrete


class Steps(gym.Env):
    """An episode of ``1 + task`` steps; reward 1 on the last."""

    observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.length, self.t = 1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return np.full(1, self.t, np.float32), float(done), done, False, {}


class StepsTask(TaskWrapper):
    def change_task(self, task):
        self.env.unwrapped.length = 1 + ["short", "medium", "long"].index(task)


SPACE = Discrete(tasks=["short", "medium", "long"])  # named tasks: the encoded task (an index) differs


def make_env(source, options=None, **kw) -> GymnasiumSyncWrapper:
    return GymnasiumSyncWrapper(StepsTask(Steps(), SPACE), source, options, **kw)


def play(env: gym.Env, episodes: int) -> None:
    for _ in range(episodes):
        env.reset()
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(0)
            done = term or trunc


class Forwarding(DomainRandomization):
    """The most common Python override: forwards whatever it gets."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.seen = 0

    def update_on_episode(self, *args, **kwargs):
        self.seen += 1
        return super().update_on_episode(*args, **kwargs)


@pytest.mark.parametrize("transport", ["in-process", "ipc", "ray"])
def test_an_override_forwarding_args_and_kwargs_gets_every_episode(transport, request):
    cur = Forwarding(SPACE, seed=0)
    if transport == "ray":
        pytest.importorskip("ray")
        request.getfixturevalue("ray_session")
        from magister.sync.ray_server import serve_ray

        server = serve_ray(cur, name="forwarding")  # (the actor holds a copy of cur)
    else:
        server = serve(cur) if transport == "ipc" else None
    env = make_env(server.address if server else cur, max_update_delay=0.0)
    try:
        play(env, 5)
    finally:
        env.close()
    if server is not None:
        m = server.metrics()
        server.close()
        assert m["sync/total/episodes_applied"] == 5 and m["sync/total/updates_rejected"] == 0
        assert m["curriculum/episodes"] == 5  # every episode reached the override (and its super call)
    if transport != "ray":
        assert cur.seen == 5


class RecordReader(Curriculum):
    """Reads the whole record: the flags it handed out come back with each episode."""

    def __init__(self) -> None:
        super().__init__(SPACE, seed=0)
        self.episodes: list[Episode] = []
        self.n = 0

    def sample(self, k=1):
        return [0] * k

    def sample_tasks(self, k=1):
        out = [TaskSample(i % 2, train=i % 2 == 0, control=i % 2 == 1) for i in range(self.n, self.n + k)]
        self.n += k
        return out

    def on_episode(self, episode):
        self.episodes.append(episode)


@pytest.mark.parametrize("transport", ["in-process", "ipc"])
def test_the_record_carries_what_the_curriculum_handed_out(transport):
    cur = RecordReader()
    server = serve(cur) if transport == "ipc" else None
    env = make_env(server.address if server else cur, max_update_delay=0.0, prefetch=0)
    try:
        play(env, 4)
    finally:
        env.close()
        if server is not None:
            server.close()
    assert [(e.task, e.train, e.control, e.length) for e in cur.episodes] == [
        (0, True, False, 1), (1, False, True, 2), (0, True, False, 1), (1, False, True, 2)
    ]
    assert all(isinstance(e, Episode) and e.env_id == 0 and e.extras == {} for e in cur.episodes)


class Raising(DomainRandomization):
    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        raise RuntimeError("cannot take this one")


def test_an_update_the_curriculum_raises_on_raises_in_process():
    env = make_env(Raising(SPACE, seed=0))
    env.reset()
    with pytest.raises(SyncRejected, match=r"Raising\.on_episode: RuntimeError\('cannot take this one'\)"):
        for _ in range(5):
            env.step(0)
    env.close()


def test_an_update_the_curriculum_raises_on_is_counted_and_logged_with_its_name(caplog):
    cur = Raising(SPACE, seed=0)
    with caplog.at_level(logging.WARNING), serve(cur) as server:
        env = make_env(server.address, max_update_delay=0.0)
        play(env, 3)
        env.close()
        m = server.metrics()
    assert m["sync/total/curriculum_errors"] == 3 and m["sync/total/updates_rejected"] == 3
    assert m["sync/total/tasks_in_flight"] == 0  # refused, but no lease left open
    learner = [r for r in caplog.records if r.name.startswith("magister.sync.core")]
    assert any("Raising.on_episode refused an update" in r.getMessage() for r in learner)
    env_side = [r for r in caplog.records if r.name.startswith("magister.sync.feed")]
    assert any("curriculum_error" in r.getMessage() for r in env_side)


@pytest.mark.parametrize("transport", ["in-process", "ipc"])
def test_a_refused_reset_leaves_close_clean(transport, caplog):
    cur = DomainRandomization(SPACE, seed=0)
    server = serve(cur) if transport == "ipc" else None
    env = make_env(server.address if server else cur)
    with caplog.at_level(logging.WARNING):
        env.reset()
        with pytest.raises(ValueError, match="neither a task of .* nor an encoded task"):
            env.reset(options={"task": "enormous"})
        env.close()
        if server is not None:
            m = server.metrics()
            server.close()
            assert m["sync/total/tasks_in_flight"] == 0 and m["sync/total/updates_rejected"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_reset_takes_the_encoded_task_found_in_info_as_well_as_the_task():
    env = make_env(DomainRandomization(SPACE, seed=0))
    _, info = env.reset(options={"task": "long"})
    assert info["task"] == 2 and env.unwrapped.length == 3
    _, again = env.reset(options={"task": info["task"]})  # the encoded task, as info holds it
    assert again["task"] == 2 and env.unwrapped.length == 3
    env.close()


@pytest.mark.parametrize(
    "address, why",
    [
        ("tpc://127.0.0.1:5555", "unknown scheme 'tpc://'"),
        ("tcp://127.0.0.1", "needs a host and a port"),
        ("tcp://127.0.0.1:5555 ", "whitespace"),
        ("tcp://127.0.0.1:http", "not a port number"),
        ("127.0.0.1:5555", "no scheme"),
    ],
)
def test_every_malformed_address_is_a_value_error_naming_it_and_the_forms(address, why):
    for attempt in (
        lambda: make_env(address),
        lambda: connect(address),
        lambda: serve(DomainRandomization(SPACE), address),
    ):
        with pytest.raises(ValueError, match=why) as err:
            attempt()
        assert repr(address) in str(err.value) and "'tcp://host:port'" in str(err.value)
    assert check_address("ipc:///tmp/x.sock") == "ipc:///tmp/x.sock"


def test_feed_options_are_one_frozen_object_and_unknown_ones_are_named():
    opts = FeedOptions(prefetch=2)
    with pytest.raises(AttributeError):
        opts.prefetch = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"unknown feed option\(s\) \['prefetchh'\]"):
        make_env(DomainRandomization(SPACE), prefetchh=2)
    env = make_env(DomainRandomization(SPACE), opts, timeout=3.0)
    assert env.feed.prefetch == 2 and env.feed.options.timeout == 3.0
    env.close()


# -- the paths, in frames --------------------------------------------------------------------------------


def _magister_frames(frame, stop: str) -> int:
    """Frames of magister's own modules from ``frame`` back to the first frame of a function named
    ``stop`` (both included)."""
    n = 0
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("magister."):
            n += 1
            if frame.f_code.co_name == stop:
                return n
        frame = frame.f_back
    raise AssertionError(f"no {stop} frame on the stack")


class Counting(DomainRandomization):
    """Counts the frames between the env's step() (or the server thread's loop) and this curriculum."""

    def __init__(self, *a, stop: str = "step", **k) -> None:
        super().__init__(*a, **k)
        self.stop, self.depths = stop, []

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        # the frame that entered the curriculum: the locked public method the core called (on_episode)
        frame = sys._getframe()
        while frame.f_code.co_name != "on_episode":
            frame = frame.f_back
        self.depths.append(_magister_frames(frame.f_back, self.stop))  # its locked wrapper and below


def test_an_episode_reaches_the_curriculum_in_at_most_10_frames_in_process():
    cur = Counting(SPACE, seed=0)
    env = make_env(cur)
    play(env, 3)
    env.close()
    assert cur.depths and max(cur.depths) <= 10, cur.depths


def test_a_prefetched_task_reaches_change_task_in_at_most_6_frames():
    depths = []

    class Deep(StepsTask):
        def change_task(self, task):
            depths.append(_magister_frames(sys._getframe().f_back, "reset") + 1)  # + change_task itself
            super().change_task(task)

    for source in (DomainRandomization(SPACE, seed=0), None):
        server = serve(DomainRandomization(SPACE, seed=0)) if source is None else None
        env = GymnasiumSyncWrapper(Deep(Steps(), SPACE), server.address if server else source)
        env.reset()
        env.reset()  # the second reset's task was prefetched (over ipc) or is sampled at once (in-process)
        env.close()
        if server is not None:
            server.close()
    assert max(depths) <= 6, depths


def test_over_zeromq_each_side_takes_at_most_12_frames():
    cur = Counting(SPACE, seed=0, stop="_run")  # the server thread's loop
    with serve(cur) as server:
        env = make_env(server.address, max_update_delay=0.0)  # nothing held: sent from the ending step
        env.reset()
        feed = env.feed
        transport = feed.transport
        write, sent = transport._write, []

        def counting_write(frames, what):
            sent.append(_magister_frames(sys._getframe().f_back, "step") + 1)  # + _write itself
            return write(frames, what)

        transport._write = counting_write
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(0)
            done = term or trunc
        transport._write = write
        env.close()
    assert sent and sent[0] <= 12, sent
    assert cur.depths and max(cur.depths) <= 12, cur.depths
