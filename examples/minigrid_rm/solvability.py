"""Solvability of (level, reward machine) problems: can some action sequence drive the RM into ``uA``?

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs",
Appendix E.3 (paths of the RM to ``uA``, formulas satisfied in order, a tree over locked-door opening
orders). This checker follows that outline but evaluates every edge formula *as a whole* (all its literals,
negated ones included, in one environment state) against the environment's own semantics
(:mod:`.env`, :mod:`.propositions`).

**The abstraction.** Between RM transitions the only irreversible change the agent can make is unlocking a
locked door (a door never locks again), so the search state is ``(RM state, set of unlocked doors)``. For a
set of unlocked doors the agent's *region* is its connected component of floor, objects, open and closed
doors and unlocked doors. Inside it:

* movable objects (keys, balls, squares; the carried one included) can be carried anywhere in the region
  and put down on any of its floor cells, the agent can stand on any floor cell or door cell of the region
  facing any way, and every door of the region can be left open or closed;
* everything else is fixed: walls, locked doors (a locked door bordering the region opens only with a key
  of its colour from the region), and the cells and objects of the unreachable rooms, which can still be
  *seen* (walls do not occlude the 5x5 view, so two unreachable objects side by side satisfy a ``next``
  proposition when the agent looks at them).

A formula (a conjunction) is satisfiable for a door set if some *configuration* makes all its literals true
at once: an agent pose (a region cell and a direction), a carried object, objects from the region put on
free floor cells of the view, and door states, with the label computed exactly as :func:`.propositions.label`
does (``front``: the cell ahead; ``carrying``: the held object, which is not on the grid; ``next``: two
distinct 4-adjacent cells of the 5x5 view, the agent's own cell included - it reads as an open door when the
agent stands in a doorway). Objects not used by the positive literals are put away where they do not matter.
Every RM transition needs one environment step (the label is read after each step, and a no-op action always
exists: ``drop`` with empty hands, ``pickup`` while carrying), so the configuration that fires one edge can
be changed before the next.

The search is a depth-first search over ``(edge index along a simple path u0 -> uA, unlocked doors)``: fire
the edge if its formula is satisfiable for the current door set, else unlock one more door (a locked door on
the region's border whose colour matches a key in the region) and try again. Opening doors is explored in
every order because it can also *break* a formula (``front_door_green_locked``, negated literals). Firing a
satisfiable edge at once loses nothing: which doors can be unlocked depends on the door set only, so any door
opened before the edge can as well be opened after it.

**Exactness and the one direction it is sound in.** The check is exact for the environment semantics except
for two optimistic assumptions, so ``False`` (unsolvable) is always right and ``True`` can be wrong only
when one of them fails:

1. *Room to rearrange*: objects of the region can always be moved out of the way and put where the
   configuration wants them. This fails only in levels so crowded that objects wall the agent in (rooms are
   5x5 and the sampler puts at most 20 objects, doors included, in six rooms).
2. *No unwanted sibling edge*: while the agent prepares the configuration for an edge, no *other* edge
   leaving the same RM state fires first. For sequential RMs (the training distribution: one edge per state)
   this is exact, since firing an edge earlier than planned only moves the RM forward sooner: along any action
   sequence the RM state is never behind the plan's. For branching RMs it is optimistic.

>>> import jax
>>> from .env import build_level
>>> from .reward_machines import sequential_rm
>>> lvl = build_level(1, (3, 1), 0, objects=[(3, 4, "ball", "red")])
>>> is_solvable(lvl, sequential_rm(["front_ball"])), is_solvable(lvl, sequential_rm(["front_key"]))
(True, False)
>>> from .reward_machines import rm_from_edges
>>> is_solvable(lvl, rm_from_edges(2, [(0, 1, ["carrying_ball", "front_ball"])]))  # only one ball
False
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import jax
import numpy as np
from scipy import ndimage

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
    SQUARE,
    VIEW,
    WALL,
    Level,
)
from .problem import Problem
from .propositions import CARRYING, FRONT, MATCH, PROP_D1, PROP_D2, PROP_KIND
from .reward_machines import RewardMachine

logger = logging.getLogger(__name__)

__all__ = ["formula_satisfiable", "is_solvable", "rm_paths", "solvable_batch"]

_MOVABLE = (KEY, BALL, SQUARE)
_DOORS = (DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED)
_STRUCT = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
#: movable object classes (tile, colour), index = 6 * type index + colour
_CLASSES = [(t, c) for t in _MOVABLE for c in range(NUM_COLOURS)]
_DESC_CLASSES = [[i for i, (t, c) in enumerate(_CLASSES) if MATCH[d, t, c]] for d in range(MATCH.shape[0])]
_FIXED, _FREE, _SEL = 0, 1, 2

# the 5x5 view: cell k = 5 * view_row + view_col; the agent is at the bottom centre facing up
_VR, _VC = np.meshgrid(np.arange(VIEW), np.arange(VIEW), indexing="ij")
_FWD = (VIEW - 1 - _VR).reshape(-1)
_LAT = (_VC - VIEW // 2).reshape(-1)
K_FRONT = (VIEW - 2) * VIEW + VIEW // 2
K_AGENT = (VIEW - 1) * VIEW + VIEW // 2
_PAIRS = [(r * VIEW + c, (r + dr) * VIEW + c + dc) for r in range(VIEW) for c in range(VIEW)
          for dr, dc in ((0, 1), (1, 0)) if r + dr < VIEW and c + dc < VIEW]


def _view_cells(r: int, c: int, d: int) -> list[tuple[int, int]]:
    dv, rv = DIR_VEC[d], DIR_VEC[(d + 1) % 4]
    return [(int(r + f * dv[0] + s * rv[0]), int(c + f * dv[1] + s * rv[1])) for f, s in zip(_FWD, _LAT)]


class _Region:
    """What the agent can do once the locked doors in ``mask`` are open (see the module docstring)."""

    def __init__(self, tiles: np.ndarray, colours: np.ndarray, agent: tuple[int, int], carry: np.ndarray,
                 locked: list[tuple[int, int]], mask: int) -> None:
        passable = np.isin(tiles, (FLOOR, KEY, BALL, SQUARE, DOOR_OPEN, DOOR_CLOSED))
        for i, rc in enumerate(locked):
            if mask >> i & 1:
                passable[rc] = True
        passable[agent] = True
        lab, _ = ndimage.label(passable, structure=_STRUCT)
        region = lab == lab[agent]
        self.region = region
        self.is_door = is_door = np.isin(tiles, _DOORS)
        self.kind = np.full(tiles.shape, _FIXED, np.int8)
        self.kind[region & ~is_door] = _FREE
        self.kind[region & is_door] = _SEL
        # fixed contents: the level outside the region (region cells never read from here)
        self.ftile = np.where(region, FLOOR, tiles).astype(np.int64)
        self.fcol = np.where(region, 0, colours).astype(np.int64)
        self.colours = colours
        counts = np.zeros(len(_CLASSES), np.int64)
        rr, cc = np.nonzero(region & np.isin(tiles, _MOVABLE))
        for r, c in zip(rr.tolist(), cc.tolist()):
            counts[_MOVABLE.index(int(tiles[r, c])) * NUM_COLOURS + int(colours[r, c])] += 1
        if int(carry[0]) != FLOOR:
            counts[_MOVABLE.index(int(carry[0])) * NUM_COLOURS + int(carry[1])] += 1
        self.counts = counts
        border = ndimage.binary_dilation(region, structure=_STRUCT) & ~region
        key_colours = {c for (t, c), n in zip(_CLASSES, counts) if t == KEY and n > 0}
        self.openable = [i for i, rc in enumerate(locked)
                         if not mask >> i & 1 and border[rc] and int(colours[rc]) in key_colours]
        self._poses: list[list[tuple[int, int, int]]] | None = None
        self._cache: dict[tuple[int, ...], bool] = {}

    # -- poses and views --------------------------------------------------------------------------------
    def poses(self) -> list[list[tuple[int, int, int]]]:
        """Distinct views over every standable pose: per view cell ``(kind, tile, colour)``."""
        if self._poses is None:
            seen: set[tuple] = set()
            out = []
            rr, cc = np.nonzero(self.region)
            for r, c in zip(rr.tolist(), cc.tolist()):
                for d in range(4):
                    slots = []
                    for k, (vr, vc) in enumerate(_view_cells(r, c, d)):
                        if not (0 <= vr < MAX_H and 0 <= vc < MAX_W):
                            slots.append((_FIXED, WALL, 0))
                        elif k == K_AGENT:  # the agent's cell: floor, or an open door it stands in
                            on_door = self.kind[vr, vc] == _SEL
                            slots.append((_FIXED, DOOR_OPEN if on_door else FLOOR,
                                          int(self.colours[vr, vc]) if on_door else 0))
                        else:
                            kd = int(self.kind[vr, vc])
                            if kd == _FIXED:
                                slots.append((_FIXED, int(self.ftile[vr, vc]), int(self.fcol[vr, vc])))
                            elif kd == _SEL:
                                slots.append((_SEL, -1, int(self.colours[vr, vc])))
                            else:
                                slots.append((_FREE, -1, 0))
                    key = tuple(slots)
                    if key not in seen:
                        seen.add(key)
                        out.append(slots)
            self._poses = out
        return self._poses

    # -- formulas ---------------------------------------------------------------------------------------
    def formula(self, lits: Sequence[int]) -> bool:
        key = tuple(sorted(set(int(x) for x in lits)))
        if key not in self._cache:
            pos = [c - 1 for c in key if c > 0]
            neg = [-c - 1 for c in key if c < 0]
            if set(pos) & set(neg):
                self._cache[key] = False
            elif len(pos) == 1 and not neg:
                self._cache[key] = self._single(pos[0])
            else:
                self._cache[key] = self._conjunction(pos, neg)
        return self._cache[key]

    def _classes(self, d: int, avail: np.ndarray) -> list[int]:
        return [i for i in _DESC_CLASSES[d] if avail[i] > 0]

    def _single(self, p: int) -> bool:
        """One positive literal (the training distribution's edges): a fast, equivalent check."""
        kind, d1, d2 = int(PROP_KIND[p]), int(PROP_D1[p]), int(PROP_D2[p])
        if kind == CARRYING:
            return bool(self._classes(d1, self.counts))
        if kind == FRONT:
            if self._classes(d1, self.counts):
                return True
            # a door of the region (open or closed at will) or a fixed cell next to the region
            for r, c in zip(*np.nonzero(self.kind == _SEL)):
                if MATCH[d1, DOOR_OPEN, self.colours[r, c]] or MATCH[d1, DOOR_CLOSED, self.colours[r, c]]:
                    return True
            border = ndimage.binary_dilation(self.region, structure=_STRUCT) & ~self.region
            for r, c in zip(*np.nonzero(border)):
                if MATCH[d1, self.ftile[r, c], self.fcol[r, c]]:
                    return True
            return False
        # next (d1 is a movable descriptor): (a) two distinct objects of the region put side by side
        a, b = self._classes(d1, self.counts), self._classes(d2, self.counts)
        if a and b and (len(set(a) | set(b)) >= 2 or self.counts[a[0]] >= 2):
            return True
        # (b) an object of the region put next to a door that borders a free cell (a region door in either
        # state, or a locked one); standing behind that cell, facing the door, sees both
        if a:
            free = self.kind == _FREE
            near_free = ndimage.binary_dilation(free, structure=_STRUCT)
            for r, c in zip(*np.nonzero(near_free & self.is_door)):
                states = (DOOR_OPEN, DOOR_CLOSED) if self.kind[r, c] == _SEL else (int(self.ftile[r, c]),)
                if any(MATCH[d2, st, self.colours[r, c]] for st in states):
                    return True
        # (c) two fixed objects side by side (unreachable rooms, locked doors) in view from some pose
        return self._fixed_pair_visible(d1, d2)

    def _fixed_pair_visible(self, d1: int, d2: int) -> bool:
        fixed = self.kind == _FIXED
        m1 = fixed & MATCH[d1][self.ftile, self.fcol]
        m2 = fixed & MATCH[d2][self.ftile, self.fcol]
        if not (m1.any() and m2.any()):
            return False
        pr, pc = np.nonzero(self.region)
        for dr, dc in ((0, 1), (1, 0)):
            a1, b1 = m1[: MAX_H - dr, : MAX_W - dc], m2[dr:, dc:]
            a2, b2 = m2[: MAX_H - dr, : MAX_W - dc], m1[dr:, dc:]
            for r, c in zip(*np.nonzero((a1 & b1) | (a2 & b2))):
                cells = np.array([[r, c], [r + dr, c + dc]])
                for d in range(4):
                    dv, rv = DIR_VEC[d], DIR_VEC[(d + 1) % 4]
                    rel_r = cells[None, :, 0] - pr[:, None]
                    rel_c = cells[None, :, 1] - pc[:, None]
                    f = rel_r * dv[0] + rel_c * dv[1]
                    s = rel_r * rv[0] + rel_c * rv[1]
                    inside = (f >= 0) & (f < VIEW) & (np.abs(s) <= VIEW // 2)
                    if np.any(inside.all(axis=1)):
                        return True
        return False

    def _conjunction(self, pos: list[int], neg: list[int]) -> bool:
        """Exhaustive search over carried object, pose, placements and door states."""
        carry_pos = [p for p in pos if PROP_KIND[p] == CARRYING]
        carry_neg = [p for p in neg if PROP_KIND[p] == CARRYING]
        grid_pos = [p for p in pos if PROP_KIND[p] != CARRYING]
        grid_neg = [p for p in neg if PROP_KIND[p] != CARRYING]
        # the carried object only matters to carrying literals (and is then not on the grid): carry nothing
        # unless a positive carrying literal asks for something
        carries: list[int | None] = [None]
        if carry_pos:
            carries = [i for i, (t, c) in enumerate(_CLASSES) if self.counts[i] > 0
                       and all(MATCH[PROP_D1[p], t, c] for p in carry_pos)
                       and not any(MATCH[PROP_D1[p], t, c] for p in carry_neg)]
        for cls in carries:
            avail = self.counts.copy()
            if cls is not None:
                avail[cls] -= 1
            for slots in self.poses():
                if _search(slots, grid_pos, grid_neg, avail, {}):
                    return True
        return False


def _content(slots: list[tuple[int, int, int]], assign: dict[int, tuple[int, int]], k: int
             ) -> tuple[int, int] | None:
    """(tile, colour) of view cell ``k``; ``None`` for a region door whose state is still open to choice."""
    if k in assign:
        return assign[k]
    kd, t, c = slots[k]
    if kd == _FIXED:
        return t, c
    if kd == _FREE:
        return FLOOR, 0
    return None


def _options(slots: list[tuple[int, int, int]], assign: dict[int, tuple[int, int]], k: int, d: int,
             avail: np.ndarray) -> list[tuple[int, int] | None]:
    """Ways for view cell ``k`` to show an object matching descriptor ``d``: ``None`` = already does."""
    if k in assign:
        t, c = assign[k]
        return [None] if MATCH[d, t, c] else []
    kd, t, c = slots[k]
    if kd == _FIXED:
        return [None] if MATCH[d, t, c] else []
    if kd == _SEL:
        return [(s, c) for s in (DOOR_OPEN, DOOR_CLOSED) if MATCH[d, s, c]]
    return [_CLASSES[i] for i in _DESC_CLASSES[d] if avail[i] > 0]


def _place(slots: list[tuple[int, int, int]], assign: dict[int, tuple[int, int]], avail: np.ndarray,
           k: int, obj: tuple[int, int]) -> np.ndarray:
    assign[k] = obj
    if slots[k][0] == _FREE:
        avail = avail.copy()
        avail[_MOVABLE.index(obj[0]) * NUM_COLOURS + obj[1]] -= 1
    return avail


def _search(slots: list[tuple[int, int, int]], pos: list[int], neg: list[int], avail: np.ndarray,
            assign: dict[int, tuple[int, int]]) -> bool:
    """Satisfy the positive grid literals one by one (backtracking), then check the negative ones."""
    if not pos:
        return _negatives_ok(slots, neg, assign)
    p, rest = pos[0], pos[1:]
    kind, d1, d2 = int(PROP_KIND[p]), int(PROP_D1[p]), int(PROP_D2[p])
    if kind == FRONT:
        for obj in _options(slots, assign, K_FRONT, d1, avail):
            a2 = dict(assign)
            av = avail if obj is None else _place(slots, a2, avail, K_FRONT, obj)
            if _search(slots, rest, neg, av, a2):
                return True
        return False
    for u, v in _PAIRS:
        for x, y in ((u, v), (v, u)):
            for ox in _options(slots, assign, x, d1, avail):
                a1 = dict(assign)
                av1 = avail if ox is None else _place(slots, a1, avail, x, ox)
                for oy in _options(slots, a1, y, d2, av1):
                    a2 = dict(a1)
                    av2 = av1 if oy is None else _place(slots, a2, av1, y, oy)
                    if _search(slots, rest, neg, av2, a2):
                        return True
    return False


def _negatives_ok(slots: list[tuple[int, int, int]], neg: list[int], assign: dict[int, tuple[int, int]]
                  ) -> bool:
    if not neg:
        return True
    free_doors = [k for k, (kd, _, _) in enumerate(slots) if kd == _SEL and k not in assign]
    for states in np.ndindex(*([2] * len(free_doors))):
        a = dict(assign)
        for k, s in zip(free_doors, states):
            a[k] = (DOOR_OPEN if s == 0 else DOOR_CLOSED, slots[k][2])
        if not any(_holds(slots, a, p) for p in neg):
            return True
    return False


def _holds(slots: list[tuple[int, int, int]], assign: dict[int, tuple[int, int]], p: int) -> bool:
    kind, d1, d2 = int(PROP_KIND[p]), int(PROP_D1[p]), int(PROP_D2[p])
    if kind == FRONT:
        t, c = _content(slots, assign, K_FRONT)  # type: ignore[misc]
        return bool(MATCH[d1, t, c])
    for u, v in _PAIRS:
        tu, cu = _content(slots, assign, u)  # type: ignore[misc]
        tv, cv = _content(slots, assign, v)  # type: ignore[misc]
        if (MATCH[d1, tu, cu] and MATCH[d2, tv, cv]) or (MATCH[d2, tu, cu] and MATCH[d1, tv, cv]):
            return True
    return False


def rm_paths(rm: RewardMachine) -> list[list[list[int]]]:
    """The simple paths ``u0 -> uA`` of ``rm``, each as its edges' literal lists (host side)."""
    src, dst, lits = (np.asarray(x) for x in (rm.edge_src, rm.edge_dst, rm.edge_lits))
    init, acc = int(rm.initial), int(rm.accepting)
    out: list[list[list[int]]] = []

    def walk(u: int, visited: set[int], forms: list[list[int]]) -> None:
        if u == acc:
            out.append(list(forms))
            return
        for e in np.flatnonzero((src == u) & (src >= 0)).tolist():
            v = int(dst[e])
            if v not in visited:
                walk(v, visited | {v}, forms + [[int(c) for c in lits[e] if c != 0]])

    walk(init, {init}, [])
    return out


class _Checker:
    def __init__(self, level: Level) -> None:
        self.tiles = np.asarray(level.tiles).astype(np.int64)
        self.colours = np.asarray(level.colours).astype(np.int64)
        self.agent = tuple(int(x) for x in np.asarray(level.agent_pos))
        self.carry = np.asarray(level.carry)
        self.locked = [tuple(int(v) for v in rc) for rc in zip(*np.nonzero(self.tiles == DOOR_LOCKED))]
        self.regions: dict[int, _Region] = {}

    def region(self, mask: int) -> _Region:
        if mask not in self.regions:
            self.regions[mask] = _Region(self.tiles, self.colours, self.agent, self.carry, self.locked, mask)
        return self.regions[mask]

    def path(self, forms: list[list[int]]) -> bool:
        stack, seen = [(0, 0)], set()
        while stack:
            i, mask = stack.pop()
            if i == len(forms):
                return True
            if (i, mask) in seen:
                continue
            seen.add((i, mask))
            reg = self.region(mask)
            if reg.formula(forms[i]):  # firing now dominates opening first: doors can be opened later too
                stack.append((i + 1, mask))
            else:
                stack.extend((i, mask | 1 << d) for d in reg.openable)
        return False


def formula_satisfiable(level: Level, lits: Sequence[int | str], unlocked: Sequence[tuple[int, int]] = ()
                        ) -> bool:
    """Whether one conjunction (signed literal codes or names like ``"!front_ball"``) can hold in ``level``
    with the locked doors at ``unlocked`` opened (host side; the building block of :func:`is_solvable`)."""
    from .reward_machines import literal

    ch = _Checker(level)
    mask = 0
    for rc in unlocked:
        if tuple(rc) not in ch.locked:
            raise ValueError(f"{tuple(rc)} is not a locked door of the level (locked: {ch.locked})")
        mask |= 1 << ch.locked.index(tuple(rc))
    codes = [literal(x) if isinstance(x, str) else int(x) for x in lits]
    return ch.region(mask).formula(codes)


def is_solvable(level: Level, rm: RewardMachine) -> bool:
    """Whether ``rm`` can be driven into ``uA`` in ``level`` (see the module docstring for exactness)."""
    ch = _Checker(level)
    return any(ch.path(forms) for forms in rm_paths(rm))


def solvable_batch(problems: Problem) -> np.ndarray:
    """``bool[B]``: :func:`is_solvable` of each problem of a batched :class:`Problem` (host side)."""
    host = jax.device_get(problems)
    n = int(np.asarray(host.rm.n_states).shape[0])
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        lvl = jax.tree_util.tree_map(lambda a, i=i: a[i], host.level)
        rm = jax.tree_util.tree_map(lambda a, i=i: a[i], host.rm)
        out[i] = is_solvable(lvl, rm)
    return out
