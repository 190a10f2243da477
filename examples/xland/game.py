"""XLand-style games: relations, atomic predicates, goals in disjunctive normal form, and the game toolkit.

This module implements the game side of *Open-Ended Learning Leads to Generally Capable Agents*
(Open-Ended Learning Team et al., 2021; "XLand"), Sections 2.2 and 3.2 and Appendix A.2:

* **Relations** ``near``, ``on``, ``hold``, ``see`` (A.2.1) over 9 objects (3 colours x {cube, sphere,
  pyramid}), 2 player references (``me``, ``opponent``) and 6 floor colours. Every instantiation, after
  the logical symmetries ``near(a, b) = near(b, a)`` and ``see(a, b) = see(b, a)`` for two objects, is an
  **atom** with a fixed id in :data:`ATOMS` (213 atoms; the paper's Table 2 lists 212 because it leaves
  out ``near(me, opponent)``, which its hand-authored "following" task uses).
* A **literal** is an atom or its negation, written as a signed int ``+(id + 1)`` / ``-(id + 1)``.
  A **goal** is a disjunction of options, each a conjunction of literals (the DNF of Section 2.2), and its
  reward is ``r_g(s) = max_i min_j phi_ij(s)``. A **game** is one goal per player. ``opponent`` is
  existential over the co-players: ``hold(opponent, x)`` holds when *some* co-player holds ``x`` (so
  ``not(hold(opponent, x))`` means *no* co-player does).
* **Game measures** (Section 3.2, Definitions 3.4-3.7), computed by enumerating the *feasible* predicate
  states over the game's ground atoms (``me``/``opponent`` resolved to players):

  - exploration difficulty ``kappa(G) = #{phi(s): all r_k(s) = 0} / N_phi``,
  - cooperativeness ``coop(G) = #{phi(s): all r_k(s) = 1} / (N_phi - kappa_hat(G))``,
  - competitiveness ``comp(G) = #{phi(s): max_k r_k(s) != min_k r_k(s)} / (N_phi - kappa_hat(G))``,
  - balance ``bal(G) = max_{xi in Xi} coop(xi(G))``.

  Feasibility constraints: a player holds at most one object; an entity is on at most one floor colour;
  a held object is near its holder and touches no floor. Two players may hold the same object (as in the
  paper, A.2.1). With these, the paper's example values are reproduced: simple navigation
  ``kappa = 1/4, comp = 2/3``; simple cooperation ``kappa = 1/2, comp = 0, bal = 1``; hide and seek
  ``kappa = 0, comp = 1, bal = 1/3``; XRPS ``kappa = 1/4, comp = 1, bal = 1`` (16 feasible states).
  Two printed values are not: the navigation game's balance is 1/3 here (the paper prints 7/15; two
  single-atom goals over independent atoms can only give 0, 1/3 or 1), and capture the cube's exploration
  difficulty is 1/3 (the paper prints 1/4; with the cube on at most one floor there are 3 states, of which
  only "on neither floor" rewards nobody, and without that constraint 2 of 4 states reward nobody).

  The transformations ``Xi`` of the balance are, per goal, bijective recolourings: of objects (the
  paper's "consistent across the entire goal"), of floors, and of the two player colours (``me`` <->
  ``opponent``). Recolouring players and floors as well as objects is this module's reading; it is what
  makes hide and seek 1/3 and XRPS and capture the cube 1, as printed. Pass ``transforms=`` to narrow it.
* **Generation** (A.2.3): a random game from 3 atoms plus a recolouring of them and a random
  ``{-1, 0, 1}`` option matrix, and a greedy local search toward a target balance ``b*`` and
  competitiveness ``c*`` with the paper's moves and improvement ``imp``; 3-player games by mixing options
  (A.2.5); recolouring equivalence (A.2.4) and a recolouring-invariant canonical hash for held-out sets.
  ``random_game(..., player_centric=True)`` restricts the naive sampler to goals whose every option needs
  an atom about the player itself to hold (:func:`is_player_centric`, :data:`ME_ATOMS`): our CPU-scale
  choice, not the paper's (its atoms are drawn uniformly); see :mod:`magister.examples.xland_ppo`.
* **Probe games**: the paper's examples and a selection of its hand-authored games (Tables 7-8) in
  :data:`PROBE_GAMES`.

>>> g = Game.parse(["hold(me, yellow sphere)", "near(me, yellow pyramid)"])
>>> m = game_measures(g)
>>> m.exploration_difficulty, m.competitiveness
(0.25, 0.6666666666666666)
>>> str(PROBE_GAMES["hide_and_seek"])
'see(me, opponent) || not(see(opponent, me))'
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ...task_spaces.base import stable_hash

logger = logging.getLogger(__name__)

__all__ = [
    "ATOMS",
    "ME_ATOMS",
    "alike_game",
    "COLOURS",
    "FLOOR_COLOURS",
    "GameMeasures",
    "Game",
    "Goal",
    "MAX_GOAL_ATOMS",
    "MAX_OPTIONS",
    "ME",
    "NUM_ATOMS",
    "OPPONENT",
    "PROBE_GAMES",
    "RELATIONS",
    "SHAPES",
    "Transforms",
    "atom_id",
    "atom_name",
    "balance",
    "canonical_game",
    "game_distance",
    "game_hash",
    "game_measures",
    "generate_game",
    "is_player_centric",
    "goal_observation",
    "parse_atom",
    "random_game",
    "recolour_game",
    "three_player_game",
]

# -- vocabulary ---------------------------------------------------------------------------------------
COLOURS: tuple[str, ...] = ("black", "purple", "yellow")
SHAPES: tuple[str, ...] = ("cube", "sphere", "pyramid")
FLOOR_COLOURS: tuple[str, ...] = ("brown", "olive", "orange", "blue", "grey", "white")
RELATIONS: tuple[str, ...] = ("near", "on", "hold", "see")
NEAR, ON, HOLD, SEE = range(4)

NUM_OBJECTS = len(COLOURS) * len(SHAPES)  # 9 predicate objects; object code = colour * 3 + shape
ME = NUM_OBJECTS  # 9
OPPONENT = NUM_OBJECTS + 1  # 10
FLOOR0 = NUM_OBJECTS + 2  # floors are codes 11 .. 16
NUM_FLOORS = len(FLOOR_COLOURS)
PLAYER0 = 20  # ground (absolute) player codes: 20 + player index

MAX_OPTIONS = 3  # observation encoding: at most 3 options ...
MAX_GOAL_ATOMS = 6  # ... over at most 6 distinct atoms per goal (the paper's evaluation-game limits)
MAX_STATES = 1 << 20  # largest predicate-state enumeration game_measures accepts

Atom = tuple[int, int, int]  # (relation, a, b) in entity codes


def _is_object(x: int) -> bool:
    return 0 <= x < NUM_OBJECTS


def _is_player(x: int) -> bool:
    return x in (ME, OPPONENT) or x >= PLAYER0


def _is_floor(x: int) -> bool:
    return FLOOR0 <= x < FLOOR0 + NUM_FLOORS


def _entity_name(x: int) -> str:
    if _is_object(x):
        return f"{COLOURS[x // 3]} {SHAPES[x % 3]}"
    if x == ME:
        return "me"
    if x == OPPONENT:
        return "opponent"
    if _is_floor(x):
        return f"{FLOOR_COLOURS[x - FLOOR0]} floor"
    if x >= PLAYER0:
        return f"player_{x - PLAYER0}"
    raise ValueError(f"unknown entity code {x!r}")


def make_atom(rel: int, a: int, b: int) -> Atom:
    """Validate ``rel(a, b)`` (entity codes) and return it in canonical argument order.

    Raises ``ValueError`` for a relation applied to the wrong kinds of entities.
    """
    if rel == NEAR:
        ok = (_is_object(a) or _is_player(a)) and (_is_object(b) or _is_player(b)) and a != b
        if ok and _sym_key(a) > _sym_key(b):
            a, b = b, a
    elif rel == ON:
        ok = (_is_object(a) or _is_player(a)) and _is_floor(b)
    elif rel == HOLD:
        ok = _is_player(a) and _is_object(b)
    elif rel == SEE:
        ok = (_is_object(a) or _is_player(a)) and (_is_object(b) or _is_player(b)) and a != b
        if ok and _is_object(a) and _is_object(b) and a > b:
            a, b = b, a  # see is symmetric between two objects (they have no orientation)
    else:
        raise ValueError(f"unknown relation {rel!r}; expected one of {list(range(len(RELATIONS)))}")
    if not ok:
        raise ValueError(
            f"invalid atom {RELATIONS[rel]}({a}, {b}): near/see take two distinct objects or players, "
            "on takes an object or player and a floor, hold takes a player and an object"
        )
    return (rel, a, b)


def _sym_key(x: int) -> tuple[int, int]:
    # order for symmetric near(): objects first, then me, opponent, then ground players
    return (0 if _is_object(x) else 1, x)


def _all_atoms() -> list[Atom]:
    ents = list(range(NUM_OBJECTS)) + [ME, OPPONENT]
    out: set[Atom] = set()
    for a in ents:
        for b in ents:
            if a != b:
                out.add(make_atom(NEAR, a, b))
                out.add(make_atom(SEE, a, b))
        for f in range(NUM_FLOORS):
            out.add(make_atom(ON, a, FLOOR0 + f))
    for p in (ME, OPPONENT):
        for o in range(NUM_OBJECTS):
            out.add(make_atom(HOLD, p, o))
    return sorted(out)


#: Every atom of the relative vocabulary (``me``/``opponent``), sorted; an atom's id is its index here.
ATOMS: tuple[Atom, ...] = tuple(_all_atoms())
NUM_ATOMS = len(ATOMS)
_ATOM_INDEX = {a: i for i, a in enumerate(ATOMS)}
#: Ids of the 45 atoms about the player itself (``me`` is an argument): the atoms a goal of
#: :func:`random_game` with ``player_centric=True`` requires in every option.
ME_ATOMS: tuple[int, ...] = tuple(i for i, (_, a, b) in enumerate(ATOMS) if ME in (a, b))
_ME_ATOM_SET = frozenset(ME_ATOMS)


def atom_id(rel: int, a: int, b: int) -> int:
    """Id of the atom ``rel(a, b)`` (any argument order of a symmetric relation).

    >>> atom_id(NEAR, ME, 0) == atom_id(NEAR, 0, ME)
    True
    """
    return _ATOM_INDEX[make_atom(rel, a, b)]


def atom_name(atom: int | Atom) -> str:
    """Readable form of an atom id or an ``(relation, a, b)`` triple.

    >>> atom_name(parse_atom("near(yellow sphere, me)"))
    'near(yellow sphere, me)'
    """
    rel, a, b = ATOMS[atom] if isinstance(atom, (int, np.integer)) else atom
    return f"{RELATIONS[rel]}({_entity_name(a)}, {_entity_name(b)})"


_ENTITY_BY_NAME = {_entity_name(x): x for x in [*range(NUM_OBJECTS), ME, OPPONENT]}
_ENTITY_BY_NAME.update({_entity_name(FLOOR0 + f): FLOOR0 + f for f in range(NUM_FLOORS)})
_ATOM_RE = re.compile(r"^\s*(near|on|hold|see)\s*\(\s*([a-z ]+?)\s*,\s*([a-z ]+?)\s*\)\s*$")


def parse_atom(text: str) -> int:
    """Atom id of a string such as ``"hold(me, yellow sphere)"`` or ``"on(me, blue floor)"``.

    >>> atom_name(parse_atom("on(opponent, white floor)"))
    'on(opponent, white floor)'
    """
    m = _ATOM_RE.match(text)
    if m is None:
        raise ValueError(f"cannot parse atom {text!r}; expected e.g. 'near(me, yellow sphere)'")
    rel, a, b = m.groups()
    try:
        ea, eb = _ENTITY_BY_NAME[" ".join(a.split())], _ENTITY_BY_NAME[" ".join(b.split())]
    except KeyError as exc:
        raise ValueError(
            f"unknown entity {exc.args[0]!r} in atom {text!r}; entities are {sorted(_ENTITY_BY_NAME)}"
        ) from None
    return atom_id(RELATIONS.index(rel), ea, eb)


def _literal_name(lit: int) -> str:
    name = atom_name(abs(lit) - 1)
    return name if lit > 0 else f"not({name})"


def _parse_literal(text: str) -> int:
    t = text.strip()
    m = re.match(r"^not\s*\((.*)\)$", t)
    if m:
        return -(parse_atom(m.group(1)) + 1)
    return parse_atom(t) + 1


def _check_literal(lit: Any) -> int:
    if isinstance(lit, (bool, np.bool_)) or not isinstance(lit, (int, np.integer)) or not (
        1 <= abs(int(lit)) <= NUM_ATOMS
    ):
        raise ValueError(f"literal {lit!r} must be a nonzero int +-(atom id + 1) with |lit| <= {NUM_ATOMS}")
    return int(lit)


# -- goals and games ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Goal:
    """A goal in disjunctive normal form: ``options[i]`` is a conjunction of literals.

    Literals are signed ints ``+(atom id + 1)`` (the atom holds) or ``-(atom id + 1)`` (it does not).
    Options and their literals are stored sorted and without duplicates, so equal goals compare equal.

    >>> g = Goal.parse("hold(me, yellow sphere) & not(hold(opponent, yellow sphere)) | near(me, black cube)")
    >>> len(g.options), str(g)
    (2, 'near(black cube, me) | hold(me, yellow sphere) & not(hold(opponent, yellow sphere))')
    """

    options: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if isinstance(self.options, (str, bytes)) or not isinstance(self.options, Iterable):
            raise TypeError(f"Goal options must be a sequence of literal sequences, got {self.options!r}")
        opts = []
        for opt in self.options:
            if isinstance(opt, (str, bytes)) or not isinstance(opt, Iterable):
                raise TypeError(f"a goal option must be a sequence of literals, got {opt!r}")
            lits = tuple(sorted({_check_literal(x) for x in opt}, key=lambda x: (abs(x), x)))
            if not lits:
                raise ValueError(f"goal {self.options!r} has an empty option")
            opts.append(lits)
        if not opts:
            raise ValueError("a goal needs at least one option")
        object.__setattr__(self, "options", tuple(sorted(set(opts))))

    @classmethod
    def _trusted(cls, options: Iterable[Iterable[int]]) -> Goal:
        """Build from valid literals without re-checking them (canonical order still applied)."""
        goal = object.__new__(cls)
        opts = {tuple(sorted(set(o), key=lambda x: (abs(x), x))) for o in options}
        object.__setattr__(goal, "options", tuple(sorted(opts)))
        return goal

    @classmethod
    def parse(cls, text: str) -> Goal:
        """Parse ``"a & not(b) | c"`` (``|`` between options, ``&`` between literals)."""
        return cls(tuple(tuple(_parse_literal(x) for x in opt.split("&")) for opt in text.split("|")))

    @property
    def atoms(self) -> tuple[int, ...]:
        """Distinct atom ids the goal mentions, sorted."""
        return tuple(sorted({abs(x) - 1 for opt in self.options for x in opt}))

    def encode(self) -> tuple[tuple[int, ...], ...]:
        """Wire form: a tuple of options, each a tuple of signed literal ints."""
        return self.options

    def __str__(self) -> str:
        return " | ".join(" & ".join(_literal_name(x) for x in opt) for opt in self.options)


@dataclass(frozen=True)
class Game:
    """One goal per player (player ``i`` reads ``me`` as itself and ``opponent`` as any co-player).

    >>> Game.parse(["see(me, opponent)", "not(see(opponent, me))"]).n_players
    2
    """

    goals: tuple[Goal, ...]

    def __post_init__(self) -> None:
        goals = tuple(self.goals)
        if not 1 <= len(goals) <= 3:
            raise ValueError(f"a game has 1 to 3 goals (one per player), got {len(goals)}")
        for g in goals:
            if not isinstance(g, Goal):
                raise TypeError(f"game goals must be Goal instances, got {type(g).__name__}")
        object.__setattr__(self, "goals", goals)

    @classmethod
    def parse(cls, goals: Sequence[str]) -> Game:
        """A game from one goal string per player (see :meth:`Goal.parse`)."""
        return cls(tuple(Goal.parse(g) for g in goals))

    @property
    def n_players(self) -> int:
        return len(self.goals)

    def encode(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Wire form: a tuple of goal encodings (msgpack-safe nested tuples of ints)."""
        return tuple(g.encode() for g in self.goals)

    @classmethod
    def decode(cls, encoded: Any) -> Game:
        """Inverse of :meth:`encode` (lists accepted, as after a msgpack round trip)."""
        if isinstance(encoded, (str, bytes)) or not isinstance(encoded, Sequence):
            raise ValueError(f"an encoded game is a sequence of goals, got {encoded!r}")
        try:
            return cls(tuple(Goal(tuple(tuple(o) for o in g)) for g in encoded))
        except TypeError as exc:
            raise ValueError(f"malformed encoded game {encoded!r}: {exc}") from None

    @property
    def objects(self) -> tuple[int, ...]:
        """Object codes (0..8) the game mentions."""
        return tuple(sorted(
            {x for gl in self.goals for a in gl.atoms for x in ATOMS[a][1:] if _is_object(x)}
        ))

    @property
    def floors(self) -> tuple[int, ...]:
        """Floor colour indices (0..5) the game mentions."""
        return tuple(sorted(
            {x - FLOOR0 for gl in self.goals for a in gl.atoms for x in ATOMS[a][1:] if _is_floor(x)}
        ))

    def __str__(self) -> str:
        return " || ".join(str(g) for g in self.goals)


