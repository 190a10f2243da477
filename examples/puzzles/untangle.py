"""Untangle from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: ``N`` points joined by straight edges form a planar graph drawn with crossings. Moving the points,
make a drawing in which no two edges cross. Here points live on a ``G x G`` integer lattice,
``G = 2 * ceil(sqrt(N)) + 1`` (the collection uses continuous positions), and a drawing counts as untangled
only if no two edges meet except at a shared endpoint and no edge passes through a point: touching and
collinear overlaps count as crossings. ``info["state"]["crossings"]`` counts the offending pairs of edges
plus the edges that pass through a point.

Generation (ours; the collection's generator is not reproduced): ``N`` distinct random lattice points, then
a greedy triangulation — all pairs of points by increasing length (ties in random order), each edge kept
if it crosses no kept edge and passes through no point. That drawing is the hidden solution. The points are
then moved to random distinct lattice positions until at least one crossing appears. Any placement of
labelled points is reachable by unit moves on a grid with at least two free cells, so every instance is
solvable.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): the number of points, e.g. ``"25"``;
easiest setting ``"4"``, human-easy preset ``"6"`` (Table 7). The "board" of an instance is ``N x 1``: the
``valid`` mask has shape ``(1, max_points)`` and marks the points in play.

Actions (unit moves, not the collection's cursor): ``Discrete(4 * max_points)``; action ``4 * i + d`` moves
point ``i`` one lattice step up, down, left or right (``d`` = 0..3). The mask marks the moves that stay on
the lattice and onto a free cell.

Observation: ``points`` (``(max_points, 2)`` lattice ``(x, y)``, -1 for absent points), ``edges``
(``(max_points, max_points)`` adjacency), ``crossed`` (1 on points with an edge in a crossing), ``valid``.

>>> env = UntangleEnv("6#1")
>>> obs, info = env.reset()
>>> int(obs["valid"].sum()), info["state"]["crossings"] > 0
(6, True)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, check_ints, check_range

logger = logging.getLogger(__name__)

__all__ = ["UntangleParams", "UntangleEnv", "lattice_size", "bad_pairs"]

_STEPS = np.array([(0, -1), (0, 1), (-1, 0), (1, 0)])     # (dx, dy): up, down, left, right


def lattice_size(n: int) -> int:
    """Side ``G`` of the lattice for ``n`` points.

    >>> lattice_size(4), lattice_size(6), lattice_size(25)
    (5, 7, 11)
    """
    return 2 * math.ceil(math.sqrt(n)) + 1


@dataclass(frozen=True)
class UntangleParams(PuzzleParams):
    """Untangle parameters: the number of points (4 or more).

    >>> UntangleParams.parse("6"), UntangleParams(9).format()
    (UntangleParams(n=6), '9')
    """

    n: int

    puzzle: ClassVar[str] = "untangle"

    def __post_init__(self) -> None:
        check_range("Untangle", "number of points", self.n, 4)

    @property
    def size(self) -> tuple[int, int]:
        return self.n, 1

    @classmethod
    def parse(cls, text: str) -> UntangleParams:
        if not text.isdigit():
            raise ValueError(f"bad Untangle parameters {text!r}: expected the number of points, e.g. '6'")
        return cls(int(text))

    def format(self) -> str:
        return str(self.n)

    def to_ints(self) -> tuple[int, ...]:
        return (self.n,)

    @classmethod
    def from_ints(cls, values: Any) -> UntangleParams:
        return cls(*check_ints(values, 1, "Untangle"))


def _geometry(pos: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(O, S)``, both ``(E, N)``: the orientation (-1, 0, 1) of each point relative to each edge, and
    whether the point lies on the edge without being one of its endpoints."""
    a, b = pos[edges[:, 0]][:, None, :], pos[edges[:, 1]][:, None, :]
    x = pos[None, :, :]
    ab, ax = b - a, x - a
    orient = np.sign(ab[..., 0] * ax[..., 1] - ab[..., 1] * ax[..., 0])
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    inside = ((lo <= x) & (x <= hi)).all(-1)
    n = len(pos)
    endpoint = np.zeros((len(edges), n), bool)
    rows = np.arange(len(edges))
    endpoint[rows, edges[:, 0]] = True
    endpoint[rows, edges[:, 1]] = True
    return orient, (orient == 0) & inside & ~endpoint


def _bad(pos: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bad pairs (E, E), edges through a point (E,))``."""
    orient, on = _geometry(pos, edges)
    e0, e1 = edges[:, 0], edges[:, 1]
    side = orient[:, e0] * orient[:, e1]             # [i, j]: signs of edge j's endpoints w.r.t. edge i
    touch = on[:, e0] | on[:, e1]                    # [i, j]: an endpoint of j lies inside edge i
    bad = ((side < 0) & (side.T < 0)) | touch | touch.T
    np.fill_diagonal(bad, False)
    return bad, on.any(axis=1)


def bad_pairs(pos: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bool ``(E, E)``: edges ``i`` and ``j`` cross, touch or overlap (beyond a shared endpoint).

    >>> pos = np.array([[0, 0], [2, 2], [0, 2], [2, 0]])
    >>> bad_pairs(pos, np.array([[0, 1], [2, 3]])).astype(int).tolist()
    [[0, 1], [1, 0]]
    >>> bad_pairs(np.array([[0, 0], [1, 0], [2, 0]]), np.array([[0, 2], [1, 2]])).any()   # overlap
    np.True_
    """
    return _bad(pos, edges)[0]


