"""Tiny Tag: a small two-player pursuit game on a grid, for the PettingZoo parallel API.

Two agents share an ``size x size`` grid with randomly placed obstacles: the ``"chaser"`` tries to catch
the ``"runner"``. Both act simultaneously (``0`` stay, ``1`` up, ``2`` down, ``3`` left, ``4`` right); a move
into a wall or an obstacle leaves the agent in place. The runner is caught when both end a step on the
same cell or when they swap cells. On a catch the chaser gets ``+1``, the runner ``-1``, and the episode
terminates; otherwise every agent gets a reward of 0 and the episode is truncated after ``max_cycles``
steps. At the end of an episode each agent's info carries ``"success"``: 1.0 for the winner (the chaser
after a catch, the runner after surviving to the truncation), 0.0 for the loser.

The **task** is the layout generator's parameters, ``(size, obstacle_density)``: a larger grid and more
obstacles make the chase harder. Obstacles are drawn independently per cell with probability
``obstacle_density``; layouts in which the chaser cannot reach the runner are redrawn (up to 100 times, then
the obstacles are dropped), so every episode is winnable. The observation has the same shape for every
task: an egocentric ``5 x 5`` view with three channels (blocked cell, chaser, runner; cells outside the grid
count as blocked) flattened, followed by the opponent's offset ``(drow, dcol) / (size - 1)`` in ``[-1, 1]``,
77 float32 values in all. :class:`TinyTagTask` is the task wrapper; a task is any ``(size, density)`` pair
with ``3 <= size <= 32`` and ``0 <= density <= 0.5``.

>>> env = TinyTag(size=5, obstacle_density=0.0)
>>> obs, infos = env.reset(seed=0)
>>> sorted(obs), obs["chaser"].shape
(['chaser', 'runner'], (77,))
>>> env.set_layout(7, 0.2)
>>> _ = env.reset(seed=0)
>>> env.grid.shape
(7, 7)
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from ..env_wrappers.pettingzoo_wrapper import PettingZooTaskWrapper
from ..task_spaces.base import EncodedTask, TaskSpace

logger = logging.getLogger(__name__)

__all__ = ["TinyTag", "TinyTagTask", "parse_layout_task"]

VIEW = 5  # egocentric view width (radius 2)
MIN_SIZE, MAX_SIZE = 3, 32
MAX_DENSITY = 0.5
_MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=np.int64)


def parse_layout_task(task: Any) -> tuple[int, float]:
    """Validate a ``(size, obstacle_density)`` task and return it as ``(int, float)``.

    >>> parse_layout_task((7, 0.1))
    (7, 0.1)
    >>> parse_layout_task((2, 0.1))
    Traceback (most recent call last):
    ...
    ValueError: TinyTag task (2, 0.1): size must be an int in [3, 32], got 2
    """
    if isinstance(task, dict):
        if set(task) != {"size", "obstacle_density"}:
            raise ValueError(f"TinyTag task {task!r}: expected keys 'size' and 'obstacle_density'")
        size, density = task["size"], task["obstacle_density"]
    else:
        try:
            size, density = task
        except (TypeError, ValueError):
            raise ValueError(f"TinyTag task {task!r}: expected a pair (size, obstacle_density)") from None
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or not (
        MIN_SIZE <= size <= MAX_SIZE
    ):
        raise ValueError(
            f"TinyTag task {task!r}: size must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {size!r}"
        )
    try:
        d = float(density)
    except (TypeError, ValueError):
        raise ValueError(
            f"TinyTag task {task!r}: obstacle_density must be a number, got {density!r}"
        ) from None
    if not 0.0 <= d <= MAX_DENSITY:  # also rejects NaN
        raise ValueError(
            f"TinyTag task {task!r}: obstacle_density must be in [0, {MAX_DENSITY}], got {density!r}"
        )
    return int(size), d


class TinyTag(ParallelEnv):
    """The Tiny Tag game (see the module docstring).

    Args:
        size: Grid width and height.
        obstacle_density: Probability that a cell is an obstacle.
        max_cycles: Steps until truncation.
    """

    metadata = {"name": "tiny_tag_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        size: int = 5,
        obstacle_density: float = 0.0,
        max_cycles: int = 50,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        if isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1:
            raise ValueError(f"max_cycles must be a positive int, got {max_cycles!r}")
        self.size, self.obstacle_density = parse_layout_task((size, obstacle_density))
        self.max_cycles = max_cycles
        self.render_mode = render_mode
        self.possible_agents = ["chaser", "runner"]
        self.agents: list[str] = []
        low = np.zeros(VIEW * VIEW * 3 + 2, dtype=np.float32)
        low[-2:] = -1.0
        self._observation_space = spaces.Box(low, np.ones_like(low), dtype=np.float32)
        self._action_space = spaces.Discrete(len(_MOVES))
        self._rng = np.random.default_rng()
        self.grid = np.zeros((self.size, self.size), dtype=bool)
        self.pos = np.zeros((2, 2), dtype=np.int64)
        self.t = 0

    def set_layout(self, size: int, obstacle_density: float) -> None:
        """Change the layout parameters; they apply from the next :meth:`reset`."""
        self.size, self.obstacle_density = parse_layout_task((size, obstacle_density))

    def observation_space(self, agent: str) -> spaces.Space:
        """The same Box object for every call (as PettingZoo requires): 75 view cells and 2 offsets."""
        self._check_agent(agent)
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        """``Discrete(5)``: stay, up, down, left, right (the same object on every call)."""
        self._check_agent(agent)
        return self._action_space

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise KeyError(f"unknown agent {agent!r}; TinyTag's agents are {self.possible_agents}")

    # -- layout -------------------------------------------------------------------------------------
    def _connected(self, grid: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
        seen = np.zeros_like(grid)
        seen[tuple(a)] = True
        queue = deque([tuple(a)])
        while queue:
            r, c = queue.popleft()
            if (r, c) == tuple(b):
                return True
            for dr, dc in _MOVES[1:]:
                nr, nc = r + dr, c + dc
                if 0 <= nr < self.size and 0 <= nc < self.size and not grid[nr, nc] and not seen[nr, nc]:
                    seen[nr, nc] = True
                    queue.append((nr, nc))
        return False

    def _new_layout(self) -> None:
        n = self.size
        for _ in range(100):
            grid = self._rng.random((n, n)) < self.obstacle_density
            free = np.flatnonzero(~grid)
            if free.size < 2:
                continue
            cells = self._rng.choice(free, size=2, replace=False)
            pos = np.stack([np.divmod(cells[0], n), np.divmod(cells[1], n)]).astype(np.int64)
            if self._connected(grid, pos[0], pos[1]):
                self.grid, self.pos = grid, pos
                return
        logger.info("TinyTag: no connected layout for size=%d density=%g; using no obstacles", n,
                    self.obstacle_density)
        self.grid = np.zeros((n, n), dtype=bool)
        cells = self._rng.choice(n * n, size=2, replace=False)
        self.pos = np.stack([np.divmod(cells[0], n), np.divmod(cells[1], n)]).astype(np.int64)

    # -- observations -------------------------------------------------------------------------------
    def _observe(self, i: int) -> np.ndarray:
        r, c = self.pos[i]
        half = VIEW // 2
        view = np.zeros((VIEW, VIEW, 3), dtype=np.float32)
        padded = np.ones((self.size + 2 * half, self.size + 2 * half), dtype=bool)
        padded[half:-half, half:-half] = self.grid
        view[:, :, 0] = padded[r : r + VIEW, c : c + VIEW]
        for j in range(2):
            dr, dc = self.pos[j] - self.pos[i]
            if abs(dr) <= half and abs(dc) <= half:
                view[half + dr, half + dc, 1 + j] = 1.0
        offset = (self.pos[1 - i] - self.pos[i]) / max(self.size - 1, 1)
        return np.concatenate([view.ravel(), offset.astype(np.float32)])

    # -- the parallel API ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._new_layout()
        self.agents = list(self.possible_agents)
        self.t = 0
        obs = {a: self._observe(i) for i, a in enumerate(self.possible_agents)}
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("TinyTag.step called after the episode ended; call reset() first")
        old = self.pos.copy()
        for i, a in enumerate(self.possible_agents):
            act = actions.get(a, 0)
            if isinstance(act, (bool, np.bool_)) or not isinstance(act, (int, np.integer)) or not (
                0 <= act < len(_MOVES)
            ):
                raise ValueError(f"action {act!r} for agent {a!r} is not in {self._action_space}")
            target = self.pos[i] + _MOVES[int(act)]
            r, c = target
            if 0 <= r < self.size and 0 <= c < self.size and not self.grid[r, c]:
                self.pos[i] = target
        self.t += 1
        caught = bool(
            np.array_equal(self.pos[0], self.pos[1])
            or (np.array_equal(self.pos[0], old[1]) and np.array_equal(self.pos[1], old[0]))
        )
        timeout = self.t >= self.max_cycles and not caught
        rews = {"chaser": 1.0 if caught else 0.0, "runner": -1.0 if caught else 0.0}
        terms = dict.fromkeys(self.agents, caught)
        truncs = dict.fromkeys(self.agents, timeout)
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if caught or timeout:
            infos["chaser"]["success"] = 1.0 if caught else 0.0
            infos["runner"]["success"] = 0.0 if caught else 1.0
        obs = {a: self._observe(i) for i, a in enumerate(self.possible_agents)}
        if caught or timeout:
            self.agents = []
        return obs, rews, terms, truncs, infos

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        chars = np.where(self.grid, "#", ".").astype("<U1")
        chars[tuple(self.pos[1])] = "R"
        chars[tuple(self.pos[0])] = "C"
        return "\n".join("".join(row) for row in chars)

    def state(self) -> np.ndarray:
        """The full grid as a ``size x size`` int array: 0 free, 1 obstacle, 2 chaser, 3 runner."""
        s = self.grid.astype(np.int64)
        s[tuple(self.pos[1])] = 3
        s[tuple(self.pos[0])] = 2
        return s

    def close(self) -> None:
        pass


class TinyTagTask(PettingZooTaskWrapper):
    """Task wrapper for :class:`TinyTag`: a decoded task is ``(size, obstacle_density)``.

    ``change_task`` calls :meth:`TinyTag.set_layout`, so the task takes effect from the next reset.
    Progress is each agent's ``info["success"]`` (the default), set when the episode ends.

    >>> from magister.task_spaces.discrete import Discrete
    >>> env = TinyTagTask(TinyTag(), Discrete(tasks=[(5, 0.0), (9, 0.3)]))
    >>> obs, infos = env.reset(seed=0, options={"task": (9, 0.3)})
    >>> env.unwrapped.grid.shape, infos["runner"]["task"]
    ((9, 9), 1)
    """

    def __init__(
        self, env: TinyTag | None = None, task_space: TaskSpace | None = None, **kwargs: Any
    ) -> None:
        if env is None:
            env = TinyTag()
        if not isinstance(env.unwrapped, TinyTag):
            raise TypeError(f"TinyTagTask needs a TinyTag env, got {type(env.unwrapped).__name__}")
        if task_space is None:
            from ..task_spaces.discrete import Discrete

            task_space = Discrete(tasks=[(s, d) for s in (5, 7, 9) for d in (0.0, 0.1, 0.2, 0.3)])
        super().__init__(env, task_space, **kwargs)

    def change_task(self, task: Any) -> None:
        size, density = parse_layout_task(task)
        self.env.unwrapped.set_layout(size, density)

    def encode_task_observation(self, encoded_task: EncodedTask) -> np.ndarray:
        """Default one-hot for indexed spaces; otherwise ``[size / 32, density]``."""
        if self.task_space.indexed:
            return super().encode_task_observation(encoded_task)
        u = self.env.unwrapped
        return np.array([u.size / MAX_SIZE, u.obstacle_density], dtype=np.float32)

    @property
    def task_observation_space(self) -> spaces.Space:
        if self.task_space.indexed:
            return super().task_observation_space
        return spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
