"""Step records on the env side, batched into :class:`~magister.sync.protocol.Steps`."""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

import numpy as np

from . import protocol as P

__all__ = ["StepBuffer"]


def _copy(obs: Any, drop: frozenset[str] = frozenset()) -> Any:
    """``obs`` without the dict keys in ``drop``, its arrays copied (an env may overwrite them in place)."""
    if isinstance(obs, np.ndarray):
        return obs.copy()
    if isinstance(obs, dict):
        return {k: _copy(v) for k, v in obs.items() if k not in drop}
    if isinstance(obs, (tuple, list)):
        return tuple(_copy(v) for v in obs)
    return obs


def observation_bytes(obs: Any) -> int:
    """The bytes of the arrays in ``obs`` (an array, or a dict or sequence of them)."""
    if isinstance(obs, np.ndarray):
        return obs.nbytes
    if isinstance(obs, (dict, tuple, list)):
        return sum(observation_bytes(v) for v in (obs.values() if isinstance(obs, dict) else obs))
    return 0


def _stackable(arrays: list[Any]) -> bool:
    """Whether ``arrays`` are numeric arrays of one shape and dtype."""
    ref = arrays[0]
    return isinstance(ref, np.ndarray) and ref.dtype.kind in "biufc" and all(
        isinstance(a, np.ndarray) and a.shape == ref.shape and a.dtype == ref.dtype for a in arrays
    )


def stack_observations(observations: list[Any]) -> Any:
    """Observations stacked along a new first axis when they share one numeric layout (for dicts, one
    array per key); otherwise their tuple.

    >>> stack_observations([np.zeros(2), np.ones(2)]).shape
    (2, 2)
    >>> type(stack_observations([np.zeros(2), np.ones(3)])).__name__
    'tuple'
    """
    if _stackable(observations):
        return np.stack(observations)
    keys = observations[0].keys() if isinstance(observations[0], dict) else None
    if keys and all(isinstance(o, dict) and o.keys() == keys for o in observations):
        columns = {k: [o[k] for o in observations] for k in keys}
        if all(isinstance(k, str) and _stackable(c) for k, c in columns.items()):
            return {k: np.stack(c) for k, c in columns.items()}
    return tuple(observations)


class StepBuffer:
    """Step records of one env waiting to be sent as one :class:`~magister.sync.protocol.Steps`.

    Observations (``send_obs``) are copied, infos (``send_infos``) kept, both without ``strip_keys``; the
    step that fills ``capacity`` calls ``on_full()``.
    """

    def __init__(
        self, send_obs: bool, send_infos: bool, strip_keys: frozenset[str], capacity: int = 0,
        on_full: Callable[[], None] | None = None,
    ) -> None:
        self.send_obs, self.send_infos, self.strip_keys = send_obs, send_infos, strip_keys
        self.capacity = int(capacity) if on_full is not None and capacity > 0 else 0
        self.on_full = on_full
        self.clear()

    def clear(self) -> None:
        # run-length records, a step appending two numbers: the per-step overhead target needs them
        self.runs: list[tuple[int, Any]] = []  # (first step, assignment)
        self.last: Any = None  # the assignment of the last step
        self.rewards = array.array("d")
        self.progress = array.array("d")
        self.ends: list[tuple[int, bool, bool]] = []  # (step, terminated, truncated)
        self.obs: list[Any] = []
        self.infos: list[dict] = []

    def __len__(self) -> int:
        return len(self.rewards)

    def add(
        self, a: Any, obs: Any, reward: float, term: bool, trunc: bool, info: Any, progress: float
    ) -> None:
        """Record one step on assignment ``a``; a step that fills the batch hands it to ``on_full``."""
        n = len(self.rewards)
        if a is not self.last:
            self.runs.append((n, a))
            self.last = a
        self.rewards.append(reward)
        self.progress.append(progress)
        if term or trunc:
            self.ends.append((n, bool(term), bool(trunc)))
        if self.send_obs:
            self.obs.append(_copy(obs, self.strip_keys))
        if self.send_infos:
            self.infos.append({k: v for k, v in (info or {}).items() if k not in self.strip_keys})
        if n + 1 == self.capacity:
            self.on_full()  # type: ignore[misc]

    def message(self) -> P.Steps:
        """The buffered steps as one :class:`~magister.sync.protocol.Steps`; empties the buffer."""
        n = len(self.rewards)
        ids = np.empty(n, dtype=np.int64)
        tasks: list[Any] = []
        for (start, a), (end, _) in zip(self.runs, [*self.runs[1:], (n, None)]):
            ids[start:end] = a.task_id
            tasks.extend([a.task] * (end - start))
        term = np.zeros(n, dtype=np.bool_)
        trunc = np.zeros(n, dtype=np.bool_)
        for i, te, tr in self.ends:
            term[i], trunc[i] = te, tr
        msg = P.Steps(ids, tuple(tasks), np.array(self.rewards, dtype=np.float64), term, trunc,
                      np.array(self.progress, dtype=np.float64),
                      stack_observations(self.obs) if self.send_obs and self.obs else None,
                      tuple(self.infos) if self.send_infos else None)
        self.clear()
        return msg
