"""The environment side of the sync layer: one feed of tasks, over one of several transports.

A :class:`TaskFeed` is where an env's tasks come from and where its feedback goes. It owns everything an
env-side client does, once, whatever carries the messages:

* **Prefetch.** It keeps tasks ready so ``reset`` rarely waits: as many as the env plays in
  ``max_update_delay`` seconds (by its recent pace), at least one and at most ``prefetch``.
* **Held updates.** A message costs far more than the few bytes of an episode's feedback (a send and a
  wake-up on each side), so updates are held for a moment and sent together, as one message (one actor
  call on Ray; consecutive finished episodes as the columns of one
  :class:`~magister.sync.protocol.Episodes` message, other updates with them in a
  :class:`~magister.sync.protocol.Batch`): at most ``update_batch`` of them and about
  ``max_update_delay`` seconds; the update after which at most one task would be left ready asks for the
  next tasks and goes out at once with those held before it. An env with fast episodes (NetHack, ~12 ms)
  so sends one message per ~7 episodes; one whose episodes take longer than ``max_update_delay`` sends one
  per episode, asking in it for the task its next reset takes. A per-process background thread sends what
  is due while an env is idle; :meth:`TaskFeed.flush` and :meth:`TaskFeed.close` send everything;
  ``max_update_delay=0`` or ``update_batch=1`` holds nothing. Updates of tasks from the server without
  extras are held as their fields and encoded when they are sent (together, off the env's cold step).
  A worker killed while holding updates loses them with it: the tasks they reported stay "in flight" in
  the server's counters, which is how the loss shows.
* **Step records** are batched in a typed buffer (every ``step_batch_size`` steps or at an episode end;
  none when the curriculum wants none; observations and infos only when it reads them).
* **Accounting** (``stats``), **fork safety** (the transport is made lazily in the process that uses the
  feed; after a fork the child makes its own and registers as a new env), **give back** and **close**
  (flush, wait for tasks on their way, return unused ones with the goodbye, wait for its ack; all bounded).
* **Fallback.** Every wait has a timeout: if the server does not answer, :class:`ServerUnavailableError`
  is raised, or, when ``fallback_task_space`` is given, tasks are sampled locally from then on (logged once;
  feedback is dropped).

A transport (:mod:`magister.sync.transports`) only opens, sends, receives and closes:
:class:`~magister.sync.transports.zeromq.ZmqTransport` (a DEALER socket to a
:class:`~magister.sync.server.CurriculumServer`), :class:`~magister.sync.transports.ray_actor.RayTransport`
(calls to a curriculum actor, see :mod:`magister.sync.ray_backend`) and
:class:`~magister.sync.transports.inprocess.InProcessTransport` (the curriculum's
:class:`~magister.sync.server.SyncCore` called directly). What a send costs is a property of the transport
the feed reads: over Ray (a call costs a few hundred µs) the feed asks for tasks only when none is left and
reads replies only when it needs a task; in-process (replies come with the call) it asks for nothing ahead.

:func:`connect` picks the transport from the source; :class:`CurriculumClient`, :class:`RayClient` and
:class:`LocalClient` are the feed over each transport, with that transport's defaults.

A task handed to an env is an :class:`Assignment`: the encoded task, its train and control flags, the
variant it plays (if any) and the id the server uses to account for it.
"""

from __future__ import annotations

import array
import functools
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from ..curricula.base import Curriculum
from ..task_spaces.base import EncodedTask, TaskSpace
from . import protocol as P
from .server import CurriculumServer, ServedCurriculum, ServerHandle, SyncCore
from .transports.base import ServerUnavailableError, SyncError, Transport
from .transports.inprocess import InProcessTransport
from .transports.zeromq import ZmqTransport

logger = logging.getLogger(__name__)

__all__ = [
    "Assignment",
    "TaskFeed",
    "CurriculumClient",
    "LocalClient",
    "RayClient",
    "ServerUnavailableError",
    "SyncError",
    "connect",
    "feed_class",
    "DEFAULT_PREFETCH",
    "DEFAULT_UPDATE_BATCH",
    "DEFAULT_MAX_UPDATE_DELAY",
]

#: Most tasks an env keeps ready over sockets. The depth actually kept adapts to the env's pace: as many
#: tasks as it plays in ``max_update_delay`` (at least one, which hides the request round trip behind a
#: whole episode), so a task is sampled at most about ``max_update_delay`` seconds, or one episode, before
#: it is played (see benchmarks/sync_latency.py for the staleness / latency measurement).
DEFAULT_PREFETCH = 8
#: Most updates a client holds for one send. A step record batch is one update, so an env sending step
#: records makes three per 200-step episode: with 32, the request for the next tasks (every few episodes)
#: sets the pace of sends with or without step records (with 8: one send per ~2.7 NetHack episodes, and
#: the server's cost per episode ~1.8x: benchmarks/README.md).
DEFAULT_UPDATE_BATCH = 32
#: Most seconds a client holds an update (0: none is held); also the span of episodes it keeps tasks for.
DEFAULT_MAX_UPDATE_DELAY = 0.5
#: Seconds a client waits for the server before giving up.
DEFAULT_TIMEOUT = 5.0
#: Most tasks a Ray client asks for in one call (a call costs far more than a message).
DEFAULT_RAY_PREFETCH = 32
#: Most updates a Ray client holds for one call.
DEFAULT_RAY_UPDATE_BATCH = 32
#: Calls a Ray client may have in flight (sent, reply not yet seen) before it waits for the actor.
DEFAULT_MAX_PENDING = 1024
#: The clock of the feeds' time bounds (a module attribute, so tests can replace it).
_now = time.monotonic
#: Whether feeds register with the per-process background flusher (tests with a fake clock turn it off).
_background_flush = True
#: An encoded update at least this large is not held by a feed over a costly transport (sent at once).
_LARGE = P.DEFAULT_OOB_THRESHOLD

#: This process's id, kept current across ``os.fork`` (and so multiprocessing's fork and forkserver) by an
#: at-fork hook: the per-episode checks "is this still the process that owns the transport?" read it
#: instead of calling ``os.getpid()``, a system call (several µs of CPU once an env's step has left the
#: caches cold).
_pid = os.getpid()


def _update_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_update_pid)


def _check_identity(task_space: TaskSpace | None, stream: int | None) -> tuple[TaskSpace | None, int]:
    """Validate the ``task_space`` and ``stream`` options of a feed; the stream as sent (``-1``: none)."""
    if task_space is not None and not isinstance(task_space, TaskSpace):
        raise TypeError(f"task_space must be a TaskSpace or None, got {type(task_space).__name__}")
    if stream is None:
        return task_space, -1
    if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, (int, np.integer)) or stream < 0:
        raise ValueError(f"stream must be an int >= 0 (a reset seed) or None, got {stream!r}")
    return task_space, int(stream) % (1 << 63)


def _hello(pid: int, name: str, task_space: TaskSpace | None, stream: int, rejoin: int = -1) -> P.Hello:
    """The hello of a feed: who it is, the fingerprint of its task space, its random stream and the env id
    of its previous registration (``-1``: none)."""
    return P.Hello(pid, name, task_space.fingerprint() if task_space is not None else "", stream, rejoin)


def _one(frames: list[Any]) -> Any:
    """An encoded message as a feed holds it: its one frame (``bytes``), or the list of its frames."""
    return frames[0] if len(frames) == 1 else frames


class Assignment(NamedTuple):
    """A task handed to one env: ``task_id`` is the server's id for it (``-1``: not from a server).

    ``task`` is the task the curriculum credits; ``control`` asks for the trainer's control policy;
    ``variant`` (``None``: none) is the task the env plays instead of ``task`` (the fields of
    :class:`~magister.curricula.base.TaskSample`).
    """

    task_id: int
    task: EncodedTask
    train: bool = True
    control: bool = False
    variant: Any = None


