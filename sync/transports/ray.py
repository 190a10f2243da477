"""The Ray transport: calls to a named curriculum actor (served by :mod:`magister.sync.ray_server`).

The envs of a process share one handle of the actor and one :class:`Outbox`, which batches their sends
into fire-and-forget ``handle_many`` calls. A receive reads the replies of the env's oldest unread
send (the actor applies calls in order). At most ``max_pending`` sends stay unread: a send beyond that first
waits for the oldest reply. The hello is a send like any other; each call names the process's Ray node and
worker, so the actor can declare the envs it registered gone when Ray reports either dead. When the actor
restarts or no longer knows the env, the messages it did not apply are kept (at most :data:`MAX_KEPT`) and
sent again once the feed has registered again (:meth:`RayTransport.rejoin`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any, ClassVar

import numpy as np

try:
    import ray
    from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError
except ImportError as _exc:  # pragma: no cover - exercised only without ray
    raise ImportError("the Ray backend of magister.sync needs Ray: `pip install 'magister[ray]'`") from _exc

from .. import protocol as P
from ..options import FeedOptions
from .base import ServerUnavailableError, SyncError, Transport

logger = logging.getLogger(__name__)

__all__ = ["ActorGone", "Batch", "Outbox", "RayTransport", "describe_actor", "get", "lookup_actor", "pack",
           "parse_ray_address", "ray_address", "unpack"]

ADDRESS_PREFIX = "ray://"
#: Most messages a transport keeps for a resend while the actor is away (the rest are counted in ``lost``).
MAX_KEPT = 4096
#: Most seconds a send waits in an :class:`Outbox` for the sends of the process's other envs.
BATCH_WINDOW = 0.02
#: Most sends in one ``handle_many`` call.
MAX_BATCH = 256
#: This process's outboxes to the curriculum actors by (pid, name, namespace), made once for all its envs.
_outboxes: dict[tuple[int, str, str | None], Outbox] = {}
_FORMS = "expected 'ray://<name>' or 'ray://<namespace>/<name>'"


def ray_address(name: str, namespace: str | None = None) -> str:
    """The address of the curriculum actor ``name`` (in ``namespace``).

    >>> ray_address("cur"), ray_address("cur", "team")
    ('ray://cur', 'ray://team/cur')
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"actor name must be a non-empty str, got {name!r}")
    if namespace is None:
        if "/" in name:
            raise ValueError(f"actor name {name!r} contains '/', which the address reserves to separate the "
                             "namespace; pass namespace=... or choose another name")
        return ADDRESS_PREFIX + name
    if not isinstance(namespace, str) or not namespace or "/" in namespace:
        raise ValueError(f"namespace must be a non-empty str without '/', got {namespace!r}")
    return f"{ADDRESS_PREFIX}{namespace}/{name}"


def parse_ray_address(address: str) -> tuple[str, str | None]:
    """``(name, namespace)`` of a Ray backend address (the inverse of :func:`ray_address`).

    >>> parse_ray_address("ray://team/cur"), parse_ray_address("ray://cur")
    (('cur', 'team'), ('cur', None))
    >>> parse_ray_address("tcp://127.0.0.1:5555")
    Traceback (most recent call last):
    ...
    ValueError: not a Ray backend address: 'tcp://127.0.0.1:5555'; expected 'ray://<name>' or 'ray://<namespace>/<name>'
    """
    if not isinstance(address, str) or not address.startswith(ADDRESS_PREFIX):
        raise ValueError(f"not a Ray backend address: {address!r}; {_FORMS}")
    name = address[len(ADDRESS_PREFIX):]
    namespace: str | None = None
    if "/" in name:
        namespace, name = name.split("/", 1)
    if not name or namespace == "":
        raise ValueError(f"Ray backend address {address!r} names no actor; {_FORMS}")
    return name, namespace


def pack(msg: P.Message) -> bytes | tuple[Any, ...]:
    """A protocol message as one ``bytes`` frame or, when it carries large arrays, as ``(header,
    array_bytes, ...)``: each large array's bytes a flat ``uint8`` view, which Ray ships out of band."""
    frames = P.encode(msg)
    if len(frames) == 1:
        return bytes(frames[0])
    return (bytes(frames[0]), *(np.frombuffer(f, dtype=np.uint8) for f in frames[1:]))


