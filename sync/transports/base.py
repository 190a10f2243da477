"""What a feed (:class:`magister.sync.feed.TaskFeed`) needs from a transport, and the errors both raise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import protocol as P

__all__ = ["Capabilities", "ServerUnavailableError", "SyncError", "Transport"]


class ServerUnavailableError(TimeoutError):
    """The curriculum server did not answer within the client's timeout."""


class SyncError(RuntimeError):
    """The server refused a request (e.g. the curriculum failed to sample)."""


@dataclass(frozen=True)
class Capabilities:
    """What a transport is, to the feed: its option defaults and what a send costs.

    Args:
        prefetch: The default of ``FeedOptions.prefetch``.
        update_batch: The default of ``FeedOptions.update_batch``.
        replies_with_send: A send's replies are there when it returns (in-process): the feed asks for
            tasks when it needs one, never ahead, and never along with an update.
        cheap_receive: Replies can be polled at no cost (a socket): the feed reads them whenever some may
            be waiting.
        rejoins: The transport sends heartbeats and registers again when the curriculum side no longer
            knows the env (``ping``, ``rejoin``, ``lost``, ``last_send``).
        costly_send: A send costs far more than a message (an actor call): the feed asks for tasks only
            when none is left ready, holds large updates with the others, and lets the goodbye carry the
            last held updates.
        unit: The ``stats`` key counting sends.
        hint: Appended to a :class:`ServerUnavailableError` raised without the fallback.
    """

    prefetch: int
    update_batch: int
    replies_with_send: bool = False
    cheap_receive: bool = False
    rejoins: bool = False
    costly_send: bool = False
    unit: str = "sends"
    hint: str = ""


class Transport:
    """One env's connection to the curriculum, made in the process that uses it: it moves messages and
    decides nothing. A peer that does not answer raises :class:`ServerUnavailableError`; a refused hello,
    :class:`SyncError`."""

    caps: ClassVar[Capabilities]
    #: Who this transport talks to, for messages (``"curriculum server at ipc://..."``).
    peer: str
    #: Seconds the peer has to answer.
    timeout: float
    #: Times a send waited for room (back-pressure).
    waits: int = 0

    def open(self, hello: P.Hello) -> P.Welcome:  # pragma: no cover - interface
        """Register with the curriculum; its welcome (waits at most the timeout)."""
        raise NotImplementedError

    def send(self, items: list[P.Message]) -> None:  # pragma: no cover - interface
        """Send ``items`` in order without waiting for a reply (for room, at most the timeout)."""
        raise NotImplementedError

    def receive(self, timeout: float) -> list[P.Message]:  # pragma: no cover - interface
        """Replies that arrived, waiting at most ``timeout`` seconds for one (``[]``: none came)."""
        raise NotImplementedError

    def close(self, wait: bool = True, linger: float | None = None) -> None:  # pragma: no cover - interface
        """Release the connection (``wait``: let queued messages go out for at most ``linger`` seconds)."""
        raise NotImplementedError

    def abandon(self) -> None:
        """Forget the connection without touching it (it belongs to the parent of a fork)."""

    def can_send_now(self) -> bool:
        """Whether a send would not wait for room."""
        return True

    def no_reply(self, what: str) -> str:
        """The description of a timeout while waiting for ``what``."""
        return f"no reply from the {self.peer} within {self.timeout:g}s while waiting for {what}"
