"""XLand dynamic task generation (Open-Ended Learning Team 2021): criteria, scheduling, re-validation."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.curricula.base import TaskSample
from magister.curricula.task_filter import DTGThresholds, TaskFilter, dtg_criteria
from magister.task_spaces.base import task_key
from magister.task_spaces.discrete import Discrete
from magister.task_spaces.open_ended import OpenEnded

UNIT = DTGThresholds.paper((0.0, 1.0))


def wire(x):
    """What a task looks like after crossing the sync layer (msgpack: tuples become lists)."""
    return msgpack.unpackb(msgpack.packb(x))


def feed(cur, s: TaskSample, r: float, progress: float = 0.0) -> None:
    """Report an episode of sample ``s`` as the sync server does: the credited task (after a msgpack round
    trip) with the sample's control flag and variant as keywords."""
    cur.update_on_episode(r, 1, wire(s.task), progress, control=s.control, variant=wire(s.variant))


# -- thresholds and criteria, by hand ----------------------------------------------------------------------
def test_paper_thresholds_rescaled():
    m = DTGThresholds.paper((0.0, 900.0))
    assert (m.m_greater, m.m_s, m.m_cont, m.m_greater_cont, m.m_solved) == (7.5, 375.0, 0.0, 0.0, 1.0)
    m = DTGThresholds.paper((-1.0, 1.0))
    assert m.m_greater == pytest.approx(2 * 7.5 / 900)
    assert m.m_s == pytest.approx(-1.0 + 2 * 375 / 900)
    assert m.m_cont == -1.0
    with pytest.raises(ValueError, match="return_range"):
        DTGThresholds.paper((1.0, 1.0))


def test_criteria_with_paper_defaults():
    zeros = [0.0] * 10
    # some agent episode beats the control, not every one exceeds m_s, control earns nothing: accept
    assert dtg_criteria([1.0] + [0.0] * 9, zeros, UNIT) == (True, True, True)
    # solved: every episode above m_s = 0.4167
    assert dtg_criteria([0.5] * 10, zeros, UNIT)[0] is False
    assert dtg_criteria([0.5] * 9 + [0.4], zeros, UNIT)[0] is True
    # never better than the control by more than m_> = 0.00833
    assert dtg_criteria([0.008] * 10, zeros, UNIT)[1] is False
    assert dtg_criteria([0.009] + [0.0] * 9, zeros, UNIT)[1] is True
    # the control policy earns something: V_cont = 0.01 > m_cont = 0
    assert dtg_criteria([1.0] * 2 + [0.0] * 8, [0.1] + [0.0] * 9, UNIT)[2] is False


def test_criteria_paper_examples():
    # m_> = 2, m_>cont = 0.9: the agent must beat the control by 2 in all ten paired episodes
    m = DTGThresholds(m_greater=2.0, m_s=450.0, m_cont=5.0, m_greater_cont=0.9, m_solved=0.1)
    control = [1.0] * 10
    assert dtg_criteria([3.5] * 10, control, m) == (True, True, True)
    assert dtg_criteria([3.5] * 9 + [3.0], control, m)[1] is False  # 3.0 is not > 1 + 2
    # m_s = 450, m_solved = 0.1: any episode above 450 disqualifies
    assert dtg_criteria([3.5] * 9 + [451.0], control, m)[0] is False
    # m_cont = 5: a control policy averaging 5 or more disqualifies (inclusive bound: 5 passes)
    assert dtg_criteria([100.0] * 10, [5.0] * 10, m)[2] is True
    assert dtg_criteria([100.0] * 10, [5.1] * 10, m)[2] is False


def test_criterion_two_pairs_episodes_in_order():
    m = DTGThresholds(m_greater=0.0, m_s=10.0, m_cont=10.0, m_greater_cont=0.5, m_solved=1.0)
    # pairs (1 vs 0), (0 vs 1), (2 vs 1): agent wins 2 of 3 > 0.5
    assert dtg_criteria([1.0, 0.0, 2.0], [0.0, 1.0, 1.0], m)[1] is True
    # re-validation window longer than K: the last K agent returns are paired
    assert dtg_criteria([5.0, 5.0, 0.0, 0.0, 2.0], [0.0, 1.0, 1.0], m)[1] is False
    with pytest.raises(ValueError, match="at least as many"):
        dtg_criteria([1.0], [0.0, 0.0], m)


RETURNS = st.lists(st.floats(0, 1), min_size=10, max_size=10)


