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
refreshes immediately (the paper's setting, where candidates are evaluated by rollouts). Evaluated rates
are used as they are: weight ``p(1 - p)``.

**Online estimates: posterior expected learnability** (an addition to the paper, which evaluates
candidates by rollouts). A running mean of one or two training episodes is 0 or 1, so ``p̂(1 - p̂) = 0``
would rank a possible task that failed once below every unexplored task, forever. Online, the weight is
instead the expected learnability under a Beta posterior: with ``n = min(n_i, success_window)`` effective
observations of mean ``p̂`` and a Beta(``sμ``, ``s(1 - μ)``) prior (``s = prior_strength``, default 1
pseudo-observation),

.. math::

    α = n p̂ + sμ, \\qquad β = n (1 - p̂) + s(1 - μ), \\qquad
    w_i = E[p(1 - p)] = \\frac{αβ}{(α + β)(α + β + 1)}.

The prior mean ``μ`` is chosen so that the prior's expected learnability, ``μ(1 - μ) s / (s + 1)``, is
``unseen_weight`` (``μ ≈ 0.0204`` for the defaults), so an unseen task, a task that failed once
(``w ≈ 0.0067``) and a task that succeeded once (``w ≈ 0.167``) are ranked consistently. ``w_i`` tends
to ``p̂(1 - p̂)`` as evidence accumulates. ``prior_strength=0`` gives the plain ``p̂(1 - p̂)``. In the
simulated-student harness (1000 tasks, 90% impossible, online feedback only, 16000 episodes) top-K
reaches a mean success of 0.735-0.755 on possible tasks with 79.5-83.5% of samples on them (seeds 0-3),
the full distribution (with ``unseen_weight=0.001``, which says most tasks are impossible) 0.656-0.687
with 83.5-85.6%, uniform sampling 0.488-0.501 (with 10%). Without the prior (``prior_strength=0``),
top-K keeps most of its buffer on unexplored tasks: 0.58 of samples on possible tasks at 8000 episodes.

**Deferred work** (an implementation detail that changes no result). An online update only validates
its input and queues ``(slot, value)``; a refresh that falls due is counted (``num_refreshes``) and
remembered. Both are carried out, vectorised and in arrival order, at the next read — :meth:`sample`,
:meth:`distribution`, :meth:`metrics`, :meth:`state_dict`, the estimates — each due refresh seeing
exactly the observations that had arrived when it fell due (the queue is also worked off after 256
observations without a read). Samples, estimates and checkpoints are identical to doing the work at once.

Defaults are the Syllabus paper's Crafter settings (Supplementary D.5): ``N = 200``, ``T = 25``,
``K = 10``, ``ρ = 1.0``, top-K sampling. ``T`` counts feedback updates (episodes and progress reports).

>>> import numpy as np
>>> learnability(np.array([0.5, 0.9, 0.2, 0.0, 1.0])).round(2).tolist()
[0.25, 0.09, 0.16, 0.0, 0.0]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from ._table import TaskIndex, grow
from .base import Curriculum, check_finite
from .learning_progress import check_progress, enumerable_index, parse_success_rates

logger = logging.getLogger(__name__)

__all__ = ["SFL", "SumTree", "expected_learnability", "learnability", "prior_mean", "top_k_learnable"]

_isfinite = math.isfinite
_MAX_QUEUED = 256  # queued observations that trigger the deferred work even without a read


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
        np.minimum(pos, self.n - 1, out=pos)
        if self.positive and not (self.weights[pos] > 0).all():
            # Floating-point cancellation in the partial sums (a weight written next to far larger ones)
            # can route a draw to a zero-weight slot: move it to the nearest positive slot at or before
            # it (or the first positive slot). Rare, so the O(n) scan only runs then.
            bad = np.flatnonzero(~(self.weights[pos] > 0))
            positive = np.flatnonzero(self.weights > 0)
            at = np.searchsorted(positive, pos[bad], side="right") - 1
            pos[bad] = positive[np.maximum(at, 0)]
        return pos


def _check_pos_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def prior_mean(unseen_weight: float, strength: float) -> float:
    """Mean ``μ`` of the Beta(``sμ``, ``s(1 - μ)``) prior whose expected learnability is ``unseen_weight``.

    Under Beta(α, β), ``E[p(1 - p)] = αβ / ((α + β)(α + β + 1))``; with ``α + β = s`` this is
    ``μ(1 - μ) s / (s + 1)``. ``μ`` is the root in ``[0, 1/2]`` (clamped to 1/2 when ``unseen_weight`` is
    larger than the prior can express).

    >>> round(prior_mean(0.01, 1.0), 4)
    0.0204
    """
    if strength <= 0.0:
        return 0.0
    target = min(0.25, unseen_weight * (strength + 1.0) / strength)
    return 0.5 - math.sqrt(0.25 - target)


def expected_learnability(p: np.ndarray, n: np.ndarray, strength: float, mu: float) -> np.ndarray:
    """``E[p(1 - p)]`` under the Beta posterior of ``n`` observations with mean ``p`` and the prior.

    Posterior ``Beta(α, β)``, ``α = n p + s μ``, ``β = n (1 - p) + s (1 - μ)``:
    ``E[p(1 - p)] = αβ / ((α + β)(α + β + 1))``.

    >>> expected_learnability(np.array([0.0, 1.0, 0.5]), np.array([1, 1, 2]), 1.0, 0.0).round(4).tolist()
    [0.0, 0.1667, 0.1667]
    """
    a = n * p + strength * mu
    b = n * (1.0 - p) + strength * (1.0 - mu)
    tot = n + strength
    return a * b / (tot * (tot + 1.0))


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
        unseen_weight: learnability assumed for tasks with no estimate yet (both methods); also sets
            the prior mean of online estimates.
        floor_all: ``"dist"`` only: apply ``unseen_weight`` as a floor to every task.
        keep_buffer: top-K only: let the current buffer compete with the new candidates.
        success_window: length of the online success estimate's window.
        prior_strength: ``s``, pseudo-observations of the Beta prior of online estimates (0: plain
            ``p̂(1 - p̂)``; an addition to the paper, see the module docstring).
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
        prior_strength: float = 1.0,
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
        if not (math.isfinite(float(prior_strength)) and float(prior_strength) >= 0.0):
            raise ValueError(f"prior_strength must be a finite number >= 0, got {prior_strength!r}")
        self.sample_ratio = float(sample_ratio)
        self.unseen_weight = float(unseen_weight)
        self.floor_all = bool(floor_all)
        self.keep_buffer = bool(keep_buffer)
        self.prior_strength = float(prior_strength)
        self.prior_mean = prior_mean(self.unseen_weight, self.prior_strength)
        if task_space.num_tasks is not None:
            self.index, self.n = enumerable_index(task_space, type(self).__name__)
        elif method == "dist":
            raise TypeError(f"SFL(method='dist') needs a finite task space; {task_space!r} is unbounded")
        else:
            self.index, self.n = TaskIndex(task_space), None
        # hot-path shortcut: on an indexed space a task is its own slot (plain ints checked inline)
        self._int_slots = self.index.indexed
        self._num_slots = len(self.index) if self.index.indexed else 0
        size = self.n if self.n is not None else 0
        self._est_p = np.zeros(size)
        self._est_count = np.zeros(size, dtype=np.int64)
        self._est_evaluated = np.zeros(size, dtype=bool)  # estimate set by evaluation: exact p(1 - p)
        self._buffer = np.zeros(0, dtype=np.int64)
        self._since_refresh = 0
        self.num_refreshes = 0
        self._tree: SumTree | None = None  # "dist" only
        self._dirty: list[int] = []  # "dist" only: slots whose estimate changed since the last refresh
        # Online observations not yet folded into the estimates, and the refreshes that are due but not
        # yet computed (positions in the observation list at which they fell due); see _catch_up.
        self._obs_slots: list[int] = []
        self._obs_values: list[float] = []
        self._due: list[int] = []

    # -- deferred work ----------------------------------------------------------------------------------
    def _fold(self, end: int | None = None) -> None:
        """Apply the first ``end`` (default: all) pending online observations, in arrival order.

        Each observation steps its task's running mean: ``p += max(1/c, 1/window) (v - p)``. Vectorised:
        the ``r``-th observations of distinct tasks are applied together, round ``r = 0, 1, ...``.
        """
        obs_s, obs_v = self._obs_slots, self._obs_values
        m = len(obs_s) if end is None else end
        if m == 0:
            self._ensure(len(self.index))  # (tasks registered since, e.g. by an unbounded refresh)
            return
        head = obs_s[:m] if m < len(obs_s) else obs_s
        distinct = len(set(head)) == m
        s = np.array(head, dtype=np.int64)
        v = np.array(obs_v[:m], dtype=np.float64)
        if self.method == "dist":
            self._dirty.extend(head)
        del obs_s[:m], obs_v[:m]
        self._ensure(len(self.index))
        if distinct:
            self._step(s, v)
            return
        order = np.argsort(s, kind="stable")  # stable: a task's observations keep their arrival order
        ss = s[order]
        first = np.concatenate(([True], ss[1:] != ss[:-1]))
        pos = np.arange(m)
        rank = np.empty(m, dtype=np.int64)
        rank[order] = pos - np.maximum.accumulate(np.where(first, pos, 0))
        for r in range(int(rank.max()) + 1):
            sel = rank == r
            self._step(s[sel], v[sel])

    def _step(self, slots: np.ndarray, values: np.ndarray) -> None:
        """One running-mean step for each of the distinct ``slots``."""
        c = self._est_count[slots] + 1
        self._est_count[slots] = c
        p = self._est_p[slots]
        self._est_p[slots] = p + np.maximum(1.0 / c, 1.0 / self.success_window) * (values - p)
        self._est_evaluated[slots] = False

    def _catch_up(self, fold: bool = True) -> None:
        """Compute the refreshes that fell due since the last read, then (``fold``) fold the rest.

        Each due refresh sees exactly the observations that had arrived when it fell due, so deferring
        the work to the next read changes no estimate, buffer or sample.
        """
        if self._due:
            done = 0
            for at in self._due:
                self._fold(at - done)
                done = at
                self._compute_refresh()
            self._due.clear()
        if fold:
            self._fold()

    @property
    def p(self) -> np.ndarray:
        """Success estimate per slot (0 where none); pending observations are folded in first."""
        self._catch_up()
        return self._est_p

    @property
    def count(self) -> np.ndarray:
        """Number of online observations per slot (at least 1 once evaluated)."""
        self._catch_up()
        return self._est_count

    @property
    def buffer(self) -> np.ndarray:
        """Slots of the top-K buffer (top-K only)."""
        self._catch_up(fold=False)
        return self._buffer

    @buffer.setter
    def buffer(self, slots: np.ndarray) -> None:
        self._catch_up(fold=False)
        self._buffer = np.asarray(slots, dtype=np.int64)

    # -- estimates ------------------------------------------------------------------------------------
    def _ensure(self, size: int) -> None:
        if self._est_p.shape[0] < size:
            self._est_p = grow(self._est_p, size, 0.0)
            self._est_count = grow(self._est_count, size, 0)
            self._est_evaluated = grow(self._est_evaluated, size, False)

    def _weights(self, slots: np.ndarray) -> np.ndarray:
        """Weight of ``slots``: learnability (see the module docstring), ``unseen_weight`` if unseen."""
        cnt = self._est_count[slots]
        p = self._est_p[slots]
        w = p * (1.0 - p)
        if self.prior_strength > 0.0:
            online = ~self._est_evaluated[slots]
            if online.any():
                n = np.minimum(cnt[online], self.success_window).astype(np.float64)
                w[online] = expected_learnability(p[online], n, self.prior_strength, self.prior_mean)
        w[cnt == 0] = self.unseen_weight
        if self.method == "dist" and self.floor_all:
            np.maximum(w, self.unseen_weight, out=w)
        return w

    def learnability(self) -> np.ndarray:
        """Current sampling weight of every known task (learnability, or the floor for unseen tasks)."""
        self._catch_up()
        m = len(self.index)
        self._ensure(m)
        return self._weights(np.arange(m))

    def success_rates(self) -> np.ndarray:
        """Current success estimates of every known task (0 where none)."""
        self._catch_up()
        m = len(self.index)
        self._ensure(m)
        return self._est_p[:m].copy()

    # -- refresh ------------------------------------------------------------------------------------
    def _unbounded_topk(self) -> np.ndarray:
        """Top-K over ``N`` fresh proposals of an unbounded space; only the K winners get slots.

        (Registering every candidate would grow the tables by ``N`` per refresh; unseen candidates
        need no slot to be scored, since their weight is ``unseen_weight``.)
        """
        tasks, slots, keys = [], [], set()
        if self.keep_buffer:
            for s in self._buffer.tolist():
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
        """Refresh now (after computing any refresh already due)."""
        self._catch_up()
        self._since_refresh = 0
        self.num_refreshes += 1
        self._compute_refresh()

    def _compute_refresh(self) -> None:
        """The refresh itself, from the estimates as they stand (counters are the caller's business)."""
        if self.method == "dist":
            if self._tree is None:
                self._tree = SumTree(self._weights(np.arange(self.n)))
            elif self._dirty:
                slots = np.unique(np.asarray(self._dirty, dtype=np.int64))
                self._tree.set(slots, self._weights(slots))
            self._dirty.clear()
            return
        if self.n is None:
            self._buffer = self._unbounded_topk()
        else:
            cand = np.unique(self.rng.integers(self.n, size=self.batch_size))
            if self.keep_buffer and self._buffer.size:
                cand = np.union1d(cand, self._buffer)
            best = top_k_learnable(self._weights(cand), self.buffer_size, self.rng)
            self._buffer = cand[best]
        if logger.isEnabledFor(logging.DEBUG):  # the mean costs a pass: only when it is logged
            logger.debug("SFL buffer refreshed: %d tasks, mean learnability %.4f",
                         self._buffer.size, float(self._weights(self._buffer).mean()))

    # -- feedback -----------------------------------------------------------------------------------
    # The hot path: validate, queue the observation, count towards the next refresh. Folding the
    # observation into the estimates and computing a refresh that falls due both wait for the next read
    # (sample, distribution, metrics, state_dict, ...), where they are done vectorised (see _catch_up).
    def _observe(self, task: EncodedTask, progress: float) -> None:
        v = float(progress)
        if not 0.0 <= v <= 1.0:  # also false for NaN
            check_progress(progress)  # raises with the precise message
        if self._int_slots and type(task) is int and 0 <= task < self._num_slots:
            s = task
        else:
            s = self.index.slot(task, add=self.n is None)
        self._obs_slots.append(s)
        self._obs_values.append(v)
        c = self._since_refresh + 1
        if c >= self.update_period:
            self._since_refresh = 0
            self.num_refreshes += 1
            self._due.append(len(self._obs_slots))
        else:
            self._since_refresh = c
        if len(self._obs_slots) >= _MAX_QUEUED:  # no read for a while: bound the queue's memory
            self._catch_up()

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """One finished episode; ``progress`` (success in [0, 1]) updates the task's estimate."""
        if not _isfinite(episode_return):
            check_finite("episode_return", episode_return)  # raises (TypeError for a non-number)
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
        self._catch_up()
        self._ensure(len(self.index))
        self._est_p[slots] = values
        self._est_count[slots] = np.maximum(self._est_count[slots], 1)
        self._est_evaluated[slots] = True
        if self.method == "dist":
            self._dirty.extend(slots.tolist())
        self._refresh()

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks: from the buffer with probability ρ, else uniform (top-K); ∝ learnability (dist)."""
        self._check_k(k)
        self._catch_up(fold=False)  # sampling reads the buffer / tree, which change only at refreshes
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
        if self._buffer.size == 0:
            self._refresh()
        buffer = self._buffer
        if k == 1 and self.sample_ratio == 1.0:  # the common call: one draw, same generator stream
            self.num_sampled += 1
            self.rng.random(1)
            return self.index.tasks(buffer[self.rng.integers(buffer.size, size=1)])
        from_buffer = self.rng.random(k) < self.sample_ratio
        out: list[EncodedTask] = [None] * k
        nb = int(from_buffer.sum())
        if nb:
            picks = buffer[self.rng.integers(buffer.size, size=nb)]
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
        self._catch_up(fold=False)
        if self.method == "dist":
            if self._tree is None:
                self._refresh()
            assert self._tree is not None
            w = self._tree.weights
            return w / w.sum() if self._tree.positive else np.full(self.n, 1.0 / self.n)
        if self._buffer.size == 0:
            self._refresh()
        p = np.full(self.n, (1.0 - self.sample_ratio) / self.n)
        np.add.at(p, self._buffer, self.sample_ratio / self._buffer.size)
        return p

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        self._catch_up()
        out = super().metrics()
        m = len(self.index)
        self._ensure(m)
        seen = self._est_count[:m] > 0
        out["sfl/tasks_seen"] = float(seen.sum())
        seen_l = learnability(self._est_p[:m][seen])
        out["sfl/mean_learnability_seen"] = float(seen_l.mean()) if seen.any() else 0.0
        if self.method == "topk" and self._buffer.size:
            out["sfl/buffer_mean_learnability"] = float(self._weights(self._buffer).mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        self._catch_up()
        state = super().state_dict()
        m = len(self.index)
        self._ensure(m)
        state.update(
            p=self._est_p[:m].copy(), count=self._est_count[:m].copy(),
            evaluated=self._est_evaluated[:m].copy(),
            buffer=self._buffer.copy(), since_refresh=self._since_refresh, num_refreshes=self.num_refreshes,
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
        evaluated = state.get("evaluated", np.zeros(m, dtype=bool))
        if np.shape(state["p"]) != (m,) or np.shape(state["count"]) != (m,) or np.shape(evaluated) != (m,):
            raise ValueError(f"state_dict arrays do not match its index of {m} tasks")
        self._est_p = np.array(state["p"], dtype=np.float64)
        self._est_count = np.array(state["count"], dtype=np.int64)
        self._est_evaluated = np.array(evaluated, dtype=bool)
        self._buffer = np.array(state["buffer"], dtype=np.int64)
        self._since_refresh = int(state["since_refresh"])
        self.num_refreshes = int(state["num_refreshes"])
        self._dirty = [int(s) for s in state["dirty"]]
        self._obs_slots, self._obs_values, self._due = [], [], []
        self._num_slots = len(self.index) if self.index.indexed else 0
        self._tree = None
        if state["tree_weights"] is not None:
            tree = SumTree(np.asarray(state["tree_weights"], dtype=np.float64))
            tree.tree = np.array(state["tree"], dtype=np.float64)  # the exact sums, drift included
            tree._writes = int(state["tree_writes"])
            self._tree = tree
