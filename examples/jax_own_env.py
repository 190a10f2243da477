"""PLR⊥ from :mod:`magister.curricula.jax` around your own JAX environment, with no magister env code.

Everything a curriculum needs from your side is three things: a *level* (any pytree of arrays), a
generator of levels, and a per-level score from your rollout. Here the environment is a tiny one written
below (a corridor of ``WIDTH`` cells; a level is a start and a goal cell; actions left/right; reward 1 at
the goal), the agent is a tabular actor-critic, and the curriculum is Robust PLR (PLR⊥) with the library
defaults but the buffer: each update samples a batch of levels (:func:`~magister.curricula.jax.plr_sample`),
rolls them out, scores them by positive value loss (:func:`~magister.curricula.jax.rollout_scores`),
feeds the scores back (:func:`~magister.curricula.jax.plr_update`) and takes gradients on the levels PLR⊥
marks ``train`` (the replays). One ``jax.jit`` covers the whole update.

The same loop drives an environment library (xminigrid, gymnax, navix, Craftax, ...): make its level the
pytree you buffer (for xminigrid, the reset key its layout is generated from; see the JAX guide of the
documentation).

Run: ``python -m magister.examples.jax_own_env --updates 300``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from magister.curricula import jax as J

logger = logging.getLogger(__name__)

WIDTH = 9  # corridor cells
MAX_STEPS = 2 * WIDTH


# ---------------------------------------------------------------------------------------------------
# Your environment: pure functions of arrays
# ---------------------------------------------------------------------------------------------------
class Level(NamedTuple):
    start: jax.Array  # i32[]
    goal: jax.Array  # i32[]


class EnvState(NamedTuple):
    pos: jax.Array
    t: jax.Array
    level: Level


def sample_level(key: jax.Array) -> Level:
    """A uniform level: start anywhere, goal any other cell."""
    k1, k2 = jax.random.split(key)
    start = jax.random.randint(k1, (), 0, WIDTH)
    goal = (start + jax.random.randint(k2, (), 1, WIDTH)) % WIDTH
    return Level(start.astype(jnp.int32), goal.astype(jnp.int32))


def reset(level: Level) -> EnvState:
    return EnvState(level.start, jnp.int32(0), level)


def observe(s: EnvState) -> jax.Array:
    return s.pos * WIDTH + s.level.goal  # a table index


def step(s: EnvState, action: jax.Array) -> tuple[EnvState, jax.Array, jax.Array]:
    """Move left (0) or right (1); reward 1 at the goal; the episode restarts at the level's start."""
    pos = jnp.clip(s.pos + 2 * action - 1, 0, WIDTH - 1)
    success = pos == s.level.goal
    done = success | (s.t + 1 >= MAX_STEPS)
    nxt = EnvState(jnp.where(done, s.level.start, pos), jnp.where(done, 0, s.t + 1), s.level)
    return nxt, success.astype(jnp.float32), done


# ---------------------------------------------------------------------------------------------------
# A tabular actor-critic
# ---------------------------------------------------------------------------------------------------
class Traj(NamedTuple):
    obs: jax.Array  # [T, B]
    action: jax.Array
    reward: jax.Array
    done: jax.Array
    value: jax.Array


def init_params() -> dict[str, jax.Array]:
    n = WIDTH * WIDTH
    return {"pi": jnp.zeros((n, 2)), "v": jnp.zeros(n)}


def rollout(
    params: dict[str, jax.Array], levels: Level, key: jax.Array, steps: int
) -> tuple[Traj, jax.Array]:
    def body(s: EnvState, k: jax.Array) -> tuple[EnvState, Traj]:
        o = observe(s)
        a = jax.random.categorical(k, params["pi"][o])
        s2, r, d = jax.vmap(step)(s, a)
        return s2, Traj(o, a, r, d, params["v"][o])
    last, traj = jax.lax.scan(body, jax.vmap(reset)(levels), jax.random.split(key, steps))
    return traj, params["v"][observe(last)]


