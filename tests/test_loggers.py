"""Tests of the curriculum-metrics logging helpers (magister.integrations.loggers)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from magister.curricula.domain_randomization import DomainRandomization
from magister.curricula.plr import PLR
from magister.integrations.loggers import (
    MetricsLogger,
    flatten_metrics,
    log_curriculum_metrics,
    summary_writer,
    top_tasks,
)
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete


class _Writer:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, int]] = []

    def add_scalar(self, tag, value, step):
        self.rows.append((tag, value, step))


class _Run:
    def __init__(self) -> None:
        self.calls: list[tuple[dict, int]] = []

    def log(self, data, step=None):
        self.calls.append((dict(data), step))


def _fake_wandb(monkeypatch, run=None):
    """Inject a fake ``wandb`` module (wandb is not installed here)."""
    mod = types.ModuleType("wandb")
    mod.run = run
    mod.init_calls = []

    def init(**kw):
        mod.init_calls.append(kw)
        mod.run = _Run()
        return mod.run

    mod.init = init
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return mod


def _no_wandb(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError


def _scored_plr() -> PLR:
    plr = PLR(Discrete(4), score="value_l1", replay_prob=0.5, seed=0)
    plr.sample(40)
    plr.update_scores([0, 1, 2, 3], [0.1, 4.0, 0.2, 0.3])
    return plr


# -- flatten / log ----------------------------------------------------------------------------------


def test_flatten_nested_and_types():
    flat = flatten_metrics({"a": 1, "b": {"c": True, "d": {"e": np.float32(0.25)}}, "f": np.array(3)})
    assert flat == {"a": 1.0, "b/c": 1.0, "b/d/e": 0.25, "f": 3.0}
    assert all(type(v) is float for v in flat.values())


@pytest.mark.parametrize("bad, match", [
    ({"a": "text"}, "metric 'a' must be a number"),
    ({"a": {"b": [1, 2]}}, "metric 'a/b' must be a number"),
    ({1: 2.0}, "metric names must be str"),
])
def test_flatten_rejects_non_numbers(bad, match):
    with pytest.raises(TypeError, match=match):
        flatten_metrics(bad)
    with pytest.raises(TypeError, match="must be a dict"):
        flatten_metrics([("a", 1)])


@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s),
                       st.floats(allow_nan=False, allow_infinity=False), max_size=10))
def test_flatten_flat_dict_is_identity(d):
    assert flatten_metrics(d) == {k: float(v) for k, v in d.items()}


def test_log_writes_every_metric_to_both_sinks():
    w, run = _Writer(), _Run()
    flat = log_curriculum_metrics({"x": 1, "y": {"z": 2.5}}, 7, tb_writer=w, wandb_run=run, prefix="cur/")
    assert flat == {"cur/x": 1.0, "cur/y/z": 2.5}
    assert w.rows == [("cur/x", 1.0, 7), ("cur/y/z", 2.5, 7)]
    assert run.calls == [({"cur/x": 1.0, "cur/y/z": 2.5}, 7)]


def test_log_step_checks():
    with pytest.raises(TypeError, match="step must be an int"):
        log_curriculum_metrics({"x": 1}, 1.5)
    with pytest.raises(ValueError, match="step must be >= 0"):
        log_curriculum_metrics({"x": 1}, -1)


def test_top_tasks():
    assert top_tasks([0.1, 0.6, 0.3], ["a", "b", "c"], 2) == [("b", 0.6), ("c", 0.3)]
    assert top_tasks([0.5, 0.5], [0, 1], 5) == [(0, 0.5), (1, 0.5)]  # ties: lower index first
    with pytest.raises(ValueError, match="2 entries but there are 3 tasks"):
        top_tasks([0.5, 0.5], [0, 1, 2], 1)
    with pytest.raises(ValueError, match="non-negative int"):
        top_tasks([1.0], [0], -1)


# -- MetricsLogger ----------------------------------------------------------------------------------


def test_metrics_logger_tensorboard_event_file(tmp_path, monkeypatch):
    _no_wandb(monkeypatch)
    plr = _scored_plr()
    with MetricsLogger(plr, tmp_path, top_k=2) as mlog:
        assert mlog.wandb_run is None
        first = mlog.log(0)
        plr.update_scores([0], [9.0])
        mlog.log(10)
    # PLR's metrics plus the top tasks: task 1 has the highest score (rank prioritisation)
    assert first["curriculum/top/0/task"] == 1.0
    dist = plr.distribution()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"plr/buffer_size", "plr/replay_entropy", "curriculum/sampled", "curriculum/top/0/prob",
            "curriculum/top/0/task", "curriculum/top/1/prob"} <= tags
    assert "curriculum/top/2/prob" not in tags
    top = acc.Scalars("curriculum/top/0/task")
    assert [e.step for e in top] == [0, 10]
    assert [e.value for e in top] == [1.0, 0.0]  # after the update task 0 leads
    assert acc.Scalars("curriculum/top/0/prob")[-1].value == pytest.approx(dist.max(), rel=1e-6)
    assert acc.Scalars("plr/buffer_size")[0].value == 4.0


def test_metrics_logger_with_server_counters_and_per_env_filter():
    plr = _scored_plr()
    with serve(plr) as server:
        server.core.register_env()  # one env connected: its counters appear
        w = _Writer()
        flat = MetricsLogger(server, tb_writer=w, use_wandb=False, per_env=False).log(3)
        assert "sync/total/tasks_sent" in flat and "sync/envs" in flat
        assert not any(k.startswith("sync/env0/") for k in flat)
        flat_all = MetricsLogger(server, tb_writer=w, use_wandb=False).log(4)
        assert flat_all["sync/env0/tasks_sent"] == 0.0
        assert {tag for tag, _, step in w.rows if step == 4} == set(flat_all)


def test_metrics_logger_without_distribution_logs_metrics_only():
    class NoDist(DomainRandomization):
        def distribution(self):
            raise NotImplementedError

    w = _Writer()
    flat = MetricsLogger(NoDist(Discrete(3)), tb_writer=w, use_wandb=False).log(0)
    assert not any(k.startswith("curriculum/top/") for k in flat)
    assert flat["curriculum/sampled"] == 0.0


def test_metrics_logger_wandb_auto_uses_active_run(monkeypatch):
    run = _Run()
    _fake_wandb(monkeypatch, run=run)
    mlog = MetricsLogger(_scored_plr(), top_k=1)
    assert mlog.wandb_run is run
    flat = mlog.log(5)
    assert run.calls == [(flat, 5)]
    assert "curriculum/top/0/prob" in run.calls[0][0]


def test_metrics_logger_wandb_auto_without_run_or_package(monkeypatch):
    _fake_wandb(monkeypatch, run=None)
    assert MetricsLogger(_scored_plr()).wandb_run is None  # installed, no active run: skip
    _no_wandb(monkeypatch)
    assert MetricsLogger(_scored_plr()).wandb_run is None
    with pytest.raises(RuntimeError, match="wandb package is not installed"):
        MetricsLogger(_scored_plr(), use_wandb=True)


def test_metrics_logger_wandb_true_starts_a_run(monkeypatch):
    mod = _fake_wandb(monkeypatch, run=None)
    mlog = MetricsLogger(_scored_plr(), use_wandb=True, wandb_init={"project": "p"})
    assert mod.init_calls == [{"project": "p"}]
    mlog.log(1)
    assert mod.run.calls and mod.run.calls[0][1] == 1


def test_metrics_logger_argument_checks(tmp_path):
    with pytest.raises(TypeError, match="metrics"):
        MetricsLogger(object())
    with pytest.raises(ValueError, match="use_wandb"):
        MetricsLogger(_scored_plr(), use_wandb="yes")
    with pytest.raises(ValueError, match="top_k"):
        MetricsLogger(_scored_plr(), top_k=-1, use_wandb=False)
    with pytest.raises(ValueError, match="not both"):
        MetricsLogger(_scored_plr(), tmp_path, tb_writer=_Writer(), use_wandb=False)


def test_summary_writer_without_tensorboardx_or_torch_names_what_to_install(tmp_path, monkeypatch):
    for name in ("tensorboardX", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # (an import of it raises ImportError)
    with pytest.raises(ImportError, match="pip install tensorboardX"):
        summary_writer(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()
