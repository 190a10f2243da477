"""The maze trainer (magister.examples.maze). What needs JaxUED runs only where it is installed (its own
virtualenv: benchmarks/_jaxued_env.sh) and is skipped, saying so, elsewhere; the startup check, the
solvability filter and the results tables run everywhere."""

from __future__ import annotations

import json
import sys
from typing import NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from magister.examples.maze import env as E  # noqa: E402


def _jaxued_or_skip() -> None:
    try:
        E.require_jaxued()
    except ImportError:
        pytest.skip("jaxued is not installed (its own virtualenv: bash benchmarks/_jaxued_env.sh)")


class _Levels(NamedTuple):
    wall_map: np.ndarray
    agent_pos: np.ndarray
    goal_pos: np.ndarray


def test_startup_check_names_the_venv_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jaxued", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"_jaxued_env\.sh.*magister\[maze\]"):
        E.require_jaxued()
    from magister.examples.maze import train

    with pytest.raises(SystemExit, match="gymnasium<1.4"):
        train.main(["--updates", "1"])


def test_solvable_bfs() -> None:
    walls = np.zeros((3, 5, 5), bool)
    walls[1, :, 2] = True  # a full wall between agent and goal
    walls[2, 1:, 2] = True  # the same wall with a gap in the top row
    agent = np.array([[0, 2], [0, 2], [0, 4]])
    goal = np.array([[4, 2], [4, 2], [4, 4]])
    assert E.solvable(_Levels(walls, agent, goal)).tolist() == [True, False, True]


def test_tables_are_the_bootstrap_statistics_of_the_solve_rates() -> None:
    pytest.importorskip("scipy")
    from magister.evaluation import interval_estimates
    from magister.examples.maze import canon

    rng = np.random.default_rng(0)
    n = len(E.HELDOUT_PREFABS) + 3
    results = {m: [{"eval": rng.uniform(size=n).tolist()} for _ in range(4)] for m in ("dr", "accel")}
    text, numbers = canon.tables(results)
    for m in results:
        s = np.array([r["eval"] for r in results[m]])
        for j, maze in enumerate(E.HELDOUT_PREFABS):
            value, low, high = numbers[maze][m]
            assert value == pytest.approx(s[:, j].mean())
            assert low <= value <= high
        want = interval_estimates({m: s[:, :8]}, metrics=("iqm",))[m]["iqm"]
        assert numbers["prefab IQM"][m] == pytest.approx(list(want))
        assert numbers["generated mean"][m][0] == pytest.approx(s[:, 8:].mean())
    assert "SixteenRooms" in text and "CVaR 10% (all)" in text


# --- with JaxUED -----------------------------------------------------------------------------------------
def test_prefabs_and_generated_heldout_are_solvable() -> None:
    _jaxued_or_skip()
    pre = E.prefab_levels()
    assert pre.wall_map.shape == (8, 13, 13)
    assert E.solvable(jax.device_get(pre)).all()
    held = E.heldout_levels(6)
    assert E.solvable(jax.device_get(held)).all()
    assert int(held.wall_map.sum((1, 2)).min()) > 25  # the 60-wall set, not DR's 25


def test_adversary_builds_well_formed_levels_in_maze_editor() -> None:
    _jaxued_or_skip()
    from magister.curricula.jax import edit_levels
    from magister.examples.maze import train as T

    env, _ = E.make_env()
    _, editor = E.editor_fns(env)
    p = T.adversary_init(jax.random.PRNGKey(0), 32, 10)
    policy = lambda q, o: T.adversary_apply(q, o, 10)  # noqa: E731
    levels, traj = edit_levels(jax.random.PRNGKey(1), p, policy, editor, 16, 10)
    assert traj.action.shape == (10, 16)
    assert bool(jax.vmap(lambda lv: lv.is_well_formatted())(levels).all())
    assert int(levels.wall_map.sum((1, 2)).max()) <= 7  # 10 steps: goal, turn, agent, then 7 toggles
    # step 1 only turns the agent: its action is one of the 4 directions (the editor's action mask)
    assert int(traj.action[1].max()) < 4