def gae(traj: Traj, last_value: jax.Array, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    def body(carry: tuple, x: tuple) -> tuple[tuple, jax.Array]:
        adv, nv = carry
        r, d, v = x
        delta = r + gamma * nv * (1.0 - d) - v
        adv = delta + gamma * lam * (1.0 - d) * adv
        return (adv, v), adv
    _, adv = jax.lax.scan(body, (jnp.zeros_like(last_value), last_value),
                          (traj.reward, traj.done.astype(jnp.float32), traj.value), reverse=True)
    return adv, adv + traj.value


def loss_fn(params: dict[str, jax.Array], traj: Traj, adv: jax.Array, targets: jax.Array,
            train: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(params["pi"][traj.obs])
    logp_a = jnp.take_along_axis(logp, traj.action[..., None], -1)[..., 0]
    v = params["v"][traj.obs]
    w = train[None, :].astype(jnp.float32)  # PLR⊥: gradients from the train-flagged levels only
    per_step = -logp_a * jax.lax.stop_gradient(adv) + 0.5 * (v - targets) ** 2
    return (per_step * w).sum() / jnp.maximum(w.sum() * traj.obs.shape[0], 1.0)


# ---------------------------------------------------------------------------------------------------
# The training step: generator -> plr_sample -> rollout -> scores -> plr_update -> gradients
# ---------------------------------------------------------------------------------------------------
class TrainState(NamedTuple):
    params: dict[str, jax.Array]
    buffer: J.LevelBuffer
    key: jax.Array


def make_update(cfg: J.PLRConfig, num_envs: int, steps: int, lr: float):
    @jax.jit
    def update(ts: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        key, k_new, k_cur, k_roll = jax.random.split(ts.key, 4)
        new = jax.vmap(sample_level)(jax.random.split(k_new, num_envs))
        buffer, smp = J.plr_sample(k_cur, ts.buffer, new, cfg)
        traj, last_v = rollout(ts.params, smp.levels, k_roll, steps)
        adv, targets = gae(traj, last_v, cfg.gamma, cfg.gae_lambda)
        scores = J.rollout_scores(cfg.score, traj.value, adv, traj.reward.max(0), traj.reward.sum(0),
                                  traj.done.sum(0))
        buffer = J.plr_update(buffer, smp.levels, J.hash_levels(smp.levels), scores, traj.reward.max(0))
        grads = jax.grad(loss_fn)(ts.params, traj, adv, targets, smp.train)
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, ts.params, grads)
        metrics = {"replay_fraction": smp.replay.mean(), "train_fraction": smp.train.mean(),
                   "score_mean": scores.mean(), "buffer_size": buffer.size}
        return TrainState(params, buffer, key), metrics
    return update


def all_levels() -> Level:
    pairs = [(s, g) for s in range(WIDTH) for g in range(WIDTH) if s != g]
    return Level(jnp.array([p[0] for p in pairs], jnp.int32), jnp.array([p[1] for p in pairs], jnp.int32))


@jax.jit
def greedy_success(params: dict[str, jax.Array]) -> jax.Array:
    """Fraction of all levels the greedy policy solves within ``MAX_STEPS``."""
    levels = all_levels()

    def body(carry: tuple, _: None) -> tuple[tuple, None]:
        s, solved = carry
        s2, r, _d = jax.vmap(step)(s, jnp.argmax(params["pi"][observe(s)], -1))
        return (s2, solved | (r > 0)), None
    init = (jax.vmap(reset)(levels), jnp.zeros(levels.start.shape[0], bool))
    (_, solved), _ = jax.lax.scan(body, init, None, length=MAX_STEPS - 1)
    return solved.mean()


def train(updates: int = 300, num_envs: int = 32, steps: int = 32, lr: float = 1.0, buffer_size: int = 256,
          seed: int = 0) -> tuple[TrainState, list[dict[str, float]]]:
    """PLR⊥ (``RobustPLRConfig`` defaults, positive value loss, a small buffer) on the corridor."""
    cfg = J.RobustPLRConfig(buffer_size=buffer_size, score="positive_value_loss")
    ts = TrainState(init_params(), J.init_buffer(sample_level(jax.random.PRNGKey(0)), cfg.buffer_size),
                    jax.random.PRNGKey(seed))
    update = make_update(cfg, num_envs, steps, lr)
    history = []
    for i in range(updates):
        ts, m = update(ts)
        if (i + 1) % max(1, updates // 10) == 0 or i + 1 == updates:
            row = {k: float(v) for k, v in m.items()} | {"update": i + 1,
                                                         "greedy_success": float(greedy_success(ts.params))}
            history.append(row)
            logger.info("%s", " ".join(f"{k}={v:.3g}" for k, v in row.items()))
    return ts, history


def main(argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.jax_own_env", description=__doc__,
                                 epilog="Needs the 'jax' extra: pip install 'magister[jax]'.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--num-envs", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _, history = train(a.updates, a.num_envs, seed=a.seed)
    return history


if __name__ == "__main__":
    main()
