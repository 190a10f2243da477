"""The Ray backend of the sync layer: the curriculum in a named Ray actor.

This is the ZeroMQ server/client pair of :mod:`magister.sync.server` and :mod:`magister.sync.client`
with Ray as the transport, for environments that run in Ray workers (RLlib env runners, Ray tasks and
actors) on one machine or across a Ray cluster.

* :func:`serve_ray` starts a named Ray actor holding the curriculum inside a
  :class:`~magister.sync.server.SyncCore`, the same object the ZeroMQ server feeds, so validation,
  accounting and metrics are identical on both paths. It returns a :class:`RayCurriculumServer`, the
  learner-side proxy (``sample``, ``update_on_demand``, ``metrics``, ``state_dict``, ...) whose
  :attr:`~RayCurriculumServer.address` is ``"ray://<name>"`` (``"ray://<namespace>/<name>"`` when a
  namespace is given).
* :class:`RayClient` is the env side. :func:`magister.sync.client.connect` returns one for any
  ``"ray://..."`` source, so ``GymnasiumSyncWrapper(env, server.address)`` works unchanged. The client
  looks the actor up by name lazily, in the process that first uses it (``ray.get_actor``); it prefetches
  tasks as object refs (the replies of earlier calls) and blocks (``ray.get`` with a timeout) only when a
  ``reset`` finds no task ready; it sends updates as fire-and-forget actor calls whose replies it reads
  later, in order, when it needs the tasks they carry (refusals are logged then); and it returns unused
  tasks when it closes.

**Calls, and what they cost.** An actor call costs a few hundred µs of CPU on each side (measured on
the 2-core development machine: ~150-400 µs to submit, ~200-400 µs to run in the actor, ~200 µs more for a
``ray.wait`` poll), against a few µs for a ZeroMQ message, so the client makes as few as the semantics
allow: one call carries every message the env has for the actor (:meth:`CurriculumActor.handle_batch`),
and the client polls nothing. Tasks are asked for only when none is left ready or on its way, for as many
as the env plays in ``max_update_delay`` (at least 1, at most ``prefetch``, default 32), in the call of the
episode update that precedes the reset taking the last one; episode and progress updates are held until
the next call. **Bounds:** an update is held at most ``update_batch`` updates (default 32) and about
``max_update_delay`` seconds (default 0.5 s; a per-process background thread sends what is due every
quarter of it, also while the env is idle); a large update (step records carrying observations, 64 KB or
more) goes out at once with the held ones rather than be kept in memory; :meth:`RayClient.flush` and
``close`` send everything. A task is
sampled at most ``prefetch`` episodes, and for episodes longer than ``max_update_delay`` one episode,
before it is played. An env with fast episodes (NetHack, ~13 ms; ~25 ms of wall time with four such envs
on two cores) so makes one call per ~20 episodes instead of three calls and a ``ray.wait`` per episode
(the time bound, not the count, sets the batch; the defaults are larger than the socket client's, 8,
because a call costs far more than a message); one with episodes longer than ``max_update_delay`` makes
one per episode, its task sampled one episode ahead, as over sockets. ``max_update_delay=0`` holds
nothing (one call per update).

**Messages.** Every message is encoded by :func:`magister.sync.protocol.encode` into a single ``bytes``
frame (arrays inline), and the actor decodes it with :func:`~magister.sync.protocol.decode`: the message
layout, the protocol-version check and the field validation are exactly those of the socket path.
Malformed messages and refused updates are answered with an :class:`~magister.sync.protocol.Error` and
counted; the curriculum is not touched (a refused update that asked for tasks still gets them).

**Ordering and exactly-once.** The actor runs one call at a time (``max_concurrency=1``), and Ray runs
the calls of one caller to one such actor in submission order; a call applies its messages in order. So
an env's updates are applied in the order it made them and its goodbye, which carries the updates still
held, is applied after all of them. Each task the actor hands out has an id; the env acknowledges it with
its episode (or completion) update or returns it unused at close, so the actor's ``sync/...`` counters
show every task sampled, consumed, returned and still in flight.

**Faults.** A client that cannot find the actor (wrong name or namespace, not started yet) or whose
actor died raises :class:`~magister.sync.client.ServerUnavailableError` naming the actor after its
timeout, unless ``fallback_task_space`` opts into local sampling (logged once, feedback dropped; held
updates are counted in ``stats["updates_dropped"]``). A worker killed while holding updates loses them
with it: the tasks they reported stay "in flight" in the actor's counters, next to its unplayed
prefetched tasks, which is how the loss shows.

These addresses name an *actor*, not a cluster: ``"ray://host:port"`` addresses given to ``ray.init``
(Ray Client) are a different thing; pass those as ``RayClient(..., ray_address=...)``.

Namespaces: a non-detached actor created without a namespace lives in the driver job's namespace, which
the job's own workers share, so ``"ray://<name>"`` finds it from them. To reach the curriculum from
another job (a detached actor, a second driver), give a ``namespace``.

Example (not run as a doctest: it starts Ray)::

    import ray
    from magister.sync.ray_backend import serve_ray

    ray.init()
    server = serve_ray(curriculum, name="my_curriculum")
    make_env = lambda: GymnasiumSyncWrapper(MyTaskWrapper(gym.make("MyEnv-v0")), server.address)
    ...                                    # build envs in Ray workers with make_env
    print(server.metrics())                # curriculum metrics + sync accounting
    server.close()
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
except ImportError as _exc:  # pragma: no cover - exercised only without ray
    raise ImportError(
        "magister.sync.ray_backend needs Ray; install it with `pip install 'magister[ray]'` "
        "(or `pip install ray`)"
    ) from _exc

from ..curricula.base import Curriculum, TaskSample
from ..task_spaces.base import EncodedTask, TaskSpace
from . import client as _client  # (its _pid: this process's id, kept current across forks)
from . import protocol as P
from .client import (
    DEFAULT_MAX_UPDATE_DELAY,
    DEFAULT_TIMEOUT,
    Assignment,
    ServerUnavailableError,
    SyncError,
    TaskFeed,
    _hello,
    _register_for_flushing,
    _StepBuffer,
    _unregister_for_flushing,
)
from .server import DEFAULT_STEP_BATCH_SIZE, ServedCurriculum, ServerHandle, SyncCore, SyncRejected

logger = logging.getLogger(__name__)

__all__ = [
    "ADDRESS_PREFIX",
    "DEFAULT_ACTOR_NAME",
    "CurriculumActor",
    "RayClient",
    "RayCurriculumServer",
    "parse_ray_address",
    "ray_address",
    "serve_ray",
]

#: Every Ray backend address starts with this.
ADDRESS_PREFIX = "ray://"
#: Name of the curriculum actor when none is given.
DEFAULT_ACTOR_NAME = "magister_curriculum"
#: Calls a client may have in flight (sent, reply not yet seen) before it waits for the actor.
DEFAULT_MAX_PENDING = 1024
#: Most tasks a Ray client asks for in one call (and so holds ahead of need); see :class:`RayClient`.
DEFAULT_RAY_PREFETCH = 32
#: Most updates a Ray client holds for one call.
DEFAULT_RAY_UPDATE_BATCH = 32
#: The clock of the client's time bounds (a module attribute, so tests can replace it).
_now = time.monotonic
#: Whether clients register with the per-process background flusher (tests with a fake clock turn it off).
_background_flush = True
#: Messages an env may send to the actor.
_ENV_MESSAGES = (P.TaskRequest, P.StepUpdate, P.EpisodeUpdate, P.ProgressUpdate, P.Goodbye)
#: Arrays at least this large travel out of band: as numpy arrays next to the header, which Ray moves
#: through its object store without pickling or copying them again (the actor reads them in place).
_OOB_BYTES = 64 * 1024


def ray_address(name: str, namespace: str | None = None) -> str:
    """The address of the curriculum actor ``name`` (in ``namespace``).

    >>> ray_address("cur")
    'ray://cur'
    >>> ray_address("cur", "team")
    'ray://team/cur'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"actor name must be a non-empty str, got {name!r}")
    if namespace is None:
        if "/" in name:
            raise ValueError(
                f"actor name {name!r} contains '/', which the address reserves to separate the namespace; "
                "pass namespace=... or choose another name"
            )
        return ADDRESS_PREFIX + name
    if not isinstance(namespace, str) or not namespace or "/" in namespace:
        raise ValueError(f"namespace must be a non-empty str without '/', got {namespace!r}")
    return f"{ADDRESS_PREFIX}{namespace}/{name}"


