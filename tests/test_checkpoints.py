"""Safe checkpoints: every curriculum's ``state_dict()`` is plain data that ``magister.save`` writes and
``magister.load`` reads back without running code from the file, and a curriculum restored from the file
draws exactly the samples the original draws next.

Before this, the documented recipe was ``torch.save(server.state_dict(), path)``, which only
``torch.load(path, weights_only=False)`` (unpickling, i.e. running code named by the file) could read.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import inspect
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import magister
from magister import checkpoint
from magister.curricula import (
    ACCEL,
    ADR,
    FSP,
    OMNI,
    PFSP,
    PLR,
    RIAC,
    SFL,
    Constant,
    DomainRandomization,
    DualCurriculum,
    ExpandingBox,
    LearningProgress,
    Manual,
    OpponentStore,
    PLRPerp,
    RobustPLR,
    SelfPlay,
    Sequential,
    TaskFilter,
)
from magister.curricula.base import AgentCurriculum, StepBatch
from magister.sync.zmq_server import serve
from magister.task_spaces import Box, Discrete

pytestmark = pytest.mark.timeout(120)

SPACE = Discrete(30)
BOX = Box([0.0, -1.0], [1.0, 1.0])  # not indexed: tasks are tuples of floats (tuple keys in the state)


def _store(folder) -> OpponentStore:
    return OpponentStore(folder, max_count=20, save_fn=lambda o, f: f.write(pickle.dumps(o)),
                         load_fn=lambda f: pickle.loads(f.read()))


def _factories() -> dict[str, Callable[[int, Any], Any]]:
    """Every curriculum of magister.curricula, built from a seed (the restored copy gets another) and, for
    the co-player ones, the folder of their opponent store."""
    return {
        "PLR": lambda s, d: PLR(SPACE, score="return", buffer_size=10, seed=s),
        "PLR-value": lambda s, d: PLR(SPACE, buffer_size=10, seed=s),
        "PLR-box": lambda s, d: PLR(BOX, score="return", buffer_size=10, replay_prob=0.5, seed=s),
        "RobustPLR": lambda s, d: RobustPLR(SPACE, score="return", buffer_size=10, seed=s),
        "PLRPerp": lambda s, d: PLRPerp(SPACE, score="return", buffer_size=10, seed=s),
        "ACCEL": lambda s, d: ACCEL(BOX, score="return", buffer_size=10, min_edits=1, max_edits=2, seed=s),
        "SFL": lambda s, d: SFL(SPACE, batch_size=20, update_period=5, buffer_size=4, seed=s),
        "SFL-dist": lambda s, d: SFL(SPACE, method="dist", batch_size=20, update_period=5, seed=s),
        "LearningProgress": lambda s, d: LearningProgress(SPACE, update_period=5, seed=s),
        "OMNI": lambda s, d: OMNI(SPACE, base=LearningProgress(SPACE, update_period=5, seed=s), seed=s),
        "TaskFilter": lambda s, d: TaskFilter(SPACE, num_episodes=2, eval_fraction=0.5, seed=s),
        "DomainRandomization": lambda s, d: DomainRandomization(SPACE, seed=s),
        "Constant": lambda s, d: Constant(SPACE, 3, seed=s),
        "Manual": lambda s, d: Manual(SPACE, [(0, [1.0] + [0.0] * 29), (10, [1 / 30] * 30)], seed=s),
        "ExpandingBox": lambda s, d: ExpandingBox(BOX, [0.4, -0.1], [0.6, 0.1], threshold=0.3, window=4,
                                               seed=s),
        "Sequential": lambda s, d: Sequential(
            [SPACE, [1, 2, 3], PLR(SPACE, score="return", seed=s), 4],
            ["episodes>=6", "return>=0.2&&episodes>=4", "tasks>=40"], window=5, demand_metrics=["score"],
            seed=s,
        ),
        "FSP": lambda s, d: FSP(_store(d), checkpoint_interval=2, seed=s),
        "PFSP": lambda s, d: PFSP(_store(d), checkpoint_interval=2, seed=s),
        "SelfPlay": lambda s, d: SelfPlay(_store(d), checkpoint_interval=3, seed=s),
        "Dual": lambda s, d: DualCurriculum(PLR(SPACE, score="return", seed=s),
                                         PFSP(_store(d), checkpoint_interval=2, seed=s), seed=s),
        "RIAC": lambda s, d: RIAC(BOX, max_region_size=10, nb_split_attempts=5, seed=s),
        "ADR": lambda s, d: ADR(BOX, initial=[0.5, 0.0], low_threshold=0.3, high_threshold=0.6,
                                queue_length=3, step=0.1, seed=s),
    }


def _taken(method: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``meta`` that ``method`` accepts."""
    params = inspect.signature(method).parameters
    return {k: v for k, v in meta.items() if k in params}


