"""PPO with action masking on logic puzzles, driven by any magister curriculum — one file, CleanRL style.

Run ``python -m magister.examples.puzzle_ppo --help`` for the options. A typical run::

    python -m magister.examples.puzzle_ppo --puzzle flip --curriculum sfl --total-steps 200000

What one update does, top to bottom:

1. ``num_envs`` puzzle envs step ``num_steps`` times. Each env is a :class:`PuzzleTaskWrapper` (applies a task
   on reset) inside a :class:`GymnasiumSyncWrapper` that takes the next task from the curriculum on every
   reset and reports each finished episode (return, length, success) back to it — in this process
   (``--vector sync``) or from worker processes through the sync layer (``--vector async``).
2. Illegal actions are masked with the env's ``action_masks()``; transitions of evaluation-only tasks
   (``info["task_train"] == False``, sent by PLR⊥/ACCEL) are kept for the value/score computation but
   excluded from the policy and value losses.
3. GAE advantages; for value-based curricula (PLR, ACCEL) the per-episode-segment scores are computed from
   the same rollout by :func:`magister.integrations.scores.feed_scores` and sent to the curriculum.
4. Clipped-surrogate PPO epochs over shuffled minibatches.

Every ``eval_every`` updates the policy plays held-out instances (seeds never trained on) of every
difficulty; per-difficulty success and mean successful-episode length go to TensorBoard and the console.
At the end a PNG shows the curriculum's task distribution over time and per-difficulty success.
Checkpoints are written every ``checkpoint_every`` updates and at the end, as two files that load without
running code from them: ``checkpoint.pt`` (policy and optimiser tensors; ``torch.load`` with its default
``weights_only=True``) and ``checkpoint.state`` (curriculum state, counters, history, arguments;
:func:`magister.load`). ``--resume PATH/checkpoint.pt`` continues from one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from gymnasium import spaces

from magister.curricula.base import Curriculum
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.evaluation import format_estimate, interval_estimates
from magister.examples import results as results_page
from magister.examples._checkpoint import read_checkpoint, write_checkpoint
from magister.examples._cli import parse_dataclass, require, trainer_needs
from magister.examples.puzzles.task import (
    PuzzleDifficultyWrapper,
    PuzzleTask,
    PuzzleTaskSpace,
    PuzzleTaskWrapper,
    depth_ladder,
    make_puzzle_env,
)
from magister.task_spaces.base import TaskSpace
from magister.task_spaces.discrete import Discrete

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------------
@dataclass
class Args:
    """Options of the puzzle PPO trainer (every field is a ``--flag``)."""

    puzzle: str = "flip"
    """puzzle to train on (flip, flood, sixteen, fifteen, netslide, pegs, samegame)"""
    params: tuple[str, ...] = ()
    """parameter strings forming the task space (default: the scramble-depth ladder of --size)"""
    size: str = "4x4c"
    """board parameters whose depth ladder is the default task space"""
    curriculum: str = "sfl"
    """curriculum: dr, sfl, sfl-dist, plr, robust-plr, accel, lp; none = one fixed task, no magister"""
    task_level: str = "difficulty"
    """difficulty: the curriculum picks a difficulty, each episode a fresh training seed of it; instance: it
    picks (params, seed) instances"""
    train_seeds: int = 200
    """instances per difficulty used for training (seeds 0 .. train_seeds-1)"""
    eval_seeds: int = 20
    """held-out instances per difficulty (seeds train_seeds .. train_seeds+eval_seeds-1)"""
    total_steps: int = 200_000
    """environment steps in total"""
    num_envs: int = 8
    """parallel environments"""
    num_steps: int = 64
    """steps per env per rollout"""
    vector: str = "sync"
    """sync: envs in this process (curriculum called directly); async: worker processes + sync layer"""
    learning_rate: float = 5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 256
    """width of the MLP encoder"""
    max_steps: int = 0
    """episode step limit (0: the puzzle's default)"""
    seed: int = 0
    torch_threads: int = 1
    eval_every: int = 25
    """evaluate on held-out instances every N updates (0: only at the end)"""
    eval_episodes: int = 1
    """episodes per held-out instance"""
    checkpoint_every: int = 50
    """write a checkpoint every N updates (0: only at the end)"""
    resume: str = ""
    """checkpoint to resume from: a checkpoint.pt (its checkpoint.state next to it)"""
    run_dir: str = "runs"
    run_name: str = ""
    tensorboard: bool = True
    progress: bool = True
    plot: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    """curriculum keyword arguments (JSON on the command line)"""
    write_results: bool = False
    """write the held-out table and the plot into docs/results.md and docs/img/ (a source checkout)"""


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse the command line into :class:`Args` (``--total-steps 1e5`` style; field docs are ``--help``)."""
    return parse_dataclass(Args, argv, prog="python -m magister.examples.puzzle_ppo",
                           description=__doc__.split("\n\n")[0],
                           epilog="Needs the 'examples' extra (torch, tqdm, TensorBoard, matplotlib): "
                                  "pip install 'magister[examples]'.")


# ----------------------------------------------------------------------------------------------------
# Task space and curricula
# ----------------------------------------------------------------------------------------------------
def difficulties(args: Args) -> list[str]:
    """The parameter strings (difficulties) of the run, easy to hard."""
    return list(args.params) if args.params else depth_ladder(args.puzzle, args.size)


def make_task_spaces(args: Args) -> tuple[TaskSpace, PuzzleTaskSpace, list[PuzzleTask]]:
    """The training space, a space that also holds the held-out seeds, and the held-out evaluation tasks.

    Training instances use seeds ``[0, train_seeds)``; held-out ones ``[train_seeds, train_seeds +
    eval_seeds)``, never trained on. With ``task_level="difficulty"`` the training space is a ``Discrete``
    over the parameter strings (see :class:`PuzzleDifficultyWrapper`), else the instance space.
    """
    params = difficulties(args)
    lo, hi = args.train_seeds, args.train_seeds + args.eval_seeds
    size = max_board(args)
    full = PuzzleTaskSpace({args.puzzle: params}, seed_range=(0, hi), max_size=size, seed=args.seed)
    if args.task_level == "difficulty":
        train: TaskSpace = Discrete(tasks=params, seed=args.seed)
    elif args.task_level == "instance":
        train = PuzzleTaskSpace({args.puzzle: params}, seed_range=(0, args.train_seeds), max_size=size,
                                seed=args.seed)
    else:
        raise ValueError(f"--task-level must be 'difficulty' or 'instance', got {args.task_level!r}")
    held_out = [PuzzleTask(args.puzzle, p, s) for p in params for s in range(lo, hi)]
    return train, full, held_out


#: Curricula selectable with ``--curriculum``.
CURRICULA = ("dr", "sfl", "sfl-dist", "plr", "robust-plr", "accel", "lp", "none")


def make_curriculum(name: str, task_space: TaskSpace, seed: int, **kwargs: Any) -> Curriculum:
    """A curriculum by its command-line name."""
    name = name.lower()
    if name in ("dr", "domain-randomization"):
        from magister.curricula.domain_randomization import DomainRandomization

        return DomainRandomization(task_space, seed=seed, **kwargs)
    if name in ("sfl", "sfl-dist"):
        from magister.curricula.sfl import SFL

        if name == "sfl-dist":
            kwargs.setdefault("method", "dist")
            # online estimates: keep a floor under every task so an early failure does not exclude it forever
            kwargs.setdefault("floor_all", True)
        return SFL(task_space, seed=seed, **kwargs)
    if name == "plr":
        from magister.curricula.plr import PLR

        # the puzzle space is unbounded, and PLR's seen-fraction replay rule needs a finite one
        kwargs.setdefault("replay_prob", 0.5)
        return PLR(task_space, seed=seed, **kwargs)
    if name == "robust-plr":
        from magister.curricula.plr import RobustPLR

        return RobustPLR(task_space, seed=seed, **kwargs)
    if name == "accel":
        from magister.curricula.accel import ACCEL

        return ACCEL(task_space, seed=seed, **kwargs)
    if name == "lp":
        from magister.curricula.learning_progress import LearningProgress

        return LearningProgress(task_space, seed=seed, **kwargs)
    raise ValueError(f"unknown curriculum {name!r}; expected one of {', '.join(CURRICULA)}")


def wants_value_scores(curriculum: Curriculum) -> bool:
    """Whether the curriculum learns from learner-side value scores (PLR family with a value score)."""
    from magister.curricula.scoring import VALUE_SCORES

    score = getattr(curriculum, "score", None)
    return isinstance(score, str) and score in VALUE_SCORES


# ----------------------------------------------------------------------------------------------------
# Environments
# ----------------------------------------------------------------------------------------------------
def make_env_fn(args: Args, task_space: TaskSpace, source: Any):
    """A factory for one synced puzzle env (picklable for worker processes when ``source`` is an address).

    With ``source=None`` (``--curriculum none``) the env is the bare puzzle on one fixed difficulty, with no
    magister wrapper at all: the baseline for measuring what the curriculum machinery costs.
    """

    def thunk() -> gym.Env:
        kwargs = {"max_steps": args.max_steps} if args.max_steps else {}
        kwargs["max_size"] = max_board(args)
        if source is None:
            params = difficulties(args)[len(difficulties(args)) // 2]
            return make_puzzle_env(args.puzzle, params=f"{params}#{args.seed}", **kwargs)
        puzzle_env = make_puzzle_env(args.puzzle, **kwargs)
        if isinstance(task_space, PuzzleTaskSpace):
            env: gym.Env = PuzzleTaskWrapper(puzzle_env, task_space)
        else:
            env = PuzzleDifficultyWrapper(puzzle_env, task_space, seed_range=(0, args.train_seeds))
        return GymnasiumSyncWrapper(env, source)

    return thunk


def max_board(args: Args) -> tuple[int, int]:
    """The largest (width, height) among the run's difficulties: fixes observation and action spaces."""
    from magister.examples.puzzles.task import PUZZLES

    sizes = [PUZZLES[args.puzzle].params_cls.parse(p).size for p in difficulties(args)]
    return max(w for w, _ in sizes), max(h for _, h in sizes)


def make_vector_env(args: Args, task_space: TaskSpace, source: Any) -> gym.vector.VectorEnv:
    fns = [make_env_fn(args, task_space, source) for _ in range(args.num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if args.vector == "async":
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="fork")
    if args.vector == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    raise ValueError(f"--vector must be 'sync' or 'async', got {args.vector!r}")


# ----------------------------------------------------------------------------------------------------
# Policy
# ----------------------------------------------------------------------------------------------------
class ObsEncoder(nn.Module):
    """Flattens a Dict of padded Boxes: one-hot for small integer ranges, scaled floats otherwise."""

    def __init__(self, space: spaces.Dict, max_onehot: int = 16) -> None:
        super().__init__()
        self.keys = [k for k in space.spaces if k != "rgb"]
        self.specs: list[tuple[str, int, float, float]] = []
        self.out_dim = 0
        for k in self.keys:
            box = space[k]
            if not isinstance(box, spaces.Box):
                raise TypeError(f"observation key {k!r} must be a Box, got {box}")
            lo, hi = float(np.min(box.low)), float(np.max(box.high))
            n = int(hi - lo + 1)
            size = int(np.prod(box.shape))
            if np.issubdtype(box.dtype, np.integer) and 2 < n <= max_onehot:
                self.specs.append((k, n, lo, hi))
                self.out_dim += size * n
            else:
                self.specs.append((k, 0, lo, hi))
                self.out_dim += size

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for k, n, lo, hi in self.specs:
            x = obs[k].reshape(obs[k].shape[0], -1)
            if n:
                parts.append(nn.functional.one_hot((x - lo).long().clamp(0, n - 1), n).flatten(1).float())
            else:
                parts.append((x.float() - lo) / max(hi - lo, 1.0))
        return torch.cat(parts, dim=1)


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """MLP actor-critic over the padded board; illegal actions get zero probability."""

    def __init__(self, obs_space: spaces.Dict, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.encoder = ObsEncoder(obs_space)
        self.trunk = nn.Sequential(
            layer_init(nn.Linear(self.encoder.out_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
        )
        self.actor = layer_init(nn.Linear(hidden, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(hidden, 1), std=1.0)

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.critic(self.trunk(self.encoder(obs))).squeeze(-1)

    def act(self, obs: dict[str, torch.Tensor], mask: torch.Tensor, action: torch.Tensor | None = None):
        h = self.trunk(self.encoder(obs))
        logits = self.actor(h).masked_fill(~mask, -1e9)
        dist = torch.distributions.Categorical(logits=logits)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(h).squeeze(-1)


def to_tensor(obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in obs.items() if k != "rgb"}


def legal_masks(envs: gym.vector.VectorEnv) -> np.ndarray:
    """Stacked ``action_masks()`` of every env; a row with no legal action allows all (never sampled)."""
    masks = np.stack(envs.call("action_masks")).astype(bool)
    masks[~masks.any(axis=1)] = True
    return masks


# ----------------------------------------------------------------------------------------------------
# Evaluation on held-out instances
# ----------------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(agent: Agent, args: Args, task_space: PuzzleTaskSpace, tasks: list[PuzzleTask],
             episodes: int = 1, seed: int = 0) -> dict[str, dict[str, float]]:
    """Play every held-out task ``episodes`` times; per difficulty: success rate, mean solved length and each
    episode's success (``"instances"``, in task order: the rows of :mod:`magister.evaluation`'s scores)."""
    kwargs = {"max_steps": args.max_steps} if args.max_steps else {}
    kwargs["max_size"] = max_board(args)
    n = min(len(tasks) * episodes, 32)
    envs = gym.vector.SyncVectorEnv(
        [lambda: PuzzleTaskWrapper(make_puzzle_env(args.puzzle, **kwargs), task_space)] * n,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    queue = [t for t in tasks for _ in range(episodes)]
    results: dict[str, list[tuple[bool, int]]] = defaultdict(list)
    gen = torch.Generator().manual_seed(seed)
    try:
        for start in range(0, len(queue), n):
            chunk = queue[start:start + n]
            obs, _ = envs.reset(options={"task": chunk[0]})
            for i, task in enumerate(chunk):  # put each sub-env on its own task
                sub_obs, _ = envs.envs[i].reset(options={"task": task})
                for k in obs:
                    obs[k][i] = sub_obs[k]
            active = np.zeros(n, dtype=bool)
            active[: len(chunk)] = True
            while active.any():
                mask = torch.as_tensor(legal_masks(envs))
                h = agent.trunk(agent.encoder(to_tensor(obs)))
                logits = agent.actor(h).masked_fill(~mask, -1e9)
                probs = torch.softmax(logits, dim=-1)
                action = torch.multinomial(probs, 1, generator=gen).squeeze(1).numpy()
                obs, _, term, trunc, info = envs.step(action)
                done = (term | trunc) & active
                for i in np.flatnonzero(done):
                    final = info["final_info"]
                    success = bool(final["success"][i])
                    results[chunk[i].params].append((success, int(final["steps"][i])))
                active &= ~done
    finally:
        envs.close()
    out = {}
    for params, rs in results.items():
        solved = [length for ok, length in rs if ok]
        out[params] = {"success": float(np.mean([ok for ok, _ in rs])),
                       "solved_length": float(np.mean(solved)) if solved else float("nan"),
                       "instances": [float(ok) for ok, _ in rs]}
    return out


# ----------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    """What :func:`train` returns: final held-out results and training statistics."""

    eval: dict[str, dict[str, float]]
    episodes_per_difficulty: dict[str, int]
    train_success_per_difficulty: dict[str, float]
    unsolved_episode_share: float
    """share of training episodes spent on task instances the agent never solved during training"""
    global_step: int
    seconds: float
    """wall time of the run, evaluations included"""
    eval_seconds: float
    """wall time spent in held-out evaluations"""
    run_dir: str
    history: list[dict[str, Any]]


def train(args: Args) -> RunResult:
    """Train PPO on puzzles with the curriculum named in ``args``; see the module docstring."""
    run_name = args.run_name or f"{args.puzzle}_{args.curriculum}_s{args.seed}"
    run_dir = Path(args.run_dir) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    np_rng = np.random.default_rng(args.seed)

    task_space, eval_space, held_out = make_task_spaces(args)
    curriculum = None if args.curriculum == "none" else make_curriculum(
        args.curriculum, task_space, args.seed, **args.extra)
    server = None
    if curriculum is None:
        source: Any = None
    elif args.vector == "async":
        from magister.sync.zmq_server import serve

        server = serve(curriculum)
        source = server.address
    else:
        source = curriculum
    envs = make_vector_env(args, task_space, source)
    obs_space = envs.single_observation_space
    n_actions = int(envs.single_action_space.n)
    agent = Agent(obs_space, n_actions, args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    batch_size = args.num_envs * args.num_steps
    minibatch = batch_size // args.num_minibatches
    num_updates = max(1, args.total_steps // batch_size)
    start_update, global_step = 0, 0
    history: list[dict[str, Any]] = []
    if args.resume:
        ckpt = read_checkpoint(args.resume)  # runs no code from the files
        agent.load_state_dict(ckpt["agent"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if curriculum is not None:
            (server or curriculum).load_state_dict(ckpt["curriculum"])
        start_update, global_step, history = ckpt["update"], ckpt["global_step"], ckpt["history"]
        logger.info("resumed from %s at update %d", args.resume, start_update)

    writer = None
    if args.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir))
        writer.add_text("args", json.dumps(dataclasses.asdict(args), default=str))

    # rollout storage
    obs_buf = {k: torch.from_numpy(np.zeros((args.num_steps, args.num_envs) + obs_space[k].shape,
                                            dtype=obs_space[k].dtype))
               for k in obs_space.spaces if k != "rgb"}
    mask_buf = torch.zeros((args.num_steps, args.num_envs, n_actions), dtype=torch.bool)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    train_mask = torch.ones((args.num_steps, args.num_envs))
    step_tasks: list[list[Any]] = [[None] * args.num_envs for _ in range(args.num_steps)]

    episodes = defaultdict(int)
    successes = defaultdict(int)
    instance_episodes: dict[Any, int] = defaultdict(int)  # per task instance: episodes, and ever solved?
    instance_solved: set[Any] = set()
    window_counts: dict[str, int] = defaultdict(int)
    obs, info = envs.reset(seed=args.seed)
    cur_train, cur_task, cur_instance = _task_info(info, args.num_envs)
    next_done = torch.zeros(args.num_envs)
    t0 = time.time()
    eval_seconds = 0.0
    last_eval: dict[str, dict[str, float]] = {}
    bar = _progress(args, num_updates, start_update)
    try:
        for update in range(start_update, num_updates):
            agent.train()
            for step in range(args.num_steps):
                global_step += args.num_envs
                for k in obs_buf:
                    obs_buf[k][step] = torch.as_tensor(obs[k])
                masks = torch.as_tensor(legal_masks(envs))
                mask_buf[step] = masks
                dones[step] = next_done
                train_mask[step] = torch.as_tensor(cur_train, dtype=torch.float32)
                step_tasks[step] = cur_task
                with torch.no_grad():
                    action, logprob, _, value = agent.act(to_tensor(obs), masks)
                actions[step], logprobs[step], values[step] = action, logprob, value
                obs, reward, term, trunc, info = envs.step(action.numpy())
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                done = np.logical_or(term, trunc)
                # bootstrap through truncation (time limit / repeated states): add gamma * V(final obs)
                if trunc.any() and "final_obs" in info:
                    idx = np.flatnonzero(trunc & ~term)
                    if idx.size:
                        final = {k: torch.as_tensor(np.stack([info["final_obs"][i][k] for i in idx]))
                                 for k in obs_buf}
                        with torch.no_grad():
                            rewards[step, idx] += args.gamma * agent.value(final)
                next_done = torch.as_tensor(done, dtype=torch.float32)
                for i in np.flatnonzero(done):
                    params = cur_instance[i].split("#")[0]
                    solved = bool(info["final_info"]["success"][i])
                    episodes[params] += 1
                    window_counts[params] += 1
                    successes[params] += int(solved)
                    instance_episodes[cur_instance[i]] += 1
                    if solved:
                        instance_solved.add(cur_instance[i])
                cur_train, cur_task, cur_instance = _task_info(info, args.num_envs)

            # GAE
            with torch.no_grad():
                next_value = agent.value(to_tensor(obs))
                advantages = torch.zeros_like(rewards)
                lastgae = torch.zeros(args.num_envs)
                for t in reversed(range(args.num_steps)):
                    nonterminal = 1.0 - (next_done if t == args.num_steps - 1 else dones[t + 1])
                    nv = next_value if t == args.num_steps - 1 else values[t + 1]
                    delta = rewards[t] + args.gamma * nv * nonterminal - values[t]
                    lastgae = delta + args.gamma * args.gae_lambda * nonterminal * lastgae
                    advantages[t] = lastgae
                returns = advantages + values

            if curriculum is not None and wants_value_scores(curriculum):
                from magister.integrations.scores import feed_scores

                tgt = server if server is not None else curriculum
                # dones[t] is the done flag seen before step t (CleanRL style), next_done the last step's
                feed_scores(tgt, rewards, values, dones, next_value, step_tasks,
                            done_convention="before_step", next_done=next_done)

            # PPO update (evaluation-only transitions are masked out of the losses)
            b_obs = {k: v.reshape((batch_size,) + v.shape[2:]) for k, v in obs_buf.items()}
            b_masks = mask_buf.reshape(batch_size, n_actions)
            b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
            b_adv, b_returns = advantages.reshape(-1), returns.reshape(-1)
            b_train = train_mask.reshape(-1)
            stats = defaultdict(float)
            if b_train.sum() > 0:
                for _ in range(args.update_epochs):
                    perm = torch.as_tensor(np_rng.permutation(batch_size))
                    for s in range(0, batch_size, minibatch):
                        mb = perm[s:s + minibatch]
                        w = b_train[mb]
                        if w.sum() == 0:
                            continue
                        _, newlogprob, entropy, newvalue = agent.act(
                            {k: v[mb] for k, v in b_obs.items()}, b_masks[mb], b_actions[mb])
                        ratio = (newlogprob - b_logprobs[mb]).exp()
                        adv = b_adv[mb]
                        if w.sum() > 1:
                            adv = (adv - adv[w > 0].mean()) / (adv[w > 0].std() + 1e-8)
                        clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                        pg = torch.max(-adv * ratio, -adv * clipped)
                        pg_loss = (pg * w).sum() / w.sum()
                        v_loss = 0.5 * (((newvalue - b_returns[mb]) ** 2) * w).sum() / w.sum()
                        ent = (entropy * w).sum() / w.sum()
                        loss = pg_loss - args.ent_coef * ent + args.vf_coef * v_loss
                        optimizer.zero_grad()
                        loss.backward()
                        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                        optimizer.step()
                        stats["pg_loss"], stats["v_loss"], stats["entropy"] = (
                            pg_loss.item(), v_loss.item(), ent.item())

            # logging, evaluation, checkpoints
            elapsed = max(time.time() - t0 - eval_seconds, 1e-9)
            sps = int((global_step - start_update * batch_size) / elapsed)
            row: dict[str, Any] = {"update": update + 1, "global_step": global_step,
                                   "counts": dict(window_counts),
                                   "train_fraction": float(b_train.mean())}
            window_counts.clear()
            do_eval = (args.eval_every and (update + 1) % args.eval_every == 0) or update + 1 == num_updates
            if do_eval:
                agent.eval()
                t_eval = time.time()
                last_eval = evaluate(agent, args, eval_space, held_out, args.eval_episodes, seed=args.seed)
                row["eval"] = last_eval
                eval_seconds += time.time() - t_eval
            history.append(row)
            if writer is not None:
                writer.add_scalar("charts/sps", sps, global_step)
                writer.add_scalar("charts/train_fraction", row["train_fraction"], global_step)
                for k, v in stats.items():
                    writer.add_scalar(f"losses/{k}", v, global_step)
                for k, v in _curriculum_metrics(server or curriculum).items() if curriculum else ():
                    writer.add_scalar(k, v, global_step)
                for params, r in last_eval.items() if do_eval else ():
                    writer.add_scalar(f"eval/success/{params}", r["success"], global_step)
                    if np.isfinite(r["solved_length"]):
                        writer.add_scalar(f"eval/solved_length/{params}", r["solved_length"], global_step)
            if bar is not None:
                mean_eval = np.mean([r["success"] for r in last_eval.values()]) if last_eval else float("nan")
                bar.set_postfix(sps=sps, eval_success=f"{mean_eval:.2f}")
                bar.update(1)
            is_last = update + 1 == num_updates
            if is_last:  # workers send their held feedback on close: the last checkpoint includes it
                envs.close()
            if (args.checkpoint_every and (update + 1) % args.checkpoint_every == 0) or is_last:
                save_checkpoint(run_dir / "checkpoint.pt", agent, optimizer, server or curriculum,
                                update + 1, global_step, history, args)
    finally:
        if bar is not None:
            bar.close()
        envs.close()
        if server is not None:
            server.close()
        if writer is not None:
            writer.close()
    seconds = time.time() - t0
    train_success = {p: successes[p] / episodes[p] for p in episodes if episodes[p]}
    total_episodes = sum(instance_episodes.values())
    unsolved = sum(n for key, n in instance_episodes.items() if key not in instance_solved)
    unsolved_share = unsolved / total_episodes if total_episodes else float("nan")
    if args.plot:
        plot_run(history, difficulties(args), run_dir / "curriculum.png", title=run_name)
    return RunResult(last_eval, dict(episodes), train_success, unsolved_share, global_step, seconds,
                     eval_seconds, str(run_dir), history)


def _task_info(info: dict[str, Any], n: int) -> tuple[np.ndarray, list[Any], list[str]]:
    """Per env: train flag, encoded task (None without magister) and instance string ``"params#seed"``."""
    train = np.asarray(info["task_train"], dtype=bool) if "task_train" in info else np.ones(n, dtype=bool)
    tasks = list(info["task"]) if "task" in info else [None] * n
    return train, tasks, [str(p) for p in info["params"]]


def _curriculum_metrics(source: Any) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in source.metrics().items() if np.isscalar(v)}
    except Exception:  # metrics are diagnostics; never let them stop training
        logger.exception("curriculum metrics failed")
        return {}


def _progress(args: Args, total: int, initial: int):
    if not args.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=f"{args.curriculum}", unit="update", dynamic_ncols=True)


def save_checkpoint(path: Path, agent: Agent, optimizer: torch.optim.Optimizer, curriculum: Any,
                    update: int, global_step: int, history: list, args: Args) -> None:
    """Atomically write policy and optimiser to ``path`` (loads with ``torch.load(path)``, default
    ``weights_only=True``) and curriculum state, counters, history and arguments to ``path`` with suffix
    ``.state`` (loads with :func:`magister.load`); see :mod:`magister.examples._checkpoint`."""
    write_checkpoint(path, {"agent": agent.state_dict(), "optimizer": optimizer.state_dict()}, {
        "curriculum": curriculum.state_dict() if curriculum is not None else None,
        "update": update,
        "global_step": global_step,
        "history": history,
        "args": dataclasses.asdict(args),
    })


def plot_run(history: list[dict[str, Any]], params: list[str], path: Path, title: str = "") -> None:
    """PNG: share of training episodes per difficulty over time, and held-out success per difficulty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.array([h["global_step"] for h in history])
    counts = np.array([[h["counts"].get(p, 0) for p in params] for h in history], dtype=float)
    # smooth over a few updates so the shares are readable
    k = max(1, len(history) // 40)
    kernel = np.ones(k) / k
    sm = np.stack([np.convolve(counts[:, j], kernel, mode="same") for j in range(len(params))], axis=1)
    shares = sm / np.maximum(sm.sum(axis=1, keepdims=True), 1e-9)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.stackplot(steps, shares.T, labels=params)
    ax1.set(xlabel="environment steps", ylabel="share of training episodes", ylim=(0, 1),
            title="curriculum: task distribution over time")
    ax1.legend(fontsize=7, loc="upper left", ncols=2)
    evals = [(h["global_step"], h["eval"]) for h in history if "eval" in h]
    for p in params:
        ax2.plot([s for s, _ in evals], [e.get(p, {}).get("success", np.nan) for _, e in evals], marker="o",
                 ms=3, label=p)
    ax2.set(xlabel="environment steps", ylabel="held-out success", ylim=(-0.02, 1.02),
            title="held-out success per difficulty")
    ax2.legend(fontsize=7, loc="upper left", ncols=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def heldout_interval(result: RunResult, params: list[str]) -> str:
    """Mean and IQM held-out success over the difficulties with 95% stratified bootstrap intervals over the
    held-out instances (:mod:`magister.evaluation`; one training seed: the interval is the evaluation's
    uncertainty, not the seed's; the quickstart's intervals are over seeds)."""
    rows = [result.eval.get(p, {}).get("instances") for p in params]
    if any(not r for r in rows) or len({len(r) for r in rows}) != 1:
        return "  (no held-out evaluation of every difficulty: no interval)"
    est = interval_estimates({"held-out": np.array(rows).T}, ("mean", "iqm"), seed=0)["held-out"]
    return (f"  over the difficulties: mean {format_estimate(est['mean'])}, IQM "
            f"{format_estimate(est['iqm'])} (95% bootstrap intervals over the {len(rows[0])} held-out "
            f"episodes per difficulty of this seed)")


def main(argv: list[str] | None = None) -> RunResult:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    require(trainer_needs(args, "torch"), "python -m magister.examples.puzzle_ppo")  # now, not after training
    if args.write_results:
        results_page.check_section(results_page.RESULTS_PAGE, "puzzle-ppo")  # before the run, not after
    result = train(args)
    lines = [f"{args.curriculum} on {args.puzzle}: held-out success after {result.global_step} steps "
             f"({result.seconds:.0f}s):"]
    for p in difficulties(args):
        r = result.eval.get(p, {})
        lines.append(f"  {p:>12}: success {r.get('success', float('nan')):.2f}  "
                     f"solved length {r.get('solved_length', float('nan')):.1f}  "
                     f"train episodes {result.episodes_per_difficulty.get(p, 0)}")
    lines.append(heldout_interval(result, difficulties(args)))
    print("\n" + "\n".join(lines))
    print(f"run directory: {result.run_dir}")
    if args.write_results:
        plot = Path(result.run_dir) / "curriculum.png"
        images = [results_page.save_image(plot, "puzzle-ppo.png")] if plot.is_file() else []
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.puzzle_ppo")
        results_page.write_section(results_page.RESULTS_PAGE, "puzzle-ppo",
                                   results_page.text_block("\n".join(lines)), command, images=images)
    return result


if __name__ == "__main__":
    main()
