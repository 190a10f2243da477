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
    """``fake_clock(module, monkeypatch)``: give ``module`` (``magister.sync.client`` or
    ``magister.sync.ray_backend``) a :class:`FakeClock` and no background flusher (it would race)."""

    def install(module, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
        c = FakeClock()
        monkeypatch.setattr(module, "_now", c)
        monkeypatch.setattr(module, "_background_flush", False)
        return c

    return install
