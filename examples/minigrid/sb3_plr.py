"""Stable-Baselines3 PPO on MiniGrid with PLR over level seeds, envs in SB3's ``SubprocVecEnv``.

Run ``python -m magister.examples.minigrid.sb3_plr --help`` for the options. The PLR paper's MiniGrid
setting (Jiang et al. 2021, MultiRoom-N4-Random, 4,000 training levels)::

    python -m magister.examples.minigrid.sb3_plr --num-levels 4000 --learning-rate 7e-4 --n-epochs 4 \\
        --total-steps 1e8

The training code is SB3's own; magister adds (as in :mod:`magister.examples.sb3_puzzles`):

1. a curriculum (PLR: value L1, rank, β 0.1, ρ 0.3) served with :func:`magister.serve`;
2. each ``SubprocVecEnv`` worker env is :func:`~magister.examples.minigrid.common.make_env`'s level-seed
   task wrapper inside a :class:`~magister.env_wrappers.sync_wrappers.GymnasiumSyncWrapper` given
   ``server.address`` (SB3's default start method: the env factory travels by cloudpickle);
3. :class:`~magister.integrations.sb3.CurriculumCallback` feeds PLR its value-L1 scores from SB3's rollout
   buffer and logs the curriculum's metrics with SB3's logger (TensorBoard with ``--tensorboard-log``).

Around it: a tqdm bar, checkpoints every ``--checkpoint-every`` steps (SB3's ``model.zip`` and the
curriculum's state, ``curriculum.state``, in magister's format) that ``--resume RUN_DIR`` continues from, and
a held-out evaluation on seeds never trained on (:func:`magister.evaluation.evaluate`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

import magister
from magister.examples.minigrid.common import (
    CURRICULA,
    DEFAULT_ENV,
    evaluate_policy,
    make_curriculum,
    make_env,
    make_task_spaces,
    summarise,
)
from magister.integrations.sb3 import CurriculumCallback

logger = logging.getLogger(__name__)

__all__ = ["Checkpoints", "Progress", "make_vec_env", "train", "main"]


def make_vec_env(env_id: str, task_space: Any, address: str, num_envs: int, vec: str = "subproc",
                 max_steps: int | None = None) -> VecEnv:
    """``num_envs`` synced level-seed envs in an SB3 ``SubprocVecEnv`` (default start method) or
    ``DummyVecEnv``."""

    def make() -> gym.Env:
        return Monitor(make_env(env_id, task_space, address, max_steps))

    if vec == "subproc":
        return SubprocVecEnv([make] * num_envs)
    if vec == "dummy":
        return DummyVecEnv([make] * num_envs)
    raise ValueError(f"vec must be 'subproc' or 'dummy', got {vec!r}")


class Progress(BaseCallback):
    """A tqdm bar over environment steps (SB3's own ``progress_bar`` needs ``rich``)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        super().__init__()
        self.total, self.enabled, self.bar = total, enabled, None

    def _on_training_start(self) -> None:
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, initial=self.model.num_timesteps, unit="step")

    def _on_step(self) -> bool:
        if self.bar is not None:
            self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Checkpoints(BaseCallback):
    """Every ``every`` steps (and at the end): SB3's ``model.zip`` and the curriculum's state."""

    def __init__(self, run_dir: Path, server: Any, every: int) -> None:
        super().__init__()
        self.run_dir, self.server, self.every, self._last = run_dir, server, every, 0

    def save(self) -> None:
        self.model.save(self.run_dir / "model.zip")
        state = {"curriculum": self.server.state_dict(), "num_timesteps": int(self.model.num_timesteps)}
        magister.save(self.run_dir / "curriculum.state", state)
        self._last = self.model.num_timesteps

    def _on_step(self) -> bool:
        if self.every and self.model.num_timesteps - self._last >= self.every:
            self.save()
        return True


