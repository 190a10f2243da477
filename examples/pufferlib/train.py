"""PPO through PufferLib's vector envs on MiniGrid level seeds, with PLR (learnability) choosing the levels.

The curriculum is served (:func:`magister.serve`) in the learner's process; every env PufferLib makes is
built by :func:`.levels.puffer_env`, whose sync wrapper takes its level seed from the curriculum at each
reset (PufferLib passes no reset options, so the task is chosen inside the env) and reports each episode
back: the curriculum learns from that feedback alone. PLR's ``"learnability"`` score, ``p (1 - p)`` of the
level's recent success rate (the score SFL ranks levels by), needs no values from the learner.
``--curriculum dr`` draws levels uniformly (the baseline).

The loop is CleanRL's PPO (``ppo.py``: separate tanh MLPs, GAE, clipped surrogate and value) on
``pufferlib.vector.make(..., backend=Serial | Multiprocessing)``: ``async_reset`` once, then ``send`` /
``recv``. PufferLib resets a finished env on the *next* ``send`` (that step's action is not played and its
reward is 0); those steps are kept out of the loss. Every ``info`` carries ``task`` (the seed the
curriculum sent) and ``layout`` (the digest of the grid the env generated, :class:`.levels.ReportLayout`);
with ``--check-levels`` the trainer checks each against a fresh ``reset(seed=task)``.

Held-out evaluation: the policy on seeds ``10^6 .. 10^6 + heldout - 1`` (never training levels) through
:func:`magister.evaluation.evaluate`, on envs without a sync wrapper. Output (``--out``): ``metrics.jsonl``,
TensorBoard events, ``eval.json`` and ``checkpoint.pt`` / ``checkpoint.state`` (policy, optimiser,
curriculum, counters; ``--resume`` continues from them).

Run it in the PufferLib virtualenv (``bash benchmarks/_pufferlib_env.sh VENV_DIR CHECKOUT``):
``VENV_DIR/bin/python -m magister.examples.pufferlib.train --help``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

from ... import serve
from ...curricula import PLR, DomainRandomization
from ...evaluation import Suite, evaluate
from ...integrations.loggers import log_curriculum_metrics, summary_writer
from ...task_spaces import Discrete
from .._checkpoint import read_checkpoint, write_checkpoint
from .._cli import parse_dataclass
from . import levels as V

logger = logging.getLogger(__name__)

__all__ = ["Agent", "Args", "HELDOUT_BASE", "main", "train"]

#: the first held-out seed (training seeds are 0 .. num_levels - 1)
HELDOUT_BASE = 10**6
#: seconds the trainer waits at the end for the envs' last episode reports to reach the curriculum
DRAIN_TIMEOUT = 60.0


@dataclass
class Args:
    """Options (each is a ``--flag``)."""

    env_id: str = V.ENV_ID
    """a procedurally generated MiniGrid env"""
    num_levels: int = 200
    """training levels: seeds 0 .. num_levels - 1"""
    max_steps: int = 0
    """episode step limit (0: the MiniGrid env's own)"""
    curriculum: str = "plr"
    """plr (learnability) or dr"""
    backend: str = "Multiprocessing"
    """PufferLib's vector backend: Serial or Multiprocessing"""
    num_envs: int = 8
    num_workers: int = 2
    """worker processes (Multiprocessing)"""
    total_timesteps: int = 200_000
    num_steps: int = 128
    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    heldout: int = 50
    """held-out levels evaluated at the end"""
    eval_episodes: int = 1
    seed: int = 1
    torch_threads: int = 1
    check_levels: bool = False
    """check every info's layout against a fresh reset of its task's seed"""
    out: str = ""
    """output folder (metrics, TensorBoard, eval.json, checkpoint); empty: none"""
    resume: str = ""
    """a checkpoint.pt written by a run with the same options"""
    progress: bool = True


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate tanh MLPs for the value and the policy over the flattened 7x7x3 view (CleanRL's
    ``ppo.py``)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
                                   layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
                                   layer_init(nn.Linear(hidden, n_actions), std=0.01))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None) -> tuple:
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def _obs(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float32).reshape(len(x), -1) / 10.0)


def make_vecenv(args: Args, address: str) -> Any:
    """PufferLib's vector env of ``args.num_envs`` level envs, each taking tasks from ``address``."""
    pufferlib = V.require_pufferlib()
    if args.backend not in ("Serial", "Multiprocessing"):
        raise ValueError(f"backend must be 'Serial' or 'Multiprocessing', got {args.backend!r}")
    backend = getattr(pufferlib.vector, args.backend)
    creator = partial(V.puffer_env, address, args.num_levels, args.env_id, args.max_steps or None)
    extra = {"num_workers": args.num_workers, "overwork": True} if args.backend == "Multiprocessing" else {}
    return pufferlib.vector.make(creator, backend=backend, num_envs=args.num_envs, seed=args.seed, **extra)


