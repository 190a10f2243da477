"""SelfPlay, FSP and PFSP: schedules, exact PFSP probabilities, uniformity, outcomes, checkpoints, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.curricula.coplayer import OutcomeRule
from magister.curricula.fsp import FSP
from magister.curricula.pfsp import PFSP
from magister.curricula.self_play import SelfPlay
from magister.opponents import CURRENT_AGENT, OpponentStore


def jsave(obj, f):
    f.write(json.dumps(obj).encode())


def jload(f):
    return json.loads(f.read())


@pytest.fixture
def store(tmp_path):
    return OpponentStore(tmp_path, max_count=None, save_fn=jsave, load_fn=jload)


def with_snapshots(cur, n):
    """Store ``n`` snapshots (checkpoint_interval must be 1)."""
    return [cur.update_agent({"gen": g}) for g in range(n)]


# -- the outcome rule ---------------------------------------------------------------------------------------
def test_outcome_rule_default_and_margin():
    rule = OutcomeRule()
    assert [rule.learner_score_from_opponent_return(r) for r in (1.0, 0.0, -2.0)] == [0.0, 0.5, 1.0]
    assert [rule.learner_score_from_learner_return(r) for r in (1.0, 0.0, -2.0)] == [1.0, 0.5, 0.0]
    rule = OutcomeRule(threshold=5.0, draw_margin=1.0)
    assert [rule.learner_score_from_learner_return(r) for r in (6.5, 6.0, 4.0, 3.9)] == [1.0, 0.5, 0.5, 0.0]
    with pytest.raises(ValueError, match="draw_margin"):
        OutcomeRule(draw_margin=-1)
    with pytest.raises(ValueError, match="threshold"):
        OutcomeRule(threshold=float("nan"))


# -- update_agent schedule ----------------------------------------------------------------------------------
def test_checkpoint_schedule_first_call_then_every_interval(store):
    fsp = FSP(store, checkpoint_interval=3)
    assert [fsp.update_agent({"t": t}) for t in range(8)] == [0, None, None, 1, None, None, 2, None]
    assert store.ids() == [0, 1, 2] and store.load(1) == {"t": 3}
    assert fsp.num_updates == 8


def test_defaults_are_the_papers(store):
    fsp, pfsp = FSP(store), PFSP(store)
    assert fsp.checkpoint_interval == 800 and pfsp.checkpoint_interval == 800
    assert pfsp.weighting == "hard" and pfsp.exponent == 2.0 and pfsp.smoothing == 0.01 and pfsp.memory == 128


def test_snapshot_of_torch_module_and_get_opponent(tmp_path):
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(2, 2)
    fsp = FSP(OpponentStore(tmp_path, max_count=4), checkpoint_interval=1,
              make_agent=lambda sd: ("net", float(sd["weight"].sum())))
    assert fsp.update_agent(net) == 0
    assert fsp.get_opponent(0) == ("net", pytest.approx(float(net.weight.detach().sum())))
    assert fsp.get_opponent(CURRENT_AGENT) is net
    with pytest.raises(KeyError, match=r"opponent id 3 .*known ids: \[0\]"):
        fsp.get_opponent(3)


# -- FSP ----------------------------------------------------------------------------------------------------
def test_fsp_is_uniform_over_the_store(store):
    fsp = FSP(store, checkpoint_interval=1, seed=3)
    with_snapshots(fsp, 4)
    assert np.array_equal(fsp.distribution(), np.full(4, 0.25))
    n = 40_000
    counts = np.bincount(fsp.sample(n), minlength=4)
    sigma = np.sqrt(n * 0.25 * 0.75)
    assert np.all(np.abs(counts - n / 4) < 4 * sigma)
    chi2 = float(((counts - n / 4) ** 2 / (n / 4)).sum())
    assert chi2 < 16.3  # 99.9% quantile of chi-square with 3 degrees of freedom
    assert fsp.num_sampled == n


def test_fsp_follows_store_eviction(tmp_path):
    store = OpponentStore(tmp_path, max_count=3, save_fn=jsave, load_fn=jload)
    fsp = FSP(store, checkpoint_interval=1, seed=0)
    with_snapshots(fsp, 5)
    assert fsp.opponent_ids() == [2, 3, 4]
    assert set(fsp.sample(300)) == {2, 3, 4}
    assert fsp.task_space.tasks == [2, 3, 4]


def test_sampling_before_any_snapshot_is_a_clear_error(store):
    with pytest.raises(RuntimeError, match="update_agent"):
        FSP(store).sample()
    with pytest.raises(RuntimeError, match="update_agent"):
        PFSP(store).distribution()


# -- PFSP: exact distributions ------------------------------------------------------------------------------
def script_results(cur):
    """Learner win rates: opponent 0 -> 3/4, opponent 1 -> 1/4, opponent 2 -> 1."""
    for r in (-1.0, -1.0, 1.0, -1.0):  # opponent's returns: learner wins 3, loses 1
        cur.update_winrate(0, r)
    for r in (1.0, 1.0, -1.0, 1.0):
        cur.update_winrate(1, r)
    for r in (-1.0, -1.0):
        cur.update_winrate(2, r)


def test_pfsp_hard_distribution_by_hand(store):
    pfsp = PFSP(store, checkpoint_interval=1)
    with_snapshots(pfsp, 3)
    script_results(pfsp)
    assert pfsp.winrates().tolist() == [0.75, 0.25, 1.0]
    # (1 - x)^2 + 0.01 = 0.0725, 0.5725, 0.01; total 0.655
    expected = np.array([0.0725, 0.5725, 0.01]) / 0.655
    np.testing.assert_allclose(pfsp.distribution(), expected, rtol=1e-12)
    # the smoothing constant is what keeps the always-beaten opponent 2 alive
    assert pfsp.distribution()[2] == pytest.approx(0.01 / 0.655)


def test_pfsp_var_distribution_by_hand(store):
    pfsp = PFSP(store, checkpoint_interval=1, weighting="var")
    with_snapshots(pfsp, 3)
    script_results(pfsp)
    # x(1 - x) + 0.01 = 0.1975, 0.1975, 0.01; total 0.405
    np.testing.assert_allclose(pfsp.distribution(), np.array([0.1975, 0.1975, 0.01]) / 0.405, rtol=1e-12)


def test_pfsp_exponent_smoothing_initial_and_draws(store):
    pfsp = PFSP(store, checkpoint_interval=1, exponent=1.0, smoothing=0.0)
    with_snapshots(pfsp, 3)
    pfsp.update_winrate(0, 0.0)  # a draw: x = 0.5
    pfsp.update_winrate(1, -3.0)  # learner win: x = 1 -> weight 0
    # opponent 2 unplayed: x = initial 0.5. Weights (1 - x)^1: 0.5, 0, 0.5
    np.testing.assert_allclose(pfsp.distribution(), [0.5, 0.0, 0.5])
    assert 1 not in pfsp.sample(200)


def test_pfsp_memory_keeps_last_results(store):
    pfsp = PFSP(store, checkpoint_interval=1, memory=2)
    with_snapshots(pfsp, 2)
    for r in (1.0, 1.0, -1.0, 1.0):  # learner: loss, loss, win, loss -> last two: win, loss
        pfsp.update_winrate(0, r)
    assert pfsp.winrate(0) == 0.5
    pfsp.update_winrate(0, -1.0)  # loss, win -> last two: loss, win
    assert pfsp.winrate(0) == 0.5
    pfsp.update_winrate(0, -1.0)
    assert pfsp.winrate(0) == 1.0


def test_pfsp_custom_weighting_callable(store):
    pfsp = PFSP(store, checkpoint_interval=1, weighting=lambda x: 1.0 - x, smoothing=0.5)
    with_snapshots(pfsp, 2)
    pfsp.update_winrate(0, -1.0)  # x0 = 1 -> 0 + 0.5 ; x1 = 0.5 -> 0.5 + 0.5
    np.testing.assert_allclose(pfsp.distribution(), [1 / 3, 2 / 3])
    bad = PFSP(store, weighting=lambda x: x - 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        bad.distribution()


def test_first_snapshot_probability_falls_as_wins_accumulate(store):
    pfsp = PFSP(store, checkpoint_interval=1)
    with_snapshots(pfsp, 3)
    for _ in range(4):  # learner loses to the first snapshot 4 times: x0 = 0
        pfsp.update_on_episode(-1.0, 10, 0, 0.0)
    probs = [pfsp.distribution()[0]]
    for _ in range(20):  # then wins against it: x0 = w / (4 + w)
        pfsp.update_on_episode(1.0, 10, 0, 0.0)
        probs.append(pfsp.distribution()[0])
    assert all(b < a for a, b in zip(probs, probs[1:]))
    x = 20 / 24
    w0 = (1 - x) ** 2 + 0.01
    assert probs[-1] == pytest.approx(w0 / (w0 + 2 * 0.26))
    assert pfsp.num_episodes == 24 and pfsp.num_steps == 240


def test_pfsp_samples_follow_distribution(store):
    pfsp = PFSP(store, checkpoint_interval=1, seed=11)
    with_snapshots(pfsp, 3)
    script_results(pfsp)
    n = 30_000
    freq = np.bincount(pfsp.sample(n), minlength=3) / n
    p = pfsp.distribution()
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-12)


@given(results=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([-1.0, 0.0, 1.0])), max_size=60),
       memory=st.integers(1, 8), weighting=st.sampled_from(["hard", "var"]),
       smoothing=st.sampled_from([0.01, 0.1, 1.0]))
def test_pfsp_matches_formula(tmp_path_factory, results, memory, weighting, smoothing):
    store = OpponentStore(tmp_path_factory.mktemp("p"), max_count=None, save_fn=jsave, load_fn=jload)
    pfsp = PFSP(store, checkpoint_interval=1, memory=memory, weighting=weighting, smoothing=smoothing)
    with_snapshots(pfsp, 4)
    history: dict[int, list[float]] = {i: [] for i in range(4)}
    for opp, r in results:
        pfsp.update_winrate(opp, r)
        history[opp].append(1.0 if r < 0 else 0.0 if r > 0 else 0.5)
    x = np.array([np.mean(h[-memory:]) if h else 0.5 for h in history.values()])
    f = (1 - x) ** 2 if weighting == "hard" else x * (1 - x)
    w = f + smoothing
    np.testing.assert_allclose(pfsp.distribution(), w / w.sum(), rtol=1e-12)


# -- results: routing and bad input -------------------------------------------------------------------------
def test_results_for_evicted_unknown_and_bad_ids(tmp_path):
    store = OpponentStore(tmp_path, max_count=1, save_fn=jsave, load_fn=jload)
    pfsp = PFSP(store, checkpoint_interval=1)
    with_snapshots(pfsp, 2)  # 0 evicted
    pfsp.update_winrate(0, 1.0)  # late feedback for an evicted opponent: dropped
    assert pfsp.num_results == 0
    with pytest.raises(KeyError, match=r"opponent id 9 .*known ids: \[1\]"):
        pfsp.update_winrate(9, 1.0)
    with pytest.raises(TypeError, match="must be an int"):
        pfsp.update_winrate(1.0, 1.0)
    with pytest.raises(ValueError, match="opponent_return must be finite"):
        pfsp.update_winrate(1, float("nan"))
    with pytest.raises(ValueError, match="episode_return must be finite"):
        pfsp.update_on_episode(float("inf"), 3, 1, 0.0)
    assert pfsp.num_results == 0


def test_custom_outcome_rule(store):
    class ScoreRule(OutcomeRule):
        """The learner's return is its score already."""

        def learner_score_from_learner_return(self, learner_return):
            return learner_return

    pfsp = PFSP(store, checkpoint_interval=1, outcome_rule=ScoreRule())
    with_snapshots(pfsp, 1)
    pfsp.update_on_episode(0.25, 1, 0, 0.0)
    pfsp.update_on_episode(0.75, 1, 0, 0.0)
    assert pfsp.winrate(0) == 0.5
    with pytest.raises(ValueError, match=r"scores must be in \[0, 1\]"):
        pfsp.update_on_episode(2.0, 1, 0, 0.0)
    with pytest.raises(TypeError, match="OutcomeRule"):
        PFSP(store, outcome_rule=lambda r: r)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"checkpoint_interval": 0}, "checkpoint_interval"),
        ({"smoothing": -0.1}, "smoothing"),
        ({"exponent": 0.0}, "exponent"),
        ({"weighting": "soft"}, "weighting"),
        ({"memory": 0}, "memory"),
        ({"initial_winrate": 1.5}, "initial_winrate"),
    ],
)
def test_pfsp_bad_arguments(store, kwargs, match):
    with pytest.raises(ValueError, match=match):
        PFSP(store, **kwargs)


