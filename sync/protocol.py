"""The wire protocol between a curriculum server and its environment clients.

Every message is one ZeroMQ multipart message::

    [header, oob_0, oob_1, ...]

``header`` is msgpack of the envelope ``(PROTOCOL_VERSION, kind, fields)``, where ``kind`` is the small
integer :attr:`Message.KIND` of one of the frozen dataclasses below and ``fields`` is the tuple of its
field values in declaration order. (A ROUTER socket adds the peer's routing id in front; the server
strips it before decoding.) The ZeroMQ transport may put one more small frame in front, the sequencing
envelope (:func:`pack_envelope`) that numbers messages so that a reconnect loses none and repeats none.

numpy arrays travel as a msgpack extension type: a small binary header (dtype string, shape) followed by
the raw bytes for small arrays, or by the index of a separate frame ``oob_i`` holding the bytes for arrays
of at least ``oob_threshold`` bytes. Those frames are sent and received without copying (the decoded array is
a read-only view on the received frame). Only plain numeric/bool/bytes/str dtypes are accepted; object and
structured dtypes are refused on both sides.

There is **no Python object serialisation** anywhere: a peer can send only msgpack data and arrays, so it
can never make the other side run code. Decoding is bounded (a header size limit, array/map/str lengths,
array sizes checked against the bytes that carry them), unpacks arrays as tuples (``use_list=False``) and
checks every field's type, so a malformed or hostile frame raises :class:`ProtocolError` instead of
allocating memory or producing a half-valid message.

>>> msg = Report(env_id=3, request=2)
>>> decode(encode(msg)) == msg
True
>>> import numpy as np
>>> big = np.arange(40_000, dtype=np.float32)
>>> frames = encode(Tasks(env_id=0, task_ids=(7,), tasks=(big,), train=(True,)))
>>> len(frames)                  # header + one zero-copy frame for the large array
2
>>> out = decode(frames)
>>> bool((out.tasks[0] == big).all())
True
"""

from __future__ import annotations

import logging
import math
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from functools import partial
from typing import Any, ClassVar

import msgpack
import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "PROTOCOL_VERSION",
    "ProtocolError",
    "ProtocolVersionError",
    "Message",
    "Hello",
    "Welcome",
    "Tasks",
    "Report",
    "Steps",
    "STEPS",
    "PROGRESS",
    "EPISODE",
    "StackedObs",
    "Error",
    "Goodbye",
    "MESSAGE_TYPES",
    "encode",
    "decode",
    "pack_value",
    "unpack_value",
    "DATA",
    "PING",
    "PONG",
    "pack_envelope",
    "unpack_envelope",
    "Stream",
    "rebase",
]

#: Bumped whenever a message layout changes or a kind is added; both ends must agree.
PROTOCOL_VERSION = 9
#: Arrays with at least this many bytes travel as separate zero-copy frames.
DEFAULT_OOB_THRESHOLD = 64 * 1024
#: Upper bound on one msgpack header (the out-of-band frames are bounded by the socket's MAXMSGSIZE).
DEFAULT_MAX_HEADER_BYTES = 16 * 1024 * 1024
#: Upper bound on the number of out-of-band frames in one message.
MAX_FRAMES = 4096
#: Upper bound on the number of updates one :class:`Report` carries.
MAX_ROWS = 4096

_EXT_ARRAY = 1  # payload: msgpack (dtype str, shape, raw bytes)
_EXT_ARRAY_FRAME = 2  # payload: msgpack (dtype str, shape, index of the out-of-band frame)
_ALLOWED_DTYPE_KINDS = frozenset("biufcmMSU")
_MAX_NDIM = 32


class ProtocolError(ValueError):
    """A frame that is not a valid message of this protocol (malformed, truncated, wrong types)."""


class ProtocolVersionError(ProtocolError):
    """The peer speaks another protocol version."""


# -- numpy arrays as an extension type ----------------------------------------------------------------


def _check_dtype(dt: np.dtype) -> None:
    if dt.kind not in _ALLOWED_DTYPE_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(
            f"cannot send a numpy array of dtype {dt!r}; expected a plain bool/int/float/complex/"
            "datetime/bytes/str dtype (object and structured arrays are never sent)"
        )


