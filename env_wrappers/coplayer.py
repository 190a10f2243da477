"""Co-player environments: a learner against opponents loaded, by id, inside the environment's process.

Co-player curricula (:class:`~magister.curricula.self_play.SelfPlay`, :class:`~magister.curricula.fsp.FSP`,
:class:`~magister.curricula.pfsp.PFSP`, or a :class:`~magister.curricula.dual.DualCurriculum` pairing one of
them with a task curriculum) choose *opponent ids*. The snapshots themselves live in an
:class:`~magister.opponents.store.OpponentStore` on disk. :class:`CoPlayerWrapper` is the env side:

* it turns a PettingZoo parallel env with two or more agents into a *learner-vs-opponent* env: the learner
  controls some agent slots (fixed, or one slot drawn at random each episode, so a symmetric game is learnt
  from both sides), the opponent controls the others;
* on ``reset`` the opponent id arrives as the task (``options={"task": opponent_id}``, or a
  ``(task, opponent_id)`` pair from a DualCurriculum, whose first half goes on to the inner task wrapper),
  normally put there by :class:`~magister.env_wrappers.sync_wrappers.PettingZooSyncWrapper`, so the id
  travels through the sync layer and the worker loads the snapshot itself (an
  :class:`~magister.opponents.loader.OpponentLoader` keeps it leased while it is played, so the
  store never deletes it under the env, and cached, so the same id is read from disk once);
* the opponent's agents act inside the wrapper (``policy_fn(opponent, obs, agent) -> action``); the learner
  sees only its own agents (``env.agents``);
* at the end of an episode :meth:`CoPlayerWrapper.episode_extras` reports the returns of *all* agents, the
  opponent's return (the mean over the agents it played), which agents it played and the id it played.
  The PettingZoo sync wrapper puts these into the episode update's ``extras``, where the co-player
  curricula's :class:`~magister.curricula.coplayer.OutcomeRule` reads ``"opponent_return"``.

Turn-based games (``turn_based=True``): every agent's info must say whether it is that agent's turn
(``info["to_move"]``, as :class:`TurnBasedParallelEnv` provides). The wrapper then plays the opponent's
turns itself and returns to the learner only when one of its agents is to move (or the game is over); the
rewards of the skipped steps are added to the learner's reward of the step that returns.

Two small adapters complete the picture: :class:`TurnBasedParallelEnv` converts a turn-based AEC game (such
as ``pettingzoo.classic.tictactoe_v3``, which PettingZoo's ``aec_to_parallel`` refuses) to the parallel API,
and :class:`SingleLearnerEnv` presents an env whose learner plays exactly one agent per episode as a
Gymnasium env, for vector envs and single-agent trainers.

Adding PFSP to a PettingZoo training script takes a few lines on each side::

    store = OpponentStore("runs/opponents", max_count=16)       # learner process
    pfsp = PFSP(store)                                          # or FSP(store), SelfPlay(store)
    server = serve(pfsp)

    def make_env():                                             # runs in each worker process
        game = CoPlayerWrapper(my_parallel_env(), "runs/opponents", make_agent=build_policy)
        return PettingZooSyncWrapper(game, server.address)

    ...                                                         # the training loop, unchanged
    with server.lock:
        pfsp.update_agent(policy)                               # after each update; snapshots as PFSP says

``build_policy(state_dict)`` turns a stored snapshot into a callable ``policy(obs) -> action`` (or pass
``policy_fn``). :mod:`magister.examples.selfplay_pz` is a complete run on tic-tac-toe.

>>> import json, tempfile
>>> from magister.opponents import OpponentStore
>>> from magister.examples.tiny_pz import TinyTag
>>> d = tempfile.mkdtemp()
>>> store = OpponentStore(d, max_count=None, save_fn=lambda o, f: f.write(json.dumps(o).encode()),
...                       load_fn=lambda f: json.loads(f.read()))
>>> store.add({"move": 0})
0
>>> env = CoPlayerWrapper(TinyTag(max_cycles=3), d, learner_agents=["chaser"],
...                       load_fn=lambda f: json.loads(f.read()),
...                       policy_fn=lambda opponent, obs, agent: opponent["move"])
>>> obs, infos = env.reset(seed=0, options={"task": 0})
>>> env.agents, infos["chaser"]["opponent_id"], env.loaded_ids
(['chaser'], 0, [0])
>>> while env.agents:
...     _ = env.step({"chaser": 0})
>>> extras = env.episode_extras()
>>> extras["opponent_agents"], extras["opponent_return"]
({'runner': 0}, 0.0)
>>> env.close()
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers.base_parallel import BaseParallelWrapper

from ..opponents import CURRENT_AGENT, OpponentLoader, OpponentStore
from ..task_spaces.base import TaskSpace
from ..task_spaces.product import Product

logger = logging.getLogger(__name__)

__all__ = ["CoPlayerWrapper", "OpponentIds", "SingleLearnerEnv", "TurnBasedParallelEnv"]

AgentID = Any
PolicyFn = Callable[[Any, Any, AgentID], Any]

#: Most opponent-only steps played in a row in turn-based mode before the wrapper gives up (a game whose
#: ``to_move`` flags never come back to the learner would otherwise loop forever).
MAX_OPPONENT_TURNS = 10_000


def _is_id(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class OpponentIds(TaskSpace[int]):
    """Worker-side task space of opponent ids: any id a store can have issued (an int ``>= 0``).

    The learner's :class:`~magister.task_spaces.opponent_ids.OpponentIdSpace` contains only the ids in the
    store *now*; a worker must also accept an id evicted after it was sent (the loader then reports it, or
    plays the newest snapshot with ``fallback_to_latest``), so this space checks the form only and leaves
    the rest to the loader. ``allow_current=True`` also admits
    :data:`~magister.opponents.store.CURRENT_AGENT` (``-1``), which only an in-process env can
    play. ``sample()`` draws from the store's current ids when a directory is given.

    >>> space = OpponentIds()
    >>> space.contains(7), space.contains(-1), space.contains(True), space.decode(3)
    (True, False, False, 3)
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        allow_current: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed)
        self.directory = None if directory is None else str(directory)
        self.allow_current = bool(allow_current)

    def contains(self, task: Any) -> bool:
        return _is_id(task) and (int(task) >= 0 or (self.allow_current and int(task) == CURRENT_AGENT))

    def encode(self, task: int) -> int:
        if not self.contains(task):
            allowed = "an int >= 0" + (" or -1 (the current agent)" if self.allow_current else "")
            raise ValueError(f"opponent id {task!r} is not in {self!r} (expected {allowed})")
        return int(task)

    decode = encode

    @property
    def num_tasks(self) -> None:
        """``None``: the ids a store issues are unbounded."""
        return None

    def sample(self) -> int:
        """A uniformly drawn id among those in the store now (needs ``directory``)."""
        if self.directory is None:
            raise TypeError("OpponentIds without a store directory cannot sample ids")
        ids = OpponentStore(self.directory, max_count=None, create=False).ids()
        if not ids:
            raise RuntimeError(f"the opponent store at {self.directory} is empty")
        return ids[int(self.rng.integers(len(ids)))]

    def _encoding_spec(self) -> Any:
        return ("opponent ids",)  # as the learner's OpponentIdSpace: an id is its own encoding

    def __repr__(self) -> str:
        return f"OpponentIds(directory={self.directory!r}, allow_current={self.allow_current})"


