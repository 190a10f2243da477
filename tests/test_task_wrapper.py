"""TaskWrapper (Gymnasium) and the CartPole example task wrapper."""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from hypothesis import given
from hypothesis import strategies as st

from magister.env_wrappers.task_wrapper import TaskWrapper, check_progress
from magister.examples.cartpole import MAX_HALF_WIDTH, CartPoleTask, half_width_of
from magister.task_spaces.base import TaskSpace
from magister.task_spaces.box import Box
from magister.task_spaces.discrete import Discrete

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*different from the unwrapped.*"),
    pytest.mark.filterwarnings("ignore:.*Box observation space.*infinity.*"),
]

# ---------------------------------------------------------------------------------------------------------
# Small spaces and envs used by the tests
# ---------------------------------------------------------------------------------------------------------


def make_box(low: float = 0.0, high: float = 0.2, seed: int | None = None) -> TaskSpace:
    """The real Box task space: decoded = ndarray of shape (1,), encoded = tuple of floats."""
    return Box(low=low, high=high, shape=(1,), seed=seed)


class Recorder(gym.Env):
    """Records what reset receives; info["success"] is scripted per step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, successes: list[Any] | None = None) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.successes = list(successes or [])
        self.reset_calls: list[tuple[int | None, dict | None]] = []
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.reset_calls.append((seed, None if options is None else dict(options)))
        self.t = 0
        return self.np_random.uniform(-1, 1, size=2).astype(np.float32), {"inner": True}

    def step(self, action):
        info: dict[str, Any] = {}
        if self.t < len(self.successes):
            info["success"] = self.successes[self.t]
        self.t += 1
        return np.zeros(2, dtype=np.float32), 1.0, self.t >= 5, False, info


class Goal(TaskWrapper):
    """Records every task change."""

    def __init__(self, env: gym.Env, task_space: TaskSpace, **kw: Any) -> None:
        super().__init__(env, task_space, **kw)
        self.changes: list[Any] = []

    def change_task(self, task: Any) -> None:
        self.changes.append(task)


# ---------------------------------------------------------------------------------------------------------
# The reset / step protocol
# ---------------------------------------------------------------------------------------------------------


def test_reset_with_task_applies_it_and_reports_it():
    env = Goal(Recorder(), Discrete(4))
    obs, info = env.reset(seed=3, options={"task": 2})
    assert env.changes == [2]
    assert env.current_task == 2 and env.current_decoded_task == 2
    assert info == {"inner": True, "task": 2, "task_progress": 0.0}
    assert env.env.reset_calls == [(3, None)]  # nothing else left for the inner env: options=None


def test_reset_without_task_keeps_the_current_one():
    env = Goal(Recorder(), Discrete(4))
    env.reset(options={"task": 1})
    _, info = env.reset()
    _, info2 = env.reset(options={})
    assert env.changes == [1]
    assert info["task"] == 1 and info2["task"] == 1


def test_first_reset_without_task_samples_from_the_space():
    space = Discrete(5, seed=0)
    expected = Discrete(5, seed=0).sample()
    env = Goal(Recorder(), space)
    assert env.current_task is None and env.current_decoded_task is None
    _, info = env.reset()
    assert env.changes == [expected]
    assert info["task"] == expected


def test_remaining_options_are_forwarded_and_callers_dict_untouched():
    env = Goal(Recorder(), Discrete(4))
    opts = {"task": 3, "foo": 1}
    env.reset(options=opts)
    assert opts == {"task": 3, "foo": 1}
    env.reset(options={"foo": 2})
    assert env.env.reset_calls == [(None, {"foo": 1}), (None, {"foo": 2})]
    assert env.changes == [3]


@pytest.mark.parametrize("bad", [4, -1, "2", 1.5, True, None])
def test_invalid_task_raises_value_error_and_keeps_state(bad):
    env = Goal(Recorder(), Discrete(4))
    env.reset(options={"task": 0})
    with pytest.raises(ValueError, match=r"task .* is not a task of Discrete"):
        env.reset(options={"task": bad})
    assert env.current_task == 0 and env.changes == [0]
    assert len(env.env.reset_calls) == 1  # the inner env was not reset


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="TaskSpace"):
        Goal(Recorder(), [0, 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gymnasium.Env"):
        Goal("CartPole-v1", Discrete(2))  # type: ignore[arg-type]
    env = Goal(Recorder(), Discrete(2))
    with pytest.raises(TypeError, match="options must be a dict"):
        env.reset(options=[("task", 1)])  # type: ignore[arg-type]


def test_change_task_must_be_implemented():
    env = TaskWrapper(Recorder(), Discrete(2))
    with pytest.raises(NotImplementedError, match="change_task"):
        env.reset(options={"task": 0})


def test_step_reports_task_and_default_progress():
    env = Goal(Recorder(successes=[0.0, 0.5, True, 1]), Discrete(3))
    env.reset(options={"task": 2})
    got = []
    for _ in range(5):
        _, _, _, _, info = env.step(0)
        assert info["task"] == 2
        got.append(info["task_progress"])
    assert got == [0.0, 0.5, 1.0, 1.0, 0.0]  # no "success" key on the 5th step -> 0.0


class ReusedInfo(Recorder):
    """Returns one and the same info dict on every step (and counts what it held when returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.info: dict[str, Any] = {"success": 0.5}
        self.keys_when_returned: list[set] = []

    def step(self, action):
        obs, rew, term, trunc, _ = super().step(action)
        self.keys_when_returned.append(set(self.info))
        return obs, rew, term, trunc, self.info


def test_step_info_is_annotated_in_place_unless_the_env_reuses_its_dict():
    class Fresh(Recorder):
        def step(self, action):
            out = super().step(action)
            self.last_info = out[4]
            return out

    inner = Fresh()
    env = Goal(inner, Discrete(3))
    env.reset(options={"task": 1})
    for _ in range(2):
        _, _, _, _, info = env.step(0)
        assert info is inner.last_info and info["task"] == 1  # a fresh dict per step: annotated, no copy

    reusing = ReusedInfo()
    env = Goal(reusing, Discrete(3))
    env.reset(options={"task": 2})
    infos = [env.step(0)[4] for _ in range(3)]
    assert infos[0] is reusing.info  # the first step cannot know yet
    assert infos[1] is not reusing.info and infos[2] is not reusing.info and infos[1] is not infos[2]
    assert all(i["task"] == 2 and i["task_progress"] == 0.5 for i in infos)
    # from the second step on, what the env keeps is no longer annotated
    annotated = {"success", "task", "task_progress"}
    assert reusing.keys_when_returned[2] == reusing.keys_when_returned[1] == annotated
    reusing.info.pop("task")
    env.step(0)
    assert "task" not in reusing.info


def test_progress_is_clipped_and_logged_once(caplog):
    env = Goal(Recorder(successes=[1.7, -3.0]), Discrete(3))
    env.reset(options={"task": 0})
    with caplog.at_level(logging.WARNING, logger="magister.env_wrappers.task_wrapper"):
        assert env.step(0)[4]["task_progress"] == 1.0
        assert env.step(0)[4]["task_progress"] == 0.0
    assert sum("outside [0, 1]" in r.getMessage() for r in caplog.records) == 1


def test_nan_progress_raises():
    env = Goal(Recorder(successes=[float("nan")]), Discrete(3))
    env.reset(options={"task": 0})
    with pytest.raises(ValueError, match="NaN"):
        env.step(0)


def test_non_numeric_progress_raises():
    env = Goal(Recorder(successes=["yes"]), Discrete(3))
    env.reset(options={"task": 0})
    with pytest.raises(TypeError, match="number in"):
        env.step(0)


@given(st.floats(allow_nan=False, allow_infinity=True))
def test_check_progress_is_clip(v):
    assert check_progress(v) == min(1.0, max(0.0, v))


# ---------------------------------------------------------------------------------------------------------
# Task observations and check_env
# ---------------------------------------------------------------------------------------------------------


def test_one_hot_task_observation_for_indexed_spaces():
    env = Goal(Recorder(), Discrete(3), task_observation=True)
    assert isinstance(env.observation_space, spaces.Dict)
    assert env.observation_space["task"] == spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
    obs, _ = env.reset(options={"task": 1})
    np.testing.assert_array_equal(obs["task"], [0.0, 1.0, 0.0])
    assert obs["obs"].shape == (2,)
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs["task"], [0.0, 1.0, 0.0])
    assert obs in env.observation_space