@given(RETURNS, RETURNS)
def test_criteria_match_direct_counts(agent, control):
    a, c = np.array(agent), np.array(control)
    expected = (
        np.sum(a > UNIT.m_s) / 10 < 1.0,
        np.sum(a > c + UNIT.m_greater) / 10 > 0.0,
        c.mean() <= 0.0,
    )
    assert dtg_criteria(agent, control, UNIT) == expected


# -- task metadata as fields ------------------------------------------------------------------------------
def test_task_sample_fields_and_validation():
    s = TaskSample((3, "a"), False, control=True)
    assert (s.task, s.train, s.control, s.variant) == ((3, "a"), False, True, None)
    assert TaskSample(1) == TaskSample(1, True, control=False, variant=None)
    v = TaskSample(1, True, variant=7)
    assert v.variant == 7 and not v.control
    assert TaskSample(1, np.bool_(False), control=np.bool_(True)) == TaskSample(1, False, control=True)
    assert type(TaskSample(1, np.bool_(True)).train) is bool
    with pytest.raises(TypeError, match="TaskSample.train must be a bool"):
        TaskSample(1, 1)
    with pytest.raises(TypeError, match="TaskSample.control must be a bool"):
        TaskSample(1, False, control="yes")
    with pytest.raises(TypeError, match="TaskSample.task"):
        TaskSample(None)
    with pytest.raises(TypeError, match="TaskSample.variant"):
        TaskSample(1, True, variant=TaskSample(2))


def test_no_tag_helpers_left():
    import magister.curricula as curricula
    import magister.curricula.task_filter as tf

    for name in ("CONTROL_TAG", "VARIANT_TAG", "control_task", "split_control", "variant_task",
                 "split_variant", "split_played", "ControlTaskSpace"):
        assert not hasattr(tf, name) and not hasattr(curricula, name)


def test_control_and_variant_samples_carry_plain_tasks():
    cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1.0, max_pending=2, seed=3,
                     replay_variant=lambda t, rng: t + 500, variant_evaluations=True,
                     propose=lambda rng, n: [4, 9][:n])
    for s in cur.sample_tasks(8):
        assert s.task in (4, 9) and s.variant == s.task + 500 and not s.train
    with pytest.raises(TypeError, match="control must be a bool"):
        cur.update_on_episode(0.0, 1, 4, 0.0, control=1)


# -- a small world to run the filter in -------------------------------------------------------------------
KIND_SOLVED, KIND_IMPOSSIBLE, KIND_EASY_FOR_CONTROL, KIND_LEARNABLE = range(4)


class World:
    """Task ``i`` has kind ``i % 4``: already solved (agent return 1), impossible (0), easy for the
    control policy (control succeeds half the time), or learnable (agent succeeds with probability p,
    growing with training). Returns are 0/1, in [0, 1]."""

    def __init__(self, n=40, lr=0.0, seed=0):
        self.n = n
        self.kind = np.arange(n) % 4
        self.p = np.select(
            [self.kind == KIND_SOLVED, self.kind == KIND_LEARNABLE, self.kind == KIND_EASY_FOR_CONTROL],
            [1.0, 0.4, 0.4], 0.0,
        )
        self.lr = lr
        self.rng = np.random.default_rng(seed)
        self.eval_agent = np.zeros(n, dtype=int)
        self.eval_control = np.zeros(n, dtype=int)
        self.trained = np.zeros(n, dtype=int)

    def play(self, sample: TaskSample) -> float:
        task, is_control = sample.task, sample.control
        if is_control:
            assert not sample.train, "control episodes must be evaluation-only"
            self.eval_control[task] += 1
            easy = self.kind[task] == KIND_EASY_FOR_CONTROL
            r = float(self.rng.random() < 0.5) if easy else 0.0
        else:
            r = float(self.rng.random() < self.p[task])
            if sample.train:
                self.trained[task] += 1
                if self.kind[task] == KIND_LEARNABLE:
                    self.p[task] += self.lr * (1.0 - self.p[task])
            else:
                self.eval_agent[task] += 1
        return r


def run(cur, world, rounds, k=8):
    for _ in range(rounds):
        samples = cur.sample_tasks(k)
        for s in samples:
            r = world.play(s)
            feed(cur, s, r, r)


