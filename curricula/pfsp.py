"""Prioritized Fictitious Self-Play (PFSP): past policies weighted by how hard they are for the learner.

Vinyals et al. (2019), "Grandmaster level in StarCraft II using multi-agent reinforcement learning"
(AlphaStar, Methods, "Prioritized fictitious self-play"). For the learner :math:`A` and the stored
opponents :math:`\\mathcal{C}`, opponent :math:`B` is drawn with probability

.. math:: P(B) = \\frac{f(x_B) + \\varepsilon}{\\sum_{C \\in \\mathcal{C}} (f(x_C) + \\varepsilon)},
   \\qquad x_B = \\widehat{P}[A \\text{ beats } B],

with the weighting chosen by ``weighting``:

* ``"hard"`` (default): :math:`f_{hard}(x) = (1 - x)^p`, focusing on opponents the learner loses to;
  the exponent :math:`p` is ``exponent`` (default 2, the Syllabus paper's "f_hard" setting, D.5);
* ``"var"``: :math:`f_{var}(x) = x (1 - x)`, focusing on opponents of about the learner's level;
* or any callable mapping an array of win rates to an array of non-negative weights.

The smoothing constant :math:`\\varepsilon` (``smoothing``, default 0.01, Syllabus D.5) is **added to every
weight before normalising**, exactly as written above, so an opponent the learner always beats
(:math:`x = 1`, :math:`f_{hard} = 0`) keeps probability
:math:`\\varepsilon / \\sum_C (f(x_C) + \\varepsilon)`.

The win rate :math:`x_B` is the mean score (win 1, draw 0.5, loss 0; see
:class:`~magister.curricula.coplayer.OutcomeRule`) over the last ``memory`` results against :math:`B`
(default 128, Syllabus D.5's "win rate episodic memory"); an opponent without results has :math:`x_B =`
``initial_winrate`` (default 0.5: a fresh snapshot of the learner is, by construction, its equal).
Snapshots are added as in FSP, every ``checkpoint_interval`` (default 800) :meth:`PFSP.update_agent` calls.

Worked example: win rates (0.75, 0.25, 1.0) with ``"hard"``, p = 2, ε = 0.01 give weights
(0.0725, 0.5725, 0.01), so P = (0.0725, 0.5725, 0.01) / 0.655.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ..opponents import OpponentStore
from .base import check_finite
from .coplayer import OpponentCurriculum, OutcomeRule

logger = logging.getLogger(__name__)

__all__ = ["PFSP", "f_hard", "f_var"]


def f_hard(x: np.ndarray, exponent: float = 2.0) -> np.ndarray:
    """AlphaStar's :math:`f_{hard}(x) = (1 - x)^p`.

    >>> f_hard(np.array([0.0, 0.5, 1.0]))
    array([1.  , 0.25, 0.  ])
    """
    return (1.0 - np.asarray(x, dtype=np.float64)) ** exponent


def f_var(x: np.ndarray) -> np.ndarray:
    """AlphaStar's :math:`f_{var}(x) = x (1 - x)`.

    >>> f_var(np.array([0.0, 0.5, 1.0]))
    array([0.  , 0.25, 0.  ])
    """
    x = np.asarray(x, dtype=np.float64)
    return x * (1.0 - x)


class PFSP(OpponentCurriculum):
    """Opponents sampled in proportion to ``f(win rate) + smoothing``.

    Parameters
    ----------
    store:
        Where snapshots are kept (bounded by its own limits).
    checkpoint_interval:
        Snapshot on the first :meth:`update_agent` call and every ``checkpoint_interval`` calls after it
        (default 800).
    weighting:
        ``"hard"``, ``"var"`` or a callable ``f(win_rates: ndarray) -> ndarray`` of non-negative weights.
    exponent:
        :math:`p` of ``"hard"`` (default 2).
    smoothing:
        :math:`\\varepsilon` added to every weight (default 0.01); must be >= 0.
    memory:
        Results remembered per opponent (default 128).
    initial_winrate:
        Win rate assumed before any result against an opponent (default 0.5).
    outcome_rule, snapshot_fn, make_agent, seed:
        As in :class:`~magister.curricula.coplayer.OpponentCurriculum`.
    """

    def __init__(
        self,
        store: OpponentStore,
        *,
        checkpoint_interval: int = 800,
        weighting: str | Callable[[np.ndarray], np.ndarray] = "hard",
        exponent: float = 2.0,
        smoothing: float = 0.01,
        memory: int = 128,
        initial_winrate: float = 0.5,
        outcome_rule: OutcomeRule | None = None,
        snapshot_fn: Callable[[Any], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(store, OpponentStore):
            raise TypeError(f"PFSP needs an OpponentStore, got {type(store).__name__}")
        if not (callable(weighting) or weighting in ("hard", "var")):
            raise ValueError(f"weighting must be 'hard', 'var' or a callable, got {weighting!r}")
        exponent = check_finite("exponent", exponent)
        if exponent <= 0:
            raise ValueError(f"exponent must be > 0, got {exponent!r}")
        smoothing = check_finite("smoothing", smoothing)
        if smoothing < 0:
            raise ValueError(f"smoothing must be >= 0, got {smoothing!r}")
        super().__init__(
            store, checkpoint_interval=checkpoint_interval, outcome_rule=outcome_rule, memory=memory,
            initial_winrate=initial_winrate, snapshot_fn=snapshot_fn, make_agent=make_agent, seed=seed,
        )
        self.weighting = weighting
        self.exponent = exponent
        self.smoothing = smoothing
        self._cache_key: tuple[Any, ...] | None = None
        self._cache: tuple[list[int], np.ndarray] | None = None

    def weights(self, winrates: np.ndarray) -> np.ndarray:
        """Unnormalised weights :math:`f(x) + \\varepsilon` for an array of win rates."""
        x = np.asarray(winrates, dtype=np.float64)
        if self.weighting == "hard":
            f = f_hard(x, self.exponent)
        elif self.weighting == "var":
            f = f_var(x)
        else:
            f = np.asarray(self.weighting(x), dtype=np.float64)
            if f.shape != x.shape or not np.all(np.isfinite(f)) or np.any(f < 0):
                raise ValueError(f"weighting callable must return finite non-negative weights of shape "
                                 f"{x.shape}, got {f!r}")
        return f + self.smoothing

    def _ids_and_probs(self) -> tuple[list[int], np.ndarray]:
        ids = self._ids_or_raise()
        key = (tuple(ids), self._version)
        if self._cache is not None and key == self._cache_key:
            return self._cache
        w = self.weights(self.winrates(ids))
        total = w.sum()
        if not total > 0:  # only possible with smoothing 0 and all weights 0
            logger.warning("PFSP: all opponent weights are 0 (smoothing=0); sampling uniformly")
            p = np.full(len(ids), 1.0 / len(ids))
        else:
            p = w / total
        self._cache_key, self._cache = key, (ids, p)
        return ids, p

    def distribution(self) -> np.ndarray:
        """:math:`P(B)` for each stored id (ascending, as ``task_space.encoded_tasks``)."""
        return self._ids_and_probs()[1].copy()

    def sample(self, k: int = 1) -> list[int]:
        """``k`` opponent ids drawn from :meth:`distribution` (one vectorised draw)."""
        self._check_k(k)
        ids, p = self._ids_and_probs()
        self.num_sampled += int(k)
        return [ids[i] for i in self.rng.choice(len(ids), size=int(k), p=p)]
