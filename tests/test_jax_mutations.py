"""Preconditions and effects of every ATLAS edit (magister.examples.minigrid_rm.mutations)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from magister.examples.minigrid_rm import env as E  # noqa: E402
from magister.examples.minigrid_rm import mutations as M  # noqa: E402
from magister.examples.minigrid_rm import reward_machines as R  # noqa: E402
from magister.examples.minigrid_rm.problem import Problem  # noqa: E402

_pre = jax.jit(M.edit_preconditions, static_argnums=3)
_apply = jax.jit(M.apply_edit)
NAMES = M.EDIT_NAMES


def _info(p: Problem, u: int = 1, valid: bool = True, grid: E.GridState | None = None) -> M.HindsightInfo:
    return M.HindsightInfo(jnp.int32(u), E.GridState.from_level(p.level) if grid is None else grid,
                           jnp.bool_(valid))


_DEFAULT = M.MutationConfig()


def _ok(p: Problem, info: M.HindsightInfo, first: bool = True, cfg: M.MutationConfig = _DEFAULT) -> set[str]:
    mask = np.asarray(_pre(p, info, jnp.bool_(first), cfg))
    return {NAMES[i] for i in np.flatnonzero(mask)}


def _edit(p: Problem, name: str, seed: int = 0, info: M.HindsightInfo | None = None) -> Problem:
    return _apply(jax.random.PRNGKey(seed), p, _info(p) if info is None else info,
                  jnp.int32(NAMES.index(name)))


def _objects(level: E.Level) -> list[tuple[int, int]]:
    t, c = np.asarray(level.tiles), np.asarray(level.colours)
    return sorted((int(t[r, cc]), int(c[r, cc])) for r, cc in zip(*np.nonzero(np.isin(t, E.MOVABLE_TILES))))


def _props(rm: R.RewardMachine) -> list[int]:
    return R.rm_props(rm).tolist()


ONE = Problem(E.build_level(1, (3, 3), 0, objects=[(2, 2, "ball", "red")]),
              R.sequential_rm(["front_ball", "carrying_ball"]))


def test_preconditions_one_room() -> None:
    assert _ok(ONE, _info(ONE)) == set(NAMES) - {"remove_rooms", "remove_object", "replace_door"}
    assert not {"extract_preceding", "extract_succeeding"} & _ok(ONE, _info(ONE), first=False)
    assert not {"extract_preceding", "extract_succeeding"} & _ok(ONE, _info(ONE, u=0))
    assert not {"extract_preceding", "extract_succeeding"} & _ok(ONE, _info(ONE, u=2))  # accepting
    assert not {"extract_preceding", "extract_succeeding"} & _ok(ONE, _info(ONE, valid=False))
    one_state = ONE._replace(rm=R.sequential_rm(["front_ball"]))
    assert "remove_state" not in _ok(one_state, _info(one_state))
    six_states = ONE._replace(rm=R.sequential_rm(["front_ball"] * 5))
    assert "add_state" not in _ok(six_states, _info(six_states))
    no_obj = ONE._replace(level=E.build_level(1, (3, 3)))
    assert not {"move_object", "replace_nondoor", "remove_object"} & _ok(no_obj, _info(no_obj))
    full = ONE._replace(level=E.build_level(1, (3, 3), objects=[(1, i, "key", "red") for i in range(1, 6)]))
    assert "add_object" not in _ok(full, _info(full)) and "remove_object" in _ok(full, _info(full))
    cfg = M.MutationConfig(level_edits=False, hindsight_edits=False)
    assert _ok(ONE, _info(ONE), cfg=cfg) == {"switch_proposition", "add_state", "remove_state"}
    with pytest.raises(ValueError):
        M.MutationConfig(level_edits=False, task_edits=False)


def test_preconditions_six_rooms() -> None:
    p = Problem(E.build_level(6, (3, 9), 0), R.sequential_rm(["front_ball"]))  # agent in the centre column
    ok = _ok(p, _info(p))
    assert "add_rooms" not in ok and {"remove_rooms", "replace_door"} <= ok
    on_door = Problem(E.build_level(2, (3, 6), 0, doors=[("open", "red")]), p.rm)
    assert not {"remove_rooms", "replace_door"} & _ok(on_door, _info(on_door))  # agent on the only door


def test_add_rooms_1_to_2() -> None:
    shifts = set()
    for seed in range(8):
        c = _edit(ONE, "add_rooms", seed).level
        assert int(c.n_rooms) == 2
        t = np.asarray(c.tiles)
        assert t[3, 6] in E.DOOR_TILES and (t == E.FLOOR).sum() == 50 - 1  # 2 rooms minus the ball
        dc = int(c.agent_pos[1]) - 3
        shifts.add(dc)
        assert int(t[2, 2 + dc]) == E.BALL and _objects(c) == _objects(ONE.level)
    assert shifts == {0, 6}


def test_add_rooms_2_to_4_and_4_to_6() -> None:
    p = Problem(E.build_level(2, (3, 9), 1, doors=[("locked", "blue")], objects=[(1, 1, "key", "blue")]),
                ONE.rm)
    c = _edit(p, "add_rooms", 0).level
    assert int(c.n_rooms) == 4
    dr = int(c.agent_pos[0]) - 3
    assert dr in (0, 6) and int(c.tiles[3 + dr, 6]) == E.DOOR_LOCKED and int(c.colours[3 + dr, 6]) == 2
    assert int(c.tiles[1 + dr, 1]) == E.KEY
    assert sum(int(c.tiles[r, cc]) in E.DOOR_TILES for r, cc in E.door_cells(4)) == 4
    c6 = _edit(Problem(c, p.rm), "add_rooms", 3).level
    assert int(c6.n_rooms) == 6
    assert sum(int(c6.tiles[r, cc]) in E.DOOR_TILES for r, cc in E.door_cells(6)) == 7
    assert _objects(c6) == _objects(p.level)


def test_remove_rooms() -> None:
    lvl = E.build_level(2, (3, 2), 0, objects=[(1, 1, "ball", "red"), (1, 10, "key", "green")])
    c = _edit(Problem(lvl, ONE.rm), "remove_rooms").level
    assert int(c.n_rooms) == 1 and c.agent_pos.tolist() == [3, 2] and _objects(c) == [(E.BALL, 0)]
    assert np.array_equal(np.asarray(c.tiles)[:7, :7] != E.WALL, E.wall_template(1)[:7, :7] != E.WALL)
    assert np.all(np.asarray(c.tiles)[:, 7:] == E.WALL)
    right = lvl._replace(agent_pos=jnp.array([3, 9]))
    c = _edit(Problem(right, ONE.rm), "remove_rooms").level
    assert int(c.n_rooms) == 1 and c.agent_pos.tolist() == [3, 3] and _objects(c) == [(E.KEY, 1)]
    four = E.build_level(4, (9, 2), 0, objects=[(1, 1, "ball", "red"), (10, 10, "key", "green")])
    c = _edit(Problem(four, ONE.rm), "remove_rooms").level
    assert int(c.n_rooms) == 2 and c.agent_pos.tolist() == [3, 2] and _objects(c) == [(E.KEY, 1)]
    six = E.build_level(6, (3, 9), 0)  # centre column: either side may go
    cols = {int(_edit(Problem(six, ONE.rm), "remove_rooms", s).level.agent_pos[1]) for s in range(10)}
    assert cols == {3, 9}


def test_object_edits() -> None:
    lvl = E.build_level(1, (3, 3), 0, objects=[(2, 2, "ball", "red"), (4, 4, "key", "blue")])
    p = Problem(lvl, ONE.rm)
    c = _edit(p, "add_object").level
    assert len(_objects(c)) == 3 and set(_objects(lvl)) <= set(_objects(c))
    assert c.agent_pos.tolist() == [3, 3]
    c = _edit(p, "remove_object").level
    assert len(_objects(c)) == 1 and set(_objects(c)) <= set(_objects(lvl))
    c = _edit(p, "move_object").level
    assert _objects(c) == _objects(lvl) and not np.array_equal(np.asarray(c.tiles), np.asarray(lvl.tiles))
    c = _edit(p, "replace_nondoor", 3).level
    t0, t1 = np.asarray(lvl.tiles), np.asarray(c.tiles)
    assert np.array_equal(np.isin(t0, E.MOVABLE_TILES), np.isin(t1, E.MOVABLE_TILES))
    c = _edit(p, "move_agent", 1).level
    assert np.array_equal(np.asarray(c.tiles), t0) and int(t0[tuple(c.agent_pos.tolist())]) == E.FLOOR


def test_replace_door() -> None:
    lvl = E.build_level(4, (3, 6), 0, doors=[("open", "red")] * 4)  # agent stands on door (3, 6)
    seen = set()
    for s in range(12):
        c = _edit(Problem(lvl, ONE.rm), "replace_door", s).level
        t, col = np.asarray(c.tiles), np.asarray(c.colours)
        assert t[3, 6] == E.DOOR_OPEN and col[3, 6] == 0
        changed = [rc for rc in E.door_cells(4) if (t[rc], col[rc]) != (E.DOOR_OPEN, 0)]
        assert len(changed) <= 1 and all(t[rc] in E.DOOR_TILES for rc in E.door_cells(4))
        seen.update(changed)
    assert seen and (3, 6) not in seen


def test_task_edits() -> None:
    rm = R.sequential_rm(["front_ball", "carrying_ball", "front_key", "front_door"])
    old = _props(rm)
    p = Problem(ONE.level, rm)
    for s in range(6):
        new = _props(_edit(p, "switch_proposition", s).rm)
        assert len(new) == 4 and sum(a != b for a, b in zip(old, new)) <= 1
        added = _edit(p, "add_state", s).rm
        a = _props(added)
        assert len(a) == 5 and int(added.n_states) == 6 and int(added.accepting) == 5
        assert any(a[:j] + a[j + 1:] == old for j in range(5))  # one proposition inserted
        removed = _edit(p, "remove_state", s).rm
        r = _props(removed)
        assert len(r) == 3 and any(old[:j] + old[j + 1:] == r for j in range(4))
    # start, middle and end insertions all occur: the old propositions keep their order around the new one
    two = Problem(ONE.level, R.sequential_rm(["front_ball", "front_key"]))
    old2 = _props(two.rm)
    where = set()
    for s in range(24):
        a = _props(_edit(two, "add_state", s).rm)
        where.update(j for j in range(3) if a[:j] + a[j + 1:] == old2)
    assert where == {0, 1, 2}


def test_hindsight_edits() -> None:
    rm = R.sequential_rm(["front_ball", "carrying_ball", "front_key", "front_door"])
    p = Problem(ONE.level, rm)
    final = E.GridState.from_level(ONE.level)._replace(
        tiles=ONE.level.tiles.at[2, 2].set(E.FLOOR), agent_pos=jnp.array([1, 1]), agent_dir=jnp.int32(2),
        carry=jnp.array([E.BALL, 0]))
    info = _info(p, u=2, grid=final)
    pre = _edit(p, "extract_preceding", info=info)
    assert _props(pre.rm) == _props(rm)[:2] and int(pre.rm.accepting) == 2
    assert np.array_equal(np.asarray(pre.level.tiles), np.asarray(ONE.level.tiles))
    suc = _edit(p, "extract_succeeding", info=info)
    assert _props(suc.rm) == _props(rm)[2:] and int(suc.rm.initial) == 0
    assert suc.level.agent_pos.tolist() == [1, 1] and suc.level.carry.tolist() == [E.BALL, 0]
    assert int(suc.level.tiles[2, 2]) == E.FLOOR and int(suc.level.n_rooms) == 1


def test_mutate_sequences() -> None:
    from magister.examples.minigrid_rm.probes import probe_problems

    seq = [p for p in probe_problems().values() if bool(R.is_sequential(p.rm))]
    b = 8 * len(seq)
    ps = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs * 8), *seq)
    info = M.HindsightInfo(jnp.ones(b, jnp.int32), jax.vmap(E.GridState.from_level)(ps.level),
                           jnp.ones(b, bool))
    f = jax.jit(jax.vmap(lambda k, p, i: M.mutate(k, p, i, 3, 5)))
    child, n, counts = f(jax.random.split(jax.random.PRNGKey(1), b), ps, info)
    n, counts = np.asarray(n), np.asarray(counts)
    assert n.min() >= 3 and n.max() <= 5
    assert np.array_equal(counts.sum(axis=1), n)  # a level or task edit always applies
    assert counts[:, 11:].sum(axis=1).max() <= 1  # hindsight: first edit only
    assert bool(jax.vmap(R.is_sequential)(child.rm).all()) and int(child.rm.n_states.max()) <= 6
    tiles, pos = np.asarray(child.level.tiles), np.asarray(child.level.agent_pos)
    assert np.all(np.isin(tiles[np.arange(b), pos[:, 0], pos[:, 1]], (E.FLOOR, E.DOOR_OPEN)))
    for i in range(b):
        n_rooms = int(child.level.n_rooms[i])
        h, w = E.level_shape(n_rooms)
        t = tiles[i]
        assert np.all(t[h:, :] == E.WALL) and np.all(t[:, w:] == E.WALL)
        assert np.all(t[0, :] == E.WALL) and np.all(t[:, 0] == E.WALL)
        assert all(t[rc] in E.DOOR_TILES for rc in E.door_cells(n_rooms))


def test_task_edits_need_a_sequential_rm() -> None:
    branching = R.rm_from_edges(3, [(0, 2, ["front_ball"]), (0, 1, ["front_key"]), (1, 2, ["carrying_key"])])
    p = Problem(ONE.level, branching)
    ok = _ok(p, _info(p))
    assert not {"switch_proposition", "add_state", "remove_state", "extract_preceding",
                "extract_succeeding"} & ok
    assert "add_object" in ok
