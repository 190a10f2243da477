"""Opponent snapshots on disk, and the machinery shared by the co-player curricula.

Co-player curricula (:mod:`~magister.curricula.self_play`, :mod:`~magister.curricula.fsp`,
:mod:`~magister.curricula.pfsp`) sample *opponent ids*. The opponents themselves, snapshots of the learning
policy, live in an :class:`OpponentStore`: a directory of snapshot files plus a small JSON index. An
environment worker receives only the id (through the sync layer) and loads the snapshot from the directory
itself, so policy weights never travel through the curriculum's sockets.

The store
---------
* One file per snapshot, written atomically (temporary file + :func:`os.replace`), with its size and a
  BLAKE2b checksum in the index. A damaged file is reported as :class:`CorruptSnapshotError` naming the id
  and the path, never loaded silently.
* Snapshots are torch objects (``state_dict`` s) saved with ``torch.save`` and loaded with
  ``torch.load(..., weights_only=True, map_location="cpu")`` by default (torch is imported lazily, only
  then), or anything else through a user-given ``save_fn(obj, file)`` / ``load_fn(file) -> obj`` pair
  working on binary file objects.
* Bounded: ``max_count`` snapshots in the rolling window and ``max_bytes`` bytes on disk in all. Eviction
  removes the oldest snapshots first, but never one that is *protected*: the newest, one leased by an
  environment (:meth:`OpponentStore.acquire` / :meth:`OpponentStore.release`), one pinned by the user
  (:meth:`OpponentStore.pin`) or one in the kept set (``keep_every=N`` keeps ids ``0, N, 2N, ...`` for good).
  Kept and pinned snapshots do not count towards ``max_count``; every snapshot counts towards ``max_bytes``.
* Read-modify-write of the index happens under an exclusive ``fcntl.flock`` on ``index.lock`` (with a
  timeout); readers need no lock because the index is always replaced atomically.
* A lease is one empty file in ``leases/`` named after the id and its owner (``host:pid``), so environments
  take and give back leases (typically once per episode) without touching the index or its lock. The
  evictor drops an id from the index *before* it looks for leases, and :meth:`OpponentStore.acquire` looks
  at the index *after* creating its lease file, so either the evictor sees the lease (and keeps the file
  until :meth:`OpponentStore.release`, which then deletes it) or the worker sees the id gone (``KeyError``).
  Leases of processes on this host that no longer exist are dropped at the next eviction, so a crashed
  worker cannot keep a snapshot forever.
* Eviction runs in the process that adds snapshots (the learner), inside :meth:`OpponentStore.add` and
  :meth:`OpponentStore.evict`; a released snapshot is removed at the next of these.

Outcomes
--------
:class:`OutcomeRule` turns an episode return into the learner's *score* against the opponent: 1 for a
learner win, 0 for a loss, 0.5 for a draw. A win rate is the mean score over the last ``memory`` results
against that opponent (draws count half).

>>> import json, tempfile
>>> d = tempfile.mkdtemp()
>>> store = OpponentStore(d, max_count=2, save_fn=lambda o, f: f.write(json.dumps(o).encode()),
...                       load_fn=lambda f: json.loads(f.read()))
>>> [store.add({"w": i}) for i in range(3)]
[0, 1, 2]
>>> store.ids(), store.load(2)
([1, 2], {'w': 2})
>>> OutcomeRule().learner_score_from_opponent_return(-1.0)
1.0
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..task_spaces.base import TaskSpace, _check_k
from .base import AgentCurriculum, Episode, check_finite

try:  # POSIX file locks; on other platforms the store still works for a single writer process.
    import fcntl
except ImportError:  # pragma: no cover - not reached on Linux/macOS
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

__all__ = [
    "CURRENT_AGENT",
    "CorruptSnapshotError",
    "OpponentCurriculum",
    "OpponentIdSpace",
    "OpponentLoader",
    "OpponentStore",
    "OutcomeRule",
]

#: The opponent id meaning "the current learning agent itself" (used by :class:`~.self_play.SelfPlay`).
CURRENT_AGENT = -1

_INDEX = "index.json"
_LOCK = "index.lock"
_LEASES = "leases"
_INDEX_FORMAT = "magister-opponent-store"
_INDEX_VERSION = 1


class CorruptSnapshotError(ValueError):
    """A snapshot file is missing, damaged (checksum mismatch) or cannot be deserialised."""


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _checksum(data: bytes) -> str:
    return "blake2b:" + hashlib.blake2b(data, digest_size=16).hexdigest()


def _snapshot_name(i: int) -> str:
    return f"snapshot-{i:08d}.bin"


def _lease_name(i: int, owner: str) -> str:
    # the owner is hex-encoded so any string is a safe file name; the random tail makes each lease unique
    return f"{i:08d}+{owner.encode().hex()}+{uuid.uuid4().hex[:12]}.lease"


def _parse_lease(name: str) -> tuple[int, str] | None:
    """``(opponent id, owner)`` of a lease file name, or ``None`` for anything else."""
    if not name.endswith(".lease"):
        return None
    parts = name[: -len(".lease")].split("+")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0]), bytes.fromhex(parts[1]).decode()
    except ValueError:
        return None


def _is_stale(owner: str) -> bool:
    """A lease owner ``host:pid`` of this host whose process no longer exists."""
    host, _, pid = owner.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))


def _check_id(opponent_id: Any) -> int:
    if isinstance(opponent_id, (bool, np.bool_)) or not isinstance(opponent_id, (int, np.integer)):
        raise TypeError(f"opponent id must be an int, got {opponent_id!r} ({type(opponent_id).__name__})")
    return int(opponent_id)


def _torch_save(obj: Any, f: BinaryIO) -> None:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is installed in the dev environment
        raise ImportError(
            "OpponentStore saves with torch.save by default, but torch is not installed; "
            "install torch or pass save_fn/load_fn"
        ) from exc
    torch.save(obj, f)


def _torch_load(f: BinaryIO) -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            "OpponentStore loads with torch.load by default, but torch is not installed; "
            "install torch or pass load_fn"
        ) from exc
    return torch.load(f, map_location="cpu", weights_only=True)


class _FileLock:
    """An exclusive ``flock`` on a lock file, acquired with a timeout (polling)."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> _FileLock:
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


