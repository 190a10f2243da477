"""Tests for Constant, DomainRandomization, Manual and ExpandingBox."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.curricula.constant import Constant
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.expanding_box import ExpandingBox
from magister.curricula.manual import Manual
from magister.task_spaces.box import Box
from magister.task_spaces.discrete import Discrete

# Upper 0.1% points of the chi-square distribution, by degrees of freedom (from standard tables).
CHI2_999 = {2: 13.816, 4: 18.467, 9: 27.877}


def chi_square(counts, probs):
    counts = np.asarray(counts, dtype=float)
    expected = counts.sum() * np.asarray(probs, dtype=float)
    keep = expected > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def feed(cur, n, length=10, progress=0.0):
    for _ in range(n):
        cur.update_on_episode(1.0, length, None, progress)


# -- Constant -----------------------------------------------------------------------------------------
def test_constant_samples_its_task():
    cur = Constant(Discrete(4), 3)
    assert cur.sample(5) == [3] * 5
    assert cur.sample_tasks(1)[0].train is True
    assert cur.distribution().tolist() == [0.0, 0.0, 0.0, 1.0]
    assert cur.num_sampled == 6
    assert cur.metrics()["curriculum/max_prob"] == 1.0


def test_constant_validates_at_construction():
    with pytest.raises(ValueError, match="not an encoded task"):
        Constant(Discrete(4), 4)
    with pytest.raises(ValueError, match="not an encoded task"):
        Constant(Box(0.0, 1.0, shape=(2,)), (0.5, 1.5))
    with pytest.raises(TypeError, match="TaskSpace"):
        Constant([0, 1], 0)  # type: ignore[arg-type]


def test_constant_on_a_box_has_no_distribution_but_has_metrics():
    cur = Constant(Box(0.0, 1.0, shape=(2,)), (0.25, 0.5))
    assert cur.sample(2) == [(0.25, 0.5), (0.25, 0.5)]
    with pytest.raises(NotImplementedError):
        cur.distribution()
    assert cur.metrics() == {"curriculum/sampled": 2.0, "curriculum/episodes": 0.0}


def test_constant_state_round_trip():
    a = Constant(Discrete(4), 1)
    a.sample(3)
    a.update_on_episode(1.0, 7, 1, 1.0)
    b = Constant(Discrete(4), 2)
    b.load_state_dict(a.state_dict())
    assert b.sample(1) == [1] and b.num_sampled == 4 and b.num_steps == 7


# -- DomainRandomization -------------------------------------------------------------------------------
def test_dr_is_uniform_chi_square():
    cur = DomainRandomization(Discrete(10), seed=123)
    counts = np.bincount(cur.sample(20_000), minlength=10)
    assert counts.sum() == 20_000
    assert chi_square(counts, np.full(10, 0.1)) < CHI2_999[9]
    assert cur.distribution().tolist() == [0.1] * 10


def test_dr_chi_square_detects_a_skewed_sampler():
    """The uniformity check above can fail: a sampler that favours one task is rejected."""
    rng = np.random.default_rng(0)
    skewed = rng.choice(10, size=20_000, p=[0.12] + [0.88 / 9] * 9)
    assert chi_square(np.bincount(skewed, minlength=10), np.full(10, 0.1)) > CHI2_999[9]


def test_dr_over_a_list_of_tasks():
    cur = DomainRandomization(Discrete(6), tasks=[1, 4, 4], seed=0)
    out = cur.sample(9000)
    counts = np.bincount(out, minlength=6)
    assert set(out) == {1, 4}
    assert chi_square(counts[[1, 4]], [1 / 3, 2 / 3]) < CHI2_999[2]
    assert cur.distribution() == pytest.approx([0, 1 / 3, 0, 0, 2 / 3, 0])
    with pytest.raises(ValueError, match="not an encoded task"):
        DomainRandomization(Discrete(6), tasks=[1, 6])
    with pytest.raises(ValueError, match="non-empty"):
        DomainRandomization(Discrete(6), tasks=[])


def test_dr_on_a_box_is_uniform_in_the_box():
    box = Box([0.0, -5.0], [1.0, 5.0])
    cur = DomainRandomization(box, seed=1)
    x = np.asarray(cur.sample(4000))
    assert x.shape == (4000, 2)
    assert np.all(x >= box.low) and np.all(x <= box.high)
    # mean of U[a, b] is (a+b)/2 with std (b-a)/sqrt(12 n); allow 4 standard errors
    se = (box.high - box.low) / np.sqrt(12 * 4000)
    assert np.all(np.abs(x.mean(axis=0) - [0.5, 0.0]) < 4 * se)
    with pytest.raises(NotImplementedError):
        cur.distribution()


@given(st.integers(0, 2**32 - 1), st.integers(1, 20), st.integers(1, 20))
def test_dr_seed_and_state_round_trip(seed, first, second):
    a = DomainRandomization(Discrete(1000), seed=seed)
    b = DomainRandomization(Discrete(1000), seed=seed)
    assert a.sample(first) == b.sample(first)
    c = DomainRandomization(Discrete(1000), seed=None)
    c.load_state_dict(a.state_dict())
    assert c.sample(second) == a.sample(second)
    assert c.num_sampled == a.num_sampled == first + second


def test_dr_rejects_bad_k():
    cur = DomainRandomization(Discrete(3))
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be"):
            cur.sample(k)  # type: ignore[arg-type]


# -- Manual -------------------------------------------------------------------------------------------
def test_manual_breakpoints_switch_at_exact_counts():
    cur = Manual(Discrete(3), [(0, [1, 0, 0]), (3, [0, 1, 0]), (5, [0, 0, 1])], seed=0)
    seen = []
    for _ in range(7):
        seen.append(cur.sample(2))
        feed(cur, 1)
    assert seen == [[0, 0]] * 3 + [[1, 1]] * 2 + [[2, 2]] * 2
    assert cur.distribution().tolist() == [0.0, 0.0, 1.0]


def test_manual_breakpoints_in_steps():
    cur = Manual(Discrete(2), [(0, [1, 0]), (100, [0, 1])], unit="steps")
    feed(cur, 9, length=11)  # 99 steps
    assert cur.distribution().tolist() == [1.0, 0.0]
    feed(cur, 1, length=1)  # 100 steps
    assert cur.distribution().tolist() == [0.0, 1.0]


def test_manual_callable_schedule_and_frequencies():
    cur = Manual(Discrete(3), lambda c: [0.2, 0.3, 0.5] if c < 1 else [0.5, 0.5, 0.0], seed=7)
    counts = np.bincount(cur.sample(20_000), minlength=3)
    assert chi_square(counts, [0.2, 0.3, 0.5]) < CHI2_999[2]
    feed(cur, 1)
    assert cur.distribution().tolist() == [0.5, 0.5, 0.0]
    assert 2 not in cur.sample(500)


def test_manual_uses_encoded_tasks_order_of_a_named_space():
    space = Discrete(tasks=["easy", "medium", "hard"])
    cur = Manual(space, [(0, [0, 0, 1])])
    assert cur.sample(2) == [2, 2]


@pytest.mark.parametrize(
    "schedule, match",
    [
        ([(0, [0.5, 0.5])], r"shape \(2,\), expected \(3,\)"),
        ([(0, [0.5, 0.6, -0.1])], "negative entries at positions \\[2\\]"),
        ([(0, [0.5, 0.4, 0.0])], "sums to 0.9"),
        ([(0, [np.nan, 0.5, 0.5])], "non-finite"),
        ([(0, ["a", 0.5, 0.5])], "not a vector of numbers"),
        ([(1, [1, 0, 0])], "must start at count 0"),
        ([(0, [1, 0, 0]), (0, [0, 1, 0])], "strictly increasing"),
        ([(0, [1, 0, 0]), (-2, [0, 1, 0])], "non-negative int"),
        ([(0, [1, 0, 0]), (2.5, [0, 1, 0])], "non-negative int"),
        ([(0, [1, 0, 0]), (5,)], "pair"),
        ([], "at least one"),
    ],
)
def test_manual_validation(schedule, match):
    with pytest.raises(ValueError, match=match):
        Manual(Discrete(3), schedule)


def test_manual_callable_output_is_validated_when_used():
    cur = Manual(Discrete(3), lambda c: [1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"schedule\(0\): distribution sums to 2.0"):
        cur.sample(1)


def test_manual_type_errors():
    with pytest.raises(TypeError, match="enumerable"):
        Manual(Box(0.0, 1.0), [(0, [1.0])])
    with pytest.raises(TypeError, match="schedule must be"):
        Manual(Discrete(2), 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit"):
        Manual(Discrete(2), [(0, [1, 0])], unit="hours")


def test_manual_state_round_trip():
    def make():
        return Manual(Discrete(5), [(0, [0.2] * 5), (4, [0.1, 0.1, 0.1, 0.1, 0.6])], seed=5)

    a = make()
    a.sample(10)
    feed(a, 3)
    b = make()
    b.load_state_dict(a.state_dict())
    for _ in range(4):
        assert a.sample(6) == b.sample(6)
        feed(a, 1)
        feed(b, 1)
    assert a.distribution().tolist() == b.distribution().tolist() == [0.1, 0.1, 0.1, 0.1, 0.6]


# -- ExpandingBox -------------------------------------------------------------------------------------
BOX = Box([-2.0, 0.0], [2.0, 10.0])


def test_expanding_box_linear_over_episodes_by_hand():
    cur = ExpandingBox(BOX, start_low=[-0.5, 4.0], start_high=[0.5, 6.0], duration=40)
    lo, hi = cur.current_range()
    assert lo.tolist() == [-0.5, 4.0] and hi.tolist() == [0.5, 6.0]
    feed(cur, 10)  # fraction 10/40 = 0.25
    lo, hi = cur.current_range()
    assert lo.tolist() == [-0.875, 3.0]  # 0.75 * (-0.5, 4) + 0.25 * (-2, 0)
    assert hi.tolist() == [0.875, 7.0]  # 0.75 * (0.5, 6) + 0.25 * (2, 10)
    m = cur.metrics()
    assert m["expanding_box/fraction"] == 0.25
    assert (m["expanding_box/low_0"], m["expanding_box/high_1"]) == (-0.875, 7.0)
    feed(cur, 30)
    assert [a.tolist() for a in cur.current_range()] == [[-2.0, 0.0], [2.0, 10.0]]
    feed(cur, 30)
    assert cur.fraction == 1.0


def test_expanding_box_linear_over_steps():
    cur = ExpandingBox(BOX, [-0.5, 4.0], [0.5, 6.0], duration=1000, unit="steps")
    feed(cur, 3, length=100)  # fraction 0.3
    lo, hi = cur.current_range()
    assert lo == pytest.approx([-0.95, 2.8])  # 0.7 * (-0.5, 4) + 0.3 * (-2, 0)
    assert hi == pytest.approx([0.95, 7.2])  # 0.7 * (0.5, 6) + 0.3 * (2, 10)


def test_expanding_box_custom_schedule():
    cur = ExpandingBox(BOX, 0.0, 0.0, schedule=lambda c: 0.5 if c >= 2 else 0.0)
    feed(cur, 2)
    lo, hi = cur.current_range()
    assert lo.tolist() == [-1.0, 0.0] and hi.tolist() == [1.0, 5.0]
    bad = ExpandingBox(BOX, 0.0, 0.0, schedule=lambda c: 1.5)
    with pytest.raises(ValueError, match=r"schedule\(0\) returned 1.5"):
        bad.sample(1)


def test_expanding_box_progress_driven_by_hand():
    cur = ExpandingBox(BOX, 0.0, 0.0, threshold=0.5, step_size=0.25, window=3)
    growths = []
    for p in [1, 1, 0, 0.4, 0.5, 0.6, 0, 0, 0, 1, 1]:
        cur.update_on_episode(0.0, 1, None, p)
        growths.append(cur.growths)
    # full windows: (1,1,0)=.67 grow+clear; (.4,.5,.6)=.5 grow+clear; (0,0,0); (0,0,1); (0,1,1)=.67 grow
    assert growths == [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3]
    assert cur.fraction == 0.75
    lo, hi = cur.current_range()
    assert lo.tolist() == [-1.5, 0.0] and hi.tolist() == [1.5, 7.5]
    for _ in range(2):
        feed(cur, 3, progress=1.0)
    assert cur.growths == 5 and cur.fraction == 1.0


def test_expanding_box_samples_stay_in_and_fill_the_current_range():
    cur = ExpandingBox(BOX, [-0.5, 4.0], [0.5, 6.0], duration=40, seed=3)
    feed(cur, 10)
    x = np.asarray(cur.sample(5000))
    lo, hi = cur.current_range()
    assert x.shape == (5000, 2)
    assert np.all(x >= lo) and np.all(x <= hi)
    width = hi - lo
    assert np.all(x.min(axis=0) < lo + 0.01 * width) and np.all(x.max(axis=0) > hi - 0.01 * width)
    assert all(BOX.contains_encoded(t) for t in cur.sample(50))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"start_low": -3.0, "start_high": 0.5, "duration": 5}, ValueError, "low <= start_low"),
        ({"start_low": 0.5, "start_high": -0.5, "duration": 5}, ValueError, "start_low <= start_high"),
        ({"start_low": [0, 0, 0], "start_high": 0.5, "duration": 5}, ValueError, "broadcastable"),
        ({"start_low": 0.0, "start_high": 0.5}, ValueError, "exactly one"),
        ({"start_low": 0.0, "start_high": 0.5, "duration": 5, "threshold": 0.5}, ValueError, "exactly one"),
        ({"start_low": 0.0, "start_high": 0.5, "duration": 0}, ValueError, "duration"),
        ({"start_low": 0.0, "start_high": 0.5, "duration": 5, "unit": "hours"}, ValueError, "unit"),
        ({"start_low": 0.0, "start_high": 0.5, "threshold": 0.5, "step_size": 0}, ValueError, "step_size"),
        ({"start_low": 0.0, "start_high": 0.5, "threshold": float("nan")}, ValueError, "threshold"),
        ({"start_low": 0.0, "start_high": 0.5, "schedule": 3}, TypeError, "callable"),
    ],
)
def test_expanding_box_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ExpandingBox(BOX, **kwargs)


def test_expanding_box_needs_a_box():
    with pytest.raises(TypeError, match="low/high"):
        ExpandingBox(Discrete(3), 0, 1, duration=5)


def test_expanding_box_state_round_trip():
    def make():
        return ExpandingBox(BOX, 0.0, 0.0, threshold=0.5, step_size=0.1, window=4, seed=8)

    a = make()
    a.sample(7)
    for p in [1, 1, 1, 1, 0.9, 0.1]:
        a.update_on_episode(0.0, 3, None, p)
    state = a.state_dict()
    assert state["growths"] == 1 and state["range_high"] == pytest.approx([0.2, 1.0])
    b = make()
    b.load_state_dict(state)
    for p in [1.0, 1.0, 0.2, 1.0]:
        assert a.sample(3) == b.sample(3)
        a.update_on_episode(0.0, 3, None, p)
        b.update_on_episode(0.0, 3, None, p)
    assert a.growths == b.growths == 2  # window (0.9, 0.1, 1, 1)=0.75 completed after loading
    assert a.sample(2) == b.sample(2)


@given(
    st.lists(st.tuples(st.floats(-100, 100), st.floats(0, 50), st.floats(0, 1), st.floats(0, 1)),
             min_size=1, max_size=3),
    st.integers(1, 50),
    st.lists(st.integers(0, 20), min_size=1, max_size=6),
)
def test_expanding_box_ranges_are_nested_and_reach_the_box(dims, duration, increments):
    """For any box and start box, ranges only grow, always contain the start box and stay in the box."""
    low = np.array([d[0] for d in dims])
    high = low + np.array([d[1] for d in dims])
    a = low + np.array([d[2] for d in dims]) * (high - low)
    b = a + np.array([d[3] for d in dims]) * (high - a)
    cur = ExpandingBox(Box(low, high), a, b, duration=duration, seed=0)
    prev_lo, prev_hi = cur.current_range()
    for inc in increments:
        feed(cur, inc)
        lo, hi = cur.current_range()
        assert np.all(lo <= prev_lo) and np.all(hi >= prev_hi)
        assert np.all(low <= lo) and np.all(lo <= a) and np.all(b <= hi) and np.all(hi <= high)
        x = np.asarray(cur.sample(8))
        assert np.all(x >= lo) and np.all(x <= hi)
        prev_lo, prev_hi = lo, hi
    feed(cur, duration)
    lo, hi = cur.current_range()
    assert lo.tolist() == low.tolist() and hi.tolist() == high.tolist()


def _entropy(p):
    p = np.asarray(p)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@pytest.mark.parametrize("tasks", [None, [1, 4, 4], [0, 1, 2, 3, 4, 5]])
def test_dr_closed_form_metrics_match_the_distribution(tasks):
    cur = DomainRandomization(Discrete(6), tasks=tasks)
    m, p = cur.metrics(), cur.distribution()
    assert m["curriculum/entropy"] == pytest.approx(_entropy(p))
    assert m["curriculum/max_prob"] == pytest.approx(p.max())


def test_metrics_on_a_huge_space_build_no_vector():
    huge = Discrete(10**12)
    m = DomainRandomization(huge).metrics()
    assert m["curriculum/entropy"] == pytest.approx(12 * np.log(10))
    assert m["curriculum/max_prob"] == 1e-12
    assert Constant(huge, 10**12 - 1).metrics()["curriculum/entropy"] == 0.0
