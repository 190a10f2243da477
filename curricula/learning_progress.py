"""Learning Progress curriculum (Kanitscheider et al. 2021, as used by OMNI, Zhang et al. 2023).

*Multi-task curriculum learning in a complex, visual, hard-exploration domain: Minecraft*
(Kanitscheider et al., 2021) prioritises tasks whose success rate is **changing**: tasks the agent is
starting to learn, or starting to forget. Per task ``i`` the curriculum keeps two exponential moving
averages of the success rate ``s_i`` (success in ``[0, 1]``):

.. math::

    f_i \\leftarrow \\alpha s_i + (1 - \\alpha) f_i, \\qquad
    g_i \\leftarrow \\alpha f_i + (1 - \\alpha) g_i

(``f`` is the fast EMA; the slow EMA ``g`` smooths the freshly updated ``f``; both start at the first
observed rate). Both are passed through the reweighting

.. math::

    r_\\theta(p) = \\frac{p (1 - p_\\theta)}{p + p_\\theta (1 - 2p)},

which maps ``0 -> 0``, ``1 -> 1`` and ``p_theta -> 1/2``, stretching differences at low success rates so
that progress on hard tasks counts more. The learning progress is

.. math::

    LP_i = | r_\\theta(f_i) - r_\\theta(g_i) |.

Normalisation across tasks: the *active* tasks are those with ``LP_i > 0`` or ``f_i > 0``; their LP
values are z-scored (divided by the standard deviation when it is non-zero), squashed by a sigmoid and
normalised to sum to one; inactive tasks get probability zero. If no task is active, sampling is
uniform. An optional ``uniform_mix`` ``ε`` mixes in the uniform distribution: ``P = (1 - ε) P_LP + ε/n``
(an addition to the paper, useful in the online variant where unseen tasks have no estimate yet).

Two ways to feed it (the *variant*):

* ``"online"`` (default): success comes from training episodes, via :meth:`update_on_episode`'s or
  :meth:`update_task_progress`'s ``progress``. Observations are accumulated per task; every
  ``update_period`` observations the mean success of each task observed in that period becomes its
  ``s_i`` for one EMA step (tasks not observed keep their EMAs). Work per observation is O(1).
* ``"evaluation"``: the trainer evaluates the agent on the task space every ``T`` learner updates and
  calls ``update_on_demand({"success_rates": rates})`` with an array over ``task_space.encoded_tasks``
  (or a ``{task: rate}`` dict). Each call is one EMA step. Training-episode feedback is ignored.

Both forms of ``success_rates`` are accepted in either variant.

Two additions to the paper for the online variant, where no evaluation ever measures every task:

* **Exploration of tasks without an estimate** (``explore_mix``, default ``0.2`` online, ``0`` for the
  evaluation variant). Under the paper's rule a task with no estimate is inactive, so online only the
  tasks that happened to succeed in the first period ever become active and the curriculum locks onto
  them. With ``ε_x = explore_mix`` and ``U`` the tasks not yet in any EMA step,
  ``P = (1 - ε_x) P_LP + ε_x · uniform(U)`` while ``U`` is non-empty; once every task has an estimate,
  the distribution is the paper's. (Drawn from a swap-remove list of ``U``: O(1) per task, exact.)
* **A minimum number of observations** (``min_observations``, default 1 = the paper): a task enters an
  EMA step only once it has that many accumulated observations (fewer are carried into the next
  period), so each ``s_i`` is a mean of at least that many episodes, like an evaluation of that size.

In the simulated-student harness (``tests/simulated_student.py``, 1000 tasks, 90% impossible, 8000
episodes) the online variant with these defaults reaches a mean success of 0.53-0.57 on the possible
tasks with ~88% of samples on them (seeds 0-2), against 0.40 for uniform sampling; with
``explore_mix=0`` it trains on two tasks only.

:meth:`success_rates` reports the fast EMA online (a period's mean is often one 0/1 outcome) and the
last evaluation rate for the evaluation variant.

Defaults are the Syllabus paper's Crafter settings (Supplementary D.5, which follow Zhang et al.):
``ema_alpha = 0.1``, ``p_theta = 0.1``, update period ``T = 25``.

Cost: an online observation only validates and queues ``(slot, value)``, O(1); the per-task sums are
updated vectorised once per period, before its EMA step (and before a checkpoint); an EMA step is
O(#tasks observed in the period). The sampling distribution is rebuilt lazily, at most once per EMA
step, over the *active* tasks only (the others have probability 0, or ``ε/n``), so it costs O(#active),
not O(num_tasks); ``sample(k)`` is one ``searchsorted`` of ``k`` uniforms into the cached CDF,
O(k log #active), plus O(k) for the exploration draws. Spaces of 10^6 tasks work.

>>> from magister.curricula.learning_progress import reweight
>>> float(reweight(0.1, 0.1))
0.5
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._table import TaskIndex, grow
from .base import Curriculum, check_finite

logger = logging.getLogger(__name__)

__all__ = ["LearningProgress", "reweight", "learning_progress", "lp_distribution"]

_isfinite = math.isfinite

#: Default ``explore_mix`` of the online variant (an addition to the paper; see the module docstring).
DEFAULT_EXPLORE_MIX = 0.2


def reweight(p: np.ndarray | float, p_theta: float) -> np.ndarray:
    """Kanitscheider et al.'s reweighting ``p (1 - θ) / (p + θ (1 - 2p))`` of success rates ``p``.

    >>> np.round(reweight(np.array([0.0, 0.1, 0.5, 1.0]), 0.1), 4).tolist()
    [0.0, 0.5, 0.9, 1.0]
    """
    p = np.asarray(p, dtype=np.float64)
    return p * (1.0 - p_theta) / (p + p_theta * (1.0 - 2.0 * p))


def learning_progress(fast: np.ndarray, slow: np.ndarray, p_theta: float) -> np.ndarray:
    """``|reweight(fast) - reweight(slow)|`` elementwise."""
    return np.abs(reweight(fast, p_theta) - reweight(slow, p_theta))


def lp_distribution(lp: np.ndarray, success: np.ndarray) -> np.ndarray:
    """Sampling distribution from learning progress ``lp`` and current success estimates ``success``.

    Active tasks (``lp > 0`` or ``success > 0``) get ``sigmoid(zscore(lp))`` normalised; inactive tasks
    get zero; with no active task the distribution is uniform.

    >>> lp_distribution(np.array([0.0, 0.2, 0.0]), np.array([0.0, 0.5, 0.3])).round(4).tolist()
    [0.0, 0.7311, 0.2689]
    """
    n = lp.shape[0]
    active = (lp > 0) | (success > 0)
    if not active.any():
        return np.full(n, 1.0 / n)
    sub = lp[active]
    std = sub.std()
    z = (sub - sub.mean()) / (std if std > 0 else 1.0)
    w = 1.0 / (1.0 + np.exp(-z))
    out = np.zeros(n)
    out[active] = w / w.sum()
    return out


def parse_success_rates(index: TaskIndex, rates: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate evaluation success rates; return ``(slots, values)``. Raises before any state changes.

    ``rates`` is an array of length ``n`` aligned with the space's encoded tasks, or a ``{task: rate}``
    mapping. Every value must be finite and in ``[0, 1]``.
    """
    if isinstance(rates, Mapping):
        if not rates:
            raise ValueError("success_rates is an empty mapping; expected {task: rate in [0, 1]}")
        slots = np.fromiter((index.slot(t, add=False) for t in rates), dtype=np.int64, count=len(rates))
        values = np.array([float(v) for v in rates.values()], dtype=np.float64)
    else:
        values = np.asarray(rates, dtype=np.float64)
        if values.shape != (n,):
            raise ValueError(
                f"success_rates has shape {values.shape}, expected ({n},) (one rate per task of the space)"
            )
        slots = np.arange(n, dtype=np.int64)
    if not np.isfinite(values).all():
        raise ValueError("success_rates contains NaN or inf; expected finite rates in [0, 1]")
    if values.size and (values.min() < 0.0 or values.max() > 1.0):
        raise ValueError(
            f"success_rates must lie in [0, 1], got values in [{values.min()}, {values.max()}]"
        )
    return slots, values


