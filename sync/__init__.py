"""The sender–receiver layer: wire protocol, curriculum server, env-side client (ZeroMQ + msgpack).

The Ray backend lives in :mod:`magister.sync.ray_backend` (imported only when Ray is installed).
"""

from .client import (
    DEFAULT_PREFETCH,
    Assignment,
    CurriculumClient,
    LocalClient,
    ServerUnavailableError,
    SyncError,
    TaskFeed,
    connect,
)
from .protocol import PROTOCOL_VERSION, ProtocolError, ProtocolVersionError
from .security import CurveKeyPair, generate_keypair, load_keypair
from .server import CurriculumServer, SyncCore, SyncRejected, serve

__all__ = [
    "DEFAULT_PREFETCH",
    "PROTOCOL_VERSION",
    "Assignment",
    "CurriculumClient",
    "CurriculumServer",
    "CurveKeyPair",
    "LocalClient",
    "ProtocolError",
    "ProtocolVersionError",
    "ServerUnavailableError",
    "SyncCore",
    "SyncError",
    "SyncRejected",
    "TaskFeed",
    "connect",
    "generate_keypair",
    "load_keypair",
    "serve",
]
