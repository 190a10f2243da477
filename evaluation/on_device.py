"""Evaluation for on-device (JAX) trainers: a jitted evaluation function in, per-task scores out.

An on-device trainer evaluates a whole batch of tasks in one jitted call, ``eval_fn(params, tasks, key)``,
returning one score per task (success, return ...). :func:`evaluate_on_device` calls it with ``episodes``
independent keys and averages, giving the per-task scores of one run; stack the runs (seeds) into a
``runs × tasks`` matrix and pass it to :func:`~magister.evaluation.statistics.interval_estimates`, which
takes numpy and JAX arrays alike. JAX itself is imported only when :func:`evaluate_on_device` runs.

>>> import numpy as np
>>> eval_fn = lambda params, tasks, key: (tasks < params).astype(float)  # solved iff below a threshold
>>> evaluate_on_device(eval_fn, 2, np.array([0, 1, 2, 3]), seed=0, episodes=2).tolist()
[1.0, 1.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["evaluate_on_device"]


def evaluate_on_device(eval_fn: Callable[[Any, Any, Any], Any], params: Any, tasks: Any, *, seed: int = 0,
                       episodes: int = 4, key: Any = None) -> np.ndarray:
    """Mean of ``eval_fn(params, tasks, k)`` over ``episodes`` keys split from ``key`` (or
    ``jax.random.PRNGKey(seed)``), as a numpy array with one score per task.

    Raises:
        ValueError: ``episodes`` is not a positive int, or ``eval_fn`` returns anything but one finite
            score per task (a 1-d array).
    """
    import jax

    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    key = jax.random.PRNGKey(seed) if key is None else key
    scores = [np.asarray(eval_fn(params, tasks, k), dtype=np.float64)
              for k in jax.random.split(key, int(episodes))]
    out = np.mean(scores, axis=0)
    if out.ndim != 1 or not np.all(np.isfinite(out)):
        raise ValueError(f"eval_fn must return one finite score per task (a 1-d array), got shape "
                         f"{np.shape(scores[0])}")
    return out
