"""The Curriculum and Agent APIs.

A :class:`Curriculum` chooses encoded tasks from a :class:`~magister.task_spaces.TaskSpace` and learns
from feedback. Feedback arrives through four doors, each optional for an algorithm to use:

* :meth:`Curriculum.update_on_step` / :meth:`Curriculum.update_on_step_batch` – every env step, only when
  :attr:`Curriculum.requires_step_updates` is true (otherwise no step data is ever sent); observations
  and infos travel only when :attr:`Curriculum.requires_step_observations` /
  :attr:`Curriculum.requires_step_infos` say the algorithm reads them (``None`` is passed otherwise);
* :meth:`Curriculum.update_on_episode` – once per finished episode;
* :meth:`Curriculum.update_task_progress` – a task completed (or progressed) mid-episode;
* :meth:`Curriculum.update_on_demand` – arbitrary learner-side metrics (value losses, scores, evals).

**The train flag.** Some algorithms (Robust PLR / PLR⊥, ACCEL, XLand's task filter) send *evaluation-only*
tasks whose data must not be used for gradients. :meth:`Curriculum.sample` returns bare encoded tasks;
:meth:`Curriculum.sample_tasks` returns :class:`TaskSample` envelopes, ``TaskSample(task, train)``.
The sync layer and wrappers always call ``sample_tasks`` and copy ``train`` into the env's
``info["task_train"]``, so a trainer masks evaluation-only transitions with one line.
A curriculum that never produces evaluation-only tasks need not override ``sample_tasks``.

**Agent API.** Co-player curricula (self-play, FSP, PFSP) also implement :class:`AgentCurriculum`:
``get_opponent(opponent_id)``, ``update_agent(agent)`` and ``update_winrate(opponent_id, opponent_return)``.

Checkpointing: ``state_dict()`` returns plain Python/numpy data including the random generator's state,
so ``load_state_dict`` into a fresh object continues with identical samples.
"""

from __future__ import annotations

import copy
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, _check_k

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskSample:
    """An encoded task plus its train flag.

    ``train=False`` marks an evaluation-only task (PLR⊥ / ACCEL / task filtering): the trainer must not
    use its transitions for gradient updates, though the curriculum still wants its feedback.
    """

    task: EncodedTask
    train: bool = True


@dataclass
class StepBatch:
    """A batch of consecutive step results from one environment, as sent by the sync layer.

    All sequences have the same length ``n``. ``obs`` and ``infos`` may be ``None`` when the sender was
    asked to strip them.
    """

    tasks: Sequence[EncodedTask]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    progress: np.ndarray
    obs: Sequence[Any] | None = None
    infos: Sequence[dict] | None = None
    env_id: int | None = None

    def __post_init__(self) -> None:
        n = len(self.tasks)
        self.rewards = np.asarray(self.rewards, dtype=np.float64)
        self.terminated = np.asarray(self.terminated, dtype=bool)
        self.truncated = np.asarray(self.truncated, dtype=bool)
        self.progress = np.asarray(self.progress, dtype=np.float64)
        for name in ("rewards", "terminated", "truncated", "progress"):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"StepBatch.{name} has shape {arr.shape}, expected ({n},) to match tasks")
        for name in ("obs", "infos"):
            seq = getattr(self, name)
            if seq is not None and len(seq) != n:
                raise ValueError(f"StepBatch.{name} has length {len(seq)}, expected {n}")

    def __len__(self) -> int:
        return len(self.tasks)


def check_finite(name: str, value: float) -> float:
    """Raise ``ValueError`` for NaN/inf feedback; curricula never store a non-finite number."""
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


