"""A finite, indexed task space: ``n`` tasks, or an explicit list of tasks.

:class:`Discrete` is the simplest :class:`~magister.task_spaces.base.TaskSpace`. Its *encoded* tasks are the
dense integers ``0 .. num_tasks - 1`` (it is *indexed*), so tabular curricula keep per-task statistics in
plain arrays. Its *decoded* tasks are either the integers themselves (``Discrete(n)``: level seeds) or the
objects of an explicit list (``Discrete(tasks=[...])``: env ids, level files, any objects).

>>> space = Discrete(tasks=["MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0"], seed=0)
>>> space.encode("MiniGrid-DoorKey-5x5-v0"), space.decode(0)
(1, 'MiniGrid-Empty-5x5-v0')
>>> seeds = Discrete(100, seed=0)
>>> train, test = seeds.split(0.2)
>>> train.num_tasks, test.num_tasks
(80, 20)

**Splits are re-indexed.** A space returned by :meth:`Discrete.split` keeps the parent's *decoded* tasks but
numbers them ``0 .. m - 1`` within the subspace, so a tabular curriculum over the train split still uses a
dense table of exactly ``m`` rows. :meth:`Discrete.parent_index` maps a subspace's encoded task back to the
parent's encoding and :meth:`Discrete.local_index` maps the other way. :func:`split_indexed` does the same
for any indexed space (``MultiDiscrete``, fully discrete ``Product``): the subspaces are ``Discrete`` views
over the parent's flat indices and decode to the parent's decoded tasks. Subsets are stored as sorted index
arrays (the train side as the *complement* of the held-out indices), so splitting a space of ``10**12``
tasks with a small held-out set costs only the held-out set's memory.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .base import EncodedTask, TaskSpace, check_k, stable_repr, task_key

logger = logging.getLogger(__name__)

#: Largest subset that :func:`split_indexed` will materialise as an explicit index array.
MAX_EXPLICIT_SUBSET = 10_000_000
_INT64_MAX = 2**63 - 1


def is_int(x: Any) -> bool:
    """True for Python/numpy integers, False for bools."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _lookup_key(task: Any) -> Hashable:
    """A hashable key for a decoded task: the task itself when hashable, else a canonical tuple."""
    try:
        hash(task)
    except TypeError:
        return ("__unhashable__", type(task).__name__, task_key(task))
    return task


def _short_repr(items: Sequence[Any], limit: int = 4) -> str:
    shown = ", ".join(repr(x) for x in list(items[:limit]))
    return f"[{shown}, ...]" if len(items) > limit else f"[{shown}]"


