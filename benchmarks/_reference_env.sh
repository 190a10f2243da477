#!/usr/bin/env bash
# Build the SEPARATE virtualenv in which benchmarks/curricula_speed.py compares magister with the
# reference library, syllabus-rl 0.7. The reference library is never installed into the development
# environment.
#
# Usage:  bash benchmarks/_reference_env.sh [VENV_DIR]        (default: .venvs/reference)
# Then:   VENV_DIR/bin/python benchmarks/curricula_speed.py
#
# Order matters: torch is installed first, as the CPU build (the index or wheel directory configured for
# pip decides which file that is), and every later install is constrained to that same torch version,
# so syllabus-rl's "torch>=2.0.1" can never pull another (CUDA, multi-GB) build. syllabus-rl 0.7 declares
# gymnasium, numpy, torch, pettingzoo, joblib and ray, and imports matplotlib and scipy without declaring
# them, so those two are installed explicitly. magister itself needs no extras here.
#
# NumPy is pinned to 1.24 (syllabus-rl's declared minimum): its Curriculum.sample tests
# `task_dist != []` on a numpy array, which NumPy >= 1.25 turns from a warning into a ValueError, so its
# LearningProgress and Learnability cannot sample at all with a newer NumPy. scipy < 1.14 and
# matplotlib < 3.10 are the last releases that support NumPy 1.24. Both libraries run on this same NumPy
# in the benchmark, so its ratios compare like with like.
set -euo pipefail

VENV="${1:-.venvs/reference}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

CONSTRAINTS="$(mktemp)"
CHECK="$(mktemp)"
trap 'rm -f "$CONSTRAINTS" "$CHECK"' EXIT
echo "torch==${TORCH_VERSION}" >"$CONSTRAINTS"

# 1. torch first, the CPU wheel.
"${PIP[@]}" install "torch==${TORCH_VERSION}"
# 2. magister (core only), editable, from this checkout.
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$REPO"
# 3. the reference library, the two packages it imports without declaring them, and NumPy 1.24.
"${PIP[@]}" install -c "$CONSTRAINTS" "syllabus-rl==0.7" "numpy==1.24.4" "scipy<1.14" "matplotlib<3.10"

# Check: both libraries import, the reference can sample, and torch is still the version of step 1.
cat >"$CHECK" <<'PYEOF'
import sys
import warnings
from importlib.metadata import version

import numpy as np
import torch

import magister  # noqa: F401

warnings.simplefilter("ignore")
from syllabus.curricula import OnlineLearningProgress  # noqa: E402
from syllabus.task_space import DiscreteTaskSpace  # noqa: E402

want = sys.argv[1]
if not torch.__version__.startswith(want):
    raise SystemExit(f"torch was replaced: {torch.__version__} (expected {want})")
OnlineLearningProgress(DiscreteTaskSpace(4), update_interval=25).sample(1)
print(f"benchmark venv ready: syllabus-rl {version('syllabus-rl')}, torch {torch.__version__}, "
      f"numpy {np.__version__}, magister {version('magister')}")
PYEOF
"$VENV/bin/python" "$CHECK" "$TORCH_VERSION"
