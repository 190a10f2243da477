"""Learner-side score helpers for the PLR family: from a rollout to per-task scores in one call.

A PPO-style learner holds a rollout of ``T`` steps from ``N`` environments: rewards, value predictions and
done flags as time-major ``T x N`` arrays (numpy or torch), plus the task each env was running at every
step. This module splits every env's column into **episode segments**, scores each segment, aggregates the
segments of each task and feeds the curriculum with one :meth:`~magister.curricula.plr.PLR.update_scores`
call::

    from magister.integrations.scores import feed_scores

    # after collecting the rollout, before (or after) the PPO update; CleanRL-style buffers:
    feed_scores(curriculum, rewards, values, dones, next_value, tasks,
                done_convention="before_step", next_done=next_done)

**Done conventions.** RL codebases store done flags in two ways that look alike (same shape, same dtype)
but are shifted by one step, and the shift silently changes every score. :func:`feed_scores` therefore
requires ``done_convention=`` (there is no default):

* ``"ended_at"``: ``dones[t, n]`` is true when the episode of env ``n`` ended *at* step ``t`` (the
  ``terminated | truncated`` that step ``t``'s ``env.step`` returned, stored at index ``t``: a plain
  Gymnasium loop, RLlib's per-step ``terminateds``/``truncateds``, or
  :func:`magister.integrations.sb3.rollout_dones`). Episode ends at steps 1 and 3 of ``T = 4``::

      dones = [[0], [1], [0], [1]]            # feed_scores(..., done_convention="ended_at")

* ``"before_step"``: ``dones[t, n]`` is the done flag observed *before* step ``t``, i.e. returned by the
  previous ``env.step`` (so ``s_t`` starts a new episode): CleanRL's ``dones`` buffer (filled with
  ``next_done`` before each step) and Stable-Baselines3's ``RolloutBuffer.episode_starts``. The flag of the
  last step is not in the array, so the caller also passes ``next_done`` (``(N,)``, the done flags returned
  by the rollout's last ``env.step``: CleanRL's ``next_done``). The same rollout as above::

      dones = [[x], [0], [1], [0]]; next_done = [1]   # done_convention="before_step"

  ``dones[0]`` concerns the previous rollout and is not used. Internally ``ended[t] = dones[t + 1]`` and
  ``ended[T - 1] = next_done``, so both conventions give *identical* scores for the same rollout.

The other inputs do not depend on the convention: ``values[t, n] = V(s_t)``; ``bootstrap_value[n] = V(s_T)``,
the value of the observation after the last step (``(N,)``; ``(1, N)`` and ``(N, 1)`` are flattened).
``truncated`` (optional, ``T x N``) marks the steps whose episode ended by a time-limit truncation, indexed
by the step that truncated (as ``env.step`` returns it, in both conventions); their next-state value is
``final_values[t, n]`` when given, else they are treated as terminal (the common CleanRL convention).
``tasks`` is ``T x N`` (a numpy array, or ``T`` rows of ``N`` encoded tasks) giving the task of env ``n`` at
step ``t``; the task may change only right after a done. :func:`rollout_scores` and
:func:`compute_advantages` take ``"ended_at"`` dones.

**Shapes.** Every array is time-major, ``(T, N) = (steps, envs)``. The number of envs ``N`` is read from
``bootstrap_value`` (and checked against ``tasks`` and ``next_done``); an array laid out ``N x T`` is
rejected with a ``ValueError`` that names the shapes received (a transposed rollout is only undetectable
when ``T == N``).

**Curricula.** Only curricula that take value scores, the PLR family (``PLR``, ``RobustPLR`` and ``ACCEL``:
those with ``update_scores``), can be fed; any other curriculum, or a server serving one, raises
``TypeError``. A PLR-family curriculum whose score comes from episodes (``learnability``) raises
``ValueError``.

**GAE.** ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)`` and
``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``, computed for the whole rollout in one reverse
scan over ``T`` (vectorised over ``N``) by :func:`compute_advantages` (defined in
:mod:`magister.curricula.scoring`, re-exported here); the done flags cut the recursion, so each segment's
advantages are exactly those of :func:`magister.curricula.scoring.gae` on that segment alone.

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
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..curricula.scoring import VALUE_SCORES, Segment, compute_advantages
from ..task_spaces.base import EncodedTask, task_key

logger = logging.getLogger(__name__)

__all__ = ["DONE_CONVENTIONS", "DoneConvention", "SegmentScores", "compute_advantages", "feed_scores",
           "rollout_scores"]

_PARTIAL = ("bootstrap", "skip")

DoneConvention = Literal["ended_at", "before_step"]
#: The accepted values of ``feed_scores(..., done_convention=...)`` (see the module docstring).
DONE_CONVENTIONS: tuple[str, ...] = ("ended_at", "before_step")

_CONVENTION_HELP = (
    "done_convention='ended_at' if dones[t] is true when the episode ended AT step t (the terminated | "
    "truncated returned by step t's env.step, stored at index t: a plain Gymnasium loop, RLlib's per-step "
    "terminateds/truncateds, magister.integrations.sb3.rollout_dones(...)); done_convention='before_step' "
    "if dones[t] is the done flag observed BEFORE step t, returned by the previous env.step (CleanRL's "
    "`dones` buffer filled with `next_done` before each step; SB3's RolloutBuffer.episode_starts), and then "
    "also pass next_done= (the done flags returned by the rollout's last env.step: CleanRL's `next_done`, "
    "SB3's last `dones`)"
)


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


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))


def _check_shapes(
    rewards: Any, values: Any, dones: Any, bootstrap_value: Any, next_done: Any = None
) -> tuple[int, int]:
    """Check the time-major ``(T, N)`` layout; return ``(T, N)``.

    ``N`` is the length of ``bootstrap_value`` (one value per env) and ``T`` the steps of the arrays laid
    out ``(T, N)``, so an error names the array that disagrees (a transposed ``rewards`` is blamed, not
    ``values``) and the shape it should have.
    """
    shapes = {"rewards": _shape(rewards), "values": _shape(values), "dones": _shape(dones)}
    got = ", ".join(f"{k} {v}" for k, v in shapes.items())
    got += f", bootstrap_value {_shape(bootstrap_value)}"
    if next_done is not None:
        got += f", next_done {_shape(next_done)}"
    for name, shape in shapes.items():
        if len(shape) != 2 or 0 in shape:
            one_env = f"; for one env use {name}[:, None]" if len(shape) == 1 else ""
            raise ValueError(f"{name} has shape {shape}, expected a non-empty time-major (T, N) = "
                             f"(steps, envs) array; got {got}{one_env}")
    boot = _shape(bootstrap_value)
    n_envs = boot[0] if len(boot) == 1 else (int(np.prod(boot)) if len(boot) == 2 and 1 in boot else None)
    if n_envs is None:
        widths = Counter(shape[1] for shape in shapes.values()).most_common(1)[0][0]
        raise ValueError(f"bootstrap_value has shape {boot}, expected (N,) = ({widths},) with one value per "
                         f"env; got {got}")
    N = n_envs
    steps = [shape[0] for shape in shapes.values() if shape[1] == N]
    if not steps:  # no array has N columns
        first = next(iter(shapes.values()))
        if all(shape == first for shape in shapes.values()) and first[0] == N:
            raise ValueError(f"rewards, values and dones have shape {first}, expected ({first[1]}, {N}): "
                             f"bootstrap_value has shape {boot} (N = {N} envs) and every array must be "
                             f"time-major (T, N) = (steps, envs); got {got}; the arrays look transposed, "
                             f"laid out N x T with N = {N} envs: pass time-major arrays, e.g. rewards.T, "
                             "values.T, dones.T and tasks.T")
        if all(shape == first for shape in shapes.values()):
            raise ValueError(f"bootstrap_value has shape {boot} (N = {N} envs), expected ({first[1]},) like "
                             f"the envs of rewards, values and dones {first} (time-major (T, N)); got {got}")
        raise ValueError(f"rewards, values and dones must be time-major (T, N) = (steps, {N}) with N = {N} "
                         f"envs as in bootstrap_value; got {got}")
    T = Counter(steps).most_common(1)[0][0]
    wrong = [name for name, shape in shapes.items() if shape != (T, N)]
    if wrong:
        right = [name for name in shapes if name not in wrong] + ["bootstrap_value"]
        which = " and ".join(f"{name} has shape {shapes[name]}" for name in wrong)
        transposed = [name for name in wrong if shapes[name] == (N, T)]
        hint = (f"; {' and '.join(transposed)} look{'s' if len(transposed) == 1 else ''} transposed: pass "
                f"{', '.join(name + '.T' for name in transposed)}" if transposed else "")
        raise ValueError(f"{which}, expected ({T}, {N}) = (steps, envs) like {', '.join(right)}: every array "
                         f"must be time-major (T, N); got {got}{hint}")
    if next_done is not None:
        nd = _shape(next_done)
        if not (nd == (N,) or (len(nd) == 2 and 1 in nd and int(np.prod(nd)) == N)):
            raise ValueError(f"next_done has shape {nd}, expected ({N},): one flag per env; got {got}")
    return T, N


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
        hint = " (it looks transposed: pass tasks.T)" if tasks.shape == (N, T) else ""
        raise ValueError(f"tasks has shape {tasks.shape}, expected time-major (T, N) = ({T}, {N}) like "
                         f"rewards{hint}")
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (Sequence, np.ndarray)) or len(tasks) != T:
        n_rows = len(tasks) if isinstance(tasks, (Sequence, np.ndarray)) else None
        raise ValueError(f"tasks must be time-major (T, N) = ({T}, {N}): {T} rows of per-env tasks, got "
                         f"{n_rows} rows: {tasks!r:.80}")
    rows = []
    for t, row in enumerate(tasks):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)) or len(row) != N:
            raise ValueError(f"tasks row {t} must hold {N} tasks (one per env; tasks must be time-major "
                             f"(T, N) = ({T}, {N})), got {row!r:.80}")
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
        rewards: time-major ``T x N`` array or tensor of rewards.
        values: ``T x N`` critic values ``V(s_t)``.
        dones: ``T x N`` done flags in the ``"ended_at"`` convention (``dones[t]``: the episode ended at
            step ``t``; see the module docstring).
        bootstrap_value: ``(N,)``, ``V(s_T)``.
        tasks: ``T x N`` encoded tasks.
        score: ``"value_l1"``, ``"positive_value_loss"``, ``"max_mc"``, ``"return"`` or ``f(Segment)``.
        gamma: GAE's discount.
        gae_lambda: GAE's ``lambda``.
        truncated: optional ``T x N`` truncation flags.
        final_values: next-state values of the truncated steps (``T x N``), with ``truncated``.
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
    T, N = _check_shapes(rewards, values, dones, bootstrap_value)
    if len(_shape(bootstrap_value)) == 2:
        bootstrap_value = bootstrap_value.reshape(-1) if _is_torch(bootstrap_value) else np.reshape(
            bootstrap_value, -1)
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


def _value_scored_classes() -> list[str]:
    """Names of magister's curricula that take learner-side scores (those with ``update_scores``)."""
    from .. import curricula

    found: dict[type, None] = {}
    for name in curricula.__all__:
        obj = getattr(curricula, name, None)
        if isinstance(obj, type) and issubclass(obj, curricula.Curriculum) and hasattr(obj, "update_scores"):
            found[obj] = None
    return [c.__name__ for c in sorted(found, key=lambda c: (len(c.__mro__), c.__name__))]


