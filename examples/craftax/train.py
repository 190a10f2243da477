"""PPO on Craftax-Classic with DR, PLR, PLR⊥ or ACCEL over world seeds, all on device.

Papers: Matthews et al. 2024 (Craftax), Jiang et al. 2021 (PLR; Robust PLR / PLR⊥), Parker-Holder et al.
2022 (ACCEL), Schulman et al. 2017 (PPO). The environment and its world generator are the ``craftax``
package's (:mod:`.worlds`); the curricula are :mod:`magister.curricula.jax`; PPO, GAE and checkpoints are
:mod:`magister.examples.jax_ppo`, shared with the maze and Minigrid×RM trainers.

One *update* (one curriculum round, jitted end to end):

1. new levels: ``num_envs`` world seeds and their generated worlds (:func:`.worlds.generate_worlds`);
2. the curriculum picks ``num_envs`` levels: a replay, a new world or an ACCEL child per env (PLR⊥ and
   ACCEL take gradients on replays only; PLR and DR on every level);
3. each env starts on its level with Craftax's own reset from the level's seed
   (:func:`.worlds.reset_to_world`) and plays ``outer_rollouts`` chunks of ``rollout_len`` steps, the
   level restarting whenever an episode ends; after each chunk, a PPO update on it;
4. the level's score over the whole outer rollout goes to the buffer (MaxMC by default: the best episode
   return seen on the level minus the values), and for ACCEL the replays are edited into next round's
   children (:func:`.worlds.edit_world`).

Settings are those of JaxUED's Craftax example (``craftax_plr.py``; it runs full Craftax, not Classic):
1024 envs, 64 chunks of 64 steps per level, PPO 5 epochs of 2 minibatches, ``lr 1e-4`` (JaxUED anneals
it linearly; constant here), ``gamma 0.995``, ``lambda 0.9``, clip 0.2, entropy 0.01, value 0.5, grad norm
1.0, a feed-forward tanh network of width 512 (Craftax's PPO); PLR buffer 4000, replay 0.5, staleness 0.3,
rank with temperature 1.0, fill 0.5 before replay, MaxMC; ACCEL 30 edits. The replay decision is made per
env, not per batch as in JaxUED (see :mod:`magister.curricula.jax.plr`).

Run ``python -m magister.examples.craftax.train --help``. Output (``--out``): ``metrics.jsonl``,
``eval.json`` (the held-out worlds' returns), TensorBoard events under ``tb/``, checkpoints
``ckpt_<update>.npz`` (every ``--ckpt-every`` updates and the last; ``--resume`` continues from one).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ...curricula import jax as L
from ...evaluation import evaluate_on_device
from .. import jax_ppo as P
from . import worlds as W

logger = logging.getLogger(__name__)

__all__ = ["METHODS", "CraftaxConfig", "Played", "init_state", "main", "make_eval", "make_update",
           "train", "train_functions"]

METHODS = ("dr", "plr", "robust_plr", "accel")
BUFFERED = ("plr", "robust_plr", "accel")


@dataclass(frozen=True)
class CraftaxConfig:
    """Settings; defaults are JaxUED's Craftax example's (see the module docstring)."""

    method: str = "robust_plr"
    num_envs: int = 1024
    rollout_len: int = 64
    outer_rollouts: int = 64
    updates: int = 100
    max_steps: int = 10_000
    num_levels: int = 0  # 0: every seed below 2^30; N: the training set of seeds 0 .. N-1
    epochs: int = 5
    minibatches: int = 2
    gamma: float = 0.995
    gae_lambda: float = 0.9
    lr: float = 1e-4
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 1.0
    hidden: int = 512
    buffer_size: int = 4000
    replay_prob: float = 0.5
    staleness_coef: float = 0.3
    temperature: float = 1.0
    min_fill_ratio: float = 0.5
    score: str = "max_mc"
    num_edits: int = 30
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("num_envs", "rollout_len", "outer_rollouts", "updates", "max_steps", "epochs",
                     "minibatches", "hidden", "num_edits"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_envs % self.minibatches:
            raise ValueError(f"num_envs ({self.num_envs}) must be divisible by minibatches "
                             f"({self.minibatches})")
        if not 0 <= self.num_levels <= W.HELDOUT_BASE:
            raise ValueError(f"num_levels must be in [0, 2^30] (0: unbounded), got {self.num_levels}")

    @property
    def curriculum(self) -> L.PLRConfig:
        """The :mod:`magister.curricula.jax` config of a buffered method."""
        common = {"buffer_size": self.buffer_size, "replay_prob": self.replay_prob,
                  "staleness_coef": self.staleness_coef, "temperature": self.temperature,
                  "min_fill_ratio": self.min_fill_ratio, "score": self.score, "gamma": self.gamma,
                  "gae_lambda": self.gae_lambda}
        if self.method == "plr":
            return L.PLRConfig(**common)
        if self.method == "accel":
            return L.ACCELConfig(min_edits=self.num_edits, max_edits=self.num_edits, **common)
        return L.RobustPLRConfig(**common)


# ---------------------------------------------------------------------------------------------------
# The network: separate tanh MLPs for the policy and the value (Craftax's PPO)
# ---------------------------------------------------------------------------------------------------
def net_init(key: jax.Array, obs_dim: int, n_actions: int, hidden: int) -> dict[str, Any]:
    k = jax.random.split(key, 8)
    dims = [obs_dim, hidden, hidden, hidden]
    return {"actor": [P.dense_init(k[i], dims[i], dims[i + 1]) for i in range(3)]
            + [P.dense_init(k[3], hidden, n_actions, 0.01)],
            "critic": [P.dense_init(k[4 + i], dims[i], dims[i + 1]) for i in range(3)]
            + [P.dense_init(k[7], hidden, 1, 0.1)]}


def net_apply(p: dict[str, Any], obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(logits, value)`` for observations with any leading dimensions."""
    a, v = obs, obs
    for layer in p["actor"][:-1]:
        a = jnp.tanh(P.dense(layer, a))
    for layer in p["critic"][:-1]:
        v = jnp.tanh(P.dense(layer, v))
    return P.dense(p["actor"][-1], a), P.dense(p["critic"][-1], v)[..., 0]


