"""Every teacher for continuous task spaces gives the right task on every step, on every route.

A compact version of ``test_conformance.py``'s matrix for the teachers: each teacher x {the Curriculum
object in-process, ``ipc``, ``tcp``, Ray} on a ``SyncVectorEnv`` of two envs over a 2-D ``Box`` task space.
The env shows the task it runs in its observation (``obs = [x0, x1, t]``, float64, so the task is exact)
and plays episodes of 2-6 steps. Each cell asserts

(a) every step's ``info["task"]`` is the task the observation shows (under ``NEXT_STEP`` autoreset);
(b) after the envs are closed, the curriculum received exactly the episodes the env side finished, task by
    task (counted by a subclass of the teacher, read through the server's ``metrics()`` on every route);
(c) the teacher updated its model from those episodes: a refit finished (ALP-GMM, Covar-GMM, GoalGAN: their
    :class:`~magister.curricula._continuous.Refit`'s fit count, with a small fit period), a region split
    (RIAC), a bound widened (ADR), a KL-bounded step taken (the self-paced teacher).

One Ray session serves every Ray cell (conftest's module-scoped ``ray_session``); the Ray cells run last.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from magister import GymnasiumSyncWrapper, serve
from magister.curricula._continuous import Refit
from magister.env_wrappers import TaskWrapper
from magister.task_spaces import Box

pytest.importorskip("sklearn")
pytest.importorskip("scipy")

pytestmark = [pytest.mark.timeout(120)]

DIMS = 2
N_ENVS = 2
STEPS = 80  # vector steps per cell
MIN_LEN, MAX_LEN = 2, 6
SETTLE_TIMEOUT = 30.0  # seconds the server's counts, and a background refit, may take to settle

#: teacher -> (module, class, constructor settings small enough that the teacher updates its model within a
#: cell's ~50 episodes, the metric that shows the update and the value it must exceed). ``conf/fits``: the
#: fits its :class:`Refit` finished (a background fit counts once it has finished, swapped in or not).
TEACHERS: dict[str, tuple[str, str, dict[str, Any], str, float]] = {
    "alpgmm": ("alp_gmm", "ALPGMM", {"fit_rate": 10}, "conf/fits", 0),
    "covargmm": ("covar_gmm", "CovarGMM", {"fit_rate": 10}, "conf/fits", 0),
    "riac": ("riac", "RIAC", {"max_region_size": 10}, "riac/boxes", 1),
    "adr": ("adr", "ADR", {"initial": 0.25, "low_threshold": 0.2, "high_threshold": 0.8, "queue_length": 2,
                           "boundary_prob": 1.0, "step": 0.1, "signal": "progress"}, "adr/widened", 0),
    "selfpaced": ("self_paced", "SelfPaced", {"target_mean": [0.9, 0.9], "target_std": 0.05,
                                              "mode": "returns", "update_every": 10}, "selfpaced/updates", 0),
    "goalgan": ("goal_gan", "GoalGAN", {"update_size": 10, "gan_iterations": 10, "generator_layers": (16,),
                                        "discriminator_layers": (16,)}, "conf/fits", 0),
}
TRANSPORTS = ("curriculum", "ipc", "tcp", "ray")


def make_space() -> Box:
    return Box(0.0, 1.0, shape=(DIMS,))


# -- the env: shows its task -------------------------------------------------------------------------------


class ShowBox(gym.Env):
    """Observation ``[*task, t]``; an episode lasts 2-6 steps; each step pays ``task[0]``; the last step's
    ``info["success"]`` is 1 with probability ``1 - task[0]``, else 0."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = spaces.Box(-np.inf, np.inf, shape=(DIMS + 1,), dtype=np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.task = np.full(DIMS, 0.5)
        self.t = self.length = 0

    def _obs(self) -> np.ndarray:
        return np.array([*self.task, self.t], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(MIN_LEN, MAX_LEN + 1))
        return self._obs(), {}

    def step(self, action: Any):
        self.t += 1
        end = self.t >= self.length
        info = {"success": float(self.np_random.random() < 1.0 - self.task[0])} if end else {}
        return self._obs(), float(self.task[0]), end, False, info


class ShowBoxTask(TaskWrapper):
    def change_task(self, task: Any) -> None:
        self.env.unwrapped.task = np.asarray(task, dtype=np.float64).copy()


def make_env(source: Any) -> GymnasiumSyncWrapper:
    return GymnasiumSyncWrapper(ShowBoxTask(ShowBox(), make_space()), source)


# -- the teacher, counting what reaches it -----------------------------------------------------------------


def _key(task: Any) -> str:
    return "conf/task" + repr(tuple(float(v) for v in task))