def _dtype_from(code: bytes) -> np.dtype:
    try:
        dt = np.dtype(code.decode("ascii"))
        _check_dtype(dt)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"refused numpy dtype {code!r}: {exc}") from None
    return dt


# Array payload: [len(dtype)] [dtype str, ascii] [ndim] [shape: ndim x uint64 LE] then the raw bytes
# (_EXT_ARRAY) or the uint32 index of the out-of-band frame holding them (_EXT_ARRAY_FRAME).
def _array_payload(arr: np.ndarray, frames: list[Any] | None, oob_threshold: int) -> msgpack.ExtType:
    dt = arr.dtype
    _check_dtype(dt)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    code = dt.str.encode("ascii")
    head = bytes((len(code),)) + code + bytes((arr.ndim,)) + struct.pack(f"<{arr.ndim}Q", *arr.shape)
    if frames is not None and arr.nbytes >= oob_threshold and len(frames) < MAX_FRAMES:
        frames.append(memoryview(arr.reshape(-1).view(np.uint8)))
        return msgpack.ExtType(_EXT_ARRAY_FRAME, head + struct.pack("<I", len(frames) - 1))
    return msgpack.ExtType(_EXT_ARRAY, head + arr.tobytes())


def _default(frames: list[Any] | None, oob_threshold: int):
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

    return default


def _array_from(code: int, data: bytes, extra: Sequence[Any]) -> np.ndarray:
    n = len(data)
    if n < 2 or data[0] == 0 or data[0] > 16 or n < 2 + data[0]:
        raise ProtocolError("malformed numpy array header: bad dtype field")
    pos = 1 + data[0]
    dt = _dtype_from(data[1:pos])
    ndim = data[pos]
    pos += 1
    if ndim > _MAX_NDIM or n < pos + 8 * ndim:
        raise ProtocolError(f"malformed numpy array header: {ndim} dimensions in {n} bytes")
    shape = struct.unpack_from(f"<{ndim}Q", data, pos)
    pos += 8 * ndim
    if code == _EXT_ARRAY_FRAME:
        if n != pos + 4:
            raise ProtocolError("malformed numpy array header: bad frame index")
        (index,) = struct.unpack_from("<I", data, pos)
        if index >= len(extra):
            raise ProtocolError(f"array refers to frame {index}; the message has {len(extra)} extra frames")
        buf: Any = extra[index]
        nbytes = memoryview(buf).nbytes
    else:
        buf = memoryview(data)[pos:]
        nbytes = n - pos
    count = math.prod(shape)
    if count * dt.itemsize != nbytes:
        raise ProtocolError(
            f"numpy array of dtype {dt} and shape {shape} needs {count * dt.itemsize} bytes, got {nbytes}"
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
    return msgpack.packb(value, default=_default(frames, oob_threshold), use_bin_type=True)


def _ext(code: int, payload: bytes, frames: Sequence[Any]) -> Any:
    if code == _EXT_ARRAY or code == _EXT_ARRAY_FRAME:
        return _array_from(code, payload, frames)
    raise ProtocolError(f"unknown msgpack extension type {code}")


def unpack_value(
    data: Any, frames: Sequence[Any] = (), *, max_buffer_size: int = DEFAULT_MAX_HEADER_BYTES
) -> Any:
    """Inverse of :func:`pack_value`: arrays come back as tuples, numpy arrays as read-only arrays."""
    nbytes = memoryview(data).nbytes
    if nbytes > max_buffer_size:
        raise ProtocolError(f"message header of {nbytes} bytes exceeds the limit of {max_buffer_size} bytes")


    def ext_hook(code: int, payload: bytes) -> Any:
        return _ext(code, payload, frames)

    try:
        return msgpack.unpackb(
            data,
            use_list=False,
            raw=False,
            strict_map_key=False,
            ext_hook=ext_hook,
            max_str_len=nbytes,
            max_bin_len=nbytes,
            max_array_len=nbytes,
            max_map_len=nbytes // 2,
            max_ext_len=nbytes,
        )
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError, ...)
        raise ProtocolError(f"malformed msgpack data: {type(exc).__name__}: {exc}") from None


# -- field checkers: each takes (field name, value) and returns the value the message keeps ------------


