"""Sanity check of the XLand PPO trainer: does it learn easy navigation goals on a few fixed tasks?

``python -m magister.examples.xland.sanity --tasks 8 --total-steps 60000`` builds ``--tasks`` 7x7 tasks
whose learner goal is one easy navigation literal (``near(me, <object>)`` or ``on(me, <floor> floor)``,
drawn at random), trains :func:`magister.examples.xland_ppo.train` uniformly on them (no task curriculum;
the co-player slot is filled by the FSP snapshot curriculum as in the trainer) and prints the mean
training return (/ episode length) in ten bins over training, next to the uniform-random policy and the
scripted goal-seeker on the same tasks. ``--tasks 1 --goal "near(me, purple cube)"`` trains on one fixed
task. ``--no-egocentric`` runs the first version's allocentric CNN (issue 7: that agent did not learn);
``--no-goal-cnn`` the CNN without the goal-entity planes and FiLM (it memorised its worlds instead).
``--heldout N`` then plays the trained agent on ``N`` other easy tasks (new worlds, noop co-player) and
prints its mean return next to the random policy's and the goal-seeker's: does what it learned transfer?
With ``--tasks 200 --heldout 40 --total-steps 100000`` it does (held-out 0.56 against random 0.26; the
numbers are in :mod:`magister.examples.xland_ppo`'s docstring).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile

import numpy as np
import torch

from magister.examples.xland.coplayers import LEARNER, NOOP, GoalSeeker
from magister.examples.xland.env import XLandEnv, XLandTask, play_episode
from magister.examples.xland.evaluation import RandomPolicy, SeekerPolicy, play
from magister.examples.xland.game import COLOURS, FLOOR_COLOURS, SHAPES, Game
from magister.examples.xland.world import condition_world, generate_world

logger = logging.getLogger(__name__)

__all__ = ["easy_tasks", "learning_curve", "main"]


def easy_tasks(n: int, seed: int = 5, goal: str | None = None, size: int = 7) -> list[XLandTask]:
    """``n`` tasks in random ``size`` x ``size`` worlds; the learner's goal is ``goal`` or one random
    ``near(me, <object>)`` / ``on(me, <floor> floor)`` literal, the co-player's ``near(me, black sphere)``.
    A task on which the scripted goal-seeker scores nothing in a 40-step episode (the target is out of
    reach) is drawn again."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = np.random.default_rng(seed)
    seeker = GoalSeeker()
    tasks: list[XLandTask] = []
    for _ in range(100 * n):
        if len(tasks) == n:
            break
        g = goal
        if g is None:
            if rng.random() < 0.5:
                g = f"near(me, {COLOURS[rng.integers(len(COLOURS))]} {SHAPES[rng.integers(len(SHAPES))]})"
            else:
                g = f"on(me, {FLOOR_COLOURS[rng.integers(len(FLOOR_COLOURS))]} floor)"
        game = Game.parse([g, "near(me, black sphere)"])
        world = condition_world(generate_world(rng, size, n_players=2), game, rng)
        task = XLandTask(world, game, (LEARNER, NOOP))
        env = XLandEnv(task, episode_length=40)
        if play_episode(env, [lambda o, e=env: seeker.act(e, 0)], seed=0)[0] > 0:
            tasks.append(task)
    if len(tasks) < n:
        raise RuntimeError(f"easy_tasks: only {len(tasks)} of {n} drawn tasks were solvable (goal {goal!r})")
    return tasks


def reference(tasks: list[XLandTask], episode_length: int, episodes: int = 20) -> tuple[float, float]:
    """Mean return / ``episode_length`` of the uniform-random policy and of the goal-seeker on ``tasks``."""
    rand, seek = [], []
    seeker = GoalSeeker()
    for t in tasks:
        env = XLandEnv(t, episode_length=episode_length)
        rand += [play_episode(env, seed=k)[0] for k in range(episodes)]
        seek.append(play_episode(env, [lambda o, e=env: seeker.act(e, 0)], seed=0)[0])
    return float(np.mean(rand)) / episode_length, float(np.mean(seek)) / episode_length


def learning_curve(history: list[dict], bins: int = 10) -> list[tuple[int, float]]:
    """``(environment steps at the bin's end, episode-weighted mean training return / L)`` per bin."""
    k = max(1, len(history) // bins)
    out = []
    for i in range(0, len(history), k):
        rows = history[i:i + k]
        n = sum(r.get("episodes/train", 0) for r in rows)
        if n:
            ret = sum(r.get("return/train", 0.0) * r.get("episodes/train", 0) for r in rows) / n
            out.append((int(rows[-1]["global_step"]), float(ret)))
    return out


def main(argv: list[str] | None = None) -> list[tuple[int, float]]:
    from magister.examples.xland_ppo import TorchPolicy, make_agent, parse_args, train

    p = argparse.ArgumentParser(prog="python -m magister.examples.xland.sanity", description=__doc__,
                                epilog="Needs the 'examples' extra (torch, scipy): pip install "
                                       "'magister[examples]'.")
    p.add_argument("--tasks", type=int, default=8, help="number of fixed easy tasks")
    p.add_argument("--goal", default=None, help="the learner's goal for every task (default: random easy)")
    p.add_argument("--total-steps", type=int, default=60_000)
    p.add_argument("--seed", type=int, default=0, help="trainer seed")
    p.add_argument("--task-seed", type=int, default=5, help="seed of the tasks")
    p.add_argument("--egocentric", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--goal-cnn", action=argparse.BooleanOptionalAction, default=True,
                   help="goal-conditioned CNN; --no-goal-cnn: the goal joins after the CNN")
    p.add_argument("--heldout", type=int, default=0, help="easy tasks in new worlds to test the agent on")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    tasks = easy_tasks(a.tasks, seed=a.task_seed, goal=a.goal)
    rand, seek = reference(tasks, 40)
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["--total-steps", str(a.total_steps), "--seed", str(a.seed), "--episode-length", "40",
                 "--n-test", "4", "--n-validation", "4", "--eval-every", "0", "--no-tensorboard",
                 "--no-progress", "--no-plot", "--run-dir", tmp, "--run-name", "sanity",
                 "--egocentric" if a.egocentric else "--no-egocentric",
                 "--goal-cnn" if a.goal_cnn else "--no-goal-cnn"]
        args = parse_args(flags)
        result = train(args, train_tasks=tasks)
        agent = make_agent(args)
        agent.load_state_dict(torch.load(f"{result.run_dir}/checkpoint.pt")["agent"])
    curve = learning_curve(result.history)
    sys.stdout.write(f"goals: {[str(t.game.goals[0]) for t in tasks]}\n"
                     f"random policy {rand:.3f}, goal-seeker {seek:.3f} (mean return / episode length)\n"
                     + "\n".join(f"{s:7d} steps  train return {r:.3f}" for s, r in curve) + "\n")
    if a.heldout > 0:
        held = easy_tasks(a.heldout, seed=a.task_seed + 1_000)
        pols = {"agent": TorchPolicy(agent, seed=a.seed), "random": RandomPolicy(a.seed),
                "seeker": SeekerPolicy()}
        rets = {k: play(held, pol, episodes=2, episode_length=40, seed=a.seed).mean() / 40
                for k, pol in pols.items()}
        sys.stdout.write(f"{a.heldout} held-out easy tasks (mean return / episode length): "
                         + ", ".join(f"{k} {v:.3f}" for k, v in rets.items()) + "\n")
    return curve


if __name__ == "__main__":
    main()
