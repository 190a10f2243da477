"""The environment side of the sync layer: :class:`TaskFeed`, one env's feed of tasks and feedback over
a transport (:mod:`magister.sync.transports`); :func:`connect` picks the transport from the source, and
:class:`CurriculumClient`, :class:`RayClient` and :class:`LocalClient` name the feed over each one.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from ..curricula.base import Curriculum
from ..task_spaces.base import EncodedTask, TaskSpace
from . import protocol as P
from .core import ServedCurriculum, ServerHandle, SyncCore
from .options import FeedOptions
from .security import check_address
from .steps import StepBuffer, observation_bytes
from .transports.base import ServerUnavailableError, SyncError, Transport
from .transports.inprocess import InProcessTransport, local_core
from .transports.zeromq import ZmqTransport

logger = logging.getLogger(__name__)

__all__ = ["Assignment", "CurriculumClient", "DEFAULT_PREFETCH", "LocalClient", "RayClient",
           "ServerUnavailableError", "SyncError", "TaskFeed", "checked_source", "connect"]

#: Most tasks an env keeps ready over sockets (:class:`~magister.sync.transports.zeromq.ZmqTransport`'s).
DEFAULT_PREFETCH = ZmqTransport.prefetch
#: The clock of the feeds' time bounds (a module attribute, so tests can replace it).
_now = time.monotonic
#: Whether feeds register with the per-process background flusher (tests with a fake clock turn it off).
_background_flush = True
#: This process's id, kept current across ``os.fork`` by an at-fork hook.
_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _pid, _flusher
    _pid = os.getpid()
    _flusher = _Flusher()  # the parent's thread does not exist here


os.register_at_fork(after_in_child=_after_fork_in_child)


class Assignment(NamedTuple):
    """A task handed to one env: its lease id (``ENV_TASK``: not from the curriculum side) and the fields of
    :class:`~magister.curricula.base.TaskSample`."""

    task_id: int
    task: EncodedTask
    train: bool = True
    control: bool = False
    variant: Any = None


class _Held:
    """Updates waiting for the next send (of one :class:`~magister.sync.protocol.Report`), in order; when
    the oldest must go out (``math.inf``: none held). (An update asking for tasks goes out at once.)"""

    def __init__(self) -> None:
        self.updates: list[P.Update] = []
        self.send_by = math.inf


class _Pace:
    """The env's pace: the running mean of the seconds between two tasks (``None`` until known)."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.mean: float | None = None

    def tick(self, now: float) -> None:
        if self.last is not None:
            dt = now - self.last
            self.mean = dt if self.mean is None else 0.75 * self.mean + 0.25 * dt
        self.last = now


_PROCESS_STATE = ("_pid", "transport", "_buffer", "_steps", "_held", "_lock", "_issued", "_pace")


