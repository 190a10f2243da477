"""The virtualenvs of packages that pin old versions (procgen, NetHack, PufferLib, JaxUED ...), for tests.

Each such stack has a build script ``benchmarks/_<name>_env.sh VENV_DIR`` and lives in ``.venvs/<name>``
under the checkout (ignored by git). A test asks for its interpreter with :func:`venv_python`:

* the virtualenv exists and its script finished (the marker file ``.venvs/<name>/.built`` holds the
  script's hash): its python is returned;
* otherwise, on CI (``CI`` set) or with ``MAGISTER_BUILD_VENVS=1``, the script is run now (once per session;
  a failure fails the test, with the script's output); elsewhere the test is skipped, naming the command.

So ``.ci/run`` runs every virtualenv-bound test, and a developer's plain ``pytest`` stays fast until they
build the stacks they work on. ``python tests/venvs.py NAME ...`` builds stacks ahead of the tests, side by
side (what ``.ci/setup`` does on CI, so that no test's time limit includes a build).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".venvs"
BUILD_TIMEOUT = 1500  # seconds: a cold build downloads and unpacks several hundred MB


def _script(name: str) -> Path:
    return REPO / "benchmarks" / f"_{name}_env.sh"


def _digest(name: str) -> str:
    return hashlib.sha256(_script(name).read_bytes()).hexdigest()


def _built(name: str) -> bool:
    marker = VENVS / name / ".built"
    return marker.is_file() and marker.read_text().strip() == _digest(name) and (
        VENVS / name / "bin" / "python").exists()


def build(name: str) -> tuple[int, Path]:
    """Run ``benchmarks/_<name>_env.sh .venvs/<name>``; returns its exit code and its log (the marker is
    written when it succeeds)."""
    VENVS.mkdir(exist_ok=True)
    log = VENVS / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.run(["bash", str(_script(name)), str(VENVS / name), str(REPO)], cwd=REPO,
                              stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT,
                              env={**os.environ, "PYTHON": os.environ.get("MAGISTER_VENV_PYTHON", "python3")})
    if proc.returncode == 0:
        (VENVS / name / ".built").write_text(_digest(name))
    return proc.returncode, log


def venv_python(name: str) -> Path:
    """The python of the ``name`` stack's virtualenv, built first on CI; skips the test elsewhere."""
    python = VENVS / name / "bin" / "python"
    if _built(name):
        return python
    command = f"bash benchmarks/_{name}_env.sh .venvs/{name}"
    if not (os.environ.get("CI") or os.environ.get("MAGISTER_BUILD_VENVS") == "1"):
        pytest.skip(f"the {name} stack lives in a virtualenv of its own: build it with `{command}` "
                    "(CI builds it)")
    code, log = build(name)
    if code != 0:
        pytest.fail(f"`{command}` failed (exit {code}); the end of {log}:\n{log.read_text()[-4000:]}")
    return python


def run_in(name: str, args: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run ``python args...`` in the ``name`` virtualenv from the checkout; the output is captured and
    shown when the command fails."""
    python = venv_python(name)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **kwargs.pop("env", {})}
    env.pop("PYTHONPATH", None)  # the virtualenv has magister installed from this checkout
    proc = subprocess.run([str(python), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"{name} venv: `python {' '.join(args)}` exited {proc.returncode}:\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


__all__ = ["venv_python", "run_in", "build", "REPO", "VENVS"]


if __name__ == "__main__":
    import sys
    import time
    from concurrent.futures import ThreadPoolExecutor

    def timed(name: str) -> tuple[str, int, float]:
        if _built(name):
            return name, 0, 0.0
        t0 = time.monotonic()
        code, _ = build(name)
        return name, code, time.monotonic() - t0

    names = sys.argv[1:]
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:  # mostly downloads and unpacking
        results = list(pool.map(timed, names))
    for name, code, took in results:
        state = "already built" if took == 0.0 and code == 0 else "built" if code == 0 else f"FAILED ({code})"
        print(f"{name}: {state} in .venvs/{name} ({took:.0f} s; log .venvs/{name}.log)", flush=True)
        if code != 0:
            print((VENVS / f"{name}.log").read_text()[-4000:], flush=True)
    sys.exit(1 if any(code for _, code, _ in results) else 0)
