"""The PufferLib recipe (magister.examples.pufferlib) in its own virtualenv (pufferlib-core pins torch 2.9.0:
``benchmarks/_pufferlib_env.sh`` installs it beside torch 2.13.0). CI builds the virtualenv; elsewhere the
test is skipped, naming the build command (``tests/venvs.py``).

The check script (``tests/venv_checks/pufferlib_recipe.py``) trains at a tiny budget under PufferLib's Serial
and Multiprocessing backends with ``--check-levels``: every info's ``task`` is compared with the layout the
env itself generated (a fresh MiniGrid reset of that seed), the curriculum must have received every finished
episode, and the run resumes from its checkpoint.
"""

from __future__ import annotations

import json

import pytest
from venvs import run_in


@pytest.mark.slow
def test_tasks_and_feedback_flow_through_pufferlib_serial_and_multiprocessing() -> None:
    proc = run_in("pufferlib", ["tests/venv_checks/pufferlib_recipe.py", "Serial", "Multiprocessing"],
                  timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["backend"] for r in rows] == ["Serial", "Multiprocessing"], proc.stdout
    for r in rows:
        assert r["infos_checked"] > 0 and r["levels_played"] > 1
        assert r["curriculum_episodes"] >= r["episodes"] > 0
        assert 0 < r["buffered"] <= r["levels_played"]
