"""A continuous task space: real-valued task parameters inside finite bounds.

:class:`Box` holds tasks that are float arrays of a fixed ``shape`` with ``low <= x <= high`` element-wise
(physics parameters, goal positions, terrain roughness). The decoded task is a :class:`numpy.ndarray`; the
encoded task is the flattened array as a tuple of Python floats, which crosses msgpack exactly (float64).

* :meth:`Box.encode` / :meth:`Box.decode` / :meth:`Box.contains` reject anything out of bounds, non-finite,
  or of the wrong shape with a ``ValueError`` — they never clip.
* :meth:`Box.mutate` (used by ACCEL-style editing) adds Gaussian noise with standard deviation
  ``mutation_scale * (high - low)`` and *does* clip the result to the bounds, since a mutation is a new
  task chosen by the space, not a user task being validated.

>>> box = Box(0.0, 1.0, shape=(2,), seed=0)
>>> enc = box.sample_encoded(1)[0]
>>> len(enc), box.contains_encoded(enc)
(2, True)
>>> box.decode((0.25, 0.5))
array([0.25, 0.5 ])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import EncodedTask, TaskSpace, check_k

logger = logging.getLogger(__name__)


class Box(TaskSpace[np.ndarray]):
    """Float arrays of ``shape`` with ``low <= x <= high``; encoded as a flat tuple of floats.

    Args:
        low: lower bound, a scalar or an array broadcastable to ``shape``.
        high: upper bound, likewise; ``low <= high`` everywhere and both finite.
        shape: task shape; defaults to the broadcast shape of ``low`` and ``high`` (``(1,)`` for scalars).
        dtype: a floating dtype for decoded tasks (float64 by default, or float32).
        mutation_scale: standard deviation of :meth:`mutate` noise, as a fraction of ``high - low``.
        seed: seed of the space's generator.

    Raises:
        ValueError: for non-finite bounds, ``low > high``, shapes that do not broadcast, a non-float
            dtype, or a negative ``mutation_scale``.
    """

    def __init__(
        self,
        low: float | Sequence[float] | np.ndarray,
        high: float | Sequence[float] | np.ndarray,
        shape: Sequence[int] | int | None = None,
        *,
        dtype: Any = np.float64,
        mutation_scale: float = 0.1,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise ValueError(f"Box: dtype must be a floating dtype, got {self.dtype} "
                             "(use Discrete or MultiDiscrete for integer tasks)")
        lo = np.asarray(low, dtype=np.float64)
        hi = np.asarray(high, dtype=np.float64)
        if shape is None:
            try:
                shp = np.broadcast_shapes(lo.shape, hi.shape)
            except ValueError as exc:
                raise ValueError(f"Box: low {lo.shape} and high {hi.shape} do not broadcast") from exc
            if shp == ():
                shp = (1,)
        else:
            shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
            if any(s < 0 for s in shp):
                raise ValueError(f"Box: shape must be non-negative, got {shape!r}")
        try:
            lo = np.broadcast_to(lo, shp).astype(self.dtype)
            hi = np.broadcast_to(hi, shp).astype(self.dtype)
        except ValueError as exc:
            raise ValueError(f"Box: low/high do not broadcast to shape {shp}") from exc
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise ValueError("Box: low and high must be finite (an unbounded box cannot be sampled)")
        if (lo > hi).any():
            raise ValueError(f"Box: low must be <= high everywhere, got low={lo.tolist()} high={hi.tolist()}")
        if not (np.isfinite(mutation_scale) and mutation_scale >= 0):
            raise ValueError(f"Box: mutation_scale must be a finite number >= 0, got {mutation_scale!r}")
        self.low: np.ndarray = lo
        self.high: np.ndarray = hi
        self.shape: tuple[int, ...] = tuple(shp)
        self.size = int(np.prod(shp, dtype=np.int64))
        self.mutation_scale = float(mutation_scale)
        self._low_flat = lo.astype(np.float64).ravel()
        self._high_flat = hi.astype(np.float64).ravel()

    @property
    def num_tasks(self) -> None:
        return None

    def _in_bounds(self, arr: np.ndarray) -> np.ndarray | None:
        """``arr`` (float64, any shape) cast to ``dtype`` and checked finite and within bounds, or None.

        Bounds are compared in ``dtype``, so ``Box(0.1, 1, dtype=np.float32)`` contains ``0.1``.
        """
        if not np.isfinite(arr).all():
            return None
        with np.errstate(over="ignore"):
            cast = arr.astype(self.dtype)
        if not np.isfinite(cast).all():
            return None
        flat = cast.ravel()
        if (flat < self.low.ravel()).any() or (flat > self.high.ravel()).any():
            return None
        return cast

    def _as_array(self, task: Any) -> np.ndarray | None:
        """``task`` as a ``dtype`` array of ``self.shape`` if it is a valid task, else ``None``."""
        if isinstance(task, (bool, np.bool_, str, bytes)):
            return None
        try:
            arr = np.asarray(task)
        except (ValueError, TypeError):
            return None
        if arr.dtype.kind not in "iuf" or arr.shape != self.shape:
            return None
        return self._in_bounds(arr.astype(np.float64))

    def contains(self, task: Any) -> bool:
        return self._as_array(task) is not None

    def encode(self, task: Any) -> tuple[float, ...]:
        arr = self._as_array(task)
        if arr is None:
            raise ValueError(f"task {task!r} is not in {self!r} (expected a finite array of shape "
                             f"{self.shape} within [low, high])")
        return tuple(arr.astype(np.float64).ravel().tolist())

    def _flat_ok(self, encoded: Any) -> np.ndarray | None:
        if not isinstance(encoded, (tuple, list, np.ndarray)) or len(encoded) != self.size:
            return None
        if any(isinstance(x, (bool, np.bool_)) for x in encoded):
            return None
        try:
            flat = np.asarray(encoded, dtype=np.float64)
        except (ValueError, TypeError):
            return None
        if flat.ndim != 1:
            return None
        return self._in_bounds(flat)

    def decode(self, encoded: EncodedTask) -> np.ndarray:
        flat = self._flat_ok(encoded)
        if flat is None:
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} (expected {self.size} "
                             "finite floats within [low, high])")
        return flat.reshape(self.shape)

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        return self._flat_ok(encoded) is not None

    def _draw(self, gen: np.random.Generator, k: int) -> np.ndarray:
        # One uniform draw of shape (k, size); cast to dtype (rounding stays within the representable bounds).
        x = gen.uniform(self._low_flat, self._high_flat, size=(k, self.size)).astype(self.dtype)
        return np.clip(x, self.low.ravel(), self.high.ravel())  # float32 rounding only; a no-op for float64

    def sample(self) -> np.ndarray:
        return self._draw(self._rng, 1)[0].reshape(self.shape)

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[tuple[float, ...]]:
        """``k`` uniform encoded tasks from one ``rng.uniform`` call."""
        check_k(k)
        gen = self._rng if rng is None else rng
        rows = self._draw(gen, int(k)).astype(np.float64).tolist()
        return [tuple(r) for r in rows]

    @property
    def can_mutate(self) -> bool:
        return self.mutation_scale > 0 and bool((self.high > self.low).any())

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> tuple[float, ...]:
        """Gaussian perturbation, std ``mutation_scale * (high - low)``, **clipped** to the bounds.

        Raises ``NotImplementedError`` when :attr:`can_mutate` is false (zero scale or a single point).
        """
        if not self.can_mutate:
            raise NotImplementedError(f"{self!r} cannot mutate (mutation_scale=0 or low == high)")
        flat = self.decode(encoded).astype(np.float64).ravel()
        std = self.mutation_scale * (self._high_flat - self._low_flat)
        noise = rng.normal(0.0, 1.0, size=flat.shape) * std
        child = np.clip(flat + noise, self._low_flat, self._high_flat).astype(self.dtype)
        return tuple(child.astype(np.float64).tolist())

    def describe(self, task: np.ndarray) -> str:
        return np.array2string(np.asarray(task), precision=4, separator=", ")

    def _encoding_spec(self) -> Any:
        return ("Box", self.low.tolist(), self.high.tolist(), tuple(self.shape), self.dtype.name)

    def __repr__(self) -> str:
        def fmt(a: np.ndarray) -> str:
            flat = np.unique(a)
            return repr(float(flat[0])) if flat.size == 1 else np.array2string(a, precision=4, threshold=6)

        return f"Box(low={fmt(self.low)}, high={fmt(self.high)}, shape={self.shape}, dtype={self.dtype.name})"
