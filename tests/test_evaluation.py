"""``magister.evaluation``: statistics checked against scipy and an independent resampling, suites from
task spaces, the runner, the XLand metrics, plots and logger metrics."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from magister.evaluation import (
    Estimate,
    Suite,
    aggregate,
    as_metrics,
    cvar,
    difference,
    evaluate,
    format_table,
    interval_estimates,
    performance_profile,
    probability_of_improvement,
    regret,
    stack_runs,
)

matrices = st.tuples(st.integers(2, 6), st.integers(1, 5), st.integers(0, 2**31 - 1)).map(
    lambda a: np.random.default_rng(a[2]).random((a[0], a[1])).round(2))


@settings(max_examples=40, deadline=None)
@given(matrices)
def test_point_estimates_equal_scipy_and_numpy(x):
    est = interval_estimates({"m": x}, ("mean", "median", "iqm", "optimality_gap", "cvar@0.25"),
                             n_resamples=50)["m"]
    assert est["mean"].value == pytest.approx(x.mean())
    assert est["median"].value == pytest.approx(np.median(x))
    assert est["iqm"].value == pytest.approx(stats.trim_mean(x.ravel(), 0.25))
    assert est["optimality_gap"].value == pytest.approx(np.mean(np.maximum(1.0 - x, 0.0)))
    per_run = [np.sort(r)[:math.ceil(0.25 * x.shape[1])].mean() for r in x]
    assert est["cvar@0.25"].value == pytest.approx(np.mean(per_run))
    for e in est.values():  # a percentile interval need not contain the point value of a skewed metric
        assert e.low <= e.high
    assert x.min() - 1e-9 <= est["mean"].low and est["mean"].high <= x.max() + 1e-9


@settings(max_examples=40, deadline=None)
@given(matrices, matrices)
def test_probability_of_improvement_is_the_mann_whitney_statistic(x, y):
    y = y[:, :1].repeat(x.shape[1], axis=1) if y.shape[1] != x.shape[1] else y
    p = probability_of_improvement(x, y, n_resamples=50)
    per_task = [stats.mannwhitneyu(x[:, j], y[:, j]).statistic / (len(x) * len(y)) for j in range(x.shape[1])]
    assert p.value == pytest.approx(np.mean(per_task))
    assert 0.0 <= p.low <= p.value + 1e-12 <= p.high + 2e-12 <= 1.0 + 2e-12
    # symmetric: P(X > Y) + P(Y > X) = 1 (ties count half on both sides)
    assert probability_of_improvement(y, x, n_resamples=50).value == pytest.approx(1.0 - p.value)


def _by_hand(x: np.ndarray, f, n: int, rng: np.random.Generator) -> tuple[float, float]:
    """A stratified percentile bootstrap written out: runs resampled within each task column."""
    idx = rng.integers(0, x.shape[0], size=(n, x.shape[0], x.shape[1]))
    res = np.take_along_axis(np.broadcast_to(x, (n, *x.shape)), idx, axis=1)
    vals = f(res)
    return tuple(np.percentile(vals, [2.5, 97.5]))


def _per_run_cvar(r: np.ndarray, alpha: float) -> np.ndarray:
    """Per resample (axis 0): the mean over runs of each run's mean of its worst ``alpha`` of tasks."""
    k = math.ceil(alpha * r.shape[2])
    return np.sort(r, axis=2)[:, :, :k].mean(axis=2).mean(axis=1)


@pytest.mark.parametrize("metric,f", [
    ("mean", lambda r: r.mean(axis=(1, 2))),
    ("iqm", lambda r: stats.trim_mean(r.reshape(len(r), -1), 0.25, axis=1)),
    ("median", lambda r: np.median(r.reshape(len(r), -1), axis=1)),
    ("optimality_gap", lambda r: np.maximum(1.0 - r, 0.0).mean(axis=(1, 2))),
    ("cvar@0.25", lambda r: _per_run_cvar(r, 0.25)),
])
def test_intervals_agree_with_an_independent_stratified_bootstrap(metric, f):
    x = np.random.default_rng(3).beta(2, 5, size=(8, 6))
    e = interval_estimates({"m": x}, (metric,), n_resamples=20_000, seed=1)["m"][metric]
    lo, hi = _by_hand(x, f, 20_000, np.random.default_rng(2))
    assert e.low == pytest.approx(lo, abs=0.006) and e.high == pytest.approx(hi, abs=0.006)
    # the interval is narrower than the spread of the scores (it is about the mean, not a score)
    assert e.high - e.low < x.std()