def test_task_observation_requires_a_declared_space_for_non_indexed_spaces():
    class Names(TaskSpace):
        num_tasks = None

        def sample(self):
            return "a"

        def contains(self, t):
            return isinstance(t, str)

        def encode(self, t):
            return t

        def decode(self, e):
            return e

    env = Goal(Recorder(), Names(), task_observation=True)
    with pytest.raises(NotImplementedError, match="task_observation_space"):
        _ = env.observation_space


def test_check_env_on_generic_wrapper():
    check_env(Goal(Recorder(), Discrete(3)), skip_render_check=True)
    check_env(Goal(Recorder(), Discrete(3), task_observation=True), skip_render_check=True)


# ---------------------------------------------------------------------------------------------------------
# CartPole example
# ---------------------------------------------------------------------------------------------------------


def test_cartpole_check_env():
    check_env(CartPoleTask(gym.make("CartPole-v1").unwrapped, make_box()), skip_render_check=True)
    env = CartPoleTask(gym.make("CartPole-v1"), make_box(), task_observation=True)
    check_env(env, skip_render_check=True)


def test_cartpole_default_construction():
    env = CartPoleTask()
    obs, info = env.reset(seed=0)
    assert env.task_space.contains(env.current_decoded_task)
    h = half_width_of(env.current_decoded_task)
    assert np.all(np.abs(obs) <= h + 1e-7)
    assert env.max_episode_steps == 500