class OpponentStore:
    """Snapshots of a learning policy on disk, bounded in count and bytes, loadable by id in any process.

    The learner :meth:`add` s snapshots (the co-player curricula do it in ``update_agent``); a worker opens
    the same directory and loads by id, ideally under a lease so the file cannot vanish while in use
    (:meth:`lease`, or :class:`OpponentLoader`, which keeps the current opponent leased and cached). A
    leased snapshot stays in the index, and counts towards the limits, until it is released.

    Parameters
    ----------
    directory:
        Where the snapshot files and ``index.json`` live. Another process opens the same store with
        ``OpponentStore(directory, max_count=None)`` (limits only matter to the process that adds).
    max_count:
        Most snapshots in the rolling window (``None``: unbounded). Kept/pinned ones are extra.
    max_bytes:
        Most bytes of snapshot files in all (``None``: unbounded).
    keep_every:
        If given, ids ``0, N, 2N, ...`` are kept for good (a sparse archive of the whole run).
    save_fn, load_fn:
        ``save_fn(obj, binary_file)`` and ``load_fn(binary_file) -> obj``. Default: torch save/load.
        Give both or neither.
    lock_timeout:
        Seconds to wait for the index lock before raising :class:`TimeoutError`.
    create:
        Create the directory and an empty index if missing; when false a missing store raises
        :class:`FileNotFoundError`.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_count: int | None,
        max_bytes: int | None = None,
        keep_every: int | None = None,
        save_fn: Callable[[Any, BinaryIO], Any] | None = None,
        load_fn: Callable[[BinaryIO], Any] | None = None,
        lock_timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        for name, value in (("max_count", max_count), ("max_bytes", max_bytes), ("keep_every", keep_every)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if (save_fn is None) != (load_fn is None):
            raise ValueError("pass both save_fn and load_fn, or neither (default: torch.save / torch.load)")
        if not lock_timeout > 0:
            raise ValueError(f"lock_timeout must be positive seconds, got {lock_timeout!r}")
        self.directory = Path(directory)
        self.max_count = None if max_count is None else int(max_count)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self.keep_every = None if keep_every is None else int(keep_every)
        self.save_fn = save_fn
        self.load_fn = load_fn
        self.lock_timeout = float(lock_timeout)
        # (raw index bytes, parsed index), replaced as one tuple so concurrent readers never see a torn pair
        self._cached: tuple[bytes, dict[str, Any]] | None = None
        self._warned_over = False
        if not (self.directory / _INDEX).exists():
            if not create:
                raise FileNotFoundError(f"no opponent store at {self.directory} (missing {_INDEX})")
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._locked():
                if not (self.directory / _INDEX).exists():
                    self._write_index({"format": _INDEX_FORMAT, "version": _INDEX_VERSION,
                                       "next_id": 0, "snapshots": []})
        self._read_index()  # validates the format
        self._lease_dir.mkdir(exist_ok=True)

    # -- pickling: only configuration travels (e.g. to spawned workers) ------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cached"] = None
        return state

    def __repr__(self) -> str:
        return (f"OpponentStore({str(self.directory)!r}, max_count={self.max_count}, "
                f"max_bytes={self.max_bytes}, keep_every={self.keep_every})")

    # -- index I/O ------------------------------------------------------------------------------------
    @property
    def index_path(self) -> Path:
        return self.directory / _INDEX

    @property
    def _lease_dir(self) -> Path:
        return self.directory / _LEASES

    def _locked(self) -> _FileLock:
        return _FileLock(self.directory / _LOCK, self.lock_timeout)

    def _read_index(self) -> dict[str, Any]:
        """The current index; re-parsed only when its bytes changed (the file is always replaced atomically,
        so a plain read always sees one complete version)."""
        path = self.index_path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"opponent store index {path} is missing") from None
        cached = self._cached
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            index = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"opponent store index {path} is not valid JSON: {exc}") from exc
        if not isinstance(index, dict) or index.get("format") != _INDEX_FORMAT:
            found = index.get("format") if isinstance(index, dict) else type(index).__name__
            raise ValueError(f"{path} is not a magister opponent store index (found format {found!r})")
        if index.get("version") != _INDEX_VERSION:
            raise ValueError(f"opponent store index {path} has version {index.get('version')!r}, "
                             f"this magister reads version {_INDEX_VERSION}")
        key = raw
        self._cached = (key, index)
        return index

    def _write_index(self, index: dict[str, Any]) -> None:
        tmp = self.directory / f".{_INDEX}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
        os.replace(tmp, self.index_path)
        self._cached = None

    def _entry(self, opponent_id: int, index: dict[str, Any] | None = None) -> dict[str, Any]:
        i = _check_id(opponent_id)
        snaps = (index if index is not None else self._read_index())["snapshots"]
        for e in snaps:
            if e["id"] == i:
                return e
        known = [e["id"] for e in snaps]
        raise KeyError(f"opponent id {i} is not in the store at {self.directory} (known ids: {known})")

    # -- queries -------------------------------------------------------------------------------------
    def ids(self) -> list[int]:
        """Ids of the stored snapshots, oldest first."""
        return sorted(int(e["id"]) for e in self._read_index()["snapshots"])

    def __len__(self) -> int:
        return len(self._read_index()["snapshots"])

    def __contains__(self, opponent_id: object) -> bool:
        try:
            i = _check_id(opponent_id)
        except TypeError:
            return False
        return any(e["id"] == i for e in self._read_index()["snapshots"])

    def latest_id(self) -> int | None:
        """Id of the newest snapshot, or ``None`` for an empty store."""
        ids = self.ids()
        return ids[-1] if ids else None

    def was_issued(self, opponent_id: int) -> bool:
        """Whether ``opponent_id`` was ever given out by this store (it may have been evicted since)."""
        i = _check_id(opponent_id)
        return 0 <= i < int(self._read_index()["next_id"])

    def path(self, opponent_id: int) -> Path:
        """Path of the snapshot file of ``opponent_id`` (``KeyError`` if unknown)."""
        return self.directory / self._entry(opponent_id)["file"]

    def info(self, opponent_id: int) -> dict[str, Any]:
        """A copy of the index entry (id, file, bytes, created, checksum, format, pinned) plus ``leases``,
        the number of leases held per owner."""
        entry = copy.deepcopy(self._entry(opponent_id))
        entry["leases"] = self._lease_owners(entry["id"])
        return entry

    def total_bytes(self) -> int:
        """Bytes of all snapshot files in the store."""
        return int(sum(e["bytes"] for e in self._read_index()["snapshots"]))

    # -- writing -------------------------------------------------------------------------------------
    def add(self, obj: Any) -> int:
        """Store a snapshot of ``obj``; returns its new id. Evicts old snapshots beyond the limits."""
        buf = io.BytesIO()
        (self.save_fn or _torch_save)(obj, buf)
        data = buf.getvalue()
        tmp = self.directory / f".snapshot.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            with self._locked():
                index = copy.deepcopy(self._read_index())
                new_id = int(index["next_id"])
                name = _snapshot_name(new_id)
                os.replace(tmp, self.directory / name)
                index["next_id"] = new_id + 1
                index["snapshots"].append({
                    "id": new_id, "file": name, "bytes": len(data), "created": time.time(),
                    "checksum": _checksum(data), "format": "custom" if self.save_fn else "torch",
                    "pinned": False,
                })
                self._evict_locked(index)
                self._write_index(index)
        finally:
            if tmp.exists():
                tmp.unlink()
        self._delete_unreferenced()
        logger.debug("stored opponent snapshot %d (%d bytes) in %s", new_id, len(data), self.directory)
        return new_id

    def evict(self) -> list[int]:
        """Run eviction now (e.g. after releases); returns the evicted ids."""
        with self._locked():
            index = copy.deepcopy(self._read_index())
            evicted = self._evict_locked(index)
            self._write_index(index)
        self._delete_unreferenced()
        return evicted

    def remove(self, opponent_id: int) -> None:
        """Delete one snapshot now. Raises ``ValueError`` if an environment holds a lease on it."""
        with self._locked():
            index = copy.deepcopy(self._read_index())
            entry = self._entry(opponent_id, index)
            if entry["id"] in self._leased_ids():
                owners = sorted(self._lease_owners(entry["id"]))
                raise ValueError(f"opponent {entry['id']} is leased by {owners}; release it before removing")
            index["snapshots"].remove(entry)
            self._write_index(index)
        self._delete_unreferenced()

    def _delete_unreferenced(self) -> None:
        """Delete snapshot files that are neither in the index nor leased (evicted ones, crash leftovers).

        Runs *after* the index is written: a worker that leased an id just before it was evicted is seen
        here and its file survives until :meth:`release` (which then deletes it).
        """
        live = {e["id"] for e in self._read_index()["snapshots"]} | self._leased_ids(drop_stale=False)
        for name in os.listdir(self.directory):
            if name.startswith("snapshot-") and name.endswith(".bin"):
                try:
                    i = int(name[len("snapshot-"):-len(".bin")])
                except ValueError:
                    continue
                if i not in live:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.directory / name)

    def _kept(self, entry: dict[str, Any]) -> bool:
        return bool(entry["pinned"]) or (self.keep_every is not None and entry["id"] % self.keep_every == 0)

    def _evict_locked(self, index: dict[str, Any]) -> list[int]:
        """Remove the oldest unprotected entries from ``index`` until within limits; returns their ids.

        Protected: the newest, leased, pinned and kept snapshots. Kept/pinned ones do not count towards
        ``max_count``; all count towards ``max_bytes``.
        """
        snaps = sorted(index["snapshots"], key=lambda e: e["id"])
        if not snaps:
            return []
        leased = self._leased_ids()
        newest = snaps[-1]["id"]
        count = sum(1 for e in snaps if not self._kept(e))
        total = sum(e["bytes"] for e in snaps)

        def over() -> bool:
            return ((self.max_count is not None and count > self.max_count)
                    or (self.max_bytes is not None and total > self.max_bytes))

        evicted: list[int] = []
        for e in snaps:
            if not over():
                break
            if e["id"] == newest or e["id"] in leased or self._kept(e):
                continue
            evicted.append(e["id"])
            count -= 1
            total -= e["bytes"]
        if over() and not self._warned_over:
            logger.warning(
                "opponent store %s is over its limits (max_count=%s, max_bytes=%s) because the remaining "
                "snapshots are protected (newest, leased, pinned or kept)",
                self.directory, self.max_count, self.max_bytes,
            )
            self._warned_over = True
        gone = set(evicted)
        index["snapshots"] = [e for e in snaps if e["id"] not in gone]
        if evicted:
            logger.debug("evicted opponent snapshots %s from %s", evicted, self.directory)
        return evicted

    def _modify(self, opponent_id: int, fn: Callable[[dict[str, Any]], None]) -> None:
        with self._locked():
            index = copy.deepcopy(self._read_index())
            fn(self._entry(opponent_id, index))
            self._write_index(index)

    # -- leases: one small file per lease, so taking or giving one back never rewrites the index ---------
    def _lease_files(self) -> list[tuple[int, str, str]]:
        """All leases as ``(opponent id, owner, file name)``."""
        try:
            names = os.listdir(self._lease_dir)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            parsed = _parse_lease(name)
            if parsed is not None:
                out.append((parsed[0], parsed[1], name))
        return out

    def _lease_owners(self, opponent_id: int) -> dict[str, int]:
        owners: dict[str, int] = {}
        for i, owner, _ in self._lease_files():
            if i == opponent_id:
                owners[owner] = owners.get(owner, 0) + 1
        return owners

    def _leased_ids(self, drop_stale: bool = True) -> set[int]:
        """Ids with at least one live lease; leases of dead processes on this host are deleted on the way."""
        leased = set()
        for i, owner, name in self._lease_files():
            if drop_stale and _is_stale(owner):
                logger.info("dropping stale lease on opponent %d held by dead process %s", i, owner)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._lease_dir / name)
                continue
            leased.add(i)
        return leased

    def leases(self, opponent_id: int) -> int:
        """Number of leases currently held on ``opponent_id`` (by all owners)."""
        i = _check_id(opponent_id)
        return sum(1 for j, _, _ in self._lease_files() if j == i)

    def acquire(self, opponent_id: int, owner: str | None = None) -> dict[str, Any]:
        """Take a lease on a snapshot: its file is not deleted until the lease is released.

        ``owner`` defaults to ``"host:pid"`` of this process. Returns a copy of the snapshot's index entry,
        with which :meth:`load_leased` loads it even if it is evicted from the index meanwhile. Raises
        ``KeyError`` for an id not in the store.
        """
        i = _check_id(opponent_id)
        who = owner or _owner()
        self._entry(i)  # KeyError naming the known ids
        path = self._lease_dir / _lease_name(i, who)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        # The evictor removes an id from the index *before* it checks for leases, so checking the index
        # *after* creating the lease closes the race: either it sees our lease, or we see the id gone.
        try:
            return copy.deepcopy(self._entry(i))
        except KeyError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            raise KeyError(f"opponent id {i} was evicted from the store at {self.directory} "
                           f"(known ids: {self.ids()})") from None

    def release(self, opponent_id: int, owner: str | None = None) -> None:
        """Give back one lease taken with :meth:`acquire`. ``ValueError`` if ``owner`` holds none."""
        i = _check_id(opponent_id)
        who = owner or _owner()
        files = self._lease_files()
        mine = [name for j, o, name in files if j == i and o == who]
        if not mine:
            owners = sorted({o for j, o, _ in files if j == i})
            raise ValueError(f"{who} holds no lease on opponent {i} (lease owners: {owners})")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._lease_dir / mine[0])
        if i not in self and not any(j == i for j, _, _ in self._lease_files()):
            # evicted while we held it: we were the last user of the file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / _snapshot_name(i))

    @contextlib.contextmanager
    def lease(self, opponent_id: int) -> Iterator[Any]:
        """``with store.lease(i) as snapshot:`` acquires, loads, and releases on exit."""
        entry = self.acquire(opponent_id)
        try:
            yield self.load_leased(entry)
        finally:
            self.release(opponent_id)

    def pin(self, opponent_id: int) -> None:
        """Keep a snapshot for good (it no longer counts towards ``max_count``)."""
        self._modify(opponent_id, lambda e: e.__setitem__("pinned", True))

    def unpin(self, opponent_id: int) -> None:
        """Undo :meth:`pin`; the snapshot becomes evictable again at the next eviction."""
        self._modify(opponent_id, lambda e: e.__setitem__("pinned", False))

    # -- loading -------------------------------------------------------------------------------------
    def load(self, opponent_id: int) -> Any:
        """Load the snapshot ``opponent_id``.

        Raises ``KeyError`` (naming the id and the known ids) for an id not in the store and
        :class:`CorruptSnapshotError` (naming the id and the file) for a missing or damaged file.
        """
        return self.load_leased(self._entry(opponent_id))

    def load_leased(self, entry: dict[str, Any]) -> Any:
        """Load the snapshot described by ``entry`` (as returned by :meth:`acquire`), checksum-verified."""
        path = self.directory / entry["file"]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if entry["id"] not in self:  # evicted between reading the index and opening the file
                raise KeyError(f"opponent id {entry['id']} was evicted from the store at {self.directory} "
                               f"(known ids: {self.ids()})") from None
            raise CorruptSnapshotError(
                f"snapshot file of opponent {entry['id']} is missing: {path}"
            ) from None
        if len(data) != entry["bytes"] or _checksum(data) != entry["checksum"]:
            raise CorruptSnapshotError(
                f"snapshot of opponent {entry['id']} is corrupted: {path} has {len(data)} bytes and checksum "
                f"{_checksum(data)}, the index recorded {entry['bytes']} bytes and {entry['checksum']}"
            )
        if entry["format"] == "custom" and self.load_fn is None:
            raise ValueError(f"snapshot of opponent {entry['id']} ({path}) was written by a custom save_fn; "
                             "open the store with the matching load_fn")
        loader = self.load_fn or _torch_load
        try:
            return loader(io.BytesIO(data))
        except ImportError:
            raise
        except Exception as exc:
            raise CorruptSnapshotError(
                f"snapshot of opponent {entry['id']} ({path}) could not be deserialised: {exc}"
            ) from exc


class OpponentLoader:
    """Worker-side helper: holds a lease on the opponent an environment is playing and caches it.

    ``get(i)`` releases the previous opponent's lease, leases ``i`` and loads it (once; the same id again is
    served from memory); ``close()`` releases the last lease. ``make_agent`` turns a loaded snapshot into a
    playable agent (e.g. builds a network and calls ``load_state_dict``).

    An id can be evicted between the moment the curriculum samples it and the moment a worker asks for it
    (tasks are prefetched). By default that raises ``KeyError``; with ``fallback_to_latest=True`` the loader
    logs a warning and plays the newest snapshot instead (``current_id`` says which one it loaded). The
    result the env reports for the evicted id is then dropped by the curriculum, so no win rate is skewed.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        load_fn: Callable[[BinaryIO], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        fallback_to_latest: bool = False,
        lock_timeout: float = 10.0,
    ) -> None:
        save_fn = None if load_fn is None else _refuse_save
        self.store = OpponentStore(directory, max_count=None, save_fn=save_fn, load_fn=load_fn,
                                   lock_timeout=lock_timeout, create=False)
        self.make_agent = make_agent
        self.fallback_to_latest = bool(fallback_to_latest)
        self.current_id: int | None = None
        self._agent: Any = None

    def __enter__(self) -> OpponentLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get(self, opponent_id: int) -> Any:
        """The agent for ``opponent_id``, leased while it is the current one."""
        i = _check_id(opponent_id)
        if i == self.current_id:
            return self._agent
        try:
            entry = self.store.acquire(i)
        except KeyError:
            latest = self.store.latest_id()
            if not (self.fallback_to_latest and self.store.was_issued(i) and latest is not None):
                raise
            logger.warning("opponent %d was evicted before this worker loaded it; playing the newest, %d",
                           i, latest)
            return self.get(latest)
        try:
            snap = self.store.load_leased(entry)
            agent = self.make_agent(snap) if self.make_agent is not None else snap
        except BaseException:
            self.store.release(i)
            raise
        self.close()
        self.current_id, self._agent = i, agent
        return agent

    def close(self) -> None:
        """Release the lease on the current opponent (if any)."""
        if self.current_id is not None:
            try:
                self.store.release(self.current_id)
            except ValueError:  # the lease file was removed by hand meanwhile
                logger.debug("lease on opponent %d was already gone", self.current_id)
            self.current_id, self._agent = None, None