def test_filter_accepts_exactly_the_useful_tasks():
    world = World(40)
    cur = TaskFilter(Discrete(40), num_episodes=10, max_pending=4, eval_fraction=0.5, seed=0)
    run(cur, world, rounds=600)
    accepted = set(cur.train_tasks)
    assert accepted, "some learnable task must have been accepted"
    assert all(world.kind[t] == KIND_LEARNABLE for t in accepted)
    c = cur.counts
    assert c["rejected_solved"] > 0 and c["rejected_control"] > 0 and c["rejected_easy_for_control"] > 0
    decided = c["accepted"] + c["rejected_solved"] + c["rejected_control"] + c["rejected_easy_for_control"]
    assert decided + len(cur.pending) == c["proposed"]
    # K agent and K control evaluation episodes for every decided candidate (none lost here)
    assert world.eval_control.sum() == pytest.approx(10 * decided, abs=10 * len(cur.pending))
    # once tasks are accepted, training episodes are drawn from the accepted set only
    useful = world.kind == KIND_LEARNABLE
    assert world.trained[~useful].sum() < world.trained[useful].sum()


def test_warm_up_trains_on_proposals_and_flags_evaluations():
    # eval_fraction=1: every slot tries an evaluation; 4 candidates x (2 agent + 2 control)
    cur = TaskFilter(Discrete(40), num_episodes=2, eval_fraction=1.0, seed=0)
    samples = cur.sample_tasks(16)
    evals = [s for s in samples if not s.train]
    assert all(isinstance(s, TaskSample) for s in samples)
    assert len(evals) == 16
    assert sum(s.control for s in evals) == 8
    more = cur.sample_tasks(4)  # every candidate fully issued, none answered: warm-up training episodes
    assert all(s.train and not s.control for s in more)
    assert cur.sample(3) and cur.num_sampled == 23


def test_warm_up_keeps_the_evaluation_fraction():
    """With nothing accepted yet, only an eval_fraction share of episodes evaluates candidates; the others
    train on fresh proposals (the agent keeps learning while the filter warms up)."""
    cur = TaskFilter(Discrete(10_000), num_episodes=2, eval_fraction=0.25, max_pending=1000, seed=0)
    samples = cur.sample_tasks(4000)
    evals = sum(not s.train for s in samples)
    assert cur.train_tasks == []
    assert 0.2 < evals / 4000 < 0.3
    assert all(not s.control for s in samples if s.train)


def test_small_accepted_set_shares_training_with_fresh_proposals():
    """min_train_tasks=M: with n < M accepted tasks, a training episode replays the set w.p. n / M."""
    cur = TaskFilter(Discrete(10_000), num_episodes=2, eval_fraction=0.01, min_train_tasks=4, seed=0)
    for t in (7, 8):  # two accepted tasks: n / M = 1/2
        cur._accept(task_key(t), t, [0.5, 0.5], [0.0, 0.0])
    samples = [s for s in cur.sample_tasks(4000) if s.train]
    from_set = np.mean([s.task in (7, 8) for s in samples])
    assert abs(from_set - 0.5) < 0.03  # binomial sd 0.008
    assert len({s.task for s in samples}) > 1500  # the rest: fresh proposals of the space
    for t in (9, 10):  # n = M: only the set
        cur._accept(task_key(t), t, [0.5, 0.5], [0.0, 0.0])
    assert {s.task for s in cur.sample_tasks(400) if s.train} == {7, 8, 9, 10}
    default = TaskFilter(Discrete(10_000), num_episodes=2, eval_fraction=0.01, seed=0)
    default._accept(task_key(3), 3, [0.5, 0.5], [0.0, 0.0])  # M = 1: one task gets every training episode
    assert {s.task for s in default.sample_tasks(200) if s.train} == {3}
    with pytest.raises(ValueError, match="min_train_tasks"):
        TaskFilter(Discrete(4), min_train_tasks=0)


def test_pair_window_revalidates_criterion_two_on_the_whole_window():
    """Window [1, 0, 0, 0] against control [0, 0]: the last K = 2 returns never beat the control (dropped);
    the whole window, paired cyclically, beats it once (kept: Pr > m_>cont = 0)."""
    kept = {}
    for pair_window in (False, True):
        cur = TaskFilter(Discrete(10), num_episodes=2, window=4, pair_window=pair_window, seed=0)
        cur._accept(task_key(5), 5, [0.2, 0.2], [0.0, 0.0])
        for r in (1.0, 0.0, 0.0, 0.0):
            cur.update_on_episode(r, 1, 5, 0.0)
        kept[pair_window] = cur.train_tasks == [5]
        assert cur.counts["dropped"] == (0 if kept[pair_window] else 1)
    assert kept == {False: False, True: True}
    solved = TaskFilter(Discrete(10), num_episodes=2, window=4, pair_window=True, seed=0)
    solved._accept(task_key(5), 5, [0.2, 0.2], [0.0, 0.0])
    for r in (0.9, 0.8, 1.0, 0.6):  # every window return above m_s = 375/900: solved, dropped
        solved.update_on_episode(r, 1, 5, 0.0)
    assert solved.train_tasks == [] and solved.counts["dropped"] == 1


