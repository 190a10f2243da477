"""Envs, wrapper stacks and a counting curriculum for ``test_conformance.py``.

They live in an importable module (``tests/`` is on ``sys.path`` under pytest) so that spawned and
forkserver workers (Gymnasium ``AsyncVectorEnv``, Stable-Baselines3 ``SubprocVecEnv``) can unpickle the env
factories, and so that the Ray cells can ship them to Ray workers by value.

Every env *shows the task it runs*: its observation is ``[level, t]`` where ``level`` is the decoded task
the env was actually built with or switched to, and ``t`` the number of steps played in the episode. A step's
``info["task"]`` (the encoded task the sync wrapper claims the step belonged to) can so be checked against
what the env really ran. Episodes last 2-6 steps (drawn by the env's own generator), so tasks switch often;
even lengths end by termination (with ``info["success"] = 1.0``), odd ones by truncation.

The envs are strict: a step before the first reset, or after the episode ended without a reset, raises
:class:`gymnasium.error.ResetNeeded` (as Gymnasium's ``OrderEnforcing`` does for the first case), so a
wrapper that steps the wrong env cannot go unnoticed.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from pettingzoo import AECEnv, ParallelEnv

from magister.curricula.base import TaskSample
from magister.curricula.domain_randomization import DomainRandomization
from magister.env_wrappers import (
    GymnasiumSyncWrapper,
    PettingZooAECSyncWrapper,
    PettingZooAECTaskWrapper,
    PettingZooReinitTaskWrapper,
    PettingZooSyncWrapper,
    PettingZooTaskWrapper,
    ReinitTaskWrapper,
    TaskWrapper,
    TurnBasedParallelEnv,
)
from magister.task_spaces.discrete import Discrete

#: The decoded tasks (levels) the envs show in their observations; encoded tasks are their indices 0..4.
LEVELS = (10, 20, 30, 40, 50)
#: The encoded task the counting curriculum sends as evaluation-only (``train=False``).
EVAL_TASK = 4
#: The wrapper stacks of the Gymnasium route and of the PettingZoo route.
GYM_STACKS = ("task", "reinit", "user-above", "user-below")
PZ_STACKS = ("pz-task", "pz-reinit", "aec-turnbased", "aec-native")

MIN_LEN, MAX_LEN = 2, 6


def make_space(seed: int | None = 0) -> Discrete:
    return Discrete(tasks=list(LEVELS), seed=seed)


def _obs(level: int, t: int) -> np.ndarray:
    return np.array([level, t], dtype=np.float32)


_OBS_SPACE = spaces.Box(0.0, 1000.0, shape=(2,), dtype=np.float32)


# -- Gymnasium ------------------------------------------------------------------------------------------


class ShowEnv(gym.Env):
    """Observation ``[level, t]``; an episode lasts ``MIN_LEN..MAX_LEN`` steps; strict about resets."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = _OBS_SPACE
    action_space = spaces.Discrete(2)

    def __init__(self, level: int = LEVELS[0]) -> None:
        self.level = int(level)
        self.t = 0
        self.length = 0
        self.running = False
        self.was_reset = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"ShowEnv.reset got options {options!r}; the task option must not reach the env")
        self.t = 0
        self.length = int(self.np_random.integers(MIN_LEN, MAX_LEN + 1))
        self.running = self.was_reset = True
        return _obs(self.level, 0), {}

    def step(self, action: Any):
        if not self.was_reset:
            raise ResetNeeded(f"ShowEnv(level={self.level}) stepped before its first reset")
        if not self.running:
            raise ResetNeeded(f"ShowEnv(level={self.level}) stepped after its episode ended, without a reset")
        self.t += 1
        end = self.t >= self.length
        term = end and self.length % 2 == 0
        trunc = end and not term
        self.running = not end
        info = {"success": 1.0} if term else {}
        return _obs(self.level, self.t), 1.0, term, trunc, info


class ShowTask(TaskWrapper):
    """The task wrapper a user writes: the task is the level the env shows."""

    def change_task(self, task: Any) -> None:
        self.env.unwrapped.level = int(task)


