"""The wire protocol between a curriculum server and its environment clients.

A message is the frames ``[header, oob_0, oob_1, ...]``; ``header`` is msgpack of ``(PROTOCOL_VERSION, kind,
fields)``: the :attr:`Message.KIND` of one of the frozen dataclasses below and its field values in
declaration order. (A ROUTER socket adds the peer's routing id in front; the server strips it.)

A numpy array is msgpack extension type 1: ``[len(dtype)] [dtype str, ascii] [ndim] [shape: ndim x uint64
LE]`` then its bytes; or, of at least ``oob_threshold`` bytes, type 2: the same header then the uint32 LE
index ``i`` of the frame ``oob_i`` holding its bytes, sent and received without a copy (decoded as a
read-only view). Only plain bool/int/float/complex/datetime/bytes/str dtypes travel.

The ZeroMQ transport may put a sequencing envelope in front of a message's first frame, so that a reconnect
loses no message and repeats none: ``b"MGSQ"``, kind (uint8), ``seq`` and ``ack`` (int64 LE); a msgpack
header never starts so, and a hello travels without one. ``DATA`` carries the message numbered ``seq`` (1,
2, ... per sender and registration), ``ack`` being the highest ``seq`` received in order; ``PING`` (client
-> server, no message) asks the server to send its unacknowledged replies again and answer ``PONG``, after
which the client sends its own again. Each side keeps this state in a :class:`Stream`. The envs of one
process share one socket, each on its own channel: a frame ``b"MGCH"`` + channel (uint32 LE) goes before
the message of every channel but 0 (:func:`channel_frame`), so one env alone sends what it always did.

There is **no Python object serialisation**: a peer sends only msgpack data and arrays, so it can never make
the other side run code. Decoding is bounded (header size, array/map/str lengths, array sizes checked against
their bytes), gives tuples for msgpack arrays and checks every field, so a malformed or hostile frame raises
:class:`ProtocolError` instead of allocating memory or giving a half-valid message.

>>> import numpy as np
>>> big = np.arange(40_000, dtype=np.float32)
>>> frames = encode(Tasks(env_id=0, task_ids=(7,), tasks=(big,), train=(True,)))
>>> len(frames)  # the header and one zero-copy frame for the large array
2
>>> bool((decode(frames).tasks[0] == big).all())
True
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any, ClassVar, NamedTuple

import msgpack
import numpy as np

__all__ = [
    "PROTOCOL_VERSION", "ProtocolError", "ProtocolVersionError", "Message", "Hello", "Welcome", "Tasks",
    "Report", "Update", "Steps", "Progress", "EpisodeEnd", "AgentPart", "ENV_TASK", "STEPS", "PROGRESS",
    "EPISODE", "StackedObs", "Error", "Goodbye", "MESSAGE_TYPES",
    "encode", "decode", "pack_value", "unpack_value", "DATA", "PING", "PONG", "pack_envelope",
    "unpack_envelope", "Stream", "rebase", "channel_frame", "split_channel",
]

#: Bumped whenever a message layout changes or a kind is added; both ends must agree.
PROTOCOL_VERSION = 13
#: Arrays with at least this many bytes travel as separate zero-copy frames.
DEFAULT_OOB_THRESHOLD = 64 * 1024
#: Upper bound on one msgpack header (the out-of-band frames are bounded by the socket's MAXMSGSIZE).
DEFAULT_MAX_HEADER_BYTES = 16 * 1024 * 1024
#: Upper bound on the number of out-of-band frames in one message.
MAX_FRAMES = 4096
#: Upper bound on the number of updates one :class:`Report` carries.
MAX_ROWS = 4096
#: A lease id that names no lease: the env chose the task itself (checked against the task space).
ENV_TASK = -1

_EXT_ARRAY, _EXT_ARRAY_FRAME = 1, 2  # the array extension types: bytes inline, or in an out-of-band frame
_MAX_NDIM = 32


class ProtocolError(ValueError):
    """A frame that is not a valid message of this protocol (malformed, truncated, wrong types)."""


class ProtocolVersionError(ProtocolError):
    """The peer speaks another protocol version."""


# -- numpy arrays as an extension type ----------------------------------------------------------------


def _check_dtype(dt: np.dtype) -> None:
    if dt.kind not in "biufcmMSU" or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"cannot send a numpy array of dtype {dt!r}; expected a plain bool/int/float/complex/"
                        "datetime/bytes/str dtype (object and structured arrays are never sent)")


def _array_payload(arr: np.ndarray, frames: list[Any] | None, oob_threshold: int) -> msgpack.ExtType:
    _check_dtype(arr.dtype)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    code = arr.dtype.str.encode("ascii")
    head = bytes((len(code),)) + code + bytes((arr.ndim,)) + struct.pack(f"<{arr.ndim}Q", *arr.shape)
    if frames is not None and arr.nbytes >= oob_threshold and len(frames) < MAX_FRAMES:
        frames.append(memoryview(arr.reshape(-1).view(np.uint8)))
        return msgpack.ExtType(_EXT_ARRAY_FRAME, head + struct.pack("<I", len(frames) - 1))
    return msgpack.ExtType(_EXT_ARRAY, head + arr.tobytes())


def _array_from(code: int, data: bytes, extra: Sequence[Any]) -> np.ndarray:
    if code not in (_EXT_ARRAY, _EXT_ARRAY_FRAME):
        raise ProtocolError(f"unknown msgpack extension type {code}")
    n = len(data)
    if n < 2 or not 0 < data[0] <= 16 or n < 2 + data[0]:
        raise ProtocolError("malformed numpy array header: bad dtype field")
    pos = 1 + data[0]
    try:
        dt = np.dtype(data[1:pos].decode("ascii"))
        _check_dtype(dt)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"refused numpy dtype {data[1:pos]!r}: {exc}") from None
    ndim = data[pos]
    if ndim > _MAX_NDIM or n < pos + 1 + 8 * ndim:
        raise ProtocolError(f"malformed numpy array header: {ndim} dimensions in {n} bytes")
    shape = struct.unpack_from(f"<{ndim}Q", data, pos + 1)
    pos += 1 + 8 * ndim
    if code == _EXT_ARRAY:
        buf = memoryview(data)[pos:]
    else:
        if n != pos + 4:
            raise ProtocolError("malformed numpy array header: bad frame index")
        (index,) = struct.unpack_from("<I", data, pos)
        if index >= len(extra):
            raise ProtocolError(f"array refers to frame {index}; the message has {len(extra)} extra frames")
        buf = memoryview(extra[index])
    count = math.prod(shape)
    if count * dt.itemsize != buf.nbytes:
        raise ProtocolError(
            f"numpy array of dtype {dt} and shape {shape} needs {count * dt.itemsize} bytes, got {buf.nbytes}"
        )
    if count == 0:
        return np.zeros(shape, dtype=dt)
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def pack_value(
    value: Any, frames: list[Any] | None = None, oob_threshold: int = DEFAULT_OOB_THRESHOLD
) -> bytes:
    """msgpack ``value`` with numpy support; large arrays are appended to ``frames`` when it is a list.

    >>> unpack_value(pack_value({"a": (1, 2.5, None)}))
    {'a': (1, 2.5, None)}
    """

    def default(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return _array_payload(obj, frames, oob_threshold)
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, (set, frozenset)):
            raise TypeError(f"cannot send a {type(obj).__name__}; use a tuple or list")
        raise TypeError(
            f"cannot send an object of type {type(obj).__name__} ({obj!r:.80}); only None, bool, int, "
            "float, str, bytes, tuples/lists, dicts and numpy arrays travel on the wire"
        )

    return msgpack.packb(value, default=default, use_bin_type=True)


def unpack_value(
    data: Any, frames: Sequence[Any] = (), *, max_buffer_size: int = DEFAULT_MAX_HEADER_BYTES
) -> Any:
    """Inverse of :func:`pack_value`: arrays come back as tuples, numpy arrays as read-only arrays."""
    nbytes = memoryview(data).nbytes
    if nbytes > max_buffer_size:
        raise ProtocolError(f"message header of {nbytes} bytes exceeds the limit of {max_buffer_size} bytes")
    try:
        # (msgpack bounds every str, bin, array, map and extension length by the size of ``data``)
        return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False,
                               ext_hook=partial(_array_from, extra=frames))
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError, ...)
        raise ProtocolError(f"malformed msgpack data: {type(exc).__name__}: {exc}") from None


# -- field types --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Type:
    """A field's type: a value of type ``exact`` is kept, one of the ``accept`` types (and none of the
    ``refuse`` types) is converted by ``exact``; any other value, or an int below ``lo``, is refused.
    ``none``, when given, makes the value of a ``None`` (``None`` refused otherwise)."""

    what: str
    exact: type
    accept: tuple[type, ...]
    refuse: tuple[type, ...] = ()
    lo: int | None = None
    none: Callable[[], Any] | None = None

    def __call__(self, name: str, v: Any) -> Any:
        if v is None and self.none is not None:
            return self.none()
        if type(v) is not self.exact:
            if isinstance(v, self.refuse) or not isinstance(v, self.accept):
                raise ProtocolError(f"field {name} must be {self.what}, got {type(v).__name__}")
            v = self.exact(v)
        if self.lo is not None and v < self.lo:
            raise ProtocolError(f"field {name} must be >= {self.lo}, got {v}")
        return v

    def fits(self, col: tuple) -> bool:
        """Whether every value of ``col`` is kept as it is, checked at C speed (for the per-step overhead)."""
        return set(map(type, col)) <= {self.exact} and (self.lo is None or not col or min(col) >= self.lo)


_NOT_BOOL = (bool, np.bool_)
_NAT = _Type("an int", int, (int, np.integer), _NOT_BOOL, lo=0)
_ID = _Type("an int", int, (int, np.integer), _NOT_BOOL, lo=-1)  # a lease id, or ENV_TASK
_POS = _Type("an int", int, (int, np.integer), _NOT_BOOL, lo=1)
_FLOAT = _Type("a number", float, (int, float, np.integer, np.floating), _NOT_BOOL)
_BOOL = _Type("a bool", bool, _NOT_BOOL)
_STR = _Type("a str", str, (str,))
_DICT = _Type("a dict", dict, (dict,))
_TUPLE = _Type("a tuple", tuple, (tuple, list))
_MAYBE_NAT = _Type("an int or None", int, (int, np.integer), _NOT_BOOL, lo=0, none=lambda: None)
_EXTRAS = _Type("a dict", dict, (dict,), none=dict)  # an episode's extras (``None`` made an empty one)


@dataclass(frozen=True)
class _Rows:
    """A field holding a tuple of rows, each a tuple of typed fields (an episode's per-agent part)."""

    fields: tuple[tuple[str, _Type], ...]
    make: Callable[..., tuple]

    def __call__(self, name: str, v: Any) -> tuple:
        rows = _TUPLE(name, v)
        out = []
        for i, row in enumerate(rows):
            row = _TUPLE(f"{name}[{i}]", row)
            if len(row) != len(self.fields):
                names = ", ".join(f for f, _ in self.fields)
                raise ProtocolError(f"field {name}[{i}] must be ({names}), got {len(row)} values")
            out.append(self.make(*(check(f"{name}[{i}].{f}", x) for (f, check), x in zip(self.fields, row))))
        return tuple(out)

    def fits(self, col: tuple) -> bool:  # (every value an empty tuple: no per-agent rows, the common case)
        return all(type(x) is tuple and not x for x in col)


def _column(name: str, v: Any, check: _Type | None = None, n: int | None = None) -> tuple:
    """``v`` as a tuple of ``n`` values (any number when ``n`` is ``None``), each of type ``check``
    (``None``: any value)."""
    col = _TUPLE(name, v)
    if n is not None and len(col) != n:
        raise ProtocolError(f"fields differ in length: {name} has {len(col)} entries, expected {n}")
    return col if check is None or check.fits(col) else tuple(check(name, x) for x in col)


_IDS = partial(_column, check=_NAT)  # a tuple of lease ids


def _array(name: str, v: Any, dtype: type, n: int) -> np.ndarray:
    if type(v) is np.ndarray and v.dtype == dtype and v.shape == (n,):
        return v  # (as a magister peer sends it: checked at C speed, like _Type.fits)
    try:
        arr = np.asarray(v)
    except Exception:
        raise ProtocolError(f"field {name} must be an array") from None
    if arr.shape != (n,):
        raise ProtocolError(f"field {name} must be a 1-d array of length {n}, got shape {arr.shape}")
    if arr.size and not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise ProtocolError(f"field {name} must have dtype {np.dtype(dtype)}, got {arr.dtype}")
    return arr.astype(dtype, copy=False)


# -- messages -----------------------------------------------------------------------------------------


class Message:
    """Base of every message kind: a frozen dataclass with a ``KIND`` code, whose fields are checked when it
    is made (a decoded message is as valid as a constructed one) by the checker ``CHECKS`` names for each, or
    by its own ``__post_init__`` where fields depend on each other."""

    KIND: ClassVar[int] = 0
    CHECKS: ClassVar[dict[str, Callable[[str, Any], Any]]] = {}

    def __post_init__(self) -> None:
        for name, check in self.CHECKS.items():
            self._set(name, check(name, getattr(self, name)))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Hello(Message):
    """Client -> server at connect: who is asking (for logs), answered by :class:`Welcome`."""

    KIND: ClassVar[int] = 1
    CHECKS: ClassVar[dict] = {
        "pid": _NAT, "name": _STR, "task_space": _STR, "stream": _MAYBE_NAT, "rejoin": _MAYBE_NAT,
        "lost": _NAT, "holds": _IDS, "reported": _NAT, "server": _STR,
    }
    pid: int
    name: str = ""
    #: The env's task space fingerprint (``""``: not given); the server refuses one unlike its curriculum's.
    task_space: str = ""
    #: The seed of the env's first seeded reset (``None``: none): its tasks are drawn from a generator of its
    #: own, derived from this number and the curriculum's seed.
    stream: int | None = None
    #: The env id of this client's previous registration (``None``: a first hello); the messages it still has
    #: to deliver from it carry that id.
    rejoin: int | None = None
    #: Updates of that registration the env could not keep while the server was away.
    lost: int = 0
    #: The leases of that registration the env still holds (being played, ready, or named in updates it
    #: will deliver): a server restored from a checkpoint ends the others as lost to the restore.
    holds: tuple[int, ...] = ()
    #: The episodes the env reported and had acknowledged over its life: a restored server counts those it
    #: lacks as lost to the restore.
    reported: int = 0
    #: The token of the server instance that gave ``rejoin`` (``""``: not given): env ids are numbered by
    #: each instance, so a server matches a returning env to its slot only if it numbered that id.
    server: str = ""


@dataclass(frozen=True)
class Welcome(Message):
    """Server -> client: the env id assigned to this client and the server's settings.

    ``step_obs`` / ``step_infos``: whether the curriculum reads observations / infos in step records (the
    client sends them only if its own ``send_obs`` / ``send_infos`` say so too).
    """

    KIND: ClassVar[int] = 2
    CHECKS: ClassVar[dict] = {
        "env_id": _NAT, "requires_step_updates": _BOOL, "step_batch_size": _POS, "step_obs": _BOOL,
        "step_infos": _BOOL, "task_space": _STR, "heartbeat": _FLOAT, "server_token": _STR, "resumed": _BOOL,
    }
    env_id: int
    requires_step_updates: bool
    step_batch_size: int
    step_obs: bool = True
    step_infos: bool = True
    #: The curriculum's task space fingerprint.
    task_space: str = ""
    #: Seconds between the heartbeats the server wants from an idle env (0: none).
    heartbeat: float = 0.0
    #: A random token naming this server instance: a client that registers again learns whether it met the
    #: same server (that had declared the env gone) or a restarted one.
    server_token: str = ""
    #: The server took a returning env back with the leases it held (restored from a checkpoint).
    resumed: bool = False


@dataclass(frozen=True)
class Tasks(Message):
    """Server -> client: tasks for ``env_id``, each with a server-unique id and the fields of a
    :class:`~magister.curricula.base.TaskSample`: ``train`` (``False``: evaluation-only), ``control``
    (default ``False``: ``True`` for the trainer's control policy) and ``variants`` (default ``None``: the
    encoded task the env plays instead).

    >>> Tasks(0, (4, 5), (1, 2), (True, False), (False, True), (9, None)).variants
    (9, None)
    >>> Tasks(0, (4,), (1,), (True,)).control
    (False,)
    """

    KIND: ClassVar[int] = 4
    env_id: int
    task_ids: tuple[int, ...]
    tasks: tuple[Any, ...]
    train: tuple[bool, ...]
    control: tuple[bool, ...] | None = None
    variants: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        self._set("env_id", _NAT("env_id", self.env_id))
        self._set("tasks", _TUPLE("tasks", self.tasks))
        n = len(self.tasks)
        self._set("task_ids", _column("task_ids", self.task_ids, _NAT, n))
        self._set("train", _column("train", self.train, _BOOL, n))
        control, variants = self.control, self.variants
        self._set("control", (False,) * n if control is None else _column("control", control, _BOOL, n))
        self._set("variants", (None,) * n if variants is None else _column("variants", variants, None, n))


@dataclass(frozen=True, eq=False)
class Steps(Message):
    """Part of a :class:`Report`: ``n`` consecutive steps of one env.

    Step ``i`` played the encoded task ``tasks[i]`` of lease ``task_ids[i]`` (``ENV_TASK``: a task the client
    chose). ``obs`` is ``None``, an array with first axis ``n``, a dict of such arrays (dict observations
    stacked per key, see :class:`StackedObs`) or a tuple of ``n`` observations; ``infos`` ``None`` or a
    tuple of ``n`` dicts.
    """

    task_ids: np.ndarray
    tasks: tuple[Any, ...]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    progress: np.ndarray
    obs: Any = None
    infos: tuple[dict, ...] | None = None

    def __post_init__(self) -> None:
        self._set("tasks", _TUPLE("tasks", self.tasks))
        n = len(self.tasks)
        for name, dtype in (("task_ids", np.int64), ("rewards", np.float64), ("terminated", np.bool_),
                            ("truncated", np.bool_), ("progress", np.float64)):
            self._set(name, _array(name, getattr(self, name), dtype, n))
        if n and self.task_ids.min() < ENV_TASK:
            raise ProtocolError(f"field task_ids must be >= {ENV_TASK}")
        obs = self.obs
        if isinstance(obs, np.ndarray):
            if obs.ndim == 0 or obs.shape[0] != n:
                raise ProtocolError(f"field obs has shape {obs.shape}, expected first axis {n}")
        elif isinstance(obs, dict):
            for k, v in obs.items():
                if not (isinstance(k, str) and isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n):
                    raise ProtocolError(f"field obs[{k!r}] must be an array with first axis {n} (stacked "
                                        "observations)")
        elif obs is not None:
            self._set("obs", _column("obs", obs, None, n))
        if self.infos is not None:
            self._set("infos", _column("infos", self.infos, _DICT, n))

    def __len__(self) -> int:
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Steps):
            return NotImplemented
        return _deep_equal(self._fields(), other._fields())  # (defining __eq__ makes a Steps unhashable)


