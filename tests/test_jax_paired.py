"""The PAIRED family on device (magister.curricula.jax.paired): regret estimators on hand-made returns, the
adversary's advantages, REPAIRED's buffer, and an adversary that learns against fixed students."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from magister.curricula.jax import (  # noqa: E402
    Editor,
    EpisodeReturns,
    PAIREDConfig,
    REPAIREDConfig,
    adversary_reward,
    edit_levels,
    editor_advantages,
    episode_returns,
    flexible_regret,
    hash_levels,
    init_buffer,
    minimax,
    plr_sample,
    plr_update,
    regret,
    repaired_masks,
)


def _np_episode_returns(rewards: np.ndarray, dones: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference: walk each env's steps, closing an episode at every done."""
    t, b = rewards.shape
    mean, best, count = np.zeros(b), np.zeros(b), np.zeros(b, int)
    for j in range(b):
        rets, run = [], 0.0
        for i in range(t):
            run += rewards[i, j]
            if dones[i, j]:
                rets.append(run)
                run = 0.0
        if rets:
            mean[j], best[j], count[j] = np.mean(rets), np.max(rets), len(rets)
    return mean, best, count


def test_episode_returns_hand_made() -> None:
    # env 0: episodes [1.0] (ends t=0), [0.0, 0.5] (ends t=2); t=3 still running. env 1: none ends.
    r = jnp.array([[1.0, 0.2], [0.0, 0.3], [0.5, 0.0], [0.7, 0.0]])
    d = jnp.array([[True, False], [False, False], [True, False], [False, False]])
    out = episode_returns(r, d)
    np.testing.assert_allclose(np.asarray(out.mean), [0.75, 0.0])
    np.testing.assert_allclose(np.asarray(out.max), [1.0, 0.0])
    assert out.count.tolist() == [2, 0]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_episode_returns_matches_reference(t: int, b: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = rng.uniform(-1, 1, (t, b)).astype(np.float32)
    d = rng.uniform(size=(t, b)) < 0.3
    out = episode_returns(jnp.asarray(r), jnp.asarray(d))
    mean, best, count = _np_episode_returns(r, d)
    np.testing.assert_allclose(np.asarray(out.mean), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.max), best, rtol=1e-5, atol=1e-6)
    assert np.asarray(out.count).tolist() == count.tolist()


def test_episode_returns_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        episode_returns(jnp.zeros((3, 2)), jnp.zeros((3,), bool))


def test_regret_estimators_exact() -> None:
    pro = EpisodeReturns(jnp.array([0.2, 0.9, 0.0]), jnp.array([0.6, 0.9, 0.0]), jnp.array([3, 1, 0]))
    ant = EpisodeReturns(jnp.array([0.5, 0.1, 0.4]), jnp.array([0.8, 0.3, 0.7]), jnp.array([2, 2, 1]))
    # PAIRED: antagonist's best - protagonist's mean
    np.testing.assert_allclose(np.asarray(regret(pro, ant)), [0.6, -0.6, 0.7], atol=1e-6)
    # flexible: best of either - protagonist's mean (never negative)
    np.testing.assert_allclose(np.asarray(flexible_regret(pro, ant)), [0.6, 0.0, 0.7], atol=1e-6)
    np.testing.assert_allclose(np.asarray(minimax(pro)), [-0.2, -0.9, 0.0], atol=1e-6)
    for obj, want in (("regret", regret(pro, ant)), ("flexible_regret", flexible_regret(pro, ant)),
                      ("minimax", minimax(pro))):
        np.testing.assert_allclose(np.asarray(adversary_reward(PAIREDConfig(objective=obj), pro, ant)),
                                   np.asarray(want))
    with pytest.raises(ValueError, match="antagonist"):
        adversary_reward(PAIREDConfig(), pro)


