"""Relays: Ray actors serving a share of the envs each (a :class:`~magister.sync.ray_server.CurriculumActor`
with its own leases and ledger) on tasks drawn from the curriculum actor through one deep feed; each update a
relay applies goes upstream on its task's lease, many in one call. To the curriculum actor a relay is one env
(see ``docs/guides/relays.md``)."""

from __future__ import annotations

import logging
from typing import Any

import ray

from ..curricula.base import Curriculum, TaskSample
from ..task_spaces.base import TaskSpace
from . import protocol as P
from .core import ServedCurriculum, SyncCore, SyncRejected
from .feed import Assignment, RayClient
from .options import FeedOptions, ServerOptions
from .ray_server import CurriculumActor, RayCurriculumServer
from .transports.ray import describe_actor, get, parse_ray_address

logger = logging.getLogger(__name__)
__all__ = ["RelayServer", "serve_relays"]


class Upstream(Curriculum):
    """A relay's curriculum: the curriculum actor's tasks, drawn through ``feed`` (its counts in metrics)."""

    def __init__(self, address: str, task_space: TaskSpace, options: FeedOptions) -> None:
        super().__init__(task_space)
        self.feed = RayClient(address, options, task_space=task_space)
        self.drawn: list[Assignment] = []  # what sample_tasks drew, taken by the core
        self.closed = False

    def sample(self, k: int = 1) -> list:
        raise NotImplementedError("a relay's tasks are for its envs: sample from the curriculum actor")

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        start = len(self.drawn)
        try:
            self.drawn.extend(self.feed.next_task() for _ in range(k))
        except BaseException:  # (those drawn go back)
            while len(self.drawn) > start:
                self.feed.give_back(self.drawn.pop())
            raise
        return [TaskSample(a.task, a.train, a.control, a.variant) for a in self.drawn[start:]]

    def update_on_step_batch(self, batch: Any, env_id: int | None = None) -> None:
        raise ValueError("a relay forwards episodes and progress, not step updates")

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), **{f"relay/{k}": float(v) for k, v in self.feed.stats.items()}}

    def close_upstream(self) -> None:
        self.closed = True
        self.feed.close()  # what is held goes, the unused tasks go back


class RelayCore(SyncCore):
    """A core mapping each lease it issues to its task's upstream lease: each update applied goes upstream on
    it; the tasks of an env that leaves unfinished go back to the feed, to be served again."""

    def __init__(self, curriculum: Upstream, options: ServerOptions) -> None:
        super().__init__(curriculum, options)
        self.upstream: dict[int, dict[int, Assignment]] = {}  # env id -> {its lease: the upstream one}

    def assign_tasks(self, env_id: int, count: int) -> P.Tasks:
        with self.lock:
            tasks = super().assign_tasks(env_id, count)
            drawn, self.curriculum.drawn = self.curriculum.drawn, []
            self.upstream.setdefault(env_id, {}).update(zip(tasks.task_ids, drawn))
        return tasks

    def apply(self, msg: P.Message) -> P.Message | None:
        """A report's updates one by one, each applied one forwarded; then the first refusal (carrying the
        tasks asked for) or the tasks."""
        if type(msg) is not P.Report or not self.is_live(msg.env_id):
            return super().apply(msg)
        if self.curriculum.closed:
            raise SyncRejected("relay_closed", "this relay left the curriculum actor: close its envs first")
        with self.lock:
            refused = []
            for u in msg.updates:
                try:
                    super().apply(P.Report(msg.env_id, (u,)))
                    self._forward(self.upstream.get(msg.env_id, {}), u)
                except SyncRejected as exc:
                    refused.append(exc)
            ask = P.Report(msg.env_id, (), msg.request)
            if refused:
                refused[0].reply = self.answer(ask)[0] if msg.request else None
                raise refused[0]
            return super().apply(ask) if msg.request else None

    def _forward(self, mine: dict[int, Assignment], u: P.Update) -> None:
        """Send an applied update upstream on its lease (not one on a lease that ended otherwise: counted)."""
        if type(u) is P.Steps:
            return
        ends = type(u) is P.EpisodeEnd or u.done
        a = Assignment(P.ENV_TASK, u.task) if u.task_id == P.ENV_TASK else (mine.pop if ends else mine.get)(
            u.task_id, None)
        if a is not None and type(u) is P.EpisodeEnd:
            self.curriculum.feed.record_episode(a, u.ret, u.length, u.progress, u.ended, u.extras,
                                                agents=list(u.agents))
        elif a is not None:
            self.curriculum.feed.record_progress(a, u.progress, u.done)

    def depart(self, env_id: int, reason: str = "goodbye") -> int:
        with self.lock:
            n = super().depart(env_id, reason)
            for a in self.upstream.pop(env_id, {}).values():  # returned or abandoned here
                self.curriculum.feed.give_back(a)
        return n