def _int(name: str, v: Any, lo: int | None = None) -> int:
    if type(v) is not int:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ProtocolError(f"field {name} must be an int, got {type(v).__name__}")
        v = int(v)
    if lo is not None and v < lo:
        raise ProtocolError(f"field {name} must be >= {lo}, got {v}")
    return v


_NAT = partial(_int, lo=0)  # an int >= 0
_ID = partial(_int, lo=-1)  # an id, or -1 for none
_POS = partial(_int, lo=1)


def _float(name: str, v: Any) -> float:
    if type(v) is float:
        return v
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ProtocolError(f"field {name} must be a number, got {type(v).__name__}")
    return float(v)


def _bool(name: str, v: Any) -> bool:
    if type(v) is bool:
        return v
    if not isinstance(v, np.bool_):
        raise ProtocolError(f"field {name} must be a bool, got {type(v).__name__}")
    return bool(v)


def _str(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ProtocolError(f"field {name} must be a str, got {type(v).__name__}")
    return v


def _dict(name: str, v: Any) -> dict:
    if not isinstance(v, dict):
        raise ProtocolError(f"field {name} must be a dict, got {type(v).__name__}")
    return v


def _tuple(name: str, v: Any) -> tuple:
    if not isinstance(v, (tuple, list)):
        raise ProtocolError(f"field {name} must be a tuple, got {type(v).__name__}")
    return tuple(v)


def _column(name: str, v: Any, check: Any, n: int | None = None) -> tuple:
    """A tuple of ``n`` values (any length when ``n`` is ``None``), each checked by ``check`` (``None``:
    any value)."""
    col = _tuple(name, v)
    if n is not None and len(col) != n:
        raise ProtocolError(f"fields differ in length: {name} has {len(col)} entries, expected {n}")
    if check is None or _exact(col, check):
        return col
    return tuple(check(name, x) for x in col)


def _exact(col: tuple, check: Any) -> bool:
    """Whether every value has the exact type ``check`` keeps (and is in range): what a magister peer sends,
    checked at C speed (a step update's infos, an episode batch's columns: the overhead targets need it)."""
    if check in _EXACT_TYPES:
        return set(map(type, col)) <= {_EXACT_TYPES[check]}
    if check in _LOWEST:
        return not col or (set(map(type, col)) == {int} and min(col) >= _LOWEST[check])
    return False


def _array(name: str, v: Any, dtype: Any, n: int) -> np.ndarray:
    if type(v) is np.ndarray and v.dtype == dtype and v.ndim == 1 and v.shape[0] == n:
        return v  # (as a magister peer sends it: checked at C speed, like _exact)
    try:
        arr = np.asarray(v)
    except Exception:
        raise ProtocolError(f"field {name} must be an array") from None
    if arr.ndim != 1:
        raise ProtocolError(f"field {name} must be a 1-d array, got shape {arr.shape}")
    want = np.dtype(dtype)
    if arr.size and not np.can_cast(arr.dtype, want, casting="same_kind"):
        raise ProtocolError(f"field {name} must have dtype {want}, got {arr.dtype}")
    if arr.shape[0] != n:
        raise ProtocolError(f"field {name} has length {arr.shape[0]}, expected {n}")
    return arr.astype(want, copy=False)


_EXACT_TYPES = {_bool: bool, _float: float, _dict: dict, _str: str}
_LOWEST = {_NAT: 0, _ID: -1, _POS: 1}


# -- messages -----------------------------------------------------------------------------------------


class Message:
    """Base of every message kind: a frozen dataclass with a class-level ``KIND`` code.

    Its fields are checked when it is made, so a decoded message is as valid as a constructed one:
    ``CHECKS`` names a checker per field (kinds with fields that depend on each other check in their
    own ``__post_init__``).
    """

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
        "pid": _NAT, "name": _str, "task_space": _str, "stream": _ID, "rejoin": _ID, "lost": _NAT,
        "holds": partial(_column, check=_NAT), "reported": _NAT,
    }
    pid: int
    name: str = ""
    #: The env's task space fingerprint (``""``: not given): the server refuses the env when it differs
    #: from its curriculum's.
    task_space: str = ""
    #: The env's random stream (the seed of its first seeded reset; ``-1``: none): tasks sampled for this env
    #: draw from a generator of its own, derived from the curriculum's seed and this number.
    stream: int = -1
    #: The env id this client had before it registered again (``-1``: a first hello). Messages it still
    #: has to deliver from that registration carry that id; the server takes them as the new one's.
    rejoin: int = -1
    #: Updates of that registration the env could not keep while the server was away (counted there).
    lost: int = 0
    #: The leases of that registration the env still holds (being played, ready, or named in updates it
    #: will deliver): a server restored from a checkpoint ends the others as lost to the restore.
    holds: tuple[int, ...] = ()
    #: The episodes the env reported and the server acknowledged, over its life: a server restored from a
    #: checkpoint counts the ones it lacks as lost to the restore.
    reported: int = 0


