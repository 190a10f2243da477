"""The continuous-space teachers against random sampling on a contextual CartPole, through the sync layer.

The task is CartPole's physics: ``(gravity, log10 force_mag)`` in the box ``[1, 40] x [-2, 1.3]``, so the
push of the cart runs from 0.01 N to 20 N over three orders of magnitude (Gymnasium's defaults are 9.8 and
10 N). :class:`CartPoleParams` writes both onto the env's own ``CartPoleEnv`` at every reset and appends the
task, scaled to [0, 1], to the observation (the context is visible to the policy). Most of the box is
**infeasible**: the cart's push must beat gravity's pull on the pole, and where the force is too weak for
the gravity no controller keeps the pole up for the episode. That is TeachMyAgent's "mostly unfeasible"
setting on a CPU budget. Episodes last at most 200 steps (CartPole-v0's limit, so a run sees thousands of
episodes) and a held-out task counts as **mastered** when the greedy policy's mean return over its
evaluation episodes is at least 195 (CartPole-v0's reward threshold).

The held-out set is fixed: the centres of a ``grid x grid`` grid over the box. An LQR controller that knows
the true parameters (Gymnasium's dynamics linearised at the upright pole, scipy's discrete Riccati solver,
the sign of its force as the action) shows which of them can be balanced: :func:`oracle_mastered` (a
lower bound on the feasible set: it is one good controller, not the best possible).

Every run is one teacher and one seed: a :func:`magister.serve` server holding the teacher, and a
``SyncVectorEnv`` of :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` envs that take their
tasks from it over ZeroMQ and report their episodes back (the sync layer, not direct calls), trained by a
CleanRL-style PPO (:class:`magister.examples.cleanrl_ppo_plain.Agent`, GAE by
:func:`magister.curricula.scoring.compute_advantages`). Every teacher gets the same budget of env steps.
:func:`magister.evaluation.evaluate` plays the greedy policy on the held-out set ``--evals`` times along
the budget, the last at the end (envs without a sync wrapper: no teacher learns from evaluation episodes).
Over the seeds, :mod:`magister.evaluation`'s bootstrap (one share per run) gives each teacher's share
mastered with its 95% interval, and the probability that a run of the teacher masters more than a run of
random sampling.

Runs go to a process pool sized to the cores (``--jobs``). Each run writes TensorBoard events, a checkpoint
every ``--checkpoint-every`` updates (``checkpoint.pt`` + ``checkpoint.state``, see
:mod:`magister.examples._checkpoint`) and, when done, ``result.json`` under ``--out``/<teacher>-seed<k>/;
running the command again skips finished runs and resumes interrupted ones from their checkpoint.
``--write-results`` writes the section ``teachers-contextual`` of the results page and
``docs/img/teachers-contextual.png``.

Run ``python -m magister.examples.teachers_contextual --help`` for the options.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from tqdm.auto import tqdm

import magister
from magister.curricula.base import Curriculum
from magister.curricula.scoring import compute_advantages
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.evaluation import Suite, evaluate
from magister.examples._checkpoint import read_checkpoint, write_checkpoint
from magister.examples._cli import parse_dataclass
from magister.examples.cleanrl_ppo_plain import Agent
from magister.examples.cleanrl_ppo_plain import Args as PPOArgs
from magister.task_spaces.base import EncodedTask
from magister.task_spaces.box import Box

logger = logging.getLogger(__name__)

__all__ = [
    "Args", "CartPoleParams", "MASTERY", "TEACHERS", "heldout_suite", "main", "make_env", "make_teacher",
    "oracle_mastered", "run_one", "statistics", "task_space",
]

#: (gravity in m/s^2, log10 of force_mag in N): the low and high corners of the task box.
LOW, HIGH = (1.0, -2.0), (40.0, 1.3)
#: Episode step limit (CartPole-v0's) and the mean held-out return that counts as mastered (its threshold).
MAX_STEPS, MASTERY = 200, 195.0
SECTION = "teachers-contextual"
#: Every teacher of the benchmark, random sampling first (the baseline).
TEACHERS = ("random", "alpgmm", "covargmm", "riac", "adr", "selfpaced", "goalgan")


@dataclass
class Args(PPOArgs):
    """Options (each is a ``--flag``): CleanRL's PPO settings of
    :class:`magister.examples.cleanrl_ppo_plain.Args` and the benchmark's own."""

    total_timesteps: int = 200_000
    """env steps per run (every teacher gets the same)"""
    num_envs: int = 8
    seed: int = 0
    """the first training seed (a teacher's runs use seed .. seed + seeds - 1)"""
    teachers: tuple[str, ...] = TEACHERS
    """teachers to compare (random is the baseline)"""
    seeds: int = 5
    """training seeds per teacher"""
    grid: int = 8
    """the held-out set: the centres of a grid x grid grid over the box"""
    eval_episodes: int = 3
    """evaluation episodes per held-out task"""
    evals: int = 4
    """held-out evaluations per run, evenly spaced over the budget (the last at the end)"""
    jobs: int = 0
    """runs at once in a process pool (0: one per core; 1: in this process)"""
    out: str = "runs/teachers-contextual"
    """folder of the runs (TensorBoard events, checkpoints, result.json, summary.json)"""
    checkpoint_every: int = 10
    """write a checkpoint every N PPO updates"""
    stop_after: int = 0
    """stop each run after N updates, leaving its checkpoint (0: run to the end); to test resuming"""
    tensorboard: bool = True
    progress: bool = True
    write_results: bool = False
    """write the results page's section and docs/img/teachers-contextual.png"""


