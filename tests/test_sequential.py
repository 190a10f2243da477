"""Tests for the Sequential curriculum (magister.curricula.sequential)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.curricula.base import Curriculum, StepBatch, TaskSample
from magister.curricula.constant import Constant
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.sequential import Sequential
from magister.curricula.stopping import ConditionSyntaxError, parse_condition
from magister.task_spaces.box import Box
from magister.task_spaces.discrete import Discrete


class Recorder(Curriculum):
    """Records every call it receives; samples a fixed task; can ask for step updates."""

    def __init__(self, task_space, task, step_updates=False, train=True):
        super().__init__(task_space)
        self.task = task
        self.calls: list[tuple] = []
        self.requires_step_updates = step_updates
        self.train = train

    def sample(self, k=1):
        self.num_sampled += k
        return [self.task] * k

    def sample_tasks(self, k=1):
        return [TaskSample(t, self.train) for t in self.sample(k)]

    def update_on_step(self, task, obs, rew, term, trunc, info, progress, env_id=None):
        self.calls.append(("step", task, rew))

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.calls.append(("episode", task, episode_return))

    def update_task_progress(self, task, progress, env_id=None):
        self.calls.append(("progress", task, progress))

    def update_on_demand(self, metrics):
        self.calls.append(("demand", metrics))


def episodes(cur, returns, length=10, task=0, progress=0.0):
    """Feed scripted episodes; return the stage after each one."""
    stages = []
    for r in returns:
        cur.update_on_episode(r, length, task, progress)
        stages.append(cur.stage)
    return stages


# -- construction ------------------------------------------------------------------------------------
def test_stage_kinds_are_wrapped():
    space = Discrete(5)
    rec = Recorder(space, 4)
    sub = Discrete(5)
    cur = Sequential([2, [1, 3], sub, rec], ["tasks>=1", "tasks>=1", "tasks>=1"], space)
    assert isinstance(cur.stages[0], Constant) and cur.stages[0].task == 2
    assert isinstance(cur.stages[1], DomainRandomization) and cur.stages[1].tasks == [1, 3]
    assert isinstance(cur.stages[2], DomainRandomization) and cur.stages[2].task_space is sub
    assert cur.stages[3] is rec


def test_tuple_task_and_list_of_tuple_tasks_on_a_box():
    box = Box(0.0, 1.0, shape=(2,))
    cur = Sequential([(0.5, 0.5), [(0.1, 0.2), (0.3, 0.4)], [0.25, 0.75]], ["tasks>=1", "tasks>=1"], box)
    assert isinstance(cur.stages[0], Constant) and cur.stages[0].task == (0.5, 0.5)
    assert isinstance(cur.stages[1], DomainRandomization)
    assert isinstance(cur.stages[2], Constant)  # a list that is one encoded task, not a list of tasks


def test_task_space_is_inferred_from_first_space_or_curriculum():
    space = Discrete(4)
    assert Sequential([0, DomainRandomization(space)], ["episodes>=1"]).task_space is space
    assert Sequential([1, space], ["episodes>=1"]).task_space is space
    with pytest.raises(ValueError, match="task_space is required"):
        Sequential([0, [1, 2]], ["episodes>=1"])


@pytest.mark.parametrize(
    "stages, conditions, exc, match",
    [
        ([0, 1], [], ValueError, "exactly 1 stopping condition"),
        ([0, 1], ["episodes>=1", "steps>=1"], ValueError, "exactly 1 stopping condition"),
        ([0], ["episodes>=1"], ValueError, "exactly 0 stopping condition"),
        ([], [], ValueError, "non-empty"),
        ([0, 1], "episodes>=1", TypeError, "list of strings"),
        ([0, 1], [3], TypeError, "str or Condition"),
        ([0, 7], ["episodes>=1"], ValueError, "stage 1"),
        ([0, []], ["episodes>=1"], ValueError, "stage 1"),
        ([0, 1], [parse_condition("eval>=1")], ValueError, "unknown metrics"),
    ],
)
def test_bad_construction(stages, conditions, exc, match):
    with pytest.raises(exc, match=match):
        Sequential(stages, conditions, Discrete(3))


@pytest.mark.parametrize(
    "cond, position",
    [("return>>1", 7), ("episodes>=", 10), ("foo>=1", 0), ("episodes>=1&&(steps>2", 21)],
)
def test_malformed_condition_fails_at_construction(cond, position):
    with pytest.raises(ConditionSyntaxError, match=f"at position {position}") as info:
        Sequential([0, 1], [cond], Discrete(3))
    assert info.value.position == position


def test_bad_window():
    with pytest.raises(ValueError, match="window"):
        Sequential([0, 1], ["episodes>=1"], Discrete(3), window=0)


# -- advancing exactly --------------------------------------------------------------------------------
def test_advances_at_first_episode_where_return_condition_holds():
    cur = Sequential([0, 1], ["return>=1.0&&episodes>=5"], Discrete(3), window=3)
    # Means of the last 3 returns after episodes 4..8: 5/3 (but <5 eps), 2/3, -1/3, 1/3, 1.0 -> advance at 8.
    stages = episodes(cur, [3, 3, 3, -1, 0, 0, 1, 2, 5, 5])
    assert stages == [0] * 7 + [1, 1, 1]
    assert cur.stage_episodes == 2  # counters were reset when stage 1 began
    assert cur.stage_metrics()["return"] == pytest.approx(5.0)  # window reset too: only stage-1 episodes
    assert cur.sample(2) == [1, 1]


def test_return_window_is_nan_until_first_episode_and_full_window_option():
    cur = Sequential([0, 1], ["return>=-1e9"], Discrete(3), window=4, full_window=True)
    assert np.isnan(cur.stage_metrics()["return"])
    assert episodes(cur, [0.0, 0.0, 0.0, 0.0]) == [0, 0, 0, 1]
    partial = Sequential([0, 1], ["return>=-1e9"], Discrete(3), window=4)
    assert episodes(partial, [0.0]) == [1]


def test_progress_and_success_conditions():
    cur = Sequential([0, 1, 2], ["progress>=0.5", "success>0.75"], Discrete(3), window=2)
    # Stage 0 window means: 0.2, 0.45, 0.55 -> advance (window reset); stage 1: 0.5, 0.75 (not > 0.75), 0.8.
    for p, expected in [(0.2, 0), (0.7, 0), (0.4, 1), (0.5, 1), (1.0, 1), (0.6, 2)]:
        cur.update_on_episode(0.0, 1, 0, p)
        assert cur.stage == expected


def test_steps_from_episode_lengths():
    cur = Sequential([0, 1], ["steps>=100"], Discrete(3))
    for _ in range(3):
        cur.update_on_episode(0.0, 30, 0, 0.0)
    assert cur.stage == 0 and cur.stage_steps == 90
    cur.update_on_episode(0.0, 30, 0, 0.0)
    assert cur.stage == 1 and cur.stage_steps == 0 and cur.num_steps == 120


def test_steps_from_step_updates_when_a_stage_wants_them():
    space = Discrete(3)
    rec = Recorder(space, 0, step_updates=True)
    cur = Sequential([rec, 1], ["steps>=5"], space)
    assert cur.requires_step_updates
    batch = StepBatch(tasks=[0] * 4, rewards=np.ones(4), terminated=np.zeros(4), truncated=np.zeros(4),
                      progress=np.zeros(4))
    cur.update_on_step_batch(batch)
    cur.update_on_episode(1.0, 4, 0, 0.0)  # lengths do not count again when step updates are counted
    assert cur.stage == 0 and cur.stage_steps == 4
    cur.update_on_step(0, None, 1.0, False, False, None, 0.0)
    assert cur.stage == 1
    assert [c[0] for c in rec.calls] == ["step"] * 4 + ["episode", "step"]


class BatchRecorder(Recorder):
    def update_on_step_batch(self, batch, env_id=None):
        self.calls.append(("batch", list(batch.tasks), env_id))


def step_batch(tasks):
    n = len(tasks)
    return StepBatch(tasks=tasks, rewards=np.arange(n), terminated=np.zeros(n), truncated=np.zeros(n),
                     progress=np.zeros(n), infos=[{"i": i} for i in range(n)], env_id=7)


def test_step_batch_is_split_exactly_at_a_steps_threshold():
    space = Discrete(3)
    a, b, c = (BatchRecorder(space, i, step_updates=True) for i in range(3))
    cur = Sequential([a, b, c], ["steps>=3", "steps>=2&&episodes>=0"], space)
    cur.update_on_step_batch(step_batch([0, 1, 2, 0, 1, 2, 0]), env_id=4)
    assert a.calls == [("batch", [0, 1, 2], 4)]
    assert b.calls == [("batch", [0, 1], 4)]
    assert c.calls == [("batch", [2, 0], 4)]
    assert cur.stage == 2 and cur.stage_steps == 2 and cur.num_steps == 7


def test_step_batch_without_steps_condition_is_forwarded_whole():
    space = Discrete(3)
    a = BatchRecorder(space, 0, step_updates=True)
    cur = Sequential([a, 1], ["episodes>=1"], space)
    cur.update_on_step_batch(step_batch([0] * 5))
    assert a.calls == [("batch", [0] * 5, None)]
    assert cur.stage_steps == 5


def test_demand_metrics_drive_conditions_and_reset_per_stage():
    space = Discrete(3)
    cur = Sequential([0, 1, 2], ["eval_return>=0.9", "eval_return>=0.5&&episodes>=1"], space,
                     demand_metrics=["eval_return"])
    cur.update_on_demand({"eval_return": 0.5, "other": "ignored"})
    assert cur.stage == 0 and cur.stage_metrics()["eval_return"] == 0.5
    cur.update_on_demand({"eval_return": 0.95})
    assert cur.stage == 1 and np.isnan(cur.stage_metrics()["eval_return"])  # reset with the stage
    cur.update_on_episode(0.0, 1, 1, 0.0)
    assert cur.stage == 1
    cur.update_on_demand({"eval_return": 0.6})
    assert cur.stage == 2
    with pytest.raises(ValueError, match="eval_return must be finite"):
        cur.update_on_demand({"eval_return": float("inf")})
    with pytest.raises(TypeError, match="dict"):
        cur.update_on_demand([("eval_return", 1.0)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "names, exc", [(["steps"], ValueError), (["bad name"], ValueError), ("abc", TypeError)]
)
def test_demand_metric_names_are_checked(names, exc):
    with pytest.raises(exc, match="demand_metrics"):
        Sequential([0, 1], ["episodes>=1"], Discrete(3), demand_metrics=names)


def test_unknown_demand_name_in_condition_is_a_syntax_error():
    with pytest.raises(ConditionSyntaxError, match="position 0"):
        Sequential([0, 1], ["eval>=1"], Discrete(3), demand_metrics=["eval_return"])


def test_tasks_condition_splits_a_batch_exactly():
    cur = Sequential([0, 1, 2], ["tasks>=5", "tasks==3"], Discrete(3))
    assert cur.sample(3) == [0, 0, 0]
    assert cur.sample(4) == [0, 0, 1, 1]
    assert cur.stage == 1 and cur.stage_tasks == 2
    assert cur.sample(4) == [1, 2, 2, 2]
    assert cur.num_sampled == 11


def test_condition_true_at_start_skips_stages():
    cur = Sequential([0, 1, 2], ["episodes>=0", "steps<1"], Discrete(3))
    assert cur.stage == 2
    assert cur.sample(1) == [2]


def test_several_stages_can_end_on_one_update():
    cur = Sequential([0, 1, 2], ["episodes>=1", "return<=5"], Discrete(3))
    cur.update_on_episode(3.0, 1, 0, 0.0)
    assert cur.stage == 1  # stage 1's window is empty after the reset, so return<=5 is false
    cur.update_on_episode(3.0, 1, 0, 0.0)
    assert cur.stage == 2


def test_updates_are_forwarded_to_the_current_stage_only():
    space = Discrete(3)
    a, b = Recorder(space, 0), Recorder(space, 1)
    cur = Sequential([a, b], ["episodes>=2"], space)
    cur.update_task_progress(0, 0.5, env_id=3)
    cur.update_on_demand({"x": 1.0})
    cur.update_on_episode(1.0, 5, 0, 1.0)
    cur.update_on_episode(2.0, 5, 0, 1.0)
    cur.update_on_episode(3.0, 5, 1, 1.0)
    assert a.calls == [("progress", 0, 0.5), ("demand", {"x": 1.0}), ("episode", 0, 1.0), ("episode", 0, 2.0)]
    assert b.calls == [("episode", 1, 3.0)]


def test_train_flags_pass_through():
    space = Discrete(3)
    cur = Sequential([Recorder(space, 0, train=False), 1], ["tasks>=2"], space)
    out = cur.sample_tasks(3)
    assert out == [TaskSample(0, False), TaskSample(0, False), TaskSample(1, True)]


def test_bad_feedback_is_rejected():
    cur = Sequential([0, 1], ["episodes>=1"], Discrete(3))
    with pytest.raises(ValueError, match="episode_return"):
        cur.update_on_episode(float("nan"), 1, 0, 0.0)
    with pytest.raises(ValueError, match="length"):
        cur.update_on_episode(0.0, -1, 0, 0.0)
    with pytest.raises(ValueError, match="k must be"):
        cur.sample(0)
    assert cur.stage == 0 and cur.stage_episodes == 0


# -- introspection, seeding, checkpointing ------------------------------------------------------------
def test_metrics_and_distribution():
    space = Discrete(4)
    cur = Sequential([[1, 3], 2], ["episodes>=1"], space)
    m = cur.metrics()
    assert m["sequential/stage"] == 0.0
    assert m["curriculum/max_prob"] == pytest.approx(0.5)
    assert cur.distribution().tolist() == [0.0, 0.5, 0.0, 0.5]
    cur.update_on_episode(2.0, 7, 1, 1.0)
    m = cur.metrics()
    assert m["sequential/stage"] == 1.0 and m["sequential/stage_episodes"] == 0.0
    assert "sequential/stage_return" not in m  # NaN before the stage's first episode is omitted
    assert m["curriculum/episodes"] == 1.0
    assert m["stage/curriculum/max_prob"] == 1.0 and m["curriculum/entropy"] == 0.0
    assert cur.distribution().tolist() == [0.0, 0.0, 1.0, 0.0]


def test_distribution_of_a_stage_over_another_space():
    parent = Discrete(4)
    same_encoding = Discrete(3)  # tasks 0..2 are tasks of the parent too
    cur = Sequential([same_encoding, Discrete(10)], ["tasks>=1"], parent)
    assert cur.distribution() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])
    cur.sample(1)
    with pytest.raises(NotImplementedError, match="not an encoded task"):
        cur.distribution()
    m = cur.metrics()  # still works, without a distribution summary of its own
    assert "curriculum/entropy" not in m and m["stage/curriculum/entropy"] == pytest.approx(np.log(10))


def test_seeded_runs_repeat_and_differ_by_seed():
    space = Discrete(1000)

    def run(seed):
        cur = Sequential([space, [5, 6, 7], space], ["tasks>=10", "tasks>=10"], seed=seed)
        return cur.sample(30)

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert set(run(1)[10:20]) <= {5, 6, 7}


def test_reseed():
    space = Discrete(1000)
    cur = Sequential([space, space], ["tasks>=100"], seed=3)
    first = cur.sample(5)
    cur.seed(3)
    assert cur.sample(5) == first


def _script(cur, rng_seed, n):
    """Interleave samples and episodes deterministically; record what comes out."""
    rng = np.random.default_rng(rng_seed)
    out = []
    for _ in range(n):
        tasks = cur.sample(int(rng.integers(1, 4)))
        out.append((tuple(tasks), cur.stage))
        ret, length, progress = float(rng.normal(1.0, 1.0)), int(rng.integers(1, 50)), float(rng.random())
        cur.update_on_episode(ret, length, tasks[0], progress)
    return out


def test_state_dict_round_trip_continues_identically():
    space = Discrete(50)

    def make():
        return Sequential(
            [space, [1, 2, 3], DomainRandomization(space, seed=9), 4],
            ["tasks>=7", "return>=1.2&&episodes>=4", "steps>=300||tasks>=40"],
            window=5,
            demand_metrics=["score"],
            seed=11,
        )

    a = make()
    _script(a, 0, 12)
    a.update_on_demand({"score": 3.0})
    state = a.state_dict()
    saved = a.stage_metrics()
    expected = _script(a, 1, 40)
    b = make()
    b.load_state_dict(state)
    assert _script(b, 1, 40) == expected
    assert b.metrics() == a.metrics()
    c = make()
    c.load_state_dict(state)
    assert c.stage_metrics() == saved and saved["score"] == 3.0 and c.stage == 1
    assert {s for _, s in expected} != {expected[0][1]}  # the continuation really crosses a stage


def test_load_state_dict_checks():
    space = Discrete(5)
    a = Sequential([0, 1], ["episodes>=1"], space)
    with pytest.raises(ValueError, match="2 stages"):
        Sequential([0, 1, 2], ["episodes>=1", "episodes>=1"], space).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="cannot load"):
        Constant(space, 0).load_state_dict(a.state_dict())


@given(st.lists(st.integers(1, 6), min_size=1, max_size=12), st.integers(1, 20))
def test_tasks_threshold_property(batches, threshold):
    """Whatever the batch sizes, exactly ``threshold`` tasks come from stage 0."""
    cur = Sequential([0, 1], [f"tasks>={threshold}"], Discrete(2))
    out = [t for k in batches for t in cur.sample(k)]
    n0 = min(threshold, len(out))
    assert out == [0] * n0 + [1] * (len(out) - n0)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=5), st.integers(0, 30))
def test_episode_thresholds_property(thresholds, n_episodes):
    """With ``episodes>=t_i`` per stage, after E episodes the stage is the number of prefix sums <= E."""
    cur = Sequential(list(range(len(thresholds) + 1)), [f"episodes>={t}" for t in thresholds], Discrete(10))
    for _ in range(n_episodes):
        cur.update_on_episode(0.0, 1, cur.stage, 0.0)
    assert cur.stage == int(np.sum(np.cumsum(thresholds) <= n_episodes))
    assert cur.sample(1) == [cur.stage]