class StackedObs(Sequence):
    """Per-step views ``{key: array[i]}`` of dict observations stacked per key (no copies).

    >>> obs = StackedObs({"a": np.arange(6).reshape(3, 2), "b": np.zeros(3)})
    >>> len(obs), obs[1]["a"].tolist(), [o["b"].item() for o in obs]
    (3, [2, 3], [0.0, 0.0, 0.0])
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        lengths = {v.shape[0] for v in arrays.values()}
        if len(lengths) > 1:
            raise ValueError(f"stacked observations disagree on the number of steps: {sorted(lengths)}")
        self.arrays = arrays
        self._n = lengths.pop() if lengths else 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(f"step {i} out of range for {self._n} steps")
        return {k: v[i] for k, v in self.arrays.items()}


class AgentPart(NamedTuple):
    """One agent's part of an episode reported per agent (a single-agent episode is one, agent ``None``)."""

    agent: str | None
    ret: float
    length: int
    progress: float


class Progress(NamedTuple):
    """Update: progress in [0, 1] on lease ``task_id`` mid-episode; ``done``: the task is consumed."""

    task_id: int
    task: Any
    progress: float
    done: bool = False


class EpisodeEnd(NamedTuple):
    """Update: an episode, or its part played on one task, ended on lease ``task_id`` (``ended`` false: cut
    short by an early reset, the task consumed but no return). ``agents`` is empty, or for a multi-agent
    episode reported per agent one :class:`AgentPart` per agent: each reaches the curriculum as its own
    episode, with the task's flags, and the lease is consumed once."""

    task_id: int
    task: Any
    ret: float
    length: int
    progress: float
    ended: bool = True
    extras: dict | None = None
    agents: tuple[AgentPart, ...] = ()