def train(env_id: str = DEFAULT_ENV, *, num_levels: int = 4000, num_test_levels: int = 100,
          curriculum: str = "plr", total_steps: int = 100_000, num_envs: int = 8, n_steps: int = 128,
          batch_size: int = 256, n_epochs: int = 4, learning_rate: float = 7e-4, gamma: float = 0.99,
          gae_lambda: float = 0.95, ent_coef: float = 0.01, hidden: int = 64, max_steps: int | None = None,
          vec: str = "subproc", seed: int = 0, run_dir: str = "runs/minigrid_sb3", resume: bool = False,
          checkpoint_every: int = 50_000, eval_episodes: int = 1, tensorboard: bool = True,
          progress: bool = True, callbacks: Sequence[BaseCallback] = (), torch_threads: int = 1
          ) -> dict[str, Any]:
    """Train SB3 PPO with the curriculum; returns the model, the held-out evaluation and the curriculum's
    metrics and state. ``resume=True`` continues from the checkpoint in ``run_dir``; ``callbacks`` run
    with SB3's (tests use them to see every step's infos)."""
    import torch

    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    task_space, held_out = make_task_spaces(num_levels, num_test_levels)
    cur = make_curriculum(curriculum, task_space, seed, gamma=gamma, gae_lambda=gae_lambda)
    server = magister.serve(cur)  # magister: the curriculum's endpoint
    env = None
    try:
        env = make_vec_env(env_id, task_space, server.address, num_envs, vec, max_steps)
        if resume:
            server.load_state_dict(magister.load(out / "curriculum.state")["curriculum"])
            model = PPO.load(out / "model.zip", env=env, device="cpu")
            logger.info("resumed from %s at %d steps", out, model.num_timesteps)
        else:
            model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                        learning_rate=learning_rate, gamma=gamma, gae_lambda=gae_lambda, ent_coef=ent_coef,
                        policy_kwargs={"net_arch": [hidden, hidden]}, seed=seed, device="cpu",
                        tensorboard_log=str(out) if tensorboard else None)
        feed = CurriculumCallback(server)  # magister: PLR scores from the rollout buffer, metrics
        ckpt = Checkpoints(out, server, checkpoint_every)
        remaining = max(0, total_steps - model.num_timesteps)
        every = CallbackList([feed, ckpt, Progress(total_steps, progress), *callbacks])
        model.learn(remaining, callback=every, reset_num_timesteps=not resume, tb_log_name="ppo")
        env.close()  # the workers report what they hold before the checkpoint and the server stop
        env = None
        ckpt.save()

        def policy(obs: Any, info: dict[str, Any]) -> Any:
            return model.predict(obs, deterministic=False)[0]

        result = summarise(evaluate_policy(policy, env_id, held_out, episodes=eval_episodes, seed=seed,
                                           max_steps=max_steps))
        metrics, state = server.metrics(), server.state_dict()
    finally:
        if env is not None:
            env.close()
        server.close()
    return {"model": model, "eval": result, "metrics": metrics, "curriculum_state": state,
            "num_feeds": feed.num_feeds, "num_timesteps": int(model.num_timesteps)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``python -m magister.examples.minigrid.sb3_plr --help``."""
    p = argparse.ArgumentParser(prog="python -m magister.examples.minigrid.sb3_plr",
                                description=__doc__.splitlines()[0],
                                epilog="Needs the 'sb3' and 'examples' extras: pip install "
                                       "'magister[sb3,examples]'.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--env-id", default=DEFAULT_ENV)
    p.add_argument("--num-levels", type=int, default=4000, help="training seeds 0 .. N-1")
    p.add_argument("--num-test-levels", type=int, default=100, help="held-out seeds N .. N+M-1")
    p.add_argument("--curriculum", default="plr", choices=CURRICULA)
    p.add_argument("--total-steps", type=lambda s: int(float(s)), default=100_000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--n-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--n-epochs", type=int, default=4, help="PPO epochs (the PLR paper: 4)")
    p.add_argument("--learning-rate", type=float, default=7e-4, help="(the PLR paper: 7e-4)")
    p.add_argument("--max-steps", type=int, default=None, help="MiniGrid's episode step limit")
    p.add_argument("--vec", default="subproc", choices=("subproc", "dummy"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default="runs/minigrid_sb3")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --run-dir")
    p.add_argument("--checkpoint-every", type=lambda s: int(float(s)), default=50_000, help="steps")
    p.add_argument("--eval-episodes", type=int, default=1, help="episodes per held-out seed")
    p.add_argument("--no-tensorboard", dest="tensorboard", action="store_false")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    from magister.examples._cli import require

    require({"tqdm": "examples", "minigrid": "examples",
             **({"tensorboard": "examples"} if args.tensorboard else {})}, p.prog)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = train(args.env_id, num_levels=args.num_levels, num_test_levels=args.num_test_levels,
                   curriculum=args.curriculum, total_steps=args.total_steps, num_envs=args.num_envs,
                   n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.n_epochs,
                   learning_rate=args.learning_rate, max_steps=args.max_steps, vec=args.vec, seed=args.seed,
                   run_dir=args.run_dir, resume=args.resume, checkpoint_every=args.checkpoint_every,
                   eval_episodes=args.eval_episodes, tensorboard=args.tensorboard, progress=args.progress)
    m, ev = result["metrics"], result["eval"]
    logger.info("%d steps; held-out (%d seeds): return %.3f, success %.3f; episodes reported %d, "
                "rollouts scored %d", result["num_timesteps"], args.num_test_levels, ev["eval/return"],
                ev["eval/success"], int(m.get("sync/total/episodes_applied", 0)), result["num_feeds"])
    return result


if __name__ == "__main__":
    main()
