"""The environment side of the sync layer, as Gymnasium and PettingZoo wrappers.

:class:`GymnasiumSyncWrapper` wraps a :class:`~magister.env_wrappers.task_wrapper.TaskWrapper` and connects
it to a curriculum. ``source`` is one of

* a server address ``str`` (``server.address``): the wrapper runs in a worker process (``AsyncVectorEnv``,
  SB3 ``SubprocVecEnv`` ...) and talks to the :class:`~magister.sync.zmq_server.CurriculumServer` over
  ZeroMQ (:class:`~magister.sync.feed.CurriculumClient`), or, for a ``"ray://..."`` address from
  :func:`magister.sync.ray_server.serve_ray`, with the curriculum's Ray actor;
* a :class:`~magister.curricula.base.Curriculum` or the :class:`~magister.sync.zmq_server.CurriculumServer`
  object: the env lives in the learner's process (``SyncVectorEnv``, one env) and the wrapper calls the
  curriculum directly, under its lock, without sockets (a server object used from a forked worker is
  reached through its address automatically);
* a ready-made :class:`~magister.sync.feed.TaskFeed` (e.g. a configured client), used as it is.

On ``reset`` the wrapper takes the next task (an :class:`~magister.sync.feed.Assignment`), decodes the
task the env is to *play* with the env's task space - the assignment's ``variant`` when it has one, else
its ``task`` - and resets through the standard hook ``options={"task": decoded}``. A ``reset`` that passes
its own ``options["task"]`` plays that task instead (its feedback still reaches the curriculum, with task
id ``-1``). A ``reset`` before any step
of the current task keeps that task (it was not used). On ``step`` it records feedback: step records only
when the curriculum wants them, and one episode update when the episode terminates or is truncated (its
undiscounted return, length, the credited task and final progress; the curriculum gets the assignment's
``control`` and ``variant`` back from the server's own record, not from the env). Every ``info`` carries
``info["task"]`` (the encoded task the env plays), ``info["task_control"]`` (the assignment's ``control``:
``True`` for an episode the curriculum wants played by the trainer's control policy, e.g. by
:class:`~magister.curricula.task_filter.TaskFilter`), ``info["task_train"]`` (``False`` for
evaluation-only tasks whose data must not train the agent) and ``info["task_progress"]``. ``info["task"]``
names the episode the returned observation belongs to: under a vector env's ``SAME_STEP`` autoreset the
step that ends an episode returns the reset's info, so its ``info["task"]`` is already the next task and the
finished one is ``info["final_info"]["task"]`` (where ``info["_final_info"]``); under ``NEXT_STEP`` the
ending step names the finished task and the following autoreset step the new one.

**One task path.** The task reaches the env below only through ``reset(options={"task": decoded})``, and
progress is read only from the ``info["task_progress"]`` the env below reports (a task wrapper writes it),
whatever wrappers sit in between; at each reset the task the env below reports in its info, if it reports
one, must be the task handed down (``RuntimeError`` otherwise: a wrapper in between swallowed the option).

With ``change_task_on_completion=True``, a task whose progress reaches 1 mid-episode is reported with a
progress update and replaced by the next task without resetting the env: the task wrapper's ``set_task``
(or ``change_task``) is called and must then apply the task at once, not only at the next reset. The
switching step's info still names the completed task and adds ``info["next_task"]`` (and
``info["next_task_train"]``); the episode update that follows covers the steps played on the last task.

Rewards and progress must be finite (``ValueError`` otherwise, naming the value and the task): a NaN would
otherwise poison the curriculum's statistics. A progress is checked on the step that reports it; rewards
through the episode's running return, when the episode is reported (and every step record by the server),
so a non-finite reward raises at the end of its episode, before anything reaches the curriculum.

>>> import gymnasium as gym
>>> from magister.task_spaces.discrete import Discrete
>>> from magister.curricula.base import Curriculum
>>> from magister.env_wrappers.task_wrapper import TaskWrapper
>>> class Goal(TaskWrapper):
...     def change_task(self, task): self.goal = task
>>> class Cycle(Curriculum):          # tasks 0, 1, 2, 0, ...
...     def sample(self, k=1):
...         self.num_sampled += k
...         return [(self.num_sampled - k + i) % 3 for i in range(k)]
>>> env = GymnasiumSyncWrapper(Goal(gym.make("CartPole-v1"), Discrete(3)), Cycle(Discrete(3)))
>>> _, info = env.reset(seed=0)
>>> info["task"], info["task_train"], env.unwrapped is env.env.unwrapped
(0, True, True)
>>> term = trunc = False
>>> while not (term or trunc):
...     _, _, term, trunc, info = env.step(0)
>>> _, info = env.reset()
>>> info["task"]
1
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any, SupportsFloat

import gymnasium as gym
from pettingzoo.utils.wrappers import BaseParallelWrapper

from ..sync.feed import Assignment, Source, TaskFeed, checked_source, connect
from ..sync.options import FeedOptions
from ..task_spaces.base import TaskSpace, task_key
from .task_wrapper import step_result_error

logger = logging.getLogger(__name__)

__all__ = ["GymnasiumSyncWrapper", "PettingZooSyncWrapper", "EpisodeTracker"]


def finite(name: str, value: Any, task: Any) -> float:
    """``value`` as a float; ``TypeError`` if it is not a number, ``ValueError`` if it is not finite (naming
    ``name`` and the task)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r} (task {task!r})") from None
    if not math.isfinite(v):
        raise ValueError(
            f"{name} must be finite, got {value!r} on task {task!r}; the curriculum would be corrupted by it"
        )
    return v


