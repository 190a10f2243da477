"""The XLand PPO trainer: held-out metric math, task plumbing, a tiny run with resume, and the ablation."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import magister
from magister.examples._checkpoint import read_checkpoint
from magister.examples.xland.coplayers import LEARNER, NOOP, RANDOM, SEEKER
from magister.examples.xland.env import XLandEnv, XLandTask
from magister.examples.xland.evaluation import (
    EvalResult,
    format_table,
    nash_value,
    normalised_percentiles,
    normalised_scores,
    normalisers,
    participation,
    play,
    with_coplayer,
    worst_case,
)
from magister.examples.xland.game import Game, Goal, goal_observation
from magister.examples.xland.sanity import easy_tasks, learning_curve
from magister.examples.xland.task import XLandTaskSpace
from magister.examples.xland.world import MAX_SIZE, World, flat_world
from magister.examples.xland_ppo import (
    GOAL_PLANES,
    Agent,
    Args,
    CompareReturns,
    GoalEncoder,
    PairTaskSpace,
    XLandTrainWrapper,
    ablation,
    ablation_table,
    atom_channels,
    check_args,
    egocentric,
    filter_demo,
    goal_planes,
    make_agent,
    make_curriculum,
    make_task_filter,
    make_task_space,
    parse_args,
    train,
)
from magister.opponents import OpponentStore

TINY = dict(total_steps=128, num_envs=2, num_steps=16, episode_length=8, n_test=3, n_validation=2,
            eval_every=2, snapshot_every=1, checkpoint_every=2, hidden=16, filter_episodes=2, filter_window=2,
            num_minibatches=2, update_epochs=2, progress=False)


# -- the held-out metric, pinned on hand-made numbers ---------------------------------------------------
def test_worst_case_and_participation_by_hand():
    # 4 tasks x 3 co-players (mean returns)
    returns = np.array([[0.0, 2.0, 1.0],   # nothing against co-player 0: worst case 0
                        [3.0, 1.0, 2.0],   # worst case 1
                        [0.0, 0.0, 0.0],   # worst case 0
                        [4.0, 4.0, 1.0]])  # worst case 1
    assert worst_case(returns).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert participation(returns) == 0.5
    r = EvalResult(returns, np.array([2.0, 2.0, 0.0, 4.0]), (NOOP, RANDOM, SEEKER))
    assert r.participation_vs() == {NOOP: 0.5, RANDOM: 0.75, SEEKER: 0.75}


def test_nash_value_by_hand():
    assert nash_value(np.array([[1.0, 0.0], [0.0, 1.0]])) == pytest.approx(0.5)
    # p*2 + (1-p)*0 = p*1 + (1-p)*3  ->  p = 3/4, value 1.5 (beats either pure row's worst case, 1 and 0)
    assert nash_value(np.array([[2.0, 1.0], [0.0, 3.0]])) == pytest.approx(1.5)
    assert nash_value(np.array([[2.0, 2.0], [1.0, 1.0]])) == pytest.approx(2.0)  # a dominant row
    assert nash_value(np.array([[1.0], [3.0]])) == 3.0  # one co-player: the best reference
    assert nash_value(np.array([[4.0, 1.0, 2.0]])) == 1.0  # one reference: its worst case


def test_normalised_scores_and_percentiles_by_hand():
    returns = np.array([[2.0, 4.0], [1.0, 1.0], [0.0, 5.0], [6.0, 3.0]])  # worst cases 2, 1, 0, 3
    norms = normalisers(np.array([
        [[4.0, 4.0], [0.0, 8.0]],   # pure rows guarantee 4 and 0; the mix cannot beat 4 -> 4
        [[0.0, 0.0], [0.0, 0.0]],   # no reference scores: no normaliser
        [[2.0, 0.0], [0.0, 2.0]],   # matching pennies: 1
        [[2.0, 2.0], [1.0, 3.0]],   # 2
    ]))
    assert norms.tolist() == pytest.approx([4.0, 0.0, 1.0, 2.0])
    scores = normalised_scores(returns, norms)
    assert scores[0] == 0.5 and np.isnan(scores[1]) and scores[2] == 0.0 and scores[3] == 1.5
    # percentiles over the 3 defined scores (0, 0.5, 1.5), linear interpolation between order statistics
    p = normalised_percentiles(scores, ks=[0, 25, 50])
    assert p.tolist() == pytest.approx([0.0, 0.25, 0.5])
    r = EvalResult(returns, norms, (NOOP, RANDOM))
    assert r.unnormalised == 1 and r.participation == 0.75
    s = r.summary()
    assert s["p50"] == pytest.approx(0.5) and s["p10"] == pytest.approx(0.1)
    assert s["mean_worst_return"] == pytest.approx(1.5)
    table = format_table({"agent": r})
    assert "agent" in table and "0.750" in table and "vs noop" in table


def test_metric_input_errors():
    with pytest.raises(ValueError, match="non-empty 2-d"):
        worst_case(np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        nash_value(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="one per task"):
        normalised_scores(np.ones((2, 3)), np.ones(3))
    with pytest.raises(ValueError, match=">= 0"):
        normalised_scores(np.ones((2, 3)), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        normalised_percentiles(np.ones(3), ks=[101])
    with pytest.raises(ValueError, match="co-player columns"):
        EvalResult(np.ones((2, 2)), np.ones(2))  # three evaluation co-players by default


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1),
       st.floats(0.1, 5.0), st.floats(-3.0, 3.0))
def test_nash_value_bounds_and_affine_invariance(rows, cols, seed, scale, shift):
    a = np.random.default_rng(seed).uniform(0, 10, size=(rows, cols))
    v = nash_value(a)
    assert a.min(axis=1).max() - 1e-7 <= v <= a.max(axis=0).min() + 1e-7  # maximin <= value <= minimax
    assert nash_value(scale * a + shift) == pytest.approx(scale * v + shift, abs=1e-6)


def test_play_is_reproducible_and_counts_reward():
    space = XLandTaskSpace(coplayer_ids=(NOOP,), world_sizes=(7, 7), seed=3)
    tasks = [with_coplayer(space.sample(), RANDOM) for _ in range(3)]

    class Noop:
        def reset(self, n):
            self.n = n

        def act(self, envs, obs):
            return np.zeros(len(envs), dtype=np.int64)

    a = play(tasks, Noop(), episodes=2, episode_length=6, seed=1)
    b = play(tasks, Noop(), episodes=2, episode_length=6, seed=1)
    assert a.shape == (3,) and np.array_equal(a, b) and np.all((a >= 0) & (a <= 6))
    with pytest.raises(ValueError, match="learner in slot 0"):
        play([XLandTask(tasks[0].world, tasks[0].game, (LEARNER,) * tasks[0].game.n_players)], Noop())


# -- task plumbing ------------------------------------------------------------------------------------
def test_pair_space_puts_the_opponent_in_every_coplayer_slot():
    import msgpack

    space = XLandTaskSpace(coplayer_ids=(NOOP,), three_player_prob=1.0, world_sizes=(7, 7), seed=0)
    enc = space.sample_encoded(1)[0]
    pairs = PairTaskSpace()
    task = pairs.decode((enc, 5))
    assert type(task) is XLandTask and task.coplayers == (LEARNER, 5, 5)
    assert pairs.encode(task) == (enc, 5)
    wired = pairs.decode(msgpack.unpackb(msgpack.packb((enc, 2))))  # msgpack turns tuples into lists
    assert type(wired) is XLandTask and wired.coplayers == (LEARNER, 2, 2) and pairs.encode(wired)[1] == 2
    for bad in (enc, (enc, "x"), (enc, True), (1, 2, 3)):
        with pytest.raises(ValueError):
            pairs.decode(bad)


def _play_to_end(wrapper: XLandTrainWrapper, task: XLandTask) -> dict:
    wrapper.reset(seed=0, options={"task": task})
    while wrapper.agents:
        wrapper.step({a: 0 for a in wrapper.agents})
    return wrapper.episode_extras()


def test_control_episodes_report_no_result_against_the_coplayer(tmp_path):
    """The env reports the returns of every episode; the trainer's DualCurriculum gets a control episode's
    update with control=True (from the sync server) and records no result for the co-player."""
    space = XLandTaskSpace(coplayer_ids=(NOOP,), world_sizes=(7, 7), seed=1)
    t = space.sample()
    wrapper = XLandTrainWrapper(XLandEnv(episode_length=3))
    plain = _play_to_end(wrapper, XLandTask(t.world, t.game, (LEARNER, NOOP)))
    ret = wrapper.env.unwrapped.returns
    assert plain == {"learner_return": ret[0], "coplayer_return": ret[1], "opponent_return": ret[1]}
    args = Args(**TINY)
    cur = make_curriculum(args, make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0],
                          OpponentStore(tmp_path, max_count=None))
    opp = cur.update_agent(make_agent(args))
    pair = (t.encode(), opp)
    cur.update_on_episode(3.0, 3, pair, 0.0, control=True, extras=plain)
    assert cur.opponent_curriculum.num_results == 0
    cur.update_on_episode(3.0, 3, pair, 0.0, extras=plain)
    assert cur.opponent_curriculum.num_results == 1


def test_compare_returns_outcomes():
    rule = CompareReturns(draw_margin=0.5)
    score = rule.learner_score_from_episode
    assert score(0.0, {"learner_return": 3.0, "coplayer_return": 1.0}) == 1.0
    assert score(0.0, {"learner_return": 1.0, "coplayer_return": 1.4}) == 0.5
    assert score(0.0, {"learner_return": 0.0, "coplayer_return": 2.0}) == 0.0
    assert score(1.0, {}) == 1.0  # falls back to OutcomeRule (learner return above the threshold 0)


def test_goal_encoder_sums_over_literals_and_options():
    enc = GoalEncoder(8)
    ids, mat = goal_observation(Goal.parse(
        "hold(me, yellow sphere) & not(near(me, black cube)) | on(me, white floor)"))
    n = int((ids >= 0).sum())
    cols = np.r_[np.arange(n)[::-1], np.arange(n, len(ids))]  # reorder the atoms (literals in an option)
    rows = np.r_[1, 0, np.arange(2, mat.shape[0])]  # swap the two options

    def embed(i, m):
        return enc(torch.as_tensor(i)[None], torch.as_tensor(m)[None])[0]

    with torch.no_grad():
        e = embed(ids, mat)
        assert torch.allclose(e, embed(ids[cols], mat[:, cols]), atol=1e-6)
        assert torch.allclose(e, embed(ids, mat[rows]), atol=1e-6)
        one = mat.copy()
        one[1] = 0.0  # drop the second option: the sum loses its term
        assert not torch.allclose(e, embed(ids, one))
        flipped = mat.copy()
        flipped[mat != 0] *= -1  # negating every literal changes the goal
        assert not torch.allclose(e, embed(ids, flipped))


# -- the egocentric view (the fix for "the agent learns nothing": issue 7) --------------------------------
def _vector(r: int, c: int, facing: int) -> torch.Tensor:
    v = torch.zeros(1, 23)
    v[0, 0], v[0, 1], v[0, 2 + facing] = r / (MAX_SIZE - 1), c / (MAX_SIZE - 1), 1.0
    return v


def test_egocentric_view_centres_on_the_player_and_turns_forward_up_by_hand():
    grid = torch.zeros(1, 2, MAX_SIZE, MAX_SIZE)
    grid[0, 0, 3, 4] = 1.0  # the player's tile
    grid[0, 1, 1, 4] = 1.0  # a target two tiles north of it
    # facing north: ahead (up); east: on the player's left; south: behind; west: on its right
    expected = {0: (8, 10), 1: (10, 8), 2: (12, 10), 3: (10, 12)}
    for facing, tile in expected.items():
        view = egocentric(grid, _vector(3, 4, facing))
        assert view.shape == (1, 2, 21, 21)
        assert (view[0, 0] == 1).nonzero().tolist() == [[10, 10]]
        assert (view[0, 1] == 1).nonzero().tolist() == [list(tile)]
    small = egocentric(grid, _vector(3, 4, 0), view=5)  # a 5 x 5 crop: the target 2 ahead is its top row
    assert small.shape == (1, 2, 5, 5) and (small[0, 1] == 1).nonzero().tolist() == [[0, 2]]
    with pytest.raises(ValueError, match="odd"):
        egocentric(grid, _vector(3, 4, 0), view=4)


def test_egocentric_view_of_an_env_observation():
    # player 0 at (2, 3) facing east; purple cube (kind 3) 2 tiles east, black sphere (kind 1) 1 tile north
    world = flat_world(7, [(2, 3, 1, 0), (6, 6, 0, 0)], objects=[(3, 2, 5), (1, 1, 3)])
    game = Game.parse(["near(me, purple cube)", "near(me, black sphere)"])
    env = XLandEnv(XLandTask(world, game, (LEARNER, NOOP)), episode_length=5)
    obs, _ = env.reset(seed=0)
    o = {k: torch.as_tensor(v)[None] for k, v in obs["player_0"].items()}
    view = egocentric(o["grid"], o["vector"], view=13)[0]  # 2 * 7 - 1: the whole world from any tile
    assert view.shape == (27, 13, 13)
    assert view[25].nonzero().tolist() == [[6, 6]]  # the "self" plane: the centre
    assert view[12 + 3].nonzero().tolist() == [[4, 6]]  # the cube: 2 tiles straight ahead
    assert view[12 + 1].nonzero().tolist() == [[6, 5]]  # the sphere (north): on the player's left
    # the in-grid plane: east of the player are columns 4..6 (3 tiles), then the edge
    assert view[0, :, 6].tolist() == [0.0] * 3 + [1.0] * 7 + [0.0] * 3
    assert view[0].sum() == 49  # every tile of the 7 x 7 world is in view exactly once


def _rotate_world(w: World) -> World:
    """The world turned a quarter clockwise: tile (r, c) -> (c, n - 1 - r), facing d -> d + 1."""
    n = w.size
    floors = np.asarray(w.floor_map)

    def rot(r, c):
        return c, n - 1 - r
    return World(n, (0,) * n * n, (-1,) * n * n, tuple(np.rot90(floors, -1).ravel().tolist()),
                 tuple((k, *rot(r, c)) for k, r, c in w.objects),
                 tuple((*rot(r, c), (d + 1) % 4, g) for r, c, d, g in w.players))


def test_egocentric_agent_input_is_invariant_to_turning_the_world_with_the_player():
    rng = np.random.default_rng(0)
    floors = tuple(int(x) for x in rng.integers(0, 6, size=49))
    world = World(7, (0,) * 49, (-1,) * 49, floors, ((3, 0, 5), (7, 4, 1), (1, 6, 6)),
                  ((2, 3, 1, 0), (5, 2, 0, 1)))
    game = Game.parse(["near(me, purple cube)", "on(me, white floor)"])
    views = []
    for w in (world, _rotate_world(world)):
        env = XLandEnv(XLandTask(w, game, (LEARNER, NOOP)), episode_length=5)
        o = {k: torch.as_tensor(v)[None] for k, v in env.reset(seed=0)[0]["player_0"].items()}
        views.append(egocentric(o["grid"], o["vector"], view=13))
    assert torch.equal(views[0], views[1])
    agent = make_agent(Args(hidden=8, world_size=7))
    assert isinstance(agent, Agent) and agent.view == 13
    assert make_agent(Args(hidden=8, egocentric=False)).view is None


def test_goal_planes_mark_the_entities_the_goal_mentions_by_hand():
    # player 0 at (2, 3); purple cube (kind 3) at (2, 5); black sphere (kind 1) at (1, 3); the co-player at
    # (6, 6); floors: all brown (0) but (0, 0) white (5)
    floors = [0] * 49
    floors[0] = 5
    world = World(7, (0,) * 49, (-1,) * 49, tuple(floors), ((3, 2, 5), (1, 1, 3)),
                  ((2, 3, 1, 0), (6, 6, 0, 0)))
    game = Game.parse(["near(me, purple cube) & not(see(black sphere, purple cube)) | "
                       "not(near(me, opponent)) & on(me, white floor)", "near(me, black sphere)"])
    env = XLandEnv(XLandTask(world, game, (LEARNER, NOOP)), episode_length=5)
    o = {k: torch.as_tensor(v)[None] for k, v in env.reset(seed=0)[0]["player_0"].items()}
    planes = goal_planes(o["grid"], o["goal_atoms"], o["goal_matrix"], torch.as_tensor(atom_channels()))
    assert planes.shape == (1, GOAL_PLANES, MAX_SIZE, MAX_SIZE)
    on = [p.nonzero().tolist() for p in planes[0]]
    assert on[0] == [[0, 0], [2, 5]]  # required true, about me: the cube and the white floor
    assert on[1] == [[6, 6]]  # required false, about me: the opponent
    assert on[2] == []  # nothing about the world alone is required true
    assert on[3] == [[1, 3], [2, 5]]  # required false, not about me: both objects of the see atom
    agent = make_agent(Args(hidden=8, world_size=7))
    assert agent.goal_cnn and agent.conv1.in_channels == 27 + GOAL_PLANES
    logits, value, h = agent.step(o, torch.zeros(1, 8), torch.ones(1))
    assert logits.shape == (1, 6) and value.shape == (1,) and h.shape == (1, 8)
    plain = make_agent(Args(hidden=8, world_size=7, goal_cnn=False))
    assert not plain.goal_cnn and plain.conv1.in_channels == 27


def test_sanity_tasks_and_the_fixed_task_curriculum(tmp_path):
    tasks = easy_tasks(3, seed=5)
    assert [str(t.game.goals[0]) for t in tasks] == [
        "on(me, brown floor)", "near(purple sphere, me)", "near(black pyramid, me)"]
    assert all(t.world.size == 7 and t.coplayers == (LEARNER, NOOP) for t in tasks)
    assert str(easy_tasks(1, goal="near(me, purple cube)")[0].game.goals[0]) == "near(purple cube, me)"
    with pytest.raises(ValueError, match="positive int"):
        easy_tasks(0)
    args = Args(hidden=8, curriculum="filter")
    space = make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0]
    cur = make_curriculum(args, space, OpponentStore(tmp_path, max_count=None), train_tasks=tasks)
    cur.update_agent(make_agent(args))
    allowed = {t.encode() for t in tasks}
    pairs = cur.sample(30)
    assert {p[0] for p in pairs} == allowed and {p[1] for p in pairs} == {0}  # every task, snapshot 0
    with pytest.raises(ValueError, match="non-empty"):
        train(Args(**TINY, run_dir=str(tmp_path)), train_tasks=[])
    from magister.examples.xland.sanity import main as sanity_main

    curve = sanity_main(["--tasks", "1", "--total-steps", "100", "--heldout", "2"])  # one 512-step update
    assert [s for s, _ in curve] == [512] and 0.0 <= curve[0][1] <= 1.0
    hist = [{"global_step": 10 * i, "episodes/train": i % 2 + 1, "return/train": 0.1 * i} for i in range(4)]
    # bins of 2 rows: (0 * 1 + 0.1 * 2) / 3 and (0.2 * 1 + 0.3 * 2) / 3
    assert learning_curve(hist, bins=2) == [(10, pytest.approx(0.2 / 3)), (30, pytest.approx(0.8 / 3))]


def test_task_info_reads_train_and_control_flags_per_env():
    from magister.examples.xland_ppo import _task_info

    enc = XLandTaskSpace(coplayer_ids=(NOOP,), world_sizes=(7, 7), seed=0).sample_encoded(1)[0]
    tasks = np.empty(3, dtype=object)
    tasks[:] = [(enc, 0), (enc, 0), (enc, 1)]
    info = {"task": tasks, "task_train": np.array([True, False, False]),
            "task_control": np.array([False, True, False])}
    train, control = _task_info(info, 3)
    assert train.tolist() == [True, False, False] and control.tolist() == [False, True, False]
    train, control = _task_info({}, 2)  # no curriculum info: every step trains
    assert train.tolist() == [True, True] and control.tolist() == [False, False]


# -- the trainer ----------------------------------------------------------------------------------------
def test_help_lists_options():
    res = subprocess.run([sys.executable, "-m", "magister.examples.xland_ppo", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    assert "--curriculum" in res.stdout and "--ablation" in res.stdout and "--coplayers" in res.stdout
    assert "Monte-Carlo episodes per policy" in res.stdout  # field docs reach --help


def test_parse_args_and_bad_options(tmp_path):
    args = parse_args(["--total-steps", "2e3", "--curriculum", "uniform", "--no-tensorboard"])
    assert args.total_steps == 2000 and args.curriculum == "uniform" and args.tensorboard is False
    with pytest.raises(ValueError, match="--curriculum must be 'filter' or 'uniform'"):
        train(Args(**{**TINY, "curriculum": "nope", "run_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match="multiple of --num-minibatches"):
        train(Args(**{**TINY, "num_envs": 3, "run_dir": str(tmp_path)}))
    for bad, msg in (({"budget": "time"}, "--budget must be"), ({"reward_scale": 0.0}, "--reward-scale"),
                     ({"filter_control_max": 1.5}, "--filter-control-max"),
                     ({"ablation_seeds": 0}, "--ablation-seeds")):
        with pytest.raises(ValueError, match=msg):
            run = ablation if "ablation_seeds" in bad else train
            run(Args(**{**TINY, **bad, "run_dir": str(tmp_path)}))


def test_trainer_filter_thresholds():
    """The paper's thresholds rescaled to [0, episode_length], except m_cont = filter_control_max * L."""
    args = Args(**{**TINY, "episode_length": 40, "filter_control_max": 0.25})
    filt = make_task_filter(args, make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0])
    m = filt.thresholds
    assert (m.m_cont, m.m_s, m.m_greater, m.m_greater_cont, m.m_solved) == pytest.approx(
        (10.0, 40 * 375 / 900, 40 * 7.5 / 900, 0.0, 1.0))
    assert filt.control_first and filt.K == 2
    # issue 7: a set large enough to train on (half the episodes evaluate candidates while any need them;
    # fresh proposals share training while the set is small; re-validation on the whole window)
    assert filt.eval_fraction == 0.5 and filt.min_train_tasks == 8 and filt.pair_window
    assert Args().filter_window == 16


