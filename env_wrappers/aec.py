"""Task switching and the sync layer for PettingZoo AEC (agent-environment-cycle) environments.

The AEC twins of :class:`~magister.env_wrappers.pettingzoo_wrapper.PettingZooTaskWrapper` and
:class:`~magister.env_wrappers.sync_wrappers.PettingZooSyncWrapper`, for games written against PettingZoo's
AEC API (classic board and card games, most turn-based envs). The task arrives through the standard hook,
``env.reset(seed=..., options={"task": decoded})``, and is one per episode, shared by every agent.

* :class:`PettingZooAECTaskWrapper`: subclasses implement :meth:`~PettingZooAECTaskWrapper.change_task`
  (and optionally :meth:`~PettingZooAECTaskWrapper.task_progress`); every agent's info, as ``infos`` and
  ``last()`` show it, carries ``"task"`` (encoded) and ``"task_progress"`` (that agent's progress after the
  last step, clipped to [0, 1]). The other rules of the hook are the Gymnasium
  :class:`~magister.env_wrappers.task_wrapper.TaskWrapper`'s.
* :class:`PettingZooAECSyncWrapper`: takes each episode's task from a curriculum (an address, a server, a
  curriculum in this process), hands it down through ``reset(options={"task": ...})`` only, and reports
  the episode when it ends, i.e. when no agent is left after a ``step`` (the AEC loop's end): its return
  is the sum of every agent's rewards over the episode (``rewards`` after each step), its length the
  number of ``step`` calls, its progress the highest ``task_progress`` among the agents, and the per-agent
  returns travel in the update's ``extras["agent_returns"]``. Every agent's info also carries
  ``task_train``, ``task_control`` and, in ``infos``/``last()``, the task of the episode being played.

>>> from pettingzoo.classic import tictactoe_v3
>>> from magister.curricula.domain_randomization import DomainRandomization
>>> from magister.task_spaces.discrete import Discrete
>>> class FirstMove(PettingZooAECTaskWrapper):   # task = the square player_1 must open on
...     def change_task(self, task): self.first_move = task
>>> curriculum = DomainRandomization(Discrete(9), seed=0)
>>> env = PettingZooAECSyncWrapper(FirstMove(tictactoe_v3.env(), Discrete(9)), curriculum)
>>> env.reset(seed=0)
>>> for agent in env.agent_iter():
...     obs, reward, term, trunc, info = env.last()
...     if term or trunc:
...         action = None
...     elif env.unwrapped.board.squares.count(0) == 9:
...         action = env.first_move       # the task: the opening square
...     else:
...         action = int(obs["action_mask"].nonzero()[0][0])
...     env.step(action)
>>> info["task"] == env.first_move, curriculum.num_episodes
(True, 1)
>>> env.close()
"""

from __future__ import annotations

import logging
from typing import Any

from pettingzoo.utils.env import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper

from ..sync.feed import Assignment
from ..sync.options import FeedOptions
from ..task_spaces.base import TaskSpace
from .sync_wrappers import EpisodeTracker, Source, check_reset_task, checked_progress, find_task_space, finite
from .task_wrapper import TaskSwitching

logger = logging.getLogger(__name__)

__all__ = ["PettingZooAECTaskWrapper", "PettingZooAECSyncWrapper"]

AgentID = Any


class PettingZooAECTaskWrapper(TaskSwitching, BaseWrapper):
    """Base class of PettingZoo AEC task wrappers (see the module docstring).

    Args:
        env: A :class:`pettingzoo.AECEnv`.
        task_space: The tasks.

    Subclasses implement :meth:`change_task` and optionally :meth:`task_progress`.
    """

    def __init__(self, env: AECEnv, task_space: TaskSpace) -> None:
        if not isinstance(env, AECEnv):
            raise TypeError(f"env must be a pettingzoo AECEnv, got {type(env).__name__}")
        self._init_task_state(task_space, False)
        BaseWrapper.__init__(self, env)
        self._annotated: dict[AgentID, dict[str, Any]] = {}
        self._progress: dict[AgentID, float] = {}

    def task_progress(self, agent: AgentID, info: dict[str, Any]) -> float:
        """Progress of ``agent`` on the current task in ``[0, 1]`` after a step.
        Default: ``info.get("success", 0.0)``."""
        return info.get("success", 0.0)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset, switching to ``options["task"]`` when given (the other options go to the inner env)."""
        inner = self._take_task_option(seed, options)
        self.env.reset(seed=seed, options=inner)
        self._progress = {}
        self._annotate()

    def step(self, action: Any) -> None:
        """Step the inner env, then update every agent's progress and annotated info."""
        self.env.step(action)
        for agent, info in self.env.infos.items():
            self._progress[agent] = self._checked_progress(
                self.task_progress(agent, info), who=f" for agent {agent!r}"
            )
        self._annotate()

    def _annotate(self) -> None:
        task = self._current_task
        progress = self._progress
        self._annotated = {
            a: {**i, "task": task, "task_progress": progress.get(a, 0.0)} for a, i in self.env.infos.items()
        }

    @property
    def infos(self) -> dict[AgentID, dict[str, Any]]:
        """The inner env's infos, each with ``"task"`` and ``"task_progress"`` added (copies)."""
        return self._annotated

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.env}>"


