"""Every setting of an env-side feed, with its default, in one frozen object.

:class:`FeedOptions` is taken by :func:`magister.sync.feed.connect`, by the feed itself and by the sync
wrappers (whose keyword arguments are its fields). ``prefetch`` and ``update_batch`` default to what the
transport declares in its :class:`~magister.sync.transports.base.Capabilities` (sockets 8 and 32, Ray 32
and 32, in-process 0 and 1).

>>> FeedOptions(timeout=10).timeout
10.0
>>> FeedOptions(prefetch=-1)
Traceback (most recent call last):
...
ValueError: prefetch must be an int >= 0 or None (the transport's default), got -1
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
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


def _count(name: str, value: Any, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low} or None (the transport's default), got {value!r}")
    return value


@dataclass(frozen=True)
class FeedOptions:
    """The settings of one env's feed.

    Args:
        prefetch: Most tasks kept ready (``None``: the transport's default; 0: ask for each task when it is
            needed). The depth kept adapts to the env's pace: as many tasks as it plays in
            ``max_update_delay``, at least one.
        update_batch: Most updates held for one send (``None``: the transport's default; 1: none held).
        max_update_delay: Most seconds an update is held (``math.inf``: only ``update_batch`` bounds it;
            0: nothing is held).
        timeout: Seconds to wait for the curriculum before :class:`ServerUnavailableError` (or the fallback):
            for the first connection, and for an answer while the curriculum side is up.
        reconnect_timeout: Seconds a registered env keeps trying while the curriculum side is silent (a
            learner restarting from a checkpoint, a preemption, a partition) before the same error;
            episodes played meanwhile are kept and sent when it answers. ``math.inf``: for ever.
        close_timeout: Seconds ``close`` waits for tasks on their way, and for the goodbye's ack.
        strip_keys: Keys removed from dict observations and from infos before step records are sent.
        send_obs: Whether step records carry observations (only sent when the curriculum wants steps,
            and reads them).
        send_infos: Whether step records carry infos (likewise).
        fallback_task_space: Opt-in: when the curriculum does not answer, sample tasks locally from this
            space (logged once) instead of raising. Feedback is then dropped.
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
        set_ = object.__setattr__
        set_(self, "prefetch", _count("prefetch", self.prefetch, 0))
        set_(self, "update_batch", _count("update_batch", self.update_batch, 1))
        if not (isinstance(self.max_update_delay, (int, float)) and self.max_update_delay == math.inf):
            set_(self, "max_update_delay", _seconds("max_update_delay", self.max_update_delay))
        set_(self, "timeout", _seconds("timeout", self.timeout, positive=True))
        set_(self, "close_timeout", _seconds("close_timeout", self.close_timeout))
        if self.reconnect_timeout != math.inf:
            set_(self, "reconnect_timeout", _seconds("reconnect_timeout", self.reconnect_timeout))
        if isinstance(self.strip_keys, str):
            raise TypeError("strip_keys must be an iterable of keys, not a single str")
        set_(self, "strip_keys", tuple(self.strip_keys))
        if self.fallback_task_space is not None and not isinstance(self.fallback_task_space, TaskSpace):
            raise TypeError(
                "fallback_task_space must be a TaskSpace or None, got "
                f"{type(self.fallback_task_space).__name__}"
            )
        keys = self.curve_client_keys
        if keys is not None:
            if self.curve_server_key is None:
                raise ValueError("curve_client_keys needs curve_server_key (the server's public key) as well")
            if isinstance(keys, (str, bytes)) or len(keys) != 2:
                raise ValueError(
                    "curve_client_keys must be this client's (public_key, secret_key) pair, e.g. "
                    "magister.sync.generate_keypair() or magister.sync.load_keypair(path)"
                )
            set_(self, "curve_client_keys", tuple(keys))
        mp = self.max_pending_updates
        if isinstance(mp, bool) or not isinstance(mp, int) or mp < 1:
            raise ValueError(f"max_pending_updates must be a positive int, got {mp!r}")

    @classmethod
    def of(cls, options: FeedOptions | None = None, **overrides: Any) -> FeedOptions:
        """``options`` (default: the defaults) with ``overrides``; an unknown name raises ``TypeError``
        naming it and the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown feed option(s) {unknown}; the options are {sorted(known)}")
        base = options if options is not None else cls()
        if not overrides:
            return base
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        values.update(overrides)
        return cls(**values)
