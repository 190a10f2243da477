"""Transport security for the sync layer: which addresses need encryption, and CURVE key helpers.

Rules (checked by :func:`check_bind_address` before the server binds):

* ``ipc://PATH`` (a socket file; :func:`~magister.sync.server.serve`'s default puts it in a private 0700
  directory) and ``inproc://`` need no keys.
* ``tcp://`` on a loopback host (``127.x.x.x``, ``localhost``, ``::1``) needs no keys.
* ``tcp://`` on any other host, including the wildcards ``*`` and ``0.0.0.0``, requires CURVE keys
  (ZeroMQ's elliptic-curve encryption and server authentication) unless the caller passes an explicit
  ``insecure=True``: anyone who can reach an unencrypted port could read the traffic and feed the
  curriculum.
* ``ipc://@NAME`` (a Linux *abstract* socket) is treated like an exposed TCP address: it has no file, so no
  file permission guards it, and any local user who knows (or lists, in ``/proc/net/unix``) the name can
  connect. It needs CURVE keys or ``insecure=True``.

**Which clients may join.** CURVE alone authenticates the *server*: any client that holds the server's
public key completes the handshake and feeds the curriculum. To admit only known clients, give each client
a key pair of its own and the server the list of their public keys, ``curve_allowed_clients=[...]``, or a
directory of ZeroMQ certificate files (``*.key``, as written by :func:`zmq.auth.create_certificates`; read
again when the directory changes). The server then runs a ZAP handler (ZeroMQ's authentication protocol,
RFC 27) that refuses every other key during the handshake: a refused client never reaches the curriculum,
and its feed raises :class:`~magister.sync.feed.ServerUnavailableError` when its timeout runs out. The
refusals are logged (rate-limited) and counted in ``server.metrics()["sync/clients_refused"]``. Without an
allow-list, an exposed address logs a warning that any holder of the public key can join.

Usage across machines::

    from magister.sync.security import generate_keypair
    keys = generate_keypair()                       # once; keep keys.secret_key private
    server = serve(curriculum, "tcp://0.0.0.0:5555", curve_secret_key=keys.secret_key)
    # on each worker machine, only the *public* key is needed:
    env = GymnasiumSyncWrapper(task_env, "tcp://learner-host:5555", curve_server_key=keys.public_key)

    # only known clients: each has a key pair, the server lists their public keys
    worker = generate_keypair()
    server = serve(curriculum, "tcp://0.0.0.0:5555", curve_secret_key=keys.secret_key,
                   curve_allowed_clients=[worker.public_key])
    env = GymnasiumSyncWrapper(task_env, "tcp://learner-host:5555", curve_server_key=keys.public_key,
                               curve_client_keys=worker)   # on the worker: its own key pair

A client without the server's public key cannot complete the handshake, so it never receives a task.
Keys are the Z85-encoded 40-byte strings produced by :func:`zmq.curve_keypair`.

>>> keys = generate_keypair()
>>> len(keys.public_key), len(keys.secret_key)
(40, 40)
>>> is_loopback("tcp://127.0.0.1:5555"), is_loopback("tcp://0.0.0.0:5555"), is_loopback("ipc:///tmp/x")
(True, False, True)
>>> is_exposed("tcp://0.0.0.0:5555"), is_exposed("ipc://@magister"), is_exposed("ipc:///tmp/x")
(True, True, False)
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import zmq
import zmq.auth
from zmq.utils import z85

from .ratelimit import RateLimitedLogger

logger = logging.getLogger(__name__)

__all__ = [
    "AllowedClients",
    "ClientAllowList",
    "CurveKeyPair",
    "ZapAuthenticator",
    "check_bind_address",
    "generate_keypair",
    "is_exposed",
    "is_loopback",
    "load_keypair",
    "public_key_of",
]

#: What ``curve_allowed_clients`` takes: public keys, or a directory of certificate files.
AllowedClients = Iterable[bytes | str] | str | os.PathLike

_LOCAL_SCHEMES = ("ipc://", "inproc://")


class CurveKeyPair(NamedTuple):
    """A CURVE key pair, both halves Z85-encoded ``bytes`` of length 40."""

    public_key: bytes
    secret_key: bytes


def generate_keypair() -> CurveKeyPair:
    """A fresh CURVE key pair (requires libzmq built with CURVE support, as pyzmq's wheels are)."""
    if not zmq.has("curve"):
        raise RuntimeError("this libzmq has no CURVE support; install pyzmq from its official wheels")
    public, secret = zmq.curve_keypair()
    return CurveKeyPair(public, secret)


def load_keypair(path: str | os.PathLike) -> CurveKeyPair:
    """The key pair in a ZeroMQ secret certificate file (``NAME.key_secret``, as written by
    :func:`zmq.auth.create_certificates`).

    Raises:
        ValueError: the file holds no secret key (a public ``NAME.key`` file, or not a certificate).
        OSError: the file cannot be read.
    """
    try:
        public, secret = zmq.auth.load_certificate(path)
    except ValueError as exc:
        raise ValueError(f"{os.fspath(path)!r} is not a ZeroMQ certificate file: {exc}") from None
    if secret is None:
        raise ValueError(
            f"{os.fspath(path)!r} holds only a public key; a client needs its secret certificate "
            "(the NAME.key_secret file)"
        )
    return CurveKeyPair(_as_key("public key", public), _as_key("secret key", secret))


def public_key_of(secret_key: bytes | str) -> bytes:
    """The public half of a Z85-encoded CURVE secret key."""
    return zmq.curve_public(_as_key("secret key", secret_key))


def _as_key(what: str, key: bytes | str) -> bytes:
    if isinstance(key, str):
        key = key.encode("ascii")
    if not isinstance(key, bytes) or len(key) != 40:
        raise ValueError(
            f"CURVE {what} must be a 40-character Z85 string (see generate_keypair()), got {key!r:.60}"
        )
    return key


def _host_of(address: str) -> str:
    rest = address[len("tcp://") :]
    if rest.startswith("["):  # [ipv6]:port
        end = rest.find("]")
        if end < 0:
            raise ValueError(f"malformed tcp address {address!r}: expected tcp://[ipv6]:port")
        return rest[1:end]
    host, sep, _port = rest.rpartition(":")
    if not sep:
        raise ValueError(f"malformed tcp address {address!r}: expected tcp://host:port")
    return host.split(";")[-1]  # "tcp://src;host:port" form: the host is the bind target


#: The address forms a server binds and a worker connects to, for error messages.
ADDRESS_FORMS = (
    "'ipc:///path/to/socket', 'ipc://@name' (Linux abstract socket), 'tcp://host:port' (port '*' to bind "
    "a free one), or 'ray://name' / 'ray://namespace/name' (a serve_ray() actor)"
)


def check_address(address: object, bind: bool = False) -> str:
    """``address`` if it is a well-formed server address, else ``ValueError`` naming it and the accepted
    forms (:data:`ADDRESS_FORMS`); ``bind``: the server side (a tcp port may be ``*``; no ``ray://``).

    >>> check_address("tcp://127.0.0.1:5555")
    'tcp://127.0.0.1:5555'
    >>> check_address("tcp://localhost")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: malformed address 'tcp://localhost': a tcp address needs a host and a port; expected ...
    """

    def bad(why: str) -> ValueError:
        forms = ADDRESS_FORMS.replace(", or 'ray://name' / 'ray://namespace/name' (a serve_ray() actor)", "")
        forms = forms if bind else ADDRESS_FORMS
        return ValueError(f"malformed address {address!r}: {why}; expected {forms}")

    if not isinstance(address, str):
        raise TypeError(f"address must be a str, got {type(address).__name__} {address!r:.100}")
    if address != address.strip() or any(c.isspace() for c in address):
        raise bad("it contains whitespace")
    scheme, sep, rest = address.partition("://")
    schemes = ("ipc", "tcp") if bind else ("ipc", "tcp", "ray")
    if not sep or scheme not in schemes:
        raise bad(f"unknown scheme {scheme + sep!r}" if sep else "no scheme")
    if not rest:
        raise bad("nothing after the scheme")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if rest.startswith("[") and not host.endswith("]"):
            host, colon, port = rest, "", ""
        if not colon or not host:
            raise bad("a tcp address needs a host and a port")
        if not (port.isdigit() and 0 < int(port) < 65536) and not (bind and port in ("*", "0")):
            raise bad(f"port {port!r} is not a port number in 1..65535" + (" or '*'" if bind else ""))
    return address


def _is_abstract_ipc(address: str) -> bool:
    return address.startswith("ipc://@")


def is_exposed(address: str) -> bool:
    """Whether peers other than this user's processes can connect to ``address`` without a key: tcp on a
    host that is not loopback, and Linux abstract ipc sockets (``ipc://@NAME``, guarded by no file
    permission)."""
    return _is_abstract_ipc(address) or not is_loopback(address)


def is_loopback(address: str) -> bool:
    """Whether ``address`` stays on this machine (ipc/inproc, or tcp on a loopback host)."""
    if not isinstance(address, str):
        raise TypeError(f"address must be a str, got {type(address).__name__}")
    if address.startswith(_LOCAL_SCHEMES):
        return True
    if not address.startswith("tcp://"):
        raise ValueError(f"unsupported address {address!r}: expected ipc://PATH or tcp://HOST:PORT")
    host = _host_of(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '*', interface names and host names: treat as reachable from outside


def check_bind_address(
    address: str,
    curve_secret_key: bytes | str | None,
    insecure: bool,
    curve_allowed_clients: AllowedClients | None = None,
) -> None:
    """Refuse to bind an exposed address (:func:`is_exposed`) without CURVE keys, unless ``insecure`` is
    explicit; warn when an exposed address has keys but no client allow-list.

    Raises:
        ValueError: the address is unsupported; it is exposed and neither keys nor ``insecure=True`` were
            given; or ``curve_allowed_clients`` was given without ``curve_secret_key``.
    """
    if curve_secret_key is not None:
        _as_key("secret key", curve_secret_key)
    elif curve_allowed_clients is not None:
        raise ValueError(
            "curve_allowed_clients needs curve_secret_key: clients are authenticated by their CURVE keys, "
            "which only an encrypted (CURVE) server sees"
        )
    if not is_exposed(address):
        return
    where = (
        "any local user can connect to an abstract socket (it has no file, so no permissions)"
        if _is_abstract_ipc(address)
        else "it is reachable from other machines"
    )
    if curve_secret_key is not None:
        if curve_allowed_clients is None:
            logger.warning(
                "serving %s with CURVE but no curve_allowed_clients: any holder of the server's public "
                "key can join and feed the curriculum (%s). Pass curve_allowed_clients=[client public "
                "keys] or a directory of certificates to admit only those clients",
                address, where,
            )
        return
    if insecure is True:
        logger.warning(
            "binding %s WITHOUT encryption (insecure=True): anyone who reaches it can join (%s)",
            address, where,
        )
        return
    hint = (
        "use serve()'s default address (an ipc socket file in a private directory) or an ipc:// path"
        if _is_abstract_ipc(address)
        else "bind a loopback/ipc address"
    )
    raise ValueError(
        f"refusing to bind {address!r} without encryption: {where}. "
        "Pass curve_secret_key=generate_keypair().secret_key (and give clients the public key as "
        f"curve_server_key), {hint}, or pass insecure=True explicitly"
    )


class ClientAllowList:
    """The CURVE public keys of the clients a server admits: a fixed list, or the ``*.key`` certificate
    files in a directory (read again whenever the directory's modification time changes, so a client added
    there is admitted without restarting the server).

    >>> a, b = generate_keypair(), generate_keypair()
    >>> allowed = ClientAllowList([a.public_key])
    >>> allowed.allows(a.public_key), allowed.allows(b.public_key)
    (True, False)

    Raises:
        ValueError: a key is not a 40-character Z85 string, a single key was given instead of a list, or
            the directory does not exist.
        TypeError: ``clients`` is neither keys nor a directory.
    """

    def __init__(self, clients: AllowedClients) -> None:
        self.directory: Path | None = None
        self._keys: frozenset[bytes] = frozenset()
        self._stamp: int | None = None
        self._lock = threading.Lock()
        self._log = RateLimitedLogger(logger)  # (asked at every handshake: a bad directory must not flood)
        if isinstance(clients, (str, os.PathLike)):
            if isinstance(clients, str) and len(clients) == 40 and not os.path.exists(clients):
                raise ValueError(
                    "curve_allowed_clients got one 40-character str: pass public keys as a list "
                    "([key]) or a directory of certificate files"
                )
            directory = Path(clients)
            if not directory.is_dir():
                raise ValueError(
                    f"curve_allowed_clients={os.fspath(clients)!r} is not a directory; expected a directory "
                    "of ZeroMQ certificate files (*.key) or a list of public keys"
                )
            self.directory = directory
            self._reload()
        elif isinstance(clients, bytes):
            raise ValueError("curve_allowed_clients got one key (bytes): pass a list of public keys")
        elif isinstance(clients, Iterable):
            self._keys = frozenset(_as_key("client public key", k) for k in clients)
        else:
            raise TypeError(
                "curve_allowed_clients must be a list of CURVE public keys or a directory of certificate "
                f"files, got {type(clients).__name__}"
            )

    def _reload(self) -> None:
        assert self.directory is not None
        stamp = self.directory.stat().st_mtime_ns
        if stamp == self._stamp:
            return
        keys = set()
        for path in sorted(self.directory.glob("*.key")):
            try:
                public, _ = zmq.auth.load_certificate(path)
                keys.add(_as_key("public key", public))
            except (OSError, ValueError) as exc:
                logger.warning("curve_allowed_clients: skipping %s: %s", path, exc)
        self._keys = frozenset(keys)
        self._stamp = stamp
        logger.debug("curve_allowed_clients: %d keys in %s", len(keys), self.directory)

    def allows(self, public_key: bytes | str) -> bool:
        """Whether the client with this Z85 public key may join."""
        key = _as_key("public key", public_key)
        if self.directory is not None:
            with self._lock:
                try:
                    self._reload()
                except OSError as exc:  # the directory went away: keep the last keys read
                    self._log.warning(
                        "unreadable", "curve_allowed_clients: cannot read %s: %s", self.directory, exc
                    )
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


#: The ZAP domain the server's socket announces (RFC 27); the handler answers only it.
ZAP_DOMAIN = b"magister"
_ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by RFC 27


class ZapAuthenticator:
    """A ZAP handler (ZeroMQ Authentication Protocol, RFC 27) for one server's context, run by a thread.

    libzmq asks it, during each CURVE handshake on a socket of ``context`` whose ``zap_domain`` is
    :data:`ZAP_DOMAIN`, whether the client's public key may join; keys in ``allowed`` are admitted, all
    others refused (the handshake fails; the server never sees a message from that client). Refusals are
    counted in :attr:`refused` and logged through ``log`` (rate-limited: a refused client retries its
    connection every few hundred milliseconds).

    Start it before the server socket binds and :meth:`stop` it before the context is terminated.
    """

    def __init__(
        self,
        context: zmq.Context,
        allowed: ClientAllowList,
        *,
        log: RateLimitedLogger | None = None,
        poll_interval: float = 1.0,
        join_timeout: float = 5.0,
    ) -> None:
        self.allowed = allowed
        self.refused = 0
        self.admitted = 0
        self._log = log if log is not None else RateLimitedLogger(logger)
        self._poll_ms = max(1, int(poll_interval * 1000))
        self._join_timeout = float(join_timeout)
        self._stop = threading.Event()
        self._zap = context.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        wake = f"inproc://magister-zap-wake-{id(self)}"
        self._wake_rx = context.socket(zmq.PAIR)
        self._wake_tx = context.socket(zmq.PAIR)
        try:
            self._zap.bind(_ZAP_ENDPOINT)
            self._wake_rx.bind(wake)
            self._wake_tx.setsockopt(zmq.LINGER, 0)
            self._wake_tx.connect(wake)
        except zmq.ZMQError:
            for s in (self._zap, self._wake_rx, self._wake_tx):
                s.close(0)
            raise
        self._thread = threading.Thread(target=self._run, name="magister-zap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not dict(poller.poll(self._poll_ms)).get(self._zap):
                    continue
                request = self._zap.recv_multipart()
                try:
                    reply = self._answer(request)
                except Exception:  # the handler must answer and keep running whatever arrives
                    self.refused += 1  # (fails closed: the client is refused)
                    self._log.exception("zap", "ZAP handler: unexpected error")
                    reply = [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"internal error",
                             b"", b""]
                self._zap.send_multipart(reply)
        except zmq.ContextTerminated:  # pragma: no cover - only if the context is destroyed under us
            pass
        finally:
            self._zap.close(0)
            self._wake_rx.close(0)

    def _answer(self, request: list[bytes]) -> list[bytes]:
        # request: version, request id, domain, address, routing id, mechanism, credentials...
        if len(request) < 6 or request[0] != b"1.0":
            return [b"1.0", request[1] if len(request) > 1 else b"", b"400", b"bad ZAP request", b"", b""]
        _version, request_id, domain, address, _identity, mechanism, *credentials = request
        if mechanism == b"CURVE" and len(credentials) == 1 and len(credentials[0]) == 32:
            key = z85.encode(credentials[0])
            if domain == ZAP_DOMAIN and self.allowed.allows(key):
                self.admitted += 1
                return [b"1.0", request_id, b"200", b"OK", key, b""]
            self.refused += 1
            self._log.warning(
                "refused_client",
                "curriculum server: refused a client from %s: its CURVE public key %s is not in "
                "curve_allowed_clients",
                address.decode("utf-8", "replace") or "?", key.decode("ascii"),
            )
            return [b"1.0", request_id, b"400", b"client key not allowed", b"", b""]
        self.refused += 1
        self._log.warning(
            "refused_client", "curriculum server: refused a %s client from %s (CURVE keys required)",
            mechanism.decode("ascii", "replace"), address.decode("utf-8", "replace") or "?",
        )
        return [b"1.0", request_id, b"400", b"CURVE required", b"", b""]

    def stop(self) -> None:
        """Stop the thread (joined with a timeout) and close its sockets. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._wake_tx.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:  # pragma: no cover - the thread then wakes at its poll interval
            pass
        self._wake_tx.close(0)
        self._thread.join(self._join_timeout)
        if self._thread.is_alive():  # pragma: no cover - only if an allow-list read blocks
            logger.error("ZAP handler thread did not stop within %.1fs", self._join_timeout)


def configure_server_socket(
    socket: zmq.Socket, curve_secret_key: bytes | str | None, authenticate_clients: bool = False
) -> None:
    """Make ``socket`` a CURVE server when a secret key is given; with ``authenticate_clients``, its
    handshakes ask the ZAP handler (:class:`ZapAuthenticator`) of the socket's context about each client."""
    if curve_secret_key is None:
        return
    secret = _as_key("secret key", curve_secret_key)
    socket.curve_secretkey = secret
    socket.curve_publickey = zmq.curve_public(secret)
    socket.curve_server = True
    if authenticate_clients:
        socket.zap_domain = ZAP_DOMAIN


def configure_client_socket(
    socket: zmq.Socket,
    curve_server_key: bytes | str | None,
    curve_public_key: bytes | str | None = None,
    curve_secret_key: bytes | str | None = None,
) -> None:
    """Make ``socket`` a CURVE client of the server with public key ``curve_server_key``.

    Without a client key pair an ephemeral one is generated (the server authenticates itself to the
    client; clients are not individually authenticated).
    """
    if curve_server_key is None:
        if curve_public_key is not None or curve_secret_key is not None:
            raise ValueError("client CURVE keys need curve_server_key (the server's public key) as well")
        return
    server = _as_key("server public key", curve_server_key)
    if curve_secret_key is None:
        public, secret = generate_keypair()
    else:
        secret = _as_key("secret key", curve_secret_key)
        public = (
            _as_key("public key", curve_public_key)
            if curve_public_key is not None
            else zmq.curve_public(secret)
        )
    socket.curve_serverkey = server
    socket.curve_publickey = public
    socket.curve_secretkey = secret
