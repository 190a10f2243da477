"""Common machinery of the logic-puzzle environments.

Every puzzle of :mod:`magister.examples.puzzles` is a :class:`PuzzleEnv`: a :class:`gymnasium.Env` whose
instance is described by a *parameter string* in the style of Simon Tatham's Portable Puzzle Collection
(``"5x5c"`` for Flip, ``"12x12c6m5"`` for Flood …) optionally followed by ``#seed`` — the same seed always
generates the same instance. This module holds what the puzzles share:

* :class:`PuzzleParams`, the parsed parameters (a frozen dataclass per puzzle) with the parameter-string
  round trip ``parse``/``format`` and a compact integer form ``to_ints``/``from_ints`` for task encodings;
* :func:`split_seed` and :func:`parse_size` for the ``"WxH…#seed"`` syntax;
* :class:`PuzzleEnv`, which does the episode bookkeeping: padding every board to a fixed maximum size with
  a validity mask (so sizes can be mixed in one batch), action masks, rewards (+1 solved, -1 irreversible
  failure, 0 otherwise), truncation at a step limit, optional cut-off after repeated states, ``info`` with
  ``success``, ``failure``, ``params`` (``"<params>#<seed>"``, reproduces the instance) and ``state`` (a
  :class:`PuzzleState` copy of the internal state), switching the instance on reset with
  ``options={"params": "5x5c#17"}``, and an optional RGB rendering.

Sizes follow the collection: ``WxH`` is width (columns) times height (rows); boards are numpy arrays of shape
``(H, W)`` padded to ``(max_height, max_width)``.

Actions outside the mask are legal no-ops: the state does not change, but the step counts towards the step
limit (default: a multiple of the board's cell count, per puzzle), so every episode ends.

Repeated states (the PUZZLES benchmark's early termination, Estermann et al. 2024, Appendix B.6): with
``repeat_limit=k`` an episode stops as soon as one state has been seen more than ``k`` times. The episode is
reported as *truncated*, not terminated, because the puzzle is not over: bootstrapping from the last state is
still correct.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

logger = logging.getLogger(__name__)

__all__ = ["PuzzleParams", "ShuffleParams", "PuzzleEnv", "PuzzleState", "split_seed", "parse_size",
           "pad_board", "check_ints", "check_range", "take_int", "PALETTE"]

P = TypeVar("P", bound="PuzzleParams")

_SEED_RE = re.compile(r"^(?P<body>[^#]*)(?:#(?P<seed>\d+))?$")
_SIZE_RE = re.compile(r"^(?P<w>\d+)x(?P<h>\d+)")


def split_seed(text: str) -> tuple[str, int | None]:
    """Split ``"5x5c#17"`` into ``("5x5c", 17)``; no ``#`` gives seed ``None``.

    >>> split_seed("5x5c#17")
    ('5x5c', 17)
    >>> split_seed("3x3r")
    ('3x3r', None)
    """
    if not isinstance(text, str):
        raise TypeError(f"a parameter string must be a str, got {type(text).__name__}")
    m = _SEED_RE.match(text.strip())
    if m is None:
        raise ValueError(f"bad parameter string {text!r}: expected '<params>' or '<params>#<seed>' with a "
                         "non-negative integer seed")
    seed = m.group("seed")
    return m.group("body"), (int(seed) if seed is not None else None)


def parse_size(text: str, what: str) -> tuple[int, int, str]:
    """Read a leading ``WxH`` and return ``(w, h, rest)``.

    >>> parse_size("12x10c6m5", "Flood")
    (12, 10, 'c6m5')
    """
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(f"bad {what} parameters {text!r}: expected a size 'WxH' first, e.g. '5x5'")
    return int(m.group("w")), int(m.group("h")), text[m.end():]


def take_int(rest: str, key: str, what: str, text: str) -> tuple[int | None, str]:
    """``(value, remainder)`` if ``rest`` starts with ``key`` and digits, else ``(None, rest)``."""
    if not rest.startswith(key):
        return None, rest
    m = re.match(r"\d+", rest[len(key):])
    if m is None:
        raise ValueError(f"bad {what} parameters {text!r}: '{key}' must be followed by an integer")
    return int(m.group()), rest[len(key) + m.end():]


def pad_board(board: np.ndarray, shape: tuple[int, ...], fill: int | float = 0) -> np.ndarray:
    """Copy ``board`` into the top-left corner of a ``shape`` array filled with ``fill``.

    >>> pad_board(np.ones((1, 2), np.int8), (2, 3)).tolist()
    [[1, 1, 0], [0, 0, 0]]
    """
    out = np.full(shape, fill, dtype=board.dtype)
    out[tuple(slice(0, n) for n in board.shape)] = board
    return out


def check_range(what: str, name: str, value: int, lo: int, hi: int | None = None) -> None:
    """Raise ``ValueError`` unless ``lo <= value <= hi`` (``hi=None``: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} {name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{what} {name} must be {bound}, got {value}")


@dataclass(frozen=True)
class PuzzleParams(ABC):
    """Parameters of one puzzle (without the seed). Subclasses add their fields and validate them.

    Every subclass has ``w`` (width) and ``h`` (height) — Untangle uses ``w = h = 1`` for its point count
    — and implements :meth:`parse`, :meth:`format`, :meth:`to_ints`, :meth:`from_ints`.
    """

    #: Name of the puzzle as in the collection.
    puzzle: ClassVar[str] = ""

    @classmethod
    @abstractmethod
    def parse(cls: type[P], text: str) -> P:
        """Parse a parameter string without seed (``ValueError`` on bad input)."""

    @abstractmethod
    def format(self) -> str:
        """The canonical parameter string; ``type(p).parse(p.format()) == p``."""

    @abstractmethod
    def to_ints(self) -> tuple[int, ...]:
        """A compact tuple of ints (used in encoded tasks)."""

    @classmethod
    @abstractmethod
    def from_ints(cls: type[P], values: tuple[int, ...] | list[int]) -> P:
        """Inverse of :meth:`to_ints` (``ValueError`` on bad input)."""

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)``; the board arrays have shape ``(height, width)``."""
        return int(getattr(self, "w")), int(getattr(self, "h"))  # noqa: B009

    def __str__(self) -> str:
        return self.format()


class PuzzleState(Mapping):
    """Read-only mapping holding a copy of a puzzle's internal state (``info["state"]``).

    It is deliberately *not* a ``dict``: Gymnasium's vector envs stack dict entries of ``info`` into batched
    arrays, which fails when boards of different sizes are mixed; a ``PuzzleState`` is kept whole (one
    object per env) and pickles across processes.

    >>> s = PuzzleState({"moves": 3})
    >>> s["moves"], dict(s)
    (3, {'moves': 3})
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        if set(self) != set(other):
            return False
        return all(np.array_equal(v, other[k]) if isinstance(v, np.ndarray) else v == other[k]
                   for k, v in self._data.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PuzzleState({self._data!r})"


def check_ints(values: Any, n: int, what: str) -> tuple[int, ...]:
    """Check that ``values`` is a sequence of ``n`` ints (after msgpack: a list)."""
    if not isinstance(values, (tuple, list)) or len(values) != n:
        raise ValueError(f"{what} parameters must be {n} ints, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{what} parameters must be ints, got {values!r}")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class ShuffleParams(PuzzleParams):
    """Parameters ``WxH[m<moves>]`` of the sliding puzzles (Sixteen, Fifteen): a size and an optional number
    of shuffling moves from the solved state (``None``: a full shuffle). Subclasses set ``puzzle``.
    """

    w: int
    h: int
    moves: int | None = None

    def __post_init__(self) -> None:
        name = self.puzzle.capitalize()
        check_range(name, "width", self.w, 2)
        check_range(name, "height", self.h, 2)
        if self.moves is not None:
            check_range(name, "shuffle moves", self.moves, 1)

    @classmethod
    def parse(cls: type[P], text: str) -> P:
        name = cls.puzzle.capitalize()
        w, h, rest = parse_size(text, name)
        moves, rest = take_int(rest, "m", name, text)
        if rest:
            raise ValueError(f"bad {name} parameters {text!r}: unexpected {rest!r}; expected 'WxH[m<moves>]'")
        return cls(w, h, moves or None)  # type: ignore[call-arg]

    def format(self) -> str:
        return f"{self.w}x{self.h}" + (f"m{self.moves}" if self.moves else "")

    def to_ints(self) -> tuple[int, ...]:
        return (self.w, self.h, self.moves or 0)

    @classmethod
    def from_ints(cls: type[P], values: tuple[int, ...] | list[int]) -> P:
        w, h, m = check_ints(values, 3, cls.puzzle.capitalize())
        return cls(w, h, m or None)  # type: ignore[call-arg]


class PuzzleEnv(gym.Env):
    """Base class of the puzzle environments.

    Args:
        params: A parameter string (``"5x5c"`` or ``"5x5c#17"``) or a :class:`PuzzleParams` of this puzzle;
            ``None`` uses the puzzle's default (the collection's human-easy preset).
        max_size: ``(max_width, max_height)`` (or one int for both) that fixes the observation and action
            spaces; any instance up to this size can be played by the same env. Defaults to the puzzle's.
        max_steps: Truncate the episode after this many steps (``None``: the puzzle's default, which grows
            with the board size; ``0``: never).
        repeat_limit: If set, truncate as soon as a state has been visited more than this many times.
        rgb_obs: Add an ``"rgb"`` image (uint8, ``(max_h * cell_px, max_w * cell_px, 3)``) to observations.
        render_mode: ``None`` or ``"rgb_array"``.
        cell_px: Pixels per board cell in renderings.

    Subclasses set :attr:`params_cls`, :attr:`default_params`, :attr:`default_max_size` and implement the
    ``_generate``, ``_apply``, ``_mask``, ``_observe``, ``_solved``, ``_state`` and ``_cell_rgb`` hooks.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 4}
    params_cls: ClassVar[type[PuzzleParams]]
    default_params: ClassVar[str] = ""
    default_max_size: ClassVar[tuple[int, int]] = (8, 8)
    #: Whether the game has an irreversible failure (reward -1).
    can_fail: ClassVar[bool] = False

    def __init__(
        self,
        params: str | PuzzleParams | None = None,
        *,
        max_size: int | tuple[int, int] | None = None,
        max_steps: int | None = None,
        repeat_limit: int | None = None,
        rgb_obs: bool = False,
        render_mode: str | None = None,
        cell_px: int = 8,
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, "
                             f"got {render_mode!r}")
        self.render_mode = render_mode
        if max_size is None:
            max_size = self.default_max_size
        if isinstance(max_size, (int, np.integer)):
            max_size = (int(max_size), int(max_size))
        if (not isinstance(max_size, (tuple, list)) or len(max_size) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
                       for v in max_size)):
            raise ValueError(f"max_size must be a positive int or (max_width, max_height), got {max_size!r}")
        self.max_w, self.max_h = int(max_size[0]), int(max_size[1])
        if max_steps is not None:
            check_range("PuzzleEnv", "max_steps", max_steps, 0)
        if repeat_limit is not None:
            check_range("PuzzleEnv", "repeat_limit", repeat_limit, 1)
        check_range("PuzzleEnv", "cell_px", cell_px, 1)
        self._max_steps_arg = max_steps
        self.repeat_limit = repeat_limit
        self.rgb_obs = bool(rgb_obs)
        self.cell_px = int(cell_px)
        self.params, self._fixed_seed = self._coerce(params if params is not None else self.default_params)
        obs_spaces = dict(self._obs_spaces())
        obs_spaces["valid"] = spaces.Box(0, 1, (self.max_h, self.max_w), np.int8)
        if self.rgb_obs:
            obs_spaces["rgb"] = spaces.Box(0, 255, self._rgb_shape(), np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Discrete(self._num_actions())
        self.instance_seed: int | None = None
        self.steps = 0
        self._visits: dict[bytes, int] = {}
        self._done = True

    # -- parameters ---------------------------------------------------------------------------------
    @classmethod
    def parse_params(cls, text: str) -> tuple[PuzzleParams, int | None]:
        """Parse ``"<params>[#seed]"`` into ``(params, seed)``."""
        body, seed = split_seed(text)
        return cls.params_cls.parse(body), seed

    @classmethod
    def format_params(cls, params: PuzzleParams, seed: int | None = None) -> str:
        """Inverse of :meth:`parse_params`."""
        if not isinstance(params, cls.params_cls):
            raise TypeError(f"expected {cls.params_cls.__name__}, got {type(params).__name__}")
        text = params.format()
        if seed is not None:
            check_range(cls.__name__, "seed", seed, 0)
            text += f"#{int(seed)}"
        return text

    def _coerce(self, params: str | PuzzleParams) -> tuple[PuzzleParams, int | None]:
        if isinstance(params, str):
            p, seed = self.parse_params(params)
        elif isinstance(params, self.params_cls):
            p, seed = params, None
        else:
            raise TypeError(f"params must be a parameter string or {self.params_cls.__name__}, "
                            f"got {params!r}")
        w, h = self._board_shape_for(p)
        if w > self.max_w or h > self.max_h:
            raise ValueError(f"{type(self).__name__} instance {p.format()!r} needs a {w}x{h} board but the "
                             f"env's max_size is {self.max_w}x{self.max_h}")
        return p, seed

    def _board_shape_for(self, params: PuzzleParams) -> tuple[int, int]:
        """(width, height) of the padded board an instance needs (Untangle overrides this)."""
        return params.size

    def set_params(self, params: str | PuzzleParams) -> None:
        """Use these parameters (and seed, if the string has ``#seed``) from the next reset on."""
        self.params, self._fixed_seed = self._coerce(params)

    @property
    def params_string(self) -> str:
        """The current instance as ``"<params>#<seed>"`` (reproduces it exactly)."""
        return self.format_params(self.params, self.instance_seed)

    @property
    def max_steps(self) -> int:
        """The step limit of the current parameters (``0``: none)."""
        if self._max_steps_arg is not None:
            return self._max_steps_arg
        return self._default_max_steps(self.params)

    # -- the Gymnasium API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start a new instance.

        ``options`` may hold ``"params"`` (a parameter string, optionally with ``#seed``, or a
        :class:`PuzzleParams`; kept for later resets) and ``"instance_seed"`` (an int; generates exactly
        this instance once). Without a fixed seed, the instance seed is drawn from ``np_random``.
        """
        super().reset(seed=seed)
        instance_seed: int | None = None
        if options:
            unknown = set(options) - {"params", "instance_seed"}
            if unknown:
                raise KeyError(f"unknown reset options {sorted(unknown)}; expected 'params' and/or "
                               "'instance_seed'")
            if "params" in options:
                self.set_params(options["params"])
            if "instance_seed" in options:
                instance_seed = options["instance_seed"]
                check_range(type(self).__name__, "instance_seed", instance_seed, 0)
        if instance_seed is None:
            instance_seed = self._fixed_seed
        if instance_seed is None:
            instance_seed = int(self.np_random.integers(2**31 - 1))
        self.instance_seed = int(instance_seed)
        self._generate(self.params, np.random.default_rng(self.instance_seed))
        self.steps = 0
        self._done = False
        self._visits = {}
        if self.repeat_limit is not None:
            self._visits[self._state_key()] = 1
        return self._obs(), self._info(False, False)

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply one action. Masked-out actions are legal no-ops (the state does not change)."""
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step() called after the episode ended; call reset()")
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, (int, np.integer)) \
                or not 0 <= action < self.action_space.n:
            raise ValueError(f"action must be an int in [0, {self.action_space.n}), got {action!r}")
        action = int(action)
        if self._legal(action):
            self._apply(action)
        self.steps += 1
        solved = self._solved()
        failed = (not solved) and self.can_fail and self._failed()
        terminated = solved or failed
        reward = 1.0 if solved else (-1.0 if failed else 0.0)
        truncated = False
        repeated = False
        if not terminated:
            if self.repeat_limit is not None:
                key = self._state_key()
                n = self._visits.get(key, 0) + 1
                self._visits[key] = n
                repeated = n > self.repeat_limit
            limit = self.max_steps
            truncated = repeated or (limit > 0 and self.steps >= limit)
        self._done = terminated or truncated
        info = self._info(solved, failed)
        info["repeated"] = repeated
        return self._obs(), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Boolean array of shape ``(action_space.n,)``: true for actions that change the state."""
        return self._mask()

    def render(self) -> np.ndarray | None:
        """An RGB image of the board, padded to the maximum size (``render_mode="rgb_array"``)."""
        if self.render_mode is None:
            return None
        return self._rgb()

    # -- helpers ------------------------------------------------------------------------------------
    def _legal(self, action: int) -> bool:
        return bool(self._mask()[action])

    def _obs(self) -> dict[str, np.ndarray]:
        obs = self._observe()
        w, h = self._board_shape_for(self.params)
        valid = np.zeros((self.max_h, self.max_w), np.int8)
        valid[:h, :w] = 1
        obs["valid"] = valid
        if self.rgb_obs:
            obs["rgb"] = self._rgb()
        return obs

    def _rgb_shape(self) -> tuple[int, int, int]:
        return (self.max_h * self.cell_px, self.max_w * self.cell_px, 3)

    def _rgb(self) -> np.ndarray:
        cells = pad_board(self._cell_rgb().astype(np.uint8), (self.max_h, self.max_w, 3), 0)
        return np.repeat(np.repeat(cells, self.cell_px, axis=0), self.cell_px, axis=1)

    def _info(self, solved: bool, failed: bool) -> dict[str, Any]:
        return {
            "success": bool(solved),
            "failure": bool(failed),
            "params": self.params_string,
            "steps": self.steps,
            "state": PuzzleState(self._state()),
        }

    def _state_key(self) -> bytes:
        """Bytes identifying the state (for repeated-state detection)."""
        return b"".join(np.ascontiguousarray(v).tobytes() for v in self._state().values()
                        if isinstance(v, np.ndarray))

    def _failed(self) -> bool:
        """Whether the game is lost irreversibly (only asked when ``can_fail``)."""
        return False

    def _default_max_steps(self, params: PuzzleParams) -> int:
        w, h = params.size
        return 20 * w * h

    # -- puzzle hooks -------------------------------------------------------------------------------
    @abstractmethod
    def _obs_spaces(self) -> dict[str, spaces.Space]:
        """The puzzle's observation entries (without ``valid``/``rgb``), fixed by the max size."""

    @abstractmethod
    def _num_actions(self) -> int:
        """Size of the Discrete action space, fixed by the max size."""

    @abstractmethod
    def _generate(self, params: PuzzleParams, rng: np.random.Generator) -> None:
        """Create a new instance in place."""

    @abstractmethod
    def _apply(self, action: int) -> None:
        """Apply an action that the mask allows."""

    @abstractmethod
    def _mask(self) -> np.ndarray:
        """Bool array ``(n,)`` of the actions that change the state."""

    @abstractmethod
    def _observe(self) -> dict[str, np.ndarray]:
        """The puzzle's observation entries, padded to the max size."""

    @abstractmethod
    def _solved(self) -> bool:
        """Whether the current state is solved."""

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """A copy of the internal state (goes to ``info["state"]``)."""

    @abstractmethod
    def _cell_rgb(self) -> np.ndarray:
        """``(h, w, 3)`` colours of the board cells, for rendering."""


#: A small palette for colour-indexed boards (index 0 is the background).
PALETTE = np.array(
    [[32, 32, 32], [230, 60, 60], [60, 180, 75], [60, 110, 230], [255, 225, 25], [245, 130, 48],
     [145, 30, 180], [70, 240, 240], [240, 50, 230], [170, 110, 40], [250, 190, 190], [255, 255, 255]],
    dtype=np.uint8,
)
