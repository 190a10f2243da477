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

>>> import os, tempfile
>>> import numpy as np
>>> state = {"counts": np.arange(3), "keys": {(1, 2): 0.5}, "rng": 2**100, "name": "PLR"}
>>> path = os.path.join(tempfile.mkdtemp(), "curriculum.ckpt")
>>> save(path, state)
>>> back = load(path)
>>> back["counts"].tolist(), back["keys"], back["rng"] == 2**100, back["name"]
([0, 1, 2], {(1, 2): 0.5}, True, 'PLR')
>>> save(path, {"f": print})
Traceback (most recent call last):
...
TypeError: cannot save state['f']: a builtin_function_or_method; a checkpoint holds only dicts, lists, \
tuples, sets, str, bytes, bool, int, float, None, numpy arrays and numpy scalars
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import msgpack
import numpy as np

__all__ = ["save", "load", "dumps", "loads", "CheckpointError"]

#: First bytes of every file :func:`save` writes (then a format version byte, then MessagePack).
MAGIC = b"\x89magister-state\n"
FORMAT_VERSION = 1

_EXT_ARRAY, _EXT_SCALAR, _EXT_TUPLE, _EXT_BIGINT, _EXT_SET, _EXT_FROZENSET = 1, 2, 3, 4, 5, 6
_ALLOWED = ("dicts, lists, tuples, sets, str, bytes, bool, int, float, None, numpy arrays and numpy "
            "scalars")


class CheckpointError(ValueError):
    """A file that is not a magister checkpoint, or a damaged one."""


def _where(path: tuple[Any, ...]) -> str:
    return "state" + "".join(f"[{p!r}]" for p in path)


def _check_dtype(dtype: np.dtype, path: tuple[Any, ...]) -> None:
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(
            f"cannot save {_where(path)}: a numpy array of dtype {dtype}; a checkpoint holds arrays of "
            "numbers, bools, str or bytes only"
        )


def _pack(obj: Any, path: tuple[Any, ...]) -> Any:
    """``obj`` as MessagePack-native values and ExtTypes (checked: only the allowed types)."""
    t = type(obj)
    if obj is None or t is bool or t is str or t is bytes or t is float:
        return obj
    if t is int:
        if -(2**63) <= obj < 2**64:
            return obj
        return msgpack.ExtType(_EXT_BIGINT, str(obj).encode("ascii"))
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


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_ARRAY:
        dtype_str, shape, raw = _unpackb(data)
        dtype = _dtype(dtype_str)
        if not all(type(n) is int and n >= 0 for n in shape):
            raise CheckpointError(f"bad array shape {shape!r} in checkpoint")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dtype.itemsize != len(raw):
            raise CheckpointError(f"array of {dtype} {tuple(shape)} needs {count * dtype.itemsize} bytes, "
                                  f"the checkpoint holds {len(raw)}")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()  # (writable, owns its memory)
    if code == _EXT_SCALAR:
        dtype_str, raw = _unpackb(data)
        dtype = _dtype(dtype_str)
        if len(raw) != dtype.itemsize:
            raise CheckpointError(f"scalar of {dtype} needs {dtype.itemsize} bytes, got {len(raw)}")
        return np.frombuffer(raw, dtype=dtype)[0]
    if code == _EXT_TUPLE:
        return tuple(_unpackb(data))
    if code == _EXT_BIGINT:
        text = data.decode("ascii")
        if not text.lstrip("-").isdigit():
            raise CheckpointError(f"bad integer {text[:40]!r} in checkpoint")
        return int(text)
    if code in (_EXT_SET, _EXT_FROZENSET):
        items = _unpackb(data)
        return set(items) if code == _EXT_SET else frozenset(items)
    raise CheckpointError(f"unknown value type {code} in checkpoint (written by a newer magister?)")


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True)


def dumps(state: Any) -> bytes:
    """``state`` as the bytes :func:`save` writes (see the module docstring for what it may hold).

    Raises:
        TypeError: ``state`` holds something other than plain data; the message says where.
    """
    return MAGIC + bytes([FORMAT_VERSION]) + _packb(_pack(state, ()))


def loads(data: bytes) -> Any:
    """The state in ``data`` (from :func:`dumps`). Builds plain values only; runs no code from the data.

    Raises:
        CheckpointError: ``data`` is not a magister checkpoint, or is damaged or truncated.
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
    if version != bytes([FORMAT_VERSION]):
        raise CheckpointError(f"checkpoint format {version!r} is not {FORMAT_VERSION} (a newer magister?)")
    try:
        return _unpackb(data[len(MAGIC) + 1 :])
    except CheckpointError:
        raise
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