def build_show_env(level: Any) -> ShowEnv:
    """The factory of the ReinitTaskWrapper route: one env per level, fixed at construction."""
    return ShowEnv(int(level))


class UserTag(gym.Wrapper):
    """A user's own Gymnasium wrapper: copies the info and tags it (``info[key] = True``)."""

    def __init__(self, env: gym.Env, key: str) -> None:
        super().__init__(env)
        self.key = key

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, self.key: True}

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step(action)
        return obs, rew, term, trunc, {**info, self.key: True}


def make_stack(stack: str) -> gym.Env:
    """The env below the sync wrapper, for one of :data:`GYM_STACKS`."""
    space = make_space(seed=None)
    if stack == "task":
        return ShowTask(ShowEnv(), space)
    if stack == "reinit":
        return ReinitTaskWrapper(build_show_env, space, initial_task=LEVELS[0], cache_size=3)
    if stack == "user-above":  # GymnasiumSyncWrapper(UserTag(ShowTask(env)))
        return UserTag(ShowTask(ShowEnv(), space), "user_above")
    if stack == "user-below":  # GymnasiumSyncWrapper(ShowTask(UserTag(env)))
        return ShowTask(UserTag(ShowEnv(), "user_below"), space)
    raise ValueError(f"unknown stack {stack!r}")


def make_synced(stack: str, source: Any) -> GymnasiumSyncWrapper:
    """``GymnasiumSyncWrapper(make_stack(stack), source)``: the env a vector env's factory builds."""
    return GymnasiumSyncWrapper(make_stack(stack), source)


def env_fns(stack: str, source: Any, n: int) -> list[Any]:
    """``n`` picklable env factories (``functools.partial``, which pickles ``source`` as a closure would)."""
    return [functools.partial(make_synced, stack, source) for _ in range(n)]


def rllib_env(env_config: Any) -> gym.Env:
    """The RLlib route's ``env_fn`` for :func:`magister.integrations.rllib.make_env_creator`."""
    return make_stack(str(env_config.get("stack", "task")))


# -- the curriculum -------------------------------------------------------------------------------------