def test_the_95_percent_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    covered = 0
    for i in range(150):
        x = rng.normal(0.5, 0.2, size=(12, 4))
        e = interval_estimates({"m": x}, ("mean",), n_resamples=500, seed=i)["m"]["mean"]
        covered += e.contains(0.5)
    assert 0.85 <= covered / 150 <= 0.99


def test_difference_and_its_interval():
    rng = np.random.default_rng(0)
    x, y = rng.normal(0.7, 0.05, (6, 5)), rng.normal(0.3, 0.05, (5, 5))
    d = difference(x, y, "mean")
    assert d.value == pytest.approx(x.mean() - y.mean())
    assert d.excludes(0.0) and d.low > 0.3
    same = difference(x, x + rng.normal(0, 1e-3, x.shape), "iqm")
    assert same.contains(0.0) and not same.excludes(0.0)


def test_performance_profile_counts_scores_above_each_threshold():
    x = np.array([[0.1, 0.5, 0.9], [0.2, 0.6, 1.0]])
    v, lo, hi = performance_profile(x, [0.0, 0.5, 0.95], n_resamples=200)
    assert v.tolist() == pytest.approx([1.0, 3 / 6, 1 / 6])
    assert np.all(lo <= v + 1e-12) and np.all(v <= hi + 1e-12)
    # the intervals agree with an independent stratified bootstrap of the share above each threshold
    x = np.random.default_rng(3).beta(2, 5, size=(8, 6))
    thresholds = [0.1, 0.25, 0.5]
    v, lo, hi = performance_profile(x, thresholds, n_resamples=20_000, seed=1)
    for t, value, low, high in zip(thresholds, v, lo, hi):
        by_hand = _by_hand(x, lambda r, t=t: (r > t).mean(axis=(1, 2)), 20_000, np.random.default_rng(2))
        assert value == pytest.approx((x > t).mean())
        assert (low, high) == pytest.approx(by_hand, abs=0.03)


def test_cvar_is_the_mean_of_the_worst_fraction():
    assert cvar([3.0, 1.0, 2.0, 4.0], 0.5) == 1.5
    assert cvar([3.0, 1.0, 2.0, 4.0], 1.0) == 2.5
    assert cvar([5.0, 0.0], 0.01) == 0.0  # at least one value
    with pytest.raises(ValueError, match="alpha"):
        cvar([1.0], 0.0)
    with pytest.raises(ValueError, match="at least one"):
        cvar([], 0.5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown metric 'iqr'"):
        interval_estimates({"m": np.ones((2, 2))}, ("iqr",))
    with pytest.raises(ValueError, match="finite"):
        interval_estimates({"m": np.array([[np.nan, 1.0], [0.0, 1.0]])})
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="confidence"):
        interval_estimates({"m": np.ones((2, 2))}, confidence=95)
    with pytest.raises(ValueError, match="runs x tasks"):
        aggregate(np.ones((2, 2, 2)))


def test_a_single_run_has_no_interval(caplog):
    e = interval_estimates({"m": np.array([[0.2, 0.4]])})["m"]["mean"]
    assert e.value == pytest.approx(0.3) and math.isnan(e.low) and math.isnan(e.high)
    assert "single run" in caplog.text
    assert not e.excludes(0.0)
    assert "0.300 [n/a]" in format_table({"m": {"mean": e}})