@dataclass(frozen=True)
class Welcome(Message):
    """Server -> client: the env id assigned to this client and the server's settings.

    ``step_obs`` / ``step_infos``: whether step records should carry observations / infos (the curriculum's
    ``requires_step_observations`` and ``requires_step_infos``); the client sends them only when these and
    its own ``send_obs`` / ``send_infos`` options agree.
    """

    KIND: ClassVar[int] = 2
    CHECKS: ClassVar[dict] = {
        "env_id": _NAT, "requires_step_updates": _bool, "requires_episode_updates": _bool,
        "step_batch_size": _POS, "step_obs": _bool, "step_infos": _bool, "task_space": _str,
        "heartbeat": _float, "server_token": _str, "resumed": _bool,
    }
    env_id: int
    requires_step_updates: bool
    requires_episode_updates: bool
    step_batch_size: int
    step_obs: bool = True
    step_infos: bool = True
    #: The curriculum's task space fingerprint.
    task_space: str = ""
    #: Seconds between the heartbeats the server wants from an idle env (0: none).
    heartbeat: float = 0.0
    #: A random token naming this server instance: a client that registers again learns from it whether it
    #: met the same server (it had declared the env gone) or a restarted one.
    server_token: str = ""
    #: The server took a returning env back with the leases it held (restored from a checkpoint).
    resumed: bool = False


@dataclass(frozen=True)
class Tasks(Message):
    """Server -> client: tasks addressed to ``env_id``, each with a server-unique id and its metadata.

    Per task: ``train`` (``False``: evaluation-only), ``control`` (``True``: to be played by the trainer's
    control policy) and ``variants`` (the encoded task the env plays instead, ``None``: the task itself),
    the fields of :class:`~magister.curricula.base.TaskSample`. ``control`` and ``variants`` default to all
    ``False`` / all ``None``.

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
        self._set("tasks", _tuple("tasks", self.tasks))
        n = len(self.tasks)
        self._set("task_ids", _column("task_ids", self.task_ids, _NAT, n))
        self._set("train", _column("train", self.train, _bool, n))
        control, variants = self.control, self.variants
        self._set("control", (False,) * n if control is None else _column("control", control, _bool, n))
        self._set("variants", (None,) * n if variants is None else _column("variants", variants, None, n))


@dataclass(frozen=True, eq=False)
class Steps(Message):
    """Part of a :class:`Report`: ``n`` consecutive steps of one env (sent only to a curriculum that wants
    them).

    ``task_ids[i]`` is the id of the task step ``i`` belonged to (``-1`` for a task the client chose
    itself), ``tasks[i]`` that encoded task. ``obs`` is ``None``, an array whose first axis has length
    ``n``, a dict of such arrays (dict observations stacked per key: a few large frames instead of one small
    array per step and key; :class:`StackedObs` gives the per-step view), or a tuple of ``n`` observations;
    ``infos`` is ``None`` or a tuple of ``n`` dicts.
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
        self._set("tasks", _tuple("tasks", self.tasks))
        n = len(self.tasks)
        ids = _array("task_ids", self.task_ids, np.int64, n)
        if ids.size and ids.min() < -1:
            raise ProtocolError("field task_ids must be >= -1")
        self._set("task_ids", ids)
        for name, dtype in (("rewards", np.float64), ("terminated", np.bool_), ("truncated", np.bool_),
                            ("progress", np.float64)):
            self._set(name, _array(name, getattr(self, name), dtype, n))
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
            self._set("infos", _column("infos", self.infos, _dict, n))

    def __len__(self) -> int:
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Steps):
            return NotImplemented
        return _deep_equal(self._fields(), other._fields())

    __hash__ = None  # type: ignore[assignment]


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


