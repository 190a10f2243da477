#!/usr/bin/env bash
# Build the SEPARATE virtualenv for the NetHack / MiniHack recipe (magister.examples.nethack): nle and
# minihack next to magister. They never go into the development environment: nle pins gymnasium==1.2.0.
#
# Usage:  bash benchmarks/_nethack_env.sh [VENV_DIR] [MAGISTER_CHECKOUT]   (default: .venvs/nethack, .)
# Then:   VENV_DIR/bin/python -m magister.examples.nethack.train --help
#
# What the packages pull in (read from their METADATA before installing):
#   nle 1.3.0        prebuilt manylinux wheel for CPython 3.10-3.13 (no compiler, no cmake needed); needs
#                    pybind11 and numpy, and pins gymnasium==1.2.0 (magister accepts any gymnasium >= 1.0).
#   minihack 1.0.2   an sdist of pure Python: numpy, gymnasium, setuptools and nle (any version); its des-file
#                    levels are compiled by nle's own bundled compiler at run time. It imports
#                    pkg_resources, which setuptools 81 removed: setuptools<81 is pinned here.
# Order matters: torch goes in first (the CPU build the configured index offers) and every later install is
# constrained to it, so nothing can pull another (CUDA, multi-GB) build.
set -euo pipefail

VENV="${1:-.venvs/nethack}"
CHECKOUT="${2:-.}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
printf 'torch==%s\nnle==1.3.0\ngymnasium==1.2.0\nsetuptools<81\n' "$TORCH_VERSION" >"$CONSTRAINTS"

# 1. torch first, the CPU wheel.
"${PIP[@]}" install "torch==${TORCH_VERSION}"
# 2. NetHack and MiniHack.
"${PIP[@]}" install -c "$CONSTRAINTS" "setuptools<81" "nle==1.3.0" "minihack==1.0.2"
# 3. magister editable from the checkout (core only: gymnasium stays nle's pin), and the recipe's tools.
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$CHECKOUT" tqdm tensorboard "scipy>=1.15"

# Check: imports, nle's seeding API, a MiniHack level builds and steps, torch is still the one of step 1.
"$VENV/bin/python" - "$TORCH_VERSION" <<'PYEOF'
import sys
from importlib.metadata import version

import gymnasium as gym
import minihack  # noqa: F401  (registers the MiniHack-* ids)
import nle  # noqa: F401  (registers the NetHack* ids)
import torch

import magister  # noqa: F401

want = sys.argv[1]
if not torch.__version__.startswith(want):
    raise SystemExit(f"torch was replaced: {torch.__version__} (expected {want})")
env = gym.make("NetHackScore-v0")
env.unwrapped.seed(7, 8, reseed=False)
env.reset()
if env.unwrapped.get_seeds()[:2] != (7, 8):
    raise SystemExit(f"nle did not keep the seeds it was given: {env.unwrapped.get_seeds()}")
env.close()
env = gym.make("MiniHack-Room-5x5-v0")
env.reset(seed=0)
env.step(env.action_space.sample())
env.close()
print(f"nethack venv ready: nle {version('nle')}, minihack {version('minihack')}, "
      f"gymnasium {version('gymnasium')}, torch {torch.__version__}, magister {version('magister')}")
PYEOF
