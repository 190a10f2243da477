"""Run inside the Procgen virtualenv by tests/test_procgen_recipe.py: each episode plays the level the
curriculum chose, as Procgen itself reports it.

The recipe's own vector env (``SyncVectorEnv``, or ``AsyncVectorEnv`` with ``async`` as the second argument,
of ``GymnasiumSyncWrapper(ProcgenLevels)`` against ``magister.serve``, ``SAME_STEP`` autoreset: the trainer's
layout) plays random actions for several episodes per env, so every env crosses Procgen's internal
auto-reset several times. For every episode:

* Procgen's ``level_seed`` in the reset's info (for the first episode) or in the autoreset's info (later
  ones), and in every step's info up to the last, equals ``info["task"]``; at the last step Procgen's
  ``prev_level_seed`` (the level that just ended) equals the task of the finished episode (``final_info``);
* the first observation equals that of a freshly made Procgen env of that level alone;
* the task is one the curriculum sampled (a recording curriculum), and consecutive episodes of an env follow
  the order in which the curriculum's tasks were handed out (a fresh level each time, not Procgen's replay).

Then, after the envs are closed (their feedback flushed), the curriculum's episode records (task, length)
are exactly the episodes played, with the lengths counted here. Prints one JSON line of counts.
"""

from __future__ import annotations

import collections
import json
import sys

import gymnasium as gym
import numpy as np
from procgen import ProcgenGym3Env

from magister import GymnasiumSyncWrapper, serve
from magister.curricula import DomainRandomization
from magister.examples.procgen.levels import ProcgenLevels, training_levels

GAME = "bossfight"  # short episodes under random actions
EPISODES_PER_ENV = int(sys.argv[1]) if len(sys.argv) > 1 else 4
VECTOR = sys.argv[2] if len(sys.argv) > 2 else "sync"  # or "async": the envs in worker processes
NUM_ENVS = 2


class Recording(DomainRandomization):
    """Uniform levels, recording what it hands out and the episodes it hears of."""

    def __init__(self, space):
        super().__init__(space, seed=7)
        self.sampled: list[int] = []
        self.episodes: list[tuple[int, int]] = []

    def sample(self, k=1):
        tasks = super().sample(k)
        self.sampled += [int(t) for t in tasks]
        return tasks

    def update_on_episode(self, episode_return, length, task, progress=0.0, env_id=None):
        self.episodes.append((int(task), int(length)))
        super().update_on_episode(episode_return, length, task, progress, env_id)


def fresh_first_obs(seed: int) -> np.ndarray:
    env = ProcgenGym3Env(num=1, env_name=GAME, distribution_mode="easy", num_levels=1, start_level=seed,
                         num_threads=0, rand_seed=123)
    return env.observe()[1]["rgb"][0]


def main() -> None:
    space = training_levels(200)
    curriculum = Recording(space)
    server = serve(curriculum)
    fns = [lambda: GymnasiumSyncWrapper(ProcgenLevels(space, GAME), server.address) for _ in range(NUM_ENVS)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if VECTOR == "async":
        envs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="fork")
    else:
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    rng = np.random.default_rng(0)
    obs, info = envs.reset(seed=0)
    played: list[list[int]] = [[] for _ in range(NUM_ENVS)]
    finished: list[tuple[int, int]] = []
    length = np.zeros(NUM_ENVS, dtype=int)
    checked_obs = 0

    def start(k: int, obs_k: np.ndarray, info_k_task: int, info_k_seed: int) -> None:
        nonlocal checked_obs
        assert info_k_seed == info_k_task, f"env {k}: Procgen plays {info_k_seed}, info says {info_k_task}"
        assert np.array_equal(obs_k, fresh_first_obs(info_k_task)), f"env {k}: first obs is not level's"
        checked_obs += 1
        played[k].append(info_k_task)

    for k in range(NUM_ENVS):
        start(k, obs[k], int(info["task"][k]), int(info["level_seed"][k]))
    steps = 0
    while min(len(p) for p in played) <= EPISODES_PER_ENV:
        obs, rew, term, trunc, info = envs.step(rng.integers(15, size=NUM_ENVS))
        steps += 1
        assert steps < 20_000, "episodes do not end"
        length += 1
        done = np.logical_or(term, trunc)
        for k in range(NUM_ENVS):
            if not done[k]:
                assert int(info["level_seed"][k]) == int(info["task"][k]) == played[k][-1], (
                    f"env {k} mid-episode: level_seed {info['level_seed'][k]}, task {info['task'][k]}, "
                    f"episode's task {played[k][-1]}")
                continue
            final = info["final_info"]
            assert int(final["task"][k]) == played[k][-1], "final_info's task is not the episode's"
            assert int(final["prev_level_seed"][k]) == played[k][-1], (
                f"env {k}: Procgen says level {final['prev_level_seed'][k]} ended, magister "
                f"{played[k][-1]}")
            finished.append((played[k][-1], int(length[k])))
            length[k] = 0
            start(k, obs[k], int(info["task"][k]), int(info["level_seed"][k]))
    envs.close()  # flushes the workers' feedback
    server.close()

    sampled = collections.Counter(curriculum.sampled)
    for k in range(NUM_ENVS):
        assert not (collections.Counter(played[k]) - sampled), f"env {k} played levels never sampled"
    # each env's levels follow the curriculum's hand-out order: a subsequence of what was sampled
    for k in range(NUM_ENVS):
        it = iter(curriculum.sampled)
        assert all(any(t == s for s in it) for t in played[k]), f"env {k}: {played[k]} out of sampled order"
    assert sorted(curriculum.episodes) == sorted(finished), (
        f"the curriculum heard of {sorted(curriculum.episodes)}, the envs played {sorted(finished)}")
    changes = sum(a != b for p in played for a, b in zip(p, p[1:]))
    print(json.dumps({"episodes": len(finished), "curriculum_episodes": len(curriculum.episodes),
                      "checked_first_obs": checked_obs, "level_changes": changes, "steps": steps,
                      "distinct_levels": len({t for p in played for t in p})}))


if __name__ == "__main__":
    main()
