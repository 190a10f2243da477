"""Curricula protect themselves: every public method runs under the curriculum's own re-entrant lock.

A curriculum served by :func:`magister.serve` is updated by the server's thread while the learner reads
``distribution()`` / ``metrics()`` / ``state_dict()`` on the object it holds; these tests race the two.
"""

from __future__ import annotations

import copy
import inspect
import logging
import pickle
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import magister.curricula as C
from magister.curricula import (
    PLR,
    SFL,
    Curriculum,
    DomainRandomization,
    LearningProgress,
    Sequential,
)
from magister.curricula.base import _LOCKED_MARK
from magister.task_spaces import Discrete

logger = logging.getLogger(__name__)

RLOCK_TYPE = type(threading.RLock())


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every 10 µs so that an unprotected read meets a half-done update quickly."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


# -- the race ---------------------------------------------------------------------------------------------


def _plr() -> PLR:
    return PLR(Discrete(64), score="max_mc", buffer_size=16, replay_prob=0.5, seed=0)


def _lp() -> LearningProgress:
    return LearningProgress(Discrete(64), update_period=1, seed=0)


def _sfl() -> SFL:
    return SFL(Discrete(64), batch_size=16, seed=0)


def _updater(cur: Curriculum, n_updates: int, errors: list[BaseException], done: threading.Event) -> None:
    """Feed ``cur`` through its public doors, as a server thread would."""
    rng = np.random.default_rng(1)
    try:
        i = 0
        while i < n_updates:
            for task in cur.sample(4):
                cur.update_on_episode(float(rng.normal()), 10, task, float(rng.random()))
                if isinstance(cur, LearningProgress | SFL):
                    cur.update_task_progress(task, float(rng.random()))
                if isinstance(cur, PLR):
                    cur.update_scores([task], [float(rng.random())])
                i += 1
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        errors.append(e)
    finally:
        done.set()


@pytest.mark.parametrize("make", [_plr, _lp, _sfl], ids=["PLR", "LearningProgress", "SFL"])
def test_reads_race_updates_safely(make: Callable[[], Curriculum], fast_switching: None) -> None:
    cur = make()
    errors: list[BaseException] = []
    done = threading.Event()
    thread = threading.Thread(target=_updater, args=(cur, 15000, errors, done), daemon=True)
    thread.start()
    reads = 0
    deadline = time.monotonic() + 60.0
    try:
        while (not done.is_set() or reads < 2000) and time.monotonic() < deadline:
            p = cur.distribution()
            assert abs(float(p.sum()) - 1.0) < 1e-9, f"read {reads}: distribution sums to {p.sum()!r}"
            assert (p >= 0).all()
            m = cur.metrics()
            assert all(np.isfinite(v) for v in m.values()), m
            cur.state_dict()
            reads += 1
    finally:
        done.wait(60.0)
        thread.join(10.0)
    assert not errors, errors
    assert not thread.is_alive()
    logger.info("%s: %d reads raced the updates", type(cur).__name__, reads)
    assert reads >= 2000


