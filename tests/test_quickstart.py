"""The README's main job runs end to end (on a tiny budget here) and prints the comparison table."""

from __future__ import annotations

from magister.examples import quickstart


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
    for line in ("3x3m1", "3x3m2", "mean", "dr success", "sfl-dist success", "never solved"):
        assert line in out
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
