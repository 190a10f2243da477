"""ACCEL on device: PLR⊥ whose replayed levels are edited into evaluation-only children.

Paper: J. Parker-Holder, M. Jiang, M. Dennis, M. Samvelyan, J. Foerster, E. Grefenstette, T. Rocktäschel,
"Evolving Curricula with Regret-Based Environment Design", ICML 2022 (Algorithm 1).

The twin of :class:`magister.curricula.ACCEL`: a PLR⊥ buffer (:mod:`~magister.curricula.jax.plr`) with
``replay_prob = 0.9``; after the rollout of a replayed level, :func:`accel_mutate` applies
``n ~ U{min_edits .. max_edits}`` edits to it with your ``mutate_fn(key, level) -> level``, and the children
are the next samples (:func:`accel_sample`), evaluation-only (``train=False``), scored and inserted like new
levels with ``generation = parent's + 1`` and ``num_edits = n``.

Defaults are ``ACCEL``'s: the PLR⊥ settings (:class:`~magister.curricula.jax.plr.RobustPLRConfig`) with
replay rate 0.9 and 7-10 edits (the ATLAS ACCEL row). The Python class's ``mutate_on`` / ``max_pending``
are not needed here: a batch's children are made from that batch's replays, one child per replay, and
wait in your training state (``has_child``) for the next batch.

>>> import jax, jax.numpy as jnp
>>> cfg = ACCELConfig(min_edits=2, max_edits=2)
>>> kids, n = accel_mutate(jax.random.PRNGKey(0), jnp.array([10, 20]), lambda k, lv: lv + 1, cfg)
>>> kids.tolist(), n.tolist()
([12, 22], [2, 2])
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .buffer import Level, LevelBuffer, Sample, batch_size
from .plr import RobustPLRConfig, plr_sample

logger = logging.getLogger(__name__)

__all__ = ["ACCELConfig", "accel_mutate", "accel_sample", "child_provenance"]

#: ``mutate_fn(key, level) -> level``: one edit of one level (traceable).
MutateFn = Callable[[jax.Array, Level], Level]


@dataclass(frozen=True)
class ACCELConfig(RobustPLRConfig):
    """ACCEL settings: PLR⊥'s plus the edit count; defaults: ``ACCEL``'s. The other fields are as for
    :class:`~magister.curricula.jax.plr.PLRConfig`.

    Args:
        min_edits: fewest edits per child (``n ~ U{min_edits .. max_edits}``).
        max_edits: most edits per child.
    """

    replay_prob: float | None = 0.9
    min_edits: int = 7
    max_edits: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("min_edits", "max_edits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {v!r}")
        if not 0 <= self.min_edits <= self.max_edits:
            raise ValueError(f"need 0 <= min_edits <= max_edits, got {self.min_edits}, {self.max_edits}")
        if self.replay_prob is None:
            raise ValueError("ACCEL needs a replay probability (the paper's is 0.9)")


def accel_mutate(
    key: jax.Array, levels: Level, mutate_fn: MutateFn, cfg: ACCELConfig
) -> tuple[Level, jax.Array]:
    """Children of a batch of levels: ``n_b ~ U{min_edits .. max_edits}`` applications of ``mutate_fn``
    to level ``b`` (``ACCEL._mutate``).

    Args:
        key: a PRNG key. levels: ``[B, ...]``. mutate_fn: one edit, ``(key, level) -> level``.

    Returns:
        ``(children [B, ...], n i32[B])``.
    """
    b = batch_size(levels)
    k_n, k_e = jax.random.split(key)
    n = jax.random.randint(k_n, (b,), cfg.min_edits, cfg.max_edits + 1)

    def one(k: jax.Array, level: Level, count: jax.Array) -> Level:
        def edit(i: jax.Array, lv: Level) -> Level:
            new = mutate_fn(jax.random.fold_in(k, i), lv)
            return jax.tree_util.tree_map(lambda a, c: jnp.where(i < count, a, c), new, lv)
        return jax.lax.fori_loop(0, cfg.max_edits, edit, level)

    return jax.vmap(one)(jax.random.split(k_e, b), levels, n), n.astype(jnp.int32)


def accel_sample(
    key: jax.Array,
    buffer: LevelBuffer,
    new_levels: Level,
    cfg: ACCELConfig,
    children: Level,
    has_child: jax.Array,
) -> tuple[LevelBuffer, Sample]:
    """:func:`~magister.curricula.jax.plr.plr_sample` where ``has_child`` marks the samples that are the
    pending children (``sample.child``, ``train=False``); the others replay or are new as in PLR⊥."""
    if has_child.shape != (batch_size(new_levels),):
        raise ValueError(f"has_child must be bool[{batch_size(new_levels)}], got shape {has_child.shape}")
    return plr_sample(key, buffer, new_levels, cfg, children, has_child)


def child_provenance(
    buffer: LevelBuffer, sample: Sample, num_edits: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``(generation, num_edits)`` of the children of ``sample``'s replays: parent's generation + 1 and the
    edits made (0 where the sample was not a replay)."""
    gen = jnp.where(sample.replay, buffer.generation[sample.index] + 1, 0)
    return gen, jnp.where(sample.replay, num_edits, 0)

