#!/usr/bin/env bash
# Build the SEPARATE virtualenv for the xminigrid baseline of benchmarks/jax_minigrid_rm.py: XLand-MiniGrid
# (xminigrid 0.9.3) with the same jax/jaxlib (0.10.2) and optax as magister's development environment, so
# both sides of the comparison run the same XLA. xminigrid never goes into the development environment.
#
# Usage:  bash benchmarks/_xminigrid_env.sh [VENV_DIR] [MAGISTER_CHECKOUT]   (default: .venvs/xminigrid, .)
# Then:   python benchmarks/jax_minigrid_rm.py --xmg-python VENV_DIR/bin/python
# magister (core only) is installed editable from the checkout too, so that the JAX guide's xminigrid
# snippet runs there (tests/test_venv_suites.py runs it).
#
# What xminigrid 0.9.3 pulls in (read from its wheel METADATA before installing): jax>=0.4.27,
# jaxlib>=0.4.27, flax>=0.8.0, chex, rich, tqdm, imageio, imageio-ffmpeg. jax/jaxlib/optax are pinned by a
# constraints file so that no later install can replace them.
set -euo pipefail

VENV="${1:-.venvs/xminigrid}"
CHECKOUT="${2:-.}"
JAX_VERSION="${JAX_VERSION:-0.10.2}"
OPTAX_VERSION="${OPTAX_VERSION:-0.2.8}"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
printf 'jax==%s\njaxlib==%s\noptax==%s\n' "$JAX_VERSION" "$JAX_VERSION" "$OPTAX_VERSION" >"$CONSTRAINTS"

"${PIP[@]}" install -c "$CONSTRAINTS" "jax==${JAX_VERSION}" "jaxlib==${JAX_VERSION}" "optax==${OPTAX_VERSION}"
"${PIP[@]}" install -c "$CONSTRAINTS" "xminigrid==0.9.3"
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$CHECKOUT"

"$VENV/bin/python" - "$JAX_VERSION" <<'PYEOF'
import sys
from importlib.metadata import version

import jax
import xminigrid

import magister.curricula.jax  # noqa: F401

want = sys.argv[1]
if jax.__version__ != want:
    raise SystemExit(f"jax was replaced: {jax.__version__} (expected {want})")
env, params = xminigrid.make("MiniGrid-DoorKey-8x8")
ts = jax.jit(env.reset)(params, jax.random.PRNGKey(0))
ts = jax.jit(env.step)(params, ts, 0)
print(f"xminigrid benchmark venv ready: xminigrid {version('xminigrid')}, jax {jax.__version__}, "
      f"flax {version('flax')}, optax {version('optax')}")
PYEOF
