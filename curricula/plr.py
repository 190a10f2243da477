"""Prioritized Level Replay (PLR) and Robust PLR / PLR⊥.

Papers:

* M. Jiang, E. Grefenstette, T. Rocktäschel, "Prioritized Level Replay", ICML 2021 (PLR);
* M. Jiang, M. Dennis, J. Parker-Holder, J. Foerster, E. Grefenstette, T. Rocktäschel, "Replay-Guided
  Adversarial Environment Design", NeurIPS 2021 (Robust PLR, written PLR⊥).

The algorithm keeps a **buffer** of at most ``buffer_size`` tasks with a score each and, at every sample,
either **replays** a buffered task or **explores** a new one:

1. *Replay decision.* With probability ``P_replay`` replay, else draw a new task. Original PLR
   (``replay_prob=None``, finite spaces only) replays with the proportion of seen tasks,
   ``P_replay = n_seen / num_tasks`` (``n_seen`` = distinct tasks sampled so far; Jiang et al. 2021, for
   Procgen's finite training levels); Robust PLR uses a fixed ``replay_prob`` (0.5 in Jiang et al. 2021b
   and in the ATLAS PLR⊥ table). Replay needs a non-empty buffer with
   ``n_buffer >= min_fill_ratio * capacity`` (``capacity = min(buffer_size, num_tasks)``); when every task
   of a finite space is buffered, every sample is a replay. The decision is made per sample (the papers
   decide once per batch of parallel envs; per sample suits asynchronous workers and gives the same
   proportions).
2. *Replay distribution* (module :mod:`magister.curricula.scoring`)::

       P = (1 - rho) * P_S + rho * P_C
       P_S(i) = h(S_i)^(1/beta) / sum_j h(S_j)^(1/beta),   h = 1/rank (rank) or h = S (power)
       P_C(i) = (c - C_i) / sum_j (c - C_j)

   with ``c`` the number of tasks sampled so far and ``C_i`` the value of ``c`` when entry ``i`` was last
   sampled (or inserted).
3. *New tasks* are drawn uniformly from the tasks *not in the buffer* for finite spaces (the paper's
   "unseen levels"; with ``buffer_size >= num_tasks`` these are exactly the never-scored tasks), and from
   the task space's generator for unbounded spaces (open-ended, continuous: fresh tasks).
4. *Scoring and insertion.* When a score arrives for a task, a buffered task's score is replaced by it
   (PLR keeps the latest score); a task outside the buffer is inserted while the buffer has room, and
   otherwise replaces the entry with the lowest score only if its score is strictly higher (ties among the
   lowest: the stalest entry goes).
5. *Robust PLR / PLR⊥* (``robust=True`` or :class:`RobustPLR`): new tasks are **evaluation-only** –
   ``sample_tasks`` marks them ``TaskSample(task, train=False)`` so the trainer does not take gradients on
   them; only replayed tasks are trained on (``train=True``).

Scores (``score=``): ``"value_l1"`` (default, PLR), ``"positive_value_loss"``, ``"max_mc"`` (MaxMC, the
ATLAS default for PLR⊥) come from the learner, which has the values: call :meth:`PLR.update_scores` (the
helper :func:`magister.integrations.scores.feed_scores` does it from a rollout) or
``update_on_demand({"scores": [(task, score), ...]})``. ``"learnability"`` (``p(1-p)`` of the recent success
rate, from ``progress``) and ``"return"`` (recent mean episode return) need no values: they are computed from
:meth:`PLR.update_on_episode`. A callable ``f(segment) -> float`` (see
:class:`~magister.curricula.scoring.Segment`) is a user score, applied by the learner-side helper.

"Recent" for the episode scores means a running mean over the last ``window`` episodes, kept in O(1)
memory as ``m <- m + (x - m) / min(n, window)`` (an exact mean for the first ``window`` episodes, then an
exponential average with rate ``1/window``).

Defaults (``PLR``): Procgen settings of Jiang et al. 2021 as tabulated in the Syllabus paper (Supp. D.5):
value L1 score, rank prioritisation, ``beta = 0.1``, ``rho = 0.1``, buffer 200, ``gamma = 0.999``,
``lambda = 0.95``. ``RobustPLR`` overrides with the PLR⊥ settings of the ATLAS paper (Appendix E, Minigrid):
replay rate 0.5, MaxMC, rank, ``beta = 1.0``, ``rho = 0.1`` (its buffer of 50 000 is left to the user:
default here 4000), ``gamma = 0.99``, ``lambda = 0.9``. ``min_fill_ratio`` is not given in these papers;
the default 0 replays as soon as anything is buffered.

Bookkeeping is incremental: the buffer is a set of fixed numpy arrays, per-task statistics are growable
arrays indexed by :class:`~magister.curricula._table.TaskIndex` slots, and nothing loops over all tasks,
so spaces of 10^6 tasks work. A **score write is O(1)**: it stores the score and records the entry as
changed. The buffer's *score order* (positions by descending score, ties by position, so it depends only on
the buffer's contents) is repaired lazily, once, before the next read that needs it (a replay draw,
``replay_weights``/``distribution``/``metrics``), in one pass over every write since the last repair: a
few changed entries (2; up to 12 in buffers of 48k entries or more) move by one vectorised shift each,
O(buffer); more are dropped with one boolean mask and merged back at ``np.searchsorted`` positions,
O(buffer + k log buffer); more than buffer/8 re-sort.
Many episodes' scores arriving between two samples (the asynchronous case) thus cost one repair, not one
shift each. An insertion into a full buffer needs the lowest entry: a running lower bound rejects most
lower scores in O(1), else the end of the order (when current) or one vectorised scan gives it.

A small buffer (capacity at most 1024) draws replays from ``P``, built from the score order without a sort,
exactly as ``rng.choice(m, k, p=P)`` would: O(buffer) per sample, cheap at that size. A larger one draws
them without building ``P``: each draw picks the staleness component with probability ``rho``, else the
score component (a mixture, so the draw follows ``P = (1 - rho) P_S + rho P_C`` exactly). For rank
prioritisation a draw picks a rank from the fixed rank weights, then the entry at that rank in the score
order, or uniformly one of those tied with it (which is what averaging the weights of tied ranks means);
for power prioritisation ``P_S`` and its CDF are cached until a score changes. ``P_C`` draws descend a
Fenwick tree of the last-sampled clocks, kept current, whose node over ``L`` entries weighs
``c * L - sum C``. So ``sample(k)`` costs O(k log buffer) plus any pending repair, never a sort.

>>> from magister.task_spaces.base import TaskSpace
>>> class Ints(TaskSpace):
...     num_tasks, indexed = 50, True
...     def sample(self): return int(self.rng.integers(50))
...     def contains(self, t): return isinstance(t, int) and 0 <= t < 50
...     def encode(self, t): return t
...     def decode(self, e):
...         if not self.contains(e): raise ValueError(e)
...         return e
>>> plr = PLR(Ints(), score="return", buffer_size=10, seed=0)
>>> tasks = plr.sample(4)
>>> for t in tasks:
...     plr.update_on_episode(1.0 if t % 2 else 0.0, 10, t, 0.0)
>>> len(plr.buffer_tasks())
4
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from ._table import TaskIndex, grow
from .base import Curriculum, TaskSample, check_finite
from .scoring import (
    EPISODE_SCORES,
    SCORE_NAMES,
    Segment,
    rank_weights_from_order,
    replay_distribution,
    sorted_rank_weights,
    staleness_weights,
)

logger = logging.getLogger(__name__)

__all__ = ["PLR", "PLRPerp", "RobustPLR"]

_EMPTY = -1
#: Buffers of more entries draw replays as a mixture, without building P (see the module docstring).
_MIXTURE_MIN_CAPACITY = 1025
#: Repair of the score order (``m`` filled entries): up to ``max(_REPAIR_SHIFT_MAX, min(12, m // 4096))``
#: changed entries move one by one, one shift each (a memmove of ~m/3 entries: cheaper, for a few entries,
#: than the merge pass's four masked copies of the whole order) ...
_REPAIR_SHIFT_MAX = 2
#: ... more than ``filled / _REPAIR_SORT_DIVISOR`` changed entries re-sort the whole order; in between, one
#: vectorised merge pass (see ``_repair_order``).
_REPAIR_SORT_DIVISOR = 8
#: ``update_scores`` calls with at most this many tasks (lists of ints and floats) are checked in Python.
_FAST_WRITE_MAX = 16


class PLR(Curriculum):
    """Prioritized Level Replay over any task space.

    Args:
        task_space: the tasks to choose from.
        score: ``"value_l1"``, ``"positive_value_loss"``, ``"max_mc"``, ``"learnability"``, ``"return"``,
            or a callable ``f(segment) -> float`` (used by the learner-side helper).
        buffer_size: maximum number of buffered tasks.
        replay_prob: probability of replaying; ``None`` = original PLR, the proportion of tasks seen.
        temperature: ``beta``.
        staleness_coef: ``rho``.
        prioritization: ``"rank"`` or ``"power"``.
        min_fill_ratio: replay only once ``n_buffer >= min_fill_ratio * capacity``.
        robust: PLR⊥ – new tasks are evaluation-only (``train=False``).
        gamma: discount used by the learner-side helper to compute GAE scores.
        gae_lambda: GAE's ``lambda`` for the same scores.
        window: number of recent episodes averaged by the ``"learnability"`` and ``"return"`` scores.
        seed: seed of the curriculum's generator.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        score: str | Callable[[Segment], float] = "value_l1",
        buffer_size: int = 200,
        replay_prob: float | None = None,
        temperature: float = 0.1,
        staleness_coef: float = 0.1,
        prioritization: str = "rank",
        min_fill_ratio: float = 0.0,
        robust: bool = False,
        gamma: float = 0.999,
        gae_lambda: float = 0.95,
        window: int = 10,
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if isinstance(score, str):
            if score not in SCORE_NAMES:
                raise ValueError(f"unknown score {score!r}; expected one of {SCORE_NAMES} or a callable")
        elif not callable(score):
            raise TypeError(f"score must be a name or a callable f(segment) -> float, got {score!r}")
        if not isinstance(buffer_size, (int, np.integer)) or isinstance(buffer_size, bool) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        if replay_prob is not None and not 0.0 <= replay_prob <= 1.0:
            raise ValueError(f"replay_prob must be in [0, 1] or None, got {replay_prob!r}")
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
        if not 0.0 <= staleness_coef <= 1.0:
            raise ValueError(f"staleness_coef must be in [0, 1], got {staleness_coef!r}")
        if prioritization not in ("rank", "power"):
            raise ValueError(f"prioritization must be 'rank' or 'power', got {prioritization!r}")
        if replay_prob is None and task_space.num_tasks is None:
            raise ValueError(
                "replay_prob=None (replay with the proportion of seen tasks) needs a finite task space; "
                "pass a replay probability for unbounded spaces"
            )
        if not 0.0 <= min_fill_ratio <= 1.0:
            raise ValueError(f"min_fill_ratio must be in [0, 1], got {min_fill_ratio!r}")
        if not 0.0 <= gamma <= 1.0 or not 0.0 <= gae_lambda <= 1.0:
            raise ValueError(f"gamma and gae_lambda must be in [0, 1], got {gamma!r}, {gae_lambda!r}")
        if not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        self.score = score
        self.buffer_size = int(buffer_size)
        self.replay_prob = None if replay_prob is None else float(replay_prob)
        self.temperature = float(temperature)
        self.staleness_coef = float(staleness_coef)
        self.prioritization = prioritization
        self.min_fill_ratio = float(min_fill_ratio)
        self.robust = bool(robust)
        self.gamma = float(gamma)
        self.gae_lambda = float(gae_lambda)
        self.window = int(window)

        n = task_space.num_tasks
        self.capacity = self.buffer_size if n is None else min(self.buffer_size, int(n))
        self._index = TaskIndex(task_space)
        # The buffer: fixed arrays; entries 0 .. _n_buf-1 are filled (kept compact).
        self._buf_slot = np.full(self.capacity, _EMPTY, dtype=np.int64)
        self._buf_score = np.zeros(self.capacity, dtype=np.float64)
        self._buf_last = np.zeros(self.capacity, dtype=np.int64)
        self._n_buf = 0
        # Sampling structures: the filled positions ordered by descending score (keys are -score, ascending;
        # ties by position), repaired lazily; for large buffers (capacity >= _MIXTURE_MIN_CAPACITY, which
        # draw replays as a mixture) a Fenwick tree over the last-sampled clocks C_i, kept current.
        self._mixture = self.capacity >= _MIXTURE_MIN_CAPACITY
        self._rank_key = np.zeros(self.capacity, dtype=np.float64)
        self._rank_pos = np.zeros(self.capacity, dtype=np.int64)
        self._n_ordered = 0  # entries 0 .. _n_ordered-1 are in the order (later ones were added since)
        # Entries whose score changed since the order was last repaired -> their score in the order.
        self._dirty: dict[int, float] = {}
        self._order_stale = False  # too many changed entries to track: re-sort at the next repair
        self._last_tree = np.zeros(self.capacity + 1 if self._mixture else 1, dtype=np.int64)
        self._last_total = 0  # sum of C_i over the filled entries
        self._rank_cdf_cache: tuple[float, np.ndarray, np.ndarray] | None = None  # see _rank_table
        self._ps_cdf: np.ndarray | None = None  # power prioritisation: CDF of the cached P_S
        # Per-slot statistics (grown on demand): buffer position, seen flag, best return, episode means.
        self._pos = np.full(0, _EMPTY, dtype=np.int64)
        self._seen = np.zeros(0, dtype=bool)
        self._max_return = np.zeros(0, dtype=np.float64)
        self._ep_mean = np.zeros(0, dtype=np.float64)
        self._ep_n = np.zeros(0, dtype=np.int64)
        self._clock = 0  # c: number of tasks sampled so far
        self._ps_cache: np.ndarray | None = None  # P_S of the buffer, reset whenever a score changes
        self._ps_key: tuple = ()
        self._low = np.inf  # a lower bound of the lowest buffered score (inf: buffer empty)
        self._n_seen = 0  # distinct tasks ever sampled
        self.num_replayed = 0
        self.num_new = 0
        self.num_inserted = 0
        self.num_evicted = 0

    # -- properties ---------------------------------------------------------------------------------
    @property
    def score_name(self) -> str:
        """The score's name (``"custom"`` for a callable)."""
        return self.score if isinstance(self.score, str) else "custom"

    @property
    def uses_episode_scores(self) -> bool:
        """Whether scores come from :meth:`update_on_episode` (``learnability``/``return``)."""
        return isinstance(self.score, str) and self.score in EPISODE_SCORES

    @property
    def clock(self) -> int:
        """``c``: the number of tasks sampled so far (the staleness clock)."""
        return self._clock

    def __len__(self) -> int:
        return self._n_buf

    # -- per-slot arrays ----------------------------------------------------------------------------
    def _ensure(self, size: int) -> None:
        cur = self._pos.shape[0]
        if cur >= size:
            return
        if self._index.indexed:  # double, but never beyond the space: slots are < num_tasks
            size = min(len(self._index), max(size, 2 * cur, 16))
        self._pos = grow(self._pos, size, _EMPTY)
        self._seen = grow(self._seen, size, False)
        self._max_return = grow(self._max_return, size, -np.inf)
        self._ep_mean = grow(self._ep_mean, size, 0.0)
        self._ep_n = grow(self._ep_n, size, 0)

    def _register(self, tasks: Sequence[EncodedTask]) -> np.ndarray:
        slots = self._index.slots(tasks, add=True)
        if slots.size:
            self._ensure(int(slots.max()) + 1)
            fresh = np.unique(slots[~self._seen[slots]])
            self._n_seen += int(fresh.size)
            self._seen[slots] = True
        return slots

    def _known_slots(self, tasks: Sequence[EncodedTask]) -> np.ndarray:
        """Slots of tasks this curriculum has sampled; raises before any state changes."""
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (Sequence, np.ndarray)):
            raise TypeError(f"tasks must be a sequence of encoded tasks, got {type(tasks).__name__}")
        if self._index.indexed:
            slots = self._index.slots(tasks, add=False)  # ValueError for tasks outside the space
            if slots.ndim != 1:
                raise ValueError(f"tasks must be a flat sequence of encoded tasks, got shape {slots.shape}")
            n_seen = self._seen.shape[0]
            unseen = slots >= n_seen
            unseen[~unseen] = ~self._seen[slots[~unseen]]
            if slots.size and unseen.any():
                bad = slots[unseen][0]
                raise KeyError(f"task {int(bad)!r} was never sampled by this curriculum; cannot update it")
            return slots
        out = np.empty(len(tasks), dtype=np.int64)
        for i, t in enumerate(tasks):
            try:
                out[i] = self._index.slot(t, add=False)
            except ValueError:
                raise KeyError(f"task {t!r} was never sampled by this curriculum; cannot update it") from None
        return out

    # -- sampling -----------------------------------------------------------------------------------
    def _replay_probability(self) -> float:
        """The probability that the next sample is a replay."""
        n = self.task_space.num_tasks
        if n is not None and self._n_buf >= int(n):
            return 1.0  # every task is buffered: nothing new left to draw
        if self._n_buf == 0 or self._n_buf < self.min_fill_ratio * self.capacity:
            return 0.0
        if self.replay_prob is None:
            return min(1.0, self._n_seen / int(self.task_space.num_tasks))
        return self.replay_prob

    def replay_weights(self) -> np.ndarray:
        """``P = (1 - rho) P_S + rho P_C`` over the filled buffer entries (in :meth:`buffer_tasks` order).

        ``P_S`` (for rank prioritisation, from the score order) is cached until a score changes; ``P_C`` is
        recomputed, O(buffer). (Buffers larger than 1024 entries sample without it: see ``_draw_replays``.)
        """
        m = self._n_buf
        ps = self._score_probs()
        rho = self.staleness_coef
        if rho == 0.0:
            return ps.copy()
        return (1.0 - rho) * ps + rho * staleness_weights(self._buf_last[:m], self._clock)

    def _score_probs(self) -> np.ndarray:
        """``P_S`` over the filled buffer entries, cached until a score changes."""
        m = self._n_buf
        key = (m, self.temperature, self.prioritization)
        if self._ps_cache is None or self._ps_key != key:
            s = self._buf_score[:m]
            if self.prioritization == "power" or m == 0:
                self._ps_cache = replay_distribution(
                    s, self._buf_last[:m], self._clock, temperature=self.temperature, staleness_coef=0.0,
                    prioritization=self.prioritization,
                )
            else:  # rank_weights, from the score order and the cached rank weights: no sort
                self._repair_order()
                self._ps_cache = rank_weights_from_order(s, self._rank_pos[:m], self._rank_table()[0])
            self._ps_key = key
            self._ps_cdf = None
        return self._ps_cache

    def _choice(self, k: int) -> np.ndarray:
        """``k`` buffer positions drawn from :meth:`replay_weights`: exactly what ``Generator.choice(m, k,
        p=P)`` computes (the same draws from the same generator state), without its O(m) checks of ``P``."""
        cdf = self.replay_weights().cumsum()
        cdf /= cdf[-1]
        return cdf.searchsorted(self.rng.random(k), side="right")

    # -- replay draws without building P (buffers of capacity >= _MIXTURE_MIN_CAPACITY) -----------
    def _draw_replays(self, k: int) -> np.ndarray:
        """``k`` buffer positions drawn i.i.d. from ``P = (1 - rho) P_S + rho P_C`` as a mixture."""
        stale = self.rng.random(k) < self.staleness_coef
        u = self.rng.random(k)
        out = np.empty(k, dtype=np.int64)
        n_stale = int(stale.sum())
        if n_stale:
            out[stale] = self._draw_stale(u[stale])
        if n_stale < k:
            out[~stale] = self._draw_score(u[~stale])
        return out

    def _draw_score(self, u: np.ndarray) -> np.ndarray:
        """Buffer positions for uniforms ``u``, drawn from ``P_S``."""
        m = self._n_buf
        if self.prioritization == "power":
            ps = self._score_probs()  # resets the CDF whenever it recomputes P_S
            if self._ps_cdf is None:
                self._ps_cdf = np.cumsum(ps)
            cdf = self._ps_cdf
            return np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), m - 1)
        # rank: pick a rank r with probability h_r / sum h, then an entry uniformly among those tied with
        # the entry at rank r (tied entries share the mean weight of their ranks).
        self._repair_order()
        cdf = self._rank_cdf()
        j = np.minimum(np.searchsorted(cdf[:m], u * cdf[m - 1], side="right"), m - 1)
        keys = self._rank_key[:m]
        lo = np.searchsorted(keys, keys[j], side="left")
        width = np.searchsorted(keys, keys[j], side="right") - lo
        tied = width > 1
        if tied.any():
            j[tied] = lo[tied] + np.minimum((self.rng.random(int(tied.sum())) * width[tied]).astype(np.int64),
                                            width[tied] - 1)
        return self._rank_pos[j]

    def _rank_cdf(self) -> np.ndarray:
        """Cumulative rank weights ``sum_{r' <= r} r'^(-1/beta)`` for ranks ``1 .. capacity``."""
        return self._rank_table()[1]

    def _rank_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Rank weights ``r^(-1/beta)`` for ranks ``1 .. capacity`` and their cumulative sums (cached)."""
        cache = self._rank_cdf_cache
        if cache is None or cache[0] != self.temperature:
            w = sorted_rank_weights(self.capacity, self.temperature)
            cache = (self.temperature, w, np.cumsum(w))
            self._rank_cdf_cache = cache
        return cache[1], cache[2]

    def _draw_stale(self, u: np.ndarray) -> np.ndarray:
        """Buffer positions for uniforms ``u``, drawn from ``P_C(i) = (c - C_i) / sum_j (c - C_j)``.

        Descends the Fenwick tree of ``C``: the node covering ``L`` filled entries weighs ``c L - sum C``.
        """
        m, c = self._n_buf, self._clock
        total = c * m - self._last_total
        if total <= 0:  # every entry is fresh: P_C is uniform
            return np.minimum((u * m).astype(np.int64), m - 1)
        tree = self._last_tree
        top = 1 << (m.bit_length() - 1)
        if u.size <= 4:  # a few draws: scalar descents beat vectorised passes
            out = []
            for target in (u * float(total)).tolist():
                pos, step = 0, top
                while step:
                    nxt = pos + step
                    if nxt <= m:
                        val = c * step - tree.item(nxt)
                        if val <= target:
                            target -= val
                            pos = nxt
                    step >>= 1
                out.append(min(pos, m - 1))
            return np.array(out, dtype=np.int64)
        target = u * float(total)
        pos = np.zeros(u.shape[0], dtype=np.int64)
        step = top
        while step:
            nxt = pos + step
            val = np.where(nxt <= m, c * step - tree[np.minimum(nxt, m)], np.inf)
            go = val <= target
            target = np.where(go, target - val, target)
            pos = np.where(go, nxt, pos)
            step >>= 1
        return np.minimum(pos, m - 1)

    def _set_last(self, pos: np.ndarray, last: np.ndarray) -> None:
        """``C[pos] = last`` for distinct buffer positions, keeping the Fenwick tree in step."""
        if not self._mixture:  # small buffers build P_C from C directly: no tree
            self._buf_last[pos] = last
            return
        if pos.size <= 4:  # a few point updates: scalar loops beat vectorised passes
            for p, c in zip(pos.tolist(), last.tolist()):
                self._set_last_one(p, c)
            return
        delta = last - self._buf_last[pos]
        self._buf_last[pos] = last
        self._last_total += int(delta.sum())
        idx = pos + 1
        while idx.size:
            np.add.at(self._last_tree, idx, delta)
            idx = idx + (idx & -idx)
            keep = idx <= self.capacity
            idx, delta = idx[keep], delta[keep]

    def _set_last_one(self, pos: int, last: int) -> None:
        """``C[pos] = last`` for one buffer position: O(log capacity) tree nodes, one numpy call."""
        if not self._mixture:
            self._buf_last[pos] = last
            return
        d = last - int(self._buf_last[pos])
        self._buf_last[pos] = last
        self._last_total += d
        if d == 0:
            return
        nodes = []
        i, size = pos + 1, self.capacity
        while i <= size:
            nodes.append(i)
            i += i & -i
        self._last_tree[nodes] += d  # distinct nodes, so a fancy-indexed add is exact

    # -- the score order: lazy repair -----------------------------------------------------------------
    # A score write only records the entry in ``_dirty`` (with the score it has in the order); the order
    # is repaired once, before the next read that needs it. The order is by score, descending, then by
    # buffer position, so it depends only on the buffer's contents (a loaded state samples exactly as the
    # saved one would), however it was repaired.
    def _changed(self, pos: int, old: float) -> None:
        """Record that entry ``pos``, whose score in the order is ``old``, changed: O(1). Past
        ``filled / _REPAIR_SORT_DIVISOR`` changed entries the next repair re-sorts, and stops recording."""
        dirty = self._dirty
        if self._order_stale or pos in dirty:
            return
        dirty[pos] = old
        if len(dirty) * _REPAIR_SORT_DIVISOR > self._n_buf:
            self._order_stale = True
            dirty.clear()

    def _repair_order(self) -> None:
        """Bring the score order up to date with every score write since the last repair.

        ``k`` changed entries among ``m``: a few (``_REPAIR_SHIFT_MAX``, up to 12 for large ``m``) move one
        by one (a vectorised shift each, O(m)); ``k > m / _REPAIR_SORT_DIVISOR`` re-sort (O(m log m));
        otherwise one merge pass:
        remove the ``k`` stale keys with one boolean mask, put the new ones back at ``np.searchsorted``
        positions, O(m + k log m).
        """
        dirty = self._dirty
        if self._order_stale:
            self._sort_order()
            self._order_stale = False
        elif not dirty:
            return
        elif len(dirty) <= max(_REPAIR_SHIFT_MAX, min(12, self._n_buf >> 12)):
            n0 = self._n_ordered
            for pos, old in dirty.items():
                self._shift_one(pos, None if pos >= n0 else old)
        else:
            self._merge_order()
        dirty.clear()
        self._n_ordered = self._n_buf

    def _order_index(self, keys: np.ndarray, order: np.ndarray, key: float, pos: int) -> int:
        """Index of ``(key, pos)`` in an order sorted by ``(key, pos)`` (where it is or would go)."""
        lo = int(np.searchsorted(keys, key, side="left"))
        hi = int(np.searchsorted(keys, key, side="right"))
        if hi - lo <= 1 and (hi == lo or int(order[lo]) >= pos):
            return lo
        return lo + int(np.searchsorted(order[lo:hi], pos))

    def _shift_one(self, pos: int, old: float | None) -> None:
        """Move entry ``pos`` from score ``old`` in the order (``None``: from outside it, an entry added
        since the last repair) to its current score: one vectorised shift, no sort."""
        key, order = self._rank_key, self._rank_pos
        n = self._n_ordered
        if old is None:  # append with key +inf (keeps the order sorted), then move
            i = n
            key[i] = np.inf
            order[i] = pos
            n += 1
            self._n_ordered = n
        else:
            i = self._order_index(key[:n], order[:n], -old, pos)
        new = -float(self._buf_score[pos])
        j = self._order_index(key[:n], order[:n], new, pos)
        if j > i:  # remove at i, insert at j - 1: shift (i, j) left
            j -= 1
            key[i:j] = key[i + 1:j + 1]
            order[i:j] = order[i + 1:j + 1]
        elif j < i:  # shift [j, i) right
            key[j + 1:i + 1] = key[j:i]
            order[j + 1:i + 1] = order[j:i]
        key[j] = new
        order[j] = pos

    def _merge_order(self) -> None:
        """Repair the order in one pass: drop the changed entries' stale keys, merge their new keys in."""
        dirty = self._dirty
        n0, m, k = self._n_ordered, self._n_buf, len(dirty)
        pos = np.fromiter(dirty.keys(), dtype=np.int64, count=k)
        old = np.fromiter(dirty.values(), dtype=np.float64, count=k)
        keys, order = self._rank_key[:n0], self._rank_pos[:n0]
        was = pos < n0  # the others were added since the last repair: not in the order
        drop = self._search_pairs(keys, order, -old[was], pos[was])
        keep = np.ones(n0, dtype=bool)
        keep[drop] = False
        rest_key, rest_pos = keys[keep], order[keep]  # copies: the arrays below may be overwritten
        new_key = -self._buf_score[pos]
        srt = np.lexsort((pos, new_key))  # by (key, position), the order's own tie-break
        new_key, new_pos = new_key[srt], pos[srt]
        at = self._search_pairs(rest_key, rest_pos, new_key, new_pos) + np.arange(k)  # final indices
        fill = np.ones(m, dtype=bool)
        fill[at] = False
        self._rank_key[:m][fill] = rest_key
        self._rank_pos[:m][fill] = rest_pos
        self._rank_key[at] = new_key
        self._rank_pos[at] = new_pos

    @staticmethod
    def _search_pairs(keys: np.ndarray, order: np.ndarray, key: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Indices of the pairs ``(key[i], pos[i])`` in an order sorted by ``(key, pos)`` (vectorised;
        a scalar search by position only inside runs of tied keys)."""
        lo = np.searchsorted(keys, key, side="left")
        width = np.searchsorted(keys, key, side="right") - lo
        one = np.flatnonzero(width == 1)  # one entry with that key: before or after it
        lo[one] += order[lo[one]] < pos[one]
        for i in np.flatnonzero(width > 1).tolist():
            a = int(lo[i])
            lo[i] = a + int(np.searchsorted(order[a:a + int(width[i])], pos[i]))
        return lo

    def _sort_order(self) -> None:
        """Rebuild the score order from scratch (one stable sort)."""
        m = self._n_buf
        order = np.argsort(-self._buf_score[:m], kind="stable")
        self._rank_key[:m] = -self._buf_score[:m][order]
        self._rank_pos[:m] = order

    def _rebuild_sampling(self) -> None:
        """Rebuild the score order (a sort) and the Fenwick tree of ``C`` from the buffer arrays."""
        m = self._n_buf
        self._dirty.clear()
        self._order_stale = False
        self._ps_cdf = None
        self._sort_order()
        self._n_ordered = m
        if not self._mixture:
            return
        c = np.concatenate(([0], np.cumsum(self._buf_last)))
        i = np.arange(1, self.capacity + 1)
        self._last_tree = np.concatenate(([0], c[i] - c[i - (i & -i)])).astype(np.int64)
        self._last_total = int(self._buf_last[:m].sum())

    def _draw_new(self, k: int) -> list[EncodedTask]:
        """``k`` tasks not in the buffer (finite spaces), or fresh from the generator (unbounded spaces)."""
        n = self.task_space.num_tasks
        if n is None:
            return self.task_space.sample_encoded(k, rng=self.rng)
        n = int(n)
        if not self._index.indexed:
            return self._draw_new_keyed(k)
        in_buf = self._pos
        if self._n_buf * 2 > n:  # dense: draw from the explicit complement
            free = np.setdiff1d(np.arange(n), self._buf_slot[: self._n_buf], assume_unique=True)
            return free[self.rng.integers(free.size, size=k)].tolist()
        out = np.empty(0, dtype=np.int64)
        while out.size < k:  # rejection sampling; acceptance >= 1/2
            cand = self.rng.integers(n, size=2 * (k - out.size))
            inside = cand < in_buf.shape[0]
            cand_ok = np.ones(cand.size, dtype=bool)
            cand_ok[inside] = in_buf[cand[inside]] == _EMPTY
            out = np.concatenate([out, cand[cand_ok]])
        return out[:k].tolist()

    def _buffered(self, encoded: EncodedTask) -> bool:
        if encoded not in self._index:
            return False
        return bool(self._pos[self._index.slot(encoded, add=False)] != _EMPTY)

    def _draw_new_keyed(self, k: int) -> list[EncodedTask]:
        """Non-indexed finite spaces: rejection against the buffer, then the explicit complement."""
        out: list[EncodedTask] = []
        if self._n_buf * 2 <= int(self.task_space.num_tasks):
            for _ in range(8):  # acceptance >= 1/2 per draw
                out.extend(t for t in self.task_space.sample_encoded(k - len(out), rng=self.rng)
                           if not self._buffered(t))
                if len(out) >= k:
                    return out[:k]
        free = [t for t in self.task_space.encoded_tasks if not self._buffered(t)]
        out.extend(free[i] for i in self.rng.integers(len(free), size=k - len(out)).tolist())
        return out

    def _sample_samples(self, k: int) -> list[TaskSample]:
        self._check_k(k)
        p_rep = self._replay_probability()
        if k == 1:  # scalar fast path (the same draws as below, from the same generator state)
            if p_rep > 0 and self.rng.random() < p_rep:
                return [self._replay_one()]
            replay = np.zeros(1, dtype=bool)
        else:
            replay = self.rng.random(k) < p_rep if p_rep > 0 else np.zeros(k, dtype=bool)
        n_rep = int(replay.sum())
        ticks = self._clock + 1 + np.arange(k)  # each sampled task advances the clock by one
        out: list[TaskSample | None] = [None] * k
        if n_rep:
            if self._mixture:
                pos = self._draw_replays(n_rep)
            else:
                pos = self._choice(n_rep)
            # C_i <- the tick of entry i's last draw in this call (ticks increase, so the last one wins)
            uniq, last = np.unique(pos[::-1], return_index=True)
            self._set_last(uniq, ticks[replay][::-1][last])
            for j, t in zip(np.flatnonzero(replay).tolist(), self._index.tasks(self._buf_slot[pos])):
                out[j] = TaskSample(t, True)
        if n_rep < k:
            new = self._draw_new(k - n_rep)
            self._register(new)
            train = not self.robust
            for j, t in zip(np.flatnonzero(~replay).tolist(), new):
                out[j] = TaskSample(t, train)
        self._clock += k
        self.num_sampled += k
        self.num_replayed += n_rep
        self.num_new += k - n_rep
        return out  # type: ignore[return-value]

    def _replay_one(self) -> TaskSample:
        """One replay: ``_sample_samples(1)``'s replay branch with Python scalars instead of arrays."""
        if self._mixture:  # as _draw_replays(1): the component's uniform first, then the draw's
            stale = self.rng.random() < self.staleness_coef
            u = self.rng.random()
            if stale:
                pos = int(self._draw_stale(np.array([u]))[0])
            elif self.prioritization == "rank":
                pos = self._draw_rank_one(u)
            else:
                pos = int(self._draw_score(np.array([u]))[0])
        else:
            pos = int(self._choice(1)[0])
        self._clock += 1
        self._set_last_one(pos, self._clock)
        self.num_sampled += 1
        self.num_replayed += 1
        return TaskSample(self._index.task(self._buf_slot.item(pos)), True)

    def _draw_rank_one(self, u: float) -> int:
        """``_draw_score`` (rank prioritisation) for one uniform ``u``."""
        self._repair_order()
        m = self._n_buf
        cdf = self._rank_cdf()
        j = min(int(cdf[:m].searchsorted(u * cdf.item(m - 1), side="right")), m - 1)
        keys = self._rank_key[:m]
        kj = keys.item(j)
        if (j > 0 and keys.item(j - 1) == kj) or (j < m - 1 and keys.item(j + 1) == kj):  # tied
            lo = int(keys.searchsorted(kj, side="left"))
            width = int(keys.searchsorted(kj, side="right")) - lo
            j = lo + min(int(self.rng.random() * width), width - 1)
        return self._rank_pos.item(j)

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``k`` tasks with their train flags (PLR⊥: new tasks are ``train=False``)."""
        return self._sample_samples(k)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` encoded tasks (the train flags dropped; use :meth:`sample_tasks` for PLR⊥)."""
        return [s.task for s in self._sample_samples(k)]

    def distribution(self) -> np.ndarray:
        """Probability of each task of ``task_space.encoded_tasks`` being the next sample.

        ``P_replay * P(i)`` for buffered tasks plus ``(1 - P_replay) / n_unseen`` for every task outside the
        buffer (new tasks are uniform over the unseen ones). Only for enumerable spaces.
        """
        n = self.task_space.num_tasks
        if n is None:
            raise NotImplementedError(f"{type(self).__name__} over an unbounded space has no distribution")
        n = int(n)
        p_rep = self._replay_probability()
        unseen = n - self._n_buf
        dist = np.full(n, (1.0 - p_rep) / unseen if unseen else 0.0)
        m = self._n_buf
        if m:
            if self._index.indexed:
                where = self._buf_slot[:m]
            else:
                at = {task_key(t): i for i, t in enumerate(self.task_space.encoded_tasks)}
                where = np.array([at[task_key(t)] for t in self.buffer_tasks()], dtype=np.int64)
            dist[where] = p_rep * self.replay_weights()
        return dist

    # -- feedback -----------------------------------------------------------------------------------
    def update_scores(
        self,
        tasks: Sequence[EncodedTask],
        scores: Sequence[float] | np.ndarray,
        max_returns: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        """Set the scores of sampled tasks (applied in order; a task may repeat). O(1) per score, plus,
        for a task entering a full buffer with a score above the running lower bound, finding the lowest.

        Args:
            tasks: encoded tasks, each previously sampled by this curriculum.
            scores: one finite score per task (for ``power`` prioritisation, non-negative).
            max_returns: optional best undiscounted return seen per task, merged into ``R_max``
                (``-inf`` = none known).

        Raises:
            KeyError: a task was never sampled.
            ValueError: shapes differ, a score is NaN/inf or outside the space.

        Nothing is changed when an error is raised.
        """
        if (max_returns is None and self._index.indexed and type(tasks) in (list, tuple)
                and type(scores) in (list, tuple) and len(tasks) == len(scores) <= _FAST_WRITE_MAX):
            checked = self._checked_few(tasks, scores)
            if checked is not None:
                for slot, score in checked:
                    self._set_score(slot, score)
                return
        slots = self._known_slots(tasks)
        s = self._check_values("scores", scores, slots.size)
        if self.prioritization == "power" and np.any(s < 0):
            raise ValueError(f"power prioritisation needs non-negative scores, got {s.min()}")
        mr = None
        if max_returns is not None:  # -inf means "no return known" and is allowed here
            mr = self._check_values("max_returns", max_returns, slots.size, allow_neginf=True)
        if mr is not None:
            np.maximum.at(self._max_return, slots, mr)
        for slot, score in zip(slots.tolist(), s.tolist()):
            self._set_score(slot, score)

    def _checked_few(self, tasks: Sequence[Any], scores: Sequence[Any]) -> list[tuple[int, float]] | None:
        """A few ``(slot, score)`` pairs checked in plain Python (an indexed space; numpy's per-call cost
        dominates writes of one score), or ``None`` when anything is unusual: the caller then takes the
        general path, which raises the precise error."""
        seen = self._seen
        n_seen = seen.shape[0]
        power = self.prioritization == "power"
        out = []
        for t, x in zip(tasks, scores):
            if type(t) is not int or not 0 <= t < n_seen or not seen.item(t):
                return None
            if type(x) is int:
                x = float(x)
            elif type(x) is not float:
                return None
            if not math.isfinite(x) or (power and x < 0):
                return None
            out.append((t, x))
        return out

    @staticmethod
    def _check_values(
        name: str, values: Sequence[float] | np.ndarray, n: int, allow_neginf: bool = False
    ) -> np.ndarray:
        try:
            a = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be numbers, got {values!r}") from exc
        if a.shape != (n,):
            raise ValueError(f"{name} has shape {a.shape}, expected ({n},) (one per task)")
        bad = ~np.isfinite(a)
        if allow_neginf:
            bad &= a != -np.inf
        if bad.any():
            raise ValueError(f"{name} must be finite, got {a[bad][0]!r}")
        return a

    def _set_score(self, slot: int, score: float) -> None:
        """Apply one score: O(1), except an insertion into a full buffer whose score beats ``_low``.

        The score order is not touched: the entry is recorded in ``_dirty`` and the order
        repaired before the next read (see ``_repair_order``).
        """
        pos = self._pos.item(slot)
        if pos != _EMPTY:  # a buffered task: its score is replaced by the latest
            old = self._buf_score.item(pos)
            self._buf_score[pos] = score
            if score != old:
                self._ps_cache = None
                if score < self._low:
                    self._low = score
                self._changed(pos, old)
            return
        if self._n_buf < self.capacity:  # room: insert
            pos = self._n_buf
            self._put(pos, slot, score)
            self._n_buf += 1
            self._changed(pos, score)  # not in the order yet (pos >= _n_ordered): the score is unused
            if score < self._low:
                self._low = score
            return
        # Full: replace the lowest-scored entry only if strictly higher. self._low is a lower bound of the
        # lowest buffered score, so most rejections cost O(1).
        if score <= self._low:
            return
        low, victim = self._lowest()
        self._low = low
        if not score > low:
            return
        self._pos[self._buf_slot[victim]] = _EMPTY
        self.num_evicted += 1
        self._evicted(int(self._buf_slot[victim]))
        self._changed(victim, self._buf_score.item(victim))
        self._put(victim, slot, score)

    def _lowest(self) -> tuple[float, int]:
        """``(lowest score, position of the entry to evict)``: ties among the lowest, the stalest (smallest
        ``C_i``), then the first position. The end of the score order when it is current, else a scan."""
        m = self._n_buf
        if not (self._dirty or self._order_stale):
            key = self._rank_key[:m]  # the last entry holds the lowest score; its tie group ends the order
            low = -key.item(m - 1)
            cand = self._rank_pos[int(np.searchsorted(key, key[m - 1], side="left")):m]  # by position
        else:
            s = self._buf_score[:m]
            low = float(s.min())
            cand = np.flatnonzero(s == low)
        return low, int(cand[np.argmin(self._buf_last[cand])])

    def _put(self, pos: int, slot: int, score: float) -> None:
        self._ps_cache = None
        self._buf_slot[pos] = slot
        self._buf_score[pos] = score
        self._set_last_one(pos, self._clock)
        self._pos[slot] = pos
        self.num_inserted += 1
        self._inserted(slot)

    def _inserted(self, slot: int) -> None:
        """Hook for subclasses (ACCEL): ``slot`` entered the buffer."""

    def _evicted(self, slot: int) -> None:
        """Hook for subclasses (ACCEL): ``slot`` left the buffer."""

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """A finished episode: updates ``R_max``; for episode scores also the task's score.

        ``"learnability"`` uses ``progress`` (success in [0, 1]); ``"return"`` uses ``episode_return``.
        """
        r = check_finite("episode_return", episode_return)
        prog = check_finite("progress", progress)
        if self.score == "learnability" and not 0.0 <= prog <= 1.0:
            raise ValueError(f"progress must be in [0, 1] for the learnability score, got {progress!r}")
        if self.score == "return" and self.prioritization == "power" and r < 0:
            raise ValueError(f"power prioritisation needs non-negative scores; got episode_return {r!r}")
        slot = int(self._known_slots([task])[0])
        self.num_episodes += 1
        self.num_steps += int(length)
        if r > self._max_return[slot]:
            self._max_return[slot] = r
        if not self.uses_episode_scores:
            return
        x = prog if self.score == "learnability" else r
        self._ep_n[slot] += 1
        self._ep_mean[slot] += (x - self._ep_mean[slot]) / min(int(self._ep_n[slot]), self.window)
        m = float(self._ep_mean[slot])
        self._set_score(slot, m * (1.0 - m) if self.score == "learnability" else m)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Learner-side scores: ``{"scores": [(task, score), ...]}`` or
        ``{"tasks": [...], "scores": [...], "max_returns": [...] (optional)}``."""
        if "scores" not in metrics:
            return
        if "tasks" in metrics:
            self.update_scores(metrics["tasks"], metrics["scores"], metrics.get("max_returns"))
            return
        pairs = list(metrics["scores"])
        for p in pairs:
            if not isinstance(p, (tuple, list)) or len(p) != 2:
                raise ValueError(f"scores must be (task, score) pairs, got {p!r}")
        self.update_scores([p[0] for p in pairs], [p[1] for p in pairs])

    def max_returns(self, tasks: Sequence[EncodedTask]) -> np.ndarray:
        """``R_max`` per task (``-inf`` where no return has been seen), for the MaxMC score."""
        slots = self._known_slots(tasks)
        return self._max_return[slots].copy()

    # -- introspection ------------------------------------------------------------------------------
    def buffer_tasks(self) -> list[EncodedTask]:
        """The buffered tasks (in buffer order)."""
        return self._index.tasks(self._buf_slot[: self._n_buf])

    def buffer_scores(self) -> np.ndarray:
        """The buffered tasks' scores (in buffer order)."""
        return self._buf_score[: self._n_buf].copy()

    def metrics(self) -> dict[str, float]:
        """Counters, buffer fill and score statistics (no O(num_tasks) work).

        Three replay figures, which differ on purpose:

        * ``plr/replay_prob``: the configured replay probability, ``P_replay`` of step 1 of the module
          docstring: ``replay_prob`` as given, or for original PLR (``replay_prob=None``) its schedule's
          current value ``n_seen / num_tasks``. It does not depend on the buffer's fill.
        * ``plr/replay_prob_effective``: the probability that the *next* sample is a replay, after the
          buffer rules: 0 while the buffer is empty or below ``min_fill_ratio * capacity``, and 1 once
          every task of a finite space is buffered (nothing new is left to draw), else ``plr/replay_prob``.
        * ``plr/replay_rate``: the realised share of replays among the replay-or-new decisions made so far,
          ``replayed / (replayed + new)`` (0 before the first sample; ACCEL's mutated children are
          neither and are not counted).
        """
        m = self._n_buf
        decided = self.num_replayed + self.num_new
        if self.replay_prob is None:
            configured = min(1.0, self._n_seen / int(self.task_space.num_tasks))
        else:
            configured = self.replay_prob
        out = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
            "plr/buffer_size": float(m),
            "plr/buffer_fill": m / self.capacity,
            "plr/replay_prob": float(configured),
            "plr/replay_prob_effective": float(self._replay_probability()),
            "plr/replay_rate": self.num_replayed / decided if decided else 0.0,
            "plr/replayed": float(self.num_replayed),
            "plr/new": float(self.num_new),
            "plr/inserted": float(self.num_inserted),
            "plr/evicted": float(self.num_evicted),
        }
        if m:
            s = self._buf_score[:m]
            out.update({"plr/score_mean": float(s.mean()), "plr/score_max": float(s.max()),
                        "plr/score_min": float(s.min())})
            w = self.replay_weights()
            nz = w[w > 0]
            out["plr/replay_entropy"] = float(-(nz * np.log(nz)).sum())
        return out

    # -- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update({
            "index": self._index.state_dict(),
            "buf_slot": self._buf_slot.copy(),
            "buf_score": self._buf_score.copy(),
            "buf_last": self._buf_last.copy(),
            "n_buf": self._n_buf,
            "pos": self._pos.copy(),
            "seen": self._seen.copy(),
            "max_return": self._max_return.copy(),
            "ep_mean": self._ep_mean.copy(),
            "ep_n": self._ep_n.copy(),
            "clock": self._clock,
            "n_seen": self._n_seen,
            "counters": [self.num_replayed, self.num_new, self.num_inserted, self.num_evicted],
            "capacity": self.capacity,
        })
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get("capacity", -1)) != self.capacity:
            raise ValueError(f"state_dict has buffer capacity {state.get('capacity')}, not {self.capacity}")
        super().load_state_dict(state)
        self._index.load_state_dict(copy.deepcopy(state["index"]))
        self._buf_slot = np.array(state["buf_slot"], dtype=np.int64)
        self._buf_score = np.array(state["buf_score"], dtype=np.float64)
        self._buf_last = np.array(state["buf_last"], dtype=np.int64)
        self._n_buf = int(state["n_buf"])
        self._pos = np.array(state["pos"], dtype=np.int64)
        self._seen = np.array(state["seen"], dtype=bool)
        self._max_return = np.array(state["max_return"], dtype=np.float64)
        self._ep_mean = np.array(state["ep_mean"], dtype=np.float64)
        self._ep_n = np.array(state["ep_n"], dtype=np.int64)
        self._clock = int(state["clock"])
        self._ps_cache = None
        self._rebuild_sampling()
        self._low = float(self._buf_score[: self._n_buf].min()) if self._n_buf else np.inf
        self._n_seen = int(state["n_seen"])
        counters = [int(x) for x in state["counters"]]
        self.num_replayed, self.num_new, self.num_inserted, self.num_evicted = counters


