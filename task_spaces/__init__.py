"""Task spaces: what a task is (decoded for the env, encoded for curricula and the wire)."""

from .base import EncodedTask, TaskSpace, stable_hash, task_key

__all__ = ["EncodedTask", "TaskSpace", "stable_hash", "task_key"]