def _refuse_save(obj: Any, f: BinaryIO) -> None:
    raise TypeError("an OpponentLoader only loads snapshots; add them through the learner's OpponentStore")


class OpponentIdSpace(TaskSpace):
    """The task space of a co-player curriculum: the opponent ids currently in a store (plus fixed extras).

    Encoded and decoded tasks are the same ints. The space grows as snapshots are added and shrinks as they
    are evicted, so it is open-ended: ``num_tasks`` is ``None``, while ``tasks`` (and ``ids()``) list the ids
    present *now*, ascending.

    >>> space = OpponentIdSpace(None, extra_ids=[CURRENT_AGENT])
    >>> space.tasks, space.contains(-1), space.contains(3), space.num_tasks
    ([-1], True, False, None)
    """

    def __init__(self, store: OpponentStore | None, *, extra_ids: Sequence[int] = (),
                 seed: int | None = None) -> None:
        super().__init__(seed)
        self.store = store
        self.extra_ids = [_check_id(i) for i in extra_ids]

    def ids(self) -> list[int]:
        """Current ids, ascending."""
        stored = self.store.ids() if self.store is not None else []
        return sorted(set(stored) | set(self.extra_ids))

    def _encoding_spec(self) -> Any:
        return ("opponent ids",)  # as the workers' OpponentIds: an id is its own encoding

    def _empty(self) -> RuntimeError:
        return RuntimeError("no opponents stored yet: call update_agent(agent) before sampling opponents")

    def sample(self) -> int:
        ids = self.ids()
        if not ids:
            raise self._empty()
        return ids[int(self._rng.integers(len(ids)))]

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[int]:
        _check_k(k)
        ids = self.ids()
        if not ids:
            raise self._empty()
        return [ids[i] for i in (rng or self._rng).integers(len(ids), size=int(k))]

    def contains(self, task: Any) -> bool:
        try:
            i = _check_id(task)
        except TypeError:
            return False
        return i in self.extra_ids or (self.store is not None and i in self.store)

    def encode(self, task: int) -> int:
        if not self.contains(task):
            raise ValueError(f"opponent id {task!r} is not in {self!r} (ids: {self.ids()})")
        return int(task)

    decode = encode

    @property
    def num_tasks(self) -> None:
        """Always ``None``: the set of ids changes over time (``len(space.ids())`` is the current count)."""
        return None

    @property
    def tasks(self) -> list[int]:
        return self.ids()

    def __repr__(self) -> str:
        where = str(self.store.directory) if self.store is not None else None
        return f"OpponentIdSpace(store={where!r}, extra_ids={self.extra_ids})"


