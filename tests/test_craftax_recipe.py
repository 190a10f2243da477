"""The Craftax-Classic recipe (magister.examples.craftax) at a tiny size on CPU.

The check that matters: every env plays the world Craftax generates from the seed the curriculum chose,
read from the environment's own start state and compared with a fresh ``env.reset`` from that seed (for
ACCEL's children: the seed's world with its blocks swapped by the edits), and the scores of the levels
played reach the curriculum's buffer. Craftax's step takes a while to compile on a CPU: both tests share
one compiled update (``train_functions``) and are marked slow.

craftax is installed by CI (``.ci/setup``, the ``craftax`` extra); elsewhere these tests are skipped unless
it is installed (``pip install "magister[craftax]"``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

from magister.examples.craftax import train as T  # noqa: E402
from magister.examples.craftax import worlds as W  # noqa: E402


@pytest.fixture
def craftax_installed() -> None:
    if os.environ.get("CI"):
        import craftax  # noqa: F401  (CI installs the extra: a missing package fails, it is not skipped)
    else:
        pytest.importorskip("craftax", reason='the Craftax recipe needs pip install "magister[craftax]"')


CFG = T.CraftaxConfig(method="accel", num_envs=4, rollout_len=6, outer_rollouts=2, updates=3, max_steps=8,
                      epochs=1, minibatches=2, hidden=16, buffer_size=16, replay_prob=0.5, min_fill_ratio=0.0,
                      num_edits=2, num_levels=1000, seed=3)


@pytest.mark.slow
@pytest.mark.usefixtures("craftax_installed")
def test_each_env_plays_the_world_of_the_seed_the_curriculum_chose() -> None:
    update, _ = T.train_functions(CFG)
    env, params = W.make_env(CFG.max_steps)
    fresh = jax.jit(lambda seed: env.reset(jax.random.PRNGKey(seed), params)[1])
    ts = T.init_state(CFG)
    seen: set[int] = set()
    kinds = {"new": 0, "replay": 0, "child": 0}
    for _ in range(4):
        before = jax.device_get(ts.buffer)
        ts, metrics, played = update(ts)
        played, buf = jax.device_get((played, ts.buffer))
        smp = played.sample
        for b in range(CFG.num_envs):
            seed = int(smp.levels.seed[b])
            generated = np.asarray(fresh(seed).map)
            start = played.start_map[b]
            assert np.array_equal(start, smp.levels.map[b])  # the env started from the chosen level's map
            if smp.child[b]:
                kinds["child"] += 1
                # an edited world of that seed: at most 2 cells per edit changed, every block count kept
                assert (start != generated).sum() <= 2 * CFG.num_edits
                assert np.array_equal(np.sort(start, axis=None), np.sort(generated, axis=None))
            else:
                kinds["replay" if smp.replay[b] else "new"] += 1
                assert np.array_equal(start, generated), f"env {b} did not play the world of seed {seed}"
            if smp.replay[b]:  # a replay is a level the buffer held, and its seed is one played before
                assert seed in seen
                assert before.hashes[smp.index[b]] == T.L.level_hash(jax.tree_util.tree_map(
                    lambda a, b=b: a[b], smp.levels))
        # the scores of the levels played are in the buffer (the last one, where a level came twice)
        hashes = np.asarray(T.L.hash_levels(smp.levels))
        for b in range(CFG.num_envs):
            last = max(i for i in range(CFG.num_envs) if hashes[i] == hashes[b])
            (where,) = np.nonzero(buf.hashes[: int(buf.size)] == hashes[b])
            assert where.size == 1
            assert buf.scores[where[0]] == pytest.approx(float(played.scores[last]))
        seen.update(int(s) for s in smp.levels.seed)
        assert int(buf.clock) == int(before.clock) + CFG.num_envs
        assert np.isfinite(float(metrics["pg_loss"]))
    assert kinds["new"] and kinds["replay"] and kinds["child"], kinds


@pytest.mark.slow
@pytest.mark.usefixtures("craftax_installed")
def test_train_writes_metrics_evaluates_held_out_worlds_and_resumes(tmp_path) -> None:
    out = tmp_path / "run"
    first = T.train(T.replace(CFG, updates=2), out, heldout=3, ckpt_every=1, progress=False)
    assert len(first["eval"]) == 3 and first["seeds"] == [W.HELDOUT_BASE + i for i in range(3)]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2]
    assert rows[-1]["env_steps"] == 2 * CFG.num_envs * CFG.rollout_len * CFG.outer_rollouts
    assert (out / "ckpt_2.npz").is_file() and (out / "eval.json").is_file()
    # resumed from update 1, the run ends where the uninterrupted one did
    again = T.train(T.replace(CFG, updates=2), tmp_path / "again", heldout=3, progress=False,
                    resume=out / "ckpt_1.npz")
    a, b = (jax.tree_util.tree_leaves(jax.device_get(r["state"].params)) for r in (first, again))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError, match="hidden=16"):
        T.resume_state(T.replace(CFG, hidden=8), out / "ckpt_1.npz")


@settings(max_examples=40)
@given(key=st.integers(0, 2**31 - 1), grid_seed=st.integers(0, 2**31 - 1))
def test_an_edit_swaps_two_cells_and_never_touches_the_spawn(key: int, grid_seed: int) -> None:
    grid = np.random.default_rng(grid_seed).integers(2, 17, size=(64, 64)).astype(np.uint8)
    world = W.World(jax.numpy.int32(0), jax.numpy.asarray(grid))
    edited = np.asarray(W.edit_world(jax.random.PRNGKey(key), world).map)
    changed = np.argwhere(edited != grid)
    assert len(changed) in (0, 2)  # two cells swapped (no change: both held the same block)
    assert np.array_equal(np.sort(edited, axis=None), np.sort(grid, axis=None))
    if len(changed) == 2:
        (r1, c1), (r2, c2) = changed
        assert edited[r1, c1] == grid[r2, c2] and edited[r2, c2] == grid[r1, c1]
        assert any(24 <= r < 40 and 24 <= c < 40 for r, c in changed)  # one in the centre square
    assert edited[32, 32] == grid[32, 32]
