"""The machinery shared by the co-player curricula (SelfPlay, FSP, PFSP): outcomes, win rates, snapshots.

A co-player curriculum samples *opponent ids* (its task space is
:class:`~magister.task_spaces.opponent_ids.OpponentIdSpace`), stores snapshots of the learning policy in an
:class:`~magister.opponents.OpponentStore` and keeps, per opponent, the learner's recent results.

:class:`OutcomeRule` turns an episode return into the learner's *score* against the opponent: 1 for a
learner win, 0 for a loss, 0.5 for a draw. A win rate is the mean score over the last ``memory`` results
against that opponent (draws count half).

>>> OutcomeRule().learner_score_from_opponent_return(-1.0)
1.0
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..opponents.store import CURRENT_AGENT, OpponentStore, check_opponent_id
from ..task_spaces.opponent_ids import OpponentIdSpace
from .base import AgentCurriculum, Episode, check_finite

logger = logging.getLogger(__name__)

__all__ = ["OpponentCurriculum", "OutcomeRule"]


class OutcomeRule:
    """Maps episode returns to the learner's score against the opponent: 1 win, 0.5 draw, 0 loss.

    A return ``r`` of one side counts as a win for that side when ``r > threshold + draw_margin``, a loss when
    ``r < threshold - draw_margin`` and a draw otherwise. The default (threshold 0, margin 0) suits zero-sum
    games with returns +1/-1/0. Subclass and override the two ``learner_score_from_*`` methods for anything
    else (they must return a number in [0, 1]).

    Multi-agent envs report per-agent returns in the episode update's ``extras["agent_returns"]`` (the
    episode return is then the *sum* over agents, which says nothing about who won a zero-sum game). Name the
    opponent's agent (``opponent_agent``) or the learner's (``learner_agent``) and
    :meth:`learner_score_from_episode` reads that agent's return instead.

    >>> rule = OutcomeRule(threshold=0.0, draw_margin=0.1)
    >>> rule.learner_score_from_opponent_return(1.0), rule.learner_score_from_learner_return(1.0)
    (0.0, 1.0)
    >>> rule.learner_score_from_learner_return(0.05)
    0.5
    >>> rule = OutcomeRule(opponent_agent="p1")
    >>> rule.learner_score_from_episode(0.0, {"agent_returns": {"p0": 1.0, "p1": -1.0}})
    1.0
    """

    def __init__(
        self,
        threshold: float = 0.0,
        draw_margin: float = 0.0,
        *,
        learner_agent: str | None = None,
        opponent_agent: str | None = None,
    ) -> None:
        self.threshold = check_finite("threshold", threshold)
        self.draw_margin = check_finite("draw_margin", draw_margin)
        if self.draw_margin < 0:
            raise ValueError(f"draw_margin must be >= 0, got {draw_margin!r}")
        if learner_agent is not None and opponent_agent is not None:
            raise ValueError("name learner_agent or opponent_agent, not both")
        self.learner_agent = None if learner_agent is None else str(learner_agent)
        self.opponent_agent = None if opponent_agent is None else str(opponent_agent)
        self._warned_sum = False

    def _side_score(self, r: float) -> float:
        if r > self.threshold + self.draw_margin:
            return 1.0
        if r < self.threshold - self.draw_margin:
            return 0.0
        return 0.5

    def learner_score_from_opponent_return(self, opponent_return: float) -> float:
        """The learner's score, from the opponent's episode return."""
        return 1.0 - self._side_score(opponent_return)

    def learner_score_from_learner_return(self, learner_return: float) -> float:
        """The learner's score, from the learner's own episode return."""
        return self._side_score(learner_return)

    def learner_score_from_episode(
        self, episode_return: float, extras: dict[str, Any] | None = None
    ) -> float:
        """The learner's score for one episode update, using the most specific information present.

        In order: ``extras["opponent_return"]``; the named agent's entry of ``extras["agent_returns"]``;
        else ``episode_return`` as the learner's return. A named agent missing from ``agent_returns`` raises
        ``KeyError`` naming it and the agents present.
        """
        extras = extras or {}
        if extras.get("opponent_return") is not None:
            r = check_finite("extras['opponent_return']", extras["opponent_return"])
            return self.learner_score_from_opponent_return(r)
        returns = extras.get("agent_returns")
        if returns:
            name = self.opponent_agent if self.opponent_agent is not None else self.learner_agent
            if name is None:
                if not self._warned_sum:
                    logger.warning("episode extras carry agent_returns but the OutcomeRule names neither "
                                   "learner_agent nor opponent_agent; judging outcomes by the summed return")
                    self._warned_sum = True
            else:
                if name not in returns:
                    raise KeyError(f"agent {name!r} is not in the episode's agent_returns "
                                   f"(agents: {sorted(returns)})")
                r = check_finite(f"agent_returns[{name!r}]", returns[name])
                if self.opponent_agent is not None:
                    return self.learner_score_from_opponent_return(r)
                return self.learner_score_from_learner_return(r)
        return self.learner_score_from_learner_return(check_finite("episode_return", episode_return))

    def __repr__(self) -> str:
        return (f"OutcomeRule(threshold={self.threshold}, draw_margin={self.draw_margin}, "
                f"learner_agent={self.learner_agent!r}, opponent_agent={self.opponent_agent!r})")


class _Results:
    """The last ``memory`` scores against one opponent, with a running sum."""

    __slots__ = ("scores", "total")

    def __init__(self, memory: int, scores: Sequence[float] = ()) -> None:
        self.scores: deque[float] = deque(maxlen=memory)
        self.total = 0.0
        for s in scores:
            self.add(s)

    def add(self, score: float) -> None:
        if len(self.scores) == self.scores.maxlen:
            self.total -= self.scores[0]
        self.scores.append(score)
        self.total += score


def _default_snapshot(agent: Any) -> Any:
    sd = getattr(agent, "state_dict", None)
    return sd() if callable(sd) else agent


class OpponentCurriculum(AgentCurriculum):
    """Shared machinery of the co-player curricula; subclasses implement ``sample`` and ``distribution``.

    * :meth:`update_agent` counts calls and stores a snapshot on the first call and then every
      ``checkpoint_interval`` calls (calls ``1, 1 + c, 1 + 2c, ...``), so the store is never empty once the
      learner has offered its policy. The snapshot is ``snapshot_fn(agent)``, by default
      ``agent.state_dict()`` when the agent has one, else the agent itself.
    * :meth:`get_opponent` loads a snapshot from the store (``make_agent(snapshot)`` if given);
      :data:`CURRENT_AGENT` (-1) is the object last given to :meth:`update_agent`.
    * Results: :meth:`update_winrate` takes the *opponent's* return, :meth:`update_on_episode` the
      *learner's* return (or per-agent returns in ``extras``) with the task being the opponent id; both go
      through ``outcome_rule`` and into a per-opponent memory of the last ``memory`` scores. A result for an
      evicted opponent (late feedback) is dropped with a debug log; an id the store never issued raises
      ``KeyError``.
    """

    def __init__(
        self,
        store: OpponentStore | None,
        *,
        checkpoint_interval: int,
        outcome_rule: OutcomeRule | None = None,
        memory: int = 128,
        initial_winrate: float = 0.5,
        snapshot_fn: Callable[[Any], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        extra_ids: Sequence[int] = (),
        seed: int | None = None,
    ) -> None:
        if store is not None and not isinstance(store, OpponentStore):
            raise TypeError(f"store must be an OpponentStore, got {type(store).__name__}")
        if isinstance(checkpoint_interval, bool) or not isinstance(checkpoint_interval, (int, np.integer)) \
                or checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval must be a positive int, got {checkpoint_interval!r}")
        if isinstance(memory, bool) or not isinstance(memory, (int, np.integer)) or memory < 1:
            raise ValueError(f"memory must be a positive int (number of results kept), got {memory!r}")
        initial_winrate = check_finite("initial_winrate", initial_winrate)
        if not 0.0 <= initial_winrate <= 1.0:
            raise ValueError(f"initial_winrate must be in [0, 1], got {initial_winrate!r}")
        if outcome_rule is not None and not isinstance(outcome_rule, OutcomeRule):
            raise TypeError(f"outcome_rule must be an OutcomeRule, got {type(outcome_rule).__name__}")
        super().__init__(OpponentIdSpace(store, extra_ids=extra_ids), seed=seed)
        self.store = store
        self.checkpoint_interval = int(checkpoint_interval)
        self.outcome_rule = outcome_rule or OutcomeRule()
        self.memory = int(memory)
        self.initial_winrate = initial_winrate
        self.snapshot_fn = snapshot_fn or _default_snapshot
        self.make_agent = make_agent
        self.num_updates = 0
        self.num_results = 0
        self._agent: Any = None
        self._has_agent = False
        self._results: dict[int, _Results] = {}
        self._version = 0  # bumped on every recorded result (invalidates cached distributions)

    # -- the Agent API -------------------------------------------------------------------------------
    def update_agent(self, agent: Any) -> int | None:
        """Offer the current policy; returns the new snapshot's id when one was stored, else ``None``."""
        self.num_updates += 1
        self._agent, self._has_agent = agent, True
        if self.store is None or (self.num_updates - 1) % self.checkpoint_interval != 0:
            return None
        new_id = self.store.add(self.snapshot_fn(agent))
        alive = set(self.store.ids()) | set(self.task_space.extra_ids)
        for gone in [i for i in list(self._results) if i not in alive]:
            del self._results[gone]
        self._version += 1
        logger.info("%s: stored opponent %d after %d updates", type(self).__name__, new_id, self.num_updates)
        return new_id

    def get_opponent(self, opponent_id: int) -> Any:
        """The opponent for ``opponent_id``: a loaded snapshot (via ``make_agent``) or the current agent."""
        i = check_opponent_id(opponent_id)
        if i == CURRENT_AGENT:
            if not self._has_agent:
                raise RuntimeError("no current agent yet: call update_agent(agent) first")
            return self._agent
        if self.store is None:
            raise KeyError(f"opponent id {i} is unknown: {type(self).__name__} has no store "
                           f"(known ids: {self.task_space.ids()})")
        snap = self.store.load(i)
        return self.make_agent(snap) if self.make_agent is not None else snap

    def update_winrate(self, opponent_id: int, opponent_return: float) -> None:
        """Record one episode against ``opponent_id`` from the *opponent's* return."""
        r = check_finite("opponent_return", opponent_return)
        self._record(opponent_id, self.outcome_rule.learner_score_from_opponent_return(r))

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: Any,
        progress: float,
        env_id: int | None = None,
        *,
        extras: dict[str, Any] | None = None,
    ) -> None:
        """One finished episode of the learner (``episode_return``) against opponent ``task``.

        ``extras`` (the sync layer's episode extras) may carry ``"opponent_return"`` or ``"agent_returns"``;
        :meth:`OutcomeRule.learner_score_from_episode` decides which number judges the outcome.
        """
        check_finite("episode_return", episode_return)
        score = self.outcome_rule.learner_score_from_episode(episode_return, extras)
        self.num_episodes += 1
        self.num_steps += int(length)
        self._record(task, score)

    def on_episode(self, episode: Episode) -> None:
        """:meth:`update_on_episode` with the record's ``extras``."""
        self.update_on_episode(
            episode.episode_return, episode.length, episode.task, episode.progress, episode.env_id,
            extras=episode.extras,
        )

    def _record(self, opponent_id: Any, score: float) -> None:
        i = check_opponent_id(opponent_id)
        score = check_finite("outcome score", score)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"outcome rule returned {score!r}; scores must be in [0, 1]")
        if not self.task_space.contains(i):
            if self.store is not None and self.store.was_issued(i):
                logger.debug("dropping a result against evicted opponent %d", i)
                return
            raise KeyError(f"opponent id {i} is unknown to {type(self).__name__} "
                           f"(known ids: {self.task_space.ids()})")
        res = self._results.get(i)
        if res is None:
            res = self._results[i] = _Results(self.memory)
        res.add(score)
        self.num_results += 1
        self._version += 1

    # -- win rates -------------------------------------------------------------------------------------
    def opponent_ids(self) -> list[int]:
        """The opponents that can be sampled now, ascending."""
        return self.task_space.ids()

    def winrate(self, opponent_id: int) -> float:
        """The learner's win rate against ``opponent_id`` (``initial_winrate`` before any result)."""
        res = self._results.get(check_opponent_id(opponent_id))
        if res is None or not res.scores:
            return self.initial_winrate
        return res.total / len(res.scores)

    def winrates(self, ids: Sequence[int] | None = None) -> np.ndarray:
        """Win rates of ``ids`` (default: :meth:`opponent_ids`) as a float64 array."""
        ids = self.opponent_ids() if ids is None else ids
        return np.fromiter((self.winrate(i) for i in ids), dtype=np.float64, count=len(ids))

    def _ids_or_raise(self) -> list[int]:
        ids = self.opponent_ids()
        if not ids:
            raise RuntimeError(f"{type(self).__name__} has no opponents yet: call update_agent(agent) first")
        return ids

    # -- introspection and checkpointing ------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Base metrics plus store size, update count and the win rate against each sampleable opponent."""
        ids = self.opponent_ids()
        out = super().metrics() if ids else {"curriculum/sampled": float(self.num_sampled),
                                             "curriculum/episodes": float(self.num_episodes)}
        out["curriculum/store_size"] = float(len(self.store)) if self.store is not None else 0.0
        out["curriculum/agent_updates"] = float(self.num_updates)
        out["curriculum/results"] = float(self.num_results)
        rates = self.winrates(ids)
        for i, w in zip(ids, rates):
            out[f"curriculum/winrate/{i}"] = float(w)
        if ids:
            out["curriculum/mean_winrate"] = float(rates.mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        """Counters, the generator and the result memories (snapshots themselves stay in the store)."""
        state = super().state_dict()
        state.update({
            "num_updates": self.num_updates,
            "num_results": self.num_results,
            "memory": self.memory,
            "results": {int(i): list(r.scores) for i, r in self._results.items()},
            "store_directory": str(self.store.directory) if self.store is not None else None,
        })
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if int(state["memory"]) != self.memory:
            logger.warning("loading results kept with memory=%s into memory=%s", state["memory"], self.memory)
        self.num_updates = int(state["num_updates"])
        self.num_results = int(state["num_results"])
        self._results = {int(i): _Results(self.memory, s) for i, s in state["results"].items()}
        self._version += 1
