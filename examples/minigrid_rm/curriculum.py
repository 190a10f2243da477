"""PLR⊥, ACCEL, SFL and DR as pure JAX functions over a fixed-capacity buffer of problems.

Papers: Jiang et al. 2021 ("Prioritized Level Replay"), Jiang et al. 2021b ("Replay-Guided Adversarial
Environment Design", PLR⊥ and the MaxMC / positive-value-loss scores), Parker-Holder et al. 2022 (ACCEL),
Rutherford et al. 2024 (SFL, learnability), with the ATLAS settings (Furelos-Blanco et al., Appendix E.1).

These are the on-device twins of :class:`magister.curricula.plr.RobustPLR`,
:class:`magister.curricula.accel.ACCEL` and :class:`magister.curricula.sfl.SFL`, with the same parameter names
and semantics (``buffer_size``, ``replay_prob``, ``temperature``, ``staleness_coef``, ``prioritization``,
``min_fill_ratio``, ``score``, ``min_edits``, ``max_edits``; SFL's ``batch_size``, ``buffer_size``,
``sample_ratio``, ``update_period``):

* **Replay distribution** ``P = (1 - rho) P_S + rho P_C`` over the filled entries, with rank prioritisation
  ``h_i = 1/rank(S_i)`` (tied scores share the mean weight of the ranks they occupy) or power
  prioritisation ``h_i = S_i``, ``P_S(i) = h_i^(1/beta) / sum_j h_j^(1/beta)``, and staleness
  ``P_C(i) = (c - C_i) / sum_j (c - C_j)`` (uniform when all are fresh), ``c`` the number of problems
  sampled so far and ``C_i`` the clock when entry ``i`` was last sampled or inserted.
* **Replay decision** per sample: replay with probability ``replay_prob`` once the buffer holds at least
  ``max(1, min_fill_ratio * buffer_size)`` entries; else a new problem from the generator. PLR⊥: new
  problems are evaluation-only (``train = False``), replays are trained on. The ``b``-th sample of a batch
  advances the clock to ``c + 1 + b``; a replayed entry's ``C_i`` becomes the largest such tick.
* **Scoring and insertion**, applied in batch order exactly as ``PLR.update_scores``: a problem already in
  the buffer (same :func:`problem_hash`) gets the new score; otherwise it is inserted while there is room
  (at the next free position, ``C_i = c``), else it replaces the lowest-scored entry if its score is
  strictly higher (ties among the lowest: the stalest, then the first).
* **ACCEL**: every replayed problem is mutated after its rollout by ``n ~ U{min_edits .. max_edits}``
  edits (:mod:`.mutations`; hindsight edits may use the rollout's last state); the children are the next
  samples (evaluation-only) and are scored and inserted like new problems, with generation and edit count
  kept per entry.
* **SFL**: every ``update_period`` rollouts, ``batch_size`` generated problems are evaluated and the
  ``buffer_size`` most learnable (``p (1 - p)``, ties at random) become the buffer; each sample is
  drawn uniformly from it with probability ``sample_ratio``, else from the generator; all are trained on.
* **DR**: every sample is new and trained on.

Scores of a rollout (:func:`rollout_scores`): ``max_mc`` = ``mean_t (R_max - V_t)``, ``positive_value_loss``
= ``mean_t max(A_t, 0)`` (GAE), ``learnability`` = ``p (1 - p)`` of the rollout's success rate.

Differences from the Python curricula, by design of a fixed-shape device loop: problems are identified by
a 32-bit hash (a collision would merge two problems); ``R_max`` is kept only for buffered problems; the
replay decision for ``min_fill_ratio`` uses ``buffer_size`` as the capacity (unbounded space).

>>> import jax.numpy as jnp
>>> w = rank_weights(jnp.array([0.5, 2.0, 1.0]), jnp.array([True, True, True]), 1.0)
>>> [round(float(x), 4) for x in w]
[0.1818, 0.5455, 0.2727]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .problem import Problem

logger = logging.getLogger(__name__)

__all__ = [
    "Buffer", "CurriculumConfig", "SFLConfig", "SFLState", "Sample", "accel_config", "dr_sample",
    "init_buffer", "mark_sampled",
    "plr_config", "plr_sample", "plr_update", "power_weights", "problem_hash", "rank_weights",
    "replay_distribution", "replay_probability", "rollout_scores", "sfl_refresh", "sfl_sample",
    "staleness_weights",
]

SCORES = ("max_mc", "positive_value_loss", "learnability")


@dataclass(frozen=True)
class CurriculumConfig:
    """Settings of PLR⊥ / ACCEL on device (hashable: static under ``jit``). Defaults: ATLAS PLR⊥ row."""

    buffer_size: int = 4000
    replay_prob: float = 0.5
    temperature: float = 1.0
    staleness_coef: float = 0.1
    prioritization: str = "rank"
    min_fill_ratio: float = 0.0
    score: str = "max_mc"
    robust: bool = True
    mutate: bool = False
    min_edits: int = 7
    max_edits: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.buffer_size, int) or self.buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive int, got {self.buffer_size!r}")
        if not 0.0 <= self.replay_prob <= 1.0:
            raise ValueError(f"replay_prob must be in [0, 1], got {self.replay_prob!r}")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a positive finite number, got {self.temperature!r}")
        if not 0.0 <= self.staleness_coef <= 1.0:
            raise ValueError(f"staleness_coef must be in [0, 1], got {self.staleness_coef!r}")
        if self.prioritization not in ("rank", "power"):
            raise ValueError(f"prioritization must be 'rank' or 'power', got {self.prioritization!r}")
        if not 0.0 <= self.min_fill_ratio <= 1.0:
            raise ValueError(f"min_fill_ratio must be in [0, 1], got {self.min_fill_ratio!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {self.score!r}")
        if not 0 <= self.min_edits <= self.max_edits:
            raise ValueError(f"need 0 <= min_edits <= max_edits, got {self.min_edits}, {self.max_edits}")


def plr_config(**kw: object) -> CurriculumConfig:
    """PLR⊥ with the ATLAS settings (replay 0.5, MaxMC, rank, beta 1.0, rho 0.1), overridable."""
    return CurriculumConfig(**kw)  # type: ignore[arg-type]


def accel_config(**kw: object) -> CurriculumConfig:
    """ACCEL with the ATLAS settings (replay 0.9, edits ~ U{7, 10}), overridable."""
    base: dict[str, object] = {"replay_prob": 0.9, "mutate": True}
    base.update(kw)
    return CurriculumConfig(**base)  # type: ignore[arg-type]


class Buffer(NamedTuple):
    """The buffer: entries ``0 .. size-1`` are filled (kept compact, like the Python PLR's)."""

    problems: Problem  # every leaf batched [C, ...]
    scores: jax.Array  # f32[C]
    last_sampled: jax.Array  # i32[C]
    max_return: jax.Array  # f32[C]
    hashes: jax.Array  # u32[C]
    generation: jax.Array  # i32[C]
    num_edits: jax.Array  # i32[C]
    size: jax.Array  # i32[]
    clock: jax.Array  # i32[]

    @property
    def valid(self) -> jax.Array:
        return jnp.arange(self.scores.shape[0]) < self.size


def init_buffer(example: Problem, buffer_size: int) -> Buffer:
    """An empty buffer shaped for problems like ``example`` (one unbatched problem)."""
    c = int(buffer_size)
    probs = jax.tree_util.tree_map(lambda a: jnp.zeros((c,) + jnp.shape(a), jnp.asarray(a).dtype), example)
    return Buffer(probs, jnp.zeros(c, jnp.float32), jnp.zeros(c, jnp.int32), jnp.zeros(c, jnp.float32),
                  jnp.zeros(c, jnp.uint32), jnp.zeros(c, jnp.int32), jnp.zeros(c, jnp.int32), jnp.int32(0),
                  jnp.int32(0))


# ---------------------------------------------------------------------------------------------------
# Replay distribution
# ---------------------------------------------------------------------------------------------------
def rank_weights(scores: jax.Array, valid: jax.Array, temperature: float) -> jax.Array:
    """``P_S`` with rank prioritisation over the valid entries (0 elsewhere); ties share their ranks' mean.

    Matches :func:`magister.curricula.scoring.rank_weights` on the valid entries.
    """
    n = scores.shape[0]
    s = jnp.where(valid, scores.astype(jnp.float32), -jnp.inf)
    asc = jnp.sort(s)
    gt = n - jnp.searchsorted(asc, s, side="right")  # entries with a higher score
    ge = n - jnp.searchsorted(asc, s, side="left")  # entries with a score >= s_i (i included)
    ranks = jnp.arange(1, n + 1, dtype=jnp.float32)
    w_rank = jnp.exp(-jnp.log(ranks) / temperature)  # rank^(-1/beta)
    cs = jnp.concatenate([jnp.zeros(1, jnp.float32), jnp.cumsum(w_rank)])
    cnt = jnp.maximum(ge - gt, 1)
    tied = (cs[ge] - cs[gt]) / cnt
    single = w_rank[jnp.clip(gt, 0, n - 1)]
    w = jnp.where(cnt == 1, single, tied)
    w = jnp.where(valid, w, 0.0)
    tot = w.sum()
    return jnp.where(tot > 0, w / jnp.where(tot > 0, tot, 1.0), 0.0)


def power_weights(scores: jax.Array, valid: jax.Array, temperature: float) -> jax.Array:
    """``P_S`` with power prioritisation ``S_i^(1/beta)`` (uniform over valid entries if all are zero)."""
    s = jnp.where(valid, jnp.maximum(scores.astype(jnp.float32), 0.0), 0.0)
    pos = s > 0
    logw = jnp.where(pos, jnp.log(jnp.where(pos, s, 1.0)) / temperature, -jnp.inf)
    mx = jnp.max(jnp.where(pos, logw, -jnp.inf))
    w = jnp.where(pos, jnp.exp(logw - jnp.where(jnp.isfinite(mx), mx, 0.0)), 0.0)
    nvalid = jnp.maximum(valid.sum(), 1)
    uni = valid / nvalid
    tot = w.sum()
    return jnp.where(tot > 0, w / jnp.where(tot > 0, tot, 1.0), uni)


def staleness_weights(last_sampled: jax.Array, clock: jax.Array, valid: jax.Array) -> jax.Array:
    """``P_C(i) = (c - C_i) / sum_j (c - C_j)`` over valid entries; uniform when all are fresh."""
    st = jnp.where(valid, (clock - last_sampled).astype(jnp.float32), 0.0)
    tot = st.sum()
    uni = valid / jnp.maximum(valid.sum(), 1)
    return jnp.where(tot > 0, st / jnp.where(tot > 0, tot, 1.0), uni)


def replay_distribution(buffer: Buffer, cfg: CurriculumConfig) -> jax.Array:
    """``P = (1 - rho) P_S + rho P_C`` over the buffer (``f32[C]``, zero past ``size``)."""
    valid = buffer.valid
    if cfg.prioritization == "rank":
        ps = rank_weights(buffer.scores, valid, cfg.temperature)
    else:
        ps = power_weights(buffer.scores, valid, cfg.temperature)
    if cfg.staleness_coef == 0.0:
        return ps
    pc = staleness_weights(buffer.last_sampled, buffer.clock, valid)
    return (1.0 - cfg.staleness_coef) * ps + cfg.staleness_coef * pc


def replay_probability(buffer: Buffer, cfg: CurriculumConfig) -> jax.Array:
    """``replay_prob`` once the buffer holds ``max(1, min_fill_ratio * buffer_size)`` entries, else 0."""
    ok = (buffer.size > 0) & (buffer.size >= cfg.min_fill_ratio * cfg.buffer_size)
    return jnp.where(ok, jnp.float32(cfg.replay_prob), jnp.float32(0.0))


# ---------------------------------------------------------------------------------------------------
# Sampling and insertion
# ---------------------------------------------------------------------------------------------------
class Sample(NamedTuple):
    """A batch of problems chosen by the curriculum."""

    problems: Problem  # [B, ...]
    replay: jax.Array  # bool[B]: from the buffer
    index: jax.Array  # i32[B]: buffer position for replays (meaningless otherwise)
    train: jax.Array  # bool[B]: use for gradients (PLR⊥: replays only)
    child: jax.Array  # bool[B]: an ACCEL child


def _batch_size(tree: object) -> int:
    return int(jax.tree_util.tree_leaves(tree)[0].shape[0])


def _where_tree(mask: jax.Array, a: Problem, b: Problem) -> Problem:
    def pick(x: jax.Array, y: jax.Array) -> jax.Array:
        m = mask.reshape(mask.shape + (1,) * (x.ndim - 1))
        return jnp.where(m, x, y)
    return jax.tree_util.tree_map(pick, a, b)


def mark_sampled(buffer: Buffer, index: jax.Array, replay: jax.Array) -> Buffer:
    """Advance the clock by the batch size ``B``; replayed entries get ``C_i = max(C_i, c + 1 + b)``."""
    b = index.shape[0]
    ticks = buffer.clock + 1 + jnp.arange(b, dtype=jnp.int32)
    last = buffer.last_sampled.at[index].max(jnp.where(replay, ticks, jnp.iinfo(jnp.int32).min))
    return buffer._replace(last_sampled=last, clock=buffer.clock + b)


def plr_sample(
    key: jax.Array,
    buffer: Buffer,
    new_problems: Problem,
    cfg: CurriculumConfig,
    children: Problem | None = None,
    has_child: jax.Array | None = None,
) -> tuple[Buffer, Sample]:
    """Choose a batch: ACCEL children first (where ``has_child``), else replay or new (PLR⊥ decision)."""
    b = _batch_size(new_problems)
    k1, k2 = jax.random.split(key)
    p_rep = replay_probability(buffer, cfg)
    replay = jax.random.uniform(k1, (b,)) < p_rep
    child = jnp.zeros(b, bool) if has_child is None else has_child
    replay = replay & ~child
    probs = replay_distribution(buffer, cfg)
    logits = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)
    logits = jnp.where(buffer.size > 0, logits, jnp.zeros_like(logits))
    idx = jax.random.categorical(k2, logits, shape=(b,))
    buffer = mark_sampled(buffer, idx, replay)
    replayed = jax.tree_util.tree_map(lambda a: a[idx], buffer.problems)
    problems = _where_tree(replay, replayed, new_problems)
    if children is not None:
        problems = _where_tree(child, children, problems)
    train = replay if cfg.robust else ~child
    return buffer, Sample(problems, replay, idx.astype(jnp.int32), train, child)


