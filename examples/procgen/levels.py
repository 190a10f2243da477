"""Procgen levels as magister tasks: one level seed per episode, chosen by the curriculum, on the stock wheel.

A Procgen game generates a level from an integer *level seed*; the PLR paper (Jiang et al., ICML 2021) trains
on the levels of seeds ``0 .. 199`` (easy mode) and tests on the full distribution (``num_levels=0``: a seed
drawn uniformly from ``[0, 2**31 - 1)`` per episode). Here a task is a level seed: the task space is
``Discrete(num_levels)`` for training (:func:`training_levels`) and ``Discrete(2**31 - 1)`` for the full
distribution (:func:`all_levels`), and the seed arrives like every magister task, through
``reset(options={"task": seed})``.

**How a level is chosen on the stock wheel.** Procgen 0.10.7 (``procgen-mirror`` on the package index) picks
each episode's level itself, from its own generator, and has no call that sets a running env's next level
(level-replay and other curriculum libraries depend on a 2020 fork for that). It does expose
``get_state``/``set_state`` (serialised game states, used by its own state tests). :class:`ProcgenLevels`
keeps one Procgen env of a single slot (``ProcgenGym3Env(num=1)``) for the whole run and, on every reset,
builds a short-lived helper ``ProcgenGym3Env(num=1, num_levels=1, start_level=seed)`` with the same game
options, takes its initial state and sets it into the running slot with ``set_state``. The slot then plays
level ``seed`` from its start: the ``level_seed`` Procgen reports in its info is ``seed``, its observation
equals that of a freshly made env of level ``seed``, and, because the restored state carries
``num_levels=1, start_level=seed``, Procgen's own auto-reset at the episode's end starts ``seed`` again
rather than a level of its own choosing; the reset that follows (the vector env's autoreset) sets the level
the curriculum picks next. A helper costs a few milliseconds, once per episode.

**The Gymnasium side.** The running slot is wrapped as Procgen's own gym registration does (gym3's
``ExtractDictObWrapper`` on the ``"rgb"`` observation, then ``ToGymEnv``: the old gym API) and brought to the
Gymnasium API by shimmy's ``GymV21CompatibilityV0``. Observations are ``64 x 64 x 3`` ``uint8`` images,
actions ``Discrete(15)``. Every episode end (death, level completed, Procgen's time-out) is
``terminated=True``, as the PLR paper's PPO treats them all as done; the step's info is Procgen's own
(``level_seed``, ``prev_level_seed``, ``prev_level_complete``; at an episode's end ``prev_level_seed`` is the
level just played), and a reset's info adds Procgen's info for the level it set. ``task_progress`` is 1 for
an episode that completed its level (``prev_level_complete`` at the end), else 0.

:data:`RETURN_BOUNDS` are the per-game return bounds ``(R_min, R_max)`` of the Procgen paper (Cobbe et al.,
"Leveraging Procedural Generation to Benchmark Reinforcement Learning", ICML 2020, appendix: normalisation
constants), by which :func:`normalised_return` maps a return to ``(R - R_min) / (R_max - R_min)``.

>>> normalised_return("coinrun", 7.5)  # halfway between R_min = 5 and R_max = 10
0.5
"""

from __future__ import annotations

import logging
from typing import Any, SupportsFloat

import numpy as np
from gymnasium.utils import RecordConstructorArgs

from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.task_spaces import Discrete
from magister.task_spaces.base import TaskSpace

logger = logging.getLogger(__name__)

__all__ = [
    "GAMES", "MAX_LEVEL_SEED", "RETURN_BOUNDS", "ProcgenLevels", "all_levels", "normalised_return",
    "training_levels",
]

#: Level seeds are drawn from ``[0, MAX_LEVEL_SEED)`` when ``num_levels=0`` (Procgen's ``INT32_MAX``).
MAX_LEVEL_SEED = 2**31 - 1

#: ``(R_min, R_max)`` per game and distribution mode: Cobbe et al. 2020, appendix (normalisation constants).
RETURN_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "easy": {
        "coinrun": (5.0, 10.0), "starpilot": (2.5, 64.0), "caveflyer": (3.5, 12.0), "dodgeball": (1.5, 19.0),
        "fruitbot": (-1.5, 32.4), "chaser": (0.5, 13.0), "miner": (1.5, 13.0), "jumper": (3.0, 10.0),
        "leaper": (3.0, 10.0), "maze": (5.0, 10.0), "bigfish": (1.0, 40.0), "heist": (3.5, 10.0),
        "climber": (2.0, 12.6), "plunder": (4.5, 30.0), "ninja": (3.5, 10.0), "bossfight": (0.5, 13.0),
    },
    "hard": {
        "coinrun": (5.0, 10.0), "starpilot": (1.5, 35.0), "caveflyer": (2.0, 13.4), "dodgeball": (1.5, 19.0),
        "fruitbot": (-0.5, 27.2), "chaser": (0.5, 14.2), "miner": (1.5, 20.0), "jumper": (1.0, 10.0),
        "leaper": (1.5, 10.0), "maze": (4.0, 10.0), "bigfish": (0.0, 40.0), "heist": (2.0, 10.0),
        "climber": (1.0, 12.6), "plunder": (3.0, 30.0), "ninja": (2.0, 10.0), "bossfight": (0.5, 13.0),
    },
}

#: The 16 games of the benchmark.
GAMES: tuple[str, ...] = tuple(sorted(RETURN_BOUNDS["easy"]))


