"""The contextual-RL benchmark of the continuous teachers (magister.examples.teachers_contextual) at a tiny
budget: the command runs end to end for two teachers, the envs play exactly the tasks the teacher chose
through the sync layer (read back from CartPole's own parameters), the evaluation gives its numbers, and an
interrupted run resumes from its checkpoint."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")
pytest.importorskip("sklearn")

from magister.curricula import DomainRandomization  # noqa: E402
from magister.examples import teachers_contextual as T  # noqa: E402
from magister.examples._checkpoint import read_checkpoint  # noqa: E402

TINY = ["--seeds", "2", "--jobs", "1", "--total-timesteps", "512", "--num-envs", "4", "--num-steps", "32",
        "--grid", "2", "--eval-episodes", "1", "--no-progress"]


class Recorder(DomainRandomization):
    """Uniform sampling that remembers every task it handed out and every episode it was told of."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handed, self.told = [], []

    def sample(self, k=1):
        tasks = super().sample(k)
        self.handed += tasks
        return tasks

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        super().update_on_episode(episode_return, length, task, progress, env_id)
        self.told.append((tuple(task), float(episode_return)))


def test_module_doctest():
    assert doctest.testmod(T, optionflags=doctest.ELLIPSIS).failed == 0


def test_cartpole_params_sets_the_envs_own_physics_and_refuses_other_spaces():
    env = T.make_env()
    obs, info = env.reset(seed=0, options={"task": np.array([30.0, -1.0])})
    cartpole = env.unwrapped
    assert (cartpole.gravity, cartpole.force_mag) == (30.0, 0.1) == info["physics"]
    lo, hi = np.array(T.LOW), np.array(T.HIGH)
    assert obs.shape == (6,)
    np.testing.assert_allclose(obs[4:], (np.array([30.0, -1.0]) - lo) / (hi - lo), rtol=1e-6)
    _, _, _, _, info = env.step(0)
    assert info["task_progress"] == 1 / T.MAX_STEPS
    with pytest.raises(ValueError, match="not a task of"):
        env.reset(options={"task": np.array([0.5, 0.0])})  # gravity below the box
    from magister.task_spaces import Box

    with pytest.raises(TypeError, match=r"Box of shape \(2,\)"):
        T.CartPoleParams(space=Box(0.0, 1.0, shape=(3,)))


def test_heldout_suite_is_the_grid_centres():
    suite = T.heldout_suite(2)
    g = [1.0 + 39.0 / 4, 1.0 + 3 * 39.0 / 4]
    f = [-2.0 + 3.3 / 4, -2.0 + 3 * 3.3 / 4]
    expected = [[g[0], f[0]], [g[0], f[1]], [g[1], f[0]], [g[1], f[1]]]
    np.testing.assert_allclose(np.array(suite.tasks), expected)
    with pytest.raises(ValueError, match="grid must be a positive int"):
        T.heldout_suite(0)


def test_unknown_teacher_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown teacher 'nope'"):
        T.main([*TINY, "--teachers", "random", "nope", "--out", str(tmp_path)])


