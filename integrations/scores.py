"""Learner-side score helpers for the PLR family: from a rollout to per-task scores in one call.

A PPO-style learner holds a rollout of ``T`` steps from ``N`` environments: rewards, value predictions and
done flags as ``T x N`` arrays (numpy or torch), plus the task each env was running at every step. This
module splits every env's column into **episode segments**, scores each segment, aggregates the segments
of each task and feeds the curriculum with one :meth:`~magister.curricula.plr.PLR.update_scores` call::

    from magister.integrations.scores import feed_scores

    # after collecting the rollout, before (or after) the PPO update
    feed_scores(curriculum, rewards, values, dones, next_value, tasks)

**Conventions.** ``dones[t, n]`` is true when the episode of env ``n`` ended *at* step ``t`` (after its
action, terminated or truncated); ``values[t, n] = V(s_t)``; ``bootstrap_value[n] = V(s_T)``, the value of
the observation after the last step. ``truncated`` (optional, ``T x N``) marks the done steps that were
time-limit truncations; their next-state value is ``final_values[t, n]`` when given, else they are treated as
terminal (the common CleanRL convention). ``tasks`` is ``T x N`` (a numpy array, or ``T`` rows of ``N``
encoded tasks) giving the task of env ``n`` at step ``t``; the task may change only right after a done.

**GAE.** ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)`` and
``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``, computed for the whole rollout in one reverse
scan over ``T`` (vectorised over ``N``); the done flags cut the recursion, so each segment's advantages are
exactly those of :func:`magister.curricula.scoring.gae` on that segment alone.

**Segments and partial segments.** A segment is a maximal run of steps of one env within one episode. A
segment that ends with a done is *complete at its end*; the last segment of a column usually is not: its
episode continues into the next rollout. With ``partial="bootstrap"`` (default, as PLR does) such a segment
is scored like any other, its GAE bootstrapped with ``bootstrap_value`` - the score of a trajectory
*segment*; with ``partial="skip"`` only segments ending in a done are scored. The first segment of a column
may have begun in the previous rollout; it is scored on its steps here. Scores of several segments of the
same task are averaged, weighted by segment length. A task with no segment scored in this rollout is not
touched at all.

**Scores.** ``value_l1`` ``(1/T) sum |A_t|``, ``positive_value_loss`` ``(1/T) sum max(A_t, 0)``, ``max_mc``
``(1/T) sum (R_max - V(s_t))`` and ``return``, or a user callable ``f(Segment) -> float``. ``R_max`` is the
best of the curriculum's record (:meth:`PLR.max_returns`) and the returns of *full* episodes in this rollout
(segments that start after a done and end with one); for a task with neither, the segment's own
undiscounted return stands in. ``return`` uses full episodes only (a partial sum is not a return), so a
task without a full episode in the rollout is not updated. Full-episode returns are also sent as
``max_returns`` so the curriculum's ``R_max`` stays current.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..curricula.scoring import VALUE_SCORES, Segment
from ..task_spaces.base import EncodedTask, task_key

logger = logging.getLogger(__name__)

__all__ = ["SegmentScores", "compute_advantages", "feed_scores", "rollout_scores"]

_PARTIAL = ("bootstrap", "skip")


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


@dataclass
class SegmentScores:
    """Per-segment results of a rollout (numpy arrays of equal length, one entry per segment).

    ``env`` and ``start``/``end`` (inclusive) locate the segment; ``done`` says whether it ends with a done;
    ``full`` whether it is a whole episode (starts after a done in this rollout and ends with one).
    """

    tasks: list[EncodedTask]
    scores: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    done: np.ndarray
    full: np.ndarray
    env: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def per_task(self, use: np.ndarray | None = None) -> tuple[list[EncodedTask], np.ndarray]:
        """Length-weighted mean score per task over the selected segments (all by default)."""
        sel = np.ones(len(self.tasks), dtype=bool) if use is None else np.asarray(use, dtype=bool)
        keys: dict[Hashable, int] = {}
        first: list[EncodedTask] = []
        ids = np.empty(int(sel.sum()), dtype=np.int64)
        for j, i in enumerate(np.flatnonzero(sel).tolist()):
            k = task_key(self.tasks[i])
            if k not in keys:
                keys[k] = len(first)
                first.append(self.tasks[i])
            ids[j] = keys[k]
        w = self.lengths[sel].astype(np.float64)
        num = np.bincount(ids, weights=self.scores[sel] * w, minlength=len(first))
        den = np.bincount(ids, weights=w, minlength=len(first))
        return first, num / np.where(den > 0, den, 1.0)


def _check_shapes(rewards: Any, values: Any, dones: Any, bootstrap_value: Any) -> tuple[int, int]:
    shape = tuple(rewards.shape)
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"rewards must be a non-empty T x N array, got shape {shape}")
    for name, arr in (("values", values), ("dones", dones)):
        if tuple(arr.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(arr.shape)}, expected {shape} like rewards")
    if tuple(bootstrap_value.shape) != (shape[1],):
        raise ValueError(f"bootstrap_value has shape {tuple(bootstrap_value.shape)}, expected ({shape[1]},)")
    return shape[0], shape[1]


def compute_advantages(
    rewards: Any,
    values: Any,
    dones: Any,
    bootstrap_value: Any,
    gamma: float,
    gae_lambda: float,
    truncated: Any = None,
    final_values: Any = None,
) -> Any:
    """GAE advantages ``A`` (``T x N``) of a rollout; numpy in, numpy out; torch in, torch out.

    >>> r = np.array([[0.0], [1.0]]); v = np.array([[0.5], [0.5]])
    >>> compute_advantages(r, v, np.array([[False], [True]]), np.array([9.0]), 1.0, 1.0).ravel().tolist()
    [0.5, 0.5]
    """
    if _is_torch(rewards):
        import torch

        r = rewards.to(torch.float64)
        v = values.to(r)
        d = dones.to(torch.bool)
        boot = bootstrap_value.to(r)
        T = r.shape[0]
        nxt = torch.cat([v[1:], boot[None]], dim=0)
        cont = (~d).to(r)
        target = nxt * cont
        if truncated is not None and final_values is not None:
            tr = truncated.to(torch.bool) & d
            target = torch.where(tr, final_values.to(r), target)
        delta = r + gamma * target - v
        adv = torch.empty_like(delta)
        acc = torch.zeros_like(boot)
        for t in range(T - 1, -1, -1):
            acc = delta[t] + gamma * gae_lambda * cont[t] * acc
            adv[t] = acc
        return adv
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    d = np.asarray(dones, dtype=bool)
    boot = np.asarray(bootstrap_value, dtype=np.float64)
    nxt = np.concatenate([v[1:], boot[None]], axis=0)
    cont = (~d).astype(np.float64)
    target = nxt * cont
    if truncated is not None and final_values is not None:
        tr = np.asarray(truncated, dtype=bool) & d
        target = np.where(tr, np.asarray(final_values, dtype=np.float64), target)
    delta = r + gamma * target - v
    adv = np.empty_like(delta)
    acc = np.zeros_like(boot)
    for t in range(r.shape[0] - 1, -1, -1):
        acc = delta[t] + gamma * gae_lambda * cont[t] * acc
        adv[t] = acc
    return adv


def _to_numpy(x: Any) -> np.ndarray:
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _task_grid(tasks: Any, T: int, N: int) -> tuple[Any, bool]:
    """Return (grid, numeric): a T x N numpy array for numeric tasks, else a list of T lists of N."""
    if _is_torch(tasks):
        tasks = tasks.detach().cpu().numpy()
    if isinstance(tasks, np.ndarray) and tasks.dtype.kind in "iu" and tasks.shape == (T, N):
        return tasks, True
    if isinstance(tasks, np.ndarray) and tasks.dtype.kind in "iu":
        raise ValueError(f"tasks has shape {tasks.shape}, expected ({T}, {N}) like rewards")
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (Sequence, np.ndarray)) or len(tasks) != T:
        raise ValueError(f"tasks must be T x N = {T} x {N} (rows of per-env tasks), got {tasks!r:.80}")
    rows = []
    for t, row in enumerate(tasks):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)) or len(row) != N:
            raise ValueError(f"tasks row {t} must hold {N} tasks (one per env), got {row!r}")
        rows.append(list(row))
    return rows, False


def rollout_scores(
    rewards: Any,
    values: Any,
    dones: Any,
    bootstrap_value: Any,
    tasks: Any,
    *,
    score: str | Callable[[Segment], float] = "value_l1",
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    truncated: Any = None,
    final_values: Any = None,
    max_returns: Callable[[list[EncodedTask]], np.ndarray] | None = None,
) -> SegmentScores:
    """Split a ``T x N`` rollout into episode segments and score each one.

    Args:
        rewards, values, dones: ``T x N`` arrays or tensors (see the module docstring for conventions).
        bootstrap_value: ``(N,)``, ``V(s_T)``.
        tasks: ``T x N`` encoded tasks.
        score: ``"value_l1"``, ``"positive_value_loss"``, ``"max_mc"``, ``"return"`` or ``f(Segment)``.
        gamma, gae_lambda: GAE parameters.
        truncated, final_values: optional ``T x N`` truncation flags and next-state values for them.
        max_returns: ``f(tasks) -> R_max array`` (e.g. ``curriculum.max_returns``); ``-inf`` = unknown.

    Returns:
        :class:`SegmentScores`, one entry per segment (env-major, in time order).

    >>> r = np.array([[0.0, 1.0], [1.0, 0.0]]); v = np.full((2, 2), 0.5)
    >>> d = np.array([[False, True], [True, False]])
    >>> s = rollout_scores(r, v, d, np.zeros(2), np.array([[3, 4], [3, 5]]), gamma=1.0, gae_lambda=1.0)
    >>> s.tasks, s.scores.tolist(), s.lengths.tolist(), s.done.tolist()
    ([3, 4, 5], [0.5, 0.5, 0.5], [2, 1, 1], [True, True, False])
    """
    if isinstance(score, str) and score not in VALUE_SCORES + ("return",):
        raise ValueError(f"score {score!r} cannot be computed from a rollout; expected one of "
                         f"{VALUE_SCORES + ('return',)} or a callable (learnability comes from episodes)")
    if not isinstance(score, str) and not callable(score):
        raise TypeError(f"score must be a name or a callable f(Segment) -> float, got {score!r}")
    if _is_torch(rewards):
        import torch

        def as_t(x: Any) -> Any:  # the other inputs follow the rewards' device
            if x is None:
                return None
            return torch.as_tensor(x if _is_torch(x) else _to_numpy(x), device=rewards.device)

        values, dones, bootstrap_value = as_t(values), as_t(dones), as_t(bootstrap_value)
        truncated, final_values = as_t(truncated), as_t(final_values)
    else:
        as_n = lambda x, dt: None if x is None else np.asarray(_to_numpy(x), dtype=dt)  # noqa: E731
        rewards, values = as_n(rewards, np.float64), as_n(values, np.float64)
        dones, bootstrap_value = as_n(dones, bool), as_n(bootstrap_value, np.float64)
        truncated, final_values = as_n(truncated, bool), as_n(final_values, np.float64)
    shape = tuple(rewards.shape)
    for name, arr in (("truncated", truncated), ("final_values", final_values)):
        if arr is not None and tuple(arr.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(arr.shape)}, expected {shape} like rewards")
    T, N = _check_shapes(rewards, values, dones, bootstrap_value)
    grid, numeric = _task_grid(tasks, T, N)
    for name, arr in (("rewards", rewards), ("values", values), ("bootstrap_value", bootstrap_value),
                      ("final_values", final_values)):
        if arr is None:
            continue
        finite = bool(arr.isfinite().all()) if _is_torch(arr) else bool(np.isfinite(arr).all())
        if not finite:
            raise ValueError(f"{name} contains NaN or inf")

    adv_any = compute_advantages(rewards, values, dones, bootstrap_value, gamma, gae_lambda,
                                 truncated, final_values)
    sums, d, new_np, seg_np = _segment_sums(rewards, values, dones, adv_any)
    n_seg = int(seg_np[-1]) + 1
    adv = _to_numpy(adv_any).astype(np.float64) if not isinstance(score, str) else None

    lengths = np.bincount(seg_np, minlength=n_seg)
    starts_flat = np.flatnonzero(new_np.T.reshape(-1))
    env = starts_flat // T
    start = starts_flat % T
    end = start + lengths - 1
    seg_done = d[end, env]
    full = seg_done & (start > 0)
    # Tasks: one per segment; the task may only change right after a done.
    if numeric:
        changed = np.zeros((T, N), dtype=bool)
        changed[1:] = grid[1:] != grid[:-1]
        bad = changed & ~new_np
        seg_tasks = [int(x) for x in grid[start, env]]
    else:
        bad = np.zeros((T, N), dtype=bool)
        for n in range(N):
            for t in range(1, T):
                if not new_np[t, n] and task_key(grid[t][n]) != task_key(grid[t - 1][n]):
                    bad[t, n] = True
        seg_tasks = [grid[s][e] for s, e in zip(start.tolist(), env.tolist())]
    if bad.any():
        t, n = np.argwhere(bad)[0]
        raise ValueError(f"env {n} changed task at step {t} without a done at step {t - 1}")

    name = score if isinstance(score, str) else None
    if name == "value_l1":
        scores = sums["abs"] / lengths
    elif name == "positive_value_loss":
        scores = sums["pos"] / lengths
    elif name == "return":
        scores = sums["r"].copy()
    else:
        rmax = _segment_rmax(seg_tasks, sums["r"], full, max_returns)
        if name == "max_mc":
            scores = rmax - sums["v"] / lengths
        else:
            v_np = _to_numpy(values).astype(np.float64)
            r_np = _to_numpy(rewards).astype(np.float64)
            scores = np.empty(n_seg)
            for i in range(n_seg):
                sl = slice(start[i], end[i] + 1)
                seg = Segment(r_np[sl, env[i]], v_np[sl, env[i]], adv[sl, env[i]], bool(seg_done[i]),
                              float(rmax[i]))
                scores[i] = float(score(seg))
    if not np.all(np.isfinite(scores)):
        raise ValueError("a segment score is not finite; check the score function and inputs")
    return SegmentScores(seg_tasks, scores, lengths, sums["r"], seg_done, full, env, start, end)


def _segment_sums(
    rewards: Any, values: Any, dones: Any, adv: Any
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Per-segment sums of |A|, max(A, 0), V and r (numpy), plus dones, segment starts and segment ids.

    Segments are numbered env-major (env 0's segments in time order, then env 1's, ...). A segment
    starts at ``t = 0`` and right after every done. Torch inputs are reduced with ``index_add_`` on their
    device; only the per-segment sums come back to the CPU.
    """
    T, N = tuple(rewards.shape)
    if _is_torch(adv):
        import torch

        d_t = dones.to(torch.bool)
        new_seg = torch.ones((T, N), dtype=torch.bool, device=d_t.device)
        new_seg[1:] = d_t[:-1]
        seg_id = torch.cumsum(new_seg.T.reshape(-1).to(torch.int64), 0) - 1
        n_seg = int(seg_id[-1].item()) + 1
        r64 = rewards.to(torch.float64)

        def seg_sum(x: Any) -> np.ndarray:
            out = torch.zeros(n_seg, dtype=torch.float64, device=r64.device)
            return out.index_add_(0, seg_id, x.to(r64).T.reshape(-1)).cpu().numpy()

        sums = {"abs": seg_sum(adv.abs()), "pos": seg_sum(adv.clamp(min=0)), "v": seg_sum(values),
                "r": seg_sum(r64)}
        return sums, d_t.cpu().numpy(), new_seg.cpu().numpy(), seg_id.cpu().numpy()
    d = np.asarray(dones, dtype=bool)
    new_np = np.ones((T, N), dtype=bool)
    new_np[1:] = d[:-1]
    seg_np = np.cumsum(new_np.T.reshape(-1)) - 1
    n_seg = int(seg_np[-1]) + 1

    def seg_sum_np(x: np.ndarray) -> np.ndarray:
        return np.bincount(seg_np, weights=np.asarray(x, np.float64).T.reshape(-1), minlength=n_seg)

    sums = {"abs": seg_sum_np(np.abs(adv)), "pos": seg_sum_np(np.maximum(adv, 0.0)), "v": seg_sum_np(values),
            "r": seg_sum_np(rewards)}
    return sums, d, new_np, seg_np