def test_jaxued_arm_and_magister_buffer_hold_the_same_levels() -> None:
    """Insert the same scored new levels into both buffers (capacity 4). magister's evicts the lowest
    score: it keeps the four highest. JaxUED's evicts the lowest replay weight (rank with temperature 0.3
    mixed with staleness 0.3): the stale 0.1 outweighs 0.3 (weights 0.156 and 0.066 when 0.2 arrives), so
    0.2 is refused (0.2 < 0.3) and 0.7 replaces 0.3 - the eviction difference the maze page lists."""
    _jaxued_or_skip()
    from magister.curricula import jax as L
    from magister.examples.maze import train as T

    cfg = T.MazeConfig(method="robust_plr_jaxued", buffer_size=4, min_fill_ratio=1.0)
    ls = T.jaxued_sampler(cfg)
    ts = T.init_state(cfg)
    new = E.generated_levels(jax.random.PRNGKey(3), 6, 25)
    smp = L.dr_sample(new)._replace(train=jnp.zeros(6, bool))
    scores = jnp.array([0.1, 0.5, 0.3, 0.9, 0.2, 0.7])
    sampler = T._jaxued_update(ls, ts.buffer, smp, scores, jnp.zeros(6))
    ours = L.plr_update(L.init_buffer(jax.tree_util.tree_map(lambda a: a[0], new), 4), new,
                        L.hash_levels(new), scores)
    assert int(sampler["size"]) == int(ours.size) == 4
    assert sorted(round(float(x), 3) for x in sampler["scores"]) == [0.1, 0.5, 0.7, 0.9]
    assert sorted(round(float(x), 3) for x in ours.scores) == [0.3, 0.5, 0.7, 0.9]
    # JaxUED's sampler with magister's eviction rule (python -m magister.examples.maze.eviction) keeps what
    # magister's buffer keeps: the eviction rule is the difference
    from magister.examples.maze.eviction import _sampler

    swapped = T._jaxued_update(_sampler("jaxued_lowest_score", cfg), ts.buffer, smp, scores, jnp.zeros(6))
    assert sorted(round(float(x), 3) for x in swapped["scores"]) == [0.3, 0.5, 0.7, 0.9]
    # full buffer, min fill 1.0: JaxUED's decision now replays, and so does magister's
    sampler, smp2 = T._jaxued_sample(ls, jax.random.PRNGKey(0), sampler, new, jnp.zeros(6, bool))
    assert 0 < int(smp2.replay.sum()) <= 6


@pytest.mark.parametrize("method", ["accel", "accel_jaxued", "repaired"])
def test_a_short_run_trains_evaluates_and_checkpoints(method: str, tmp_path) -> None:
    _jaxued_or_skip()
    from magister.curricula.jax import PAIREDConfig
    from magister.examples import jax_ppo as P
    from magister.examples.maze import train as T

    cfg = T.MazeConfig(method=method, num_envs=4, rollout_len=16, updates=3, buffer_size=8,
                       min_fill_ratio=0.25, adversary=PAIREDConfig(num_edits=8))
    res = T.train(cfg, tmp_path, log_every=1, heldout=2, attempts=1, ckpt_every=3, progress=False)
    assert len(res["eval"]) == 10 and all(0.0 <= x <= 1.0 for x in res["eval"])
    assert res["env_steps"] == 3 * 4 * 16
    last = res["rows"][-1]
    assert last["buffer_size"] >= 1 and 0.0 <= last["solvable_fraction"] <= 1.0
    assert (tmp_path / "eval.json").is_file() and (tmp_path / "curves.png").is_file()
    template = T.init_state(cfg)
    restored = P.load_checkpoint(tmp_path / "ckpt_3.npz", template)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(template)
    if method == "repaired":
        assert "adversary_reward" in last and "antagonist_return" in last


def test_a_stopped_run_resumes_as_if_never_stopped(tmp_path) -> None:
    _jaxued_or_skip()
    from dataclasses import replace

    from magister.examples.maze import train as T

    cfg = T.MazeConfig(method="accel", num_envs=4, rollout_len=16, updates=4, buffer_size=8,
                       min_fill_ratio=0.25)
    kw = {"log_every": 1, "heldout": 2, "attempts": 1, "progress": False, "plot": False}
    whole = T.train(cfg, tmp_path / "whole", ckpt_every=2, **kw)
    T.train(replace(cfg, updates=2), tmp_path / "cut", **kw)  # stops at 2 (its last checkpoint: ckpt_2)
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:  # a row the stopped run logged past it
        f.write(json.dumps({"update": 3, "env_steps": 192}) + "\n")
    resumed = T.train(cfg, tmp_path / "cut", resume=tmp_path / "cut" / "ckpt_2.npz", **kw)
    a, b = np.load(tmp_path / "whole" / "ckpt_4.npz"), np.load(tmp_path / "cut" / "ckpt_4.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "__config__")
    assert resumed["eval"] == whole["eval"]
    rows = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["score_mean"] == whole["rows"][2]["score_mean"]  # the stale row 3 was replaced
    with pytest.raises(ValueError, match="buffer_size=8 .now 16"):
        T.resume_state(replace(cfg, buffer_size=16), tmp_path / "cut" / "ckpt_2.npz")


def test_the_maze_pages_jaxued_block_runs_as_written(tmp_path) -> None:
    """docs/maze.md's block marked as needing jaxued (tests/test_docs.py skips it) runs here, where jaxued
    is installed, on a checkpoint where the page's training command writes it."""
    _jaxued_or_skip()
    import re
    import subprocess
    from dataclasses import asdict
    from pathlib import Path

    from magister.examples import jax_ppo as P
    from magister.examples.maze import train as T

    page = (Path(__file__).resolve().parents[1] / "docs" / "maze.md").read_text()
    blocks = re.findall(r"<!-- docs-test: needs jaxued[^>]*-->\n```python\n(.*?)^```", page, re.S | re.M)
    assert len(blocks) == 1
    cfg = T.MazeConfig(method="accel", updates=200)
    (tmp_path / "runs" / "maze-accel").mkdir(parents=True)
    P.save_checkpoint(tmp_path / "runs" / "maze-accel" / "ckpt_200.npz", T.init_state(cfg), asdict(cfg))
    (tmp_path / "block.py").write_text(blocks[0])
    done = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SixteenRooms" in done.stdout and "StandardMaze3" in done.stdout
