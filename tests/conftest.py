"""Shared pytest configuration: hypothesis profiles (CI runs the same example counts, no deadlines)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session", autouse=True)
def _sb3_log_dir(tmp_path_factory: pytest.TempPathFactory):
    """Stable-Baselines3 makes a new ``SB3-<date>`` folder in the system's temporary directory for every
    model it builds without a log folder; the tests' go under pytest's own temporary directory instead."""
    old = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3_logs"))
    yield
    if old is None:
        os.environ.pop("SB3_LOGDIR", None)
    else:
        os.environ["SB3_LOGDIR"] = old


@pytest.fixture(scope="module")
def ray_session(request: pytest.FixtureRequest):
    """One local Ray session per pytest run, shared by the Ray test modules; the requesting module's own
    classes (envs, curricula) travel to Ray workers by value, since workers cannot import ``tests/``."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False
        )
        request.config.add_cleanup(ray.shutdown)
    ray.cloudpickle.register_pickle_by_value(request.module)
    yield
    ray.cloudpickle.unregister_pickle_by_value(request.module)


class FakeClock:
    """Stands in for a sync client module's clock (``_now``); tests move ``t`` by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake_clock():
    """``fake_clock(module, monkeypatch)``: give ``module`` (``magister.sync.feed``, whose clock every
    feed reads) a :class:`FakeClock` and no background flusher (it would race)."""

    def install(module, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
        c = FakeClock()
        monkeypatch.setattr(module, "_now", c)
        monkeypatch.setattr(module, "_background_flush", False)
        return c

    return install