def parse_ray_address(address: str) -> tuple[str, str | None]:
    """``(name, namespace)`` of a ``"ray://[<namespace>/]<name>"`` address (inverse of :func:`ray_address`).

    >>> parse_ray_address("ray://team/cur")
    ('cur', 'team')
    >>> parse_ray_address("ray://cur")
    ('cur', None)
    >>> parse_ray_address("tcp://127.0.0.1:5555")
    Traceback (most recent call last):
    ...
    ValueError: not a Ray backend address: 'tcp://127.0.0.1:5555'; expected 'ray://<name>' or 'ray://<namespace>/<name>'
    """
    if not isinstance(address, str) or not address.startswith(ADDRESS_PREFIX):
        raise ValueError(
            f"not a Ray backend address: {address!r}; expected 'ray://<name>' or 'ray://<namespace>/<name>'"
        )
    rest = address[len(ADDRESS_PREFIX) :]
    namespace: str | None = None
    if "/" in rest:
        namespace, rest = rest.split("/", 1)
    if not rest or namespace == "":
        raise ValueError(
            f"Ray backend address {address!r} names no actor; expected 'ray://<name>' or "
            "'ray://<namespace>/<name>'"
        )
    return rest, namespace


#: One encoded message on the Ray path (see :func:`_pack`).
Frame = bytes | tuple[Any, ...]


def _pack(msg: P.Message) -> Frame:
    """One protocol message: one ``bytes`` frame, or for a message with large arrays (step records with
    observations) the tuple ``(header, array_bytes, ...)``, each large array's bytes as a flat ``uint8``
    numpy array (a view, not a copy) so that Ray ships it out of band."""
    return _as_frame(P.encode(msg, oob_threshold=_OOB_BYTES))


def _as_frame(frames: list[Any]) -> Frame:
    """Encoded frames as :func:`_pack` returns them."""
    if len(frames) == 1:
        return bytes(frames[0])
    return (bytes(frames[0]), *(np.frombuffer(f, dtype=np.uint8) for f in frames[1:]))


