"""The connect handshake checks the env's task space against the curriculum's, on every transport.

A worker built with another task space (other levels, another order, a split that renumbers its tasks)
would decode the curriculum's encoded tasks to other tasks and play them under the wrong label; the hello
carries the fingerprint of the env's space and a mismatch is refused at connect, naming both spaces.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister import GymnasiumSyncWrapper, serve
from magister.curricula.domain_randomization import DomainRandomization
from magister.examples.cartpole import CartPoleTask
from magister.sync.feed import CurriculumClient, SyncError, connect
from magister.task_spaces.base import fingerprint_digest
from magister.task_spaces.box import Box
from magister.task_spaces.config import ConfigSpace
from magister.task_spaces.discrete import Discrete
from magister.task_spaces.multi_discrete import MultiDiscrete
from magister.task_spaces.product import Product


def test_equal_spaces_agree_and_different_encodings_differ():
    assert Discrete(5).fingerprint() == Discrete(5, seed=9).fingerprint()
    assert Discrete(tasks=["a", "b"]).fingerprint() != Discrete(tasks=["b", "a"]).fingerprint()
    assert Box(0, 1, shape=(2,)).fingerprint() != Box(0, 2, shape=(2,)).fingerprint()
    assert MultiDiscrete([2, 3]).fingerprint() != MultiDiscrete([3, 2]).fingerprint()
    p = Product({"a": Discrete(2), "b": Box(0, 1, shape=(1,))})
    assert p.fingerprint() == Product({"a": Discrete(2), "b": Box(0, 1, shape=(1,))}).fingerprint()
    assert p.fingerprint() != Product({"b": Discrete(2), "a": Box(0, 1, shape=(1,))}).fingerprint()
    # a split of a discrete space renumbers its tasks: not the parent's encoding
    train, held = Discrete(10).split(holdout=0.3, seed=0)
    assert train.fingerprint() != Discrete(10).fingerprint() != held.fingerprint()
    # a config space's split keeps the parent's encoding (value indices): the same fingerprint
    space = ConfigSpace({"size": [3, 4, 5], "shuffle": [1, 2]}, seed=0)
    train = space.split(holdout=0.5, seed=0)[0]
    assert fingerprint_digest(train.fingerprint()) == fingerprint_digest(space.fingerprint())


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=6, unique=True), st.integers(1, 3))
def test_discrete_fingerprints_depend_on_the_tasks_and_their_order(tasks, rotate):
    a = Discrete(tasks=tasks)
    b = Discrete(tasks=tasks[rotate % len(tasks):] + tasks[: rotate % len(tasks)])
    assert (a.fingerprint() == b.fingerprint()) == (a.tasks == b.tasks)


class _Level:  # decoded tasks whose repr holds a memory address
    def __init__(self, k: int) -> None:
        self.k = k


def test_a_repr_with_a_memory_address_does_not_change_the_fingerprint():
    levels = [_Level(0), _Level(1)]
    again = [_Level(0), _Level(1)]
    assert Discrete(tasks=levels).fingerprint() == Discrete(tasks=again).fingerprint()


CURRICULUM_SPACE = Box(0.01, 0.2, shape=(1,))
OTHER_SPACE = Box(0.01, 0.3, shape=(1,))


@pytest.mark.parametrize("transport", ["in-process", "server-object", "ipc", "tcp"])
def test_a_worker_with_another_task_space_is_refused_at_connect(transport):
    curriculum = DomainRandomization(CURRICULUM_SPACE, seed=0)
    server = None
    if transport == "in-process":
        source = curriculum
    else:
        server = serve(curriculum, "tcp://127.0.0.1:*" if transport == "tcp" else None)
        source = server if transport == "server-object" else server.address
    try:
        env = GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), OTHER_SPACE), source, timeout=10)
        refused = r"task space Box\(low=0.01, high=0.3.*curriculum's task space Box"
        with pytest.raises(SyncError, match=refused):
            env.reset(seed=0)
        env.close()
        ok = GymnasiumSyncWrapper(CartPoleTask(gym.make("CartPole-v1"), CURRICULUM_SPACE), source)
        _, info = ok.reset(seed=0)
        assert CURRICULUM_SPACE.contains_encoded(info["task"])
        ok.close()
        if server is not None:
            assert server.metrics()["sync/envs"] == 1  # the refused env never registered
    finally:
        if server is not None:
            server.close()


def test_a_client_without_a_task_space_is_not_checked():
    with serve(DomainRandomization(CURRICULUM_SPACE, seed=0)) as server:
        feed = connect(server.address, prefetch=0)
        assert isinstance(feed, CurriculumClient) and feed.next_task().task_id >= 0
        feed.close()