def test_tiny_run_writes_outputs_feeds_curricula_and_resumes(tmp_path):
    first = train(Args(**{**TINY, "run_dir": str(tmp_path), "run_name": "a", "budget": "env"}))
    run = tmp_path / "a"
    assert (run / "checkpoint.pt").exists() and (run / "xland.png").stat().st_size > 1000
    # the checkpoint loads without running code: tensors with torch.load's default (weights_only=True,
    # no exception needed), the rest with magister.load
    assert torch.serialization.get_unsafe_globals_in_checkpoint(run / "checkpoint.pt") == []
    assert set(torch.load(run / "checkpoint.pt")) == {"agent", "optimizer"}
    assert magister.load(run / "checkpoint.state")["update"] == 4
    assert any(p.name.startswith("events.out.tfevents") for p in run.iterdir())
    assert "agent" in (run / "eval.txt").read_text()
    assert first.global_step == 128 and len(first.history) == 4
    assert set(first.test) == {"agent", "noop", "random", "seeker"}
    assert first.test["agent"].returns.shape == (3, 3)
    ckpt = read_checkpoint(run / "checkpoint.pt")
    task_state, opp_state = ckpt["curriculum"]["task"], ckpt["curriculum"]["opponent"]
    assert task_state["class"] == "TaskFilter"
    assert task_state["counts"]["proposed"] > 0 and task_state["num_episodes"] > 0  # the filter got returns
    assert opp_state["num_updates"] == 5  # snapshot 0 + one offer per update
    assert opp_state["num_results"] > 0  # FSP got outcomes against snapshots
    assert sorted(int(p.name[9:17]) for p in (run / "opponents").glob("snapshot-*.bin")) == [0, 1, 2, 3, 4]
    assert ckpt["curriculum"]["num_episodes"] == task_state["num_episodes"]

    resumed = train(Args(**{**TINY, "run_dir": str(tmp_path), "run_name": "b", "total_steps": 192,
                            "budget": "env", "resume": str(run / "checkpoint.pt"), "plot": False,
                            "tensorboard": False}))
    assert resumed.global_step == 192 and len(resumed.history) == 6  # history carried over, 2 more updates
    after = read_checkpoint(tmp_path / "b" / "checkpoint.pt")
    assert after["curriculum"]["task"]["num_episodes"] > task_state["num_episodes"]
    assert after["curriculum"]["opponent"]["num_updates"] == 7
    assert np.array_equal(after["norms"]["test"], ckpt["norms"]["test"])  # normalisers reused, not redone
    # the checkpoint (with its snapshot store) decides the continuation: a second resume trains the same
    # weights and ends in the same curriculum state
    train(Args(**{**TINY, "run_dir": str(tmp_path), "run_name": "c", "total_steps": 192, "budget": "env",
                  "resume": str(run / "checkpoint.pt"), "plot": False, "tensorboard": False}))
    twin = read_checkpoint(tmp_path / "c" / "checkpoint.pt")
    assert all(torch.equal(twin["agent"][k], after["agent"][k]) for k in after["agent"])
    for state in (twin, after):  # (each run's snapshot store is its own folder)
        assert state["curriculum"]["opponent"].pop("store_directory").endswith(state["store_dir"])
    assert magister.checkpoint.dumps(twin["curriculum"]) == magister.checkpoint.dumps(after["curriculum"])