class TaskFeed:
    """Where an env's tasks come from and where its feedback goes, over a :class:`Transport`.

    It keeps tasks ready, holds updates for a moment and sends them together (a per-process background
    thread sends what is due while the env is idle), batches step records, counts what it sends and drops
    (``stats``), reconnects after a fork and returns unused tasks at close; how many and how long is set by
    its :class:`~magister.sync.options.FeedOptions`, what differs between transports is decided by the
    :class:`~magister.sync.transports.base.Transport`. One env thread per feed; it pickles to worker
    processes (the transport is made on first use, in the process that uses it).

    Args:
        transport: The transport class, made as ``transport(target, options)`` where the feed is used.
        target: Where the curriculum is: an address, or a :class:`~magister.sync.core.SyncCore` in-process.
        options: The feed's settings (:class:`~magister.sync.options.FeedOptions`); ``overrides``: some of
            its fields, by name.
        task_space: The env's task space: its fingerprint is checked against the curriculum's when the
            feed connects (a mismatch raises :class:`SyncError` naming both spaces).
        stream: The env's random stream (the seed of its first seeded reset): the curriculum side samples
            this env's tasks from a generator of its own; ``None``: the curriculum's shared one.
    """

    def __init__(self, transport: type[Transport], target: str | SyncCore, options: FeedOptions | None = None,
                 *, task_space: TaskSpace | None = None, stream: int | None = None, **overrides: Any) -> None:
        opts = FeedOptions.of(options, **overrides)
        self.options = FeedOptions.of(  # the transport's defaults where none is set
            opts, prefetch=transport.prefetch if opts.prefetch is None else opts.prefetch,
            update_batch=transport.update_batch if opts.update_batch is None else opts.update_batch)
        if task_space is not None and not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a TaskSpace or None, got {type(task_space).__name__}")
        if stream is not None and (
            isinstance(stream, (bool, np.bool_)) or not isinstance(stream, (int, np.integer)) or stream < 0
        ):
            raise ValueError(f"stream must be an int >= 0 (a reset seed) or None, got {stream!r}")
        self.task_space = task_space
        self.stream = None if stream is None else int(stream) % (1 << 63)
        self.target = target
        self._transport_class = transport
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        """The state that belongs to one process (fresh after a fork or an unpickling)."""
        self._pid: int | None = None
        #: The transport of this process (``None`` until the feed connects, and once it closed).
        self.transport: Transport | None = None
        self._welcome: P.Welcome | None = None  # (its env id and server token)
        self._buffer: deque[Assignment] = deque()
        self._outstanding = 0  # tasks asked for, not yet received
        self._steps: StepBuffer | None = None  # (the welcome's, when the curriculum wants step updates)
        self._fallback = self._closed = self._closing = False
        self._refusal: str | None = None
        self._held = _Held()
        self._pace = _Pace()
        self._lock = threading.RLock()  # the env's thread and the background flusher
        self._issued: dict[int, Assignment] = {}  # tasks handed to the env and not yet reported, by id
        keys = ("tasks_received", "updates_sent", "updates_dropped", "errors_received", "send_waits",
                "rejoins", "episodes_reported", self._transport_class.unit)
        self.stats = dict.fromkeys(keys, 0)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _PROCESS_STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    @property
    def address(self) -> str:
        """Where the curriculum is (for messages)."""
        target = self.target
        return target if isinstance(target, str) else f"in-process:{type(target.curriculum).__name__}"

    @property
    def env_id(self) -> int | None:
        """The id the curriculum side gave this env (``None`` before the feed connects)."""
        return None if self._welcome is None else self._welcome.env_id

    @property
    def prefetch(self) -> int:
        """Most tasks kept ready (``FeedOptions.prefetch``, or the transport's default)."""
        return self.options.prefetch or 0  # (never None: set in __init__)

    @property
    def holds_updates(self) -> bool:
        """Whether updates are held for a while (and sent together)."""
        return (self.options.update_batch or 1) > 1 and self.options.max_update_delay > 0

    @property
    def held_updates(self) -> int:
        """Updates waiting for the next send."""
        return len(self._held.updates)

    @property
    def requires_step_updates(self) -> bool:
        """Whether the curriculum wants step updates (``False`` before the feed connects)."""
        return self._steps is not None

    def _link(self) -> Transport:
        """The transport of this process (:class:`SyncError` when the feed is not connected)."""
        if self.transport is None:
            raise SyncError(f"the feed to {self.address} is not connected")
        return self.transport

    # -- connection ---------------------------------------------------------------------------------
    def _hello(self, rejoin: int | None = None, lost: int = 0) -> P.Hello:
        space = self.task_space.fingerprint() if self.task_space is not None else ""
        ready = (a.task_id for a in self._buffer if a.task_id != P.ENV_TASK)
        holds = () if rejoin is None else (*self._issued, *ready)
        server = "" if rejoin is None else cast(P.Welcome, self._welcome).server_token
        return P.Hello(os.getpid(), self.options.name, space, self.stream, rejoin, lost, holds,
                       self.stats["episodes_reported"], server)

    def _ensure(self) -> bool:
        """Connect in this process if needed; False on the local fallback."""
        if self._pid != _pid and self._pid is not None:  # forked: the parent's transport is not ours
            if self.transport is not None:
                self.transport.abandon()
            logger.debug("feed: process forked (pid %s -> %s); reconnecting", self._pid, os.getpid())
            self._reset_process_state()
        if self._closed:
            raise SyncError("this client is closed")
        if self._fallback:
            return False
        if self.transport is not None:
            return True
        self._pid = _pid
        transport = self.transport = self._transport_class(self.target, self.options)
        try:
            welcome = transport.open(self._hello())
        except ServerUnavailableError as exc:
            return self._go_fallback("a welcome", str(exc))
        except BaseException:
            self.transport = None
            transport.close(wait=False)
            raise
        self._take_welcome(welcome)  # (the first reset asks for tasks: Transport.ask_when_empty)
        if _background_flush and self._flush_period < math.inf:
            _flusher.add(self)
        return True

    def _rejoin(self) -> None:
        """Register again, under the same identity, with a curriculum side that no longer knows this env.
        Undelivered updates go along with their lease ids (each applied once, or counted); tasks not yet
        started are dropped unless the server resumed their leases."""
        transport = self._link()
        old = self.env_id
        logger.warning("%s no longer knows env %s (restarted, or it declared the env gone): registering "
                       "again", transport.peer, old)
        self._flush_steps()  # everything of the old registration into the transport's resend queue
        self._send_held()
        self._outstanding = 0  # the old registration's requests were dropped with it
        lost = transport.lost
        if lost:
            logger.warning("env %s: %d updates could not be kept while %s was away (more than the resend "
                           "queue holds); reported to it", old, lost, transport.peer)
            self.stats["updates_dropped"] += lost
        welcome = transport.rejoin(self._hello(old, lost))
        self.stats["rejoins"] += 1
        if not welcome.resumed:  # (resumed: a server restored from a checkpoint kept its leases)
            self._buffer.clear()  # leases abandoned with the old registration, or unknown to a new server
        self._take_welcome(welcome)
        need = self.request_size + 1 - len(self._buffer)
        if need > 0 and not self._closing:  # what the old registration was asked for and never sent
            self._send_held(need)

    def _take_welcome(self, welcome: P.Welcome) -> None:
        """Adopt the welcome's settings: env id, whether to record steps, the step buffer."""
        opts = self.options
        self._welcome = welcome
        self._steps = StepBuffer(
            opts.send_obs and welcome.step_obs, opts.send_infos and welcome.step_infos,
            frozenset(opts.strip_keys), welcome.step_batch_size, self._flush_steps,
        ) if welcome.requires_step_updates else None

    def _go_fallback(self, what: str, reason: str | None = None) -> bool:
        """No answer while waiting for ``what``: raise, or sample locally from now on (returns False)."""
        if reason is None:
            reason = self._link().no_reply(what)
        if self.options.fallback_task_space is None:
            raise ServerUnavailableError(reason + self._transport_class.hint)
        logger.warning("%s; sampling tasks locally from %r from now on (feedback is dropped)", reason,
                       self.options.fallback_task_space)
        self._fallback = True
        self._steps = None  # feedback is dropped from now on: do not even buffer it
        self.stats["updates_dropped"] += len(self._held.updates)
        self._held = _Held()
        self._outstanding = 0
        if self.transport is not None:
            self.transport.close(wait=False)
            self.transport = None
        return False

    def _active(self) -> bool:
        """Whether updates can be delivered now (connected in this process, no fallback)."""
        return self.transport is not None and self._pid == _pid  # (the fallback drops the transport)

    # -- sending ------------------------------------------------------------------------------------
    def _send(self, items: list[P.Message]) -> bool:
        """One send of ``items`` (its reports' updates and task requests counted)."""
        transport = self._link()
        reports = [m for m in items if type(m) is P.Report]
        updates, asked = sum(len(r.updates) for r in reports), sum(r.request for r in reports)
        try:
            transport.send(items)
        except ServerUnavailableError as exc:
            self.stats["updates_dropped"] += updates
            return self._go_fallback("room to send", str(exc))
        finally:
            self.stats["send_waits"] = transport.waits
        self.stats["updates_sent"] += updates
        self.stats[transport.unit] += 1
        self._outstanding += asked
        return True

    def _deliver(self, update: P.Update, request: int = 0) -> None:
        """Hold an update for the next :class:`~magister.sync.protocol.Report`; send what is held when due:
        at once unless the feed holds updates, else once ``update_batch`` are held, the oldest has waited
        ``max_update_delay``, one asks for tasks, or step records carry large observations."""
        with self._lock:
            now = _now()
            held = self._held
            if not held.updates:
                held.send_by = now + self.options.max_update_delay
            held.updates.append(update)
            large = type(update) is P.Steps and observation_bytes(update.obs) >= P.DEFAULT_OOB_THRESHOLD
            full = len(held.updates) >= (self.options.update_batch or 1) or now >= held.send_by
            if not self.holds_updates or request or large or full:  # (the feed is active: see callers)
                self._send(self._take_held(request))

    def _take_held(self, request: int = 0) -> list[P.Message]:
        """The held updates as one report asking for ``request`` more tasks (none: nothing held nor asked
        for); clears them."""
        held, self._held = self._held, _Held()
        if not held.updates and request <= 0:
            return []
        return [P.Report(cast(int, self.env_id), tuple(held.updates), request)]  # (a registered feed's)

    def _send_held(self, request: int | None = 0) -> None:
        """Send the held updates, asking for ``request`` more tasks (``None``: a transport's answer to send
        nothing)."""
        if request is None or not self._active() or self.env_id is None:
            return
        if items := self._take_held(request):
            self._send(items)

    @property
    def _flush_period(self) -> float:
        """Most seconds between two looks of the background flusher (``math.inf``: it need not look)."""
        delay = self.options.max_update_delay if self.holds_updates else math.inf
        transport = self.transport
        return min(delay, (transport.heartbeat if transport is not None else 0.0) or math.inf)

    def _send_due(self) -> None:
        """From the background flusher: send the held updates if due, or a heartbeat after ``heartbeat``
        seconds of silence (a feed busy in the env's thread, or waiting for room, is left to it)."""
        transport = self.transport
        if transport is None or not transport.can_send_now() or not self._lock.acquire(blocking=False):
            return
        try:
            if self._pid != _pid or self.transport is not transport:
                return
            if self._held.updates and _now() >= self._held.send_by:
                self._send_held()
            elif not self._closing and 0 < transport.heartbeat <= time.monotonic() - transport.last_send:
                transport.ping()
        finally:
            self._lock.release()

    # -- receiving ----------------------------------------------------------------------------------
    def _receive(self, timeout: float) -> list[P.Message]:
        """Take in the replies that arrived (waiting at most ``timeout``); returns them."""
        msgs = self._link().receive(timeout)
        for msg in msgs:
            if isinstance(msg, P.Tasks):
                n = len(msg.task_ids)
                self._buffer.extend(
                    map(Assignment, msg.task_ids, msg.tasks, msg.train, msg.control, msg.variants)
                )
                self._outstanding = max(0, self._outstanding - n)
                self.stats["tasks_received"] += n
            elif isinstance(msg, P.Error):
                if msg.code == "unknown_env":  # (also while closing: its last reports go along)
                    self._rejoin()
                    continue
                self.stats["errors_received"] += 1
                if msg.code == "version":
                    raise P.ProtocolVersionError(msg.message)
                if msg.code in ("sample_failed", "bad_request") and self._outstanding:
                    self._outstanding = 0
                    self._refusal = f"{msg.code}: {msg.message}"
                logger.error("%s refused a message from env %s (%s): %s", self._link().peer, self.env_id,
                             msg.code, msg.message)
        return msgs

    def _drain(self) -> None:
        """Take in every reply that already arrived."""
        while self.transport is not None and self._receive(0):
            pass

    def _wait_for_tasks(self) -> bool:
        """Wait for a task: at most ``timeout`` while the curriculum side answers, longer while it is away
        (:meth:`Transport.keep_waiting`), and ``timeout`` again from a registration made meanwhile (its
        request is new); False when the fallback took over."""
        start = time.monotonic()
        deadline = start + self.options.timeout
        while not self._buffer:
            if self._refusal is not None:
                err, self._refusal = self._refusal, None
                raise SyncError(f"{self._link().peer} refused (waiting for tasks): {err}")
            left = deadline - time.monotonic()
            if left <= 0:
                if not self._link().keep_waiting(start):
                    what = "tasks"
                    if time.monotonic() - start > self.options.timeout:
                        what += f" (kept trying for reconnect_timeout={self.options.reconnect_timeout:g}s)"
                    return self._go_fallback(what)
                deadline = time.monotonic() + self.options.timeout
                continue
            rejoins = self.stats["rejoins"]
            try:
                self._receive(left)
            except ServerUnavailableError as exc:
                return self._go_fallback("tasks", str(exc))
            if self.stats["rejoins"] != rejoins:
                deadline = time.monotonic() + self.options.timeout
        return True

    # -- tasks --------------------------------------------------------------------------------------
    @property
    def request_size(self) -> int:
        """Tasks to keep ready beyond the one the next reset takes: as many as the env plays in
        ``max_update_delay`` seconds at its recent pace (1 until known), within ``[1, prefetch]`` (0 with
        ``prefetch=0``)."""
        prefetch, delay, pace = self.prefetch, self.options.max_update_delay, self._pace.mean
        if prefetch <= 1 or (pace is None and delay < math.inf):
            return min(prefetch, 1)
        if delay == math.inf or pace <= 0.0:
            return prefetch
        return max(1, min(prefetch, int(delay / pace)))

    def _refill_request(self) -> int:
        """Tasks an episode (or completed task) update asks for, once connected (:meth:`Transport.refill`)."""
        ready = len(self._buffer) + self._outstanding  # or on their way
        return self._link().refill(ready, self.request_size, self.holds_updates)

    def next_task(self) -> Assignment:
        """The next task: from the prefetch buffer, or requested and awaited (at most ``timeout``)."""
        if not (self._active() or self._ensure()):
            (task,) = cast(TaskSpace, self.options.fallback_task_space).sample_encoded(1)  # (the fallback's)
            return Assignment(P.ENV_TASK, task, True)
        transport = self._link()
        with self._lock:
            now = _now()
            self._pace.tick(now)
            holding = self.holds_updates
            if transport.polls(self._outstanding > 0, holding):
                self._drain()  # (a feed holding updates reads error replies with the next tasks)
            if not self._buffer:
                self._send_held(transport.ask_when_empty(self._outstanding > 0, self.request_size or 1))
                if not self._wait_for_tasks():
                    return self.next_task()  # the fallback took over
            a = self._buffer.popleft()
            if a.task_id != P.ENV_TASK:
                self._issued[a.task_id] = a
            ready, due = len(self._buffer) + self._outstanding, now >= self._held.send_by
            self._send_held(transport.top_up(ready, self.request_size, holding, due))
            return a

    def give_back(self, assignment: Assignment) -> None:
        """Return an unused task: :meth:`next_task` hands it out again (or :meth:`close` returns it)."""
        if assignment.task_id != P.ENV_TASK and self._active():
            with self._lock:
                self._issued.pop(assignment.task_id, None)
                self._buffer.appendleft(assignment)

    # -- feedback -----------------------------------------------------------------------------------
    def step_recorder(self) -> Callable[..., None] | None:
        """What records one step, ``(assignment, obs, reward, terminated, truncated, info, progress)``, and
        sends full batches (``None``: the curriculum wants no step updates)."""
        return None if self._steps is None else self._steps.add

    def flush(self) -> None:
        """Send buffered step records and every held update now."""
        with self._lock:
            self._flush_steps()
            self._send_held()

    def _flush_steps(self) -> None:
        """Deliver the buffered step records as one update."""
        steps = self._steps
        if steps is None or not len(steps):
            return
        if not self._active():
            steps.clear()
            return
        try:
            msg = steps.message()
            if msg.obs is not None or msg.infos is not None:
                self._link().check_travel(msg._fields())  # what cannot travel raises here, in the env's step
            self._deliver(msg)
        except TypeError as exc:
            raise TypeError(
                f"{exc}. Remove such entries from observations/infos with strip_keys=[...] or "
                "send_obs=False / send_infos=False"
            ) from None
        if self._active() and self._link().polls(False, self.holds_updates):
            with self._lock:
                self._drain()  # error replies and tasks that arrived meanwhile

    def record_episode(self, assignment: Assignment, episode_return: float, length: int, progress: float,
                       ended: bool = True, extras: dict | None = None, refill: bool = True,
                       agents: Sequence[tuple[str, float, int, float]] = ()) -> None:
        """An episode on ``assignment`` finished (``ended=False``: abandoned by an early reset); ``refill``:
        the env resets next, so the update may ask for tasks; ``agents``: for a multi-agent episode reported
        per agent, one ``(agent, return, length, progress)`` row each (each reaches the curriculum as an
        episode on ``assignment``, with its flags). ``extras`` that cannot travel raise here."""
        self._flush_steps()  # the buffered step records go first (the flush may find the server gone)
        if not self._active():
            return
        if extras:
            self._link().check_travel(extras)  # raises TypeError naming a value that cannot travel
        self._issued.pop(assignment.task_id, None)
        request = self._refill_request() if refill else 0
        parts = tuple(P.AgentPart(str(a), float(r), int(n), float(p)) for a, r, n, p in agents)
        end = P.EpisodeEnd(assignment.task_id, assignment.task, float(episode_return), int(length),
                           float(progress), bool(ended), dict(extras) if extras else {}, parts)
        self._deliver(end, request)
        self.stats["episodes_reported"] += max(1, len(parts))

    def record_progress(self, assignment: Assignment, progress: float, done: bool = False) -> None:
        """Progress on ``assignment`` mid-episode; ``done`` acknowledges the task as consumed (and may ask
        for the next one)."""
        self._flush_steps()  # (as in record_episode)
        if not self._active():
            return
        if done:
            self._issued.pop(assignment.task_id, None)
        request = self._refill_request() if done else 0
        self._deliver(P.Progress(assignment.task_id, assignment.task, float(progress), bool(done)), request)

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush, wait for tasks on their way, return unused ones with the goodbye and wait for its ack
        (all within ``close_timeout``; a curriculum side that no longer knows the env is joined again first,
        so that the last reports are applied or counted). Idempotent."""
        if self._closed or self._pid != _pid:
            self._closed = True
            return
        _flusher.remove(self)
        with self._lock:
            deadline = time.monotonic() + self.options.close_timeout  # one bound for the whole close
            self._closing = True
            acked = False
            try:
                if self._active() and self.env_id is not None:
                    self._flush_steps()
                    if not self._link().goodbye_carries_held:
                        self._send_held()
                    while self._outstanding and self._active() and time.monotonic() < deadline:
                        self._receive(deadline - time.monotonic())
                    acked = self._active() and self._say_goodbye(deadline)
            except (ServerUnavailableError, SyncError) as exc:  # a server gone must not fail the close
                logger.warning("client env %s: closing without the server: %s", self.env_id, exc)
            finally:
                if self.transport is not None:
                    # everything before the goodbye was acknowledged: nothing left worth lingering for;
                    # otherwise queued messages may go out for what is left of the close timeout
                    linger = 0.0 if acked else max(0.0, deadline - time.monotonic())
                    self.transport.close(wait=not acked, linger=linger)
                    self.transport = None
                self._held = _Held()
                self._buffer.clear()
                self._closed = True

    def _say_goodbye(self, until: float) -> bool:
        """Return the unused tasks with the goodbye and wait for its ack until ``until`` (whether it came);
        said again after a rejoin (the old registration's goodbye is dropped with it)."""
        said = -1  # the count of rejoins when it was last said
        while self._active() and time.monotonic() < until:
            if said != self.stats["rejoins"]:
                said = self.stats["rejoins"]
                returned = tuple(a.task_id for a in self._buffer if a.task_id != P.ENV_TASK)
                if not self._send([*self._take_held(), P.Goodbye(cast(int, self.env_id), returned)]):
                    return False
            if any(isinstance(m, P.Goodbye) for m in self._receive(until - time.monotonic())):
                return True
        logger.warning("client env %s: no goodbye ack from %s", self.env_id, self.address)
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.address!r}, env_id={self.env_id})"


