"""The curriculum side of the sync layer over ZeroMQ: a ROUTER socket served by a background thread.

:func:`serve` binds the socket (by default an ``ipc://`` socket file in a private 0700 temporary directory;
``tcp://host:port`` for workers on other machines, see :mod:`magister.sync.security`) and starts one thread
that answers each env's messages through the transport-agnostic :class:`~magister.sync.core.SyncCore`
(leases, accounting and refusals are the core's, as on the Ray and in-process paths). This module adds the
socket, the per-env sequencing that makes reconnects lose and repeat nothing, liveness (``env_timeout``) and
admission (``max_envs``, CURVE keys checked by the same thread). A malformed frame is counted and answered
with an error; the thread keeps serving. Every call into the curriculum holds ``server.lock``.

>>> from magister.curricula.domain_randomization import DomainRandomization
>>> from magister.task_spaces.discrete import Discrete
>>> with serve(DomainRandomization(Discrete(3), seed=0)) as server:
...     server.address.startswith("ipc://")
True
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from ..curricula.base import Curriculum
from . import protocol as P
from .core import LOG_INTERVAL, LearnerCalls, ServedCurriculum, SyncCore
from .options import ServerOptions
from .ratelimit import RateLimitedLogger
from .security import ClientAllowList, check_bind_address, configure_server_socket

logger = logging.getLogger(__name__)

__all__ = ["CurriculumServer", "serve"]


@dataclass(eq=False)
class _Link:
    """A client socket of envs: when it was last heard from, its connection (``None``: reported closed)."""

    heard: float
    fd: int | None


@dataclass(eq=False)
class _Peer:
    """What the server keeps of one env it serves: its contact in the core, found by (routing id, channel)."""

    welcome: P.Welcome
    link: _Link  # its socket's, shared with the other envs on it: any message from it is a sign of life
    stream: P.Stream = field(default_factory=lambda: P.Stream(MAX_UNACKED_REPLIES))
    sequenced: bool = False  # it sends envelopes (so replies carry them)


#: Most replies a server keeps per env for a resend (a client further behind is gone).
MAX_UNACKED_REPLIES = 1024
#: How many of the envs that said goodbye a server remembers (a message one sends again is a repeat).
KEEP_LEFT = 1 << 16


class CurriculumServer(LearnerCalls, ServedCurriculum):
    """A curriculum served over ZeroMQ. Create it with :func:`serve`.

    Attributes:
        address: The bound address (a plain ``str``, safe to send to worker processes).
        curriculum: The served curriculum. Touch it only while holding :attr:`lock`, or use the proxies.
        lock: The lock shared by the server thread and the learner-side proxy methods.
        core: The :class:`SyncCore` holding the accounting, and each env's peer (its contact).
        options: Its settings (:class:`~magister.sync.options.ServerOptions`).
        closed: Whether :meth:`close` has run.
        duplicates_dropped: Sequenced messages dropped as repeats (sent again after a reconnect or across a
            goodbye's ack: already applied).
        replies_resent: Replies sent again to envs that missed them (after a reconnect).
        replies_undelivered: Replies the server could not hand to ZeroMQ (the peer gone or its queue full).
        clients_refused: CURVE handshakes refused (the client's key is not in ``curve_allowed_clients``).
    """

    def __init__(
        self, curriculum: Curriculum, address: str | None = None, options: ServerOptions | None = None,
        **overrides: Any,
    ) -> None:
        self.core = SyncCore(curriculum, options, **overrides)
        self._pid = os.getpid()
        self.closed = False
        self.duplicates_dropped = self.replies_resent = self.replies_undelivered = self.clients_refused = 0
        self._log = RateLimitedLogger(logger, LOG_INTERVAL)  # one rate limit for all it logs about its peers
        self._left: OrderedDict[tuple[bytes, int], None] = OrderedDict()  # the last envs that said goodbye
        self._links: weakref.WeakValueDictionary[bytes, _Link] = weakref.WeakValueDictionary()  # (its peers')
        self._tmpdir: str | None = None
        if address is None:
            self._tmpdir = tempfile.mkdtemp(prefix="magister-")  # mode 0700
            address = f"ipc://{os.path.join(self._tmpdir, 'curriculum.sock')}"
        try:
            allowed = self.options.curve_allowed_clients
            check_bind_address(address, self.options.curve_secret_key, self.options.insecure, allowed)
            self._allowed = None if allowed is None else ClientAllowList(allowed)
            self.address: str = self._bind(address)
        except Exception:
            self._remove_tmpdir()
            raise
        self._thread = threading.Thread(target=self._run, name=f"magister-server-{self.address}", daemon=True)
        self._thread.start()
        _live_servers.add(self)
        logger.info("curriculum server for %s listening on %s", type(curriculum).__name__, self.address)

    curriculum = property(lambda self: self.core.curriculum)
    lock = property(lambda self: self.core.lock)
    options = property(lambda self: self.core.options)

    def _bind(self, address: str) -> str:
        """Make the sockets (the ZAP handler's first, so no handshake goes unchecked; the ROUTER socket bound
        to ``address`` and its monitor; the pair that :meth:`close` wakes the thread through): its address."""
        self._ctx = zmq.Context()
        self._zap: zmq.Socket | None = None  # the ZAP handler's socket (RFC 27)
        try:
            if self._allowed is not None:
                self._zap = self._ctx.socket(zmq.REP)
                self._zap.bind("inproc://zeromq.zap.01")
            self._sock = sock = self._ctx.socket(zmq.ROUTER)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            # an env that reconnects (same routing id) takes over its identity at once, even while the
            # server still holds its old connection (a half-open TCP connection after a network cut)
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
            sock.setsockopt(zmq.MAXMSGSIZE, self.options.max_message_bytes)
            configure_server_socket(sock, self.options.curve_secret_key)
            sock.bind(address)
            self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        except Exception:
            self._ctx.destroy(linger=0)  # (the sockets made so far)
            raise
        wake = f"inproc://magister-wake-{id(self)}"
        self._wake_rx = self._ctx.socket(zmq.PAIR)  # the thread's end
        self._wake_rx.bind(wake)
        self._wake_tx = self._ctx.socket(zmq.PAIR)  # close()'s end
        self._wake_tx.connect(wake)
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        sock, heartbeat = self._sock, self.core.heartbeat
        # liveness is swept every quarter of env_timeout (the poll wakes up at least that often)
        poll_ms = max(1, int(min(self.options.poll_interval, heartbeat or math.inf) * 1000))
        next_sweep = time.monotonic() + heartbeat if heartbeat else math.inf
        poller = zmq.Poller()
        for s in (sock, self._wake_rx, self._monitor, self._zap):
            if s is not None:
                poller.register(s, zmq.POLLIN)
        with contextlib.suppress(zmq.ContextTerminated):  # (only if the context is destroyed under us)
            while not self.closed:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + heartbeat
                    for peer in self.core.contacts():  # an env is heard whenever its socket is
                        self.core.heard(peer.welcome.env_id, peer.link.heard)
                    self.core.sweep()
                ready = dict(poller.poll(poll_ms))
                if self._monitor in ready:
                    self._read_monitor()
                if self._zap in ready:
                    self._answer_zap()
                if sock not in ready:
                    continue
                try:  # one message per wake-up: poll returns at once while more are waiting
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    continue
                try:
                    self._handle(frames)
                except Exception:  # the thread must never die on one bad message
                    self._log.exception("handler", "curriculum server: unexpected error handling a message")

    def _answer_zap(self) -> None:
        """Answer one ZAP request (RFC 27): admit the CURVE client whose public key is allowed (fail closed:
        an error refuses it); a refusal is counted and logged before the server sees any message."""
        version, request_id, _domain, address, _identity, mechanism, *credentials = self._zap.recv_multipart()
        key = z85.encode(credentials[0]) if mechanism == b"CURVE" and credentials else b""
        try:
            ok = bool(key) and self._allowed.allows(key)  # type: ignore[union-attr]
        except Exception:
            self._log.exception("zap", "curriculum server: ZAP handler: unexpected error")
            ok = False
        if not ok:
            self.clients_refused += 1
            self._log.warning("refused_client", "curriculum server: refused a client from %s: its CURVE "
                              "public key %s is not in curve_allowed_clients",
                              address.decode("utf-8", "replace"), key.decode("ascii"))
        status = (b"200", b"OK", key) if ok else (b"400", b"not an allowed client", b"")
        self._zap.send_multipart([version, request_id, *status, b""])  # type: ignore[union-attr]

    def _read_monitor(self) -> None:
        """Note the peers whose connection ZeroMQ reports closed (their slots are freed when needed)."""
        closed = set()
        while self._monitor.poll(0):
            closed.add(recv_monitor_message(self._monitor)["value"])
        for link in list(self._links.values()) if closed else ():  # (one pass for every event read)
            if link.fd in closed:
                link.fd = None

    def _send(self, key: tuple[bytes, int], msg: P.Message, peer: _Peer | None = None) -> bool:
        """Send ``msg`` now (numbered, and kept until acknowledged, for a sequenced ``peer``)."""
        if peer is None or not peer.sequenced:
            return self._write(key, P.encode(msg), msg)
        return self._write(key, peer.stream.number(P.encode(msg)), msg, logging.DEBUG)  # (resent if lost)

    def _write(self, key: tuple[bytes, int], frames: list[Any], msg: P.Message | None = None,
               level: int = logging.WARNING) -> bool:
        """Send ``frames`` to ``key`` now; False when it cannot take them (logged at ``level``; an error for a
        peer gone, such as one whose frame crossed its goodbye, at DEBUG: nobody is left to read it)."""
        try:
            self._sock.send_multipart([key[0], *P.channel_frame(key[1]), *frames], zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # peer gone (ROUTER_MANDATORY) or its queue is full (zmq.Again)
            self.replies_undelivered += 1
            if type(msg) is P.Error and not isinstance(exc, zmq.Again):
                level = logging.DEBUG
            what = type(msg).__name__ if msg is not None else "a message"
            self._log.log(level, "undeliverable", "curriculum server: could not deliver %s to env %s: %s",
                          what, getattr(msg, "env_id", "?"), exc)
            return False

    def _sequence(self, key: tuple[bytes, int], peer: _Peer | None, envelope: tuple[int, int, int]) -> bool:
        """Account for a sequenced frame; whether the message it carries is to be applied now."""
        kind, seq, ack = envelope
        if peer is None:  # a restarted server, or an env gone (a ping after its goodbye): it must say hello
            if kind == P.DATA and key in self._left:  # (a message sent again, crossing its goodbye's ack)
                self.duplicates_dropped += 1
                return False
            self._send(key, self.core.refuse(self.core.unknown_env(why=" (restarted, or its env left)")))
            return False
        peer.sequenced = True
        verdict, resend, control = peer.stream.answer(kind, seq, ack)
        for frames in resend:  # what the env missed, then from where it must resend
            self._write(key, frames)
        self.replies_resent += len(resend)
        if control is not None:
            self._write(key, [peer.stream.control(control)])
        if verdict == "repeat":  # already applied (a resend after a reconnect)
            self.duplicates_dropped += 1
            self.core.counters(peer.welcome.env_id).duplicates_dropped += 1
        return verdict == "deliver"

    def _handle(self, frames: list[Any]) -> None:
        channel, body = P.split_channel(frames[1:])
        key, fd = (frames[0].bytes, channel), frames[-1].get(zmq.SRCFD)
        link = self._links.get(key[0])
        if link is not None:  # (any message from a socket is a sign of life of all its envs)
            link.heard, link.fd = time.monotonic(), fd
        peer = self.core.contact(key)
        env_id = None if peer is None else peer.welcome.env_id
        try:
            envelope = P.unpack_envelope(body[0]) if body else None
            if envelope is not None and not self._sequence(key, peer, envelope):
                return
            body = body if envelope is None else [body[0].buffer[P.ENVELOPE_SIZE:], *body[1:]]
            limit = min(self.options.max_message_bytes, P.DEFAULT_MAX_HEADER_BYTES)
            msg = P.decode(body, max_header_bytes=limit)
        except P.ProtocolError as exc:
            self._send(key, self.core.malformed(exc, env_id), peer)
            return
        if isinstance(msg, P.Hello):
            self._hello(key, peer, msg, fd)
        elif peer is None or msg.env_id != env_id:  # type: ignore[attr-defined]
            why = f" (it sent a {type(msg).__name__} as env {msg.env_id})"  # type: ignore[attr-defined]
            self._send(key, self.core.malformed(self.core.unknown_env(why=why), env_id), peer)
        else:
            for reply in self.core.answer(msg):  # (a goodbye's ack is numbered: the peer is known here)
                sent = self._send(key, reply, peer)
                if not sent and isinstance(reply, P.Tasks) and not peer.sequenced:
                    self.core.mark_unsent(reply)  # (a sequenced env gets it again when it reconnects)
                if type(reply) is P.Goodbye:  # (it left: what it sends again is a repeat)
                    self._left[key] = None
                    if len(self._left) > KEEP_LEFT:
                        self._left.popitem(last=False)

    def _hello(self, key: tuple[bytes, int], peer: _Peer | None, hello: P.Hello, fd: int) -> None:
        """Welcome an env (a repeated hello, a client's retry, gets the same answer)."""
        if peer is None:
            if self.core.live_envs >= self.options.max_envs:  # a full server makes room first
                self.core.sweep(lambda peers: [e for e, p, _ in peers if p.link.fd is None], "disconnected")
            (welcome,) = self.core.answer(hello)
            if not isinstance(welcome, P.Welcome):  # (refused)
                self._send(key, welcome)
                return
            peer = _Peer(welcome, self._links.setdefault(key[0], _Link(time.monotonic(), fd)))
            self.core.attach(welcome.env_id, peer, key)
            logger.debug("env %d joined (pid %d, %r)", welcome.env_id, hello.pid, hello.name)
            if hello.rejoin is not None:
                logger.info("env %d joined again (it was env %d)", welcome.env_id, hello.rejoin)
        self._write(key, P.encode(peer.welcome), peer.welcome)  # (never numbered, as the hello)

    def local_core(self) -> SyncCore | None:
        """The core, for feeds in the process that serves it (no sockets in-process)."""
        return self.core if os.getpid() == self._pid else None

    def endpoint_metrics(self) -> dict[str, float]:
        """The socket's counts, added to :meth:`metrics`."""
        out = {"sync/errors_sent": self.core.errors_sent, "sync/replies_resent": self.replies_resent,
               "sync/duplicates_dropped": self.duplicates_dropped,
               "sync/replies_undelivered": self.replies_undelivered}
        if self._allowed is not None:
            out["sync/clients_refused"] = self.clients_refused
        return {k: float(v) for k, v in out.items()}

    # -- lifecycle ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the thread (joined with a timeout), close the socket and remove the ipc directory.
        Idempotent; a no-op in a forked child."""
        if self.closed or os.getpid() != self._pid:
            return
        self.closed = True
        with contextlib.suppress(zmq.ZMQError):  # (else the thread wakes at its poll interval)
            self._wake_tx.send(b"", zmq.NOBLOCK)
        self._thread.join(self.options.join_timeout)
        if self._thread.is_alive():  # pragma: no cover - only if the curriculum blocks forever
            logger.error("curriculum server thread did not stop within %.1fs", self.options.join_timeout)
        else:  # (the thread is done with its sockets)
            self._ctx.destroy(linger=0)
        self._remove_tmpdir()
        _live_servers.discard(self)
        self._log.flush()  # what the rate limits held back is reported, counted
        self.core.log.flush()
        logger.info("curriculum server on %s closed", self.address)

    def _remove_tmpdir(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else "serving"
        return f"CurriculumServer({type(self.curriculum).__name__}, {self.address!r}, {state})"


_live_servers: weakref.WeakSet[CurriculumServer] = weakref.WeakSet()


@atexit.register
def _close_live_servers() -> None:  # pragma: no cover - interpreter shutdown
    for server in list(_live_servers):
        with contextlib.suppress(Exception):
            server.close()


def serve(
    curriculum: Curriculum, address: str | None = None, options: ServerOptions | None = None, **overrides: Any
) -> CurriculumServer:
    """Serve ``curriculum`` to environment workers; returns the running :class:`CurriculumServer`.

    Args:
        curriculum: Any :class:`~magister.curricula.base.Curriculum`.
        address: ``None`` for an ``ipc://`` socket in a private temporary directory (same machine), or
            ``"tcp://host:port"`` (``port`` ``*``: a free port, see :attr:`CurriculumServer.address`).
        options: The server's settings (:class:`~magister.sync.options.ServerOptions`: ``step_batch_size``,
            ``env_timeout``, ``max_envs``, the CURVE keys ...); its fields may also be given as keywords,
            e.g. ``serve(curriculum, env_timeout=None)``.
        **overrides: :class:`~magister.sync.options.ServerOptions` fields, over ``options``.

    Raises:
        TypeError: an unknown option (the message lists the known ones).
        ValueError: a bad option value, an unsupported address, an exposed address
            (:func:`~magister.sync.security.is_exposed`) without keys or ``insecure=True``, or a malformed
            ``curve_allowed_clients``.
        zmq.ZMQError: the address cannot be bound (e.g. the port is taken).
    """
    return CurriculumServer(curriculum, address, options, **overrides)