_PROCESS_STATE = ("_pid", "_transport", "_buffer", "_steps", "_held", "_lock", "_issued", "_void")


class TaskFeed:
    """Tasks for one env, and its feedback to the curriculum, over a :class:`Transport` (see the module
    docstring). Built by :func:`connect`, or as :class:`CurriculumClient`, :class:`RayClient` or
    :class:`LocalClient`; one env thread per feed (a background thread may send its held updates).

    Serialisable to worker processes: only the transport's class and the options travel; the transport is
    made on first use in the process that uses the feed.

    Args:
        transport: The transport class, made with ``transport_options`` in the process that uses the feed.
        transport_options: Its keyword arguments.
        address: Where the server is (for messages and ``repr``).
        prefetch: Most tasks kept ready (0: ask for each task when it is needed).
        timeout: Seconds to wait for the server before :class:`ServerUnavailableError` (or the fallback).
        strip_keys: Keys removed from dict observations and from infos before step records are sent.
        send_obs: Whether step records carry observations (only sent when the curriculum wants steps,
            and reads them).
        send_infos: Whether step records carry infos (likewise).
        fallback_task_space: Opt-in: when the server does not answer, sample tasks locally from this space
            (logged once) instead of raising. Feedback is then dropped.
        close_timeout: Seconds :meth:`close` waits for tasks on their way, and for the goodbye's ack.
        update_batch: Most updates held for one send.
        max_update_delay: Most seconds an update is held (``math.inf``: no time bound, only
            ``update_batch``; 0: nothing is held). It also sets how many tasks are kept ready: the number
            of episodes the env plays in that time (at most ``prefetch``).
        name: A label for the server's logs.
        task_space: The env's task space: its fingerprint is checked against the curriculum's when the
            feed connects (a mismatch raises :class:`SyncError` naming both spaces).
        stream: The env's random stream (the seed of its first seeded reset): the server samples this
            env's tasks from a generator of its own; ``None``: the curriculum's shared one.
    """

    env_id: int | None
    requires_step_updates: bool = False
    step_batch_size: int = 1
    _steps: _StepBuffer | None = None

    def __init__(
        self,
        transport: type[Transport],
        transport_options: dict[str, Any],
        *,
        address: str = "",
        prefetch: int = DEFAULT_PREFETCH,
        timeout: float = DEFAULT_TIMEOUT,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        fallback_task_space: TaskSpace | None = None,
        close_timeout: float = 2.0,
        update_batch: int = DEFAULT_UPDATE_BATCH,
        max_update_delay: float = DEFAULT_MAX_UPDATE_DELAY,
        name: str = "",
        task_space: TaskSpace | None = None,
        stream: int | None = None,
    ) -> None:
        if isinstance(update_batch, bool) or not isinstance(update_batch, int) or update_batch < 1:
            raise ValueError(f"update_batch must be a positive int, got {update_batch!r}")
        if (
            isinstance(max_update_delay, bool)
            or not isinstance(max_update_delay, (int, float))
            or not max_update_delay >= 0  # also refuses NaN
        ):
            raise ValueError(
                f"max_update_delay must be a number of seconds >= 0 (math.inf: no time bound), got "
                f"{max_update_delay!r}"
            )
        self.task_space, self.stream = _check_identity(task_space, stream)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if (
            isinstance(close_timeout, bool)
            or not isinstance(close_timeout, (int, float))
            or not close_timeout >= 0
        ):
            raise ValueError(f"close_timeout must be a number of seconds >= 0, got {close_timeout!r}")
        if fallback_task_space is not None and not isinstance(fallback_task_space, TaskSpace):
            raise TypeError(
                f"fallback_task_space must be a TaskSpace or None, got {type(fallback_task_space).__name__}"
            )
        if isinstance(strip_keys, str):
            raise TypeError("strip_keys must be an iterable of keys, not a single str")
        self.address = address
        self.prefetch = prefetch
        self.timeout = float(timeout)
        self.strip_keys = frozenset(strip_keys)
        self.send_obs = bool(send_obs)
        self.send_infos = bool(send_infos)
        self.fallback_task_space = fallback_task_space
        self.close_timeout = float(close_timeout)
        self.name = name
        self.update_batch = update_batch
        self.max_update_delay = float(max_update_delay)
        self._holds = update_batch > 1 and self.max_update_delay > 0  # (read on every update)
        self._transport_class = transport
        self._transport_options = transport_options
        # what a send costs, read on the feed's paths (see Transport)
        self._encodes = transport.encodes
        self._costly = transport.costly
        self._synchronous = transport.synchronous
        self._reads_ahead = transport.reads_ahead
        self._unit = transport.unit
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        """The state of a feed that belongs to one process (fresh after a fork or an unpickling)."""
        self._pid: int | None = None
        self._transport: Transport | None = None
        self.env_id = None
        self.requires_step_updates = False
        self.requires_episode_updates = True
        self.step_batch_size = 1
        self._buffer: deque[Assignment] = deque()
        self._outstanding = 0  # tasks asked for, not yet received
        self._steps = None
        self._fallback = False
        self._closed = False
        self._goodbye_acked = False
        self._refusal: str | None = None
        self._held: list[Any] = []  # updates waiting for the next send (see _hold)
        self._held_request = 0  # tasks asked for by held updates
        self._send_by = math.inf  # when the oldest held update must go out
        self._lock = threading.RLock()  # the env's thread and the background flusher
        self._last_reset: float | None = None
        self._episode_s: float | None = None  # running mean of the time between two tasks
        self._issued: dict[int, Assignment] = {}  # tasks handed to the env and not yet reported, by id
        # tasks of a previous registration still being played (reported as tasks the env chose, id -1)
        self._void: dict[int, Assignment] = {}
        self.heartbeat = 0.0  # seconds of silence after which the background thread sends a heartbeat
        self._closing = False
        counters = (
            "tasks_received", "updates_sent", "updates_dropped", "errors_received", "send_waits", "rejoins"
        )
        self.stats = dict.fromkeys((*counters, self._unit), 0)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in _PROCESS_STATE:
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    @property
    def holds_updates(self) -> bool:
        """Whether updates are held for a batched send (``update_batch > 1`` and ``max_update_delay > 0``)."""
        return self._holds

    @property
    def held_updates(self) -> int:
        """Updates waiting for the next send."""
        return len(self._held)

    @property
    def transport(self) -> Transport | None:
        """The transport of this process (``None`` until the feed connects, and once it closed)."""
        return self._transport

    # -- connection ---------------------------------------------------------------------------------
    def _ensure(self) -> bool:
        """Connect in this process if needed; False when running on the local fallback."""
        if self._pid != _pid and self._pid is not None:  # forked: the parent's transport is not ours
            if self._transport is not None:
                self._transport.abandon()
            logger.debug("feed: process forked (pid %s -> %s); reconnecting", self._pid, os.getpid())
            self._reset_process_state()
        if self._closed:
            raise SyncError("this client is closed")
        if self._fallback:
            return False
        if self._transport is not None:
            return True
        self._pid = _pid
        transport = self._transport = self._transport_class(**self._transport_options)
        try:
            welcome = transport.open(_hello(os.getpid(), self.name, self.task_space, self.stream))
        except ServerUnavailableError as exc:
            return self._go_fallback("a welcome", str(exc))
        except BaseException:
            self._transport = None
            transport.close(wait=False)
            raise
        self._take_welcome(welcome)
        if self.prefetch and not self._synchronous:
            # start prefetching right away: over sockets, the first reset takes one task and leaves the
            # others ready; over Ray, ask for what the env plays in max_update_delay
            self._send_held(self._depth() + (1 if self._holds and not self._costly else 0))
        if _background_flush and (
            (self._holds and self.max_update_delay < math.inf) or (self.heartbeat > 0 and self._reads_ahead)
        ):
            _register_for_flushing(self)
        return True

    def _rejoin(self) -> None:
        """The server no longer knows this env (it restarted, or declared the env gone after a silence):
        register again. What is still to be delivered goes to the new registration (the transport sends
        it again, :meth:`ZmqTransport.rejoin`); the tasks of the old one still held are played and
        reported as tasks the env chose (id ``-1``: their ids meant nothing to the new registration)."""
        transport = self._transport
        old = self.env_id
        logger.warning(
            "%s no longer knows env %s (restarted, or it declared the env gone): registering again",
            transport.peer,  # type: ignore[union-attr]
            old,
        )
        self._flush_steps()  # everything of the old registration into the transport's resend queue
        self._send_held()
        self._void.update(self._issued)
        self._issued = {}
        self._buffer = deque(a._replace(task_id=-1) for a in self._buffer)
        self._outstanding = 0  # the old registration's requests were dropped with it
        hello = _hello(os.getpid(), self.name, self.task_space, self.stream, -1 if old is None else old)
        welcome = transport.rejoin(hello)  # type: ignore[union-attr]
        self.stats["rejoins"] += 1
        self._take_welcome(welcome)
        need = self._depth() + 1 - len(self._buffer)
        if need > 0:  # what the old registration was asked for and never sent
            self._send_held(need)

    def _take_welcome(self, welcome: P.Welcome) -> None:
        """Adopt the settings of the server's welcome: env id, which updates to send, the step buffer."""
        self.env_id = welcome.env_id
        self.heartbeat = welcome.heartbeat
        self.requires_step_updates = welcome.requires_step_updates
        self.requires_episode_updates = welcome.requires_episode_updates
        self.step_batch_size = welcome.step_batch_size
        self._steps = _StepBuffer(
            self.send_obs and welcome.step_obs,
            self.send_infos and welcome.step_infos,
            self.strip_keys,
            capacity=welcome.step_batch_size,
            on_full=self._flush_steps,
            void=self._void,
        )

    def _go_fallback(self, what: str, reason: str | None = None) -> bool:
        """The server did not answer (while waiting for ``what``): raise, or sample locally from now on."""
        if reason is None:
            reason = self._transport.no_reply(what)  # type: ignore[union-attr]
        if self.fallback_task_space is None:
            raise ServerUnavailableError(reason + self._transport_class.hint)
        logger.warning(
            "%s; sampling tasks locally from %r from now on (feedback is dropped)",
            reason,
            self.fallback_task_space,
        )
        self._fallback = True
        self.requires_step_updates = False  # feedback is dropped from now on: do not even buffer it
        self.stats["updates_dropped"] += len(self._held)
        self._held, self._held_request, self._send_by = [], 0, math.inf
        self._outstanding = 0
        if self._transport is not None:
            self._transport.close(wait=False)
            self._transport = None
        return False

    def _active(self) -> bool:
        """Whether updates can be delivered now (connected in this process, not closed, no fallback)."""
        return self._transport is not None and self._pid == _pid and not self._fallback

    # -- sending ------------------------------------------------------------------------------------
    def _pack(self, msg: P.Message) -> Any:
        """``msg`` as the transport takes it."""
        return _one(P.encode(msg)) if self._encodes else msg

    def _send(self, items: list[Any], updates: int, asked: int) -> bool:
        """One send of ``items`` (``updates`` of them updates, asking for ``asked`` tasks in all)."""
        transport = self._transport
        stats = self.stats
        try:
            transport.send(items)  # type: ignore[union-attr]
        except ServerUnavailableError as exc:
            stats["updates_dropped"] += updates
            stats["send_waits"] = transport.waits  # type: ignore[union-attr]
            self._go_fallback("room to send", str(exc))
            return False
        stats["updates_sent"] += updates
        stats[self._unit] += 1
        stats["send_waits"] = transport.waits  # type: ignore[union-attr]
        self._outstanding += asked
        return True

    def _send_fields(self, cls: type[P.Message], fields: tuple) -> None:
        """Deliver the update ``cls(*fields)`` (whose last field is its task request).

        An update that will be held, of a task from the server (which travelled once already) and without
        extras (whose values might not travel), is held as its fields and encoded when the held updates
        are sent, together: at an episode's end, with the env's step having left the caches cold,
        encoding costs tens of µs. Every other update is encoded now (by an encoding transport, without
        building the message: the server validates it), so that what cannot travel raises here.
        """
        if self._holds and fields[1] >= 0 and not (cls is P.EpisodeUpdate and fields[7]):
            self._hold((cls, fields), fields[-1])
        elif self._encodes:
            self._deliver(_one(P.encode_fields(cls, fields)), fields[-1])
        else:
            self._deliver(cls(*fields), fields[-1])

    def _deliver_steps(self, steps: _StepBuffer) -> None:
        """Deliver the buffered step records as one update (and empty the buffer)."""
        if self._encodes:
            self._deliver(_one(steps.frames(self.env_id)), 0)  # type: ignore[arg-type]
        else:
            self._deliver(steps.message(self.env_id), 0)  # type: ignore[arg-type]

    def _deliver(self, item: Any, request: int) -> None:
        """Send an update, or hold it for a batched send.

        Held updates go out together once ``update_batch`` are held, the oldest has waited
        ``max_update_delay``, or one of them asks for tasks (which it does when at most one task would be
        left after the next reset); before an update too large to hold (step records carrying
        observations: over a costly transport it goes out at once with them), and on :meth:`flush`,
        :meth:`close`, :meth:`next_task` with no task ready, and the background flusher.
        """
        if self._holds and (item.__class__ is bytes or self._costly):
            self._hold(item, request)
            return
        with self._lock:
            self._send_held()  # the held updates first, in order
            if self._active():
                self._send([item], 1, request)
            else:
                self.stats["updates_dropped"] += 1

    def _hold(self, item: Any, request: int) -> None:
        """Hold one update (encoded, or ``(message class, fields)`` to encode when sent)."""
        with self._lock:
            now = _now()
            held = self._held
            if not held:
                self._send_by = now + self.max_update_delay
            held.append(item)
            self._held_request += request
            if (
                request
                or len(held) >= self.update_batch
                or now >= self._send_by
                or (self._costly and self._large(item))
            ):
                self._send_held()

    @staticmethod
    def _large(item: Any) -> bool:
        """Whether an encoded update is too large to hold (step records carrying observations)."""
        return item.__class__ is list or (item.__class__ is bytes and len(item) >= _LARGE)

    def _send_held(self, request: int = 0) -> None:
        """Send the held updates (one message; a batch when several), with a request for ``request``
        more tasks."""
        if not self._active() or self.env_id is None:
            return
        held, asked = self._held, self._held_request
        if not held and request <= 0:
            return
        self._held, self._held_request, self._send_by = [], 0, math.inf
        updates = len(held)
        if updates > 1 and held[0].__class__ is tuple:
            held = _columns(held, self.env_id)
        if request > 0:
            last = held[-1] if held else None
            if last.__class__ is tuple and last[0] in _REQUESTING:  # ask in the last update itself
                held[-1] = (last[0], (*last[1][:-1], last[1][-1] + request))
            else:
                held.append(self._pack(P.TaskRequest(self.env_id, request)))
            asked += request
        self._send(held, updates, asked)

    def _clock(self) -> float:
        """Now, by the clock of this module (``_now``, which tests replace)."""
        return _now()

    def _send_due(self) -> None:
        """Send the held updates if they are due, and a heartbeat after ``heartbeat`` seconds of silence
        (called by the background flusher's thread; a feed the env's thread is using is skipped until the
        next wake-up)."""
        transport = self._transport
        beat = (
            self.heartbeat > 0
            and transport is not None
            and time.monotonic() - getattr(transport, "last_send", math.inf) >= self.heartbeat
        )
        if not beat and (not self._held or _now() < self._send_by):
            return
        if transport is None or not transport.can_send_now():  # back-pressure: the env's thread handles it
            return
        if self._lock.acquire(blocking=False):
            try:
                if self._pid != _pid or self._transport is not transport:
                    return
                if self._held and _now() >= self._send_by:
                    self._send_held()
                elif beat and not self._closing:
                    transport.ping()  # type: ignore[attr-defined]
            finally:
                self._lock.release()

    # -- receiving ----------------------------------------------------------------------------------
    def _receive(self, timeout: float) -> bool:
        """Take in the replies that arrived (waiting at most ``timeout`` seconds); False when none did."""
        msgs = self._transport.receive(timeout)  # type: ignore[union-attr]
        for msg in msgs:
            cls = msg.__class__
            if cls is P.Tasks:
                n = len(msg.task_ids)
                self._buffer.extend(
                    map(Assignment, msg.task_ids, msg.tasks, msg.train, msg.control, msg.variants)
                )
                self._outstanding = max(0, self._outstanding - n)
                self.stats["tasks_received"] += n
            elif cls is P.Goodbye:
                self._goodbye_acked = True
            elif cls is P.Error:
                if msg.code == "unknown_env" and not self._closing and hasattr(self._transport, "rejoin"):
                    self._rejoin()
                    continue
                self.stats["errors_received"] += 1
                if msg.code == "version":
                    raise P.ProtocolVersionError(msg.message)
                if msg.code in ("sample_failed", "bad_request") and self._outstanding:
                    self._outstanding = 0
                    self._refusal = f"{msg.code}: {msg.message}"
                logger.error(
                    "%s refused a message from env %s (%s): %s",
                    self._transport.peer,  # type: ignore[union-attr]
                    self.env_id,
                    msg.code,
                    msg.message,
                )
        return bool(msgs)

    def _drain(self) -> None:
        """Take in every reply that already arrived."""
        while self._transport is not None and self._receive(0):
            pass

    def _wait_for_tasks(self) -> bool:
        """Wait for a task (at most ``timeout``); False when the fallback took over."""
        deadline = time.monotonic() + self.timeout
        while not self._buffer:
            if self._refusal is not None:
                err, self._refusal = self._refusal, None
                raise SyncError(f"{self._transport.peer} refused (waiting for tasks): {err}")  # type: ignore[union-attr]
            left = deadline - time.monotonic()
            if left <= 0:
                return self._go_fallback("tasks")
            try:
                self._receive(left)
            except ServerUnavailableError as exc:
                return self._go_fallback("tasks", str(exc))
        return True

    # -- tasks --------------------------------------------------------------------------------------
    def _note_reset(self, now: float) -> None:
        """A task is taken at ``now``: update the running mean of the time between two tasks."""
        if self._last_reset is not None:
            dt = now - self._last_reset
            self._episode_s = dt if self._episode_s is None else 0.75 * self._episode_s + 0.25 * dt
        self._last_reset = now

    def _request_size(self) -> int:
        """Tasks to keep ready: as many as the env plays in ``max_update_delay`` seconds (by its recent
        pace; 1 until that is known), at least 1 and at most ``prefetch`` (``prefetch`` itself when
        ``max_update_delay`` is infinite)."""
        if self.prefetch <= 1:
            return 1
        if self.max_update_delay == math.inf:
            return self.prefetch
        if self._episode_s is None:
            return 1
        if self._episode_s <= 0.0:
            return self.prefetch
        return max(1, min(self.prefetch, int(self.max_update_delay / self._episode_s)))

    def _depth(self) -> int:
        """Tasks to keep ready beyond the one the next reset takes (0 with ``prefetch=0``)."""
        return self._request_size() if self.prefetch else 0

    def _refill_request(self) -> int:
        """Tasks an episode (or completed task) update asks for along the way, the reset that follows
        taking one task: none in-process (tasks are asked for when needed). Over sockets, what keeps the
        depth ready, asked once at most one task would be left after that reset (when holding updates);
        over a costly transport, the next ``request_size`` tasks once none would be left."""
        if self.env_id is None or self._synchronous:
            return 0
        ready = len(self._buffer) + self._outstanding + self._held_request
        if self._costly:
            return self._request_size() if self.prefetch and ready <= 1 else 0
        if self._holds and ready > 2:
            return 0
        need = self._depth() + 1 - ready
        return need if need > 0 else 0

    def next_task(self) -> Assignment:
        """The next task: from the prefetch buffer, or requested and awaited (at most ``timeout``)."""
        if (self._transport is not None and self._pid == _pid) or self._ensure():  # (connected here, or now)
            with self._lock:
                now = _now()
                self._note_reset(now)
                if self._reads_ahead and (self._outstanding or not self._holds):
                    self._drain()  # replies to read (a feed holding updates reads error replies with
                    # the next tasks, or when it waits)
                if not self._buffer:
                    if not self._outstanding:  # ask, sending what is held along
                        self._send_held(1 if self._reads_ahead else self._request_size())
                    elif not self._costly:
                        self._send_held()
                    self._wait_for_tasks()
                if self._buffer:
                    a = self._buffer.popleft()
                    if a.task_id >= 0:
                        self._issued[a.task_id] = a
                    if self._synchronous:
                        pass
                    elif not self._holds and self._reads_ahead:  # top up what is kept ready
                        need = self._depth() - len(self._buffer) - self._outstanding
                        if need > 0:
                            self._send_held(need)
                    elif self.prefetch and not (self._buffer or self._outstanding or self._held_request):
                        self._send_held(self._depth())  # a reset without an update before it
                    elif self._costly and self._held and now >= self._send_by:
                        self._send_held()
                    return a
        (task,) = self.fallback_task_space.sample_encoded(1)  # type: ignore[union-attr]
        return Assignment(-1, task, True)

    def give_back(self, assignment: Assignment) -> None:
        """Return an unused task: :meth:`next_task` hands it out again (or :meth:`close` returns it)."""
        if assignment.task_id >= 0 and self._active():
            with self._lock:
                self._issued.pop(assignment.task_id, None)
                if self._void and self._void.get(assignment.task_id) is assignment:
                    del self._void[assignment.task_id]  # its registration is gone: nothing to return
                else:
                    self._buffer.appendleft(assignment)

    # -- feedback -----------------------------------------------------------------------------------
    def record_step(
        self,
        assignment: Assignment,
        obs: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict | None,
        progress: float,
    ) -> None:
        """Buffer one step (a no-op unless the curriculum wants step updates); sends full batches."""
        if self.requires_step_updates and self._steps is not None:
            self._steps.add(assignment, obs, reward, terminated, truncated, info, progress)

    def step_recorder(self) -> Callable[..., None] | None:
        """What :meth:`record_step` calls, for callers recording every step of an episode (the sync
        wrappers look it up once per episode: one call per step instead of three); ``None`` when the
        curriculum wants no step updates. It sends full batches itself."""
        if self.requires_step_updates and self._steps is not None:
            return self._steps.add
        return None

    def flush(self) -> None:
        """Send buffered step records and every held update now (dropped when updates cannot be
        delivered: closed, fallback)."""
        with self._lock:
            self._flush_steps()
            self._send_held()

    def _flush_steps(self) -> None:
        """Turn buffered step records into one update and deliver it (what a full batch, an episode end and
        :meth:`flush` do)."""
        steps = self._steps
        if steps is None or not len(steps):
            return
        if not self._active():
            steps.clear()
            return
        try:
            self._deliver_steps(steps)
        except TypeError as exc:
            raise TypeError(
                f"{exc}. Remove such entries from observations/infos with strip_keys=[...] or "
                "send_obs=False / send_infos=False"
            ) from None
        if self._reads_ahead and not self._holds and self._active():
            with self._lock:
                self._drain()  # error replies and tasks that arrived meanwhile

    def record_episode(
        self,
        assignment: Assignment,
        episode_return: float,
        length: int,
        progress: float,
        ended: bool = True,
        extras: dict | None = None,
        refill: bool = True,
    ) -> None:
        """An episode on ``assignment`` finished (``ended=False``: abandoned by an early reset).

        ``refill``: a next task will be wanted (the env resets next), so the update may also ask for it
        (:meth:`_refill_request`); false when the env is closing.
        """
        if self._transport is None or self._pid != _pid:  # (not _active(): closed, fallback, forked)
            return
        if self.requires_step_updates and self._steps is not None and len(self._steps):
            self._flush_steps()
            if not self._active():  # the flush may have found the server gone
                return
        task_id = assignment.task_id
        if self._issued.pop(task_id, None) is None and self._void and self._void.get(task_id) is assignment:
            del self._void[task_id]
            task_id = -1  # handed out by a previous registration
        self._send_fields(
            P.EpisodeUpdate,
            (
                self.env_id,
                task_id,
                assignment.task,
                float(episode_return),
                int(length),
                float(progress),
                bool(ended),
                dict(extras) if extras else {},
                self._refill_request() if refill else 0,
            ),
        )

    def record_progress(self, assignment: Assignment, progress: float, done: bool = False) -> None:
        """Progress on ``assignment`` mid-episode; ``done`` acknowledges the task as consumed (and, the task
        being replaced at once, may ask for the next one in the same message)."""
        if not self._active():
            return
        if self._steps is not None and len(self._steps):
            self._flush_steps()
            if not self._active():
                return
        task_id = assignment.task_id
        if self._void and self._void.get(task_id) is assignment:
            task_id = -1  # handed out by a previous registration
            if done:
                del self._void[assignment.task_id]
        elif done:
            self._issued.pop(task_id, None)
        self._send_fields(
            P.ProgressUpdate,
            (
                self.env_id,
                task_id,
                assignment.task,
                float(progress),
                bool(done),
                self._refill_request() if done else 0,
            ),
        )

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush, wait for tasks on their way, return unused ones with the goodbye and wait for its ack
        (each bounded by ``close_timeout``). Idempotent."""
        if self._closed or self._pid != _pid:
            self._closed = True
            return
        _unregister_for_flushing(self)
        with self._lock:
            self._close()

    def _close(self) -> None:
        deadline = time.monotonic() + self.close_timeout  # one bound for the whole close
        self._closing = True
        try:
            if self._active() and self.env_id is not None:
                if self._costly:
                    self._flush_steps()  # the goodbye carries the held updates
                else:
                    self.flush()
                while self._outstanding and self._active() and time.monotonic() < deadline:
                    self._receive(deadline - time.monotonic())
                if self._active():
                    self._say_goodbye(deadline)
        except (ServerUnavailableError, SyncError) as exc:  # closing must not fail because the server is gone
            logger.warning("client env %s: closing without the server: %s", self.env_id, exc)
        finally:
            if self._transport is not None:
                # everything before the goodbye was acknowledged: nothing left worth lingering for;
                # otherwise queued messages may go out for what is left of the close timeout
                if self._goodbye_acked:
                    self._transport.close(wait=False)
                else:
                    self._transport.close(wait=True, linger=max(0.0, deadline - time.monotonic()))
                self._transport = None
            self._held, self._held_request, self._send_by = [], 0, math.inf
            self._buffer.clear()
            self._closed = True

    def _say_goodbye(self, until: float) -> None:
        """Return the unused tasks with the goodbye and wait for its ack until ``until``."""
        returned = tuple(a.task_id for a in self._buffer if a.task_id >= 0)
        self._buffer.clear()
        goodbye = self._pack(P.Goodbye(self.env_id, returned))  # type: ignore[arg-type]
        if self._costly:  # one call: the held updates, then the goodbye
            held, self._held, self._held_request, self._send_by = self._held, [], 0, math.inf
            held.append(goodbye)
            sent = self._send(held, len(held) - 1, 0)
        else:
            try:
                self._transport.send([goodbye])  # type: ignore[union-attr]
                sent = True
            except ServerUnavailableError as exc:
                sent = self._go_fallback("room for the goodbye", str(exc))
        while sent and not self._goodbye_acked and self._transport is not None and time.monotonic() < until:
            self._receive(until - time.monotonic())
        if not self._goodbye_acked:
            logger.warning("client env %s: no goodbye ack from %s", self.env_id, self.address)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.address!r}, env_id={self.env_id})"


# -- step records ------------------------------------------------------------------------------------


#: Deferred updates whose last field is a task request.
_REQUESTING = (P.EpisodeUpdate, P.Episodes, P.ProgressUpdate)


def _columns(held: list[Any], env_id: int) -> list[Any]:
    """``held`` with each run of two or more deferred episode updates (``(EpisodeUpdate, fields)``, no
    extras) made one :class:`~magister.sync.protocol.Episodes` item asking for the tasks they asked for."""
    out: list[Any] = []
    run: list[tuple] = []
    for item in held:
        if item.__class__ is tuple and item[0] is P.EpisodeUpdate:
            run.append(item[1])
            continue
        _flush_run(run, out, env_id)
        out.append(item)
    _flush_run(run, out, env_id)
    return out


def _flush_run(run: list[tuple], out: list[Any], env_id: int) -> None:
    if len(run) > 1:
        out.append((P.Episodes, P.Episodes.fields_of(env_id, run, sum(f[-1] for f in run))))
    elif run:
        out.append((P.EpisodeUpdate, run[0]))
    run.clear()


def _strip(value: Any, keys: frozenset[str]) -> Any:
    if keys and isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in keys}
    return value


def _copy_obs(obs: Any) -> Any:
    """Step records are sent later; copy arrays an env might overwrite in place."""
    if isinstance(obs, np.ndarray):
        return obs.copy()
    if isinstance(obs, dict):
        return {k: _copy_obs(v) for k, v in obs.items()}
    if isinstance(obs, (tuple, list)):
        return tuple(_copy_obs(v) for v in obs)
    return obs


def _like(a: Any, ref: np.ndarray) -> bool:
    return isinstance(a, np.ndarray) and a.shape == ref.shape and a.dtype == ref.dtype


def _stack(observations: list[Any]) -> Any:
    """The observations of a step batch, stacked along a new first axis when they share one numeric layout:
    one array, or for dict observations one array per key (a few large frames instead of one small array per
    step and key); otherwise the tuple of observations."""
    first = observations[0]
    if isinstance(first, np.ndarray) and first.dtype.kind in "biufc":
        if all(_like(o, first) for o in observations):
            return np.stack(observations)
    elif (
        isinstance(first, dict)
        and first
        and all(isinstance(k, str) and isinstance(v, np.ndarray) and v.dtype.kind in "biufc"
                for k, v in first.items())
        and all(
            isinstance(o, dict) and o.keys() == first.keys() and all(_like(o[k], v) for k, v in first.items())
            for o in observations
        )
    ):
        return {k: np.stack([o[k] for o in observations]) for k in first}
    return tuple(observations)


def _numeric(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "biufc"


class _ObsColumns:
    """The observations of one step batch written straight into arrays of ``capacity`` rows, one per key
    (or one for array observations): each step costs one copy, and the batch travels as these arrays
    without stacking. Built from the batch's first observation; :meth:`put` refuses (False) an observation
    of another layout, and the batch then falls back to per-step copies."""

    def __init__(self, first: Any, capacity: int) -> None:
        self.keyed = isinstance(first, dict)
        items = first.items() if self.keyed else (("", first),)
        self.cols = {k: np.empty((capacity, *v.shape), dtype=v.dtype) for k, v in items}
        self.n = 0

    @staticmethod
    def fits(obs: Any) -> bool:
        if isinstance(obs, dict):
            return bool(obs) and all(isinstance(k, str) and _numeric(v) for k, v in obs.items())
        return _numeric(obs)

    def put(self, obs: Any) -> bool:
        cols, i = self.cols, self.n
        if i >= next(iter(cols.values())).shape[0]:
            return False
        if self.keyed:
            if not isinstance(obs, dict) or obs.keys() != cols.keys():
                return False
            for k, v in obs.items():
                c = cols[k]
                if not (isinstance(v, np.ndarray) and v.shape == c.shape[1:] and v.dtype == c.dtype):
                    return False
            for k, v in obs.items():
                cols[k][i] = v
        else:
            c = cols[""]
            if not (isinstance(obs, np.ndarray) and obs.shape == c.shape[1:] and obs.dtype == c.dtype):
                return False
            c[i] = obs
        self.n = i + 1
        return True

    def rows(self) -> list[Any]:
        """The observations written so far, one per step (views)."""
        if self.keyed:
            return [{k: v[i] for k, v in self.cols.items()} for i in range(self.n)]
        return [self.cols[""][i] for i in range(self.n)]

    def stacked(self) -> Any:
        """The batch's observations: the filled rows of each array (views, no copy)."""
        if self.keyed:
            return {k: v[: self.n] for k, v in self.cols.items()}
        return self.cols[""][: self.n]


