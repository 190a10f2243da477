"""Reward machines (RMs) as fixed-shape arrays: stepping, construction and the sequential sampler.

Paper: Furelos-Blanco et al., "Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs"
(Sec. 2.3, 3.2, 5.1), after Toro Icarte et al. (2018). An RM ``<U, P, delta, R, u0, uA>`` has states
``0 .. n_states-1``, an initial state ``u0`` and an accepting state ``uA``; each edge ``(src, dst)`` carries
a conjunction of literals (a proposition or its negation). Given the label ``L`` of the current environment
state, ``delta(u, L)`` follows the edge from ``u`` whose conjunction holds (none: stay in ``u``). Rewards are
sparse: 1 on the transition into ``uA``, else 0, and the episode ends there.

Determinism is by construction: the constructors conjoin each edge with the negations of the propositions
on the other edges leaving the same state (as the paper's samplers do), so at most one edge can fire; if a
hand-written RM breaks this, the first satisfied edge (lowest index) is taken.

Array encoding (``MAX_STATES = 8``, ``MAX_EDGES = 10``, ``MAX_LITERALS = 3``): ``edge_src``/``edge_dst``
``int32[MAX_EDGES]`` (``-1`` = no edge), ``edge_lits`` ``int32[MAX_EDGES, MAX_LITERALS]`` with ``+(p+1)``
for proposition ``p``, ``-(p+1)`` for its negation and ``0`` for padding (true). The policy observes these
arrays and the current state.

The **sequential sampler** (Sec. 3.2) draws ``k ~ U{min_transitions .. max_transitions}`` (1-5 in the
paper's training setup) and a single path ``u0 -> u1 -> ... -> uk = uA`` whose edges are labelled by
propositions drawn uniformly from the alphabet (or from an allowed subset, for level-conditioned sampling).

The **random-walk sampler** (Sec. 3.2 and Appendix A.1, the directed-acyclic variant used in Sec. 5.4) draws
``n ~ U{min_transitions + 1 .. max_transitions + 1}`` candidate states ``0 .. n-1`` (``u0 = 0``,
``uA = n-1``), a transition matrix ``M`` with uniform random entries on ``M[i, j], j > i`` (the
shifted-triangular pattern that keeps the graph acyclic; a state's index is its topological order),
normalised to be right-stochastic, and random walks ``u0 -> ... -> uA`` on it: the first always, each further
one with probability ``restart_prob`` (at most ``max_walks``). The RM's edges are the union of the walks'
edges (one edge per pair of states), keeping a walk only while the union has at most ``max_paths`` paths from
``u0`` to ``uA`` (2 in the paper's DAG experiments); unvisited states are dropped and the rest renumbered in
order. Edges are labelled in a uniformly random order with a proposition drawn from the allowed ones that
keeps the labelling *non-tautological* (an edge into ``u`` never implies an edge out of ``u``) and
*deterministic* (no two edges out of a state imply one another); each edge is then conjoined with the
negations of its sibling edges' propositions. ``p`` *implies* ``q`` when they have the same kind and ``q``'s
descriptors generalise ``p``'s (``front_ball_red`` implies ``front_ball``). ``restart_prob`` and
``max_walks`` are ours: the paper does not give the restart probability.

>>> import jax.numpy as jnp
>>> from magister.examples.minigrid_rm.propositions import NUM_PROPS, prop_id
>>> rm = sequential_rm([prop_id("front_ball"), prop_id("carrying_key")])
>>> lab = jnp.zeros(NUM_PROPS, bool).at[prop_id("front_ball")].set(True)
>>> u, r = rm_step(rm, jnp.int32(0), lab)
>>> int(u), float(r)
(1, 0.0)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .propositions import (
    MATCH,
    NUM_PROPS,
    PROP_D1,
    PROP_D2,
    PROP_KIND,
    literals_from_label,
    prop_id,
    prop_name,
)

logger = logging.getLogger(__name__)

__all__ = [
    "IMPLIES", "MAX_EDGES", "MAX_LITERALS", "MAX_STATES", "RewardMachine", "is_sequential", "literal",
    "rm_from_edges", "rm_paths_count", "rm_props", "rm_step", "rm_step_literals", "rm_to_str",
    "sample_random_walk_rm", "sample_sequential_rm", "sequential_rm",
]

MAX_STATES = 8
MAX_EDGES = 10
MAX_LITERALS = 3


class RewardMachine(NamedTuple):
    """A reward machine as arrays (batch them by stacking every field)."""

    n_states: jax.Array  # int32[]
    initial: jax.Array  # int32[]
    accepting: jax.Array  # int32[]
    edge_src: jax.Array  # int32[MAX_EDGES], -1 = unused
    edge_dst: jax.Array  # int32[MAX_EDGES]
    edge_lits: jax.Array  # int32[MAX_EDGES, MAX_LITERALS]


def literal(name: str) -> int:
    """Signed literal code of ``"prop"`` or ``"!prop"`` / ``"~prop"``.

    >>> literal("front_ball"), literal("!front_ball")
    (8, -8)
    """
    neg = name[:1] in ("!", "~")
    p = prop_id(name[1:] if neg else name)
    return -(p + 1) if neg else p + 1


def rm_from_edges(
    n_states: int,
    edges: Sequence[tuple[int, int, Sequence[int | str]]],
    initial: int = 0,
    accepting: int | None = None,
    add_negations: bool = True,
) -> RewardMachine:
    """Build an RM from ``(src, dst, literals)`` edges (literals as signed codes or names like ``"!p"``).

    With ``add_negations`` each edge is conjoined with the negation of the first positive literal of every
    other edge leaving the same state (determinism by construction).

    Raises:
        ValueError: too many states/edges/literals, a state out of range, or an edge leaving ``uA``.
    """
    accepting = n_states - 1 if accepting is None else accepting
    if not 2 <= n_states <= MAX_STATES:
        raise ValueError(f"n_states must be in [2, {MAX_STATES}], got {n_states}")
    if len(edges) > MAX_EDGES:
        raise ValueError(f"at most {MAX_EDGES} edges, got {len(edges)}")
    for name, s in (("initial", initial), ("accepting", accepting)):
        if not 0 <= s < n_states:
            raise ValueError(f"{name} state {s} out of range for {n_states} states")
    if initial == accepting:
        raise ValueError("the initial and accepting states must differ")
    lits: list[list[int]] = []
    for src, dst, ls in edges:
        if not (0 <= src < n_states and 0 <= dst < n_states):
            raise ValueError(f"edge ({src}, {dst}) out of range for {n_states} states")
        if src == accepting:
            raise ValueError(f"edge ({src}, {dst}) leaves the accepting state")
        if src == dst:
            raise ValueError(f"self-loop ({src}, {dst}): staying is implicit, give only state-changing edges")
        codes = [literal(x) if isinstance(x, str) else int(x) for x in ls]
        for c in codes:
            if c == 0 or abs(c) > NUM_PROPS:
                raise ValueError(f"literal code {c} out of range (+-1 .. +-{NUM_PROPS})")
        if not codes:
            raise ValueError(f"edge ({src}, {dst}) has no literal")
        lits.append(codes)
    if add_negations:
        full = []
        for i, (src, _, _) in enumerate(edges):
            extra = []
            for j, (src2, _, _) in enumerate(edges):
                if j != i and src2 == src:
                    pos = [c for c in lits[j] if c > 0]
                    if pos and -pos[0] not in lits[i]:
                        extra.append(-pos[0])
            full.append(lits[i] + extra)
        lits = full
    src_a = np.full(MAX_EDGES, -1, np.int32)
    dst_a = np.full(MAX_EDGES, -1, np.int32)
    lit_a = np.zeros((MAX_EDGES, MAX_LITERALS), np.int32)
    for i, ((src, dst, _), codes) in enumerate(zip(edges, lits)):
        if len(codes) > MAX_LITERALS:
            raise ValueError(f"edge ({src}, {dst}) has {len(codes)} literals; at most {MAX_LITERALS}")
        src_a[i], dst_a[i] = src, dst
        lit_a[i, : len(codes)] = codes
    return RewardMachine(jnp.int32(n_states), jnp.int32(initial), jnp.int32(accepting), jnp.asarray(src_a),
                         jnp.asarray(dst_a), jnp.asarray(lit_a))


def sequential_rm(props: Sequence[int | str]) -> RewardMachine:
    """The sequential RM ``u0 -p0-> u1 -p1-> ... -> uA`` (``len(props)`` transitions, 1..7)."""
    if not 1 <= len(props) <= MAX_STATES - 1:
        raise ValueError(f"a sequential RM needs 1..{MAX_STATES - 1} propositions, got {len(props)}")
    ids = [prop_id(p) if isinstance(p, str) else int(p) for p in props]
    for p in ids:
        if not 0 <= p < NUM_PROPS:
            raise ValueError(f"proposition id {p} out of range [0, {NUM_PROPS})")
    return rm_from_edges(len(ids) + 1, [(i, i + 1, [p + 1]) for i, p in enumerate(ids)])


def rm_step(rm: RewardMachine, u: jax.Array, lab: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(delta(u, L), R(u, u'))``: the next RM state and the sparse reward, for label ``lab`` (bool[889])."""
    return rm_step_literals(rm, u, literals_from_label(lab, rm.edge_lits))


