"""Flood (Flood-It) from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: a ``W x H`` grid of cells coloured with ``C`` colours. The *flooded region* is the connected
same-coloured area containing the top-left cell. A move recolours the whole region with a new colour, after
which it absorbs every orthogonally adjacent cell of that colour. The puzzle is solved when the whole grid
is one colour. There is a move limit: the number of moves our solver needs plus ``M`` extra moves; running
out of moves unsolved is an irreversible failure (reward -1).

The solver is greedy (each move picks the colour that makes the region largest, ties to the smallest
colour index). It always finishes, so every generated instance is solvable within its limit; it is not
optimal, so our limits are at least as generous as the collection's (its own solver is not reproduced).

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH``, ``c<colours>``, ``m<extra moves>``,
e.g. ``"12x12c6m5"``; easiest setting ``"3x3c6m5"``, human-easy preset ``"12x12c6m5"`` (Table 7). The extra
moves ``M`` are the *slack* difficulty knob.

Actions: ``Discrete(max_colours)``, action ``k`` floods with colour ``k`` (the collection clicks a cell of
that colour). The mask marks the colours of the instance that differ from the region's colour.

Observation: ``board`` (colour + 1, 0 outside the board), ``region`` (1 on the flooded region),
``moves_left`` (shape ``(1,)``), ``valid``.

>>> env = FloodEnv("3x3c3m0#4")
>>> obs, info = env.reset()
>>> int(obs["moves_left"][0]) == info["state"]["limit"]
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PALETTE, PuzzleEnv, PuzzleParams, check_ints, check_range, parse_size, take_int

logger = logging.getLogger(__name__)

__all__ = ["FloodParams", "FloodEnv", "grow_region", "greedy_moves"]

MAX_COLOURS = 10


@dataclass(frozen=True)
class FloodParams(PuzzleParams):
    """Flood parameters: size, number of colours (2–10), extra moves beyond the solver's.

    >>> FloodParams.parse("12x12c6m5")
    FloodParams(w=12, h=12, colours=6, extra=5)
    """

    w: int
    h: int
    colours: int = 6
    extra: int = 5

    puzzle: ClassVar[str] = "flood"

    def __post_init__(self) -> None:
        check_range("Flood", "width", self.w, 2)
        check_range("Flood", "height", self.h, 2)
        check_range("Flood", "colours", self.colours, 2, MAX_COLOURS)
        check_range("Flood", "extra moves", self.extra, 0)

    @classmethod
    def parse(cls, text: str) -> FloodParams:
        w, h, rest = parse_size(text, "Flood")
        colours, rest = take_int(rest, "c", "Flood", text)
        extra, rest = take_int(rest, "m", "Flood", text)
        if rest:
            raise ValueError(f"bad Flood parameters {text!r}: unexpected {rest!r}; expected 'WxHc<C>m<M>'")
        return cls(w, h, 6 if colours is None else colours, 5 if extra is None else extra)

    def format(self) -> str:
        return f"{self.w}x{self.h}c{self.colours}m{self.extra}"

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, self.colours, self.extra)

    @classmethod
    def from_ints(cls, values: Any) -> FloodParams:
        return cls(*check_ints(values, 4, "Flood"))


def grow_region(grid: np.ndarray, region: np.ndarray) -> np.ndarray:
    """Grow ``region`` (bool) over orthogonally adjacent cells of the region's colour, to a fixed point.

    >>> g = np.array([[0, 0, 1], [1, 0, 1]])
    >>> grow_region(g, np.array([[True, False, False], [False, False, False]])).astype(int).tolist()
    [[1, 1, 0], [0, 1, 0]]
    """
    colour = grid[region][0]
    same = grid == colour
    region = region.copy()
    while True:
        grown = region.copy()
        grown[1:] |= region[:-1]
        grown[:-1] |= region[1:]
        grown[:, 1:] |= region[:, :-1]
        grown[:, :-1] |= region[:, 1:]
        grown &= same
        if np.array_equal(grown, region):
            return region
        region = grown


def greedy_moves(grid: np.ndarray, colours: int) -> int:
    """Moves the greedy solver needs to flood ``grid`` (largest region after each move)."""
    grid = grid.copy()
    region = np.zeros(grid.shape, bool)
    region[0, 0] = True
    region = grow_region(grid, region)
    moves = 0
    while not region.all():
        best_k, best_region, best_n = -1, region, -1
        for k in range(colours):
            if k == grid[0, 0]:
                continue
            g = grid.copy()
            g[region] = k
            r = grow_region(g, region)
            n = int(r.sum())
            if n > best_n:
                best_k, best_region, best_n = k, r, n
        grid[region] = best_k
        region = best_region
        moves += 1
    return moves


class FloodEnv(PuzzleEnv):
    """Flood (see the module docstring).

    Args:
        max_colours: Size of the action space (colours an instance may use), 2–10.
        **kwargs: see :class:`~magister.examples.puzzles.base.PuzzleEnv`.
    """

    params_cls = FloodParams
    default_params = "12x12c6m5"
    default_max_size = (12, 12)
    can_fail = True

    def __init__(self, params: str | PuzzleParams | None = None, *, max_colours: int = MAX_COLOURS,
                 **kwargs: Any) -> None:
        check_range("FloodEnv", "max_colours", max_colours, 2, MAX_COLOURS)
        self.max_colours = int(max_colours)
        super().__init__(params, **kwargs)

    def _coerce(self, params: str | PuzzleParams) -> tuple[PuzzleParams, int | None]:
        p, seed = super()._coerce(params)
        assert isinstance(p, FloodParams)
        if p.colours > self.max_colours:
            raise ValueError(f"Flood instance {p.format()!r} has {p.colours} colours but the env's "
                             f"max_colours is {self.max_colours}")
        return p, seed

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {
            "board": spaces.Box(0, self.max_colours, (self.max_h, self.max_w), np.int8),
            "region": spaces.Box(0, 1, (self.max_h, self.max_w), np.int8),
            "moves_left": spaces.Box(0, np.iinfo(np.int32).max, (1,), np.int32),
        }

    def _num_actions(self) -> int:
        return self.max_colours

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, FloodParams)
        self.w, self.h, self.colours = params.w, params.h, params.colours
        while True:
            grid = rng.integers(params.colours, size=(params.h, params.w)).astype(np.int8)
            region = np.zeros(grid.shape, bool)
            region[0, 0] = True
            region = grow_region(grid, region)
            if not region.all():
                break
        self.grid, self.region = grid, region
        self.solver_moves = greedy_moves(grid, params.colours)
        self.limit = self.solver_moves + params.extra
        self.moves = 0

    def _apply(self, action: int) -> None:
        self.grid[self.region] = action
        self.region = grow_region(self.grid, self.region)
        self.moves += 1

    def _mask(self) -> np.ndarray:
        m = np.zeros(self.max_colours, bool)
        if self.moves < self.limit:
            m[:self.colours] = True
            m[self.grid[0, 0]] = False
        return m

    def _legal(self, action: int) -> bool:
        return self.moves < self.limit and action < self.colours and action != self.grid[0, 0]

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.zeros((self.max_h, self.max_w), np.int8)
        board[:self.h, :self.w] = self.grid + 1
        region = np.zeros((self.max_h, self.max_w), np.int8)
        region[:self.h, :self.w] = self.region
        return {"board": board, "region": region,
                "moves_left": np.array([self.limit - self.moves], np.int32)}

    def _solved(self) -> bool:
        return bool(self.region.all())

    def _failed(self) -> bool:
        return self.moves >= self.limit

    def _state(self) -> dict[str, Any]:
        return {"grid": self.grid.copy(), "moves": self.moves, "limit": self.limit,
                "solver_moves": self.solver_moves}

    def _state_key(self) -> bytes:
        return self.grid.tobytes() + self.moves.to_bytes(4, "little")

    def _cell_rgb(self) -> np.ndarray:
        return PALETTE[1 + self.grid]