class Discrete(TaskSpace[Any]):
    """``n`` tasks, or an explicit list of decoded tasks; encoded tasks are ``0 .. num_tasks - 1``.

    Args:
        n: number of tasks; decoded task ``i`` is the int ``i``. Give either ``n`` or ``tasks``.
        tasks: explicit decoded tasks (env ids, seeds, level objects ...); decoded task ``i`` is
            ``tasks[i]``. They must be distinct (by ``==`` / hash).
        names: optional human-readable name per task, used by :meth:`describe`.
        seed: seed of the space's generator.

    Raises:
        ValueError: for a non-positive ``n``, an empty or duplicated ``tasks`` list, both or neither of
            ``n`` and ``tasks``, or ``names`` of the wrong length.

    >>> Discrete(3).tasks
    [0, 1, 2]
    >>> Discrete(tasks=["a", "b"], names=["easy", "hard"]).describe("b")
    'hard'
    """

    def __init__(
        self,
        n: int | None = None,
        tasks: Sequence[Any] | None = None,
        *,
        names: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        if (n is None) == (tasks is None):
            raise ValueError("Discrete needs exactly one of n (a task count) or tasks (a list of tasks)")
        # Three storage modes: range (decoded i == i), list (decoded tasks[i]), subset view of a parent.
        self._list: list[Any] | None = None
        self._lookup: dict[Hashable, int] | None = None
        self._parent: TaskSpace | None = None
        self._idx: np.ndarray | None = None  # sorted parent indices (explicit) or held-out ones (complement)
        self._complement = False
        self._gaps: np.ndarray | None = None
        self._parent_n = 0
        if n is not None:
            if not is_int(n) or not 1 <= n <= _INT64_MAX:
                raise ValueError(f"Discrete: n must be a positive int below 2**63, got {n!r}")
            self._n = int(n)
        else:
            if isinstance(tasks, np.ndarray) and tasks.ndim == 1:
                tasks = tasks.tolist()  # numpy scalars -> Python values
            if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
                raise TypeError(f"Discrete: tasks must be a list/tuple of decoded tasks, got {tasks!r}")
            if len(tasks) == 0:
                raise ValueError("Discrete: tasks must not be empty")
            self._list = list(tasks)
            self._lookup = {}
            for i, t in enumerate(self._list):
                key = _lookup_key(t)
                if key in self._lookup:
                    raise ValueError(
                        f"Discrete: duplicate task {t!r} at positions {self._lookup[key]} and {i}; "
                        "tasks must be distinct"
                    )
                self._lookup[key] = i
            self._n = len(self._list)
        #: Range mode, not a view: decoded task ``i`` is the int ``i`` (the short paths below).
        self._range = n is not None
        self._names: list[str] | None = None
        if names is not None:
            if isinstance(names, (str, bytes)) or len(names) != self._n:
                raise ValueError(f"Discrete: names must be a sequence of {self._n} strings, got {names!r}")
            self._names = [str(x) for x in names]

    # -- subset views (built by split_indexed) ---------------------------------------------------------
    @classmethod
    def _subset(
        cls,
        parent: TaskSpace,
        indices: np.ndarray,
        complement: bool,
        seed: int | None,
    ) -> Discrete:
        """A view of ``parent`` restricted to ``indices`` (or to all but ``indices`` if ``complement``)."""
        parent_n = int(parent.num_tasks)  # type: ignore[arg-type]
        idx = np.unique(np.asarray(indices, dtype=np.int64))
        m = parent_n - idx.size if complement else idx.size
        if m < 1:
            raise ValueError(f"split of {parent!r} would leave an empty subspace")
        self = cls(m, seed=seed)
        self._range = False
        self._parent = parent
        self._parent_n = parent_n
        self._idx = idx
        self._complement = complement
        if complement:
            # gaps[i] = number of kept parent indices below idx[i]; nondecreasing, used to rank/select.
            self._gaps = idx - np.arange(idx.size, dtype=np.int64)
        return self

    @property
    def parent(self) -> TaskSpace | None:
        """The space this one was split from (``None`` for a space built directly)."""
        return self._parent

    def parent_index(self, encoded: EncodedTask) -> int:
        """The parent's encoding of this subspace's encoded task ``encoded``.

        For a space that was not split from another, this is ``encoded`` itself (after validation).

        >>> train, test = Discrete(10).split([3, 7])
        >>> test.parent_index(1), test.decode(1)
        (7, 7)
        """
        j = self._check_index(encoded)
        if self._parent is None:
            return j
        assert self._idx is not None
        if not self._complement:
            return int(self._idx[j])
        assert self._gaps is not None
        return int(j + np.searchsorted(self._gaps, j, side="right"))

    def local_index(self, parent_encoded: EncodedTask) -> int:
        """This subspace's encoding of the parent's encoded task ``parent_encoded``.

        Raises ``ValueError`` when that task is not in this subspace.
        """
        if self._parent is None:
            return self._check_index(parent_encoded)
        if not is_int(parent_encoded) or not 0 <= parent_encoded < self._parent_n:
            raise ValueError(f"task {parent_encoded!r} is not an encoded task of the parent {self._parent!r}")
        x = int(parent_encoded)
        assert self._idx is not None
        pos = int(np.searchsorted(self._idx, x))
        present = pos < self._idx.size and int(self._idx[pos]) == x
        if self._complement:
            if present:
                raise ValueError(f"task {parent_encoded!r} of {self._parent!r} is held out of {self!r}")
            return x - pos
        if not present:
            raise ValueError(f"task {parent_encoded!r} of {self._parent!r} is not in {self!r}")
        return pos

    @property
    def parent_indices(self) -> np.ndarray:
        """The parent encodings of all tasks of this space, in order (an int64 array)."""
        if self._parent is None:
            return np.arange(self._n, dtype=np.int64)
        assert self._idx is not None
        if not self._complement:
            return self._idx.copy()
        if self._n > MAX_EXPLICIT_SUBSET:
            raise ValueError(f"{self!r} has {self._n} tasks, too many to list (> {MAX_EXPLICIT_SUBSET})")
        keep = np.ones(self._parent_n, dtype=bool)
        keep[self._idx] = False
        return np.flatnonzero(keep).astype(np.int64)

    # -- the contract ------------------------------------------------------------------------------
    @property
    def num_tasks(self) -> int:
        return self._n

    @property
    def indexed(self) -> bool:
        return True

    @property
    def names(self) -> list[str] | None:
        """The task names given at construction, if any."""
        return None if self._names is None else list(self._names)

    def _check_index(self, encoded: EncodedTask) -> int:
        if not is_int(encoded) or not 0 <= encoded < self._n:
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} (expected an int in "
                             f"[0, {self._n}))")
        return int(encoded)

    def _find(self, task: Any) -> int | None:
        """Encoded index of a decoded task, or None if it is not in the space."""
        if self._parent is not None:
            if not self._parent.contains(task):
                return None
            try:
                return self.local_index(self._parent.encode(task))
            except ValueError:
                return None
        if self._lookup is not None:
            try:
                return self._lookup.get(_lookup_key(task))
            except TypeError:  # e.g. a task_key that cannot be built
                return None
        if is_int(task) and 0 <= task < self._n:
            return int(task)
        return None

    # (contains, encode and decode run at every reset of every env: a plain int of a range space, the
    # common case, is answered without the general lookup)
    def contains(self, task: Any) -> bool:
        if type(task) is int and self._range:
            return 0 <= task < self._n
        return self._find(task) is not None

    def encode(self, task: Any) -> int:
        if type(task) is int and self._range and 0 <= task < self._n:
            return task
        i = self._find(task)
        if i is None:
            raise ValueError(f"task {task!r} is not in {self!r}")
        return i

    def decode(self, encoded: EncodedTask) -> Any:
        if type(encoded) is int and self._range and 0 <= encoded < self._n:
            return encoded
        j = self._check_index(encoded)
        if self._parent is not None:
            return self._parent.decode(self.parent_index(j))
        if self._list is not None:
            return self._list[j]
        return j

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        return is_int(encoded) and 0 <= encoded < self._n

    def sample(self) -> Any:
        return self.decode(int(self._rng.integers(self._n)))

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[int]:
        """``k`` encoded tasks drawn uniformly with replacement, in one ``rng.integers`` call."""
        check_k(k)
        gen = self._rng if rng is None else rng
        return gen.integers(0, self._n, size=int(k)).tolist()

    @property
    def tasks(self) -> list[Any]:
        self._check_listable()
        return [self.decode(i) for i in range(self._n)]

    @property
    def encoded_tasks(self) -> list[int]:
        self._check_listable()
        return list(range(self._n))

    def _check_listable(self) -> None:
        if self._n > MAX_EXPLICIT_SUBSET:
            raise TypeError(f"{self!r} has {self._n} tasks, too many to list (> {MAX_EXPLICIT_SUBSET})")

    def split(
        self, holdout: float | int | Sequence[Any], seed: int | None = 0
    ) -> tuple[Discrete, Discrete]:
        """Partition into ``(train, held_out)`` Discrete spaces over disjoint subsets of the tasks.

        Args:
            holdout: a fraction in ``(0, 1)`` of the tasks (rounded, at least 1), a count, or an explicit
                sequence of *decoded* tasks to hold out.
            seed: seed for choosing the held-out tasks (and, spawned from it, the two spaces' generators).

        Both spaces keep the decoded tasks but re-index them ``0 .. m - 1``; see :meth:`parent_index`.
        """
        return split_indexed(self, holdout, seed)

    def describe(self, task: Any) -> str:
        if self._names is not None:
            return self._names[self.encode(task)]
        if self._parent is not None:
            return self._parent.describe(task)
        return str(task)

    def _encoding_spec(self) -> Any:
        if self._parent is not None:  # local indices into the parent's tasks
            return ("Discrete", self._parent._encoding_spec(), self._idx.tolist(), self._complement)  # type: ignore
        if self._list is not None:
            return ("Discrete", [stable_repr(t) for t in self._list])
        return ("Discrete", self._n)

    def __repr__(self) -> str:
        if self._parent is not None:
            kind = "all but" if self._complement else "of"
            return f"Discrete(n={self._n}, {kind} {self._idx.size} tasks of {self._parent!r})"  # type: ignore
        if self._list is not None:
            return f"Discrete(tasks={_short_repr(self._list)}, n={self._n})"
        return f"Discrete(n={self._n})"