def _check_value_scored(curriculum: Any, target: Any) -> None:
    """Raise ``TypeError`` unless ``curriculum`` takes value scores (the PLR family)."""
    if hasattr(curriculum, "update_scores"):
        return
    served = f" (served by {type(target).__name__})" if target is not curriculum else ""
    raise TypeError(
        f"feed_scores needs a curriculum that takes learner-side value scores; "
        f"{type(curriculum).__name__}{served} has no update_scores. Value scores are taken by the PLR "
        f"family: {', '.join(_value_scored_classes())} (a score in {VALUE_SCORES} or a callable); other "
        "curricula learn from the episodes the envs report, so do not call feed_scores for them"
    )


def _ended_at(dones: Any, next_done: Any) -> Any:
    """``"before_step"`` dones plus ``next_done`` -> ``"ended_at"`` dones (same array type as ``dones``)."""
    if _is_torch(dones):
        import torch

        nd = next_done if _is_torch(next_done) else torch.as_tensor(_to_numpy(next_done))
        nd = nd.to(device=dones.device, dtype=dones.dtype).reshape(1, -1)
        return torch.cat([dones[1:], nd], dim=0)
    d = np.asarray(_to_numpy(dones))
    nd = np.asarray(_to_numpy(next_done)).astype(d.dtype).reshape(1, -1)
    return np.concatenate([d[1:], nd], axis=0)


