"""Opponent snapshots on disk: the store that co-player curricula and their environment workers share.

Co-player curricula (:mod:`~magister.curricula.self_play`, :mod:`~magister.curricula.fsp`,
:mod:`~magister.curricula.pfsp`) sample *opponent ids*. The opponents themselves, snapshots of the learning
policy, live in an :class:`OpponentStore`: a directory of snapshot files plus a small JSON index. An
environment worker receives only the id (through the sync layer) and loads the snapshot from the directory
itself, so policy weights never travel through the curriculum's sockets.

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

>>> import json, tempfile
>>> d = tempfile.mkdtemp()
>>> store = OpponentStore(d, max_count=2, save_fn=lambda o, f: f.write(json.dumps(o).encode()),
...                       load_fn=lambda f: json.loads(f.read()))
>>> [store.add({"w": i}) for i in range(3)]
[0, 1, 2]
>>> store.ids(), store.load(2)
([1, 2], {'w': 2})
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .lock import FileLock

logger = logging.getLogger(__name__)

__all__ = ["CURRENT_AGENT", "CorruptSnapshotError", "OpponentStore", "check_opponent_id"]

#: The opponent id meaning "the current learning agent itself" (:class:`~magister.curricula.SelfPlay`).
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


def check_opponent_id(opponent_id: Any) -> int:
    """``opponent_id`` as an int; ``TypeError`` naming the value for anything else (bools included)."""
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

    def _locked(self) -> FileLock:
        return FileLock(self.directory / _LOCK, self.lock_timeout)

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
        i = check_opponent_id(opponent_id)
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
            i = check_opponent_id(opponent_id)
        except TypeError:
            return False
        return any(e["id"] == i for e in self._read_index()["snapshots"])

    def latest_id(self) -> int | None:
        """Id of the newest snapshot, or ``None`` for an empty store."""
        ids = self.ids()
        return ids[-1] if ids else None

    def was_issued(self, opponent_id: int) -> bool:
        """Whether ``opponent_id`` was ever given out by this store (it may have been evicted since)."""
        i = check_opponent_id(opponent_id)
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
        i = check_opponent_id(opponent_id)
        return sum(1 for j, _, _ in self._lease_files() if j == i)

    def acquire(self, opponent_id: int, owner: str | None = None) -> dict[str, Any]:
        """Take a lease on a snapshot: its file is not deleted until the lease is released.

        ``owner`` defaults to ``"host:pid"`` of this process. Returns a copy of the snapshot's index entry,
        with which :meth:`load_leased` loads it even if it is evicted from the index meanwhile. Raises
        ``KeyError`` for an id not in the store.
        """
        i = check_opponent_id(opponent_id)
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
        i = check_opponent_id(opponent_id)
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
