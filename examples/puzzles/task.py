"""The puzzle task space, the difficulty ladders, and the task wrapper.

A puzzle **task** is ``(puzzle, parameters, seed)`` — :class:`PuzzleTask`, e.g.
``PuzzleTask("flip", "3x3c", 17)``, the same instance as ``FlipEnv("3x3c#17")``. Its **encoded** form is a
compact, msgpack-safe tuple ``(puzzle index, parameter ints, seed)``, e.g. ``(0, (3, 3, 0, 0), 17)``; the
puzzle index is the position in :data:`PUZZLE_NAMES` and the ints are the puzzle's
:meth:`~magister.examples.puzzles.base.PuzzleParams.to_ints`.

:class:`PuzzleTaskSpace` *contains* every valid instance of its puzzles up to a maximum board size and within
its seed range, and *samples* from a configured list of parameter strings (default: the ladders below) with
uniform seeds. It supports ``mutate`` for ACCEL (board size ±1, scramble depth ±k, or a new seed) and
``split`` into disjoint seed ranges.

Ladders (:func:`ladder`) follow the PUZZLES benchmark's recommendation (Estermann et al. 2024, Table 7):
the easiest setting first, then the human-easy preset (with intermediate sizes in between where the two are
far apart), then larger sizes. :func:`depth_ladder` varies the scramble-depth knobs the collection's
generators expose but the benchmark never varied: Sixteen/Fifteen/Netslide shuffle moves ``m``, Flip
presses ``p`` (our extension) and Flood slack (extra moves ``m``).

>>> space = PuzzleTaskSpace({"flip": ["3x3c"]}, seed_range=(0, 10), seed=0)
>>> task = space.sample()
>>> task.puzzle, task.params, 0 <= task.seed < 10
('flip', '3x3c', True)
>>> space.decode(space.encode(PuzzleTask("flip", "4x4c", 3)))
PuzzleTask(puzzle='flip', params='4x4c', seed=3)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from ...env_wrappers.task_wrapper import TaskWrapper
from ...task_spaces.base import EncodedTask, TaskSpace
from .base import PuzzleEnv, PuzzleParams
from .fifteen import FifteenEnv
from .flip import FlipEnv
from .flood import FloodEnv
from .netslide import NetslideEnv
from .pegs import PegsEnv
from .samegame import SameGameEnv
from .sixteen import SixteenEnv
from .untangle import UntangleEnv

logger = logging.getLogger(__name__)

__all__ = ["PUZZLES", "PUZZLE_NAMES", "LADDERS", "PuzzleTask", "PuzzleTaskSpace", "PuzzleTaskWrapper",
           "PuzzleDifficultyWrapper",
           "ladder", "depth_ladder", "make_puzzle_env", "parse_task"]

#: Puzzle name -> environment class. The order fixes the puzzle index of encoded tasks.
PUZZLES: dict[str, type[PuzzleEnv]] = {
    "flip": FlipEnv,
    "flood": FloodEnv,
    "sixteen": SixteenEnv,
    "fifteen": FifteenEnv,
    "netslide": NetslideEnv,
    "pegs": PegsEnv,
    "samegame": SameGameEnv,
    "untangle": UntangleEnv,
}
PUZZLE_NAMES: tuple[str, ...] = tuple(PUZZLES)

#: Recommended progressions: easiest (Table 7), intermediate sizes, human-easy preset (Table 7), larger.
LADDERS: dict[str, tuple[str, ...]] = {
    "flip": ("3x3c", "4x4c", "5x5c", "6x6c"),
    "flood": ("3x3c6m5", "4x4c6m5", "6x6c6m5", "8x8c6m5", "10x10c6m5", "12x12c6m5"),
    "sixteen": ("2x3", "3x3", "4x4", "5x5"),
    "fifteen": ("2x2", "2x3", "3x3", "3x4", "4x4", "5x5"),
    "netslide": ("2x3b1", "3x3b1", "4x4b1", "5x5b1"),
    "pegs": ("4x4random", "5x5random", "5x7cross", "7x7cross", "7x7octagon"),
    "samegame": ("2x3c3s2", "3x3c3s2", "4x4c3s2", "5x5c3s2", "6x6c3s2", "8x8c3s2"),
    "untangle": ("4", "5", "6", "8", "10", "12"),
}

_PUZZLE_TEXT = {
    "flip": "Flip: press cells to toggle the lights around them until every light is off",
    "flood": "Flood: recolour the top-left region until the grid is one colour, within a move limit",
    "sixteen": "Sixteen: shift rows and columns cyclically until the numbers are in order",
    "fifteen": "Fifteen: slide tiles into the gap until the numbers are in order",
    "netslide": "Netslide: shift rows and columns until the network tiles connect into one tree",
    "pegs": "Pegs: jump pegs over each other, removing the jumped peg, until one peg remains",
    "samegame": "Same Game: remove groups of two or more same-coloured cells until the grid is empty",
    "untangle": "Untangle: move the points until no two edges of the graph cross",
}


class PuzzleTask(NamedTuple):
    """A decoded puzzle task: puzzle name, canonical parameter string (no seed), instance seed."""

    puzzle: str
    params: str
    seed: int

    def __str__(self) -> str:
        return f"{self.puzzle}:{self.params}#{self.seed}"


def parse_task(text: str) -> PuzzleTask:
    """Parse ``"flip:3x3c#17"`` into a :class:`PuzzleTask` (parameters made canonical).

    >>> parse_task("netslide:3x3b1.0#2")
    PuzzleTask(puzzle='netslide', params='3x3b1', seed=2)
    """
    if not isinstance(text, str) or ":" not in text or "#" not in text:
        raise ValueError(f"a puzzle task string looks like 'flip:3x3c#17', got {text!r}")
    puzzle, rest = text.split(":", 1)
    cls = _env_class(puzzle)
    params, seed = cls.parse_params(rest)
    assert seed is not None
    return PuzzleTask(puzzle, params.format(), seed)


def _env_class(puzzle: str) -> type[PuzzleEnv]:
    if puzzle not in PUZZLES:
        raise ValueError(f"unknown puzzle {puzzle!r}; expected one of {PUZZLE_NAMES}")
    return PUZZLES[puzzle]


def ladder(puzzle: str) -> list[str]:
    """The recommended progression of parameter strings for ``puzzle`` (easy to hard).

    >>> ladder("sixteen")
    ['2x3', '3x3', '4x4', '5x5']
    """
    _env_class(puzzle)
    return list(LADDERS[puzzle])


def depth_ladder(puzzle: str, params: str, depths: Sequence[int] | None = None) -> list[str]:
    """Parameter strings that vary the scramble-depth knob of one size, easy to hard.

    The knob is Flip presses ``p``, Sixteen/Fifteen/Netslide shuffle moves ``m`` (the last rung is the
    generator's default, a full shuffle) and Flood slack ``m`` (extra moves; fewer is harder). Default depths:
    1, 2, 3, 5, 8, 13, ... (Fibonacci) up to the board's cell count, or slack 10, 5, 3, 2, 1, 0.

    >>> depth_ladder("sixteen", "3x3")
    ['3x3m1', '3x3m2', '3x3m3', '3x3m5', '3x3m8', '3x3']
    >>> depth_ladder("flood", "4x4c6m5", [4, 0])
    ['4x4c6m4', '4x4c6m0']
    """
    cls = _env_class(puzzle)
    p = cls.params_cls.parse(params)
    if puzzle not in _DEPTH_FIELD:
        raise ValueError(f"puzzle {puzzle!r} has no scramble-depth knob; knobs exist for "
                         f"{sorted(_DEPTH_FIELD)}")
    field = _DEPTH_FIELD[puzzle]
    w, h = p.size
    if depths is None:
        if puzzle == "flood":
            depths = [10, 5, 3, 2, 1, 0]
        else:
            depths, a, b = [], 1, 2
            while a < w * h:
                depths.append(a)
                a, b = b, a + b
    out = [_replace(p, **{field: int(d)}).format() for d in depths]
    if puzzle in ("sixteen", "fifteen", "netslide"):
        out.append(_replace(p, moves=None).format())
    return out


#: The depth-knob field of each puzzle's parameters.
_DEPTH_FIELD = {"flip": "presses", "flood": "extra", "sixteen": "moves", "fifteen": "moves",
                "netslide": "moves"}


def _replace(params: PuzzleParams, **changes: Any) -> PuzzleParams:
    return dataclasses.replace(params, **changes)


class PuzzleTaskSpace(TaskSpace[PuzzleTask]):
    """Tasks ``(puzzle, parameters, seed)`` over one or more puzzles (see the module docstring).

    Args:
        params: What :meth:`sample` draws from: a mapping ``puzzle -> parameter strings`` or a sequence of
            ``"puzzle:params"`` strings (default: every puzzle's :func:`ladder`).
        seed_range: Instance seeds ``lo <= seed < hi`` (default ``(0, 2**31 - 1)``).
        max_size: Largest board per puzzle, ``{puzzle: (w, h)}`` or one ``(w, h)``/int for all (default: each
            env's default max size). Tasks with larger boards are not in the space.
        depth_step: Largest change of the scramble depth in one :meth:`mutate`.
        seed: Seed of the space's generator.
    """

    def __init__(
        self,
        params: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
        *,
        seed_range: tuple[int, int] = (0, 2**31 - 1),
        max_size: Mapping[str, tuple[int, int] | int] | tuple[int, int] | int | None = None,
        depth_step: int = 2,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        if params is None:
            params = {name: LADDERS[name] for name in PUZZLE_NAMES}
        if isinstance(params, Mapping):
            pairs = [(puzzle, text) for puzzle, texts in params.items() for text in _as_list(texts, puzzle)]
        elif isinstance(params, Sequence) and not isinstance(params, str):
            pairs = []
            for item in params:
                if not isinstance(item, str) or ":" not in item:
                    raise ValueError(f"parameter entries look like 'flip:3x3c', got {item!r}")
                pairs.append(tuple(item.split(":", 1)))  # type: ignore[arg-type]
        else:
            raise TypeError(f"params must be a mapping puzzle -> parameter strings or a list of "
                            f"'puzzle:params' strings, got {type(params).__name__}")
        if not pairs:
            raise ValueError("PuzzleTaskSpace needs at least one parameter string to sample from")
        if (not isinstance(seed_range, (tuple, list)) or len(seed_range) != 2
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in seed_range)
                or not 0 <= seed_range[0] < seed_range[1]):
            raise ValueError(f"seed_range must be (lo, hi) with 0 <= lo < hi, got {seed_range!r}")
        self.seed_range = (int(seed_range[0]), int(seed_range[1]))
        if isinstance(depth_step, bool) or not isinstance(depth_step, (int, np.integer)) or depth_step < 1:
            raise ValueError(f"depth_step must be a positive int, got {depth_step!r}")
        self.depth_step = int(depth_step)
        for puzzle, _ in pairs:
            _env_class(puzzle)
        puzzles = sorted({p for p, _ in pairs}, key=PUZZLE_NAMES.index)
        self.max_size: dict[str, tuple[int, int]] = {}
        for puzzle in puzzles:
            ms: Any = max_size.get(puzzle) if isinstance(max_size, Mapping) else max_size
            if ms is None:
                ms = _env_class(puzzle).default_max_size
            if isinstance(ms, (int, np.integer)):
                ms = (int(ms), int(ms))
            if not isinstance(ms, (tuple, list)) or len(ms) != 2 or min(ms) < 1:
                raise ValueError(f"max_size for {puzzle!r} must be (width, height) or an int, got {ms!r}")
            self.max_size[puzzle] = (int(ms[0]), int(ms[1]))
        self.puzzles = tuple(puzzles)
        self.choices: list[tuple[int, tuple[int, ...]]] = []
        for puzzle, text in pairs:
            p = _env_class(puzzle).params_cls.parse(text)
            self._check_params(puzzle, p)
            self.choices.append((PUZZLE_NAMES.index(puzzle), p.to_ints()))

    # -- contract -------------------------------------------------------------------------------------
    @property
    def num_tasks(self) -> int | None:
        return None

    def sample(self) -> PuzzleTask:
        return self.decode(self.sample_encoded(1)[0])

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        rng = self._rng if rng is None else rng
        idx = rng.integers(len(self.choices), size=k)
        seeds = rng.integers(self.seed_range[0], self.seed_range[1], size=k)
        return [(self.choices[i][0], self.choices[i][1], int(s)) for i, s in zip(idx.tolist(), seeds)]

    def contains(self, task: Any) -> bool:
        try:
            self.encode(task)
        except (ValueError, TypeError, KeyError):
            return False
        return True

    def encode(self, task: PuzzleTask) -> EncodedTask:
        if not isinstance(task, tuple) or len(task) != 3:
            raise ValueError(f"task {task!r} is not a (puzzle, params, seed) task of {self!r}")
        puzzle, text, seed = task
        if not isinstance(puzzle, str) or puzzle not in self.puzzles:
            raise ValueError(f"task {task!r}: puzzle must be one of {self.puzzles} in {self!r}")
        if not isinstance(text, str) or "#" in text:
            raise ValueError(f"task {task!r}: params must be a parameter string without '#seed'")
        p = _env_class(puzzle).params_cls.parse(text)
        self._check_params(puzzle, p)
        self._check_seed(seed, task)
        return (PUZZLE_NAMES.index(puzzle), p.to_ints(), int(seed))

    def decode(self, encoded: EncodedTask) -> PuzzleTask:
        if not isinstance(encoded, (tuple, list)) or len(encoded) != 3:
            raise ValueError(f"encoded task {encoded!r} is not (puzzle index, params, seed) of {self!r}")
        index, ints, seed = encoded
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                or not 0 <= index < len(PUZZLE_NAMES) or PUZZLE_NAMES[index] not in self.puzzles:
            raise ValueError(f"encoded task {encoded!r}: bad puzzle index for {self!r}")
        puzzle = PUZZLE_NAMES[index]
        p = _env_class(puzzle).params_cls.from_ints(ints)
        self._check_params(puzzle, p)
        self._check_seed(seed, encoded)
        return PuzzleTask(puzzle, p.format(), int(seed))

    def _check_params(self, puzzle: str, p: PuzzleParams) -> None:
        mw, mh = self.max_size[puzzle]
        w, h = p.size
        if w > mw or h > mh:
            raise ValueError(f"{puzzle} {p.format()!r} is larger than the space's max size {mw}x{mh}")

    def _check_seed(self, seed: Any, task: Any) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
                or not self.seed_range[0] <= seed < self.seed_range[1]:
            raise ValueError(f"task {task!r}: seed must be an int in [{self.seed_range[0]}, "
                             f"{self.seed_range[1]}) for {self!r}")

    # -- extras ---------------------------------------------------------------------------------------
    def describe(self, task: PuzzleTask) -> str:
        """Human text, e.g. ``"Flip: press cells ... Parameters 3x3c (3 wide, 3 high), seed 17."``."""
        if isinstance(task, (tuple, list)) and len(task) == 3 and not isinstance(task[0], str):
            task = self.decode(task)
        puzzle, text, seed = task
        p = _env_class(puzzle).params_cls.parse(text)
        w, h = p.size
        knob = ""
        field = _DEPTH_FIELD.get(puzzle)
        value = getattr(p, field) if field else None
        if field == "extra":
            knob = f", {value} moves of slack beyond the solver's"
        elif value:
            knob = f", scrambled with {value} {'presses' if field == 'presses' else 'moves'}"
        shape = f"{w} points" if puzzle == "untangle" else f"{w} wide, {h} high"
        return f"{_PUZZLE_TEXT[puzzle]}. Parameters {text} ({shape}{knob}), seed {seed}."

    @property
    def can_mutate(self) -> bool:
        return True

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> EncodedTask:
        """A small edit: board size ±1, scramble depth ±1..``depth_step``, or a new seed (always valid)."""
        task = self.decode(encoded)
        cls = _env_class(task.puzzle)
        p = cls.params_cls.parse(task.params)
        field = _DEPTH_FIELD.get(task.puzzle)
        ops = ["size", "reseed"] + (["depth"] if field else [])
        for _ in range(32):
            op = ops[int(rng.integers(len(ops)))]
            try:
                if op == "reseed":
                    return (encoded[0], p.to_ints(), self._new_seed(int(encoded[2]), rng))
                if op == "size":
                    d = 1 if rng.random() < 0.5 else -1
                    w, h = p.size
                    if task.puzzle == "untangle":           # one more or one fewer point
                        new = _replace(p, n=w + d)
                    else:
                        which = int(rng.integers(3)) if w != h else 2
                        new = _replace(p, w=w + d * (which != 1), h=h + d * (which != 0))
                else:
                    assert field is not None
                    cur = getattr(p, field)
                    step = int(rng.integers(1, self.depth_step + 1)) * (1 if rng.random() < 0.5 else -1)
                    w, h = p.size
                    base = cur if cur is not None else w * h
                    value = base + step
                    new = _replace(p, **{field: value if (value > 0 or field == "extra") else None})
                if new == p:
                    continue
                self._check_params(task.puzzle, new)
                return (encoded[0], new.to_ints(), int(encoded[2]))
            except (ValueError, TypeError):
                continue
        return (encoded[0], p.to_ints(), self._new_seed(int(encoded[2]), rng))

    def _new_seed(self, current: int, rng: np.random.Generator) -> int:
        """A seed of the range other than ``current`` (when the range has another one)."""
        lo, hi = self.seed_range
        if hi - lo < 2:
            return current
        seed = int(rng.integers(lo, hi - 1))
        return seed + 1 if seed >= current else seed

    def split(self, holdout: float | int | Sequence[Any], seed: int | None = 0
              ) -> tuple[PuzzleTaskSpace, PuzzleTaskSpace]:
        """Split the *seed range*: the last ``holdout`` seeds (a count, or a fraction) are held out."""
        lo, hi = self.seed_range
        n = hi - lo
        if isinstance(holdout, float) and 0 < holdout < 1:
            k = max(1, int(round(holdout * n)))
        elif isinstance(holdout, (int, np.integer)) and not isinstance(holdout, bool) and 0 < holdout < n:
            k = int(holdout)
        else:
            raise ValueError(f"holdout must be a fraction in (0, 1) or a count in [1, {n}) of seeds; "
                             f"explicit task lists are not supported by PuzzleTaskSpace, got {holdout!r}")
        if k >= n:
            raise ValueError(f"holdout {holdout!r} leaves no training seeds in {self.seed_range}")
        params = [f"{PUZZLE_NAMES[i]}:{_env_class(PUZZLE_NAMES[i]).params_cls.from_ints(ints).format()}"
                  for i, ints in self.choices]
        kw = dict(max_size=self.max_size, depth_step=self.depth_step)
        train = PuzzleTaskSpace(params, seed_range=(lo, hi - k), seed=seed, **kw)  # type: ignore[arg-type]
        test = PuzzleTaskSpace(params, seed_range=(hi - k, hi), seed=seed, **kw)  # type: ignore[arg-type]
        return train, test

    def __repr__(self) -> str:
        return (f"PuzzleTaskSpace(puzzles={list(self.puzzles)}, choices={len(self.choices)}, "
                f"seed_range={self.seed_range})")


def _as_list(texts: Any, puzzle: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"parameter strings for {puzzle!r} must be a list of str, got {texts!r}")
    return list(texts)


def make_puzzle_env(puzzle: str, task_space: PuzzleTaskSpace | None = None, **env_kwargs: Any) -> PuzzleEnv:
    """An env of ``puzzle`` whose max size covers every task of ``task_space`` for that puzzle."""
    cls = _env_class(puzzle)
    if task_space is not None and "max_size" not in env_kwargs:
        if puzzle not in task_space.puzzles:
            raise ValueError(f"puzzle {puzzle!r} is not in {task_space!r}")
        env_kwargs["max_size"] = task_space.max_size[puzzle]
    return cls(**env_kwargs)


class PuzzleTaskWrapper(TaskWrapper):
    """Task switching for one puzzle env: ``reset(options={"task": PuzzleTask(...)})`` plays that instance.

    The env's observation and action spaces stay fixed (they depend only on its max size), so any task of
    the space up to that size can be played. ``info["success"]`` (from the env) is the task progress.

    >>> space = PuzzleTaskSpace({"sixteen": ["2x3", "3x3"]}, seed=0)
    >>> env = PuzzleTaskWrapper(make_puzzle_env("sixteen", space), space)
    >>> obs, info = env.reset(options={"task": PuzzleTask("sixteen", "2x3", 5)})
    >>> info["params"], info["task"]
    ('2x3#5', (2, (2, 3, 0), 5))
    """

    def __init__(self, env: gym.Env, task_space: PuzzleTaskSpace, **kwargs: Any) -> None:
        if not isinstance(task_space, PuzzleTaskSpace):
            raise TypeError(f"task_space must be a PuzzleTaskSpace, got {type(task_space).__name__}")
        puzzle_env = env.unwrapped
        if not isinstance(puzzle_env, PuzzleEnv):
            raise TypeError(f"env must wrap a PuzzleEnv, got {type(puzzle_env).__name__}")
        names = [n for n, c in PUZZLES.items() if c is type(puzzle_env)]
        if not names or names[0] not in task_space.puzzles:
            raise ValueError(f"{type(puzzle_env).__name__} plays none of the puzzles of {task_space!r}")
        self.puzzle = names[0]
        mw, mh = task_space.max_size[self.puzzle]
        if mw > puzzle_env.max_w or mh > puzzle_env.max_h:
            raise ValueError(f"the env's max size {puzzle_env.max_w}x{puzzle_env.max_h} is smaller than the "
                             f"task space's {mw}x{mh} for {self.puzzle}; build it with make_puzzle_env")
        super().__init__(env, task_space, **kwargs)

    def change_task(self, task: Any) -> None:
        puzzle, params, seed = task
        if puzzle != self.puzzle:
            raise ValueError(f"task {task!r} is for {puzzle!r} but this env plays {self.puzzle!r}")
        self.env.unwrapped.set_params(f"{params}#{seed}")  # type: ignore[attr-defined]


class PuzzleDifficultyWrapper(TaskWrapper):
    """Task = a *difficulty* (a parameter string); every episode plays a fresh training instance of it.

    A curriculum over instances ``(puzzle, params, seed)`` must estimate each instance's success from the few
    episodes that instance gets; a curriculum over difficulties sees every episode of a difficulty, so its
    estimates (success rates, learnability, learning progress) settle quickly — the usual setting of
    difficulty-mode curricula. The task space is a :class:`~magister.task_spaces.discrete.Discrete` over the
    parameter strings (encoded: their index); on each reset the instance seed is drawn uniformly from
    ``[seed_range[0], seed_range[1])`` by the wrapper's own generator (seeded by ``reset(seed=...)``), so
    held-out seeds outside that range are never trained on.

    >>> from magister.task_spaces.discrete import Discrete
    >>> space = Discrete(tasks=["2x3m1", "3x3m2"])
    >>> env = PuzzleDifficultyWrapper(make_puzzle_env("sixteen", max_size=3), space, seed_range=(0, 100))
    >>> _, info = env.reset(seed=0, options={"task": "3x3m2"})
    >>> info["task"], info["params"].split("#")[0], 0 <= int(info["params"].split("#")[1]) < 100
    (1, '3x3m2', True)
    """

    def __init__(self, env: gym.Env, task_space: TaskSpace, *, seed_range: tuple[int, int] = (0, 2**31 - 1),
                 **kwargs: Any) -> None:
        puzzle_env = env.unwrapped
        if not isinstance(puzzle_env, PuzzleEnv):
            raise TypeError(f"env must wrap a PuzzleEnv, got {type(puzzle_env).__name__}")
        if task_space.num_tasks is None:
            raise ValueError(f"the difficulty space must be finite (a Discrete of parameter strings), "
                             f"got {task_space!r}")
        for text in task_space.tasks:
            type(puzzle_env).params_cls.parse(text)  # ValueError for a string of another puzzle
        lo, hi = seed_range
        if not 0 <= lo < hi:
            raise ValueError(f"seed_range must be (lo, hi) with 0 <= lo < hi, got {seed_range!r}")
        self.seed_range = (int(lo), int(hi))
        self._instance_rng = np.random.default_rng()
        super().__init__(env, task_space, **kwargs)

    def change_task(self, task: Any) -> None:
        self._params = str(task)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._instance_rng = np.random.default_rng(seed)
        instance = int(self._instance_rng.integers(*self.seed_range))
        inner = dict(options or {})
        inner["params"] = f"{self._params}#{instance}"
        return self.env.reset(seed=seed, options=inner)