class _StepBuffer:
    """Step records of one env waiting to be sent as one :class:`~magister.sync.protocol.StepUpdate`.

    ``capacity``: the most steps a batch holds (the step batch size); with it, numeric observations (an
    array, or a dict of arrays) are written straight into per-batch arrays (:class:`_ObsColumns`).
    ``on_full``: called when a step fills the batch (the feed sends it).
    """

    def __init__(
        self,
        send_obs: bool,
        send_infos: bool,
        strip_keys: frozenset[str],
        capacity: int = 0,
        on_full: Callable[[], None] | None = None,
        void: dict[int, Assignment] | None = None,
    ) -> None:
        self.send_obs, self.send_infos, self.strip_keys = send_obs, send_infos, strip_keys
        #: The feed's tasks of a previous registration: their steps are reported with task id -1.
        self.void = void if void is not None else {}
        self.capacity = int(capacity)
        self.on_full = on_full
        # the lean recorder's fill limit: no batch is full without someone to send it
        self._limit = self.capacity if on_full is not None and self.capacity > 0 else sys.maxsize
        self.clear()

    def clear(self) -> None:
        # Numeric columns as typed arrays (C-level appends, zero-copy views per batch). What is nearly
        # constant within a batch is stored sparsely: the task as runs of steps on one assignment (a new
        # run when the assignment object changes), terminated/truncated as the few steps where one is set.
        self.runs: list[tuple[int, Assignment]] = []  # (first step, assignment)
        self.last: Assignment | None = None
        self.rewards = array.array("d")
        self.progress = array.array("d")
        self.ends: list[tuple[int, bool, bool]] = []  # (step, terminated, truncated)
        self.obs: list[Any] = []
        self.columns: _ObsColumns | None = None
        self.infos: list[dict] = []

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def add(self) -> Callable[..., None]:
        """What records one step: ``add(assignment, obs, reward, terminated, truncated, info, progress)``;
        a full batch goes to ``on_full``. :meth:`_add_lean` when neither observations nor infos are sent
        (most curricula want neither: a few appends per step), :meth:`_add_full` otherwise."""
        return self._add_full if self.send_obs or self.send_infos else self._add_lean

    def _add_lean(
        self, a: Assignment, obs: Any, reward: float, term: bool, trunc: bool, info: Any, progress: float
    ) -> None:
        if a is not self.last:
            self.runs.append((len(self.rewards), a))
            self.last = a
        rewards = self.rewards
        rewards.append(reward)
        self.progress.append(progress)
        if term or trunc:
            self.ends.append((len(rewards) - 1, bool(term), bool(trunc)))
        if len(rewards) >= self._limit:
            self.on_full()  # type: ignore[misc]

    def _add_full(
        self, a: Assignment, obs: Any, reward: float, term: bool, trunc: bool, info: Any, progress: float
    ) -> None:
        n = len(self.rewards)
        if a is not self.last:
            self.runs.append((n, a))
            self.last = a
        self.rewards.append(reward)
        self.progress.append(progress)
        if term or trunc:
            self.ends.append((n, bool(term), bool(trunc)))
        if self.send_obs:
            self._add_obs(_strip(obs, self.strip_keys))
        if self.send_infos:
            self.infos.append(_strip(dict(info) if info else {}, self.strip_keys))
        if n + 1 >= self._limit:
            self.on_full()  # type: ignore[misc]

    def _task_columns(self) -> tuple[array.array, tuple, array.array, array.array]:
        """Per-step task ids, tasks, terminated and truncated flags, expanded from their sparse form."""
        n = len(self.rewards)
        ids = array.array("q")
        tasks: list[EncodedTask] = []
        void = self.void
        for k, (start, a) in enumerate(self.runs):
            end = self.runs[k + 1][0] if k + 1 < len(self.runs) else n
            tid = -1 if void and void.get(a.task_id) is a else a.task_id
            ids.extend(array.array("q", (tid,)) * (end - start))
            tasks.extend((a.task,) * (end - start))
        term = array.array("b", bytes(n))
        trunc = array.array("b", bytes(n))
        for i, te, tr in self.ends:
            term[i], trunc[i] = te, tr
        return ids, tuple(tasks), term, trunc

    def _add_obs(self, obs: Any) -> None:
        cols = self.columns
        if cols is None and not self.obs and self.capacity > 1 and _ObsColumns.fits(obs):
            cols = self.columns = _ObsColumns(obs, self.capacity)
        if cols is not None:
            if cols.put(obs):
                return
            self.obs, self.columns = cols.rows(), None  # another layout mid-batch: per-step copies
        self.obs.append(_copy_obs(obs))

    def _observations(self) -> Any:
        if not self.send_obs:
            return None
        if self.columns is not None:
            return self.columns.stacked()
        return _stack(self.obs)

    def message(self, env_id: int) -> P.StepUpdate:
        """The buffered steps as a :class:`~magister.sync.protocol.StepUpdate`; empties the buffer."""
        ids, tasks, term, trunc = self._task_columns()
        msg = P.StepUpdate(
            env_id,
            np.frombuffer(ids, dtype=np.int64),
            tasks,
            np.frombuffer(self.rewards, dtype=np.float64),
            np.frombuffer(term, dtype=np.bool_),
            np.frombuffer(trunc, dtype=np.bool_),
            np.frombuffer(self.progress, dtype=np.float64),
            self._observations(),
            tuple(self.infos) if self.send_infos else None,
        )
        self.clear()
        return msg

    def frames(self, env_id: int) -> list[Any]:
        """The buffered steps encoded straight from the typed columns (what :meth:`message` would encode
        to, without building and checking the message: the server checks it); empties the buffer."""
        try:
            ids, tasks, term, trunc = self._task_columns()
            return P.encode_step_update(
                env_id,
                ids,
                tasks,
                self.rewards,
                term,
                trunc,
                self.progress,
                self._observations(),
                tuple(self.infos) if self.send_infos else None,
            )
        finally:  # records that cannot be encoded are dropped with the error, not raised again later
            self.clear()


