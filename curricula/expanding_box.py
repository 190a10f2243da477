"""Expanding box: sample uniformly from a sub-range of a box that widens toward the full box.

A simulated-annealing style curriculum (named after Kirkpatrick, Gelatt & Vecchi, 1983, "Optimization by
Simulated Annealing"; the "expanding sampling range" curriculum of the Syllabus paper, Sullivan et al.,
Section 4 and the Cart Pole experiment of Supplementary E.1). With the full box ``[L, H]`` and a start box
``[l_0, h_0] ⊆ [L, H]``, the current range at expansion fraction :math:`f \\in [0, 1]` is

.. math::

    l(f) = l_0 + f\\,(L - l_0), \\qquad h(f) = h_0 + f\\,(H - h_0),

and tasks are drawn :math:`\\tau \\sim U[l(f), h(f)]` independently per dimension, in one vectorised call.
The fraction comes from one of three drivers:

* ``duration=N`` (linear schedule): :math:`f = \\min(1, c / N)` with ``c`` the episode (or step) count;
* ``schedule=fn``: :math:`f = fn(c)`, which must return a number in ``[0, 1]`` (else ``ValueError``);
* ``threshold=θ`` (progress driven): :math:`f = \\min(1, g \\cdot \\delta)` with ``g`` the number of
  growths; one growth happens each time ``window`` episodes have finished since the last growth and their
  mean final progress is at least ``θ`` (the window then starts afresh at the new range).

The papers give no defaults for the expansion rate; ``step_size=0.1`` and ``window=100`` (the default
return window of :class:`~magister.curricula.sequential.Sequential`) are this library's choices.

>>> from magister.task_spaces.box import Box
>>> cur = ExpandingBox(Box(-2.0, 2.0), start_low=-0.5, start_high=0.5, duration=100, seed=0)
>>> for _ in range(50): cur.update_on_episode(1.0, 10, (0.0,), 1.0)
>>> cur.current_range()
(array([-1.25]), array([1.25]))
>>> all(-1.25 <= t[0] < 1.25 for t in cur.sample(100))
True
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from .base import Curriculum, check_finite

logger = logging.getLogger(__name__)

__all__ = ["ExpandingBox"]

_UNITS = ("episodes", "steps")
#: metrics() reports the per-dimension range of at most this many (flattened) dimensions.
_MAX_METRIC_DIMS = 16


class ExpandingBox(Curriculum):
    """Uniform sampling over a range that grows from ``[start_low, start_high]`` to the full box.

    Parameters
    ----------
    task_space : TaskSpace
        A box-like space with finite ``low``/``high`` arrays (``Box``); its encoded task is the flattened
        tuple of floats. Any other space raises ``TypeError``.
    start_low, start_high : float or array_like
        The start range, broadcast to the box's shape; must satisfy
        ``low <= start_low <= start_high <= high``.
    duration : int, optional
        Linear schedule: the full box is reached after ``duration`` episodes (or steps, see ``unit``).
    schedule : callable, optional
        ``schedule(count) -> fraction in [0, 1]``, evaluated on the episode (or step) count.
    threshold : float, optional
        Progress driven: grow by ``step_size`` whenever the mean final progress of ``window`` episodes
        reaches ``threshold``.
    step_size : float
        Fraction of the way added per growth (progress-driven mode), in ``(0, 1]``.
    window : int
        Episodes per progress window (progress-driven mode).
    unit : {"episodes", "steps"}
        What ``duration``/``schedule`` count. Steps are the summed lengths of finished episodes.
    seed : int, optional
        Seed of the sampling generator.

    Exactly one of ``duration``, ``schedule`` and ``threshold`` must be given.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        start_low: float | np.ndarray,
        start_high: float | np.ndarray,
        *,
        duration: int | None = None,
        schedule: Callable[[int], float] | None = None,
        threshold: float | None = None,
        step_size: float = 0.1,
        window: int = 100,
        unit: str = "episodes",
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if not (hasattr(task_space, "low") and hasattr(task_space, "high")):
            raise TypeError(f"ExpandingBox needs a box space with low/high arrays (Box), got {task_space!r}")
        low = np.asarray(task_space.low, dtype=np.float64)
        high = np.asarray(task_space.high, dtype=np.float64)
        if low.shape != high.shape or not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(f"ExpandingBox needs finite low/high of one shape, got low={low}, high={high}")
        self.shape = low.shape
        self.low, self.high = low.ravel(), high.ravel()
        self.start_low = self._broadcast("start_low", start_low)
        self.start_high = self._broadcast("start_high", start_high)
        lo0, hi0 = self.start_low, self.start_high
        bad = ~((self.low <= lo0) & (lo0 <= hi0) & (hi0 <= self.high))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"start range must satisfy low <= start_low <= start_high <= high; at flat index {i}: "
                f"low={self.low[i]}, start_low={self.start_low[i]}, start_high={self.start_high[i]}, "
                f"high={self.high[i]}"
            )
        given = (("duration", duration), ("schedule", schedule), ("threshold", threshold))
        modes = [name for name, v in given if v is not None]
        if len(modes) != 1:
            raise ValueError(f"give exactly one of duration, schedule or threshold, got {modes or 'none'}")
        self.mode = modes[0]
        if unit not in _UNITS:
            raise ValueError(f"unit must be one of {_UNITS}, got {unit!r}")
        self.unit = unit
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, (int, np.integer)) or duration < 1
        ):
            raise ValueError(f"duration must be a positive int, got {duration!r}")
        if schedule is not None and not callable(schedule):
            raise TypeError(f"schedule must be callable(count) -> fraction, got {type(schedule).__name__}")
        if threshold is not None:
            threshold = check_finite("threshold", threshold)
        if not 0.0 < float(step_size) <= 1.0:
            raise ValueError(f"step_size must be in (0, 1], got {step_size!r}")
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        self.duration = None if duration is None else int(duration)
        self.schedule = schedule
        self.threshold = threshold
        self.step_size = float(step_size)
        self.window = int(window)
        self.growths = 0
        self._progress: deque[float] = deque(maxlen=self.window)

    def _broadcast(self, name: str, value: Any) -> np.ndarray:
        arr = np.asarray(value, dtype=np.float64)
        try:
            arr = np.broadcast_to(arr, self.shape)
        except ValueError:
            raise ValueError(
                f"{name} has shape {arr.shape}, expected a shape broadcastable to {self.shape}"
            ) from None
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return arr.ravel().copy()

    # -- the range ----------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """The episode (or step) count that drives ``duration``/``schedule``."""
        return self.num_episodes if self.unit == "episodes" else self.num_steps

    @property
    def fraction(self) -> float:
        """How far the range has expanded, from 0 (start box) to 1 (full box)."""
        if self.mode == "duration":
            return min(1.0, self.count / self.duration)  # type: ignore[operator]
        if self.mode == "schedule":
            f = float(self.schedule(self.count))  # type: ignore[misc]
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"schedule({self.count}) returned {f!r}, expected a fraction in [0, 1]")
            return f
        return min(1.0, self.growths * self.step_size)

    def current_range(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` of the current sampling range, in the box's shape."""
        f = self.fraction
        if f >= 1.0:
            return self.low.reshape(self.shape).copy(), self.high.reshape(self.shape).copy()
        # a + f (b - a) is monotone in f even after rounding and exact where a == b, so ranges are nested and
        # always contain the start box; the max/min only absorb rounding past the box's own bounds.
        lo = np.maximum(self.start_low + f * (self.low - self.start_low), self.low)
        hi = np.minimum(self.start_high + f * (self.high - self.start_high), self.high)
        return lo.reshape(self.shape), hi.reshape(self.shape)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks uniform in the current range (one ``rng.uniform`` call), as tuples of floats."""
        self._check_k(k)
        lo, hi = self.current_range()
        draws = self.rng.uniform(lo.ravel(), hi.ravel(), size=(int(k), lo.size))
        self.num_sampled += int(k)
        return [tuple(row) for row in draws.tolist()]

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Count the episode; in progress-driven mode, add its final progress to the window."""
        prog = check_finite("progress", progress)
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"length must be a non-negative int, got {length!r}")
        self.num_episodes += 1
        self.num_steps += int(length)
        if self.mode != "threshold":
            return
        self._progress.append(prog)
        if len(self._progress) == self.window and float(np.mean(self._progress)) >= self.threshold:
            self.growths += 1
            self._progress.clear()
            logger.info("ExpandingBox: growth %d, fraction now %.3f", self.growths, self.fraction)

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        lo, hi = self.current_range()
        out["expanding_box/fraction"] = float(self.fraction)
        out["expanding_box/mean_width"] = float(np.mean(hi - lo))
        for i, (a, b) in enumerate(zip(lo.ravel()[:_MAX_METRIC_DIMS], hi.ravel()[:_MAX_METRIC_DIMS])):
            out[f"expanding_box/low_{i}"] = float(a)
            out[f"expanding_box/high_{i}"] = float(b)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        lo, hi = self.current_range()
        state.update(
            growths=self.growths,
            progress=list(self._progress),
            fraction=float(self.fraction),
            range_low=lo.ravel().tolist(),
            range_high=hi.ravel().tolist(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.growths = int(state["growths"])
        self._progress = deque((float(x) for x in state["progress"]), maxlen=self.window)
        lo, _ = self.current_range()
        if len(state["range_low"]) != lo.size:
            raise ValueError(f"state_dict range has {len(state['range_low'])} dims, this box has {lo.size}")

    def __repr__(self) -> str:
        return f"ExpandingBox({self.task_space!r}, mode={self.mode!r}, fraction={self.fraction:.3f})"
