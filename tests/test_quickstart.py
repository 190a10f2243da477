"""The README's main job runs end to end (on a tiny budget here) and prints the comparison table and its
statistics; the statistics read back from what it printed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from magister.examples import quickstart
from magister.examples import results as R


def test_quickstart_tiny_budget(tmp_path, capsys):
    results = quickstart.main([
        "--puzzle", "sixteen", "--total-steps", "1024", "--num-envs", "4", "--num-steps", "32",
        "--train-seeds", "5",
        "--eval-seeds", "1", "--eval-every", "0", "--params", "3x3m1", "3x3m2", "--run-dir", str(tmp_path),
        "--no-progress", "--seeds", "0", "1",
    ])
    out = capsys.readouterr().out
    assert set(results) == {"dr", "sfl-dist"}
    assert all(len(runs) == 2 for runs in results.values())  # two seeds each
    for line in ("3x3m1", "3x3m2", "mean", "dr success", "sfl-dist success", "never solved",
                 "P(sfl-dist > dr) = ", "mean(sfl-dist) - mean(dr) = ", "verdict: ", "dr s1: "):
        assert line in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["difficulties"] == ["3x3m1", "3x3m2"] and saved["seeds"] == [0, 1]
    for name, runs in results.items():  # the file holds every run's held-out success, as the runs report it
        assert saved["scores"][name] == [[r.eval[p]["success"] for p in ("3x3m1", "3x3m2")] for r in runs]
    assert "not compared" not in out  # tiny settings: no comparison with the results page is attempted
    # the closing lines, for a newcomer: each method's held-out success, the verdict, where things are
    closing = out.rstrip("\n").split("\n")[-8:]
    assert closing[0].startswith("In short: held-out success") and "2 difficulties and 2 seeds" in closing[0]
    for line, name in zip(closing[1:3], ("sfl-dist", "dr")):
        mean = float(np.mean(saved["scores"][name]))
        assert line.split(":")[0].strip().endswith(f"({name})") and f"{mean:.3f} (95% interval " in line
    assert closing[3].split()[0] == "difference:" and "significant" in closing[4]
    assert closing[5:] == [
        f"plot: {tmp_path / 'quickstart.png'} (each run's curriculum: {tmp_path}/<run>/curriculum.png)",
        f"logs: tensorboard --logdir {tmp_path}",
        f"every run's scores and the full statistics (printed above): {tmp_path / 'results.json'}",
    ]
    # ... and the results file holds the full statistics, as printed
    assert saved["statistics_text"] in out and "P(sfl-dist > dr) = " in saved["statistics_text"]
    assert set(saved["statistics"]) == {"dr mean", "dr iqm", "sfl-dist mean", "sfl-dist iqm",
                                        "P(sfl-dist > dr)", "mean(sfl-dist) - mean(dr)"}
    assert saved["statistics"]["dr mean"][0] == pytest.approx(np.mean(saved["scores"]["dr"]))
    assert (tmp_path / "quickstart.png").stat().st_size > 1000
    for name in ("dr_s0", "dr_s1", "sfl-dist_s0", "sfl-dist_s1"):
        assert (tmp_path / name / "checkpoint.pt").exists()
    # both curricula trained on the same budget
    steps = {r.global_step for runs in results.values() for r in runs}
    assert steps == {1024}


def test_quickstart_table_means_over_seeds():
    class R:  # a minimal stand-in for RunResult
        def __init__(self, s, eps):
            self.eval = {"a": {"success": s}}
            self.episodes_per_difficulty = {"a": eps}
            self.unsolved_episode_share = 0.5
            self.global_step = 10
            self.seconds = 1.0

    text = quickstart.table({"dr": [R(0.2, 10), R(0.4, 30)], "sfl": [R(1.0, 5), R(0.0, 5)]}, ["a"])
    row = next(line for line in text.splitlines() if line.strip().startswith("a |"))
    assert "0.30" in row and "0.50" in row  # per-seed means
    assert "20 (100%)" in row


def _scores(seed: int, n: int = 5, tasks: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)  # successes over 25 instances, as the quickstart measures them
    return {"dr": rng.integers(0, 10, (n, tasks)) / 25, "sfl-dist": rng.integers(5, 25, (n, tasks)) / 25}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_printed_statistics_read_back_as_computed(seed):
    scores = _scores(seed)
    text = quickstart.stats_text(scores, "dr", "sfl-dist", seeds=[3, 4, 5, 6, 7])
    back = quickstart.parse_scores(text)
    assert set(back) == {"dr", "sfl-dist"}
    for k in scores:
        np.testing.assert_array_equal(back[k], scores[k])
    est, poi, diff = quickstart.statistics(scores, "dr", "sfl-dist")
    quoted = quickstart.parse_quoted(text)
    assert quoted["P(sfl-dist > dr)"] == tuple(round(v, 3) for v in poi)
    assert quoted["mean(sfl-dist) - mean(dr)"] == tuple(round(v, 3) for v in diff)
    for method in scores:
        for metric in ("mean", "iqm"):
            assert quoted[f"{method} {metric}"] == tuple(round(v, 3) for v in est[method][metric])
    assert "sfl-dist s7: " in text
    # a clear advantage is called one; the verdict follows the difference's interval
    assert ("excludes 0" in text) == diff.excludes(0.0)


def test_the_command_says_when_a_figure_falls_outside_the_quoted_interval(tmp_path):
    scores = _scores(0)
    text = quickstart.stats_text(scores, "dr", "sfl-dist")
    page = tmp_path / "results.md"
    page.write_text(f"{R.open_marker('quickstart')}\n```text\n{text}\n```\n{R.close_marker('quickstart')}\n")
    mine = quickstart.parse_quoted(text)
    assert "inside the interval" in quickstart.compare_with_page(mine, page)
    far = dict(mine, **{"dr mean": mine["dr mean"]._replace(value=mine["dr mean"].high + 0.1)})
    msg = quickstart.compare_with_page(far, page)
    assert msg.startswith("OUTSIDE") and "dr mean" in msg and "sfl-dist mean" not in msg
    assert "not compared" in quickstart.compare_with_page(mine, tmp_path / "absent.md")


def test_a_missing_extra_is_named_before_anything_runs():
    from magister.examples._cli import require

    with pytest.raises(SystemExit, match=r"needs not_a_module_xyz.*pip install 'magister\[examples\]'"):
        require({"numpy": "examples", "not_a_module_xyz": "examples"}, "python -m x")
    require({"numpy": "examples"}, "python -m x")  # present: no exit


@pytest.mark.parametrize("seed", [0, 1])
def test_the_closing_lines_say_whether_the_difference_is_significant(seed):
    scores = _scores(seed)  # the curriculum clearly ahead
    est, _, diff = quickstart.statistics(scores, "dr", "sfl-dist")
    text = quickstart.summary_text(est, diff, "dr", "sfl-dist", 4, 5, "runs/q", "runs/q/results.json")
    assert diff.excludes(0.0) and diff.low > 0
    assert "the curriculum does better, and the difference is significant" in text
    assert f"domain randomisation (dr): {est['dr']['mean'].value:.3f} (95% interval " \
           f"{est['dr']['mean'].low:.3f} to {est['dr']['mean'].high:.3f})" in text
    same = {"dr": scores["dr"], "sfl-dist": scores["dr"][::-1]}  # the same scores, seeds reordered
    est, _, diff = quickstart.statistics(same, "dr", "sfl-dist")
    text = quickstart.summary_text(est, diff, "dr", "sfl-dist", 4, 5, "runs/q", "runs/q/results.json")
    assert "no significant difference on this budget (its 95% interval includes zero)" in text
    worse = {"dr": scores["sfl-dist"], "sfl-dist": scores["dr"]}
    est, _, diff = quickstart.statistics(worse, "dr", "sfl-dist")
    text = quickstart.summary_text(est, diff, "dr", "sfl-dist", 4, 5, "runs/q", "runs/q/results.json")
    assert "domain randomisation does better, and the difference is significant" in text
