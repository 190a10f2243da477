"""The teacher-only toy environment of the ALP-GMM paper's code (Portelas et al., CoRL 2019), no RL.

The task space is the unit cube :math:`[0, 1]^d` cut into ``cells`` equal cells per dimension. Each cell has
a competence in ``[0, cap]``. Playing a task adds 1 to the competence of the cell it falls in, but only
when that cell is the origin cell ``(0, ..., 0)`` or when a neighbouring cell (one step along one axis)
already has a competence of at least ``threshold``; the teacher's reward is the cell's competence divided
by ``cap``. So progress spreads outward from the origin, and a teacher that keeps sampling where its reward
changes masters cells faster than uniform sampling, which mostly lands on cells it cannot learn yet. The
score is the share of cells whose competence is above ``threshold``.

The defaults are the reference code's: 10 cells per dimension, cap 100, threshold 75, 20,000 episodes.

>>> import numpy as np
>>> env = ToyEnv(dims=2)
>>> env.play(np.array([0.05, 0.05])), env.play(np.array([0.95, 0.95]))  # the origin cell learns; (9, 9) not
(0.01, 0.0)
>>> env.mastered()
0.0
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["ToyEnv", "play"]


class ToyEnv:
    """Competence over a grid of cells in :math:`[0, 1]^d` (see the module docstring).

    Args:
        dims: number of dimensions ``d``.
        cells: cells per dimension.
        cap: the competence a cell can reach.
        threshold: the competence a neighbour needs before a cell can learn, and above which a cell counts
            as mastered.
    """

    def __init__(self, dims: int = 2, cells: int = 10, cap: int = 100, threshold: int = 75) -> None:
        if dims < 1 or cells < 1:
            raise ValueError(f"ToyEnv needs dims >= 1 and cells >= 1, got dims={dims}, cells={cells}")
        if not 0 < threshold < cap:
            raise ValueError(f"ToyEnv needs 0 < threshold < cap, got threshold={threshold}, cap={cap}")
        self.dims, self.cells, self.cap, self.threshold = int(dims), int(cells), int(cap), int(threshold)
        self.competence = np.zeros((self.cells,) * self.dims, dtype=np.int64)

    def cell(self, x: Any) -> tuple[int, ...]:
        """The cell a task falls in."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.shape != (self.dims,) or not np.all((x >= 0.0) & (x <= 1.0)):
            raise ValueError(f"a ToyEnv task is {self.dims} numbers in [0, 1], got {x.tolist()!r}")
        return tuple(np.minimum((x * self.cells).astype(np.int64), self.cells - 1).tolist())

    def _can_learn(self, cell: tuple[int, ...]) -> bool:
        if not any(cell):
            return True
        for axis, step in itertools.product(range(self.dims), (-1, 1)):
            n = list(cell)
            n[axis] += step
            if 0 <= n[axis] < self.cells and self.competence[tuple(n)] >= self.threshold:
                return True
        return False

    def play(self, x: Any) -> float:
        """Play task ``x``: the cell learns if it can; returns its competence over ``cap``."""
        cell = self.cell(x)
        if self._can_learn(cell):
            self.competence[cell] = min(self.cap, self.competence[cell] + 1)
        return float(self.competence[cell]) / self.cap

    def mastered(self) -> float:
        """The share of cells whose competence is above ``threshold``."""
        return float((self.competence > self.threshold).mean())


def play(curriculum: Any, env: ToyEnv, episodes: int, every: int = 1000) -> list[float]:
    """Let ``curriculum`` (over a ``Box`` of ``env.dims`` dimensions in [0, 1]) teach ``env`` for
    ``episodes`` episodes, one task at a time; returns the mastered share after every ``every`` episodes.

    Each episode is one task from ``curriculum.sample()``, played once; its reward goes back as the
    episode's return and progress (length 1)."""
    scores = []
    for n in range(1, episodes + 1):
        task = curriculum.sample(1)[0]
        reward = env.play(task)
        curriculum.update_on_episode(reward, 1, task, reward)
        if n % every == 0:
            scores.append(env.mastered())
    return scores
