"""ADR: automatic domain randomization (OpenAI et al., 2019, arXiv:1910.07113, Algorithm 1).

*Solving Rubik's Cube with a Robot Hand* (OpenAI, Akkaya et al., 2019) trains on environment parameters
drawn from a box that starts at one calibrated point and grows along each dimension while the agent does
well at its edges. Per dimension ``i`` of the parameter box ``[L_i, H_i]`` (:class:`~._continuous.ParamBox`)
ADR keeps bounds :math:`\\phi_i^L \\le \\phi_i^H`, both starting at the calibrated point ``initial``, and
draws tasks

.. math::

    \\lambda_i \\sim U(\\phi_i^L, \\phi_i^H) \\quad \\text{independently per dimension.}

**Boundary sampling.** With probability ``boundary_prob`` (:math:`p_b`) a task is a *boundary* task: a
dimension ``i`` is drawn uniformly and :math:`\\lambda_i` is set to :math:`\\phi_i^L` or :math:`\\phi_i^H`
(50/50). ADR remembers which bound the task evaluates; the performance of the episode played on it goes to
that bound's queue :math:`D_i^L` or :math:`D_i^H`. Episodes on other tasks are never counted.

**Bound update.** When a queue holds ``queue_length`` (:math:`m`) performances, with :math:`\\bar{p}` their
mean and :math:`\\Delta_i` the step of dimension ``i``:

.. math::

    \\bar{p} \\ge t_H:\\ \\text{the bound moves outward by } \\Delta_i
    \\quad (\\phi_i^H \\leftarrow \\min(\\phi_i^H + \\Delta_i, H_i),\\ \\phi_i^L \\leftarrow
    \\max(\\phi_i^L - \\Delta_i, L_i));

.. math::

    \\bar{p} \\le t_L:\\ \\text{the bound moves inward by } \\Delta_i
    \\quad (\\phi_i^H \\leftarrow \\max(\\phi_i^H - \\Delta_i, \\phi_i^L),\\ \\phi_i^L \\leftarrow
    \\min(\\phi_i^L + \\Delta_i, \\phi_i^H));

then the queue is emptied (whether or not the bound moved).

**Units.** ``step`` is a *fraction of each dimension's full range* ``H_i - L_i`` (a number, or one per
dimension), so :math:`\\Delta_i = \\text{step}_i (H_i - L_i)`. The paper sets :math:`\\Delta` per parameter
in that parameter's own units; to use an absolute :math:`\\Delta_i`, pass ``step = Δ / (high - low)``.
``initial`` is in the parameters' own units (for a config axis, its values).

**Thresholds are prior knowledge.** :math:`t_L` and :math:`t_H` say what "doing well" means for this
environment, on the scale of the signal ADR reads: ``signal="return"`` (the episode's return; the paper's
performance is the number of successes in an episode) or ``signal="progress"`` (the final success in
[0, 1]). There are no defaults: ADR without them raises ``TypeError`` saying which to pass.

**Defaults.** The paper's, as quoted by the notes this file was written from (not checked against the
paper): :math:`m = 240`, :math:`p_b = 0.5`, :math:`\\Delta = 0.02`; its thresholds were
:math:`t_L = 10`, :math:`t_H = 20` successes. Other settings: TeachMyAgent (Romac et al., 2021) uses
:math:`p_b = 0.7`, :math:`\\Delta = 0.1` in task units, :math:`t_L = 0`, :math:`t_H = 180` (return),
:math:`m = 10`; IsaacGymEnvs' AllegroHand DextremeADR config uses a boundary share of 0.4, queues of 256,
:math:`t_L = 5`, :math:`t_H = 20`. ``initial`` has no default either: it is the calibrated point (the
environment's nominal parameters); ``initial=None`` starts at the centre of the box, which is rarely one.

**Asynchronous episodes.** A boundary task is credited to its bound when its episode comes back, matched by
the task; tasks with the same parameters are interchangeable (while a bound pair is still one point, every
task there is the boundary value of each of its dimensions). A performance reaches the queue of the bound
the task was drawn for even when that bound has moved in between; a task the server reports abandoned
(:meth:`ADR.on_task_abandoned`) is forgotten. At most :data:`MAX_PENDING` boundary tasks wait for their
episodes; past that, the oldest is forgotten (logged).

ADR needs numpy only (no ``teachers`` extra).

>>> from magister.task_spaces import Box
>>> adr = ADR(Box(0.0, 1.0), initial=[0.5], queue_length=4, boundary_prob=1.0, step=0.1,
...           low_threshold=0.2, high_threshold=0.8, signal="progress", seed=0)
>>> for _ in range(7):  # every episode a boundary episode, all at 0.5, all successes
...     (task,) = adr.sample(1)
...     adr.update_on_episode(1.0, 1, task, 1.0)
>>> [round(float(v), 2) for v in adr.bounds()[0] + adr.bounds()[1]]  # one of the two bounds moved by 0.1
[0.4, 0.5]
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._continuous import ParamBox, feedback
from .base import Curriculum, check_finite

logger = logging.getLogger(__name__)

__all__ = ["ADR", "MAX_PENDING"]

#: Boundary tasks that may wait for their episodes at once; past this, the oldest is forgotten.
MAX_PENDING = 100_000
_SIGNALS = ("return", "progress")
_SIDES = ("low", "high")


def _thresholds_error(missing: list[str]) -> TypeError:
    return TypeError(
        f"ADR needs {' and '.join(missing)}: the performance at which a bound moves, on the scale of "
        "the signal ADR reads. When the mean performance of a bound's queue of boundary episodes is >= "
        "high_threshold the bound widens by one step; when it is <= low_threshold it narrows. With "
        "signal='progress' they are success rates in [0, 1] (e.g. low_threshold=0.2, high_threshold=0.8); "
        "with signal='return' they are episode returns (the paper used 10 and 20 successes per episode)"
    )


class ADR(Curriculum):
    """Automatic domain randomization over a box of task parameters (see the module docstring).

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes all hold numbers, or a ``Product`` of those.
    initial : array_like or None
        The calibrated point both bounds start at, one number per parameter dimension (or one for all),
        inside the box. ``None``: the box's centre.
    low_threshold, high_threshold : float
        :math:`t_L < t_H`, on the signal's scale; required (``TypeError`` naming what is missing).
    queue_length : int
        Boundary performances per bound before it is tested (:math:`m`).
    boundary_prob : float
        Probability that a task is a boundary task (:math:`p_b`), in [0, 1].
    step : float or array_like
        How far a bound moves, as a fraction of each dimension's full range, in (0, 1].
    signal : {"return", "progress"}
        The episode's return or its final progress.
    seed : int, optional
        Seeds the sampling.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        initial: Any,
        low_threshold: float | None = None,
        high_threshold: float | None = None,
        queue_length: int = 240,
        boundary_prob: float = 0.5,
        step: float | Any = 0.02,
        signal: str = "return",
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "ADR")
        missing = [n for n, v in (("low_threshold", low_threshold), ("high_threshold", high_threshold))
                   if v is None]
        if missing:
            raise _thresholds_error(missing)
        self.low_threshold = check_finite("low_threshold", low_threshold)  # type: ignore[arg-type]
        self.high_threshold = check_finite("high_threshold", high_threshold)  # type: ignore[arg-type]
        if not self.low_threshold < self.high_threshold:
            raise ValueError(f"ADR needs low_threshold < high_threshold, got {low_threshold!r} and "
                             f"{high_threshold!r}")
        if (isinstance(queue_length, bool) or not isinstance(queue_length, (int, np.integer))
                or queue_length < 1):
            raise ValueError(f"queue_length must be an int >= 1, got {queue_length!r}")
        if not 0.0 <= float(boundary_prob) <= 1.0:
            raise ValueError(f"boundary_prob must be in [0, 1], got {boundary_prob!r}")
        if signal not in _SIGNALS:
            raise ValueError(f"signal must be one of {_SIGNALS}, got {signal!r}")
        self.queue_length = int(queue_length)
        self.boundary_prob = float(boundary_prob)
        self.signal = signal
        self.step = self._per_dim("step", step)
        if not np.all((self.step > 0.0) & (self.step <= 1.0)):
            raise ValueError(f"step must be a fraction of each dimension's range in (0, 1], got {step!r}")
        centre = (self.params.low + self.params.high) / 2
        start = centre if initial is None else self._per_dim("initial", initial)
        outside = [self.params.names[i] for i in np.flatnonzero((start < self.params.low)
                                                                  | (start > self.params.high))]
        if outside:
            raise ValueError(
                f"ADR: initial {start.tolist()} lies outside the box on {outside} "
                f"(low {self.params.low.tolist()}, high {self.params.high.tolist()})"
            )
        self.initial = start
        self.lower, self.upper = start.copy(), start.copy()
        # queues[i][0] / queues[i][1]: the performances waiting at dimension i's lower / upper bound
        self._queues: list[list[list[float]]] = [[[], []] for _ in range(self.params.dims)]
        # the boundary tasks handed out and not yet played: task key -> [(dim, side), ...] in order
        self._pending: dict[tuple[float, ...], list[tuple[int, int]]] = {}
        self._num_pending = 0
        self.boundary_episodes = 0
        self.widened = 0
        self.narrowed = 0

    def _per_dim(self, name: str, value: Any) -> np.ndarray:
        arr = np.asarray(value, dtype=np.float64)
        try:
            arr = np.broadcast_to(arr, (self.params.dims,)).copy()
        except ValueError:
            raise ValueError(f"ADR: {name} has shape {arr.shape}, expected a number or one per parameter "
                             f"dimension ({self.params.dims}: {self.params.names})") from None
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"ADR: {name} must be finite, got {value!r}")
        return arr

    # -- sampling -----------------------------------------------------------------------------------
    def bounds(self) -> tuple[list[float], list[float]]:
        """The current ``(lower, upper)`` bounds, one number per parameter dimension."""
        return self.lower.tolist(), self.upper.tolist()

    def _key(self, task: EncodedTask) -> tuple[float, ...]:
        return tuple(self.params.vector(task).tolist())

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks uniform in the current bounds; each is a boundary task with probability
        ``boundary_prob``."""
        self._check_k(k)
        k, dims = int(k), self.params.dims
        x = self.rng.uniform(self.lower, self.upper, size=(k, dims))
        boundary = np.flatnonzero(self.rng.random(k) < self.boundary_prob)
        dim = self.rng.integers(dims, size=boundary.size)
        side = self.rng.integers(2, size=boundary.size)
        x[boundary, dim] = np.where(side == 1, self.upper[dim], self.lower[dim])
        tasks = [self.params.task(row, self.rng) for row in x]
        for j, i, s in zip(boundary.tolist(), dim.tolist(), side.tolist()):
            self._pending.setdefault(self._key(tasks[j]), []).append((i, s))
            self._num_pending += 1
        while self._num_pending > MAX_PENDING:
            self._forget(next(iter(self._pending)))
            logger.warning("ADR: more than %d boundary tasks wait for their episodes; forgot the oldest",
                           MAX_PENDING)
        self.num_sampled += k
        return tasks

    def _forget(self, key: tuple[float, ...]) -> tuple[int, int] | None:
        """Take the oldest pending boundary entry of ``key`` (``None`` when it has none)."""
        entries = self._pending.get(key)
        if not entries:
            return None
        entry = entries.pop(0)
        if not entries:
            del self._pending[key]
        self._num_pending -= 1
        return entry

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Credit a boundary episode's performance to its bound's queue; test the queue when full."""
        _, y = feedback(self, task, episode_return, length, progress, self.signal)
        entry = self._forget(self._key(task))
        if entry is None:
            return
        dim, side = entry
        self.boundary_episodes += 1
        queue = self._queues[dim][side]
        queue.append(y)
        if len(queue) >= self.queue_length:
            self._move(dim, side, float(np.mean(queue)))
            queue.clear()

    def _move(self, dim: int, side: int, mean: float) -> None:
        delta = self.step[dim] * self.params.width[dim]
        lo, hi = self.lower[dim], self.upper[dim]
        if mean >= self.high_threshold:
            self.widened += 1
            if side == 0:
                self.lower[dim] = max(lo - delta, self.params.low[dim])
            else:
                self.upper[dim] = min(hi + delta, self.params.high[dim])
        elif mean <= self.low_threshold:
            self.narrowed += 1
            if side == 0:
                self.lower[dim] = min(lo + delta, hi)
            else:
                self.upper[dim] = max(hi - delta, lo)
        else:
            return
        logger.debug("ADR: %s bound of %s at %.4g -> [%.4g, %.4g] (mean %.4g)", _SIDES[side],
                     self.params.names[dim], (lo, hi)[side], self.lower[dim], self.upper[dim], mean)

    def on_task_abandoned(self, task: EncodedTask, env_id: int | None = None) -> None:
        """Forget one pending boundary entry of ``task`` (its episode will never come)."""
        self._forget(self._key(task))

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Counters, each dimension's ``adr/low[...]``/``adr/high[...]`` (by :attr:`ParamBox.names`), and
        ``adr/coverage``: the mean over dimensions of the share of the full range the bounds cover."""
        out = super().metrics()
        for name, lo, hi in zip(self.params.names, self.lower.tolist(), self.upper.tolist()):
            sep = "" if name.startswith("[") else "/"
            out[f"adr/low{sep}{name}"] = lo
            out[f"adr/high{sep}{name}"] = hi
        out["adr/coverage"] = float(np.mean((self.upper - self.lower) / self.params.width))
        out["adr/boundary_episodes"] = float(self.boundary_episodes)
        out["adr/widened"] = float(self.widened)
        out["adr/narrowed"] = float(self.narrowed)
        out["adr/pending"] = float(self._num_pending)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            dims=self.params.dims,
            lower=self.lower.tolist(),
            upper=self.upper.tolist(),
            queues=[[list(q) for q in pair] for pair in self._queues],
            pending=[[list(key), [list(e) for e in entries]] for key, entries in self._pending.items()],
            boundary_episodes=self.boundary_episodes,
            widened=self.widened,
            narrowed=self.narrowed,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("class") == type(self).__name__ and int(state["dims"]) != self.params.dims:
            raise ValueError(
                f"ADR state_dict has {state['dims']} parameter dimensions, this space has {self.params.dims}"
            )
        super().load_state_dict(state)
        self.lower = np.array(state["lower"], dtype=np.float64)
        self.upper = np.array(state["upper"], dtype=np.float64)
        self._queues = [[[float(v) for v in q] for q in pair] for pair in state["queues"]]
        self._pending = {tuple(float(v) for v in key): [(int(e[0]), int(e[1])) for e in entries]
                         for key, entries in state["pending"]}
        self._num_pending = sum(len(e) for e in self._pending.values())
        self.boundary_episodes = int(state["boundary_episodes"])
        self.widened = int(state["widened"])
        self.narrowed = int(state["narrowed"])

    def __repr__(self) -> str:
        return f"ADR({self.task_space!r}, lower={self.lower.tolist()}, upper={self.upper.tolist()})"
