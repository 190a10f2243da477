"""magister.curricula.jax gives the Python curricula's replay distributions and buffer updates.

The same scores, staleness and samples are fed to the Python class and to its on-device twin; after every
step the replay probability, the replay / sampling distribution and the buffer contents must agree (to
float32 precision: the JAX functions compute in float32, the classes in float64). Skipped without jax.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from magister.curricula import ACCEL, PLR, SFL, DomainRandomization, LearningProgress, RobustPLR  # noqa: E402
from magister.curricula import jax as J  # noqa: E402
from magister.curricula.jax.learning_progress import learning_progress as jax_learning_progress  # noqa: E402
from magister.curricula.sfl import top_k_learnable  # noqa: E402
from magister.task_spaces.discrete import Discrete  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ATOL, RTOL = 1e-6, 1e-5

# cached jitted entry points (configs are static: one compilation per distinct config and shape)
_dist = jax.jit(J.replay_distribution, static_argnums=1)
_p_replay = jax.jit(J.replay_probability, static_argnums=1)
_update = jax.jit(J.plr_update)
_mark = jax.jit(J.mark_sampled)
_refresh = jax.jit(J.sfl_refresh, static_argnums=3)
_lp_observe = jax.jit(J.lp_observe, static_argnums=3)
_lp_evaluate = jax.jit(J.lp_evaluate, static_argnums=2)
_lp_dist = jax.jit(J.lp_distribution, static_argnums=1)


# ---------------------------------------------------------------------------------------------------
# Same hyperparameters and defaults
# ---------------------------------------------------------------------------------------------------
def _defaults(cls: type) -> dict[str, object]:
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("cls, cfg", [(PLR, J.PLRConfig), (RobustPLR, J.RobustPLRConfig),
                                      (ACCEL, J.ACCELConfig), (SFL, J.SFLConfig),
                                      (LearningProgress, J.LearningProgressConfig)])
def test_configs_have_the_python_classes_names_and_defaults(cls: type, cfg: type) -> None:
    py = _defaults(cls)
    fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    only_jax = {"num_levels"}  # the class reads it from its task space
    if "robust" in fields and "robust" not in py:  # RobustPLR and ACCEL fix it
        assert fields["robust"] is True
        only_jax.add("robust")
    shared = set(fields) - only_jax
    assert shared <= set(py), f"{cfg.__name__} fields not in {cls.__name__}: {shared - set(py)}"
    for name in shared:
        assert fields[name] == py[name], (cfg.__name__, name, fields[name], cls.__name__, py[name])
    # the hyperparameters of the algorithm itself all have a twin (not the Python-only extras)
    python_only = {"seed", "window", "mutate_fn", "mutate_on", "max_pending", "method", "unseen_weight",
                   "floor_all", "keep_buffer", "success_window", "prior_strength"}
    assert set(py) - python_only <= set(fields), set(py) - python_only - set(fields)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="num_levels"):
        J.PLRConfig()  # replay_prob=None needs the number of levels
    with pytest.raises(ValueError, match="temperature"):
        J.RobustPLRConfig(temperature=0.0)
    with pytest.raises(ValueError, match="prioritization"):
        J.RobustPLRConfig(prioritization="softmax")
    with pytest.raises(ValueError, match="min_edits"):
        J.ACCELConfig(min_edits=4, max_edits=2)
    with pytest.raises(ValueError, match="buffer_size"):
        J.SFLConfig(batch_size=4, buffer_size=5)
    with pytest.raises(ValueError, match="variant"):
        J.LearningProgressConfig(variant="offline")
    with pytest.raises(ValueError, match="buffer_size"):
        J.init_buffer(jnp.zeros(2), 0)
    with pytest.raises(ValueError, match="capacity"):
        J.plr_sample(jax.random.PRNGKey(0), J.init_buffer(jnp.zeros(2), 5), jnp.zeros((3, 2)),
                     J.RobustPLRConfig(buffer_size=6))
    with pytest.raises(ValueError, match="success_rates"):
        J.sfl_refresh(jax.random.PRNGKey(0), jnp.arange(5), jnp.zeros(4),
                      J.SFLConfig(batch_size=5, buffer_size=2))


# ---------------------------------------------------------------------------------------------------
# PLR / PLR⊥: replay probability, replay distribution and buffer after the same samples and scores
# ---------------------------------------------------------------------------------------------------
def _compare_buffers(buf: J.LevelBuffer, plr: PLR) -> None:
    n = len(plr)
    assert int(buf.size) == n and int(buf.clock) == plr.clock
    assert np.asarray(buf.hashes)[:n].tolist() == plr.buffer_tasks()
    np.testing.assert_allclose(np.asarray(buf.scores)[:n], plr.buffer_scores(), rtol=RTOL, atol=ATOL)
    assert np.asarray(buf.last_sampled)[:n].tolist() == plr._buf_last[:n].tolist()


def _drive(plr: PLR, cfg: J.PLRConfig, batches: list[list[float]]) -> None:
    """Feed ``plr`` and a JAX buffer the same samples and scores; compare before and after each batch."""
    buf = J.init_buffer(jnp.zeros(1), cfg.capacity)
    for scores in batches:
        assert float(_p_replay(buf, cfg)) == pytest.approx(plr._replay_probability(), abs=1e-6)
        if len(plr):
            np.testing.assert_allclose(np.asarray(_dist(buf, cfg))[: len(plr)], plr.replay_weights(),
                                       rtol=RTOL, atol=ATOL)
        k = len(scores)
        in_buffer = set(plr.buffer_tasks())
        samples = plr.sample_tasks(k)
        tasks = [int(s.task) for s in samples]
        # a Python replay is a buffered task (new tasks are drawn from outside the buffer)
        replay = np.array([t in in_buffer for t in tasks])
        if plr.robust:
            assert [s.train for s in samples] == replay.tolist()  # PLR⊥: only replays are trained on
        pos = np.array([plr._pos[t] if r else 0 for t, r in zip(tasks, replay)], dtype=np.int32)
        buf = _mark(buf, jnp.asarray(pos), jnp.asarray(replay))
        plr.update_scores(tasks, scores)
        buf = _update(buf, jnp.zeros((k, 1)), jnp.asarray(tasks, jnp.uint32),
                      jnp.asarray(scores, jnp.float32), jnp.zeros(k))
        _compare_buffers(buf, plr)


_score = st.one_of(st.integers(0, 4).map(lambda i: i * 0.5),  # ties on purpose
                   # float32 values (what the device holds); subnormals excluded: XLA flushes them to 0
                   st.floats(0.0, 3.0, allow_nan=False, allow_subnormal=False, width=32))


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.lists(_score, min_size=1, max_size=4), min_size=1, max_size=10),
    robust=st.booleans(),
    prioritization=st.sampled_from(["rank", "power"]),
    temperature=st.sampled_from([0.3, 1.0]),
    staleness_coef=st.sampled_from([0.0, 0.3]),
    replay_prob=st.sampled_from([0.5, 1.0]),
    min_fill_ratio=st.sampled_from([0.0, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_plr_matches_python(batches, robust, prioritization, temperature, staleness_coef, replay_prob,
                            min_fill_ratio, seed) -> None:
    cap = 5
    kw = dict(buffer_size=cap, replay_prob=replay_prob, temperature=temperature,
              staleness_coef=staleness_coef, prioritization=prioritization, min_fill_ratio=min_fill_ratio)
    plr = PLR(Discrete(40), robust=robust, seed=seed, **kw)
    cfg = J.PLRConfig(robust=robust, **kw)
    _drive(plr, cfg, batches)


@settings(max_examples=15, deadline=None)
@given(batches=st.lists(st.lists(_score, min_size=1, max_size=3), min_size=1, max_size=8),
       seed=st.integers(0, 2**16))
def test_original_plr_replay_schedule_matches_python(batches, seed) -> None:
    """replay_prob=None: P_replay = n_seen / num_levels, and 1 once every level is buffered."""
    n = 6
    plr = PLR(Discrete(n), buffer_size=8, seed=seed)  # capacity min(8, 6) = 6: nothing is ever evicted
    cfg = J.PLRConfig(buffer_size=8, num_levels=n)
    assert cfg.capacity == plr.capacity == n
    _drive(plr, cfg, batches)


@pytest.mark.parametrize("seed", [0, 1])
def test_robust_plr_defaults_match_python_on_a_long_run(seed: int) -> None:
    """RobustPLR() and RobustPLRConfig() (every default but the buffer), 60 batches of 4 with evictions."""
    rng = np.random.default_rng(seed)
    plr = RobustPLR(Discrete(500), buffer_size=12, seed=seed)
    cfg = J.RobustPLRConfig(buffer_size=12)
    _drive(plr, cfg, [list(rng.normal(size=4)) for _ in range(60)])


def _reference_update(buf: dict, items: list[tuple]) -> dict:
    """The insertion rule of ``PLR.update_scores``, one level at a time, in plain Python."""
    b = {k: list(v) if isinstance(v, list) else v for k, v in buf.items()}
    cap = len(b["scores"])
    for h, s, r, g, e, m in items:
        n = b["size"]
        at = [i for i in range(n) if b["hashes"][i] == h]
        if at:
            if m:
                b["scores"][at[0]] = s
                b["max_return"][at[0]] = max(b["max_return"][at[0]], r)
            continue
        if n < cap:
            pos = n
        else:
            low = min(b["scores"])
            if not s > low:
                continue
            tied = [i for i in range(cap) if b["scores"][i] == low]
            pos = min(tied, key=lambda i: (b["last"][i], i))
        if not m:
            continue
        b["scores"][pos], b["max_return"][pos], b["hashes"][pos] = s, r, h
        b["last"][pos], b["gen"][pos], b["edits"][pos] = b["clock"], g, e
        b["size"] = min(n + 1, cap)
    return b


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(1, 6),
    first=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), min_size=0, max_size=8),
    batch=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.booleans()), min_size=1, max_size=12),
    stale=st.lists(st.integers(0, 5), min_size=6, max_size=6),
)
def test_buffer_update_matches_the_sequential_rule(cap, first, batch, stale) -> None:
    """Duplicates within a batch, masked levels, evictions and ties: the vectorised-lookup scan of
    ``update_buffer`` gives exactly the sequential rule."""
    buf = J.init_buffer(jnp.int32(0), cap)
    if first:
        h0 = jnp.asarray([f[0] for f in first], jnp.uint32)
        buf = _update(buf, h0.astype(jnp.int32), h0, jnp.asarray([f[1] * 0.5 for f in first]))
    buf = buf._replace(last_sampled=jnp.asarray(stale[:cap], jnp.int32), clock=jnp.int32(7))
    ref = {"scores": np.asarray(buf.scores).tolist(), "hashes": np.asarray(buf.hashes).tolist(),
           "last": np.asarray(buf.last_sampled).tolist(), "max_return": np.asarray(buf.max_return).tolist(),
           "gen": np.asarray(buf.generation).tolist(), "edits": np.asarray(buf.num_edits).tolist(),
           "size": int(buf.size), "clock": 7}
    items = [(h, s * 0.5, float(i), i + 1, 2 * i, m) for i, (h, s, m) in enumerate(batch)]
    want = _reference_update(ref, items)
    k = len(batch)
    got = _update(buf, jnp.asarray([it[0] for it in items], jnp.int32), jnp.asarray([it[0] for it in items],
                  jnp.uint32), jnp.asarray([it[1] for it in items]), jnp.asarray([it[2] for it in items]),
                  jnp.asarray([it[3] for it in items]), jnp.asarray([it[4] for it in items]),
                  jnp.asarray([it[5] for it in items]))
    n = want["size"]
    assert int(got.size) == n and k > 0
    assert np.asarray(got.hashes)[:n].tolist() == want["hashes"][:n]
    assert np.asarray(got.scores)[:n].tolist() == want["scores"][:n]
    assert np.asarray(got.max_return)[:n].tolist() == want["max_return"][:n]
    assert np.asarray(got.last_sampled)[:n].tolist() == want["last"][:n]
    assert np.asarray(got.generation)[:n].tolist() == want["gen"][:n]
    assert np.asarray(got.num_edits)[:n].tolist() == want["edits"][:n]
    assert np.asarray(got.levels)[:n].tolist() == want["hashes"][:n]


# ---------------------------------------------------------------------------------------------------
# SFL: the same top-K buffer and sampling distribution
# ---------------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(rates=st.lists(st.integers(0, 8).map(lambda i: i / 8), min_size=4, max_size=24),
       k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_sfl_top_k_matches_python(rates, k, seed) -> None:
    n = len(rates)
    assume(k <= n)
    p = np.asarray(rates)
    cfg = J.SFLConfig(batch_size=n, buffer_size=k)
    state = _refresh(jax.random.PRNGKey(seed), jnp.arange(n), jnp.asarray(p, jnp.float32), cfg)
    best = top_k_learnable(p * (1 - p), k, np.random.default_rng(seed))
    # the same learnability values, best first (ties at the boundary may pick different, equal levels)
    np.testing.assert_allclose(np.asarray(state.learnability), (p * (1 - p))[best], atol=ATOL)
    chosen = np.asarray(state.levels)
    np.testing.assert_allclose(p[chosen] * (1 - p[chosen]), (p * (1 - p))[best], atol=ATOL)
    assert len(set(chosen.tolist())) == k


@settings(max_examples=25, deadline=None)
@given(rates=st.lists(st.floats(0.0, 1.0, width=32), min_size=3, max_size=12), k=st.integers(1, 3),
       sample_ratio=st.sampled_from([0.5, 1.0]), seed=st.integers(0, 2**16))
def test_sfl_distribution_matches_python(rates, k, sample_ratio, seed) -> None:
    n = len(rates)
    assume(k <= n)
    p = np.asarray(rates)
    sfl = SFL(Discrete(n), batch_size=4 * n, buffer_size=k, sample_ratio=sample_ratio, seed=seed)
    sfl.update_on_demand({"success_rates": p})  # evaluation: exact p(1 - p), then a refresh
    # the refresh's candidates, replayed from the class's generator (the class draws them first)
    cand = np.unique(np.random.default_rng(seed).integers(n, size=4 * n))
    assert set(sfl.buffer.tolist()) <= set(cand.tolist())
    cfg = J.SFLConfig(batch_size=cand.size, buffer_size=min(k, cand.size), sample_ratio=sample_ratio)
    state = _refresh(jax.random.PRNGKey(seed), jnp.asarray(cand), jnp.asarray(p[cand], jnp.float32), cfg)
    learn = p * (1 - p)
    np.testing.assert_allclose(np.sort(learn[np.asarray(state.levels)]), np.sort(learn[sfl.buffer]),
                               atol=ATOL)
    # sampling distribution over the tasks: P(entry) per buffer entry plus P(new) spread by the generator
    # (uniform over the n tasks here); equal whenever no tie straddles the top-K boundary
    srt = np.sort(learn[cand])[::-1]
    assume(cfg.buffer_size == cand.size or srt[cfg.buffer_size - 1] != srt[cfg.buffer_size])
    p_entry, p_new = J.sfl_distribution(cfg)
    got = np.full(n, float(p_new) / n)
    np.add.at(got, np.asarray(state.levels), np.asarray(p_entry))
    np.testing.assert_allclose(got, sfl.distribution(), atol=ATOL)


# ---------------------------------------------------------------------------------------------------
# Learning progress: the same EMAs and distribution after the same observations
# ---------------------------------------------------------------------------------------------------
def _compare_lp(state: J.LPState, lp: LearningProgress, cfg: J.LearningProgressConfig) -> None:
    np.testing.assert_allclose(np.asarray(state.fast), lp.fast, atol=ATOL)
    np.testing.assert_allclose(np.asarray(state.slow), lp.slow, atol=ATOL)
    assert np.asarray(state.seen).tolist() == lp.seen.tolist()
    assert int(state.num_ema_steps) == lp.num_ema_steps
    # the z-score divides by the spread of the active LPs: where it is rounding noise (LPs tied but for the
    # last bits, in float64 or float32), either implementation amplifies that noise; compare the others
    for lpv, fast in ((lp.learning_progress(), lp.fast),
                      (np.asarray(jax_learning_progress(state, cfg)), np.asarray(state.fast))):
        active = (lpv > 0) | (fast > 0)
        if active.sum() > 1 and 0 < lpv[active].std() < 1e-5:
            return
    np.testing.assert_allclose(np.asarray(_lp_dist(state, cfg)), lp.distribution(), atol=ATOL, rtol=RTOL)


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4).map(lambda i: i / 4)),
                              min_size=1, max_size=6), min_size=1, max_size=8),
    update_period=st.sampled_from([1, 3, 5]),
    min_observations=st.sampled_from([1, 2]),
    explore_mix=st.sampled_from([None, 0.0, 0.3]),
    uniform_mix=st.sampled_from([0.0, 0.1]),
)
def test_learning_progress_online_matches_python(batches, update_period, min_observations, explore_mix,
                                                 uniform_mix) -> None:
    n = 6
    kw = dict(update_period=update_period, min_observations=min_observations, explore_mix=explore_mix,
              uniform_mix=uniform_mix)
    lp = LearningProgress(Discrete(n), seed=0, **kw)
    cfg = J.LearningProgressConfig(**kw)
    state = J.lp_init(n)
    for obs in batches:
        for t, v in obs:
            lp.update_task_progress(t, v)
        tasks = jnp.asarray([t for t, _ in obs], jnp.int32)
        state = _lp_observe(state, tasks, jnp.asarray([v for _, v in obs], jnp.float32), cfg)
        assert int(state.pending) == lp._pending
        _compare_lp(state, lp, cfg)


@settings(max_examples=20, deadline=None)
@given(
    evals=st.lists(st.tuples(st.lists(st.integers(0, 4).map(lambda i: i / 4), min_size=5, max_size=5),
                             st.lists(st.booleans(), min_size=5, max_size=5)), min_size=1, max_size=6),
    ema_alpha=st.sampled_from([0.1, 0.5]),
    p_theta=st.sampled_from([0.1, 0.3]),
)
def test_learning_progress_evaluation_matches_python(evals, ema_alpha, p_theta) -> None:
    n = 5
    lp = LearningProgress(Discrete(n), variant="evaluation", ema_alpha=ema_alpha, p_theta=p_theta, seed=0)
    cfg = J.LearningProgressConfig(variant="evaluation", ema_alpha=ema_alpha, p_theta=p_theta)
    state = J.lp_init(n)
    for rates, mask in evals:
        if not any(mask):
            continue
        lp.update_on_demand({"success_rates": {t: rates[t] for t in range(n) if mask[t]}})
        state = _lp_evaluate(state, jnp.asarray(rates, jnp.float32), cfg, jnp.asarray(mask))
        # training feedback is ignored by the evaluation variant, in both
        lp.update_task_progress(0, 1.0)
        state = _lp_observe(state, jnp.zeros(1, jnp.int32), jnp.ones(1), cfg)
        _compare_lp(state, lp, cfg)


def test_lp_sample_follows_distribution() -> None:
    cfg = J.LearningProgressConfig(variant="evaluation")
    state = J.lp_evaluate(J.lp_init(4), jnp.array([0.0, 0.2, 0.0, 0.6]), cfg)
    state = J.lp_evaluate(state, jnp.array([0.0, 0.6, 0.1, 0.6]), cfg)
    p = np.asarray(J.lp_distribution(state, cfg))
    draws = np.asarray(jax.jit(J.lp_sample, static_argnums=(2, 3))(jax.random.PRNGKey(0), state, 40000, cfg))
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / draws.size, p, atol=0.01)
    assert p[0] == 0.0 and not (draws == 0).any()  # inactive: never drawn


# ---------------------------------------------------------------------------------------------------
# ACCEL and DR
# ---------------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(lo=st.integers(0, 4), extra=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_accel_mutate_applies_n_edits_uniform_in_range(lo, extra, seed) -> None:
    cfg = J.ACCELConfig(min_edits=lo, max_edits=lo + extra)
    parents = jnp.arange(2000, dtype=jnp.int32) * 100
    kids, n = J.accel_mutate(jax.random.PRNGKey(seed), parents, lambda k, lv: lv + 1, cfg)
    n = np.asarray(n)
    assert np.array_equal(np.asarray(kids) - np.asarray(parents), n)  # exactly n edits each
    assert n.min() >= lo and n.max() <= lo + extra
    freq = np.bincount(n - lo, minlength=extra + 1) / n.size
    np.testing.assert_allclose(freq, 1 / (extra + 1), atol=0.05)


def test_accel_children_are_evaluation_only_with_their_provenance() -> None:
    cfg = J.ACCELConfig(buffer_size=4, replay_prob=1.0, min_edits=1, max_edits=1)
    buf = J.init_buffer(jnp.int32(0), 4)
    levels = jnp.arange(4, dtype=jnp.int32)
    buf = J.plr_update(buf, levels, J.hash_levels(levels), jnp.array([0.1, 0.2, 0.3, 0.4]))
    buf = buf._replace(generation=jnp.array([0, 2, 0, 1], jnp.int32))
    key = jax.random.PRNGKey(0)
    buf, smp = J.accel_sample(key, buf, jnp.full(3, -1, jnp.int32), cfg, jnp.zeros(3, jnp.int32),
                              jnp.zeros(3, bool))
    assert bool(smp.replay.all()) and bool(smp.train.all())  # replay_prob 1: all replays, trained on
    kids, n = J.accel_mutate(key, smp.levels, lambda k, lv: lv + 10, cfg)
    gen, edits = J.child_provenance(buf, smp, n)
    assert np.asarray(gen).tolist() == (np.asarray(buf.generation)[np.asarray(smp.index)] + 1).tolist()
    assert np.asarray(edits).tolist() == [1, 1, 1]
    buf2, smp2 = J.accel_sample(key, buf, jnp.full(3, -1, jnp.int32), cfg, kids, smp.replay)
    assert np.asarray(smp2.levels).tolist() == np.asarray(kids).tolist()
    assert not bool(smp2.train.any()) and bool(smp2.child.all()) and not bool(smp2.replay.any())
    buf2 = J.plr_update(buf2, smp2.levels, J.hash_levels(smp2.levels), jnp.full(3, 9.0), generation=gen,
                        num_edits=edits)
    # every child entered the buffer (score 9 beats every parent), with its generation and edits
    stored = np.asarray(buf2.levels).tolist()
    for kid, g in zip(np.asarray(kids).tolist(), np.asarray(gen).tolist()):
        at = stored.index(kid)
        assert float(buf2.scores[at]) == 9.0 and int(buf2.num_edits[at]) == 1
        assert int(buf2.generation[at]) == g


def test_dr_sample_is_every_level_new_and_trained_on() -> None:
    dr = DomainRandomization(Discrete(5), seed=0)
    smp = J.dr_sample(jnp.arange(5))
    assert np.asarray(smp.levels).tolist() == [0, 1, 2, 3, 4]
    assert bool(smp.train.all()) and not bool(smp.replay.any()) and not bool(smp.child.any())
    assert np.allclose(dr.distribution(), 1 / 5)  # the generator's uniform draw, as the class's


def test_level_hash_dedups_any_pytree() -> None:
    levels = {"seed": jnp.array([1, 2, 1], jnp.int32), "w": jnp.array([[0.5, 0.25]] * 3)}
    h = np.asarray(J.hash_levels(levels))
    assert h[0] == h[2] and h[0] != h[1]
    # floats are hashed by their bits: 0.5 and 0.25 differ although both truncate to 0
    assert J.level_hash(jnp.array([0.5])) != J.level_hash(jnp.array([0.25]))
    buf = J.plr_update(J.init_buffer({"seed": jnp.int32(0), "w": jnp.zeros(2)}, 4), levels, h,
                       jnp.array([1.0, 2.0, 3.0]))
    assert int(buf.size) == 2 and np.asarray(buf.scores)[:2].tolist() == [3.0, 2.0]


# ---------------------------------------------------------------------------------------------------
# Packaging: jax stays optional
# ---------------------------------------------------------------------------------------------------
def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT.parent)] + sys.path))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(ROOT.parent))


def test_each_algorithm_module_is_reachable_by_its_name() -> None:
    """No exported function shadows a submodule (the API pages document each module by its path)."""
    import importlib

    for name in ("buffer", "plr", "accel", "sfl", "learning_progress", "domain_randomization", "scoring"):
        assert getattr(J, name) is importlib.import_module(f"magister.curricula.jax.{name}"), name


def test_importing_curricula_does_not_import_jax() -> None:
    res = _run("import sys, magister.curricula; print('jax' in sys.modules)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_missing_jax_raises_an_import_error_naming_the_extra() -> None:
    res = _run("import sys; sys.modules['jax'] = None\n"
               "import magister.curricula\n"
               "try:\n    import magister.curricula.jax\nexcept ImportError as e:\n    print(e)")
    assert res.returncode == 0, res.stderr
    assert "magister[jax]" in res.stdout and "extra" in res.stdout


def test_trainer_departures_from_the_library_defaults_are_the_documented_ones() -> None:
    pytest.importorskip("optax")
    from magister.examples.minigrid_rm import curriculum as C
    from magister.examples.minigrid_rm.ppo import TrainConfig

    cfg = TrainConfig()
    library = {"curriculum": J.RobustPLRConfig(), "sfl": J.SFLConfig()}
    for name, fields in C.CPU_SCALE.items():
        for field, (trainer, lib) in fields.items():
            assert getattr(getattr(cfg, name), field) == trainer, (name, field)
            assert getattr(library[name], field) == lib, (name, field)
    # and nothing else differs
    for name, lib in library.items():
        mine = getattr(cfg, name)
        for field in lib.__dataclass_fields__:
            if field not in C.CPU_SCALE[name]:
                assert getattr(mine, field) == getattr(lib, field), (name, field)
