"""What runs only in a virtualenv of its own, run there from the main suite (``tests/venvs.py``: CI builds
the virtualenvs; elsewhere these tests are skipped, naming the build command).

* the maze trainer's tests (``tests/test_jax_maze.py``) in the ``jaxued`` virtualenv
  (``benchmarks/_jaxued_env.sh``), where none of them may skip: JaxUED is there;
* the JAX guide's xminigrid snippet (marked ``needs xminigrid`` for ``tests/test_docs.py``) in the
  ``xminigrid`` virtualenv (``benchmarks/_xminigrid_env.sh``), as written on the page.
"""

from __future__ import annotations

import re

import pytest
from test_docs import DOCS, _blocks
from venvs import REPO, run_in


@pytest.mark.slow
def test_the_maze_trainer_tests_pass_in_the_jaxued_venv() -> None:
    proc = run_in("jaxued", ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/test_jax_maze.py"],
                  timeout=1500)
    summary = proc.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    defined = len(re.findall(r"^def test_", (REPO / "tests" / "test_jax_maze.py").read_text(), re.M))
    assert passed and int(passed.group(1)) >= defined > 0, proc.stdout[-3000:]
    assert "skipped" not in summary and "SKIPPED" not in proc.stdout, proc.stdout[-3000:]


def test_the_jax_guides_xminigrid_snippet_runs_in_the_xminigrid_venv(tmp_path) -> None:
    blocks = [b for b in _blocks(DOCS / "guides" / "jax.md")
              if b.lang == "python" and b.marker and b.marker.startswith("needs xminigrid")]
    assert len(blocks) == 1, "the JAX guide should hold one xminigrid block"
    script = tmp_path / "xminigrid_snippet.py"
    script.write_text(blocks[0].code)
    proc = run_in("xminigrid", [str(script)], timeout=900)
    size, replay = proc.stdout.split()[-2:]
    assert 0 < int(size) <= 512  # levels buffered by PLR⊥, at most its buffer_size
    assert 0.0 <= float(replay) <= 1.0
