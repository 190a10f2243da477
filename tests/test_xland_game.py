"""XLand game toolkit: atoms, goals, feasible predicate states, the game measures and game generation."""

from __future__ import annotations

import itertools
from fractions import Fraction

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister.examples.xland.game import (
    ATOMS,
    FLOOR0,
    HOLD,
    ME,
    ME_ATOMS,
    NEAR,
    NUM_ATOMS,
    ON,
    OPPONENT,
    PLAYER0,
    PROBE_GAMES,
    SEE,
    Game,
    Goal,
    Transforms,
    _rewards,
    atom_id,
    atom_name,
    balance,
    canonical_game,
    feasible_states,
    game_distance,
    game_hash,
    game_measures,
    generate_game,
    goal_difficulty,
    goal_observation,
    ground_game,
    ground_literal,
    is_player_centric,
    parse_atom,
    random_game,
    recolour_game,
    reward_table,
    three_player_game,
)


def frac(x: float) -> Fraction:
    return Fraction(x).limit_denominator(1000)


# -- vocabulary ---------------------------------------------------------------------------------------
def test_atom_count_by_relation():
    counts = {rel: sum(1 for a in ATOMS if a[0] == rel) for rel in (NEAR, ON, HOLD, SEE)}
    # hold: 2 players x 9 objects; near: unordered pairs of 11 entities; on: 11 entities x 6 floors;
    # see: 36 unordered object pairs + 38 ordered pairs involving a player
    assert counts == {HOLD: 18, NEAR: 55, ON: 66, SEE: 74}
    assert NUM_ATOMS == 213 == len(set(ATOMS))


def test_symmetries_of_near_and_see():
    ys, yp = 2 * 3 + 1, 2 * 3 + 2  # yellow sphere, yellow pyramid
    assert atom_id(NEAR, ys, yp) == atom_id(NEAR, yp, ys)
    assert atom_id(NEAR, ME, ys) == atom_id(NEAR, ys, ME)
    assert atom_id(SEE, ys, yp) == atom_id(SEE, yp, ys)  # objects have no orientation
    assert atom_id(SEE, ME, ys) != atom_id(SEE, ys, ME)  # players do
    assert atom_id(SEE, ME, OPPONENT) != atom_id(SEE, OPPONENT, ME)


@pytest.mark.parametrize("text", ["hold(me, yellow sphere)", "on(opponent, blue floor)",
                                  "see(black cube, me)", "near(purple pyramid, opponent)"])
def test_parse_atom_roundtrip(text):
    assert atom_name(parse_atom(text)) == text


@pytest.mark.parametrize("text,match", [
    ("hold(yellow sphere, me)", "invalid atom"),
    ("on(blue floor, me)", "invalid atom"),
    ("near(me, me)", "invalid atom"),
    ("grab(me, yellow sphere)", "cannot parse"),
    ("hold(me, green sphere)", "unknown entity"),
])
def test_bad_atoms_raise(text, match):
    with pytest.raises(ValueError, match=match):
        parse_atom(text)


def test_goal_is_canonical_and_validated():
    a = Goal.parse("near(me, black cube) | hold(me, yellow sphere) & not(hold(opponent, yellow sphere))")
    b = Goal.parse("not(hold(opponent, yellow sphere)) & hold(me, yellow sphere) | near(black cube, me)")
    assert a == b and hash(a) == hash(b)
    assert len(Goal.parse("near(me, black cube) | near(me, black cube)").options) == 1
    with pytest.raises(ValueError, match="empty option"):
        Goal(((),))
    with pytest.raises(ValueError, match="literal"):
        Goal(((0,),))
    with pytest.raises(ValueError, match="literal"):
        Goal(((NUM_ATOMS + 1,),))
    with pytest.raises(ValueError, match="1 to 3 goals"):
        Game((a,) * 4)


def test_game_encoding_survives_msgpack():
    g = PROBE_GAMES["xrps"]
    wire = msgpack.unpackb(msgpack.packb(g.encode()))
    assert Game.decode(wire) == g
    with pytest.raises(ValueError):
        Game.decode("not a game")