def test_ablation_runs_both_curricula_with_the_same_budget(tmp_path):
    results = ablation(Args(**{**TINY, "total_steps": 64, "run_dir": str(tmp_path), "run_name": "abl",
                               "plot": False, "tensorboard": False, "n_test": 2, "budget": "env",
                               "ablation_seeds": 1}))
    assert set(results) == {"filter", "uniform"}
    assert results["filter"].global_step == results["uniform"].global_step == 64
    text = (tmp_path / "abl" / "ablation.txt").read_text()
    assert text.splitlines()[0].split()[:5] == ["curriculum", "steps", "train", "eval", "test"]
    assert text == ablation_table(results) + "\n"
    assert "task/task_filter/train_tasks" not in results["uniform"].curriculum_metrics


def test_training_step_budget_charges_the_filters_evaluation_episodes_on_top(tmp_path):
    """--budget train (the default): both arms train on the same number of steps; the filter's evaluation
    episodes come on top, counted step by step, and match the episodes it issued. Two seeds per arm."""
    results = ablation(Args(**{**TINY, "total_steps": 96, "run_dir": str(tmp_path), "run_name": "abl",
                               "plot": False, "tensorboard": False, "n_test": 2, "eval_every": 0,
                               "ablation_seeds": 2, "filter_eval_fraction": 0.5}))
    assert set(results) == {"filter_s0", "uniform_s0", "filter_s1", "uniform_s1"}
    batch = TINY["num_envs"] * TINY["num_steps"]
    for seed in (0, 1):
        uni, fil = results[f"uniform_s{seed}"], results[f"filter_s{seed}"]
        assert (uni.global_step, uni.train_steps, uni.eval_steps) == (96, 96, 0)
        assert 96 <= fil.train_steps < 96 + batch  # stops at the first update that reaches the budget
        assert fil.eval_steps > 0 and fil.global_step == fil.train_steps + fil.eval_steps
        c = fil.curriculum_metrics
        issued = c["task/task_filter/eval_agent_issued"] + c["task/task_filter/eval_control_issued"]
        length = TINY["episode_length"]
        # every issued evaluation episode was played in full, except at most one in flight per env
        assert (issued - TINY["num_envs"]) * length <= fil.eval_steps <= issued * length
        assert fil.history[-1]["train_steps"] == fil.train_steps
    text = (tmp_path / "abl" / "ablation.txt").read_text()
    rows = [line.split("|") for line in text.splitlines() if line.count("|") == 2]
    assert [r[0].strip() for r in rows] == ["curriculum", "filter", "uniform"]  # intervals over the seeds
    interval = re.compile(r"-?\d\.\d{3} \[-?\d\.\d{3}, -?\d\.\d{3}\]")
    assert all(interval.fullmatch(c.strip()) for r in rows[1:] for c in r[1:])
    assert text.splitlines()[-1].startswith("P(filter run's test return > uniform run's) = ")


