"""ReinitTaskWrapper: one env per task, LRU-cached, spaces checked."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid env ids)
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from hypothesis import given
from hypothesis import strategies as st
from minigrid.wrappers import ImgObsWrapper

from magister.env_wrappers.reinit import ReinitTaskWrapper
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.filterwarnings("ignore:.*different from the unwrapped.*")

EMPTY = ["MiniGrid-Empty-5x5-v0", "MiniGrid-Empty-6x6-v0", "MiniGrid-Empty-8x8-v0"]
MIXED = ["MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"]


class Fixed(gym.Env):
    """An env whose parameter is fixed at construction; obs = [param + noise from its own rng]."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, param: int, obs_dim: int = 1) -> None:
        self.param = param
        self.observation_space = spaces.Box(-100.0, 100.0, shape=(obs_dim,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self.closed = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.full(self.observation_space.shape, self.param + self.np_random.random()), {}

    def step(self, action):
        return np.full(self.observation_space.shape, float(self.param)), 0.0, True, False, {}

    def close(self):
        self.closed = True


class Factory:
    """Counts builds per task and keeps every env it built."""

    def __init__(self, obs_dims: dict[int, int] | None = None) -> None:
        self.calls: list[int] = []
        self.built: list[Fixed] = []
        self.obs_dims = obs_dims or {}

    def __call__(self, task: int) -> Fixed:
        self.calls.append(task)
        env = Fixed(task, self.obs_dims.get(task, 1))
        self.built.append(env)
        return env


def test_same_task_reuses_the_same_env_and_builds_once():
    f = Factory()
    env = ReinitTaskWrapper(f, Discrete(4), initial_task=0)
    first = env.env
    env.reset(options={"task": 2})
    second = env.env
    env.reset(options={"task": 0})
    assert env.env is first
    env.reset(options={"task": 2})
    assert env.env is second
    env.reset()  # no task: stays on 2
    assert env.env is second and env.current_task == 2
    assert f.calls == [0, 2]
    assert env.num_built == 2


def test_lru_eviction_closes_the_least_recently_used_env():
    f = Factory()
    env = ReinitTaskWrapper(f, Discrete(5), cache_size=2, initial_task=0)
    env.reset(options={"task": 1})
    env.reset(options={"task": 0})  # 0 is now more recent than 1
    env.reset(options={"task": 2})  # evicts 1
    assert env.cached_tasks == [0, 2]
    assert [e.closed for e in f.built] == [False, True, False]
    env.reset(options={"task": 1})  # rebuilt, evicts 0
    assert f.calls == [0, 1, 2, 1]
    assert env.cached_tasks == [2, 1]
    assert [e.closed for e in f.built] == [True, True, False, False]


def test_cache_size_none_keeps_everything_and_close_closes_all():
    f = Factory()
    env = ReinitTaskWrapper(f, Discrete(6), cache_size=None, initial_task=0)
    for t in range(1, 6):
        env.reset(options={"task": t})
    assert len(env.cached_tasks) == 6 and not any(e.closed for e in f.built)
    env.close()
    assert all(e.closed for e in f.built)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=30), st.integers(1, 4))
def test_cache_matches_an_lru_model(switches, cache_size):
    f = Factory()
    env = ReinitTaskWrapper(f, Discrete(6), cache_size=cache_size, initial_task=switches[0])
    model: OrderedDict[int, None] = OrderedDict([(switches[0], None)])
    expected_builds = [switches[0]]
    for t in switches[1:]:
        env.reset(options={"task": t})
        if t in model:
            model.move_to_end(t)
        else:
            expected_builds.append(t)
            model[t] = None
            while len(model) > cache_size:
                model.popitem(last=False)
        assert env.env.unwrapped.param == t
    assert env.cached_tasks == list(model)
    assert f.calls == expected_builds
    alive = [e for e in f.built if not e.closed]
    assert sorted(e.param for e in alive) == sorted(model)


