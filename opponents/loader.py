"""The worker side of the opponent store: keep the opponent being played leased, and loaded once."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, BinaryIO

from .store import OpponentStore, check_opponent_id

logger = logging.getLogger(__name__)

__all__ = ["OpponentLoader"]


class OpponentLoader:
    """Worker-side helper: holds a lease on the opponent an environment is playing and caches it.

    ``get(i)`` releases the previous opponent's lease, leases ``i`` and loads it (once; the same id again is
    served from memory); ``close()`` releases the last lease. ``make_agent`` turns a loaded snapshot into a
    playable agent (e.g. builds a network and calls ``load_state_dict``).

    An id can be evicted between the moment the curriculum samples it and the moment a worker asks for it
    (tasks are prefetched). By default that raises ``KeyError``; with ``fallback_to_latest=True`` the loader
    logs a warning and plays the newest snapshot instead (``current_id`` says which one it loaded). The
    result the env reports for the evicted id is then dropped by the curriculum, so no win rate is skewed.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        load_fn: Callable[[BinaryIO], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        fallback_to_latest: bool = False,
        lock_timeout: float = 10.0,
    ) -> None:
        save_fn = None if load_fn is None else _refuse_save
        self.store = OpponentStore(directory, max_count=None, save_fn=save_fn, load_fn=load_fn,
                                   lock_timeout=lock_timeout, create=False)
        self.make_agent = make_agent
        self.fallback_to_latest = bool(fallback_to_latest)
        self.current_id: int | None = None
        self._agent: Any = None

    def __enter__(self) -> OpponentLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get(self, opponent_id: int) -> Any:
        """The agent for ``opponent_id``, leased while it is the current one."""
        i = check_opponent_id(opponent_id)
        if i == self.current_id:
            return self._agent
        try:
            entry = self.store.acquire(i)
        except KeyError:
            latest = self.store.latest_id()
            if not (self.fallback_to_latest and self.store.was_issued(i) and latest is not None):
                raise
            logger.warning("opponent %d was evicted before this worker loaded it; playing the newest, %d",
                           i, latest)
            return self.get(latest)
        try:
            snap = self.store.load_leased(entry)
            agent = self.make_agent(snap) if self.make_agent is not None else snap
        except BaseException:
            self.store.release(i)
            raise
        self.close()
        self.current_id, self._agent = i, agent
        return agent

    def close(self) -> None:
        """Release the lease on the current opponent (if any)."""
        if self.current_id is not None:
            try:
                self.store.release(self.current_id)
            except ValueError:  # the lease file was removed by hand meanwhile
                logger.debug("lease on opponent %d was already gone", self.current_id)
            self.current_id, self._agent = None, None


def _refuse_save(obj: Any, f: BinaryIO) -> None:
    raise TypeError("an OpponentLoader only loads snapshots; add them through the learner's OpponentStore")
