"""Conformance matrix: a user who wraps an env as the README says gets the right task on every step, on
every route.

The envs (``tests/conformance_envs.py``) show the task they actually run in their observation
(``obs = [level, t]``) and play short episodes (2-6 steps), so tasks switch every few steps. Each cell runs
one route for ~100 vector steps of 2 envs and asserts

(a) every step's ``info["task"]`` decodes to the level the observation shows (per sub-env; under
    ``NEXT_STEP`` autoreset the step after a done is the reset step, whose obs opens the new episode; under
    ``SAME_STEP`` the finished episode's obs and info are ``info["final_obs"]`` / ``info["final_info"]`` and
    the returned ones open the new episode; for Stable-Baselines3 the finished episode's obs is
    ``info["terminal_observation"]`` and the new episode's info is ``vec_env.reset_infos``);
(b) after the envs are closed, the episodes the env side finished (counted from the dones, per task, with
    their lengths) are exactly the episodes the curriculum received (``update_on_episode``), and for served
    curricula the server's accounting balances: ``episodes_applied`` = finished and
    ``episodes_abandoned`` = unfinished episodes reported at close, nothing in flight, nothing rejected;
(c) ``info["task_train"]`` is a bool on every step, and the right one (the curriculum sends
    ``EVAL_TASK`` as evaluation-only).

Axes:

* wrapper stack: ``task`` (a TaskWrapper subclass), ``reinit`` (ReinitTaskWrapper over a factory),
  ``user-above`` / ``user-below`` (a user's gymnasium.Wrapper between the task wrapper and the sync
  wrapper, or below the task wrapper); PettingZoo ``pz-task`` / ``pz-reinit`` (parallel API) and
  ``aec-turnbased`` (an AEC game converted to the parallel API by ``TurnBasedParallelEnv``) and
  ``aec-native`` (the AEC API end to end: ``PettingZooAECSyncWrapper(PettingZooAECTaskWrapper(...))``,
  played with ``last()``/``step``);
* transport: ``curriculum`` / ``server`` (the Curriculum or the CurriculumServer object itself), ``ipc``
  (``serve(curriculum).address``), ``tcp`` (``serve(curriculum, "tcp://127.0.0.1:*")``), ``ray``
  (``serve_ray(curriculum, name=...)``);
* vectorisation: gymnasium ``SyncVectorEnv`` and ``AsyncVectorEnv`` (fork, spawn, forkserver) with
  ``NEXT_STEP`` and ``SAME_STEP`` autoreset; Stable-Baselines3 ``DummyVecEnv`` and ``SubprocVecEnv`` (its
  default start method, built exactly as the README's snippet, whose lambda refers to ``server``;
  ``sb3-subproc-addr``: the same with ``address = server.address`` taken first, so only a str travels); an
  RLlib env runner; for PettingZoo a plain loop in the test process or in a spawned worker process.

The matrix covers every value of every axis: every Gymnasium stack x every transport on ``SyncVectorEnv``
and on ``AsyncVectorEnv``-spawn, every vectorisation x ``ipc`` with ``task`` and ``reinit``, the pickled
server object on every vectorisation, Ray on SyncVectorEnv (both autoreset modes) and AsyncVectorEnv-spawn,
every PettingZoo stack x every transport.

Beyond the README, two routes a user can stumble into are held to "works, or fails loudly": a Curriculum
object handed to envs in forked workers (each holds a copy), and the Ray server object itself instead of its
address (ARCHITECTURE.md: a server sent to a worker arrives as a handle to its address).
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import conformance_envs as ce
import gymnasium as gym
import numpy as np
import pytest
from conformance_envs import (
    EVAL_TASK,
    GYM_STACKS,
    PZ_STACKS,
    CountingCurriculum,
    curriculum_counts,
    env_fns,
    make_space,
    make_stack,
    run_pz,
)

from magister import GymnasiumSyncWrapper, serve

N_ENVS = 2
STEPS = 100  # vector steps per cell (x N_ENVS env steps)
STEP_TIMEOUT = 30.0  # seconds any one vector step / reset / close may take
SETTLE_TIMEOUT = 15.0  # seconds the server's accounting may take to see what the closed envs sent

NEXT, SAME = gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP
MISSING = object()

pytestmark = [pytest.mark.timeout(90)]


# -- the matrix -----------------------------------------------------------------------------------------

GYM_VECS = tuple(
    [f"sync-{m}" for m in ("next", "same")]
    + [f"async-{c}-{m}" for c in ("fork", "spawn", "forkserver") for m in ("next", "same")]
)
SB3_VECS = ("sb3-dummy", "sb3-subproc", "sb3-subproc-addr")
SOCKET_TRANSPORTS = ("server", "ipc", "tcp")  # the ones whose envs may live in other processes
ALL_TRANSPORTS = ("curriculum", *SOCKET_TRANSPORTS, "ray")


def _gym_cells() -> list[tuple[str, str, str]]:
    cells: set[tuple[str, str, str]] = set()
    for stack, transport in itertools.product(GYM_STACKS, ALL_TRANSPORTS):
        cells.add((stack, transport, "sync-next"))  # every stack x every transport, in-process
        if transport in SOCKET_TRANSPORTS:  # ... and in spawned workers (Ray: below)
            cells.add((stack, transport, "async-spawn-next"))
    for stack, vec in itertools.product(("task", "reinit"), GYM_VECS):  # every vectorisation x ipc
        cells.add((stack, "ipc", vec))
    for vec in GYM_VECS:  # the pickled/forked server object on every vectorisation
        cells.add(("task", "server", vec))
    cells |= {
        ("task", "curriculum", "sync-same"),
        ("task", "tcp", "async-fork-same"),
        ("task", "tcp", "async-forkserver-next"),
        ("user-above", "ipc", "sync-same"),
        ("user-below", "ipc", "sync-same"),
        ("user-above", "ipc", "async-fork-same"),
        ("user-below", "ipc", "async-forkserver-same"),
        ("task", "ray", "sync-same"),
        ("task", "ray", "async-spawn-next"),
        ("reinit", "ray", "async-spawn-next"),
        ("task", "ray", "async-spawn-same"),
    }
    order = {v: i for i, v in enumerate(GYM_VECS)}
    return sorted(cells, key=lambda c: (c[1] == "ray", order[c[2]], ALL_TRANSPORTS.index(c[1]), c[0]))


GYM_CELLS = _gym_cells()
SB3_CELLS = sorted(
    {(s, "ipc", v) for s in ("task", "reinit") for v in SB3_VECS}
    | {("task", t, "sb3-dummy") for t in ("curriculum", "server", "tcp")}
    | {("task", t, "sb3-subproc") for t in ("server", "tcp")}
    | {(s, "ipc", "sb3-subproc-addr") for s in ("user-above", "user-below")}
)
PZ_CELLS = [(s, t, "loop") for s in PZ_STACKS for t in ALL_TRANSPORTS] + [
    ("pz-task", "ipc", "spawn-process"),
    ("pz-reinit", "ipc", "spawn-process"),
    ("aec-turnbased", "ipc", "spawn-process"),
    ("aec-native", "ipc", "spawn-process"),
    ("aec-native", "server", "spawn-process"),
    ("pz-task", "server", "spawn-process"),
]


def _ids(cells: list[tuple[str, str, str]]) -> list[str]:
    return ["/".join(c) for c in cells]


# -- the env side's record of what it ran -----------------------------------------------------------------


class Tally:
    """What the env side saw: per-step checks (a, c), finished episodes per task and their lengths (b)."""

    def __init__(self, extra_key: str | None = None) -> None:
        self.space = make_space(seed=None)
        self.bad: list[str] = []
        self.checked = 0
        self.finished: dict[int, int] = {}
        self.lengths = 0
        self.partial = 0
        self.extra_key = extra_key

    def check(self, where: str, obs: Any, get: Callable[[str], Any], *, new_episode: bool = False) -> None:
        """One step (or reset) of one env: its info (``get(key)``, MISSING when absent) against its obs."""
        self.checked += 1
        level, t = int(obs[0]), int(obs[1])
        task, train = get("task"), get("task_train")
        if task is MISSING or train is MISSING:
            self.bad.append(f"{where}: info has no task/task_train (obs shows level {level})")
            return
        try:
            decoded = self.space.decode(int(task))
        except (ValueError, TypeError, IndexError) as exc:
            self.bad.append(f"{where}: info['task']={task!r} is not a task of the space ({exc})")
            return
        if decoded != level:
            self.bad.append(
                f"{where}: info['task']={task!r} (level {decoded}) but the env shows level {level}"
            )
        if not isinstance(train, (bool, np.bool_)):
            self.bad.append(f"{where}: info['task_train']={train!r} is a {type(train).__name__}, not a bool")
        elif bool(train) != (int(task) != EVAL_TASK):
            self.bad.append(f"{where}: info['task_train']={train!r} for task {task!r}")
        if new_episode and t != 0:
            self.bad.append(f"{where}: expected the first obs of a new episode, got t={t}")
        if self.extra_key is not None and get(self.extra_key) is MISSING:
            self.bad.append(f"{where}: the user's wrapper did not run (no info[{self.extra_key!r}])")

    def finish(self, final_obs: Any) -> None:
        """An episode ended; ``final_obs`` (its last obs) shows its level and length."""
        k = self.space.encode(int(final_obs[0]))
        self.finished[k] = self.finished.get(k, 0) + 1
        self.lengths += int(final_obs[1])

    @property
    def episodes(self) -> int:
        return sum(self.finished.values())

    def assert_steps_ok(self) -> None:
        assert self.checked > 0 and self.episodes > 0, "the cell played nothing"
        if self.bad:
            shown = "\n  ".join(self.bad[:5])
            pytest.fail(
                f"{len(self.bad)} problems in {self.checked} checked steps/resets, e.g.:\n  {shown}",
                pytrace=False,
            )


def _extra_key(stack: str) -> str | None:
    return {"user-above": "user_above", "user-below": "user_below"}.get(stack)


# -- transports ---------------------------------------------------------------------------------------


class Route:
    """The learner side of one transport: the source the envs get, and how to read the counts."""

    def __init__(self, transport: str, *, ray_namespace: str | None = None) -> None:
        self.transport = transport
        self.curriculum = CountingCurriculum(seed=0)
        self.server: Any = None
        if transport == "curriculum":
            self.source: Any = self.curriculum
        elif transport == "server":
            self.server = serve(self.curriculum)
            self.source = self.server
        elif transport == "ipc":
            self.server = serve(self.curriculum)
            self.source = self.server.address
        elif transport == "tcp":
            self.server = serve(self.curriculum, "tcp://127.0.0.1:*")
            self.source = self.server.address
        elif transport in ("ray", "ray-server-obj"):
            from magister.sync.ray_server import serve_ray

            self.server = serve_ray(self.curriculum, name=_ray_name(), namespace=ray_namespace)
            self.source = self.server if transport == "ray-server-obj" else self.server.address
        else:
            raise ValueError(transport)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def metrics(self, expected_episodes: int) -> dict[str, float]:
        """The curriculum's metrics once the server has applied what the closed envs sent (bounded wait)."""
        if self.server is None:
            return self.curriculum.metrics()
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            m = self.server.metrics()
            if (m["sync/total/tasks_in_flight"] == 0 and m["conf/episodes"] >= expected_episodes) or (
                time.monotonic() > deadline
            ):
                return m
            time.sleep(0.05)

    def assert_counts(self, tally: Tally) -> None:
        """(b): the curriculum received exactly the episodes the env side finished; the server balances."""
        m = self.metrics(tally.episodes)
        episodes, steps, per_task = curriculum_counts(m)
        assert (episodes, per_task) == (tally.episodes, tally.finished), (
            f"the env side finished {tally.episodes} episodes {tally.finished} (per encoded task), the "
            f"curriculum received {episodes} {per_task}"
        )
        assert steps == tally.lengths, (
            f"finished episodes lasted {tally.lengths} steps in all, the curriculum was told {steps}"
        )
        if self.server is not None:
            sync = {k[len("sync/total/"):]: v for k, v in m.items() if k.startswith("sync/total/")}
            assert sync["tasks_in_flight"] == 0, f"tasks still in flight after close: {sync}"
            # ended episodes and those cut short, counted apart (every endpoint reports both)
            got = (sync["episodes_applied"], sync["episodes_abandoned"])
            assert got == (tally.episodes, tally.partial), (
                f"(episodes_applied, episodes_abandoned)={got}, expected {tally.episodes} finished and "
                f"{tally.partial} unfinished at close"
            )
            assert sync["updates_rejected"] == 0, f"updates rejected: {sync}"
            assert sync["tasks_consumed"] + sync["tasks_returned"] == sync["tasks_sampled"], sync


