"""RLlib integration: the env creator, the callbacks, and a short PPO run (new API stack) on CartPole with the
curriculum in a Ray actor.

Shares the Ray session with ``test_ray_backend.py`` (started once, shut down when pytest ends).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")

from magister.curricula.expanding_box import ExpandingBox  # noqa: E402
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper  # noqa: E402
from magister.examples.cartpole import default_task_space  # noqa: E402
from magister.examples.rllib_cartpole import make_curriculum, make_task_env, train  # noqa: E402
from magister.integrations.rllib import (  # noqa: E402
    MagisterCallbacks,
    magister_callbacks,
    make_env_creator,
    result_metrics,
)
from magister.sync.ray_server import RayClient, serve_ray  # noqa: E402

pytestmark = [pytest.mark.timeout(240)]


class RecordingBox(ExpandingBox):
    """ExpandingBox that keeps the learner-side payloads it receives."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.demands: list[dict] = []

    def update_on_demand(self, metrics):
        self.demands.append(dict(metrics))

    def received(self):
        return self.demands

    def metrics(self):
        out = super().metrics()
        out["recording/demands"] = float(len(self.demands))
        return out


# -- pieces, without training ---------------------------------------------------------------------------


def test_result_metrics_keeps_finite_numbers_only():
    import numpy as np

    result = {
        "training_iteration": 3,
        "env_runners": {"episode_return_mean": np.float32(21.5), "hist": [1, 2], "nan": float("nan")},
        "done": False,
        "name": "x",
        "deep": {"a": {"b": np.int64(7)}},
    }
    assert result_metrics(result) == {
        "training_iteration": 3.0,
        "env_runners/episode_return_mean": 21.5,
        "deep/a/b": 7.0,
    }


def test_make_env_creator_wraps_and_validates():
    creator = make_env_creator(make_task_env, "ray://ns/cur", prefetch=2, timeout=3.0)
    env = creator({"worker_index": 1})
    assert isinstance(env, GymnasiumSyncWrapper)
    feed = env.feed  # created lazily, not yet connected
    assert isinstance(feed, RayClient)
    assert (feed.actor_name, feed.namespace, feed.prefetch, feed.options.timeout) == ("cur", "ns", 2, 3.0)
    assert feed.env_id is None
    with pytest.raises(TypeError, match="callable"):
        make_env_creator("CartPole-v1", "ray://cur")
    with pytest.raises(TypeError, match="str"):
        make_env_creator(make_task_env, None)
    with pytest.raises(ValueError, match="ray://"):
        make_env_creator(make_task_env, "ray://")
    with pytest.raises(ValueError, match="address"):
        make_env_creator(make_task_env, "my_curriculum")
    with pytest.raises(ValueError, match="register_as"):
        make_env_creator(make_task_env, "ray://cur", register_as="")
    bad = make_env_creator(lambda cfg: "not an env", "ray://cur")
    with pytest.raises(TypeError, match="gymnasium.Env"):
        bad({})


def test_magister_callbacks_validates():
    with pytest.raises(ValueError, match="ray://"):
        magister_callbacks("tcp://127.0.0.1:5555")
    with pytest.raises(TypeError, match="metrics_fn"):
        magister_callbacks("ray://cur", metrics_fn=3)
    cls = magister_callbacks("ray://cur", timeout=2.0)
    assert issubclass(cls, MagisterCallbacks) and cls.address == "ray://cur" and cls.timeout == 2.0
    with pytest.raises(ValueError, match="no curriculum address"):
        MagisterCallbacks().on_train_result(algorithm=None, result={})


def test_callback_sends_results_to_the_curriculum(ray_session):
    cur = RecordingBox(default_task_space(0), start_low=0.0, start_high=0.05, duration=10)
    with serve_ray(cur, name="magister_test_rllib_callback") as server:
        cb = magister_callbacks(server.address)()
        result = {
            "training_iteration": 1,
            "env_runners": {"episode_return_mean": 20.0, "sample_timer": 0.1, "env_step_timer": 0.2},
            "perf": {"cpu": 9.0},
        }
        cb.on_train_result(algorithm=None, result=result)
        assert result["magister"]["expanding_box/high_0"] == pytest.approx(0.05)
        custom = magister_callbacks(server.address, metrics_fn=lambda r: {"success_rates": {(0.1,): 0.5}})()
        custom.on_train_result(algorithm=None, result={"training_iteration": 2})
        custom.on_train_result(algorithm=None, result={"training_iteration": 3})
        assert server.call("received") == [
            {"training_iteration": 1.0, "env_runners/episode_return_mean": 20.0},  # no perf/ or timers
            {"success_rates": {(0.1,): 0.5}},
            {"success_rates": {(0.1,): 0.5}},
        ]


# -- a short PPO run -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ppo_trains_with_the_curriculum_actor(ray_session):
    # 2 iterations of 128 steps; the range reaches the full box after 150 finished-episode steps
    space = default_task_space(0)
    cur = RecordingBox(space, start_low=0.0, start_high=0.05, duration=150, unit="steps", seed=0)
    out = train(
        2,
        envs_per_runner=1,
        batch_size=128,
        minibatch_size=64,
        num_epochs=1,
        name="magister_test_rllib_ppo",
        curriculum=cur,
    )
    rows, m = out["rows"], out["metrics"]
    assert len(rows) == 2
    # the curriculum actor received the episodes and widened its range
    assert m["curriculum/episodes"] >= 5
    assert rows[0]["range_high"] > 0.05
    assert rows[1]["range_high"] >= rows[0]["range_high"]
    assert m["expanding_box/high_0"] == pytest.approx(0.2)
    assert rows[0]["curriculum_episodes"] <= rows[1]["curriculum_episodes"] <= m["curriculum/episodes"]
    # exactly-once accounting once the env runner closed its envs
    assert m["sync/total/tasks_in_flight"] == 0
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
    ended, cut_short = m["sync/total/episodes_applied"], m["sync/total/episodes_abandoned"]
    assert ended + cut_short == m["sync/total/tasks_consumed"]
    assert m["sync/total/updates_rejected"] == 0 and m["sync/errors_sent"] == 0
    assert m["sync/total/tasks_sampled"] == m["curriculum/sampled"]
    # the callback sent each iteration's training results
    assert m["recording/demands"] == 2
    assert all(0.0 <= r["task_progress"] <= 1.0 for r in rows)  # logged by the callback on the env runner


def test_make_curriculum_schedule():
    cur = make_curriculum(1000, expand_fraction=0.5)
    assert cur.duration == 500 and cur.unit == "steps"
    lo, hi = cur.current_range()
    assert (float(lo[0]), float(hi[0])) == (0.0, 0.05)
    for _ in range(10):
        cur.update_on_episode(10.0, 25, (0.01,), 0.05)
    assert float(cur.current_range()[1][0]) == pytest.approx(0.05 + 0.5 * 0.15)
    with pytest.raises(ValueError, match="expand_fraction"):
        make_curriculum(1000, expand_fraction=0.0)
    with pytest.raises(ValueError, match="total_steps"):
        make_curriculum(0)