# -- the background flusher ------------------------------------------------------------------------


class _Flusher:
    """One daemon thread per process sending what feeds held too long (and heartbeats) while their env
    does not step. Feeds are held by weak reference; the thread runs while there are any."""

    def __init__(self) -> None:
        self.feeds: weakref.WeakSet[TaskFeed] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.period = math.inf  # the shortest period of the feeds at the last look

    def add(self, feed: TaskFeed) -> None:
        """Watch ``feed``; the thread is woken only if the feed needs a look sooner than the others (so that
        adding many feeds costs each one, not each one a pass over all)."""
        with self.lock:
            self.feeds.add(feed)
            weakref.finalize(feed, self._collected)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="magister-update-flusher", daemon=True)
                self.thread.start()
            sooner = feed._flush_period < self.period
        if sooner:
            self.wake.set()

    def remove(self, feed: TaskFeed) -> None:
        """Forget ``feed``; the last one to go stops the thread and waits for it (bounded)."""
        with self.lock:
            self.feeds.discard(feed)
            thread = None if self.feeds else self.thread
        if thread is not None and thread is not threading.current_thread():
            self.wake.set()
            thread.join(timeout=2.0)

    def _collected(self) -> None:
        """A feed was collected: it may have been the last one (then the thread stops)."""
        if len(self.feeds) <= 1:
            self.wake.set()

    def _run(self) -> None:
        while True:
            with self.lock:
                if not self.feeds:
                    self.thread = None
                    return
            self.wake.wait(self._tick())
            self.wake.clear()

    def _tick(self) -> float | None:
        """Send what is due; returns the next sleep (its own frame, so no feed stays referenced)."""
        with self.lock:
            feeds = list(self.feeds)
            self.period = min((feed._flush_period for feed in feeds), default=math.inf)
        for feed in feeds:
            try:
                feed._send_due()
            except Exception:  # the thread must not die; the env thread meets the same error itself
                logger.warning("client env %s: background send failed", feed.env_id, exc_info=True)
        return _sleep(feeds)


