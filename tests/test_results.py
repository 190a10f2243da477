"""The results writer (``magister.examples.results``): a command replaces its own marked section of a page,
stamped with the command and the date, and leaves everything else of the page as it was."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister.examples import results as R

# page text that cannot itself contain a results marker
prose = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<"), max_size=200)
names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,15}", fullmatch=True)
markdown = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<`"),
                   max_size=200)


def page(before: str, name: str, inside: str, after: str) -> str:
    return f"{before}{R.open_marker(name)}{inside}{R.close_marker(name)}{after}"


@settings(max_examples=200, deadline=None)
@given(prose, names, prose, prose, markdown, markdown)
def test_replacing_keeps_everything_outside_the_markers_and_is_idempotent(before, name, old, after, new,
                                                                          newer):
    text = page(before, name, old, after)
    once = R.replace_section(text, name, new, "python bench.py --write-results", "2026-11-25")
    assert once.startswith(before + R.open_marker(name))
    assert once.endswith(R.close_marker(name) + after)
    body = R.read_section(once, name)
    assert body.startswith("_Output of `python bench.py --write-results`, run on 2026-11-25._")
    assert body.endswith(new.strip())
    assert R.replace_section(once, name, new, "python bench.py --write-results", "2026-11-25") == once
    # a later run replaces the figures instead of adding to them
    twice = R.replace_section(once, name, newer, "python bench.py --write-results", "2026-11-26")
    assert twice == R.replace_section(text, name, newer, "python bench.py --write-results", "2026-11-26")
    m = R.STAMP_RE.search(R.read_section(twice, name))
    assert (m["command"], m["date"]) == ("python bench.py --write-results", "2026-11-26")


def test_only_the_named_section_changes():
    text = page("# R\n\n", "a", "\nold a\n", "\n\n") + page("", "b", "\nold b\n", "\n")
    out = R.replace_section(text, "b", "new b", "python x.py", "2026-01-02")
    assert R.read_section(out, "a") == "old a"
    assert "new b" in R.read_section(out, "b") and "old b" not in out
    assert R.section_names(out) == ["a", "b"]


def test_a_missing_marker_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no results section 'speed'.*<!-- results:speed -->.*"
                                         r"<!-- /results:speed -->"):
        R.replace_section("# Results\n", "speed", "x", "python x.py", "2026-01-02")
    with pytest.raises(ValueError, match=r"missing: <!-- /results:speed -->"):
        R.replace_section(R.open_marker("speed") + "\n", "speed", "x", "python x.py", "2026-01-02")


def test_repeated_or_reversed_markers_and_bad_arguments_are_errors():
    twice = page("", "s", "", "\n") * 2
    with pytest.raises(ValueError, match="2 results sections named 's'"):
        R.replace_section(twice, "s", "x", "python x.py", "2026-01-02")
    with pytest.raises(ValueError, match="comes before"):
        R.replace_section(R.close_marker("s") + R.open_marker("s"), "s", "x", "python x.py", "2026-01-02")
    ok = page("", "s", "", "")
    with pytest.raises(ValueError, match="section name"):
        R.replace_section(ok, "Bad Name", "x", "python x.py", "2026-01-02")
    with pytest.raises(ValueError, match="date must read YYYY-MM-DD"):
        R.replace_section(ok, "s", "x", "python x.py", "25.11.2026")
    with pytest.raises(ValueError, match="without backticks"):
        R.replace_section(ok, "s", "x", "python `x`.py", "2026-01-02")


def test_write_section_links_images_relative_to_the_page(tmp_path, monkeypatch):
    docs, bench = tmp_path / "docs", tmp_path / "benchmarks"
    (docs / "img").mkdir(parents=True)
    bench.mkdir()
    (docs / "img" / "plot.png").write_bytes(b"png")
    for p in (docs / "results.md", bench / "README.md"):
        p.write_text("intro\n\n" + page("", "s", "\n", "\n\nend\n"))
    monkeypatch.setattr(R, "IMAGES", docs / "img")
    R.write_section(docs / "results.md", "s", "table", "python x.py", images=["plot.png"], date="2026-01-02")
    R.write_section(bench / "README.md", "s", "table", "python x.py", images=["plot.png"], date="2026-01-02")
    assert "![plot](img/plot.png)" in (docs / "results.md").read_text()
    assert "![plot](../docs/img/plot.png)" in (bench / "README.md").read_text()
    assert (docs / "results.md").read_text().endswith("\n\nend\n")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        R.write_section(docs / "results.md", "s", "t", "python x.py", images=["missing.png"])
    with pytest.raises(FileNotFoundError, match="source checkout"):
        R.write_section(tmp_path / "nope.md", "s", "t", "python x.py")


def test_recording_writes_what_the_block_printed_and_nothing_on_failure(tmp_path, capsys):
    target = tmp_path / "results.md"
    target.write_text(page("# R\n", "bench", "\nold\n", "\n"))
    with R.recording("bench", enabled=True, command="python b.py --write-results", pages=[target]) as rec:
        print("rate   ratio  ")
        print("a      1.00x")
        rec.after = "Ratios of one run."
    assert "rate   ratio" in capsys.readouterr().out  # still printed
    body = R.read_section(target.read_text(), "bench")
    assert "```text\nrate   ratio\na      1.00x\n```" in body and body.endswith("Ratios of one run.")
    before = target.read_text()
    with pytest.raises(RuntimeError), R.recording("bench", enabled=True, command="python b.py",
                                                  pages=[target]):
        print("half a table")
        raise RuntimeError("the run failed")
    assert target.read_text() == before
    with pytest.raises(ValueError, match="no results section 'other'"):  # checked before the run
        with R.recording("other", enabled=True, command="python b.py", pages=[target]):
            raise AssertionError("must not run")
    with R.recording("bench", enabled=False, pages=[tmp_path / "absent.md"]):
        print("not written")
    assert sys.stdout is not None and target.read_text() == before


def test_command_line_reads_as_typed_from_the_root(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = str(R.ROOT / "benchmarks" / "sync_latency.py")
    assert R.command_line([script, "--quick", "--write-results"]) == \
        "python benchmarks/sync_latency.py --quick --write-results"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert R.command_line(["x", "--seeds", "0", "1"], module="magister.examples.quickstart") == \
        "OMP_NUM_THREADS=1 python -m magister.examples.quickstart --seeds 0 1"


# -- the commands write their sections ----------------------------------------------------------------------

SECTION_PAGE = "# Results\n\nintro\n\n{sections}\nthe end\n"


@pytest.fixture
def pages(tmp_path, monkeypatch):
    """A results page and a benchmarks README in a temporary tree, with every section of the real ones."""
    docs, bench = tmp_path / "docs", tmp_path / "benchmarks"
    (docs / "img").mkdir(parents=True)
    bench.mkdir()
    real = (R.RESULTS_PAGE.read_text(), R.BENCHMARKS_README.read_text())
    for path, text in zip((docs / "results.md", bench / "README.md"), real):
        sections = "".join(page("", n, "\nold\n", "\n\n") for n in R.section_names(text))
        path.write_text(SECTION_PAGE.format(sections=sections))
    monkeypatch.setattr(R, "RESULTS_PAGE", docs / "results.md")
    monkeypatch.setattr(R, "BENCHMARKS_README", bench / "README.md")
    monkeypatch.setattr(R, "IMAGES", docs / "img")
    return docs / "results.md", bench / "README.md"


def _section(path, name):
    body = R.read_section(path.read_text(), name)
    m = R.STAMP_RE.match(body)
    assert m, body[:200]
    return m["command"], body


def test_the_quickstart_writes_its_table_and_plot(pages, tmp_path):
    from magister.examples import quickstart

    argv = ["--total-steps", "256", "--num-envs", "4", "--num-steps", "32", "--train-seeds", "5",
            "--eval-seeds", "1", "--eval-every", "0", "--params", "3x3m1", "3x3m2", "--seeds", "0",
            "--run-dir", str(tmp_path / "runs"), "--no-progress", "--write-results"]
    results = quickstart.main(argv)
    command, body = _section(pages[0], "quickstart")
    assert command.startswith("python -m magister.examples.quickstart --total-steps 256 ")
    assert command.endswith("--write-results")
    from magister.examples.puzzle_ppo import difficulties

    params = difficulties(quickstart.run_args(quickstart.parse(argv), "dr", 0))
    assert quickstart.table(results, params) in body  # exactly what it printed
    assert "![quickstart](img/quickstart.png)" in body
    assert (R.IMAGES / "quickstart.png").stat().st_size > 1000
    assert R.read_section(pages[0].read_text(), "sync-latency") == "old"  # other sections untouched


def test_the_puzzle_trainer_writes_its_held_out_table_and_plot(pages, tmp_path):
    from magister.examples import puzzle_ppo

    argv = ["--puzzle", "flip", "--size", "3x3c", "--total-steps", "256", "--num-envs", "4", "--num-steps",
            "32", "--max-steps", "12", "--train-seeds", "5", "--eval-seeds", "1", "--eval-every", "0",
            "--run-dir", str(tmp_path / "runs"), "--no-tensorboard", "--no-progress", "--write-results"]
    result = puzzle_ppo.main(argv)
    command, body = _section(pages[0], "puzzle-ppo")
    assert command == "python -m magister.examples.puzzle_ppo " + " ".join(argv)
    assert f"held-out success after {result.global_step} steps" in body
    assert "over the difficulties: mean " in body and "95% bootstrap intervals over the" in body
    assert "![puzzle-ppo](img/puzzle-ppo.png)" in body and (R.IMAGES / "puzzle-ppo.png").is_file()


def test_the_xland_trainer_writes_results_only_for_its_ablation():
    from magister.examples import xland_ppo

    with pytest.raises(ValueError, match="pass --ablation"):
        xland_ppo.main(["--write-results"])


def test_a_benchmark_writes_its_output_into_both_pages(pages, monkeypatch, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("puzzles_env_speed",
                                                  R.ROOT / "benchmarks" / "puzzles_env_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "RESULTS_PAGE", pages[0])
    monkeypatch.setattr(bench, "BENCHMARKS_README", pages[1])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(sys, "argv", [str(R.ROOT / "benchmarks" / "puzzles_env_speed.py"), "--seconds",
                                      "0.01", "--write-results"])
    bench.main()
    printed = capsys.readouterr().out
    for path in pages:
        command, body = _section(path, "puzzles-env-speed")
        assert command == "python benchmarks/puzzles_env_speed.py --seconds 0.01 --write-results"
        assert R.text_block(printed) in body
        assert "CartPole-v1" in body and "untangle" in body


def test_the_xland_ablation_writes_its_table_and_plot(pages, tmp_path):
    from magister.examples import xland_ppo

    argv = ("--ablation --ablation-seeds 1 --budget env --total-steps 64 --num-envs 2 --num-steps 16 "
            "--episode-length 8 --n-test 2 --n-validation 2 --hidden 16 --filter-episodes 2 "
            "--filter-window 2 "
            "--num-minibatches 2 --update-epochs 2 --no-progress --no-tensorboard --run-name abl").split()
    argv += ["--run-dir", str(tmp_path / "runs"), "--write-results"]
    results = xland_ppo.main(argv)
    command, body = _section(pages[0], "xland-ablation")
    assert command == "python -m magister.examples.xland_ppo " + " ".join(argv)
    assert R.text_block(xland_ppo.ablation_table(results)) in body
    assert "![xland-ablation](img/xland-ablation.png)" in body and (R.IMAGES / "xland-ablation.png").is_file()