def test_cartpole_initial_state_is_uniform_on_the_task_range():
    env = CartPoleTask(gym.make("CartPole-v1"), make_box())
    h = 0.15
    states = np.array([env.reset(seed=i, options={"task": np.array([h])})[0] for i in range(400)])
    assert states.shape == (400, 4)
    assert np.all(np.abs(states) <= h + 1e-7)
    # U(-h, h): mean 0 (sd of the mean h/sqrt(3*400) ~ 0.0043), E|x| = h/2, var = h^2/3,
    # and the samples reach close to both ends.
    assert np.all(np.abs(states.mean(axis=0)) < 0.02)
    np.testing.assert_allclose(np.abs(states).mean(axis=0), h / 2, atol=0.012)
    np.testing.assert_allclose(states.var(axis=0), h**2 / 3, rtol=0.15)
    assert np.all(np.abs(states).max(axis=0) > 0.95 * h)
    # a narrow task really narrows the range
    narrow = np.array([env.reset(options={"task": np.array([0.01])})[0] for _ in range(50)])
    assert np.all(np.abs(narrow) <= 0.01 + 1e-7)


@given(st.floats(min_value=0.0, max_value=0.2))
def test_cartpole_any_task_in_the_space_starts_inside_its_range(h):
    env = CartPoleTask(gym.make("CartPole-v1").unwrapped, make_box())
    obs, info = env.reset(seed=0, options={"task": np.array([h])})
    assert np.all(np.abs(obs) <= h + 1e-6)
    assert info["task"] == env.task_space.encode(np.array([h]))


def test_cartpole_seeded_reset_is_reproducible():
    env = CartPoleTask(gym.make("CartPole-v1"), make_box())
    a, _ = env.reset(seed=7, options={"task": np.array([0.2])})
    b, _ = env.reset(seed=7)
    np.testing.assert_array_equal(a, b)


BAD_BOX_TASKS = [np.array([0.3]), np.array([-0.01]), np.array([np.nan]), np.array([0.1, 0.1])]


@pytest.mark.parametrize("bad", BAD_BOX_TASKS)
def test_cartpole_invalid_task_raises(bad):
    env = CartPoleTask(gym.make("CartPole-v1"), make_box())
    with pytest.raises(ValueError, match="task"):
        env.reset(options={"task": bad})


@pytest.mark.parametrize("bad", [0.25, -0.1, float("inf"), [0.1, 0.2]])
def test_half_width_validation(bad):
    with pytest.raises(ValueError, match="CartPole task"):
        half_width_of(bad)
    assert half_width_of(np.array([MAX_HALF_WIDTH * 0.99])) == pytest.approx(MAX_HALF_WIDTH * 0.99)


