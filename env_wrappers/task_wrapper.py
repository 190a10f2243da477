"""Task switching for Gymnasium environments through the standard reset hook.

A :class:`TaskWrapper` turns an ordinary :class:`gymnasium.Env` into a *multi-task* environment whose task is
chosen from a :class:`~magister.task_spaces.base.TaskSpace`. The task travels through the one hook every
Gymnasium wrapper and vector env already forwards untouched::

    obs, info = env.reset(seed=0, options={"task": decoded_task})

so a :class:`gymnasium.vector.SyncVectorEnv` or :class:`~gymnasium.vector.AsyncVectorEnv` of task wrappers
switches tasks with ``envs.reset(options={"task": ...})`` (add ``"reset_mask"`` to switch only some envs),
and a Stable-Baselines3 ``VecEnv`` with ``vec_env.set_options({"task": ...})`` before ``vec_env.reset()``.

Rules of the hook:

* ``options["task"]`` is a **decoded** task. It is checked with ``task_space.contains`` (``ValueError`` naming
  the task and the space when it does not belong), handed to :meth:`TaskWrapper.change_task`, and remembered.
  The other options are forwarded to the inner env (``options=None`` when nothing remains). The caller's
  options dict is never modified (vector envs pass the same dict to every sub-env).
* Without a ``"task"`` option the current task is kept, so vector-env autoreset (which calls ``reset()``
  with no options) replays the same task.
* Before any task has been given, the first ``reset`` draws one from ``task_space`` so the env is usable on
  its own: with ``task_space.sample()``, or, for ``reset(seed=s)``, with
  ``task_space.sample_encoded(1, rng=np.random.default_rng(s))`` so that seeded resets are reproducible
  (the space's own generator is left untouched; it may be shared by several envs).

Every ``info`` carries ``info["task"]`` (the *encoded* current task) and ``info["task_progress"]`` (0.0 on
reset; on each step the value of :meth:`TaskWrapper.task_progress`, clipped to [0, 1], ``ValueError`` for
NaN). Subclasses implement :meth:`~TaskWrapper.change_task` and optionally :meth:`~TaskWrapper.task_progress`.
A step's info dict is annotated in place, as Gymnasium's own wrappers do; once the inner env returns the same
dict object as on its previous step (an env reusing one dict), it is copied instead, so what the env goes on
reusing is not annotated again.

With ``task_observation=True`` the observation becomes ``{"obs": inner_obs, "task": encoding}`` with space
``Dict({"obs": inner_space, "task": task_observation_space})``. The default encoding is a one-hot vector for
*indexed* task spaces (``Discrete``); other spaces need the subclass to override
:attr:`~TaskWrapper.task_observation_space` and :meth:`~TaskWrapper.encode_task_observation`.

Example:

>>> import gymnasium as gym
>>> from magister.task_spaces.base import TaskSpace
>>> class Goals(TaskSpace):  # a tiny indexed space: tasks 0, 1, 2
...     num_tasks = 3
...     indexed = True
...     def sample(self): return int(self.rng.integers(3))
...     def contains(self, t): return isinstance(t, int) and 0 <= t < 3
...     def encode(self, t): return t
...     def decode(self, e): return e
>>> class GoalWrapper(TaskWrapper):
...     def change_task(self, task): self.goal = task
>>> env = GoalWrapper(gym.make("CartPole-v1"), Goals())
>>> obs, info = env.reset(seed=0, options={"task": 2})
>>> env.goal, info["task"], info["task_progress"]
(2, 2, 0.0)
>>> _, _, _, _, info = env.step(0)
>>> info["task"]
2
"""

from __future__ import annotations

import logging
import math
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..task_spaces.base import EncodedTask, TaskSpace

logger = logging.getLogger(__name__)

__all__ = ["TaskSwitching", "TaskWrapper", "check_progress"]

def step_result_error(env: Any, out: Any) -> TypeError:
    """The error for a step result that is not ``(obs, reward, terminated, truncated, info)`` with a dict."""
    if not isinstance(out, (tuple, list)) or len(out) != 5:
        what = repr(out)
        if isinstance(out, (tuple, list)):
            what = f"a {type(out).__name__} of length {len(out)}"
        return TypeError(
            f"{type(env).__name__}.step must return (obs, reward, terminated, truncated, info), "
            f"got {what:.200}"
        )
    return TypeError(f"{type(env).__name__}.step returned an info that is not a dict: {out[4]!r:.200}")


def check_progress(value: Any, *, source: str = "task_progress") -> float:
    """Validate a progress value: a real number, NaN rejected, clipped to ``[0, 1]``.

    >>> check_progress(0.25), check_progress(1.5), check_progress(-2)
    (0.25, 1.0, 0.0)
    >>> check_progress(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: task_progress returned NaN; progress must be a number in [0, 1]
    """
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{source} must return a number in [0, 1], got {value!r} of type {type(value).__name__}"
        ) from None
    if math.isnan(v):
        raise ValueError(f"{source} returned NaN; progress must be a number in [0, 1]")
    return min(1.0, max(0.0, v))


