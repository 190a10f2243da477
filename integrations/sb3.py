"""Stable-Baselines3 integration: a callback that feeds a curriculum from SB3's rollout buffer.

The environments are ordinary SB3 vector envs (``SubprocVecEnv``, ``DummyVecEnv``) whose sub-envs are
:class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` s, so they take tasks from the
curriculum on every reset and report every finished episode by themselves. What only the learner knows are
the **value predictions**; :class:`CurriculumCallback` turns them into PLR scores (Jiang et al. 2021,
value L1 / positive value loss / MaxMC, see :mod:`magister.integrations.scores`) once per rollout::

    server = serve(PLR(task_space, replay_prob=0.5))
    env = SubprocVecEnv([lambda: GymnasiumSyncWrapper(MyTaskEnv(), server.address)] * 8)
    model = PPO("MlpPolicy", env)
    model.learn(100_000, callback=CurriculumCallback(server))

It works with SB3's ``PPO``/``A2C`` and with sb3-contrib's ``MaskablePPO`` (whose ``get_action_masks`` calls
``env_method("action_masks")``; SB3's vec envs resolve that with ``env.get_wrapper_attr``, which walks through
the sync and task wrappers down to the env's own ``action_masks`` method, so nothing has to be forwarded).

**The mapping from SB3's rollout to** :func:`~magister.integrations.scores.feed_scores`. SB3's
``RolloutBuffer`` holds ``(n_steps, n_envs)`` arrays. For step ``t`` of env ``n``:

* ``rewards[t, n]`` is the reward of the action taken at ``s_t``, *including* SB3's time-limit bootstrap:
  when the step was a truncation, SB3 has already added ``gamma * V(terminal_obs)`` to it and treats the step
  as terminal in its GAE. The callback passes these rewards unchanged, so the scores see the same targets
  as SB3's own advantages (with the curriculum's ``gamma`` and ``gae_lambda``);
* ``values[t, n] = V(s_t)``;
* ``episode_starts[t, n]`` is SB3's "the episode ended at the previous step" flag, so
  ``done[t, n] = episode_starts[t + 1, n]`` for ``t < n_steps - 1``, and the last row is the ``dones`` of the
  rollout's last ``env.step`` (``self.locals["dones"]``);
* the bootstrap value is ``V(s_T)`` of the observation after the last step (``model._last_obs``), computed
  with ``policy.predict_values`` exactly as SB3 does for its own GAE (MaskablePPO does not expose that
  value to callbacks, so the callback recomputes it: one forward pass over ``n_envs`` observations);
* the task of step ``t`` is ``infos[n]["task"]`` of that step, recorded in ``_on_step`` (SB3 calls it after
  every ``env.step``). A step that ends an episode reports the task it was played on: SB3's vec envs reset
  a finished sub-env *after* taking its step info (the reset info goes to ``reset_infos``).

Only curricula whose score comes from values (``score`` in
:data:`~magister.curricula.scoring.VALUE_SCORES`, or a callable) are fed scores; every curriculum gets its
metrics logged with SB3's logger (``self.logger.record``) at the end of each rollout, together with
``magister/rollout_episodes`` (episodes that ended in the rollout) and ``magister/episode_progress`` (their
mean final ``info["task_progress"]``, i.e. the success rate for 0/1 progress).

**Evaluation-only tasks.** SB3's PPO has no per-sample loss mask, so the transitions of evaluation-only
tasks (``info["task_train"] == False``: PLR⊥, ACCEL) are trained on like any other; the callback logs their
share as ``magister/eval_only_fraction`` and warns once. Use the CleanRL-style trainers when that matters.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from ..curricula.scoring import VALUE_SCORES
from .scores import feed_scores

logger = logging.getLogger(__name__)

__all__ = ["CurriculumCallback", "rollout_dones", "wants_value_scores"]

_PER_ENV_KEY = re.compile(r"^sync/env\d+/")


def rollout_dones(episode_starts: Any, last_dones: Any) -> np.ndarray:
    """``done[t, n]`` (the episode of env ``n`` ended at step ``t``) from SB3's ``episode_starts``.

    ``episode_starts[t]`` says that ``s_t`` began an episode, i.e. that step ``t - 1`` ended one, so
    ``done[t] = episode_starts[t + 1]`` and the last row is ``last_dones`` (the final ``env.step``'s dones).

    >>> starts = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    >>> rollout_dones(starts, np.array([False, True])).astype(int).tolist()
    [[0, 1], [1, 0], [0, 1]]
    """
    starts = np.asarray(episode_starts)
    if starts.ndim != 2 or 0 in starts.shape:
        raise ValueError(f"episode_starts must be a non-empty (n_steps, n_envs) array, "
                         f"got shape {starts.shape}")
    last = np.asarray(last_dones).reshape(-1)
    if last.shape != (starts.shape[1],):
        raise ValueError(f"last_dones has shape {np.asarray(last_dones).shape}, "
                         f"expected ({starts.shape[1]},) (one flag per env)")
    out = np.empty(starts.shape, dtype=bool)
    out[:-1] = starts[1:] > 0.5
    out[-1] = last.astype(bool)
    return out


def wants_value_scores(curriculum: Any) -> bool:
    """Whether ``curriculum`` (or a server's curriculum) learns from learner-side value scores.

    True for the PLR family with a value score (``value_l1``, ``positive_value_loss``, ``max_mc``) or a
    callable score; False for episode scores (``learnability``, ``return``), which the curriculum computes
    from the episode updates the envs send, and for every other curriculum.
    """
    cur = getattr(curriculum, "curriculum", curriculum)
    score = getattr(cur, "score", None)
    if not hasattr(cur, "update_scores"):
        return False
    return (isinstance(score, str) and score in VALUE_SCORES) or (score is not None and callable(score))


class CurriculumCallback(BaseCallback):
    """Feeds PLR scores from SB3's rollout buffer to a curriculum and logs its metrics.

    Args:
        source: The curriculum server (``serve(curriculum)``, envs in worker processes) or the curriculum
            itself (envs in this process, e.g. ``DummyVecEnv`` of sync wrappers given the curriculum). With a
            server the scores are applied under ``server.lock``.
        feed: ``"auto"`` feeds scores when the curriculum learns from value scores
            (:func:`wants_value_scores`); ``True`` requires it (``ValueError`` otherwise); ``False`` only
            logs.
        partial: How the last, unfinished segment of each env is scored (see
            :func:`~magister.integrations.scores.feed_scores`): ``"bootstrap"`` (PLR) or ``"skip"``.
        log_metrics: Record ``source.metrics()`` with SB3's logger at the end of every rollout.
        per_env_metrics: Also record the per-env sync counters (``sync/env<i>/...``); the totals
            (``sync/total/...``) are always recorded.
        metrics_filter: Optional ``f(name) -> bool`` choosing further which metrics are recorded.
        verbose: SB3 verbosity.

    Attributes:
        num_rollouts: Rollouts seen. ``num_feeds``: rollouts whose scores were fed.
        last_feed: The summary returned by the last ``feed_scores`` call (``{}`` before the first).
        last_rollout: The arrays of the last feed (``rewards``, ``values``, ``dones``, ``bootstrap``,
            ``tasks``), for inspection and tests.
    """

    def __init__(
        self,
        source: Any,
        *,
        feed: bool | str = "auto",
        partial: str = "bootstrap",
        log_metrics: bool = True,
        per_env_metrics: bool = False,
        metrics_filter: Callable[[str], bool] | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if not hasattr(source, "metrics"):
            raise TypeError(f"source must be a magister Curriculum or CurriculumServer, "
                            f"got {type(source).__name__}")
        if feed not in ("auto", True, False):
            raise ValueError(f"feed must be 'auto', True or False, got {feed!r}")
        if partial not in ("bootstrap", "skip"):
            raise ValueError(f"partial must be 'bootstrap' or 'skip', got {partial!r}")
        if metrics_filter is not None and not callable(metrics_filter):
            raise TypeError(f"metrics_filter must be a callable f(name) -> bool, got {metrics_filter!r}")
        wants = wants_value_scores(source)
        if feed is True and not wants:
            cur = getattr(source, "curriculum", source)
            raise ValueError(
                f"feed=True but {type(cur).__name__} (score={getattr(cur, 'score', None)!r}) does not learn "
                f"from value scores; expected a PLR-family curriculum with a score in {VALUE_SCORES}"
            )
        self.source = source
        self.feed = bool(wants) if feed == "auto" else bool(feed)
        self.partial = partial
        self.log_metrics = bool(log_metrics)
        self.per_env_metrics = bool(per_env_metrics)
        self.metrics_filter = metrics_filter
        self.num_rollouts = 0
        self.num_feeds = 0
        self.last_feed: dict[str, float] = {}
        self.last_rollout: dict[str, Any] = {}
        self._tasks: list[list[Any]] = []
        self._train: list[list[bool]] = []
        self._final_progress: list[float] = []
        self._warned_eval_only = False
        self._skipped: set[str] = set()

    # -- SB3 hooks ----------------------------------------------------------------------------------
    def _on_rollout_start(self) -> None:
        self._tasks = []
        self._train = []
        self._final_progress = []

    def _on_step(self) -> bool:
        infos: Sequence[dict[str, Any]] = self.locals["infos"]
        row, train = [], []
        for n, info in enumerate(infos):
            if "task" not in info:
                raise KeyError(
                    f"env {n}'s step info has no 'task': wrap each env in magister's GymnasiumSyncWrapper "
                    "(inside the SB3 vec env) so the curriculum's tasks and feedback flow"
                )
            row.append(info["task"])
            train.append(bool(info.get("task_train", True)))
        self._tasks.append(row)
        self._train.append(train)
        dones = self.locals.get("dones")
        if dones is not None:
            for n in np.flatnonzero(np.asarray(dones)).tolist():
                self._final_progress.append(float(infos[n].get("task_progress", 0.0)))
        return True

    def _on_rollout_end(self) -> None:
        self.num_rollouts += 1
        eval_only = 1.0 - float(np.mean(self._train)) if self._train else 0.0
        if eval_only > 0 and not self._warned_eval_only:
            logger.warning(
                "%.0f%% of this rollout's steps are from evaluation-only tasks (task_train=False); SB3's "
                "losses cannot mask them, so they are trained on", 100 * eval_only,
            )
            self._warned_eval_only = True
        if self.feed:
            self.last_feed = self._feed()
            self.num_feeds += 1
        if self.log_metrics:
            self.logger.record("magister/eval_only_fraction", eval_only)
            self.logger.record("magister/rollout_episodes", float(len(self._final_progress)))
            if self._final_progress:
                self.logger.record("magister/episode_progress", float(np.mean(self._final_progress)))
            for k, v in self.last_feed.items():
                self.logger.record(f"magister/{k}", v)
            for k, v in self._metrics().items():
                self.logger.record(k, v)

    # -- internals ----------------------------------------------------------------------------------
    def _feed(self) -> dict[str, float]:
        buf = self.model.rollout_buffer
        rewards, values, starts = buf.rewards, buf.values, buf.episode_starts
        if rewards.ndim != 2:
            raise ValueError(f"expected SB3's (n_steps, n_envs) rollout arrays, got rewards of shape "
                             f"{rewards.shape}")
        T, N = rewards.shape
        if len(self._tasks) != T:
            raise RuntimeError(
                f"recorded {len(self._tasks)} steps' tasks but the rollout buffer holds {T} steps; "
                "was the callback attached after the rollout started?"
            )
        dones = rollout_dones(starts, self.locals["dones"])
        bootstrap = self._bootstrap_value(N)
        tasks = self._task_grid()
        self.last_rollout = {"rewards": rewards.copy(), "values": values.copy(), "dones": dones,
                             "bootstrap": bootstrap, "tasks": tasks}
        return feed_scores(self.source, rewards, values, dones, bootstrap, tasks, done_convention="ended_at",
                           partial=self.partial)

    def _bootstrap_value(self, n_envs: int) -> np.ndarray:
        """``V(s_T)`` for the observation after the rollout's last step, as SB3 computes it."""
        import torch
        from stable_baselines3.common.utils import obs_as_tensor

        model = self.model
        with torch.no_grad():
            v = model.policy.predict_values(obs_as_tensor(model._last_obs, model.device))
        out = v.detach().cpu().numpy().reshape(-1).astype(np.float64)
        if out.shape != (n_envs,):
            raise RuntimeError(f"bootstrap values have shape {out.shape}, expected ({n_envs},)")
        return out

    def _task_grid(self) -> Any:
        """The recorded tasks: an int array for integer tasks, else rows of per-env tasks."""
        flat = [t for row in self._tasks for t in row]
        if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in flat):
            return np.asarray(self._tasks, dtype=np.int64)
        return [list(row) for row in self._tasks]

    def _metrics(self) -> dict[str, float]:
        try:
            raw = self.source.metrics()
        except Exception:  # diagnostics must never stop training
            logger.exception("curriculum metrics failed")
            return {}
        out: dict[str, float] = {}
        for k, v in raw.items():
            if not self.per_env_metrics and _PER_ENV_KEY.match(k):
                continue
            if self.metrics_filter is not None and not self.metrics_filter(k):
                continue
            if isinstance(v, (bool, int, float, np.integer, np.floating, np.bool_)):
                out[k] = float(v)
            elif k not in self._skipped:
                self._skipped.add(k)
                logger.warning("curriculum metric %r is not a number (%s); not recorded", k, type(v).__name__)
        return out