class CountingCurriculum(DomainRandomization):
    """Uniform over the levels; sends :data:`EVAL_TASK` as evaluation-only; counts what reaches it.

    ``metrics()`` adds ``conf/episodes``, ``conf/steps`` (sum of episode lengths) and ``conf/task<k>``
    (episodes reported per encoded task ``k``), so the counts can be read through any server proxy
    (ZeroMQ server, Ray actor) as well as from the object itself.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__(make_space(seed), seed=seed)
        self.episodes_by_task: dict[int, int] = {}
        self.steps_total = 0
        self.episode_calls = 0

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        return [TaskSample(t, int(t) != EVAL_TASK) for t in self.sample(k)]

    def update_on_episode(self, episode_return, length, task, progress, env_id=None) -> None:
        super().update_on_episode(episode_return, length, task, progress, env_id)
        self.episode_calls += 1
        self.steps_total += int(length)
        self.episodes_by_task[int(task)] = self.episodes_by_task.get(int(task), 0) + 1

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out["conf/episodes"] = float(self.episode_calls)
        out["conf/steps"] = float(self.steps_total)
        for k, v in self.episodes_by_task.items():
            out[f"conf/task{k}"] = float(v)
        return out


def curriculum_counts(metrics: dict[str, float]) -> tuple[int, int, dict[int, int]]:
    """``(episodes, steps, episodes per encoded task)`` from :meth:`CountingCurriculum.metrics`."""
    per = {int(k[len("conf/task"):]): int(v) for k, v in metrics.items() if k.startswith("conf/task") and v}
    return int(metrics["conf/episodes"]), int(metrics["conf/steps"]), per


# -- PettingZoo parallel --------------------------------------------------------------------------------


class ShowParallel(ParallelEnv):
    """Two agents; each observes ``[level, t]``. Agent ``a1`` finishes one step before ``a0`` in episodes
    of three steps or more (so the episode ends only when every agent is done)."""

    metadata = {"name": "show_parallel_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, level: int = LEVELS[0]) -> None:
        self.level = int(level)
        self.possible_agents = ["a0", "a1"]
        self.agents: list[str] = []
        self.t = 0
        self.length = 0
        self.was_reset = False
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space:
        return _OBS_SPACE

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _end(self, agent: str) -> int:
        return self.length - 1 if agent == "a1" and self.length >= 3 else self.length

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError(f"ShowParallel.reset got options {options!r}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.length = int(self._rng.integers(MIN_LEN, MAX_LEN + 1))
        self.agents = list(self.possible_agents)
        self.was_reset = True
        return {a: _obs(self.level, 0) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        if not self.was_reset:
            raise ResetNeeded(f"ShowParallel(level={self.level}) stepped before its first reset")
        if not self.agents:
            raise ResetNeeded(f"ShowParallel(level={self.level}) stepped after its episode ended")
        self.t += 1
        live = list(self.agents)
        obs = {a: _obs(self.level, self.t) for a in live}
        rews = {a: 1.0 for a in live}
        terms = {a: self.t >= self._end(a) for a in live}
        truncs = {a: False for a in live}
        infos = {a: {} for a in live}
        self.agents = [a for a in live if not terms[a]]
        return obs, rews, terms, truncs, infos


class ShowParallelTask(PettingZooTaskWrapper):
    def change_task(self, task: Any) -> None:
        self.env.unwrapped.level = int(task)


def build_show_parallel(level: Any) -> ShowParallel:
    return ShowParallel(int(level))


# -- PettingZoo AEC (through the repo's AEC route: TurnBasedParallelEnv) ----------------------------------


class ShowAEC(AECEnv):
    """A turn-based AEC game: two agents alternate; every observation is ``[level, moves so far]``; the game
    ends (every agent terminated) after ``MIN_LEN..MAX_LEN`` moves."""

    metadata = {"name": "show_aec_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, level: int = LEVELS[0]) -> None:
        super().__init__()
        self.level = int(level)
        self.possible_agents = ["p0", "p1"]
        self.agents = []
        self.t = 0
        self.length = 0
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space:
        return _OBS_SPACE

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return _obs(self.level, self.t)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if options:
            raise ValueError(f"ShowAEC.reset got options {options!r}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.length = int(self._rng.integers(MIN_LEN, MAX_LEN + 1))
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]

    def step(self, action: Any) -> None:
        if not self.agents:
            raise ResetNeeded(f"ShowAEC(level={self.level}) stepped after its game ended")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.t += 1
        self.rewards = {a: (1.0 if a == agent else 0.0) for a in self.agents}
        if self.t >= self.length:
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = self.agents[(self.agents.index(agent) + 1) % len(self.agents)]
        self._accumulate_rewards()


class ShowTurnBasedTask(PettingZooTaskWrapper):
    """``PettingZooTaskWrapper(TurnBasedParallelEnv(ShowAEC()))``: the task goes to the AEC game."""

    def change_task(self, task: Any) -> None:
        self.env.unwrapped.aec_env.level = int(task)


class ShowAECTask(PettingZooAECTaskWrapper):
    """The AEC game wrapped directly (the AEC API end to end): the task goes to the game's level."""

    def change_task(self, task: Any) -> None:
        self.env.unwrapped.level = int(task)