# ---------------------------------------------------------------------------------------------------
# Rollouts
# ---------------------------------------------------------------------------------------------------
class Traj(NamedTuple):
    obs: jax.Array
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array


def _restart(done: jax.Array, start: Any, now: Any) -> Any:
    """Per env, the start state where ``done``, else the current one (dtypes of the start state)."""
    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b).astype(a.dtype)
    return jax.tree_util.tree_map(pick, start, now)


def rollout(env: Any, env_params: Any, params: Any, start: tuple, carry: tuple, key: jax.Array,
            steps: int) -> tuple[tuple, Traj, jax.Array]:
    """``steps`` steps from ``carry = (obs, state)`` (``[B]``), each env back at its level's ``start``
    whenever an episode ends; returns the new carry, the time-major trajectory and the bootstrap value."""
    b = carry[0].shape[0]

    def one(c: tuple, k: jax.Array) -> tuple[tuple, Traj]:
        obs, s = c
        ka, ks = jax.random.split(k)
        logits, v = net_apply(params, obs)
        a = jax.random.categorical(ka, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(b), a]
        obs2, s2, r, done, _ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(ks, b), s, a, env_params)
        nxt = _restart(done, start, (obs2, s2))
        return nxt, Traj(obs, a.astype(jnp.int32), logp, v, r.astype(jnp.float32), done)

    carry, traj = jax.lax.scan(one, carry, jax.random.split(key, steps))
    return carry, traj, net_apply(params, carry[0])[1]


def best_return(rewards: jax.Array, dones: jax.Array) -> jax.Array:
    """Per env, the best return of the episodes of a time-major rollout, the unfinished last one counted
    with its return so far (``f32[B]``)."""
    def one(c: tuple, x: tuple) -> tuple[tuple, None]:
        running, best = c
        r, d = x
        running = running + r
        best = jnp.where(d, jnp.maximum(best, running), best)
        return (jnp.where(d, 0.0, running), best), None

    z = jnp.zeros(rewards.shape[1], jnp.float32)
    (running, best), _ = jax.lax.scan(one, (z, jnp.full_like(z, -jnp.inf)), (rewards, dones))
    return jnp.maximum(best, running)


def evaluate(env: Any, env_params: Any, params: Any, worlds: W.World, key: jax.Array) -> jax.Array:
    """Per world, the return of one episode (sampled actions) up to its end or ``max_timesteps``."""
    b = worlds.seed.shape[0]
    obs, s = jax.vmap(lambda w: W.reset_to_world(env, env_params, w))(worlds)

    def one(c: tuple, k: jax.Array) -> tuple[tuple, None]:
        obs, s, ended, total = c
        ka, ks = jax.random.split(k)
        a = jax.random.categorical(ka, net_apply(params, obs)[0])
        obs, s, r, done, _ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(ks, b), s, a, env_params)
        return (obs, s, ended | done, total + jnp.where(ended, 0.0, r)), None

    init = (obs, s, jnp.zeros(b, bool), jnp.zeros(b, jnp.float32))
    (_, _, _, total), _ = jax.lax.scan(one, init, jax.random.split(key, env_params.max_timesteps))
    return total


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
class CraftaxState(NamedTuple):
    params: dict[str, Any]
    opt_state: Any
    buffer: L.LevelBuffer
    children: W.World
    has_child: jax.Array
    child_gen: jax.Array
    child_edits: jax.Array
    key: jax.Array
    step: jax.Array


