"""Domain randomization: tasks drawn uniformly at random.

The baseline every curriculum is compared against (Tobin et al., 2017, "Domain Randomization for Transferring
Deep Neural Networks from Simulation to the Real World"; the DR baseline of the Syllabus paper, Sullivan et
al.): :math:`P(\\tau) = 1 / |T|` over the space (or over an explicit list of tasks), and the space's own
uniform measure for continuous spaces. Feedback is ignored.

>>> from magister.task_spaces.discrete import Discrete
>>> cur = DomainRandomization(Discrete(4), seed=0)
>>> len(cur.sample(5)), cur.distribution().tolist()
(5, [0.25, 0.25, 0.25, 0.25])
>>> sorted(set(DomainRandomization(Discrete(4), tasks=[1, 3], seed=0).sample(50)))
[1, 3]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from .base import Curriculum

logger = logging.getLogger(__name__)

__all__ = ["DomainRandomization"]


class DomainRandomization(Curriculum):
    """Uniform sampling over ``task_space``, or over ``tasks`` (a list of its encoded tasks) when given.

    Sampling is one vectorised call: ``task_space.sample_encoded(k, rng=self.rng)`` (or one
    ``rng.integers`` call over ``tasks``).
    """

    def __init__(
        self, task_space: TaskSpace, tasks: Sequence[EncodedTask] | None = None, *, seed: int | None = None
    ) -> None:
        super().__init__(task_space, seed=seed)
        if tasks is not None:
            tasks = [task_space.check_encoded(t) for t in tasks]
            if not tasks:
                raise ValueError("tasks must be a non-empty list of encoded tasks, got an empty list")
        self.tasks = tasks

    def sample(self, k: int = 1) -> list[EncodedTask]:
        self._check_k(k)
        self.num_sampled += int(k)
        if self.tasks is None:
            return self.task_space.sample_encoded(int(k), rng=self.rng)
        return [self.tasks[i] for i in self.rng.integers(len(self.tasks), size=int(k))]

    def distribution(self) -> np.ndarray:
        """Uniform over ``task_space.encoded_tasks`` (or over ``tasks``).

        Raises ``NotImplementedError`` for a space that is not enumerable (``num_tasks is None``).
        """
        if self.task_space.num_tasks is None:
            raise NotImplementedError(f"{self.task_space!r} is not enumerable; no distribution over it")
        all_tasks = self.task_space.encoded_tasks
        if self.tasks is None:
            return np.full(len(all_tasks), 1.0 / len(all_tasks))
        where = {task_key(t): i for i, t in enumerate(all_tasks)}
        p = np.zeros(len(all_tasks))
        np.add.at(p, [where[task_key(t)] for t in self.tasks], 1.0 / len(self.tasks))
        return p

    def metrics(self) -> dict[str, float]:
        """Counters plus the entropy and largest probability of the uniform distribution, computed in closed
        form (``log n`` and ``1 / n``) so that huge spaces never build a probability vector."""
        out: dict[str, float] = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
        }
        if self.tasks is None and self.task_space.num_tasks is not None:
            n = int(self.task_space.num_tasks)
            out["curriculum/entropy"], out["curriculum/max_prob"] = float(np.log(n)), 1.0 / n
        elif self.tasks is not None:
            _, counts = np.unique([repr(task_key(t)) for t in self.tasks], return_counts=True)
            p = counts / counts.sum()
            out["curriculum/entropy"] = float(-(p * np.log(p)).sum())
            out["curriculum/max_prob"] = float(p.max())
        return out

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        self.num_episodes += 1
        self.num_steps += int(length)
