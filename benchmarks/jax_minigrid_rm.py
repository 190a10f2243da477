"""Speed of the JAX Minigrid x reward-machine fast path, curriculum overhead, ATLAS's qualitative result.

Prints, measured in one run on the current JAX backend (CPU unless a GPU is visible):

1. env-only steps/s: a jitted, vmapped rollout with uniform random actions (labelling + RM included);
2. full training steps/s for DR, PLR⊥ and ACCEL with the same PPO settings, and the curriculum overhead as
   the ratio ``steps/s (PLR⊥ or ACCEL) / steps/s (DR)`` (compile time excluded);
3. the qualitative result of ATLAS (Sec. 5.2, Appendix E.4): the fraction of *solvable* problems in the
   PLR⊥/ACCEL buffers over training vs the fraction among DR's training problems (about 3% with
   independent sampling); for PLR⊥/ACCEL also the *replay-weighted* solvable fraction (the probability that
   a replay - what PLR⊥ trains on - is solvable), the fraction of entries ever solved (``R_max > 0``) and
   the mean score of solvable and of unsolvable entries (``--score`` picks the score function).

``--solvability`` prints only the solvable fractions of the problem samplers instead (ATLAS Table 3: mean
and standard deviation over batches of 4096), by task sampler (sequential, random-walk DAG) and problem
sampler (independent, level-conditioned).

Usage::

    python benchmarks/jax_minigrid_rm.py                    # defaults: 32 envs x 64 steps, 60 updates
    python benchmarks/jax_minigrid_rm.py --envs 256 --updates 100 --plot out.png
    python benchmarks/jax_minigrid_rm.py --solvability --batches 5 --batch-size 4096
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from magister.examples.minigrid_rm import ppo
from magister.examples.minigrid_rm.env import NUM_ACTIONS
from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem, solvable_batch
from magister.examples.minigrid_rm.problem import auto_reset_step, reset


def env_steps_per_s(n_envs: int, n_steps: int, repeats: int = 3) -> float:
    keys = jax.random.split(jax.random.PRNGKey(0), n_envs)
    probs = jax.jit(jax.vmap(sample_problem, in_axes=(0, None)), static_argnums=1)(keys, ProblemSampler())

    @jax.jit
    def run(problems, key):
        s = jax.vmap(reset)(problems)

        def one(s, k):
            a = jax.random.randint(k, (n_envs,), 0, NUM_ACTIONS)
            s, r, term, trunc, _ = jax.vmap(auto_reset_step, in_axes=(0, 0, None))(s, a, 128)
            return s, r.sum()

        s, r = jax.lax.scan(one, s, jax.random.split(key, n_steps))
        return r.sum()

    jax.block_until_ready(run(probs, jax.random.PRNGKey(1)))
    t = time.perf_counter()
    for i in range(repeats):
        jax.block_until_ready(run(probs, jax.random.PRNGKey(2 + i)))
    return repeats * n_envs * n_steps / (time.perf_counter() - t)


def solvable_fractions(batches: int, batch_size: int, seed: int = 0,
                       tasks: tuple[str, ...] = ("sequential", "random_walk")) -> None:
    """Print ATLAS's Table 3: solvable % per (task sampler, problem sampler), mean +- std over batches."""
    sample = jax.jit(jax.vmap(sample_problem, in_axes=(0, None)), static_argnums=1)
    print(f"solvable fraction (%), {batches} batches of {batch_size} (paper, Table 3: sequential 2.7 / 83.4, "
          "DAG 3.9 / 84.8)")
    print(f"{'task sampler':14s} {'independent':>16s} {'level-cond.':>16s}")
    for task in tasks:
        cells = []
        for mode in ("independent", "level_conditioned"):
            fr = []
            for b in range(batches):
                keys = jax.random.split(jax.random.PRNGKey(1000 * seed + b), batch_size)
                fr.append(100 * solvable_batch(sample(keys, ProblemSampler(mode=mode, task=task))).mean())
            cells.append(f"{np.mean(fr):6.1f} +- {np.std(fr):4.1f}")
        print(f"{task:14s} " + " ".join(f"{c:>16s}" for c in cells))


