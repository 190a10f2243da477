"""Sampling for Learnability, SFL (Rutherford et al. 2024; full-distribution variant from Syllabus).

*No Regrets: Investigating and Improving Regret Approximations for Curriculum Discovery*
(Rutherford et al., 2024) scores a task by its **learnability**

.. math::

    \\ell_i = p_i (1 - p_i),

where ``p_i`` is the agent's success rate on task ``i`` (Tzannetos et al., 2023): zero for tasks that are
always solved or never solved, largest (1/4) at ``p = 1/2``. Two ways of sampling from it:

* ``method="topk"`` (the paper's SFL): every ``T`` updates, draw a batch of ``N`` candidate tasks
  uniformly from the space, and keep the ``K`` most learnable as the buffer (ties broken at random).
  Each sample comes from the buffer (uniformly) with probability ``ρ``, otherwise uniformly from the
  whole space. The refresh is O(N log N), never O(num_tasks); on unbounded spaces only the ``K``
  winners are registered, so the tables grow with the tasks actually used. With ``keep_buffer=True``
  (our addition, off by default) the current buffer competes with the new candidates, so a learnable
  task is not dropped just because it was not redrawn.
* ``method="dist"`` (the Syllabus paper's *full distribution* variant): sample ``i`` with probability
  ``ℓ_i / Σ_j ℓ_j`` over all tasks; needs no ``K`` or ``ρ``. A task with no success estimate yet gets the
  weight ``unseen_weight`` (a floor, so unseen tasks are explored); with ``floor_all=True`` every task's
  weight is at least ``unseen_weight`` (useful online, where a single failure would otherwise set
  ``p = 0`` and exclude a task forever). The weights live in a sum tree (Fenwick tree): at each refresh
  (every ``T`` updates, and after each evaluation) only the tasks whose estimate changed are written,
  O(log n) each, and ``k`` samples are one vectorised descent of the tree, O(k log n). So the
  distribution still changes only at refreshes, as in the paper, but no refresh costs O(num_tasks).

Success estimates ``p_i`` come either from training episodes (the *online* path:
:meth:`update_on_episode` / :meth:`update_task_progress` progress in ``[0, 1]``; each task keeps a
running mean whose step is ``max(1/n_i, 1/success_window)``, i.e. the plain mean of the first
``success_window`` observations, then an exponential window of that length), or from periodic evaluation,
``update_on_demand({"success_rates": rates})``, which overwrites the estimates of the given tasks and
refreshes immediately (the paper's setting, where candidates are evaluated by rollouts).

Defaults are the Syllabus paper's Crafter settings (Supplementary D.5): ``N = 200``, ``T = 25``,
``K = 10``, ``ρ = 1.0``, top-K sampling. ``T`` counts feedback updates (episodes and progress reports).

>>> import numpy as np
>>> learnability(np.array([0.5, 0.9, 0.2, 0.0, 1.0])).round(2).tolist()
[0.25, 0.09, 0.16, 0.0, 0.0]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from ._table import TaskIndex, grow
from .base import Curriculum, check_finite
from .learning_progress import check_progress, enumerable_index, parse_success_rates

logger = logging.getLogger(__name__)

__all__ = ["SFL", "SumTree", "learnability", "top_k_learnable"]


def learnability(p: np.ndarray) -> np.ndarray:
    """``p (1 - p)`` elementwise."""
    p = np.asarray(p, dtype=np.float64)
    return p * (1.0 - p)


def top_k_learnable(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of the ``k`` highest ``scores`` (best first), ties broken uniformly at random.

    >>> top_k_learnable(np.array([0.25, 0.09, 0.16, 0.0]), 2, np.random.default_rng(0)).tolist()
    [0, 2]
    """
    order = np.lexsort((rng.random(scores.shape[0]), -scores))
    return order[:k]


