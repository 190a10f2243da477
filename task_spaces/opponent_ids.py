"""The task space of the co-player curricula: the opponent ids present in an opponent store right now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..opponents.store import OpponentStore, check_opponent_id
from .base import TaskSpace, check_k

__all__ = ["OpponentIdSpace"]


class OpponentIdSpace(TaskSpace):
    """The task space of a co-player curriculum: the opponent ids currently in a store (plus fixed extras).

    Encoded and decoded tasks are the same ints. The space grows as snapshots are added and shrinks as they
    are evicted, so it is open-ended: ``num_tasks`` is ``None``, while ``tasks`` (and ``ids()``) list the ids
    present *now*, ascending.

    >>> from magister.opponents import CURRENT_AGENT
    >>> space = OpponentIdSpace(None, extra_ids=[CURRENT_AGENT])
    >>> space.tasks, space.contains(-1), space.contains(3), space.num_tasks
    ([-1], True, False, None)
    """

    def __init__(self, store: OpponentStore | None, *, extra_ids: Sequence[int] = (),
                 seed: int | None = None) -> None:
        super().__init__(seed)
        self.store = store
        self.extra_ids = [check_opponent_id(i) for i in extra_ids]

    def ids(self) -> list[int]:
        """Current ids, ascending."""
        stored = self.store.ids() if self.store is not None else []
        return sorted(set(stored) | set(self.extra_ids))

    def _encoding_spec(self) -> Any:
        return ("opponent ids",)  # as the workers' OpponentIds: an id is its own encoding

    def _empty(self) -> RuntimeError:
        return RuntimeError("no opponents stored yet: call update_agent(agent) before sampling opponents")

    def sample(self) -> int:
        ids = self.ids()
        if not ids:
            raise self._empty()
        return ids[int(self._rng.integers(len(ids)))]

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[int]:
        check_k(k)
        ids = self.ids()
        if not ids:
            raise self._empty()
        return [ids[i] for i in (rng or self._rng).integers(len(ids), size=int(k))]

    def contains(self, task: Any) -> bool:
        try:
            i = check_opponent_id(task)
        except TypeError:
            return False
        return i in self.extra_ids or (self.store is not None and i in self.store)

    def encode(self, task: int) -> int:
        if not self.contains(task):
            raise ValueError(f"opponent id {task!r} is not in {self!r} (ids: {self.ids()})")
        return int(task)

    decode = encode

    @property
    def num_tasks(self) -> None:
        """Always ``None``: the set of ids changes over time (``len(space.ids())`` is the current count)."""
        return None

    @property
    def tasks(self) -> list[int]:
        return self.ids()

    def __repr__(self) -> str:
        where = str(self.store.directory) if self.store is not None else None
        return f"OpponentIdSpace(store={where!r}, extra_ids={self.extra_ids})"
