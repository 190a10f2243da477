"""What ``info["task"]`` holds around an episode's end under Gymnasium's two vector autoreset modes.

The Gymnasium guide (docs/guides/gymnasium.md) states it: ``info["task"]`` is the task of the episode that
the *returned observation* belongs to. Under ``NEXT_STEP`` (Gymnasium's default) the ending step still names
the finished episode's task and the following autoreset step (no action played, reward 0) names the new one.
Under ``SAME_STEP`` the ending step returns the new episode's first observation with the reset's info, so
``info["task"]`` is already the next task, and the finished episode's task is ``info["final_info"]["task"]``
where ``info["_final_info"]`` is true.

The env here writes the task it actually plays into its observation (``obs[0]``), so each assertion compares
the label with the ground truth rather than with another label.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from magister import GymnasiumSyncWrapper
from magister.curricula.base import Curriculum
from magister.env_wrappers import TaskWrapper
from magister.task_spaces import Discrete

N_TASKS = 10_000


class Countdown(gym.Env):
    """Observation ``[task, t]``; task ``g``'s episode lasts ``2 + g % 3`` steps (so envs desynchronise)."""

    observation_space = gym.spaces.Box(0.0, float(N_TASKS), shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.goal = 0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.goal, 0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.goal, self.t], dtype=np.float32)
        return obs, 1.0, self.t >= 2 + self.goal % 3, False, {}


class GoalTask(TaskWrapper):
    def change_task(self, task):
        self.env.unwrapped.goal = task


class Counter(Curriculum):
    """Tasks 0, 1, 2, ...: every sample is a task never given before."""

    def sample(self, k=1):
        self.num_sampled += k
        return list(range(self.num_sampled - k, self.num_sampled))


def _envs(mode: gym.vector.AutoresetMode, n: int = 3) -> tuple[gym.vector.SyncVectorEnv, Counter]:
    space = Discrete(N_TASKS)
    curriculum = Counter(space)
    envs = gym.vector.SyncVectorEnv(
        [lambda: GymnasiumSyncWrapper(GoalTask(Countdown(), space), curriculum)] * n, autoreset_mode=mode
    )
    return envs, curriculum


def _played(obs: np.ndarray) -> np.ndarray:
    return obs[:, 0].astype(np.int64)


def test_next_step_the_ending_step_names_the_finished_task_and_the_autoreset_step_the_next():
    envs, _ = _envs(gym.vector.AutoresetMode.NEXT_STEP)
    obs, info = envs.reset(seed=0)
    assert (info["task"] == _played(obs)).all()
    ended = np.zeros(3, dtype=bool)
    seen_end = seen_autoreset = 0
    for _ in range(40):
        prev_task = info["task"].copy()
        obs, rew, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
        assert "final_info" not in info  # NEXT_STEP never reports one
        assert (info["task"] == _played(obs)).all()  # the task of the returned observation's episode
        # the autoreset step (after an end): no action played, reward 0, a new task
        assert (rew[ended] == 0.0).all() and (info["task"][ended] != prev_task[ended]).all()
        # any other step, the ending one included, keeps the task the previous observation was labelled with
        assert (info["task"][~ended] == prev_task[~ended]).all()
        seen_end += int((term | trunc).sum())
        seen_autoreset += int(ended.sum())
        ended = term | trunc
    envs.close()
    assert seen_end >= 10 and seen_autoreset >= 9


def test_same_step_the_ending_step_names_the_next_task_and_final_info_the_finished_one():
    envs, _ = _envs(gym.vector.AutoresetMode.SAME_STEP)
    obs, info = envs.reset(seed=0)
    seen_end = 0
    for _ in range(40):
        prev_task = info["task"].copy()
        obs, rew, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
        done = term | trunc
        assert (info["task"] == _played(obs)).all()  # the new episode's first observation, its task
        assert (rew == 1.0).all()  # every step plays an action
        assert (info["task"][~done] == prev_task[~done]).all()
        if not done.any():
            assert "final_info" not in info
            continue
        seen_end += int(done.sum())
        final = info["final_info"]
        assert (info["_final_info"] == done).all() and (final["_task"] == done).all()
        # at the ending step info["task"] is already the NEXT task; the finished one is in final_info
        assert (info["task"][done] != prev_task[done]).all()
        assert (final["task"][done] == prev_task[done]).all()
        assert (final["task"][done] == _played(np.stack(info["final_obs"][done]))).all()
        assert final["task_train"][done].all()
        assert (final["task_progress"][done] == 0.0).all()  # the bare TaskWrapper reports no progress
    envs.close()
    assert seen_end >= 10


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_the_curriculum_hears_of_each_finished_episode_under_the_task_the_readme_names(mode):
    # Whatever the mode, the finished episodes the curriculum is told about are the ones the guide's rule
    # recovers from info: NEXT_STEP, info["task"] at the ending step; SAME_STEP, final_info["task"] there.
    envs, curriculum = _envs(mode)
    reported: list[tuple[int, int]] = []
    curriculum.update_on_episode = lambda ret, length, task, progress, env_id=None: reported.append(
        (int(task), int(length)))
    obs, info = envs.reset(seed=0)
    from_info: list[tuple[int, int]] = []
    for _ in range(30):
        obs, rew, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
        done = term | trunc
        tasks = info["final_info"]["task"] if mode == gym.vector.AutoresetMode.SAME_STEP and done.any() \
            else info["task"]
        from_info += [(int(tasks[i]), 2 + int(tasks[i]) % 3) for i in np.flatnonzero(done)]
    envs.close()
    assert len(from_info) >= 10
    assert sorted(reported) == sorted(from_info)
