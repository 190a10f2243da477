"""DualCurriculum: joint (task, opponent) sampling, train flags, routing, checkpoints, metrics."""

from __future__ import annotations

import json

import msgpack
import numpy as np
import pytest

from magister.curricula.base import Curriculum, StepBatch, TaskSample
from magister.curricula.coplayer import OutcomeRule
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.dual import DualCurriculum
from magister.curricula.pfsp import PFSP
from magister.curricula.self_play import SelfPlay
from magister.opponents import OpponentStore
from magister.task_spaces.discrete import Discrete


def jsave(obj, f):
    f.write(json.dumps(obj).encode())


def jload(f):
    return json.loads(f.read())


class Recorder(Curriculum):
    """Uniform over Discrete(n); odd tasks are evaluation-only; records every update it receives."""

    def __init__(self, n=6, *, steps=False, seed=None):
        super().__init__(Discrete(n), seed=seed)
        self.requires_step_updates = steps
        self.calls = []

    def sample(self, k=1):
        self.num_sampled += k
        return self.rng.integers(self.task_space.num_tasks, size=k).tolist()

    def sample_tasks(self, k=1):
        return [TaskSample(t, t % 2 == 0) for t in self.sample(k)]

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.calls.append(("episode", episode_return, length, task, progress, env_id))

    def update_on_step(self, task, obs, rew, term, trunc, info, progress, env_id=None):
        self.calls.append(("step", task, rew))

    def update_task_progress(self, task, progress, env_id=None):
        self.calls.append(("progress", task, progress))

    def update_on_demand(self, metrics):
        self.calls.append(("demand", dict(metrics)))

    def metrics(self):
        return {"curriculum/sampled": float(self.num_sampled), "custom": 1.5}


@pytest.fixture
def pfsp(tmp_path):
    cur = PFSP(OpponentStore(tmp_path, max_count=None, save_fn=jsave, load_fn=jload), checkpoint_interval=1,
               seed=1)
    for g in range(3):
        cur.update_agent({"gen": g})
    return cur


def test_sample_pairs_and_space(pfsp):
    dual = DualCurriculum(Recorder(seed=0), pfsp)
    pairs = dual.sample(200)
    assert len(pairs) == 200 and all(isinstance(p, tuple) and len(p) == 2 for p in pairs)
    assert {t for t, _ in pairs} <= set(range(6)) and {o for _, o in pairs} == {0, 1, 2}
    assert all(dual.task_space.contains_encoded(p) for p in pairs[:10])
    assert not dual.task_space.contains_encoded((0, 7))  # opponent 7 is not stored
    assert dual.num_sampled == 200 and dual.task_curriculum.num_sampled == 200


def test_pairs_are_the_product_of_independent_draws(pfsp):
    """Each half is exactly what its own curriculum would have drawn with the same generator state."""
    task_cur, dual = Recorder(seed=4), DualCurriculum(Recorder(seed=4), pfsp)
    twin = PFSP(pfsp.store, checkpoint_interval=1)
    twin.load_state_dict(pfsp.state_dict())
    pairs = dual.sample(50)
    assert [t for t, _ in pairs] == task_cur.sample(50)
    assert [o for _, o in pairs] == twin.sample(50)


def test_train_flag_is_and_of_both(pfsp):
    class EvalOpponents(SelfPlay):
        def sample_tasks(self, k=1):
            return [TaskSample(t, False) for t in self.sample(k)]

    dual = DualCurriculum(Recorder(seed=2), pfsp)
    samples = dual.sample_tasks(100)
    assert all(s.train == (s.task[0] % 2 == 0) for s in samples)
    assert any(s.train for s in samples) and not all(s.train for s in samples)
    sp = EvalOpponents()
    sp.update_agent("me")
    assert not any(s.train for s in DualCurriculum(Recorder(seed=2), sp).sample_tasks(30))


def test_episode_routing_derived_and_explicit_outcomes(pfsp):
    rec = Recorder()
    dual = DualCurriculum(rec, pfsp)
    dual.update_on_episode(1.0, 20, (3, 0), 0.5, env_id=7)  # learner won -> score 1 for opponent 0
    assert rec.calls == [("episode", 1.0, 20, 3, 0.5, 7)]
    assert pfsp.winrate(0) == 1.0 and pfsp.num_results == 1
    dual.update_on_episode(1.0, 20, [4, 1], 0.5, opponent_return=1.0)  # list form; opponent says it won
    assert rec.calls[-1] == ("episode", 1.0, 20, 4, 0.5, None)
    assert pfsp.winrate(1) == 0.0 and pfsp.num_results == 2
    assert dual.num_episodes == 2 and dual.num_steps == 40
    quiet = DualCurriculum(Recorder(), pfsp, derive_outcomes=False)
    quiet.update_on_episode(-1.0, 5, (0, 2), 0.0)
    assert pfsp.num_results == 2  # no result recorded
    quiet.update_winrate(2, 1.0)
    assert pfsp.winrate(2) == 0.0 and pfsp.num_results == 3