def test_store_is_required(tmp_path):
    with pytest.raises(TypeError, match="OpponentStore"):
        FSP(None)
    with pytest.raises(TypeError, match="OpponentStore"):
        PFSP(str(tmp_path))


# -- SelfPlay -----------------------------------------------------------------------------------------------
def test_self_play_in_process():
    sp = SelfPlay()
    assert sp.sample(4) == [CURRENT_AGENT] * 4
    with pytest.raises(RuntimeError, match="update_agent"):
        sp.get_opponent(CURRENT_AGENT)
    agent = object()
    assert sp.update_agent(agent) is None
    assert sp.get_opponent(-1) is agent
    assert sp.distribution().tolist() == [1.0]
    sp.update_winrate(-1, -1.0)
    assert sp.winrate(-1) == 1.0
    with pytest.raises(KeyError, match="opponent id 0"):
        sp.get_opponent(0)
    with pytest.raises(KeyError, match="opponent id 2"):
        sp.update_winrate(2, 1.0)


def test_self_play_with_store_serves_latest(tmp_path):
    store = OpponentStore(tmp_path, max_count=2, save_fn=jsave, load_fn=jload)
    sp = SelfPlay(store)
    with pytest.raises(RuntimeError, match="update_agent"):
        sp.sample()
    for g in range(3):
        assert sp.update_agent({"gen": g}) == g
        assert sp.sample(2) == [g, g]
    assert sp.get_opponent(2) == {"gen": 2}
    assert sp.distribution().tolist() == [0.0, 1.0]  # over store ids [1, 2]
    sp.update_on_episode(1.0, 5, 2, 1.0)
    assert sp.metrics()["curriculum/winrate/2"] == 1.0