_ray_names = itertools.count()


def _ray_name() -> str:
    return f"magister_conformance_{os.getpid()}_{next(_ray_names)}"


# -- Gymnasium vector envs ----------------------------------------------------------------------------------


def _get(info: dict, key: str, i: int) -> Any:
    if key not in info:
        return MISSING
    mask = info.get("_" + key)
    if mask is not None and not mask[i]:
        return MISSING
    return info[key][i]


def _build_vector(vec: str, fns: list[Any]) -> gym.vector.VectorEnv:
    parts = vec.split("-")
    mode = NEXT if parts[-1] == "next" else SAME
    if parts[0] == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    return gym.vector.AsyncVectorEnv(fns, context=parts[1], autoreset_mode=mode)


def _reset(envs: gym.vector.VectorEnv, seed: int) -> tuple[Any, dict]:
    if isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.reset_async(seed=seed)
        return envs.reset_wait(timeout=STEP_TIMEOUT)
    return envs.reset(seed=seed)


def _step(envs: gym.vector.VectorEnv, actions: Any) -> tuple[Any, ...]:
    if isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.step_async(actions)
        return envs.step_wait(timeout=STEP_TIMEOUT)
    return envs.step(actions)


def _close_quietly(close: Callable[[], None], failed: bool) -> None:
    """Close; after a failure, an error while closing must not hide the failure itself."""
    try:
        close()
    except Exception:
        if not failed:
            raise


