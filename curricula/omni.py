"""OMNI: Open-endedness via Models of human Notions of Interestingness (Zhang et al. 2023).

OMNI runs a success-rate curriculum — Learning Progress, as in the paper, or SFL, as tried by the
Syllabus paper (Supplementary E.5) — and masks *down* the tasks a model of interestingness (MoI) judges
uninteresting given the agent's current success rates. With base distribution ``P_base`` and judge
verdict ``I_i ∈ {0, 1}``:

.. math::

    P_i \\propto P_{base,i} \\cdot (I_i + (1 - I_i)\\, w_u),

where ``w_u = uninteresting_weight`` (default ``1e-3``: uninteresting tasks are almost never sampled,
yet the distribution keeps the base's support). If every task with base mass is judged uninteresting,
the base distribution is used unchanged.

The judge (see :mod:`magister.curricula.interestingness`) receives the tasks' descriptions
(``task_space.describe(task_space.decode(e))`` for every encoded task, computed once) and the base's
current success estimates (``base.success_rates()``; for an online Learning Progress base its fast EMA,
not the last period's often single 0/1 outcome). It is consulted every ``judge_period`` feedback
updates — skipped when the base has not updated its estimates since the last verdict (an LP EMA step,
an SFL refresh), so an LLM is not asked the same question twice — and after each evaluation
(``update_on_demand({"success_rates": ...})``). Should the judge fail (:class:`JudgeError`,
e.g. the LLM endpoint is down), OMNI logs a warning and keeps the previous verdict.

The default judge is the offline :class:`~magister.curricula.interestingness.EmbeddingJudge` (a task is
uninteresting when it is a near-copy, by sentence-embedding similarity, of a mastered task);
:class:`~magister.curricula.interestingness.LLMJudge` implements the paper's LLM-based MoI.

OMNI needs a finite task space (every task must be described to the judge); the judge's cost grows with
``num_tasks × num_mastered``, so it is meant for task sets of up to tens of thousands of tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from .base import Curriculum, Episode
from .interestingness import EmbeddingJudge, InterestingnessJudge, JudgeError
from .learning_progress import LearningProgress
from .sfl import SFL

logger = logging.getLogger(__name__)

__all__ = ["OMNI"]


class OMNI(Curriculum):
    """Learning Progress (or SFL) with uninteresting tasks masked down.

    Args:
        task_space: a finite task space whose ``describe`` gives meaningful text.
        base: the underlying curriculum over the same space (default ``LearningProgress(task_space)``
            with the paper's settings). It receives all feedback; OMNI only reshapes its distribution.
        judge: an :class:`InterestingnessJudge` (default ``EmbeddingJudge()``).
        judge_period: feedback updates between consultations of the judge (default: the base's
            ``update_period``).
        uninteresting_weight: factor ``w_u`` applied to uninteresting tasks' probabilities, in ``[0, 1)``.
        seed: seed of OMNI's sampling generator.
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        base: LearningProgress | SFL | None = None,
        judge: InterestingnessJudge | None = None,
        judge_period: int | None = None,
        uninteresting_weight: float = 1e-3,
        seed: int | None = None,
    ) -> None:
        super().__init__(task_space, seed=seed)
        if task_space.num_tasks is None:
            raise TypeError(f"OMNI needs a finite task space to describe to its judge; got {task_space!r}")
        if base is None:
            base = LearningProgress(task_space, seed=seed)
        if not isinstance(base, (LearningProgress, SFL)):
            raise TypeError(f"base must be a LearningProgress or SFL curriculum, got {type(base).__name__}")
        if base.task_space is not task_space:
            raise ValueError("base curriculum must use the same task_space object as OMNI")
        if judge is None:
            judge = EmbeddingJudge()
        if not isinstance(judge, InterestingnessJudge):
            raise TypeError(f"judge must be an InterestingnessJudge, got {type(judge).__name__}")
        period = base.update_period if judge_period is None else judge_period
        if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
            raise ValueError(f"judge_period must be a positive int, got {judge_period!r}")
        if not 0.0 <= float(uninteresting_weight) < 1.0:
            raise ValueError(f"uninteresting_weight must be in [0, 1), got {uninteresting_weight!r}")
        self.base = base
        self.judge = judge
        self.judge_period = int(period)
        self.uninteresting_weight = float(uninteresting_weight)
        self.n = int(task_space.num_tasks)
        self.encoded = base.index.tasks(np.arange(self.n))
        self.descriptions = [task_space.describe(task_space.decode(e)) for e in self.encoded]
        self.interesting = np.ones(self.n, dtype=bool)
        self.num_judgements = 0
        self.num_judge_failures = 0
        self._since_judge = 0
        # a fresh base (version 0) has no estimates, and "all interesting" is the verdict for it
        self._judged_version: tuple[int, ...] | None = (0,)
        self._cdf: np.ndarray | None = None
        self._cdf_version: Any = None

    # -- the judge ----------------------------------------------------------------------------------
    def rejudge(self) -> None:
        """Ask the judge now (keeps the previous verdict if it fails)."""
        self._since_judge = 0
        self._judged_version = self._base_version()
        try:
            verdict = np.asarray(self.judge.judge(self.descriptions, self.base.success_rates()[: self.n]))
        except JudgeError as exc:
            self.num_judge_failures += 1
            logger.warning("OMNI judge failed, keeping the previous verdict: %s", exc)
            return
        if verdict.shape != (self.n,) or verdict.dtype != bool:
            raise ValueError(
                f"judge returned {verdict.dtype} array of shape {verdict.shape}, expected bool ({self.n},)"
            )
        self.interesting = verdict.copy()
        self.num_judgements += 1
        self._cdf = None
        logger.debug("OMNI judged %d of %d tasks interesting", int(verdict.sum()), self.n)

    def _tick(self) -> None:
        self._since_judge += 1
        if self._since_judge >= self.judge_period:
            if self._base_version() != self._judged_version:
                self.rejudge()
            else:  # the base's estimates have not been updated since the last verdict: nothing to ask
                self._since_judge = 0

    # -- feedback (forwarded to the base) -----------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Forwarded to the base curriculum; counts towards ``judge_period``."""
        self.on_episode(Episode(task, episode_return, length, progress, env_id))

    def on_episode(self, episode: Episode) -> None:
        """The record goes to the base curriculum whole; counts towards ``judge_period``."""
        self.base.on_episode(episode)
        self.num_episodes += 1
        self._tick()

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        """Forwarded to the base curriculum; counts towards ``judge_period``."""
        self.base.update_task_progress(task, progress, env_id)
        self._tick()

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Forwarded to the base; after ``{"success_rates": ...}`` the judge is consulted at once."""
        self.base.update_on_demand(metrics)
        if isinstance(metrics, Mapping) and "success_rates" in metrics:
            self.rejudge()

    # -- sampling -----------------------------------------------------------------------------------
    def _base_version(self) -> tuple[int, ...]:
        if isinstance(self.base, LearningProgress):
            return (self.base.num_ema_steps,)
        return (self.base.num_refreshes,)

    def _distribution(self) -> np.ndarray:
        version = self._base_version()
        if self._cdf is None or version != self._cdf_version:
            p = np.asarray(self.base.distribution(), dtype=np.float64)[: self.n]
            # distribution() may have refreshed the base; record the version after the call
            version = self._base_version()
            masked = p * np.where(self.interesting, 1.0, self.uninteresting_weight)
            total = masked[self.interesting].sum()
            if total <= 0.0:
                masked = p
            masked = masked / masked.sum()
            cdf = np.cumsum(masked)
            cdf[-1] = 1.0
            self._cdf, self._cdf_version = cdf, version
        return np.diff(self._cdf, prepend=0.0)

    def distribution(self) -> np.ndarray:
        """OMNI's sampling probabilities over ``task_space.encoded_tasks``."""
        return self._distribution()

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks from the masked distribution (one vectorised draw)."""
        self._check_k(k)
        self._distribution()
        assert self._cdf is not None
        slots = np.searchsorted(self._cdf, self.rng.random(k), side="right")
        np.minimum(slots, self.n - 1, out=slots)
        self.num_sampled += k
        return [self.encoded[s] for s in slots.tolist()]

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({f"omni/base/{k.split('/', 1)[-1]}": v for k, v in self.base.metrics().items()})
        out["omni/interesting_tasks"] = float(self.interesting.sum())
        out["omni/judge_failures"] = float(self.num_judge_failures)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            base=self.base.state_dict(), interesting=self.interesting.copy(),
            num_judgements=self.num_judgements, num_judge_failures=self.num_judge_failures,
            since_judge=self._since_judge,
            judged_version=None if self._judged_version is None else list(self._judged_version),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if np.shape(state["interesting"]) != (self.n,):
            raise ValueError(
                f"state_dict['interesting'] has shape {np.shape(state['interesting'])}, expected ({self.n},)"
            )
        self.base.load_state_dict(state["base"])
        self.interesting = np.array(state["interesting"], dtype=bool)
        self.num_judgements = int(state["num_judgements"])
        self.num_judge_failures = int(state["num_judge_failures"])
        self._since_judge = int(state["since_judge"])
        jv = state["judged_version"]
        self._judged_version = None if jv is None else tuple(int(x) for x in jv)
        self._cdf = None
