"""RIAC (Baranes & Oudeyer 2009, as in Portelas et al. 2019's code): ALP of a window, splits and trims worked
by hand, the sampling mixture, bounds, checkpoints, bad input, and the teacher-only toy env."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister import checkpoint
from magister.curricula import RIAC, DomainRandomization
from magister.curricula.riac import window_alp
from magister.examples.teacher_toy import ToyEnv, play
from magister.task_spaces import Box, ConfigSpace, Discrete, Product


def binomial_ok(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# -- ALP of a window ------------------------------------------------------------------------------------
def test_window_alp_hand_worked():
    assert window_alp([0.0, 0.0, 1.0, 1.0], 200) == 1.0
    # n = 3, h = 1: older half [1, 2] (mean 1.5), newer [3]
    assert window_alp([1.0, 2.0, 3.0], 200) == 1.5
    # n = 5, h = 2: older [0, 4, 2] (mean 2), newer [10, 0] (mean 5)
    assert window_alp([0.0, 4.0, 2.0, 10.0, 0.0], 200) == 3.0
    assert window_alp([7.0, 1.0], 200) == 0.0 and window_alp([], 200) == 0.0
    # the window: only the last 4 of [100, 0, 0, 1, 1] count
    assert window_alp([100.0, 0.0, 0.0, 1.0, 1.0], 4) == 1.0


@given(st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=50), st.floats(-1e3, 1e3),
       st.integers(3, 60))
def test_window_alp_is_shift_invariant_and_zero_on_constants(signals, shift, window):
    a = window_alp(signals, window)
    b = window_alp([s + shift for s in signals], window)
    assert b == pytest.approx(a, abs=1e-6)
    assert window_alp([shift] * len(signals), window) == pytest.approx(0.0, abs=1e-9)


# -- splits and trims -----------------------------------------------------------------------------------
def three_clusters(**kw) -> RIAC:
    """21 pairs on [0, 1]: x = 0.1 and x = 0.5 with a flat signal 0.5, x = 0.9 with a rising one (i / 20)."""
    cur = RIAC(Box(0.0, 1.0), max_region_size=20, seed=3, **kw)
    for i in range(21):
        x = (0.1, 0.5, 0.9)[i % 3]
        cur.update_on_episode(i / 20 if i % 3 == 2 else 0.5, 1, (x,), 0.0)
    return cur


def test_split_keeps_the_cut_with_the_largest_alp_gap():
    # A cut in (0.1, 0.5] leaves {0.1} (ALP 0) | {0.5, 0.9} (14 pairs: older mean 2.75/7, newer 4.6/7, ALP
    # 1.85/7 = 0.2643); a cut in (0.5, 0.9] leaves {0.1, 0.5} (ALP 0) | {0.9} (signals 2, 5, ..., 20 over 20:
    # older mean 0.325, newer 0.85, ALP 0.525). The second gap is larger, so the cut lands in (0.5, 0.9].
    cur = three_clusters()
    assert cur.num_leaves == 2 and cur.num_boxes == 3
    (l_low, l_high, l_alp), (r_low, r_high, r_alp) = cur.boxes()
    cut = l_high[0]
    assert 0.5 < cut <= 0.9 and r_low[0] == cut and l_low[0] == 0.0 and r_high[0] == 1.0
    assert l_alp == 0.0
    assert r_alp == pytest.approx(0.525)
    state = cur.state_dict()
    assert [len(t) for t in state["tasks"]] == [21, 14, 7]
    assert set(state["tasks"][2][:, 0].tolist()) == {0.9}
    assert state["signals"][2] == [i / 20 for i in range(2, 21, 3)]


def test_points_after_a_split_go_to_the_root_and_one_leaf():
    cur = three_clusters()
    cut = cur.boxes()[0][1][0]
    cur.update_on_episode(0.0, 1, (cut,), 0.0)  # a task on the cut belongs to the right box
    cur.update_on_episode(0.0, 1, (0.2,), 0.0)
    state = cur.state_dict()
    assert [len(t) for t in state["tasks"]] == [21, 15, 8]  # the root keeps its last 21
    assert state["tasks"][0][-2:, 0].tolist() == [cut, 0.2]
    assert state["tasks"][2][-1, 0] == cut and state["tasks"][1][-1, 0] == 0.2


def test_no_valid_cut_by_width_drops_the_oldest_quarter():
    # min_dims_range_ratio 0.5: only a cut at exactly 0.5 would be valid
    cur = RIAC(Box(0.0, 1.0), max_region_size=20, min_dims_range_ratio=0.5, seed=0)
    for i in range(21):
        cur.update_on_episode(float(i), 1, (0.3 if i % 2 else 0.7,), 0.0)
    assert cur.num_leaves == 1 and cur.discards == 1
    assert cur.state_dict()["signals"][0] == [float(i) for i in range(5, 21)]  # 21 - floor(20 / 4) = 16
    assert cur.boxes()[0][2] == 8.0  # older half 5..12 (mean 8.5), newer 13..20 (mean 16.5)


def test_no_valid_cut_by_population_drops_the_oldest_quarter():
    # capacity 40: each child needs >= 2 pairs; one pair at 0.05, forty at 0.6: every cut leaves a child
    # with 0 or 1 pair
    cur = RIAC(Box(0.0, 1.0), max_region_size=40, min_dims_range_ratio=0.0, seed=0)
    cur.update_on_episode(0.0, 1, (0.05,), 0.0)
    for i in range(40):
        cur.update_on_episode(float(i % 2), 1, (0.6,), 0.0)
    assert cur.num_leaves == 1 and cur.discards == 1
    assert len(cur.state_dict()["signals"][0]) == 31


def test_a_split_needs_enough_pairs_on_each_side():
    # same data but the single pair replaced by two: cuts in (0.05, 0.6] are now valid
    cur = RIAC(Box(0.0, 1.0), max_region_size=40, min_dims_range_ratio=0.0, seed=0)
    cur.update_on_episode(0.0, 1, (0.05,), 0.0)
    cur.update_on_episode(0.0, 1, (0.05,), 0.0)
    for i in range(39):
        cur.update_on_episode(float(i % 2), 1, (0.6,), 0.0)
    assert cur.num_leaves == 2 and cur.discards == 0
    assert 0.05 < cur.boxes()[0][1][0] <= 0.6


# -- sampling -------------------------------------------------------------------------------------------
def test_sampling_shares_follow_alp():
    # leaves [0, c) with ALP 0 and [c, 1] with ALP 0.525: 70% + 10% in the right box, 20% uniform
    cur = three_clusters()
    cut = cur.boxes()[0][1][0]
    n = 20_000
    x = np.array(cur.sample(n))[:, 0]
    assert np.all((x >= 0.0) & (x <= 1.0))
    assert binomial_ok(int((x < cut).sum()), n, 0.2 * cut)


def test_lowest_signal_task_plus_noise():
    # one box (no split): 90% uniform over [0, 1], 10% N(0.3, 0.1) around its lowest-signal task
    cur = RIAC(Box(0.0, 1.0), seed=1)
    cur.update_on_episode(-1.0, 1, (0.3,), 0.0)
    for _ in range(9):
        cur.update_on_episode(1.0, 1, (0.8,), 0.0)
    n = 20_000
    x = np.array(cur.sample(n))[:, 0]
    p = 0.9 * 0.1 + 0.1 * math.erf(0.5 / math.sqrt(2))  # P(0.25 <= x <= 0.35): 0.1 + N(0, 0.1) within 0.05
    assert binomial_ok(int(((x >= 0.25) & (x <= 0.35)).sum()), n, p)


def test_noise_scales_with_the_range_and_is_clipped_to_the_box():
    cur = RIAC(Box(0.0, 10.0), seed=2)
    cur.update_on_episode(-1.0, 1, (0.0,), 0.0)  # the lowest task sits on the box's edge
    cur.update_on_episode(1.0, 1, (8.0,), 0.0)
    n = 20_000
    x = np.array(cur.sample(n))[:, 0]
    # half of the 10% noisy draws fall below 0 and are clipped onto it
    assert binomial_ok(int((x == 0.0).sum()), n, 0.05)
    # N(0, 1) (0.1 x range 10) above 0: P(0 < x <= 0.5) = 0.1 (Phi(0.5) - 1/2) + 0.9 x 0.05
    assert binomial_ok(int(((x > 0.0) & (x <= 0.5)).sum()), n, 0.1 * math.erf(0.5 / math.sqrt(2)) / 2 + 0.045)


def test_leaves_only_false_draws_from_every_box():
    cur = three_clusters(leaves_only=False)
    assert len(cur.boxes(leaves_only=False)) == 3 and len(cur.boxes()) == 2
    assert cur.metrics()["riac/boxes"] == 3.0


box_bounds = st.integers(1, 3).flatmap(lambda d: st.tuples(
    st.lists(st.floats(-100, 100), min_size=d, max_size=d),
    st.lists(st.floats(0.01, 50), min_size=d, max_size=d),
))


@given(box_bounds, st.integers(0, 2**16), st.integers(1, 120))
def test_samples_stay_inside_the_bounds(bounds, seed, episodes):
    low, width = (np.array(b) for b in bounds)
    space = Box(low, low + width)
    cur = RIAC(space, max_region_size=10, nb_split_attempts=5, seed=seed)
    rng = np.random.default_rng(seed)
    for task in space.sample_encoded(episodes, rng=rng):
        cur.update_on_episode(float(rng.normal()), 1, task, 0.0)
    for task in cur.sample(64):
        assert space.contains_encoded(task), task
    for lo, hi, _ in cur.boxes():
        assert np.all(lo >= space.low) and np.all(hi <= space.high) and np.all(lo < hi)


def test_config_and_product_spaces():
    space = Product((Box(0.0, 1.0, shape=(2,)), ConfigSpace({"size": [4, 8, 16]})))
    cur = RIAC(space, max_region_size=10, seed=0)
    rng = np.random.default_rng(0)
    for task in space.sample_encoded(50, rng=rng):
        cur.update_on_episode(float(rng.random()), 1, task, 0.0)
    assert all(space.contains_encoded(t) for t in cur.sample(32))
    assert cur.num_leaves > 1


# -- checkpoints ----------------------------------------------------------------------------------------
@settings(max_examples=25)
@given(st.integers(0, 2**16), st.lists(st.floats(-10, 10), min_size=0, max_size=80))
def test_checkpoint_round_trip(tmp_path_factory, seed, returns):
    space = Box(0.0, 1.0, shape=(2,))
    a = RIAC(space, max_region_size=12, nb_split_attempts=4, seed=seed)
    for r, task in zip(returns, a.sample(max(1, len(returns)))):
        a.update_on_episode(r, 1, task, 0.0)
    path = tmp_path_factory.mktemp("riac") / "riac.ckpt"
    checkpoint.save(path, a.state_dict())
    b = RIAC(space, max_region_size=12, nb_split_attempts=4, seed=seed + 1)
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    tasks = a.sample(30)
    assert b.sample(30) == tasks
    for i, task in enumerate(tasks):  # the same further updates: splits and samples agree
        a.update_on_episode(float(i % 5), 1, task, 0.0)
        b.update_on_episode(float(i % 5), 1, task, 0.0)
    assert b.sample(8) == a.sample(8)
    assert b.metrics() == a.metrics()


def test_state_of_another_space_is_refused():
    a = RIAC(Box(0.0, 1.0, shape=(2,)), seed=0)
    with pytest.raises(ValueError, match="2 parameter dimensions"):
        RIAC(Box(0.0, 1.0, shape=(3,)), seed=0).load_state_dict(a.state_dict())


# -- bad input ------------------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(TypeError, match="Discrete"):
        RIAC(Discrete(5))
    with pytest.raises(ValueError, match="zero width"):
        RIAC(Box([0.0, 1.0], [1.0, 1.0]))
    for kw in ({"max_region_size": 1}, {"nb_split_attempts": 0}, {"min_dims_range_ratio": 0.6},
               {"signal": "success"}, {"max_region_size": 2.5}):
        with pytest.raises(ValueError):
            RIAC(Box(0.0, 1.0), **kw)
    cur = RIAC(Box(0.0, 1.0), seed=0)
    with pytest.raises(ValueError, match="finite"):
        cur.update_on_episode(float("nan"), 1, (0.5,), 0.0)
    with pytest.raises(ValueError, match="not an encoded task"):
        cur.update_on_episode(1.0, 1, (1.5,), 0.0)
    assert cur.num_episodes == 0
    progress = RIAC(Box(0.0, 1.0), signal="progress", seed=0)
    with pytest.raises(ValueError, match="progress"):
        progress.update_on_episode(1.0, 1, (0.5,), float("inf"))
    progress.update_on_episode(5.0, 1, (0.5,), 0.25)
    assert progress.state_dict()["signals"][0] == [0.25]


def test_metrics():
    cur = three_clusters()
    m = cur.metrics()
    assert m["riac/leaves"] == 2.0 and m["riac/boxes"] == 3.0 and m["riac/discards"] == 0.0
    assert m["riac/max_alp"] == pytest.approx(0.525) and m["riac/mean_alp"] == pytest.approx(0.2625)
    assert m["curriculum/episodes"] == 21.0


# -- the teacher-only toy env ---------------------------------------------------------------------------
def test_masters_more_toy_cells_than_domain_randomization():
    # 4,000 episodes on [0, 1]^2 (10 x 10 cells): uniform sampling masters no cell yet (the origin cell
    # needs 76 of its 1-in-100 draws), while RIAC has mastered cells around it
    space = Box(0.0, 1.0, shape=(2,))
    riac = play(RIAC(space, seed=0), ToyEnv(2), 4000, every=4000)[-1]
    uniform = play(DomainRandomization(space, seed=0), ToyEnv(2), 4000, every=4000)[-1]
    assert riac >= uniform + 0.04, (riac, uniform)


# -- through the sync layer -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_served_over_ipc():
    import gymnasium as gym

    from magister import GymnasiumSyncWrapper, serve
    from magister.examples.cartpole import CartPoleTask

    space = Box(0.01, 0.2, shape=(1,))
    cur = RIAC(space, max_region_size=4, seed=0)
    with serve(cur) as server:
        env = GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), space), server.address)
        env.reset(seed=0)
        played = []
        while len(played) < 12:
            _, _, term, trunc, info = env.step(0)
            if term or trunc:
                played.append(info["task"])
                env.reset()
        env.close()
    assert cur.num_episodes == 12 and cur.num_leaves >= 2
    assert sorted(cur.state_dict()["tasks"][0][:, 0].tolist()) == sorted(t[0] for t in played[-5:])