# -- checkpointing and metrics ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [FSP, PFSP, SelfPlay])
def test_state_dict_round_trip_gives_identical_samples(store, cls):
    cur = cls(store, checkpoint_interval=2, seed=5)
    for g in range(7):
        cur.update_agent({"gen": g})
    for i, r in zip([0, 1, 1, 2, 3, 3, 3], [-1.0, 1.0, 0.0, -1.0, 1.0, 1.0, -1.0]):
        if i in cur.opponent_ids():
            cur.update_winrate(i, r)
    cur.sample(5)
    state = json.loads(json.dumps(cur.state_dict()))  # plain data, survives JSON
    fresh = cls(store, checkpoint_interval=2, seed=999)
    fresh.load_state_dict(state)
    assert fresh.sample(50) == cur.sample(50)
    np.testing.assert_array_equal(fresh.distribution(), cur.distribution())
    assert fresh.num_updates == 7 and fresh.num_results == cur.num_results
    # the checkpoint schedule continues where it stopped: call 8 stores nothing, call 9 stores
    assert fresh.update_agent({"gen": 7}) is None and fresh.update_agent({"gen": 8}) == 4


def test_load_state_dict_of_another_class_fails(store):
    with pytest.raises(ValueError, match="state_dict is for 'FSP'"):
        PFSP(store).load_state_dict(FSP(store).state_dict())