# -- the background flusher ------------------------------------------------------------------------


class _Flusher:
    """One daemon thread per process that sends the updates clients (sockets, Ray) have held too long.

    It sleeps until the oldest held update of its clients is due (at least a quarter and at most all of
    the shortest ``max_update_delay`` among them) and sends what is due, so an update waits at most about
    ``1.25 * max_update_delay`` even when its env stops stepping (an RLlib env runner between two
    ``sample()`` calls, a paused evaluation). A busy env sends its held updates itself long before they
    are due, so the thread then wakes about once per ``max_update_delay``: a wake-up costs the env's
    process ~0.1-0.4 ms of CPU (a thread switch and the GIL handed over), which at a fixed quarter-delay
    tick was ~0.8% of a NetHack env's CPU. Clients are held by weak reference; a client busy in its own
    thread is skipped until the next wake-up. The thread ends once no client is registered (closed or
    garbage-collected: either wakes it); the next registration starts a new one.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.clients: weakref.WeakSet[TaskFeed] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.period = math.inf  # the longest sleep: the shortest max_update_delay of the clients
        self.stopped = False
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name="magister-update-flusher", daemon=True)

    def add(self, client: TaskFeed) -> bool:
        """Register ``client``; False when this flusher has stopped (make a new one)."""
        with self.lock:
            if self.stopped:
                return False
            self.clients.add(client)
            weakref.finalize(client, self.wake.set)  # a collected client may have been the last one
            delay = client.max_update_delay if client.holds_updates else math.inf
            period = max(4e-3, min(delay, client.heartbeat or math.inf))
            if period < self.period:
                self.period = period
                self.wake.set()  # sleep less from now on
        if not self.thread.is_alive():
            self.thread.start()
        return True

    def remove(self, client: TaskFeed) -> None:
        """Unregister ``client``; the last one to go stops the thread and waits for it (bounded), so a
        closed client leaves no thread behind."""
        with self.lock:
            self.clients.discard(client)
            if self.clients:
                return
            self.stopped = True
        self.wake.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=2.0)

    def _sleep(self, clients: list[TaskFeed]) -> float | None:
        """Seconds until the oldest held update is due, within ``[period / 4, period]``."""
        if self.period == math.inf:
            return None
        left = self.period
        for client in clients:
            if client._held:
                left = min(left, client._send_by - client._clock())
        return max(left, self.period / 4)

    def _run(self) -> None:
        timeout: float | None = None
        while True:
            self.wake.wait(timeout)
            self.wake.clear()
            with self.lock:
                if not self.clients or self.stopped:
                    self.stopped = True
                    return
            timeout = self._tick()

    def _tick(self) -> float | None:
        """Send what is due; returns the next sleep. (Its own frame: the thread's long-lived frame holds
        no client between wake-ups, so an abandoned client can be collected.)"""
        with self.lock:
            clients = list(self.clients)
        for client in clients:
            try:
                client._send_due()
            except Exception:  # the thread must not die; the env thread meets the same error itself
                logger.warning("client env %s: background send failed", client.env_id, exc_info=True)
        return self._sleep(clients)


_flusher_lock = threading.Lock()
_flusher_instance: _Flusher | None = None


def _register_for_flushing(client: TaskFeed) -> None:
    """Register ``client`` with this process's flusher (a new one after a fork, or once it stopped)."""
    global _flusher_instance
    with _flusher_lock:
        f = _flusher_instance
        if f is None or f.pid != os.getpid() or not f.add(client):
            _flusher_instance = _Flusher()
            _flusher_instance.add(client)


