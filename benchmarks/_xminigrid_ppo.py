"""Baseline for benchmarks/jax_minigrid_rm.py: XLand-MiniGrid's DoorKey-8x8, env-only and a minimal PPO.

Runs in the separate venv built by ``benchmarks/_xminigrid_env.sh`` (xminigrid is not a magister
dependency); ``jax_minigrid_rm.py`` calls it through a subprocess and reads the JSON line it prints.

* ``env``: a jitted ``lax.scan`` of ``--steps`` steps of ``--envs`` vmapped envs with uniform random actions
  (xminigrid's ``GymAutoResetWrapper``, observations included).
* ``ppo``: a minimal feed-forward PPO (Schulman et al. 2017, clipped surrogate, GAE) written here in plain
  JAX + optax: tile and colour embeddings of the 7x7 view, two dense layers of 64, actor and critic heads;
  one jitted update = rollout of ``--steps`` x ``--envs``, GAE, ``--epochs`` epochs of ``--minibatches``
  minibatches. The same settings as magister's trainer (gamma 0.99, lambda 0.9, lr 3e-4, clip 0.2, value
  coefficient 0.5, entropy 0.01, gradient norm 0.5).

Both print ``{"mode": ..., "steps_per_s": ..., "compile_s": ..., "backend": ..., "device": ...}`` (compile =
first call, excluded from the rate; the rate is the best of ``--repeats`` timed blocks).

Usage: ``.venvs/xminigrid/bin/python benchmarks/_xminigrid_ppo.py ppo --envs 128 --steps 64``
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xminigrid
from xminigrid.wrappers import GymAutoResetWrapper

ENV_ID = "MiniGrid-DoorKey-8x8"


def make_env() -> tuple:
    env, params = xminigrid.make(ENV_ID)
    return GymAutoResetWrapper(env), params


def env_only(envs: int, steps: int) -> tuple:
    env, params = make_env()
    n_act = env.num_actions(params)

    @jax.jit
    def run(key: jax.Array) -> jax.Array:
        k0, k1 = jax.random.split(key)
        ts = jax.vmap(env.reset, in_axes=(None, 0))(params, jax.random.split(k0, envs))

        def one(ts, k):
            a = jax.random.randint(k, (envs,), 0, n_act)
            ts = jax.vmap(env.step, in_axes=(None, 0, 0))(params, ts, a)
            return ts, ts.reward.sum() + ts.observation.sum()

        _, r = jax.lax.scan(one, ts, jax.random.split(k1, steps))
        return r.sum()

    return run, envs * steps


def _dense(key: jax.Array, n_in: int, n_out: int, scale: float = 1.0) -> dict:
    return {"w": jax.random.normal(key, (n_in, n_out)) * scale * np.sqrt(2.0 / n_in), "b": jnp.zeros(n_out)}


def ppo(envs: int, steps: int, epochs: int, minibatches: int) -> tuple:
    env, params = make_env()
    n_act = env.num_actions(params)
    v = params.view_size
    emb, hid = 8, 64
    ks = jax.random.split(jax.random.PRNGKey(0), 8)
    net = {"tile": jax.random.normal(ks[0], (16, emb)) * 0.5,
           "col": jax.random.normal(ks[1], (16, emb)) * 0.5,
           "l1": _dense(ks[2], v * v * 2 * emb, hid), "l2": _dense(ks[3], hid, hid),
           "pi": _dense(ks[4], hid, n_act, 0.01), "vf": _dense(ks[5], hid, 1)}
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-4, eps=1e-5))
    gamma, lam, clip, vf_coef, ent_coef = 0.99, 0.9, 0.2, 0.5, 0.01
    mb = envs * steps // minibatches

    def apply(p: dict, obs: jax.Array) -> tuple:
        x = jnp.concatenate([p["tile"][obs[..., 0]], p["col"][obs[..., 1]]], -1)
        x = x.reshape(x.shape[:-3] + (-1,))
        x = jax.nn.relu(x @ p["l1"]["w"] + p["l1"]["b"])
        x = jax.nn.relu(x @ p["l2"]["w"] + p["l2"]["b"])
        return x @ p["pi"]["w"] + p["pi"]["b"], (x @ p["vf"]["w"] + p["vf"]["b"])[..., 0]

    def loss_fn(p: dict, obs, act, old_logp, old_v, adv, tgt) -> jax.Array:
        logits, val = apply(p, obs)
        lp_all = jax.nn.log_softmax(logits)
        lp = jnp.take_along_axis(lp_all, act[:, None], -1)[:, 0]
        ratio = jnp.exp(lp - old_logp)
        a = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - clip, 1 + clip) * a).mean()
        v_clip = old_v + jnp.clip(val - old_v, -clip, clip)
        vl = 0.5 * jnp.maximum((val - tgt) ** 2, (v_clip - tgt) ** 2).mean()
        ent = -(jnp.exp(lp_all) * lp_all).sum(-1).mean()
        return pg + vf_coef * vl - ent_coef * ent

    @jax.jit
    def update(carry: tuple) -> tuple:
        p, o, ts, key = carry
        key, k_roll, k_ppo = jax.random.split(key, 3)

        def one(ts, k):
            logits, val = apply(p, ts.observation)
            a = jax.random.categorical(k, logits)
            lp = jax.nn.log_softmax(logits)[jnp.arange(envs), a]
            ts2 = jax.vmap(env.step, in_axes=(None, 0, 0))(params, ts, a)
            return ts2, (ts.observation, a, lp, val, ts2.reward, ts2.last())

        ts, (obs, act, logp, val, rew, done) = jax.lax.scan(one, ts, jax.random.split(k_roll, steps))
        _, last_v = apply(p, ts.observation)

        def back(c, x):
            adv_next, v_next = c
            r, vv, d = x
            nd = 1.0 - d.astype(jnp.float32)
            adv = r + gamma * v_next * nd - vv + gamma * lam * nd * adv_next
            return (adv, vv), adv

        _, adv = jax.lax.scan(back, (jnp.zeros(envs), last_v), (rew, val, done), reverse=True)
        data = tuple(x.reshape((envs * steps,) + x.shape[2:]) for x in (obs, act, logp, val, adv, adv + val))

        def epoch(c, k):
            perm = jax.random.permutation(k, envs * steps).reshape(minibatches, mb)

            def minibatch(c, idx):
                p, o = c
                g = jax.grad(loss_fn)(p, *(x[idx] for x in data))
                u, o = opt.update(g, o, p)
                return (optax.apply_updates(p, u), o), None

            return jax.lax.scan(minibatch, c, perm)[0], None

        (p, o), _ = jax.lax.scan(epoch, (p, o), jax.random.split(k_ppo, epochs))
        return p, o, ts, key

    ts = jax.vmap(env.reset, in_axes=(None, 0))(params, jax.random.split(jax.random.PRNGKey(1), envs))
    state = [(net, opt.init(net), ts, jax.random.PRNGKey(2))]

    def run(_key: jax.Array) -> jax.Array:
        state[0] = update(state[0])
        return state[0][0]["pi"]["w"]

    return run, envs * steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("env", "ppo"))
    ap.add_argument("--envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--calls", type=int, default=5, help="calls per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks (best is reported)")
    a = ap.parse_args()
    if a.mode == "env":
        run, per_call = env_only(a.envs, a.steps)
    else:
        run, per_call = ppo(a.envs, a.steps, a.epochs, a.minibatches)
    t = time.perf_counter()
    jax.block_until_ready(run(jax.random.PRNGKey(0)))
    compile_s = time.perf_counter() - t
    best = 0.0
    for r in range(a.repeats):
        t = time.perf_counter()
        for i in range(a.calls):
            jax.block_until_ready(run(jax.random.PRNGKey(1 + r * a.calls + i)))
        best = max(best, a.calls * per_call / (time.perf_counter() - t))
    print(json.dumps({"mode": a.mode, "env": ENV_ID, "envs": a.envs, "steps": a.steps, "steps_per_s": best,
                      "compile_s": compile_s, "backend": jax.default_backend(),
                      "device": jax.devices()[0].device_kind}))


if __name__ == "__main__":
    main()
