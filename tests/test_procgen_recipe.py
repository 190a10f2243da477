"""The Procgen recipe (magister.examples.procgen), run inside its virtualenv (benchmarks/_procgen_env.sh).

* the level each episode plays, as Procgen itself reports it (``level_seed`` / ``prev_level_seed`` in its
  info, and the first observation against a fresh env of that level), is the task in ``info["task"]`` and
  one the curriculum handed out, for several episodes per env across Procgen's auto-reset; the curriculum
  hears of exactly the episodes played (tests/recipes_inside/procgen_levels_check.py);
* the trainer runs end to end at a tiny budget, writes its TensorBoard log, checkpoint and result, feeds PLR
  its scores, keeps PLR⊥'s evaluation-only steps out of the update, and resumes from the checkpoint to a
  larger budget.
"""

from __future__ import annotations

import json
import re

import pytest
from venvs import REPO, run_in

import magister

pytestmark = pytest.mark.slow

GAME = "bossfight"  # episodes of a few dozen steps under a random policy


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_each_episode_plays_the_level_the_curriculum_chose(vector):
    proc = run_in("procgen", ["tests/recipes_inside/procgen_levels_check.py", "4", vector], timeout=300)
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["episodes"] >= 8  # 2 envs x at least 4 finished episodes each
    assert counts["curriculum_episodes"] == counts["episodes"]
    assert counts["checked_first_obs"] == counts["episodes"] + 2  # every episode begun, the last ones too
    # a fresh level per episode (DR over 200 levels), not Procgen replaying the last one
    assert counts["level_changes"] >= counts["episodes"] - 2


def test_trainer_runs_checkpoints_and_resumes(tmp_path):
    common = ["-m", "magister.examples.procgen.ppo_plr", "--game", GAME, "--num-envs", "2",
              "--num-steps", "64", "--eval-levels", "2", "--eval-envs", "2", "--run-dir", str(tmp_path),
              "--run-name", "tiny",
              "--checkpoint-every", "1", "--no-progress", "--curriculum", "plr_perp"]
    run_in("procgen", [*common, "--total-steps", "256"], timeout=300)
    run = tmp_path / "tiny"
    assert list(run.glob("events.out.tfevents.*")), "no TensorBoard log"
    state = magister.load(run / "checkpoint.state")
    assert (state["update"], state["global_step"], len(state["history"])) == (2, 256, 2)
    # PLR⊥: the first rollout plays only new levels (nothing is buffered before its scores arrive), which are
    # evaluation-only: none of its steps reaches the gradients
    assert state["history"][0]["train_fraction"] == 0.0
    first = json.loads((run / "result.json").read_text())
    assert first["curriculum"]["curriculum/episodes"] > 0  # the sync wrappers' reports reached PLR⊥
    assert first["curriculum"]["plr/inserted"] > 0  # and the value-L1 scores from the rollouts
    for split in ("train", "test"):
        assert len(first["eval"][split]["levels"]) == 2
    assert all(0 <= s < 200 for s in first["eval"]["train"]["levels"])
    saved = state["history"]

    run_in("procgen", [*common, "--total-steps", "384", "--resume", str(run / "checkpoint.pt")], timeout=300)
    state = magister.load(run / "checkpoint.state")
    assert (state["update"], state["global_step"], len(state["history"])) == (3, 384, 3)
    assert state["history"][:2] == saved
    second = json.loads((run / "result.json").read_text())
    # the resumed curriculum starts from the saved one: it counts the first run's episodes too
    assert second["curriculum"]["curriculum/sampled"] > first["curriculum"]["curriculum/sampled"]
    assert second["curriculum"]["curriculum/episodes"] > first["curriculum"]["curriculum/episodes"]


def test_the_pages_python_block_runs_in_the_virtualenv():
    page = (REPO / "docs" / "recipes" / "procgen.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    assert len(blocks) == 1
    out = run_in("procgen", ["-c", blocks[0]], timeout=300).stdout.strip().splitlines()[-1]
    tasks, seeds = out.split("] [")
    assert tasks.strip("[] ").split() == seeds.strip("[] ").split()  # the levels chosen are the levels played
