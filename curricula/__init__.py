"""Curricula: one algorithm per file. ``base.py`` holds the Curriculum and Agent APIs."""

from .base import AgentCurriculum, Curriculum, StepBatch, TaskSample
from .constant import Constant
from .domain_randomization import DomainRandomization
from .expanding_box import ExpandingBox
from .manual import Manual
from .sequential import Sequential
from .stopping import Condition, ConditionSyntaxError, parse_condition

__all__ = [
    "AgentCurriculum",
    "Condition",
    "ConditionSyntaxError",
    "Constant",
    "Curriculum",
    "DomainRandomization",
    "ExpandingBox",
    "Manual",
    "Sequential",
    "StepBatch",
    "TaskSample",
    "parse_condition",
]