def test_cartpole_rejects_conflicting_low_high_options():
    env = CartPoleTask(gym.make("CartPole-v1"), make_box())
    with pytest.raises(ValueError, match="conflict"):
        env.reset(options={"task": np.array([0.1]), "low": -0.5})


def test_cartpole_rejects_other_envs():
    with pytest.raises(TypeError, match="CartPoleEnv"):
        CartPoleTask(gym.make("MountainCar-v0"), make_box())


def test_cartpole_progress_is_fraction_of_step_limit():
    env = CartPoleTask(gym.make("CartPole-v1"), make_box(), max_episode_steps=10)
    env.reset(seed=0, options={"task": np.array([0.0])})
    progress = []
    for _ in range(10):
        _, _, term, trunc, info = env.step(len(progress) % 2)
        progress.append(info["task_progress"])
        if term:
            break
    # h = 0 starts exactly upright; alternating pushes keep it up for 10 steps
    np.testing.assert_allclose(progress, np.arange(1, 11) / 10)


def test_cartpole_task_observation():
    env = CartPoleTask(gym.make("CartPole-v1"), make_box(), task_observation=True)
    obs, info = env.reset(seed=0, options={"task": np.array([0.125])})
    np.testing.assert_allclose(obs["task"], [0.125])
    assert env.observation_space["task"].high[0] == pytest.approx(0.2)
    assert obs in env.observation_space


# ---------------------------------------------------------------------------------------------------------
# Vector envs: the task travels through reset(options=...)
# ---------------------------------------------------------------------------------------------------------


def _make_cartpole():
    return CartPoleTask(gym.make("CartPole-v1"), make_box())


@pytest.mark.parametrize("vec_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_env_switches_tasks_through_reset_options(vec_cls):
    envs = vec_cls([_make_cartpole, _make_cartpole])
    try:
        obs, info = envs.reset(seed=0, options={"task": np.array([0.01])})
        assert np.all(np.abs(obs) <= 0.01 + 1e-7)
        key = make_box().encode(np.array([0.01]))
        assert [tuple(t) for t in info["task"]] == [key, key]
        np.testing.assert_array_equal(info["task_progress"], [0.0, 0.0])

        # switch only env 1 with reset_mask
        obs, info = envs.reset(options={"task": np.array([0.2]), "reset_mask": np.array([False, True])})
        key2 = make_box().encode(np.array([0.2]))
        assert tuple(info["task"][1]) == key2
        assert np.all(np.abs(obs[1]) <= 0.2 + 1e-7) and np.any(np.abs(obs[1]) > 0.01)

        # autoreset keeps each env's task: run a random policy past several episode ends
        envs.action_space.seed(0)
        seen_resets = 0
        for _ in range(200):
            obs, _, term, trunc, info = envs.step(envs.action_space.sample())
            assert tuple(info["task"][0]) == key and tuple(info["task"][1]) == key2
            seen_resets += int(np.sum(info["task_progress"] == 0.0))
        assert seen_resets >= 2  # autoreset steps report progress 0.0 from reset
    finally:
        envs.close()


def test_cartpole_demo_shows_difficulty_rising_with_the_range():
    from magister.examples.cartpole import evaluate, main

    result = evaluate([0.0, 0.05, 0.2], episodes=10)
    assert result[0.0] == 1.0 and result[0.05] == 1.0  # balanced for all 500 steps
    assert result[0.2] < 0.9
    assert set(main(["--episodes", "2"])) == {0.0, 0.05, 0.1, 0.15, 0.2}
    with pytest.raises(ValueError, match="episodes"):
        evaluate([0.1], episodes=0)


def test_first_seeded_reset_without_task_is_reproducible_and_leaves_the_space_alone():
    space = Discrete(50, seed=1)
    state = space.rng.bit_generator.state
    a, b = Goal(Recorder(), space), Goal(Recorder(), space)
    expected = Discrete(50).sample_encoded(1, rng=np.random.default_rng(9))[0]
    assert a.reset(seed=9)[1]["task"] == expected
    assert b.reset(seed=9)[1]["task"] == expected
    assert space.rng.bit_generator.state == state
