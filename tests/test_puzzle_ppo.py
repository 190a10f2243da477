"""The puzzle PPO trainer: arguments, a short run in-process and across worker processes, resume, outputs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import magister
from magister.examples import puzzle_ppo
from magister.examples._checkpoint import read_checkpoint
from magister.examples.puzzle_ppo import Args, parse_args, train

TINY = dict(puzzle="flip", size="3x3c", total_steps=512, num_envs=4, num_steps=32, max_steps=12,
            train_seeds=10, eval_seeds=2, eval_every=2, checkpoint_every=2, hidden=32, progress=False,
            tensorboard=True)


def _same(a, b) -> bool:
    """Equal as plain data, NaN equal to NaN (the checkpoint format writes equal values as equal bytes)."""
    return magister.checkpoint.dumps(a) == magister.checkpoint.dumps(b)


def test_parse_args_types_and_defaults():
    args = parse_args(["--total-steps", "2e3", "--curriculum", "dr", "--no-tensorboard",
                       "--params", "3x3cp1", "3x3cp2", "--extra", '{"foo": 1}'])
    assert args.total_steps == 2000 and isinstance(args.total_steps, int)
    assert args.curriculum == "dr" and args.tensorboard is False
    assert args.params == ("3x3cp1", "3x3cp2")
    assert args.extra == {"foo": 1}
    assert parse_args([]).gamma == Args().gamma


def test_help_lists_options():
    res = subprocess.run([sys.executable, "-m", "magister.examples.puzzle_ppo", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    assert "--curriculum" in res.stdout and "--total-steps" in res.stdout
    assert "instances per difficulty used for training" in res.stdout  # field docs reach --help


def test_unknown_curriculum_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown curriculum 'nope'"):
        train(Args(**{**TINY, "curriculum": "nope", "run_dir": str(tmp_path)}))


def test_short_run_in_process_writes_everything(tmp_path):
    args = Args(**{**TINY, "curriculum": "dr", "run_dir": str(tmp_path)})
    result = train(args)
    run = tmp_path / "flip_dr_s0"
    assert (run / "checkpoint.pt").exists() and (run / "checkpoint.state").exists()
    assert (run / "curriculum.png").stat().st_size > 1000
    assert any(p.name.startswith("events.out.tfevents") for p in run.iterdir())
    assert result.global_step == 512
    assert len(result.history) == 512 // (4 * 32)
    assert set(result.eval) == set(puzzle_ppo.difficulties(args))  # every difficulty evaluated
    for r in result.eval.values():  # each difficulty's success is the mean of its episodes' outcomes
        assert r["instances"] and set(r["instances"]) <= {0.0, 1.0}
        assert r["success"] == pytest.approx(np.mean(r["instances"]))
        solved = r["solved_length"]
        assert (np.isnan(solved) if r["success"] == 0.0 else 1 <= solved <= TINY["max_steps"])
    assert sum(result.episodes_per_difficulty.values()) > 0
    # neither file runs code when loaded: tensors with torch.load's default (weights_only=True, which the
    # file needs no exception for), everything else with magister.load
    assert torch.serialization.get_unsafe_globals_in_checkpoint(run / "checkpoint.pt") == []
    tensors = torch.load(run / "checkpoint.pt")
    assert set(tensors) == {"agent", "optimizer"}
    assert all(isinstance(v, torch.Tensor) for v in tensors["agent"].values())
    assert tensors["optimizer"]["state"][0]["step"].item() > 0  # Adam's moments and step count are in
    state = magister.load(run / "checkpoint.state")
    assert state["curriculum"]["num_episodes"] > 0  # the curriculum received the episodes
    assert state["update"] == 4 and state["global_step"] == 512
    assert _same(state["history"], result.history) and state["args"]["curriculum"] == "dr"


def test_resume_continues_from_checkpoint(tmp_path):
    first = train(Args(**{**TINY, "curriculum": "sfl", "run_dir": str(tmp_path), "run_name": "a"}))
    ckpt_path = tmp_path / "a" / "checkpoint.pt"
    before = read_checkpoint(ckpt_path)
    resumed = train(Args(**{**TINY, "curriculum": "sfl", "run_dir": str(tmp_path), "run_name": "b",
                            "total_steps": 1024, "resume": str(ckpt_path)}))
    assert resumed.global_step == 1024
    assert len(resumed.history) == len(first.history) + 4  # history carried over, 4 more updates
    assert _same(resumed.history[:len(first.history)], first.history)
    after = read_checkpoint(tmp_path / "b" / "checkpoint.pt")
    assert after["curriculum"]["num_episodes"] > before["curriculum"]["num_episodes"]
    # the checkpoint decides the continuation: a second resume from it trains the same weights, history
    # and curriculum state
    again = train(Args(**{**TINY, "curriculum": "sfl", "run_dir": str(tmp_path), "run_name": "c",
                          "total_steps": 1024, "resume": str(ckpt_path), "plot": False,
                          "tensorboard": False}))
    assert _same(again.history, resumed.history)
    twin = read_checkpoint(tmp_path / "c" / "checkpoint.pt")
    assert all(torch.equal(twin["agent"][k], after["agent"][k]) for k in after["agent"])
    assert _same(twin["curriculum"], after["curriculum"])


def test_worker_processes_through_the_sync_layer(tmp_path):
    args = Args(**{**TINY, "curriculum": "sfl", "vector": "async", "num_envs": 2, "total_steps": 256,
                   "run_dir": str(tmp_path), "plot": False, "tensorboard": False})
    result = train(args)
    ckpt = magister.load(tmp_path / "flip_sfl_s0" / "checkpoint.state")
    assert result.global_step == 256
    # the workers closed (and sent their held feedback) before the last checkpoint: no episode is missing
    assert ckpt["curriculum"]["num_episodes"] == sum(result.episodes_per_difficulty.values())
    assert ckpt["curriculum"]["num_episodes"] > 0
