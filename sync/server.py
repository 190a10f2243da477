"""The curriculum side of the sync layer: a ZeroMQ ROUTER endpoint served by a background thread.

:func:`serve` wraps a :class:`~magister.curricula.base.Curriculum` in a :class:`CurriculumServer`. The
server binds a ROUTER socket (by default an ``ipc://`` socket file in a private 0700 temporary directory;
``tcp://host:port`` for workers on other machines, see :mod:`magister.sync.security`) and starts one
thread that

* answers :class:`~magister.sync.protocol.Hello` with the env's id and the server's settings,
* answers each :class:`~magister.sync.protocol.TaskRequest` by sampling on demand with
  :meth:`Curriculum.sample_tasks` and sending the tasks to the env that asked (and only to it),
* applies step, episode and progress updates to the curriculum (no reply unless one is refused).

Every call into the curriculum, from the thread or from the learner through the proxy methods
(:meth:`CurriculumServer.update_on_demand`, :meth:`~CurriculumServer.sample`,
:meth:`~CurriculumServer.metrics`, :meth:`~CurriculumServer.state_dict` ...), holds the one lock
``server.lock``, so the curriculum never sees two callers at once.

**Accounting.** Each task the server hands out gets a server-unique id; the env acknowledges which task each
episode used (with its episode update, or a progress update when the task completed mid-episode), and
returns unused prefetched tasks when it closes. Per env the server counts tasks sampled, sent, consumed,
returned and still in flight, updates received, applied and rejected, and malformed frames; they appear in
:meth:`CurriculumServer.metrics` as ``"sync/env<i>/<counter>"`` next to the curriculum's own metrics.
A worker that dies leaves its tasks "in flight": that is what was lost, and nothing else is.

**Episode extras.** An episode update may carry ``extras`` (e.g. per-agent returns from
:class:`~magister.env_wrappers.sync_wrappers.PettingZooSyncWrapper`); they are passed as ``extras=...`` to
curricula whose ``update_on_episode`` accepts that keyword, and not passed otherwise.

**Task metadata.** A :class:`~magister.curricula.base.TaskSample`'s ``control`` flag and ``variant`` travel
to the env as fields of :class:`~magister.sync.protocol.Tasks` and stay with the task's id in the server's
in-flight record. When an episode (or progress) update acknowledges that id, they are passed as
``control=...`` and ``variant=...`` to curricula whose ``update_on_episode`` (``update_task_progress``)
accepts those keywords; the env never sends them back, so it cannot mislabel them. Updates for tasks the
env chose itself (task id ``-1``) carry ``control=False, variant=None``.

**Faults.** Malformed or truncated frames, a wrong protocol version, updates naming tasks the env was never
given or tasks outside the task space, and non-finite rewards or progress are answered with an
:class:`~magister.sync.protocol.Error` and dropped; the curriculum is not touched and the thread keeps
serving.

>>> from magister.task_spaces.base import TaskSpace
>>> from magister.curricula.base import Curriculum
>>> class Three(TaskSpace):
...     num_tasks = 3
...     indexed = True
...     def sample(self): return int(self.rng.integers(3))
...     def contains(self, t): return t in (0, 1, 2)
...     def encode(self, t): return t
...     def decode(self, e):
...         if e not in (0, 1, 2): raise ValueError(e)
...         return e
>>> class Uniform(Curriculum):
...     def sample(self, k=1): return [int(t) for t in self.rng.integers(3, size=k)]
>>> with serve(Uniform(Three(), seed=0)) as server:
...     server.address.startswith("ipc://")
True
"""

from __future__ import annotations

import atexit
import inspect
import logging
import math
import operator
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import zmq

from ..curricula.base import Curriculum, StepBatch, TaskSample
from ..task_spaces.base import EncodedTask, TaskSpace, fingerprint_digest, task_key
from . import protocol as P
from .ratelimit import RateLimitedLogger
from .security import (
    AllowedClients,
    ClientAllowList,
    ZapAuthenticator,
    check_bind_address,
    configure_server_socket,
)

logger = logging.getLogger(__name__)

__all__ = [
    "SyncCore", "SyncRejected", "CurriculumServer", "ServedCurriculum", "ServerHandle", "serve", "EnvCounters"
]

#: Default number of steps a client batches into one step update.
DEFAULT_STEP_BATCH_SIZE = 64
#: Largest number of tasks one request may ask for.
MAX_TASKS_PER_REQUEST = 4096
#: Seconds between two log records of one kind of fault (the rest are counted, see
#: :class:`~magister.sync.ratelimit.RateLimitedLogger`): a peer sending garbage cannot flood the log.
LOG_INTERVAL = 10.0


_TASK, _TRAIN, _CONTROL, _VARIANT = (operator.attrgetter(f) for f in ("task", "train", "control", "variant"))


