"""Why the parity arms' buffers differ: the same stream of levels and scores into magister's PLR⊥ buffer,
JaxUED's ``LevelSampler``, and JaxUED's sampler with magister's eviction rule.

The parity A/B (``python -m magister.examples.maze.canon --parity``) finds the two buffers equally solvable
but JaxUED's staler and lower-scored. The two samplers differ in a few rules (listed on the maze page):
which entry a full buffer evicts (magister: the lowest score; JaxUED: the lowest replay weight, score rank
and staleness mixed), how tied scores rank, when the staleness clock ticks and whether the replay weights
are refreshed between the draws of one batch. This command separates the eviction rule from the rest
without a policy: levels are integers, each with a fixed difficulty ``d`` drawn uniformly in ``[0, 1)``;
a level's score when it is played is ``d * decay^k + noise`` (``k``: how often it was replayed before, a
stand-in for a student that learns what it replays). Every arm runs the trainer's own sampling and
insertion code (:func:`~magister.examples.maze.train._jaxued_sample` / ``_jaxued_update`` for JaxUED's,
:func:`~magister.curricula.jax.plr_sample` / ``plr_update`` for magister's) with the maze trainer's
settings, per batch: per-sample replay decisions, replays drawn from the buffer, the rest new levels,
every sampled level scored and offered back.

The third arm is JaxUED's ``LevelSampler`` with one method replaced: the entry a full buffer offers for
replacement is the lowest-scored (ties: the stalest, then the first), as in magister's buffer. Where that
arm lands on magister's statistics and plain JaxUED's does not, the eviction rule is the cause.

Run ``python -m magister.examples.maze.eviction`` in the jaxued virtualenv (``bash
benchmarks/_jaxued_env.sh``); it prints, per arm, the buffer's mean score, mean staleness (levels sampled
since an entry was last sampled or inserted, each sampler on its own clock: both tick once per sampled
level) and mean difficulty after ``--batches`` batches, mean over ``--seeds`` seeds with 95% bootstrap
intervals (:mod:`magister.evaluation`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import env as E

logger = logging.getLogger(__name__)

__all__ = ["ARMS", "main", "run_arm"]

ARMS = ("magister", "jaxued", "jaxued_lowest_score")


def _sampler(arm: str, cfg: Any) -> Any:
    """JaxUED's sampler with the trainer's settings; for ``jaxued_lowest_score`` with magister's eviction."""
    import jax.numpy as jnp

    from . import train as T

    ls = T.jaxued_sampler(cfg)
    if arm == "jaxued_lowest_score":
        def lowest_score(sampler: dict) -> Any:
            valid = jnp.arange(ls.capacity) < sampler["size"]
            scores = jnp.where(valid, sampler["scores"], jnp.inf)
            low = scores.min()
            stale_first = jnp.where(scores == low, sampler["timestamps"], jnp.iinfo(jnp.int32).max)
            return jnp.where(sampler["size"] < ls.capacity, sampler["size"], stale_first.argmin())

        ls._get_next_idx = lowest_score  # the one rule replaced: which entry a full buffer offers
    return ls


