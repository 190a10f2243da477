"""Tests of the Stable-Baselines3 integration (magister.integrations.sb3) and its example.

The hand-checked tests drive :class:`CurriculumCallback` with a fake model; the training tests run real SB3
``PPO`` and sb3-contrib ``MaskablePPO`` with ``SubprocVecEnv`` workers talking to a curriculum server, and a
negative control shows that without the callback the curriculum's distribution does not move.
"""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import SubprocVecEnv

from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.plr import PLR
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.examples.cartpole import CartPoleTask
from magister.integrations.sb3 import CurriculumCallback, rollout_dones, wants_value_scores
from magister.integrations.scores import compute_advantages
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

HALF_WIDTHS = [0.0, 0.05, 0.1, 0.15, 0.2]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny networks on a shared machine: one intra-op thread is far faster than many."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- the episode_starts -> dones mapping --------------------------------------------------------------


def test_rollout_dones_by_hand():
    starts = np.array([[1, 1], [0, 1], [0, 0], [1, 0]], dtype=np.float32)
    d = rollout_dones(starts, np.array([False, True]))
    # done[t] = starts[t + 1]; the last row is the last step's dones
    assert d.tolist() == [[False, True], [False, False], [True, False], [False, True]]
    assert d.dtype == bool


def test_module_doctests():
    import doctest

    import magister.examples.sb3_puzzles as example
    import magister.integrations.sb3 as mod

    for m in (mod, example):
        result = doctest.testmod(m, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0


def test_rollout_dones_rejects_bad_shapes():
    with pytest.raises(ValueError, match="n_steps, n_envs"):
        rollout_dones(np.zeros(4), np.zeros(1))
    with pytest.raises(ValueError, match=r"expected \(2,\)"):
        rollout_dones(np.zeros((3, 2)), np.zeros(3))


# -- the callback on a hand-checked rollout ------------------------------------------------------------


class _Policy:
    def __init__(self, boot: list[float]) -> None:
        self.boot = boot
        self.seen: list[np.ndarray] = []

    def predict_values(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.numpy().copy())
        return torch.tensor(self.boot, dtype=torch.float32)[:, None]


def _fake_model(rewards, values, starts, boot, last_obs=None):
    buf = SimpleNamespace(rewards=np.asarray(rewards, np.float32), values=np.asarray(values, np.float32),
                          episode_starts=np.asarray(starts, np.float32))
    n = buf.rewards.shape[1]
    last_obs = np.arange(n, dtype=np.float32)[:, None] if last_obs is None else last_obs
    return SimpleNamespace(rollout_buffer=buf, policy=_Policy(boot), _last_obs=last_obs, device="cpu",
                           num_timesteps=0, logger=Logger(folder=None, output_formats=[]))


def _drive(cb, model, task_rows, last_dones, train_rows=None, done_rows=None, progress_rows=None):
    """Call the callback's hooks as SB3's collect_rollouts does."""
    cb.model = model
    cb.on_rollout_start()
    for t, row in enumerate(task_rows):
        infos = [{"task": task} for task in row]
        if train_rows is not None:
            for info, flag in zip(infos, train_rows[t]):
                info["task_train"] = flag
        if progress_rows is not None:
            for info, p in zip(infos, progress_rows[t]):
                info["task_progress"] = p
        dones = np.zeros(len(row), dtype=bool) if done_rows is None else np.asarray(done_rows[t], dtype=bool)
        cb.update_locals({"infos": infos, "dones": dones})
        assert cb.on_step()
    cb.update_locals({"dones": np.asarray(last_dones)})
    cb.on_rollout_end()


def _sampled_plr(**kw) -> PLR:
    plr = PLR(Discrete(5), score="value_l1", replay_prob=0.5, gamma=1.0, gae_lambda=1.0, seed=0, **kw)
    plr.sample(64)  # every task is sampled (and so may be scored)
    assert plr.num_new >= 5 and len(plr) == 0
    return plr


def test_callback_feeds_hand_checked_scores():
    # T = 3 steps, N = 2 envs, gamma = lambda = 1 (so A_t = sum of later rewards + bootstrap - V_t).
    # SB3's episode_starts: env 1 started a new episode at t = 1; the last step of env 0 ends an episode.
    starts = [[1, 1], [0, 1], [0, 0]]
    rewards = [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    values = [[0.5, 0.2], [0.5, 1.0], [0.5, 1.0]]
    tasks = [[1, 2], [1, 3], [1, 3]]
    # dones: env 0 at t = 2 (last_dones), env 1 at t = 0 (episode_starts[1])
    # env 0, task 1, t = 0..2, terminal:  A = (0.5, 0.5, 0.5)          -> value L1 0.5 (bootstrap 7 unused)
    # env 1, task 2, t = 0, terminal:     A = 1 - 0.2 = 0.8             -> 0.8
    # env 1, task 3, t = 1..2, bootstrap V(s_3) = 2: A_2 = 0 + 2 - 1 = 1, A_1 = 0 + 1 - 1 + 1 = 1 -> 1.0
    plr = _sampled_plr()
    model = _fake_model(rewards, values, starts, boot=[7.0, 2.0])
    cb = CurriculumCallback(plr)
    _drive(cb, model, tasks, last_dones=[True, False])
    assert cb.num_rollouts == cb.num_feeds == 1
    assert cb.last_rollout["dones"].tolist() == [[False, True], [False, False], [True, False]]
    np.testing.assert_allclose(cb.last_rollout["bootstrap"], [7.0, 2.0])
    np.testing.assert_array_equal(model.policy.seen[0], model._last_obs)  # V(s_T) of the last observation
    got = dict(zip(plr.buffer_tasks(), plr.buffer_scores().tolist()))
    assert got == pytest.approx({1: 0.5, 2: 0.8, 3: 1.0})
    assert cb.last_feed == {"scores/segments": 3.0, "scores/tasks": 3.0,
                            "scores/mean": pytest.approx((0.5 + 0.8 + 1.0) / 3)}


def test_callback_skip_partial_leaves_unfinished_segment_unscored():
    plr = _sampled_plr()
    cb = CurriculumCallback(plr, partial="skip")
    _drive(cb, _fake_model([[0.0, 1.0], [1.0, 0.0]], [[0.5, 0.2], [0.5, 1.0]], [[1, 1], [0, 1]], [0.0, 3.0]),
           [[1, 2], [1, 3]], last_dones=[True, False])
    assert sorted(plr.buffer_tasks()) == [1, 2]  # task 3's segment never ended


def test_callback_with_server_logs_metrics_and_eval_fraction():
    plr = _sampled_plr()
    with serve(plr) as server:
        cb = CurriculumCallback(server)
        model = _fake_model([[1.0], [0.0]], [[0.0], [0.0]], [[1], [0]], [0.0])
        _drive(cb, model, [[4], [4]], last_dones=[True], train_rows=[[True], [False]], done_rows=[[0], [1]],
               progress_rows=[[0.5], [1.0]])
        logged = model.logger.name_to_value
        assert logged["magister/rollout_episodes"] == 1.0
        assert logged["magister/episode_progress"] == 1.0  # the final step's progress
        assert logged["magister/eval_only_fraction"] == pytest.approx(0.5)
        assert logged["magister/scores/tasks"] == 1.0
        assert logged["plr/buffer_size"] == 1.0
        assert logged["sync/envs"] == 0.0  # the server's counters come along (no env connected here)
        assert plr.buffer_tasks() == [4]
        # A = (1, 0) for r = (1, 0), V = 0, terminal -> value L1 0.5
        assert plr.buffer_scores().tolist() == pytest.approx([0.5])


def test_callback_string_tasks_and_metrics_filter():
    space = Discrete(tasks=["a", "b", "c"])
    plr = PLR(space, score="positive_value_loss", replay_prob=0.5, gamma=1.0, gae_lambda=1.0, seed=0)
    plr.sample(32)
    model = _fake_model([[0.0], [2.0]], [[1.0], [1.0]], [[1], [0]], [0.0])
    cb = CurriculumCallback(plr, metrics_filter=lambda k: k.startswith("plr/buffer"))
    _drive(cb, model, [[1], [1]], last_dones=[True])
    # A_1 = 2 - 1 = 1, A_0 = 0 + 1 - 1 + 1 = 1: positive value loss 1
    assert plr.buffer_scores().tolist() == pytest.approx([1.0])
    keys = set(model.logger.name_to_value)
    assert "plr/buffer_size" in keys and "plr/score_mean" not in keys


class _MetricsOnly:
    def metrics(self):
        return {"sync/env0/tasks_sent": 3, "sync/env12/tasks_sent": 4, "sync/envs": 2,
                "sync/total/tasks_sent": 7, "curriculum/flag": True, "curriculum/name": "not a number"}


@pytest.mark.parametrize("per_env", [False, True])
def test_callback_per_env_metrics_switch(per_env):
    cb = CurriculumCallback(_MetricsOnly(), per_env_metrics=per_env)
    assert cb.feed is False
    model = _fake_model([[0.0]], [[0.0]], [[1]], [0.0])
    _drive(cb, model, [[0]], last_dones=[False])
    logged = dict(model.logger.name_to_value)
    expected = {"magister/eval_only_fraction": 0.0, "magister/rollout_episodes": 0.0, "sync/envs": 2.0,
                "sync/total/tasks_sent": 7.0, "curriculum/flag": 1.0}
    if per_env:
        expected.update({"sync/env0/tasks_sent": 3.0, "sync/env12/tasks_sent": 4.0})
    assert logged == expected
    assert cb.num_rollouts == 1 and cb.num_feeds == 0


def test_callback_requires_task_in_info():
    cb = CurriculumCallback(_sampled_plr())
    cb.model = _fake_model([[0.0]], [[0.0]], [[1]], [0.0])
    cb.on_rollout_start()
    cb.update_locals({"infos": [{}], "dones": np.zeros(1, bool)})
    with pytest.raises(KeyError, match="GymnasiumSyncWrapper"):
        cb.on_step()


def test_callback_detects_missing_steps():
    cb = CurriculumCallback(_sampled_plr())
    model = _fake_model([[0.0], [0.0]], [[0.0], [0.0]], [[1], [0]], [0.0])
    with pytest.raises(RuntimeError, match="recorded 1 steps"):
        _drive(cb, model, [[1]], last_dones=[False])


def test_callback_argument_checks():
    dr = DomainRandomization(Discrete(3))
    assert not wants_value_scores(dr)
    assert wants_value_scores(_sampled_plr())
    assert not wants_value_scores(PLR(Discrete(3), score="learnability", replay_prob=0.5))
    assert CurriculumCallback(dr).feed is False  # auto: metrics only
    with pytest.raises(ValueError, match="does not learn from value scores"):
        CurriculumCallback(dr, feed=True)
    with pytest.raises(ValueError, match="partial"):
        CurriculumCallback(dr, partial="all")
    with pytest.raises(ValueError, match="feed"):
        CurriculumCallback(dr, feed="yes")
    with pytest.raises(TypeError, match="Curriculum or CurriculumServer"):
        CurriculumCallback(object())


# -- real training across processes ---------------------------------------------------------------------


def _cartpole_run(callback: bool, total: int = 512):
    space = Discrete(tasks=HALF_WIDTHS)
    plr = PLR(space, score="value_l1", replay_prob=0.5, gamma=0.99, gae_lambda=0.95, seed=0)
    with serve(plr) as server:
        address = server.address

        def make_env() -> gym.Env:
            return GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), space), address)

        env = SubprocVecEnv([make_env, make_env], start_method="fork")
        try:
            model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"net_arch": [16]})
            cb = CurriculumCallback(server) if callback else None
            model.learn(total, callback=cb)
        finally:
            env.close()
        metrics = server.metrics()
    return plr, model, cb, metrics


