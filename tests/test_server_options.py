"""ServerOptions: every curriculum-side setting in one frozen object (serve, serve_ray, SyncCore)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister import ServerOptions as TopLevelServerOptions
from magister.curricula.base import Curriculum
from magister.sync import FeedOptions, ServerOptions, SyncCore
from magister.sync.feed import CurriculumClient
from magister.sync.zmq_server import CurriculumServer, serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(60)


class Steps(Curriculum):
    """Samples task 0 and records the sizes of the step batches it is sent."""

    requires_step_updates = True

    def __init__(self) -> None:
        super().__init__(Discrete(3))
        self.sizes: list[int] = []

    def sample(self, k: int = 1) -> list[int]:
        return [0] * k

    def update_on_step_batch(self, batch, env_id=None):
        self.sizes.append(len(batch))


def _play_one_episode(address: str, length: int) -> None:
    client = CurriculumClient(address)
    a = client.next_task()
    for i in range(length):
        client.step_recorder()(a, np.zeros(2, np.float32), 1.0, i == length - 1, False, {}, 0.0)
    client.record_episode(a, float(length), length, 0.0)
    client.close()


def test_the_top_level_export_is_the_same_class():
    assert TopLevelServerOptions is ServerOptions


@pytest.mark.parametrize("make", [
    lambda **kw: ServerOptions.of(**kw),
    lambda **kw: SyncCore(Steps(), **kw),
    lambda **kw: serve(Steps(), **kw),
    lambda **kw: CurriculumServer(Steps(), None, ServerOptions(), **kw),
], ids=["of", "SyncCore", "serve", "CurriculumServer"])
def test_an_unknown_option_raises_naming_it_and_the_known_ones(make):
    with pytest.raises(TypeError, match=r"unknown server option\(s\) \['step_batchsize'\]") as err:
        make(step_batchsize=8)
    assert "'step_batch_size'" in str(err.value) and "'env_timeout'" in str(err.value)


@pytest.mark.parametrize("field, value, expected", [
    ("step_batch_size", 0, "an int >= 1"),
    ("step_batch_size", True, "an int >= 1"),
    ("step_batch_size", 2.0, "an int >= 1"),
    ("max_envs", 0, "an int >= 1"),
    ("keep_departed", -1, "an int >= 0"),
    ("max_tasks_in_flight", 0, "an int >= 1"),
    ("max_message_bytes", 0, "an int >= 1"),
    ("env_timeout", 0, "a finite number of seconds > 0 or None"),
    ("env_timeout", -1.0, "a finite number of seconds > 0 or None"),
    ("env_timeout", math.inf, "a finite number of seconds > 0 or None"),
    ("env_timeout", "60", "a finite number of seconds > 0 or None"),
    ("env_timeout", True, "a finite number of seconds > 0 or None"),
    ("poll_interval", 0, "a positive number of seconds"),
    ("join_timeout", -0.5, "a number of seconds >= 0"),
    ("validate_tasks", "yes", "True or False"),
    ("insecure", 1, "True or False"),
])
def test_a_bad_value_raises_naming_the_field_and_what_is_expected(field, value, expected):
    with pytest.raises(ValueError, match=f"^{field} must be {expected}"):
        ServerOptions(**{field: value})
    with pytest.raises(ValueError, match=f"^{field} must be"):  # through serve() as well, before any socket
        serve(Steps(), **{field: value})


@given(field=st.sampled_from(["step_batch_size", "max_envs", "keep_departed", "max_tasks_in_flight"]),
       value=st.integers(-10**6, 10**6))
def test_count_fields_accept_exactly_the_ints_at_or_above_their_floor(field, value):
    floor = 0 if field == "keep_departed" else 1
    if value >= floor:
        assert getattr(ServerOptions(**{field: value}), field) == value
    else:
        with pytest.raises(ValueError, match=f"{field} must be an int >= {floor}, got {value}"):
            ServerOptions(**{field: value})


def test_overrides_apply_over_an_options_object_which_stays_unchanged():
    base = ServerOptions(step_batch_size=4, env_timeout=30, max_envs=7)
    assert isinstance(base.env_timeout, float) and base.env_timeout == 30.0
    changed = ServerOptions.of(base, max_envs=3, env_timeout=None)
    assert (changed.step_batch_size, changed.max_envs, changed.env_timeout) == (4, 3, None)
    assert (base.max_envs, base.env_timeout) == (7, 30.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.max_envs = 1  # type: ignore[misc]
    with pytest.raises(TypeError, match="options must be a ServerOptions or None, got FeedOptions"):
        ServerOptions.of(FeedOptions())  # type: ignore[arg-type]


def test_sync_core_reads_its_fields_from_options_and_keywords():
    core = SyncCore(Steps(), ServerOptions(step_batch_size=5, keep_departed=0), max_tasks_in_flight=9)
    opts = core.options
    assert (opts.step_batch_size, opts.keep_departed, opts.max_tasks_in_flight) == (5, 0, 9)


def test_serve_with_an_options_object_batches_steps_as_it_says():
    with serve(Steps(), options=ServerOptions(step_batch_size=4, env_timeout=None)) as server:
        assert server.options.env_timeout is None and server.core.heartbeat == 0.0
        _play_one_episode(server.address, 10)
        assert server.curriculum.sizes == [4, 4, 2]


def test_serve_keywords_override_the_options_object():
    opts = ServerOptions(step_batch_size=4, env_timeout=None)
    with serve(Steps(), None, opts, step_batch_size=3) as server:
        assert server.options == dataclasses.replace(opts, step_batch_size=3)
        _play_one_episode(server.address, 7)
        assert server.curriculum.sizes == [3, 3, 1]


def test_serve_keeps_its_defaults():
    """The documented defaults (ServerOptions' docstring, the README's fault table), pinned: a changed
    default fails here."""
    documented = {"step_batch_size": 64, "validate_tasks": True, "max_envs": 65536, "env_timeout": 60.0,
                  "keep_departed": 64, "max_tasks_in_flight": 4096, "curve_secret_key": None,
                  "curve_allowed_clients": None, "insecure": False, "max_message_bytes": 256 * 1024 * 1024,
                  "poll_interval": 1.0, "join_timeout": 5.0}
    with serve(Steps()) as server:
        assert dataclasses.asdict(server.options) == documented
        assert server.core.heartbeat == 15.0  # a quarter of env_timeout


def test_serve_ray_checks_its_options_before_starting_an_actor():
    pytest.importorskip("ray")
    from magister.sync.ray_server import serve_ray

    with pytest.raises(TypeError, match=r"unknown server option\(s\) \['env_timeuot'\]"):
        serve_ray(Steps(), name="never-started", env_timeuot=5)
    with pytest.raises(ValueError, match="env_timeout must be"):
        serve_ray(Steps(), name="never-started", options=ServerOptions.of(), env_timeout=-1)
    with pytest.raises(ValueError, match=r"\['insecure', 'max_message_bytes'\] apply to the ZeroMQ server"):
        serve_ray(Steps(), name="never-started", insecure=True, max_message_bytes=1024)
