"""What the MiniGrid recipe's trainers share: task = level seed, its spaces, curricula and evaluation.

MiniGrid's ``reset(seed=s)`` reseeds the env's generator and regenerates the grid from it (``_gen_grid``
draws only from that generator), so the level seed alone fixes the level:

* :class:`LevelSeed` is the task wrapper: ``change_task(s)`` remembers ``s`` and every reset of the inner
  env is ``reset(seed=s)``, whatever seed the caller passed (a vector env's autoreset replays the level);
* :class:`ReportLevel` puts the environment's own account of the level into every ``info``:
  ``info["level_digest"]``, a SHA-1 of the grid MiniGrid generated (``grid.encode()``) and the agent's start
  position and direction, taken right after each reset. Tests compare it with a fresh env reset on
  ``info["task"]`` (:func:`level_digest`), so the level each episode played is checked from the env, not
  from magister's bookkeeping;
* :func:`make_task_spaces`: training seeds ``0 .. num_levels - 1`` (the PLR paper's fixed training set),
  held-out seeds ``num_levels .. num_levels + num_test_levels - 1`` (never trained on);
* :func:`make_curriculum`: PLR with the PLR paper's MiniGrid settings (value L1, rank, β 0.1, ρ 0.3),
  PLR⊥, or uniform sampling of the training seeds (``dr``);
* :func:`evaluate_policy`: held-out evaluation through :func:`magister.evaluation.evaluate`.

>>> train, test = make_task_spaces(num_levels=100, num_test_levels=10)
>>> train.num_tasks, train.decode(7), test.tasks[:3]
(100, 7, [100, 101, 102])
>>> env = make_env("MiniGrid-MultiRoom-N4-S5-v1", train)
>>> _, info = env.reset(options={"task": 7})
>>> info["task"], info["level_digest"] == level_digest(fresh_level("MiniGrid-MultiRoom-N4-S5-v1", 7))
(7, True)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
import numpy as np
from minigrid.wrappers import ImgObsWrapper

from magister.curricula.base import Curriculum
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.evaluation import EvalResult, Suite, evaluate
from magister.task_spaces import Discrete
from magister.task_spaces.base import TaskSpace

logger = logging.getLogger(__name__)

__all__ = ["CURRICULA", "DEFAULT_ENV", "LevelSeed", "ReportLevel", "evaluate_policy", "fresh_level",
           "level_digest", "make_curriculum", "make_env", "make_task_spaces", "summarise"]

#: Farama's MultiRoom with four rooms of at most 5 x 5 cells: the closest registered env to the PLR paper's
#: MultiRoom-N4-Random (whose room count is drawn per level).
DEFAULT_ENV = "MiniGrid-MultiRoom-N4-S5-v1"
#: Curricula selectable with ``--curriculum``.
CURRICULA = ("plr", "robust-plr", "dr")


def level_digest(env: gym.Env) -> str:
    """SHA-1 of the level ``env`` has generated: its grid (``grid.encode()``), the agent's position and
    direction. Call it right after a reset (the grid changes as doors open)."""
    base = env.unwrapped
    h = hashlib.sha1(np.ascontiguousarray(base.grid.encode()).tobytes())
    h.update(np.asarray([*base.agent_pos, base.agent_dir], dtype=np.int64).tobytes())
    return h.hexdigest()


def fresh_level(env_id: str, seed: int, **kwargs: Any) -> gym.Env:
    """A new MiniGrid env ``env_id`` reset with ``seed``: the level that seed generates."""
    env = gym.make(env_id, **kwargs)
    env.reset(seed=int(seed))
    return env


class ReportLevel(gym.Wrapper):
    """Adds ``info["level_digest"]`` (:func:`level_digest`, taken at reset) to every reset and step info."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._digest = level_digest(self.env)
        return obs, {**info, "level_digest": self._digest}

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step(action)
        info["level_digest"] = self._digest
        return obs, rew, term, trunc, info