def test_goal_observation_matrix_and_ids():
    goal = Goal.parse("hold(me, black cube) & not(near(me, black cube)) | see(me, opponent)")
    ids, mat = goal_observation(goal)
    atoms = list(goal.atoms)
    assert ids.tolist() == atoms + [-1] * (6 - len(atoms))
    col = {a: j for j, a in enumerate(atoms)}
    for i, opt in enumerate(goal.options):
        for lit in opt:
            assert mat[i, col[abs(lit) - 1]] == np.sign(lit)
    assert np.count_nonzero(mat) == sum(len(o) for o in goal.options)
    with pytest.raises(ValueError, match="at most"):
        goal_observation(Goal.parse(" | ".join(f"hold(me, {c} {s})" for c in ("black", "yellow")
                                               for s in ("cube", "sphere"))))


# -- grounding and feasibility ------------------------------------------------------------------------
def test_opponent_is_existential_over_coplayers():
    lit = parse_atom("hold(opponent, black cube)") + 1
    assert ground_literal(lit, 1, 3) == (((HOLD, PLAYER0 + 0, 0), (HOLD, PLAYER0 + 2, 0)), True)
    assert ground_literal(-lit, 0, 2) == (((HOLD, PLAYER0 + 1, 0),), False)
    assert ground_literal(lit, 0, 1) == ((), True)  # no co-player: the atom is false


def test_feasible_states_constraints():
    p, q = PLAYER0, PLAYER0 + 1
    # one player, two objects: holds at most one -> 3 states
    assert len(feasible_states([(HOLD, p, 0), (HOLD, p, 1)])) == 3
    # two players may hold the same object -> 4 states
    assert len(feasible_states([(HOLD, p, 0), (HOLD, q, 0)])) == 4
    # an entity is on at most one floor -> 3 states
    assert len(feasible_states([(ON, 0, FLOOR0), (ON, 0, FLOOR0 + 1)])) == 3
    # hold -> near: (hold, near) in {00, 01, 11}
    s = feasible_states([(HOLD, p, 0), (NEAR, 0, p)])
    assert sorted(map(tuple, s.astype(int).tolist())) == [(0, 0), (0, 1), (1, 1)]
    # a held object touches no floor: (hold, on) in {00, 01, 10}
    s = feasible_states([(HOLD, p, 0), (ON, 0, FLOOR0)])
    assert sorted(map(tuple, s.astype(int).tolist())) == [(0, 0), (0, 1), (1, 0)]


# -- game measures, pinned to values worked by hand and to the paper's ---------------------------------
def test_simple_navigation_matches_paper():
    m = game_measures(PROBE_GAMES["simple_navigation"])
    # 4 states of (hold(p0, ys), near(p1, yp)); neither rewarded in 1; exactly one rewarded in 2 of 3
    assert (m.n_states, frac(m.exploration_difficulty), frac(m.competitiveness)) == (4, Fraction(1, 4),
                                                                                     Fraction(2, 3))
    assert frac(m.cooperativeness) == Fraction(1, 3)
    assert frac(m.balance) == Fraction(1, 3)  # the paper prints 7/15 (see the module docstring)


def test_simple_cooperation_matches_paper():
    m = game_measures(PROBE_GAMES["simple_cooperation"])
    assert (m.n_states, m.exploration_difficulty, m.competitiveness, m.balance) == (2, 0.5, 0.0, 1.0)


def test_hide_and_seek_matches_paper():
    m = game_measures(PROBE_GAMES["hide_and_seek"])
    assert (m.exploration_difficulty, m.competitiveness) == (0.0, 1.0)
    assert frac(m.balance) == Fraction(1, 3)
    # the balance needs the me <-> opponent recolouring; without it only the identity is left
    assert balance(PROBE_GAMES["hide_and_seek"], Transforms(players=False)) == 0.0


