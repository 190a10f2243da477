"""Relays: Ray actors between the envs and the curriculum actor, for more envs than one actor serves.

A relay serves its share of the envs as the curriculum actor does (a
:class:`~magister.sync.ray_server.CurriculumActor`: its own leases and ledger); its curriculum draws tasks
from the curriculum actor through one feed with a deep prefetch, and each episode or progress update a relay
applies goes upstream on the lease its task came from, held and sent with others as one call. To the
curriculum actor a relay is one env. Relays restart (``max_restarts``); a dead relay's upstream leases end
abandoned there, and its envs register with the new one. See ``docs/guides/relays.md``.
"""

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
    """A relay's curriculum: the tasks of the curriculum actor at ``address``, drawn through :attr:`feed`."""

    def __init__(self, address: str, task_space: TaskSpace, options: FeedOptions) -> None:
        super().__init__(task_space)
        self.feed = RayClient(address, options, task_space=task_space)
        self.drawn: list[Assignment] = []  # the last sample's upstream assignments, taken by the core
        self.closed = False

    def sample(self, k: int = 1) -> list:
        raise NotImplementedError("a relay hands the curriculum actor's tasks to its envs only: sample from "
                                  "the curriculum actor")

    def sample_tasks(self, k: int = 1) -> list[TaskSample]:
        drawn: list[Assignment] = []
        try:
            drawn.extend(self.feed.next_task() for _ in range(k))
        except BaseException:
            for a in reversed(drawn):
                self.feed.give_back(a)
            raise
        self.drawn.extend(drawn)
        return [TaskSample(a.task, a.train, a.control, a.variant) for a in drawn]

    def update_on_step_batch(self, batch: Any, env_id: int | None = None) -> None:
        raise ValueError("a relay forwards episodes and progress, not step updates")

    def metrics(self) -> dict[str, float]:
        """The feed's counts as ``relay/<count>`` (``relay/calls``: calls to the curriculum actor)."""
        return {**super().metrics(), **{f"relay/{k}": float(v) for k, v in self.feed.stats.items()}}

    def close_upstream(self) -> None:
        """Send what is held, return the unused tasks and leave the curriculum actor."""
        self.closed = True
        self.feed.close()


class RelayCore(SyncCore):
    """A :class:`SyncCore` that maps each lease it issues to the upstream lease of its task, forwards each
    update it applies on that lease, and gives back upstream the tasks its departed envs did not finish."""

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
        """Apply a report's updates one by one (each applied one is forwarded), then its request."""
        if type(msg) is not P.Report or not self.is_live(msg.env_id):
            return super().apply(msg)
        if self.curriculum.closed:
            raise SyncRejected("relay_closed", "this relay left the curriculum actor: close its envs first")
        with self.lock:
            refused = []
            for update in msg.updates:
                try:
                    super().apply(P.Report(msg.env_id, (update,)))
                except SyncRejected as exc:
                    refused.append(exc)
                else:
                    self._forward(msg.env_id, update)
            if refused:
                n, first = len(msg.updates), refused[0]
                exc = first if n == 1 else SyncRejected(first.code, f"{len(refused)} of {n} updates "
                                                                     f"refused; the first: {first}")
                exc.reply = self.answer(P.Report(msg.env_id, (), msg.request))[0] if msg.request else None
                raise exc
            return super().apply(P.Report(msg.env_id, (), msg.request)) if msg.request else None

    def _forward(self, env_id: int, u: P.Update) -> None:
        """Send an applied update upstream on its lease (one for a lease that ended otherwise is counted by
        the core and goes no further)."""
        mine = self.upstream.get(env_id, {})
        if type(u) is P.Steps:
            return
        a = Assignment(P.ENV_TASK, u.task) if u.task_id == P.ENV_TASK else mine.get(u.task_id)
        if a is None:
            return
        feed = self.curriculum.feed
        if type(u) is P.EpisodeEnd:
            mine.pop(u.task_id, None)
            feed.record_episode(a, u.ret, u.length, u.progress, u.ended, u.extras, agents=list(u.agents))
        else:
            if u.done:
                mine.pop(u.task_id, None)
            feed.record_progress(a, u.progress, u.done)

    def depart(self, env_id: int, reason: str = "goodbye") -> int:
        with self.lock:
            n = super().depart(env_id, reason)
            for a in self.upstream.pop(env_id, {}).values():  # returned or abandoned here: served again
                self.curriculum.feed.give_back(a)
        return n


class RelayActor(CurriculumActor):
    """The body of a relay actor: a :class:`CurriculumActor` with a :class:`RelayCore`."""

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
    """Learner-side proxy of one relay (its ``metrics()`` are the relay's ledger and ``relay/<count>``);
    :meth:`close` first sends what the relay holds and returns its unused tasks upstream."""

    def close(self) -> None:
        if not self.closed:
            try:
                self.call("close_upstream")
            except Exception as exc:  # dead, or Ray shut down: the curriculum actor counts what it held
                logger.warning("%s: could not leave the curriculum actor: %s", self.address, exc)
        super().close()


def serve_relays(upstream: str | ServedCurriculum, task_space: TaskSpace, n: int, *,
                 name: str = "magister_relay", namespace: str | None = None, max_restarts: int = -1,
                 options: ServerOptions | None = None, feed: FeedOptions | None = None,
                 start_timeout: float = 300.0) -> list[RelayServer]:
    """Start ``n`` relays (actors ``<name>_<i>``) in front of the curriculum actor ``upstream`` (its server
    or address); spread the envs over their ``address`` es (env ``i`` to relay ``i % n``).

    ``task_space`` is the curriculum's; ``options`` the relays' :class:`ServerOptions`; ``feed`` their
    :class:`FeedOptions` upstream (default: 256 tasks prefetched, updates sent 256 at a time). Relays are
    restarted ``max_restarts`` times (``-1``: always). Close them (envs first) before the curriculum actor.

    Raises:
        ValueError: ``n`` < 1, a bad address, or a curriculum that wants step updates (relays do not
            forward them). ServerUnavailableError: a relay did not start within ``start_timeout``.
    """
    address = upstream.address if isinstance(upstream, ServedCurriculum) else upstream
    parse_ray_address(address)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (the number of relays), got {n!r}")
    curriculum = Upstream(address, task_space, feed or FeedOptions(prefetch=256, update_batch=256, timeout=30))
    relays: list[RelayServer] = []
    try:
        for i in range(n):
            actor = ray.remote(RelayActor).options(
                name=f"{name}_{i}", namespace=namespace, max_concurrency=1, max_restarts=max_restarts,
                num_cpus=0).remote(curriculum, ServerOptions.of(options))
            relays.append(RelayServer(actor, f"{name}_{i}", namespace, owner=True))
        steps = [get(r.actor.start.remote(), start_timeout, describe_actor(r.name, namespace), "the start")
                 for r in relays]
        if any(steps):
            raise ValueError("the curriculum wants step updates, which relays do not forward: connect its "
                             "envs to the curriculum actor directly")
    except BaseException:
        for r in relays:
            r.close()
        raise
    return relays