_HASH_MULT: dict[int, np.ndarray] = {}


def problem_hash(problem: Problem) -> jax.Array:
    """A 32-bit hash of one problem's arrays (traceable; ``jax.vmap`` it for a batch)."""
    flat = jnp.concatenate([jnp.ravel(x).astype(jnp.uint32) for x in jax.tree_util.tree_leaves(problem)])
    n = flat.shape[0]
    if n not in _HASH_MULT:
        rng = np.random.default_rng(12345)
        _HASH_MULT[n] = rng.integers(1, 2**32 - 1, size=n, dtype=np.uint64).astype(np.uint32) | 1
    mult = jnp.asarray(_HASH_MULT[n])
    h = jnp.sum((flat + jnp.uint32(0x9E3779B9)) * mult, dtype=jnp.uint32)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    return h ^ (h >> 13)


def plr_update(
    buffer: Buffer,
    problems: Problem,
    hashes: jax.Array,
    scores: jax.Array,
    max_returns: jax.Array,
    generation: jax.Array | None = None,
    num_edits: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> Buffer:
    """Apply scores in batch order (``PLR.update_scores`` semantics): update if buffered, else insert.

    Args:
        problems: the scored problems ``[B, ...]``; hashes: ``u32[B]`` (:func:`problem_hash`).
        scores: ``f32[B]``; max_returns: ``f32[B]`` best return seen (merged with ``max``).
        generation, num_edits: provenance for inserted problems (default 0).
        mask: ``bool[B]``, entries to apply (default all).
    """
    b = scores.shape[0]
    cap = buffer.scores.shape[0]
    gen = jnp.zeros(b, jnp.int32) if generation is None else generation
    edits = jnp.zeros(b, jnp.int32) if num_edits is None else num_edits
    mask = jnp.ones(b, bool) if mask is None else mask
    imax = jnp.iinfo(jnp.int32).max

    def body(buf: Buffer, x: tuple) -> tuple[Buffer, None]:
        prob, h, s, mr, g, e, m = x
        valid = buf.valid
        match = valid & (buf.hashes == h)
        found = jnp.any(match)
        pos_found = jnp.argmax(match)
        room = buf.size < cap
        low = jnp.min(jnp.where(valid, buf.scores, jnp.inf))
        victim = jnp.argmin(jnp.where(valid & (buf.scores == low), buf.last_sampled, imax))
        insert = ~found & (room | (s > low))
        pos_new = jnp.where(room, buf.size, victim)
        pos = jnp.where(found, pos_found, pos_new)
        do = m & (found | insert)
        ins = m & insert
        scores_ = buf.scores.at[pos].set(jnp.where(do, s, buf.scores[pos]))
        mret = jnp.where(found, jnp.maximum(buf.max_return[pos], mr), mr)
        max_ret = buf.max_return.at[pos].set(jnp.where(do, mret, buf.max_return[pos]))
        last = buf.last_sampled.at[pos].set(jnp.where(ins, buf.clock, buf.last_sampled[pos]))
        hashes = buf.hashes.at[pos].set(jnp.where(ins, h, buf.hashes[pos]))
        gens = buf.generation.at[pos].set(jnp.where(ins, g, buf.generation[pos]))
        eds = buf.num_edits.at[pos].set(jnp.where(ins, e, buf.num_edits[pos]))
        probs = jax.tree_util.tree_map(lambda a, p: a.at[pos].set(jnp.where(ins, p, a[pos])), buf.problems,
                                       prob)
        size = buf.size + (ins & room).astype(jnp.int32)
        return Buffer(probs, scores_, last, max_ret, hashes, gens, eds, size, buf.clock), None

    xs = (problems, hashes.astype(jnp.uint32), scores.astype(jnp.float32), max_returns.astype(jnp.float32),
          gen.astype(jnp.int32), edits.astype(jnp.int32), mask)
    buffer, _ = jax.lax.scan(body, buffer, xs)
    return buffer


# ---------------------------------------------------------------------------------------------------
# Scores of a rollout
# ---------------------------------------------------------------------------------------------------
def rollout_scores(
    score: str,
    values: jax.Array,
    advantages: jax.Array,
    max_return: jax.Array,
    successes: jax.Array,
    episodes: jax.Array,
) -> jax.Array:
    """Per-env scores from a rollout (time-major ``[T, B]`` values/advantages).

    ``max_mc``: ``mean_t (R_max - V_t)``; ``positive_value_loss``: ``mean_t max(A_t, 0)``;
    ``learnability``: ``p (1 - p)``, ``p = successes / episodes`` (0 if no episode ended).
    """
    if score == "max_mc":
        return jnp.mean(max_return[None, :] - values, axis=0)
    if score == "positive_value_loss":
        return jnp.mean(jnp.maximum(advantages, 0.0), axis=0)
    if score == "learnability":
        p = successes / jnp.maximum(episodes, 1)
        return p * (1.0 - p)
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")


# ---------------------------------------------------------------------------------------------------
# SFL
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SFLConfig:
    """SFL settings (Syllabus / Rutherford et al. names): evaluate ``batch_size`` problems every
    ``update_period`` rollouts, keep the ``buffer_size`` most learnable, sample from them with probability
    ``sample_ratio``."""

    batch_size: int = 200
    update_period: int = 25
    buffer_size: int = 10
    sample_ratio: float = 1.0

    def __post_init__(self) -> None:
        for name in ("batch_size", "update_period", "buffer_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.buffer_size > self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) cannot exceed batch_size ({self.batch_size})")
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ValueError(f"sample_ratio must be in [0, 1], got {self.sample_ratio!r}")


class SFLState(NamedTuple):
    problems: Problem  # [K, ...]
    learnability: jax.Array  # f32[K]


def sfl_refresh(key: jax.Array, candidates: Problem, success_rates: jax.Array, cfg: SFLConfig) -> SFLState:
    """Keep the ``buffer_size`` candidates with the highest ``p (1 - p)`` (ties broken at random)."""
    p = success_rates.astype(jnp.float32)
    learn = p * (1.0 - p)
    noise = jax.random.uniform(key, p.shape)
    order = jnp.lexsort((noise, -learn))[: cfg.buffer_size]
    return SFLState(jax.tree_util.tree_map(lambda a: a[order], candidates), learn[order])


def sfl_sample(key: jax.Array, state: SFLState, new_problems: Problem, cfg: SFLConfig) -> Sample:
    """Each sample from the SFL buffer (uniformly) with probability ``sample_ratio``, else new."""
    b = _batch_size(new_problems)
    k1, k2 = jax.random.split(key)
    from_buf = jax.random.uniform(k1, (b,)) < cfg.sample_ratio
    idx = jax.random.randint(k2, (b,), 0, cfg.buffer_size)
    picked = jax.tree_util.tree_map(lambda a: a[idx], state.problems)
    problems = _where_tree(from_buf, picked, new_problems)
    return Sample(problems, from_buf, idx, jnp.ones(b, bool), jnp.zeros(b, bool))


def dr_sample(new_problems: Problem) -> Sample:
    """Domain randomisation: every problem new and trained on."""
    b = _batch_size(new_problems)
    return Sample(new_problems, jnp.zeros(b, bool), jnp.zeros(b, jnp.int32), jnp.ones(b, bool),
                  jnp.zeros(b, bool))
