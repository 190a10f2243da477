"""Exactly-once delivery across real worker processes: Gymnasium AsyncVectorEnv (fork, spawn, forkserver), SB3
SubprocVecEnv and a PettingZoo env in a subprocess.

Every task is unique (the curriculum samples 0, 1, 2, ...), so the tests can check, from the trainer's side
and from the curriculum's records, that each sampled task was played by exactly one env, each finished
episode reached the curriculum exactly once, and each step record arrived exactly once.
"""

from __future__ import annotations

import collections
import functools
import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from magister.curricula.base import Curriculum, TaskSample
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper, PettingZooSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


class Corridor(gym.Env):
    """Task ``t``: ``1 + t % 4`` steps of reward ``1 + t % 3``; the observation is ``(t, step)``."""

    observation_space = spaces.Box(-1e12, 1e12, (2,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.task, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.task, self.t], np.float64), {}

    def step(self, action):
        self.t += 1
        term = self.t >= 1 + self.task % 4
        return (
            np.array([self.task, self.t], np.float64),
            float(1 + self.task % 3),
            term,
            False,
            {"success": float(term)},
        )


class CorridorTask(TaskWrapper):
    def change_task(self, task):
        self.env.unwrapped.task = task


def make_env(address: str) -> gym.Env:
    return GymnasiumSyncWrapper(CorridorTask(Corridor(), Discrete(10**9)), address, timeout=20.0)


class Recorder(Curriculum):
    """Unique tasks; records episodes and per-task step counts; asks for step updates."""

    requires_step_updates = True

    def __init__(self) -> None:
        super().__init__(Discrete(10**9))
        self.next = 0
        self.episodes: list[tuple] = []
        self.steps: collections.Counter = collections.Counter()
        self.step_rewards: collections.Counter = collections.Counter()

    def sample(self, k=1):
        out = list(range(self.next, self.next + k))
        self.next += k
        return out

    def sample_tasks(self, k=1):
        return [TaskSample(t, t % 5 != 0) for t in self.sample(k)]

    def update_on_step_batch(self, batch, env_id=None):
        for t, r in zip(batch.tasks, batch.rewards):
            self.steps[t] += 1
            self.step_rewards[t] += r

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.episodes.append((task, episode_return, length, progress, env_id))


def _check_curriculum_records(cur: Recorder, server, finished: list[int], steps_by_task: dict, num_envs: int):
    m = server.metrics()
    eps = [e[0] for e in cur.episodes]
    # every finished episode reached the curriculum exactly once, with the right return and length
    assert sorted(eps) == sorted(finished) and len(set(eps)) == len(eps)
    for task, ret, length, progress, _env in cur.episodes:
        assert length == 1 + task % 4 and ret == length * (1 + task % 3) and progress == 1.0
    # every step record arrived exactly once (the unfinished last episodes' steps are flushed at close)
    assert dict(cur.steps) == dict(steps_by_task)
    # accounting: nothing lost, nothing duplicated
    assert m["sync/envs"] == num_envs
    assert m["sync/total/tasks_sampled"] == cur.next
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
    assert m["sync/total/tasks_in_flight"] == 0 and m["sync/total/tasks_unsent"] == 0
    assert m["sync/total/updates_rejected"] == 0 and m["sync/total/malformed_frames"] == 0
    assert m["sync/total/updates_received"] == m["sync/total/updates_applied"]
    assert m["sync/total/steps_applied"] == sum(steps_by_task.values())
    # each env consumed exactly the tasks it was sent (minus those it returned)
    for e in range(num_envs):
        assert (
            m[f"sync/env{e}/tasks_sent"]
            == m[f"sync/env{e}/tasks_consumed"] + m[f"sync/env{e}/tasks_returned"]
        )
        assert m[f"sync/env{e}/connected"] == 0  # every env said goodbye
    # each task played by exactly one env
    by_env = collections.defaultdict(set)
    for task, *_rest, env in cur.episodes:
        by_env[env].add(task)
    assert sum(len(s) for s in by_env.values()) == len(eps)


