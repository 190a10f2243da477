"""The PettingZoo AEC route: PettingZooAECTaskWrapper and PettingZooAECSyncWrapper."""

from __future__ import annotations

import gymnasium as gym
import pytest
from conformance_envs import LEVELS, ShowAEC, ShowAECTask, make_space

from magister.curricula.base import Curriculum
from magister.env_wrappers import PettingZooAECSyncWrapper, PettingZooAECTaskWrapper


class Cycle(Curriculum):
    """Tasks 0, 1, 2, ...; records every episode update with its extras."""

    def __init__(self) -> None:
        super().__init__(make_space())
        self.next = 0
        self.episodes: list[tuple] = []

    def sample(self, k: int = 1) -> list[int]:
        out = [(self.next + i) % 5 for i in range(k)]
        self.next += k
        return out

    def on_episode(self, episode) -> None:  # the record, extras included
        self.episodes.append(
            (episode.task, episode.episode_return, episode.length, episode.progress, episode.extras or None)
        )


def play(env, moves: int | None = None) -> int:
    """Play the AEC loop until the game ends (or ``moves`` step calls); returns the step calls made."""
    n = 0
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else 0)
        n += 1
        if moves is not None and n >= moves:
            break
    return n


def test_the_task_wrapper_applies_the_reset_option_and_labels_every_info():
    space = make_space()
    env = ShowAECTask(ShowAEC(), space)
    env.reset(seed=0, options={"task": LEVELS[3]})
    assert env.unwrapped.level == LEVELS[3] and env.current_task == 3
    assert all(i["task"] == 3 and i["task_progress"] == 0.0 for i in env.infos.values())
    assert env.last()[4]["task"] == 3
    env.step(0)
    assert env.last()[4]["task"] == 3
    env.reset()  # no option: the task is kept
    assert env.unwrapped.level == LEVELS[3]
    with pytest.raises(ValueError, match="is not a task of"):
        env.reset(options={"task": 7})
    with pytest.raises(TypeError, match="AECEnv"):
        ShowAECTask(gym.make("CartPole-v1"), space)


class Succeeds(ShowAECTask):
    def task_progress(self, agent, info):
        return 2.0 if agent == "p0" else 0.25  # (clipped to 1 with one warning)


def test_progress_is_per_agent_clipped_and_the_episode_reports_the_highest():
    cur = Cycle()
    env = PettingZooAECSyncWrapper(Succeeds(ShowAEC(), make_space()), cur)
    env.reset(seed=1)
    env.step(0)
    assert {a: i["task_progress"] for a, i in env.infos.items()} == {"p0": 1.0, "p1": 1.0}
    play(env)
    ((_, _, _, progress, _),) = cur.episodes
    assert progress == 1.0


def test_the_sync_wrapper_reports_each_game_once_with_the_agents_returns():
    cur = Cycle()
    env = PettingZooAECSyncWrapper(ShowAECTask(ShowAEC(), make_space()), cur)
    lengths = []
    for _ in range(3):
        env.reset(seed=len(lengths))
        played = env.unwrapped.level
        lengths.append((play(env), env.unwrapped.length))
        assert env.infos == {} and played == LEVELS[len(lengths) - 1]
    assert [e[0] for e in cur.episodes] == [0, 1, 2]
    for (_, ret, length, _, extras), (calls, moves) in zip(cur.episodes, lengths):
        assert length == calls == moves + 2  # every move, then each agent's dead step
        assert ret == moves  # one reward per move, to the mover
        assert sum(extras["agent_returns"].values()) == ret and set(extras["agent_returns"]) == {"p0", "p1"}
    env.reset(options={"task": LEVELS[4]})  # an explicit task is played and reported
    assert env.unwrapped.level == LEVELS[4] and env.last()[4]["task"] == 4
    play(env)
    assert cur.episodes[-1][0] == 4
    env.close()


def test_a_game_cut_short_is_not_an_episode_and_bad_use_is_refused():
    cur = Cycle()
    env = PettingZooAECSyncWrapper(ShowAECTask(ShowAEC(), make_space()), cur)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(0)
    env.reset(seed=0)
    play(env, moves=1)
    env.reset()  # abandoned after one move
    assert cur.episodes == []
    env.close()
    with pytest.raises(TypeError, match="task_space"):
        PettingZooAECSyncWrapper(ShowAEC(), cur)
    with pytest.raises(TypeError, match="AECEnv"):
        PettingZooAECSyncWrapper(gym.make("CartPole-v1"), cur)
    assert issubclass(ShowAECTask, PettingZooAECTaskWrapper)