def test_step_progress_and_demand_routing(pfsp):
    rec = Recorder(steps=True)
    dual = DualCurriculum(rec, pfsp)
    assert dual.requires_step_updates
    assert not DualCurriculum(Recorder(), pfsp).requires_step_updates
    dual.update_on_step((2, 1), None, 0.5, False, False, {}, 0.0, 3)
    batch = StepBatch(tasks=[[1, 0], [5, 2]], rewards=[1.0, 2.0], terminated=[False, True],
                      truncated=[False, False], progress=[0.0, 1.0], env_id=4)
    dual.update_on_step_batch(batch)
    dual.update_task_progress((5, 2), 1.0)
    dual.update_on_demand({"loss": 0.1})
    assert rec.calls == [("step", 2, 0.5), ("step", 1, 1.0), ("step", 5, 2.0), ("progress", 5, 1.0),
                         ("demand", {"loss": 0.1})]
    assert dual.num_steps == 3


def test_bad_tasks_and_arguments(pfsp):
    dual = DualCurriculum(Recorder(), pfsp)
    for bad in (3, (1, 2, 3), "ab"):
        with pytest.raises(ValueError, match=r"\(task, opponent_id\) pairs"):
            dual.update_on_episode(1.0, 1, bad, 0.0)
    with pytest.raises(KeyError, match="opponent id 9"):
        dual.update_on_episode(1.0, 1, (0, 9), 0.0)
    with pytest.raises(TypeError, match="AgentCurriculum"):
        DualCurriculum(Recorder(), Recorder())
    with pytest.raises(TypeError, match="task_curriculum"):
        DualCurriculum("tasks", pfsp)
    with pytest.raises(ValueError, match="k must be"):
        dual.sample(0)


def test_msgpack_round_trip_of_tasks(pfsp):
    """Tasks cross the sync layer as msgpack: tuples come back as lists and are still accepted."""
    dual = DualCurriculum(DomainRandomization(Discrete(5), seed=0), pfsp)
    for t in dual.sample(5):
        wire = msgpack.unpackb(msgpack.packb(t))
        assert isinstance(wire, list)
        dual.update_on_episode(-1.0, 3, wire, 0.0)
    assert pfsp.num_results == 5


def test_agent_api_delegates(pfsp):
    dual = DualCurriculum(Recorder(), pfsp)
    assert dual.update_agent({"gen": 3}) == 3
    assert dual.get_opponent(3) == {"gen": 3}
    dual.update_winrate(3, -1.0)
    assert pfsp.winrate(3) == 1.0


def test_state_dict_composes_and_round_trips(pfsp):
    dual = DualCurriculum(DomainRandomization(Discrete(10)), pfsp, seed=3)
    dual.update_on_episode(1.0, 4, (1, 0), 0.0)
    dual.sample(7)
    state = json.loads(json.dumps(dual.state_dict()))
    assert state["class"] == "DualCurriculum" and state["task"]["class"] == "DomainRandomization"
    assert state["opponent"]["class"] == "PFSP"
    fresh_pfsp = PFSP(pfsp.store, checkpoint_interval=1)
    fresh = DualCurriculum(DomainRandomization(Discrete(10)), fresh_pfsp, seed=77)
    fresh.load_state_dict(state)
    assert fresh.sample(40) == dual.sample(40)
    assert fresh_pfsp.winrate(0) == 1.0 and fresh.num_episodes == 1


def test_seed_gives_repeatable_joint_samples(pfsp):
    a = DualCurriculum(DomainRandomization(Discrete(10)), pfsp, seed=5).sample(30)
    b = DualCurriculum(DomainRandomization(Discrete(10)), pfsp, seed=5).sample(30)
    c = DualCurriculum(DomainRandomization(Discrete(10)), pfsp, seed=6).sample(30)
    assert a == b and a != c


def test_metrics_merge_with_prefixes(pfsp):
    dual = DualCurriculum(Recorder(), pfsp)
    dual.sample(4)
    m = dual.metrics()
    assert m["curriculum/sampled"] == 4.0 and m["task/custom"] == 1.5 and m["task/curriculum/sampled"] == 4.0
    assert m["opponent/curriculum/store_size"] == 3.0
    p = pfsp.distribution()
    assert m["opponent/curriculum/entropy"] == pytest.approx(float(-(p * np.log(p)).sum()))


class ExtrasRecorder(Recorder):
    def on_episode(self, episode):  # reads the record's extras
        self.calls.append(("episode", episode.task, episode.extras))


