"""A small hand-designed evaluation set, including versions of the ATLAS paper's three probes.

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs",
Sec. 5.2 (Figure 4) and Appendix A.2. The paper's set has 150 problems; this is a small set in the same
spirit, written for this package (the layouts and tasks are ours, not copies of the paper's):

* ``myopic``: face a square, then face the locked blue door. A square waits behind that door (and the blue
  key is at hand), but opening the door makes the second subgoal impossible; the square in the agent's own
  room is the right one.
* ``patrol``: visit objects in three other rooms of a four-room level behind locked doors; the keys needed
  to open them are not mentioned by the task (underspecified).
* ``choice``: a branching RM: put a ball next to a square then face a locked green door, or pick up the
  purple key then face the yellow square; some doors must stay locked for one branch.
* simpler problems: go to, pick up, put next to, open a door, unlock a door.

Every problem is solvable (pinned by the tests with
:func:`~magister.examples.minigrid_rm.levels.is_solvable`).

>>> names, problems = probe_set()
>>> len(names) == int(problems.rm.n_states.shape[0]), "myopic" in names
(True, True)
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

from .env import build_level
from .problem import Problem
from .reward_machines import rm_from_edges, sequential_rm

logger = logging.getLogger(__name__)

__all__ = ["probe_problems", "probe_set"]


def probe_problems() -> dict[str, Problem]:
    """The hand-designed problems by name (unbatched, host side)."""
    out: dict[str, Problem] = {}
    out["goto_ball"] = Problem(
        build_level(1, (3, 1), 0, objects=[(1, 5, "ball", "red"), (5, 5, "key", "blue")]),
        sequential_rm(["front_ball_red"]))
    out["pickup_key"] = Problem(
        build_level(2, (3, 2), 1, doors=[("closed", "green")], objects=[(2, 9, "key", "yellow"),
                                                                        (4, 4, "ball", "yellow")]),
        sequential_rm(["carrying_key_yellow"]))
    out["put_next"] = Problem(
        build_level(1, (3, 3), 3, objects=[(1, 1, "ball", "green"), (5, 5, "square", "purple")]),
        sequential_rm(["carrying_ball_green", "next_ball_green_square_purple"]))
    out["open_door"] = Problem(
        build_level(2, (3, 3), 2, doors=[("closed", "purple")], objects=[(1, 1, "square", "gray")]),
        sequential_rm(["front_door_purple_closed", "front_door_purple_open"]))
    out["unlock_door"] = Problem(
        build_level(2, (3, 2), 0, doors=[("locked", "red")], objects=[(5, 1, "key", "red"),
                                                                      (3, 10, "ball", "blue")]),
        sequential_rm(["carrying_key_red", "front_ball_blue"]))
    out["myopic"] = Problem(
        build_level(2, (3, 3), 0, doors=[("locked", "blue")],
                    objects=[(1, 5, "key", "blue"), (5, 1, "square", "red"), (3, 9, "square", "green")]),
        sequential_rm(["front_square", "front_door_blue_locked"]))
    out["patrol"] = Problem(
        build_level(4, (3, 3), 0, doors=[("locked", "yellow"), ("locked", "green"), ("locked", "red"),
                                         ("closed", "blue")],
                    objects=[(1, 1, "key", "yellow"), (2, 9, "ball", "red"), (5, 10, "key", "red"),
                             (11, 2, "square", "green"), (8, 4, "key", "green"), (10, 10, "ball", "purple")]),
        sequential_rm(["front_ball_red", "front_square_green", "front_ball_purple"]))
    out["choice"] = Problem(
        build_level(4, (3, 3), 0, doors=[("locked", "green"), ("closed", "red"), ("locked", "yellow"),
                                         ("locked", "purple")],
                    objects=[(1, 1, "ball", "blue"), (5, 5, "square", "blue"), (2, 9, "key", "purple"),
                             (10, 10, "square", "yellow"), (4, 1, "key", "yellow")]),
        rm_from_edges(4, [(0, 1, ["next_ball_square"]), (1, 3, ["front_door_green_locked"]),
                          (0, 2, ["carrying_key_purple"]), (2, 3, ["front_square_yellow"])]))
    return out


def probe_set() -> tuple[list[str], Problem]:
    """``(names, batched problems)`` of :func:`probe_problems`."""
    probs = probe_problems()
    names = list(probs)
    batched = jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]),
                                     *[probs[n] for n in names])
    return names, batched