def test_revalidation_drops_tasks_that_become_solved():
    world = World(40, lr=0.2)
    cur = TaskFilter(Discrete(40), num_episodes=10, eval_fraction=0.3, seed=1)
    run(cur, world, rounds=800)
    assert cur.counts["accepted"] > 0
    assert cur.counts["dropped"] > 0
    mastered = np.flatnonzero((world.kind == KIND_LEARNABLE) & (world.p > 0.99))
    assert mastered.size > 0
    assert not set(mastered.tolist()) & set(cur.train_tasks)


def test_capacity_evicts_oldest():
    cur = TaskFilter(Discrete(10), max_train_tasks=2, seed=0)
    ok_agent, ok_control = [1.0] + [0.0] * 9, [0.0] * 10
    for t in (3, 5, 7):
        cur._accept(task_key(t), t, ok_agent, ok_control)
    assert sorted(cur.train_tasks) == [5, 7] and cur.counts["evicted"] == 1


def test_lost_evaluation_episodes_are_reissued():
    cur = TaskFilter(Discrete(10), num_episodes=1, max_pending=1, stale_after=5, eval_fraction=1.0, seed=0)
    first = cur.sample_tasks(2)  # the one candidate: one agent + one control episode, never answered
    assert [s.train for s in first] == [False, False]
    assert all(s.train for s in cur.sample_tasks(6))  # nothing to evaluate until they count as lost
    again = cur.sample_tasks(2)
    assert [s.task for s in again] == [s.task for s in first]


def test_custom_proposal_and_open_ended_space():
    space = OpenEnded(lambda rng: ("room", int(rng.integers(1000))))
    proposed: list[int] = []

    def propose(rng, n):
        out = space.sample_encoded(n, rng=rng)
        proposed.extend(range(n))
        return out

    cur = TaskFilter(space, propose=propose, num_episodes=1, eval_fraction=1.0, seed=0)
    samples = cur.sample_tasks(4)
    assert proposed and len(samples) == 4
    agent = next(s for s in samples if not s.control)
    control = next(s for s in samples if s.control and s.task == agent.task)
    feed(cur, agent, 0.3, 0.3)
    feed(cur, control, 0.0)
    assert cur.counts["accepted"] == 1 and cur.train_tasks == [agent.task]
    with pytest.raises(ValueError, match="returned"):
        TaskFilter(space, propose=lambda rng, n: [], seed=0).sample_tasks(1)


@given(st.integers(0, 10**6), st.integers(1, 4), st.floats(0.05, 1.0), st.integers(1, 30))
def test_bookkeeping_invariants(seed, k_mc, eval_fraction, rounds):
    rng = np.random.default_rng(seed)
    cur = TaskFilter(Discrete(30), num_episodes=k_mc, eval_fraction=eval_fraction, max_pending=3,
                     max_train_tasks=5, seed=seed)
    for _ in range(rounds):
        batch = cur.sample_tasks(int(rng.integers(1, 8)))
        for s in batch:
            assert not (s.control and s.train) and s.variant is None
            if not s.train:
                assert task_key(s.task) in cur.pending  # evaluation episodes are for candidates only
        for s in batch:
            if rng.random() < 0.9:  # some episodes are lost
                r = float(rng.random() < 0.5) * float(rng.random())
                feed(cur, s, r, r)
        c = cur.counts
        rejected = c["rejected_solved"] + c["rejected_control"] + c["rejected_easy_for_control"]
        assert c["accepted"] + rejected + len(cur.pending) == c["proposed"]
        assert len(cur.train_tasks) == c["accepted"] - c["dropped"] - c["evicted"] <= 5
        assert not {task_key(t) for t in cur.train_tasks} & set(cur.pending)
        assert len({task_key(t) for t in cur.train_tasks}) == len(cur.train_tasks)