def test_same_seed_same_interval_and_table_layout():
    x = np.random.default_rng(0).random((5, 4))
    a = interval_estimates({"dr": x, "plr": x + 0.1}, seed=7)
    b = interval_estimates({"dr": x, "plr": x + 0.1}, seed=7)
    assert a == b
    text = format_table(a)
    lines = text.splitlines()
    assert lines[0].split("|")[1].strip().startswith("mean") and "iqm" in lines[0]
    assert lines[2].strip().startswith("dr |") and lines[3].strip().startswith("plr |")
    assert f"{a['plr']['mean'].value:.3f} [{a['plr']['mean'].low:.3f}, {a['plr']['mean'].high:.3f}]" in text
    flat = as_metrics(a, prefix="heldout")
    assert flat["heldout/plr/iqm"] == a["plr"]["iqm"].value
    assert flat["heldout/dr/mean_low"] == a["dr"]["mean"].low and len(flat) == 2 * 2 * 3


def test_metrics_go_through_the_existing_logger():
    from magister.integrations.loggers import log_curriculum_metrics

    rows = []

    class W:
        def add_scalar(self, tag, value, step):
            rows.append((tag, value, step))

    est = interval_estimates({"dr": np.random.default_rng(0).random((3, 2))}, ("mean",), n_resamples=100)
    log_curriculum_metrics(as_metrics(est), step=5, tb_writer=W())
    assert {t for t, _, _ in rows} == {"eval/dr/mean", "eval/dr/mean_low", "eval/dr/mean_high"}


