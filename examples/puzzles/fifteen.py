"""Fifteen (the sliding-tile puzzle) from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: tiles ``1 .. W*H-1`` and one gap fill a ``W x H`` grid. A move slides a tile orthogonally adjacent to
the gap into it. The puzzle is solved when the tiles read ``1 .. W*H-1`` in row-major order with the gap in
the bottom-right corner.

Solvability: treat the gap as tile ``W*H``. Each move swaps the gap with a neighbour (a transposition) and
moves the gap by one cell, so ``parity(permutation) == parity(gap's Manhattan distance from its goal)`` is
invariant, and every arrangement satisfying it is reachable. The default generator draws a uniformly random
arrangement and fixes the invariant by swapping two tiles; with ``m<k>`` (our extension: the collection's
Fifteen has no shuffle parameter) it instead makes ``k`` random gap moves from the solved grid (never undoing
the previous one), so the instance is solvable in at most ``k`` moves.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH``, e.g. ``"4x4"``; easiest setting
``"2x2"``, human-easy preset ``"4x4"`` (Table 7).

Actions: ``Discrete(4)`` for every size, as in the benchmark (Table 5): 0 UP, 1 DOWN, 2 LEFT, 3 RIGHT,
the direction in which a tile moves into the gap (UP moves the tile below the gap up). The mask marks the
directions that have a tile to move.

Observation: ``board`` (tile numbers, gap 0, outside -1), ``valid``.

>>> env = FifteenEnv("2x2m1#3")
>>> obs, info = env.reset()
>>> int(env.action_masks().sum())
2
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, ShuffleParams
from .sixteen import permutation_parity

logger = logging.getLogger(__name__)

__all__ = ["FifteenParams", "FifteenEnv", "UP", "DOWN", "LEFT", "RIGHT"]

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
# the tile that moves sits at gap + offset, and moves by -offset
_TILE_OFFSET = {UP: (1, 0), DOWN: (-1, 0), LEFT: (0, 1), RIGHT: (0, -1)}


@dataclass(frozen=True)
class FifteenParams(ShuffleParams):
    """Fifteen parameters: size and optional number of shuffling moves (our extension).

    >>> FifteenParams.parse("4x4"), FifteenParams.parse("3x2m7").format()
    (FifteenParams(w=4, h=4, moves=None), '3x2m7')
    """

    puzzle: ClassVar[str] = "fifteen"


class FifteenEnv(PuzzleEnv):
    """Fifteen (see the module docstring)."""

    params_cls = FifteenParams
    default_params = "4x4"
    default_max_size = (5, 5)

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {"board": spaces.Box(-1, self.max_w * self.max_h, (self.max_h, self.max_w), np.int16)}

    def _num_actions(self) -> int:
        return 4

    def _default_max_steps(self, params: PuzzleParams) -> int:
        w, h = params.size
        return 50 * w * h

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, FifteenParams)
        w, h = self.w, self.h = params.w, params.h
        goal = np.arange(1, w * h + 1, dtype=np.int16)
        goal[-1] = 0
        self.goal = goal.reshape(h, w)
        while True:
            if params.moves is None:
                grid = rng.permutation(self.goal.reshape(-1)).reshape(h, w)
                gr, gc = np.argwhere(grid == 0)[0]
                as_perm = np.where(grid == 0, w * h, grid)
                if permutation_parity(as_perm) != ((h - 1 - gr) + (w - 1 - gc)) % 2:
                    tiles = np.flatnonzero(grid.reshape(-1) != 0)[:2]
                    flat = grid.reshape(-1)
                    flat[tiles] = flat[tiles[::-1]]
                self.grid = grid
                self.gap = (int(gr), int(gc))
            else:
                self.grid, self.gap = self.goal.copy(), (h - 1, w - 1)
                last = -1
                done = 0
                while done < params.moves:
                    a = int(rng.integers(4))
                    if (a ^ 1) == last or not self._can(a):
                        continue
                    self._apply(a)
                    last, done = a, done + 1
            if not np.array_equal(self.grid, self.goal):
                break

    def _can(self, action: int) -> bool:
        dr, dc = _TILE_OFFSET[action]
        r, c = self.gap[0] + dr, self.gap[1] + dc
        return 0 <= r < self.h and 0 <= c < self.w

    def _apply(self, action: int) -> None:
        dr, dc = _TILE_OFFSET[action]
        gr, gc = self.gap
        r, c = gr + dr, gc + dc
        self.grid[gr, gc], self.grid[r, c] = self.grid[r, c], 0
        self.gap = (r, c)

    def _mask(self) -> np.ndarray:
        return np.array([self._can(a) for a in range(4)], bool)

    def _legal(self, action: int) -> bool:
        return self._can(action)

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.full((self.max_h, self.max_w), -1, np.int16)
        board[:self.h, :self.w] = self.grid
        return {"board": board}

    def _solved(self) -> bool:
        return bool(np.array_equal(self.grid, self.goal))

    def _state(self) -> dict[str, Any]:
        return {"grid": self.grid.copy()}

    def _state_key(self) -> bytes:
        return self.grid.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        n = self.w * self.h
        shade = (60 + 190 * self.grid / max(1, n - 1)).astype(np.uint8)
        img = np.stack([shade, shade // 2 + 60, 255 - shade], axis=-1).astype(np.uint8)
        img[self.grid == 0] = 0
        return img
