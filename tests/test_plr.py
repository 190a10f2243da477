"""Tests of Prioritized Level Replay and Robust PLR / PLR⊥ (magister.curricula.plr)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated_student import StudentSpace, run_student, uniform_curriculum

from magister.curricula.base import TaskSample
from magister.curricula.plr import PLR, PLRPerp, RobustPLR
from magister.task_spaces.base import TaskSpace


class Pairs(TaskSpace):
    """A small non-indexed enumerable space: tasks are (a, b) tuples with a, b in 0..3."""

    @property
    def num_tasks(self) -> int:
        return 16

    def sample(self):
        return (int(self.rng.integers(4)), int(self.rng.integers(4)))

    def contains(self, t) -> bool:
        return isinstance(t, tuple) and len(t) == 2 and all(isinstance(x, int) and 0 <= x < 4 for x in t)

    def encode(self, t):
        if not self.contains(t):
            raise ValueError(f"{t!r} not in {self!r}")
        return t

    def decode(self, e):
        e = tuple(e) if isinstance(e, list) else e
        if not self.contains(e):
            raise ValueError(f"{e!r} not in {self!r}")
        return e

    @property
    def tasks(self):
        return [(a, b) for a in range(4) for b in range(4)]


def _states_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


# -- exact values -----------------------------------------------------------------------------------


def test_replay_weights_rank_staleness_by_hand():
    space = StudentSpace(10)
    plr = PLR(space, buffer_size=3, replay_prob=0.0, temperature=1.0, staleness_coef=0.5, seed=0)
    tasks = plr.sample(3)  # clock 3, all new
    assert plr.clock == 3 and len(plr) == 0
    plr.update_scores(tasks, [1.0, 3.0, 2.0])  # inserted with C_i = 3
    assert plr.buffer_tasks() == tasks
    # fresh entries: staleness uniform; ranks (3, 1, 2) -> h = (1/3, 1, 1/2) / (11/6) = (2, 6, 3) / 11
    np.testing.assert_allclose(plr.replay_weights(), 0.5 * np.array([2, 6, 3]) / 11 + 0.5 / 3)
    plr.replay_prob = 1.0
    (t,) = plr.sample(1)  # a replay, clock 4
    j = tasks.index(t)
    stale = np.ones(3)
    stale[j] = 0.0  # C_j = 4 = c; the others have c - C_i = 1
    expected = 0.5 * np.array([2, 6, 3]) / 11 + 0.5 * stale / 2
    np.testing.assert_allclose(plr.replay_weights(), expected)
    assert plr.clock == 4 and plr.num_replayed == 1


def test_power_prioritisation_by_hand():
    space = StudentSpace(10)
    plr = PLR(space, buffer_size=4, replay_prob=0.0, temperature=0.5, staleness_coef=0.0,
              prioritization="power", seed=0)
    tasks = plr.sample(2)
    plr.update_scores(tasks, [1.0, 2.0])
    # S^(1/beta) = S^2: (1, 4) / 5
    np.testing.assert_allclose(plr.replay_weights(), [0.2, 0.8])


def test_insertion_replaces_lowest_only_if_higher():
    space = StudentSpace(100)
    plr = PLR(space, buffer_size=2, replay_prob=0.0, seed=1)
    a, b, c, d, e = plr.sample(5)
    plr.update_scores([a, b], [0.5, 0.2])
    plr.update_scores([c], [0.2])  # equal to the lowest: rejected
    assert plr.buffer_tasks() == [a, b]
    plr.update_scores([c], [0.3])  # higher: replaces b
    assert sorted(plr.buffer_tasks()) == sorted([a, c])
    np.testing.assert_allclose(sorted(plr.buffer_scores()), [0.3, 0.5])
    plr.update_scores([a], [0.1])  # a buffered task's score is replaced by the latest
    plr.update_scores([d], [0.2])  # now a (0.1) is the lowest and 0.2 beats it
    assert sorted(plr.buffer_tasks()) == sorted([c, d])
    assert plr.num_evicted == 2 and plr.num_inserted == 4
    plr.update_scores([e, e], [0.25, 0.05])  # e inserted, then its score replaced by the later value
    assert e in plr.buffer_tasks()
    assert plr.buffer_scores()[plr.buffer_tasks().index(e)] == pytest.approx(0.05)


def test_tie_among_lowest_evicts_stalest():
    space = StudentSpace(100)
    plr = PLR(space, buffer_size=2, replay_prob=0.0, seed=0)
    a, b = plr.sample(2)
    plr.update_scores([a], [0.1])  # inserted at clock 2
    plr.sample(3)
    plr.update_scores([b], [0.1])  # inserted at clock 5
    (c,) = plr.sample(1)
    plr.update_scores([c], [0.2])  # a and b tie at the lowest; a is staler
    assert sorted(plr.buffer_tasks()) == sorted([b, c])


def test_episode_scores_learnability_and_return():
    space = StudentSpace(10)
    plr = PLR(space, score="learnability", replay_prob=0.0, window=4, seed=0)
    (t,) = plr.sample(1)
    for x in (1.0, 0.0, 0.0, 1.0):  # running mean 0.5 -> p(1-p) = 0.25
        plr.update_on_episode(x, 5, t, x)
    assert plr.buffer_scores().tolist() == [0.25]
    plr.update_on_episode(1.0, 5, t, 1.0)  # beyond the window: m += (1 - 0.5) / 4 = 0.625
    assert plr.buffer_scores()[0] == pytest.approx(0.625 * 0.375)
    ret = PLR(space, score="return", replay_prob=0.0, window=10, seed=0)
    (u,) = ret.sample(1)
    ret.update_on_episode(2.0, 3, u, 0.0)
    ret.update_on_episode(4.0, 3, u, 0.0)
    assert ret.buffer_scores().tolist() == [3.0]
    assert ret.max_returns([u]).tolist() == [4.0]


def test_value_score_ignores_episode_feedback_but_tracks_max_return():
    space = StudentSpace(10)
    plr = PLR(space, score="max_mc", replay_prob=0.0, seed=0)
    (t,) = plr.sample(1)
    assert plr.max_returns([t]).tolist() == [-np.inf]
    plr.update_on_episode(3.0, 5, t, 1.0)
    plr.update_on_episode(1.0, 5, t, 1.0)
    assert len(plr) == 0 and plr.max_returns([t]).tolist() == [3.0]
    plr.update_scores([t], [0.7], max_returns=[5.0])
    assert plr.max_returns([t]).tolist() == [5.0] and plr.buffer_scores().tolist() == [0.7]


def test_update_on_demand_formats():
    space = StudentSpace(10)
    plr = PLR(space, replay_prob=0.0, seed=0)
    a, b = plr.sample(2)
    plr.update_on_demand({"scores": [(a, 1.0), (b, 2.0)]})
    plr.update_on_demand({"tasks": [a], "scores": [3.0], "max_returns": [9.0]})
    plr.update_on_demand({"unrelated": 1})
    assert dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist())) == {a: 3.0, b: 2.0}
    with pytest.raises(ValueError, match="pairs"):
        plr.update_on_demand({"scores": [(a, 1.0, 2.0)]})


# -- replay decision, train flags, distribution -----------------------------------------------------


def test_robust_flags_new_eval_only_replays_train():
    space = StudentSpace(50)
    plr = RobustPLR(space, replay_prob=0.0, seed=0)
    new = plr.sample_tasks(5)
    assert all(isinstance(s, TaskSample) and s.train is False for s in new)
    plr.update_scores([s.task for s in new], [1.0, 2.0, 3.0, 4.0, 5.0])
    plr.replay_prob = 1.0
    rep = plr.sample_tasks(20)
    assert all(s.train for s in rep) and {s.task for s in rep} <= {s.task for s in new}
    plr.replay_prob = 0.5
    mixed = plr.sample_tasks(400)
    buf = set(plr.buffer_tasks())
    assert all(s.train == (s.task in buf) for s in mixed)  # new tasks never collide with buffered ones
    assert 150 < sum(s.train for s in mixed) < 250
    assert PLRPerp is RobustPLR
    plain = PLR(space, replay_prob=0.0, seed=0)
    assert all(s.train for s in plain.sample_tasks(5))


def test_original_replay_probability_is_fraction_seen():
    space = StudentSpace(20)
    plr = PLR(space, seed=0)
    assert plr.metrics()["plr/replay_prob"] == 0.0
    tasks = plr.sample(1)
    plr.update_scores(tasks, [1.0])
    assert plr.metrics()["plr/replay_prob"] == pytest.approx(1 / 20)
    for _ in range(200):
        ts = plr.sample(4)
        plr.update_scores(ts, np.arange(4, dtype=float))
    assert plr.metrics()["plr/replay_prob"] == pytest.approx(1.0)
    assert plr.metrics()["plr/replay_prob_effective"] == pytest.approx(1.0)
    assert len(plr) == 20 and plr.distribution()[np.array(plr.buffer_tasks())].sum() == pytest.approx(1.0)


def test_replay_metrics_report_the_configured_probability_and_the_realised_rate():
    # 10 tasks, all buffered after a few samples: from then on every sample is a replay (nothing new is
    # left to draw), yet the configured replay probability is still 0.5 and the metric must say so.
    plr = PLR(StudentSpace(10), replay_prob=0.5, seed=0)
    m = plr.metrics()
    assert (m["plr/replay_prob"], m["plr/replay_prob_effective"], m["plr/replay_rate"]) == (0.5, 0.0, 0.0)
    for _ in range(50):
        ts = plr.sample(4)
        plr.update_scores(ts, np.arange(4, dtype=float))
    m = plr.metrics()
    assert len(plr) == 10
    assert m["plr/replay_prob"] == 0.5  # the setting, whatever the buffer holds
    assert m["plr/replay_prob_effective"] == 1.0  # the next sample is certainly a replay
    assert m["plr/replay_rate"] == pytest.approx(plr.num_replayed / 200)
    assert m["plr/replay_rate"] > 0.9  # all but the first few draws were replays
    # an unbounded-in-practice space (buffer never full): the realised rate approaches the setting
    big = PLR(StudentSpace(100_000), replay_prob=0.5, seed=0)
    for _ in range(500):
        ts = big.sample(4)
        big.update_scores(ts, np.ones(4))
    m = big.metrics()
    assert m["plr/replay_prob"] == m["plr/replay_prob_effective"] == 0.5
    assert m["plr/replay_rate"] == pytest.approx(0.5, abs=0.05)


def test_min_fill_ratio_blocks_replay():
    space = StudentSpace(100)
    plr = PLR(space, buffer_size=10, replay_prob=1.0, min_fill_ratio=0.5, seed=0)
    tasks = plr.sample(4)
    plr.update_scores(tasks, [1.0] * 4)
    assert plr.metrics()["plr/replay_prob_effective"] == 0.0
    assert plr.metrics()["plr/replay_prob"] == 1.0  # the setting
    assert not set(plr.sample(10)) & set(tasks)  # 4 < 5 buffered: only new tasks
    more = plr.sample(1)
    plr.update_scores(more, [1.0])
    assert set(plr.sample(10)) <= set(tasks + more)


def test_distribution_matches_sampling_frequencies():
    space = StudentSpace(12)
    plr = PLR(space, buffer_size=4, replay_prob=0.6, temperature=0.5, staleness_coef=0.3, seed=3)
    for _ in range(6):
        ts = plr.sample(3)
        plr.update_scores(ts, [float(t % 5) for t in ts])
    dist = plr.distribution()
    assert dist.shape == (12,) and dist.sum() == pytest.approx(1.0)
    outside = np.setdiff1d(np.arange(12), plr.buffer_tasks())
    np.testing.assert_allclose(dist[outside], 0.4 / 8)
    state = plr.state_dict()
    counts = np.zeros(12)
    n = 3000
    for i in range(n):
        plr.load_state_dict(state)
        plr.seed(i)
        counts[plr.sample(1)[0]] += 1
    # every cell within 5 standard deviations of its binomial expectation
    sd = np.sqrt(n * dist * (1 - dist)) + 1e-9
    assert np.all(np.abs(counts - n * dist) < 5 * sd + 1)


def test_non_indexed_space_and_distribution():
    space = Pairs()
    plr = PLR(space, buffer_size=5, replay_prob=0.5, seed=0)
    ts = plr.sample(6)
    assert all(space.contains(t) for t in ts)
    plr.update_scores(ts, np.linspace(0, 1, 6))
    assert len(plr) == 5
    dist = plr.distribution()
    assert dist.sum() == pytest.approx(1.0)
    enc = space.encoded_tasks
    for t, w in zip(plr.buffer_tasks(), plr.replay_weights()):
        assert dist[enc.index(t)] == pytest.approx(0.5 * w)
    buf = set(plr.buffer_tasks())
    new = [s.task for s in RobustPLR(space, buffer_size=5, replay_prob=0.5, seed=0).sample_tasks(1)]
    assert new and all(space.contains(t) for t in new)
    state = plr.state_dict()
    plr.replay_prob = 0.0
    assert not set(plr.sample(200)) & buf  # new tasks avoid the buffer, as distribution() says
    plr.load_state_dict(state)
    assert tuple(ts[0]) not in plr.buffer_tasks()  # the lowest score was evicted
    plr.update_scores([list(ts[0])], [5.0])  # msgpack turned the tuple into a list: same task
    scores = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert scores[tuple(ts[0])] == 5.0 and len(scores) == 5  # buffered as the tuple, evicting the lowest
    assert tuple(ts[1]) not in scores and all(tuple(t) in scores for t in ts[2:])


def test_large_space_million_tasks():
    from magister.task_spaces.discrete import Discrete

    space = Discrete(10**6)
    plr = RobustPLR(space, buffer_size=200, seed=0)
    for _ in range(20):
        samples = plr.sample_tasks(64)
        tasks = [s.task for s in samples]
        plr.update_scores(tasks, np.random.default_rng(len(plr)).random(64))
    assert len(plr) == 200
    new = [s.task for s in plr.sample_tasks(500) if not s.train]
    assert not set(new) & set(plr.buffer_tasks())
    dist = plr.distribution()
    assert dist.shape == (10**6,) and dist.sum() == pytest.approx(1.0)


# -- behaviour: simulated student --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "value_score"),
    [({"score": "value_l1"}, "value_l1"), ({"score": "learnability"}, None)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_simulated_student_beats_domain_randomization(kwargs, value_score, seed):
    space = StudentSpace(200)
    plr = run_student(PLR(space, seed=seed, **kwargs), space, 4000, seed, value_score=value_score)
    dr = run_student(uniform_curriculum(space, seed=seed), space, 4000, seed)
    assert plr["frac_possible"] >= 0.8
    assert dr["frac_possible"] < 0.2
    assert plr["success_possible"] > dr["success_possible"] + 0.05


def test_robust_plr_trains_only_on_replays_in_student():
    space = StudentSpace(200)
    res = run_student(RobustPLR(space, score="max_mc", seed=0), space, 2000, 0, value_score="max_mc")
    assert 0.4 < res["frac_train"] < 1.0
    assert res["frac_possible_train"] > res["frac_possible"]  # replays favour learnable tasks


# -- checkpointing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("space_factory", [lambda: StudentSpace(50), Pairs])
def test_state_dict_round_trip_gives_identical_samples(space_factory):
    space = space_factory()
    plr = RobustPLR(space, buffer_size=6, score="return", seed=7)
    for _ in range(10):
        for s in plr.sample_tasks(3):
            plr.update_on_episode(float(hash(s.task) % 3), 4, s.task, 0.0)
    state = plr.state_dict()
    expected = plr.sample_tasks(20)
    fresh = RobustPLR(space, buffer_size=6, score="return", seed=123)
    fresh.load_state_dict(state)
    assert fresh.sample_tasks(20) == expected
    assert fresh.buffer_tasks() == plr.buffer_tasks()
    with pytest.raises(ValueError, match="capacity"):
        RobustPLR(space, buffer_size=3).load_state_dict(state)
    with pytest.raises(ValueError, match="RobustPLR"):
        PLR(space, buffer_size=6).load_state_dict(state)


# -- bad input ---------------------------------------------------------------------------------------


def test_bad_updates_raise_and_leave_state_unchanged():
    space = StudentSpace(10)
    plr = PLR(space, buffer_size=3, replay_prob=0.0, seed=0)
    a, b = plr.sample(2)
    plr.update_scores([a], [1.0])
    before = plr.state_dict()
    never = next(t for t in range(10) if t not in (a, b))
    with pytest.raises(KeyError, match="never sampled"):
        plr.update_scores([b, never], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        plr.update_scores([a, b], [1.0, float("nan")])
    with pytest.raises(ValueError, match="shape"):
        plr.update_scores([a, b], [1.0])
    with pytest.raises(ValueError, match="shape"):
        plr.update_scores([a], [[1.0]])
    with pytest.raises(ValueError, match="not an encoded task"):
        plr.update_scores([42], [1.0])
    with pytest.raises(ValueError, match="finite"):
        plr.update_scores([a], [1.0], max_returns=[np.inf])
    with pytest.raises(KeyError):
        plr.update_on_episode(1.0, 3, never, 0.0)
    with pytest.raises(ValueError, match="finite"):
        plr.update_on_episode(float("nan"), 3, a, 0.0)
    with pytest.raises(TypeError):
        plr.update_scores(5, [1.0])
    assert _states_equal(before, plr.state_dict())
    learn = PLR(space, score="learnability", replay_prob=0.0, seed=0)
    (t,) = learn.sample(1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        learn.update_on_episode(1.0, 3, t, 1.5)
    pw = PLR(space, prioritization="power", replay_prob=0.0, seed=0)
    (t,) = pw.sample(1)
    with pytest.raises(ValueError, match="non-negative"):
        pw.update_scores([t], [-1.0])


def test_unknown_task_in_non_indexed_space():
    plr = PLR(Pairs(), replay_prob=0.0, seed=0)
    plr.sample(2)
    unseen = next(t for t in Pairs().tasks if t not in plr._index)
    with pytest.raises(KeyError, match="never sampled"):
        plr.update_scores([unseen], [1.0])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"score": "nope"},
        {"score": 3},
        {"buffer_size": 0},
        {"replay_prob": 1.5},
        {"temperature": 0.0},
        {"staleness_coef": -0.1},
        {"prioritization": "softmax"},
        {"min_fill_ratio": 2.0},
        {"gamma": 1.5},
        {"window": 0},
    ],
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises((ValueError, TypeError)):
        PLR(StudentSpace(10), **kwargs)


def test_unbounded_space_needs_replay_prob():
    class Unbounded(StudentSpace):
        @property
        def num_tasks(self):
            return None

        @property
        def indexed(self):
            return False

    with pytest.raises(ValueError, match="replay_prob"):
        PLR(Unbounded(10))
    plr = PLR(Unbounded(10), replay_prob=0.5, seed=0)
    assert len(plr.sample(3)) == 3
    with pytest.raises(NotImplementedError):
        plr.distribution()


# -- properties --------------------------------------------------------------------------------------


@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=40), st.integers(1, 8))
def test_buffer_keeps_the_top_scores(scores, size):
    space = StudentSpace(100)
    plr = PLR(space, buffer_size=size, replay_prob=0.0, seed=0)
    tasks = plr.sample(len(scores))
    distinct = list(dict.fromkeys(tasks))
    vals = [scores[tasks.index(t)] for t in distinct]
    plr.update_scores(distinct, vals)
    assert sorted(plr.buffer_scores().tolist()) == sorted(vals)[-size:]
    w = plr.replay_weights()
    assert w.sum() == pytest.approx(1.0) and np.all(w >= 0)


def test_large_buffer_sampling_matches_replay_weights():
    """Buffers above 1024 entries use the sorted-buffer + Fenwick-tree sampler: its empirical replay
    distribution must equal the rank/staleness mixture P = (1 - rho) P_S + rho P_C, ties included."""
    from magister.task_spaces.discrete import Discrete

    plr = PLR(Discrete(3000), buffer_size=1100, replay_prob=0.5, staleness_coef=0.3, seed=1)
    rng = np.random.default_rng(0)
    for round_ in range(200):
        b = 64 if round_ % 3 == 0 else 16
        tasks = plr.sample(b)
        plr.update_scores(tasks, (rng.integers(0, 6, b) * 0.5).tolist())
    weights = plr.replay_weights()
    assert weights.size > 1024  # the large-buffer path is the one under test
    draws = plr._draw_replays(10**6)
    freq = np.bincount(draws, minlength=weights.size) / draws.size
    total_variation = 0.5 * np.abs(freq - weights).sum()
    assert total_variation < 0.025


# -- lazy repair of the sampling structures ------------------------------------------------------------
# A score write only records the change; the score order is repaired before the next read, one entry at a
# time, in one merge pass or by a full sort depending on how many changed. Small buffers build P from it
# (rng.choice draws); large ones draw from it and a Fenwick tree (mixture draws). Either way a curriculum
# must behave exactly as one whose sampling structures are rebuilt from scratch (load_state_dict) before
# every call.

def _random_ops(seed: int, n: int) -> list[tuple]:
    """A random interleaving of samples, score writes (of buffered and new tasks) and reads."""
    rng = np.random.default_rng(seed)
    ops = []
    for _ in range(n):
        u = rng.random()
        if u < 0.35:
            ops.append(("sample", int(rng.integers(1, 7))))
        elif u < 0.9:
            k = int(rng.integers(1, 13))
            picks, values = rng.integers(0, 1000, k).tolist(), rng.integers(0, 6, k).tolist()
            ops.append(("score", list(zip(picks, values))))
        else:
            ops.append(("check", None))
    return ops


def _drive(make, ops, rebuild_every_call: bool, as_arrays: bool):
    """Run ``ops`` on ``make()``; with ``rebuild_every_call`` through a fresh object loaded from the
    state before every call. Returns the curriculum and a trace of everything observable."""
    plr, seen, trace = make(), [], []
    for op, arg in ops:
        if rebuild_every_call:
            fresh = make()
            fresh.load_state_dict(plr.state_dict())
            plr = fresh
        if op == "sample":
            out = plr.sample_tasks(arg)
            seen += [s.task for s in out]
            trace.append(out)
        elif op == "score" and seen:
            tasks = [seen[i % len(seen)] for i, _ in arg]
            scores = [v * 0.5 for _, v in arg]  # few distinct values: ties on purpose
            if as_arrays:  # the general (numpy) write path instead of the few-scores Python one
                plr.update_scores(np.array(tasks), np.array(scores))
            else:
                plr.update_scores(tasks, scores)
        elif op == "check" and len(plr):
            trace.append(plr.replay_weights().tolist())
            trace.append(plr.distribution().tolist())
        trace.append((plr.buffer_tasks(), plr.buffer_scores().tolist(), plr.clock))
    return plr, trace


@pytest.mark.parametrize("path", ["small buffer", "large buffer"])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_ops=st.integers(30, 80),
    buffer_size=st.integers(1, 12),
    config=st.sampled_from([
        {"replay_prob": 0.5, "staleness_coef": 0.3, "temperature": 1.0},
        {"replay_prob": 1.0, "staleness_coef": 0.0, "temperature": 0.1},
        {"replay_prob": 0.8, "staleness_coef": 1.0, "temperature": 0.5},
        {"replay_prob": 0.7, "staleness_coef": 0.2, "temperature": 1.0, "prioritization": "power"},
    ]),
    shift_max=st.integers(0, 6),
    sort_divisor=st.sampled_from([1, 2, 4, 8, 1000]),
    as_arrays=st.booleans(),
)
def test_lazy_repair_equals_rebuild_from_scratch(path, seed, n_ops, buffer_size, config, shift_max,
                                                 sort_divisor, as_arrays):
    ops = _random_ops(seed, n_ops)
    import magister.curricula.plr as plr_module
    from magister.task_spaces.discrete import Discrete

    with pytest.MonkeyPatch.context() as mp:
        if path == "large buffer":  # the sorted order + Fenwick tree sampler, on a testable buffer
            mp.setattr(plr_module, "_MIXTURE_MIN_CAPACITY", 1)
        mp.setattr(plr_module, "_REPAIR_SHIFT_MAX", shift_max)  # every repair strategy, on a small buffer
        mp.setattr(plr_module, "_REPAIR_SORT_DIVISOR", sort_divisor)

        def make():
            return PLR(Discrete(30), buffer_size=buffer_size, seed=5, **config)

        lazy, trace = _drive(make, ops, rebuild_every_call=False, as_arrays=as_arrays)
        rebuilt, trace_rebuilt = _drive(make, ops, rebuild_every_call=True, as_arrays=not as_arrays)
        assert lazy._mixture == (path == "large buffer")
        assert trace == trace_rebuilt
        assert _states_equal(lazy.state_dict(), rebuilt.state_dict())
        fresh = make()
        fresh.load_state_dict(lazy.state_dict())
        m = len(lazy)
        if m:
            np.testing.assert_array_equal(lazy.replay_weights(), fresh.replay_weights())
        lazy._repair_order()  # the repaired order (and the tree) are exactly the ones built from scratch
        order = np.argsort(-lazy.buffer_scores(), kind="stable")
        assert lazy._rank_pos[:m].tolist() == order.tolist()
        assert lazy._rank_key[:m].tolist() == (-lazy.buffer_scores()[order]).tolist()
        if lazy._mixture:
            assert lazy._last_tree.tolist() == fresh._last_tree.tolist()
            assert lazy._last_total == fresh._last_total
        assert lazy.sample_tasks(30) == fresh.sample_tasks(30)


def test_many_writes_between_samples_repair_once_by_merge():
    """The asynchronous case: many episodes' scores arrive between two samples. Each write is O(1) (the
    entry is only recorded), and the next sample repairs the order once; the result equals a rebuild."""
    from magister.task_spaces.discrete import Discrete

    plr = PLR(Discrete(5000), buffer_size=2000, replay_prob=1.0, min_fill_ratio=1.0, seed=0)
    rng = np.random.default_rng(0)
    while len(plr) < 2000:
        tasks = plr.sample(500)
        plr.update_scores(tasks, rng.integers(0, 50, 500) * 0.1)
    assert plr._mixture
    plr.sample(1)  # repairs: the order is current
    assert not plr._dirty
    buffered = plr.buffer_tasks()
    for t in rng.choice(buffered, size=100, replace=False).tolist():  # 100 single writes (fast path)
        plr.update_scores([t], [float(rng.integers(0, 50)) * 0.1])
    assert len(plr._dirty) <= 100 and not plr._order_stale  # recorded; 100 < 2000 / 8: a merge next
    fresh = PLR(Discrete(5000), buffer_size=2000, replay_prob=1.0, min_fill_ratio=1.0, seed=0)
    fresh.load_state_dict(plr.state_dict())
    assert plr.sample(50) == fresh.sample(50)
    assert not plr._dirty
    assert plr._rank_pos[:2000].tolist() == fresh._rank_pos[:2000].tolist()


@given(st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_small_buffer_replays_are_generator_choice_draws(seed, k):
    """Small buffers draw replays exactly as ``Generator.choice(m, k, p=replay_weights())`` would, from
    the same generator state (after the replay decision's uniforms), for k = 1 too."""
    plr = PLR(StudentSpace(60), buffer_size=20, replay_prob=0.0, staleness_coef=0.3, temperature=0.3,
              seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        ts = plr.sample(8)
        plr.update_scores(ts, rng.integers(0, 4, 8) * 0.5)
    plr.replay_prob = 1.0
    gen = copy.deepcopy(plr.rng)
    buffered, weights = plr.buffer_tasks(), plr.replay_weights()
    if k == 1:
        gen.random()
    else:
        gen.random(k)
    expected = [buffered[i] for i in gen.choice(len(buffered), size=k, p=weights)]
    assert plr.sample(k) == expected


def test_single_writes_and_array_writes_agree_and_fail_alike():
    """``update_scores`` with a few Python numbers takes a scalar path; numpy inputs the vectorised one:
    same state, and the same errors with nothing changed."""
    space = StudentSpace(200)
    a = PLR(space, buffer_size=4, replay_prob=0.5, seed=1)
    b = PLR(space, buffer_size=4, replay_prob=0.5, seed=1)
    for step in range(30):
        ts = a.sample(3)
        assert b.sample(3) == ts
        vals = [float(step % 4), step % 3, 0.25]  # an int score too
        a.update_scores(ts, vals)
        b.update_scores(np.array(ts), np.array(vals, dtype=np.float64))
    assert _states_equal(a.state_dict(), b.state_dict())
    before = a.state_dict()
    t = a.buffer_tasks()[0]
    never = next(x for x in range(200) if x >= a._seen.shape[0] or not a._seen[x])
    for tasks, scores, err, match in [
        ([t], [float("inf")], ValueError, "finite"),
        ([t, t], [1.0, float("nan")], ValueError, "finite"),
        ([t, never], [1.0, 2.0], KeyError, "never sampled"),
        ([t], [1.0, 2.0], ValueError, "shape"),
        ([999], [1.0], ValueError, "not an encoded task"),
        ([t], ["x"], TypeError, "numbers"),
    ]:
        with pytest.raises(err, match=match):
            a.update_scores(tasks, scores)
    assert _states_equal(before, a.state_dict())
    pw = PLR(space, prioritization="power", replay_prob=0.0, seed=0)
    (u,) = pw.sample(1)
    with pytest.raises(ValueError, match="non-negative"):
        pw.update_scores([u], [-1.0])
