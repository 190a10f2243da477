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

``--speed`` prints the speed targets of the fast path against a same-run baseline instead: XLand-MiniGrid's
DoorKey-8x8 (xminigrid, in the separate venv built by ``benchmarks/_xminigrid_env.sh``; env-only with random
actions, and the minimal feed-forward PPO of ``benchmarks/_xminigrid_ppo.py``) at the same envs x steps,
epochs and minibatches. Every measurement runs in its own subprocess (one thread: ``OMP_NUM_THREADS=1`` and
XLA's single-thread flags), the baseline's and magister's alternating over ``--rounds`` rounds; each figure
is the best of its rounds. Rows: env-only steps/s (magister: grid, literal-only labels, RM, auto-reset and
the observation; xminigrid: its step with the observation), DR and SFL training steps/s (SFL with its
refreshes, every ``update_period`` updates; compile excluded), the compile time of the first update, and
the ratios the targets are stated in; SFL / DR is paired: each SFL subprocess also trains DR, alternating
blocks of ``update_period`` updates (SFL's with its refresh), and the row is the median of the per-pair
ratios of all rounds (the machine's drift between subprocesses would otherwise move it by more than the
target's margin). ``--before DIR`` also measures another checkout of magister (``DIR``
holds a ``magister`` folder, e.g. ``git archive <commit>`` unpacked) in the same rounds.

``--speed`` runs on whatever backend JAX finds (a GPU when one is visible; nothing here pins the CPU): the
parent process only starts subprocesses and never initializes a backend itself (on a GPU it would hold the
memory its workers need), a probe subprocess names the backend and device first, every worker reports its
own, and the output names them. The one-thread settings (``OMP_NUM_THREADS``, XLA's CPU flags) stay on
every backend; on a GPU they leave the device's work as it is. With ``--write-results`` the output goes
into the section ``jax-minigrid-rm`` on the CPU, ``jax-minigrid-rm-gpu`` on a GPU (so a GPU run does not
replace the CPU figures).

Usage::

    python benchmarks/jax_minigrid_rm.py                    # defaults: 32 envs x 64 steps, 60 updates
    python benchmarks/jax_minigrid_rm.py --envs 256 --updates 100 --plot out.png
    python benchmarks/jax_minigrid_rm.py --solvability --batches 5 --batch-size 4096
    bash benchmarks/_xminigrid_env.sh && python benchmarks/jax_minigrid_rm.py --speed [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

# The magister.examples.minigrid_rm modules are imported inside the functions that use them: importing them
# initializes JAX's backend (module-level constants), which the --speed parent must not do.


def env_steps_per_s(n_envs: int, n_steps: int, repeats: int = 3) -> float:
    from magister.examples.minigrid_rm.env import NUM_ACTIONS
    from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem
    from magister.examples.minigrid_rm.problem import auto_reset_step, reset

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
    from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem, solvable_batch

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
    from magister.examples.minigrid_rm import ppo
    from magister.examples.minigrid_rm.levels import solvable_batch

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


# ---------------------------------------------------------------------------------------------------
# --speed: the fast path's targets against xminigrid, each measurement in its own subprocess
# ---------------------------------------------------------------------------------------------------
_ONE_THREAD = {"OMP_NUM_THREADS": "1",
               "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def backend_info() -> dict[str, str]:
    """``{"backend": "cpu" | "gpu" | ..., "device": the first device's kind}`` of this process."""
    return {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind}


def section_name(backend: str) -> str:
    """The results section a ``--speed --write-results`` run on ``backend`` writes: ``jax-minigrid-rm`` on
    the CPU, ``jax-minigrid-rm-<backend>`` elsewhere (a GPU run adds its figures beside the CPU's)."""
    return "jax-minigrid-rm" if backend == "cpu" else f"jax-minigrid-rm-{backend}"


def _worker_env(envs: int, steps: int, blocks: int = 3) -> dict:
    """magister env-only: random actions, auto-reset, and the observation (as xminigrid computes it)."""
    from magister.examples.minigrid_rm.env import NUM_ACTIONS, observe
    from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem
    from magister.examples.minigrid_rm.problem import auto_reset_step, reset

    keys = jax.random.split(jax.random.PRNGKey(0), envs)
    probs = jax.jit(jax.vmap(sample_problem, in_axes=(0, None)), static_argnums=1)(keys, ProblemSampler())

    @jax.jit
    def run(problems, key):
        s = jax.vmap(reset)(problems)

        def one(s, k):
            a = jax.random.randint(k, (envs,), 0, NUM_ACTIONS)
            s, r, term, trunc, _ = jax.vmap(auto_reset_step, in_axes=(0, 0, None))(s, a, 128)
            return s, r.sum() + jax.vmap(observe)(s.grid).sum()

        return jax.lax.scan(one, s, jax.random.split(key, steps))[1].sum()

    t = time.perf_counter()
    jax.block_until_ready(run(probs, jax.random.PRNGKey(1)))
    compile_s = time.perf_counter() - t
    best = 0.0
    for b in range(blocks):
        t = time.perf_counter()
        for i in range(5):
            jax.block_until_ready(run(probs, jax.random.PRNGKey(2 + 5 * b + i)))
        best = max(best, 5 * envs * steps / (time.perf_counter() - t))
    return {"steps_per_s": best, "compile_s": compile_s, **backend_info()}


def _trainer(method: str, envs: int, steps: int) -> tuple[int, dict]:
    """A compiled training loop of ``method``: ``(period, state)`` where ``state`` holds the train state
    (``ts``), ``block`` (``ts -> ts``: a refresh for SFL, as in ``ppo.train``, then ``period`` updates,
    blocking until done) and ``compile_s`` (the first update's time less a later one's)."""
    from magister.examples.minigrid_rm import ppo

    cfg = ppo.TrainConfig(method=method, num_envs=envs, rollout_len=steps, minibatches=4, epochs=4)
    period = cfg.sfl.update_period
    ts = ppo.init_train_state(cfg)
    if method == "sfl":
        if hasattr(ppo, "make_sfl_refresh"):
            refresh = ppo.make_sfl_refresh(cfg)
        else:  # a checkout from before make_sfl_refresh: what its train() did
            eval_fn = jax.jit(lambda p, probs, k: ppo.evaluate(p, probs, k, cfg.max_steps, cfg.net.hidden))

            def refresh(ts):
                return ppo._sfl_refresh(cfg, ts, eval_fn)
    else:
        def refresh(ts):
            return ts
    t = time.perf_counter()
    update = ppo.make_update(cfg)
    ts, _ = update(ts)
    jax.block_until_ready(ts.params)
    first = time.perf_counter() - t
    ts = refresh(ts)  # the first refresh compiles too
    jax.block_until_ready(ts.params)
    t = time.perf_counter()
    ts, _ = update(ts)
    jax.block_until_ready(ts.params)

    def block(ts):
        ts = refresh(ts)
        for _ in range(period):
            ts, _ = update(ts)
        jax.block_until_ready(ts.params)
        return ts

    return period, {"ts": ts, "block": block, "compile_s": first - (time.perf_counter() - t)}


def _worker_train(method: str, envs: int, steps: int, blocks: int = 3) -> dict:
    """magister training steps/s (best of ``blocks`` blocks of ``sfl.update_period`` updates; SFL: each block
    starts with a refresh, as in ``ppo.train``); compile = the first update's time less a later one's."""
    period, tr = _trainer(method, envs, steps)
    best, ts = 0.0, tr["ts"]
    for _ in range(blocks):
        t = time.perf_counter()
        ts = tr["block"](ts)
        best = max(best, period * envs * steps / (time.perf_counter() - t))
    return {"steps_per_s": best, "compile_s": tr["compile_s"], **backend_info()}


def _worker_sfl(envs: int, steps: int, pairs: int = 4) -> dict:
    """SFL against DR in one process: ``pairs`` pairs of blocks (a DR block of ``update_period`` updates and
    an SFL block of a refresh and as many updates, the order alternating), so that the machine's drift
    between subprocesses does not enter the ratio. Returns SFL's best steps/s and compile time, and
    ``ratios``: SFL's steps/s over DR's, one per pair."""
    period, dr = _trainer("dr", envs, steps)
    _, sfl = _trainer("sfl", envs, steps)
    rate: dict[str, list[float]] = {"dr": [], "sfl": []}
    for i in range(pairs):
        for name, tr in ((("dr", dr), ("sfl", sfl)) if i % 2 == 0 else (("sfl", sfl), ("dr", dr))):
            t = time.perf_counter()
            tr["ts"] = tr["block"](tr["ts"])
            rate[name].append(period * envs * steps / (time.perf_counter() - t))
    return {"steps_per_s": max(rate["sfl"]), "compile_s": sfl["compile_s"],
            "ratios": [s / d for s, d in zip(rate["sfl"], rate["dr"])], **backend_info()}


def _python_path(first: str) -> str:
    """``first``, then the caller's own PYTHONPATH (where magister's dependencies may come from)."""
    return os.pathsep.join(p for p in (first, os.environ.get("PYTHONPATH", "")) if p)


def probe_backend(python: str = sys.executable) -> dict[str, str]:
    """The backend and device a subprocess of ``python`` gets (the parent keeps its own backend unstarted)."""
    code = "import json, jax; print(json.dumps({'backend': jax.default_backend(), " \
           "'device': jax.devices()[0].device_kind}))"
    return _run_json([python, "-c", code], {})


def _run_json(cmd: list[str], extra_env: dict[str, str], timeout: float = 900.0) -> dict:
    env = {**os.environ, **_ONE_THREAD, **extra_env}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(envs: int, steps: int, rounds: int, xmg_python: str, before: str | None,
          backend: str = "cpu") -> None:
    """Print the rounds and the targets' table (see the module's docstring); every worker must report
    ``backend`` (the probe's), so that no figure silently comes from another device."""
    here = Path(__file__).resolve()
    import magister

    root = str(Path(magister.__file__).parent.parent)  # the folder holding the imported magister package
    if not Path(xmg_python).exists():
        raise SystemExit(f"{xmg_python} not found: build the baseline venv with "
                         "bash benchmarks/_xminigrid_env.sh")
    sides = {"after": root} if before is None else {"before": before, "after": root}
    res: dict[str, dict[str, list[dict]]] = {k: {} for k in ("xmg", *sides)}
    shape = ["--envs", str(envs), "--steps", str(steps)]
    for r in range(rounds):
        for what in ("env", "dr", "sfl"):
            if what != "sfl":
                x = _run_json([xmg_python, str(here.parent / "_xminigrid_ppo.py"),
                               "env" if what == "env" else "ppo", *shape], {})
                _same_backend(x, backend, "xminigrid")
                res["xmg"].setdefault(what, []).append(x)
                print(f"round {r + 1}: xminigrid {what}: {x['steps_per_s']:,.0f} steps/s", flush=True)
            for side, path in sides.items():
                m = _run_json([sys.executable, str(here), "--worker", what, *shape],
                              {"PYTHONPATH": _python_path(path)})
                _same_backend(m, backend, f"magister ({side}) {what}")
                res[side].setdefault(what, []).append(m)
                pairs = (f"; SFL/DR per pair {', '.join(f'{x:.3f}' for x in m['ratios'])}"
                         if "ratios" in m else "")
                print(f"round {r + 1}: magister ({side}) {what}: {m['steps_per_s']:,.0f} steps/s, "
                      f"compile {m['compile_s']:.1f} s{pairs}", flush=True)

    def best(side: str, what: str) -> float:
        return max(x["steps_per_s"] for x in res[side][what])

    def comp(side: str, what: str) -> float:
        return min(x["compile_s"] for x in res[side][what])

    def sfl_vs_dr(side: str) -> str:
        ratios = [r for x in res[side]["sfl"] for r in x.get("ratios", ())]
        if not ratios:  # (a checkout whose worker measured SFL alone: best over best)
            return f"{best(side, 'sfl') / best(side, 'dr'):.2f}"
        return f"{float(np.median(ratios)):.3f}"

    threads = "one thread" if backend == "cpu" else "XLA's CPU flags at one thread"
    print(f"\nspeed targets ({envs} envs x {steps} steps, 4 epochs x 4 minibatches; {threads}; best of "
          f"{rounds} rounds; backend {backend})")
    print(f"xminigrid DoorKey-8x8 env-only: {best('xmg', 'env'):,.0f} steps/s; minimal PPO: "
          f"{best('xmg', 'dr'):,.0f} steps/s (compile {comp('xmg', 'dr'):.1f} s)")
    cols = list(sides)
    print(f"{'':44s}" + "".join(f"{c:>12s}" for c in cols) + "   target")
    rows = [
        ("env-only steps/s", lambda s: f"{best(s, 'env'):,.0f}", ""),
        ("  / xminigrid env-only", lambda s: f"{best(s, 'env') / best('xmg', 'env'):.2f}", ">= 1"),
        ("DR training steps/s", lambda s: f"{best(s, 'dr'):,.0f}", ""),
        ("  / xminigrid minimal PPO", lambda s: f"{best(s, 'dr') / best('xmg', 'dr'):.3f}", ">= 0.333"),
        ("SFL training steps/s (refreshes included)", lambda s: f"{best(s, 'sfl'):,.0f}", ""),
        ("  SFL / DR (paired, median over pairs)", sfl_vs_dr, ">= 0.95"),
        ("compile of the DR update (s)", lambda s: f"{comp(s, 'dr'):.1f}", "<= 20"),
        ("compile of the SFL update + refresh (s)", lambda s: f"{comp(s, 'sfl'):.1f}", ""),
    ]
    for name, f, target in rows:
        print(f"{name:44s}" + "".join(f"{f(c):>12s}" for c in cols) + f"   {target}")


def _same_backend(result: dict, backend: str, what: str) -> None:
    got = result.get("backend", backend)  # (a --before checkout's worker may not report it)
    if got != backend:
        raise RuntimeError(f"{what} ran on {got}, not on the probed backend {backend}: pin both or neither")


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
    ap.add_argument("--speed", action="store_true", help="the speed targets against xminigrid (see above)")
    ap.add_argument("--write-results", action="store_true",
                    help="--speed: write the output into docs/results.md and benchmarks/README.md")
    ap.add_argument("--rounds", type=int, default=2, help="--speed: alternating rounds")
    venv_python = Path(__file__).resolve().parent.parent / ".venvs/xminigrid/bin/python"
    ap.add_argument("--xmg-python", default=str(venv_python),
                    help="--speed: python of the xminigrid venv (benchmarks/_xminigrid_env.sh; default: the "
                         "checkout's .venvs/xminigrid)")
    ap.add_argument("--before", default=None, help="--speed: also measure the magister package under DIR")
    ap.add_argument("--worker", choices=("env", "dr", "sfl"), help=argparse.SUPPRESS)
    ap.add_argument("--solvability", action="store_true", help="only the samplers' solvable fractions")
    ap.add_argument("--batches", type=int, default=5, help="--solvability: number of batches")
    ap.add_argument("--batch-size", type=int, default=4096, help="--solvability: problems per batch")
    ap.add_argument("--tasks", nargs="+", default=["sequential", "random_walk"],
                    choices=["sequential", "random_walk"], help="--solvability: task samplers")
    a = ap.parse_args()
    if a.worker:
        if a.worker == "env":
            fn = _worker_env(a.envs, a.steps)
        elif a.worker == "sfl":
            fn = _worker_sfl(a.envs, a.steps)
        else:
            fn = _worker_train(a.worker, a.envs, a.steps)
        print(json.dumps(fn))
        return
    if a.write_results and not a.speed:
        raise ValueError("--write-results writes the speed comparison: pass --speed with it")
    if a.speed:  # this process starts no backend: the workers measure, each in its own subprocess
        from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording

        probe = probe_backend()
        with recording(section_name(probe["backend"]), enabled=a.write_results,
                       pages=(RESULTS_PAGE, BENCHMARKS_README)):
            print(f"start: {machine()}")
            print(f"backend: {probe['backend']}, device: {probe['device']}")
            speed(a.envs, a.steps, a.rounds, a.xmg_python, a.before, probe["backend"])
        return
    from magister.examples.minigrid_rm import ppo
    from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem, solvable_batch

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
