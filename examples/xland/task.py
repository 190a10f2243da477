"""The XLand-style task space: (world, game, co-players), generator-backed, with held-out sets.

Following the paper's task space (Section 2.3, ``x = (w, (g_1..g_n), (pi_2..pi_n))``) and its evaluation
sets (Section 4.2), :class:`XLandTaskSpace` draws tasks at run time:

* a world from :func:`~.world.generate_world`, conditioned on the game (:func:`~.world.condition_world`);
* a game from :func:`~.game.random_game` with 1-``max_options`` options (default 3) of 1-``max_literals``
  literals (default 3), 2 players (3 with probability ``three_player_prob``); smaller games make a space
  a CPU-scale agent can learn in (the trainer's ``--max-options`` / ``--max-literals``); with
  ``player_centric=True`` every option of every goal requires an atom about its own player to hold
  (:func:`~.game.is_player_centric`; the trainer's ``--player-centric``, which explains why);
* co-players: slot 0 is always the learner; every other slot draws from ``coplayer_ids``.

The **encoded** task is ``XLandTask.encode()``: a nested tuple of small ints (world tiles, entities, the
game's signed literals, co-player ids), msgpack-safe and decodable in any process without a registry.

**Held-out sets.** :meth:`XLandTaskSpace.make_evaluation_sets` generates a test and a validation set of
tasks; the space then never samples (nor mutates into) a task whose game is recolouring-equivalent to a
held-out game (:func:`~.game.game_hash`) or whose world is a held-out world. The probe games
(:data:`~.game.PROBE_GAMES`, the hand-authored tasks) are held out from training by default, as in the
paper. :meth:`split` returns the training space and a fixed space of held-out tasks.

>>> space = XLandTaskSpace(seed=0)
>>> task = space.sample()
>>> space.decode(space.encode(task)) == task
True
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...task_spaces.base import EncodedTask, TaskSpace, check_k, stable_hash, task_key
from .coplayers import BUILTIN_COPLAYERS, LEARNER, NOOP, RANDOM, SEEKER
from .env import XLandEnv, XLandTask
from .game import (
    FLOOR_COLOURS,
    PROBE_GAMES,
    Game,
    Goal,
    game_hash,
    game_measures,
    is_player_centric,
    random_game,
)
from .world import World, condition_world, generate_world, mutate_world, path_entropy

logger = logging.getLogger(__name__)

__all__ = ["FixedXLandTasks", "XLandTaskSpace", "probe_tasks", "task_features", "world_hash"]

_MAX_REJECTS = 1000


def world_hash(world: Any) -> str:
    """Process-stable hash of a world's encoding."""
    return stable_hash(world.encode())


def _check_coplayers(ids: Iterable[int]) -> tuple[int, ...]:
    out = tuple(int(i) for i in ids)
    if not out:
        raise ValueError("coplayer_ids must not be empty")
    for i in out:
        if i < 0 and i not in (LEARNER, *BUILTIN_COPLAYERS):
            raise ValueError(f"co-player id {i} is neither LEARNER, a built-in, nor a snapshot id >= 0")
    return out


#: How :class:`XLandTaskSpace` encodes a task (by content, :meth:`XLandTask.encode`): its fingerprint's spec,
#: shared by spaces that decode the same encoding (the XLand trainer's env-side pair space).
XLAND_ENCODING = ("XLandTask.encode",)


