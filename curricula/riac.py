"""RIAC: Robust Intelligent Adaptive Curiosity (Baranes & Oudeyer, 2009), as in the teacher of Portelas et al.

*R-IAC: Robust Intrinsically Motivated Exploration and Active Learning* (Baranes & Oudeyer, IEEE TAMD 2009)
cuts the parameter space into boxes by a tree of splits and samples where the learner's performance changes.
This file follows the RIAC teacher of the ALP-GMM paper's code (Portelas et al., *Teacher algorithms for
curriculum learning of Deep RL in continuously parameterized environments*, CoRL 2019, teachDeepRL), which
TeachMyAgent (Romac et al., ICML 2021) reuses.

**Boxes.** The root is the whole parameter box ``[low, high]`` of :class:`~._continuous.ParamBox`; a split
cuts a box along one dimension ``j`` at ``c`` into ``{x_j < c}`` and ``{x_j >= c}``. Each episode's
(task, signal) pair is appended to every box containing the task (the root and each box down to a leaf);
a box keeps its last ``max_region_size + 1`` pairs. With ``r_1 .. r_n`` the last
``n = min(|box|, max_region_size)`` signals of a box and ``h = floor(n / 2)``, its absolute learning progress
is the gap between the means of the older and the newer half of that window (0 while ``n <= 2``):

.. math::

    \\mathrm{ALP} = \\Bigl| \\frac{1}{n - h} \\sum_{i=1}^{n-h} r_i
    - \\frac{1}{h} \\sum_{i=n-h+1}^{n} r_i \\Bigr|.

**Splits.** When a leaf holds ``max_region_size + 1`` pairs it draws ``nb_split_attempts`` cuts, each a
uniform dimension ``j`` and a threshold ``c ~ U(low_j, high_j)`` of the leaf. A cut is valid when each child
holds at least ``max_region_size / 20`` of the leaf's pairs and each side is at least
``min_dims_range_ratio × (high_j - low_j)`` of the *full* range wide; of the valid cuts the one with the
largest :math:`|\\mathrm{ALP}_\\text{left} - \\mathrm{ALP}_\\text{right}|` (the first, on ties) splits the
leaf, whose pairs go to the child containing them. When no cut is valid, the leaf drops its oldest quarter
(``floor(max_region_size / 4)`` pairs) instead.

**Sampling**, per task: with probability 0.7 a box drawn with probability proportional to its ALP (uniformly
when every ALP is 0), then a task uniform inside it; with 0.2 a task uniform over the whole space; with 0.1 a
box drawn as before, its lowest-signal task plus Gaussian noise of standard deviation
``0.1 × (high - low)`` of the full range (the reference code's 0.1 on the unit scale), clipped to the box
(a box without pairs: uniform inside it). The boxes drawn from are the leaves (``leaves_only=True``, RIAC's
regions); ``leaves_only=False`` draws from every box of the tree, as the reference code does by default.

**Defaults** are teachDeepRL's: ``max_region_size=200``, ``nb_split_attempts=50``,
``min_dims_range_ratio=1/15``. TeachMyAgent's benchmark uses 150, 75 and 0.1. The reference code rescales
returns to ``[0, 1]`` before the teacher sees them (TeachMyAgent passes raw returns); RIAC learns from the
episode's return by default (``signal="return"``), or from its final progress (``signal="progress"``).

Departures from the reference code, each from the facts this file implements: a cut that leaves a child
with too few pairs is an invalid attempt (the reference redraws it until both children are populated); the
children's ALP after a split is computed from their own windows; each task belongs to exactly one child
(half-open cuts).

The state is plain data (lists of numpy arrays and floats), so :meth:`RIAC.state_dict` holds the whole
tree and a resumed teacher samples exactly as the original. RIAC needs numpy only (no ``teachers`` extra).

>>> from magister.task_spaces import Box
>>> cur = RIAC(Box(0.0, 1.0, shape=(2,)), max_region_size=20, seed=0)
>>> for i in range(21):  # the left half improves, the right half does not
...     x = (0.25, 0.5) if i % 2 else (0.75, 0.5)
...     cur.update_on_episode(i / 20 if i % 2 else 0.0, 1, x, 0.0)
>>> cur.num_leaves
2
>>> all(0.0 <= v <= 1.0 for task in cur.sample(100) for v in task)
True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._continuous import ParamBox, feedback
from .base import Curriculum

logger = logging.getLogger(__name__)

__all__ = ["RIAC", "window_alp"]

#: The sampling mixture of the reference code: lowest-signal task + noise, uniform over the space; the rest
#: (0.7) uniform inside a box drawn by ALP.
LOWEST_SHARE, UNIFORM_SHARE = 0.1, 0.2
#: Standard deviation of the noise around a box's lowest-signal task, as a fraction of the full range.
NOISE = 0.1
#: Each child of a split holds at least ``max_region_size * MIN_CHILD_SHARE`` pairs.
MIN_CHILD_SHARE = 1 / 20
#: A leaf that cannot split drops this share of ``max_region_size`` pairs, the oldest.
DISCARD_SHARE = 1 / 4
_SIGNALS = ("return", "progress")


def window_alp(signals: Sequence[float] | np.ndarray, window: int) -> float:
    """The ALP of a box: ``|mean(older half) - mean(newer half)|`` of its last ``window`` signals.

    With ``n = min(len(signals), window)`` and ``h = n // 2`` the older half is the first ``n - h`` of the
    last ``n`` signals; 0 while ``n <= 2``.

    >>> window_alp([0.0, 0.0, 1.0, 1.0], 200), window_alp([1.0, 2.0, 3.0], 200), window_alp([5.0, 1.0], 200)
    (1.0, 1.5, 0.0)
    >>> window_alp([9.0, 0.0, 0.0, 1.0, 1.0], 4)  # only the last 4 count
    1.0
    """
    n = min(len(signals), int(window))
    if n <= 2:
        return 0.0
    h = n // 2
    older, newer = signals[len(signals) - n: len(signals) - h], signals[len(signals) - h:]
    return float(abs(sum(older) / (n - h) - sum(newer) / h))


def _positive_int(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return int(value)


class RIAC(Curriculum):
    """Robust Intelligent Adaptive Curiosity over a box of task parameters (see the module docstring).

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes all hold numbers, or a ``Product`` of those (read through
        :class:`~magister.curricula._continuous.ParamBox`; anything else raises ``TypeError``).
    max_region_size : int
        A box keeps its last ``max_region_size + 1`` pairs; a leaf that reaches that many splits (or drops
        its oldest quarter). Also the ALP window.
    nb_split_attempts : int
        Random cuts tried per split.
    min_dims_range_ratio : float
        Least width of each side of a cut, as a share of the full range of the cut dimension, in [0, 0.5].
    leaves_only : bool
        Sample from the leaves (RIAC's regions) or, when false, from every box of the tree (the reference
        code's default).
    signal : {"return", "progress"}
        What the teacher learns from: the episode's return (the reference code) or its final progress.
    seed : int, optional
        Seeds the cuts and the sampling.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        max_region_size: int = 200,
        nb_split_attempts: int = 50,
        min_dims_range_ratio: float = 1 / 15,
        leaves_only: bool = True,
        signal: str = "return",
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "RIAC")
        self.max_region_size = _positive_int("max_region_size", max_region_size, 2)
        self.nb_split_attempts = _positive_int("nb_split_attempts", nb_split_attempts, 1)
        ratio = float(min_dims_range_ratio)
        if not 0.0 <= ratio <= 0.5:
            raise ValueError(f"min_dims_range_ratio must be in [0, 0.5], got {min_dims_range_ratio!r}")
        if signal not in _SIGNALS:
            raise ValueError(f"signal must be one of {_SIGNALS}, got {signal!r}")
        self.min_dims_range_ratio = ratio
        self.leaves_only = bool(leaves_only)
        self.signal = signal
        self.discards = 0
        # The tree, one entry per box (index 0: the root). A box's children are [] (a leaf) or
        # [left, right]; its cut is (dim, threshold) once split.
        self._low: list[np.ndarray] = [self.params.low.copy()]
        self._high: list[np.ndarray] = [self.params.high.copy()]
        self._children: list[list[int]] = [[]]
        self._cut: list[tuple[int, float] | None] = [None]
        self._tasks: list[list[np.ndarray]] = [[]]
        self._signals: list[list[float]] = [[]]
        self._alp: list[float] = [0.0]
        self._stacked: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (ids, lows, highs), per tree

    # -- the tree -----------------------------------------------------------------------------------
    @property
    def num_boxes(self) -> int:
        """Boxes in the tree (the root included)."""
        return len(self._low)

    @property
    def num_leaves(self) -> int:
        """Leaves of the tree."""
        return sum(1 for c in self._children if not c)

    def boxes(self, leaves_only: bool = True) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """``(low, high, alp)`` of each leaf (or of every box), in the tree's order."""
        ids = self._ids(leaves_only)
        return [(self._low[i].copy(), self._high[i].copy(), self._alp[i]) for i in ids]

    def _ids(self, leaves_only: bool) -> list[int]:
        if not leaves_only:
            return list(range(self.num_boxes))
        return [i for i, c in enumerate(self._children) if not c]

    def _candidates(self) -> list[int]:
        return self._ids(self.leaves_only)

    def _add(self, x: np.ndarray, y: float) -> None:
        """Append (x, y) to every box containing x, root to leaf; split (or trim) the leaf if full."""
        box = 0
        while True:
            tasks, signals = self._tasks[box], self._signals[box]
            tasks.append(x)
            signals.append(y)
            if len(signals) > self.max_region_size + 1:  # (only boxes already split keep rolling)
                del tasks[0], signals[0]
            self._alp[box] = window_alp(signals, self.max_region_size)
            if not self._children[box]:
                break
            dim, at = self._cut[box]  # type: ignore[misc]
            box = self._children[box][0 if x[dim] < at else 1]
        if len(self._signals[box]) > self.max_region_size:
            self._split_or_trim(box)

    def _split_or_trim(self, box: int) -> None:
        xs = np.asarray(self._tasks[box])
        ys = np.asarray(self._signals[box])
        low, high = self._low[box], self._high[box]
        dims = self.rng.integers(self.params.dims, size=self.nb_split_attempts)
        cuts = self.rng.uniform(low[dims], high[dims])
        min_width = self.min_dims_range_ratio * self.params.width[dims]
        left = xs[:, dims] < cuts  # (pairs, attempts)
        n_left = left.sum(axis=0)
        min_pairs = self.max_region_size * MIN_CHILD_SHARE
        valid = ((cuts - low[dims] >= min_width) & (high[dims] - cuts >= min_width)
                 & (n_left >= min_pairs) & (len(ys) - n_left >= min_pairs))
        if not valid.any():
            drop = max(1, int(self.max_region_size * DISCARD_SHARE))
            del self._tasks[box][:drop], self._signals[box][:drop]
            self._alp[box] = window_alp(self._signals[box], self.max_region_size)
            self.discards += 1
            logger.debug("RIAC: no valid cut of box %d; dropped its %d oldest pairs", box, drop)
            return
        gaps = np.full(self.nb_split_attempts, -1.0)
        for a in np.flatnonzero(valid):
            gaps[a] = abs(window_alp(ys[left[:, a]], self.max_region_size)
                          - window_alp(ys[~left[:, a]], self.max_region_size))
        best = int(gaps.argmax())
        dim, at, mask = int(dims[best]), float(cuts[best]), left[:, best]
        self._cut[box] = (dim, at)
        self._children[box] = [self.num_boxes, self.num_boxes + 1]
        for is_left, side in ((True, mask), (False, ~mask)):
            lo, hi = low.copy(), high.copy()
            (hi if is_left else lo)[dim] = at
            self._new_box(lo, hi, [self._tasks[box][i] for i in np.flatnonzero(side)], ys[side].tolist())
        logger.debug("RIAC: split box %d at x[%d] = %.4g (|dALP| %.4g)", box, dim, at, gaps[best])

    def _new_box(self, low: np.ndarray, high: np.ndarray, tasks: list[np.ndarray],
                 signals: list[float]) -> None:
        self._stacked = None
        self._low.append(low)
        self._high.append(high)
        self._children.append([])
        self._cut.append(None)
        self._tasks.append(tasks)
        self._signals.append(signals)
        self._alp.append(window_alp(signals, self.max_region_size))

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks from the mixture of the module docstring, drawn with one numpy call per part."""
        self._check_k(k)
        k = int(k)
        if self._stacked is None:
            ids = np.array(self._candidates())
            self._stacked = (ids, np.array(self._low)[ids], np.array(self._high)[ids])
        ids, box_lows, box_highs = self._stacked
        alp = np.array([self._alp[i] for i in ids])
        p = alp / alp.sum() if alp.sum() > 0 else None
        mode = self.rng.random(k)
        pick = self.rng.choice(ids.size, size=k, p=p)
        chosen, lows, highs = ids[pick], box_lows[pick], box_highs[pick]
        inside = self.rng.uniform(lows, highs)
        anywhere = self.params.uniform(self.rng, k)
        noise = self.rng.normal(0.0, NOISE, size=(k, self.params.dims)) * self.params.width
        near_worst = inside.copy()  # (a box without pairs: uniform inside it)
        for i in set(chosen.tolist()):
            if self._signals[i]:
                rows = chosen == i
                worst = self._tasks[i][int(np.argmin(self._signals[i]))]
                near_worst[rows] = np.clip(worst + noise[rows], lows[rows], highs[rows])
        x = np.where((mode < LOWEST_SHARE)[:, None], near_worst,
                     np.where((mode < LOWEST_SHARE + UNIFORM_SHARE)[:, None], anywhere, inside))
        self.num_sampled += k
        return [self.params.task(row, self.rng) for row in x]

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Add the episode's (task, signal) pair to the boxes containing the task."""
        x, y = feedback(self, task, episode_return, length, progress, self.signal)
        self._add(x, y)

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        alp = np.array([self._alp[i] for i in self._candidates()])
        out["riac/boxes"] = float(self.num_boxes)
        out["riac/leaves"] = float(self.num_leaves)
        out["riac/mean_alp"] = float(alp.mean())
        out["riac/max_alp"] = float(alp.max())
        out["riac/discards"] = float(self.discards)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        dims = self.params.dims
        state.update(
            dims=dims,
            discards=self.discards,
            low=np.array(self._low),
            high=np.array(self._high),
            children=[list(c) for c in self._children],
            cut=[None if c is None else [c[0], c[1]] for c in self._cut],
            tasks=[np.array(t, dtype=np.float64).reshape(len(t), dims) for t in self._tasks],
            signals=[list(s) for s in self._signals],
            alp=list(self._alp),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("class") == type(self).__name__ and int(state["dims"]) != self.params.dims:
            raise ValueError(
                f"RIAC state_dict has {state['dims']} parameter dimensions, this space has {self.params.dims}"
            )
        super().load_state_dict(state)
        self.discards = int(state["discards"])
        self._low = [np.array(row, dtype=np.float64) for row in state["low"]]
        self._high = [np.array(row, dtype=np.float64) for row in state["high"]]
        self._children = [[int(i) for i in c] for c in state["children"]]
        self._cut = [None if c is None else (int(c[0]), float(c[1])) for c in state["cut"]]
        self._tasks = [list(np.array(t, dtype=np.float64)) for t in state["tasks"]]
        self._signals = [[float(v) for v in s] for s in state["signals"]]
        self._alp = [float(v) for v in state["alp"]]
        self._stacked = None

    def __repr__(self) -> str:
        return f"RIAC({self.task_space!r}, leaves={self.num_leaves})"
