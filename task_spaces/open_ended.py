"""Open-ended task spaces: tasks created at run time by a user generator.

In unsupervised environment design (PAIRED, PLR, ACCEL) and open-ended learning the set of tasks is not
known in advance: a *generator* draws new levels, and mutation edits existing ones. :class:`OpenEnded`
wraps such a generator as a :class:`~magister.task_spaces.base.TaskSpace`.

**Identity.** Each task is identified by a *content hash*: :func:`content_hash` canonicalises the decoded
task (numbers, strings, tuples/lists, dicts, sets, numpy arrays, dataclasses and plain objects by their
fields) and hashes it with :func:`~magister.task_spaces.base.stable_hash`, so the same level gets the same
identity in every process and every run. By default that hash string *is* the encoded task, and the space
keeps a **registry** hash -> decoded task, so :meth:`OpenEnded.decode` works for every task the space has
seen (sampled, encoded, added or produced by mutation) in this process.

**Bounded registry.** With ``max_size`` the registry holds at most that many tasks; adding a new task to a
full registry evicts the *least recently used* one (use = added, encoded or decoded). Decoding an evicted
hash raises ``ValueError``. A curriculum that holds more live tasks than ``max_size`` must use a larger
bound, or a custom encoding (below).

**Custom encoding.** If ``encode_fn``/``decode_fn`` are given (e.g. a level -> tuple of ints), the encoded
form is the user's (lists normalised to tuples) and decodes anywhere without the registry: workers in other
processes can rebuild the task from the wire alone. The registry is then unused. Lists and numpy arrays in
the user's encoding become tuples and numpy scalars become Python numbers, so it survives msgpack.

>>> space = OpenEnded(lambda rng: int(rng.integers(0, 1000)), seed=0)
>>> enc = space.sample_encoded(2)
>>> len(space), all(space.decode(e) in range(1000) for e in enc)
(2, True)
>>> space.encode(5) == content_hash(5)
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from .base import EncodedTask, TaskSpace, check_k, stable_hash

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MSGPACK_INT_MIN, _MSGPACK_INT_MAX = -(2**63), 2**64 - 1
_LOCK_TIMEOUT_S = 30.0


def content_key(task: Any) -> Any:
    """A canonical, hashable, process-independent structure describing ``task``'s content.

    Raises ``TypeError`` for an object whose content cannot be read (pass ``encode_fn`` instead).

    >>> content_key([1, {"b": 2.0, "a": None}])
    (1, ('__dict__', (('a', None), ('b', 2.0))))
    """
    if task is None or isinstance(task, (bool, int, float, str, bytes)):
        return task
    if isinstance(task, np.generic):
        return task.item()
    if isinstance(task, np.ndarray):
        if task.dtype.kind == "O":
            return ("__ndarray_obj__", task.shape, tuple(content_key(x) for x in task.ravel().tolist()))
        return ("__ndarray__", task.dtype.str, task.shape, np.ascontiguousarray(task).tobytes())
    if isinstance(task, (tuple, list)):
        return tuple(content_key(x) for x in task)
    if isinstance(task, Mapping):
        items = [(content_key(k), content_key(v)) for k, v in task.items()]
        return ("__dict__", tuple(sorted(items, key=lambda kv: repr(kv[0]))))
    if isinstance(task, (set, frozenset)):
        return ("__set__", tuple(sorted((content_key(x) for x in task), key=repr)))
    if isinstance(task, enum.Enum):
        return ("__enum__", _qualname(task), content_key(task.value))
    if dataclasses.is_dataclass(task) and not isinstance(task, type):
        fields = tuple((f.name, content_key(getattr(task, f.name))) for f in dataclasses.fields(task))
        return ("__obj__", _qualname(task), fields)
    if hasattr(task, "__dict__") and not callable(task):
        return ("__obj__", _qualname(task), content_key(vars(task)))
    slots = getattr(type(task), "__slots__", None)
    if slots:
        names = (slots,) if isinstance(slots, str) else tuple(slots)
        return ("__obj__", _qualname(task), tuple((s, content_key(getattr(task, s, None))) for s in names))
    raise TypeError(
        f"cannot derive a content hash for a task of type {type(task).__name__}; "
        "pass encode_fn/decode_fn to OpenEnded"
    )


def _qualname(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def content_hash(task: Any) -> str:
    """The stable content hash of a decoded task (a 24-character hex string).

    >>> content_hash({"w": 3, "h": 4}) == content_hash({"h": 4, "w": 3})
    True
    """
    return stable_hash(content_key(task))


def _tuplize(x: Any) -> Any:
    """Lists -> tuples recursively (dicts keep their type), numpy scalars/arrays -> Python values.

    Undoes msgpack's ``use_list=True`` and makes user encodings wire-safe.
    """
    if isinstance(x, np.ndarray):
        x = x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (list, tuple)):
        return tuple(_tuplize(v) for v in x)
    if isinstance(x, dict):
        return {k: _tuplize(v) for k, v in x.items()}
    return x


def _check_wire(x: Any, path: str = "encoded") -> None:
    """Raise ``TypeError`` unless ``x`` is made only of msgpack-able values."""
    if x is None or isinstance(x, (bool, float, str, bytes)):
        return
    if isinstance(x, int):
        if not _MSGPACK_INT_MIN <= x <= _MSGPACK_INT_MAX:
            raise TypeError(f"{path} = {x} does not fit msgpack's 64-bit integers")
        return
    if isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            _check_wire(v, f"{path}[{i}]")
        return
    if isinstance(x, dict):
        for k, v in x.items():
            if not isinstance(k, (str, int, bytes)):
                raise TypeError(f"{path} has a key {k!r} of type {type(k).__name__}; use str/int keys")
            _check_wire(v, f"{path}[{k!r}]")
        return
    raise TypeError(f"{path} = {x!r} ({type(x).__name__}) is not msgpack-able; "
                    "encode_fn must return ints, floats, str, bytes, None and tuples/lists/dicts of them")


class OpenEnded(TaskSpace[T]):
    """Tasks produced at run time by ``generator(rng)``, identified by a content hash.

    Args:
        generator: ``generator(rng) -> task``; called with a :class:`numpy.random.Generator`.
        encode_fn: optional ``task -> encoded`` (msgpack-able); must come with ``decode_fn``.
        decode_fn: optional ``encoded -> task``; receives tuples, never lists.
        mutate_fn: optional ``mutate_fn(task, rng) -> child task`` enabling :meth:`mutate` (ACCEL).
        describe_fn: optional ``task -> str`` for :meth:`describe`.
        contains_fn: optional ``task -> bool`` validity check; without it, any task whose encoding works
            is contained.
        max_size: optional bound on the registry; least recently used tasks are evicted beyond it.
        seed: seed of the space's generator.

    ``num_tasks`` is ``None`` and the space is not indexed. :meth:`sample_encoded` calls the generator
    ``k`` times (it is user code, so it cannot be vectorised) and registers each task.
    """

    def __init__(
        self,
        generator: Callable[[np.random.Generator], T],
        *,
        encode_fn: Callable[[T], EncodedTask] | None = None,
        decode_fn: Callable[[EncodedTask], T] | None = None,
        mutate_fn: Callable[[T, np.random.Generator], T] | None = None,
        describe_fn: Callable[[T], str] | None = None,
        contains_fn: Callable[[T], bool] | None = None,
        max_size: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        if not callable(generator):
            raise TypeError(f"OpenEnded: generator must be callable as generator(rng), got {generator!r}")
        if (encode_fn is None) != (decode_fn is None):
            raise ValueError("OpenEnded: pass both encode_fn and decode_fn, or neither")
        for name, fn in (("encode_fn", encode_fn), ("decode_fn", decode_fn), ("mutate_fn", mutate_fn),
                         ("describe_fn", describe_fn), ("contains_fn", contains_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"OpenEnded: {name} must be callable, got {fn!r}")
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)
                                     or max_size < 1):
            raise ValueError(f"OpenEnded: max_size must be a positive int or None, got {max_size!r}")
        self._generator = generator
        self._encode_fn = encode_fn
        self._decode_fn = decode_fn
        self._mutate_fn = mutate_fn
        self._describe_fn = describe_fn
        self._contains_fn = contains_fn
        self._max_size = max_size
        self._registry: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.RLock()
        self.evictions = 0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The registry lock; held only for O(1) dict operations, never across user code."""
        if not self._lock.acquire(timeout=_LOCK_TIMEOUT_S):
            raise RuntimeError(f"{self!r}: registry lock not acquired within {_LOCK_TIMEOUT_S} s")
        try:
            yield
        finally:
            self._lock.release()

    # -- registry ----------------------------------------------------------------------------------
    @property
    def uses_registry(self) -> bool:
        """True when encoded tasks are content hashes resolved through the registry."""
        return self._encode_fn is None

    @property
    def max_size(self) -> int | None:
        """The registry bound (``None``: unbounded)."""
        return self._max_size

    def __len__(self) -> int:
        """Number of tasks in the registry (always 0 with ``encode_fn``/``decode_fn``)."""
        return len(self._registry)

    @property
    def registered(self) -> list[str]:
        """Encoded (hash) tasks in the registry, least recently used first."""
        with self._locked():
            return list(self._registry.keys())

    def _raw_encode(self, task: T) -> EncodedTask:
        if self._encode_fn is None:
            return content_hash(task)
        encoded = _tuplize(self._encode_fn(task))
        _check_wire(encoded, "encode_fn(task)")
        return encoded

    def add(self, task: T) -> EncodedTask:
        """Register ``task`` (a decoded task) and return its encoded form.

        Raises ``ValueError`` if ``contains_fn`` rejects it or it cannot be encoded.
        """
        if self._contains_fn is not None and not self._contains_fn(task):
            raise ValueError(f"task {task!r} is not in {self!r} (rejected by contains_fn)")
        try:
            encoded = self._raw_encode(task)
        except TypeError as exc:
            raise ValueError(f"task {task!r} is not in {self!r}: {exc}") from exc
        if self._encode_fn is None:
            with self._locked():
                if encoded in self._registry:
                    self._registry.move_to_end(encoded)
                else:
                    if self._max_size is not None and len(self._registry) >= self._max_size:
                        old, _ = self._registry.popitem(last=False)
                        self.evictions += 1
                        logger.debug("OpenEnded registry full (%d); evicted %s", self._max_size, old)
                    self._registry[encoded] = task
        return encoded

    def remove(self, encoded: EncodedTask) -> None:
        """Forget a registered task. ``KeyError`` if it is not registered (no-op with a custom encoding)."""
        if self._encode_fn is not None:
            return
        with self._locked():
            if not isinstance(encoded, str) or encoded not in self._registry:
                raise KeyError(f"task {encoded!r} is not registered in {self!r}")
            del self._registry[encoded]

    def clear(self) -> None:
        """Forget every registered task."""
        with self._locked():
            self._registry.clear()

    # -- the contract ------------------------------------------------------------------------------
    @property
    def num_tasks(self) -> None:
        return None

    def sample(self) -> T:
        """A fresh task from the generator (not registered until encoded)."""
        return self._generator(self._rng)

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        check_k(k)
        gen = self._rng if rng is None else rng
        out = []
        for _ in range(int(k)):
            task = self._generator(gen)
            try:
                out.append(self.add(task))
            except ValueError as exc:
                raise ValueError(f"the generator of {self!r} produced an invalid task: {exc}") from exc
        return out

    def contains(self, task: Any) -> bool:
        if self._contains_fn is not None:
            return bool(self._contains_fn(task))
        try:
            self._raw_encode(task)
        except (TypeError, ValueError):
            return False
        return True

    def encode(self, task: T) -> EncodedTask:
        """Encoded form of ``task``; with the default encoding this also registers it (so it decodes)."""
        return self.add(task)

    def decode(self, encoded: EncodedTask) -> T:
        if self._decode_fn is None:
            with self._locked():
                if isinstance(encoded, str) and encoded in self._registry:
                    self._registry.move_to_end(encoded)
                    return self._registry[encoded]
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} "
                             "(never registered here, removed, or evicted)")
        try:
            task = self._decode_fn(_tuplize(encoded))
        except (TypeError, KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r}: {exc}") from exc
        if self._contains_fn is not None and not self._contains_fn(task):
            raise ValueError(f"task {encoded!r} decodes to {task!r}, which is not in {self!r}")
        return task

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        if self._decode_fn is None:
            return isinstance(encoded, str) and encoded in self._registry
        return super().contains_encoded(encoded)

    @property
    def can_mutate(self) -> bool:
        return self._mutate_fn is not None

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> EncodedTask:
        """Apply ``mutate_fn`` to the decoded task and register the child; returns the child's encoding."""
        if self._mutate_fn is None:
            raise NotImplementedError(
                f"{self!r} has no mutate_fn; pass OpenEnded(..., mutate_fn=lambda task, rng: child) "
                "to enable mutate()"
            )
        child = self._mutate_fn(self.decode(encoded), rng)
        try:
            return self.add(child)
        except ValueError as exc:
            raise ValueError(f"mutate_fn of {self!r} produced an invalid task: {exc}") from exc

    def describe(self, task: T) -> str:
        if self._describe_fn is not None:
            return str(self._describe_fn(task))
        return str(task)

    # -- checkpointing -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The registry (hash, decoded task pairs, LRU order) and the generator state."""
        with self._locked():
            return {"registry": list(self._registry.items()), "rng": self._rng.bit_generator.state,
                    "evictions": self.evictions}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        with self._locked():
            self._registry = OrderedDict((str(h), t) for h, t in state["registry"])
            self._rng.bit_generator.state = state["rng"]
            self.evictions = int(state.get("evictions", 0))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # locks cannot be pickled; a copy gets its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _encoding_spec(self) -> Any:
        # what it has registered so far is not part of the encoding: content hashes are the same anywhere
        name = getattr(self._generator, "__qualname__", type(self._generator).__name__)
        return ("OpenEnded", name, self._encode_fn is None, self._max_size)

    def __repr__(self) -> str:
        name = getattr(self._generator, "__qualname__", type(self._generator).__name__)
        mode = "registry" if self._encode_fn is None else "encode_fn"
        bound = "" if self._max_size is None else f", max_size={self._max_size}"
        return f"OpenEnded(generator={name}, {mode}, registered={len(self._registry)}{bound})"
