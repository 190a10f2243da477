"""The Ray backend of the sync layer: the curriculum in a named Ray actor.

This is the ZeroMQ server/client pair of :mod:`magister.sync.server` and :mod:`magister.sync.feed`
with Ray as the transport, for environments that run in Ray workers (RLlib env runners, Ray tasks and
actors) on one machine or across a Ray cluster.

* :func:`serve_ray` starts a named Ray actor holding the curriculum inside a
  :class:`~magister.sync.core.SyncCore`, the same object the ZeroMQ server feeds, so validation,
  accounting and metrics are identical on both paths. It returns a :class:`RayCurriculumServer`, the
  learner-side proxy (``sample``, ``update_on_demand``, ``metrics``, ``state_dict``, ...) whose
  :attr:`~RayCurriculumServer.address` is ``"ray://<name>"`` (``"ray://<namespace>/<name>"`` when a
  namespace is given).
* :class:`RayClient` is the env side. :func:`magister.sync.feed.connect` returns one for any
  ``"ray://..."`` source, so ``GymnasiumSyncWrapper(env, server.address)`` works unchanged. The client
  looks the actor up by name lazily, in the process that first uses it (``ray.get_actor``); it prefetches
  tasks as object refs (the replies of earlier calls) and blocks (``ray.get`` with a timeout) only when a
  ``reset`` finds no task ready; it sends updates as fire-and-forget actor calls whose replies it reads
  later, in order, when it needs the tasks they carry (refusals are logged then); and it returns unused
  tasks when it closes.

**Calls, and what they cost.** An actor call costs far more CPU on each side than a ZeroMQ message
(``benchmarks/sync_overhead.py`` measures both), so the feed makes as few as the semantics allow: one call
carries every message the env has for the actor (:meth:`CurriculumActor.handle_batch`), and it polls
nothing. Tasks are asked for only when none is left ready or on its way, for as many as the env plays in
``max_update_delay`` (at least 1, at most ``prefetch``), in the call of the episode update that precedes the
reset taking the last one; updates are held until the next call, at most ``update_batch`` of them and about
``max_update_delay`` seconds (a per-process background thread sends what is due while the env is idle); a
large update (step records carrying observations) goes out at once with the held ones.
``max_update_delay=0`` holds nothing (one call per update). The defaults are the transport's
:class:`~magister.sync.transports.base.Capabilities`.

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
actor died raises :class:`~magister.sync.feed.ServerUnavailableError` naming the actor after its
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

import copy
import logging
import os
from typing import Any

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
except ImportError as _exc:  # pragma: no cover - exercised only without ray
    raise ImportError(
        "magister.sync.ray_backend needs Ray; install it with `pip install 'magister[ray]'` "
        "(or `pip install ray`)"
    ) from _exc

from ..curricula.base import Curriculum, TaskSample
from ..task_spaces.base import EncodedTask
from . import protocol as P
from .core import DEFAULT_STEP_BATCH_SIZE, ServedCurriculum, ServerHandle, SyncCore, SyncRejected
from .feed import RayClient, ServerUnavailableError, SyncError
from .transports.ray_actor import (
    ADDRESS_PREFIX,
    Frame,
    describe_actor,
    lookup_actor,
    pack,
    parse_ray_address,
    ray_address,
    unpack,
)

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

#: Name of the curriculum actor when none is given.
DEFAULT_ACTOR_NAME = "magister_curriculum"
#: Messages an env may send to the actor.
_ENV_MESSAGES = (P.TaskRequest, P.StepUpdate, P.EpisodeUpdate, P.Episodes, P.ProgressUpdate, P.Goodbye)
# (the transport's encoding and lookup, under the names this module and its tests use)
_pack = pack
_unpack = unpack
_describe = describe_actor
_lookup = lookup_actor


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
        # Ray hands an actor numpy arrays that live in its object store as *read-only* views; a curriculum
        # writes into its arrays (PLR's buffer, LearningProgress's estimates), so it gets writable copies
        curriculum = copy.deepcopy(curriculum)
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
            self.core.log.exception(
                "handler", "curriculum actor: unexpected error handling a %s", type(msg).__name__
            )
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
        state = copy.deepcopy(state)  # (writable arrays, as in __init__: a curriculum may keep them)
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


# -- learner-side proxy ------------------------------------------------------------------------------


class RayCurriculumServer(ServedCurriculum):
    """Learner-side proxy of a curriculum actor. Create it with :func:`serve_ray` (or :meth:`attach`).

    The curriculum lives in the actor: the object given to :func:`serve_ray` was *copied* into it, so
    read and change it only through these methods. The actor runs one call at a time, so a call waits
    behind the env messages already queued. Each blocks for the actor's reply, at most
    ``timeout`` seconds (then :class:`~magister.sync.feed.ServerUnavailableError`); exceptions the
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

    def wait(self, ref: Any, what: str = "a call") -> Any:
        """The result of a call made with ``wait=False`` (its object ref), waiting at most ``timeout``:
        the curriculum's exception re-raised, :class:`~magister.sync.feed.ServerUnavailableError` when the
        actor does not answer or is dead (``what`` names the call in the message)."""
        return self._get(ref, what)

    def update_on_demand(self, metrics: dict[str, Any], *, wait: bool = True) -> Any:
        """Learner-side feedback, ``curriculum.update_on_demand(metrics)`` in the actor.

        With ``wait=False`` the call is fire-and-forget and its object ref is returned (:meth:`wait` for
        it to see an error); with ``wait=True`` it returns ``None`` once applied.
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
