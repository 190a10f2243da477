"""The ATLAS edits of (level, reward machine) problems, with their preconditions (jit/vmap friendly).

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs",
Sec. 4.2 and Appendix D. A mutation is a sequence of ``n ~ U{min_edits .. max_edits}`` edits; each edit is
drawn uniformly among the *applicable* ones (its precondition holds); hindsight edits may only be the first.

Level edits (Appendix D.1), indices 0-7:

0. ``ADD_ROOMS`` (1, 2 or 4 rooms): 1 -> 2 (a room left or right), 2 -> 4 (two rooms above or below),
   4 -> 6 (two rooms left or right); the new doors get a uniform state and colour.
1. ``REMOVE_ROOMS`` (2, 4 or 6 rooms): the inverse; the removed rooms never hold the agent (the agent must be
   strictly inside the kept part; 6 -> 4 drops the leftmost or rightmost column).
2. ``ADD_OBJECT`` (fewer objects than the layout's maximum, doors included): a uniform non-door object on a
   uniform free cell.
3. ``REMOVE_OBJECT`` (more objects than the layout's minimum and a non-door object): removes a uniform one.
4. ``MOVE_AGENT`` (a free cell): the agent to a uniform free cell, uniform direction.
5. ``MOVE_OBJECT`` (a non-door object and a free cell): moves a uniform non-door object there.
6. ``REPLACE_DOOR`` (a door the agent is not standing on): new uniform state and colour.
7. ``REPLACE_NONDOOR`` (a non-door object): a new uniform type and colour in its place.

Task edits (Appendix D.2; sequential RMs), indices 8-10:

8. ``SWITCH_PROPOSITION`` (always): a uniform edge gets a uniform proposition.
9. ``ADD_STATE`` (fewer than ``max_rm_states`` states): a new state at the start, middle or end (uniform
   among those that exist); in the middle it splits an edge ``u -p-> v`` into ``u -p-> new -q-> v``; the new
   state's outgoing edge ``q`` is uniform over the alphabet.
10. ``REMOVE_STATE`` (more than two states): a uniform state and its outgoing edge go; removing ``u0`` makes
    its successor initial, removing ``uA`` makes its predecessor accepting.

Hindsight edits (Appendix D.3), indices 11-12, only first and only if the rollout's last RM state ``u`` is
neither ``u0`` nor ``uA``:

11. ``EXTRACT_PRECEDING``: same level, RM truncated so that ``u`` is accepting.
12. ``EXTRACT_SUCCEEDING``: the rollout's last grid state becomes the level, the RM starts at ``u``.

The reward stays sparse (1 on entering ``uA``) after every edit. Task and hindsight edits apply to RMs in
the canonical sequential form of the training sampler (their precondition checks it); level edits to any
level. Object counts can leave the sampler's range after ``REMOVE_ROOMS`` (the kept rooms keep their
objects); ``ADD_OBJECT``/``REMOVE_OBJECT`` respect the range of the current layout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .env import (
    BALL,
    DOOR_CLOSED,
    DOOR_LOCKED,
    DOOR_OPEN,
    FLOOR,
    KEY,
    MAX_H,
    MAX_W,
    NUM_COLOURS,
    ROOM_COUNTS,
    SQUARE,
    WALL,
    GridState,
    Level,
    level_shape,
)
from .levels import _DOOR_POS_J, _MAX_OBJ, _MIN_OBJ, _NDOORS_J, _TEMPLATES, MAX_DOORS
from .problem import Problem
from .propositions import NUM_PROPS
from .reward_machines import MAX_EDGES, MAX_STATES, RewardMachine, _sequential_arrays, is_sequential

logger = logging.getLogger(__name__)

__all__ = [
    "EDIT_NAMES", "HindsightInfo", "MutationConfig", "NUM_EDITS", "apply_edit", "edit_preconditions",
    "mutate",
]

EDIT_NAMES = (
    "add_rooms", "remove_rooms", "add_object", "remove_object", "move_agent", "move_object",
    "replace_door", "replace_nondoor", "switch_proposition", "add_state", "remove_state",
    "extract_preceding", "extract_succeeding",
)
NUM_EDITS = len(EDIT_NAMES)
LEVEL_EDITS = tuple(range(8))
TASK_EDITS = (8, 9, 10)
HINDSIGHT_EDITS = (11, 12)

_ROOMS = jnp.asarray(ROOM_COUNTS, jnp.int32)
_H = jnp.asarray([level_shape(n)[0] for n in ROOM_COUNTS], jnp.int32)
_W = jnp.asarray([level_shape(n)[1] for n in ROOM_COUNTS], jnp.int32)
_MOVABLE = jnp.asarray([KEY, BALL, SQUARE], jnp.int32)
_DOORS = jnp.asarray([DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED], jnp.int32)
_RR, _CC = (jnp.asarray(a) for a in np.meshgrid(np.arange(MAX_H), np.arange(MAX_W), indexing="ij"))


@dataclass(frozen=True)
class MutationConfig:
    """Which edits are allowed (the paper's ablations L/T/H) and the RM size limit (6 states in training)."""

    level_edits: bool = True
    task_edits: bool = True
    hindsight_edits: bool = True
    max_rm_states: int = 6

    def __post_init__(self) -> None:
        if not (self.level_edits or self.task_edits):
            raise ValueError("at least one of level_edits and task_edits must be enabled (hindsight edits "
                             "are "
                             "not always applicable)")
        if not 3 <= self.max_rm_states <= MAX_STATES:
            raise ValueError(f"max_rm_states must be in [3, {MAX_STATES}], got {self.max_rm_states}")


class HindsightInfo(NamedTuple):
    """What the last rollout of the parent reached: its final RM state and grid state."""

    rm_state: jax.Array  # int32[]
    grid: GridState
    valid: jax.Array  # bool[]: whether this information exists (a rollout happened)


def _layout(level: Level) -> jax.Array:
    return jnp.searchsorted(_ROOMS, level.n_rooms).astype(jnp.int32)


def _is_nondoor(t: jax.Array) -> jax.Array:
    return (t == KEY) | (t == BALL) | (t == SQUARE)


def _is_door(t: jax.Array) -> jax.Array:
    return (t == DOOR_OPEN) | (t == DOOR_CLOSED) | (t == DOOR_LOCKED)


def _free(level: Level) -> jax.Array:
    t = level.tiles.astype(jnp.int32)
    agent = (_RR == level.agent_pos[0]) & (_CC == level.agent_pos[1])
    return (t == FLOOR) & ~agent


def _pick(key: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A uniform cell of ``mask`` as (row, col) (garbage if the mask is empty)."""
    flat = mask.reshape(-1)
    i = jax.random.categorical(key, jnp.where(flat, 0.0, -jnp.inf))
    i = jnp.where(jnp.any(flat), i, 0)
    return i // MAX_W, i % MAX_W


def _counts(level: Level) -> tuple[jax.Array, jax.Array]:
    t = level.tiles.astype(jnp.int32)
    return jnp.sum(_is_door(t)), jnp.sum(_is_nondoor(t))


def _set(level: Level, r: jax.Array, c: jax.Array, tile: jax.Array, colour: jax.Array) -> Level:
    return level._replace(tiles=level.tiles.at[r, c].set(tile.astype(level.tiles.dtype)),
                          colours=level.colours.at[r, c].set(colour.astype(level.colours.dtype)))


def _sequential_props(rm: RewardMachine) -> tuple[jax.Array, jax.Array]:
    return rm.edge_lits[:, 0] - 1, rm.n_states - 1


# ---------------------------------------------------------------------------------------------------
# Preconditions
# ---------------------------------------------------------------------------------------------------
def _remove_sides(level: Level) -> jax.Array:
    """bool[2]: which side may be removed: (left/top/right-col-kept ..., ...) per layout (see below)."""
    li = _layout(level)
    r, c = level.agent_pos[0], level.agent_pos[1]
    # side 0: keep the first part (drop right room / bottom row / rightmost column)
    # side 1: keep the last part (drop left room / top row / leftmost column)
    s0 = jnp.select([li == 1, li == 2, li == 3], [c < 6, r < 6, c < 12], False)
    s1 = jnp.select([li == 1, li == 2, li == 3], [c > 6, r > 6, c > 6], False)
    return jnp.stack([s0, s1])


def edit_preconditions(problem: Problem, info: HindsightInfo, first: jax.Array,
                       cfg: MutationConfig = MutationConfig()) -> jax.Array:
    """``bool[13]``: which edits apply to ``problem`` (``first``: hindsight edits allowed)."""
    level, rm = problem.level, problem.rm
    li = _layout(level)
    doors, nondoor = _counts(level)
    n_obj = doors + nondoor
    has_free = jnp.any(_free(level))
    t = level.tiles.astype(jnp.int32)
    agent = (_RR == level.agent_pos[0]) & (_CC == level.agent_pos[1])
    level_ok = jnp.stack([
        li < 3,
        (li > 0) & jnp.any(_remove_sides(level)),
        (n_obj < _MAX_OBJ[li]) & has_free,
        (n_obj > _MIN_OBJ[li]) & (nondoor > 0),
        has_free,
        (nondoor > 0) & has_free,
        jnp.any(_is_door(t) & ~agent),
        nondoor > 0,
    ])
    n = rm.n_states
    seq = is_sequential(rm)  # task and hindsight edits are defined on sequential RMs
    task_ok = jnp.stack([n >= 2, n < cfg.max_rm_states, n > 2]) & seq
    u = info.rm_state
    hind = info.valid & first & (u != rm.initial) & (u != rm.accepting) & seq
    hind_ok = jnp.stack([hind, hind])
    return jnp.concatenate([level_ok & cfg.level_edits, task_ok & cfg.task_edits,
                            hind_ok & cfg.hindsight_edits])


# ---------------------------------------------------------------------------------------------------
# Level edits
# ---------------------------------------------------------------------------------------------------
def _random_doors(key: jax.Array, li: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Template of layout ``li`` with uniform random doors in every door cell."""
    k1, k2 = jax.random.split(key)
    tiles = _TEMPLATES[li].astype(jnp.int32)
    colours = jnp.zeros((MAX_H, MAX_W), jnp.int32)
    pos = _DOOR_POS_J[li]
    valid = jnp.arange(MAX_DOORS) < _NDOORS_J[li]
    st = _DOORS[jax.random.randint(k1, (MAX_DOORS,), 0, 3)]
    col = jax.random.randint(k2, (MAX_DOORS,), 0, NUM_COLOURS)
    tiles = tiles.at[pos[:, 0], pos[:, 1]].set(jnp.where(valid, st, tiles[pos[:, 0], pos[:, 1]]))
    colours = colours.at[pos[:, 0], pos[:, 1]].set(jnp.where(valid, col, colours[pos[:, 0], pos[:, 1]]))
    return tiles, colours


def _add_rooms(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    lv = p.level
    k1, k2 = jax.random.split(key)
    li = _layout(lv)
    shift_side = jax.random.bernoulli(k1)  # new rooms on the left/top: old content shifts
    dr = jnp.where((li == 1) & shift_side, 6, 0)
    dc = jnp.where((li != 1) & shift_side, 6, 0)
    nli = jnp.minimum(li + 1, 3)
    tiles, colours = _random_doors(k2, nli)
    old_t = jnp.roll(lv.tiles.astype(jnp.int32), (dr, dc), axis=(0, 1))
    old_c = jnp.roll(lv.colours.astype(jnp.int32), (dr, dc), axis=(0, 1))
    keep = old_t != WALL
    tiles = jnp.where(keep, old_t, tiles)
    colours = jnp.where(keep, old_c, colours)
    new = lv._replace(tiles=tiles.astype(lv.tiles.dtype), colours=colours.astype(lv.colours.dtype),
                      agent_pos=lv.agent_pos + jnp.stack([dr, dc]), n_rooms=_ROOMS[nli])
    return p._replace(level=new)


def _remove_rooms(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    lv = p.level
    li = _layout(lv)
    sides = _remove_sides(lv)
    side = jax.random.categorical(key, jnp.where(sides, 0.0, -jnp.inf))  # 1: keep the last part
    dr = jnp.where((li == 2) & (side == 1), -6, 0)
    dc = jnp.where((li != 2) & (side == 1), -6, 0)
    nli = jnp.maximum(li - 1, 0)
    h, w = _H[nli], _W[nli]
    old_t = jnp.roll(lv.tiles.astype(jnp.int32), (dr, dc), axis=(0, 1))
    old_c = jnp.roll(lv.colours.astype(jnp.int32), (dr, dc), axis=(0, 1))
    inside = (_RR > 0) & (_RR < h - 1) & (_CC > 0) & (_CC < w - 1)
    tiles = jnp.where(inside, old_t, WALL)
    colours = jnp.where(inside, old_c, 0)
    new = lv._replace(tiles=tiles.astype(lv.tiles.dtype), colours=colours.astype(lv.colours.dtype),
                      agent_pos=lv.agent_pos + jnp.stack([dr, dc]), n_rooms=_ROOMS[nli])
    return p._replace(level=new)


def _add_object(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2, k3 = jax.random.split(key, 3)
    r, c = _pick(k1, _free(p.level))
    t = _MOVABLE[jax.random.randint(k2, (), 0, 3)]
    col = jax.random.randint(k3, (), 0, NUM_COLOURS)
    return p._replace(level=_set(p.level, r, c, t, col))


def _remove_object(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    r, c = _pick(key, _is_nondoor(p.level.tiles.astype(jnp.int32)))
    return p._replace(level=_set(p.level, r, c, jnp.int32(FLOOR), jnp.int32(0)))


def _move_agent(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2 = jax.random.split(key)
    r, c = _pick(k1, _free(p.level))
    d = jax.random.randint(k2, (), 0, 4)
    return p._replace(level=p.level._replace(agent_pos=jnp.stack([r, c]).astype(jnp.int32),
                                             agent_dir=d.astype(jnp.int32)))


def _move_object(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2 = jax.random.split(key)
    lv = p.level
    r, c = _pick(k1, _is_nondoor(lv.tiles.astype(jnp.int32)))
    r2, c2 = _pick(k2, _free(lv))
    t, col = lv.tiles[r, c].astype(jnp.int32), lv.colours[r, c].astype(jnp.int32)
    lv = _set(lv, r, c, jnp.int32(FLOOR), jnp.int32(0))
    return p._replace(level=_set(lv, r2, c2, t, col))


def _replace_door(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2, k3 = jax.random.split(key, 3)
    lv = p.level
    agent = (_RR == lv.agent_pos[0]) & (_CC == lv.agent_pos[1])
    r, c = _pick(k1, _is_door(lv.tiles.astype(jnp.int32)) & ~agent)
    st = _DOORS[jax.random.randint(k2, (), 0, 3)]
    col = jax.random.randint(k3, (), 0, NUM_COLOURS)
    return p._replace(level=_set(lv, r, c, st, col))


def _replace_nondoor(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2, k3 = jax.random.split(key, 3)
    r, c = _pick(k1, _is_nondoor(p.level.tiles.astype(jnp.int32)))
    t = _MOVABLE[jax.random.randint(k2, (), 0, 3)]
    col = jax.random.randint(k3, (), 0, NUM_COLOURS)
    return p._replace(level=_set(p.level, r, c, t, col))


# ---------------------------------------------------------------------------------------------------
# Task edits (sequential RMs)
# ---------------------------------------------------------------------------------------------------
def _switch_proposition(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2 = jax.random.split(key)
    props, k = _sequential_props(p.rm)
    i = jax.random.randint(k1, (), 0, jnp.maximum(k, 1))
    props = props.at[i].set(jax.random.randint(k2, (), 0, NUM_PROPS))
    return p._replace(rm=_sequential_arrays(props, k))


def _add_state(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    k1, k2, k3 = jax.random.split(key, 3)
    props, k = _sequential_props(p.rm)
    # where: 0 start, 1 middle (needs k >= 2), 2 end
    kinds = jnp.array([True, True, True]) & jnp.array([True, False, True]).at[1].set(k >= 2)
    kind = jax.random.categorical(k1, jnp.where(kinds, 0.0, -jnp.inf))
    mid = jax.random.randint(k2, (), 1, jnp.maximum(k, 2))
    j = jnp.select([kind == 0, kind == 1], [0, mid], k)
    q = jax.random.randint(k3, (), 0, NUM_PROPS)
    idx = jnp.arange(MAX_EDGES)
    shifted = props[jnp.clip(idx - 1, 0, MAX_EDGES - 1)]
    new = jnp.where(idx < j, props, jnp.where(idx == j, q, shifted))
    return p._replace(rm=_sequential_arrays(new, k + 1))


def _remove_state(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    props, k = _sequential_props(p.rm)
    j = jax.random.randint(key, (), 0, k + 1)  # a state 0..k (k = accepting)
    e = jnp.minimum(j, k - 1)  # its outgoing edge, or the accepting state's incoming one
    idx = jnp.arange(MAX_EDGES)
    new = jnp.where(idx < e, props, props[jnp.clip(idx + 1, 0, MAX_EDGES - 1)])
    return p._replace(rm=_sequential_arrays(new, k - 1))


# ---------------------------------------------------------------------------------------------------
# Hindsight edits
# ---------------------------------------------------------------------------------------------------
def _extract_preceding(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    props, _ = _sequential_props(p.rm)
    return p._replace(rm=_sequential_arrays(props, jnp.maximum(info.rm_state, 1)))


def _extract_succeeding(key: jax.Array, p: Problem, info: HindsightInfo) -> Problem:
    props, k = _sequential_props(p.rm)
    u = info.rm_state
    idx = jnp.arange(MAX_EDGES)
    new = props[jnp.clip(idx + u, 0, MAX_EDGES - 1)]
    g = info.grid
    lv = Level(g.tiles.astype(p.level.tiles.dtype), g.colours.astype(p.level.colours.dtype),
               g.agent_pos.astype(jnp.int32), g.agent_dir.astype(jnp.int32), g.carry.astype(jnp.int32),
               p.level.n_rooms)
    return Problem(lv, _sequential_arrays(new, jnp.maximum(k - u, 1)))


_EDITS = (
    _add_rooms, _remove_rooms, _add_object, _remove_object, _move_agent, _move_object, _replace_door,
    _replace_nondoor, _switch_proposition, _add_state, _remove_state, _extract_preceding,
    _extract_succeeding,
)
assert len(_EDITS) == NUM_EDITS


def _canonical(p: Problem) -> Problem:
    """Same dtypes/shapes for every branch of ``lax.switch``."""
    lv = p.level
    return Problem(
        Level(lv.tiles.astype(jnp.uint8), lv.colours.astype(jnp.uint8), lv.agent_pos.astype(jnp.int32),
              jnp.asarray(lv.agent_dir, jnp.int32), lv.carry.astype(jnp.int32),
              jnp.asarray(lv.n_rooms, jnp.int32)),
        jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.int32), p.rm))


def apply_edit(key: jax.Array, problem: Problem, info: HindsightInfo, edit: jax.Array) -> Problem:
    """Apply edit number ``edit`` (see :data:`EDIT_NAMES`); the caller checks its precondition."""
    branches = [lambda k, p, i, f=f: _canonical(f(k, p, i)) for f in _EDITS]
    return jax.lax.switch(edit, branches, key, _canonical(problem), info)


def mutate(
    key: jax.Array,
    problem: Problem,
    info: HindsightInfo,
    min_edits: int = 7,
    max_edits: int = 10,
    cfg: MutationConfig = MutationConfig(),
) -> tuple[Problem, jax.Array, jax.Array]:
    """``n ~ U{min_edits .. max_edits}`` uniform applicable edits; returns ``(child, n, edit counts[13])``."""
    if not 0 <= min_edits <= max_edits:
        raise ValueError(f"need 0 <= min_edits <= max_edits, got {min_edits}, {max_edits}")
    kn, kloop = jax.random.split(key)
    n = jax.random.randint(kn, (), min_edits, max_edits + 1)
    p = _canonical(problem)

    def body(i: int, carry: tuple) -> tuple:
        p, counts, k = carry
        k, k1, k2 = jax.random.split(k, 3)
        ok = edit_preconditions(p, info, i == 0, cfg)
        e = jax.random.categorical(k1, jnp.where(ok, 0.0, -jnp.inf))
        active = (i < n) & jnp.any(ok)
        child = apply_edit(k2, p, info, e)
        p = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), child, p)
        counts = counts.at[e].add(active.astype(jnp.int32))
        return p, counts, k

    p, counts, _ = jax.lax.fori_loop(0, max_edits, body, (p, jnp.zeros(NUM_EDITS, jnp.int32), kloop))
    return p, n, counts
