#!/usr/bin/env bash
# Build the SEPARATE virtualenv of the Procgen recipe (magister.examples.procgen): Procgen from the package
# index (`procgen-mirror` 0.10.7, a prebuilt CPython 3.11 wheel of openai/procgen 0.10.7), which needs
# numpy<2, gym<1.0 and gym3<1.0; shimmy for GymV21CompatibilityV0 (the old gym API as a Gymnasium env);
# torch (the CPU wheel) for the trainer. None of these go into the development environment.
#
# Usage:  bash benchmarks/_procgen_env.sh [VENV_DIR] [MAGISTER_CHECKOUT]   (default: .venvs/procgen, .)
# Then:   VENV_DIR/bin/python -m magister.examples.procgen.ppo_plr --help
#
# Versions checked together: procgen-mirror 0.10.7 + gym 0.26.2 + gym3 0.3.3 + numpy 1.26 + shimmy 2.0.1 +
# gymnasium 1.4 (shimmy 2.x is the line released for Gymnasium 1.x; older lines were not tried). Its
# GymV21CompatibilityV0 wraps any object with the old reset()/step() API, here gym3's ToGymEnv, and needs gym
# importable. Order matters: torch first, then everything else constrained to that torch and to numpy<2.
set -euo pipefail

VENV="${1:-.venvs/procgen}"
CHECKOUT="${2:-.}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

CONSTRAINTS="$(mktemp)"
CHECK="$(mktemp)"
trap 'rm -f "$CONSTRAINTS" "$CHECK"' EXIT
printf 'torch==%s\nnumpy<2\ngym<1.0\ngym3<1.0\n' "$TORCH_VERSION" >"$CONSTRAINTS"

# 1. torch first, the CPU wheel.
"${PIP[@]}" install "torch==${TORCH_VERSION}"
# 2. Procgen and its old-API stack, shimmy for Gymnasium.
"${PIP[@]}" install -c "$CONSTRAINTS" "procgen-mirror==0.10.7" "numpy<2" "gym<1.0" "gym3<1.0" "shimmy>=2,<3"
# 3. magister (core only), editable, and what the trainer and its evaluation use.
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$CHECKOUT" tqdm tensorboardX "scipy>=1.15"

# Check: everything imports, torch and numpy are the pinned ones, a Procgen level can be chosen by state.
cat >"$CHECK" <<'PYEOF'
import sys
from importlib.metadata import version

import numpy as np
import torch
from procgen import ProcgenGym3Env
from shimmy import GymV21CompatibilityV0  # noqa: F401

import magister  # noqa: F401

want = sys.argv[1]
if not torch.__version__.startswith(want):
    raise SystemExit(f"torch was replaced: {torch.__version__} (expected {want})")
if int(np.__version__.split(".")[0]) >= 2:
    raise SystemExit(f"numpy {np.__version__}: procgen's gym3 needs numpy<2")
env = ProcgenGym3Env(num=1, env_name="coinrun", distribution_mode="easy", num_threads=0)
helper = ProcgenGym3Env(num=1, env_name="coinrun", distribution_mode="easy", num_levels=1, start_level=7,
                        num_threads=0)
env.set_state(helper.get_state())
if env.get_info()[0]["level_seed"] != 7:
    raise SystemExit(f"set_state did not choose level 7: {env.get_info()[0]}")
print(f"procgen venv ready: procgen-mirror {version('procgen-mirror')}, gym {version('gym')}, "
      f"gym3 {version('gym3')}, shimmy {version('shimmy')}, gymnasium {version('gymnasium')}, "
      f"numpy {np.__version__}, torch {torch.__version__}")
PYEOF
# (gym 0.26 prints a four-line banner on import; the check's own output is its last line)
if ! out="$("$VENV/bin/python" "$CHECK" "$TORCH_VERSION" 2>&1)"; then
    echo "$out"
    exit 1
fi
echo "$out" | tail -n 1
