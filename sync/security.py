"""Transport security for the sync layer: which addresses need encryption, and CURVE key helpers.

Rules (checked by :func:`check_bind_address` before the server binds):

* ``ipc://`` (a socket file in a private 0700 directory) and ``inproc://`` need no keys.
* ``tcp://`` on a loopback host (``127.x.x.x``, ``localhost``, ``::1``) needs no keys.
* ``tcp://`` on any other host, including the wildcards ``*`` and ``0.0.0.0``, requires CURVE keys
  (ZeroMQ's elliptic-curve encryption and server authentication) unless the caller passes an explicit
  ``insecure=True``: anyone who can reach an unencrypted port could read the traffic and feed the
  curriculum.

Usage across machines::

    from magister.sync.security import generate_keypair
    keys = generate_keypair()                       # once; keep keys.secret_key private
    server = serve(curriculum, "tcp://0.0.0.0:5555", curve_secret_key=keys.secret_key)
    # on each worker machine, only the *public* key is needed:
    env = GymnasiumSyncWrapper(task_env, "tcp://learner-host:5555", curve_server_key=keys.public_key)

A client without the server's public key cannot complete the handshake, so it never receives a task.
Keys are the Z85-encoded 40-byte strings produced by :func:`zmq.curve_keypair`.

>>> keys = generate_keypair()
>>> len(keys.public_key), len(keys.secret_key)
(40, 40)
>>> is_loopback("tcp://127.0.0.1:5555"), is_loopback("tcp://0.0.0.0:5555"), is_loopback("ipc:///tmp/x")
(True, False, True)
"""

from __future__ import annotations

import ipaddress
import logging
from typing import NamedTuple

import zmq

logger = logging.getLogger(__name__)

__all__ = ["CurveKeyPair", "generate_keypair", "is_loopback", "check_bind_address", "public_key_of"]

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


def check_bind_address(address: str, curve_secret_key: bytes | str | None, insecure: bool) -> None:
    """Refuse to bind a non-loopback TCP address without CURVE keys, unless ``insecure`` is explicit.

    Raises:
        ValueError: the address is unsupported, or it is exposed and neither keys nor ``insecure=True``
            were given.
    """
    if is_loopback(address):
        return
    if curve_secret_key is not None:
        _as_key("secret key", curve_secret_key)
        return
    if insecure is True:
        logger.warning(
            "binding %s WITHOUT encryption (insecure=True): anyone who reaches it can join", address
        )
        return
    raise ValueError(
        f"refusing to bind {address!r} without encryption: it is reachable from other machines. "
        "Pass curve_secret_key=generate_keypair().secret_key (and give clients the public key as "
        "curve_server_key), bind a loopback/ipc address, or pass insecure=True explicitly"
    )


def configure_server_socket(socket: zmq.Socket, curve_secret_key: bytes | str | None) -> None:
    """Make ``socket`` a CURVE server when a secret key is given."""
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