# -- checkpointing ---------------------------------------------------------------------------------------
def test_checkpoint_resumes_identically():
    world = World(40, lr=0.1)
    a = TaskFilter(Discrete(40), num_episodes=4, eval_fraction=0.4, seed=5)
    run(a, world, rounds=120)
    assert a.counts["accepted"] > 0 and a.pending
    b = TaskFilter(Discrete(40), num_episodes=4, eval_fraction=0.4, seed=6)
    state = a.state_dict()
    rng_state = state.pop("rng")  # 128-bit ints: not msgpack-able, everything else must be
    b.load_state_dict(wire(state) | {"rng": rng_state})
    assert a.sample_tasks(20) == b.sample_tasks(20)
    for t in a.train_tasks[:3]:
        a.update_on_episode(0.0, 1, t, 0.0)
        b.update_on_episode(0.0, 1, t, 0.0)
    assert a.sample_tasks(20) == b.sample_tasks(20)
    assert a.counts == b.counts and a.train_tasks == b.train_tasks


# -- bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.update_on_episode(float("nan"), 1, 0, 0.0), "finite"),
        (lambda c: c.update_on_episode(1.0, 1, 99, 1.0), "not an encoded task"),
        (lambda c: c.update_on_episode(1.0, 1, 99, 1.0, control=True), "not an encoded task"),
    ],
)
def test_bad_input_raises_and_leaves_state_unchanged(call, error):
    cur = TaskFilter(Discrete(10), num_episodes=2, seed=0)
    cur.sample_tasks(5)
    before = cur.state_dict()
    with pytest.raises(ValueError, match=error):
        call(cur)
    assert cur.state_dict() == before


@pytest.mark.parametrize(
    "kwargs",
    [{"num_episodes": 0}, {"max_pending": 0}, {"eval_fraction": 0.0}, {"eval_fraction": 1.5},
     {"window": 3}, {"return_range": (1.0, 0.0)}, {"m_s": float("nan")}],
)
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        TaskFilter(Discrete(10), **kwargs)


def test_metrics():
    cur = TaskFilter(Discrete(10**6), seed=0)
    cur.sample_tasks(3)
    m = cur.metrics()
    assert m["task_filter/pending"] == 4.0 and m["task_filter/train_tasks"] == 0.0
    assert all(isinstance(v, float) for v in m.values())


# -- control first, early rejection, accounting ------------------------------------------------------------
def test_control_first_rejects_as_soon_as_criterion_three_must_fail():
    # K = 3, m_cont = 0.5 on returns in [0, 1]: after control returns [1, 1] the mean is at least 2/3
    cur = TaskFilter(Discrete(10), num_episodes=3, m_cont=0.5, eval_fraction=1.0, max_pending=1,
                     control_first=True, seed=0)
    first = cur.sample_tasks(1)[0]
    task = first.task
    assert first.control and not first.train  # the candidate's first episode is a control episode
    feed(cur, first, 1.0, 1.0)
    assert task_key(task) in cur.pending  # best case 1/3 <= 0.5: still possible
    second = cur.sample_tasks(1)[0]
    assert (second.task, second.control) == (task, True)
    feed(cur, second, 1.0, 1.0)
    assert task_key(task) not in cur.pending  # best case 2/3 > 0.5: rejected without any agent episode
    c = cur.counts
    assert (c["rejected_easy_for_control"], c["rejected_early"], c["accepted"]) == (1, 1, 0)
    assert (c["eval_control_issued"], c["eval_agent_issued"]) == (2, 0)
    cur.update_on_episode(0.0, 1, wire(task), 0.0)  # a late result for the rejected task: ignored
    assert cur.counts == c and not cur.train_tasks


def test_control_first_spreads_first_control_episodes_over_candidates():
    cur = TaskFilter(Discrete(100), num_episodes=2, eval_fraction=1.0, max_pending=4, control_first=True,
                     seed=0)
    first = cur.sample_tasks(4)
    assert all(s.control for s in first)
    assert len({task_key(s.task) for s in first}) == 4  # one per candidate


def test_control_first_keeps_the_decisions_and_spends_fewer_episodes():
    """Same world, same acceptance rule: with control_first, tasks the control scores on are rejected
    early (fewer evaluation episodes per decision) and the accepted set is still learnable tasks only."""
    spent = {}
    for first in (False, True):
        world = World(40, seed=3)
        cur = TaskFilter(Discrete(40), num_episodes=10, max_pending=4, eval_fraction=0.5, seed=0,
                         control_first=first)
        run(cur, world, rounds=600)
        c = cur.counts
        assert cur.train_tasks and all(world.kind[t] == KIND_LEARNABLE for t in cur.train_tasks)
        assert (c["rejected_early"] > 0) == first
        # every issued evaluation episode was played once here (none lost): the accounting matches
        assert c["eval_agent_issued"] == world.eval_agent.sum()
        assert c["eval_control_issued"] == world.eval_control.sum()
        decided = sum(c[k] for k in ("accepted", "rejected_solved", "rejected_control",
                                     "rejected_easy_for_control"))
        spent[first] = (world.eval_agent.sum() + world.eval_control.sum()) / decided
    assert spent[True] < 0.85 * spent[False]


