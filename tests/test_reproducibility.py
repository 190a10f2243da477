"""Reproducibility under asynchrony: each env's task sequence from a curriculum that does not learn.

With a fixed curriculum seed and seeded resets (``envs.reset(seed=s)`` gives sub-env ``i`` the seed
``s + i``), every env draws its tasks from a random stream of its own (the sync layer's per-env streams),
so the sequence each env plays is the same run to run, whatever the order in which the workers' requests
reach the server and however many tasks each keeps ready. A learning curriculum's choices also depend on
the order in which feedback arrives, which asynchrony does not fix (docs/guides/reproducibility.md); its
``state_dict`` resumes exactly (tests/test_plr.py, tests/test_sfl.py ...).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from magister import GymnasiumSyncWrapper, TaskWrapper, serve
from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.manual import Manual
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(180)

SPACE = Discrete(50)


class Level(gym.Env):
    """Deterministic: an episode on level ``k`` lasts ``1 + k % 4`` steps; the observation shows ``k``."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = spaces.Box(0, 100, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.level, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.level], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.level], np.float32), 0.0, self.t >= 1 + self.level % 4, False, {}


class LevelTask(TaskWrapper):
    def change_task(self, task: int) -> None:
        self.env.unwrapped.level = task


def make_env(source: Any) -> GymnasiumSyncWrapper:
    return GymnasiumSyncWrapper(LevelTask(Level(), SPACE), source)


class EnvFn:
    """A picklable env factory (spawned workers rebuild it)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def __call__(self) -> GymnasiumSyncWrapper:
        return make_env(self.source)


def sequences(curriculum_fn, vector: str, n_envs: int = 3, steps: int = 60) -> list[list[int]]:
    """The tasks each env played, in order (read from the infos of its reset steps)."""
    curriculum = curriculum_fn()
    server = serve(curriculum) if vector != "sync-local" else None
    source = curriculum if server is None else server.address
    fns = [EnvFn(source) for _ in range(n_envs)]
    if vector == "async-spawn":
        envs = gym.vector.AsyncVectorEnv(fns, context="spawn")
    else:
        envs = gym.vector.SyncVectorEnv(fns)
    try:
        _, info = envs.reset(seed=100)
        played = [[int(t)] for t in info["task"]]
        was_done = np.zeros(n_envs, bool)
        for _ in range(steps):
            _, _, term, trunc, info = envs.step(np.zeros(n_envs, np.int64))
            for i in np.flatnonzero(was_done):  # (NEXT_STEP autoreset: this step was a reset)
                played[i].append(int(info["task"][i]))
            was_done = term | trunc
    finally:
        envs.close()
        if server is not None:
            server.close()
    return played


@pytest.mark.parametrize("vector", ["sync-local", "sync-ipc", "async-spawn"])
@pytest.mark.parametrize(
    "curriculum_fn",
    [
        lambda: DomainRandomization(SPACE, seed=3),
        lambda: Manual(SPACE, [(0, [0.5] + [0.5 / 49] * 49)], seed=3),
    ],
    ids=["DomainRandomization", "Manual"],
)
def test_each_env_plays_the_same_task_sequence_run_to_run(curriculum_fn, vector):
    first = sequences(curriculum_fn, vector)
    second = sequences(curriculum_fn, vector)
    assert first == second
    assert all(len(s) >= 15 for s in first)
    assert first[0] != first[1]  # (each env its own stream, not one shared sequence)


def test_the_stream_follows_the_seed_and_an_unseeded_env_shares_the_curriculum_s_generator():
    """Sub-env ``i`` reset with ``seed + i`` plays the stream of that seed, whatever else runs beside it."""
    def episode(env: GymnasiumSyncWrapper, seed: int | None = None) -> int:
        _, info = env.reset(seed=seed)
        while not env.step(0)[2]:
            pass
        return int(info["task"])

    def played(seed: int, n_envs: int) -> list[int]:
        cur = DomainRandomization(SPACE, seed=3)
        envs = [make_env(cur) for _ in range(n_envs)]
        for i, env in enumerate(envs[1:], 1):  # the others connect first ...
            episode(env, seed + i)
        tasks = [episode(envs[0], seed)]
        for _ in range(5):  # ... and play between env 0's episodes
            for env in envs[1:]:
                episode(env)
            tasks.append(episode(envs[0]))
        return tasks

    assert played(7, 1) == played(7, 3)  # other envs do not shift env 0's sequence
    assert played(7, 1) != played(8, 1)
    # without a seeded first reset the env draws from the curriculum's own generator, as before
    cur = DomainRandomization(SPACE, seed=3)
    env = make_env(cur)
    tasks = [episode(env) for _ in range(5)]
    assert tasks == [int(t) for t in DomainRandomization(SPACE, seed=3).sample(5)]


def test_a_checkpoint_carries_the_streams_so_a_resumed_run_continues_each_env_s_sequence():
    """``state_dict`` holds every stream's generator: an env of a resumed run continues its sequence."""
    cur = DomainRandomization(SPACE, seed=3)
    env = make_env(cur)
    env.reset(seed=5)
    for _ in range(4):  # a few episodes on stream 5
        while not env.step(0)[2]:
            pass
        env.reset()
    state = cur.state_dict()
    ahead = [s.task for s in cur.sample_tasks_with(cur.stream_rng(5), 6)]
    resumed = DomainRandomization(SPACE, seed=99)  # another seed: the checkpoint decides
    resumed.load_state_dict(state)
    assert [s.task for s in resumed.sample_tasks_with(resumed.stream_rng(5), 6)] == ahead
    assert set(state["streams"]) == {5}
