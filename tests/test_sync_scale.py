"""The scale benchmark's quick run keeps its invariants: every episode the envs report is applied exactly
once by the endpoint, and no env sees an error (its timings are the benchmark's business, not asserted)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from magister.examples import results as R


def _bench():
    spec = importlib.util.spec_from_file_location("sync_scale", R.ROOT / "benchmarks" / "sync_scale.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # (its dataclasses look their module up)
    spec.loader.exec_module(bench)
    return bench


def _check(rows, plan):
    assert [(r.transport, r.mode, r.envs) for r in rows] == plan
    for r in rows:
        assert r.episodes >= 2 * r.envs  # (at least two episodes per env, plus the probes')
        assert r.total_applied == r.episodes, r  # the endpoint's sync/total/episodes_applied
        assert r.applied == r.episodes, r  # counted by the curriculum itself during play
        assert r.errors == 0 and r.leave_errors == 0, r
        assert r.messages > 0 and len(r.round_trips) > 0, r


def test_the_quick_zeromq_run_applies_every_episode_once():
    rows = _bench().main(["--quick", "--transports", "ZeroMQ", "--modes", "episodic", "step"])
    _check(rows, [("ZeroMQ", m, n) for m in ("episodic", "step") for n in (10, 100)])


@pytest.fixture
def ray_or_skip(request):
    pytest.importorskip("ray")
    return request.getfixturevalue("ray_session")


def test_a_small_ray_run_applies_every_episode_once(ray_or_skip):
    rows = _bench().main(["--transports", "Ray", "--sizes", "10", "--modes", "episodic", "step",
                          "--ray-largest-modes", "episodic", "step", "--episodes", "200"])
    _check(rows, [("Ray", "episodic", 10), ("Ray", "step", 10)])
