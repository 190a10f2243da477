"""Write a curriculum's metrics to TensorBoard and, when installed, Weights & Biases.

(Named ``loggers`` rather than ``logging`` so it never shadows the standard library's :mod:`logging`.)

Every curriculum reports a flat ``{name: number}`` dict from :meth:`~magister.curricula.base.Curriculum.
metrics` (distribution entropy, buffer statistics, per-task success ...); a
:class:`~magister.sync.zmq_server.CurriculumServer` adds its sync counters (``sync/total/...``,
``sync/env<i>/...``). Two helpers put them where training curves go:

* :func:`log_curriculum_metrics` writes one metrics dict at one step to a TensorBoard ``SummaryWriter``
  and/or a W&B run; nested dicts are flattened with ``/`` (``{"a": {"b": 1}}`` becomes ``"a/b"``).
* :class:`MetricsLogger` pulls ``source.metrics()`` itself, adds the **top tasks** of the sampling
  distribution when the curriculum has one (``curriculum/top/<rank>/prob`` and, for integer tasks,
  ``curriculum/top/<rank>/task``; the distribution's entropy is ``curriculum/entropy``), and writes to
  TensorBoard under ``log_dir`` and to W&B when ``wandb`` is importable and a run is active::

      with MetricsLogger(server, "runs/exp1") as mlog:
          for update in range(num_updates):
              ...                                  # training
              mlog.log(global_step)

Values must be numbers (``bool`` counts as 0/1; numpy scalars and 0-d arrays are accepted); any other
value raises ``TypeError`` naming the metric, so a mistake shows at once instead of as a missing curve.

>>> class Recorder:                      # anything with add_scalar(tag, value, step) works as a writer
...     def __init__(self): self.rows = []
...     def add_scalar(self, tag, value, step): self.rows.append((tag, value, step))
>>> w = Recorder()
>>> log_curriculum_metrics({"plr/buffer_size": 3, "per_task": {"a": 0.5}}, step=10, tb_writer=w)
{'plr/buffer_size': 3.0, 'per_task/a': 0.5}
>>> w.rows
[('plr/buffer_size', 3.0, 10), ('per_task/a', 0.5, 10)]
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import task_key

logger = logging.getLogger(__name__)

__all__ = ["MetricsLogger", "flatten_metrics", "log_curriculum_metrics", "summary_writer", "top_tasks"]


def summary_writer(log_dir: str | os.PathLike) -> Any:
    """A TensorBoard ``SummaryWriter`` writing to ``log_dir``: tensorboardX's, else torch's.

    Raises:
        ImportError: neither is installed (naming what to install).
    """
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoard logging needs a SummaryWriter: pip install tensorboardX "
                              "(or torch and tensorboard)") from None
    return SummaryWriter(str(log_dir))


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """A flat ``{tag: float}`` dict: nested mappings joined with ``/``, numbers converted to ``float``.

    Raises:
        TypeError: ``metrics`` is not a mapping, a key is not a ``str``, or a value is not a number.

    >>> flatten_metrics({"a": 1, "b": {"c": True, "d": np.float32(0.5)}})
    {'a': 1.0, 'b/c': 1.0, 'b/d': 0.5}
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a dict {{name: number}}, got {type(metrics).__name__}")
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metric names must be str, got {key!r} ({type(key).__name__})")
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_metrics(value, prefix=f"{tag}/"))
            continue
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)):
            out[tag] = float(value)
        else:
            raise TypeError(f"metric {tag!r} must be a number, got {value!r:.100} ({type(value).__name__})")
    return out


