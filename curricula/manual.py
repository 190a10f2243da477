"""Manual (scheduled) curriculum: a hand-written task distribution that changes with training time.

The manually designed curricula of the Syllabus paper (Sullivan et al., Section 4: "tools for manually
designing curricula"): the distribution over the enumerable task space is a function of a training clock
``c`` (finished episodes, or environment steps summed over finished episodes),

.. math::

    P_c(\\tau) = s(c)[\\tau]    \\quad\\text{(a callable schedule), or}\\quad
    P_c = p_j,\\; j = \\max\\{\\, i : c_i \\le c \\,\\}   \\quad\\text{(breakpoints } (c_i, p_i),\\ c_0 = 0).

Every distribution is checked: the right length (``task_space.num_tasks``), finite, non-negative and
summing to 1 (within ``1e-6``); anything else raises ``ValueError`` saying which check failed. Breakpoint
distributions are checked at construction, a callable's output every time it is used.

>>> from magister.task_spaces.discrete import Discrete
>>> cur = Manual(Discrete(3), [(0, [1.0, 0.0, 0.0]), (2, [0.0, 0.5, 0.5])], seed=0)
>>> cur.sample(4)
[0, 0, 0, 0]
>>> cur.update_on_episode(1.0, 10, 0, 1.0); cur.update_on_episode(1.0, 10, 0, 1.0)
>>> cur.distribution().tolist()
[0.0, 0.5, 0.5]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from .base import Curriculum

logger = logging.getLogger(__name__)

__all__ = ["Manual"]

_UNITS = ("episodes", "steps")
#: Tolerance on ``sum(p) == 1``.
SUM_TOLERANCE = 1e-6


class Manual(Curriculum):
    """Sample from a distribution given as a function of the episode (or step) count.

    Parameters
    ----------
    task_space : TaskSpace
        An enumerable space (``num_tasks`` not None; ``TypeError`` otherwise). Probability vectors are over
        ``task_space.encoded_tasks``, in that order.
    schedule : callable or list of (int, array_like)
        ``schedule(count) -> probability vector``, or breakpoints ``[(start_count, distribution), ...]`` with
        strictly increasing start counts, the first being 0; breakpoint ``i`` is used while
        ``start_i <= count < start_{i+1}``.
    unit : {"episodes", "steps"}
        The clock: finished episodes, or the summed lengths of finished episodes.
    seed : int, optional
        Seed of the sampling generator.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        schedule: Callable[[int], Any] | Sequence[tuple[int, Any]],
        *,
        unit: str = "episodes",
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if task_space.num_tasks is None:
            raise TypeError(f"Manual needs an enumerable task space (num_tasks not None), got {task_space!r}")
        if unit not in _UNITS:
            raise ValueError(f"unit must be one of {_UNITS}, got {unit!r}")
        self.unit = unit
        self.num_tasks = int(task_space.num_tasks)
        self._tasks = task_space.encoded_tasks
        self._fn: Callable[[int], Any] | None = None
        self._starts = np.zeros(0, dtype=np.int64)
        self._dists: list[np.ndarray] = []
        if callable(schedule):
            self._fn = schedule
        elif isinstance(schedule, Sequence) and not isinstance(schedule, (str, bytes)):
            self._init_breakpoints(schedule)
        else:
            raise TypeError(
                "schedule must be callable(count) -> probabilities or a list of "
                "(start_count, probabilities), "
                f"got {type(schedule).__name__}"
            )

    def _init_breakpoints(self, schedule: Sequence[tuple[int, Any]]) -> None:
        if len(schedule) == 0:
            raise ValueError("schedule must have at least one (start_count, distribution) breakpoint")
        starts = []
        for i, item in enumerate(schedule):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise ValueError(f"breakpoint {i} must be a (start_count, distribution) pair, got {item!r}")
            start, dist = item
            if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
                raise ValueError(f"breakpoint {i}: start_count must be a non-negative int, got {start!r}")
            if i == 0 and start != 0:
                raise ValueError(
                    f"the first breakpoint must start at count 0 (nothing to sample before it), got {start}"
                )
            if i > 0 and start <= starts[-1]:
                raise ValueError(
                    f"breakpoint {i}: start counts must be strictly increasing, "
                    f"got {start} after {starts[-1]}"
                )
            starts.append(int(start))
            self._dists.append(self._check(dist, f"breakpoint {i} (start {start})"))
        self._starts = np.asarray(starts, dtype=np.int64)

    def _check(self, dist: Any, where: str) -> np.ndarray:
        try:
            p = np.asarray(dist, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: distribution {dist!r} is not a vector of numbers") from None
        if p.shape != (self.num_tasks,):
            raise ValueError(f"{where}: distribution has shape {p.shape}, expected ({self.num_tasks},), one "
                             f"probability per task of {self.task_space!r}")
        if not np.all(np.isfinite(p)):
            raise ValueError(f"{where}: distribution has non-finite entries: {p.tolist()}")
        if np.any(p < 0):
            neg = np.flatnonzero(p < 0).tolist()
            raise ValueError(f"{where}: distribution has negative entries at positions {neg}")
        total = float(p.sum())
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise ValueError(f"{where}: distribution sums to {total!r}, expected 1")
        return p / total

    # -- the schedule -------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """The clock the schedule reads: episodes or steps so far."""
        return self.num_episodes if self.unit == "episodes" else self.num_steps

    def distribution(self) -> np.ndarray:
        """The current distribution over ``task_space.encoded_tasks``."""
        c = self.count
        if self._fn is not None:
            return self._check(self._fn(c), f"schedule({c})")
        j = int(np.searchsorted(self._starts, c, side="right")) - 1
        return self._dists[j].copy()

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks drawn from :meth:`distribution` (one ``rng.choice`` call)."""
        self._check_k(k)
        idx = self.rng.choice(self.num_tasks, size=int(k), p=self.distribution())
        self.num_sampled += int(k)
        return [self._tasks[i] for i in idx.tolist()]

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Advance the clock by one episode of ``length`` steps."""
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"length must be a non-negative int, got {length!r}")
        self.num_episodes += 1
        self.num_steps += int(length)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["unit"] = self.unit
        state["breakpoints"] = self._starts.tolist()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state["unit"] != self.unit or list(state["breakpoints"]) != self._starts.tolist():
            logger.warning(
                "Manual: loading a state saved with unit=%r, breakpoints=%s into unit=%r, breakpoints=%s",
                state["unit"], state["breakpoints"], self.unit, self._starts.tolist(),
            )
