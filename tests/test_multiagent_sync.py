"""Multi-agent sync: co-player envs reporting per-agent returns and slots, per-agent episodes, and the
worker-side opponent loading (unknown ids, corrupted snapshots, leases) of
:mod:`magister.env_wrappers.coplayer`."""

from __future__ import annotations

import contextlib
import functools
import json
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from pettingzoo.classic import tictactoe_v3
from pettingzoo.utils.env import ParallelEnv

from magister.curricula.base import TaskSample
from magister.curricula.constant import Constant
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.dual import DualCurriculum
from magister.curricula.pfsp import PFSP
from magister.curricula.self_play import SelfPlay
from magister.env_wrappers.coplayer import (
    CoPlayerWrapper,
    OpponentIds,
    SingleLearnerEnv,
    TurnBasedParallelEnv,
)
from magister.env_wrappers.sync_wrappers import PettingZooSyncWrapper
from magister.examples.tiny_pz import TinyTag, TinyTagTask
from magister.opponents import CorruptSnapshotError, OpponentStore
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete
from magister.task_spaces.product import Product


def _save(obj, f):
    f.write(json.dumps(obj).encode())


def _load(f):
    return json.loads(f.read())


def _policy(opponent, obs, agent):
    """Snapshots are {"move": k} (always move k) or {"chase": true} (step towards the other agent)."""
    if opponent.get("chase"):
        return _towards(obs)
    return int(opponent["move"])


def _towards(obs):
    """A TinyTag move towards the other agent, from the observation's last two entries (its offset)."""
    dr, dc = obs[-2], obs[-1]
    if abs(dr) >= abs(dc) and dr != 0:
        return 2 if dr > 0 else 1
    if dc != 0:
        return 4 if dc > 0 else 3
    return 0


@pytest.fixture
def store(tmp_path):
    s = OpponentStore(tmp_path / "store", max_count=None, save_fn=_save, load_fn=_load)
    s.add({"move": 0})  # id 0: stands still
    s.add({"chase": True})  # id 1: chases
    return s