#: A report's updates: step records, progress, an episode's end. On the wire each is its kind, then its
#: fields in order: ``(STEPS, steps)``, ``(PROGRESS, *progress)``, ``(EPISODE, *episode_end)``.
Update = Steps | Progress | EpisodeEnd
STEPS, PROGRESS, EPISODE = 0, 1, 2
_KINDS: dict[type, int] = {Steps: STEPS, Progress: PROGRESS, EpisodeEnd: EPISODE}
_RECORDS: dict[int | None, type] = {PROGRESS: Progress, EPISODE: EpisodeEnd}
_AGENTS = _Rows((("agent", _STR), ("return", _FLOAT), ("length", _NAT), ("progress", _FLOAT)), AgentPart)
#: Each record's fields with their types (``None``: any value), checked column by column over a report.
_FIELDS: dict[type, tuple[str, tuple[tuple[str, Any], ...]]] = {
    Progress: ("progress", (("task_id", _ID), ("task", None), ("progress", _FLOAT), ("done", _BOOL))),
    EpisodeEnd: ("episode", (("task_id", _ID), ("task", None), ("return", _FLOAT), ("length", _NAT),
                             ("progress", _FLOAT), ("ended", _BOOL), ("extras", _EXTRAS),
                             ("agents", _AGENTS))),
}


