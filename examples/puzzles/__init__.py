"""Logic puzzles from Simon Tatham's Portable Puzzle Collection as Gymnasium environments.

Eight puzzles written from their rules — Flip, Flood, Sixteen, Fifteen, Netslide, Pegs, Same Game and
Untangle — each a :class:`~magister.examples.puzzles.base.PuzzleEnv` with parameter strings in the
collection's style (``"5x5c#17"``), fixed-shape padded observations with a validity mask, a fixed
``Discrete`` action space with ``action_masks()``, and rewards +1 solved / -1 irreversible failure.
:mod:`magister.examples.puzzles.task` adds the task space over ``(puzzle, parameters, seed)``, the difficulty
ladders and :class:`~magister.examples.puzzles.task.PuzzleTaskWrapper`.

>>> from magister.examples.puzzles import PuzzleTask, PuzzleTaskSpace, PuzzleTaskWrapper, make_puzzle_env
>>> space = PuzzleTaskSpace({"flip": ["3x3c", "4x4c"]}, seed=0)
>>> env = PuzzleTaskWrapper(make_puzzle_env("flip", space), space)
>>> obs, info = env.reset(options={"task": PuzzleTask("flip", "4x4c", 7)})
>>> info["params"]
'4x4c#7'
"""

from .base import PuzzleEnv, PuzzleParams, split_seed
from .fifteen import FifteenEnv, FifteenParams
from .flip import FlipEnv, FlipParams
from .flood import FloodEnv, FloodParams
from .netslide import NetslideEnv, NetslideParams
from .pegs import PegsEnv, PegsParams
from .samegame import SameGameEnv, SameGameParams
from .sixteen import SixteenEnv, SixteenParams
from .task import (
    LADDERS,
    PUZZLE_NAMES,
    PUZZLES,
    PuzzleDifficultyWrapper,
    PuzzleTask,
    PuzzleTaskSpace,
    PuzzleTaskWrapper,
    depth_ladder,
    ladder,
    make_puzzle_env,
    parse_task,
)
from .untangle import UntangleEnv, UntangleParams

__all__ = [
    "PuzzleEnv", "PuzzleParams", "split_seed",
    "FlipEnv", "FlipParams", "FloodEnv", "FloodParams", "SixteenEnv", "SixteenParams",
    "FifteenEnv", "FifteenParams", "NetslideEnv", "NetslideParams", "PegsEnv", "PegsParams",
    "SameGameEnv", "SameGameParams", "UntangleEnv", "UntangleParams",
    "PUZZLES", "PUZZLE_NAMES", "LADDERS", "PuzzleTask", "PuzzleTaskSpace", "PuzzleTaskWrapper",
    "PuzzleDifficultyWrapper",
    "ladder", "depth_ladder", "make_puzzle_env", "parse_task",
]
