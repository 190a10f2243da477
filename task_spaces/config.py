"""Configuration task spaces: named axes, validity constraints and a held-out benchmark set.

Procedurally generated task suites define a task by a handful of configuration parameters. DiscoGen
(Procedural Generation of Algorithm Discovery Tasks in Machine Learning, Sec. 4 and App. F) is the model:
a task is a domain, a meta-train/meta-test/excluded label per dataset, an editable/fixed flag per module
and a backend; *invalid* configurations (no meta-train or no meta-test dataset, no editable module) are
discarded; the number of valid tasks is counted exactly (App. F.2: ``(3^d - 2^{d+1} + 1)(2^m - 1) b``);
and a fixed benchmark subset (DiscoBench) is held out of optimisation. :class:`ConfigSpace` provides
exactly these pieces:

* **Axes**: ``{name: values}`` with categorical/ordinal lists or int ``range`` objects.
* **Decoded task**: a dict ``{axis: value}`` in axis order. **Encoded task**: the tuple of per-axis value
  *indices* (ints), compact and msgpack-able; decoding accepts lists too.
* **Constraints**: callables on the decoded dict; a task is valid when all return true.
* **Sampling** is uniform over the valid, non-held-out tasks. A space with at most ``enumerate_limit``
  combinations is enumerated once at construction (the valid tasks become an int array, so sampling is
  exact and vectorised and ``num_tasks`` is the exact count); a larger one uses rejection sampling, which
  is also exact, and raises ``ValueError`` after ``max_attempts`` consecutive rejections (the constraints
  admit nothing, or acceptance is too rare). Without constraints or held-out tasks nothing is enumerated.
* **Held-out tasks** (``holdout``) are never sampled by the space, are not ``contains``-ed by it (train and
  held-out partition the valid tasks), and form their own space, :attr:`ConfigSpace.heldout`, with the
  *same* encoding. :meth:`ConfigSpace.split` holds out more tasks.
* **Mutation** (ACCEL-style edits): :meth:`ConfigSpace.mutate` changes one axis and keeps the task valid;
  ``range`` axes are ordinal (step to a neighbouring value), list axes categorical (any other value).
* **Descriptions**: :meth:`ConfigSpace.describe` with a task (decoded or encoded) joins per-axis text (a
  format string such as ``"learning rate {value}"``, a callable ``value -> str``, or the default
  ``"axis=value"``) into one sentence, for language-model judges; without one it describes the space.

>>> space = ConfigSpace(
...     {"size": range(5, 9), "doors": [0, 1, 2]},
...     constraints=[lambda t: t["doors"] <= t["size"] - 6],
...     holdout=[{"size": 8, "doors": 2}],
...     seed=0,
... )
>>> space.num_tasks, space.heldout.num_tasks
(5, 1)
>>> space.encode({"size": 7, "doors": 1}), space.decode((3, 0))
((2, 1), {'size': 8, 'doors': 0})
>>> space.describe({"size": 7, "doors": 1})
'size=7, doors=1.'
>>> space.describe()
'5 tasks (12 combinations, 1 constraint, 1 held out): size in range(5, 9); doors in [0, 1, 2].'
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from .base import EncodedTask, TaskSpace, check_k, stable_repr
from .discrete import is_int

logger = logging.getLogger(__name__)

Constraint = Callable[[dict], bool]


def _values_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # e.g. numpy arrays compare element-wise
        return bool(np.array_equal(a, b))


class _Axis:
    """One named axis: its values and a value -> index lookup."""

    def __init__(self, name: str, values: Sequence[Any] | range) -> None:
        if isinstance(values, range):
            if len(values) == 0:
                raise ValueError(f"ConfigSpace: axis {name!r} is an empty range")
            self.values: Sequence[Any] = values
            self.lookup: dict[Hashable, int] | None = None
        else:
            if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
                raise TypeError(f"ConfigSpace: axis {name!r} must be a list/tuple of values or a range, "
                                f"got {values!r}")
            vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
            if not vals:
                raise ValueError(f"ConfigSpace: axis {name!r} has no values")
            self.values = tuple(vals)
            self.lookup = {}
            try:
                for i, v in enumerate(vals):
                    if v in self.lookup:
                        raise ValueError(f"ConfigSpace: axis {name!r} repeats the value {v!r}")
                    self.lookup[v] = i
            except TypeError:  # unhashable values: linear scan with ==
                self.lookup = None
                for i, v in enumerate(vals):
                    if any(_values_equal(v, w) for w in vals[:i]):
                        raise ValueError(f"ConfigSpace: axis {name!r} repeats the value {v!r}") from None
        self.name = name
        self.size = len(self.values)

    def index(self, value: Any) -> int | None:
        """Index of ``value`` on this axis, or None."""
        if isinstance(self.values, range):
            if is_int(value) and value in self.values:
                return self.values.index(int(value))
            return None
        if self.lookup is not None:
            try:
                return self.lookup.get(value)
            except TypeError:
                return None
        for i, v in enumerate(self.values):
            if _values_equal(value, v):
                return i
        return None


class ConfigSpace(TaskSpace[dict]):
    """Tasks as dicts over named axes, with validity constraints and a held-out set.

    Args:
        axes: ``{name: values}``; values a non-empty list/tuple (categorical or ordinal) or an int
            ``range``. Names must be str; values on an axis must be distinct.
        constraints: callables ``task_dict -> bool``; a task is valid when all hold.
        holdout: valid tasks (dicts) that the space never samples; :attr:`heldout` is the space of them.
        num_tasks: the number of *valid* tasks (held-out ones included), for spaces too large to
            enumerate (e.g. from a closed form). The space reports it minus the held-out count. For an
            enumerable space it is checked against the enumeration (``ValueError`` on a mismatch).
        describe: per-axis text for :meth:`describe`: a format string with ``{value}`` (and optionally
            ``{axis}``), a callable ``value -> str``, or ``None`` to leave the axis out.
        max_attempts: consecutive rejected candidates after which rejection sampling (or mutation) gives
            up with ``ValueError``.
        enumerate_limit: enumerate the valid tasks when the number of combinations is at most this.
        seed: seed of the space's generator.
    """

    def __init__(
        self,
        axes: Mapping[str, Sequence[Any] | range],
        *,
        constraints: Sequence[Constraint] = (),
        holdout: Sequence[Mapping[str, Any]] | None = None,
        num_tasks: int | None = None,
        describe: Mapping[str, Callable[[Any], str] | str | None] | None = None,
        max_attempts: int = 1000,
        enumerate_limit: int = 1_000_000,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        self._seed = seed
        if not isinstance(axes, Mapping) or len(axes) == 0:
            raise ValueError(f"ConfigSpace: axes must be a non-empty dict of name -> values, got {axes!r}")
        for name in axes:
            if not isinstance(name, str):
                raise TypeError(f"ConfigSpace: axis names must be str, got {name!r}")
        self._axes = [_Axis(name, vals) for name, vals in axes.items()]
        self._names = [a.name for a in self._axes]
        self._sizes = tuple(a.size for a in self._axes)
        self._total = int(np.prod(self._sizes, dtype=object))
        if callable(constraints):
            constraints = (constraints,)
        for c in constraints:
            if not callable(c):
                raise TypeError(f"ConfigSpace: constraints must be callables task -> bool, got {c!r}")
        self._constraints: tuple[Constraint, ...] = tuple(constraints)
        for label, val in (("max_attempts", max_attempts), ("enumerate_limit", enumerate_limit)):
            if not is_int(val) or val < 1:
                raise ValueError(f"ConfigSpace: {label} must be a positive int, got {val!r}")
        self.max_attempts = int(max_attempts)
        self.enumerate_limit = int(enumerate_limit)
        if num_tasks is not None and (not is_int(num_tasks) or num_tasks < 1):
            raise ValueError(f"ConfigSpace: num_tasks must be a positive int or None, got {num_tasks!r}")
        self._user_num_tasks = None if num_tasks is None else int(num_tasks)
        self._describers = self._check_describers(describe or {})
        # Row-major place values, to compare rows as flat ints (only used for enumerable spaces).
        place = [int(np.prod(self._sizes[i + 1:], dtype=object)) for i in range(len(self._sizes))]
        self._radix = np.array(place, dtype=np.int64 if self._total <= 2**62 else object)
        self._full_rows: np.ndarray | None = None  # cache of all combinations, for .tasks without constraints
        self._only: set[tuple[int, ...]] | None = None  # set for the held-out space: exactly these rows
        self._holdout: set[tuple[int, ...]] = set()
        for task in holdout or ():
            self._holdout.add(self._row_of(task, check_holdout=False, what="held-out task"))
        self._heldout_space: ConfigSpace | None = None
        self._rows: np.ndarray | None = None  # enumerated sampleable rows (valid, not held out)
        self._valid_count: int | None = None  # valid tasks, held-out included (when enumerated)
        if not self._constraints:
            self._check_user_count(self._total)  # without constraints the count is known exactly
        if self._total <= self.enumerate_limit and (self._constraints or self._holdout):
            self._enumerate()

    # -- construction helpers ----------------------------------------------------------------------
    def _check_describers(self, describe: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(describe, Mapping):
            raise TypeError("ConfigSpace: describe must be a dict {axis: format string | callable | None}, "
                            f"got {describe!r}")
        out = {}
        for name, entry in describe.items():
            if name not in self._names:
                raise ValueError(f"ConfigSpace: describe has an entry for {name!r}, which is not an axis "
                                 f"(axes: {self._names})")
            if entry is None or callable(entry):
                out[name] = entry
            elif isinstance(entry, str):
                sample_value = self._axes[self._names.index(name)].values[0]
                try:
                    entry.format(value=sample_value, axis=name)
                except (KeyError, IndexError, ValueError) as exc:
                    raise ValueError(f"ConfigSpace: describe[{name!r}] = {entry!r} is not a format string "
                                     f"using only the fields {{value}} and {{axis}}: {exc}") from exc
                out[name] = entry
            else:
                raise TypeError(f"ConfigSpace: describe[{name!r}] must be a format string, a callable or "
                                f"None, got {entry!r}")
        return out

    def _check_user_count(self, valid: int) -> None:
        if self._user_num_tasks is not None and self._user_num_tasks != valid:
            raise ValueError(f"ConfigSpace: num_tasks={self._user_num_tasks} was given but the space has "
                             f"{valid} valid tasks")

    def _enumerate(self) -> None:
        """Enumerate the valid, non-held-out combinations into ``self._rows`` (once)."""
        if self._only is not None:
            rows = np.array(sorted(self._only), dtype=np.int64).reshape(-1, len(self._sizes))
            self._rows, self._valid_count = rows, len(rows)
            return
        rows = np.stack(np.unravel_index(np.arange(self._total, dtype=np.int64), self._sizes), axis=1)
        rows = rows.astype(np.int64)
        if self._constraints:
            # itertools.product walks the combinations in the same row-major order as ``rows``.
            names, constraints = self._names, self._constraints

            def ok(values: tuple) -> bool:
                task = dict(zip(names, values))
                return all(c(task) for c in constraints)

            combos = itertools.product(*(a.values for a in self._axes))
            rows = rows[np.fromiter(map(ok, combos), dtype=bool, count=len(rows))]
        self._valid_count = len(rows)
        self._check_user_count(self._valid_count)
        if self._valid_count == 0:
            raise ValueError(f"{self!r}: the constraints admit no task out of {self._total} combinations")
        if self._holdout:
            held = np.array(sorted(self._holdout), dtype=np.int64)
            rows = rows[~np.isin(rows @ self._radix, held @ self._radix)]
            if len(rows) == 0:
                raise ValueError(f"{self!r}: every valid task is held out; nothing is left to sample")
        self._rows = rows
        logger.debug("%r enumerated: %d valid tasks, %d sampleable", self, self._valid_count, len(rows))

    def seed(self, seed: int | None = None) -> None:
        self._seed = seed
        super().seed(seed)

    # -- rows (tuples of value indices) --------------------------------------------------------------
    def _task_of(self, row: Sequence[int]) -> dict[str, Any]:
        return {a.name: a.values[i] for a, i in zip(self._axes, row)}

    def _valid_row(self, row: Sequence[int]) -> bool:
        if not self._constraints:
            return True
        task = self._task_of(row)
        return all(bool(c(task)) for c in self._constraints)

    def _sampleable(self, row: tuple[int, ...]) -> bool:
        if self._only is not None:
            return row in self._only
        return row not in self._holdout and self._valid_row(row)

    def _row_of(self, task: Any, check_holdout: bool = True, what: str = "task") -> tuple[int, ...]:
        """Row of a decoded task, or ``ValueError`` naming the task, the reason and the space."""
        if not isinstance(task, Mapping):
            raise ValueError(f"{what} {task!r} is not in {self!r} (expected a dict with keys {self._names})")
        if set(task.keys()) != set(self._names) or len(task) != len(self._names):
            raise ValueError(f"{what} {task!r} is not in {self!r} (expected exactly the keys {self._names})")
        row = []
        for a in self._axes:
            i = a.index(task[a.name])
            if i is None:
                raise ValueError(f"{what} {task!r} is not in {self!r} ({a.name}={task[a.name]!r} is not "
                                 "one of the axis values)")
            row.append(i)
        out = tuple(row)
        if not self._valid_row(out):
            raise ValueError(f"{what} {task!r} is not in {self!r} (violates a constraint)")
        if check_holdout:
            if self._only is not None and out not in self._only:
                raise ValueError(f"{what} {task!r} is not in {self!r} (not one of the held-out tasks)")
            if self._only is None and out in self._holdout:
                raise ValueError(f"{what} {task!r} is not in {self!r} (it is held out; see .heldout)")
        return out

    def _row_of_encoded(self, encoded: Any) -> tuple[int, ...] | None:
        if isinstance(encoded, np.ndarray):
            encoded = encoded.tolist()
        if not isinstance(encoded, (tuple, list)) or len(encoded) != len(self._sizes):
            return None
        if not all(is_int(i) and 0 <= i < s for i, s in zip(encoded, self._sizes)):
            return None
        row = tuple(int(i) for i in encoded)
        return row if self._sampleable(row) else None

    # -- the contract ------------------------------------------------------------------------------
    @property
    def axes(self) -> dict[str, Sequence[Any]]:
        """The axes as given (``range`` objects stay ranges)."""
        return {a.name: a.values for a in self._axes}

    @property
    def num_combinations(self) -> int:
        """Number of axis-value combinations, valid or not."""
        return self._total

    @property
    def num_tasks(self) -> int | None:
        """Sampleable tasks: exact if enumerated or unconstrained, else given ``num_tasks`` minus held-out."""
        if self._rows is not None:
            return len(self._rows)
        if not self._constraints:
            return self._total - len(self._holdout)
        if self._user_num_tasks is not None:
            return self._user_num_tasks - len(self._holdout)
        return None

    def contains(self, task: Any) -> bool:
        try:
            self._row_of(task)
        except ValueError:
            return False
        return True

    def is_heldout(self, task: Mapping[str, Any]) -> bool:
        """Whether a decoded task is one of this space's held-out tasks."""
        try:
            return self._row_of(task, check_holdout=False) in self._holdout
        except ValueError:
            return False

    def encode(self, task: Mapping[str, Any]) -> tuple[int, ...]:
        return self._row_of(task)

    def decode(self, encoded: EncodedTask) -> dict[str, Any]:
        row = self._row_of_encoded(encoded)
        if row is None:
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} (expected a tuple of "
                             f"{len(self._sizes)} value indices, with sizes {list(self._sizes)}, of a valid, "
                             "sampleable task)")
        return self._task_of(row)

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        return self._row_of_encoded(encoded) is not None

    def _sample_rows(self, gen: np.random.Generator, k: int) -> np.ndarray:
        if self._rows is not None:
            return self._rows[gen.integers(0, len(self._rows), size=k)]
        if not self._constraints and not self._holdout:
            return gen.integers(0, self._sizes, size=(k, len(self._sizes)))
        # Rejection sampling: uniform candidates, keep the sampleable ones (exactly uniform over them).
        out: list[list[int]] = []
        misses = 0
        while len(out) < k:
            need = k - len(out)
            for row in gen.integers(0, self._sizes, size=(max(2 * need, 16), len(self._sizes))).tolist():
                if self._sampleable(tuple(row)):
                    out.append(row)
                    misses = 0
                    if len(out) == k:
                        break
                else:
                    misses += 1
                    if misses >= self.max_attempts:
                        raise ValueError(
                            f"{self!r}: no valid task found in {self.max_attempts} consecutive attempts; the "
                            "constraints admit no task or accept too rarely (raise max_attempts, or "
                            "enumerate_limit to enumerate the valid tasks)"
                        )
        return np.asarray(out, dtype=np.int64)

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[tuple[int, ...]]:
        """``k`` encoded tasks, uniform over the sampleable tasks (vectorised when enumerated)."""
        check_k(k)
        gen = self._rng if rng is None else rng
        return [tuple(r) for r in self._sample_rows(gen, int(k)).tolist()]

    def sample(self) -> dict[str, Any]:
        return self._task_of(self.sample_encoded(1)[0])

    def _all_rows(self) -> np.ndarray:
        if self._rows is not None:
            return self._rows
        if self._total > self.enumerate_limit:
            raise TypeError(f"{self!r} has {self._total} combinations, more than enumerate_limit; "
                            "it is not enumerated")
        # No constraints and nothing held out: every combination. Cached apart from ``_rows`` so that
        # listing the tasks never changes how the space samples.
        if self._full_rows is None:
            rows = np.stack(np.unravel_index(np.arange(self._total, dtype=np.int64), self._sizes), axis=1)
            self._full_rows = rows.astype(np.int64)
        return self._full_rows

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return [self._task_of(r) for r in self._all_rows().tolist()]

    @property
    def encoded_tasks(self) -> list[tuple[int, ...]]:
        return [tuple(r) for r in self._all_rows().tolist()]

    # -- held-out tasks ----------------------------------------------------------------------------
    @property
    def holdout(self) -> list[dict[str, Any]]:
        """The held-out tasks (decoded), in encoded order."""
        return [self._task_of(r) for r in sorted(self._holdout)]

    def _derive(self, holdout_rows: set[tuple[int, ...]] | None, only: set[tuple[int, ...]] | None,
                seed: int | None) -> ConfigSpace:
        """A copy sharing axes/constraints, with a new held-out set or restricted to ``only``."""
        new = copy.copy(self)
        new._rng = np.random.default_rng(seed)
        new._seed = seed
        new._only = only
        new._heldout_space = None
        new._holdout = set() if only is not None else set(holdout_rows or ())
        new._rows = None
        if only is not None:
            new._enumerate()
        elif self._rows is not None or (self._total <= self.enumerate_limit and new._holdout):
            base = self._rows
            if base is not None and self._holdout <= new._holdout:
                # Remove the extra held-out rows from the already enumerated ones (no constraint calls).
                extra = np.array(sorted(new._holdout - self._holdout), dtype=np.int64)
                extra = extra.reshape(-1, len(self._sizes))
                rows = base[~np.isin(base @ self._radix, extra @ self._radix)] if len(extra) else base
                if len(rows) == 0:
                    raise ValueError(f"{self!r}: every valid task is held out; nothing is left to sample")
                new._rows = rows
            else:
                new._enumerate()
        return new

    def _child_seeds(self, seed: int | None) -> tuple[int | None, int | None]:
        if seed is None:
            return None, None
        a, b = np.random.SeedSequence(seed).spawn(2)
        return int(a.generate_state(1)[0]), int(b.generate_state(1)[0])

    @property
    def heldout(self) -> ConfigSpace:
        """The held-out tasks as a space (same axes, constraints and encoding; samples only them).

        Built on first access and cached, so repeated access returns the same object (and generator).
        """
        if not self._holdout:
            raise ValueError(f"{self!r} has no held-out tasks (pass holdout=[...] or use split())")
        if self._heldout_space is None:
            seed = None if self._seed is None else self._child_seeds(self._seed)[1]
            self._heldout_space = self._derive(None, set(self._holdout), seed)
        return self._heldout_space

    def split(
        self,
        holdout: float | int | Sequence[Mapping[str, Any]] | None = None,
        seed: int | None = 0,
    ) -> tuple[ConfigSpace, ConfigSpace]:
        """``(train, held_out)`` spaces partitioning the valid tasks; both keep this space's encoding.

        Args:
            holdout: ``None`` for the held-out set given at construction; an explicit list of task dicts;
                or a fraction in ``(0, 1)`` / a count of the sampleable tasks, chosen at random (needs an
                enumerable space). New held-out tasks are added to the existing ones.
            seed: seed for choosing tasks and for the two spaces' generators.
        """
        if self._only is not None:
            raise ValueError(f"{self!r} is a held-out space; split its parent instead")
        rows = set(self._holdout)
        if holdout is None:
            pass
        elif isinstance(holdout, (bool, np.bool_)):
            raise TypeError(f"holdout must be a fraction, a count or a list of task dicts, got {holdout!r}")
        elif isinstance(holdout, (float, np.floating)) or is_int(holdout):
            pool = self._all_rows()
            if isinstance(holdout, (float, np.floating)):
                if not 0.0 < holdout < 1.0:
                    raise ValueError(f"holdout fraction must be in (0, 1), got {holdout!r}")
                count = min(max(int(round(float(holdout) * len(pool))), 1), len(pool) - 1)
            else:
                count = int(holdout)  # type: ignore[arg-type]
                if not 1 <= count <= len(pool) - 1:
                    raise ValueError(f"holdout count must be in [1, {len(pool) - 1}] for {self!r}, "
                                     f"got {count}")
            if len(pool) < 2:
                raise ValueError(f"cannot split {self!r}: it has only {len(pool)} sampleable task")
            pick = np.random.default_rng(seed).choice(len(pool), size=count, replace=False)
            rows |= {tuple(r) for r in pool[np.sort(pick)].tolist()}
        elif isinstance(holdout, Sequence) and not isinstance(holdout, (str, bytes)):
            for task in holdout:
                rows.add(self._row_of(task, check_holdout=False, what="held-out task"))
        else:
            raise TypeError(f"holdout must be a fraction, a count or a list of task dicts, got {holdout!r}")
        if not rows:
            raise ValueError(f"{self!r}: nothing to hold out (holdout is empty)")
        s_train, s_test = self._child_seeds(seed)
        train = self._derive(rows, None, s_train)
        test = self._derive(None, rows, s_test)
        return train, test

    # -- mutation and text -------------------------------------------------------------------------
    @property
    def can_mutate(self) -> bool:
        return any(s > 1 for s in self._sizes)

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> tuple[int, ...]:
        """A small edit: change one axis (with more than one value), keeping the task valid and sampleable.

        ``range`` axes are ordinal and step to a neighbouring value (``+-1``); list axes are categorical and
        jump to any other value. Retries up to ``max_attempts`` times; raises ``ValueError`` if no valid
        neighbour was found, and ``NotImplementedError`` when every axis has a single value
        (:attr:`can_mutate` is false).
        """
        if not self.can_mutate:
            raise NotImplementedError(f"{self!r} has one value per axis; nothing to mutate")
        self.decode(encoded)  # validates
        row = [int(i) for i in encoded]
        movable = [j for j, s in enumerate(self._sizes) if s > 1]
        for _ in range(self.max_attempts):
            j = movable[int(rng.integers(len(movable)))]
            size = self._sizes[j]
            child = list(row)
            if isinstance(self._axes[j].values, range):
                step = 1 if rng.random() < 0.5 else -1
                if not 0 <= row[j] + step < size:
                    step = -step
                child[j] = row[j] + step
            else:
                child[j] = (row[j] + int(rng.integers(1, size))) % size
            if self._sampleable(tuple(child)):
                return tuple(child)
        raise ValueError(f"{self!r}: no valid mutation of {encoded!r} found in {self.max_attempts} attempts")

    def describe(self, task: Mapping[str, Any] | EncodedTask | None = None) -> str:
        """Text for language-model judges and logs: of the space, or of one task.

        ``describe()`` (no task) describes the space: its valid-task count, combinations, constraints,
        held-out count and each axis's values. ``describe(task)`` gives one sentence from per-axis text,
        e.g. ``'learning rate 0.001, batch size 64.'``; ``task`` is a decoded task (a dict) or an encoded
        one (the tuple of value indices). Held-out tasks can be described too. Anything that is not a
        task of this space (wrong keys, a value off its axis, a violated constraint, an index out of
        range) raises ``ValueError`` naming the task and the space.
        """
        if task is None:
            return self._describe_space()
        if isinstance(task, Mapping):
            row = self._row_of(task, check_holdout=False)
        else:
            row = self._row_of_any_encoded(task)
        parts = []
        for name, value in self._task_of(row).items():
            if name in self._describers:
                entry = self._describers[name]
                if entry is None:
                    continue
                parts.append(str(entry(value)) if callable(entry) else entry.format(value=value, axis=name))
            else:
                parts.append(f"{name}={value}")
        return ", ".join(parts) + "."

    def _row_of_any_encoded(self, encoded: Any) -> tuple[int, ...]:
        """Row of an encoded task, held-out ones included, or ``ValueError`` naming it and the space."""
        seq = encoded.tolist() if isinstance(encoded, np.ndarray) else encoded
        if (not isinstance(seq, (tuple, list)) or len(seq) != len(self._sizes)
                or not all(is_int(i) and 0 <= i < n for i, n in zip(seq, self._sizes))):
            raise ValueError(f"task {encoded!r} is not in {self!r} (expected a dict with keys "
                             f"{self._names} or a tuple of {len(self._sizes)} value indices with sizes "
                             f"{list(self._sizes)})")
        row = tuple(int(i) for i in seq)
        if not self._valid_row(row):
            raise ValueError(f"task {encoded!r} is not in {self!r} (violates a constraint)")
        if self._only is not None and row not in self._only:
            raise ValueError(f"task {encoded!r} is not in {self!r} (not one of the held-out tasks)")
        return row

    def _describe_space(self) -> str:
        n = self.num_tasks
        noun = "held-out task" if self._only is not None else "task"
        head = f"an unknown number of {noun}s" if n is None else f"{n} {noun}{'s' if n != 1 else ''}"
        notes = [f"{self._total} combinations"]
        if self._constraints:
            k = len(self._constraints)
            notes.append(f"{k} constraint{'s' if k != 1 else ''}")
        if self._only is None and self._holdout:
            notes.append(f"{len(self._holdout)} held out")

        def axis_text(a: _Axis) -> str:
            if isinstance(a.values, range):
                return f"{a.name} in {a.values!r}"
            shown = ", ".join(repr(v) for v in a.values[:8])
            more = f", ... ({a.size} values)" if a.size > 8 else ""
            return f"{a.name} in [{shown}{more}]"

        return f"{head} ({', '.join(notes)}): " + "; ".join(axis_text(a) for a in self._axes) + "."

    def _encoding_spec(self) -> Any:
        # constraints and held-out sets choose which tasks are valid or sampled, not how they are encoded
        return ("ConfigSpace", [(a.name, [stable_repr(v) for v in a.values]) for a in self._axes])

    def __repr__(self) -> str:
        axes = ", ".join(f"{a.name}:{a.size}" for a in self._axes)
        extra = f", constraints={len(self._constraints)}" if self._constraints else ""
        if self._only is not None:
            extra += f", only {len(self._only)} held-out tasks"
        elif self._holdout:
            extra += f", heldout={len(self._holdout)}"
        return f"ConfigSpace({{{axes}}}{extra})"