def _run_gymnasium_vector(context: str, num_envs: int, episodes: int) -> None:
    cur = Recorder()
    with serve(cur, step_batch_size=8) as server:
        envs = gym.vector.AsyncVectorEnv(
            [functools.partial(make_env, server.address) for _ in range(num_envs)], context=context
        )
        try:
            obs, info = envs.reset(seed=0)
            current = list(info["task"])
            assert len(set(current)) == num_envs
            played = set(current)
            finished: list[int] = []
            steps_by_task: collections.Counter = collections.Counter()
            prev_done = np.zeros(num_envs, bool)
            actions = np.zeros(num_envs, int)
            while len(finished) < episodes:
                obs, rew, term, trunc, info = envs.step(actions)
                for i in range(num_envs):
                    task = int(info["task"][i])
                    assert obs[i][0] == task  # the obs belongs to the task info names
                    assert info["task_train"][i] == (task % 5 != 0)
                    if prev_done[i]:  # NEXT_STEP autoreset: this step reset the env onto a new task
                        assert task != current[i] and task not in played and rew[i] == 0.0
                        assert info["task_progress"][i] == 0.0 and obs[i][1] == 0
                        current[i] = task
                        played.add(task)
                        continue
                    assert task == current[i]
                    steps_by_task[task] += 1
                    if term[i] or trunc[i]:
                        finished.append(task)
                prev_done = term | trunc
        finally:
            envs.close()
        _check_curriculum_records(cur, server, finished, steps_by_task, num_envs)


def test_async_vector_env_fork_exactly_once():
    _run_gymnasium_vector("fork", num_envs=4, episodes=2000)


def test_async_vector_env_spawn_exactly_once():
    _run_gymnasium_vector("spawn", num_envs=2, episodes=1000)


def test_async_vector_env_forkserver_exactly_once():
    _run_gymnasium_vector("forkserver", num_envs=2, episodes=1000)


def test_sb3_subproc_vec_env_exactly_once():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import SubprocVecEnv

    cur = Recorder()
    num_envs = 3
    with serve(cur, step_batch_size=8) as server:
        venv = SubprocVecEnv(
            [functools.partial(make_env, server.address) for _ in range(num_envs)], start_method="fork"
        )
        try:
            venv.reset()
            current = [int(ri["task"]) for ri in venv.reset_infos]
            finished: list[int] = []
            steps_by_task: collections.Counter = collections.Counter()
            while len(finished) < 1000:
                obs, rew, done, infos = venv.step(np.zeros(num_envs, int))
                for i in range(num_envs):
                    task = int(infos[i]["task"])  # SB3 returns the finished step's info with done=True
                    assert task == current[i]
                    steps_by_task[task] += 1
                    if done[i]:
                        finished.append(task)
                        assert infos[i]["terminal_observation"][0] == task
                        new = int(venv.reset_infos[i]["task"])
                        assert new != task and obs[i][0] == new
                        current[i] = new
        finally:
            venv.close()
        _check_curriculum_records(cur, server, finished, steps_by_task, num_envs)


# -- PettingZoo in a subprocess -------------------------------------------------------------------------


class Duel(ParallelEnv):
    """Two agents; task ``t`` lasts ``1 + t % 3`` steps; agent a earns 1 per step, agent b 2."""

    metadata = {"name": "duel_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]
        self.task_space = Discrete(10**9)
        self.task, self.t = 0, 0
        self.agents = []

    def observation_space(self, agent):
        return spaces.Box(-1e12, 1e12, (1,), np.float64)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        if options and "task" in options:
            self.task = options["task"]
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: np.array([self.task], np.float64) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 1 + self.task % 3
        obs = {a: np.array([self.task], np.float64) for a in self.agents}
        infos = {a: {"task_progress": float(done)} for a in self.agents}
        out = (
            obs,
            {"a": 1.0, "b": 2.0},
            {a: done for a in self.agents},
            {a: False for a in self.agents},
            infos,
        )
        if done:
            self.agents = []
        return out


def _pettingzoo_worker(address: str, episodes: int, queue) -> None:
    env = PettingZooSyncWrapper(Duel(), address, timeout=20.0)
    played = []
    for _ in range(episodes):
        _, infos = env.reset()
        played.append(int(infos["a"]["task"]))
        while env.agents:
            env.step({a: 0 for a in env.agents})
    env.close()
    queue.put(played)


def test_pettingzoo_parallel_env_in_subprocesses_exactly_once():
    cur = Recorder()
    cur.requires_step_updates = False
    ctx = mp.get_context("fork")
    with serve(cur) as server:
        q = ctx.Queue()
        procs = [ctx.Process(target=_pettingzoo_worker, args=(server.address, 300, q)) for _ in range(2)]
        for p in procs:
            p.start()
        played = [q.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        all_played = played[0] + played[1]
        assert len(all_played) == len(set(all_played)) == 600
        assert sorted(e[0] for e in cur.episodes) == sorted(all_played)
        for task, ret, length, _progress, _env in cur.episodes:
            assert length == 1 + task % 3 and ret == 3.0 * length
        m = server.metrics()
        assert m["sync/total/tasks_consumed"] == 600 and m["sync/total/tasks_in_flight"] == 0
        assert (
            m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
        )
