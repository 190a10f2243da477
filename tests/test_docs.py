"""The documentation site builds, and every Python block on its pages runs as written.

Conventions are those of ``tests/test_readme.py``: every fenced block labelled ``python`` or ``py`` in
``docs/**/*.md`` runs as a script of its own (a fresh interpreter, ``__name__ == "__main__"``), checked
afterwards for servers, vector envs, worker processes and magister threads left open, unless an HTML
comment right before its fence says

* ``<!-- docs-test: continues -->``: it continues the previous block of the same page (same script), or
* ``<!-- docs-test: needs <what> -->``: it needs something a test does not have (a cluster, a GPU ...);
  it is reported as skipped with that reason.

A block whose printed output is its point shows that output in a ``text`` block right after it, marked
``<!-- docs-test: output -->``: the test compares the lines the script printed with it (blank lines aside).
Every script that prints has such a block, or a check in :data:`EXPECT` (for output that varies run to
run, such as timings or addresses).

The site itself is built with ``mkdocs build --strict`` into a temporary folder (skipped, saying so, when
the ``docs`` extra is not installed), and must read offline: no page loads a script, a stylesheet or a
font from another host.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_readme import run_script

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
PYTHON = {"python", "py"}
KNOWN = PYTHON | {"bash", "text", "toml", "yaml", "diff"}
MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->\s*\Z", re.S)


@dataclass
class Block:
    page: str  # path relative to docs/
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None


@dataclass
class Script:
    blocks: list[Block] = field(default_factory=list)
    output: Block | None = None  # the text block showing what it prints

    @property
    def where(self) -> str:
        return f"docs/{self.blocks[0].page}:{self.blocks[0].line}"

    @property
    def code(self) -> str:
        return "\n".join(b.code for b in self.blocks)


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out, prev_end = [], 0
    for m in FENCE.finditer(text):
        marker = MARKER.search(text[prev_end:m.start()])
        line = text.count("\n", 0, m.start()) + 1
        rel = page.relative_to(DOCS).as_posix()
        out.append(Block(rel, line, m.group(1).strip(), m.group(2), marker.group(1) if marker else None))
        prev_end = m.end()
    return out


def _scripts() -> tuple[list[Script], list[Block]]:
    scripts: list[Script] = []
    needs: list[Block] = []
    for page in PAGES:
        first = True
        for b in _blocks(page):
            if b.lang == "text" and b.marker == "output":
                assert not first and scripts[-1].blocks[-1].page == b.page, (
                    f"docs/{b.page}:{b.line}: an output block must follow the Python block it shows")
                scripts[-1].output = b
                continue
            if b.lang not in PYTHON:
                continue
            if b.marker is None:
                scripts.append(Script([b]))
            elif b.marker == "continues":
                assert not first, f"docs/{b.page}:{b.line}: the first block of a page cannot continue"
                scripts[-1].blocks.append(b)
            elif b.marker.startswith("needs"):
                needs.append(b)
            else:
                raise AssertionError(f"docs/{b.page}:{b.line}: unknown marker <!-- docs-test: {b.marker} -->")
            first = False
    return scripts, needs


# What a block's run must show beyond running and closing, keyed by a line that identifies the block
# (expressions evaluated in the script's namespace, as in test_readme.py).
EXPECT: dict[str, dict[str, str]] = {
    "curriculum = SFL(task_space, seed=0)   # any curriculum": {
        "the envs took tasks of the space": "all(int(t) in range(5) for t in info['task'])",
        "episodes reached the curriculum": "curriculum.num_episodes >= 2",
    },
    'register_as="CartPoleTask-v0"': {
        "RLlib's results carried the curriculum's range, and it widened": "highs[-1] > highs[0]",
    },
    "magister.save(path, server.state_dict())": {
        "the restored curriculum continues identically": "restored_next == expected_next",
    },
    'print(m["sync/envs"], m["sync/total/tasks_in_flight"])': {
        "four envs served, nothing in flight": "(m['sync/envs'], m['sync/total/tasks_in_flight']) == (4, 0)",
    },
    "ray.kill(server.actor, no_restart=False)": {
        "the restarted actor restored the checkpoint": "restored == 1.0",
    },
    'magister.save(run / "curriculum.ckpt", curriculum.state_dict())': {
        "the curriculum was restored": "curriculum.num_sampled == 0",
    },
    "options=settings, max_tasks_in_flight=64": {
        "the keyword overrode the object, its other fields kept": "(served_with.max_tasks_in_flight, "
        "served_with.env_timeout, served_with.max_envs) == (64, 30.0, 256)",
    },
    # from README.md, whose snippets moved here
    "print(space.describe())  # 11 tasks": {
        "the second stage is running": "curriculum.metrics()['sequential/stage'] == 1.0",
        "11 valid tasks": "space.num_tasks == 11",
        "describe() says what it prints": "space.describe() == '11 tasks (12 combinations, 1 constraint): "
                                          "length in [0.25, 0.5, 1.0, 2.0]; masscart in [0.5, 1.0, 2.0].'",
    },
    'done_convention="ended_at")': {
        "three tasks scored": "server.curriculum.metrics()['plr/buffer_size'] == 3.0",
    },
    "model.learn(128, callback=CurriculumCallback(server))": {
        "PPO ran its budget": "model.num_timesteps >= 128",
        "value scores reached PLR": "server.curriculum.metrics()['plr/inserted'] > 0",
        "episodes were reported by the workers": "server.curriculum.num_episodes > 0",
    },
    "curve_secret_key=keys.secret_key": {
        "the worker got a task over CURVE": "task_space.contains(task_space.decode(info['task']))",
        "the curriculum sampled it": "server.curriculum.num_sampled >= 1",
    },
    "first, second = tasks_played([0, 1]), tasks_played([1, 0])": {
        "each env's sequence is its own, whichever env asks first":
            "first == second and len(first[0]) == 6 and first[0] != first[1]",
    },
    "curve_allowed_clients=[worker_keys.public_key]": {
        "the listed worker played": "env.env_id is not None",
        "the stranger was refused": "refused and server.metrics()['sync/clients_refused'] >= 1",
        "only the listed worker reached the curriculum": "envs_served == 1",
    },
}


def _expect(code: str) -> dict[str, str]:
    return {name: expr for key, table in EXPECT.items() if key in code for name, expr in table.items()}


def test_every_fence_is_labelled_and_every_python_block_is_run_or_marked():
    for page in PAGES:
        for b in _blocks(page):
            assert b.lang in KNOWN, f"docs/{b.page}:{b.line}: fence labelled {b.lang!r}; use one of {KNOWN}"
    scripts, needs = _scripts()
    assert sum(len(s.blocks) for s in scripts) >= 20, "the pages should hold runnable examples"
    for b in needs:
        assert len(b.marker) > len("needs") + 1, f"docs/{b.page}:{b.line}: say what the block needs"
    for key in EXPECT:
        assert sum(key in s.code for s in scripts) == 1, f"{key!r} should identify exactly one docs block"
    for s in scripts:  # what a block prints is compared with something
        if "print(" in s.code:
            assert s.output is not None or _expect(s.code), (
                f"{s.where} prints, but shows no <!-- docs-test: output --> block and has no check in EXPECT")


def _ids() -> list[str]:
    """Test ids such as ``curricula.plr.md:40`` (a slash in an id would read as a path to pytest)."""
    scripts, needs = _scripts()
    blocks = [s.blocks[0] for s in scripts] + needs
    return [f"{b.page.replace('/', '.')}:{b.line}" for b in blocks]


@pytest.mark.timeout(600)  # the Ray and RLlib guides start a local Ray runtime (and RLlib builds PPO)
@pytest.mark.parametrize("index", range(len(_ids())), ids=_ids())
def test_docs_block_runs_as_written(index, tmp_path):
    scripts, needs = _scripts()
    if index >= len(scripts):
        b = needs[index - len(scripts)]
        pytest.skip(f"docs/{b.page}:{b.line} is marked as needing {b.marker[len('needs'):].strip()}")
    script = scripts[index]
    path = tmp_path / f"docs_block_{script.blocks[0].line}.py"
    path.write_text(script.code)
    printed = run_script(path, _expect(script.code), script.where,
                         timeout=540 if "ray.init(" in script.code else 120)
    if script.output is not None:
        shown = [line.rstrip() for line in script.output.code.splitlines() if line.strip()]
        got = [line.rstrip() for line in printed if line.strip()]
        assert got == shown, (f"{script.where} printed\n" + "\n".join(got) + "\nbut its page shows\n"
                              + "\n".join(shown))


# -- the API reference covers every public name ---------------------------------------------------------

#: Public names the reference need not cover.
UNDOCUMENTED = {"__version__"}
#: Public names outside an ``__all__`` that the reference must still cover.
EXTRA = ["magister.sync.core.ServerHandle"]
#: Modules that ``magister``'s packages do not re-export (they import optional libraries, or hold helpers of
#: one curriculum): every name in their ``__all__`` but constants must be covered too. Read from the
#: source, so the test needs neither Ray nor SB3.
HELPER_MODULES = ["integrations/sb3.py", "integrations/rllib.py", "sync/ray_server.py",
                  "curricula/interestingness.py"]


def _helper_names() -> list[str]:
    import ast

    names = []
    for rel in HELPER_MODULES:
        tree = ast.parse((ROOT / rel).read_text())
        exported = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["__all__"]]
        assert exported, f"{rel} has no __all__"
        module = "magister." + rel[:-3].replace("/", ".")
        names += [f"{module}.{n}" for n in exported[0] if not n.isupper()]  # constants aside
    return names


def _documented() -> set[str]:
    names = set()
    for page in (DOCS / "api").glob("*.md"):
        names |= {m.rsplit(".", 1)[-1] for m in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M)}
    return names


def test_the_api_reference_has_every_public_name():
    documented = _documented()
    missing = []
    for module in ["magister", "magister.task_spaces", "magister.curricula", "magister.sync",
                   "magister.env_wrappers", "magister.integrations", "magister.opponents",
                   "magister.embeddings", "magister.evaluation"]:
        for name in importlib.import_module(module).__all__:
            if name not in UNDOCUMENTED and name not in documented:
                missing.append(f"{module}.{name}")
    helpers = _helper_names()
    assert len(helpers) >= 12, helpers
    missing += [path for path in EXTRA + helpers if path.rsplit(".", 1)[1] not in documented]
    assert not missing, f"docs/api/*.md lacks a ::: block for {missing}"


# -- curriculum pages, figures and results ----------------------------------------------------------------

PLOT_COMMAND = "python docs/scripts/curriculum_plots.py"


def test_each_curriculum_page_has_its_plot_and_names_the_command():
    # index.md and jax.md (the on-device functions, side by side with the classes) are overviews
    pages = [p for p in (DOCS / "curricula").glob("*.md") if p.name not in ("index.md", "jax.md")]
    assert len(pages) >= 16
    for page in pages:
        text = page.read_text()
        images = re.findall(r"!\[[^\]]*\]\(\.\./img/([\w.-]+\.png)\)", text)
        assert images, f"{page.name} shows no plot"
        for image in images:
            assert (DOCS / "img" / image).is_file(), f"{page.name}: docs/img/{image} is missing"
        assert PLOT_COMMAND in text, f"{page.name} does not name the command that draws its plot"


def test_the_plot_script_draws_one_figure_in_seconds(tmp_path):
    pytest.importorskip("matplotlib")
    proc = subprocess.run(
        [sys.executable, str(DOCS / "scripts" / "curriculum_plots.py"), "--out", str(tmp_path),
         "--only", "plr"], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "plr.png").stat().st_size > 10_000


RESULTS_PAGES = [DOCS / "results.md", ROOT / "benchmarks" / "README.md"]
#: Sections whose command does not take ``--write-results`` yet, and why (an entry must go once it does).
NOT_YET_WIRED: dict[str, str] = {}


def _command_target(command: str) -> tuple[Path, str]:
    """The file a results command runs, and how it names it (``-m module`` or a script path)."""
    words = shlex.split(command)
    i = next((k for k, w in enumerate(words) if w == "python" or w.endswith("/python")), None)
    assert i is not None, f"{command!r} runs no python"
    if words[i + 1] == "-m":
        module = words[i + 2]
        assert module.startswith("magister."), f"{command!r}: not a magister module"
        parts = module.split(".")[1:]
        path = ROOT.joinpath(*parts)
        return (path / "__main__.py" if path.is_dir() else path.with_suffix(".py")), module
    return ROOT / words[i + 1], words[i + 1]


def _accepts_write_results(path: Path) -> bool:
    """The script or module defines the flag: an argparse ``--write-results`` or a dataclass field
    ``write_results`` (the trainers' ``parse_dataclass`` turns it into ``--write-results``)."""
    source = path.read_text()
    return bool(re.search(r"""["']--write-results["']""", source) or
                re.search(r"^\s+write_results: bool = False$", source, re.M))


def test_every_results_section_is_written_by_a_command_that_takes_the_flag():
    from magister.examples import results as R

    seen = {}
    for page in RESULTS_PAGES:
        text = page.read_text()
        names = R.section_names(text)
        assert len(names) == len(set(names)), f"{page.name}: a section appears twice: {names}"
        for name in names:
            body = R.read_section(text, name, str(page))
            stamp, pending = R.STAMP_RE.match(body), R.PENDING_RE.match(body)
            assert stamp or pending, f"{page.name}, {name!r} does not start with its stamp: {body[:200]!r}"
            command = (stamp or pending)["command"]
            if stamp:
                assert "```" in body or "![" in body, f"{page.name}, {name!r}: a stamp but no figures"
            path, shown = _command_target(command)
            assert path.is_file(), f"{page.name}, {name!r}: {shown} ({path}) does not exist"
            if name in NOT_YET_WIRED:
                assert not _accepts_write_results(path), f"{shown} takes the flag now: drop {name!r} " \
                                                         f"from NOT_YET_WIRED"
            else:
                assert _accepts_write_results(path), f"{page.name}, {name!r}: {shown} has no --write-results"
            if pending:
                assert "--write-results" in command, f"{page.name}, {name!r}: the pending command must " \
                                                     f"carry --write-results"
            seen.setdefault(name, set()).add(page.name)
    results_md = DOCS / "results.md"
    assert set(seen) >= {"quickstart", "sync-overhead", "sync-latency", "curricula-speed",
                         "puzzles-env-speed", "puzzle-trainer-speed", "puzzle-ppo", "xland-ablation",
                         "jax-minigrid-rm"}
    # every section of benchmarks/README.md is on the site too
    bench = {n for n, pages in seen.items() if "README.md" in pages}
    assert bench and all(results_md.name in seen[n] for n in bench)


def test_the_results_page_has_no_figures_outside_its_sections():
    from magister.examples import results as R

    text = (DOCS / "results.md").read_text()
    for name in R.section_names(text):
        i, j = text.index(R.open_marker(name)), text.index(R.close_marker(name))
        text = text[:i] + text[j:]
    assert "```" not in text, "docs/results.md: a fenced block outside the generated sections"


def test_the_readme_and_the_results_page_quote_the_current_quickstart_intervals():
    """The quickstart's section holds every run's scores; the intervals it printed are recomputed from them
    (the statistics of what the command wrote, without training again). The results page's prose quotes all
    of them, with the machine-dependent figures (times) said to be so; README.md's summary quotes the
    headline (each method's mean and the difference, with the verdict)."""
    from magister.examples import quickstart
    from magister.examples import results as R

    page = (DOCS / "results.md").read_text()
    section = R.read_section(page, "quickstart")
    table = re.search(r"```text\n(.*?)```", section, re.S)[1]
    scores = quickstart.parse_scores(table)
    assert set(scores) == {"dr", "sfl-dist"} and all(len(m) >= 5 for m in scores.values()), "five seeds each"
    seeds = [int(s) for s in re.findall(r"^dr s(\d+): ", table, re.M)]
    recomputed = quickstart.stats_text(scores, "dr", "sfl-dist", seeds)
    assert recomputed in table, "the section's statistics are not those of its own per-run scores"
    q = quickstart.parse_quoted(table)
    f = quickstart._f
    headline = [
        f"mean held-out success {f(q['sfl-dist mean'])} with the curriculum vs {f(q['dr mean'])} with domain "
        f"randomisation",
        f"the difference of the means {f(q['mean(sfl-dist) - mean(dr)'])}",
    ]
    full = headline + [
        f"interquartile mean {f(q['sfl-dist iqm'])} vs {f(q['dr iqm'])}",
        f"beats a domain-randomisation run on a difficulty is {f(q['P(sfl-dist > dr)'])}",
    ]
    wasted = dict(re.findall(r"^([\w-]+): .*?; (\d+%) of training episodes", table, re.M))
    full.append(f"{wasted['sfl-dist']} vs {wasted['dr']} of training episodes spent on instances never "
                f"solved")
    seconds = dict(re.findall(r"^([\w-]+): \d+ steps x \d+ seed\(s\), (\d+)s per run", table, re.M))
    total = re.search(r"^all \d+ runs: (\d+)s", table, re.M)[1]
    full.append(f"{seconds['dr']} s per domain-randomisation run, {seconds['sfl-dist']} s per curriculum "
                f"run, {total} s for all ten")
    rows = [[c.strip() for c in line.split("|")] for line in table.splitlines() if line.count("|") == 4]
    shares = [re.search(r"\(\s*(\d+%)\)\s*$", r[4])[1] for r in rows[1:4]]  # the three shallowest
    full.append(f"concentrate on the 1-, 2- and 3-move shuffles ({', '.join(shares)} of them")
    diff = q["mean(sfl-dist) - mean(dr)"]
    claim = "its interval excludes zero" if diff.excludes(0.0) else "its interval includes zero"
    prose = " ".join(page.replace(R.read_section(page, "quickstart"), "").split())  # outside the section
    readme = " ".join((ROOT / "README.md").read_text().split())
    for where, text, phrases in (("docs/results.md", prose, full), ("README.md", readme, headline)):
        for phrase in phrases + [claim]:
            assert phrase in text, f"{where} should quote the quickstart section's figures: {phrase!r}"
        assert "depend on the machine" in text
    assert "docs/results.md" in readme


def test_the_remote_workers_table_of_what_survives_what_is_the_recovery_benchmarks():
    """The remote-workers guide's table of what survives what is the one ``benchmarks/sync_recovery.py``
    makes from the output in its section of the results page (one run wrote both), stamped with the same
    command and date; no figure in it was edited by hand."""
    from magister.examples import results as R

    spec = importlib.util.spec_from_file_location("sync_recovery", ROOT / "benchmarks" / "sync_recovery.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    guide = bench.GUIDE
    assert guide == DOCS / "guides" / "remote-workers.md"
    section = R.read_section((DOCS / "results.md").read_text(), "sync-recovery")
    output = re.search(r"```text\n(.*?)```", section, re.S)[1]
    table = R.read_section(guide.read_text(), bench.TABLE, str(guide))
    assert R.STAMP_RE.match(table)[0] == R.STAMP_RE.match(section)[0], "not written by the same run"
    assert table.endswith(bench.survival_table(output)), "the guide's table is not the benchmark's output"
    prose = " ".join(guide.read_text().split(R.open_marker(bench.TABLE))[0][-700:].split())
    assert "depend on the machine" in prose and "benchmarks/sync_recovery.py --write-results" in prose
    assert R.open_marker(bench.TABLE) not in (ROOT / "README.md").read_text(), "one table, in the guide"


# -- the build ----------------------------------------------------------------------------------------

def _missing_docs_packages() -> list[str]:
    wanted = {"mkdocs": "mkdocs", "material": "mkdocs-material", "mkdocstrings": "mkdocstrings",
              "mkdocstrings_handlers.python": "mkdocstrings-python"}
    missing = []
    for module, package in wanted.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(package)
    return missing


LINK = re.compile(r"""<(?:a|link|script|img|source|iframe)\b[^>]*?\b(?:href|src)=["']([^"']*)["']""", re.I)


def _in_site_targets(site: Path, page: Path) -> list[tuple[str, Path]]:
    """``(link, file it names)`` for every in-site link of ``page``, resolved as a browser opening the page
    from disk would (no server: a folder is a folder, not its ``index.html``)."""
    out = []
    for link in LINK.findall(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I) or link.startswith("//"):
            continue  # another scheme (https:, mailto:, data:, javascript:)
        path = link.split("#", 1)[0].split("?", 1)[0]
        if not path:
            continue  # an anchor on the same page
        assert not path.startswith("/"), f"{page.relative_to(site)}: {link!r} is a site-root path"
        out.append((link, (page.parent / path).resolve()))
    return out


def _broken_links(site: Path) -> tuple[list[str], int]:
    """The in-site links that do not open a file (a folder, a missing file), and how many were checked."""
    broken, checked = [], 0
    for page in site.rglob("*.html"):
        for link, target in _in_site_targets(site, page):
            checked += 1
            if not target.is_file():
                kind = "a folder" if target.is_dir() else "missing"
                broken.append(f"{page.relative_to(site)}: {link} ({kind})")
    return broken, checked


def _check_reads_from_disk(site: Path) -> None:
    """Every in-site link of every page opens a file; no docs build script is in the site."""
    broken, checked = _broken_links(site)
    assert checked > 1000, f"only {checked} in-site links found: is the link pattern right?"
    assert not broken, f"{len(broken)} of {checked} in-site links do not open a file, e.g. {broken[:10]}"
    assert not list(site.rglob("*.py")), "docs build scripts were copied into the site"
    assert 'href="./' in (site / "404.html").read_text()


def test_the_link_check_finds_folder_links_and_missing_files(tmp_path):
    (tmp_path / "guides" / "cleanrl").mkdir(parents=True)
    (tmp_path / "guides" / "cleanrl" / "index.html").write_text("<p>page</p>")
    (tmp_path / "index.html").write_text(
        '<a href="guides/cleanrl/">folder</a> <a href="guides/cleanrl/index.html#x">file</a> '
        '<link href="assets/x.css"> <a href="https://example.org/">out</a> <a href="#top">here</a>')
    broken, checked = _broken_links(tmp_path)
    assert checked == 3
    assert broken == ["index.html: guides/cleanrl/ (a folder)", "index.html: assets/x.css (missing)"]
    (tmp_path / "404.html").write_text('<a href="/index.html">home</a>')
    with pytest.raises(AssertionError, match="site-root path"):
        _broken_links(tmp_path)


def test_mkdocs_build_strict(tmp_path):
    missing = _missing_docs_packages()
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    output = f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 30
    # offline: nothing a page needs comes from another host
    external = re.compile(r"<(?:script|link|img|iframe|source|video|audio)\b[^>]*(?:src|href)=[\"']?"
                          r"(?:https?:)?//", re.I)
    for page in pages:
        html = page.read_text()
        hit = external.search(html)
        assert hit is None, f"{page.relative_to(site)} loads {hit.group(0)!r} from another host"
        # Material loads Mermaid from a CDN when a page holds a diagram: none may
        assert 'class="mermaid"' not in html, f"{page.relative_to(site)} holds a Mermaid diagram (CDN script)"
    # ... and no stylesheet pulls a font or another stylesheet from the network (theme.font: false)
    remote = re.compile(r"@import\s+(?:url\()?[\"']?(?:https?:)?//|url\([\"']?(?:https?:)?//"
                        r"|fonts\.googleapis", re.I)
    for css in site.rglob("*.css"):
        hit = remote.search(css.read_text(errors="replace"))
        assert hit is None, f"{css.relative_to(site)} fetches {hit.group(0)!r} from another host"
    _check_reads_from_disk(site)
    # every public curriculum has its own rendered entry in the reference
    curricula = (site / "api" / "curricula.html").read_text()
    for name in ["PLR", "RobustPLR", "ACCEL", "LearningProgress", "SFL", "OMNI", "TaskFilter", "PFSP"]:
        assert f'id="magister.curricula.{name}"' in curricula, f"the reference lacks {name}"
