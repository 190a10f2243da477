"""Rate-limited logging: at most one record per kind of event per interval, the rest counted.

A server that logs one line per bad frame can be made to spend its time writing logs (and fill a disk) by
anyone who sends it garbage. :class:`RateLimitedLogger` logs the first event of each *kind* at once,
counts the ones that follow within ``interval`` seconds, and reports the count with the next record of that
kind (``"... (1234 more like this in the last 10 s)"``) or when :meth:`RateLimitedLogger.flush` is called
(servers flush when they close), so nothing goes unreported and the number of lines stays bounded by
``kinds x duration / interval``.

>>> import logging
>>> t = [0.0]
>>> log = RateLimitedLogger(logging.getLogger("demo"), interval=10.0, clock=lambda: t[0])
>>> [log.warning("bad", "bad frame from %s", peer) for peer in ("a", "b", "c")]
[True, False, False]
>>> log.suppressed("bad")
2
>>> t[0] = 11.0
>>> log.warning("bad", "bad frame from %s", "d")  # "bad frame from d (2 more like this in the last 11.0 s)"
True
>>> log.suppressed("bad")
0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RateLimitedLogger"]


class _Kind:
    __slots__ = ("last_emit", "count", "msg", "args", "level", "first_suppressed")

    def __init__(self) -> None:
        self.last_emit = -float("inf")
        self.count = 0
        self.msg = ""
        self.args: tuple[Any, ...] = ()
        self.level = logging.WARNING
        self.first_suppressed = 0.0


class RateLimitedLogger:
    """Log at most one record per ``kind`` per ``interval`` seconds through ``logger``; count the rest.

    Args:
        logger: Where records go.
        interval: Seconds between two records of one kind (> 0).
        clock: A monotonic clock in seconds (tests pass a fake one).

    Thread-safe: the server thread and an authentication thread may share one.
    """

    def __init__(
        self, logger: logging.Logger, interval: float = 10.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger, got {type(logger).__name__}")
        interval = float(interval)
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # (copies and pickles start with fresh counts and lock)
        return {"logger": self.logger, "interval": self.interval, "clock": self._clock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["logger"], state["interval"], clock=state["clock"])  # type: ignore[misc]

    def log(self, level: int, kind: str, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` at ``level`` unless a record of ``kind`` went out less than ``interval`` ago
        (then only count it). Returns whether a record was written."""
        now = self._clock()
        with self._lock:
            k = self._kinds.get(kind)
            if k is None:
                k = self._kinds[kind] = _Kind()
            if now - k.last_emit < self.interval:
                if k.count == 0:
                    k.first_suppressed = now
                k.count += 1
                k.msg, k.args, k.level = msg, args, level
                return False
            n, since = k.count, k.last_emit
            k.count = 0
            k.last_emit = now
        if not self.logger.isEnabledFor(level):
            return True
        if n:
            self.logger.log(
                level, msg + " (%d more like this in the last %.1f s)", *args, n, now - since,
                exc_info=exc_info,
            )
        else:
            self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, msg: str, *args: Any) -> bool:
        """:meth:`log` at ``WARNING``."""
        return self.log(logging.WARNING, kind, msg, *args)

    def error(self, kind: str, msg: str, *args: Any) -> bool:
        """:meth:`log` at ``ERROR``."""
        return self.log(logging.ERROR, kind, msg, *args)

    def exception(self, kind: str, msg: str, *args: Any) -> bool:
        """:meth:`log` at ``ERROR`` with the current exception's traceback (when a record is written)."""
        return self.log(logging.ERROR, kind, msg, *args, exc_info=True)

    def suppressed(self, kind: str | None = None) -> int:
        """Events counted but not yet reported, of ``kind`` (``None``: of every kind)."""
        with self._lock:
            if kind is not None:
                k = self._kinds.get(kind)
                return 0 if k is None else k.count
            return sum(k.count for k in self._kinds.values())

    def flush(self) -> None:
        """Report every kind's unreported count now: one record per kind, with its latest message."""
        now = self._clock()
        with self._lock:
            pending = [(k.level, k.msg, k.args, k.count, now - k.first_suppressed)
                       for k in self._kinds.values() if k.count]
            for k in self._kinds.values():
                if k.count:
                    k.count = 0
                    k.last_emit = now
        for level, msg, args, n, elapsed in pending:
            self.logger.log(
                level, msg + " (%d like this in the last %.1f s, the latest shown)", *args, n, elapsed
            )