class OutcomeRule:
    """Maps episode returns to the learner's score against the opponent: 1 win, 0.5 draw, 0 loss.

    A return ``r`` of one side counts as a win for that side when ``r > threshold + draw_margin``, a loss when
    ``r < threshold - draw_margin`` and a draw otherwise. The default (threshold 0, margin 0) suits zero-sum
    games with returns +1/-1/0. Subclass and override the two ``learner_score_from_*`` methods for anything
    else (they must return a number in [0, 1]).

    Multi-agent envs report per-agent returns in the episode update's ``extras["agent_returns"]`` (the
    episode return is then the *sum* over agents, which says nothing about who won a zero-sum game). Name the
    opponent's agent (``opponent_agent``) or the learner's (``learner_agent``) and
    :meth:`learner_score_from_episode` reads that agent's return instead.

    >>> rule = OutcomeRule(threshold=0.0, draw_margin=0.1)
    >>> rule.learner_score_from_opponent_return(1.0), rule.learner_score_from_learner_return(1.0)
    (0.0, 1.0)
    >>> rule.learner_score_from_learner_return(0.05)
    0.5
    >>> rule = OutcomeRule(opponent_agent="p1")
    >>> rule.learner_score_from_episode(0.0, {"agent_returns": {"p0": 1.0, "p1": -1.0}})
    1.0
    """

    def __init__(
        self,
        threshold: float = 0.0,
        draw_margin: float = 0.0,
        *,
        learner_agent: str | None = None,
        opponent_agent: str | None = None,
    ) -> None:
        self.threshold = check_finite("threshold", threshold)
        self.draw_margin = check_finite("draw_margin", draw_margin)
        if self.draw_margin < 0:
            raise ValueError(f"draw_margin must be >= 0, got {draw_margin!r}")
        if learner_agent is not None and opponent_agent is not None:
            raise ValueError("name learner_agent or opponent_agent, not both")
        self.learner_agent = None if learner_agent is None else str(learner_agent)
        self.opponent_agent = None if opponent_agent is None else str(opponent_agent)
        self._warned_sum = False

    def _side_score(self, r: float) -> float:
        if r > self.threshold + self.draw_margin:
            return 1.0
        if r < self.threshold - self.draw_margin:
            return 0.0
        return 0.5

    def learner_score_from_opponent_return(self, opponent_return: float) -> float:
        """The learner's score, from the opponent's episode return."""
        return 1.0 - self._side_score(opponent_return)

    def learner_score_from_learner_return(self, learner_return: float) -> float:
        """The learner's score, from the learner's own episode return."""
        return self._side_score(learner_return)

    def learner_score_from_episode(
        self, episode_return: float, extras: dict[str, Any] | None = None
    ) -> float:
        """The learner's score for one episode update, using the most specific information present.

        In order: ``extras["opponent_return"]``; the named agent's entry of ``extras["agent_returns"]``;
        else ``episode_return`` as the learner's return. A named agent missing from ``agent_returns`` raises
        ``KeyError`` naming it and the agents present.
        """
        extras = extras or {}
        if extras.get("opponent_return") is not None:
            r = check_finite("extras['opponent_return']", extras["opponent_return"])
            return self.learner_score_from_opponent_return(r)
        returns = extras.get("agent_returns")
        if returns:
            name = self.opponent_agent if self.opponent_agent is not None else self.learner_agent
            if name is None:
                if not self._warned_sum:
                    logger.warning("episode extras carry agent_returns but the OutcomeRule names neither "
                                   "learner_agent nor opponent_agent; judging outcomes by the summed return")
                    self._warned_sum = True
            else:
                if name not in returns:
                    raise KeyError(f"agent {name!r} is not in the episode's agent_returns "
                                   f"(agents: {sorted(returns)})")
                r = check_finite(f"agent_returns[{name!r}]", returns[name])
                if self.opponent_agent is not None:
                    return self.learner_score_from_opponent_return(r)
                return self.learner_score_from_learner_return(r)
        return self.learner_score_from_learner_return(check_finite("episode_return", episode_return))

    def __repr__(self) -> str:
        return (f"OutcomeRule(threshold={self.threshold}, draw_margin={self.draw_margin}, "
                f"learner_agent={self.learner_agent!r}, opponent_agent={self.opponent_agent!r})")