def goal_observation(goal: Goal) -> tuple[np.ndarray, np.ndarray]:
    """The policy's view of a goal: ``(atom_ids, matrix)``.

    ``atom_ids`` has :data:`MAX_GOAL_ATOMS` entries (the goal's atom ids, then ``-1`` padding) and
    ``matrix[i, j]`` is ``+1``/``-1`` when option ``i`` requires atom ``j`` true/false, else ``0``
    (shape ``(MAX_OPTIONS, MAX_GOAL_ATOMS)``). Raises ``ValueError`` for a larger goal.

    >>> ids, mat = goal_observation(Goal.parse("hold(me, black cube) & not(near(me, black cube))"))
    >>> mat[0].tolist()[:2], int((ids >= 0).sum())
    ([-1.0, 1.0], 2)
    """
    atoms = goal.atoms
    if len(atoms) > MAX_GOAL_ATOMS or len(goal.options) > MAX_OPTIONS:
        raise ValueError(
            f"goal {goal} has {len(goal.options)} options over {len(atoms)} atoms; the observation "
            f"encodes at most {MAX_OPTIONS} options over {MAX_GOAL_ATOMS} atoms"
        )
    ids = np.full(MAX_GOAL_ATOMS, -1, dtype=np.int64)
    ids[: len(atoms)] = atoms
    col = {a: j for j, a in enumerate(atoms)}
    mat = np.zeros((MAX_OPTIONS, MAX_GOAL_ATOMS), dtype=np.float32)
    for i, opt in enumerate(goal.options):
        for lit in opt:
            mat[i, col[abs(lit) - 1]] = 1.0 if lit > 0 else -1.0
    return ids, mat


