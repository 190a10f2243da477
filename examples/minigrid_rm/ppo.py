"""Recurrent PPO in plain JAX + optax over (level, RM) problems chosen by DR, PLR⊥, ACCEL, ACCEL-0 or SFL.

Papers: Schulman et al. 2017 (PPO, clipped surrogate), ATLAS (Furelos-Blanco et al., Sec. 4.1 and
Appendix C, E.1) for the architecture and settings, JaxUED-style on-device curricula (:mod:`.curriculum`).

The policy: a CNN over the 5x5 view (tile and colour embeddings; 2x2 kernels, stride 1, no padding), a
graph network over the RM with *reversed* edges (each state sees its future: mean aggregation of
``[h_j ; e_ji]``, separate self/neighbour weights, layer norm, ReLU; edge features = sum of literal
embeddings through a linear map, the "domain independent" encoding), the current RM state's embedding, a
previous-action embedding, a GRU, and actor/critic MLP heads. Sizes default small for CPU (one 2x2
convolution of 16 channels and a projection to 64 before a GRU of 64; the paper: CNN 32/64/64, GNN 5
layers of 128, GRU 512, heads 256). Training computes the feed-forward part of the policy for a whole
rollout in one batch and runs only the GRU recurrence step by step.

One *update* (jitted end to end): the curriculum chooses ``num_envs`` problems; a rollout of
``rollout_len`` steps runs with each env restarting its own problem when an episode ends; GAE; scores
(MaxMC by default) go into the buffer; ACCEL mutates the replayed problems (hindsight edits use the
rollout's last state); PPO trains on the ``train``-flagged envs only (PLR⊥: replays).

Run ``python -m magister.examples.minigrid_rm.ppo --help``. Output (``--out``): ``metrics.jsonl``,
checkpoints ``ckpt_<update>.npz``, and ``buffer_composition.png`` (solvable fraction, rooms and RM states
of the buffer - of the sampled problems for DR - over training).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from magister.evaluation import cvar, evaluate_on_device
from magister.examples._cli import require

from .. import jax_ppo as P
from . import curriculum as C
from .env import NUM_ACTIONS, NUM_COLOURS, NUM_TILES, observe
from .levels import ACCEL0_SAMPLER, ProblemSampler, sample_problem, solvable_batch
from .mutations import HindsightInfo, MutationConfig, mutate
from .problem import Problem, ProblemState, auto_reset_step, reset, step
from .propositions import NUM_PROPS
from .reward_machines import MAX_STATES, RewardMachine

logger = logging.getLogger(__name__)

__all__ = [
    "NetConfig", "TrainConfig", "TrainState", "cvar", "evaluate", "init_params", "init_train_state",
    "method_curriculum",
    "load_checkpoint", "main", "make_update", "policy_apply", "rollout", "save_checkpoint", "train",
    "train_functions",
]

METHODS = ("dr", "plr", "accel", "accel0", "sfl")


# ---------------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NetConfig:
    """Sizes of the policy (CPU-sized; the paper: CNN 32/64/64, GNN 5 layers of 128, GRU 512, heads 256).

    ``view_dense`` projects the flattened CNN features before the GRU (0: no projection, the GRU reads the
    ``25 * conv[-1]`` features directly).
    """

    conv: tuple[int, ...] = (16,)
    view_dense: int = 64
    node_dim: int = 32
    edge_dim: int = 16
    gnn_layers: int = 2
    hidden: int = 64
    head: int = 64
    action_embed: int = 8


_dense = P.dense_init
_apply_dense = P.dense


def init_params(key: jax.Array, cfg: NetConfig = NetConfig()) -> dict[str, Any]:
    """Parameters of the policy (a nested dict of arrays)."""
    ks = iter(jax.random.split(key, 64))
    p: dict[str, Any] = {
        "lit_emb": jax.random.normal(next(ks), (2 * NUM_PROPS + 1, cfg.edge_dim)) * 0.1,
        "act_emb": jax.random.normal(next(ks), (NUM_ACTIONS + 1, cfg.action_embed)) * 0.5,
        "node_init": jax.random.normal(next(ks), (3, cfg.node_dim)) * np.sqrt(0.1),
    }
    if not cfg.conv:
        raise ValueError("NetConfig.conv needs at least one layer (the first reads the one-hot view)")
    convs, c_in = [], NUM_TILES + NUM_COLOURS
    for c_out in cfg.conv:
        convs.append({"w": jax.random.normal(next(ks), (2, 2, c_in, c_out)) * np.sqrt(2.0 / (4 * c_in)),
                      "b": jnp.zeros(c_out)})
        c_in = c_out
    p["conv"] = convs
    if len(cfg.conv) > 4:
        raise ValueError(f"at most 4 convolutions fit the 5x5 view without padding, got {cfg.conv}")
    view_dim = (5 - len(cfg.conv)) ** 2 * cfg.conv[-1]
    if cfg.view_dense:
        p["view_dense"] = _dense(next(ks), view_dim, cfg.view_dense)
        view_dim = cfg.view_dense
    p["lit_lin"] = _dense(next(ks), cfg.edge_dim, cfg.edge_dim)
    p["gnn"] = [{"self": _dense(next(ks), cfg.node_dim, cfg.node_dim),
                 "neigh": _dense(next(ks), cfg.node_dim + cfg.edge_dim, cfg.node_dim),
                 "ln_g": jnp.ones(cfg.node_dim), "ln_b": jnp.zeros(cfg.node_dim)}
                for _ in range(cfg.gnn_layers)]
    p["gnn_last"] = _dense(next(ks), cfg.node_dim, cfg.node_dim)
    x_dim = view_dim + cfg.node_dim + cfg.action_embed
    h = cfg.hidden
    p["gru"] = {"wx": jax.random.normal(next(ks), (x_dim, 3 * h)) * np.sqrt(1.0 / x_dim),
                "wh": jax.random.normal(next(ks), (h, 3 * h)) * np.sqrt(1.0 / h),
                "b": jnp.zeros(3 * h)}
    p["actor"] = [_dense(next(ks), h, cfg.head), _dense(next(ks), cfg.head, NUM_ACTIONS, 0.01)]
    p["critic"] = [_dense(next(ks), h, cfg.head), _dense(next(ks), cfg.head, 1, 1.0)]
    return p


def encode_rm(p: dict[str, Any], rm: RewardMachine) -> jax.Array:
    """Node embeddings ``[MAX_STATES, node_dim]`` of one RM (GCN over reversed edges)."""
    idx = jnp.arange(MAX_STATES)
    flags = jnp.stack([idx < rm.n_states, idx == rm.accepting, idx == rm.initial], axis=-1)
    h = flags.astype(jnp.float32) @ p["node_init"]
    lits = rm.edge_lits
    emb = p["lit_emb"][lits + NUM_PROPS] * (lits != 0)[..., None]
    e = _apply_dense(p["lit_lin"], emb.sum(axis=1))  # [E, edge_dim]
    valid = rm.edge_src >= 0
    src = jax.nn.one_hot(jnp.where(valid, rm.edge_src, 0), MAX_STATES) * valid[:, None]  # [E, U]
    dst = jax.nn.one_hot(jnp.where(valid, rm.edge_dst, 0), MAX_STATES) * valid[:, None]
    cnt = jnp.maximum(src.sum(axis=0), 1.0)[:, None]
    for layer in p["gnn"]:
        msg = jnp.concatenate([dst @ h, e], axis=-1)  # message from the edge's target (reversed edges)
        agg = (src.T @ msg) / cnt
        z = _apply_dense(layer["self"], h) + _apply_dense(layer["neigh"], agg)
        mu, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
        z = (z - mu) / jnp.sqrt(var + 1e-5) * layer["ln_g"] + layer["ln_b"]
        h = jax.nn.relu(z)
    return _apply_dense(p["gnn_last"], h)


_OFFSETS = ((0, 0), (0, 1), (1, 0), (1, 1))  # the 2x2 kernel's positions, HWIO order


def conv2x2(x: jax.Array, w: jax.Array, b: jax.Array, padding: str = "VALID") -> jax.Array:
    """A 2x2 convolution, stride 1, as one matrix multiply on the 2x2 patches.

    ``x``: ``[..., H, W, C]``, ``w``: ``[2, 2, C, C_out]`` (HWIO); ``padding`` ``"VALID"`` (output
    ``H-1 x W-1``) or ``"SAME"`` (zero row/column after, output ``H x W``). Equal to
    ``lax.conv_general_dilated(x, w, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC")) + b``
    (tests/test_jax_ppo.py), but its gradient is two matrix multiplies, which XLA's CPU backend runs far
    faster than a convolution's backward pass.
    """
    return _patches(x, padding, 0.0) @ w.reshape(-1, w.shape[-1]) + b


def _patches(x: jax.Array, padding: str, fill: Any) -> jax.Array:
    """The 2x2 patches of ``x`` (``[..., H, W, C]``) concatenated on the last axis, ``fill`` as padding."""
    if padding not in ("VALID", "SAME"):
        raise ValueError(f"padding must be 'VALID' or 'SAME', got {padding!r}")
    hh, ww = x.shape[-3], x.shape[-2]
    if padding == "SAME":
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [(0, 1), (0, 1), (0, 0)], constant_values=fill)
    else:
        hh, ww = hh - 1, ww - 1
    return jnp.concatenate([x[..., di:di + hh, dj:dj + ww, :] for di, dj in _OFFSETS], axis=-1)


def _onehot_patches(view: jax.Array, padding: str = "VALID") -> jax.Array:
    """``[..., h, w, 4 * (NUM_TILES + NUM_COLOURS)]``: for each 2x2 patch of the view, the one-hot tile
    and colour of its four cells (``SAME`` padding: zeros beyond the view)."""
    onehot = jnp.concatenate([jax.nn.one_hot(view[..., 0], NUM_TILES),
                              jax.nn.one_hot(view[..., 1], NUM_COLOURS)], axis=-1)
    return _patches(onehot, padding, 0.0)


def encode_view(p: dict[str, Any], view: jax.Array, padding: str = "VALID") -> jax.Array:
    """CNN features of views ``[..., 5, 5, 2]`` -> ``[..., view_dense]`` (or the flattened conv output).

    2x2 kernels, stride 1, no padding by default (as the usual Minigrid CNN: 5x5 -> 4x4 -> ...). The first
    convolution reads the one-hot tile and colour of each cell (a learned tile embedding plus a colour
    embedding per kernel position), computed as one matrix multiply on the one-hot patches (no gradient
    flows into the input); further layers are :func:`conv2x2`.
    """
    first, *rest = p["conv"]
    x = jax.nn.relu(_onehot_patches(view, padding) @ first["w"].reshape(-1, first["w"].shape[-1])
                    + first["b"])
    for layer in rest:
        x = jax.nn.relu(conv2x2(x, layer["w"], layer["b"], padding))
    x = x.reshape(x.shape[:-3] + (-1,))
    if "view_dense" in p:
        x = jax.nn.relu(_apply_dense(p["view_dense"], x))
    return x


def policy_inputs(p: dict[str, Any], view: jax.Array, node: jax.Array, prev_action: jax.Array) -> jax.Array:
    """The GRU's input gates ``x @ W_x + b`` for ``x = [CNN(view); RM-state node; action embedding]`` (any
    leading batch dimensions): everything of a step that does not depend on the recurrent state, so that
    training computes it for a whole rollout in one batch."""
    act = jax.nn.one_hot(prev_action, NUM_ACTIONS + 1) @ p["act_emb"]
    x = jnp.concatenate([encode_view(p, view), node, act], axis=-1)
    return x @ p["gru"]["wx"] + p["gru"]["b"]


def gru_cell(p: dict[str, Any], h: jax.Array, gx: jax.Array) -> jax.Array:
    """One GRU step (Cho et al. 2014) from precomputed input gates ``gx`` (:func:`policy_inputs`)."""
    return P.gru_cell(p["gru"], h, gx)


def policy_heads(p: dict[str, Any], h: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Actor logits and critic value from the GRU state (any leading batch dimensions)."""
    a = jax.nn.relu(_apply_dense(p["actor"][0], h))
    v = jax.nn.relu(_apply_dense(p["critic"][0], h))
    return _apply_dense(p["actor"][1], a), _apply_dense(p["critic"][1], v)[..., 0]