def _feedback(cur: Any, rng: np.random.Generator, rounds: int) -> list[tuple]:
    """Deterministic traffic (given ``rng``): sampling from the curriculum's generator and a per-env
    stream, episodes, progress, steps where wanted, learner feedback and, for co-player curricula, agent
    snapshots and results. Returns what the curriculum sampled."""
    out: list[tuple] = []
    for r in range(rounds):
        if isinstance(cur, AgentCurriculum):
            cur.update_agent({"gen": r})
        samples = cur.sample_tasks(3)
        if r % 3 == 0:
            samples += cur.sample_tasks_with(cur.stream_rng(7), 2)
        out.append(tuple((s.task, s.train) for s in samples))
        for s in samples:
            if cur.requires_step_updates:
                n = 4
                cur.update_on_step_batch(StepBatch(
                    [s.task] * n, rng.random(n), [False] * (n - 1) + [True], [False] * n, np.zeros(n),
                    obs=[np.zeros(2, np.float32)] * n, infos=[{}] * n, env_id=0,
                ), env_id=0)
            ret, progress = float(rng.random()), float(rng.random() < 0.5)
            # as the server does: the task's metadata goes back to curricula that take it
            meta = {"control": s.control, "variant": s.variant}
            if s.control:
                ret = 0.0  # (a control policy that fails: TaskFilter accepts some tasks)
            cur.update_on_episode(ret, 4, s.task, progress, env_id=0, **_taken(cur.update_on_episode, meta))
            cur.update_task_progress(s.task, progress, env_id=0, **_taken(cur.update_task_progress, meta))
        if isinstance(cur, PLR) and cur.score_name.startswith("value"):
            cur.update_on_demand({"tasks": [s.task for s in samples], "scores": rng.random(len(samples))})
        if isinstance(cur, Sequential):
            cur.update_on_demand({"score": float(rng.random())})
        if isinstance(cur, OMNI):
            cur.update_on_demand({"success_rates": rng.random(SPACE.num_tasks).tolist()})
        if isinstance(cur, AgentCurriculum):
            ids = cur.opponent_ids() if hasattr(cur, "opponent_ids") else []
            for i in ids[-2:]:
                cur.update_winrate(i, float(rng.choice([-1.0, 0.0, 1.0])))
    return out


