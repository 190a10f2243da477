"""Level and problem samplers, and the solvability checker.

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs"
(Sec. 3.1, 3.3, Appendix D, E.2, E.3).

**Level sampler** (Appendix E.2; jit/vmap friendly): the number of rooms is drawn uniformly from
``{1, 2, 4, 6}``; the number of objects uniformly from the layout's range (1-5, 1-10, 4-15, 7-20 objects,
*doors included*: the minimum is ``max(1, number of doors)``); every door gets a uniform state
(open/closed/locked) and colour; the remaining objects are non-door objects of uniform type
(key/ball/square) and colour on distinct uniform free cells; the agent goes on another free cell, facing a
uniform direction.

**Problem samplers** (Sec. 3.3): *independent* draws a level and an RM (sequential, or acyclic from the
random-walk sampler) separately (most problems are unsolvable: about 3% are solvable in the paper);
*level-conditioned* draws the RM's propositions only among those whose objects are in the level
(front/carrying: a matching object; next: two distinct matching objects).

**Solvability** (Appendix E.3; host side): :func:`is_solvable` and :func:`solvable_batch` live in
:mod:`.solvability` (re-exported here), which says exactly what they decide.

>>> import jax
>>> lvl = sample_level(jax.random.PRNGKey(0))
>>> int(lvl.n_rooms) in (1, 2, 4, 6)
True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .env import (
    BALL,
    DIR_VEC,
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
    Level,
    door_cells,
    wall_template,
)
from .problem import Problem
from .propositions import (
    CARRYING,
    FRONT,
    MATCH,
    NUM_DESCRIPTORS,
    NUM_MOVABLE_DESCRIPTORS,
    NUM_PROPS,
    PROP_D1,
    PROP_D2,
    PROP_KIND,
)
from .reward_machines import sample_random_walk_rm, sample_sequential_rm, uniform_choice, uniform_int
from .solvability import is_solvable, solvable_batch

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_NONDOOR", "OBJECT_RANGE", "ProblemSampler", "allowed_props", "count_objects", "is_solvable",
    "sample_level", "sample_problem", "solvable_batch",
]

#: rooms -> (min objects, max objects), doors included (Appendix D/E.2)
OBJECT_RANGE = {1: (1, 5), 2: (1, 10), 4: (4, 15), 6: (7, 20)}
_N_DOORS = {n: len(door_cells(n)) for n in ROOM_COUNTS}
#: the most non-door objects any layout can hold (six rooms: 20 - 7 doors)
MAX_NONDOOR = max(OBJECT_RANGE[n][1] - _N_DOORS[n] for n in ROOM_COUNTS)
MAX_DOORS = max(_N_DOORS.values())

_TEMPLATES = jnp.asarray(np.stack([wall_template(n) for n in ROOM_COUNTS]))
_DOOR_POS = np.zeros((len(ROOM_COUNTS), MAX_DOORS, 2), np.int32)
for _i, _n in enumerate(ROOM_COUNTS):
    for _j, _rc in enumerate(door_cells(_n)):
        _DOOR_POS[_i, _j] = _rc
_DOOR_POS_J = jnp.asarray(_DOOR_POS)
_NDOORS_J = jnp.asarray([_N_DOORS[n] for n in ROOM_COUNTS], jnp.int32)
_MIN_OBJ = jnp.asarray([OBJECT_RANGE[n][0] for n in ROOM_COUNTS], jnp.int32)
_MAX_OBJ = jnp.asarray([OBJECT_RANGE[n][1] for n in ROOM_COUNTS], jnp.int32)
_ROOMS_J = jnp.asarray(ROOM_COUNTS, jnp.int32)
_MOVABLE_J = jnp.asarray([KEY, BALL, SQUARE], jnp.int32)
_DOOR_TILES_J = jnp.asarray([DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED], jnp.int32)


def _layout_mask(rooms: Sequence[int]) -> np.ndarray:
    bad = [r for r in rooms if r not in ROOM_COUNTS]
    if bad or not rooms:
        raise ValueError(f"rooms must be a non-empty subset of {ROOM_COUNTS}, got {tuple(rooms)!r}")
    return np.array([n in rooms for n in ROOM_COUNTS])


def sample_level(
    key: jax.Array,
    rooms: Sequence[int] = ROOM_COUNTS,
    object_range: tuple[int, int] | None = None,
) -> Level:
    """One random level (traceable: ``jax.vmap(sample_level)(keys)`` for a batch).

    Args:
        key: PRNG key.
        rooms: room counts to draw from uniformly.
        object_range: ``(lo, hi)`` overriding the per-layout object counts (doors included; counts below
            the number of doors mean no non-door object), e.g. ``(1, 1)`` with ``rooms=(1,)`` for ACCEL-0.
    """
    mask = jnp.asarray(_layout_mask(rooms))
    if object_range is not None and not 0 <= object_range[0] <= object_range[1]:
        raise ValueError(f"object_range must be (lo, hi) with 0 <= lo <= hi, got {object_range!r}")
    # one uniform draw for everything (see reward_machines.uniform_choice): layout, door states and
    # colours, object count, cell-order noise, object types and colours, agent direction
    sizes = (1, MAX_DOORS, MAX_DOORS, 1, MAX_H * MAX_W, MAX_NONDOOR, MAX_NONDOOR, 1)
    u = jnp.split(jax.random.uniform(key, (sum(sizes),)), np.cumsum(sizes)[:-1])
    li = uniform_choice(u[0][0], mask)
    tiles = _TEMPLATES[li].astype(jnp.int32)
    colours = jnp.zeros((MAX_H, MAX_W), jnp.int32)
    nd = _NDOORS_J[li]
    dvalid = jnp.arange(MAX_DOORS) < nd
    dpos = _DOOR_POS_J[li]
    dstate = _DOOR_TILES_J[uniform_int(u[1], 0, 2)]
    dcol = uniform_int(u[2], 0, NUM_COLOURS - 1)
    tiles = tiles.at[dpos[:, 0], dpos[:, 1]].set(jnp.where(dvalid, dstate, tiles[dpos[:, 0], dpos[:, 1]]))
    colours = colours.at[dpos[:, 0], dpos[:, 1]].set(jnp.where(dvalid, dcol, 0))
    if object_range is None:
        lo, hi = _MIN_OBJ[li], _MAX_OBJ[li]
    else:
        lo, hi = jnp.int32(object_range[0]), jnp.int32(object_range[1])
    n_obj = uniform_int(u[3][0], lo, hi)
    n_nd = jnp.clip(n_obj - nd, 0, MAX_NONDOOR)
    free = (tiles == FLOOR).reshape(-1)
    order = jnp.argsort(jnp.where(free, -u[4], 1.0))[: MAX_NONDOOR + 1]
    otype = _MOVABLE_J[uniform_int(u[5], 0, 2)]
    ocol = uniform_int(u[6], 0, NUM_COLOURS - 1)
    place = jnp.arange(MAX_NONDOOR) < n_nd
    cells = order[:MAX_NONDOOR]
    ft, fc = tiles.reshape(-1), colours.reshape(-1)
    ft = ft.at[cells].set(jnp.where(place, otype, ft[cells]))
    fc = fc.at[cells].set(jnp.where(place, ocol, fc[cells]))
    acell = order[n_nd]
    agent = jnp.stack([acell // MAX_W, acell % MAX_W]).astype(jnp.int32)
    adir = uniform_int(u[7][0], 0, 3)
    return Level(ft.reshape(MAX_H, MAX_W).astype(jnp.uint8), fc.reshape(MAX_H, MAX_W).astype(jnp.uint8),
                 agent, adir.astype(jnp.int32), jnp.array([FLOOR, 0], jnp.int32), _ROOMS_J[li])


_MATCH_FLAT = jnp.asarray(MATCH.reshape(NUM_DESCRIPTORS, -1).astype(np.float32))


def count_objects(level: Level) -> tuple[jax.Array, jax.Array]:
    """``(doors, non-door objects)`` on the grid (traceable)."""
    t = level.tiles.astype(jnp.int32)
    doors = jnp.sum((t == DOOR_OPEN) | (t == DOOR_CLOSED) | (t == DOOR_LOCKED))
    nondoor = jnp.sum((t == KEY) | (t == BALL) | (t == SQUARE))
    return doors, nondoor


def allowed_props(level: Level) -> jax.Array:
    """``bool[889]``: propositions whose objects exist in ``level`` (for level-conditioned sampling).

    ``front_d``/``carrying_d``: an object matching ``d`` (carrying: movable); ``next_d1_d2``: two distinct
    objects, one matching each descriptor.
    """
    cell = (level.tiles.astype(jnp.int32) * NUM_COLOURS + level.colours.astype(jnp.int32)).reshape(-1)
    m = _MATCH_FLAT[:, cell]  # [49, cells]
    has_carry = level.carry[0] != FLOOR
    cm = _MATCH_FLAT[:, level.carry[0] * NUM_COLOURS + level.carry[1]] * has_carry
    m = jnp.concatenate([m, cm[:, None]], axis=1)
    cnt = m.sum(axis=1)
    both = m @ m.T
    kind, d1, d2 = jnp.asarray(PROP_KIND), jnp.asarray(PROP_D1), jnp.asarray(PROP_D2)
    single = cnt[d1] >= 1
    union = cnt[d1] + cnt[d2] - both[d1, d2]
    pair = (cnt[d1] >= 1) & (cnt[d2] >= 1) & (union >= 2)
    movable = d1 < NUM_MOVABLE_DESCRIPTORS
    return jnp.where(kind == FRONT, single, jnp.where(kind == CARRYING, single & movable, pair))


@dataclass(frozen=True)
class ProblemSampler:
    """Problem generator settings (hashable: pass it as a static argument under ``jit``).

    Attributes:
        mode: ``"independent"`` (paper default) or ``"level_conditioned"``.
        rooms: room counts to draw from.
        object_range: optional override of the object counts (see :func:`sample_level`).
        min_transitions, max_transitions: RM length range (1-5 in the paper): the sequential RM's number
            of transitions, or one less than the random-walk sampler's candidate states.
        task: ``"sequential"`` (paper default) or ``"random_walk"`` (acyclic RMs, Sec. 5.4), see
            :mod:`.reward_machines`; ``restart_prob``, ``max_walks`` and ``max_paths`` configure the latter.
    """

    mode: str = "independent"
    rooms: tuple[int, ...] = ROOM_COUNTS
    object_range: tuple[int, int] | None = None
    min_transitions: int = 1
    max_transitions: int = 5
    task: str = "sequential"
    restart_prob: float = 0.5
    max_walks: int = 4
    max_paths: int = 2

    def __post_init__(self) -> None:
        if self.mode not in ("independent", "level_conditioned"):
            raise ValueError(f"mode must be 'independent' or 'level_conditioned', got {self.mode!r}")
        if self.task not in ("sequential", "random_walk"):
            raise ValueError(f"task must be 'sequential' or 'random_walk', got {self.task!r}")
        _layout_mask(self.rooms)

    def __call__(self, key: jax.Array) -> Problem:
        return sample_problem(key, self)


#: ACCEL-0's generator: one room, one object, one transition (Sec. 5.1)
ACCEL0_SAMPLER = ProblemSampler(rooms=(1,), object_range=(1, 1), min_transitions=1, max_transitions=1)


def sample_problem(key: jax.Array, sampler: ProblemSampler = ProblemSampler()) -> Problem:
    """One problem (traceable)."""
    k1, k2 = jax.random.split(key)
    level = sample_level(k1, sampler.rooms, sampler.object_range)
    allowed = allowed_props(level) if sampler.mode == "level_conditioned" else None
    if sampler.task == "random_walk":
        rm = sample_random_walk_rm(k2, sampler.min_transitions, sampler.max_transitions, allowed,
                                   sampler.restart_prob, sampler.max_walks, sampler.max_paths)
    else:
        rm = sample_sequential_rm(k2, sampler.min_transitions, sampler.max_transitions, allowed)
    return Problem(level, rm)


def front_cell(level: Level) -> tuple[int, int]:
    """The cell in front of the agent (host side)."""
    p = np.asarray(level.agent_pos)
    d = DIR_VEC[int(level.agent_dir)]
    return int(p[0] + d[0]), int(p[1] + d[1])


assert NUM_PROPS == len(PROP_KIND)