def checked_progress(value: Any, task: Any) -> float:
    """A reported ``task_progress``: finite and in [0, 1], else an error naming it and the task."""
    v = finite("task_progress", value, task)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"task_progress must be in [0, 1], got {v!r} on task {task!r}")
    return v


def check_reset_task(reported: Any, assigned: Any, env: Any) -> None:
    """The env below reported ``reported`` as its task after a reset given ``assigned``: they must agree.

    A wrapper between the sync wrapper and the task wrapper that drops or rewrites ``options["task"]`` would
    otherwise have the episode played on one task and labelled with another.
    """
    if reported != assigned and task_key(reported) != task_key(assigned):
        raise RuntimeError(
            f"the env below the sync wrapper reports task {reported!r} after a reset on task {assigned!r}: "
            f"a wrapper inside {type(env).__name__} does not pass reset(options={{'task': ...}}) through to "
            "the task wrapper (wrappers must forward the options they do not use)"
        )


def explicit_task(task: Any, task_space: TaskSpace) -> Any:
    """The encoded form of a task passed as ``reset(options={"task": task})``: a task of the space, or an
    encoded one (as found in ``info["task"]``)."""
    if task_space.contains(task):
        return task_space.encode(task)
    if task_space.contains_encoded(task):
        return task
    raise ValueError(
        f"options['task'] = {task!r:.200} is neither a task of {task_space!r} nor an encoded task of it. "
        "Pass "
        "a task (what the task wrapper's change_task receives) or an encoded one (what info['task'] holds; "
        "task_space.decode(encoded) gives the task)"
    )


