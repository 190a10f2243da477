"""Netslide from Simon Tatham's Portable Puzzle Collection, written from its rules.

Rules: a ``W x H`` grid of network tiles; each tile has links towards some of its four sides, and the tiles
together form a spanning tree of the grid (one tile, the *source*, starts in the centre). The tiles were
shuffled by sliding whole rows and columns cyclically; a move slides one row or column back by one cell
(the barriers stay where they are — they belong to the grid, not the tiles). The puzzle is solved when every
tile is connected to every other: two neighbouring tiles are connected when both have a link towards each
other and no barrier lies between them. Because the tiles carry exactly ``2 (W*H - 1)`` link ends, a fully
connected arrangement uses every link end, so it is a tree with no loose ends.

Generation: a uniformly shuffled random spanning tree (randomised Kruskal) of the grid — of the torus with
the ``w`` (wrapping) option, where links may cross the border; otherwise the border is a wall. Each grid
edge *not* used by the tree gets a barrier with probability ``b`` (the collection's barrier probability;
``b1`` puts a barrier on every unused edge, the strongest hint). Shuffling applies ``m`` random slides
(never undoing the previous one); the collection's default when ``m`` is absent is not reproduced — we use
``4 * W * H`` slides. An instance is solvable in at most ``m`` moves by construction.

Parameters (PUZZLES benchmark, Estermann et al. 2024, Table 6): ``WxH``, optional ``w``, ``b<float>``,
optional ``m<moves>``, e.g. ``"4x4wb1m2"``; easiest setting ``"2x3b1"``, human-easy preset ``"3x3b1"``
(Table 7). ``b`` is kept to three decimals (it is encoded as an integer number of thousandths).

Actions: as Sixteen (:func:`~magister.examples.puzzles.sixteen.line_action`):
``Discrete(2 * (max_h + max_w))`` row-right, row-left, column-down, column-up shifts. The mask marks the
shifts that change the arrangement (a row whose tiles are all identical does not change).

Observation: ``links`` and ``barriers`` (``(max_h, max_w, 4)``, sides in the order right, up, left, down),
``source`` (1 on the source tile), ``powered`` (1 on the tiles connected to the source), ``valid``.

>>> env = NetslideEnv("3x3b1m2#5")
>>> obs, info = env.reset()
>>> obs["links"].shape, int(env.action_space.n)
((5, 5, 4), 20)
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from .base import PuzzleEnv, PuzzleParams, check_ints, check_range, parse_size
from .sixteen import decode_line_action, random_line_moves, shift_line

logger = logging.getLogger(__name__)

__all__ = ["NetslideParams", "NetslideEnv", "connected_from"]

R, U, L, D = 1, 2, 4, 8
_SIDES = ((R, 0, 1, L), (U, -1, 0, D), (L, 0, -1, R), (D, 1, 0, U))   # bit, dr, dc, opposite bit


@dataclass(frozen=True)
class NetslideParams(PuzzleParams):
    """Netslide parameters: size, wrapping, barrier probability (thousandths), optional shuffle moves.

    >>> p = NetslideParams.parse("4x4wb0.5m2")
    >>> p, p.format()
    (NetslideParams(w=4, h=4, wrap=True, barrier_milli=500, moves=2), '4x4wb0.5m2')
    """

    w: int
    h: int
    wrap: bool = False
    barrier_milli: int = 1000
    moves: int | None = None

    puzzle: ClassVar[str] = "netslide"

    def __post_init__(self) -> None:
        check_range("Netslide", "width", self.w, 2)
        check_range("Netslide", "height", self.h, 2)
        if self.wrap and (self.w < 3 or self.h < 3):
            raise ValueError(f"Netslide with wrapping needs width and height >= 3, got {self.w}x{self.h}")
        check_range("Netslide", "barrier probability (thousandths)", self.barrier_milli, 0, 1000)
        if self.moves is not None:
            check_range("Netslide", "shuffle moves", self.moves, 1)

    @property
    def barrier(self) -> float:
        """Barrier probability in [0, 1]."""
        return self.barrier_milli / 1000

    @classmethod
    def parse(cls, text: str) -> NetslideParams:
        w, h, rest = parse_size(text, "Netslide")
        m = re.fullmatch(r"(?P<wrap>w?)(?:b(?P<b>\d+(?:\.\d*)?|\.\d+))?(?:m(?P<m>\d+))?", rest)
        if m is None:
            raise ValueError(f"bad Netslide parameters {text!r}: expected 'WxH[w][b<prob>][m<moves>]', "
                             "e.g. '3x3b1' or '4x4wb0.5m2'")
        b = 1.0 if m.group("b") is None else float(m.group("b"))
        milli = round(b * 1000)
        if not 0.0 <= b <= 1.0 or abs(milli - b * 1000) > 1e-6:
            raise ValueError(f"Netslide barrier probability must be in [0, 1] with at most 3 decimals, got "
                             f"{m.group('b')!r} in {text!r}")
        moves = int(m.group("m")) if m.group("m") is not None else None
        return cls(w, h, bool(m.group("wrap")), milli, moves or None)

    def format(self) -> str:
        b = f"{self.barrier_milli / 1000:.3f}".rstrip("0").rstrip(".")
        return f"{self.w}x{self.h}{'w' if self.wrap else ''}b{b}" + (f"m{self.moves}" if self.moves else "")

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, int(self.wrap), self.barrier_milli, self.moves or 0)

    @classmethod
    def from_ints(cls, values: Any) -> NetslideParams:
        w, h, wrap, b, m = check_ints(values, 5, "Netslide")
        if wrap not in (0, 1):
            raise ValueError(f"Netslide wrap flag must be 0 or 1, got {wrap}")
        return cls(w, h, bool(wrap), b, m or None)


def connected_from(links: np.ndarray, barriers: np.ndarray, start: tuple[int, int], wrap: bool) -> np.ndarray:
    """Bool map of the tiles connected to ``start`` (links matched on both sides, no barrier between)."""
    h, w = links.shape
    seen = np.zeros((h, w), bool)
    seen[start] = True
    stack = [start]
    while stack:
        r, c = stack.pop()
        here = links[r, c] & ~barriers[r, c]
        for bit, dr, dc, opp in _SIDES:
            if not here & bit:
                continue
            rr, cc = r + dr, c + dc
            if wrap:
                rr, cc = rr % h, cc % w
            elif not (0 <= rr < h and 0 <= cc < w):
                continue
            if not seen[rr, cc] and links[rr, cc] & opp:
                seen[rr, cc] = True
                stack.append((rr, cc))
    return seen


def _random_tree(rng: np.random.Generator, w: int, h: int, wrap: bool) -> tuple[np.ndarray, list]:
    """Randomised Kruskal: returns (links, unused edges) for a uniform-ish random spanning tree."""
    edges = []
    for r in range(h):
        for c in range(w):
            if c + 1 < w or wrap:
                edges.append((r, c, R))
            if r + 1 < h or wrap:
                edges.append((r, c, D))
    parent = list(range(w * h))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    links = np.zeros((h, w), np.uint8)
    unused = []
    for i in rng.permutation(len(edges)):
        r, c, bit = edges[int(i)]
        rr, cc = (r, (c + 1) % w) if bit == R else ((r + 1) % h, c)
        a, b = find(r * w + c), find(rr * w + cc)
        if a == b:
            unused.append(edges[int(i)])
            continue
        parent[a] = b
        links[r, c] |= bit
        links[rr, cc] |= L if bit == R else U
    return links, unused


class NetslideEnv(PuzzleEnv):
    """Netslide (see the module docstring)."""

    params_cls = NetslideParams
    default_params = "3x3b1"
    default_max_size = (5, 5)

    def _obs_spaces(self) -> dict[str, spaces.Space]:
        shape, shape4 = (self.max_h, self.max_w), (self.max_h, self.max_w, 4)
        return {
            "links": spaces.Box(0, 1, shape4, np.int8),
            "barriers": spaces.Box(0, 1, shape4, np.int8),
            "source": spaces.Box(0, 1, shape, np.int8),
            "powered": spaces.Box(0, 1, shape, np.int8),
        }

    def _num_actions(self) -> int:
        return 2 * (self.max_h + self.max_w)

    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        assert isinstance(params, NetslideParams)
        w, h = self.w, self.h = params.w, params.h
        self.wrap = params.wrap
        links, unused = _random_tree(rng, w, h, params.wrap)
        barriers = np.zeros((h, w), np.uint8)
        if not params.wrap:
            barriers[:, -1] |= R
            barriers[:, 0] |= L
            barriers[0, :] |= U
            barriers[-1, :] |= D
        for r, c, bit in unused:
            if rng.random() >= params.barrier:
                continue
            if bit == R and c + 1 < w:
                barriers[r, c] |= R
                barriers[r, c + 1] |= L
            elif bit == D and r + 1 < h:
                barriers[r, c] |= D
                barriers[r + 1, c] |= U
            elif bit == R:                      # a wrapping edge
                barriers[r, c] |= R
                barriers[r, 0] |= L
            else:
                barriers[r, c] |= D
                barriers[0, c] |= U
        self.barriers = barriers
        source = np.zeros((h, w), np.uint8)
        source[h // 2, w // 2] = 1
        self.solution = links.copy()
        moves = params.moves if params.moves is not None else 4 * w * h
        while True:
            # the tile layer: links in the low 4 bits, the source flag in bit 4, shifted together
            tiles = links | (source << 4)
            for kind, index in random_line_moves(rng, w, h, moves):
                shift_line(tiles, kind, index)
            self.tiles = tiles
            self._refresh()
            if not self._solved():
                break
        mw, mh = self.max_w, self.max_h
        self._row_actions = (np.arange(h), mh + np.arange(h))          # right, left
        self._col_actions = (2 * mh + np.arange(w), 2 * mh + mw + np.arange(w))   # down, up

    def _apply(self, action: int) -> None:
        kind, index = decode_line_action(action, self.max_w, self.max_h)
        shift_line(self.tiles, kind, index)
        self._refresh()

    def _refresh(self) -> None:
        r, c = np.argwhere(self.tiles >> 4)[0]
        self._powered_map = connected_from(self.tiles & 15, self.barriers, (int(r), int(c)), self.wrap)

    def _mask(self) -> np.ndarray:
        m = np.zeros(self._num_actions(), bool)
        t = self.tiles
        rows = (t != t[:, :1]).any(axis=1)
        cols = (t != t[:1, :]).any(axis=0)
        for ids in self._row_actions:
            m[ids] = rows
        for ids in self._col_actions:
            m[ids] = cols
        return m

    def _legal(self, action: int) -> bool:
        kind, index = decode_line_action(action, self.max_w, self.max_h)
        if kind in ("right", "left"):
            return index < self.h and bool((self.tiles[index] != self.tiles[index, 0]).any())
        return index < self.w and bool((self.tiles[:, index] != self.tiles[0, index]).any())

    def _powered(self) -> np.ndarray:
        return self._powered_map

    def _observe(self) -> dict[str, np.ndarray]:
        shape4 = (self.max_h, self.max_w, 4)
        links, barriers = np.zeros(shape4, np.int8), np.zeros(shape4, np.int8)
        bits = np.array([R, U, L, D], np.uint8)
        links[:self.h, :self.w] = (self.tiles[..., None] & bits) > 0
        barriers[:self.h, :self.w] = (self.barriers[..., None] & bits) > 0
        source = np.zeros((self.max_h, self.max_w), np.int8)
        source[:self.h, :self.w] = self.tiles >> 4
        powered = np.zeros((self.max_h, self.max_w), np.int8)
        powered[:self.h, :self.w] = self._powered()
        return {"links": links, "barriers": barriers, "source": source, "powered": powered}

    def _solved(self) -> bool:
        return bool(self._powered().all())

    def _state(self) -> dict[str, Any]:
        return {"links": (self.tiles & 15).copy(), "source": (self.tiles >> 4).copy(),
                "barriers": self.barriers.copy()}

    def _state_key(self) -> bytes:
        return self.tiles.tobytes()

    def _cell_rgb(self) -> np.ndarray:
        powered = self._powered()
        n_links = np.array([bin(int(v)).count("1") for v in range(16)])[self.tiles & 15]
        img = np.zeros((self.h, self.w, 3), np.uint8)
        img[..., 0] = np.where(powered, 60, 200)
        img[..., 1] = np.where(powered, 200, 60)
        img[..., 2] = (40 * n_links).astype(np.uint8)
        img[(self.tiles >> 4).astype(bool)] = (255, 255, 255)
        return img
