"""The Procgen recipe's pieces that need no Procgen: return bounds, task spaces, argument checks, doctests.

The recipe itself runs inside its own virtualenv: tests/test_procgen_recipe.py.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from magister.examples.procgen import levels
from magister.examples.procgen.levels import (
    GAMES,
    MAX_LEVEL_SEED,
    RETURN_BOUNDS,
    ProcgenLevels,
    all_levels,
    normalised_return,
    training_levels,
)


def test_doctests():
    assert doctest.testmod(levels).failed == 0


def test_every_game_has_bounds_in_both_modes():
    assert len(GAMES) == 16
    for mode in ("easy", "hard"):
        assert sorted(RETURN_BOUNDS[mode]) == list(GAMES)
        assert all(lo < hi for lo, hi in RETURN_BOUNDS[mode].values())


def test_normalised_return_is_min_max():
    assert normalised_return("bigfish", 1.0) == 0.0  # easy bounds 1 .. 40
    assert normalised_return("bigfish", 40.0) == 1.0
    assert normalised_return("fruitbot", 0.0) == pytest.approx(1.5 / 33.9)  # -1.5 .. 32.4
    assert normalised_return("starpilot", 35.0, "hard") == 1.0  # hard bounds 1.5 .. 35
    np.testing.assert_allclose(normalised_return("coinrun", np.array([5.0, 10.0, 12.5])), [0.0, 1.0, 1.5])
    with pytest.raises(ValueError, match="unknown Procgen game"):
        normalised_return("pong", 1.0)
    with pytest.raises(ValueError, match="distribution mode"):
        normalised_return("coinrun", 1.0, "extreme")


def test_task_spaces_are_level_seeds():
    train = training_levels(200)
    assert train.num_tasks == 200 and train.contains(0) and train.contains(199) and not train.contains(200)
    full = all_levels()
    assert full.num_tasks == MAX_LEVEL_SEED == 2**31 - 1
    assert all(0 <= t < MAX_LEVEL_SEED for t in full.sample_encoded(100, rng=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="num_levels"):
        training_levels(0)


def test_bad_arguments_are_refused_before_procgen_is_needed():
    with pytest.raises(ValueError, match="unknown Procgen game"):
        ProcgenLevels(training_levels(10), "pong")
    with pytest.raises(ValueError, match="distribution_mode"):
        ProcgenLevels(training_levels(10), "coinrun", distribution_mode="memory")
    with pytest.raises(ValueError, match="start_level"):
        ProcgenLevels(training_levels(10), "coinrun", start_level=3)
