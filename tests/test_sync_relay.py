"""Relays (:mod:`magister.sync.relay`): envs -> relay actors -> the curriculum actor, and back.

Tasks reach the envs with their flags, episodes reach the curriculum on the lease of their task, a relay
sends fewer calls upstream than its envs send it, and through a relay's death every episode played is
applied upstream once or its lease is counted there as abandoned."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from magister.curricula.base import Curriculum, TaskSample  # noqa: E402
from magister.sync.feed import RayClient, ServerUnavailableError  # noqa: E402
from magister.sync.options import FeedOptions, ServerOptions  # noqa: E402
from magister.sync.ray_server import serve_ray  # noqa: E402
from magister.sync.relay import serve_relays  # noqa: E402
from magister.task_spaces.discrete import Discrete  # noqa: E402

pytestmark = [pytest.mark.timeout(240)]

SPACE = Discrete(10**9)


class Unique(Curriculum):
    """Tasks 0, 1, 2 ... (each one lease); every third is evaluation-only, every fourth a control task;
    records the episodes and abandoned tasks it is told of."""

    def __init__(self, step_updates: bool = False) -> None:
        super().__init__(SPACE)
        self.requires_step_updates = step_updates
        self.next = 0
        self.episodes: list[tuple] = []
        self.abandoned: list[int] = []

    def sample(self, k=1):
        out = list(range(self.next, self.next + k))
        self.next += k
        return out

    def sample_tasks(self, k=1):
        return [TaskSample(t, t % 3 != 0, control=t % 4 == 0) for t in self.sample(k)]

    def on_episode(self, episode):
        self.episodes.append((episode.task, episode.episode_return, episode.length, episode.train,
                              episode.control, episode.agent))

    def on_task_abandoned(self, task, env_id=None):
        self.abandoned.append(task)

    def records(self):
        return {"episodes": self.episodes, "abandoned": self.abandoned}


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def _totals(m: dict) -> dict:
    return {k.split("/")[-1]: v for k, v in m.items() if k.startswith("sync/total/")}


def _feed(address: str) -> RayClient:
    # holds nothing: one call per episode, so the relay's batching shows against it
    return RayClient(address, prefetch=2, timeout=60, max_update_delay=0, reconnect_timeout=120)


def test_tasks_and_episodes_flow_through_relays_on_their_leases_in_batches(ray_session):
    server = serve_ray(Unique(), name="relay_flow_cur", env_timeout=30)
    relays = serve_relays(server, SPACE, 2, name="relay_flow", max_restarts=0,
                          # updates go with task requests and when 64 are held, not on a timer: the count of
                          # calls does not depend on how fast this machine plays
                          feed=FeedOptions(prefetch=64, update_batch=64, max_update_delay=120, timeout=30))
    try:
        feeds = [_feed(relays[i % 2].address) for i in range(6)]
        played = []
        for _ in range(10):
            for i, feed in enumerate(feeds):
                a = feed.next_task()
                assert (a.train, a.control) == (a.task % 3 != 0, a.task % 4 == 0)  # the flags came along
                feed.record_episode(a, float(a.task), 1 + i, 1.0)
                played.append(a)
        env_calls = sum(f.stats["calls"] for f in feeds)
        for feed in feeds:
            feed.close()
        relay_calls = [r.metrics()["relay/calls"] for r in relays]
        for r in relays:
            r.close()
        rec, m = server.call("records"), server.metrics()
    finally:
        for r in relays:
            r.close()
        server.close()
    # every episode applied once, on its own task's lease, with that task's flags
    got = sorted(rec["episodes"])
    assert got == sorted((a.task, float(a.task), 1 + i % 6, a.train, a.control, None)
                         for i, a in enumerate(played))
    t = _totals(m)
    assert t["episodes_applied"] == 60 and t["updates_rejected"] == 0 and t["reports_orphaned"] == 0
    assert t["tasks_sent"] == t["tasks_consumed"] + t["tasks_returned"] + t["tasks_abandoned"]
    assert t["tasks_consumed"] == 60 and t["tasks_in_flight"] == 0 and rec["abandoned"] == []
    assert m["sync/envs"] == 2  # the curriculum actor served two envs: the relays
    # batching: the relays called the curriculum actor far fewer times than their envs called them
    assert env_calls >= 60 and sum(relay_calls) * 5 <= env_calls, (env_calls, relay_calls)


def test_relays_refuse_a_curriculum_that_wants_step_updates(ray_session):
    with serve_ray(Unique(step_updates=True), name="relay_steps_cur") as server:
        with pytest.raises(ValueError, match="step updates"):
            serve_relays(server, SPACE, 1, name="relay_steps", max_restarts=0)
        with pytest.raises(ValueError, match="n must be"):
            serve_relays(server, SPACE, 0)
    with pytest.raises(ValueError, match="not a Ray backend address"):
        serve_relays("tcp://127.0.0.1:5555", SPACE, 1)
    with pytest.raises(ServerUnavailableError, match="relay_nobody"):  # no curriculum actor there
        serve_relays("ray://relay_nobody", SPACE, 1, name="relay_none", max_restarts=0,
                     feed=FeedOptions(timeout=1))


def test_the_tasks_of_an_env_gone_silent_behind_a_relay_are_counted_there_and_served_again(ray_session,
                                                                                            monkeypatch):
    from magister.sync import feed as feed_module

    server = serve_ray(Unique(), name="relay_silent_cur")
    relays = serve_relays(server, SPACE, 1, name="relay_silent", max_restarts=0,
                          options=ServerOptions(env_timeout=1.0), feed=FeedOptions(prefetch=8, timeout=30))
    try:
        monkeypatch.setattr(feed_module, "_background_flush", False)  # no heartbeats: it will go silent
        silent = _feed(relays[0].address)
        silent.next_task()
        held = sorted(relays[0].in_flight(silent.env_id).values())
        monkeypatch.undo()
        wait_for(lambda: relays[0].metrics()["sync/envs_timed_out"] == 1, 60, "the silent env declared gone")
        other = _feed(relays[0].address)
        seen = []
        while not set(held) <= set(seen):
            a = other.next_task()
            other.record_episode(a, 1.0, 1, 1.0)
            seen.append(a.task)
            assert len(seen) <= 50, (held, seen)
        other.close()
        relay_m = relays[0].metrics()
        relays[0].close()
        rec, m = server.call("records"), server.metrics()
    finally:
        for r in relays:
            r.close()
        server.close()
    # the relay counted the silent env's tasks abandoned, and its other env played each of them once
    assert len(held) >= 1 and relay_m[f"sync/env{silent.env_id}/tasks_abandoned"] == len(held)
    assert sorted(t for t, *_ in rec["episodes"]) == sorted(seen) and len(seen) == len(set(seen))
    # to the curriculum actor nothing was abandoned: every lease consumed or returned with the relay's goodbye
    t = _totals(m)
    assert rec["abandoned"] == [] and t["tasks_abandoned"] == 0 and t["tasks_in_flight"] == 0
    assert t["tasks_sent"] == t["tasks_consumed"] + t["tasks_returned"]


def test_through_a_relays_death_every_episode_is_applied_once_or_its_lease_counted(ray_session):
    server = serve_ray(Unique(), name="relay_death_cur")
    relays = serve_relays(server, SPACE, 2, name="relay_death", max_restarts=1,
                          feed=FeedOptions(prefetch=8, update_batch=32, timeout=30))
    try:
        feeds = [_feed(relays[i % 2].address) for i in range(4)]
        played: list[int] = []

        def play(rounds: int) -> None:
            for _ in range(rounds):
                for feed in feeds:
                    a = feed.next_task()
                    feed.record_episode(a, 1.0, 1, 1.0)
                    played.append(a.task)

        play(15)
        before = len(played)
        ray.kill(relays[0].actor, no_restart=False)  # its process dies; Ray restarts it under its name
        play(15)
        rejoins = [f.stats["rejoins"] for f in feeds]
        for feed in feeds:
            feed.close()
        # the curriculum actor declares the dead relay's feed gone (its worker died) and abandons its leases
        wait_for(lambda: server.metrics()["sync/envs_dead"] >= 1, 60, "the dead relay declared gone")
        relay_m = relays[0].metrics()
        for r in relays:
            r.close()
        rec, m = server.call("records"), server.metrics()
    finally:
        for r in relays:
            r.close()
        server.close()
    assert rejoins[0] == rejoins[2] == 1 and rejoins[1] == rejoins[3] == 0  # relay 0's envs came back
    applied = [e[0] for e in rec["episodes"]]
    abandoned = set(rec["abandoned"])
    assert len(played) == len(set(played)) == 120  # (each task is one lease, played once)
    assert len(applied) == len(set(applied)) and set(applied) <= set(played)  # none twice, none invented
    assert not set(applied) & abandoned  # a lease has one outcome
    # every episode played is applied upstream, or its upstream lease counted there as abandoned
    assert len(applied) + len(set(played) & abandoned) == len(played)
    t = _totals(m)
    assert t["tasks_sent"] == t["tasks_consumed"] + t["tasks_returned"] + t["tasks_abandoned"]
    assert t["tasks_in_flight"] == 0 and t["updates_rejected"] == 0
    assert t["episodes_applied"] == len(applied) and t["tasks_abandoned"] == len(abandoned)
    # the restarted relay counted, and dropped, the reports its envs sent it again on the dead relay's leases
    orphaned = relay_m["sync/total/reports_orphaned"]
    assert orphaned <= before // 2 and relay_m["sync/total/updates_rejected"] == 0
    assert relay_m["relay/errors_received"] == 0 and relay_m["relay/updates_dropped"] == 0


def test_the_scale_benchmark_through_relays_applies_every_episode_once(ray_session, monkeypatch):
    import importlib

    from magister.examples import results as R

    monkeypatch.syspath_prepend(str(R.ROOT / "benchmarks"))
    bench = importlib.import_module("sync_scale")
    rows = bench.main(["--transports", "Ray", "--sizes", "10", "--modes", "episodic", "--episodes", "100",
                       "--relays", "2"])
    (row,) = rows
    assert (row.transport, row.relays, row.envs) == ("Ray+2rel", 2, 10)
    assert row.total_applied == row.episodes == row.applied >= 20 and row.errors == row.leave_errors == 0
    assert 0 < row.upstream_calls < row.messages and row.relay_cpu_s > 0
