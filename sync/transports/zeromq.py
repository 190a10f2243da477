"""The ZeroMQ transport: a DEALER socket to a :class:`~magister.sync.zmq_server.CurriculumServer`.

The socket is made in the process that uses it, from a per-process context, and shared by every env of the
process that talks to the same server: each env is a channel of its own on it (its own registration,
numbering and resends; one heartbeat for all). A send never waits for a reply, and waits for room in the
send queue at most ``timeout`` seconds (back-pressure, not dropping).

**Reconnects lose nothing and repeat nothing.** The socket has a stable routing id, so after ZeroMQ
reconnects it (a network cut) the server knows each channel as the same env. Every message after the hello is
numbered in an envelope frame and kept until acknowledged, on both sides. When a wait for a reply passes
:data:`RETRY_INTERVAL`, the transport sends a ``PING``: the server sends again the replies the env missed
and answers with the number of the last message it applied, after which the env sends again what the
server never got; each side drops what it already has. A server that no longer knows the env answers
``unknown_env``, and the feed registers again (:meth:`ZmqTransport.rejoin`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any, ClassVar, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from .. import protocol as P
from ..options import FeedOptions
from ..security import configure_client_socket
from .base import ServerUnavailableError, SyncError, Transport

logger = logging.getLogger(__name__)

__all__ = ["ZmqTransport"]

# (pid, context) of this process and of those it was forked from, and their connections by (pid, address,
# keys, timeout): what a fork inherits is never used, closed nor GC'd
_contexts: list[tuple[int, zmq.Context]] = []
_connections: dict[tuple, _Connection] = {}
_contexts_lock = threading.RLock()


class _Connection:
    """One DEALER socket of this process to one endpoint, shared by its envs' transports, each on a channel
    of its own (numbered from 0, never reused). Every use of the socket holds :attr:`lock`; frames read
    for another channel wait in its inbox. ``last_send`` and ``last_heard`` are the socket's: one heartbeat
    for all its envs, and any frame heard is a sign that the server is there."""

    def __init__(self, key: tuple, options: FeedOptions) -> None:
        """(Made by :meth:`join`, under ``_contexts_lock``.)"""
        self.key, self.lock = key, threading.RLock()
        if not _contexts or _contexts[-1][0] != key[0]:  # this process's context (a new one after a fork)
            _contexts.append((key[0], zmq.Context()))
        self.socket = sock = _contexts[-1][1].socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, int(options.close_timeout * 1000))
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        # the replies to every env on the socket wait here until each env reads its own: no bound (they are
        # what the envs asked for), so the server never finds the queue full and drops one
        sock.setsockopt(zmq.RCVHWM, 0)
        ms = options.timeout * 1000  # a send waits for room at most the timeout (-1: an infinite one)
        sock.setsockopt(zmq.SNDTIMEO, int(ms) if ms < 2**31 else -1)
        # the session token: the server knows this socket by it across reconnects (a leading zero byte is
        # reserved by ZeroMQ)
        sock.setsockopt(zmq.ROUTING_ID, b"m" + os.urandom(15))
        keys = options.curve_client_keys or ()  # (the public key is named if it is refused)
        self.public_key = configure_client_socket(sock, options.curve_server_key, *keys)
        # a refused CURVE handshake is reported by the socket's monitor: until the first welcome, a hello
        # fails at once, saying why
        failures = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
        self.monitor: zmq.Socket | None = sock.get_monitor_socket(failures)
        sock.connect(key[1])
        self.inboxes: dict[int, deque[list[Any]]] = {}
        self.channels, self.last_send, self.last_heard = 0, 0.0, time.monotonic()

    @staticmethod
    def join(address: str, options: FeedOptions) -> tuple[_Connection, int]:
        """This process's connection to ``address`` (made now if there is none) and a new channel on it."""
        key = (os.getpid(), address, options.curve_server_key, options.curve_client_keys, options.timeout)
        with _contexts_lock:
            conn = _connections.get(key) or _connections.setdefault(key, _Connection(key, options))
            conn.channels += 1
            conn.inboxes[conn.channels - 1] = deque()
            return conn, conn.channels - 1

    def leave(self, channel: int, linger: float) -> None:
        """Close ``channel``; the last one closes the socket (queued messages may go out for ``linger``)."""
        with _contexts_lock, self.lock:
            self.inboxes.pop(channel, None)
            if not self.inboxes and _connections.get(self.key) is self:
                del _connections[self.key]
                self.end_monitor()
                self.socket.close(int(1000 * linger))

    def end_monitor(self) -> None:
        """Stop watching the handshake (a welcome came: it succeeded)."""
        with self.lock:
            if self.monitor is not None:
                self.socket.disable_monitor()
                self.monitor.close(0)
                self.monitor = None

    def write(self, channel: int, frames: list[Any], copy: bool = True, wait: bool = True) -> bool:
        """Send ``frames`` on ``channel``; whether it waited for room in the queue (``wait``: at most the
        timeout, the socket's SNDTIMEO; then, or at once without ``wait``, ``zmq.Again``)."""
        frames = [*P.channel_frame(channel), *frames]
        with self.lock:
            self.last_send = time.monotonic()
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK, copy=copy)
                return False
            except zmq.Again:  # the queue is full: wait for room
                if not wait:
                    raise
                self.socket.send_multipart(frames, copy=copy)
                return True

    def read(self, channel: int, timeout: float) -> list[Any] | None:
        """The next frames for ``channel`` (``None``: none within ``timeout``), from its inbox or the socket;
        a wait polls in slices of :data:`READ_SLICE`, so that other threads may use the socket meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if self.inboxes.get(channel):
                    return self.inboxes[channel].popleft()
                sock, left = self.socket, deadline - time.monotonic()
                if sock.get(zmq.EVENTS) & zmq.POLLIN or (
                        left > 0 and sock.poll(max(1, int(min(left, READ_SLICE) * 1000)), zmq.POLLIN)):
                    self.last_heard = time.monotonic()
                    to, frames = P.split_channel(sock.recv_multipart(copy=False))
                    if to == channel:
                        return list(frames)
                    if to in self.inboxes:  # (frames for a channel closed since are dropped)
                        self.inboxes[to].append(list(frames))
                    continue
            if time.monotonic() >= deadline:
                return None


#: Seconds a wait for a reply lasts before the transport asks the server for a resend (``PING``).
RETRY_INTERVAL = 0.25
#: Seconds between two sends of a hello that has no answer yet.
HELLO_RETRY = 1.0
#: Most seconds one wait for a reply holds a shared socket (other threads' sends go between two slices).
READ_SLICE = 0.02
#: Most sent messages kept for a resend until the server acknowledges them.
MAX_UNACKED = 4096


class ZmqTransport(Transport):
    """One env's channel on its process's DEALER socket to ``address`` (``tcp://`` or ``ipc://``), with CURVE
    when keys are given; every env of the process that talks to the same endpoint shares the socket.

    Attributes:
        pings: ``PING`` frames sent (resend requests while waiting, and heartbeats).
        resent: Messages sent again after the server said it had not received them.
        rejoins: Times the transport registered again with a server that no longer knew it.
    """

    hint: ClassVar[str] = ("; is the server running (and are CURVE keys right)? Pass fallback_task_space=... "
                           "to sample locally instead")

    def __init__(self, address: str, options: FeedOptions) -> None:
        self.address = address
        self.peer = f"curriculum server at {address}"
        self.options = options
        self.timeout = options.timeout
        self.failed_handshakes = self.channel = 0
        self.conn: _Connection | None = None
        self.stream = P.Stream(MAX_UNACKED, pings=True)
        self.next_away_log = self.pings = self.resent = self.rejoins = 0
        self.env_id: int | None = None  # (the welcome's, for messages)

    # when the connection's last frame went out (heartbeats fill its silences)
    last_send = property(lambda self: 0.0 if self.conn is None else self.conn.last_send)
    # the messages dropped unacknowledged from the resend queue (it was full) since the last registration
    lost = property(lambda self: self.stream.dropped)

    def no_reply(self, what: str) -> str:
        said = super().no_reply(what)
        if self.conn is None or not self.pings:
            return said
        return (f"{said} (tried: reconnecting every 0.1-1 s, {self.pings} resend requests"
                f"{f', {self.resent} messages sent again' if self.resent else ''}"
                f"{f', {self.rejoins} re-registrations' if self.rejoins else ''})")

    def open(self, hello: P.Hello) -> P.Welcome:
        self.conn, self.channel = _Connection.join(self.address, self.options)
        return self._register(hello)

    def rejoin(self, hello: P.Hello) -> P.Welcome:
        """Register again on the same socket; the unacknowledged messages are sent again, numbered from the
        start, as the new registration's (:func:`magister.sync.protocol.rebase`)."""
        self.rejoins += 1
        old = [P.decode(frames) for _, frames in self.stream.sent]
        self.stream = P.Stream(MAX_UNACKED, pings=True)
        welcome = self._register(P.rejoin_hello(hello, old))
        again = P.rebase(old, welcome.env_id)
        self.send(again)
        self.resent += len(again)
        return welcome

    def _register(self, hello: P.Hello) -> P.Welcome:
        """Send ``hello`` and wait for the welcome. A server at ``max_envs`` is asked again, backing off,
        for up to ``reconnect_timeout``; a refused CURVE handshake raises :class:`SyncError` at once."""
        start, backoff = time.monotonic(), 0.1
        while True:
            reply = self._answer_to(hello)
            if isinstance(reply, P.Welcome):
                self.heartbeat, self.env_id = reply.heartbeat, reply.env_id
                cast(_Connection, self.conn).end_monitor()  # (the handshake succeeded)
                return reply
            if reply.code == "version":
                raise P.ProtocolVersionError(reply.message)
            if reply.code != "too_many_envs" or time.monotonic() - start >= self.options.reconnect_timeout:
                logger.error("%s refused the hello (%s): %s", self.peer, reply.code, reply.message)
                raise SyncError(f"{self.peer} refused (waiting for a welcome): {reply.code}: {reply.message}")
            if backoff == 0.1:
                logger.warning("%s is full (%s); asking again, backing off", self.peer, reply.message)
            time.sleep(backoff)
            backoff = min(2 * backoff, 5.0)

    def _answer_to(self, hello: P.Hello) -> P.Welcome | P.Error:
        """Send ``hello``, again every :data:`HELLO_RETRY` seconds (a server that died before answering it
        never will; the next one, and a repeat, get the same welcome); the welcome or the error answering
        it, waiting at most the timeout."""
        frames, deadline, again = P.encode(hello), time.monotonic() + self.timeout, 0.0
        while (left := deadline - time.monotonic()) > 0:
            if time.monotonic() >= again:
                self._write(frames, "Hello")
                again = time.monotonic() + HELLO_RETRY
            if self._check_handshake():
                left = min(left, 0.05)
            for msg in self.receive(min(left, HELLO_RETRY), retry=False):  # (an unknown_env error is stale)
                if isinstance(msg, P.Welcome) or (isinstance(msg, P.Error) and msg.code != "unknown_env"):
                    return msg
        raise ServerUnavailableError(self.no_reply("a welcome"))

    def _check_handshake(self) -> bool:
        """Raise :class:`SyncError` saying why when the monitor reports a refused CURVE handshake. A peer that
        closes the connection during the handshake without saying why (a CURVE server refusing the key, or a
        proxy whose server is down) is taken for a wrong key only when this client uses CURVE. Returns
        whether the handshake is still watched (until the connection's first welcome)."""
        conn = cast(_Connection, self.conn)
        with conn.lock:  # (the monitor is a socket too)
            while conn.monitor is not None and conn.monitor.poll(0):
                event = recv_monitor_message(conn.monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    key = conn.public_key.decode()  # type: ignore[union-attr] (refused: it presented one)
                    raise SyncError(f"{self.peer} refused this client's CURVE key {key} (not on its "
                                    "curve_allowed_clients): pass a listed key pair as curve_client_keys")
                if self.options.curve_server_key is None:
                    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:  # (a CURVE server, a plain client)
                        raise SyncError(f"the handshake with {self.peer} fails: does it require CURVE keys "
                                        "(pass curve_server_key=<its public key>)?")
                    continue
                self.failed_handshakes += 1
                if self.failed_handshakes >= 3:
                    raise SyncError(f"the CURVE handshake with {self.peer} fails: is curve_server_key "
                                    f"{self.options.curve_server_key!r} the server's public key?")
            return conn.monitor is not None

    def send(self, items: list[P.Message]) -> None:
        """Each message numbered, in order (kept until the server acknowledges it)."""
        for msg in items:
            self._write(self.stream.number(P.encode(msg)), type(msg).__name__)

    def ping(self) -> None:
        """Ask the server for the replies this env missed and where to resend from (also a heartbeat)."""
        if self.conn is None:
            return
        try:
            self.conn.write(self.channel, [self.stream.control(P.PING)], wait=False)
        except zmq.Again:  # the queue is full: the messages in it will do
            return
        self.pings += 1

    def keep_waiting(self, since: float) -> bool:
        """Whether a wait begun at ``since`` goes on: the server has been silent (not merely slow) for the
        timeout and ``reconnect_timeout`` has not passed. Logged once a minute."""
        now, heard = time.monotonic(), self.conn.last_heard  # type: ignore[union-attr] (open)
        if now - heard < self.timeout or now - since >= self.options.reconnect_timeout:
            return False
        if now >= self.next_away_log:
            self.next_away_log = now + 60.0
            logger.warning("env %s: %s silent for %.0f s; still trying, up to reconnect_timeout=%g s (the "
                           "episodes played meanwhile are kept and sent when it answers)", self.env_id,
                           self.peer, now - heard, self.options.reconnect_timeout)
        return True

    def _write(self, frames: list[Any], what: str) -> None:
        try:  # zero-copy only pays off for large array frames
            self.waits += self.conn.write(self.channel, frames, len(frames) == 1)  # type: ignore[union-attr]
        except zmq.Again:
            raise ServerUnavailableError(self.no_reply(f"room in the send queue for a {what}")) from None

    def receive(self, timeout: float, retry: bool = True) -> list[P.Message]:
        """At most one message; with ``retry``, a ``PING`` each time the wait passes ``RETRY_INTERVAL``."""
        conn = cast(_Connection, self.conn)
        deadline = time.monotonic() + timeout
        while True:
            # a resend request every RETRY_INTERVAL; once every second while the server is silent
            every = RETRY_INTERVAL if time.monotonic() - conn.last_heard < self.timeout else 1.0
            left = deadline - time.monotonic()
            frames = conn.read(self.channel, max(0.0, min(left, every) if retry else left))
            if frames is not None:
                if (msgs := self._take(frames)) or timeout <= 0:  # (no wait: one frame at most)
                    return msgs
            elif time.monotonic() >= deadline:
                return []
            elif retry:
                self.ping()

    def _take(self, frames: list[Any]) -> list[P.Message]:
        """The message of a received frame list (``[]``: a repeat, an out-of-order reply or a ``PONG``)."""
        envelope = P.unpack_envelope(frames[0])
        if envelope is None:  # unsequenced: a welcome, or an error to a peer the server does not know
            return [P.decode(frames)]
        verdict, resend, control = self.stream.answer(*envelope)
        if verdict == "deliver":
            return [P.decode([frames[0].buffer[P.ENVELOPE_SIZE:], *frames[1:]])]
        for again in resend:  # after a PONG: what is still unacknowledged never arrived
            self._write(again, "message sent again")
        self.resent += len(resend)
        if control is not None:  # a reply was lost before this one: ask for both again
            self.ping()
        return []

    def close(self, wait: bool = True, linger: float | None = None) -> None:
        if self.conn is not None:
            linger = (self.options.close_timeout if linger is None else max(0.0, linger)) if wait else 0.0
            self.conn.leave(self.channel, linger)
            self.conn = None

    def abandon(self) -> None:
        self.conn = None  # (the parent's connection, kept in _connections under its pid)