def test_regret_against_an_oracle():
    assert regret(np.array([0.2, 1.0]), np.array([1.0, 1.0])).tolist() == pytest.approx([0.8, 0.0])
    with pytest.raises(ValueError, match="exceed the oracle"):
        regret(np.array([2.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="one oracle per score"):
        regret(np.array([1.0, 2.0]), np.array([1.0]))


def test_the_xland_example_uses_the_module_metrics():
    from magister.evaluation import normalised
    from magister.examples.xland import evaluation as xe

    assert xe.nash_value is normalised.nash_value and xe.participation is normalised.participation
    assert xe.normalised_percentiles is normalised.normalised_percentiles


# -- suites and the runner ----------------------------------------------------------------------------

def test_suites_from_task_spaces():
    from magister.task_spaces import ConfigSpace, Discrete

    space = ConfigSpace({"a": [0, 1, 2], "b": ["x", "y"]}, holdout=[{"a": 2, "b": "y"}], seed=0)
    held = Suite.holdout(space)
    assert held.tasks == ({"a": 2, "b": "y"},) and len(held.names) == 1
    train, suite = Suite.split(Discrete(10), 0.3, seed=0)
    assert len(suite) == 3 and not set(suite.tasks) & set(train.tasks)
    s1, s2 = Suite.sample(Discrete(1000), 5, seed=4), Suite.sample(Discrete(1000), 5, seed=4)
    assert s1.tasks == s2.tasks and s1.tasks != Suite.sample(Discrete(1000), 5, seed=5).tasks
    with pytest.raises(ValueError, match="not in"):
        Suite.from_tasks([11], space=Discrete(10))
    with pytest.raises(ValueError, match="unique"):
        Suite((1, 2), ("a", "a"))
    with pytest.raises(TypeError, match="no held-out task list"):
        Suite.holdout(Discrete(3))


class Limit:
    """Factory of CartPole envs whose task is the episode's step limit (return = limit when action 0
    keeps the pole up for that long, which it does for limits up to 5)."""

    def __init__(self, space):
        self.space = space

    def __call__(self):
        from magister.env_wrappers.task_wrapper import TaskWrapper

        class Env(TaskWrapper):
            def change_task(self, task):
                self.limit, self.t = task, 0

            def task_progress(self, obs, rew, term, trunc, info):
                return 1.0 if self.limit >= 4 else 0.0

            def step(self, action):
                obs, r, term, trunc, info = super().step(action)
                self.t += 1
                return obs, r, term, trunc or self.t >= self.limit, info

        return Env(gym.make("CartPole-v1"), self.space)


@pytest.mark.parametrize("num_envs,vector", [(1, "sync"), (3, "sync"), (8, "sync"), (3, "async")])
def test_the_runner_plays_every_task_for_every_episode(num_envs, vector):
    from magister.task_spaces import Discrete

    space = Discrete(tasks=[1, 2, 3, 4, 5])
    suite = Suite.of(space)
    seen = []

    def policy(obs, info):
        seen.append(len(obs))
        return np.zeros(len(obs), dtype=np.int64)

    r = evaluate(policy, Limit(space), suite, episodes=2, num_envs=num_envs, seed=0, vector=vector)
    assert r.returns.tolist() == [[t, t] for t in [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert r.per_task("success").tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert len(r.episodes) == 10 and not any(e.train for e in r.episodes)
    assert set(seen) == {min(num_envs, 10)}
    m = stack_runs([r, r], "return")
    assert m.shape == (2, 5)
    assert r.as_dict("length") == {str(t): float(t) for t in [1, 2, 3, 4, 5]}


def test_the_runner_refuses_envs_that_report_to_a_curriculum():
    from magister import GymnasiumSyncWrapper
    from magister.curricula import DomainRandomization
    from magister.task_spaces import Discrete

    space = Discrete(tasks=[1, 2])
    curriculum = DomainRandomization(space, seed=0)
    make = lambda: GymnasiumSyncWrapper(Limit(space)(), curriculum)
    with pytest.raises(ValueError, match="curriculum would learn from the evaluation episodes"):
        evaluate(lambda o, i: np.zeros(len(o), dtype=np.int64), make, Suite.of(space), episodes=1)
    assert curriculum.num_episodes == 0


def test_evaluate_on_device_averages_keys():
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    from magister.evaluation import evaluate_on_device

    def eval_fn(params, tasks, key):  # success with probability = task, one draw per key
        return (jax.random.uniform(key, tasks.shape) < tasks).astype(jnp.float32)

    out = evaluate_on_device(eval_fn, None, jnp.array([0.0, 1.0, 0.5]), episodes=400, seed=0)
    assert out[0] == 0.0 and out[1] == 1.0 and 0.4 < out[2] < 0.6
    with pytest.raises(ValueError, match="one finite score per task"):
        evaluate_on_device(lambda p, t, k: jnp.ones((2, 2)), None, None, episodes=1)


def test_plots_write_images(tmp_path):
    pytest.importorskip("matplotlib")
    from magister.evaluation import plot_interval_estimates, plot_performance_profiles

    rng = np.random.default_rng(0)
    scores = {"dr": rng.random((4, 5)) * 0.5, "sfl": rng.random((4, 5))}
    est = interval_estimates(scores, ("mean", "iqm"), n_resamples=200)
    a = plot_interval_estimates(est, tmp_path / "ie.png")
    b = plot_performance_profiles(scores, tmp_path / "pp.png", n_resamples=100)
    assert a.stat().st_size > 5000 and b.stat().st_size > 5000


def test_estimate_is_a_named_tuple():
    e = Estimate(0.5, 0.4, 0.6)
    assert e.value == 0.5 and e.low == 0.4 and e.high == 0.6 and tuple(e) == (0.5, 0.4, 0.6)
    with pytest.raises(AttributeError):
        e.value = 1.0  # frozen


def test_atlas_reports_intervals_from_the_module():
    pytest.importorskip("jax")
    from magister.examples.minigrid_rm import atlas

    rng = np.random.default_rng(0)
    held = {m: (rng.random((3, 16)) < p).astype(float) for m, p in (("dr", 0.1), ("accel", 0.6))}

    def rows(m, k):
        return [{"env_steps": 100, "solvable_fraction": 0.1 * k},
                {"env_steps": 200, "solvable_fraction": 0.2 + 0.1 * k, "replay_solvable_fraction": 0.5,
                 "heldout_success": held[m][k].tolist()}]

    res = {m: [rows(m, k) for k in range(3)] for m in held}
    table, better = atlas.statistics(res, n_resamples=500)
    expect = interval_estimates(held, ("mean", "iqm", "cvar@0.1"), n_resamples=500)
    assert table["accel"]["held-out mean"] == expect["accel"]["mean"]
    assert table["dr"]["held-out CVaR 10%"] == expect["dr"]["cvar@0.1"]
    assert table["dr"]["solvable"].value == pytest.approx(np.mean([0.2, 0.3, 0.4]))
    assert better["P(accel > dr)"] == probability_of_improvement(held["accel"], held["dr"], n_resamples=500)
    assert better["P(accel > dr)"].low > 0.5
    assert "held-out IQM" in format_table(table)
