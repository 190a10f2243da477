"""CartPole with a curriculum over its initial-state range.

The task is the **half-width** ``h`` of the uniform range CartPole draws its initial state from: at reset
each of the four state variables (cart position, cart velocity, pole angle, pole angular velocity) is drawn
from ``U(-h, h)``. Gymnasium's default is ``h = 0.05``; a larger ``h`` starts the pole further from upright
and moving faster, so episodes are harder. ``h`` must stay below the pole's 12-degree termination angle
(about 0.2094 rad), otherwise the episode could begin already failed.

How the task is applied: Gymnasium's ``CartPoleEnv.reset`` reads ``options["low"]`` and ``options["high"]``
(``gymnasium.envs.classic_control.utils.maybe_parse_reset_bounds``) and draws the state with
``np_random.uniform(low, high, size=(4,))``. :class:`CartPoleTask` passes ``low=-h, high=h`` through those
documented options on every reset, so the env's own seeded generator draws the state (seeded resets stay
reproducible). Passing ``"low"``/``"high"`` yourself conflicts with the task and raises ``ValueError``.

Progress (``info["task_progress"]``) is the fraction of the episode's step limit survived so far,
``t / max_episode_steps``, which reaches 1.0 exactly when the pole is balanced for the whole episode.

Run a small demonstration (a fixed controller that balances from the default range fails more often as the
range widens)::

    python -m magister.examples.cartpole
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from ..env_wrappers.task_wrapper import TaskWrapper
from ..task_spaces.base import EncodedTask, TaskSpace

logger = logging.getLogger(__name__)

__all__ = [
    "CartPoleTask", "DEFAULT_HALF_WIDTH", "MAX_HALF_WIDTH", "angle_controller", "default_task_space",
    "evaluate", "half_width_of",
]

#: Gymnasium's own initial-state half-width.
DEFAULT_HALF_WIDTH = 0.05
#: The pole's termination angle (12 degrees in radians); every valid half-width is below it.
MAX_HALF_WIDTH = 12 * 2 * math.pi / 360
#: Upper end of the default task space.
TASK_SPACE_HIGH = 0.2


def default_task_space(seed: int | None = None) -> TaskSpace:
    """``Box(low=0, high=0.2, shape=(1,))``: the half-width as a length-1 array."""
    from ..task_spaces.box import Box

    return Box(low=0.0, high=TASK_SPACE_HIGH, shape=(1,), seed=seed)


def half_width_of(task: Any) -> float:
    """The half-width of a decoded task (a number or a one-element array), validated.

    >>> half_width_of(np.array([0.1]))
    0.1
    >>> half_width_of(0.5)
    Traceback (most recent call last):
    ...
    ValueError: CartPole task 0.5: half-width must be finite and in [0, 0.2094), got 0.5
    """
    arr = np.asarray(task, dtype=np.float64)
    if arr.size != 1:
        raise ValueError(
            f"CartPole task {task!r}: expected one half-width, got an array of shape {arr.shape}"
        )
    h = float(arr.reshape(()))
    if not (math.isfinite(h) and 0.0 <= h < MAX_HALF_WIDTH):
        raise ValueError(
            f"CartPole task {task!r}: half-width must be finite and in [0, {MAX_HALF_WIDTH:.4f}), got {h}"
        )
    return h


class CartPoleTask(TaskWrapper):
    """CartPole whose task is the half-width of the uniform initial-state range.

    Args:
        env: A CartPole env (``gym.make("CartPole-v1")`` when omitted). Its unwrapped env must be
            :class:`~gymnasium.envs.classic_control.cartpole.CartPoleEnv`.
        task_space: Decoded tasks are half-widths (numbers or one-element arrays); defaults to
            :func:`default_task_space`.
        task_observation: Append the half-width to the observation (``Dict(obs=..., task=Box(1,))``).
        max_episode_steps: Step limit used for progress; defaults to the env spec's limit, else 500.

    >>> env = CartPoleTask(gym.make("CartPole-v1"))  # default task space: Box(0, 0.2, shape=(1,))
    >>> obs, info = env.reset(seed=1, options={"task": np.array([0.01])})
    >>> bool(np.all(np.abs(obs) <= 0.01)), info["task"]
    (True, (0.01,))
    >>> _, _, _, _, info = env.step(0)
    >>> info["task_progress"]  # 1 step of the 500-step limit
    0.002
    """

    def __init__(
        self,
        env: gym.Env | None = None,
        task_space: TaskSpace | None = None,
        *,
        task_observation: bool = False,
        max_episode_steps: int | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, task_space=task_space, task_observation=task_observation,
            max_episode_steps=max_episode_steps, _disable_deepcopy=True,
        )
        if env is None:
            env = gym.make("CartPole-v1")
        if not isinstance(env.unwrapped, CartPoleEnv):
            raise TypeError(
                f"CartPoleTask needs a CartPoleEnv underneath, got {type(env.unwrapped).__name__}"
            )
        if task_space is None:
            task_space = default_task_space()
        super().__init__(env, task_space, task_observation=task_observation)
        if max_episode_steps is None:
            spec = env.spec
            max_episode_steps = spec.max_episode_steps if spec is not None else None
            max_episode_steps = max_episode_steps or 500
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        self.max_episode_steps = max_episode_steps
        self.half_width = DEFAULT_HALF_WIDTH
        self._t = 0

    def change_task(self, task: Any) -> None:
        """Set the half-width used by the following resets (``ValueError`` if it is not a valid width)."""
        self.half_width = half_width_of(task)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        opts = dict(options) if options else {}
        if "low" in opts or "high" in opts:
            raise ValueError(
                f"reset options 'low'/'high' ({opts.get('low')!r}, {opts.get('high')!r}) conflict with the "
                f"CartPoleTask task (half-width {self.half_width}); pass options={{'task': h}} instead"
            )
        opts["low"] = -self.half_width
        opts["high"] = self.half_width
        self._t = 0
        return self.env.reset(seed=seed, options=opts)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step and count the steps of the episode (for :meth:`task_progress`)."""
        self._t += 1
        return super().step(action)

    def task_progress(
        self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool, info: dict[str, Any]
    ) -> float:
        """Fraction of the step limit survived: ``t / max_episode_steps`` (1.0 = balanced all episode)."""
        return min(1.0, self._t / self.max_episode_steps)

    @property
    def task_observation_space(self) -> spaces.Space:
        """``Box(0, top, (1,))`` with ``top`` the task space's upper bound (or the termination angle)."""
        high = getattr(self.task_space, "high", None)
        top = float(np.max(high)) if high is not None else MAX_HALF_WIDTH
        return spaces.Box(0.0, top, shape=(1,), dtype=np.float32)

    def encode_task_observation(self, encoded_task: EncodedTask) -> np.ndarray:
        """The half-width as a length-1 float32 array."""
        return np.asarray(encoded_task, dtype=np.float32).reshape(1)


