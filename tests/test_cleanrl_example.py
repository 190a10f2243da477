"""Tests of the CleanRL-style PPO example (magister.examples.cleanrl_ppo): a tiny budget, real envs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from magister.examples.cleanrl_ppo import Args, make_curriculum, make_task_space, parse_args, train


@pytest.fixture(autouse=True)
def restore_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _tiny(**kw) -> Args:
    base = dict(total_timesteps=256, num_envs=2, num_steps=32, update_epochs=1, num_minibatches=2, hidden=16,
                num_tasks=4, seed=0)
    base.update(kw)
    return Args(**base)


def test_parse_args_and_task_space():
    args = parse_args(["--total-timesteps", "1e3", "--no-anneal-lr", "--curriculum", "dr",
                       "--num-tasks", "3"])
    assert (args.total_timesteps, args.anneal_lr, args.curriculum, args.num_tasks) == (1000, False, "dr", 3)
    assert make_task_space(5).tasks == [0.0, 0.05, 0.1, 0.15, 0.2]
    with pytest.raises(ValueError, match="num_tasks"):
        make_task_space(1)
    with pytest.raises(ValueError, match="unknown curriculum"):
        make_curriculum("nope", make_task_space(3), 0)
    with pytest.raises(ValueError, match="vector"):
        train(_tiny(vector="threads"))


@pytest.mark.slow
def test_sync_vector_env_feeds_plr():
    r = train(_tiny(vector="sync"))
    plr = r["curriculum"]
    assert r["iterations"] == r["num_feeds"] == 256 // 64
    assert r["episodes"] > 0 and plr.num_episodes == r["episodes"]  # every finished episode reported
    assert len(plr) > 0 and plr.num_inserted > 0  # value scores reached PLR
    assert np.abs(plr.distribution() - 0.25).max() > 0.05
    assert set(r["returns_by_task"]) <= {0, 1, 2, 3}
    assert r["train_fraction"] == 1.0  # PLR (not PLR⊥) sends training tasks only


def test_module_doctests():
    import doctest

    import magister.examples.cleanrl_ppo as mod

    assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.slow
def test_async_workers_feed_plr_through_the_server(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    r = train(_tiny(vector="async", context="fork", log_dir=str(tmp_path)))
    m = r["metrics"]
    assert m["sync/envs"] == 2.0
    assert m["sync/total/episodes_applied"] >= r["episodes"] > 0
    assert m["sync/total/updates_rejected"] == 0
    assert r["num_feeds"] == 4 and m["plr/inserted"] > 0
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"plr/buffer_size", "curriculum/top/0/prob", "sync/total/episodes_applied",
            "losses/value_loss"} <= tags
    assert len(acc.Scalars("plr/buffer_size")) == 4  # one point per iteration


@pytest.mark.slow
def test_without_scores_plr_stays_uniform():
    """Negative control: episodes arrive, but without feed_scores PLR never fills its buffer."""
    r = train(_tiny(vector="sync", feed_scores=False, total_timesteps=128))
    plr = r["curriculum"]
    assert r["num_feeds"] == 0 and plr.num_episodes > 0
    assert len(plr) == 0
    np.testing.assert_allclose(plr.distribution(), np.full(4, 0.25))


@pytest.mark.slow
def test_robust_plr_masks_evaluation_only_steps():
    r = train(_tiny(vector="sync", curriculum="robust-plr", total_timesteps=128))
    cur = r["curriculum"]
    assert cur.robust and r["num_feeds"] == 2
    assert r["train_fraction"] < 1.0  # some steps were masked out of the losses
    assert cur.num_new > 0  # new tasks were sent as evaluation-only (train=False) and still scored
    assert len(cur) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dr", "lp"])
def test_episode_curricula_get_episodes_and_no_scores(name):
    r = train(_tiny(vector="sync", curriculum=name, total_timesteps=128))
    cur = r["curriculum"]
    assert r["num_feeds"] == 0  # not a value-scored curriculum: feed_scores is never called
    assert cur.num_episodes == r["episodes"] > 0
    assert r["metrics"]["curriculum/sampled"] >= 2
