"""Craftax-Classic worlds as the curriculum's levels: a world seed, the world it generates, and ACCEL's edit.

Craftax-Classic (Matthews et al., "Craftax: A Lightning-Fast Benchmark for Open-Ended Reinforcement
Learning", ICML 2024; the ``craftax`` package) generates its world at reset from the PRNG key it is given:
``env.reset(key, params)`` is ``generate_world(key, ...)`` (terrain, ores, trees, lava, the player at the
centre of the 64 x 64 map) and the observation of that state. The same key gives the same world. So a
*level* here is

* ``seed``: the world seed; the world is the state ``env.reset(jax.random.PRNGKey(seed), params)``;
* ``map``: its block map, as generated from the seed, or as ACCEL's edits left it.

:func:`reset_to_world` starts an episode on a level: Craftax's own reset from the seed, with the level's
map in place of the generated one (for a generated level the two are the same map). Everything else of
the start state (the player, intrinsics, the in-game random stream) is the seed's.

The map is part of the level so that ACCEL (Parker-Holder et al. 2022) can edit worlds: :func:`edit_world`
swaps the blocks of two cells, one in the 16 x 16 square around the spawn point and one anywhere, never the
spawn cell itself; an edit keeps the number of blocks of each kind. (JaxUED's Craftax example edits the
full state of Craftax, not Classic, with swaps of the same kind; this is magister's own edit for Classic.)

Seeds: training worlds come from ``[0, num_levels)`` (a finite training set, as Procgen's levels) or, with
``num_levels=0``, from ``[0, 2^30)``; the held-out worlds are the seeds ``2^30, 2^30 + 1, ...``, never
drawn in training (:func:`heldout_worlds`).

Importing this module does not import craftax; :func:`require_craftax` does, and says how to install it.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

logger = logging.getLogger(__name__)

__all__ = ["CENTRE", "HELDOUT_BASE", "INSTALL_HINT", "World", "edit_world", "generate_worlds",
           "heldout_worlds", "make_env", "require_craftax", "reset_to_world", "world_of_seed"]

#: the first held-out seed; training seeds are below it
HELDOUT_BASE = 2**30
#: side of the square around the spawn point where an edit's first cell lies
CENTRE = 16

INSTALL_HINT = ("the Craftax recipe needs the craftax package (1.6.1; JAX): "
                "pip install \"magister[craftax]\" (or pip install craftax==1.6.1 beside the jax extra)")


class World(NamedTuple):
    """A level: the world seed and the block map of the world (the generated one, or an edit of it).

    Attributes:
        seed: ``i32[]``, the PRNG seed the world is generated from.
        map: ``u8[H, W]``, the block of every cell (Craftax's ``BlockType`` values).
    """

    seed: jax.Array
    map: jax.Array


def require_craftax() -> Any:
    """Import Craftax-Classic's symbolic env; :class:`ImportError` naming the extra when it is missing."""
    try:
        from craftax.craftax_classic.envs import craftax_symbolic_env
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} (import failed: {exc})") from exc
    return craftax_symbolic_env


def make_env(max_steps: int = 10_000) -> tuple[Any, Any]:
    """Craftax-Classic with symbolic observations and no auto-reset (the trainer restarts a level itself),
    its parameters with episodes cut at ``max_steps`` (Craftax's default: 10,000)."""
    mod = require_craftax()
    env = mod.CraftaxClassicSymbolicEnvNoAutoReset()
    return env, env.default_params.replace(max_timesteps=int(max_steps))


def world_of_seed(env: Any, params: Any, seed: jax.Array) -> World:
    """The level of a world seed: the seed and the map Craftax generates from it (traceable)."""
    seed = jnp.asarray(seed, jnp.int32)
    _, state = env.reset(jax.random.PRNGKey(seed), params)
    return World(seed, state.map.astype(jnp.uint8))


def generate_worlds(env: Any, params: Any, key: jax.Array, n: int, num_levels: int = 0) -> World:
    """``n`` new levels (``World`` with a leading axis): seeds uniform in ``[0, num_levels)``, or in
    ``[0, 2^30)`` when ``num_levels`` is 0, and their generated maps."""
    if num_levels < 0 or num_levels > HELDOUT_BASE:
        raise ValueError(f"num_levels must be in [0, 2^30] (0: unbounded), got {num_levels}")
    seeds = jax.random.randint(key, (n,), 0, num_levels or HELDOUT_BASE, dtype=jnp.int32)
    return jax.vmap(lambda s: world_of_seed(env, params, s))(seeds)


def heldout_worlds(env: Any, params: Any, n: int) -> World:
    """The ``n`` held-out levels: seeds ``2^30 .. 2^30 + n - 1`` (never training seeds)."""
    if n < 1:
        raise ValueError(f"need at least one held-out world, got {n}")
    seeds = HELDOUT_BASE + jnp.arange(n, dtype=jnp.int32)
    return jax.jit(jax.vmap(lambda s: world_of_seed(env, params, s)))(seeds)


def reset_to_world(env: Any, params: Any, world: World) -> tuple[jax.Array, Any]:
    """``(obs, state)`` at the start of an episode on ``world``: Craftax's reset from the world's seed with
    the world's map (traceable; vmap it over a batch)."""
    _, state = env.reset(jax.random.PRNGKey(world.seed), params)
    state = state.replace(map=world.map.astype(state.map.dtype))
    return env.get_obs(state), state


def edit_world(key: jax.Array, world: World) -> World:
    """One ACCEL edit: swap the blocks of a cell of the centre square and a cell of the whole map, neither
    the spawn cell (the centre of the map, where Craftax-Classic places the player)."""
    h, w = world.map.shape
    spawn_r, spawn_c = h // 2, w // 2
    lo_r, lo_c = spawn_r - CENTRE // 2, spawn_c - CENTRE // 2
    k1, k2 = jax.random.split(key)
    spawn_in_centre = (spawn_r - lo_r) * CENTRE + (spawn_c - lo_c)
    i = jax.random.randint(k1, (), 0, CENTRE * CENTRE - 1)
    i = i + (i >= spawn_in_centre)  # every centre cell but the spawn, uniformly
    r1, c1 = lo_r + i // CENTRE, lo_c + i % CENTRE
    j = jax.random.randint(k2, (), 0, h * w - 1)
    j = j + (j >= spawn_r * w + spawn_c)  # every cell but the spawn, uniformly
    r2, c2 = j // w, j % w
    a, b = world.map[r1, c1], world.map[r2, c2]
    return world._replace(map=world.map.at[r1, c1].set(b).at[r2, c2].set(a))
