"""Run inside the NetHack virtualenv by tests/test_nethack_recipe.py: the recipe's tasks are what NLE played.

Usage: ``.venvs/nethack/bin/python tests/recipes_inside/nethack_check.py RUN_DIR``. Exits non-zero (with the
reason) when a check fails; prints one ``OK`` line per check otherwise.

* game seeds: the seeds NLE itself reports after each reset (``get_seeds()``, in every info) are
  ``(task, task)`` with re-seeding off, for every step of every episode across autoresets; the first
  observation of a seeded game is that of a fresh ``NetHackScore-v0`` given the same seed (and another
  seed's differs); every finished episode reached the curriculum; the script resumes from its checkpoint;
* MiniHack ids (envs in worker processes): the id in the running env's own spec is the chosen id, every
  finished episode reached the curriculum.
"""

from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import numpy as np

warnings.simplefilter("ignore")

from magister.examples.nethack import train as recipe  # noqa: E402
from magister.examples.nethack.common import OBSERVATION_KEYS, make_seed_env, make_seed_spaces  # noqa: E402


def fail(msg: str) -> None:
    raise SystemExit(f"FAILED: {msg}")


def rows(infos: dict, keys: tuple[str, ...]) -> list[tuple]:
    """Per env (and per finished episode under SAME_STEP autoreset) the values of ``keys``."""
    out = [tuple(infos[k][i] for k in keys) for i in range(len(infos["task"]))]
    if "_final_info" in infos:
        fin = infos["final_info"]
        out += [tuple(fin[k][i] for k in keys) for i in np.flatnonzero(infos["_final_info"])]
    return out


def first_obs_matches_fresh_env() -> None:
    space, _ = make_seed_spaces(50, 1)
    env = make_seed_env(space)
    for task in (3, 17, 3):
        obs, info = env.reset(options={"task": task})
        fresh = gym.make("NetHackScore-v0", observation_keys=OBSERVATION_KEYS)
        fresh.unwrapped.seed(core=task, disp=task, reseed=False)
        ref, _ = fresh.reset()
        same = all(np.array_equal(obs[k], ref[k]) for k in OBSERVATION_KEYS)
        if not same:
            fail(f"seed {task}: the first observation differs from a fresh env seeded with it")
    other, _ = env.reset(options={"task": 4})
    if np.array_equal(other["glyphs"], ref["glyphs"]):
        fail("seeds 3 and 4 start the same game")
    print("OK first observations equal a fresh env's with the same seed")


def seeds(run_dir: str) -> None:
    seen: list[tuple] = []
    common = ["--task-space", "seeds", "--num-seeds", "40", "--num-test-seeds", "2", "--num-envs", "2",
              "--num-steps", "64", "--max-episode-steps", "24", "--no-progress-timeout", "10",
              "--run-dir", run_dir, "--run-name", "seeds", "--no-progress", "--checkpoint-every", "1"]
    args = recipe.parse_dataclass(recipe.Args, [*common, "--total-timesteps", "256"], prog="check")
    result = recipe.train(args, step_hook=lambda infos: seen.extend(
        rows(infos, ("task", "nle_core_seed", "nle_disp_seed", "nle_reseed"))))
    bad = [r for r in seen if not (r[0] == r[1] == r[2] and not r[3])]
    if bad:
        fail(f"NLE reported other seeds than the task (task, core, disp, reseed): {bad[:5]}")
    episodes = len(result["episode_returns"])
    if episodes < 8 or len({r[0] for r in seen}) < 5:
        fail(f"too few episodes ({episodes}) or tasks ({len({r[0] for r in seen})}) to check anything")
    if result["metrics"]["curriculum/episodes"] != episodes:
        fail(f"curriculum saw {result['metrics']['curriculum/episodes']} episodes, the loop {episodes}")
    print(f"OK seeds: {len(seen)} step infos, {episodes} episodes on {len({r[0] for r in seen})} seeds; NLE "
          "reported (task, task, reseed=False) every time; every episode reached the curriculum")
    resumed = recipe.main([*common, "--total-timesteps", "512", "--resume", f"{run_dir}/seeds/checkpoint.pt"])
    if resumed["global_step"] != 512 or len(resumed["history"]) != 4:
        fail(f"resume: global_step {resumed['global_step']}, history {len(resumed['history'])}")
    if resumed["metrics"]["curriculum/episodes"] != episodes + len(resumed["episode_returns"]):
        fail("resume: the curriculum's episode count did not go on from the checkpoint")
    print("OK seeds: resumed from the checkpoint")


def minihack(run_dir: str) -> None:
    seen: list[tuple] = []
    args = recipe.parse_dataclass(recipe.Args, [
        "--task-space", "minihack", "--num-envs", "2", "--num-steps", "64", "--minihack-max-steps", "16",
        "--total-timesteps", "256", "--vector", "async", "--run-dir", run_dir, "--no-progress",
        "--no-tensorboard"], prog="check")
    space = recipe.make_minihack_space(list(args.minihack_ids))
    result = recipe.train(args, step_hook=lambda infos: seen.extend(rows(infos, ("task", "env_id"))))
    bad = [(t, e) for t, e in seen if space.decode(int(t)) != e]
    if bad:
        fail(f"the env ran another MiniHack id than the task (task, env id): {bad[:5]}")
    ids = {e for _, e in seen}
    if len(ids) < 3:
        fail(f"only {ids} were played: too few to check the switching")
    episodes = len(result["episode_returns"])
    if result["metrics"]["curriculum/episodes"] != episodes:
        fail(f"curriculum saw {result['metrics']['curriculum/episodes']} episodes, the loop {episodes}")
    print(f"OK minihack: {len(seen)} step infos, {episodes} episodes on {len(ids)} ids; every env id from "
          "the env's spec was the chosen id; every episode reached the curriculum")


if __name__ == "__main__":
    first_obs_matches_fresh_env()
    seeds(sys.argv[1])
    minihack(sys.argv[1])
