"""Task metadata as typed fields, end to end: a served TaskFilter over ipc, a sync wrapper, an env that shows
the task it plays in its observation. Control episodes and replay variants are told apart by the fields of
the assignment, never by the shape of the encoded task."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from magister.curricula.task_filter import TaskFilter
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.sync import protocol as P
from magister.sync.zmq_server import serve
from magister.task_spaces.base import task_key
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(120)

VARIANT = 500  # replay_variant(t) = t + VARIANT: proposals are below it, variants above


class ShowTask(gym.Env):
    """Two steps; the observation is the task being played; each step pays 0.25 on a proposal and 0.5 on a
    variant (so a variant replay's return, 1.0, is told apart from a candidate's, 0.5). Action 0 (the
    control policy) never pays."""

    observation_space = spaces.Box(0, 1e9, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.task, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.task], np.float64), {}

    def step(self, action):
        self.t += 1
        pay = (0.5 if self.task >= VARIANT else 0.25) * int(action)
        return np.array([self.task], np.float64), pay, self.t >= 2, False, {}


class ShowTaskWrapper(TaskWrapper):
    def change_task(self, task):
        self.env.unwrapped.task = int(task)


def _is_tag(x) -> bool:
    return isinstance(x, (tuple, list)) or (isinstance(x, str) and x.startswith("magister:"))


def test_served_task_filter_control_and_variant_travel_as_fields(monkeypatch):
    seen: list[P.Message] = []
    decode = P.decode

    def spy(frames, **kw):  # every message either side decodes: the wire in both directions
        msg = decode(frames, **kw)
        seen.append(msg)
        return msg

    monkeypatch.setattr(P, "decode", spy)
    space = Discrete(2 * VARIANT)
    filt = TaskFilter(space, num_episodes=1, return_range=(0.0, 10.0), eval_fraction=0.5, window=50,
                      max_pending=2, propose=lambda rng, n: rng.integers(0, VARIANT, size=n).tolist(),
                      replay_variant=lambda t, rng: int(t) + VARIANT, seed=0)
    episodes = []
    with serve(filt) as server:
        env = GymnasiumSyncWrapper(ShowTaskWrapper(ShowTask(), space), server.address, timeout=20.0)
        try:
            for _ in range(120):
                obs, info = env.reset()
                a = env.assignment
                played = a.task if a.variant is None else a.variant
                assert obs[0] == info["task"] == played  # the env plays the variant when there is one
                assert info["task_control"] is a.control and info["task_train"] is a.train
                if a.control:
                    assert not a.train and info["task"] < VARIANT  # the plain task, flagged
                if a.variant is not None:
                    assert a.train and a.task < VARIANT and a.variant == a.task + VARIANT
                term = False
                while not term:
                    obs, _, term, _, info = env.step(0 if info["task_control"] else 1)
                    assert obs[0] == info["task"] == played and not _is_tag(info["task"])
                episodes.append((a.task, a.control, a.variant))
        finally:
            env.close()
    controls = [e for e in episodes if e[1]]
    variants = [e for e in episodes if e[2] is not None]
    assert controls and variants
    c = filt.counts
    assert c["eval_control_issued"] >= len(controls) and c["replay_variants"] >= len(variants)
    assert c["accepted"] > 0 and c["rejected_control"] == c["rejected_solved"] == 0
    # every variant replay was credited to its accepted task: its window holds agent returns on the task
    # itself (0.5) and one return of 1.0 per replay played on a variant (never a window keyed by a variant)
    assert all(t < VARIANT for t in filt.train_tasks) and all(c.task < VARIANT for c in filt.pending.values())
    credited = 0
    for t in filt.train_tasks:
        window = list(filt._windows[task_key(t)])
        assert window[0] == 0.5 and set(window) <= {0.5, 1.0}
        assert window.count(1.0) == sum(e[0] == t for e in variants)
        credited += window.count(1.0)
        assert filt._control[task_key(t)] == [0.0]  # the control episode was credited as control
    assert credited == len(variants)
    # nothing on the wire is a tag: plain tasks, the flags and variants in fields of their own
    tasks_msgs = [m for m in seen if isinstance(m, P.Tasks)]
    updates = [row for m in seen if isinstance(m, P.Report) for row in m.episodes]
    assert tasks_msgs and updates
    assert not any(_is_tag(t) for m in tasks_msgs for t in m.tasks + m.variants)
    assert any(any(m.control) for m in tasks_msgs)
    assert any(v is not None for m in tasks_msgs for v in m.variants)
    assert not any(_is_tag(row[1]) for row in updates) and all(row[1] < VARIANT for row in updates)
