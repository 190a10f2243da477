#!/usr/bin/env bash
# Build the SEPARATE virtualenv for the maze trainer (magister.examples.maze) and its JaxUED parity arm:
# JaxUED 0.0.1 from the package index with the same jax/jaxlib (0.10.2) and optax as magister's
# development environment. jaxued never goes into the development environment or the core install:
# it requires gymnax, which pins gymnasium<1.4 and imports `six` without declaring it.
#
# Usage:  bash benchmarks/_jaxued_env.sh [VENV_DIR] [MAGISTER_CHECKOUT]   (default: .venvs/jaxued, .)
# Then:   VENV_DIR/bin/python -m magister.examples.maze.train --help   (or .canon, .eviction)
#
# What jaxued 0.0.1 pulls in (read from its wheel METADATA before installing): numpy, jax, flax, chex,
# gymnax. gymnax in turn pins gymnasium and needs `six`, installed here explicitly. magister itself is
# installed editable from the checkout WITHOUT extras except `jax` so that gymnasium stays gymnax's pick.
set -euo pipefail

VENV="${1:-.venvs/jaxued}"
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
"${PIP[@]}" install -c "$CONSTRAINTS" "jaxued==0.0.1" gymnax six
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$CHECKOUT" tqdm tensorboardX matplotlib "scipy>=1.15" pytest hypothesis

"$VENV/bin/python" - "$JAX_VERSION" <<'PYEOF'
import sys
from importlib.metadata import version

import jax
from jaxued.environments.maze import Maze, make_level_generator

want = sys.argv[1]
if jax.__version__ != want:
    raise SystemExit(f"jax was replaced: {jax.__version__} (expected {want})")
env = Maze(max_height=13, max_width=13, agent_view_size=5)
level = make_level_generator(13, 13, 60)(jax.random.PRNGKey(0))
obs, state = env.reset_to_level(jax.random.PRNGKey(1), level, env.default_params)
obs, state, reward, done, info = env.step(jax.random.PRNGKey(2), state, 0, env.default_params)
print(f"jaxued benchmark venv ready: jaxued {version('jaxued')}, gymnax {version('gymnax')}, "
      f"gymnasium {version('gymnasium')}, jax {jax.__version__}, flax {version('flax')}")
PYEOF