class LevelSeed(TaskWrapper):
    """Task = MiniGrid level seed: every reset of the inner env is ``reset(seed=task)``.

    Progress is success: 1 on the step that reaches the goal (MiniGrid's positive terminal reward), else 0.
    """

    def change_task(self, task: Any) -> None:
        self.level_seed = int(task)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=self.level_seed, options=options)  # the task, not the caller's seed

    def task_progress(self, obs: Any, rew: SupportsFloat, term: bool, trunc: bool, info: dict[str, Any]
                      ) -> float:
        return float(bool(term) and float(rew) > 0.0)


def make_env(env_id: str, task_space: TaskSpace, source: Any = None, max_steps: int | None = None
             ) -> gym.Env:
    """MiniGrid ``env_id`` with image observations (``ImgObsWrapper``: the 7 x 7 x 3 egocentric view), its
    level report and the level-seed task wrapper; inside a sync wrapper given ``source`` (a server address
    or a curriculum) when one is given. ``max_steps`` overrides MiniGrid's episode step limit."""
    kwargs = {} if max_steps is None else {"max_steps": int(max_steps)}
    env = LevelSeed(ReportLevel(ImgObsWrapper(gym.make(env_id, **kwargs))), task_space)
    if source is not None:
        env = GymnasiumSyncWrapper(env, source)  # magister: tasks from, feedback to, the curriculum
    return env


def make_task_spaces(num_levels: int = 4000, num_test_levels: int = 100) -> tuple[Discrete, Discrete]:
    """``(train, held_out)``: seeds ``0 .. num_levels - 1`` and the next ``num_test_levels`` seeds."""
    for name, v in (("num_levels", num_levels), ("num_test_levels", num_test_levels)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return Discrete(int(num_levels)), Discrete(tasks=list(range(num_levels, num_levels + num_test_levels)))


def make_curriculum(name: str, task_space: Discrete, seed: int = 0, *, temperature: float = 0.1,
                    staleness_coef: float = 0.3, gamma: float = 0.99, gae_lambda: float = 0.95) -> Curriculum:
    """``plr``: value-L1 scores, rank prioritisation with temperature β and staleness weight ρ (the PLR
    paper's MiniGrid settings: β 0.1, ρ 0.3), a buffer holding every training seed and the paper's replay
    schedule (replay with the share of seeds seen so far); ``robust-plr``: the same as PLR⊥
    (evaluation-only new seeds); ``dr``: uniform over the training seeds."""
    if name in ("plr", "robust-plr"):
        from magister.curricula.plr import PLR

        return PLR(task_space, score="value_l1", buffer_size=int(task_space.num_tasks), replay_prob=None,
                   temperature=temperature, staleness_coef=staleness_coef, prioritization="rank",
                   robust=name == "robust-plr", gamma=gamma, gae_lambda=gae_lambda, seed=seed)
    if name == "dr":
        from magister.curricula.domain_randomization import DomainRandomization

        return DomainRandomization(task_space, seed=seed)
    raise ValueError(f"unknown curriculum {name!r}; expected one of {CURRICULA}")


def evaluate_policy(policy: Callable[[Any, dict[str, Any]], Any], env_id: str, held_out: Discrete, *,
                    episodes: int = 1, num_envs: int = 8, seed: int = 0, max_steps: int | None = None
                    ) -> EvalResult:
    """Play ``policy(obs_batch, info) -> actions`` on every held-out seed (:func:`magister.evaluation.
    evaluate`: no curriculum involved, evaluation-only episodes)."""
    suite = Suite.of(held_out)
    return evaluate(policy, lambda: make_env(env_id, held_out, max_steps=max_steps), suite,
                    episodes=episodes, num_envs=num_envs, seed=seed)


def summarise(result: EvalResult) -> dict[str, float]:
    """Mean held-out return and success rate (the PLR paper reports the mean return)."""
    return {"eval/return": float(result.per_task("return").mean()),
            "eval/success": float(result.per_task("success").mean())}
