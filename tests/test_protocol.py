"""Wire protocol: round trips of every message kind, numpy arrays, zero-copy frames, bounded decoding."""

from __future__ import annotations

import math
import pathlib

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from magister.sync import protocol as P

V = P.PROTOCOL_VERSION

# -- strategies -----------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
# encoded tasks: scalars and nested tuples / str-keyed dicts (tuples stay tuples with use_list=False)
tasks = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=12,
)
ids = st.integers(0, 2**62)
env_ids = st.integers(0, 10_000)
dtypes = st.sampled_from(
    [
        "bool",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "uint64",
        "float16",
        "float32",
        ">f8",
        "complex64",
        "datetime64[s]",
        "S3",
        "<U2",
    ]
)
arrays = dtypes.flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
)


def _roundtrip(msg: P.Message, **kw) -> P.Message:
    frames = P.encode(msg, **kw)
    return P.decode([bytes(f) for f in frames])


def _same(a, b) -> bool:
    return P._deep_equal(a, b)


# -- every message kind -------------------------------------------------------------------------------


@given(pid=st.integers(0, 2**31), name=st.text(max_size=30))
def test_hello_roundtrip(pid, name):
    assert _roundtrip(P.Hello(pid, name)) == P.Hello(pid, name)


@given(env_ids, st.booleans(), st.integers(1, 10**6), st.booleans(), st.booleans())
def test_welcome_roundtrip(env_id, step, batch, step_obs, step_infos):
    msg = P.Welcome(env_id, step, batch, step_obs, step_infos)
    assert _roundtrip(msg) == msg


@given(env_ids, st.integers(1, 4096))
def test_task_request_is_a_report_without_updates(env_id, count):
    out = _roundtrip(P.Report(env_id, request=count))
    assert out == P.Report(env_id, request=count) and out.updates == ()


@given(env_ids, st.lists(st.tuples(ids, tasks, st.booleans()), max_size=6))
def test_tasks_roundtrip(env_id, items):
    msg = P.Tasks(
        env_id, tuple(i for i, _, _ in items), tuple(t for _, t, _ in items), tuple(b for _, _, b in items)
    )
    out = _roundtrip(msg)
    assert isinstance(out, P.Tasks) and out.env_id == env_id
    assert out.task_ids == msg.task_ids and out.train == msg.train
    assert _same(out.tasks, msg.tasks)
    assert out.control == (False,) * len(items) and out.variants == (None,) * len(items)


@given(env_ids, st.lists(st.tuples(ids, tasks, st.booleans(), st.booleans(), st.none() | tasks), max_size=6))
def test_tasks_roundtrip_with_control_and_variants(env_id, items):
    """The task metadata travels as typed per-task fields: the tasks themselves stay as they were sent."""
    cols = tuple(zip(*items)) if items else ((),) * 5
    msg = P.Tasks(env_id, *cols)
    out = _roundtrip(msg)
    assert isinstance(out, P.Tasks) and out.env_id == env_id
    assert out.task_ids == msg.task_ids and out.train == msg.train and out.control == msg.control
    assert all(type(c) is bool for c in out.control)
    assert _same(out.tasks, msg.tasks) and _same(out.variants, msg.variants)
    assert [v is None for v in out.variants] == [v is None for v in msg.variants]


def test_tasks_metadata_fields_are_validated():
    with pytest.raises(P.ProtocolError, match="control must be a bool"):
        P.Tasks(0, (1,), (5,), (True,), (1,), (None,))
    with pytest.raises(P.ProtocolError, match="differ in length"):
        P.Tasks(0, (1,), (5,), (True,), (False, True), (None,))
    with pytest.raises(P.ProtocolError, match="differ in length"):
        P.Tasks(0, (1,), (5,), (True,), (False,), ())
    with pytest.raises(P.ProtocolError, match="variants must be a tuple"):
        P.Tasks(0, (1,), (5,), (True,), (False,), 7)


