"""Covar-GMM: sample tasks where the return grows with time (Moulin-Frier et al. 2014; Portelas et al. 2019).

The Covar-GMM teacher of *Teacher algorithms for curriculum learning of Deep RL in continuously
parameterized environments* (Portelas, Colas, Hofmann & Oudeyer, CoRL 2019, Section 4), after
Moulin-Frier, Nguyen & Oudeyer (2014). Each episode on a task with parameter vector
:math:`\\tau \\in \\mathbb{R}^d` and signal :math:`r` (its return) is stored as the triplet
:math:`[\\tau, t, r]` with a relative time

.. math::

    t = \\frac{n \\bmod F}{F}

(:math:`n` the episode's index from 0, :math:`F` = ``fit_rate``). Every :math:`F` episodes a
full-covariance Gaussian mixture is fitted by EM (scikit-learn's ``GaussianMixture``) for each number of
components :math:`k` in ``potential_ks`` on the last :math:`F` triplets, and the one of lowest AIC
(:math:`2 p_k - 2 \\ln \\hat L_k`) is kept. A component whose return rises with time is one where the
learner progresses; its *progress* is the covariance of time and return in its covariance matrix,

.. math::

    \\mathrm{LP}_i = \\max\\bigl(0, \\Sigma_i[t, r]\\bigr)

(with ``absolute=True``, :math:`|\\Sigma_i[t, r]|`, which also follows a return that falls: forgetting).

A task is drawn uniformly from the bounds with probability ``random_task_ratio`` (and always during the
first ``fit_rate`` episodes, the bootstrap); otherwise component :math:`i` is chosen with probability
:math:`\\mathrm{LP}_i / \\sum_j \\mathrm{LP}_j` (uniform when all are 0), :math:`[\\tau, t, r]` is drawn from
:math:`\\mathcal N(\\mu_i, \\Sigma_i)`, :math:`(t, r)` are dropped and :math:`\\tau` is clipped to the bounds
(config axes snap to their nearest value, see :class:`~magister.curricula._continuous.ParamBox`).

Defaults are the authors' code (flowersteam/teachDeepRL), as for ALP-GMM: ``fit_rate=250``,
``potential_ks=2..10``, ``random_task_ratio=0.2``. TeachMyAgent's benchmark (Romac et al., ICML 2021)
uses ``fit_rate=150``, ``potential_ks=2..14``, ``random_task_ratio=0.1``. The paper's teacher learns from
the episode's return (``signal="return"``; the authors' code rescales returns from [-150, 350] to [0, 1]),
or pass ``signal="progress"`` (success in [0, 1]).

**Refits off the serving thread.** As in :class:`~magister.curricula.alp_gmm.ALPGMM`: with
``background=True`` (default) fits run on a snapshot in a worker thread and the new mixture is swapped in
by the next call after it finishes; with ``background=False`` they run inside the update that triggers
them. Each fit's ``random_state`` comes from the curriculum's seed and the fit's number, so a seeded
``background=False`` run repeats exactly. Memory and per-episode work are :math:`O(F)` and :math:`O(1)`.

>>> from magister.task_spaces import Box
>>> teacher = CovarGMM(Box(0.0, 1.0, shape=(2,)), fit_rate=20, potential_ks=(1, 2), background=False, seed=0)
>>> for n in range(20):
...     (task,) = teacher.sample(1)
...     teacher.update_on_episode(float(task[0] < 0.5) * n / 20, 1, task, 0.0)
>>> teacher.mixture is not None, teacher.metrics()["covargmm/fits"]
(True, 1.0)
>>> all(0.0 <= x <= 1.0 for task in teacher.sample(100) for x in task)
True
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from functools import partial
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._continuous import (
    Mixture,
    ParamBox,
    Refit,
    check_int,
    check_ks,
    check_ratio,
    draw,
    feedback,
    fit_by_aic,
    fit_seed,
    require,
)
from .base import Curriculum

logger = logging.getLogger(__name__)

__all__ = ["CovarGMM"]

_SIGNALS = ("return", "progress")


class CovarGMM(Curriculum):
    """Time-return covariance Gaussian mixture teacher (see the module docstring).

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes all hold numbers, or a ``Product`` of those.
    fit_rate : int
        Episodes between two fits, the number of ``[task, t, return]`` triplets each fit sees, the period
        of the relative time ``t`` and the length of the uniform bootstrap (TDRL: 250; TeachMyAgent: 150).
    potential_ks : iterable of int
        The numbers of mixture components tried at each fit (TDRL: 2..10; TeachMyAgent: 2..14).
    random_task_ratio : float
        The share of tasks drawn uniformly once a mixture exists (TDRL: 0.2; TeachMyAgent: 0.1).
    absolute : bool
        A component's progress is ``|cov(t, r)|`` instead of ``max(0, cov(t, r))``.
    signal : {"return", "progress"}
        Which field of the episode the teacher learns from (the paper: the return).
    background : bool
        Fit in a worker thread (True) or inside the update that triggers the fit (False: exactly
        reproducible for a given seed).
    seed : int, optional
        Seeds the sampling generator and every fit's ``random_state``.

    Raises
    ------
    TypeError
        For a task space the teacher cannot use (the message names it).
    ValueError
        For zero-width bounds, or a bad hyperparameter.
    ImportError
        Without scikit-learn (the message names the ``teachers`` extra).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        fit_rate: int = 250,
        potential_ks: Iterable[int] = range(2, 11),
        random_task_ratio: float = 0.2,
        absolute: bool = False,
        signal: str = "return",
        background: bool = True,
        seed: int | None = None,
    ) -> None:
        require("CovarGMM", "sklearn")
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "CovarGMM")
        self.fit_rate = check_int("fit_rate", fit_rate, 1)
        self.potential_ks = check_ks(potential_ks, self.fit_rate, "CovarGMM")
        self.random_task_ratio = check_ratio(random_task_ratio)
        self.absolute = bool(absolute)
        if signal not in _SIGNALS:
            raise ValueError(f"signal must be one of {_SIGNALS}, got {signal!r}")
        self.signal = signal
        self.mixture: Mixture | None = None
        self.fits = 0  # mixtures swapped in so far
        self._fits_started = 0
        self._window: deque[np.ndarray] = deque(maxlen=self.fit_rate)  # the last [task, t, r] triplets
        self._refit = Refit(partial(fit_by_aic, ks=self.potential_ks), "CovarGMM", background=background)

    # -- sampling -----------------------------------------------------------------------------------
    def progress(self) -> np.ndarray:
        """Each component's progress, ``max(0, cov(t, r))`` (``|cov(t, r)|`` with ``absolute``); empty
        before the first fit."""
        if self.mixture is None:
            return np.zeros(0)
        d = self.params.dims
        cov = self.mixture.covariances[:, d, d + 1]
        return np.abs(cov) if self.absolute else np.maximum(cov, 0.0)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks: uniform with probability ``random_task_ratio`` (always during the bootstrap),
        otherwise from a mixture component chosen in proportion to its progress."""
        self._check_k(k)
        self._swap()
        vectors = draw(self.rng, self.params, self.mixture, self.progress(), self.random_task_ratio, int(k))
        self.num_sampled += int(k)
        return [self.params.task(x, self.rng) for x in vectors]

    def _swap(self, wait: bool = False) -> None:
        """Use the newest finished mixture, if any (with ``wait``: after any fit in flight finishes)."""
        mixture = self._refit.wait() if wait else self._refit.ready()
        if mixture is not None:
            self.mixture = mixture
            self.fits += 1
            logger.info("CovarGMM: fit %d, %d components (AIC %.1f), component progress %s", self.fits,
                        mixture.components, mixture.aic, np.round(self.progress(), 4).tolist())

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Store ``[task, t, signal]``; every ``fit_rate`` episodes, fit a new mixture."""
        t = (self.num_episodes % self.fit_rate) / self.fit_rate
        x, r = feedback(self, task, episode_return, length, progress, self.signal)
        self._window.append(np.concatenate([x, [t, r]]))
        if self.num_episodes % self.fit_rate == 0:
            snapshot = np.array(self._window)
            self._refit.start((snapshot, fit_seed(self._stream_root, self._fits_started)))
            self._fits_started += 1
        self._swap()

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        lp = self.progress()
        out["covargmm/fits"] = float(self.fits)
        out["covargmm/components"] = float(lp.size)
        out["covargmm/max_progress"] = float(lp.max()) if lp.size else 0.0
        out["covargmm/mean_signal"] = float(np.mean([v[-1] for v in self._window])) if self._window else 0.0
        return out

    def state_dict(self) -> dict[str, Any]:
        """The counters, the generator, the fit window and the mixture's arrays (a fit in flight is waited
        for and swapped in first, so the checkpoint is complete)."""
        self._swap(wait=True)
        state = super().state_dict()
        state.update(
            window=np.array(self._window).reshape(len(self._window), self.params.dims + 2),
            mixture=self.mixture.state_dict() if self.mixture is not None else None,
            fits=self.fits,
            fits_started=self._fits_started,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        window = np.asarray(state["window"], dtype=np.float64)
        if window.size and window.shape[1] != self.params.dims + 2:
            raise ValueError(
                f"state_dict holds {window.shape[1] - 2}-dimensional tasks, this space has {self.params.dims}"
            )
        super().load_state_dict(state)
        self._refit.wait()  # a fit of the state being replaced is dropped
        self._window = deque(list(window), maxlen=self.fit_rate)
        self.mixture = Mixture.from_state(state["mixture"]) if state["mixture"] is not None else None
        self.fits = int(state["fits"])
        self._fits_started = int(state["fits_started"])

    def __repr__(self) -> str:
        return (f"CovarGMM({self.task_space!r}, fit_rate={self.fit_rate}, "
                f"components={self.mixture.components if self.mixture is not None else 0})")