def rm_step_literals(rm: RewardMachine, u: jax.Array, val: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`rm_step` given the values ``val`` (``bool[MAX_EDGES, MAX_LITERALS]``, padding true) of the
    RM's own literals, e.g. from :func:`~magister.examples.minigrid_rm.propositions.literal_truth`."""
    sat = (rm.edge_src == u) & (rm.edge_src >= 0) & jnp.all(val, axis=-1) & (u != rm.accepting)
    fire = jnp.any(sat)
    nxt = jnp.where(fire, rm.edge_dst[jnp.argmax(sat)], u)
    reward = ((nxt == rm.accepting) & (u != rm.accepting)).astype(jnp.float32)
    return nxt.astype(jnp.int32), reward


def uniform_int(u: jax.Array, lo: jax.Array | int, hi: jax.Array | int) -> jax.Array:
    """``U{lo .. hi}`` (inclusive) from uniforms ``u`` in ``[0, 1)`` (traceable, elementwise)."""
    lo = jnp.asarray(lo, jnp.int32)
    hi = jnp.asarray(hi, jnp.int32)
    return jnp.minimum(lo + jnp.floor(u * (hi - lo + 1).astype(jnp.float32)).astype(jnp.int32), hi)


def uniform_choice(u: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniform index among the true entries of ``mask`` (last axis) for each uniform in ``u``.

    ``u``: ``[...]``, ``mask``: ``bool[n]``; all-false masks give index 0. (All the samplers draw their
    random numbers as one ``jax.random.uniform`` array: each separate random call costs about a second of
    XLA compilation on CPU.)
    """
    cum = jnp.cumsum(mask.astype(jnp.int32))
    k = uniform_int(u, 0, jnp.maximum(cum[-1], 1) - 1)
    return jnp.argmax(cum > k[..., None], axis=-1).astype(jnp.int32)


def sample_sequential_rm(
    key: jax.Array,
    min_transitions: int = 1,
    max_transitions: int = 5,
    allowed: jax.Array | None = None,
) -> RewardMachine:
    """Sequential sampler: ``k ~ U{min..max}`` transitions, each labelled by a uniform proposition.

    ``allowed`` (``bool[889]``) restricts the propositions (level-conditioned sampling); if it is all
    false, propositions are drawn from the whole alphabet.
    """
    if not 1 <= min_transitions <= max_transitions <= MAX_STATES - 1:
        raise ValueError(f"need 1 <= min_transitions <= max_transitions <= {MAX_STATES - 1}, "
                         f"got {min_transitions}, {max_transitions}")
    u = jax.random.uniform(key, (MAX_EDGES + 1,))
    k = uniform_int(u[0], min_transitions, max_transitions)
    if allowed is None:
        props = uniform_int(u[1:], 0, NUM_PROPS - 1)
    else:
        ok = jnp.where(jnp.any(allowed), allowed, True)
        props = uniform_choice(u[1:], ok)
    return _sequential_arrays(props, k)


def _sequential_arrays(props: jax.Array, k: jax.Array) -> RewardMachine:
    """Sequential RM arrays from ``props[:k]`` (traceable; ``k`` transitions)."""
    idx = jnp.arange(MAX_EDGES)
    used = idx < k
    src = jnp.where(used, idx, -1).astype(jnp.int32)
    dst = jnp.where(used, idx + 1, -1).astype(jnp.int32)
    lits = jnp.zeros((MAX_EDGES, MAX_LITERALS), jnp.int32).at[:, 0].set(jnp.where(used, props + 1, 0))
    k = jnp.asarray(k, jnp.int32)
    return RewardMachine(k + 1, jnp.int32(0), k, src, dst, lits)


def is_sequential(rm: RewardMachine) -> jax.Array:
    """Whether ``rm`` is in canonical sequential form (edge ``i``: ``i -> i+1``, one positive literal)."""
    k = rm.n_states - 1
    idx = jnp.arange(MAX_EDGES)
    used = idx < k
    ok_edges = jnp.where(used, (rm.edge_src == idx) & (rm.edge_dst == idx + 1) & (rm.edge_lits[:, 0] > 0)
                         & jnp.all(rm.edge_lits[:, 1:] == 0, axis=-1), rm.edge_src == -1)
    return jnp.all(ok_edges) & (rm.initial == 0) & (rm.accepting == k)


def rm_props(rm: RewardMachine) -> np.ndarray:
    """Proposition ids along a sequential RM's path (host side)."""
    k = int(rm.n_states) - 1
    return np.asarray(rm.edge_lits)[:k, 0] - 1


def rm_to_str(rm: RewardMachine) -> str:
    """Readable form, e.g. ``'0 -[front_ball]-> 1 -[carrying_key]-> 2*'`` for sequential RMs."""
    src, dst, lits = (np.asarray(x) for x in (rm.edge_src, rm.edge_dst, rm.edge_lits))
    parts = []
    for e in np.flatnonzero(src >= 0):
        names = [("!" if c < 0 else "") + prop_name(abs(int(c)) - 1) for c in lits[e] if c != 0]
        parts.append(f"{src[e]}-[{' & '.join(names)}]->{dst[e]}")
    return f"RM(u0={int(rm.initial)}, uA={int(rm.accepting)}: " + ", ".join(parts) + ")"


# ---------------------------------------------------------------------------------------------------
# Random-walk (DAG) sampler
# ---------------------------------------------------------------------------------------------------
def _implication_matrix() -> np.ndarray:
    """``IMPLIES[p, q]``: whenever ``p`` holds, ``q`` holds (same kind, ``q``'s descriptors generalise)."""
    flat = MATCH.reshape(MATCH.shape[0], -1)
    sub = ~np.any(flat[:, None, :] & ~flat[None, :, :], axis=-1)  # sub[a, b]: objects(a) within objects(b)
    same = PROP_KIND[:, None] == PROP_KIND[None, :]
    d1p, d2p, d1q, d2q = PROP_D1[:, None], PROP_D2[:, None], PROP_D1[None, :], PROP_D2[None, :]
    single = sub[d1p, d1q]
    pair = (sub[d1p, d1q] & sub[d2p, d2q]) | (sub[d1p, d2q] & sub[d2p, d1q])
    return same & np.where(PROP_KIND[:, None] == 2, pair, single)


#: ``IMPLIES[p, q]`` for every pair of propositions (``p`` implies itself)
IMPLIES = _implication_matrix()
_IMPLIES_J = jnp.asarray(IMPLIES)


def rm_paths_count(rm: RewardMachine) -> jax.Array:
    """Number of paths ``u0 -> uA`` of an RM whose edges go from lower to higher state indices (traceable)."""
    valid = rm.edge_src >= 0
    a = jnp.zeros((MAX_STATES, MAX_STATES), jnp.int32).at[jnp.where(valid, rm.edge_src, 0),
                                                          jnp.where(valid, rm.edge_dst, 0)].add(valid)
    return _count_paths(a > 0, rm.initial, rm.accepting)


def _count_paths(adj: jax.Array, start: jax.Array, goal: jax.Array) -> jax.Array:
    def body(j: int, paths: jax.Array) -> jax.Array:  # reverse topological order: edges go to higher indices
        i = MAX_STATES - 1 - j
        return paths.at[i].set(jnp.where(i == goal, 1, jnp.sum(adj[i] * paths)))

    paths = jax.lax.fori_loop(0, MAX_STATES, body, jnp.zeros(MAX_STATES, jnp.int32))
    return paths[start]


def sample_random_walk_rm(
    key: jax.Array,
    min_transitions: int = 1,
    max_transitions: int = 5,
    allowed: jax.Array | None = None,
    restart_prob: float | jax.Array = 0.5,
    max_walks: int = 4,
    max_paths: int | jax.Array = 2,
) -> RewardMachine:
    """Random-walk sampler of acyclic RMs (see the module docstring); traceable, ``jax.vmap`` it for a batch.

    ``n - 1 ~ U{min_transitions .. max_transitions}`` bounds the states (``n``, before dropping unvisited
    ones); ``max_paths`` (1-3) bounds the paths ``u0 -> uA`` and therefore every state's out-degree, so each
    edge's conjunction fits in ``MAX_LITERALS`` (its proposition and at most two negated siblings).
    """
    if not 1 <= min_transitions <= max_transitions <= MAX_STATES - 1:
        raise ValueError(f"need 1 <= min_transitions <= max_transitions <= {MAX_STATES - 1}, "
                         f"got {min_transitions}, {max_transitions}")
    # restart_prob and max_paths may be traced (one compilation for several settings): checked if concrete
    if not isinstance(max_paths, jax.core.Tracer) and not 1 <= max_paths <= MAX_LITERALS:
        raise ValueError(f"max_paths must be in [1, {MAX_LITERALS}], got {max_paths!r}")
    if not isinstance(restart_prob, jax.core.Tracer) and not 0.0 <= restart_prob <= 1.0:
        raise ValueError(f"restart_prob must be in [0, 1], got {restart_prob!r}")
    if max_walks < 1:
        raise ValueError(f"max_walks must be >= 1, got {max_walks!r}")
    s = MAX_STATES
    k_n, k_m, k_walk, k_restart, k_order, k_lab = jax.random.split(key, 6)
    n = jax.random.randint(k_n, (), min_transitions, max_transitions + 1) + 1
    idx = jnp.arange(s)
    forward = (idx[None, :] > idx[:, None]) & (idx[None, :] < n)
    m = jnp.where(forward, jax.random.uniform(k_m, (s, s), minval=1e-6), 0.0)
    logm = jnp.where(m > 0, jnp.log(jnp.where(m > 0, m, 1.0)), -jnp.inf)  # normalising changes nothing
    goal = n - 1

    def walk(k: jax.Array) -> jax.Array:
        def step(i: int, carry: tuple) -> tuple:  # an acyclic walk takes at most s - 1 steps
            adj, cur = carry
            go = cur != goal
            nxt = jax.random.categorical(jax.random.fold_in(k, i), logm[cur])
            return adj.at[cur, nxt].set(adj[cur, nxt] | go), jnp.where(go, nxt, cur).astype(jnp.int32)

        return jax.lax.fori_loop(0, s - 1, step, (jnp.zeros((s, s), bool), jnp.int32(0)))[0]

    walks = jax.vmap(walk)(jax.random.split(k_walk, max_walks))
    take = jnp.cumprod(jnp.concatenate([jnp.ones(1, bool),
                                        jax.random.bernoulli(k_restart, restart_prob, (max_walks - 1,))]))

    def union(w: int, adj: jax.Array) -> jax.Array:
        cand = adj | walks[w]
        ok = take[w].astype(bool) & (_count_paths(cand, jnp.int32(0), goal) <= max_paths) & (
            cand.sum() <= MAX_EDGES)
        return jnp.where(ok, cand, adj)

    adj = jax.lax.fori_loop(1, max_walks, union, walks[0])
    # drop unvisited states, renumber the rest in order
    visited = adj.any(axis=0) | adj.any(axis=1) | (idx == 0)
    new_id = jnp.cumsum(visited) - 1
    n_states = visited.sum().astype(jnp.int32)
    flat = jnp.nonzero(adj.reshape(-1), size=MAX_EDGES, fill_value=-1)[0]
    used = flat >= 0
    src = jnp.where(used, new_id[flat // s], -1).astype(jnp.int32)
    dst = jnp.where(used, new_id[flat % s], -1).astype(jnp.int32)
    # labels, edge by edge in a random order
    allowed_j = jnp.ones(NUM_PROPS, bool) if allowed is None else jnp.where(jnp.any(allowed), allowed, True)
    order = jax.random.permutation(k_order, MAX_EDGES)

    def label(i: int, carry: tuple) -> tuple:
        labels, done = carry
        e = order[i]
        u, v = src[e], dst[e]
        into_u = done & (dst == u)  # their label must not imply ours
        sibling = done & (src == u)  # neither may imply the other
        out_v = done & (src == v)  # ours must not imply theirs
        imp_from = _IMPLIES_J[labels]  # [E, P]: labels[e'] -> p
        imp_to = _IMPLIES_J[:, labels].T  # [E, P]: p -> labels[e']
        bad = jnp.any(((into_u | sibling)[:, None] & imp_from) | ((sibling | out_v)[:, None] & imp_to),
                      axis=0)
        ok = allowed_j & ~bad
        ok = jnp.where(jnp.any(ok), ok, allowed_j)
        p = jax.random.categorical(jax.random.fold_in(k_lab, i), jnp.where(ok, 0.0, -jnp.inf))
        return labels.at[e].set(jnp.where(used[e], p, labels[e]).astype(jnp.int32)), done.at[e].set(used[e])

    labels, _ = jax.lax.fori_loop(0, MAX_EDGES, label, (jnp.zeros(MAX_EDGES, jnp.int32),
                                                         jnp.zeros(MAX_EDGES, bool)))
    # conjoin the negations of the sibling edges' propositions
    sib = used[:, None] & used[None, :] & (src[:, None] == src[None, :]) & ~jnp.eye(MAX_EDGES, dtype=bool)
    rank = jnp.cumsum(sib, axis=1) * sib  # 1, 2 for the first and second sibling
    lits = jnp.zeros((MAX_EDGES, MAX_LITERALS), jnp.int32).at[:, 0].set(jnp.where(used, labels + 1, 0))
    for j in range(1, MAX_LITERALS):
        neg = jnp.sum(jnp.where(rank == j, -(labels[None, :] + 1), 0), axis=1)
        lits = lits.at[:, j].set(neg)
    return RewardMachine(n_states, jnp.int32(0), n_states - 1, src, dst, lits)