def _same(a: Any, b: Any, where: str = "state") -> None:
    """Deep equality that also requires the same types (a tuple stays a tuple, numpy stays numpy)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)[:5]} != {list(b)[:5]}"
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _without_folder(state: Any) -> Any:
    """``state`` without the opponent store's folder (the restored copy's store is a copy elsewhere)."""
    if isinstance(state, dict):
        return {k: _without_folder(v) for k, v in state.items() if k != "store_directory"}
    return state


NAMES = list(_factories())


@pytest.mark.parametrize("name", NAMES)
def test_every_curriculum_resumes_exactly_from_a_safe_checkpoint(name, tmp_path):
    make = _factories()[name]
    cur = make(1, tmp_path / "store")
    _feedback(cur, np.random.default_rng(0), 25)
    state = cur.state_dict()
    path = tmp_path / "curriculum.ckpt"
    magister.save(path, state)
    # co-player curricula keep their opponents in the store's folder: it is checkpointed beside the state
    if (tmp_path / "store").exists():
        shutil.copytree(tmp_path / "store", tmp_path / "store-copy")
    loaded = magister.load(path)
    _same(loaded, state)  # every value comes back as it was, types included
    expected = _feedback(cur, np.random.default_rng(1), 15)  # what the original does next
    restored = make(99, tmp_path / "store-copy")  # another seed: the checkpoint decides
    restored.load_state_dict(loaded)
    assert _feedback(restored, np.random.default_rng(1), 15) == expected
    _same(_without_folder(restored.state_dict()), _without_folder(cur.state_dict()))


def test_a_server_checkpoint_resumes_a_served_curriculum(tmp_path):
    path = tmp_path / "server.ckpt"
    with serve(PLR(SPACE, score="return", seed=0)) as server:
        for task in server.sample(20):
            server.update_on_demand({"tasks": [task], "scores": [float(task % 3 == 0)]})
        magister.save(path, server.state_dict())
        expected = server.sample(10)
    with serve(PLR(SPACE, score="return", seed=5)) as resumed:
        resumed.load_state_dict(magister.load(path))
        assert resumed.sample(10) == expected


def test_a_ray_server_checkpoint_resumes_a_served_curriculum(tmp_path, ray_session):
    pytest.importorskip("ray")
    from magister.sync.ray_server import serve_ray

    path = tmp_path / "ray.ckpt"
    with serve_ray(LearningProgress(SPACE, update_period=2, seed=0), name=f"ckpt-{os.getpid()}") as server:
        for task in server.sample(12):
            server.update_on_demand({})  # (a no-op for LearningProgress; the call path is what counts)
            server.call("update_task_progress", task, float(task % 2))
        magister.save(path, server.state_dict())
        expected = server.sample(10)
    fresh = LearningProgress(SPACE, update_period=2, seed=7)
    fresh.load_state_dict(magister.load(path))
    assert fresh.sample(10) == expected


# -- the format ------------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**130), 2**130), st.floats(allow_nan=False), st.text(max_size=8),
    st.binary(max_size=8),
    st.builds(np.float32, st.floats(-1e6, 1e6, width=32)),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
    st.builds(np.bool_, st.booleans()),
)
_arrays = st.one_of(
    st.builds(lambda xs, s: np.asarray(xs, dtype=np.float64).reshape(s), st.lists(st.floats(), min_size=6,
              max_size=6), st.sampled_from([(6,), (2, 3), (3, 1, 2)])),
    st.builds(lambda xs: np.asarray(xs, dtype=np.int32),
              st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5)),
    st.builds(lambda xs: np.asarray(xs, dtype=bool), st.lists(st.booleans(), max_size=5)),
    st.builds(lambda xs: np.asarray(xs, dtype=str), st.lists(st.text(max_size=3), min_size=1, max_size=3)),
)
_keys = st.one_of(st.integers(-5, 5), st.text(max_size=4), st.tuples(st.integers(0, 3), st.text(max_size=2)))
_values = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_values)
def test_any_plain_value_round_trips_with_its_types(value):
    back = checkpoint.loads(checkpoint.dumps(value))
    if isinstance(value, float) and np.isnan(value):
        assert np.isnan(back)
    else:
        _same(back, value)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "state, where",
    [
        ({"a": [1, _Evil()]}, r"state\['a'\]\[1\]: a _Evil"),
        ({"f": print}, r"state\['f'\]"),
        ({"x": np.array([object()], dtype=object)}, r"dtype object"),
        ({"deque": __import__("collections").deque([1])}, r"a deque"),
    ],
)
def test_anything_but_plain_data_is_refused_and_nothing_is_written(tmp_path, state, where):
    path = tmp_path / "c.ckpt"
    with pytest.raises(TypeError, match=where):
        magister.save(path, state)
    assert os.listdir(tmp_path) == []


def test_a_pickle_or_damaged_file_is_refused_with_a_clear_error(tmp_path):
    pickled = tmp_path / "pickled.pt"
    pickled.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(checkpoint.CheckpointError, match="not a magister checkpoint"):
        magister.load(pickled)
    good = checkpoint.dumps({"a": np.arange(100)})
    with pytest.raises(checkpoint.CheckpointError, match="damaged or truncated"):
        checkpoint.loads(good[:-50])
    with pytest.raises(checkpoint.CheckpointError, match="format"):
        checkpoint.loads(checkpoint.MAGIC + b"\x07" + good[len(checkpoint.MAGIC) + 1 :])


def test_save_replaces_the_file_atomically(tmp_path):
    path = tmp_path / "c.ckpt"
    magister.save(path, {"v": 1})
    magister.save(path, {"v": 2})
    assert magister.load(path) == {"v": 2}
    assert sorted(os.listdir(tmp_path)) == ["c.ckpt"]  # no temporary file left behind


_ext_payloads = st.one_of(
    st.binary(max_size=60),
    st.builds(lambda v: msgpack.packb(v, use_bin_type=True), st.one_of(
        st.lists(st.one_of(st.sampled_from(["<f8", "|u1", "<i4", "O", "(2,)i4", "i4,i4", "<U3", "V4"]),
                           st.text(max_size=6), st.integers(-3, 10**12), st.binary(max_size=20),
                           st.lists(st.integers(-2, 2**40), max_size=3)), max_size=4),
        st.integers(-(2**63), 2**63 - 1), st.text(max_size=10),
    )),
)


def _framed(payload: bytes, version: int = checkpoint.FORMAT_VERSION) -> bytes:
    """A file around ``payload`` with the right header and checksum, as a hostile author would write it
    (so the decoder, not the checksum, is what gets tested); format 1 has no checksum."""
    digest = hashlib.sha256(payload).digest() if version == 2 else b""
    return checkpoint.MAGIC + bytes([version]) + digest + payload


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 400), st.integers(0, 8), _ext_payloads,
       st.sampled_from([1, 2]))
def test_any_bytes_load_as_data_or_fail_with_a_checkpoint_error(payload, cut, code, ext_data, version):
    """Hostile or damaged files: a value or a CheckpointError, never another exception (nor code run)."""
    good = checkpoint.dumps({"a": np.arange(4.0), "t": (1, "x"), "big": 2**80, "s": {1, 2}})
    ext = msgpack.packb({"k": msgpack.ExtType(code, ext_data)}, use_bin_type=True)
    body = good[len(checkpoint.MAGIC) + 33 :]
    for data in (_framed(payload, version), good[:cut], good[:cut] + payload + good[cut:],
                 _framed(ext, version), _framed(body[:cut] + payload + body[cut:], version)):
        try:
            checkpoint.loads(data)
        except checkpoint.CheckpointError:
            pass


# -- damage: a checksum over the payload ------------------------------------------------------------------


@functools.cache
def _real_checkpoint() -> tuple[Any, bytes]:
    """A small real state (PLR on tuple tasks after some traffic: arrays, numpy scalars, tuples, dicts,
    a 128-bit generator state) and its file."""
    cur = _factories()["PLR-box"](1, None)
    _feedback(cur, np.random.default_rng(0), 6)
    state = cur.state_dict()
    return state, checkpoint.dumps(state)


def test_every_single_bit_flip_of_a_real_checkpoint_raises_a_checkpoint_error():
    """Each of the file's bits flipped in turn (the header's too): never a silently altered value. Before
    the checksum, some flips loaded with altered numbers."""
    state, good = _real_checkpoint()
    _same(checkpoint.loads(good), state)
    flips, head = len(good) * 8, len(checkpoint.MAGIC)
    errors = collections.Counter()
    for bit in range(flips):
        bad = bytearray(good)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(checkpoint.CheckpointError) as info:
            checkpoint.loads(bytes(bad))
        kinds = ("checksum mismatch", "not a magister checkpoint", "checkpoint format")
        errors[next(k for k in kinds if k in str(info.value))] += 1
    assert flips > 10_000
    # a flip in the magic bytes, in the version byte, or anywhere in the checksum or the payload
    assert errors == {"not a magister checkpoint": 8 * head, "checkpoint format": 8,
                      "checksum mismatch": flips - 8 * (head + 1)}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_change_or_cut_to_a_checkpoint_raises_a_checkpoint_error(data):
    _, good = _real_checkpoint()
    where = data.draw(st.integers(0, len(good) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != good[where]))
    changed = good[:where] + bytes([byte]) + good[where + 1 :]
    cut = good[: data.draw(st.integers(0, len(good) - 1))]
    extended = good + data.draw(st.binary(min_size=1, max_size=8))
    for bad in (changed, cut, extended):
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.loads(bad)


#: A file magister wrote before checksums (format 1): {"a": np.arange(3, dtype=np.int16), "t": (1, "x"),
#: "big": 2**80, "s": {2}}.
_FORMAT_1 = (b"\x89magister-state\n\x01\x84\xa1a\xc7\x0f\x01\x93\xa3<i2\x91\x03\xc4\x06\x00\x00\x01\x00\x02"
             b"\x00\xa1t\xd6\x03\x92\x01\xa1x\xa3big\xc7\x19\x041208925819614629174706176\xa1s\xd5\x05\x91\x02")


def test_a_file_of_the_previous_format_still_loads_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="magister.checkpoint"):
        back = checkpoint.loads(_FORMAT_1)
    _same(back, {"a": np.arange(3, dtype=np.int16), "t": (1, "x"), "big": 2**80, "s": {2}})
    assert "format 1" in caplog.text and "save it again" in caplog.text
    assert checkpoint.dumps(back)[len(checkpoint.MAGIC)] == checkpoint.FORMAT_VERSION == 2  # saved again: 2


# -- depth: bounded on save and on load, and loading uses no stack per level ------------------------------


_WRAP = {"list": lambda v: [v], "dict": lambda v: {"k": v}, "tuple": lambda v: (v,),
         "frozenset": lambda v: frozenset([v]), "set": lambda v: {v}}


def _nest(kind: str, depth: int) -> Any:
    """Containers nested ``depth`` deep around an int: all of ``kind`` or, for "mixed", tuples and frozensets
    in a set in lists and dicts (each kind of container where it can hold the one inside)."""
    value: Any = 0
    for i in range(depth):
        if kind != "mixed":
            k = kind
        elif i < depth // 2:
            k = ("tuple", "frozenset")[i % 2]
        else:
            k = "set" if i == depth // 2 else ("list", "dict")[i % 2]
        value = _WRAP[k](value)
    return value


@pytest.mark.parametrize("kind", ["list", "dict", "tuple", "mixed"])
def test_a_state_nested_to_the_bound_round_trips_and_deeper_is_refused_on_save(kind, tmp_path):
    limit = checkpoint.MAX_DEPTH
    deepest = _nest(kind, limit)
    _same(checkpoint.loads(checkpoint.dumps(deepest)), deepest)
    path = tmp_path / "c.ckpt"
    with pytest.raises(ValueError, match=rf"nested {limit + 1} deep, more than the limit of {limit}"):
        magister.save(path, _nest(kind, limit + 1))
    assert os.listdir(tmp_path) == []  # nothing written: what saves, loads
    loop: list[Any] = []
    loop.append(loop)  # (a list holding itself: refused at the bound, not by a RecursionError)
    with pytest.raises(ValueError, match="more than the limit"):
        checkpoint.dumps({"loop": loop})


def test_the_bundled_states_nest_far_below_the_bound(tmp_path):
    def depth(v: Any) -> int:
        if isinstance(v, dict):
            return 1 + max([0] + [max(depth(k), depth(x)) for k, x in v.items()])
        if isinstance(v, (list, tuple, set, frozenset)):
            return 1 + max([0] + [depth(x) for x in v])
        return 0

    deepest = 0
    for name, make in _factories().items():
        cur = make(1, tmp_path / name)
        _feedback(cur, np.random.default_rng(0), 4)
        deepest = max(deepest, depth(cur.state_dict()))
    assert 3 <= deepest <= checkpoint.MAX_DEPTH // 10


_HOSTILE = r"""
import hashlib, json, sys, threading
import msgpack
from magister import checkpoint as C