def _record(i: int, u: Any) -> Update:
    """Update ``i`` as its record: kept when it is one, else made from its wire form ``(kind, *fields)``."""
    if type(u) in _KINDS:
        return u
    u = _TUPLE(f"updates[{i}]", u)
    kind = u[0] if u and type(u[0]) is int else None
    if kind == STEPS:
        if len(u) != 2:
            raise ProtocolError(f"updates[{i}] must be (STEPS, steps), got {len(u)} values")
        return u[1] if type(u[1]) is Steps else Steps(*_TUPLE(f"updates[{i}].steps", u[1]))
    cls = _RECORDS.get(kind)
    if cls is None:
        raise ProtocolError(f"updates[{i}] must start with its kind (STEPS, PROGRESS or EPISODE), got "
                            f"{u!r:.100}")
    what, columns = _FIELDS[cls]
    if len(u) != 1 + len(columns):
        raise ProtocolError(f"a {what} update must be ({what.upper()}, {', '.join(c for c, _ in columns)}), "
                            f"got {u!r:.200}")
    return cls(*u[1:])


def _updates(name: str, value: Any) -> tuple[Update, ...]:
    """A report's updates as records, checked: at most :data:`MAX_ROWS`, the records of one kind checked
    column by column."""
    updates = _TUPLE(name, value)
    if len(updates) > MAX_ROWS:
        raise ProtocolError(f"field updates holds {len(updates)}, more than the limit of {MAX_ROWS}")
    out = [_record(i, u) for i, u in enumerate(updates)]
    for cls, (what, columns) in _FIELDS.items():
        at = [i for i, u in enumerate(out) if type(u) is cls]
        if not at:
            continue
        values = zip(*(out[i] for i in at))
        checked = [_column(f"{what}.{c}", col, check) for (c, check), col in zip(columns, values)]
        for i, row in zip(at, zip(*checked)):
            out[i] = cls(*row)
    return tuple(out)