def _unregister_for_flushing(client: TaskFeed) -> None:
    f = _flusher_instance
    if f is not None and f.pid == os.getpid():
        f.remove(client)




# -- the feed over each transport --------------------------------------------------------------------


class CurriculumClient(TaskFeed):
    """The feed over ZeroMQ: a DEALER socket to a :class:`~magister.sync.server.CurriculumServer`.

    The socket is created on first use, in the process that uses the client (pickled to a worker, only the
    address and options travel). Arguments as for :class:`TaskFeed`, and:

    Args:
        address: The server's address (``server.address``).
        curve_server_key: The server's CURVE public key, when it uses encryption.
        curve_public_key: This client's CURVE public key (an ephemeral pair when both are omitted).
        curve_secret_key: This client's CURVE secret key.
    """

    def __init__(
        self,
        address: str,
        *,
        prefetch: int = DEFAULT_PREFETCH,
        timeout: float = DEFAULT_TIMEOUT,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        fallback_task_space: TaskSpace | None = None,
        curve_server_key: bytes | str | None = None,
        curve_public_key: bytes | str | None = None,
        curve_secret_key: bytes | str | None = None,
        close_timeout: float = 2.0,
        update_batch: int = DEFAULT_UPDATE_BATCH,
        max_update_delay: float = DEFAULT_MAX_UPDATE_DELAY,
        name: str = "",
        task_space: TaskSpace | None = None,
        stream: int | None = None,
    ) -> None:
        if not isinstance(address, str) or "://" not in address:
            raise ValueError(
                f"address must be a str like 'ipc:///path' or 'tcp://host:port', got {address!r}"
            )
        super().__init__(
            ZmqTransport,
            {},
            address=address,
            prefetch=prefetch,
            timeout=timeout,
            strip_keys=strip_keys,
            send_obs=send_obs,
            send_infos=send_infos,
            fallback_task_space=fallback_task_space,
            close_timeout=close_timeout,
            update_batch=update_batch,
            max_update_delay=max_update_delay,
            name=name,
            task_space=task_space,
            stream=stream,
        )
        self._transport_options = {
            "address": address,
            "timeout": self.timeout,
            "close_timeout": self.close_timeout,
            "curve": (curve_server_key, curve_public_key, curve_secret_key),
        }