@given(
    env_id=env_ids,
    steps=st.lists(
        st.tuples(
            st.integers(-1, 2**40),
            tasks,
            st.floats(allow_nan=False, allow_infinity=False),
            st.booleans(),
            st.booleans(),
            st.floats(0, 1),
        ),
        min_size=1,
        max_size=8,
    ),
    obs_kind=st.sampled_from(["none", "array", "tuple"]),
    with_infos=st.booleans(),
)
def test_steps_roundtrip(env_id, steps, obs_kind, with_infos):
    n = len(steps)
    obs = {
        "none": None,
        "array": np.arange(n * 3, dtype=np.float32).reshape(n, 3),
        "tuple": tuple({"x": i, "img": np.full((2, 2), i, np.uint8)} for i in range(n)),
    }[obs_kind]
    infos = tuple({"k": i, "v": (1.5, "a")} for i in range(n)) if with_infos else None
    part = P.Steps(
        np.array([s[0] for s in steps]),
        tuple(s[1] for s in steps),
        np.array([s[2] for s in steps]),
        np.array([s[3] for s in steps]),
        np.array([s[4] for s in steps]),
        np.array([s[5] for s in steps]),
        obs,
        infos,
    )
    out = _roundtrip(P.Report(env_id, ((P.STEPS, part),)))
    (got,) = out.updates
    assert type(got) is P.Steps and got == part
    assert got.task_ids.dtype == np.int64 and got.rewards.dtype == np.float64 and got.terminated.dtype == bool
    assert len(got) == n


_episode_rows = st.lists(
    st.tuples(
        st.integers(-1, 2**40), tasks, st.floats(allow_nan=False), st.integers(0, 10**9), st.floats(0, 1),
        st.booleans(), st.dictionaries(st.text(max_size=4), st.floats(allow_nan=False), max_size=3),
        st.lists(st.tuples(st.text(max_size=4), st.floats(allow_nan=False), st.integers(0, 10**9),
                           st.floats(0, 1)), max_size=3).map(tuple),
    ),
    max_size=8,
)


def _episodes(rows) -> tuple:
    return tuple((P.EPISODE, *row) for row in rows)


@given(env_ids, _episode_rows, st.integers(0, 4096))
def test_report_episodes_roundtrip(env_id, rows, request):
    msg = P.Report(env_id, _episodes(rows), request)
    out = _roundtrip(msg)
    assert isinstance(out, P.Report)
    assert (out.env_id, out.request, len(out.updates)) == (env_id, request, len(rows))
    for got, (tid, task, ret, length, prog, ended, extras, agents) in zip(out.episodes, rows):
        assert (got[0], got[3], got[4], got[5], got[6], got[7]) == (tid, length, prog, ended, extras, agents)
        assert _same(got[1], task) and (got[2] == ret or (math.isinf(ret) and got[2] == ret))
        assert [type(v) for v in (got[0], got[2], got[3], got[5])] == [int, float, int, bool]


_any_field = st.one_of(
    st.integers(-3, 3), st.booleans(), st.floats(-2, 2), st.none(), st.text(max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=2),
    st.lists(st.integers(-9, 9), max_size=2),
)
# updates of any kind code and fields (kinds 1 and 2: progress and episode)
_any_updates = st.lists(
    st.tuples(st.sampled_from([1, 2, 7, True]), st.lists(_any_field, min_size=3, max_size=7))
    .map(lambda t: (t[0], *t[1])), max_size=3,
).map(tuple)


def _decodes_like_the_constructor(cls, values, typed) -> None:
    """Decoding ``cls``'s ``values`` gives what the checked constructor gives (equal, and ``typed(msg)`` of
    the same types), and refuses what it refuses."""
    frames = [msgpack.packb((P.PROTOCOL_VERSION, cls.KIND, tuple(values)), use_bin_type=True)]
    try:
        expected = cls(*values)
    except (P.ProtocolError, TypeError, ValueError):
        expected = None
    if expected is None:
        with pytest.raises(P.ProtocolError):
            P.decode(frames)
        return
    out = P.decode(frames)
    assert out == expected
    assert [type(v) for v in typed(out)] == [type(v) for v in typed(expected)]