def test_xrps_matches_paper():
    m = game_measures(PROBE_GAMES["xrps"])
    # each player holds nothing or one of 3 spheres: 16 states; nobody rewarded when both hold the same
    # sphere or both hold nothing (4 states); never both rewarded
    assert (m.n_states, m.exploration_difficulty, m.competitiveness, m.balance) == (16, 0.25, 1.0, 1.0)


def test_capture_the_cube():
    m = game_measures(PROBE_GAMES["capture_the_cube"])
    # on(cube, blue) and on(cube, orange) cannot both hold: states {none, blue, orange}
    assert (m.n_states, frac(m.exploration_difficulty), m.competitiveness, m.balance) == (
        3, Fraction(1, 3), 1.0, 1.0)
    # without floor recolouring the best is recolouring the cube in g2: on(purple cube, orange) & not
    # on(purple cube, blue) over 3 x 3 states: p0 rewarded in 3, p1 in 3, both in 1 -> 1/5
    assert frac(balance(PROBE_GAMES["capture_the_cube"], Transforms(floors=False))) == Fraction(1, 5)
    assert balance(PROBE_GAMES["capture_the_cube"], Transforms(False, False, False)) == 0.0


def test_choose_wisely_and_tag_fiesta_by_hand():
    m = game_measures(PROBE_GAMES["choose_wisely_2p"])
    # 4 x 4 hold states; p0 rewarded in 3 x 3 = 9, p1 in 9, both (different cubes) in 6
    assert (m.n_states, m.exploration_difficulty, m.cooperativeness) == (16, 0.25, 0.5)
    m = game_measures(PROBE_GAMES["tag_fiesta_2p"])
    # each player on one of 6 floors or none: 49 states; p0 rewarded in 7, p1 in 7, both in 1
    assert (m.n_states, frac(m.exploration_difficulty), frac(m.cooperativeness)) == (
        49, Fraction(36, 49), Fraction(1, 13))


def test_reward_table_formula():
    g = Game.parse(["hold(me, black cube) & not(hold(opponent, black cube)) | near(me, purple cube)",
                    "hold(me, black cube)"])
    atoms, states, r = reward_table(g)
    col = {a: i for i, a in enumerate(atoms)}
    h0, h1 = states[:, col[(HOLD, PLAYER0, 0)]], states[:, col[(HOLD, PLAYER0 + 1, 0)]]
    n0 = states[:, col[(NEAR, 3, PLAYER0)]]
    assert np.array_equal(r[0], (h0 & ~h1) | n0)
    assert np.array_equal(r[1], h1)


def test_trivial_game_gives_nan():
    g = Game.parse(["hold(me, black cube) & not(hold(me, black cube))"] * 2)
    m = game_measures(g)
    assert m.exploration_difficulty == 1.0
    assert np.isnan(m.cooperativeness) and np.isnan(m.competitiveness) and np.isnan(m.balance)


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31 - 1), n_opt=st.integers(1, 3), n_conj=st.integers(1, 3))
def test_measure_identities_and_recolouring_invariance(seed, n_opt, n_conj):
    rng = np.random.default_rng(seed)
    g = random_game(rng, n_opt, n_conj)
    m = game_measures(g)
    assert all(0.0 < goal_difficulty(goal) < 1.0 for goal in g.goals)  # no trivial goal (A.2.3)
    assert 0.0 <= m.exploration_difficulty < 1.0
    assert m.cooperativeness + m.competitiveness == pytest.approx(1.0)
    assert m.cooperativeness - 1e-12 <= m.balance <= 1.0
    cp = tuple(int(x) for x in rng.permutation(3))
    fm = {f: int(v) for f, v in enumerate(rng.permutation(6))}
    h = recolour_game(g, cp, fm)
    mh = game_measures(h)
    assert mh.exploration_difficulty == m.exploration_difficulty
    assert mh.competitiveness == pytest.approx(m.competitiveness)
    assert mh.balance == pytest.approx(m.balance)  # A.2.4: bal(xi(G)) = bal(G)
    assert game_hash(h) == game_hash(g) and canonical_game(h) == canonical_game(g)


