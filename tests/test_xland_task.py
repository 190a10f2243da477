"""The XLand task space: wire form, held-out test/validation sets, split, mutation; and module doctests."""

from __future__ import annotations

import doctest
import importlib

import msgpack
import numpy as np
import pytest

from magister.examples.xland.coplayers import LEARNER, NOOP, RANDOM, SEEKER
from magister.examples.xland.env import XLandTask
from magister.examples.xland.game import (
    FLOOR_COLOURS,
    PROBE_GAMES,
    game_hash,
    is_player_centric,
    recolour_game,
)
from magister.examples.xland.task import (
    FixedXLandTasks,
    XLandTaskSpace,
    probe_tasks,
    task_features,
    world_hash,
)
from magister.examples.xland.world import condition_world, generate_world
from magister.task_spaces.base import task_key


def _wire(x):
    return msgpack.unpackb(msgpack.packb(x))


def test_encoded_tasks_are_small_ints_and_survive_msgpack():
    space = XLandTaskSpace(seed=0)
    for enc in space.sample_encoded(5):
        back = _wire(enc)
        assert task_key(back) == task_key(enc)
        assert space.decode(back).encode() == enc
        flat = str(enc).replace("(", "").replace(")", "").replace(",", " ").split()
        assert all(int(x) == float(x) for x in flat)  # ints only
    with pytest.raises(ValueError, match="not an encoded task"):
        space.decode((1, 2))


def test_samples_are_valid_tasks_with_a_learner_in_slot_0():
    space = XLandTaskSpace(coplayer_ids=(NOOP, SEEKER), three_player_prob=0.5, seed=1)
    seen_three = False
    for _ in range(20):
        t = space.sample()
        assert t.coplayers[0] == LEARNER and set(t.coplayers[1:]) <= {NOOP, SEEKER}
        assert t.world.entities_reachable() and 7 <= t.world.size <= 11
        assert set(t.game.objects) <= {k for k, _, _ in t.world.objects}
        seen_three |= t.game.n_players == 3
    assert seen_three


def test_same_seed_same_tasks():
    a, b = XLandTaskSpace(seed=3), XLandTaskSpace(seed=3)
    assert a.sample_encoded(3) == b.sample_encoded(3)
    rng1, rng2 = np.random.default_rng(9), np.random.default_rng(9)
    assert a.sample_encoded(2, rng=rng1) == b.sample_encoded(2, rng=rng2)


def test_probe_games_are_held_out_by_default():
    space = XLandTaskSpace()
    assert {game_hash(g) for g in PROBE_GAMES.values()} <= space.heldout_game_hashes
    assert not XLandTaskSpace(hold_out_probe_games=False).heldout_game_hashes
    rng = np.random.default_rng(0)
    g = recolour_game(PROBE_GAMES["xrps"], (2, 0, 1))  # a recolouring is held out too
    w = condition_world(generate_world(rng, 7), g, rng)
    assert space.is_heldout(XLandTask(w, g, (LEARNER, NOOP)))


def test_evaluation_sets_are_disjoint_and_never_sampled_for_training():
    space = XLandTaskSpace(seed=0)
    test, val = space.make_evaluation_sets(4, 4, seed=1)
    assert len(test) == len(val) == 4
    tg, vg = {game_hash(t.game) for t in test}, {game_hash(t.game) for t in val}
    assert not tg & vg
    assert all(set(t.coplayers[1:]) <= {NOOP, RANDOM, SEEKER} for t in test + val)
    assert all(space.is_heldout(t) for t in test + val)
    for t in space.sample_encoded(30):
        task = space.decode(t)
        assert game_hash(task.game) not in tg | vg
        assert world_hash(task.world) not in space.heldout_world_hashes


def test_rejection_counts_held_out_draws():
    space = XLandTaskSpace(seed=5)
    first = XLandTaskSpace(seed=5).sample()
    space.hold_out(games=[first.game])
    t = space.sample()
    assert game_hash(t.game) != game_hash(first.game) and space.rejected >= 1


def test_split_returns_training_space_and_fixed_heldout_space():
    space = XLandTaskSpace(seed=0)
    train, held = space.split(3, seed=2)
    assert isinstance(held, FixedXLandTasks) and held.num_tasks == 3 and held.indexed
    assert held.encoded_tasks == [0, 1, 2]
    assert all(train.is_heldout(t) for t in held.tasks)
    assert not any(space.is_heldout(t) for t in held.tasks)  # the original space is unchanged
    with pytest.raises(ValueError, match="holdout"):
        space.split(0.5)


