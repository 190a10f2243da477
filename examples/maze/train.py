"""Recurrent PPO on JaxUED's maze with DR, PLR, PLR⊥, ACCEL, PAIRED, REPAIRED or the minimax adversary.

Papers: Dennis et al. 2020 (PAIRED, minimax adversary; the maze), Jiang et al. 2021 (PLR; Robust PLR / PLR⊥
and REPAIRED), Parker-Holder et al. 2022 (ACCEL), Schulman et al. 2017 (PPO). The environment, its
generator, mutator, editor, prefab mazes and (for the parity arm) level sampler are JaxUED's
(:mod:`.env`); the curricula are :mod:`magister.curricula.jax`; PPO, GAE, the GRU and checkpoints are
:mod:`magister.examples.jax_ppo`, shared with the Minigrid×RM trainer.

One *update* (jitted end to end, one compile per method):

1. new levels: JaxUED's generator (``n_walls`` random walls; DR, PLR, PLR⊥, ACCEL) or the adversary's
   ``num_edits`` edits in ``MazeEditor`` (PAIRED, minimax, REPAIRED;
   :func:`~magister.curricula.jax.edit_levels`);
2. the curriculum picks ``num_envs`` levels (replay / new / ACCEL child; PLR⊥, ACCEL, REPAIRED: only
   replays are trained on);
3. the protagonist (and for PAIRED/REPAIRED the antagonist) plays ``rollout_len`` steps on each level,
   restarting it at each episode end;
4. scores into the buffer: MaxMC (PLR, PLR⊥, ACCEL) or PAIRED's regret (REPAIRED); the adversary's
   reward: regret (PAIRED, REPAIRED) or the protagonist's negated mean return (minimax);
5. PPO for the students on their trained levels and for the adversary on the levels it made.

*Parity arms* ``robust_plr_jaxued`` and ``accel_jaxued``: the same loop with JaxUED's ``LevelSampler`` in
place of magister's buffer (:func:`jaxued_sampler`; settings mapped in :data:`PARITY_MAP`).

Settings are JaxUED's maze trainers' (``maze_plr.py``, ``maze_paired.py``): 32 envs, 256 steps, PPO 5
epochs of 1 minibatch, ``lr 1e-4``, ``gamma 0.995``, ``lambda 0.98``, entropy ``1e-3``; PLR replay 0.8,
staleness 0.3, rank with temperature 0.3, fill 0.5 before replay, MaxMC; ACCEL 5 edits; DR 25 walls;
adversary 50 steps. CPU departures (:data:`CPU_SCALE`): buffer 1000 (JaxUED: 4000), GRU 64 (LSTM 256).

Run ``python -m magister.examples.maze.train --help`` (in the jaxued virtualenv: ``bash
benchmarks/_jaxued_env.sh``). Output (``--out``): ``metrics.jsonl``, ``eval.json`` (per-maze solve rates,
written before the plot), TensorBoard events, checkpoints ``ckpt_<update>.npz`` (every ``--ckpt-every``
updates and the last; ``--resume`` continues from one) and ``curves.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ...curricula import jax as L
from ...evaluation import evaluate_on_device
from .. import jax_ppo as P
from . import env as E

logger = logging.getLogger(__name__)

__all__ = ["CPU_SCALE", "METHODS", "PARITY_MAP", "MazeConfig", "eval_set", "evaluate", "heldout_eval",
           "init_state", "main", "make_update", "resume_state", "train", "train_functions"]

METHODS = ("dr", "plr", "robust_plr", "accel", "paired", "repaired", "minimax", "robust_plr_jaxued",
           "accel_jaxued")
BUFFERED = ("plr", "robust_plr", "accel", "repaired")
JAXUED_ARMS = ("robust_plr_jaxued", "accel_jaxued")
ADVERSARIAL = ("paired", "repaired", "minimax")
NUM_ACTIONS = 7  # Maze's actions (left, right, forward, pickup, drop, toggle, done)
NUM_OBJECTS = 11  # Maze's object indices (unseen .. agent)

#: Where the trainer's defaults depart from JaxUED's maze trainers for a CPU run
CPU_SCALE = {"buffer_size": (1000, 4000), "hidden": (64, 256)}

#: magister PLR⊥ setting -> JaxUED ``LevelSampler`` argument, as the parity arm maps them
PARITY_MAP = {
    "buffer_size": "capacity",
    "replay_prob": "replay_prob",
    "staleness_coef": "staleness_coeff",
    "min_fill_ratio": "minimum_fill_ratio",
    "prioritization='rank', temperature": "prioritization='rank', prioritization_params={'temperature'}",
    "level hash dedup (32-bit)": "duplicate_check=True (full level equality)",
}


@dataclass(frozen=True)
class MazeConfig:
    """Settings; defaults are JaxUED's maze trainers' except :data:`CPU_SCALE`."""

    method: str = "accel"
    num_envs: int = 32
    rollout_len: int = 256
    max_steps: int = 250
    updates: int = 50
    epochs: int = 5
    minibatches: int = 1
    gamma: float = 0.995
    gae_lambda: float = 0.98
    lr: float = 1e-4
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 1e-3
    max_grad_norm: float = 0.5
    n_walls: int = 25
    buffer_size: int = 1000
    replay_prob: float = 0.8
    staleness_coef: float = 0.3
    temperature: float = 0.3
    min_fill_ratio: float = 0.5
    num_edits: int = 5  # ACCEL edits per child
    hidden: int = 64
    adversary: L.PAIREDConfig = field(default_factory=L.PAIREDConfig)
    adv_hidden: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("num_envs", "rollout_len", "max_steps", "updates", "epochs", "minibatches", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_envs % self.minibatches:
            raise ValueError(f"num_envs ({self.num_envs}) must be divisible by minibatches "
                             f"({self.minibatches})")
        if self.method in ADVERSARIAL and self.adversary.num_edits < 4:
            raise ValueError("the maze editor needs at least 4 adversary steps (goal, turn, agent, walls)")

    @property
    def curriculum(self) -> L.PLRConfig:
        """The magister curriculum config of a buffered method (the same settings for all of them)."""
        common = {"buffer_size": self.buffer_size, "replay_prob": self.replay_prob,
                  "staleness_coef": self.staleness_coef, "temperature": self.temperature,
                  "min_fill_ratio": self.min_fill_ratio, "gamma": self.gamma, "gae_lambda": self.gae_lambda}
        if self.method in ("plr",):
            return L.PLRConfig(score="max_mc", **common)
        if self.method in ("accel", "accel_jaxued"):
            return L.ACCELConfig(min_edits=self.num_edits, max_edits=self.num_edits, **common)
        if self.method == "repaired":
            return L.REPAIREDConfig(**common)
        return L.RobustPLRConfig(**common)

    @property
    def adversary_objective(self) -> L.PAIREDConfig:
        return replace(self.adversary, objective="minimax" if self.method == "minimax" else
                       self.adversary.objective)


# ---------------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------------
def student_init(key: jax.Array, hidden: int) -> dict[str, Any]:
    """The student: one-hot objects of the 5x5 view + direction -> dense 64 -> GRU -> actor/critic (32)."""
    k = jax.random.split(key, 6)
    x_dim = 25 * NUM_OBJECTS + 4
    return {"embed": P.dense_init(k[0], x_dim, 64), "gru": P.gru_init(k[1], 64, hidden),
            "actor": [P.dense_init(k[2], hidden, 32), P.dense_init(k[3], 32, NUM_ACTIONS, 0.01)],
            "critic": [P.dense_init(k[4], hidden, 32), P.dense_init(k[5], 32, 1)]}


def student_gates(p: dict[str, Any], image: jax.Array, direction: jax.Array) -> jax.Array:
    """GRU input gates for observations with any leading dimensions (image ``[..., 5, 5, 3]``)."""
    obj = jax.nn.one_hot(image[..., 0], NUM_OBJECTS).reshape(image.shape[:-3] + (-1,))
    x = jnp.concatenate([obj, jax.nn.one_hot(direction, 4)], axis=-1)
    x = jax.nn.relu(P.dense(p["embed"], x))
    return x @ p["gru"]["wx"] + p["gru"]["b"]


def student_heads(p: dict[str, Any], h: jax.Array) -> tuple[jax.Array, jax.Array]:
    a = jnp.tanh(P.dense(p["actor"][0], h))
    v = jax.nn.relu(P.dense(p["critic"][0], h))
    return P.dense(p["actor"][1], a), P.dense(p["critic"][1], v)[..., 0]


def adversary_init(key: jax.Array, hidden: int, num_edits: int) -> dict[str, Any]:
    """The adversary: wall/goal/agent planes of the 13x13 map, time one-hot and random z -> dense ->
    actor (169 cells, masked) / critic. Feed-forward: the map and the step number make it Markov."""
    k = jax.random.split(key, 4)
    x_dim = 13 * 13 * 3 + (num_edits + 1) + 16
    return {"embed": P.dense_init(k[0], x_dim, hidden), "hid": P.dense_init(k[1], hidden, hidden),
            "actor": P.dense_init(k[2], hidden, 169, 0.01), "critic": P.dense_init(k[3], hidden, 1)}


def adversary_apply(p: dict[str, Any], obs: Any, num_edits: int) -> tuple[jax.Array, jax.Array]:
    """``(masked logits [..., 169], value [...])`` for editor observations."""
    img = obs.image[..., 0]
    planes = jnp.stack([img == 2, img == 8, img == 10], axis=-1).astype(jnp.float32)
    t = jax.nn.one_hot(jnp.minimum(obs.time, num_edits).astype(jnp.int32), num_edits + 1)
    x = jnp.concatenate([planes.reshape(planes.shape[:-3] + (-1,)), t, obs.random_z], axis=-1)
    h = jax.nn.relu(P.dense(p["hid"], jax.nn.relu(P.dense(p["embed"], x))))
    logits = jnp.where(obs.action_mask, P.dense(p["actor"], h), -1e9)
    return logits, P.dense(p["critic"], h)[..., 0]


# ---------------------------------------------------------------------------------------------------
# Rollouts and evaluation
# ---------------------------------------------------------------------------------------------------
class Traj(NamedTuple):
    image: jax.Array
    direction: jax.Array
    first: jax.Array
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array


def rollout(env: Any, env_params: Any, p: dict[str, Any], levels: Any, key: jax.Array, steps: int,
            hidden: int) -> tuple[Traj, jax.Array]:
    """``steps`` steps on each level (``[B]``), restarting a level at each episode end (JaxUED's
    auto-replay); returns the time-major trajectory and the bootstrap value."""
    b = levels.wall_map.shape[0]
    k0, key = jax.random.split(key)
    obs0, s0 = jax.vmap(env.reset_to_level, (0, 0, None))(jax.random.split(k0, b), levels, env_params)

    def one(carry: tuple, k: jax.Array) -> tuple[tuple, Traj]:
        obs, s, h, first = carry
        ka, ks = jax.random.split(k)
        h = jnp.where(first[:, None], 0.0, h)
        h = P.gru_cell(p["gru"], h, student_gates(p, obs.image, obs.agent_dir))
        logits, v = student_heads(p, h)
        a = jax.random.categorical(ka, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(b), a]
        obs2, s2, r, done, _ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(ks, b), s, a, env_params)
        pick = lambda x, y: jnp.where(done.reshape(done.shape + (1,) * (x.ndim - 1)), x, y)  # noqa: E731
        s2 = jax.tree_util.tree_map(pick, s0, s2)
        obs2 = jax.tree_util.tree_map(pick, obs0, obs2)
        out = Traj(obs.image, obs.agent_dir, first, a.astype(jnp.int32), logp, v, r, done)
        return (obs2, s2, h, done), out

    init = (obs0, s0, jnp.zeros((b, hidden)), jnp.ones(b, bool))
    (obs, _, h, first), traj = jax.lax.scan(one, init, jax.random.split(key, steps))
    h = jnp.where(first[:, None], 0.0, h)
    h = P.gru_cell(p["gru"], h, student_gates(p, obs.image, obs.agent_dir))
    return traj, student_heads(p, h)[1]


def evaluate(env: Any, env_params: Any, p: dict[str, Any], levels: Any, key: jax.Array,
             hidden: int) -> jax.Array:
    """Per level, whether the first episode (sampled actions, at most ``max_steps``) reached the goal."""
    b = levels.wall_map.shape[0]
    k0, key = jax.random.split(key)
    obs, s = jax.vmap(env.reset_to_level, (0, 0, None))(jax.random.split(k0, b), levels, env_params)

    def one(carry: tuple, k: jax.Array) -> tuple[tuple, None]:
        obs, s, h, ended, solved = carry
        ka, ks = jax.random.split(k)
        h = P.gru_cell(p["gru"], h, student_gates(p, obs.image, obs.agent_dir))
        a = jax.random.categorical(ka, student_heads(p, h)[0])
        obs, s, r, done, _ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(ks, b), s, a, env_params)
        return (obs, s, h, ended | done, solved | ((r > 0) & ~ended)), None

    init = (obs, s, jnp.zeros((b, hidden)), jnp.zeros(b, bool), jnp.zeros(b, bool))
    (_, _, _, _, solved), _ = jax.lax.scan(one, init, jax.random.split(key, env_params.max_steps_in_episode))
    return solved


# ---------------------------------------------------------------------------------------------------
# JaxUED's LevelSampler (the parity arm)
# ---------------------------------------------------------------------------------------------------
def jaxued_sampler(cfg: MazeConfig) -> Any:
    """JaxUED's ``LevelSampler`` with the trainer's PLR⊥ settings (:data:`PARITY_MAP`)."""
    E.require_jaxued()
    from jaxued.level_sampler import LevelSampler

    return LevelSampler(capacity=cfg.buffer_size, replay_prob=cfg.replay_prob,
                        staleness_coeff=cfg.staleness_coef, minimum_fill_ratio=cfg.min_fill_ratio,
                        prioritization="rank", prioritization_params={"temperature": cfg.temperature},
                        duplicate_check=True)


def _jaxued_sample(ls: Any, key: jax.Array, sampler: dict, new: Any,
                   has_child: jax.Array) -> tuple[dict, L.Sample]:
    """Per sample: the pending child, else replay with JaxUED's decision and weights, else new."""
    b = has_child.shape[0]

    def one(sampler: dict, x: tuple) -> tuple[dict, tuple]:
        k, child = x
        k1, k2 = jax.random.split(k)
        replay = ls.sample_replay_decision(sampler, k1) & ~child
        sampler, (idx, _) = jax.lax.cond(replay, lambda s: ls.sample_replay_level(s, k2),
                                         lambda s: (s, (jnp.int32(0), ls.get_levels(s, 0))), sampler)
        return sampler, (replay, idx.astype(jnp.int32))

    sampler, (replay, idx) = jax.lax.scan(one, sampler, (jax.random.split(key, b), has_child))
    replayed = jax.tree_util.tree_map(lambda a: a[idx], sampler["levels"])
    levels = L.buffer.where_levels(replay, replayed, new)
    return sampler, L.Sample(levels, replay, idx, replay, has_child)


