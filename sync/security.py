"""Transport security for the sync layer: address checks, which addresses need encryption, CURVE keys.

A server binds an *exposed* address (:func:`is_exposed`: reachable by others than this user's processes)
only with CURVE keys (ZeroMQ's encryption and server authentication) or an explicit ``insecure=True``. CURVE
alone admits any holder of the server's public key; ``curve_allowed_clients`` admits only listed client keys
(:class:`ClientAllowList`, asked at each handshake by the server's thread). The remote-workers guide
shows both set-ups.

>>> is_exposed("tcp://0.0.0.0:5555"), is_exposed("ipc://@magister"), is_exposed("tcp://127.0.0.1:5555")
(True, True, False)
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import zmq
import zmq.auth

from .ratelimit import RateLimitedLogger

logger = logging.getLogger(__name__)

__all__ = [
    "AllowedClients", "ClientAllowList", "CurveKeyPair", "check_address",
    "check_bind_address", "generate_keypair", "is_exposed", "load_keypair",
]

#: What ``curve_allowed_clients`` takes: public keys, or a directory of certificate files.
AllowedClients = Iterable[bytes | str] | str | os.PathLike

#: The address forms a server binds, for error messages.
BIND_FORMS = ("'ipc:///path/to/socket', 'ipc://@name' (Linux abstract socket), 'tcp://host:port' (port '*' "
              "to bind a free one)")
#: The address forms a worker connects to, for error messages.
ADDRESS_FORMS = BIND_FORMS + ", or 'ray://name' / 'ray://namespace/name' (a serve_ray() actor)"


class CurveKeyPair(NamedTuple):
    """A CURVE key pair, both halves Z85-encoded ``bytes`` of length 40."""

    public_key: bytes
    secret_key: bytes


def generate_keypair() -> CurveKeyPair:
    """A fresh CURVE key pair (requires libzmq built with CURVE support, as pyzmq's wheels are)."""
    if not zmq.has("curve"):
        raise RuntimeError("this libzmq has no CURVE support; install pyzmq from its official wheels")
    return CurveKeyPair(*zmq.curve_keypair())


def load_keypair(path: str | os.PathLike) -> CurveKeyPair:
    """The key pair in a ZeroMQ secret certificate file (``NAME.key_secret``, as written by
    :func:`zmq.auth.create_certificates`); ``ValueError`` if the file holds no secret key."""
    public, secret = zmq.auth.load_certificate(path)
    if secret is None:
        raise ValueError(f"{os.fspath(path)!r} holds only a public key; a client needs its secret "
                         "certificate (the NAME.key_secret file)")
    return CurveKeyPair(_as_key("public key", public), _as_key("secret key", secret))


def _as_key(what: str, key: bytes | str) -> bytes:
    if isinstance(key, str):
        key = key.encode("ascii")
    if not isinstance(key, bytes) or len(key) != 40:
        raise ValueError(f"CURVE {what} must be a 40-character Z85 string (see generate_keypair()), "
                         f"got {key!r:.60}")
    return key


def _host_and_port(address: str) -> tuple[str, str]:
    """The host (IPv6 without its brackets; of ``tcp://src;host:port``, the host) and the port of a
    ``tcp://`` address; the host is ``""`` when it or the port is missing."""
    host, _, port = address[len("tcp://") :].rpartition(":")
    host = host.split(";")[-1]
    if host.startswith("["):
        host = host[1:-1] if host.endswith("]") else ""
    return host, port


def check_address(address: object, bind: bool = False) -> str:
    """``address`` if it is a well-formed server address, else ``ValueError`` naming it and the accepted
    forms; ``bind``: a server's (a tcp port may be ``*``; no ``ray://``).

    >>> check_address("tcp://127.0.0.1:5555")
    'tcp://127.0.0.1:5555'
    >>> check_address("tcp://localhost")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: malformed address 'tcp://localhost': a tcp address needs a host and a port; expected ...
    """

    def bad(why: str) -> ValueError:
        forms = BIND_FORMS if bind else ADDRESS_FORMS
        return ValueError(f"malformed address {address!r}: {why}; expected {forms}")

    if not isinstance(address, str):
        raise TypeError(f"address must be a str, got {type(address).__name__} {address!r:.100}")
    if any(c.isspace() for c in address):
        raise bad("it contains whitespace")
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in (("ipc", "tcp") if bind else ("ipc", "tcp", "ray")):
        raise bad(f"unknown scheme {scheme + sep!r}" if sep else "no scheme")
    if not rest:
        raise bad("nothing after the scheme")
    if scheme == "tcp":
        host, port = _host_and_port(address)
        if not host:
            raise bad("a tcp address needs a host and a port")
        if not (port.isdigit() and 0 < int(port) < 65536) and not (bind and port in ("*", "0")):
            raise bad(f"port {port!r} is not a port number in 1..65535" + (" or '*'" if bind else ""))
    return address


def is_exposed(address: str) -> bool:
    """Whether peers other than this user's processes can connect to ``address`` without a key: tcp on a
    host that is not loopback (``*`` and ``0.0.0.0`` included), and Linux abstract ipc sockets
    (``ipc://@NAME``: no file, so no file permission guards them)."""
    if address.startswith("ipc://@"):
        return True
    if address.startswith(("ipc://", "inproc://")):
        return False
    host, _ = _host_and_port(check_address(address, bind=True))
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # '*', interface names and host names: treat as reachable from outside


def check_bind_address(
    address: str, curve_secret_key: bytes | str | None, insecure: bool,
    curve_allowed_clients: AllowedClients | None = None,
) -> None:
    """``ValueError`` for a malformed address (:func:`check_address`), for an exposed one (:func:`is_exposed`)
    without CURVE keys unless ``insecure``, and for ``curve_allowed_clients`` without keys; a warning when an
    exposed address is served unencrypted or to any holder of the server's public key."""
    check_address(address, bind=True)
    if curve_secret_key is not None:
        _as_key("secret key", curve_secret_key)
    elif curve_allowed_clients is not None:
        raise ValueError("curve_allowed_clients needs curve_secret_key: only a CURVE server sees client keys")
    if not is_exposed(address):
        if address.startswith("tcp://") and curve_secret_key is None:
            logger.info("serving %s without keys: every local user's processes can connect (an ipc:// socket "
                        "file, serve()'s default, admits only this user's; or pass CURVE keys)", address)
        return
    where = ("any local user can connect to an abstract socket (it has no file, so no permissions)"
             if address.startswith("ipc://@") else "it is reachable from other machines")
    if curve_secret_key is None and insecure is not True:
        raise ValueError(
            f"refusing to bind {address!r} without encryption: {where}. Pass "
            "curve_secret_key=generate_keypair().secret_key (and give clients the public key as "
            "curve_server_key), bind a loopback address or an ipc:// socket file (serve()'s default), or "
            "pass insecure=True explicitly"
        )
    if curve_secret_key is None:
        logger.warning("binding %s WITHOUT encryption (insecure=True): anyone who reaches it can join (%s)",
                       address, where)
    elif curve_allowed_clients is None:
        logger.warning("serving %s with CURVE but no curve_allowed_clients: any holder of the server's "
                       "public key can join and feed the curriculum (%s). Pass curve_allowed_clients=[client "
                       "public keys] or a directory of certificates to admit only those clients",
                       address, where)


class ClientAllowList:
    """The CURVE public keys of the clients a server admits: a fixed list, or the ``*.key`` certificate
    files in a directory, read at each handshake (a client added there is admitted without a restart).

    >>> a, b = generate_keypair(), generate_keypair()
    >>> allowed = ClientAllowList([a.public_key])
    >>> allowed.allows(a.public_key), allowed.allows(b.public_key)
    (True, False)
    """

    def __init__(self, clients: AllowedClients) -> None:
        self.directory: Path | None = None
        self._log = RateLimitedLogger(logger)  # asked at every handshake: a bad directory must not flood
        one_str = isinstance(clients, str) and len(clients) == 40 and not os.path.exists(clients)
        if isinstance(clients, bytes) or one_str:
            raise ValueError(f"curve_allowed_clients got one key (one {len(clients)}-character "
                             f"{type(clients).__name__}): pass public keys as a list ([key]) or a directory "
                             "of certificate files")
        if isinstance(clients, (str, os.PathLike)):
            if not Path(clients).is_dir():
                raise ValueError(f"curve_allowed_clients={os.fspath(clients)!r} is not a directory; expected "
                                 "a directory of ZeroMQ certificate files (*.key) or a list of public keys")
            self.directory = Path(clients)
            self._keys = self._read()
        elif isinstance(clients, Iterable):
            self._keys = frozenset(_as_key("client public key", k) for k in clients)
        else:
            raise TypeError("curve_allowed_clients must be a list of CURVE public keys or a directory of "
                            f"certificate files, got {type(clients).__name__}")

    def _read(self) -> frozenset[bytes]:
        keys = set()
        for path in self.directory.iterdir():  # type: ignore[union-attr]
            if path.suffix == ".key":
                try:
                    keys.add(_as_key("public key", zmq.auth.load_certificate(path)[0]))
                except (OSError, ValueError) as exc:
                    self._log.warning(f"skip:{path}", "curve_allowed_clients: skipping %s: %s", path, exc)
        return frozenset(keys)

    def allows(self, public_key: bytes | str) -> bool:
        """Whether the client with this Z85 public key may join."""
        key = _as_key("public key", public_key)
        if self.directory is not None:
            try:
                self._keys = self._read()
            except OSError as exc:  # the directory went away: keep the last keys read
                self._log.warning("unreadable", "curve_allowed_clients: cannot read the directory: %s", exc)
        return key in self._keys


def configure_server_socket(socket: zmq.Socket, curve_secret_key: bytes | str | None) -> None:
    """Make ``socket`` a CURVE server when a secret key is given (its handshakes ask the ZAP handler of the
    socket's context, where one is bound, about each client)."""
    if curve_secret_key is None:
        return
    secret = _as_key("secret key", curve_secret_key)
    socket.curve_secretkey = secret
    socket.curve_publickey = zmq.curve_public(secret)
    socket.curve_server = True


def configure_client_socket(
    socket: zmq.Socket,
    curve_server_key: bytes | str | None,
    curve_public_key: bytes | str | None = None,
    curve_secret_key: bytes | str | None = None,
) -> bytes | None:
    """Make ``socket`` a CURVE client of the server with public key ``curve_server_key`` (nothing without
    one), presenting the client key pair given, or else a throwaway one; returns the public key presented."""
    if curve_server_key is None:
        return None
    if curve_secret_key is None:
        curve_public_key, curve_secret_key = generate_keypair()
    socket.curve_serverkey = _as_key("server public key", curve_server_key)
    socket.curve_secretkey = _as_key("secret key", curve_secret_key)
    socket.curve_publickey = public = _as_key("public key", curve_public_key)  # type: ignore[arg-type]
    return public