def check_progress(progress: float) -> float:
    """A finite success value in ``[0, 1]`` or ``ValueError``."""
    v = float(progress)
    if not math.isfinite(v):  # as check_finite, with math.isfinite: a plain float needs no numpy call
        raise ValueError(f"progress must be finite, got {progress!r}")
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"progress must be a success value in [0, 1], got {progress!r}")
    return v


def enumerable_index(task_space: TaskSpace, who: str) -> tuple[TaskIndex, int]:
    """A :class:`TaskIndex` holding every task of a finite space, slots in ``encoded_tasks`` order."""
    n = task_space.num_tasks
    if n is None:
        raise TypeError(f"{who} needs a finite, enumerable task space; {task_space!r} is unbounded")
    index = TaskIndex(task_space)
    if not index.indexed:
        for t in task_space.encoded_tasks:
            index.slot(t)
    if len(index) != int(n):
        raise ValueError(f"{task_space!r} enumerates {len(index)} distinct tasks but num_tasks={n}")
    return index, int(n)


class LearningProgress(Curriculum):
    """Sample tasks in proportion to (normalised) learning progress.

    Args:
        task_space: a finite task space (``num_tasks`` not None).
        ema_alpha: EMA rate ``α`` of both moving averages (paper: 0.1).
        p_theta: reweighting parameter ``p_θ`` (paper: 0.1).
        update_period: online variant only, number of success observations per EMA step (paper: 25).
        variant: ``"online"`` (training-episode success) or ``"evaluation"`` (periodic evaluation rates
            through :meth:`update_on_demand`).
        uniform_mix: weight ``ε`` of a uniform component mixed into the distribution (0 in the paper).
        explore_mix: weight of the uniform distribution over tasks without an estimate (an addition;
            default ``None``: 0.2 for the online variant, 0 for the evaluation variant).
        min_observations: online variant: observations a task needs before they enter an EMA step
            (an addition; 1 = the paper).
        seed: seed of the sampling generator.

    >>> from magister.task_spaces.base import TaskSpace
    >>> class Five(TaskSpace):
    ...     num_tasks = 5
    ...     indexed = True
    ...     def sample(self): return int(self.rng.integers(5))
    ...     def contains(self, t): return t in range(5)
    ...     def encode(self, t): return t
    ...     def decode(self, e): return e
    ...     @property
    ...     def tasks(self): return list(range(5))
    >>> lp = LearningProgress(Five(), variant="evaluation", seed=0)
    >>> lp.update_on_demand({"success_rates": [0.0, 0.0, 0.0, 0.0, 0.0]})
    >>> lp.update_on_demand({"success_rates": [0.0, 0.0, 0.5, 0.0, 0.0]})
    >>> lp.distribution().tolist()
    [0.0, 0.0, 1.0, 0.0, 0.0]
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        ema_alpha: float = 0.1,
        p_theta: float = 0.1,
        update_period: int = 25,
        variant: str = "online",
        uniform_mix: float = 0.0,
        explore_mix: float | None = None,
        min_observations: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if not 0.0 < float(ema_alpha) <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha!r}")
        if not 0.0 < float(p_theta) < 1.0:  # p_theta = 0.5 makes the reweighting the identity
            raise ValueError(f"p_theta must be in (0, 1), got {p_theta!r}")
        if isinstance(update_period, bool) or not isinstance(update_period, (int, np.integer)) \
                or update_period < 1:
            raise ValueError(f"update_period must be a positive int, got {update_period!r}")
        if variant not in ("online", "evaluation"):
            raise ValueError(f"variant must be 'online' or 'evaluation', got {variant!r}")
        if not 0.0 <= float(uniform_mix) <= 1.0:
            raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix!r}")
        if explore_mix is None:
            explore_mix = DEFAULT_EXPLORE_MIX if variant == "online" else 0.0
        if not 0.0 <= float(explore_mix) <= 1.0:
            raise ValueError(f"explore_mix must be in [0, 1], got {explore_mix!r}")
        if isinstance(min_observations, bool) or not isinstance(min_observations, (int, np.integer)) \
                or min_observations < 1:
            raise ValueError(f"min_observations must be a positive int, got {min_observations!r}")
        self.ema_alpha = float(ema_alpha)
        self.p_theta = float(p_theta)
        self.update_period = int(update_period)
        self.variant = variant
        self.uniform_mix = float(uniform_mix)
        self.explore_mix = float(explore_mix)
        self.min_observations = int(min_observations)
        self.index, self.n = enumerable_index(task_space, type(self).__name__)
        n = self.n
        # the tasks without an estimate yet (not ``seen``), for exploration: _unseen[:_n_unseen] holds them
        # in some order and _unseen_pos[s] is slot s's position there (swap-remove when s becomes seen)
        idx_dtype = np.int32 if n < 2**31 else np.int64
        self._unseen = np.arange(n, dtype=idx_dtype)
        self._unseen_pos = np.arange(n, dtype=idx_dtype)
        self._n_unseen = n
        self.fast = np.zeros(n)
        self.slow = np.zeros(n)
        self.seen = np.zeros(n, dtype=bool)
        self.latest = np.zeros(n)  # the most recent success rate s_i fed to the EMAs
        # online accumulators: success sum and count per task since the last EMA step
        self._acc_sum = np.zeros(n)
        self._acc_cnt = np.zeros(n, dtype=np.int64)
        self._touched: list[int] = []
        self._obs_values: list[float] = []  # values of the last len(_obs_values) entries of _touched
        self._int_slots = self.index.indexed  # hot path: plain int tasks of an indexed space are slots
        self._pending = 0
        self.num_ema_steps = 0
        # tasks that were ever active (LP > 0 or fast > 0); every other task has probability 0 (or ε/n)
        self._ever_active = np.zeros(n, dtype=bool)
        # the ever-active slots, in order of activation: _cand[:_n_cand] (a growable array)
        self._cand = np.zeros(16, dtype=np.int64)
        self._n_cand = 0
        self._lp = np.zeros(n)  # LP_i, rewritten for the slots of each EMA step
        # lazily rebuilt sampling cache: active slots and the CDF of their probabilities
        self._act_slots: np.ndarray | None = None
        self._act_cdf: np.ndarray | None = None

    # -- the EMA step -------------------------------------------------------------------------------
    def _ema_step(self, slots: np.ndarray, rates: np.ndarray) -> None:
        a = self.ema_alpha
        new = ~self.seen[slots]
        fast = np.where(new, rates, a * rates + (1.0 - a) * self.fast[slots])
        slow = np.where(new, rates, a * fast + (1.0 - a) * self.slow[slots])
        self.fast[slots] = fast
        self.slow[slots] = slow
        if new.any():
            self._mark_seen(slots[new])
        self.seen[slots] = True
        self.latest[slots] = rates
        self.num_ema_steps += 1
        lp = learning_progress(fast, slow, self.p_theta)
        self._lp[slots] = lp
        newly = slots[((lp > 0) | (fast > 0)) & ~self._ever_active[slots]]
        self._ever_active[newly] = True
        self._add_candidates(newly)
        self._act_slots = None
        self._act_cdf = None

    def _mark_seen(self, slots: np.ndarray) -> None:
        """Remove newly seen ``slots`` from the unseen set: a swap-remove each (O(1)), or, for a batch
        that is a large part of the set (e.g. a first evaluation of every task), one vectorised pass."""
        unseen, pos = self._unseen, self._unseen_pos
        m = self._n_unseen
        if slots.size * 16 > m:
            prefix = unseen[:m]
            gone = np.isin(prefix, slots)
            keep, removed = prefix[~gone], prefix[gone]
            unseen[: keep.size] = keep
            unseen[keep.size:m] = removed
            pos[unseen[:m]] = np.arange(m, dtype=pos.dtype)
            self._n_unseen = keep.size
            return
        for s in slots.tolist():
            i = int(pos[s])
            last = self._n_unseen - 1
            t = int(unseen[last])
            unseen[i] = t
            pos[t] = i
            unseen[last] = s
            pos[s] = last
            self._n_unseen = last

    def _flush(self) -> None:
        """Online variant: one EMA step with the mean success of each task observed often enough.

        A task enters the step once it has ``min_observations`` accumulated observations; a task with
        fewer keeps accumulating into the next period.
        """
        self._pending = 0
        if not self._touched:
            return
        self._fold_acc()
        slots = np.unique(np.asarray(self._touched, dtype=np.int64))
        self._touched.clear()
        cnt = self._acc_cnt[slots]
        if self.min_observations > 1:
            wait = cnt < self.min_observations
            if wait.any():
                self._touched.extend(slots[wait].tolist())
                slots, cnt = slots[~wait], cnt[~wait]
                if slots.size == 0:
                    return
        rates = self._acc_sum[slots] / cnt
        self._acc_sum[slots] = 0.0
        self._acc_cnt[slots] = 0
        self._ema_step(slots, rates)

    def _fold_acc(self) -> None:
        """Add the queued observation values into the per-task accumulators (in arrival order)."""
        m = len(self._obs_values)
        if m:
            slots = np.array(self._touched[-m:], dtype=np.int64)
            np.add.at(self._acc_sum, slots, np.array(self._obs_values))  # sequential: exact running sums
            np.add.at(self._acc_cnt, slots, 1)
            self._obs_values.clear()

    # The hot path: validate, queue the observation (its slot in _touched, its value in _obs_values);
    # the accumulators are updated vectorised at the end of the period (or before a checkpoint).
    def _observe(self, task: EncodedTask, progress: float) -> None:
        v = float(progress)
        if not 0.0 <= v <= 1.0:  # also false for NaN
            check_progress(progress)  # raises with the precise message
        if self._int_slots and type(task) is int and 0 <= task < self.n:
            s = task
        else:
            s = self.index.slot(task, add=False)
        if self.variant != "online":
            return
        self._touched.append(s)
        self._obs_values.append(v)
        self._pending += 1
        if self._pending >= self.update_period:
            self._flush()

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """One finished episode; its final ``progress`` is the success observation (online variant)."""
        if not _isfinite(episode_return):
            check_finite("episode_return", episode_return)  # raises (TypeError for a non-number)
        self._observe(task, progress)
        self.num_episodes += 1

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        """A success observation for ``task`` (online variant), e.g. a task completed mid-episode."""
        self._observe(task, progress)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """``{"success_rates": rates}``: one EMA step from evaluation success rates.

        ``rates`` is an array over ``task_space.encoded_tasks`` or a ``{task: rate}`` mapping. Other keys
        are ignored. Invalid rates raise ``ValueError`` and leave the state unchanged.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        if "success_rates" not in metrics:
            return
        slots, values = parse_success_rates(self.index, metrics["success_rates"], self.n)
        self._ema_step(slots, values)

    # -- sampling -----------------------------------------------------------------------------------
    def learning_progress(self) -> np.ndarray:
        """Current ``LP_i`` for every task (zero for tasks never observed)."""
        return learning_progress(self.fast, self.slow, self.p_theta)

    def success_rates(self) -> np.ndarray:
        """Current success estimate of every task (0 if never observed), in ``encoded_tasks`` order.

        Evaluation variant: the last evaluation rate. Online variant: the fast EMA ``f_i`` (a period's
        mean success is often a single 0/1 episode outcome, too noisy to report, e.g. to OMNI's judge).
        """
        return (self.fast if self.variant == "online" else self.latest).copy()

    def _active_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, probs)`` of the LP distribution restricted to its support; empty when uniform.

        Only tasks that were ever active can be active, so this costs O(#active), not O(num_tasks).
        """
        cand = self._cand[: self._n_cand]
        lp = self._lp[cand]
        fast = self.fast[cand]
        keep = (lp > 0) | (fast > 0)
        if not keep.any():
            return cand[:0], np.zeros(0)
        return cand[keep], lp_distribution(lp[keep], fast[keep])

    def _add_candidates(self, slots: np.ndarray) -> None:
        """Append newly active ``slots`` to the candidates (capacity doubles, amortised O(1) each)."""
        end = self._n_cand + slots.size
        if end > self._cand.shape[0]:
            self._cand = grow(self._cand, end)
        self._cand[self._n_cand:end] = slots
        self._n_cand = end

    def _exploring(self) -> bool:
        """Whether exploration draws are made: ``explore_mix > 0`` and some task has no estimate yet."""
        return self.explore_mix > 0.0 and self._n_unseen > 0

    def distribution(self) -> np.ndarray:
        """Sampling probabilities over ``task_space.encoded_tasks``."""
        slots, probs = self._active_distribution()
        if slots.size == 0:
            p = np.full(self.n, 1.0 / self.n)
        else:
            p = np.zeros(self.n)
            p[slots] = probs
            if self.uniform_mix > 0.0:
                p = (1.0 - self.uniform_mix) * p + self.uniform_mix / self.n
        if self._exploring():
            p *= 1.0 - self.explore_mix
            p[self._unseen[: self._n_unseen]] += self.explore_mix / self._n_unseen
        return p

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks drawn i.i.d. from :meth:`distribution` (one vectorised draw).

        A draw is uniform over all tasks with probability ``uniform_mix`` (or when no task is active),
        otherwise it follows the cached CDF of the active tasks' probabilities.
        """
        self._check_k(k)
        if self._act_slots is None:
            slots, probs = self._active_distribution()
            cdf = np.cumsum(probs)
            if cdf.size:
                cdf /= cdf[-1]
            self._act_slots, self._act_cdf = slots, cdf
        assert self._act_cdf is not None
        u = self.rng.random(k)
        uniform = np.floor(u * self.n).astype(np.int64)
        if self._act_slots.size == 0:
            out = uniform
        else:
            pos = np.minimum(np.searchsorted(self._act_cdf, u, side="right"), self._act_slots.size - 1)
            out = self._act_slots[pos]
            if self.uniform_mix > 0.0:
                mix = self.rng.random(k) < self.uniform_mix
                out = np.where(mix, uniform, out)
        np.minimum(out, self.n - 1, out=out)
        if self._exploring():
            explore = np.flatnonzero(self.rng.random(k) < self.explore_mix)
            if explore.size:
                out[explore] = self._unseen[self.rng.integers(self._n_unseen, size=explore.size)]
        self.num_sampled += k
        return self.index.tasks(out)

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        lp = self.learning_progress()
        out["lp/mean_learning_progress"] = float(lp.mean())
        out["lp/max_learning_progress"] = float(lp.max())
        out["lp/mean_success"] = float(self.fast[self.seen].mean()) if self.seen.any() else 0.0
        out["lp/tasks_seen"] = float(self.seen.sum())
        return out

    def state_dict(self) -> dict[str, Any]:
        self._fold_acc()
        state = super().state_dict()
        state.update(
            fast=self.fast.copy(), slow=self.slow.copy(), seen=self.seen.copy(), latest=self.latest.copy(),
            acc_sum=self._acc_sum.copy(), acc_cnt=self._acc_cnt.copy(), touched=list(self._touched),
            pending=self._pending, num_ema_steps=self.num_ema_steps, index=self.index.state_dict(),
            candidates=self._cand[: self._n_cand].tolist(),
            unseen=self._unseen[: self._n_unseen].tolist(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for name in ("fast", "slow", "seen", "latest", "acc_sum", "acc_cnt"):
            if np.shape(state[name]) != (self.n,):
                raise ValueError(
                    f"state_dict[{name!r}] has shape {np.shape(state[name])}, expected ({self.n},)"
                )
        self.fast = np.array(state["fast"], dtype=np.float64)
        self.slow = np.array(state["slow"], dtype=np.float64)
        self.seen = np.array(state["seen"], dtype=bool)
        self.latest = np.array(state["latest"], dtype=np.float64)
        self._acc_sum = np.array(state["acc_sum"], dtype=np.float64)
        self._acc_cnt = np.array(state["acc_cnt"], dtype=np.int64)
        self._touched = [int(s) for s in state["touched"]]
        self._obs_values = []
        self._pending = int(state["pending"])
        self.num_ema_steps = int(state["num_ema_steps"])
        self.index.load_state_dict(state["index"])
        self._lp = self.learning_progress()
        self._ever_active = (self._lp > 0) | (self.fast > 0)
        candidates = [int(s) for s in state["candidates"]]
        if not set(candidates) >= set(np.flatnonzero(self._ever_active).tolist()):
            raise ValueError("state_dict['candidates'] does not cover the active tasks")
        self._ever_active[candidates] = True
        self._cand = np.array(candidates, dtype=np.int64)
        self._n_cand = len(candidates)
        unseen = np.asarray(state.get("unseen", np.flatnonzero(~self.seen)), dtype=self._unseen.dtype)
        if unseen.size != int((~self.seen).sum()) or self.seen[unseen].any() \
                or np.unique(unseen).size != unseen.size:
            raise ValueError("state_dict['unseen'] does not list exactly the tasks without an estimate")
        self._unseen = np.concatenate((unseen, np.flatnonzero(self.seen).astype(unseen.dtype)))
        self._unseen_pos = np.empty_like(self._unseen)
        self._unseen_pos[self._unseen] = np.arange(self.n, dtype=self._unseen.dtype)
        self._n_unseen = unseen.size
        self._act_slots = None
        self._act_cdf = None
