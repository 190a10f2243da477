"""Tests of ACCEL (magister.curricula.accel): PLR⊥ plus mutation, provenance, behaviour."""

from __future__ import annotations

import numpy as np
import pytest

from magister.curricula.accel import ACCEL
from magister.curricula.plr import RobustPLR
from magister.task_spaces.base import TaskSpace

L, MAX_WALLS = 19, 5  # a level is 19 cells; solvable iff at most 5 walls: P = 16664 / 2^19 = 3.2%


class Levels(TaskSpace):
    """Open-ended-like levels: bit tuples (1 = wall); mutate flips one random cell."""

    @property
    def num_tasks(self):
        return None

    def sample(self):
        return tuple(int(b) for b in self.rng.integers(0, 2, L))

    def sample_encoded(self, k=1, rng=None):
        g = self.rng if rng is None else rng
        return [tuple(r) for r in g.integers(0, 2, (k, L)).tolist()]

    def contains(self, t):
        return isinstance(t, tuple) and len(t) == L and all(b in (0, 1) for b in t)

    def encode(self, t):
        if not self.contains(t):
            raise ValueError(f"{t!r} is not a level of {self!r}")
        return t

    def decode(self, e):
        e = tuple(e) if isinstance(e, (list, tuple)) else e
        if not self.contains(e):
            raise ValueError(f"{e!r} is not a level of {self!r}")
        return e

    @property
    def can_mutate(self):
        return True

    def mutate(self, e, rng):
        i = int(rng.integers(L))
        return tuple(b ^ (j == i) for j, b in enumerate(e))


def solvable(level) -> bool:
    return sum(level) <= MAX_WALLS


