"""Opponents: policy snapshots on disk, shared by a learner and its environment workers.

:class:`OpponentStore` (the learner adds snapshots, bounded in count and bytes, with file locks and
leases) and :class:`OpponentLoader` (a worker keeps the opponent it plays leased and loaded). The co-player
curricula that sample opponent ids live in :mod:`magister.curricula`; their task space is
:class:`~magister.task_spaces.OpponentIdSpace`.
"""

from .loader import OpponentLoader
from .store import CURRENT_AGENT, CorruptSnapshotError, OpponentStore, check_opponent_id

__all__ = ["CURRENT_AGENT", "CorruptSnapshotError", "OpponentLoader", "OpponentStore", "check_opponent_id"]
