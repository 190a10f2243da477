"""Tests of the PLR score functions (magister.curricula.scoring) and the learner-side helpers
(magister.integrations.scores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from simulated_student import SimulatedStudent, StudentSpace, uniform_curriculum

from magister import serve
from magister.curricula.accel import ACCEL
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.plr import PLR, RobustPLR
from magister.curricula.scoring import (
    Segment,
    gae,
    learnability,
    max_mc,
    positive_value_loss,
    power_weights,
    rank_weights,
    rank_weights_from_order,
    replay_distribution,
    score_segment,
    sorted_rank_weights,
    staleness_weights,
    value_l1,
)
from magister.integrations.scores import (
    _value_scored_classes,
    compute_advantages,
    feed_scores,
    rollout_scores,
)

# -- pure formulas, worked by hand -------------------------------------------------------------------


def test_gae_by_hand():
    # gamma = 0.5, lambda = 0.5, V = (1, 2), rewards (1, 3), bootstrap V(s_2) = 4, not terminal:
    # delta_1 = 3 + 0.5*4 - 2 = 3 ; delta_0 = 1 + 0.5*2 - 1 = 1 ; A_1 = 3 ; A_0 = 1 + 0.25*3 = 1.75
    adv = gae(np.array([1.0, 3.0]), np.array([1.0, 2.0]), 4.0, 0.5, 0.5, terminal=False)
    np.testing.assert_allclose(adv, [1.75, 3.0])
    # terminal: the bootstrap is ignored: delta_1 = 3 - 2 = 1 ; A_0 = 1 + 0.25 = 1.25
    adv = gae(np.array([1.0, 3.0]), np.array([1.0, 2.0]), 4.0, 0.5, 0.5, terminal=True)
    np.testing.assert_allclose(adv, [1.25, 1.0])
    assert value_l1(np.array([1.25, -1.0])) == pytest.approx(1.125)
    assert positive_value_loss(np.array([1.25, -1.0])) == pytest.approx(0.625)
    assert max_mc(np.array([1.0, 2.0]), 5.0) == pytest.approx(3.5)


def test_learnability_values_and_errors():
    np.testing.assert_allclose(learnability(np.array([0.0, 0.2, 0.5, 1.0])), [0.0, 0.16, 0.25, 0.0])
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            learnability(bad)


def test_rank_power_staleness_mixture_by_hand():
    s = np.array([0.2, 0.9, 0.5, 0.9])
    # ranks with the tie at 0.9 sharing ranks 1 and 2; beta = 1: h = (1/4, (1 + 1/2)/2, 1/3, (1 + 1/2)/2)
    h = np.array([0.25, 0.75, 1 / 3, 0.75])
    np.testing.assert_allclose(rank_weights(s, 1.0), h / h.sum())
    # beta = 0.5: h^2, ties share the mean of 1 and 1/4
    h2 = np.array([1 / 16, 0.625, 1 / 9, 0.625])
    np.testing.assert_allclose(rank_weights(s, 0.5), h2 / h2.sum())
    np.testing.assert_allclose(power_weights(np.array([1.0, 2.0, 0.0]), 0.5), [0.2, 0.8, 0.0])
    np.testing.assert_allclose(power_weights(np.zeros(4), 1.0), [0.25] * 4)
    np.testing.assert_allclose(staleness_weights(np.array([1, 4, 2]), clock=5), [4 / 8, 1 / 8, 3 / 8])
    # P = (1 - rho) P_S + rho P_C with rho = 0.25
    p = replay_distribution(s, np.array([1, 4, 2, 5]), 5, temperature=1.0, staleness_coef=0.25)
    pc = np.array([4, 1, 3, 0]) / 8
    np.testing.assert_allclose(p, 0.75 * h / h.sum() + 0.25 * pc)
    assert rank_weights(np.array([5.0, 1.0]), 1e-4)[0] == pytest.approx(1.0)  # tiny beta: greedy, no NaN


def test_formula_argument_errors():
    with pytest.raises(ValueError, match="temperature"):
        rank_weights(np.ones(2), 0.0)
    with pytest.raises(ValueError, match="non-negative"):
        power_weights(np.array([-1.0, 1.0]), 1.0)
    with pytest.raises(ValueError, match="clock"):
        staleness_weights(np.array([3]), clock=2)
    with pytest.raises(ValueError, match="prioritization"):
        replay_distribution(np.ones(2), np.zeros(2), 1, temperature=1.0, staleness_coef=0.1,
                            prioritization="x")
    with pytest.raises(ValueError, match="staleness_coef"):
        replay_distribution(np.ones(2), np.zeros(2), 1, temperature=1.0, staleness_coef=2.0)
    with pytest.raises(ValueError, match="equal length"):
        gae(np.ones(2), np.ones(3), 0.0, 0.9, 0.9, True)
    with pytest.raises(ValueError, match="unknown segment score"):
        score_segment("learnability", Segment(np.ones(1), np.ones(1), np.ones(1), True, 1.0))


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-100, 100)), st.floats(0.01, 10))
def test_rank_weights_is_a_distribution_ordered_by_score(scores, beta):
    w = rank_weights(scores, beta)
    assert w.sum() == pytest.approx(1.0) and np.all(w >= 0)
    i, j = np.argmax(scores), np.argmin(scores)
    assert w[i] >= w[j]
    # equal scores get equal weight
    for v in np.unique(scores):
        assert np.ptp(w[scores == v]) <= 1e-12


def test_sorted_rank_weights_by_hand():
    # beta = 0.5: r^(-2) = 1, 1/4, 1/9
    np.testing.assert_allclose(sorted_rank_weights(3, 0.5), [1.0, 0.25, 1 / 9])
    # a tiny beta underflows the tail to 0 but never the first rank
    w = sorted_rank_weights(4, 1e-4)
    assert w[0] == 1.0 and w[1:].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="temperature"):
        sorted_rank_weights(3, 0.0)


@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.sampled_from([0.1, 0.5, 1.0, 3.0]),
       st.randoms(use_true_random=False))
def test_rank_weights_from_any_descending_order_equal_rank_weights(vals, beta, rnd):
    """Any descending order (ties in any order) and a longer cached weight table give exactly (bit for
    bit) the weights of rank_weights, which sorts itself."""
    s = np.array(vals, dtype=np.float64) * 0.5  # few distinct values: many ties
    order = sorted(range(s.size), key=lambda i: (-s[i], rnd.random()))
    got = rank_weights_from_order(s, np.array(order), sorted_rank_weights(s.size + 17, beta))
    assert got.tolist() == rank_weights(s, beta).tolist()


# -- rollout helpers ---------------------------------------------------------------------------------


def _rollout():
    """T = 4, N = 2. Env 0: episodes end at t=0 and t=2 -> segments [0], [1, 2] (a full episode), [3].
    Env 1: no done -> one partial segment [0..3]."""
    rewards = np.array([[1.0, 0.0], [0.0, 0.0], [2.0, 1.0], [1.0, 0.0]])
    values = np.array([[1.0, 0.5], [1.0, 0.5], [1.0, 0.5], [2.0, 0.5]])
    dones = np.array([[True, False], [False, False], [True, False], [False, False]])
    boot = np.array([3.0, 0.5])
    tasks = np.array([[5, 9], [6, 9], [6, 9], [7, 9]])
    return rewards, values, dones, boot, tasks


# With gamma = 0.5, lambda = 1:
#  env 0, seg [0] terminal: delta = 1 - 1 = 0 -> A = (0)
#  env 0, seg [1, 2] terminal: delta_2 = 2 - 1 = 1, delta_1 = 0 + 0.5*1 - 1 = -0.5;
#     A_2 = 1, A_1 = -0.5 + 0.5 = 0
#  env 0, seg [3] partial: delta_3 = 1 + 0.5*3 - 2 = 0.5 -> A = (0.5)
#  env 1, seg [0..3] partial, V = 0.5, bootstrap 0.5: delta_t = r_t + 0.25 - 0.5 = r_t - 0.25
#     delta = (-0.25, -0.25, 0.75, -0.25); A_3 = -0.25, A_2 = 0.75 - 0.125 = 0.625,
#     A_1 = -0.25 + 0.3125 = 0.0625, A_0 = -0.25 + 0.03125 = -0.21875
ENV1_ADV = np.array([-0.21875, 0.0625, 0.625, -0.25])


def test_rollout_segments_and_value_scores_by_hand():
    r, v, d, b, tasks = _rollout()
    adv = compute_advantages(r, v, d, b, 0.5, 1.0)
    np.testing.assert_allclose(adv[:, 0], [0.0, 0.0, 1.0, 0.5])
    np.testing.assert_allclose(adv[:, 1], ENV1_ADV)
    s = rollout_scores(r, v, d, b, tasks, score="value_l1", gamma=0.5, gae_lambda=1.0)
    assert s.tasks == [5, 6, 7, 9]
    assert s.lengths.tolist() == [1, 2, 1, 4]
    assert s.done.tolist() == [True, True, False, False]
    assert s.full.tolist() == [False, True, False, False]
    assert s.returns.tolist() == [1.0, 2.0, 1.0, 1.0]
    np.testing.assert_allclose(s.scores, [0.0, 0.5, 0.5, np.abs(ENV1_ADV).mean()])
    p = rollout_scores(r, v, d, b, tasks, score="positive_value_loss", gamma=0.5, gae_lambda=1.0)
    np.testing.assert_allclose(p.scores, [0.0, 0.5, 0.5, (0.0625 + 0.625) / 4])
    # MaxMC without any record: the full episode of task 6 gives R_max = 2; others use their own return
    m = rollout_scores(r, v, d, b, tasks, score="max_mc", gamma=0.5, gae_lambda=1.0)
    np.testing.assert_allclose(m.scores, [1 - 1, 2 - 1, 1 - 2, 1 - 0.5])
    m2 = rollout_scores(r, v, d, b, tasks, score="max_mc", gamma=0.5, gae_lambda=1.0,
                        max_returns=lambda ts: np.array([10.0 if t == 9 else -np.inf for t in ts]))
    assert m2.scores[3] == pytest.approx(10 - 0.5)
    ret = rollout_scores(r, v, d, b, tasks, score="return", gamma=0.5, gae_lambda=1.0)
    np.testing.assert_allclose(ret.scores, [1.0, 2.0, 1.0, 1.0])


def test_truncation_with_final_values():
    r = np.array([[0.0], [0.0]])
    v = np.array([[1.0], [1.0]])
    d = np.array([[False], [True]])
    tr = np.array([[False], [True]])
    fv = np.array([[0.0], [4.0]])
    # truncated at t=1 with V(final) = 4: delta_1 = 0 + 0.5*4 - 1 = 1 ; delta_0 = 0.5 - 1 = -0.5 ; A_0 = 0
    adv = compute_advantages(r, v, d, np.zeros(1), 0.5, 1.0, truncated=tr, final_values=fv)
    np.testing.assert_allclose(adv[:, 0], [0.0, 1.0])
    adv_term = compute_advantages(r, v, d, np.zeros(1), 0.5, 1.0)  # treated as terminal without final values
    np.testing.assert_allclose(adv_term[:, 0], [-1.0, -1.0])


def test_one_gae_for_a_rollout_and_a_segment_by_hand():
    """compute_advantages (the one GAE) on a hand-made rollout with a termination, a truncation with a final
    value and a bootstrap; scoring.gae is the same recursion on one column."""
    # gamma = 0.5, lambda = 0.5, T = 3, N = 2; V = 1 everywhere; bootstrap V(s_3) = (2, 4)
    r = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
    v = np.ones((3, 2))
    d = np.array([[True, False], [False, True], [False, False]])
    tr = np.array([[False, False], [False, True], [False, False]])
    fv = np.array([[0.0, 0.0], [0.0, 6.0], [0.0, 0.0]])
    # env 0: t=0 terminal: delta_0 = 1 - 1 = 0, A_0 = 0 (the done cuts the recursion);
    #        t=2 partial: delta_2 = 3 + 0.5*2 - 1 = 3;
    #        t=1: delta_1 = 0 + 0.5*1 - 1 = -0.5, A_1 = -0.5 + 0.25*3 = 0.25
    # env 1: t=1 truncated with V(final) = 6: delta_1 = 2 + 0.5*6 - 1 = 4, A_1 = 4;
    #        t=0: delta_0 = 0 + 0.5 - 1 = -0.5, A_0 = -0.5 + 0.25*4 = 0.5;
    #        t=2 partial: delta_2 = 1 + 0.5*4 - 1 = 2
    want = np.array([[0.0, 0.5], [0.25, 4.0], [3.0, 2.0]])
    adv = compute_advantages(r, v, d, np.array([2.0, 4.0]), 0.5, 0.5, truncated=tr, final_values=fv)
    assert adv.dtype == np.float64 and adv.tolist() == want.tolist()
    as_t = torch.as_tensor
    adv_t = compute_advantages(as_t(r), as_t(v), as_t(d), as_t(np.array([2.0, 4.0])), 0.5, 0.5,
                               truncated=as_t(tr), final_values=as_t(fv))
    assert isinstance(adv_t, torch.Tensor) and adv_t.dtype == torch.float64
    assert adv_t.tolist() == want.tolist()
    # without final values the truncation counts as terminal: delta_1 = 2 - 1 = 1, A_0 = -0.5 + 0.25
    adv = compute_advantages(r, v, d, np.array([2.0, 4.0]), 0.5, 0.5)
    assert adv[:, 1].tolist() == [-0.25, 1.0, 2.0]
    assert gae(r[1:, 0], v[1:, 0], 2.0, 0.5, 0.5, terminal=False).tolist() == [0.25, 3.0]
    assert gae(r[1:, 0], v[1:, 0], float("nan"), 0.5, 0.5, terminal=True).tolist() == [0.0, 2.0]


def _gae_by_definition(r, v, d, b, gamma, lam, tr=None, fv=None):
    """``A_t = sum_{k=t}^{end} (gamma*lambda)^(k-t) delta_k`` over the steps of t's episode in the rollout:
    the definition, summed term by term (no recursion)."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            for k in range(t, T):
                nxt = b[n] if k == T - 1 else v[k + 1, n]
                if d[k, n]:
                    nxt = fv[k, n] if tr is not None and tr[k, n] else 0.0
                adv[t, n] += (gamma * lam) ** (k - t) * (r[k, n] + gamma * nxt - v[k, n])
                if d[k, n]:
                    break
    return adv