def counting(teacher: str) -> Any:
    """The teacher ``teacher`` (a key of :data:`TEACHERS`), subclassed to count the episodes it is told of,
    per task, and its finished fits, in ``metrics()`` (``conf/episodes``, ``conf/task(...)``, ``conf/fits``:
    the fits of the :class:`Refit` objects it holds)."""
    module, name, kwargs, _, _ = TEACHERS[teacher]
    cls = getattr(importlib.import_module(f"magister.curricula.{module}"), name)

    class Counting(cls):  # type: ignore[misc, valid-type]
        def update_on_episode(self, episode_return, length, task, progress, env_id=None) -> None:
            super().update_on_episode(episode_return, length, task, progress, env_id)
            self.conf_counts[_key(task)] = self.conf_counts.get(_key(task), 0) + 1

        def metrics(self) -> dict[str, float]:
            out = dict(super().metrics())
            out["conf/episodes"] = float(sum(self.conf_counts.values()))
            out.update({k: float(v) for k, v in self.conf_counts.items()})
            out["conf/fits"] = float(sum(v.fits for v in vars(self).values() if isinstance(v, Refit)))
            return out

    Counting.__name__ = Counting.__qualname__ = f"Counting{name}"
    cur = Counting(make_space(), seed=0, **kwargs)
    cur.conf_counts = {}
    return cur


_names = itertools.count()


class Route:
    """The learner side of one transport: the source the envs get, and the curriculum's metrics."""

    def __init__(self, teacher: str, transport: str) -> None:
        self.curriculum = counting(teacher)
        self.key, self.least = TEACHERS[teacher][3:]
        self.server: Any = None
        if transport == "curriculum":
            self.source: Any = self.curriculum
        elif transport == "ray":
            from magister.sync.ray_server import serve_ray

            name = f"magister_teacher_conf_{os.getpid()}_{next(_names)}"
            self.server = serve_ray(self.curriculum, name=name)
        else:
            self.server = serve(self.curriculum, "tcp://127.0.0.1:*" if transport == "tcp" else None)
        if self.server is not None:
            self.source = self.server.address

    def metrics(self) -> dict[str, float]:
        return (self.server or self.curriculum).metrics()

    def settled(self, episodes: int) -> dict[str, float]:
        """The metrics once the curriculum counted ``episodes`` episodes and its model was updated (bounded
        wait)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            m = self.metrics()
            if (m["conf/episodes"] >= episodes and m[self.key] > self.least) or time.monotonic() > deadline:
                return m
            time.sleep(0.05)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def play(route: Route) -> tuple[list[str], dict[str, int]]:
    """Play :data:`STEPS` vector steps; returns the problems seen and the finished episodes per task."""
    envs = gym.vector.SyncVectorEnv([functools.partial(make_env, route.source)] * N_ENVS,
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    bad: list[str] = []
    finished: dict[str, int] = {}
    try:
        obs, info = envs.reset(seed=0)
        envs.action_space.seed(0)
        for s in range(STEPS + 1):
            for i in range(N_ENVS):
                shown = tuple(float(v) for v in obs[i][:DIMS])
                task = info.get("task", [None] * N_ENVS)[i]
                if task is None or tuple(float(v) for v in task) != shown:
                    bad.append(f"step {s} env{i}: info['task']={task!r} but the env plays {shown}")
            if s == STEPS:
                break
            obs, _, term, trunc, info = envs.step(envs.action_space.sample())
            for i in np.flatnonzero(np.logical_or(term, trunc)):
                k = _key(obs[i][:DIMS])
                finished[k] = finished.get(k, 0) + 1
    finally:
        envs.close()
    return bad, finished


def run_cell(teacher: str, transport: str) -> None:
    route = Route(teacher, transport)
    try:
        bad, finished = play(route)
        assert not bad, f"{len(bad)} steps with the wrong task, e.g. {bad[:3]}"
        n = sum(finished.values())
        assert n >= STEPS * N_ENVS // MAX_LEN, f"only {n} episodes finished"
        m = route.settled(n)
        got = {k: int(v) for k, v in m.items() if k.startswith("conf/task")}
        assert (int(m["conf/episodes"]), got) == (n, finished), (
            f"the env side finished {n} episodes, the curriculum received {int(m['conf/episodes'])}; "
            f"tasks only one side saw: {set(got) ^ set(finished)}")
        assert m[route.key] > route.least, f"{teacher}: {route.key} = {m[route.key]} after {n} episodes"
    finally:
        route.close()


CELLS = [(t, tr) for tr in TRANSPORTS if tr != "ray" for t in TEACHERS]


@pytest.mark.parametrize(("teacher", "transport"), CELLS, ids=[f"{t}/{tr}" for t, tr in CELLS])
def test_teacher_gets_and_hears_the_right_tasks(teacher: str, transport: str) -> None:
    if teacher == "goalgan":
        pytest.importorskip("torch")
    run_cell(teacher, transport)


@pytest.mark.parametrize("teacher", list(TEACHERS))
def test_teacher_on_ray(ray_session, teacher: str) -> None:
    pytest.importorskip("ray")
    if teacher == "goalgan":
        pytest.importorskip("torch")
    run_cell(teacher, "ray")
