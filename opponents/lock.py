"""An exclusive ``flock`` on a lock file with a timeout: the opponent store's index lock.

On platforms without :mod:`fcntl` the lock is a no-op, and the store is then safe for a single writer process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

try:  # POSIX file locks
    import fcntl
except ImportError:  # pragma: no cover - not reached on Linux/macOS
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileLock"]


class FileLock:
    """An exclusive ``flock`` on a lock file, acquired with a timeout (polling)."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None:  # pragma: no cover
            return self
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(self._fd)
                    self._fd = None
                    raise TimeoutError(
                        f"could not lock the opponent store index {self.path} within {self.timeout} s "
                        "(another process holds it)"
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, 0.05)

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
