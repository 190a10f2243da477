"""The NetHack / MiniHack recipe (magister.examples.nethack), run in its own virtualenv (nle pins gymnasium).

``tests/recipes_inside/nethack_check.py`` runs the recipe's trainer at a tiny budget inside the virtualenv
built by ``benchmarks/_nethack_env.sh`` and checks, from NLE's own reports, that each episode played the
game seed in its ``info["task"]`` (``get_seeds()``) or the MiniHack env id chosen (the env's spec), that the
curriculum got every episode, and that the script resumes from its checkpoint.
"""

from __future__ import annotations

import pytest
from venvs import run_in


@pytest.mark.slow
def test_nethack_recipe_plays_the_chosen_seeds_and_ids(tmp_path):
    proc = run_in("nethack", ["tests/recipes_inside/nethack_check.py", str(tmp_path)], timeout=600)
    ok = [line for line in proc.stdout.splitlines() if line.startswith("OK ")]
    assert len(ok) == 4, proc.stdout
    assert "NLE reported (task, task, reseed=False) every time" in proc.stdout