class SumTree:
    """A Fenwick (binary indexed) tree over non-negative weights, for sampling in proportion to them.

    ``set(slots, values)`` costs O(len(slots) · log n) (or one O(n) rebuild when that is cheaper);
    ``sample(u)`` maps uniforms ``u ∈ [0, 1)`` to slots with one vectorised descent, O(len(u) · log n).
    Slot ``i`` is drawn with probability ``w_i / Σ w``; zero-weight slots are never drawn.

    >>> t = SumTree(np.array([1.0, 0.0, 3.0]))
    >>> t.sample(np.array([0.0, 0.2, 0.25, 0.99])).tolist(), t.total()
    ([0, 0, 2, 2], 4.0)
    >>> t.set(np.array([1]), np.array([4.0])); t.sample(np.array([0.2, 0.3])).tolist()
    [1, 1]
    """

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = np.array(weights, dtype=np.float64)
        self.n = self.weights.shape[0]
        if self.n < 1 or not np.isfinite(self.weights).all() or (self.weights < 0).any():
            raise ValueError("SumTree needs at least one finite, non-negative weight")
        self._build()

    def _build(self) -> None:
        c = np.concatenate(([0.0], np.cumsum(self.weights)))
        i = np.arange(1, self.n + 1)
        self.tree = np.concatenate(([0.0], c[i] - c[i - (i & -i)]))
        self.positive = int((self.weights > 0).sum())
        self._writes = 0

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set the weights of distinct ``slots`` to ``values``."""
        slots = np.asarray(slots, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if slots.size * max(self.n.bit_length(), 1) >= self.n:
            self.weights[slots] = values
            self._build()
            return
        old = self.weights[slots]
        self.positive += int((values > 0).sum()) - int((old > 0).sum())
        self.weights[slots] = values
        idx, delta = slots + 1, values - old
        while idx.size:
            np.add.at(self.tree, idx, delta)
            idx = idx + (idx & -idx)
            keep = idx <= self.n
            idx, delta = idx[keep], delta[keep]
        self._writes += slots.size
        if self._writes > self.n:  # bound floating-point drift: rebuild once per n writes (amortised O(1))
            self._build()

    def total(self) -> float:
        """``Σ w`` (an O(log n) prefix query)."""
        i, out = self.n, 0.0
        while i > 0:
            out += self.tree[i]
            i -= i & -i
        return float(out)

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Slots for uniforms ``u`` in ``[0, 1)``: the slot whose cumulative interval holds ``u Σ w``."""
        target = np.asarray(u, dtype=np.float64) * self.total()
        pos = np.zeros(target.shape[0], dtype=np.int64)
        step = 1 << (self.n.bit_length() - 1)
        while step:
            nxt = pos + step
            val = np.where(nxt <= self.n, self.tree[np.minimum(nxt, self.n)], np.inf)
            go = val <= target
            target = np.where(go, target - val, target)
            pos = np.where(go, nxt, pos)
            step >>= 1
        return np.minimum(pos, self.n - 1)


