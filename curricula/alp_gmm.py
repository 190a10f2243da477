"""ALP-GMM: sample tasks where the absolute learning progress is high (Portelas et al., CoRL 2019).

*Teacher algorithms for curriculum learning of Deep RL in continuously parameterized environments*
(Portelas, Colas, Hofmann & Oudeyer, CoRL 2019), Section 4. The teacher keeps every task it has seen,
as its parameter vector :math:`\\tau \\in \\mathbb{R}^d`, with the episode's signal :math:`r` (its return).
When an episode on :math:`\\tau_{new}` ends with :math:`r_{new}`, its *absolute learning progress* is the
change of the signal since the nearest earlier task (Euclidean, in the raw parameter space, over the whole
history),

.. math::

    j^* = \\arg\\min_{j < new} \\lVert \\tau_j - \\tau_{new} \\rVert_2, \\qquad
    \\mathrm{ALP}_{new} = | r_{new} - r_{j^*} |,

and 0 while at most 5 pairs are stored. An exact repeat of an earlier task is compared with its most
recent play.

Every ``fit_rate`` episodes, a full-covariance Gaussian mixture is fitted by EM (scikit-learn's
``GaussianMixture``) for every number of components :math:`k` in ``potential_ks`` on the last
``fit_rate`` vectors :math:`[\\tau_j, \\mathrm{ALP}_j] \\in \\mathbb{R}^{d+1}`, and the one of lowest
Akaike information criterion is kept,

.. math::

    \\mathrm{AIC}_k = 2 p_k - 2 \\ln \\hat L_k .

A task is drawn uniformly from the bounds with probability ``random_task_ratio`` (and always during the
first ``fit_rate`` episodes, the bootstrap); otherwise component :math:`i` is chosen with probability
proportional to the ALP coordinate of its mean (not the mixture weight),

.. math::

    P(i) = \\frac{\\mu_i^{ALP}}{\\sum_j \\mu_j^{ALP}} \\quad (\\text{uniform when all are } 0), \\qquad
    [\\tau, a] \\sim \\mathcal N(\\mu_i, \\Sigma_i),

the ALP coordinate :math:`a` is dropped and :math:`\\tau` is clipped to the bounds (config axes snap to
their nearest value, see :class:`~magister.curricula._continuous.ParamBox`).

Defaults are the authors' code (flowersteam/teachDeepRL): ``fit_rate=250``, ``potential_ks=2..10``,
``random_task_ratio=0.2``. TeachMyAgent's benchmark (Romac et al., ICML 2021) uses ``fit_rate=150``,
``potential_ks=2..9``, ``random_task_ratio=0.05``. The paper's teacher learns from the episode's return
(``signal="return"``); the authors' code rescales returns from [-150, 350] to [0, 1] before the teacher
sees them, so feed returns on a comparable scale or pass ``signal="progress"`` (success in [0, 1]).

**Refits off the serving thread.** A fit over nine values of :math:`k` takes far longer than a task
request. With ``background=True`` (default) it runs on a snapshot in a worker thread
(:class:`~magister.curricula._continuous.Refit`) while :meth:`ALPGMM.sample` keeps drawing from the
current mixture; the new one is swapped in by the next call after it finishes. Each fit's
``random_state`` comes from the curriculum's seed and the fit's number, so with ``background=False``
(fits run inside the update that triggers them) a seeded run repeats exactly.

**The nearest earlier task at 10^5 episodes.** A scipy ``cKDTree`` indexes the first tasks of the history;
the tasks played since its last build (the tail) are searched by brute force, and the tree is rebuilt over
the whole history once the tail holds more than :math:`\\max(64, 4\\sqrt{n})` tasks (:math:`n` the tasks
in the tree). A doubling schedule (rebuild when the history doubles) would leave a tail of up to
:math:`n/2` tasks to scan on every episode, :math:`O(n)`; rebuilding at a tail of :math:`\\sim\\sqrt n`
balances the scan (:math:`O(\\sqrt n)`) against the rebuild (:math:`O(n \\log n)` every :math:`\\sqrt n`
episodes, :math:`O(\\sqrt n \\log n)` amortised). A rebuild runs inside the update that triggers it.

>>> from magister.task_spaces import Box
>>> teacher = ALPGMM(Box(0.0, 1.0, shape=(2,)), fit_rate=20, potential_ks=(1, 2), background=False, seed=0)
>>> for n in range(20):
...     (task,) = teacher.sample(1)
...     teacher.update_on_episode(float(task[0] < 0.5) * n / 20, 1, task, 0.0)
>>> teacher.mixture is not None, teacher.metrics()["alpgmm/fits"]
(True, 1.0)
>>> all(0.0 <= x <= 1.0 for task in teacher.sample(100) for x in task)
True
"""

