"""The JAX trainer: one tiny ACCEL run end to end, checkpoints, evaluation, probes, CLI
(magister.examples.minigrid_rm.ppo)."""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import replace

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from magister.examples.minigrid_rm import ppo  # noqa: E402
from magister.examples.minigrid_rm.levels import is_solvable  # noqa: E402
from magister.examples.minigrid_rm.probes import probe_problems  # noqa: E402
from magister.examples.minigrid_rm.reward_machines import sequential_rm  # noqa: E402

TINY = ppo.NetConfig(conv=(4,), view_dense=8, node_dim=8, edge_dim=4, gnn_layers=1, hidden=8, head=8,
                     action_embed=4)


def test_probes_are_solvable_and_myopic_trap_is_real() -> None:
    probs = probe_problems()
    assert {"myopic", "patrol", "choice"} <= set(probs)
    for name, p in probs.items():
        assert is_solvable(p.level, p.rm), name
    # MYOPIC without the square in the agent's room: only the square behind the door is left -> unsolvable
    m = probs["myopic"]
    lvl = m.level._replace(tiles=m.level.tiles.at[5, 1].set(0))
    assert not is_solvable(lvl, m.rm)
    assert is_solvable(lvl, sequential_rm(["front_square"]))


def test_cvar() -> None:
    s = np.array([1.0, 0.0, 0.5, 1.0])
    assert ppo.cvar(s, 0.25) == 0.0 and ppo.cvar(s, 0.5) == 0.25 and ppo.cvar(s, 1.0) == 0.625


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="method"):
        ppo.TrainConfig(method="paired")
    with pytest.raises(ValueError, match="divisible"):
        ppo.TrainConfig(num_envs=10, minibatches=4)
    assert ppo.method_curriculum("accel").replay_prob == 0.9
    assert ppo.method_curriculum("accel0").replay_prob == 0.99


@pytest.mark.slow
def test_accel_updates_checkpoint_and_evaluate(tmp_path) -> None:
    cfg = ppo.TrainConfig(method="accel", num_envs=8, rollout_len=8, max_steps=8, updates=3, epochs=1,
                          minibatches=2, net=TINY, curriculum=ppo.method_curriculum("accel", buffer_size=16,
                                                                                    min_edits=1, max_edits=2))
    ts = ppo.init_train_state(cfg)
    update = ppo.make_update(cfg)
    p0 = ts.params
    ts, (m1, probs1) = update(ts)
    # first update: the buffer was empty, so nothing was replayed or trained on; all 8 problems scored
    assert float(m1["train_fraction"]) == 0.0 and float(m1["replay_fraction"]) == 0.0
    assert int(ts.buffer.size) == 8 and not bool(ts.has_child.any())
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(p0),
                                                      jax.tree_util.tree_leaves(ts.params)))
    ts, (m2, _) = update(ts)
    rep = float(m2["replay_fraction"])
    assert rep > 0 and float(m2["train_fraction"]) == rep  # only replays are trained on
    assert int(ts.has_child.sum()) == round(rep * 8)  # every replay got a child for the next update
    assert np.all(np.asarray(ts.child_edits)[np.asarray(ts.has_child)] >= 1)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(p0),
                                                          jax.tree_util.tree_leaves(ts.params)))
    ts, (m3, probs3) = update(ts)
    assert int(ts.step) == 3 and int(ts.buffer.size) <= 16
    comp = ppo.buffer_composition(cfg, ts, probs3)
    # the buffer's composition, worked out entry by entry on the host
    n, buf = int(ts.buffer.size), jax.device_get(ts.buffer)
    entries = [jax.tree_util.tree_map(lambda a, i=i: a[i], buf.problems) for i in range(n)]
    solvable = np.array([is_solvable(e.level, e.rm) for e in entries])
    assert comp["solvable_fraction"] == pytest.approx(solvable.mean())
    assert comp["mean_rooms"] == pytest.approx(np.mean([int(e.level.n_rooms) for e in entries]))
    assert comp["mean_rm_states"] == pytest.approx(np.mean([int(e.rm.n_states) for e in entries]))
    assert comp["buffer_mean_edits"] == pytest.approx(np.asarray(buf.num_edits[:n]).mean())
    assert comp["ever_solved_fraction"] == pytest.approx((np.asarray(buf.max_return[:n]) > 0).mean())
    if not solvable.any():  # no solvable entry: no replay mass on one
        assert comp["replay_solvable_fraction"] == 0.0 and np.isnan(comp["score_solvable"])
    else:
        assert comp["score_solvable"] == pytest.approx(np.asarray(buf.scores[:n])[solvable].mean())
    # checkpoint round trip
    path = tmp_path / "ckpt.npz"
    ppo.save_checkpoint(path, ts, cfg)
    back = ppo.load_checkpoint(path, cfg)
    for a, b in zip(jax.tree_util.tree_leaves(ts), jax.tree_util.tree_leaves(back)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # evaluation returns one flag per problem
    ok = ppo.evaluate(ts.params, probs3, jax.random.PRNGKey(0), 8, TINY.hidden)
    assert ok.shape == (8,) and ok.dtype == jnp.bool_


def test_gae_by_hand() -> None:
    traj = ppo.Traj(*(jnp.zeros((2, 1)) for _ in range(10)))
    traj = traj._replace(reward=jnp.array([[0.0], [1.0]]), value=jnp.array([[0.5], [0.5]]),
                         done=jnp.array([[False], [True]]))
    adv, tgt = ppo.gae(traj, jnp.array([9.0]), 1.0, 1.0)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [0.5, 0.5])  # the bootstrap is cut by done
    np.testing.assert_allclose(np.asarray(tgt)[:, 0], [1.0, 1.0])