class EpisodeTracker:
    """What the sync wrappers track between a reset and the end of an episode, and how they report it.

    Args:
        source: Where the tasks come from (see :class:`GymnasiumSyncWrapper`).
        options: The feed's settings.
        task_space: The env's task space (its fingerprint is checked at connect).
        change_task_on_completion: Switch tasks mid-episode when progress reaches 1.
    """

    def __init__(
        self, source: Source, options: FeedOptions, task_space: TaskSpace, change_task_on_completion: bool
    ) -> None:
        self.source = checked_source(source)
        self.options = options
        self.task_space = task_space
        self.change_task_on_completion = bool(change_task_on_completion)
        self._feed: TaskFeed | None = None
        self.assignment: Assignment | None = None
        self.info_task: Any = None  # the encoded task the env plays (the variant, when there is one)
        self.train = True  # the assignment's train and control flags (what every step's info gets)
        self.control = False
        self.ret = 0.0
        self.length = 0
        self.progress = 0.0  # the last step's progress
        self.ended = False
        self.record: Any = None  # records one step (None: no step updates wanted)
        # whether a step needs more than the common path: before the first reset, while recording steps,
        # and while the env reports a progress other than 0
        self.watch = True
        # multi-agent additions: per-agent returns, lengths and progress, whether each agent's trajectory is
        # reported as its own episode, and a hook adding the env's episode extras
        self.agent_returns: dict[Any, float] = {}
        self.agent_lengths: dict[Any, int] = {}
        self.agent_progress: dict[Any, float] = {}
        self.per_agent = False
        self.extras_fn: Any = None

    @property
    def feed(self) -> TaskFeed:
        """The feed, connected on first use in the process that uses it."""
        if self._feed is None:
            self._feed = connect(self.source, self.options, task_space=self.task_space)
        return self._feed

    @property
    def env_id(self) -> int | None:
        """The id the curriculum side gave this env (``None`` before the first reset)."""
        return None if self._feed is None else self._feed.env_id

    def start(self, options: dict[str, Any] | None, seed: int | None) -> Assignment:
        """The assignment of a new episode: ``options["task"]`` when given (a task, or an encoded one), else
        the current task if it was not played, else the feed's next task. The first reset's seed names the
        feed's random stream (a seeded vector env gets the same task sequence in each env run to run from a
        curriculum that does not learn)."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        has_explicit = bool(options) and "task" in options  # type: ignore[operator]
        explicit = explicit_task(options["task"], self.task_space) if has_explicit else None  # type: ignore
        if self._feed is None and seed is not None and not isinstance(self.source, TaskFeed):
            self._feed = connect(self.source, self.options, task_space=self.task_space, stream=int(seed))
        feed = self.feed
        cur, a = self.assignment, None
        if cur is not None and not self.ended:
            if self.length:  # reset in the middle of an episode: it is reported, cut short
                self.report(cur, self.progress, ended=False)
            elif has_explicit:  # the current task was not played: back to the feed
                feed.give_back(cur)
            else:  # ... or kept for this episode
                a = cur
        if has_explicit:
            a = Assignment(-1, explicit, True)
        elif a is None:
            a = feed.next_task()
        self._assign(a)
        self.ret, self.length, self.progress, self.ended = 0.0, 0, 0.0, False
        self.record = feed.step_recorder()  # read once per episode, not per step
        self.watch = self.record is not None
        self.agent_returns, self.agent_lengths, self.agent_progress = {}, {}, {}
        return a

    def _assign(self, a: Assignment) -> None:
        self.assignment = a
        self.info_task = a.task if a.variant is None else a.variant
        self.train, self.control = a.train, a.control

    def info_fields(self, progress: float) -> dict[str, Any]:
        """What every info of the episode carries."""
        return {"task": self.info_task, "task_train": self.train, "task_control": self.control,
                "task_progress": progress}

    def note_progress(self, progress: float) -> None:
        """A step's progress (checked): remembered, and the common step path is left while it is not 0."""
        self.progress = progress
        self.watch = self.record is not None or progress != 0.0

    def report(self, a: Assignment, progress: float, ended: bool, refill: bool = True) -> None:
        """Send the episode update(s) of the current episode on ``a``.

        Normally one update. In per-agent mode, a finished episode with per-agent data is one update with a
        row per agent (that agent's return, length and progress): the curriculum side applies each as an
        episode on the task, with the task's flags, and consumes the task once.
        """
        if not math.isfinite(self.ret):
            raise ValueError(
                f"rewards must be finite: the episode on task {self.info_task!r} has return {self.ret!r} "
                f"after {self.length} steps; the curriculum would be corrupted by it"
            )
        extras: dict[str, Any] = {}
        if self.agent_returns:
            extras["agent_returns"] = {str(k): v for k, v in self.agent_returns.items()}
        if self.extras_fn is not None:
            extras.update(self.extras_fn())
        agents = ()
        if self.per_agent and ended and self.agent_returns:
            agents = tuple((str(agent), ret, self.agent_lengths.get(agent, self.length),
                            self.agent_progress.get(agent, progress))
                           for agent, ret in self.agent_returns.items())
        self.feed.record_episode(a, self.ret, self.length, progress, ended, extras, refill, agents)

    def step(self, obs: Any, reward: float, term: bool, trunc: bool, info: Any, progress: float) -> bool:
        """Count one step and record it (the multi-agent wrappers' path, see :meth:`end_step`)."""
        self.ret += reward
        self.length += 1
        return self.end_step(obs, reward, term, trunc, info, progress)

    def end_step(self, obs: Any, reward: float, term: bool, trunc: bool, info: Any, progress: float) -> bool:
        """Record a counted step (its checked ``progress``; the step record; the episode report at its
        end); True when the task should be switched (completed mid-episode)."""
        a = self.assignment
        if a is None:
            raise RuntimeError("step() called before reset()")
        self.note_progress(progress)
        if self.record is not None:
            self.record(a, obs, reward, term, trunc, info, progress)
        if term or trunc:
            self.report(a, progress, ended=True)
            self.ended = True
            return False
        return self.change_task_on_completion and progress >= 1.0

    def switch(self) -> Assignment:
        """Report the completed task and take the next one, without ending the episode."""
        a = self.assignment
        assert a is not None
        self.feed.record_progress(a, self.progress, done=True)
        new = self.feed.next_task()
        self._assign(new)
        self.ret, self.length = 0.0, 0
        self.note_progress(0.0)
        self.agent_returns, self.agent_lengths, self.agent_progress = {}, {}, {}
        return new

    def close(self) -> None:
        """Report an unfinished episode (or give its unplayed task back), then close the feed."""
        if self._feed is None:
            return
        try:
            a = self.assignment
            if a is not None and not self.ended:
                if self.length == 0:
                    self._feed.give_back(a)
                else:  # (refused, e.g. a non-finite return: logged below, the feed still closes)
                    self.report(a, self.progress, ended=False, refill=False)
        except Exception:
            logger.exception("sync wrapper: could not report the unfinished episode while closing")
        try:
            self._feed.close()
        except Exception:
            logger.exception("sync wrapper: error while closing the curriculum feed")


