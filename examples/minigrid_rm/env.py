"""Minigrid grid dynamics as fixed-shape JAX arrays (jit/vmap friendly).

The levels of the ATLAS benchmark (Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment
Design for Task-Level Pairs", Sec. 3.1 and Appendix E.2): 1, 2, 4 or 6 rooms of 5x5 cells surrounded by
walls (grids 7x7, 7x13, 13x13, 13x19), a door in the middle of every wall between adjacent rooms, objects
(keys, balls, squares) in 6 colours, doors that are open, closed or locked (a locked door opens with a key
of its colour), and an agent that sees the 5x5 cells in front of it.

Every level lives on the same ``13 x 19`` canvas (the largest layout) so that levels of any size batch
together; the cells outside the level are walls. A cell holds a *tile* (:data:`FLOOR`, :data:`WALL`,
:data:`KEY`, :data:`BALL`, :data:`SQUARE`, :data:`DOOR_OPEN`, :data:`DOOR_CLOSED`, :data:`DOOR_LOCKED`) and
a colour (0-5, :data:`COLOURS`; 0 for floor and wall).

Actions (Minigrid's): ``0`` turn left, ``1`` turn right, ``2`` forward, ``3`` pick up, ``4`` drop,
``5`` toggle. Forward enters floor and open doors; pick up takes the key/ball/square in front when the agent
carries nothing; drop puts the carried object on the floor cell in front; toggle opens a closed door, closes
an open one, and opens a locked door when the agent carries a key of the door's colour (the key is kept).
Directions: ``0`` east, ``1`` south, ``2`` west, ``3`` north; positions are ``(row, col)``.

The observation is a ``5 x 5 x 2`` integer array (tile, colour) of the cells in front of the agent, the agent
at the bottom centre facing up; the carried object is shown in the agent's cell (as in XLand-MiniGrid,
which the ATLAS implementation builds on). Cells beyond the canvas read as walls. Walls do not occlude.

>>> import jax.numpy as jnp
>>> lvl = empty_level(1, agent_pos=(3, 3), agent_dir=0)
>>> g = grid_step(GridState.from_level(lvl), jnp.int32(FORWARD))
>>> g.agent_pos.tolist(), int(g.agent_dir)
([3, 4], 0)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "ACTIONS", "BALL", "COLOURS", "DIR_VEC", "DOOR_CLOSED", "DOOR_LOCKED", "DOOR_OPEN", "DOOR_TILES",
    "DROP", "FLOOR", "FORWARD", "GridState", "KEY", "LAYOUTS", "LEFT", "Level", "MAX_H", "MAX_W",
    "MOVABLE_TILES", "NUM_ACTIONS", "NUM_COLOURS", "NUM_TILES", "PICKUP", "RIGHT", "ROOM_COUNTS",
    "SQUARE", "TILE_NAMES", "TOGGLE", "VIEW", "WALL", "build_level", "door_cells", "empty_level", "grid_step",
    "level_shape", "observe", "view_coords",
]

FLOOR, WALL, KEY, BALL, SQUARE, DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED = range(8)
NUM_TILES = 8
TILE_NAMES = ("floor", "wall", "key", "ball", "square", "door_open", "door_closed", "door_locked")
MOVABLE_TILES = (KEY, BALL, SQUARE)
DOOR_TILES = (DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED)
COLOURS = ("red", "green", "blue", "purple", "yellow", "gray")
NUM_COLOURS = len(COLOURS)
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
ACTIONS = ("left", "right", "forward", "pickup", "drop", "toggle")
NUM_ACTIONS = len(ACTIONS)
VIEW = 5
MAX_H, MAX_W = 13, 19
ROOM_COUNTS = (1, 2, 4, 6)
#: rooms -> (room rows, room columns)
LAYOUTS = {1: (1, 1), 2: (1, 2), 4: (2, 2), 6: (2, 3)}
#: direction -> (d_row, d_col): east, south, west, north
DIR_VEC = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], dtype=np.int32)


def level_shape(n_rooms: int) -> tuple[int, int]:
    """``(height, width)`` of a level with ``n_rooms`` rooms.

    >>> [level_shape(n) for n in (1, 2, 4, 6)]
    [(7, 7), (7, 13), (13, 13), (13, 19)]
    """
    if n_rooms not in LAYOUTS:
        raise ValueError(f"n_rooms must be one of {ROOM_COUNTS}, got {n_rooms!r}")
    r, c = LAYOUTS[n_rooms]
    return 6 * r + 1, 6 * c + 1


def door_cells(n_rooms: int) -> list[tuple[int, int]]:
    """Door positions of a layout: the middle of each wall between adjacent rooms.

    >>> door_cells(2)
    [(3, 6)]
    >>> len(door_cells(4)), len(door_cells(6))
    (4, 7)
    """
    level_shape(n_rooms)  # validates
    rows, cols = LAYOUTS[n_rooms]
    out = []
    for r in range(rows):
        for c in range(cols - 1):
            out.append((6 * r + 3, 6 * (c + 1)))
    for r in range(rows - 1):
        for c in range(cols):
            out.append((6 * (r + 1), 6 * c + 3))
    return out


class Level(NamedTuple):
    """A level as arrays (batch them by stacking every field).

    Attributes:
        tiles: ``uint8[13, 19]`` tile ids.
        colours: ``uint8[13, 19]`` colour ids.
        agent_pos: ``int32[2]`` (row, col).
        agent_dir: ``int32[]`` direction.
        carry: ``int32[2]`` (tile, colour) of the carried object, ``(FLOOR, 0)`` for none (levels made by
            the hindsight edit EXTRACTSUCCEEDING may start with an object in hand).
        n_rooms: ``int32[]`` one of 1, 2, 4, 6.
    """

    tiles: jax.Array
    colours: jax.Array
    agent_pos: jax.Array
    agent_dir: jax.Array
    carry: jax.Array
    n_rooms: jax.Array


def wall_template(n_rooms: int) -> np.ndarray:
    """Tiles of the empty layout (walls and floor, doors not placed) on the full canvas."""
    h, w = level_shape(n_rooms)
    t = np.full((MAX_H, MAX_W), WALL, dtype=np.uint8)
    rows, cols = LAYOUTS[n_rooms]
    for r in range(rows):
        for c in range(cols):
            t[6 * r + 1: 6 * r + 6, 6 * c + 1: 6 * c + 6] = FLOOR
    assert t[:h, :w].shape == (h, w)
    return t


def empty_level(
    n_rooms: int,
    agent_pos: tuple[int, int] = (1, 1),
    agent_dir: int = 0,
    door: tuple[int, int] = (DOOR_CLOSED, 0),
) -> Level:
    """A level with no objects and every door set to ``door`` = (tile, colour) (numpy-backed, host side)."""
    tiles = wall_template(n_rooms)
    colours = np.zeros_like(tiles)
    for rc in door_cells(n_rooms):
        tiles[rc] = door[0]
        colours[rc] = door[1]
    if tiles[tuple(agent_pos)] not in (FLOOR, DOOR_OPEN):
        raise ValueError(f"agent_pos {agent_pos} is not a free cell of a {n_rooms}-room level")
    return Level(jnp.asarray(tiles), jnp.asarray(colours), jnp.asarray(agent_pos, dtype=jnp.int32),
                 jnp.int32(agent_dir), jnp.array([FLOOR, 0], dtype=jnp.int32), jnp.int32(n_rooms))


def _tile_id(x: int | str) -> int:
    if isinstance(x, str):
        names = {"key": KEY, "ball": BALL, "square": SQUARE, "open": DOOR_OPEN, "closed": DOOR_CLOSED,
                 "locked": DOOR_LOCKED}
        names.update({n: i for i, n in enumerate(TILE_NAMES)})
        if x not in names:
            raise ValueError(f"unknown tile {x!r}; expected one of {sorted(names)}")
        return names[x]
    return int(x)


def _colour_id(x: int | str) -> int:
    if isinstance(x, str):
        if x not in COLOURS:
            raise ValueError(f"unknown colour {x!r}; expected one of {COLOURS}")
        return COLOURS.index(x)
    if not 0 <= int(x) < NUM_COLOURS:
        raise ValueError(f"colour must be in [0, {NUM_COLOURS}), got {x!r}")
    return int(x)


def build_level(
    n_rooms: int,
    agent_pos: tuple[int, int],
    agent_dir: int = 0,
    objects: Sequence[tuple[int, int, int | str, int | str]] = (),
    doors: Sequence[tuple[int | str, int | str]] | None = None,
    carry: tuple[int | str, int | str] | None = None,
) -> Level:
    """A hand-made level (host side), e.g. for tests and the evaluation set.

    Args:
        n_rooms: 1, 2, 4 or 6.
        agent_pos, agent_dir: the agent.
        objects: ``(row, col, type, colour)`` with type ``"key"``/``"ball"``/``"square"`` (or a tile id).
        doors: ``(state, colour)`` per door in :func:`door_cells` order, state ``"open"``/``"closed"``/
            ``"locked"``; default all closed and red.
        carry: optional ``(type, colour)`` held at the start.

    >>> lvl = build_level(2, (3, 2), 0, objects=[(3, 9, "ball", "blue")], doors=[("locked", "red")])
    >>> int(lvl.tiles[3, 6]) == DOOR_LOCKED, int(lvl.tiles[3, 9]) == BALL
    (True, True)
    """
    cells = door_cells(n_rooms)
    doors = [("closed", "red")] * len(cells) if doors is None else list(doors)
    if len(doors) != len(cells):
        raise ValueError(f"a {n_rooms}-room level has {len(cells)} doors, got {len(doors)} door specs")
    tiles = wall_template(n_rooms)
    colours = np.zeros_like(tiles)
    for rc, (st, col) in zip(cells, doors):
        t = _tile_id(st)
        if t not in DOOR_TILES:
            raise ValueError(f"door state must be open/closed/locked, got {st!r}")
        tiles[rc], colours[rc] = t, _colour_id(col)
    for r, c, typ, col in objects:
        t = _tile_id(typ)
        if t not in MOVABLE_TILES:
            raise ValueError(f"objects must be key/ball/square, got {typ!r}")
        if tiles[r, c] != FLOOR:
            raise ValueError(f"cell ({r}, {c}) is not a free floor cell")
        tiles[r, c], colours[r, c] = t, _colour_id(col)
    if tiles[tuple(agent_pos)] not in (FLOOR, DOOR_OPEN):
        raise ValueError(f"agent_pos {agent_pos} is not a free cell")
    if not 0 <= agent_dir < 4:
        raise ValueError(f"agent_dir must be in 0..3, got {agent_dir}")
    cr = [FLOOR, 0] if carry is None else [_tile_id(carry[0]), _colour_id(carry[1])]
    if cr[0] not in (FLOOR,) + MOVABLE_TILES:
        raise ValueError(f"carry must be a key/ball/square, got {carry!r}")
    return Level(jnp.asarray(tiles), jnp.asarray(colours), jnp.asarray(agent_pos, dtype=jnp.int32),
                 jnp.int32(agent_dir), jnp.asarray(cr, dtype=jnp.int32), jnp.int32(n_rooms))


class GridState(NamedTuple):
    """The dynamic part of the environment (the level after some steps)."""

    tiles: jax.Array
    colours: jax.Array
    agent_pos: jax.Array
    agent_dir: jax.Array
    carry: jax.Array

    @staticmethod
    def from_level(level: Level) -> GridState:
        return GridState(jnp.asarray(level.tiles), jnp.asarray(level.colours),
                         jnp.asarray(level.agent_pos, jnp.int32), jnp.asarray(level.agent_dir, jnp.int32),
                         jnp.asarray(level.carry, jnp.int32))

    def to_level(self, n_rooms: jax.Array) -> Level:
        """This state as a level (EXTRACTSUCCEEDING: restart from the final state)."""
        return Level(self.tiles, self.colours, self.agent_pos, self.agent_dir, self.carry,
                     jnp.asarray(n_rooms, jnp.int32))


_DIR_VEC = jnp.asarray(DIR_VEC)


def grid_step(g: GridState, action: jax.Array) -> GridState:
    """One Minigrid step (no reward: rewards come from the reward machine)."""
    a = jnp.asarray(action, jnp.int32)
    dv = _DIR_VEC[g.agent_dir]
    fpos = jnp.clip(g.agent_pos + dv, 0, jnp.array([MAX_H - 1, MAX_W - 1]))
    ft = g.tiles[fpos[0], fpos[1]].astype(jnp.int32)
    fc = g.colours[fpos[0], fpos[1]].astype(jnp.int32)
    ct, cc = g.carry[0], g.carry[1]
    empty_hand = ct == FLOOR
    movable = (ft == KEY) | (ft == BALL) | (ft == SQUARE)

    new_dir = jnp.where(a == LEFT, (g.agent_dir + 3) % 4, jnp.where(a == RIGHT, (g.agent_dir + 1) % 4,
                                                                      g.agent_dir))
    can_move = (a == FORWARD) & ((ft == FLOOR) | (ft == DOOR_OPEN))
    new_pos = jnp.where(can_move, fpos, g.agent_pos)
    pick = (a == PICKUP) & movable & empty_hand
    drop = (a == DROP) & (~empty_hand) & (ft == FLOOR)
    unlock = (ft == DOOR_LOCKED) & (ct == KEY) & (cc == fc)
    toggle = a == TOGGLE
    new_ft = jnp.where(pick, FLOOR, ft)
    new_fc = jnp.where(pick, 0, fc)
    new_ft = jnp.where(drop, ct, new_ft)
    new_fc = jnp.where(drop, cc, new_fc)
    new_ft = jnp.where(toggle & (ft == DOOR_CLOSED), DOOR_OPEN, new_ft)
    new_ft = jnp.where(toggle & (ft == DOOR_OPEN), DOOR_CLOSED, new_ft)
    new_ft = jnp.where(toggle & unlock, DOOR_OPEN, new_ft)
    new_carry = jnp.where(pick, jnp.stack([ft, fc]), jnp.where(drop, jnp.array([FLOOR, 0]), g.carry))
    tiles = g.tiles.at[fpos[0], fpos[1]].set(new_ft.astype(g.tiles.dtype))
    colours = g.colours.at[fpos[0], fpos[1]].set(new_fc.astype(g.colours.dtype))
    return GridState(tiles, colours, new_pos, new_dir, new_carry.astype(jnp.int32))


_VR, _VC = np.meshgrid(np.arange(VIEW), np.arange(VIEW), indexing="ij")
_FWD = jnp.asarray(VIEW - 1 - _VR)  # distance ahead
_LAT = jnp.asarray(_VC - VIEW // 2)  # offset to the right


def view_coords(agent_pos: jax.Array, agent_dir: jax.Array) -> tuple[jax.Array, jax.Array]:
    """World (row, col) of each of the ``5 x 5`` view cells (may lie off the canvas)."""
    dv = _DIR_VEC[agent_dir]
    rv = _DIR_VEC[(agent_dir + 1) % 4]
    rows = agent_pos[0] + _FWD * dv[0] + _LAT * rv[0]
    cols = agent_pos[1] + _FWD * dv[1] + _LAT * rv[1]
    return rows, cols


def view_cells(g: GridState) -> tuple[jax.Array, jax.Array]:
    """Tiles and colours of the view cells (off-canvas cells read as walls), without the carried object."""
    rows, cols = view_coords(g.agent_pos, g.agent_dir)
    inside = (rows >= 0) & (rows < MAX_H) & (cols >= 0) & (cols < MAX_W)
    r = jnp.clip(rows, 0, MAX_H - 1)
    c = jnp.clip(cols, 0, MAX_W - 1)
    t = jnp.where(inside, g.tiles[r, c].astype(jnp.int32), WALL)
    col = jnp.where(inside, g.colours[r, c].astype(jnp.int32), 0)
    return t, col


def observe(g: GridState) -> jax.Array:
    """``int32[5, 5, 2]`` egocentric observation (tile, colour); the carried object in the agent's cell."""
    t, c = view_cells(g)
    has = g.carry[0] != FLOOR
    t = t.at[VIEW - 1, VIEW // 2].set(jnp.where(has, g.carry[0], t[VIEW - 1, VIEW // 2]))
    c = c.at[VIEW - 1, VIEW // 2].set(jnp.where(has, g.carry[1], c[VIEW - 1, VIEW // 2]))
    return jnp.stack([t, c], axis=-1)
