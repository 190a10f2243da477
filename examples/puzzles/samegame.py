"""Same Game from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: a ``W x H`` grid full of cells of ``C`` colours. A move removes an orthogonally connected group of at
least two same-coloured cells; the cells above fall down into the gaps and a column left empty is closed up
by sliding the columns right of it to the left. Removing ``n`` cells scores ``(n - 1)^2`` (scoring system
``s1``) or ``(n - 2)^2`` (``s2``) — the score is reported in ``info`` but does not enter the reward. The
puzzle is solved when the grid is empty and lost (irreversibly, reward -1) when cells remain but no group
of two or more does.

Generation (ensured solubility, the collection's default; ours, not its generator): the board is built
*backwards* from the empty grid by inserting small groups — a vertical run of 2–3 cells inside a column or
as a new column, or a horizontal pair at one height in two neighbouring columns — each coloured differently
from every cell it touches. Removing the groups in reverse order of insertion undoes each insertion
exactly, so every generated board can be cleared. The ``r`` flag (as in the collection) draws an unchecked
uniformly random board instead.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH``, ``c<colours>``, ``s<scoring>``,
optional ``r``, e.g. ``"5x5c3s2"``; easiest setting ``"2x3c3s2"``, human-easy preset ``"5x5c3s2"``
(Table 7).

Actions (direct clicks, not the collection's cursor): ``Discrete(max_w * max_h)``; action
``r * max_w + c`` removes the group at (row ``r`` from the top, column ``c``). The mask marks the cells
that belong to a group of two or more.

Observation: ``board`` (0 empty or outside, ``1..C`` colours), ``valid``.

>>> env = SameGameEnv("2x3c3s2#0")
>>> obs, info = env.reset()
>>> int((obs["board"] > 0).sum())
6
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PALETTE, PuzzleEnv, PuzzleParams, check_ints, check_range, parse_size, take_int

logger = logging.getLogger(__name__)

__all__ = ["SameGameParams", "SameGameEnv", "group_at", "remove_group", "groups_mask"]

MAX_COLOURS = 10


@dataclass(frozen=True)
class SameGameParams(PuzzleParams):
    """Same Game parameters: size, colours, scoring system (1 or 2), ensured solubility.

    >>> SameGameParams.parse("5x5c3s2"), SameGameParams.parse("4x3c2s1r").format()
    (SameGameParams(w=5, h=5, colours=3, scoring=2, soluble=True), '4x3c2s1r')
    """

    w: int
    h: int
    colours: int = 3
    scoring: int = 2
    soluble: bool = True

    puzzle: ClassVar[str] = "samegame"

    def __post_init__(self) -> None:
        check_range("Same Game", "width", self.w, 2)
        check_range("Same Game", "height", self.h, 2)
        check_range("Same Game", "colours", self.colours, 2, MAX_COLOURS)
        check_range("Same Game", "scoring system", self.scoring, 1, 2)

    @classmethod
    def parse(cls, text: str) -> SameGameParams:
        w, h, rest = parse_size(text, "Same Game")
        colours, rest = take_int(rest, "c", "Same Game", text)
        scoring, rest = take_int(rest, "s", "Same Game", text)
        soluble = True
        if rest == "r":
            soluble, rest = False, ""
        if rest:
            raise ValueError(f"bad Same Game parameters {text!r}: unexpected {rest!r}; expected "
                             "'WxHc<colours>s<scoring>[r]'")
        return cls(w, h, 3 if colours is None else colours, 2 if scoring is None else scoring, soluble)

    def format(self) -> str:
        return f"{self.w}x{self.h}c{self.colours}s{self.scoring}" + ("" if self.soluble else "r")

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, self.colours, self.scoring, int(self.soluble))

    @classmethod
    def from_ints(cls, values: Any) -> SameGameParams:
        w, h, c, s, sol = check_ints(values, 5, "Same Game")
        if sol not in (0, 1):
            raise ValueError(f"Same Game solubility flag must be 0 or 1, got {sol}")
        return cls(w, h, c, s, bool(sol))


def groups_mask(grid: np.ndarray) -> np.ndarray:
    """Bool map of the cells that belong to a group of two or more (the removable cells)."""
    filled = grid > 0
    out = np.zeros(grid.shape, bool)
    same_v = (grid[1:] == grid[:-1]) & filled[1:]
    same_h = (grid[:, 1:] == grid[:, :-1]) & filled[:, 1:]
    out[1:] |= same_v
    out[:-1] |= same_v
    out[:, 1:] |= same_h
    out[:, :-1] |= same_h
    return out


def group_at(grid: np.ndarray, r: int, c: int) -> np.ndarray:
    """Bool map of the connected same-coloured group containing ``(r, c)``."""
    colour = grid[r, c]
    h, w = grid.shape
    seen = np.zeros(grid.shape, bool)
    seen[r, c] = True
    stack = [(r, c)]
    while stack:
        i, j = stack.pop()
        for ii, jj in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1)):
            if 0 <= ii < h and 0 <= jj < w and not seen[ii, jj] and grid[ii, jj] == colour:
                seen[ii, jj] = True
                stack.append((ii, jj))
    return seen


def remove_group(grid: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The grid after removing ``group``: cells fall down, empty columns close up to the left."""
    h, w = grid.shape
    g = np.where(group, 0, grid)
    out = np.zeros_like(grid)
    k = 0
    for c in range(w):
        col = g[:, c][g[:, c] > 0]
        if len(col):
            out[h - len(col):, k] = col
            k += 1
    return out


