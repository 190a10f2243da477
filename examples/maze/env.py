"""JaxUED's maze, as the maze trainer uses it: the import check, levels, held-out sets and the editor.

Everything environment-side is JaxUED's, installed from the package index (``jaxued`` 0.0.1), not copied:
``Maze`` (13x13, partial 5x5 view, 250 steps, reward ``1 - 0.9 t / 250`` at the goal), ``MazeEditor``
(the adversary's editing env), ``make_level_generator`` (DR's uniform walls), ``make_level_mutator``
(ACCEL's edits), ``Level.load_prefabs`` (the held-out mazes) and ``LevelSampler`` (the parity arm).

jaxued needs ``gymnax``, which pins ``gymnasium<1.4`` and imports ``six`` without declaring it: it lives in
its own virtualenv (``bash benchmarks/_jaxued_env.sh``) or the ``maze`` extra installed into an
environment of its own, never in magister's core install. :func:`require_jaxued` is the startup check
that says so when it is missing.

jaxued 0.0.1 calls ``jax.tree_map``, which current JAX removed; :func:`require_jaxued` restores it as an
alias of ``jax.tree_util.tree_map`` (the function it was) before importing jaxued.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["HELDOUT_PREFABS", "INSTALL_HINT", "editor_fns", "empty_level", "heldout_levels", "make_env",
           "prefab_levels", "require_jaxued", "require_jaxued_or_exit", "solvable"]

#: The held-out prefab mazes JaxUED's maze trainers evaluate on (the DCD set of 13x13 mazes).
HELDOUT_PREFABS = ("SixteenRooms", "SixteenRooms2", "Labyrinth", "LabyrinthFlipped", "Labyrinth2",
                   "StandardMaze", "StandardMaze2", "StandardMaze3")

INSTALL_HINT = (
    "the maze trainer needs JaxUED (jaxued 0.0.1, with gymnax and six), kept out of magister's core "
    "install because gymnax pins gymnasium<1.4. Build its virtualenv with "
    "`bash benchmarks/_jaxued_env.sh VENV_DIR CHECKOUT` (from a source checkout) and run with "
    "VENV_DIR/bin/python, or `pip install \"magister[maze]\"` into an environment of its own"
)


def require_jaxued() -> Any:
    """Import jaxued (restoring ``jax.tree_map`` for it); raise :class:`ImportError` naming the venv and
    the extra when it is missing. Returns the ``jaxued`` module."""
    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree_util.tree_map  # removed from JAX; jaxued 0.0.1 still calls it
    try:
        import jaxued
        import jaxued.environments.maze  # noqa: F401  (pulls gymnax, six)
        import jaxued.level_sampler  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} (import failed: {exc})") from exc
    return jaxued


def require_jaxued_or_exit() -> None:
    """:func:`require_jaxued` for a command line: a missing jaxued ends the program with the message."""
    try:
        require_jaxued()
    except ImportError as exc:
        raise SystemExit(str(exc)) from None


def make_env(max_steps: int = 250) -> tuple[Any, Any]:
    """``(Maze(13, 13, view 5), params)`` with JaxUED's defaults (time-penalised reward)."""
    require_jaxued()
    from jaxued.environments.maze import Maze

    env = Maze(max_height=13, max_width=13, agent_view_size=5, normalize_obs=False)
    return env, env.default_params.replace(max_steps_in_episode=max_steps)


def prefab_levels(names: tuple[str, ...] = HELDOUT_PREFABS) -> Any:
    """The named prefab mazes as one batch of ``Level`` (``[N, ...]``)."""
    require_jaxued()
    from jaxued.environments.maze import Level

    return _as_arrays(Level.load_prefabs(list(names)))


def _as_arrays(level: Any) -> Any:
    """Levels with every leaf a JAX array (``width``/``height`` are Python ints in a prefab level)."""
    return jax.tree_util.tree_map(jnp.asarray, level)


def generated_levels(key: jax.Array, n: int, n_walls: int = 60) -> Any:
    """``n`` levels of JaxUED's generator (``n_walls`` uniformly placed walls; DR's distribution)."""
    require_jaxued()
    from jaxued.environments.maze import make_level_generator

    return _as_arrays(jax.vmap(make_level_generator(13, 13, n_walls))(jax.random.split(key, n)))


def solvable(levels: Any) -> np.ndarray:
    """``bool[N]``: a path from the agent to the goal exists (BFS on the host, walls block; 4-neighbours)."""
    walls = np.asarray(levels.wall_map)
    agent, goal = np.asarray(levels.agent_pos), np.asarray(levels.goal_pos)
    out = np.zeros(walls.shape[0], bool)
    for i in range(walls.shape[0]):
        h, w = walls[i].shape
        seen = np.zeros((h, w), bool)
        stack = [(int(agent[i, 0]), int(agent[i, 1]))]
        seen[stack[0][1], stack[0][0]] = True
        gx, gy = int(goal[i, 0]), int(goal[i, 1])
        while stack:
            x, y = stack.pop()
            if (x, y) == (gx, gy):
                out[i] = True
                break
            for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                nx, ny = x + dx, y + dy
                if 0 <= nx < w and 0 <= ny < h and not seen[ny, nx] and not walls[i, ny, nx]:
                    seen[ny, nx] = True
                    stack.append((nx, ny))
    return out


def heldout_levels(n: int, seed: int = 12345, n_walls: int = 60) -> Any:
    """A fixed set of ``n`` solvable generated levels (``n_walls`` walls, host-side filter), for the
    held-out evaluation next to the prefabs."""
    cand = generated_levels(jax.random.PRNGKey(seed), 4 * n, n_walls)
    ok = np.flatnonzero(solvable(jax.device_get(cand)))[:n]
    if ok.size < n:
        raise RuntimeError(f"only {ok.size} of {4 * n} generated levels were solvable; lower n_walls")
    return jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)[ok]), cand)


def empty_level() -> Any:
    """A 13x13 level with no walls (the adversary's canvas; it places the goal and the agent first)."""
    require_jaxued()
    from jaxued.environments.maze import Level

    return Level(wall_map=jnp.zeros((13, 13), bool), goal_pos=jnp.array([0, 0], jnp.uint32),
                 agent_pos=jnp.array([0, 0], jnp.uint32), agent_dir=jnp.array(0, jnp.uint8),
                 width=jnp.asarray(13), height=jnp.asarray(13))


def editor_fns(env: Any) -> tuple[Any, Any]:
    """``(MazeEditor, magister.curricula.jax.Editor)`` for ``env``: the editor's reset/step/level as the
    three pure functions :func:`magister.curricula.jax.edit_levels` takes."""
    require_jaxued()
    from jaxued.environments.maze import MazeEditor

    from ...curricula.jax import Editor

    editor = MazeEditor(env, random_z_dimensions=16, zero_out_random_z=False)
    params = editor.default_params
    canvas = empty_level()

    def reset(key: jax.Array) -> tuple[Any, Any]:
        return editor.reset_to_level(key, canvas, params)

    def step(key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, Any]:
        obs, state, _, _, _ = editor.step(key, state, action, params)
        return obs, state

    return editor, Editor(reset, step, lambda s: s.level)
