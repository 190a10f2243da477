"""ADR (OpenAI et al. 2019, Algorithm 1): the bounds move exactly as the rule says (queue length, both
thresholds, the step, clipping, inward never past the other bound, only boundary episodes counted), boundary
sampling by counts, bounds and checkpoints (hypothesis), bad input, and the teacher-only toy env."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister import checkpoint
from magister.curricula import ADR, DomainRandomization
from magister.examples.teacher_toy import ToyEnv, play
from magister.task_spaces import Box, ConfigSpace, Discrete, Product

THRESHOLDS = {"low_threshold": 0.25, "high_threshold": 0.75, "signal": "progress"}


def binomial_ok(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def at_bounds(adr: ADR, lower, upper) -> ADR:
    """``adr`` with its bounds set through its own state_dict (a plain dict)."""
    state = adr.state_dict()
    state["lower"], state["upper"] = list(lower), list(upper)
    adr.load_state_dict(state)
    return adr


def one_d(lower=0.3, upper=0.6, **kw) -> ADR:
    """ADR on Box(0, 1) with the bounds at [lower, upper]: a boundary task is exactly 0.3 or 0.6."""
    kw = {"initial": [0.5], "boundary_prob": 1.0, "step": 0.1, "seed": 0, **THRESHOLDS, **kw}
    return at_bounds(ADR(Box(0.0, 1.0), **kw), [lower], [upper])


def play_side(adr: ADR, performance) -> str:
    """Sample one task, answer ``performance(side)``; returns the side the task tested."""
    (task,) = adr.sample(1)
    lower, upper = adr.bounds()
    side = "low" if task[0] == lower[0] else "high" if task[0] == upper[0] else "inside"
    value = performance(side)
    adr.update_on_episode(value, 1, task, value)
    return side


# -- the bound update -----------------------------------------------------------------------------------
def test_a_full_queue_at_or_above_high_threshold_widens_by_one_step():
    adr = one_d(queue_length=4)
    seen = {"low": 0, "high": 0}
    for _ in range(200):
        side = play_side(adr, lambda side: 1.0)
        seen[side] += 1
        (lower,), (upper,) = adr.bounds()
        # the bound moves on the 4th, 8th ... episode of its own queue, by 0.1, and never past [0, 1]
        assert lower == pytest.approx(max(0.0, 0.3 - 0.1 * (seen["low"] // 4)), abs=1e-12)
        assert upper == pytest.approx(min(1.0, 0.6 + 0.1 * (seen["high"] // 4)), abs=1e-12)
    assert seen["low"] >= 16 and seen["high"] >= 20
    assert adr.bounds() == ([0.0], [1.0])  # clipped to the global range exactly
    assert adr.boundary_episodes == 200


def test_a_full_queue_at_or_below_low_threshold_narrows_by_one_step():
    adr = one_d(lower=0.1, upper=0.9, queue_length=3)
    seen = {"low": 0, "high": 0}
    while adr.bounds()[0][0] < 0.3 - 1e-9 or adr.bounds()[1][0] > 0.7 + 1e-9:
        side = play_side(adr, lambda side: 0.0)
        seen[side] += 1
        (lower,), (upper,) = adr.bounds()
        assert lower == pytest.approx(0.1 + 0.1 * min(2, seen["low"] // 3), abs=1e-12)
        assert upper == pytest.approx(0.9 - 0.1 * min(2, seen["high"] // 3), abs=1e-12)
    assert adr.narrowed == 4 and adr.widened == 0


def test_inward_never_past_the_other_bound():
    # bounds 0.05 apart, step 0.1, a queue of one: the first failure puts the moved bound onto the other
    for seed in range(6):
        adr = one_d(lower=0.45, upper=0.5, queue_length=1, seed=seed)
        side = play_side(adr, lambda side: 0.0)
        assert adr.bounds() == (([0.5], [0.5]) if side == "low" else ([0.45], [0.45]))
        for _ in range(5):  # a point stays a point
            (task,) = adr.sample(1)
            adr.update_on_episode(0.0, 1, task, 0.0)
        assert adr.bounds()[0] == adr.bounds()[1]


@pytest.mark.parametrize("answers, moved", [
    ([1.0, 0.5, 0.75, 0.75], 0.1),    # mean exactly high_threshold (0.75): outward
    ([0.0, 0.5, 0.25, 0.25], -0.1),   # mean exactly low_threshold (0.25): inward
    ([0.5, 0.5, 0.75, 0.75], 0.0),    # mean 0.625, between them: no move
])
def test_thresholds_are_inclusive(answers, moved):
    adr = one_d(queue_length=4)
    used = {"low": 0, "high": 0}
    while max(used.values()) < 4:
        side = play_side(adr, lambda side: answers[used[side]])
        used[side] += 1
    (lower,), (upper,) = adr.bounds()
    outward = {"low": 0.3 - lower, "high": upper - 0.6}
    tested = "low" if used["low"] == 4 else "high"
    other = "high" if tested == "low" else "low"
    assert outward[tested] == pytest.approx(moved, abs=1e-12) and outward[other] == 0.0
    queues = adr.state_dict()["queues"][0]
    assert queues[0 if tested == "low" else 1] == []  # emptied after the test, moved or not
    assert len(queues[0 if other == "low" else 1]) == used[other] < 4


def test_between_the_thresholds_nothing_moves():
    adr = one_d(queue_length=4)
    for _ in range(40):
        play_side(adr, lambda side: 0.5)
    assert adr.bounds() == ([0.3], [0.6])
    assert adr.widened == adr.narrowed == 0 and adr.boundary_episodes == 40
    assert all(len(q) < 4 for q in adr.state_dict()["queues"][0])


def test_non_boundary_episodes_are_never_counted():
    adr = one_d(boundary_prob=0.0, queue_length=2)
    for _ in range(100):
        assert play_side(adr, lambda side: 1.0) == "inside"
    adr.update_on_episode(1.0, 1, (0.3,), 1.0)  # the lower bound's value, never handed out as a boundary
    adr.update_on_episode(1.0, 1, (0.6,), 1.0)
    assert adr.bounds() == ([0.3], [0.6])
    assert adr.boundary_episodes == 0 and adr.state_dict()["queues"] == [[[], []]]
    assert adr.num_episodes == 102


def test_boundary_sampling_shares_and_credit():
    space = Box(0.0, 1.0, shape=(2,))
    adr = at_bounds(ADR(space, initial=None, boundary_prob=0.5, queue_length=10**6, seed=1, **THRESHOLDS),
                    [0.2, 0.4], [0.6, 0.9])
    n = 20_000
    x = np.array(adr.sample(n))
    assert np.all((x >= [0.2, 0.4]) & (x <= [0.6, 0.9]))
    at = {(d, s): int((x[:, d] == bound[d]).sum()) for d in (0, 1) for s, bound in
          ((0, [0.2, 0.4]), (1, [0.6, 0.9]))}
    for count in at.values():
        assert binomial_ok(count, n, 0.5 / 4)
    assert adr.metrics()["adr/pending"] == sum(at.values())
    for task in x.tolist():
        adr.update_on_episode(0.5, 1, tuple(task), 0.5)
    assert adr.boundary_episodes == sum(at.values())
    assert [[len(q) for q in pair] for pair in adr.state_dict()["queues"]] == [[at[0, 0], at[0, 1]],
                                                                              [at[1, 0], at[1, 1]]]
    # the non-boundary tasks are uniform inside the bounds
    inside = x[(x[:, 0] != 0.2) & (x[:, 0] != 0.6) & (x[:, 1] != 0.4) & (x[:, 1] != 0.9)]
    assert binomial_ok(int((inside[:, 0] < 0.3).sum()), len(inside), 0.25)
    assert binomial_ok(int((inside[:, 1] < 0.5).sum()), len(inside), 0.2)


def test_step_is_a_fraction_of_each_range():
    space = Box([0.0, 0.0], [1.0, 10.0])
    adr = ADR(space, initial=[0.5, 5.0], step=[0.1, 0.2], boundary_prob=1.0, queue_length=1, seed=0,
              **THRESHOLDS)
    adr = at_bounds(adr, [0.4, 4.0], [0.6, 6.0])
    moves = np.zeros((2, 2), dtype=int)  # [dim][side]
    for _ in range(12):
        (task,) = adr.sample(1)
        lower, upper = adr.bounds()
        for d in (0, 1):
            moves[d, 0] += task[d] == lower[d]
            moves[d, 1] += task[d] == upper[d]
        adr.update_on_episode(1.0, 1, task, 1.0)
    assert moves.sum() == 12
    # each success at a bound moves it out by one tenth of [0, 1] (0.1) or one fifth of [0, 10] (2.0)
    lower, upper = adr.bounds()
    assert lower[0] == pytest.approx(max(0.0, 0.4 - 0.1 * moves[0, 0]), abs=1e-12)
    assert upper[0] == pytest.approx(min(1.0, 0.6 + 0.1 * moves[0, 1]), abs=1e-12)
    assert lower[1] == pytest.approx(max(0.0, 4.0 - 2.0 * moves[1, 0]), abs=1e-12)
    assert upper[1] == pytest.approx(min(10.0, 6.0 + 2.0 * moves[1, 1]), abs=1e-12)
    assert adr.widened == 12


def test_abandoned_tasks_are_forgotten():
    adr = one_d(queue_length=1)
    (task,) = adr.sample(1)
    assert adr.metrics()["adr/pending"] == 1.0
    adr.on_task_abandoned(task)
    assert adr.metrics()["adr/pending"] == 0.0
    adr.update_on_episode(1.0, 1, task, 1.0)  # arrives after all: no longer a boundary episode
    assert adr.bounds() == ([0.3], [0.6]) and adr.boundary_episodes == 0


# -- construction ---------------------------------------------------------------------------------------
def test_initial_point():
    space = Box([0.0, -1.0], [2.0, 1.0])
    adr = ADR(space, initial=None, **THRESHOLDS, seed=0)
    assert adr.bounds() == ([1.0, 0.0], [1.0, 0.0])
    assert set(adr.sample(20)) == {(1.0, 0.0)}
    assert ADR(space, initial=[0.5, 0.25], **THRESHOLDS).bounds() == ([0.5, 0.25], [0.5, 0.25])
    assert ADR(space, initial=0.0, **THRESHOLDS).bounds() == ([0.0, 0.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="outside the box"):
        ADR(space, initial=[3.0, 0.0], **THRESHOLDS)
    with pytest.raises(ValueError, match="one per parameter"):
        ADR(space, initial=[0.5, 0.5, 0.5], **THRESHOLDS)


def test_thresholds_are_required_and_explained():
    with pytest.raises(TypeError, match="ADR needs low_threshold and high_threshold.*success rates in"):
        ADR(Box(0.0, 1.0), initial=None)
    with pytest.raises(TypeError, match="ADR needs high_threshold:"):
        ADR(Box(0.0, 1.0), initial=None, low_threshold=0.2)
    with pytest.raises(ValueError, match="low_threshold < high_threshold"):
        ADR(Box(0.0, 1.0), initial=None, low_threshold=0.8, high_threshold=0.2)


def test_bad_input():
    with pytest.raises(TypeError, match="Discrete"):
        ADR(Discrete(5), initial=None, **THRESHOLDS)
    with pytest.raises(ValueError, match="zero width"):
        ADR(Box([0.0, 1.0], [1.0, 1.0]), initial=None, **THRESHOLDS)
    for kw in ({"queue_length": 0}, {"boundary_prob": 1.5}, {"step": 0.0}, {"step": [0.1, 0.1]},
               {"signal": "success"}, {"low_threshold": float("nan")}):
        with pytest.raises(ValueError):
            ADR(Box(0.0, 1.0), initial=None, **{**THRESHOLDS, **kw})
    adr = one_d()
    with pytest.raises(ValueError, match="finite"):
        adr.update_on_episode(1.0, 1, (0.3,), float("nan"))
    with pytest.raises(ValueError, match="not an encoded task"):
        adr.update_on_episode(1.0, 1, (1.5,), 1.0)
    assert adr.num_episodes == 0


def test_metrics():
    adr = at_bounds(ADR(Box(0.0, [1.0, 10.0]), initial=None, **THRESHOLDS), [0.2, 5.0], [0.6, 7.5])
    m = adr.metrics()
    assert (m["adr/low[0]"], m["adr/high[0]"], m["adr/low[1]"], m["adr/high[1]"]) == (0.2, 0.6, 5.0, 7.5)
    assert m["adr/coverage"] == pytest.approx((0.4 + 0.25) / 2)
    config = ADR(ConfigSpace({"size": [4, 8, 16]}), initial=[8], **THRESHOLDS).metrics()
    assert config["adr/low/size"] == config["adr/high/size"] == 8.0 and config["adr/coverage"] == 0.0


def test_config_and_product_spaces():
    space = Product((Box(0.0, 1.0), ConfigSpace({"size": [4, 8, 16]})))
    adr = ADR(space, initial=[0.5, 8], boundary_prob=1.0, queue_length=2, step=0.5, seed=0, **THRESHOLDS)
    for _ in range(60):
        (task,) = adr.sample(1)
        assert space.contains_encoded(task)
        adr.update_on_episode(1.0, 1, task, 1.0)
    assert adr.bounds() == ([0.0, 4.0], [1.0, 16.0])
    assert {t[1] for t in adr.sample(200)} == {(0,), (1,), (2,)}


box_bounds = st.integers(1, 3).flatmap(lambda d: st.tuples(
    st.lists(st.floats(-100, 100), min_size=d, max_size=d),
    st.lists(st.floats(0.01, 50), min_size=d, max_size=d),
    st.lists(st.floats(0, 1), min_size=d, max_size=d),
))


@given(box_bounds, st.integers(0, 2**16), st.lists(st.booleans(), min_size=1, max_size=60))
def test_samples_stay_inside_the_bounds(bounds, seed, successes):
    low, width, where = (np.array(b) for b in bounds)
    space = Box(low, low + width)
    adr = ADR(space, initial=np.clip(low + where * width, low, low + width), queue_length=2, step=0.3,
              boundary_prob=0.8, seed=seed, **THRESHOLDS)
    for ok in successes:
        (task,) = adr.sample(1)
        adr.update_on_episode(float(ok), 1, task, float(ok))
        lower, upper = (np.array(b) for b in adr.bounds())
        assert np.all(space.low <= lower) and np.all(lower <= upper) and np.all(upper <= space.high)
    lower, upper = (np.array(b) for b in adr.bounds())
    for task in adr.sample(32):
        assert space.contains_encoded(task) and np.all((lower <= task) & (task <= upper))


# -- checkpoints ----------------------------------------------------------------------------------------
@settings(max_examples=25)
@given(st.integers(0, 2**16), st.lists(st.floats(0, 1), max_size=80), st.integers(0, 5))
def test_checkpoint_round_trip(tmp_path_factory, seed, results, in_flight):
    space = Box(0.0, 1.0, shape=(2,))
    kw = {"initial": [0.5, 0.5], "queue_length": 3, "step": 0.1, "seed": seed, **THRESHOLDS}
    a = ADR(space, **kw)
    for r in results:
        (task,) = a.sample(1)
        a.update_on_episode(r, 1, task, r)
    flying = a.sample(in_flight) if in_flight else []  # boundary tasks not yet played
    path = tmp_path_factory.mktemp("adr") / "adr.ckpt"
    checkpoint.save(path, a.state_dict())
    b = ADR(space, **{**kw, "seed": seed + 1})
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    for task in flying:
        a.update_on_episode(1.0, 1, task, 1.0)
        b.update_on_episode(1.0, 1, task, 1.0)
    tasks = a.sample(20)
    assert b.sample(20) == tasks
    for i, task in enumerate(tasks):
        a.update_on_episode(i % 2, 1, task, float(i % 2))
        b.update_on_episode(i % 2, 1, task, float(i % 2))
    assert b.sample(8) == a.sample(8)
    assert b.metrics() == a.metrics()


def test_state_of_another_space_is_refused():
    a = ADR(Box(0.0, 1.0, shape=(2,)), initial=None, **THRESHOLDS)
    with pytest.raises(ValueError, match="2 parameter dimensions"):
        ADR(Box(0.0, 1.0, shape=(3,)), initial=None, **THRESHOLDS).load_state_dict(a.state_dict())


# -- the teacher-only toy env ---------------------------------------------------------------------------
def test_masters_more_toy_cells_than_domain_randomization():
    # signal "progress" is the played cell's competence / 100; the bounds start on the origin cell (the one
    # cell that learns from scratch) and widen once the cells at a bound average half the cap
    space = Box(0.0, 1.0, shape=(2,))
    adr = ADR(space, initial=[0.0, 0.0], queue_length=20, step=0.05, low_threshold=0.05,
              high_threshold=0.5, signal="progress", seed=0)
    taught = play(adr, ToyEnv(2), 4000, every=4000)[-1]
    uniform = play(DomainRandomization(space, seed=0), ToyEnv(2), 4000, every=4000)[-1]
    assert taught >= uniform + 0.04, (taught, uniform)
    assert adr.metrics()["adr/coverage"] > 0.1


# -- through the sync layer -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_boundary_tasks_come_back_through_a_served_env():
    """Over ipc, every episode on a boundary task reaches its bound's queue (tasks cross the wire exactly)."""
    import gymnasium as gym

    from magister import GymnasiumSyncWrapper, serve
    from magister.examples.cartpole import CartPoleTask

    space = Box(0.01, 0.2, shape=(1,))
    # every task a boundary task, every return (>= 1) counts as success: each full queue widens
    adr = ADR(space, initial=[0.1], boundary_prob=1.0, queue_length=2, step=0.1, low_threshold=-1.0,
              high_threshold=0.0, seed=0)
    with serve(adr) as server:
        env = GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), space), server.address)
        env.reset(seed=0)
        episodes = 0
        while episodes < 12:
            _, _, term, trunc, _ = env.step(0)
            if term or trunc:
                episodes += 1
                env.reset()
        env.close()
    applied = adr.num_episodes  # (the server has stopped: everything sent is applied)
    assert applied >= 12 and adr.boundary_episodes == applied
    # each credited episode sits in a queue or was one of a full queue of two, tested (and widened)
    assert 2 * adr.widened + sum(len(q) for q in adr.state_dict()["queues"][0]) == applied
    assert adr.widened > 0 and adr.narrowed == 0
