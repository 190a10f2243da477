"""The level buffer of the PLR family: a fixed-capacity, compact store of levels with per-entry statistics.

The on-device form of the buffer that :class:`magister.curricula.PLR` keeps (Jiang et al. 2021,
"Prioritized Level Replay", Sec. 3 and Algorithm 1): at most ``C`` levels, each with its latest score
``S_i``, the staleness clock ``C_i`` (the number of levels sampled when it was last sampled or inserted),
its best return ``R_max`` (for MaxMC) and ACCEL's provenance (generation, edits). Entries ``0 .. size-1``
are filled, like the Python buffer's. Levels are any pytree of arrays; the buffer holds the same pytree
with a leading axis of length ``C``.

Levels are identified by a 32-bit hash (:func:`level_hash` by default, or any function of one level to a
``uint32``): inserting a level whose hash is buffered updates that entry (the dedup of the Python class,
which keys tasks by their encoding). Two different levels with the same hash would be merged; a 32-bit
hash makes that rare (about ``C * N / 2^32`` for ``N`` insertions), not impossible.

:func:`update_buffer` applies scores in batch order with the rule of ``PLR.update_scores``: a buffered
level gets the new score; another is inserted while there is room, else it replaces the lowest-scored
entry if its score is strictly higher (ties among the lowest: the stalest, then the first position).

>>> import jax, jax.numpy as jnp
>>> buf = init_buffer(jnp.zeros(3, jnp.int32), buffer_size=2)
>>> levels = jnp.array([[1, 2, 3], [4, 5, 6], [1, 2, 3]], jnp.int32)
>>> buf = update_buffer(buf, levels, hash_levels(levels), jnp.array([0.5, 0.2, 0.9]))
>>> int(buf.size), [round(float(s), 2) for s in buf.scores]
(2, [0.9, 0.2])
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["LevelBuffer", "Sample", "hash_levels", "init_buffer", "level_hash", "mark_sampled",
           "update_buffer"]

#: A level: any pytree of arrays.
Level = Any


class LevelBuffer(NamedTuple):
    """The buffer state (every field an array; entries ``0 .. size-1`` are filled).

    Attributes:
        levels: the buffered levels, every leaf ``[C, ...]``.
        scores: ``f32[C]``, the latest score ``S_i``.
        last_sampled: ``i32[C]``, ``C_i``.
        max_return: ``f32[C]``, ``R_max`` (merged with ``max``).
        hashes: ``u32[C]``, the level hashes (dedup keys).
        generation: ``i32[C]``, ACCEL generation (0 = generated, not mutated).
        num_edits: ``i32[C]``, ACCEL edits from the parent.
        size: ``i32[]``, the number of filled entries.
        clock: ``i32[]``, ``c``: levels sampled so far.
        num_seen: ``i32[]``, levels ever inserted (original PLR's ``n_seen`` when nothing is evicted).
    """

    levels: Level
    scores: jax.Array
    last_sampled: jax.Array
    max_return: jax.Array
    hashes: jax.Array
    generation: jax.Array
    num_edits: jax.Array
    size: jax.Array
    clock: jax.Array
    num_seen: jax.Array

    @property
    def capacity(self) -> int:
        """``C`` (static)."""
        return int(self.scores.shape[0])

    @property
    def valid(self) -> jax.Array:
        """``bool[C]``: the filled entries."""
        return jnp.arange(self.scores.shape[0]) < self.size


class Sample(NamedTuple):
    """A batch of levels chosen by a curriculum (the JAX form of a list of ``TaskSample``).

    Attributes:
        levels: the levels, every leaf ``[B, ...]``.
        replay: ``bool[B]``, drawn from the buffer.
        index: ``i32[B]``, the buffer position of a replayed level (meaningless otherwise).
        train: ``bool[B]``, use for gradients (``TaskSample.train``; PLR⊥: replays only).
        child: ``bool[B]``, an ACCEL child.
    """

    levels: Level
    replay: jax.Array
    index: jax.Array
    train: jax.Array
    child: jax.Array


def init_buffer(example: Level, buffer_size: int) -> LevelBuffer:
    """An empty buffer of ``buffer_size`` entries for levels shaped like ``example`` (one unbatched level)."""
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, (int, np.integer)) or buffer_size < 1:
        raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
    if not jax.tree_util.tree_leaves(example):
        raise ValueError("example must be a level: a pytree with at least one array leaf")
    c = int(buffer_size)
    levels = jax.tree_util.tree_map(lambda a: jnp.zeros((c,) + jnp.shape(a), jnp.asarray(a).dtype), example)
    zi, zf = jnp.zeros(c, jnp.int32), jnp.zeros(c, jnp.float32)
    return LevelBuffer(levels, zf, zi, zf, jnp.zeros(c, jnp.uint32), zi, zi, jnp.int32(0), jnp.int32(0),
                       jnp.int32(0))


_HASH_MULT: dict[int, np.ndarray] = {}


def _as_words(x: jax.Array) -> jax.Array:
    """A leaf as ``uint32`` words: floats by their bits (float32), integers and booleans by value."""
    x = jnp.ravel(jnp.asarray(x))
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return x.astype(jnp.uint32)


def level_hash(level: Level) -> jax.Array:
    """A 32-bit hash of one level's arrays (traceable; :func:`hash_levels` maps it over a batch).

    A multiply-add over the level's words with fixed odd multipliers, then a murmur-style finaliser. Floats
    are hashed by their float32 bits, so ``0.5`` and ``0.25`` differ.
    """
    flat = jnp.concatenate([_as_words(x) for x in jax.tree_util.tree_leaves(level)])
    n = flat.shape[0]
    if n not in _HASH_MULT:
        rng = np.random.default_rng(12345)
        _HASH_MULT[n] = rng.integers(1, 2**32 - 1, size=n, dtype=np.uint64).astype(np.uint32) | 1
    mult = jnp.asarray(_HASH_MULT[n])
    h = jnp.sum((flat + jnp.uint32(0x9E3779B9)) * mult, dtype=jnp.uint32)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    return h ^ (h >> 13)


def hash_levels(levels: Level, hash_fn: Callable[[Level], jax.Array] = level_hash) -> jax.Array:
    """``u32[B]``: ``hash_fn`` of each level of a batch (``jax.vmap``)."""
    return jax.vmap(hash_fn)(levels).astype(jnp.uint32)


def batch_size(tree: Level) -> int:
    """The leading axis of a batch of levels (static)."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves or jnp.ndim(leaves[0]) == 0:
        raise ValueError("expected a batch of levels: a pytree whose leaves have a leading batch axis")
    return int(leaves[0].shape[0])


def where_levels(mask: jax.Array, a: Level, b: Level) -> Level:
    """Per level of a batch, ``a`` where ``mask`` else ``b``."""
    def pick(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y)
    return jax.tree_util.tree_map(pick, a, b)


def take_levels(levels: Level, index: jax.Array) -> Level:
    """The levels at positions ``index`` of a batch (or buffer)."""
    return jax.tree_util.tree_map(lambda a: a[index], levels)


def draw_index(key: jax.Array, probs: jax.Array, k: int) -> jax.Array:
    """``i32[k]`` positions drawn i.i.d. from the (unnormalised, non-negative) weights ``probs``.

    Inverse CDF: one cumulative sum and ``k`` binary searches, O(C + k log C) (``jax.random.categorical``
    would draw ``k x C`` Gumbel variates). Zero-weight positions are never drawn; all-zero weights give 0.
    """
    cdf = jnp.cumsum(probs)
    u = jax.random.uniform(key, (int(k),)) * cdf[-1]
    idx = jnp.searchsorted(cdf, u, side="right")
    last = jnp.maximum(jnp.max(jnp.where(probs > 0, jnp.arange(probs.shape[0]), 0)), 0)
    return jnp.minimum(idx, last).astype(jnp.int32)


def mark_sampled(buffer: LevelBuffer, index: jax.Array, replay: jax.Array) -> LevelBuffer:
    """Account for a sampled batch of ``B`` levels: the clock advances by ``B`` and the ``b``-th sample is
    tick ``c + 1 + b``; a replayed entry's ``C_i`` becomes the tick of its last draw in the batch (as
    ``PLR.sample``).

    Args:
        index: ``i32[B]``, buffer positions (used where ``replay``). replay: ``bool[B]``.
    """
    b = index.shape[0]
    ticks = buffer.clock + 1 + jnp.arange(b, dtype=jnp.int32)
    last = buffer.last_sampled.at[index].max(jnp.where(replay, ticks, jnp.iinfo(jnp.int32).min))
    return buffer._replace(last_sampled=last, clock=buffer.clock + b)


def update_buffer(
    buffer: LevelBuffer,
    levels: Level,
    hashes: jax.Array,
    scores: jax.Array,
    max_returns: jax.Array | None = None,
    generation: jax.Array | None = None,
    num_edits: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> LevelBuffer:
    """Apply one score per level, in batch order, with the insertion rule of ``PLR.update_scores``.

    A level whose hash is buffered gets the new score (``R_max`` merged with ``max``); another is inserted
    at the next free position while there is room (``C_i = c``), else it replaces the lowest-scored entry
    if its score is strictly higher (ties among the lowest: the stalest, then the first).

    Cost: a sequential ``lax.scan`` over the batch (the rule depends on the order), O(1) per level after
    one vectorised hash lookup, O(C + B log B); a level that would enter a full buffer with a score above a
    running lower bound of the lowest score pays one O(C) search for the lowest entry (the Python class's
    scheme).

    Args:
        levels: the scored levels ``[B, ...]``.
        hashes: ``u32[B]`` (:func:`hash_levels`).
        scores: ``f32[B]``.
        max_returns: ``f32[B]``, best return seen (default 0).
        generation: ACCEL provenance of inserted levels: their generation (default 0).
        num_edits: ACCEL provenance of inserted levels: their edit count (default 0).
        mask: ``bool[B]``, the entries to apply (default all).
    """
    b = scores.shape[0]
    cap = buffer.scores.shape[0]
    zeros = jnp.zeros(b, jnp.int32)
    hashes = hashes.astype(jnp.uint32)
    scores = scores.astype(jnp.float32)
    mr = jnp.zeros(b, jnp.float32) if max_returns is None else max_returns.astype(jnp.float32)
    gen = zeros if generation is None else generation.astype(jnp.int32)
    edits = zeros if num_edits is None else num_edits.astype(jnp.int32)
    mask = jnp.ones(b, bool) if mask is None else mask
    imax = jnp.iinfo(jnp.int32).max

    # Where could level i's hash be buffered when its turn comes? Either at the position the latest
    # earlier level of the batch with the same hash left it in (``prev``), or, without one, where it was
    # before the batch (``before``). Both are looked up once, vectorised; each step then checks its one
    # candidate position in O(1) (an eviction in between shows as a different hash there).
    valid0 = buffer.valid
    order = jnp.lexsort((~valid0, buffer.hashes))  # by hash, filled entries first among equal hashes
    at = jnp.minimum(jnp.searchsorted(buffer.hashes[order], hashes, side="left"), cap - 1)
    before = jnp.where((buffer.hashes[order[at]] == hashes) & valid0[order[at]], order[at], -1)
    by_hash = jnp.argsort(hashes, stable=True)
    sh = hashes[by_hash]
    same_as_prev = jnp.concatenate([jnp.zeros(1, bool), sh[1:] == sh[:-1]])
    prev = zeros.at[by_hash].set(jnp.where(same_as_prev, jnp.roll(by_hash, 1), -1).astype(jnp.int32))

    def lowest(buf: LevelBuffer) -> tuple[jax.Array, jax.Array]:
        """The lowest score of a full buffer and the entry to evict (the stalest, then the first)."""
        low = jnp.min(buf.scores)
        return low, jnp.argmin(jnp.where(buf.scores == low, buf.last_sampled, imax)).astype(jnp.int32)

    def body(carry: tuple, x: tuple) -> tuple[tuple, None]:
        buf, placed, bound = carry  # placed[j]: where level j's hash was after step j (-1: nowhere)
        i, level, h, s, r, g, e, m, p_i, b_i = x
        cand = jnp.where(p_i >= 0, placed[jnp.maximum(p_i, 0)], b_i)
        safe = jnp.maximum(cand, 0)
        found = (cand >= 0) & (cand < buf.size) & (buf.hashes[safe] == h)
        room = buf.size < cap
        # full and new: a running lower bound of the lowest score rejects most levels in O(1) (as the
        # Python class's); otherwise find the lowest entry, O(C)
        scan_low = ~found & ~room & (s > bound)
        low, victim = jax.lax.cond(scan_low, lowest, lambda _: (bound, jnp.int32(0)), buf)
        insert = ~found & (room | (scan_low & (s > low)))
        pos = jnp.where(found, safe, jnp.where(room, buf.size, victim))
        do = m & (found | insert)
        ins = m & insert

        def put(arr: jax.Array, value: jax.Array, when: jax.Array) -> jax.Array:
            return arr.at[pos].set(jnp.where(when, value, arr[pos]))

        new_r = jnp.where(found, jnp.maximum(buf.max_return[pos], r), r)
        buf = buf._replace(
            levels=jax.tree_util.tree_map(lambda a, v: put(a, v, ins), buf.levels, level),
            scores=put(buf.scores, s, do),
            last_sampled=put(buf.last_sampled, buf.clock, ins),
            max_return=put(buf.max_return, new_r, do),
            hashes=put(buf.hashes, h, ins),
            generation=put(buf.generation, g, ins),
            num_edits=put(buf.num_edits, e, ins),
            size=buf.size + (ins & room).astype(jnp.int32),
            num_seen=buf.num_seen + ins.astype(jnp.int32),
        )
        bound = jnp.where(scan_low, low, bound)  # the true lowest (an eviction can only raise it)
        bound = jnp.where(do, jnp.minimum(bound, s), bound)
        placed = placed.at[i].set(jnp.where(found | ins, pos, -1))
        return (buf, placed, bound), None

    bound0 = jnp.min(jnp.where(valid0, buffer.scores, jnp.inf))
    xs = (jnp.arange(b, dtype=jnp.int32), levels, hashes, scores, mr, gen, edits, mask, prev,
          before.astype(jnp.int32))
    (buffer, _, _), _ = jax.lax.scan(body, (buffer, jnp.full(b, -1, jnp.int32), bound0), xs)
    return buffer
