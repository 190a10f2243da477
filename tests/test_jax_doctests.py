"""Run the doctest examples of the bundled JAX trainers' modules (skipped without jax)."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytest.importorskip("jax")

MODULES = [f"minigrid_rm.{m}" for m in ("env", "propositions", "reward_machines", "problem", "levels",
                                         "solvability", "curriculum", "probes")] + ["jax_ppo"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(f"magister.examples.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"no doctest found in {name}"
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