def _jaxued_update(ls: Any, sampler: dict, smp: L.Sample, scores: jax.Array, r_max: jax.Array) -> dict:
    """Replays update their entry; new levels and children are offered to the buffer (JaxUED's insert)."""
    def one(sampler: dict, x: tuple) -> tuple[dict, None]:
        rep, idx, level, s, r = x
        extra = {"max_return": r}
        sampler = jax.lax.cond(rep, lambda sp: ls.update(sp, idx, s, extra),
                               lambda sp: ls.insert(sp, level, s, extra)[0], sampler)
        return sampler, None

    sampler, _ = jax.lax.scan(one, sampler, (smp.replay, smp.index, smp.levels, scores, r_max))
    return sampler


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
class MazeState(NamedTuple):
    params: dict[str, Any]
    opt_state: Any
    ant_params: Any  # PAIRED / REPAIRED: the antagonist
    ant_opt_state: Any
    adv_params: Any  # PAIRED / REPAIRED / minimax: the adversary
    adv_opt_state: Any
    buffer: Any  # magister's LevelBuffer, or JaxUED's sampler dict for the parity arms
    children: Any
    has_child: jax.Array
    child_gen: jax.Array
    child_edits: jax.Array
    key: jax.Array
    step: jax.Array


def _env_bits(cfg: MazeConfig) -> tuple[Any, Any]:
    return E.make_env(cfg.max_steps)


