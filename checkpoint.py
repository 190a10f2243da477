"""Checkpoints that hold data only: :func:`save` and :func:`load` for ``state_dict()`` s.

A curriculum's ``state_dict()`` holds plain containers (``dict``, ``list``, ``tuple``), strings, bytes,
numbers, ``None``, numpy arrays and numpy scalars. ``torch.save`` can write that, but reading it back
needs ``torch.load(path, weights_only=False)``, i.e. unpickling, which runs whatever code the file names:
loading a checkpoint would mean trusting its author. (``weights_only=True``, torch's default since 2.6,
refuses numpy arrays.)

:func:`save` writes the state as MessagePack, numpy arrays as their dtype, shape and raw bytes, so
:func:`load` only ever builds those plain values: a file from anywhere can be loaded without running code.
The types come back exactly (a tuple stays a tuple, ``np.float32(1)`` stays a numpy ``float32``, an int
key stays an int, 128-bit generator states stay ints), so ``load_state_dict(load(path))`` restores what
``load_state_dict(state)`` would. Anything else in the state (an object, a function, an array of Python
objects) is refused with a ``TypeError`` naming where it sits, so a state that saves is a state that
loads.

A file records the SHA-256 of its contents: a damaged or truncated file raises :class:`CheckpointError`
("checksum mismatch") instead of loading altered values. Containers may nest at most :data:`MAX_DEPTH` deep
(:func:`save` refuses a deeper state with a ``ValueError``; :func:`load` refuses a deeper file), and
:func:`load` builds nested values with a loop, not recursion, so no file, damaged or hostile, can exhaust the
stack: it gives a value or a :class:`CheckpointError`.

>>> import os, tempfile
>>> import numpy as np
>>> state = {"counts": np.arange(3), "keys": {(1, 2): 0.5}, "rng": 2**100, "name": "PLR"}
>>> path = os.path.join(tempfile.mkdtemp(), "curriculum.ckpt")
>>> save(path, state)
>>> back = load(path)
>>> back["counts"].tolist(), back["keys"], back["rng"] == 2**100, back["name"]
([0, 1, 2], {(1, 2): 0.5}, True, 'PLR')
>>> save(path, {"f": len})  # (not print: Ray replaces it in processes that use Ray)
Traceback (most recent call last):
...
TypeError: cannot save state['f']: a builtin_function_or_method; a checkpoint holds only dicts, lists, \
tuples, sets, str, bytes, bool, int, float, None, numpy arrays and numpy scalars
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import tempfile
from typing import Any

import msgpack
import numpy as np

__all__ = ["save", "load", "dumps", "loads", "CheckpointError"]

logger = logging.getLogger(__name__)

#: First bytes of every file :func:`save` writes; then the format version (one byte), the SHA-256 of the
#: payload (32 bytes) and the payload (MessagePack). Format 1, before checksums, had no SHA-256.
MAGIC = b"\x89magister-state\n"
FORMAT_VERSION = 2
_DIGEST_SIZE = 32

#: The deepest that containers (dicts, lists, tuples, sets) may nest in a checkpoint: ``{"a": [1]}`` nests
#: 2 deep. A curriculum's ``state_dict()`` nests a handful of levels; the bound leaves room for states that
#: wrap states many times over, and refuses files built so deep that code walking the loaded value
#: recursively (``load_state_dict``, ``copy.deepcopy``, ``repr``) would fail.
MAX_DEPTH = 100

_EXT_ARRAY, _EXT_SCALAR, _EXT_TUPLE, _EXT_BIGINT, _EXT_SET, _EXT_FROZENSET = 1, 2, 3, 4, 5, 6
_ALLOWED = ("dicts, lists, tuples, sets, str, bytes, bool, int, float, None, numpy arrays and numpy "
            "scalars")


class CheckpointError(ValueError):
    """A file that is not a magister checkpoint, a damaged one, or one nested deeper than
    :data:`MAX_DEPTH`."""


def _where(path: tuple[Any, ...]) -> str:
    return "state" + "".join(f"[{p!r}]" for p in path)


def _check_dtype(dtype: np.dtype, path: tuple[Any, ...]) -> None:
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(
            f"cannot save {_where(path)}: a numpy array of dtype {dtype}; a checkpoint holds arrays of "
            "numbers, bools, str or bytes only"
        )


def _too_deep(path: tuple[Any, ...]) -> ValueError:
    shown = _where(path[:6]) + ("..." if len(path) > 6 else "")
    return ValueError(f"cannot save {shown}: containers nested {len(path) + 1} deep, more than the limit of "
                      f"{MAX_DEPTH} (magister.checkpoint.MAX_DEPTH) that load enforces; expected a state "
                      "that nests less deeply")


def _pack(obj: Any, path: tuple[Any, ...]) -> Any:
    """``obj`` as MessagePack-native values and ExtTypes (checked: only the allowed types, at most
    :data:`MAX_DEPTH` containers deep; ``path`` holds one entry per enclosing container)."""
    t = type(obj)
    if obj is None or t is bool or t is str or t is bytes or t is float:
        return obj
    if t is int:
        if -(2**63) <= obj < 2**64:
            return obj
        return msgpack.ExtType(_EXT_BIGINT, str(obj).encode("ascii"))
    if len(path) >= MAX_DEPTH and t in (dict, list, tuple, set, frozenset):
        raise _too_deep(path)
    if t is dict:
        return {_pack(k, (*path, k)): _pack(v, (*path, k)) for k, v in obj.items()}
    if t is list:
        return [_pack(v, (*path, i)) for i, v in enumerate(obj)]
    if t is tuple:
        return msgpack.ExtType(_EXT_TUPLE, _packb([_pack(v, (*path, i)) for i, v in enumerate(obj)]))
    if t is set or t is frozenset:
        items = [_pack(v, (*path, "<item>")) for v in obj]
        return msgpack.ExtType(_EXT_SET if t is set else _EXT_FROZENSET, _packb(items))
    if t is np.ndarray:
        _check_dtype(obj.dtype, path)
        data = np.ascontiguousarray(obj)
        return msgpack.ExtType(_EXT_ARRAY, _packb([obj.dtype.str, list(obj.shape), data.tobytes()]))
    if isinstance(obj, np.generic) and t.__module__ == "numpy":
        _check_dtype(obj.dtype, path)
        return msgpack.ExtType(_EXT_SCALAR, _packb([obj.dtype.str, np.asarray(obj).tobytes()]))
    raise TypeError(f"cannot save {_where(path)}: a {t.__name__}; a checkpoint holds only {_ALLOWED}")


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, strict_types=True)


def _dtype(text: str) -> np.dtype:
    if not isinstance(text, str) or len(text) > 32:
        raise CheckpointError(f"bad dtype {text!r:.40} in checkpoint")
    try:
        dtype = np.dtype(text)
    except Exception as exc:  # (numpy's parser raises several kinds)
        raise CheckpointError(f"bad dtype {text!r} in checkpoint") from exc
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise CheckpointError(f"dtype {text!r} is not allowed in a checkpoint")
    return dtype


class _Ext:
    """An extension value as the decoder meets it, built later by :func:`_build` (a decoder hook that built
    it at once would recurse once per nesting level, with a C stack frame each)."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code, self.data = code, data


