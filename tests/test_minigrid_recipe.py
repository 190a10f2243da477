"""The MiniGrid recipe (magister.examples.minigrid): the level each episode played is the seed in its info.

The check is made from the environment's own report: ``info["level_digest"]`` is a hash of the grid MiniGrid
generated (and the agent's start), taken in the env after each reset; it must equal the digest of a fresh env
reset with ``seed=info["task"]``, for every step of every episode across autoresets, under the CleanRL-style
loop (SAME_STEP autoreset, envs in the learner's process) and under SB3 (SubprocVecEnv, its default start
method). Then: every finished episode reached the curriculum, and both scripts resume from their checkpoints.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("minigrid")
pytest.importorskip("torch")

from magister.examples.minigrid.common import (  # noqa: E402
    DEFAULT_ENV,
    fresh_level,
    level_digest,
    make_curriculum,
    make_env,
    make_task_spaces,
)

MAX_STEPS = 12  # short episodes: many autoresets in a tiny budget


@cache
def expected_digest(seed: int) -> str:
    return level_digest(fresh_level(DEFAULT_ENV, seed, max_steps=MAX_STEPS))


def check_levels(pairs: list[tuple[int, str]]) -> None:
    """Every (task, digest) an env reported is the level a fresh reset(seed=task) generates."""
    by_task = defaultdict(set)
    for task, digest in pairs:
        by_task[int(task)].add(digest)
    for task, digests in by_task.items():
        assert digests == {expected_digest(task)}, f"seed {task}: the env played another level"


def test_the_seed_fixes_the_level_whatever_came_before():
    a = fresh_level(DEFAULT_ENV, 3)
    b = fresh_level(DEFAULT_ENV, 11)
    b.step(2)
    b.reset(seed=3)
    assert level_digest(a) == level_digest(b)
    assert np.array_equal(a.unwrapped.grid.encode(), b.unwrapped.grid.encode())
    assert len({level_digest(fresh_level(DEFAULT_ENV, s)) for s in range(8)}) == 8


def test_the_task_wrapper_plays_the_task_not_the_reset_seed():
    train, held = make_task_spaces(20, 5)
    env = make_env(DEFAULT_ENV, train, max_steps=MAX_STEPS)
    _, info = env.reset(seed=999, options={"task": 4})
    assert info["task"] == 4 and info["level_digest"] == expected_digest(4)
    _, info = env.reset(seed=123)  # no task: the level is replayed
    assert info["level_digest"] == expected_digest(4)
    with pytest.raises(ValueError, match="not a task"):
        env.reset(options={"task": 20})  # a held-out seed is not a training task
    assert held.tasks == [20, 21, 22, 23, 24]


@settings(max_examples=15, deadline=None)
@given(before=st.integers(0, 39), task=st.integers(0, 39), actions=st.lists(st.integers(0, 6), max_size=8),
       reset_seed=st.none() | st.integers(0, 10**6))
def test_whatever_came_before_the_task_plays_its_own_level(before, task, actions, reset_seed):
    train, _ = make_task_spaces(40, 1)
    env = make_env(DEFAULT_ENV, train, max_steps=MAX_STEPS)
    env.reset(options={"task": before})
    for a in actions:
        if any(env.step(a)[2:4]):
            break
    _, info = env.reset(seed=reset_seed, options={"task": task})
    assert info["task"] == task and info["level_digest"] == expected_digest(task)


def test_paper_settings_and_bad_names():
    train, _ = make_task_spaces(50, 5)
    plr = make_curriculum("plr", train)
    settings = (plr.temperature, plr.staleness_coef, plr.prioritization, plr.score)
    assert settings == (0.1, 0.3, "rank", "value_l1")
    assert plr.capacity == 50
    with pytest.raises(ValueError, match="unknown curriculum"):
        make_curriculum("alp", train)
    with pytest.raises(ValueError, match="num_levels"):
        make_task_spaces(0, 5)


@pytest.mark.slow
def test_cleanrl_loop_plays_the_seeds_and_resumes(tmp_path):
    from magister.examples.minigrid import cleanrl_plr

    pairs: list[tuple[int, str]] = []

    def hook(infos):
        for i in range(len(infos["task"])):
            pairs.append((infos["task"][i], infos["level_digest"][i]))
        if "_final_info" in infos:  # SAME_STEP: the finished episode's own report
            fin = infos["final_info"]
            for i in np.flatnonzero(infos["_final_info"]):
                pairs.append((fin["task"][i], fin["level_digest"][i]))

    common = ["--num-envs", "4", "--num-steps", "32", "--num-levels", "40", "--num-test-levels", "4",
              "--max-steps", str(MAX_STEPS), "--run-dir", str(tmp_path), "--run-name", "r", "--no-progress",
              "--checkpoint-every", "1"]
    args = cleanrl_plr.parse_dataclass(cleanrl_plr.Args, [*common, "--total-timesteps", "256"], prog="t")
    first = cleanrl_plr.train(args, step_hook=hook)
    episodes = len(first["episode_returns"])
    assert episodes >= 16
    assert len({t for t, _ in pairs}) >= 10
    check_levels(pairs)
    assert first["metrics"]["curriculum/episodes"] == episodes  # every finished episode reached PLR
    assert first["metrics"]["plr/buffer_size"] > 0  # value-L1 scores arrived
    assert set(first["eval"]) == {"eval/return", "eval/success"}

    # resumed with the envs in worker processes: the checkpoint's curriculum goes behind magister.serve
    resumed = cleanrl_plr.main([*common, "--total-timesteps", "512", "--vector", "async",
                                "--resume", str(tmp_path / "r" / "checkpoint.pt")])
    assert resumed["global_step"] == 512 and len(resumed["history"]) == 4
    assert resumed["metrics"]["curriculum/episodes"] == episodes + len(resumed["episode_returns"])


@pytest.mark.slow
def test_sb3_subproc_plays_the_seeds_and_resumes(tmp_path):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback

    from magister.examples.minigrid import sb3_plr

    class Record(BaseCallback):
        def __init__(self):
            super().__init__()
            self.pairs, self.dones = [], 0

        def _on_step(self):
            for info in self.locals["infos"]:  # SB3: a step's info is of the episode that step played
                self.pairs.append((info["task"], info["level_digest"]))
            self.dones += int(np.sum(self.locals["dones"]))
            return True

    rec = Record()
    first = sb3_plr.train(num_levels=40, num_test_levels=4, total_steps=256, num_envs=2, n_steps=64,
                          batch_size=64, max_steps=MAX_STEPS, run_dir=str(tmp_path), progress=False,
                          tensorboard=False, callbacks=[rec])
    assert rec.dones >= 16
    assert len({t for t, _ in rec.pairs}) >= 10
    check_levels(rec.pairs)
    assert first["metrics"]["curriculum/episodes"] == rec.dones  # every finished episode reached PLR
    assert first["num_feeds"] == 2 and first["metrics"]["plr/buffer_size"] > 0

    resumed = sb3_plr.main(["--num-levels", "40", "--num-test-levels", "4", "--total-steps", "512",
                            "--num-envs", "2", "--n-steps", "64", "--batch-size", "64", "--max-steps",
                            str(MAX_STEPS), "--run-dir", str(tmp_path), "--resume", "--no-progress"])
    assert resumed["num_timesteps"] == 512
    assert resumed["metrics"]["curriculum/episodes"] > rec.dones  # the restored counts went on


@pytest.mark.slow
def test_cleanrl_loop_with_uniform_seeds_feeds_no_scores(tmp_path):
    from magister.examples.minigrid import cleanrl_plr

    args = cleanrl_plr.parse_dataclass(cleanrl_plr.Args, [
        "--curriculum", "dr", "--num-envs", "2", "--num-steps", "32", "--num-levels", "40",
        "--num-test-levels", "2", "--max-steps", str(MAX_STEPS), "--total-timesteps", "64",
        "--run-dir", str(tmp_path), "--no-progress", "--no-tensorboard"], prog="t")
    result = cleanrl_plr.train(args)
    assert result["metrics"]["curriculum/episodes"] == len(result["episode_returns"]) >= 4
    assert not any(k.startswith("plr/") for k in result["metrics"])