def parse_args(argv: list[str] | None = None) -> Args:
    """``--flag value`` for every field of :class:`Args`."""
    return parse_dataclass(Args, argv, prog="python -m magister.examples.teachers_contextual",
                           description=__doc__.splitlines()[0])


# -- the environment --------------------------------------------------------------------------------
def task_space(seed: int | None = None) -> Box:
    """``Box([1, -2], [40, 1.3])``: (gravity, log10 force_mag)."""
    return Box(low=LOW, high=HIGH, seed=seed)


class CartPoleParams(TaskWrapper):
    """CartPole whose task is ``(gravity, log10 force_mag)``, set on the env's own ``CartPoleEnv`` at each
    reset.

    With ``task_observation`` the observation is ``{"obs": CartPole's four numbers, "task": the task scaled
    to [0, 1]}`` (:func:`make_env` flattens it); the progress is the share of the step limit survived (1.0
    exactly when the pole stayed up for the whole episode). Every ``info`` carries ``info["physics"]``: the
    gravity and the force read back from the env itself.

    >>> env = CartPoleParams()
    >>> obs, info = env.reset(seed=0, options={"task": np.array([20.5, 0.0])})
    >>> info["physics"], [round(float(x), 3) for x in obs["task"]]
    ((20.5, 1.0), [0.5, 0.606])
    """

    def __init__(self, env: gym.Env | None = None, space: Box | None = None, *,
                 task_observation: bool = True) -> None:
        env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS) if env is None else env
        if not isinstance(env.unwrapped, CartPoleEnv):
            raise TypeError(f"CartPoleParams needs a CartPoleEnv underneath, got "
                            f"{type(env.unwrapped).__name__}")
        space = task_space() if space is None else space
        if not isinstance(space, Box) or space.shape != (2,):
            raise TypeError(f"CartPoleParams takes a Box of shape (2,) (gravity, log10 force_mag), got "
                            f"{space!r}")
        super().__init__(env, space, task_observation=task_observation)
        self._low, self._width = space.low.astype(np.float64), (space.high - space.low).astype(np.float64)
        self._t = 0

    def change_task(self, task: Any) -> None:
        gravity, log_force = (float(v) for v in np.asarray(task, dtype=np.float64))
        cartpole = self.env.unwrapped
        cartpole.gravity, cartpole.force_mag = gravity, 10.0 ** log_force

    @property
    def task_observation_space(self) -> spaces.Space:
        return spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)

    def encode_task_observation(self, encoded_task: EncodedTask) -> np.ndarray:
        scaled = (np.asarray(encoded_task, dtype=np.float64) - self._low) / np.where(self._width > 0,
                                                                                      self._width, 1.0)
        return scaled.astype(np.float32)

    def physics(self) -> tuple[float, float]:
        """The gravity and the force the env itself holds now."""
        return float(self.env.unwrapped.gravity), float(self.env.unwrapped.force_mag)

    def _reset_inner(self, *, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        self._t = 0
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "physics": self.physics()}

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        self._t += 1
        obs, reward, term, trunc, info = super().step(action)
        info["physics"] = self.physics()
        return obs, reward, term, trunc, info

    def task_progress(self, obs: Any, rew: Any, term: bool, trunc: bool, info: dict[str, Any]) -> float:
        return min(1.0, self._t / MAX_STEPS)