assert C.__file__ == sys.argv[1], (C.__file__, sys.argv[1])

def framed(payload, version):
    return C.MAGIC + bytes([version]) + (hashlib.sha256(payload).digest() if version == 2 else b"") + payload

def tuples(n):  # n tuples, each the one item of the next: 200 of them is the 955-byte file
    inner = msgpack.packb(0)
    for _ in range(n):
        inner = msgpack.packb(msgpack.ExtType(3, b"\x91" + inner), use_bin_type=True)
    return inner

def sets(n):
    inner = msgpack.packb(0)
    for _ in range(n):
        inner = msgpack.packb(msgpack.ExtType(6, b"\x91" + inner), use_bin_type=True)
    return inner

cases = {"tuples-200": tuples(200), "tuples-20000": tuples(20000), "frozensets-5000": sets(5000),
         "lists-500": b"\x91" * 500 + b"\x00", "lists-100000": b"\x91" * 100000 + b"\x00",
         "maps-500": b"\x81\xa1k" * 500 + b"\x00"}

def attempt(name, data):
    try:
        C.loads(data)
        print(json.dumps([name, len(data), "loaded"]), flush=True)
    except C.CheckpointError as exc:
        print(json.dumps([name, len(data), "CheckpointError: " + str(exc)]), flush=True)

