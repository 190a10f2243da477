"""Learning Progress (Kanitscheider et al. 2021): formulas, variants, sampling, checkpoints, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulated_student import SimulatedStudent, StudentSpace, run_student, uniform_curriculum

from magister.curricula.learning_progress import (
    LearningProgress,
    learning_progress,
    lp_distribution,
    reweight,
)
from magister.task_spaces.base import TaskSpace
from magister.task_spaces.discrete import Discrete


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class Words(TaskSpace):
    """A finite space that is *not* indexed: encoded tasks are strings."""

    WORDS = ["ant", "bee", "cat", "dog"]

    @property
    def num_tasks(self) -> int:
        return len(self.WORDS)

    def sample(self) -> str:
        return self.WORDS[int(self.rng.integers(len(self.WORDS)))]

    def contains(self, task) -> bool:
        return task in self.WORDS

    def encode(self, task):
        if task not in self.WORDS:
            raise ValueError(f"{task!r} not in {self!r}")
        return task

    def decode(self, encoded):
        if encoded not in self.WORDS:
            raise ValueError(f"{encoded!r} not in {self!r}")
        return encoded

    @property
    def tasks(self):
        return list(self.WORDS)


def evaluating(cls):
    """Adapter: a curriculum that is evaluated on the whole task space every ``every`` episodes.

    Evaluation = ``mc`` Monte-Carlo episodes per task of the simulated student (not charged to the budget,
    as in the papers' periodic evaluation), sent through ``update_on_demand({"success_rates": ...})``.
    """

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


# -- exact formula values ------------------------------------------------------------------------------
def test_reweight_exact_values():
    assert reweight(0.0, 0.1) == 0.0
    assert reweight(1.0, 0.1) == pytest.approx(1.0)
    assert reweight(0.1, 0.1) == pytest.approx(0.5)  # p_theta maps to 1/2
    assert reweight(0.3, 0.1) == pytest.approx(0.27 / 0.34)
    assert reweight(0.5, 0.2) == pytest.approx(0.4 / 0.5)


def test_ema_and_learning_progress_worked_by_hand():
    cur = LearningProgress(Discrete(2), ema_alpha=0.5, p_theta=0.1, variant="evaluation", seed=0)
    cur.update_on_demand({"success_rates": [0.0, 0.2]})  # first observation initialises both EMAs
    assert cur.fast.tolist() == [0.0, 0.2] and cur.slow.tolist() == [0.0, 0.2]
    cur.update_on_demand({"success_rates": [0.4, 0.2]})
    assert cur.fast[0] == pytest.approx(0.2) and cur.slow[0] == pytest.approx(0.1)
    cur.update_on_demand({"success_rates": [0.8, 0.2]})
    # fast = .5*.8 + .5*.2 = .5 ; slow = .5*.5 + .5*.1 = .3
    assert cur.fast[0] == pytest.approx(0.5) and cur.slow[0] == pytest.approx(0.3)
    expected_lp = 0.9 - 0.27 / 0.34  # reweight(.5) - reweight(.3)
    assert cur.learning_progress()[0] == pytest.approx(expected_lp)
    assert cur.learning_progress()[1] == 0.0
    assert learning_progress(np.array([0.5]), np.array([0.3]), 0.1)[0] == pytest.approx(expected_lp)
    # task 1 is active (success > 0) with LP 0: z-scores -1 / +1 over the two active tasks
    a, b = sigmoid(1.0), sigmoid(-1.0)
    assert cur.distribution() == pytest.approx([a / (a + b), b / (a + b)])


def test_distribution_worked_by_hand():
    p = lp_distribution(np.array([0.0, 0.2, 0.0, 0.1]), np.array([0.0, 0.5, 0.3, 0.0]))
    # active = tasks 1, 2, 3 with LP .2, 0, .1: mean .1, std sqrt(2/300)
    std = math.sqrt(((0.1) ** 2 + (0.1) ** 2 + 0.0) / 3)
    w = [sigmoid(0.1 / std), sigmoid(-0.1 / std), sigmoid(0.0)]
    assert p[0] == 0.0
    assert p[1:] == pytest.approx(np.array(w) / sum(w))
    # no active task: uniform
    assert lp_distribution(np.zeros(4), np.zeros(4)).tolist() == [0.25] * 4


def test_uniform_mix():
    cur = LearningProgress(Discrete(4), variant="evaluation", uniform_mix=0.2, seed=0)
    cur.update_on_demand({"success_rates": [0.0, 0.0, 0.0, 0.5]})
    assert cur.distribution() == pytest.approx([0.05, 0.05, 0.05, 0.85])


# -- the two variants ----------------------------------------------------------------------------------
def test_online_variant_updates_every_period_with_mean_success():
    cur = LearningProgress(Discrete(3), update_period=3, ema_alpha=0.5, seed=0)
    cur.update_on_episode(1.0, 5, 0, 1.0)
    cur.update_task_progress(0, 0.0)
    assert cur.num_ema_steps == 0 and not cur.seen.any()  # period not complete yet
    cur.update_on_episode(0.0, 5, 2, 0.5)
    assert cur.num_ema_steps == 1
    assert cur.fast.tolist() == [0.5, 0.0, 0.5]  # task 0: mean of 1 and 0; task 2: 0.5
    assert cur.seen.tolist() == [True, False, True]
    for _ in range(3):
        cur.update_task_progress(0, 1.0)
    assert cur.fast[0] == pytest.approx(0.75) and cur.slow[0] == pytest.approx(0.625)
    assert cur.fast[2] == 0.5  # not observed in the period: unchanged


def test_evaluation_variant_ignores_training_feedback_and_accepts_dicts():
    cur = LearningProgress(Discrete(3), variant="evaluation", update_period=1, seed=0)
    for _ in range(10):
        cur.update_on_episode(1.0, 1, 1, 1.0)
    assert not cur.seen.any() and cur.num_episodes == 10
    cur.update_on_demand({"success_rates": {2: 0.5}})
    assert cur.seen.tolist() == [False, False, True] and cur.fast[2] == 0.5


def test_non_indexed_finite_space_aligned_with_encoded_tasks():
    space = Words()
    cur = LearningProgress(space, variant="evaluation", seed=0)
    cur.update_on_demand({"success_rates": {"cat": 0.0}})
    cur.update_on_demand({"success_rates": {"cat": 0.5}})
    assert cur.distribution().tolist() == [0.0, 0.0, 1.0, 0.0]
    assert set(cur.sample(20)) == {"cat"}
    with pytest.raises(ValueError, match="unknown"):
        cur.update_on_episode(1.0, 1, "eel", 1.0)


def test_unbounded_space_rejected():
    from magister.task_spaces.open_ended import OpenEnded

    with pytest.raises(TypeError, match="finite"):
        LearningProgress(OpenEnded(lambda rng: int(rng.integers(10))))


# -- sampling ------------------------------------------------------------------------------------------
def test_sample_frequencies_follow_distribution():
    cur = LearningProgress(Discrete(3), variant="evaluation", seed=1)
    cur.update_on_demand({"success_rates": [0.0, 0.2, 0.0]})
    cur.update_on_demand({"success_rates": [0.0, 0.6, 0.3]})
    p = cur.distribution()
    draws = np.array(cur.sample(20_000))
    freq = np.bincount(draws, minlength=3) / draws.size
    assert np.abs(freq - p).max() < 0.015
    assert cur.num_sampled == 20_000


def test_million_tasks():
    n = 1_000_000
    cur = LearningProgress(StudentSpace(n), variant="evaluation", seed=0)
    rates = np.zeros(n)
    cur.update_on_demand({"success_rates": rates})
    rates[[5, 500_000, 999_999]] = [0.2, 0.5, 0.9]
    cur.update_on_demand({"success_rates": rates})
    tasks = cur.sample(1000)
    assert set(tasks) <= {5, 500_000, 999_999}
    assert cur.distribution().sum() == pytest.approx(1.0)


@given(st.lists(st.lists(st.floats(0, 1), min_size=5, max_size=5), min_size=1, max_size=6))
def test_distribution_is_a_distribution(rounds):
    cur = LearningProgress(Discrete(5), variant="evaluation", uniform_mix=0.0, seed=0)
    for rates in rounds:
        cur.update_on_demand({"success_rates": rates})
    p = cur.distribution()
    assert p.shape == (5,) and (p >= 0).all() and p.sum() == pytest.approx(1.0)
    active = (cur.learning_progress() > 0) | (cur.fast > 0)
    if active.any():
        assert (p[~active] == 0).all() and (p[active] > 0).all()
    assert set(cur.sample(50)) <= set(np.flatnonzero(p > 0).tolist())


# -- behaviour with a simulated student ------------------------------------------------------------------
def test_evaluation_variant_beats_domain_randomization():
    n, budget = 1000, 8000
    space = StudentSpace(n)
    student = SimulatedStudent(n, seed=0)
    lp = evaluating(LearningProgress)(space, student, every=256, variant="evaluation", seed=0)
    res = run_student(lp, space, budget=budget, seed=0, student=student)
    dr = run_student(uniform_curriculum(space, seed=0), space, budget=budget, seed=0)
    assert res["frac_possible"] >= 0.8
    assert res["success_possible"] > dr["success_possible"]


def test_online_variant_beats_domain_randomization():
    # defaults: explore_mix=0.2 (uniform over tasks without an estimate), min_observations=1
    n, budget = 1000, 8000
    space = StudentSpace(n)
    res = run_student(LearningProgress(space, seed=0), space, budget=budget, seed=0)
    dr = run_student(uniform_curriculum(space, seed=0), space, budget=budget, seed=0)
    # measured: LP 0.528 / 0.885, DR 0.404 / 0.099 (success_possible / frac_possible)
    assert res["frac_possible"] >= 0.8
    assert res["success_possible"] > dr["success_possible"] + 0.05


def test_online_without_exploration_locks_onto_the_first_tasks_it_saw():
    # the failure the exploration term fixes: with explore_mix=0 only tasks that succeeded in the first
    # period ever become active, so nearly all training goes to a couple of tasks
    space = StudentSpace(1000)
    res = run_student(LearningProgress(space, explore_mix=0.0, seed=0), space, budget=8000, seed=0)
    assert (res["counts"][res["possible"]] > 0).sum() <= 5


def test_explore_mix_distribution_by_hand():
    cur = LearningProgress(Discrete(4), update_period=2, explore_mix=0.2, seed=0)
    assert cur.explore_mix == 0.2
    cur.update_task_progress(0, 1.0)
    cur.update_task_progress(1, 0.0)  # one EMA step: task 0 active (success 1), task 1 seen, inactive
    # P = 0.8 * P_LP + 0.2 * uniform over the unseen tasks {2, 3}
    assert cur.distribution() == pytest.approx([0.8, 0.0, 0.1, 0.1])
    draws = np.bincount(cur.sample(20_000), minlength=4) / 20_000
    assert np.abs(draws - [0.8, 0.0, 0.1, 0.1]).max() < 0.015
    cur.update_task_progress(2, 0.0)
    cur.update_task_progress(3, 0.0)  # every task has an estimate: no more exploration mass
    assert cur.distribution() == pytest.approx([1.0, 0.0, 0.0, 0.0])
    assert LearningProgress(Discrete(4), variant="evaluation").explore_mix == 0.0


def test_unseen_set_tracks_the_tasks_without_an_estimate():
    cur = LearningProgress(StudentSpace(500), update_period=5, seed=0)
    rng = np.random.default_rng(0)
    for step in range(400):  # small EMA steps (swap-removes), then a big evaluation (one vectorised pass)
        t = cur.sample(1)[0]
        cur.update_task_progress(t, float(rng.random() < 0.5))
        if step == 300:
            cur.update_on_demand({"success_rates": {int(u): 0.0 for u in range(0, 500, 2)}})
        unseen = cur._unseen[: cur._n_unseen]
        assert set(unseen.tolist()) == set(np.flatnonzero(~cur.seen).tolist())
        assert (cur._unseen_pos[cur._unseen] == np.arange(500)).all()
    assert 0 < cur._n_unseen < 250


def test_min_observations_holds_a_task_until_it_has_enough():
    cur = LearningProgress(Discrete(3), update_period=2, min_observations=2, ema_alpha=0.5, seed=0)
    cur.update_task_progress(0, 1.0)
    cur.update_task_progress(1, 0.0)  # period ends: each task has only one observation
    assert cur.num_ema_steps == 0 and not cur.seen.any()
    cur.update_task_progress(0, 0.0)
    cur.update_task_progress(2, 1.0)  # task 0 now has 2 observations (mean 0.5); 1 and 2 have one each
    assert cur.num_ema_steps == 1
    assert cur.seen.tolist() == [True, False, False] and cur.fast[0] == 0.5
    state = cur.state_dict()
    other = LearningProgress(Discrete(3), update_period=2, min_observations=2, ema_alpha=0.5, seed=1)
    other.load_state_dict(state)
    for c in (cur, other):
        c.update_task_progress(1, 1.0)
        c.update_task_progress(2, 1.0)
    for c in (cur, other):  # tasks 1 and 2 reach 2 observations: means 0.5 and 1.0
        assert c.seen.tolist() == [True, True, True] and c.fast.tolist() == [0.5, 0.5, 1.0]
    assert cur.sample(20) == other.sample(20)


# -- checkpointing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["online", "evaluation"])
def test_checkpoint_resumes_identically(variant):
    space = StudentSpace(50)
    a = LearningProgress(space, variant=variant, update_period=7, uniform_mix=0.05, seed=3)
    rng = np.random.default_rng(0)
    for step in range(40):
        for t in a.sample(4):
            a.update_on_episode(1.0, 1, t, float(rng.random() < 0.3 + 0.01 * t))
        if variant == "evaluation" and step % 5 == 0:
            a.update_on_demand({"success_rates": rng.random(50)})
    state = a.state_dict()
    b = LearningProgress(space, variant=variant, update_period=7, uniform_mix=0.05, seed=99)
    b.load_state_dict(state)
    assert a.sample(32) == b.sample(32)
    for t, r in zip(range(10), rng.random(10)):
        a.update_on_episode(0.0, 1, t, float(r > 0.5))
        b.update_on_episode(0.0, 1, t, float(r > 0.5))
    np.testing.assert_array_equal(a.distribution(), b.distribution())
    assert a.sample(32) == b.sample(32)
    state["fast"][0] = 123.0  # the checkpoint is a copy, not a view
    assert a.fast[0] != 123.0 and b.fast[0] != 123.0


def test_load_state_of_other_class_rejected():
    a = LearningProgress(Discrete(3), seed=0)
    state = a.state_dict()
    state["class"] = "SFL"
    with pytest.raises(ValueError, match="SFL"):
        a.load_state_dict(state)


# -- bad input -----------------------------------------------------------------------------------------
def _snapshot(cur):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in cur.state_dict().items()}


def _assert_same(before, cur):
    after = cur.state_dict()
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, after[k])
        else:
            assert v == after[k], k


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.update_on_episode(1.0, 1, 7, 1.0), "not an encoded task"),
        (lambda c: c.update_on_episode(1.0, 1, 0, float("nan")), "finite"),
        (lambda c: c.update_on_episode(float("inf"), 1, 0, 1.0), "finite"),
        (lambda c: c.update_task_progress(0, 1.5), r"\[0, 1\]"),
        (lambda c: c.update_task_progress("0", 1.0), "not an encoded task"),
        (lambda c: c.update_on_demand({"success_rates": [0.1, 0.2]}), "shape"),
        (lambda c: c.update_on_demand({"success_rates": [0.1, float("nan"), 0.0, 0.0]}), "NaN"),
        (lambda c: c.update_on_demand({"success_rates": [0.1, -0.2, 0.0, 0.0]}), r"\[0, 1\]"),
        (lambda c: c.update_on_demand({"success_rates": {9: 0.5}}), "not an encoded task"),
        (lambda c: c.update_on_demand({"success_rates": {}}), "empty"),
    ],
)
def test_bad_input_raises_and_leaves_state_unchanged(call, error):
    cur = LearningProgress(Discrete(4), update_period=2, seed=0)
    cur.update_on_episode(1.0, 1, 0, 1.0)
    before = _snapshot(cur)
    with pytest.raises(ValueError, match=error):
        call(cur)
    _assert_same(before, cur)


def test_bad_metrics_type():
    with pytest.raises(TypeError, match="dict"):
        LearningProgress(Discrete(2)).update_on_demand([0.5, 0.5])


@pytest.mark.parametrize(
    "kwargs",
    [{"ema_alpha": 0.0}, {"ema_alpha": 1.5}, {"p_theta": 1.0}, {"p_theta": 0.0}, {"update_period": 0},
     {"update_period": 2.5}, {"variant": "offline"}, {"uniform_mix": -0.1}, {"explore_mix": 1.5},
     {"min_observations": 0}],
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        LearningProgress(Discrete(3), **kwargs)


def test_bad_k():
    with pytest.raises(ValueError, match="k must be"):
        LearningProgress(Discrete(3)).sample(0)


def test_metrics_are_floats():
    cur = LearningProgress(Discrete(3), variant="evaluation", seed=0)
    cur.update_on_demand({"success_rates": [0.1, 0.2, 0.3]})
    m = cur.metrics()
    assert all(isinstance(v, float) for v in m.values())
    assert m["lp/tasks_seen"] == 3.0 and m["lp/mean_success"] == pytest.approx(0.2)