class RayClient(TaskFeed):
    """The feed over Ray: calls to a curriculum actor (see :mod:`magister.sync.ray_backend`).

    The actor is looked up on first use, in the process that uses the client. If that process is not
    connected to Ray, it connects with ``ray.init(address=ray_address or "auto")``. A process *forked* from
    a Ray worker or driver cannot use Ray (its connection is the parent's): build such envs in Ray workers,
    or use the ZeroMQ backend.

    An actor call costs far more than a socket message (a few hundred µs of CPU on each side), so the
    defaults hold more (``prefetch`` and ``update_batch`` 32), and the feed asks for tasks only when it
    has none left ready or on the way, for as many as it plays in ``max_update_delay`` seconds; a large
    step update (observations, 64 KB or more) goes out at once, taking the held updates along. Arguments
    as for :class:`TaskFeed`, and:

    Args:
        address: ``"ray://<name>"`` or ``"ray://<namespace>/<name>"`` (``server.address``).
        max_pending_updates: Calls in flight before the client waits for the actor (back-pressure).
        ray_address: Cluster address for ``ray.init`` when this process is not connected to Ray.
        curve_server_key: Not supported (ZeroMQ only); given, it raises ``ValueError``.

    Raises:
        ImportError: Ray is not installed.
    """

    def __init__(
        self,
        address: str,
        *,
        prefetch: int = DEFAULT_RAY_PREFETCH,
        timeout: float = DEFAULT_TIMEOUT,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        fallback_task_space: TaskSpace | None = None,
        close_timeout: float = 2.0,
        max_pending_updates: int = DEFAULT_MAX_PENDING,
        update_batch: int = DEFAULT_RAY_UPDATE_BATCH,
        max_update_delay: float = DEFAULT_MAX_UPDATE_DELAY,
        name: str = "",
        ray_address: str | None = None,
        curve_server_key: bytes | str | None = None,
        task_space: TaskSpace | None = None,
        stream: int | None = None,
    ) -> None:
        from .transports.ray_actor import RayTransport, parse_ray_address  # Ray is optional

        self.actor_name, self.namespace = parse_ray_address(address)
        if curve_server_key is not None:
            raise ValueError(
                "curve_server_key applies to ZeroMQ tcp:// addresses; the Ray backend travels over Ray's own "
                "transport (secure the Ray cluster instead)"
            )
        mp = max_pending_updates
        if isinstance(mp, bool) or not isinstance(mp, int) or mp < 1:
            raise ValueError(f"max_pending_updates must be a positive int, got {max_pending_updates!r}")
        super().__init__(
            RayTransport,
            {},
            address=address,
            prefetch=prefetch,
            timeout=timeout,
            strip_keys=strip_keys,
            send_obs=send_obs,
            send_infos=send_infos,
            fallback_task_space=fallback_task_space,
            close_timeout=close_timeout,
            update_batch=update_batch,
            max_update_delay=max_update_delay,
            name=name,
            task_space=task_space,
            stream=stream,
        )
        self.max_pending_updates = mp
        self.ray_address = ray_address
        self._transport_options = {
            "address": address,
            "timeout": self.timeout,
            "max_pending": mp,
            "ray_address": ray_address,
        }

    @property
    def actor_description(self) -> str:
        """``"Ray actor '<name>' in namespace '<ns>'"``, as used in error messages."""
        where = f" in namespace {self.namespace!r}" if self.namespace else ""
        return f"Ray actor {self.actor_name!r}{where}"

    @property
    def request_size(self) -> int:
        """Tasks the client asks for in its next request: as many as the env plays in
        ``max_update_delay`` seconds (by its recent episode rate; 1 until that is known), at least 1 and at
        most ``prefetch`` (``prefetch`` itself when ``max_update_delay`` is infinite)."""
        return self._request_size()