def init_state(cfg: MazeConfig) -> MazeState:
    """Parameters, optimiser states, the empty buffer and the RNG of a run."""
    key = jax.random.PRNGKey(cfg.seed)
    kp, ka, kd, kx, key = jax.random.split(key, 5)
    opt = P.optimizer(cfg.lr, cfg.max_grad_norm)
    params = student_init(kp, cfg.hidden)
    opt_state = opt.init(ravel_pytree(params)[0])
    ant = ant_opt = adv = adv_opt = None
    if cfg.method in ("paired", "repaired"):
        ant = student_init(ka, cfg.hidden)
        ant_opt = opt.init(ravel_pytree(ant)[0])
    if cfg.method in ADVERSARIAL:
        adv = adversary_init(kd, cfg.adv_hidden, cfg.adversary.num_edits)
        adv_opt = opt.init(ravel_pytree(adv)[0])
    example = jax.tree_util.tree_map(lambda a: a[0], E.generated_levels(kx, 1, cfg.n_walls))
    b = cfg.num_envs
    batch = jax.tree_util.tree_map(lambda a: jnp.zeros((b,) + a.shape, a.dtype), example)
    if cfg.method in JAXUED_ARMS:
        buffer = jaxued_sampler(cfg).initialize(example, {"max_return": jnp.float32(0.0)})
        buffer = {**buffer, "size": jnp.int32(0), "episode_count": jnp.int32(0)}  # arrays, not Python ints
    else:
        buffer = L.init_buffer(example, cfg.buffer_size if cfg.method in BUFFERED else 1)
    zi = jnp.zeros(b, jnp.int32)
    return MazeState(params, opt_state, ant, ant_opt, adv, adv_opt, buffer, batch, jnp.zeros(b, bool), zi, zi,
                     key, jnp.int32(0))