def run_arm(arm: str, seed: int, batches: int = 120, batch: int = 32, buffer_size: int = 1000,
            decay: float = 0.9, noise: float = 0.05) -> dict[str, float]:
    """One arm, one seed: the buffer's mean score, mean staleness and mean difficulty at the end."""
    import jax
    import jax.numpy as jnp

    from ...curricula import jax as L
    from . import train as T

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    cfg = T.MazeConfig(method="robust_plr_jaxued" if arm != "magister" else "robust_plr",
                       buffer_size=buffer_size, num_envs=batch)
    cur = cfg.curriculum
    n_levels = batches * batch
    key = jax.random.PRNGKey(seed)
    k_d, key = jax.random.split(key)
    difficulty = jax.random.uniform(k_d, (n_levels,))
    example = jnp.int32(0)
    if arm == "magister":
        buffer0: Any = L.init_buffer(example, buffer_size)
    else:
        ls = _sampler(arm, cfg)
        buffer0 = ls.initialize(example, {"max_return": jnp.float32(0.0)})
        buffer0 = {**buffer0, "size": jnp.int32(0), "episode_count": jnp.int32(0)}

    def step(carry: tuple, x: tuple) -> tuple[tuple, None]:
        buffer, replays = carry
        t, k = x
        k_smp, k_noise = jax.random.split(k)
        new = t * batch + jnp.arange(batch, dtype=jnp.int32)  # fresh level ids, never seen before
        if arm == "magister":
            buffer, smp = L.plr_sample(k_smp, buffer, new, cur)
        else:
            buffer, smp = T._jaxued_sample(ls, k_smp, buffer, new, jnp.zeros(batch, bool))
        ids = smp.levels
        scores = difficulty[ids] * decay ** replays[ids] + noise * jax.random.normal(k_noise, (batch,))
        replays = replays.at[ids].add(smp.replay.astype(jnp.int32))
        if arm == "magister":
            buffer = L.plr_update(buffer, ids, L.hash_levels(ids), scores)
        else:
            buffer = T._jaxued_update(ls, buffer, smp, scores, jnp.zeros(batch))
        return (buffer, replays), None

    xs = (jnp.arange(batches, dtype=jnp.int32), jax.random.split(key, batches))
    (buffer, _), _ = jax.jit(lambda b, xs: jax.lax.scan(step, (b, jnp.zeros(n_levels, jnp.int32)), xs))(
        buffer0, xs)
    buffer = jax.device_get(buffer)
    if arm == "magister":
        n = int(buffer.size)
        ids, scores = buffer.levels[:n], buffer.scores[:n]
        stale = buffer.clock - buffer.last_sampled[:n]
    else:
        n = int(buffer["size"])
        ids, scores = buffer["levels"][:n], buffer["scores"][:n]
        stale = buffer["episode_count"] - buffer["timestamps"][:n]
    return {"size": float(n), "score_mean": float(np.mean(scores)), "staleness_mean": float(np.mean(stale)),
            "difficulty_mean": float(np.asarray(difficulty)[ids].mean())}


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, list[float]]]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.maze.eviction", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--batches", type=int, default=120, help="batches of levels (the canon's updates)")
    ap.add_argument("--batch", type=int, default=32, help="levels per batch (the canon's envs)")
    ap.add_argument("--buffer-size", type=int, default=1000)
    ap.add_argument("--decay", type=float, default=0.9, help="score factor per earlier replay of a level")
    ap.add_argument("--noise", type=float, default=0.05, help="standard deviation of a score's noise")
    a = ap.parse_args(argv)
    E.require_jaxued_or_exit()
    if a.seeds < 2:
        raise SystemExit(f"--seeds must be >= 2 for intervals over seeds, got {a.seeds}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from magister.evaluation import Estimate, format_table, interval_estimates

    stats = ("score_mean", "staleness_mean", "difficulty_mean")
    rows: dict[str, dict[str, Estimate]] = {}
    for arm in ARMS:
        runs = [run_arm(arm, s, a.batches, a.batch, a.buffer_size, a.decay, a.noise) for s in range(a.seeds)]
        rows[arm] = {k: interval_estimates({arm: np.array([[r[k]] for r in runs])}, metrics=("mean",))[arm]
                     ["mean"] for k in stats}
        rows[arm]["size"] = Estimate(float(np.mean([r["size"] for r in runs])), float("nan"), float("nan"))
    print(f"the same level stream into each buffer: {a.batches} batches x {a.batch} levels, buffer "
          f"{a.buffer_size}, score = d * {a.decay}^replays + N(0, {a.noise}); mean over {a.seeds} seeds "
          f"[95% bootstrap interval]:")
    print(format_table(rows, title="arm"))
    return {arm: {k: list(e) for k, e in row.items()} for arm, row in rows.items()}


if __name__ == "__main__":
    main()