#: The kinds of a report's updates. Each update is a tuple, its kind first: ``(STEPS, steps)`` (a
#: :class:`Steps`), ``(PROGRESS, task_id, task, progress, done)``, ``(EPISODE, task_id, task, return, length,
#: progress, ended, extras)``.
STEPS, PROGRESS, EPISODE = 0, 1, 2
#: The fields after the kind of a progress and an episode update, each with its checker (``None``: any
#: value, e.g. an encoded task).
_FIELDS = {
    PROGRESS: ("progress", (("task_id", _ID), ("task", None), ("progress", _float), ("done", _bool))),
    EPISODE: ("episode", (("task_id", _ID), ("task", None), ("return", _float), ("length", _NAT),
                          ("progress", _float), ("ended", _bool), ("extras", _dict))),
}


def _updates(value: Any) -> tuple:
    """A report's updates, checked: at most :data:`MAX_ROWS` tuples, each its kind then its fields (the
    fields of one kind checked together, column by column)."""
    updates = _tuple("updates", value)
    if len(updates) > MAX_ROWS:
        raise ProtocolError(f"field updates holds {len(updates)}, more than the limit of {MAX_ROWS}")
    if set(map(type, updates)) != {tuple}:
        updates = tuple(_tuple("updates[]", u) for u in updates)
    out = list(updates)
    for i, u in enumerate(updates):
        if not u or type(u[0]) is not int or u[0] not in (STEPS, PROGRESS, EPISODE):
            raise ProtocolError(f"updates[{i}] must start with its kind (STEPS, PROGRESS or EPISODE), got "
                                f"{u!r:.100}")
        if u[0] == STEPS:
            if len(u) != 2:
                raise ProtocolError(f"updates[{i}] must be (STEPS, steps), got {len(u)} values")
            out[i] = u if type(u[1]) is Steps else (STEPS, Steps(*_tuple(f"updates[{i}].steps", u[1])))
    for kind, (name, columns) in _FIELDS.items():
        at = [i for i, u in enumerate(updates) if u[0] == kind]
        if not at:
            continue
        bad = next((updates[i] for i in at if len(updates[i]) != 1 + len(columns)), None)
        if bad is not None:
            names = ", ".join(c for c, _ in columns)
            raise ProtocolError(f"a {name} update must be ({name.upper()}, {names}), got {bad!r:.200}")
        checked = [_column(f"{name}.{c}", col, check) for (c, check), col in
                   zip(columns, zip(*(updates[i][1:] for i in at)))]
        for i, fields_ in zip(at, zip(*checked)):
            out[i] = (kind, *fields_)
    return tuple(out)


@dataclass(frozen=True)
class Report(Message):
    """Client -> server: the updates an env made since its last send, in the order it made them, and the
    tasks it asks for.

    Updates (see :data:`STEPS`): step records (sent only to a curriculum that wants them); progress on a
    task mid-episode (``done`` acknowledges the task as consumed); an episode, or the part of it played on
    one task, finished (``ended`` false: cut short by an early reset, the task consumed but no return).
    ``task_id`` ``-1``: a task the env chose. The server applies them in order, a refused one not stopping
    the others, then answers ``request`` with one :class:`Tasks`.

    >>> r = Report(0, ((EPISODE, 3, 1, 2.0, 10, 1.0, True, {}),), request=2)
    >>> decode(encode(r)) == r, r.episodes
    (True, [(3, 1, 2.0, 10, 1.0, True, {})])
    """

    KIND: ClassVar[int] = 3
    env_id: int
    updates: tuple[tuple, ...] = ()
    request: int = 0

    def __post_init__(self) -> None:
        self._set("env_id", _NAT("env_id", self.env_id))
        self._set("updates", _updates(self.updates))
        self._set("request", _NAT("request", self.request))

    @property
    def episodes(self) -> list[tuple]:
        """The fields of the episode updates, in order."""
        return [u[1:] for u in self.updates if u[0] == EPISODE]

    def _fields(self) -> tuple:
        updates = tuple((STEPS, u[1]._fields()) if u[0] == STEPS else u for u in self.updates)
        return (self.env_id, updates, self.request)