# -- grounding: me/opponent -> players ----------------------------------------------------------------
@lru_cache(maxsize=1 << 16)
def ground_literal(lit: int, player: int, n_players: int) -> tuple[tuple[Atom, ...], bool]:
    """The ground atoms whose disjunction is the literal's atom for ``player``, and the literal's sign.

    ``me`` becomes the player, ``opponent`` each co-player in turn (existential). With no co-player the
    tuple is empty (the atom is false).

    >>> ground_literal(parse_atom("hold(opponent, black cube)") + 1, 0, 3)
    (((2, 21, 0), (2, 22, 0)), True)
    """
    rel, a, b = ATOMS[abs(lit) - 1]
    others = [PLAYER0 + j for j in range(n_players) if j != player]

    def resolve(x: int) -> list[int]:
        if x == ME:
            return [PLAYER0 + player]
        if x == OPPONENT:
            return others
        return [x]

    grounds = sorted({make_atom(rel, x, y) for x in resolve(a) for y in resolve(b) if x != y})
    return tuple(grounds), lit > 0


def ground_game(
    goals: Sequence[Goal], index: dict[Atom, int] | None = None
) -> tuple[list[Atom], list[list[list[tuple[np.ndarray, bool]]]]]:
    n = len(goals)
    index = {} if index is None else index
    compiled = []
    for p, goal in enumerate(goals):
        options = []
        for opt in goal.options:
            lits = []
            for lit in opt:
                grounds, positive = ground_literal(lit, p, n)
                idx = np.array([index.setdefault(g, len(index)) for g in grounds], dtype=np.int64)
                lits.append((idx, positive))
            options.append(lits)
        compiled.append(options)
    return list(index), compiled