def test_nested_curricula_do_not_deadlock(fast_switching: None) -> None:
    """A server thread drives the outer curriculum while the learner reads the outer and the inner."""
    space = Discrete(32)
    inner = PLR(space, score="max_mc", buffer_size=8, seed=0)
    outer = Sequential([inner, DomainRandomization(space)], ["episodes>=1000000"], space)
    errors: list[BaseException] = []
    done = threading.Event()
    thread = threading.Thread(target=_updater, args=(outer, 3000, errors, done), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60.0
    while not done.is_set() and time.monotonic() < deadline:
        with outer.lock:  # the learner makes several reads atomic
            outer.metrics()
            inner.distribution()
        assert abs(float(inner.distribution().sum()) - 1.0) < 1e-9
        outer.state_dict()
    thread.join(10.0)
    assert done.is_set() and not thread.is_alive(), "deadlock between the outer and the inner curriculum"
    assert not errors, errors


# -- the lock itself --------------------------------------------------------------------------------------


def test_lock_is_a_public_read_only_rlock() -> None:
    cur = DomainRandomization(Discrete(3))
    assert isinstance(cur.lock, RLOCK_TYPE)
    assert cur.lock is cur.lock
    assert DomainRandomization(Discrete(3)).lock is not cur.lock
    with pytest.raises(AttributeError):
        cur.lock = threading.RLock()  # type: ignore[misc]
    with cur.lock:  # re-entrant: the methods take it again inside
        assert cur.metrics()["curriculum/sampled"] == 0.0
        cur.sample(2)


def test_public_methods_block_while_another_thread_holds_the_lock() -> None:
    cur = _plr()
    cur.sample(3)
    finished = threading.Event()

    def read() -> None:
        cur.distribution()
        finished.set()

    with cur.lock:
        t = threading.Thread(target=read, daemon=True)
        t.start()
        assert not finished.wait(0.2), "distribution() ran while another thread held the lock"
    assert finished.wait(10.0)
    t.join(10.0)


def test_lock_exists_before_super_init_and_new_subclass_methods_are_locked() -> None:
    class Early(Curriculum):
        def __init__(self, space: Discrete) -> None:
            self.seen_lock = self.lock  # before Curriculum.__init__
            self.calls = self.count()  # a public method, before Curriculum.__init__
            super().__init__(space)

        def count(self) -> int:
            assert self.lock._is_owned()  # type: ignore[attr-defined]
            return 1

        def sample(self, k: int = 1) -> list[Any]:
            return [0] * k

        @property
        def prop(self) -> int:
            return 2

        @staticmethod
        def static() -> int:
            return 3

        @classmethod
        def klass(cls) -> int:
            return 4

    cur = Early(Discrete(2))
    assert cur.seen_lock is cur.lock and cur.calls == 1
    assert getattr(Early.__dict__["count"], _LOCKED_MARK, False)
    assert getattr(Early.__dict__["sample"], _LOCKED_MARK, False)
    assert isinstance(Early.__dict__["prop"], property)
    assert isinstance(Early.__dict__["static"], staticmethod) and Early.static() == 3
    assert isinstance(Early.__dict__["klass"], classmethod) and Early.klass() == 4
    assert cur.prop == 2


def _curriculum_classes() -> list[type[Curriculum]]:
    out = []
    for name in C.__all__:
        obj = getattr(C, name)
        if isinstance(obj, type) and issubclass(obj, Curriculum):
            out.append(obj)
    return out


def _public_functions(cls: type) -> dict[str, types.FunctionType]:
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, types.FunctionType):
            out[name] = value
    return out


@pytest.mark.parametrize("cls", _curriculum_classes(), ids=lambda c: c.__name__)
def test_every_public_method_of_every_curriculum_is_locked(cls: type[Curriculum]) -> None:
    funcs = _public_functions(cls)
    assert {"sample_tasks", "metrics", "state_dict", "load_state_dict", "update_on_episode"} <= set(funcs)
    unlocked = sorted(
        name for name, f in funcs.items()
        if not getattr(f, _LOCKED_MARK, False) and not getattr(f, "__isabstractmethod__", False)
    )
    assert not unlocked, f"{cls.__name__} has public methods that do not take its lock: {unlocked}"
    for name, f in funcs.items():  # a wrapper wraps a real method, never another wrapper
        inner = getattr(f, "__wrapped__", None)
        twice = inner is not None and getattr(inner, _LOCKED_MARK, False)
        assert not twice, f"{cls.__name__}.{name} is wrapped twice"


def test_added_methods_are_covered() -> None:
    """Spot-check the methods subclasses add beyond the base API."""
    expected = {
        C.PLR: {"update_scores", "max_returns", "buffer_tasks", "buffer_scores", "replay_weights"},
        C.ACCEL: {"provenance", "update_scores"},
        C.LearningProgress: {"learning_progress", "success_rates"},
        C.SFL: {"learnability", "success_rates"},
        C.PFSP: {"get_opponent", "update_agent", "update_winrate", "winrates", "weights"},
        C.SelfPlay: {"get_opponent", "update_agent", "update_winrate"},
        C.DualCurriculum: {"get_opponent", "update_agent", "update_winrate"},
        C.Sequential: {"stage_metrics"},
        C.OMNI: {"rejudge"},
        C.ExpandingBox: {"current_range"},
    }
    for cls, names in expected.items():
        funcs = _public_functions(cls)
        for name in names:
            assert getattr(funcs[name], _LOCKED_MARK, False), f"{cls.__name__}.{name}"


# -- signatures, pickling, copies ---------------------------------------------------------------------------