@dataclass(frozen=True)
class Report(Message):
    """Client -> server: the updates an env made since its last send, in order (:data:`Update` records),
    and the number of tasks it asks for (answered with one :class:`Tasks`). The server applies them in
    order, a refused one not stopping the others.

    >>> r = Report(0, (EpisodeEnd(3, 1, 2.0, 10, 1.0),), request=2)
    >>> decode(encode(r)) == r, r.updates[0].ret
    (True, 2.0)
    """

    KIND: ClassVar[int] = 3
    CHECKS: ClassVar[dict] = {"env_id": _NAT, "updates": _updates, "request": _NAT}
    env_id: int
    updates: tuple[Update, ...] = ()
    request: int = 0

    @property
    def episodes(self) -> list[EpisodeEnd]:
        """The episode ends among the updates, in order."""
        return [u for u in self.updates if type(u) is EpisodeEnd]

    def _fields(self) -> tuple:
        updates = tuple((STEPS, u._fields()) if type(u) is Steps else (_KINDS[type(u)], *u)
                        for u in self.updates)
        return (self.env_id, updates, self.request)


@dataclass(frozen=True)
class Error(Message):
    """Either direction: a request or update was refused. ``code`` is a short machine-readable tag."""

    KIND: ClassVar[int] = 5
    CHECKS: ClassVar[dict] = {"code": _STR, "message": _STR, "env_id": _MAYBE_NAT}
    code: str
    message: str
    env_id: int | None = None  # (None: the sender is not known)