def test_metrics(store):
    pfsp = PFSP(store, checkpoint_interval=1)
    with_snapshots(pfsp, 3)
    script_results(pfsp)
    pfsp.sample(7)
    m = pfsp.metrics()
    p = np.array([0.0725, 0.5725, 0.01]) / 0.655
    assert m["curriculum/entropy"] == pytest.approx(float(-(p * np.log(p)).sum()))
    assert m["curriculum/max_prob"] == pytest.approx(0.5725 / 0.655)
    assert m["curriculum/store_size"] == 3.0 and m["curriculum/sampled"] == 7.0
    assert [m[f"curriculum/winrate/{i}"] for i in range(3)] == [0.75, 0.25, 1.0]
    assert m["curriculum/mean_winrate"] == pytest.approx(2 / 3)
    assert m["curriculum/results"] == 10.0 and m["curriculum/agent_updates"] == 3.0
    assert "curriculum/entropy" not in PFSP(OpponentStore(store.directory / "empty", max_count=1)).metrics()


# -- per-agent returns from multi-agent envs --------------------------------------------------------------
def test_outcome_from_episode_extras(caplog):
    rule = OutcomeRule(opponent_agent="p1")
    returns = {"agent_returns": {"p0": -1.0, "p1": 1.0}}
    assert rule.learner_score_from_episode(0.0, returns) == 0.0  # the opponent won
    assert OutcomeRule(learner_agent="p0").learner_score_from_episode(0.0, returns) == 0.0
    assert OutcomeRule(learner_agent="p1").learner_score_from_episode(0.0, returns) == 1.0
    # an explicit opponent return wins over everything else
    assert rule.learner_score_from_episode(0.0, {**returns, "opponent_return": -2.0}) == 1.0
    with pytest.raises(KeyError, match=r"agent 'p1' is not in .*\['a', 'b'\]"):
        rule.learner_score_from_episode(0.0, {"agent_returns": {"a": 1.0, "b": 0.0}})
    with pytest.raises(ValueError, match="not both"):
        OutcomeRule(learner_agent="a", opponent_agent="b")
    with pytest.raises(ValueError, match="must be finite"):
        rule.learner_score_from_episode(0.0, {"agent_returns": {"p1": float("nan")}})
    plain = OutcomeRule()
    with caplog.at_level("WARNING"):
        assert plain.learner_score_from_episode(2.0, returns) == 1.0  # summed return, with a warning
    assert "names neither" in caplog.text


