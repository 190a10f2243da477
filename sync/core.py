"""The transport-agnostic core of the sync layer: registration, leases, accounting, applying updates.

A :class:`SyncCore` holds one curriculum and everything the curriculum side knows about its envs. The three
endpoints (ZeroMQ :mod:`~magister.sync.zmq_server`, the Ray actor of :mod:`~magister.sync.ray_server`, and
in-process :mod:`~magister.sync.transports.inprocess`) feed it the same protocol messages, so validation and
accounting are identical on every path.

Each task handed out is a *lease* with a unique id, in flight until the env's episode, a completion update,
its return at close or the env's departure (then it is abandoned and passed to ``on_task_abandoned``) ends
it. Episodes reach the curriculum as :class:`~magister.curricula.base.Episode` records through
:meth:`~magister.curricula.base.Curriculum.on_episode`. A refused update (malformed, naming a task the env
does not hold, non-finite, or one the curriculum raises on) raises :class:`SyncRejected`, and the endpoint
replies with an error.

>>> from magister.curricula.domain_randomization import DomainRandomization
>>> from magister.task_spaces.discrete import Discrete
>>> from magister.sync import protocol as P
>>> core = SyncCore(DomainRandomization(Discrete(3), seed=0))
>>> env = core.register_env().env_id
>>> tasks = core.apply(P.Report(env, request=2))
>>> len(tasks.task_ids), core.counters(env).tasks_in_flight
(2, 2)
>>> core.apply(P.Report(env, (P.EpisodeEnd(tasks.task_ids[0], tasks.tasks[0], 1.0, 10, 1.0),)))
>>> core.counters(env).tasks_consumed, core.counters(env).episodes_applied
(1, 1)
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from ..curricula.base import Curriculum, Episode, StepBatch, TaskSample
from ..task_spaces.base import EncodedTask, TaskSpace, fingerprint_digest, task_key
from . import protocol as P
from .options import ServerOptions
from .ratelimit import RateLimitedLogger

logger = logging.getLogger(__name__)

__all__ = ["EnvCounters", "LearnerCalls", "ServedCurriculum", "ServerHandle", "SyncCore", "SyncRejected"]

#: Largest number of tasks one request may ask for.
MAX_TASKS_PER_REQUEST = 4096
#: Seconds between two log records of one kind of fault (the rest are counted): no peer floods the log.
LOG_INTERVAL = 10.0
#: How many ended leases a core remembers (a report for one of them is dropped and counted).
KEEP_ENDED = 1 << 16


class SyncRejected(ValueError):
    """An update or request refused by the core; ``code`` is the tag sent in the Error reply, ``reply`` a
    message still owed to the env (the tasks its report asked for), sent after the error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reply: P.Message | None = None