def _student_loss(cfg: MazeConfig, traj: Traj, adv: jax.Array, targets: jax.Array, train: jax.Array) -> Any:
    def loss_fn(p: dict[str, Any], idx: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        sub = jax.tree_util.tree_map(lambda x: x[:, idx], traj)
        hs = P.gru_scan(p["gru"], student_gates(p, sub.image, sub.direction), sub.first, cfg.hidden)
        logits, values = student_heads(p, hs)
        return P.ppo_loss(logits, values, sub.action, sub.logp, sub.value, adv[:, idx], targets[:, idx],
                          train[idx], cfg.clip, cfg.vf_coef, cfg.ent_coef)
    return loss_fn


def _train_student(cfg: MazeConfig, opt: Any, key: jax.Array, params: Any, opt_state: Any, traj: Traj,
                   adv: jax.Array, targets: jax.Array, train: jax.Array) -> tuple[Any, Any, dict]:
    return P.ppo_update(key, params, opt_state, opt, _student_loss(cfg, traj, adv, targets, train), train,
                        cfg.epochs, cfg.minibatches)


def _train_adversary(cfg: MazeConfig, opt: Any, key: jax.Array, params: Any, opt_state: Any,
                     traj: L.EditTrajectory, reward: jax.Array, mask: jax.Array) -> tuple[Any, Any, dict]:
    acfg = cfg.adversary_objective
    adv, targets = L.editor_advantages(traj, reward, acfg)
    e = acfg.num_edits

    def loss_fn(p: dict[str, Any], idx: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        obs = jax.tree_util.tree_map(lambda x: x[:, idx], traj.obs)
        logits, values = adversary_apply(p, obs, e)
        return P.ppo_loss(logits, values, traj.action[:, idx], traj.logp[:, idx], traj.value[:, idx],
                          adv[:, idx], targets[:, idx], mask[idx], cfg.clip, cfg.vf_coef, acfg.ent_coef)

    params, opt_state, aux = P.ppo_update(key, params, opt_state, opt, loss_fn, mask, cfg.epochs,
                                          cfg.minibatches)
    return params, opt_state, {f"adversary_{k}": v for k, v in aux.items()}


def make_update(cfg: MazeConfig) -> Any:
    """The jitted ``update(state) -> (state, metrics)`` of ``cfg.method``."""
    env, env_params = _env_bits(cfg)
    E.require_jaxued()
    from jaxued.environments.maze import make_level_generator, make_level_mutator

    generate = jax.vmap(make_level_generator(13, 13, cfg.n_walls))
    one_edit = make_level_mutator(1)
    opt = P.optimizer(cfg.lr, cfg.max_grad_norm)
    b = cfg.num_envs
    m = cfg.method
    cur = cfg.curriculum if (m in BUFFERED or m in JAXUED_ARMS) else None
    ls = jaxued_sampler(cfg) if m in JAXUED_ARMS else None
    mutating = m in ("accel", "accel_jaxued")
    acfg = cfg.adversary_objective
    editor = E.editor_fns(env)[1] if m in ADVERSARIAL else None

    def play(params: Any, levels: Any, key: jax.Array) -> tuple[Traj, jax.Array, jax.Array, L.EpisodeReturns]:
        traj, last_v = rollout(env, env_params, params, levels, key, cfg.rollout_len, cfg.hidden)
        adv, targets = P.gae(traj.reward, traj.value, traj.done, last_v, cfg.gamma, cfg.gae_lambda)
        return traj, adv, targets, L.episode_returns(traj.reward, traj.done)

    def update(ts: MazeState) -> tuple[MazeState, dict[str, jax.Array]]:
        key, k_new, k_cur, k_roll, k_ant, k_mut, k_ppo, k_ppo2, k_ppo3 = jax.random.split(ts.key, 9)
        metrics: dict[str, jax.Array] = {}
        edit_traj = None
        if m in ADVERSARIAL:
            policy = lambda p, o: adversary_apply(p, o, acfg.num_edits)  # noqa: E731
            new, edit_traj = L.edit_levels(k_new, ts.adv_params, policy, editor, b, acfg.num_edits)
            new = jax.tree_util.tree_map(jnp.asarray, new)
        else:
            new = generate(jax.random.split(k_new, b))
        buffer = ts.buffer
        if m in ("dr", "paired", "minimax"):
            smp = L.dr_sample(new)
        elif m in JAXUED_ARMS:
            has_child = ts.has_child if mutating else jnp.zeros(b, bool)
            buffer, smp = _jaxued_sample(ls, k_cur, buffer, new, has_child)
            if mutating:
                smp = smp._replace(levels=L.buffer.where_levels(has_child, ts.children, smp.levels))
        else:
            buffer, smp = L.plr_sample(k_cur, buffer, new, cur, ts.children if mutating else None,
                                       ts.has_child if mutating else None)
        levels = smp.levels
        traj, adv, targets, pro = play(ts.params, levels, k_roll)
        solved = (pro.max > 0).astype(jnp.float32)
        metrics.update({"solve_rate_train": (solved * smp.train).sum() / jnp.maximum(smp.train.sum(), 1),
                        "solve_rate_all": solved.mean(), "train_fraction": smp.train.mean(),
                        "replay_fraction": smp.replay.mean(), "return_mean": pro.mean.mean(),
                        "mean_walls": levels.wall_map.sum((1, 2)).mean()})
        ant = ant_opt = None
        if acfg.needs_antagonist and m in ADVERSARIAL:
            a_traj, a_adv, a_tgt, antr = play(ts.ant_params, levels, k_ant)
            ant, ant_opt, _ = _train_student(cfg, opt, k_ppo2, ts.ant_params, ts.ant_opt_state, a_traj, a_adv,
                                             a_tgt, smp.train)
            metrics["antagonist_return"] = antr.mean.mean()
        else:
            antr = None
        # scores and buffer
        children, has_child, child_gen, child_edits = ts.children, ts.has_child, ts.child_gen, ts.child_edits
        if m in BUFFERED or m in JAXUED_ARMS:
            if m in JAXUED_ARMS:
                prev = jnp.where(smp.replay, buffer["levels_extra"]["max_return"][smp.index], 0.0)
            else:
                prev = jnp.where(smp.replay, buffer.max_return[smp.index], 0.0)
            r_max = jnp.maximum(prev, pro.max)
            if m == "repaired":
                scores = L.regret(pro, antr)
            else:
                scores = L.rollout_scores("max_mc", traj.value, adv, r_max, solved, solved)
            if m in JAXUED_ARMS:
                buffer = _jaxued_update(ls, buffer, smp, scores, r_max)
            else:
                gen = jnp.where(smp.child, ts.child_gen, 0)
                edits = jnp.where(smp.child, ts.child_edits, 0)
                buffer = L.plr_update(buffer, levels, L.hash_levels(levels), scores, r_max, gen, edits)
            metrics["score_mean"] = scores.mean()
            if mutating:
                children, n = L.accel_mutate(k_mut, levels, lambda k, lv: one_edit(k, lv, 1), cur)
                has_child = smp.replay
                if m == "accel":
                    child_gen, child_edits = L.child_provenance(buffer, smp, n)
        # students
        params, opt_state, aux = _train_student(cfg, opt, k_ppo, ts.params, ts.opt_state, traj, adv, targets,
                                                smp.train)
        metrics.update(aux)
        adv_params, adv_opt = ts.adv_params, ts.adv_opt_state
        if m in ADVERSARIAL:
            reward = L.adversary_reward(acfg, pro, antr)
            mask = L.repaired_masks(smp)[1] if m == "repaired" else jnp.ones(b, bool)
            adv_params, adv_opt, a_aux = _train_adversary(cfg, opt, k_ppo3, ts.adv_params, ts.adv_opt_state,
                                                          edit_traj, reward, mask)
            metrics.update(a_aux)
            metrics["adversary_reward"] = (reward * mask).sum() / jnp.maximum(mask.sum(), 1)
        ts = MazeState(params, opt_state, ant if ant is not None else ts.ant_params,
                       ant_opt if ant_opt is not None else ts.ant_opt_state, adv_params, adv_opt, buffer,
                       children, has_child, child_gen, child_edits, key, ts.step + 1)
        return ts, (metrics, levels)

    return jax.jit(update)


def buffer_stats(cfg: MazeConfig, ts: MazeState, sampled: Any) -> dict[str, float]:
    """The replay statistics of the parity A/B: buffer size, solvable share, mean score, mean staleness
    (levels sampled since an entry was last sampled or inserted); for unbuffered methods the solvable
    share of the batch."""
    m = cfg.method
    if m in JAXUED_ARMS:
        buf = jax.device_get(ts.buffer)
        n = int(buf["size"])
        if n == 0:
            return {"buffer_size": 0.0}
        levels = jax.tree_util.tree_map(lambda a: a[:n], buf["levels"])
        stale = float((buf["episode_count"] - buf["timestamps"][:n]).mean())
        scores = buf["scores"][:n]
    elif m in BUFFERED:
        buf = jax.device_get(ts.buffer)
        n = int(buf.size)
        if n == 0:
            return {"buffer_size": 0.0}
        levels = jax.tree_util.tree_map(lambda a: a[:n], buf.levels)
        stale = float((buf.clock - buf.last_sampled[:n]).mean())
        scores = buf.scores[:n]
    else:
        return {"solvable_fraction": float(E.solvable(jax.device_get(sampled)).mean())}
    return {"buffer_size": float(n), "solvable_fraction": float(E.solvable(levels).mean()),
            "buffer_score_mean": float(np.mean(scores)), "buffer_staleness_mean": stale}


def heldout_eval(cfg: MazeConfig, params: Any, levels: Any, key: jax.Array, attempts: int = 10,
                 eval_fn: Any = None) -> np.ndarray:
    """Per level, the solve rate over ``attempts`` sampled episodes
    (:func:`magister.evaluation.evaluate_on_device` of :func:`evaluate`)."""
    return evaluate_on_device(make_eval(cfg) if eval_fn is None else eval_fn, params, levels, key=key,
                              episodes=attempts)


def make_eval(cfg: MazeConfig) -> Any:
    env, env_params = _env_bits(cfg)
    return jax.jit(lambda p, lv, k: evaluate(env, env_params, p, lv, k, cfg.hidden))


def eval_set(heldout: int) -> tuple[list[str], Any]:
    """The held-out set: the prefab mazes, then ``heldout`` fixed solvable generated 60-wall mazes."""
    pre = E.prefab_levels()
    names = list(E.HELDOUT_PREFABS)
    if heldout:
        gen = E.heldout_levels(heldout)
        pre = jax.tree_util.tree_map(lambda a, c: jnp.concatenate([a, c.astype(a.dtype)]), pre, gen)
        names += [f"generated_{i}" for i in range(heldout)]
    return names, pre


def _summary(names: list[str], rates: np.ndarray) -> dict[str, float]:
    n_pre = len(E.HELDOUT_PREFABS)
    out = {f"solve/{n}": float(r) for n, r in zip(names[:n_pre], rates[:n_pre])}
    out["solve/prefab_mean"] = float(rates[:n_pre].mean())
    if len(names) > n_pre:
        out["solve/generated_mean"] = float(rates[n_pre:].mean())
    out["solve/cvar_0.1"] = P.cvar(rates, 0.1)
    out["solve/cvar_0.5"] = P.cvar(rates, 0.5)
    return out


#: the jitted functions of every configuration trained in this process (:func:`jax_ppo.compiled_for`): the
#: seeds of a sweep compile once
COMPILED: dict = {}


def train_functions(cfg: MazeConfig) -> tuple[Any, Any]:
    """``(update, evaluate)`` jitted for ``cfg``, shared by the runs that differ only in seed and length."""
    return P.compiled_for(cfg, lambda c: (make_update(c), make_eval(c)), COMPILED)


def checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The configuration a checkpoint was written with (``asdict(MazeConfig)`` as JSON)."""
    with np.load(path, allow_pickle=False) as data:
        return json.loads(str(data["__config__"]))


def resume_state(cfg: MazeConfig, path: str | Path) -> MazeState:
    """The state saved at ``path`` by :func:`train`, checked against ``cfg``: every setting but ``updates``
    must be the checkpoint's (a :class:`ValueError` names those that differ)."""
    saved = checkpoint_config(path)
    want = json.loads(json.dumps(asdict(cfg), default=str))
    diff = sorted(k for k in set(saved) | set(want) if k != "updates" and saved.get(k) != want.get(k))
    if diff:
        raise ValueError(f"checkpoint {path} was written with other settings: "
                         + ", ".join(f"{k}={saved.get(k)!r} (now {want.get(k)!r})" for k in diff))
    return P.load_checkpoint(path, init_state(cfg))


def train(cfg: MazeConfig, out: str | Path | None = None, log_every: int = 10, eval_every: int = 0,
          ckpt_every: int = 0, heldout: int = 32, attempts: int = 10, progress: bool = True,
          plot: bool = True, resume: str | Path | None = None) -> dict[str, Any]:
    """Run ``cfg.updates`` updates; returns ``{"rows": logged metrics, "eval": final per-maze solve rates,
    "names": maze names, "seconds": wall time, "update_seconds": per update after the first (compile)}``
    (also written to ``out``). With ``out``, a checkpoint ``ckpt_<update>.npz`` every ``ckpt_every``
    updates and at the end. ``resume``: continue from such a checkpoint (the same run as one never
    stopped: the RNG key is part of the state); the rows ``out/metrics.jsonl`` holds up to the checkpoint
    are kept and later ones, from the stopped run, are replaced. Runs differing only in ``seed``/``updates``
    share their compiled functions (:data:`COMPILED`)."""
    out_dir = Path(out) if out is not None else None
    update, eval_fn = train_functions(cfg)
    names, levels = eval_set(heldout)
    ts = init_state(cfg) if resume is None else resume_state(cfg, resume)
    start = int(ts.step)
    if start > cfg.updates:
        raise ValueError(f"the checkpoint is at update {start}, past updates={cfg.updates}")
    rows: list[dict[str, Any]] = []
    if resume is not None and out_dir is not None and (out_dir / "metrics.jsonl").is_file():
        lines = (out_dir / "metrics.jsonl").read_text().splitlines()
        rows = [r for r in map(json.loads, lines) if r["update"] <= start]
        if len(rows) < len(lines):
            logger.info("resuming at update %d: %d rows logged after it by the stopped run are replaced",
                        start, len(lines) - len(rows))
        (out_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = P.MetricsLog(out_dir)
    it: Any = range(start, cfg.updates)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=cfg.method, unit="upd", initial=start, total=cfg.updates)
    t0 = t1 = time.perf_counter()
    steps = start * cfg.num_envs * cfg.rollout_len
    k_eval = jax.random.PRNGKey(10_000 + cfg.seed)
    rates = np.zeros(0)
    for u in it:
        ts, (mt, sampled) = update(ts)
        if u == start:  # the first update compiles: time the others
            jax.block_until_ready(ts.params)
            t1 = time.perf_counter()
        steps += cfg.num_envs * cfg.rollout_len
        row: dict[str, float] = {"update": u + 1, "env_steps": steps}
        last = u + 1 == cfg.updates
        if (u + 1) % log_every == 0 or last:
            row.update({k: float(v) for k, v in mt.items()})
            row.update(buffer_stats(cfg, ts, sampled))
            row["steps_per_s_wall"] = (steps - start * cfg.num_envs * cfg.rollout_len) / (
                time.perf_counter() - t0)
        if (eval_every and (u + 1) % eval_every == 0) or last:
            rates = heldout_eval(cfg, ts.params, levels, jax.random.fold_in(k_eval, u), attempts, eval_fn)
            row.update(_summary(names, rates))
        if len(row) > 2:
            rows.append(row)
            log.write(row)
            if progress and hasattr(it, "set_postfix") and "solve_rate_all" in row:
                post = {"solved": round(row["solve_rate_all"], 3)}
                if "solve/prefab_mean" in row:
                    post["prefab"] = round(row["solve/prefab_mean"], 3)
                it.set_postfix(**post)
        if out_dir is not None and ((ckpt_every and (u + 1) % ckpt_every == 0) or last):
            P.save_checkpoint(out_dir / f"ckpt_{u + 1}.npz", ts, asdict(cfg))
    jax.block_until_ready(ts.params)
    log.close()
    seconds = time.perf_counter() - t0
    # seconds per update after the compile, evaluations included (NaN for a one-update run)
    done = cfg.updates - start
    per_update = (time.perf_counter() - t1) / (done - 1) if done > 1 else float("nan")
    if rates.size == 0:  # resumed at the last update: evaluate the checkpoint
        rates = heldout_eval(cfg, ts.params, levels, jax.random.fold_in(k_eval, cfg.updates - 1), attempts,
                             eval_fn)
    result = {"rows": rows, "eval": rates.tolist(), "names": names, "seconds": seconds,
              "update_seconds": per_update,
              "env_steps": steps, "config": asdict(cfg)}
    if out_dir is not None:  # results before plots
        (out_dir / "eval.json").write_text(json.dumps(result, default=str))
        if plot:
            plot_curves({cfg.method: rows}, out_dir / "curves.png")
    return result


def plot_curves(runs: dict[str, list[dict[str, float]]], path: str | Path) -> None:
    """Training solve rate, buffer solvable share and held-out prefab solve rate over env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("solve_rate_all", "solvable_fraction", "solve/prefab_mean")
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 3.4))
    for name, rows in runs.items():
        for ax, k in zip(axes, keys):
            pts = [(r["env_steps"], r[k]) for r in rows if k in r]
            if pts:
                ax.plot(*zip(*pts), label=name, marker="." if len(pts) < 3 else None)
            ax.set_title(k.replace("_", " "))
            ax.set_xlabel("env steps")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def curriculum_share(cfg: MazeConfig, repeats: int = 5) -> dict[str, float]:
    """Seconds per update and per curriculum step (sample + score insertion on the same batch shapes,
    jitted alone) of a buffered method, and the curriculum's share of an update."""
    if cfg.method not in BUFFERED + JAXUED_ARMS:
        raise ValueError(f"{cfg.method} has no level buffer")
    update = train_functions(cfg)[0]
    ts = init_state(cfg)
    for _ in range(3):  # fill a little and compile
        ts, _ = update(ts)
    jax.block_until_ready(ts.params)
    b = cfg.num_envs
    cur = cfg.curriculum
    ls = jaxued_sampler(cfg) if cfg.method in JAXUED_ARMS else None
    gen = jax.vmap(_generator(cfg))

    @jax.jit
    def cur_step(buffer: Any, key: jax.Array) -> Any:
        k1, k2, k3 = jax.random.split(key, 3)
        new = gen(jax.random.split(k1, b))
        scores = jax.random.uniform(k3, (b,))
        if ls is not None:
            buffer, smp = _jaxued_sample(ls, k2, buffer, new, jnp.zeros(b, bool))
            return _jaxued_update(ls, buffer, smp, scores, scores)
        buffer, smp = L.plr_sample(k2, buffer, new, cur)
        return L.plr_update(buffer, smp.levels, L.hash_levels(smp.levels), scores, scores)

    buf = jax.block_until_ready(cur_step(ts.buffer, jax.random.PRNGKey(0)))
    t = time.perf_counter()
    for i in range(repeats * 4):
        buf = cur_step(buf, jax.random.PRNGKey(i))
    jax.block_until_ready(buf)
    t_cur = (time.perf_counter() - t) / (repeats * 4)
    t = time.perf_counter()
    for _ in range(repeats):
        ts, _ = update(ts)
    jax.block_until_ready(ts.params)
    t_upd = (time.perf_counter() - t) / repeats
    return {"update_s": t_upd, "curriculum_s": t_cur, "share": t_cur / t_upd}


def _generator(cfg: MazeConfig) -> Any:
    E.require_jaxued()
    from jaxued.environments.maze import make_level_generator

    return make_level_generator(13, 13, cfg.n_walls)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m magister.examples.maze.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=METHODS, default="accel")
    ap.add_argument("--num-envs", type=int, default=32)
    ap.add_argument("--rollout-len", type=int, default=256)
    ap.add_argument("--updates", type=int, default=50)
    ap.add_argument("--buffer-size", type=int, default=1000)
    ap.add_argument("--n-walls", type=int, default=25)
    ap.add_argument("--adversary-steps", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=str, default=None, help="output folder (metrics, eval, TensorBoard, plot)")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=0, help="updates between evaluations (0: at the end)")
    ap.add_argument("--heldout", type=int, default=32, help="generated held-out mazes next to the prefabs")
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="updates between checkpoints (0: only the last; written with --out)")
    ap.add_argument("--resume", type=str, default=None,
                    help="continue from a checkpoint ckpt_<update>.npz of a run with the same settings")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    E.require_jaxued_or_exit()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = MazeConfig(method=a.method, num_envs=a.num_envs, rollout_len=a.rollout_len, updates=a.updates,
                     buffer_size=a.buffer_size, n_walls=a.n_walls, hidden=a.hidden, seed=a.seed,
                     adversary=L.PAIREDConfig(num_edits=a.adversary_steps))
    res = train(cfg, a.out, log_every=a.log_every, eval_every=a.eval_every, ckpt_every=a.ckpt_every,
                heldout=a.heldout, progress=not a.no_progress, resume=a.resume)
    s = _summary(res["names"], np.asarray(res["eval"]))
    logger.info("%s: %d env steps in %.0f s; held-out prefab solve rate %.3f, CVaR10 %.3f", cfg.method,
                res["env_steps"], res["seconds"], s["solve/prefab_mean"], s["solve/cvar_0.1"])
    return res


if __name__ == "__main__":
    main()