def _find_task_space(env: Any) -> TaskSpace | None:
    """The ``task_space`` of ``env`` or of a wrapper inside it, or ``None``."""
    e = env
    for _ in range(32):
        space = getattr(e, "task_space", None)
        if isinstance(space, TaskSpace):
            return space
        if not hasattr(e, "env"):
            return None
        e = e.env
    return None


def _call_opponent(opponent: Any, obs: Any, agent: AgentID) -> Any:
    if not callable(opponent):
        raise TypeError(
            f"the opponent playing {agent!r} is a {type(opponent).__name__}, which is not callable; pass "
            "policy_fn=lambda opponent, obs, agent: action, or a make_agent that returns a callable policy"
        )
    return opponent(obs)


class CoPlayerWrapper(BaseParallelWrapper):
    """A learner-vs-opponent view of a multi-agent PettingZoo parallel env (see the module docstring).

    Args:
        env: A PettingZoo ``ParallelEnv`` with at least two agents (possibly a task wrapper).
        opponents: Where opponents come from: an opponent store's directory (str or path; a read-only
            :class:`~magister.opponents.loader.OpponentLoader` is opened lazily, in the process that
            first resets, i.e. in the worker), an :class:`~magister.opponents.store.OpponentStore`
            (its directory and ``load_fn``), a ready
            :class:`~magister.opponents.loader.OpponentLoader`, or, for envs in the learner's
            process, a co-player curriculum (anything with
            ``get_opponent(id)``; then :data:`~magister.opponents.store.CURRENT_AGENT` is allowed).
        policy_fn: ``policy_fn(opponent, obs, agent) -> action`` for each agent the opponent controls.
            Default: ``opponent(obs)``.
        learner_agents: The agents the learner controls: a sequence of agent names (the same every
            episode), or ``"random"`` (default): one agent drawn uniformly each episode, the opponent
            plays the rest.
        turn_based: Play the opponent's turns inside the wrapper (needs ``info["to_move"]``).
        load_fn: For a directory or store: how snapshots are deserialised (default ``torch.load``; see
            ``OpponentLoader``).
        make_agent: For a directory or store: how a loaded snapshot becomes a playable agent.
        fallback_to_latest: For a directory or store: whether an id evicted before the worker loaded it
            is replaced by the newest snapshot.
        env_tasks: Whether the task is a ``(task, opponent_id)`` pair whose first half goes to the inner
            env as ``options["task"]``. Default: when the inner env has a ``task_space``.
        seed: Seeds the draw of the learner's agents (a ``reset(seed=...)`` reseeds it).

    Attributes:
        opponent_id: The id played this episode (``None`` before the first reset).
        loaded_ids: Ids this wrapper loaded from disk, in order (a cached id is not loaded again).
        task_space: :class:`OpponentIds`, or ``Product((inner task space, OpponentIds))`` with env tasks.
    """

    def __init__(
        self,
        env: ParallelEnv,
        opponents: str | os.PathLike | OpponentStore | OpponentLoader | Any,
        *,
        policy_fn: PolicyFn | None = None,
        learner_agents: Sequence[AgentID] | str = "random",
        turn_based: bool = False,
        load_fn: Callable[[BinaryIO], Any] | None = None,
        make_agent: Callable[[Any], Any] | None = None,
        fallback_to_latest: bool = False,
        env_tasks: bool | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(env, ParallelEnv):
            raise TypeError(f"env must be a pettingzoo ParallelEnv, got {type(env).__name__}")
        super().__init__(env)
        possible = list(env.possible_agents)
        if len(possible) < 2:
            raise ValueError(
                f"a co-player env needs at least two agents, {type(env).__name__} has {possible}"
            )
        if isinstance(learner_agents, str):
            if learner_agents != "random":
                raise ValueError(
                    f"learner_agents must be 'random' or a sequence of agents, got {learner_agents!r}"
                )
            self._fixed: list[AgentID] | None = None
        else:
            fixed = list(learner_agents)
            unknown = [a for a in fixed if a not in possible]
            if not fixed or unknown or len(set(fixed)) != len(fixed) or len(fixed) == len(possible):
                raise ValueError(
                    f"learner_agents must be distinct agents of {possible}, leaving at least one to the "
                    f"opponent; got {fixed}"
                )
            self._fixed = fixed
        if policy_fn is not None and not callable(policy_fn):
            raise TypeError(f"policy_fn must be callable (opponent, obs, agent) -> action, got {policy_fn!r}")
        self.policy_fn: PolicyFn = policy_fn or _call_opponent
        self.turn_based = bool(turn_based)
        self.fallback_to_latest = bool(fallback_to_latest)
        self.make_agent = make_agent
        self.load_fn = load_fn

        self._loader: OpponentLoader | None = None
        self._curriculum: Any = None
        self._directory: str | None = None
        if isinstance(opponents, OpponentLoader):
            if load_fn is not None or make_agent is not None or fallback_to_latest:
                raise ValueError("load_fn, make_agent and fallback_to_latest configure a new loader; "
                                 "set them on the OpponentLoader you pass instead")
            self._loader = opponents
            self._directory = str(opponents.store.directory)
        elif isinstance(opponents, OpponentStore):
            self._directory = str(opponents.directory)
            if self.load_fn is None:
                self.load_fn = opponents.load_fn
        elif isinstance(opponents, (str, os.PathLike)):
            self._directory = os.fspath(opponents)
        elif callable(getattr(opponents, "get_opponent", None)):
            if load_fn is not None or make_agent is not None or fallback_to_latest:
                raise ValueError("load_fn, make_agent and fallback_to_latest apply to stores; a curriculum's "
                                 "get_opponent returns playable opponents itself")
            self._curriculum = opponents
        else:
            raise TypeError(
                "opponents must be an opponent store directory, an OpponentStore, an OpponentLoader or a "
                f"co-player curriculum (with get_opponent), got {type(opponents).__name__}"
            )
        ids = OpponentIds(self._directory, allow_current=self._curriculum is not None)
        inner_space = _find_task_space(env)
        if env_tasks is None:
            env_tasks = inner_space is not None
        if env_tasks and inner_space is None:
            raise ValueError(f"env_tasks=True but {type(env).__name__} has no task_space")
        self.env_tasks = bool(env_tasks)
        self.opponent_ids = ids
        self.task_space: TaskSpace = Product((inner_space, ids)) if self.env_tasks else ids  # type: ignore[arg-type]
        self._task: Any = None  # the encoded task of the running episode (reported in every info)

        self.possible_agents = possible if self._fixed is None else list(self._fixed)
        self.agents: list[AgentID] = []
        self.opponent_id: int | None = None
        self.loaded_ids: list[int] = []
        self._opponent: Any = None
        self._rng = np.random.default_rng(seed)
        self._learner: list[AgentID] = []
        self._opponent_agents: list[AgentID] = []
        self._returns: dict[AgentID, float] = {}
        self._obs: dict[AgentID, Any] = {}
        self._infos: dict[AgentID, dict] = {}

    # -- opponents -----------------------------------------------------------------------------------
    @property
    def loader(self) -> OpponentLoader | None:
        """The worker-side loader (created on first use; ``None`` for in-process curricula)."""
        if self._loader is None and self._directory is not None:
            self._loader = OpponentLoader(self._directory, load_fn=self.load_fn, make_agent=self.make_agent,
                                          fallback_to_latest=self.fallback_to_latest)
        return self._loader

    def _load(self, opponent_id: int) -> None:
        if self._curriculum is not None:
            self._opponent = self._curriculum.get_opponent(opponent_id)
            self.opponent_id = opponent_id
            return
        if opponent_id == CURRENT_AGENT:
            raise ValueError(
                "opponent id -1 (CURRENT_AGENT, the learner's live policy) cannot be loaded from a store "
                "in an environment process; use SelfPlay(store) so workers receive the newest snapshot's "
                "id, or pass the curriculum itself as `opponents` for envs in the learner's process"
            )
        loader = self.loader
        assert loader is not None
        before = loader.current_id
        try:
            self._opponent = loader.get(opponent_id)
        except KeyError as exc:
            msg = exc.args[0] if exc.args else exc
            raise KeyError(
                f"co-player env (pid {os.getpid()}) cannot play opponent {opponent_id}: {msg}"
            ) from exc
        self.opponent_id = loader.current_id
        if self.opponent_id != before:
            self.loaded_ids.append(int(self.opponent_id))  # type: ignore[arg-type]
            logger.debug("pid %d loaded opponent %s", os.getpid(), self.opponent_id)

    # -- turns -----------------------------------------------------------------------------------------
    def _to_move(self, agent: AgentID) -> bool:
        info = self._infos.get(agent)
        if not isinstance(info, dict) or "to_move" not in info:
            raise KeyError(
                f"turn_based=True needs info['to_move'] for every agent; agent {agent!r} has info {info!r}"
            )
        return bool(info["to_move"])

    def _live(self, agents: Sequence[AgentID]) -> list[AgentID]:
        inner = set(self.env.agents)
        return [a for a in agents if a in inner]

    def _opponent_actions(self) -> dict[AgentID, Any]:
        acts = {}
        for a in self._live(self._opponent_agents):
            if self.turn_based and not self._to_move(a):
                continue
            acts[a] = self.policy_fn(self._opponent, self._obs[a], a)
        return acts

    def _inner_step(self, actions: dict[AgentID, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rews, terms, truncs, infos = self.env.step(actions)
        for a, r in rews.items():
            self._returns[a] = self._returns.get(a, 0.0) + float(r)
        self._obs.update(obs)
        self._infos.update({a: i for a, i in infos.items() if a in self._returns})
        return obs, rews, terms, truncs, infos

    def _learner_waits(self) -> bool:
        """Turn-based: the game goes on and none of the learner's live agents is to move."""
        live = self._live(self._learner)
        return bool(live) and bool(self.env.agents) and not any(self._to_move(a) for a in live)

    def _play_opponent_turns(self) -> tuple[dict, dict, dict, dict]:
        """Opponent-only steps until a learner agent is to move; returns the merged learner results."""
        rews: dict[AgentID, float] = {}
        terms: dict[AgentID, bool] = {}
        truncs: dict[AgentID, bool] = {}
        infos: dict[AgentID, dict] = {}
        for _ in range(MAX_OPPONENT_TURNS):
            if not self._learner_waits():
                return rews, terms, truncs, infos
            acts = self._opponent_actions()
            if not acts:
                raise RuntimeError(f"turn-based game stuck: neither the learner's agents {self._learner} nor "
                                   f"the opponent's {self._opponent_agents} are to move")
            _, r, te, tr, inf = self._inner_step(acts)
            for a in self._learner:
                if a in r:
                    rews[a] = rews.get(a, 0.0) + float(r[a])
                if a in te:
                    terms[a] = bool(te[a])
                if a in tr:
                    truncs[a] = bool(tr[a])
                if a in inf:
                    infos[a] = inf[a]
        raise RuntimeError(
            f"the opponent played {MAX_OPPONENT_TURNS} turns in a row; is info['to_move'] right?"
        )

    # -- the parallel API ------------------------------------------------------------------------------
    def _annotate(self, infos: dict[AgentID, dict], agents: Sequence[AgentID]) -> dict[AgentID, dict]:
        out = {}
        for a in agents:
            d = dict(infos.get(a) or {})
            d["opponent_id"] = self.opponent_id
            if self._task is not None:  # this wrapper's own task (the pair, or the opponent id), encoded
                d["task"] = self._task
            out[a] = d
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, dict]]:
        """Start an episode against the opponent named by ``options["task"]`` (kept from the last episode
        when absent)."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        opts = dict(options) if options else {}
        if "task" in opts:
            task = opts.pop("task")
            if self.env_tasks:
                if not isinstance(task, (tuple, list)) or len(task) != 2:
                    raise ValueError(f"task {task!r}: this co-player env expects a (task, opponent_id) pair")
                opts["task"], opp = task[0], task[1]
            else:
                opp = task
            current = _is_id(opp) and int(opp) == CURRENT_AGENT  # _load explains where it can be played
            if not (current or self.opponent_ids.contains(opp)):
                raise ValueError(f"opponent id {opp!r} is not in {self.opponent_ids!r}")
            self._load(int(opp))
            self._task = self.task_space.encode(task)
        elif self.opponent_id is None:
            raise ValueError("no opponent yet: reset with options={'task': opponent_id} (the "
                             "PettingZooSyncWrapper does this with the curriculum's choice)")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        possible = list(self.env.possible_agents)
        if self._fixed is None:
            self._learner = [possible[int(self._rng.integers(len(possible)))]]
        else:
            self._learner = list(self._fixed)
        self._opponent_agents = [a for a in possible if a not in self._learner]
        obs, infos = self.env.reset(seed=seed, options=opts or None)
        self._returns = {a: 0.0 for a in possible}
        self._obs, self._infos = dict(obs), {a: i for a, i in infos.items() if a in possible}
        if self.turn_based:
            rews, _, _, _ = self._play_opponent_turns()
            if any(rews.values()):
                logger.warning("co-player env: rewards %s reached the learner before its first move", rews)
        self.agents = self._live(self._learner)
        if not self.agents:
            raise RuntimeError("the episode ended before the learner's first move")
        out = {a: self._obs[a] for a in self.agents}
        return out, self._annotate(self._infos, self.agents)

    def step(self, actions: dict[AgentID, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Step the learner's agents with ``actions`` and the opponent's with its policy."""
        if not self.agents:
            raise RuntimeError(
                "CoPlayerWrapper.step() called with no live learner agents; call reset() first"
            )
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict agent -> action, got {type(actions).__name__}")
        stepping = list(self.agents)
        extra = [a for a in actions if a not in stepping]
        if extra:
            raise KeyError(f"actions name agents {extra} that the learner does not control now "
                           f"(the learner plays {stepping}, the opponent {self._opponent_agents})")
        needed = [a for a in stepping if not self.turn_based or self._to_move(a)]
        missing = [a for a in needed if a not in actions]
        if missing:
            raise KeyError(f"no action for the learner's agents {missing}")
        inner_actions = {a: actions[a] for a in stepping if a in actions}
        inner_actions.update(self._opponent_actions())
        obs, r, te, tr, inf = self._inner_step(inner_actions)
        rews = {a: float(r.get(a, 0.0)) for a in stepping}
        terms = {a: bool(te.get(a, False)) for a in stepping}
        truncs = {a: bool(tr.get(a, False)) for a in stepping}
        infos = {a: inf.get(a, {}) for a in stepping}
        if self.turn_based:
            more_r, more_te, more_tr, more_inf = self._play_opponent_turns()
            for a, v in more_r.items():
                rews[a] += v
            terms.update({a: v for a, v in more_te.items() if a in terms})
            truncs.update({a: v for a, v in more_tr.items() if a in truncs})
            infos.update({a: v for a, v in more_inf.items() if a in infos})
        self.agents = self._live(self._learner)
        if not self.env.agents:  # the inner episode is over: every learner agent is done
            for a in stepping:
                if not (terms[a] or truncs[a]):
                    truncs[a] = True
        out_obs = {a: self._obs[a] for a in stepping if a in self._obs}
        return out_obs, rews, terms, truncs, self._annotate(infos, stepping)

    def episode_extras(self) -> dict[str, Any]:
        """What the episode update's ``extras`` should say about this episode (so far).

        ``agent_returns`` (every agent, the opponent's too), ``learner_agents``, ``opponent_agents`` (agent ->
        the opponent id that played it), ``opponent_id``, ``opponent_return`` (mean return of the opponent's
        agents) and ``learner_return`` (mean return of the learner's). Agent names are given as ``str``.
        """
        out: dict[str, Any] = {"agent_returns": {str(a): float(r) for a, r in self._returns.items()}}
        if self.opponent_id is None:
            return out
        out["learner_agents"] = [str(a) for a in self._learner]
        out["opponent_agents"] = {str(a): int(self.opponent_id) for a in self._opponent_agents}
        out["opponent_id"] = int(self.opponent_id)
        if self._opponent_agents:
            opp = [self._returns.get(a, 0.0) for a in self._opponent_agents]
            out["opponent_return"] = float(np.mean(opp))
        if self._learner:
            out["learner_return"] = float(np.mean([self._returns.get(a, 0.0) for a in self._learner]))
        return out

    def observation_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.env.observation_space(agent)

    def action_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.env.action_space(agent)

    def close(self) -> None:
        """Release the lease on the current opponent, then close the inner env."""
        if self._loader is not None:
            self._loader.close()
        self._opponent = None
        self.env.close()

    def __repr__(self) -> str:
        source = self._directory if self._directory is not None else type(self._curriculum).__name__
        return f"CoPlayerWrapper<{self.env}, opponents={source!r}>"


class TurnBasedParallelEnv(ParallelEnv):
    """A turn-based PettingZoo AEC game in the parallel API.

    In each parallel step only the agent whose turn it is (the AEC env's ``agent_selection``) acts; actions
    given for other agents are ignored and may be left out. Every agent's info carries ``"to_move"`` (whether
    it acts next). Rewards are the AEC env's per-step ``rewards`` after the move; once an agent is terminated
    or truncated it leaves ``agents`` (its pending AEC "dead steps" are played automatically). Unlike
    PettingZoo's ``aec_to_parallel``, this is correct for games where agents alternate (tic-tac-toe,
    connect four ...), because each parallel step is exactly one move.

    >>> from pettingzoo.classic import tictactoe_v3
    >>> env = TurnBasedParallelEnv(tictactoe_v3.env())
    >>> obs, infos = env.reset(seed=0)
    >>> infos["player_1"]["to_move"], infos["player_2"]["to_move"]
    (True, False)
    >>> obs, rews, terms, truncs, infos = env.step({"player_1": 4})
    >>> int(obs["player_2"]["observation"][1, 1, 1]), infos["player_2"]["to_move"]
    (1, True)
    """

    def __init__(self, aec_env: Any) -> None:
        for attr in ("observe", "last", "possible_agents"):
            if not hasattr(aec_env, attr):
                raise TypeError(
                    f"aec_env must be a PettingZoo AEC env (missing {attr!r}), got {type(aec_env).__name__}"
                )
        self.aec_env = aec_env
        self.possible_agents = list(aec_env.possible_agents)
        self.agents: list[AgentID] = []
        self.metadata = dict(getattr(aec_env, "metadata", {}))
        self.metadata["is_parallelizable"] = True
        self.render_mode = getattr(aec_env, "render_mode", None)

    def observation_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.aec_env.observation_space(agent)

    def action_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.aec_env.action_space(agent)

    def _infos(self, agents: Sequence[AgentID]) -> dict[AgentID, dict]:
        env = self.aec_env
        live = set(env.agents)
        mover = env.agent_selection if env.agents else None
        out = {}
        for a in agents:
            d = dict(env.infos.get(a, {}))
            d["to_move"] = a == mover and a in live and not (env.terminations[a] or env.truncations[a])
            out[a] = d
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, dict]]:
        self.aec_env.reset(seed=seed, options=options)
        self.agents = list(self.aec_env.agents)
        return {a: self.aec_env.observe(a) for a in self.agents}, self._infos(self.agents)

    def step(self, actions: dict[AgentID, Any]) -> tuple[dict, dict, dict, dict, dict]:
        env = self.aec_env
        if not self.agents:
            raise RuntimeError("TurnBasedParallelEnv.step called after the game ended; call reset() first")
        mover = env.agent_selection
        if mover not in actions:
            raise KeyError(
                f"agent {mover!r} is to move, but actions has no entry for it (got {list(actions)})"
            )
        before = list(self.agents)
        env.step(actions[mover])
        rews = {a: float(env.rewards.get(a, 0.0)) for a in before}
        terms = {a: bool(env.terminations.get(a, True)) for a in before}
        truncs = {a: bool(env.truncations.get(a, False)) for a in before}
        obs = {a: env.observe(a) for a in before}
        infos = self._infos(before)
        for _ in range(len(self.possible_agents) + 1):  # agents that are done take their dead steps
            sel = env.agent_selection if env.agents else None
            if sel is None or not (env.terminations[sel] or env.truncations[sel]):
                break
            env.step(None)
        self.agents = [a for a in env.agents if not (env.terminations[a] or env.truncations[a])]
        return obs, rews, terms, truncs, infos

    def render(self) -> Any:
        return self.aec_env.render()

    def state(self) -> np.ndarray:
        return self.aec_env.state()

    def close(self) -> None:
        self.aec_env.close()


