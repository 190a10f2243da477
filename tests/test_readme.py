"""Every Python snippet in README.md runs as written, and its two commands are the ones CI uses.

Every fenced block whose language is ``python`` or ``py`` is a snippet. Each one runs as a script of its
own (``python snippet.py``: a fresh process, ``__name__ == "__main__"``, ``__file__`` set, so that worker
processes started by spawn/forkserver re-import it exactly as they would a user's file), unless the README
marks it, in an HTML comment right before its fence, as

* ``<!-- readme-test: continues -->``: it reuses names from the snippet before it, runs after it in the
  same script, and the prose just before it says so ("above", "continuing"), or
* ``<!-- readme-test: needs <what> -->``: it cannot run in a plain test (a host, a cluster ...); the test
  reports it as skipped with that reason instead of silently passing over it.

After a snippet runs, the script checks that it closed what it opened: no curriculum server, vector env
or SB3 vec env left open, no worker process left alive, no magister thread (server, update flusher) still
running.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
PYTHON = {"python", "py"}
KNOWN = PYTHON | {"bash"}
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->\s*\Z", re.S)


@dataclass
class Snippet:
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None  # the readme-test marker right before the fence, if any
    prose: str  # the text between the previous fence and this one


@dataclass
class Script:
    """One script run: a snippet and the snippets that continue it."""

    snippets: list[Snippet] = field(default_factory=list)

    @property
    def line(self) -> int:
        return self.snippets[0].line

    @property
    def code(self) -> str:
        return "\n".join(s.code for s in self.snippets)


def _fences() -> list[tuple[str, Snippet]]:
    out = []
    prev_end = 0
    for m in FENCE.finditer(README):
        before = README[prev_end:m.start()]
        marker = MARKER.search(before)
        line = README.count("\n", 0, m.start()) + 1
        snippet = Snippet(line, m.group(2), marker.group(1) if marker else None, before)
        out.append((m.group(1).strip(), snippet))
        prev_end = m.end()
    return out


def _snippets() -> list[Snippet]:
    return [s for lang, s in _fences() if lang in PYTHON]


def _scripts() -> tuple[list[Script], list[Snippet]]:
    """The scripts to run, and the snippets marked as needing something a test does not have."""
    scripts: list[Script] = []
    needs: list[Snippet] = []
    for s in _snippets():
        if s.marker is None:
            scripts.append(Script([s]))
        elif s.marker == "continues":
            assert scripts, f"README.md:{s.line}: the first snippet cannot continue a previous one"
            scripts[-1].snippets.append(s)
        elif s.marker.startswith("needs"):
            needs.append(s)
        else:
            raise AssertionError(f"README.md:{s.line}: unknown marker <!-- readme-test: {s.marker} -->")
    return scripts, needs


# Runs in a fresh interpreter: ``python -c HARNESS snippet.py``. runpy makes the snippet ``__main__`` with
# its own ``__file__`` (so spawn/forkserver workers re-import the snippet file, as they would a user's
# script), then the leftovers are reported as JSON on the last line of stdout.
HARNESS = r'''
import gc, json, multiprocessing, runpy, sys, threading, time
path = sys.argv[1]
sys.argv = [path]
ns = runpy.run_path(path, run_name="__main__")
from magister.sync.zmq_server import CurriculumServer
import gymnasium as gym
closable = [gym.vector.VectorEnv]
if "stable_baselines3" in sys.modules:
    from stable_baselines3.common.vec_env import VecEnv
    closable.append(VecEnv)
open_objects = []
for obj in gc.get_objects():
    if isinstance(obj, CurriculumServer) and not obj.closed:
        open_objects.append(f"CurriculumServer at {obj.address}")
    elif isinstance(obj, tuple(closable)) and getattr(obj, "closed", True) is False:
        open_objects.append(type(obj).__name__)
deadline = time.monotonic() + 5.0
while time.monotonic() < deadline:
    threads = [t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith("magister")]
    children = [p.name for p in multiprocessing.active_children()]
    if not threads and not children:
        break
    time.sleep(0.05)
checks = {}
for name, expr in json.loads(sys.stdin.read() or "{}").items():
    try:
        checks[name] = bool(eval(expr, ns))
    except Exception as exc:
        checks[name] = f"{type(exc).__name__}: {exc}"
print("\n" + json.dumps({"open": open_objects, "threads": threads, "children": children, "checks": checks}))
'''

# What a snippet's run must show beyond running and closing (expressions evaluated in its namespace),
# keyed by a line that identifies the snippet. Printed values the README quotes are checked on stdout.
EXPECT: dict[str, dict[str, str]] = {
    "server = serve(curriculum)": {
        # 2 envs x 100 random CartPole steps: tasks were sent, episodes ended and were reported
        "tasks were sampled": "curriculum.num_sampled >= 2",
        "episodes were reported": "curriculum.num_episodes >= 2",
        "every env's info names a task of the space":
            "len(info['task']) == 2 and all(task_space.contains(task_space.decode(t)) for t in info['task'])",
    },
}
# Printed lines a snippet must show (none of the README's snippets prints now; the docs' snippets that do are
# checked by tests/test_docs.py).
STDOUT: dict[str, list[str]] = {}
#: The README is the first screen: what magister is, the set-up commands, one snippet, short tables, links.
MAX_LINES = 150


def _expect(table: dict, code: str) -> list:
    return [v for key, v in table.items() if key in code]


def test_every_fence_is_python_or_bash_and_every_python_snippet_is_run_or_marked():
    langs = [lang for lang, _ in _fences()]
    assert set(langs) <= KNOWN, f"README.md has fences in {set(langs) - KNOWN}: label them python/py or bash"
    # every python/py fence is either run (alone or continuing) or explicitly marked as needing something
    scripts, needs = _scripts()
    run = sum(len(s.snippets) for s in scripts)
    assert run + len(needs) == langs.count("python") + langs.count("py") >= 1
    assert all(len(s.marker) > len("needs") + 1 for s in needs), "a needs marker must say what it needs"
    # a snippet that reuses earlier names says so in the text, not only in the marker
    for s in scripts:
        for cont in s.snippets[1:]:
            says = re.search(r"above|continu", MARKER.sub("", cont.prose), re.I)
            assert says, f"README.md:{cont.line} must say in its text that it continues the snippet above"
    # each table entry matches exactly one script, so a renamed snippet cannot silently lose its checks
    for key in list(EXPECT) + list(STDOUT):
        assert sum(key in s.code for s in scripts) == 1, f"{key!r} should identify exactly one README snippet"


def run_script(path: Path, checks: dict[str, str], where: str, timeout: float = 120) -> list[str]:
    """Run the script at ``path`` in a fresh interpreter under :data:`HARNESS` and assert that it exits
    cleanly, leaves nothing open, no worker process and no magister thread behind, and that every named
    check (an expression evaluated in its namespace) is true; returns the lines it printed."""
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, str(path)], input=json.dumps(checks), cwd=path.parent,
        capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    *printed, report_line = proc.stdout.rstrip("\n").split("\n")
    report = json.loads(report_line)
    assert report["open"] == [], f"{where} leaves open: {report['open']}"
    assert report["children"] == [], f"{where} leaves worker processes alive: {report['children']}"
    assert report["threads"] == [], f"{where} leaves magister threads running: {report['threads']}"
    failed = {k: v for k, v in report["checks"].items() if v is not True}
    assert not failed, f"{where}: {failed}"
    assert set(report["checks"]) == set(checks)
    return printed


def _script_ids() -> list[str]:
    scripts, needs = _scripts()
    return [f"README.md:{s.line}" for s in scripts] + [f"README.md:{s.line}" for s in needs]


@pytest.mark.parametrize("index", range(len(_script_ids())), ids=_script_ids())
def test_readme_snippet_runs_as_written(index, tmp_path):
    scripts, needs = _scripts()
    if index >= len(scripts):
        s = needs[index - len(scripts)]
        pytest.skip(f"README.md:{s.line} is marked as needing {s.marker[len('needs'):].strip()}")
    script = scripts[index]
    path = tmp_path / f"readme_snippet_{script.line}.py"
    path.write_text(script.code)
    checks = {name: expr for table in _expect(EXPECT, script.code) for name, expr in table.items()}
    printed = run_script(path, checks, f"README.md:{script.line}")
    where = f"README.md:{script.line}"
    for lines in _expect(STDOUT, script.code):
        assert [line for line in printed if line] == lines, f"{where} printed {printed}"


def test_ci_runs_exactly_the_readme_test_command():
    commands = [s.code.strip() for lang, s in _fences() if lang == "bash"]
    test_cmd = next(c for c in commands if "pytest" in c)
    main_cmd = next(c for c in commands if "magister.examples" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), f"{test_cmd!r} is not a line of .ci/run"
    assert main_cmd.startswith("bash .ci/setup")


def test_the_readme_is_a_first_screen():
    """At most MAX_LINES lines; it points to the docs for the rest (the guides, the results page)."""
    lines = README.splitlines()
    assert len(lines) <= MAX_LINES, f"README.md: {len(lines)} lines, at most {MAX_LINES}; move the rest"
    links = set(re.findall(r"\]\(([^)#]+)", README))
    for page in ("docs/index.md", "docs/getting-started.md", "docs/results.md", "docs/guides/gymnasium.md",
                 "docs/curricula/index.md", "docs/trainers.md"):
        assert page in links, f"README.md should link {page}"
        assert (ROOT / page).is_file(), page