def _unpack(frame: Any) -> P.Message:
    """The message of a frame made by :func:`_pack` (``ProtocolError`` when it is not one)."""
    if isinstance(frame, tuple):
        if not all(isinstance(f, (bytes, np.ndarray)) for f in frame):
            raise P.ProtocolError("malformed message: the frames of a message must be bytes or uint8 arrays")
        return P.decode(list(frame))
    return P.decode([frame])


def _describe(name: str, namespace: str | None) -> str:
    return f"Ray actor {name!r}" + (f" in namespace {namespace!r}" if namespace else "")


# -- the actor ---------------------------------------------------------------------------------------


class CurriculumActor:
    """The body of the curriculum actor (made a Ray actor by :func:`serve_ray`).

    Env clients call :meth:`handle` with encoded protocol messages; the learner calls the other methods
    through :class:`RayCurriculumServer`. All curriculum access holds the core's lock.

    Args:
        curriculum: The curriculum (a copy of the learner's object: it was pickled into the actor).
        step_batch_size: Steps per step update that clients are told to batch.
        validate_tasks: Check tasks the server did not hand out against the task space.
        max_envs: Most envs this actor registers.
    """

    def __init__(
        self,
        curriculum: Curriculum,
        step_batch_size: int = DEFAULT_STEP_BATCH_SIZE,
        validate_tasks: bool = True,
        max_envs: int = 65536,
    ) -> None:
        self.core = SyncCore(curriculum, step_batch_size=step_batch_size, validate_tasks=validate_tasks)
        self.curriculum = curriculum
        self.max_envs = int(max_envs)
        self.errors_sent = 0

    def _error(self, code: str, message: str, env_id: int = -1) -> bytes:
        self.errors_sent += 1
        return _pack(P.Error(code, message[:2000], max(-1, int(env_id))))

    def _apply_frame(self, frame: Frame, out: list[bytes]) -> None:
        """Apply one encoded message from an env, appending its encoded replies (usually none or one; a
        refused update that asked for tasks gets the Error, then the Tasks). Never raises: a bad message
        is answered with an encoded Error (and counted)."""
        try:
            msg = _unpack(frame)
        except P.ProtocolVersionError as exc:
            self.core.note_malformed(None)
            out.append(self._error("version", str(exc)))
            return
        except P.ProtocolError as exc:
            self.core.note_malformed(None)
            out.append(self._error("malformed", str(exc)))
            return
        try:
            if isinstance(msg, P.Hello):
                if len(self.core.env_ids) >= self.max_envs:
                    out.append(
                        self._error("too_many_envs", f"the curriculum accepts at most {self.max_envs} envs")
                    )
                    return
                try:
                    welcome = self.core.register_env(msg)
                except SyncRejected as exc:
                    out.append(self._error(exc.code, str(exc)))
                    return
                logger.debug("env %d joined (pid %d, %r)", welcome.env_id, msg.pid, msg.name)
                out.append(_pack(welcome))
                return
            env_id = getattr(msg, "env_id", -1)
            if not isinstance(msg, _ENV_MESSAGES):
                self.core.note_malformed(env_id)
                out.append(
                    self._error("bad_request", f"an env may not send {type(msg).__name__} messages", env_id)
                )
                return
            try:
                reply = self.core.apply(msg)
            except SyncRejected as exc:
                out.append(self._error(exc.code, str(exc), env_id))
                owed = getattr(exc, "reply", None)  # tasks the refused update asked for
                if owed is not None:
                    out.append(_pack(owed))
                return
            if reply is not None:
                out.append(_pack(reply))
        except Exception as exc:  # the actor must answer every message
            logger.exception("curriculum actor: unexpected error handling a %s", type(msg).__name__)
            out.append(self._error("internal", f"{type(exc).__name__}: {exc}", getattr(msg, "env_id", -1)))

    def handle(self, frame: Frame) -> bytes | None:
        """Apply one encoded message from an env; returns the encoded reply, if any.

        For messages with at most one reply (a hello, a task request); :meth:`handle_batch` returns all of
        them. Never raises for a bad message: it is answered with an encoded Error (and counted).
        """
        out: list[bytes] = []
        self._apply_frame(frame, out)
        for extra in out[1:]:  # tasks owed after a refusal cannot be returned here: count them unsent
            msg = P.decode([extra])
            if isinstance(msg, P.Tasks):
                self.core.mark_unsent(msg)
        return out[0] if out else None

    @ray.method(enable_task_events=False)  # called a few times per episode per env: no per-call events
    def handle_batch(self, frames: list[Frame]) -> list[bytes] | None:
        """Apply several encoded messages from one env, in order (one actor call for all of them).

        Returns the encoded replies in order (Tasks for task requests, Errors for refused messages, the
        Goodbye's acknowledgement), or ``None`` when there are none (updates that were all applied).
        Never raises for bad input.
        """
        if not isinstance(frames, (list, tuple)):
            self.core.note_malformed(None)
            what = type(frames).__name__
            return [self._error("malformed", f"expected a list of encoded messages, got {what}")]
        out: list[bytes] = []
        for frame in frames:
            self._apply_frame(frame, out)
        return out or None

    # -- learner side -------------------------------------------------------------------------------
    def ping(self) -> int:
        """The actor's pid (a liveness check)."""
        return os.getpid()

    def sample(self, k: int = 1) -> list[EncodedTask]:
        with self.core.lock:
            return self.curriculum.sample(k)

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        with self.core.lock:
            return self.curriculum.sample_tasks(k)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        with self.core.lock:
            self.curriculum.update_on_demand(metrics)

    def metrics(self) -> dict[str, float]:
        with self.core.lock:
            out = dict(self.curriculum.metrics())
            out.update(self.core.sync_metrics())
            out["sync/errors_sent"] = float(self.errors_sent)
        return out

    def state_dict(self) -> dict[str, Any]:
        with self.core.lock:
            return self.curriculum.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.core.lock:
            self.curriculum.load_state_dict(state)

    def in_flight(self, env_id: int) -> dict[int, EncodedTask]:
        return self.core.in_flight(env_id)

    def call(self, method: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not isinstance(method, str) or method.startswith("_"):
            raise ValueError(f"method must be the name of a public curriculum method, got {method!r}")
        with self.core.lock:
            fn = getattr(self.curriculum, method, None)
            if not callable(fn):
                raise AttributeError(f"{type(self.curriculum).__name__} has no method {method!r}")
            return fn(*args, **(kwargs or {}))

    def curriculum_type(self) -> str:
        return type(self.curriculum).__name__


# -- learner-side proxy ------------------------------------------------------------------------------


class RayCurriculumServer(ServedCurriculum):
    """Learner-side proxy of a curriculum actor. Create it with :func:`serve_ray` (or :meth:`attach`).

    The curriculum lives in the actor: the object given to :func:`serve_ray` was *copied* into it, so
    read and change it only through these methods. The actor runs one call at a time, so a call waits
    behind the env messages already queued. Each blocks for the actor's reply, at most
    ``timeout`` seconds (then :class:`~magister.sync.client.ServerUnavailableError`); exceptions the
    curriculum raises are re-raised here (as Ray's subclass of the original exception type).

    Attributes:
        name: The actor's name.
        namespace: Its Ray namespace (``None``: the creating job's).
        actor: The Ray actor handle.
        timeout: Seconds each call waits for the actor.
    """

    def __init__(
        self, actor: Any, name: str, namespace: str | None, *, owner: bool, timeout: float = 30.0
    ) -> None:
        self.actor = actor
        self.name = name
        self.namespace = namespace
        self.timeout = float(timeout)
        self._owner = bool(owner)
        self._closed = False
        self.address: str = ray_address(name, namespace)

    @classmethod
    def attach(cls, address: str, *, timeout: float = 30.0) -> RayCurriculumServer:
        """A proxy of the running curriculum actor at ``address`` (``close`` does not kill it).

        Raises:
            ServerUnavailableError: no such actor appeared within ``timeout`` seconds.
        """
        name, namespace = parse_ray_address(address)
        actor = _lookup(name, namespace, timeout)
        return cls(actor, name, namespace, owner=False, timeout=timeout)

    def _get(self, ref: Any, what: str) -> Any:
        if self._closed:
            raise SyncError(f"{self!r} is closed")
        try:
            return ray.get(ref, timeout=self.timeout)
        except GetTimeoutError:
            raise ServerUnavailableError(
                f"the curriculum {_describe(self.name, self.namespace)} did not answer {what} within "
                f"{self.timeout:g}s"
            ) from None
        except RayActorError as exc:
            raise ServerUnavailableError(
                f"the curriculum {_describe(self.name, self.namespace)} is dead ({what}): {exc}"
            ) from exc

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``curriculum.sample(k)`` in the actor (tasks for the learner's own use, not accounted)."""
        return self._get(self.actor.sample.remote(k), "sample()")

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``curriculum.sample_tasks(k)`` in the actor."""
        return self._get(self.actor.sample_tasks.remote(k), "sample_tasks()")

    def update_on_demand(self, metrics: dict[str, Any], *, wait: bool = True) -> Any:
        """Learner-side feedback, ``curriculum.update_on_demand(metrics)`` in the actor.

        With ``wait=False`` the call is fire-and-forget and its object ref is returned (``ray.get`` it
        to see an error); with ``wait=True`` it returns ``None`` once applied.
        """
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        if self._closed:
            raise SyncError(f"{self!r} is closed")
        ref = self.actor.update_on_demand.remote(metrics)
        if not wait:
            return ref
        self._get(ref, "update_on_demand()")
        return None

    def metrics(self) -> dict[str, float]:
        """The curriculum's metrics plus the sync accounting (``sync/env<i>/...``, ``sync/total/...``)."""
        return self._get(self.actor.metrics.remote(), "metrics()")

    def state_dict(self) -> dict[str, Any]:
        """``curriculum.state_dict()`` (for checkpoints)."""
        return self._get(self.actor.state_dict.remote(), "state_dict()")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``curriculum.load_state_dict(state)`` (resume from a checkpoint)."""
        self._get(self.actor.load_state_dict.remote(state), "load_state_dict()")

    def in_flight(self, env_id: int) -> dict[int, EncodedTask]:
        """Tasks sent to ``env_id`` and not yet consumed or returned, by task id."""
        return self._get(self.actor.in_flight.remote(env_id), "in_flight()")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a public method of the curriculum in the actor, e.g. ``call("distribution")``."""
        if not isinstance(method, str) or method.startswith("_"):
            raise ValueError(f"method must be the name of a public curriculum method, got {method!r}")
        return self._get(self.actor.call.remote(method, args, kwargs), f"call({method!r})")

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """Kill the actor (only if this proxy created it) and stop using it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owner:
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception as exc:  # already gone, or Ray shut down first
                logger.debug("curriculum actor %r: kill failed: %s", self.name, exc)
            logger.info("curriculum %s closed", _describe(self.name, self.namespace))

    def __enter__(self) -> RayCurriculumServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        # sent to a worker, it arrives as a handle to its address (RayCurriculumServer.attach(address) gives
        # a learner-side proxy there, when one is really wanted)
        return (ServerHandle, (self.address,))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"RayCurriculumServer({self.address!r}, {state})"


def _lookup(name: str, namespace: str | None, timeout: float) -> Any:
    """``ray.get_actor`` retried until ``timeout``; :class:`ServerUnavailableError` naming the actor."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return ray.get_actor(name, namespace=namespace)
        except ValueError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailableError(
                    f"no curriculum {_describe(name, namespace)} found within {timeout:g}s; is serve_ray() "
                    "running in this Ray cluster, under this name and namespace? (a non-detached actor "
                    f"created without a namespace is only visible to its own job) [{exc}]"
                ) from None
            time.sleep(min(delay, left))
            delay = min(2 * delay, 0.5)


def serve_ray(
    curriculum: Curriculum,
    name: str = DEFAULT_ACTOR_NAME,
    namespace: str | None = None,
    *,
    detached: bool = False,
    step_batch_size: int = DEFAULT_STEP_BATCH_SIZE,
    validate_tasks: bool = True,
    max_envs: int = 65536,
    actor_options: dict[str, Any] | None = None,
    timeout: float = 30.0,
) -> RayCurriculumServer:
    """Start the curriculum in a named Ray actor; returns the learner-side :class:`RayCurriculumServer`.

    Ray must be initialised (``ray.init(...)``), or Ray initialises a local instance itself.

    Args:
        curriculum: Any :class:`~magister.curricula.base.Curriculum`; it is pickled into the actor, so
            use the returned proxy (not this object) from now on.
        name: The actor's name; workers find it through ``server.address``.
        namespace: Ray namespace of the actor (needed to reach it from other jobs).
        detached: Keep the actor alive after the driver exits (``lifetime="detached"``; close it
            explicitly).
        step_batch_size: Steps a client batches per step update (only when the curriculum
            ``requires_step_updates``).
        validate_tasks: Check tasks that clients chose themselves against the task space.
        max_envs: Most envs the actor registers.
        actor_options: Extra ``.options(...)`` for the actor (e.g. ``num_cpus``, ``resources``); the
            name, namespace, lifetime and ``max_concurrency=1`` are set here.
        timeout: Seconds to wait for the actor to start, and for each proxy call.

    Raises:
        TypeError: ``curriculum`` is not a Curriculum.
        ValueError: a bad name or namespace, reserved ``actor_options``, or an actor of that name exists.
        ServerUnavailableError: the actor did not start within ``timeout``.
    """
    if not isinstance(curriculum, Curriculum):
        raise TypeError(f"curriculum must be a magister Curriculum, got {type(curriculum).__name__}")
    ray_address(name, namespace)  # validates both
    options = dict(actor_options or {})
    reserved = {"name", "namespace", "lifetime", "max_concurrency", "get_if_exists"} & set(options)
    if reserved:
        raise ValueError(f"actor_options may not set {sorted(reserved)}; they are serve_ray's arguments")
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        pass
    else:
        raise ValueError(
            f"a {_describe(name, namespace)} already exists; close its server or choose another name"
        )
    options.setdefault("num_cpus", 0)
    options.setdefault("max_restarts", 0)
    cls = ray.remote(CurriculumActor).options(
        name=name,
        namespace=namespace,
        lifetime="detached" if detached else None,
        max_concurrency=1,  # one call at a time: each caller's messages are applied in order
        **options,
    )
    actor = cls.remote(curriculum, step_batch_size, validate_tasks, max_envs)
    server = RayCurriculumServer(actor, name, namespace, owner=True, timeout=timeout)
    try:
        server._get(actor.ping.remote(), "its start-up")
    except Exception:
        server.close()
        raise
    logger.info("curriculum %s served by %s", type(curriculum).__name__, _describe(name, namespace))
    return server


# -- env side ----------------------------------------------------------------------------------------


class RayClient(TaskFeed):
    """Env-side client of a curriculum actor (see the module docstring); the Ray twin of
    :class:`~magister.sync.client.CurriculumClient`.

    Serialisable: only the address and options travel; the actor is looked up on first use, in the
    process that uses it. If that process is not connected to Ray, it connects with
    ``ray.init(address=ray_address or "auto")``. A process *forked* from a Ray worker or driver cannot use
    Ray (its connection is the parent's): build such envs in Ray workers, or use the ZeroMQ backend.

    **Calls.** An actor call costs far more than a socket message (a few hundred µs of CPU on each side),
    so the client makes few of them: it asks for tasks only when it has none left ready or on the way, for
    as many as it plays in ``max_update_delay`` seconds (at least 1, at most ``prefetch``), and it holds
    episode and progress updates until its next call, at most ``update_batch`` of them and about
    ``max_update_delay`` seconds (a background thread sends what is due, also while the env is idle).
    An env with fast episodes thus makes one call per up to ``prefetch`` episodes; an env whose episodes
    take longer than ``max_update_delay`` one call per episode, with its task sampled one episode ahead,
    as over sockets. Step updates (batches of ``step_batch_size`` steps) are held like the others, but a
    large one (observations, 64 KB or more) goes out at once, taking the held updates along.
    :meth:`flush` and :meth:`close` send everything held; ``max_update_delay=0``
    holds nothing. Thread-safe against that background thread; one env thread per client, as for every
    feed.

    Args:
        address: ``"ray://<name>"`` or ``"ray://<namespace>/<name>"`` (``server.address``).
        prefetch: Most tasks asked for in one call, and so most tasks held ahead of need (0: ask for each
            task when it is needed, and wait for it).
        timeout: Seconds to wait for the actor (lookup, a task, back-pressure) before
            :class:`~magister.sync.client.ServerUnavailableError` (or the fallback).
        strip_keys: Keys removed from dict observations and infos before step records are sent.
        send_obs, send_infos: Whether step records carry observations / infos.
        fallback_task_space: Opt-in: when the actor is unreachable, sample tasks locally from this space
            (logged once) instead of raising. Feedback is then dropped.
        close_timeout: Seconds :meth:`close` waits for outstanding tasks and the goodbye's reply.
        max_pending_updates: Calls (batches of updates, task requests) in flight before the client waits
            for the actor (back-pressure).
        update_batch: Most updates held for one call.
        max_update_delay: Most seconds an update is held (``math.inf``: no time bound, only
            ``update_batch``; 0: nothing is held). It also sets how many tasks are asked for at once:
            the number of episodes the env plays in that time.
        name: A label for the actor's logs.
        ray_address: Cluster address for ``ray.init`` when this process is not connected to Ray.
        curve_server_key: Not supported (ZeroMQ only); given, it raises ``ValueError``.
        task_space, stream: As for :class:`~magister.sync.client.CurriculumClient`.
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
        self.actor_name, self.namespace = parse_ray_address(address)
        if curve_server_key is not None:
            raise ValueError(
                "curve_server_key applies to ZeroMQ tcp:// addresses; the Ray backend travels over Ray's own "
                "transport (secure the Ray cluster instead)"
            )
        mp = max_pending_updates
        if isinstance(mp, bool) or not isinstance(mp, int) or mp < 1:
            raise ValueError(f"max_pending_updates must be a positive int, got {max_pending_updates!r}")
        self._set_holding(update_batch, max_update_delay)
        self._set_options(
            address, prefetch, timeout, strip_keys, send_obs, send_infos, fallback_task_space,
            close_timeout, name, task_space, stream,
        )
        self.max_pending_updates = max_pending_updates
        self.ray_address = ray_address
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._pid: int | None = None
        self._actor: Any = None
        self._method: Any = None  # the actor's handle_batch
        self.env_id: int | None = None
        self.requires_step_updates = False
        self.requires_episode_updates = True
        self.step_batch_size = 1
        self._buffer: deque[Assignment] = deque()
        self._calls: deque[tuple[Any, int]] = deque()  # (ref of a call's replies, tasks it asked for)
        self._outstanding = 0  # tasks asked for, not yet received
        self._held: list[Frame] = []  # encoded updates waiting for the next call
        self._lock = threading.RLock()  # the env's thread and the background flusher
        self._send_by = math.inf  # when the oldest held update must go out
        self._last_reset: float | None = None
        self._episode_s: float | None = None  # running mean of the time between two tasks
        self._steps: _StepBuffer | None = None
        self._fallback = False
        self._closed = False
        self._goodbye_acked = False
        self.stats = dict.fromkeys(
            ("tasks_received", "updates_sent", "updates_dropped", "errors_received", "send_waits", "calls"), 0
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_actor", "_method", "_buffer", "_calls", "_held", "_lock", "_steps", "_pid"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    @property
    def actor_description(self) -> str:
        """``"Ray actor '<name>' in namespace '<ns>'"``, as used in error messages."""
        return _describe(self.actor_name, self.namespace)

    @property
    def held_updates(self) -> int:
        """Updates waiting for the next actor call."""
        return len(self._held)

    # -- connection ---------------------------------------------------------------------------------
    def _ensure(self) -> bool:
        """Connect in this process if needed; False when running on the local fallback."""
        if self._pid is not None and self._pid != _client._pid:  # forked: the parent's handles are not ours
            logger.debug("ray client: process forked (pid %s -> %s); reconnecting", self._pid, os.getpid())
            self._reset_process_state()
        if self._closed:
            raise SyncError("this client is closed")
        if self._fallback:
            return False
        if self._actor is not None:
            return True
        self._pid = os.getpid()
        if not ray.is_initialized():
            target = self.ray_address or "auto"
            logger.info("ray client: this process is not connected to Ray; ray.init(address=%r)", target)
            try:
                ray.init(address=target, namespace=self.namespace, ignore_reinit_error=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                return self._go_fallback(f"a Ray cluster at {target!r} ({exc})")
        try:
            self._actor = _lookup(self.actor_name, self.namespace, self.timeout)
        except ServerUnavailableError as exc:
            return self._go_fallback("the actor", str(exc))
        self._method = self._actor.handle_batch
        hello = _hello(os.getpid(), self.name, self.task_space, self.stream)
        reply = self._get(self._actor.handle.remote(_pack(hello)), "a welcome")
        if self._fallback:
            return False
        reply = self._decode(reply)
        if not isinstance(reply, P.Welcome):
            raise SyncError(f"the curriculum {self.actor_description} refused this env: {reply!r:.300}")
        self._take_welcome(reply)
        if self.prefetch:
            self._request(self._request_size())  # start prefetching right away
        if _background_flush and 0.0 < self.max_update_delay < math.inf:
            _register_for_flushing(self)
        return True

    def _go_fallback(self, what: str, reason: str | None = None) -> bool:
        if reason is None:
            reason = (
                f"no reply from the curriculum {self.actor_description} ({self.address}) within "
                f"{self.timeout:g}s while waiting for {what}"
            )
        if self.fallback_task_space is None:
            raise ServerUnavailableError(
                f"{reason}. Is serve_ray() running, and is the actor alive? Pass fallback_task_space=... to "
                "sample locally instead"
            )
        logger.warning(
            "%s; sampling tasks locally from %r from now on (feedback is dropped)",
            reason,
            self.fallback_task_space,
        )
        self._fallback = True
        self._actor = self._method = None
        self.stats["updates_dropped"] += len(self._held)
        self._held.clear()
        self._send_by = math.inf
        self._calls.clear()
        self._outstanding = 0
        return False

    def _decode(self, reply: Any) -> P.Message | None:
        """Decode an actor reply; an Error is counted and logged (a version mismatch raises)."""
        if reply is None:
            return None
        msg = P.decode([reply])
        if isinstance(msg, P.Error):
            self.stats["errors_received"] += 1
            if msg.code == "version":
                raise P.ProtocolVersionError(msg.message)
            logger.error(
                "curriculum %s refused a message from env %s (%s): %s",
                self.actor_description,
                self.env_id,
                msg.code,
                msg.message,
            )
        return msg

    def _get(self, ref: Any, what: str, timeout: float | None = None) -> Any:
        """``ray.get`` of one reply (at most ``timeout``); None (and the fallback) when none came."""
        try:
            return ray.get(ref, timeout=self.timeout if timeout is None else timeout)
        except GetTimeoutError:
            self._go_fallback(what)
        except RayActorError as exc:
            self._go_fallback(what, f"the curriculum {self.actor_description} is dead: {exc}")
        return None

    # -- calls --------------------------------------------------------------------------------------
    def _call(self, frames: list[Frame], tasks: int, updates: int) -> None:
        """One fire-and-forget call carrying ``frames`` (``updates`` of them updates, asking for ``tasks``
        tasks in all); its replies are read later, in order."""
        if len(self._calls) >= self.max_pending_updates:  # back-pressure: the actor is behind
            self.stats["send_waits"] += 1
            self._read_reply(f"room for {len(frames)} message(s)")
            if self._fallback:
                self.stats["updates_dropped"] += updates
                return
        self._calls.append((self._method.remote(frames), tasks))
        self._outstanding += tasks
        self.stats["calls"] += 1
        self.stats["updates_sent"] += updates

    def _read_reply(self, what: str, timeout: float | None = None) -> bool:
        """Wait for the oldest call's replies (at most ``timeout``) and take them in; False if none came.

        Calls are applied in order, so once a reply is here every earlier call was applied too.
        """
        ref, asked = self._calls[0]
        replies = self._get(ref, what, timeout)
        if self._fallback:
            return False
        self._calls.popleft()
        self._outstanding -= asked
        if replies is None:  # updates only, none refused
            return True
        got_tasks = False
        refusal: P.Error | None = None
        for reply in replies:
            msg = self._decode(reply)
            if isinstance(msg, P.Tasks):
                for x in zip(msg.task_ids, msg.tasks, msg.train, msg.control, msg.variants):
                    self._buffer.append(Assignment(*x))
                self.stats["tasks_received"] += len(msg.task_ids)
                got_tasks = True
            elif isinstance(msg, P.Error):
                refusal = msg
        if asked and not got_tasks:
            why = refusal.message if refusal is not None else "no reply to the task request"
            raise SyncError(f"the curriculum {self.actor_description} could not provide tasks: {why}")
        return True

    def _take_held(self) -> list[Frame]:
        frames, self._held = self._held, []
        self._send_by = math.inf
        return frames

    def _send_held(self) -> None:
        """Send the held updates now (one call)."""
        if self._held and self._active():
            frames = self._take_held()
            self._call(frames, 0, len(frames))

    def _request(self, count: int) -> None:
        """Ask for ``count`` tasks in one call, with the held updates (sent first) along."""
        frames = self._take_held()
        updates = len(frames)
        frames.append(_pack(P.TaskRequest(self.env_id, count)))  # type: ignore[arg-type]
        self._call(frames, count, updates)

    @property
    def request_size(self) -> int:
        """Tasks the client asks for in its next request: as many as the env plays in
        ``max_update_delay`` seconds (by its recent episode rate; 1 until that is known), at least 1 and at
        most ``prefetch`` (``prefetch`` itself when ``max_update_delay`` is infinite)."""
        return self._request_size()

    # -- tasks --------------------------------------------------------------------------------------
    def next_task(self) -> Assignment:
        """The next task: from the buffer, else from the replies of earlier calls (waits at most
        ``timeout``), else asked for now. When the last task is taken, the next ones are asked for."""
        if self._ensure():
            with self._lock:
                a = self._next_assignment()
            if a is not None:
                return a
        (task,) = self.fallback_task_space.sample_encoded(1)  # type: ignore[union-attr]
        return Assignment(-1, task, True)

    def _next_assignment(self) -> Assignment | None:
        """:meth:`next_task` once connected (under the lock); None when the fallback took over."""
        now = _now()
        self._note_reset(now)
        if not self._buffer:
            if not self._outstanding:
                self._request(self._request_size())
            while not self._buffer and self._calls and not self._fallback:
                self._read_reply("tasks")
        if not self._fallback:
            if not self._buffer:  # pragma: no cover - every request is answered with tasks or an error
                raise SyncError(f"the curriculum {self.actor_description} sent no tasks")
            a = self._buffer.popleft()
            if self.prefetch and not self._buffer and not self._outstanding:
                self._request(self._request_size())
            elif self._held and now >= self._send_by:
                self._send_held()
            return a
        return None

    def give_back(self, assignment: Assignment) -> None:
        if assignment.task_id >= 0 and self._active():
            with self._lock:
                self._buffer.appendleft(assignment)

    # -- feedback -----------------------------------------------------------------------------------
    def _active(self) -> bool:
        return (
            self._actor is not None and self._pid == _client._pid and not self._fallback and not self._closed
        )

    def _send_update(self, msg: P.Message) -> None:
        """Hold an update for the next call. It goes out at once when it asks for tasks (``request``), is
        large (step records with observations: not kept in memory), fills the batch, or the oldest held
        update is due."""
        frame = _pack(msg)
        with self._lock:
            self._hold(frame, getattr(msg, "request", 0))

    def _send_fields(self, cls: type[P.Message], fields: tuple) -> None:
        # encoded without building the message (the actor validates it): the fields are ours
        frame = _as_frame(P.encode_fields(cls, fields, oob_threshold=_OOB_BYTES))
        with self._lock:
            self._hold(frame, fields[-1])

    def _deliver_steps(self, steps: _StepBuffer) -> None:
        frame = _as_frame(steps.frames(self.env_id))  # type: ignore[arg-type]
        with self._lock:
            self._hold(frame, 0)

    def _hold(self, frame: Frame, request: int) -> None:
        self._held.append(frame)
        if request:
            frames = self._take_held()
            self._call(frames, request, len(frames))
            return
        now = _now()
        if len(self._held) == 1:
            self._send_by = now + self.max_update_delay
        large = isinstance(frame, tuple) or len(frame) >= _OOB_BYTES  # step records with observations
        if large or len(self._held) >= self.update_batch or now >= self._send_by:
            frames = self._take_held()
            self._call(frames, 0, len(frames))

    def _refill_request(self) -> int:
        # An episode (or completed task) update, with a reset to follow that takes one task: when that
        # leaves nothing ready or asked for, ask for the next tasks in this update's call.
        if self.prefetch and self.env_id is not None and len(self._buffer) + self._outstanding <= 1:
            return self._request_size()
        return 0

    def _clock(self) -> float:
        return _now()

    def _may_send_in_background(self) -> bool:
        return len(self._calls) < self.max_pending_updates  # back-pressure: the env's own thread handles it

    def flush(self) -> None:
        """Send buffered step records and every held update now.

        (The step flushes :class:`TaskFeed` makes itself, of a full step batch or before an episode
        update, only turn the step records into an update, held like the others.)
        """
        with self._lock:
            self._flush_steps()
            self._send_held()

    def close(self) -> None:
        """Send what is held, collect outstanding tasks, return unused ones and wait for the goodbye's
        reply (bounded by ``close_timeout``).

        The goodbye is applied after every update this client sent, so once it is acknowledged the
        actor's counters include all of them.
        """
        if self._closed or self._pid != _client._pid:
            self._closed = True
            return
        _unregister_for_flushing(self)
        with self._lock:
            self._close()

    def _close(self) -> None:
        try:
            if self._active() and self.env_id is not None:
                super().flush()  # step records go out now (with the held updates)
                deadline = time.monotonic() + self.close_timeout
                while self._calls and not self._fallback:  # tasks asked for: wait for them, bounded
                    left = deadline - time.monotonic()
                    ready, _ = ray.wait([self._calls[0][0]], timeout=max(0.0, left))
                    if not ready:
                        logger.warning(
                            "ray client env %s: %d requested tasks did not arrive before close; they stay "
                            "in flight",
                            self.env_id,
                            self._outstanding,
                        )
                        break
                    self._read_reply("tasks")
                if self._fallback:
                    return
                returned = tuple(a.task_id for a in self._buffer if a.task_id >= 0)
                self._buffer.clear()
                frames = self._take_held()
                updates = len(frames)
                frames.append(_pack(P.Goodbye(self.env_id, returned)))
                ref = self._method.remote(frames)
                self.stats["calls"] += 1
                self.stats["updates_sent"] += updates
                try:
                    replies = ray.get(ref, timeout=max(self.close_timeout, 1e-3))
                except (GetTimeoutError, RayActorError) as exc:
                    replies = None
                    logger.warning(
                        "ray client env %s: no goodbye reply from %s: %s", self.env_id, self.address, exc
                    )
                else:
                    msgs = [self._decode(r) for r in replies or ()]
                    self._goodbye_acked = bool(msgs) and isinstance(msgs[-1], P.Goodbye)
                if not self._goodbye_acked:
                    logger.warning("ray client env %s: no goodbye ack from %s", self.env_id, self.address)
        except (ServerUnavailableError, SyncError, RayActorError) as exc:  # closing must not fail
            logger.warning("ray client env %s: closing without the curriculum actor: %s", self.env_id, exc)
        finally:
            self._actor = self._method = None
            self._calls.clear()
            self._held.clear()
            self._buffer.clear()
            self._closed = True

    def __repr__(self) -> str:
        return f"RayClient({self.address!r}, env_id={self.env_id})"
