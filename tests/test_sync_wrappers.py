"""Sync wrappers in one process: tasks on reset, feedback on step, info keys, task switching, PettingZoo."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st
from pettingzoo import ParallelEnv

from magister.curricula.base import Curriculum, TaskSample
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper, PettingZooSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.sync import protocol as P
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(60)


class Corridor(gym.Env):
    """``length`` steps of reward 1; ``info["success"]`` is 1 from step ``success_at`` on."""

    observation_space = spaces.Box(-1e9, 1e9, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, success_at: int | None = None) -> None:
        self.task, self.length, self.t = 0, 1, 0
        self.success_at = success_at

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.task, self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        term = self.t >= self.length
        done_at = self.length if self.success_at is None else self.success_at
        return (
            np.array([self.task, self.t], np.float32),
            1.0,
            term,
            False,
            {"success": float(self.t >= done_at)},
        )


class LengthTask(TaskWrapper):
    """Task ``t`` is an episode of ``1 + t % 4`` steps."""

    def __init__(self, env, space=None):
        super().__init__(env, space or Discrete(10**9))
        self.switches: list[int] = []

    def change_task(self, task):
        self.switches.append(task)
        self.env.unwrapped.task = task
        self.env.unwrapped.length = 1 + task % 4


class Recorder(Curriculum):
    def __init__(self, requires_steps: bool = False) -> None:
        super().__init__(Discrete(10**9))
        self.requires_step_updates = requires_steps
        self.next = 0
        self.episodes: list[tuple] = []
        self.batches: list = []
        self.progress: list[tuple] = []
        self.extras: list[dict] = []

    def sample(self, k=1):
        out = list(range(self.next, self.next + k))
        self.next += k
        return out

    def sample_tasks(self, k=1):
        return [TaskSample(t, t % 2 == 0) for t in self.sample(k)]

    def update_on_step_batch(self, batch, env_id=None):
        self.batches.append(batch)

    def on_episode(self, episode):  # the record, extras included
        self.episodes.append(
            (episode.task, episode.episode_return, episode.length, episode.progress, episode.env_id)
        )
        if episode.extras:
            self.extras.append(episode.extras)

    def update_task_progress(self, task, progress, env_id=None):
        self.progress.append((task, progress))


def _make(cur, **kw):
    return GymnasiumSyncWrapper(LengthTask(Corridor()), cur, **kw)


def _run_episode(env):
    infos = []
    term = trunc = False
    while not (term or trunc):
        obs, _, term, trunc, info = env.step(0)
        infos.append((obs, info))
    return infos


def test_reset_takes_the_next_task_and_step_feedback_reaches_the_curriculum():
    cur = Recorder()
    env = _make(cur)
    for expected in range(5):
        obs, info = env.reset(seed=expected)
        assert info["task"] == expected and info["task_train"] == (expected % 2 == 0)
        assert info["task_progress"] == 0.0 and obs[0] == expected
        steps = _run_episode(env)
        assert len(steps) == 1 + expected % 4
        for obs, info in steps:
            assert info["task"] == expected and obs[0] == expected
            assert info["task_train"] == (expected % 2 == 0)
        assert steps[-1][1]["task_progress"] == 1.0
    assert cur.episodes == [(t, float(1 + t % 4), 1 + t % 4, 1.0, 0) for t in range(5)]
    env.close()


def test_reset_before_any_step_keeps_the_unused_task():
    cur = Recorder()
    env = _make(cur)
    _, i1 = env.reset()
    _, i2 = env.reset()
    assert i1["task"] == i2["task"] == 0 and cur.next == 1
    env.close()
    m = env.feed.core.sync_metrics()
    assert m["sync/total/tasks_returned"] == 1 and m["sync/total/tasks_in_flight"] == 0


def test_reset_mid_episode_consumes_the_task_without_a_partial_return():
    cur = Recorder()
    env = _make(cur)
    env.reset()
    env.reset()  # task 0 unused: kept
    _run_episode(env)  # task 0 is one step long
    env.reset()  # task 1: two steps
    env.step(0)
    _, info = env.reset()  # abandoned after one step
    assert info["task"] == 2
    assert [e[0] for e in cur.episodes] == [0]  # no partial episode reached the curriculum
    m = env.feed.core.sync_metrics()
    assert m["sync/total/tasks_consumed"] == 2
    assert (m["sync/total/episodes_applied"], m["sync/total/episodes_abandoned"]) == (1, 1)
    env.close()


def test_explicit_task_option_is_played_and_reported_as_untracked():
    cur = Recorder()
    env = _make(cur)
    _, info = env.reset(options={"task": 7})
    assert info["task"] == 7 and env.assignment.task_id == -1
    _run_episode(env)
    assert cur.episodes[-1][0] == 7 and cur.next == 0  # nothing was sampled
    with pytest.raises(ValueError, match="neither a task of .* nor an encoded task"):
        env.reset(options={"task": -3})
    env.close()


def test_step_updates_in_process_with_batching():
    cur = Recorder(requires_steps=True)
    env = _make(cur, strip_keys=["success"])
    env.reset()
    for _ in range(3):
        _run_episode(env)
        env.reset()
    assert [len(b) for b in cur.batches] == [1, 2, 3]
    assert [list(b.tasks) for b in cur.batches] == [[0], [1, 1], [2, 2, 2]]
    assert "success" not in cur.batches[0].infos[0] and cur.batches[0].infos[0]["task"] == 0
    assert cur.batches[2].obs.shape == (3, 2)
    env.close()


def test_server_object_source_is_in_process():
    with serve(Recorder()) as server:
        env = _make(server)
        env.reset()
        _run_episode(env)
        env.close()
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 1 and m["sync/envs"] == 1


def test_address_source_over_sockets():
    with serve(Recorder()) as server:
        env = _make(server.address, prefetch=2)
        for _ in range(4):
            env.reset()
            _run_episode(env)
        env.close()
        m = server.metrics()
        # the update ending each episode also asks for the task the next reset takes (one message per
        # episode), so after the last episode the buffer holds prefetch + 1 tasks, all returned at close
        assert m["sync/total/tasks_consumed"] == 4 and m["sync/total/tasks_returned"] == 3
        assert m["sync/total/tasks_sampled"] == 7 and m["sync/total/tasks_in_flight"] == 0
        assert [e[0] for e in server.curriculum.episodes] == [0, 1, 2, 3]
        # messages: hello, the first request, one episode update per episode, goodbye
        assert m["sync/total/updates_received"] == 4 + 1  # 4 episodes + the goodbye


def test_episode_update_refills_the_prefetch_buffer_in_the_same_message():
    """One message per episode: no separate task request once the first episode has ended."""
    with serve(Recorder()) as server:
        env = _make(server.address, prefetch=1)
        env.reset()
        feed = env.feed
        kinds: list[str] = []
        transport = feed.transport
        send = transport.send
        def kind(items):  # what one send carries: its messages, and each report's episodes and request
            return [(type(m).__name__, len(m.episodes), m.request > 0) for m in items if type(m) is P.Report]

        transport.send = lambda items: kinds.append(kind(items)) or send(items)
        for _ in range(5):
            _run_episode(env)
            env.reset()
        assert kinds == [[("Report", 1, True)]] * 5  # one report per episode, asking for the next task
        env.close()
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 5
        # tasks: 1 prefetched + 1 for the first reset, then one per episode end
        assert m["sync/total/tasks_sampled"] == 2 + 5
        assert m["sync/total/tasks_returned"] == 2 and m["sync/total/tasks_in_flight"] == 0


def test_change_task_on_completion_switches_without_reset():
    cur = Recorder()
    inner = LengthTask(Corridor(success_at=1))
    env = GymnasiumSyncWrapper(inner, cur, change_task_on_completion=True)
    _, info = env.reset()
    assert info["task"] == 0
    inner.unwrapped.length = 3  # make this episode longer than the task
    _, _, term, _, info = env.step(0)  # success on step 1: task 0 done, switch to task 1
    assert not term and info["task"] == 0 and info["next_task"] == 1 and info["task_progress"] == 1.0
    assert cur.progress == [(0, 1.0)] and inner.current_task == 1 and inner.switches[-1] == 1
    _, _, term, _, info = env.step(0)  # task 1 set the length to 2: the episode ends on task 1
    assert term and info["task"] == 1 and "next_task" not in info
    assert cur.episodes == [(1, 1.0, 1, 1.0, 0)]  # return and length since the switch
    m = env.feed.core.sync_metrics()
    assert m["sync/total/tasks_consumed"] == 2  # task 0 by its progress update, task 1 by the episode
    env.close()


def test_change_task_off_by_default():
    cur = Recorder()
    inner = LengthTask(Corridor(success_at=1))
    env = GymnasiumSyncWrapper(inner, cur)
    env.reset()
    inner.unwrapped.length = 3
    _, _, _, _, info = env.step(0)
    assert "next_task" not in info and cur.progress == []
    env.close()


class NaNReward(gym.Wrapper):
    def step(self, action):
        obs, _, term, trunc, info = self.env.step(action)
        return obs, float("nan"), term, trunc, info


class BadProgress(gym.Wrapper):
    def step(self, action):
        obs, rew, term, trunc, info = self.env.step(action)
        info["task_progress"] = 2.0
        return obs, rew, term, trunc, info


def test_non_finite_reward_and_bad_progress_raise():
    cur = Recorder()
    env = GymnasiumSyncWrapper(NaNReward(LengthTask(Corridor())), cur)
    env.reset()
    with pytest.raises(ValueError, match="rewards must be finite: the episode on task .* has return nan"):
        for _ in range(100):  # raised when the episode is reported, before the curriculum sees it
            env.step(0)
    assert cur.episodes == []
    env = GymnasiumSyncWrapper(BadProgress(LengthTask(Corridor())), Recorder())
    env.reset()
    with pytest.raises(ValueError, match=r"task_progress must be in \[0, 1\]"):
        env.step(0)


def test_wrapper_argument_validation():
    with pytest.raises(TypeError, match="TaskWrapper"):
        GymnasiumSyncWrapper(Corridor(), Recorder())
    with pytest.raises(TypeError, match="source"):
        GymnasiumSyncWrapper(LengthTask(Corridor()), 3.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="strip_keys"):
        GymnasiumSyncWrapper(LengthTask(Corridor()), Recorder(), strip_keys="abc")
    env = _make(Recorder())
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(0)


def test_sync_vector_env_next_step_autoreset_semantics():
    """Gymnasium 1.x NEXT_STEP autoreset: the step after a terminal step resets onto the *next* task."""
    cur = Recorder()
    envs = gym.vector.SyncVectorEnv([functools.partial(_make, cur) for _ in range(2)])
    _, info = envs.reset(seed=0)
    assert sorted(info["task"].tolist()) == [0, 1]
    seen: dict[int, list] = {0: [info["task"][0]], 1: [info["task"][1]]}
    prev_done = np.zeros(2, bool)
    for _ in range(30):
        obs, _, term, trunc, info = envs.step(np.zeros(2, int))
        for i in range(2):
            # every step's info names the task the step belonged to, and the obs agrees
            assert obs[i][0] == info["task"][i]
            if prev_done[i]:  # this step was the autoreset: a new task
                assert info["task"][i] != seen[i][-1]
                assert info["task_progress"][i] == 0.0
                seen[i].append(info["task"][i])
            else:
                assert info["task"][i] == seen[i][-1]
        prev_done = term | trunc
    envs.close()
    played = [t for i in (0, 1) for t in seen[i]]
    assert len(played) == len(set(played))
    finished = [e[0] for e in cur.episodes]
    assert len(finished) == len(set(finished)) and set(finished) <= set(played)


# -- PettingZoo ---------------------------------------------------------------------------------------------


class Duel(ParallelEnv):
    """Two agents; the episode lasts ``1 + task % 3`` steps; agent ``a`` gets 1 per step, ``b`` gets 2."""

    metadata = {"name": "duel_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]
        self.task_space = Discrete(10**9)
        self.task, self.t = 0, 0
        self.agents = []

    def observation_space(self, agent):
        return spaces.Box(-1e9, 1e9, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def set_task(self, task):
        self.task = task

    def reset(self, seed=None, options=None):
        if options and "task" in options:
            self.task = options["task"]
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: np.array([self.task], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 1 + self.task % 3
        obs = {a: np.array([self.task], np.float32) for a in self.agents}
        rew = {"a": 1.0, "b": 2.0}
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        infos = {a: {"task_progress": float(done)} for a in self.agents}
        if done:
            self.agents = []
        return obs, rew, terms, truncs, infos


def _play_pz(env, episodes):
    for _ in range(episodes):
        obs, infos = env.reset()
        task = infos["a"]["task"]
        assert obs["a"][0] == task and infos["b"]["task_train"] == (task % 2 == 0)
        while env.agents:
            _, _, _, _, infos = env.step({a: 0 for a in env.agents})
            assert infos["a"]["task"] == infos["b"]["task"] == task


def test_pettingzoo_wrapper_in_process_reports_per_agent_returns():
    cur = Recorder(requires_steps=True)
    env = PettingZooSyncWrapper(Duel(), cur)
    _play_pz(env, 4)
    env.close()
    assert [e[0] for e in cur.episodes] == [0, 1, 2, 3]
    assert [e[2] for e in cur.episodes] == [1, 2, 3, 1]
    assert [e[1] for e in cur.episodes] == [3.0, 6.0, 9.0, 3.0]  # summed over agents
    assert cur.extras[1] == {"agent_returns": {"a": 2.0, "b": 4.0}}
    assert sum(len(b) for b in cur.batches) == 7 and cur.batches[0].rewards.tolist() == [3.0]


def test_pettingzoo_wrapper_over_sockets():
    with serve(Recorder()) as server:
        env = PettingZooSyncWrapper(Duel(), server.address)
        _play_pz(env, 5)
        env.close()
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 5 and m["sync/total/tasks_in_flight"] == 0
        assert server.curriculum.extras[0] == {"agent_returns": {"a": 1.0, "b": 2.0}}


def test_same_step_autoreset_reports_the_finished_task_in_final_info():
    cur = Recorder()
    envs = gym.vector.SyncVectorEnv(
        [functools.partial(_make, cur)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    _, info = envs.reset(seed=0)
    assert info["task"][0] == 0
    _, _, term, _, info = envs.step(np.zeros(1, int))  # task 0 lasts one step: reset in the same call
    assert term[0] and info["final_info"]["task"][0] == 0 and info["task"][0] == 1
    assert info["final_info"]["task_progress"][0] == 1.0 and info["task_progress"][0] == 0.0
    envs.close()
    assert [e[0] for e in cur.episodes] == [0]


@given(
    ops=st.lists(st.sampled_from(["reset", "step", "step", "step", "explicit"]), min_size=1, max_size=40),
    prefetch=st.integers(0, 3),
    requires_steps=st.booleans(),
)
def test_random_reset_step_sequences_keep_the_books_balanced(ops, prefetch, requires_steps):
    cur = Recorder(requires_steps=requires_steps)
    env = _make(cur, prefetch=prefetch)
    started = False
    steps = 0
    ended = True
    for op in ops:
        if op == "step" and started and not ended:
            _, _, term, trunc, _ = env.step(0)
            steps += 1
            ended = term or trunc
        elif op in ("reset", "explicit"):
            env.reset(options={"task": 5} if op == "explicit" else None)
            started, ended = True, False
    env.close()
    m = env.feed.core.sync_metrics()
    assert m["sync/total/tasks_in_flight"] == 0
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
    assert m["sync/total/updates_rejected"] == 0
    tracked = [e[0] for e in cur.episodes if e[0] != 5]
    assert len(tracked) == len(set(tracked))  # no task's episode reported twice
    if requires_steps:
        assert m["sync/total/steps_applied"] == steps == sum(len(b) for b in cur.batches)
    else:
        assert m["sync/total/steps_applied"] == 0 and cur.batches == []


class QuickDuel(Duel):
    """Progress reaches 1 after the first step, but the episode lasts three steps."""

    def step(self, actions):
        self.t += 1
        done = self.t >= 3
        obs = {a: np.array([self.task], np.float32) for a in self.agents}
        infos = {a: {"task_progress": 1.0} for a in self.agents}
        terms, truncs = {a: done for a in self.agents}, {a: False for a in self.agents}
        out = obs, {"a": 1.0, "b": 1.0}, terms, truncs, infos
        if done:
            self.agents = []
        return out


def test_pettingzoo_change_task_on_completion():
    cur = Recorder()
    inner = QuickDuel()
    env = PettingZooSyncWrapper(inner, cur, change_task_on_completion=True)
    _, infos = env.reset()
    assert infos["a"]["task"] == 0
    _, _, _, _, infos = env.step({"a": 0, "b": 0})
    assert infos["a"]["task"] == 0 and inner.task == 1  # switched without a reset
    _, _, _, _, infos = env.step({"a": 0, "b": 0})
    assert infos["b"]["task"] == 1 and inner.task == 2
    _, _, terms, _, infos = env.step({"a": 0, "b": 0})  # the episode ends on task 2
    assert all(terms.values()) and infos["a"]["task"] == 2
    env.close()
    assert cur.progress == [(0, 1.0), (1, 1.0)]
    assert cur.episodes == [(2, 2.0, 1, 1.0, 0)] and cur.extras == [{"agent_returns": {"a": 1.0, "b": 1.0}}]


def test_pettingzoo_sync_wrapper_with_the_real_pettingzoo_task_wrapper():
    from magister.curricula.domain_randomization import DomainRandomization
    from magister.examples.tiny_pz import TinyTag, TinyTagTask

    inner = TinyTagTask(TinyTag(max_cycles=10))
    with serve(DomainRandomization(inner.task_space, seed=0)) as server:
        env = PettingZooSyncWrapper(inner, server.address)
        rng = np.random.default_rng(0)
        for _ in range(6):
            _, infos = env.reset(seed=int(rng.integers(100)))
            task = infos["chaser"]["task"]
            size, _density = inner.task_space.decode(task)
            assert inner.unwrapped.grid.shape == (size, size)
            while env.agents:
                _, _, _, _, infos = env.step({a: int(rng.integers(5)) for a in env.agents})
                assert infos["runner"]["task"] == task and "task_train" in infos["chaser"]
        env.close()
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 6 and m["sync/total/episodes_applied"] == 6
        assert m["sync/total/tasks_in_flight"] == 0 and m["curriculum/episodes"] == 6


def test_a_ready_made_feed_is_used_as_is():
    from magister.sync.feed import connect

    cur = Recorder()
    feed = connect(cur, prefetch=2)
    env = _make(feed)
    env.reset()
    assert env.feed is feed
    _run_episode(env)
    env.close()
    assert feed.core.sync_metrics()["sync/total/tasks_returned"] == 1  # the second prefetched task


def test_wrappers_pass_the_update_delay_to_remote_feeds():
    with serve(Recorder()) as server:
        default = _make(server.address)
        default.reset()
        assert default.feed.holds_updates and default.feed.options.max_update_delay == 0.5
        unheld = _make(server.address, max_update_delay=0)
        unheld.reset()
        assert not unheld.feed.holds_updates
        for env in (default, unheld):
            _run_episode(env)
            env.close()
        m = server.metrics()
        assert m["sync/total/episodes_applied"] == 2 and m["sync/total/tasks_in_flight"] == 0


class Scripted(gym.Env):
    """Plays one scripted episode: step ``i`` gives ``rewards[i]`` and ``info["success"] = successes[i]``
    (no key where it is ``None``)."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, rewards, successes) -> None:
        self.rewards, self.successes, self.t = rewards, successes, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        s = self.successes[self.t]
        info = {} if s is None else {"success": s}
        self.t += 1
        return np.zeros(1, np.float32), self.rewards[self.t - 1], False, self.t >= len(self.rewards), info