def normalised_return(game: str, ret: Any, distribution_mode: str = "easy") -> Any:
    """``(ret - R_min) / (R_max - R_min)`` with the game's bounds from :data:`RETURN_BOUNDS` (arrays too)."""
    if distribution_mode not in RETURN_BOUNDS:
        raise ValueError(f"no return bounds for distribution mode {distribution_mode!r}; expected one of "
                         f"{sorted(RETURN_BOUNDS)}")
    if game not in RETURN_BOUNDS[distribution_mode]:
        raise ValueError(f"unknown Procgen game {game!r}; expected one of {GAMES}")
    lo, hi = RETURN_BOUNDS[distribution_mode][game]
    out = (np.asarray(ret, dtype=np.float64) - lo) / (hi - lo)
    return float(out) if out.ndim == 0 else out


def training_levels(num_levels: int = 200, seed: int | None = None) -> Discrete:
    """The task space of the training levels: level seeds ``0 .. num_levels - 1`` (the PLR paper: 200)."""
    if isinstance(num_levels, bool) or not isinstance(num_levels, (int, np.integer)) or num_levels < 1:
        raise ValueError(f"num_levels must be a positive int, got {num_levels!r}")
    return Discrete(int(num_levels), seed=seed)


def all_levels(seed: int | None = None) -> Discrete:
    """The full distribution: the seeds in ``[0, 2**31 - 1)`` (what Procgen draws with ``num_levels=0``)."""
    return Discrete(MAX_LEVEL_SEED, seed=seed)


class ProcgenLevels(TaskWrapper):
    """A Procgen game whose level is the task: a level seed, set on every reset (see the module docstring).

    Args:
        task_space: Level seeds: a :class:`~magister.task_spaces.Discrete` whose decoded tasks are ints in
            ``[0, 2**31 - 1)`` (:func:`training_levels`, :func:`all_levels`).
        game: A Procgen game (:data:`GAMES`).
        distribution_mode: ``"easy"`` (the PLR paper) or ``"hard"``.
        task_observation: Add the task's one-hot encoding to the observation (small spaces only).
        **procgen_options: Further ``ProcgenGym3Env`` options (``use_backgrounds``, ``paint_vel_info``,
            ``restrict_themes`` ...), the same for the running slot and the helpers. ``num``,
            ``num_levels``, ``start_level`` and ``num_threads`` are this wrapper's to set.

    Raises:
        ValueError: an unknown game or mode, an option this wrapper sets, or (on reset) a task that is not a
            level seed.
    """

    def __init__(self, task_space: TaskSpace, game: str = "coinrun", *, distribution_mode: str = "easy",
                 task_observation: bool = False, **procgen_options: Any) -> None:
        if game not in GAMES:
            raise ValueError(f"unknown Procgen game {game!r}; expected one of {GAMES}")
        if distribution_mode not in RETURN_BOUNDS:
            raise ValueError(f"distribution_mode must be one of {sorted(RETURN_BOUNDS)} (the modes with "
                             f"return bounds), got {distribution_mode!r}")
        taken = {"num", "num_levels", "start_level", "num_threads", "env_name"} & set(procgen_options)
        if taken:
            raise ValueError(f"ProcgenLevels sets {sorted(taken)} itself (the level is the task); pass other "
                             "ProcgenGym3Env options only")
        # the Procgen virtualenv's packages (benchmarks/_procgen_env.sh), imported once the arguments are good
        import gym3
        from procgen import ProcgenGym3Env
        from shimmy import GymV21CompatibilityV0

        RecordConstructorArgs.__init__(self, task_space=task_space, game=game,
                                       distribution_mode=distribution_mode, task_observation=task_observation,
                                       _disable_deepcopy=True, **procgen_options)
        self.game = game
        self.distribution_mode = distribution_mode
        self._make_procgen = ProcgenGym3Env
        # rand_seed only seeds Procgen's own level draws, which the restored states replace: fixed here
        self._options = {"env_name": game, "distribution_mode": distribution_mode, "num_threads": 0,
                         "rand_seed": 0, **procgen_options}
        self.procgen = ProcgenGym3Env(num=1, num_levels=1, start_level=0, **self._options)
        """The running single-slot Procgen env (gym3 API), whose state each reset replaces."""
        env = GymV21CompatibilityV0(env=gym3.ToGymEnv(gym3.ExtractDictObWrapper(self.procgen, key="rgb")))
        super().__init__(env, task_space, task_observation=task_observation)

    def level_state(self, seed: int) -> bytes:
        """The serialised initial state of level ``seed`` (from a helper env with the same game options)."""
        helper = self._make_procgen(num=1, num_levels=1, start_level=int(seed), **self._options)
        try:
            return helper.get_state()[0]
        finally:
            helper.close()

    def change_task(self, task: Any) -> None:
        """Check that ``task`` is a level seed; the level is set by the reset that follows."""
        if isinstance(task, (bool, np.bool_)) or not isinstance(task, (int, np.integer)) \
                or not 0 <= int(task) < MAX_LEVEL_SEED:
            raise ValueError(f"a Procgen task is a level seed, an int in [0, {MAX_LEVEL_SEED}); got {task!r} "
                             f"from {self.task_space!r}")

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        if options:
            raise ValueError(f"ProcgenLevels takes only the 'task' reset option, got {sorted(options)}")
        # the reset seed chooses nothing here: the level is the task (shimmy would pass it to gym3's seed(),
        # which takes none)
        self.procgen.set_state([self.level_state(int(self.current_decoded_task))])
        obs, info = self.env.reset()
        return obs, {**info, **self.procgen.get_info()[0]}

    def close(self) -> None:
        """Close the wrappers and free the running Procgen env (gym3's ``ToGymEnv`` leaves it open)."""
        super().close()
        self.procgen.close()

    def task_progress(self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool,
                      info: dict[str, Any]) -> float:
        """1.0 when the episode ends with its level completed (Procgen's ``prev_level_complete``), else 0."""
        return float(info.get("prev_level_complete", 0)) if (term or trunc) else 0.0