def test_fixed_tasks_space():
    space = XLandTaskSpace(seed=0)
    tasks = [space.sample() for _ in range(3)]
    fixed = FixedXLandTasks(tasks)
    assert [fixed.decode(fixed.encode(t)) for t in tasks] == tasks
    assert fixed.contains(tasks[0]) and not fixed.contains(space.sample())
    with pytest.raises(ValueError):
        fixed.decode(3)
    with pytest.raises(ValueError):
        FixedXLandTasks([])


def test_mutation_is_small_and_avoids_held_out_tasks():
    space = XLandTaskSpace(seed=0)
    rng = np.random.default_rng(0)
    enc = space.sample_encoded(1)[0]
    changed = 0
    for _ in range(20):
        new = space.mutate(enc, rng)
        t0, t1 = space.decode(enc), space.decode(new)
        assert not space.is_heldout(t1)
        parts = [t0.world != t1.world, t0.game != t1.game, t0.coplayers != t1.coplayers]
        assert sum(parts) <= 2  # a game edit may recondition the world; never all three
        changed += any(parts)
        enc = new
    assert changed >= 15 and space.can_mutate


def test_player_centric_space_samples_mutates_and_holds_out_player_centric_games():
    space = XLandTaskSpace(seed=0, player_centric=True, max_options=2, max_literals=2, three_player_prob=0.3)
    test, val = space.make_evaluation_sets(6, 4, seed=1)
    tasks = [space.sample() for _ in range(12)] + test + val
    assert all(is_player_centric(g) for t in tasks for g in t.game.goals)
    rng = np.random.default_rng(0)
    enc = space.sample_encoded(1)[0]
    edited = 0
    for _ in range(30):
        new = space.mutate(enc, rng)
        edited += space.decode(new).game != space.decode(enc).game
        assert all(is_player_centric(g) for g in space.decode(new).game.goals)
        enc = new
    assert edited >= 3  # game edits happen (1/4 of mutations), and keep the goals player-centric
    # the default space is the paper's sampler: some of its goals are about the world only
    plain = XLandTaskSpace(seed=0, max_options=1, max_literals=2)
    assert not all(is_player_centric(g) for _ in range(30) for g in plain.sample().game.goals)


def test_bad_space_arguments():
    with pytest.raises(ValueError, match="co-player id"):
        XLandTaskSpace(coplayer_ids=(-7,))
    with pytest.raises(ValueError, match="three_player_prob"):
        XLandTaskSpace(three_player_prob=2.0)
    with pytest.raises(ValueError, match="world_sizes"):
        XLandTaskSpace(world_sizes=(7, 12))