class RecordingPFSP(PFSP):
    """PFSP that also keeps every episode update's extras."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def update_on_episode(self, episode_return, length, task, progress, env_id=None, *, extras=None):
        self.seen.append((task, episode_return, length, dict(extras or {})))
        super().update_on_episode(episode_return, length, task, progress, env_id, extras=extras)


def _coplayer(store, learner, **kw):
    return CoPlayerWrapper(TinyTag(size=3, max_cycles=12), store.directory, load_fn=_load, policy_fn=_policy,
                           learner_agents=[learner], **kw)


def _play(env, policy, episodes, seed=0):
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        while env.agents:
            obs, *_ = env.step({a: policy(obs[a]) for a in env.agents})


def test_coplayer_reports_every_agents_return_the_opponents_slots_and_id(store):
    pfsp = RecordingPFSP(store, checkpoint_interval=1, seed=0)
    pfsp.sample = lambda k=1: [0] * k  # the stationary runner, every episode
    env = PettingZooSyncWrapper(_coplayer(store, "chaser"), pfsp)
    _play(env, _towards, 5)
    env.close()
    assert len(pfsp.seen) == 5
    for task, ret, length, extras in pfsp.seen:
        assert task == 0 and ret == 1.0 and length >= 1  # the learner (chaser) caught the runner
        assert extras["agent_returns"] == {"chaser": 1.0, "runner": -1.0}  # the opponent's slot included
        assert extras["opponent_agents"] == {"runner": 0} and extras["learner_agents"] == ["chaser"]
        assert extras["opponent_id"] == 0 and extras["opponent_return"] == -1.0
        assert extras["learner_return"] == 1.0
    # OutcomeRule read opponent_return = -1: five learner wins against opponent 0
    assert pfsp.winrate(0) == 1.0 and pfsp.winrate(1) == 0.5 and pfsp.num_results == 5
    # P = (f_hard(x) + 0.01) / sum: weights (0 + 0.01, 0.25 + 0.01)
    np.testing.assert_allclose(pfsp.distribution(), [0.01 / 0.27, 0.26 / 0.27])


def test_coplayer_learner_losing_lowers_the_win_rate_over_sockets(store):
    pfsp = RecordingPFSP(store, checkpoint_interval=1, seed=0)
    pfsp.sample = lambda k=1: [1] * k  # the chasing opponent
    with serve(pfsp) as server:
        env = PettingZooSyncWrapper(_coplayer(store, "runner"), server.address)
        env.reset(seed=0)
        with server.lock:  # only ids travel through the curriculum's socket; the worker loaded the weights
            assert all(type(t) is int for t in server.in_flight(env.env_id).values())
        assert env.loaded_ids == [1]
        _play(env, lambda obs: 0, 4)  # the learner (runner) stands still and is caught
        env.close()
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 4 and m["sync/total/tasks_in_flight"] == 0
        with server.lock:
            assert [x[3]["opponent_agents"] for x in pfsp.seen] == [{"chaser": 1}] * 4
            assert [x[3]["opponent_return"] for x in pfsp.seen] == [1.0] * 4
            assert pfsp.winrate(1) == 0.0 and pfsp.winrate(0) == 0.5


def test_opponent_id_arrives_in_dual_pairs_and_the_task_half_reaches_the_inner_env(store):
    inner = TinyTagTask(TinyTag(max_cycles=6), Discrete(tasks=[(3, 0.0), (5, 0.0), (7, 0.0)]))
    env = CoPlayerWrapper(inner, store, policy_fn=_policy, learner_agents=["chaser"])
    assert isinstance(env.task_space, Product) and env.env_tasks
    dual = DualCurriculum(DomainRandomization(inner.task_space, seed=1), PFSP(store, checkpoint_interval=1),
                          seed=2)
    sync = PettingZooSyncWrapper(env, dual)
    seen = []
    for e in range(6):
        obs, infos = sync.reset(seed=e)
        (task, opp) = infos["chaser"]["task"]
        size, _ = inner.task_space.decode(task)
        seen.append((size, opp))
        assert inner.unwrapped.grid.shape == (size, size) and infos["chaser"]["opponent_id"] == opp
        while sync.agents:
            obs, *_ = sync.step({"chaser": _towards(obs["chaser"])})
    sync.close()
    assert dual.opponent_curriculum.num_results == 6 and dual.task_curriculum.num_episodes == 6
    assert {s for s, _ in seen} <= {3, 5, 7} and {o for _, o in seen} <= {0, 1}


def test_random_sides_give_each_agent_to_the_learner_about_half_the_time(store):
    env = CoPlayerWrapper(TinyTag(size=3, max_cycles=2), store.directory, load_fn=_load, policy_fn=_policy,
                          seed=0)
    assert env.possible_agents == ["chaser", "runner"]
    counts = {"chaser": 0, "runner": 0}
    for _ in range(400):
        env.reset(options={"task": 0})
        (a,) = env.agents
        counts[a] += 1
        assert env.episode_extras()["opponent_agents"] == {("runner" if a == "chaser" else "chaser"): 0}
    env.close()
    assert 160 <= counts["chaser"] <= 240  # Binomial(400, 1/2): mean 200, sd 10
    assert env.loaded_ids == [0]  # one load, then served from the loader's cache


class Trio(ParallelEnv):
    """Three agents; "c" leaves after the first step. Rewards per step: a 1, b 2, c 5; two or three steps."""

    metadata = {"name": "trio_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b", "c"]
        self.agents = []
        self._space = spaces.Discrete(2)
        self._obs = spaces.Box(0, 10, (1,), np.float32)

    def observation_space(self, agent):
        return self._obs

    def action_space(self, agent):
        return self._space

    def reset(self, seed=None, options=None):
        self.task = (options or {}).get("task", 0)
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        end = self.t >= 2 + self.task
        rews = {a: {"a": 1.0, "b": 2.0, "c": 5.0}[a] for a in self.agents}
        terms = {a: end or a == "c" for a in self.agents}
        truncs = dict.fromkeys(self.agents, False)
        infos = {a: {"task_progress": 0.5 if a == "b" else 0.0} for a in self.agents}
        obs = {a: np.full(1, self.t, np.float32) for a in self.agents}
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rews, terms, truncs, infos


class TrioTask(Trio):
    task_space = Discrete(2)


class Recorder(DomainRandomization):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.calls.append((task, episode_return, length, progress))
        super().update_on_episode(episode_return, length, task, progress, env_id)


def _run_trio(source, episodes, per_agent=True):
    env = PettingZooSyncWrapper(TrioTask(), source, per_agent_episodes=per_agent)
    for _ in range(episodes):
        env.reset()
        while env.agents:
            env.step(dict.fromkeys(env.agents, 0))
    env.close()


def test_per_agent_episodes_count_each_agents_trajectory_with_its_own_return_and_length():
    cur = Recorder(Discrete(2), seed=0)
    _run_trio(cur, 6)
    assert len(cur.calls) == 18 and cur.num_episodes == 18
    for k in range(6):
        (ta, ra, la, pa), (tb, rb, lb, pb), (tc, rc, lc, pc) = cur.calls[3 * k: 3 * k + 3]
        assert ta == tb == tc
        steps = 2 + ta
        assert (ra, la) == (1.0 * steps, steps) and (rb, lb) == (2.0 * steps, steps) and (rc, lc) == (5.0, 1)
        assert (pa, pb, pc) == (0.0, 0.5, 0.0)  # each agent's own last task_progress


def test_per_agent_episodes_over_sockets_keep_the_books_balanced():
    cur = Recorder(Discrete(2), seed=0)
    with serve(cur) as server:
        _run_trio(server.address, 5)
        m = server.metrics()
    assert m["sync/total/tasks_consumed"] == 5 and m["sync/total/tasks_in_flight"] == 0
    assert m["sync/total/episodes_applied"] == 15 and m["sync/total/updates_rejected"] == 0
    assert len(cur.calls) == 15


class Flagged(DomainRandomization):
    """Hands out every task as an evaluation-only control task played as a variant (the other task), and
    keeps every Episode it is given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.episodes = []

    def sample_tasks(self, k=1):
        return [TaskSample(t, train=False, control=True, variant=1 - t) for t in self.sample(k)]

    def on_episode(self, episode):
        self.episodes.append(episode)
        super().on_episode(episode)

    def received(self):
        """What each episode carried, as plain data (read over Ray too)."""
        return [(e.agent, e.train, e.control, e.variant, e.task, sorted(e.extras)) for e in self.episodes]