def test_pfsp_episode_update_reads_extras(store):
    pfsp = PFSP(store, checkpoint_interval=1, outcome_rule=OutcomeRule(opponent_agent="p1"))
    with_snapshots(pfsp, 2)
    pfsp.update_on_episode(0.0, 9, 0, 0.0, extras={"agent_returns": {"p0": 1.0, "p1": -1.0}})
    pfsp.update_on_episode(0.0, 9, 1, 0.0, extras={"opponent_return": 1.0})
    pfsp.update_on_episode(1.0, 9, 1, 0.0)  # no extras: the learner's return
    assert pfsp.winrate(0) == 1.0 and pfsp.winrate(1) == 0.5


@given(r=st.floats(-1e6, 1e6), margin=st.floats(0, 10))
def test_outcome_rule_zero_sum_symmetry(r, margin):
    """In a zero-sum game the opponent's return r and the learner's return -r give the same score."""
    rule = OutcomeRule(draw_margin=margin)
    score = rule.learner_score_from_opponent_return(r)
    assert score == rule.learner_score_from_learner_return(-r)
    assert score in (0.0, 0.5, 1.0)
    assert (score == 0.5) == (abs(r) <= margin)


def test_fixed_opponents_added_to_the_store_are_sampled(store):
    """A scripted opponent put in the store by hand (and pinned) is part of FSP's population."""
    scripted = store.add({"kind": "random-policy"})
    store.pin(scripted)
    fsp = FSP(store, checkpoint_interval=1, seed=0)
    fsp.update_agent({"gen": 0})
    assert fsp.opponent_ids() == [0, 1] and fsp.get_opponent(0) == {"kind": "random-policy"}
    assert set(fsp.sample(100)) == {0, 1}
