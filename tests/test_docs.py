"""The documentation site builds, and every Python block on its pages runs as written.

Conventions are those of ``tests/test_readme.py``: every fenced block labelled ``python`` or ``py`` in
``docs/**/*.md`` runs as a script of its own (a fresh interpreter, ``__name__ == "__main__"``), checked
afterwards for servers, vector envs, worker processes and magister threads left open, unless an HTML
comment right before its fence says

* ``<!-- docs-test: continues -->``: it continues the previous block of the same page (same script), or
* ``<!-- docs-test: needs <what> -->``: it needs something a test does not have (a cluster, a GPU ...);
  it is reported as skipped with that reason.

The site itself is built with ``mkdocs build --strict`` into a temporary folder (skipped, saying so, when
the ``docs`` extra is not installed), and must read offline: no page loads a script, a stylesheet or a
font from another host.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
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
KNOWN = PYTHON | {"bash", "text", "toml", "yaml"}
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
    "torch.save(server.state_dict(), path)": {
        "the restored curriculum continues identically": "restored_next == expected_next",
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


def _ids() -> list[str]:
    """Test ids such as ``curricula.plr.md:40`` (a slash in an id would read as a path to pytest)."""
    scripts, needs = _scripts()
    blocks = [s.blocks[0] for s in scripts] + needs
    return [f"{b.page.replace('/', '.')}:{b.line}" for b in blocks]


@pytest.mark.parametrize("index", range(len(_ids())), ids=_ids())
def test_docs_block_runs_as_written(index, tmp_path):
    scripts, needs = _scripts()
    if index >= len(scripts):
        b = needs[index - len(scripts)]
        pytest.skip(f"docs/{b.page}:{b.line} is marked as needing {b.marker[len('needs'):].strip()}")
    script = scripts[index]
    path = tmp_path / f"docs_block_{script.blocks[0].line}.py"
    path.write_text(script.code)
    run_script(path, _expect(script.code), script.where)


# -- the API reference covers every public name ---------------------------------------------------------

#: Public names the reference need not cover.
UNDOCUMENTED = {"__version__"}
#: Public names outside an ``__all__`` that the reference must still cover.
EXTRA = [
    "magister.sync.server.ServerHandle",
    "magister.sync.ray_backend.serve_ray",
    "magister.sync.ray_backend.RayClient",
    "magister.sync.ray_backend.RayCurriculumServer",
    "magister.integrations.sb3.CurriculumCallback",
    "magister.integrations.rllib.make_env_creator",
    "magister.integrations.rllib.magister_callbacks",
    "magister.integrations.rllib.MagisterCallbacks",
]


def _documented() -> set[str]:
    names = set()
    for page in (DOCS / "api").glob("*.md"):
        names |= {m.rsplit(".", 1)[-1] for m in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M)}
    return names


def test_the_api_reference_has_every_public_name():
    documented = _documented()
    missing = []
    for module in ["magister", "magister.task_spaces", "magister.curricula", "magister.sync",
                   "magister.env_wrappers", "magister.integrations"]:
        for name in importlib.import_module(module).__all__:
            if name not in UNDOCUMENTED and name not in documented:
                missing.append(f"{module}.{name}")
    missing += [path for path in EXTRA if path.rsplit(".", 1)[1] not in documented]
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


def test_every_figure_on_the_results_page_names_its_command():
    text = (DOCS / "results.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 3
    for section in sections:
        title = section.splitlines()[0]
        assert re.search(r"`[^`]*python[^`]*`", section), f"results.md, {title!r}: no command shown"
        has_table = "```text" in section or "|" in section
        points_to_dated = "Not re-measured" in section and "benchmarks/README.md" in section
        assert has_table or points_to_dated, f"results.md, {title!r}: no table and no pointer to the last one"


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
    external = re.compile(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//", re.I)
    for page in pages:
        hit = external.search(page.read_text())
        assert hit is None, f"{page.relative_to(site)} loads {hit.group(0)!r} from another host"
    # every public curriculum has its own rendered entry in the reference
    curricula = (site / "api" / "curricula" / "index.html").read_text()
    for name in ["PLR", "RobustPLR", "ACCEL", "LearningProgress", "SFL", "OMNI", "TaskFilter", "PFSP"]:
        assert f'id="magister.curricula.{name}"' in curricula, f"the reference lacks {name}"