@pytest.mark.parametrize("transport", ["in-process", "ipc", "tcp", "ray"])
def test_per_agent_episodes_keep_the_tasks_flags_on_every_transport(transport, request):
    """Every agent's episode carries the train/control flags and the variant its task was handed out with
    (agents 2..n used to arrive as a task the env chose: train=True, control=False, no variant)."""
    cur = Flagged(Discrete(2), seed=0)
    with contextlib.ExitStack() as stack:
        if transport == "in-process":
            source, received = cur, cur.received
        elif transport == "ray":
            pytest.importorskip("ray")
            request.getfixturevalue("ray_session")
            from magister.sync.ray_server import serve_ray

            server = stack.enter_context(serve_ray(cur, name=f"flagged-{os.getpid()}"))
            source, received = server.address, functools.partial(server.call, "received")
        else:
            address = "tcp://127.0.0.1:*" if transport == "tcp" else None
            server = stack.enter_context(serve(cur, address) if address else serve(cur))
            source, received = server.address, cur.received
        env = PettingZooSyncWrapper(TrioTask(), source, per_agent_episodes=True)
        played = []
        for _ in range(4):
            _, infos = env.reset()
            assert infos["a"]["task_train"] is False and infos["a"]["task_control"] is True
            played.append((env.unwrapped.task, infos["a"]["task"]))
            while env.agents:
                env.step(dict.fromkeys(env.agents, 0))
        env.close()
        episodes = received()
    assert [agent for agent, *_ in episodes] == ["a", "b", "c"] * 4
    for k, (variant, info_task) in enumerate(played):
        assert info_task == variant  # the env played the variant, and every agent's episode is credited so:
        for agent, train, control, got_variant, task, extras in episodes[3 * k: 3 * k + 3]:
            assert (train, control, got_variant, task) == (False, True, variant, 1 - variant), agent
            assert extras == ["agent_returns"]


