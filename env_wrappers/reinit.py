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
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import gymnasium as gym
import numpy as np

from ..task_spaces.base import TaskSpace, task_key
from .task_wrapper import TaskWrapper

logger = logging.getLogger(__name__)

__all__ = ["ReinitTaskWrapper"]


class _Entry:
    """A cached env and whether it has been seeded yet."""

    __slots__ = ("env", "seeded")

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.seeded = False


class ReinitTaskWrapper(TaskWrapper):
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

    def __init__(
        self,
        env_fn: Callable[[Any], gym.Env],
        task_space: TaskSpace,
        *,
        cache_size: int | None = 8,
        initial_task: Any = None,
        task_observation: bool = False,
    ) -> None:
        if not callable(env_fn):
            raise TypeError(f"env_fn must be callable (decoded task -> gymnasium.Env), got {env_fn!r}")
        if not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a magister TaskSpace, got {type(task_space).__name__}")
        if cache_size is not None and (
            isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size < 1
        ):
            raise ValueError(f"cache_size must be a positive int or None, got {cache_size!r}")
        gym.utils.RecordConstructorArgs.__init__(
            self, env_fn=env_fn, task_space=task_space, cache_size=cache_size, initial_task=initial_task,
            task_observation=task_observation, _disable_deepcopy=True,
        )
        self.env_fn = env_fn
        self.cache_size = None if cache_size is None else int(cache_size)
        self.num_built = 0
        if initial_task is None:
            initial_task = task_space.sample()
        elif not task_space.contains(initial_task):
            raise ValueError(f"initial_task {initial_task!r} is not a task of {task_space!r}")
        encoded = task_space.encode(initial_task)
        first = self._build(initial_task)
        super().__init__(first, task_space, task_observation=task_observation)
        self.reference_observation_space = first.observation_space
        self.reference_action_space = first.action_space
        self._cache: OrderedDict[Hashable, _Entry] = OrderedDict([(task_key(encoded), _Entry(first))])
        self._seed_rng = np.random.default_rng()
        self._pending: _Entry | None = None
        self._current_task = encoded
        self._current_decoded = initial_task
        self._has_task = True

    # -- building and caching -----------------------------------------------------------------------
    def _build(self, task: Any) -> gym.Env:
        env = self.env_fn(task)
        if not isinstance(env, gym.Env):
            raise TypeError(f"env_fn({task!r}) returned {type(env).__name__}, expected a gymnasium.Env")
        self.num_built += 1
        logger.debug("built env #%d for task %r", self.num_built, task)
        return env

    def change_task(self, task: Any) -> None:
        """Get the env of ``task`` from the cache or build it; it becomes the running env at the next reset.

        The env is built (and its spaces checked) right away, so a bad task fails here; the swap and any
        eviction wait for the reset, so an episode in progress is never switched or closed under the agent.
        """
        key = task_key(self.task_space.encode(task))
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
        else:
            env = self._build(task)
            for what, got, ref in (
                ("observation", env.observation_space, self.reference_observation_space),
                ("action", env.action_space, self.reference_action_space),
            ):
                if got != ref:
                    env.close()
                    raise ValueError(
                        f"env for task {task!r} has {what} space {got}, but the first env has {ref}; "
                        "every task's env must have the same spaces"
                    )
            entry = _Entry(env)
            self._cache[key] = entry
        self._pending = entry

    def _evict(self) -> None:
        """Close least-recently-used envs beyond ``cache_size`` (never the running one, the most recent)."""
        while self.cache_size is not None and len(self._cache) > self.cache_size:
            old_key, old = self._cache.popitem(last=False)
            logger.debug("evicting env of task %r", old_key)
            old.env.close()

    @property
    def cached_tasks(self) -> list[Hashable]:
        """Keys (:func:`~magister.task_spaces.base.task_key` of the encoded task) of the cached envs,
        least recently used first."""
        return list(self._cache)

    @property
    def spec(self) -> None:
        """``None``: the env underneath changes with the task, so no single ``EnvSpec`` can rebuild it."""
        return None

    # -- reset / close ------------------------------------------------------------------------------
    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        if self._pending is not None:
            self.env = self._pending.env
            self._pending = None
            self._evict()
        entry = self._cache[task_key(self._current_task)]
        if seed is not None:
            self._seed_rng = np.random.default_rng(seed)
        elif not entry.seeded:
            seed = int(self._seed_rng.integers(2**31 - 1))
        entry.seeded = True
        return self.env.reset(seed=seed, options=options)

    def close(self) -> None:
        """Close every cached env."""
        self._pending = None
        while self._cache:
            _, entry = self._cache.popitem(last=False)
            entry.env.close()
