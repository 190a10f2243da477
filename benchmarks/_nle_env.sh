#!/usr/bin/env bash
# Build the SEPARATE virtualenv for benchmarks/sync_overhead.py: NetHack (nle), the reference library
# syllabus-rl 0.7 and Ray, next to magister. None of these go into the development environment.
#
# Usage:  bash benchmarks/_nle_env.sh [VENV_DIR]        (default: .venvs/nle)
# Then:   VENV_DIR/bin/python benchmarks/sync_overhead.py [--quick]
#
# What the packages pull in (read from their wheel METADATA before installing):
#   nle 1.3.0         prebuilt manylinux wheel for CPython 3.11 (no compiler needed); needs pybind11, numpy
#                     and pins gymnasium==1.2.0 (magister accepts any gymnasium >= 1.0).
#   syllabus-rl 0.7   gymnasium, numpy, torch>=2.0.1, pettingzoo, joblib, ray; it imports matplotlib (in its
#                     Curriculum base class) and scipy without declaring them, so both are installed here.
# Order matters: torch goes in first, the CPU build (the wheel directory / index configured for pip decides
# which file that is), and every later install is constrained to that torch version, so syllabus-rl's
# "torch>=2.0.1" can never pull another (CUDA, multi-GB) build.
set -euo pipefail

VENV="${1:-.venvs/nle}"
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
# 3. NetHack, the reference library with the two packages it imports without declaring them, and Ray.
"${PIP[@]}" install -c "$CONSTRAINTS" nle "syllabus-rl==0.7" matplotlib scipy ray

# Check: everything imports, NetHackScore steps with dict observations, torch is still the one of step 1.
cat >"$CHECK" <<'PYEOF'
import sys
import warnings
from importlib.metadata import version

import gymnasium as gym
import nle  # noqa: F401  (registers NetHackScore-v0)
import ray  # noqa: F401
import torch

import magister  # noqa: F401

warnings.simplefilter("ignore")
import syllabus.core  # noqa: E402,F401

want = sys.argv[1]
if not torch.__version__.startswith(want):
    raise SystemExit(f"torch was replaced: {torch.__version__} (expected {want})")
env = gym.make("NetHackScore-v0", max_episode_steps=200)
obs, _ = env.reset(seed=0)
if not isinstance(obs, dict) or len(obs) < 5:
    raise SystemExit(f"expected NLE's dict observation, got {type(obs).__name__}")
env.step(env.action_space.sample())
env.close()
print(
    f"nle benchmark venv ready: nle {version('nle')}, syllabus-rl {version('syllabus-rl')}, "
    f"ray {version('ray')}, gymnasium {version('gymnasium')}, torch {torch.__version__}, "
    f"magister {version('magister')}"
)
PYEOF
"$VENV/bin/python" "$CHECK" "$TORCH_VERSION"
