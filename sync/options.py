"""Every setting of an env-side feed, with its default, in one frozen object: :class:`FeedOptions`.

>>> FeedOptions(prefetch=-1)
Traceback (most recent call last):
...
ValueError: prefetch must be an int >= 0 or None (the transport's default), got -1
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..task_spaces.base import TaskSpace

__all__ = ["FeedOptions", "DEFAULT_MAX_UPDATE_DELAY", "DEFAULT_TIMEOUT"]

#: Most seconds a feed holds an update (0: none is held); also the span of episodes it keeps tasks for.
DEFAULT_MAX_UPDATE_DELAY = 0.5
#: Seconds a feed waits for the curriculum before giving up.
DEFAULT_TIMEOUT = 5.0
#: Seconds a registered env keeps trying to reach a silent curriculum side (a learner's restart).
DEFAULT_RECONNECT_TIMEOUT = 3600.0


def _seconds(name: str, value: Any, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (value > 0 if positive else value >= 0):
        what = "a positive number of seconds" if positive else "a number of seconds >= 0"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return float(value)


def _count(name: str, value: Any, low: int, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        either = " or None (the transport's default)" if none_ok else ""
        raise ValueError(f"{name} must be an int >= {low}{either}, got {value!r}")


@dataclass(frozen=True)
class FeedOptions:
    """The settings of one env's feed, taken by :func:`~magister.sync.feed.connect`, the feed and the sync
    wrappers (whose keyword arguments are its fields).

    Args:
        prefetch: Most tasks kept ready (as many as the env plays in ``max_update_delay``, at least one;
            ``None``: the transport's default, in its :class:`~magister.sync.transports.base.Capabilities`;
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
    max_update_delay: float = DEFAULT_MAX_UPDATE_DELAY
    timeout: float = DEFAULT_TIMEOUT
    reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT
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

    def __post_init__(self) -> None:
        _count("prefetch", self.prefetch, 0, none_ok=True)
        _count("update_batch", self.update_batch, 1, none_ok=True)
        _count("max_pending_updates", self.max_pending_updates, 1)
        set_ = object.__setattr__
        set_(self, "max_update_delay", _seconds("max_update_delay", self.max_update_delay))
        set_(self, "timeout", _seconds("timeout", self.timeout, positive=True))
        set_(self, "close_timeout", _seconds("close_timeout", self.close_timeout))
        set_(self, "reconnect_timeout", _seconds("reconnect_timeout", self.reconnect_timeout))
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

    @classmethod
    def of(cls, options: FeedOptions | None = None, **overrides: Any) -> FeedOptions:
        """``options`` (default: the defaults) with ``overrides``; an unknown name raises ``TypeError``
        naming it and the known ones."""
        known = sorted(f.name for f in fields(cls))
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TypeError(f"unknown feed option(s) {unknown}; the options are {known}")
        return replace(options if options is not None else cls(), **overrides)