from __future__ import annotations

import logging
import math
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

__all__ = ["ALPGMM"]

_SIGNALS = ("return", "progress")
#: ALP is 0 until more than this many (task, signal) pairs are stored (the authors' code).
_MIN_HISTORY = 5
#: The brute-force tail is never rebuilt into the tree below this length.
_MIN_TAIL = 64


class _History:
    """Every (task, signal) pair so far, and the nearest earlier task to a new one.

    A ``cKDTree`` over ``tasks[:indexed]``, a brute-force scan of ``tasks[indexed:size]``, a rebuild when
    the tail outgrows ``max(_MIN_TAIL, 4 sqrt(indexed))`` (see the module docstring).
    """

    def __init__(self, dims: int) -> None:
        self.tasks = np.empty((1024, dims))
        self.signals = np.empty(1024)
        self.size = 0
        self.indexed = 0
        self.tree: Any = None

    def nearest(self, x: np.ndarray) -> int:
        """The index of the stored task nearest to ``x``; of equally near ones in the tail, and of exact
        repeats in the tree, the most recent. Needs at least one stored task."""
        best, best_dist = -1, math.inf
        if self.tree is not None:
            dist, i = self.tree.query(x)
            if dist == 0.0:
                i = max(self.tree.query_ball_point(x, 0.0), default=i)
            best, best_dist = int(i), float(dist)
        if self.size > self.indexed:
            dists = np.sqrt(((self.tasks[self.indexed:self.size] - x) ** 2).sum(axis=1))
            j = dists.size - 1 - int(np.argmin(dists[::-1]))
            if dists[j] <= best_dist:
                best = self.indexed + j
        return best

    def add(self, x: np.ndarray, signal: float) -> None:
        if self.size == self.signals.size:
            self.tasks = np.concatenate([self.tasks, np.empty_like(self.tasks)])
            self.signals = np.concatenate([self.signals, np.empty_like(self.signals)])
        self.tasks[self.size], self.signals[self.size] = x, signal
        self.size += 1
        if self.size - self.indexed > max(_MIN_TAIL, 4.0 * math.sqrt(self.indexed)):
            self.build(self.size)

    def build(self, indexed: int) -> None:
        """Index ``tasks[:indexed]`` in a new tree (none for 0)."""
        from scipy.spatial import cKDTree

        self.indexed = int(indexed)
        self.tree = cKDTree(self.tasks[: self.indexed].copy()) if self.indexed else None

    def load(self, tasks: np.ndarray, signals: np.ndarray, indexed: int) -> None:
        capacity = max(1024, 1 << int(len(signals)).bit_length())
        self.tasks = np.empty((capacity, tasks.shape[1]))
        self.signals = np.empty(capacity)
        self.size = len(signals)
        self.tasks[: self.size], self.signals[: self.size] = tasks, signals
        self.build(indexed)


