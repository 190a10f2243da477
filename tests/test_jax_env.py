"""Semantics of the JAX Minigrid x reward-machine environment: dynamics, observation, labelling, RM
stepping, samplers and solvability (magister.examples.minigrid_rm)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from magister.examples.minigrid_rm import env as E  # noqa: E402
from magister.examples.minigrid_rm import levels as L  # noqa: E402
from magister.examples.minigrid_rm import propositions as P  # noqa: E402
from magister.examples.minigrid_rm import reward_machines as R  # noqa: E402
from magister.examples.minigrid_rm import solvability as S  # noqa: E402
from magister.examples.minigrid_rm.problem import Problem, auto_reset_step, reset, step  # noqa: E402

_step = jax.jit(E.grid_step)
_obs = jax.jit(E.observe)
_label = jax.jit(P.label)
_rm_step = jax.jit(R.rm_step)
_pstep = jax.jit(step, static_argnums=2)


def _g(level: E.Level) -> E.GridState:
    return E.GridState.from_level(level)


def _run(g: E.GridState, actions: list[int]) -> E.GridState:
    for a in actions:
        g = _step(g, jnp.int32(a))
    return g


def _active(g: E.GridState) -> set[str]:
    lab = np.asarray(_label(g))
    return {P.prop_name(i) for i in np.flatnonzero(lab)}


# -- layouts --------------------------------------------------------------------------------------------
def test_layouts() -> None:
    assert [E.level_shape(n) for n in (1, 2, 4, 6)] == [(7, 7), (7, 13), (13, 13), (13, 19)]
    assert [len(E.door_cells(n)) for n in (1, 2, 4, 6)] == [0, 1, 4, 7]
    assert E.door_cells(4) == [(3, 6), (9, 6), (6, 3), (6, 9)]
    with pytest.raises(ValueError, match="n_rooms"):
        E.level_shape(3)
    lvl = E.build_level(6, (1, 1))
    t = np.asarray(lvl.tiles)
    assert (t == E.FLOOR).sum() == 6 * 25
    assert (t == E.DOOR_CLOSED).sum() == 7
    with pytest.raises(ValueError, match="free"):
        E.build_level(1, (0, 0))
    with pytest.raises(ValueError, match="colour"):
        E.build_level(1, (1, 1), objects=[(2, 2, "ball", "pink")])


# -- dynamics -------------------------------------------------------------------------------------------
def test_turn_and_forward() -> None:
    g = _g(E.build_level(1, (3, 3), 0, objects=[(3, 5, "ball", "red")]))
    g = _run(g, [E.FORWARD])
    assert g.agent_pos.tolist() == [3, 4]
    g = _run(g, [E.FORWARD])  # blocked by the ball
    assert g.agent_pos.tolist() == [3, 4]
    g = _run(g, [E.RIGHT])  # facing south
    assert int(g.agent_dir) == 1
    g = _run(g, [E.FORWARD, E.FORWARD, E.FORWARD])  # (4,4), (5,4), then the wall at row 6
    assert g.agent_pos.tolist() == [5, 4]
    g = _run(g, [E.LEFT, E.LEFT, E.LEFT])  # south -> east -> north -> west
    assert int(g.agent_dir) == 2


def test_pickup_drop() -> None:
    g = _g(E.build_level(1, (3, 3), 0, objects=[(3, 4, "key", "blue"), (2, 3, "ball", "red")]))
    g = _run(g, [E.PICKUP])
    assert g.carry.tolist() == [E.KEY, 2] and int(g.tiles[3, 4]) == E.FLOOR
    g = _run(g, [E.LEFT, E.PICKUP])  # hands full: the ball stays
    assert g.carry.tolist() == [E.KEY, 2] and int(g.tiles[2, 3]) == E.BALL
    g = _run(g, [E.DROP])  # cannot drop onto the ball
    assert g.carry.tolist() == [E.KEY, 2]
    g = _run(g, [E.RIGHT, E.DROP])
    assert g.carry.tolist() == [E.FLOOR, 0] and int(g.tiles[3, 4]) == E.KEY and int(g.colours[3, 4]) == 2


def test_doors() -> None:
    lvl = E.build_level(2, (3, 5), 0, doors=[("locked", "green")],
                        objects=[(2, 5, "key", "red"), (4, 5, "key", "green")])
    g = _run(_g(lvl), [E.TOGGLE])  # no key: stays locked
    assert int(g.tiles[3, 6]) == E.DOOR_LOCKED
    g = _run(g, [E.LEFT, E.PICKUP, E.RIGHT, E.TOGGLE])  # red key: wrong colour
    assert int(g.tiles[3, 6]) == E.DOOR_LOCKED
    g = _run(g, [E.LEFT, E.DROP, E.RIGHT, E.RIGHT, E.PICKUP, E.LEFT, E.FORWARD])
    assert g.carry.tolist() == [E.KEY, 1] and g.agent_pos.tolist() == [3, 5]  # locked door blocks
    g = _run(g, [E.TOGGLE])
    assert int(g.tiles[3, 6]) == E.DOOR_OPEN and g.carry.tolist() == [E.KEY, 1]  # key kept
    g = _run(g, [E.FORWARD, E.FORWARD])
    assert g.agent_pos.tolist() == [3, 7]
    g = _run(g, [E.LEFT, E.LEFT, E.TOGGLE])  # close it behind
    assert int(g.tiles[3, 6]) == E.DOOR_CLOSED
    g = _run(g, [E.FORWARD])
    assert g.agent_pos.tolist() == [3, 7]
    g = _run(g, [E.TOGGLE, E.FORWARD])
    assert g.agent_pos.tolist() == [3, 6]


def test_observation_is_egocentric() -> None:
    lvl = E.build_level(1, (3, 2), 0, objects=[(3, 3, "ball", "red"), (3, 5, "key", "blue"),
                                                 (4, 3, "square", "green")])
    o = np.asarray(_obs(_g(lvl)))
    assert o.shape == (5, 5, 2)
    assert tuple(o[3, 2]) == (E.BALL, 0)  # one ahead
    assert tuple(o[1, 2]) == (E.KEY, 2)  # three ahead
    assert tuple(o[3, 3]) == (E.SQUARE, 1)  # ahead-right (south when facing east)
    assert tuple(o[0, 2]) == (E.WALL, 0)  # four ahead is the east wall (column 6)
    assert tuple(o[4, 0]) == (E.FLOOR, 0)  # two to the left (north) of (3,2) is (1,2)
    # facing north from (5,3): the ball at (3,3) is two ahead
    o = np.asarray(_obs(_g(lvl._replace(agent_pos=jnp.array([5, 3]), agent_dir=jnp.int32(3)))))
    assert tuple(o[2, 2]) == (E.BALL, 0) and tuple(o[3, 2]) == (E.SQUARE, 1)
    # the carried object shows in the agent's cell; cells beyond the canvas are walls
    g = _g(E.build_level(1, (1, 1), 3, carry=("key", "yellow")))
    o = np.asarray(_obs(g))
    assert tuple(o[4, 2]) == (E.KEY, 4) and tuple(o[0, 0]) == (E.WALL, 0)


# -- propositions ---------------------------------------------------------------------------------------
def test_alphabet() -> None:
    assert P.NUM_PROPS == 889 and len(set(P.PROP_NAMES)) == 889
    assert np.bincount(P.PROP_KIND).tolist() == [49, 21, 819]
    assert P.prop_id("next_door_red_ball") == P.prop_id("next_ball_door_red")
    assert "next_door_door" not in P.PROP_NAMES
    with pytest.raises(KeyError, match="unknown proposition"):
        P.prop_id("front_dragon")
    with pytest.raises(ValueError):
        P.prop_name(889)


def test_labelling_front_and_carrying() -> None:
    lvl = E.build_level(2, (3, 5), 0, doors=[("locked", "blue")], objects=[(2, 5, "ball", "blue")],
                        carry=("key", "red"))
    act = _active(_g(lvl))
    assert {"front_door", "front_door_blue", "front_door_locked", "front_door_blue_locked"} <= act
    assert not {"front_door_open", "front_door_red", "front_ball"} & act
    assert {"carrying_key", "carrying_key_red"} <= act and "carrying_key_blue" not in act
    assert "next_ball_door" not in act  # (2,5) and the door (3,6) are diagonal, not adjacent


def test_labelling_next() -> None:
    # agent (3,5) facing east sees rows 1..5 x cols 5..9
    lvl = E.build_level(2, (3, 5), 0, doors=[("open", "purple")],
                        objects=[(3, 7, "ball", "red"), (4, 7, "ball", "green"), (1, 9, "key", "gray"),
                                 (5, 5, "square", "yellow"), (5, 4, "square", "yellow")])
    act = _active(_g(lvl))
    assert {"next_ball_door", "next_ball_red_door_purple_open", "next_ball_door_open",
            "next_ball_ball", "next_ball_red_ball_green", "next_ball_ball_red"} <= act
    assert "next_ball_green_door" not in act  # (4,7) is diagonal to the door
    assert "next_key_ball" not in act  # the key is not adjacent to anything
    # (5,4) is outside the view (lateral offset 2 to the right is row 5, but col 4 is behind the agent)
    assert "next_square_square" not in act
    # one ball cannot be next to itself
    lvl1 = E.build_level(1, (3, 1), 0, objects=[(3, 3, "ball", "red")])
    assert "next_ball_ball" not in _active(_g(lvl1))
    lvl2 = E.build_level(1, (3, 1), 0, objects=[(3, 3, "ball", "red"), (2, 3, "ball", "red")])
    assert {"next_ball_ball", "next_ball_red_ball_red", "next_ball_ball_red"} <= _active(_g(lvl2))


# -- reward machines ------------------------------------------------------------------------------------
def _lab(*names: str) -> jax.Array:
    lab = jnp.zeros(P.NUM_PROPS, bool)
    for n in names:
        lab = lab.at[P.prop_id(n)].set(True)
    return lab


def test_sequential_rm_stepping() -> None:
    rm = R.sequential_rm(["front_ball", "carrying_key", "front_door_open"])
    assert int(rm.n_states) == 4 and int(rm.accepting) == 3
    u, r = _rm_step(rm, jnp.int32(0), _lab("carrying_key"))  # not the current subgoal
    assert (int(u), float(r)) == (0, 0.0)
    u, r = _rm_step(rm, jnp.int32(0), _lab("front_ball", "carrying_key"))  # one transition per step
    assert (int(u), float(r)) == (1, 0.0)
    u, r = _rm_step(rm, u, _lab("carrying_key"))
    assert (int(u), float(r)) == (2, 0.0)
    u, r = _rm_step(rm, u, _lab("front_door_open"))
    assert (int(u), float(r)) == (3, 1.0)
    u, r = _rm_step(rm, u, _lab("front_ball"))  # accepting is absorbing, no second reward
    assert (int(u), float(r)) == (3, 0.0)


def test_branching_rm_is_deterministic() -> None:
    # u0 -a-> u1 (reject-ish branch), u0 -b-> u2 = uA; negations make the edges exclusive
    rm = R.rm_from_edges(3, [(0, 1, ["front_ball"]), (0, 2, ["front_key"]), (1, 2, ["carrying_ball"])])
    lits = np.asarray(rm.edge_lits)
    assert lits[0].tolist() == [R.literal("front_ball"), R.literal("!front_key"), 0]
    u, _ = _rm_step(rm, jnp.int32(0), _lab("front_ball", "front_key"))  # both true: neither fires
    assert int(u) == 0
    u, r = _rm_step(rm, jnp.int32(0), _lab("front_key"))
    assert (int(u), float(r)) == (2, 1.0)
    with pytest.raises(ValueError, match="accepting"):
        R.rm_from_edges(3, [(2, 1, ["front_ball"])])
    with pytest.raises(ValueError, match="literals"):
        R.rm_from_edges(2, [(0, 1, ["front_ball", "front_key", "carrying_key", "front_door"])])
    with pytest.raises(ValueError, match="1..7"):
        R.sequential_rm([])


def test_problem_step_reward_and_termination() -> None:
    lvl = E.build_level(1, (3, 2), 0, objects=[(3, 4, "ball", "red"), (1, 1, "key", "red")])
    prob = Problem(lvl, R.sequential_rm(["front_ball", "carrying_ball"]))
    s = reset(prob)
    s, r, term, trunc = _pstep(s, jnp.int32(E.FORWARD), 10)  # now facing the ball
    assert (int(s.rm_state), float(r), bool(term)) == (1, 0.0, False)
    s, r, term, trunc = _pstep(s, jnp.int32(E.PICKUP), 10)
    assert (int(s.rm_state), float(r), bool(term), bool(trunc)) == (2, 1.0, True, False)
    # truncation and auto-reset to the same problem
    s = reset(prob)
    for _ in range(3):
        s, r, term, trunc = _pstep(s, jnp.int32(E.LEFT), 3)
    assert bool(trunc) and not bool(term) and int(s.t) == 3
    s0 = reset(prob)
    s2, *_ = jax.jit(auto_reset_step, static_argnums=2)(s0._replace(t=jnp.int32(2)), jnp.int32(E.LEFT), 3)
    assert int(s2.t) == 0 and int(s2.grid.agent_dir) == 0


# -- samplers -------------------------------------------------------------------------------------------
_sample = jax.jit(jax.vmap(L.sample_problem, in_axes=(0, None)), static_argnums=1)
_N = 1024


@pytest.fixture(scope="module")
def batches() -> dict[str, Problem]:
    keys = jax.random.split(jax.random.PRNGKey(7), _N)
    return {m: _sample(keys, L.ProblemSampler(mode=m)) for m in ("independent", "level_conditioned")}


def test_level_sampler_ranges(batches) -> None:
    ps = batches["independent"]
    rooms = np.asarray(ps.level.n_rooms)
    assert set(rooms.tolist()) == {1, 2, 4, 6} and min(np.bincount(rooms)[[1, 2, 4, 6]]) > 200
    tiles = np.asarray(ps.level.tiles)
    d = np.isin(tiles, E.DOOR_TILES).sum(axis=(1, 2))
    nd = np.isin(tiles, E.MOVABLE_TILES).sum(axis=(1, 2))
    for n, (lo, hi) in L.OBJECT_RANGE.items():
        m = rooms == n
        assert np.all(d[m] == len(E.door_cells(n)))
        tot = d[m] + nd[m]
        assert tot.min() == lo and tot.max() == hi
    pos = np.asarray(ps.level.agent_pos)
    assert np.all(tiles[np.arange(_N), pos[:, 0], pos[:, 1]] == E.FLOOR)
    ks = np.asarray(ps.rm.n_states) - 1
    assert set(ks.tolist()) == {1, 2, 3, 4, 5}
    lits = np.asarray(ps.rm.edge_lits)
    src = np.asarray(ps.rm.edge_src)
    for i in range(20):  # canonical sequential form
        k = ks[i]
        assert src[i, :k].tolist() == list(range(k)) and np.all(src[i, k:] == -1)
        assert np.all(lits[i, :k, 0] > 0) and np.all(lits[i, :, 1:] == 0)


def test_level_conditioned_props_exist_in_level(batches) -> None:
    ps = batches["level_conditioned"]
    lits = np.asarray(ps.rm.edge_lits)[:, :, 0]
    ks = np.asarray(ps.rm.n_states) - 1
    tiles, colours = np.asarray(ps.level.tiles), np.asarray(ps.level.colours)
    for i in range(64):
        cnt = P.object_descriptor_counts(tiles[i], colours[i])
        for p in lits[i, : ks[i]] - 1:
            assert cnt[P.PROP_D1[p]] >= 1 and cnt[P.PROP_D2[p]] >= 1
    lvl = E.build_level(1, (1, 1), objects=[(3, 3, "ball", "red")])
    a = np.asarray(L.allowed_props(lvl))
    assert a[P.prop_id("front_ball_red")] and a[P.prop_id("carrying_ball")]
    assert not a[P.prop_id("front_key")] and not a[P.prop_id("next_ball_ball")]


def test_solvable_fraction_independent_vs_conditioned(batches) -> None:
    """Appendix E.3: ~2.7% of independent samples are solvable, ~83% of level-conditioned ones."""
    ind = L.solvable_batch(batches["independent"]).mean()
    cond = L.solvable_batch(batches["level_conditioned"]).mean()
    assert 0.01 < ind < 0.06
    assert 0.7 < cond < 0.95


# -- random-walk (DAG) RM sampler ---------------------------------------------------------------------------
_rw = jax.jit(jax.vmap(R.sample_random_walk_rm, in_axes=(0, None, None, None, None, None, None)),
              static_argnums=(1, 2, 5))  # restart_prob and max_paths traced: one compilation
_npaths = jax.jit(jax.vmap(R.rm_paths_count))
_NRW = 256  # one batch size: one compilation


def _rw_batch(n: int, seed: int = 0, max_paths: int = 2, restart: float = 0.5, allowed=None
              ) -> R.RewardMachine:
    allowed = jnp.ones(P.NUM_PROPS, bool) if allowed is None else allowed  # same as None, one compilation
    return _rw(jax.random.split(jax.random.PRNGKey(seed), n), 1, 5, allowed, jnp.float32(restart), 4,
               jnp.int32(max_paths))


def test_implication_matrix() -> None:
    imp = R.IMPLIES
    pid = P.prop_id
    assert imp[pid("front_ball_red"), pid("front_ball")] and not imp[pid("front_ball"), pid("front_ball_red")]
    assert imp[pid("front_door_red_locked"), pid("front_door_locked")]
    assert imp[pid("front_door_red_locked"), pid("front_door")]
    assert not imp[pid("front_door_red_locked"), pid("front_door_red_open")]
    assert imp[pid("next_ball_red_square"), pid("next_square_ball")]  # next is symmetric
    assert not imp[pid("front_ball"), pid("carrying_ball")]
    assert np.all(np.diag(imp))  # reflexive
    assert not np.any(imp & imp.T & ~np.eye(889, dtype=bool))  # no two distinct propositions are equivalent


def test_random_walk_sampler_structure() -> None:
    rms = _rw_batch(_NRW)
    again = _rw_batch(_NRW)
    for a, b in zip(rms, again):  # deterministic in the key
        assert np.array_equal(np.asarray(a), np.asarray(b))
    n = np.asarray(rms.n_states)
    src, dst, lits = (np.asarray(x) for x in (rms.edge_src, rms.edge_dst, rms.edge_lits))
    assert n.min() == 2 and n.max() <= 6 and {2, 3, 4, 5} <= set(np.unique(n).tolist())  # walks skip states
    assert np.all(np.asarray(rms.initial) == 0) and np.array_equal(np.asarray(rms.accepting), n - 1)
    paths = np.asarray(_npaths(rms))
    assert paths.min() == 1 and paths.max() == 2 and 0.1 < (paths == 2).mean() < 0.9
    for i in range(_NRW):
        used = src[i] >= 0
        e_src, e_dst = src[i][used], dst[i][used]
        assert np.all(src[i][used.sum():] == -1)  # edges first, padding after
        assert np.all(e_src < e_dst) and e_dst.max() == n[i] - 1  # acyclic in index order
        assert len(set(zip(e_src.tolist(), e_dst.tolist()))) == used.sum()  # one edge per pair of states
        for u in range(n[i]):  # every state lies on a path u0 -> uA
            assert (u == 0) or u in e_dst
            assert (u == n[i] - 1) or u in e_src
        assert np.bincount(e_src).max() <= 2  # out-degree <= max_paths
        pos = lits[i, :, 0][used] - 1
        assert np.all((pos >= 0) & (pos < P.NUM_PROPS))
        for e in range(used.sum()):
            sib = [f for f in range(used.sum()) if f != e and e_src[f] == e_src[e]]
            negs = sorted(-c - 1 for c in lits[i, e, 1:] if c != 0)
            assert negs == sorted(pos[sib].tolist())  # determinism: conjoined with the siblings' negations
            assert np.all(lits[i, e, 1:] <= 0)
            for f in sib:
                assert not R.IMPLIES[pos[e], pos[f]]  # labelling is deterministic (no implied sibling)
            for f in range(used.sum()):
                if e_dst[f] == e_src[e]:
                    assert not R.IMPLIES[pos[f], pos[e]]  # and non-tautological


def test_random_walk_sampler_options() -> None:
    single = _rw_batch(_NRW, seed=1, max_paths=1)
    assert np.all(np.asarray(_npaths(single)) == 1)
    assert np.all(np.asarray(single.edge_lits)[:, :, 1:] == 0)  # a single path: no negations needed
    no_restart = _rw_batch(_NRW, seed=2, restart=0.0)
    assert np.all(np.asarray(_npaths(no_restart)) == 1)  # one walk, one path
    more = _rw_batch(_NRW, seed=3, restart=1.0)
    assert (np.asarray(_npaths(more)) == 2).mean() > (
        np.asarray(_npaths(_rw_batch(_NRW, seed=3))) == 2).mean()
    allowed = jnp.zeros(P.NUM_PROPS, bool).at[jnp.array([7, 8, 60, 100])].set(True)
    lim = _rw_batch(_NRW, seed=4, allowed=allowed)
    lits = np.asarray(lim.edge_lits)
    assert set(np.unique(np.abs(lits[lits != 0]) - 1).tolist()) <= {7, 8, 60, 100}
    with pytest.raises(ValueError, match="max_paths"):
        R.sample_random_walk_rm(jax.random.PRNGKey(0), max_paths=4)
    with pytest.raises(ValueError, match="task"):
        L.ProblemSampler(task="dag")
    # RM stepping on a branching RM: at most one edge fires, the one whose proposition holds
    rm = jax.tree_util.tree_map(lambda a: a[int(np.argmax(np.asarray(_npaths(more))))], more)
    src, lits = np.asarray(rm.edge_src), np.asarray(rm.edge_lits)
    fork = int(np.argmax(np.bincount(src[src >= 0])))
    two = [e for e in range(R.MAX_EDGES) if src[e] == fork]
    assert len(two) == 2
    for e in two:
        lab = jnp.zeros(P.NUM_PROPS, bool).at[lits[e, 0] - 1].set(True)
        u, _ = _rm_step(rm, jnp.int32(fork), lab)
        assert int(u) == int(np.asarray(rm.edge_dst)[e])
    both = jnp.zeros(P.NUM_PROPS, bool).at[lits[two, 0] - 1].set(True)
    assert int(_rm_step(rm, jnp.int32(fork), both)[0]) == fork  # both hold: neither edge fires


# -- solvability ----------------------------------------------------------------------------------------
def _solv(lvl: E.Level, props: list[str]) -> bool:
    return L.is_solvable(lvl, R.sequential_rm(props))


def test_solvability_reachability() -> None:
    open_lvl = E.build_level(2, (3, 2), 0, doors=[("closed", "red")], objects=[(3, 9, "ball", "blue")])
    assert _solv(open_lvl, ["front_ball"]) and _solv(open_lvl, ["carrying_ball_blue"])
    assert not _solv(open_lvl, ["front_ball_red"]) and not _solv(open_lvl, ["front_key"])
    assert _solv(open_lvl, ["front_door_open", "front_door_closed"])  # toggling
    assert not _solv(open_lvl, ["front_door_locked"])
    assert not _solv(open_lvl, ["next_ball_ball"]) and _solv(open_lvl, ["next_ball_door_red"])
    locked = E.build_level(2, (3, 2), 0, doors=[("locked", "red")], objects=[(3, 9, "ball", "blue")])
    assert not _solv(locked, ["front_ball"])  # no key
    with_key = E.build_level(2, (3, 2), 0, doors=[("locked", "red")],
                             objects=[(3, 9, "ball", "blue"), (1, 1, "key", "red")])
    assert _solv(with_key, ["front_ball"])
    wrong_key = E.build_level(2, (3, 2), 0, doors=[("locked", "red")],
                              objects=[(3, 9, "ball", "blue"), (1, 1, "key", "green")])
    assert not _solv(wrong_key, ["front_ball"])
    key_inside = E.build_level(2, (3, 2), 0, doors=[("locked", "red")], objects=[(3, 9, "key", "red")])
    assert not _solv(key_inside, ["carrying_key"])
    carried = E.build_level(2, (3, 2), 0, doors=[("locked", "red")], objects=[(3, 9, "ball", "blue")],
                            carry=("key", "red"))
    assert _solv(carried, ["front_ball"])


def test_solvability_door_order_matters() -> None:
    lvl = E.build_level(2, (3, 2), 0, doors=[("locked", "green")],
                        objects=[(3, 9, "ball", "blue"), (1, 1, "key", "green")])
    assert _solv(lvl, ["front_door_green_locked", "front_ball"])  # face it locked, then open it
    assert not _solv(lvl, ["front_ball", "front_door_green_locked"])  # opening it breaks the second
    assert _solv(lvl, ["front_ball", "front_door_green_open"])
    # four rooms: choose which locked door to open
    lvl4 = E.build_level(4, (3, 2), 0, doors=[("locked", "red"), ("closed", "red"), ("locked", "blue"),
                                              ("closed", "red")],
                         objects=[(1, 1, "key", "red"), (1, 2, "key", "blue"), (10, 10, "square", "red")])
    assert _solv(lvl4, ["front_door_red_locked", "front_square"])  # through the blue door, not the red
    assert _solv(lvl4, ["front_square", "front_door_blue_locked"]) is True  # through the red door
    # a branching RM is solvable if one path is
    rm = R.rm_from_edges(3, [(0, 2, ["front_key_yellow"]), (0, 1, ["front_key_red"]),
                             (1, 2, ["carrying_key_blue"])])
    assert L.is_solvable(lvl4, rm)
    rm_bad = R.rm_from_edges(3, [(0, 2, ["front_key_yellow"]), (0, 1, ["front_key_red"]),
                                 (1, 2, ["carrying_ball"])])
    assert not L.is_solvable(lvl4, rm_bad)


def _conj(lvl: E.Level, *edges: list[str]) -> bool:
    """Solvability of a sequential RM whose edges are conjunctions (names, ``!`` for negation)."""
    return L.is_solvable(lvl, R.rm_from_edges(len(edges) + 1, [(i, i + 1, e) for i, e in enumerate(edges)]))


def test_solvability_conjunctions_and_negations() -> None:
    """Cases the per-literal checker called solvable: every literal of an edge must hold at once."""
    red_ball = E.build_level(1, (3, 1), 0, objects=[(3, 4, "ball", "red")])
    assert _conj(red_ball, ["front_ball"]) and not _conj(red_ball, ["front_ball", "!front_ball_red"])
    two = E.build_level(1, (3, 1), 0, objects=[(3, 4, "ball", "red"), (1, 1, "ball", "blue")])
    assert _conj(two, ["front_ball", "!front_ball_red"])
    one_key = E.build_level(1, (3, 1), 0, objects=[(5, 5, "key", "red")])
    assert not _conj(one_key, ["carrying_key", "front_key"])  # the carried key is not in front
    assert not _conj(one_key, ["carrying_key_red", "next_key_red_door"])  # nor on the grid
    assert _conj(one_key, ["carrying_key"], ["front_key"])  # one after the other: drop it, face it
    two_keys = E.build_level(1, (3, 1), 0, objects=[(5, 5, "key", "red"), (1, 5, "key", "green")])
    assert _conj(two_keys, ["carrying_key", "front_key"])
    assert _conj(two_keys, ["carrying_key", "front_key", "!front_key_green"])  # carry green, face red
    assert not _conj(two_keys, ["carrying_key_red", "front_key_red"])
    door = E.build_level(2, (3, 2), 0, doors=[("closed", "red")], objects=[(1, 1, "square", "red")])
    assert not _conj(door, ["front_door_open", "front_door_closed"])  # one door, one state at a time
    assert _conj(door, ["front_door_open"], ["front_door_closed"])
    assert not _conj(door, ["next_ball_square", "!next_ball_square_red"])
    assert not _conj(door, ["next_square_door", "!next_square_door_red"])
    assert _conj(door, ["next_square_door", "!next_square_door_open"])  # close it first
    # a negated literal the level cannot avoid in the chosen configuration
    assert not _conj(door, ["next_square_red_door_red", "!next_square_door"])


def test_solvability_sees_unreachable_objects_through_walls() -> None:
    """Walls do not occlude the view: fixed objects behind a locked door can satisfy ``next`` (the old
    checker required a reachable object)."""
    near = E.build_level(2, (3, 2), 0, doors=[("locked", "red")],
                         objects=[(3, 7, "ball", "blue"), (3, 8, "key", "yellow")])
    assert _solv(near, ["next_ball_key"]) and _solv(near, ["next_ball_door_locked"])
    assert not _solv(near, ["front_ball"]) and not _solv(near, ["carrying_key"])
    far = E.build_level(2, (3, 2), 0, doors=[("locked", "red")],
                        objects=[(1, 10, "ball", "blue"), (1, 11, "key", "yellow")])
    assert not _solv(far, ["next_ball_key"])  # never within 4 cells ahead of a reachable cell
    assert S.formula_satisfiable(near, ["front_door_locked"])
    assert not S.formula_satisfiable(near, ["front_door_locked"], unlocked=[(3, 6)])
    with pytest.raises(ValueError, match="locked door"):
        S.formula_satisfiable(near, ["front_ball"], unlocked=[(3, 3)])


def test_single_literal_fast_path_matches_general_search(batches) -> None:
    ps = batches["independent"]
    rng = np.random.default_rng(3)
    checked = 0
    for i in rng.choice(_N, size=12, replace=False):
        lvl = jax.tree_util.tree_map(lambda a, i=i: a[i], ps.level)
        ch = S._Checker(lvl)
        reg = ch.region(0)
        props = np.concatenate([np.flatnonzero(np.asarray(L.allowed_props(lvl))), rng.integers(0, 889, 20)])
        for p in rng.choice(props, size=12, replace=False):
            assert reg._single(int(p)) == reg._conjunction([int(p)], []), P.prop_name(int(p))
            checked += 1
    assert checked == 144


# A brute-force reference: breadth-first search over full environment states (pure Python dynamics written
# from the env's definition), for levels small enough to enumerate.
_ADJ25 = np.zeros((25, 25))
for _r in range(5):
    for _c in range(5):
        for _dr, _dc in ((0, 1), (1, 0)):
            if _r + _dr < 5 and _c + _dc < 5:
                _i, _j = _r * 5 + _c, (_r + _dr) * 5 + _c + _dc
                _ADJ25[_i, _j] = _ADJ25[_j, _i] = 1
_MF = P.MATCH.reshape(P.NUM_DESCRIPTORS, -1).astype(float)


def _bf_label(state: tuple) -> np.ndarray:
    tiles, cols, pos, d, carry = state
    fwd, right = E.DIR_VEC[d], E.DIR_VEC[(d + 1) % 4]
    idx = []
    for vr in range(5):
        for vc in range(5):
            r = pos[0] + (4 - vr) * fwd[0] + (vc - 2) * right[0]
            c = pos[1] + (4 - vr) * fwd[1] + (vc - 2) * right[1]
            inside = 0 <= r < len(tiles) and 0 <= c < len(tiles[0])
            idx.append(tiles[r][c] * 6 + cols[r][c] if inside else E.WALL * 6)
    m = _MF[:, idx]
    carrying = np.zeros(P.NUM_DESCRIPTORS, bool)
    if carry[0] != E.FLOOR:
        carrying[:21] = P.MATCH[:21, carry[0], carry[1]]
    pair = (m @ _ADJ25 @ m.T) > 0
    k, d1, d2 = P.PROP_KIND, P.PROP_D1, P.PROP_D2
    return np.where(k == 0, m[d1, 17] > 0, np.where(k == 1, carrying[d1], pair[d1, d2]))


def _bf_step(state: tuple, a: int) -> tuple:
    tiles, cols, pos, d, carry = state
    tiles, cols = [list(x) for x in tiles], [list(x) for x in cols]
    f = (pos[0] + int(E.DIR_VEC[d][0]), pos[1] + int(E.DIR_VEC[d][1]))
    ft, fc = tiles[f[0]][f[1]], cols[f[0]][f[1]]
    if a in (E.LEFT, E.RIGHT):
        d = (d + (3 if a == E.LEFT else 1)) % 4
    elif a == E.FORWARD and ft in (E.FLOOR, E.DOOR_OPEN):
        pos = f
    elif a == E.PICKUP and ft in E.MOVABLE_TILES and carry[0] == E.FLOOR:
        carry, tiles[f[0]][f[1]], cols[f[0]][f[1]] = (ft, fc), E.FLOOR, 0
    elif a == E.DROP and carry[0] != E.FLOOR and ft == E.FLOOR:
        (tiles[f[0]][f[1]], cols[f[0]][f[1]]), carry = carry, (E.FLOOR, 0)
    elif a == E.TOGGLE and (ft in (E.DOOR_CLOSED, E.DOOR_OPEN)
                            or (ft == E.DOOR_LOCKED and carry == (E.KEY, fc))):
        tiles[f[0]][f[1]] = E.DOOR_CLOSED if ft == E.DOOR_OPEN else E.DOOR_OPEN
    return tuple(map(tuple, tiles)), tuple(map(tuple, cols)), pos, d, carry


def _brute_solvable(lvl: E.Level, rm: R.RewardMachine) -> bool:
    h, w = E.level_shape(int(lvl.n_rooms))
    s0 = (tuple(map(tuple, np.asarray(lvl.tiles)[:h, :w].astype(int).tolist())),
          tuple(map(tuple, np.asarray(lvl.colours)[:h, :w].astype(int).tolist())),
          tuple(int(x) for x in np.asarray(lvl.agent_pos)), int(lvl.agent_dir),
          tuple(int(x) for x in np.asarray(lvl.carry)))
    src, dst, lits = (np.asarray(x).tolist() for x in (rm.edge_src, rm.edge_dst, rm.edge_lits))
    acc = int(rm.accepting)
    labels: dict = {}
    start = (s0, int(rm.initial))
    seen, todo = {start}, [start]
    while todo:
        s, u = todo.pop()
        for a in range(E.NUM_ACTIONS):
            s2 = _bf_step(s, a)
            if s2 not in labels:
                labels[s2] = _bf_label(s2)
            lab = labels[s2]
            u2 = next((dst[e] for e in range(len(src)) if src[e] == u
                       and all(lab[abs(c) - 1] == (c > 0) for c in lits[e] if c)), u)
            if u2 == acc:
                return True
            if (s2, u2) not in seen:
                seen.add((s2, u2))
                todo.append((s2, u2))
    return False


def test_solvability_matches_brute_force_search() -> None:
    """Exact on levels whose whole state space can be enumerated (conjunctions, negations, doors)."""
    cases = [
        (E.build_level(1, (3, 1), 0, objects=[(3, 4, "ball", "red")]),
         [["front_ball", "!front_ball_red"]]),
        (E.build_level(1, (3, 1), 0, objects=[(5, 5, "key", "red")]),
         [["carrying_key"], ["front_key", "!carrying_key"]]),
        (E.build_level(1, (3, 1), 0, objects=[(5, 5, "key", "red")]), [["carrying_key", "front_key"]]),
        (E.build_level(2, (3, 2), 0, doors=[("locked", "red")], objects=[(3, 7, "ball", "blue"),
                                                                      (3, 8, "key", "yellow")]),
         [["next_ball_key", "!front_door"]]),
        (E.build_level(2, (3, 2), 0, doors=[("closed", "green")], objects=[(1, 1, "square", "green")]),
         [["next_square_door_closed"], ["front_door_open", "!next_square_door"]]),
        (E.build_level(2, (3, 2), 0, doors=[("locked", "green")], objects=[(1, 1, "key", "green")]),
         [["front_door_green_open"], ["front_door_locked"]]),
        (E.build_level(2, (3, 2), 0, doors=[("locked", "green")], objects=[(1, 1, "key", "green")]),
         [["front_door_green_locked", "carrying_key"], ["front_door_open", "!carrying_key"]]),
    ]
    verdicts = []
    for lvl, edges in cases:
        rm = R.rm_from_edges(len(edges) + 1, [(i, i + 1, e) for i, e in enumerate(edges)])
        want = _brute_solvable(lvl, rm)
        assert L.is_solvable(lvl, rm) == want, edges
        verdicts.append(want)
    assert verdicts == [False, True, False, True, True, False, True]


def _reference_label(tiles: np.ndarray, colours: np.ndarray, pos: tuple[int, int], d: int,
                     carry: tuple[int, int]) -> set[str]:
    """A slow, loop-based labelling function written from the proposition definitions."""
    fwd, right = E.DIR_VEC[d], E.DIR_VEC[(d + 1) % 4]
    view = {}
    for f in range(5):
        for lat in range(-2, 3):
            r, c = pos[0] + f * fwd[0] + lat * right[0], pos[1] + f * fwd[1] + lat * right[1]
            if 0 <= r < E.MAX_H and 0 <= c < E.MAX_W:
                view[(r, c)] = (int(tiles[r, c]), int(colours[r, c]))
    objs = {rc: tc for rc, tc in view.items() if tc[0] in E.MOVABLE_TILES + E.DOOR_TILES}

    def descs(tc: tuple[int, int]) -> list[str]:
        return [P.DESCRIPTORS[k] for k in range(P.NUM_DESCRIPTORS) if P.MATCH[k, tc[0], tc[1]]]

    out = set()
    front = (pos[0] + fwd[0], pos[1] + fwd[1])
    if front in objs:
        out |= {f"front_{x}" for x in descs(objs[front])}
    if carry[0] != E.FLOOR:
        out |= {f"carrying_{x}" for x in descs(carry)}
    for (r, c), tc in objs.items():
        for nb in ((r + 1, c), (r, c + 1)):
            if nb in objs:
                for x in descs(tc):
                    for y in descs(objs[nb]):
                        for name in (f"next_{x}_{y}", f"next_{y}_{x}"):
                            if name in P.PROP_NAMES:
                                out.add(name)
    return out


def test_labelling_matches_reference_on_random_states(batches) -> None:
    ps = batches["independent"]
    rng = np.random.default_rng(0)
    tiles_all, cols_all = np.asarray(ps.level.tiles), np.asarray(ps.level.colours)
    for i in rng.choice(_N, size=40, replace=False):
        tiles, cols = tiles_all[i], cols_all[i]
        free = np.argwhere(np.isin(tiles, (E.FLOOR, E.DOOR_OPEN)))
        pos = tuple(int(v) for v in free[rng.integers(len(free))])
        d = int(rng.integers(4))
        carry = (int(rng.choice([E.FLOOR, E.KEY, E.BALL, E.SQUARE])), int(rng.integers(6)))
        if carry[0] == E.FLOOR:
            carry = (E.FLOOR, 0)
        g = E.GridState(jnp.asarray(tiles), jnp.asarray(cols), jnp.asarray(pos, jnp.int32), jnp.int32(d),
                        jnp.asarray(carry, jnp.int32))
        assert _active(g) == _reference_label(tiles, cols, pos, d, carry)


# -- literal-only labelling (the environment step's fast path) -----------------------------------------------
_ALL_CODES = jnp.concatenate([jnp.arange(1, P.NUM_PROPS + 1), -jnp.arange(1, P.NUM_PROPS + 1),
                              jnp.zeros(1, jnp.int32)]).astype(jnp.int32)


@jax.jit
def _trajectory_check(problems: Problem, key: jax.Array) -> tuple[jax.Array, ...]:
    """Random actions on a batch; per step: literal_truth of every signed literal vs the full label, the
    RM state/reward of problem.step vs rm_step on the full label, and how many props of each kind held."""
    s = jax.vmap(reset)(problems)
    n = problems.rm.n_states.shape[0]

    def one(s, k):
        a = jax.random.randint(k, (n,), 0, E.NUM_ACTIONS)
        g = jax.vmap(E.grid_step)(s.grid, a)
        lab = jax.vmap(P.label)(g)
        fast = jax.vmap(P.literal_truth, in_axes=(0, None))(g, _ALL_CODES)
        full = jax.vmap(P.literals_from_label, in_axes=(0, None))(lab, _ALL_CODES)
        u_ref, r_ref = jax.vmap(R.rm_step)(s.problem.rm, s.rm_state, lab)
        s2, r, _, _, before = jax.vmap(auto_reset_step, in_axes=(0, 0, None))(s, a, 64)
        same_rm = (before.rm_state == u_ref) & (r == r_ref)
        kind = jnp.asarray(P.PROP_KIND)
        kinds = jnp.stack([(lab & (kind == k)).sum() for k in (P.FRONT, P.CARRYING, P.NEXT)])
        return s2, (jnp.all(fast == full), jnp.all(same_rm), kinds, (before.rm_state != s.rm_state).sum())

    _, (lab_ok, rm_ok, kinds, moves) = jax.lax.scan(one, s, jax.random.split(key, 128))
    return lab_ok, rm_ok, kinds.sum(0), moves.sum()


def test_literal_truth_equals_full_label_on_random_trajectories() -> None:
    """Exactness of the step's literal-only labelling: all 2 x 889 signed literals (and padding) agree with
    the full label on every state of 256 envs x 128 random steps, and so do the RM trajectories."""
    keys = jax.random.split(jax.random.PRNGKey(3), 256)
    for mode in ("independent", "level_conditioned"):  # the latter: RMs about objects that exist
        probs = _sample(keys, L.ProblemSampler(mode=mode))
        lab_ok, rm_ok, kinds, moves = _trajectory_check(probs, jax.random.PRNGKey(4))
        assert bool(jnp.all(lab_ok)) and bool(jnp.all(rm_ok))
        assert np.all(np.asarray(kinds) > 100), kinds  # every kind of proposition was true many times
    assert int(moves) > 50  # RM transitions happened (level-conditioned)


def test_literal_truth_hand_made_cases() -> None:
    lvl = E.build_level(1, (3, 2), 0, objects=[(3, 3, "ball", "blue"), (2, 3, "key", "red")],
                        carry=("square", "green"))
    g = _g(lvl)
    names = ["front_ball_blue", "!front_ball_blue", "front_key", "carrying_square", "carrying_square_red",
             "next_ball_key_red", "next_key_key", "!next_ball_blue_key"]
    codes = jnp.asarray([R.literal(n) for n in names] + [0], jnp.int32)
    got = np.asarray(P.literal_truth(g, codes)).tolist()
    assert got == [True, False, False, True, False, True, False, False, True]
    assert got == np.asarray(P.literals_from_label(_label(g), codes)).tolist()
