"""RLlib integration (Ray 2.x, new API stack): curriculum envs on every env runner, learner feedback.

Three pieces, used together with the Ray backend of the sync layer (:mod:`magister.sync.ray_server`)::

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from magister.integrations.rllib import magister_callbacks, make_env_creator
    from magister.sync.ray_server import serve_ray

    ray.init()
    server = serve_ray(curriculum, name="my_curriculum")            # the curriculum, as a named Ray actor
    make_env_creator(make_task_env, server.address, register_as="curriculum_env")
    config = (
        PPOConfig()
        .environment("curriculum_env")                               # each env runner builds wrapped envs
        .callbacks(magister_callbacks(server.address))               # learner-side metrics -> curriculum
    )
    algo = config.build_algo()

* :func:`make_env_creator` turns ``env_fn(env_config) -> TaskWrapper env`` into an RLlib env creator whose
  envs are ``GymnasiumSyncWrapper(env_fn(env_config), address)``. Each env runner builds its envs in its
  own process; each env connects to the curriculum actor on its first ``reset`` (so envs RLlib builds only
  to read the spaces never register) and takes its tasks from it.
* :class:`MagisterCallbacks` (an ``RLlibCallback``; bind it to an address with :func:`magister_callbacks`)
  sends learner-side metrics to the curriculum after every ``Algorithm.train()`` with
  ``update_on_demand`` (by default every finite numeric training result, flattened with ``/`` keys; pass
  ``metrics_fn`` to build the payload a curriculum documents, e.g. ``{"success_rates": ...}``), adds the
  curriculum's own metrics and the sync accounting to the result under ``"magister"``, and logs the final
  ``task_progress`` of each episode on the env runners as ``"magister/task_progress"``.

Keep RLlib's default ``gym_env_vectorize_mode="sync"`` (sub-envs in the env runner's process): the Ray
client does not follow envs into processes forked from a Ray worker.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

try:
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.tune.registry import register_env
except ImportError as _exc:  # pragma: no cover - exercised only without ray[rllib]
    raise ImportError(
        "magister.integrations.rllib needs RLlib; install it with `pip install 'ray[rllib]'`"
    ) from _exc

from ..env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from ..sync.ray_server import RayCurriculumServer, parse_ray_address

logger = logging.getLogger(__name__)

__all__ = ["MagisterCallbacks", "magister_callbacks", "make_env_creator", "result_metrics"]

#: Result keys with these prefixes are left out of the default ``update_on_demand`` payload (configuration,
#: system and this callback's own entries) ...
_SKIPPED_PREFIXES = ("config/", "perf/", "timers/", "fault_tolerance/", "magister/")
#: ... and so are timing entries anywhere in the result.
_SKIPPED_PARTS = ("timer", "throughput")


def _wanted(key: str) -> bool:
    return not key.startswith(_SKIPPED_PREFIXES) and not any(p in key for p in _SKIPPED_PARTS)


def make_env_creator(
    env_fn: Callable[[Mapping[str, Any]], gym.Env],
    address: str,
    *,
    register_as: str | None = None,
    **wrapper_kwargs: Any,
) -> Callable[[Mapping[str, Any]], GymnasiumSyncWrapper]:
    """An RLlib env creator: ``config -> GymnasiumSyncWrapper(env_fn(config), address, **wrapper_kwargs)``.

    Args:
        env_fn: Builds one task-switching env (a :class:`~magister.env_wrappers.task_wrapper.TaskWrapper`,
            possibly inside other wrappers) from RLlib's env config (an ``EnvContext``: your
            ``env_config`` plus ``worker_index`` and friends). It runs on the env runners, so it must be
            picklable (a module-level function or a closure over picklable values).
        address: The curriculum's address: ``server.address`` of
            :func:`~magister.sync.ray_server.serve_ray` (``"ray://..."``), or of a ZeroMQ
            :func:`~magister.sync.zmq_server.serve` reachable from the runners.
        register_as: Also register the creator with Ray Tune's registry under this name, for
            ``config.environment(register_as)``.
        **wrapper_kwargs: Passed to :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper`
            (``prefetch``, ``timeout``, ``strip_keys``, ...).

    Raises:
        TypeError: ``env_fn`` is not callable or ``address`` is not a str.
        ValueError: ``address`` is not an address, or ``register_as`` is an empty name.
    """
    if not callable(env_fn):
        raise TypeError(f"env_fn must be callable(env_config) -> gym.Env, got {type(env_fn).__name__}")
    if not isinstance(address, str):
        raise TypeError(f"address must be the curriculum's address (a str), got {type(address).__name__}")
    if address.startswith("ray://"):
        parse_ray_address(address)  # fail here, on the driver, rather than on every env runner
    elif "://" not in address:
        raise ValueError(f"address must look like 'ray://<name>' or 'tcp://host:port', got {address!r}")
    if register_as is not None and (not isinstance(register_as, str) or not register_as):
        raise ValueError(f"register_as must be a non-empty env name, got {register_as!r}")
    options = dict(wrapper_kwargs)

    def creator(env_config: Mapping[str, Any]) -> GymnasiumSyncWrapper:
        env = env_fn(env_config)
        if not isinstance(env, gym.Env):
            raise TypeError(f"env_fn must return a gymnasium.Env, got {type(env).__name__}")
        return GymnasiumSyncWrapper(env, address, **options)

    creator.__name__ = f"magister_env_creator[{getattr(env_fn, '__name__', 'env_fn')}]"
    if register_as is not None:
        register_env(register_as, creator)
        logger.info("registered RLlib env %r (curriculum at %s)", register_as, address)
    return creator


def result_metrics(result: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Finite numeric leaves of a nested RLlib result dict, keyed by their ``/``-joined path.

    Unlike :func:`magister.integrations.loggers.flatten_metrics` (strict: a non-number is an error), this
    skips everything else a training result holds (strings, lists, configs, NaNs, bools).

    >>> result_metrics({"a": 1, "b": {"c": 2.5, "d": "text", "e": float("nan")}, "f": True})
    {'a': 1.0, 'b/c': 2.5}
    """
    out: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(result_metrics(value, name + "/"))
        elif isinstance(value, bool) or not (isinstance(value, (int, float)) or _is_np_number(value)):
            continue
        else:
            v = float(value)
            if math.isfinite(v):
                out[name] = v
    return out


def _is_np_number(value: Any) -> bool:
    return hasattr(value, "dtype") and getattr(value, "shape", None) == () and value.dtype.kind in "iuf"


class MagisterCallbacks(RLlibCallback):
    """RLlib callbacks connecting an algorithm to a curriculum actor; bind with :func:`magister_callbacks`.

    Class attributes (set by :func:`magister_callbacks`):
        address: The curriculum actor's ``"ray://..."`` address.
        metrics_fn: ``result -> dict`` payload for ``update_on_demand`` (``None``: every finite numeric
            result, flattened by :func:`result_metrics`, except configuration, system and timing
            entries). Returning ``None`` or ``{}`` sends nothing that iteration.
        report_curriculum: Add the curriculum's metrics to each result under ``"magister"``.
        timeout: Seconds to wait for the actor.
    """

    address: str | None = None
    metrics_fn: Callable[[dict], dict | None] | None = None
    report_curriculum: bool = True
    timeout: float = 30.0

    def __init__(self) -> None:
        super().__init__()
        self._server: RayCurriculumServer | None = None
        self._pending: Any = None

    def _proxy(self) -> RayCurriculumServer:
        if self.address is None:
            raise ValueError(
                "MagisterCallbacks has no curriculum address; use "
                "config.callbacks(magister_callbacks(address))"
            )
        if self._server is None:
            self._server = RayCurriculumServer.attach(self.address, timeout=self.timeout)
        return self._server

    def payload(self, result: dict) -> dict[str, Any] | None:
        """The ``update_on_demand`` payload built from one training result."""
        fn = type(self).metrics_fn
        if fn is not None:
            return fn(result)
        flat = result_metrics(result)
        return {k: v for k, v in flat.items() if _wanted(k)}

    def on_train_result(
        self, *, algorithm: Any, metrics_logger: Any = None, result: dict, **kwargs: Any
    ) -> None:
        """Send the learner-side metrics to the curriculum; add the curriculum's metrics to ``result``."""
        server = self._proxy()
        if self._pending is not None:  # the previous iteration's update: surface its error, if any
            ref, self._pending = self._pending, None
            server.wait(ref, "update_on_demand()")
        payload = self.payload(result)
        if payload:
            self._pending = server.update_on_demand(dict(payload), wait=False)
        if self.report_curriculum:
            result["magister"] = server.metrics()

    def on_episode_end(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: int = 0,
        **kwargs: Any,
    ) -> None:
        """Log the episode's final ``task_progress`` (from the sync wrapper's info) on the env runner."""
        if metrics_logger is None:
            return
        try:
            info = episode.get_infos(-1)
        except Exception:  # multi-agent or empty episodes: nothing to log
            return
        if isinstance(info, Mapping) and "task_progress" in info:
            metrics_logger.log_value(
                ("magister", "task_progress"), float(info["task_progress"]), reduce="mean", window=100
            )


def magister_callbacks(
    address: str,
    *,
    metrics_fn: Callable[[dict], dict | None] | None = None,
    report_curriculum: bool = True,
    timeout: float = 30.0,
) -> type[MagisterCallbacks]:
    """A :class:`MagisterCallbacks` subclass bound to the curriculum at ``address`` (RLlib instantiates
    callback classes without arguments), for ``config.callbacks(...)``.

    Raises:
        ValueError: ``address`` is not a ``"ray://..."`` address.
        TypeError: ``metrics_fn`` is not callable.
    """
    parse_ray_address(address)
    if metrics_fn is not None and not callable(metrics_fn):
        raise TypeError(f"metrics_fn must be callable(result) -> dict, got {type(metrics_fn).__name__}")
    attrs = {
        "address": address,
        "metrics_fn": staticmethod(metrics_fn) if metrics_fn is not None else None,
        "report_curriculum": bool(report_curriculum),
        "timeout": float(timeout),
        "__module__": __name__,
    }
    return type("BoundMagisterCallbacks", (MagisterCallbacks,), attrs)