class PassThrough(gym.Wrapper):
    """A wrapper between the sync wrapper and the task wrapper."""


@given(
    steps=st.lists(
        st.tuples(
            st.floats(-10, 10, allow_nan=False),
            st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0.0, 1.0])),
        ),
        min_size=1,
        max_size=12,
    ),
    direct=st.booleans(),
    stop_early=st.booleans(),
)
def test_step_progress_and_return_match_the_env(steps, direct, stop_early):
    """Whatever mix of reported and absent progress (the default takes the short path), with or without a
    wrapper between the sync wrapper and the task wrapper, every info and the episode update carry the
    values of the steps as the env gave them."""
    rewards = [r for r, _ in steps]
    successes = [s for _, s in steps]
    cur = Recorder()
    inner = Goal(Scripted(rewards, successes))
    env = GymnasiumSyncWrapper(inner if direct else PassThrough(inner), cur)
    env.reset()
    played = len(steps) - 1 if stop_early and len(steps) > 1 else len(steps)
    for i in range(played):
        _, _, _, _, info = env.step(0)
        assert info["task_progress"] == (successes[i] or 0.0)
        assert info["task"] == 0
    if played < len(steps):  # what closing now reports for the unfinished episode
        ep = env._episode
        assert (ep.length, ep.progress) == (played, successes[played - 1] or 0.0)
        assert ep.ret == pytest.approx(sum(rewards[:played]))
        env.close()
        assert cur.episodes == []  # (an unfinished episode is not an episode for the curriculum)
        return
    ((task, ret, length, progress, _),) = cur.episodes
    assert (task, length) == (0, played)
    assert ret == pytest.approx(sum(rewards))
    assert progress == (successes[-1] or 0.0)
    env.close()