def feasible_states(atoms: Sequence[Atom]) -> np.ndarray:
    """All feasible truth assignments of ground ``atoms``, as a ``(n_states, len(atoms))`` bool array.

    Constraints: a player holds at most one object; an entity is on at most one floor; a held object is
    near its holder (when that atom is listed) and on no floor. Raises ``ValueError`` when there would be
    more than :data:`MAX_STATES` candidate states. Cached; the returned array is read-only.

    >>> feasible_states([(HOLD, 20, 0), (HOLD, 20, 1)]).astype(int).tolist()
    [[0, 0], [1, 0], [0, 1]]
    """
    return _feasible_cached(tuple(tuple(int(x) for x in a) for a in atoms))


@lru_cache(maxsize=4096)
def _feasible_cached(atoms: tuple[Atom, ...]) -> np.ndarray:
    out = _feasible_states(atoms)
    out.setflags(write=False)
    return out


def _feasible_states(atoms: Sequence[Atom]) -> np.ndarray:
    n = len(atoms)
    groups: dict[tuple[int, int], list[int]] = {}
    free: list[int] = []
    for i, (rel, a, _b) in enumerate(atoms):
        if rel == HOLD:
            groups.setdefault((HOLD, a), []).append(i)
        elif rel == ON:
            groups.setdefault((ON, a), []).append(i)
        else:
            free.append(i)
    radices = [len(g) + 1 for g in groups.values()] + [2] * len(free)
    total = int(np.prod(radices, dtype=np.int64)) if radices else 1
    if total > MAX_STATES:
        raise ValueError(
            f"{n} ground atoms give {total} predicate states, more than MAX_STATES={MAX_STATES}; "
            "use a smaller game"
        )
    code = np.arange(total, dtype=np.int64)
    states = np.zeros((total, n), dtype=bool)
    for g in groups.values():
        choice, code = code % (len(g) + 1), code // (len(g) + 1)
        for k, i in enumerate(g):
            states[:, i] = choice == k + 1
    for i in free:
        states[:, i], code = (code % 2).astype(bool), code // 2
    pos = {a: i for i, a in enumerate(atoms)}
    keep = np.ones(total, dtype=bool)
    for i, (rel, a, b) in enumerate(atoms):
        if rel != HOLD:
            continue
        j = pos.get(make_atom(NEAR, a, b))
        if j is not None:
            keep &= ~states[:, i] | states[:, j]
        for f in range(NUM_FLOORS):
            j = pos.get((ON, b, FLOOR0 + f))
            if j is not None:
                keep &= ~(states[:, i] & states[:, j])
    return states[keep]


def _rewards(compiled: list, states: np.ndarray) -> np.ndarray:
    """``rewards[k, s]``: max over player ``k``'s options of min over their literals, on every state."""
    n = len(states)
    out = np.zeros((len(compiled), n), dtype=bool)
    cols = states.T
    memo: dict[tuple[tuple[int, ...], bool], np.ndarray] = {}
    for p, options in enumerate(compiled):
        r = out[p]
        for lits in options:
            v = None
            for idx, positive in lits:
                key = (tuple(idx.tolist()), positive)
                t = memo.get(key)
                if t is None:
                    if len(idx) == 1:
                        t = cols[idx[0]]
                    elif len(idx):
                        t = cols[idx].any(axis=0)
                    else:
                        t = np.zeros(n, dtype=bool)
                    t = t if positive else ~t
                    memo[key] = t
                v = t.copy() if v is None else v & t
            r |= v
    return out


