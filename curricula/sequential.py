"""Sequential curriculum: a list of stages, each run until its stopping condition holds.

The meta-curriculum of the Syllabus paper (Sullivan et al., Supplementary A.4; used for the 5-stage Neural MMO
curriculum of Supplementary E.6): training moves through stages ``0, 1, ..., n-1``. A stage is an encoded
task (wrapped in :class:`~magister.curricula.constant.Constant`), a list of tasks (uniform over the list,
:class:`~magister.curricula.domain_randomization.DomainRandomization` with ``tasks=``), a task space (domain
randomization over it) or any :class:`~magister.curricula.base.Curriculum`, so automatic curricula can run in
sequence. Every update is forwarded to the current stage's curriculum.

Stage ``i`` ends the first time its stopping condition ``c_i`` (a string in the language of
:mod:`magister.curricula.stopping`) holds over the stage's own metrics; the last stage never ends.
The metrics, all reset to zero when a stage begins, are:

* ``steps``: environment steps in this stage (from step updates when any stage asks for them, otherwise the
  sum of finished episodes' lengths);
* ``episodes``: finished episodes in this stage;
* ``tasks``: tasks sampled in this stage;
* ``return``: :math:`\\frac{1}{|W|}\\sum_{e \\in W} R_e`, the mean return of the last ``window`` episodes
  ``W`` of this stage (NaN, so every comparison with it false, before the first episode or, with
  ``full_window=True``, before ``window`` episodes);
* ``progress`` (alias ``success``): the mean final progress over the same window;
* any name listed in ``demand_metrics``: the latest value the learner reported for it in this stage through
  :meth:`Sequential.update_on_demand` (NaN before the first report), e.g. ``"eval_return>=0.9"``.

The condition is checked after every update and before every sample; a ``sample(k)`` that crosses a
``tasks`` threshold, or a step batch that crosses a ``steps`` threshold, is split, so the stage ends after
exactly the task or step that made the condition true.

Updates are always forwarded to the *current* stage, including late feedback on tasks sampled in an
earlier stage (asynchronous environments finish old episodes after a switch); so a stage curriculum must
accept feedback on any task of ``task_space``.

>>> from magister.task_spaces.discrete import Discrete
>>> space = Discrete(10)
>>> cur = Sequential([0, [1, 2], space], ["episodes>=2", "return>=1.0&&episodes>=3"], seed=0)
>>> cur.sample(3)
[0, 0, 0]
>>> cur.update_on_episode(0.0, 10, 0, 0.0); cur.update_on_episode(0.0, 10, 0, 0.0)
>>> cur.stage, sorted(set(cur.sample(20)))
(1, [1, 2])
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, task_key
from .base import Curriculum, Episode, StepBatch, TaskSample, check_finite
from .constant import Constant
from .domain_randomization import DomainRandomization
from .stopping import Condition, parse_condition

logger = logging.getLogger(__name__)

__all__ = ["METRIC_NAMES", "Sequential"]

#: Metric names a stopping condition may use.
METRIC_NAMES = ("steps", "episodes", "tasks", "return", "progress", "success")


class Sequential(Curriculum):
    """Run stages in order, each until its stopping condition holds.

    Parameters
    ----------
    stages : sequence
        Each an encoded task, a list of encoded tasks, a :class:`TaskSpace` or a :class:`Curriculum`.
        A ``list`` is read as a list of tasks (if all its items are tasks of ``task_space``), otherwise as
        one encoded task; pass single tuple-encoded tasks as tuples to avoid any doubt.
    stopping_conditions : sequence of str or Condition
        One per stage except the last (``len(stages) - 1`` of them), e.g. ``"steps>=5e5||tasks>=200"``.
        Malformed text raises :class:`~magister.curricula.stopping.ConditionSyntaxError` (a ``ValueError``)
        here, with the character position and what was expected.
    task_space : TaskSpace, optional
        The space that task and list stages belong to. Defaults to the space of the first stage that is a
        space or a curriculum.
        A space or curriculum stage must encode tasks the way ``task_space`` does (usually it is the
        same space); a re-indexed subspace such as a ``Discrete.split`` half is not, so give such a
        stage as the list of its tasks in ``task_space``'s encoding instead.
    window : int
        How many recent episodes ``return`` and ``progress`` average over (default 100).
    full_window : bool
        If true, ``return``/``progress`` are NaN (conditions on them false) until ``window`` episodes of the
        stage have finished.
    demand_metrics : sequence of str
        Extra metric names the conditions may use, with values taken from ``update_on_demand`` dicts.
    seed : int, optional
        Seeds the curricula this class builds from tasks, lists and spaces (curricula you pass in keep
        their own seeds).
    """

    requires_episode_updates = True

    def __init__(
        self,
        stages: Sequence[Any],
        stopping_conditions: Sequence[str | Condition],
        task_space: TaskSpace | None = None,
        *,
        window: int = 100,
        full_window: bool = False,
        demand_metrics: Sequence[str] = (),
        seed: int | None = None,
    ) -> None:
        if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence) or len(stages) == 0:
            raise ValueError(f"stages must be a non-empty list, got {stages!r}")
        if isinstance(stopping_conditions, (str, Condition)) or not isinstance(stopping_conditions, Sequence):
            raise TypeError(
                f"stopping_conditions must be a list of strings (one per stage but the last), "
                f"got {type(stopping_conditions).__name__}"
            )
        if len(stopping_conditions) != len(stages) - 1:
            raise ValueError(
                f"{len(stages)} stages need exactly {len(stages) - 1} stopping conditions (the last stage "
                f"runs forever), got {len(stopping_conditions)}"
            )
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        if task_space is None:
            for s in stages:
                if isinstance(s, (TaskSpace, Curriculum)):
                    task_space = s if isinstance(s, TaskSpace) else s.task_space
                    break
            else:
                raise ValueError("task_space is required when every stage is a task or a list of tasks")
        super().__init__(task_space, seed=seed)
        self.window = int(window)
        self.full_window = bool(full_window)
        if isinstance(demand_metrics, str):
            raise TypeError(f"demand_metrics must be a list of names, got the string {demand_metrics!r}")
        for name in demand_metrics:
            if not (isinstance(name, str) and name.isidentifier()) or name in METRIC_NAMES:
                raise ValueError(
                    f"demand_metrics entries must be identifiers other than {list(METRIC_NAMES)}, "
                    f"got {name!r}"
                )
        self.demand_metrics: tuple[str, ...] = tuple(demand_metrics)
        self._names = METRIC_NAMES + self.demand_metrics
        self.conditions: list[Condition] = [self._parse(c) for c in stopping_conditions]
        self._built: list[bool] = []
        self.stages: list[Curriculum] = [self._as_curriculum(i, s) for i, s in enumerate(stages)]
        self._reseed_built(seed)
        self._count_step_updates = self.requires_step_updates
        self.stage = 0
        self._reset_stage_stats()
        self._maybe_advance()  # a condition may already hold with all counters at zero

    # -- construction helpers -----------------------------------------------------------------------
    def _parse(self, cond: str | Condition) -> Condition:
        if isinstance(cond, Condition):
            unknown = set(cond.names) - set(self._names)
            if unknown:
                raise ValueError(f"condition {cond.text!r} uses unknown metrics {sorted(unknown)}; "
                                 f"expected names from {list(self._names)}")
            return cond
        if not isinstance(cond, str):
            raise TypeError(f"a stopping condition must be a str or Condition, got {type(cond).__name__}")
        return parse_condition(cond, names=self._names)

    def _as_curriculum(self, i: int, stage: Any) -> Curriculum:
        space = self.task_space
        built = True
        if isinstance(stage, Curriculum):
            cur, built = stage, False
        elif isinstance(stage, TaskSpace):
            cur = DomainRandomization(stage)
        elif isinstance(stage, list) and stage and all(space.contains_encoded(t) for t in stage):
            cur = DomainRandomization(space, tasks=stage)
        elif space.contains_encoded(stage):
            cur = Constant(space, stage)
        else:
            raise ValueError(
                f"stage {i} ({stage!r}) is not an encoded task of {space!r}, a non-empty list of them, "
                f"a TaskSpace or a Curriculum"
            )
        self._built.append(built)
        return cur

    def _reseed_built(self, seed: int | None) -> None:
        children = np.random.SeedSequence(seed).spawn(len(self.stages))
        for cur, built, child in zip(self.stages, self._built, children):
            if built:
                cur.seed(int(child.generate_state(1)[0]))

    def seed(self, seed: int | None) -> None:
        """Reseed this curriculum and the stage curricula it built (not the ones passed in)."""
        super().seed(seed)
        self._reseed_built(seed)

    def _reset_stage_stats(self) -> None:
        self.stage_steps = 0
        self.stage_episodes = 0
        self.stage_tasks = 0
        self._returns: deque[float] = deque(maxlen=self.window)
        self._progress: deque[float] = deque(maxlen=self.window)
        self._demand: dict[str, float] = dict.fromkeys(self.demand_metrics, float("nan"))
        self._refresh_means()

    def _refresh_means(self) -> None:
        # Recomputed once per episode (not per check), so checks on every step update stay O(1).
        ready = len(self._returns) >= (self.window if self.full_window else 1)
        n = len(self._returns)
        self._mean_return = math.fsum(self._returns) / n if ready else float("nan")
        self._mean_progress = math.fsum(self._progress) / n if ready else float("nan")

    # -- the stage machine --------------------------------------------------------------------------
    @property
    def requires_step_updates(self) -> bool:  # type: ignore[override]
        """True when any stage's curriculum wants step updates (then ``steps`` counts step updates)."""
        return any(s.requires_step_updates for s in self.stages)

    @property
    def requires_step_observations(self) -> bool:  # type: ignore[override]
        """True when any stage that wants step updates reads their observations."""
        return any(s.requires_step_updates and s.requires_step_observations for s in self.stages)

    @property
    def requires_step_infos(self) -> bool:  # type: ignore[override]
        """True when any stage that wants step updates reads their infos."""
        return any(s.requires_step_updates and s.requires_step_infos for s in self.stages)

    @property
    def current(self) -> Curriculum:
        """The current stage's curriculum."""
        return self.stages[self.stage]

    def stage_metrics(self) -> dict[str, float]:
        """The metrics the current stage's stopping condition is evaluated on."""
        return {
            "steps": float(self.stage_steps),
            "episodes": float(self.stage_episodes),
            "tasks": float(self.stage_tasks),
            "return": self._mean_return,
            "progress": self._mean_progress,
            "success": self._mean_progress,
            **self._demand,
        }

    def _maybe_advance(self) -> None:
        last = len(self.conditions)
        while self.stage < last and self.conditions[self.stage].evaluate(self.stage_metrics()):
            logger.info(
                "Sequential: stage %d ended (%s) after %d episodes, %d steps, %d tasks; starting stage %d",
                self.stage, self.conditions[self.stage].text, self.stage_episodes, self.stage_steps,
                self.stage_tasks, self.stage + 1,
            )
            self.stage += 1
            self._reset_stage_stats()

    def _chunk(self, remaining: int) -> int:
        """How many of ``remaining`` tasks to draw from the current stage before re-checking."""
        if self.stage >= len(self.conditions) or "tasks" not in self.conditions[self.stage].names:
            return remaining
        cond, m = self.conditions[self.stage], self.stage_metrics()
        for j in range(1, remaining):
            m["tasks"] = float(self.stage_tasks + j)
            if cond.evaluate(m):
                return j
        return remaining

    # -- sampling -----------------------------------------------------------------------------------
    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``k`` tasks from the current stage (from several stages if a ``tasks`` condition is crossed)."""
        self._check_k(k)
        self._maybe_advance()
        out: list[TaskSample] = []
        remaining = int(k)
        while remaining:
            n = self._chunk(remaining)
            out.extend(self.current.sample_tasks(n))
            self.stage_tasks += n
            self.num_sampled += n
            remaining -= n
            self._maybe_advance()
        return out

    def sample(self, k: int = 1) -> list[EncodedTask]:
        return [s.task for s in self.sample_tasks(k)]

    def distribution(self) -> np.ndarray:
        """The current stage's distribution, over ``task_space.encoded_tasks``."""
        cur = self.current
        p = cur.distribution()
        if cur.task_space is self.task_space:
            return p
        if self.task_space.num_tasks is None:
            raise NotImplementedError(f"{self.task_space!r} is not enumerable; no distribution over it")
        where = {task_key(t): i for i, t in enumerate(self.task_space.encoded_tasks)}
        out = np.zeros(len(where))
        for prob, t in zip(p, cur.task_space.encoded_tasks):
            if prob > 0:
                i = where.get(task_key(t))
                if i is None:
                    raise NotImplementedError(
                        f"stage {self.stage}'s space {cur.task_space!r} has task {t!r}, which is not an "
                        f"encoded task of {self.task_space!r}; no distribution over the latter"
                    )
                out[i] += prob
        return out

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_step(
        self,
        task: EncodedTask,
        obs: Any,
        rew: float,
        term: bool,
        trunc: bool,
        info: dict | None,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        self.current.update_on_step(task, obs, rew, term, trunc, info, progress, env_id)
        if self._count_step_updates:
            self.stage_steps += 1
            self.num_steps += 1
        self._maybe_advance()

    def update_on_step_batch(self, batch: StepBatch, env_id: int | None = None) -> None:
        """Forward the batch to the current stage in one call, split where a ``steps`` condition holds."""
        start, n = 0, len(batch)
        while start < n:
            end = n
            if self._count_step_updates and self.stage < len(self.conditions):
                cond = self.conditions[self.stage]
                if "steps" in cond.names:
                    m = self.stage_metrics()
                    for j in range(1, n - start):
                        m["steps"] = float(self.stage_steps + j)
                        if cond.evaluate(m):
                            end = start + j
                            break
            part = batch if (start, end) == (0, n) else _slice(batch, start, end)
            self.current.update_on_step_batch(part, env_id)
            if self._count_step_updates:
                self.stage_steps += end - start
                self.num_steps += end - start
            self._maybe_advance()
            start = end

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        self.on_episode(Episode(task, episode_return, length, progress, env_id))

    def on_episode(self, episode: Episode) -> None:
        """The record goes to the current stage whole; its return, length and progress count towards the
        stopping conditions."""
        ret = check_finite("episode_return", episode.episode_return)
        prog = check_finite("progress", episode.progress)
        length = episode.length
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"length must be a non-negative int, got {length!r}")
        self.current.on_episode(episode)
        self.stage_episodes += 1
        self.num_episodes += 1
        if not self._count_step_updates:
            self.stage_steps += int(length)
            self.num_steps += int(length)
        self._returns.append(ret)
        self._progress.append(prog)
        self._refresh_means()
        self._maybe_advance()

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        self.current.update_task_progress(task, progress, env_id)
        self._maybe_advance()

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Forward ``metrics`` to the current stage; record the values of ``demand_metrics`` names."""
        if not isinstance(metrics, dict):
            raise TypeError(f"update_on_demand expects a dict of metrics, got {type(metrics).__name__}")
        values = {n: check_finite(n, metrics[n]) for n in self.demand_metrics if n in metrics}
        self.current.update_on_demand(metrics)
        self._demand.update(values)
        self._maybe_advance()

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Counters, the stage index and stage metrics, and the current stage's metrics under ``stage/``."""
        out: dict[str, float] = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
        }
        inner = self.current.metrics()
        if self.current.task_space is self.task_space:  # same space: its distribution summary is ours
            out.update({k: inner[k] for k in ("curriculum/entropy", "curriculum/max_prob") if k in inner})
        out["sequential/stage"] = float(self.stage)
        for name, value in self.stage_metrics().items():
            if name != "success" and not np.isnan(value):
                out[f"sequential/stage_{name}"] = value
        for name, value in inner.items():
            out[f"stage/{name}"] = value
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            stage=self.stage,
            stage_steps=self.stage_steps,
            stage_episodes=self.stage_episodes,
            stage_tasks=self.stage_tasks,
            returns=list(self._returns),
            progress=list(self._progress),
            demand=dict(self._demand),
            window=self.window,
            conditions=[c.text for c in self.conditions],
            stages=[s.state_dict() for s in self.stages],
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("class") == type(self).__name__ and len(state["stages"]) != len(self.stages):
            raise ValueError(
                f"state_dict has {len(state['stages'])} stages, this Sequential has {len(self.stages)}"
            )
        super().load_state_dict(state)
        if list(state["conditions"]) != [c.text for c in self.conditions]:
            logger.warning(
                "Sequential: loading a state saved with stopping conditions %s into one with %s",
                state["conditions"], [c.text for c in self.conditions],
            )
        if int(state["window"]) != self.window:
            logger.warning("Sequential: state window %s differs from %d; keeping the last %d episodes",
                           state["window"], self.window, self.window)
        self.stage = int(state["stage"])
        if not 0 <= self.stage < len(self.stages):
            raise ValueError(f"state_dict stage {self.stage} is out of range for {len(self.stages)} stages")
        self.stage_steps = int(state["stage_steps"])
        self.stage_episodes = int(state["stage_episodes"])
        self.stage_tasks = int(state["stage_tasks"])
        self._returns = deque((float(x) for x in state["returns"]), maxlen=self.window)
        self._progress = deque((float(x) for x in state["progress"]), maxlen=self.window)
        self._demand = dict.fromkeys(self.demand_metrics, float("nan"))
        self._demand.update({k: float(v) for k, v in state.get("demand", {}).items() if k in self._demand})
        self._refresh_means()
        for cur, sub in zip(self.stages, state["stages"]):
            cur.load_state_dict(sub)

    def __repr__(self) -> str:
        return f"Sequential(stage {self.stage} of {len(self.stages)}: {self.current!r})"


def _slice(batch: StepBatch, start: int, end: int) -> StepBatch:
    """Steps ``start:end`` of a batch, as a new :class:`StepBatch`."""
    return StepBatch(
        tasks=list(batch.tasks[start:end]),
        rewards=batch.rewards[start:end],
        terminated=batch.terminated[start:end],
        truncated=batch.truncated[start:end],
        progress=batch.progress[start:end],
        obs=None if batch.obs is None else batch.obs[start:end],
        infos=None if batch.infos is None else batch.infos[start:end],
        env_id=batch.env_id,
    )