class Goal(TaskWrapper):
    def __init__(self, env):
        super().__init__(env, Discrete(10**9))

    def change_task(self, task):
        self.goal = task


def test_non_numeric_reward_raises_naming_it():
    env = GymnasiumSyncWrapper(Goal(Scripted(["lots"], [None])), Recorder())
    env.reset()
    with pytest.raises(TypeError, match="reward must be a real number, got 'lots'"):
        env.step(0)


class BadStep(gym.Env):
    """Steps with what it is given: not a Gymnasium step result."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, result):
        self.result = result

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return self.result


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ((0, 1.0, False, False), r"BadStep.step must return \(obs, reward, terminated, truncated, info\), "
                                 "got a tuple of length 4"),
        ((0, 1.0, False, False, None), "BadStep.step returned an info that is not a dict: None"),
        (None, r"BadStep.step must return .* got None"),
    ],
)
@pytest.mark.parametrize("stack", ["task", "sync"])
def test_a_step_result_that_is_not_gymnasium_s_raises_naming_the_env(result, message, stack):
    """The common step path reads the env's tuple by position: anything else is a TypeError naming the env
    and what it returned, from the task wrapper or the sync wrapper, not an IndexError."""
    env = Goal(BadStep(result))
    if stack == "sync":
        env = GymnasiumSyncWrapper(env, Recorder())
    env.reset()
    with pytest.raises(TypeError, match=message):
        env.step(0)


class SharedResetInfo(Scripted):
    """Returns the same info dict from every reset."""

    shared: dict = {"level": 3}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), self.shared


@pytest.mark.parametrize("fused", [True, False])
def test_reset_info_is_annotated_without_touching_the_envs_dict(fused):
    inner = Goal(SharedResetInfo([1.0, 1.0], [None, None]))
    env = GymnasiumSyncWrapper(inner if fused else PassThrough(inner), Recorder())
    for expected_task in (0, 1):
        _, info = env.reset()
        assert info == {"level": 3, "task": expected_task, "task_train": expected_task % 2 == 0,
                        "task_control": False, "task_progress": 0.0}
        env.step(0)
        env.step(0)
    assert SharedResetInfo.shared == {"level": 3}


def test_closing_after_a_nan_reward_still_closes_the_feed(caplog):
    """An unfinished episode whose return is NaN is not reported (logged), and the feed closes anyway."""
    cur = Recorder()
    env = GymnasiumSyncWrapper(NaNReward(LengthTask(Corridor())), cur)
    env.reset(options={"task": 3})  # a 4-step episode: the first step leaves it unfinished
    env.step(0)
    with caplog.at_level("ERROR"):
        env.close()
    assert "could not report the unfinished episode" in caplog.text
    assert env.feed._closed and cur.episodes == []


class Flagged(Recorder):
    """Samples task 1 as a task filter replays it on a variant (task 3), then a control episode of task 2;
    records the metadata the server hands back with each episode."""

    def sample_tasks(self, k=1):
        samples = [TaskSample(1, True, variant=3), TaskSample(2, False, control=True)]
        out = [samples[(self.next + i) % 2] for i in range(k)]
        self.next += k
        return out

    def on_episode(self, episode):  # the record's control flag and variant
        super().on_episode(episode)
        self.episodes[-1] += (episode.control, episode.variant)


@pytest.mark.parametrize("remote", [False, True])
def test_info_reports_the_task_played_and_updates_the_task_sent(remote):
    """A replay variant is played and reported in ``info["task"]``; the update carries the credited task and
    the server hands the curriculum the assignment's control flag and variant. A control episode reports
    its plain task and the flag. Nothing is ever a tag around a task."""
    cur = Flagged()
    inner = LengthTask(Corridor())
    server = serve(cur) if remote else None
    env = GymnasiumSyncWrapper(inner, server.address if remote else cur)
    try:
        obs, info = env.reset()
        assert (info["task"], info["task_control"], info["task_train"]) == (3, False, True)
        assert inner.switches == [3] and obs[0] == 3  # the env plays the variant: 1 + 3 % 4 = 4 steps
        assert (env.assignment.task, env.assignment.variant, env.assignment.control) == (1, 3, False)
        infos = [env.step(0)[4] for _ in range(4)]
        assert [i["task"] for i in infos] == [3] * 4
        obs, info = env.reset()
        assert (info["task"], info["task_control"], info["task_train"]) == (2, True, False)
        assert obs[0] == 2
        for _ in range(3):
            env.step(0)
        env.reset()  # (the remote feed delivers the episode updates with this reset's request)
    finally:
        env.close()
        if server is not None:
            server.close()
    episodes = [(e[0], e[2], e[5], e[6]) for e in cur.episodes]
    assert episodes == [(1, 4, False, 3), (2, 3, True, None)]


class OptionsSeen(Corridor):
    """A corridor that records the seed and options of every reset and returns a fixed reset info."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []
        self.reset_info = {"level": "A"}

    def reset(self, *, seed=None, options=None):
        self.seen.append((seed, None if options is None else dict(options)))
        obs, _ = super().reset(seed=seed)
        return obs, self.reset_info