def _bad_step(env: Any, out: Any, episode: EpisodeTracker) -> TypeError:
    """The error for a step result that is not ``(obs, reward, terminated, truncated, info)`` with an info
    dict and a numeric reward."""
    if isinstance(out, (tuple, list)) and len(out) == 5 and isinstance(out[4], dict):
        return TypeError(f"reward must be a real number, got {out[1]!r} (task {episode.info_task!r})")
    return step_result_error(env, out)


class GymnasiumSyncWrapper(gym.Wrapper):
    """Connects a task-switching Gymnasium env to a curriculum (see the module docstring).

    Args:
        env: A :class:`~magister.env_wrappers.task_wrapper.TaskWrapper` (possibly inside other wrappers;
            its ``task_space`` is found through the wrapper chain).
        source: ``server.address``, a Curriculum, a server, or a TaskFeed.
        options: The feed's settings (:class:`~magister.sync.options.FeedOptions`); its fields may also be
            given as keyword arguments (``prefetch``, ``timeout``, ``max_update_delay``, ``strip_keys``,
            ``send_obs``, ``send_infos``, ``fallback_task_space``, ``curve_server_key``,
            ``curve_client_keys`` ...); an unknown one raises ``TypeError``.
        change_task_on_completion: Switch tasks mid-episode when progress reaches 1.
    """

    def __init__(
        self,
        env: gym.Env,
        source: Source,
        options: FeedOptions | None = None,
        *,
        change_task_on_completion: bool = False,
        **feed_options: Any,
    ) -> None:
        if not isinstance(env, gym.Env):
            raise TypeError(f"env must be a gymnasium.Env (a TaskWrapper), got {type(env).__name__}")
        super().__init__(env)
        try:
            space = env.get_wrapper_attr("task_space")
        except AttributeError:
            raise TypeError(
                f"{type(env).__name__} has no task_space: wrap the env in a magister TaskWrapper first"
            ) from None
        if not isinstance(space, TaskSpace):
            raise TypeError(f"env.task_space must be a magister TaskSpace, got {type(space).__name__}")
        self.task_space: TaskSpace = space
        self._episode = EpisodeTracker(
            source, FeedOptions.of(options, **feed_options), space, change_task_on_completion
        )

    @property
    def env_id(self) -> int | None:
        """The env id assigned by the curriculum side (``None`` before the first reset)."""
        return self._episode.env_id

    @property
    def feed(self) -> TaskFeed:
        """The :class:`~magister.sync.feed.TaskFeed` this wrapper uses."""
        return self._episode.feed

    @property
    def assignment(self) -> Assignment | None:
        """The current task's assignment (task id, encoded task, train and control flags, variant)."""
        return self._episode.assignment

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset on the next task of the curriculum (or on ``options["task"]``: a task, or an encoded one
        as found in ``info["task"]``).

        The task reaches the env below only through the standard hook, ``reset(options={"task": decoded})``,
        whatever wrappers sit in between. When the env below reports ``info["task"]`` (a task wrapper does),
        it must be the task just handed to it: anything else means a wrapper in between dropped or replaced
        the option, and raises ``RuntimeError`` rather than label the episode with a task it does not play.
        """
        episode = self._episode
        episode.start(options, seed)
        opts = {**options, "task": None} if options else {}
        opts["task"] = self.task_space.decode(episode.info_task)  # the task played: variant or task
        obs, info = self.env.reset(seed=seed, options=opts)
        info = dict(info)
        if "task" in info:
            check_reset_task(info["task"], episode.info_task, self.env)
        info.update(episode.info_fields(0.0))
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, record feedback, and switch tasks on completion when enabled.

        The common step only writes the task fields into the env's info, adds the reward to the episode's
        return and counts the step; the end of an episode, a progress the env reports, step records and a
        step before any reset take :meth:`EpisodeTracker.end_step`. The return is checked once, when the
        episode is reported (a sum is finite only if every reward was).
        """
        out = self.env.step(action)
        episode = self._episode
        try:
            info = out[4]
            info["task"] = episode.info_task
            info["task_train"] = episode.train
            info["task_control"] = episode.control
            progress = info.setdefault("task_progress", 0.0)
            episode.ret += out[1]
        except (TypeError, IndexError, KeyError):
            raise _bad_step(self.env, out, episode) from None
        episode.length += 1
        if out[2] or out[3] or episode.watch or progress:  # the end, a progress, a record, or no reset yet
            if progress or episode.progress:
                progress = info["task_progress"] = checked_progress(progress, episode.info_task)
            if episode.end_step(out[0], out[1], out[2], out[3], info, progress):
                self._switch(info)
        return out

    def _switch(self, info: dict[str, Any]) -> None:
        """Hand the env the next task mid-episode (its current one completed); ``info`` names it."""
        new = self._episode.switch()
        decoded = self.task_space.decode(self._episode.info_task)
        try:
            set_task = self.env.get_wrapper_attr("set_task")
        except AttributeError:
            set_task = self.env.get_wrapper_attr("change_task")
        set_task(decoded)
        info["next_task"] = self._episode.info_task
        info["next_task_train"] = new.train
        info["next_task_control"] = new.control

    def close(self) -> None:
        """Report an unfinished task, return unused ones, close the connection, then the env."""
        self._episode.close()
        super().close()


