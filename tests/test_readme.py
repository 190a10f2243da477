"""The README's Python snippets run as written, and its two commands are the ones CI uses."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_python_snippets_run():
    blocks = _blocks("python")
    assert len(blocks) >= 2
    namespace: dict = {"__name__": "readme"}
    for block in blocks:  # later blocks reuse names defined by earlier ones, as a reader would
        exec(compile(block, "README.md", "exec"), namespace)
    namespace["envs"].close()
    server = namespace["server"]
    curriculum = namespace["curriculum"]
    server.close()
    # the first snippet ran 2 envs x 100 random CartPole steps: episodes ended and were reported
    assert curriculum.num_sampled >= 2


def test_ci_runs_exactly_the_readme_test_command():
    commands = [b.strip() for b in _blocks("bash")]
    test_cmd = next(c for c in commands if "pytest" in c)
    main_cmd = next(c for c in commands if "magister.examples" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), f"{test_cmd!r} is not a line of .ci/run"
    assert main_cmd.startswith("bash .ci/setup")
