"""The recurrent-PPO pieces the bundled JAX trainers share (Minigrid×RM and the maze), in plain JAX + optax.

Paper: J. Schulman, F. Wolski, P. Dhariwal, A. Radford, O. Klimov, "Proximal Policy Optimization
Algorithms", 2017 (clipped surrogate, eq. 7; clipped value loss and entropy bonus as in its reference
implementation); GAE: Schulman et al. 2016, eq. 16.

Everything here is a pure function over arrays; a trainer supplies its network and its rollout:

* :func:`dense_init` / :func:`dense`, :func:`gru_init` / :func:`gru_cell` (Cho et al. 2014): the layers;
  :func:`gru_scan`: the recurrence over a stored rollout (reset at episode starts), for the loss;
* :func:`gae`: advantages and value targets of a time-major rollout;
* :func:`ppo_loss`: the masked clipped-surrogate loss from the new logits and values of a rollout;
* :func:`optimizer`, :func:`ppo_epochs`: Adam with global-norm clipping over the parameters as one flat
  vector, epochs × minibatches over the env axis, a minibatch with no trained env leaves them unchanged;
  :func:`ppo_update`: the same over a parameter pytree (flattened and restored around it);
* :func:`compiled_for`: one set of jitted functions per configuration, shared by runs that differ only in
  seed and length; :class:`MetricsLog`: a trainer's rows to ``metrics.jsonl`` and TensorBoard;
* :func:`cvar`: CVaR of per-level solve rates; :func:`save_checkpoint` / :func:`load_checkpoint`:
  ``.npz`` checkpoints of any pytree (no pickle).

>>> import jax.numpy as jnp
>>> adv, tgt = gae(jnp.array([[0.0], [1.0]]), jnp.array([[0.5], [0.5]]), jnp.array([[False], [True]]),
...                jnp.array([9.0]), gamma=1.0, lam=1.0)
>>> adv[:, 0].tolist(), tgt[:, 0].tolist()
([0.5, 0.5], [1.0, 1.0])
>>> cvar([1.0, 0.0, 0.5, 1.0], 0.5)
0.25
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..evaluation.statistics import cvar  # (re-exported: the trainers' CVaR is the evaluation module's)
from ..integrations.loggers import log_curriculum_metrics, summary_writer

logger = logging.getLogger(__name__)

__all__ = ["MetricsLog", "compiled_for", "cvar", "dense", "dense_init", "gae", "gru_cell", "gru_init",
           "gru_scan", "load_checkpoint", "optimizer", "ppo_epochs", "ppo_loss", "ppo_update",
           "save_checkpoint"]


def dense_init(key: jax.Array, n_in: int, n_out: int, scale: float = 1.0) -> dict[str, jax.Array]:
    """A dense layer: He-normal weights times ``scale``, zero bias."""
    w = jax.random.normal(key, (n_in, n_out)) * scale * np.sqrt(2.0 / n_in)
    return {"w": w, "b": jnp.zeros(n_out)}


def dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """``x @ w + b``."""
    return x @ p["w"] + p["b"]


def gru_init(key: jax.Array, x_dim: int, hidden: int) -> dict[str, jax.Array]:
    """GRU parameters: input gates ``wx`` (``[x_dim, 3h]``), recurrent ``wh`` (``[h, 3h]``), bias."""
    kx, kh = jax.random.split(key)
    return {"wx": jax.random.normal(kx, (x_dim, 3 * hidden)) * np.sqrt(1.0 / x_dim),
            "wh": jax.random.normal(kh, (hidden, 3 * hidden)) * np.sqrt(1.0 / hidden),
            "b": jnp.zeros(3 * hidden)}


def gru_cell(gru: dict[str, jax.Array], h: jax.Array, gx: jax.Array) -> jax.Array:
    """One GRU step from precomputed input gates ``gx = x @ wx + b`` (so that a trainer computes them for a
    whole rollout at once and runs only this recurrence step by step)."""
    hd = h.shape[-1]
    gh = h @ gru["wh"]
    z = jax.nn.sigmoid(gx[..., :hd] + gh[..., :hd])
    r = jax.nn.sigmoid(gx[..., hd:2 * hd] + gh[..., hd:2 * hd])
    n = jnp.tanh(gx[..., 2 * hd:] + r * gh[..., 2 * hd:])
    return (1.0 - z) * n + z * h


def gru_scan(gru: dict[str, jax.Array], gx: jax.Array, first: jax.Array, hidden: int) -> jax.Array:
    """The GRU states ``[T, B, hidden]`` over a time-major rollout's input gates ``gx`` (``[T, B, 3h]``),
    from zeros, the state reset to zero before every step where ``first`` (``bool[T, B]``) starts an
    episode: the states the rollout acted on, recomputed with gradients for the loss."""
    def one(h: jax.Array, x: tuple) -> tuple[jax.Array, jax.Array]:
        g, f = x
        h = gru_cell(gru, jnp.where(f[:, None], 0.0, h), g)
        return h, h

    _, hs = jax.lax.scan(one, jnp.zeros((gx.shape[1], hidden), gx.dtype), (gx, first))
    return hs


def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma: float,
        lam: float) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and value targets ``[T, B]``; ``dones[t]`` (terminated or truncated) cuts the sum
    after step ``t``; ``last_value`` bootstraps the step after the rollout."""
    def back(carry: tuple, x: tuple) -> tuple[tuple, jax.Array]:
        adv_next, v_next = carry
        r, v, d = x
        nd = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * v_next * nd - v
        adv = delta + gamma * lam * nd * adv_next
        return (adv, v), adv

    _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), (rewards, values, dones),
                          reverse=True)
    return adv, adv + values