def run_aec(source: Any, steps: int, seed: int = 0) -> dict[str, Any]:
    """Play ``steps`` AEC steps of ``PettingZooAECSyncWrapper(ShowAECTask(ShowAEC()), source)`` the way an
    AEC loop does (``last()`` for the agent to move, then ``step``), checking the info ``last()`` gives
    against the agent's observation; returns what :func:`run_pz` returns (lengths: ``step`` calls of the
    finished episodes, the dead steps of terminated agents included, as the wrapper counts them)."""
    space = make_space(seed=None)
    env = PettingZooAECSyncWrapper(ShowAECTask(ShowAEC(), space), source)
    rng = np.random.default_rng(seed)
    bad: list[str] = []
    finished: dict[int, int] = {}
    lengths = t = 0
    try:
        env.reset(seed=seed)
        for i in range(steps):
            if not env.agents:
                env.reset()
                t = 0
            agent = env.agent_selection
            obs, _, term, trunc, info = env.last()
            _pz_check(f"step {i}", {agent: obs}, {agent: info}, [agent], space, bad)
            level = int(obs[0])
            env.step(None if term or trunc else int(rng.integers(2)))
            t += 1
            if not env.agents:  # the game ended: every agent done and its dead step played
                k = space.encode(level)
                finished[k] = finished.get(k, 0) + 1
                lengths += t
                t = 0
    finally:
        env.close()
    return {"steps": steps, "bad": bad, "finished": finished, "lengths": lengths, "partial": int(t > 0)}


def make_pz_stack(stack: str) -> Any:
    space = make_space(seed=None)
    if stack == "pz-task":
        return ShowParallelTask(ShowParallel(), space)
    if stack == "pz-reinit":
        return PettingZooReinitTaskWrapper(build_show_parallel, space, initial_task=LEVELS[0], cache_size=3)
    if stack == "aec-turnbased":
        return ShowTurnBasedTask(TurnBasedParallelEnv(ShowAEC()), space)
    raise ValueError(f"unknown PettingZoo stack {stack!r}")


def _pz_check(where: str, obs: dict, infos: dict, agents: Any, space: Discrete, bad: list[str]) -> None:
    for a in agents:
        info = infos.get(a, {})
        if "task" not in info or "task_train" not in info:
            bad.append(f"{where} agent {a}: info without task/task_train: {sorted(info)}")
            continue
        task, train = info["task"], info["task_train"]
        shown = int(obs[a][0])
        if space.decode(int(task)) != shown:
            bad.append(f"{where} agent {a}: info['task']={task} (level {space.decode(int(task))}) "
                       f"but the env shows level {shown}")
        if not isinstance(train, (bool, np.bool_)):
            bad.append(f"{where} agent {a}: info['task_train'] is {type(train).__name__}, not bool")
        elif bool(train) != (int(task) != EVAL_TASK):
            bad.append(f"{where} agent {a}: info['task_train']={train} for task {task}")


def run_pz(stack: str, source: Any, steps: int, seed: int = 0) -> dict[str, Any]:
    """Play ``steps`` parallel steps of ``PettingZooSyncWrapper(make_pz_stack(stack), source)`` with random
    actions, check every agent's info against its observation, close the env; returns what the env side
    saw: ``steps``, ``bad`` (messages), ``finished`` (episodes per encoded task), ``lengths`` (sum of
    finished episodes' lengths) and ``partial`` (1 when an episode with steps was still running)."""
    if stack == "aec-native":
        return run_aec(source, steps, seed)
    env = PettingZooSyncWrapper(make_pz_stack(stack), source)
    space = make_space(seed=None)
    rng = np.random.default_rng(seed)
    bad: list[str] = []
    finished: dict[int, int] = {}
    lengths = 0
    t = 0
    try:
        obs, infos = env.reset(seed=seed)
        _pz_check("reset", obs, infos, obs.keys(), space, bad)
        for i in range(steps):
            if not env.agents:
                obs, infos = env.reset()
                _pz_check(f"step {i} (reset)", obs, infos, obs.keys(), space, bad)
                t = 0
                continue
            actions = {a: int(rng.integers(2)) for a in env.agents}
            obs, rews, terms, truncs, infos = env.step(actions)
            t += 1
            _pz_check(f"step {i}", obs, infos, obs.keys(), space, bad)
            if not env.agents:  # the episode ended
                level = int(next(iter(obs.values()))[0])
                k = space.encode(level)
                finished[k] = finished.get(k, 0) + 1
                lengths += t
                t = 0
    finally:
        env.close()
    return {"steps": steps, "bad": bad, "finished": finished, "lengths": lengths, "partial": int(t > 0)}
