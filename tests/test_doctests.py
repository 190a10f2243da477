"""Run the doctest examples in every library module, so documented examples stay true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import magister

SKIP_PREFIXES = ("magister.examples",)  # trainers: exercised by their own tests
#: The top-level modules of the optional extras (pyproject.toml): a library module that needs one of these
#: may be skipped where it is not installed; any other ImportError is a broken import and fails.
OPTIONAL = {"ray", "jax", "jaxlib", "optax", "torch", "scipy", "sklearn", "matplotlib", "tensorboardX",
            "tensorboard", "stable_baselines3", "sb3_contrib", "tqdm", "minigrid", "jaxued", "gymnax"}


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(magister.__path__, prefix="magister."):
        if info.name.startswith(SKIP_PREFIXES):
            continue
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("module_name", _modules())
def test_doctests(module_name):
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in OPTIONAL:
            raise  # a broken import inside magister, or a missing core dependency
        pytest.skip(f"{module_name}: optional dependency {exc.name} missing ({exc})")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {module_name}"