def test_extras_reach_both_curricula(tmp_path):
    store = OpponentStore(tmp_path, max_count=None, save_fn=jsave, load_fn=jload)
    pfsp = PFSP(store, checkpoint_interval=1, outcome_rule=OutcomeRule(opponent_agent="p1"))
    pfsp.update_agent({"gen": 0})
    rec = ExtrasRecorder()
    dual = DualCurriculum(rec, pfsp)
    extras = {"agent_returns": {"p0": 1.0, "p1": -1.0}}
    dual.update_on_episode(0.0, 3, (2, 0), 0.0, extras=extras)  # summed return 0, but p0 (learner) won
    assert rec.calls == [("episode", 2, extras)] and pfsp.winrate(0) == 1.0
    plain = DualCurriculum(Recorder(), pfsp)  # a task curriculum without extras still works
    plain.update_on_episode(0.0, 3, (2, 0), 0.0, extras={"agent_returns": {"p0": -1.0, "p1": 1.0}})
    assert pfsp.winrate(0) == 0.5 and plain.task_curriculum.calls[0][:4] == ("episode", 0.0, 3, 2)
    quiet = DualCurriculum(Recorder(), pfsp, derive_outcomes=False)
    quiet.update_on_episode(0.0, 3, (2, 0), 0.0, extras=extras)
    assert pfsp.num_results == 2  # agent returns are a derived outcome: not recorded
    quiet.update_on_episode(0.0, 3, (2, 0), 0.0, extras={"opponent_return": -1.0})
    assert pfsp.num_results == 3 and pfsp.winrate(0) == 2 / 3


def test_through_the_sync_core_unchanged(pfsp):
    """The sync layer's own message path: sample, ship over msgpack frames, report an episode with extras."""
    from magister.sync import protocol as P
    from magister.sync.core import SyncCore

    pfsp.outcome_rule = OutcomeRule(opponent_agent="p1")
    dual = DualCurriculum(DomainRandomization(Discrete(4), seed=0), pfsp)
    core = SyncCore(dual)
    env = core.register_env().env_id
    tasks = P.decode(P.encode(core.assign_tasks(env, 3)))
    assert len(tasks.tasks) == 3 and all(len(t) == 2 for t in tasks.tasks)
    for tid, task in zip(tasks.task_ids, tasks.tasks):
        extras = {"agent_returns": {"p0": 1.0, "p1": -1.0}}
        msg = P.Report(env, (P.EpisodeEnd(tid, task, 0.0, 5, 1.0, True, extras),))
        core.apply(P.decode(P.encode(msg)))
    assert pfsp.num_results == 3 and dual.num_episodes == 3
    assert core.counters(env).tasks_in_flight == 0
    assert all(pfsp.winrate(o) == 1.0 for _, o in tasks.tasks)


class Flagging(Recorder):
    """Task 0 is a control episode, task 1 a replay on the variant ``t + 10``; records the keywords."""

    def __init__(self, n=2, **kw):
        super().__init__(n, **kw)
        self.task_space = Discrete(20)

    def sample_tasks(self, k=1):
        return [TaskSample(t, False, control=True) if t == 0 else TaskSample(t, True, variant=t + 10)
                for t in self.rng.integers(2, size=k).tolist()]

    def on_episode(self, episode):  # reads the record's control flag and variant
        self.calls.append(("episode", episode.episode_return, episode.task, episode.control, episode.variant))


def test_pairs_carry_the_task_halfs_control_flag_and_variant(pfsp):
    dual = DualCurriculum(Flagging(seed=0), pfsp)
    samples = dual.sample_tasks(40)
    assert {s.task[0] for s in samples} == {0, 1}
    for s in samples:
        if s.task[0] == 0:
            assert s.control and not s.train and s.variant is None
        else:
            assert not s.control and s.train and s.variant == (11, s.task[1])  # same opponent
    plain = DualCurriculum(Recorder(seed=0), pfsp).sample_tasks(10)  # no flags: none on the pairs
    assert not any(s.control or s.variant is not None for s in plain)


def test_control_and_variant_reach_the_task_curriculum_and_control_never_scores_the_opponent(pfsp):
    rec = Flagging()
    dual = DualCurriculum(rec, pfsp)
    dual.update_on_episode(1.0, 5, (0, 1), 0.0, control=True, opponent_return=0.0)
    dual.update_on_episode(0.0, 5, [0, 2], 0.0, control=True)  # (derived outcome: would be a loss)
    assert pfsp.num_results == 0  # played by the control policy: no result against either opponent
    dual.update_on_episode(1.0, 5, (1, 0), 0.0, variant=[11, 0])  # the variant's task half goes on
    assert pfsp.num_results == 1 and pfsp.winrate(0) == 1.0
    assert rec.calls == [("episode", 1.0, 0, True, None), ("episode", 0.0, 0, True, None),
                         ("episode", 1.0, 1, False, 11)]
    plain = Recorder()  # a task curriculum reading only update_on_episode gets the five fields
    DualCurriculum(plain, pfsp).update_on_episode(1.0, 5, (1, 0), 0.0, control=True, variant=(3, 0))
    assert plain.calls == [("episode", 1.0, 5, 1, 0.0, None)] and pfsp.num_results == 1
    with pytest.raises(TypeError, match="control must be a bool"):
        dual.update_on_episode(1.0, 5, (1, 0), 0.0, control="yes")