def reward_table(game: Game | Sequence[Goal]) -> tuple[list[Atom], np.ndarray, np.ndarray]:
    """``(ground atoms, feasible states, rewards)`` with ``rewards[k, s]`` player ``k``'s reward."""
    goals = game.goals if isinstance(game, Game) else tuple(game)
    atoms, compiled = ground_game(goals)
    states = feasible_states(atoms)
    return atoms, states, _rewards(compiled, states)


def game_distance(a: Game, b: Game) -> float:
    """``||G_a - G_b|| = (1/n) sum_k #{phi(s): r_{a,k}(s) != r_{b,k}(s)} / N_phi`` (Section 3.2), over the
    feasible states of the union of both games' ground atoms.

    >>> g = PROBE_GAMES["simple_navigation"]
    >>> game_distance(g, g), game_distance(g, Game((g.goals[0], Goal.parse("not(near(me, yellow pyramid))"))))
    (0.0, 0.5)
    """
    if a.n_players != b.n_players:
        raise ValueError(f"games have {a.n_players} and {b.n_players} players; the distance needs the same")
    index: dict[Atom, int] = {}
    _, ca = ground_game(a.goals, index)
    atoms, cb = ground_game(b.goals, index)
    states = feasible_states(atoms)
    return float((_rewards(ca, states) != _rewards(cb, states)).mean())


def _coop_counts(goals: Sequence[Goal]) -> tuple[int, int, int]:
    _, _, r = reward_table(goals)
    return len(r[0]), int(r.any(axis=0).sum()), int(r.all(axis=0).sum())


@lru_cache(maxsize=65536)
def _coop(goals: tuple[Goal, ...]) -> float:
    _, anyr, allr = _coop_counts(goals)
    return allr / anyr if anyr else float("nan")


# -- recolouring --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transforms:
    """Which recolourings make up the balance's transformation set ``Xi`` (applied per goal)."""

    objects: bool = True
    floors: bool = True
    players: bool = True