def _check_pos_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class SFL(Curriculum):
    """Sampling for Learnability.

    Args:
        task_space: any task space for ``"topk"`` (unbounded spaces work: candidates come from
            ``sample_encoded``); a finite one for ``"dist"``.
        method: ``"topk"`` (Rutherford et al.) or ``"dist"`` (sample ∝ p(1 - p) over all tasks).
        batch_size: ``N``, candidates drawn per refresh (top-K only).
        update_period: ``T``, feedback updates between refreshes.
        buffer_size: ``K``, size of the learnable buffer (top-K only).
        sample_ratio: ``ρ``, probability of sampling from the buffer (top-K only).
        unseen_weight: learnability assumed for tasks with no estimate yet (both methods).
        floor_all: ``"dist"`` only: apply ``unseen_weight`` as a floor to every task.
        keep_buffer: top-K only: let the current buffer compete with the new candidates.
        success_window: length of the online success estimate's window.
        seed: seed of the sampling generator.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        method: str = "topk",
        batch_size: int = 200,
        update_period: int = 25,
        buffer_size: int = 10,
        sample_ratio: float = 1.0,
        unseen_weight: float = 0.01,
        floor_all: bool = False,
        keep_buffer: bool = False,
        success_window: int = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if method not in ("topk", "dist"):
            raise ValueError(f"method must be 'topk' or 'dist', got {method!r}")
        self.method = method
        self.batch_size = _check_pos_int("batch_size", batch_size)
        self.update_period = _check_pos_int("update_period", update_period)
        self.buffer_size = _check_pos_int("buffer_size", buffer_size)
        self.success_window = _check_pos_int("success_window", success_window)
        if not 0.0 <= float(sample_ratio) <= 1.0:
            raise ValueError(f"sample_ratio must be in [0, 1], got {sample_ratio!r}")
        if not 0.0 <= float(unseen_weight) <= 0.25:
            raise ValueError(f"unseen_weight must be in [0, 0.25] (range of p(1-p)), got {unseen_weight!r}")
        self.sample_ratio = float(sample_ratio)
        self.unseen_weight = float(unseen_weight)
        self.floor_all = bool(floor_all)
        self.keep_buffer = bool(keep_buffer)
        if task_space.num_tasks is not None:
            self.index, self.n = enumerable_index(task_space, type(self).__name__)
        elif method == "dist":
            raise TypeError(f"SFL(method='dist') needs a finite task space; {task_space!r} is unbounded")
        else:
            self.index, self.n = TaskIndex(task_space), None
        size = self.n if self.n is not None else 0
        self.p = np.zeros(size)
        self.count = np.zeros(size, dtype=np.int64)
        self.buffer = np.zeros(0, dtype=np.int64)
        self._since_refresh = 0
        self.num_refreshes = 0
        self._tree: SumTree | None = None  # "dist" only
        self._dirty: list[int] = []  # "dist" only: slots whose estimate changed since the last refresh

    # -- estimates ------------------------------------------------------------------------------------
    def _ensure(self, size: int) -> None:
        if self.p.shape[0] < size:
            self.p = grow(self.p, size, 0.0)
            self.count = grow(self.count, size, 0)

    def _weights(self, slots: np.ndarray) -> np.ndarray:
        """Learnability of ``slots``, ``unseen_weight`` where no estimate exists."""
        seen = self.count[slots] > 0
        w = np.where(seen, learnability(self.p[slots]), self.unseen_weight)
        if self.method == "dist" and self.floor_all:
            w = np.maximum(w, self.unseen_weight)
        return w

    def learnability(self) -> np.ndarray:
        """Current sampling weight of every known task (learnability, or the floor for unseen tasks)."""
        m = len(self.index)
        self._ensure(m)
        return self._weights(np.arange(m))

    def success_rates(self) -> np.ndarray:
        """Current success estimates of every known task (0 where none)."""
        return self.p[: len(self.index)].copy()

    # -- refresh ------------------------------------------------------------------------------------
    def _unbounded_topk(self) -> np.ndarray:
        """Top-K over ``N`` fresh proposals of an unbounded space; only the K winners get slots.

        (Registering every candidate would grow the tables by ``N`` per refresh; unseen candidates
        need no slot to be scored, since their weight is ``unseen_weight``.)
        """
        tasks, slots, keys = [], [], set()
        if self.keep_buffer:
            for s in self.buffer.tolist():
                t = self.index.task(s)
                tasks.append(t)
                slots.append(s)
                keys.add(task_key(t))
        for t in self.task_space.sample_encoded(self.batch_size, rng=self.rng):
            key = task_key(t)
            if key in keys:
                continue
            keys.add(key)
            tasks.append(t)
            slots.append(self.index.slot(t, add=False) if t in self.index else -1)
        slot_arr = np.asarray(slots, dtype=np.int64)
        known = slot_arr >= 0
        w = np.full(slot_arr.size, self.unseen_weight)
        w[known] = self._weights(slot_arr[known])
        best = top_k_learnable(w, self.buffer_size, self.rng)
        out = np.array([slots[i] if slots[i] >= 0 else self.index.slot(tasks[i]) for i in best.tolist()],
                       dtype=np.int64)
        self._ensure(len(self.index))
        return out

    def _refresh(self) -> None:
        self._since_refresh = 0
        self.num_refreshes += 1
        if self.method == "dist":
            if self._tree is None:
                self._tree = SumTree(self._weights(np.arange(self.n)))
            elif self._dirty:
                slots = np.unique(np.asarray(self._dirty, dtype=np.int64))
                self._tree.set(slots, self._weights(slots))
            self._dirty.clear()
            return
        if self.n is None:
            self.buffer = self._unbounded_topk()
        else:
            cand = np.unique(self.rng.integers(self.n, size=self.batch_size))
            if self.keep_buffer and self.buffer.size:
                cand = np.union1d(cand, self.buffer)
            best = top_k_learnable(self._weights(cand), self.buffer_size, self.rng)
            self.buffer = cand[best]
        if logger.isEnabledFor(logging.DEBUG):  # the mean costs a pass: only when it is logged
            logger.debug("SFL buffer refreshed: %d tasks, mean learnability %.4f",
                         self.buffer.size, float(self._weights(self.buffer).mean()))

    def _tick(self) -> None:
        self._since_refresh += 1
        if self._since_refresh >= self.update_period:
            self._refresh()

    # -- feedback -----------------------------------------------------------------------------------
    def _observe(self, task: EncodedTask, progress: float) -> None:
        v = check_progress(progress)
        s = self.index.slot(task, add=self.n is None)
        self._ensure(s + 1)
        c = int(self.count[s]) + 1
        self.count[s] = c
        p = float(self.p[s])  # Python floats: the same IEEE arithmetic, without numpy scalar overhead
        self.p[s] = p + max(1.0 / c, 1.0 / self.success_window) * (v - p)
        if self.method == "dist":
            self._dirty.append(s)
        self._tick()

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """One finished episode; ``progress`` (success in [0, 1]) updates the task's estimate."""
        check_finite("episode_return", episode_return)
        self._observe(task, progress)
        self.num_episodes += 1

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        """A success observation in ``[0, 1]`` for ``task``."""
        self._observe(task, progress)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """``{"success_rates": rates}`` (array over ``encoded_tasks`` or ``{task: rate}``): evaluation.

        Overwrites the estimates of those tasks and refreshes the buffer / distribution at once.
        Invalid rates raise ``ValueError`` and leave the state unchanged.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        if "success_rates" not in metrics:
            return
        rates = metrics["success_rates"]
        if self.n is None and not isinstance(rates, Mapping):
            raise ValueError("on an unbounded space, success_rates must be a {task: rate} mapping")
        slots, values = parse_success_rates(self.index, rates, len(self.index))
        self.p[slots] = values
        self.count[slots] = np.maximum(self.count[slots], 1)
        if self.method == "dist":
            self._dirty.extend(slots.tolist())
        self._refresh()

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks: from the buffer with probability ρ, else uniform (top-K); ∝ learnability (dist)."""
        self._check_k(k)
        if self.method == "dist":
            if self._tree is None:
                self._refresh()
            assert self._tree is not None
            u = self.rng.random(k)
            if self._tree.positive:
                slots = self._tree.sample(u)
            else:  # every weight is zero: uniform
                slots = np.minimum((u * self.n).astype(np.int64), self.n - 1)
            self.num_sampled += k
            return self.index.tasks(slots)
        if self.buffer.size == 0:
            self._refresh()
        from_buffer = self.rng.random(k) < self.sample_ratio
        out: list[EncodedTask] = [None] * k
        nb = int(from_buffer.sum())
        if nb:
            picks = self.buffer[self.rng.integers(self.buffer.size, size=nb)]
            for pos, t in zip(np.flatnonzero(from_buffer).tolist(), self.index.tasks(picks)):
                out[pos] = t
        nu = k - nb
        if nu:
            if self.n is not None:
                uni = self.index.tasks(self.rng.integers(self.n, size=nu))
            else:
                uni = self.task_space.sample_encoded(nu, rng=self.rng)
            for pos, t in zip(np.flatnonzero(~from_buffer).tolist(), uni):
                out[pos] = t
        self.num_sampled += k
        return out

    def distribution(self) -> np.ndarray:
        """Sampling probabilities over ``task_space.encoded_tasks`` (finite spaces only)."""
        if self.n is None:
            raise NotImplementedError("SFL on an unbounded space has no explicit distribution")
        if self.method == "dist":
            if self._tree is None:
                self._refresh()
            assert self._tree is not None
            w = self._tree.weights
            return w / w.sum() if self._tree.positive else np.full(self.n, 1.0 / self.n)
        if self.buffer.size == 0:
            self._refresh()
        p = np.full(self.n, (1.0 - self.sample_ratio) / self.n)
        np.add.at(p, self.buffer, self.sample_ratio / self.buffer.size)
        return p

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        m = len(self.index)
        seen = self.count[:m] > 0
        out["sfl/tasks_seen"] = float(seen.sum())
        seen_l = learnability(self.p[:m][seen])
        out["sfl/mean_learnability_seen"] = float(seen_l.mean()) if seen.any() else 0.0
        if self.method == "topk" and self.buffer.size:
            out["sfl/buffer_mean_learnability"] = float(self._weights(self.buffer).mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        m = len(self.index)
        state.update(
            p=self.p[:m].copy(), count=self.count[:m].copy(), buffer=self.buffer.copy(),
            since_refresh=self._since_refresh, num_refreshes=self.num_refreshes,
            tree_weights=None if self._tree is None else self._tree.weights.copy(),
            tree=None if self._tree is None else self._tree.tree.copy(),
            tree_writes=0 if self._tree is None else self._tree._writes,
            dirty=list(self._dirty), index=self.index.state_dict(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.index.load_state_dict(state["index"])
        m = len(self.index)
        if np.shape(state["p"]) != (m,) or np.shape(state["count"]) != (m,):
            raise ValueError(f"state_dict arrays do not match its index of {m} tasks")
        self.p = np.array(state["p"], dtype=np.float64)
        self.count = np.array(state["count"], dtype=np.int64)
        self.buffer = np.array(state["buffer"], dtype=np.int64)
        self._since_refresh = int(state["since_refresh"])
        self.num_refreshes = int(state["num_refreshes"])
        self._dirty = [int(s) for s in state["dirty"]]
        self._tree = None
        if state["tree_weights"] is not None:
            tree = SumTree(np.asarray(state["tree_weights"], dtype=np.float64))
            tree.tree = np.array(state["tree"], dtype=np.float64)  # the exact sums, drift included
            tree._writes = int(state["tree_writes"])
            self._tree = tree