def test_without_per_agent_mode_one_summed_episode_per_episode():
    cur = Recorder(Discrete(2), seed=0)
    _run_trio(cur, 4, per_agent=False)
    assert len(cur.calls) == 4
    for task, ret, length, _ in cur.calls:
        steps = 2 + task
        assert ret == 3.0 * steps + 5.0 and length == steps


@settings(max_examples=25, deadline=None)
@given(
    learner=st.sampled_from(["chaser", "runner"]),
    moves=st.lists(st.integers(0, 4), min_size=1, max_size=30),
)
def test_agent_returns_are_zero_sum_and_match_the_learners_reported_return(learner, moves):
    """TinyTag is zero-sum: whatever the moves, the opponent's return is minus the learner's."""
    cur = Constant(OpponentIds(allow_current=True), -1)
    sp = SelfPlay()
    sp.update_agent({"move": 3})
    env = CoPlayerWrapper(TinyTag(size=4, max_cycles=len(moves)), sp, policy_fn=_policy,
                          learner_agents=[learner])
    sync = PettingZooSyncWrapper(env, cur)
    sync.reset(seed=len(moves))
    total = 0.0
    for m in moves:
        if not sync.agents:
            break
        _, rews, *_ = sync.step({learner: m})
        total += rews[learner]
    extras = env.episode_extras()
    other = "runner" if learner == "chaser" else "chaser"
    assert extras["agent_returns"][learner] == total == -extras["agent_returns"][other]
    assert extras["opponent_return"] == -total and extras["opponent_agents"] == {other: -1}
    sync.close()


# -- bad input ------------------------------------------------------------------------------------------
def test_unknown_opponent_id_is_a_clear_key_error(store):
    env = _coplayer(store, "chaser")
    with pytest.raises(KeyError, match=r"cannot play opponent 99.*known ids: \[0, 1\]"):
        env.reset(options={"task": 99})
    with pytest.raises(ValueError, match="opponent id -3"):
        env.reset(options={"task": -3})
    with pytest.raises(ValueError, match="CURRENT_AGENT"):
        env.reset(options={"task": -1})
    with pytest.raises(ValueError, match="no opponent yet"):
        env.reset()


def test_corrupted_snapshot_is_a_clear_error(store):
    path = store.path(1)
    path.write_bytes(path.read_bytes()[:-3] + b"???")
    env = _coplayer(store, "chaser")
    with pytest.raises(CorruptSnapshotError, match=r"opponent 1 is corrupted.*snapshot-00000001\.bin"):
        env.reset(options={"task": 1})
    env.reset(options={"task": 0})  # the healthy snapshot still loads
    env.close()


def _make_worker_env(address, directory):
    env = CoPlayerWrapper(TinyTag(size=3, max_cycles=4), directory, load_fn=_load, policy_fn=_policy,
                          learner_agents=["chaser"])
    return SingleLearnerEnv(PettingZooSyncWrapper(env, address, timeout=20.0))


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium prints the worker's traceback as a warning
@pytest.mark.parametrize("case", ["unknown", "corrupt"])
def test_load_errors_surface_from_the_worker_process(store, case):
    opponent = 7 if case == "unknown" else 1
    if case == "corrupt":
        store.path(1).write_bytes(b"not json at all")
    with serve(Constant(OpponentIds(), opponent)) as server:
        envs = gym.vector.AsyncVectorEnv(
            [functools.partial(_make_worker_env, server.address, str(store.directory))], context="fork"
        )
        try:
            expected = KeyError if case == "unknown" else CorruptSnapshotError
            with pytest.raises(expected) as info:
                envs.reset(seed=0)
        finally:
            envs.close(terminate=True)
    msg = str(info.value)
    assert f"opponent {opponent}" in msg
    if case == "unknown":
        assert "known ids: [0, 1]" in msg and "pid" in msg
    else:
        assert "snapshot-00000001.bin" in msg


