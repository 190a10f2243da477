"""A *problem* = (level, reward machine): the environment the policy acts in.

One step: the grid moves (:func:`~magister.examples.minigrid_rm.env.grid_step`), the labelling function
reads the new state and the RM steps on that label; the reward is the RM's (1 on
reaching ``uA``). The episode terminates in ``uA`` and is truncated after ``max_steps`` (512 in the ATLAS
paper). The label is read after each step, not at reset, so no problem is solved with zero actions.
Only the RM's own literals are evaluated
(:func:`~magister.examples.minigrid_rm.propositions.literal_truth`, then
:func:`~magister.examples.minigrid_rm.reward_machines.rm_step_literals`): the same transitions as
:func:`~magister.examples.minigrid_rm.reward_machines.rm_step` on the full 889-proposition
:func:`~magister.examples.minigrid_rm.propositions.label`, at a fraction of the cost.

The policy observes :class:`Observation`: the ``5 x 5 x 2`` view, the RM arrays and the current RM state.

>>> import jax.numpy as jnp
>>> from magister.examples.minigrid_rm.env import BALL, FORWARD, empty_level
>>> from magister.examples.minigrid_rm.reward_machines import sequential_rm
>>> lvl = empty_level(1, agent_pos=(3, 2), agent_dir=0)
>>> lvl = lvl._replace(tiles=lvl.tiles.at[3, 4].set(BALL))
>>> s = reset(Problem(lvl, sequential_rm(["front_ball"])))
>>> s, r, term, trunc = step(s, jnp.int32(FORWARD), max_steps=10)
>>> float(r), bool(term)
(1.0, True)
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .env import GridState, Level, grid_step, observe
from .propositions import literal_truth
from .reward_machines import RewardMachine, rm_step_literals

logger = logging.getLogger(__name__)

__all__ = ["Observation", "Problem", "ProblemState", "make_obs", "reset", "step"]


class Problem(NamedTuple):
    """A task-level pair."""

    level: Level
    rm: RewardMachine


class ProblemState(NamedTuple):
    """Environment state: the grid, the RM state, the step count and the problem itself (for resets)."""

    grid: GridState
    rm_state: jax.Array
    t: jax.Array
    problem: Problem


class Observation(NamedTuple):
    view: jax.Array  # int32[5, 5, 2]
    rm: RewardMachine
    rm_state: jax.Array  # int32[]


def reset(problem: Problem) -> ProblemState:
    """The initial state of ``problem``."""
    return ProblemState(GridState.from_level(problem.level), jnp.asarray(problem.rm.initial, jnp.int32),
                        jnp.int32(0), problem)


def make_obs(s: ProblemState) -> Observation:
    return Observation(observe(s.grid), s.problem.rm, s.rm_state)


def step(s: ProblemState, action: jax.Array, max_steps: int = 512
         ) -> tuple[ProblemState, jax.Array, jax.Array, jax.Array]:
    """``(state', reward, terminated, truncated)``; no automatic reset (see :func:`auto_reset_step`)."""
    g = grid_step(s.grid, action)
    u, r = rm_step_literals(s.problem.rm, s.rm_state, literal_truth(g, s.problem.rm.edge_lits))
    t = s.t + 1
    term = u == s.problem.rm.accepting
    trunc = (t >= max_steps) & ~term
    return ProblemState(g, u, t, s.problem), r, term, trunc


def auto_reset_step(s: ProblemState, action: jax.Array, max_steps: int = 512
                    ) -> tuple[ProblemState, jax.Array, jax.Array, jax.Array, ProblemState]:
    """Step, then restart the *same* problem when the episode ended (the JaxUED convention: a problem is
    fixed for a whole rollout). Returns ``(next state, reward, terminated, truncated, state before reset)``.
    """
    s2, r, term, trunc = step(s, action, max_steps)
    done = term | trunc
    fresh = reset(s.problem)
    out = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), fresh, s2)
    return out, r, term, trunc, s2
