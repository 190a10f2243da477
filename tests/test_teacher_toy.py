"""The toy-env command (``python -m magister.examples.teacher_toy``) at a tiny budget: it runs every teacher,
prints a row per teacher with an interval that contains its mean, writes its results section and plot; and
ALP-GMM, Covar-GMM and RIAC master clearly more cells than uniform sampling at the same small budget."""

from __future__ import annotations

import re

import numpy as np
import pytest

from magister.examples import results as R
from magister.examples import teacher_toy as toy

pytest.importorskip("sklearn")
pytest.importorskip("scipy")

ROW = re.compile(r"^\s*(\w+) \| (-?[0-9.]+) \[(-?[0-9.]+), (-?[0-9.]+)\]", re.M)


def _rows(block: str) -> dict[str, tuple[float, float, float]]:
    return {m[1]: (float(m[2]), float(m[3]), float(m[4])) for m in ROW.finditer(block)}


def _teachers() -> list[str]:
    return [t for t in toy.TEACHERS if toy._has(toy.TEACHERS[t][1])]


def test_the_command_prints_a_row_per_teacher_with_intervals_around_the_means(tmp_path, capsys):
    teachers = _teachers()
    runs = toy.main(["--seeds", "3", "--episodes", "200", "--every", "100", "--dims", "2", "3",
                     "--cells", "4", "3", "--teachers", *teachers, "--workers", "1", "--no-progress",
                     "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert len(runs) == len(teachers) * 3 * 2
    assert all(len(r.scores) == 3 and r.episodes == 200 for r in runs)  # episode 0, then every 100
    blocks = out.split("\n\n")
    for block, (dims, cells) in zip(blocks, ((2, 4), (3, 3))):
        assert block.startswith(f"{dims}-D ({cells}^{dims} = {cells ** dims} cells), 200 episodes, 3 seeds")
        rows = _rows(block)
        assert list(rows) == teachers  # one row per teacher, in the order asked
        for name, (mean, low, high) in rows.items():
            finals = [r.scores[-1] for r in runs if (r.teacher, r.dims) == (name, dims)]
            assert mean == pytest.approx(np.mean(finals), abs=6e-4)  # the runs' mean, to 3 decimals
            assert low <= mean <= high, (name, mean, low, high)
    assert (tmp_path / "teacher-toy.png").stat().st_size > 1000


def test_a_pool_of_workers_gives_the_runs_one_process_gives(tmp_path):
    jobs = [("random", 2, 4, 200, 100, s) for s in range(2)]
    alone = toy.run_all(jobs, workers=1, progress=False)
    pooled = toy.run_all(jobs, workers=2, progress=False)
    key = lambda r: r.seed  # noqa: E731
    assert [r.scores for r in sorted(alone, key=key)] == [r.scores for r in sorted(pooled, key=key)]


def test_write_results_writes_the_section_and_the_plot(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    (docs / "img").mkdir(parents=True)
    page = docs / "results.md"
    page.write_text(f"# Results\n\n{R.open_marker(toy.SECTION)}\nold\n{R.close_marker(toy.SECTION)}\n")
    monkeypatch.setattr(R, "RESULTS_PAGE", page)
    monkeypatch.setattr(R, "IMAGES", docs / "img")
    argv = ["--seeds", "2", "--episodes", "100", "--every", "50", "--dims", "2", "--teachers", "random",
            "--workers", "1", "--no-progress", "--out", str(tmp_path / "runs"), "--write-results"]
    toy.main(argv)
    body = R.read_section(page.read_text(), toy.SECTION)
    m = R.STAMP_RE.match(body)
    assert m and m["command"] == "python -m magister.examples.teacher_toy " + " ".join(argv)
    assert "    random | 0.000 [" in body and "![teacher-toy](img/teacher-toy.png)" in body
    assert (docs / "img" / "teacher-toy.png").stat().st_size > 1000


def test_bad_settings_are_refused(capsys):
    for argv in (["--dims", "2", "3", "--cells", "4"], ["--episodes", "150", "--every", "100"],
                 ["--teachers", "nope"]):
        with pytest.raises(SystemExit):
            toy.parse(argv)
    with pytest.raises(ValueError, match="unknown teacher 'nope'"):
        toy.make_teacher("nope", 2, 0)


# The comparison, at a budget a test can afford: the 2-D toy with its 10x10 cells, but cells that learn in
# 20 plays and count as mastered at 15 (the reference code's 100 and 75 take ~80 plays per cell, so the
# teachers pull ahead only after thousands of episodes), 2,000 episodes, 3 seeds. Uniform sampling reaches
# the origin cell once in 100 episodes, so it masters it around episode 1,600 and hardly anything more.
TOY, EPISODES, SEEDS = {"dims": 2, "cells": 10, "cap": 20, "threshold": 15}, 2000, 3


def _final(teacher: str, seed: int) -> float:
    return toy.play(toy.make_teacher(teacher, 2, seed), toy.ToyEnv(**TOY), EPISODES, EPISODES)[-1]


@pytest.fixture(scope="module")
def random_finals() -> list[float]:
    return [_final("random", s) for s in range(SEEDS)]


@pytest.mark.slow
@pytest.mark.parametrize("teacher", ["alpgmm", "covargmm", "riac"])
def test_the_learning_teachers_master_clearly_more_than_random(teacher, random_finals):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small mixtures fit several times faster on one BLAS thread
        finals = [_final(teacher, s) for s in range(SEEDS)]
    assert min(finals) > max(random_finals), (finals, random_finals)  # every seed beats every random seed
    assert np.mean(finals) >= 4 * np.mean(random_finals), (finals, random_finals)  # and 4 times as many
