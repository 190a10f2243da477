"""magister: portable curriculum middleware for asynchronous reinforcement learning.

One object on the learner side, one wrapper on the environment side, an address string between them::

    server = serve(curriculum)                                  # learner process
    env = GymnasiumSyncWrapper(MyTaskWrapper(env), server.address)   # each env worker

Checkpoints: ``magister.save(path, server.state_dict())`` and ``server.load_state_dict(magister.load(path))``
(:mod:`magister.checkpoint`: data only, loading runs no code from the file).

Subpackages: :mod:`magister.task_spaces`, :mod:`magister.curricula`, :mod:`magister.sync`,
:mod:`magister.env_wrappers`, :mod:`magister.integrations`, :mod:`magister.opponents`,
:mod:`magister.embeddings`, :mod:`magister.examples`.
"""

from .checkpoint import load, save
from .curricula.base import AgentCurriculum, Curriculum, Episode, StepBatch, TaskSample
from .env_wrappers.pettingzoo_wrapper import PettingZooTaskWrapper
from .env_wrappers.reinit import ReinitTaskWrapper
from .env_wrappers.sync_wrappers import GymnasiumSyncWrapper, PettingZooSyncWrapper
from .env_wrappers.task_wrapper import TaskWrapper
from .sync.options import FeedOptions, ServerOptions
from .sync.zmq_server import CurriculumServer, serve
from .task_spaces.base import TaskSpace, stable_hash, task_key

__version__ = "0.1.0"

__all__ = [
    "AgentCurriculum",
    "Curriculum",
    "CurriculumServer",
    "Episode",
    "FeedOptions",
    "GymnasiumSyncWrapper",
    "PettingZooSyncWrapper",
    "PettingZooTaskWrapper",
    "ReinitTaskWrapper",
    "ServerOptions",
    "StepBatch",
    "TaskSample",
    "TaskSpace",
    "TaskWrapper",
    "__version__",
    "load",
    "save",
    "serve",
    "stable_hash",
    "task_key",
]