@dataclass(frozen=True)
class Goodbye(Message):
    """Client -> server when an env closes, returning its unused prefetched tasks; the server echoes it."""

    KIND: ClassVar[int] = 6
    CHECKS: ClassVar[dict] = {"env_id": _NAT, "returned_task_ids": _IDS}
    env_id: int
    returned_task_ids: tuple[int, ...] = ()


#: Every message class by its ``KIND`` code.
MESSAGE_TYPES: dict[int, type[Message]] = {cls.KIND: cls for cls in (Hello, Welcome, Tasks, Report, Error,
                                                                      Goodbye)}


def _deep_equal(a: Any, b: Any) -> bool:
    """``a == b`` through tuples, lists and dicts; numpy arrays equal in dtype and values, NaN to NaN."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    return a == b


# -- encode / decode ----------------------------------------------------------------------------------


def encode(msg: Message, *, oob_threshold: int = DEFAULT_OOB_THRESHOLD) -> list[Any]:
    """The frames ``[header, *large_array_frames]`` of ``msg``; ``TypeError`` naming the object when a field
    holds one that cannot travel (e.g. an arbitrary Python object in an info)."""
    if type(msg) not in MESSAGE_TYPES.values():
        raise TypeError(f"expected a protocol Message, got {type(msg).__name__}")
    frames: list[Any] = []
    return [pack_value((PROTOCOL_VERSION, msg.KIND, msg._fields()), frames, oob_threshold), *frames]


def decode(frames: Sequence[Any], *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> Message:
    """The message in frames made by :func:`encode` (``bytes``, memoryviews or ``zmq.Frame`` objects, without
    a routing id); :class:`ProtocolError` (or :class:`ProtocolVersionError`) saying what is wrong."""
    if not isinstance(frames, (list, tuple)) or not frames:
        raise ProtocolError("empty message: expected at least a header frame")
    if len(frames) > MAX_FRAMES + 1:
        raise ProtocolError(f"message has {len(frames)} frames, more than the limit of {MAX_FRAMES + 1}")
    bufs = [f.buffer if hasattr(f, "buffer") else f for f in frames]
    envelope = unpack_value(bufs[0], bufs[1:], max_buffer_size=max_header_bytes)
    if not isinstance(envelope, tuple) or len(envelope) != 3:
        raise ProtocolError("malformed envelope: expected (protocol_version, kind, fields)")
    version, kind, values = envelope
    if version != PROTOCOL_VERSION:
        raise ProtocolVersionError(
            f"peer speaks magister sync protocol version {version!r}, this side speaks {PROTOCOL_VERSION}; "
            "install the same magister version on both sides"
        )
    cls = MESSAGE_TYPES.get(kind) if type(kind) is int else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r}")
    if not isinstance(values, tuple):
        raise ProtocolError(f"malformed {cls.__name__}: fields must be a tuple")
    try:
        return cls(*values)
    except (TypeError, ValueError) as exc:  # (a wrong number of fields, a refused one: ProtocolError)
        raise ProtocolError(f"malformed {cls.__name__} fields: {exc}") from None


# -- the sequencing envelope of the ZeroMQ transport ---------------------------------------------------

ENVELOPE_MAGIC = b"MGSQ"
#: Envelope kinds: a sequenced message, a request for a resend (and a liveness probe), the answer to one.
DATA, PING, PONG = 0, 1, 2
_ENVELOPE = struct.Struct("<4sBqq")
_CHANNEL = struct.Struct("<4sI")  # (the channel frame: b"MGCH", channel)
#: Bytes the envelope takes at the start of a message's first frame.
ENVELOPE_SIZE = _ENVELOPE.size


def pack_envelope(kind: int, seq: int, ack: int) -> bytes:
    """The envelope ``(kind, seq, ack)``, to put in front of a message's first frame."""
    return _ENVELOPE.pack(ENVELOPE_MAGIC, kind, seq, ack)


