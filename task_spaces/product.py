"""The Cartesian product of task spaces, as a tuple or a dict of components.

:class:`Product` combines spaces (level x task, world x game x co-player, env id x seed ...). A decoded
task is a tuple (or a dict, for named components) of the components' decoded tasks.

**Encoding.** When every component is *indexed* (``Discrete``, ``MultiDiscrete``, fully discrete products),
the product is indexed too: its encoded task is ONE flat int, the row-major mixed-radix index over the
components' ``num_tasks`` (first component most significant)

    ``flat = ((e_0 * n_1 + e_1) * n_2 + e_2) * ...``

so tabular curricula treat the product as one table. Otherwise (a ``Box``, ``ConfigSpace`` or ``OpenEnded``
component, or more than ``2**63 - 1`` tasks) the encoded task is the tuple (or dict) of the components'
encoded tasks. ``num_tasks`` is the product of the components' counts, ``None`` if any is unbounded.

>>> from magister.task_spaces.discrete import Discrete
>>> space = Product({"env": Discrete(tasks=["maze", "keys"]), "seed": Discrete(100)})
>>> space.num_tasks, space.indexed
(200, True)
>>> space.encode({"env": "keys", "seed": 7})
107
>>> space.decode(107)
{'env': 'keys', 'seed': 7}
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .base import EncodedTask, TaskSpace, check_k
from .discrete import Discrete, is_int, split_indexed
from .multi_discrete import ravel, unravel

logger = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1
_MAX_LIST = 10_000_000


class Product(TaskSpace[Any]):
    """Cartesian product of task spaces given as a tuple/list or a dict (``str`` keys) of spaces.

    Args:
        spaces: the component spaces. Sampling uses the product's own generator, not the components'.
        seed: seed of the product's generator.

    :meth:`mutate` mutates one component, chosen uniformly among those that support mutation.
    :meth:`split` is available when the product is indexed (partitions the flat index).
    """

    def __init__(
        self, spaces: Sequence[TaskSpace] | Mapping[str, TaskSpace], *, seed: int | None = None
    ) -> None:
        super().__init__(seed)
        if isinstance(spaces, Mapping):
            keys = list(spaces.keys())
            bad = [k for k in keys if not isinstance(k, str)]
            if bad:
                raise TypeError(f"Product: dict keys must be str, got {bad!r}")
            self._keys: list[str] | None = keys
            comps = list(spaces.values())
        elif isinstance(spaces, Sequence) and not isinstance(spaces, (str, bytes)):
            self._keys = None
            comps = list(spaces)
        else:
            raise TypeError(f"Product: spaces must be a tuple/list or a dict of TaskSpaces, got {spaces!r}")
        if not comps:
            raise ValueError("Product: needs at least one component space")
        for c in comps:
            if not isinstance(c, TaskSpace):
                raise TypeError(f"Product: every component must be a TaskSpace, got {c!r}")
        self._spaces: list[TaskSpace] = comps
        counts = [c.num_tasks for c in comps]
        if any(n is None for n in counts):
            self._n: int | None = None
        else:
            n = 1
            for c in counts:
                n *= int(c)  # type: ignore[arg-type]
            self._n = n
        self._radices = tuple(int(c) for c in counts) if self._n is not None else ()
        self._flat = bool(all(c.indexed for c in comps) and self._n is not None and self._n <= _INT64_MAX)

    # -- structure ---------------------------------------------------------------------------------
    @property
    def spaces(self) -> tuple[TaskSpace, ...] | dict[str, TaskSpace]:
        """The components, as given (a tuple, or a dict for named components)."""
        if self._keys is None:
            return tuple(self._spaces)
        return dict(zip(self._keys, self._spaces))

    @property
    def num_tasks(self) -> int | None:
        return self._n

    @property
    def indexed(self) -> bool:
        return self._flat

    def _parts(self, value: Any) -> list[Any] | None:
        """The per-component parts of a decoded/encoded task (tuple/list or dict form), or None."""
        if self._keys is None:
            if isinstance(value, (tuple, list)) and len(value) == len(self._spaces):
                return list(value)
            return None
        if isinstance(value, Mapping) and len(value) == len(self._keys) and set(value) == set(self._keys):
            return [value[k] for k in self._keys]
        return None

    def _assemble(self, parts: list[Any]) -> Any:
        if self._keys is None:
            return tuple(parts)
        return dict(zip(self._keys, parts))

    # -- the contract ------------------------------------------------------------------------------
    def contains(self, task: Any) -> bool:
        parts = self._parts(task)
        return parts is not None and all(s.contains(p) for s, p in zip(self._spaces, parts))

    def encode(self, task: Any) -> EncodedTask:
        parts = self._parts(task)
        if parts is None:
            form = f"a {len(self._spaces)}-tuple" if self._keys is None else f"a dict with keys {self._keys}"
            raise ValueError(f"task {task!r} is not in {self!r} (expected {form})")
        try:
            codes = [s.encode(p) for s, p in zip(self._spaces, parts)]
        except ValueError as exc:
            raise ValueError(f"task {task!r} is not in {self!r}: {exc}") from exc
        if self._flat:
            return ravel(codes, self._radices)
        return self._assemble(codes)

    def decode(self, encoded: EncodedTask) -> Any:
        if self._flat:
            if not is_int(encoded) or not 0 <= encoded < self._n:  # type: ignore[operator]
                raise ValueError(f"task {encoded!r} is not an encoded task of {self!r} "
                                 f"(expected an int in [0, {self._n}))")
            codes: list[Any] = list(unravel(int(encoded), self._radices))
        else:
            parts = self._parts(encoded)
            if parts is None:
                raise ValueError(f"task {encoded!r} is not an encoded task of {self!r}")
            codes = parts
        try:
            return self._assemble([s.decode(c) for s, c in zip(self._spaces, codes)])
        except ValueError as exc:
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r}: {exc}") from exc

    def contains_encoded(self, encoded: EncodedTask) -> bool:
        if self._flat:
            return is_int(encoded) and 0 <= encoded < self._n  # type: ignore[operator]
        parts = self._parts(encoded)
        return parts is not None and all(s.contains_encoded(c) for s, c in zip(self._spaces, parts))

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        """``k`` encoded tasks: one ``rng.integers`` call if indexed, else one vectorised call per component.

        Components are sampled independently with the product's generator (or ``rng``).
        """
        check_k(k)
        gen = self._rng if rng is None else rng
        if self._flat:
            return gen.integers(0, self._n, size=int(k)).tolist()
        columns = [s.sample_encoded(int(k), gen) for s in self._spaces]
        return [self._assemble(list(row)) for row in zip(*columns)]

    def sample(self) -> Any:
        return self.decode(self.sample_encoded(1)[0])

    @property
    def tasks(self) -> list[Any]:
        if self._n is None:
            raise TypeError(f"{self!r} is not enumerable (a component is unbounded)")
        if self._n > _MAX_LIST:
            raise TypeError(f"{self!r} has {self._n} tasks, too many to list")
        return [self._assemble(list(combo)) for combo in itertools.product(*(s.tasks for s in self._spaces))]

    @property
    def encoded_tasks(self) -> list[EncodedTask]:
        if self._flat and self._n is not None and self._n <= _MAX_LIST:
            return list(range(self._n))
        return [self.encode(t) for t in self.tasks]

    def split(self, holdout: float | int | Sequence[Any], seed: int | None = 0) -> tuple[Discrete, Discrete]:
        """Partition an indexed product into ``(train, held_out)`` views over its flat index.

        See :func:`~magister.task_spaces.discrete.split_indexed`: the views decode to this product's
        decoded tasks, are re-indexed ``0 .. m - 1`` and map back with ``parent_index``.
        """
        if not self._flat:
            raise NotImplementedError(f"split() needs an indexed (fully discrete) product; {self!r} is not")
        return split_indexed(self, holdout, seed)

    @property
    def can_mutate(self) -> bool:
        return any(s.can_mutate for s in self._spaces)

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> EncodedTask:
        """Mutate ONE component, chosen uniformly among those that support mutation; keep the rest."""
        movable = [i for i, s in enumerate(self._spaces) if s.can_mutate]
        if not movable:
            raise NotImplementedError(f"no component of {self!r} supports mutate()")
        self.decode(encoded)  # validates
        if self._flat:
            codes: list[Any] = list(unravel(int(encoded), self._radices))
        else:
            codes = self._parts(encoded)  # type: ignore[assignment]
        i = movable[int(rng.integers(len(movable)))]
        codes[i] = self._spaces[i].mutate(codes[i], rng)
        if self._flat:
            return ravel(codes, self._radices)
        return self._assemble(codes)

    def describe(self, task: Any) -> str:
        parts = self._parts(task)
        if parts is None:
            raise ValueError(f"task {task!r} is not in {self!r}")
        texts = [s.describe(p) for s, p in zip(self._spaces, parts)]
        if self._keys is None:
            return "; ".join(texts)
        return "; ".join(f"{k}: {t}" for k, t in zip(self._keys, texts))

    def _encoding_spec(self) -> Any:
        keys = None if self._keys is None else list(self._keys)
        return ("Product", keys, [s._encoding_spec() for s in self._spaces])

    def __repr__(self) -> str:
        if self._keys is None:
            inner = ", ".join(repr(s) for s in self._spaces)
            return f"Product(({inner}{',' if len(self._spaces) == 1 else ''}))"
        inner = ", ".join(f"{k!r}: {s!r}" for k, s in zip(self._keys, self._spaces))
        return f"Product({{{inner}}})"