@dataclass(frozen=True)
class Error(Message):
    """Either direction: a request or update was refused. ``code`` is a short machine-readable tag."""

    KIND: ClassVar[int] = 5
    CHECKS: ClassVar[dict] = {"code": _str, "message": _str, "env_id": _ID}
    code: str
    message: str
    env_id: int = -1


@dataclass(frozen=True)
class Goodbye(Message):
    """Client -> server when an env closes, returning its unused prefetched tasks; the server echoes it."""

    KIND: ClassVar[int] = 6
    CHECKS: ClassVar[dict] = {"env_id": _NAT, "returned_task_ids": partial(_column, check=_NAT)}
    env_id: int
    returned_task_ids: tuple[int, ...] = ()


#: Every message class by its ``KIND`` code.
MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.KIND: cls for cls in (Hello, Welcome, Tasks, Report, Error, Goodbye)
}
_MESSAGE_CLASSES = frozenset(MESSAGE_TYPES.values())

_ARITY: dict[type, tuple[int, int]] = {
    cls: (
        sum(1 for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING),
        len(fields(cls)),
    )
    for cls in MESSAGE_TYPES.values()
}


def _deep_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and (np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    return a == b


# -- encode / decode ----------------------------------------------------------------------------------


def encode(msg: Message, *, oob_threshold: int = DEFAULT_OOB_THRESHOLD) -> list[Any]:
    """Serialise a message into ZeroMQ frames: ``[header, *large_array_frames]``.

    Raises ``TypeError`` naming the offending object when a field holds something that cannot travel
    (e.g. an arbitrary Python object in an info dict).
    """
    if msg.__class__ not in _MESSAGE_CLASSES:
        raise TypeError(f"expected a protocol Message, got {type(msg).__name__}")
    frames: list[Any] = []
    header = pack_value((PROTOCOL_VERSION, msg.KIND, msg._fields()), frames, oob_threshold)
    return [header, *frames]


def decode(frames: Sequence[Any], *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> Message:
    """Parse frames produced by :func:`encode` (without any routing id) into a message.

    ``frames`` may be ``bytes``, memoryviews or ``zmq.Frame`` objects. Raises :class:`ProtocolError`
    (or :class:`ProtocolVersionError`) with a description of what was wrong.
    """
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
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, int) and not isinstance(kind, bool) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r}")
    if not isinstance(values, tuple):
        raise ProtocolError(f"malformed {cls.__name__}: fields must be a tuple")
    n_required, n_fields = _ARITY[cls]
    if not n_required <= len(values) <= n_fields:
        raise ProtocolError(f"malformed {cls.__name__}: got {len(values)} fields, expected {n_fields}")
    try:
        return cls(*values)
    except (TypeError, ValueError) as exc:  # (ProtocolError included)
        raise ProtocolError(f"malformed {cls.__name__}: {exc}") from None


# -- the sequencing envelope of the ZeroMQ transport ---------------------------------------------------
#
# A peer that wants its messages delivered exactly once across reconnects puts 21 bytes in front of each
# message's first frame: ``ENVELOPE_MAGIC, kind, seq, ack`` (a msgpack header never starts with the magic,
# so an unsequenced message, e.g. a hello, is still read). ``DATA`` carries a message numbered ``seq``
# (1, 2, ... per sender and registration); ``ack`` is the highest ``seq`` received in order from the other
# side. ``PING`` (client -> server, no message) asks the server to send again its unacknowledged replies
# and to answer ``PONG``, after which the client sends again its own. Both sides keep this state in a
# :class:`Stream`.

ENVELOPE_MAGIC = b"MGSQ"
#: Envelope kinds: a sequenced message, a request for a resend (and a liveness probe), the answer to one.
DATA, PING, PONG = 0, 1, 2
_ENVELOPE = struct.Struct("<4sBqq")
#: Bytes the envelope takes at the start of a message's first frame.
ENVELOPE_SIZE = _ENVELOPE.size


