"""Packaging: the repository root is the package, and every subpackage ships in the wheel and imports."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_SHIPPED = {"tests", "benchmarks", "build", "dist"}


def _declared_packages() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["tool"]["setuptools"]["packages"])


def _packages_on_disk() -> set[str]:
    found = {"magister"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        parts = rel.parts
        if not parts or parts[0] in NOT_SHIPPED or any(p.startswith(".") for p in parts):
            continue
        found.add(".".join(("magister",) + parts))
    return found


def test_pyproject_lists_every_subpackage_and_nothing_else():
    declared = set(_declared_packages())
    on_disk = _packages_on_disk()
    assert declared == on_disk, (
        f"missing from pyproject: {sorted(on_disk - declared)}; "
        f"listed but absent: {sorted(declared - on_disk)}"
    )
    for required in ("task_spaces", "curricula", "sync", "env_wrappers", "integrations", "examples"):
        assert f"magister.{required}" in declared


def test_tests_and_benchmarks_are_not_packages():
    assert not (ROOT / "tests" / "__init__.py").exists()
    assert "magister.tests" not in _declared_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
         "--disable-pip-version-check", "-w", str(out)],
        check=True,
        timeout=300,
    )
    wheels = list(out.glob("magister-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_every_subpackage_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for pkg in _declared_packages():
        init = pkg.replace(".", "/") + "/__init__.py"
        assert init in names, f"{init} missing from the wheel"
    assert not any(n.startswith("magister/tests/") or n.startswith("tests/") for n in names)
    assert not any(n.startswith("magister/benchmarks/") for n in names)
    assert "magister/py.typed" in names


def test_wheel_imports_every_subpackage(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--disable-pip-version-check",
         "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    code = (
        "import importlib, magister; "
        f"assert magister.__file__.startswith({str(target)!r}), magister.__file__; "
        f"[importlib.import_module(p) for p in {_declared_packages()!r}]; "
        "[getattr(magister, n) for n in magister.__all__]; print('ok')"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("ok")


def test_public_names_resolve():
    import magister

    for name in magister.__all__:
        assert hasattr(magister, name), name