def test_cli_help(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        ppo.main(["--help"])
    assert e.value.code == 0
    assert "--method" in capsys.readouterr().out


@pytest.mark.slow
def test_sfl_refresh_updates_and_training_run(tmp_path, monkeypatch) -> None:
    from magister.examples.minigrid_rm import curriculum as C
    from magister.examples.minigrid_rm.levels import sample_problem

    sfl = C.SFLConfig(batch_size=8, buffer_size=4, update_period=2, sample_ratio=1.0)
    cfg = ppo.TrainConfig(method="sfl", num_envs=8, rollout_len=8, max_steps=8, updates=3, epochs=1,
                          minibatches=2, net=TINY, sfl=sfl)
    ts = ppo.init_train_state(cfg)
    # refresh: 4 evaluations per candidate; success rates 0, 1/2, 1, 1/4, 3/4, 0, 1/2, 1 -> learnability
    # p (1 - p) = 0, 1/4, 0, 3/16, 3/16, 0, 1/4, 0: candidates 1 and 6, then 3 and 4 are kept
    quarters = jnp.asarray([0, 2, 4, 1, 3, 0, 2, 4])
    rep_keys = jax.random.split(jax.random.split(ts.key, 4)[2], 4)
    calls = []

    def fake_eval(params, probs, key):  # evaluation r (known by its key) succeeds on j iff r < quarters[j]
        calls.append(int(probs.rm.n_states.shape[0]))
        r = jnp.argmax(jnp.all(rep_keys == key, axis=-1))
        return r < quarters

    ts = ppo.make_sfl_refresh(cfg, success_fn=fake_eval)(ts)
    assert calls == [8]  # traced once, vmapped over the 4 evaluations' keys
    np.testing.assert_allclose(np.asarray(ts.sfl.learnability), [0.25, 0.25, 0.1875, 0.1875])
    _, k1, _, _ = jax.random.split(ppo.init_train_state(cfg).key, 4)
    cands = jax.vmap(sample_problem, in_axes=(0, None))(jax.random.split(k1, 8), cfg.problem_sampler)
    cand_h = np.asarray(jax.vmap(C.problem_hash)(cands))
    kept = np.asarray(jax.vmap(C.problem_hash)(ts.sfl.problems))
    assert set(kept[:2].tolist()) == set(cand_h[[1, 6]].tolist())
    assert set(kept[2:].tolist()) == set(cand_h[[3, 4]].tolist())
    # an update: with sample_ratio 1 every env plays a buffered problem, and all are trained on
    update = ppo.make_update(cfg)
    p0 = ts.params
    ts2, (m, probs) = update(ts)
    assert set(np.asarray(jax.vmap(C.problem_hash)(probs)).tolist()) <= set(kept.tolist())
    assert float(m["train_fraction"]) == 1.0
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(p0),
                                                          jax.tree_util.tree_leaves(ts2.params)))
    # the whole loop: refreshes at updates 0 and 2, metrics, checkpoint and plot written
    monkeypatch.setattr(ppo, "make_update", lambda c: update)  # same config: reuse the compiled update
    refreshed = []
    real_make = ppo.make_sfl_refresh

    def counting_make(c):
        real = real_make(c)

        def counting_refresh(state):
            refreshed.append(int(state.step))
            return real(state)

        return counting_refresh

    monkeypatch.setattr(ppo, "make_sfl_refresh", counting_make)
    rows = ppo.train(cfg, tmp_path, log_every=1, ckpt_every=3, progress=False)
    assert refreshed == [0, 2]  # every update_period updates, before the update
    assert [r["update"] for r in rows] == [1, 2, 3] and rows[-1]["env_steps"] == 3 * 8 * 8
    assert all(r["train_fraction"] == 1.0 for r in rows)
    assert all(r["solvable_fraction"] * 8 == round(r["solvable_fraction"] * 8) for r in rows)  # of 8 problems
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3
    assert (tmp_path / "ckpt_3.npz").exists() and (tmp_path / "buffer_composition.png").exists()


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv_as_matmul_equals_lax_convolution(padding) -> None:
    """conv2x2 and the first layer on one-hot patches are the 2x2 convolution, exactly."""
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(k1, (3, 5, 5, 6))
    w = jax.random.normal(k2, (2, 2, 6, 4))
    b = jax.random.normal(k3, (4,))

    def ref(x, w):
        dn = ("NHWC", "HWIO", "NHWC")
        return jax.lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=dn) + b

    got = ppo.conv2x2(x, w, b, padding)
    assert got.shape == ((3, 4, 4, 4) if padding == "VALID" else (3, 5, 5, 4))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref(x, w)), rtol=1e-5, atol=1e-5)
    view = jax.random.randint(k1, (3, 5, 5, 2), 0, 6)
    onehot = jnp.concatenate([jax.nn.one_hot(view[..., 0], 8), jax.nn.one_hot(view[..., 1], 6)], axis=-1)
    w1 = jax.random.normal(k2, (2, 2, 14, 4))
    got = ppo._onehot_patches(view, padding) @ w1.reshape(-1, 4) + b
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref(onehot, w1)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="padding"):
        ppo.conv2x2(x, w, b, "FULL")