class PettingZooAECSyncWrapper(BaseWrapper):
    """Connects a task-switching PettingZoo AEC env to a curriculum (see the module docstring).

    Args:
        env: An AEC env that takes its task through ``reset(options={"task": decoded})`` and exposes
            ``task_space`` (a :class:`PettingZooAECTaskWrapper`, possibly inside other AEC wrappers).

    ``source``, ``options`` (or its fields as keyword arguments) and ``change_task_on_completion`` are as
    for :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper`.
    Step records (only sent when the curriculum wants them) carry no observation: an AEC step is one agent's
    move.
    """

    def __init__(
        self,
        env: AECEnv,
        source: Source,
        options: FeedOptions | None = None,
        *,
        change_task_on_completion: bool = False,
        **feed_options: Any,
    ) -> None:
        if not isinstance(env, AECEnv):
            raise TypeError(f"env must be a pettingzoo AECEnv, got {type(env).__name__}")
        BaseWrapper.__init__(self, env)
        self.task_space: TaskSpace = find_task_space(env)
        self._episode = EpisodeTracker(
            source, FeedOptions.of(options, **feed_options), self.task_space, change_task_on_completion
        )
        self._infos: dict[AgentID, dict[str, Any]] = {}
        self._terminated = False  # whether an agent of this episode terminated (else it was truncated)

    @property
    def env_id(self) -> int | None:
        """The env id assigned by the curriculum server (``None`` before the first reset)."""
        return self._episode.env_id

    @property
    def assignment(self) -> Assignment | None:
        """The current task's assignment."""
        return self._episode.assignment

    @property
    def infos(self) -> dict[AgentID, dict[str, Any]]:
        """Every agent's info with the task fields (what ``last()`` returns for the agent to move)."""
        return self._infos

    def _annotate(self, progress: float) -> None:
        fields = self._episode.info_fields(progress)
        self._infos = {a: {**i, **fields} for a, i in self.env.infos.items()}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset on the next task of the curriculum (or on ``options["task"]`` when given)."""
        ep = self._episode
        ep.start(options, seed)
        opts = {**(options or {}), "task": self.task_space.decode(ep.info_task)}  # the task played
        self.env.reset(seed=seed, options=opts)
        self._terminated = False
        for info in self.env.infos.values():
            if isinstance(info, dict) and "task" in info:
                check_reset_task(info["task"], ep.info_task, self.env)
        self._annotate(0.0)

    def step(self, action: Any) -> None:
        """Play the move of the agent to act; report the episode once no agent is left."""
        ep = self._episode
        a = ep.assignment
        if a is None:
            raise RuntimeError("PettingZooAECSyncWrapper.step() called before reset()")
        self.env.step(action)
        total = 0.0
        for agent, r in self.env.rewards.items():
            v = finite(f"reward of agent {agent!r}", r, a.task)
            ep.agent_returns[agent] = ep.agent_returns.get(agent, 0.0) + v
            total += v
        for agent, info in self.env.infos.items():  # (an agent that has left keeps its last progress)
            ep.agent_progress[agent] = checked_progress(info.get("task_progress", 0.0), a.task)
        progress = max(ep.agent_progress.values(), default=0.0)
        self._terminated = self._terminated or any(self.env.terminations.values())
        over = not self.env.agents
        term, trunc = over and self._terminated, over and not self._terminated
        switch = ep.step(None, total, term, trunc, None, progress)
        if switch:
            ep.switch()
            setter = getattr(self.env, "set_task", None) or self.env.change_task
            setter(self.task_space.decode(ep.info_task))
        self._annotate(progress)

    def close(self) -> None:
        """Report an unfinished episode, return unused tasks, close the connection, then the env."""
        self._episode.close()
        self.env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.env}>"
