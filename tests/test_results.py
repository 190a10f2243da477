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