def ppo_loss(logits: jax.Array, values: jax.Array, action: jax.Array, old_logp: jax.Array,
             old_value: jax.Array, adv: jax.Array, targets: jax.Array, mask: jax.Array, clip: float,
             vf_coef: float, ent_coef: float) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The clipped PPO loss over the envs of ``mask`` (``bool[B]``; arrays ``[T, B, ...]``).

    Advantages are normalised over the masked entries; the value loss is the clipped one
    (``max`` of the squared errors of the new and the clipped value); the entropy bonus is subtracted."""
    n_actions = logits.shape[-1]
    logp_all = jax.nn.log_softmax(logits)
    logp = (logp_all * jax.nn.one_hot(action, n_actions)).sum(-1)  # a gather's gradient is a scatter
    ratio = jnp.exp(logp - old_logp)
    m = jnp.broadcast_to(mask[None, :], ratio.shape).astype(jnp.float32)
    denom = jnp.maximum(m.sum(), 1.0)
    a_mean = (adv * m).sum() / denom
    a_std = jnp.sqrt((((adv - a_mean) ** 2) * m).sum() / denom) + 1e-8
    a = (adv - a_mean) / a_std
    pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - clip, 1 + clip) * a)
    v_clip = old_value + jnp.clip(values - old_value, -clip, clip)
    vl = 0.5 * jnp.maximum((values - targets) ** 2, (v_clip - targets) ** 2)
    ent = -(jnp.exp(logp_all) * logp_all).sum(-1)
    loss = ((pg + vf_coef * vl - ent_coef * ent) * m).sum() / denom
    return loss, {"pg_loss": (pg * m).sum() / denom, "value_loss": (vl * m).sum() / denom,
                  "entropy": (ent * m).sum() / denom}


def optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam (``eps = 1e-5``) after clipping the gradient's global norm."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))


#: ``loss_fn(flat_params, env_index) -> (loss, aux)`` for the minibatch of envs ``env_index``
MinibatchLoss = Callable[[jax.Array, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


def ppo_epochs(key: jax.Array, flat: jax.Array, opt_state: Any, opt: optax.GradientTransformation,
               loss_fn: MinibatchLoss, train: jax.Array, epochs: int,
               minibatches: int) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
    """``epochs`` passes over the ``B = train.shape[0]`` envs in ``minibatches`` random minibatches.

    The parameters are one flat vector (``jax.flatten_util.ravel_pytree``): Adam is elementwise and the
    clip uses the global norm, so this is the same arithmetic as per leaf, with one set of kernels. A
    minibatch with no ``train`` env leaves parameters and optimiser state unchanged. Returns the new flat
    parameters, optimiser state and the per-minibatch ``aux`` (``[epochs, minibatches]``)."""
    b = train.shape[0]
    if b % minibatches:
        raise ValueError(f"the {b} envs do not split into {minibatches} minibatches")
    mb = b // minibatches

    def epoch(carry: tuple, k: jax.Array) -> tuple[tuple, dict[str, jax.Array]]:
        perm = jax.random.permutation(k, b).reshape(minibatches, mb)

        def minibatch(carry: tuple, idx: jax.Array) -> tuple[tuple, dict[str, jax.Array]]:
            flat, opt_state = carry
            (_, aux), grads = jax.value_and_grad(lambda f: loss_fn(f, idx), has_aux=True)(flat)
            any_train = train[idx].any()
            upd, new_opt = opt.update(grads, opt_state, flat)
            flat = jnp.where(any_train, flat + upd, flat)
            opt_state = jax.tree_util.tree_map(lambda a, c: jnp.where(any_train, a, c), new_opt, opt_state)
            return (flat, opt_state), aux

        return jax.lax.scan(minibatch, carry, perm)

    (flat, opt_state), aux = jax.lax.scan(epoch, (flat, opt_state), jax.random.split(key, epochs))
    return flat, opt_state, aux


def ppo_update(key: jax.Array, params: Any, opt_state: Any, opt: optax.GradientTransformation,
               loss_fn: Callable[[Any, jax.Array], tuple[jax.Array, dict[str, jax.Array]]], train: jax.Array,
               epochs: int, minibatches: int) -> tuple[Any, Any, dict[str, jax.Array]]:
    """:func:`ppo_epochs` over a parameter pytree: ``loss_fn(params, env_index)``; ``opt_state`` is that of
    the flat vector (``opt.init(ravel_pytree(params)[0])``). Returns the new parameters (same pytree), the
    optimiser state and the mean of each ``aux`` entry over the epochs and minibatches."""
    flat0, unravel = ravel_pytree(params)
    flat, opt_state, aux = ppo_epochs(key, flat0, opt_state, opt, lambda f, idx: loss_fn(unravel(f), idx),
                                      train, epochs, minibatches)
    return unravel(flat), opt_state, {k: v.mean() for k, v in aux.items()}


def compiled_for(cfg: Any, build: Callable[[Any], Any], cache: dict | None = None) -> Any:
    """``build(cfg)`` (a trainer's jitted functions), shared through ``cache`` by every configuration that
    differs from ``cfg`` only in ``seed`` and ``updates`` (nothing the jitted functions see), so that the
    seeds of a sweep compile once. ``cfg`` is a frozen dataclass with those two fields; ``cache=None``
    builds afresh."""
    if cache is None:
        return build(cfg)
    key = replace(cfg, seed=0, updates=1)
    if key not in cache:
        cache[key] = build(cfg)
    return cache[key]


class MetricsLog:
    """A trainer's logged rows: one JSON line each in ``out/metrics.jsonl`` and, where a TensorBoard writer
    is installed (tensorboardX, else torch's), every numeric entry as a scalar under ``out/tb`` at the
    row's ``env_steps``. ``out=None`` keeps nothing; without a writer the log says so once.

    >>> import json, tempfile
    >>> out = tempfile.mkdtemp()
    >>> with MetricsLog(out, tensorboard=False) as log:
    ...     log.write({"update": 1, "env_steps": 64, "loss": 0.5, "per_level": [1.0, 0.0]})
    >>> json.loads(open(out + "/metrics.jsonl").read())["per_level"]
    [1.0, 0.0]
    """

    def __init__(self, out: str | Path | None, tensorboard: bool = True) -> None:
        self.path = None if out is None else Path(out) / "metrics.jsonl"
        self.writer = None
        if out is None:
            return
        Path(out).mkdir(parents=True, exist_ok=True)
        if tensorboard:
            try:
                self.writer = summary_writer(Path(out) / "tb")
            except ImportError as exc:
                logger.warning("%s; metrics go to %s only", exc, self.path)

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` (JSON-serialisable; ``env_steps`` is the TensorBoard step)."""
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            scalars = {k: v for k, v in row.items() if k not in ("update", "env_steps")
                       and isinstance(v, (int, float)) and not isinstance(v, bool)}
            log_curriculum_metrics(scalars, int(row.get("env_steps", 0)), self.writer)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _flatten(tree: Any) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves}


def save_checkpoint(path: str | Path, state: Any, config: dict[str, Any]) -> None:
    """A pytree as ``.npz`` (one array per leaf, named by its path; no pickle), with ``config`` as JSON."""
    arrays = {f"state{k}": v for k, v in _flatten(state).items()}
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:  # written whole, then renamed: a run stopped mid-save leaves no torn file
        np.savez(f, __config__=np.array(json.dumps(config, default=str)), **arrays)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path, template: Any) -> Any:
    """Restore a :func:`save_checkpoint` file into a pytree shaped like ``template``."""
    data = np.load(path, allow_pickle=False)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    out = []
    for k, v in leaves:
        name = f"state{jax.tree_util.keystr(k)}"
        if name not in data:
            raise KeyError(f"checkpoint {path} lacks {name}; was it written with another configuration?")
        arr = data[name]
        if arr.shape != np.shape(v):
            raise ValueError(f"checkpoint {path}: {name} has shape {arr.shape}, expected {np.shape(v)}")
        out.append(jnp.asarray(arr, dtype=jnp.asarray(v).dtype))
    return jax.tree_util.tree_unflatten(treedef, out)
