"""XLand worlds: topology rules, playable area, generation, mutation and conditioning on a game."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister.examples.xland.game import PROBE_GAMES, Game
from magister.examples.xland.world import (
    World,
    can_move,
    condition_world,
    flat_world,
    generate_world,
    mutate_world,
    path_entropy,
    path_length_distribution,
    shortest_paths,
)

N, E, S, W = range(4)


def world_from(heights, ramps=None, players=((0, 0, 0, 0),), objects=()):
    h = np.asarray(heights)
    n = h.shape[0]
    rp = np.full((n, n), -1) if ramps is None else np.asarray(ramps)
    return World(n, tuple(h.ravel().tolist()), tuple(rp.ravel().tolist()), (0,) * (n * n),
                 tuple(objects), tuple(players))


def test_move_rules_drop_down_climb_only_by_ramp():
    h = np.array([[0, 1, 2], [0, 0, 0], [0, 0, 0]])
    rp = np.full((3, 3), -1)
    rp[0, 0] = E  # a ramp on (0, 0) climbing east onto the height-1 tile
    assert can_move(h, rp, 0, 0, E)  # climb one level by the ramp
    assert not can_move(h, rp, 1, 1, N)  # no ramp: cannot climb onto (0, 1)
    assert can_move(h, rp, 0, 1, W) and can_move(h, rp, 0, 1, S)  # drop down / same level
    assert not can_move(h, rp, 0, 1, E)  # one level up without a ramp
    rp[0, 1] = E
    assert can_move(h, rp, 0, 1, E)  # ... and with one
    assert not can_move(np.array([[0, 2]]), np.array([[E, -1]]), 0, 0, E)  # a ramp climbs one level only
    assert not can_move(h, np.full((3, 3), S), 1, 1, N)  # a ramp facing elsewhere does not help
    assert not can_move(h, rp, 0, 0, N)  # off the grid


def test_playable_area_excludes_unreturnable_tiles():
    # a 2-level plateau on the left column without ramps: players can drop off it but never climb back
    h = np.zeros((5, 5), dtype=int)
    h[:, 0] = 1
    w = world_from(h, players=((0, 2, 0, 0),))
    area = w.playable_area
    assert not area[:, 0].any() and area[:, 1:].all()
    # a ramp from (2, 1) west onto the plateau joins it to the rest
    rp = np.full((5, 5), -1)
    rp[2, 1] = W
    assert world_from(h, rp, players=((0, 2, 0, 0),)).playable_area.all()


def test_shortest_paths_follow_the_graph():
    h = np.zeros((3, 3), dtype=int)
    h[1, :2] = 1  # a wall on the middle row, left two tiles
    w = world_from(h, players=((0, 0, 0, 0),))
    d = shortest_paths(w, (0, 0))
    assert d[2, 0] == 6  # round the wall: (0,0)->(0,1)->(0,2)->(1,2)->(2,2)->(2,1)->(2,0)
    assert d[1, 0] == -1  # cannot climb onto the wall


def test_world_validation():
    with pytest.raises(ValueError, match="size"):
        flat_world(12, [(0, 0, 0, 0)])
    with pytest.raises(ValueError, match="distinct tiles"):
        flat_world(5, [(0, 0, 0, 0), (0, 0, 1, 0)])
    with pytest.raises(ValueError, match="distinct kinds"):
        flat_world(5, [(0, 0, 0, 0)], objects=[(1, 0, 0), (1, 2, 2)])
    with pytest.raises(ValueError, match="1 to 3 players"):
        flat_world(5, [])
    with pytest.raises(ValueError, match="heights"):
        World(3, (0,) * 8, (-1,) * 9, (0,) * 9, (), ((0, 0, 0, 0),))
    with pytest.raises(ValueError, match="object kind"):
        flat_world(5, [(0, 0, 0, 0)], objects=[(12, 0, 0)])


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1), size=st.integers(7, 11), n_players=st.integers(1, 3))
def test_generated_worlds_are_valid_and_deterministic(seed, size, n_players):
    w = generate_world(np.random.default_rng(seed), size, n_players=n_players)
    assert w.size == size and w.n_players == n_players
    assert w.playable_area.mean() >= 0.5
    assert w.entities_reachable()
    assert generate_world(np.random.default_rng(seed), size, n_players=n_players) == w
    wire = msgpack.unpackb(msgpack.packb(w.encode()))
    assert World.decode(wire) == w


def test_generator_falls_back_to_flat():
    w = generate_world(np.random.default_rng(0), 7, min_area=1.0, ramp_prob=0.0, max_tries=1)
    assert w.height_map.max() == 0 or w.playable_area.all()


def _diff(a: World, b: World) -> int:
    tiles = sum(int(x != y) for f in ("heights", "ramps", "floors")
                for x, y in zip(getattr(a, f), getattr(b, f)))
    ents = sum(int(x != y) for x, y in zip(a.objects, b.objects)) + sum(
        int(x != y) for x, y in zip(a.players, b.players))
    return tiles + ents


@settings(max_examples=20)
@given(seed=st.integers(0, 2**31 - 1))
def test_mutation_is_local_and_keeps_the_world_valid(seed):
    rng = np.random.default_rng(seed)
    w = generate_world(rng, 9)
    for _ in range(5):
        m = mutate_world(w, rng)
        assert _diff(w, m) <= 1  # one tile or one entity changed
        assert m.playable_area.mean() >= 0.5 and m.entities_reachable()
        w = m


def test_mutation_changes_the_world_usually():
    rng = np.random.default_rng(0)
    w = generate_world(rng, 9)
    changed = sum(mutate_world(w, rng) != w for _ in range(50))
    assert changed >= 45


@pytest.mark.parametrize("name", ["capture_the_cube", "xrps", "choose_wisely_3p", "king_of_the_hill"])
def test_condition_world_makes_the_game_playable(name):
    game: Game = PROBE_GAMES[name]
    rng = np.random.default_rng(1)
    w = condition_world(generate_world(rng, 7, n_players=2, objects=[]), game, rng)
    assert w.n_players == game.n_players
    assert set(game.objects) <= {k for k, _, _ in w.objects}
    assert set(game.floors) <= set(w.floor_map[w.playable_area].tolist())
    assert w.entities_reachable()


def test_condition_world_drops_extra_players():
    rng = np.random.default_rng(2)
    w = generate_world(rng, 8, n_players=3)
    c = condition_world(w, PROBE_GAMES["hide_and_seek"], rng)
    assert c.players == w.players[:2]


def test_path_length_distribution_and_entropy_by_hand():
    w = flat_world(3, [(0, 0, 0, 0)])
    # unordered pairs of a 3 x 3 grid by Manhattan distance: 12 at 1, 14 at 2, 8 at 3, 2 at 4 (x2 ordered)
    assert path_length_distribution(w).tolist() == [0, 24, 28, 16, 4]
    assert path_entropy(w) == pytest.approx(np.log(1296 / 408))
    h = np.zeros((3, 3), dtype=int)
    h[1, :] = 1  # a wall across the middle row: the playable area is the bottom row only
    walled = World(3, tuple(h.ravel().tolist()), (-1,) * 9, (0,) * 9, (), ((2, 0, 0, 0),))
    assert path_length_distribution(walled).tolist() == [0, 4, 2]  # 2 x (2 pairs at 1, 1 at 2)