class RobustPLR(PLR):
    """Robust PLR / PLR⊥ (Jiang et al. 2021b): new tasks are evaluation-only; only replays are trained on.

    Defaults are the PLR⊥ settings of the ATLAS paper's Minigrid table (replay rate 0.5, MaxMC score,
    rank prioritisation, temperature 1.0, staleness 0.1, gamma 0.99, GAE lambda 0.9); the buffer default is
    4000 (ATLAS used 50 000 for 4096 parallel envs).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        score: str | Callable[[Segment], float] = "max_mc",
        buffer_size: int = 4000,
        replay_prob: float | None = 0.5,
        temperature: float = 1.0,
        staleness_coef: float = 0.1,
        prioritization: str = "rank",
        min_fill_ratio: float = 0.0,
        gamma: float = 0.99,
        gae_lambda: float = 0.9,
        window: int = 10,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            task_space, score=score, buffer_size=buffer_size, replay_prob=replay_prob,
            temperature=temperature, staleness_coef=staleness_coef, prioritization=prioritization,
            min_fill_ratio=min_fill_ratio, robust=True, gamma=gamma, gae_lambda=gae_lambda,
            window=window, seed=seed,
        )


#: The same algorithm under the name used by the ACCEL and ATLAS papers.
PLRPerp = RobustPLR