def run_levels(curriculum, budget=3000, seed=0, k=8):
    """A student on Levels: solvable levels start at success 0.5 and improve when trained on."""
    rng = np.random.default_rng(seed)
    p: dict = {}
    n_solvable = 0
    for _ in range(budget // k):
        for s in curriculum.sample_tasks(k):
            ok = solvable(s.task)
            n_solvable += ok
            pi = p.setdefault(s.task, 0.5 if ok else 0.0)
            r = float(rng.random() < pi)
            if s.train and ok:
                p[s.task] = pi + 0.05 * (1 - pi)
            curriculum.update_on_episode(r, 1, s.task, r)
    buf = curriculum.buffer_tasks()
    return float(np.mean([solvable(t) for t in buf])), n_solvable / budget


def test_random_generation_is_about_three_percent_solvable():
    levels = Levels(seed=0).sample_encoded(20000)
    assert 0.025 < np.mean([solvable(t) for t in levels]) < 0.04


@pytest.mark.parametrize("edits", [(7, 10), (1, 3)])
@pytest.mark.parametrize("seed", [0, 1])
def test_accel_finds_solvable_levels(edits, seed):
    accel = ACCEL(Levels(seed=seed), score="return", buffer_size=100, min_edits=edits[0], max_edits=edits[1],
                  seed=seed)
    buf_frac, sampled_frac = run_levels(accel, seed=seed)
    plr = RobustPLR(Levels(seed=seed), score="return", buffer_size=100, replay_prob=0.9, seed=seed)
    plr_buf_frac, _ = run_levels(plr, seed=seed)
    assert buf_frac >= 0.5  # vs ~3% from random generation
    assert sampled_frac >= 0.25
    assert buf_frac > plr_buf_frac + 0.3
    m = accel.metrics()
    assert m["accel/buffer_mutated_fraction"] > 0.5
    assert edits[0] <= m["accel/buffer_mean_edits"] <= edits[1]
    assert m["accel/buffer_mean_generation"] >= 1.0


def test_num_edits_uniform_over_range_and_provenance():
    calls = []

    def mutate_fn(encoded, rng, feedback):  # every edit makes a brand-new task id
        calls.append(feedback)
        return 1000 + len(calls)

    class Ints(Levels):
        def sample_encoded(self, k=1, rng=None):
            g = self.rng if rng is None else rng
            return g.integers(0, 1000, size=k).tolist()

        def contains(self, t):
            return isinstance(t, int) and 0 <= t < 10**6

        def decode(self, e):
            if not self.contains(e):
                raise ValueError(e)
            return e

        @property
        def can_mutate(self):
            return False

    accel = ACCEL(Ints(seed=0), mutate_fn=mutate_fn, score="return", mutate_on="sample", replay_prob=1.0,
                  buffer_size=50, seed=0)
    first = accel.sample_tasks(1)[0]
    assert first.train is False and accel.provenance(first.task) == {"parent": None, "num_edits": 0,
                                                                      "generation": 0}
    accel.update_on_episode(1.0, 1, first.task, 1.0)
    edits = []
    for _ in range(400):
        n_calls = len(calls)
        rep = accel.sample_tasks(1)[0]  # replay -> child queued at once (mutate_on="sample")
        assert rep.train and accel.num_pending == 1
        child = accel.sample_tasks(1)[0]
        assert child.train is False and child.task == 1000 + len(calls)
        prov = accel.provenance(child.task)
        assert prov["parent"] == rep.task and prov["num_edits"] == len(calls) - n_calls
        assert prov["generation"] == accel.provenance(rep.task)["generation"] + 1
        edits.append(prov["num_edits"])
        accel.update_on_episode(2.0, 1, child.task, 1.0)  # children score higher: they enter the buffer
    assert set(edits) == {7, 8, 9, 10}
    counts = np.bincount(edits, minlength=11)[7:]
    assert np.all(np.abs(counts - 100) < 40)  # U{7..10}: 100 each expected
    assert all(f is None for f in calls)
    assert max(accel.provenance(t)["generation"] for t in accel.buffer_tasks()) >= 2


def test_feedback_reaches_mutate_fn_for_hindsight_edits():
    seen = []

    def mutate_fn(encoded, rng, feedback):
        seen.append(feedback)
        return Levels().mutate(encoded, rng)

    accel = ACCEL(Levels(seed=0), mutate_fn=mutate_fn, min_edits=2, max_edits=2, replay_prob=1.0,
                  score="max_mc", seed=0)
    t = accel.sample_tasks(1)[0].task
    accel.update_scores([t], [0.5])  # not a replay: no mutation
    assert seen == [] and accel.num_pending == 0
    rep = accel.sample_tasks(1)[0]
    assert rep.train and accel.num_pending == 0  # waits for the replay's feedback
    accel.update_on_episode(3.0, 7, rep.task, 1.0)
    assert seen == [{"episode_return": 3.0, "length": 7, "progress": 1.0}] * 2 and accel.num_pending == 1
    accel.sample_tasks(1)  # the child
    rep = accel.sample_tasks(1)[0]
    accel.update_scores([rep.task], [0.25])
    assert seen[-1] == {"score": 0.25} and accel.num_pending == 1


def test_children_come_first_and_are_evaluation_only():
    accel = ACCEL(Levels(seed=1), score="return", mutate_on="sample", replay_prob=1.0, min_edits=1,
                  max_edits=1, seed=1)
    t = accel.sample_tasks(1)[0].task
    accel.update_on_episode(1.0, 1, t, 1.0)
    batch = accel.sample_tasks(4)  # 4 replays of t -> 4 children queued
    assert all(s.train and s.task == t for s in batch) and accel.num_pending == 4
    nxt = accel.sample_tasks(6)
    assert [s.train for s in nxt] == [False] * 4 + [True, True]
    assert all(sum(a != b for a, b in zip(s.task, t)) == 1 for s in nxt[:4])


def test_state_dict_round_trip_with_pending_children():
    def make(seed):
        return ACCEL(Levels(seed=0), score="return", buffer_size=20, min_edits=1, max_edits=3, seed=seed)

    accel = make(5)
    run_levels(accel, budget=400, seed=5)
    accel.sample_tasks(3)  # leave replays awaiting feedback / children pending
    state = accel.state_dict()
    expected = accel.sample_tasks(30)
    fresh = make(99)
    fresh.load_state_dict(state)
    assert fresh.sample_tasks(30) == expected
    assert fresh.metrics() == accel.metrics()


def test_bad_input_and_arguments():
    accel = ACCEL(Levels(seed=0), score="return", replay_prob=1.0, seed=0)
    t = accel.sample_tasks(1)[0].task
    accel.update_on_episode(1.0, 1, t, 1.0)
    accel.sample_tasks(1)  # a replay awaiting feedback
    before = accel.state_dict()
    other = tuple(1 - b for b in t)
    with pytest.raises(KeyError, match="never sampled"):
        accel.update_on_episode(1.0, 1, other, 1.0)
    with pytest.raises(ValueError, match="finite"):
        accel.update_on_episode(float("nan"), 1, t, 1.0)
    with pytest.raises(ValueError, match="shape"):
        accel.update_scores([t], [1.0, 2.0])
    with pytest.raises(KeyError):
        accel.provenance(other)
    after = accel.state_dict()
    assert after["awaiting"] == before["awaiting"] and after["children"] == before["children"]
    assert np.array_equal(after["buf_score"], before["buf_score"])

    class NoMutate(Levels):
        @property
        def can_mutate(self):
            return False

    with pytest.raises(ValueError, match="mutate"):
        ACCEL(NoMutate())
    with pytest.raises(ValueError, match="min_edits"):
        ACCEL(Levels(), min_edits=5, max_edits=2)
    with pytest.raises(TypeError, match="min_edits"):
        ACCEL(Levels(), min_edits=1.5)
    with pytest.raises(ValueError, match="mutate_on"):
        ACCEL(Levels(), mutate_on="later")
    with pytest.raises(TypeError, match="mutate_fn"):
        ACCEL(Levels(), mutate_fn=3)
    with pytest.raises(ValueError, match="replay"):
        ACCEL(Levels(), replay_prob=None)


def test_accel_on_open_ended_space():
    from magister.task_spaces.open_ended import OpenEnded

    def gen(rng):
        return tuple(int(b) for b in rng.integers(0, 2, 8))

    def mut(level, rng):
        i = int(rng.integers(8))
        return tuple(b ^ (j == i) for j, b in enumerate(level))

    space = OpenEnded(gen, mutate_fn=mut, seed=0)
    accel = ACCEL(space, score="return", buffer_size=10, min_edits=1, max_edits=2, seed=0)
    for _ in range(30):
        for s in accel.sample_tasks(4):
            level = space.decode(s.task)
            accel.update_on_episode(float(sum(level) <= 3), 1, s.task, 0.0)
    assert len(accel) == 10 and accel.num_mutations > 0
    gens = [accel.provenance(t)["generation"] for t in accel.buffer_tasks()]
    assert max(gens) >= 1


def test_invalid_child_from_mutate_fn_raises():
    accel = ACCEL(Levels(seed=0), mutate_fn=lambda e, rng, fb: (2,) * L, mutate_on="sample", replay_prob=1.0,
                  score="return", seed=0)
    t = accel.sample_tasks(1)[0].task
    accel.update_on_episode(1.0, 1, t, 1.0)
    with pytest.raises(ValueError, match="invalid task"):
        accel.sample_tasks(1)


def test_distribution_puts_all_mass_on_a_pending_child():
    from magister.task_spaces.discrete import Discrete

    def step(e, rng, fb):
        return (e + 1) % 50

    accel = ACCEL(Discrete(50), mutate_fn=step, min_edits=2, max_edits=2, mutate_on="sample",
                  replay_prob=1.0, score="return", seed=0)
    t = accel.sample_tasks(1)[0].task
    dist = accel.distribution()
    np.testing.assert_allclose(dist, 1 / 50)  # nothing buffered yet: a new task, uniform
    accel.update_on_episode(1.0, 1, t, 1.0)
    np.testing.assert_allclose(accel.distribution()[t], 1.0)  # only t is buffered and replay_prob = 1
    accel.sample_tasks(1)
    dist = accel.distribution()
    assert dist[(t + 2) % 50] == 1.0 and accel.sample_tasks(1)[0].task == (t + 2) % 50
