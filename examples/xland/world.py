"""XLand-style worlds on a grid: topology, floor colours, objects and players; generation and mutation.

A grid version of the worlds of *Open-Ended Learning Leads to Generally Capable Agents* (XLand, Sections 2.1
and 3.1, Appendix A.1):

* **Topology**: an ``N x N`` grid (``N`` in 7..11 from the generator; 3..11 accepted) of integer heights
  ``0..MAX_HEIGHT-1``. A player may step onto a neighbouring tile that is not higher (it can drop down any
  distance) and may climb exactly one level only from a **ramp** tile whose direction points at the
  higher tile. This is the paper's world topology graph (Definition 3.1) on a grid.
* **Floor colours**: every tile has one of 6 colours (contiguous regions), the floors of ``on(x, floor)``.
* **Objects**: at most one of each of 12 kinds - 3 colours x {cube, sphere, pyramid} (codes 0..8, used by
  predicates) and 3 distractor slabs (codes 9..11, never in predicates).
* **Players**: 1 to 3, each with a position, a facing direction (0 north, 1 east, 2 south, 3 west) and a
  gadget (0 freeze, 1 tag).

The **playable area** is the largest *closed* strongly connected set of tiles (a sink component of the
topology graph): every tile in it can reach every other, and no move leads out of it, so there are no
irreversible decisions (A.1.2). :func:`generate_world` only returns worlds whose playable area covers at
least ``min_area`` of the grid and places every entity in it. :func:`mutate_world` makes one local edit
(tile height, ramp, floor colour, an entity move, or a categorical resample) and keeps the same guarantee;
:func:`condition_world` makes every player, object and floor colour a game mentions present and reachable
(the paper's game-conditioned worlds, A.1.1).

>>> w = generate_world(np.random.default_rng(0), size=9)
>>> w.size, bool(w.playable_area.mean() >= 0.5), World.decode(w.encode()) == w
(9, True, True)
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from .game import FLOOR_COLOURS, Game

logger = logging.getLogger(__name__)

__all__ = [
    "DIRECTIONS",
    "FREEZE",
    "MAX_HEIGHT",
    "MAX_PLAYERS",
    "MAX_SIZE",
    "NUM_OBJECT_KINDS",
    "TAG",
    "World",
    "can_move",
    "condition_world",
    "generate_world",
    "mutate_world",
    "path_entropy",
    "path_length_distribution",
]

MIN_SIZE, MAX_SIZE = 3, 11
MAX_HEIGHT = 4
MAX_PLAYERS = 3
NUM_OBJECT_KINDS = 12  # 0..8 predicate objects (colour * 3 + shape), 9..11 slabs (one per colour)
NUM_FLOORS = len(FLOOR_COLOURS)
FREEZE, TAG = 0, 1
#: Row/column step of each facing direction: north, east, south, west.
DIRECTIONS = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int64)


def _int(x: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not lo <= x <= hi:
        raise ValueError(f"{what} must be an int in [{lo}, {hi}], got {x!r}")
    return int(x)


@dataclass(frozen=True)
class World:
    """An immutable world (see the module docstring); tile fields are row-major tuples of ``size**2`` ints.

    Args:
        size: Grid width and height.
        heights: Tile heights in ``0..MAX_HEIGHT-1``.
        ramps: ``-1`` for a flat tile, else the direction (0..3) the ramp climbs toward.
        floors: Floor colour index (0..5) of every tile.
        objects: ``(kind, row, col)`` per object; kinds are distinct.
        players: ``(row, col, direction, gadget)`` per player; positions are distinct.
    """

    size: int
    heights: tuple[int, ...]
    ramps: tuple[int, ...]
    floors: tuple[int, ...]
    objects: tuple[tuple[int, int, int], ...] = ()
    players: tuple[tuple[int, int, int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        n = _int(self.size, "World size", MIN_SIZE, MAX_SIZE)
        for name, lo, hi in (("heights", 0, MAX_HEIGHT - 1), ("ramps", -1, 3), ("floors", 0, NUM_FLOORS - 1)):
            vals = tuple(getattr(self, name))
            if len(vals) != n * n:
                raise ValueError(f"World {name} must have size**2 = {n * n} entries, got {len(vals)}")
            object.__setattr__(self, name, tuple(_int(v, f"World {name} entry", lo, hi) for v in vals))
        objs = tuple(
            (_int(k, "object kind", 0, NUM_OBJECT_KINDS - 1), _int(r, "object row", 0, n - 1),
             _int(c, "object col", 0, n - 1)) for k, r, c in self.objects
        )
        if len({o[0] for o in objs}) != len(objs):
            raise ValueError(f"World objects must have distinct kinds, got {[o[0] for o in objs]}")
        players = tuple(
            (_int(r, "player row", 0, n - 1), _int(c, "player col", 0, n - 1),
             _int(d, "player direction", 0, 3), _int(g, "player gadget", 0, 1)) for r, c, d, g in self.players
        )
        if not 1 <= len(players) <= MAX_PLAYERS:
            raise ValueError(f"a World has 1 to {MAX_PLAYERS} players, got {len(players)}")
        if len({p[:2] for p in players}) != len(players):
            raise ValueError(f"World players must stand on distinct tiles, got {[p[:2] for p in players]}")
        object.__setattr__(self, "objects", objs)
        object.__setattr__(self, "players", players)

    # -- arrays -----------------------------------------------------------------------------------------
    @cached_property
    def height_map(self) -> np.ndarray:
        """``(size, size)`` int array of heights (read-only)."""
        return _frozen(np.array(self.heights, dtype=np.int64).reshape(self.size, self.size))

    @cached_property
    def ramp_map(self) -> np.ndarray:
        """``(size, size)`` int array: ramp direction or -1 (read-only)."""
        return _frozen(np.array(self.ramps, dtype=np.int64).reshape(self.size, self.size))

    @cached_property
    def floor_map(self) -> np.ndarray:
        """``(size, size)`` int array of floor colours (read-only)."""
        return _frozen(np.array(self.floors, dtype=np.int64).reshape(self.size, self.size))

    @cached_property
    def playable_area(self) -> np.ndarray:
        """Boolean ``(size, size)`` mask of the largest closed strongly connected set of tiles."""
        return _frozen(_playable_area(self.height_map, self.ramp_map))

    @property
    def n_players(self) -> int:
        return len(self.players)

    def entities_reachable(self) -> bool:
        """Whether every player and object stands in the playable area."""
        area = self.playable_area
        return all(area[r, c] for _, r, c in self.objects) and all(area[r, c] for r, c, _, _ in self.players)

    # -- wire form --------------------------------------------------------------------------------------
    def encode(self) -> tuple:
        """A msgpack-safe nested tuple of ints."""
        return (self.size, self.heights, self.ramps, self.floors, self.objects, self.players)

    @classmethod
    def decode(cls, encoded: Any) -> World:
        """Inverse of :meth:`encode`; ``ValueError`` for a malformed world."""
        try:
            size, heights, ramps, floors, objects, players = encoded
            return cls(int(size), tuple(heights), tuple(ramps), tuple(floors),
                       tuple(tuple(o) for o in objects), tuple(tuple(p) for p in players))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed encoded world: {exc}") from None

    def render(self) -> str:
        """Text picture: heights as digits, players as ``A``/``B``/``C``, objects as ``o``."""
        rows = [[str(h) for h in row] for row in self.height_map]
        for _, r, c in self.objects:
            rows[r][c] = "o"
        for i, (r, c, _, _) in enumerate(self.players):
            rows[r][c] = "ABC"[i]
        return "\n".join("".join(r) for r in rows)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def flat_world(size: int, players: Sequence[tuple[int, int, int, int]], objects: Sequence = (),
               floor: int = 0) -> World:
    """A flat single-colour world (handy for tests and as the generator's fallback)."""
    n = size * size
    return World(size, (0,) * n, (-1,) * n, (floor,) * n, tuple(objects), tuple(players))


# -- topology graph -----------------------------------------------------------------------------------
def can_move(heights: np.ndarray, ramps: np.ndarray, r: int, c: int, d: int) -> bool:
    """Whether a player on ``(r, c)`` can step in direction ``d``: the target is inside the grid and not
    higher, or exactly one level higher with ``(r, c)`` a ramp climbing in direction ``d``."""
    n = heights.shape[0]
    nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
    if not (0 <= nr < n and 0 <= nc < n):
        return False
    h0, h1 = heights[r, c], heights[nr, nc]
    return bool(h1 <= h0 or (h1 == h0 + 1 and ramps[r, c] == d))


def _successors(heights: np.ndarray, ramps: np.ndarray) -> list[list[int]]:
    n = heights.shape[0]
    succ: list[list[int]] = [[] for _ in range(n * n)]
    for r in range(n):
        for c in range(n):
            for d in range(4):
                if can_move(heights, ramps, r, c, d):
                    succ[r * n + c].append((r + DIRECTIONS[d, 0]) * n + c + DIRECTIONS[d, 1])
    return succ


def _sccs(succ: list[list[int]]) -> list[list[int]]:
    """Strongly connected components (iterative Tarjan)."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            recurse = False
            for j in range(i, len(succ[v])):
                w = succ[v][j]
                if index[w] == -1:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return out


def _playable_area(heights: np.ndarray, ramps: np.ndarray) -> np.ndarray:
    n = heights.shape[0]
    succ = _successors(heights, ramps)
    best: list[int] = []
    for comp in _sccs(succ):
        members = set(comp)
        if all(w in members for v in comp for w in succ[v]) and len(comp) > len(best):
            best = comp
    mask = np.zeros(n * n, dtype=bool)
    mask[best] = True
    return mask.reshape(n, n)


def shortest_paths(world: World, start: tuple[int, int]) -> np.ndarray:
    """BFS step counts from ``start`` over the topology graph (``-1`` where unreachable)."""
    n = world.size
    h, rp = world.height_map, world.ramp_map
    dist = np.full((n, n), -1, dtype=np.int64)
    dist[start] = 0
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for d in range(4):
            if can_move(h, rp, r, c, d):
                nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
                if dist[nr, nc] < 0:
                    dist[nr, nc] = dist[r, c] + 1
                    queue.append((nr, nc))
    return dist


def path_length_distribution(world: World) -> np.ndarray:
    """``counts[d]``: ordered pairs of distinct playable tiles whose shortest path has ``d`` steps (the
    paper's shortest-paths distribution, Definition 3.2, over the playable area)."""
    cells = [(int(r), int(c)) for r, c in zip(*np.nonzero(world.playable_area))]
    area = world.playable_area
    counts = np.zeros(world.size * world.size, dtype=np.int64)
    for cell in cells:
        d = shortest_paths(world, cell)
        counts += np.bincount(d[area & (d > 0)], minlength=counts.size)[: counts.size]
    return np.trim_zeros(counts, "b")


def path_entropy(world: World) -> float:
    """Renyi quadratic entropy ``H_2 = -log sum_d p_d**2`` of the shortest-path length distribution (the
    paper's "shortest paths entropy" world feature, A.1.3 and Fig. 16)."""
    counts = path_length_distribution(world)
    total = counts.sum()
    if total == 0:
        return 0.0
    p = counts / total
    return float(-np.log(np.sum(p * p)))


# -- generation ---------------------------------------------------------------------------------------
def _random_topology(rng: np.random.Generator, n: int, max_height: int, ramp_prob: float) -> tuple:
    heights = np.zeros((n, n), dtype=np.int64)
    for _ in range(int(rng.integers(n // 2, n + 1))):
        h, w = (int(x) for x in rng.integers(2, max(3, n // 2 + 1), size=2))
        r, c = int(rng.integers(0, n - h + 1)), int(rng.integers(0, n - w + 1))
        block = heights[r : r + h, c : c + w]
        heights[r : r + h, c : c + w] = np.minimum(block + 1, max_height - 1)
    ramps = np.full((n, n), -1, dtype=np.int64)
    for r in range(n):
        for c in range(n):
            ups = [d for d in range(4) if _in(n, r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1])
                   and heights[r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]] == heights[r, c] + 1]
            if ups and rng.random() < ramp_prob:
                ramps[r, c] = ups[int(rng.integers(len(ups)))]
    return heights, ramps


def _in(n: int, r: int, c: int) -> bool:
    return 0 <= r < n and 0 <= c < n


def _random_floors(rng: np.random.Generator, n: int, area: np.ndarray) -> np.ndarray:
    k = int(rng.integers(2, NUM_FLOORS + 1))
    colours = rng.choice(NUM_FLOORS, size=k, replace=False)
    cells = np.flatnonzero(area.ravel()) if area.any() else np.arange(n * n)
    seeds = rng.choice(cells, size=min(k, len(cells)), replace=False)
    rr, cc = np.divmod(np.arange(n * n), n)
    sr, sc = np.divmod(seeds, n)
    dist = np.abs(rr[:, None] - sr[None, :]) + np.abs(cc[:, None] - sc[None, :])
    return colours[: len(seeds)][np.argmin(dist, axis=1)].reshape(n, n)


def _free_cells(area: np.ndarray, taken: set[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(int(r), int(c)) for r, c in zip(*np.nonzero(area)) if (int(r), int(c)) not in taken]


def generate_world(
    rng: np.random.Generator,
    size: int | None = None,
    *,
    n_players: int = 2,
    objects: Sequence[int] | None = None,
    min_area: float = 0.5,
    max_height: int = MAX_HEIGHT,
    ramp_prob: float = 0.2,
    max_tries: int = 50,
) -> World:
    """A random world whose playable area covers at least ``min_area`` of the grid.

    Heights come from stacked random rectangles, ramps are placed with probability ``ramp_prob`` on tiles
    next to a tile one level higher, floor colours are 2-6 Voronoi regions, and players and objects stand
    on distinct playable tiles where there is room. ``objects`` lists the object kinds (default: a random
    subset of 4-12 of the 12 kinds). After ``max_tries`` failed topologies the world is flat.

    Args:
        rng: Random generator.
        size: Grid size (default uniform in 7..11).
        n_players: Number of players (1-3).
        objects: Object kinds to place.
        min_area: Smallest playable fraction of the grid.
        max_height: Number of height levels.
        ramp_prob: Probability of a ramp where one can be placed.
        max_tries: Topologies to try before falling back to a flat world.
    """
    n = int(rng.integers(7, 12)) if size is None else _int(size, "size", MIN_SIZE, MAX_SIZE)
    _int(n_players, "n_players", 1, MAX_PLAYERS)
    _int(max_height, "max_height", 1, MAX_HEIGHT)
    if not 0.0 < float(min_area) <= 1.0:
        raise ValueError(f"min_area must be in (0, 1], got {min_area!r}")
    if not 0.0 <= float(ramp_prob) <= 1.0:
        raise ValueError(f"ramp_prob must be in [0, 1], got {ramp_prob!r}")
    for _ in range(max_tries):
        heights, ramps = _random_topology(rng, n, max_height, ramp_prob)
        area = _playable_area(heights, ramps)
        if area.mean() >= min_area:
            break
    else:
        logger.info("generate_world: no topology with playable area >= %g in %d tries; using a flat world",
                    min_area, max_tries)
        heights, ramps = np.zeros((n, n), np.int64), np.full((n, n), -1, np.int64)
        area = np.ones((n, n), dtype=bool)
    floors = _random_floors(rng, n, area)
    if objects is None:
        k = int(rng.integers(4, NUM_OBJECT_KINDS + 1))
        objects = [int(x) for x in rng.choice(NUM_OBJECT_KINDS, size=k, replace=False)]
    kinds = [_int(k, "object kind", 0, NUM_OBJECT_KINDS - 1) for k in objects]
    cells = _free_cells(area, set())
    order = rng.permutation(len(cells))
    pcells = [cells[i] for i in order[:n_players]]
    players = tuple((r, c, int(rng.integers(4)), int(rng.integers(2))) for r, c in pcells)
    ocells = [cells[i] for i in order[n_players:]] or cells
    objs = []
    for i, kind in enumerate(kinds):
        r, c = ocells[i] if i < len(ocells) else cells[int(rng.integers(len(cells)))]
        objs.append((kind, r, c))
    return World(n, tuple(heights.ravel().tolist()), tuple(ramps.ravel().tolist()),
                 tuple(floors.ravel().tolist()), tuple(objs), players)


# -- conditioning on a game ---------------------------------------------------------------------------
def condition_world(world: World, game: Game, rng: np.random.Generator) -> World:
    """A world in which ``game`` is playable: one player per goal, every object the game mentions present,
    every floor colour it mentions present in the playable area, and every entity in the playable area.

    Entities are added or moved onto random free playable tiles; a missing floor colour is painted on a
    small patch of playable tiles (avoiding the last tiles of a colour the game needs).
    """
    if not isinstance(game, Game):
        raise TypeError(f"game must be a Game, got {type(game).__name__}")
    area = world.playable_area
    if not area.any():
        raise ValueError("world has no playable area")
    cells = _free_cells(area, set())
    players = [p for p in world.players if area[p[0], p[1]]][: game.n_players]
    players_out = []
    taken: set[tuple[int, int]] = set()
    for p in players:
        players_out.append(p)
        taken.add(p[:2])
    while len(players_out) < game.n_players:
        free = _free_cells(area, taken)
        if not free:
            raise ValueError(f"world too small for {game.n_players} players")
        r, c = free[int(rng.integers(len(free)))]
        players_out.append((r, c, int(rng.integers(4)), int(rng.integers(2))))
        taken.add((r, c))
    objs = {k: (k, r, c) for k, r, c in world.objects}
    for k, (_, r, c) in list(objs.items()):
        if not area[r, c]:
            r2, c2 = cells[int(rng.integers(len(cells)))]
            objs[k] = (k, r2, c2)
    for k in game.objects:
        if k not in objs:
            free = _free_cells(area, taken | {(r, c) for _, r, c in objs.values()}) or cells
            r, c = free[int(rng.integers(len(free)))]
            objs[k] = (k, r, c)
    floors = world.floor_map.copy()
    needed = set(game.floors)
    for f in sorted(needed):
        if (floors[area] == f).any():
            continue
        counts = {g: int((floors[area] == g).sum()) for g in range(NUM_FLOORS)}
        candidates = [(r, c) for r, c in cells if floors[r, c] not in needed or counts[floors[r, c]] > 3]
        r, c = candidates[int(rng.integers(len(candidates)))] if candidates else cells[0]
        floors[r, c] = f
        for d in range(4):
            nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
            if _in(world.size, nr, nc) and area[nr, nc] and (
                floors[nr, nc] not in needed or (floors[area] == floors[nr, nc]).sum() > 3
            ) and rng.random() < 0.5:
                floors[nr, nc] = f
    return replace(world, floors=tuple(floors.ravel().tolist()), objects=tuple(sorted(objs.values())),
                   players=tuple(players_out))


# -- mutation -----------------------------------------------------------------------------------------
MUTATIONS = ("height", "ramp", "floor", "move_object", "move_player", "categorical")


def mutate_world(
    world: World, rng: np.random.Generator, *, min_area: float = 0.5, max_tries: int = 20
) -> World:
    """One local edit, drawn uniformly from :data:`MUTATIONS`, that keeps the world valid: the playable
    area covers at least ``min_area`` of the grid and contains every entity.

    Tile edits change one tile's height by one level, set or clear one ramp, or recolour one tile to a
    neighbour's colour; entity moves put one object or player on a neighbouring playable tile; the
    categorical edit resamples one player's gadget or facing. A tile edit that would break the world is
    redrawn; after ``max_tries`` failures the world gets an entity move instead.
    """
    for _ in range(max_tries):
        kind = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
        new = _mutate_once(world, rng, kind)
        if new is None:
            continue
        if kind in ("height", "ramp"):
            area = new.playable_area
            if area.mean() < min_area or not new.entities_reachable():
                continue
        return new
    for _ in range(max_tries):
        new = _move_entity(world, rng, "players")
        if new is not None:
            return new
    logger.debug("mutate_world: no valid edit found; returning the world unchanged")
    return world


def _mutate_once(world: World, rng: np.random.Generator, kind: str) -> World | None:
    n = world.size
    r, c = (int(x) for x in rng.integers(0, n, size=2))
    i = r * n + c
    if kind == "height":
        h = list(world.heights)
        h[i] = int(np.clip(h[i] + (1 if rng.random() < 0.5 else -1), 0, MAX_HEIGHT - 1))
        return None if h[i] == world.heights[i] else replace(world, heights=tuple(h))
    if kind == "ramp":
        rp = list(world.ramps)
        rp[i] = int(rng.integers(-1, 4))
        return None if rp[i] == world.ramps[i] else replace(world, ramps=tuple(rp))
    if kind == "floor":
        d = int(rng.integers(4))
        nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
        colour = world.floors[nr * n + nc] if _in(n, nr, nc) else int(rng.integers(NUM_FLOORS))
        if colour == world.floors[i]:
            return None
        fl = list(world.floors)
        fl[i] = int(colour)
        return replace(world, floors=tuple(fl))
    if kind == "move_object":
        return _move_entity(world, rng, "objects")
    if kind == "move_player":
        return _move_entity(world, rng, "players")
    p = list(world.players)
    j = int(rng.integers(len(p)))
    pr, pc, d, g = p[j]
    p[j] = (pr, pc, d, 1 - g) if rng.random() < 0.5 else (pr, pc, int((d + rng.integers(1, 4)) % 4), g)
    return replace(world, players=tuple(p))


def _move_entity(world: World, rng: np.random.Generator, which: str) -> World | None:
    items = list(getattr(world, which))
    if not items:
        return None
    j = int(rng.integers(len(items)))
    area = world.playable_area
    if which == "objects":
        k, r, c = items[j]
    else:
        r, c = items[j][:2]
    d = int(rng.integers(4))
    nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
    if not _in(world.size, nr, nc) or not area[nr, nc]:
        return None
    if which == "objects":
        items[j] = (k, int(nr), int(nc))
    else:
        if any(p[:2] == (nr, nc) for p in items):
            return None
        items[j] = (int(nr), int(nc), *items[j][2:])
    return replace(world, **{which: tuple(items)})