def _segment_rmax(
    seg_tasks: list[EncodedTask],
    seg_returns: np.ndarray,
    full: np.ndarray,
    max_returns: Callable[[list[EncodedTask]], np.ndarray] | None,
) -> np.ndarray:
    """R_max per segment: the curriculum's record merged with full episodes of this rollout."""
    keys = [task_key(t) for t in seg_tasks]
    best: dict[Hashable, float] = {}
    for k, r, f in zip(keys, seg_returns.tolist(), full.tolist()):
        if f:
            best[k] = max(best.get(k, -np.inf), r)
    known = (np.asarray(max_returns(seg_tasks), dtype=np.float64) if max_returns is not None
             else np.full(len(seg_tasks), -np.inf))
    rmax = np.array([max(known[i], best.get(k, -np.inf)) for i, k in enumerate(keys)], dtype=np.float64)
    unknown = ~np.isfinite(rmax)
    rmax[unknown] = seg_returns[unknown]  # no record at all: the segment's own return stands in
    return rmax


def feed_scores(
    curriculum: Any,
    rewards: Any,
    values: Any,
    dones: Any,
    bootstrap_value: Any,
    tasks: Any,
    *,
    truncated: Any = None,
    final_values: Any = None,
    partial: str = "bootstrap",
) -> dict[str, float]:
    """Score a rollout with the curriculum's own score and GAE settings and update it in one call.

    ``curriculum`` is a :class:`~magister.curricula.plr.PLR` (or anything with ``score``, ``gamma``,
    ``gae_lambda``, ``update_scores`` and, for MaxMC, ``max_returns``), or a curriculum server (an object
    with ``.curriculum`` and ``.lock``): then the update runs under the server's lock, so it never races the
    env updates. Returns a small summary (segments scored, tasks updated, mean score) for logging.

    Raises ``ValueError`` for bad shapes, NaN inputs, a task switch without a done, or a curriculum whose
    score comes from episodes (learnability); the curriculum is unchanged then.
    """
    if partial not in _PARTIAL:
        raise ValueError(f"partial must be one of {_PARTIAL}, got {partial!r}")
    lock = getattr(curriculum, "lock", None) if hasattr(curriculum, "curriculum") else None
    if lock is not None:
        curriculum = curriculum.curriculum
    with lock if lock is not None else contextlib.nullcontext():
        return _feed(curriculum, rewards, values, dones, bootstrap_value, tasks, truncated, final_values,
                     partial)


