"""What a feed (:class:`magister.sync.feed.TaskFeed`) needs from a transport, and the errors both raise."""

from __future__ import annotations

from typing import Any, ClassVar

from .. import protocol as P

__all__ = ["ServerUnavailableError", "SyncError", "Transport"]


class ServerUnavailableError(TimeoutError):
    """The curriculum server did not answer within the client's timeout."""


class SyncError(RuntimeError):
    """The server refused a request (e.g. the curriculum failed to sample)."""


class Transport:
    """One env's connection to the curriculum, made in the process that uses it: it moves messages, and
    answers the feed's questions whose answer depends on what a send and a receive cost (the methods after
    :meth:`keep_waiting`; the answers here are a socket's, where replies are polled at no cost). A peer that
    does not answer raises :class:`ServerUnavailableError`; a refused hello, :class:`SyncError`.

    Attributes: ``prefetch`` and ``update_batch``, the defaults of those ``FeedOptions``; ``unit``, the
    ``stats`` key counting sends; ``hint``, added to a :class:`ServerUnavailableError`; ``peer``, who it
    talks to (for messages), within ``timeout`` seconds; ``waits``, sends that waited for room; ``heartbeat``,
    the seconds of silence (since ``last_send``) after which the feed sends one (0: none); ``lost``, messages
    that could not be kept for a resend while the peer was away (told when rejoining);
    ``goodbye_carries_held``, whether the held updates go out with the goodbye (one send) or before it.
    """

    prefetch: ClassVar[int] = 8
    update_batch: ClassVar[int] = 32
    unit: ClassVar[str] = "sends"
    goodbye_carries_held: ClassVar[bool] = False
    hint: ClassVar[str] = ""
    peer: str
    timeout: float
    waits: int = 0
    heartbeat: float = 0.0
    last_send: float = 0.0
    lost: int = 0

    def open(self, hello: P.Hello) -> P.Welcome:  # pragma: no cover - interface
        """Register with the curriculum; its welcome (waits at most the timeout)."""
        raise NotImplementedError

    def rejoin(self, hello: P.Hello) -> P.Welcome:
        """Register again where the env is no longer known; then send again what was not applied."""
        return self.open(hello)

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

    def ping(self) -> None:
        """Send a heartbeat (here: none)."""

    def keep_waiting(self, since: float) -> bool:
        """Whether a wait for tasks begun at ``since`` goes on past the timeout (the peer is away)."""
        return False

    # -- the feed's questions -------------------------------------------------------------------------
    def check_travel(self, value: Any) -> None:
        """Raise ``TypeError`` naming a part of ``value`` that cannot travel."""
        P.pack_value(value, [])

    def polls(self, awaiting: bool, holding: bool) -> bool:
        """Whether the feed reads the replies that arrived, now (while tasks are on their way, or holding
        no updates: an error is heard at the next step)."""
        return awaiting or not holding

    def ask_when_empty(self, awaiting: bool, size: int) -> int | None:
        """Tasks to ask for, sending the held updates along, when the env needs one and none is ready (at
        its first reset too; ``size``: a request's at the env's pace); ``None``: send nothing."""
        return 0 if awaiting else 1

    def refill(self, ready: int, depth: int, holding: bool) -> int:
        """Tasks an episode (or completed task) update asks for, ``ready`` being ready, on their way or
        asked for, to keep ``depth`` ready."""
        return 0 if holding and ready > 2 else max(0, depth + 1 - ready)

    def top_up(self, ready: int, depth: int, holding: bool, due: bool) -> int | None:
        """Tasks to ask for, sending the held updates (``due``: the oldest is due), once the env took one."""
        if holding:
            return depth if depth and not ready else None
        return depth - ready if depth > ready else None