def test_config_validation_and_defaults() -> None:
    cfg = PAIREDConfig()
    assert (cfg.objective, cfg.num_edits, cfg.gamma, cfg.gae_lambda, cfg.ent_coef) == \
        ("regret", 50, 0.995, 0.98, 1e-3)
    assert cfg.needs_antagonist and not PAIREDConfig(objective="minimax").needs_antagonist
    with pytest.raises(ValueError, match="objective"):
        PAIREDConfig(objective="paired")
    with pytest.raises(ValueError, match="num_edits"):
        PAIREDConfig(num_edits=0)
    rp = REPAIREDConfig()
    assert rp.score == "regret" and rp.robust and rp.replay_prob == 0.5
    with pytest.raises(ValueError, match="regret"):
        REPAIREDConfig(score="max_mc")
    with pytest.raises(ValueError, match="temperature"):
        REPAIREDConfig(temperature=0.0)


def test_editor_advantages_terminal_reward() -> None:
    from magister.curricula.jax import EditTrajectory

    v = jnp.array([[0.1, 0.0], [0.2, 0.5], [0.3, -0.5]])  # 3 edits, 2 levels
    traj = EditTrajectory(jnp.zeros((3, 2)), jnp.zeros((3, 2), jnp.int32), jnp.zeros((3, 2)), v)
    reward = jnp.array([1.0, -1.0])
    # gamma = lambda = 1: the advantage is the final reward minus the value, targets the reward itself
    adv, tgt = editor_advantages(traj, reward, PAIREDConfig(gamma=1.0, gae_lambda=1.0))
    np.testing.assert_allclose(np.asarray(adv), np.asarray(reward[None] - v), atol=1e-6)
    np.testing.assert_allclose(np.asarray(tgt), np.broadcast_to(np.asarray(reward), (3, 2)), atol=1e-6)
    # lambda = 0: one-step TD errors, delta_t = gamma v_{t+1} - v_t, last delta = r - v_last
    g = 0.9
    adv, _ = editor_advantages(traj, reward, PAIREDConfig(gamma=g, gae_lambda=0.0))
    vn = np.asarray(v)
    want = np.stack([g * vn[1] - vn[0], g * vn[2] - vn[1], np.asarray(reward) - vn[2]])
    np.testing.assert_allclose(np.asarray(adv), want, atol=1e-6)


def test_repaired_buffer_replays_the_highest_regret_levels() -> None:
    cfg = REPAIREDConfig(buffer_size=4, temperature=0.1, staleness_coef=0.0)
    buf = init_buffer(jnp.int32(0), cfg.capacity)
    new = jnp.arange(4, dtype=jnp.int32) * 7
    buf, smp = plr_sample(jax.random.PRNGKey(0), buf, new, cfg)
    students, adversary = repaired_masks(smp)
    assert not bool(students.any()) and bool(adversary.all())  # empty buffer: all generated, evaluation only
    pro = EpisodeReturns(jnp.array([0.9, 0.0, 0.5, 0.0]), jnp.zeros(4), jnp.ones(4, jnp.int32))
    ant = EpisodeReturns(jnp.zeros(4), jnp.array([1.0, 0.9, 0.6, 0.0]), jnp.ones(4, jnp.int32))
    buf = plr_update(buf, smp.levels, hash_levels(smp.levels), regret(pro, ant))
    # full buffer, replay prob 0.5: replays pick level 7 (regret 0.9) almost always at beta = 0.1
    buf, smp = plr_sample(jax.random.PRNGKey(1), buf, jnp.full(256, 99, jnp.int32), cfg)
    students, adversary = repaired_masks(smp)
    replayed = np.asarray(smp.levels)[np.asarray(smp.replay)]
    assert 90 < replayed.size < 166  # ~ Binomial(256, 0.5)
    assert (replayed == 7).mean() > 0.95
    assert np.array_equal(np.asarray(students), np.asarray(smp.replay))
    assert np.array_equal(np.asarray(adversary), ~np.asarray(smp.replay))


