"""The per-task env cache shared by the Gymnasium and PettingZoo re-initialising task wrappers.

Envs whose parameters are fixed at construction switch tasks by building one env per task. This mixin keeps
them in a least-recently-used cache keyed by :func:`~magister.task_spaces.base.task_key` of the encoded
task: a task set between resets is built (and its spaces checked) at once but swapped in only at the next
reset, so a running episode is never switched or closed under the agent; at most ``cache_size`` envs stay
alive and evicted ones are closed; ``reset(seed=s)`` also seeds the generator that seeds never-seeded envs.

The host class provides ``_env_type`` (what ``env_fn`` must return), ``_check_consistent(task, env)``
(``ValueError`` when an env's spaces differ from the first one's) and an ``env`` attribute (the running env).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key

logger = logging.getLogger(__name__)


class _Entry:
    """A cached env and whether it has been seeded yet."""

    __slots__ = ("env", "seeded")

    def __init__(self, env: Any) -> None:
        self.env = env
        self.seeded = False


class _EnvCache:
    """Mixin: build, cache, swap in and seed one env per task (see the module docstring)."""

    _env_type: type
    env: Any

    def _check_consistent(self, task: Any, env: Any) -> None:  # pragma: no cover - provided by the host
        raise NotImplementedError

    def _first_env(
        self, env_fn: Callable[[Any], Any], task_space: TaskSpace, cache_size: int | None, initial_task: Any
    ) -> tuple[Any, Any, EncodedTask]:
        """Validate the arguments and build the env of the initial task: ``(env, decoded, encoded)``."""
        if not callable(env_fn):
            raise TypeError(
                f"env_fn must be callable (decoded task -> {self._env_type.__name__}), got {env_fn!r}"
            )
        if not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a magister TaskSpace, got {type(task_space).__name__}")
        if cache_size is not None and (
            isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size < 1
        ):
            raise ValueError(f"cache_size must be a positive int or None, got {cache_size!r}")
        self.env_fn = env_fn
        self.cache_size = None if cache_size is None else int(cache_size)
        self.num_built = 0
        if initial_task is None:
            initial_task = task_space.sample()
        elif not task_space.contains(initial_task):
            raise ValueError(f"initial_task {initial_task!r} is not a task of {task_space!r}")
        return self._build(initial_task), initial_task, task_space.encode(initial_task)

    def _start_cache(self, first: Any, initial_task: Any, encoded: EncodedTask) -> None:
        """Put the first env in the cache and make its task the current one (after the host's init)."""
        self._cache: OrderedDict[Hashable, _Entry] = OrderedDict([(task_key(encoded), _Entry(first))])
        self._seed_rng = np.random.default_rng()
        self._pending: _Entry | None = None
        self._current_task = encoded
        self._current_decoded = initial_task
        self._has_task = True

    def _build(self, task: Any) -> Any:
        env = self.env_fn(task)
        if not isinstance(env, self._env_type):
            raise TypeError(
                f"env_fn({task!r}) returned {type(env).__name__}, expected a {self._env_type.__name__}"
            )
        self.num_built += 1
        logger.debug("built env #%d for task %r", self.num_built, task)
        return env

    def change_task(self, task: Any) -> None:
        """Get the env of ``task`` from the cache or build it; it becomes the running env at the next reset.

        The env is built (and its spaces checked) right away, so a bad task fails here; the swap and any
        eviction wait for the reset, so an episode in progress is never switched or closed under the agent.
        """
        key = task_key(self.task_space.encode(task))  # type: ignore[attr-defined]
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
        else:
            env = self._build(task)
            try:
                self._check_consistent(task, env)
            except ValueError:
                env.close()
                raise
            entry = _Entry(env)
            self._cache[key] = entry
        self._pending = entry

    @property
    def cached_tasks(self) -> list[Hashable]:
        """Keys (:func:`~magister.task_spaces.base.task_key` of the encoded task) of the cached envs,
        least recently used first."""
        return list(self._cache)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, Any]:
        if self._pending is not None:
            self.env = self._pending.env
            self._pending = None
            while self.cache_size is not None and len(self._cache) > self.cache_size:
                old_key, old = self._cache.popitem(last=False)  # never the running env: it is the newest
                logger.debug("evicting env of task %r", old_key)
                old.env.close()
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
