"""``python -m magister.examples.xland``: the probe games' measures and the env's throughput.

Prints the exploration difficulty, competitiveness and balance of every probe game, then plays random
actions in a few tasks and prints environment steps per second (one process, one core).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from .coplayers import LEARNER, RANDOM, SEEKER
from .env import ACTIONS, XLandEnv, XLandTask
from .game import PROBE_GAMES, game_measures
from .world import condition_world, generate_world

logger = logging.getLogger(__name__)


def measure_table() -> list[str]:
    """One line per probe game: kappa, comp, bal and N_phi."""
    lines = [f"{'game':22s} {'kappa':>7s} {'comp':>7s} {'bal':>7s} {'N_phi':>6s}"]
    for name, game in PROBE_GAMES.items():
        m = game_measures(game)
        lines.append(f"{name:22s} {m.exploration_difficulty:7.3f} {m.competitiveness:7.3f} "
                     f"{m.balance:7.3f} {m.n_states:6d}")
    return lines


def throughput(steps: int = 2000, seed: int = 0) -> list[str]:
    """Env steps per second with random learner actions, for a few (game, co-player) pairs."""
    rng = np.random.default_rng(seed)
    lines = [f"{'game':22s} {'co-players':>16s} {'env steps/s':>12s} {'agent steps/s':>14s}"]
    for name, cps in (("xrps", (LEARNER, LEARNER)), ("xrps", (LEARNER, RANDOM)),
                      ("hide_and_seek", (LEARNER, SEEKER)), ("choose_wisely_3p", (LEARNER,) * 3)):
        game = PROBE_GAMES[name]
        world = condition_world(generate_world(rng, 11, n_players=game.n_players), game, rng)
        env = XLandEnv(XLandTask(world, game, cps), episode_length=steps)
        env.reset(seed=seed)
        agents = list(env.agents)
        acts = rng.integers(len(ACTIONS), size=(steps, len(agents)))
        t0 = time.perf_counter()
        for k in range(steps):
            env.step({a: int(acts[k, j]) for j, a in enumerate(agents)})
        dt = time.perf_counter() - t0
        lines.append(f"{name:22s} {str(cps):>16s} {steps / dt:12.0f} {steps * len(agents) / dt:14.0f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, epilog="Needs only the core install.")
    parser.add_argument("--steps", type=int, default=2000, help="steps per throughput run")
    args = parser.parse_args(argv)
    out = measure_table() + [""] + throughput(args.steps)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