def test_accepted_set_metrics_and_old_checkpoints():
    cur = TaskFilter(Discrete(10), num_episodes=2, seed=0)
    cur._accept(task_key(3), 3, [1.0, 0.0], [0.0, 0.0])
    cur._accept(task_key(4), 4, [1.0, 1.0], [0.5, 0.0])
    m = cur.metrics()
    assert m["task_filter/accepted_agent_return"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["task_filter/accepted_control_return"] == pytest.approx((0.0 + 0.25) / 2)
    state = cur.state_dict()
    state["counts"] = {k: v for k, v in state["counts"].items() if not k.startswith("eval_")}  # older format
    other = TaskFilter(Discrete(10), num_episodes=2, seed=1)
    other.load_state_dict(state)
    assert other.counts["eval_agent_issued"] == 0 and other.counts["accepted"] == 2


def test_fresh_samples_count_training_episodes_as_agent_returns():
    """fresh_samples: a warm-up training episode on a fresh proposal makes it a candidate and its return one
    of its K = 2 agent returns; one agent and two control evaluation episodes then decide it. Agent [1, 0]
    against control [0, 0]: not solved (Pr[R > 375/900] = 0.5 < 1), beats control (1 > 0 + 7.5/900 in
    the first pair: Pr = 0.5 > 0), control mean 0 <= m_cont = 0: accepted."""
    cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1e-12, fresh_samples=True, seed=0)
    (s,) = cur.sample_tasks(1)
    assert s.train and list(cur.pending) == [task_key(s.task)]
    assert cur.counts["proposed"] == 1 and cur.counts["fresh_agent_samples"] == 1
    feed(cur, s, 1.0)
    assert cur.pending[task_key(s.task)].agent == [1.0]
    evals = [cur._next_eval() for _ in range(3)]  # control_first off: the missing agent episode first
    assert [(e.task, e.control) for e in evals] == [(s.task, False), (s.task, True), (s.task, True)]
    assert cur.counts["eval_agent_issued"] == 1 and cur.counts["eval_control_issued"] == 2
    for r, e in zip((0.0, 0.0, 0.0), evals):
        feed(cur, e, r)
    assert cur.train_tasks == [s.task] and cur.counts["accepted"] == 1 and cur.pending == {}

    off = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1e-12, seed=0)
    (s,) = off.sample_tasks(1)
    off.update_on_episode(1.0, 1, wire(s.task), 0.0)  # a warm-up return the filter does not use
    assert off.pending == {} and off.counts["proposed"] == 0 and off.counts["fresh_agent_samples"] == 0


def test_fresh_samples_respect_max_pending_and_leave_room():
    """At most max_pending candidates; with fresh_samples, an evaluation slot with nothing to do adds one
    proposal instead of filling every free place (which fresh training proposals then could not use)."""
    cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1e-12, max_pending=3, fresh_samples=True,
                     seed=0)
    samples = cur.sample_tasks(5)
    assert all(s.train for s in samples)
    assert len(cur.pending) == 3 and cur.counts["fresh_agent_samples"] == 3
    assert {task_key(s.task) for s in samples[:3]} == set(cur.pending)
    one = TaskFilter(Discrete(1000), num_episodes=2, max_pending=3, fresh_samples=True, seed=0)
    one._next_eval()
    assert len(one.pending) == 1
    full = TaskFilter(Discrete(1000), num_episodes=2, max_pending=3, seed=0)
    full._next_eval()
    assert len(full.pending) == 3