def _map_entity(x: int, colour_perm: Sequence[int], floor_map: dict[int, int], swap: bool) -> int:
    if _is_object(x):
        return colour_perm[x // 3] * 3 + x % 3
    if _is_floor(x):
        return FLOOR0 + floor_map.get(x - FLOOR0, x - FLOOR0)
    if swap and x in (ME, OPPONENT):
        return OPPONENT if x == ME else ME
    return x


def recolour_goal(
    goal: Goal, colour_perm: Sequence[int] = (0, 1, 2), floor_map: dict[int, int] | None = None,
    swap_players: bool = False,
) -> Goal:
    """Apply a recolouring: object colour ``c`` -> ``colour_perm[c]``, floor ``f`` -> ``floor_map[f]``
    (unlisted floors unchanged) and, with ``swap_players``, ``me`` <-> ``opponent``."""
    key = (tuple(colour_perm), tuple(sorted((floor_map or {}).items())), bool(swap_players))
    return Goal._trusted([_recolour_literal(lit, *key) for lit in opt] for opt in goal.options)


@lru_cache(maxsize=1 << 16)
def _recolour_literal(lit: int, colour_perm: tuple[int, ...], floor_items: tuple, swap: bool) -> int:
    rel, a, b = ATOMS[abs(lit) - 1]
    fm = dict(floor_items)
    aid = atom_id(rel, _map_entity(a, colour_perm, fm, swap), _map_entity(b, colour_perm, fm, swap)) + 1
    return aid if lit > 0 else -aid


def recolour_game(
    game: Game, colour_perm: Sequence[int] = (0, 1, 2), floor_map: dict[int, int] | None = None
) -> Game:
    """The same recolouring applied consistently to every goal (an *alike* game, A.2.4).

    >>> g = PROBE_GAMES["simple_navigation"]
    >>> str(recolour_game(g, (0, 2, 1)).goals[0])
    'hold(me, purple sphere)'
    """
    _check_perm(colour_perm, 3, "colour_perm")
    if floor_map is not None:
        _check_floor_map(floor_map)
    return Game(tuple(recolour_goal(g, colour_perm, floor_map) for g in game.goals))


def _check_perm(p: Sequence[int], n: int, what: str) -> None:
    if sorted(int(x) for x in p) != list(range(n)):
        raise ValueError(f"{what} must be a permutation of range({n}), got {tuple(p)!r}")


def _check_floor_map(m: dict[int, int]) -> None:
    vals = list(m.values())
    if any(not 0 <= int(k) < NUM_FLOORS for k in m) or any(not 0 <= int(v) < NUM_FLOORS for v in vals) or (
        len(set(vals)) != len(vals)
    ):
        raise ValueError(
            f"floor_map must be an injective map of floor indices 0..{NUM_FLOORS - 1}, got {m!r}"
        )


@lru_cache(maxsize=8192)
def _goal_variants(goal: Goal, game_floors: tuple[int, ...], transforms: Transforms) -> list[Goal]:
    """Distinct images of ``goal`` under the per-goal transformations (cached: do not modify)."""
    colour_perms = list(itertools.permutations(range(3))) if transforms.objects else [(0, 1, 2)]
    own = sorted({x - FLOOR0 for a in goal.atoms for x in ATOMS[a][1:] if _is_floor(x)})
    if transforms.floors and own:
        fresh = [f for f in range(NUM_FLOORS) if f not in game_floors][: len(own)]
        targets = sorted(set(game_floors) | set(fresh))
        floor_maps = [dict(zip(own, t)) for t in itertools.permutations(targets, len(own))]
    else:
        floor_maps = [{}]
    swaps = (False, True) if transforms.players else (False,)
    out = {}
    for cp in colour_perms:
        for fm in floor_maps:
            for sw in swaps:
                g = recolour_goal(goal, cp, fm, sw)
                out.setdefault(g.options, g)
    return list(out.values())


def balance(game: Game, transforms: Transforms = Transforms()) -> float:  # noqa: B008
    """``bal(G) = max_xi coop(xi(G))`` over per-goal recolourings (exact for 2 players; for 3, two sweeps
    of coordinate ascent over goals 2 and 3). ``nan`` for a game in which no state rewards anyone.

    >>> balance(PROBE_GAMES["hide_and_seek"])
    0.3333333333333333
    """
    goals = list(game.goals)
    floors = game.floors
    best = _coop(tuple(goals))
    if np.isnan(best):
        return best
    variants = [[]] + [_goal_variants(g, floors, transforms) for g in goals[1:]]  # goal 1 stays fixed
    for _sweep in range(1 if len(goals) <= 2 else 2):
        for k in range(1, len(goals)):
            for v in variants[k]:
                trial = goals[:k] + [v] + goals[k + 1:]
                c = _coop(tuple(trial))
                if c > best:
                    best, goals = c, trial
            if best >= 1.0:
                return 1.0
    return best


@dataclass(frozen=True)
class GameMeasures:
    """Exploration difficulty, cooperativeness, competitiveness, balance, and ``N_phi``."""

    exploration_difficulty: float
    cooperativeness: float
    competitiveness: float
    balance: float
    n_states: int


def game_measures(game: Game, transforms: Transforms = Transforms()) -> GameMeasures:  # noqa: B008
    """The paper's game measures over feasible predicate states (Definitions 3.4-3.7).

    Cooperativeness, competitiveness and balance are ``nan`` when no state rewards any player.

    >>> m = game_measures(PROBE_GAMES["xrps"])
    >>> m.exploration_difficulty, m.competitiveness, m.balance, m.n_states
    (0.25, 1.0, 1.0, 16)
    """
    if not isinstance(game, Game):
        raise TypeError(f"game must be a Game, got {type(game).__name__}")
    n, anyr, allr = _coop_counts(game.goals)
    kappa = (n - anyr) / n
    coop = allr / anyr if anyr else float("nan")
    comp = (anyr - allr) / anyr if anyr else float("nan")
    return GameMeasures(kappa, coop, comp, balance(game, transforms), n)


def goal_difficulty(goal: Goal) -> float:
    """``kappa(g)`` of a single goal (one player): the fraction of its feasible states it does not reward."""
    return game_measures(Game((goal,)), Transforms(False, False, False)).exploration_difficulty


# -- canonical form and hashing -----------------------------------------------------------------------
@lru_cache(maxsize=4096)
def canonical_game(game: Game) -> Game:
    """The representative of ``game``'s recolouring class: the smallest encoding over every bijective
    recolouring of object colours and of floor colours applied to the whole game (player order kept).

    >>> a = Game.parse(["hold(me, yellow sphere)", "near(me, black cube)"])
    >>> b = recolour_game(a, (1, 2, 0), {})
    >>> canonical_game(a) == canonical_game(b)
    True
    """
    floors = game.floors
    best: Game | None = None
    best_key: Any = None
    for cp in itertools.permutations(range(3)):
        for order in itertools.permutations(range(len(floors))):
            fm = {f: order[i] for i, f in enumerate(floors)}
            g = Game(tuple(recolour_goal(x, cp, fm) for x in game.goals))
            key = g.encode()
            if best_key is None or key < best_key:
                best, best_key = g, key
    assert best is not None
    return best


def alike_game(game: Game, rng: np.random.Generator, max_tries: int = 100) -> Game | None:
    """A different game with the same measures: a random recolouring of objects and floors applied to the
    whole game (A.2.4), redrawn until it changes the game; ``None`` after ``max_tries`` (e.g. hide and
    seek mentions no colours).

    >>> alike_game(PROBE_GAMES["hide_and_seek"], np.random.default_rng(0)) is None
    True
    """
    for _ in range(max_tries):
        cp, fm = _random_recolouring(rng)
        new = recolour_game(game, cp, fm)
        if new != game:
            return new
    return None


def game_hash(game: Game) -> str:
    """A recolouring-invariant, process-stable hash of a game (for held-out sets)."""
    return stable_hash(canonical_game(game).encode())


# -- generation ---------------------------------------------------------------------------------------
def _random_recolouring(rng: np.random.Generator) -> tuple[tuple[int, ...], dict[int, int]]:
    cp = tuple(int(x) for x in rng.permutation(3))
    fp = rng.permutation(NUM_FLOORS)
    return cp, {f: int(fp[f]) for f in range(NUM_FLOORS)}


def _recolour_atom(aid: int, cp: Sequence[int], fm: dict[int, int]) -> int:
    return abs(recolour_goal(Goal(((aid + 1,),)), cp, fm).options[0][0]) - 1


def _sample_atoms(rng: np.random.Generator, me_first: bool = False) -> list[int]:
    """Six atoms: three distinct ones and a recolouring of them that gives three new ones (A.2.3).

    ``me_first``: the first of the three is drawn from :data:`ME_ATOMS` (so is its recolouring, the
    fourth: recolourings change colours, never ``me``)."""
    for _ in range(1000):
        base = [int(x) for x in rng.choice(NUM_ATOMS, size=3, replace=False)]
        if me_first:
            first = int(ME_ATOMS[int(rng.integers(len(ME_ATOMS)))])
            others = [a for a in base if a != first][:2]
            base = [first, *others]
        for _ in range(100):
            cp, fm = _random_recolouring(rng)
            new = [_recolour_atom(a, cp, fm) for a in base]
            if len(set(base + new)) == 6:
                return base + new
    raise RuntimeError("could not sample six distinct atoms")  # pragma: no cover


def _matrix_goal(atoms: Sequence[int], mat: np.ndarray) -> Goal:
    return Goal(tuple(
        tuple((atoms[j] + 1) * int(mat[i, j]) for j in np.flatnonzero(mat[i]))
        for i in range(mat.shape[0])
    ))


def _random_matrix(rng: np.random.Generator, n_options: int, n_conj: int, n_atoms: int,
                   me_cols: Sequence[int] = ()) -> np.ndarray:
    """A random option matrix; with ``me_cols``, every row has ``+1`` in one of them (drawn uniformly)
    and its other ``n_conj - 1`` non-zeros anywhere else."""
    mat = np.zeros((n_options, n_atoms), dtype=np.int64)
    for i in range(n_options):
        if me_cols:
            first = int(me_cols[int(rng.integers(len(me_cols)))])
            rest = rng.choice([j for j in range(n_atoms) if j != first], size=n_conj - 1, replace=False)
            mat[i, first] = 1
            mat[i, rest] = rng.choice([-1, 1], size=n_conj - 1)
            continue
        cols = rng.choice(n_atoms, size=n_conj, replace=False)
        mat[i, cols] = rng.choice([-1, 1], size=n_conj)
    return mat


def _check_sizes(n_options: int, n_conjunctions: int) -> None:
    if not 1 <= n_options <= MAX_OPTIONS:
        raise ValueError(f"n_options must be in [1, {MAX_OPTIONS}], got {n_options!r}")
    if not 1 <= n_conjunctions <= 3:
        raise ValueError(f"n_conjunctions must be in [1, 3], got {n_conjunctions!r}")


def random_game(
    rng: np.random.Generator, n_options: int = 1, n_conjunctions: int = 1, n_players: int = 2,
    *, player_centric: bool = False,
) -> Game:
    """The paper's naive sampler (A.2.3): six atoms (three, plus a recolouring of them) and a random
    ``{-1, 0, 1}`` matrix per goal with ``n_options`` rows of ``n_conjunctions`` non-zeros.

    Goals that are trivial for their player (``kappa(g)`` in ``{0, 1}``) are redrawn.

    ``player_centric=True`` (our CPU-scale restriction, not the paper's: its atoms are drawn uniformly)
    returns games whose every goal is :func:`is_player_centric` - each option has a positive literal about
    the player itself. The first of the three base atoms is drawn from :data:`ME_ATOMS` and every option
    row gets ``+1`` in its column or in its recolouring's (also about ``me``), the rest as above; a
    3-player game's mixed goal (A.2.5) is redrawn until it is player-centric too.

    >>> g = random_game(np.random.default_rng(0), 2, 2, player_centric=True)
    >>> all(is_player_centric(goal) for goal in g.goals)
    True
    """
    _check_sizes(n_options, n_conjunctions)
    if n_players not in (2, 3):
        raise ValueError(f"n_players must be 2 or 3, got {n_players!r}")
    atoms, mats = _random_matrices(rng, n_options, n_conjunctions, bool(player_centric))
    game = Game(tuple(_matrix_goal(atoms, m) for m in mats))
    if n_players == 2:
        return game
    for _ in range(1000):
        three = three_player_game(game, rng)
        if not player_centric or all(is_player_centric(g) for g in three.goals):
            return three
    raise RuntimeError("could not mix a player-centric third goal")  # pragma: no cover


def is_player_centric(goal: Goal) -> bool:
    """Whether every option of ``goal`` requires at least one atom about the player itself (an atom in
    :data:`ME_ATOMS`) to hold: the goal cannot be satisfied by the rest of the world alone, and a
    negated literal (``not(near(me, x))``, mostly true by chance) does not count.

    >>> is_player_centric(Goal.parse("near(me, black cube) | hold(me, black sphere) & see(black cube, me)"))
    True
    >>> is_player_centric(Goal.parse("near(me, black cube) | not(hold(me, yellow sphere))"))
    False
    """
    return all(any(x > 0 and x - 1 in _ME_ATOM_SET for x in opt) for opt in goal.options)


def _random_matrices(rng: np.random.Generator, n_options: int, n_conj: int,
                     player_centric: bool = False) -> tuple[list[int], list]:
    me_cols = (0, 3) if player_centric else ()
    for _ in range(1000):
        atoms = _sample_atoms(rng, me_first=player_centric)
        mats = [_random_matrix(rng, n_options, n_conj, 6, me_cols) for _ in range(2)]
        if all(0.0 < goal_difficulty(_matrix_goal(atoms, m)) < 1.0 for m in mats):
            return atoms, mats
    raise RuntimeError("could not sample a non-trivial game")  # pragma: no cover


def three_player_game(game: Game, rng: np.random.Generator) -> Game:
    """A 3-player game from a 2-player one (A.2.5): ``g3`` mixes options of ``g1`` and ``g2``, negating
    every literal of an option with probability 1/2, then the players are permuted at random."""
    if game.n_players != 2:
        raise ValueError(f"three_player_game needs a 2-player game, got {game.n_players} players")
    pool = [opt for g in game.goals for opt in g.options]
    k = int(rng.integers(1, min(MAX_OPTIONS, len(pool)) + 1))
    picked = [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]
    opts = [tuple(-x for x in o) if rng.random() < 0.5 else o for o in picked]
    goals = [*game.goals, Goal(tuple(opts))]
    return Game(tuple(goals[i] for i in rng.permutation(3)))


def _neighbours(mat: np.ndarray, other: np.ndarray, max_conj: int) -> list[np.ndarray]:
    out = []
    rows, cols = mat.shape
    for i in range(rows):
        nz = int(np.count_nonzero(mat[i]))
        for j in range(cols):
            if mat[i, j] != 0:
                m = mat.copy()
                m[i, j] = -m[i, j]
                out.append(m)  # flip a 1 to -1 or vice versa
                if nz > 1:
                    m = mat.copy()
                    m[i, j] = 0
                    out.append(m)  # remove a literal
            elif nz < max_conj:
                for s in (-1, 1):
                    m = mat.copy()
                    m[i, j] = s
                    out.append(m)  # add a literal
    if rows < MAX_OPTIONS:
        for row in other:
            for s in (1, -1):
                out.append(np.vstack([mat, s * row]))  # copy an option of the other goal (negated or not)
    return out


def generate_game(
    rng: np.random.Generator,
    target_balance: float,
    target_competitiveness: float,
    n_options: int = 1,
    n_conjunctions: int = 1,
    *,
    n_players: int = 2,
    restarts: int = 10,
    max_iters: int = 20,
    transforms: Transforms = Transforms(),  # noqa: B008
) -> Game:
    """Greedy local search for a game with balance ``b*`` and competitiveness ``c*`` (A.2.3).

    From a :func:`random_game`, each iteration picks one goal at random, tries every local edit of its
    matrix (flip a sign, add or remove a literal, copy an option of the other goal, plain or negated),
    drops edits that make a goal trivial or repeat an option, and keeps the edit with the largest
    ``imp = min(|b - b*| - |b' - b*|, |c - c*| - |c' - c*|)`` when it is non-negative; it stops when no
    edit improves, after ``max_iters`` iterations or on reaching the targets. The best of ``restarts``
    runs (by ``|b - b*| + |c - c*|``) is returned; a 3-player game is then built with
    :func:`three_player_game`.
    """
    for name, v in (("target_balance", target_balance), ("target_competitiveness", target_competitiveness)):
        if not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    _check_sizes(n_options, n_conjunctions)
    if n_players not in (2, 3):
        raise ValueError(f"n_players must be 2 or 3, got {n_players!r}")
    b_t, c_t = float(target_balance), float(target_competitiveness)

    def competitiveness(atoms: list[int], mats: list[np.ndarray]) -> tuple[Game, float]:
        g = Game(tuple(_matrix_goal(atoms, m) for m in mats))
        _, anyr, allr = _coop_counts(g.goals)
        return g, (anyr - allr) / anyr

    def measure(atoms: list[int], mats: list[np.ndarray]) -> tuple[float, float]:
        g, c = competitiveness(atoms, mats)
        return balance(g, transforms), c

    best_game, best_dist = None, np.inf
    for _ in range(restarts):
        atoms, mats = _random_matrices(rng, n_options, n_conjunctions)
        b, c = measure(atoms, mats)
        for _it in range(max_iters):
            if b == b_t and c == c_t:
                break
            k = int(rng.integers(2))
            best_imp, best_cand = -np.inf, None
            for cand in _neighbours(mats[k], mats[1 - k], 3):
                if len({tuple(r) for r in cand}) < len(cand):
                    continue  # repeated option
                goal = _matrix_goal(atoms, cand)
                if not 0.0 < goal_difficulty(goal) < 1.0:
                    continue  # trivial goal
                trial = list(mats)
                trial[k] = cand
                g2, c2 = competitiveness(atoms, trial)
                c_gain = abs(c - c_t) - abs(c2 - c_t)
                if c_gain < 0 or c_gain <= best_imp:
                    continue  # imp = min(b_gain, c_gain) can be neither kept nor the best: skip the balance
                b2 = balance(g2, transforms)
                imp = min(abs(b - b_t) - abs(b2 - b_t), c_gain)
                if imp > best_imp:
                    best_imp, best_cand, best_bc = imp, trial, (b2, c2)
            if best_cand is None or best_imp < 0:
                break
            mats, (b, c) = best_cand, best_bc
        dist = abs(b - b_t) + abs(c - c_t)
        if dist < best_dist:
            best_dist, best_game = dist, Game(tuple(_matrix_goal(atoms, m) for m in mats))
    assert best_game is not None
    logger.debug("generate_game: best distance %.3f to (b*=%g, c*=%g)", best_dist, b_t, c_t)
    return three_player_game(best_game, rng) if n_players == 3 else best_game


# -- probe games --------------------------------------------------------------------------------------
def _rps() -> str:
    opts = []
    for mine, beaten_by in (("yellow", "purple"), ("purple", "black"), ("black", "yellow")):
        opts.append(
            f"hold(me, {mine} sphere) & not(hold(opponent, {mine} sphere)) & "
            f"not(hold(opponent, {beaten_by} sphere))"
        )
    return " | ".join(opts)


def _choose_wisely() -> str:
    return " | ".join(f"hold(me, {c} cube) & not(hold(opponent, {c} cube))" for c in COLOURS)


_NO_FLOOR = " & ".join(f"not(on(opponent, {f} floor))" for f in FLOOR_COLOURS)

#: Fixed games: the paper's Section 3.2.3 examples and games after its hand-authored tasks (Tables 7-8).
PROBE_GAMES: dict[str, Game] = {
    "simple_navigation": Game.parse(["hold(me, yellow sphere)", "near(me, yellow pyramid)"]),
    "simple_cooperation": Game.parse(["near(yellow pyramid, yellow sphere)"] * 2),
    "hide_and_seek": Game.parse(["see(me, opponent)", "not(see(opponent, me))"]),
    "capture_the_cube": Game.parse([
        "on(black cube, blue floor) & not(on(black cube, orange floor))",
        "on(black cube, orange floor) & not(on(black cube, blue floor))",
    ]),
    "xrps": Game.parse([_rps(), _rps()]),
    "king_of_the_hill": Game.parse(["on(me, white floor) & not(on(opponent, white floor))"] * 2),
    "choose_wisely_2p": Game.parse([_choose_wisely()] * 2),
    "choose_wisely_3p": Game.parse([_choose_wisely()] * 3),
    "tag_fiesta_2p": Game.parse([_NO_FLOOR] * 2),
    "xfootball": Game.parse(["on(black sphere, blue floor)", "on(black sphere, orange floor)"]),
    "who_gets_the_block": Game.parse([
        "hold(me, purple cube) & on(me, blue floor)", "hold(me, purple cube) & on(me, orange floor)",
    ]),
    "coop_or_not": Game.parse([
        "near(yellow cube, purple sphere) | hold(me, black pyramid) & not(hold(opponent, black pyramid))",
    ] * 2),
    "solve_agi": Game.parse(["on(black sphere, white floor)", "not(on(black sphere, white floor))"]),
    "race_to_clifftop": Game.parse([
        "hold(me, yellow sphere) & on(me, white floor) & not(on(opponent, white floor))",
    ] * 2),
    "following": Game.parse(["on(opponent, blue floor)", "near(me, opponent)"]),
}
