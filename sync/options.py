"""Every setting of each side of the sync layer, with its default, in one frozen object per side:
:class:`FeedOptions` (an env's feed) and :class:`ServerOptions` (the curriculum's endpoint).

>>> FeedOptions(prefetch=-1)
Traceback (most recent call last):
...
ValueError: prefetch must be an int >= 0 or None (the transport's default), got -1
>>> ServerOptions.of(env_timeout=None).step_batch_size == ServerOptions().step_batch_size
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..task_spaces.base import TaskSpace

if TYPE_CHECKING:
    from .security import AllowedClients

__all__ = ["FeedOptions", "ServerOptions"]

_O = TypeVar("_O", bound="_Options")


class _Options:
    """What both sides' options share: the checks of their counts and seconds, and :meth:`of`."""

    SIDE: ClassVar[str]
    #: The int fields: the least value of each, and whether ``None`` (the transport's default) is allowed.
    COUNTS: ClassVar[dict[str, tuple[int, bool]]]
    #: The fields in seconds, each kept as a float: whether it must be positive (else >= 0).
    SECONDS: ClassVar[dict[str, bool]]

    def __post_init__(self) -> None:
        for name, (low, none_ok) in self.COUNTS.items():
            value = getattr(self, name)
            bad = isinstance(value, bool) or not isinstance(value, int) or value < low
            if bad and not (value is None and none_ok):
                either = " or None (the transport's default)" if none_ok else ""
                raise ValueError(f"{name} must be an int >= {low}{either}, got {value!r}")
        for name, positive in self.SECONDS.items():
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not (value > 0 if positive else value >= 0):
                what = "a positive number of seconds" if positive else "a number of seconds >= 0"
                raise ValueError(f"{name} must be {what}, got {value!r}")
            object.__setattr__(self, name, float(value))

    @classmethod
    def of(cls: type[_O], options: _O | None = None, **overrides: Any) -> _O:
        """``options`` (default: the defaults) with ``overrides``; an unknown name raises ``TypeError``
        naming it and the known ones."""
        known = sorted(f.name for f in fields(cls))  # type: ignore[arg-type]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TypeError(f"unknown {cls.SIDE} option(s) {unknown}; the options are {known}")
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a {cls.__name__} or None, got {type(options).__name__}")
        return replace(options if options is not None else cls(), **overrides)  # type: ignore[type-var]


@dataclass(frozen=True)
class FeedOptions(_Options):
    """The settings of one env's feed, taken by :func:`~magister.sync.feed.connect`, the feed and the sync
    wrappers (whose keyword arguments are its fields).

    Args:
        prefetch: Most tasks kept ready (as many as the env plays in ``max_update_delay``, at least one;
            ``None``: the default of its :class:`~magister.sync.transports.base.Transport`;
            0: ask for each task when it is needed).
        update_batch: Most updates held for one send (``None``: the transport's default; 1: none held).
        max_update_delay: Most seconds an update is held (0: none; ``math.inf``: ``update_batch`` decides).
        timeout: Seconds to wait for the curriculum before :class:`ServerUnavailableError` (or the fallback):
            for the first connection, and for an answer while the curriculum side is up.
        reconnect_timeout: Seconds a registered env keeps trying while the curriculum side is silent (a
            learner restarting from a checkpoint, a preemption, a partition) before the same error;
            episodes played meanwhile are kept and sent when it answers. ``math.inf``: for ever.
        close_timeout: Seconds ``close`` waits for tasks on their way, and for the goodbye's ack.
        strip_keys: Keys removed from dict observations and from infos before step records are sent.
        send_obs: Whether step records (sent only to a curriculum that reads them) carry observations.
        send_infos: Whether step records carry infos.
        fallback_task_space: Opt-in: when the curriculum does not answer, sample tasks from this space
            (logged once; feedback is then dropped) instead of raising.
        name: A label for the server's logs.
        curve_server_key: The server's CURVE public key (ZeroMQ ``tcp://``).
        curve_client_keys: This worker's own CURVE key pair ``(public_key, secret_key)``, for a server that
            admits only listed clients; without it the worker uses a throwaway pair.
        max_pending_updates: Ray: calls in flight before the feed waits for the actor (back-pressure).
        ray_address: Ray: the cluster address for ``ray.init`` when the process is not connected to Ray.
    """

    prefetch: int | None = None
    update_batch: int | None = None
    max_update_delay: float = 0.5
    timeout: float = 5.0
    reconnect_timeout: float = 3600.0
    close_timeout: float = 2.0
    strip_keys: tuple[str, ...] = ()
    send_obs: bool = True
    send_infos: bool = True
    fallback_task_space: TaskSpace | None = None
    name: str = ""
    curve_server_key: bytes | str | None = None
    curve_client_keys: tuple[bytes | str, bytes | str] | None = None
    max_pending_updates: int = 1024
    ray_address: str | None = None
    SIDE = "feed"
    COUNTS = {"prefetch": (0, True), "update_batch": (1, True), "max_pending_updates": (1, False)}
    SECONDS = {"max_update_delay": False, "timeout": True, "close_timeout": False, "reconnect_timeout": False}

    def __post_init__(self) -> None:
        super().__post_init__()
        set_ = object.__setattr__
        if isinstance(self.strip_keys, str):
            raise TypeError("strip_keys must be an iterable of keys, not a single str")
        set_(self, "strip_keys", tuple(self.strip_keys))
        if not isinstance(self.fallback_task_space, (TaskSpace, type(None))):
            got = type(self.fallback_task_space).__name__
            raise TypeError(f"fallback_task_space must be a TaskSpace or None, got {got}")
        if self.curve_client_keys is not None:
            if self.curve_server_key is None:
                raise ValueError("curve_client_keys needs curve_server_key (the server's public key) as well")
            if isinstance(self.curve_client_keys, (str, bytes)) or len(self.curve_client_keys) != 2:
                raise ValueError(
                    "curve_client_keys must be this client's (public_key, secret_key) pair, e.g. "
                    "magister.sync.generate_keypair() or magister.sync.load_keypair(path)"
                )
            set_(self, "curve_client_keys", tuple(self.curve_client_keys))