def test_widen_accepts_tasks_the_control_reaches_but_the_agent_does_not_beat():
    """widen: criterion 2 also passes when some control return is above lo = 0. Agent [0, 0] vs control
    [0.3, 0]: the agent never beats the control (0 > 0.3 + 7.5/900 fails, 0 > 0 + 7.5/900 fails), control
    mean 0.15 <= m_cont = 0.5: rejected on criterion 2 without widen, accepted with it. Agent and control
    [0, 0]: rejected either way (nobody reaches the goal). Re-validation keeps the widened task while the
    window is unsolved and drops it once every window return is above m_s = 375/900."""
    from magister.curricula.task_filter import _Candidate

    def decide(widen, agent, control):
        cur = TaskFilter(Discrete(10), num_episodes=2, m_cont=0.5, window=2, widen=widen, seed=0)
        cur.pending[task_key(4)] = _Candidate(task=4, agent=list(agent[:1]), control=list(control))
        cur.update_on_episode(agent[1], 1, 4, 0.0)  # the last agent return completes K + K: decision
        return cur

    off, on = decide(False, [0.0, 0.0], [0.3, 0.0]), decide(True, [0.0, 0.0], [0.3, 0.0])
    assert off.train_tasks == [] and off.counts["rejected_control"] == 1
    assert on.train_tasks == [4] and on.counts["accepted"] == 1 and on.counts["accepted_widened"] == 1
    beaten = decide(True, [1.0, 0.0], [0.3, 0.0])  # 1 > 0.3 + 7.5/900: accepted by criterion 2 itself
    assert beaten.train_tasks == [4] and beaten.counts["accepted_widened"] == 0
    nobody = decide(True, [0.0, 0.0], [0.0, 0.0])
    assert nobody.train_tasks == [] and nobody.counts["rejected_control"] == 1
    for r in (0.0, 0.1):  # window [0, 0.1]: not solved, control scored: kept
        on.update_on_episode(r, 1, 4, 0.0)
    assert on.train_tasks == [4] and on.counts["dropped"] == 0
    for r in (0.5, 0.9):  # window [0.5, 0.9], both above 375/900: solved, dropped
        on.update_on_episode(r, 1, 4, 0.0)
    assert on.train_tasks == [] and on.counts["dropped"] == 1


def test_group_of_balances_replay_over_groups():
    """group_of: a training episode picks one of the groups present uniformly, then a task within it.
    Accepted {1, 3, 5} (odd) and {2} (even): task 2 gets 1/2 of the replays, each odd task 1/6
    (uniform replay: 1/4 each)."""
    cur = TaskFilter(Discrete(100), num_episodes=2, eval_fraction=1e-12, group_of=lambda t: t % 2, seed=0)
    for t in (1, 2, 3, 5):
        cur._accept(task_key(t), t, [0.5, 0.5], [0.0, 0.0])
    tasks = np.array([s.task for s in cur.sample_tasks(6000)])
    share = {t: float((tasks == t).mean()) for t in (1, 2, 3, 5)}
    assert abs(share[2] - 1 / 2) < 0.025 and all(abs(share[t] - 1 / 6) < 0.02 for t in (1, 3, 5))
    cur._remove(task_key(2))  # one group left: uniform over it
    assert {s.task for s in cur.sample_tasks(300)} == {1, 3, 5}
    with pytest.raises(TypeError, match="group_of"):
        TaskFilter(Discrete(4), group_of=3)


# -- replay variants ------------------------------------------------------------------------------------
def test_replay_variants_are_fields_and_credited_to_the_accepted_task():
    """Accepted {3, 7}, replay_variant(t) = t + 500: every training episode is TaskSample(t, True,
    variant=t + 500); the returns of variant episodes fill t's window (K = 2, window 4): [0.2, 0.2] + 0.9,
    0.8, 1.0 -> window [0.2, 0.9, 0.8, 1.0]; after 0.6 the window [0.9, 0.8, 1.0, 0.6] is all above
    m_s = 375/900: solved, dropped. A return on the variant's plain task 503 is untracked and changes
    nothing."""
    cur = TaskFilter(Discrete(1000), num_episodes=2, window=4, pair_window=True, eval_fraction=1e-12,
                     replay_variant=lambda t, rng: t + 500, seed=0)
    for t in (3, 7):
        cur._accept(task_key(t), t, [0.2, 0.2], [0.0, 0.0])
    samples = cur.sample_tasks(300)
    assert all(s.train for s in samples) and cur.counts["replay_variants"] == 300
    assert {(s.task, s.variant, s.control) for s in samples} == {(3, 503, False), (7, 507, False)}
    cur.update_on_episode(1.0, 1, 503, 0.0)  # the variant's own task: not an accepted task
    assert list(cur._windows[task_key(3)]) == [0.2, 0.2]
    for r in (0.9, 0.8, 1.0):
        cur.update_on_episode(r, 1, 3, 0.0, variant=503)
    assert list(cur._windows[task_key(3)]) == [0.2, 0.9, 0.8, 1.0] and cur._fresh[task_key(3)] == 3
    cur.update_on_episode(0.6, 1, 3, 0.0, variant=503)
    assert cur.train_tasks == [7] and cur.counts["dropped"] == 1
    assert list(cur._windows[task_key(7)]) == [0.2, 0.2]  # the other task is untouched