class Curriculum(ABC):
    """Base class of every curriculum.

    Subclasses implement :meth:`sample`; they override the ``update_*`` methods they learn from, and
    extend :meth:`state_dict` / :meth:`load_state_dict` with their own state (calling ``super()``).
    """

    #: Whether the curriculum wants per-step feedback. When false, the sync layer sends none.
    requires_step_updates: bool = False
    #: Whether step feedback must carry observations. A curriculum that learns from rewards, dones and
    #: progress alone sets this to ``False``: observations are then never copied or sent (they are often
    #: the bulk of a step record), and ``obs`` is ``None`` in its step updates.
    requires_step_observations: bool = True
    #: Whether step feedback must carry the env's ``info`` dicts (``None`` in step updates when false).
    requires_step_infos: bool = True
    #: Whether the curriculum wants per-episode feedback.
    requires_episode_updates: bool = True

    def __init__(self, task_space: TaskSpace, *, seed: int | None = None) -> None:
        if not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a magister TaskSpace, got {type(task_space).__name__}")
        self.task_space = task_space
        self.rng = np.random.default_rng(seed)
        self.num_sampled = 0
        self.num_episodes = 0
        self.num_steps = 0

    # -- seeding ------------------------------------------------------------------------------------
    def seed(self, seed: int | None) -> None:
        """Reseed the curriculum; with the same seed and feedback, samples repeat exactly."""
        self.rng = np.random.default_rng(seed)

    # -- sampling -----------------------------------------------------------------------------------
    @abstractmethod
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """Return ``k`` encoded tasks (vectorised: one numpy call, not ``k`` Python loops)."""

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """Return ``k`` :class:`TaskSample` envelopes. Default: every task is a training task."""
        return [TaskSample(t, True) for t in self.sample(k)]

    def distribution(self) -> np.ndarray:
        """The current sampling distribution over ``task_space.encoded_tasks``, where one exists."""
        raise NotImplementedError(f"{type(self).__name__} does not maintain an explicit distribution")

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
        """One environment step (only called when :attr:`requires_step_updates`)."""

    def update_on_step_batch(self, batch: StepBatch, env_id: int | None = None) -> None:
        """A batch of steps from one env. Default: :meth:`update_on_step` for each, in order."""
        obs = batch.obs if batch.obs is not None else [None] * len(batch)
        infos = batch.infos if batch.infos is not None else [None] * len(batch)
        env = batch.env_id if env_id is None else env_id
        for i in range(len(batch)):
            self.update_on_step(
                batch.tasks[i], obs[i], float(batch.rewards[i]), bool(batch.terminated[i]),
                bool(batch.truncated[i]), infos[i], float(batch.progress[i]), env,
            )

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """One finished episode: its undiscounted return, length, task and final progress in [0, 1]."""

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        """Progress (success in [0, 1]) on ``task``, possibly mid-episode."""

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Learner-side feedback: anything the algorithm documents (scores, value losses, eval results)."""

    # -- introspection ------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """A flat ``{name: number}`` dict for TensorBoard / W&B."""
        out: dict[str, float] = {
            "curriculum/sampled": float(self.num_sampled),
            "curriculum/episodes": float(self.num_episodes),
        }
        try:
            p = self.distribution()
        except NotImplementedError:
            return out
        p = np.asarray(p, dtype=np.float64)
        nz = p[p > 0]
        out["curriculum/entropy"] = float(-(nz * np.log(nz)).sum())
        out["curriculum/max_prob"] = float(p.max()) if p.size else 0.0
        return out

    # -- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: counters and the random generator's state (plain data)."""
        return {
            "class": type(self).__name__,
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "num_sampled": self.num_sampled,
            "num_episodes": self.num_episodes,
            "num_steps": self.num_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`. Raises ``ValueError`` for a state of another class."""
        if state.get("class") != type(self).__name__:
            raise ValueError(
                f"state_dict is for {state.get('class')!r}, cannot load it into {type(self).__name__}"
            )
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = copy.deepcopy(state["rng"])
        self.num_sampled = int(state["num_sampled"])
        self.num_episodes = int(state["num_episodes"])
        self.num_steps = int(state["num_steps"])

    # -- helpers for subclasses ---------------------------------------------------------------------
    def _check_k(self, k: int) -> None:
        _check_k(k)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task_space!r})"


class AgentCurriculum(Curriculum):
    """Co-player curricula: the tasks they sample are opponent ids.

    The learner calls :meth:`update_agent` with the current policy (snapshotting it when the algorithm
    says so), environments call :meth:`get_opponent` with a sampled id to obtain a playable opponent,
    and episode outcomes come back through :meth:`update_winrate`.
    """

    @abstractmethod
    def get_opponent(self, opponent_id: int) -> Any:
        """The opponent (policy or loader handle) for ``opponent_id``. Unknown ids raise ``KeyError``."""

    @abstractmethod
    def update_agent(self, agent: Any) -> int | None:
        """Offer the current learning agent; returns the new opponent id if a snapshot was stored."""

    @abstractmethod
    def update_winrate(self, opponent_id: int, opponent_return: float) -> None:
        """Record one episode's result against ``opponent_id``, from the opponent's return."""


@dataclass
class EpisodeRecord:
    """A finished episode as the curricula see it (used by tests and batched helpers)."""

    task: EncodedTask
    episode_return: float
    length: int
    progress: float = 0.0
    env_id: int | None = None
    extras: dict[str, Any] = field(default_factory=dict)
