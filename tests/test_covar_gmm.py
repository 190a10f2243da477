"""Covar-GMM (Portelas et al. 2019): the relative time by hand, a component's progress, fits by AIC,
sampling, bounds, checkpoints, bad input, a background refit that never blocks, and the toy environment."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from threadpoolctl import threadpool_limits

from magister import checkpoint
from magister.curricula import CovarGMM, DomainRandomization
from magister.curricula._continuous import Mixture, fit_by_aic, fit_seed
from magister.examples.teacher_toy import ToyEnv, play
from magister.task_spaces import Box, ConfigSpace, Discrete, Product

UNIT = Box(0.0, 1.0, shape=(2,))


@pytest.fixture(autouse=True, scope="module")
def _one_native_thread():
    """A fit sees a few hundred rows: the worker threads of OpenBLAS and of scikit-learn's OpenMP only spin
    (on a loaded 2-core machine they make each fit tens of times slower)."""
    with threadpool_limits(1):
        yield


def teacher(space=UNIT, **kw) -> CovarGMM:
    kw.setdefault("background", False)
    kw.setdefault("seed", 0)
    return CovarGMM(space, **kw)


def feed(t: CovarGMM, n: int, seed: int = 1) -> None:
    """``n`` episodes on sampled tasks; the return rises left of x = 0.5 (a learnable region)."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        (task,) = t.sample(1)
        r = float(task[0] < 0.5) * rng.uniform(0.5, 1.0)
        t.update_on_episode(r, 1, task, r)


# -- the triplets, by hand --------------------------------------------------------------------------------
def test_each_episode_is_stored_as_task_relative_time_and_signal():
    t = teacher(Box(0.0, 10.0), fit_rate=4, potential_ks=(1,))
    for n in range(10):
        t.update_on_episode(float(n) * 2, 1, (float(n),), 0.0)
    window = t.state_dict()["window"]  # the last 4 of 10: episodes 6..9, t = (n mod 4) / 4
    np.testing.assert_array_equal(window, [[6.0, 0.5, 12.0], [7.0, 0.75, 14.0], [8.0, 0.0, 16.0],
                                           [9.0, 0.25, 18.0]])


def test_signal_progress_reads_the_progress_field():
    t = teacher(Box(0.0, 10.0), fit_rate=4, potential_ks=(1,), signal="progress")
    t.update_on_episode(100.0, 1, (1.0,), 0.25)
    assert t.state_dict()["window"].tolist() == [[1.0, 0.0, 0.25]]
    assert t.metrics()["covargmm/mean_signal"] == 0.25


def _mixture(covs) -> Mixture:
    """Three tight components at x = 0.1, 0.5, 0.9 (y = 0.5) whose cov(t, r) entries are ``covs``."""
    sigmas = []
    for c in covs:
        s = np.eye(4) * 1e-6
        s[2, 2] = s[3, 3] = 1.0
        s[2, 3] = s[3, 2] = c
        sigmas.append(s)
    means = [[0.1, 0.5, 0.5, 0.0], [0.5, 0.5, 0.5, 9.0], [0.9, 0.5, 0.5, 0.0]]
    return Mixture([0.1, 0.8, 0.1], means, sigmas, 0.0)


def test_a_component_s_progress_is_the_positive_part_of_cov_t_r_or_its_magnitude():
    t = teacher()
    t.mixture = _mixture([0.5, -0.2, 0.1])
    assert t.progress().tolist() == pytest.approx([0.5, 0.0, 0.1])
    t.absolute = True
    assert t.progress().tolist() == pytest.approx([0.5, 0.2, 0.1])
    assert t.metrics()["covargmm/max_progress"] == pytest.approx(0.5)


def _regions(tasks) -> np.ndarray:
    x = np.array(tasks)
    near = np.abs(x[:, :1] - np.array([0.1, 0.5, 0.9])) < 0.01
    return np.where(near.any(axis=1), near.argmax(axis=1), 3)


@pytest.mark.parametrize("absolute, p", [(False, [5 / 6, 0.0, 1 / 6]), (True, [0.625, 0.25, 0.125])])
def test_components_are_drawn_in_proportion_to_their_progress(absolute, p):
    t = teacher(random_task_ratio=0.0, absolute=absolute)
    t.mixture = _mixture([0.5, -0.2, 0.1])
    counts = np.bincount(_regions(t.sample(4000)), minlength=4)
    assert counts[3] == 0
    assert stats.chisquare(counts[:3][np.array(p) > 0], 4000 * np.array(p)[np.array(p) > 0]).pvalue > 0.001
    assert counts[1] == 0 or absolute


def test_random_task_ratio_draws_that_share_uniformly_and_no_progress_picks_components_uniformly():
    t = teacher(random_task_ratio=0.3)
    t.mixture = _mixture([-0.1, 0.0, -0.3])
    counts = np.bincount(_regions(t.sample(6000)), minlength=4)
    assert stats.binomtest(int(counts[3]), 6000, 0.3 * (1 - 0.06)).pvalue > 0.001
    assert stats.chisquare(counts[:3]).pvalue > 0.001


# -- the fits ---------------------------------------------------------------------------------------------
def test_a_mixture_is_fitted_every_fit_rate_episodes_on_the_last_fit_rate_triplets():
    t = teacher(fit_rate=40, potential_ks=(1, 2, 3))
    feed(t, 39)
    assert t.mixture is None and t.metrics()["covargmm/components"] == 0.0
    x = np.array(t.sample(2000))  # the bootstrap is uniform
    counts, _, _ = np.histogram2d(x[:, 0], x[:, 1], bins=4, range=[[0, 1], [0, 1]])
    assert stats.chisquare(counts.ravel()).pvalue > 0.001
    feed(t, 1)
    window = t.state_dict()["window"]
    assert window.shape == (40, 4) and window[:, 2].tolist() == [n / 40 for n in range(40)]
    expected = fit_by_aic((window, fit_seed(t._stream_root, 0)), ks=(1, 2, 3))
    np.testing.assert_array_equal(t.mixture.means, expected.means)
    np.testing.assert_array_equal(t.mixture.covariances, expected.covariances)
    feed(t, 40)
    assert t.fits == 2 and t.metrics()["covargmm/fits"] == 2.0


