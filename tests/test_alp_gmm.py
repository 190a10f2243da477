"""ALP-GMM (Portelas et al. 2019): ALP by hand, the nearest earlier task, fits by AIC, sampling,
bounds, checkpoints, bad input, a background refit that never blocks, and the toy environment."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from magister import checkpoint
from magister.curricula import ALPGMM, DomainRandomization
from magister.curricula._continuous import Mixture, fit_by_aic, fit_seed
from magister.curricula.alp_gmm import _History
from magister.examples.teacher_toy import ToyEnv, play
from magister.task_spaces import Box, ConfigSpace, Discrete, Product

UNIT = Box(0.0, 1.0, shape=(2,))


@pytest.fixture(autouse=True, scope="module")
def _one_native_thread():
    """A fit sees a few hundred rows: the worker threads of OpenBLAS and of scikit-learn's OpenMP only spin
    (on a loaded 2-core machine they make each fit tens of times slower)."""
    with threadpool_limits(1):
        yield


def teacher(space=UNIT, **kw) -> ALPGMM:
    kw.setdefault("background", False)
    kw.setdefault("seed", 0)
    return ALPGMM(space, **kw)


def alps(t: ALPGMM) -> list[float]:
    return t.state_dict()["window"][:, -1].tolist()


def feed(t: ALPGMM, n: int, seed: int = 1) -> None:
    """``n`` episodes on sampled tasks; the return rises left of x = 0.5 (a learnable region)."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        (task,) = t.sample(1)
        r = float(task[0] < 0.5) * rng.uniform(0.5, 1.0)
        t.update_on_episode(r, 1, task, r)


# -- ALP, worked by hand ----------------------------------------------------------------------------------
def test_alp_is_the_change_since_the_nearest_earlier_task():
    t = teacher(Box(0.0, 10.0), fit_rate=50)
    for x in (0.0, 2.0, 4.0, 6.0, 8.0, 10.0):  # six pairs: ALP is 0 while at most 5 are stored
        t.update_on_episode(x / 10, 1, (x,), 0.0)
    t.update_on_episode(0.0, 1, (4.9,), 0.0)  # nearest: 4.0 (0.9 away, 6.0 is 1.1 away) -> |0 - 0.4|
    t.update_on_episode(1.0, 1, (4.0,), 0.0)  # an exact repeat of 4.0 (0.4) -> 0.6
    t.update_on_episode(0.5, 1, (4.0,), 0.0)  # its most recent play (1.0) -> 0.5
    t.update_on_episode(0.25, 1, (9.2,), 0.0)  # nearest 10.0 (1.0) -> 0.75
    assert alps(t) == pytest.approx([0.0] * 6 + [0.4, 0.6, 0.5, 0.75])
    assert t.metrics()["alpgmm/mean_alp"] == pytest.approx(2.25 / 10)


def test_the_sixth_episode_already_gets_an_alp_from_five_stored_pairs():
    t = teacher(Box(0.0, 10.0), fit_rate=50)
    for i in range(5):
        t.update_on_episode(0.0, 1, (float(i),), 0.0)
    t.update_on_episode(0.3, 1, (4.0,), 0.0)  # 5 stored: not more than 5 -> 0
    t.update_on_episode(0.1, 1, (4.0,), 0.0)  # 6 stored -> |0.1 - 0.3|
    assert alps(t) == pytest.approx([0.0] * 6 + [0.2])


def test_signal_progress_reads_the_progress_field():
    t = teacher(Box(0.0, 10.0), fit_rate=50, signal="progress")
    for i in range(7):
        t.update_on_episode(100.0 * i, 1, (1.0,), 0.1 * i)
    assert alps(t)[-1] == pytest.approx(0.1)


def test_the_nearest_earlier_task_matches_brute_force_across_tree_rebuilds():
    rng = np.random.default_rng(3)
    h = _History(3)
    points = rng.integers(0, 6, size=(3000, 3)).astype(float)  # many exact repeats and equal distances
    rebuilds = 0
    for n, x in enumerate(points):
        if n:
            d = np.sqrt(((points[:n] - x) ** 2).sum(axis=1))
            i = h.nearest(x)
            assert d[i] == d.min()
            if d.min() == 0.0:  # an exact repeat is the most recent one
                assert i == np.flatnonzero(d == 0.0).max()
        indexed = h.indexed
        h.add(x, float(n))
        rebuilds += h.indexed != indexed
    assert h.indexed > 2000 and rebuilds > 10  # the tree was rebuilt and did most of the work
    assert h.size - h.indexed <= max(64, 4 * np.sqrt(h.indexed))


# -- the fits ---------------------------------------------------------------------------------------------
def test_a_mixture_is_fitted_every_fit_rate_episodes_on_the_last_fit_rate_vectors():
    t = teacher(fit_rate=40, potential_ks=(1, 2, 3))
    feed(t, 39)
    assert t.mixture is None and t.metrics()["alpgmm/components"] == 0.0
    feed(t, 1)
    window = t.state_dict()["window"]
    assert window.shape == (40, 3)
    expected = fit_by_aic((window, fit_seed(t._stream_root, 0)), ks=(1, 2, 3))
    np.testing.assert_array_equal(t.mixture.means, expected.means)
    np.testing.assert_array_equal(t.mixture.covariances, expected.covariances)
    # the lowest AIC of the candidates, each fitted as the paper says (full covariance)
    aics = [GaussianMixture(k, covariance_type="full", random_state=fit_seed(t._stream_root, 0))
            .fit(window).aic(window) for k in (1, 2, 3)]
    assert t.mixture.aic == pytest.approx(min(aics)) and t.mixture.components == 1 + int(np.argmin(aics))
    feed(t, 39)
    assert t.fits == 1
    feed(t, 1)
    assert t.fits == 2 and t.metrics()["alpgmm/fits"] == 2.0
    assert t.state_dict()["window"].shape == (40, 3)