def test_async_vector_envs_train_through_the_sync_layer(tmp_path):
    res = train(Args(**{**TINY, "vector": "async", "run_dir": str(tmp_path), "run_name": "async",
                        "plot": False, "tensorboard": False, "eval_every": 0, "n_test": 2,
                        "budget": "env"}))
    assert res.global_step == 128 and len(res.history) == 4
    m = res.curriculum_metrics
    assert m["task/task_filter/proposed"] > 0 and m["task/curriculum/episodes"] > 0  # feedback crossed over
    assert res.train_steps + res.eval_steps == 128 and res.eval_steps > 0


def test_filter_demo_accounts_for_every_proposal():
    demo = filter_demo(Args(**{**TINY, "filter_eval_fraction": 0.5}), episodes=40)
    c = demo["counts"]
    decided = c["accepted"] + c["rejected_solved"] + c["rejected_control"] + c["rejected_easy_for_control"]
    assert 0 < decided <= c["proposed"]
    assert demo["train_tasks"] == c["accepted"] - c["dropped"] - c["evicted"]
    assert demo["uniform"]["episodes"] == max(demo["kept"]["episodes"], 1)  # compared on as many episodes
    for p in (demo["kept"], demo["uniform"]):
        if p["episodes"]:  # no training episode at all while the filter has accepted nothing
            assert 0.0 <= p["zero_share"] <= 1.0 and 0.0 <= p["mean_return"] <= 1.0
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        filter_demo(Args(**TINY), episodes=0)