class RelayActor(CurriculumActor):
    """A relay: a :class:`CurriculumActor` with a :class:`RelayCore`."""

    def __init__(self, curriculum: Upstream, options: ServerOptions) -> None:
        super().__init__(curriculum, options)
        self.core = RelayCore(self.core.curriculum, self.core.options)

    def start(self) -> bool:
        """Join the curriculum actor now; whether its curriculum wants step updates."""
        with self.core.lock:
            feed = self.core.curriculum.feed
            feed.give_back(feed.next_task())
            return feed.requires_step_updates


class RelayServer(RayCurriculumServer):
    """Learner-side proxy of a relay; :meth:`close` first sends upstream what the relay holds."""

    def close(self) -> None:
        try:
            self.closed or self.call("close_upstream")
        except Exception as exc:  # dead, or Ray shut down: the curriculum actor counts what it held
            logger.warning("%s: could not leave the curriculum actor: %s", self.address, exc)
        super().close()


def serve_relays(upstream: str | ServedCurriculum, task_space: TaskSpace, n: int, *,
                 name: str = "magister_relay", namespace: str | None = None, max_restarts: int = -1,
                 options: ServerOptions | None = None, feed: FeedOptions | None = None,
                 start_timeout: float = 300.0) -> list[RelayServer]:
    """Start ``n`` relays (actors ``<name>_<i>``, restarted ``max_restarts`` times, ``-1``: always) before
    the curriculum actor ``upstream`` (its server or address) serving ``task_space``; env ``i`` connects to
    ``relays[i % n].address``. ``options``: the relays' :class:`ServerOptions`; ``feed``: their
    :class:`FeedOptions` upstream (default: 256 tasks prefetched, 256 updates a call). Close the envs, then
    the relays, then the curriculum actor. ``ValueError`` for ``n`` < 1, a bad address, or a curriculum that
    wants step updates (relays do not forward them)."""
    address = upstream.address if isinstance(upstream, ServedCurriculum) else upstream
    parse_ray_address(address)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (the number of relays), got {n!r}")
    cur = Upstream(address, task_space, feed or FeedOptions(prefetch=256, update_batch=256, timeout=30.0))
    relays: list[RelayServer] = []
    try:
        for i in range(n):
            actor = ray.remote(RelayActor).options(name=f"{name}_{i}", namespace=namespace, max_concurrency=1,
                                                   max_restarts=max_restarts, num_cpus=0)
            relays.append(RelayServer(actor.remote(cur, ServerOptions.of(options)), f"{name}_{i}", namespace,
                                      owner=True))
        if any(get(r.actor.start.remote(), start_timeout, describe_actor(r.name, namespace), "the start")
               for r in relays):
            raise ValueError("the curriculum wants step updates, which relays do not forward: connect its "
                             "envs to the curriculum actor directly")
    except BaseException:
        for r in relays:
            r.close()
        raise
    return relays