def _close(envs: gym.vector.VectorEnv, failed: bool) -> None:
    if isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.close(timeout=STEP_TIMEOUT, terminate=failed)
    else:
        envs.close()


def play_vector(
    envs: gym.vector.VectorEnv, mode: Any, tally: Tally, steps: int = STEPS, seed: int = 0
) -> None:
    """Play ``steps`` vector steps with random actions, checking every sub-env's step (see the module
    docstring for the autoreset rules), then count the unfinished episodes."""
    n = envs.num_envs
    obs, info = _reset(envs, seed)
    for i in range(n):
        tally.check(f"reset env{i}", obs[i], functools.partial(_get, info, i=i), new_episode=True)
    envs.action_space.seed(seed)
    done = np.zeros(n, dtype=bool)
    for s in range(steps):
        was_done = done
        obs, _, term, trunc, info = _step(envs, envs.action_space.sample())
        done = np.logical_or(term, trunc)
        for key in ("task_train",):
            if key in info and np.asarray(info[key]).dtype != np.bool_:
                tally.bad.append(f"step {s}: batched info[{key!r}] has dtype {np.asarray(info[key]).dtype}")
        for i in range(n):
            where = f"step {s} env{i}"
            get = functools.partial(_get, info, i=i)
            reset_step = mode is NEXT and was_done[i]  # NEXT_STEP: the step after a done is a reset
            if mode is SAME and done[i]:
                final_obs = _get(info, "final_obs", i)
                has_final_info = "final_info" in info and info.get("_final_info", done)[i]
                if final_obs is MISSING or not has_final_info:
                    tally.bad.append(f"{where}: done under SAME_STEP but no final_obs/final_info")
                    continue
                tally.check(f"{where} (final)", final_obs, functools.partial(_get, info["final_info"], i=i))
                tally.finish(final_obs)
                tally.check(f"{where} (autoreset)", obs[i], get, new_episode=True)
            else:
                label = where + (" (autoreset)" if reset_step else "")
                tally.check(label, obs[i], get, new_episode=bool(reset_step))
                if done[i]:
                    tally.finish(obs[i])
    # episodes running at close (at least one step played, not ended) are reported unfinished
    for i in range(n):
        if int(obs[i][1]) > 0 and not (mode is NEXT and done[i]):
            tally.partial += 1