def unpack_envelope(frame: Any) -> tuple[int, int, int] | None:
    """``(kind, seq, ack)`` of the envelope at the start of ``frame`` (a message follows from
    :data:`ENVELOPE_SIZE`), ``None`` without one; :class:`ProtocolError` for a broken one.

    >>> unpack_envelope(pack_envelope(DATA, 7, 3)), unpack_envelope(encode(Report(0, request=1))[0])
    ((0, 7, 3), None)
    """
    buf = frame.buffer if hasattr(frame, "buffer") else frame
    if len(buf) < 4 or bytes(buf[:4]) != ENVELOPE_MAGIC:
        return None
    if len(buf) < ENVELOPE_SIZE:
        raise ProtocolError(f"malformed envelope: {len(buf)} bytes, expected at least {ENVELOPE_SIZE}")
    _, kind, seq, ack = _ENVELOPE.unpack_from(buf)
    if kind not in (DATA, PING, PONG) or seq < 0 or ack < 0:
        raise ProtocolError(f"malformed envelope frame: kind {kind}, seq {seq}, ack {ack}")
    return kind, seq, ack


def channel_frame(channel: int) -> list[bytes]:
    """The frames naming ``channel`` of a shared connection, to go before a message (none for channel 0)."""
    return [_CHANNEL.pack(b"MGCH", channel)] if channel else []


def split_channel(frames: Sequence[Any]) -> tuple[int, Sequence[Any]]:
    """``(channel, the message's frames)`` of ``frames`` (channel 0 without a channel frame).

    >>> split_channel([*channel_frame(3), b"m"]), split_channel([b"m"])
    ((3, [b'm']), (0, [b'm']))
    """
    first = getattr(frames[0], "buffer", frames[0]) if frames else b""
    if len(first) == _CHANNEL.size and bytes(first[:4]) == b"MGCH":
        return _CHANNEL.unpack(first)[1], frames[1:]
    return 0, frames


