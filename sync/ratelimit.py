"""Rate-limited logging: :class:`RateLimitedLogger`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = ["RateLimitedLogger"]


@dataclass
class _Kind:
    last_record: float = float("-inf")
    held: int = 0  # events counted since the last record
    latest: tuple[int, str, tuple] = (logging.WARNING, "", ())  # the level, message and args of the last held


class RateLimitedLogger:
    """Log at most one record per ``kind`` per ``interval`` seconds through ``logger``; count the rest and
    report the count with the next record of that kind, or on :meth:`flush`: a peer that sends garbage cannot
    flood a server's log, and nothing goes unreported.

    >>> log = RateLimitedLogger(logging.getLogger("demo"), interval=10.0)
    >>> [log.warning("bad", "bad frame from %s", peer) for peer in ("a", "b", "c")]
    [True, False, False]
    >>> log.suppressed("bad")
    2

    ``clock``: a monotonic clock in seconds. Thread-safe; a copy or an unpickled one starts with no counts.
    """

    def __init__(
        self, logger: logging.Logger, interval: float = 10.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(logger, logging.Logger):
            raise TypeError(f"logger must be a logging.Logger, got {type(logger).__name__}")
        if not float(interval) > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.logger = logger
        self.interval = float(interval)
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:
        return partial(RateLimitedLogger, clock=self._clock), (self.logger, self.interval)

    def log(self, level: int, kind: str, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` at ``level`` unless a record of ``kind`` went out less than ``interval`` ago
        (then only count it); whether a record was written."""
        now = self._clock()
        with self._lock:
            k = self._kinds.setdefault(kind, _Kind())
            since = now - k.last_record
            if since < self.interval:
                k.held += 1
                k.latest = (level, msg, args)
                return False
            held, k.held, k.last_record = k.held, 0, now
        if held:
            msg += " (%d more like this in the last %.1f s)"
            args += (held, since)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, msg: str, *args: Any) -> bool:
        """:meth:`log` at ``WARNING``."""
        return self.log(logging.WARNING, kind, msg, *args)

    def exception(self, kind: str, msg: str, *args: Any) -> bool:
        """:meth:`log` at ``ERROR`` with the current exception's traceback."""
        return self.log(logging.ERROR, kind, msg, *args, exc_info=True)

    def suppressed(self, kind: str | None = None) -> int:
        """Events counted but not yet reported, of ``kind`` (``None``: of every kind)."""
        with self._lock:
            return sum(k.held for name, k in self._kinds.items() if kind in (None, name))

    def flush(self) -> None:
        """Report every kind's unreported count now: one record per kind, with its latest message."""
        now = self._clock()
        pending = []
        with self._lock:
            for k in self._kinds.values():
                if k.held:
                    pending.append((*k.latest, k.held, now - k.last_record))
                    k.held, k.last_record = 0, now
        for level, msg, args, held, elapsed in pending:
            note = " (%d like this in the last %.1f s, the latest shown)"
            self.logger.log(level, msg + note, *args, held, elapsed)