def test_replay_variants_come_from_the_curriculum_generator_and_spare_evaluations_and_proposals():
    def variant(t, rng):
        return int(rng.integers(500, 1000))

    def replays(seed):
        cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1e-12, replay_variant=variant,
                         seed=seed)
        cur._accept(task_key(3), 3, [0.2, 0.2], [0.0, 0.0])
        return [s.variant for s in cur.sample_tasks(50)]

    assert replays(0) == replays(0) and replays(0) != replays(1)  # reproducible from the seed
    assert all(500 <= v < 1000 for v in replays(2))
    warm = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=0.5, replay_variant=variant, seed=0)
    samples = warm.sample_tasks(200)  # nothing accepted: evaluations and fresh proposals, no variant
    assert warm.counts["replay_variants"] == 0
    assert all(s.variant is None for s in samples)
    cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=0.5, replay_variant=variant, seed=0)
    cur._accept(task_key(3), 3, [0.2, 0.2], [0.0, 0.0])
    mixed = cur.sample_tasks(40)  # 4 candidates x (2 agent + 2 control) evaluations, then replays of 3
    evals = [s for s in mixed if not s.train]
    assert len(evals) == 16 and all(s.variant is None for s in evals)  # evaluations: the task itself
    assert all(s.task == 3 and s.variant is not None for s in mixed if s.train)
    assert cur.counts["replay_variants"] == 24


def test_replay_variant_outside_the_space_or_not_callable_raises():
    cur = TaskFilter(Discrete(10), num_episodes=2, eval_fraction=1e-12, replay_variant=lambda t, rng: 50,
                     seed=0)
    cur._accept(task_key(3), 3, [0.2, 0.2], [0.0, 0.0])
    with pytest.raises(ValueError, match="replay_variant"):
        cur.sample_tasks(1)
    assert cur.counts["replay_variants"] == 0
    with pytest.raises(TypeError, match="replay_variant"):
        TaskFilter(Discrete(10), replay_variant=3)


def test_variant_evaluations_play_variants_and_decide_on_their_returns():
    """variant_evaluations: every evaluation episode of a candidate plays its own variant (agent episodes
    TaskSample(t, False, variant=v), control episodes TaskSample(t, False, control=True, variant=v)), the
    returns of both are credited to the candidate t, and the decision is the usual one on them: agent
    [0.3, 0.0] against control [0.0, 0.0] -> accepted (criterion 2: 0.3 > 0.0 + m_>); candidate with
    agent [0.0, 0.0] -> rejected (agent never beats control)."""
    def variant(t, rng):
        return int(rng.integers(500, 1000))

    cur = TaskFilter(Discrete(1000), num_episodes=2, eval_fraction=1.0, max_pending=2, seed=3,
                     replay_variant=variant, variant_evaluations=True, propose=lambda rng, n: [4, 9][:n])
    samples = cur.sample_tasks(8)  # 2 candidates x (2 agent + 2 control)
    assert not any(s.train for s in samples)
    played = {4: [], 9: []}
    for s in samples:
        assert s.task in (4, 9) and 500 <= s.variant < 1000  # a variant, never the candidate itself
        played[s.task].append((s.control, s.variant))
    assert sorted(c for c, _ in played[4]) == [False, False, True, True]
    assert len({v for _, v in played[4] + played[9]}) > 4  # drawn afresh for each episode
    assert cur.counts["eval_variants"] == 8 and cur.counts["replay_variants"] == 0
    agent_returns = {4: [0.3, 0.0], 9: [0.0, 0.0]}
    for s in samples:
        feed(cur, s, 0.0 if s.control else agent_returns[s.task].pop())
    assert cur.train_tasks == [4] and cur.counts["accepted"] == 1 and cur.counts["rejected_control"] == 1
    assert cur._control[task_key(4)] == [0.0, 0.0]
    cur.eval_fraction = 1e-12  # now only training replays: variants of the accepted task, as before
    replays = cur.sample_tasks(20)
    assert all(s.train and s.task == 4 and s.variant is not None for s in replays)
    assert cur.counts["replay_variants"] == 20 and cur.counts["eval_variants"] == 8


def test_variant_evaluations_need_replay_variant():
    with pytest.raises(ValueError, match="variant_evaluations=True needs replay_variant"):
        TaskFilter(Discrete(10), variant_evaluations=True)