@given(st.integers(1, 10), st.integers(1, 4), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
       st.integers(0, 2**31 - 1))
def test_gae_equals_its_definition_numpy_and_torch(T, N, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    r, v = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    d = rng.random((T, N)) < 0.3
    tr = d & (rng.random((T, N)) < 0.5)
    fv, b = rng.normal(size=(T, N)), rng.normal(size=N)
    want = _gae_by_definition(r, v, d, b, gamma, lam, tr, fv)
    adv = compute_advantages(r, v, d, b, gamma, lam, truncated=tr, final_values=fv)
    np.testing.assert_allclose(adv, want, rtol=1e-9, atol=1e-9)
    as_t = torch.as_tensor
    adv_t = compute_advantages(as_t(r), as_t(v), as_t(d), as_t(b), gamma, lam, truncated=as_t(tr),
                               final_values=as_t(fv))
    np.testing.assert_allclose(adv_t.numpy(), adv, rtol=0, atol=1e-12)
    as_terminal = _gae_by_definition(r, v, d, b, gamma, lam)  # no final values: truncation as termination
    np.testing.assert_allclose(compute_advantages(r, v, d, b, gamma, lam), as_terminal, rtol=1e-9, atol=1e-9)


def test_callable_score_and_object_tasks():
    r, v, d, b, tasks = _rollout()
    obj = [[("t", int(x)) for x in row] for row in tasks]
    seen = []

    def score(seg: Segment) -> float:
        seen.append(seg)
        return float(len(seg.rewards)) + seg.advantages.sum()

    s = rollout_scores(r, v, d, b, obj, score=score, gamma=0.5, gae_lambda=1.0)
    assert s.tasks == [("t", 5), ("t", 6), ("t", 7), ("t", 9)]
    np.testing.assert_allclose(s.scores, [1.0, 3.0, 1.5, 4 + ENV1_ADV.sum()])
    assert [x.done for x in seen] == [True, True, False, False]


@given(st.integers(1, 12), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_rollout_gae_equals_per_segment_gae_and_torch_matches_numpy(T, N, seed):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(T, N))
    v = rng.normal(size=(T, N))
    d = rng.random((T, N)) < 0.3
    b = rng.normal(size=N)
    adv = compute_advantages(r, v, d, b, 0.9, 0.8)
    for n in range(N):
        start = 0
        for t in range(T):
            if d[t, n] or t == T - 1:
                ref = gae(r[start:t + 1, n], v[start:t + 1, n], b[n], 0.9, 0.8, terminal=bool(d[t, n]))
                np.testing.assert_allclose(adv[start:t + 1, n], ref, atol=1e-10)
                start = t + 1
    tasks = np.zeros((T, N), dtype=np.int64)
    for name in ("value_l1", "positive_value_loss", "max_mc", "return"):
        a = rollout_scores(r, v, d, b, tasks, score=name, gamma=0.9, gae_lambda=0.8)
        t = rollout_scores(torch.tensor(r, dtype=torch.float32), torch.tensor(v, dtype=torch.float32),
                           torch.tensor(d), torch.tensor(b, dtype=torch.float32), torch.tensor(tasks),
                           score=name, gamma=0.9, gae_lambda=0.8)
        np.testing.assert_allclose(a.scores, t.scores, rtol=1e-5, atol=1e-5)
        assert a.lengths.tolist() == t.lengths.tolist() and a.done.tolist() == t.done.tolist()


# -- feed_scores into a curriculum ---------------------------------------------------------------------


def _plr(score="value_l1", n=20):
    plr = PLR(StudentSpace(n), score=score, replay_prob=0.0, buffer_size=10, gamma=0.5, gae_lambda=1.0,
              seed=0)
    plr.sample(n * 5)  # every task has been sampled (known)
    return plr


def test_feed_scores_value_l1_aggregates_per_task():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    tasks = tasks.copy()
    tasks[3, 0] = 6  # task 6 now has two segments: [1, 2] (score 0.5, length 2) and [3] (score 0.5)
    summary = feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at")
    got = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert got == pytest.approx({5: 0.0, 6: 0.5, 9: float(np.abs(ENV1_ADV).mean())})
    assert summary["scores/tasks"] == 3.0 and summary["scores/segments"] == 4.0
    assert plr.max_returns([6]).tolist() == [2.0]  # the full episode's return reached R_max


def test_feed_scores_weighted_mean_and_untouched_tasks():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    tasks = tasks.copy()
    tasks[:, 1] = 5  # task 5: segment [0] of env 0 (score 0, length 1) and env 1's 4 steps
    feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at")
    got = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert got[5] == pytest.approx((0.0 * 1 + np.abs(ENV1_ADV).sum()) / 5)
    assert 9 not in got and set(got) == {5, 6, 7}


def test_feed_scores_partial_skip_and_return_full_only():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at", partial="skip")
    assert sorted(plr.buffer_tasks()) == [5, 6]  # 7 and 9 only had unfinished segments
    ret = _plr("return")
    feed_scores(ret, r, v, d, b, tasks, done_convention="ended_at")
    assert ret.buffer_tasks() == [6] and ret.buffer_scores().tolist() == [2.0]


def test_feed_scores_max_mc_uses_curriculum_record():
    plr = _plr("max_mc")
    plr.update_on_episode(4.0, 10, 9, 1.0)  # R_max(9) = 4 from an earlier episode
    r, v, d, b, tasks = _rollout()
    feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at")
    got = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert got == pytest.approx({5: 0.0, 6: 1.0, 7: -1.0, 9: 3.5})
    assert plr.max_returns([5, 6, 7, 9]).tolist() == [-np.inf, 2.0, -np.inf, 4.0]


def test_feed_scores_torch_inputs():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    feed_scores(plr, torch.tensor(r), torch.tensor(v), torch.tensor(d), torch.tensor(b), torch.tensor(tasks),
                done_convention="ended_at")
    got = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert got == pytest.approx({5: 0.0, 6: 0.5, 7: 0.5, 9: float(np.abs(ENV1_ADV).mean())})


def test_feed_scores_bad_input_leaves_curriculum_unchanged():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    before = plr.state_dict()
    with pytest.raises(ValueError, match="shape"):
        feed_scores(plr, r, v[:3], d, b, tasks, done_convention="ended_at")
    with pytest.raises(ValueError, match="bootstrap_value"):
        feed_scores(plr, r, v, d, b[:1], tasks, done_convention="ended_at")
    with pytest.raises(ValueError, match="tasks"):
        feed_scores(plr, r, v, d, b, tasks[:2], done_convention="ended_at")
    bad_v = v.copy()
    bad_v[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        feed_scores(plr, r, bad_v, d, b, tasks, done_convention="ended_at")
    switch = tasks.copy()
    switch[2, 1] = 3  # env 1 changes task without a done
    with pytest.raises(ValueError, match="changed task"):
        feed_scores(plr, r, v, d, b, switch, done_convention="ended_at")
    with pytest.raises(ValueError, match="partial"):
        feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at", partial="drop")
    unknown = PLR(StudentSpace(20), replay_prob=0.0, seed=0)
    with pytest.raises(KeyError, match="never sampled"):
        feed_scores(unknown, r, v, d, b, tasks, done_convention="ended_at")
    with pytest.raises(ValueError, match="episodes"):
        feed_scores(_plr("learnability"), r, v, d, b, tasks, done_convention="ended_at")
    after = plr.state_dict()
    assert all(
        np.array_equal(before[k], after[k]) if isinstance(before[k], np.ndarray) else before[k] == after[k]
        for k in before
    )
    assert len(unknown) == 0


def test_feed_scores_through_a_server_like_object_holds_its_lock():
    import threading

    class Server:
        def __init__(self, cur):
            self.curriculum = cur
            self.lock = threading.RLock()
            self.held = False

    plr = _plr()
    server = Server(plr)

    def spy(tasks, scores, max_returns=None):
        server.held = server.lock._is_owned()
        PLR.update_scores(plr, tasks, scores, max_returns)

    plr.update_scores = spy
    r, v, d, b, tasks = _rollout()
    out = feed_scores(server, r, v, d, b, tasks, done_convention="ended_at")
    assert server.held and out["scores/tasks"] == 4.0 and len(plr) == 4


def _rollout_loop(curriculum, space, seed, feed, rollouts=150, T=16, N=8, ep_len=4):
    """A PPO-like loop: N envs, rollouts of T steps, episodes of ep_len steps with reward 1 at the end on
    success; values are the simulated student's per-task estimates; feed_scores after every rollout."""
    student = SimulatedStudent(space.num_tasks, seed=seed)
    rng = np.random.default_rng(seed + 7)
    task: list = [None] * N
    step, success, train = [0] * N, [0.0] * N, [True] * N
    on_possible = total = 0
    for _ in range(rollouts):
        r, v = np.zeros((T, N)), np.zeros((T, N))
        d, tasks = np.zeros((T, N), dtype=bool), np.zeros((T, N), dtype=np.int64)
        for t in range(T):
            for n in range(N):
                if task[n] is None:
                    s = curriculum.sample_tasks(1)[0]
                    task[n], train[n], step[n] = s.task, s.train, 0
                    success[n] = float(rng.random() < student.p[s.task])
                    total += 1
                    on_possible += bool(student.possible[s.task])
                i = task[n]
                tasks[t, n], v[t, n] = i, student.value[i]
                step[n] += 1
                if step[n] == ep_len:
                    r[t, n], d[t, n] = success[n], True
                    curriculum.update_on_episode(success[n], ep_len, i, success[n])
                    if train[n]:
                        student.train(np.array([i]), np.array([success[n]]))
                    task[n] = None
        if feed:
            boot = np.array([student.value[i] if i is not None else 0.0 for i in task])
            feed_scores(curriculum, r, v, d, boot, tasks, done_convention="ended_at")
    return float(student.p[student.possible].mean()), on_possible / total


def test_feed_scores_drives_plr_in_a_rollout_loop():
    space = StudentSpace(200)
    plr_success, plr_frac = _rollout_loop(PLR(space, gamma=0.99, gae_lambda=0.95, seed=0), space, 0, True)
    dr_success, dr_frac = _rollout_loop(uniform_curriculum(space, 0), space, 0, False)
    assert plr_frac >= 0.8 and dr_frac < 0.2
    assert plr_success > dr_success + 0.05


# -- done conventions -----------------------------------------------------------------------------------


def _before_step(dones, first=None):
    """The same rollout in CleanRL's convention: dones[t] = done flag before step t, plus next_done."""
    before = np.empty_like(dones)
    before[1:] = dones[:-1]
    before[0] = dones[0] if first is None else first  # concerns the previous rollout: any value
    return before, dones[-1].copy()


def _state(plr):
    return plr.buffer_tasks(), plr.buffer_scores().tolist(), plr.max_returns(list(range(20))).tolist()


def test_feed_scores_requires_an_explicit_done_convention():
    plr = _plr()
    r, v, d, b, tasks = _rollout()
    with pytest.raises(TypeError,
                       match=r"done_convention=.*'ended_at'.*'before_step'.*CleanRL.*episode_starts"):
        feed_scores(plr, r, v, d, b, tasks)
    with pytest.raises(TypeError, match=r"one of \('ended_at', 'before_step'\), got 'cleanrl'"):
        feed_scores(plr, r, v, d, b, tasks, done_convention="cleanrl")
    with pytest.raises(TypeError, match="needs next_done=.*CleanRL's `next_done`"):
        feed_scores(plr, r, v, d, b, tasks, done_convention="before_step")
    with pytest.raises(TypeError, match="next_done is only used with done_convention='before_step'"):
        feed_scores(plr, r, v, d, b, tasks, done_convention="ended_at", next_done=d[-1])
    assert len(plr) == 0  # nothing was fed


def test_before_step_convention_by_hand_and_the_silent_shift_it_prevents():
    r, v, d, b, tasks = _rollout()
    before, next_done = _before_step(d)
    assert before[:, 0].tolist() == [True, True, False, True] and next_done.tolist() == [False, False]
    expected = {5: 0.0, 6: 0.5, 7: 0.5, 9: float(np.abs(ENV1_ADV).mean())}  # worked by hand above
    for first in (False, True):  # dones[0] belongs to the previous rollout and is ignored
        plr = _plr()
        feed_scores(plr, r, v, _before_step(d, np.array([first, first]))[0], b, tasks,
                    done_convention="before_step", next_done=next_done)
        assert dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist())) == pytest.approx(expected)
    # The bug the explicit convention prevents: CleanRL's dones read as "ended at t" cut the episodes one
    # step early, so task 6's episode [1, 2] is split at the wrong place and a task switch appears.
    with pytest.raises(ValueError, match="changed task"):
        feed_scores(_plr(), r, v, before, b, tasks, done_convention="ended_at")
    same_task = np.full_like(tasks, 9)
    right, wrong = _plr(), _plr()
    feed_scores(right, r, v, before, b, same_task, done_convention="before_step", next_done=next_done)
    feed_scores(wrong, r, v, before, b, same_task, done_convention="ended_at")
    assert right.buffer_scores().tolist() != wrong.buffer_scores().tolist()