def test_the_bootstrap_is_uniform():
    t = teacher(fit_rate=1000)
    feed(t, 500)
    x = np.array(t.sample(4000))
    counts, _, _ = np.histogram2d(x[:, 0], x[:, 1], bins=4, range=[[0, 1], [0, 1]])
    assert stats.chisquare(counts.ravel()).pvalue > 0.001


def _mixture(alp_means) -> Mixture:
    """Three tight components at x = 0.1, 0.5, 0.9 (y = 0.5) with the given mean ALPs."""
    means = [[0.1, 0.5, alp_means[0]], [0.5, 0.5, alp_means[1]], [0.9, 0.5, alp_means[2]]]
    return Mixture([0.8, 0.1, 0.1], means, [np.eye(3) * 1e-6] * 3, 0.0)


def _regions(tasks) -> np.ndarray:
    """Which component each task came from (3 = none of them: a uniform draw)."""
    x = np.array(tasks)
    near = np.abs(x[:, :1] - np.array([0.1, 0.5, 0.9])) < 0.01
    return np.where(near.any(axis=1), near.argmax(axis=1), 3)


def test_components_are_drawn_in_proportion_to_their_mean_alp_not_their_weight():
    t = teacher(random_task_ratio=0.0)
    t.mixture = _mixture([3.0, 1.0, 0.0])
    counts = np.bincount(_regions(t.sample(4000)), minlength=4)
    assert counts[2] == 0 and counts[3] == 0
    assert stats.binomtest(int(counts[0]), 4000, 0.75).pvalue > 0.001


def test_random_task_ratio_draws_that_share_uniformly_and_zero_alps_pick_components_uniformly():
    t = teacher(random_task_ratio=0.3)
    t.mixture = _mixture([0.0, 0.0, 0.0])
    counts = np.bincount(_regions(t.sample(6000)), minlength=4)
    # a uniform draw lands near a component with probability 0.3 * 0.02 * 3: ignore that
    assert stats.binomtest(int(counts[3]), 6000, 0.3 * (1 - 0.06)).pvalue > 0.001
    assert stats.chisquare(counts[:3]).pvalue > 0.001


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
    t.mixture = Mixture([1.0], [np.full(dims + 1, low + offset)], [np.eye(dims + 1) * width * 10], 0.0)
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
    path = tmp_path_factory.mktemp("ckpt") / "alpgmm.ckpt"
    a = teacher(fit_rate=20, potential_ks=(1, 2), seed=seed)
    feed(a, before, seed=seed)
    checkpoint.save(path, a.state_dict())
    b = teacher(fit_rate=20, potential_ks=(1, 2), seed=12345)
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    rng = np.random.default_rng(seed)
    for _ in range(after):  # identical updates, across fits
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
    assert isinstance(state["mixture"]["means"], np.ndarray)


def test_a_state_for_another_dimension_is_refused():
    a = teacher(fit_rate=20)
    feed(a, 5)
    with pytest.raises(ValueError, match="2-dimensional tasks, this space has 3"):
        teacher(Box(0.0, 1.0, shape=(3,))).load_state_dict(a.state_dict())
    state = a.state_dict()
    state["signals"] = state["signals"][:-1]
    with pytest.raises(ValueError, match="one signal per task"):
        teacher(fit_rate=20).load_state_dict(state)


# -- bad input --------------------------------------------------------------------------------------------
def test_bad_input_is_refused_clearly(monkeypatch):
    with pytest.raises(TypeError, match="Discrete"):
        ALPGMM(Discrete(5))
    with pytest.raises(ValueError, match="zero width"):
        ALPGMM(Box([0.0, 1.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match="potential_ks goes up to 10"):
        ALPGMM(UNIT, fit_rate=8)
    with pytest.raises(ValueError, match="random_task_ratio"):
        ALPGMM(UNIT, random_task_ratio=1.5)
    with pytest.raises(ValueError, match="signal"):
        ALPGMM(UNIT, signal="reward")
    t = teacher()
    with pytest.raises(ValueError, match="return must be finite"):
        t.update_on_episode(float("nan"), 1, (0.5, 0.5), 0.0)
    with pytest.raises(ValueError, match="is not a task of"):
        t.update_on_episode(1.0, 1, (0.5,), 0.0)
    with pytest.raises(ValueError, match="progress must be finite"):
        teacher(signal="progress").update_on_episode(1.0, 1, (0.5, 0.5), float("inf"))
    assert t.num_episodes == 0 and alps(t) == []
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r"magister\[teachers\]"):
        ALPGMM(UNIT)


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
    done = threading.Event()
    for _ in range(6000):  # polls the fit count, for up to 60 s
        if t._refit.fits >= 1 or done.wait(0.01):
            break
    assert t._refit.fits >= 1
    t.sample(1)
    assert t.mixture is not None and t.fits >= 1


# -- the toy environment ----------------------------------------------------------------------------------
def test_it_masters_more_of_the_toy_env_than_random_sampling():
    # 8,000 episodes (not the reference 20,000) and fit_rate 100 with k in 2..5 (not 250 and 2..10), so
    # the test runs in a few seconds; a fixed seed.
    t = ALPGMM(UNIT, fit_rate=100, potential_ks=range(2, 6), background=False, seed=0)
    alp = play(t, ToyEnv(2), 8000, every=8000)[-1]
    uniform = play(DomainRandomization(UNIT, seed=0), ToyEnv(2), 8000, every=8000)[-1]
    assert alp >= uniform + 0.08, (alp, uniform)