class _Results:
    """The last ``memory`` scores against one opponent, with a running sum."""

    __slots__ = ("scores", "total")

    def __init__(self, memory: int, scores: Sequence[float] = ()) -> None:
        self.scores: deque[float] = deque(maxlen=memory)
        self.total = 0.0
        for s in scores:
            self.add(s)

    def add(self, score: float) -> None:
        if len(self.scores) == self.scores.maxlen:
            self.total -= self.scores[0]
        self.scores.append(score)
        self.total += score


def _default_snapshot(agent: Any) -> Any:
    sd = getattr(agent, "state_dict", None)
    return sd() if callable(sd) else agent


class OpponentCurriculum(AgentCurriculum):
    """Shared machinery of the co-player curricula; subclasses implement ``sample`` and ``distribution``.

    * :meth:`update_agent` counts calls and stores a snapshot on the first call and then every
      ``checkpoint_interval`` calls (calls ``1, 1 + c, 1 + 2c, ...``), so the store is never empty once the
      learner has offered its policy. The snapshot is ``snapshot_fn(agent)``, by default
      ``agent.state_dict()`` when the agent has one, else the agent itself.
    * :meth:`get_opponent` loads a snapshot from the store (``make_agent(snapshot)`` if given);
      :data:`CURRENT_AGENT` (-1) is the object last given to :meth:`update_agent`.
    * Results: :meth:`update_winrate` takes the *opponent's* return, :meth:`update_on_episode` the
      *learner's* return (or per-agent returns in ``extras``) with the task being the opponent id; both go
      through ``outcome_rule`` and into a per-opponent memory of the last ``memory`` scores. A result for an
      evicted opponent (late feedback) is dropped with a debug log; an id the store never issued raises
      ``KeyError``.
    """

    def __init__(
        self,
        store: OpponentStore | None,
        *,
        checkpoint_interval: int,
        outcome_rule: OutcomeRule | None = None,
        memory: int = 128,
        initial_winrate: float = 0.5,
        snapshot_fn: Callable[[Any], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        extra_ids: Sequence[int] = (),
        seed: int | None = None,
    ) -> None:
        if store is not None and not isinstance(store, OpponentStore):
            raise TypeError(f"store must be an OpponentStore, got {type(store).__name__}")
        if isinstance(checkpoint_interval, bool) or not isinstance(checkpoint_interval, (int, np.integer)) \
                or checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval must be a positive int, got {checkpoint_interval!r}")
        if isinstance(memory, bool) or not isinstance(memory, (int, np.integer)) or memory < 1:
            raise ValueError(f"memory must be a positive int (number of results kept), got {memory!r}")
        initial_winrate = check_finite("initial_winrate", initial_winrate)
        if not 0.0 <= initial_winrate <= 1.0:
            raise ValueError(f"initial_winrate must be in [0, 1], got {initial_winrate!r}")
        if outcome_rule is not None and not isinstance(outcome_rule, OutcomeRule):
            raise TypeError(f"outcome_rule must be an OutcomeRule, got {type(outcome_rule).__name__}")
        super().__init__(OpponentIdSpace(store, extra_ids=extra_ids), seed=seed)
        self.store = store
        self.checkpoint_interval = int(checkpoint_interval)
        self.outcome_rule = outcome_rule or OutcomeRule()
        self.memory = int(memory)
        self.initial_winrate = initial_winrate
        self.snapshot_fn = snapshot_fn or _default_snapshot
        self.make_agent = make_agent
        self.num_updates = 0
        self.num_results = 0
        self._agent: Any = None
        self._has_agent = False
        self._results: dict[int, _Results] = {}
        self._version = 0  # bumped on every recorded result (invalidates cached distributions)

    # -- the Agent API -------------------------------------------------------------------------------
    def update_agent(self, agent: Any) -> int | None:
        """Offer the current policy; returns the new snapshot's id when one was stored, else ``None``."""
        self.num_updates += 1
        self._agent, self._has_agent = agent, True
        if self.store is None or (self.num_updates - 1) % self.checkpoint_interval != 0:
            return None
        new_id = self.store.add(self.snapshot_fn(agent))
        alive = set(self.store.ids()) | set(self.task_space.extra_ids)
        for gone in [i for i in list(self._results) if i not in alive]:
            del self._results[gone]
        self._version += 1
        logger.info("%s: stored opponent %d after %d updates", type(self).__name__, new_id, self.num_updates)
        return new_id

    def get_opponent(self, opponent_id: int) -> Any:
        """The opponent for ``opponent_id``: a loaded snapshot (via ``make_agent``) or the current agent."""
        i = _check_id(opponent_id)
        if i == CURRENT_AGENT:
            if not self._has_agent:
                raise RuntimeError("no current agent yet: call update_agent(agent) first")
            return self._agent
        if self.store is None:
            raise KeyError(f"opponent id {i} is unknown: {type(self).__name__} has no store "
                           f"(known ids: {self.task_space.ids()})")
        snap = self.store.load(i)
        return self.make_agent(snap) if self.make_agent is not None else snap

    def update_winrate(self, opponent_id: int, opponent_return: float) -> None:
        """Record one episode against ``opponent_id`` from the *opponent's* return."""
        r = check_finite("opponent_return", opponent_return)
        self._record(opponent_id, self.outcome_rule.learner_score_from_opponent_return(r))

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: Any,
        progress: float,
        env_id: int | None = None,
        *,
        extras: dict[str, Any] | None = None,
    ) -> None:
        """One finished episode of the learner (``episode_return``) against opponent ``task``.

        ``extras`` (the sync layer's episode extras) may carry ``"opponent_return"`` or ``"agent_returns"``;
        :meth:`OutcomeRule.learner_score_from_episode` decides which number judges the outcome.
        """
        check_finite("episode_return", episode_return)
        score = self.outcome_rule.learner_score_from_episode(episode_return, extras)
        self.num_episodes += 1
        self.num_steps += int(length)
        self._record(task, score)

    def on_episode(self, episode: Episode) -> None:
        """:meth:`update_on_episode` with the record's ``extras``."""
        self.update_on_episode(
            episode.episode_return, episode.length, episode.task, episode.progress, episode.env_id,
            extras=episode.extras,
        )

    def _record(self, opponent_id: Any, score: float) -> None:
        i = _check_id(opponent_id)
        score = check_finite("outcome score", score)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"outcome rule returned {score!r}; scores must be in [0, 1]")
        if not self.task_space.contains(i):
            if self.store is not None and self.store.was_issued(i):
                logger.debug("dropping a result against evicted opponent %d", i)
                return
            raise KeyError(f"opponent id {i} is unknown to {type(self).__name__} "
                           f"(known ids: {self.task_space.ids()})")
        res = self._results.get(i)
        if res is None:
            res = self._results[i] = _Results(self.memory)
        res.add(score)
        self.num_results += 1
        self._version += 1

    # -- win rates -------------------------------------------------------------------------------------
    def opponent_ids(self) -> list[int]:
        """The opponents that can be sampled now, ascending."""
        return self.task_space.ids()

    def winrate(self, opponent_id: int) -> float:
        """The learner's win rate against ``opponent_id`` (``initial_winrate`` before any result)."""
        res = self._results.get(_check_id(opponent_id))
        if res is None or not res.scores:
            return self.initial_winrate
        return res.total / len(res.scores)

    def winrates(self, ids: Sequence[int] | None = None) -> np.ndarray:
        """Win rates of ``ids`` (default: :meth:`opponent_ids`) as a float64 array."""
        ids = self.opponent_ids() if ids is None else ids
        return np.fromiter((self.winrate(i) for i in ids), dtype=np.float64, count=len(ids))

    def _ids_or_raise(self) -> list[int]:
        ids = self.opponent_ids()
        if not ids:
            raise RuntimeError(f"{type(self).__name__} has no opponents yet: call update_agent(agent) first")
        return ids

    # -- introspection and checkpointing ------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Base metrics plus store size, update count and the win rate against each sampleable opponent."""
        ids = self.opponent_ids()
        out = super().metrics() if ids else {"curriculum/sampled": float(self.num_sampled),
                                             "curriculum/episodes": float(self.num_episodes)}
        out["curriculum/store_size"] = float(len(self.store)) if self.store is not None else 0.0
        out["curriculum/agent_updates"] = float(self.num_updates)
        out["curriculum/results"] = float(self.num_results)
        rates = self.winrates(ids)
        for i, w in zip(ids, rates):
            out[f"curriculum/winrate/{i}"] = float(w)
        if ids:
            out["curriculum/mean_winrate"] = float(rates.mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        """Counters, the generator and the result memories (snapshots themselves stay in the store)."""
        state = super().state_dict()
        state.update({
            "num_updates": self.num_updates,
            "num_results": self.num_results,
            "memory": self.memory,
            "results": {int(i): list(r.scores) for i, r in self._results.items()},
            "store_directory": str(self.store.directory) if self.store is not None else None,
        })
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if int(state["memory"]) != self.memory:
            logger.warning("loading results kept with memory=%s into memory=%s", state["memory"], self.memory)
        self.num_updates = int(state["num_updates"])
        self.num_results = int(state["num_results"])
        self._results = {int(i): _Results(self.memory, s) for i, s in state["results"].items()}
        self._version += 1
