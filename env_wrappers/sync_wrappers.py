"""The environment side of the sync layer, as Gymnasium and PettingZoo wrappers.

:class:`GymnasiumSyncWrapper` wraps a :class:`~magister.env_wrappers.task_wrapper.TaskWrapper` and connects
it to a curriculum. ``source`` is one of

* a server address ``str`` (``server.address``): the wrapper runs in a worker process (``AsyncVectorEnv``,
  SB3 ``SubprocVecEnv`` ...) and talks to the :class:`~magister.sync.server.CurriculumServer` over
  ZeroMQ (:class:`~magister.sync.client.CurriculumClient`), or, for a ``"ray://..."`` address from
  :func:`magister.sync.ray_backend.serve_ray`, with the curriculum's Ray actor;
* a :class:`~magister.curricula.base.Curriculum` or the :class:`~magister.sync.server.CurriculumServer`
  object: the env lives in the learner's process (``SyncVectorEnv``, one env) and the wrapper calls the
  curriculum directly, under its lock, without sockets (a server object used from a forked worker is
  reached through its address automatically);
* a ready-made :class:`~magister.sync.client.TaskFeed` (e.g. a configured client), used as it is.

On ``reset`` the wrapper takes the next task (an :class:`~magister.sync.client.Assignment`), decodes the
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
from collections.abc import Callable, Iterable
from typing import Any, SupportsFloat

import gymnasium as gym
from pettingzoo.utils.wrappers import BaseParallelWrapper

from ..curricula.base import Curriculum
from ..sync.client import DEFAULT_TIMEOUT, Assignment, CurriculumClient, TaskFeed, connect, feed_class
from ..sync.server import CurriculumServer, ServedCurriculum, ServerHandle
from ..task_spaces.base import TaskSpace, task_key
from .task_wrapper import NO_PROGRESS, step_result_error

logger = logging.getLogger(__name__)

__all__ = ["GymnasiumSyncWrapper", "PettingZooSyncWrapper"]

Source = str | Curriculum | CurriculumServer | ServerHandle | TaskFeed


def _finite(name: str, value: Any, task: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r} (task {task!r})") from None
    if not math.isfinite(v):
        raise ValueError(
            f"{name} must be finite, got {value!r} on task {task!r}; the curriculum would be corrupted by it"
        )
    return v


def _check_reset_task(reported: Any, assigned: Any, env: Any) -> None:
    """The env below reported ``reported`` as its task after a reset given ``assigned``: they must agree.

    A wrapper between the sync wrapper and the task wrapper that drops or rewrites ``options["task"]`` would
    otherwise have the episode played on one task and labelled with another.
    """
    if reported is not assigned and reported != assigned and task_key(reported) != task_key(assigned):
        raise RuntimeError(
            f"the env below the sync wrapper reports task {reported!r} after a reset on task {assigned!r}: "
            f"a wrapper inside {type(env).__name__} does not pass reset(options={{'task': ...}}) through to "
            "the task wrapper (wrappers must forward the options they do not use)"
        )


def _bad_step(env: Any, out: Any, episode: _Episode) -> TypeError:
    """The error for a step result that is not ``(obs, reward, terminated, truncated, info)`` with an info
    dict and a numeric reward."""
    if isinstance(out, (tuple, list)) and len(out) == 5 and isinstance(out[4], dict):
        return TypeError(f"reward must be a real number, got {out[1]!r} (task {episode.info_task!r})")
    return step_result_error(env, out)


def _progress(value: Any, task: Any) -> float:
    v = _finite("task_progress", value, task)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"task_progress must be in [0, 1], got {v!r} on task {task!r}")
    return v


class _Episode:
    """What the wrappers track between reset and the end of an episode (shared by both wrappers)."""

    def __init__(
        self,
        source: Source,
        options: dict[str, Any],
        change_task_on_completion: bool,
    ) -> None:
        if isinstance(source, ServerHandle):  # a server sent to this process: its address
            source = source.address
        if not isinstance(source, (str, Curriculum, ServedCurriculum, TaskFeed)):
            raise TypeError(
                "source must be a server address (str), a Curriculum, a CurriculumServer (or the handle it "
                f"becomes in another process) or a TaskFeed, got {type(source).__name__}"
            )
        if isinstance(source, str):
            # the client's backend imported now rather than on the first reset: a missing ray fails here,
            # and the first episode does not pay for the import
            cls = feed_class(source)
            if "curve_secret_key" in options and cls is not CurriculumClient:
                raise ValueError("curve_client_keys apply to ZeroMQ tcp:// and ipc:// addresses, not to "
                                 f"{source!r}")
        self.source = source
        self.options = options
        self.change_task_on_completion = bool(change_task_on_completion)
        self._feed: TaskFeed | None = None
        self.assignment: Assignment | None = None
        self.info_task: Any = None  # the encoded task the env plays
        self.train = True  # the assignment's train and control flags (what every step's info gets)
        self.control = False
        self.info_fields: dict[str, Any] = {}
        self.ret = 0.0
        self.agent_returns: dict[Any, float] = {}
        self.length = 0
        self.progress = NO_PROGRESS  # the last step's progress (this very object while the env reports none)
        self.ended = False
        self.record: Callable[..., Any] | None = None  # records one step (None: no step updates wanted)
        # whether a step needs more than the common path: before the first reset, while recording steps, and
        # while the env reports a progress (see GymnasiumSyncWrapper.step)
        self.watch = True
        # multi-agent additions (used by PettingZooSyncWrapper): per-agent lengths and progress, whether each
        # agent's trajectory is reported as its own episode, and a hook adding the env's episode extras
        self.agent_lengths: dict[Any, int] = {}
        self.agent_progress: dict[Any, float] = {}
        self.per_agent = False
        self.extras_fn: Callable[[], dict[str, Any]] | None = None

    @property
    def feed(self) -> TaskFeed:
        if self._feed is None:  # created on first use, in the process that uses it
            self._feed = connect(self.source, **self.options)
        return self._feed

    def _connect(self, seed: int | None) -> TaskFeed:
        """The feed, created at the first reset: its random stream is that reset's seed (see
        :class:`~magister.sync.client.CurriculumClient`), so a seeded vector env (sub-env ``i`` reset with
        ``seed + i``) gets the same task sequence in each env run to run from a curriculum that does not
        learn."""
        if self._feed is None and seed is not None and not isinstance(self.source, TaskFeed):
            self._feed = connect(self.source, stream=int(seed), **self.options)
        return self.feed

    @property
    def env_id(self) -> int | None:
        """The id the curriculum server gave this env (``None`` before the first reset)."""
        return None if self._feed is None else self._feed.env_id

    def start(
        self, explicit: Any | None, task_space: TaskSpace, has_explicit: bool, seed: int | None = None
    ) -> Assignment:
        """The assignment for a new episode (see the module docstring for the rules)."""
        feed = self._feed if self._feed is not None else self._connect(seed)
        cur = self.assignment
        a = None
        if cur is not None and not self.ended:
            if self.length:  # reset in the middle of an episode: it is reported, cut short
                self._report(cur, self.progress, ended=False)
            elif has_explicit:  # the current task was not used: back to the feed
                feed.give_back(cur)
            else:  # ... or kept for this episode
                a = cur
        if has_explicit:
            if not task_space.contains(explicit):
                raise ValueError(f"options['task'] = {explicit!r} is not a task of {task_space!r}")
            a = Assignment(-1, task_space.encode(explicit), True)
        elif a is None:
            a = feed.next_task()
        self._assign(a)
        self.ret, self.length, self.progress, self.ended = 0.0, 0, NO_PROGRESS, False
        self.record = feed.step_recorder()  # read once per episode, not per step
        self.rewatch()
        if self.agent_returns or self.agent_lengths or self.agent_progress:  # (single-agent: never)
            self._clear_agents()
        return a

    def rewatch(self) -> None:
        """Set :attr:`watch`: a step needs more than the common path while steps are recorded or the env
        reports a progress (it starts True: before the first reset)."""
        self.watch = self.record is not None or self.progress is not NO_PROGRESS

    def _clear_agents(self) -> None:
        self.agent_returns = {}
        self.agent_lengths = {}
        self.agent_progress = {}

    def _extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.agent_returns:
            out["agent_returns"] = {str(k): v for k, v in self.agent_returns.items()}
        if self.extras_fn is not None:
            out.update(self.extras_fn())
        return out

    def _report(self, a: Assignment, progress: float, ended: bool, refill: bool = True) -> None:
        """Send the episode update(s) of the current episode on ``a``.

        Normally one update. In per-agent mode, a finished episode with per-agent data is reported as one
        update per agent (that agent's return, length and progress, ``extras["agent"]`` naming it): the
        first carries the task id and acknowledges the task; the others name the same task with task id
        ``-1``, so the server applies them as episodes without counting the task twice.
        """
        ret = self.ret
        if ret - ret:  # NaN for a non-finite return (0 for every finite one)
            raise ValueError(
                f"rewards must be finite: the episode on task {self.info_task!r} has return {ret!r} after "
                f"{self.length} steps; the curriculum would be corrupted by it"
            )
        extras = self._extras() if self.agent_returns or self.extras_fn is not None else None
        if not (self.per_agent and ended and self.agent_returns):
            self.feed.record_episode(
                a, self.ret, self.length, progress, ended=ended, extras=extras, refill=refill
            )
            return
        for n, (agent, ret) in enumerate(self.agent_returns.items()):
            # (credited to a.task; with task id -1 the server passes control=False and no variant)
            who = a if n == 0 else Assignment(-1, a.task, a.train)
            self.feed.record_episode(
                who,
                ret,
                self.agent_lengths.get(agent, self.length),
                self.agent_progress.get(agent, progress),
                ended=True,
                extras={**(extras or {}), "agent": str(agent)},
                refill=refill,
            )

    def step(
        self, obs: Any, reward: float, term: bool, trunc: bool, info: dict | None, progress: float
    ) -> bool:
        """Record one step; returns True when the task should be switched (completed mid-episode)."""
        a = self.assignment
        if a is None:
            raise RuntimeError("step() called before reset()")
        self.ret += reward
        self.length += 1
        self.progress = progress
        if self.record is not None:
            self.record(a, obs, reward, term, trunc, info, progress)
        if term or trunc:
            self.finish(a, progress)
            return False
        return self.change_task_on_completion and progress >= 1.0

    def finish(self, a: Assignment, progress: float) -> None:
        """The episode on ``a`` terminated or was truncated: report it."""
        self._report(a, progress, ended=True)
        self.ended = True

    def switch(self) -> Assignment:
        """Report the completed task and take the next one, without ending the episode."""
        a = self.assignment
        assert a is not None
        self.feed.record_progress(a, self.progress, done=True)
        new = self.feed.next_task()
        self._assign(new)
        self.ret, self.length, self.progress = 0.0, 0, NO_PROGRESS
        self.rewatch()
        self._clear_agents()
        return new

    def _assign(self, a: Assignment) -> None:
        """Make ``a`` the current task; ``info_task`` is the encoded task the env plays (the variant, when
        the assignment has one); ``info_fields``: it, the train and control flags and the default progress
        (what every step's info gets)."""
        self.assignment = a
        self.info_task = a.task if a.variant is None else a.variant
        self.train, self.control = a.train, a.control
        self.info_fields = {
            "task": self.info_task,
            "task_train": a.train,
            "task_control": a.control,
            "task_progress": NO_PROGRESS,
        }

    def close(self) -> None:
        if self._feed is None:
            return
        try:
            a = self.assignment
            if a is not None and not self.ended:
                if self.length == 0:
                    self._feed.give_back(a)
                else:  # (refused, e.g. a non-finite return: logged below, the feed still closes)
                    self._report(a, self.progress, ended=False, refill=False)
        except Exception:
            logger.exception("sync wrapper: could not report the unfinished episode while closing")
        try:
            self._feed.close()
        except Exception:
            logger.exception("sync wrapper: error while closing the curriculum feed")


def _options(
    prefetch: int | None,
    timeout: float,
    strip_keys: Iterable[str],
    send_obs: bool,
    send_infos: bool,
    fallback_task_space: TaskSpace | None,
    curve_server_key: bytes | str | None,
    max_update_delay: float | None = None,
    *,
    task_space: TaskSpace,
    curve_client_keys: tuple[bytes | str, bytes | str] | None = None,
) -> dict[str, Any]:
    # the task space travels to the feed, which sends its fingerprint when it connects
    opts: dict[str, Any] = {
        "strip_keys": tuple(strip_keys),
        "send_obs": send_obs,
        "send_infos": send_infos,
        "task_space": task_space,
    }
    if prefetch is not None:
        opts["prefetch"] = prefetch
    if max_update_delay is not None:
        opts["max_update_delay"] = max_update_delay
    opts["timeout"] = timeout
    if fallback_task_space is not None:
        opts["fallback_task_space"] = fallback_task_space
    if curve_server_key is not None:
        opts["curve_server_key"] = curve_server_key
    if curve_client_keys is not None:
        if curve_server_key is None:
            raise ValueError("curve_client_keys needs curve_server_key (the server's public key) as well")
        if isinstance(curve_client_keys, (str, bytes)) or len(curve_client_keys) != 2:
            raise ValueError(
                "curve_client_keys must be this client's (public_key, secret_key) pair, e.g. "
                "magister.sync.generate_keypair() or magister.sync.load_keypair(path)"
            )
        opts["curve_public_key"], opts["curve_secret_key"] = curve_client_keys
    return opts


class GymnasiumSyncWrapper(gym.Wrapper):
    """Connects a task-switching Gymnasium env to a curriculum (see the module docstring).

    Args:
        env: A :class:`~magister.env_wrappers.task_wrapper.TaskWrapper` (possibly inside other wrappers;
            its ``task_space`` is found through the wrapper chain).
        source: ``server.address``, a Curriculum, or a CurriculumServer.
        prefetch: Most tasks kept ready (default: :data:`magister.sync.client.DEFAULT_PREFETCH` over sockets
            and Ray, 0 in-process).
        max_update_delay: Most seconds a remote feed holds an update to send several at once (default:
            :data:`magister.sync.client.DEFAULT_MAX_UPDATE_DELAY`; 0: one send per update).
        timeout: Seconds to wait for the server before raising (or falling back).
        strip_keys: Keys removed from dict observations and infos before step records are sent.
        send_obs: Whether step records carry observations (only sent at all when the curriculum
            ``requires_step_updates``).
        send_infos: Whether step records carry infos (likewise).
        change_task_on_completion: Switch tasks mid-episode when progress reaches 1.
        fallback_task_space: Opt-in local sampling when the server is unreachable (logged once).
        curve_server_key: The server's CURVE public key (encrypted TCP).
        curve_client_keys: This worker's own CURVE key pair ``(public_key, secret_key)`` (a
            :class:`~magister.sync.security.CurveKeyPair`), for a server that admits only listed clients
            (``serve(..., curve_allowed_clients=[...])``); without it the worker uses a throwaway pair.
    """

    def __init__(
        self,
        env: gym.Env,
        source: Source,
        *,
        prefetch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        change_task_on_completion: bool = False,
        fallback_task_space: TaskSpace | None = None,
        curve_server_key: bytes | str | None = None,
        max_update_delay: float | None = None,
        curve_client_keys: tuple[bytes | str, bytes | str] | None = None,
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
        if isinstance(strip_keys, str):
            raise TypeError("strip_keys must be an iterable of keys, not a single str")
        self._episode = _Episode(
            source,
            _options(
                prefetch, timeout, strip_keys, send_obs, send_infos, fallback_task_space, curve_server_key,
                max_update_delay, task_space=self.task_space, curve_client_keys=curve_client_keys,
            ),
            change_task_on_completion,
        )

    @property
    def env_id(self) -> int | None:
        """The env id assigned by the curriculum server (``None`` before the first reset)."""
        return self._episode.env_id

    @property
    def feed(self) -> TaskFeed:
        """The :class:`~magister.sync.client.TaskFeed` this wrapper uses."""
        return self._episode.feed

    @property
    def assignment(self) -> Assignment | None:
        """The current task's assignment (task id, encoded task, train and control flags, variant)."""
        return self._episode.assignment

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset on the next task of the curriculum (or on ``options["task"]`` when given).

        The task reaches the env below only through the standard hook, ``reset(options={"task": decoded})``,
        whatever wrappers sit in between. When the env below reports ``info["task"]`` (a task wrapper does),
        it must be the task just handed to it: anything else means a wrapper in between dropped or replaced
        the option, and raises ``RuntimeError`` rather than label the episode with a task it does not play.
        """
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        episode = self._episode
        if options:
            opts = dict(options)
            has_explicit = "task" in opts
            episode.start(opts.get("task"), self.task_space, has_explicit, seed)
            if not has_explicit:
                opts["task"] = self.task_space.decode(episode.info_task)  # the task played: variant or task
        else:
            episode.start(None, self.task_space, False, seed)
            opts = {"task": self.task_space.decode(episode.info_task)}
        obs, info = self.env.reset(seed=seed, options=opts)
        info = dict(info)
        task = episode.info_task
        reported = info.get("task", task)
        if reported is not task:
            _check_reset_task(reported, task, self.env)
        info["task"] = task
        info["task_train"] = episode.train
        info["task_control"] = episode.control
        info["task_progress"] = NO_PROGRESS
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, record feedback, and switch tasks on completion when enabled."""
        # This runs on every step of every env, next to the env's own step, which leaves the CPU's caches
        # cold for it: every distinct operation here costs more than its count suggests. So the common step
        # does little: three keys written into the info dict (item assignments: cheaper than an update), the
        # reward added to the running return (checked when the episode is reported: a sum is finite only if
        # every reward was), the length counted, and the env's own tuple returned. Everything else - the end
        # of the episode, a progress the env below reports in ``info["task_progress"]`` (any value but the
        # NO_PROGRESS object of an env that reports none), step records, a step before reset - takes
        # _step_more.
        out = self.env.step(action)
        episode = self._episode
        try:
            info = out[4]
            info["task"] = episode.info_task
            info["task_train"] = episode.train
            info["task_control"] = episode.control
            episode.ret += out[1]
        except (TypeError, IndexError, KeyError):
            raise _bad_step(self.env, out, episode) from None
        episode.length += 1
        if (
            out[2]
            or out[3]
            or episode.watch
            or info.setdefault("task_progress", NO_PROGRESS) is not NO_PROGRESS
        ):
            return self._step_more(out, info, episode)
        return out

    def _step_more(
        self, out: Any, info: dict, episode: _Episode
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """A step that ends the episode, reports a progress, is recorded, or comes before any reset."""
        if episode.assignment is None:
            raise RuntimeError("GymnasiumSyncWrapper.step() called before reset()")
        obs, rew, term, trunc = out[0], out[1], out[2], out[3]
        progress = info.setdefault("task_progress", NO_PROGRESS)
        end = term or trunc
        if progress is not NO_PROGRESS or episode.progress is not NO_PROGRESS:
            progress = self._stepped_progress(progress, info, episode)
            end = end or (episode.change_task_on_completion and progress >= 1.0)
        if episode.record is not None:
            episode.record(episode.assignment, obs, rew, term, trunc, info, progress)
        if end:
            return self._finish_step(obs, rew, term, trunc, info, progress, episode)
        return out

    @staticmethod
    def _stepped_progress(progress: Any, info: dict, episode: _Episode) -> float:
        """A step's progress other than the default: checked, put in the info, remembered."""
        if progress.__class__ is not float or not 0.0 <= progress <= 1.0:
            progress = _progress(progress, episode.info_task)
        info["task_progress"] = progress
        episode.progress = progress if progress else NO_PROGRESS  # back at 0: the short path again
        episode.rewatch()
        return progress

    def _finish_step(
        self, obs: Any, rew: Any, term: bool, trunc: bool, info: dict, progress: float, episode: _Episode
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The episode's end or a task switch on completion: what not every step needs."""
        if term or trunc:
            episode.finish(episode.assignment, progress)
        elif episode.change_task_on_completion and progress >= 1.0:
            new = episode.switch()
            decoded = self.task_space.decode(episode.info_task)
            try:
                set_task = self.env.get_wrapper_attr("set_task")
            except AttributeError:
                set_task = self.env.get_wrapper_attr("change_task")
            set_task(decoded)
            info["next_task"] = episode.info_task
            info["next_task_train"] = new.train
            info["next_task_control"] = new.control
        return obs, rew, term, trunc, info

    def close(self) -> None:
        """Report an unfinished task, return unused ones, close the connection, then the env."""
        self._episode.close()
        super().close()


def _find_task_space(env: Any) -> TaskSpace:
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
    curricula's :class:`~magister.curricula.opponent_store.OutcomeRule` reads.

    **Per-agent episodes.** With ``per_agent_episodes=True`` a finished episode is reported as one episode
    update *per agent*: that agent's return, its length (the steps in which it received a reward) and its
    last ``task_progress``, with ``extras["agent"]`` naming it, so a single-agent task curriculum counts each
    agent's trajectory as its own episode (as needed for many-agent envs). The first of these updates
    acknowledges the task; the others carry task id ``-1`` (the server's "task chosen by the env"), so the
    server's accounting still sees each task consumed once while ``episodes_applied`` counts one per agent.
    An episode abandoned by an early reset is still reported once (it reaches no curriculum either way).

    Arguments are those of :class:`GymnasiumSyncWrapper`, plus ``per_agent_episodes``.
    """

    def __init__(
        self,
        env: Any,
        source: Source,
        *,
        prefetch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        strip_keys: Iterable[str] = (),
        send_obs: bool = True,
        send_infos: bool = True,
        change_task_on_completion: bool = False,
        fallback_task_space: TaskSpace | None = None,
        curve_server_key: bytes | str | None = None,
        per_agent_episodes: bool = False,
        max_update_delay: float | None = None,
        curve_client_keys: tuple[bytes | str, bytes | str] | None = None,
    ) -> None:
        super().__init__(env)
        self.task_space: TaskSpace = _find_task_space(env)
        if isinstance(strip_keys, str):
            raise TypeError("strip_keys must be an iterable of keys, not a single str")
        self._episode = _Episode(
            source,
            _options(
                prefetch, timeout, strip_keys, send_obs, send_infos, fallback_task_space, curve_server_key,
                max_update_delay, task_space=self.task_space, curve_client_keys=curve_client_keys,
            ),
            change_task_on_completion,
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
        assert self._episode.assignment is not None
        fields = self._episode.info_fields
        out = {k: dict(v) for k, v in infos.items()}
        for agent in agents:
            d = out.setdefault(agent, {})
            d.update(fields)
            d["task_progress"] = progress
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, dict]]:
        """Reset on the next task of the curriculum (or on ``options["task"]`` when given)."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        opts = dict(options) if options else {}
        has_explicit = "task" in opts
        self._episode.start(opts.get("task"), self.task_space, has_explicit, seed)
        if not has_explicit:
            opts["task"] = self.task_space.decode(self._episode.info_task)  # the task played
        obs, infos = self.env.reset(seed=seed, options=opts)
        for info in infos.values():
            if isinstance(info, dict) and "task" in info:
                _check_reset_task(info["task"], self._episode.info_task, self.env)
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
            v = _finite(f"reward of agent {agent!r}", r, a.task)
            ep.agent_returns[agent] = ep.agent_returns.get(agent, 0.0) + v
            ep.agent_lengths[agent] = ep.agent_lengths.get(agent, 0) + 1
            info = infos.get(agent)
            if isinstance(info, dict) and "task_progress" in info:
                ep.agent_progress[agent] = _progress(info["task_progress"], a.task)
            total += v
        progress = max(
            (_progress(i.get("task_progress", 0.0), a.task) for i in infos.values() if isinstance(i, dict)),
            default=0.0,
        )
        for agent in set(terms) | set(truncs):
            if terms.get(agent, False) or truncs.get(agent, False):
                self._done_agents.add(agent)
        live = set(getattr(self.env, "agents", ())) - self._done_agents
        all_done = not live
        term_all = all_done and any(bool(v) for v in terms.values())
        trunc_all = all_done and not term_all
        # the summed agent returns were already added above; _Episode.step adds the step total to ret
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