def test_two_teachers_end_to_end_through_the_sync_layer(tmp_path, monkeypatch):
    from magister.examples import results as R

    page, images = tmp_path / "results.md", tmp_path / "img"
    images.mkdir()
    page.write_text(f"# Results\n\n{R.open_marker(T.SECTION)}\n{R.close_marker(T.SECTION)}\n")
    monkeypatch.setattr(R, "RESULTS_PAGE", page)
    monkeypatch.setattr(R, "IMAGES", images)
    made = {}

    def recorder(space, seed):
        made[seed] = Recorder(space, seed=seed)
        return made[seed]

    monkeypatch.setitem(T.FACTORIES, "recorder", recorder)
    results = T.main([*TINY, "--teachers", "random", "recorder", "--out", str(tmp_path / "runs"),
                      "--write-results"])
    tmp_path = tmp_path / "runs"
    assert sorted(results) == ["random", "recorder"]
    for teacher, runs in results.items():
        assert [r["seed"] for r in runs] == [0, 1]
        for r in runs:
            assert r["global_step"] == 512 and len(r["mastered"]) == 4 and len(r["heldout_return"]) == 4
            assert all(m == float(ret >= T.MASTERY) for m, ret in zip(r["mastered"], r["heldout_return"]))
            # every finished episode: the task the learner saw in info is the physics the env itself had
            eps = np.array(r["episodes"])
            np.testing.assert_array_equal(eps[:, 0], eps[:, 3])
            np.testing.assert_allclose(10.0 ** eps[:, 1], eps[:, 4], rtol=1e-12)
            # the teacher heard of every finished episode, over the sync layer's accounting
            assert r["teacher_episodes"] == len(eps) == r["sync"]["episodes_applied"]
            assert r["sync"]["tasks_sent"] >= len(eps) and r["sync"]["curriculum_errors"] == 0
            assert list((tmp_path / f"{teacher}-seed{r['seed']}").glob("events.out.tfevents.*"))
    for seed, rec in made.items():
        run = results["recorder"][seed]
        handed = {t[0]: t[1] for t in rec.handed}  # gravity -> log10 force of every task handed out
        played = [e[3:] for e in run["episodes"]]  # the env's own gravity and force
        assert played and all(g in handed and f == pytest.approx(10.0 ** handed[g], rel=1e-12)
                              for g, f in played)
        # the teacher was told of each episode the learner saw end, with its return (the reports of
        # different envs may arrive in another order than the learner's)
        assert sorted(rec.told) == sorted((tuple(e[:2]), e[2]) for e in run["episodes"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    numbers = summary["numbers"]
    for teacher in ("random", "recorder"):
        value, low, high = numbers[teacher]["share mastered"]
        shares = [np.mean(r["mastered"]) for r in results[teacher]]
        assert value == pytest.approx(np.mean(shares)) and low <= value <= high
    p, low, high = numbers["recorder"]["P(> random)"]
    assert 0.0 <= low <= p <= high <= 1.0
    assert "P(> random)" not in numbers["random"]
    assert len(summary["oracle"]) == 4 and set(summary["oracle"]) <= {0.0, 1.0}
    assert (tmp_path / "teachers-contextual.png").stat().st_size > 0
    # --write-results: the section holds the printed summary under its stamp, and the plot
    section = R.read_section(page.read_text(), T.SECTION)
    assert R.STAMP_RE.match(section)["command"].startswith("python -m magister.examples.teachers_contextual ")
    assert summary["text"].splitlines()[0] in section
    assert "![teachers-contextual](img/teachers-contextual.png)" in section
    png = "teachers-contextual.png"
    assert (images / png).read_bytes() == (tmp_path / png).read_bytes()


def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    args = [*TINY, "--seeds", "1", "--teachers", "random", "--out", str(tmp_path), "--no-tensorboard",
            "--checkpoint-every", "0"]
    first = T.main([*args, "--stop-after", "2"])
    assert first["random"] == [{"teacher": "random", "seed": 0, "stopped": 2}]
    run_dir = tmp_path / "random-seed0"
    assert not (run_dir / "result.json").exists()
    ckpt = read_checkpoint(run_dir / "checkpoint.pt")
    assert ckpt["update"] == 2 and ckpt["global_step"] == 256
    before = len(ckpt["episodes"])
    assert ckpt["teacher"]["num_episodes"] == before > 0
    result = T.main(args)["random"][0]
    assert result["resumed_from"] == 2 and result["global_step"] == 512
    # the teacher's state came back: its episode count goes on from the checkpoint's
    assert result["teacher_episodes"] == len(result["episodes"]) > before
    assert result["sync"]["episodes_applied"] == len(result["episodes"]) - before
    assert T.main(args)["random"][0] == result  # finished: not run again


@pytest.mark.parametrize("teacher", T.TEACHERS[1:])
def test_every_teacher_trains_through_the_sync_layer(teacher, tmp_path):
    try:
        T.make_teacher(teacher, T.task_space(0), 0)
    except ImportError as exc:  # its branch or its extra is not there
        pytest.skip(f"{teacher}: {exc}")
    args = T.parse_args([*TINY, "--out", str(tmp_path), "--no-tensorboard", "--evals", "1"])
    result = T.run_one(teacher, 0, args)
    eps = np.array(result["episodes"])
    assert len(eps) > 0 and result["teacher_episodes"] == len(eps) == result["sync"]["episodes_applied"]
    assert np.all((eps[:, :2] >= T.LOW) & (eps[:, :2] <= T.HIGH))  # the teacher's tasks, inside the box
    np.testing.assert_allclose(10.0 ** eps[:, 1], eps[:, 4], rtol=1e-12)  # ... played by the env
    assert len(result["curve"]) == 1 and result["mastered"] == result["curve"][0]["mastered"]