@given(
    resets=st.lists(
        st.tuples(
            st.sampled_from(["none", "task", "other", "task+other"]),
            st.one_of(st.none(), st.integers(0, 99)),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_wrapper_in_between_changes_nothing(resets):
    """The task applied, the options and seed the env receives, the infos and the task wrapper's state are
    the same whether the task wrapper sits right below the sync wrapper or under another wrapper: the task
    travels through reset(options={"task": ...}) alone."""
    fused_inner, plain_inner = OptionsSeen(), OptionsSeen()
    fused_tw, plain_tw = LengthTask(fused_inner), LengthTask(plain_inner)
    fused = GymnasiumSyncWrapper(fused_tw, Recorder())
    plain = GymnasiumSyncWrapper(PassThrough(plain_tw), Recorder())
    for kind, seed, steps in resets:
        options = {"none": None, "task": {"task": 7}, "other": {"x": 1}, "task+other": {"task": 7, "x": 1}}
        options = options[kind]
        out = [env.reset(seed=seed, options=options) for env in (fused, plain)]
        (fobs, finfo), (pobs, pinfo) = out
        assert finfo == pinfo and np.array_equal(fobs, pobs)
        assert finfo["level"] == "A" and "task" not in fused_inner.reset_info  # (the env's dict untouched)
        for _ in range(steps):
            fstep, pstep = fused.step(0), plain.step(0)
            assert fstep[4] == pstep[4] and fstep[1:4] == pstep[1:4]
            if fstep[2] or fstep[3]:
                break
    assert fused_inner.seen == plain_inner.seen
    assert fused_tw.switches == plain_tw.switches
    assert fused_tw.current_task == plain_tw.current_task
    assert fused_tw.current_decoded_task == plain_tw.current_decoded_task
    fused.close()
    plain.close()
    assert fused._episode.feed.core.curriculum.episodes == plain._episode.feed.core.curriculum.episodes