@dataclass
class EnvCounters:
    """Per-env accounting: monotone counts (``tasks_sent`` and ``tasks_in_flight`` are derived from them;
    the metrics add ``connected``, 1 while the env is served). Dropped and counted: ``reports_late`` (leases
    that ended otherwise: abandoned while the env was away, returned), ``reports_orphaned`` (leases of another
    server instance: before a restart, after its checkpoint). ``episodes_reported``: episode reports
    processed (repeats not counted); ``episodes_lost_to_restore``: taken by an instance that died after its
    checkpoint (the restored curriculum lacks them)."""

    tasks_sampled: int = 0
    tasks_unsent: int = 0
    tasks_consumed: int = 0
    tasks_returned: int = 0
    updates_applied: int = 0
    updates_rejected: int = 0
    curriculum_errors: int = 0
    steps_applied: int = 0
    episodes_applied: int = 0
    episodes_abandoned: int = 0
    progress_applied: int = 0
    malformed_frames: int = 0
    tasks_abandoned: int = 0
    duplicates_dropped: int = 0
    reports_late: int = 0
    reports_orphaned: int = 0
    episodes_reported: int = 0
    episodes_lost_to_restore: int = 0
    #: Listed with the counts (in the metrics, and in the ledgers of earlier versions) but derived.
    DERIVED: ClassVar[tuple[str, ...]] = ("tasks_sent", "tasks_in_flight", "updates_received", "connected")

    @property
    def tasks_sent(self) -> int:
        """Tasks handed out to the env (sampled, and not found undeliverable)."""
        return self.tasks_sampled - self.tasks_unsent

    @property
    def updates_received(self) -> int:
        """Updates processed, applied or refused (a report's every update, a goodbye)."""
        return self.updates_applied + self.updates_rejected

    @property
    def tasks_in_flight(self) -> int:
        """Tasks sent but neither consumed, returned nor abandoned: what the env still holds."""
        return self.tasks_sent - self.tasks_consumed - self.tasks_returned - self.tasks_abandoned

    def add(self, other: EnvCounters) -> None:
        """Add ``other``'s counts to these (the totals of envs no longer listed one by one)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def metrics(self, prefix: str, connected: int) -> dict[str, float]:
        """``<prefix>/<counter>`` for every count, the derived ones and ``connected``."""
        counts = {**asdict(self), **{name: getattr(self, name) for name in self.DERIVED[:-1]}}
        return {f"{prefix}/{name}": float(v) for name, v in {**counts, "connected": connected}.items()}


@dataclass(eq=False)
class _Env:
    """What the core knows of one env (one that left keeps only its counters)."""

    counters: EnvCounters = field(default_factory=EnvCounters)
    leases: dict[int, tuple[Hashable, TaskSample]] = field(default_factory=dict)  # id -> (task key, sample)
    stream: int | None = None  # its random stream (Curriculum.stream_rng): its tasks ignore others' timing
    heard: float | None = None  # when last heard from (None: not watched, as in-process envs)
    returned: bool = False  # it registered again: it may report ended leases, or another server's
    restored: float | None = None  # restored from a checkpoint and not back yet: since when
    contact: Any = None  # what its endpoint keeps of it (a ZeroMQ peer, a Ray node and worker) ...
    key: Hashable | None = None  # ... found by this key (SyncCore.contact)
    live: bool = True
    before: int = 0  # episodes it had reported to other server instances when it registered here

    @property
    def connected(self) -> int:
        """1 while the env is served (live, and back if it was restored), else 0."""
        return int(self.live and self.restored is None)

    def silent(self, since: float) -> bool:
        """Whether it was last heard from before ``since``, or restored before it and not back."""
        return any(t is not None and t < since for t in (self.heard, self.restored))


def _check_progress(name: str, value: Any) -> None:
    """Progress must be finite and in [0, 1]: one number, or an array of them (a step update's)."""
    arr = np.asarray(value, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise SyncRejected("non_finite", f"{name} must be finite, got {value!r:.200}")
    if ((arr < 0.0) | (arr > 1.0)).any():
        raise SyncRejected("bad_progress", f"{name} must be in [0, 1], got {value!r:.200}")


def _all_equal(tasks: tuple) -> bool:
    """Whether every task of ``tasks`` is the first one (by value; by task key for arrays)."""
    try:
        return tasks.count(tasks[0]) == len(tasks)
    except (TypeError, ValueError):  # (the truth value of an array comparison is ambiguous)
        key = task_key(tasks[0])
        return all(task_key(t) == key for t in tasks)


class SyncCore:
    """Curriculum + lock + leases and accounting, without any transport (see the module docstring): one
    record per env holds its counters, leases, stream, liveness and what its endpoint keeps of it (its
    *contact*); one that left keeps its counters. Endpoints call :meth:`sweep` on their timers.

    Args:
        curriculum: The curriculum to serve.
        options: The endpoint's settings (:class:`~magister.sync.options.ServerOptions`, kept as
            :attr:`options`); its fields may also be given as keywords.

    Its :attr:`lock` is the curriculum's own (:attr:`~magister.curricula.base.Curriculum.lock`), so a
    learner reading the curriculum directly is serialised with the endpoint.
    """

    def __init__(self, curriculum: Curriculum, options: ServerOptions | None = None,
                 **overrides: Any) -> None:
        if not isinstance(curriculum, Curriculum):
            raise TypeError(f"curriculum must be a magister Curriculum, got {type(curriculum).__name__}")
        self.options = ServerOptions.of(options, **overrides)
        self.curriculum = curriculum
        self.lock = curriculum.lock
        self._envs: dict[int, _Env] = {}  # every env served, and the last ones that left
        self._left: deque[int] = deque()  # those that left, the oldest first
        self._keys: dict[Hashable, int] = {}  # the live envs by their contacts' keys
        self._evicted, self._evicted_envs = EnvCounters(), 0  # the totals and number of envs left before
        self.departures: Counter[str] = Counter()  # envs that left, by reason ("goodbye", "timeout" ...)
        self.rejoined_envs = 0  # registrations of envs that had registered before
        self.updates_lost_away = 0  # updates returning envs could not keep (reported in their hellos)
        self.errors_sent = 0  # error replies made (:meth:`refuse`)
        self.malformed_frames = 0  # frames from peers that never said hello
        # its own (in every welcome), then those of the instances whose ledger it restored (their env ids)
        self.tokens = [secrets.token_hex(8)]
        self._next_env = 0
        # lease ids are unique across server instances (each core numbers from a random base), so a
        # returning env's report names a lease this core holds, ended, or never issued
        self._first_task = self._next_task = secrets.randbits(40) << 16
        self._ended: OrderedDict[int, str] = OrderedDict()  # how the last KEEP_ENDED leases ended, by id
        self.log = RateLimitedLogger(logger, LOG_INTERVAL)
        space = getattr(curriculum, "task_space", None)
        # its task space's fingerprint ("": none), sent in every Welcome and compared with the env's
        self.task_space_fingerprint = space.fingerprint() if isinstance(space, TaskSpace) else ""

    @property
    def token(self) -> str:
        """The random token naming this core (sent in every welcome)."""
        return self.tokens[0]

    @property
    def heartbeat(self) -> float:
        """Seconds between heartbeats asked of idle envs (0: none)."""
        return 0.0 if self.options.env_timeout is None else self.options.env_timeout / 4

    # -- envs ---------------------------------------------------------------------------------------
    def register_env(self, hello: P.Hello | None = None) -> P.Welcome:
        """An env joins (or comes back: ``hello.rejoin``); returns its welcome.

        Raises:
            SyncRejected: ``"task_space_mismatch"``, naming both spaces, when the env's task space (its
                fingerprint in ``hello``) is not the curriculum's; ``"too_many_envs"`` when ``max_envs`` are
                live (an env coming back to its slot is admitted).
        """
        hello = hello or P.Hello(os.getpid())
        theirs, ours = hello.task_space, self.task_space_fingerprint
        if theirs and ours and fingerprint_digest(theirs) != fingerprint_digest(ours):
            raise SyncRejected(
                "task_space_mismatch",
                f"the env's task space {theirs} is not the curriculum's task space {ours}: it would "
                "decode the curriculum's tasks to other tasks. Build the env's task wrapper with the "
                "same space as the curriculum (same kind, size, parameters and order)",
            )
        with self.lock:
            env_id, resumed = self._admit(hello)
            env = self._envs[env_id]
            env.returned = env.returned or hello.rejoin is not None
            env.stream = env.stream if hello.stream is None else hello.stream
        cur = self.curriculum
        return P.Welcome(
            env_id=env_id, step_batch_size=self.options.step_batch_size,
            requires_step_updates=bool(cur.requires_step_updates),
            step_obs=bool(cur.requires_step_observations), step_infos=bool(cur.requires_step_infos),
            task_space=self.task_space_fingerprint, heartbeat=float(self.heartbeat), server_token=self.token,
            resumed=resumed,
        )

    def _admit(self, hello: P.Hello) -> tuple[int, bool]:
        """The env's slot (its own when it comes back to one) and whether it resumes restored leases."""
        back = self._envs.get(hello.rejoin)
        if back is not None and (back.connected or hello.server not in ("", *self.tokens)):
            back = None  # its id is served (to another env, or to it already), or another instance's
        if back is None and self.live_envs >= self.options.max_envs:
            raise SyncRejected("too_many_envs", f"at most {self.options.max_envs} live envs are served")
        if hello.rejoin is not None:
            self.rejoined_envs += 1
            self.updates_lost_away += hello.lost
        if back is None:
            self._next_env += 1
            self._envs[self._next_env - 1] = _Env(before=hello.reported)
            return self._next_env - 1, False
        if not back.live:  # back under its identity
            self._left.remove(hello.rejoin)
            self._envs[hello.rejoin] = _Env(back.counters, before=back.before)
            return hello.rejoin, False
        # restored from a checkpoint: the leases it no longer holds, and the episodes it reported beyond the
        # checkpoint's count, went to the instance that died after the checkpoint
        c, back.restored, reported = back.counters, None, hello.reported - back.before
        c.episodes_lost_to_restore += max(0, reported - c.episodes_reported)
        c.episodes_reported = max(c.episodes_reported, reported)
        holds = set(hello.holds)
        self._abandon(hello.rejoin, c, {i: back.leases.pop(i) for i in list(back.leases) if i not in holds})
        return hello.rejoin, True

    def counters(self, env_id: int) -> EnvCounters:
        """The counters of ``env_id``, live or among the last that left (``KeyError`` otherwise)."""
        env = self._envs.get(env_id)
        if env is None:
            raise KeyError(f"unknown env id {env_id!r}; known: {self.env_ids}")
        return env.counters

    def attach(self, env_id: int, contact: Any, key: Hashable | None = None) -> None:
        """Keep ``contact``, what an endpoint knows of live env ``env_id`` (once, after it registered): it is
        found by ``key`` (:meth:`contact`) and shown to :meth:`sweep`'s check until the env departs."""
        with self.lock:
            env = self._live(env_id)
            if key is not None and self._keys.setdefault(key, env_id) != env_id:
                raise ValueError(f"contact key {key!r} is live env {self._keys[key]}'s, not {env_id}'s")
            env.contact, env.key = contact, key

    def contact(self, key: Hashable) -> Any:
        """The contact of the live env registered with ``key`` (``None``: no such env)."""
        env = self._envs.get(self._keys.get(key))  # (None: no such key, or its env left meanwhile)
        return None if env is None else env.contact

    def contacts(self) -> list[Any]:
        """The contacts of the live envs (those given one)."""
        with self.lock:
            return [env.contact for env in self._envs.values() if env.live and env.contact is not None]

    def depart(self, env_id: int, reason: str = "goodbye") -> int:
        """Env ``env_id`` left (``reason``: ``"goodbye"``, ``"timeout"`` ...): the tasks it held are abandoned
        (counted, and passed to ``curriculum.on_task_abandoned``), its record reduced to its counters.
        Returns the number of tasks abandoned (0 for an env that is not live)."""
        with self.lock:
            env = self._envs.get(env_id)
            if env is None or not env.live:
                return 0
            self._abandon(env_id, env.counters, env.leases)
            self._keys.pop(env.key, None)
            self._envs[env_id] = _Env(env.counters, live=False, before=env.before)
            self._left.append(env_id)
            self.departures[reason] += 1
            while len(self._left) > self.options.keep_departed:
                self._evicted.add(self._envs.pop(self._left.popleft()).counters)
                self._evicted_envs += 1
        if env.leases or reason != "goodbye":
            logger.info("env %d left (%s); %d tasks it held abandoned", env_id, reason, len(env.leases))
        return len(env.leases)

    def _abandon(self, env_id: int, c: EnvCounters, leases: dict[int, tuple[Hashable, TaskSample]]) -> None:
        """End ``leases`` abandoned: counted, and each passed to ``curriculum.on_task_abandoned``."""
        self._end(leases, "abandoned")
        for _, sample in leases.values():
            try:
                self.curriculum.on_task_abandoned(sample.task, env_id)
            except Exception:
                self.log.exception("abandoned_hook", "%s.on_task_abandoned failed",
                                   type(self.curriculum).__name__)
        c.tasks_abandoned += len(leases)

    def heard(self, env_id: int, at: float | None = None) -> None:
        """Env ``env_id`` gave a sign of life (now, or at ``at`` if later than the last; endpoints call this
        for each message or before each :meth:`sweep`; in-process envs are never watched)."""
        if self.is_live(env_id):
            env = self._envs[env_id]
            env.heard = time.monotonic() if at is None else max(at, env.heard or at)

    def sweep(self, dead: Callable[[list], Iterable[int]] | None = None, reason: str = "dead") -> list[int]:
        """Declare gone (:meth:`depart`) the envs an endpoint's check names (``reason``; ``dead`` is given
        ``(env id, contact, last heard)`` per live env with a contact, without the lock), then, with
        ``env_timeout``, those silent past it or restored and not back within it (``"timeout"``); returns
        their ids. Each endpoint calls this on its timer."""
        with self.lock:
            live = [(env_id, env) for env_id, env in self._envs.items() if env.live]
        watched = [(env_id, env.contact, env.heard) for env_id, env in live if env.contact is not None]
        named = set() if dead is None else set(dead(watched))
        timeout = self.options.env_timeout
        since = -math.inf if timeout is None else time.monotonic() - timeout
        silent = [env_id for env_id, env in live if env_id not in named and env.silent(since)]
        with self.lock:
            gone = [env_id for env_id in [*named, *silent] if self.is_live(env_id)]
            for env_id in gone:
                self.depart(env_id, reason if env_id in named else "timeout")
        return gone

    def unknown_env(self, env_id: int | None = None, why: str = "") -> SyncRejected:
        """Refusing a message from an env this core does not serve (``why``: what the endpoint knows)."""
        who = "this sender" if env_id is None else f"env id {env_id}"
        return SyncRejected("unknown_env", f"{who} is unknown to this server{why}; send Hello again")

    def refuse(self, exc: SyncRejected, env_id: int | None = None) -> P.Error:
        """The error reply for ``exc`` (counted in :attr:`errors_sent`)."""
        self.errors_sent += 1
        return P.Error(exc.code, str(exc)[:2000], None if env_id is None else int(env_id))

    # -- the ledger in checkpoints ------------------------------------------------------------------
    def ledger_state(self) -> dict[str, Any]:
        """The live envs' counters and open leases, and the last ended leases, as plain data."""
        with self.lock:
            envs = {}
            for env_id, env in self._envs.items():
                if env.live:
                    leases = [[i, s.task, s.train, s.control, s.variant] for i, (_, s) in env.leases.items()]
                    envs[env_id] = {"counters": asdict(env.counters), "leases": leases, "stream": env.stream,
                                    "before": env.before}
            return {"envs": envs, "ended": [[i, outcome] for i, outcome in self._ended.items()],
                    "next_env": self._next_env, "tokens": list(self.tokens)}

    def load_ledger(self, state: dict[str, Any]) -> None:
        """Restore :meth:`ledger_state` (a restart under live workers): its envs are expected back under
        their identities (one not back within ``env_timeout`` is declared gone) and its leases are open
        again; a report for a lease that ended before the checkpoint is a repeat, one for a lease the dead
        instance issued after it is orphaned. Env ids are the checkpoint's from now on: the core takes a new
        token, and a returning env gets its slot back only if the checkpoint's lineage numbered its id."""
        with self.lock:
            self.tokens = [secrets.token_hex(8), *state.get("tokens", ())]
            for env_id in [e for e, env in self._envs.items() if env.live]:
                self.depart(env_id, "restore")
            for key, saved in state["envs"].items():
                env_id = int(key)
                if env_id in self._left:  # (this instance's env that left, under the same id: in the totals)
                    self._left.remove(env_id)
                    self._evicted.add(self._envs[env_id].counters)
                    self._evicted_envs += 1
                leases = {int(i): (task_key(t), TaskSample(t, train, control, variant))
                          for i, t, train, control, variant in saved["leases"]}
                stream = None if saved["stream"] is None else int(saved["stream"])
                counts = {k: v for k, v in saved["counters"].items() if k not in EnvCounters.DERIVED}
                self._envs[env_id] = _Env(EnvCounters(**counts), leases, stream, returned=True,
                                          restored=time.monotonic(), before=int(saved.get("before", 0)))
            for i, outcome in state["ended"]:
                self._end([int(i)], outcome)
            self._next_env = max(self._next_env, int(state["next_env"]))

    def _end(self, task_ids: Iterable[int], outcome: str, leases: dict[int, Any] | None = None) -> None:
        """Record how leases ``task_ids`` ended (the last ``KEEP_ENDED`` are kept), dropping them from
        ``leases`` (their env's) when given."""
        for task_id in task_ids:
            if leases is not None:
                leases.pop(task_id, None)
            self._ended[task_id] = outcome
        while len(self._ended) > KEEP_ENDED:
            self._ended.popitem(last=False)

    def _stale(self, env_id: int, c: EnvCounters, task_id: int) -> str | None:
        """Why a returning env's report for ``task_id`` is dropped (counted; the lease's first outcome
        stands): ``"repeat"`` (consumed), ``"late"`` (abandoned or returned) or ``"orphaned"`` (another server
        instance issued it); ``None``: it is not (other envs' reports for leases they lack are refused)."""
        if not self._envs[env_id].returned or task_id == P.ENV_TASK or task_id in self._envs[env_id].leases:
            return None
        ended = self._ended.get(task_id)
        if ended == "consumed":
            c.duplicates_dropped += 1
            return "repeat"
        if ended is not None:
            c.reports_late += 1
            return "late"
        if not self._first_task <= task_id < self._next_task:
            c.reports_orphaned += 1
            return "orphaned"
        return None

    def is_live(self, env_id: int) -> bool:
        """Whether ``env_id`` is registered and has not departed."""
        return env_id in self._envs and self._envs[env_id].live

    @property
    def live_envs(self) -> int:
        """Envs registered and not departed."""
        return len(self._envs) - len(self._left)

    def _live(self, env_id: int) -> _Env:
        """The record of live env ``env_id`` (``unknown_env`` refused otherwise)."""
        env = self._envs.get(env_id)
        if env is None or not env.live:
            raise self.unknown_env(env_id)
        return env

    # -- tasks --------------------------------------------------------------------------------------
    def assign_tasks(self, env_id: int, count: int) -> P.Tasks:
        """Sample ``count`` tasks for ``env_id`` and open a lease for each."""
        env = self._live(env_id)
        if not 1 <= count <= MAX_TASKS_PER_REQUEST:
            raise SyncRejected(
                "bad_request", f"task request for {count} tasks; expected 1..{MAX_TASKS_PER_REQUEST}"
            )
        with self.lock:
            held, most = len(env.leases), self.options.max_tasks_in_flight
            if held + count > most:
                raise SyncRejected(
                    "too_many_tasks",
                    f"env {env_id} asked for {count} tasks holding {held}: the server allows {most} in "
                    "flight per env (max_tasks_in_flight; a feed holds at most prefetch + 1)",
                )
            cur = self.curriculum
            try:
                rng = None if env.stream is None else cur.stream_rng(env.stream)
                samples = cur.sample_tasks(count) if rng is None else cur.sample_tasks_with(rng, count)
            except Exception as exc:
                self.log.exception("sample_failed", "%s.sample_tasks(%d) failed", type(cur).__name__, count)
                raise SyncRejected("sample_failed", f"curriculum.sample_tasks failed: {exc!r}") from exc
            if len(samples) != count or not all(isinstance(s, TaskSample) for s in samples):
                raise SyncRejected(
                    "sample_failed",
                    f"{type(cur).__name__}.sample_tasks({count}) must return {count} TaskSamples",
                )
            first = self._next_task
            self._next_task = first + count
            ids = tuple(range(first, first + count))
            env.leases.update((i, (task_key(s.task), s)) for i, s in zip(ids, samples))
            env.counters.tasks_sampled += count
        return P.Tasks(env_id, ids, *zip(*((s.task, s.train, s.control, s.variant) for s in samples)))

    def mark_unsent(self, msg: P.Tasks) -> None:
        """The tasks of ``msg`` could not be delivered (the env is gone): their leases end unsent."""
        with self.lock:
            if not self.is_live(msg.env_id):  # the env left meanwhile: its tasks were abandoned with it
                return
            env = self._envs[msg.env_id]
            self._end(msg.task_ids, "unsent", env.leases)
            env.counters.tasks_unsent += len(msg.task_ids)

    def _resolve(self, env_id: int, task_id: int, task: EncodedTask) -> TaskSample:
        """The sample handed out as ``task_id``, checked against the reported ``task`` (``ENV_TASK``: a task
        the env chose, checked against the task space)."""
        if task_id == P.ENV_TASK:
            if self.options.validate_tasks and not self.curriculum.task_space.contains_encoded(task):
                raise SyncRejected(
                    "invalid_task",
                    f"task {task!r:.200} is not an encoded task of {self.curriculum.task_space!r}",
                )
            return TaskSample(task)
        entry = self._envs[env_id].leases.get(task_id)
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
                f"but that id is task {entry[1].task!r:.200}",
            )
        return entry[1]

    # -- updates ------------------------------------------------------------------------------------
    def apply(self, msg: P.Message) -> P.Message | None:
        """Apply a :class:`~magister.sync.protocol.Report` (its updates in order, a refused one not stopping
        the others; then the tasks it asks for) or a :class:`~magister.sync.protocol.Goodbye`; returns the
        reply to send, if any (when an update was refused, the tasks ride on the exception's ``reply``).

        Raises:
            SyncRejected: an update was refused (the curriculum was not touched by it).
        """
        if type(msg) is P.Goodbye:
            return self._goodbye(msg)
        env_id = getattr(msg, "env_id", None)
        if type(msg) is not P.Report:  # a refused update of a known env, else a malformed frame
            with self.lock:
                if self.is_live(env_id):
                    self._envs[env_id].counters.updates_rejected += 1
                else:
                    self.malformed_frames += 1
            raise SyncRejected("bad_request", f"an env may not send {type(msg).__name__} messages")
        c = self._live(env_id).counters
        with self.lock:
            refused = []
            apply = {P.EpisodeEnd: self._episode, P.Steps: self._steps, P.Progress: self._progress}
            for update in msg.updates:
                try:
                    apply[type(update)](c, env_id, update)
                except SyncRejected as exc:
                    refused.append(exc)
            n = len(msg.updates)
            c.updates_applied += n - len(refused)
            c.updates_rejected += len(refused)
            if refused:
                first = refused[0]
                what = f"{len(refused)} of {n} updates refused; the first: {first}"
                exc = first if n == 1 else SyncRejected(first.code, what)
                if msg.request:  # the tasks asked for are still owed (or the reason they cannot be sampled)
                    try:
                        exc.reply = self.assign_tasks(env_id, msg.request)
                    except SyncRejected as failed:
                        exc.reply = self.refuse(failed, env_id)
                raise exc
            return self.assign_tasks(env_id, msg.request) if msg.request else None

    def answer(self, msg: P.Message) -> list[P.Message]:
        """The replies to ``msg`` from an env over a transport, in order: a hello's welcome (the env is then
        watched for liveness, see :meth:`heard`), :meth:`apply`'s reply, or for a refused message its
        :meth:`refuse` reply and then the tasks still owed to the env. Never raises."""
        env_id = getattr(msg, "env_id", None)
        try:
            if type(msg) is P.Hello:
                reply = self.register_env(msg)
                self.heard(reply.env_id)
            else:
                reply = self.apply(msg)
        except SyncRejected as exc:
            return [self.refuse(exc, env_id), *([] if exc.reply is None else [exc.reply])]
        except Exception as exc:  # the endpoint must answer every message
            self.log.exception("handler", "unexpected error applying a %s", type(msg).__name__)
            return [self.refuse(SyncRejected("internal", f"{type(exc).__name__}: {exc}"), env_id)]
        return [] if reply is None else [reply]

    def malformed(self, exc: P.ProtocolError | SyncRejected, env_id: int | None = None) -> P.Error:
        """The error reply to a frame not of this protocol, or (``exc`` a :class:`SyncRejected`) not for the
        sender it came from; counted as a malformed frame (``env_id``'s when the sender is known)."""
        with self.lock:
            if self.is_live(env_id):
                self._envs[env_id].counters.malformed_frames += 1
            else:
                self.malformed_frames += 1
        if isinstance(exc, P.ProtocolError):
            code = "version" if isinstance(exc, P.ProtocolVersionError) else "malformed"
            exc = SyncRejected(code, str(exc))
        return self.refuse(exc, env_id)

    def _episode(self, c: EnvCounters, env_id: int, end: P.EpisodeEnd) -> None:
        """End the lease; a finished episode (``end.ended``) goes to ``curriculum.on_episode`` as an
        :class:`~magister.curricula.base.Episode`, or one per agent of ``end.agents`` (each with the lease's
        flags)."""
        parts = end.agents or (P.AgentPart(None, end.ret, end.length, end.progress),)
        for part in parts:
            if not math.isfinite(part.ret):
                raise SyncRejected("non_finite", f"episode return must be finite, got {part.ret!r}")
            _check_progress("episode progress", part.progress)
        stale = self._stale(env_id, c, end.task_id)
        if stale != "repeat":
            c.episodes_reported += len(parts)
        if stale:
            return
        sample = self._resolve(env_id, end.task_id, end.task)
        cur = self.curriculum
        if end.ended and cur.requires_episode_updates:
            for part in parts:
                episode = Episode(sample.task, part.ret, part.length, part.progress, env_id, sample.train,
                                  sample.control, sample.variant, end.extras, part.agent)
                try:
                    cur.on_episode(episode)
                except Exception as exc:
                    raise self._curriculum_error(c, "on_episode", exc) from exc
        self._consume(c, env_id, end.task_id)
        if end.ended:
            c.episodes_applied += len(parts)
        else:
            c.episodes_abandoned += len(parts)

    def _consume(self, c: EnvCounters, env_id: int, task_id: int) -> None:
        """Lease ``task_id`` ends consumed (a no-op for a task the env chose)."""
        if task_id != P.ENV_TASK:
            self._end([task_id], "consumed", self._envs[env_id].leases)
            c.tasks_consumed += 1

    def _curriculum_error(self, c: EnvCounters, method: str, exc: Exception) -> SyncRejected:
        """The curriculum raised on an update: counted, logged with its name, and refused."""
        c.curriculum_errors += 1
        name = type(self.curriculum).__name__
        self.log.warning(f"refused:{method}", "%s.%s refused an update: %r", name, method, exc)
        return SyncRejected("curriculum_error", f"{name}.{method}: {exc!r}")

    def _steps(self, c: EnvCounters, env_id: int, steps: P.Steps) -> None:
        """Apply one part of step records (one :class:`~magister.curricula.base.StepBatch`)."""
        if not np.isfinite(steps.rewards).all():
            rewards = steps.rewards.tolist()
            raise SyncRejected("non_finite", f"step rewards must be finite, got {rewards!r:.200}")
        _check_progress("step progress", steps.progress)
        ids, n = steps.task_ids, len(steps)
        if any(self._stale(env_id, c, t) for t in set(ids.tolist())):
            return  # steps of a lease that ended (or another server's): dropped, counted
        tasks = []
        starts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist()]  # runs of steps on one task id
        for start, end in zip(starts, [*starts[1:], n]):
            tid, run = int(ids[start]), steps.tasks[start:end]
            if tid == P.ENV_TASK:  # tasks the env chose: each checked against the task space
                tasks.extend(self._resolve(env_id, tid, t).task for t in run)
                continue
            sample = self._resolve(env_id, tid, run[0])
            if not _all_equal(run):  # one id reported with several tasks: refused, naming one
                for t in run:
                    self._resolve(env_id, tid, t)
            tasks.extend([sample.task] * (end - start))
        obs = P.StackedObs(steps.obs) if isinstance(steps.obs, dict) else steps.obs
        batch = StepBatch(tasks, steps.rewards, steps.terminated, steps.truncated, steps.progress, obs=obs,
                          infos=steps.infos, env_id=env_id)
        if self.curriculum.requires_step_updates:
            try:
                self.curriculum.update_on_step_batch(batch, env_id)
            except Exception as exc:
                raise self._curriculum_error(c, "update_on_step_batch", exc) from exc
        c.steps_applied += n

    def _progress(self, c: EnvCounters, env_id: int, update: P.Progress) -> None:
        """Apply one progress update; ``done`` ends the lease."""
        _check_progress("task progress", update.progress)
        if self._stale(env_id, c, update.task_id):
            return
        sample = self._resolve(env_id, update.task_id, update.task)
        try:
            self.curriculum.update_task_progress(sample.task, update.progress, env_id)
        except Exception as exc:
            raise self._curriculum_error(c, "update_task_progress", exc) from exc
        if update.done:
            self._consume(c, env_id, update.task_id)
        c.progress_applied += 1

    def _goodbye(self, msg: P.Goodbye) -> P.Goodbye:
        """The env leaves, returning the tasks it did not start (one update); echoed as the ack."""
        env_id = msg.env_id
        c = self._live(env_id).counters
        with self.lock:
            flight = self._envs[env_id].leases
            returned = [i for i in msg.returned_task_ids if not self._stale(env_id, c, i)]
            unknown = [i for i in returned if i not in flight]
            if unknown:
                c.updates_rejected += 1
                what = f"env {env_id} returned task ids it does not hold: {unknown}"
                raise SyncRejected("unknown_task", what)
            c.updates_applied += 1
            self._end(returned, "returned", flight)
            c.tasks_returned += len(returned)
            self.depart(env_id, "goodbye")
        return P.Goodbye(env_id, msg.returned_task_ids)

    # -- learner side -------------------------------------------------------------------------------
    @property
    def env_ids(self) -> list[int]:
        """Ids of the live envs and of the last ones that left (see ``keep_departed``)."""
        return sorted(self._envs)

    def sync_metrics(self) -> dict[str, float]:
        """``sync/env<i>/<counter>`` per env of :attr:`env_ids`, ``sync/total/<counter>`` over every env that
        ever connected, and the counts of envs (``sync/envs``, ``_live``, ``_departed``, ``_rejoined``)."""
        out: dict[str, float] = {}
        with self.lock:
            totals = replace(self._evicted)
            for env_id, env in sorted(self._envs.items()):
                out.update(env.counters.metrics(f"sync/env{env_id}", env.connected))
                totals.add(env.counters)
            out.update(totals.metrics("sync/total", sum(env.connected for env in self._envs.values())))
            departed = len(self._left) + self._evicted_envs  # (and not back); "envs": ever registered
            envs = {"envs": self.live_envs + departed, "envs_live": self.live_envs, "envs_departed": departed,
                    "envs_rejoined": self.rejoined_envs, "updates_lost_away": self.updates_lost_away,
                    "malformed_frames_unattributed": self.malformed_frames}
        return {**out, **{f"sync/{name}": float(v) for name, v in envs.items()}}