@pytest.mark.parametrize("method", ["sfl", "accel"])
def test_training_run_never_recompiles(method, caplog) -> None:
    """After the first two updates (which meet every code path: update, SFL refresh, logging, evaluation),
    nothing compiles again, whatever the buffer holds (checked with jax.log_compiles)."""
    from magister.examples.minigrid_rm import curriculum as C

    sfl = C.SFLConfig(batch_size=8, buffer_size=4, update_period=2, sample_ratio=0.5)
    cfg = ppo.TrainConfig(method=method, num_envs=8, rollout_len=8, max_steps=8, updates=6, epochs=1,
                          minibatches=2, net=TINY, sfl=sfl,
                          curriculum=ppo.method_curriculum(method, buffer_size=32, min_edits=1, max_edits=2))
    caplog.set_level(logging.DEBUG)
    with jax.log_compiles():
        rows = ppo.train(cfg, None, log_every=1, eval_every=2, heldout=4, progress=False)
    assert [r["update"] for r in rows] == [1, 2, 3, 4, 5, 6]
    if method == "accel":
        assert rows[-1]["buffer_size"] > rows[1]["buffer_size"]  # the buffer grew after warm-up
    msgs = [r.getMessage() for r in caplog.records]
    second = next(i for i, m in enumerate(msgs) if m.startswith("update 2:"))
    compiled_before = [m for m in msgs[:second] if m.startswith("Compiling")]
    compiled_after = [m[:120] for m in msgs[second:] if m.startswith("Compiling")]
    assert compiled_before  # log_compiles is seen at all
    assert compiled_after == []


def test_evaluate_equals_first_episode_of_rollout() -> None:
    """The lean evaluate gives exactly the first-episode successes of a rollout with the same key."""
    from magister.examples.minigrid_rm.levels import ProblemSampler, sample_problem

    params = ppo.init_params(jax.random.PRNGKey(0), TINY)
    probs = jax.vmap(sample_problem, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), 256),
                                                         ProblemSampler(mode="level_conditioned"))

    @jax.jit
    def both(key):
        traj, _, _ = ppo.rollout(params, probs, key, 24, 24, TINY.hidden)
        first_ep = jnp.cumsum(traj.done, axis=0) - traj.done == 0
        return jnp.any(traj.term & first_ep, axis=0), ppo.evaluate(params, probs, key, 24, TINY.hidden)

    solved = 0
    for k in range(3):
        ref, got = both(jax.random.PRNGKey(k))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
        solved += int(ref.sum())
    assert solved > 0  # some problems were solved, so the comparison is not all-false


