"""A TCP proxy that can be cut and restored: real network faults for tests and benchmarks.

:class:`TcpProxy` listens on a local port and forwards every connection to a target address, byte for
byte, from one background thread. :meth:`TcpProxy.cut` closes the listening socket and every forwarded
connection at once (with a TCP reset: bytes in flight are lost, as when a link or a NAT drops);
:meth:`TcpProxy.restore` listens again on the same port. Workers connected to ``proxy.address`` instead of
the server's see exactly what a network interruption does to them; the server sees its peers vanish and
come back. (A process forked while the proxy listens inherits its listening socket, and the port cannot
be listened on again until that process exits: fork workers before making the proxy, or spawn them.)

>>> import socket, threading
>>> echo = socket.create_server(("127.0.0.1", 0))
>>> def echo_once():
...     conn, _ = echo.accept()
...     conn.sendall(conn.recv(5))
>>> threading.Thread(target=echo_once, daemon=True).start()
>>> with TcpProxy("127.0.0.1", echo.getsockname()[1]) as proxy:
...     c = socket.create_connection(("127.0.0.1", proxy.port))
...     c.sendall(b"hello")
...     c.recv(5)
b'hello'
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forward ``127.0.0.1:port`` (``port=0``: a free one) to ``target_host:target_port``.

    Attributes:
        port: The port it listens on (kept across :meth:`cut` / :meth:`restore`).
        cuts: How many times it was cut.
        connections: Connections forwarded so far.
    """

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target = (target_host, int(target_port))
        self.port = int(port)
        self.cuts = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self.restore()

    @property
    def address(self) -> str:
        """``"tcp://127.0.0.1:<port>"``: what workers connect to instead of the target."""
        return f"tcp://127.0.0.1:{self.port}"

    def restore(self) -> None:
        """Listen (again) on :attr:`port` and forward new connections. A no-op while listening."""
        with self._lock:
            if self._thread is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            listener.setblocking(False)
            self.port = listener.getsockname()[1]
            self._listener = listener
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"tcp-proxy-{self.port}", daemon=True)
            self._thread.start()

    def cut(self) -> None:
        """Close the listening socket and reset every forwarded connection (bytes in flight are lost).
        Connections attempted until :meth:`restore` are refused."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._stop.set()
            self._wake_w.send(b"x")
            thread.join(timeout=5.0)
            self._thread = None
            self.cuts += 1

    def close(self) -> None:
        """Cut for good and release the wake-up sockets."""
        self.cut()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the forwarding thread ----------------------------------------------------------------------
    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        listener = self._listener
        assert listener is not None
        sel.register(listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        pairs = self._pairs
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=1.0):
                    if key.data == "wake":
                        self._wake_r.recv(64)
                        continue
                    if key.data == "accept":
                        self._accept(sel, listener)
                        continue
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    dst = pairs.get(src)
                    if dst is None:
                        continue
                    try:
                        data = src.recv(1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(sel, src)
                        continue
                    try:
                        dst.setblocking(True)
                        dst.sendall(data)
                        dst.setblocking(False)
                    except OSError:
                        self._drop(sel, src)
        finally:
            for s in list(pairs):
                self._drop(sel, s)
            sel.unregister(listener)
            listener.close()
            sel.unregister(self._wake_r)
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, listener: socket.socket) -> None:
        try:
            down, _ = listener.accept()
        except BlockingIOError:
            return
        try:
            up = socket.create_connection(self.target, timeout=2.0)
        except OSError:
            _reset(down)
            return
        for s in (down, up):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._pairs[down], self._pairs[up] = up, down
        sel.register(down, selectors.EVENT_READ)
        sel.register(up, selectors.EVENT_READ)
        self.connections += 1

    def _drop(self, sel: selectors.BaseSelector, s: socket.socket) -> None:
        other = self._pairs.pop(s, None)
        for x in (s, other):
            if x is None:
                continue
            self._pairs.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            _reset(x)


def _reset(s: socket.socket) -> None:
    """Close ``s`` with a TCP reset (linger 0): what is unsent is discarded."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()