def test_the_store_never_deletes_the_snapshot_an_env_is_playing(tmp_path):
    store = OpponentStore(tmp_path / "s", max_count=1, save_fn=_save, load_fn=_load)
    store.add({"move": 0})
    env = CoPlayerWrapper(TinyTag(size=3, max_cycles=3), store.directory, load_fn=_load, policy_fn=_policy,
                          learner_agents=["chaser"])
    env.reset(options={"task": 0})
    path0 = store.path(0)
    for i in range(3):
        store.add({"move": i})  # max_count=1: the rolling window would keep only the newest ...
    assert store.ids() == [0, 3]  # ... but the snapshot being played is protected by the env's lease
    assert path0.exists() and store.leases(0) == 1 and store.evict() == []
    env.reset(options={"task": 0})  # the same opponent again: served from the loader's cache
    while env.agents:
        env.step({"chaser": 0})
    env.reset(options={"task": 3})  # switching opponents releases the lease on 0 ...
    assert store.leases(0) == 0 and store.leases(3) == 1 and env.loaded_ids == [0, 3]
    assert store.evict() == [0] and not path0.exists()  # ... and the next eviction removes it
    env.close()
    assert store.leases(3) == 0


def test_evicted_id_with_fallback_plays_the_newest(tmp_path):
    store = OpponentStore(tmp_path / "s", max_count=1, save_fn=_save, load_fn=_load)
    for i in range(3):
        store.add({"move": i})
    env = CoPlayerWrapper(TinyTag(size=3), store.directory, load_fn=_load, policy_fn=_policy,
                          learner_agents=["chaser"], fallback_to_latest=True)
    _, infos = env.reset(options={"task": 0})
    assert env.opponent_id == 2 and infos["chaser"]["opponent_id"] == 2
    assert env.episode_extras()["opponent_id"] == 2
    env.close()


def test_bad_configuration_and_actions_raise(store):
    with pytest.raises(ValueError, match="learner_agents"):
        CoPlayerWrapper(TinyTag(), store.directory, learner_agents=["nobody"])
    with pytest.raises(ValueError, match="learner_agents"):
        CoPlayerWrapper(TinyTag(), store.directory, learner_agents=["chaser", "runner"])
    with pytest.raises(ValueError, match="learner_agents"):
        CoPlayerWrapper(TinyTag(), store.directory, learner_agents="everyone")
    with pytest.raises(TypeError, match="opponents must be"):
        CoPlayerWrapper(TinyTag(), 3.5)
    with pytest.raises(TypeError, match="ParallelEnv"):
        CoPlayerWrapper(object(), store.directory)
    with pytest.raises(ValueError, match="env_tasks=True"):
        CoPlayerWrapper(TinyTag(), store.directory, env_tasks=True)
    env = _coplayer(store, "chaser")
    env.reset(options={"task": 0})
    with pytest.raises(KeyError, match="does not control"):
        env.step({"chaser": 0, "runner": 0})
    with pytest.raises(KeyError, match="no action"):
        env.step({})
    env.close()
    dual = CoPlayerWrapper(TinyTagTask(TinyTag()), store.directory, load_fn=_load, policy_fn=_policy)
    with pytest.raises(ValueError, match=r"\(task, opponent_id\) pair"):
        dual.reset(options={"task": 0})
    no_policy = CoPlayerWrapper(TinyTag(), store.directory, load_fn=_load, learner_agents=["chaser"])
    no_policy.reset(options={"task": 0})
    with pytest.raises(TypeError, match="not callable"):
        no_policy.step({"chaser": 0})
    no_policy.close()


def test_episode_extras_hook_must_return_a_dict():
    class Bad(Trio):
        task_space = Discrete(2)

        def episode_extras(self):
            return [1, 2]

    env = PettingZooSyncWrapper(Bad(), DomainRandomization(Discrete(2), seed=0))
    env.reset()
    with pytest.raises(TypeError, match="episode_extras"):
        while env.agents:
            env.step(dict.fromkeys(env.agents, 0))