def make_env(space: Box | None = None) -> gym.Env:
    """A flat-observation :class:`CartPoleParams` (no sync wrapper: the evaluation envs)."""
    return gym.wrappers.FlattenObservation(CartPoleParams(space=space))


def heldout_suite(grid: int) -> Suite:
    """The fixed held-out set: the centres of a ``grid x grid`` grid over the box, gravity-major."""
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"grid must be a positive int, got {grid!r}")
    centres = [(np.arange(grid) + 0.5) / grid * (hi - lo) + lo for lo, hi in zip(LOW, HIGH)]
    tasks = [np.array([g, f]) for g in centres[0] for f in centres[1]]
    return Suite.from_tasks(tasks, [f"g={g:.2f} F={f:.2f}" for g, f in tasks], space=task_space())


def oracle_mastered(suite: Suite, episodes: int = 3, seed: int = 0) -> np.ndarray:
    """Per held-out task, 1.0 when an LQR controller that knows the parameters masters it (mean return
    over ``episodes`` episodes at least :data:`MASTERY`), else 0.0: which tasks can be balanced at all."""
    from scipy.linalg import solve_discrete_are

    out = []
    for i, task in enumerate(suite.tasks):
        env = make_env()
        env.reset(options={"task": task})
        c = env.unwrapped
        total = c.masscart + c.masspole
        den = c.length * (4.0 / 3.0 - c.masspole / total)  # Gymnasium's equations, linearised upright
        a = np.zeros((4, 4))
        a[0, 1] = a[2, 3] = 1.0
        a[3, 2], a[1, 2] = c.gravity / den, -c.polemass_length * c.gravity / (total * den)
        b = np.array([[0.0], [1.0 / total + c.polemass_length / (total * total * den)], [0.0],
                      [-1.0 / (total * den)]])
        ad, bd = np.eye(4) + c.tau * a, c.tau * b
        p = solve_discrete_are(ad, bd, np.diag([1.0, 1.0, 10.0, 1.0]), np.array([[0.1]]))
        gain = np.linalg.solve(bd.T @ p @ bd + 0.1, bd.T @ p @ ad)
        returns = []
        for e in range(episodes):
            obs, _ = env.reset(seed=seed + 1000 * i + e)
            ret, done = 0.0, False
            while not done:
                obs, r, term, trunc, _ = env.step(int((-gain @ obs[:4])[0] > 0))
                ret, done = ret + float(r), term or trunc
            returns.append(ret)
        out.append(float(np.mean(returns) >= MASTERY))
        env.close()
    return np.array(out)


# -- the teachers -----------------------------------------------------------------------------------
#: Gymnasium's own CartPole (gravity 9.8, force 10 N): the calibrated, easy point ADR starts from and the
#: centre of SelfPaced's initial distribution.
NOMINAL = (9.8, 1.0)


def _width() -> np.ndarray:
    return np.array(HIGH) - np.array(LOW)


def _random(space: Box, seed: int) -> Curriculum:
    from magister.curricula import DomainRandomization

    return DomainRandomization(space, seed=seed)


def _alpgmm(space: Box, seed: int) -> Curriculum:
    from magister.curricula import ALPGMM

    return ALPGMM(space, seed=seed)


def _covargmm(space: Box, seed: int) -> Curriculum:
    from magister.curricula import CovarGMM

    return CovarGMM(space, seed=seed)


def _riac(space: Box, seed: int) -> Curriculum:
    from magister.curricula import RIAC

    return RIAC(space, seed=seed)


def _adr(space: Box, seed: int) -> Curriculum:
    from magister.curricula import ADR

    # TeachMyAgent's benchmark settings (the paper's queue of 240 would test a bound a handful of times in
    # a run's few thousand episodes): queue 10, boundary share 0.7, t_L 0 (bounds never narrow), and t_H
    # at TeachMyAgent's ratio to its mastery threshold (180 of 230), here 150 of 195
    return ADR(space, initial=NOMINAL, low_threshold=0.0, high_threshold=150.0, queue_length=10,
               boundary_prob=0.7, step=0.05, seed=seed)