def _accepts(method: Any, name: str) -> bool:
    """Whether ``method`` takes the keyword ``name`` (or any keyword). The curriculum's public methods are
    wrapped with :func:`functools.wraps`, which :func:`inspect.signature` sees through."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False
    p = params.get(name)
    if p is not None:
        return p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class SyncRejected(ValueError):
    """An update or request refused by the server; ``code`` is the tag sent in the Error reply.

    ``reply`` is a message still owed to the env despite the refusal (the
    :class:`~magister.sync.protocol.Tasks` an update's ``request`` asked for), sent after the error.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reply: P.Message | None = None


@dataclass
class EnvCounters:
    """Per-env accounting (all monotone counts except ``connected``)."""

    tasks_sampled: int = 0
    tasks_sent: int = 0
    tasks_unsent: int = 0
    tasks_consumed: int = 0
    tasks_returned: int = 0
    updates_received: int = 0
    updates_applied: int = 0
    updates_rejected: int = 0
    steps_applied: int = 0
    episodes_applied: int = 0
    episodes_abandoned: int = 0
    progress_applied: int = 0
    malformed_frames: int = 0
    tasks_abandoned: int = 0
    duplicates_dropped: int = 0
    connected: int = 1

    @property
    def tasks_in_flight(self) -> int:
        """Tasks sent but neither consumed, returned nor abandoned: what the env still holds."""
        return self.tasks_sent - self.tasks_consumed - self.tasks_returned - self.tasks_abandoned

    def add(self, other: EnvCounters) -> None:
        """Add ``other``'s counts to these (the totals of envs no longer listed one by one)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class SyncCore:
    """Curriculum + lock + accounting, without any transport.

    The socket server and the in-process path (:class:`magister.sync.client.LocalClient`) both feed
    protocol messages into :meth:`apply`, so validation and accounting are identical on both paths.

    Args:
        curriculum: The curriculum to serve.
        step_batch_size: Steps per step update that clients are told to batch.
        validate_tasks: Check tasks the server did not hand out (task id ``-1``) against the task space.
        lock: The lock to share; by default the curriculum's own
            (:attr:`~magister.curricula.base.Curriculum.lock`), so a learner reading the curriculum
            directly is serialised with the server thread.
        keep_departed: Counters of this many envs that left (goodbye, or declared gone) stay listed one by
            one (``sync/env<i>/...``); older ones are only counted in the totals. Nothing else is kept of an
            env that left, so the memory a server holds is bounded by its live envs.
    """

    def __init__(
        self,
        curriculum: Curriculum,
        *,
        step_batch_size: int = DEFAULT_STEP_BATCH_SIZE,
        validate_tasks: bool = True,
        lock: Any = None,
        keep_departed: int = 64,
    ) -> None:
        if not isinstance(curriculum, Curriculum):
            raise TypeError(f"curriculum must be a magister Curriculum, got {type(curriculum).__name__}")
        if isinstance(step_batch_size, bool) or not isinstance(step_batch_size, int) or step_batch_size < 1:
            raise ValueError(f"step_batch_size must be a positive int, got {step_batch_size!r}")
        self.curriculum = curriculum
        self.step_batch_size = step_batch_size
        self.validate_tasks = bool(validate_tasks)
        self.lock = lock if lock is not None else curriculum.lock
        self.pid = os.getpid()
        self._counters: dict[int, EnvCounters] = {}  # live envs
        self._departed: OrderedDict[int, EnvCounters] = OrderedDict()  # the last envs that left
        self._evicted = EnvCounters(connected=0)  # the totals of envs that left before those
        self.keep_departed = int(keep_departed)
        self.departed_envs = 0
        #: Seconds between heartbeats asked of idle envs (set by a server with an ``env_timeout``; 0: none).
        self.heartbeat = 0.0
        #: Names this server instance in every welcome (a client that registers again compares it).
        self.token = secrets.token_hex(8)
        # per env, by task id: (task key, task, control flag, variant)
        self._in_flight: dict[int, dict[int, tuple[Hashable, EncodedTask, bool, EncodedTask | None]]] = {}
        self._next_env = 0
        self._next_task = 0
        self.malformed_frames = 0  # frames from peers that never said hello
        self.log = RateLimitedLogger(logger, LOG_INTERVAL)
        space = getattr(curriculum, "task_space", None)
        #: The fingerprint of the curriculum's task space (``""``: it has none), sent in every Welcome and
        #: compared with the env's at connect.
        self.task_space_fingerprint = space.fingerprint() if isinstance(space, TaskSpace) else ""
        # Per-env random streams: an env that names one (the seed of its first seeded reset) has its tasks
        # sampled from the curriculum's generator of that stream (Curriculum.stream_rng: made from the
        # curriculum's seed and the stream, checkpointed with it), so its task sequence does not depend on
        # how the other envs' requests interleave with its own.
        self._streams: dict[int, int] = {}
        #: Episode ``extras`` (e.g. per-agent returns) are passed as ``extras=`` to curricula that accept it.
        self.episode_takes_extras = _accepts(curriculum.update_on_episode, "extras")
        #: Which of a task's ``control`` and ``variant`` are passed (as keywords) to the curriculum's
        #: ``update_on_episode`` / ``update_task_progress``: those each accepts.
        self.episode_metadata = tuple(
            k for k in ("control", "variant") if _accepts(curriculum.update_on_episode, k)
        )
        self.progress_metadata = tuple(
            k for k in ("control", "variant") if _accepts(curriculum.update_task_progress, k)
        )

    # -- envs and tasks -----------------------------------------------------------------------------
    def register_env(self, hello: P.Hello | None = None) -> P.Welcome:
        """A new env joins; returns its :class:`~magister.sync.protocol.Welcome`.

        ``hello`` (what the env said when it connected) may carry the fingerprint of the env's task space,
        checked against the curriculum's, and the env's random stream (see :meth:`assign_tasks`).

        Raises:
            SyncRejected: ``"task_space_mismatch"``, naming both spaces, when the fingerprints differ.
        """
        if hello is not None and hello.task_space and self.task_space_fingerprint:
            theirs, ours = hello.task_space, self.task_space_fingerprint
            if fingerprint_digest(theirs) != fingerprint_digest(ours):
                raise SyncRejected(
                    "task_space_mismatch",
                    f"the env's task space {theirs} is not the curriculum's task space {ours}: it would "
                    "decode the curriculum's tasks to other tasks. Build the env's task wrapper with the "
                    "same space as the curriculum (same kind, size, parameters and order)",
                )
        with self.lock:
            env_id = self._next_env
            self._next_env += 1
            self._counters[env_id] = EnvCounters()
            self._in_flight[env_id] = {}
            if hello is not None and hello.stream >= 0:
                self._streams[env_id] = hello.stream
        cur = self.curriculum
        return P.Welcome(
            env_id=env_id,
            requires_step_updates=bool(cur.requires_step_updates),
            requires_episode_updates=bool(getattr(cur, "requires_episode_updates", True)),
            step_batch_size=self.step_batch_size,
            step_obs=bool(getattr(cur, "requires_step_observations", True)),
            step_infos=bool(getattr(cur, "requires_step_infos", True)),
            task_space=self.task_space_fingerprint,
            heartbeat=float(self.heartbeat),
            server_token=self.token,
        )

    def counters(self, env_id: int) -> EnvCounters:
        """The counters of ``env_id``, live or among the last that left (``KeyError`` otherwise)."""
        c = self._counters.get(env_id)
        if c is None:
            c = self._departed.get(env_id)
        if c is None:
            raise KeyError(f"unknown env id {env_id!r}; known: {self.env_ids}")
        return c

    def depart(self, env_id: int, reason: str = "goodbye") -> int:
        """Env ``env_id`` left (``reason``: ``"goodbye"``, or ``"timeout"`` when it stayed silent past the
        server's ``env_timeout``): the tasks it still held are abandoned (counted, and reported to the
        curriculum's :meth:`~magister.curricula.base.Curriculum.on_task_abandoned`), and its state is
        freed but for its counters (see ``keep_departed``). Returns the number of tasks abandoned; a no-op
        (0) for an env that is not live."""
        with self.lock:
            c = self._counters.pop(env_id, None)
            if c is None:
                return 0
            flight = self._in_flight.pop(env_id, {})
            self._streams.pop(env_id, None)
            for entry in flight.values():
                try:
                    self.curriculum.on_task_abandoned(entry[1], env_id)
                except Exception:
                    self.log.log(logging.ERROR, "abandoned_hook", "%s.on_task_abandoned failed",
                                 type(self.curriculum).__name__, exc_info=True)
            c.tasks_abandoned += len(flight)
            c.connected = 0
            self.departed_envs += 1
            self._departed[env_id] = c
            while len(self._departed) > self.keep_departed:
                self._evicted.add(self._departed.popitem(last=False)[1])
        if flight or reason != "goodbye":
            logger.info("env %d left (%s); %d tasks it held abandoned", env_id, reason, len(flight))
        return len(flight)

    def is_live(self, env_id: int) -> bool:
        """Whether ``env_id`` is registered and has not departed."""
        return env_id in self._counters

    @property
    def live_envs(self) -> int:
        """Envs registered and not yet departed."""
        return len(self._counters)

    def _env(self, env_id: int) -> EnvCounters:
        c = self._counters.get(env_id)
        if c is None:
            raise SyncRejected("unknown_env", f"env id {env_id} never said hello to this server")
        return c

    def assign_tasks(self, env_id: int, count: int) -> P.Tasks:
        """Sample ``count`` tasks for ``env_id`` and record them as in flight."""
        c = self._env(env_id)
        if not 1 <= count <= MAX_TASKS_PER_REQUEST:
            raise SyncRejected(
                "bad_request", f"task request for {count} tasks; expected 1..{MAX_TASKS_PER_REQUEST}"
            )
        with self.lock:
            cur = self.curriculum
            try:
                stream = self._streams.get(env_id)
                if stream is None:
                    samples = cur.sample_tasks(count)
                else:
                    samples = cur.sample_tasks_with(cur.stream_rng(stream), count)
            except Exception as exc:
                self.log.exception("sample_failed", "curriculum.sample_tasks(%d) failed", count)
                raise SyncRejected("sample_failed", f"curriculum.sample_tasks failed: {exc!r}") from exc
            if len(samples) != count or (
                set(map(type, samples)) != {TaskSample}
                and not all(isinstance(s, TaskSample) for s in samples)
            ):
                raise SyncRejected(
                    "sample_failed",
                    f"{type(cur).__name__}.sample_tasks({count}) must return {count} TaskSamples",
                )
            first = self._next_task
            self._next_task = first + count
            ids = tuple(range(first, first + count))
            tasks = tuple(map(_TASK, samples))
            control = tuple(map(_CONTROL, samples))
            variants = tuple(map(_VARIANT, samples))
            flight = self._in_flight[env_id]
            for i, t, ctl, v in zip(ids, tasks, control, variants):
                flight[i] = (task_key(t), t, ctl, v)
            c.tasks_sampled += count
            c.tasks_sent += count
        # (the flags were checked by TaskSample, the ids numbered here: the env checks the message it decodes)
        return P.Tasks.of(env_id, ids, tasks, tuple(map(_TRAIN, samples)), control, variants)

    def mark_unsent(self, msg: P.Tasks) -> None:
        """The tasks of ``msg`` could not be delivered (the env is gone): count them as unsent."""
        with self.lock:
            c = self._counters.get(msg.env_id)
            flight = self._in_flight.get(msg.env_id)
            if c is None or flight is None:  # the env left meanwhile: its tasks were abandoned with it
                return
            for i in msg.task_ids:
                flight.pop(i, None)
            c.tasks_sent -= len(msg.task_ids)
            c.tasks_unsent += len(msg.task_ids)

    def note_malformed(self, env_id: int | None) -> None:
        """Count one malformed frame (attributed to ``env_id`` when the sender is known)."""
        with self.lock:
            if env_id is not None and env_id in self._counters:
                self._counters[env_id].malformed_frames += 1
            else:
                self.malformed_frames += 1

    # -- updates ------------------------------------------------------------------------------------
    def _metadata(self, env_id: int, task_id: int, names: tuple[str, ...]) -> dict[str, Any]:
        """The keywords ``names`` (of ``control``, ``variant``) for the in-flight task ``task_id``, which
        ``_resolve`` checked first; a task the env chose (``-1``) has ``control=False, variant=None``."""
        if not names:
            return {}
        if task_id == -1:
            meta = {"control": False, "variant": None}
        else:
            entry = self._in_flight[env_id][task_id]
            meta = {"control": entry[2], "variant": entry[3]}
        return {k: meta[k] for k in names}

    def _resolve(self, env_id: int, task_id: int, task: EncodedTask) -> EncodedTask:
        """The task the curriculum handed out for ``task_id`` (checked against what the env reports)."""
        if task_id == -1:
            if self.validate_tasks and not self.curriculum.task_space.contains_encoded(task):
                raise SyncRejected(
                    "invalid_task",
                    f"task {task!r:.200} is not an encoded task of {self.curriculum.task_space!r}",
                )
            return task
        entry = self._in_flight[env_id].get(task_id)
        if entry is None:
            raise SyncRejected(
                "unknown_task",
                f"env {env_id} reported task id {task_id}, which it does not hold (never sent, "
                "or already consumed/returned)",
            )
        if task_key(task) != entry[0]:
            raise SyncRejected(
                "task_mismatch",
                f"env {env_id} reported task {task!r:.200} for task id {task_id}, "
                f"but that id is task {entry[1]!r:.200}",
            )
        return entry[1]

    @staticmethod
    def _check_progress(name: str, value: Any) -> None:
        if value.__class__ is float:  # episode and progress updates: one number, checked without numpy
            if not 0.0 <= value <= 1.0:  # (NaN fails too)
                code = "non_finite" if not math.isfinite(value) else "bad_progress"
                what = "finite" if code == "non_finite" else "in [0, 1]"
                raise SyncRejected(code, f"{name} must be {what}, got {value!r}")
            return
        arr = np.asarray(value, dtype=np.float64)
        if not arr.size or (0.0 <= arr.min() and arr.max() <= 1.0):  # the common case: two reductions
            return  # (a NaN fails both comparisons)
        if not np.isfinite(arr).all():
            raise SyncRejected("non_finite", f"{name} must be finite, got {value!r:.200}")
        if ((arr < 0.0) | (arr > 1.0)).any():
            raise SyncRejected("bad_progress", f"{name} must be in [0, 1], got {value!r:.200}")

    def apply(self, msg: P.Message) -> P.Message | None:
        """Apply one message from an env; returns the reply to send, if any.

        An episode or progress update with ``request > 0`` is applied first, then answered with that many
        new tasks (also when the update itself is refused: the tasks then ride on the exception's
        ``reply``).

        Raises:
            SyncRejected: the message was refused (the curriculum was not touched).
        """
        if isinstance(msg, P.TaskRequest):
            return self.assign_tasks(msg.env_id, msg.count)
        if msg.__class__ is P.Episodes:
            return self._apply_episodes(msg)  # type: ignore[arg-type]
        env_id = getattr(msg, "env_id", -1)
        c = self._env(env_id)
        request = getattr(msg, "request", 0)
        with self.lock:
            c.updates_received += 1
            try:
                reply = self._apply_update(c, msg)
            except SyncRejected as exc:
                c.updates_rejected += 1
                self._owe(exc, env_id, request)
                raise
            c.updates_applied += 1
            if request:
                return self.assign_tasks(env_id, request)
            if msg.__class__ is P.Goodbye:
                self.depart(env_id, "goodbye")
            return reply

    def _apply_episodes(self, msg: P.Episodes) -> P.Tasks | None:
        """Apply the rows of an :class:`~magister.sync.protocol.Episodes` message in order (each counted as
        one update, a refused one not stopping the others), then answer its request. Raises
        :class:`SyncRejected` naming the first refused row when any was (its ``reply`` holds the tasks)."""
        env_id, request = msg.env_id, msg.request
        c = self._env(env_id)
        refused: list[SyncRejected] = []
        n = len(msg.task_ids)
        with self.lock:
            c.updates_received += n
            for task_id, task, ret, length, progress, ended in zip(
                msg.task_ids, msg.tasks, msg.returns, msg.lengths, msg.progress, msg.ended
            ):
                try:
                    self._episode(c, env_id, task_id, task, ret, length, progress, ended, None)
                except SyncRejected as exc:
                    refused.append(exc)
            c.updates_rejected += len(refused)
            c.updates_applied += n - len(refused)
            if not refused:
                return self.assign_tasks(env_id, request) if request else None
            exc = SyncRejected(
                refused[0].code,
                f"{len(refused)} of {n} episode updates refused; the first: {refused[0]}",
            )
            self._owe(exc, env_id, request)
            raise exc

    def _owe(self, exc: SyncRejected, env_id: int, request: int) -> None:
        """A refused update asked for ``request`` tasks: they are still owed, on ``exc.reply`` (or the reason
        they cannot be sampled)."""
        if request:
            try:
                exc.reply = self.assign_tasks(env_id, request)
            except SyncRejected as failed:
                exc.reply = P.Error(failed.code, str(failed)[:2000], env_id)

    def apply_batch(self, batch: P.Batch) -> list[P.Message]:
        """Apply the messages of a :class:`~magister.sync.protocol.Batch` in order, under one lock.

        Returns the replies to send, in order: an :class:`~magister.sync.protocol.Error` for each refused
        message, then one :class:`~magister.sync.protocol.Tasks` with every task the batch asked for (also
        those owed to refused updates). A refused message does not stop the ones after it.
        """
        self._env(batch.env_id)
        replies: list[P.Message] = []
        tasks: list[P.Tasks] = []
        with self.lock:
            for msg in batch.messages:
                try:
                    reply = self.apply(msg)
                except SyncRejected as exc:
                    replies.append(P.Error(exc.code, str(exc)[:2000], batch.env_id))
                    reply = exc.reply
                if isinstance(reply, P.Tasks):
                    tasks.append(reply)
                elif reply is not None:
                    replies.append(reply)
        if len(tasks) == 1:
            replies.append(tasks[0])
        elif tasks:
            replies.append(
                P.Tasks.of(
                    batch.env_id,
                    tuple(i for t in tasks for i in t.task_ids),
                    tuple(x for t in tasks for x in t.tasks),
                    tuple(b for t in tasks for b in t.train),
                    tuple(b for t in tasks for b in t.control),
                    tuple(v for t in tasks for v in t.variants),
                )
            )
        return replies

    def _apply_update(self, c: EnvCounters, msg: P.Message) -> P.Message | None:
        if msg.__class__ is P.EpisodeUpdate:  # (the most frequent update first)
            self._apply_episode(c, msg)  # type: ignore[arg-type]
            return None
        cur = self.curriculum
        if isinstance(msg, P.StepUpdate):
            total = float(msg.rewards.sum())  # finite for finite rewards (unless they overflow the sum)
            if total - total != 0.0 and not np.isfinite(msg.rewards).all():
                raise SyncRejected(
                    "non_finite", f"step rewards must be finite, got {msg.rewards.tolist()!r:.200}"
                )
            self._check_progress("step progress", msg.progress)
            ids = msg.task_ids
            n = len(msg.tasks)
            if n and ids[0] != -1 and (ids == ids[0]).all():  # the usual batch: every step on one task
                first = self._resolve(msg.env_id, int(ids[0]), msg.tasks[0])
                try:  # a C-level comparison for plain tasks (ints, strs, tuples) ...
                    same = msg.tasks.count(msg.tasks[0]) == n
                except (TypeError, ValueError):  # ... task keys for the others (e.g. arrays)
                    key = task_key(first)
                    same = all(task_key(t) == key for t in msg.tasks)
                if not same:  # one id reported with several tasks: refused with the mismatching one named
                    for tid, task in zip(ids.tolist(), msg.tasks):
                        self._resolve(msg.env_id, tid, task)
                tasks = [first] * n
            else:
                resolved: dict[int, EncodedTask] = {}
                tasks = []
                for tid, task in zip(ids.tolist(), msg.tasks):
                    if tid == -1 or tid not in resolved:
                        resolved[tid] = self._resolve(msg.env_id, tid, task)
                    tasks.append(resolved[tid] if tid != -1 else task)
            batch = StepBatch(
                tasks,
                msg.rewards,
                msg.terminated,
                msg.truncated,
                msg.progress,
                obs=P.StackedObs(msg.obs) if isinstance(msg.obs, dict) else msg.obs,
                infos=msg.infos,
                env_id=msg.env_id,
            )
            if cur.requires_step_updates:
                self._call("update_on_step_batch", batch, msg.env_id)
            c.steps_applied += len(batch)
            return None
        if isinstance(msg, P.EpisodeUpdate):  # (a subclass: the class check above takes the others)
            self._apply_episode(c, msg)
            return None
        if isinstance(msg, P.ProgressUpdate):
            self._check_progress("task progress", msg.progress)
            task = self._resolve(msg.env_id, msg.task_id, msg.task)
            kwargs = self._metadata(msg.env_id, msg.task_id, self.progress_metadata)
            self._call("update_task_progress", task, msg.progress, msg.env_id, **kwargs)
            if msg.done and msg.task_id != -1:
                del self._in_flight[msg.env_id][msg.task_id]
                c.tasks_consumed += 1
            c.progress_applied += 1
            return None
        if isinstance(msg, P.Goodbye):
            flight = self._in_flight[msg.env_id]
            unknown = [i for i in msg.returned_task_ids if i not in flight]
            if unknown:
                raise SyncRejected(
                    "unknown_task", f"env {msg.env_id} returned task ids it does not hold: {unknown}"
                )
            for i in msg.returned_task_ids:
                del flight[i]
            c.tasks_returned += len(msg.returned_task_ids)
            return P.Goodbye(msg.env_id, msg.returned_task_ids)
        raise SyncRejected("bad_request", f"an env may not send {type(msg).__name__} messages")

    def _apply_episode(self, c: EnvCounters, msg: P.EpisodeUpdate) -> None:
        self._episode(
            c, msg.env_id, msg.task_id, msg.task, msg.episode_return, msg.length, msg.progress, msg.ended,
            msg.extras,
        )

    def _episode(
        self,
        c: EnvCounters,
        env_id: int,
        task_id: int,
        task: EncodedTask,
        episode_return: float,
        length: int,
        progress: float,
        ended: bool,
        extras: dict | None,
    ) -> None:
        """Apply one episode update (of an :class:`~magister.sync.protocol.EpisodeUpdate`, or one row of an
        :class:`~magister.sync.protocol.Episodes` message)."""
        if episode_return - episode_return != 0.0:  # (0 for every finite float: one check for inf and NaN)
            raise SyncRejected("non_finite", f"episode return must be finite, got {episode_return!r}")
        if progress.__class__ is not float or not 0.0 <= progress <= 1.0:
            self._check_progress("episode progress", progress)
        if task_id == -1:
            task = self._resolve(env_id, task_id, task)
        else:
            entry = self._in_flight[env_id].get(task_id)
            if entry is None or task_key(task) != entry[0]:
                self._resolve(env_id, task_id, task)  # raises, naming what is wrong
            task = entry[1]  # type: ignore[index]
        if ended and getattr(self.curriculum, "requires_episode_updates", True):
            kwargs = self._metadata(env_id, task_id, self.episode_metadata) if self.episode_metadata else {}
            if self.episode_takes_extras and extras:
                kwargs["extras"] = extras
            self._call("update_on_episode", episode_return, length, task, progress, env_id, **kwargs)
        if task_id != -1:
            del self._in_flight[env_id][task_id]
            c.tasks_consumed += 1
        if ended:
            c.episodes_applied += 1
        else:  # cut short by an early reset or a close: the task was used, no episode ended
            c.episodes_abandoned += 1

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        try:
            getattr(self.curriculum, method)(*args, **kwargs)
        except Exception as exc:
            self.log.warning(
                f"refused:{method}", "%s.%s refused an update: %r",
                type(self.curriculum).__name__, method, exc,
            )
            raise SyncRejected(
                "curriculum_error", f"{type(self.curriculum).__name__}.{method}: {exc}"
            ) from exc

    # -- learner side -------------------------------------------------------------------------------
    def in_flight(self, env_id: int) -> dict[int, EncodedTask]:
        """Tasks sent to ``env_id`` and not yet consumed, returned or abandoned, by task id (``{}`` for an
        env that left)."""
        with self.lock:
            return {i: entry[1] for i, entry in self._in_flight.get(env_id, {}).items()}

    @property
    def env_ids(self) -> list[int]:
        """Ids of the live envs and of the last ones that left (see ``keep_departed``)."""
        return sorted((*self._counters, *self._departed))

    def sync_metrics(self) -> dict[str, float]:
        """Flat accounting metrics: ``sync/env<i>/<counter>`` per live env (and per env among the last that
        left), ``sync/total/<counter>`` over every env that ever connected, ``sync/envs`` (envs that ever
        registered), ``sync/envs_live`` and ``sync/envs_departed``."""
        out: dict[str, float] = {}
        with self.lock:
            totals = EnvCounters(connected=0)
            totals.add(self._evicted)
            for env_id, c in sorted((*self._counters.items(), *self._departed.items())):
                for f in fields(c):
                    out[f"sync/env{env_id}/{f.name}"] = float(getattr(c, f.name))
                out[f"sync/env{env_id}/tasks_in_flight"] = float(c.tasks_in_flight)
                totals.add(c)
            for f in fields(totals):
                out[f"sync/total/{f.name}"] = float(getattr(totals, f.name))
            out["sync/total/tasks_in_flight"] = float(totals.tasks_in_flight)
            out["sync/envs"] = float(len(self._counters) + self.departed_envs)  # ever registered
            out["sync/envs_live"] = float(len(self._counters))
            out["sync/envs_departed"] = float(self.departed_envs)
            out["sync/malformed_frames_unattributed"] = float(self.malformed_frames)
        return out


class ServedCurriculum:
    """Base of the learner-side server objects (:class:`CurriculumServer`, and the Ray backend's
    ``RayCurriculumServer``): each has an ``address`` that env-side feeds connect to, and is accepted
    wherever an address is (sent to another process, it arrives as a :class:`ServerHandle`)."""

    address: str


@dataclass(eq=False)
class _Peer:
    """What the server keeps of one connected env: its id and welcome, and the state of its sequenced
    stream (see :func:`magister.sync.protocol.pack_envelope`)."""

    env_id: int
    welcome: P.Welcome
    last_seen: float
    rx: int = 0  # the highest sequence number applied from the env
    tx: int = 0  # the sequence number of the last reply sent to it
    sent: deque = field(default_factory=deque)  # (seq, frames) of replies it has not acknowledged
    sequenced: bool = False  # it sends envelopes (so replies carry them)
    gap: bool = False  # a gap was reported to it since its last in-order message


#: Most replies a server keeps per env for a resend (older ones are dropped: a client that far behind
#: is gone, and its tasks are reclaimed by the liveness check).
MAX_UNACKED_REPLIES = 1024


class CurriculumServer(ServedCurriculum):
    """A curriculum served over ZeroMQ. Create it with :func:`serve`.

    Attributes:
        address: The bound address (a plain ``str``, safe to send to worker processes).
        curriculum: The served curriculum. Touch it only while holding :attr:`lock`, or use the proxies.
        lock: The lock shared by the server thread and the learner-side proxy methods.
        core: The :class:`SyncCore` holding the accounting.
    """

    def __init__(
        self,
        curriculum: Curriculum,
        address: str | None = None,
        *,
        step_batch_size: int = DEFAULT_STEP_BATCH_SIZE,
        curve_secret_key: bytes | str | None = None,
        curve_allowed_clients: AllowedClients | None = None,
        insecure: bool = False,
        validate_tasks: bool = True,
        max_message_bytes: int = 256 * 1024 * 1024,
        max_envs: int = 65536,
        poll_interval: float = 1.0,
        join_timeout: float = 5.0,
        env_timeout: float | None = 60.0,
        keep_departed: int = 64,
    ) -> None:
        if env_timeout is not None and (
            isinstance(env_timeout, bool) or not isinstance(env_timeout, (int, float)) or not env_timeout > 0
        ):
            raise ValueError(f"env_timeout must be a positive number of seconds or None, got {env_timeout!r}")
        self.core = SyncCore(
            curriculum,
            step_batch_size=step_batch_size,
            validate_tasks=validate_tasks,
            keep_departed=keep_departed,
        )
        self.curriculum = curriculum
        self.lock = self.core.lock
        self._pid = os.getpid()
        #: Seconds an env may stay silent before it is declared gone (``None``: never).
        self.env_timeout = None if env_timeout is None else float(env_timeout)
        if self.env_timeout is not None:
            self.core.heartbeat = self.env_timeout / 4  # an idle env sends one at least this often
            poll_interval = min(poll_interval, self.env_timeout / 4)  # the liveness check's period
        self._poll_ms = max(1, int(poll_interval * 1000))
        self._next_sweep = math.inf if self.env_timeout is None else time.monotonic() + self.env_timeout / 4
        self._join_timeout = float(join_timeout)
        self._max_header = min(int(max_message_bytes), P.DEFAULT_MAX_HEADER_BYTES)
        self._tmpdir: str | None = None
        self._closed = False
        self._stop = threading.Event()
        self._peers: dict[bytes, _Peer] = {}  # live envs, by routing id
        #: Most live envs this server serves (bounds the memory a flood of hellos can take); an env that
        #: left (goodbye, or declared gone) frees its slot.
        self.max_envs = int(max_envs)
        self.errors_sent = 0
        #: Sequenced messages dropped as repeats (resent after a reconnect, already applied).
        self.duplicates_dropped = 0
        #: Replies sent again to envs that missed them (after a reconnect).
        self.replies_resent = 0
        #: Replies the server could not hand to ZeroMQ (the peer was gone or its queue full).
        self.replies_undelivered = 0
        self._log = self.core.log  # one rate limit for everything this server logs about its peers
        if address is None:
            self._tmpdir = tempfile.mkdtemp(prefix="magister-")  # mode 0700
            address = f"ipc://{os.path.join(self._tmpdir, 'curriculum.sock')}"
        if not isinstance(address, str):
            raise TypeError(f"address must be a str like 'ipc:///path' or 'tcp://host:port', got {address!r}")
        try:
            check_bind_address(address, curve_secret_key, insecure, curve_allowed_clients)
            allowed = None if curve_allowed_clients is None else ClientAllowList(curve_allowed_clients)
        except Exception:
            self._remove_tmpdir()
            raise
        self._ctx = zmq.Context()
        #: The ZAP handler admitting only ``curve_allowed_clients`` (``None``: every key holder is admitted).
        self._auth: ZapAuthenticator | None = None
        sock = self._ctx.socket(zmq.ROUTER)
        try:
            if allowed is not None:  # (running before the bind: no handshake goes unchecked)
                self._auth = ZapAuthenticator(self._ctx, allowed, log=self._log)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            # an env that reconnects (same routing id) takes over its identity at once, even while the
            # server still holds its old connection (a half-open TCP connection after a network cut)
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
            configure_server_socket(sock, curve_secret_key, authenticate_clients=allowed is not None)
            sock.bind(address)
            self.address: str = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except Exception:
            sock.close(0)
            if self._auth is not None:
                self._auth.stop()
            self._ctx.term()
            self._remove_tmpdir()
            raise
        self._sock = sock
        # close() wakes the thread through this pair (it waits on the socket without a short timeout, so an
        # idle server costs nothing); the thread owns the receiving end, close() the sending one
        wake = f"inproc://magister-wake-{id(self)}"
        self._wake_rx = self._ctx.socket(zmq.PAIR)
        self._wake_rx.bind(wake)
        self._wake_tx = self._ctx.socket(zmq.PAIR)
        self._wake_tx.setsockopt(zmq.LINGER, 0)
        self._wake_tx.connect(wake)
        self._thread = threading.Thread(target=self._run, name=f"magister-server-{self.address}", daemon=True)
        self._thread.start()
        _live_servers.add(self)
        logger.info("curriculum server for %s listening on %s", type(curriculum).__name__, self.address)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        sock = self._sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if time.monotonic() >= self._next_sweep:
                    self._sweep()
                if not poller.poll(self._poll_ms):
                    continue
                # one message per wake-up: poll returns at once while more are waiting (as cheap as asking
                # the socket whether one is, and no failing recv at the end of a burst)
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:  # (the wake-up was for the close, or a message was taken back)
                    continue
                try:
                    self._handle(frames)
                except Exception:  # the thread must never die on one bad message
                    self._log.exception("handler", "curriculum server: unexpected error handling a message")
        except zmq.ContextTerminated:  # pragma: no cover - only if the context is destroyed under us
            pass
        finally:
            sock.close(0)
            self._wake_rx.close(0)

    def _sweep(self) -> None:
        """Declare gone the envs silent for longer than ``env_timeout`` (their tasks are abandoned)."""
        now = time.monotonic()
        self._next_sweep = now + self.env_timeout / 4  # type: ignore[operator]
        deadline = now - self.env_timeout  # type: ignore[operator]
        for identity, peer in list(self._peers.items()):
            if peer.last_seen < deadline:
                del self._peers[identity]
                self.core.depart(peer.env_id, "timeout")

    def _send(self, identity: bytes, msg: P.Message) -> bool:
        peer = self._peers.get(identity)
        frames = P.encode(msg)
        if peer is not None and peer.sequenced:  # numbered, and kept until the env acknowledges it
            peer.tx += 1
            frames = [P.pack_envelope(P.DATA, peer.tx, peer.rx) + frames[0], *frames[1:]]
            peer.sent.append((peer.tx, frames))
            if len(peer.sent) > MAX_UNACKED_REPLIES:
                peer.sent.popleft()
        quiet = peer is not None and peer.sequenced
        return self._write(identity, frames, msg, logging.DEBUG if quiet else None)

    def _write(
        self, identity: bytes, frames: list[Any], msg: P.Message | None = None, level: int | None = None
    ) -> bool:
        """Send ``frames`` to ``identity`` now; False when it cannot take them (logged at ``level``, by
        default a warning; a reply kept for a resend is only worth a debug line)."""
        try:
            self._sock.send_multipart([identity, *frames], zmq.NOBLOCK)
            return True
        except (zmq.Again, zmq.ZMQError) as exc:  # peer gone (ROUTER_MANDATORY) or its queue is full
            self.replies_undelivered += 1
            self._log.log(
                logging.WARNING if level is None else level,
                "undeliverable",
                "curriculum server: could not deliver %s to env %s: %s",
                type(msg).__name__ if msg is not None else "a message",
                getattr(msg, "env_id", "?"),
                exc,
            )
            return False

    def _error(self, identity: bytes, code: str, message: str, env_id: int = -1) -> None:
        self.errors_sent += 1
        self._send(identity, P.Error(code, message[:2000], env_id))

    def _sequence(self, identity: bytes, peer: _Peer | None, envelope: tuple[int, int, int]) -> bool:
        """Account for a sequenced frame; whether the message it carries is to be applied now."""
        kind, seq, ack = envelope
        if peer is None:  # a restarted server, or an env declared gone: it must say hello again
            self.core.note_malformed(None)
            self._error(identity, "unknown_env", "this server does not know this env (restarted, or it "
                        "declared the env gone); send Hello again")
            return False
        peer.sequenced = True
        sent = peer.sent
        while sent and sent[0][0] <= ack:  # acknowledged replies need no resend
            sent.popleft()
        if kind == P.PING:  # resend what it missed, then say from where it must resend its own
            for _, frames in sent:
                self._write(identity, frames)
                self.replies_resent += 1
            self._write(identity, [P.pack_envelope(P.PONG, peer.tx, peer.rx)])
            return False
        if kind != P.DATA:
            raise P.ProtocolError(f"an env may not send a {kind} envelope")
        if seq <= peer.rx:  # already applied (a resend after a reconnect)
            self.duplicates_dropped += 1
            self.core.counters(peer.env_id).duplicates_dropped += 1
            return False
        if seq > peer.rx + 1:  # something before it was lost: ask (once) for the resend from there
            if not peer.gap:
                peer.gap = True
                self._write(identity, [P.pack_envelope(P.PONG, peer.tx, peer.rx)])
            return False
        peer.rx, peer.gap = seq, False
        return True

    def _handle(self, frames: list[Any]) -> None:
        identity = frames[0].bytes
        peer = self._peers.get(identity)
        if peer is not None:
            peer.last_seen = time.monotonic()
        env_id = None if peer is None else peer.env_id
        try:
            envelope = P.unpack_envelope(frames[1]) if len(frames) > 1 else None
            if envelope is not None:
                if not self._sequence(identity, peer, envelope):
                    return
                body = [frames[1].buffer[P.ENVELOPE_SIZE:], *frames[2:]]
            else:
                body = frames[1:]
            msg = P.decode(body, max_header_bytes=self._max_header)
        except P.ProtocolVersionError as exc:
            self.core.note_malformed(env_id)
            self._error(identity, "version", str(exc), -1 if env_id is None else env_id)
            return
        except P.ProtocolError as exc:
            self.core.note_malformed(env_id)
            logger.debug("curriculum server: malformed frame from env %s: %s", env_id, exc)
            self._error(identity, "malformed", str(exc), -1 if env_id is None else env_id)
            return
        if isinstance(msg, P.Hello):
            if peer is None:  # (a repeated Hello, a client's retry, gets the same answer)
                if len(self._peers) >= self.max_envs:
                    self._error(
                        identity, "too_many_envs", f"the server serves at most {self.max_envs} live envs"
                    )
                    return
                try:
                    welcome = self.core.register_env(msg)
                except SyncRejected as exc:
                    self._error(identity, exc.code, str(exc))
                    return
                peer = self._peers[identity] = _Peer(welcome.env_id, welcome, time.monotonic())
                logger.debug("env %d joined (pid %d, %r)", welcome.env_id, msg.pid, msg.name)
                if msg.rejoin >= 0:
                    logger.info("env %d joined again (it was env %d)", welcome.env_id, msg.rejoin)
            self._write(identity, P.encode(peer.welcome), peer.welcome)
            return
        if env_id is None or getattr(msg, "env_id", None) != env_id:
            self.core.note_malformed(env_id)
            self._error(
                identity,
                "unknown_env",
                f"{type(msg).__name__} from a peer that is not env "
                f"{getattr(msg, 'env_id', '?')}; send Hello first",
                -1 if env_id is None else env_id,
            )
            return
        if isinstance(msg, P.Batch):
            try:
                replies = self.core.apply_batch(msg)
            except SyncRejected as exc:  # (an unknown env was caught above; kept for safety)
                self._error(identity, exc.code, str(exc), env_id)
                return
            for reply in replies:
                if isinstance(reply, P.Error):
                    self.errors_sent += 1
                if not self._send(identity, reply) and isinstance(reply, P.Tasks) and not peer.sequenced:
                    self.core.mark_unsent(reply)
            return
        try:
            reply = self.core.apply(msg)
        except SyncRejected as exc:
            self._error(identity, exc.code, str(exc), env_id)
            reply = exc.reply
            if isinstance(reply, P.Error):
                self.errors_sent += 1
        if reply is not None and not self._send(identity, reply) and isinstance(reply, P.Tasks):
            if not peer.sequenced:  # (a sequenced env gets it again when it reconnects)
                self.core.mark_unsent(reply)
        if isinstance(msg, P.Goodbye) and not self.core.is_live(env_id):  # it left: its slot is freed
            self._peers.pop(identity, None)

    # -- learner-side proxies (all under the lock) ----------------------------------------------------
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``curriculum.sample(k)`` under the lock (tasks for the learner's own use, not accounted)."""
        with self.lock:
            return self.curriculum.sample(k)

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``curriculum.sample_tasks(k)`` under the lock."""
        with self.lock:
            return self.curriculum.sample_tasks(k)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Learner-side feedback, ``curriculum.update_on_demand(metrics)`` under the lock."""
        with self.lock:
            self.curriculum.update_on_demand(metrics)

    def metrics(self) -> dict[str, float]:
        """The curriculum's metrics plus the sync accounting (see :meth:`SyncCore.sync_metrics`)."""
        with self.lock:
            out = dict(self.curriculum.metrics())
            out.update(self.core.sync_metrics())
            out["sync/errors_sent"] = float(self.errors_sent)
            out["sync/duplicates_dropped"] = float(self.duplicates_dropped)
            out["sync/replies_resent"] = float(self.replies_resent)
            out["sync/replies_undelivered"] = float(self.replies_undelivered)
            if self._auth is not None:
                out["sync/clients_refused"] = float(self._auth.refused)
        return out

    def state_dict(self) -> dict[str, Any]:
        """``curriculum.state_dict()`` under the lock, for checkpoints: ``magister.save(path, state)``
        writes it to a file that ``magister.load(path)`` reads back without running code
        (:mod:`magister.checkpoint`)."""
        with self.lock:
            return self.curriculum.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``curriculum.load_state_dict(state)`` under the lock (resume from a checkpoint)."""
        with self.lock:
            self.curriculum.load_state_dict(state)

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """Stop the thread (joined with a timeout), close the socket and remove the ipc directory.

        Idempotent; a no-op in a forked child (only the creating process owns the server).
        """
        if self._closed or os.getpid() != self._pid:
            return
        self._closed = True
        self._stop.set()
        try:
            self._wake_tx.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:  # pragma: no cover - the thread then wakes at its poll interval
            pass
        self._wake_tx.close(0)
        self._thread.join(self._join_timeout)
        if self._auth is not None:
            self._auth.stop()
        if self._thread.is_alive():  # pragma: no cover - only if the curriculum blocks forever
            logger.error("curriculum server thread did not stop within %.1fs", self._join_timeout)
        else:
            self._ctx.term()
        self._remove_tmpdir()
        _live_servers.discard(self)
        self._log.flush()  # what the rate limit held back is reported, counted
        logger.info("curriculum server on %s closed", self.address)

    def _remove_tmpdir(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> CurriculumServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        # sent to another process (a vector env's worker, a pickled closure that names the server), it
        # arrives as a handle to its address: what the env side needs, and all it can use
        return (ServerHandle, (self.address,))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"CurriculumServer({type(self.curriculum).__name__}, {self.address!r}, {state})"


class ServerHandle:
    """A curriculum server as another process sees it: its :attr:`address`, and nothing else.

    A :class:`CurriculumServer` (or a Ray server) sent to a worker process, e.g. inside the closure of
    ``SubprocVecEnv([lambda: GymnasiumSyncWrapper(env, server.address)] * 8)`` under the spawn or forkserver
    start method, arrives as one of these, so ``server.address`` and ``GymnasiumSyncWrapper(env, server)``
    work in the worker as written. The curriculum itself stays in the process that served it: learner-side
    calls (``metrics()``, ``state_dict()`` ...) raise ``AttributeError`` here, saying where to make them.

    >>> import copy
    >>> handle = copy.deepcopy(ServerHandle("ipc:///tmp/x.sock"))  # (pickling gives the same)
    >>> handle.address, handle
    ('ipc:///tmp/x.sock', ServerHandle('ipc:///tmp/x.sock'))
    """

    __slots__ = ("address",)

    def __init__(self, address: str) -> None:
        if not isinstance(address, str) or "://" not in address:
            raise TypeError(f"a server handle needs the server's address (a str), got {address!r}")
        object.__setattr__(self, "address", address)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{name!r}: this is a handle to the curriculum server at {self.address} in another process; it "
            "has only .address (give it, or the handle, to GymnasiumSyncWrapper). Call the server's "
            "learner-side methods in the process that called serve()"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a ServerHandle is read-only")

    def __reduce__(self) -> Any:
        return (ServerHandle, (self.address,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServerHandle) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __repr__(self) -> str:
        return f"ServerHandle({self.address!r})"


_live_servers: weakref.WeakSet[CurriculumServer] = weakref.WeakSet()


@atexit.register
def _close_live_servers() -> None:  # pragma: no cover - interpreter shutdown
    for server in list(_live_servers):
        try:
            server.close()
        except Exception:
            pass


def serve(
    curriculum: Curriculum,
    address: str | None = None,
    *,
    step_batch_size: int = DEFAULT_STEP_BATCH_SIZE,
    curve_secret_key: bytes | str | None = None,
    curve_allowed_clients: AllowedClients | None = None,
    insecure: bool = False,
    validate_tasks: bool = True,
    max_message_bytes: int = 256 * 1024 * 1024,
    max_envs: int = 65536,
    env_timeout: float | None = 60.0,
    keep_departed: int = 64,
) -> CurriculumServer:
    """Serve ``curriculum`` to environment workers; returns the running :class:`CurriculumServer`.

    Args:
        curriculum: Any :class:`~magister.curricula.base.Curriculum`.
        address: ``None`` for an ``ipc://`` socket in a private temporary directory (same machine), or
            ``"tcp://host:port"`` (``port`` ``*``: a free port, see :attr:`CurriculumServer.address`).
        step_batch_size: Steps a client batches per step update (only used when the curriculum
            ``requires_step_updates``).
        curve_secret_key: CURVE secret key (see :func:`magister.sync.security.generate_keypair`); required
            for a TCP address that is not loopback (or an abstract ``ipc://@name`` socket), unless
            ``insecure=True``.
        curve_allowed_clients: Admit only clients presenting one of these CURVE public keys (a list), or
            one of the ``*.key`` certificates in this directory (re-read when it changes); see
            :mod:`magister.sync.security`. Needs ``curve_secret_key``. Without it, any holder of the
            server's public key can join (an exposed address logs a warning saying so).
        insecure: Explicitly allow an unencrypted non-loopback TCP address.
        validate_tasks: Check tasks that clients chose themselves against the task space.
        max_message_bytes: Larger incoming messages are dropped by ZeroMQ (protects memory).
        max_envs: Most live envs the server serves; further hellos get a ``too_many_envs`` error reply. An
            env that said goodbye, or was declared gone, frees its slot.
        env_timeout: Seconds an env may stay silent before it is declared gone: the tasks it held are
            abandoned (counted as ``tasks_abandoned`` and reported to the curriculum's
            ``on_task_abandoned``) and its slot is freed. Clients send a heartbeat when idle for a quarter
            of it. ``None``: envs are never declared gone.
        keep_departed: Counters of this many envs that left stay listed one by one in ``metrics()``.

    Raises:
        ValueError: an unsupported address, an exposed address (:func:`~magister.sync.security.is_exposed`)
            without keys or ``insecure=True``, or a malformed ``curve_allowed_clients``.
        zmq.ZMQError: the address cannot be bound (e.g. the port is taken).
    """
    return CurriculumServer(
        curriculum,
        address,
        step_batch_size=step_batch_size,
        curve_secret_key=curve_secret_key,
        curve_allowed_clients=curve_allowed_clients,
        insecure=insecure,
        validate_tasks=validate_tasks,
        max_message_bytes=max_message_bytes,
        max_envs=max_envs,
        env_timeout=env_timeout,
        keep_departed=keep_departed,
    )