def _rm_node(nodes: jax.Array, rm_state: jax.Array) -> jax.Array:
    """``nodes[b, rm_state[..., b]]``: the current RM state's embedding (``nodes``: ``[B, U, d]``)."""
    return jnp.einsum("...bu,bud->...bd", jax.nn.one_hot(rm_state, nodes.shape[1]), nodes)


def policy_apply(p: dict[str, Any], h: jax.Array, view: jax.Array, nodes: jax.Array, rm_state: jax.Array,
                 prev_action: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One step for a batch: ``(h', logits, value)``. ``nodes``: ``[B, U, d]`` from :func:`encode_rm`."""
    h = gru_cell(p, h, policy_inputs(p, view, _rm_node(nodes, rm_state), prev_action))
    logits, v = policy_heads(p, h)
    return h, logits, v


# ---------------------------------------------------------------------------------------------------
# Rollouts
# ---------------------------------------------------------------------------------------------------
class Traj(NamedTuple):
    view: jax.Array
    rm_state: jax.Array
    prev_action: jax.Array
    first: jax.Array
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    term: jax.Array
    done: jax.Array


def rollout(p: dict[str, Any], problems: Problem, key: jax.Array, steps: int, max_steps: int,
            hidden: int, greedy: bool = False) -> tuple[Traj, jax.Array, ProblemState]:
    """``steps`` steps of every env on its problem (restarting it when an episode ends).

    Returns the time-major trajectory, the bootstrap value after the last step and the last state.
    """
    b = problems.rm.n_states.shape[0]
    s = jax.vmap(reset)(problems)
    nodes = jax.vmap(encode_rm, in_axes=(None, 0))(p, problems.rm)
    init = (s, jnp.zeros((b, hidden)), jnp.full(b, NUM_ACTIONS, jnp.int32), jnp.ones(b, bool))

    def one(carry: tuple, k: jax.Array) -> tuple[tuple, Traj]:
        s, h, prev_a, first = carry
        view = jax.vmap(observe)(s.grid)
        h = jnp.where(first[:, None], 0.0, h)
        h, logits, v = policy_apply(p, h, view, nodes, s.rm_state, prev_a)
        a = jnp.argmax(logits, -1) if greedy else jax.random.categorical(k, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(b), a]
        s2, r, term, trunc, _ = jax.vmap(auto_reset_step, in_axes=(0, 0, None))(s, a, max_steps)
        done = term | trunc
        out = Traj(view, s.rm_state, prev_a, first, a, logp, v, r, term, done)
        return (s2, h, jnp.where(done, NUM_ACTIONS, a).astype(jnp.int32), done), out

    (s, h, prev_a, first), traj = jax.lax.scan(one, init, jax.random.split(key, steps))
    h = jnp.where(first[:, None], 0.0, h)
    _, _, last_v = policy_apply(p, h, jax.vmap(observe)(s.grid), nodes, s.rm_state, prev_a)
    return traj, last_v, s


def gae(traj: Traj, last_v: jax.Array, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and value targets, time-major; episode ends (terminated or truncated) cut the sum."""
    return P.gae(traj.reward, traj.value, traj.done, last_v, gamma, lam)


def evaluate(p: dict[str, Any], problems: Problem, key: jax.Array, max_steps: int, hidden: int,
             greedy: bool = False) -> jax.Array:
    """Per problem: whether the first episode (at most ``max_steps`` steps) reached ``uA``.

    The same actions as the first episode of :func:`rollout` with the same key, but lean: no trajectory
    is stored, no value computed, no reset (the steps after an episode's end are ignored).
    """
    b = problems.rm.n_states.shape[0]
    nodes = jax.vmap(encode_rm, in_axes=(None, 0))(p, problems.rm)

    def one(carry: tuple, k: jax.Array) -> tuple[tuple, None]:
        s, h, prev_a, ended, solved = carry
        view = jax.vmap(observe)(s.grid)
        h = gru_cell(p, h, policy_inputs(p, view, _rm_node(nodes, s.rm_state), prev_a))
        logits = _apply_dense(p["actor"][1], jax.nn.relu(_apply_dense(p["actor"][0], h)))
        a = jnp.argmax(logits, -1) if greedy else jax.random.categorical(k, logits)
        s2, _, term, trunc = jax.vmap(step, in_axes=(0, 0, None))(s, a, max_steps)
        return (s2, h, a.astype(jnp.int32), ended | term | trunc, solved | (term & ~ended)), None

    init = (jax.vmap(reset)(problems), jnp.zeros((b, hidden)), jnp.full(b, NUM_ACTIONS, jnp.int32),
            jnp.zeros(b, bool), jnp.zeros(b, bool))
    (_, _, _, _, solved), _ = jax.lax.scan(one, init, jax.random.split(key, max_steps))
    return solved


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainConfig:
    """Settings (defaults: small CPU-sized run; ATLAS's Table 2 values in the comments)."""

    method: str = "plr"
    sampler: str = "independent"  # level_conditioned for the ablation
    task: str = "sequential"  # random_walk: acyclic RMs (Sec. 5.4)
    num_envs: int = 32  # 4096
    rollout_len: int = 64  # 512
    max_steps: int = 128  # 512
    updates: int = 50
    epochs: int = 4
    minibatches: int = 4  # 128
    gamma: float = 0.99
    gae_lambda: float = 0.9
    lr: float = 3e-4  # 5e-5
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    curriculum: C.CurriculumConfig = field(default_factory=lambda: C.CurriculumConfig(buffer_size=1000))
    sfl: C.SFLConfig = field(default_factory=lambda: C.SFLConfig(batch_size=64, buffer_size=16,
                                                                 update_period=10, sample_ratio=0.5))
    mutation: MutationConfig = MutationConfig()
    net: NetConfig = NetConfig()
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.num_envs % self.minibatches:
            raise ValueError(f"num_envs ({self.num_envs}) must be divisible by minibatches "
                             f"({self.minibatches})")
        for name in ("num_envs", "rollout_len", "max_steps", "updates", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def problem_sampler(self) -> ProblemSampler:
        if self.method == "accel0":
            return ACCEL0_SAMPLER
        return ProblemSampler(mode=self.sampler, task=self.task)


def method_curriculum(method: str, **overrides: Any) -> C.CurriculumConfig:
    """The ATLAS settings of a method: PLR⊥ (replay 0.5), ACCEL (0.9, mutations), ACCEL-0 (0.99)."""
    base: dict[str, Any] = {"buffer_size": 1000}
    if method == "accel":
        base.update(replay_prob=0.9, mutate=True)
    elif method == "accel0":
        base.update(replay_prob=0.99, mutate=True)
    base.update(overrides)
    return C.CurriculumConfig(**base)


class TrainState(NamedTuple):
    params: dict[str, Any]
    opt_state: Any  # of the parameters as one flat vector (jax.flatten_util.ravel_pytree order)
    buffer: C.Buffer
    children: Problem
    has_child: jax.Array
    child_gen: jax.Array
    child_edits: jax.Array
    sfl: C.SFLState
    key: jax.Array
    step: jax.Array


def _optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    return P.optimizer(cfg.lr, cfg.max_grad_norm)


def init_train_state(cfg: TrainConfig) -> TrainState:
    key = jax.random.PRNGKey(cfg.seed)
    kp, kx, key = jax.random.split(key, 3)
    params = init_params(kp, cfg.net)
    example = sample_problem(kx, cfg.problem_sampler)
    b = cfg.num_envs
    batch = jax.tree_util.tree_map(lambda a: jnp.zeros((b,) + jnp.shape(a), jnp.asarray(a).dtype), example)
    cap = cfg.curriculum.buffer_size if cfg.method in ("plr", "accel", "accel0") else 1
    sfl_k = cfg.sfl.buffer_size
    sfl = C.SFLState(jax.tree_util.tree_map(
        lambda a: jnp.zeros((sfl_k,) + jnp.shape(a), jnp.asarray(a).dtype), example), jnp.zeros(sfl_k))
    opt_state = _optimizer(cfg).init(ravel_pytree(params)[0])
    return TrainState(params, opt_state, C.init_buffer(example, cap), batch,
                      jnp.zeros(b, bool), jnp.zeros(b, jnp.int32), jnp.zeros(b, jnp.int32), sfl, key,
                      jnp.int32(0))


def _ppo_loss(p: dict[str, Any], traj: Traj, nodes: jax.Array, adv: jax.Array, targets: jax.Array,
              mask: jax.Array, cfg: TrainConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
    # the feed-forward part for the whole [T, B] rollout at once; only the GRU recurrence is sequential
    gx = policy_inputs(p, traj.view, _rm_node(nodes, traj.rm_state), traj.prev_action)
    hs = P.gru_scan(p["gru"], gx, traj.first, cfg.net.hidden)
    logits, values = policy_heads(p, hs)
    return P.ppo_loss(logits, values, traj.action, traj.logp, traj.value, adv, targets, mask, cfg.clip,
                      cfg.vf_coef, cfg.ent_coef)


def make_update(cfg: TrainConfig) -> Any:
    """The jitted ``update(state) -> (state, metrics)`` for ``cfg``."""
    opt = _optimizer(cfg)
    cur = cfg.curriculum
    sampler = cfg.problem_sampler
    b = cfg.num_envs

    def update(ts: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        key, k_new, k_cur, k_roll, k_mut, k_ppo = jax.random.split(ts.key, 6)
        new = jax.vmap(sample_problem, in_axes=(0, None))(jax.random.split(k_new, b), sampler)
        buffer = ts.buffer
        if cfg.method == "dr":
            smp = C.dr_sample(new)
        elif cfg.method == "sfl":
            smp = C.sfl_sample(k_cur, ts.sfl, new, cfg.sfl)
        else:
            children = ts.children if cur.mutate else None
            has_child = ts.has_child if cur.mutate else None
            buffer, smp = C.plr_sample(k_cur, buffer, new, cur, children, has_child)
        problems = smp.problems
        traj, last_v, last_s = rollout(ts.params, problems, k_roll, cfg.rollout_len, cfg.max_steps,
                                       cfg.net.hidden)
        adv, targets = gae(traj, last_v, cfg.gamma, cfg.gae_lambda)
        successes = traj.term.sum(0).astype(jnp.float32)
        episodes = traj.done.sum(0).astype(jnp.float32)
        solved = (successes > 0).astype(jnp.float32)
        metrics: dict[str, jax.Array] = {
            "solve_rate_train": (solved * smp.train).sum() / jnp.maximum(smp.train.sum(), 1),
            "solve_rate_all": solved.mean(),
            "train_fraction": smp.train.mean(),
            "reward_per_step": traj.reward.mean(),
            "episodes": episodes.sum(),
        }
        child_gen, child_edits, has_child, children = ts.child_gen, ts.child_edits, ts.has_child, ts.children
        if cfg.method in ("plr", "accel", "accel0"):
            prev_max = jnp.where(smp.replay, buffer.max_return[smp.index], 0.0)
            r_max = jnp.maximum(prev_max, solved)
            scores = C.rollout_scores(cur.score, traj.value, adv, r_max, successes, episodes)
            hashes = jax.vmap(C.problem_hash)(problems)
            gen = jnp.where(smp.child, ts.child_gen, 0)
            edits = jnp.where(smp.child, ts.child_edits, 0)
            buffer = C.plr_update(buffer, problems, hashes, scores, r_max, gen, edits)
            if cur.mutate:
                info = HindsightInfo(last_s.rm_state, last_s.grid, jnp.ones(b, bool))
                kids, n, _ = jax.vmap(lambda k, pr, inf: mutate(k, pr, inf, cur.min_edits, cur.max_edits,
                                                                cfg.mutation))(
                    jax.random.split(k_mut, b), problems, info)
                children, has_child = kids, smp.replay
                child_gen = jnp.where(smp.replay, buffer.generation[smp.index] + 1, 0)
                child_edits = n
            metrics.update({"score_mean": scores.mean(), "buffer_size": buffer.size.astype(jnp.float32),
                            "replay_fraction": smp.replay.mean()})
        # PPO on the train-flagged envs
        nodes = jax.vmap(encode_rm, in_axes=(None, 0))  # re-encoded inside the loss (gradients)

        def loss_fn(pp: dict[str, Any], idx: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            sub = jax.tree_util.tree_map(lambda x: x[:, idx], traj)
            rms = jax.tree_util.tree_map(lambda x: x[idx], problems.rm)
            return _ppo_loss(pp, sub, nodes(pp, rms), adv[:, idx], targets[:, idx], smp.train[idx], cfg)

        params, opt_state, aux = P.ppo_update(k_ppo, ts.params, ts.opt_state, opt, loss_fn, smp.train,
                                              cfg.epochs, cfg.minibatches)
        metrics.update(aux)
        ts = TrainState(params, opt_state, buffer, children, has_child, child_gen, child_edits, ts.sfl, key,
                        ts.step + 1)
        return ts, (metrics, problems)

    return jax.jit(update)


#: a batch of problems from a sampler (compiled once per batch size and sampler, for the whole process)
sample_problems = jax.jit(jax.vmap(sample_problem, in_axes=(0, None)), static_argnums=1)


def make_sfl_refresh(cfg: TrainConfig, reps: int = 4, success_fn: Any = None) -> Any:
    """The jitted SFL refresh ``(state) -> state`` (Rutherford et al. 2024): sample ``sfl.batch_size``
    candidates, estimate each one's success rate from ``reps`` policy rollouts, keep the most learnable.

    ``success_fn(params, problems, key) -> bool[n]`` replaces :func:`evaluate` (the default; the ``reps``
    calls are vmapped over their keys). Built once per training run, so refreshes never recompile."""
    n = cfg.sfl.batch_size
    sampler = cfg.problem_sampler
    if success_fn is None:
        def success_fn(params: dict[str, Any], problems: Problem, key: jax.Array) -> jax.Array:
            return evaluate(params, problems, key, cfg.max_steps, cfg.net.hidden)

    def refresh(ts: TrainState) -> TrainState:
        key, k1, k2, k3 = jax.random.split(ts.key, 4)
        cands = jax.vmap(sample_problem, in_axes=(0, None))(jax.random.split(k1, n), sampler)
        ok = jax.vmap(lambda k: success_fn(ts.params, cands, k))(jax.random.split(k2, reps))
        rates = jnp.mean(ok.astype(jnp.float32), axis=0)
        return ts._replace(sfl=C.sfl_refresh(k3, cands, rates, cfg.sfl), key=key)

    return jax.jit(refresh)


def buffer_composition(cfg: TrainConfig, ts: TrainState, sampled: Problem) -> dict[str, float]:
    """Solvable fraction, mean rooms and mean RM states of the buffer (PLR/ACCEL) or of the batch; for a
    buffer also the replay probability mass on solvable entries, the fraction ever solved and the mean
    score of solvable and of unsolvable entries."""
    buffered = cfg.method in ("plr", "accel", "accel0") and int(ts.buffer.size) > 0
    if buffered:  # the whole buffer to the host, sliced there (a device slice would compile per size)
        n = int(ts.buffer.size)
        buf = jax.device_get(ts.buffer)
        host = jax.tree_util.tree_map(lambda a: a[:n], buf.problems)
        extra = {"buffer_mean_generation": float(buf.generation[:n].mean()),
                 "buffer_mean_edits": float(buf.num_edits[:n].mean())}
    else:
        host, extra = jax.device_get(sampled), {}
    solvable = solvable_batch(host)
    out = {"solvable_fraction": float(solvable.mean()),
           "mean_rooms": float(np.asarray(host.level.n_rooms).mean()),
           "mean_rm_states": float(np.asarray(host.rm.n_states).mean())}
    if buffered:
        # what PLR⊥/ACCEL actually train on: the replay distribution's mass on solvable entries; and how the
        # score separates solvable from unsolvable entries, and how many entries were ever solved (R_max > 0)
        replay = np.asarray(_replay_distribution(ts.buffer, cfg.curriculum))[:n]
        scores = buf.scores[:n]
        out["replay_solvable_fraction"] = float((replay * solvable).sum() / max(replay.sum(), 1e-12))
        out["ever_solved_fraction"] = float((buf.max_return[:n] > 0).mean())
        out["score_solvable"] = float(scores[solvable].mean()) if solvable.any() else float("nan")
        out["score_unsolvable"] = float(scores[~solvable].mean()) if (~solvable).any() else float("nan")
    out.update(extra)
    return out


_replay_distribution = jax.jit(C.replay_distribution, static_argnums=1)




def save_checkpoint(path: str | Path, ts: TrainState, cfg: TrainConfig) -> None:
    """Parameters, optimiser state and buffer as ``.npz`` (no pickle), with the config as JSON."""
    P.save_checkpoint(path, ts, asdict(cfg))


def load_checkpoint(path: str | Path, cfg: TrainConfig) -> TrainState:
    """Restore a :func:`save_checkpoint` file into a state shaped by ``cfg``."""
    return P.load_checkpoint(path, init_train_state(cfg))


def heldout_set(n: int, seed: int = 123) -> Problem:
    """Solvable level-conditioned problems for the CVaR evaluation (host-side filter)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 4 * n)
    probs = jax.device_get(sample_problems(keys, ProblemSampler(mode="level_conditioned")))
    ok = np.flatnonzero(solvable_batch(probs))[:n]
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a[ok]), probs)


def train_functions(cfg: TrainConfig, compiled: dict | None = None) -> tuple[Any, Any, Any]:
    """``(update, evaluate, refresh)`` jitted for ``cfg`` (``refresh``: SFL's, else None).

    ``compiled``: a dict shared by several runs; runs whose configurations differ only in ``seed`` and
    ``updates`` (nothing the jitted functions see) then share one set of functions, so each is compiled
    once, not once per seed (on a GPU a compile takes longer than a short run's updates)."""
    def build(cfg: TrainConfig) -> tuple[Any, Any, Any]:
        return (make_update(cfg),
                jax.jit(lambda p, probs, k: evaluate(p, probs, k, cfg.max_steps, cfg.net.hidden)),
                make_sfl_refresh(cfg) if cfg.method == "sfl" else None)

    return P.compiled_for(cfg, build, compiled)


def train(cfg: TrainConfig, out: str | Path | None = None, log_every: int = 5, eval_every: int = 0,
          ckpt_every: int = 0, heldout: int = 64, progress: bool = True,
          compiled: dict | None = None) -> list[dict[str, float]]:
    """Run ``cfg.updates`` updates; returns the logged metrics (also written to ``out/metrics.jsonl``).

    ``compiled``: see :func:`train_functions` (pass one dict to the runs of several seeds)."""
    from .probes import probe_set

    out_dir = Path(out) if out is not None else None
    log = P.MetricsLog(out_dir)
    ts = init_train_state(cfg)
    update, eval_fn, refresh = train_functions(cfg, compiled)
    names, probes = probe_set() if eval_every else (None, None)
    held = heldout_set(heldout) if eval_every else None
    rows: list[dict[str, float]] = []
    it: Sequence[int] | Any = range(cfg.updates)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"{cfg.method}", unit="upd")
    t0 = time.perf_counter()
    steps = 0
    for u in it:
        if cfg.method == "sfl" and u % cfg.sfl.update_period == 0:
            ts = refresh(ts)
        ts, (m, sampled) = update(ts)
        steps += cfg.num_envs * cfg.rollout_len
        row = {"update": u + 1, "env_steps": steps}
        if (u + 1) % log_every == 0 or u + 1 == cfg.updates:
            row.update({k: float(v) for k, v in m.items()})
            row.update(buffer_composition(cfg, ts, sampled))
            row["steps_per_s_wall"] = steps / (time.perf_counter() - t0)  # compile included
        if eval_every and ((u + 1) % eval_every == 0 or u + 1 == cfg.updates):
            k1, k2 = jax.random.split(jax.random.PRNGKey(u))
            probe_ok = evaluate_on_device(eval_fn, ts.params, probes, key=k1, episodes=4)
            row["probe_solve_rate"] = float(probe_ok.mean())
            row.update({f"probe/{n}": float(x) for n, x in zip(names, probe_ok)})
            held_ok = evaluate_on_device(eval_fn, ts.params, held, key=k2, episodes=4)
            for a in (0.1, 0.5, 1.0):
                row[f"cvar_{a}"] = cvar(held_ok, a)
            row["heldout_success"] = held_ok.tolist()  # per problem: the columns of magister.evaluation
        if len(row) > 2:
            rows.append(row)
            logger.info("update %d: %s", u + 1,
                        {k: round(v, 4) for k, v in row.items() if not isinstance(v, list)})
            if progress and hasattr(it, "set_postfix") and "solvable_fraction" in row:
                it.set_postfix(solvable=round(row["solvable_fraction"], 3),
                               solved=round(row.get("solve_rate_train", 0.0), 3))
            log.write(row)
        if out_dir is not None and ckpt_every and ((u + 1) % ckpt_every == 0 or u + 1 == cfg.updates):
            save_checkpoint(out_dir / f"ckpt_{u + 1}.npz", ts, cfg)
    log.close()
    if out_dir is not None and rows:
        plot_composition({cfg.method: rows}, out_dir / "buffer_composition.png")
    return rows


def plot_composition(runs: dict[str, list[dict[str, float]]], path: str | Path) -> None:
    """Solvable fraction, rooms and RM states over env steps, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for name, rows in runs.items():
        rows = [r for r in rows if "solvable_fraction" in r]
        x = [r["env_steps"] for r in rows]
        for ax, key in zip(axes, ("solvable_fraction", "mean_rooms", "mean_rm_states")):
            ax.plot(x, [r[key] for r in rows], label=name)
            ax.set_title(key.replace("_", " "))
            ax.set_xlabel("env steps")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.minigrid_rm.ppo", description=__doc__,
                                 epilog="Needs the 'jax' extra; --out (its plot) also needs matplotlib "
                                        "(extra 'eval') and the progress bar tqdm (extra 'examples'; or "
                                        "--no-progress).",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=METHODS, default="plr")
    ap.add_argument("--sampler", choices=("independent", "level_conditioned"), default="independent")
    ap.add_argument("--task", choices=("sequential", "random_walk"), default="sequential")
    ap.add_argument("--num-envs", type=int, default=32)
    ap.add_argument("--rollout-len", type=int, default=64)
    ap.add_argument("--max-steps", type=int, default=128)
    ap.add_argument("--updates", type=int, default=50)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--ent-coef", type=float, default=0.01)
    ap.add_argument("--buffer-size", type=int, default=1000)
    ap.add_argument("--score", choices=C.SCORES, default="max_mc")
    ap.add_argument("--min-edits", type=int, default=7)
    ap.add_argument("--max-edits", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=str, default=None, help="output folder (metrics, checkpoints, plot)")
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--eval-every", type=int, default=0, help="updates between evaluations (0: never)")
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    require({**({"matplotlib": "eval"} if a.out else {}), **({} if a.no_progress else {"tqdm": "examples"})},
            "python -m magister.examples.minigrid_rm.ppo")  # now, not after training
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cur = method_curriculum(a.method, buffer_size=a.buffer_size, score=a.score, min_edits=a.min_edits,
                            max_edits=a.max_edits)
    cfg = TrainConfig(method=a.method, sampler=a.sampler, task=a.task, num_envs=a.num_envs,
                      rollout_len=a.rollout_len,
                      max_steps=a.max_steps, updates=a.updates, lr=a.lr, ent_coef=a.ent_coef, curriculum=cur,
                      seed=a.seed)
    return train(cfg, a.out, log_every=a.log_every, eval_every=a.eval_every, ckpt_every=a.ckpt_every,
                 progress=not a.no_progress)


if __name__ == "__main__":
    main()


