"""Curricula: one algorithm per file. ``base.py`` holds the Curriculum and Agent APIs."""

from .base import AgentCurriculum, Curriculum, StepBatch, TaskSample

__all__ = ["AgentCurriculum", "Curriculum", "StepBatch", "TaskSample"]
