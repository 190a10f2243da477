"""Glue for trainers: learner-side score helpers (numpy and torch), a rollout task recorder for CleanRL-style
loops, metrics logging, SB3 and RLlib callbacks.

The SB3 and RLlib modules import their libraries, so they are not re-exported here: use
``from magister.integrations.sb3 import CurriculumCallback`` and ``magister.integrations.rllib``.
"""

from .loggers import MetricsLogger, flatten_metrics, log_curriculum_metrics, top_tasks
from .rollout import RolloutTasks
from .scores import SegmentScores, compute_advantages, feed_scores, rollout_scores

__all__ = [
    "MetricsLogger",
    "RolloutTasks",
    "SegmentScores",
    "compute_advantages",
    "feed_scores",
    "flatten_metrics",
    "log_curriculum_metrics",
    "rollout_scores",
    "top_tasks",
]