@pytest.mark.slow
def test_ppo_subproc_workers_feed_plr_and_move_its_distribution():
    plr, model, cb, metrics = _cartpole_run(callback=True)
    uniform = np.full(len(HALF_WIDTHS), 1 / len(HALF_WIDTHS))
    assert metrics["sync/envs"] == 2.0
    assert metrics["sync/total/episodes_applied"] > 0
    assert metrics["sync/total/updates_rejected"] == 0
    assert cb.num_rollouts == cb.num_feeds == 512 // (64 * 2)
    assert len(plr) > 0 and plr.num_inserted > 0  # scores arrived
    assert np.abs(plr.distribution() - uniform).max() > 0.05
    # The mapping reproduces SB3's own GAE: with the curriculum's gamma/lambda equal to PPO's, the
    # advantages of the arrays the callback fed equal the rollout buffer's.
    r = cb.last_rollout
    adv = compute_advantages(r["rewards"], r["values"], r["dones"], r["bootstrap"], model.gamma,
                             model.gae_lambda)
    T, N = adv.shape  # after PPO's update the buffer holds its arrays flattened env-major (T * N, 1)
    sb3_adv = model.rollout_buffer.advantages.reshape(N, T).T
    np.testing.assert_allclose(adv, sb3_adv, rtol=1e-4, atol=1e-4)
    assert set(np.unique(r["tasks"]).tolist()) <= set(range(len(HALF_WIDTHS)))