def test_goal_kind_groups_tasks_by_the_relation_of_the_first_positive_literal_about_me():
    from magister.examples.xland.game import Game
    from magister.examples.xland_ppo import goal_kind

    def kind(*goals):
        return goal_kind((None, Game.parse(list(goals)).encode(), (0, -1)))

    assert kind("near(me, purple cube)", "see(me, opponent)") == "near"
    assert kind("on(me, blue floor)", "see(me, opponent)") == "on"
    assert kind("see(me, purple cube) & near(me, yellow sphere)", "see(me, opponent)") == "near"  # lower id
    assert kind("not(see(me, purple cube)) & hold(me, purple cube)", "see(me, opponent)") == "hold"
    assert kind("not(near(me, purple cube))", "see(me, opponent)") == "other"  # negative only
    assert kind("see(purple cube, opponent)", "see(me, opponent)") == "other"  # player 1's goal not read
    with pytest.raises(ValueError, match="world, game, coplayers"):
        goal_kind((1, 2))


def test_trainer_filter_widening_options(tmp_path):
    """--filter-widen / --filter-balance / --filter-fresh-samples reach the TaskFilter; --scale-lr sets
    each update's learning rate to learning_rate x its share of training steps."""
    from magister.examples.xland_ppo import goal_kind

    args = Args(**{**TINY, "filter_widen": True, "filter_balance": True, "filter_fresh_samples": True})
    filt = make_task_filter(args, make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0])
    assert filt.widen and filt.fresh_samples and filt.group_of is goal_kind
    plain = make_task_filter(Args(**TINY), make_task_space(Args(**{**TINY, "n_test": 0,
                                                                    "n_validation": 0}))[0])
    assert not plain.widen and not plain.fresh_samples and plain.group_of is None
    res = train(Args(**{**TINY, "scale_lr": True, "run_dir": str(tmp_path), "run_name": "lr", "plot": False,
                        "tensorboard": False, "eval_every": 0, "n_test": 2, "budget": "env"}))
    ckpt = torch.load(tmp_path / "lr" / "checkpoint.pt")  # (default weights_only=True)
    share = res.history[-1]["train_fraction"]
    assert 0 < share < 1  # the filter's evaluation episodes share the last batch
    assert ckpt["optimizer"]["param_groups"][0]["lr"] == pytest.approx(Args().learning_rate * share)


