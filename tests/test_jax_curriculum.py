"""The on-device PLR⊥/ACCEL/SFL functions match the Python curricula (magister.examples.minigrid_rm)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from magister.curricula.plr import RobustPLR  # noqa: E402
from magister.curricula.scoring import replay_distribution as np_replay_distribution  # noqa: E402
from magister.examples.minigrid_rm import curriculum as C  # noqa: E402
from magister.task_spaces.discrete import Discrete  # noqa: E402

_rank = jax.jit(C.rank_weights)
_power = jax.jit(C.power_weights)
_dist = jax.jit(C.replay_distribution, static_argnums=1)
_update = jax.jit(C.plr_update)
_mark = jax.jit(C.mark_sampled)


def _buffer(scores: np.ndarray, last: np.ndarray, clock: int, cap: int) -> C.Buffer:
    n = scores.size
    buf = C.init_buffer(jnp.zeros(1), cap)
    return buf._replace(
        scores=buf.scores.at[:n].set(jnp.asarray(scores, jnp.float32)),
        last_sampled=buf.last_sampled.at[:n].set(jnp.asarray(last, jnp.int32)),
        size=jnp.int32(n), clock=jnp.int32(clock))


def test_rank_weights_worked_example() -> None:
    # ranks 2, 1, 3 -> h = 1/2, 1, 1/3; sum 11/6 -> 3/11, 6/11, 2/11 ; padding entries get 0
    w = _rank(jnp.array([1.0, 5.0, 0.5, 9.0]), jnp.array([True, True, True, False]), 1.0)
    np.testing.assert_allclose(np.asarray(w), [3 / 11, 6 / 11, 2 / 11, 0.0], rtol=1e-6)
    # tie: ranks 2 and 3 share (1/2 + 1/3)/2 = 5/12 each; 1 + 5/6 = 11/6
    w = _rank(jnp.array([0.0, 5.0, 0.0]), jnp.array([True, True, True]), 1.0)
    np.testing.assert_allclose(np.asarray(w), [5 / 22, 12 / 22, 5 / 22], rtol=1e-6)


_stale = jax.jit(C.staleness_weights)
_CAP = 32


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30)), min_size=1, max_size=_CAP),
    temperature=st.sampled_from([0.1, 0.3, 1.0, 2.0]),
    rho=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    prio=st.sampled_from(["rank", "power"]),
    extra_clock=st.integers(0, 5),
)
def test_replay_distribution_matches_numpy(data, temperature, rho, prio, extra_clock) -> None:
    n = len(data)
    scores = np.zeros(_CAP)
    scores[:n] = [d[0] * 0.25 for d in data]  # few distinct values: many ties
    last = np.zeros(_CAP, dtype=np.int64)
    last[:n] = [d[1] for d in data]
    clock = int(last.max()) + extra_clock
    valid = jnp.arange(_CAP) < n
    fn = _rank if prio == "rank" else _power
    ps = np.asarray(fn(jnp.asarray(scores, jnp.float32), valid, jnp.float32(temperature)))
    pc = np.asarray(_stale(jnp.asarray(last, jnp.int32), jnp.int32(clock), valid))
    got = (1 - rho) * ps + rho * pc
    want = np_replay_distribution(scores[:n], last[:n], clock, temperature=temperature, staleness_coef=rho,
                                  prioritization=prio)
    np.testing.assert_allclose(got[:n], want, rtol=2e-5, atol=1e-7)
    assert np.all(got[n:] == 0.0)
    assert abs(got.sum() - 1.0) < 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_buffer_and_distribution_as_python_robust_plr(seed: int) -> None:
    """Drive the Python RobustPLR and the JAX buffer with the same samples and scores; compare states."""
    cap, k = 6, 4
    plr = RobustPLR(Discrete(40), buffer_size=cap, replay_prob=0.5, seed=seed)
    cfg = C.CurriculumConfig(buffer_size=cap, replay_prob=0.5)
    buf = C.init_buffer(jnp.zeros(1), cap)
    rng = np.random.default_rng(seed)
    for _ in range(25):
        # P(replay) and the replay distribution agree before sampling
        assert float(C.replay_probability(buf, cfg)) == pytest.approx(plr._replay_probability())
        if len(plr):
            np.testing.assert_allclose(np.asarray(_dist(buf, cfg))[: len(plr)], plr.replay_weights(),
                                       rtol=2e-5, atol=1e-7)
        samples = plr.sample_tasks(k)
        replay = np.array([s.train for s in samples])
        tasks = [int(s.task) for s in samples]
        pos = np.array([plr._pos[t] if r else 0 for t, r in zip(tasks, replay)], dtype=np.int32)
        buf = _mark(buf, jnp.asarray(pos), jnp.asarray(replay))
        scores = rng.integers(0, 5, size=k) * 0.5  # ties on purpose
        plr.update_scores(tasks, scores)
        buf = _update(buf, jnp.zeros((k, 1)), jnp.asarray(tasks, jnp.uint32), jnp.asarray(scores),
                      jnp.zeros(k))
        n = len(plr)
        assert int(buf.size) == n and int(buf.clock) == plr.clock
        assert np.asarray(buf.hashes)[:n].tolist() == plr.buffer_tasks()
        np.testing.assert_allclose(np.asarray(buf.scores)[:n], plr.buffer_scores())
        assert np.asarray(buf.last_sampled)[:n].tolist() == plr._buf_last[:n].tolist()


def test_insertion_rule_worked_example() -> None:
    buf = C.init_buffer(jnp.zeros(1), 2)
    buf = _update(buf, jnp.zeros((2, 1)), jnp.array([10, 11], jnp.uint32), jnp.array([0.3, 0.1]),
                  jnp.zeros(2))
    # full: 12 (0.1) is not strictly higher than the lowest (0.1) -> rejected; 13 (0.2) replaces 11
    buf = _update(buf, jnp.zeros((2, 1)), jnp.array([12, 13], jnp.uint32), jnp.array([0.1, 0.2]),
                  jnp.zeros(2))
    assert np.asarray(buf.hashes).tolist() == [10, 13]
    np.testing.assert_allclose(np.asarray(buf.scores), [0.3, 0.2])
    # a buffered problem gets its latest score, max_return merged with max
    buf = _update(buf, jnp.zeros((1, 1)), jnp.array([10], jnp.uint32), jnp.array([0.05]), jnp.array([1.0]))
    np.testing.assert_allclose(np.asarray(buf.scores), [0.05, 0.2])
    assert float(buf.max_return[0]) == 1.0
    # ties among the lowest: the stalest goes
    buf = buf._replace(scores=jnp.array([0.2, 0.2]), last_sampled=jnp.array([5, 3]))
    buf = _update(buf, jnp.zeros((1, 1)), jnp.array([14], jnp.uint32), jnp.array([0.9]), jnp.zeros(1))
    assert np.asarray(buf.hashes).tolist() == [10, 14]


def test_sampling_frequencies_follow_distribution() -> None:
    cap, b = 5, 40000
    cfg = C.CurriculumConfig(buffer_size=cap, replay_prob=0.5, staleness_coef=0.1)
    buf = _buffer(np.array([0.1, 0.9, 0.5, 0.5, 0.2]), np.array([0, 3, 1, 2, 2]), 4, cap)
    buf = buf._replace(levels=jnp.arange(cap, dtype=jnp.float32)[:, None])
    p = np.asarray(_dist(buf, cfg))
    new = -jnp.ones((b, 1))
    buf2, smp = jax.jit(C.plr_sample, static_argnums=3)(jax.random.PRNGKey(0), buf, new, cfg)
    vals = np.asarray(smp.problems)[:, 0]
    replay = np.asarray(smp.replay)
    assert abs(replay.mean() - 0.5) < 0.01
    assert np.array_equal(vals < 0, ~replay)
    assert np.array_equal(np.asarray(smp.train), replay)  # PLR⊥: only replays are trained on
    freq = np.bincount(vals[replay].astype(int), minlength=cap) / replay.sum()
    np.testing.assert_allclose(freq, p, atol=0.01)
    assert int(buf2.clock) == 4 + b
    # each replayed entry's clock is its last tick (position in the batch + 1 + old clock)
    last_tick = {int(v): 4 + 1 + i for i, v in enumerate(vals) if v >= 0}
    assert np.asarray(buf2.last_sampled).tolist() == [last_tick[i] for i in range(cap)]


def test_replay_probability_min_fill() -> None:
    cfg = C.CurriculumConfig(buffer_size=10, replay_prob=0.9, min_fill_ratio=0.5)
    assert float(C.replay_probability(_buffer(np.ones(4), np.zeros(4), 1, 10), cfg)) == 0.0
    assert float(C.replay_probability(_buffer(np.ones(5), np.zeros(5), 1, 10), cfg)) == pytest.approx(0.9)
    assert float(C.replay_probability(C.init_buffer(jnp.zeros(1), 10), C.CurriculumConfig(10))) == 0.0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="temperature"):
        C.CurriculumConfig(temperature=0.0)
    with pytest.raises(ValueError, match="score"):
        C.CurriculumConfig(score="regret")
    with pytest.raises(ValueError, match="min_edits"):
        C.accel_config(min_edits=5, max_edits=3)
    with pytest.raises(ValueError, match="buffer_size"):
        C.SFLConfig(batch_size=5, buffer_size=10)
    acc = C.accel_config()
    assert (acc.replay_prob, acc.min_edits, acc.max_edits, acc.score) == (0.9, 7, 10, "max_mc")


def test_rollout_scores_by_hand() -> None:
    values = jnp.array([[0.25, 0.0], [0.75, 0.5]])  # [T=2, B=2]
    adv = jnp.array([[1.0, -1.0], [-3.0, 2.0]])
    np.testing.assert_allclose(C.rollout_scores("max_mc", values, adv, jnp.array([1.0, 0.0]), None, None),
                               [0.5, -0.25])
    np.testing.assert_allclose(C.rollout_scores("positive_value_loss", values, adv, None, None, None),
                               [0.5, 1.0])
    np.testing.assert_allclose(C.rollout_scores("learnability", values, adv, None, jnp.array([1.0, 0.0]),
                                                jnp.array([2.0, 0.0])), [0.25, 0.0])


def test_sfl_refresh_and_sample() -> None:
    cfg = C.SFLConfig(batch_size=6, buffer_size=2, sample_ratio=1.0)
    cands = jnp.arange(6, dtype=jnp.float32)[:, None]
    st_ = C.sfl_refresh(jax.random.PRNGKey(0), cands, jnp.array([0.0, 0.5, 1.0, 0.9, 0.4, 0.1]), cfg)
    assert sorted(np.asarray(st_.problems)[:, 0].tolist()) == [1.0, 4.0]  # 0.25 and 0.24
    smp = C.sfl_sample(jax.random.PRNGKey(1), st_, -jnp.ones((100, 1)), cfg)
    assert set(np.asarray(smp.problems)[:, 0].tolist()) <= {1.0, 4.0} and bool(smp.train.all())


def test_problem_hash_distinguishes_problems() -> None:
    from magister.examples.minigrid_rm.probes import probe_set

    _, probs = probe_set()
    n = probs.rm.n_states.shape[0]
    # variants: one cell recoloured, the agent turned, one literal changed
    recol = probs._replace(level=probs.level._replace(colours=probs.level.colours.at[:, 1, 1].add(1)))
    turned = probs._replace(level=probs.level._replace(agent_dir=(probs.level.agent_dir + 1) % 4))
    lit = probs._replace(rm=probs.rm._replace(edge_lits=probs.rm.edge_lits.at[:, 0, 0].add(1)))
    hash_b = jax.jit(jax.vmap(C.problem_hash))
    hs = [np.asarray(hash_b(x)) for x in (probs, recol, turned, lit)]
    assert len(set(np.concatenate(hs).tolist())) == 4 * n
    assert np.array_equal(hs[0], np.asarray(hash_b(probs)))  # deterministic


def test_accel_children_come_first_and_are_evaluation_only() -> None:
    cap, b = 4, 6
    cfg = C.accel_config(buffer_size=cap, replay_prob=1.0)
    buf = _buffer(np.array([0.1, 0.2, 0.3, 0.4]), np.zeros(4), 1, cap)
    buf = buf._replace(levels=jnp.arange(cap, dtype=jnp.float32)[:, None])
    children = 100 + jnp.arange(b, dtype=jnp.float32)[:, None]
    has_child = jnp.array([True, False, True, False, False, True])
    sample = jax.jit(C.plr_sample, static_argnums=3)
    buf2, smp = sample(jax.random.PRNGKey(0), buf, -jnp.ones((b, 1)), cfg, children, has_child)
    vals = np.asarray(smp.problems)[:, 0]
    hc = np.asarray(has_child)
    assert np.array_equal(vals[hc], [100, 102, 105]) and np.all(vals[~hc] < cap)  # the rest: replays
    assert np.array_equal(np.asarray(smp.child), hc)
    assert np.array_equal(np.asarray(smp.train), ~hc) and np.array_equal(np.asarray(smp.replay), ~hc)
    assert int(buf2.clock) == 1 + b