def train_round_robin(methods: tuple[str, ...], envs: int, steps: int, updates: int, buffer: int,
                      log_every: int, seed: int, score: str = "max_mc"
                      ) -> tuple[dict[str, float], dict[str, list]]:
    """Train every method for ``updates`` updates, one update of each in turn (so that load changes on a
    shared machine hit all methods alike); returns steps/s (compile excluded) and composition curves."""
    states, fns, cfgs = {}, {}, {}
    for m in methods:
        cfgs[m] = ppo.TrainConfig(method=m, num_envs=envs, rollout_len=steps, max_steps=steps,
                                  updates=updates, minibatches=4, seed=seed,
                                  curriculum=ppo.method_curriculum(m, buffer_size=buffer, score=score))
        states[m] = ppo.init_train_state(cfgs[m])
        fns[m] = ppo.make_update(cfgs[m])
        states[m], _ = fns[m](states[m])  # compile (and the first update)
        jax.block_until_ready(states[m].params)
    timed = dict.fromkeys(methods, 0.0)
    curves: dict[str, list] = {m: [] for m in methods}
    dr_solvable: list[float] = []  # DR: every training batch, so the fraction is over all of them
    for u in range(1, updates):
        for m in methods:
            t = time.perf_counter()
            states[m], (_, sampled) = fns[m](states[m])
            jax.block_until_ready(states[m].params)
            timed[m] += time.perf_counter() - t
            if m == "dr":
                dr_solvable.append(float(solvable_batch(jax.device_get(sampled)).mean()))
            if (u + 1) % log_every == 0 or u + 1 == updates:
                comp = ppo.buffer_composition(cfgs[m], states[m], sampled)
                frac = float(np.mean(dr_solvable)) if m == "dr" else comp["solvable_fraction"]
                curves[m].append(((u + 1) * envs * steps, frac, comp["mean_rooms"], comp["mean_rm_states"],
                                  comp.get("replay_solvable_fraction", frac),
                                  comp.get("ever_solved_fraction", float("nan")),
                                  comp.get("score_solvable", float("nan")),
                                  comp.get("score_unsolvable", float("nan"))))
                c = curves[m][-1]
                print(f"  [{m}] {c[0]} env steps: solvable {c[1]:.3f}, replay-weighted {c[4]:.3f}, "
                      f"ever solved {c[5]:.3f}, score solvable/unsolvable {c[6]:.4f}/{c[7]:.4f}", flush=True)
    return {m: (updates - 1) * envs * steps / timed[m] for m in methods}, curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--buffer", type=int, default=64, help="PLR/ACCEL buffer size")
    ap.add_argument("--methods", nargs="+", default=["dr", "plr", "accel"], choices=["dr", "plr", "accel"])
    ap.add_argument("--score", default="max_mc", choices=["max_mc", "positive_value_loss", "learnability"],
                    help="PLR/ACCEL score function")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", type=str, default=None)
    ap.add_argument("--skip-env", action="store_true")
    ap.add_argument("--solvability", action="store_true", help="only the samplers' solvable fractions")
    ap.add_argument("--batches", type=int, default=5, help="--solvability: number of batches")
    ap.add_argument("--batch-size", type=int, default=4096, help="--solvability: problems per batch")
    ap.add_argument("--tasks", nargs="+", default=["sequential", "random_walk"],
                    choices=["sequential", "random_walk"], help="--solvability: task samplers")
    a = ap.parse_args()
    print(f"backend: {jax.default_backend()}  devices: {jax.devices()}")
    if a.solvability:
        solvable_fractions(a.batches, a.batch_size, a.seed, tuple(a.tasks))
        return
    if not a.skip_env:
        for n in (a.envs, 8 * a.envs):
            sps = env_steps_per_s(n, a.steps)
            print(f"env-only (random actions, {n} envs x {a.steps} steps): {sps:,.0f} steps/s")
    keys = jax.random.split(jax.random.PRNGKey(99), 2048)
    base = solvable_batch(jax.jit(jax.vmap(sample_problem, in_axes=(0, None)), static_argnums=1)(
        keys, ProblemSampler())).mean()
    print(f"solvable fraction of independently sampled problems (2048 samples): {base:.3f}")
    methods = tuple(a.methods)
    speeds, curves = train_round_robin(methods, a.envs, a.steps, a.updates, a.buffer, a.log_every, a.seed,
                                       a.score)
    print(f"\ntraining ({a.envs} envs x {a.steps} steps per update, {a.updates} updates, buffer {a.buffer}, "
          f"score {a.score}, compile excluded)")
    print(f"{'method':8s} {'steps/s':>10s} {'ratio':>7s}  (to dr, or to the first method)")
    ref = speeds.get("dr", next(iter(speeds.values())))
    for m, s in speeds.items():
        print(f"{m:8s} {s:10,.0f} {s / ref:7.2f}")
    print("\nsolvable fraction over training (PLR/ACCEL: buffer; DR: all its training batches so far)")
    print(f"{'env steps':>10s} " + " ".join(f"{m:>7s}" for m in curves))
    first = next(iter(curves.values()))
    for i in range(len(first)):
        print(f"{first[i][0]:10d} " + " ".join(f"{curves[m][i][1]:7.3f}" for m in curves))
    print("\nreplay-weighted solvable fraction (what PLR/ACCEL train on; DR: as above)")
    print(f"{'env steps':>10s} " + " ".join(f"{m:>7s}" for m in curves))
    for i in range(len(first)):
        print(f"{first[i][0]:10d} " + " ".join(f"{curves[m][i][4]:7.3f}" for m in curves))
    for m in curves:
        if m != "dr":
            r = curves[m][-1]
            print(f"{m} buffer at the end: ever solved {r[5]:.3f}; mean score of solvable entries "
                  f"{r[6]:.4f}, of unsolvable entries {r[7]:.4f}")
    print("\nbuffer mean rooms / RM states at the end: " + ", ".join(
        f"{m}: {curves[m][-1][2]:.2f} / {curves[m][-1][3]:.2f}" for m in curves))
    if a.plot:
        runs = {m: [{"env_steps": r[0], "solvable_fraction": r[1], "mean_rooms": r[2], "mean_rm_states": r[3]}
                    for r in rows] for m, rows in curves.items()}
        ppo.plot_composition(runs, a.plot)
        print(f"plot written to {a.plot}")


if __name__ == "__main__":
    main()