def test_a_run_is_reproducible_from_its_seed(tmp_path):
    """Snapshot co-players (TINY stores one every update) seed their action sampling from their weights,
    not from the OS: two runs with one seed train the same weights."""
    weights = []
    for name in ("a", "b"):
        train(Args(**{**TINY, "run_dir": str(tmp_path), "run_name": name}))
        ckpt = torch.load(tmp_path / name / "checkpoint.pt")  # (default weights_only=True)
        weights.append(ckpt["agent"])
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_replay_worlds_option_plays_variants_and_credits_the_accepted_task(tmp_path):
    """--filter-replay-worlds mutate: a training replay of an accepted task is the pair (task, opponent) with
    the variant pair (variant, opponent); the env plays the variant (same game, another world, the opponent
    in the co-player slot) and the episode's return lands in the accepted task's window; evaluation episodes
    are plain."""
    import msgpack

    from magister.task_spaces.base import task_key

    def wire(x):
        return msgpack.unpackb(msgpack.packb(x))

    args = Args(**{**TINY, "filter_replay_worlds": "mutate", "filter_mutations": 2, "filter_window": 16,
                   "filter_min_tasks": 1})
    space = make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0]
    cur = make_curriculum(args, space, OpponentStore(tmp_path, max_count=None))
    cur.update_agent(make_agent(args))
    filt = cur.task_curriculum
    assert filt.replay_variant.keywords == {"mode": "mutate", "mutations": 2}
    enc = space.sample_encoded(1)[0]
    filt._accept(task_key(enc), enc, [1.0, 1.0], [0.0, 0.0])
    samples = cur.sample_tasks(40)
    train_samples = [s for s in samples if s.train]
    evals = [s for s in samples if not s.train]
    assert train_samples and evals and filt.counts["replay_variants"] == len(train_samples)
    assert all(s.variant is None for s in evals)  # evaluations: the task itself
    task = XLandTask.decode(enc)
    worlds = set()
    for s in train_samples:
        pair, variant = wire(s.task), wire(s.variant)
        assert XLandTask.decode(pair[0]) == task and variant[1] == pair[1] and not s.control
        decoded = PairTaskSpace().decode(variant)  # what the sync wrapper decodes: the variant pair
        assert decoded.world == XLandTask.decode(variant[0]).world and decoded.game == task.game
        assert decoded.coplayers == (LEARNER, pair[1])
        assert not space.is_heldout(decoded)
        worlds.add(decoded.world)
    assert task.world not in worlds and len(worlds) > len(train_samples) // 2
    wrapper = XLandTrainWrapper(XLandEnv(episode_length=4))
    played = PairTaskSpace().decode([wire(train_samples[0].variant)[0], NOOP])
    extras = _play_to_end(wrapper, played)  # the env plays the variant's world
    assert wrapper.unwrapped.task.world == played.world != task.world and "learner_return" in extras
    first = train_samples[0]
    cur.update_on_episode(3.0, 8, wire(first.task), 0.0, variant=wire(first.variant))
    assert list(filt._windows[task_key(enc)]) == [1.0, 1.0, 3.0]  # credited to the accepted task
    same = make_task_filter(Args(**TINY), space)
    assert same.replay_variant is None  # the default: replays play the accepted task itself
    assert make_task_filter(Args(**{**TINY, "filter_replay_worlds": "fresh"}),
                            space).replay_variant.keywords["mode"] == "fresh"
    for bad, match in ((["--filter-replay-worlds", "new"], "filter-replay-worlds"),
                       (["--filter-mutations", "0"], "filter-mutations")):
        with pytest.raises(ValueError, match=match):
            train(parse_args(bad + ["--run-dir", str(tmp_path)]))