def test_both_conventions_give_identical_scores_numpy_and_torch():
    r, v, d, b, tasks = _rollout()
    before, next_done = _before_step(d)
    for score in ("value_l1", "positive_value_loss", "max_mc", "return"):
        a, c = _plr(score), _plr(score)
        out_a = feed_scores(a, r, v, d, b, tasks, done_convention="ended_at")
        out_c = feed_scores(c, r, v, before, b, tasks, done_convention="before_step", next_done=next_done)
        assert _state(a) == _state(c) and out_a == out_c
    # CleanRL's float tensors, next_value as (1, N) and next_done as a float tensor
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    a, c = _plr(), _plr()
    feed_scores(a, t(r), t(v), torch.tensor(d), t(b), tasks, done_convention="ended_at")
    feed_scores(c, t(r), t(v), t(before), t(b).reshape(1, -1), tasks, done_convention="before_step",
                next_done=t(next_done))
    assert _state(a) == _state(c)


@st.composite
def _random_rollouts(draw):
    T, N = draw(st.integers(1, 12)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    p_done = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    d = rng.random((T, N)) < p_done
    tasks = np.empty((T, N), dtype=np.int64)
    tasks[0] = rng.integers(0, 20, N)
    for t in range(1, T):  # a new task only right after a done
        tasks[t] = np.where(d[t - 1], rng.integers(0, 20, N), tasks[t - 1])
    r = rng.normal(size=(T, N)) * (rng.random((T, N)) < 0.5)
    v = rng.normal(size=(T, N))
    b = rng.normal(size=N)
    first = rng.random(N) < 0.5
    return r, v, d, b, tasks, first


@given(_random_rollouts(), st.sampled_from(["value_l1", "positive_value_loss", "max_mc", "return"]),
       st.sampled_from(["bootstrap", "skip"]), st.booleans())
def test_conventions_agree_exactly_on_random_rollouts(rollout, score, partial, use_torch):
    r, v, d, b, tasks, first = rollout
    before, next_done = _before_step(d, first)
    if use_torch:
        r, v, b = torch.tensor(r), torch.tensor(v), torch.tensor(b)
        d, before, next_done = torch.tensor(d), torch.tensor(before), torch.tensor(next_done)
    a, c = _plr(score), _plr(score)
    out_a = feed_scores(a, r, v, d, b, tasks, done_convention="ended_at", partial=partial)
    out_c = feed_scores(c, r, v, before, b, tasks, done_convention="before_step", next_done=next_done,
                        partial=partial)
    assert out_a == out_c
    assert _state(a) == _state(c)


# -- shapes ---------------------------------------------------------------------------------------------


def test_transposed_rollout_is_rejected_not_run():
    r, v, d, b, tasks = _rollout()  # T = 4, N = 2
    plr = _plr()
    with pytest.raises(ValueError, match=r"time-major \(T, N\).*rewards \(2, 4\).*bootstrap_value \(2,\).*"
                                         r"look transposed"):
        feed_scores(plr, r.T, v.T, d.T, b, tasks.T, done_convention="ended_at")
    before, next_done = _before_step(d)
    with pytest.raises(ValueError, match=r"dones \(2, 4\).*look transposed"):
        feed_scores(plr, r.T, v.T, before.T, b, tasks.T, done_convention="before_step", next_done=next_done)
    with pytest.raises(ValueError, match=r"dones has shape \(2, 4\), expected \(4, 2\).*time-major"):
        feed_scores(plr, r, v, d.T, b, tasks, done_convention="ended_at")
    with pytest.raises(ValueError, match=r"tasks has shape \(2, 4\), expected time-major \(T, N\) = "
                                         r"\(4, 2\).*tasks\.T"):
        feed_scores(plr, r, v, d, b, tasks.T, done_convention="ended_at")
    with pytest.raises(ValueError, match=r"tasks row 0 must hold 2 tasks"):
        feed_scores(plr, r, v, d, b, [[5, 6, 6, 7], [9, 9, 9, 9]] * 2, done_convention="ended_at")
    with pytest.raises(ValueError, match=r"next_done has shape \(4,\), expected \(2,\)"):
        feed_scores(plr, r, v, before, b, tasks, done_convention="before_step", next_done=np.zeros(4))
    with pytest.raises(ValueError, match=r"rewards\[:, None\]"):
        feed_scores(plr, r[:, 0], v[:, 0], d[:, 0], b[:1], tasks[:, 0], done_convention="ended_at")
    with pytest.raises(ValueError, match=r"bootstrap_value has shape \(2, 2\), expected \(N,\)"):
        feed_scores(plr, r, v, d, np.zeros((2, 2)), tasks, done_convention="ended_at")
    assert len(plr) == 0


@pytest.mark.parametrize("name", ["rewards", "values", "dones", "bootstrap_value", "next_done", "tasks",
                                  "truncated", "final_values"])
def test_each_shape_error_names_the_array_that_disagrees_and_its_expected_shape(name):
    """Regression: a transposed ``rewards`` was blamed on ``values``. Each argument in turn gets a wrong
    shape; the error starts with that argument's name and its shape, says the shape expected, and the
    curriculum is unchanged."""
    r, v, d, b, tasks = _rollout()  # T = 4, N = 2
    before, next_done = _before_step(d)
    args = {"rewards": r, "values": v, "dones": before, "bootstrap_value": b, "tasks": tasks,
            "next_done": next_done, "truncated": np.zeros((4, 2), bool), "final_values": np.zeros((4, 2))}
    bad = {"bootstrap_value": np.zeros(3), "next_done": np.zeros(3)}.get(name, np.asarray(args[name]).T)
    expected = {"bootstrap_value": "(2,)", "next_done": "(2,)"}.get(name, "(4, 2)")
    args[name] = bad
    plr = _plr()
    with pytest.raises(ValueError) as err:
        feed_scores(plr, args.pop("rewards"), args.pop("values"), args.pop("dones"),
                    args.pop("bootstrap_value"), args.pop("tasks"), done_convention="before_step", **args)
    message = str(err.value)
    assert message.startswith(f"{name} has shape {bad.shape}"), message
    assert f"expected {expected}" in message or f"= {expected}" in message, message
    others = {"rewards", "values", "dones"} - {name}
    assert not any(message.startswith(f"{o} ") for o in others), message
    assert len(plr) == 0


def test_two_transposed_arrays_are_both_named():
    r, v, d, b, tasks = _rollout()
    with pytest.raises(ValueError, match=r"^rewards has shape \(2, 4\) and values has shape \(2, 4\), "
                                         r"expected \(4, 2\) = \(steps, envs\) like dones.*rewards and "
                                         r"values look transposed"):
        feed_scores(_plr(), r.T, v.T, d, b, tasks, done_convention="ended_at")
    with pytest.raises(ValueError, match=r"^bootstrap_value has shape \(3,\) \(N = 3 envs\), "
                                         r"expected \(2,\)"):
        feed_scores(_plr(), r, v, d, np.zeros(3), tasks, done_convention="ended_at")


def test_bootstrap_value_as_a_row_or_column_is_accepted():
    r, v, d, b, tasks = _rollout()
    ref = _plr()
    feed_scores(ref, r, v, d, b, tasks, done_convention="ended_at")
    for boot in (b.reshape(1, -1), b.reshape(-1, 1)):
        plr = _plr()
        feed_scores(plr, r, v, d, boot, tasks, done_convention="ended_at")
        assert _state(plr) == _state(ref)


# -- curricula that do not take value scores -----------------------------------------------------------


def test_value_scored_classes_are_the_plr_family():
    assert _value_scored_classes() == ["PLR", "RobustPLR", "ACCEL"]
    assert issubclass(ACCEL, RobustPLR)


def test_feed_scores_rejects_a_curriculum_without_value_scores():
    r, v, d, b, tasks = _rollout()
    dr = DomainRandomization(StudentSpace(20), seed=0)
    with pytest.raises(TypeError, match=r"DomainRandomization has no update_scores.*PLR family: PLR, "
                                        r"RobustPLR, ACCEL"):
        feed_scores(dr, r, v, d, b, tasks, done_convention="ended_at")
    server = serve(DomainRandomization(StudentSpace(20), seed=0))
    try:
        with pytest.raises(TypeError, match=r"DomainRandomization \(served by CurriculumServer\) has no "
                                            r"update_scores.*PLR, RobustPLR, ACCEL"):
            feed_scores(server, r, v, d, b, tasks, done_convention="before_step", next_done=d[-1])
    finally:
        server.close()


def test_feed_scores_through_a_real_server():
    r, v, d, b, tasks = _rollout()
    before, next_done = _before_step(d)
    plr, ref = _plr(), _plr()
    feed_scores(ref, r, v, d, b, tasks, done_convention="ended_at")
    server = serve(plr)
    try:
        out = feed_scores(server, r, v, before, b, tasks, done_convention="before_step", next_done=next_done)
    finally:
        server.close()
    assert out["scores/tasks"] == 4.0 and _state(plr) == _state(ref)