def test_atlas_summary_and_cli(tmp_path, capsys) -> None:
    """The ATLAS script's aggregation over seeds (mean and std at the end, rows every seed has) and plot."""
    from magister.examples.minigrid_rm import atlas

    def rows(vals, cvar):
        return [{"env_steps": 100 * (i + 1), "solvable_fraction": v, "replay_solvable_fraction": v / 2,
                 **({"cvar_1.0": cvar, "cvar_0.1": 0.0} if i == len(vals) - 1 else {})}
                for i, v in enumerate(vals)]

    res = {"accel": [rows([0.2, 0.6, 0.9], 0.5), rows([0.1, 0.5, 0.7], 0.3)],
           "dr": [rows([0.03, 0.03], 0.1), rows([0.05, 0.03, 0.04], 0.2)]}
    s = atlas.summarize(res)
    np.testing.assert_allclose(s["accel"]["solvable_fraction"], [0.8, 0.1])
    np.testing.assert_allclose(s["accel"]["replay_solvable_fraction"], [0.4, 0.05])
    np.testing.assert_allclose(s["accel"]["cvar_1.0"], [0.4, 0.1])
    np.testing.assert_allclose(s["dr"]["solvable_fraction"], [0.03, 0.0])  # the rows both seeds have
    atlas.plot(res, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 0
    with pytest.raises(SystemExit) as e:
        atlas.main(["--help"])
    assert e.value.code == 0 and "--seeds" in capsys.readouterr().out
    with pytest.raises(ValueError, match="method"):
        atlas.run(["sfl"], [0], 1, 8, 8, 8, 8, 1, 0, 4, tmp_path)


def test_runs_that_differ_only_in_seed_share_one_compile(monkeypatch) -> None:
    """ATLAS's seeds reuse their method's jitted functions (one compile per method, not per seed), and a
    run with shared functions logs exactly what a run with its own does."""
    cfg = ppo.TrainConfig(method="dr", num_envs=4, rollout_len=4, max_steps=4, updates=1, epochs=1,
                          minibatches=2, net=TINY)
    alone = ppo.train(cfg, log_every=1, progress=False)
    made = []
    real = ppo.make_update

    def counting(c):
        made.append(c.seed)
        return real(c)

    monkeypatch.setattr(ppo, "make_update", counting)
    compiled: dict = {}
    a = ppo.train(replace(cfg, seed=1, updates=2), log_every=1, progress=False, compiled=compiled)
    b = ppo.train(cfg, log_every=1, progress=False, compiled=compiled)
    assert made == [1] and len(compiled) == 1  # compiled once, for the first seed
    assert [r["update"] for r in a] == [1, 2]
    assert b == [{**alone[0], "steps_per_s_wall": b[0]["steps_per_s_wall"]}]  # only the wall rate differs
    assert ppo.train_functions(replace(cfg, method="plr"), compiled) is not compiled[replace(cfg, seed=0)]


def _benchmark():
    import importlib.util

    from magister.examples import results as R

    path = R.ROOT / "benchmarks" / "jax_minigrid_rm.py"
    spec = importlib.util.spec_from_file_location("jax_minigrid_rm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_results_sections_follow_the_backend() -> None:
    """A GPU run writes its own sections (the CPU's figures stay): jax-minigrid-rm-gpu, atlas-gpu."""
    from magister.examples import results as R
    from magister.examples.minigrid_rm import atlas

    bench = _benchmark()
    assert bench.section_name("cpu") == "jax-minigrid-rm"
    assert bench.section_name("gpu") == "jax-minigrid-rm-gpu"
    assert (atlas.section_name("cpu"), atlas.section_name("gpu")) == ("atlas", "atlas-gpu")
    results_page = R.RESULTS_PAGE.read_text()
    for name in ("jax-minigrid-rm", "jax-minigrid-rm-gpu", "atlas", "atlas-gpu"):
        R.read_section(results_page, name)  # the markers are there
    R.read_section(R.BENCHMARKS_README.read_text(), "jax-minigrid-rm-gpu")


def test_speed_parent_starts_no_backend_and_workers_keep_the_python_path(tmp_path, monkeypatch) -> None:
    """``--speed``'s parent process never initializes a JAX backend (on a GPU it would hold the memory its
    workers measure with); its workers get magister's folder first, then the caller's PYTHONPATH."""
    import os
    import subprocess
    import sys

    from magister.examples import results as R

    script = R.ROOT / "benchmarks" / "jax_minigrid_rm.py"
    code = f"""
import sys, runpy
from jax._src import xla_bridge
sys.argv = ["jax_minigrid_rm.py", "--speed", "--xmg-python", {str(tmp_path / "absent")!r}]
try:
    runpy.run_path({str(script)!r}, run_name="__main__")
except SystemExit as e:
    print("exit:", e)
print("backends:", sorted(xla_bridge._backends))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not found: build the baseline venv" in out.stdout and "backends: []" in out.stdout, out.stdout
    bench = _benchmark()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/deps/a", "/deps/b"]))
    assert bench._python_path("/src") == os.pathsep.join(["/src", "/deps/a", "/deps/b"])
    monkeypatch.delenv("PYTHONPATH")
    assert bench._python_path("/src") == "/src"
    probe = bench.probe_backend()
    assert probe == {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind}


# -- the pieces both JAX trainers share (magister.examples.jax_ppo) ------------------------------------------
def test_gru_scan_is_the_rollout_recurrence_with_resets() -> None:
    from magister.examples import jax_ppo as P

    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    gru = P.gru_init(k1, 3, 4)
    gx = jax.random.normal(k2, (5, 2, 12))
    first = jnp.array([[True, True], [False, False], [False, True], [True, False], [False, False]])
    hs = np.asarray(P.gru_scan(gru, gx, first, 4))
    h = jnp.zeros((2, 4))
    for t in range(5):
        h = P.gru_cell(gru, jnp.where(first[t][:, None], 0.0, h), gx[t])
        np.testing.assert_allclose(hs[t], np.asarray(h), rtol=1e-6, atol=1e-6)
    # a reset cuts the past: step 3 of env 0 starts from zeros, like step 0
    np.testing.assert_allclose(hs[3, 0], np.asarray(P.gru_cell(gru, jnp.zeros((1, 4)), gx[3, :1])[0]),
                               rtol=1e-6, atol=1e-6)
    assert not np.allclose(hs[3, 0], np.asarray(P.gru_cell(gru, jnp.asarray(hs[2, :1]), gx[3, :1])[0]))


def test_ppo_update_is_ppo_epochs_over_the_flat_vector() -> None:
    from jax.flatten_util import ravel_pytree

    from magister.examples import jax_ppo as P

    params = {"w": jnp.arange(6.0).reshape(2, 3) / 10, "b": jnp.ones(3)}
    x = jax.random.normal(jax.random.PRNGKey(1), (4, 2))
    train = jnp.array([True, False, True, True])

    def loss(p, idx):
        y = x[idx] @ p["w"] + p["b"]
        return ((y ** 2).sum(-1) * train[idx]).mean(), {"y": y.mean()}

    opt = P.optimizer(1e-2, 0.5)
    flat0, unravel = ravel_pytree(params)
    key = jax.random.PRNGKey(2)
    got, got_opt, aux = P.ppo_update(key, params, opt.init(flat0), opt, loss, train, 3, 2)
    want, want_opt, want_aux = P.ppo_epochs(key, flat0, opt.init(flat0), opt,
                                            lambda f, idx: loss(unravel(f), idx), train, 3, 2)
    np.testing.assert_array_equal(np.asarray(ravel_pytree(got)[0]), np.asarray(want))
    assert float(aux["y"]) == pytest.approx(float(want_aux["y"].mean()))
    assert not np.allclose(np.asarray(ravel_pytree(got)[0]), np.asarray(flat0))  # it did train


def test_compiled_for_shares_across_seeds_and_lengths_only() -> None:
    from dataclasses import dataclass

    from magister.examples import jax_ppo as P

    @dataclass(frozen=True)
    class Cfg:
        lr: float = 0.1
        seed: int = 0
        updates: int = 5

    built = []
    cache: dict = {}
    build = lambda c: built.append(c) or len(built)  # noqa: E731
    first = P.compiled_for(Cfg(seed=1), build, cache)
    assert first == P.compiled_for(Cfg(seed=2, updates=9), build, cache) == 1
    assert P.compiled_for(Cfg(lr=0.2), build, cache) == 2
    assert P.compiled_for(Cfg(), build, None) == 3  # no cache: built afresh


def test_metrics_log_writes_json_lines_and_tensorboard_scalars(tmp_path) -> None:
    from magister.examples import jax_ppo as P

    with P.MetricsLog(tmp_path) as log:
        log.write({"update": 1, "env_steps": 32, "loss": 0.25, "per_level": [1.0, 0.0]})
        log.write({"update": 2, "env_steps": 64, "loss": 0.5})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows] == [0.25, 0.5] and rows[0]["per_level"] == [1.0, 0.0]
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    has_writer = any(importlib.util.find_spec(m) for m in ("tensorboardX", "torch"))
    assert len(events) == int(has_writer) and all(e.stat().st_size > 0 for e in events)
    P.MetricsLog(None).write({"update": 1})  # no folder: keeps nothing, writes nothing