def test_eval_variants_option_evaluates_candidates_on_other_worlds(tmp_path):
    """--filter-eval-variants (with --filter-replay-worlds fresh): a candidate's evaluation episodes, the
    agent's and the control policy's, play new worlds of its game; the env decodes the played world, the
    control pair still reads as control, and without replay variants the option is refused."""
    import msgpack

    def wire(x):
        return msgpack.unpackb(msgpack.packb(x))

    args = Args(**{**TINY, "filter_replay_worlds": "fresh", "filter_eval_variants": True})
    space = make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0]
    cur = make_curriculum(args, space, OpponentStore(tmp_path, max_count=None))
    cur.update_agent(make_agent(args))
    filt = cur.task_curriculum
    assert filt.variant_evaluations
    evals = [s for s in cur.sample_tasks(40) if not s.train]
    for s in evals:  # control first: the control scores nothing, so the agent's episodes follow
        cur.update_on_episode(0.0, 8, wire(s.task), 0.0, control=s.control, variant=wire(s.variant))
    evals += [s for s in cur.sample_tasks(40) if not s.train]
    assert evals and filt.counts["eval_variants"] == len(evals)
    kinds = set()
    for s in evals:
        kinds.add(s.control)
        pair, variant = wire(s.task), wire(s.variant)
        task, decoded = XLandTask.decode(pair[0]), PairTaskSpace().decode(variant)
        assert decoded.game == task.game and decoded.world == XLandTask.decode(variant[0]).world != task.world
        assert not space.is_heldout(decoded)
    assert kinds == {True, False}
    with pytest.raises(ValueError, match="filter-eval-variants needs"):
        train(parse_args(["--filter-eval-variants", "--run-dir", str(tmp_path)]))


