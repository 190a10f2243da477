"""Constant curriculum: every sample is the same task.

The degenerate curriculum, used for single-task training and as the building block of
:class:`~magister.curricula.sequential.Sequential` (a stage given as one task becomes a ``Constant``), as in
the Syllabus paper (Sullivan et al.), Supplementary A.4. Its distribution is the point mass
:math:`P(\\tau) = [\\tau = \\tau_0]`.

>>> from magister.task_spaces.discrete import Discrete
>>> cur = Constant(Discrete(3), 2)
>>> cur.sample(3), cur.distribution().tolist()
([2, 2, 2], [0.0, 0.0, 1.0])
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from .base import Curriculum

logger = logging.getLogger(__name__)

__all__ = ["Constant"]


class Constant(Curriculum):
    """Always sample ``task``.

    Parameters
    ----------
    task_space : TaskSpace
        The space ``task`` belongs to.
    task : encoded task
        The task to return; validated with ``task_space.check_encoded`` (``ValueError`` if it is not a task
        of the space).
    seed : int, optional
        Unused for sampling (nothing is random), kept for a uniform constructor.
    """

    def __init__(self, task_space: TaskSpace, task: EncodedTask, *, seed: int | None = None) -> None:
        super().__init__(task_space, seed=seed)
        self.task = task_space.check_encoded(task)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` copies of the task."""
        self._check_k(k)
        self.num_sampled += int(k)
        return [self.task] * int(k)

    def distribution(self) -> np.ndarray:
        """One-hot over ``task_space.encoded_tasks`` (``NotImplementedError`` for unbounded spaces)."""
        if self.task_space.num_tasks is None:
            raise NotImplementedError(f"{self.task_space!r} is not enumerable; no distribution over it")
        tasks = self.task_space.encoded_tasks
        key = task_key(self.task)
        p = np.zeros(len(tasks), dtype=np.float64)
        for i, t in enumerate(tasks):
            if task_key(t) == key:
                p[i] = 1.0
                return p
        raise ValueError(f"task {self.task!r} is not among the encoded tasks of {self.task_space!r}")

    def metrics(self) -> dict[str, float]:
        """Counters plus entropy 0 and largest probability 1 (a point mass), without building a vector."""
        out: dict[str, float] = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
        }
        if self.task_space.num_tasks is not None:
            out["curriculum/entropy"], out["curriculum/max_prob"] = 0.0, 1.0
        return out

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Count the episode (the task never changes)."""
        self.num_episodes += 1
        self.num_steps += int(length)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["task"] = self.task
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task = self.task_space.check_encoded(state["task"])

    def __repr__(self) -> str:
        return f"Constant({self.task!r})"
