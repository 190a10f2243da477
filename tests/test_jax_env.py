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