@pytest.mark.parametrize("module", ["game", "world", "env", "task", "coplayers", "oracle_filter"])
def test_module_doctests(module):
    mod = importlib.import_module(f"magister.examples.xland.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_probe_tasks():
    fixed = probe_tasks(coplayer=NOOP, seed=1)
    assert fixed.num_tasks == len(PROBE_GAMES)
    for task, (name, game) in zip(fixed.tasks, PROBE_GAMES.items()):
        assert task.game == game and task.coplayers == (LEARNER,) + (NOOP,) * (game.n_players - 1)
        assert set(game.floors) <= set(task.world.floor_map[task.world.playable_area].tolist())
        if name == "king_of_the_hill":
            w = task.world
            white = w.floor_map == FLOOR_COLOURS.index("white")
            assert (w.height_map[white] == w.height_map[w.playable_area].max()).all()
    with pytest.raises(KeyError, match="unknown probe"):
        probe_tasks(names=["tic_tac_toe"])


def test_task_features_by_hand():
    from magister.examples.xland.world import flat_world

    g = PROBE_GAMES["simple_navigation"]  # hold(me, yellow sphere) / near(me, yellow pyramid)
    w = flat_world(3, [(0, 0, 1, 0), (2, 2, 3, 0)], objects=[(7, 0, 2), (8, 1, 1)])
    task = XLandTask(w, g, (LEARNER, NOOP))
    f0, f1 = task_features(task, 0), task_features(task, 1)
    assert f0["initial_atom_changes"] == 1.0 and f1["initial_atom_changes"] == 0.0  # p1 starts near it
    assert f0["exploration_difficulty"] == 0.25 and f0["n_players"] == 2.0 and f0["n_options"] == 1.0
    assert f0["path_entropy"] == pytest.approx(np.log(1296 / 408))
    with pytest.raises(ValueError, match="player"):
        task_features(task, 2)


def test_alike_games_keep_the_measures():
    from magister.examples.xland.game import alike_game, game_measures

    rng = np.random.default_rng(0)
    g = PROBE_GAMES["xrps"]
    h = alike_game(g, rng)
    assert h is not None and h != g and game_hash(h) == game_hash(g)
    assert game_measures(h) == game_measures(g)
    assert alike_game(PROBE_GAMES["hide_and_seek"], rng) is None


def test_smaller_games_for_cpu_scale():
    space = XLandTaskSpace(seed=0, max_options=1, max_literals=2, three_player_prob=0.0)
    sizes = {(len(g.options), len(o)) for t in (space.sample() for _ in range(40))
             for g in t.game.goals for o in g.options}
    assert {n for n, _ in sizes} == {1}  # one option per goal (two players: no mixing of options)
    assert {k for _, k in sizes} == {1, 2}
    evaluation, _ = space.make_evaluation_sets(10, 0, seed=1)
    assert all(len(g.options) == 1 for t in evaluation for g in t.game.goals)
    for bad in ({"max_options": 0}, {"max_literals": 4}, {"max_options": 1.5}):
        with pytest.raises(ValueError, match="must be an int in"):
            XLandTaskSpace(**bad)


def _tiles_changed(a, b):
    """Tiles whose height or ramp differ (conditioning on a game never changes those)."""
    return sum(x != y for x, y in zip(a.heights, b.heights)) + sum(x != y for x, y in zip(a.ramps, b.ramps))


def test_world_variants_keep_game_and_coplayers_and_are_drawn_from_the_rng():
    from magister.examples.xland.world import mutate_world

    space = XLandTaskSpace(seed=0, world_sizes=(7, 7), max_options=1, max_literals=2, player_centric=True)
    enc = space.sample_encoded(1)[0]
    task = space.decode(enc)
    for mode in ("mutate", "fresh"):
        variants = [space.decode(space.world_variant(enc, np.random.default_rng(s), mode)) for s in range(8)]
        assert all(v.game == task.game and v.coplayers == task.coplayers for v in variants)
        assert all(v.world.size == 7 and v.world.entities_reachable() for v in variants)
        assert all(set(task.game.objects) <= {k for k, _, _ in v.world.objects} for v in variants)
        assert len({v.world for v in variants} | {task.world}) == 9  # eight new worlds
        again = space.decode(space.world_variant(_wire(enc), np.random.default_rng(3), mode))
        assert again == variants[3]  # a variant is a function of the task and the generator's state
    # mutate = k edits of the task's world, then conditioned on the game (by hand, same generator)
    rng = np.random.default_rng(5)
    world = task.world
    for _ in range(2):
        world = mutate_world(world, rng)
    by_hand = XLandTask(condition_world(world, task.game, rng), task.game, task.coplayers)
    assert space.world_variant(enc, np.random.default_rng(5), "mutate", mutations=2) == by_hand.encode()
    # a height or ramp edit touches one tile: k edits change at most k tiles' heights and ramps
    for k in (1, 4):
        for s in range(10):
            v = space.decode(space.world_variant(enc, np.random.default_rng(s), "mutate", mutations=k))
            assert _tiles_changed(task.world, v.world) <= k
    fresh = [space.decode(space.world_variant(enc, np.random.default_rng(s), "fresh")) for s in range(10)]
    assert np.mean([_tiles_changed(task.world, v.world) for v in fresh]) > 10  # a new world, not an edit


def test_world_variants_are_never_held_out():
    space = XLandTaskSpace(seed=1, world_sizes=(7, 7), max_options=1, max_literals=2, player_centric=True)
    enc = space.sample_encoded(1)[0]
    for mode in ("mutate", "fresh"):
        first = space.world_variant(enc, np.random.default_rng(0), mode)
        space.hold_out(worlds=[space.decode(first).world])  # the variant seed 0 would draw is now held out
        rejected = space.rejected
        second = space.world_variant(enc, np.random.default_rng(0), mode)
        assert second != first and not space.is_heldout(space.decode(second))
        assert space.rejected == rejected + 1  # exactly one draw refused
    with pytest.raises(ValueError, match="mode"):
        space.world_variant(enc, np.random.default_rng(0), "same")
    with pytest.raises(ValueError, match="mutations"):
        space.world_variant(enc, np.random.default_rng(0), "mutate", mutations=0)
    space.hold_out(games=[space.decode(enc).game])
    with pytest.raises(ValueError, match="held-out game"):
        space.world_variant(enc, np.random.default_rng(0))