def find_task_space(env: Any) -> TaskSpace:
    """The ``task_space`` of ``env`` or of an env it wraps (``TypeError`` when none has one)."""
    e = env
    for _ in range(32):
        space = getattr(e, "task_space", None)
        if isinstance(space, TaskSpace):
            return space
        if not hasattr(e, "env"):
            break
        e = e.env
    raise TypeError(f"{type(env).__name__} has no task_space: wrap the env in a magister task wrapper first")


class PettingZooSyncWrapper(BaseParallelWrapper):
    """:class:`GymnasiumSyncWrapper` for PettingZoo parallel envs.

    The env must take its task through ``reset(options={"task": decoded})`` and expose ``task_space``
    (e.g. a ``PettingZooTaskWrapper``). Per step, the reward recorded is the sum over agents and the
    progress the maximum of the agents' ``info["task_progress"]`` (0 when absent). The episode ends when
    every agent has terminated or truncated; its return is the sum over agents, and the per-agent returns
    travel in the episode update's ``extras["agent_returns"]``. Every agent's info carries ``task`` (the
    task played), ``task_train``, ``task_control`` and ``task_progress``.

    **Episode extras from the env.** If the wrapped env (or any wrapper inside it) has a method
    ``episode_extras() -> dict``, its result is merged into every episode update's extras (its keys win).
    :class:`~magister.env_wrappers.coplayer.CoPlayerWrapper` uses it to report the returns of *all* agents,
    the opponent's return, which agents the opponent played and the opponent id, which the co-player
    curricula's :class:`~magister.curricula.coplayer.OutcomeRule` reads.

    **Per-agent episodes.** With ``per_agent_episodes=True`` a finished episode reaches the curriculum as one
    episode *per agent*: that agent's return, its length (the steps in which it received a reward) and its
    last ``task_progress``, with :attr:`Episode.agent <magister.curricula.base.Episode>` naming it, so a
    single-agent task curriculum counts each agent's trajectory as its own episode (as needed for many-agent
    envs). Every agent's episode carries the task's flags (``train``, ``control``, ``variant``); they travel
    as one update, so the server's accounting sees the task consumed once while ``episodes_applied`` counts
    one per agent.
    An episode abandoned by an early reset is still reported once (it reaches no curriculum either way).

    Arguments are those of :class:`GymnasiumSyncWrapper`, plus ``per_agent_episodes``.
    """

    def __init__(
        self,
        env: Any,
        source: Source,
        options: FeedOptions | None = None,
        *,
        change_task_on_completion: bool = False,
        per_agent_episodes: bool = False,
        **feed_options: Any,
    ) -> None:
        super().__init__(env)
        self.task_space: TaskSpace = find_task_space(env)
        self._episode = EpisodeTracker(
            source, FeedOptions.of(options, **feed_options), self.task_space, change_task_on_completion
        )
        self._done_agents: set[Any] = set()
        self.per_agent_episodes = bool(per_agent_episodes)
        self._episode.per_agent = self.per_agent_episodes
        self._episode.extras_fn = self._env_extras

    def _env_extras(self) -> dict[str, Any]:
        """The wrapped env's ``episode_extras()`` (``{}`` when it has none)."""
        hook = getattr(self.env, "episode_extras", None)
        if hook is None:
            return {}
        if not callable(hook):
            raise TypeError(f"{type(self.env).__name__}.episode_extras must be a method returning a dict, "
                            f"got {type(hook).__name__}")
        extras = hook()
        if not isinstance(extras, dict):
            raise TypeError(f"{type(self.env).__name__}.episode_extras() must return a dict, "
                            f"got {type(extras).__name__}")
        return extras

    @property
    def env_id(self) -> int | None:
        """The env id assigned by the curriculum server (``None`` before the first reset)."""
        return self._episode.env_id

    @property
    def assignment(self) -> Assignment | None:
        """The current task's assignment."""
        return self._episode.assignment

    def _annotate(self, infos: dict[Any, dict], agents: Iterable[Any], progress: float) -> dict[Any, dict]:
        fields = self._episode.info_fields(progress)
        out = {k: dict(v) for k, v in infos.items()}
        for agent in agents:
            out.setdefault(agent, {}).update(fields)
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, dict]]:
        """Reset on the next task of the curriculum (or on ``options["task"]``: a task or an encoded one)."""
        self._episode.start(options, seed)
        opts = {**(options or {}), "task": self.task_space.decode(self._episode.info_task)}  # the task played
        obs, infos = self.env.reset(seed=seed, options=opts)
        for info in infos.values():
            if isinstance(info, dict) and "task" in info:
                check_reset_task(info["task"], self._episode.info_task, self.env)
        self._done_agents = set()
        return obs, self._annotate(infos, obs.keys(), 0.0)

    def step(self, actions: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Step all agents, record the summed reward, end the episode when every agent is done."""
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        ep = self._episode
        a = ep.assignment
        if a is None:
            raise RuntimeError("PettingZooSyncWrapper.step() called before reset()")
        total = 0.0
        for agent, r in rewards.items():
            v = finite(f"reward of agent {agent!r}", r, a.task)
            ep.agent_returns[agent] = ep.agent_returns.get(agent, 0.0) + v
            ep.agent_lengths[agent] = ep.agent_lengths.get(agent, 0) + 1
            info = infos.get(agent)
            if isinstance(info, dict) and "task_progress" in info:
                ep.agent_progress[agent] = checked_progress(info["task_progress"], a.task)
            total += v
        progress = max(
            (checked_progress(i.get("task_progress", 0.0), a.task) for i in infos.values()
             if isinstance(i, dict)),
            default=0.0,
        )
        for agent in set(terms) | set(truncs):
            if terms.get(agent, False) or truncs.get(agent, False):
                self._done_agents.add(agent)
        live = set(getattr(self.env, "agents", ())) - self._done_agents
        all_done = not live
        term_all = all_done and any(bool(v) for v in terms.values())
        trunc_all = all_done and not term_all
        # the summed agent returns were only added per agent above: EpisodeTracker.step adds their total
        switch = ep.step(obs, total, term_all, trunc_all, {str(k): v for k, v in infos.items()}, progress)
        infos = self._annotate(infos, set(rewards) | set(infos), progress)
        if switch:
            ep.switch()
            decoded = self.task_space.decode(ep.info_task)
            setter = getattr(self.env, "set_task", None) or self.env.change_task
            setter(decoded)
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        """Report an unfinished task, return unused ones, close the connection, then the env."""
        self._episode.close()
        self.env.close()