def check_infos(infos: list[dict[str, Any]], env_id: str, cache: dict[int, str]) -> int:
    """Every info that names a task: its ``layout`` must be the layout of that seed (a fresh reset; cached
    per seed). Returns the number of infos checked; ``AssertionError`` names a mismatch."""
    n = 0
    for info in infos:
        if "task" not in info:
            continue
        seed = int(info["task"])
        if seed not in cache:
            cache[seed] = V.layout_of_seed(seed, env_id)
        if info["layout"] != cache[seed]:
            raise AssertionError(f"an env reported task {seed} but played layout {info['layout']}, not the "
                                 f"layout {cache[seed]} of seed {seed}")
        n += 1
    return n


def train(args: Args) -> dict[str, Any]:
    """Run PPO; returns counters, the held-out evaluation and the objects it trained (``"curriculum"`` is
    the served curriculum, ``"tasks_seen"`` the task of every info, ``"checked"`` the infos checked)."""
    torch.set_num_threads(max(1, args.torch_threads))
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    space = Discrete(args.num_levels)
    if args.curriculum == "plr":
        curriculum: Any = PLR(space, score="learnability", seed=args.seed)
    elif args.curriculum == "dr":
        curriculum = DomainRandomization(space, seed=args.seed)
    else:
        raise ValueError(f"curriculum must be 'plr' or 'dr', got {args.curriculum!r}")
    batch = args.num_envs * args.num_steps
    mb_size = batch // args.num_minibatches
    iterations = max(1, args.total_timesteps // batch)
    out = Path(args.out) if args.out else None
    history: list[dict[str, Any]] = []
    start, global_step = 0, 0
    server = serve(curriculum)
    agent = optimizer = None
    vec = make_vecenv(args, server.address)
    try:
        obs_dim = int(np.prod(vec.single_observation_space.shape))
        agent = Agent(obs_dim, int(vec.single_action_space.n), args.hidden)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
        if args.resume:
            ckpt = read_checkpoint(args.resume)
            agent.load_state_dict(ckpt["agent"])
            optimizer.load_state_dict(ckpt["optimizer"])
            server.load_state_dict(ckpt["curriculum"])
            start, global_step, history = ckpt["update"], ckpt["global_step"], ckpt["history"]
        writer = summary_writer(out / "tb") if out is not None else None
        result = _loop(args, vec, agent, optimizer, server, rng, start, iterations, global_step, mb_size,
                       history, out, writer)
        # the envs send their reports without waiting: let the last ones reach the curriculum
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while curriculum.num_episodes < result["episodes"] and time.monotonic() < deadline:
            time.sleep(0.02)
        if curriculum.num_episodes < result["episodes"]:
            logger.warning("the curriculum got %d of the %d episodes the envs finished within %.0f s",
                           curriculum.num_episodes, result["episodes"], DRAIN_TIMEOUT)
    finally:
        vec.close()
        server.close()
    result["heldout"] = heldout_eval(args, agent)
    result["curriculum"] = curriculum
    if out is not None:
        (out / "eval.json").write_text(json.dumps({"heldout_success": result["heldout"].tolist(),
                                                   "seeds": [HELDOUT_BASE + i for i in range(args.heldout)],
                                                   "args": dataclasses.asdict(args)}))
    return result


def _loop(args: Args, vec: Any, agent: Agent, optimizer: torch.optim.Optimizer, server: Any,
          rng: np.random.Generator, start: int, iterations: int, global_step: int, mb_size: int,
          history: list, out: Path | None, writer: Any) -> dict[str, Any]:
    n, T = args.num_envs, args.num_steps
    obs_dim = int(np.prod(vec.single_observation_space.shape))
    obs = torch.zeros((T, n, obs_dim))
    actions = torch.zeros((T, n), dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros((T, n)) for _ in range(4))
    played = torch.zeros((T, n), dtype=torch.bool)  # False: a step PufferLib spent resetting the env
    tasks_seen: list[int] = []
    cache: dict[int, str] = {}
    checked, episodes, successes = 0, 0, 0
    vec.async_reset(args.seed)
    o, _, term, trunc, _, infos, _, _ = vec.recv()
    next_obs, next_done = _obs(o), torch.zeros(n)
    tasks_seen += [int(i["task"]) for i in infos if "task" in i]
    checked += check_infos(infos, args.env_id, cache) if args.check_levels else 0
    t0 = time.time()
    bar = range(start, iterations)
    if args.progress:
        from tqdm.auto import tqdm

        bar = tqdm(bar, initial=start, total=iterations, unit="update", desc=f"pufferlib {args.curriculum}")
    for it in bar:
        optimizer.param_groups[0]["lr"] = (1.0 - it / iterations) * args.learning_rate
        for step in range(T):
            global_step += n
            obs[step], dones[step] = next_obs, next_done
            played[step] = next_done == 0  # after an ending step, PufferLib's next send resets the env
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
            vec.send(action.numpy().astype(np.int32))
            o, r, term, trunc, _, infos, _, _ = vec.recv()
            done = np.logical_or(term, trunc)
            rewards[step] = torch.as_tensor(r, dtype=torch.float32)
            next_obs, next_done = _obs(o), torch.as_tensor(done, dtype=torch.float32)
            episodes += int(done.sum())
            successes += int((np.asarray(r) > 0)[done].sum())
            tasks_seen += [int(i["task"]) for i in infos if "task" in i]
            checked += check_infos(infos, args.env_id, cache) if args.check_levels else 0
        with torch.no_grad():  # GAE; dones[t] is the done flag seen before step t (CleanRL's convention)
            next_value = agent.get_value(next_obs).reshape(1, -1)
            adv = torch.zeros_like(rewards)
            last = torch.zeros(n)
            for t in reversed(range(T)):
                nonterminal = 1.0 - (next_done if t == T - 1 else dones[t + 1])
                nxt = next_value if t == T - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * nxt * nonterminal - values[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                adv[t] = last
            returns = adv + values
        row = _ppo(args, agent, optimizer, rng, obs.reshape(-1, obs_dim), actions.reshape(-1),
                   logprobs.reshape(-1), adv.reshape(-1), returns.reshape(-1), values.reshape(-1),
                   np.flatnonzero(played.reshape(-1).numpy()), mb_size)
        row.update({"update": it + 1, "env_steps": global_step, "episodes": episodes,
                    "success_rate": successes / max(episodes, 1), **server.metrics()})
        history.append(row)
        if writer is not None:
            log_curriculum_metrics({k: v for k, v in row.items() if isinstance(v, (int, float))},
                                   global_step, writer)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row, default=float) + "\n")
            tensors = {"agent": agent.state_dict(), "optimizer": optimizer.state_dict()}
            write_checkpoint(out / "checkpoint.pt", tensors,
                             {"curriculum": server.state_dict(), "update": it + 1, "global_step": global_step,
                              "history": history, "args": dataclasses.asdict(args)})
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(success=f"{row['success_rate']:.2f}")
    if writer is not None:
        writer.close()
    return {"global_step": global_step, "iterations": iterations, "episodes": episodes, "history": history,
            "tasks_seen": tasks_seen, "checked": checked, "agent": agent, "seconds": time.time() - t0}


