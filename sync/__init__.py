"""The sender–receiver layer between a curriculum and its environments.

* :mod:`~magister.sync.protocol` — the wire messages (msgpack, no pickle);
* :mod:`~magister.sync.core` — the transport-agnostic core: registration, leases, accounting, applying
  updates;
* the endpoints, side by side: :mod:`~magister.sync.zmq_server` (ZeroMQ), :mod:`~magister.sync.ray_server`
  (a Ray actor; imported only when Ray is installed); in-process envs feed the core directly
  (:mod:`~magister.sync.transports.inprocess`);
* the env side: :mod:`~magister.sync.feed` (one feed of tasks and feedback) over
  :mod:`~magister.sync.transports`, its settings in :mod:`~magister.sync.options`, its step records in
  :mod:`~magister.sync.steps`;
* :mod:`~magister.sync.security` (CURVE keys, addresses) and :mod:`~magister.sync.ratelimit` (log limits).
"""

from .core import EnvCounters, ServerHandle, SyncCore, SyncRejected
from .feed import (
    DEFAULT_PREFETCH,
    Assignment,
    CurriculumClient,
    LocalClient,
    ServerUnavailableError,
    SyncError,
    TaskFeed,
    connect,
)
from .options import FeedOptions, ServerOptions
from .protocol import PROTOCOL_VERSION, ProtocolError, ProtocolVersionError
from .security import CurveKeyPair, check_address, generate_keypair, load_keypair
from .zmq_server import CurriculumServer, serve

__all__ = [
    "DEFAULT_PREFETCH", "PROTOCOL_VERSION", "Assignment", "CurriculumClient", "CurriculumServer",
    "CurveKeyPair", "EnvCounters", "FeedOptions", "LocalClient", "ProtocolError", "ProtocolVersionError",
    "ServerHandle", "ServerOptions", "ServerUnavailableError", "SyncCore", "SyncError", "SyncRejected",
    "TaskFeed", "check_address", "connect", "generate_keypair", "load_keypair", "serve"
]