@pytest.mark.slow
def test_ppo_without_callback_leaves_distribution_uniform():
    """Negative control: the envs report episodes, but without scores PLR's buffer stays empty."""
    plr, _, _, metrics = _cartpole_run(callback=False, total=256)
    assert metrics["sync/total/episodes_applied"] > 0
    assert len(plr) == 0
    np.testing.assert_allclose(plr.distribution(), np.full(len(HALF_WIDTHS), 1 / len(HALF_WIDTHS)))


@pytest.mark.slow
def test_maskable_ppo_on_puzzles_across_processes():
    pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import get_action_masks

    from magister.examples.sb3_puzzles import make_curriculum, make_task_space, make_vec_env, train

    # the masks reach MaskablePPO through the sync and task wrappers in the worker processes
    space = make_task_space("flip", "3x3c", train_seeds=10)
    with serve(make_curriculum("dr", space)) as server:
        env = make_vec_env("flip", space, server.address, 2, start_method="fork")
        try:
            env.reset()
            masks = get_action_masks(env)
        finally:
            env.close()
    assert masks.shape == (2, 9) and masks.dtype == bool and masks.all()  # Flip: every press is legal

    result = train("flip", "3x3c", algo="maskable", total_steps=256, num_envs=2, n_steps=64, batch_size=64,
                   n_epochs=1, hidden=16, train_seeds=20, start_method="fork")
    m = result.metrics
    assert result.num_feeds == result.num_rollouts == 2
    assert m["sync/total/tasks_sampled"] >= 2
    assert m["plr/inserted"] > 0 and m["plr/buffer_size"] > 0  # value scores reached PLR
    assert m["sync/total/updates_rejected"] == 0