@given(st.lists(st.one_of(_any_field, _any_updates), min_size=1, max_size=4))
def test_report_decoding_checks_like_the_constructor(values):
    """On any field values decoding gives what the checked constructor gives, and refuses what it refuses."""
    _decodes_like_the_constructor(P.Report, values, lambda m: (
        m.env_id, m.request, *(v for u in m.updates for v in u)))


def test_report_updates_refuse_near_misses_naming_the_field():
    ok = (P.EPISODE, 5, 1, 2.0, 10, 0.5, True, {}, ())
    assert P.decode(P.encode(P.Report(0, (ok,)))) == P.Report(0, (ok,))
    for i, bad, field in ((1, -2, "task_id"), (1, True, "task_id"), (3, "x", "return"), (4, -1, "length"),
                          (5, None, "progress"), (6, 1, "ended"), (7, [], "extras"), (8, {}, "agents"),
                          (8, (("a", 1.0, 2),), r"agents\[0\]"),
                          (8, ((1, 1.0, 2, 0.0),), r"agents\[0\].agent"),
                          (8, (("a", "x", 2, 0.0),), r"agents\[0\].return")):
        update = list(ok)
        update[i] = bad
        frames = _raw(V, P.Report.KIND, (0, (ok, tuple(update))))  # the second update is wrong
        with pytest.raises(P.ProtocolError, match=f"episode.{field}"):
            P.decode(frames)
    with pytest.raises(P.ProtocolError, match=r"must be \(PROGRESS, task_id, task, progress, done\)"):
        P.Report(0, ((P.PROGRESS, 1, 2, 0.5),))
    with pytest.raises(P.ProtocolError, match="must start with its kind"):
        P.Report(0, ((True, 1, 2, 0.5, False),))  # a bool is not a kind
    with pytest.raises(P.ProtocolError, match="request must be >= 0"):
        P.decode(_raw(V, P.Report.KIND, (0, (), -1)))
    with pytest.raises(P.ProtocolError, match="more than the limit"):
        P.Report(0, ((P.PROGRESS, 1, 2, 0.5, False),) * (P.MAX_ROWS + 1))
    with pytest.raises(P.ProtocolError, match="malformed Report"):
        P.decode(_raw(V, P.Report.KIND, (0, ((P.STEPS, (1, 2)),))))  # step records that are not


def test_report_rebase_to_a_new_registration_keeps_their_lease_ids():
    rows = ((17, 2, 1.0, 5, 1.0, True, {}, ()), (18, 2, 0.0, 6, 0.0, False, {}, ()))
    (out,) = P.rebase([P.Report(3, _episodes(rows), request=2)], 0)
    assert (out.env_id, out.request, out.updates) == (0, 0, rows)  # the lease ids 17 and 18 kept
    assert P.rebase([P.Report(3, request=2), P.Goodbye(3, (1,))], 0) == []


@given(env_ids, st.integers(-1, 2**40), tasks, st.floats(0, 1), st.booleans(), st.integers(0, 4096))
def test_report_progress_roundtrip(env_id, task_id, task, progress, done, request):
    out = _roundtrip(P.Report(env_id, ((P.PROGRESS, task_id, task, progress, done),), request))
    ((tid, got_task, got_progress, got_done),) = out.updates
    assert type(out.updates[0]) is P.Progress
    assert (out.env_id, tid, got_progress, got_done) == (env_id, task_id, progress, done)
    assert out.request == request
    assert _same(got_task, task)


