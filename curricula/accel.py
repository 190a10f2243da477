"""ACCEL: Robust PLR (PLR⊥) plus mutation of replayed tasks.

Paper: J. Parker-Holder, M. Jiang, M. Dennis, M. Samvelyan, J. Foerster, E. Grefenstette, T. Rocktäschel,
"Evolving Curricula with Regret-Based Environment Design", ICML 2022 (ACCEL). Settings from the ATLAS paper
("Beyond Fixed Tasks: Unsupervised Environment Design for Task-Level Pairs", Appendix E, Minigrid table).

The loop (one sample at a time, so it fits any asynchronous trainer):

1. **Decide** as PLR⊥ does (:class:`~magister.curricula.plr.RobustPLR`): with probability ``replay_prob``
   replay a buffered task (a *training* task, ``train=True``), else draw a new task from the space
   (*evaluation-only*, ``train=False``). All of PLR⊥'s equations hold: replay distribution
   ``P = (1 - rho) P_S + rho P_C`` with rank/power prioritisation at temperature ``beta`` and staleness.
2. **Mutate** each replayed task: draw ``num_edits ~ U{min_edits .. max_edits}`` and apply that many edits,
   ``child = edit(edit(... edit(parent)))``, each edit being ``task_space.mutate(encoded, rng)`` or a user
   ``mutate_fn(encoded, rng, feedback)``. With ``mutate_on="feedback"`` (default) the child is made when the
   replay's feedback arrives (its first ``update_on_episode`` or ``update_scores``) and ``feedback`` is that
   feedback as a dict (``{"episode_return", "length", "progress"}`` or ``{"score"}``) - the hook for
   hindsight edits; with ``mutate_on="sample"`` the child is made at once, with ``feedback=None``.
3. **Evaluate** the children: pending children are sent before anything else, evaluation-only.
4. **Score and insert** them like any PLR⊥ task: a child enters the buffer if there is room or if its score
   is strictly higher than the lowest buffered score.

**Provenance** is kept for every task: ``parent`` (encoded parent or ``None``), ``num_edits`` (edits from
the parent) and ``generation`` (0 for generated tasks, parent's + 1 for children); see
:meth:`ACCEL.provenance`.
:meth:`ACCEL.metrics` reports the buffer's mean generation and edits and its fraction of mutated tasks.

Defaults (ATLAS, ACCEL row): replay rate 0.9, ``num_edits ~ U{7, 10}``, MaxMC score, rank prioritisation,
``beta = 1.0``, ``rho = 0.1``; buffer 4000 here (ATLAS: 50 000 for 4096 parallel envs).

>>> from magister.task_spaces.base import TaskSpace
>>> class Bits(TaskSpace):
...     num_tasks = None
...     def sample(self): return tuple(int(b) for b in self.rng.integers(0, 2, 8))
...     def contains(self, t): return isinstance(t, tuple) and len(t) == 8
...     def encode(self, t): return t
...     def decode(self, e):
...         if not self.contains(tuple(e)): raise ValueError(e)
...         return tuple(e)
...     can_mutate = True
...     def mutate(self, e, rng):
...         i = int(rng.integers(8)); return tuple(b ^ (j == i) for j, b in enumerate(e))
>>> accel = ACCEL(Bits(seed=0), score="return", min_edits=1, max_edits=1, seed=0)
>>> first = accel.sample_tasks(1)[0]          # the buffer is empty: a new, evaluation-only task
>>> first.train
False
>>> accel.update_on_episode(1.0, 5, first.task, 1.0)
>>> accel.replay_prob = 1.0
>>> replay = accel.sample_tasks(1)[0]         # replayed (trained on)
>>> replay.train, replay.task == first.task
(True, True)
>>> accel.update_on_episode(1.0, 5, replay.task, 1.0)   # feedback -> the replay is mutated
>>> child = accel.sample_tasks(1)[0]
>>> prov = accel.provenance(child.task)
>>> child.train, prov["generation"], prov["parent"] == first.task, prov["num_edits"]
(False, 1, True, 1)
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from ._table import grow
from .base import TaskSample
from .plr import _EMPTY, RobustPLR
from .scoring import Segment

logger = logging.getLogger(__name__)

__all__ = ["ACCEL"]

#: ``mutate_fn(encoded, rng, feedback) -> encoded child`` (one edit).
MutateFn = Callable[[EncodedTask, np.random.Generator, "dict[str, Any] | None"], EncodedTask]


class ACCEL(RobustPLR):
    """ACCEL over any task space with ``mutate`` (or with a ``mutate_fn``).

    Args:
        task_space: the tasks; needs ``can_mutate`` unless ``mutate_fn`` is given.
        mutate_fn: optional ``f(encoded, rng, feedback) -> encoded`` performing one edit.
        min_edits: fewest edits per child: ``num_edits ~ U{min_edits .. max_edits}``.
        max_edits: most edits per child.
        mutate_on: ``"feedback"`` (child made when the replay's feedback arrives) or ``"sample"``.
        max_pending: bound on queued children (oldest dropped, with a log message, when exceeded).

    The other arguments are those of :class:`~magister.curricula.plr.RobustPLR`.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        mutate_fn: MutateFn | None = None,
        min_edits: int = 7,
        max_edits: int = 10,
        mutate_on: str = "feedback",
        max_pending: int = 10_000,
        score: str | Callable[[Segment], float] = "max_mc",
        buffer_size: int = 4000,
        replay_prob: float = 0.9,
        temperature: float = 1.0,
        staleness_coef: float = 0.1,
        prioritization: str = "rank",
        min_fill_ratio: float = 0.0,
        gamma: float = 0.99,
        gae_lambda: float = 0.9,
        window: int = 10,
        seed: int | None = None,
    ) -> None:
        if mutate_fn is None and not task_space.can_mutate:
            raise ValueError(
                f"ACCEL needs a task space with mutate() or a mutate_fn; {task_space!r} has neither"
            )
        if mutate_fn is not None and not callable(mutate_fn):
            raise TypeError(f"mutate_fn must be callable f(encoded, rng, feedback), got {mutate_fn!r}")
        for name, v in (("min_edits", min_edits), ("max_edits", max_edits), ("max_pending", max_pending)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise TypeError(f"{name} must be an int, got {v!r}")
        if not 0 <= min_edits <= max_edits:
            raise ValueError(f"need 0 <= min_edits <= max_edits, got {min_edits}, {max_edits}")
        if mutate_on not in ("feedback", "sample"):
            raise ValueError(f"mutate_on must be 'feedback' or 'sample', got {mutate_on!r}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        if replay_prob is None:
            raise ValueError("ACCEL needs a replay probability (the paper's is 0.9)")
        super().__init__(
            task_space, score=score, buffer_size=buffer_size, replay_prob=replay_prob,
            temperature=temperature, staleness_coef=staleness_coef, prioritization=prioritization,
            min_fill_ratio=min_fill_ratio, gamma=gamma, gae_lambda=gae_lambda, window=window, seed=seed,
        )
        self.mutate_fn = mutate_fn
        self.min_edits = int(min_edits)
        self.max_edits = int(max_edits)
        self.mutate_on = mutate_on
        self.max_pending = int(max_pending)
        # Provenance per slot: parent slot (-1 = none), edits from the parent, generation.
        self._parent = np.full(0, _EMPTY, dtype=np.int64)
        self._edits = np.zeros(0, dtype=np.int64)
        self._gen = np.zeros(0, dtype=np.int64)
        self._awaiting: dict[int, int] = {}  # replayed slot -> replays awaiting feedback
        self._children: deque[tuple[EncodedTask, int, int]] = deque()  # (child, parent slot, edits)
        self.num_mutations = 0
        self.num_children_sampled = 0

    # -- per-slot arrays ----------------------------------------------------------------------------
    def _ensure(self, size: int) -> None:
        super()._ensure(size)
        size = self._pos.shape[0]  # keep the provenance arrays as long as PLR's per-slot arrays
        if self._parent.shape[0] < size:
            self._parent = grow(self._parent, size, _EMPTY)
            self._edits = grow(self._edits, size, 0)
            self._gen = grow(self._gen, size, 0)

    # -- mutation -----------------------------------------------------------------------------------
    def _edit(self, encoded: EncodedTask, feedback: dict[str, Any] | None) -> EncodedTask:
        if self.mutate_fn is not None:
            return self.mutate_fn(encoded, self.rng, feedback)
        return self.task_space.mutate(encoded, self.rng)

    def _mutate(self, parent_slot: int, feedback: dict[str, Any] | None) -> None:
        n = int(self.rng.integers(self.min_edits, self.max_edits + 1))
        child = self._index.task(parent_slot)
        for _ in range(n):
            child = self._edit(child, feedback)
        try:
            self.task_space.check_encoded(child)
        except ValueError as exc:
            parent = self._index.task(parent_slot)
            raise ValueError(f"ACCEL: mutating {parent!r} gave an invalid task: {exc}") from exc
        if len(self._children) >= self.max_pending:
            self._children.popleft()
            logger.warning("ACCEL: more than %d children pending; dropping the oldest", self.max_pending)
        self._children.append((child, parent_slot, n))
        self.num_mutations += 1

    def _on_feedback(self, slot: int, feedback: dict[str, Any]) -> None:
        waiting = self._awaiting.get(slot, 0)
        if not waiting:
            return
        if waiting == 1:
            del self._awaiting[slot]
        else:
            self._awaiting[slot] = waiting - 1
        self._mutate(slot, feedback)

    # -- sampling -----------------------------------------------------------------------------------
    def _sample_samples(self, k: int) -> list[TaskSample]:
        self._check_k(k)
        out: list[TaskSample] = []
        n_child = min(k, len(self._children))
        if n_child:
            kids = [self._children.popleft() for _ in range(n_child)]
            slots = self._register([c[0] for c in kids])
            for (child, parent, edits), slot in zip(kids, slots.tolist()):
                if slot != parent and self._parent[slot] == _EMPTY and self._gen[slot] == 0:
                    self._parent[slot] = parent
                    self._edits[slot] = edits
                    self._gen[slot] = self._gen[parent] + 1
                out.append(TaskSample(child, False))
            self._clock += n_child
            self.num_sampled += n_child
            self.num_new += n_child
            self.num_children_sampled += n_child
        if n_child < k:
            rest = super()._sample_samples(k - n_child)
            for s in rest:
                if s.train:  # a replay: mutate it now or when its feedback arrives
                    slot = self._index.slot(s.task, add=False)
                    if self.mutate_on == "sample":
                        self._mutate(slot, None)
                    else:
                        self._awaiting[slot] = self._awaiting.get(slot, 0) + 1
            out.extend(rest)
        return out

    # -- feedback -----------------------------------------------------------------------------------
    def update_scores(
        self,
        tasks: Sequence[EncodedTask],
        scores: Sequence[float] | np.ndarray,
        max_returns: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        """As :meth:`PLR.update_scores`; also triggers the mutation of replays awaiting feedback."""
        super().update_scores(tasks, scores, max_returns)
        if self._awaiting:
            slots = self._index.slots(tasks, add=False)
            for slot, s in zip(slots.tolist(), np.asarray(scores, dtype=np.float64).tolist()):
                self._on_feedback(slot, {"score": s})

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """As :meth:`PLR.update_on_episode`; also triggers the mutation of a replay awaiting feedback."""
        super().update_on_episode(episode_return, length, task, progress, env_id)
        if self._awaiting:
            slot = self._index.slot(task, add=False)
            self._on_feedback(slot, {"episode_return": float(episode_return), "length": int(length),
                                     "progress": float(progress)})

    # -- introspection ------------------------------------------------------------------------------
    def provenance(self, task: EncodedTask) -> dict[str, Any]:
        """``{"parent": encoded parent or None, "num_edits": int, "generation": int}`` of a sampled task."""
        slot = int(self._known_slots([task])[0])
        parent = int(self._parent[slot])
        return {
            "parent": None if parent == _EMPTY else self._index.task(parent),
            "num_edits": int(self._edits[slot]),
            "generation": int(self._gen[slot]),
        }

    def distribution(self) -> np.ndarray:
        """As :meth:`PLR.distribution`, except that a pending child is the next sample with certainty."""
        if not self._children:
            return super().distribution()
        n = self.task_space.num_tasks
        if n is None:
            raise NotImplementedError("ACCEL over an unbounded space has no distribution")
        child = self._children[0][0]
        if self._index.indexed:
            where = int(child)
        else:
            key = task_key(child)
            where = next(i for i, t in enumerate(self.task_space.encoded_tasks) if task_key(t) == key)
        dist = np.zeros(int(n))
        dist[where] = 1.0
        return dist

    @property
    def num_pending(self) -> int:
        """Children waiting to be sent."""
        return len(self._children)

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({
            "accel/mutations": float(self.num_mutations),
            "accel/children_sampled": float(self.num_children_sampled),
            "accel/pending": float(len(self._children)),
        })
        m = self._n_buf
        if m:
            slots = self._buf_slot[:m]
            out["accel/buffer_mean_generation"] = float(self._gen[slots].mean())
            out["accel/buffer_mean_edits"] = float(self._edits[slots].mean())
            out["accel/buffer_mutated_fraction"] = float((self._gen[slots] > 0).mean())
        return out

    # -- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update({
            "parent": self._parent.copy(),
            "edits": self._edits.copy(),
            "gen": self._gen.copy(),
            "awaiting": dict(self._awaiting),
            "children": [list(c) for c in self._children],
            "accel_counters": [self.num_mutations, self.num_children_sampled],
        })
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._parent = np.array(state["parent"], dtype=np.int64)
        self._edits = np.array(state["edits"], dtype=np.int64)
        self._gen = np.array(state["gen"], dtype=np.int64)
        self._awaiting = {int(k): int(v) for k, v in state["awaiting"].items()}
        self._children = deque((c[0], int(c[1]), int(c[2])) for c in state["children"])
        self.num_mutations, self.num_children_sampled = (int(x) for x in state["accel_counters"])
