"""The ZeroMQ transport: a DEALER socket to a :class:`~magister.sync.server.CurriculumServer`.

The socket is made in the process that uses it, from a per-process context. A send never waits for a
reply, and waits for room in the send queue at most ``timeout`` seconds (back-pressure, not dropping).

**Reconnects lose nothing and repeat nothing.** The socket has a stable routing id, so after ZeroMQ
reconnects it (a network cut) the server knows it as the same env. Every message after the hello is
numbered in an envelope frame and kept until acknowledged, on both sides. When a wait for a reply passes
``retry_interval``, the transport sends a ``PING``: the server sends again the replies the env missed and
answers with the number of the last message it applied, after which the env sends again what the server
never got; each side drops what it already has. A server that no longer knows the env answers
``unknown_env``, and the feed registers again (:meth:`ZmqTransport.rejoin`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, ClassVar

import zmq
from zmq.utils.monitor import recv_monitor_message

from .. import protocol as P
from ..options import FeedOptions
from ..security import configure_client_socket
from .base import Capabilities, ServerUnavailableError, SyncError, Transport

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


#: Seconds a wait for a reply lasts before the transport asks the server for a resend (``PING``).
DEFAULT_RETRY_INTERVAL = 0.25
#: Most sent messages kept for a resend until the server acknowledges them.
MAX_UNACKED = 4096


class ZmqTransport(Transport):
    """A DEALER socket to ``address`` (``tcp://`` or ``ipc://``), with CURVE when keys are given.

    Attributes:
        pings: ``PING`` frames sent (resend requests while waiting, and heartbeats).
        resent: Messages sent again after the server said it had not received them.
        duplicates: Replies received twice (dropped).
        rejoins: Times the transport registered again with a server that no longer knew it.
    """

    caps: ClassVar[Capabilities] = Capabilities(
        prefetch=8,
        update_batch=32,
        cheap_receive=True,
        rejoins=True,
        hint="; is the server running (and are CURVE keys right)? Pass fallback_task_space=... to sample "
        "locally instead",
    )

    def __init__(self, address: str, options: FeedOptions) -> None:
        self.address = address
        self.timeout, self.close_timeout = options.timeout, options.close_timeout
        self.curve = (options.curve_server_key, *(options.curve_client_keys or (None, None)))
        self.retry_interval = DEFAULT_RETRY_INTERVAL
        self.reconnect_timeout = options.reconnect_timeout
        self.failed_handshakes = 0
        self.socket: zmq.Socket | None = None
        self.waits = 0
        self.stream = P.Stream(MAX_UNACKED)
        self.pings = self.resent = self.duplicates = self.rejoins = 0
        self.last_send = 0.0  # (monotonic) when the last frame went out: heartbeats fill silences
        self.last_heard = time.monotonic()  # when the last frame came in: a silent server is away

    @property
    def peer(self) -> str:
        return f"curriculum server at {self.address}"

    def no_reply(self, what: str) -> str:
        tried = (
            f" (tried: reconnecting every 0.1-1 s, {self.pings} resend requests"
            f"{f', {self.resent} messages sent again' if self.resent else ''}"
            f"{f', {self.rejoins} re-registrations' if self.rejoins else ''})"
            if self.socket is not None and self.pings
            else ""
        )
        return f"no reply from the {self.peer} within {self.timeout:g}s while waiting for {what}{tried}"

    def open(self, hello: P.Hello) -> P.Welcome:
        sock = _context().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, int(self.close_timeout * 1000))
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        # the session token: the server knows this socket by it across reconnects (a leading zero byte is
        # reserved by ZeroMQ)
        sock.setsockopt(zmq.ROUTING_ID, b"m" + os.urandom(15))
        self.public_key = configure_client_socket(sock, *self.curve)  # (the key named if it is refused)
        # a refused CURVE handshake is reported by the socket's monitor: the hello fails at once, saying why
        failures = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
        monitor = sock.get_monitor_socket(failures)
        sock.connect(self.address)
        self.socket = sock
        try:
            return self._register(hello, monitor)
        finally:
            sock.disable_monitor()
            monitor.close(0)

    def rejoin(self, hello: P.Hello) -> P.Welcome:
        """Register again on the same socket; the unacknowledged messages are sent again, numbered from the
        start, as the new registration's (:func:`magister.sync.protocol.rebase`)."""
        self.rejoins += 1
        old = [P.decode(frames) for _, frames in self.stream.sent]
        self.stream = P.Stream(MAX_UNACKED)
        hello = P.rejoin_hello(hello, old)
        welcome = self._register(hello)
        for msg in old:
            msg = P.rebase(msg, welcome.env_id)
            if msg is not None:
                self.send([msg])
                self.resent += 1
        return welcome

    def _register(self, hello: P.Hello, monitor: zmq.Socket | None = None) -> P.Welcome:
        """Send ``hello`` and wait for the welcome. A server at ``max_envs`` is asked again, backing off,
        for up to ``reconnect_timeout``; a refused CURVE handshake raises :class:`SyncError` at once."""
        self._write(P.encode(hello), "Hello")
        start = time.monotonic()
        deadline = start + self.timeout
        backoff = 0.1
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailableError(self.no_reply("a welcome"))
            if monitor is not None:
                self._check_handshake(monitor)
                left = min(left, 0.05)
            for msg in self.receive(left, retry=False):
                if isinstance(msg, P.Welcome):
                    self.env_id = msg.env_id
                    return msg
                if not isinstance(msg, P.Error) or msg.code == "unknown_env":  # (stale: before this hello)
                    continue
                if msg.code == "version":
                    raise P.ProtocolVersionError(msg.message)
                if msg.code == "too_many_envs" and time.monotonic() - start < self.reconnect_timeout:
                    if backoff == 0.1:
                        logger.warning("%s is full (%s); asking again, backing off", self.peer, msg.message)
                    time.sleep(backoff)
                    backoff = min(2 * backoff, 5.0)
                    deadline = time.monotonic() + self.timeout
                    self._write(P.encode(hello), "Hello")
                    continue
                logger.error("%s refused the hello (%s): %s", self.peer, msg.code, msg.message)
                raise SyncError(f"{self.peer} refused (waiting for a welcome): {msg.code}: {msg.message}")

    def _check_handshake(self, monitor: zmq.Socket) -> None:
        """Raise :class:`SyncError` saying why when the monitor reports a refused CURVE handshake."""
        while monitor.poll(0):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                key = self.public_key.decode()  # type: ignore[union-attr] (refused: it presented one)
                raise SyncError(f"{self.peer} refused this client's CURVE key {key} (not on its "
                                "curve_allowed_clients): pass a listed key pair as curve_client_keys")
            self.failed_handshakes += 1
            if self.failed_handshakes >= 3 and self.curve[0] is None:
                raise SyncError(f"the handshake with {self.peer} fails: does it require CURVE keys (pass "
                                "curve_server_key=<its public key>)?")
            if self.failed_handshakes >= 3:
                raise SyncError(f"the CURVE handshake with {self.peer} fails: is curve_server_key "
                                f"{self.curve[0]!r} the server's public key?")

    def send(self, items: list[P.Message]) -> None:
        """Each message numbered, in order (kept until the server acknowledges it)."""
        for msg in items:
            self._write(self.stream.number(P.encode(msg)), type(msg).__name__)

    @property
    def lost(self) -> int:
        """Messages dropped unacknowledged from the resend queue (it was full) since the last registration."""
        return self.stream.dropped

    def ping(self) -> None:
        """Ask the server for the replies this env missed and where to resend from (also a heartbeat)."""
        sock = self.socket
        if sock is None:
            return
        try:
            sock.send(self.stream.control(P.PING), zmq.NOBLOCK)
            self.pings += 1
            self.last_send = time.monotonic()
        except zmq.Again:  # the queue is full: the messages in it will do
            pass

    def _write(self, frames: list[Any], what: str) -> None:
        sock = self.socket
        assert sock is not None
        copy = len(frames) == 1  # zero-copy only pays off for large array frames
        self.last_send = time.monotonic()
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

    def receive(self, timeout: float, retry: bool = True) -> list[P.Message]:
        """At most one message; with ``retry``, a ``PING`` each time the wait passes ``retry_interval``."""
        sock = self.socket
        assert sock is not None
        if timeout <= 0:
            if not sock.get(zmq.EVENTS) & zmq.POLLIN:  # cheaper than a zero-timeout poll
                return []
            return self._take(sock.recv_multipart(copy=False))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            # a resend request every retry_interval; once every second while the server is silent
            every = self.retry_interval if time.monotonic() - self.last_heard < self.timeout else 1.0
            slice_ = min(left, every) if retry else left
            if sock.poll(max(1, int(slice_ * 1000)), zmq.POLLIN):
                msgs = self._take(sock.recv_multipart(copy=False))
                if msgs:
                    return msgs
            elif retry and left > slice_:
                self.ping()

    def _take(self, frames: list[Any]) -> list[P.Message]:
        """The message of a received frame list (``[]``: a repeat, an out-of-order reply or a ``PONG``)."""
        self.last_heard = time.monotonic()
        envelope = P.unpack_envelope(frames[0])
        if envelope is None:  # unsequenced: a welcome, or an error to a peer the server does not know
            return [P.decode(frames)]
        verdict = self.stream.receive(*envelope)
        if verdict == "control":  # a PONG: what is still unacknowledged never arrived
            for frames in self.stream.unacknowledged():
                self._write(frames, "message sent again")
                self.resent += 1
        elif verdict == "repeat":
            self.duplicates += 1
        elif verdict == "gap":  # a reply was lost before this one: ask for both again
            self.ping()
        elif verdict == "deliver":
            return [P.decode([frames[0].buffer[P.ENVELOPE_SIZE:], *frames[1:]])]
        return []

    def close(self, wait: bool = True, linger: float | None = None) -> None:
        """Close the socket (``wait``: let queued messages go out for at most ``linger`` seconds)."""
        if self.socket is not None:
            if not wait:
                self.socket.close(0)
            else:
                ms = int(1000 * (self.close_timeout if linger is None else max(0.0, linger)))
                self.socket.close(ms)
            self.socket = None

    def abandon(self) -> None:
        if self.socket is not None:
            _orphans.append(self.socket)
            self.socket = None

