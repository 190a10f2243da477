"""The scale benchmark's quick run keeps its invariants: every episode the envs report is applied exactly
once by the endpoint, and no env sees an error (its timings are the benchmark's business, not asserted)."""

from __future__ import annotations

import importlib

import pytest

from magister.examples import results as R


@pytest.fixture
def bench(monkeypatch):
    """The benchmark's module, imported by name from benchmarks/ (its load processes are spawned: they
    import it again)."""
    monkeypatch.syspath_prepend(str(R.ROOT / "benchmarks"))
    return importlib.import_module("sync_scale")


def _check(rows, plan):
    assert [(r.transport, r.mode, r.envs) for r in rows] == plan
    for r in rows:
        assert r.episodes >= 2 * r.envs  # (at least two episodes per env, plus the probes')
        assert r.total_applied == r.episodes, r  # the endpoint's sync/total/episodes_applied
        assert r.applied == r.episodes, r  # counted by the curriculum itself during play
        assert r.errors == 0 and r.leave_errors == 0, r
        assert r.messages > 0 and len(r.round_trips) > 0, r


def test_the_quick_zeromq_run_applies_every_episode_and_step_update_once(bench):
    rows = bench.main(["--quick", "--transports", "ZeroMQ", "--modes", "step"])  # (episodes and steps)
    _check(rows, [("ZeroMQ", "step", 10), ("ZeroMQ", "step", 100)])


@pytest.fixture
def ray_or_skip(request):
    pytest.importorskip("ray")
    return request.getfixturevalue("ray_session")


def test_a_small_ray_run_applies_every_episode_once(bench, ray_or_skip):
    rows = bench.main(["--transports", "Ray", "--sizes", "10", "--modes", "episodic", "--episodes", "200",
                       "--one-process", "20"])  # (and 20 envs in one load actor: one outbox)
    _check(rows, [("Ray", "episodic", 10), ("Ray", "one-proc", 20)])
