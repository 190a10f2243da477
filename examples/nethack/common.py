"""The NetHack / MiniHack recipe's task spaces, wrappers, curriculum and evaluation.

Two task spaces:

* ``seeds``: task = NetHack game seed on ``NetHackScore-v0`` (Syllabus's NetHack setting). NLE's
  ``env.seed(core, disp, reseed=False)`` sets the seeds the **next** reset starts the game from (one reset
  later NetHack draws fresh random seeds again, with reseeding on), so :class:`GameSeed` calls it before every
  reset with ``core = disp = task`` and ``reseed=False`` (no re-seeding mid-game: the game is a function of
  the seed and the actions). :class:`ReportSeeds` puts what NLE itself reports, ``get_seeds()`` read after the
  reset, into every info (``nle_core_seed``, ``nle_disp_seed``, ``nle_reseed``). Syllabus also passes
  ``no_progress_timeout=150``; nle 1.3.0 accepts it only for ``NetHackChallenge`` (which forbids seeding),
  so :class:`NoProgressTimeout` applies the same rule to ``NetHackScore``: the episode is truncated after
  150 steps in a row in which the in-game turn counter did not move.
* ``minihack``: task = MiniHack env id, a ``Discrete`` over ids through
  :class:`~magister.env_wrappers.reinit.ReinitTaskWrapper` (:class:`MiniHackIds`: one env per id, cached).
  :class:`ReportEnvId` adds the id from the running env's own spec (``env.unwrapped.spec.id``, set by
  ``gymnasium.make``) to every info as ``info["env_id"]``. The default ids are navigation tasks of rising
  difficulty that share MiniHack's 8 compass actions.

Curriculum: :class:`~magister.curricula.learning_progress.LearningProgress` (Kanitscheider et al. 2021) on
both, online variant. Why LP rather than SFL: the MiniHack ids form a small ladder of tasks whose success
rates change at very different times (Room-5x5 is learnt long before MazeWalk); LP samples the tasks whose
success is *changing*, which is what such a ladder needs, and it keeps sampling a task the agent starts to
forget; SFL's ``p(1 - p)`` favours tasks near 50 % success whether or not they are being learnt, and its
default top-K buffer assumes a large space. Both need a success signal in [0, 1]: MiniHack reports one
(``end_status == TASK_SUCCESSFUL``); ``NetHackScore`` has no success, so on game seeds the progress is the
share of ``score_target`` in-game points reached by the end of the episode (clipped to 1), a choice of this
recipe (``--score-target``), not a published setting.

>>> seeds, held = make_seed_spaces(200, 20)
>>> seeds.num_tasks, held.tasks[:2]
(200, [200, 201])
>>> ids = make_minihack_space()
>>> ids.decode(0)
'MiniHack-Room-5x5-v0'
"""

from __future__ import annotations

import logging
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from magister.curricula.learning_progress import LearningProgress
from magister.env_wrappers.reinit import ReinitTaskWrapper
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.evaluation import EvalResult, Suite, evaluate
from magister.task_spaces import Discrete

logger = logging.getLogger(__name__)

__all__ = ["GameSeed", "MINIHACK_IDS", "MiniHackIds", "NoProgressTimeout", "OBSERVATION_KEYS", "ReportEnvId",
           "ReportSeeds", "evaluate_policy", "make_curriculum", "make_minihack_env", "make_minihack_space",
           "make_seed_env", "make_seed_spaces"]

#: What the policy sees: the glyph map and the bottom-line statistics.
OBSERVATION_KEYS = ("glyphs", "blstats")
#: MiniHack navigation tasks of rising difficulty, all with the 8 compass actions.
MINIHACK_IDS = ("MiniHack-Room-5x5-v0", "MiniHack-Room-Random-5x5-v0", "MiniHack-Room-Monster-5x5-v0",
                "MiniHack-Room-15x15-v0", "MiniHack-MazeWalk-9x9-v0", "MiniHack-River-Narrow-v0")
#: Index of the in-game turn counter and of the score in ``blstats`` (nle.nethack.NLE_BL_TIME / _SCORE).
BL_SCORE, BL_TIME = 9, 20


def _register() -> None:
    import minihack  # noqa: F401  (registers MiniHack-*)
    import nle  # noqa: F401  (registers NetHack*)


class NoProgressTimeout(gym.Wrapper):
    """Truncate an episode after ``timeout`` steps in a row in which the in-game turn counter
    (``blstats[NLE_BL_TIME]``) did not change (NLE's ``NetHackChallenge`` rule, for any NLE env)."""

    def __init__(self, env: gym.Env, timeout: int = 150) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
            raise ValueError(f"timeout must be a positive int, got {timeout!r}")
        super().__init__(env)
        self.timeout = timeout

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._turn, self._still = int(obs["blstats"][BL_TIME]), 0
        return obs, info

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step(action)
        turn = int(obs["blstats"][BL_TIME])
        self._still = self._still + 1 if turn == self._turn else 0
        self._turn = turn
        return obs, rew, term, trunc or self._still >= self.timeout, info


class ReportSeeds(gym.Wrapper):
    """Adds the seeds NLE reports (``get_seeds()`` right after each reset) to every info."""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        core, disp, reseed, _ = self.env.unwrapped.get_seeds()
        self._seeds = {"nle_core_seed": int(core), "nle_disp_seed": int(disp), "nle_reseed": bool(reseed)}
        return obs, {**info, **self._seeds}

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step(action)
        return obs, rew, term, trunc, {**info, **self._seeds}


