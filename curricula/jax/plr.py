"""Prioritized Level Replay (PLR) and Robust PLR / PLR⊥ on device.

Papers: M. Jiang, E. Grefenstette, T. Rocktäschel, "Prioritized Level Replay", ICML 2021 (PLR); M. Jiang,
M. Dennis, J. Parker-Holder, J. Foerster, E. Grefenstette, T. Rocktäschel, "Replay-Guided Adversarial
Environment Design", NeurIPS 2021 (Robust PLR, PLR⊥).

The twin of :class:`magister.curricula.PLR` / :class:`magister.curricula.RobustPLR`, as pure functions over
a :class:`~magister.curricula.jax.buffer.LevelBuffer`:

1. *Replay decision* (:func:`replay_probability`), per sample: replay with probability ``replay_prob`` once
   the buffer holds at least ``max(1, min_fill_ratio * capacity)`` levels. ``replay_prob=None`` is original
   PLR's ``P_replay = n_seen / num_levels`` (needs ``num_levels``; Jiang et al. 2021, Algorithm 1); with
   ``num_levels`` given, a buffer holding every level always replays.
2. *Replay distribution* (:func:`replay_distribution`): ``P = (1 - rho) P_S + rho P_C`` (Jiang et al. 2021,
   eq. 4), ``P_S`` by rank or power prioritisation with temperature ``beta``, ``P_C`` by staleness
   (:mod:`~magister.curricula.jax.scoring`).
3. *New levels* come from your generator, one per sample (:func:`plr_sample` takes a batch of them and
   uses those it needs).
4. *Scoring and insertion* (:func:`plr_update`): the rule of ``PLR.update_scores``.
5. *PLR⊥* (``robust=True``, :class:`RobustPLRConfig`): new levels are evaluation-only, ``train=False``;
   only replayed levels update the policy (Jiang et al. 2021b, Algorithm 1).

Defaults are the Python classes': :class:`PLRConfig` has ``PLR``'s (Procgen settings of Jiang et al. 2021:
value L1, rank, ``beta = 0.1``, ``rho = 0.1``, buffer 200, ``gamma = 0.999``, ``lambda = 0.95``),
:class:`RobustPLRConfig` has ``RobustPLR``'s (the ATLAS PLR⊥ row: replay 0.5, MaxMC, ``beta = 1.0``,
``rho = 0.1``, buffer 4000, ``gamma = 0.99``, ``lambda = 0.9``).

Differences from the Python classes, by design of a fixed-shape device loop: levels are identified by a
32-bit hash; ``R_max`` is kept for buffered levels only; new levels are the generator's, not "levels outside
the buffer" (a new level that is already buffered updates its entry when scored); ``n_seen`` counts
insertions (equal to the Python count when nothing is evicted, as in PLR's setting of a buffer holding all
training levels); episode scores (``"return"``, a running ``window``) are not kept: compute a per-rollout
score with :func:`~magister.curricula.jax.scoring.rollout_scores` or your own.

>>> import jax, jax.numpy as jnp
>>> from magister.curricula.jax import RobustPLRConfig, init_buffer, hash_levels
>>> cfg = RobustPLRConfig(buffer_size=8)
>>> buf = init_buffer(jnp.int32(0), cfg.buffer_size)      # levels are int32 seeds here
>>> new = jnp.arange(4, dtype=jnp.int32)                   # a batch of 4 generated levels
>>> buf, smp = plr_sample(jax.random.PRNGKey(0), buf, new, cfg)
>>> bool(smp.replay.any()), bool(smp.train.any())          # empty buffer: all new, evaluation-only
(False, False)
>>> buf = plr_update(buf, smp.levels, hash_levels(smp.levels), jnp.array([0.1, 0.4, 0.2, 0.3]))
>>> int(buf.size), [round(float(p), 3) for p in replay_distribution(buf, cfg)[:4]]
(4, [0.133, 0.457, 0.169, 0.241])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .buffer import (
    Level,
    LevelBuffer,
    Sample,
    batch_size,
    draw_index,
    mark_sampled,
    take_levels,
    update_buffer,
    where_levels,
)
from .scoring import SCORES, power_weights, rank_weights, staleness_weights

logger = logging.getLogger(__name__)

__all__ = ["PLRConfig", "RobustPLRConfig", "plr_sample", "plr_update", "replay_distribution",
           "replay_probability"]


@dataclass(frozen=True)
class PLRConfig:
    """PLR settings (hashable: pass it as a static argument of ``jax.jit``). Defaults: ``PLR``'s.

    Args:
        buffer_size: maximum number of buffered levels (the buffer's capacity).
        replay_prob: probability of replaying; ``None`` = original PLR, ``n_seen / num_levels``.
        temperature: ``beta``.
        staleness_coef: ``rho``.
        prioritization: ``"rank"`` or ``"power"``.
        min_fill_ratio: replay only once ``size >= min_fill_ratio * capacity``.
        score: the score :func:`~magister.curricula.jax.scoring.rollout_scores` computes.
        robust: PLR⊥, new levels are evaluation-only (``train=False``).
        gamma: discount of the GAE advantages your learner computes the scores from.
        gae_lambda: lambda of those GAE advantages.
        num_levels: the number of distinct levels when finite (the Python class reads it from the task
            space; ``None``: unbounded).
    """

    buffer_size: int = 200
    replay_prob: float | None = None
    temperature: float = 0.1
    staleness_coef: float = 0.1
    prioritization: str = "rank"
    min_fill_ratio: float = 0.0
    score: str = "value_l1"
    robust: bool = False
    gamma: float = 0.999
    gae_lambda: float = 0.95
    num_levels: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.buffer_size, bool) or not isinstance(self.buffer_size, (int, np.integer)) \
                or self.buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, got {self.buffer_size!r}")
        if self.replay_prob is not None and not 0.0 <= self.replay_prob <= 1.0:
            raise ValueError(f"replay_prob must be in [0, 1] or None, got {self.replay_prob!r}")
        if self.num_levels is not None and (isinstance(self.num_levels, bool) or self.num_levels < 1):
            raise ValueError(f"num_levels must be a positive int or None, got {self.num_levels!r}")
        if self.replay_prob is None and self.num_levels is None:
            raise ValueError(
                "replay_prob=None (replay with the proportion of seen levels) needs num_levels, the number "
                "of distinct levels; pass a replay probability for unbounded level spaces"
            )
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a positive finite number, got {self.temperature!r}")
        if not 0.0 <= self.staleness_coef <= 1.0:
            raise ValueError(f"staleness_coef must be in [0, 1], got {self.staleness_coef!r}")
        if self.prioritization not in ("rank", "power"):
            raise ValueError(f"prioritization must be 'rank' or 'power', got {self.prioritization!r}")
        if not 0.0 <= self.min_fill_ratio <= 1.0:
            raise ValueError(f"min_fill_ratio must be in [0, 1], got {self.min_fill_ratio!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {self.score!r}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(
                f"gamma and gae_lambda must be in [0, 1], got {self.gamma!r}, {self.gae_lambda!r}")

    @property
    def capacity(self) -> int:
        """``min(buffer_size, num_levels)``, as the Python class's ``capacity``."""
        return self.buffer_size if self.num_levels is None else min(self.buffer_size, self.num_levels)


@dataclass(frozen=True)
class RobustPLRConfig(PLRConfig):
    """PLR⊥ settings; defaults: ``RobustPLR``'s (the ATLAS PLR⊥ row; buffer 4000, ATLAS used 50 000)."""

    buffer_size: int = 4000
    replay_prob: float | None = 0.5
    temperature: float = 1.0
    score: str = "max_mc"
    robust: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.9


def _check_capacity(buffer: LevelBuffer, cfg: PLRConfig) -> None:
    if buffer.capacity != cfg.capacity:
        raise ValueError(f"the buffer has {buffer.capacity} entries but the config's capacity is "
                         f"{cfg.capacity} (min(buffer_size, num_levels)); build it with "
                         f"init_buffer(example, cfg.capacity)")


def replay_probability(buffer: LevelBuffer, cfg: PLRConfig) -> jax.Array:
    """``P_replay`` of the next sample (``PLR._replay_probability``): 0 while the buffer is empty or below
    ``min_fill_ratio * capacity``, 1 once it holds all ``num_levels`` levels, else ``replay_prob`` (or
    ``min(1, n_seen / num_levels)`` when it is ``None``)."""
    size = buffer.size
    if cfg.replay_prob is None:
        p = jnp.minimum(1.0, buffer.num_seen / jnp.float32(cfg.num_levels)).astype(jnp.float32)
    else:
        p = jnp.float32(cfg.replay_prob)
    ok = (size > 0) & (size >= cfg.min_fill_ratio * cfg.capacity)
    p = jnp.where(ok, p, jnp.float32(0.0))
    if cfg.num_levels is not None:
        p = jnp.where(size >= cfg.num_levels, jnp.float32(1.0), p)
    return p


def replay_distribution(buffer: LevelBuffer, cfg: PLRConfig) -> jax.Array:
    """``P = (1 - rho) P_S + rho P_C`` over the buffer (``f32[C]``, zero past ``size``), as
    ``PLR.replay_weights``."""
    valid = buffer.valid
    weights = rank_weights if cfg.prioritization == "rank" else power_weights
    ps = weights(buffer.scores, valid, cfg.temperature)
    if cfg.staleness_coef == 0.0:
        return ps
    pc = staleness_weights(buffer.last_sampled, buffer.clock, valid)
    return (1.0 - cfg.staleness_coef) * ps + cfg.staleness_coef * pc


def plr_sample(
    key: jax.Array,
    buffer: LevelBuffer,
    new_levels: Level,
    cfg: PLRConfig,
    children: Level | None = None,
    has_child: jax.Array | None = None,
) -> tuple[LevelBuffer, Sample]:
    """Choose a batch of ``B`` levels (``PLR.sample_tasks``): per sample, replay with
    :func:`replay_probability` from :func:`replay_distribution`, else take ``new_levels[b]``.

    ``children``/``has_child`` (ACCEL, see :func:`~magister.curricula.jax.accel.accel_sample`): where
    ``has_child``, the sample is that child (evaluation-only). The clock advances by ``B``
    (:func:`~magister.curricula.jax.buffer.mark_sampled`). ``train`` is ``replay`` for PLR⊥, else
    ``not child``.

    Args:
        key: a PRNG key. new_levels: a batch of ``B`` generated levels. cfg: static.

    Returns:
        ``(buffer, sample)``.
    """
    _check_capacity(buffer, cfg)
    b = batch_size(new_levels)
    k1, k2 = jax.random.split(key)
    replay = jax.random.uniform(k1, (b,)) < replay_probability(buffer, cfg)
    child = jnp.zeros(b, bool) if has_child is None else has_child
    replay = replay & ~child
    idx = draw_index(k2, replay_distribution(buffer, cfg), b)
    buffer = mark_sampled(buffer, idx, replay)
    levels = where_levels(replay, take_levels(buffer.levels, idx), new_levels)
    if children is not None:
        levels = where_levels(child, children, levels)
    train = replay if cfg.robust else ~child
    return buffer, Sample(levels, replay, idx, train, child)


def plr_update(
    buffer: LevelBuffer,
    levels: Level,
    hashes: jax.Array,
    scores: jax.Array,
    max_returns: jax.Array | None = None,
    generation: jax.Array | None = None,
    num_edits: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> LevelBuffer:
    """Scores of the sampled levels, applied in batch order (``PLR.update_scores``): see
    :func:`~magister.curricula.jax.buffer.update_buffer` for the rule and the arguments."""
    return update_buffer(buffer, levels, hashes, scores, max_returns, generation, num_edits, mask)
