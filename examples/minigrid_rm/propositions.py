"""The proposition alphabet of the ATLAS benchmark and its labelling function.

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs"
(Sec. 3.2 and Appendix A.1). Propositions describe objects by a *descriptor* ``<type>[_<colour>][_<state>]``
whose colour and (for doors) state may be left unspecified (a generalisation that matches any):

* 21 movable descriptors: ``{key, ball, square} x {any, 6 colours}``;
* 28 door descriptors: ``door x {any, 6 colours} x {any, open, closed, locked}``.

The alphabet (889 propositions, the paper's count):

* ``front_<d>`` (49): the cell in front of the agent holds an object matching ``d``;
* ``carrying_<d>`` (21, movable ``d``): the agent carries an object matching ``d``;
* ``next_<d1>_<d2>`` (819): two distinct objects matching ``d1`` and ``d2`` are 4-adjacent, both inside the
  agent's 5x5 view. Symmetric duplicates are left out and at least one object is movable (two doors are
  never adjacent): unordered movable pairs (231, including ``d1 == d2``) and movable-door pairs (588).

The labelling function maps a grid state to the boolean vector of active propositions (all generalisations
at once, e.g. a blue ball in front makes ``front_ball`` and ``front_ball_blue`` true).
:func:`label` computes that vector; the environment step uses :func:`literal_truth` instead, which
evaluates only the (at most 30) literals a reward machine reads, with the view as 25-bit masks, and gives
the same values as reading them from :func:`label` (tests/test_jax_env.py checks this on random
trajectories).

>>> NUM_PROPS
889
>>> prop_name(prop_id("next_ball_red_door_locked"))
'next_ball_red_door_locked'
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np

from .env import (
    BALL,
    COLOURS,
    DOOR_CLOSED,
    DOOR_LOCKED,
    DOOR_OPEN,
    FLOOR,
    KEY,
    NUM_COLOURS,
    NUM_TILES,
    SQUARE,
    VIEW,
    GridState,
    view_cells,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CARRYING", "DESCRIPTORS", "FRONT", "MATCH", "NEXT", "NUM_DESCRIPTORS", "NUM_MOVABLE_DESCRIPTORS",
    "NUM_PROPS", "PROP_D1", "PROP_D2", "PROP_KIND", "PROP_NAMES", "descriptor_matches", "label",
    "literal_truth", "literals_from_label", "object_descriptor_counts", "prop_id", "prop_name",
]

FRONT, CARRYING, NEXT = 0, 1, 2
_MOVABLE = ((KEY, "key"), (BALL, "ball"), (SQUARE, "square"))
_STATES = ((None, ""), (DOOR_OPEN, "open"), (DOOR_CLOSED, "closed"), (DOOR_LOCKED, "locked"))


def _build() -> tuple[list[str], np.ndarray]:
    names: list[str] = []
    match = np.zeros((0, NUM_TILES, NUM_COLOURS), dtype=bool)
    rows = []
    for tile, tname in _MOVABLE:
        for ci in range(NUM_COLOURS + 1):
            names.append(tname if ci == 0 else f"{tname}_{COLOURS[ci - 1]}")
            m = np.zeros((NUM_TILES, NUM_COLOURS), dtype=bool)
            if ci == 0:
                m[tile, :] = True
            else:
                m[tile, ci - 1] = True
            rows.append(m)
    for ci in range(NUM_COLOURS + 1):
        for st, sname in _STATES:
            parts = ["door"] + ([COLOURS[ci - 1]] if ci else []) + ([sname] if sname else [])
            names.append("_".join(parts))
            m = np.zeros((NUM_TILES, NUM_COLOURS), dtype=bool)
            tiles = [DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED] if st is None else [st]
            for t in tiles:
                if ci == 0:
                    m[t, :] = True
                else:
                    m[t, ci - 1] = True
            rows.append(m)
    match = np.stack(rows)
    return names, match


#: descriptor names, index = descriptor id (movable ones first)
DESCRIPTORS, _MATCH_NP = _build()
NUM_DESCRIPTORS = len(DESCRIPTORS)  # 49
NUM_MOVABLE_DESCRIPTORS = 21
#: ``MATCH[d, tile, colour]``: whether an object (tile, colour) matches descriptor ``d``
MATCH = _MATCH_NP


def _alphabet() -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    names, kind, d1, d2 = [], [], [], []
    for d in range(NUM_DESCRIPTORS):
        names.append(f"front_{DESCRIPTORS[d]}")
        kind.append(FRONT), d1.append(d), d2.append(d)
    for d in range(NUM_MOVABLE_DESCRIPTORS):
        names.append(f"carrying_{DESCRIPTORS[d]}")
        kind.append(CARRYING), d1.append(d), d2.append(d)
    for a in range(NUM_MOVABLE_DESCRIPTORS):
        for b in range(a, NUM_DESCRIPTORS):
            names.append(f"next_{DESCRIPTORS[a]}_{DESCRIPTORS[b]}")
            kind.append(NEXT), d1.append(a), d2.append(b)
    return names, np.array(kind, np.int32), np.array(d1, np.int32), np.array(d2, np.int32)


PROP_NAMES, PROP_KIND, PROP_D1, PROP_D2 = _alphabet()
NUM_PROPS = len(PROP_NAMES)
_PROP_IDS = {n: i for i, n in enumerate(PROP_NAMES)}
assert NUM_PROPS == 889, NUM_PROPS


def prop_id(name: str) -> int:
    """Index of a proposition by name; ``next`` pairs may be given in either order.

    >>> prop_id("front_ball") , prop_id("next_door_ball") == prop_id("next_ball_door")
    (7, True)
    """
    if name in _PROP_IDS:
        return _PROP_IDS[name]
    if name.startswith("next_"):
        rest = name[5:]
        for d in DESCRIPTORS:
            if rest.startswith(d + "_") and rest[len(d) + 1:] in DESCRIPTORS:
                alt = f"next_{rest[len(d) + 1:]}_{d}"
                if alt in _PROP_IDS:
                    return _PROP_IDS[alt]
    raise KeyError(f"unknown proposition {name!r}; expected front_<d>, carrying_<d> or next_<d1>_<d2> with "
                   f"descriptors such as 'ball', 'key_red', 'door_blue_locked'")


def prop_name(i: int) -> str:
    """Name of proposition ``i``."""
    if not 0 <= int(i) < NUM_PROPS:
        raise ValueError(f"proposition id must be in [0, {NUM_PROPS}), got {i!r}")
    return PROP_NAMES[int(i)]


def descriptor_matches(d: int, tile: int, colour: int) -> bool:
    """Whether object ``(tile, colour)`` matches descriptor ``d``."""
    return bool(MATCH[d, tile, colour])


# Adjacency of the 25 view cells (4-neighbourhood), for ``next``.
_ADJ = np.zeros((VIEW * VIEW, VIEW * VIEW), dtype=np.float32)
for _r in range(VIEW):
    for _c in range(VIEW):
        for _dr, _dc in ((0, 1), (1, 0)):
            _r2, _c2 = _r + _dr, _c + _dc
            if _r2 < VIEW and _c2 < VIEW:
                _ADJ[_r * VIEW + _c, _r2 * VIEW + _c2] = _ADJ[_r2 * VIEW + _c2, _r * VIEW + _c] = 1.0
_FRONT_CELL = (VIEW - 2) * VIEW + VIEW // 2
_MATCH_J = jnp.asarray(_MATCH_NP.reshape(NUM_DESCRIPTORS, -1).astype(np.float32))
_ADJ_J = jnp.asarray(_ADJ)
_KIND_J, _D1_J, _D2_J = jnp.asarray(PROP_KIND), jnp.asarray(PROP_D1), jnp.asarray(PROP_D2)


def label(g: GridState) -> jax.Array:
    """``bool[889]``: the propositions true in grid state ``g`` (the labelling function).

    Cost: one ``49 x 25`` match table of the view and ``(49 x 25) @ (25 x 25) @ (25 x 49)`` for ``next``.
    """
    t, c = view_cells(g)
    cell = (t * NUM_COLOURS + c).reshape(-1)  # [25]
    m = _MATCH_J[:, cell]  # [49, 25] descriptor matches per view cell
    front = m[:, _FRONT_CELL] > 0
    carry_idx = g.carry[0] * NUM_COLOURS + g.carry[1]
    carrying = (_MATCH_J[:NUM_MOVABLE_DESCRIPTORS, carry_idx] > 0) & (g.carry[0] != FLOOR)
    pair = (m @ _ADJ_J @ m.T) > 0  # [49, 49]: some adjacent (distinct) cells match (i, j)
    val_front = front[_D1_J]
    val_carry = jnp.concatenate([carrying, jnp.zeros(NUM_DESCRIPTORS - NUM_MOVABLE_DESCRIPTORS, bool)])[_D1_J]
    val_next = pair[_D1_J, _D2_J]
    return jnp.where(_KIND_J == FRONT, val_front, jnp.where(_KIND_J == CARRYING, val_carry, val_next))


# A descriptor matches a set of tiles and either any colour or one colour (by construction of MATCH).
_DESC_TILE_BITS = np.array([sum(1 << t for t in range(NUM_TILES) if _MATCH_NP[d, t].any())
                            for d in range(NUM_DESCRIPTORS)], np.int32)
_DESC_COLOUR = np.array([-1 if _MATCH_NP[d].any(axis=0).all()
                         else int(np.flatnonzero(_MATCH_NP[d].any(axis=0))[0])
                         for d in range(NUM_DESCRIPTORS)], np.int32)
_REBUILT = (((_DESC_TILE_BITS[:, None] >> np.arange(NUM_TILES)) & 1).astype(bool)[:, :, None]
            & ((_DESC_COLOUR[:, None] < 0) | (np.arange(NUM_COLOURS) == _DESC_COLOUR[:, None]))[:, None, :])
assert (_REBUILT == _MATCH_NP).all(), "a descriptor is not a tile set times one or any colour"
_DESC_TILE_BITS_J, _DESC_COLOUR_J = jnp.asarray(_DESC_TILE_BITS), jnp.asarray(_DESC_COLOUR)
_CELL_BIT = jnp.asarray(1 << np.arange(VIEW * VIEW), jnp.int32)  # view cell r * VIEW + c -> bit
_ALL_CELLS = (1 << (VIEW * VIEW)) - 1
_NOT_COL0 = _ALL_CELLS & ~sum(1 << (r * VIEW) for r in range(VIEW))
_NOT_LAST_COL = _ALL_CELLS & ~sum(1 << (r * VIEW + VIEW - 1) for r in range(VIEW))


def _neighbours(m: jax.Array) -> jax.Array:
    """25-bit mask of the view cells 4-adjacent to a cell of ``m`` (bit ``r * VIEW + c``)."""
    return (((m << 1) & _NOT_COL0) | ((m >> 1) & _NOT_LAST_COL) | ((m << VIEW) & _ALL_CELLS)
            | (m >> VIEW))


def literal_truth(g: GridState, lits: jax.Array) -> jax.Array:
    """Values of signed literal codes (``+(p+1)``, ``-(p+1)``, ``0`` = padding, true) in grid state ``g``.

    Equal to reading the literals from :func:`label` (:func:`literals_from_label`) but evaluates only the
    given ones: each descriptor becomes a 25-bit mask of the view cells it matches; ``front`` tests the
    front cell's bit, ``next_<d1>_<d2>`` tests ``mask(d1) & neighbours(mask(d2))`` (adjacent distinct
    cells), ``carrying`` tests the carried object. ``lits`` may have any shape (e.g. an RM's
    ``edge_lits``, ``[MAX_EDGES, MAX_LITERALS]``).
    """
    t, c = view_cells(g)
    t, c = t.reshape(-1), c.reshape(-1)
    p = jnp.maximum(jnp.abs(lits) - 1, 0)
    d = jnp.stack([_D1_J[p], _D2_J[p]])  # [2, *lits.shape]
    tb, col = _DESC_TILE_BITS_J[d][..., None], _DESC_COLOUR_J[d][..., None]
    hit = (((tb >> t) & 1) > 0) & ((col < 0) | (col == c))  # [2, *lits.shape, 25]
    m = jnp.sum(jnp.where(hit, _CELL_BIT, 0), axis=-1)  # distinct bits: the sum is the OR
    m1, m2 = m[0], m[1]
    front = ((m1 >> _FRONT_CELL) & 1) > 0
    ct, cc = g.carry[0], g.carry[1]
    tb1, col1 = tb[0, ..., 0], col[0, ..., 0]
    carrying = (((tb1 >> ct) & 1) > 0) & ((col1 < 0) | (col1 == cc)) & (ct != FLOOR)
    nxt = (m1 & _neighbours(m2)) != 0
    kind = _KIND_J[p]
    val = jnp.where(kind == FRONT, front, jnp.where(kind == CARRYING, carrying, nxt))
    return jnp.where(lits == 0, True, jnp.where(lits > 0, val, ~val))


def literals_from_label(lab: jax.Array, lits: jax.Array) -> jax.Array:
    """Values of signed literal codes read from a full label ``bool[889]`` (``0`` = padding, true)."""
    truth = jnp.concatenate([jnp.ones(1, bool), lab])[jnp.abs(lits)]
    return jnp.where(lits >= 0, truth, ~truth)


def object_descriptor_counts(tiles: np.ndarray, colours: np.ndarray, carry: np.ndarray | None = None
                             ) -> np.ndarray:
    """``int[49]``: how many objects of a level (on the grid, plus the carried one) match each descriptor."""
    t = np.asarray(tiles).reshape(-1).astype(np.int64)
    c = np.asarray(colours).reshape(-1).astype(np.int64)
    counts = MATCH[:, t, c].sum(axis=1)
    if carry is not None and int(carry[0]) != FLOOR:
        counts = counts + MATCH[:, int(carry[0]), int(carry[1])]
    return counts.astype(np.int64)
