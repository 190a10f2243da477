"""Sampling for Learnability (Rutherford et al. 2024) and its full-distribution variant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated_student import SimulatedStudent, StudentSpace, run_student, uniform_curriculum

from magister.curricula.sfl import (
    SFL,
    SumTree,
    expected_learnability,
    learnability,
    prior_mean,
    top_k_learnable,
)
from magister.task_spaces.discrete import Discrete
from magister.task_spaces.open_ended import OpenEnded

RATES = [0.5, 0.9, 0.2, 0.0, 1.0]


def evaluating(cls):
    """Adapter: evaluate the simulated student on every task every ``every`` episodes (``mc`` episodes
    per task, not charged to the budget) and send the rates through ``update_on_demand``."""

    class Evaluated(cls):
        def __init__(self, space, student, every=256, mc=10, **kw):
            super().__init__(space, **kw)
            self.student, self.every, self.mc, self._count = student, every, mc, 0
            self._eval_rng = np.random.default_rng(123)
            self.evaluate()

        def evaluate(self):
            rates = self._eval_rng.binomial(self.mc, self.student.p) / self.mc
            self.update_on_demand({"success_rates": rates})

        def update_on_episode(self, *args, **kwargs):
            super().update_on_episode(*args, **kwargs)
            self._count += 1
            if self._count % self.every == 0:
                self.evaluate()

    return Evaluated


# -- exact values ----------------------------------------------------------------------------------------
def test_learnability_exact():
    assert learnability(np.array(RATES)).tolist() == pytest.approx([0.25, 0.09, 0.16, 0.0, 0.0])


def test_top_k_selection_by_hand():
    rng = np.random.default_rng(0)
    assert top_k_learnable(np.array([0.25, 0.09, 0.16, 0.0, 0.0]), 2, rng).tolist() == [0, 2]
    assert top_k_learnable(np.array([0.25, 0.09, 0.16, 0.0, 0.0]), 3, rng).tolist() == [0, 2, 1]
    # ties are broken at random: both tied tasks win sometimes
    winners = {int(top_k_learnable(np.array([0.1, 0.2, 0.1]), 2, rng)[1]) for _ in range(50)}
    assert winners == {0, 2}


def test_topk_buffer_and_distribution_by_hand():
    cur = SFL(Discrete(5), batch_size=500, buffer_size=2, sample_ratio=0.5, seed=0)
    cur.update_on_demand({"success_rates": RATES})
    assert sorted(cur.buffer.tolist()) == [0, 2]
    assert cur.distribution() == pytest.approx([0.35, 0.1, 0.35, 0.1, 0.1])
    draws = np.array(cur.sample(20_000))
    freq = np.bincount(draws, minlength=5) / draws.size
    assert np.abs(freq - [0.35, 0.1, 0.35, 0.1, 0.1]).max() < 0.015


def test_topk_rho_one_samples_only_the_buffer():
    cur = SFL(Discrete(5), batch_size=500, buffer_size=2, sample_ratio=1.0, seed=0)
    cur.update_on_demand({"success_rates": RATES})
    assert set(cur.sample(200)) == {0, 2}


def test_dist_variant_by_hand():
    cur = SFL(Discrete(5), method="dist", seed=0)
    cur.update_on_demand({"success_rates": RATES})
    assert cur.distribution() == pytest.approx([0.5, 0.18, 0.32, 0.0, 0.0])
    assert set(cur.sample(500)) == {0, 1, 2}


def test_dist_variant_floor_for_unseen_and_floor_all():
    cur = SFL(Discrete(6), method="dist", unseen_weight=0.01, seed=0)
    cur.update_on_demand({"success_rates": dict(enumerate(RATES))})  # task 5 never seen
    assert cur.distribution() == pytest.approx(np.array([0.25, 0.09, 0.16, 0.0, 0.0, 0.01]) / 0.51)
    cur = SFL(Discrete(6), method="dist", unseen_weight=0.01, floor_all=True, seed=0)
    cur.update_on_demand({"success_rates": dict(enumerate(RATES))})
    assert cur.distribution() == pytest.approx(np.array([0.25, 0.09, 0.16, 0.01, 0.01, 0.01]) / 0.53)


def test_online_estimate_is_windowed_mean():
    cur = SFL(Discrete(3), success_window=2, update_period=100, seed=0)
    for v, expected in [(1.0, 1.0), (0.0, 0.5), (1.0, 0.75), (1.0, 0.875)]:
        cur.update_on_episode(v, 1, 1, v)
        assert cur.p[1] == pytest.approx(expected)
    assert cur.count.tolist() == [0, 4, 0]


def test_posterior_expected_learnability_by_hand():
    # Beta(a, b): E[p(1-p)] = ab / ((a+b)(a+b+1)); prior Beta(s mu, s(1-mu)) with E = unseen_weight
    mu = prior_mean(0.01, 1.0)
    assert mu * (1 - mu) * 1.0 / 2.0 == pytest.approx(0.01)
    assert prior_mean(0.01, 0.0) == 0.0 and prior_mean(0.25, 1.0) == 0.5  # clamped to the largest prior
    a, b = 1.0 + mu, 1.0 - mu  # one success: alpha = 1 + s mu, beta = s (1 - mu)
    assert expected_learnability(np.array([1.0]), np.array([1.0]), 1.0, mu)[0] == pytest.approx(
        a * b / (2.0 * 3.0))
    a, b = 10.0 + mu, 11.0 - mu  # window mean 0.5 over 20 observations
    assert expected_learnability(np.array([0.5]), np.array([20.0]), 1.0, mu)[0] == pytest.approx(
        a * b / (21.0 * 22.0))
    cur = SFL(Discrete(4), method="dist", update_period=3, seed=0)
    cur.update_task_progress(0, 1.0)
    cur.update_task_progress(1, 0.0)
    cur.update_task_progress(1, 0.0)  # refresh: task 0 one success, task 1 two failures, 2-3 unseen
    w = [(1 + mu) * (1 - mu) / 6, mu * (3 - mu) / 12, 0.01, 0.01]
    np.testing.assert_allclose(cur.learnability(), w)
    np.testing.assert_allclose(cur.distribution(), np.array(w) / sum(w))
    # evaluation rates are exact: p(1-p), no prior
    cur.update_on_demand({"success_rates": {1: 0.5}})
    assert cur.learnability()[1] == 0.25
    # prior_strength=0: the plain p(1-p) of the running mean
    plain = SFL(Discrete(4), method="dist", update_period=3, prior_strength=0.0, seed=0)
    for t, v in [(0, 1.0), (1, 0.0), (1, 0.0)]:
        plain.update_task_progress(t, v)
    np.testing.assert_allclose(plain.learnability(), [0.0, 0.0, 0.01, 0.01])


@pytest.mark.parametrize("kwargs", [{}, {"method": "dist"}, {"keep_buffer": True, "sample_ratio": 0.6}])
def test_deferred_work_changes_nothing(kwargs):
    """Updates only queue observations; folding and due refreshes run at the next read. Reading after
    every update (forcing the work at once) and reading rarely give the same estimates and samples."""
    space = StudentSpace(300)
    eager = SFL(space, update_period=4, batch_size=40, seed=5, **kwargs)
    lazy = SFL(space, update_period=4, batch_size=40, seed=5, **kwargs)
    rng = np.random.default_rng(1)
    for _ in range(60):
        tasks = eager.sample(3)
        assert lazy.sample(3) == tasks
        for _ in range(int(rng.integers(0, 30))):  # bursts longer than the period: several refreshes due
            t = tasks[0] if rng.random() < 0.5 else int(rng.integers(300))
            v = float(rng.random() < 0.5)
            eager.update_on_episode(v, 1, t, v)
            eager.success_rates()  # a read: the work is done now
            lazy.update_on_episode(v, 1, t, v)
        assert eager.num_refreshes == lazy.num_refreshes
    for _ in range(2500):  # a long stretch without reads: the queue is worked off every 256 updates
        t, v = int(rng.integers(300)), float(rng.random() < 0.3)
        eager.update_on_episode(v, 1, t, v)
        eager.success_rates()
        lazy.update_on_episode(v, 1, t, v)
    assert len(lazy._obs_slots) < 256
    assert eager.sample(20) == lazy.sample(20)
    np.testing.assert_array_equal(eager.success_rates(), lazy.success_rates())
    np.testing.assert_array_equal(eager.count, lazy.count)
    np.testing.assert_array_equal(eager.distribution(), lazy.distribution())


def test_refresh_every_update_period():
    cur = SFL(Discrete(50), update_period=3, seed=0)
    cur.sample(1)  # first sample builds the buffer
    assert cur.num_refreshes == 1
    for i in range(6):
        cur.update_task_progress(i, 0.5)
    assert cur.num_refreshes == 3
    # the dist variant caches its CDF between refreshes: feedback alone does not change sampling
    d = SFL(Discrete(3), method="dist", update_period=2, seed=0)
    before = d.distribution()
    d.update_task_progress(0, 0.5)
    np.testing.assert_array_equal(d.distribution(), before)
    d.update_task_progress(0, 0.5)
    assert d.distribution()[0] > before[0]


def test_buffer_refresh_is_over_a_batch_not_the_space():
    cur = SFL(StudentSpace(1_000_000), batch_size=200, buffer_size=10, seed=0)
    cur.update_on_demand({"success_rates": {7: 0.5, 123_456: 0.4}})
    assert cur.buffer.size == 10
    # the two learnable tasks are very unlikely to be among 200 random candidates: not in the buffer
    assert not {7, 123_456} <= set(cur.buffer.tolist())
    keep = SFL(StudentSpace(1_000_000), batch_size=200, buffer_size=10, keep_buffer=True, seed=0)
    keep.update_on_demand({"success_rates": {7: 0.5}})
    keep.buffer = np.array([7])
    keep.update_on_demand({"success_rates": {123_456: 0.4}})
    assert 7 in keep.buffer.tolist()


def test_million_tasks_dist():
    n = 1_000_000
    cur = SFL(StudentSpace(n), method="dist", unseen_weight=0.0, seed=0)
    cur.update_on_demand({"success_rates": {3: 0.5, 999_999: 0.5}})
    assert set(cur.sample(1000)) == {3, 999_999}


def test_unbounded_space_topk():
    space = OpenEnded(lambda rng: int(rng.integers(10**9)), encode_fn=lambda t: t, decode_fn=lambda e: e)
    cur = SFL(space, batch_size=20, buffer_size=4, sample_ratio=0.5, seed=0)
    tasks = cur.sample(10)
    assert len(tasks) == 10
    cur.update_on_episode(1.0, 1, tasks[0], 0.5)
    assert cur.count[cur.index.slot(tasks[0], add=False)] == 1
    cur.update_on_demand({"success_rates": {tasks[1]: 0.5}})
    with pytest.raises(ValueError, match="mapping"):
        cur.update_on_demand({"success_rates": [0.5]})
    with pytest.raises(NotImplementedError):
        cur.distribution()
    # refreshes register only the K buffer winners, not all N candidates
    for _ in range(5):
        cur._refresh()
    assert len(cur.index) <= 4 * cur.num_refreshes + 2
    keep = SFL(space, batch_size=20, buffer_size=3, keep_buffer=True, seed=0)
    first = keep.sample(1)[0]
    keep.update_on_demand({"success_rates": {first: 0.5}})
    assert keep.index.slot(first, add=False) in keep.buffer.tolist()
    keep._refresh()
    assert keep.index.slot(first, add=False) in keep.buffer.tolist()  # 0.25 beats every unseen 0.01
    with pytest.raises(TypeError, match="finite"):
        SFL(space, method="dist")


@given(st.lists(st.floats(0, 1), min_size=6, max_size=6), st.integers(1, 6), st.floats(0, 1))
def test_topk_distribution_properties(rates, k, rho):
    cur = SFL(Discrete(6), batch_size=300, buffer_size=k, sample_ratio=rho, seed=0)
    cur.update_on_demand({"success_rates": rates})
    p = cur.distribution()
    assert p.sum() == pytest.approx(1.0) and (p >= 0).all()
    ell = learnability(np.array(rates))
    # every buffered task is at least as learnable as every candidate left out
    out = np.setdiff1d(np.arange(6), cur.buffer)
    if out.size:
        assert ell[cur.buffer].min() >= ell[out].max()


@given(
    st.lists(st.floats(0, 10), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 39), st.floats(0, 10)), max_size=30),
    st.lists(st.floats(0, 0.999), min_size=1, max_size=20),
)
def test_sum_tree_matches_cumulative_sums(weights, writes, us):
    w = np.array(weights)
    tree = SumTree(w)
    for slot, value in writes:  # one write at a time: exercises the incremental path
        if slot < w.size:
            w[slot] = value
            tree.set(np.array([slot]), np.array([value]))
    np.testing.assert_allclose(tree.weights, w)
    assert tree.total() == pytest.approx(w.sum(), abs=1e-9)
    assert tree.positive == int((w > 0).sum())
    if w.sum() > 0:
        got = tree.sample(np.array(us))
        c = np.cumsum(w)
        expected = np.minimum(np.searchsorted(c, np.array(us) * w.sum(), side="right"), w.size - 1)
        targets = np.array(us) * w.sum()
        near_edge = np.isclose(targets[:, None], np.concatenate(([0.0], c))[None, :], atol=1e-9).any(axis=1)
        assert (got[~near_edge] == expected[~near_edge]).all()
        assert (w[got] > 0).all()


def test_sum_tree_never_draws_a_zero_weight_slot_after_cancellation():
    # 1.0 -> 1e-263 incrementally: the delta -1.0 swallows the tiny weight, the partial sums become 0
    tree = SumTree(np.array([1.0, 0.0, 0.0]))
    tree.set(np.array([0]), np.array([3.879319132294896e-263]))
    assert tree.sample(np.array([0.0, 0.5, 0.999])).tolist() == [0, 0, 0]


def test_sum_tree_bulk_set_and_bad_weights():
    tree = SumTree(np.ones(8))
    tree.set(np.arange(8), np.arange(8.0))  # many slots at once: rebuilt
    assert tree.total() == 28.0 and tree.positive == 7
    assert 0 not in tree.sample(np.linspace(0, 0.999, 50)).tolist()
    with pytest.raises(ValueError, match="non-negative"):
        SumTree(np.array([1.0, -1.0]))


# -- behaviour -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["topk", "dist"])
def test_beats_domain_randomization(method):
    n, budget = 1000, 8000
    space = StudentSpace(n)
    student = SimulatedStudent(n, seed=0)
    cur = evaluating(SFL)(space, student, every=256, method=method, seed=0)
    res = run_student(cur, space, budget=budget, seed=0, student=student)
    dr = run_student(uniform_curriculum(space, seed=0), space, budget=budget, seed=0)
    assert res["frac_possible"] >= 0.8
    assert res["success_possible"] > dr["success_possible"]


@pytest.mark.parametrize("method", ["topk", "dist"])
def test_online_beats_domain_randomization(method):
    # Online success estimates only (no evaluation). 16000 episodes: online SFL spends its first
    # episodes finding which tasks are possible. dist: unseen_weight=0.001 encodes the prior knowledge
    # that most tasks are impossible (with 0.01 it explores more: success 0.63, frac 0.62-0.72).
    n, budget = 1000, 16000
    space = StudentSpace(n)
    kwargs = {"method": "dist", "unseen_weight": 0.001} if method == "dist" else {}
    res = run_student(SFL(space, seed=0, **kwargs), space, budget=budget, seed=0)
    dr = run_student(uniform_curriculum(space, seed=0), space, budget=budget, seed=0)
    # measured (success_possible / frac_possible): topk 0.735 / 0.824, dist 0.656 / 0.835, DR 0.493 / 0.10
    assert res["frac_possible"] >= 0.8
    assert res["success_possible"] > dr["success_possible"] + 0.1


def test_online_prior_beats_plain_estimate():
    # prior_strength=0 (plain p(1-p)): one failure sets p=0, learnability 0 < unseen_weight, so a
    # possible task that failed once ranks below every unexplored task and the buffer keeps filling with
    # unexplored (mostly impossible) tasks. Measured at 8000 episodes: frac 0.58 plain, 0.71 with prior.
    space = StudentSpace(1000)
    plain = run_student(SFL(space, prior_strength=0.0, seed=0), space, budget=8000, seed=0)
    prior = run_student(SFL(space, seed=0), space, budget=8000, seed=0)
    assert plain["frac_possible"] < prior["frac_possible"] - 0.05
    assert plain["success_possible"] < prior["success_possible"]


# -- checkpointing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"method": "dist"}, {"sample_ratio": 0.5, "keep_buffer": True}])
def test_checkpoint_resumes_identically(kwargs):
    space = StudentSpace(60)
    a = SFL(space, update_period=5, batch_size=30, **kwargs, seed=4)
    rng = np.random.default_rng(0)
    for _ in range(30):
        for t in a.sample(4):
            a.update_on_episode(1.0, 1, t, float(rng.random() < 0.5))
    b = SFL(space, update_period=5, batch_size=30, **kwargs, seed=77)
    b.load_state_dict(a.state_dict())
    assert a.sample(40) == b.sample(40)
    for t in range(12):
        a.update_task_progress(t, 0.25)
        b.update_task_progress(t, 0.25)
    assert a.sample(40) == b.sample(40)
    np.testing.assert_array_equal(a.distribution(), b.distribution())


def test_checkpoint_unbounded_space():
    def make():
        return OpenEnded(lambda rng: int(rng.integers(10**6)), encode_fn=lambda t: t, decode_fn=lambda e: e)

    a = SFL(make(), batch_size=10, buffer_size=3, sample_ratio=0.7, update_period=4, seed=1)
    for t in a.sample(30):
        a.update_on_episode(0.0, 1, t, 0.5)
    b = SFL(make(), batch_size=10, buffer_size=3, sample_ratio=0.7, update_period=4, seed=2)
    b.load_state_dict(a.state_dict())
    assert a.sample(20) == b.sample(20)


# -- bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.update_on_episode(1.0, 1, 9, 1.0), "not an encoded task"),
        (lambda c: c.update_on_episode(1.0, 1, 0, float("nan")), "finite"),
        (lambda c: c.update_on_episode(float("nan"), 1, 0, 0.0), "finite"),
        (lambda c: c.update_task_progress(0, -0.5), r"\[0, 1\]"),
        (lambda c: c.update_on_demand({"success_rates": [0.5] * 3}), "shape"),
        (lambda c: c.update_on_demand({"success_rates": [0.5, 0.5, 0.5, float("inf")]}), "NaN"),
        (lambda c: c.update_on_demand({"success_rates": {0: 2.0}}), r"\[0, 1\]"),
        (lambda c: c.update_on_demand({"success_rates": {17: 0.5}}), "not an encoded task"),
    ],
)
@pytest.mark.parametrize("method", ["topk", "dist"])
def test_bad_input_raises_and_leaves_state_unchanged(call, error, method):
    cur = SFL(Discrete(4), method=method, update_period=2, seed=0)
    cur.sample(3)
    cur.update_on_episode(1.0, 1, 0, 1.0)
    before = cur.state_dict()
    with pytest.raises(ValueError, match=error):
        call(cur)
    after = cur.state_dict()
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, after[k])
        else:
            assert v == after[k], k


@pytest.mark.parametrize(
    "kwargs",
    [{"method": "regret"}, {"batch_size": 0}, {"update_period": -1}, {"buffer_size": 1.5},
     {"sample_ratio": 1.2}, {"unseen_weight": 0.3}, {"success_window": 0}, {"prior_strength": -1.0},
     {"prior_strength": float("nan")}],
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        SFL(Discrete(3), **kwargs)


def test_metrics():
    cur = SFL(Discrete(3), seed=0)
    cur.update_on_demand({"success_rates": [0.5, 0.0, 1.0]})
    m = cur.metrics()
    assert m["sfl/tasks_seen"] == 3.0
    assert m["sfl/mean_learnability_seen"] == pytest.approx(0.25 / 3)
    assert all(isinstance(v, float) for v in m.values())