@given(st.text(max_size=10), st.text(max_size=100), st.none() | st.integers(0, 100))
def test_error_roundtrip(code, message, env_id):
    assert _roundtrip(P.Error(code, message, env_id)) == P.Error(code, message, env_id)


@given(st.none() | st.integers(0, 2**62), st.none() | st.integers(0, 100))
def test_a_hellos_stream_and_rejoin_are_a_number_or_none(stream, rejoin):
    """``None`` says "none" (no seeded reset, a first hello): no number stands for it."""
    assert _roundtrip(P.Hello(1, stream=stream, rejoin=rejoin)) == P.Hello(1, stream=stream, rejoin=rejoin)
    for field in ("stream", "rejoin"):
        with pytest.raises(P.ProtocolError, match=f"field {field} must be >= 0"):
            P.Hello(1, **{field: -1})
    with pytest.raises(P.ProtocolError, match="field env_id must be >= 0"):
        P.Error("unknown_env", "", -1)


@given(env_ids, st.lists(ids, max_size=10).map(tuple))
def test_goodbye_roundtrip(env_id, returned):
    assert _roundtrip(P.Goodbye(env_id, returned)) == P.Goodbye(env_id, returned)


@given(env_ids, st.lists(st.integers(0, 300), max_size=4), _episode_rows, st.randoms())
def test_report_keeps_the_order_of_mixed_updates_and_sends_large_observations_out_of_band(
        env_id, sizes, rows, rnd):
    """Updates of every kind, interleaved, come back in their order; step records whose observations exceed
    the out-of-band threshold travel as frames of their own, in the one message of the report."""
    parts = [(P.STEPS, P.Steps(np.full(k, 3), (3,) * k, np.ones(k), np.zeros(k, bool), np.zeros(k, bool),
                               np.zeros(k), np.zeros((k, 64), np.float32))) for k in sizes if k]
    updates = [*parts, *_episodes(rows), (P.PROGRESS, 4, 1, 0.5, False)]
    rnd.shuffle(updates)
    msg = P.Report(env_id, tuple(updates), 2)
    frames = P.encode(msg)
    assert len(frames) == 1 + sum(p.obs.nbytes >= P.DEFAULT_OOB_THRESHOLD for _, p in parts)
    out = P.decode([bytes(f) for f in frames])
    kinds = {P.STEPS: P.Steps, P.PROGRESS: P.Progress, P.EPISODE: P.EpisodeEnd}
    assert [type(u) for u in out.updates] == [kinds[u[0]] for u in updates]
    assert _same(out._fields(), msg._fields())


def test_every_kind_is_covered_and_codes_are_unique():
    assert sorted(P.MESSAGE_TYPES) == list(range(1, 7))
    assert {c.__name__ for c in P.MESSAGE_TYPES.values()} == {
        "Hello", "Welcome", "Report", "Tasks", "Error", "Goodbye",
    }


def test_messages_are_frozen():
    msg = P.Report(1, request=2)
    with pytest.raises(AttributeError):
        msg.request = 3  # type: ignore[misc]


# -- numpy arrays ---------------------------------------------------------------------------------------


@given(arrays)
def test_numpy_arrays_roundtrip_with_dtype_and_shape(arr):
    frames: list = []
    data = P.pack_value({"a": arr}, frames, oob_threshold=64)
    out = P.unpack_value(data, [bytes(f) for f in frames])["a"]
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()  # bit-exact, NaN and NaT included


@given(arrays)
def test_non_contiguous_arrays_are_sent_contiguously(arr):
    view = arr.T if arr.ndim > 1 else arr[::-1] if arr.ndim == 1 else arr
    out = P.unpack_value(P.pack_value(view))
    assert out.tobytes() == view.tobytes() and out.shape == view.shape