def _columns_to_grid(cols: list[list[int]], w: int, h: int) -> np.ndarray:
    grid = np.zeros((h, w), np.int8)
    for j, col in enumerate(cols):
        for i, v in enumerate(col):
            grid[h - 1 - i, j] = v
    return grid


def _touching(cols: list[list[int]], kind: str, j: int, p: int, s: int) -> set[int]:
    """Colours of the cells that an inserted group would touch (columns are lists, bottom first)."""

    def at(col: int, i: int) -> int | None:
        if 0 <= col < len(cols) and 0 <= i < len(cols[col]):
            return cols[col][i]
        return None

    out: list[int | None] = []
    if kind == "newcol":            # new column between old columns j - 1 and j
        out += [at(j - 1, i) for i in range(s)] + [at(j, i) for i in range(s)]
    elif kind == "vert":            # rows p .. p+s-1 of column j; the old cell p moves above the group
        out += [at(j, p - 1), at(j, p)]
        out += [at(j - 1, i) for i in range(p, p + s)] + [at(j + 1, i) for i in range(p, p + s)]
    else:                           # row p of columns j and j + 1
        out += [at(j, p - 1), at(j, p), at(j + 1, p - 1), at(j + 1, p), at(j - 1, p), at(j + 2, p)]
    return {v for v in out if v is not None}


def _soluble_board(w: int, h: int, colours: int, rng: np.random.Generator, attempts: int = 500) -> np.ndarray:
    """Backwards construction (see the module docstring). Columns are lists of colours, bottom first."""
    for _ in range(attempts):
        cols: list[list[int]] = []
        while sum(map(len, cols)) < w * h:
            cands: list[tuple[str, int, int, int]] = []     # (kind, column, height index, size)
            if len(cols) < w:
                cands += [("newcol", j, 0, s) for j in range(len(cols) + 1) for s in (2, 3) if s <= h]
            for j, col in enumerate(cols):
                cands += [("vert", j, p, s) for p in range(len(col) + 1) for s in (2, 3) if len(col) + s <= h]
                if j + 1 < len(cols) and len(col) < h and len(cols[j + 1]) < h:
                    top = min(len(col), len(cols[j + 1]))
                    cands += [("horiz", j, p, 2) for p in range(top + 1)]
            placed = False
            for i in rng.permutation(len(cands)):
                kind, j, p, s = cands[int(i)]
                touching = _touching(cols, kind, j, p, s)
                free = [k for k in range(1, colours + 1) if k not in touching]
                if not free:
                    continue
                k = free[int(rng.integers(len(free)))]
                if kind == "newcol":
                    cols.insert(j, [k] * s)
                elif kind == "vert":
                    cols[j][p:p] = [k] * s
                else:
                    cols[j].insert(p, k)
                    cols[j + 1].insert(p, k)
                placed = True
                break
            if not placed:
                break
        else:
            return _columns_to_grid(cols, w, h)
    raise RuntimeError(f"could not build a soluble {w}x{h} Same Game board with {colours} colours "
                       f"in {attempts} attempts")


class SameGameEnv(PuzzleEnv):
    """Same Game (see the module docstring)."""

    params_cls = SameGameParams
    default_params = "5x5c3s2"
    default_max_size = (8, 8)
    can_fail = True

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {"board": spaces.Box(0, MAX_COLOURS, (self.max_h, self.max_w), np.int8)}

    def _num_actions(self) -> int:
        return self.max_w * self.max_h

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, SameGameParams)
        self.w, self.h, self.scoring = params.w, params.h, params.scoring
        if params.soluble:
            self.grid = _soluble_board(params.w, params.h, params.colours, rng)
        else:
            while True:
                self.grid = rng.integers(1, params.colours + 1, size=(params.h, params.w)).astype(np.int8)
                if groups_mask(self.grid).any():
                    break
        self.score = 0
        self._groups = groups_mask(self.grid)

    def _apply(self, action: int) -> None:
        r, c = divmod(action, self.max_w)
        group = group_at(self.grid, r, c)
        n = int(group.sum())
        self.score += (n - self.scoring) ** 2
        self.grid = remove_group(self.grid, group)
        self._groups = groups_mask(self.grid)

    def _mask(self) -> np.ndarray:
        m = np.zeros((self.max_h, self.max_w), bool)
        m[:self.h, :self.w] = self._groups
        return m.reshape(-1)

    def _legal(self, action: int) -> bool:
        r, c = divmod(action, self.max_w)
        return r < self.h and c < self.w and bool(self._groups[r, c])

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.zeros((self.max_h, self.max_w), np.int8)
        board[:self.h, :self.w] = self.grid
        return {"board": board}

    def _solved(self) -> bool:
        return not self.grid.any()

    def _failed(self) -> bool:
        return not self._groups.any()

    def _state(self) -> dict[str, Any]:
        return {"grid": self.grid.copy(), "score": self.score}

    def _state_key(self) -> bytes:
        return self.grid.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        return PALETTE[self.grid]