def run_gym_cell(stack: str, route: Route, vec: str) -> Tally:
    tally = Tally(_extra_key(stack))
    mode = NEXT if vec.endswith("next") else SAME
    envs = _build_vector(vec, env_fns(stack, route.source, N_ENVS))
    failed = True
    try:
        play_vector(envs, mode, tally)
        failed = False
    finally:
        _close_quietly(functools.partial(_close, envs, failed), failed)
    return tally


@pytest.mark.parametrize(("stack", "transport", "vec"), [c for c in GYM_CELLS if c[1] != "ray"],
                         ids=_ids([c for c in GYM_CELLS if c[1] != "ray"]))
def test_gym_vector(stack: str, transport: str, vec: str) -> None:
    route = Route(transport)
    try:
        tally = run_gym_cell(stack, route, vec)
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()


def test_curriculum_object_in_forked_workers_is_not_silently_lost() -> None:
    """A Curriculum object (the in-process route) handed to envs in forked workers: each worker holds a
    copy. Either that is refused loudly, or the learner's curriculum receives the episodes; silently
    training a copy that nobody reads is the one wrong outcome."""
    route = Route("curriculum")
    try:
        tally = run_gym_cell("task", route, "async-fork-next")
    except (TypeError, ValueError, RuntimeError) as exc:  # refused loudly: fine
        assert "urriculum" in str(exc), f"refused without naming the problem: {exc!r}"
        return
    tally.assert_steps_ok()
    route.assert_counts(tally)


