"""Reports as a test writes them by hand: one update each (see :class:`magister.sync.protocol.Report`)."""

from __future__ import annotations

import numpy as np

from magister.sync import protocol as P


def episode(env, task_id, task, ret, length, progress, ended=True, extras=None, request=0) -> P.Report:
    """A report of one episode."""
    return P.Report(env, (P.EpisodeEnd(task_id, task, ret, length, progress, ended, extras),), request)


def progress(env, task_id, task, value, done=False, request=0) -> P.Report:
    """A report of progress on one task."""
    return P.Report(env, (P.Progress(task_id, task, value, done),), request)


def steps(env, task_ids, tasks, rewards, terminated, truncated, progress, obs=None, infos=None) -> P.Report:
    """A report of one part of step records."""
    flags = np.asarray(terminated, bool), np.asarray(truncated, bool)
    part = P.Steps(np.asarray(task_ids), tuple(tasks), np.asarray(rewards, float), *flags,
                   np.asarray(progress, float), obs, infos)
    return P.Report(env, (part,))


def request(env, count) -> P.Report:
    """A report asking for ``count`` tasks."""
    return P.Report(env, request=count)