class SingleLearnerEnv(gym.Env):
    """A Gymnasium view of a parallel env in which the learner plays exactly one agent per episode.

    Typically ``SingleLearnerEnv(PettingZooSyncWrapper(CoPlayerWrapper(game, ...), address))``, so the
    co-player env runs in ``gymnasium.vector.AsyncVectorEnv`` workers or under a single-agent trainer. The
    observation and action spaces are those of the env's ``possible_agents`` (which must all be equal). Each
    info carries ``"agent"``, the agent the learner plays this episode. Other attributes are looked up on the
    wrapped env (e.g. ``loaded_ids`` through ``vector_env.get_attr``).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, env: ParallelEnv) -> None:
        agents = list(env.possible_agents)
        if not agents:
            raise ValueError(f"{type(env).__name__} has no possible_agents")
        obs_space, act_space = env.observation_space(agents[0]), env.action_space(agents[0])
        for a in agents[1:]:
            if env.observation_space(a) != obs_space or env.action_space(a) != act_space:
                raise ValueError(f"agents {agents[0]!r} and {a!r} have different spaces; SingleLearnerEnv "
                                 "needs one observation and one action space")
        self.env = env
        self.observation_space = obs_space
        self.action_space = act_space
        self.agent: AgentID | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        live = list(self.env.agents)
        if len(live) != 1:
            raise ValueError(f"SingleLearnerEnv needs exactly one learner agent per episode, got {live}")
        self.agent = live[0]
        info = dict(infos.get(self.agent, {}))
        info["agent"] = self.agent
        return obs[self.agent], info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.agent is None:
            raise RuntimeError("SingleLearnerEnv.step() called before reset()")
        a = self.agent
        obs, rews, terms, truncs, infos = self.env.step({a: action})
        info = dict(infos.get(a, {}))
        info["agent"] = a
        return obs[a], float(rews.get(a, 0.0)), bool(terms.get(a, False)), bool(truncs.get(a, False)), info

    def close(self) -> None:
        self.env.close()