class TaskSwitching:
    """The task bookkeeping shared by the Gymnasium and PettingZoo task wrappers.

    It holds the task space and the current task, validates and applies tasks (:meth:`set_task`), reads
    the ``"task"`` reset option (:meth:`_take_task_option`), checks progress values, and provides the
    default one-hot task observation for indexed spaces. Subclasses implement :meth:`change_task`.
    """

    task_space: TaskSpace
    task_observation: bool

    def _init_task_state(self, task_space: TaskSpace, task_observation: bool) -> None:
        if not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a magister TaskSpace, got {type(task_space).__name__}")
        self.task_space = task_space
        self.task_observation = bool(task_observation)
        self._current_task: EncodedTask | None = None
        self._current_decoded: Any = None
        self._has_task = False
        self._warned_clip = False

    # -- the current task ---------------------------------------------------------------------------
    @property
    def current_task(self) -> EncodedTask | None:
        """Encoded task of the running episode (``None`` before the first reset)."""
        return self._current_task

    @property
    def current_decoded_task(self) -> Any:
        """Decoded task of the running episode (``None`` before the first reset)."""
        return self._current_decoded

    # -- what subclasses implement ------------------------------------------------------------------
    def change_task(self, task: Any) -> None:
        """Apply a *decoded* task; it takes effect from the inner env's reset that follows.

        Called by ``reset`` (through :meth:`set_task`) before the inner env is reset. Subclasses must
        override it.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement change_task(task)")

    @property
    def task_observation_space(self) -> spaces.Space:
        """The space of :meth:`encode_task_observation`'s output (default: one-hot for indexed spaces)."""
        n = self.task_space.num_tasks
        if self.task_space.indexed and n is not None:
            return spaces.Box(0.0, 1.0, shape=(int(n),), dtype=np.float32)
        raise NotImplementedError(
            f"{type(self).__name__} must define task_observation_space (and encode_task_observation) "
            f"for the non-indexed task space {self.task_space!r}"
        )

    def encode_task_observation(self, encoded_task: EncodedTask) -> np.ndarray:
        """The task's part of the observation (default: one-hot of the task index for indexed spaces)."""
        n = self.task_space.num_tasks
        if self.task_space.indexed and n is not None:
            out = np.zeros(int(n), dtype=np.float32)
            out[int(encoded_task)] = 1.0
            return out
        raise NotImplementedError(
            f"{type(self).__name__} must implement encode_task_observation for {self.task_space!r}"
        )

    # -- switching ----------------------------------------------------------------------------------
    def set_task(self, task: Any) -> EncodedTask:
        """Validate a decoded task, apply it with :meth:`change_task` and remember it; returns it encoded.

        Usually called through ``reset(options={"task": task})``. ``ValueError`` (naming the task and the
        space) for a task outside the space, in which case nothing changes.
        """
        if not self.task_space.contains(task):
            raise ValueError(f"task {task!r} is not a task of {self.task_space!r}")
        encoded = self.task_space.encode(task)
        self._apply_task(task, encoded)
        return encoded

    def _apply_task(self, task: Any, encoded: EncodedTask) -> None:
        """Apply a task of the space (``encoded``: its encoding) with :meth:`change_task` and remember it."""
        self.change_task(task)
        self._current_task = encoded
        self._current_decoded = task
        self._has_task = True

    def _take_task_option(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """Apply ``options["task"]`` (or a first task) and return the options left for the inner env."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        inner: dict[str, Any] | None = None
        if options and len(options) == 1 and "task" in options:  # (a sync wrapper's reset: nothing else)
            self.set_task(options["task"])
        elif options:
            inner = dict(options)  # never modify the caller's dict: vector envs share it between envs
            if "task" in inner:
                self.set_task(inner.pop("task"))
            if not inner:
                inner = None
        if not self._has_task:
            self.set_task(self._initial_task(seed))
        return inner

    def _initial_task(self, seed: int | None) -> Any:
        """The task of a first reset that names none: drawn from the space (from ``seed`` when given)."""
        if seed is None:
            task = self.task_space.sample()
        else:  # reproducible under a seeded reset, without touching the (possibly shared) space's generator
            encoded = self.task_space.sample_encoded(1, rng=np.random.default_rng(seed))[0]
            task = self.task_space.decode(encoded)
        logger.debug("%s: no task given before the first reset; sampled %r", type(self).__name__, task)
        return task

    def _checked_progress(self, raw: Any, who: str = "") -> float:
        """``check_progress`` with the subclass named in errors and a one-time warning when clipping."""
        progress = check_progress(raw, source=f"{type(self).__name__}.task_progress")
        if progress != raw and not self._warned_clip and not isinstance(raw, (bool, np.bool_)):
            self._warned_clip = True
            logger.warning(
                "%s.task_progress returned %r%s outside [0, 1]; clipped to %r (reported once)",
                type(self).__name__, raw, who, progress,
            )
        return progress


class TaskWrapper(TaskSwitching, gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Base class of Gymnasium task wrappers (see the module docstring for the reset protocol).

    Args:
        env: The environment to wrap.
        task_space: The tasks this env can play.
        task_observation: Whether to add the task's encoding to the observation (``Dict`` observation).

    Attributes:
        task_space: The task space given at construction.

    The constructor arguments are recorded (:class:`gymnasium.utils.RecordConstructorArgs`, without a deep
    copy: a re-created env shares the task space) so ``env.spec.make()`` can rebuild the wrapper stack. A
    subclass with other constructor arguments should call ``RecordConstructorArgs.__init__(self, ...)`` with
    them before ``super().__init__`` (the first call wins).
    """

    def __init__(self, env: gym.Env, task_space: TaskSpace, *, task_observation: bool = False) -> None:
        if not isinstance(env, gym.Env):
            raise TypeError(f"env must be a gymnasium.Env, got {type(env).__name__}")
        gym.utils.RecordConstructorArgs.__init__(
            self, task_space=task_space, task_observation=task_observation, _disable_deepcopy=True
        )
        self._init_task_state(task_space, task_observation)
        gym.Wrapper.__init__(self, env)
        self._default_progress = type(self).task_progress is TaskWrapper.task_progress
        # a step whose progress is a subclass's task_progress, or whose observation carries the task, takes
        # the general path (_step_general); the common step only annotates the info dict
        self._general_step = not self._default_progress or self.task_observation
        self._inner_info: Any = None  # the info dict the env returned last (to see whether it reuses it)

    def task_progress(
        self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool, info: dict[str, Any]
    ) -> float:
        """Progress on the current task in ``[0, 1]`` after a step. Default: ``info.get("success", 0.0)``.

        Values outside ``[0, 1]`` are clipped by :meth:`step` (logged once); NaN raises ``ValueError``.
        """
        return info.get("success", 0.0)  # converted and checked by step() via check_progress

    # -- spaces -------------------------------------------------------------------------------------
    @property
    def observation_space(self) -> spaces.Space:
        """The inner observation space, or ``Dict(obs=..., task=...)`` when ``task_observation``."""
        if self._observation_space is not None:
            return self._observation_space
        if self.task_observation:
            # Built lazily so subclasses may set up what task_observation_space needs after super().__init__.
            self._observation_space = spaces.Dict(
                {"obs": self.env.observation_space, "task": self.task_observation_space}
            )
            return self._observation_space
        return self.env.observation_space

    @observation_space.setter
    def observation_space(self, space: spaces.Space) -> None:
        self._observation_space = space

    # -- the Gymnasium API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset, switching to ``options["task"]`` when given (see the module docstring)."""
        inner_options = self._take_task_option(seed, options)
        obs, info = self._reset_inner(seed=seed, options=inner_options)
        info = dict(info)
        info["task"] = self._current_task
        info["task_progress"] = 0.0
        if self.task_observation:
            obs = self._observe(obs)
        return obs, info

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Reset the inner env (a hook for subclasses that must pass extra reset options)."""
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the inner env and add ``info["task"]`` and ``info["task_progress"]``."""
        # the common case (the default progress, a fresh info dict, no task observation) annotates the info
        # in place and returns the env's own tuple
        out = self.env.step(action)
        try:
            info = out[4]
            if info is self._inner_info or self._general_step:
                return self._step_general(out)
            self._inner_info = info
            progress = info.get("success")
        except (TypeError, IndexError, KeyError, AttributeError):
            raise step_result_error(self.env, out) from None
        info["task"] = self._current_task
        info["task_progress"] = 0.0 if progress is None else self._step_progress(progress)
        return out

    def _step_general(self, out: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The step of a subclass's progress or task observation, or of an env that reuses its info dict."""
        obs, rew, term, trunc, info = out
        if info is self._inner_info:  # the env reuses its info dict: leave it as it was
            info = dict(info)
        else:  # annotated in place, as Gymnasium's own wrappers do
            self._inner_info = info
        if self._default_progress:
            progress = info.get("success")
        else:
            progress = self.task_progress(obs, rew, term, trunc, info)
        info["task"] = self._current_task
        info["task_progress"] = 0.0 if progress is None else self._step_progress(progress)
        if self.task_observation:
            obs = self._observe(obs)
        return obs, rew, term, trunc, info

    def _step_progress(self, progress: Any) -> float:
        """A step's progress: a float in [0, 1] as it is, anything else checked."""
        if isinstance(progress, float) and 0.0 <= progress <= 1.0:
            return progress
        return self._checked_progress(progress)

    def _observe(self, obs: Any) -> Any:
        if not self.task_observation:
            return obs
        return {"obs": obs, "task": self.encode_task_observation(self._current_task)}