class Played(NamedTuple):
    """What one update played, for tests and logs: the levels the curriculum chose (``sample``), the
    block map each env's first episode started from (the environment's own state) and the scores sent
    back to the buffer."""

    sample: L.Sample
    start_map: jax.Array
    scores: jax.Array


def init_state(cfg: CraftaxConfig) -> CraftaxState:
    """Parameters, optimiser state, the empty buffer and the RNG of a run."""
    env, env_params = W.make_env(cfg.max_steps)
    key = jax.random.PRNGKey(cfg.seed)
    kp, key = jax.random.split(key)
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    params = net_init(kp, obs_dim, env.num_actions, cfg.hidden)
    opt_state = P.optimizer(cfg.lr, cfg.max_grad_norm).init(ravel_pytree(params)[0])
    example = jax.eval_shape(lambda: W.world_of_seed(env, env_params, jnp.int32(0)))
    example = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), example)
    buffer = L.init_buffer(example, cfg.buffer_size if cfg.method in BUFFERED else 1)
    b = cfg.num_envs
    children = jax.tree_util.tree_map(lambda a: jnp.zeros((b,) + a.shape, a.dtype), example)
    zi = jnp.zeros(b, jnp.int32)
    return CraftaxState(params, opt_state, buffer, children, jnp.zeros(b, bool), zi, zi, key, jnp.int32(0))


