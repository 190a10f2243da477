"""PettingZooTaskWrapper / PettingZooReinitTaskWrapper and the Tiny Tag example env."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import pettingzoo
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test, parallel_seed_test

from magister.env_wrappers.pettingzoo_wrapper import PettingZooReinitTaskWrapper, PettingZooTaskWrapper
from magister.examples.tiny_pz import TinyTag, TinyTagTask, parse_layout_task
from magister.task_spaces.discrete import Discrete

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*render method without specifying any render mode.*"),
]

LAYOUTS = [(5, 0.0), (7, 0.1), (9, 0.3)]


def layouts(seed: int | None = None) -> Discrete:
    return Discrete(tasks=LAYOUTS, seed=seed)


def play_episode(env, seed: int) -> list[tuple[dict, dict, dict, dict]]:
    """Random play until every agent is done; returns (rews, terms, truncs, infos) per step."""
    rng = np.random.default_rng(seed)
    out = []
    while env.agents:
        actions = {a: int(rng.integers(5)) for a in env.agents}
        _, rews, terms, truncs, infos = env.step(actions)
        out.append((rews, terms, truncs, infos))
    return out


# ---------------------------------------------------------------------------------------------------------
# The PettingZoo API checks
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_observation", [False, True])
def test_tiny_tag_task_passes_parallel_api_and_seed_tests(task_observation):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports problems as warnings too
        env = TinyTagTask(TinyTag(), layouts(), task_observation=task_observation)
        parallel_api_test(env, num_cycles=200)
    parallel_seed_test(lambda: TinyTagTask(TinyTag(), layouts(), task_observation=task_observation))


def test_raw_tiny_tag_passes_parallel_api_and_seed_tests():
    parallel_api_test(TinyTag(7, 0.2), num_cycles=200)
    parallel_seed_test(lambda: TinyTag(7, 0.2))


# ---------------------------------------------------------------------------------------------------------
# The reset / step protocol
# ---------------------------------------------------------------------------------------------------------


def test_reset_switches_task_and_reports_it_per_agent():
    env = TinyTagTask(TinyTag(), layouts())
    for i, (size, density) in enumerate(LAYOUTS):
        obs, infos = env.reset(seed=i, options={"task": (size, density)})
        assert env.unwrapped.grid.shape == (size, size)
        assert env.unwrapped.obstacle_density == density
        assert env.current_task == i and env.current_decoded_task == (size, density)
        assert infos == {a: {"task": i, "task_progress": 0.0} for a in ("chaser", "runner")}
        assert all(o.shape == (77,) for o in obs.values())
    env.reset()  # no task: keeps the last one
    assert env.current_task == 2 and env.unwrapped.grid.shape == (9, 9)


def test_first_reset_without_task_samples_reproducibly_from_the_seed():
    a = TinyTagTask(TinyTag(), layouts())
    b = TinyTagTask(TinyTag(), layouts())
    expected = layouts().sample_encoded(1, rng=np.random.default_rng(11))[0]
    assert a.reset(seed=11)[1]["chaser"]["task"] == expected
    assert b.reset(seed=11)[1]["chaser"]["task"] == expected
    c = TinyTagTask(TinyTag(), layouts(seed=5))
    assert c.reset()[1]["runner"]["task"] == layouts().encode(layouts(seed=5).sample())


@pytest.mark.parametrize("bad", [(4, 0.0), (5, 0.2), "5x5", None, 0])
def test_invalid_task_raises_and_keeps_state(bad):
    env = TinyTagTask(TinyTag(), layouts())
    env.reset(seed=0, options={"task": (7, 0.1)})
    with pytest.raises(ValueError, match=r"task .* is not a task of Discrete"):
        env.reset(options={"task": bad})
    assert env.current_task == 1 and env.unwrapped.size == 7


class OptionsRecorder(TinyTag):
    def reset(self, seed=None, options=None):
        self.last_options = options
        return super().reset(seed=seed, options=options)


def test_options_are_forwarded_without_the_task_and_callers_dict_is_untouched():
    inner = OptionsRecorder()
    env = TinyTagTask(inner, layouts())
    opts = {"task": (9, 0.3), "extra": 1}
    env.reset(options=opts)
    assert opts == {"task": (9, 0.3), "extra": 1}
    assert inner.last_options == {"extra": 1}
    env.reset(options={"task": (5, 0.0)})
    assert inner.last_options is None


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="ParallelEnv"):
        PettingZooTaskWrapper("tiny", layouts())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="TaskSpace"):
        PettingZooTaskWrapper(TinyTag(), LAYOUTS)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="change_task"):
        PettingZooTaskWrapper(TinyTag(), layouts()).reset(options={"task": (5, 0.0)})
    with pytest.raises(TypeError, match="options must be a dict"):
        TinyTagTask(TinyTag(), layouts()).reset(options=[1])  # type: ignore[arg-type]


def test_step_progress_is_each_agents_success():
    env = TinyTagTask(TinyTag(max_cycles=15), layouts())
    outcomes = set()
    for ep in range(30):
        env.reset(seed=ep, options={"task": LAYOUTS[ep % 3]})
        steps = play_episode(env, ep)
        for *_, infos in steps[:-1]:
            assert {a: i["task_progress"] for a, i in infos.items()} == {"chaser": 0.0, "runner": 0.0}
            assert all(i["task"] == ep % 3 for i in infos.values())
        rews, terms, truncs, infos = steps[-1]
        caught = terms["chaser"]
        assert infos["chaser"]["task_progress"] == (1.0 if caught else 0.0)
        assert infos["runner"]["task_progress"] == (0.0 if caught else 1.0)
        assert rews == ({"chaser": 1.0, "runner": -1.0} if caught else {"chaser": 0.0, "runner": 0.0})
        assert caught or (truncs["runner"] and len(steps) == 15)
        outcomes.add(caught)
    assert outcomes == {True, False}  # both endings happen under random play


class SharedInfos(TinyTag):
    """Returns ONE info dict shared by both agents, plus a non-agent "common" key."""

    def step(self, actions):
        obs, rews, terms, truncs, infos = super().step(actions)
        shared: dict[str, Any] = {"x": 1}
        return obs, rews, terms, truncs, {"chaser": shared, "runner": shared, "common": {"n": 2}}


class PerAgentProgress(TinyTagTask):
    """chaser progress = scripted values, runner = 0.5."""

    script: list[Any] = []

    def task_progress(self, agent, obs, rew, term, trunc, info):
        return self.script.pop(0) if agent == "chaser" else 0.5


def test_infos_are_copied_per_agent_and_non_agent_keys_left_alone():
    env = PerAgentProgress(SharedInfos(), layouts())
    env.script = [0.25]
    env.reset(seed=0, options={"task": (5, 0.0)})
    _, _, _, _, infos = env.step({"chaser": 0, "runner": 0})
    assert infos["chaser"] == {"x": 1, "task": 0, "task_progress": 0.25}
    assert infos["runner"] == {"x": 1, "task": 0, "task_progress": 0.5}
    assert infos["common"] == {"n": 2}


def test_progress_clipped_once_logged_and_nan_rejected(caplog):
    env = PerAgentProgress(TinyTag(), layouts())
    env.script = [3.0, -1.0, float("nan")]
    env.reset(seed=0, options={"task": (9, 0.3)})
    with caplog.at_level(logging.WARNING, logger="magister.env_wrappers.pettingzoo_wrapper"):
        assert env.step({"chaser": 0, "runner": 0})[4]["chaser"]["task_progress"] == 1.0
        assert env.step({"chaser": 0, "runner": 0})[4]["chaser"]["task_progress"] == 0.0
    assert sum("outside [0, 1]" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(ValueError, match="NaN"):
        env.step({"chaser": 0, "runner": 0})


def test_task_observation_one_hot_and_stable_spaces():
    env = TinyTagTask(TinyTag(), layouts(), task_observation=True)
    space = env.observation_space("chaser")
    assert space is env.observation_space("chaser")
    assert isinstance(space, spaces.Dict) and space["task"].shape == (3,)
    obs, _ = env.reset(seed=0, options={"task": (7, 0.1)})
    for a in ("chaser", "runner"):
        np.testing.assert_array_equal(obs[a]["task"], [0.0, 1.0, 0.0])
        assert obs[a] in env.observation_space(a)


# ---------------------------------------------------------------------------------------------------------
# Tiny Tag itself
# ---------------------------------------------------------------------------------------------------------


def _placed(size: int, chaser: tuple[int, int], runner: tuple[int, int]) -> TinyTag:
    env = TinyTag(size, 0.0)
    env.reset(seed=0)
    env.pos = np.array([chaser, runner], dtype=np.int64)
    return env


def test_tiny_tag_catch_on_same_cell():
    env = _placed(3, (0, 0), (0, 2))
    _, rews, terms, truncs, infos = env.step({"chaser": 4, "runner": 3})  # right, left -> both at (0, 1)
    assert rews == {"chaser": 1.0, "runner": -1.0}
    assert terms == {"chaser": True, "runner": True} and truncs == {"chaser": False, "runner": False}
    assert infos == {"chaser": {"success": 1.0}, "runner": {"success": 0.0}}
    assert env.agents == []


def test_tiny_tag_catch_on_swap_and_walls_block():
    env = _placed(3, (0, 0), (0, 1))
    _, rews, terms, _, _ = env.step({"chaser": 4, "runner": 3})  # they swap cells
    assert terms["chaser"] and rews["chaser"] == 1.0
    env = _placed(3, (0, 0), (2, 2))
    obs, rews, terms, _, _ = env.step({"chaser": 1, "runner": 2})  # both push into the outer wall
    np.testing.assert_array_equal(env.pos, [[0, 0], [2, 2]])
    assert not terms["chaser"] and rews == {"chaser": 0.0, "runner": 0.0}
    # egocentric view of the chaser at the corner: rows/cols above and left of it are blocked
    view = obs["chaser"][:75].reshape(5, 5, 3)
    assert view[:2, :, 0].all() and view[:, :2, 0].all() and not view[2:, 2:, 0].any()
    assert view[2, 2, 1] == 1.0 and view[4, 4, 2] == 1.0  # itself at the centre, runner at (+2, +2)
    np.testing.assert_allclose(obs["chaser"][75:], [1.0, 1.0])
    np.testing.assert_allclose(obs["runner"][75:], [-1.0, -1.0])


def test_tiny_tag_truncates_at_max_cycles():
    env = TinyTag(9, 0.0, max_cycles=3)
    env.reset(seed=0)
    env.pos = np.array([[0, 0], [8, 8]])
    for _ in range(3):
        _, _, terms, truncs, infos = env.step({"chaser": 0, "runner": 0})
    assert truncs == {"chaser": True, "runner": True} and not terms["chaser"]
    assert infos == {"chaser": {"success": 0.0}, "runner": {"success": 1.0}}
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"chaser": 0, "runner": 0})


def test_tiny_tag_obstacle_density_and_connectivity():
    env = TinyTag(15, 0.2)
    fractions = []
    for i in range(100):
        env.reset(seed=i)
        fractions.append(env.grid.mean())
        assert not env.grid[tuple(env.pos[0])] and not env.grid[tuple(env.pos[1])]
        assert env._connected(env.grid, env.pos[0], env.pos[1])
    # Bernoulli(0.2) per cell over 225 cells: sd 0.027 per layout, 0.0027 for the mean of 100 layouts
    # (redrawing disconnected layouts lowers it slightly).
    assert 0.185 < np.mean(fractions) < 0.21


def test_tiny_tag_bad_actions_and_arguments():
    env = TinyTag()
    env.reset(seed=0)
    for bad in (5, -1, 1.0, True):
        with pytest.raises(ValueError, match="action"):
            env.step({"chaser": bad, "runner": 0})
    with pytest.raises(ValueError, match="max_cycles"):
        TinyTag(max_cycles=0)
    with pytest.raises(ValueError, match="render_mode"):
        TinyTag(render_mode="human")
    with pytest.raises(KeyError, match="unknown agent"):
        env.observation_space("referee")
    ansi = TinyTag(3, 0.0, render_mode="ansi")
    ansi.reset(seed=0)
    text = ansi.render()
    assert text.count("C") == 1 and text.count("R") == 1 and len(text.splitlines()) == 3


@given(st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True, width=32))
def test_parse_layout_task(size, density):
    valid = 3 <= size <= 32 and 0.0 <= density <= 0.5
    if valid:
        assert parse_layout_task((size, density)) == (size, float(density))
        assert parse_layout_task({"size": size, "obstacle_density": density}) == (size, float(density))
    else:
        with pytest.raises(ValueError, match="TinyTag task"):
            parse_layout_task((size, density))


# ---------------------------------------------------------------------------------------------------------
# PettingZooReinitTaskWrapper
# ---------------------------------------------------------------------------------------------------------


class TagFactory:
    def __init__(self) -> None:
        self.built: list[TinyTag] = []

    def __call__(self, task: tuple[int, float]) -> TinyTag:
        env = TinyTag(*task)
        env.closed = False
        env.close = lambda e=env: setattr(e, "closed", True)
        self.built.append(env)
        return env


def test_reinit_caches_and_evicts():
    f = TagFactory()
    env = PettingZooReinitTaskWrapper(f, layouts(), cache_size=2, initial_task=LAYOUTS[0])
    env.reset(seed=0, options={"task": LAYOUTS[1]})
    env.reset(options={"task": LAYOUTS[0]})
    assert len(f.built) == 2 and env.unwrapped is f.built[0]
    env.reset(options={"task": LAYOUTS[2]})  # evicts LAYOUTS[1]
    assert env.cached_tasks == [0, 2]
    assert [e.closed for e in f.built] == [False, True, False]
    assert env.num_built == 3
    env.close()
    assert all(e.closed for e in f.built)


def test_reinit_rejects_inconsistent_envs():
    def factory(task):
        size, _ = task
        return TinyTag() if size == 5 else pettingzoo.make("parallel", "butterfly/cooperative_pong-v6")

    env = PettingZooReinitTaskWrapper(factory, layouts(), initial_task=LAYOUTS[0])
    with pytest.raises(ValueError, match=r"env for task \(7, 0.1\) has possible_agents"):
        env.reset(options={"task": LAYOUTS[1]})
    assert env.current_task == 0
    with pytest.raises(ValueError, match="cache_size"):
        PettingZooReinitTaskWrapper(factory, layouts(), cache_size=0)
    with pytest.raises(TypeError, match="ParallelEnv"):
        PettingZooReinitTaskWrapper(lambda t: "env", layouts())
    with pytest.raises(ValueError, match="initial_task"):
        PettingZooReinitTaskWrapper(factory, layouts(), initial_task=(6, 0.0))


def test_reinit_on_cooperative_pong_ball_speed():
    """A real PettingZoo env whose parameters are fixed at construction: task = ball speed."""
    speeds = Discrete(tasks=[6, 9])

    def make_pong(speed: int):
        return pettingzoo.make("parallel", "butterfly/cooperative_pong-v6", ball_speed=speed, max_cycles=40)

    env = PettingZooReinitTaskWrapper(make_pong, speeds, initial_task=9)
    parallel_api_test(env, num_cycles=50)
    _, infos = env.reset(seed=1, options={"task": 6})
    assert env.unwrapped.env.speed[0] == 6
    assert infos["paddle_0"]["task"] == 0 and infos["paddle_1"]["task_progress"] == 0.0
    _, _, _, _, infos = env.step({a: 0 for a in env.agents})
    assert infos["paddle_0"]["task"] == 0
    env.reset(options={"task": 9})
    assert env.unwrapped.env.speed[0] == 9 and env.num_built == 2
    env.close()


def test_reinit_set_task_mid_episode_waits_for_reset():
    f = TagFactory()
    env = PettingZooReinitTaskWrapper(f, layouts(), cache_size=1, initial_task=LAYOUTS[0])
    env.reset(seed=0)
    env.set_task(LAYOUTS[2])
    assert env.unwrapped is f.built[0] and not f.built[0].closed
    env.step({"chaser": 0, "runner": 0})
    _, infos = env.reset()
    assert env.unwrapped is f.built[1] and env.unwrapped.grid.shape == (9, 9)
    assert f.built[0].closed and infos["chaser"]["task"] == 2
