"""The in-process transport: :meth:`SyncCore.apply <magister.sync.core.SyncCore.apply>` called directly.

Same messages, validation and accounting as over a socket, without encoding them: a send applies the
message objects under the core's lock and queues their replies for :meth:`InProcessTransport.receive`.
Envs of the learner's process feed one :class:`~magister.sync.core.SyncCore` per curriculum object
(:func:`local_core`), or the core of a curriculum served by :func:`magister.serve`
(:meth:`ServedCurriculum.local_core <magister.sync.core.ServedCurriculum.local_core>`).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, ClassVar

from ...curricula.base import Curriculum
from .. import protocol as P
from ..core import SyncCore, SyncRejected
from ..options import FeedOptions
from .base import SyncError, Transport

__all__ = ["InProcessTransport", "local_core"]


class InProcessTransport(Transport):
    """Feeds ``core`` (a server's, or one made for a bare curriculum) in this process. A send's replies are
    there when it returns, and messages are not encoded: the feed asks for tasks when it needs one, never
    ahead nor along with an update, and checks no value for travel."""

    # in-process sampling is cheap and always fresh: nothing sampled ahead, nothing held
    prefetch: ClassVar[int] = 0
    update_batch: ClassVar[int] = 1

    def __init__(self, core: SyncCore, options: FeedOptions | None = None) -> None:
        self.core = core
        self.peer = f"curriculum {type(core.curriculum).__name__} (in-process)"
        self.timeout = 0.0  # (every call answers at once)
        self.replies: list[P.Message] = []

    def open(self, hello: P.Hello) -> P.Welcome:
        try:
            return self.core.register_env(hello)
        except SyncRejected as exc:
            raise SyncError(f"the curriculum refused this env ({exc.code}): {exc}") from None

    def send(self, items: list[P.Message]) -> None:
        """Apply the messages in order (a refused one raises: :class:`SyncError` when the curriculum could
        not sample, else the server's ``SyncRejected``)."""
        for msg in items:
            try:
                reply = self.core.apply(msg)
            except SyncRejected as exc:
                if exc.code == "sample_failed":
                    raise SyncError(str(exc)) from exc.__cause__
                raise
            if reply is not None:
                self.replies.append(reply)

    def receive(self, timeout: float) -> list[P.Message]:
        out, self.replies = self.replies, []
        return out

    def close(self, wait: bool = True, linger: float | None = None) -> None:
        self.replies.clear()

    def check_travel(self, value: Any) -> None:
        pass

    def polls(self, awaiting: bool, holding: bool) -> bool:
        return False

    def ask_when_empty(self, awaiting: bool, size: int) -> int | None:
        return 0 if awaiting else size

    def refill(self, ready: int, depth: int, holding: bool) -> int:
        return 0

    def top_up(self, ready: int, depth: int, holding: bool, due: bool) -> int | None:
        return None

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
