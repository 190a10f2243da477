"""A task wrapper that builds a fresh environment per task, for envs fixed at construction.

Many environments take their parameters only in the constructor (a level file, a grid size, a registered
env id). :class:`ReinitTaskWrapper` turns such a family into one task-switching env: ``env_fn(decoded_task)``
builds the env for a task, and ``reset(options={"task": t})`` switches to it. Built envs are cached by task
(least-recently-used, at most ``cache_size`` alive, evicted envs are closed), so switching back to a recent
task costs nothing.

Every built env must have the same observation and action spaces as the first one (a vector env or a
policy network cannot cope with spaces that change under it); a mismatch raises ``ValueError`` naming the
task and the differing spaces. For MiniGrid, whose ``Dict`` observation contains a ``MissionSpace`` that
differs between env classes, wrap each env with ``minigrid.wrappers.ImgObsWrapper`` (or another wrapper
that drops the mission) inside ``env_fn``.

A task set between resets (``set_task``, e.g. by a sync wrapper switching tasks mid-episode) is built at
once but swapped in at the next reset: the running episode's env is never replaced or closed under it.

Seeding: ``reset(seed=s)`` seeds the env it resets and also a generator of the wrapper; an env that was
never seeded gets its first seed from that generator, so a seeded sequence of resets and task switches
is reproducible even when it builds new envs.

>>> import gymnasium as gym
>>> from magister.task_spaces.discrete import Discrete
>>> space = Discrete(tasks=[100, 500])  # the task: CartPole's episode step limit
>>> make = lambda steps: gym.make("CartPole-v1", max_episode_steps=steps)
>>> env = ReinitTaskWrapper(make, space, initial_task=100)
>>> _, info = env.reset(seed=0, options={"task": 500})
>>> env.env.spec.max_episode_steps, info["task"], env.num_built
(500, 1, 2)
>>> _ = env.reset(options={"task": 100})  # cached: nothing new is built
>>> env.num_built
2
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ..task_spaces.base import TaskSpace
from ._env_cache import _EnvCache
from .task_wrapper import TaskWrapper

logger = logging.getLogger(__name__)

__all__ = ["ReinitTaskWrapper"]


class ReinitTaskWrapper(_EnvCache, TaskWrapper):
    """Switch tasks by building (or reusing) one env per task.

    Args:
        env_fn: ``env_fn(decoded_task) -> gym.Env``; called once per task while that task stays cached.
        task_space: The tasks.
        cache_size: Most envs kept alive (the current one included), least recently used evicted and
            closed first; ``None`` keeps every env built.
        initial_task: Decoded task of the env built at construction (the wrapper needs one env to exist);
            drawn with ``task_space.sample()`` when omitted. It is the current task until another is given.
        task_observation: As in :class:`~magister.env_wrappers.task_wrapper.TaskWrapper`.

    Attributes:
        num_built: How many envs ``env_fn`` has built so far.

    Raises:
        TypeError: ``env_fn`` not callable, or it returned something that is not a ``gymnasium.Env``.
        ValueError: a bad ``cache_size``, an ``initial_task`` outside the space, or (on a switch) an env
            whose spaces differ from the first env's.
    """

    _env_type = gym.Env

    def __init__(
        self,
        env_fn: Callable[[Any], gym.Env],
        task_space: TaskSpace,
        *,
        cache_size: int | None = 8,
        initial_task: Any = None,
        task_observation: bool = False,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, env_fn=env_fn, task_space=task_space, cache_size=cache_size, initial_task=initial_task,
            task_observation=task_observation, _disable_deepcopy=True,
        )
        first, initial_task, encoded = self._first_env(env_fn, task_space, cache_size, initial_task)
        super().__init__(first, task_space, task_observation=task_observation)
        self.reference_observation_space = first.observation_space
        self.reference_action_space = first.action_space
        self._start_cache(first, initial_task, encoded)

    # -- building and caching (the cache itself: env_wrappers/_env_cache.py) ------------------------
    def _check_consistent(self, task: Any, env: gym.Env) -> None:
        for what, got, ref in (
            ("observation", env.observation_space, self.reference_observation_space),
            ("action", env.action_space, self.reference_action_space),
        ):
            if got != ref:
                raise ValueError(
                    f"env for task {task!r} has {what} space {got}, but the first env has {ref}; "
                    "every task's env must have the same spaces"
                )

    # -- building and caching -----------------------------------------------------------------------
    @property
    def spec(self) -> None:
        """``None``: the env underneath changes with the task, so no single ``EnvSpec`` can rebuild it."""
        return None

    # -- reset / close ------------------------------------------------------------------------------
