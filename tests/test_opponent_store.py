"""OpponentStore: snapshots on disk, bounded eviction, leases, corruption and cross-process loading."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.opponents import CorruptSnapshotError, OpponentLoader, OpponentStore
from magister.task_spaces.opponent_ids import OpponentIdSpace


def jsave(obj, f):
    f.write(json.dumps(obj).encode())


def jload(f):
    return json.loads(f.read())


def jstore(path, **kw):
    kw.setdefault("max_count", None)
    return OpponentStore(path, save_fn=jsave, load_fn=jload, **kw)


def blob_save(obj, f):
    """Writes exactly ``obj`` bytes (obj is an int) so sizes are known."""
    f.write(b"x" * obj)


def blob_load(f):
    return len(f.read())


# -- round trips --------------------------------------------------------------------------------------------
def test_torch_state_dict_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(3, 2)
    store = OpponentStore(tmp_path, max_count=4)
    i = store.add(net.state_dict())
    loaded = store.load(i)
    assert i == 0 and set(loaded) == {"weight", "bias"}
    assert torch.equal(loaded["weight"], net.weight.detach())
    assert store.info(i)["format"] == "torch"
    assert store.info(i)["bytes"] == store.path(i).stat().st_size


def test_custom_pair_round_trip_and_index(tmp_path):
    store = jstore(tmp_path)
    ids = [store.add({"v": k}) for k in range(3)]
    assert ids == [0, 1, 2] and store.ids() == [0, 1, 2] and len(store) == 3
    assert store.load(1) == {"v": 1} and store.latest_id() == 2
    info = store.info(2)
    assert info["format"] == "custom" and info["leases"] == {} and info["pinned"] is False
    assert info["checksum"].startswith("blake2b:")
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["next_id"] == 3 and [e["id"] for e in index["snapshots"]] == [0, 1, 2]
    # no temporary files left behind
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_second_handle_sees_writes(tmp_path):
    writer = jstore(tmp_path, max_count=2)
    reader = jstore(tmp_path)
    writer.add({"a": 1})
    assert reader.ids() == [0]
    writer.add({"a": 2})
    writer.add({"a": 3})
    assert reader.ids() == [1, 2] and reader.load(2) == {"a": 3}
    assert reader.was_issued(0) and not reader.was_issued(3) and not reader.was_issued(-1)


# -- eviction -----------------------------------------------------------------------------------------------
def test_max_count_keeps_newest(tmp_path):
    store = jstore(tmp_path, max_count=3)
    for k in range(6):
        store.add(k)
    assert store.ids() == [3, 4, 5]
    files = sorted(p.name for p in tmp_path.glob("snapshot-*"))
    assert files == [f"snapshot-0000000{i}.bin" for i in (3, 4, 5)]


def test_max_bytes_evicts_oldest_until_within(tmp_path):
    store = OpponentStore(tmp_path, max_count=None, max_bytes=100, save_fn=blob_save, load_fn=blob_load)
    for size in (40, 30, 20, 50):  # after the 50: 140 > 100 -> drop 40 (100 ok)
        store.add(size)
    assert store.ids() == [1, 2, 3] and store.total_bytes() == 100
    store.add(60)  # 160 -> drop 30 (130) -> drop 20 (110) -> drop 50 (60)
    assert store.ids() == [4] and store.load(4) == 60


def test_newest_is_kept_even_if_over_budget(tmp_path, caplog):
    store = OpponentStore(tmp_path, max_count=None, max_bytes=10, save_fn=blob_save, load_fn=blob_load)
    store.add(5)
    with caplog.at_level("WARNING"):
        store.add(50)
    assert store.ids() == [1]
    assert "over its limits" in caplog.text


def test_keep_every_keeps_configured_set(tmp_path):
    store = jstore(tmp_path, max_count=2, keep_every=3)
    for k in range(10):
        store.add(k)
    # kept for good: 0, 3, 6, 9; rolling window of the 2 newest others: 7, 8
    assert store.ids() == [0, 3, 6, 7, 8, 9]


def test_pin_and_unpin(tmp_path):
    store = jstore(tmp_path, max_count=2)
    store.add("a")
    store.pin(0)
    for k in range(4):
        store.add(k)
    assert store.ids() == [0, 3, 4]
    store.unpin(0)
    assert store.evict() == [0]
    assert store.ids() == [3, 4]


def test_leased_snapshot_is_never_evicted(tmp_path):
    store = jstore(tmp_path, max_count=2)
    store.add("first")
    store.acquire(0)
    store.acquire(0)
    assert store.leases(0) == 2
    for k in range(5):
        store.add(k)
    assert 0 in store and store.load(0) == "first"
    assert store.ids() == [0, 5]  # a leased snapshot still counts towards max_count
    with pytest.raises(ValueError, match="leased"):
        store.remove(0)
    store.release(0)
    store.add("x")
    assert store.ids() == [0, 6]  # one lease still held
    store.release(0)
    assert store.leases(0) == 0
    store.add("y")
    assert store.ids() == [6, 7] and not (tmp_path / "snapshot-00000000.bin").exists()


def test_lease_context_manager(tmp_path):
    store = jstore(tmp_path, max_count=1)
    store.add({"p": 1})
    with store.lease(0) as snap:
        assert snap == {"p": 1} and store.leases(0) == 1
        store.add({"p": 2})
        assert store.ids() == [0, 1]
    assert store.leases(0) == 0


def test_stale_lease_of_dead_process_is_dropped(tmp_path):
    store = jstore(tmp_path, max_count=1)
    store.add("old")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    store.acquire(0, owner=f"{socket.gethostname()}:{proc.pid}")
    store.acquire(0, owner="some-other-host:1")  # another host: cannot be checked, kept
    store.add("new")
    assert store.info(0)["leases"] == {"some-other-host:1": 1}
    store.release(0, owner="some-other-host:1")
    store.add("newer")
    assert store.ids() == [2]


def test_lease_taken_while_being_evicted_keeps_the_file(tmp_path, monkeypatch):
    """The lease appears after the evictor looked for leases: the id leaves the index, the file stays."""
    store = jstore(tmp_path, max_count=1)
    store.add({"v": 0})
    real, calls = store._leased_ids, []

    def late_lease(drop_stale=True):
        calls.append(drop_stale)
        if len(calls) == 1:  # the evictor's check runs before the worker's lease exists
            return set()
        return real(drop_stale)

    monkeypatch.setattr(store, "_leased_ids", late_lease)
    entry = store.acquire(0)
    store.add({"v": 1})  # evicts 0 from the index; the deletion pass afterwards sees the lease
    assert len(calls) == 2
    assert store.ids() == [1] and (tmp_path / "snapshot-00000000.bin").exists()
    with pytest.raises(KeyError, match="opponent id 0"):
        store.load(0)  # not in the index any more ...
    assert store.load_leased(entry) == {"v": 0}  # ... but the lease holder can still load it
    store.release(0)  # the last user of an evicted snapshot deletes its file
    assert not (tmp_path / "snapshot-00000000.bin").exists() and store.leases(0) == 0


def test_acquire_of_an_id_evicted_meanwhile_leaves_no_lease(tmp_path, monkeypatch):
    store = jstore(tmp_path, max_count=1)
    store.add(0)
    store.add(1)
    real, calls = store._entry, []

    def stale_first_look(i, index=None):
        calls.append(i)
        return {"id": i} if len(calls) == 1 else real(i, index)  # the first look still saw 0 listed

    monkeypatch.setattr(store, "_entry", stale_first_look)
    with pytest.raises(KeyError, match="opponent id 0 was evicted"):
        store.acquire(0)
    assert store.leases(0) == 0 and list((tmp_path / "leases").iterdir()) == []


def test_remove(tmp_path):
    store = jstore(tmp_path)
    store.add(1)
    store.add(2)
    store.remove(0)
    assert store.ids() == [1] and store.was_issued(0)


# -- bad input ----------------------------------------------------------------------------------------------
def test_unknown_id_names_id_and_known_ids(tmp_path):
    store = jstore(tmp_path)
    store.add(1)
    store.add(2)
    for op in (store.load, store.acquire, store.path, store.pin, store.info):
        with pytest.raises(KeyError, match=r"opponent id 7 .*known ids: \[0, 1\]"):
            op(7)
    with pytest.raises(TypeError, match="must be an int"):
        store.load("0")
    with pytest.raises(TypeError, match="must be an int"):
        store.load(True)
    with pytest.raises(ValueError, match="holds no lease"):
        store.release(0)


def test_corrupted_snapshot_file(tmp_path):
    store = jstore(tmp_path)
    store.add({"weights": [1, 2, 3]})
    path = store.path(0)
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match=r"opponent 0 is corrupted: .*snapshot-00000000\.bin"):
        store.load(0)
    path.write_bytes(bytes(data[:5]))  # truncated
    with pytest.raises(CorruptSnapshotError, match="opponent 0"):
        store.load(0)
    path.unlink()
    with pytest.raises(CorruptSnapshotError, match="missing"):
        store.load(0)


def test_undeserialisable_snapshot(tmp_path):
    def bad_load(f):
        raise RuntimeError("boom")

    store = OpponentStore(tmp_path, max_count=None, save_fn=jsave, load_fn=bad_load)
    store.add([1])
    with pytest.raises(CorruptSnapshotError, match=r"opponent 0 .*could not be deserialised: boom"):
        store.load(0)


def test_custom_snapshot_needs_matching_load_fn(tmp_path):
    jstore(tmp_path).add({"a": 1})
    plain = OpponentStore(tmp_path, max_count=None)
    with pytest.raises(ValueError, match="custom save_fn"):
        plain.load(0)


def test_bad_index_and_missing_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="no opponent store"):
        OpponentStore(tmp_path / "nope", max_count=1, create=False)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        OpponentStore(tmp_path, max_count=1)
    (tmp_path / "index.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a magister opponent store"):
        OpponentStore(tmp_path, max_count=1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_count": 0}, "max_count"),
        ({"max_count": 2, "max_bytes": -5}, "max_bytes"),
        ({"max_count": 2, "keep_every": 0}, "keep_every"),
        ({"max_count": 1.5}, "max_count"),
        ({"max_count": 2, "save_fn": jsave}, "both save_fn and load_fn"),
        ({"max_count": 2, "lock_timeout": 0}, "lock_timeout"),
    ],
)
def test_bad_constructor_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        OpponentStore(tmp_path, **kwargs)


def test_lock_timeout(tmp_path):
    import fcntl

    store = jstore(tmp_path, lock_timeout=0.05)
    fd = os.open(tmp_path / "index.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(TimeoutError, match="could not lock"):
            store.add(1)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert store.add(1) == 0


# -- worker side --------------------------------------------------------------------------------------------
def test_opponent_loader_caches_and_moves_its_lease(tmp_path):
    calls = []

    def counting_load(f):
        calls.append(1)
        return jload(f)

    store = jstore(tmp_path)
    store.add({"k": 0})
    store.add({"k": 1})
    loader = OpponentLoader(tmp_path, load_fn=counting_load, make_agent=lambda s: ("agent", s["k"]))
    assert loader.get(0) == ("agent", 0) and loader.get(0) == ("agent", 0)
    assert len(calls) == 1 and store.leases(0) == 1
    assert loader.get(1) == ("agent", 1)
    assert store.leases(0) == 0 and store.leases(1) == 1
    with pytest.raises(KeyError, match="opponent id 5"):
        loader.get(5)
    assert loader.current_id == 1 and store.leases(1) == 1  # a failed switch keeps the current opponent
    loader.close()
    assert store.leases(1) == 0
    with pytest.raises(TypeError, match="only loads"):
        loader.store.add({"x": 1})


def test_opponent_loader_fallback_to_latest(tmp_path, caplog):
    store = jstore(tmp_path, max_count=2)
    for k in range(3):
        store.add({"k": k})
    strict = OpponentLoader(tmp_path, load_fn=jload)
    with pytest.raises(KeyError, match="opponent id 0"):
        strict.get(0)
    with OpponentLoader(tmp_path, load_fn=jload, fallback_to_latest=True) as loader:
        with caplog.at_level("WARNING"):
            assert loader.get(0) == {"k": 2}
        assert loader.current_id == 2 and store.leases(2) == 1 and "evicted" in caplog.text
        with pytest.raises(KeyError, match="opponent id 9"):  # never issued: no fallback
            loader.get(9)
    assert store.leases(2) == 0


def _worker(directory, opponent_id, results, release_event):
    """Runs in a spawned process: load by id from the directory only, hold a lease until told."""
    loader = OpponentLoader(directory)
    sd = loader.get(opponent_id)
    results.put(float(sd["weight"].sum()))
    release_event.wait(timeout=60)
    loader.close()


def test_snapshot_loaded_and_leased_in_spawned_process(tmp_path):
    torch = pytest.importorskip("torch")
    store = OpponentStore(tmp_path, max_count=1)
    net = torch.nn.Linear(4, 4)
    with torch.no_grad():
        net.weight.fill_(0.5)
    store.add(net.state_dict())
    ctx = mp.get_context("spawn")
    results, release = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_worker, args=(str(tmp_path), 0, results, release))
    proc.start()
    try:
        assert results.get(timeout=120) == pytest.approx(8.0)
        assert store.leases(0) == 1
        store.add(net.state_dict())
        store.add(net.state_dict())
        assert store.ids() == [0, 2]  # the leased snapshot survives; 1 was evicted
    finally:
        release.set()
        proc.join(timeout=60)
    assert proc.exitcode == 0
    assert store.leases(0) == 0
    assert store.evict() == [0]


# -- id space -----------------------------------------------------------------------------------------------
def test_opponent_id_space(tmp_path):
    store = jstore(tmp_path, max_count=2)
    space = OpponentIdSpace(store, seed=0)
    with pytest.raises(RuntimeError, match="no opponents stored"):
        space.sample()
    for k in range(3):
        store.add(k)
    assert space.tasks == [1, 2] and space.num_tasks is None and not space.indexed
    assert space.contains(2) and not space.contains(0) and not space.contains("2")
    assert space.encode(1) == 1
    with pytest.raises(ValueError, match=r"opponent id 0 is not in"):
        space.decode(0)
    assert set(space.sample_encoded(50)) == {1, 2}


# -- property: eviction invariants over random operation sequences ------------------------------------------
@given(
    ops=st.lists(st.tuples(st.sampled_from(["add", "acquire", "release", "pin"]), st.integers(0, 30)),
                 min_size=1, max_size=25),
    max_count=st.integers(1, 4),
)
def test_eviction_invariants(tmp_path_factory, ops, max_count):
    store = jstore(tmp_path_factory.mktemp("s"), max_count=max_count)
    leased: dict[int, int] = {}
    pinned: set[int] = set()
    added: list[int] = []
    for op, x in ops:
        before = store.ids()
        if op == "add" or not before:
            new = store.add(x)
            added.append(new)
            ids = store.ids()
            evicted_now = set(before) - set(ids)
            rolling = [i for i in ids if i not in pinned]
            free = [i for i in rolling if i not in leased and i != new]
            # the oldest unprotected go first, and only while over the limit
            if evicted_now and free:
                assert max(evicted_now) < min(free)
            assert len(rolling) <= max_count or not free
            if evicted_now:
                assert len(rolling) >= max_count  # never evicts below the limit
        elif op == "acquire":
            i = before[x % len(before)]
            store.acquire(i)
            leased[i] = leased.get(i, 0) + 1
        elif op == "release" and leased:
            i = sorted(leased)[x % len(leased)]
            store.release(i)
            leased[i] -= 1
            if not leased[i]:
                del leased[i]
        elif op == "pin":
            i = before[x % len(before)]
            store.pin(i)
            pinned.add(i)
        ids = store.ids()
        assert set(leased) <= set(ids) and pinned <= set(ids)
        assert added[-1] == ids[-1]  # newest always present