def _sleep(feeds: list[TaskFeed]) -> float | None:
    """Seconds until the oldest held update of ``feeds`` is due, within a quarter and all of their shortest
    period (``None``: none needs a look, sleep until woken)."""
    period = max(4e-3, min((feed._flush_period for feed in feeds), default=math.inf))
    if period == math.inf:
        return None
    due = min((feed._held.send_by for feed in feeds), default=math.inf) - _now()  # (inf: none held)
    return max(min(due, period), period / 4)


_flusher = _Flusher()  # (a new one in a forked child)


# -- the feed over each transport: TaskFeed's arguments after the first --------------------------------


class CurriculumClient(TaskFeed):
    """The feed over ZeroMQ to the :class:`~magister.sync.zmq_server.CurriculumServer` at ``address`` (a
    malformed address raises ``ValueError``); the other arguments are :class:`TaskFeed`'s."""

    def __init__(self, address: str, options: FeedOptions | None = None, **kwargs: Any) -> None:
        if _ray(address):
            raise ValueError(f"{address!r} is a Ray address: use RayClient or connect()")
        super().__init__(ZmqTransport, address, options, **kwargs)


class RayClient(TaskFeed):
    """The feed over Ray to the curriculum actor at ``address`` (``"ray://[<namespace>/]<name>"``, see
    :mod:`magister.sync.ray_server`); the other arguments are :class:`TaskFeed`'s, but not
    ``curve_server_key`` (secure the Ray cluster instead). A process *forked* from a Ray worker cannot use
    Ray."""

    def __init__(self, address: str, options: FeedOptions | None = None, **kwargs: Any) -> None:
        from .transports.ray import RayTransport, parse_ray_address  # Ray is optional

        self.actor_name, self.namespace = parse_ray_address(address)
        super().__init__(RayTransport, address, options, **kwargs)
        if self.options.curve_server_key is not None:
            raise ValueError(
                "curve_server_key applies to ZeroMQ tcp:// addresses; the Ray backend travels over Ray's own "
                "transport (secure the Ray cluster instead)"
            )


