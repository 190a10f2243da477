"""Co-players of the XLand-style env: the policies that play the non-learner player slots.

A task names one co-player id per player slot: :data:`LEARNER` (``-1``, the same value as
:data:`magister.opponents.CURRENT_AGENT`: the slot is one of the env's agents),
a built-in - :data:`NOOP` (always the noop action, as the paper's ``noop`` evaluation agent),
:data:`RANDOM` (uniform actions, the paper's ``random`` agent), :data:`SEEKER` (a scripted goal-seeker) -
or a snapshot id ``>= 0`` from an :class:`~magister.opponents.OpponentStore`, played by
:class:`PolicyCoPlayer` around the loaded ``policy(obs) -> action`` callable.

A co-player implements ``act(env, player) -> action`` and may read the env's state; built-ins draw their
randomness from the env's generator, so an episode is reproducible under ``reset(seed=...)``.

The goal-seeker picks the option of its goal with the most satisfied literals and works on its first
unsatisfied one: it walks (shortest path over the topology graph) next to the object or player of a
``near``/``hold``/``see`` literal, onto a tile of the floor of an ``on`` literal, carries an object for
``near(object, x)`` and ``on(object, floor)`` literals and drops it there, drops a held object a negated
``hold`` names, turns toward what a ``see`` literal names, and otherwise moves at random.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .game import ATOMS, FLOOR0, HOLD, ME, NEAR, NUM_OBJECTS, ON, OPPONENT, PLAYER0, SEE

if TYPE_CHECKING:
    from .env import XLandEnv

logger = logging.getLogger(__name__)

__all__ = ["LEARNER", "NOOP", "RANDOM", "SEEKER", "BUILTIN_COPLAYERS", "CoPlayer", "GoalSeeker",
           "NoopCoPlayer", "PolicyCoPlayer", "RandomCoPlayer", "make_builtin"]

LEARNER, NOOP, RANDOM, SEEKER = -1, -2, -3, -4
_NOOP, _FORWARD, _LEFT, _RIGHT, _GRAB, _GADGET = range(6)


class CoPlayer(Protocol):
    """What plays a co-player slot."""

    def act(self, env: XLandEnv, player: int) -> int: ...


class NoopCoPlayer:
    """Always the noop action."""

    def act(self, env: XLandEnv, player: int) -> int:
        return _NOOP


class RandomCoPlayer:
    """A uniformly random action from the env's generator."""

    def act(self, env: XLandEnv, player: int) -> int:
        return int(env._rng.integers(6))


class PolicyCoPlayer:
    """Wraps ``policy(observation) -> action`` (e.g. a snapshot from the opponent store)."""

    def __init__(self, policy: Callable[[dict[str, np.ndarray]], Any]) -> None:
        if not callable(policy):
            raise TypeError(f"policy must be callable, got {type(policy).__name__}")
        self.policy = policy

    def act(self, env: XLandEnv, player: int) -> int:
        a = self.policy(env.observe(player))
        return int(np.asarray(a).item())


def _turn_toward(d_have: int, d_want: int) -> int:
    return _RIGHT if (d_want - d_have) % 4 in (1, 2) else _LEFT


