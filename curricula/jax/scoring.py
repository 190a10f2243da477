"""Scores and replay weights of the Prioritized Level Replay family, as pure JAX functions.

The twins of :mod:`magister.curricula.scoring` (same formulas, masked to fixed-shape buffers):

* rank prioritisation ``h(S_i) = 1 / rank(S_i)`` and power prioritisation ``h(S_i) = S_i``, with the score
  distribution ``P_S(i) = h_i^(1/beta) / sum_j h_j^(1/beta)`` (Jiang et al. 2021, "Prioritized Level
  Replay", Sec. 3, eq. 2); tied scores share the mean weight of the ranks they occupy;
* staleness ``P_C(i) = (c - C_i) / sum_j (c - C_j)`` (the same paper, eq. 3), uniform when all are fresh;
* per-rollout scores: value L1 ``mean_t |A_t|`` (Jiang et al. 2021, Table 1), positive value loss
  ``mean_t max(A_t, 0)`` and MaxMC ``mean_t (R_max - V_t)`` (Jiang et al. 2021b, "Replay-Guided Adversarial
  Environment Design", Sec. 4), learnability ``p (1 - p)`` (Tzannetos et al. 2023; Rutherford et al. 2024,
  eq. 1).

Every weight function takes a ``valid`` mask (the filled entries of a buffer) and returns ``0`` elsewhere;
on the valid entries it equals the numpy function of :mod:`magister.curricula.scoring` (to float32
precision: scores are compared as float32, and XLA on CPU flushes subnormal floats to 0).

>>> import jax.numpy as jnp
>>> w = rank_weights(jnp.array([0.5, 2.0, 1.0]), jnp.array([True, True, True]), 1.0)
>>> [round(float(x), 4) for x in w]
[0.1818, 0.5455, 0.2727]
>>> [round(float(x), 4) for x in staleness_weights(jnp.array([0, 3, 4]), 4, jnp.array([True] * 3))]
[0.8, 0.2, 0.0]
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

logger = logging.getLogger(__name__)

__all__ = [
    "SCORES",
    "learnability",
    "max_mc",
    "positive_value_loss",
    "power_weights",
    "rank_weights",
    "rollout_scores",
    "staleness_weights",
    "value_l1",
]

#: Scores :func:`rollout_scores` computes on device (the value scores of ``PLR`` and ``learnability``).
SCORES = ("value_l1", "positive_value_loss", "max_mc", "learnability")


def _normalise(w: jax.Array, fallback: jax.Array) -> jax.Array:
    tot = w.sum()
    return jnp.where(tot > 0, w / jnp.where(tot > 0, tot, 1.0), fallback)


def rank_weights(scores: jax.Array, valid: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """Rank prioritisation over the ``valid`` entries: ``P_S(i) = rank_i^(-1/beta) / sum_j rank_j^(-1/beta)``.

    Rank 1 is the highest score; tied scores share equally the weights of the ranks they occupy (so no
    tied entry is favoured by its position), as :func:`magister.curricula.scoring.rank_weights`.

    Args:
        scores: ``f32[C]``. valid: ``bool[C]``, the entries that take part. temperature: ``beta > 0``.

    Returns:
        ``f32[C]`` summing to 1 over the valid entries (0 elsewhere; all 0 if none is valid).
    """
    n = scores.shape[0]
    s = jnp.where(valid, scores.astype(jnp.float32), -jnp.inf)
    asc = jnp.sort(s)
    gt = n - jnp.searchsorted(asc, s, side="right")  # entries with a strictly higher score
    ge = n - jnp.searchsorted(asc, s, side="left")  # entries with a score >= s_i (i included)
    ranks = jnp.arange(1, n + 1, dtype=jnp.float32)
    w_rank = jnp.exp(-jnp.log(ranks) / temperature)  # rank^(-1/beta), in log space
    cs = jnp.concatenate([jnp.zeros(1, jnp.float32), jnp.cumsum(w_rank)])
    cnt = jnp.maximum(ge - gt, 1)
    tied = (cs[ge] - cs[gt]) / cnt  # mean weight of the ranks gt+1 .. ge
    single = w_rank[jnp.clip(gt, 0, n - 1)]
    w = jnp.where(valid, jnp.where(cnt == 1, single, tied), 0.0)
    return _normalise(w, jnp.zeros_like(w))


def power_weights(scores: jax.Array, valid: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """Power prioritisation ``P_S(i) = S_i^(1/beta) / sum_j S_j^(1/beta)`` over the ``valid`` entries.

    Scores must be non-negative (negative ones count as 0); uniform over the valid entries if all are 0,
    as :func:`magister.curricula.scoring.power_weights`.
    """
    s = jnp.where(valid, jnp.maximum(scores.astype(jnp.float32), 0.0), 0.0)
    pos = s > 0
    logw = jnp.where(pos, jnp.log(jnp.where(pos, s, 1.0)) / temperature, -jnp.inf)
    mx = jnp.max(jnp.where(pos, logw, -jnp.inf))
    w = jnp.where(pos, jnp.exp(logw - jnp.where(jnp.isfinite(mx), mx, 0.0)), 0.0)
    return _normalise(w, valid / jnp.maximum(valid.sum(), 1))


def staleness_weights(last_sampled: jax.Array, clock: int | jax.Array, valid: jax.Array) -> jax.Array:
    """``P_C(i) = (c - C_i) / sum_j (c - C_j)`` over the ``valid`` entries; uniform when all are fresh.

    Args:
        last_sampled: ``i32[C]``, ``C_i`` (the clock when entry ``i`` was last sampled or inserted).
        clock: ``c``, the number of levels sampled so far.
    """
    st = jnp.where(valid, (clock - last_sampled).astype(jnp.float32), 0.0)
    return _normalise(st, valid / jnp.maximum(valid.sum(), 1))


def value_l1(advantages: jax.Array) -> jax.Array:
    """``mean_t |A_t|`` over the time axis 0 (the PLR default score)."""
    return jnp.mean(jnp.abs(advantages), axis=0)


def positive_value_loss(advantages: jax.Array) -> jax.Array:
    """``mean_t max(A_t, 0)`` over the time axis 0."""
    return jnp.mean(jnp.maximum(advantages, 0.0), axis=0)


def max_mc(values: jax.Array, max_return: jax.Array) -> jax.Array:
    """MaxMC regret ``mean_t (R_max - V_t)`` over the time axis 0 (``max_return`` has no time axis)."""
    return jnp.mean(jnp.asarray(max_return)[None] - values, axis=0)


def learnability(success_rate: jax.Array) -> jax.Array:
    """``p (1 - p)`` elementwise."""
    p = success_rate.astype(jnp.float32)
    return p * (1.0 - p)


def rollout_scores(
    score: str,
    values: jax.Array,
    advantages: jax.Array,
    max_return: jax.Array,
    successes: jax.Array,
    episodes: jax.Array,
) -> jax.Array:
    """Per-level scores of a time-major rollout (``values`` and ``advantages`` ``[T, B]``, the rest ``[B]``).

    ``"value_l1"``: :func:`value_l1`; ``"positive_value_loss"``: :func:`positive_value_loss`; ``"max_mc"``:
    :func:`max_mc`; ``"learnability"``: ``p (1 - p)`` with ``p = successes / episodes`` (0 when no episode
    ended). ``score`` is static (a Python string).
    """
    if score == "value_l1":
        return value_l1(advantages)
    if score == "positive_value_loss":
        return positive_value_loss(advantages)
    if score == "max_mc":
        return max_mc(values, max_return)
    if score == "learnability":
        return learnability(successes / jnp.maximum(episodes, 1))
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")