def test_canonical_hash_separates_different_games():
    hashes = {game_hash(g) for g in PROBE_GAMES.values()}
    assert len(hashes) == len(PROBE_GAMES)
    a = Game.parse(["hold(me, yellow sphere)", "hold(me, yellow cube)"])
    b = Game.parse(["hold(me, yellow cube)", "hold(me, yellow sphere)"])  # player order matters
    assert game_hash(a) != game_hash(b)
    c = Game.parse(["hold(me, black sphere)", "hold(me, black cube)"])  # a recolouring of a
    assert game_hash(a) == game_hash(c)


# -- generation ---------------------------------------------------------------------------------------
def test_random_game_shape():
    rng = np.random.default_rng(3)
    for n_opt, n_conj in itertools.product((1, 2, 3), (1, 2, 3)):
        g = random_game(rng, n_opt, n_conj)
        assert g.n_players == 2
        for goal in g.goals:
            assert len(goal.options) <= n_opt and all(len(o) <= n_conj for o in goal.options)
        assert len({a for goal in g.goals for a in goal.atoms}) <= 6
    with pytest.raises(ValueError, match="n_options"):
        random_game(rng, 4, 1)


def test_me_atoms_and_player_centric_goals_by_hand():
    # me with 9 objects: near, hold, see(me, x), see(x, me) = 36; on(me, floor) = 6;
    # near(me, opponent), see(me, opponent), see(opponent, me) = 3
    assert len(ME_ATOMS) == 45
    assert all(ME in ATOMS[i][1:] for i in ME_ATOMS)
    assert atom_id(ON, ME, FLOOR0) in ME_ATOMS and atom_id(HOLD, OPPONENT, 0) not in ME_ATOMS
    assert is_player_centric(Goal.parse("near(me, black cube)"))
    assert is_player_centric(Goal.parse("near(black cube, yellow cube) & on(me, white floor)"))
    assert not is_player_centric(Goal.parse("near(black cube, yellow cube)"))
    assert not is_player_centric(Goal.parse("not(near(me, black cube))"))  # a negation does not count
    assert not is_player_centric(Goal.parse("hold(me, black cube) | hold(opponent, black cube)"))


def test_player_centric_random_games():
    rng = np.random.default_rng(0)
    for n_opt, n_conj, n_players in itertools.product((1, 2, 3), (1, 2, 3), (2, 3)):
        for _ in range(3):
            g = random_game(rng, n_opt, n_conj, n_players, player_centric=True)
            assert g.n_players == n_players
            assert all(is_player_centric(goal) for goal in g.goals), str(g)
            assert all(len(o) == n_conj for goal in g.goals for o in goal.options)
            if n_players == 2:  # (A.2.5's mixed third goal is not redrawn when trivial, as by default)
                assert all(0.0 < goal_difficulty(goal) < 1.0 for goal in g.goals)
    # the default sampler is unchanged and mostly not player-centric: 2-player, 1 option of 1-2 literals
    rng = np.random.default_rng(1)
    games = [random_game(rng, 1, int(rng.integers(1, 3))) for _ in range(200)]
    share = np.mean([all(is_player_centric(goal) for goal in g.goals) for g in games])
    assert share < 0.15
    with pytest.raises(ValueError, match="n_players"):
        random_game(rng, 1, 1, 4, player_centric=True)


def test_three_player_game_mixes_options():
    rng = np.random.default_rng(0)
    base = PROBE_GAMES["simple_navigation"]
    g = three_player_game(base, rng)
    assert g.n_players == 3
    pool = {o for goal in base.goals for o in goal.options}
    pool |= {tuple(sorted((-x for x in o), key=lambda x: (abs(x), x))) for o in pool}
    new = [goal for goal in g.goals if goal not in base.goals]
    assert len(new) <= 1 and all(set(goal.options) <= pool for goal in g.goals)
    with pytest.raises(ValueError, match="2-player"):
        three_player_game(g, rng)


