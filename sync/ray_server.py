"""The Ray endpoint of the sync layer: the curriculum in a named Ray actor.

:func:`serve_ray` starts a :class:`CurriculumActor` (the curriculum in a
:class:`~magister.sync.core.SyncCore`) and returns the learner-side :class:`RayCurriculumServer`; envs
anywhere in the Ray cluster connect to its ``address``. The actor declares an env gone
(:meth:`~magister.sync.core.SyncCore.depart`) when Ray reports the node or worker process it ran in dead,
or when it stays silent past ``env_timeout``. With ``max_restarts``, a restarted actor restores the
curriculum and the sync ledger from ``checkpoint``, and envs register again. A Ray Client address
(``"ray://host:port"``) names a cluster, not an actor: give it as the feed's ``ray_address``.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

try:
    import ray
except ImportError as _exc:  # pragma: no cover - exercised only without ray
    raise ImportError("magister.sync.ray_server needs Ray: `pip install 'magister[ray]'`") from _exc

from ..checkpoint import load
from ..curricula.base import Curriculum, TaskSample
from ..task_spaces.base import EncodedTask
from . import protocol as P
from .core import LearnerCalls, ServedCurriculum, SyncCore
from .feed import RayClient, SyncError
from .options import ServerOptions
from .transports.ray import describe_actor, get, lookup_actor, parse_ray_address, ray_address
from .transports.ray import pack as _pack
from .transports.ray import unpack as _unpack

logger = logging.getLogger(__name__)

__all__ = ["CurriculumActor", "RayClient", "RayCurriculumServer", "parse_ray_address", "ray_address",
           "serve_ray"]

#: Seconds between two liveness checks of the actor's envs (at most a quarter of ``env_timeout``).
LIVENESS_PERIOD = 1.0
#: Seconds without a call after which an env's node and worker are looked up in Ray's tables.
LIVENESS_QUIET = 2.0
#: A curriculum checkpoint: a file written with :func:`magister.save`, or a callable returning the state.
Checkpoint = str | os.PathLike | Callable[[], dict[str, Any] | None]


def _dead(envs: list[tuple[int, tuple[str, str], float | None]]) -> list[int]:
    """The envs quiet for a while (one that calls is alive) whose node or worker Ray reports dead (the
    actor's check for :meth:`~magister.sync.core.SyncCore.sweep`)."""
    quiet = time.monotonic() - LIVENESS_QUIET
    where = [(env_id, contact) for env_id, contact, heard in envs if heard is None or heard <= quiet]
    if not where:
        return []
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    try:  # Ray's live worker processes (no public call reads its worker table without the dashboard)
        from ray._private.state import workers as worker_table
        workers = set(worker_table()) if any(w for _, (_, w) in where) else None
    except Exception:  # pragma: no cover - this Ray cannot tell: envs are declared gone by node or silence
        workers = None
    return [e for e, (node, worker) in where
            if node not in nodes or (workers is not None and worker and worker not in workers)]


class CurriculumActor(LearnerCalls):
    """The body of the curriculum actor (made a Ray actor by :func:`serve_ray`): env feeds call
    :meth:`handle_many` (the sends of a process's envs, hellos included) with encoded protocol messages,
    the learner the other methods through :class:`RayCurriculumServer`. Every curriculum access holds the
    core's lock. ``core_class``: a relay's is its ``RelayCore``."""

    def __init__(self, curriculum: Curriculum, options: ServerOptions | None = None,
                 checkpoint: Checkpoint | None = None, core_class: type[SyncCore] = SyncCore) -> None:
        # Ray hands an actor numpy arrays as read-only views: the curriculum, which writes into its arrays,
        # gets writable copies (as does every argument of `call` and `load_state_dict`)
        self.core = core_class(copy.deepcopy(curriculum), options)
        self.restored = 0.0
        self.calls = 0  # handle_many calls received
        if ray.get_runtime_context().was_current_actor_reconstructed:
            self._restore(checkpoint)
        threading.Thread(target=self._watch, name="magister-liveness", daemon=True).start()

    def _restore(self, checkpoint: Checkpoint | None) -> None:
        exists = checkpoint is not None and not callable(checkpoint) and os.path.exists(checkpoint)
        state = checkpoint() if callable(checkpoint) else load(checkpoint) if exists else None
        if state is None:
            logger.warning("curriculum actor restarted with no checkpoint (%r): the curriculum starts again "
                           "from the state it was served with", checkpoint)
            return
        self.load_state_dict(state)  # the curriculum, and the ledger: envs come back with their leases
        self.restored = 1.0
        logger.warning("curriculum actor restarted; curriculum restored from %r", checkpoint)

    def _watch(self) -> None:
        """Sweep the envs on a timer: those whose Ray node or worker died, or silent past ``env_timeout``."""
        while True:
            time.sleep(min(LIVENESS_PERIOD, self.core.heartbeat or LIVENESS_PERIOD))
            try:
                self.core.sweep(_dead, "dead")
            except Exception:  # the thread must not die
                self.core.log.exception("liveness", "curriculum actor: liveness check failed")

    def _replies(self, frame: Any, where: tuple[str, str] | None = None) -> list[P.Message]:
        """The replies to one encoded message: usually none or one (a refused update that asked for tasks
        gets the Error, then the Tasks). Never raises. ``where``: a hello's Ray node and worker ids."""
        try:
            msg = _unpack(frame)
        except P.ProtocolError as exc:
            return [self.core.malformed(exc)]
        self.core.heard(getattr(msg, "env_id", None))
        replies = self.core.answer(msg)
        if type(msg) is P.Hello and where is not None and isinstance(replies[0], P.Welcome):
            self.core.attach(replies[0].env_id, (str(where[0]), str(where[1])))
        return replies

    @ray.method(enable_task_events=False)  # called several times per episode per env: no per-call events
    def handle_many(self, sends: list[tuple[int, list[Any], str]], where: tuple[str, str] | None = None
                    ) -> list[list[bytes] | None]:
        """The sends of the envs of one process, each ``(env id, encoded messages, token)``: each one's
        messages applied in order and whole (no env is declared gone halfway); the encoded replies of each,
        or ``None``. A send without messages is a heartbeat of that env. ``token``: the welcome's (``""``
        for a hello; an older actor's gets one ``unknown_env`` error); ``where``: the Ray node and worker
        ids of the calling process, attached to the envs its hellos register. Never raises."""
        self.calls += 1
        if not isinstance(sends, (list, tuple)):
            return [self._apply(sends)]
        out: list[list[bytes] | None] = []
        for send in sends:
            whole = isinstance(send, (list, tuple)) and len(send) == 3
            env_id, frames, token = send if whole else (0, send, "")
            if isinstance(frames, (list, tuple)) and not frames:  # a heartbeat
                if token == self.core.token and isinstance(env_id, int):
                    self.core.heard(env_id)
                out.append(None)
            else:
                out.append(self._apply(frames, token, where))
        return out

    def _apply(self, frames: list[Any], token: str = "", where: tuple[str, str] | None = None
               ) -> list[bytes] | None:
        if not isinstance(frames, (list, tuple)):
            got = type(frames).__name__
            error = self.core.malformed(P.ProtocolError(f"expected a list of encoded messages, got {got}"))
        elif token and token != self.core.token:
            error = self.core.refuse(self.core.unknown_env(why=" (the curriculum actor restarted)"))
        else:
            with self.core.lock:
                return [_pack(reply) for frame in frames for reply in self._replies(frame, where)] or None
        return [_pack(error)]

    def ping(self) -> int:
        """The actor's pid (a liveness check)."""
        return os.getpid()

    def endpoint_metrics(self) -> dict[str, float]:
        gone = self.core.departures
        return {"sync/errors_sent": float(self.core.errors_sent), "sync/envs_dead": float(gone["dead"]),
                "sync/envs_timed_out": float(gone["timeout"]), "sync/actor_restored": self.restored,
                "sync/calls_received": float(self.calls)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(copy.deepcopy(state))

    def call(self, method: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """``curriculum.<method>(*args, **kwargs)`` under the lock, for a public method."""
        if not isinstance(method, str) or method.startswith("_"):
            raise ValueError(f"method must be the name of a public curriculum method, got {method!r}")
        args, kwargs = copy.deepcopy((args, kwargs or {}))
        with self.core.lock:
            fn = getattr(self.core.curriculum, method, None)
            if not callable(fn):
                raise AttributeError(f"{type(self.core.curriculum).__name__} has no method {method!r}")
            return fn(*args, **kwargs)


class RayCurriculumServer(ServedCurriculum):
    """Learner-side proxy of a curriculum actor. Create it with :func:`serve_ray` (or :meth:`attach`).

    The curriculum lives in the actor (a copy of the object given to :func:`serve_ray`): read and change it
    through these methods. Each waits behind the env messages already queued, at most ``timeout`` seconds
    (then :class:`~magister.sync.feed.ServerUnavailableError`); an exception the curriculum raises is
    re-raised here (as Ray's subclass of its type). Attributes: the actor's ``name``, ``namespace``
    (``None``: the creating job's) and ``address``, its handle ``actor``, ``timeout`` and ``closed``.
    """

    def __init__(self, actor: Any, name: str, namespace: str | None, *, owner: bool,
                 timeout: float = 30.0) -> None:
        self.actor, self.name, self.namespace = actor, name, namespace
        self.timeout = float(timeout)
        self.closed = False
        self._owner = bool(owner)
        self.address: str = ray_address(name, namespace)

    @classmethod
    def attach(cls, address: str, *, timeout: float = 30.0) -> RayCurriculumServer:
        """A proxy of the running curriculum actor at ``address`` (its ``close`` does not kill the actor);
        :class:`~magister.sync.feed.ServerUnavailableError` when none appears within ``timeout`` seconds."""
        name, namespace = parse_ray_address(address)
        return cls(lookup_actor(name, namespace, timeout), name, namespace, owner=False, timeout=timeout)

    def _run(self, method: str, *args: Any, what: str = "", wait: bool = True) -> Any:
        if self.closed:
            raise SyncError(f"{self!r} is closed")
        ref = getattr(self.actor, method).remote(*args)
        return self.wait(ref, what or f"{method}()") if wait else ref

    def wait(self, ref: Any, what: str = "a call") -> Any:
        """The result of the call whose object ref is ``ref`` (as ``wait=False`` returns), waiting at most
        ``timeout`` (``what`` names the call in a :class:`~magister.sync.feed.ServerUnavailableError`)."""
        return get(ref, self.timeout, describe_actor(self.name, self.namespace), what)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a public method of the curriculum in the actor, e.g. ``call("distribution")``."""
        return self._run("call", method, args, kwargs, what=f"{method}()")

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``curriculum.sample(k)`` in the actor (tasks for the learner's own use, not accounted)."""
        return self._run("sample", k)

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``curriculum.sample_tasks(k)`` in the actor."""
        return self._run("sample_tasks", k)

    def update_on_demand(self, metrics: dict[str, Any], *, wait: bool = True) -> Any:
        """Learner-side feedback, ``curriculum.update_on_demand(metrics)`` in the actor; with ``wait=False``
        fire-and-forget: returns the call's object ref (:meth:`wait` on it to see an error)."""
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        return self._run("call", "update_on_demand", (metrics,), what="update_on_demand()", wait=wait)

    def metrics(self) -> dict[str, float]:
        """The curriculum's metrics plus the sync accounting (``sync/env<i>/...``, ``sync/total/...``)."""
        return self._run("metrics")

    def state_dict(self) -> dict[str, Any]:
        """``curriculum.state_dict()`` with the sync ledger (for checkpoints, and ``checkpoint=``)."""
        return self._run("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (see :meth:`~magister.sync.core.LearnerCalls.load_state_dict`)."""
        self._run("load_state_dict", state)

    def in_flight(self, env_id: int) -> dict[int, EncodedTask]:
        """Tasks sent to ``env_id`` and not yet consumed or returned, by task id."""
        return self._run("in_flight", env_id)

    def close(self) -> None:
        """Kill the actor (only if this proxy created it) and stop using it. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._owner:
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception as exc:  # already gone, or Ray shut down first
                logger.debug("curriculum actor %r: kill failed: %s", self.name, exc)
            logger.info("%s closed", describe_actor(self.name, self.namespace))

    def __repr__(self) -> str:
        return f"RayCurriculumServer({self.address!r}, {'closed' if self.closed else 'serving'})"


def _check_actor_settings(opts: ServerOptions, max_restarts: int, checkpoint: Checkpoint | None,
                          actor_options: dict[str, Any]) -> None:
    """Refuse what :func:`serve_ray` cannot honour (see its ``Raises``)."""
    zeromq_only = [f for f in ServerOptions.ZEROMQ_ONLY if getattr(opts, f) != getattr(ServerOptions, f)]
    if zeromq_only:
        raise ValueError(f"{zeromq_only} apply to the ZeroMQ server (serve()); the Ray actor travels over "
                         "Ray's own transport (secure the Ray cluster instead)")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
        raise ValueError(f"max_restarts must be an int >= -1 (-1: always restart), got {max_restarts!r}")
    if checkpoint is not None and not (callable(checkpoint) or isinstance(checkpoint, (str, os.PathLike))):
        raise TypeError(f"checkpoint must be a path or a callable returning the state, got {checkpoint!r}")
    if checkpoint is not None and max_restarts == 0:
        raise ValueError("checkpoint is read when the actor restarts: set max_restarts as well")
    reserved = {"name", "namespace", "lifetime", "max_concurrency", "get_if_exists", "max_restarts"}
    reserved &= set(actor_options)
    if reserved:
        raise ValueError(f"actor_options may not set {sorted(reserved)}; they are serve_ray's arguments")


def serve_ray(
    curriculum: Curriculum, name: str = "magister_curriculum", namespace: str | None = None,
    options: ServerOptions | None = None, *, detached: bool = False,
    actor_options: dict[str, Any] | None = None, timeout: float = 30.0, start_timeout: float = 300.0,
    max_restarts: int = 0, checkpoint: Checkpoint | None = None, **overrides: Any,
) -> RayCurriculumServer:
    """Start the curriculum in a named Ray actor; returns the learner-side :class:`RayCurriculumServer`.

    Args:
        curriculum: Any :class:`~magister.curricula.base.Curriculum`; it is copied into the actor, so use
            the returned proxy (not this object) from now on.
        name: The actor's name; workers find it through ``server.address``.
        namespace: Ray namespace of the actor (needed to reach it from other jobs).
        options: The actor's settings (:class:`~magister.sync.options.ServerOptions`, not its ZeroMQ-only
            fields); its fields may also be given as keywords, e.g. ``serve_ray(curriculum, env_timeout=5)``.
        detached: Keep the actor alive after the driver exits (``lifetime="detached"``; close it explicitly).
        actor_options: Extra ``.options(...)`` for the actor (e.g. ``num_cpus``, ``resources``); the name,
            namespace, lifetime, ``max_restarts`` and ``max_concurrency=1`` are set here.
        timeout: Seconds to wait for each proxy call.
        start_timeout: Seconds to wait for the actor to start (scheduling it may take far longer than a call).
        max_restarts: Times Ray restarts the actor after its process dies (``-1``: always). Calls in flight
            when it died fail on the learner side with ``ServerUnavailableError``; envs register again.
        checkpoint: What a restarted actor restores the curriculum from: a file written with
            ``magister.save(path, server.state_dict())`` (on storage the node it restarts on can read), or
            a callable returning the state (``None``: none yet). Needs ``max_restarts``.
        **overrides: :class:`~magister.sync.options.ServerOptions` fields, over ``options``.

    Raises:
        TypeError: ``curriculum`` is not a Curriculum, an unknown option, or ``checkpoint`` is neither a
            path nor a callable.
        ValueError: a bad name, namespace, option value or ``max_restarts``; a ZeroMQ-only option; reserved
            ``actor_options``; an actor of that name exists (Ray's ``ActorAlreadyExistsError``); a
            ``checkpoint`` without restarts.
        ServerUnavailableError: the actor did not start within ``start_timeout``.
    """
    if not isinstance(curriculum, Curriculum):
        raise TypeError(f"curriculum must be a magister Curriculum, got {type(curriculum).__name__}")
    ray_address(name, namespace)  # validates both
    opts = ServerOptions.of(options, **overrides)
    _check_actor_settings(opts, max_restarts, checkpoint, actor_options or {})
    peer = describe_actor(name, namespace)
    # one call at a time (max_concurrency=1): each env's messages are applied in order
    actor = ray.remote(CurriculumActor).options(
        name=name, namespace=namespace, lifetime="detached" if detached else None, max_concurrency=1,
        max_restarts=max_restarts, **{"num_cpus": 0, **(actor_options or {})},
    ).remote(curriculum, opts, checkpoint)
    server = RayCurriculumServer(actor, name, namespace, owner=True, timeout=timeout)
    try:
        get(actor.ping.remote(), start_timeout, peer, "the start-up ping")
    except Exception:
        server.close()
        raise
    logger.info("curriculum %s served by %s", type(curriculum).__name__, peer)
    return server