def test_large_arrays_travel_as_separate_zero_copy_frames():
    big = np.arange(100_000, dtype=np.float64)  # 800 kB
    small = np.arange(10, dtype=np.int32)
    msg = P.Tasks(0, (1, 2), (big, small), (True, False))
    frames = P.encode(msg)
    assert len(frames) == 2  # header + the big array; the small one is inside the header
    assert len(frames[0]) < 1000
    assert isinstance(frames[1], memoryview) and frames[1].nbytes == big.nbytes
    assert np.shares_memory(np.frombuffer(frames[1], dtype=np.uint8), big)  # no copy on the way out
    received = [bytes(frames[0]), bytes(frames[1])]
    out = P.decode(received)
    assert np.array_equal(out.tasks[0], big) and np.array_equal(out.tasks[1], small)
    # no copy on the way in either: the array is a read-only view on the received frame
    assert not out.tasks[0].flags.writeable and not out.tasks[0].flags.owndata


def test_oob_threshold_controls_frames():
    arr = np.zeros(100, np.uint8)
    assert len(P.encode(P.Tasks(0, (1,), (arr,), (True,)), oob_threshold=100)) == 2
    assert len(P.encode(P.Tasks(0, (1,), (arr,), (True,)), oob_threshold=101)) == 1


def test_numpy_scalars_become_python_scalars():
    out = P.unpack_value(P.pack_value((np.int64(3), np.float32(0.5), np.bool_(True))))
    assert out == (3, 0.5, True) and type(out[0]) is int and type(out[2]) is bool


@pytest.mark.parametrize("bad", [np.array([object()], dtype=object), np.zeros(2, dtype=[("a", "i4")])])
def test_object_and_structured_arrays_are_refused(bad):
    with pytest.raises(TypeError, match="dtype"):
        P.pack_value(bad)


def test_unserialisable_objects_raise_type_error_naming_the_type():
    class Foo:
        pass

    with pytest.raises(TypeError, match="Foo"):
        P.encode(P.Report(0, ((P.EPISODE, 1, 0, 1.0, 1, 0.0, True, {"x": Foo()}, ()),)))
    with pytest.raises(TypeError, match="set"):
        P.pack_value({1, 2})


# -- validation and bounded decoding ---------------------------------------------------------------------


def _raw(version, kind, fields) -> list[bytes]:
    return [msgpack.packb((version, kind, fields), use_bin_type=True)]


def test_version_mismatch_is_a_clear_error():
    with pytest.raises(P.ProtocolVersionError, match=f"version 99.*speaks {V}"):
        P.decode(_raw(99, 3, (0, 1)))


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        ([], "empty"),
        ([b""], "malformed msgpack"),
        ([b"\x93\x01"], "malformed msgpack"),  # truncated array
        ([msgpack.packb([1, 2])], "envelope"),
        (_raw(V, 42, ()), "unknown message kind"),
        (_raw(V, True, (0, 1)), "unknown message kind"),
        (_raw(V, 3, (0,)[:0]), "fields"),
        (_raw(V, 3, (0, (), 1, 2)), "fields"),
        (_raw(V, 3, ("zero",)), "env_id must be an int"),
        (_raw(V, 3, (-5,)), "env_id must be >= 0"),
        (_raw(V, 4, (0, (1, 2), (5,), (True,))), "differ in length"),
        (_raw(V, 4, (0, (1,), (5,), (True,), ("no",), (None,))), "control must be a bool"),
        (_raw(V, 4, (0, (1,), (5,), (True,), (False,), (None, 3))), "differ in length"),
        (_raw(V, 3, (0, ((2, 1, 0, "x", 1, 0.0, True, {}, ()),))), "episode.return must be a number"),
        (_raw(V, 3, (0, ((2, 1, 0, 1.0, 1, 0.0, True, (), ()),))), "episode.extras must be a dict"),
        (_raw(V, 6, (0, (1, True))), "returned_task_ids must be an int"),
        (_raw(V, 3, (0, (), -1)), "request must be >= 0"),
    ],
)
def test_malformed_frames_raise_protocol_error(frames, match):
    with pytest.raises(P.ProtocolError, match=match):
        P.decode(frames)


