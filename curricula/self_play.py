"""Self-play: the opponent is always the current learning policy.

The oldest co-player curriculum (Samuel, 1959; Tesauro, 1995, TD-Gammon; the "SP" baseline of the Syllabus
paper's LaserTag experiments, where SP "always plays against the current agent"). There is no distribution to
learn: :math:`P(\\text{opponent} = \\pi_t) = 1`, with :math:`\\pi_t` the newest policy.

Two modes, chosen by whether a store is given:

* **No store** (envs in the learner's process): every sample is :data:`~magister.opponents.CURRENT_AGENT`
  (``-1``), and ``get_opponent(-1)`` returns the very object last passed to :meth:`SelfPlay.update_agent`.
* **With an** :class:`~magister.opponents.OpponentStore` (envs in worker processes): ``update_agent`` stores a
  snapshot every ``checkpoint_interval`` calls (default 1: every call) and every sample is the *latest*
  stored id, so a worker loads exactly the policy the learner last published. Results are recorded against
  that concrete id, which keeps the win-rate metrics meaningful. ``get_opponent(-1)`` still returns the
  in-memory current agent.

>>> sp = SelfPlay()
>>> _ = sp.update_agent("policy-v1")
>>> sp.sample(3), sp.get_opponent(-1)
([-1, -1, -1], 'policy-v1')
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ..opponents import CURRENT_AGENT, OpponentStore
from .coplayer import OpponentCurriculum, OutcomeRule

logger = logging.getLogger(__name__)

__all__ = ["SelfPlay"]


class SelfPlay(OpponentCurriculum):
    """Always the current policy (see the module docstring for the two modes).

    Parameters
    ----------
    store:
        ``None`` for in-process play against the live agent, or an :class:`OpponentStore` through which
        worker processes load the latest snapshot.
    checkpoint_interval:
        With a store: snapshot on the first :meth:`update_agent` call and every ``checkpoint_interval``
        calls after it.
    outcome_rule, memory, snapshot_fn, make_agent, seed:
        As in :class:`~magister.curricula.coplayer.OpponentCurriculum` (win rates are tracked for metrics
        only).
    """

    def __init__(
        self,
        store: OpponentStore | None = None,
        *,
        checkpoint_interval: int = 1,
        outcome_rule: OutcomeRule | None = None,
        memory: int = 128,
        snapshot_fn: Callable[[Any], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            store, checkpoint_interval=checkpoint_interval, outcome_rule=outcome_rule, memory=memory,
            snapshot_fn=snapshot_fn, make_agent=make_agent,
            extra_ids=() if store is not None else (CURRENT_AGENT,), seed=seed,
        )

    def _current_id(self) -> int:
        if self.store is None:
            return CURRENT_AGENT
        latest = self.store.latest_id()
        if latest is None:
            raise RuntimeError("SelfPlay has no stored policy yet: call update_agent(agent) first")
        return latest

    def sample(self, k: int = 1) -> list[int]:
        """``k`` copies of the current opponent id (``-1`` without a store, else the latest stored id)."""
        self._check_k(k)
        self.num_sampled += int(k)
        return [self._current_id()] * int(k)

    def distribution(self) -> np.ndarray:
        """One-hot on the current id, over ``task_space.encoded_tasks`` (the ids in the store, ascending)."""
        ids = self._ids_or_raise()
        p = np.zeros(len(ids))
        p[ids.index(self._current_id())] = 1.0
        return p