def _decode(data: bytes) -> Any:
    """One MessagePack value, its extension values left as :class:`_Ext` (nothing decoded inside them)."""
    return msgpack.unpackb(data, ext_hook=_Ext, raw=False, strict_map_key=False, use_list=True)


def _array(data: bytes) -> np.ndarray:
    dtype_str, shape, raw = _decode(data)
    dtype = _dtype(dtype_str)
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape) or type(raw) is not bytes:
        raise CheckpointError(f"bad array shape {shape!r:.60} or data in checkpoint")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count * dtype.itemsize != len(raw):
        raise CheckpointError(f"array of {dtype} {tuple(shape)} needs {count * dtype.itemsize} bytes, "
                              f"the checkpoint holds {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()  # (writable, owns its memory)


def _scalar(data: bytes) -> np.generic:
    dtype_str, raw = _decode(data)
    dtype = _dtype(dtype_str)
    if type(raw) is not bytes or len(raw) != dtype.itemsize:
        raise CheckpointError(f"scalar of {dtype} needs {dtype.itemsize} bytes, got {raw!r:.40}")
    return np.frombuffer(raw, dtype=dtype)[0]


def _bigint(data: bytes) -> int:
    text = data.decode("ascii")
    if not text.lstrip("-").isdigit():
        raise CheckpointError(f"bad integer {text[:40]!r} in checkpoint")
    return int(text)


_LEAVES = {_EXT_ARRAY: _array, _EXT_SCALAR: _scalar, _EXT_BIGINT: _bigint}
_COLLECTIONS = {_EXT_TUPLE: tuple, _EXT_SET: set, _EXT_FROZENSET: frozenset}


def _parts(node: Any) -> list[Any] | None:
    """The parts of a container as decoded (a dict's as key, value, key, value, ...); None for a leaf."""
    t = type(node)
    if t is list:
        return node
    if t is dict:
        return list(itertools.chain.from_iterable(node.items()))
    if t is _Ext and node.code in _COLLECTIONS:
        items = _decode(node.data)
        if type(items) is not list:
            raise CheckpointError(f"bad {_COLLECTIONS[node.code].__name__} in checkpoint: not a sequence")
        return items
    return None


def _leaf(node: Any) -> Any:
    if type(node) is not _Ext:
        return node  # None, bool, int, float, str or bytes, as decoded
    if node.code not in _LEAVES:
        raise CheckpointError(f"unknown value type {node.code} in checkpoint (written by a newer magister?)")
    return _LEAVES[node.code](node.data)


def _assemble(node: Any, values: list[Any]) -> Any:
    """The container ``node`` holding ``values``, its parts built."""
    if type(node) is list:
        return values
    if type(node) is dict:
        return dict(zip(values[::2], values[1::2]))
    return _COLLECTIONS[node.code](values)


_DEEP = ("damaged or hostile checkpoint: containers nested {}, beyond the limit of " + str(MAX_DEPTH)
         + " (magister.checkpoint.MAX_DEPTH; magister.save writes nothing deeper)")
_UNBUILT = frozenset({list, dict, _Ext})  # (the types of decoded values that are not built yet)


def _build(root: Any) -> Any:
    """The value of a decoded tree, its parts built before the containers that hold them: a loop over an
    explicit stack, not recursion, so a file's nesting costs no C stack; deeper than :data:`MAX_DEPTH` is
    refused. Each stack entry is (node, enclosing containers, its parts once they are queued)."""
    built: list[Any] = []
    todo: list[tuple[Any, int, list[Any] | None]] = [(root, 0, None)]
    while todo:
        node, depth, parts = todo.pop()
        if parts is None:  # first visit
            parts = _parts(node)
            if parts is None:
                built.append(_leaf(node))
            elif depth >= MAX_DEPTH:
                raise CheckpointError(_DEEP.format(f"{depth + 1} deep"))
            elif _UNBUILT.isdisjoint(map(type, parts)):  # plain values only (the common case): at once
                built.append(_assemble(node, parts))
            else:  # the container again, under its parts
                todo.append((node, depth, parts))
                todo.extend((part, depth + 1, None) for part in reversed(parts))
        else:  # its parts are built: the last len(parts) values
            values = built[len(built) - len(parts) :]
            del built[len(built) - len(parts) :]
            built.append(_assemble(node, values))
    return built[0]


def dumps(state: Any) -> bytes:
    """``state`` as the bytes :func:`save` writes (see the module docstring for what it may hold).

    Raises:
        TypeError: ``state`` holds something other than plain data; the message says where.
        ValueError: ``state`` nests containers deeper than :data:`MAX_DEPTH`; the message says where.
    """
    payload = _packb(_pack(state, ()))
    return MAGIC + bytes([FORMAT_VERSION]) + hashlib.sha256(payload).digest() + payload


def loads(data: bytes) -> Any:
    """The state in ``data`` (from :func:`dumps`). Builds plain values only; runs no code from the data.

    Files of format 1 (written before checksums) load too, unchecked, with a warning: save them again to add
    the checksum.

    Raises:
        CheckpointError: ``data`` is not a magister checkpoint, is damaged or truncated (its checksum does not
            match), or nests deeper than :data:`MAX_DEPTH`.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(MAGIC):
        raise CheckpointError(
            "not a magister checkpoint (it does not start with the magic bytes; a torch.save file? "
            "load it with torch.load and save it again with magister.save)"
        )
    version = data[len(MAGIC) : len(MAGIC) + 1]
    start = len(MAGIC) + 1
    if version == bytes([FORMAT_VERSION]):
        digest, payload = data[start : start + _DIGEST_SIZE], data[start + _DIGEST_SIZE :]
        if hashlib.sha256(payload).digest() != digest:
            raise CheckpointError(
                "damaged or truncated checkpoint: checksum mismatch (the SHA-256 of its contents is not the "
                "one it records; the file was cut short or altered after it was written)"
            )
    elif version == b"\x01":
        logger.warning("checkpoint of format 1 (written before checksums): loaded without a check for "
                       "damage; save it again to add one")
        payload = data[start:]
    else:
        raise CheckpointError(f"checkpoint format {version!r} is not 1 or {FORMAT_VERSION} "
                              "(written by a newer magister?)")
    try:
        return _build(_decode(payload))
    except CheckpointError:
        raise
    except msgpack.StackError as exc:  # (the decoder's own limit, far above MAX_DEPTH)
        raise CheckpointError(_DEEP.format("over 1000 deep")) from exc
    except Exception as exc:  # whatever a damaged or hostile file makes the decoder raise
        raise CheckpointError(f"damaged or truncated checkpoint: {type(exc).__name__}: {exc}") from exc


def save(path: str | os.PathLike, state: Any) -> None:
    """Write ``state`` (a ``state_dict()``, or a dict of several) to ``path``, atomically: the file is
    complete or absent, never half-written (a temporary file in the same folder, then :func:`os.replace`).

    Raises:
        TypeError: ``state`` holds something other than plain data; the message says where. Nothing is
            written then.
    """
    write_atomic(path, dumps(state))


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once or not at all: into a temporary file in the same folder,
    flushed to disk, then renamed over ``path`` (a reader never sees half a file; a failure leaves the old
    one)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load(path: str | os.PathLike) -> Any:
    """The state :func:`save` wrote to ``path``; builds plain values only, never runs code from the file.

    Raises:
        CheckpointError: the file is not a magister checkpoint, or is damaged or truncated.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        return loads(f.read())
