"""magister: portable curriculum middleware for asynchronous reinforcement learning."""

from .curricula.base import AgentCurriculum, Curriculum, StepBatch, TaskSample
from .task_spaces.base import TaskSpace, stable_hash, task_key

__version__ = "0.1.0"

__all__ = [
    "AgentCurriculum",
    "Curriculum",
    "StepBatch",
    "TaskSample",
    "TaskSpace",
    "stable_hash",
    "task_key",
    "__version__",
]