def _array_ext(dtype: bytes, shape: tuple, data: bytes = b"", frame: int | None = None, ndim=None) -> bytes:
    """A hand-built array extension: [len(dtype)] dtype [ndim] shape(uint64) then data or a frame index."""
    head = bytes((len(dtype),)) + dtype + bytes((len(shape) if ndim is None else ndim,))
    head += b"".join(int(s).to_bytes(8, "little") for s in shape)
    code, tail = (1, data) if frame is None else (2, frame.to_bytes(4, "little"))
    return msgpack.packb((V, 4, (0, (1,), (msgpack.ExtType(code, head + tail),), (True,))))


def test_hand_built_array_extension_decodes():
    out = P.decode([_array_ext(b"<i2", (3,), np.array([1, 2, 3], "<i2").tobytes())])
    assert out.tasks[0].tolist() == [1, 2, 3] and out.tasks[0].dtype == np.dtype("<i2")


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (_array_ext(b"|O", (1,), b"12345678"), "refused numpy dtype"),
        (_array_ext(b"V8", (1,), b"12345678"), "refused numpy dtype"),
        (_array_ext(b"xx", (1,), b""), "refused numpy dtype"),
        (_array_ext(b"", (1,), b""), "bad dtype field"),
        (_array_ext(b"<f8", (10**9, 10**9), b"12345678"), "needs"),  # a claimed huge shape is checked
        (_array_ext(b"<f8", (2**63, 2**63), b""), "needs"),
        (_array_ext(b"<f8", (2,), b"12345678"), "needs 16 bytes, got 8"),
        (_array_ext(b"<f8", (1,), frame=0), "frame 0"),  # refers to an out-of-band frame that is not there
        (_array_ext(b"<f8", (1,), ndim=40), "40 dimensions"),
        (_array_ext(b"<f8", (), ndim=3), "3 dimensions"),  # truncated shape
    ],
)
def test_hostile_array_headers_are_refused(frame, match):
    with pytest.raises(P.ProtocolError, match=match):
        P.decode([frame])


def test_unknown_extension_type_is_refused():
    with pytest.raises(P.ProtocolError, match="extension type 7"):
        P.decode([msgpack.packb((V, 4, (0, (1,), (msgpack.ExtType(7, b"x"),), (True,))))])


def test_header_size_limit():
    frames = P.encode(P.Error("x", "y" * 5000))
    with pytest.raises(P.ProtocolError, match="exceeds the limit"):
        P.decode(frames, max_header_bytes=1000)


def test_tuples_stay_tuples():
    out = _roundtrip(P.Tasks(0, (1,), (((1, 2), [3, 4]),), (True,)))
    assert out.tasks == (((1, 2), (3, 4)),)


@given(st.binary(max_size=200), st.lists(st.binary(max_size=50), max_size=3))
def test_random_bytes_never_crash_decoding(header, extra):
    try:
        msg = P.decode([header, *extra])
    except P.ProtocolError:
        return
    assert isinstance(msg, P.Message)


def test_no_pickle_in_sync_layer():
    root = pathlib.Path(P.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import pickle" not in text and "cloudpickle" not in text and "pickle.loads" not in text, path


def test_steps_with_stacked_dict_observations_round_trip_and_validate():
    obs = {"glyphs": np.arange(24, dtype=np.int16).reshape(2, 3, 4), "score": np.array([1.0, 2.0])}
    part = P.Steps(np.array([1, 1]), (5, 5), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2),
                   obs, None)
    (back,) = P.decode(P.encode(P.Report(0, (part,)))).updates
    assert back == part and back.obs["glyphs"].dtype == np.int16
    with pytest.raises(P.ProtocolError, match="first axis 2"):
        P.Steps(np.array([1, 1]), (5, 5), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2),
                {"glyphs": np.zeros((3, 4))}, None)