class LearnerCalls:
    """The learner-side calls of an endpoint that holds a :class:`SyncCore` as ``core``: each the
    curriculum's method under the lock the endpoint's envs are served under."""

    core: SyncCore

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``curriculum.sample(k)`` (tasks for the learner's own use, not accounted)."""
        with self.core.lock:
            return self.core.curriculum.sample(k)

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``curriculum.sample_tasks(k)``."""
        with self.core.lock:
            return self.core.curriculum.sample_tasks(k)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Learner-side feedback: ``curriculum.update_on_demand(metrics)``."""
        with self.core.lock:
            self.core.curriculum.update_on_demand(metrics)

    def metrics(self) -> dict[str, float]:
        """The curriculum's metrics, the sync accounting (:meth:`SyncCore.sync_metrics`), the endpoint's."""
        with self.core.lock:
            out = dict(self.core.curriculum.metrics())
            out.update(self.core.sync_metrics())
            out.update(self.endpoint_metrics())
        return out

    def endpoint_metrics(self) -> dict[str, float]:
        """Counts of the endpoint itself, added to :meth:`metrics`."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """``curriculum.state_dict()`` with the sync ledger (open leases, counters) under
        ``"sync_ledger"``, for checkpoints (``magister.save(path, state)``)."""
        with self.core.lock:
            return {**self.core.curriculum.state_dict(), "sync_ledger": self.core.ledger_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``curriculum.load_state_dict(state)`` (resume from a checkpoint), and the ledger when the state
        has one (see :meth:`SyncCore.load_ledger`: workers still running resume their leases)."""
        state = dict(state)
        ledger = state.pop("sync_ledger", None)
        with self.core.lock:
            self.core.curriculum.load_state_dict(state)
            if ledger is not None:
                self.core.load_ledger(ledger)

    def in_flight(self, env_id: int) -> dict[int, EncodedTask]:
        """Tasks sent to ``env_id`` and not yet consumed, returned or abandoned, by task id (``{}``: none)."""
        with self.core.lock:
            env = self.core._envs.get(env_id)
            return {} if env is None else {i: entry[1].task for i, entry in env.leases.items()}


class ServedCurriculum:
    """Base of the learner-side endpoint objects (:class:`~magister.sync.zmq_server.CurriculumServer`, the Ray
    backend's ``RayCurriculumServer``): each has an ``address`` that env-side feeds connect to, and is
    accepted wherever an address is (sent to another process, it arrives as a :class:`ServerHandle`).

    :meth:`local_core` is how the env side reaches an endpoint of its own process without sockets."""

    address: str

    def local_core(self) -> SyncCore | None:
        """The core to feed directly from this endpoint's process (``None``: connect to :attr:`address`)."""
        return None

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def __enter__(self) -> ServedCurriculum:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:  # sent to another process, it arrives as a handle to its address
        return (ServerHandle, (self.address,))


@dataclass(frozen=True)
class ServerHandle:
    """A curriculum server as another process sees it: its :attr:`address`, and nothing else.

    A server object sent to a worker process, e.g. inside the closure of
    ``SubprocVecEnv([lambda: GymnasiumSyncWrapper(env, server.address)] * 8)`` under the spawn or forkserver
    start method, arrives as one of these, so ``server.address`` and ``GymnasiumSyncWrapper(env, server)``
    work in the worker as written. The curriculum itself stays in the process that served it: learner-side
    calls (``metrics()``, ``state_dict()`` ...) raise ``AttributeError`` here, saying where to make them.

    >>> import copy
    >>> handle = copy.deepcopy(ServerHandle("ipc:///tmp/x.sock"))  # (pickling gives the same)
    >>> handle.address, handle
    ('ipc:///tmp/x.sock', ServerHandle(address='ipc:///tmp/x.sock'))
    """

    address: str

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or "://" not in self.address:
            raise TypeError(f"a server handle needs the server's address (a str), got {self.address!r}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{name!r}: this is a handle to the curriculum server at {self.address} in another process; it "
            "has only .address (give it, or the handle, to GymnasiumSyncWrapper). Call the server's "
            "learner-side methods in the process that called serve()"
        )
