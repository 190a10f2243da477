"""DualCurriculum: one curriculum over (task, opponent) pairs, built from a task and an opponent curriculum.

Joint curricula over environments and co-players (the Syllabus paper, section 5.2: task-based curricula such
as DR or PLR used together with opponent-based ones such as FSP or PFSP; XLand trains over world x game x
co-player). The two choices are made independently,

.. math:: P(\\tau, B) = P_{task}(\\tau) \\, P_{opp}(B),

and every piece of feedback is routed to the curriculum it concerns. To the sync layer and the wrappers a
:class:`DualCurriculum` is an ordinary :class:`~magister.curricula.base.Curriculum` whose encoded tasks are
pairs ``(task, opponent_id)`` (lists after a msgpack round trip, which are accepted too), so it works through
the sync layer unchanged.

Routing
-------
* ``sample(k)`` draws ``k`` tasks and ``k`` opponents, one vectorised call each; ``sample_tasks`` marks a
  pair as a training task only if both halves are (``train = train_task and train_opponent``). A pair
  carries its task half's metadata: ``control`` is the task half's, and a task half that plays a
  ``variant`` makes the pair play ``(variant, opponent_id)``.
* ``update_on_episode``: the return goes to the task curriculum with the task half. The outcome goes to the
  opponent curriculum, judged by its :class:`~magister.curricula.coplayer.OutcomeRule` from the most
  specific information present: the opponent's own return (``opponent_return=...`` or
  ``extras["opponent_return"]``), a named agent's entry of ``extras["agent_returns"]`` (sent by the
  PettingZoo sync wrapper), else the learner's episode return. With ``derive_outcomes=False`` only an
  explicit opponent return records a result: use it when results are reported separately through
  :meth:`DualCurriculum.update_winrate`, so that no episode is counted twice. An episode with
  ``control=True`` (played by the trainer's control policy, not the learner) goes to the task curriculum
  only: it is never a result against the opponent. The task curriculum gets the episode's record
  (:class:`~magister.curricula.base.Episode`) with the task half, and the variant's task half.
* Step updates, task progress and on-demand metrics go to each curriculum (with its half of the task);
  step data is only requested when one of them wants it.
* The Agent API (``get_opponent``, ``update_agent``, ``update_winrate``) is the opponent curriculum's.
* ``state_dict`` nests both curricula's states; ``metrics`` merges theirs under ``task/`` and ``opponent/``.

>>> from magister.curricula.domain_randomization import DomainRandomization
>>> from magister.curricula.self_play import SelfPlay
>>> from magister.task_spaces.discrete import Discrete
>>> dual = DualCurriculum(DomainRandomization(Discrete(4), seed=0), SelfPlay())
>>> _ = dual.update_agent("policy")
>>> [opp for _, opp in dual.sample(3)]
[-1, -1, -1]
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask
from ..task_spaces.product import Product
from .base import AgentCurriculum, Curriculum, Episode, StepBatch, TaskSample

logger = logging.getLogger(__name__)

__all__ = ["DualCurriculum"]


class DualCurriculum(AgentCurriculum):
    """Samples ``(task, opponent_id)`` pairs from two curricula and routes feedback to both.

    Parameters
    ----------
    task_curriculum:
        Any :class:`~magister.curricula.base.Curriculum` over environment tasks.
    opponent_curriculum:
        A co-player curriculum (:class:`~magister.curricula.base.AgentCurriculum`: SelfPlay, FSP, PFSP).
    derive_outcomes:
        Whether an episode update without an explicit opponent return still records a result for the
        opponent, judged from ``extras["agent_returns"]`` or the learner's return (see the module docstring).
    seed:
        If given, reseeds both curricula with independent seeds derived from it.
    """

    def __init__(
        self,
        task_curriculum: Curriculum,
        opponent_curriculum: AgentCurriculum,
        *,
        derive_outcomes: bool = True,
        seed: int | None = None,
    ) -> None:
        if not isinstance(task_curriculum, Curriculum):
            raise TypeError(f"task_curriculum must be a Curriculum, got {type(task_curriculum).__name__}")
        if not isinstance(opponent_curriculum, AgentCurriculum):
            raise TypeError("opponent_curriculum must be an AgentCurriculum (SelfPlay, FSP, PFSP ...), got "
                            f"{type(opponent_curriculum).__name__}")
        super().__init__(Product((task_curriculum.task_space, opponent_curriculum.task_space)), seed=seed)
        self.task_curriculum = task_curriculum
        self.opponent_curriculum = opponent_curriculum
        self.derive_outcomes = bool(derive_outcomes)
        if seed is not None:
            self.seed(seed)

    # -- plumbing ---------------------------------------------------------------------------------------
    @property
    def requires_step_updates(self) -> bool:  # type: ignore[override]
        task, opp = self.task_curriculum, self.opponent_curriculum
        return bool(task.requires_step_updates or opp.requires_step_updates)

    @property
    def requires_step_observations(self) -> bool:  # type: ignore[override]
        return any(
            c.requires_step_updates and c.requires_step_observations
            for c in (self.task_curriculum, self.opponent_curriculum)
        )

    @property
    def requires_step_infos(self) -> bool:  # type: ignore[override]
        return any(
            c.requires_step_updates and c.requires_step_infos
            for c in (self.task_curriculum, self.opponent_curriculum)
        )

    def seed(self, seed: int | None) -> None:
        """Reseed this object and both curricula (independent child seeds derived from ``seed``)."""
        super().seed(seed)
        if seed is None:
            self.task_curriculum.seed(None)
            self.opponent_curriculum.seed(None)
            return
        a, b = np.random.SeedSequence(seed).generate_state(2)
        self.task_curriculum.seed(int(a))
        self.opponent_curriculum.seed(int(b))

    @staticmethod
    def _split(task: EncodedTask) -> tuple[EncodedTask, int]:
        if not isinstance(task, (tuple, list)) or len(task) != 2:
            raise ValueError(f"DualCurriculum tasks are (task, opponent_id) pairs, got {task!r}")
        return task[0], task[1]

    # -- sampling ---------------------------------------------------------------------------------------
    def sample(self, k: int = 1) -> list[tuple[EncodedTask, int]]:
        """``k`` pairs: ``k`` tasks and ``k`` opponents drawn independently (one call each)."""
        self._check_k(k)
        tasks = self.task_curriculum.sample(int(k))
        opponents = self.opponent_curriculum.sample(int(k))
        self.num_sampled += int(k)
        return list(zip(tasks, opponents))

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """``k`` pair envelopes; a pair is a training task only if both of its halves are, and carries its
        task half's ``control`` flag and variant (``(variant, opponent_id)``)."""
        self._check_k(k)
        tasks = self.task_curriculum.sample_tasks(int(k))
        opponents = self.opponent_curriculum.sample_tasks(int(k))
        self.num_sampled += int(k)
        return [
            TaskSample(
                (t.task, o.task),
                t.train and o.train,
                control=t.control,
                variant=None if t.variant is None else (t.variant, o.task),
            )
            for t, o in zip(tasks, opponents)
        ]

    # -- feedback ---------------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
        *,
        opponent_return: float | None = None,
        extras: dict[str, Any] | None = None,
        control: bool = False,
        variant: EncodedTask | None = None,
    ) -> None:
        """The learner's episode on ``task = (task, opponent_id)``; see the module docstring for routing.

        The arguments make one :class:`~magister.curricula.base.Episode` record for :meth:`on_episode`.
        ``extras`` reach both curricula's records; the opponent curriculum's outcome rule reads
        ``"opponent_return"`` or ``"agent_returns"`` in them. ``opponent_return=x`` is the same as
        ``extras={"opponent_return": x}``. ``control`` and ``variant`` are the fields of the pair's
        :class:`~magister.curricula.base.TaskSample`; a control episode records no result for the
        opponent.
        """
        if opponent_return is not None:
            extras = {**(extras or {}), "opponent_return": opponent_return}
        self.on_episode(
            Episode(task, episode_return, length, progress, env_id, control=control, variant=variant,
                    extras=extras or {})
        )

    def on_episode(self, episode: Episode) -> None:
        """Route one episode record (see :meth:`update_on_episode`): the task curriculum gets it with the
        task half (and the variant's task half), the opponent curriculum with the opponent half unless
        ``control`` is set or no outcome is to be derived."""
        t, o = self._split(episode.task)
        control = episode.control
        if control.__class__ is not bool:
            if not isinstance(control, np.bool_):
                raise TypeError(f"control must be a bool, got {type(control).__name__} {control!r:.100}")
            control = bool(control)
        extras = episode.extras
        explicit = extras.get("opponent_return") is not None
        self.num_episodes += 1
        self.num_steps += int(episode.length)
        variant = None if episode.variant is None else self._split(episode.variant)[0]
        self.task_curriculum.on_episode(replace(episode, task=t, control=control, variant=variant))
        if control or not (explicit or self.derive_outcomes):
            return  # a control episode is not the learner's: no result against the opponent
        self.opponent_curriculum.on_episode(replace(episode, task=o, control=False, variant=None))

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
        t, o = self._split(task)
        self.num_steps += 1
        if self.task_curriculum.requires_step_updates:
            self.task_curriculum.update_on_step(t, obs, rew, term, trunc, info, progress, env_id)
        if self.opponent_curriculum.requires_step_updates:
            self.opponent_curriculum.update_on_step(o, obs, rew, term, trunc, info, progress, env_id)

    def update_on_step_batch(self, batch: StepBatch, env_id: int | None = None) -> None:
        """Splits the batch's pair tasks and forwards one batch to each curriculum that wants steps."""
        halves = [self._split(t) for t in batch.tasks]
        self.num_steps += len(batch)
        for cur, side in ((self.task_curriculum, 0), (self.opponent_curriculum, 1)):
            if cur.requires_step_updates:
                cur.update_on_step_batch(
                    StepBatch([h[side] for h in halves], batch.rewards, batch.terminated, batch.truncated,
                              batch.progress, batch.obs, batch.infos, batch.env_id),
                    env_id,
                )

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        t, o = self._split(task)
        self.task_curriculum.update_task_progress(t, progress, env_id)
        self.opponent_curriculum.update_task_progress(o, progress, env_id)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Forwarded to both curricula (each uses the keys it documents)."""
        self.task_curriculum.update_on_demand(metrics)
        self.opponent_curriculum.update_on_demand(metrics)

    # -- the Agent API (the opponent curriculum's) ---------------------------------------------------------
    def get_opponent(self, opponent_id: int) -> Any:
        return self.opponent_curriculum.get_opponent(opponent_id)

    def update_agent(self, agent: Any) -> int | None:
        return self.opponent_curriculum.update_agent(agent)

    def update_winrate(self, opponent_id: int, opponent_return: float) -> None:
        self.opponent_curriculum.update_winrate(opponent_id, opponent_return)

    # -- introspection and checkpointing ------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """This object's counters plus both curricula's metrics under ``task/`` and ``opponent/``."""
        out: dict[str, float] = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
        }
        out.update({f"task/{k}": v for k, v in self.task_curriculum.metrics().items()})
        out.update({f"opponent/{k}": v for k, v in self.opponent_curriculum.metrics().items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["derive_outcomes"] = self.derive_outcomes
        state["task"] = self.task_curriculum.state_dict()
        state["opponent"] = self.opponent_curriculum.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task_curriculum.load_state_dict(state["task"])
        self.opponent_curriculum.load_state_dict(state["opponent"])

    def __repr__(self) -> str:
        return f"DualCurriculum({self.task_curriculum!r}, {self.opponent_curriculum!r})"
