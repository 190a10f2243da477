"""Flip (Lights Out) from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: a ``W x H`` grid of lights. Pressing a cell toggles a fixed set of cells around it — with the
``c`` (crosses) pattern the cell and its four orthogonal neighbours, with the ``r`` (random) pattern a random
subset of its 3x3 neighbourhood that always contains the cell itself. The puzzle is solved when every light
is off. Each press is its own inverse and presses commute, so pressing the same set of cells that scrambled
the board solves it: the generator scrambles a solved board with presses and is therefore always solvable.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH`` and the pattern type ``c``/``r``,
e.g. ``"5x5c"``; easiest setting and human-easy preset are both ``"3x3c"`` (Table 7).
Extension (a difficulty knob the collection does not expose): ``p<k>`` scrambles with exactly ``k``
distinct presses, so an optimal solution needs at most ``k`` presses (``"5x5cp3"``). Without ``p`` each
cell is pressed with probability 1/2, as a uniformly random solvable board.

Actions (direct, not the collection's cursor): ``Discrete(max_w * max_h)``, action ``r * max_w + c`` presses
cell (row ``r``, column ``c``). The mask marks the cells on the board (every press changes the lights).

Observation: ``board`` (lights, ``(max_h, max_w)``), ``pattern`` (``(max_h, max_w, 9)``, the 3x3 toggle
pattern of each cell in row-major order), ``valid``.

>>> env = FlipEnv("3x3c#1")
>>> obs, info = env.reset(seed=0)
>>> obs["board"].shape, int(env.action_space.n)
((6, 6), 36)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, check_ints, check_range, parse_size, take_int

logger = logging.getLogger(__name__)

__all__ = ["FlipParams", "FlipEnv"]

_CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=np.uint8)


@dataclass(frozen=True)
class FlipParams(PuzzleParams):
    """Flip parameters: size, pattern ``"c"``/``"r"``, optional number of scrambling presses.

    >>> FlipParams.parse("5x4rp3")
    FlipParams(w=5, h=4, pattern='r', presses=3)
    >>> FlipParams(3, 3).format()
    '3x3c'
    """

    w: int
    h: int
    pattern: str = "c"
    presses: int | None = None

    puzzle: ClassVar[str] = "flip"

    def __post_init__(self) -> None:
        check_range("Flip", "width", self.w, 2)
        check_range("Flip", "height", self.h, 2)
        if self.pattern not in ("c", "r"):
            raise ValueError(f"Flip pattern must be 'c' (crosses) or 'r' (random), got {self.pattern!r}")
        if self.presses is not None:
            check_range("Flip", "presses", self.presses, 1, self.w * self.h)

    @classmethod
    def parse(cls, text: str) -> FlipParams:
        w, h, rest = parse_size(text, "Flip")
        if not rest or rest[0] not in "cr":
            raise ValueError(f"bad Flip parameters {text!r}: expected 'WxHc' or 'WxHr' "
                             "(optional 'p<presses>')")
        pattern, rest = rest[0], rest[1:]
        presses, rest = take_int(rest, "p", "Flip", text)
        if rest:
            raise ValueError(f"bad Flip parameters {text!r}: unexpected {rest!r}")
        return cls(w, h, pattern, presses)

    def format(self) -> str:
        return f"{self.w}x{self.h}{self.pattern}" + (f"p{self.presses}" if self.presses else "")

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, 0 if self.pattern == "c" else 1, self.presses or 0)

    @classmethod
    def from_ints(cls, values: Any) -> FlipParams:
        w, h, pat, presses = check_ints(values, 4, "Flip")
        if pat not in (0, 1):
            raise ValueError(f"Flip pattern code must be 0 (c) or 1 (r), got {pat}")
        return cls(w, h, "c" if pat == 0 else "r", presses or None)


class FlipEnv(PuzzleEnv):
    """Flip / Lights Out (see the module docstring)."""

    params_cls = FlipParams
    default_params = "3x3c"
    default_max_size = (6, 6)

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        return {
            "board": spaces.Box(0, 1, (self.max_h, self.max_w), np.int8),
            "pattern": spaces.Box(0, 1, (self.max_h, self.max_w, 9), np.int8),
        }

    def _num_actions(self) -> int:
        return self.max_w * self.max_h

    def _default_max_steps(self, params: PuzzleParams) -> int:
        w, h = params.size
        return 10 * w * h

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, FlipParams)
        w, h = params.w, params.h
        self.w, self.h = w, h
        pats = np.zeros((h, w, 3, 3), np.uint8)
        for r in range(h):
            for c in range(w):
                if params.pattern == "c":
                    pat = _CROSS.copy()
                else:
                    pat = (rng.random((3, 3)) < 0.5).astype(np.uint8)
                    pat[1, 1] = 1
                # cells outside the board are never toggled
                for dr in range(3):
                    for dc in range(3):
                        if not (0 <= r + dr - 1 < h and 0 <= c + dc - 1 < w):
                            pat[dr, dc] = 0
                pats[r, c] = pat
        self.patterns = pats
        self.lights = np.zeros((h + 2, w + 2), np.uint8)   # padded by one so a press is a 3x3 slice xor
        while True:
            if params.presses is None:
                pressed = np.flatnonzero(rng.random(w * h) < 0.5)
            else:
                pressed = rng.choice(w * h, size=params.presses, replace=False)
            self.lights[:] = 0
            for i in pressed:
                self._press(int(i) // w, int(i) % w)
            if self.lights.any():
                break
        self.scramble = sorted(int(i) for i in pressed)
        mask = np.zeros((self.max_h, self.max_w), bool)
        mask[:h, :w] = True
        self._static_mask = mask.reshape(-1)

    def _press(self, r: int, c: int) -> None:
        self.lights[r:r + 3, c:c + 3] ^= self.patterns[r, c]

    def _apply(self, action: int) -> None:
        self._press(action // self.max_w, action % self.max_w)

    def _mask(self) -> np.ndarray:
        return self._static_mask.copy()

    def _legal(self, action: int) -> bool:
        return action // self.max_w < self.h and action % self.max_w < self.w

    def _observe(self) -> dict[str, np.ndarray]:
        board = np.zeros((self.max_h, self.max_w), np.int8)
        board[:self.h, :self.w] = self.lights[1:-1, 1:-1]
        pattern = np.zeros((self.max_h, self.max_w, 9), np.int8)
        pattern[:self.h, :self.w] = self.patterns.reshape(self.h, self.w, 9)
        return {"board": board, "pattern": pattern}

    def _solved(self) -> bool:
        return not self.lights.any()

    def _state(self) -> dict[str, Any]:
        return {"lights": self.lights[1:-1, 1:-1].copy(), "patterns": self.patterns.copy()}

    def _state_key(self) -> bytes:
        return self.lights.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        on = self.lights[1:-1, 1:-1].astype(bool)
        img = np.empty((self.h, self.w, 3), np.uint8)
        img[on] = (250, 220, 60)
        img[~on] = (40, 40, 60)
        return img