def _ppo(args: Args, agent: Agent, optimizer: torch.optim.Optimizer, rng: np.random.Generator,
         b_obs: torch.Tensor, b_actions: torch.Tensor, b_logprobs: torch.Tensor, b_adv: torch.Tensor,
         b_returns: torch.Tensor, b_values: torch.Tensor, inds: np.ndarray, mb_size: int) -> dict[str, float]:
    """CleanRL's PPO epochs over the steps ``inds`` (the steps the envs played)."""
    stats: dict[str, float] = {}
    for _ in range(args.update_epochs):
        rng.shuffle(inds)
        for s in range(0, len(inds), mb_size):
            mb = inds[s:s + mb_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            a = b_adv[mb]
            if len(mb) > 1:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg = torch.max(-a * ratio, -a * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            newvalue = newvalue.view(-1)
            v_clip = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (v_clip - b_returns[mb]) ** 2).mean()
            loss = pg - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            stats = {"pg_loss": pg.item(), "value_loss": v_loss.item(), "entropy": entropy.mean().item()}
    return stats


def heldout_eval(args: Args, agent: Agent) -> np.ndarray:
    """Success rate per held-out seed (``10^6 + i``), sampled actions, through
    :func:`magister.evaluation.evaluate` on envs without a sync wrapper."""
    space = Discrete(HELDOUT_BASE + args.heldout)
    suite = Suite.from_tasks([HELDOUT_BASE + i for i in range(args.heldout)], space=space)

    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        with torch.no_grad():
            return agent.get_action_and_value(_obs(obs))[0].numpy()

    make = partial(V.make_level_env, HELDOUT_BASE + args.heldout, args.env_id, args.max_steps or None)
    result = evaluate(policy, make, suite,
                      episodes=args.eval_episodes, num_envs=min(8, args.heldout), seed=args.seed)
    return result.per_task("progress")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``--help`` lists the options."""
    args = parse_dataclass(Args, argv, prog="python -m magister.examples.pufferlib.train")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        V.require_pufferlib()
    except ImportError as exc:
        raise SystemExit(str(exc)) from None
    res = train(args)
    logger.info("%d env steps, %d episodes in %.0f s; held-out success rate %.3f over %d levels",
                res["global_step"], res["episodes"], res["seconds"], float(np.mean(res["heldout"])),
                args.heldout)
    return res


if __name__ == "__main__":
    main()
