"""The Curriculum and Agent APIs.

A :class:`Curriculum` chooses encoded tasks from a :class:`~magister.task_spaces.TaskSpace` and learns
from feedback. Feedback arrives through four doors, each optional for an algorithm to use:

* :meth:`Curriculum.update_on_step` / :meth:`Curriculum.update_on_step_batch` – every env step, only when
  :attr:`Curriculum.requires_step_updates` is true (otherwise no step data is ever sent); observations
  and infos travel only when :attr:`Curriculum.requires_step_observations` /
  :attr:`Curriculum.requires_step_infos` say the algorithm reads them (``None`` is passed otherwise);
* :meth:`Curriculum.on_episode` – once per finished episode, one typed :class:`Episode` record (return,
  length, task, progress, env id, the task's train/control flags and variant, extras); its default calls
  :meth:`Curriculum.update_on_episode` with the first five, so most algorithms override that;
* :meth:`Curriculum.update_task_progress` – a task completed (or progressed) mid-episode;
* :meth:`Curriculum.update_on_demand` – arbitrary learner-side metrics (value losses, scores, evals).

**The train flag.** Some algorithms (Robust PLR / PLR⊥, ACCEL, XLand's task filter) send *evaluation-only*
tasks whose data must not be used for gradients. :meth:`Curriculum.sample` returns bare encoded tasks;
:meth:`Curriculum.sample_tasks` returns :class:`TaskSample` envelopes, ``TaskSample(task, train)``, which
may also carry a ``control`` flag (play the episode with the trainer's control policy) and a ``variant``
(the task the env plays instead of ``task``, feedback credited to ``task``), all as typed fields.
The sync layer and wrappers always call ``sample_tasks`` and copy ``train`` into the env's
``info["task_train"]`` (and ``control`` into ``info["task_control"]``), so a trainer masks
evaluation-only transitions with one line.
A curriculum that never produces evaluation-only tasks need not override ``sample_tasks``.

**Agent API.** Co-player curricula (self-play, FSP, PFSP) also implement :class:`AgentCurriculum`:
``get_opponent(opponent_id)``, ``update_agent(agent)`` and ``update_winrate(opponent_id, opponent_return)``.

Checkpointing: ``state_dict()`` returns plain Python/numpy data including the random generator's state,
so ``load_state_dict`` into a fresh object continues with identical samples.

**Thread safety.** Every curriculum carries its own re-entrant lock, :attr:`Curriculum.lock`, and every
public method (a name not starting with ``_``, defined in this class or any subclass: ``sample``,
``distribution``, ``metrics``, ``state_dict``, the ``update_*`` doors, ``get_opponent`` ...) runs under it,
so a user reading ``distribution()`` or ``metrics()`` while a :func:`magister.serve` thread applies
feedback sees a consistent state. Subclasses get this automatically (``__init_subclass__`` wraps their
public methods); properties, static and class methods are not wrapped, and a read that spans several
calls takes ``with curriculum.lock:`` itself. Wrapping curricula (Sequential, OMNI, DualCurriculum,
TaskFilter) take their own lock, then their inner curricula's: locks are only ever taken from outer to
inner (an inner curriculum never calls its wrapper), so there is no lock-order inversion. The lock is
not pickled: a pickled or deep-copied curriculum gets a fresh lock of its own.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import os
import threading
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace, check_k

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskSample:
    """An encoded task plus its metadata, as typed fields (never tags wrapped around the task).

    * ``task``: the encoded task the curriculum credits the episode's feedback to.
    * ``train=False`` marks an evaluation-only task (PLR⊥ / ACCEL / task filtering): the trainer must not
      use its transitions for gradient updates, though the curriculum still wants its feedback.
    * ``control=True``: the episode is to be played by the trainer's *control policy* (XLand's task
      filter); the sync wrappers put it in ``info["task_control"]``.
    * ``variant``: an encoded task the environment plays *instead of* ``task`` (``None``: ``task`` itself);
      the feedback is still credited to ``task``.

    The sync layer carries the three flags next to the task, and hands them back to the curriculum in the
    :class:`Episode` record of each episode played on it.

    >>> TaskSample(3, False, control=True)
    TaskSample(task=3, train=False, control=True, variant=None)
    >>> TaskSample(3, "yes")
    Traceback (most recent call last):
    ...
    TypeError: TaskSample.train must be a bool, got str 'yes'
    """

    task: EncodedTask
    train: bool = True
    control: bool = False
    variant: EncodedTask | None = None

    def __post_init__(self) -> None:
        if (
            type(self.train) is bool and type(self.control) is bool and self.variant is None
            and type(self.task) is int
        ):  # (the common case, one per task a curriculum hands out: nothing to check further)
            return
        for name in ("train", "control"):
            v = getattr(self, name)
            if type(v) is bool:
                continue
            if not isinstance(v, np.bool_):
                raise TypeError(f"TaskSample.{name} must be a bool, got {type(v).__name__} {v!r:.100}")
            object.__setattr__(self, name, bool(v))
        if self.task is None:
            raise TypeError("TaskSample.task must be an encoded task, got None")
        if self.variant is not None and isinstance(self.variant, TaskSample):
            raise TypeError("TaskSample.variant must be an encoded task, got a TaskSample")
        if isinstance(self.task, TaskSample):
            raise TypeError("TaskSample.task must be an encoded task, got a TaskSample")


@dataclass(frozen=True)
class Episode:
    """One finished episode, as the sync layer hands it to :meth:`Curriculum.on_episode`.

    * ``task``: the encoded task credited (a :class:`TaskSample`'s ``task``), ``episode_return`` its
      undiscounted return, ``length`` its steps, ``progress`` its final success in [0, 1];
    * ``env_id``: the env that played it (``None`` when not known);
    * ``train``, ``control``, ``variant``: the fields of the :class:`TaskSample` it played, as the server
      recorded them when it handed the task out (the env never sends them back). A task the env chose
      itself has ``train=True, control=False, variant=None``;
    * ``extras``: what the env side added (e.g. per-agent returns of a PettingZoo env);
    * ``agent``: the agent whose trajectory this is, when a multi-agent env reports one episode per agent
      (``PettingZooSyncWrapper(..., per_agent_episodes=True)``), else ``None``.

    >>> ep = Episode(task=3, episode_return=1.0, length=10, progress=1.0, env_id=0)
    >>> ep.task, ep.train, ep.control, ep.variant, ep.extras, ep.agent
    (3, True, False, None, {}, None)
    """

    task: EncodedTask
    episode_return: float
    length: int
    progress: float = 0.0
    env_id: int | None = None
    train: bool = True
    control: bool = False
    variant: EncodedTask | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    agent: str | None = None


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


_F = TypeVar("_F", bound=Callable[..., Any])

#: Instance attribute holding a curriculum's lock (never pickled).
_LOCK_ATTR = "_magister_lock"
#: Marks a method wrapped by :func:`_locked` (so it is never wrapped twice).
_LOCKED_MARK = "__magister_locked__"
#: Guards the lazy creation of a lock for an object built without ``Curriculum.__new__``.
_LOCK_CREATION = threading.Lock()


def _lock_of(obj: Any) -> Any:
    """``obj``'s lock, created on first use when ``__new__`` was bypassed (e.g. a ``__setstate__`` that
    replaced ``__dict__``)."""
    try:
        return obj.__dict__[_LOCK_ATTR]
    except KeyError:
        with _LOCK_CREATION:
            return obj.__dict__.setdefault(_LOCK_ATTR, threading.RLock())


def _locked(fn: _F) -> _F:
    """Wrap the method ``fn`` so that it runs under ``self.lock`` (``__wrapped__`` keeps its signature)."""

    @functools.wraps(fn)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            lock = self._magister_lock
        except AttributeError:
            lock = _lock_of(self)
        with lock:
            return fn(self, *args, **kwargs)

    setattr(locked, _LOCKED_MARK, True)
    return locked  # type: ignore[return-value]


def _without_lock(getstate: _F) -> _F:
    """Wrap a subclass's own ``__getstate__`` so that the lock never reaches a pickle or a copy."""

    @functools.wraps(getstate)
    def getstate_without_lock(self: Any) -> Any:
        state = getstate(self)
        if isinstance(state, dict) and _LOCK_ATTR in state:
            state = {k: v for k, v in state.items() if k != _LOCK_ATTR}
        elif (isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict)
              and _LOCK_ATTR in state[0]):  # (dict, slots) form
            state = ({k: v for k, v in state[0].items() if k != _LOCK_ATTR}, state[1])
        return state

    setattr(getstate_without_lock, _LOCKED_MARK, True)
    return getstate_without_lock  # type: ignore[return-value]