def test_inconsistent_spaces_raise_and_keep_the_current_env():
    f = Factory(obs_dims={3: 2})
    env = ReinitTaskWrapper(f, Discrete(4), initial_task=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"env for task 3 has observation space Box.*\(2,\).*first env has"):
        env.reset(options={"task": 3})
    assert f.built[-1].closed  # the rejected env was closed
    assert env.current_task == 0 and env.env is f.built[0]
    assert env.cached_tasks == [0]


def test_bad_arguments():
    with pytest.raises(TypeError, match="env_fn must be callable"):
        ReinitTaskWrapper("CartPole-v1", Discrete(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="TaskSpace"):
        ReinitTaskWrapper(Factory(), [0, 1])  # type: ignore[arg-type]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="cache_size"):
            ReinitTaskWrapper(Factory(), Discrete(2), cache_size=bad)
    with pytest.raises(ValueError, match="initial_task 7 is not a task of Discrete"):
        ReinitTaskWrapper(Factory(), Discrete(2), initial_task=7)
    with pytest.raises(TypeError, match=r"env_fn\(0\) returned str"):
        ReinitTaskWrapper(lambda t: "not an env", Discrete(2), initial_task=0)
    env = ReinitTaskWrapper(Factory(), Discrete(2), initial_task=0)
    with pytest.raises(ValueError, match="is not a task of"):
        env.reset(options={"task": 2})


def test_initial_task_is_sampled_from_the_space_when_omitted():
    f = Factory()
    expected = Discrete(10, seed=3).sample()
    env = ReinitTaskWrapper(f, Discrete(10, seed=3))
    assert f.calls == [expected]
    _, info = env.reset()
    assert info["task"] == expected and f.calls == [expected]  # the first reset keeps the initial task


def test_seeded_sequences_with_new_envs_are_reproducible():
    def run() -> list[float]:
        env = ReinitTaskWrapper(Factory(), Discrete(4), cache_size=2, initial_task=0)
        out = [env.reset(seed=42)[0][0]]
        for t in (1, 2, 0, 3, 1):
            out.append(env.reset(options={"task": t})[0][0])
        return out

    a, b = run(), run()
    assert a == b
    assert [int(x) for x in a] == [0, 1, 2, 0, 3, 1]


def test_spec_is_none_because_the_env_changes():
    env = ReinitTaskWrapper(lambda t: gym.make(t), Discrete(tasks=EMPTY), initial_task=EMPTY[0])
    assert env.spec is None
    env.close()


# ---------------------------------------------------------------------------------------------------------
# MiniGrid: a Discrete space of env ids
# ---------------------------------------------------------------------------------------------------------


def test_minigrid_same_class_env_ids_work_raw_and_pass_check_env():
    space = Discrete(tasks=EMPTY)
    env = ReinitTaskWrapper(gym.make, space, initial_task=EMPTY[0])
    check_env(env, skip_render_check=True)
    for i, env_id in enumerate(EMPTY):
        obs, info = env.reset(seed=i, options={"task": env_id})
        assert info["task"] == i and env.env.spec.id == env_id
        assert obs in env.observation_space
        assert env.unwrapped.width == int(env_id.split("-")[2].split("x")[0])
    env.close()


def test_minigrid_different_classes_need_the_mission_dropped():
    raw = ReinitTaskWrapper(gym.make, Discrete(tasks=MIXED), initial_task=MIXED[0])
    with pytest.raises(ValueError, match="MiniGrid-DoorKey-5x5-v0.*observation space"):
        raw.reset(options={"task": MIXED[1]})
    raw.close()

    env = _make_minigrid_img_env()
    check_env(env, skip_render_check=True)
    names = []
    for t in MIXED:
        obs, info = env.reset(seed=0, options={"task": t})
        assert obs.shape == (7, 7, 3) and obs in env.observation_space
        names.append(type(env.unwrapped).__name__)
        obs, rew, term, trunc, info = env.step(env.action_space.sample())
        assert info["task"] == MIXED.index(t) and info["task_progress"] == 0.0
    assert names == ["EmptyEnv", "DoorKeyEnv", "LavaGapEnv"]
    env.close()


def _make_minigrid_img_env():
    return ReinitTaskWrapper(
        lambda t: ImgObsWrapper(gym.make(t)), Discrete(tasks=MIXED), initial_task=MIXED[0]
    )


@pytest.mark.parametrize("vec_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_minigrid_task_switch_through_vector_envs(vec_cls):
    envs = vec_cls([_make_minigrid_img_env, _make_minigrid_img_env])
    try:
        obs, info = envs.reset(seed=0, options={"task": MIXED[1]})
        assert obs.shape == (2, 7, 7, 3)
        np.testing.assert_array_equal(info["task"], [1, 1])
        obs, info = envs.reset(options={"task": MIXED[2], "reset_mask": np.array([True, False])})
        np.testing.assert_array_equal(info["task"][0], 2)
        names = [type(e).__name__ for e in envs.get_attr("unwrapped")]
        assert names == ["LavaGapEnv", "DoorKeyEnv"]
    finally:
        envs.close()


def test_task_observation_one_hot_through_reinit():
    env = ReinitTaskWrapper(Factory(), Discrete(3), initial_task=0, task_observation=True)
    assert env.observation_space["task"].shape == (3,)
    obs, _ = env.reset(seed=0, options={"task": 2})
    np.testing.assert_array_equal(obs["task"], [0.0, 0.0, 1.0])
    assert int(obs["obs"][0]) == 2 and obs in env.observation_space


def test_set_task_mid_episode_swaps_only_at_the_next_reset():
    f = Factory()
    env = ReinitTaskWrapper(f, Discrete(3), cache_size=1, initial_task=0)
    env.reset(seed=0)
    env.set_task(1)  # e.g. a sync wrapper switching tasks when the current one is completed
    assert f.calls == [0, 1]  # built at once ...
    assert env.env is f.built[0] and not f.built[0].closed  # ... but the running env is kept
    obs, *_ = env.step(0)
    assert obs[0] == 0.0  # still the task-0 env stepping
    obs, info = env.reset()
    assert env.env is f.built[1] and int(obs[0]) == 1 and info["task"] == 1
    assert f.built[0].closed and env.cached_tasks == [1]  # evicted only now


class Shows(gym.Env):
    """Built for one task; every observation shows that task, and episodes last 1-3 steps."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, task: int) -> None:
        self.task = task
        self.observation_space = spaces.Box(-1.0, 100.0, shape=(1,), dtype=np.float64)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.length = 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(1, 4))
        return np.array([float(self.task)]), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.task)]), 1.0, self.t >= self.length, False, {}


@pytest.mark.parametrize("autoreset", ["NEXT_STEP", "SAME_STEP"])
def test_under_the_sync_wrapper_every_step_is_labelled_with_the_task_it_ran(autoreset):
    """The sync wrapper hands the task down through reset(options=...) only, so a ReinitTaskWrapper that
    swaps its env on that reset is stepped on the new env and every info names the task the env ran (a
    step path cached before the swap labelled ~40% of steps with another task)."""
    from magister.curricula.domain_randomization import DomainRandomization
    from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper

    space = Discrete(5)
    curriculum = DomainRandomization(space, seed=0)
    mode = getattr(gym.vector.AutoresetMode, autoreset)
    envs = gym.vector.SyncVectorEnv(
        [lambda: GymnasiumSyncWrapper(ReinitTaskWrapper(Shows, space, initial_task=0), curriculum)] * 2,
        autoreset_mode=mode,
    )
    obs, info = envs.reset(seed=0)
    assert list(info["task"]) == [int(o) for o in obs[:, 0]]
    checked = switched = 0
    for _ in range(200):
        obs, _, term, trunc, info = envs.step(envs.action_space.sample())
        assert list(info["task"]) == [int(o) for o in obs[:, 0]], "a step labelled with another task"
        if autoreset == "SAME_STEP" and (term | trunc).any():
            final = info["final_info"]
            for i in np.flatnonzero(term | trunc):
                assert final["task"][i] == int(info["final_obs"][i][0])
                switched += 1
        checked += 2
    envs.close()
    assert checked == 400 and (switched > 20 or autoreset == "NEXT_STEP")
