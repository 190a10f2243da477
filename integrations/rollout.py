"""The tasks of a rollout, recorded from the infos a vector env returns: for CleanRL-style loops.

A PPO-style loop keeps ``T x N`` buffers (``num_steps`` x ``num_envs``) of observations, rewards, values and
done flags. :class:`RolloutTasks` is the buffer of what magister adds to each step: the encoded task the step
was played on and its train flag (False for the evaluation-only episodes PLR⊥, ACCEL and task filters send).
It reads both from the ``info`` that ``envs.step`` returns, so one call per step fills it:

* :meth:`RolloutTasks.record` after each ``envs.step``: the step's task is ``info["task"]``, except for an
  env whose episode ended at that step under ``SAME_STEP`` autoreset, where ``info`` already belongs to the
  next episode and the finished episode's task is in ``info["final_info"]`` (see the README's "Every info
  carries ...");
* :meth:`RolloutTasks.train_indices` (the flat indices of the steps to train on, as ``reshape(-1)`` of a
  ``T x N`` buffer orders them) or :meth:`RolloutTasks.loss_weights` (per-step weights for weighted
  losses) mask evaluation-only steps out of the gradients;
* :meth:`RolloutTasks.feed_scores` gives a PLR-family curriculum its value scores after GAE
  (:func:`~magister.integrations.scores.feed_scores` with the recorded tasks and the loop's done convention).

>>> import numpy as np
>>> tasks = RolloutTasks(num_steps=2, num_envs=2, done_convention="before_step")
>>> tasks.record(0, {"task": np.array([3, 4]), "task_train": np.array([True, False])})
>>> final = {"task": np.array([None, 4], dtype=object), "task_train": np.array([False, False])}
>>> info = {"task": np.array([3, 5]), "task_train": np.array([True, True]),
...         "final_info": final, "_final_info": np.array([False, True])}  # env 1's episode on 4 ended
>>> tasks.record(1, info)
>>> tasks.tasks.tolist(), tasks.train.tolist()
([[3, 4], [3, 4]], [[True, False], [True, False]])
>>> tasks.train_indices().tolist(), tasks.loss_weights().tolist()
([0, 2], [[2.0, 0.0], [2.0, 0.0]])
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .scores import DONE_CONVENTIONS, DoneConvention, feed_scores

logger = logging.getLogger(__name__)

__all__ = ["RolloutTasks"]


class RolloutTasks:
    """The encoded task and train flag of every step of a ``num_steps x num_envs`` rollout.

    Args:
        num_steps: Steps per rollout (``T``, CleanRL's ``num_steps``).
        num_envs: Environments of the vector env (``N``).
        done_convention: What the loop's ``dones[t]`` means, passed on to
            :func:`~magister.integrations.scores.feed_scores`: ``"before_step"`` for CleanRL's ``dones``
            buffer (filled with ``next_done`` before each step), ``"ended_at"`` when ``dones[t]`` is the flag
            step ``t`` returned.

    The buffers are reused from rollout to rollout: :meth:`record` overwrites row ``step``.
    """

    def __init__(self, num_steps: int, num_envs: int, *, done_convention: DoneConvention) -> None:
        for name, value in (("num_steps", num_steps), ("num_envs", num_envs)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if done_convention not in DONE_CONVENTIONS:
            raise ValueError(f"done_convention must be one of {DONE_CONVENTIONS}, got {done_convention!r}: "
                             "'before_step' for CleanRL's dones buffer, 'ended_at' for the flags each step "
                             "returned")
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.done_convention = done_convention
        self.tasks: np.ndarray = np.zeros((self.num_steps, self.num_envs), dtype=np.int64)
        """``(T, N)`` encoded tasks (int64, or objects for tasks that are not ints)."""
        self.train: np.ndarray = np.ones((self.num_steps, self.num_envs), dtype=bool)
        """``(T, N)`` train flags: False where the step belongs to an evaluation-only episode."""
        self._recorded = np.zeros(self.num_steps, dtype=bool)

    def _column(self, info: dict[str, Any], key: str) -> np.ndarray:
        """``info[key]`` for every env, the finished episode's value where ``final_info`` holds one."""
        if key not in info:
            raise KeyError(f"the step's info has no {key!r} (keys: {sorted(info)}): wrap every env in a "
                           "GymnasiumSyncWrapper, which puts task, task_train and task_progress into info")
        value = np.asarray(info[key])
        if value.shape != (self.num_envs,):
            raise ValueError(f"info[{key!r}] has shape {value.shape}, expected ({self.num_envs},): one entry "
                             "per env of the vector env")
        final, ended = info.get("final_info"), info.get("_final_info")
        if isinstance(final, dict) and ended is not None and np.any(ended):
            # SAME_STEP autoreset: the ending step's info belongs to the next episode; the finished one's
            # entries are in final_info (placeholders where _final_info is False)
            value = value.copy()
            done = np.flatnonzero(np.asarray(ended, dtype=bool))
            value[done] = np.asarray(final[key])[done]
        return value

    def record(self, step: int, info: dict[str, Any]) -> None:
        """Store the task and train flag of step ``step`` from the ``info`` its ``envs.step`` returned."""
        valid = not isinstance(step, bool) and isinstance(step, (int, np.integer))
        if not (valid and 0 <= step < self.num_steps):
            raise IndexError(f"step must be an int in [0, {self.num_steps}), got {step!r}")
        task, train = self._column(info, "task"), self._column(info, "task_train")
        if task.dtype.kind not in "iu" and self.tasks.dtype != object:
            self.tasks = self.tasks.astype(object)  # tasks that are not ints (tuples of a Box space, ...)
        self.tasks[step] = task
        self.train[step] = train.astype(bool)
        self._recorded[step] = True

    def _check_full(self) -> None:
        if not self._recorded.all():
            missing = np.flatnonzero(~self._recorded).tolist()
            raise ValueError(f"steps {missing} of the rollout were never recorded: call record(step, info) "
                             "after every envs.step")

    def train_indices(self) -> np.ndarray:
        """Flat indices (``t * N + n``, the order of ``buffer.reshape(-1)``) of the steps to train on."""
        self._check_full()
        return np.flatnonzero(self.train.reshape(-1))

    def loss_weights(self) -> np.ndarray:
        """``(T, N)`` float32 weights: ``B / M`` on the ``M`` training steps of ``B = T * N``, 0 elsewhere.

        The mean of ``loss * weight`` over a uniformly drawn minibatch is then an unbiased estimate of the
        mean loss over the training steps alone (all weights are 0 when no step trains).
        """
        self._check_full()
        m = int(self.train.sum())
        if m == 0:
            return np.zeros(self.train.shape, dtype=np.float32)
        return (self.train * (self.train.size / m)).astype(np.float32)

    def feed_scores(
        self, curriculum: Any, rewards: Any, values: Any, dones: Any, bootstrap_value: Any,
        next_done: Any = None, **kwargs: Any,
    ) -> dict[str, float]:
        """:func:`~magister.integrations.scores.feed_scores` of this rollout with the recorded tasks.

        ``next_done`` (the flags the rollout's last ``envs.step`` returned) is passed with the
        ``"before_step"`` convention only; ``kwargs`` (``truncated``, ``final_values``, ``partial``) pass on.
        """
        if self.done_convention == "before_step":
            kwargs["next_done"] = next_done
        elif next_done is not None:
            raise TypeError("next_done is only used with done_convention='before_step'")
        self._check_full()
        return feed_scores(curriculum, rewards, values, dones, bootstrap_value, self.tasks,
                           done_convention=self.done_convention, **kwargs)
