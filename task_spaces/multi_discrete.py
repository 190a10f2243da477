"""A grid of integer parameters, encoded as one flat mixed-radix index.

:class:`MultiDiscrete` holds tasks that are tuples ``(i_0, ..., i_{d-1})`` with ``0 <= i_j < nvec[j]``
(grid sizes, difficulty levels, seeds per axis). The encoded task is the flat row-major (C order) index

    ``flat = ((i_0 * n_1 + i_1) * n_2 + i_2) * ... + i_{d-1}``,

the same as :func:`numpy.ravel_multi_index`, so the space is *indexed* and tabular curricula keep one
array row per tuple. Spaces with more than ``2**63 - 1`` tasks do not fit an int64 (nor msgpack's
integers); they fall back to encoding the tuple itself and are then not indexed.

>>> space = MultiDiscrete([3, 4], seed=0)
>>> space.encode((2, 1)), space.decode(9)
(9, (2, 1))
>>> space.num_tasks
12
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import EncodedTask, TaskSpace, check_k
from .discrete import Discrete, is_int, split_indexed

logger = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1


def ravel(digits: Sequence[int], radices: Sequence[int]) -> int:
    """Row-major mixed-radix index of ``digits`` (exact Python ints, any size).

    >>> ravel((2, 1), (3, 4))
    9
    """
    flat = 0
    for d, r in zip(digits, radices):
        flat = flat * r + int(d)
    return flat


def unravel(flat: int, radices: Sequence[int]) -> tuple[int, ...]:
    """Inverse of :func:`ravel`.

    >>> unravel(9, (3, 4))
    (2, 1)
    """
    out = []
    for r in reversed(radices):
        flat, d = divmod(flat, r)
        out.append(d)
    return tuple(reversed(out))


class MultiDiscrete(TaskSpace[tuple]):
    """Tuples of ints ``(i_0, ..., i_{d-1})`` with ``0 <= i_j < nvec[j]``; encoded as one flat int.

    Args:
        nvec: the number of values of each coordinate (positive ints, at least one coordinate).
        seed: seed of the space's generator.

    :meth:`mutate` resamples one coordinate (with more than one value) to a different value.
    """

    def __init__(self, nvec: Sequence[int] | np.ndarray, *, seed: int | None = None) -> None:
        super().__init__(seed)
        arr = np.asarray(nvec)
        if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
            raise ValueError(f"MultiDiscrete: nvec must be a non-empty 1-D sequence of ints, got {nvec!r}")
        if (arr < 1).any():
            raise ValueError(f"MultiDiscrete: every entry of nvec must be >= 1, got {arr.tolist()}")
        self._nvec: tuple[int, ...] = tuple(int(x) for x in arr)
        n = 1
        for r in self._nvec:
            n *= r
        self._n = n
        self._flat = n <= _INT64_MAX
        if not self._flat:
            logger.info("MultiDiscrete with %d tasks exceeds int64; encoding tasks as tuples", n)

    @property
    def nvec(self) -> tuple[int, ...]:
        """Number of values per coordinate."""
        return self._nvec

    @property
    def num_tasks(self) -> int:
        return self._n

    @property
    def indexed(self) -> bool:
        return self._flat

    def _digits_ok(self, task: Any) -> bool:
        if isinstance(task, np.ndarray):
            if task.ndim != 1:
                return False
            task = task.tolist()
        if not isinstance(task, (tuple, list)) or len(task) != len(self._nvec):
            return False
        return all(is_int(x) and 0 <= x < r for x, r in zip(task, self._nvec))

    def contains(self, task: Any) -> bool:
        return self._digits_ok(task)

    def encode(self, task: Any) -> EncodedTask:
        if not self._digits_ok(task):
            raise ValueError(f"task {task!r} is not in {self!r} (expected {len(self._nvec)} ints "
                             f"with 0 <= task[j] < nvec[j])")
        digits = tuple(int(x) for x in (task.tolist() if isinstance(task, np.ndarray) else task))
        return ravel(digits, self._nvec) if self._flat else digits

    def decode(self, encoded: EncodedTask) -> tuple[int, ...]:
        if self._flat:
            if not is_int(encoded) or not 0 <= encoded < self._n:
                raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} "
                                 f"(expected an int in [0, {self._n}))")
            return unravel(int(encoded), self._nvec)
        if not self._digits_ok(encoded):
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r}")
        return tuple(int(x) for x in encoded)

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        if self._flat:
            return is_int(encoded) and 0 <= encoded < self._n
        return self._digits_ok(encoded)

    def sample(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self._rng.integers(0, self._nvec))

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        """``k`` uniform encoded tasks: one ``rng.integers`` call over the flat index range."""
        check_k(k)
        gen = self._rng if rng is None else rng
        if self._flat:
            return gen.integers(0, self._n, size=int(k)).tolist()
        return [tuple(row) for row in gen.integers(0, self._nvec, size=(int(k), len(self._nvec))).tolist()]

    def encode_batch(self, tasks: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`encode` of an ``(m, d)`` int array; returns an int64 array (flat spaces only)."""
        if not self._flat:
            raise ValueError(f"{self!r} has more than 2**63 - 1 tasks; it has no int64 flat encoding")
        arr = np.asarray(tasks)
        if arr.ndim != 2 or arr.shape[1] != len(self._nvec) or arr.dtype.kind not in "iu":
            raise ValueError(f"encode_batch expects an (m, {len(self._nvec)}) int array, "
                             f"got shape {arr.shape}")
        if ((arr < 0) | (arr >= np.asarray(self._nvec))).any():
            raise ValueError(f"encode_batch: some tasks are not in {self!r}")
        return np.ravel_multi_index(tuple(arr.T), self._nvec).astype(np.int64)

    def decode_batch(self, encoded: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`decode`: an ``(m, d)`` int64 array of coordinates (flat spaces only)."""
        if not self._flat:
            raise ValueError(f"{self!r} has more than 2**63 - 1 tasks; it has no int64 flat encoding")
        arr = np.asarray(encoded)
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() >= self._n)):
            raise ValueError(f"decode_batch: some encoded tasks are not in [0, {self._n}) of {self!r}")
        return np.stack(np.unravel_index(arr.astype(np.int64), self._nvec), axis=-1).astype(np.int64)

    @property
    def tasks(self) -> list[tuple[int, ...]]:
        if self._n > 10_000_000:
            raise TypeError(f"{self!r} has {self._n} tasks, too many to list")
        return [unravel(i, self._nvec) for i in range(self._n)]

    @property
    def encoded_tasks(self) -> list[EncodedTask]:
        if self._n > 10_000_000:
            raise TypeError(f"{self!r} has {self._n} tasks, too many to list")
        return list(range(self._n)) if self._flat else [unravel(i, self._nvec) for i in range(self._n)]

    def split(self, holdout: float | int | Sequence[Any], seed: int | None = 0) -> tuple[Discrete, Discrete]:
        """Partition into ``(train, held_out)`` :class:`~magister.task_spaces.discrete.Discrete` views.

        The views decode to this space's tuples and are re-indexed densely; see
        :func:`~magister.task_spaces.discrete.split_indexed`. Flat (int64-encodable) spaces only.
        """
        return split_indexed(self, holdout, seed)

    @property
    def can_mutate(self) -> bool:
        return any(r > 1 for r in self._nvec)

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> EncodedTask:
        """Resample one coordinate that has more than one value, to a value different from the current."""
        if not self.can_mutate:
            raise NotImplementedError(f"{self!r} has a single task; nothing to mutate")
        digits = list(self.decode(encoded))
        axes = [j for j, r in enumerate(self._nvec) if r > 1]
        j = axes[int(rng.integers(len(axes)))]
        shift = int(rng.integers(1, self._nvec[j]))  # never 0, so the value changes
        digits[j] = (digits[j] + shift) % self._nvec[j]
        return self.encode(tuple(digits))

    def _encoding_spec(self) -> Any:
        return ("MultiDiscrete", [int(n) for n in self._nvec])

    def __repr__(self) -> str:
        return f"MultiDiscrete(nvec={list(self._nvec)})"