@dataclass(frozen=True)
class ServerOptions(_Options):
    """The settings of a curriculum's endpoint, taken by :func:`~magister.sync.zmq_server.serve`,
    :func:`~magister.sync.ray_server.serve_ray` and :class:`~magister.sync.core.SyncCore` (whose keyword
    arguments are its fields). Those marked ZeroMQ are read by ``serve()`` only (``serve_ray`` refuses them).

    Args:
        step_batch_size: Steps a client batches per step update (only used when the curriculum
            ``requires_step_updates``).
        validate_tasks: Check tasks that clients chose themselves against the task space.
        max_envs: Most live envs served; further hellos get a ``too_many_envs`` error reply. An env that
            said goodbye, or was declared gone, frees its slot.
        env_timeout: Seconds an env may stay silent before it is declared gone: the tasks it held are
            abandoned (counted as ``tasks_abandoned`` and reported to the curriculum's
            ``on_task_abandoned``) and its slot is freed. Clients send a heartbeat when idle for a quarter
            of it. ``None``: never (on Ray, envs whose node or worker died are declared gone either way).
        keep_departed: Counters of this many envs that left stay listed one by one in ``metrics()``
            (``sync/env<i>/...``); older ones are only counted in the totals, and nothing else is kept.
        max_tasks_in_flight: Most tasks one env may hold; a request beyond it is refused (``too_many_tasks``).
        curve_secret_key: ZeroMQ: the CURVE secret key (:func:`magister.sync.security.generate_keypair`);
            needed for a non-loopback TCP address or an abstract ``ipc://@name`` socket, unless ``insecure``.
        curve_allowed_clients: ZeroMQ: admit only clients presenting one of these CURVE public keys, or of
            the ``*.key`` certificates in this directory (re-read when it changes); needs
            ``curve_secret_key``. Without it, any holder of the server's public key can join.
        insecure: ZeroMQ: explicitly allow an unencrypted non-loopback TCP address.
        max_message_bytes: ZeroMQ: larger incoming messages are dropped by ZeroMQ (protects memory).
        poll_interval: ZeroMQ: most seconds between liveness checks (a quarter of ``env_timeout`` if less).
        join_timeout: ZeroMQ: seconds ``close()`` waits for the server thread to stop.
    """

    step_batch_size: int = 64
    validate_tasks: bool = True
    max_envs: int = 65536
    env_timeout: float | None = 60.0
    keep_departed: int = 64
    max_tasks_in_flight: int = 4096
    curve_secret_key: bytes | str | None = None
    curve_allowed_clients: AllowedClients | None = None
    insecure: bool = False
    max_message_bytes: int = 256 * 1024 * 1024
    poll_interval: float = 1.0
    join_timeout: float = 5.0
    #: The fields only the ZeroMQ endpoint reads.
    ZEROMQ_ONLY = ("curve_secret_key", "curve_allowed_clients", "insecure", "max_message_bytes",
                   "poll_interval", "join_timeout")
    SIDE = "server"
    COUNTS = {"step_batch_size": (1, False), "max_envs": (1, False), "keep_departed": (0, False),
              "max_tasks_in_flight": (1, False), "max_message_bytes": (1, False)}
    SECONDS = {"poll_interval": True, "join_timeout": False}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("validate_tasks", "insecure"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if (t := self.env_timeout) is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
                raise ValueError(f"env_timeout must be a finite number of seconds > 0 or None, got {t!r}")
            object.__setattr__(self, "env_timeout", float(t))