class GoalSeeker:
    """The scripted goal-seeker (see the module docstring)."""

    def act(self, env: XLandEnv, player: int) -> int:
        values = env.literal_values(player)
        options = env.game.goals[player].options
        best = max(range(len(options)), key=lambda k: (sum(values[k]), -k))
        if all(values[best]):
            return _NOOP
        lit = next(x for x, ok in zip(options[best], values[best]) if not ok)
        return self._pursue(env, player, lit)

    def _code(self, env: XLandEnv, player: int, x: int) -> int | None:
        """A ground code for a relative entity (``opponent``: the nearest present co-player)."""
        if x == ME:
            return PLAYER0 + player
        if x == OPPONENT:
            others = [j for j in range(env.n_players) if j != player and env.premoved[j] == 0]
            if not others:
                return None
            dist = [np.abs(env.ppos[j] - env.ppos[player]).sum() for j in others]
            return PLAYER0 + others[int(np.argmin(dist))]
        return x

    def _walk(self, env: XLandEnv, player: int, targets: np.ndarray) -> int:
        d = env.first_step_toward(player, targets)
        if d is None:
            return int(env._rng.integers(6))
        if d == -1:
            return _NOOP
        if d != env.pdir[player]:
            return _turn_toward(int(env.pdir[player]), d)
        return _FORWARD

    def _near_mask(self, env: XLandEnv, pos: tuple[int, int]) -> np.ndarray:
        n = env.world.size
        m = np.zeros((n, n), dtype=bool)
        m[max(pos[0] - 1, 0): pos[0] + 2, max(pos[1] - 1, 0): pos[1] + 2] = True
        return m

    def _fetch(self, env: XLandEnv, player: int, obj: int) -> int:
        """Walk onto the object's tile and grab it (dropping anything else first)."""
        held = int(env.hold[player])
        if held >= 0 and int(env.okind[held]) != obj:
            return _GRAB
        pos = env._pos(obj)
        if pos is None:
            return _NOOP
        mask = np.zeros((env.world.size,) * 2, dtype=bool)
        mask[pos] = True
        step = self._walk(env, player, mask)
        return _GRAB if step == _NOOP and env._pos(PLAYER0 + player) == pos else step

    def _pursue(self, env: XLandEnv, player: int, lit: int) -> int:
        rel, a, b = ATOMS[abs(lit) - 1]
        positive = lit > 0
        ca, cb = self._code(env, player, a), self._code(env, player, b)
        me = PLAYER0 + player
        if ca is None or cb is None:
            return int(env._rng.integers(6))
        if not positive:
            if rel == HOLD and ca == me:
                return _GRAB  # drop what we must not hold
            return int(env._rng.integers(6))
        if rel == HOLD and ca == me:
            return self._fetch(env, player, cb)
        if rel == ON and ca == me:
            return self._walk(env, player, env.floors == cb - FLOOR0)
        if rel == ON and ca < NUM_OBJECTS:
            if env.hold[player] < 0 or int(env.okind[env.hold[player]]) != ca:
                return self._fetch(env, player, ca)
            step = self._walk(env, player, env.floors == cb - FLOOR0)
            return _GRAB if step == _NOOP else step
        if rel == NEAR and me in (ca, cb):
            other = cb if ca == me else ca
            pos = env._pos(other)
            return _NOOP if pos is None else self._walk(env, player, self._near_mask(env, pos))
        if rel == NEAR and ca < NUM_OBJECTS:
            if env.hold[player] < 0 or int(env.okind[env.hold[player]]) not in (ca, cb):
                return self._fetch(env, player, ca)
            other = cb if int(env.okind[env.hold[player]]) == ca else ca
            pos = env._pos(other)
            if pos is None:
                return _NOOP
            step = self._walk(env, player, self._near_mask(env, pos))
            return _GRAB if step == _NOOP else step
        if rel == SEE and ca == me:
            pos, here = env._pos(cb), env._pos(me)
            if pos is None or here is None:
                return _NOOP
            dr, dc = pos[0] - here[0], pos[1] - here[1]
            want = (2 if dr > 0 else 0) if abs(dr) >= abs(dc) else (1 if dc > 0 else 3)
            if want != env.pdir[player]:
                return _turn_toward(int(env.pdir[player]), want)
            return _FORWARD
        return int(env._rng.integers(6))


BUILTIN_COPLAYERS: dict[int, type] = {NOOP: NoopCoPlayer, RANDOM: RandomCoPlayer, SEEKER: GoalSeeker}


def make_builtin(cid: int) -> CoPlayer:
    """The built-in co-player for id ``cid`` (``NOOP``, ``RANDOM`` or ``SEEKER``)."""
    try:
        return BUILTIN_COPLAYERS[cid]()
    except KeyError:
        raise ValueError(
            f"{cid!r} is not a built-in co-player id; expected one of {sorted(BUILTIN_COPLAYERS)}"
        ) from None
