"""The trainer's curricula: PLR⊥, ACCEL, SFL and DR from :mod:`magister.curricula.jax`, set for problems.

Nothing is re-implemented here: the replay distribution, the buffer, the insertion rule, SFL's top-K and
the scores are the library's on-device functions (the twins of :class:`magister.curricula.RobustPLR`,
:class:`magister.curricula.ACCEL` and :class:`magister.curricula.SFL`, same names and semantics). This
module only

* fixes the level type to a :class:`~magister.examples.minigrid_rm.problem.Problem` (a level × reward
  machine pair; the buffer and samples expose their levels as ``.problems`` too),
* keeps the trainer's config, :class:`CurriculumConfig`: :class:`~magister.curricula.jax.ACCELConfig` (the
  PLR⊥ settings of the ATLAS paper) with a ``mutate`` switch, so one config serves PLR⊥ (``mutate=False``,
  replay 0.5) and ACCEL (``mutate=True``, replay 0.9 via :func:`accel_config`),
* and states where the bundled trainer departs from the library defaults for CPU-sized runs
  (:data:`CPU_SCALE`).

**Trainer settings that differ from the library (= paper) defaults** (``TrainConfig`` in :mod:`.ppo`;
override them there or with ``--buffer-size``):

=========================  ==================  ==========================  ===========================
setting                    trainer default     library / paper default     why
=========================  ==================  ==========================  ===========================
PLR⊥/ACCEL ``buffer_size`` 1000                4000 (``RobustPLR``;        a CPU run of 32 envs x 50
                                                ATLAS: 50 000)              updates samples ~1600
                                                                            problems; a 4000-entry
                                                                            buffer would never fill
SFL ``batch_size`` (N)     64                  200                         each refresh evaluates N
                                                                            candidates 4 times on the
                                                                            CPU
SFL ``update_period`` (T)  10                  25                          a 50-update run refreshes
                                                                            5 times, not twice (each
                                                                            refresh costs about a third
                                                                            of an update)
SFL ``buffer_size`` (K)    16                  10                          half of a 32-env batch
                                                                            comes from the buffer
SFL ``sample_ratio`` (rho) 0.5                 1.0                         keeps half of each batch on
                                                                            fresh problems between the
                                                                            few refreshes
=========================  ==================  ==========================  ===========================

(:data:`CPU_SCALE` holds the same overrides as a dict; ``tests/test_jax_curricula_equivalence.py`` checks
that it matches ``TrainConfig``.) The other PLR⊥/ACCEL settings are the paper's: replay 0.5 (ACCEL 0.9),
MaxMC, rank, ``beta = 1.0``, ``rho = 0.1``, 7-10 edits.

>>> import jax.numpy as jnp
>>> w = rank_weights(jnp.array([0.5, 2.0, 1.0]), jnp.array([True, True, True]), 1.0)
>>> [round(float(x), 4) for x in w]
[0.1818, 0.5455, 0.2727]
>>> accel_config().replay_prob, plr_config().replay_prob, CurriculumConfig().buffer_size
(0.9, 0.5, 4000)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import jax

from ...curricula import jax as L
from ...curricula.jax import (
    ACCELConfig,
    SFLConfig,
    mark_sampled,
    plr_update,
    power_weights,
    rank_weights,
    replay_distribution,
    replay_probability,
    rollout_scores,
    staleness_weights,
)
from ...curricula.jax import level_hash as problem_hash
from .problem import Problem

logger = logging.getLogger(__name__)

__all__ = [
    "CPU_SCALE", "Buffer", "CurriculumConfig", "SCORES", "SFLConfig", "SFLState", "Sample", "accel_config",
    "dr_sample", "init_buffer", "mark_sampled", "plr_config", "plr_sample", "plr_update", "power_weights",
    "problem_hash", "rank_weights", "replay_distribution", "replay_probability", "rollout_scores",
    "sfl_refresh", "sfl_sample", "staleness_weights",
]

#: Scores the trainer offers (``--score``).
SCORES = ("max_mc", "positive_value_loss", "learnability")

#: The bundled trainer's departures from the library defaults (see the module docstring):
#: ``{config: {field: (trainer default, library default)}}``.
CPU_SCALE: dict[str, dict[str, tuple[Any, Any]]] = {
    "curriculum": {"buffer_size": (1000, 4000)},
    "sfl": {"batch_size": (64, 200), "update_period": (10, 25), "buffer_size": (16, 10),
            "sample_ratio": (0.5, 1.0)},
}


@dataclass(frozen=True)
class CurriculumConfig(ACCELConfig):
    """PLR⊥ / ACCEL settings of the trainer: :class:`~magister.curricula.jax.ACCELConfig` with the PLR⊥
    replay rate (0.5) and ``mutate`` (ACCEL's edits on; :func:`accel_config` also sets replay 0.9)."""

    replay_prob: float | None = 0.5
    mutate: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {self.score!r}")


def plr_config(**kw: Any) -> CurriculumConfig:
    """PLR⊥ with the ATLAS settings (replay 0.5, MaxMC, rank, beta 1.0, rho 0.1), overridable."""
    return CurriculumConfig(**kw)


def accel_config(**kw: Any) -> CurriculumConfig:
    """ACCEL with the ATLAS settings (replay 0.9, edits ~ U{7, 10}), overridable."""
    base: dict[str, Any] = {"replay_prob": 0.9, "mutate": True}
    base.update(kw)
    return CurriculumConfig(**base)


class Buffer(L.LevelBuffer):
    """:class:`~magister.curricula.jax.LevelBuffer` of problems (``.problems`` is ``.levels``)."""

    __slots__ = ()

    @property
    def problems(self) -> Problem:
        return self.levels


class Sample(L.Sample):
    """:class:`~magister.curricula.jax.Sample` of problems (``.problems`` is ``.levels``)."""

    __slots__ = ()

    @property
    def problems(self) -> Problem:
        return self.levels


class SFLState(L.SFLState):
    """:class:`~magister.curricula.jax.SFLState` of problems (``.problems`` is ``.levels``)."""

    __slots__ = ()

    @property
    def problems(self) -> Problem:
        return self.levels


def init_buffer(example: Problem, buffer_size: int) -> Buffer:
    """An empty buffer for problems like ``example`` (:func:`magister.curricula.jax.init_buffer`)."""
    return Buffer(*L.init_buffer(example, buffer_size))


def plr_sample(
    key: jax.Array,
    buffer: Buffer,
    new_problems: Problem,
    cfg: CurriculumConfig,
    children: Problem | None = None,
    has_child: jax.Array | None = None,
) -> tuple[Buffer, Sample]:
    """:func:`magister.curricula.jax.plr_sample` (ACCEL children where ``has_child``)."""
    buffer, smp = L.plr_sample(key, buffer, new_problems, cfg, children, has_child)
    return buffer, Sample(*smp)


def sfl_sample(key: jax.Array, state: SFLState, new_problems: Problem, cfg: SFLConfig) -> Sample:
    """:func:`magister.curricula.jax.sfl_sample`."""
    return Sample(*L.sfl_sample(key, state, new_problems, cfg))


def sfl_refresh(key: jax.Array, candidates: Problem, success_rates: jax.Array, cfg: SFLConfig) -> SFLState:
    """:func:`magister.curricula.jax.sfl_refresh`."""
    return SFLState(*L.sfl_refresh(key, candidates, success_rates, cfg))


def dr_sample(new_problems: Problem) -> Sample:
    """:func:`magister.curricula.jax.dr_sample`."""
    return Sample(*L.dr_sample(new_problems))