class XLandTaskSpace(TaskSpace[XLandTask]):
    """Generator-backed XLand tasks (see the module docstring).

    Args:
        coplayer_ids: Ids the non-learner slots draw from (default noop, random, goal-seeker, learner).
        three_player_prob: Probability of a 3-player game.
        world_sizes: Inclusive range of world sizes.
        hold_out_probe_games: Exclude the probe games from training.
        heldout_games: Further games (or their :func:`~.game.game_hash` strings) never sampled.
        seed: Seed of the space's generator.
        max_options: Options per goal are drawn uniformly from ``1..max_options`` (at most 3).
        max_literals: Literals per option are drawn uniformly from ``1..max_literals`` (at most 3).
        player_centric: Sample only games whose every goal is :func:`~.game.is_player_centric` (training
            and held-out tasks alike: :meth:`make_evaluation_sets` draws from the same sampler).
    """

    def __init__(
        self,
        coplayer_ids: Sequence[int] = (NOOP, RANDOM, SEEKER, LEARNER),
        *,
        three_player_prob: float = 0.25,
        world_sizes: tuple[int, int] = (7, 11),
        hold_out_probe_games: bool = True,
        heldout_games: Iterable[Game | str] = (),
        seed: int | None = None,
        max_options: int = 3,
        max_literals: int = 3,
        player_centric: bool = False,
    ) -> None:
        super().__init__(seed)
        self.player_centric = bool(player_centric)
        for name, v in (("max_options", max_options), ("max_literals", max_literals)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 3:
                raise ValueError(f"{name} must be an int in [1, 3], got {v!r}")
        self.max_options, self.max_literals = int(max_options), int(max_literals)
        self.coplayer_ids = _check_coplayers(coplayer_ids)
        if not 0.0 <= float(three_player_prob) <= 1.0:
            raise ValueError(f"three_player_prob must be in [0, 1], got {three_player_prob!r}")
        self.three_player_prob = float(three_player_prob)
        lo, hi = world_sizes
        if not 3 <= lo <= hi <= 11:
            raise ValueError(f"world_sizes must satisfy 3 <= lo <= hi <= 11, got {world_sizes!r}")
        self.world_sizes = (int(lo), int(hi))
        self.heldout_game_hashes: set[str] = set()
        self.heldout_world_hashes: set[str] = set()
        if hold_out_probe_games:
            self.hold_out(games=PROBE_GAMES.values())
        self.hold_out(games=heldout_games)
        self.rejected = 0

    # -- held-out sets ------------------------------------------------------------------------------
    def hold_out(self, games: Iterable[Game | str] = (), worlds: Iterable[Any] = ()) -> None:
        """Never sample these games (recolouring-equivalent ones included) or these worlds again."""
        for g in games:
            self.heldout_game_hashes.add(g if isinstance(g, str) else game_hash(g))
        for w in worlds:
            self.heldout_world_hashes.add(w if isinstance(w, str) else world_hash(w))

    def is_heldout(self, task: XLandTask) -> bool:
        """Whether the task's game or world is held out."""
        return (game_hash(task.game) in self.heldout_game_hashes
                or world_hash(task.world) in self.heldout_world_hashes)

    def make_evaluation_sets(
        self, n_test: int, n_validation: int, seed: int = 0
    ) -> tuple[list[XLandTask], list[XLandTask]]:
        """Generate a test and a validation set and hold out their games and worlds from training.

        Validation games are distinct (up to recolouring) from test games; both sets use the built-in
        co-players only (snapshot ids change during training).
        """
        for name, v in (("n_test", n_test), ("n_validation", n_validation)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{name} must be a non-negative int, got {v!r}")
        rng = np.random.default_rng(seed)
        sets: list[list[XLandTask]] = []
        for n in (n_test, n_validation):
            tasks: list[XLandTask] = []
            while len(tasks) < n:
                task = self._draw(rng, coplayers=(NOOP, RANDOM, SEEKER))
                if self.is_heldout(task):
                    continue
                tasks.append(task)
                self.hold_out(games=[task.game], worlds=[task.world])
            sets.append(tasks)
        return sets[0], sets[1]

    def split(
        self, holdout: float | int | Sequence[Any], seed: int | None = 0
    ) -> tuple[TaskSpace, TaskSpace]:
        """``(training space, held-out space)``: ``holdout`` is a count of generated tasks or a sequence of
        tasks; the training space is a copy of this one that never samples their games or worlds."""
        train = copy.deepcopy(self)
        if isinstance(holdout, (int, np.integer)) and not isinstance(holdout, bool):
            tasks, _ = train.make_evaluation_sets(int(holdout), 0, seed=0 if seed is None else seed)
        elif isinstance(holdout, Sequence) and not isinstance(holdout, (str, bytes)):
            tasks = list(holdout)
            for t in tasks:
                if not isinstance(t, XLandTask):
                    raise ValueError(f"held-out tasks must be XLandTasks, got {type(t).__name__}")
            train.hold_out(games=[t.game for t in tasks], worlds=[t.world for t in tasks])
        else:
            raise ValueError(f"holdout must be a count or a sequence of XLandTasks, got {holdout!r}")
        return train, FixedXLandTasks(tasks)

    # -- sampling -----------------------------------------------------------------------------------
    def _draw(self, rng: np.random.Generator, coplayers: Sequence[int] | None = None) -> XLandTask:
        n_players = 3 if rng.random() < self.three_player_prob else 2
        game = random_game(rng, int(rng.integers(1, self.max_options + 1)),
                           int(rng.integers(1, self.max_literals + 1)), n_players,
                           player_centric=self.player_centric)
        size = int(rng.integers(self.world_sizes[0], self.world_sizes[1] + 1))
        world = condition_world(generate_world(rng, size, n_players=n_players), game, rng)
        ids = self.coplayer_ids if coplayers is None else coplayers
        cps = (LEARNER, *(int(ids[int(rng.integers(len(ids)))]) for _ in range(n_players - 1)))
        return XLandTask(world, game, cps)

    def sample(self) -> XLandTask:
        """A training task (never a held-out one)."""
        return self._sample_with(self._rng)

    def _sample_with(self, rng: np.random.Generator) -> XLandTask:
        for _ in range(_MAX_REJECTS):
            task = self._draw(rng)
            if not self.is_heldout(task):
                return task
            self.rejected += 1
        raise RuntimeError(f"{_MAX_REJECTS} draws in a row were held out; the held-out set is too large")

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        check_k(k)
        gen = self._rng if rng is None else rng
        return [self._sample_with(gen).encode() for _ in range(k)]

    # -- the contract -------------------------------------------------------------------------------
    def contains(self, task: Any) -> bool:
        """Any well-formed :class:`~.env.XLandTask` (held-out ones included: they are evaluation tasks)."""
        return isinstance(task, XLandTask)

    def encode(self, task: XLandTask) -> EncodedTask:
        if not isinstance(task, XLandTask):
            raise ValueError(f"task {task!r} is not an XLandTask of {self!r}")
        return task.encode()

    def _encoding_spec(self) -> Any:
        return XLAND_ENCODING

    def decode(self, encoded: EncodedTask) -> XLandTask:
        try:
            return XLandTask.decode(encoded)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{encoded!r:.200} is not an encoded task of {self!r}: {exc}") from None

    @property
    def num_tasks(self) -> None:
        return None

    # -- mutation (ACCEL-style) ---------------------------------------------------------------------
    @property
    def can_mutate(self) -> bool:
        return True

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> EncodedTask:
        """A small edit: the world (:func:`~.world.mutate_world`, probability 1/2), one literal of one goal
        flipped or replaced by another literal of the game (1/4), or one co-player slot resampled (1/4);
        the world is re-conditioned on the game, and the result is never a held-out task (nor, in a
        ``player_centric`` space, a game that is not player-centric)."""
        task = self.decode(encoded)
        for _ in range(100):
            u = rng.random()
            world, game, cps = task.world, task.game, task.coplayers
            if u < 0.5:
                world = condition_world(mutate_world(world, rng), game, rng)  # keep its floors present
            elif u < 0.75:
                game = _mutate_game(game, rng)
                if self.player_centric and not all(is_player_centric(g) for g in game.goals):
                    continue  # the edit removed the last positive `me` literal of an option
                world = condition_world(world, game, rng)
            elif len(cps) > 1:
                k = int(rng.integers(1, len(cps)))
                new_id = int(self.coplayer_ids[int(rng.integers(len(self.coplayer_ids)))])
                cps = cps[:k] + (new_id,) + cps[k + 1:]
            new = XLandTask(world, game, cps)
            if not self.is_heldout(new):
                return new.encode()
        logger.debug("mutate: every edit led to a held-out task; returning the task unchanged")
        return task.encode()

    # -- world variants (the task filter's replay_variant) ---------------------------------------------
    def world_variant(
        self, encoded: EncodedTask, rng: np.random.Generator, mode: str = "mutate", mutations: int = 4
    ) -> EncodedTask:
        """The same game and co-players on another world, drawn with ``rng``; never a held-out task.

        ``mode="mutate"``: the task's world after ``mutations`` local edits (:func:`~.world.mutate_world`),
        re-conditioned on the game (:func:`~.world.condition_world`: every entity and floor it mentions is
        present and reachable); ``mode="fresh"``: a newly generated world of the same size and player count
        conditioned on the game. A variant whose world is held out is redrawn (the game is the task's own:
        a training task's game is not held out). The trainer's ``--filter-replay-worlds``.
        """
        if mode not in ("mutate", "fresh"):
            raise ValueError(f"mode must be 'mutate' or 'fresh', got {mode!r}")
        if isinstance(mutations, bool) or not isinstance(mutations, (int, np.integer)) or mutations < 1:
            raise ValueError(f"mutations must be a positive int, got {mutations!r}")
        task = self.decode(encoded)
        if game_hash(task.game) in self.heldout_game_hashes:
            raise ValueError(f"world_variant of a task with a held-out game: {self.describe(task)}")
        for _ in range(_MAX_REJECTS):
            if mode == "fresh":
                world = generate_world(rng, task.world.size, n_players=task.game.n_players)
            else:
                world = task.world
                for _ in range(int(mutations)):
                    world = mutate_world(world, rng)
            new = XLandTask(condition_world(world, task.game, rng), task.game, task.coplayers)
            if world_hash(new.world) not in self.heldout_world_hashes:
                return new.encode()
            self.rejected += 1
        raise RuntimeError(f"{_MAX_REJECTS} world variants in a row were held out")

    def describe(self, task: XLandTask) -> str:
        return f"{task.world.size}x{task.world.size} world; game: {task.game}; co-players {task.coplayers}"

    def __repr__(self) -> str:
        return (f"XLandTaskSpace(coplayers={self.coplayer_ids}, "
                f"heldout_games={len(self.heldout_game_hashes)}, "
                f"heldout_worlds={len(self.heldout_world_hashes)})")


def _mutate_game(game: Game, rng: np.random.Generator) -> Game:
    goals = list(game.goals)
    k = int(rng.integers(len(goals)))
    opts = [list(o) for o in goals[k].options]
    i = int(rng.integers(len(opts)))
    j = int(rng.integers(len(opts[i])))
    if rng.random() < 0.5:
        opts[i][j] = -opts[i][j]
    else:
        donor = [x for o in (g.options for g in goals) for opt in o for x in opt]
        opts[i][j] = int(donor[int(rng.integers(len(donor)))])
    goals[k] = Goal(tuple(tuple(o) for o in opts))
    return Game(tuple(goals))


class FixedXLandTasks(TaskSpace[XLandTask]):
    """A finite, indexed list of XLand tasks (held-out evaluation sets, probe tasks)."""

    def __init__(self, tasks: Sequence[XLandTask], seed: int | None = None) -> None:
        super().__init__(seed)
        self._tasks = list(tasks)
        if not self._tasks:
            raise ValueError("FixedXLandTasks needs at least one task")
        for t in self._tasks:
            if not isinstance(t, XLandTask):
                raise ValueError(f"FixedXLandTasks holds XLandTasks, got {type(t).__name__}")
        self._index = {task_key(t.encode()): i for i, t in enumerate(self._tasks)}

    @property
    def indexed(self) -> bool:
        return True

    @property
    def num_tasks(self) -> int:
        return len(self._tasks)

    @property
    def tasks(self) -> list[XLandTask]:
        return list(self._tasks)

    def sample(self) -> XLandTask:
        return self._tasks[int(self._rng.integers(len(self._tasks)))]

    def contains(self, task: Any) -> bool:
        return isinstance(task, XLandTask) and task_key(task.encode()) in self._index

    def encode(self, task: XLandTask) -> int:
        if not isinstance(task, XLandTask) or task_key(task.encode()) not in self._index:
            raise ValueError(f"task {task!r:.200} is not a task of {self!r}")
        return self._index[task_key(task.encode())]

    def decode(self, encoded: EncodedTask) -> XLandTask:
        if isinstance(encoded, bool) or not isinstance(encoded, (int, np.integer)) or not (
            0 <= encoded < len(self._tasks)
        ):
            raise ValueError(f"{encoded!r} is not an encoded task of {self!r} (0..{len(self._tasks) - 1})")
        return self._tasks[int(encoded)]


_HILL_GAMES = ("king_of_the_hill", "race_to_clifftop")


def _white_hilltop(world: World) -> World:
    """Paint the highest playable tiles white and every other white tile its neighbour's colour."""
    white = FLOOR_COLOURS.index("white")
    area, h = world.playable_area, world.height_map
    top = area & (h == h[area].max())
    floors = world.floor_map.copy()
    floors[(floors == white) & ~top] = (white + 1) % len(FLOOR_COLOURS)
    floors[top] = white
    return World(world.size, world.heights, world.ramps, tuple(floors.ravel().tolist()), world.objects,
                 world.players)


def probe_tasks(
    coplayer: int = SEEKER, seed: int = 0, size: int = 9, names: Sequence[str] | None = None
) -> FixedXLandTasks:
    """The probe games (:data:`~.game.PROBE_GAMES`) as fixed tasks: each on a generated world conditioned
    on it (for the hill games, the white floor is the highest plateau), the learner in slot 0 and
    ``coplayer`` in every other slot. Task ``i`` is the ``i``-th name (default: all, in dict order).

    >>> probe_tasks(names=["hide_and_seek"]).tasks[0].coplayers
    (-1, -4)
    """
    names = list(PROBE_GAMES) if names is None else list(names)
    unknown = [n for n in names if n not in PROBE_GAMES]
    if unknown:
        raise KeyError(f"unknown probe games {unknown}; known: {sorted(PROBE_GAMES)}")
    _check_coplayers([coplayer])
    rng = np.random.default_rng(seed)
    tasks = []
    for name in names:
        game = PROBE_GAMES[name]
        world = condition_world(generate_world(rng, size, n_players=game.n_players), game, rng)
        if name in _HILL_GAMES:
            world = _white_hilltop(world)
        tasks.append(XLandTask(world, game, (LEARNER,) + (int(coplayer),) * (game.n_players - 1)))
    return FixedXLandTasks(tasks)


def task_features(task: XLandTask, player: int = 0) -> dict[str, float]:
    """Descriptors of a task from the paper's analysis of its training distribution (Fig. 16): the game's
    measures and number of options, the world's shortest-path entropy, and the *initial atom changes* -
    the fewest literals of one of ``player``'s options that are false in the initial state."""
    if not 0 <= player < task.game.n_players:
        raise ValueError(f"player must be in [0, {task.game.n_players - 1}], got {player!r}")
    m = game_measures(task.game)
    env = XLandEnv(XLandTask(task.world, task.game, (LEARNER,) * task.game.n_players))
    env.reset(seed=0)
    changes = min(len(v) - sum(v) for v in env.literal_values(player))
    return {
        "n_players": float(task.game.n_players),
        "n_options": float(len(task.game.goals[player].options)),
        "exploration_difficulty": m.exploration_difficulty,
        "competitiveness": m.competitiveness,
        "balance": m.balance,
        "path_entropy": path_entropy(task.world),
        "initial_atom_changes": float(changes),
    }
