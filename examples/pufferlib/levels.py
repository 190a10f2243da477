"""MiniGrid levels by seed, and the env creator that puts a curriculum inside PufferLib's vector envs.

A procedurally generated MiniGrid env (Farama ``minigrid``) builds its grid at ``reset(seed=s)`` from the
seed alone, so a *level* is a seed: :class:`LevelSeed` is the task wrapper that resets the env with the
task as its seed, and reports progress 1 on an episode that reached the goal (MiniGrid's positive reward).

PufferLib's emulation layer (``pufferlib.emulation.GymnasiumPufferEnv``) calls ``reset(seed=...)`` and
ignores ``options``, and its vector backends (Serial, Multiprocessing) reset a finished env with no
arguments at all: a task cannot come from outside the env. So the env creator given to
``pufferlib.vector.make`` builds the whole stack itself, :func:`puffer_env`::

    GymnasiumPufferEnv(GymnasiumSyncWrapper(LevelSeed(ReportLayout(ImgObsWrapper(minigrid env))), address))

and the sync wrapper takes each episode's task from the curriculum served at ``address`` at every reset
(the first one, with PufferLib's seed, and every auto-reset), and reports every episode back.

:class:`ReportLayout` is the environment's own report of what it played: at reset it digests the grid
MiniGrid generated (cells, agent position and direction) and puts it into every info of the episode as
``info["layout"]``, next to the sync wrapper's ``info["task"]``, so a trainer (or a test) can check that the
level played is the level of the seed the curriculum sent: :func:`layout_of_seed` is the digest of a fresh
``reset(seed=s)``.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import gymnasium as gym
import numpy as np

from ...env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from ...env_wrappers.task_wrapper import TaskWrapper
from ...task_spaces import Discrete

logger = logging.getLogger(__name__)

__all__ = ["ENV_ID", "LevelSeed", "ReportLayout", "layout_digest", "layout_of_seed", "make_level_env",
           "puffer_env", "require_pufferlib"]

#: the default MiniGrid env: a 5x5 room split by a wall with a locked door, key, agent and goal placed by
#: the seed
ENV_ID = "MiniGrid-DoorKey-5x5-v0"

INSTALL_HINT = ("the PufferLib recipe needs pufferlib-core 3.0.23 (which pins torch 2.9.0) in a virtualenv "
                "of its own: bash benchmarks/_pufferlib_env.sh VENV_DIR CHECKOUT, then run with "
                "VENV_DIR/bin/python")


def require_pufferlib() -> Any:
    """Import pufferlib's vector module; :class:`ImportError` naming the virtualenv when it is missing."""
    try:
        import pufferlib.emulation
        import pufferlib.vector
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} (import failed: {exc})") from exc
    return pufferlib


def layout_digest(env: gym.Env) -> str:
    """A digest of the level a MiniGrid env holds now: its grid's encoding, the agent's cell and heading."""
    u = env.unwrapped
    h = hashlib.blake2b(digest_size=8)
    h.update(np.ascontiguousarray(u.grid.encode()).tobytes())
    h.update(np.asarray([*u.agent_pos, u.agent_dir], np.int64).tobytes())
    return h.hexdigest()


class ReportLayout(gym.Wrapper):
    """Puts the digest of the level generated at reset (:func:`layout_digest`) into every info of the
    episode as ``info["layout"]``."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.layout = layout_digest(self.env)
        return obs, {**info, "layout": self.layout}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward, term, trunc, {**info, "layout": self.layout}


class LevelSeed(TaskWrapper):
    """Task = level seed: the inner env is reset with the task as its seed (any seed a reset passes is
    ignored); progress is 1 on a step that ends the episode with a positive reward (MiniGrid's success)."""

    def change_task(self, task: int) -> None:
        self.level_seed = int(task)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        return self.env.reset(seed=self.level_seed, options=options)

    def task_progress(self, obs: Any, rew: Any, term: bool, trunc: bool, info: dict[str, Any]) -> float:
        return float(term and float(rew) > 0)


def make_level_env(num_levels: int, env_id: str = ENV_ID, max_steps: int | None = None) -> LevelSeed:
    """The task env without a curriculum (for evaluation): ``LevelSeed`` over ``Discrete(num_levels)`` seeds
    around the MiniGrid env with image observations and the layout report."""
    from minigrid.wrappers import ImgObsWrapper

    kwargs = {} if max_steps is None else {"max_steps": int(max_steps)}
    return LevelSeed(ReportLayout(ImgObsWrapper(gym.make(env_id, **kwargs))), Discrete(num_levels))


def puffer_env(address: str, num_levels: int, env_id: str = ENV_ID, max_steps: int | None = None,
               buf: Any = None, seed: int = 0) -> Any:
    """The env creator for ``pufferlib.vector.make``: the level env, a sync wrapper taking its tasks from
    the curriculum served at ``address``, inside PufferLib's Gymnasium emulation (``buf`` and ``seed`` are
    PufferLib's: its shared buffers and the first reset's seed)."""
    pufferlib = require_pufferlib()
    env = GymnasiumSyncWrapper(make_level_env(num_levels, env_id, max_steps), address)
    return pufferlib.emulation.GymnasiumPufferEnv(env=env, buf=buf, seed=seed)


def layout_of_seed(seed: int, env_id: str = ENV_ID) -> str:
    """The digest of the level MiniGrid generates for ``seed`` (a fresh env, ``reset(seed=seed)``)."""
    import minigrid  # noqa: F401  (registers the MiniGrid envs)

    env = gym.make(env_id)
    try:
        env.reset(seed=int(seed))
        return layout_digest(env)
    finally:
        env.close()