def feed_scores(
    curriculum: Any,
    rewards: Any,
    values: Any,
    dones: Any,
    bootstrap_value: Any,
    tasks: Any,
    *,
    done_convention: DoneConvention | None = None,
    next_done: Any = None,
    truncated: Any = None,
    final_values: Any = None,
    partial: str = "bootstrap",
) -> dict[str, float]:
    """Score a rollout with the curriculum's own score and GAE settings and update it in one call.

    Args:
        curriculum: A PLR-family curriculum (:class:`~magister.curricula.plr.PLR`, ``RobustPLR``,
            ``ACCEL``), or a curriculum server wrapping one (an object with ``.curriculum`` and ``.lock``,
            e.g. ``magister.serve(PLR(...))``): then the update runs under the server's lock, so it never
            races the env updates.
        rewards: Time-major ``(T, N)`` array or tensor of rewards.
        values: ``(T, N)`` critic values ``V(s_t)``.
        dones: ``(T, N)`` done flags, read as ``done_convention`` says.
        bootstrap_value: ``(N,)``, ``V(s_T)`` of the observation after the last step.
        tasks: ``(T, N)`` encoded tasks.
        done_convention: Required. ``"ended_at"``: ``dones[t]`` is true when the episode ended *at* step
            ``t``. ``"before_step"``: ``dones[t]`` is the done flag observed *before* step ``t`` (CleanRL's
            ``dones``, SB3's ``episode_starts``); then pass ``next_done`` too. See the module docstring.
        next_done: ``(N,)`` done flags returned by the rollout's last ``env.step``; only (and always) with
            ``done_convention="before_step"``.
        truncated: Optional ``(T, N)`` truncation flags, indexed by the step that truncated, in both
            conventions.
        final_values: Next-state values of the truncated steps (``(T, N)``, indexed alike), with
            ``truncated``.
        partial: ``"bootstrap"`` (PLR) or ``"skip"``: how each env's unfinished last segment is scored.

    The same rollout (episodes ending at steps 1 and 3 of ``T = 4``, one env) in both conventions:

    >>> from magister.curricula.plr import PLR
    >>> from magister.task_spaces.discrete import Discrete
    >>> r, v, b = np.array([[0.0], [1.0], [0.0], [1.0]]), np.full((4, 1), 0.5), np.zeros(1)
    >>> tasks = np.array([[0], [0], [1], [1]])
    >>> a, c = (PLR(Discrete(2), replay_prob=0.0, seed=0) for _ in range(2))
    >>> _ = a.sample(8), c.sample(8)
    >>> ended = np.array([[0], [1], [0], [1]])
    >>> before, next_done = np.array([[0], [0], [1], [0]]), np.array([1])
    >>> _ = feed_scores(a, r, v, ended, b, tasks, done_convention="ended_at")
    >>> _ = feed_scores(c, r, v, before, b, tasks, done_convention="before_step", next_done=next_done)
    >>> a.buffer_scores().tolist() == c.buffer_scores().tolist()
    True

    Returns a small summary (segments scored, tasks updated, mean score) for logging.

    Raises ``TypeError`` for a missing or unknown ``done_convention``, a misplaced or missing ``next_done``,
    or a curriculum that does not take value scores; ``ValueError`` for bad shapes (arrays not time-major
    ``(T, N)``), NaN inputs, a task switch without a done, or a PLR-family curriculum whose score comes from
    episodes (learnability). The curriculum is unchanged then.
    """
    if done_convention is None:
        raise TypeError(f"feed_scores() needs done_convention=: {_CONVENTION_HELP}")
    if done_convention not in DONE_CONVENTIONS:
        raise TypeError(f"done_convention must be one of {DONE_CONVENTIONS}, got {done_convention!r}: "
                        f"{_CONVENTION_HELP}")
    if done_convention == "before_step" and next_done is None:
        raise TypeError("done_convention='before_step' needs next_done=, the done flags returned by the "
                        "rollout's last env.step (CleanRL's `next_done`; SB3's last `dones`): dones[t] only "
                        "says whether an episode ended before step t, so the last step's end is not in it")
    if done_convention == "ended_at" and next_done is not None:
        raise TypeError("next_done is only used with done_convention='before_step'; with 'ended_at' the last "
                        "row of dones already holds the last step's done flags")
    if partial not in _PARTIAL:
        raise ValueError(f"partial must be one of {_PARTIAL}, got {partial!r}")
    target = curriculum
    lock = getattr(curriculum, "lock", None) if hasattr(curriculum, "curriculum") else None
    if lock is not None:
        curriculum = curriculum.curriculum
    _check_value_scored(curriculum, target)
    _check_shapes(rewards, values, dones, bootstrap_value, next_done)
    if done_convention == "before_step":
        dones = _ended_at(dones, next_done)
    logger.debug("feed_scores: done_convention=%r, rollout of shape %s", done_convention, _shape(rewards))
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
