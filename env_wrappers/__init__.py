"""Gymnasium and PettingZoo wrappers: task switching on reset, feedback, sync wrappers."""

from .aec import PettingZooAECSyncWrapper, PettingZooAECTaskWrapper
from .coplayer import CoPlayerWrapper, OpponentIds, SingleLearnerEnv, TurnBasedParallelEnv
from .pettingzoo_wrapper import PettingZooReinitTaskWrapper, PettingZooTaskWrapper
from .reinit import ReinitTaskWrapper
from .sync_wrappers import GymnasiumSyncWrapper, PettingZooSyncWrapper
from .task_wrapper import TaskSwitching, TaskWrapper, check_progress

__all__ = [
    "CoPlayerWrapper",
    "OpponentIds",
    "SingleLearnerEnv",
    "TurnBasedParallelEnv",
    "GymnasiumSyncWrapper",
    "PettingZooAECSyncWrapper",
    "PettingZooAECTaskWrapper",
    "PettingZooSyncWrapper",
    "PettingZooReinitTaskWrapper",
    "PettingZooTaskWrapper",
    "ReinitTaskWrapper",
    "TaskSwitching",
    "TaskWrapper",
    "check_progress",
]
