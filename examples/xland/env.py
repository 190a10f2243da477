"""The XLand-style grid game as a PettingZoo parallel environment (pure numpy).

A task is an :class:`XLandTask`: a :class:`~.world.World`, a :class:`~.game.Game` (one goal per player)
and one *co-player id* per player slot. Slots with :data:`~.coplayers.LEARNER` (``-1``, the same value as
:data:`magister.opponents.CURRENT_AGENT`) are the env's agents (``"player_0"`` ..); the other
slots are played inside the env by a co-player: :data:`~.coplayers.NOOP`, :data:`~.coplayers.RANDOM`,
:data:`~.coplayers.SEEKER` (a scripted goal-seeker) or a snapshot id ``>= 0`` loaded from an
:class:`~magister.opponents.OpponentStore` directory by an
:class:`~magister.opponents.OpponentLoader` (one per slot; the loaded object must be a
callable ``policy(observation) -> action``, e.g. built by ``make_agent``).

Dynamics (one step, players in index order, so simultaneous actions resolve deterministically):

* actions: 0 noop, 1 forward, 2 turn left, 3 turn right, 4 grab/drop, 5 use gadget;
* forward follows the topology rule of :func:`~.world.can_move` and never enters a tile where another
  player stands; a carried object moves with its carrier;
* grab picks the lowest-kind free (not frozen) object on the tile in front, else on the player's own
  tile; two players may hold the same object (it follows the first one); a hold ends when the holder
  drops it, when the object is frozen or tagged, or when holder and object are no longer near;
* the gadget acts on the first entity along the facing direction within :data:`GADGET_RANGE` tiles
  (stopped by terrain higher than the player): *freeze* pins an object for ``freeze_steps`` steps (it
  cannot be held), *tag* removes a player or object for ``tag_steps`` steps and then returns it to its
  initial position (a player waits while that tile is occupied).

Relations: ``near`` (Chebyshev distance <= 1), ``on`` (the entity's tile has the floor colour; a held
object touches no floor), ``hold``, ``see`` (a player sees inside a 90 degree cone around its facing
direction, an object in every direction; either way the straight line between the viewpoints - eyes at
tile height + 1 for players, + 0.5 for objects - must pass above the tiles in between; exact integer
arithmetic, so ``see`` between two objects is symmetric). Removed entities are in no relation. Rewards
are 1.0 when the player's goal holds after the step, else 0.0; no early termination, every agent is
truncated after ``episode_length`` steps (the paper's fixed episode length). Goals are evaluated with the
same grounding as :func:`~.game.game_measures`.

Observations (per agent, a ``Dict``): ``"grid"`` ``(27, 11, 11)`` float32 (in-grid, height, 4 ramp
directions, 6 floor colours, 12 object kinds, frozen, self, other players; padded to 11 x 11),
``"vector"`` (23 float32: position, facing, held object kind, gadget, removed, time), and the player's own
goal: ``"goal_atoms"`` (6 atom ids, -1 padded) and ``"goal_matrix"`` (3 x 6 literal signs), see
:func:`~.game.goal_observation`.

>>> env = XLandEnv(seed=0)
>>> obs, infos = env.reset(seed=0)
>>> sorted(obs), obs["player_0"]["grid"].shape
(['player_0', 'player_1'], (27, 11, 11))
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from ...env_wrappers.pettingzoo_wrapper import PettingZooTaskWrapper
from ...task_spaces.base import EncodedTask, TaskSpace
from .coplayers import BUILTIN_COPLAYERS, LEARNER, CoPlayer, PolicyCoPlayer, make_builtin
from .game import (
    HOLD,
    MAX_GOAL_ATOMS,
    MAX_OPTIONS,
    NEAR,
    NUM_ATOMS,
    NUM_OBJECTS,
    ON,
    PLAYER0,
    SEE,
    Game,
    goal_observation,
    ground_game,
    random_game,
)
from .world import DIRECTIONS, MAX_HEIGHT, MAX_PLAYERS, MAX_SIZE, TAG, World, can_move
from .world import condition_world as _condition_world
from .world import generate_world as _generate_world

logger = logging.getLogger(__name__)

__all__ = ["ACTIONS", "GADGET_RANGE", "XLandEnv", "XLandTask", "XLandTaskWrapper"]

ACTIONS = ("noop", "forward", "left", "right", "grab", "gadget")
NOOP_A, FORWARD, LEFT, RIGHT, GRAB, GADGET = range(6)
GADGET_RANGE = 4
N_CHANNELS = 27
N_VECTOR = 23
C_OBJ, C_FROZEN, C_SELF, C_OTHER = 12, 24, 25, 26


@dataclass(frozen=True)
class XLandTask:
    """A decoded task: world, game and one co-player id per player slot (see the module docstring)."""

    world: World
    game: Game
    coplayers: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.world, World) or not isinstance(self.game, Game):
            raise TypeError("XLandTask needs a World and a Game")
        cps = tuple(self.coplayers)
        for c in cps:
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or (
                c < 0 and c not in (LEARNER, *BUILTIN_COPLAYERS)
            ):
                raise ValueError(
                    f"co-player id {c!r} must be LEARNER (-1), a built-in ({sorted(BUILTIN_COPLAYERS)}) "
                    "or a snapshot id >= 0"
                )
        if not (self.world.n_players == self.game.n_players == len(cps)):
            raise ValueError(
                f"XLandTask: the world has {self.world.n_players} players, the game "
                f"{self.game.n_players} goals "
                f"and there are {len(cps)} co-player ids; they must agree (see condition_world)"
            )
        if LEARNER not in cps:
            raise ValueError(f"XLandTask needs at least one LEARNER (-1) slot, got co-players {cps}")
        object.__setattr__(self, "coplayers", tuple(int(c) for c in cps))

    def encode(self) -> tuple:
        """Wire form ``(world, game, coplayers)``, nested tuples of ints."""
        return (self.world.encode(), self.game.encode(), self.coplayers)

    @classmethod
    def decode(cls, encoded: Any) -> XLandTask:
        """Inverse of :meth:`encode`; ``ValueError`` for a malformed task."""
        try:
            w, g, c = encoded
        except (TypeError, ValueError):
            raise ValueError(f"an encoded XLandTask is (world, game, coplayers), got {encoded!r}") from None
        return cls(World.decode(w), Game.decode(g), tuple(c))


def _los_blocked(hmap: np.ndarray, a: tuple[int, int], ha2: int, b: tuple[int, int], hb2: int) -> bool:
    """Whether terrain blocks the segment between tile centres ``a`` and ``b`` with viewpoint heights
    ``ha2``/``hb2`` in half levels (exact integer arithmetic; symmetric in ``a`` and ``b``)."""
    dr, dc = b[0] - a[0], b[1] - a[1]
    k_max = 2 * max(abs(dr), abs(dc))
    if k_max <= 2:
        return False  # neighbours (or same tile): nothing in between
    for k in range(1, k_max):
        r = (2 * (a[0] * k_max + k * dr) + k_max) // (2 * k_max)
        c = (2 * (a[1] * k_max + k * dc) + k_max) // (2 * k_max)
        if (r, c) == a or (r, c) == b:
            continue
        if 2 * int(hmap[r, c]) * k_max > ha2 * (k_max - k) + hb2 * k:
            return True
    return False


class XLandEnv(ParallelEnv):
    """The XLand-style game (see the module docstring).

    Args:
        task: The first task (an :class:`XLandTask`); without one, every reset draws a random world and
            a random 2-player game (all players learners) from the env's generator.
        episode_length: Steps per episode (every agent is truncated then).
        freeze_steps: Steps a frozen object stays pinned.
        tag_steps: Steps a tagged entity stays removed.
        opponent_dir: Directory of an :class:`~magister.opponents.OpponentStore` for
            snapshot co-players.
        make_agent: Turns a loaded snapshot into a ``policy(obs) -> action`` callable.
        load_fn: Snapshot loader (``OpponentLoader``'s ``load_fn``; default torch).
        opponent_fallback: When a task names a snapshot that a bounded store has evicted since the
            curriculum sampled it, play the store's newest snapshot instead (logged; ``OpponentLoader``'s
            ``fallback_to_latest``) rather than raising ``KeyError``. The result reported for the evicted
            id is dropped by the co-player curriculum.
        seed: Seed of the env's generator (also settable with ``reset(seed=...)``).
        render_mode: ``None`` or ``"ansi"``.

    The defaults scale the paper's timings to a short grid episode: 120 steps, freeze 5 steps and tag 3
    steps, about the fractions of the paper's 900-step episode that its 5 s freeze and 3 s tag take.
    """

    metadata = {"name": "xland_grid_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        task: XLandTask | None = None,
        *,
        episode_length: int = 120,
        freeze_steps: int = 5,
        tag_steps: int = 3,
        opponent_dir: str | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        load_fn: Callable[[Any], Any] | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
        opponent_fallback: bool = False,
    ) -> None:
        for name, v in (("episode_length", episode_length), ("freeze_steps", freeze_steps),
                        ("tag_steps", tag_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.episode_length = int(episode_length)
        self.freeze_steps = int(freeze_steps)
        self.tag_steps = int(tag_steps)
        self.render_mode = render_mode
        self.opponent_dir = opponent_dir
        self.make_agent = make_agent
        self.load_fn = load_fn
        self.opponent_fallback = bool(opponent_fallback)
        self._loaders: dict[int, Any] = {}
        self.possible_agents = [f"player_{i}" for i in range(MAX_PLAYERS)]
        self.agents: list[str] = []
        self._rng = np.random.default_rng(seed)
        self._obs_space = spaces.Dict({
            "grid": spaces.Box(0.0, 1.0, shape=(N_CHANNELS, MAX_SIZE, MAX_SIZE), dtype=np.float32),
            "vector": spaces.Box(0.0, 1.0, shape=(N_VECTOR,), dtype=np.float32),
            "goal_atoms": spaces.Box(-1, NUM_ATOMS - 1, shape=(MAX_GOAL_ATOMS,), dtype=np.int64),
            "goal_matrix": spaces.Box(-1.0, 1.0, shape=(MAX_OPTIONS, MAX_GOAL_ATOMS), dtype=np.float32),
        })
        self._act_space = spaces.Discrete(len(ACTIONS))
        self._pending: XLandTask | None = None
        self.task: XLandTask | None = None
        if task is not None:
            self.set_task(task)
        self.t = 0

    # -- spaces -------------------------------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        """The same ``Dict`` space object for every agent and call."""
        self._check_agent(agent)
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        """``Discrete(6)``: noop, forward, left, right, grab/drop, gadget (the same object every call)."""
        self._check_agent(agent)
        return self._act_space

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise KeyError(f"unknown agent {agent!r}; XLandEnv's agents are {self.possible_agents}")

    # -- tasks --------------------------------------------------------------------------------------
    def set_task(self, task: XLandTask) -> None:
        """Use ``task`` from the next :meth:`reset` on (and for every reset after it)."""
        if not isinstance(task, XLandTask):
            raise TypeError(f"task must be an XLandTask, got {type(task).__name__}")
        self._pending = task

    def _random_task(self) -> XLandTask:
        game = random_game(self._rng)
        world = _condition_world(_generate_world(self._rng, n_players=2), game, self._rng)
        return XLandTask(world, game, (LEARNER,) * game.n_players)

    # -- the parallel API ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if options and "task" in options:
            self.set_task(options["task"])
        task = self._pending if self._pending is not None else self._random_task()
        self.task = task
        self._load_state(task)
        obs = {a: self.observe(self._index[a]) for a in self.agents}
        return obs, {a: {"player_index": self._index[a], "success": 0.0} for a in self.agents}

    def _load_state(self, task: XLandTask) -> None:
        w = task.world
        self.world, self.game = w, task.game
        self.n_players = w.n_players
        self.heights, self.ramps, self.floors = w.height_map, w.ramp_map, w.floor_map
        self.ppos = np.array([p[:2] for p in w.players], dtype=np.int64)
        self.pinit = self.ppos.copy()
        self.pdir = np.array([p[2] for p in w.players], dtype=np.int64)
        self.gadget = np.array([p[3] for p in w.players], dtype=np.int64)
        self.premoved = np.zeros(self.n_players, dtype=np.int64)
        self.okind = np.array([o[0] for o in w.objects], dtype=np.int64)
        self.opos = np.array([o[1:] for o in w.objects], dtype=np.int64).reshape(-1, 2)
        self.oinit = self.opos.copy()
        self.oremoved = np.zeros(len(self.okind), dtype=np.int64)
        self.ofrozen = np.zeros(len(self.okind), dtype=np.int64)
        self.carrier = np.full(len(self.okind), -1, dtype=np.int64)
        self.hold = np.full(self.n_players, -1, dtype=np.int64)
        self._obj_of_kind = {int(k): i for i, k in enumerate(self.okind)}
        self.ground_atoms, self._compiled = ground_game(task.game.goals)
        self._fast = [[[(tuple(idx.tolist()), pos) for idx, pos in lits] for lits in options]
                      for options in self._compiled]
        self._goal_obs = [goal_observation(g) for g in task.game.goals]
        self.coplayers = task.coplayers
        self._controllers: list[CoPlayer | None] = [
            self._controller(i, c) for i, c in enumerate(task.coplayers)
        ]
        self.agents = [f"player_{i}" for i, c in enumerate(task.coplayers) if c == LEARNER]
        self._index = {f"player_{i}": i for i in range(self.n_players)}
        self.t = 0
        self.returns = np.zeros(self.n_players, dtype=np.float64)
        self._static = self._static_channels()
        self.rewards_now = self._evaluate()

    def _controller(self, slot: int, cid: int) -> CoPlayer | None:
        if cid == LEARNER:
            return None
        if cid in BUILTIN_COPLAYERS:
            return make_builtin(cid)
        if self.opponent_dir is None:
            raise ValueError(f"co-player slot {slot} plays snapshot {cid}, but the env has no opponent_dir")
        loader = self._loaders.get(slot)
        if loader is None:
            from ...opponents import OpponentLoader

            loader = OpponentLoader(self.opponent_dir, load_fn=self.load_fn, make_agent=self.make_agent,
                                    fallback_to_latest=self.opponent_fallback)
            self._loaders[slot] = loader
        policy = loader.get(cid)
        if not callable(policy):
            raise TypeError(f"snapshot {cid} loaded as {type(policy).__name__}, not a policy(obs) callable; "
                            "pass make_agent")
        return PolicyCoPlayer(policy)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("XLandEnv.step called after the episode ended; call reset() first")
        acts = np.zeros(self.n_players, dtype=np.int64)
        for i, ctl in enumerate(self._controllers):
            if ctl is not None:
                acts[i] = self._check_action(ctl.act(self, i), f"co-player in slot {i}")
        for a in self.agents:
            acts[self._index[a]] = self._check_action(actions.get(a, NOOP_A), f"agent {a!r}")
        self._tick()
        for i in range(self.n_players):
            if self.premoved[i] == 0:
                self._act(i, int(acts[i]))
        self._check_holds()
        self.t += 1
        r = self._evaluate()
        self.rewards_now = r
        self.returns += r
        done = self.t >= self.episode_length
        agents = list(self.agents)
        obs = {a: self.observe(self._index[a]) for a in agents}
        rews = {a: float(r[self._index[a]]) for a in agents}
        terms = dict.fromkeys(agents, False)
        truncs = dict.fromkeys(agents, done)
        infos = {}
        for a in agents:
            i = self._index[a]
            info = {"player_index": i, "goal_satisfied": bool(r[i]),
                    "success": float(self.returns[i] / self.t)}
            if done:
                info["episode_returns"] = tuple(float(x) for x in self.returns)
            infos[a] = info
        if done:
            self.agents = []
        return obs, rews, terms, truncs, infos

    def _check_action(self, act: Any, who: str) -> int:
        if isinstance(act, np.ndarray) and act.shape == ():
            act = act.item()
        if isinstance(act, (bool, np.bool_)) or not isinstance(act, (int, np.integer)) or not (
            0 <= act < len(ACTIONS)
        ):
            raise ValueError(f"action {act!r} of {who} is not in Discrete({len(ACTIONS)}) ({ACTIONS})")
        return int(act)

    # -- dynamics -----------------------------------------------------------------------------------
    def _tick(self) -> None:
        if not (self.ofrozen.any() or self.oremoved.any() or self.premoved.any()):
            return
        self.ofrozen[self.ofrozen > 0] -= 1
        for o in np.flatnonzero(self.oremoved):
            self.oremoved[o] -= 1
            if self.oremoved[o] == 0:
                self.opos[o] = self.oinit[o]
        for i in np.flatnonzero(self.premoved):
            if self.premoved[i] == 1:
                home = self.pinit[i]
                if any(j != i and self.premoved[j] == 0 and (self.ppos[j] == home).all()
                       for j in range(self.n_players)):
                    continue  # home tile occupied: wait
                self.ppos[i] = home
            self.premoved[i] -= 1

    def _player_at(self, r: int, c: int, exclude: int = -1) -> int:
        for j in range(self.n_players):
            if j != exclude and self.premoved[j] == 0 and self.ppos[j, 0] == r and self.ppos[j, 1] == c:
                return j
        return -1

    def _act(self, i: int, a: int) -> None:
        if a == FORWARD:
            r, c = int(self.ppos[i, 0]), int(self.ppos[i, 1])
            d = int(self.pdir[i])
            if can_move(self.heights, self.ramps, r, c, d):
                nr, nc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
                if self._player_at(nr, nc, exclude=i) < 0:
                    self.ppos[i] = (nr, nc)
                    self.opos[self.carrier == i] = (nr, nc)
        elif a == LEFT:
            self.pdir[i] = (self.pdir[i] + 3) % 4
        elif a == RIGHT:
            self.pdir[i] = (self.pdir[i] + 1) % 4
        elif a == GRAB:
            if self.hold[i] >= 0:
                self._release(i)
            else:
                self._grab(i)
        elif a == GADGET:
            self._use_gadget(i)

    def _release(self, i: int) -> None:
        o = int(self.hold[i])
        self.hold[i] = -1
        if self.carrier[o] == i:
            others = np.flatnonzero(self.hold == o)
            self.carrier[o] = int(others[0]) if len(others) else -1
            if len(others):
                self.opos[o] = self.ppos[others[0]]  # the next holder carries it from its own tile

    def _release_object(self, o: int) -> None:
        for j in np.flatnonzero(self.hold == o):
            self.hold[j] = -1
        self.carrier[o] = -1

    def _free_objects_at(self, r: int, c: int) -> list[int]:
        m = (self.opos[:, 0] == r) & (self.opos[:, 1] == c) & (self.oremoved == 0) & (self.ofrozen == 0)
        idx = np.flatnonzero(m)
        return sorted(idx.tolist(), key=lambda o: self.okind[o])

    def _grab(self, i: int) -> None:
        r, c = int(self.ppos[i, 0]), int(self.ppos[i, 1])
        d = int(self.pdir[i])
        fr, fc = r + DIRECTIONS[d, 0], c + DIRECTIONS[d, 1]
        n = self.world.size
        cands = (self._free_objects_at(fr, fc) if 0 <= fr < n and 0 <= fc < n else []) or \
            self._free_objects_at(r, c)
        if not cands:
            return
        o = cands[0]
        self.hold[i] = o
        if self.carrier[o] < 0:
            self.carrier[o] = i
            self.opos[o] = (r, c)

    def _use_gadget(self, i: int) -> None:
        r, c = int(self.ppos[i, 0]), int(self.ppos[i, 1])
        d = int(self.pdir[i])
        h0 = self.heights[r, c]
        n = self.world.size
        for k in range(1, GADGET_RANGE + 1):
            tr, tc = r + k * DIRECTIONS[d, 0], c + k * DIRECTIONS[d, 1]
            if not (0 <= tr < n and 0 <= tc < n) or self.heights[tr, tc] > h0:
                return
            if self.gadget[i] == TAG:
                j = self._player_at(tr, tc, exclude=i)
                if j >= 0:
                    if self.hold[j] >= 0:
                        self._release(j)
                    self.premoved[j] = self.tag_steps
                    return
            objs = [o for o in np.flatnonzero((self.opos[:, 0] == tr) & (self.opos[:, 1] == tc)
                                              & (self.oremoved == 0)) if self.hold[i] != o]
            if objs:
                o = int(min(objs, key=lambda x: self.okind[x]))
                self._release_object(o)
                if self.gadget[i] == TAG:
                    self.oremoved[o] = self.tag_steps
                else:
                    self.ofrozen[o] = self.freeze_steps
                return

    def _check_holds(self) -> None:
        for i in range(self.n_players):
            o = int(self.hold[i])
            if o < 0:
                continue
            gone = self.premoved[i] > 0 or self.oremoved[o] > 0 or self.ofrozen[o] > 0
            if gone or np.abs(self.ppos[i] - self.opos[o]).max() > 1:
                self._release(i)

    # -- relations ----------------------------------------------------------------------------------
    def _pos(self, code: int) -> tuple[int, int] | None:
        """Tile of a ground entity code (object kind 0..8 or ``PLAYER0 + i``), ``None`` when absent."""
        if code >= PLAYER0:
            i = code - PLAYER0
            if i >= self.n_players or self.premoved[i] > 0:
                return None
            return int(self.ppos[i, 0]), int(self.ppos[i, 1])
        o = self._obj_of_kind.get(code)
        if o is None or self.oremoved[o] > 0:
            return None
        return int(self.opos[o, 0]), int(self.opos[o, 1])

    def relation(self, rel: int, a: int, b: int) -> bool:
        """Truth of a ground atom ``rel(a, b)`` (entity codes of :mod:`.game`; players ``PLAYER0 + i``)."""
        if rel == HOLD:
            i, o = a - PLAYER0, self._obj_of_kind.get(b)
            return o is not None and self._pos(a) is not None and int(self.hold[i]) == o
        pa = self._pos(a)
        if pa is None:
            return False
        if rel == ON:
            if a < NUM_OBJECTS and (self.hold == self._obj_of_kind[a]).any():
                return False  # a held object touches no floor
            return int(self.floors[pa]) == b - (NUM_OBJECTS + 2)
        pb = self._pos(b)
        if pb is None:
            return False
        if rel == NEAR:
            return max(abs(pa[0] - pb[0]), abs(pa[1] - pb[1])) <= 1
        if rel == SEE:
            return self._sees(a, pa, b, pb)
        raise ValueError(f"unknown relation {rel!r}")

    def _sees(self, a: int, pa: tuple[int, int], b: int, pb: tuple[int, int]) -> bool:
        if pa == pb:
            return True
        if a >= PLAYER0:
            d = int(self.pdir[a - PLAYER0])
            vr, vc = pb[0] - pa[0], pb[1] - pa[1]
            fwd = vr * DIRECTIONS[d, 0] + vc * DIRECTIONS[d, 1]
            lat = abs(vr * DIRECTIONS[d, 1] - vc * DIRECTIONS[d, 0])
            if fwd <= 0 or lat > fwd:
                return False
        ha = 2 * int(self.heights[pa]) + (2 if a >= PLAYER0 else 1)
        hb = 2 * int(self.heights[pb]) + (2 if b >= PLAYER0 else 1)
        return not _los_blocked(self.heights, pa, ha, pb, hb)

    def atom_values(self) -> np.ndarray:
        """Truth values of the game's ground atoms (``self.ground_atoms``) in the current state."""
        return np.array([self.relation(*g) for g in self.ground_atoms], dtype=bool)

    def _evaluate(self) -> np.ndarray:
        """Every player's reward: ``max`` over options of ``min`` over literals (plain Python on one state;
        :func:`~.game.reward_table` computes the same on all feasible states at once)."""
        vals = [self.relation(*g) for g in self.ground_atoms]
        return np.array([
            float(any(all(any(vals[k] for k in idx) == pos for idx, pos in lits) for lits in options))
            for options in self._fast
        ])

    def literal_values(self, player: int) -> list[list[bool]]:
        """Per option of ``player``'s goal, the truth of each literal (for scripted co-players)."""
        vals = self.atom_values()
        out = []
        for lits in self._compiled[player]:
            row = []
            for idx, positive in lits:
                t = bool(vals[idx].any()) if len(idx) else False
                row.append(t == positive)
            out.append(row)
        return out

    # -- observations -------------------------------------------------------------------------------
    def _static_channels(self) -> np.ndarray:
        n = self.world.size
        g = np.zeros((N_CHANNELS, MAX_SIZE, MAX_SIZE), dtype=np.float32)
        g[0, :n, :n] = 1.0
        g[1, :n, :n] = self.heights / (MAX_HEIGHT - 1)
        for d in range(4):
            g[2 + d, :n, :n] = self.ramps == d
        for f in range(6):
            g[6 + f, :n, :n] = self.floors == f
        return g

    def observe(self, i: int) -> dict[str, np.ndarray]:
        """Player ``i``'s observation (the format of :meth:`observation_space`)."""
        g = self._static.copy()
        present = self.oremoved == 0
        g[C_OBJ + self.okind[present], self.opos[present, 0], self.opos[present, 1]] = 1.0
        frozen = present & (self.ofrozen > 0)
        g[C_FROZEN, self.opos[frozen, 0], self.opos[frozen, 1]] = 1.0
        others = self.premoved == 0
        if others[i]:
            g[C_SELF, self.ppos[i, 0], self.ppos[i, 1]] = 1.0
        others[i] = False
        g[C_OTHER, self.ppos[others, 0], self.ppos[others, 1]] = 1.0
        v = np.zeros(N_VECTOR, dtype=np.float32)
        v[0:2] = self.ppos[i] / (MAX_SIZE - 1)
        v[2 + self.pdir[i]] = 1.0
        v[6 + (self.okind[self.hold[i]] + 1 if self.hold[i] >= 0 else 0)] = 1.0
        v[19 + self.gadget[i]] = 1.0
        v[21] = float(self.premoved[i] > 0)
        v[22] = self.t / self.episode_length
        ids, mat = self._goal_obs[i]
        return {"grid": g, "vector": v, "goal_atoms": ids.copy(), "goal_matrix": mat.copy()}

    # -- navigation helper (scripted co-players) ----------------------------------------------------
    def first_step_toward(self, i: int, targets: np.ndarray) -> int | None:
        """Direction of the first move on a shortest path from player ``i`` to any ``True`` tile of
        ``targets`` (``None`` when unreachable, ``-1`` when already there)."""
        start = (int(self.ppos[i, 0]), int(self.ppos[i, 1]))
        if targets[start]:
            return -1
        n = self.world.size
        first = {start: -1}
        queue = deque([start])
        while queue:
            r, c = queue.popleft()
            for d in range(4):
                if can_move(self.heights, self.ramps, r, c, d):
                    nxt = (r + int(DIRECTIONS[d, 0]), c + int(DIRECTIONS[d, 1]))
                    if nxt in first or not (0 <= nxt[0] < n and 0 <= nxt[1] < n):
                        continue
                    first[nxt] = d if (r, c) == start else first[(r, c)]
                    if targets[nxt]:
                        return first[nxt]
                    queue.append(nxt)
        return None

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rows = [[str(int(h)) for h in row] for row in self.heights]
        for o in np.flatnonzero(self.oremoved == 0):
            rows[self.opos[o, 0]][self.opos[o, 1]] = "o"
        for j in range(self.n_players):
            if self.premoved[j] == 0:
                rows[self.ppos[j, 0]][self.ppos[j, 1]] = "ABC"[j]
        return "\n".join("".join(r) for r in rows)

    def close(self) -> None:
        for loader in self._loaders.values():
            loader.close()
        self._loaders.clear()