# --- an adversary learning against fixed students, in a stand-in editor ----------------------------------
# A level is two bits built by two edits (edit t sets bit t). The protagonist solves only level (0, 0);
# the antagonist solves every level whose bit 1 is 0. Level (1, 1) and (0, 1) are unsolvable by both.
# Regret is 1 exactly on level (1, 0); the minimax adversary is indifferent among the three levels the
# protagonist fails, two of them unsolvable.

def _editor() -> Editor:
    def reset(key: jax.Array) -> tuple[jax.Array, tuple]:
        return jnp.int32(0), (jnp.int32(0), jnp.zeros(2, jnp.int32))

    def step(key: jax.Array, state: tuple, action: jax.Array) -> tuple[jax.Array, tuple]:
        t, bits = state
        bits = bits.at[t].set(action)
        return t + 1, (t + 1, bits)

    return Editor(reset, step, lambda s: s[1])


def _policy(params: dict, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    return params["logits"][obs], params["value"][obs]  # tabular: one row per edit step


def _students(levels: jax.Array) -> tuple[EpisodeReturns, EpisodeReturns]:
    p = ((levels[:, 0] == 0) & (levels[:, 1] == 0)).astype(jnp.float32)
    a = (levels[:, 1] == 0).astype(jnp.float32)
    one = jnp.ones(levels.shape[0], jnp.int32)
    return EpisodeReturns(p, p, one), EpisodeReturns(a, a, one)


def _train_adversary(objective: str, updates: int = 150, batch: int = 64) -> np.ndarray:
    cfg = PAIREDConfig(objective=objective, num_edits=2, gamma=1.0, gae_lambda=1.0)
    editor = _editor()
    params = {"logits": jnp.zeros((2, 2)), "value": jnp.zeros(2)}

    @jax.jit
    def update(params: dict, key: jax.Array) -> tuple[dict, jax.Array]:
        levels, traj = edit_levels(key, params, _policy, editor, batch, cfg.num_edits)
        pro, ant = _students(levels)
        adv, tgt = editor_advantages(traj, adversary_reward(cfg, pro, ant), cfg)

        def loss(p: dict) -> jax.Array:
            logits, v = jax.vmap(lambda o: _policy(p, o))(traj.obs)
            logp_all = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(logp_all, traj.action[..., None], -1)[..., 0]
            ent = -(jnp.exp(logp_all) * logp_all).sum(-1)
            a = jax.lax.stop_gradient(adv)
            return (-(logp * a) + 0.5 * (v - tgt) ** 2 - cfg.ent_coef * ent).mean()

        g = jax.grad(loss)(params)
        return jax.tree_util.tree_map(lambda x, y: x - 0.5 * y, params, g), levels

    for k in jax.random.split(jax.random.PRNGKey(0), updates):
        params, _ = update(params, k)
    probs = jax.nn.softmax(params["logits"])  # P(bit t = 1) per edit
    p0, p1 = float(probs[0, 1]), float(probs[1, 1])
    # distribution over the 4 levels (b0, b1): (0,0), (0,1), (1,0), (1,1)
    return np.array([(1 - p0) * (1 - p1), (1 - p0) * p1, p0 * (1 - p1), p0 * p1])


def test_paired_adversary_moves_to_levels_only_the_antagonist_solves() -> None:
    dist = _train_adversary("regret")
    assert dist[2] > 0.9, dist  # level (1, 0): antagonist solves, protagonist does not
    assert dist[1] + dist[3] < 0.1, dist  # unsolvable levels abandoned


def test_minimax_adversary_prefers_failure_not_solvability() -> None:
    dist = _train_adversary("minimax")
    assert dist[0] < 0.1, dist  # avoids the one level the protagonist solves
    # indifferent among the levels the protagonist fails: the unsolvable ones keep much of the mass
    assert dist[1] + dist[3] > 0.3, dist