class ALPGMM(Curriculum):
    """Absolute-learning-progress Gaussian mixture teacher (see the module docstring).

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes all hold numbers, or a ``Product`` of those.
    fit_rate : int
        Episodes between two fits, the number of ``[task, ALP]`` vectors each fit sees, and the length
        of the uniform bootstrap (TDRL: 250; TeachMyAgent: 150).
    potential_ks : iterable of int
        The numbers of mixture components tried at each fit (TDRL: 2..10; TeachMyAgent: 2..9).
    random_task_ratio : float
        The share of tasks drawn uniformly once a mixture exists (TDRL: 0.2; TeachMyAgent: 0.05).
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
        Without scikit-learn or scipy (the message names the ``teachers`` extra).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        fit_rate: int = 250,
        potential_ks: Iterable[int] = range(2, 11),
        random_task_ratio: float = 0.2,
        signal: str = "return",
        background: bool = True,
        seed: int | None = None,
    ) -> None:
        require("ALPGMM", "sklearn", "scipy")
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "ALPGMM")
        self.fit_rate = check_int("fit_rate", fit_rate, 1)
        self.potential_ks = check_ks(potential_ks, self.fit_rate, "ALPGMM")
        self.random_task_ratio = check_ratio(random_task_ratio)
        if signal not in _SIGNALS:
            raise ValueError(f"signal must be one of {_SIGNALS}, got {signal!r}")
        self.signal = signal
        self.mixture: Mixture | None = None
        self.fits = 0  # mixtures swapped in so far
        self._fits_started = 0
        self._history = _History(self.params.dims)
        self._window: deque[np.ndarray] = deque(maxlen=self.fit_rate)  # the last [task, ALP] vectors
        self._refit = Refit(partial(fit_by_aic, ks=self.potential_ks), "ALPGMM", background=background)

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks: uniform with probability ``random_task_ratio`` (always during the bootstrap),
        otherwise from a mixture component chosen in proportion to its mean's ALP."""
        self._check_k(k)
        self._swap()
        interest = self.mixture.means[:, -1] if self.mixture is not None else np.zeros(0)
        vectors = draw(self.rng, self.params, self.mixture, interest, self.random_task_ratio, int(k))
        self.num_sampled += int(k)
        return [self.params.task(x, self.rng) for x in vectors]

    def _swap(self, wait: bool = False) -> None:
        """Use the newest finished mixture, if any (with ``wait``: after any fit in flight finishes)."""
        mixture = self._refit.wait() if wait else self._refit.ready()
        if mixture is not None:
            self.mixture = mixture
            self.fits += 1
            logger.info("ALPGMM: fit %d, %d components (AIC %.1f), component ALPs %s", self.fits,
                        mixture.components, mixture.aic, np.round(mixture.means[:, -1], 4).tolist())

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Store the task with its signal and ALP; every ``fit_rate`` episodes, fit a new mixture."""
        x, r = feedback(self, task, episode_return, length, progress, self.signal)
        alp = 0.0
        if self._history.size > _MIN_HISTORY:
            alp = abs(r - float(self._history.signals[self._history.nearest(x)]))
        self._history.add(x, r)
        self._window.append(np.append(x, alp))
        if self.num_episodes % self.fit_rate == 0:
            snapshot = np.array(self._window)
            self._refit.start((snapshot, fit_seed(self._stream_root, self._fits_started)))
            self._fits_started += 1
        self._swap()

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        alps = [v[-1] for v in self._window]
        out["alpgmm/fits"] = float(self.fits)
        out["alpgmm/components"] = float(self.mixture.components if self.mixture is not None else 0)
        out["alpgmm/mean_alp"] = float(np.mean(alps)) if alps else 0.0
        out["alpgmm/max_component_alp"] = (
            float(self.mixture.means[:, -1].max()) if self.mixture is not None else 0.0
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        """The counters, the generator, the whole history, the fit window and the mixture's arrays (a fit
        in flight is waited for and swapped in first, so the checkpoint is complete)."""
        self._swap(wait=True)
        state = super().state_dict()
        h = self._history
        state.update(
            tasks=h.tasks[: h.size].copy(),
            signals=h.signals[: h.size].copy(),
            indexed=h.indexed,
            window=np.array(self._window).reshape(len(self._window), self.params.dims + 1),
            mixture=self.mixture.state_dict() if self.mixture is not None else None,
            fits=self.fits,
            fits_started=self._fits_started,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        tasks = np.asarray(state["tasks"], dtype=np.float64)
        window = np.asarray(state["window"], dtype=np.float64)
        if tasks.ndim != 2 or (tasks.size and tasks.shape[1] != self.params.dims):
            raise ValueError(
                f"state_dict holds {tasks.shape[-1]}-dimensional tasks, this space has {self.params.dims}"
            )
        tasks = tasks.reshape(-1, self.params.dims)
        signals = np.asarray(state["signals"], dtype=np.float64)
        if signals.shape != (len(tasks),) or not 0 <= int(state["indexed"]) <= len(tasks):
            raise ValueError(
                f"state_dict holds {len(tasks)} tasks, {signals.size} signals and a tree over "
                f"{state['indexed']} of them; expected one signal per task and at most that many indexed"
            )
        super().load_state_dict(state)
        self._refit.wait()  # a fit of the state being replaced is dropped
        self._history.load(tasks, signals, int(state["indexed"]))
        self._window = deque(list(window), maxlen=self.fit_rate)
        self.mixture = Mixture.from_state(state["mixture"]) if state["mixture"] is not None else None
        self.fits = int(state["fits"])
        self._fits_started = int(state["fits_started"])

    def __repr__(self) -> str:
        return (f"ALPGMM({self.task_space!r}, fit_rate={self.fit_rate}, "
                f"components={self.mixture.components if self.mixture is not None else 0})")
