"""Unit tests for Discrete, MultiDiscrete, Box and Product task spaces."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from magister.curricula._table import TaskIndex
from magister.task_spaces.base import task_key
from magister.task_spaces.box import Box
from magister.task_spaces.discrete import Discrete, split_indexed
from magister.task_spaces.multi_discrete import MultiDiscrete, ravel, unravel
from magister.task_spaces.open_ended import OpenEnded
from magister.task_spaces.product import Product


def roundtrip(x, use_list=False):
    return msgpack.unpackb(msgpack.packb(x), use_list=use_list, strict_map_key=False)


# -- Discrete -------------------------------------------------------------------------------------------
class TestDiscrete:
    def test_range_form(self):
        s = Discrete(5)
        assert s.num_tasks == 5 and s.indexed
        assert s.tasks == [0, 1, 2, 3, 4]
        assert s.encode(3) == 3 and s.decode(3) == 3
        assert s.encode(np.int64(2)) == 2
        assert s.contains(4) and not s.contains(5) and not s.contains(-1) and not s.contains(True)
        assert not s.contains(1.0)

    def test_explicit_tasks(self):
        s = Discrete(tasks=["a", "b", ("c", 1)])
        assert s.encode(("c", 1)) == 2 and s.decode(1) == "b"
        assert s.tasks == ["a", "b", ("c", 1)]
        assert not s.contains("z")

    def test_numpy_task_list(self):
        s = Discrete(tasks=np.array([10, 20, 30]))
        assert s.decode(1) == 20 and type(s.decode(1)) is int and s.encode(np.int64(30)) == 2

    def test_unhashable_tasks(self):
        s = Discrete(tasks=[{"w": 3}, {"w": 4}, [1, 2]])
        assert s.encode({"w": 4}) == 1 and s.encode([1, 2]) == 2
        assert not s.contains({"w": 5})

    def test_names_describe(self):
        s = Discrete(tasks=["x", "y"], names=["easy", "hard"])
        assert s.describe("y") == "hard" and s.names == ["easy", "hard"]
        with pytest.raises(ValueError, match="names"):
            Discrete(3, names=["a"])

    @pytest.mark.parametrize(
        "kwargs",
        [dict(), dict(n=3, tasks=[1]), dict(n=0), dict(n=-2), dict(n=2.5), dict(n=True), dict(n=2**63),
         dict(tasks=[]), dict(tasks=["a", "a"])],
    )
    def test_bad_construction(self, kwargs):
        with pytest.raises(ValueError):
            Discrete(**kwargs)

    def test_tasks_must_be_a_sequence(self):
        with pytest.raises(TypeError):
            Discrete(tasks="abc")

    @pytest.mark.parametrize("bad", [5, -1, 1.0, "1", None, True, (1,)])
    def test_invalid_encoded(self, bad):
        s = Discrete(5)
        assert not s.contains_encoded(bad)
        with pytest.raises(ValueError, match=r"Discrete\(n=5\)"):
            s.decode(bad)
        with pytest.raises(ValueError, match="not an encoded task"):
            s.check_encoded(bad)

    def test_invalid_decoded_names_task_and_space(self):
        s = Discrete(tasks=["a", "b"])
        with pytest.raises(ValueError, match=r"task 'zz' is not in Discrete\(tasks=\['a', 'b'\]"):
            s.encode("zz")

    def test_sample_encoded_is_one_call_and_reproducible(self):
        s = Discrete(7, seed=3)
        a = s.sample_encoded(50)
        s.seed(3)
        assert s.sample_encoded(50) == a
        assert all(type(x) is int for x in a)
        assert s.sample_encoded(4, rng=np.random.default_rng(1)) == np.random.default_rng(1).integers(
            0, 7, size=4).tolist()

    @pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
    def test_bad_k(self, k):
        with pytest.raises(ValueError, match="k must be"):
            Discrete(3).sample_encoded(k)

    def test_uniform_distribution_chi_square(self):
        n, draws = 20, 40_000
        counts = np.bincount(Discrete(n, seed=123).sample_encoded(draws), minlength=n)
        expected = draws / n
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        # 19 degrees of freedom: the 99.9% quantile is 43.8.
        assert chi2 < 43.8
        assert counts.sum() == draws

    def test_sample_decoded_for_explicit_tasks(self):
        s = Discrete(tasks=["p", "q"], seed=0)
        assert {s.sample() for _ in range(50)} == {"p", "q"}

    def test_taskindex_is_identity(self):
        s = Discrete(4)
        idx = TaskIndex(s)
        assert len(idx) == 4 and idx.slot(3) == 3

    def test_msgpack(self):
        s = Discrete(tasks=["a", "b", "c"], seed=0)
        for e in s.sample_encoded(10):
            assert s.decode(roundtrip(e)) == s.decode(e)


class TestDiscreteSplit:
    def test_fraction_partition(self):
        s = Discrete(100, seed=0)
        train, test = s.split(0.2, seed=5)
        assert (train.num_tasks, test.num_tasks) == (80, 20)
        tr, te = set(train.tasks), set(test.tasks)
        assert tr.isdisjoint(te) and tr | te == set(range(100))
        # Re-indexed: encodings are dense 0..m-1 and decode to the parent's decoded tasks.
        assert train.encoded_tasks == list(range(80))
        assert [train.parent_index(i) for i in range(80)] == sorted(tr)
        assert test.parent_indices.tolist() == sorted(te)
        assert train.parent_indices.tolist() == sorted(tr)
        for j in range(20):
            assert test.local_index(test.parent_index(j)) == j
        assert train.parent is s

    def test_same_seed_same_split(self):
        s = Discrete(50)
        assert s.split(10, seed=1)[1].tasks == s.split(10, seed=1)[1].tasks
        assert s.split(10, seed=1)[1].tasks != s.split(10, seed=2)[1].tasks

    def test_explicit_holdout_with_names(self):
        s = Discrete(tasks=["a", "b", "c", "d"], names=["A", "B", "C", "D"])
        train, test = s.split(["d", "b"])
        assert test.tasks == ["b", "d"] and train.tasks == ["a", "c"]
        assert test.encode("d") == 1 and test.parent_index(1) == 3
        assert train.describe("c") == "C"
        assert not train.contains("b") and train.contains("c")
        with pytest.raises(ValueError, match="held out"):
            train.local_index(1)
        with pytest.raises(ValueError, match="is not in"):
            train.encode("b")

    def test_held_out_never_sampled(self):
        train, test = Discrete(30, seed=0).split(0.3, seed=0)
        held = set(test.tasks)
        sampled = {train.decode(e) for e in train.sample_encoded(3000)}
        assert sampled.isdisjoint(held) and sampled == set(train.tasks)

    @pytest.mark.parametrize("holdout", [0.0, 1.0, 1.5, 0, 10, -1, [], ["nope"], list(range(10)), True, "ab"])
    def test_bad_holdout(self, holdout):
        with pytest.raises((ValueError, TypeError)):
            Discrete(10).split(holdout)

    def test_huge_space_split_is_lazy(self):
        n = 10**12
        train, test = Discrete(n).split([5, 6, n - 1])
        assert train.num_tasks == n - 3 and test.tasks == [5, 6, n - 1]
        # The complement view ranks and selects around the held-out indices exactly.
        assert train.parent_index(4) == 4 and train.parent_index(5) == 7
        assert train.local_index(7) == 5 and train.parent_index(train.num_tasks - 1) == n - 2
        train, test = Discrete(n).split(5, seed=3)
        held = set(test.tasks)
        assert len(held) == 5
        assert all(train.decode(e) not in held for e in train.sample_encoded(100))

    def test_complement_rank_select_by_hand(self):
        train, test = Discrete(8).split([1, 3, 4])
        assert train.tasks == [0, 2, 5, 6, 7]
        assert [train.local_index(x) for x in (0, 2, 5, 6, 7)] == [0, 1, 2, 3, 4]

    def test_split_of_split(self):
        train, _ = Discrete(20).split(5, seed=0)
        a, b = train.split(0.5, seed=0)
        assert a.num_tasks + b.num_tasks == 15
        assert set(a.tasks) | set(b.tasks) == set(train.tasks)


# -- MultiDiscrete --------------------------------------------------------------------------------------
class TestMultiDiscrete:
    def test_mixed_radix_by_hand(self):
        s = MultiDiscrete([3, 4, 2])
        assert s.num_tasks == 24 and s.indexed
        # (2, 1, 1) -> (2 * 4 + 1) * 2 + 1 = 19
        assert s.encode((2, 1, 1)) == 19 and s.decode(19) == (2, 1, 1)
        assert s.encode([0, 0, 1]) == 1 and s.encode(np.array([1, 0, 0])) == 8
        assert s.encode((2, 1, 1)) == int(np.ravel_multi_index((2, 1, 1), (3, 4, 2)))

    def test_ravel_unravel(self):
        assert ravel((1, 2), (3, 5)) == 7 and unravel(7, (3, 5)) == (1, 2)

    @pytest.mark.parametrize(
        "bad", [(3, 0, 0), (0, 0), (0, 0, 0, 0), (0, -1, 0), (0.0, 0, 0), (True, 0, 0), "abc"]
    )
    def test_invalid(self, bad):
        s = MultiDiscrete([3, 4, 2])
        assert not s.contains(bad)
        with pytest.raises(ValueError, match="MultiDiscrete"):
            s.encode(bad)

    @pytest.mark.parametrize("nvec", [[], [0, 2], [[2, 2]], [2.0, 3.0]])
    def test_bad_nvec(self, nvec):
        with pytest.raises(ValueError):
            MultiDiscrete(nvec)

    def test_sample_encoded_uniform_and_seeded(self):
        s = MultiDiscrete([2, 3], seed=0)
        e = s.sample_encoded(6000)
        counts = np.bincount(e, minlength=6)
        assert counts.min() > 850 and counts.max() < 1150
        s.seed(0)
        assert s.sample_encoded(6000) == e
        assert all(s.contains(s.sample()) for _ in range(20))

    def test_batch_helpers(self):
        s = MultiDiscrete([3, 4])
        tasks = np.array([[0, 0], [2, 3], [1, 2]])
        flat = s.encode_batch(tasks)
        assert flat.tolist() == [0, 11, 6]
        assert s.decode_batch(flat).tolist() == tasks.tolist()
        with pytest.raises(ValueError):
            s.encode_batch(np.array([[3, 0]]))

    def test_huge_space_falls_back_to_tuples(self):
        s = MultiDiscrete([2] * 70, seed=0)
        assert s.num_tasks == 2**70 and not s.indexed
        e = s.sample_encoded(3)
        assert all(isinstance(x, tuple) and len(x) == 70 for x in e)
        assert s.decode(roundtrip(e[0], use_list=True)) == e[0]

    def test_mutate_changes_exactly_one_coordinate(self):
        s = MultiDiscrete([3, 1, 4])
        rng = np.random.default_rng(0)
        for start in range(s.num_tasks):
            child = s.mutate(start, rng)
            diff = [a != b for a, b in zip(s.decode(start), s.decode(child))]
            assert sum(diff) == 1 and not diff[1]

    def test_mutate_single_task_space(self):
        assert not MultiDiscrete([1, 1]).can_mutate
        with pytest.raises(NotImplementedError):
            MultiDiscrete([1, 1]).mutate(0, np.random.default_rng(0))

    def test_split(self):
        train, test = MultiDiscrete([2, 3]).split([(1, 2), (0, 0)])
        assert test.tasks == [(0, 0), (1, 2)] and train.num_tasks == 4


# -- Box ------------------------------------------------------------------------------------------------
class TestBox:
    def test_shapes_and_bounds(self):
        b = Box([0.0, -1.0], [1.0, 1.0])
        assert b.shape == (2,) and b.num_tasks is None and not b.indexed
        assert Box(0, 1).shape == (1,)
        assert Box(0, 1, shape=(2, 3)).low.shape == (2, 3)
        assert b.contains([0.5, 0.0]) and b.contains(np.array([1.0, -1.0]))
        assert not b.contains([1.5, 0.0]) and not b.contains([0.5]) and not b.contains([np.nan, 0.0])
        assert not b.contains([[0.5, 0.0]]) and not b.contains(["a", "b"]) and not b.contains(True)

    def test_encode_decode(self):
        b = Box(0.0, 2.0, shape=(2, 2))
        x = np.array([[0.5, 1.0], [1.5, 2.0]])
        e = b.encode(x)
        assert e == (0.5, 1.0, 1.5, 2.0) and all(type(v) is float for v in e)
        np.testing.assert_array_equal(b.decode(e), x)
        np.testing.assert_array_equal(b.decode(list(e)), x)

    @pytest.mark.parametrize("bad", [(0.5, 1.0, 1.5), (0.5, 1.0, 1.5, 2.5), (0.5, 1.0, 1.5, float("inf")),
                                     (-0.1, 0, 0, 0), "abcd", (True, 0.0, 0.0, 0.0), 3.0])
    def test_never_clips(self, bad):
        b = Box(0.0, 2.0, shape=(2, 2))
        with pytest.raises(ValueError, match=r"Box\(low=0.0, high=2.0"):
            b.decode(bad)
        assert not b.contains_encoded(bad)

    def test_encode_out_of_bounds_raises(self):
        with pytest.raises(ValueError, match="is not in Box"):
            Box(0, 1, shape=(2,)).encode([0.5, 1.0001])

    @pytest.mark.parametrize(
        "args,kwargs",
        [((0, np.inf), {}), ((1, 0), {}), ((0, 1), {"dtype": np.int64}), (([0, 0], [1, 1, 1]), {}),
         ((0, 1), {"mutation_scale": -1.0})],
    )
    def test_bad_construction(self, args, kwargs):
        with pytest.raises(ValueError):
            Box(*args, **kwargs)

    def test_sample_encoded_within_bounds_and_uniform(self):
        b = Box([0.0, 10.0], [1.0, 20.0], seed=0)
        e = np.array(b.sample_encoded(20_000))
        assert e.shape == (20_000, 2)
        assert (e[:, 0] >= 0).all() and (e[:, 0] <= 1).all()
        assert (e[:, 1] >= 10).all() and (e[:, 1] <= 20).all()
        assert abs(e[:, 0].mean() - 0.5) < 0.01 and abs(e[:, 1].mean() - 15.0) < 0.1
        # Uniform: each quarter of [0, 1] holds about a quarter of the mass.
        q = np.histogram(e[:, 0], bins=4, range=(0, 1))[0] / len(e)
        assert np.abs(q - 0.25).max() < 0.015

    def test_seeded(self):
        b = Box(-1, 1, shape=(3,), seed=4)
        a = b.sample_encoded(5)
        b.seed(4)
        assert b.sample_encoded(5) == a
        b.seed(7)
        s1 = b.sample()
        b.seed(7)
        np.testing.assert_array_equal(b.sample(), s1)

    def test_float32(self):
        b = Box(-1, 1, shape=(3,), dtype=np.float32, seed=0)
        for e in b.sample_encoded(100):
            x = b.decode(e)
            assert x.dtype == np.float32
            assert b.encode(x) == e  # float32 values are exact in float64
        assert b.sample().dtype == np.float32

    def test_mutate_clips_and_moves(self):
        b = Box(0.0, 1.0, shape=(4,), mutation_scale=0.5)
        rng = np.random.default_rng(0)
        start = (0.0, 1.0, 0.5, 0.5)
        children = [b.mutate(start, rng) for _ in range(200)]
        arr = np.array(children)
        assert arr.min() >= 0.0 and arr.max() <= 1.0
        assert (arr[:, 0] == 0.0).mean() > 0.3  # about half the draws fall below 0 and are clipped
        assert all(b.contains_encoded(c) for c in children)
        assert np.std(arr[:, 2]) > 0.2

    def test_degenerate_box_cannot_mutate(self):
        for b in (Box(0, 1, mutation_scale=0.0), Box([1.0, 2.0], [1.0, 2.0])):
            assert not b.can_mutate
            with pytest.raises(NotImplementedError):
                b.mutate(b.sample_encoded(1)[0], np.random.default_rng(0))
        assert Box([1.0, 2.0], [1.0, 2.0]).sample_encoded(2) == [(1.0, 2.0), (1.0, 2.0)]

    def test_msgpack(self):
        b = Box(-1, 1, shape=(2, 2), seed=0)
        for e in b.sample_encoded(5):
            np.testing.assert_array_equal(b.decode(roundtrip(e)), b.decode(e))
            np.testing.assert_array_equal(b.decode(roundtrip(e, use_list=True)), b.decode(e))

    def test_taskindex(self):
        b = Box(0, 1, shape=(2,), seed=0)
        idx = TaskIndex(b)
        e = b.sample_encoded(2)
        assert idx.slot(e[0]) == 0 and idx.slot(e[1]) == 1 and idx.slot(list(e[0])) == 0


# -- Product --------------------------------------------------------------------------------------------
class TestProduct:
    def test_flat_index_by_hand(self):
        p = Product((Discrete(tasks=["a", "b", "c"]), MultiDiscrete([2, 2])))
        assert p.indexed and p.num_tasks == 12
        # ("b", (1, 0)) -> 1 * 4 + (1 * 2 + 0) = 6
        assert p.encode(("b", (1, 0))) == 6 and p.decode(6) == ("b", (1, 0))
        assert p.encode(["c", [1, 1]]) == 11
        assert p.tasks[6] == ("b", (1, 0)) and len(p.tasks) == 12
        assert p.encoded_tasks == list(range(12)) == [p.encode(t) for t in p.tasks]
        m = MultiDiscrete([2, 3])
        assert m.encoded_tasks == [m.encode(t) for t in m.tasks] == list(range(6))

    def test_dict_product(self):
        p = Product({"env": Discrete(tasks=["x", "y"]), "seed": Discrete(10)})
        assert p.encode({"seed": 3, "env": "y"}) == 13
        assert p.decode(13) == {"env": "y", "seed": 3}
        assert not p.contains({"env": "y"}) and not p.contains({"env": "y", "seed": 3, "z": 0})
        assert p.describe({"env": "x", "seed": 1}) == "env: x; seed: 1"

    def test_mixed_product_tuple_encoding(self):
        p = Product((Discrete(3), Box(0, 1, shape=(2,))), seed=0)
        assert not p.indexed and p.num_tasks is None
        e = p.sample_encoded(4)
        for x in e:
            assert isinstance(x, tuple) and isinstance(x[0], int) and isinstance(x[1], tuple)
            assert p.contains_encoded(x)
            dec = p.decode(roundtrip(x, use_list=True))
            assert dec[0] == x[0] and np.array_equal(dec[1], np.array(x[1]))
        assert p.encode((2, np.array([0.5, 0.25]))) == (2, (0.5, 0.25))
        with pytest.raises(TypeError, match="not enumerable"):
            _ = p.tasks

    def test_mixed_dict_product_msgpack(self):
        p = Product({"level": Discrete(5), "param": Box(0, 1, shape=(1,))}, seed=0)
        e = p.sample_encoded(1)[0]
        assert isinstance(e, dict)
        back = roundtrip(e)
        assert p.decode(back)["level"] == e["level"]

    def test_invalid_names_product(self):
        p = Product((Discrete(3), Discrete(2)))
        for bad in [(3, 0), (0,), (0, 0, 0), "ab", None]:
            assert not p.contains(bad)
            with pytest.raises(ValueError, match="Product"):
                p.encode(bad)
        with pytest.raises(ValueError, match="Product"):
            p.decode(6)

    def test_bad_construction(self):
        with pytest.raises(ValueError):
            Product(())
        with pytest.raises(TypeError):
            Product((Discrete(2), 3))
        with pytest.raises(TypeError):
            Product({1: Discrete(2)})

    def test_uniform_and_seeded(self):
        p = Product((Discrete(2), Discrete(3)), seed=0)
        e = p.sample_encoded(6000)
        counts = np.bincount(e, minlength=6)
        assert counts.min() > 850 and counts.max() < 1150
        p.seed(0)
        assert p.sample_encoded(6000) == e

    def test_huge_product_falls_back_to_tuples(self):
        p = Product((Discrete(2**40), Discrete(2**40)), seed=0)
        assert not p.indexed and p.num_tasks == 2**80
        e = p.sample_encoded(2)[0]
        assert isinstance(e, tuple) and p.decode(roundtrip(e, use_list=True)) == e

    def test_mutate_one_component(self):
        p = Product((Discrete(3), MultiDiscrete([4, 4]), Box(0, 1, shape=(1,), mutation_scale=0.2)), seed=0)
        assert p.can_mutate
        rng = np.random.default_rng(0)
        changed = []
        for e in p.sample_encoded(300):
            c = p.mutate(e, rng)
            assert c[0] == e[0]  # Discrete cannot mutate
            changed.append((c[1] != e[1], c[2] != e[2]))
        changed = np.array(changed)
        assert (changed.sum(axis=1) == 1).all()  # exactly one component changed
        assert 0.4 < changed[:, 0].mean() < 0.6

    def test_mutate_flat(self):
        p = Product((Discrete(2), MultiDiscrete([3, 3])))
        child = p.mutate(p.encode((1, (0, 0))), np.random.default_rng(0))
        d = p.decode(child)
        assert d[0] == 1 and sum(x != 0 for x in d[1]) == 1

    def test_mutate_unsupported(self):
        with pytest.raises(NotImplementedError):
            Product((Discrete(2), Discrete(3))).mutate(0, np.random.default_rng(0))

    def test_split_flat(self):
        p = Product((Discrete(4), Discrete(5)))
        train, test = p.split(0.25, seed=0)
        assert (train.num_tasks, test.num_tasks) == (15, 5)
        assert set(train.tasks).isdisjoint(test.tasks)
        assert set(train.tasks) | set(test.tasks) == set(p.tasks)
        assert all(p.encode(test.decode(j)) == test.parent_index(j) for j in range(5))
        with pytest.raises(NotImplementedError):
            Product((Discrete(2), Box(0, 1))).split(0.5)

    def test_split_indexed_requires_indexed(self):
        with pytest.raises(ValueError):
            split_indexed(Box(0, 1), 0.5)

    def test_product_with_open_ended(self):
        oe = OpenEnded(lambda rng: int(rng.integers(100)))
        p = Product((Discrete(2), oe), seed=0)
        e = p.sample_encoded(3)
        assert all(isinstance(x[1], str) for x in e)
        assert all(p.contains_encoded(x) for x in e)

    def test_repr_in_errors(self):
        p = Product((Discrete(2),))
        assert repr(p) == "Product((Discrete(n=2),))"


# -- all spaces -----------------------------------------------------------------------------------------
def _small_level(rng):
    return (int(rng.integers(5)), int(rng.integers(5)))


def test_float32_bounds_compare_in_dtype():
    b = Box(0.1, 1.0, shape=(1,), dtype=np.float32)
    assert b.contains([0.1]) and b.encode([0.1]) == (float(np.float32(0.1)),)
    assert not b.contains([1e300])  # overflows float32: rejected, not turned into inf


@pytest.mark.parametrize(
    "make",
    [lambda: Discrete(tasks=["a", "b"], names=["A", "B"]), lambda: Discrete(10).split(3)[0],
     lambda: MultiDiscrete([2, 3]), lambda: Box(0, 1, shape=(2,)),
     lambda: Product({"a": Discrete(2), "b": Box(0, 1)}), lambda: OpenEnded(_small_level)],
)
def test_spaces_pickle_and_keep_sampling(make):
    import pickle

    space = make()
    space.seed(5)
    enc = space.sample_encoded(4)
    copy = pickle.loads(pickle.dumps(space))
    assert repr(copy) == repr(space)
    assert [task_key(x) for x in copy.sample_encoded(3)] == [task_key(x) for x in space.sample_encoded(3)]
    assert all(copy.contains_encoded(e) for e in enc)