def test_signatures_survive_the_wrapping() -> None:
    cur = PLR(Discrete(4))
    params = list(inspect.signature(cur.update_on_episode).parameters)
    assert params == ["episode_return", "length", "task", "progress", "env_id"]
    assert list(inspect.signature(PLR.update_scores).parameters) == ["self", "tasks", "scores", "max_returns"]
    assert PLR.update_on_episode.__name__ == "update_on_episode"
    assert PLR.update_on_episode.__doc__ and "finished episode" in PLR.update_on_episode.__doc__

    class WithExtras(DomainRandomization):
        def update_on_episode(self, episode_return: float, length: int, task: Any, progress: float,
                              env_id: int | None = None, *, extras: dict | None = None) -> None:
            self.extras = extras

    assert "extras" in inspect.signature(WithExtras(Discrete(2)).update_on_episode).parameters


def test_sync_core_serves_under_the_curriculum_lock() -> None:
    from magister.sync.core import SyncCore

    cur = PLR(Discrete(4), score="max_mc")
    core = SyncCore(cur)
    assert core.lock is cur.lock
    welcome = core.register_env()
    tasks = core.assign_tasks(welcome.env_id, 2)
    assert len(tasks.tasks) == 2
    assert cur.num_sampled == 2


def _fed_plr() -> PLR:
    cur = _plr()
    for i, task in enumerate(cur.sample(20)):
        cur.update_on_episode(float(i), 5, task, 0.5)
    return cur


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_copies_get_their_own_working_lock(how: str) -> None:
    cur = _fed_plr()
    if how == "pickle":
        dup = pickle.loads(pickle.dumps(cur))
    elif how == "deepcopy":
        dup = copy.deepcopy(cur)
    else:
        dup = copy.copy(cur)
    assert isinstance(dup.lock, RLOCK_TYPE) and dup.lock is not cur.lock
    with cur.lock:  # the original's lock held elsewhere does not block the copy
        done = threading.Event()
        t = threading.Thread(target=lambda: (dup.metrics(), done.set()), daemon=True)
        t.start()
        assert done.wait(10.0)
        t.join(10.0)
    if how != "copy":  # a shallow copy shares its arrays with the original
        np.testing.assert_array_equal(dup.distribution(), cur.distribution())
        assert dup.sample(5) == cur.sample(5)


def test_wrapping_curricula_pickle_and_copy() -> None:
    space = Discrete(8)
    inner = PLR(space, score="max_mc", buffer_size=4, seed=0)
    outer = Sequential([inner, DomainRandomization(space)], ["episodes>=3"], space, seed=1)
    for task in outer.sample(2):
        outer.update_on_episode(1.0, 3, task, 1.0)
    dups = [pickle.loads(pickle.dumps(outer)), copy.deepcopy(outer)]
    expected = outer.sample(4)
    for dup in dups:
        assert dup.lock is not outer.lock and dup.lock is not inner.lock
        assert dup.state_dict()["class"] == "Sequential"
        assert dup.sample(4) == expected


class _OwnGetstate(DomainRandomization):
    """A subclass whose ``__getstate__`` ignores ``super()`` (it must still drop the lock)."""

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__ = state  # replaces the dict, lock included: the lock is made again on demand


def test_subclass_getstate_and_setstate_are_respected() -> None:
    cur = _OwnGetstate(Discrete(5), seed=3)
    cur.sample(2)
    dup = pickle.loads(pickle.dumps(cur))
    assert isinstance(dup.lock, RLOCK_TYPE) and dup.lock is not cur.lock
    assert dup.sample(3) == cur.sample(3)
    dup2 = copy.deepcopy(cur)
    assert dup2.lock is dup2.lock and dup2.lock is not cur.lock


def test_a_served_curriculum_shares_its_lock_with_the_server_thread():
    """The server applies updates under the curriculum's own lock, so a learner reading the curriculum it
    holds (not the server's proxies) is serialised with the server thread."""
    from magister import serve
    from magister.curricula.plr import PLR
    from magister.sync.feed import CurriculumClient
    from magister.task_spaces.discrete import Discrete

    cur = PLR(Discrete(50), seed=0)
    with serve(cur) as server:
        assert server.lock is cur.lock and server.core.lock is cur.lock
        client = CurriculumClient(server.address, max_update_delay=0)
        stop = threading.Event()

        def feed() -> None:
            while not stop.is_set():
                a = client.next_task()
                client.record_episode(a, float(a.task % 3), 5, 0.5)

        t = threading.Thread(target=feed)
        t.start()
        try:
            for _ in range(300):
                p = cur.distribution()
                assert abs(p.sum() - 1.0) < 1e-9 and (p >= 0).all()
                cur.metrics()
        finally:
            stop.set()
            t.join(10)
            client.close()
        assert server.metrics()["sync/total/episodes_applied"] > 0