def angle_controller(obs: np.ndarray) -> int:
    """A fixed, imperfect policy: push towards the side the pole is falling to (ignores the cart).

    It balances forever from Gymnasium's default start but fails more often as the start range widens,
    which makes the half-width a graded difficulty knob.
    """
    return int(obs[2] + 0.5 * obs[3] > 0.0)


def evaluate(
    half_widths: list[float],
    episodes: int = 20,
    seed: int = 0,
    policy: Callable[[np.ndarray], int] = angle_controller,
) -> dict[float, float]:
    """Mean final ``task_progress`` (fraction of the 500-step limit survived) of ``policy`` per half-width."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    env = CartPoleTask(gym.make("CartPole-v1"), default_task_space())
    out: dict[float, float] = {}
    for i, h in enumerate(half_widths):
        finals = []
        for ep in range(episodes):
            obs, info = env.reset(seed=seed + 1000 * i + ep, options={"task": np.array([h])})
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(policy(obs))
                done = term or trunc
            finals.append(info["task_progress"])
        out[float(h)] = float(np.mean(finals))
    env.close()
    return out


def main(argv: list[str] | None = None) -> dict[float, float]:
    """Command-line demo: log a fixed controller's mean progress per half-width (difficulty rises with it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Needs only the core install.")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = evaluate([0.0, 0.05, 0.1, 0.15, 0.2], args.episodes, args.seed)
    for h, progress in result.items():
        logger.info("half-width %.2f: mean progress %.3f", h, progress)
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