_local_cores: dict[int, tuple[Any, SyncCore]] = {}
_local_lock = threading.Lock()


def _core_for(curriculum: Curriculum) -> SyncCore:
    """One :class:`SyncCore` per curriculum object, so in-process envs share its lock and accounting."""
    if curriculum.home_pid != os.getpid():
        raise RuntimeError(
            f"a {type(curriculum).__name__} created in process {curriculum.home_pid} was given to a sync "
            f"wrapper in process {os.getpid()} (a forked or spawned worker): its updates would go to this "
            "process's copy, never to the learner's curriculum. Serve it with magister.serve(curriculum) and "
            "pass server.address (or the server) to the wrappers"
        )
    with _local_lock:
        entry = _local_cores.get(id(curriculum))
        if entry is not None and entry[0]() is curriculum:
            core = entry[1]
            if core.pid != os.getpid():
                raise RuntimeError(
                    "a Curriculum object was used by a sync wrapper in a forked worker process: its updates "
                    "would go to a copy of the curriculum. Serve it with magister.sync.server.serve() and "
                    "pass server.address to the wrappers"
                )
            return core
        core = SyncCore(curriculum)
        key = id(curriculum)
        ref = weakref.ref(curriculum, functools.partial(_forget_core, key, _local_cores))
        _local_cores[key] = (ref, core)
        return core