@pytest.mark.parametrize("targets", [(1.0, 1.0), (0.3, 0.7)])
def test_local_search_never_ends_farther_than_its_start(targets):
    b_t, c_t = targets

    def dist(g):
        m = game_measures(g)
        return abs(m.balance - b_t) + abs(m.competitiveness - c_t)

    start = generate_game(np.random.default_rng(5), b_t, c_t, 2, 2, restarts=1, max_iters=0)
    end = generate_game(np.random.default_rng(5), b_t, c_t, 2, 2, restarts=1, max_iters=6)
    assert dist(end) <= dist(start)
    for goal in end.goals:
        assert len(goal.options) <= 3 and all(len(o) <= 3 for o in goal.options)


def test_local_search_reaches_full_competition():
    rng = np.random.default_rng(11)
    g = generate_game(rng, 1.0, 1.0, 1, 1, restarts=3, max_iters=8)
    m = game_measures(g)
    assert m.competitiveness == 1.0 and m.balance == 1.0


def test_generate_game_validates_targets():
    with pytest.raises(ValueError, match="target_balance"):
        generate_game(np.random.default_rng(0), 1.5, 0.5)


def test_probe_games_are_encodable_for_the_policy():
    for name, g in PROBE_GAMES.items():
        if name == "tag_fiesta_2p":
            continue  # 6 atoms in one option: fits, checked below
        for goal in g.goals:
            goal_observation(goal)
    ids, mat = goal_observation(PROBE_GAMES["tag_fiesta_2p"].goals[0])
    assert (ids >= 0).all() and (mat[0] == -1).all()


# -- the game metric (Section 3.2) ---------------------------------------------------------------------
def test_game_distance_by_hand():
    g = PROBE_GAMES["simple_navigation"]
    assert game_distance(g, g) == 0.0
    # flipping player 1's only literal: its reward differs in every state, player 0's in none
    h = Game((g.goals[0], Goal.parse("not(near(me, yellow pyramid))")))
    assert game_distance(g, h) == 0.5
    # near(me, yp) vs near(me, ys): over the 8 states of the three atoms they differ in 4 -> (0 + 1/2) / 2
    k = Game((g.goals[0], Goal.parse("near(me, yellow sphere)")))
    assert game_distance(g, k) == 0.25
    with pytest.raises(ValueError, match="players"):
        game_distance(g, PROBE_GAMES["choose_wisely_3p"])


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1))
def test_exploration_difficulty_is_lipschitz_in_one_goal(seed):
    """Proposition 3.2: changing one goal changes kappa by at most that goal's distance (here over the
    union of both games' ground atoms, as the metric is defined on one predicate-state space)."""
    rng = np.random.default_rng(seed)
    g = random_game(rng, 2, 2)
    k = int(rng.integers(2))
    opts = [list(o) for o in g.goals[k].options]
    i = int(rng.integers(len(opts)))
    opts[i][int(rng.integers(len(opts[i])))] *= -1
    goals = list(g.goals)
    goals[k] = Goal(tuple(tuple(o) for o in opts))
    h = Game(tuple(goals))
    index: dict = {}
    _, cg = ground_game(g.goals, index)
    atoms, ch = ground_game(h.goals, index)
    states = feasible_states(atoms)
    kappa_g = 1.0 - _rewards(cg, states).any(axis=0).mean()
    kappa_h = 1.0 - _rewards(ch, states).any(axis=0).mean()
    goal_dist = 2 * game_distance(g, h)  # the other goal is unchanged
    assert abs(kappa_g - kappa_h) <= goal_dist + 1e-12


def test_too_many_predicate_states_is_a_clear_error():
    atoms = [a for a in ATOMS if a[0] == NEAR and a[1] < 9 and a[2] < 9][:21]  # 21 independent atoms
    with pytest.raises(ValueError, match="MAX_STATES"):
        feasible_states(atoms)