class XLandTaskWrapper(PettingZooTaskWrapper):
    """Task wrapper: ``reset(options={"task": XLandTask(...)})`` switches world, game and co-players.

    Progress (``info["task_progress"]``) is the agent's fraction of rewarded steps so far.
    """

    def __init__(self, env: XLandEnv | None = None, task_space: TaskSpace | None = None,
                 **kwargs: Any) -> None:
        env = XLandEnv() if env is None else env
        if not isinstance(env.unwrapped, XLandEnv):
            raise TypeError(f"XLandTaskWrapper needs an XLandEnv, got {type(env.unwrapped).__name__}")
        if task_space is None:
            from .task import XLandTaskSpace

            task_space = XLandTaskSpace()
        super().__init__(env, task_space, **kwargs)

    def change_task(self, task: Any) -> None:
        self.env.unwrapped.set_task(task)

    def encode_task_observation(self, encoded_task: EncodedTask) -> np.ndarray:
        raise NotImplementedError("XLandEnv observations already carry each player's goal")


def play_episode(env: XLandEnv, policies: Sequence[Callable[[dict], int]] | None = None,
                 seed: int | None = None) -> np.ndarray:
    """Run one episode with ``policies[k]`` acting for the k-th agent (random actions by default) and
    return every player's return."""
    obs, _ = env.reset(seed=seed)
    agents = list(env.agents)
    while env.agents:
        acts = {}
        for k, a in enumerate(agents):
            if policies is None:
                acts[a] = int(env._rng.integers(len(ACTIONS)))
            else:
                acts[a] = int(policies[k](obs[a]))
        obs, _, _, _, _ = env.step(acts)
    return env.returns.copy()
