"""Relays: Ray actors each serving a share of the envs (a :class:`~magister.sync.ray_server.CurriculumActor`,
its own leases and ledger) with tasks drawn from the curriculum actor through one deep feed; each update a
relay applies goes upstream on its task's lease, many to a call (``docs/guides/relays.md``)."""

from __future__ import annotations

import logging

import ray

from ..curricula.base import Curriculum, TaskSample
from ..task_spaces.base import TaskSpace
from . import protocol as P
from .core import EnvCounters, ServedCurriculum, SyncCore
from .feed import Assignment, RayClient
from .options import FeedOptions, ServerOptions
from .ray_server import CurriculumActor, RayCurriculumServer
from .transports.ray import describe_actor, get

logger = logging.getLogger(__name__)
__all__ = ["RelayServer", "serve_relays"]


class Upstream(Curriculum):
    """A relay's curriculum: the curriculum actor's tasks, drawn through ``feed`` (its counts in metrics)."""

    def __init__(self, address: str, task_space: TaskSpace, options: FeedOptions) -> None:
        super().__init__(task_space)
        self.feed = RayClient(address, options, task_space=task_space)
        self.drawn: list[Assignment] = []  # the last tasks drawn
        self.leases: dict[int, dict[int, Assignment]] = {}  # env id -> {relay lease: upstream assignment}

    def sample(self, k: int = 1) -> list:
        raise NotImplementedError("a relay's tasks are for its envs: sample from the curriculum actor")

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        self.drawn = [self.feed.next_task() for _ in range(k)]
        return [TaskSample(a.task, a.train, a.control, a.variant) for a in self.drawn]

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), **{f"relay/{k}": float(v) for k, v in self.feed.stats.items()}}

    def join(self) -> bool:  # (whether the curriculum wants step updates)
        self.feed.give_back(self.feed.next_task())
        return self.feed.requires_step_updates

    def leave(self) -> None:
        self.feed.close()  # what is held goes; the unused tasks go back


class RelayCore(SyncCore):
    """A core whose leases each stand for an upstream one: each episode and progress update it applies goes
    upstream on its task's lease (steps do not: the relay asks for none); an env's unfinished tasks go back
    to the feed."""

    def assign_tasks(self, env_id: int, count: int) -> P.Tasks:
        with self.lock:
            tasks = super().assign_tasks(env_id, count)
            self.curriculum.leases.setdefault(env_id, {}).update(zip(tasks.task_ids, self.curriculum.drawn))
        return tasks

    def _episode(self, c: EnvCounters, env_id: int, end: P.EpisodeEnd) -> None:
        super()._episode(c, env_id, end)  # (refused: raises, nothing goes upstream)
        a = self._upstream(env_id, end, ends=True)
        if a is not None:
            self.curriculum.feed.record_episode(a, end.ret, end.length, end.progress, end.ended, end.extras,
                                                agents=list(end.agents))

    def _progress(self, c: EnvCounters, env_id: int, update: P.Progress) -> None:
        super()._progress(c, env_id, update)
        a = self._upstream(env_id, update, ends=update.done)
        if a is not None:
            self.curriculum.feed.record_progress(a, update.progress, update.done)

    def _upstream(self, env_id: int, u: P.EpisodeEnd | P.Progress, ends: bool) -> Assignment | None:
        """The upstream lease of an applied update, ended here when ``ends`` (``None`` for a lease that
        ended otherwise: counted)."""
        if u.task_id == P.ENV_TASK:  # (a task the env chose: none drawn upstream)
            return Assignment(P.ENV_TASK, u.task)
        mine = self.curriculum.leases.get(env_id, {})
        return mine.pop(u.task_id, None) if ends else mine.get(u.task_id)

    def depart(self, env_id: int, reason: str = "goodbye") -> int:
        with self.lock:
            for a in self.curriculum.leases.pop(env_id, {}).values():  # returned or abandoned here
                self.curriculum.feed.give_back(a)
            return super().depart(env_id, reason)


class RelayServer(RayCurriculumServer):
    """Learner-side proxy of a relay; :meth:`close` first sends upstream what the relay holds."""

    def close(self) -> None:
        try:
            if not self.closed:
                self.call("leave")
        except Exception as exc:  # dead, or Ray shut down: the curriculum actor counts what it held
            logger.warning("%s: could not leave the curriculum actor: %s", self.address, exc)
        super().close()


def serve_relays(upstream: str | ServedCurriculum, task_space: TaskSpace, n: int, *,
                 name: str = "magister_relay", namespace: str | None = None, max_restarts: int = -1,
                 options: ServerOptions | None = None, feed: FeedOptions | None = None,
                 actor_options: dict | None = None) -> list[RelayServer]:
    """``n`` relays (actors ``<name>_<i>``, restarted ``max_restarts`` times) before the curriculum actor
    ``upstream`` serving ``task_space``; env ``i`` connects to ``relays[i % n].address``. ``options``: theirs;
    ``feed``: theirs upstream; ``actor_options``: more ``.options(...)`` (``num_cpus``, ``resources``).
    ``ValueError`` for a curriculum that wants step updates (not forwarded)."""
    address = upstream.address if isinstance(upstream, ServedCurriculum) else upstream  # (the feed checks it)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (the number of relays), got {n!r}")
    cur = Upstream(address, task_space, feed or FeedOptions(prefetch=256, update_batch=256, timeout=30.0))
    relays: list[RelayServer] = []
    try:
        for i in range(n):
            opts = {"num_cpus": 0, **(actor_options or {}), "name": f"{name}_{i}", "namespace": namespace}
            actor = ray.remote(CurriculumActor).options(max_concurrency=1, max_restarts=max_restarts, **opts)
            relays.append(RelayServer(actor.remote(cur, ServerOptions.of(options), None, RelayCore),
                                      opts["name"], namespace, owner=True))
        if any(get(r.actor.call.remote("join"), 300.0, describe_actor(r.name, namespace), "the start")
               for r in relays):
            raise ValueError("the curriculum wants step updates, which relays do not forward")
    except BaseException:
        for r in relays:
            r.close()
        raise
    return relays