def log_curriculum_metrics(
    metrics: Mapping[str, Any],
    step: int,
    tb_writer: Any | None = None,
    wandb_run: Any | None = None,
    *,
    prefix: str = "",
) -> dict[str, float]:
    """Write ``metrics`` at ``step`` to a TensorBoard writer and/or a W&B run; returns the flat dict written.

    Args:
        metrics: ``curriculum.metrics()`` or ``server.metrics()`` (nested dicts are flattened).
        step: The x-axis value (environment steps or updates); a non-negative int.
        tb_writer: A ``torch.utils.tensorboard.SummaryWriter`` (anything with ``add_scalar(tag, v, step)``).
        wandb_run: A W&B run (anything with ``log(dict, step=...)``), e.g. ``wandb.run``.
        prefix: Prepended to every tag (e.g. ``"curriculum/"``).

    Raises:
        TypeError: a metric is not a number (see :func:`flatten_metrics`), or ``step`` is not an int.
        ValueError: ``step`` is negative.
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step must be an int, got {step!r}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    flat = flatten_metrics(metrics, prefix=prefix)
    step = int(step)
    if tb_writer is not None:
        for tag, value in flat.items():
            tb_writer.add_scalar(tag, value, step)
    if wandb_run is not None and flat:
        wandb_run.log(dict(flat), step=step)
    return flat


def top_tasks(distribution: Any, tasks: Any, k: int) -> list[tuple[Any, float]]:
    """The ``k`` most probable ``(task, probability)`` pairs, most probable first (ties: lower index first).

    >>> top_tasks([0.1, 0.6, 0.3], [10, 11, 12], 2)
    [(11, 0.6), (12, 0.3)]
    """
    p = np.asarray(distribution, dtype=np.float64).reshape(-1)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    if len(tasks) != p.shape[0]:
        raise ValueError(f"distribution has {p.shape[0]} entries but there are {len(tasks)} tasks")
    order = np.argsort(-p, kind="stable")[: int(k)]
    return [(tasks[i], float(p[i])) for i in order.tolist()]


def _import_wandb() -> Any | None:
    try:
        return importlib.import_module("wandb")
    except ImportError:
        return None


class MetricsLogger:
    """Pulls ``source.metrics()`` and writes it to TensorBoard and W&B (see the module docstring).

    Args:
        source: A curriculum or a curriculum server (anything with ``metrics()``). For a server, the
            distribution used for the top tasks is read under ``server.lock``.
        log_dir: TensorBoard directory; a ``SummaryWriter`` is created there (and closed by :meth:`close`).
            ``None``: no TensorBoard unless ``tb_writer`` is given.
        tb_writer: An existing writer to use instead (not closed by :meth:`close`).
        use_wandb: ``"auto"``: log to W&B when ``wandb`` is importable and a run is active (``wandb.run``);
            ``True``: require that (``RuntimeError`` otherwise; if no run is active, one is started with
            ``wandb.init(**wandb_init)``); ``False``: never.
        wandb_run: An explicit W&B run (implies ``use_wandb=True``).
        wandb_init: Keyword arguments for ``wandb.init`` when ``use_wandb=True`` and no run is active.
        top_k: How many top tasks of the distribution to log (0: none). Only for curricula with a
            ``distribution()`` over an enumerable task space.
        per_env: Also log the per-env sync counters ``sync/env<i>/...`` (the totals are always logged).
        prefix: Prepended to every tag.
    """

    def __init__(
        self,
        source: Any,
        log_dir: str | os.PathLike | None = None,
        *,
        tb_writer: Any | None = None,
        use_wandb: bool | str = "auto",
        wandb_run: Any | None = None,
        wandb_init: Mapping[str, Any] | None = None,
        top_k: int = 5,
        per_env: bool = True,
        prefix: str = "",
    ) -> None:
        if not callable(getattr(source, "metrics", None)):
            raise TypeError(f"source must have a metrics() method (a Curriculum or CurriculumServer), "
                            f"got {type(source).__name__}")
        if use_wandb not in ("auto", True, False):
            raise ValueError(f"use_wandb must be 'auto', True or False, got {use_wandb!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be a non-negative int, got {top_k!r}")
        if log_dir is not None and tb_writer is not None:
            raise ValueError("give log_dir or tb_writer, not both")
        self.source = source
        self.top_k = top_k
        self.per_env = bool(per_env)
        self.prefix = str(prefix)
        self._own_writer = False
        self.tb_writer = tb_writer
        if log_dir is not None:
            self.tb_writer = summary_writer(log_dir)
            self._own_writer = True
        self.wandb_run = wandb_run if wandb_run is not None else self._wandb(use_wandb, wandb_init)
        self._warned_distribution = False

    @staticmethod
    def _wandb(use_wandb: bool | str, init: Mapping[str, Any] | None) -> Any | None:
        if use_wandb is False:
            return None
        wandb = _import_wandb()
        if wandb is None:
            if use_wandb is True:
                raise RuntimeError("use_wandb=True but the wandb package is not installed")
            logger.debug("wandb is not installed; metrics go to TensorBoard only")
            return None
        run = getattr(wandb, "run", None)
        if run is None and use_wandb is True:
            run = wandb.init(**dict(init or {}))
        if run is None:
            logger.info("wandb is installed but no run is active (call wandb.init first); not logging to W&B")
        return run

    def collect(self) -> dict[str, Any]:
        """The metrics to log now: ``source.metrics()`` (filtered) plus the top tasks."""
        raw = dict(self.source.metrics())
        if not self.per_env:
            raw = {k: v for k, v in raw.items() if not _is_per_env(k)}
        if self.top_k:
            raw.update(self._top_metrics())
        return raw

    def _top_metrics(self) -> dict[str, float]:
        cur = getattr(self.source, "curriculum", self.source)
        lock = getattr(self.source, "lock", None) if cur is not self.source else None
        try:
            if lock is not None:
                with lock:
                    dist = np.asarray(cur.distribution(), dtype=np.float64)
            else:
                dist = np.asarray(cur.distribution(), dtype=np.float64)
            tasks = cur.task_space.encoded_tasks
        except (NotImplementedError, AttributeError, TypeError) as exc:
            if not self._warned_distribution:
                logger.debug("%s has no distribution to log top tasks from: %s", type(cur).__name__, exc)
                self._warned_distribution = True
            return {}
        out: dict[str, float] = {}
        for rank, (task, prob) in enumerate(top_tasks(dist, tasks, min(self.top_k, dist.shape[0]))):
            out[f"curriculum/top/{rank}/prob"] = prob
            key = task_key(task)
            if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
                out[f"curriculum/top/{rank}/task"] = float(key)
        return out

    def log(self, step: int) -> dict[str, float]:
        """Collect and write the metrics at ``step``; returns the flat dict written."""
        flat = log_curriculum_metrics(self.collect(), step, self.tb_writer, self.wandb_run,
                                      prefix=self.prefix)
        if self.tb_writer is not None and hasattr(self.tb_writer, "flush"):
            self.tb_writer.flush()
        return flat

    def close(self) -> None:
        """Close the TensorBoard writer this logger created (an existing writer or W&B run is left open)."""
        if self._own_writer and self.tb_writer is not None:
            self.tb_writer.close()
            self._own_writer = False

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_per_env(key: str) -> bool:
    if not key.startswith("sync/env"):
        return False
    rest = key[len("sync/env"):]
    head = rest.split("/", 1)[0]
    return head.isdigit() and "/" in rest