def _greedy_triangulation(pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = len(pos)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    length = np.array([np.sum((pos[i] - pos[j]) ** 2) for i, j in pairs])
    order = np.lexsort((rng.random(len(pairs)), length))
    kept: list[tuple[int, int]] = []
    for k in order:
        bad, through = _bad(pos, np.array(kept + [pairs[int(k)]]))
        if through[-1] or bad[-1].any():
            continue
        kept.append(pairs[int(k)])
    return np.array(kept, dtype=np.int64)


class UntangleEnv(PuzzleEnv):
    """Untangle (see the module docstring).

    Args:
        max_points: Largest number of points (fixes the spaces); overrides ``max_size``.
        **kwargs: see :class:`~magister.examples.puzzles.base.PuzzleEnv`.
    """

    params_cls = UntangleParams
    default_params = "6"
    default_max_size = (12, 1)

    def __init__(self, params: str | PuzzleParams | None = None, *, max_points: int | None = None,
                 **kwargs: Any) -> None:
        if max_points is not None:
            check_range("UntangleEnv", "max_points", max_points, 4)
            kwargs["max_size"] = (int(max_points), 1)
        size = kwargs.get("max_size")
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            kwargs["max_size"] = (int(size), 1)
        elif size is not None and (not isinstance(size, (tuple, list)) or len(size) != 2 or size[1] != 1):
            raise ValueError(f"UntangleEnv's max_size must be max_points or (max_points, 1), got {size!r}")
        super().__init__(params, **kwargs)
        self.max_points = self.max_w

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        m = self.max_w
        g = lattice_size(m)
        return {
            "points": spaces.Box(-1, g - 1, (m, 2), np.int16),
            "edges": spaces.Box(0, 1, (m, m), np.int8),
            "crossed": spaces.Box(0, 1, (m,), np.int8),
        }

    def _num_actions(self) -> int:
        return 4 * self.max_w

    def _default_max_steps(self, params: PuzzleParams) -> int:
        assert isinstance(params, UntangleParams)
        return 50 * params.n

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, UntangleParams)
        n = self.n = params.n
        g = self.g = lattice_size(n)
        cells = rng.choice(g * g, size=n, replace=False)
        self.solution = np.stack([cells % g, cells // g], axis=1).astype(np.int64)
        self.edges = _greedy_triangulation(self.solution, rng)
        m = self.max_w
        self._adjacency = np.zeros((m, m), np.int8)
        self._adjacency[self.edges[:, 0], self.edges[:, 1]] = 1
        self._adjacency[self.edges[:, 1], self.edges[:, 0]] = 1
        while True:
            cells = rng.choice(g * g, size=n, replace=False)
            self.pos = np.stack([cells % g, cells // g], axis=1).astype(np.int64)
            self._refresh()
            if self.crossings > 0:
                break

    def _refresh(self) -> None:
        bad, through = _bad(self.pos, self.edges)
        bad_edge = bad.any(axis=1) | through
        self.crossings = int(bad.sum() // 2 + through.sum())
        crossed = np.zeros(self.n, bool)
        crossed[self.edges[bad_edge].ravel()] = True
        self.crossed = crossed
        occupied = np.zeros((self.g + 2, self.g + 2), bool)      # padded by one: outside counts as taken
        occupied[0, :] = occupied[-1, :] = occupied[:, 0] = occupied[:, -1] = True
        occupied[self.pos[:, 1] + 1, self.pos[:, 0] + 1] = True
        target = self.pos[:, None, :] + _STEPS[None] + 1           # (n, 4, 2) padded coordinates
        self._moves = ~occupied[target[..., 1], target[..., 0]]

    def _apply(self, action: int) -> None:
        i, d = divmod(action, 4)
        self.pos[i] += _STEPS[d]
        self._refresh()

    def _mask(self) -> np.ndarray:
        m = np.zeros((self.max_w, 4), bool)
        m[:self.n] = self._moves
        return m.reshape(-1)

    def _legal(self, action: int) -> bool:
        i, d = divmod(action, 4)
        return i < self.n and bool(self._moves[i, d])

    def _observe(self) -> dict[str, np.ndarray]:
        m = self.max_w
        points = np.full((m, 2), -1, np.int16)
        points[:self.n] = self.pos
        adj = self._adjacency.copy()
        crossed = np.zeros(m, np.int8)
        crossed[:self.n] = self.crossed
        return {"points": points, "edges": adj, "crossed": crossed}

    def _solved(self) -> bool:
        return self.crossings == 0

    def _state(self) -> dict[str, Any]:
        return {"points": self.pos.copy(), "edges": self.edges.copy(), "crossings": self.crossings}

    def _state_key(self) -> bytes:
        return self.pos.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        img = np.zeros((1, self.n, 3), np.uint8)
        img[0] = np.where(self.crossed[:, None], [230, 60, 60], [60, 200, 90])
        return img

    def _rgb_shape(self) -> tuple[int, int, int]:
        side = lattice_size(self.max_w) * self.cell_px
        return (side, side, 3)

    def _rgb(self) -> np.ndarray:
        """The drawing on the lattice of the largest instance (edges red when crossed, points white)."""
        px = self.cell_px
        side = lattice_size(self.max_w) * px
        img = np.zeros((side, side, 3), np.uint8)
        pairs, through = _bad(self.pos, self.edges)
        bad = pairs.any(axis=1) | through
        centre = self.pos * px + px // 2
        for (i, j), crossed in zip(self.edges, bad):
            t = np.linspace(0.0, 1.0, 4 * side)[:, None]
            line = np.rint(centre[i] * (1 - t) + centre[j] * t).astype(int)
            img[line[:, 1], line[:, 0]] = (230, 60, 60) if crossed else (60, 200, 90)
        for x, y in self.pos:
            img[y * px:(y + 1) * px, x * px:(x + 1) * px] = 255
        return img