def test_oracle_filter_labels_keeps_and_trains(tmp_path, capsys):
    """The oracle-filter experiment: the keep rules are the labels' conjunctions, the kept pool is what
    the run trains on, and it prints the shares, test and bigval participation; bad sizes are refused."""
    from magister.examples.xland.oracle_filter import KEEP_RULES, label_pool
    from magister.examples.xland.oracle_filter import main as oracle_main

    rules = {name: [rule(s, n) for s, n in ((0.0, 0.0), (2.0, 0.0), (0.0, 3.0), (2.0, 3.0))]
             for name, rule in KEEP_RULES.items()}
    assert rules == {"all": [True] * 4, "achievable": [False, True, False, True],
                     "nontrivial": [True, True, False, False], "oracle": [False, True, False, False]}
    args = parse_args(["--seed", "0"])
    space = make_task_space(dataclasses.replace(args, n_test=0, n_validation=0))[0]
    pool = [space.sample() for _ in range(12)]
    seeker, noop = label_pool(pool, episode_length=40)
    assert seeker.shape == noop.shape == (12,) and (seeker >= 0).all() and (noop >= 0).all()
    assert (seeker > 0).mean() > (noop > 0).mean()  # the goal-seeker reaches goals noop does not
    out = oracle_main(["--keep", "oracle", "--pool", "40", "--bigval", "3", "--total-steps", "100",
                       "--run-dir", str(tmp_path), "--no-progress"])
    printed = capsys.readouterr().out
    assert "pool of 40 training tasks" in printed and "--keep oracle trains on" in printed
    assert set(out) == {"test/agent", "test/noop", "test/random", "test/seeker", "bigval/agent"}
    assert all(0.0 <= v <= 1.0 for v in out.values())
    with pytest.raises(ValueError, match="--pool must be a positive int"):
        oracle_main(["--pool", "0", "--run-dir", str(tmp_path)])
    result_json = json.loads((tmp_path / "xland_oracle_oracle_s0" / "result.json").read_text())
    assert result_json["bigval"] == out["bigval/agent"]


def test_bigval_tasks_extend_the_validation_set_and_are_held_out():
    """--n-bigval measures on the validation tasks drawn after the first n_validation: the test set and the
    first validation tasks are the same as without it, the further ones are new and held out."""
    args = parse_args(["--seed", "3", "--n-test", "6", "--n-validation", "4"])
    space, test, validation = make_task_space(args)
    more_space, more_test, more_validation = make_task_space(dataclasses.replace(args, n_validation=4 + 5))
    assert [t.encode() for t in more_test] == [t.encode() for t in test]
    assert [t.encode() for t in more_validation[:4]] == [t.encode() for t in validation]
    extra = more_validation[4:]
    keys = {repr(t.encode()) for t in test + validation}
    assert len(extra) == 5 and not any(repr(t.encode()) in keys for t in extra)
    assert all(more_space.is_heldout(t) for t in extra)
    with pytest.raises(ValueError, match="--n-bigval must be >= 0"):
        check_args(dataclasses.replace(args, n_bigval=-1))