def _selfpaced(space: Box, seed: int) -> Curriculum:
    from magister.curricula import SelfPaced

    # returns mode (SPRL): from a narrow Gaussian at the nominal CartPole towards the whole box (a
    # Gaussian with the uniform distribution's mean and standard deviation)
    centre = (np.array(LOW) + np.array(HIGH)) / 2
    return SelfPaced(space, target_mean=centre, target_std=_width() / np.sqrt(12.0), init_mean=NOMINAL,
                     init_std=_width() / 10, mode="returns", seed=seed)


def _goalgan(space: Box, seed: int) -> Curriculum:
    from magister.curricula import GoalGAN

    # the success signal: the final progress is 1.0 exactly when the pole stayed up for the whole episode
    return GoalGAN(space, signal="progress", success_threshold=1.0, seed=seed)


#: name -> ``factory(space, seed)``; every teacher is built over the same box.
FACTORIES: dict[str, Callable[[Box, int], Curriculum]] = {
    "random": _random, "alpgmm": _alpgmm, "covargmm": _covargmm, "riac": _riac, "adr": _adr,
    "selfpaced": _selfpaced, "goalgan": _goalgan,
}


def make_teacher(name: str, space: Box, seed: int) -> Curriculum:
    """The teacher ``name`` over ``space`` (``ValueError`` for an unknown name)."""
    if name not in FACTORIES:
        raise ValueError(f"unknown teacher {name!r}; expected one of {sorted(FACTORIES)}")
    return FACTORIES[name](space, seed)


