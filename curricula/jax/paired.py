"""PAIRED, the minimax adversary and REPAIRED on device: a trained level generator and its objectives.

Papers: M. Dennis, N. Jaques, E. Vinitsky, A. Bayen, S. Russell, A. Critch, S. Levine, "Emergent Complexity
and Zero-shot Transfer via Unsupervised Environment Design", NeurIPS 2020 (PAIRED and the minimax
adversary); M. Jiang, M. Dennis, J. Parker-Holder, J. Foerster, E. Grefenstette, T. Rocktäschel,
"Replay-Guided Adversarial Environment Design", NeurIPS 2021 (REPAIRED).

The *adversary* (the level generator) is a policy that builds a level step by step in an editing
environment (JaxUED's ``MazeEditor``: place the goal, turn and place the agent, then toggle walls). When
the level is built, two students play it: the *protagonist* (the policy being trained for transfer) and,
for PAIRED, an *antagonist* (a second student, allied with the adversary). The adversary's episode has a
single reward, at its last step:

* **PAIRED** (Dennis et al. 2020, Sec. 3, eq. 2 and Algorithm 1): the regret estimate
  ``REGRET(theta) = max_{tau^A} U(tau^A) - E_{tau^P}[U(tau^P)]``: the antagonist's best episode return on
  the level minus the protagonist's mean episode return (:func:`regret`). The antagonist is trained on
  its own return (that maximises the regret); the protagonist on its own return (that minimises it).
* **Minimax adversary** (the same paper's baseline): reward ``-E_{tau^P}[U(tau^P)]``, minus the
  protagonist's mean return (:func:`minimax`); no antagonist. It is known to build unsolvable levels.
* **Flexible regret** (used by DCD/minimax's PAIRED variants): the best return of *either* student minus
  the protagonist's mean (:func:`flexible_regret`), so that the better student plays the antagonist.
* **REPAIRED** (Jiang et al. 2021, Sec. 5, Algorithm 2): PAIRED's generator is the source of new levels of
  a PLR⊥ buffer. A new (generated) level is played by both students *without gradient updates* and scored
  by the PAIRED regret, which is also the adversary's reward; a replayed level is played by both students,
  who train on it, and its buffer score is updated with the new regret. Use
  :func:`~magister.curricula.jax.plr.plr_sample` with :class:`REPAIREDConfig` (a PLR⊥ config whose score
  is the regret) and :func:`repaired_masks` for who learns from which sample.

What is here (pure functions over arrays, like the other on-device curricula; the networks and their
optimiser are the trainer's):

* :func:`episode_returns`: per level, the mean and max return over the episodes completed in a
  fixed-length rollout, and their count (the returns of a rollout with automatic resets).
* the objectives :func:`regret`, :func:`flexible_regret`, :func:`minimax` and :func:`adversary_reward`.
* :func:`edit_levels`: roll an adversary policy through an editing environment (any
  :class:`Editor`), returning the built levels and the adversary's trajectory (:class:`EditTrajectory`).
* :func:`editor_advantages`: GAE over the adversary's trajectory whose only reward is the objective at
  the last edit, for a policy-gradient (PPO) update of the adversary.

Defaults (:class:`PAIREDConfig`) are those of JaxUED's PAIRED maze trainer, which follows DCD's: 50
adversary steps, ``gamma = 0.995``, ``lambda = 0.98`` for the adversary, entropy coefficient ``1e-3``.

>>> import jax.numpy as jnp
>>> # 2 levels, a rollout of 4 steps: level 0's protagonist finished episodes with returns 0.5 and 0.0,
>>> # its antagonist one episode with 0.75; level 1's protagonist finished none (counts as return 0)
>>> pro_r = jnp.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.0], [0.0, 0.0]])
>>> pro_d = jnp.array([[False, False], [True, False], [False, False], [True, False]])
>>> ant_r = jnp.array([[0.0, 0.0], [0.0, 0.9], [0.75, 0.0], [0.0, 0.0]])
>>> ant_d = jnp.array([[False, False], [False, True], [True, False], [False, False]])
>>> pro, ant = episode_returns(pro_r, pro_d), episode_returns(ant_r, ant_d)
>>> [round(float(x), 3) for x in regret(pro, ant)]
[0.5, 0.9]
>>> [round(float(x), 3) for x in minimax(pro)]
[-0.25, 0.0]
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .buffer import Level, Sample
from .plr import RobustPLRConfig

logger = logging.getLogger(__name__)

__all__ = [
    "OBJECTIVES",
    "EditTrajectory",
    "Editor",
    "EpisodeReturns",
    "PAIREDConfig",
    "REPAIREDConfig",
    "adversary_reward",
    "edit_levels",
    "editor_advantages",
    "episode_returns",
    "flexible_regret",
    "minimax",
    "regret",
    "repaired_masks",
]

#: the adversary's objectives: PAIRED's regret, flexible regret, the minimax adversary's -return
OBJECTIVES = ("regret", "flexible_regret", "minimax")


@dataclass(frozen=True)
class PAIREDConfig:
    """Settings of the adversary (hashable: a static argument of ``jax.jit``). Defaults: JaxUED's PAIRED
    maze trainer (after DCD).

    Args:
        objective: ``"regret"`` (PAIRED), ``"flexible_regret"`` or ``"minimax"`` (the minimax adversary).
        num_edits: adversary steps per level (the editor's episode length).
        gamma: discount of the adversary's GAE.
        gae_lambda: lambda of the adversary's GAE.
        ent_coef: entropy bonus of the adversary's policy-gradient loss.
    """

    objective: str = "regret"
    num_edits: int = 50
    gamma: float = 0.995
    gae_lambda: float = 0.98
    ent_coef: float = 1e-3

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if isinstance(self.num_edits, bool) or not isinstance(self.num_edits, int) or self.num_edits < 1:
            raise ValueError(f"num_edits must be a positive int, got {self.num_edits!r}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(
                f"gamma and gae_lambda must be in [0, 1], got {self.gamma!r}, {self.gae_lambda!r}")
        if not self.ent_coef >= 0.0:
            raise ValueError(f"ent_coef must be >= 0, got {self.ent_coef!r}")

    @property
    def needs_antagonist(self) -> bool:
        """Whether the objective plays an antagonist (not for the minimax adversary)."""
        return self.objective != "minimax"


@dataclass(frozen=True)
class REPAIREDConfig(RobustPLRConfig):
    """REPAIRED's buffer: PLR⊥ (new levels evaluation-only) scored by PAIRED's regret.

    The fields are :class:`~magister.curricula.jax.plr.RobustPLRConfig`'s; ``score`` is ``"regret"``
    (computed by :func:`regret`, not by :func:`~magister.curricula.jax.scoring.rollout_scores`).
    """

    score: str = "regret"

    def __post_init__(self) -> None:
        if self.score != "regret":
            raise ValueError(f"REPAIRED scores levels by PAIRED's regret; score must be 'regret', got "
                             f"{self.score!r}")
        object.__setattr__(self, "score", "max_mc")  # pass the parent's check on a known score name
        try:
            super().__post_init__()
        finally:
            object.__setattr__(self, "score", "regret")


class EpisodeReturns(NamedTuple):
    """Per level, the returns of the episodes a rollout completed.

    Attributes:
        mean: ``f32[B]``, mean return of the completed episodes (0 where none completed).
        max: ``f32[B]``, best return of the completed episodes (0 where none completed).
        count: ``i32[B]``, completed episodes.
    """

    mean: jax.Array
    max: jax.Array
    count: jax.Array


def episode_returns(rewards: jax.Array, dones: jax.Array) -> EpisodeReturns:
    """Mean, max and count of the returns of the episodes completed in a time-major rollout.

    ``rewards`` and ``dones`` are ``[T, B]``; ``dones[t]`` ends the episode that step ``t``'s reward
    belongs to (the environment resets itself). An episode still running at ``T`` is not counted. Levels
    with no completed episode get mean and max 0 (a return no maze episode can beat by failing).
    """
    if rewards.shape != dones.shape or rewards.ndim != 2:
        raise ValueError(f"rewards and dones must both be [T, B], got {rewards.shape} and {dones.shape}")
    b = rewards.shape[1]

    def one(carry: tuple, x: tuple) -> tuple[tuple, None]:
        running, total, best, count = carry
        r, d = x
        running = running + r
        total = total + jnp.where(d, running, 0.0)
        best = jnp.where(d, jnp.maximum(best, running), best)
        count = count + d.astype(jnp.int32)
        return (jnp.where(d, 0.0, running), total, best, count), None

    z = jnp.zeros(b, jnp.float32)
    init = (z, z, jnp.full(b, -jnp.inf, jnp.float32), jnp.zeros(b, jnp.int32))
    (_, total, best, count), _ = jax.lax.scan(one, init, (rewards.astype(jnp.float32), dones.astype(bool)))
    done_any = count > 0
    return EpisodeReturns(jnp.where(done_any, total / jnp.maximum(count, 1), 0.0),
                          jnp.where(done_any, best, 0.0), count)


def regret(protagonist: EpisodeReturns, antagonist: EpisodeReturns) -> jax.Array:
    """PAIRED's regret estimate (Dennis et al. 2020, eq. 2): ``max_{tau^A} U(tau^A) - E_{tau^P}[U(tau^P)]``,
    the antagonist's best return minus the protagonist's mean return, per level (``f32[B]``)."""
    return antagonist.max - protagonist.mean


def flexible_regret(protagonist: EpisodeReturns, antagonist: EpisodeReturns) -> jax.Array:
    """Flexible regret: the best return of either student minus the protagonist's mean return, per level.

    Never negative (the protagonist's best is at least its mean); unlike :func:`regret` it does not reward
    the adversary for levels on which the antagonist happens to lag the protagonist."""
    return jnp.maximum(antagonist.max, protagonist.max) - protagonist.mean


def minimax(protagonist: EpisodeReturns) -> jax.Array:
    """The minimax adversary's reward (Dennis et al. 2020, Sec. 4 baseline): ``-E_{tau^P}[U(tau^P)]``."""
    return 0.0 - protagonist.mean  # not -mean: no -0.0 for a level with no completed episode


def adversary_reward(cfg: PAIREDConfig, protagonist: EpisodeReturns,
                     antagonist: EpisodeReturns | None = None) -> jax.Array:
    """The adversary's reward per level under ``cfg.objective`` (``antagonist`` unused for minimax)."""
    if cfg.objective == "minimax":
        return minimax(protagonist)
    if antagonist is None:
        raise ValueError(f"objective {cfg.objective!r} needs the antagonist's returns")
    if cfg.objective == "regret":
        return regret(protagonist, antagonist)
    return flexible_regret(protagonist, antagonist)


class Editor(NamedTuple):
    """An editing environment for the adversary (three pure functions, each traceable).

    Attributes:
        reset: ``reset(key) -> (obs, state)``, one empty level's editing state.
        step: ``step(key, state, action) -> (obs, state)``, one edit.
        level: ``level(state) -> level``, the level built so far.
    """

    reset: Callable[[jax.Array], tuple[Any, Any]]
    step: Callable[[jax.Array, Any, jax.Array], tuple[Any, Any]]
    level: Callable[[Any], Level]


class EditTrajectory(NamedTuple):
    """The adversary's trajectory, time-major (``[num_edits, B, ...]``).

    Attributes:
        obs: the observations the adversary acted on (any pytree).
        action: ``i32[E, B]``.
        logp: ``f32[E, B]``, log-probability of the action under the acting policy.
        value: ``f32[E, B]``, the adversary's value estimate.
    """

    obs: Any
    action: jax.Array
    logp: jax.Array
    value: jax.Array


#: ``policy(params, obs) -> (logits [B, A], value [B])`` for a batch of editor observations
AdversaryPolicy = Callable[[Any, Any], tuple[jax.Array, jax.Array]]


def edit_levels(key: jax.Array, params: Any, policy: AdversaryPolicy, editor: Editor, batch: int,
                num_edits: int) -> tuple[Level, EditTrajectory]:
    """Build ``batch`` levels with ``num_edits`` actions each of the adversary ``policy`` in ``editor``.

    Actions are sampled from ``softmax(logits)`` (mask invalid actions in the policy by giving them
    ``-inf``/very negative logits). Returns the levels (``[B, ...]``) and the trajectory for the
    adversary's update (:func:`editor_advantages`)."""
    if num_edits < 1:
        raise ValueError(f"num_edits must be >= 1, got {num_edits}")
    k_reset, k_run = jax.random.split(key)
    obs, state = jax.vmap(editor.reset)(jax.random.split(k_reset, batch))

    def one(carry: tuple, k: jax.Array) -> tuple[tuple, tuple]:
        obs, state = carry
        k_act, k_env = jax.random.split(k)
        logits, value = policy(params, obs)
        action = jax.random.categorical(k_act, logits)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
        obs2, state = jax.vmap(editor.step)(jax.random.split(k_env, batch), state, action)
        return (obs2, state), (obs, action.astype(jnp.int32), logp, value)

    (_, state), (o, a, lp, v) = jax.lax.scan(one, (obs, state), jax.random.split(k_run, num_edits))
    return jax.vmap(editor.level)(state), EditTrajectory(o, a, lp, v)


def editor_advantages(traj: EditTrajectory, reward: jax.Array,
                      cfg: PAIREDConfig) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and value targets (``[E, B]``) of the adversary's episode, whose only reward is
    ``reward`` (``f32[B]``, :func:`adversary_reward`) at its last edit; the episode ends there."""
    e = traj.value.shape[0]
    rewards = jnp.zeros_like(traj.value).at[e - 1].set(reward.astype(traj.value.dtype))

    def back(carry: tuple, x: tuple) -> tuple[tuple, jax.Array]:
        adv_next, v_next = carry
        r, v = x
        delta = r + cfg.gamma * v_next - v
        adv = delta + cfg.gamma * cfg.gae_lambda * adv_next
        return (adv, v), adv

    zero = jnp.zeros_like(reward, dtype=traj.value.dtype)
    _, adv = jax.lax.scan(back, (zero, zero), (rewards, traj.value), reverse=True)
    return adv, adv + traj.value


def repaired_masks(sample: Sample) -> tuple[jax.Array, jax.Array]:
    """Who learns from which sample in REPAIRED: ``(students, adversary)``, both ``bool[B]``.

    Both students train on the replayed levels only (PLR⊥: ``sample.train``); the adversary learns from
    the levels it generated in this batch (the new ones), rewarded by their regret."""
    return sample.train, ~sample.replay
