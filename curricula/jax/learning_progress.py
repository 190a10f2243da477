"""Learning Progress (LP) on device: sample tasks whose success rate is changing.

Paper: I. Kanitscheider, J. Huizinga, D. Farhi, W. H. Guss, B. Houghton, R. Sampedro, P. Zhokhov,
B. Baker, A. Ecoffet, J. Tang, O. Klimov, J. Clune, "Multi-task curriculum learning in a complex, visual,
hard-exploration domain: Minecraft", 2021 (Sec. 3.2, the bidirectional learning-progress curriculum), as
used by OMNI (Zhang et al. 2023).

The twin of :class:`magister.curricula.LearningProgress` over ``n`` tasks numbered ``0 .. n-1`` (a task id
indexes your own table of levels or goals). Per task two EMAs of the success rate ``s_i``:
``f_i <- alpha s_i + (1 - alpha) f_i`` and ``g_i <- alpha f_i + (1 - alpha) g_i`` (both start at the first
rate), the reweighting ``r(p) = p (1 - p_theta) / (p + p_theta (1 - 2p))`` and ``LP_i = |r(f_i) - r(g_i)|``.
The distribution (:func:`lp_distribution`) z-scores the LP of the *active* tasks (``LP_i > 0`` or
``f_i > 0``; divided by the standard deviation when it is non-zero), squashes it with a sigmoid and
normalises; inactive tasks get 0; uniform when no task is active; then ``uniform_mix`` and, while some task
has no estimate, ``explore_mix`` of the uniform distribution over those tasks (both additions of the Python
class, with its defaults).

Feeding it, as the Python class's two variants:

* ``variant="online"``: :func:`lp_observe` takes a batch of ``(task, success)`` observations; they are
  accumulated per task and every ``update_period`` observations each task with at least
  ``min_observations`` accumulated ones takes one EMA step with their mean.
* ``variant="evaluation"``: :func:`lp_evaluate` takes evaluation success rates (all tasks, or a mask of
  them): one EMA step. (It works in either variant, like ``update_on_demand``.)

Defaults are ``LearningProgress``'s (the Syllabus paper's Crafter settings, Supp. D.5): ``alpha = 0.1``,
``p_theta = 0.1``, ``T = 25``.

>>> import jax.numpy as jnp
>>> cfg = LearningProgressConfig(variant="evaluation")
>>> st = lp_evaluate(lp_init(5), jnp.zeros(5), cfg)
>>> st = lp_evaluate(st, jnp.array([0.0, 0.0, 0.5, 0.0, 0.0]), cfg)
>>> [round(float(p), 4) for p in lp_distribution(st, cfg)]
[0.0, 0.0, 1.0, 0.0, 0.0]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .buffer import draw_index

logger = logging.getLogger(__name__)

__all__ = ["LPState", "LearningProgressConfig", "learning_progress", "lp_distribution", "lp_evaluate",
           "lp_init", "lp_observe", "lp_sample", "reweight"]

#: Default ``explore_mix`` of the online variant, as ``LearningProgress``.
DEFAULT_EXPLORE_MIX = 0.2


@dataclass(frozen=True)
class LearningProgressConfig:
    """LP settings (hashable: static under ``jit``); defaults: ``LearningProgress``'s.

    Args:
        ema_alpha: EMA rate ``alpha`` of both averages.
        p_theta: reweighting parameter ``p_theta``.
        update_period: online variant, observations per EMA step.
        variant: ``"online"`` or ``"evaluation"`` (:func:`lp_observe` is a no-op for the latter).
        uniform_mix: weight of a uniform component (0 in the paper).
        explore_mix: weight of the uniform distribution over tasks without an estimate (``None``: 0.2
            online, 0 for the evaluation variant).
        min_observations: online variant, observations a task needs before they enter an EMA step.
    """

    ema_alpha: float = 0.1
    p_theta: float = 0.1
    update_period: int = 25
    variant: str = "online"
    uniform_mix: float = 0.0
    explore_mix: float | None = None
    min_observations: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < float(self.ema_alpha) <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {self.ema_alpha!r}")
        if not 0.0 < float(self.p_theta) < 1.0:
            raise ValueError(f"p_theta must be in (0, 1), got {self.p_theta!r}")
        for name in ("update_period", "min_observations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.variant not in ("online", "evaluation"):
            raise ValueError(f"variant must be 'online' or 'evaluation', got {self.variant!r}")
        if not 0.0 <= float(self.uniform_mix) <= 1.0:
            raise ValueError(f"uniform_mix must be in [0, 1], got {self.uniform_mix!r}")
        if self.explore_mix is not None and not 0.0 <= float(self.explore_mix) <= 1.0:
            raise ValueError(f"explore_mix must be in [0, 1] or None, got {self.explore_mix!r}")

    @property
    def explore(self) -> float:
        """The ``explore_mix`` in effect (its default depends on the variant)."""
        if self.explore_mix is not None:
            return float(self.explore_mix)
        return DEFAULT_EXPLORE_MIX if self.variant == "online" else 0.0


class LPState(NamedTuple):
    """Per-task EMAs and the online accumulators (arrays of length ``n``).

    Attributes:
        fast, slow: ``f_i`` and ``g_i``. gap: ``f_i - g_i``, kept by its own recursion
            ``gap <- (1 - alpha) (gap + alpha (s_i - f_i))`` so that a small LP is not the difference of two
            rounded float32 numbers. seen: has had an EMA step. latest: the last rate fed to the EMAs.
        acc_sum, acc_cnt: online successes accumulated since the task's last EMA step.
        pending: ``i32[]``, observations since the last EMA step. num_ema_steps: ``i32[]``.
    """

    fast: jax.Array
    slow: jax.Array
    gap: jax.Array
    seen: jax.Array
    latest: jax.Array
    acc_sum: jax.Array
    acc_cnt: jax.Array
    pending: jax.Array
    num_ema_steps: jax.Array


def lp_init(num_tasks: int) -> LPState:
    """The state of ``num_tasks`` tasks, none observed."""
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise ValueError(f"num_tasks must be a positive int, got {num_tasks!r}")
    z = jnp.zeros(int(num_tasks), jnp.float32)
    return LPState(z, z, z, jnp.zeros(int(num_tasks), bool), z, z, jnp.zeros(int(num_tasks), jnp.int32),
                   jnp.int32(0), jnp.int32(0))


def reweight(p: jax.Array, p_theta: float) -> jax.Array:
    """``r(p) = p (1 - p_theta) / (p + p_theta (1 - 2p))``: maps 0 -> 0, 1 -> 1, ``p_theta`` -> 1/2."""
    return p * (1.0 - p_theta) / (p + p_theta * (1.0 - 2.0 * p))


def learning_progress(state: LPState, cfg: LearningProgressConfig) -> jax.Array:
    """``LP_i = |r(f_i) - r(g_i)|`` (0 for tasks never observed).

    Computed as ``p_theta (1 - p_theta) |f_i - g_i| / (d(f_i) d(g_i))`` with ``d(p) = p + p_theta (1 - 2p)``
    (the same quantity, without the cancellation of subtracting two reweighted rates).
    """
    t = cfg.p_theta

    def d(p: jax.Array) -> jax.Array:
        return p + t * (1.0 - 2.0 * p)

    return t * (1.0 - t) * jnp.abs(state.gap) / (d(state.fast) * d(state.slow))


def _ema_step(state: LPState, step: jax.Array, rates: jax.Array, cfg: LearningProgressConfig) -> LPState:
    """One EMA step of the tasks in ``step`` (``LearningProgress._ema_step``)."""
    a = cfg.ema_alpha
    r = rates.astype(jnp.float32)
    new = ~state.seen
    # f + a (r - f) is a r + (1 - a) f; this form keeps f exact under a constant rate, so LP stays exactly 0
    fast = jnp.where(new, r, state.fast + a * (r - state.fast))
    slow = jnp.where(new, r, state.slow + a * (fast - state.slow))
    gap = jnp.where(new, 0.0, (1.0 - a) * (state.gap + a * (r - state.fast)))  # f' - g'
    return state._replace(
        fast=jnp.where(step, fast, state.fast), slow=jnp.where(step, slow, state.slow),
        gap=jnp.where(step, gap, state.gap),
        seen=state.seen | step, latest=jnp.where(step, r, state.latest),
        num_ema_steps=state.num_ema_steps + jnp.any(step).astype(jnp.int32))


def lp_evaluate(
    state: LPState, success_rates: jax.Array, cfg: LearningProgressConfig, mask: jax.Array | None = None
) -> LPState:
    """One EMA step from evaluation success rates ``f32[n]`` (of the tasks in ``mask``, default all):
    ``LearningProgress.update_on_demand({"success_rates": ...})``."""
    n = state.fast.shape[0]
    if success_rates.shape != (n,):
        raise ValueError(f"success_rates must have shape ({n},) (one per task), got {success_rates.shape}")
    step = jnp.ones(n, bool) if mask is None else mask
    return _ema_step(state, step, success_rates, cfg)


def _flush(state: LPState, cfg: LearningProgressConfig) -> LPState:
    """End of a period: tasks with ``min_observations`` accumulated observations take an EMA step."""
    ready = state.acc_cnt >= cfg.min_observations
    rates = state.acc_sum / jnp.maximum(state.acc_cnt, 1)
    state = _ema_step(state, ready, rates, cfg)
    return state._replace(acc_sum=jnp.where(ready, 0.0, state.acc_sum),
                          acc_cnt=jnp.where(ready, 0, state.acc_cnt), pending=jnp.int32(0))


def lp_observe(
    state: LPState,
    tasks: jax.Array,
    success: jax.Array,
    cfg: LearningProgressConfig,
    mask: jax.Array | None = None,
) -> LPState:
    """Online observations, in batch order (``update_on_episode``'s ``progress``): each adds to its task's
    accumulator and every ``update_period``-th ends a period (:func:`_flush`). A no-op for the
    evaluation variant.

    Args:
        tasks: ``i32[B]`` task ids. success: ``f32[B]`` in ``[0, 1]``. mask: ``bool[B]`` (default all).
    """
    if cfg.variant != "online":
        return state
    b = tasks.shape[0]
    mask = jnp.ones(b, bool) if mask is None else mask

    def body(st: LPState, x: tuple) -> tuple[LPState, None]:
        t, v, m = x
        st = st._replace(acc_sum=st.acc_sum.at[t].add(jnp.where(m, v, 0.0)),
                         acc_cnt=st.acc_cnt.at[t].add(m.astype(jnp.int32)),
                         pending=st.pending + m.astype(jnp.int32))
        st = jax.lax.cond(st.pending >= cfg.update_period, lambda s: _flush(s, cfg), lambda s: s, st)
        return st, None

    state, _ = jax.lax.scan(body, state, (tasks.astype(jnp.int32), success.astype(jnp.float32), mask))
    return state


def lp_distribution(state: LPState, cfg: LearningProgressConfig) -> jax.Array:
    """Sampling probabilities ``f32[n]`` (``LearningProgress.distribution``)."""
    n = state.fast.shape[0]
    lp = learning_progress(state, cfg)
    active = (lp > 0) | (state.fast > 0)
    n_act = jnp.maximum(active.sum(), 1)
    mean = jnp.where(active, lp, 0.0).sum() / n_act
    std = jnp.sqrt(jnp.where(active, (lp - mean) ** 2, 0.0).sum() / n_act)
    z = (lp - mean) / jnp.where(std > 0, std, 1.0)
    w = jnp.where(active, jax.nn.sigmoid(z), 0.0)
    p_lp = w / jnp.maximum(w.sum(), 1e-30)
    if cfg.uniform_mix > 0.0:
        p_lp = (1.0 - cfg.uniform_mix) * p_lp + cfg.uniform_mix / n
    p = jnp.where(active.any(), p_lp, jnp.full(n, 1.0 / n, jnp.float32))
    ex = cfg.explore
    if ex > 0.0:
        unseen = ~state.seen
        n_unseen = unseen.sum()
        explored = (1.0 - ex) * p + jnp.where(unseen, ex / jnp.maximum(n_unseen, 1), 0.0)
        p = jnp.where(n_unseen > 0, explored, p)
    return p


def lp_sample(key: jax.Array, state: LPState, k: int, cfg: LearningProgressConfig) -> jax.Array:
    """``i32[k]`` task ids drawn i.i.d. from :func:`lp_distribution`."""
    return draw_index(key, lp_distribution(state, cfg), k)