def unpack(frame: Any) -> P.Message:
    """The message of a frame made by :func:`pack` (``ProtocolError`` when it is not one)."""
    if not isinstance(frame, tuple):
        return P.decode([frame])
    if not all(isinstance(f, (bytes, np.ndarray)) for f in frame):
        raise P.ProtocolError("malformed message: the frames of a message must be bytes or uint8 arrays")
    return P.decode(list(frame))


class ActorGone(ServerUnavailableError):
    """The curriculum actor is dead for good (it will not be restarted)."""


def describe_actor(name: str, namespace: str | None) -> str:
    """``"curriculum Ray actor '<name>' in namespace '<ns>'"``, as used in messages."""
    return f"curriculum Ray actor {name!r}" + (f" in namespace {namespace!r}" if namespace else "")


def get(ref: Any, timeout: float, peer: str, what: str) -> Any:
    """``ray.get(ref)``; :class:`ServerUnavailableError` naming ``peer`` and ``what`` when the actor is
    unavailable or does not answer within ``timeout`` seconds (:class:`ActorGone` when it is dead)."""
    try:
        return ray.get(ref, timeout=timeout)
    except GetTimeoutError:
        raise ServerUnavailableError(f"the {peer} did not answer {what} within {timeout:g}s") from None
    except ActorDiedError as exc:
        raise ActorGone(f"the {peer} is dead ({what}): {exc}") from None
    except RayActorError as exc:
        raise ServerUnavailableError(f"the {peer} is unavailable, restarting? ({what}): {exc}") from None


def lookup_actor(name: str, namespace: str | None, timeout: float) -> Any:
    """``ray.get_actor``, retried until ``timeout``; then :class:`ServerUnavailableError` naming the actor."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return ray.get_actor(name, namespace=namespace)
        except ValueError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailableError(
                    f"no {describe_actor(name, namespace)} found within {timeout:g}s; is serve_ray() running "
                    "in this Ray cluster, under this name and namespace? (a non-detached actor created "
                    f"without a namespace is only visible to its own job) [{exc}]"
                ) from None
            time.sleep(min(delay, left))
            delay = min(2 * delay, 0.5)


class Batch:
    """Sends of several envs (``(env id, frames, token)`` each), to go out as one ``handle_many`` call; its
    ``ref`` once it went out, its ``replies`` (one list or ``None`` per send) once read."""

    def __init__(self) -> None:
        self.sends: list[tuple[int, list, str]] = []
        self.due = time.monotonic() + BATCH_WINDOW
        self.ref: Any = None
        self.replies: list | None = None


class Outbox:
    """The calls of a process's envs to one curriculum actor (its ``actor`` handle). Each send joins the open
    :class:`Batch`, which goes out when the process has one env (at once), when an env reads its replies or
    registers, when it holds :data:`MAX_BATCH` sends, or :data:`BATCH_WINDOW` seconds after its first (a
    thread of the outbox). Batches go out in order, under the lock, so each env's sends reach the actor in
    the order made. ``where``: the process's Ray node and worker ids, sent with each call."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        # (for the actor's liveness checks; a driver is in no worker table: no worker)
        ctx = ray.get_runtime_context()
        in_worker = ctx.get_actor_id() is not None or ctx.get_task_id() is not None
        self.where = (ctx.get_node_id(), ctx.get_worker_id() if in_worker else "")
        self.members = 0  # envs registered through this outbox
        self.open: Batch | None = None
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def submit(self, env_id: int, frames: list, token: str) -> tuple[Batch, int]:
        """Add a send (no frames: a heartbeat); the batch it joined and its place there."""
        with self.lock:
            if self.open is None:
                self.open = Batch()
                if self.thread is None and self.members > 1:
                    self.thread = threading.Thread(target=self._flush_when_due, name="magister-ray-outbox",
                                                   daemon=True)
                    self.thread.start()
                self.lock.notify()
            batch = self.open
            batch.sends.append((env_id, frames, token))
            if self.members <= 1 or len(batch.sends) >= MAX_BATCH:
                self.flush()
            return batch, len(batch.sends) - 1

    def join(self, change: int) -> None:
        """Count an env registered (``1``) or gone (``-1``)."""
        with self.lock:
            self.members += change
            self.lock.notify()  # (the thread stops when the last env left)

    def flush(self) -> None:
        """Send the open batch now."""
        with self.lock:
            if self.open is not None:
                batch, self.open = self.open, None
                batch.ref = self.actor.handle_many.remote(batch.sends, self.where)

    def replies(self, batch: Batch, timeout: float) -> list:
        """The replies of ``batch``, sent first if still open (Ray's errors raised as by ``ray.get``)."""
        if batch.ref is None:
            self.flush()
        if batch.replies is None:
            batch.replies = ray.get(batch.ref, timeout=timeout)
        return batch.replies

    def _flush_when_due(self) -> None:
        """The thread: send each batch when due; stop once no env is left and nothing is open."""
        with self.lock:
            while self.open is not None or self.members > 0:
                left = self.open.due - time.monotonic() if self.open is not None else None
                if left is not None and left <= 0:
                    self.flush()
                else:
                    self.lock.wait(left)
            self.thread = None


