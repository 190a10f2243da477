"""Task switching for PettingZoo parallel environments through the standard reset hook.

:class:`PettingZooTaskWrapper` is the multi-agent twin of
:class:`~magister.env_wrappers.task_wrapper.TaskWrapper` for the PettingZoo parallel API: one task per
episode, shared by all agents, arriving through::

    observations, infos = env.reset(seed=0, options={"task": decoded_task})

* ``options["task"]`` is a **decoded** task, checked with ``task_space.contains`` (``ValueError`` naming
  the task and the space), applied with :meth:`~PettingZooTaskWrapper.change_task` and remembered; the other
  options go to the inner env (``options=None`` when nothing remains); the caller's dict is not modified.
* Without a ``"task"`` option the current task is kept; before any task was given the first reset draws
  one from ``task_space`` (from a generator seeded with ``seed`` when one is given, as in
  :class:`~magister.env_wrappers.task_wrapper.TaskWrapper`).
* Every agent's info gets ``"task"`` (the encoded task) and ``"task_progress"`` (0.0 at reset; after each
  step that agent's :meth:`~PettingZooTaskWrapper.task_progress`, clipped to [0, 1], ``ValueError`` for
  NaN). Infos are copied per agent first (some envs share one dict between agents). Keys of ``infos``
  that are not agents (e.g. ``"common"``) are left alone.

With ``task_observation=True`` each agent's observation becomes ``{"obs": ..., "task": encoding}`` and
``observation_space(agent)`` the matching ``Dict`` (the same object on every call, as the PettingZoo API
requires); see :class:`~magister.env_wrappers.task_wrapper.TaskWrapper` for the default one-hot encoding.

A subclass for an env with a settable layout looks like::

    class LayoutTask(PettingZooTaskWrapper):
        def change_task(self, task):              # task: a decoded (size, density) pair
            self.env.unwrapped.set_layout(*task)  # used by the inner env's next reset

        def task_progress(self, agent, obs, rew, term, trunc, info):
            return info.get("success", 0.0)       # the default, per agent

(:class:`magister.examples.tiny_pz.TinyTagTask` is a complete one.)

For environments whose task parameters are fixed at construction, :class:`PettingZooReinitTaskWrapper`
builds one env per task from a factory and caches it, like
:class:`~magister.env_wrappers.reinit.ReinitTaskWrapper`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers.base_parallel import BaseParallelWrapper

from ..task_spaces.base import TaskSpace
from ._env_cache import _EnvCache
from .task_wrapper import TaskSwitching

logger = logging.getLogger(__name__)

__all__ = ["PettingZooTaskWrapper", "PettingZooReinitTaskWrapper"]

AgentID = Any


class PettingZooTaskWrapper(TaskSwitching, BaseParallelWrapper):
    """Base class of PettingZoo parallel-API task wrappers (see the module docstring).

    Args:
        env: A :class:`pettingzoo.ParallelEnv`.
        task_space: The tasks.
        task_observation: Add the task's encoding to every agent's observation.

    Subclasses implement :meth:`change_task` and optionally :meth:`task_progress`.
    """

    def __init__(self, env: ParallelEnv, task_space: TaskSpace, *, task_observation: bool = False) -> None:
        if not isinstance(env, ParallelEnv):
            raise TypeError(f"env must be a pettingzoo ParallelEnv, got {type(env).__name__}")
        self._init_task_state(task_space, task_observation)
        BaseParallelWrapper.__init__(self, env)
        self._obs_spaces: dict[AgentID, spaces.Space] = {}
        self._task_obs_space: spaces.Space | None = None

    # -- what subclasses implement ------------------------------------------------------------------
    def task_progress(
        self, agent: AgentID, obs: Any, rew: float, term: bool, trunc: bool, info: dict[str, Any]
    ) -> float:
        """Progress of ``agent`` on the current task in ``[0, 1]``. Default: ``info.get("success", 0.0)``."""
        return info.get("success", 0.0)  # converted and checked by step() via check_progress

    # -- spaces -------------------------------------------------------------------------------------
    def observation_space(self, agent: AgentID) -> spaces.Space:
        """The inner env's space, or ``Dict(obs=..., task=...)`` (cached per agent) with task observations."""
        if not self.task_observation:
            return self.env.observation_space(agent)
        space = self._obs_spaces.get(agent)
        if space is None:
            if self._task_obs_space is None:
                self._task_obs_space = self.task_observation_space
            space = spaces.Dict({"obs": self.env.observation_space(agent), "task": self._task_obs_space})
            self._obs_spaces[agent] = space
        return space

    # -- the parallel API ---------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, dict[str, Any]]]:
        """Reset, switching to ``options["task"]`` when given."""
        inner_options = self._take_task_option(seed, options)
        obs, infos = self._reset_inner(seed=seed, options=inner_options)
        agents = self._agent_keys(infos)
        infos = {a: (dict(i) if a in agents else i) for a, i in infos.items()}
        for a in agents:
            infos[a]["task"] = self._current_task
            infos[a]["task_progress"] = 0.0
        return self._observe(obs), infos

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[dict, dict]:
        """Reset the inner env (a hook for subclasses that must pass extra reset options)."""
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[AgentID, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Step the inner env and add ``"task"`` and ``"task_progress"`` to every agent's info."""
        obs, rews, terms, truncs, infos = self.env.step(actions)
        agents = self._agent_keys(infos)
        infos = {a: (dict(i) if a in agents else i) for a, i in infos.items()}
        for a in agents:
            info = infos[a]
            progress = self._checked_progress(self.task_progress(
                a, obs.get(a), rews.get(a, 0.0), bool(terms.get(a, False)), bool(truncs.get(a, False)), info
            ), who=f" for agent {a!r}")
            info["task"] = self._current_task
            info["task_progress"] = progress
        return self._observe(obs), rews, terms, truncs, infos

    def _agent_keys(self, infos: dict) -> set:
        possible = getattr(self.env, "possible_agents", None)
        if possible is None:
            return set(infos)
        possible = set(possible)
        return {a for a in infos if a in possible}

    def _observe(self, obs: dict[AgentID, Any]) -> dict[AgentID, Any]:
        if not self.task_observation:
            return obs
        enc = self.encode_task_observation(self._current_task)
        return {a: {"obs": o, "task": enc.copy()} for a, o in obs.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.env}>"


class PettingZooReinitTaskWrapper(_EnvCache, PettingZooTaskWrapper):
    """One parallel env per task, built by ``env_fn(decoded_task)`` and LRU-cached.

    The PettingZoo twin of :class:`~magister.env_wrappers.reinit.ReinitTaskWrapper`: every built env must
    have the same ``possible_agents`` and the same observation and action space per agent as the first
    one (``ValueError`` naming the task otherwise); at most ``cache_size`` envs stay alive (``None``: all),
    evicted ones are closed; a task set between resets is swapped in at the next reset; ``reset(seed=s)``
    also seeds the generator that seeds never-seeded envs.

    Args:
        env_fn: ``env_fn(decoded_task) -> ParallelEnv``.
        task_space: The tasks.
        cache_size: Most envs kept alive, the current one included.
        initial_task: Task of the env built at construction (``task_space.sample()`` when omitted).
        task_observation: As in :class:`PettingZooTaskWrapper`.
    """

    _env_type = ParallelEnv

    def __init__(
        self,
        env_fn: Callable[[Any], ParallelEnv],
        task_space: TaskSpace,
        *,
        cache_size: int | None = 8,
        initial_task: Any = None,
        task_observation: bool = False,
    ) -> None:
        first, initial_task, encoded = self._first_env(env_fn, task_space, cache_size, initial_task)
        super().__init__(first, task_space, task_observation=task_observation)
        self.possible_agents = list(first.possible_agents)
        self._ref_spaces = {
            a: (first.observation_space(a), first.action_space(a)) for a in self.possible_agents
        }
        self._start_cache(first, initial_task, encoded)

    def _check_consistent(self, task: Any, env: ParallelEnv) -> None:
        if list(env.possible_agents) != self.possible_agents:
            raise ValueError(
                f"env for task {task!r} has possible_agents {list(env.possible_agents)}, but the first env "
                f"has {self.possible_agents}"
            )
        for a, (obs_ref, act_ref) in self._ref_spaces.items():
            for what, got, ref in (
                ("observation", env.observation_space(a), obs_ref),
                ("action", env.action_space(a), act_ref),
            ):
                if got != ref:
                    raise ValueError(
                        f"env for task {task!r} has {what} space {got} for agent {a!r}, but the first env "
                        f"has {ref}; every task's env must have the same spaces"
                    )

    def observation_space(self, agent: AgentID) -> spaces.Space:
        """The first env's space for ``agent`` (every env has the same), wrapped for task observations."""
        if not self.task_observation:
            return self._ref_spaces[agent][0]
        return super().observation_space(agent)

    def action_space(self, agent: AgentID) -> spaces.Space:
        """The first env's action space for ``agent`` (every env has the same)."""
        return self._ref_spaces[agent][1]