def pack_envelope(kind: int, seq: int, ack: int) -> bytes:
    """The envelope frame ``(kind, seq, ack)``.

    >>> unpack_envelope(pack_envelope(DATA, 7, 3))
    (0, 7, 3)
    """
    return _ENVELOPE.pack(ENVELOPE_MAGIC, kind, seq, ack)


def unpack_envelope(frame: Any) -> tuple[int, int, int] | None:
    """``(kind, seq, ack)`` of the envelope at the start of ``frame``; ``None`` when it has none. The message,
    if any, follows in the same frame from :data:`ENVELOPE_SIZE`. A frame that starts like an envelope but
    is not a valid one raises :class:`ProtocolError`.

    >>> unpack_envelope(encode(Report(0, request=1))[0]) is None
    True
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


class Stream:
    """One side's state of a sequenced connection: the number of the last message it sent (``tx``) and of
    the last one it received in order (``rx``), and the messages it sent that the other side has not
    acknowledged (at most ``keep``, for a resend).

    >>> a, b = Stream(8), Stream(8)
    >>> first, second = a.number([b"x"]), a.number([b"y"])
    >>> b.receive(*unpack_envelope(second[0])), b.receive(*unpack_envelope(first[0]))
    ('gap', 'deliver')
    >>> b.receive(*unpack_envelope(first[0])), b.receive(*unpack_envelope(second[0]))
    ('repeat', 'deliver')
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
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

    def unacknowledged(self) -> list[list[Any]]:
        """The frames of every message sent and not acknowledged, to send again."""
        return [self._framed(n, frames) for n, frames in self.sent]

    def receive(self, kind: int, seq: int, ack: int) -> str:
        """Account for a received envelope: ``"deliver"`` (its message is the next in order),
        ``"repeat"`` (already received: drop it), ``"gap"`` (one before it was lost: drop it, and ask for
        the resend), ``"ahead"`` (after a gap already reported: drop it) or ``"control"`` (a ``PING`` /
        ``PONG``)."""
        while self.sent and self.sent[0][0] <= ack:
            self.sent.popleft()
        if kind != DATA:
            return "control"
        if seq <= self.rx:
            return "repeat"
        if seq > self.rx + 1:
            reported, self.gap = self.gap, True
            return "ahead" if reported else "gap"
        self.rx, self.gap = seq, False
        return "deliver"


def rejoin_hello(hello: Hello, unacknowledged: Sequence[Message]) -> Hello:
    """``hello`` of a returning env, with what its ``unacknowledged`` reports (to be sent again) name: their
    lease ids added to ``holds``, their episodes taken out of ``reported``.

    >>> sent = [Report(0, ((EPISODE, 7, 1, 1.0, 2, 1.0, True, {}),), request=1), Goodbye(0, (9,))]
    >>> h = rejoin_hello(Hello(1, rejoin=0, holds=(3,), reported=5), sent)
    >>> h.holds, h.reported
    ((3, 7), 4)
    """
    updates = [u for m in unacknowledged if isinstance(m, Report) for u in m.updates]
    ids = [int(i) for u in updates for i in (u[1].task_ids if u[0] == STEPS else (u[1],))]
    holds = (*hello.holds, *(i for i in ids if i >= 0))
    reported = hello.reported - sum(u[0] == EPISODE for u in updates)
    return replace(hello, holds=holds, reported=max(0, reported))


def rebase(msg: Message, env_id: int) -> Message | None:
    """``msg``, from an env's previous registration, as its new registration ``env_id`` delivers it
    (``None``: nothing of it is to be delivered).

    The lease ids it names are kept (lease ids are unique across registrations and server instances: the
    curriculum side applies each report once, or counts it). Task requests are dropped (the env asks the
    new registration for what it needs), and so is a goodbye. Used by a client that registered again
    (after a server restart, or after the server declared it gone).

    >>> m = rebase(Report(3, ((EPISODE, 17, 2, 1.0, 5, 1.0, True, {}),), request=1), 0)
    >>> m.env_id, m.episodes[0][0], m.request
    (0, 17, 0)
    >>> rebase(Report(3, request=2), 0) is None
    True
    """
    if isinstance(msg, Report):
        return Report(env_id, msg.updates) if msg.updates else None
    if isinstance(msg, Goodbye):
        return None
    raise TypeError(f"an env does not send {type(msg).__name__} messages after its hello")
