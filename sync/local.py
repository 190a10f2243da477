"""The in-process endpoint: envs in the learner's process feed the curriculum's core directly.

One :class:`~magister.sync.core.SyncCore` per curriculum object, made on first use and shared by every
in-process feed of that curriculum (so they share its lock and accounting) while one of them lives; a
curriculum served by :func:`magister.serve` uses its server's core instead
(:meth:`ServedCurriculum.local_core`).
"""

from __future__ import annotations

import os
import threading
import weakref

from ..curricula.base import Curriculum
from .core import SyncCore

__all__ = ["local_core"]

# by the curriculum's id, held by the feeds (a core keeps its curriculum alive, so a registry holding cores
# would keep every curriculum ever fed in-process)
_cores: weakref.WeakValueDictionary[int, SyncCore] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def local_core(curriculum: Curriculum) -> SyncCore:
    """The core of ``curriculum`` for feeds in this process.

    Raises:
        RuntimeError: the curriculum was made in another process (a forked or spawned worker's copy):
            feedback given to it would never reach the learner's curriculum.
    """
    if curriculum.home_pid != os.getpid():
        raise RuntimeError(
            f"a {type(curriculum).__name__} created in process {curriculum.home_pid} was given to a sync "
            f"wrapper in process {os.getpid()} (a forked or spawned worker): its updates would go to this "
            "process's copy, never to the learner's curriculum. Serve it with magister.serve(curriculum) and "
            "pass server.address (or the server) to the wrappers"
        )
    with _lock:
        core = _cores.get(id(curriculum))
        if core is None or core.curriculum is not curriculum:  # (an id is reused once its object is gone)
            core = _cores[id(curriculum)] = SyncCore(curriculum)
        return core