class LocalClient(TaskFeed):
    """The feed in-process: calls the curriculum's ``core`` directly, no sockets; it registers when made (a
    refusal raises :class:`SyncError`) and holds nothing. The other arguments are :class:`TaskFeed`'s."""

    def __init__(self, core: SyncCore, options: FeedOptions | None = None, **kwargs: Any) -> None:
        # nothing is held in-process: a request asks for ``prefetch`` tasks, not for the env's pace
        super().__init__(InProcessTransport, core, options, **{**kwargs, "max_update_delay": math.inf})
        self.core = core
        self._ensure()


Source = str | Curriculum | ServedCurriculum | ServerHandle | TaskFeed


def _ray(address: str) -> bool:
    """Whether ``address`` is a Ray actor's (a malformed address raises ``ValueError``)."""
    return check_address(address).startswith("ray://")


def checked_source(source: Any) -> Source:
    """``source`` as :func:`connect` takes it: a :class:`ServerHandle` becomes its address; an address must
    be well formed (``ValueError`` naming the accepted forms), and a ``ray://`` one needs Ray (imported now:
    ``ImportError`` without it); ``TypeError`` for anything else."""
    if isinstance(source, ServerHandle):
        source = source.address
    if not isinstance(source, (str, Curriculum, ServedCurriculum, TaskFeed)):
        raise TypeError(
            "source must be a server address (str), a Curriculum, a server (serve() or serve_ray()) or its "
            f"ServerHandle, or a TaskFeed, got {type(source).__name__}"
        )
    if isinstance(source, str) and _ray(source):
        from .transports import ray  # noqa: F401  (ImportError without Ray)
    return source


def connect(source: Source, options: FeedOptions | None = None, *, task_space: TaskSpace | None = None,
            stream: int | None = None, **overrides: Any) -> TaskFeed:
    """The feed for ``source`` (see :func:`checked_source`): a :class:`RayClient` for a ``"ray://..."``
    address, a :class:`CurriculumClient` for another address or a :class:`ServerHandle`, a
    :class:`LocalClient` for a :class:`~magister.curricula.base.Curriculum` or a server of this process, a
    :class:`TaskFeed` itself (``TypeError`` for an unknown option)."""
    source = checked_source(source)
    if isinstance(source, TaskFeed):
        return source
    kwargs = {"task_space": task_space, "stream": stream, **overrides}
    if isinstance(source, ServedCurriculum):
        core = source.local_core()
        if core is not None:
            return LocalClient(core, options, **kwargs)
        source = source.address
    if isinstance(source, Curriculum):
        return LocalClient(local_core(source), options, **kwargs)
    return (RayClient if _ray(source) else CurriculumClient)(source, options, **kwargs)
