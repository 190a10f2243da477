"""Sixteen from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: the numbers ``1 .. W*H`` fill a ``W x H`` grid. A move shifts one whole row (left or right) or one
whole column (up or down) cyclically by one cell. The puzzle is solved when the numbers read ``1 .. W*H``
in row-major order.

Which arrangements are reachable: a shift of a row of length ``W`` is a ``W``-cycle, an odd permutation
exactly when ``W`` is even. If both ``W`` and ``H`` are odd every move is even, so only even permutations
are reachable; otherwise every permutation is (row and column shifts generate the alternating group,
plus an odd move when one side is even). The default generator draws a uniformly random reachable
arrangement; with ``m<k>`` it instead applies ``k`` random shifts to the solved grid (never undoing the
previous shift), so the instance is solvable in at most ``k`` moves — the collection's shuffle-depth knob.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH`` and optional ``m<moves>``,
e.g. ``"5x5m2"``; easiest setting ``"2x3"``, human-easy preset ``"3x3"`` (Table 7).

Actions (:func:`line_action`): ``Discrete(2 * (max_h + max_w))``; for row ``r``: ``r`` shifts it right and
``max_h + r`` left; for column ``c``: ``2*max_h + c`` shifts it down and ``2*max_h + max_w + c`` up.
The mask marks the shifts of rows and columns on the board.

Observation: ``board`` (the numbers, 0 outside), ``valid``.

>>> env = SixteenEnv("2x2m1#0")
>>> obs, info = env.reset()
>>> int(env.action_masks().sum()), int(env.action_space.n)
(8, 20)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, ShuffleParams

logger = logging.getLogger(__name__)

__all__ = ["SixteenParams", "SixteenEnv", "line_action", "decode_line_action", "shift_line",
           "permutation_parity"]


def line_action(kind: str, index: int, max_w: int, max_h: int) -> int:
    """Action id of a row/column shift: ``kind`` is ``"right"``, ``"left"`` (rows) or ``"down"``, ``"up"``.

    >>> line_action("down", 1, max_w=4, max_h=3)
    7
    """
    base = {"right": 0, "left": max_h, "down": 2 * max_h, "up": 2 * max_h + max_w}
    if kind not in base:
        raise ValueError(f"kind must be one of {sorted(base)}, got {kind!r}")
    return base[kind] + index


def decode_line_action(action: int, max_w: int, max_h: int) -> tuple[str, int]:
    """Inverse of :func:`line_action`.

    >>> decode_line_action(7, max_w=4, max_h=3)
    ('down', 1)
    """
    if action < max_h:
        return "right", action
    if action < 2 * max_h:
        return "left", action - max_h
    if action < 2 * max_h + max_w:
        return "down", action - 2 * max_h
    return "up", action - 2 * max_h - max_w


def shift_line(grid: np.ndarray, kind: str, index: int) -> None:
    """Cyclically shift one row/column of ``grid`` (and of any trailing axes) in place by one cell."""
    if kind == "right":
        grid[index] = np.roll(grid[index], 1, axis=0)
    elif kind == "left":
        grid[index] = np.roll(grid[index], -1, axis=0)
    elif kind == "down":
        grid[:, index] = np.roll(grid[:, index], 1, axis=0)
    else:
        grid[:, index] = np.roll(grid[:, index], -1, axis=0)


_OPPOSITE = {"right": "left", "left": "right", "down": "up", "up": "down"}


def permutation_parity(values: np.ndarray) -> int:
    """Parity (0 even, 1 odd) of a permutation of distinct values, by counting cycles.

    >>> permutation_parity(np.array([2, 1, 3])), permutation_parity(np.array([2, 3, 1]))
    (1, 0)
    """
    order = np.argsort(values.reshape(-1), kind="stable")
    n = len(order)
    seen = np.zeros(n, bool)
    cycles = 0
    for i in range(n):
        if not seen[i]:
            cycles += 1
            j = i
            while not seen[j]:
                seen[j] = True
                j = order[j]
    return (n - cycles) % 2


@dataclass(frozen=True)
class SixteenParams(ShuffleParams):
    """Sixteen parameters: size and optional number of shuffling moves.

    >>> SixteenParams.parse("4x3m5")
    SixteenParams(w=4, h=3, moves=5)
    """

    puzzle: ClassVar[str] = "sixteen"


def random_line_moves(rng: np.random.Generator, w: int, h: int, k: int) -> list[tuple[str, int]]:
    """``k`` random row/column shifts, never undoing the previous one."""
    moves: list[tuple[str, int]] = []
    while len(moves) < k:
        if rng.random() < h / (w + h):
            kind, index = ("right", "left")[int(rng.integers(2))], int(rng.integers(h))
        else:
            kind, index = ("down", "up")[int(rng.integers(2))], int(rng.integers(w))
        if moves and moves[-1] == (_OPPOSITE[kind], index):
            continue
        moves.append((kind, index))
    return moves


class SixteenEnv(PuzzleEnv):
    """Sixteen (see the module docstring)."""

    params_cls = SixteenParams
    default_params = "3x3"
    default_max_size = (5, 5)

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {"board": spaces.Box(0, self.max_w * self.max_h, (self.max_h, self.max_w), np.int16)}

    def _num_actions(self) -> int:
        return 2 * (self.max_h + self.max_w)

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, SixteenParams)
        w, h = self.w, self.h = params.w, params.h
        solved = np.arange(1, w * h + 1, dtype=np.int16).reshape(h, w)
        self.goal = solved
        while True:
            if params.moves is None:
                grid = rng.permutation(w * h).astype(np.int16).reshape(h, w) + 1
                if w % 2 == 1 and h % 2 == 1 and permutation_parity(grid) == 1:
                    grid.reshape(-1)[[0, 1]] = grid.reshape(-1)[[1, 0]]
            else:
                grid = solved.copy()
                for kind, index in random_line_moves(rng, w, h, params.moves):
                    shift_line(grid, kind, index)
            if not np.array_equal(grid, solved):
                break
        self.grid = grid
        mask = np.zeros(self._num_actions(), bool)
        for kind, n in (("right", h), ("left", h), ("down", w), ("up", w)):
            for i in range(n):
                mask[line_action(kind, i, self.max_w, self.max_h)] = True
        self._static_mask = mask

    def _apply(self, action: int) -> None:
        kind, index = decode_line_action(action, self.max_w, self.max_h)
        shift_line(self.grid, kind, index)

    def _mask(self) -> np.ndarray:
        return self._static_mask.copy()

    def _legal(self, action: int) -> bool:
        return bool(self._static_mask[action])

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.zeros((self.max_h, self.max_w), np.int16)
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
        shade = (40 + 200 * (self.grid - 1) / max(1, n - 1)).astype(np.uint8)
        ok = self.grid == self.goal
        return np.stack([shade, np.where(ok, 200, shade // 2), 255 - shade], axis=-1).astype(np.uint8)
