"""PLR⊥ on device (magister.curricula.jax) against the Python RobustPLR: time per batch of B levels.

One *round* = sample a batch of ``B`` levels and apply their ``B`` scores, with a buffer of ``C`` entries
filled first (so replays, insertions and evictions all happen):

* JAX: one jitted function, ``plr_sample`` + ``plr_update`` (hashes given), blocked on the result;
* Python: ``RobustPLR.sample_tasks(B)`` + ``RobustPLR.update_scores(tasks, scores)`` on ``Discrete(10**7)``.

Printed: milliseconds per round (median of blocks) for each, their ratio, and the share of the JAX round
spent in ``plr_update`` (a sequential ``lax.scan`` over the batch, since the insertion rule is
order-dependent: O(1) per level, plus an O(C) search for the lowest entry when a level may enter a full
buffer). Compare ratios within one run; the machine is shared.

    OMP_NUM_THREADS=1 python benchmarks/jax_curricula.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from magister.curricula import RobustPLR
from magister.curricula import jax as J
from magister.task_spaces.discrete import Discrete

N_TASKS = 10**7


def _median_ms(fn, rounds: int, blocks: int = 3) -> float:
    out = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        out.append((time.perf_counter() - t0) / rounds * 1e3)
    return statistics.median(out)


def bench(b: int, c: int, rounds: int) -> dict[str, float]:
    cfg = J.RobustPLRConfig(buffer_size=c)
    rng = np.random.default_rng(0)

    @jax.jit
    def round_jax(buf: J.LevelBuffer, key: jax.Array) -> J.LevelBuffer:
        k1, k2, k3 = jax.random.split(key, 3)
        new = jax.random.randint(k1, (b,), 0, N_TASKS, dtype=jnp.int32)
        buf, smp = J.plr_sample(k2, buf, new, cfg)
        return J.plr_update(buf, smp.levels, smp.levels.astype(jnp.uint32), jax.random.normal(k3, (b,)))

    @jax.jit
    def update_only(buf: J.LevelBuffer, key: jax.Array) -> J.LevelBuffer:
        k1, k3 = jax.random.split(key)
        new = jax.random.randint(k1, (b,), 0, N_TASKS, dtype=jnp.int32)
        return J.plr_update(buf, new, new.astype(jnp.uint32), jax.random.normal(k3, (b,)))

    buf = J.init_buffer(jnp.int32(0), c)
    key = jax.random.PRNGKey(0)
    while int(buf.size) < c:  # fill
        key, k = jax.random.split(key)
        buf = round_jax(buf, k)
    state = {"buf": buf, "key": key}

    def one(fn) -> None:
        state["key"], k = jax.random.split(state["key"])
        state["buf"] = fn(state["buf"], k)
        state["buf"].size.block_until_ready()

    one(update_only)
    jax_ms = _median_ms(lambda: one(round_jax), rounds)
    upd_ms = _median_ms(lambda: one(update_only), rounds)

    plr = RobustPLR(Discrete(N_TASKS), buffer_size=c, seed=0)
    while len(plr) < c:
        tasks = [s.task for s in plr.sample_tasks(b)]
        plr.update_scores(tasks, rng.normal(size=b))

    def round_py() -> None:
        tasks = [s.task for s in plr.sample_tasks(b)]
        plr.update_scores(tasks, rng.normal(size=b))

    py_ms = _median_ms(round_py, rounds)
    return {"B": b, "C": c, "jax_ms": jax_ms, "py_ms": py_ms, "ratio": py_ms / jax_ms,
            "update_share": min(1.0, upd_ms / jax_ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    cases = [(32, 1000), (256, 4000)] if a.quick else [(32, 1000), (256, 4000), (1024, 4000), (4096, 50000)]
    rounds = 5 if a.quick else 10
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"{'B':>5} {'C':>6} {'jax ms/round':>13} {'python ms/round':>16} {'python/jax':>11} "
          f"{'update share':>13}")
    for b, c in cases:
        r = bench(b, c, rounds)
        print(f"{r['B']:>5} {r['C']:>6} {r['jax_ms']:>13.2f} {r['py_ms']:>16.2f} {r['ratio']:>11.2f} "
              f"{r['update_share']:>13.2f}")
    print("command: OMP_NUM_THREADS=1 python benchmarks/jax_curricula.py" + (" --quick" if a.quick else ""))


if __name__ == "__main__":
    main()
