"""Pegs (peg solitaire) from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: pegs sit in some holes of a board. A move jumps a peg orthogonally over an adjacent peg into the
empty hole directly behind it, and removes the jumped peg. The puzzle is solved when one peg remains; it is
lost (irreversibly, reward -1) when more than one peg remains and no jump is possible.

Boards (the collection's types; the exact shapes for sizes other than 7x7 are our own, the collection's
generator is not reproduced):

* ``cross`` (odd ``W``, ``H`` >= 3): a plus-shaped board whose arms are three holes wide — ``7x7cross`` is
  the 33-hole English board — full of pegs except the centre hole.
* ``octagon`` (odd ``W``, ``H`` >= 5): the rectangle with staircase corners cut — ``7x7octagon`` is the
  37-hole French board. Its centre-vacancy game is famously unsolvable, so the vacancy is placed in the
  middle column one row below the top (row 1), a start from which one peg can remain on 7x7.

Every cross/octagon start listed in ``_STARTS`` was checked solvable by exhaustive search (the tests replay
solutions of ``5x7cross`` and ``7x7octagon``); sizes with no solvable single-vacancy start (``3x3cross``,
``5x5cross``, ``5x5octagon``) are rejected, and other sizes log a warning that their start is unchecked.
* ``random`` (``W``, ``H`` >= 3): built backwards from one peg by random reverse jumps, so it is always
  solvable; the board's holes are the cells the construction touched.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH`` followed by the type, e.g.
``"7x7cross"``; easiest setting ``"4x4random"``, human-easy preset ``"5x7cross"`` (Table 7).

Actions (direct jumps, not the collection's cursor): ``Discrete(4 * max_w * max_h)``; action
``4 * (r * max_w + c) + d`` jumps the peg at (row ``r``, column ``c``) in direction ``d`` (0 up, 1 down,
2 left, 3 right). The mask marks the legal jumps.

Observation: ``board`` (-1 no hole, 0 empty hole, 1 peg; -1 outside), ``valid``.

>>> env = PegsEnv("4x4random#2")
>>> obs, info = env.reset()
>>> int(env.action_space.n)
196
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, check_ints, check_range, parse_size

logger = logging.getLogger(__name__)

__all__ = ["PegsParams", "PegsEnv", "legal_jumps", "solve", "board_layout"]

TYPES = ("cross", "octagon", "random")
_DIRS = ((-1, 0), (1, 0), (0, -1), (0, 1))   # up, down, left, right
NO_HOLE, EMPTY, PEG = -1, 0, 1


#: Single-vacancy starts checked solvable with :func:`solve` (the centre where that works).
_STARTS: dict[tuple[int, int, str], tuple[int, int]] = {
    (3, 5, "cross"): (2, 0),
    (5, 3, "cross"): (0, 2),
    (5, 7, "cross"): (3, 2),
    (7, 5, "cross"): (2, 3),
    (7, 7, "cross"): (3, 3),
    (7, 7, "octagon"): (1, 3),
}
#: Boards with no solvable single-vacancy start (exhaustive search); they are rejected.
_UNSOLVABLE = {(3, 3, "cross"), (5, 5, "cross"), (5, 5, "octagon")}
_WARNED: set[tuple[int, int, str]] = set()


@dataclass(frozen=True)
class PegsParams(PuzzleParams):
    """Pegs parameters: size and board type.

    >>> PegsParams.parse("5x7cross")
    PegsParams(w=5, h=7, kind='cross')
    """

    w: int
    h: int
    kind: str = "cross"

    puzzle: ClassVar[str] = "pegs"

    def __post_init__(self) -> None:
        if self.kind not in TYPES:
            raise ValueError(f"Pegs board type must be one of {TYPES}, got {self.kind!r}")
        lo = 5 if self.kind == "octagon" else 3
        check_range("Pegs", "width", self.w, lo)
        check_range("Pegs", "height", self.h, lo)
        if self.kind != "random" and (self.w % 2 == 0 or self.h % 2 == 0):
            raise ValueError(f"Pegs {self.kind} boards need odd width and height, got {self.w}x{self.h}")
        if (self.w, self.h, self.kind) in _UNSOLVABLE:
            raise ValueError(f"Pegs {self.w}x{self.h}{self.kind} has no solvable single-vacancy start")

    @classmethod
    def parse(cls, text: str) -> PegsParams:
        w, h, rest = parse_size(text, "Pegs")
        kind = rest.lower()
        if kind not in TYPES:
            raise ValueError(f"bad Pegs parameters {text!r}: expected 'WxH' followed by one of {TYPES}")
        return cls(w, h, kind)

    def format(self) -> str:
        return f"{self.w}x{self.h}{self.kind}"

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, TYPES.index(self.kind))

    @classmethod
    def from_ints(cls, values: Any) -> PegsParams:
        w, h, k = check_ints(values, 3, "Pegs")
        if not 0 <= k < len(TYPES):
            raise ValueError(f"Pegs type code must be in [0, {len(TYPES)}), got {k}")
        return cls(w, h, TYPES[k])


def board_layout(params: PegsParams) -> np.ndarray:
    """The starting board of a ``cross`` or ``octagon`` instance (``-1`` no hole, 0 empty, 1 peg).

    >>> b = board_layout(PegsParams(7, 7, "cross"))
    >>> int((b >= 0).sum()), int((b == 1).sum())   # the English board: 33 holes, 32 pegs
    (33, 32)
    """
    w, h = params.w, params.h
    board = np.full((h, w), PEG, np.int8)
    if params.kind == "cross":
        cw, ch = (w - 3) // 2, (h - 3) // 2
        for rows in (slice(0, ch), slice(h - ch, h)):
            board[rows, :cw] = NO_HOLE
            board[rows, w - cw:] = NO_HOLE
    elif params.kind == "octagon":
        cut = (min(w, h) - 3) // 2
        for i in range(cut):
            k = cut - i
            for r in (i, h - 1 - i):
                board[r, :k] = NO_HOLE
                board[r, w - k:] = NO_HOLE
    else:
        raise ValueError("board_layout is for 'cross' and 'octagon'; 'random' boards are generated")
    key = (w, h, params.kind)
    if key in _STARTS:
        r, c = _STARTS[key]
    else:
        r, c = (h // 2, w // 2) if params.kind == "cross" else (1, w // 2)
        if key not in _WARNED:
            _WARNED.add(key)
            logger.warning("Pegs %s: solvability of this start was not checked (checked boards: %s)",
                           params.format(), sorted(f"{a}x{b}{k}" for a, b, k in _STARTS))
    board[r, c] = EMPTY
    return board


def legal_jumps(board: np.ndarray) -> np.ndarray:
    """Bool array ``(h, w, 4)``: whether the peg at each cell can jump in each direction."""
    h, w = board.shape
    p = np.full((h + 4, w + 4), NO_HOLE, np.int8)
    p[2:-2, 2:-2] = board
    out = np.zeros((h, w, 4), bool)
    peg = board == PEG
    for d, (dr, dc) in enumerate(_DIRS):
        over = p[2 + dr:2 + dr + h, 2 + dc:2 + dc + w] == PEG
        land = p[2 + 2 * dr:2 + 2 * dr + h, 2 + 2 * dc:2 + 2 * dc + w] == EMPTY
        out[..., d] = peg & over & land
    return out


def _jump(board: np.ndarray, r: int, c: int, d: int) -> None:
    dr, dc = _DIRS[d]
    board[r, c] = EMPTY
    board[r + dr, c + dc] = EMPTY
    board[r + 2 * dr, c + 2 * dc] = PEG


def solve(board: np.ndarray, max_nodes: int = 2_000_000) -> list[tuple[int, int, int]] | None:
    """A sequence of jumps ``(row, col, direction)`` leaving one peg, or ``None`` if there is none.

    Depth-first search remembering dead positions; raises ``RuntimeError`` after ``max_nodes`` positions.
    """
    board = board.copy()
    dead: set[bytes] = set()
    path: list[tuple[int, int, int]] = []
    nodes = 0

    def rec(pegs: int) -> bool:
        nonlocal nodes
        if pegs == 1:
            return True
        key = board.tobytes()
        if key in dead:
            return False
        nodes += 1
        if nodes > max_nodes:
            raise RuntimeError(f"pegs solver gave up after {max_nodes} positions")
        for r, c, d in np.argwhere(legal_jumps(board)):
            r, c, d = int(r), int(c), int(d)
            saved = board.copy()
            _jump(board, r, c, d)
            path.append((r, c, d))
            if rec(pegs - 1):
                return True
            path.pop()
            board[:] = saved
        dead.add(key)
        return False

    return list(path) if rec(int((board == PEG).sum())) else None


def _random_board(w: int, h: int, rng: np.random.Generator) -> np.ndarray:
    """Backwards construction: one peg, then random reverse jumps (two pegs appear, one disappears)."""
    while True:
        board = np.full((h, w), EMPTY, np.int8)
        board[int(rng.integers(h)), int(rng.integers(w))] = PEG
        touched = board == PEG
        target = max(2, int(round(0.6 * w * h)))
        for _ in range(8 * w * h):
            if (board == PEG).sum() >= target:
                break
            # reverse of "peg at A jumps in direction d over B into C": C has a peg, A and B are empty.
            # On the complement board (pegs <-> empty holes) that is a legal jump from A over B into C.
            cand = np.argwhere(legal_jumps(np.where(board == PEG, EMPTY, PEG).astype(np.int8)))
            if not len(cand):
                break
            r, c, d = (int(v) for v in cand[int(rng.integers(len(cand)))])
            dr, dc = _DIRS[d]
            board[r + 2 * dr, c + 2 * dc] = EMPTY
            board[r, c] = board[r + dr, c + dc] = PEG
            touched[r, c] = touched[r + dr, c + dc] = True
        if (board == PEG).sum() >= 2:
            board[~touched] = NO_HOLE
            return board


class PegsEnv(PuzzleEnv):
    """Pegs (see the module docstring)."""

    params_cls = PegsParams
    default_params = "5x7cross"
    default_max_size = (7, 7)
    can_fail = True

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {"board": spaces.Box(-1, 1, (self.max_h, self.max_w), np.int8)}

    def _num_actions(self) -> int:
        return 4 * self.max_w * self.max_h

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, PegsParams)
        self.w, self.h = params.w, params.h
        if params.kind == "random":
            self.board = _random_board(params.w, params.h, rng)
        else:
            self.board = board_layout(params)
        self._refresh()

    def _refresh(self) -> None:
        self._jumps = legal_jumps(self.board)
        self.pegs = int((self.board == PEG).sum())

    def _apply(self, action: int) -> None:
        cell, d = divmod(action, 4)
        _jump(self.board, cell // self.max_w, cell % self.max_w, d)
        self._refresh()

    def _mask(self) -> np.ndarray:
        m = np.zeros((self.max_h, self.max_w, 4), bool)
        m[:self.h, :self.w] = self._jumps
        return m.reshape(-1)

    def _legal(self, action: int) -> bool:
        cell, d = divmod(action, 4)
        r, c = divmod(cell, self.max_w)
        return r < self.h and c < self.w and bool(self._jumps[r, c, d])

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.full((self.max_h, self.max_w), NO_HOLE, np.int8)
        board[:self.h, :self.w] = self.board
        return {"board": board}

    def _solved(self) -> bool:
        return self.pegs == 1

    def _failed(self) -> bool:
        return not self._jumps.any()

    def _state(self) -> dict[str, Any]:
        return {"board": self.board.copy(), "pegs": self.pegs}

    def _state_key(self) -> bytes:
        return self.board.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        img = np.zeros((self.h, self.w, 3), np.uint8)
        img[self.board == EMPTY] = (120, 90, 60)
        img[self.board == PEG] = (60, 120, 230)
        return img
