"""Score and prioritisation functions of the Prioritized Level Replay family, as pure numpy.

Scores of one trajectory *segment* (consecutive steps of one episode on one task, length ``T``):

* **value L1** (Jiang et al. 2021, "Prioritized Level Replay", the L1 value loss; eq. (1) of the Syllabus
  paper): ``(1/T) sum_t |A_t|`` with the GAE advantage ``A_t = sum_{k>=t} (gamma*lambda)^(k-t) delta_k`` and
  ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)``;
* **positive value loss** (Jiang et al. 2021b, "Replay-Guided Adversarial Environment Design"):
  ``(1/T) sum_t max(A_t, 0)``;
* **MaxMC** (Jiang et al. 2021b): ``(1/T) sum_t (R_max - V(s_t))`` with ``R_max`` the highest undiscounted
  episode return seen on the task;
* **learnability** (Tzannetos et al. 2023, used by Rutherford et al. 2024): ``p (1 - p)`` for a success rate
  ``p``;
* **return**: the mean undiscounted episode return (a value-free proxy).

Replay distribution over a buffer of ``n`` entries with scores ``S_i`` and last-sampled clocks ``C_i``
(Jiang et al. 2021, Sec. 3):

* rank prioritisation ``h(S_i) = 1 / rank(S_i)`` (rank 1 = highest score), power prioritisation
  ``h(S_i) = S_i``; score distribution ``P_S(i) = h_i^(1/beta) / sum_j h_j^(1/beta)``, temperature ``beta``;
* staleness ``P_C(i) = (c - C_i) / sum_j (c - C_j)``, ``c`` the number of samples drawn so far;
* mixture ``P = (1 - rho) P_S + rho P_C``.

>>> import numpy as np
>>> rank_weights(np.array([0.5, 2.0, 1.0]), temperature=1.0).round(4).tolist()
[0.1818, 0.5455, 0.2727]
>>> staleness_weights(np.array([0, 3, 4]), clock=4).tolist()
[0.8, 0.2, 0.0]
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "SCORE_NAMES",
    "VALUE_SCORES",
    "EPISODE_SCORES",
    "Segment",
    "SegmentScore",
    "compute_advantages",
    "gae",
    "learnability",
    "max_mc",
    "positive_value_loss",
    "power_weights",
    "rank_weights",
    "rank_weights_from_order",
    "replay_distribution",
    "score_segment",
    "sorted_rank_weights",
    "staleness_weights",
    "value_l1",
]

#: Scores computed learner-side from values (fed through ``PLR.update_scores``).
VALUE_SCORES = ("value_l1", "positive_value_loss", "max_mc")
#: Scores computed by the curriculum itself from finished episodes (``update_on_episode``).
EPISODE_SCORES = ("learnability", "return")
SCORE_NAMES = VALUE_SCORES + EPISODE_SCORES


def _as_1d(name: str, x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    return a


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
    """GAE advantages ``A`` (``T x N``) of a time-major rollout; numpy in, numpy out; torch in, torch out.

    ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)`` and
    ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``, in one reverse scan over ``T`` (vectorised
    over ``N``), in float64. ``dones[t]`` is true when the episode ended *at* step ``t``;
    ``V(s_T) = bootstrap_value`` (``(N,)``). A step marked in ``truncated`` (``T x N``, with ``final_values``)
    ended by a time limit: its next-state value is ``final_values[t]`` instead of 0. Torch tensors stay on
    their device. This is the one GAE of magister: :func:`gae` (one segment) and
    :func:`magister.integrations.scores.feed_scores` use it.

    >>> r = np.array([[0.0], [1.0]]); v = np.array([[0.5], [0.5]])
    >>> compute_advantages(r, v, np.array([[False], [True]]), np.array([9.0]), 1.0, 1.0).ravel().tolist()
    [0.5, 0.5]
    """
    cut = truncated is not None and final_values is not None
    if type(rewards).__module__.startswith("torch"):
        import torch as xp

        r = rewards.to(xp.float64)
        v, boot = values.to(r), bootstrap_value.to(r)
        ended = dones.to(xp.bool)
        cont = (~ended).to(r)
        if cut:
            truncated, final_values = truncated.to(xp.bool) & ended, final_values.to(r)
    else:
        xp = np
        r = np.asarray(rewards, dtype=np.float64)
        v, boot = np.asarray(values, dtype=np.float64), np.asarray(bootstrap_value, dtype=np.float64)
        ended = np.asarray(dones, dtype=bool)
        cont = (~ended).astype(np.float64)
        if cut:
            truncated = np.asarray(truncated, dtype=bool) & ended
            final_values = np.asarray(final_values, dtype=np.float64)
    next_values = xp.zeros_like(v)  # V(s_{t+1}), 0 after a terminal step
    next_values[:-1] = v[1:]
    next_values[-1] = boot
    next_values = next_values * cont
    if cut:
        next_values = xp.where(truncated, final_values, next_values)
    delta = r + gamma * next_values - v
    adv = xp.zeros_like(delta)
    acc = 0.0
    for t in range(delta.shape[0] - 1, -1, -1):
        acc = delta[t] + gamma * gae_lambda * cont[t] * acc
        adv[t] = acc
    return adv


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: float,
    gamma: float,
    gae_lambda: float,
    terminal: bool,
) -> np.ndarray:
    """GAE advantages of one segment of one episode (:func:`compute_advantages` on one env's column).

    Args:
        rewards: ``r_0 .. r_{T-1}``.
        values: ``V(s_0) .. V(s_{T-1})``.
        bootstrap_value: ``V(s_T)``, the value after the last step (ignored when ``terminal``).
        gamma, gae_lambda: discount and GAE lambda.
        terminal: whether the episode ended (terminated) at the last step.

    Returns:
        ``A_0 .. A_{T-1}``.

    >>> gae(np.array([0.0, 1.0]), np.array([0.5, 0.5]), 0.0, 1.0, 1.0, True).tolist()
    [0.5, 0.5]
    """
    r = _as_1d("rewards", rewards)
    v = _as_1d("values", values)
    if r.shape != v.shape or r.size == 0:
        raise ValueError(f"rewards and values must be non-empty, of equal length; got {r.shape}, {v.shape}")
    ended = np.zeros((r.size, 1), dtype=bool)
    ended[-1] = terminal
    boot = np.array([0.0 if terminal else float(bootstrap_value)])
    return compute_advantages(r[:, None], v[:, None], ended, boot, gamma, gae_lambda)[:, 0]


def value_l1(advantages: np.ndarray) -> float:
    """Average absolute GAE, ``(1/T) sum_t |A_t|``.

    >>> value_l1(np.array([1.0, -3.0]))
    2.0
    """
    return float(np.abs(_as_1d("advantages", advantages)).mean())


def positive_value_loss(advantages: np.ndarray) -> float:
    """Mean positive GAE, ``(1/T) sum_t max(A_t, 0)``.

    >>> positive_value_loss(np.array([1.0, -3.0]))
    0.5
    """
    return float(np.maximum(_as_1d("advantages", advantages), 0.0).mean())


def max_mc(values: np.ndarray, max_return: float) -> float:
    """MaxMC regret, ``(1/T) sum_t (R_max - V(s_t))``.

    >>> max_mc(np.array([0.25, 0.75]), 1.0)
    0.5
    """
    return float(max_return - _as_1d("values", values).mean())


def learnability(success_rate: np.ndarray | float) -> np.ndarray | float:
    """``p (1 - p)``; raises ``ValueError`` for a rate outside [0, 1].

    >>> learnability(0.5), learnability(1.0)
    (0.25, 0.0)
    """
    p = np.asarray(success_rate, dtype=np.float64)
    if np.any(~np.isfinite(p)) or np.any(p < 0.0) or np.any(p > 1.0):
        raise ValueError(f"success rates must be in [0, 1], got {success_rate!r}")
    out = p * (1.0 - p)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Segment:
    """One trajectory segment of one episode on one task, as the score functions see it.

    ``done`` tells whether the episode ended inside the segment (else it is a partial segment, bootstrapped
    with ``bootstrap_value``); ``max_return`` is the task's best known undiscounted return.
    """

    rewards: np.ndarray
    values: np.ndarray
    advantages: np.ndarray
    done: bool
    max_return: float


#: A user score: ``f(segment) -> float``.
SegmentScore = Callable[[Segment], float]


def score_segment(name: str, segment: Segment) -> float:
    """Score a segment by name (one of :data:`VALUE_SCORES` or ``"return"``).

    >>> seg = Segment(np.array([0.0, 1.0]), np.array([0.5, 0.5]), np.array([0.5, 0.5]), True, 1.0)
    >>> [score_segment(n, seg) for n in ("value_l1", "positive_value_loss", "max_mc", "return")]
    [0.5, 0.5, 0.5, 1.0]
    """
    if name == "value_l1":
        return value_l1(segment.advantages)
    if name == "positive_value_loss":
        return positive_value_loss(segment.advantages)
    if name == "max_mc":
        return max_mc(segment.values, segment.max_return)
    if name == "return":
        return float(np.sum(segment.rewards))
    raise ValueError(f"unknown segment score {name!r}; expected one of {VALUE_SCORES + ('return',)}")


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not np.isfinite(t) or t <= 0.0:
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return t


def rank_weights(scores: np.ndarray, temperature: float) -> np.ndarray:
    """Rank prioritisation ``h_i = 1/rank(S_i)``, ``P_i = h_i^(1/beta) / sum_j h_j^(1/beta)``.

    Tied scores share equally the weight of the ranks they occupy (the expectation of breaking ties at
    random), so the result is deterministic and no tied entry is favoured by its position.

    >>> rank_weights(np.array([3.0, 1.0]), 0.5).round(3).tolist()
    [0.8, 0.2]
    >>> rank_weights(np.array([0.0, 5.0, 0.0]), 1.0).round(4).tolist()  # ranks 2 and 3 shared
    [0.2273, 0.5455, 0.2273]
    """
    s = _as_1d("scores", scores)
    t = _check_temperature(temperature)
    if s.size == 0:
        return s.copy()
    # any order among ties: tied entries are averaged
    return rank_weights_from_order(s, np.argsort(-s), sorted_rank_weights(s.size, t))


def sorted_rank_weights(size: int, temperature: float) -> np.ndarray:
    """Unnormalised rank weights ``h_r^(1/beta) = r^(-1/beta)`` for ranks ``r = 1 .. size``.

    Computed in log space so a tiny ``beta`` cannot underflow everything to 0; the first ``m`` entries
    are the weights for ``m`` ranks (a longer array can be cached and sliced).

    >>> sorted_rank_weights(3, 1.0).round(4).tolist()
    [1.0, 0.5, 0.3333]
    """
    t = _check_temperature(temperature)
    logw = -np.log(np.arange(1, int(size) + 1, dtype=np.float64)) / t
    return np.exp(logw - logw[0])


def rank_weights_from_order(scores: np.ndarray, order: np.ndarray, sorted_weights: np.ndarray) -> np.ndarray:
    """:func:`rank_weights` given a descending order of ``scores`` (ties in any order) and
    :func:`sorted_rank_weights` of at least ``scores.size`` ranks: no sort. Not validated (internal use).

    >>> s = np.array([0.0, 5.0, 0.0])
    >>> rank_weights_from_order(s, np.array([1, 2, 0]), sorted_rank_weights(3, 1.0)).round(4).tolist()
    [0.2273, 0.5455, 0.2273]
    """
    n = scores.size
    srt = scores[order]
    differ = srt[1:] != srt[:-1]
    if differ.all():  # no ties: nothing to average
        w_sorted = sorted_weights[:n]
    else:
        group = np.concatenate(([0], np.cumsum(differ)))
        w_sorted = (np.bincount(group, weights=sorted_weights[:n]) / np.bincount(group))[group]
    w = np.empty(n, dtype=np.float64)
    w[order] = w_sorted
    return w / w.sum()


def power_weights(scores: np.ndarray, temperature: float) -> np.ndarray:
    """Power prioritisation ``h_i = S_i``, ``P_i = S_i^(1/beta) / sum_j S_j^(1/beta)`` (uniform if all zero).

    Scores must be non-negative.

    >>> power_weights(np.array([1.0, 3.0]), 1.0).tolist()
    [0.25, 0.75]
    """
    s = _as_1d("scores", scores)
    t = _check_temperature(temperature)
    if s.size == 0:
        return s.copy()
    if np.any(s < 0):
        raise ValueError(f"power prioritisation needs non-negative scores, got min {s.min()}")
    if not np.any(s > 0):
        return np.full(s.size, 1.0 / s.size)
    pos = s > 0
    logw = np.full(s.size, -np.inf)
    logw[pos] = np.log(s[pos]) / t
    w = np.exp(logw - logw[pos].max())
    return w / w.sum()


def staleness_weights(last_sampled: np.ndarray, clock: int) -> np.ndarray:
    """``P_C(i) = (c - C_i) / sum_j (c - C_j)``; uniform when every entry is fresh (all ``C_i == c``).

    >>> staleness_weights(np.array([2, 2]), clock=2).tolist()
    [0.5, 0.5]
    """
    c = np.asarray(last_sampled, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"last_sampled must be 1-D, got shape {c.shape}")
    if c.size and c.max() > clock:
        raise ValueError(f"last_sampled clocks must be <= clock={clock}, got max {c.max()}")
    st = clock - c
    total = st.sum()
    if c.size == 0:
        return st
    if total <= 0:
        return np.full(c.size, 1.0 / c.size)
    return st / total


def replay_distribution(
    scores: np.ndarray,
    last_sampled: np.ndarray,
    clock: int,
    *,
    temperature: float,
    staleness_coef: float,
    prioritization: str = "rank",
) -> np.ndarray:
    """``P = (1 - rho) P_S + rho P_C`` over buffer entries.

    >>> replay_distribution(np.array([1.0, 0.0]), np.array([0, 1]), 1, temperature=1.0,
    ...                     staleness_coef=0.5).round(4).tolist()
    [0.8333, 0.1667]
    """
    if not 0.0 <= staleness_coef <= 1.0:
        raise ValueError(f"staleness_coef must be in [0, 1], got {staleness_coef}")
    if prioritization == "rank":
        ps = rank_weights(scores, temperature)
    elif prioritization == "power":
        ps = power_weights(scores, temperature)
    else:
        raise ValueError(f"prioritization must be 'rank' or 'power', got {prioritization!r}")
    if staleness_coef == 0.0:
        return ps
    pc = staleness_weights(last_sampled, clock)
    return (1.0 - staleness_coef) * ps + staleness_coef * pc
