"""Fictitious Self-Play (FSP): opponents drawn uniformly from the stored past policies.

Heinrich, Lanctot and Silver (2015), "Fictitious Self-Play in Extensive-Form Games": fictitious play
best-responds to the *average* of the opponent's past strategies, which, for a population of stored policies,
is playing each past policy equally often. With stored snapshots :math:`\\{\\pi_1, \\dots, \\pi_n\\}`,

.. math:: P(\\text{opponent} = \\pi_i) = 1 / n.

Policies are added on the first :meth:`FSP.update_agent` call and then every ``checkpoint_interval`` calls;
the default, 800, is the agent checkpoint interval of the Syllabus paper's LaserTag experiments (its
hyperparameter table, Supplementary D.5). Which past policies are kept is the store's business
(``max_count``, ``max_bytes``, ``keep_every``); FSP is uniform over whatever the store holds now.

>>> import json, tempfile
>>> from magister.opponents import OpponentStore
>>> d = tempfile.mkdtemp()
>>> store = OpponentStore(d, max_count=None, load_fn=json.load,
...                       save_fn=lambda o, f: f.write(json.dumps(o).encode()))
>>> fsp = FSP(store, checkpoint_interval=2, seed=0)
>>> [fsp.update_agent({"step": t}) for t in range(5)]
[0, None, 1, None, 2]
>>> fsp.distribution()
array([0.33333333, 0.33333333, 0.33333333])
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ..opponents import OpponentStore
from .coplayer import OpponentCurriculum, OutcomeRule

logger = logging.getLogger(__name__)

__all__ = ["FSP"]


class FSP(OpponentCurriculum):
    """Uniform sampling over the opponent store.

    Parameters
    ----------
    store:
        Where snapshots are kept (bounded by its own limits).
    checkpoint_interval:
        Snapshot on the first :meth:`update_agent` call and every ``checkpoint_interval`` calls after it
        (default 800, Syllabus D.5).
    outcome_rule, memory, initial_winrate, snapshot_fn, make_agent, seed:
        As in :class:`~magister.curricula.coplayer.OpponentCurriculum`; win rates are tracked for metrics
        only.
    """

    def __init__(
        self,
        store: OpponentStore,
        *,
        checkpoint_interval: int = 800,
        outcome_rule: OutcomeRule | None = None,
        memory: int = 128,
        initial_winrate: float = 0.5,
        snapshot_fn: Callable[[Any], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(store, OpponentStore):
            raise TypeError(f"FSP needs an OpponentStore, got {type(store).__name__}")
        super().__init__(
            store, checkpoint_interval=checkpoint_interval, outcome_rule=outcome_rule, memory=memory,
            initial_winrate=initial_winrate, snapshot_fn=snapshot_fn, make_agent=make_agent, seed=seed,
        )

    def sample(self, k: int = 1) -> list[int]:
        """``k`` opponent ids, each uniform over the store (one vectorised draw)."""
        self._check_k(k)
        ids = self._ids_or_raise()
        self.num_sampled += int(k)
        return [ids[i] for i in self.rng.integers(len(ids), size=int(k))]

    def distribution(self) -> np.ndarray:
        """``1 / n`` for each of the ``n`` stored ids (ascending, as ``task_space.encoded_tasks``)."""
        n = len(self._ids_or_raise())
        return np.full(n, 1.0 / n)