# -- one run ----------------------------------------------------------------------------------------
def _make_train_env(address: str, space: Box) -> Callable[[], gym.Env]:
    def thunk() -> gym.Env:
        return magister.GymnasiumSyncWrapper(make_env(space), address)

    return thunk


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor], args: Args,
               rng: np.random.Generator) -> dict[str, float]:
    """CleanRL's clipped-surrogate epochs over shuffled minibatches; the last minibatch's losses."""
    n = batch["obs"].shape[0]
    size = max(1, n // args.num_minibatches)
    inds = np.arange(n)
    stats: dict[str, float] = {}
    for _ in range(args.update_epochs):
        rng.shuffle(inds)
        for start in range(0, n, size):
            mb = inds[start:start + size]
            _, logprob, entropy, value = agent.get_action_and_value(batch["obs"][mb], batch["actions"][mb])
            ratio = (logprob - batch["logprobs"][mb]).exp()
            adv = batch["advantages"][mb]
            if args.norm_adv and len(mb) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            clip = args.clip_coef
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
            value = value.view(-1)
            v_loss = 0.5 * (value - batch["returns"][mb]) ** 2
            if args.clip_vloss:
                clipped = batch["values"][mb] + (value - batch["values"][mb]).clamp(-clip, clip)
                v_loss = torch.max(v_loss, 0.5 * (clipped - batch["returns"][mb]) ** 2)
            v_loss = v_loss.mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            stats = {"losses/policy": pg_loss.item(), "losses/value": v_loss.item(),
                     "losses/entropy": entropy.mean().item()}
    return stats


def _greedy(agent: Agent) -> Callable[[Any, dict[str, Any]], np.ndarray]:
    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        with torch.no_grad():
            return agent.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()

    return policy


class _Rollout:
    """One PPO batch of ``num_steps x num_envs`` steps, and the episodes that finished in it."""

    def __init__(self, args: Args, obs_dim: int) -> None:
        shape = (args.num_steps, args.num_envs)
        self.obs = torch.zeros((*shape, obs_dim))
        self.actions = torch.zeros(shape, dtype=torch.long)
        self.logprobs, self.rewards, self.values, self.ended = (torch.zeros(shape) for _ in range(4))
        self.ep_return = np.zeros(args.num_envs)

    def collect(self, agent: Agent, envs: gym.vector.VectorEnv, next_obs: torch.Tensor,
                episodes: list[list[float]]) -> torch.Tensor:
        """Play one batch; append ``[task..., return, gravity, force]`` per finished episode (the task the
        sync wrapper reported, then the physics the env itself had) to ``episodes``."""
        for step in range(self.obs.shape[0]):
            self.obs[step] = next_obs
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            self.actions[step], self.logprobs[step], self.values[step] = action, logprob, value.flatten()
            obs, reward, term, trunc, info = envs.step(action.numpy())
            done = np.logical_or(term, trunc)
            self.rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            self.ended[step] = torch.as_tensor(done, dtype=torch.float32)
            next_obs = torch.as_tensor(obs, dtype=torch.float32)
            self.ep_return += reward
            for k in np.flatnonzero(done):  # SAME_STEP: the finished episode's info is final_info
                final = info["final_info"]
                episodes.append([*map(float, final["task"][k]), float(self.ep_return[k]),
                                 *map(float, final["physics"][k])])
                self.ep_return[k] = 0.0
        return next_obs

    def batch(self, agent: Agent, next_obs: torch.Tensor, args: Args) -> dict[str, torch.Tensor]:
        """The flat training batch, with GAE (``ended[t]``: the episode ended at step ``t``)."""
        with torch.no_grad():
            boot = agent.get_value(next_obs).flatten()
            adv = compute_advantages(self.rewards, self.values, self.ended, boot, args.gamma,
                                     args.gae_lambda).float()
        return {"obs": self.obs.reshape(-1, self.obs.shape[-1]), "actions": self.actions.reshape(-1),
                "logprobs": self.logprobs.reshape(-1), "advantages": adv.reshape(-1),
                "values": self.values.reshape(-1), "returns": (adv + self.values).reshape(-1)}


def heldout(agent: Agent, args: Args, seed: int, step: int) -> dict[str, Any]:
    """The greedy policy on the held-out set (envs without a sync wrapper): mean return per task and
    whether it is mastered."""
    result = evaluate(_greedy(agent), make_env, heldout_suite(args.grid), episodes=args.eval_episodes,
                      num_envs=16, seed=10_000 + seed)
    per_task = result.per_task("return")
    return {"step": step, "heldout_return": per_task.tolist(),
            "mastered": (per_task >= MASTERY).astype(float).tolist()}


def _eval_points(num_updates: int, evals: int) -> set[int]:
    """The updates after which the held-out set is played: ``evals`` of them, evenly spaced, the last at the
    end."""
    return {int(round(num_updates * (i + 1) / max(1, evals))) for i in range(max(1, evals))}


def _resume(path: Path, agent: Agent, optimizer: torch.optim.Optimizer, server: Any) -> dict[str, Any]:
    ckpt = read_checkpoint(path)  # runs no code from the files
    agent.load_state_dict(ckpt["agent"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch_rng"])
    state = dict(ckpt["teacher"])
    state.pop("sync_ledger", None)  # the envs of the interrupted run are gone: fresh workers connect
    server.load_state_dict(state)
    return ckpt


def run_one(teacher: str, seed: int, args: Args) -> dict[str, Any]:
    """Train one teacher and seed (resuming from its checkpoint if one is there), play the held-out set
    ``args.evals`` times along the way and write ``result.json``; returns the result (``{"stopped":
    update}`` when ``stop_after`` stopped it first). A run whose ``result.json`` exists is not run again."""
    run_dir = Path(args.out) / f"{teacher}-seed{seed}"
    if (run_dir / "result.json").exists():
        return json.loads((run_dir / "result.json").read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, args.torch_threads))
    torch.manual_seed(seed)
    space = task_space(seed)
    server = magister.serve(make_teacher(teacher, space, seed))
    envs = gym.vector.SyncVectorEnv([_make_train_env(server.address, space) for _ in range(args.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n), args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    num_updates = max(1, args.total_timesteps // (args.num_envs * args.num_steps))
    state: dict[str, Any] = {"update": 0, "global_step": 0, "episodes": [], "curve": [], "resumed_from": 0}
    ckpt_path = run_dir / "checkpoint.pt"
    if ckpt_path.exists():
        ckpt = _resume(ckpt_path, agent, optimizer, server)
        state = {k: ckpt[k] for k in ("update", "global_step", "episodes", "curve")}
        state["resumed_from"] = state["update"]
        logger.info("%s seed %d: resumed from %s at update %d", teacher, seed, ckpt_path, state["update"])
    writer = _writer(run_dir) if args.tensorboard else None
    t0, cpu0 = time.time(), time.process_time()
    try:
        with _one_thread():  # one run per core: the teachers' numerics (BLAS) stay on it too
            stopped = _train(args, seed, agent, optimizer, envs, server, writer, state, num_updates,
                             ckpt_path)
    finally:
        envs.close()
        sync = server.metrics()
        server.close()
        if writer is not None:
            writer.close()
    if stopped:
        return {"teacher": teacher, "seed": seed, "stopped": stopped}
    out = {"teacher": teacher, "seed": seed, **state["curve"][-1], "global_step": state["global_step"],
           "resumed_from": state["resumed_from"], "seconds": time.time() - t0,
           "cpu_seconds": time.process_time() - cpu0, "curve": state["curve"],
           # the teacher's own count (restored on resume) and this run's sync accounting
           "teacher_episodes": sync.get("curriculum/episodes", float("nan")),
           "sync": {k.removeprefix("sync/total/"): v for k, v in sync.items() if k.startswith("sync/total/")},
           "episodes": state["episodes"]}
    (run_dir / "result.json").write_text(json.dumps(out))
    return out


def _one_thread() -> Any:
    """Limit the BLAS/OpenMP pools of this process to one thread (``threadpoolctl``, which scikit-learn
    brings), or do nothing without it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


def _writer(run_dir: Path) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run_dir))


def _train(args: Args, seed: int, agent: Agent, optimizer: torch.optim.Optimizer, envs: gym.vector.VectorEnv,
           server: Any, writer: Any, state: dict[str, Any], num_updates: int, ckpt_path: Path) -> int:
    """PPO from ``state["update"]`` to the end (or to ``stop_after``: then its update is returned, else 0),
    with held-out evaluations and checkpoints; ``state`` is updated in place."""
    rng = np.random.default_rng([seed, state["update"]])
    rollout = _Rollout(args, int(np.prod(envs.single_observation_space.shape)))
    evals = _eval_points(num_updates, args.evals)
    bar = tqdm(total=num_updates, initial=state["update"], unit="update", leave=False,
               disable=not (args.progress and args.jobs == 1))
    next_obs = torch.as_tensor(envs.reset(seed=seed * 1000 + state["update"])[0], dtype=torch.float32)
    for update in range(state["update"], num_updates):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - update / num_updates) * args.learning_rate
        next_obs = rollout.collect(agent, envs, next_obs, state["episodes"])
        state["global_step"] += args.num_envs * args.num_steps
        stats = ppo_update(agent, optimizer, rollout.batch(agent, next_obs, args), args, rng)
        state["update"] = update + 1
        if state["update"] in evals:
            state["curve"].append(heldout(agent, args, seed, state["global_step"]))
            stats["heldout/share_mastered"] = float(np.mean(state["curve"][-1]["mastered"]))
        if writer is not None:
            _log(writer, stats, server, state["episodes"], state["global_step"])
        bar.update(1)
        last, stop = state["update"] == num_updates, state["update"] == args.stop_after
        if last or stop:  # workers send their held feedback on close: the checkpoint includes it
            envs.close()
        if (args.checkpoint_every and state["update"] % args.checkpoint_every == 0) or last or stop:
            write_checkpoint(ckpt_path, {"agent": agent.state_dict(), "optimizer": optimizer.state_dict(),
                                         "torch_rng": torch.get_rng_state()},
                             {"teacher": server.state_dict(), **state, "args": asdict(args)})
        if stop and not last:
            bar.close()
            return state["update"]
    bar.close()
    return 0


def _log(writer: Any, stats: dict[str, float], server: Any, episodes: list, step: int) -> None:
    for k, v in stats.items():
        writer.add_scalar(k, v, step)
    recent = np.array([e[2] for e in episodes[-50:]]) if episodes else np.zeros(0)
    if recent.size:
        writer.add_scalar("charts/episodic_return", float(recent.mean()), step)
        tasks = np.array([e[:2] for e in episodes[-50:]])
        writer.add_scalar("tasks/gravity", float(tasks[:, 0].mean()), step)
        writer.add_scalar("tasks/force_mag", float(tasks[:, 1].mean()), step)
    try:
        metrics = server.metrics()
    except Exception:  # metrics are diagnostics; never let them stop training
        logger.exception("teacher metrics failed")
        return
    for k, v in metrics.items():  # the teacher's own metrics and the sync layer's totals (not per env)
        if not k.startswith("sync/env") and isinstance(v, (int, float)) and math.isfinite(v):
            writer.add_scalar(f"teacher/{k}", float(v), step)


# -- all runs and their statistics -----------------------------------------------------------------
def run_all(args: Args) -> dict[str, list[dict[str, Any]]]:
    """Every teacher x seed, in a process pool of ``args.jobs`` (one per core by default)."""
    for name in args.teachers:  # every teacher builds (its class and extras are there) before any run
        make_teacher(name, task_space(0), 0)
    jobs = [(t, s) for s in range(args.seed, args.seed + args.seeds) for t in args.teachers]
    n = args.jobs or os.cpu_count() or 1
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in args.teachers}
    bar = tqdm(total=len(jobs), disable=not args.progress, unit="run", desc="teachers")
    try:
        if n == 1:
            for t, s in jobs:
                results[t].append(run_one(t, s, args))
                bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")  # no forked ZeroMQ or torch threads
            with ProcessPoolExecutor(max_workers=min(n, len(jobs)), mp_context=ctx) as pool:
                futures = {pool.submit(run_one, t, s, args): t for t, s in jobs}
                for fut in as_completed(futures):
                    r = fut.result()
                    results[futures[fut]].append(r)
                    bar.update(1)
                    if "mastered" in r:
                        bar.set_postfix(last=f"{r['teacher']}/{r['seed']}: {np.mean(r['mastered']):.2f}")
    finally:
        bar.close()
    for runs in results.values():
        runs.sort(key=lambda r: r["seed"])
    return results


def statistics(results: dict[str, list[dict[str, Any]]], baseline: str = "random",
               seed: int = 0) -> tuple[str, dict[str, Any]]:
    """The table: per teacher the share of the held-out set mastered at the end, its mean over the
    evaluations along the way (how early the teacher got there) and the mean held-out return, each the
    mean over seeds with its 95% bootstrap interval over the seeds; and P(a run of the teacher masters a
    larger share at the end than a run of ``baseline``). Returns the table and the numbers as data."""
    from magister.evaluation import Estimate, format_table, interval_estimates, probability_of_improvement

    # one number per run (a seeds x 1 matrix): the bootstrap resamples whole runs, so the intervals are
    # over the seeds (resampling the runs within each held-out task would ignore that a run's tasks go
    # together)
    share = {t: np.array([[np.mean(r["mastered"])] for r in runs]) for t, runs in results.items()}
    along = {t: np.array([[np.mean([c["mastered"] for c in r["curve"]])] for r in runs])
             for t, runs in results.items()}
    returns = {t: np.array([[np.mean(r["heldout_return"])] for r in runs]) for t, runs in results.items()}
    columns = {"share mastered": share, "over the run": along, "held-out return": returns}
    est = {name: interval_estimates(m, ("mean",), seed=seed) for name, m in columns.items()}
    rows: dict[str, dict[str, Estimate]] = {}
    for t in results:
        rows[t] = {name: e[t]["mean"] for name, e in est.items()}
        if t != baseline and baseline in results:
            rows[t][f"P(> {baseline})"] = probability_of_improvement(share[t], share[baseline], seed=seed)
    numbers = {t: {k: list(e) for k, e in row.items()} for t, row in rows.items()}
    return format_table(rows, title="teacher"), numbers


def plot(results: dict[str, list[dict[str, Any]]], oracle: np.ndarray, grid: int, path: Path) -> Path:
    """Top: the share mastered along training per teacher (mean over seeds, the band its 95% interval).
    Below, per teacher: where its training episodes went (2-D histogram over the box) and the share of
    seeds mastering each held-out task at the end; the LQR oracle's feasible region outlined in red."""
    from magister.evaluation import interval_estimates, require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    names = list(results)
    fig = plt.figure(figsize=(max(7.0, 2.2 * len(names)), 7.5))
    gs = fig.add_gridspec(3, len(names), height_ratios=[1.3, 1.0, 1.0])
    ax = fig.add_subplot(gs[0, :])
    for t in names:
        steps = [c["step"] for c in results[t][0]["curve"]]
        shares = np.array([[np.mean(c["mastered"]) for c in r["curve"]] for r in results[t]])  # runs x evals
        (line,) = ax.plot(steps, shares.mean(axis=0), marker="o", label=t)
        if len(shares) > 1:  # (one run has no interval)
            per_point = [interval_estimates({t: shares[:, i:i + 1]}, ("mean",), n_resamples=500)[t]["mean"]
                         for i in range(len(steps))]
            ax.fill_between(steps, [e.low for e in per_point], [e.high for e in per_point],
                            color=line.get_color(), alpha=0.15)
    ax.axhline(float(oracle.mean()), color="grey", ls="--", lw=1, label="LQR oracle")
    ax.set(xlabel="env steps", ylabel="share of held-out tasks mastered", ylim=(-0.02, 1.02))
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    centres = [(np.arange(grid) + 0.5) / grid * (hi - lo) + lo for lo, hi in zip(LOW, HIGH)]
    extent = (LOW[1], HIGH[1], LOW[0], HIGH[0])
    for j, t in enumerate(names):
        eps = np.array([e[:2] for r in results[t] for e in r["episodes"]])
        a1, a2 = fig.add_subplot(gs[1, j]), fig.add_subplot(gs[2, j])
        if eps.size:
            a1.hist2d(eps[:, 1], eps[:, 0], bins=20, range=[[LOW[1], HIGH[1]], [LOW[0], HIGH[0]]],
                      cmap="Blues", norm=LogNorm(), cmin=1)
        a1.set_title(f"{t}: training episodes (log)", fontsize=8)
        m = np.mean([r["mastered"] for r in results[t]], axis=0).reshape(grid, grid)
        a2.imshow(m, origin="lower", extent=extent, aspect="auto", vmin=0, vmax=1, cmap="Greens")
        a2.set_title(f"{t}: mastered at the end", fontsize=8)
        for a in (a1, a2):
            if 0 < oracle.mean() < 1:
                a.contour(centres[1], centres[0], oracle.reshape(grid, grid), levels=[0.5], colors="red",
                          linewidths=0.8)
            a.tick_params(labelsize=6)
            a.set_xlabel("log10 force_mag", fontsize=7)
            if j == 0:
                a.set_ylabel("gravity", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summary_text(results: dict[str, list[dict[str, Any]]], args: Args, oracle: np.ndarray,
                 table: str, seconds: float) -> str:
    """What the command prints (and writes to the results page)."""
    runs = [r for rs in results.values() for r in rs]
    steps = [c["step"] for c in runs[0]["curve"]]
    lines = [
        f"CartPole, task (gravity, log10 force_mag) in [{LOW[0]:g}, {HIGH[0]:g}] x "
        f"[{LOW[1]:g}, {HIGH[1]:g}], {MAX_STEPS}-step episodes; held-out: the {args.grid}x{args.grid} grid "
        f"centres, mastered = mean greedy return >= {MASTERY:g} over {args.eval_episodes} episodes",
        f"{len(runs)} runs: {args.seeds} seeds x {len(results)} teachers, {runs[0]['global_step']} env steps "
        f"each ({args.num_envs} envs x {args.num_steps} steps per PPO update), tasks through magister.serve; "
        f"held-out evaluations at {', '.join(map(str, steps))} steps",
        f"LQR oracle (knows the parameters) masters {oracle.mean():.3f} of the held-out set",
        "mean over seeds [95% bootstrap interval over the seeds]: share mastered at the end, its mean over "
        "the evaluations (over the run), mean held-out return; P(> random): probability that a run of the "
        "teacher masters a larger share at the end than a random run",
        table,
        "per-run share mastered at the end: " + "; ".join(
            f"{t} " + " ".join(f"{np.mean(r['mastered']):.3f}" for r in rs) for t, rs in results.items()),
        f"this command: {seconds:.0f} s with {args.jobs or os.cpu_count()} jobs (finished runs are read "
        "back); one run: median "
        f"{np.median([r['seconds'] for r in runs]):.0f} s, {np.median([r['cpu_seconds'] for r in runs]):.0f} "
        "CPU s (training and evaluations)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Command line: ``--help`` lists the options."""
    from magister.examples import results as results_page

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.write_results:
        results_page.check_section(results_page.RESULTS_PAGE, SECTION)
    t0 = time.time()
    results = run_all(args)
    stopped = [r for rs in results.values() for r in rs if "stopped" in r]
    if stopped:
        print(f"{len(stopped)} runs stopped after update {args.stop_after} (--stop-after); run the command "
              "again to resume them")
        return results
    out = Path(args.out)
    oracle = oracle_mastered(heldout_suite(args.grid), args.eval_episodes)
    table, numbers = statistics(results)
    text = summary_text(results, args, oracle, table, time.time() - t0)
    print(text)
    (out / "summary.json").write_text(json.dumps({"args": asdict(args), "numbers": numbers,
                                                  "oracle": oracle.tolist(), "text": text}))
    png = plot(results, oracle, args.grid, out / "teachers-contextual.png")
    if args.write_results:
        img = results_page.save_image(png, "teachers-contextual.png")
        command = results_page.command_line(["x", *(argv if argv is not None else sys.argv[1:])],
                                            module="magister.examples.teachers_contextual")
        results_page.write_section(results_page.RESULTS_PAGE, SECTION, results_page.text_block(text), command,
                                   images=[img])
    return results


if __name__ == "__main__":
    main()
