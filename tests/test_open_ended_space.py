"""Tests for OpenEnded: content-hash identity, registry (bounded, LRU), custom encodings, mutation."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys

import msgpack
import numpy as np
import pytest

from magister.curricula._table import TaskIndex
from magister.task_spaces.base import stable_hash
from magister.task_spaces.open_ended import OpenEnded, content_hash, content_key


def roundtrip(x, use_list=False):
    return msgpack.unpackb(msgpack.packb(x), use_list=use_list, strict_map_key=False)


@dataclasses.dataclass
class Level:
    width: int
    walls: tuple[tuple[int, int], ...]


class Colour(enum.Enum):
    RED = 1
    BLUE = 2


def random_level(rng: np.random.Generator) -> Level:
    w = int(rng.integers(3, 8))
    n = int(rng.integers(0, 4))
    walls = tuple(sorted({(int(rng.integers(w)), int(rng.integers(w))) for _ in range(n)}))
    return Level(w, walls)


def add_wall(level: Level, rng: np.random.Generator) -> Level:
    wall = (int(rng.integers(level.width)), int(rng.integers(level.width)))
    return Level(level.width, tuple(sorted(set(level.walls) | {wall})))


class TestContentHash:
    def test_equal_content_equal_hash(self):
        assert content_hash(Level(3, ((0, 1),))) == content_hash(Level(3, ((0, 1),)))
        assert content_hash(Level(3, ((0, 1),))) != content_hash(Level(4, ((0, 1),)))
        assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
        assert content_hash({1, 2, 3}) == content_hash({3, 2, 1})
        assert content_hash(1) != content_hash(1.0) != content_hash(True)
        assert content_hash(Colour.RED) != content_hash(Colour.BLUE)

    def test_arrays_hash_by_dtype_shape_and_bytes(self):
        a = np.arange(6, dtype=np.int32).reshape(2, 3)
        assert content_hash(a) == content_hash(a.copy())
        assert content_hash(a) != content_hash(a.reshape(3, 2))
        assert content_hash(a) != content_hash(a.astype(np.int64))
        assert content_hash(a.T) == content_hash(np.ascontiguousarray(a.T))

    def test_hash_is_stable_across_processes(self):
        code = ("from magister.task_spaces.open_ended import content_hash;"
                "print(content_hash({'w': 3, 'walls': [(0, 1)], 's': 'x'}))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             check=True)
        assert out.stdout.strip() == content_hash({"w": 3, "walls": [(0, 1)], "s": "x"})

    def test_uses_base_stable_hash(self):
        assert content_hash((1, "a")) == stable_hash(content_key((1, "a")))
        assert len(content_hash(5)) == 24

    def test_opaque_object_is_rejected(self):
        with pytest.raises(TypeError, match="encode_fn"):
            content_key(object())


class TestRegistry:
    def test_sample_encode_decode(self):
        space = OpenEnded(random_level, seed=0)
        assert space.num_tasks is None and not space.indexed and space.uses_registry
        enc = space.sample_encoded(20)
        assert all(isinstance(e, str) for e in enc)
        assert len(space) == len(set(enc))
        for e in enc:
            level = space.decode(e)
            assert isinstance(level, Level) and space.encode(level) == e
            assert space.decode(roundtrip(e)) is level

    def test_decoding_unknown_task_raises(self):
        space = OpenEnded(random_level)
        for bad in ["0" * 24, 5, None, ("a",)]:
            assert not space.contains_encoded(bad)
            with pytest.raises(ValueError, match=r"not an encoded task of OpenEnded\(generator=random_level"):
                space.decode(bad)

    def test_seeded_generation(self):
        a = OpenEnded(random_level, seed=3).sample_encoded(10)
        assert OpenEnded(random_level, seed=3).sample_encoded(10) == a
        space = OpenEnded(random_level, seed=3)
        s1 = space.sample()
        space.seed(3)
        assert space.sample() == s1

    def test_add_remove_len(self):
        space = OpenEnded(random_level)
        e = space.add(Level(3, ()))
        assert len(space) == 1 and space.add(Level(3, ())) == e and len(space) == 1
        space.remove(e)
        assert len(space) == 0 and not space.contains_encoded(e)
        with pytest.raises(KeyError):
            space.remove(e)

    def test_bounded_registry_evicts_least_recently_used(self):
        space = OpenEnded(random_level, max_size=3)
        e = [space.add(Level(w, ())) for w in (3, 4, 5)]
        space.decode(e[0])  # touch the oldest: now e[1] is least recently used
        e4 = space.add(Level(6, ()))
        assert len(space) == 3 and space.evictions == 1
        assert space.registered == [e[2], e[0], e4]
        with pytest.raises(ValueError, match="evicted"):
            space.decode(e[1])
        space.add(Level(7, ()))
        assert not space.contains_encoded(e[2])

    @pytest.mark.parametrize("max_size", [0, -1, 1.5, True])
    def test_bad_max_size(self, max_size):
        with pytest.raises(ValueError, match="max_size"):
            OpenEnded(random_level, max_size=max_size)

    def test_contains(self):
        space = OpenEnded(random_level)
        assert space.contains(Level(3, ())) and not space.contains(object())
        strict = OpenEnded(random_level, contains_fn=lambda lv: isinstance(lv, Level) and lv.width < 6)
        assert strict.contains(Level(5, ())) and not strict.contains(Level(6, ()))
        with pytest.raises(ValueError, match="rejected by contains_fn"):
            strict.encode(Level(9, ()))

    def test_generator_producing_invalid_tasks(self):
        space = OpenEnded(lambda rng: object())
        with pytest.raises(ValueError, match="generator .* produced an invalid task"):
            space.sample_encoded(1)

    def test_state_dict_roundtrip(self):
        space = OpenEnded(random_level, seed=0, max_size=10)
        enc = space.sample_encoded(5)
        state = space.state_dict()
        fresh = OpenEnded(random_level, max_size=10)
        fresh.load_state_dict(state)
        assert fresh.registered == space.registered
        assert all(fresh.decode(e) == space.decode(e) for e in enc)
        assert fresh.sample_encoded(3) == space.sample_encoded(3)

    def test_taskindex(self):
        space = OpenEnded(random_level, seed=0)
        idx = TaskIndex(space)
        enc = space.sample_encoded(10)
        slots = idx.slots(enc)
        assert len(idx) == len(set(enc)) and all(idx.task(s) == e for s, e in zip(slots, enc))
        with pytest.raises(ValueError):
            idx.slot("f" * 24)


class TestCustomEncoding:
    def space(self, **kwargs):
        return OpenEnded(
            random_level,
            encode_fn=lambda lv: (lv.width, [list(w) for w in lv.walls]),
            decode_fn=lambda e: Level(int(e[0]), tuple(tuple(w) for w in e[1])),
            **kwargs,
        )

    def test_encoded_is_users_and_decodes_without_registry(self):
        space = self.space(seed=0)
        assert not space.uses_registry
        enc = space.sample_encoded(10)
        assert len(space) == 0
        other = self.space()  # e.g. a worker in another process, which never saw these tasks
        for e in enc:
            assert isinstance(e, tuple) and all(isinstance(w, tuple) for w in e[1])  # lists -> tuples
            assert other.decode(roundtrip(e, use_list=True)) == space.decode(e)
            assert other.decode(roundtrip(e)) == space.decode(e)

    def test_numpy_values_in_encoding_become_python(self):
        space = OpenEnded(lambda rng: rng.integers(0, 5, size=3), encode_fn=lambda a: a,
                          decode_fn=lambda e: np.array(e), seed=0)
        e = space.sample_encoded(1)[0]
        assert isinstance(e, tuple) and all(type(v) is int for v in e)
        assert space.encode(np.int64(4) * np.ones(2, dtype=np.int64)) == (4, 4)
        np.testing.assert_array_equal(space.decode(roundtrip(e, use_list=True)), np.array(e))

    def test_only_one_of_the_pair(self):
        with pytest.raises(ValueError, match="both encode_fn and decode_fn"):
            OpenEnded(random_level, encode_fn=lambda t: 1)

    def test_not_msgpackable_encoding(self):
        space = OpenEnded(random_level, encode_fn=lambda lv: {"level": lv}, decode_fn=lambda e: e)
        with pytest.raises(ValueError, match="not msgpack-able"):
            space.encode(Level(3, ()))
        big = OpenEnded(random_level, encode_fn=lambda lv: 2**70, decode_fn=lambda e: e)
        with pytest.raises(ValueError, match="64-bit"):
            big.encode(Level(3, ()))

    def test_decode_errors_become_value_errors(self):
        space = self.space()
        for bad in [None, (), "x"]:
            assert not space.contains_encoded(bad)
            with pytest.raises(ValueError, match="not an encoded task"):
                space.decode(bad)

    def test_remove_is_noop(self):
        space = self.space()
        space.remove((3, ()))
        assert len(space) == 0


class TestMutate:
    def test_mutate_registers_child(self):
        space = OpenEnded(random_level, mutate_fn=add_wall, seed=0)
        assert space.can_mutate
        parent = space.sample_encoded(1)[0]
        rng = np.random.default_rng(0)
        child = space.mutate(parent, rng)
        assert space.contains_encoded(child)
        p, c = space.decode(parent), space.decode(child)
        assert c.width == p.width and set(p.walls) <= set(c.walls)

    def test_no_mutate_fn(self):
        space = OpenEnded(random_level, seed=0)
        assert not space.can_mutate
        with pytest.raises(NotImplementedError, match="mutate_fn"):
            space.mutate(space.sample_encoded(1)[0], np.random.default_rng(0))

    def test_mutate_with_custom_encoding(self):
        space = TestCustomEncoding().space(mutate_fn=add_wall, seed=1)
        e = space.sample_encoded(1)[0]
        child = space.mutate(e, np.random.default_rng(2))
        assert space.decode(child).width == space.decode(e).width

    def test_describe(self):
        space = OpenEnded(random_level, describe_fn=lambda lv: f"{lv.width}x{lv.width} maze")
        assert space.describe(Level(5, ())) == "5x5 maze"
        assert OpenEnded(random_level).describe(7) == "7"
