"""Glue for trainers: learner-side score helpers (numpy and torch), and later SB3/RLlib callbacks, logging."""

from .scores import SegmentScores, compute_advantages, feed_scores, rollout_scores

__all__ = ["SegmentScores", "compute_advantages", "feed_scores", "rollout_scores"]