# -- Stable-Baselines3 ------------------------------------------------------------------------------------


def _sb3_vec(vec: str, stack: str, route: Route) -> Any:
    """Built as the README does: ``SubprocVecEnv([lambda: GymnasiumSyncWrapper(..., server.address)] * n)``
    (the lambda refers to ``server``, so the server object travels to the workers)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    server, curriculum = route.server, route.curriculum
    if route.transport == "curriculum":
        fn = lambda: GymnasiumSyncWrapper(make_stack(stack), curriculum)
    elif route.transport == "server":
        fn = lambda: GymnasiumSyncWrapper(make_stack(stack), server)
    elif vec == "sb3-subproc-addr":  # the address taken on the learner side: only a str travels
        address = server.address
        fn = lambda: GymnasiumSyncWrapper(make_stack(stack), address)
    else:
        fn = lambda: GymnasiumSyncWrapper(make_stack(stack), server.address)
    if vec == "sb3-dummy":
        return DummyVecEnv([fn] * N_ENVS)
    return SubprocVecEnv([fn] * N_ENVS)


def play_sb3(vec_env: Any, tally: Tally, steps: int = STEPS, seed: int = 0) -> None:
    n = vec_env.num_envs
    vec_env.seed(seed)
    obs = vec_env.reset()
    for i in range(n):
        get = functools.partial(_dict_get, vec_env.reset_infos[i])
        tally.check(f"reset env{i}", obs[i], get, new_episode=True)
    rng = np.random.default_rng(seed)
    dones = np.zeros(n, dtype=bool)
    for s in range(steps):
        obs, _, dones, infos = vec_env.step(rng.integers(2, size=n))
        for i in range(n):
            where = f"step {s} env{i}"
            if dones[i]:
                final = infos[i].get("terminal_observation")
                if final is None:
                    tally.bad.append(f"{where}: done without info['terminal_observation']")
                    continue
                tally.check(f"{where} (final)", final, functools.partial(_dict_get, infos[i]))
                tally.finish(final)
                get = functools.partial(_dict_get, vec_env.reset_infos[i])
                tally.check(f"{where} (autoreset)", obs[i], get, new_episode=True)
            else:
                tally.check(where, obs[i], functools.partial(_dict_get, infos[i]))
    tally.partial += sum(int(o[1]) > 0 for o in obs)


def _dict_get(info: dict, key: str) -> Any:
    return info.get(key, MISSING)


@pytest.mark.parametrize(("stack", "transport", "vec"), SB3_CELLS, ids=_ids(SB3_CELLS))
def test_sb3(stack: str, transport: str, vec: str) -> None:
    pytest.importorskip("stable_baselines3")
    route = Route(transport)
    try:
        tally = Tally(_extra_key(stack))
        vec_env = _sb3_vec(vec, stack, route)
        failed = True
        try:
            play_sb3(vec_env, tally)
            failed = False
        finally:
            _close_quietly(vec_env.close, failed)
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()


# -- PettingZoo -----------------------------------------------------------------------------------------


def _pz_tally(out: dict[str, Any]) -> Tally:
    tally = Tally()
    tally.bad, tally.finished = out["bad"], out["finished"]
    tally.lengths, tally.partial = out["lengths"], out["partial"]
    tally.checked = out["steps"]
    return tally


def run_pz_cell(stack: str, route: Route, vec: str, steps: int = 2 * STEPS) -> Tally:
    if vec == "loop":
        return _pz_tally(run_pz(stack, route.source, steps))
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:  # the env in a worker process, as a user's would be
        out = pool.apply_async(run_pz, (stack, route.source, steps)).get(timeout=60)
    return _pz_tally(out)


@pytest.mark.parametrize(("stack", "transport", "vec"), [c for c in PZ_CELLS if c[1] != "ray"],
                         ids=_ids([c for c in PZ_CELLS if c[1] != "ray"]))
def test_pettingzoo(stack: str, transport: str, vec: str) -> None:
    route = Route(transport)
    try:
        tally = run_pz_cell(stack, route, vec)
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()


# -- Ray (one local Ray session for every Ray cell; these run last) ----------------------------------------


@pytest.fixture(scope="module")
def ray_conformance(request: pytest.FixtureRequest):
    """The shared Ray session (conftest's ``ray_session``), plus: ``conformance_envs`` pickled by value (Ray
    workers cannot import ``tests/``), and ``RAY_ADDRESS`` set for spawned env workers so that their Ray
    client joins *this* cluster (not another one on a shared machine)."""
    ray = pytest.importorskip("ray")
    request.getfixturevalue("ray_session")

    ray.cloudpickle.register_pickle_by_value(ce)
    old = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    yield
    if old is None:
        os.environ.pop("RAY_ADDRESS", None)
    else:
        os.environ["RAY_ADDRESS"] = old
    ray.cloudpickle.unregister_pickle_by_value(ce)


# beyond the README (which gives Ray envs the address): the Ray server object itself, in-process and pickled
# into spawned workers (ARCHITECTURE.md: a pickled server arrives in a worker as a handle to its address)
RAY_GYM_CELLS = [c for c in GYM_CELLS if c[1] == "ray"] + [
    ("task", "ray-server-obj", "sync-next"),
    ("task", "ray-server-obj", "async-spawn-next"),
]


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("stack", "transport", "vec"), RAY_GYM_CELLS, ids=_ids(RAY_GYM_CELLS))
def test_ray_gym_vector(ray_conformance, stack: str, transport: str, vec: str) -> None:
    # spawned workers are other Ray jobs: they find the actor only in a named namespace
    route = Route(transport, ray_namespace="magister_conformance" if vec.startswith("async") else None)
    try:
        tally = run_gym_cell(stack, route, vec)
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()


RAY_PZ_CELLS = [c for c in PZ_CELLS if c[1] == "ray"]


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("stack", "transport", "vec"), RAY_PZ_CELLS, ids=_ids(RAY_PZ_CELLS))
def test_ray_pettingzoo(ray_conformance, stack: str, transport: str, vec: str) -> None:
    route = Route(transport)
    try:
        tally = run_pz_cell(stack, route, vec)
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()


@pytest.mark.timeout(240)
def test_rllib_env_runner(ray_conformance) -> None:
    """An RLlib env runner (new API stack, as ``examples/rllib_cartpole.py`` builds it) whose envs are made
    by ``make_env_creator`` and take their tasks from the curriculum's Ray actor."""
    pytest.importorskip("ray.rllib")
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from magister.integrations.rllib import make_env_creator

    route = Route("ray")
    try:
        name = f"magister_conformance_env_{os.getpid()}"
        make_env_creator(ce.rllib_env, route.source, register_as=name)
        config = (
            PPOConfig()
            .environment(name, env_config={"stack": "task"})
            .env_runners(num_env_runners=0, num_envs_per_env_runner=N_ENVS)
            .debugging(seed=0)
        )
        runner = SingleAgentEnvRunner(config=config)
        tally = Tally()
        try:
            episodes = runner.sample(num_timesteps=N_ENVS * STEPS, random_actions=True)
        finally:
            runner.stop()  # closes the envs: unfinished episodes reported, unused tasks returned
        for e, ep in enumerate(episodes):
            obs, infos = ep.get_observations(), ep.get_infos()
            assert len(obs) == len(infos)
            for k in range(len(obs)):
                tally.check(f"episode {e} obs {k}", obs[k], functools.partial(_dict_get, infos[k]))
            if ep.is_done:
                tally.finish(obs[-1])
            elif int(obs[-1][1]) > 0:
                tally.partial += 1
        tally.assert_steps_ok()
        route.assert_counts(tally)
    finally:
        route.close()