class GameSeed(TaskWrapper):
    """Task = NetHack game seed: ``seed(core=task, disp=task, reseed=False)`` before every reset.

    Progress: the in-game score at the end of the episode as a share of ``score_target`` (clipped to 1).
    """

    def __init__(self, env: gym.Env, task_space: Discrete, score_target: float = 100.0) -> None:
        if not score_target > 0:
            raise ValueError(f"score_target must be positive, got {score_target!r}")
        gym.utils.RecordConstructorArgs.__init__(self, task_space=task_space, score_target=score_target,
                                                 _disable_deepcopy=True)
        super().__init__(env, task_space)
        self.score_target = float(score_target)

    def change_task(self, task: Any) -> None:
        self.game_seed = int(task)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        self.env.unwrapped.seed(core=self.game_seed, disp=self.game_seed, reseed=False)
        return self.env.reset(options=options)  # the game seed, not the caller's seed, fixes the game

    def task_progress(self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool, info: dict[str, Any]
                      ) -> float:
        return min(1.0, max(0.0, float(obs["blstats"][BL_SCORE]) / self.score_target))


class ReportEnvId(gym.Wrapper):
    """Adds ``info["env_id"]``: the id in the running env's own spec (``env.unwrapped.spec.id``)."""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "env_id": self.env.unwrapped.spec.id}

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step(action)
        return obs, rew, term, trunc, {**info, "env_id": self.env.unwrapped.spec.id}


class MiniHackIds(ReinitTaskWrapper):
    """Task = MiniHack env id (one env built per id, cached); progress = MiniHack's own success
    (``info["end_status"]`` is ``TASK_SUCCESSFUL``)."""

    def task_progress(self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool, info: dict[str, Any]
                      ) -> float:
        return float(getattr(info.get("end_status"), "name", "") == "TASK_SUCCESSFUL")


def make_seed_spaces(num_seeds: int = 200, num_test_seeds: int = 20) -> tuple[Discrete, Discrete]:
    """``(train, held_out)`` game seeds: ``0 .. num_seeds - 1`` and the next ``num_test_seeds``."""
    for name, v in (("num_seeds", num_seeds), ("num_test_seeds", num_test_seeds)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return Discrete(int(num_seeds)), Discrete(tasks=list(range(num_seeds, num_seeds + num_test_seeds)))


def make_minihack_space(ids: tuple[str, ...] | list[str] = MINIHACK_IDS) -> Discrete:
    """A ``Discrete`` over MiniHack env ids (``ValueError`` for an id gymnasium does not know)."""
    _register()
    unknown = [i for i in ids if i not in gym.registry]
    if unknown or not ids:
        raise ValueError(f"unknown MiniHack env ids {unknown}; expected registered ids such as "
                         f"{MINIHACK_IDS[:2]}")
    return Discrete(tasks=list(ids))


def make_seed_env(space: Discrete, source: Any = None, *, max_episode_steps: int = 5000,
                  no_progress_timeout: int = 150, score_target: float = 100.0) -> gym.Env:
    """``NetHackScore-v0`` (glyphs and blstats) with the no-progress rule, NLE's seed report and the game-seed
    task wrapper; inside a sync wrapper given ``source`` (a server address or a curriculum) when given."""
    _register()
    env = gym.make("NetHackScore-v0", observation_keys=OBSERVATION_KEYS, max_episode_steps=max_episode_steps)
    env = GameSeed(ReportSeeds(NoProgressTimeout(env, no_progress_timeout)), space, score_target)
    return env if source is None else GymnasiumSyncWrapper(env, source)  # magister: tasks and feedback


def make_minihack_env(space: Discrete, source: Any = None, *, max_episode_steps: int | None = None
                      ) -> gym.Env:
    """One env per MiniHack id of ``space`` (glyphs and blstats) with its id report; inside a sync wrapper
    given ``source`` when given. ``max_episode_steps`` overrides MiniHack's limits."""
    _register()
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}

    def build(env_id: str) -> gym.Env:
        return ReportEnvId(gym.make(env_id, observation_keys=OBSERVATION_KEYS, **kwargs))

    env = MiniHackIds(build, space, cache_size=None, initial_task=space.decode(0))
    return env if source is None else GymnasiumSyncWrapper(env, source)  # magister: tasks and feedback


def make_curriculum(space: Discrete, seed: int = 0, **kwargs: Any) -> LearningProgress:
    """Learning progress, online variant, with the paper's defaults (``ema_alpha`` 0.1, ``p_theta`` 0.1)
    unless ``kwargs`` say otherwise."""
    return LearningProgress(space, variant="online", seed=seed, **kwargs)


def evaluate_policy(policy: Any, make_env: Any, suite: Suite, *, episodes: int = 1, num_envs: int = 4,
                    seed: int = 0) -> EvalResult:
    """Play ``policy(obs, info) -> actions`` on every task of ``suite`` through
    :func:`magister.evaluation.evaluate` (no curriculum involved: evaluation-only episodes)."""
    return evaluate(policy, make_env, suite, episodes=episodes, num_envs=num_envs, seed=seed)