@settings(max_examples=25)
@given(
    dims=st.integers(1, 4),
    low=st.floats(-100, 100),
    width=st.floats(1e-3, 100),
    offset=st.floats(-1e3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_samples_are_always_inside_the_bounds(dims, low, width, offset, seed):
    space = Box(low, low + width, shape=(dims,))
    t = teacher(space, random_task_ratio=0.5, seed=seed)
    t.mixture = Mixture([1.0], [np.full(dims + 2, low + offset)], [np.eye(dims + 2) * width * 10], 0.0)
    for task in t.sample(50):
        assert len(task) == dims and space.contains(np.array(task))


def test_a_config_space_gets_its_own_tasks():
    space = Product((Box(0.0, 1.0), ConfigSpace({"size": [4, 8, 16], "speed": [0.5, 1.0]})))
    t = teacher(space, fit_rate=30, potential_ks=(1, 2))
    for _ in range(60):
        (task,) = t.sample(1)
        assert space.contains(space.decode(task))
        t.update_on_episode(float(task[1][0] == 0), 1, task, 0.0)
    assert t.fits == 2


# -- checkpoints ------------------------------------------------------------------------------------------
@settings(max_examples=10)
@given(before=st.integers(0, 70), after=st.integers(0, 45), seed=st.integers(0, 1000))
def test_a_checkpoint_resumes_exactly(tmp_path_factory, before, after, seed):
    path = tmp_path_factory.mktemp("ckpt") / "covargmm.ckpt"
    a = teacher(fit_rate=20, potential_ks=(1, 2), seed=seed)
    feed(a, before, seed=seed)
    checkpoint.save(path, a.state_dict())
    b = teacher(fit_rate=20, potential_ks=(1, 2), seed=12345)
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    rng = np.random.default_rng(seed)
    for _ in range(after):
        (task,) = a.sample(1)
        r = float(rng.random())
        a.update_on_episode(r, 1, task, r)
        b.update_on_episode(r, 1, b.sample(1)[0], r)
    assert b.sample(8) == a.sample(8)
    assert a.fits == b.fits and a.metrics() == b.metrics()


def test_a_background_checkpoint_waits_for_the_fit_in_flight():
    t = teacher(fit_rate=20, potential_ks=(1, 2), background=True)
    feed(t, 20)
    state = t.state_dict()
    assert state["mixture"] is not None and state["fits"] == 1 and t.fits == 1


# -- bad input --------------------------------------------------------------------------------------------
def test_bad_input_is_refused_clearly(monkeypatch):
    with pytest.raises(TypeError, match="Discrete"):
        CovarGMM(Discrete(5))
    with pytest.raises(ValueError, match="zero width"):
        CovarGMM(Box([0.0, 1.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match="potential_ks goes up to 10"):
        CovarGMM(UNIT, fit_rate=8)
    with pytest.raises(ValueError, match="random_task_ratio"):
        CovarGMM(UNIT, random_task_ratio=-0.1)
    t = teacher()
    with pytest.raises(ValueError, match="return must be finite"):
        t.update_on_episode(float("inf"), 1, (0.5, 0.5), 0.0)
    with pytest.raises(ValueError, match="is not a task of"):
        t.update_on_episode(1.0, 1, (0.5, 0.5, 0.5), 0.0)
    with pytest.raises(ValueError, match="length"):
        t.update_on_episode(1.0, -1, (0.5, 0.5), 0.0)
    assert t.num_episodes == 0 and t.state_dict()["window"].shape == (0, 4)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r"magister\[teachers\]"):
        CovarGMM(UNIT)


# -- the background refit ---------------------------------------------------------------------------------
def test_a_background_refit_never_blocks_sampling_or_updates():
    t = teacher(fit_rate=20, potential_ks=(1, 2), background=True)
    entered, release = threading.Event(), threading.Event()
    fit = t._refit.fit

    def gated(snapshot):
        entered.set()
        assert release.wait(60)
        return fit(snapshot)

    t._refit.fit = gated
    feed(t, 20)
    assert entered.wait(60)  # the fit runs, held
    for _ in range(30):  # meanwhile the teacher keeps serving and learning
        assert len(t.sample(4)) == 4
        t.update_on_episode(0.5, 1, (0.25, 0.25), 0.5)
    assert t.mixture is None and t._refit.busy and t.num_episodes == 50
    release.set()
    polled = threading.Event()
    for _ in range(6000):  # polls the fit count, for up to 60 s
        if t._refit.fits >= 1 or polled.wait(0.01):
            break
    assert t._refit.fits >= 1
    t.sample(1)
    assert t.mixture is not None and t.fits >= 1


# -- the toy environment ----------------------------------------------------------------------------------
def test_it_masters_more_of_the_toy_env_than_random_sampling():
    # 4,000 episodes (not the reference 20,000) and fit_rate 100 with k in 2..5 (not 250 and 2..10), so
    # the test runs in seconds; a fixed seed.
    t = CovarGMM(UNIT, fit_rate=100, potential_ks=range(2, 6), background=False, seed=0)
    covar = play(t, ToyEnv(2), 4000, every=4000)[-1]
    uniform = play(DomainRandomization(UNIT, seed=0), ToyEnv(2), 4000, every=4000)[-1]
    assert covar >= uniform + 0.08, (covar, uniform)