for name, payload in cases.items():
    for version in (1, 2):
        attempt(f"{name}-v{version}", framed(payload, version))

# loading uses no C stack per level: a thread with a small stack refuses the deep file and loads the deepest
# legal value
threading.stack_size(256 * 1024)
deepest = 0
for _ in range(C.MAX_DEPTH):
    deepest = (deepest,)
def in_thread():
    attempt("thread-tuples-20000", framed(tuples(20000), 2))
    print(json.dumps(["thread-deepest", 0, "loaded" if C.loads(C.dumps(deepest)) == deepest else "wrong"]))
thread = threading.Thread(target=in_thread)
thread.start()
thread.join()
"""


def test_deeply_nested_files_raise_a_checkpoint_error_and_never_crash_the_process(tmp_path):
    """The files that crashed the loader with SIGSEGV (tuples nested 200 deep: 955 bytes) and deeper ones,
    in a subprocess, so a crash shows as its exit code instead of taking pytest down."""
    script = tmp_path / "hostile.py"
    script.write_text(_HOSTILE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, str(script), checkpoint.__file__], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    crash = f"exit code {proc.returncode} (-11: SIGSEGV)"
    assert proc.returncode == 0, f"{crash}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    results = {name: (size, outcome) for name, size, outcome in map(json.loads, proc.stdout.splitlines())}
    assert len(results) == 14
    assert results.pop("thread-deepest")[1] == "loaded"
    assert 900 < results["tuples-200-v1"][0] < 1000
    limit = checkpoint.MAX_DEPTH
    for name, (_, outcome) in results.items():
        assert outcome.startswith("CheckpointError: damaged or hostile checkpoint: containers nested "), name
        assert f"beyond the limit of {limit}" in outcome, name
    assert f"nested {limit + 1} deep" in results["tuples-200-v2"][1]
    assert "nested over 1000 deep" in results["lists-100000-v2"][1]