def _forget_core(key: int, cores: dict, ref: Any) -> None:
    """Weakref callback: drop the core of a curriculum that no longer exists (not a newer one's)."""
    entry = cores.get(key)
    if entry is not None and entry[0] is ref:
        cores.pop(key, None)


class LocalClient(TaskFeed):
    """The feed in-process: calls the curriculum's core directly (under its lock), no sockets; it registers
    when made (a refusal raises :class:`SyncError`) and holds nothing.

    Args:
        core: The :class:`~magister.sync.server.SyncCore` to feed (a server's ``core``, or one made for a
            bare curriculum by :func:`connect`).
        prefetch: Tasks asked for at once when none is ready (default 0, i.e. one: in-process sampling is
            cheap and always fresh).

    ``strip_keys``, ``send_obs``, ``send_infos``, ``task_space`` and ``stream`` are as for
    :class:`TaskFeed`.
    """

    def __init__(
        self,
        core: SyncCore,
        *,
        prefetch: int = 0,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        task_space: TaskSpace | None = None,
        stream: int | None = None,
    ) -> None:
        super().__init__(
            InProcessTransport,
            {"core": core},
            address=f"in-process:{type(core.curriculum).__name__}",
            prefetch=prefetch,
            strip_keys=strip_keys,
            send_obs=send_obs,
            send_infos=send_infos,
            update_batch=1,  # nothing held
            max_update_delay=math.inf,  # (so that a request asks for `prefetch` tasks)
            task_space=task_space,
            stream=stream,
        )
        self.core = core
        self._ensure()

    def __repr__(self) -> str:
        return f"LocalClient({type(self.core.curriculum).__name__}, env_id={self.env_id})"


def feed_class(address: str) -> type[TaskFeed]:
    """The feed class for a server address: :class:`RayClient` for a ``"ray://..."`` one (the Ray
    transport, an optional dependency, is imported now: ``ImportError`` without ``ray``),
    :class:`CurriculumClient` for any other."""
    if address.startswith("ray://"):
        from .transports import ray_actor  # noqa: F401  (fails here without ray)

        return RayClient
    return CurriculumClient


def connect(
    source: str | Curriculum | CurriculumServer | ServerHandle | TaskFeed, **options: Any
) -> TaskFeed:
    """The feed for ``source``, its transport picked from it.

    * an address str: ``"ray://..."`` (from :func:`magister.sync.ray_backend.serve_ray`) gives a
      :class:`RayClient`, any other (``tcp://``, ``ipc://``) a :class:`CurriculumClient`;
    * a :class:`ServerHandle` (what a server sent to another process becomes): its address;
    * a :class:`~magister.curricula.base.Curriculum`, or a :class:`CurriculumServer` of this process: a
      :class:`LocalClient` (in-process). A server used from a process other than the one that created it
      (a forked worker) is reached through its address, so its updates are never applied to a stale copy;
    * a :class:`TaskFeed`: itself.

    Raises:
        TypeError: ``source`` is none of these.
    """
    shared = ("strip_keys", "send_obs", "send_infos", "task_space", "stream")
    local_opts = {k: options.pop(k) for k in shared if k in options}
    if isinstance(source, TaskFeed):
        return source
    if isinstance(source, ServerHandle):  # a server sent here from the process that serves it
        source = source.address
    if isinstance(source, str):
        cls = feed_class(source)
        if cls is not CurriculumClient and options.pop("curve_server_key", None) is not None:
            raise ValueError("curve_server_key applies to ZeroMQ tcp:// addresses, not to ray:// ones")
        return cls(source, **local_opts, **options)
    if isinstance(source, CurriculumServer) and os.getpid() == source._pid:
        return LocalClient(source.core, **local_opts, prefetch=options.get("prefetch") or 0)
    if isinstance(source, ServedCurriculum):  # another process's server, or one in a Ray actor
        return connect(source.address, **local_opts, **options)
    if isinstance(source, Curriculum):
        return LocalClient(_core_for(source), **local_opts, prefetch=options.get("prefetch") or 0)
    raise TypeError(
        "source must be a server address (str), a Curriculum, a server (serve() or serve_ray()) or its "
        f"ServerHandle, got {type(source).__name__}"
    )
