"""Sampling For Learnability (SFL) on device: replay the most learnable of ``N`` evaluated levels.

Paper: A. Rutherford, M. Beukman, T. Willi, B. Lacerda, N. Hawes, J. Foerster, "No Regrets: Investigating
and Improving Regret Approximations for Curriculum Discovery", NeurIPS 2024 (Algorithm 1; learnability
``p (1 - p)``, eq. 1, after Tzannetos et al. 2023).

The twin of :class:`magister.curricula.SFL` with ``method="topk"`` (the paper's): every ``update_period``
updates (:func:`sfl_due`), evaluate ``batch_size`` generated levels, and keep the ``buffer_size`` with the
highest learnability, ties broken at random (:func:`sfl_refresh`, as ``top_k_learnable``); each sample is
drawn uniformly from that buffer with probability ``sample_ratio``, else it is a new generated level
(:func:`sfl_sample`). All samples are trained on.

Defaults are ``SFL``'s (the Syllabus paper's Crafter settings, Supp. D.5): ``N = 200``, ``T = 25``,
``K = 10``, ``rho = 1.0``. The Python class's online estimates (``success_window``, ``prior_strength``,
``unseen_weight``), ``keep_buffer`` and ``method="dist"`` have no on-device twin: here candidates are
evaluated by rollouts, the paper's setting, and their success rates are used as they are.

>>> import jax, jax.numpy as jnp
>>> cfg = SFLConfig(batch_size=4, buffer_size=2)
>>> state = sfl_refresh(jax.random.PRNGKey(0), jnp.arange(4), jnp.array([0.0, 0.5, 0.9, 0.3]), cfg)
>>> state.levels.tolist(), [round(float(x), 2) for x in state.learnability]
([1, 3], [0.25, 0.21])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .buffer import Level, Sample, batch_size, take_levels, where_levels
from .scoring import learnability

logger = logging.getLogger(__name__)

__all__ = ["SFLConfig", "SFLState", "sfl_distribution", "sfl_due", "sfl_init", "sfl_refresh", "sfl_sample"]


@dataclass(frozen=True)
class SFLConfig:
    """SFL settings (hashable: static under ``jit``); defaults: ``SFL``'s.

    Args:
        batch_size: ``N``, candidates evaluated per refresh.
        update_period: ``T``, updates between refreshes.
        buffer_size: ``K``, the most learnable candidates kept.
        sample_ratio: ``rho``, probability of sampling from the buffer.
    """

    batch_size: int = 200
    update_period: int = 25
    buffer_size: int = 10
    sample_ratio: float = 1.0

    def __post_init__(self) -> None:
        for name in ("batch_size", "update_period", "buffer_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.buffer_size > self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) cannot exceed batch_size ({self.batch_size})")
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ValueError(f"sample_ratio must be in [0, 1], got {self.sample_ratio!r}")


class SFLState(NamedTuple):
    """The SFL buffer: ``K`` levels (every leaf ``[K, ...]``) and their learnability ``f32[K]``."""

    levels: Level
    learnability: jax.Array


def sfl_init(example: Level, cfg: SFLConfig) -> SFLState:
    """A zero-filled state for levels like ``example`` (refresh it before the first :func:`sfl_sample`)."""
    k = cfg.buffer_size
    levels = jax.tree_util.tree_map(lambda a: jnp.zeros((k,) + jnp.shape(a), jnp.asarray(a).dtype), example)
    return SFLState(levels, jnp.zeros(k, jnp.float32))


def sfl_due(step: jax.Array | int, cfg: SFLConfig) -> jax.Array:
    """Whether a refresh falls due at update ``step`` (0, ``T``, ``2T``, ...)."""
    return jnp.asarray(step) % cfg.update_period == 0


def sfl_refresh(key: jax.Array, candidates: Level, success_rates: jax.Array, cfg: SFLConfig) -> SFLState:
    """The ``buffer_size`` candidates with the highest ``p (1 - p)``, best first, ties at random.

    Args:
        key: a PRNG key (tie-break). candidates: ``[N, ...]`` evaluated levels.
        success_rates: ``f32[N]``, each candidate's success rate in ``[0, 1]``.
    """
    n = batch_size(candidates)
    if success_rates.shape != (n,):
        raise ValueError(
            f"success_rates must have shape ({n},) (one per candidate), got {success_rates.shape}")
    if cfg.buffer_size > n:
        raise ValueError(f"need at least buffer_size={cfg.buffer_size} candidates, got {n}")
    learn = learnability(success_rates)
    noise = jax.random.uniform(key, (n,))
    order = jnp.lexsort((noise, -learn))[: cfg.buffer_size]
    return SFLState(take_levels(candidates, order), learn[order])


def sfl_sample(key: jax.Array, state: SFLState, new_levels: Level, cfg: SFLConfig) -> Sample:
    """Per sample, a uniform buffer entry with probability ``sample_ratio``, else ``new_levels[b]``
    (``SFL.sample``); all trained on."""
    b = batch_size(new_levels)
    k1, k2 = jax.random.split(key)
    from_buf = jax.random.uniform(k1, (b,)) < cfg.sample_ratio
    idx = jax.random.randint(k2, (b,), 0, cfg.buffer_size)
    levels = where_levels(from_buf, take_levels(state.levels, idx), new_levels)
    return Sample(levels, from_buf, idx.astype(jnp.int32), jnp.ones(b, bool), jnp.zeros(b, bool))


def sfl_distribution(cfg: SFLConfig) -> tuple[jax.Array, jax.Array]:
    """``(P(entry k) f32[K], P(new))``: ``rho / K`` per buffer entry and ``1 - rho`` for a new level (a
    level buffered twice gets twice the mass, as ``SFL.distribution``)."""
    k = cfg.buffer_size
    return jnp.full(k, cfg.sample_ratio / k, jnp.float32), jnp.float32(1.0 - cfg.sample_ratio)