def _feed(
    curriculum: Any,
    rewards: Any,
    values: Any,
    dones: Any,
    bootstrap_value: Any,
    tasks: Any,
    truncated: Any,
    final_values: Any,
    partial: str,
) -> dict[str, float]:
    score = getattr(curriculum, "score", None)
    if isinstance(score, str) and score not in VALUE_SCORES + ("return",):
        raise ValueError(f"the curriculum's score {score!r} comes from episodes (update_on_episode), "
                         "not from a rollout")
    mr = getattr(curriculum, "max_returns", None)
    seg = rollout_scores(
        rewards, values, dones, bootstrap_value, tasks, score=score, gamma=curriculum.gamma,
        gae_lambda=curriculum.gae_lambda, truncated=truncated, final_values=final_values,
        max_returns=mr if score == "max_mc" or callable(score) else None,
    )
    use = seg.done.copy() if partial == "skip" else np.ones(len(seg.tasks), dtype=bool)
    if score == "return":
        use &= seg.full
    task_list, task_scores = seg.per_task(use)
    # Send the R_max of full episodes along so the curriculum's record stays current.
    full_best: dict[Hashable, float] = {}
    for t, r, f in zip(seg.tasks, seg.returns.tolist(), seg.full.tolist()):
        if f:
            k = task_key(t)
            full_best[k] = max(full_best.get(k, -np.inf), r)
    if task_list:
        known = mr(task_list) if mr is not None else np.full(len(task_list), -np.inf)
        max_ret = np.array([max(known[i], full_best.get(task_key(t), -np.inf))
                            for i, t in enumerate(task_list)])
        curriculum.update_scores(task_list, task_scores, max_returns=max_ret)
    logger.debug("fed %d task scores from %d segments", len(task_list), int(use.sum()))
    return {
        "scores/segments": float(use.sum()),
        "scores/tasks": float(len(task_list)),
        "scores/mean": float(task_scores.mean()) if len(task_list) else 0.0,
    }
