#!/usr/bin/env bash
# Build the SEPARATE virtualenv of the PufferLib recipe (magister.examples.pufferlib): pufferlib-core 3.0.23
# next to the CPU build of torch 2.13.0 and magister (core only, editable from the checkout).
#
# Usage:  bash benchmarks/_pufferlib_env.sh [VENV_DIR] [MAGISTER_CHECKOUT]   (default: .venvs/pufferlib, .)
# Then:   VENV_DIR/bin/python -m magister.examples.pufferlib.train --help
#
# pufferlib-core 3.0.23 declares (read from its wheel METADATA before installing): numpy, gymnasium, psutil,
# torch==2.9.0, nvidia-ml-py, rich, rich-argparse, setuptools, pyro-ppl. Its exact torch pin would make pip
# download torch 2.9.0 and its CUDA packages (several GB). So: torch 2.13.0 goes in first (the CPU wheel);
# pufferlib-core goes in with --no-deps; then its other requirements, read from the installed METADATA
# (torch left out), under a constraints file that holds torch at 2.13.0, so that nothing later (pyro-ppl
# needs torch too) can replace it. The vector module (Serial, Multiprocessing) and the emulation layer do
# not use torch; the compiled extension pufferlib._C is optional in pufferlib's own __init__.
set -euo pipefail

VENV="${1:-.venvs/pufferlib}"
CHECKOUT="${2:-.}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PUFFER_VERSION="${PUFFER_VERSION:-3.0.23}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}" >"$CONSTRAINTS"

# 1. torch first: the local CPU wheel.
"${PIP[@]}" install "torch==${TORCH_VERSION}" packaging
# 2. pufferlib-core without its declared dependencies (its torch==2.9.0 pin).
"${PIP[@]}" install --no-deps "pufferlib-core==${PUFFER_VERSION}"
# 3. its other requirements, as its METADATA names them, torch excluded and held by the constraints file.
mapfile -t REQS < <("$VENV/bin/python" - <<'PYEOF'
from importlib.metadata import requires

from packaging.requirements import Requirement

for line in requires("pufferlib-core") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's requirement
    if req.name.lower() != "torch":
        print(str(req))
PYEOF
)
echo "pufferlib-core's requirements besides torch: ${REQS[*]}"
"${PIP[@]}" install -c "$CONSTRAINTS" "${REQS[@]}"
# 4. magister (core only), editable; the recipe's MiniGrid, progress bar and TensorBoard writer; scipy for
# magister.evaluation.
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$CHECKOUT" minigrid tqdm tensorboardX "scipy>=1.15"

# Check: torch is still step 1's, pufferlib's vector module imports and steps a Gymnasium env under Serial
# and Multiprocessing.
"$VENV/bin/python" - "$TORCH_VERSION" <<'PYEOF'
import sys
from importlib.metadata import version

import gymnasium as gym
import numpy as np
import torch

import minigrid  # noqa: F401
import magister  # noqa: F401
import pufferlib
import pufferlib.emulation
import pufferlib.vector

want = sys.argv[1]
if not torch.__version__.startswith(want):
    raise SystemExit(f"torch was replaced: {torch.__version__} (expected {want})")


def creator(buf=None, seed=0):
    return pufferlib.emulation.GymnasiumPufferEnv(env=gym.make("CartPole-v1"), buf=buf, seed=seed)


if __name__ == "__main__":
    for backend in (pufferlib.vector.Serial, pufferlib.vector.Multiprocessing):
        extra = {"num_workers": 2, "batch_size": 2, "overwork": True} if backend is not pufferlib.vector.Serial else {}
        vec = pufferlib.vector.make(creator, backend=backend, num_envs=2, **extra)
        vec.async_reset(0)
        obs = vec.recv()[0]
        for _ in range(5):
            vec.send(np.zeros(2, dtype=np.int64))
            obs = vec.recv()[0]
        vec.close()
        assert obs.shape[0] == 2, obs.shape
    print(f"pufferlib venv ready: pufferlib-core {version('pufferlib-core')}, torch {torch.__version__}, "
          f"gymnasium {version('gymnasium')}, numpy {np.__version__}")
PYEOF