class RayTransport(Transport):
    """Calls to the curriculum actor at ``address`` (see the module docstring)."""

    # a call costs far more than a socket message: more tasks per request, asked for only when none is left
    # ready; replies are read only when awaited; the goodbye carries the last held updates
    prefetch: ClassVar[int] = 32
    unit: ClassVar[str] = "calls"
    goodbye_carries_held: ClassVar[bool] = True
    hint: ClassVar[str] = (". Is serve_ray() running, and is the actor alive? Pass fallback_task_space=... "
                           "to sample locally instead")

    def __init__(self, address: str, options: FeedOptions) -> None:
        self.actor_name, self.namespace = parse_ray_address(address)
        self.peer = describe_actor(self.actor_name, self.namespace)
        self.options = options
        self.timeout = options.timeout
        self.max_pending = options.max_pending_updates
        self.outbox: Outbox | None = None
        self.token = ""  # the welcoming actor's
        # (batch, place, frames) of the sends whose replies are unread; while the actor is away (restarted
        # or forgot this env), every send since the one it refused, and the sends held for the rejoin
        self.calls: deque[tuple[Batch | None, int, list]] = deque()
        self.away = False
        self.replies: list[P.Message] = []  # replies read while waiting for room
        self.last_send = time.monotonic()

    @property
    def lost(self) -> int:
        """Messages the rejoin will not send again (beyond :data:`MAX_KEPT`)."""
        return max(0, sum(len(frames) for *_, frames in self.calls) - MAX_KEPT) if self.away else 0

    def open(self, hello: P.Hello) -> P.Welcome:
        if not ray.is_initialized():
            target = self.options.ray_address or "auto"
            logger.info("ray client: this process is not connected to Ray; ray.init(address=%r)", target)
            try:
                ray.init(address=target, namespace=self.namespace, ignore_reinit_error=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ServerUnavailableError(self.no_reply(f"a Ray cluster at {target!r} ({exc})")) from None
        return self._register(hello, self.timeout)

    def _register(self, hello: P.Hello, patience: float) -> P.Welcome:
        """Say hello, retrying for ``patience`` seconds while the actor is not found or is restarting."""
        deadline, delay = time.monotonic() + patience, 0.1
        key = (os.getpid(), self.actor_name, self.namespace)
        while True:
            kept = key in _outboxes
            try:
                if not kept:
                    actor = lookup_actor(self.actor_name, self.namespace, deadline - time.monotonic())
                    _outboxes[key] = Outbox(actor)
                outbox = _outboxes[key]
                batch, place = outbox.submit(0, [pack(hello)], "")  # (after this env's earlier sends)
                outbox.flush()
                reply = unpack(get(batch.ref, self.timeout, self.peer, "the hello")[place][0])
                break
            except ActorGone:
                _outboxes.pop(key, None)
                if not kept:  # (an outbox kept from earlier: the actor may have been replaced, look it up)
                    raise
            except ServerUnavailableError as exc:
                if time.monotonic() + delay >= deadline:
                    raise
                logger.debug("%s away: %s", self.peer, exc)
                time.sleep(delay)
                delay = min(2 * delay, 5.0)
        if isinstance(reply, P.Error) and reply.code == "version":
            raise P.ProtocolVersionError(reply.message)
        if not isinstance(reply, P.Welcome):
            raise SyncError(f"the {self.peer} refused this env: {reply!r:.300}")
        if outbox is not self.outbox:
            self._leave()
            outbox.join(1)
        self.outbox, self.token, self.env_id, self.away = outbox, reply.server_token, reply.env_id, False
        self.heartbeat = reply.heartbeat
        return reply

    def rejoin(self, hello: P.Hello) -> P.Welcome:
        """Register again, waiting for the actor up to ``reconnect_timeout``; then send again what it did
        not apply (the first :data:`MAX_KEPT` messages), made the new registration's
        (:func:`magister.sync.protocol.rebase`)."""
        old = [unpack(f) for *_, frames in self.calls for f in frames][:MAX_KEPT]
        welcome = self._register(P.rejoin_hello(hello, old), self.options.reconnect_timeout)
        self.calls.clear()
        msgs = P.rebase(old, welcome.env_id)
        for start in range(0, len(msgs), 256):
            self.send(msgs[start:start + 256])
        return welcome

    def send(self, items: list[P.Message]) -> None:
        frames = [pack(i) for i in items]
        if not self.away and len(self.calls) >= self.max_pending:  # back-pressure: the actor is behind
            self.waits += 1
            replies = self._read(self.timeout)
            if replies is None:
                raise ServerUnavailableError(self.no_reply(f"room for {len(items)} message(s)"))
            self.replies.extend(replies)
        if self.away or self.outbox is None:
            self.calls.append((None, -1, frames))
        else:
            self.calls.append((*self.outbox.submit(self.env_id, frames, self.token), frames))
            self.last_send = time.monotonic()

    def ping(self) -> None:
        """A heartbeat (a send without messages): the actor counts it as a sign of life."""
        if self.outbox is not None and not self.away:
            self.outbox.submit(self.env_id, [], self.token)
            self.last_send = time.monotonic()

    def _read(self, timeout: float) -> list[P.Message] | None:
        """The replies of the oldest unread send, waiting at most ``timeout`` (``None``: not yet)."""
        batch, place, _ = self.calls[0]
        try:
            replies = [unpack(r) for r in self.outbox.replies(batch, timeout)[place] or ()]
        except GetTimeoutError:
            return None
        except ActorDiedError as exc:
            raise ActorGone(f"the {self.peer} is dead: {exc}") from None
        except RayActorError as exc:  # unavailable: restarting, or cut off
            return self._lose(f"the {self.peer} is unavailable, restarting? {exc}")
        for reply in replies:  # (the actor applies or refuses a call whole)
            if isinstance(reply, P.Error) and reply.code == "unknown_env":
                return self._lose(reply.message)
        self.calls.popleft()
        return replies

    def _lose(self, why: str) -> list[P.Message]:
        """The actor lost this env: the unread calls are kept for the rejoin; one error for the feed."""
        self.away = True
        return [P.Error("unknown_env", why[:2000], self.env_id)]

    def receive(self, timeout: float) -> list[P.Message]:
        if self.replies:
            out, self.replies = self.replies, []
            return out
        if not self.calls or self.away:  # nothing to wait for
            time.sleep(min(max(timeout, 0.0), 0.05))
            return []
        return self._read(max(timeout, 0.0)) or []

    def can_send_now(self) -> bool:
        return len(self.calls) < self.max_pending

    def close(self, wait: bool = True, linger: float | None = None) -> None:
        self._leave()
        self.calls.clear()
        self.replies.clear()

    def _leave(self) -> None:
        """Send what this env's outbox holds; the env no longer counts there."""
        if self.outbox is not None:
            self.outbox.flush()
            self.outbox.join(-1)
            self.outbox = None

    def polls(self, awaiting: bool, holding: bool) -> bool:
        return False

    def ask_when_empty(self, awaiting: bool, size: int) -> int | None:
        return None if awaiting else size

    def refill(self, ready: int, depth: int, holding: bool) -> int:
        return depth if ready <= 1 else 0

    def top_up(self, ready: int, depth: int, holding: bool, due: bool) -> int | None:
        if depth and not ready:
            return depth
        return 0 if due else None
