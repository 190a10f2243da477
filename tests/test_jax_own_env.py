"""examples/jax_own_env.py: the library's PLR⊥ drives a user's own JAX environment (skipped without jax)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from magister.examples import jax_own_env as E  # noqa: E402


def test_plr_perp_on_a_user_env_learns_and_keeps_its_rules() -> None:
    before = float(E.greedy_success(E.init_params()))
    assert before == pytest.approx(0.5)  # all-zero logits: always left, solves the levels with goal < start
    ts, history = E.train(updates=60, num_envs=32, steps=32, seed=0)
    assert history[-1]["greedy_success"] >= 0.95
    n_levels = E.WIDTH * (E.WIDTH - 1)
    size = int(ts.buffer.size)
    # dedup by level hash: at most one entry per distinct level, although the buffer has room for 256
    assert 0 < size <= n_levels
    stored = np.stack([np.asarray(ts.buffer.levels.start), np.asarray(ts.buffer.levels.goal)], 1)[:size]
    assert len({tuple(x) for x in stored.tolist()}) == size
    assert np.all(stored[:, 0] != stored[:, 1])
    for row in history:  # PLR⊥: exactly the replays are trained on
        assert row["train_fraction"] == row["replay_fraction"]


def test_main_runs_from_the_command_line() -> None:
    history = E.main(["--updates", "10", "--num-envs", "8"])
    assert history[-1]["update"] == 10 and history[-1]["buffer_size"] > 0