def _lock_public_methods(cls: type) -> None:
    """Make the public methods that ``cls`` itself defines run under the instance's lock.

    Wraps every plain function in ``cls.__dict__`` whose name does not start with ``_`` (inherited ones
    were wrapped in their own class). Properties, static and class methods, nested classes, abstract
    methods (always overridden) and already wrapped functions are left alone. A ``__getstate__`` that
    ``cls`` defines is wrapped so that it drops the lock.
    """
    for name, value in list(vars(cls).items()):
        if (name.startswith("_") or not isinstance(value, types.FunctionType)
                or getattr(value, _LOCKED_MARK, False) or getattr(value, "__isabstractmethod__", False)):
            continue
        setattr(cls, name, _locked(value))
    getstate = vars(cls).get("__getstate__")
    if isinstance(getstate, types.FunctionType) and not getattr(getstate, _LOCKED_MARK, False):
        cls.__getstate__ = _without_lock(getstate)  # type: ignore[attr-defined]


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
    Their public methods run under :attr:`lock` without any code of theirs (see the module docstring).
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

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # The lock is made here, not in ``__init__``: it exists before a subclass's ``__init__`` runs any
        # of its code, and ``copy``/``pickle`` (which call ``__new__`` but not ``__init__``) make a new one.
        self = super().__new__(cls)
        object.__setattr__(self, _LOCK_ATTR, threading.RLock())
        # the process that built it (copies and pickles keep it: their __dict__ overwrites this one)
        object.__setattr__(self, "_home_pid", os.getpid())
        return self

    @property
    def home_pid(self) -> int:
        """The id of the process that created this curriculum; copies and pickles keep it. A copy in
        another process (a forked or spawned worker) is not the learner's curriculum: feedback given to it
        never reaches the learner, which is why the sync wrappers refuse it (serve it and pass the
        server's address instead)."""
        return self.__dict__.get("_home_pid", os.getpid())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _lock_public_methods(cls)

    @property
    def lock(self) -> threading.RLock:
        """This curriculum's re-entrant lock; every public method holds it while it runs.

        Take it yourself (``with curriculum.lock:``) to make several calls atomic; a server built by
        :func:`magister.serve` shares it.
        """
        return _lock_of(self)

    def __getstate__(self) -> dict[str, Any]:
        # A lock cannot be pickled or deep-copied: the copy gets a fresh one from ``__new__``.
        state = self.__dict__.copy()
        state.pop(_LOCK_ATTR, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {k: v for k, v in state.items() if k != _LOCK_ATTR}
        self.__dict__.update(state)
        _lock_of(self)

    def __init__(self, task_space: TaskSpace, *, seed: int | None = None) -> None:
        if not isinstance(task_space, TaskSpace):
            raise TypeError(f"task_space must be a magister TaskSpace, got {type(task_space).__name__}")
        self.task_space = task_space
        self.rng = np.random.default_rng(seed)
        self.num_sampled = 0
        self.num_episodes = 0
        self.num_steps = 0
        self._set_stream_root(seed)

    # -- seeding ------------------------------------------------------------------------------------
    def seed(self, seed: int | None) -> None:
        """Reseed the curriculum; with the same seed and feedback, samples repeat exactly."""
        self.rng = np.random.default_rng(seed)
        self._set_stream_root(seed)

    def _set_stream_root(self, seed: int | None) -> None:
        # the root of the per-env streams: the seed's entropy (a fresh random one without a seed)
        self._stream_root = int(np.random.SeedSequence(seed).entropy)  # type: ignore[arg-type]
        self._streams: dict[int, np.random.Generator] = {}

    def stream_rng(self, stream: int) -> np.random.Generator:
        """The generator of random stream ``stream`` (an int >= 0), made on first use from the curriculum's
        seed and ``stream`` and kept (its state is part of :meth:`state_dict`). The sync layer samples the
        tasks of an env whose first reset was seeded with ``s`` from stream ``s`` (:meth:`sample_tasks_with`).

        >>> from magister.curricula.domain_randomization import DomainRandomization
        >>> from magister.task_spaces.discrete import Discrete
        >>> a, b = DomainRandomization(Discrete(100), seed=0), DomainRandomization(Discrete(100), seed=0)
        >>> a.sample(5) == b.sample(5)  # the curriculum's own generator moves on ...
        True
        >>> c = DomainRandomization(Discrete(100), seed=0)
        >>> int(a.stream_rng(3).integers(100)) == int(c.stream_rng(3).integers(100))  # ... streams do not
        True
        """
        streams = self.__dict__.setdefault("_streams", {})
        gen = streams.get(stream)
        if gen is None:
            root = self.__dict__.get("_stream_root")
            if root is None:  # (a subclass that did not call Curriculum.__init__)
                root = self._stream_root = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
            gen = streams[stream] = np.random.default_rng(np.random.SeedSequence([root, int(stream)]))
        return gen

    # -- sampling -----------------------------------------------------------------------------------
    @abstractmethod
    def sample(self, k: int = 1) -> list[EncodedTask]:
        """Return ``k`` encoded tasks (vectorised: one numpy call, not ``k`` Python loops)."""

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        """Return ``k`` :class:`TaskSample` envelopes. Default: every task is a training task."""
        return [TaskSample(t, True) for t in self.sample(k)]

    def sample_tasks_with(self, rng: np.random.Generator, k: int = 1) -> list[TaskSample]:
        """:meth:`sample_tasks` drawing its randomness from ``rng`` instead of :attr:`rng` (which is left
        as it was). The sync layer samples each env's tasks from a stream of its own this way, so that a
        curriculum that does not learn (domain randomisation, a schedule) gives every env the same task
        sequence run to run, however the envs' requests interleave. A curriculum that draws from other
        generators too (a task space's, an inner curriculum's) draws those as usual.

        >>> from magister.curricula.domain_randomization import DomainRandomization
        >>> from magister.task_spaces.discrete import Discrete
        >>> cur = DomainRandomization(Discrete(100), seed=0)
        >>> a = [s.task for s in cur.sample_tasks_with(np.random.default_rng(7), 3)]
        >>> b = [s.task for s in cur.sample_tasks_with(np.random.default_rng(7), 3)]
        >>> a == b
        True
        """
        saved, self.rng = self.rng, rng
        try:
            return self.sample_tasks(k)
        finally:
            self.rng = saved

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

    def on_episode(self, episode: Episode) -> None:
        """One finished episode (an :class:`Episode` record): the one door through which the sync layer
        reports episodes, on every transport.

        The default calls :meth:`update_on_episode` with the record's return, length, task, progress and
        env id, positionally, so a curriculum that overrides only ``update_on_episode`` (with any
        signature that takes those five, ``*args, **kwargs`` included) keeps working. A curriculum that
        reads the record's ``control``, ``variant`` or ``extras`` overrides this method.
        """
        self.update_on_episode(
            episode.episode_return, episode.length, episode.task, episode.progress, episode.env_id
        )

    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """One finished episode: its undiscounted return, length, task and final progress in [0, 1]
        (called by :meth:`on_episode`; call it directly to feed a curriculum by hand)."""

    def update_task_progress(self, task: EncodedTask, progress: float, env_id: int | None = None) -> None:
        """Progress (success in [0, 1]) on ``task``, possibly mid-episode."""

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """Learner-side feedback: anything the algorithm documents (scores, value losses, eval results)."""

    def on_task_abandoned(self, task: EncodedTask, env_id: int | None = None) -> None:
        """``task`` was handed to env ``env_id`` and will never be reported: the env was declared gone (it
        stayed silent past the server's ``env_timeout``) or closed without returning it. No-op by default;
        a curriculum that counts tasks in flight (e.g. to bound how many envs play one task) frees them
        here."""

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
        """Everything needed to resume: counters and the random generator's state.

        Plain data only (dicts, lists, tuples, str, numbers, ``None``, numpy arrays and scalars), so that
        :func:`magister.checkpoint.save` can write it and :func:`magister.checkpoint.load` read it back
        without running code; subclasses that extend it keep to those types
        (``tests/test_checkpoints.py``)."""
        return {
            "class": type(self).__name__,
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "stream_root": self.__dict__.get("_stream_root"),
            "streams": {
                k: copy.deepcopy(g.bit_generator.state) for k, g in self.__dict__.get("_streams", {}).items()
            },
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
        if state.get("stream_root") is not None:
            self._stream_root = int(state["stream_root"])
        self._streams = {}
        for k, st in state.get("streams", {}).items():
            gen = self._streams[int(k)] = np.random.default_rng()
            gen.bit_generator.state = copy.deepcopy(st)
        self.num_sampled = int(state["num_sampled"])
        self.num_episodes = int(state["num_episodes"])
        self.num_steps = int(state["num_steps"])

    # -- helpers for subclasses ---------------------------------------------------------------------
    def _check_k(self, k: int) -> None:
        check_k(k)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task_space!r})"


_lock_public_methods(Curriculum)  # ``__init_subclass__`` runs for subclasses only


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
