"""What a feed needs from a transport, and the errors both raise.

A :class:`Transport` moves protocol messages between one env-side feed
(:class:`magister.sync.client.TaskFeed`) and the curriculum's :class:`~magister.sync.server.SyncCore`. It
decides nothing: prefetch, held updates, accounting and the fallback are the feed's. It is made in the
process that uses it (the feed keeps only its class and options, which pickle) and serves one env.

The messages a feed hands to :meth:`Transport.send` are *items*, in the form the transport asked for with
:attr:`Transport.encodes`:

* an encoding transport (ZeroMQ, Ray) gets ``bytes`` (one encoded single-frame message), a ``list`` of
  frames (a message with out-of-band arrays, :func:`magister.sync.protocol.encode`), or a tuple
  ``(message class, fields)`` it encodes itself when it sends (updates whose encoding was deferred);
* the in-process transport gets the message objects.

Transports import :mod:`~magister.sync.protocol`, :mod:`~magister.sync.server` and
:mod:`~magister.sync.security` only, never the feed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .. import protocol as P

__all__ = ["ServerUnavailableError", "SyncError", "Transport"]


class ServerUnavailableError(TimeoutError):
    """The curriculum server did not answer within the client's timeout."""


class SyncError(RuntimeError):
    """The server refused a request (e.g. the curriculum failed to sample)."""


class Transport:
    """One env's connection to the curriculum: ``open``, ``send``, ``receive``, ``close``.

    Class attributes describe the transport to the feed: its default options, and what a send costs, which
    sets how eagerly the feed asks for tasks and reads replies (see :class:`magister.sync.client.TaskFeed`).

    Errors: a peer that does not answer (or is gone) raises :class:`ServerUnavailableError` with a
    description (the feed then falls back or raises it with :attr:`hint` appended); a refusal of the
    hello raises :class:`SyncError`.
    """

    #: Option defaults of feeds over this transport (e.g. ``prefetch``, ``update_batch``).
    defaults: ClassVar[dict[str, Any]] = {}
    #: The ``stats`` key counting sends.
    unit: ClassVar[str] = "sends"
    #: Whether :meth:`send` takes encoded items (False: message objects).
    encodes: ClassVar[bool] = True
    #: A send costs far more than a message (an actor call): the feed asks for tasks only when none is
    #: left, reads replies only when it needs a task, holds large updates with the others and lets the
    #: goodbye carry the last held updates.
    costly: ClassVar[bool] = False
    #: Replies come with the send (in-process): the feed asks for nothing ahead of need.
    synchronous: ClassVar[bool] = False
    #: Whether the feed reads replies whenever some may be waiting (cheap: a socket poll).
    reads_ahead: ClassVar[bool] = False
    #: Appended to a :class:`ServerUnavailableError` raised without the fallback.
    hint: ClassVar[str] = ""

    #: Times a send waited for room (back-pressure).
    waits: int = 0
    #: The env id of the welcome (set by :meth:`open`).
    env_id: int = -1

    def open(self, hello: P.Hello) -> P.Welcome:  # pragma: no cover - interface
        """Register with the curriculum; its welcome (waits at most the timeout)."""
        raise NotImplementedError

    def send(self, items: list[Any]) -> None:  # pragma: no cover - interface
        """Send ``items`` (see the module docstring) as one message or call, in order; never waits for a
        reply. When the peer is behind, wait for room at most the timeout (then
        :class:`ServerUnavailableError`)."""
        raise NotImplementedError

    def receive(self, timeout: float) -> list[P.Message]:  # pragma: no cover - interface
        """Replies that arrived, waiting at most ``timeout`` seconds for one (``[]``: none came)."""
        raise NotImplementedError

    def close(self, wait: bool = True, linger: float | None = None) -> None:  # pragma: no cover - interface
        """Release the connection (``wait``: let queued messages go out, for at most ``linger`` seconds,
        default the close timeout)."""
        raise NotImplementedError

    def abandon(self) -> None:
        """Forget the connection without touching it (it belongs to the process this one forked from)."""

    def can_send_now(self) -> bool:
        """Whether a send would not wait (the background flusher skips a feed whose send would)."""
        return True

    def no_reply(self, what: str) -> str:  # pragma: no cover - interface
        """The description of a timeout while waiting for ``what``."""
        raise NotImplementedError

    @property
    def peer(self) -> str:  # pragma: no cover - interface
        """Who this transport talks to, for messages (``"curriculum server at ipc://..."``)."""
        raise NotImplementedError
