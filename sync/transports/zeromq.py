"""The ZeroMQ transport: a DEALER socket to a :class:`~magister.sync.server.CurriculumServer`.

The socket is made by :meth:`ZmqTransport.open`, in the process that uses it, from a per-process context
(never one inherited through ``fork``). Several items go out as one
:class:`~magister.sync.protocol.Batch`; a send never waits for a reply, and waits for room in the send
queue at most ``timeout`` seconds (back-pressure instead of silently dropping).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, ClassVar

import zmq

from .. import protocol as P
from ..security import configure_client_socket
from .base import ServerUnavailableError, SyncError, Transport

logger = logging.getLogger(__name__)

__all__ = ["ZmqTransport"]

_ctx_lock = threading.Lock()
_ctx: zmq.Context | None = None
_ctx_pid: int | None = None
_orphans: list[Any] = []  # sockets/contexts inherited through fork: never used, never closed, never GC'd


def _context() -> zmq.Context:
    """This process's ZeroMQ context (a new one after a fork)."""
    global _ctx, _ctx_pid
    with _ctx_lock:
        if _ctx is None or _ctx_pid != os.getpid():
            if _ctx is not None:
                _orphans.append(_ctx)
            _ctx = zmq.Context()
            _ctx_pid = os.getpid()
        return _ctx


class ZmqTransport(Transport):
    """A DEALER socket to ``address`` (``tcp://`` or ``ipc://``), with CURVE when keys are given."""

    defaults: ClassVar[dict[str, Any]] = {"prefetch": 8, "update_batch": 32}
    reads_ahead: ClassVar[bool] = True
    hint: ClassVar[str] = (
        "; is the server running (and are CURVE keys right)? Pass fallback_task_space=... to sample locally "
        "instead"
    )

    def __init__(
        self,
        address: str,
        timeout: float,
        close_timeout: float,
        curve: tuple[Any, Any, Any] = (None, None, None),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.close_timeout = close_timeout
        self.curve = curve
        self.socket: zmq.Socket | None = None
        self.waits = 0

    @property
    def peer(self) -> str:
        return f"curriculum server at {self.address}"

    def no_reply(self, what: str) -> str:
        return f"no reply from the {self.peer} within {self.timeout:g}s while waiting for {what}"

    def open(self, hello: P.Hello) -> P.Welcome:
        sock = _context().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, int(self.close_timeout * 1000))
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        configure_client_socket(sock, *self.curve)
        sock.connect(self.address)
        self.socket = sock
        self._write(P.encode(hello), "Hello")
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailableError(self.no_reply("a welcome"))
            for msg in self.receive(left):
                if isinstance(msg, P.Welcome):
                    self.env_id = msg.env_id
                    return msg
                if isinstance(msg, P.Error):
                    if msg.code == "version":
                        raise P.ProtocolVersionError(msg.message)
                    logger.error("%s refused the hello (%s): %s", self.peer, msg.code, msg.message)
                    raise SyncError(
                        f"{self.peer} refused (waiting for a welcome): {msg.code}: {msg.message}"
                    )

    def frames(self, items: list[Any]) -> list[Any]:
        """The frames of one send of ``items``: the message's own, or a batch of single-frame ones."""
        if len(items) == 1:
            item = items[0]
            if item.__class__ is bytes:
                return [item]
            if item.__class__ is tuple:
                return P.encode_fields(*item)
            return item
        return P.encode_batch(
            self.env_id, [h if h.__class__ is bytes else P.encode_fields(*h)[0] for h in items]
        )

    def send(self, items: list[Any]) -> None:
        self._write(self.frames(items), f"batch of {len(items)} messages" if len(items) > 1 else "message")

    def _write(self, frames: list[Any], what: str) -> None:
        sock = self.socket
        assert sock is not None
        copy = len(frames) == 1  # zero-copy only pays off for large array frames
        try:
            sock.send_multipart(frames, zmq.NOBLOCK, copy=copy)
            return
        except zmq.Again:
            pass
        self.waits += 1
        if sock.poll(int(self.timeout * 1000), zmq.POLLOUT):
            try:
                sock.send_multipart(frames, zmq.NOBLOCK, copy=copy)
                return
            except zmq.Again:  # pragma: no cover - room vanished between poll and send
                pass
        raise ServerUnavailableError(self.no_reply(f"room in the send queue for a {what}"))

    def receive(self, timeout: float) -> list[P.Message]:
        """At most one message (a :class:`~magister.sync.protocol.ProtocolVersionError` names both
        versions)."""
        sock = self.socket
        assert sock is not None
        if timeout <= 0:
            if not sock.get(zmq.EVENTS) & zmq.POLLIN:  # cheaper than a zero-timeout poll
                return []
        elif not sock.poll(max(1, int(timeout * 1000)), zmq.POLLIN):
            return []
        return [P.decode(sock.recv_multipart(copy=False))]

    def close(self, wait: bool = True) -> None:
        if self.socket is not None:
            self.socket.close(None if wait else 0)
            self.socket = None

    def abandon(self) -> None:
        if self.socket is not None:
            _orphans.append(self.socket)
            self.socket = None
