"""XLand dynamic task generation: a filter of proposed tasks (Open-Ended Learning Team, 2021, Sec. 5.2).

*Open-Ended Learning Leads to Generally Capable Agents* trains on tasks drawn from a proposal
distribution and kept only when they are useful for the agent's current stage of learning. A proposed
task ``x`` is evaluated with ``K`` Monte-Carlo episodes (paper: 10) of the agent ``π`` and ``K`` of a
*control policy* ``π_cont`` (uniform random actions in the paper), and accepted iff

1. not already solved: ``Pr[R_π(x) > m_s] < m_solved``,
2. the agent beats the control policy: ``Pr[R_π(x) > R_cont(x) + m_>] > m_>cont``,
3. the control policy is not already good: ``V_cont(x) <= m_cont``.

Estimators: (1) the fraction of agent returns above ``m_s``; (2) the fraction of *paired* samples
``i`` (i-th agent return against i-th control return, in arrival order) with ``a_i > c_i + m_>`` — so
with ``K = 10`` both probabilities are multiples of 0.1, as in the paper; (3) the mean control return.
The paper's criterion 3 is written ``V_cont < m_cont`` with an initial ``m_cont = 0``, which would reject
every task of an environment with non-negative returns; we read it as the inclusive ``V_cont <= m_cont``
(at the initial value: tasks where the control policy earns nothing).

Thresholds default to the paper's initial values (Table 3, returns in ``[0, 900]``) rescaled to the
environment's ``return_range = (lo, hi)``: ``m_s = lo + (375/900)(hi - lo)``, ``m_> = (7.5/900)(hi - lo)``,
``m_cont = lo``, ``m_>cont = 0``, ``m_solved = 1`` (so: some agent episode beats control by ``m_>``, not
every agent episode exceeds ``m_s``, and the control policy scores nothing).

How it runs as a curriculum:

* Candidates come from ``propose(rng, n)`` (default: ``task_space.sample_encoded(n, rng)``); up to
  ``max_pending`` are under evaluation at once. Evaluation episodes are *evaluation-only*
  (``TaskSample(task, train=False)``). A fraction ``eval_fraction`` of sampled episodes is spent on
  evaluation while candidates need episodes; the rest are training episodes drawn uniformly from the
  accepted set. Until the first task is accepted, training episodes are drawn from the proposal
  distribution itself (so the agent learns something while the filter warms up).
* **Small accepted sets** (``min_train_tasks = M``, our addition; default 1, the behaviour above): while
  the set holds ``n < M`` tasks, a training episode comes from the set with probability ``n / M`` and is a
  fresh proposal otherwise, so that one or two accepted tasks do not get every training episode (an agent
  that replays a handful of tasks memorises them, and the filter drops them as solved). The paper draws
  its training tasks from a stream of accepted proposals and has no such case.
* **Task metadata is typed fields, never tags.** A control episode is ``TaskSample(task, False,
  control=True)``; a training replay on a variant is ``TaskSample(task, True, variant=v)`` (below). The
  encoded task is always the plain task the filter credits. The sync layer carries ``control`` and
  ``variant`` next to the task (:class:`~magister.sync.protocol.Tasks`,
  :class:`~magister.sync.feed.Assignment`) and hands them back with the episode's feedback:
  :meth:`TaskFilter.update_on_episode` takes ``control=`` and ``variant=`` keywords (the sync server
  passes them to curricula that accept them), so the route of a return never depends on the shape of
  the encoded task. A caller that drives the filter by hand passes ``control=sample.control,
  variant=sample.variant`` from the :class:`~magister.curricula.base.TaskSample` it played;
  :meth:`TaskFilter.sample` (tasks only) loses the flags, so use :meth:`TaskFilter.sample_tasks`.
* **Control episodes** (``control=True``) are always evaluation-only (``train=False``). The sync
  wrappers give the environment the plain task and report ``info["task"]`` = the task and
  ``info["task_control"] = True``: the trainer plays its control policy when ``info["task_control"]``
  is true. (A :class:`~magister.curricula.dual.DualCurriculum` pair carries its task half's flags.)
* Accepted tasks are **re-validated**: each keeps a rolling window of its last ``window`` training
  returns (default ``K``); whenever the window has been refilled, criteria 1 and 2 are re-checked on it
  (criterion 2 pairs the window's last ``K`` returns with the stored control returns - or, with
  ``pair_window=True`` (our addition), every return of the window with a stored control return, cycling
  through them, so that ``Pr[R_pi > R_cont + m_>]`` is estimated from ``window`` samples instead of ``K``
  and one unlucky episode does not drop a task the agent usually beats the control on; criterion 3 cannot
  change, the control policy being fixed) and the task is dropped when it no longer qualifies.
* The accepted set holds at most ``max_train_tasks``; accepting into a full set evicts the oldest task.
* **Control first, early rejection** (``control_first=True``; our addition, off by default): a candidate's
  control episodes are issued before its agent episodes, and the candidate is rejected (counted under
  criterion 3) as soon as its control returns so far make ``V_cont <= m_cont`` impossible whatever the
  remaining control episodes return (assuming returns are at least ``lo`` of ``return_range``). The
  decision is the one the full ``K + K`` episodes would give; only the evaluation episodes it no longer
  needs are saved (in an environment where the control often scores, e.g. goals already true at the start,
  that is most of the evaluation budget). Agent episodes already issued for it arrive late and are ignored.
* **Widening** (``widen=True``; our addition, off by default): criterion 2 also passes when some control
  return is above ``lo``: the random control policy reaches the goal, so the task is learnable by
  exploration even though the agent does not beat the control yet. With ``m_>cont = 0`` and small ``K``,
  criterion 2 alone keeps only tasks the agent already scores on, which deepens the skills it has instead
  of widening them (issue 7); criterion 3 still rejects tasks on which the control does well. Such
  acceptances are counted in ``counts["accepted_widened"]``.
* **Balanced replay** (``group_of``; our addition, default ``None`` = uniform over the accepted set): a
  training episode picks one of the groups present in the accepted set uniformly (``group_of(task)``,
  e.g. the kind of goal), then a task uniformly within it, so a goal kind that is rare among accepted
  tasks gets as many training episodes as a common one (O(accepted set) per call).
* **Fresh proposals as samples** (``fresh_samples=True``; our addition, off by default): a training
  episode on a fresh proposal (warm-up, or a small set) makes the proposal a candidate and counts its
  return as one of its ``K`` agent returns (an on-policy return of the current agent, the same
  estimator); an evaluation slot with nothing to do then adds one new candidate instead of filling the
  pending set, leaving room for such proposals.
* **Replay variants** (``replay_variant``; our addition, default ``None``: an accepted task is replayed as
  it is): ``replay_variant(task, rng) -> encoded task`` makes each *training* replay of an accepted task a
  variant of it (in XLand: the same game and co-players on another world), drawn with the curriculum's
  generator (a run is reproducible from its seed). The episode is ``TaskSample(task, True,
  variant=variant)``: the environment plays ``variant`` (the sync wrappers decode and reset with it, and
  report it in ``info["task"]``) and the episode's return is credited to the accepted ``task`` (its
  re-validation window), so the criteria stay keyed on the task that passed them. Fresh proposals are
  never variants, and evaluation episodes are not unless ``variant_evaluations`` (below).
  Counted in ``counts["replay_variants"]``. The variant must be a task of the space (a space with
  held-out tasks must not produce them: e.g.
  :meth:`~magister.examples.xland.task.XLandTaskSpace.world_variant`).
* **Evaluation on variants** (``variant_evaluations=True``, with ``replay_variant``; our addition, off by
  default): a candidate's evaluation episodes (agent and control) are variants too, each drawn afresh
  (``TaskSample(task, False, control=is_control, variant=variant)``), so the criteria measure the task's
  family - in XLand its game and co-players over many worlds - on the kind of episode training then
  plays, instead of one member of it. Counted in ``counts["eval_variants"]``.
* **Accounting**: ``counts["eval_agent_issued"]`` and ``counts["eval_control_issued"]`` count the
  evaluation-only episodes the filter has issued (re-issues of lost episodes included): the price of the
  filter in environment episodes, to be charged against it when comparing with unfiltered sampling.

All bookkeeping is per-task dictionaries: O(1) per update, independent of the size of the space.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from .base import Curriculum, Episode, TaskSample, check_finite

logger = logging.getLogger(__name__)

__all__ = [
    "DTGThresholds",
    "TaskFilter",
    "dtg_criteria",
]


@dataclass(frozen=True)
class DTGThresholds:
    """The five XLand filter parameters ``m = {m_>, m_s, m_cont, m_>cont, m_solved}``."""

    m_greater: float
    m_s: float
    m_cont: float
    m_greater_cont: float = 0.0
    m_solved: float = 1.0

    @classmethod
    def paper(cls, return_range: tuple[float, float] = (0.0, 900.0)) -> DTGThresholds:
        """The paper's initial values (Table 3, returns in [0, 900]) rescaled to ``return_range``.

        >>> DTGThresholds.paper((0.0, 1.0)).m_s == 375 / 900
        True
        """
        lo, hi = (float(x) for x in return_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            raise ValueError(f"return_range must be finite (lo, hi) with hi > lo, got {return_range!r}")
        span = hi - lo
        return cls(m_greater=7.5 / 900 * span, m_s=lo + 375 / 900 * span, m_cont=lo)


def dtg_criteria(
    agent_returns: Sequence[float], control_returns: Sequence[float], m: DTGThresholds
) -> tuple[bool, bool, bool]:
    """The three XLand criteria from Monte-Carlo returns (see the module docstring).

    Criterion 2 pairs the last ``len(control_returns)`` agent returns with the control returns.

    >>> m = DTGThresholds(m_greater=0.1, m_s=0.5, m_cont=0.0, m_greater_cont=0.0, m_solved=1.0)
    >>> dtg_criteria([0.2, 0.6, 0.0], [0.0, 0.0, 0.0], m)
    (True, True, True)
    """
    a = np.asarray(agent_returns, dtype=np.float64)
    c = np.asarray(control_returns, dtype=np.float64)
    if a.size == 0 or c.size == 0 or a.size < c.size:
        raise ValueError(f"need at least as many agent returns ({a.size}) as control returns ({c.size}) > 0")
    not_solved = float((a > m.m_s).mean()) < m.m_solved
    beats_control = float((a[-c.size :] > c + m.m_greater).mean()) > m.m_greater_cont
    control_weak = float(c.mean()) <= m.m_cont
    return not_solved, beats_control, control_weak


@dataclass
class _Candidate:
    task: EncodedTask
    agent: list[float] = field(default_factory=list)
    control: list[float] = field(default_factory=list)
    agent_out: int = 0
    control_out: int = 0
    last_issue: int = 0


class TaskFilter(Curriculum):
    """XLand-style dynamic task generation over any task space.

    Args:
        task_space: the space proposals come from (any kind, bounded or not).
        propose: ``propose(rng, n) -> list of n encoded tasks``; default ``task_space.sample_encoded``.
        num_episodes: ``K``, Monte-Carlo episodes per policy per candidate (paper: 10).
        return_range: ``(lo, hi)`` of the environment's episode return, to rescale the paper's thresholds.
        m_greater: overrides ``m_>`` alone (an absolute value): the margin by which the agent's return
            must beat the control policy's.
        m_s: overrides ``m_s``: the return above which an episode counts as solved.
        m_cont: overrides ``m_cont``: the most mean return the control policy may reach.
        m_greater_cont: overrides ``m_>cont``: the share of episodes in which the agent beats control by
            ``m_>`` must exceed it.
        m_solved: overrides ``m_solved``: the solved share at which a task counts as solved.
        eval_fraction: fraction of sampled episodes spent on evaluation while candidates need them.
        max_pending: candidates under evaluation at once.
        max_train_tasks: capacity of the accepted set (oldest evicted first).
        window: rolling window of training returns for re-validation (default ``K``; at least ``K``).
        stale_after: sampled episodes after which unanswered evaluation episodes are re-issued (lost
            workers); default ``100 * K``.
        seed: seed of the curriculum's generator.
        control_first: issue control episodes first and reject early on criterion 3 (module docstring).
        min_train_tasks: below this many accepted tasks, training episodes are partly fresh proposals
            (module docstring); 1: only while the set is empty.
        pair_window: re-validate criterion 2 on every window return, paired cyclically with the control
            returns (module docstring); False: the window's last ``K`` returns only.
        fresh_samples: a training episode on a fresh proposal counts as an agent sample (module docstring).
        widen: criterion 2 also passes when the control policy scored (module docstring).
        group_of: ``group_of(task) -> hashable``: replay the accepted set balanced over these groups.
        replay_variant: ``replay_variant(task, rng) -> encoded task``: train on a variant of the accepted
            task drawn at each replay, credited to the task (module docstring); ``None``: the task itself.
        variant_evaluations: evaluation episodes play variants too (needs ``replay_variant``).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        propose: Callable[[np.random.Generator, int], Sequence[EncodedTask]] | None = None,
        num_episodes: int = 10,
        return_range: tuple[float, float] = (0.0, 1.0),
        m_greater: float | None = None,
        m_s: float | None = None,
        m_cont: float | None = None,
        m_greater_cont: float | None = None,
        m_solved: float | None = None,
        eval_fraction: float = 0.2,
        max_pending: int = 4,
        max_train_tasks: int = 1000,
        window: int | None = None,
        stale_after: int | None = None,
        seed: int | None = None,
        control_first: bool = False,
        min_train_tasks: int = 1,
        pair_window: bool = False,
        fresh_samples: bool = False,
        widen: bool = False,
        group_of: Callable[[EncodedTask], Hashable] | None = None,
        replay_variant: Callable[[EncodedTask, np.random.Generator], EncodedTask] | None = None,
        variant_evaluations: bool = False,
    ) -> None:
        super().__init__(task_space, seed=seed)
        for name, value in (("num_episodes", num_episodes), ("max_pending", max_pending),
                            ("max_train_tasks", max_train_tasks), ("min_train_tasks", min_train_tasks)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0.0 < float(eval_fraction) <= 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1], got {eval_fraction!r}")
        if group_of is not None and not callable(group_of):
            raise TypeError(f"group_of must be callable(task) -> hashable, got {group_of!r}")
        if replay_variant is not None and not callable(replay_variant):
            raise TypeError(f"replay_variant must be callable(task, rng) -> encoded task, "
                            f"got {replay_variant!r}")
        if variant_evaluations and replay_variant is None:
            raise ValueError("variant_evaluations=True needs replay_variant (the variants to evaluate on)")
        if propose is not None and not callable(propose):
            raise TypeError(f"propose must be callable(rng, n), got {propose!r}")
        self.K = int(num_episodes)
        self.window = self.K if window is None else int(window)
        if self.window < self.K:
            raise ValueError(f"window must be >= num_episodes ({self.K}), got {window!r}")
        base = DTGThresholds.paper(return_range)
        self.return_range = (float(return_range[0]), float(return_range[1]))
        self.control_first = bool(control_first)
        overrides = {"m_greater": m_greater, "m_s": m_s, "m_cont": m_cont,
                     "m_greater_cont": m_greater_cont, "m_solved": m_solved}
        values = {k: (getattr(base, k) if v is None else check_finite(k, v)) for k, v in overrides.items()}
        self.thresholds = DTGThresholds(**values)
        self.propose = propose
        self.eval_fraction = float(eval_fraction)
        self.max_pending = int(max_pending)
        self.max_train_tasks = int(max_train_tasks)
        self.min_train_tasks = int(min_train_tasks)
        self.pair_window = bool(pair_window)
        self.fresh_samples = bool(fresh_samples)
        self.widen = bool(widen)
        self.group_of = group_of
        self.replay_variant = replay_variant
        self.variant_evaluations = bool(variant_evaluations)
        self._groups: dict[Hashable, Hashable] = {}
        self.stale_after = 100 * self.K if stale_after is None else int(stale_after)
        self.pending: OrderedDict[Hashable, _Candidate] = OrderedDict()
        self.train_tasks: list[EncodedTask] = []
        self._train_pos: dict[Hashable, int] = {}
        self._windows: dict[Hashable, deque[float]] = {}
        self._fresh: dict[Hashable, int] = {}
        self._control: dict[Hashable, list[float]] = {}
        self._accept_order: deque[Hashable] = deque()
        self.counts = self._zero_counts()

    @staticmethod
    def _zero_counts() -> dict[str, int]:
        return {"proposed": 0, "accepted": 0, "rejected_solved": 0, "rejected_control": 0,
                "rejected_easy_for_control": 0, "rejected_early": 0, "dropped": 0, "evicted": 0,
                "eval_agent_issued": 0, "eval_control_issued": 0, "fresh_agent_samples": 0,
                "accepted_widened": 0, "replay_variants": 0, "eval_variants": 0}

    # -- proposals ----------------------------------------------------------------------------------
    def _propose(self, n: int) -> list[EncodedTask]:
        if self.propose is None:
            return list(self.task_space.sample_encoded(n, rng=self.rng))
        tasks = list(self.propose(self.rng, n))
        if len(tasks) != n:
            raise ValueError(f"propose(rng, {n}) returned {len(tasks)} tasks, expected {n}")
        return tasks

    def _fill_pending(self) -> None:
        for _ in range(3):  # a few rounds, in case proposals repeat tasks already tracked
            room = self.max_pending - len(self.pending)
            if room <= 0:
                return
            if self.fresh_samples:  # one at a time: leave room for fresh training proposals
                room = 1
            for t in self._propose(room):
                key = task_key(t)
                if key in self.pending or key in self._train_pos:
                    continue
                self.pending[key] = _Candidate(task=t)
                self.counts["proposed"] += 1
                if self.fresh_samples:
                    return

    def _fresh_training(self, n: int) -> list[TaskSample]:
        """``n`` training episodes on fresh proposals; with ``fresh_samples``, each untracked one becomes a
        candidate (while ``max_pending`` allows) whose training return is one of its ``K`` agent returns."""
        tasks = self._propose(n)
        if self.fresh_samples:
            for t in tasks:
                key = task_key(t)
                if len(self.pending) >= self.max_pending or key in self.pending or key in self._train_pos:
                    continue
                self.pending[key] = _Candidate(task=t, agent_out=1, last_issue=self.num_sampled)
                self.counts["proposed"] += 1
                self.counts["fresh_agent_samples"] += 1
        return [TaskSample(t, True) for t in tasks]

    def _issue(self, cand: _Candidate, control: bool) -> TaskSample:
        cand.last_issue = self.num_sampled
        variant = self._variant(cand.task, "eval_variants") if self.variant_evaluations else None
        if control:
            cand.control_out += 1
            self.counts["eval_control_issued"] += 1
        else:
            cand.agent_out += 1
            self.counts["eval_agent_issued"] += 1
        return TaskSample(cand.task, False, control=control, variant=variant)

    def _next_eval(self) -> TaskSample | None:
        """One evaluation episode for a candidate that needs it, or None.

        With ``control_first``, a candidate's first control episode goes out before any other episode of
        any candidate, so that early rejection (criterion 3) can spare the rest of its episodes.
        """
        for cand in self.pending.values():
            if self.num_sampled - cand.last_issue > self.stale_after:  # lost episodes: re-issue
                cand.agent_out = cand.control_out = 0
        if self.control_first:
            for attempt in range(2):
                for cand in self.pending.values():
                    if not cand.control and cand.control_out == 0:
                        return self._issue(cand, control=True)
                if attempt == 0:
                    self._fill_pending()
        for attempt in range(2):
            for cand in self.pending.values():
                need_agent = len(cand.agent) + cand.agent_out < self.K
                need_control = len(cand.control) + cand.control_out < self.K
                if need_control and (self.control_first or not need_agent):
                    return self._issue(cand, control=True)
                if need_agent:
                    return self._issue(cand, control=False)
            if attempt == 0:
                self._fill_pending()
        return None

    # -- sampling -----------------------------------------------------------------------------------
    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``k`` envelopes: evaluation episodes (``train=False``) and training episodes."""
        self._check_k(k)
        want_eval = self.rng.random(k) < self.eval_fraction
        out: list[TaskSample | None] = [None] * k
        for i in np.flatnonzero(want_eval).tolist():  # with no accepted task yet, the rest train on proposals
            out[i] = self._next_eval()
        train_slots = [i for i in range(k) if out[i] is None]
        n = len(self.train_tasks)
        if train_slots and 0 < n < self.min_train_tasks:  # a small set: some fresh proposals
            from_set = self.rng.random(len(train_slots)) < n / self.min_train_tasks
            fresh = [i for i, s in zip(train_slots, from_set.tolist()) if not s]
            for i, s in zip(fresh, self._fresh_training(len(fresh)) if fresh else []):
                out[i] = s
            train_slots = [i for i, s in zip(train_slots, from_set.tolist()) if s]
        if train_slots:
            if self.train_tasks:
                replays = self._replay(len(train_slots))
                samples = [TaskSample(t, True, variant=self._variant(t)) for t in replays]
            else:
                samples = self._fresh_training(len(train_slots))
            for i, s in zip(train_slots, samples):
                out[i] = s
        self.num_sampled += k
        return out  # type: ignore[return-value]

    def _replay(self, n: int) -> list[EncodedTask]:
        """``n`` training tasks from the accepted set: uniformly, or with ``group_of`` a group uniformly
        among the groups present, then a task uniformly within it (O(accepted set) per call)."""
        if self.group_of is None:
            return [self.train_tasks[j] for j in self.rng.integers(len(self.train_tasks), size=n).tolist()]
        groups: dict[Hashable, list[EncodedTask]] = {}
        known, self._groups = self._groups, {}  # (kept for the accepted set only: dropped tasks forgotten)
        for t in self.train_tasks:
            key = task_key(t)
            group = known[key] if key in known else self.group_of(t)
            self._groups[key] = group
            groups.setdefault(group, []).append(t)
        members = list(groups.values())
        out = []
        for g in self.rng.integers(len(members), size=n).tolist():
            out.append(members[g][int(self.rng.integers(len(members[g])))])
        return out

    def _variant(self, task: EncodedTask, count: str = "replay_variants") -> EncodedTask | None:
        """The variant a replay of an accepted task (or with ``variant_evaluations`` an evaluation episode
        of a candidate) plays: ``None`` (the task itself), or with ``replay_variant`` a variant of it,
        counted under ``count``."""
        if self.replay_variant is None:
            return None
        variant = self.replay_variant(task, self.rng)
        if not self.task_space.contains_encoded(variant):
            raise ValueError(f"replay_variant({task!r:.100}, rng) returned {variant!r:.100}, which is not an "
                             f"encoded task of {self.task_space!r}")
        self.counts[count] += 1
        return variant

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """The credited encoded tasks only: the train, control and variant fields are lost, so an episode
        played from this cannot be routed correctly; use :meth:`sample_tasks` for them."""
        return [s.task for s in self.sample_tasks(k)]

    # -- decisions ----------------------------------------------------------------------------------
    def _decide(self, key: Hashable, cand: _Candidate) -> None:
        del self.pending[key]
        agent, control = cand.agent[: self.K], cand.control[: self.K]
        ok_solved, ok_beats, ok_control = dtg_criteria(agent, control, self.thresholds)
        widened = not ok_beats and self._control_scored(control)
        ok_beats = ok_beats or widened
        if not ok_solved:
            self.counts["rejected_solved"] += 1
        elif not ok_beats:
            self.counts["rejected_control"] += 1
        elif not ok_control:
            self.counts["rejected_easy_for_control"] += 1
        else:
            self._accept(key, cand.task, agent, control)
            self.counts["accepted_widened"] += int(widened)

    def _accept(self, key: Hashable, task: EncodedTask, agent: list[float], control: list[float]) -> None:
        if len(self.train_tasks) >= self.max_train_tasks:
            self._remove(self._accept_order[0])
            self.counts["evicted"] += 1
        self._train_pos[key] = len(self.train_tasks)
        self.train_tasks.append(task)
        self._windows[key] = deque(agent, maxlen=self.window)
        self._fresh[key] = 0
        self._control[key] = list(control)
        self._accept_order.append(key)
        self.counts["accepted"] += 1
        logger.debug("task filter accepted %r", task)

    def _remove(self, key: Hashable) -> None:
        pos = self._train_pos.pop(key)
        last = self.train_tasks.pop()
        if pos < len(self.train_tasks):  # swap-remove
            self.train_tasks[pos] = last
            self._train_pos[task_key(last)] = pos
        del self._windows[key], self._fresh[key], self._control[key]
        self._groups.pop(key, None)
        self._accept_order.remove(key)

    def _control_cannot_pass(self, control: list[float]) -> bool:
        """Whether criterion 3 fails whatever the missing control episodes return (each >= ``lo``)."""
        n = min(len(control), self.K)
        best_mean = (sum(control[:n]) + (self.K - n) * self.return_range[0]) / self.K
        return best_mean > self.thresholds.m_cont

    def _control_scored(self, control: Sequence[float]) -> bool:
        """With ``widen``: whether some control return is above ``lo`` (the goal is reachable by the random
        control policy, so the task is learnable even where the agent does not beat the control yet)."""
        return self.widen and any(c > self.return_range[0] for c in control)

    def _revalidate(self, key: Hashable) -> None:
        self._fresh[key] = 0
        window, control = list(self._windows[key]), self._control[key]
        if self.pair_window:  # every window return against a control return, cycling through them
            control = [control[i % len(control)] for i in range(len(window))]
        ok_solved, ok_beats, _ = dtg_criteria(window, control, self.thresholds)
        ok_beats = ok_beats or self._control_scored(control)
        if not (ok_solved and ok_beats):
            self._remove(key)
            self.counts["dropped"] += 1
            logger.debug("task filter dropped %r (solved=%s, beats control=%s)", key, not ok_solved, ok_beats)

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
        *,
        control: bool = False,
        variant: EncodedTask | None = None,
    ) -> None:
        """Route a return: candidate evaluation (agent, or control with ``control=True``), or an accepted
        task's window. ``task`` is the credited task of the :class:`~magister.curricula.base.TaskSample`
        played; ``control`` and ``variant`` are its fields (:meth:`on_episode` passes the record's). A replay
        on a
        ``variant`` is credited to ``task`` (the variant itself is not recorded)."""
        r = check_finite("episode_return", episode_return)
        if control.__class__ is not bool:
            if not isinstance(control, np.bool_):
                raise TypeError(f"control must be a bool, got {type(control).__name__} {control!r:.100}")
            control = bool(control)
        is_control = control
        key = task_key(task)
        cand = self.pending.get(key)
        if cand is None and key not in self._train_pos:
            self.task_space.check_encoded(task)  # untracked is fine, outside the space is an error
        del variant  # the return is credited to ``task`` whatever the env played
        self.num_episodes += 1
        if cand is not None:
            if is_control:
                cand.control.append(r)
                cand.control_out = max(cand.control_out - 1, 0)
            else:
                cand.agent.append(r)
                cand.agent_out = max(cand.agent_out - 1, 0)
            if len(cand.agent) >= self.K and len(cand.control) >= self.K:
                self._decide(key, cand)
            elif is_control and self.control_first and self._control_cannot_pass(cand.control):
                del self.pending[key]
                self.counts["rejected_easy_for_control"] += 1
                self.counts["rejected_early"] += 1
            return
        if is_control or key not in self._train_pos:
            return  # a late evaluation result, or a warm-up training episode: nothing to record
        self._windows[key].append(r)
        self._fresh[key] += 1
        if self._fresh[key] >= self.window:
            self._revalidate(key)

    def on_episode(self, episode: Episode) -> None:
        """:meth:`update_on_episode` with the record's ``control`` and ``variant``."""
        self.update_on_episode(
            episode.episode_return, episode.length, episode.task, episode.progress, episode.env_id,
            control=episode.control, variant=episode.variant,
        )

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({f"task_filter/{k}": float(v) for k, v in self.counts.items()})
        out["task_filter/train_tasks"] = float(len(self.train_tasks))
        out["task_filter/pending"] = float(len(self.pending))
        if self.train_tasks:  # what the accepted set looks like: the agent's recent vs the control's returns
            keys = list(self._accept_order)
            agent = [np.mean(self._windows[k]) for k in keys]
            out["task_filter/accepted_agent_return"] = float(np.mean(agent))
            control = [np.mean(self._control[k]) for k in keys]
            out["task_filter/accepted_control_return"] = float(np.mean(control))
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            pending=[
                {"task": c.task, "agent": list(c.agent), "control": list(c.control), "agent_out": c.agent_out,
                 "control_out": c.control_out, "last_issue": c.last_issue}
                for c in self.pending.values()
            ],
            train=[
                {"task": self.train_tasks[self._train_pos[key]], "window": list(self._windows[key]),
                 "fresh": self._fresh[key], "control": list(self._control[key])}
                for key in self._accept_order
            ],
            train_order=[self._train_pos[key] for key in self._accept_order],
            counts=dict(self.counts),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pending = OrderedDict()
        for c in state["pending"]:
            self.pending[task_key(c["task"])] = _Candidate(
                task=c["task"], agent=[float(x) for x in c["agent"]],
                control=[float(x) for x in c["control"]], agent_out=int(c["agent_out"]),
                control_out=int(c["control_out"]), last_issue=int(c["last_issue"]),
            )
        entries = state["train"]
        positions = [int(p) for p in state["train_order"]]
        if sorted(positions) != list(range(len(entries))):
            raise ValueError("state_dict['train_order'] is not a permutation of the accepted tasks")
        self.train_tasks = [None] * len(entries)
        self._train_pos, self._windows, self._fresh, self._control = {}, {}, {}, {}
        self._accept_order = deque()
        for e, pos in zip(entries, positions):
            key = task_key(e["task"])
            self.train_tasks[pos] = e["task"]
            self._train_pos[key] = pos
            self._windows[key] = deque((float(x) for x in e["window"]), maxlen=self.window)
            self._fresh[key] = int(e["fresh"])
            self._control[key] = [float(x) for x in e["control"]]
            self._accept_order.append(key)
        self.counts = self._zero_counts() | {k: int(v) for k, v in state["counts"].items()}