# -- turn-based games -------------------------------------------------------------------------------------
def test_turn_based_parallel_tictactoe_plays_one_move_per_step():
    env = TurnBasedParallelEnv(tictactoe_v3.env())
    obs, infos = env.reset(seed=0)
    assert env.agents == ["player_1", "player_2"] and infos["player_1"]["to_move"]
    assert obs["player_2"]["action_mask"].sum() == 0  # not its turn
    # player_1 takes the first column (cells 0, 1, 2), player_2 plays 3 and 4
    for move, who in [(0, "player_1"), (3, "player_2"), (1, "player_1"), (4, "player_2")]:
        obs, rews, terms, _, infos = env.step({who: move, "player_1" if who == "player_2" else "player_2": 8})
        assert rews == {"player_1": 0.0, "player_2": 0.0} and not any(terms.values())
    obs, rews, terms, truncs, infos = env.step({"player_1": 2})
    assert rews == {"player_1": 1.0, "player_2": -1.0} and all(terms.values()) and env.agents == []
    with pytest.raises(RuntimeError, match="game ended"):
        env.step({"player_1": 5})
    env.reset()
    with pytest.raises(KeyError, match="'player_1' is to move"):
        env.step({"player_2": 0})


def test_coplayer_plays_the_opponents_turns_in_turn_based_games():
    sp = SelfPlay()
    first_free = lambda opp, obs, agent: int(np.flatnonzero(obs["action_mask"])[0])  # noqa: E731
    sp.update_agent("first-free")
    env = CoPlayerWrapper(TurnBasedParallelEnv(tictactoe_v3.env()), sp, policy_fn=first_free,
                          learner_agents=["player_2"], turn_based=True)
    obs, infos = env.reset(options={"task": -1})
    board = obs["player_2"]["observation"]
    assert board[0, 0, 1] == 1 and board.sum() == 1 and infos["player_2"]["to_move"]  # opponent moved first
    # opponent fills 0, 1, 2 (first free cells); the learner plays 4 then 5: opponent wins on its third move
    obs, rews, terms, _, _ = env.step({"player_2": 4})
    assert rews == {"player_2": 0.0} and not terms["player_2"]
    obs, rews, terms, _, _ = env.step({"player_2": 5})
    assert rews == {"player_2": -1.0} and terms["player_2"] and env.agents == []
    extras = env.episode_extras()
    assert extras["agent_returns"] == {"player_1": 1.0, "player_2": -1.0} and extras["opponent_return"] == 1.0


def test_single_learner_env_presents_one_agent_as_gymnasium(store):
    env = SingleLearnerEnv(_coplayer(store, "chaser"))
    assert env.observation_space.shape == (77,) and env.action_space.n == 5
    obs, info = env.reset(seed=0, options={"task": 0})
    assert info["agent"] == "chaser" and obs.shape == (77,) and env.loaded_ids == [0]
    term = trunc = False
    while not (term or trunc):
        obs, r, term, trunc, info = env.step(_towards(obs))
    assert r == 1.0 and term
    env.close()
    assert os.path.isdir(store.directory)


def test_one_learner_against_two_opponent_slots_in_a_three_agent_env():
    sp = SelfPlay()
    sp.update_agent("zero")
    cur = Constant(OpponentIds(allow_current=True), -1)
    env = CoPlayerWrapper(Trio(), sp, policy_fn=lambda opp, obs, agent: 0, learner_agents=["a"])
    sync = PettingZooSyncWrapper(env, cur)
    sync.reset()
    steps = 0
    while sync.agents:
        sync.step({"a": 0})
        steps += 1
    extras = env.episode_extras()
    assert steps == 2 and extras["agent_returns"] == {"a": 2.0, "b": 4.0, "c": 5.0}
    assert extras["opponent_agents"] == {"b": -1, "c": -1} and extras["learner_agents"] == ["a"]
    assert extras["opponent_return"] == 4.5 and extras["learner_return"] == 2.0  # the mean over its slots
    sync.close()


def test_opponent_ids_space_samples_from_the_store_now(store):
    space = OpponentIds(store.directory, seed=0)
    assert {space.sample() for _ in range(50)} == {0, 1}
    with pytest.raises(TypeError, match="directory"):
        OpponentIds().sample()
    with pytest.raises(ValueError, match="not in OpponentIds"):
        space.encode(-1)
    assert OpponentIds(allow_current=True).decode(-1) == -1 and space.num_tasks is None
