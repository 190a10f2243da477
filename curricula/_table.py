"""Dense per-task slots for tabular curricula.

Tabular algorithms (PLR, Learning Progress, SFL, PFSP …) keep statistics per task in numpy arrays.
:class:`TaskIndex` maps encoded tasks to the dense integers ``0 .. len(index) - 1`` that index those
arrays: identity for *indexed* spaces (``Discrete``, ``MultiDiscrete``, fully discrete products), a dict
keyed by :func:`~magister.task_spaces.task_key` for everything else (open-ended, config, box spaces), so
the same curriculum code runs on any task space with O(1) work per update.

>>> from magister.task_spaces.base import TaskSpace
>>> class Names(TaskSpace):
...     num_tasks = None
...     def sample(self): return "a"
...     def contains(self, t): return isinstance(t, str)
...     def encode(self, t): return t
...     def decode(self, e):
...         if not isinstance(e, str): raise ValueError(e)
...         return e
>>> idx = TaskIndex(Names())
>>> idx.slot("x"), idx.slot("y"), idx.slot("x"), len(idx)
(0, 1, 0, 2)
>>> idx.task(1)
'y'
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key


class TaskIndex:
    """Maps encoded tasks of one space to dense integer slots."""

    def __init__(self, task_space: TaskSpace, validate: bool = True) -> None:
        self.task_space = task_space
        self.validate = validate
        self.indexed = bool(task_space.indexed)
        self._n = int(task_space.num_tasks) if self.indexed else 0
        self._slots: dict[Hashable, int] = {}
        self._tasks: list[EncodedTask] = []

    def __len__(self) -> int:
        return self._n if self.indexed else len(self._tasks)

    def slot(self, encoded: EncodedTask, add: bool = True) -> int:
        """Slot of ``encoded``; registers unseen tasks when ``add``.

        Raises ``ValueError`` for a task outside the space, or (``add=False``) for a task never seen.
        """
        if self.indexed:
            if isinstance(encoded, (bool, np.bool_)) or not isinstance(encoded, (int, np.integer)):
                raise ValueError(f"task {encoded!r} is not an encoded task of {self.task_space!r}")
            i = int(encoded)
            if not 0 <= i < self._n:
                raise ValueError(f"task {encoded!r} is not an encoded task of {self.task_space!r}")
            return i
        key = task_key(encoded)
        s = self._slots.get(key)
        if s is not None:
            return s
        if not add:
            raise ValueError(f"task {encoded!r} is unknown to this curriculum")
        if self.validate:
            self.task_space.check_encoded(encoded)
        s = len(self._tasks)
        self._slots[key] = s
        self._tasks.append(encoded)
        return s

    def slots(self, tasks: Iterable[EncodedTask], add: bool = True) -> np.ndarray:
        """Slots of several tasks as an int64 array (vectorised for indexed spaces)."""
        if self.indexed:
            arr = np.asarray(list(tasks) if not isinstance(tasks, np.ndarray) else tasks)
            if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= self._n):
                bad = arr.ravel()[0] if arr.dtype.kind not in "iu" else arr[(arr < 0) | (arr >= self._n)][0]
                raise ValueError(f"task {bad!r} is not an encoded task of {self.task_space!r}")
            return arr.astype(np.int64, copy=False)
        return np.fromiter((self.slot(t, add) for t in tasks), dtype=np.int64)

    def task(self, slot: int) -> EncodedTask:
        """The encoded task in ``slot``."""
        if self.indexed:
            if not 0 <= slot < self._n:
                raise IndexError(f"slot {slot} out of range for {self._n} tasks")
            return int(slot)
        return self._tasks[slot]

    def tasks(self, slots: np.ndarray) -> list[EncodedTask]:
        """Encoded tasks of several slots."""
        if self.indexed:
            return [int(s) for s in np.asarray(slots)]
        return [self._tasks[int(s)] for s in np.asarray(slots)]

    def __contains__(self, encoded: EncodedTask) -> bool:
        if self.indexed:
            try:
                self.slot(encoded)
            except ValueError:
                return False
            return True
        return task_key(encoded) in self._slots

    def state_dict(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "n": self._n, "tasks": list(self._tasks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.indexed = bool(state["indexed"])
        self._n = int(state["n"])
        self._tasks = list(state["tasks"])
        self._slots = {task_key(t): i for i, t in enumerate(self._tasks)}


def grow(arr: np.ndarray, size: int, fill: Any = 0) -> np.ndarray:
    """Return ``arr`` extended along axis 0 to at least ``size`` rows (capacity doubles), new rows = fill."""
    if arr.shape[0] >= size:
        return arr
    new = max(size, 2 * arr.shape[0], 16)
    out = np.full((new,) + arr.shape[1:], fill, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out