def _ppo(cfg: CraftaxConfig, key: jax.Array, params: Any, opt_state: Any, traj: Traj, adv: jax.Array,
         targets: jax.Array, train: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
    def loss_fn(p: Any, idx: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        sub = jax.tree_util.tree_map(lambda x: x[:, idx], traj)
        logits, values = net_apply(p, sub.obs)
        return P.ppo_loss(logits, values, sub.action, sub.logp, sub.value, adv[:, idx], targets[:, idx],
                          train[idx], cfg.clip, cfg.vf_coef, cfg.ent_coef)

    opt = P.optimizer(cfg.lr, cfg.max_grad_norm)
    return P.ppo_update(key, params, opt_state, opt, loss_fn, train, cfg.epochs, cfg.minibatches)


def make_update(cfg: CraftaxConfig) -> Any:
    """The jitted ``update(state) -> (state, metrics, played)`` of ``cfg.method``."""
    env, env_params = W.make_env(cfg.max_steps)
    b, m = cfg.num_envs, cfg.method
    cur = cfg.curriculum if m in BUFFERED else None

    def outer(params: Any, opt_state: Any, start: tuple, train: jax.Array, key: jax.Array) -> tuple:
        """``outer_rollouts`` chunks of ``rollout_len`` steps with a PPO update after each."""
        def chunk(c: tuple, k: jax.Array) -> tuple[tuple, tuple]:
            params, opt_state, carry = c
            k_roll, k_ppo = jax.random.split(k)
            carry, traj, last_v = rollout(env, env_params, params, start, carry, k_roll, cfg.rollout_len)
            adv, targets = P.gae(traj.reward, traj.value, traj.done, last_v, cfg.gamma, cfg.gae_lambda)
            params, opt_state, aux = _ppo(cfg, k_ppo, params, opt_state, traj, adv, targets, train)
            return (params, opt_state, carry), (traj.value, adv, traj.reward, traj.done, aux)

        (params, opt_state, _), out = jax.lax.scan(chunk, (params, opt_state, start),
                                                   jax.random.split(key, cfg.outer_rollouts))
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731  [O, T, B] -> [O * T, B]
        values, adv, rewards, dones = (flat(x) for x in out[:4])
        return params, opt_state, values, adv, rewards, dones, {k: v.mean() for k, v in out[4].items()}

    def update(ts: CraftaxState) -> tuple[CraftaxState, dict[str, jax.Array], Played]:
        key, k_new, k_cur, k_out, k_mut = jax.random.split(ts.key, 5)
        new = W.generate_worlds(env, env_params, k_new, b, cfg.num_levels)
        buffer = ts.buffer
        if m == "dr":
            smp = L.dr_sample(new)
        elif m == "accel":
            buffer, smp = L.accel_sample(k_cur, buffer, new, cur, ts.children, ts.has_child)
        else:
            buffer, smp = L.plr_sample(k_cur, buffer, new, cur)
        levels = smp.levels
        start = jax.vmap(lambda w: W.reset_to_world(env, env_params, w))(levels)
        params, opt_state, values, adv, rewards, dones, aux = outer(ts.params, ts.opt_state, start,
                                                                    smp.train, k_out)
        rets = L.episode_returns(rewards, dones)
        r_max = best_return(rewards, dones)
        ended = rets.count > 0
        metrics = {"return_mean": (rets.mean * ended).sum() / jnp.maximum(ended.sum(), 1),
                   "episodes": rets.count.sum().astype(jnp.float32), "train_fraction": smp.train.mean(),
                   "replay_fraction": smp.replay.mean(), "child_fraction": smp.child.mean(), **aux}
        scores = jnp.zeros(b, jnp.float32)
        children, has_child, child_gen, child_edits = ts.children, ts.has_child, ts.child_gen, ts.child_edits
        if m in BUFFERED:
            r_max = jnp.maximum(r_max, jnp.where(smp.replay, buffer.max_return[smp.index], -jnp.inf))
            scores = L.rollout_scores(cfg.score, values, adv, r_max, (r_max > 0).astype(jnp.float32),
                                      jnp.ones(b))
            gen, edits = jnp.where(smp.child, ts.child_gen, 0), jnp.where(smp.child, ts.child_edits, 0)
            buffer = L.plr_update(buffer, levels, L.hash_levels(levels), scores, r_max, gen, edits)
            metrics["score_mean"] = scores.mean()
            if m == "accel":
                children, n = L.accel_mutate(k_mut, levels, W.edit_world, cur)
                has_child = smp.replay
                child_gen, child_edits = L.child_provenance(buffer, smp, n)
        ts = CraftaxState(params, opt_state, buffer, children, has_child, child_gen, child_edits, key,
                          ts.step + 1)
        return ts, metrics, Played(smp, start[1].map, scores)

    return jax.jit(update)


def make_eval(cfg: CraftaxConfig) -> Any:
    """The jitted ``eval(params, worlds, key) -> f32[N]`` (one episode's return per world)."""
    env, env_params = W.make_env(cfg.max_steps)
    return jax.jit(lambda p, worlds, k: evaluate(env, env_params, p, worlds, k))


#: the jitted functions of every configuration trained in this process (:func:`jax_ppo.compiled_for`)
COMPILED: dict = {}


def train_functions(cfg: CraftaxConfig) -> tuple[Any, Any]:
    """``(update, evaluate)`` jitted for ``cfg``, shared by the runs that differ only in seed and length."""
    return P.compiled_for(cfg, lambda c: (make_update(c), make_eval(c)), COMPILED)


def resume_state(cfg: CraftaxConfig, path: str | Path) -> CraftaxState:
    """The state saved at ``path`` by :func:`train`; every setting but ``updates`` must be ``cfg``'s (a
    :class:`ValueError` names those that differ)."""
    with np.load(path, allow_pickle=False) as data:
        saved = json.loads(str(data["__config__"]))
    want = json.loads(json.dumps(asdict(cfg)))
    diff = sorted(k for k in set(saved) | set(want) if k != "updates" and saved.get(k) != want.get(k))
    if diff:
        raise ValueError(f"checkpoint {path} was written with other settings: "
                         + ", ".join(f"{k}={saved.get(k)!r} (now {want.get(k)!r})" for k in diff))
    return P.load_checkpoint(path, init_state(cfg))


def train(cfg: CraftaxConfig, out: str | Path | None = None, log_every: int = 1, eval_every: int = 0,
          ckpt_every: int = 0, heldout: int = 32, attempts: int = 1, progress: bool = True,
          resume: str | Path | None = None) -> dict[str, Any]:
    """Run ``cfg.updates`` updates; returns ``{"rows", "eval" (held-out returns per world), "seeds",
    "seconds", "env_steps", "config", "state"}`` (all but the state also in ``out/eval.json``). With ``out``:
    metrics, TensorBoard and a checkpoint ``ckpt_<update>.npz`` every ``ckpt_every`` updates and at the end;
    ``resume`` continues from one (the same run as one never stopped: the RNG key is part of the state)."""
    out_dir = Path(out) if out is not None else None
    update, eval_fn = train_functions(cfg)
    env, env_params = W.make_env(cfg.max_steps)
    worlds = W.heldout_worlds(env, env_params, heldout)
    ts = init_state(cfg) if resume is None else resume_state(cfg, resume)
    start = int(ts.step)
    if start > cfg.updates:
        raise ValueError(f"the checkpoint is at update {start}, past updates={cfg.updates}")
    log = P.MetricsLog(out_dir)
    it: Any = range(start, cfg.updates)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"craftax {cfg.method}", unit="upd", initial=start, total=cfg.updates)
    per_update = cfg.num_envs * cfg.rollout_len * cfg.outer_rollouts
    k_eval = jax.random.PRNGKey(10_000 + cfg.seed)
    rows: list[dict[str, Any]] = []
    returns = np.zeros(0)
    t0 = time.perf_counter()
    for u in it:
        ts, mt, _ = update(ts)
        row: dict[str, Any] = {"update": u + 1, "env_steps": (u + 1) * per_update}
        last = u + 1 == cfg.updates
        if (u + 1) % log_every == 0 or last:
            row.update({k: float(v) for k, v in mt.items()})
            if cfg.method in BUFFERED:
                row["buffer_size"] = float(ts.buffer.size)
        if (eval_every and (u + 1) % eval_every == 0) or last:
            returns = evaluate_on_device(eval_fn, ts.params, worlds, key=jax.random.fold_in(k_eval, u),
                                         episodes=attempts)
            row["eval/return_mean"] = float(returns.mean())
        if len(row) > 2:
            rows.append(row)
            log.write(row)
            if progress and hasattr(it, "set_postfix") and "return_mean" in row:
                it.set_postfix(ret=round(row["return_mean"], 2))
        if out_dir is not None and ((ckpt_every and (u + 1) % ckpt_every == 0) or last):
            P.save_checkpoint(out_dir / f"ckpt_{u + 1}.npz", ts, asdict(cfg))
    log.close()
    if returns.size == 0:  # resumed at the last update: evaluate the checkpoint
        k_last = jax.random.fold_in(k_eval, cfg.updates - 1)
        returns = evaluate_on_device(eval_fn, ts.params, worlds, key=k_last, episodes=attempts)
    result = {"rows": rows, "eval": returns.tolist(), "seeds": np.asarray(worlds.seed).tolist(),
              "seconds": time.perf_counter() - t0, "env_steps": cfg.updates * per_update,
              "config": asdict(cfg), "state": ts}
    if out_dir is not None:
        (out_dir / "eval.json").write_text(json.dumps({k: v for k, v in result.items() if k != "state"}))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.craftax.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    d = CraftaxConfig()
    ap.add_argument("--method", choices=METHODS, default=d.method)
    for name in ("num_envs", "rollout_len", "outer_rollouts", "updates", "max_steps", "num_levels", "epochs",
                 "minibatches", "hidden", "buffer_size", "num_edits", "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    for name in ("lr", "gamma", "gae_lambda", "ent_coef", "replay_prob", "staleness_coef", "temperature",
                 "min_fill_ratio"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(d, name))
    ap.add_argument("--score", choices=("max_mc", "positive_value_loss", "value_l1"), default=d.score)
    ap.add_argument("--out", default=None, help="output folder (metrics, eval, TensorBoard, checkpoints)")
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=0, help="updates between evaluations (0: at the end)")
    ap.add_argument("--heldout", type=int, default=32, help="held-out worlds (seeds 2^30, 2^30 + 1, ...)")
    ap.add_argument("--attempts", type=int, default=1, help="episodes per held-out world")
    ap.add_argument("--ckpt-every", type=int, default=0, help="updates between checkpoints (0: last only)")
    ap.add_argument("--resume", default=None, help="a ckpt_<update>.npz of a run with the same settings")
    ap.add_argument("--no-progress", action="store_true")
    a = vars(ap.parse_args(argv))
    try:
        W.require_craftax()
    except ImportError as exc:
        raise SystemExit(str(exc)) from None
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run = {k: a.pop(k) for k in ("out", "log_every", "eval_every", "heldout", "attempts", "ckpt_every",
                                 "resume")}
    progress = not a.pop("no_progress")
    cfg = replace(CraftaxConfig(), **a)
    res = train(cfg, run["out"], log_every=run["log_every"], eval_every=run["eval_every"],
                ckpt_every=run["ckpt_every"], heldout=run["heldout"], attempts=run["attempts"],
                progress=progress, resume=run["resume"])
    logger.info("%s: %d env steps in %.0f s; held-out mean return %.3f over %d worlds", cfg.method,
                res["env_steps"], res["seconds"], float(np.mean(res["eval"])), len(res["eval"]))
    return res


if __name__ == "__main__":
    main()
