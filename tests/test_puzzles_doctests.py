"""The docstring examples of the puzzle modules run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["__init__", "base", "flip", "flood", "sixteen", "fifteen", "netslide", "pegs", "samegame",
           "untangle", "task"]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    path = "magister.examples.puzzles" + ("" if name == "__init__" else f".{name}")
    module = importlib.import_module(path)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
