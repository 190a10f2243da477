"""The bundled trainers' checkpoint pair (magister.examples._checkpoint): tensors that ``torch.load`` reads
with its default ``weights_only=True`` plus a :func:`magister.save` state file; loading runs no code from
either, a resumed optimiser continues exactly, and a pair from two different saves is refused."""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest
import torch
import torch.nn as nn

import magister
from magister.checkpoint import CheckpointError
from magister.curricula import DomainRandomization
from magister.examples import _checkpoint
from magister.examples._checkpoint import read_checkpoint, state_path, write_checkpoint
from magister.task_spaces import Discrete

OPTIMIZERS = {
    "Adam": lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-5),
    "Adam-amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.5, centered=True),
}


def test_module_doctest():
    assert doctest.testmod(_checkpoint, optionflags=doctest.ELLIPSIS).failed == 0


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _step(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(16, 4, generator=g), torch.randn(16, 2, generator=g)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_resumed_policy_optimiser_and_curriculum_continue_exactly(name, tmp_path):
    model, cur = _model(0), DomainRandomization(Discrete(50), seed=3)
    opt = OPTIMIZERS[name](model.parameters())
    for i in range(3):
        _step(model, opt, i)
    cur.sample(7)
    path = tmp_path / "checkpoint.pt"
    write_checkpoint(path, {"agent": model.state_dict(), "optimizer": opt.state_dict()},
                     {"curriculum": cur.state_dict(), "update": 3, "history": [{"loss": float("nan")}]})
    # each file loads on its own, without running code: torch's default weights_only=True and magister.load
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
    assert set(torch.load(path)) == {"agent", "optimizer"}
    assert magister.load(state_path(path))["update"] == 3

    model2, cur2 = _model(1), DomainRandomization(Discrete(50), seed=99)  # other seeds: the files decide
    opt2 = OPTIMIZERS[name](model2.parameters())
    ckpt = read_checkpoint(path)
    model2.load_state_dict(ckpt["agent"])
    opt2.load_state_dict(ckpt["optimizer"])
    cur2.load_state_dict(ckpt["curriculum"])
    assert ckpt["update"] == 3 and np.isnan(ckpt["history"][0]["loss"])
    for i in range(3, 6):  # (a lost step count or moment would change Adam's and RMSprop's steps)
        _step(model, opt, i)
        _step(model2, opt2, i)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True))
    assert cur2.sample(20) == cur.sample(20)


def test_a_stop_between_the_two_writes_leaves_a_pair_that_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    write_checkpoint(path, {"agent": {"w": torch.zeros(3)}}, {"update": 1})
    real = _checkpoint.write_atomic

    def stop_before_state(target, data):
        if target.suffix == ".state":
            raise KeyboardInterrupt  # the run is stopped after the tensor file was replaced
        real(target, data)

    monkeypatch.setattr(_checkpoint, "write_atomic", stop_before_state)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(path, {"agent": {"w": torch.ones(3)}}, {"update": 2})
    assert torch.load(path)["agent"]["w"].tolist() == [1.0, 1.0, 1.0]  # new tensors, old state
    assert magister.load(state_path(path))["update"] == 1
    with pytest.raises(CheckpointError, match="not from the same save"):
        read_checkpoint(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "checkpoint.state"]  # no temp left


def test_files_of_two_saves_are_refused(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    write_checkpoint(a, {"agent": {"w": torch.zeros(2)}}, {"update": 5})
    write_checkpoint(b, {"agent": {"w": torch.ones(2)}}, {"update": 5})
    state_path(b).replace(state_path(a))
    with pytest.raises(CheckpointError, match="not from the same save"):
        read_checkpoint(a)


def test_the_state_file_path_names_the_pair_too(tmp_path):
    path = tmp_path / "run" / "checkpoint.pt"
    path.parent.mkdir()
    write_checkpoint(path, {"agent": {"w": torch.arange(3.0)}}, {"update": 7})
    assert read_checkpoint(state_path(path))["update"] == 7
    with pytest.raises(ValueError, match="ends in .state"):
        write_checkpoint(state_path(path), {"agent": {}}, {"update": 8})


def test_an_old_single_file_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"agent": {"w": torch.zeros(1)}, "curriculum": {"counts": np.zeros(3)}}, path)
    with pytest.raises(FileNotFoundError, match="no state file .*checkpoint.state"):
        read_checkpoint(path)


RAN: list[str] = []


def _payload() -> None:
    RAN.append("payload")


class _Hostile:
    def __reduce__(self):
        return (_payload, ())


def test_a_hostile_tensor_file_runs_no_code_even_with_a_matching_state_file(tmp_path):
    """Whoever wrote the pair can make the state file record the hostile file's hash: the tensor file is
    still read with weights_only=True, which refuses the function it names instead of calling it."""
    import hashlib

    path = tmp_path / "checkpoint.pt"
    torch.save({"agent": _Hostile()}, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    magister.save(state_path(path), {"update": 1, "tensors_sha256": digest})
    with pytest.raises(pickle.UnpicklingError):
        read_checkpoint(path)
    assert RAN == []


def test_nothing_is_written_for_state_or_tensors_that_would_not_load(tmp_path):
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(TypeError, match=r"state\['curriculum'\]: a function"):
        write_checkpoint(path, {"agent": {"w": torch.zeros(1)}}, {"curriculum": lambda: 0})
    with pytest.raises(ValueError, match="weights_only=True"):
        write_checkpoint(path, {"agent": {"w": torch.zeros(1)}, "extra": _Hostile()}, {"update": 0})
    assert RAN == [] and list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"keys \['update'\] are in both"):
        write_checkpoint(path, {"update": torch.zeros(1)}, {"update": 0})