class Stream:
    """One side's state of a sequenced connection: the number of the last message it sent (``tx``) and of
    the last one it received in order (``rx``), and the messages it sent that the other side has not
    acknowledged (at most ``keep``, for a resend). ``pings``: this is the env's side, which asks for resends
    with ``PING``; the server's side answers them.

    >>> env, server = Stream(8, pings=True), Stream(8)
    >>> first, second = env.number([b"x"]), env.number([b"y"])
    >>> server.answer(*unpack_envelope(second[0]))  # the first was lost: the server says where it stands
    ('gap', [], 2)
    >>> server.answer(*unpack_envelope(first[0])), server.answer(*unpack_envelope(first[0]))
    (('deliver', [], None), ('repeat', [], None))
    >>> verdict, resend, control = env.answer(*unpack_envelope(server.control(PONG)))
    >>> verdict, len(resend), control  # the second is sent again
    ('control', 1, None)
    """

    def __init__(self, keep: int, pings: bool = False) -> None:
        self.keep, self.pings = keep, pings
        self.tx = self.rx = 0
        self.sent: deque[tuple[int, list[Any]]] = deque()
        self.gap = False  # a gap was reported since the last message received in order
        self.dropped = 0  # messages dropped unacknowledged (more than ``keep`` were waiting)

    def number(self, frames: list[Any]) -> list[Any]:
        """``frames`` as the next numbered message, kept until the other side acknowledges it."""
        self.tx += 1
        self.sent.append((self.tx, frames))
        if len(self.sent) > self.keep:  # a peer that far behind is gone: counted, liveness finds out
            self.sent.popleft()
            self.dropped += 1
        return self._framed(self.tx, frames)

    def _framed(self, seq: int, frames: list[Any]) -> list[Any]:
        return [pack_envelope(DATA, seq, self.rx) + frames[0], *frames[1:]]

    def control(self, kind: int) -> bytes:
        """A ``PING`` or ``PONG`` frame saying where this side stands."""
        return pack_envelope(kind, self.tx, self.rx)

    def answer(self, kind: int, seq: int, ack: int) -> tuple[str, list[list[Any]], int | None]:
        """Account for a received envelope; ``(verdict, resend, control)``: what it is, the frames of the
        messages to send again and the control kind to send after them (``None``: none).

        The verdicts: ``"deliver"`` (the next message in order: the only one to keep), ``"repeat"`` (already
        received), ``"gap"`` (one before it was lost: ask for the resend), ``"ahead"`` (after a gap already
        reported) or ``"control"`` (a ``PING`` or ``PONG``, answered as the module docstring says).
        """
        while self.sent and self.sent[0][0] <= ack:
            self.sent.popleft()
        if kind != DATA:
            if kind == PONG and not self.pings:
                raise ProtocolError("an env may not send a PONG envelope")
            resend = [self._framed(n, frames) for n, frames in self.sent]
            return "control", resend, None if self.pings else PONG
        if seq <= self.rx:
            return "repeat", [], None
        if seq > self.rx + 1:
            reported, self.gap = self.gap, True
            return ("ahead", [], None) if reported else ("gap", [], PING if self.pings else PONG)
        self.rx, self.gap = seq, False
        return "deliver", [], None


def rejoin_hello(hello: Hello, unacknowledged: Sequence[Message]) -> Hello:
    """``hello`` of a returning env, with what its ``unacknowledged`` reports (to be sent again) name: their
    lease ids added to ``holds``, their episodes taken out of ``reported``.

    >>> sent = [Report(0, (EpisodeEnd(7, 1, 1.0, 2, 1.0),), request=1), Goodbye(0, (9,))]
    >>> h = rejoin_hello(Hello(1, rejoin=0, holds=(3,), reported=5), sent)
    >>> h.holds, h.reported
    ((3, 7), 4)
    """
    updates = [u for m in unacknowledged if isinstance(m, Report) for u in m.updates]
    ids = [int(i) for u in updates for i in (u.task_ids if type(u) is Steps else (u.task_id,))]
    holds = (*hello.holds, *(i for i in ids if i != ENV_TASK))
    reported = hello.reported - sum(max(1, len(u.agents)) for u in updates if type(u) is EpisodeEnd)
    return replace(hello, holds=holds, reported=max(0, reported))


def rebase(unacknowledged: Sequence[Message], env_id: int) -> list[Report]:
    """The ``unacknowledged`` messages of an env's previous registration, as its new registration ``env_id``
    sends them again, for a client that registered again.

    Lease ids are kept (they are unique across registrations and server instances: the curriculum side
    applies each report once, or counts it); task requests and a goodbye are dropped (the env asks the new
    registration for what it needs).

    >>> (m,) = rebase([Report(3, (EpisodeEnd(17, 2, 1.0, 5, 1.0),), request=1), Report(3, request=2)], 0)
    >>> m.env_id, m.updates[0].task_id, m.request
    (0, 17, 0)
    >>> rebase([Goodbye(3, (9,))], 0)
    []
    """
    return [Report(env_id, m.updates) for m in unacknowledged if isinstance(m, Report) and m.updates]