def split_indexed(
    space: TaskSpace, holdout: float | int | Sequence[Any], seed: int | None = 0
) -> tuple[Discrete, Discrete]:
    """Split an *indexed* space into ``(train, held_out)`` :class:`Discrete` views of its tasks.

    The views decode to ``space``'s decoded tasks, are re-indexed densely, and map back with
    :meth:`Discrete.parent_index`. ``holdout`` is a fraction in ``(0, 1)``, a count in
    ``[1, num_tasks - 1]``, or a sequence of decoded tasks of ``space``.

    >>> from magister.task_spaces.multi_discrete import MultiDiscrete
    >>> train, test = split_indexed(MultiDiscrete([2, 3]), [(1, 2)])
    >>> train.num_tasks, test.tasks, test.parent_index(0)
    (5, [(1, 2)], 5)
    """
    if not space.indexed or space.num_tasks is None:
        raise ValueError(f"split_indexed needs an indexed space with a finite num_tasks, got {space!r}")
    n = int(space.num_tasks)
    if n > _INT64_MAX:
        raise ValueError(f"cannot split {space!r}: more than 2**63 - 1 tasks")
    if n < 2:
        raise ValueError(f"cannot split {space!r}: it has only {n} task")
    if isinstance(holdout, (bool, np.bool_)):
        raise TypeError(f"holdout must be a fraction, a count or a sequence of tasks, got {holdout!r}")
    rng = np.random.default_rng(seed)
    if isinstance(holdout, (float, np.floating)):
        if not 0.0 < holdout < 1.0:
            raise ValueError(f"holdout fraction must be in (0, 1), got {holdout!r}")
        count = min(max(int(round(float(holdout) * n)), 1), n - 1)
        held = _choose(rng, n, count)
    elif is_int(holdout):
        if not 1 <= holdout <= n - 1:
            raise ValueError(f"holdout count must be in [1, {n - 1}] for {space!r}, got {holdout!r}")
        held = _choose(rng, n, int(holdout))
    elif isinstance(holdout, Sequence) and not isinstance(holdout, (str, bytes)):
        if len(holdout) == 0:
            raise ValueError("holdout must not be an empty sequence")
        codes = []
        for t in holdout:
            if not space.contains(t):
                raise ValueError(f"held-out task {t!r} is not in {space!r}")
            codes.append(int(space.encode(t)))
        held = np.unique(np.asarray(codes, dtype=np.int64))
        if held.size >= n:
            raise ValueError(f"holdout covers all {n} tasks of {space!r}; nothing left to train on")
    else:
        raise TypeError(
            f"holdout must be a fraction in (0, 1), a count, or a list of decoded tasks, got {holdout!r}"
        )
    if held.size > MAX_EXPLICIT_SUBSET:
        raise ValueError(f"holdout of {held.size} tasks is too large (> {MAX_EXPLICIT_SUBSET})")
    s_train, s_test = np.random.SeedSequence(seed).spawn(2) if seed is not None else (None, None)
    seed_train = None if s_train is None else int(s_train.generate_state(1)[0])
    seed_test = None if s_test is None else int(s_test.generate_state(1)[0])
    train = Discrete._subset(space, held, complement=True, seed=seed_train)
    test = Discrete._subset(space, held, complement=False, seed=seed_test)
    logger.debug("split %r into %d train and %d held-out tasks", space, train.num_tasks, test.num_tasks)
    return train, test


def _choose(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """``count`` distinct integers from ``[0, n)``, sorted."""
    if count > MAX_EXPLICIT_SUBSET:
        raise ValueError(f"holdout of {count} tasks is too large (> {MAX_EXPLICIT_SUBSET})")
    if n <= 2 * MAX_EXPLICIT_SUBSET:
        return np.sort(rng.choice(n, size=count, replace=False).astype(np.int64))
    # Huge n: draw i.i.d. until ``count`` distinct values exist, then keep a uniform subset of them
    # (exchangeable, so every ``count``-subset is equally likely) without materialising ``range(n)``.
    found = np.empty(0, dtype=np.int64)
    while found.size < count:
        found = np.unique(np.concatenate([found, rng.integers(0, n, size=count - found.size + 8)]))
    return np.sort(rng.choice(found, size=count, replace=False))
