"""Curricula: one algorithm per file. ``base.py`` holds the Curriculum and Agent APIs."""

from ..opponents import CURRENT_AGENT, CorruptSnapshotError, OpponentLoader, OpponentStore
from .accel import ACCEL
from .adr import ADR
from .alp_gmm import ALPGMM
from .base import AgentCurriculum, Curriculum, Episode, StepBatch, TaskSample
from .constant import Constant
from .coplayer import OpponentCurriculum, OutcomeRule
from .covar_gmm import CovarGMM
from .domain_randomization import DomainRandomization
from .dual import DualCurriculum
from .expanding_box import ExpandingBox
from .fsp import FSP
from .goal_gan import GoalGAN
from .interestingness import EmbeddingJudge, InterestingnessJudge, JudgeError, LLMJudge
from .learning_progress import LearningProgress
from .manual import Manual
from .omni import OMNI
from .pfsp import PFSP
from .plr import PLR, PLRPerp, RobustPLR
from .riac import RIAC
from .self_paced import SelfPaced
from .self_play import SelfPlay
from .sequential import Sequential
from .sfl import SFL
from .stopping import Condition, ConditionSyntaxError, parse_condition
from .task_filter import DTGThresholds, TaskFilter

__all__ = [
    "ACCEL",
    "ADR",
    "AgentCurriculum",
    "CURRENT_AGENT",
    "Condition",
    "ConditionSyntaxError",
    "Constant",
    "CorruptSnapshotError",
    "Curriculum",
    "DTGThresholds",
    "DomainRandomization",
    "DualCurriculum",
    "Episode",
    "EmbeddingJudge",
    "ExpandingBox",
    "FSP",
    "GoalGAN",
    "InterestingnessJudge",
    "JudgeError",
    "LLMJudge",
    "LearningProgress",
    "Manual",
    "OMNI",
    "OpponentCurriculum",
    "OpponentLoader",
    "OpponentStore",
    "OutcomeRule",
    "PFSP",
    "PLR",
    "PLRPerp",
    "RIAC",
    "RobustPLR",
    "SFL",
    "SelfPaced",
    "SelfPlay",
    "Sequential",
    "StepBatch",
    "TaskFilter",
    "TaskSample",
    "parse_condition",
    "ALPGMM",
    "CovarGMM",
]
