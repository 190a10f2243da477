"""The XLand-style PettingZoo env: API conformance, relations on hand-built states, gadgets, co-players."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test, parallel_seed_test

from magister.examples.xland.coplayers import LEARNER, NOOP, RANDOM, SEEKER
from magister.examples.xland.env import XLandEnv, XLandTask, XLandTaskWrapper, play_episode
from magister.examples.xland.game import (
    FLOOR0,
    HOLD,
    NEAR,
    ON,
    PLAYER0,
    PROBE_GAMES,
    SEE,
    Game,
    feasible_states,
    reward_table,
)
from magister.examples.xland.task import XLandTaskSpace
from magister.examples.xland.world import World, condition_world, generate_world
from magister.opponents import OpponentStore

P0, P1 = PLAYER0, PLAYER0 + 1
YS, YP, BC = 7, 8, 0  # yellow sphere, yellow pyramid, black cube
NOOP_A, FORWARD, LEFT, RIGHT, GRAB, GADGET = range(6)
N, E, S, W = range(4)


def make_world(players, objects=(), heights=None, floors=None, size=7):
    n = size * size
    h = (0,) * n if heights is None else tuple(np.asarray(heights).ravel().tolist())
    f = (0,) * n if floors is None else tuple(np.asarray(floors).ravel().tolist())
    return World(size, h, (-1,) * n, f, tuple(objects), tuple(players))


def make_env(world, game=None, coplayers=None, **kw):
    game = game or PROBE_GAMES["simple_navigation"]
    cps = coplayers or (LEARNER,) * game.n_players
    env = XLandEnv(XLandTask(world, game, cps), **kw)
    env.reset(seed=0)
    return env


def step(env, **acts):
    return env.step({f"player_{k[1:]}": v for k, v in acts.items()})


# -- API conformance ------------------------------------------------------------------------------------
def test_parallel_api_with_random_tasks():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # 2-player games leave player_2 unused
        parallel_api_test(XLandEnv(seed=0, episode_length=30), num_cycles=100)


def test_parallel_api_with_coplayers_through_the_task_wrapper():
    rng = np.random.default_rng(0)
    g = PROBE_GAMES["choose_wisely_3p"]
    w = condition_world(generate_world(rng, 8, n_players=3), g, rng)
    task = XLandTask(w, g, (LEARNER, SEEKER, LEARNER))
    env = XLandTaskWrapper(XLandEnv(episode_length=30), XLandTaskSpace(seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        parallel_api_test(env, num_cycles=50)  # on tasks drawn from the space
        env.reset(options={"task": task})
        parallel_api_test(env, num_cycles=50)  # the task is kept across resets
    obs, infos = env.reset(seed=1)
    assert set(obs) == {"player_0", "player_2"} and infos["player_2"]["player_index"] == 2


def test_parallel_seed_determinism():
    parallel_seed_test(lambda: XLandEnv(episode_length=40), num_cycles=50)


def test_seeded_episodes_with_random_coplayers_repeat():
    rng = np.random.default_rng(4)
    g = PROBE_GAMES["king_of_the_hill"]
    w = condition_world(generate_world(rng, 9), g, rng)
    returns = []
    for _ in range(2):
        env = XLandEnv(XLandTask(w, g, (LEARNER, RANDOM)), episode_length=50)
        returns.append(play_episode(env, seed=7))
    assert np.array_equal(returns[0], returns[1])


def test_fixed_length_no_termination():
    env = make_env(make_world([(0, 0, E, 0), (6, 6, W, 0)], [(YS, 3, 3), (YP, 4, 4)]), episode_length=5)
    for t in range(5):
        obs, rews, terms, truncs, infos = env.step({"player_0": NOOP_A, "player_1": NOOP_A})
        assert not any(terms.values())
        assert all(truncs.values()) == (t == 4)
    assert env.agents == [] and infos["player_0"]["episode_returns"] == (0.0, 0.0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


def test_observation_layout():
    env = make_env(make_world([(1, 2, E, 1), (4, 4, W, 0)], [(YS, 3, 3), (9, 0, 0)]))
    obs = env.observe(0)
    assert env.observation_space("player_0").contains(obs)
    g, v = obs["grid"], obs["vector"]
    assert g[0, :7, :7].all() and not g[0, 7:, :].any()
    assert g[12 + YS, 3, 3] == 1 and g[12 + 9, 0, 0] == 1  # object kinds (slab = kind 9)
    assert g[25, 1, 2] == 1 and g[26, 4, 4] == 1 and g[25].sum() == 1  # self / others
    assert v[2 + E] == 1 and v[6] == 1 and v[19 + 1] == 1  # facing east, holding nothing, tag gadget
    ids, mat = obs["goal_atoms"], obs["goal_matrix"]
    assert ids[0] >= 0 and (ids[1:] == -1).all() and mat[0, 0] == 1 and np.count_nonzero(mat) == 1


def test_bad_inputs():
    w = make_world([(0, 0, E, 0), (6, 6, W, 0)])
    env = make_env(w)
    with pytest.raises(ValueError, match="not in Discrete"):
        env.step({"player_0": 6})
    with pytest.raises(ValueError, match="LEARNER"):
        XLandTask(w, PROBE_GAMES["simple_navigation"], (NOOP, NOOP))
    with pytest.raises(ValueError, match="must agree"):
        XLandTask(w, PROBE_GAMES["choose_wisely_3p"], (LEARNER, NOOP, NOOP))
    with pytest.raises(ValueError, match="co-player id"):
        XLandTask(w, PROBE_GAMES["simple_navigation"], (LEARNER, -9))
    with pytest.raises(ValueError, match="opponent_dir"):
        make_env(w, coplayers=(LEARNER, 3))
    with pytest.raises(KeyError):
        env.observation_space("player_9")


# -- relations on hand-built states ---------------------------------------------------------------------
def test_near_on_and_hold():
    floors = np.zeros((7, 7), dtype=int)
    floors[3, 3] = 3  # a blue tile
    env = make_env(make_world([(3, 2, E, 0), (0, 6, S, 0)], [(YS, 3, 3), (YP, 5, 5)], floors=floors))
    assert env.relation(NEAR, YS, P0) and not env.relation(NEAR, YP, P0)
    assert env.relation(ON, YS, FLOOR0 + 3) and env.relation(ON, P0, FLOOR0 + 0)
    assert not env.relation(HOLD, P0, YS)
    _, rews, _, _, _ = step(env, p0=GRAB, p1=NOOP_A)  # grab the sphere in front
    assert env.relation(HOLD, P0, YS) and rews["player_0"] == 1.0
    assert not any(env.relation(ON, YS, FLOOR0 + f) for f in range(6))  # held: touches no floor
    step(env, p0=RIGHT, p1=NOOP_A)
    step(env, p0=FORWARD, p1=NOOP_A)  # carry it south to (4, 2)
    assert tuple(env.opos[0]) == (4, 2) and env.relation(HOLD, P0, YS)
    _, rews, _, _, _ = step(env, p0=GRAB, p1=NOOP_A)  # drop
    assert not env.relation(HOLD, P0, YS) and env.relation(ON, YS, FLOOR0 + 0) and rews["player_0"] == 0.0


def test_two_players_may_hold_one_object_and_drift_apart():
    env = make_env(make_world([(3, 2, E, 0), (2, 2, S, 0)], [(YS, 3, 3)]))
    step(env, p0=GRAB, p1=GRAB)  # p0 lifts the sphere onto its tile (3, 2), p1 grabs it there too
    assert env.relation(HOLD, P0, YS) and env.relation(HOLD, P1, YS) and env._pos(YS) == (3, 2)
    step(env, p0=LEFT, p1=NOOP_A)
    step(env, p0=LEFT, p1=NOOP_A)
    step(env, p0=FORWARD, p1=NOOP_A)  # p0, the carrier, walks west to (3, 1): still near p1
    assert env.relation(HOLD, P1, YS) and env._pos(YS) == (3, 1)
    step(env, p0=FORWARD, p1=NOOP_A)  # (3, 0): two tiles from p1, whose beam breaks
    assert env.relation(HOLD, P0, YS) and not env.relation(HOLD, P1, YS)


def test_see_cone_and_line_of_sight():
    heights = np.zeros((7, 7), dtype=int)
    env = make_env(make_world([(3, 1, E, 0), (0, 0, S, 0)], [(YS, 3, 5), (YP, 0, 1), (BC, 5, 4)],
                              heights=heights))
    assert env.relation(SEE, P0, YS)  # straight ahead
    assert env.relation(SEE, P0, BC)  # 3 ahead, 2 to the side: inside the 90 degree cone
    assert not env.relation(SEE, P0, YP)  # 3 to the side, 0 ahead: outside
    assert env.relation(SEE, YP, P0)  # objects see in every direction
    heights[3, 3] = 2  # a tall block between p0 and the sphere
    env = make_env(make_world([(3, 1, E, 0), (0, 0, S, 0)], [(YS, 3, 5)], heights=heights))
    assert not env.relation(SEE, P0, YS) and not env.relation(SEE, YS, P0)
    heights[3, 3] = 1  # a low block: eyes (height + 1) graze over it, a line down to an object does not
    env = make_env(make_world([(3, 1, E, 0), (3, 5, W, 0)], [(YS, 2, 5)], heights=heights))
    assert env.relation(SEE, P0, P1) and env.relation(SEE, P1, P0)
    # p0 -> sphere passes tile (3, 3) halfway, at height (1 + 0.5) / 2 = 0.75 < 1
    assert not env.relation(SEE, P0, YS) and not env.relation(SEE, YS, P0)


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1))
def test_see_is_symmetric_between_objects(seed):
    rng = np.random.default_rng(seed)
    w = generate_world(rng, 9, objects=list(range(9)))
    env = make_env(condition_world(w, PROBE_GAMES["simple_navigation"], rng))
    for a in range(9):
        for b in range(a + 1, 9):
            assert env._sees(a, env._pos(a), b, env._pos(b)) == env._sees(b, env._pos(b), a, env._pos(a))


def test_goal_reward_is_dnf_of_relations():
    g = Game.parse(["hold(me, yellow sphere) & not(near(opponent, yellow sphere)) | near(me, yellow pyramid)",
                    "near(me, yellow sphere)"])
    env = make_env(make_world([(3, 2, E, 0), (0, 6, S, 0)], [(YS, 3, 3), (YP, 6, 0)]), game=g)
    assert env.rewards_now.tolist() == [0.0, 0.0]
    _, rews, *_ = step(env, p0=GRAB, p1=NOOP_A)
    assert rews == {"player_0": 1.0, "player_1": 0.0}
    for a in (RIGHT, FORWARD, FORWARD, FORWARD, LEFT, FORWARD, FORWARD):  # p1 walks to (2, 3)
        _, rews, *_ = step(env, p0=NOOP_A, p1=a)
    assert env.relation(NEAR, P1, YS)
    assert rews == {"player_0": 0.0, "player_1": 1.0}


# -- gadgets --------------------------------------------------------------------------------------------
def test_tag_removes_a_player_and_returns_it_home():
    env = make_env(make_world([(3, 1, E, 1), (3, 3, W, 0)], [(YS, 3, 3)]), tag_steps=3)
    step(env, p0=NOOP_A, p1=GRAB)  # p1 picks up the sphere on its own tile
    step(env, p0=GADGET, p1=NOOP_A)
    assert env.premoved[1] == 3 and env._pos(P1) is None and not env.relation(NEAR, P0, P1)
    assert env.hold[1] == -1
    step(env, p0=RIGHT, p1=FORWARD)  # p1's actions are ignored while removed
    step(env, p0=NOOP_A, p1=NOOP_A)
    assert env._pos(P1) is None
    step(env, p0=NOOP_A, p1=NOOP_A)
    assert env._pos(P1) == (3, 3)


def test_tag_returns_an_object_to_its_initial_tile():
    env = make_env(make_world([(3, 1, E, 1), (6, 6, W, 0)], [(YS, 2, 2), (YP, 3, 3)]), tag_steps=2)
    env.opos[1] = (3, 4)  # the pyramid was moved meanwhile
    step(env, p0=GADGET, p1=NOOP_A)
    assert env._pos(YP) is None
    step(env, p0=NOOP_A, p1=NOOP_A)
    step(env, p0=NOOP_A, p1=NOOP_A)
    assert env._pos(YP) == (3, 3)


def test_freeze_pins_an_object():
    env = make_env(make_world([(3, 1, E, 0), (3, 3, W, 0)], [(YS, 3, 2)]), freeze_steps=2)
    step(env, p0=NOOP_A, p1=GRAB)
    assert env.relation(HOLD, P1, YS)
    step(env, p0=GADGET, p1=NOOP_A)  # freeze: p1 loses it and nobody can grab it
    assert not env.relation(HOLD, P1, YS) and env.ofrozen[0] == 2
    step(env, p0=GRAB, p1=GRAB)
    assert env.hold.tolist() == [-1, -1]
    step(env, p0=NOOP_A, p1=NOOP_A)
    step(env, p0=NOOP_A, p1=GRAB)  # thawed: p1 grabs it from its own tile
    assert env.relation(HOLD, P1, YS)


def test_blocking_and_topology_in_movement():
    heights = np.zeros((7, 7), dtype=int)
    heights[3, 3] = 1
    env = make_env(make_world([(3, 2, E, 0), (2, 2, S, 0)], heights=heights))
    step(env, p0=FORWARD, p1=FORWARD)  # p0 cannot climb; p1 is blocked by p0
    assert env._pos(P0) == (3, 2) and env._pos(P1) == (2, 2)


# -- co-players -----------------------------------------------------------------------------------------
def test_noop_coplayer_stands_still_and_is_not_an_agent():
    w = make_world([(0, 0, E, 0), (6, 6, W, 0)], [(YS, 3, 3), (YP, 5, 5)])
    env = make_env(w, coplayers=(LEARNER, NOOP))
    assert env.agents == ["player_0"]
    for _ in range(5):
        obs, *_ = env.step({"player_0": FORWARD})
    assert env._pos(P1) == (6, 6) and env.pdir[1] == W and set(obs) == {"player_0"}


@pytest.mark.parametrize("goal", ["hold(me, yellow sphere)", "near(me, black cube)",
                                  "on(yellow pyramid, blue floor)", "near(yellow sphere, black cube)"])
def test_goal_seeker_reaches_simple_goals(goal):
    floors = np.zeros((9, 9), dtype=int)
    floors[7:, 7:] = 3
    w = make_world([(0, 0, E, 0), (1, 8, S, 0)], [(YS, 5, 2), (YP, 2, 6), (BC, 8, 1)], floors=floors, size=9)
    g = Game.parse(["near(me, opponent)", goal])
    env = make_env(w, game=g, coplayers=(LEARNER, SEEKER), episode_length=60)
    returns = play_episode(env, policies=[lambda o: NOOP_A], seed=0)
    assert returns[1] >= 10  # satisfied for a good part of the episode


def test_snapshot_coplayer_from_the_opponent_store(tmp_path):
    store = OpponentStore(tmp_path, max_count=5, save_fn=lambda o, f: f.write(json.dumps(o).encode()),
                          load_fn=lambda f: json.loads(f.read()))
    sid = store.add({"action": LEFT})

    def make_agent(snapshot):
        return lambda obs: snapshot["action"]

    w = make_world([(0, 0, E, 0), (6, 6, N, 0)], [(YS, 3, 3)])
    env = XLandEnv(XLandTask(w, PROBE_GAMES["hide_and_seek"], (LEARNER, sid)), opponent_dir=str(tmp_path),
                   load_fn=lambda f: json.loads(f.read()), make_agent=make_agent)
    env.reset(seed=0)
    dirs = []
    for _ in range(4):
        env.step({"player_0": NOOP_A})
        dirs.append(int(env.pdir[1]))
    assert dirs == [W, S, E, N]  # turned left every step
    assert store.leases(sid) == 1
    env.close()
    assert store.leases(sid) == 0


def test_evicted_snapshot_falls_back_to_the_newest_only_when_asked(tmp_path):
    """A bounded store evicts snapshot 0 after the curriculum sampled it: without the fallback the env
    raises KeyError naming the eviction; with it, it plays the newest snapshot (here: always RIGHT)."""
    codec = dict(save_fn=lambda o, f: f.write(json.dumps(o).encode()), load_fn=lambda f: json.loads(f.read()))
    store = OpponentStore(tmp_path, max_count=2, **codec)
    old = store.add({"action": LEFT})
    store.add({"action": LEFT})
    newest = store.add({"action": RIGHT})  # evicts snapshot 0 (the oldest, not leased)
    assert old not in store and newest in store

    def make_agent(snapshot):
        return lambda obs: snapshot["action"]

    w = make_world([(0, 0, E, 0), (6, 6, N, 0)], [(YS, 3, 3)])
    task = XLandTask(w, PROBE_GAMES["hide_and_seek"], (LEARNER, old))
    kw = dict(opponent_dir=str(tmp_path), load_fn=codec["load_fn"], make_agent=make_agent)
    with pytest.raises(KeyError, match="evicted"):
        XLandEnv(task, **kw).reset(seed=0)
    env = XLandEnv(task, opponent_fallback=True, **kw)
    env.reset(seed=0)
    dirs = []
    for _ in range(3):
        env.step({"player_0": NOOP_A})
        dirs.append(int(env.pdir[1]))
    assert dirs == [E, S, W]  # turned right every step: the newest snapshot plays
    assert store.leases(newest) == 1 and store.leases(old) == 0
    env.close()
    assert store.leases(newest) == 0
    never = XLandTask(w, PROBE_GAMES["hide_and_seek"], (LEARNER, 99))  # never issued: no fallback
    with pytest.raises(KeyError):
        XLandEnv(never, opponent_fallback=True, **kw).reset(seed=0)


# -- the task wrapper -----------------------------------------------------------------------------------
def test_task_wrapper_switches_tasks_and_reports_progress():
    space = XLandTaskSpace(seed=0)
    env = XLandTaskWrapper(XLandEnv(episode_length=10), space)
    rng = np.random.default_rng(0)
    g = PROBE_GAMES["simple_cooperation"]
    w = condition_world(make_world([(0, 0, E, 0), (6, 6, W, 0)], [(YP, 3, 3), (YS, 3, 4)]), g, rng)
    task = XLandTask(w, g, (LEARNER, NOOP))
    obs, infos = env.reset(seed=0, options={"task": task})
    assert set(obs) == {"player_0"} and infos["player_0"]["task"] == task.encode()
    total = 0.0
    for t in range(10):
        _, rews, _, _, infos = env.step({"player_0": NOOP_A})
        total += rews["player_0"]
        assert infos["player_0"]["task_progress"] == pytest.approx(total / (t + 1))
    assert total == 10.0  # the pyramid and the sphere start near each other and nobody moves them
    obs, infos = env.reset()  # the task is kept
    assert infos["player_0"]["task"] == task.encode()


# -- the env and the game toolkit agree -----------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_every_visited_predicate_state_is_feasible(seed):
    """The feasibility constraints of the game measures hold in the env: every state of the game's ground
    atoms seen while playing is one of :func:`feasible_states`."""
    g = Game.parse([
        "hold(me, yellow sphere) & on(yellow sphere, blue floor)"
        " | near(me, black cube) & on(me, olive floor)",
        "hold(me, black cube) & not(hold(opponent, yellow sphere)) | on(black cube, olive floor)",
        "hold(me, yellow sphere) & near(yellow sphere, black cube) | on(me, blue floor)",
    ])
    rng = np.random.default_rng(seed)
    floors = rng.choice([1, 3], size=(5, 5))
    w = make_world([(0, 0, E, 1), (2, 2, S, 0), (4, 4, W, 1)], [(YS, 1, 1), (BC, 2, 3), (YP, 3, 3)],
                   floors=floors, size=5)
    env = make_env(w, game=g, coplayers=(LEARNER, RANDOM, SEEKER), episode_length=400)
    feasible = {tuple(r) for r in feasible_states(env.ground_atoms).tolist()}
    visited = set()
    while env.agents:
        env.step({"player_0": int(rng.integers(6))})
        state = tuple(env.atom_values().tolist())
        assert state in feasible
        visited.add(state)
    assert len(visited) >= 10  # the random play moved through many predicate states


@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_random_play_keeps_invariants_and_rewards_match_the_reward_table(seed):
    space = XLandTaskSpace(coplayer_ids=(RANDOM, SEEKER, LEARNER), three_player_prob=0.5, seed=seed)
    task = space.sample()
    env = XLandEnv(task, episode_length=60)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    atoms, states, table = reward_table(task.game)
    assert atoms == env.ground_atoms
    row = {tuple(s): k for k, s in enumerate(states.tolist())}
    area = task.world.playable_area
    while env.agents:
        _, rews, *_ = env.step({a: int(rng.integers(6)) for a in env.agents})
        present = env.premoved == 0
        tiles = [tuple(p) for p in env.ppos[present].tolist()]
        assert len(set(tiles)) == len(tiles) and all(area[t] for t in tiles)
        for i, o in enumerate(env.hold.tolist()):
            if o >= 0:
                assert np.abs(env.ppos[i] - env.opos[o]).max() <= 1
                assert tuple(env.opos[o]) == tuple(env.ppos[env.carrier[o]])
        k = row[tuple(env.atom_values().tolist())]
        assert env.rewards_now.tolist() == table[:, k].astype(float).tolist()
        for a, r in rews.items():
            assert r == table[int(a[-1]), k]


def test_learner_id_is_the_stores_current_agent_and_render():
    from magister.opponents import CURRENT_AGENT

    assert LEARNER == CURRENT_AGENT
    env = make_env(make_world([(0, 0, E, 0), (2, 2, W, 0)], [(YS, 1, 1)], size=3), render_mode="ansi")
    assert env.render() == "A00\n0o0\n00B"
    assert XLandEnv().render() is None
    with pytest.raises(ValueError, match="render_mode"):
        XLandEnv(render_mode="human")


def test_carrier_handover_when_the_carrier_is_tagged():
    # p0 carries the sphere that p1 also holds; p2 tags p0: p1 becomes the carrier, on its own tile
    env = make_env(make_world([(3, 2, E, 0), (2, 2, S, 0), (3, 5, W, 1)], [(YS, 3, 3)]),
                   game=PROBE_GAMES["choose_wisely_3p"])
    env.step({"player_0": GRAB, "player_1": GRAB, "player_2": NOOP_A})
    assert env.carrier[0] == 0 and env.hold.tolist() == [0, 0, -1]
    env.step({"player_0": NOOP_A, "player_1": NOOP_A, "player_2": GADGET})
    assert env._pos(P0) is None and env.hold.tolist() == [-1, 0, -1]
    assert env.carrier[0] == 1 and env._pos(YS) == (2, 2)
