"""SelfPaced (SPDL / SPRL): the KL trust region, moving towards the target, the alpha schedule, sampling,
checkpoints and bad input."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister import checkpoint
from magister.curricula import SelfPaced
from magister.curricula.self_paced import _kl, _sprl_weights
from magister.task_spaces import Box, ConfigSpace, Discrete, Product

UNIT2 = Box(0.0, 1.0, shape=(2,))


def kl_1d(m0: float, s0: float, m1: float, s1: float) -> float:
    """KL(N(m0, s0²) ‖ N(m1, s1²)) worked by hand."""
    return np.log(s1 / s0) + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5


def step_kl(before: tuple[np.ndarray, np.ndarray], teacher: SelfPaced) -> float:
    return _kl(before[0], before[1], teacher.mean_n, teacher.chol_n)


def near_target_values(contexts: np.ndarray, target: np.ndarray) -> np.ndarray:
    return 1.0 - 10.0 * ((contexts - target) ** 2).sum(axis=1)


# -- the trust region --------------------------------------------------------------------------------------
@settings(max_examples=8)
@given(dims=st.integers(1, 3), covariance=st.sampled_from(["full", "diag"]), epsilon=st.floats(0.005, 0.5),
       n=st.integers(5, 60), seed=st.integers(0, 2**16), offset=st.integers(0, 2))
def test_values_update_stays_in_the_trust_region(dims, covariance, epsilon, n, seed, offset):
    rng = np.random.default_rng(seed)
    teacher = SelfPaced(Box(-1.0, 2.0, shape=(dims,)), target_mean=rng.uniform(-1, 2, dims),
                        target_std=rng.uniform(0.01, 1.0), covariance=covariance, epsilon=epsilon,
                        alpha_offset=offset, seed=seed)
    for _ in range(2):
        contexts = np.array(teacher.sample(n))
        before = (teacher.mean_n.copy(), teacher.chol_n.copy())
        teacher.update_on_demand({"contexts": contexts, "values": rng.normal(0, 5, n) + rng.uniform(-2, 2)})
        assert step_kl(before, teacher) <= epsilon + 1e-9
        assert teacher.last_kl_step == pytest.approx(step_kl(before, teacher))


@settings(max_examples=12)
@given(dims=st.integers(1, 3), covariance=st.sampled_from(["full", "diag"]), epsilon=st.floats(0.005, 0.5),
       every=st.integers(2, 60), seed=st.integers(0, 2**16), scale=st.floats(0.0, 100.0))
def test_returns_update_stays_in_the_trust_region(dims, covariance, epsilon, every, seed, scale):
    rng = np.random.default_rng(seed)
    teacher = SelfPaced(Box(0.0, 1.0, shape=(dims,)), target_mean=rng.uniform(0, 1, dims), target_std=0.05,
                        covariance=covariance, epsilon=epsilon, mode="returns", update_every=every,
                        alpha_offset=0, seed=seed)
    for update in range(2):
        before = (teacher.mean_n.copy(), teacher.chol_n.copy())
        for task in teacher.sample(every):
            teacher.update_on_episode(float(rng.normal(0, 1) * scale), 1, task, 0.0)
        assert teacher.updates == update + 1
        assert step_kl(before, teacher) <= epsilon + 1e-9


def test_sprl_weights_spend_the_trust_region_exactly():
    """The dual's η makes the reweighted samples' KL to the old ones equal ε (the constraint is active
    when the returns differ), and the weights are exp(a_i / (α + η)) normalised."""
    rng = np.random.default_rng(0)
    signals, log_mu, log_q = rng.normal(0, 1, 200), rng.normal(-3, 1, 200), rng.normal(0, 0.5, 200)
    for alpha in (0.0, 0.7):
        w, eta = _sprl_weights(signals, log_mu, log_q, alpha, 0.1)
        assert eta > 0
        assert w.sum() == pytest.approx(1.0)
        assert float(np.sum(w * np.log(200 * w))) == pytest.approx(0.1, abs=2e-3)
        a = signals + alpha * (log_mu - log_q)
        assert w[0] / w[1] == pytest.approx(np.exp((a[0] - a[1]) / (alpha + eta)))


# -- moving towards the target ---------------------------------------------------------------------------
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_values_mode_moves_to_the_target_with_kl_falling_every_update(covariance):
    target = np.array([0.9, 0.8])
    teacher = SelfPaced(UNIT2, target_mean=target, target_std=0.05, covariance=covariance, alpha_offset=3,
                        seed=1)
    kls = [teacher.kl_to_target()]
    for _ in range(8):
        contexts = np.array(teacher.sample(100))
        teacher.update_on_demand({"contexts": contexts, "values": near_target_values(contexts, target)})
        kls.append(teacher.kl_to_target())
    assert all(b < a for a, b in zip(kls, kls[1:])), kls
    assert kls[-1] < kls[0] / 5
    assert np.abs(teacher.mean - target).max() < np.abs(np.array([0.5, 0.5]) - target).max() / 2


def test_values_from_the_episodes_the_teacher_remembers():
    target = np.array([0.2, 0.9])
    teacher = SelfPaced(UNIT2, target_mean=target, target_std=0.05, seed=3)
    kls = [teacher.kl_to_target()]
    for _ in range(5):
        for task in teacher.sample(60):
            teacher.update_on_episode(0.0, 1, task, 0.0)
        contexts = teacher.pending_contexts()
        assert contexts.shape == (60, 2)
        teacher.update_on_demand({"values": near_target_values(contexts, target)})
        assert teacher.pending_contexts().shape == (0, 2)
        kls.append(teacher.kl_to_target())
    assert all(b < a for a, b in zip(kls, kls[1:])), kls


def test_returns_mode_moves_to_the_target_with_kl_falling_every_update():
    target = np.array([0.85, 0.15])
    teacher = SelfPaced(UNIT2, target_mean=target, target_std=0.05, mode="returns", update_every=100,
                        alpha_offset=3, seed=2)
    kls = [teacher.kl_to_target()]
    for _ in range(8):
        for task in teacher.sample(100):
            teacher.update_on_episode(-float(np.abs(np.array(task) - target).sum()), 1, task, 0.0)
        kls.append(teacher.kl_to_target())
    assert teacher.updates == 8
    assert all(b < a for a, b in zip(kls, kls[1:])), kls
    assert np.abs(teacher.mean - target).max() < 0.2


# -- the alpha schedule ------------------------------------------------------------------------------------
def test_alpha_schedule_exact():
    """Box(0, 1), p = N(0.5, 0.25²), μ = N(0.9, 0.05²): KL(p‖μ) = −log 5 + (0.0625 + 0.16) / 0.005 − 0.5."""
    teacher = SelfPaced(Box(0.0, 1.0), target_mean=0.9, target_std=0.05, alpha_offset=3, zeta=1.6,
                        epsilon=1e-3, seed=0)
    assert teacher.kl_to_target() == pytest.approx(-np.log(5) + 0.2225 / 0.005 - 0.5)
    contexts = np.linspace(0.1, 0.9, 10)[:, None]
    for update in (1, 2):  # updates numbered from 1; alpha is 0 while the number is below alpha_offset
        teacher.update_on_demand({"contexts": contexts, "values": np.full(10, 2.0)})
        assert (teacher.updates, teacher.alpha) == (update, 0.0)
    m, s = float(teacher.mean[0]), float(np.sqrt(teacher.cov[0, 0]))
    kl_before = kl_1d(m, s, 0.9, 0.05)
    teacher.update_on_demand({"contexts": contexts, "values": np.arange(10.0)})  # mean performance 4.5
    assert teacher.alpha == pytest.approx(1.6 * 4.5 / kl_before)
    m, s = float(teacher.mean[0]), float(np.sqrt(teacher.cov[0, 0]))
    teacher.update_on_demand({"contexts": contexts, "values": np.arange(10.0), "performance": 0.25})
    assert teacher.alpha == pytest.approx(1.6 * 0.25 / kl_1d(m, s, 0.9, 0.05))
    teacher.update_on_demand({"contexts": contexts, "values": -np.arange(10.0)})  # negative: 0
    assert teacher.alpha == 0.0
    capped = SelfPaced(Box(0.0, 1.0), target_mean=0.9, target_std=0.05, alpha_offset=0, max_alpha=0.01)
    capped.update_on_demand({"contexts": contexts, "values": np.full(10, 50.0)})
    assert capped.alpha == 0.01


def test_defaults_are_spdls():
    teacher = SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1)
    assert (teacher.epsilon, teacher.zeta, teacher.alpha_offset, teacher.max_alpha) == (0.05, 1.6, 10, 1e5)
    assert teacher.mean.tolist() == [0.5, 0.5]
    assert np.allclose(teacher.cov, np.diag([0.25**2, 0.25**2]))


# -- sampling --------------------------------------------------------------------------------------------
def test_samples_follow_the_gaussian():
    from scipy.stats import kstest

    teacher = SelfPaced(Box(-100.0, 100.0, shape=(2,)), target_mean=[50.0, 50.0], target_std=1.0,
                        init_mean=[3.0, -2.0], init_cov=[[4.0, 1.0], [1.0, 1.0]], seed=0)
    x = np.array(teacher.sample(4000))
    assert kstest(x[:, 0], "norm", args=(3.0, 2.0)).pvalue > 1e-3
    assert kstest(x[:, 1], "norm", args=(-2.0, 1.0)).pvalue > 1e-3
    assert np.corrcoef(x.T)[0, 1] == pytest.approx(0.5, abs=0.05)


@given(low=st.lists(st.floats(-50, 50), min_size=1, max_size=4), width=st.floats(0.01, 20),
       seed=st.integers(0, 2**16))
def test_samples_always_inside_the_bounds(low, width, seed):
    low_a = np.array(low)
    space = Box(low_a, low_a + width)
    teacher = SelfPaced(space, target_mean=low_a + width, target_std=width, init_mean=low_a,
                        init_std=width * 3, seed=seed)
    for task in teacher.sample(50):
        assert space.contains(task)


def test_config_space_axes_are_snapped():
    space = Product((Box(0.0, 1.0), ConfigSpace({"size": [4, 8, 16]})))
    teacher = SelfPaced(space, target_mean=[1.0, 16.0], target_std=[0.1, 1.0], seed=0)
    tasks = teacher.sample(100)
    assert all(space.contains(space.decode(t)) for t in tasks)
    assert {t[1][0] for t in tasks} == {0, 1, 2}


# -- checkpoints -------------------------------------------------------------------------------------------
@settings(max_examples=10)
@given(mode=st.sampled_from(["values", "returns"]), episodes=st.integers(2, 45), seed=st.integers(0, 99))
def test_checkpoint_round_trip(tmp_path_factory, mode, episodes, seed):
    def make() -> SelfPaced:
        return SelfPaced(UNIT2, target_mean=[0.9, 0.9], target_std=0.05, mode=mode, update_every=20,
                         alpha_offset=1, seed=seed)

    def feed(teacher: SelfPaced, n: int) -> None:
        for task in teacher.sample(n):
            teacher.update_on_episode(float(sum(task)), 1, task, 0.5)
        if mode == "values":
            contexts = teacher.pending_contexts()
            teacher.update_on_demand({"values": near_target_values(contexts, np.array([0.9, 0.9]))})

    a = make()
    feed(a, episodes)
    path = tmp_path_factory.mktemp("ckpt") / "selfpaced.ckpt"
    checkpoint.save(path, a.state_dict())
    b = make()
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    feed(a, 25)
    feed(b, 25)
    assert b.sample(8) == a.sample(8)
    assert b.metrics() == a.metrics()


# -- bad input -------------------------------------------------------------------------------------------
def test_bad_values_name_the_key_and_change_nothing():
    teacher = SelfPaced(UNIT2, target_mean=[0.9, 0.9], target_std=0.05, seed=0)
    contexts = np.array(teacher.sample(5))
    cases = [
        ({"contexts": contexts, "values": np.ones((5, 1))}, "values"),
        ({"contexts": contexts, "values": [1.0, np.nan, 0.0, 0.0, 0.0]}, "values"),
        ({"contexts": contexts, "values": [1.0, np.inf, 0.0, 0.0, 0.0]}, "values"),
        ({"contexts": contexts[:4], "values": np.ones(5)}, "contexts"),
        ({"contexts": contexts[:, :1], "values": np.ones(5)}, "contexts"),
        ({"contexts": np.full((5, 2), np.nan), "values": np.ones(5)}, "contexts"),
        ({"contexts": contexts, "values": np.ones(5), "performance": np.nan}, "performance"),
        ({"values": np.ones(5)}, "values"),  # no episodes reported: nothing to pair them with
    ]
    for metrics, key in cases:
        with pytest.raises(ValueError, match=key):
            teacher.update_on_demand(metrics)
    assert teacher.updates == 0 and teacher.mean.tolist() == [0.5, 0.5]
    teacher.update_on_demand({"loss": 1.0})  # no "values": not for this teacher
    assert teacher.updates == 0
    with pytest.raises(TypeError, match="dict"):
        teacher.update_on_demand([1.0, 2.0])


def test_bad_construction_and_episodes():
    with pytest.raises(TypeError, match="Discrete"):
        SelfPaced(Discrete(5), target_mean=[1.0], target_std=0.1)
    with pytest.raises(ValueError, match="zero width"):
        SelfPaced(Box(np.array([0.0, 1.0]), np.array([1.0, 1.0])), target_mean=[1.0, 1.0], target_std=0.1)
    with pytest.raises(ValueError, match="exactly one of target_std and target_cov"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0])
    with pytest.raises(ValueError, match="target_mean"):
        SelfPaced(UNIT2, target_mean=[1.0], target_std=0.1)
    with pytest.raises(ValueError, match="target_cov"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_cov=[[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="init_std"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1, init_std=[0.1, -0.1])
    with pytest.raises(ValueError, match="mode"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1, mode="critic")
    with pytest.raises(ValueError, match="epsilon"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1, epsilon=0.0)
    teacher = SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1, mode="returns")
    with pytest.raises(ValueError, match="episode_return"):
        teacher.update_on_episode(float("nan"), 1, (0.5, 0.5), 0.0)
    with pytest.raises(ValueError, match="mode='values'"):
        teacher.update_on_demand({"values": [1.0, 2.0]})
    assert teacher.num_episodes == 0


def test_missing_scipy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(ImportError, match="teachers"):
        SelfPaced(UNIT2, target_mean=[1.0, 1.0], target_std=0.1)


def test_metrics():
    teacher = SelfPaced(Box(0.0, 2.0, shape=(2,)), target_mean=[1.8, 1.8], target_std=0.1, seed=0)
    m = teacher.metrics()
    assert m["selfpaced/mean[0]"] == 1.0 and m["selfpaced/std[1]"] == pytest.approx(0.5)
    assert m["selfpaced/kl_target"] == pytest.approx(2 * kl_1d(1.0, 0.5, 1.8, 0.1))
    assert m["selfpaced/alpha"] == 0.0 and m["selfpaced/updates"] == 0.0
