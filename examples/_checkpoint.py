"""Checkpoints of the bundled trainers: two files, neither of which runs code from the file when loaded.

* ``checkpoint.pt`` holds the tensors (the policy's and the optimiser's ``state_dict`` s), written with
  ``torch.save``; :func:`read_checkpoint` reads it with ``torch.load``'s default ``weights_only=True``, which
  unpickles only tensors and plain containers (never a class or function named by the file). The tensors are
  checked to load that way when they are written, so a checkpoint that saves is one that resumes.
* ``checkpoint.state`` (next to it, same stem) holds everything else: the curriculum's ``state_dict``,
  history, counters, arguments, ... in :func:`magister.save`'s format (plain data only, see
  :mod:`magister.checkpoint`); :func:`magister.load` reads it.

Each file is written atomically (a temporary file in the same folder, then :func:`os.replace`). The state
file is written second and records the SHA-256 of the tensor file it goes with, so a run stopped between the
two writes leaves a pair that :func:`read_checkpoint` refuses with a clear error rather than resuming the
policy of one update with the curriculum of another.

>>> import tempfile, torch
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "checkpoint.pt"
>>> write_checkpoint(path, {"agent": {"w": torch.ones(2)}}, {"update": 3, "history": [{"loss": 0.5}]})
>>> ckpt = read_checkpoint(path)
>>> ckpt["agent"]["w"].tolist(), ckpt["update"], ckpt["history"]
([1.0, 1.0], 3, [{'loss': 0.5}])
>>> sorted(p.name for p in path.parent.iterdir())
['checkpoint.pt', 'checkpoint.state']
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch

import magister
from magister.checkpoint import CheckpointError, dumps, write_atomic

__all__ = ["write_checkpoint", "read_checkpoint", "state_path", "tensor_path"]

#: Key of the tensor file's SHA-256 in the state file.
_HASH_KEY = "tensors_sha256"


def state_path(path: str | os.PathLike) -> Path:
    """The state file that goes with the tensor file ``path`` (``checkpoint.pt`` -> ``checkpoint.state``)."""
    return Path(path).with_suffix(".state")


def tensor_path(path: str | os.PathLike) -> Path:
    """The tensor file named by ``path``: ``path`` itself, or the ``.pt`` next to a ``.state`` file."""
    path = Path(path)
    return path.with_suffix(".pt") if path.suffix == ".state" else path


def write_checkpoint(path: str | os.PathLike, tensors: dict[str, Any], state: dict[str, Any]) -> None:
    """Write ``tensors`` (``state_dict`` s of modules and optimisers) to ``path`` and ``state`` (plain data)
    to :func:`state_path` ``(path)``, the state file last.

    Raises:
        ValueError: a key is in both dicts, or ``tensors`` holds something ``torch.load`` with
            ``weights_only=True`` refuses (nothing is written then).
        TypeError: ``state`` holds something other than plain data (see :func:`magister.save`); the tensor
            file is not written then either.
    """
    path = Path(path)
    if path.suffix == ".state":
        raise ValueError(f"checkpoint path {path} ends in .state, the suffix of the state file; "
                         "expected the tensor file's path, e.g. checkpoint.pt")
    common = set(tensors) & set(state)
    if common or _HASH_KEY in state:
        raise ValueError(f"keys {sorted(common | ({_HASH_KEY} & set(state)))} are in both the tensors and "
                         f"the state of a checkpoint (or reserved); expected distinct keys")
    buf = io.BytesIO()
    torch.save(tensors, buf)
    data = buf.getvalue()
    try:
        torch.load(io.BytesIO(data), map_location="cpu")  # (default weights_only=True) resumable?
    except Exception as exc:
        raise ValueError(f"the tensors of checkpoint {path} would not load with torch.load's default "
                         f"weights_only=True: {exc}; expected state_dicts of tensors and plain "
                         "values") from exc
    # the bytes magister.save would write, made first: a TypeError comes before anything is written
    state_data = dumps({**state, _HASH_KEY: hashlib.sha256(data).hexdigest()})
    write_atomic(path, data)
    write_atomic(state_path(path), state_data)


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The tensors and the state of the checkpoint at ``path`` (the ``.pt`` file or its ``.state``
    file) in one dict, tensors on the CPU. Runs no code from either file.

    Raises:
        FileNotFoundError: a file of the pair is missing (a single-file checkpoint of an older magister
            has no state file).
        magister.checkpoint.CheckpointError: the two files are not from the same save, or the state file
            is damaged.
    """
    tensors_file = tensor_path(path)
    state_file = state_path(tensors_file)
    if not state_file.exists():
        raise FileNotFoundError(
            f"no state file {state_file} next to {tensors_file}: a checkpoint is the pair checkpoint.pt + "
            "checkpoint.state (an older magister wrote one torch.save file, which only an unpickling load "
            "could read; resume from a checkpoint written by this version)")
    state = magister.load(state_file)
    data = tensors_file.read_bytes()
    if not isinstance(state, dict) or state.get(_HASH_KEY) != hashlib.sha256(data).hexdigest():
        raise CheckpointError(
            f"{tensors_file} and {state_file} are not from the same save (the SHA-256 of the tensor file "
            "differs from the one the state file records: the run stopped between writing the two?)")
    tensors = torch.load(io.BytesIO(data), map_location="cpu")  # default weights_only=True: data only
    state = {k: v for k, v in state.items() if k != _HASH_KEY}
    return {**state, **tensors}
