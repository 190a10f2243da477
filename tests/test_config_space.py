"""Tests for ConfigSpace: axes, constraints, exact counts, held-out sets, descriptions, mutation."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from magister.curricula._table import TaskIndex
from magister.task_spaces.config import ConfigSpace
from magister.task_spaces.product import Product


def roundtrip(x, use_list=False):
    return msgpack.unpackb(msgpack.packb(x), use_list=use_list, strict_map_key=False)


def discogen_like(d: int, m: int, backends: list[str], **kwargs) -> ConfigSpace:
    """A DiscoGen-style domain: each dataset is meta-train/meta-test/excluded, each module editable/fixed.

    Valid: at least one meta-train and one meta-test dataset, and at least one editable module.
    """
    axes = {"backend": backends}
    axes |= {f"dataset{i}": ["train", "test", "exclude"] for i in range(d)}
    axes |= {f"module{j}": ["editable", "fixed"] for j in range(m)}

    def datasets_ok(t):
        roles = [t[f"dataset{i}"] for i in range(d)]
        return "train" in roles and "test" in roles

    def modules_ok(t):
        return any(t[f"module{j}"] == "editable" for j in range(m))

    return ConfigSpace(axes, constraints=[datasets_ok, modules_ok], **kwargs)


def discogen_count(d: int, m: int, b: int) -> int:
    """DiscoGen App. F.2: (3^d - 2^(d+1) + 1)(2^m - 1) b."""
    return (3**d - 2 ** (d + 1) + 1) * (2**m - 1) * b


def doors_space(**kwargs) -> ConfigSpace:
    """Hand-countable: doors < size over 4 sizes x 3 door counts."""
    axes = {"size": range(1, 5), "doors": [0, 1, 2]}
    return ConfigSpace(axes, constraints=[lambda t: t["doors"] < t["size"]], **kwargs)


class TestCounts:
    @pytest.mark.parametrize("d,m,b", [(2, 1, 1), (3, 2, 2), (4, 3, 1), (2, 4, 3)])
    def test_discogen_count_is_exact(self, d, m, b):
        space = discogen_like(d, m, [f"b{i}" for i in range(b)], seed=0)
        assert space.num_tasks == discogen_count(d, m, b)
        assert len(space.tasks) == space.num_tasks
        assert len({tuple(sorted(t.items())) for t in space.tasks}) == space.num_tasks

    def test_hand_counted_example(self):
        # doors < size: size 1 -> {0}; 2 -> {0,1}; 3 -> {0,1,2}; 4 -> {0,1,2}: 1 + 2 + 3 + 3 = 9.
        space = doors_space()
        assert space.num_tasks == 9 and space.num_combinations == 12
        assert space.encoded_tasks == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)]
        assert not space.contains({"size": 2, "doors": 2})

    def test_unconstrained_huge_space_is_not_enumerated(self):
        space = ConfigSpace({"a": range(10**6), "b": range(10**6), "c": ["x", "y"]}, seed=0)
        assert space.num_tasks == 2 * 10**12
        e = space.sample_encoded(5)
        assert all(space.contains_encoded(x) for x in e)
        with pytest.raises(TypeError, match="enumerate_limit"):
            _ = space.tasks

    def test_user_num_tasks(self):
        held = {"backend": "jax", "dataset0": "train", "dataset1": "test", "dataset2": "exclude",
                "module0": "editable", "module1": "fixed"}
        big = discogen_like(3, 2, ["jax", "torch"], enumerate_limit=10, num_tasks=72, holdout=[held])
        assert big.num_tasks == 71  # the given count minus the held-out task
        assert discogen_like(3, 2, ["jax"], enumerate_limit=10).num_tasks is None
        with pytest.raises(ValueError, match="num_tasks=70 was given but the space has 72 valid tasks"):
            discogen_like(3, 2, ["jax", "torch"], num_tasks=70)
        with pytest.raises(ValueError, match="num_tasks=5 was given but the space has 6 valid tasks"):
            ConfigSpace({"a": range(2), "b": range(3)}, num_tasks=5)
        with pytest.raises(ValueError, match="num_tasks=5 was given but the space has 10000 valid tasks"):
            ConfigSpace({"a": range(100), "b": range(100)}, num_tasks=5, enumerate_limit=10)


class TestEncoding:
    def test_roundtrip_and_msgpack(self):
        space = discogen_like(3, 2, ["jax", "torch"], seed=1)
        for e in space.sample_encoded(50):
            assert isinstance(e, tuple) and all(type(i) is int for i in e)
            task = space.decode(e)
            assert space.encode(task) == e
            assert space.decode(roundtrip(e)) == task
            assert space.decode(roundtrip(e, use_list=True)) == task
            assert space.decode(np.array(e)) == task

    def test_invalid_tasks_raise_value_error_naming_space(self):
        space = doors_space()
        cases = {
            "expected exactly the keys": {"size": 2},
            "not one of the axis values": {"size": 9, "doors": 0},
            "violates a constraint": {"size": 1, "doors": 2},
            "expected a dict": (1, 0),
        }
        for reason, task in cases.items():
            assert not space.contains(task)
            with pytest.raises(ValueError, match=reason) as info:
                space.encode(task)
            assert "ConfigSpace({size:4, doors:3}, constraints=1)" in str(info.value)
        for bad in [(0, 2), (4, 0), (0,), (0, 0, 0), (0.0, 0), (True, 0), "ab", None, [0, -1]]:
            assert not space.contains_encoded(bad)
            with pytest.raises(ValueError, match="not an encoded task of ConfigSpace"):
                space.decode(bad)

    def test_range_axis_rejects_non_ints(self):
        space = ConfigSpace({"n": range(3)})
        assert not space.contains({"n": 1.5}) and not space.contains({"n": True})
        assert space.contains({"n": np.int64(2)})

    def test_unhashable_axis_values(self):
        space = ConfigSpace({"shape": [[1, 2], [3, 4]], "k": ["a"]})
        assert space.encode({"shape": [3, 4], "k": "a"}) == (1, 0)
        assert space.decode((0, 0)) == {"shape": [1, 2], "k": "a"}

    @pytest.mark.parametrize(
        "axes,exc",
        [({}, ValueError), ({"a": []}, ValueError), ({"a": range(0)}, ValueError),
         ({"a": [1, 1]}, ValueError), ({1: [1]}, TypeError), ({"a": "xyz"}, TypeError),
         ({"a": [[1], [1]]}, ValueError)],
    )
    def test_bad_axes(self, axes, exc):
        with pytest.raises(exc):
            ConfigSpace(axes)

    def test_taskindex(self):
        space = discogen_like(2, 1, ["jax"], seed=0)
        idx = TaskIndex(space)
        e = space.sample_encoded(30)
        slots = idx.slots(e)
        assert len(idx) == len({tuple(x) for x in e})
        assert idx.slot(list(e[0])) == slots[0]


class TestSampling:
    def test_seeded_and_listing_does_not_change_sampling(self):
        space = ConfigSpace({"a": range(4), "b": ["x", "y", "z"]}, seed=9)
        first = space.sample_encoded(20)
        space.seed(9)
        _ = space.tasks
        assert space.sample_encoded(20) == first
        space.seed(9)
        assert space.sample() == space.decode(first[0])

    @pytest.mark.parametrize("enumerate_limit", [1_000_000, 10])
    def test_uniform_over_valid_tasks(self, enumerate_limit):
        # 9 valid tasks of 12; rejection sampling (limit 10) and enumeration (default) are both uniform.
        space = doors_space(enumerate_limit=enumerate_limit, seed=0)
        draws = 9000
        counts: dict[tuple, int] = {}
        for e in space.sample_encoded(draws):
            counts[e] = counts.get(e, 0) + 1
        assert len(counts) == 9 and all(space._valid_row(e) for e in counts)
        chi2 = sum((c - draws / 9) ** 2 / (draws / 9) for c in counts.values())
        assert chi2 < 26.1  # 8 degrees of freedom, 99.9% quantile

    def test_enumerated_constraints_admit_nothing(self):
        with pytest.raises(ValueError, match="constraints admit no task out of 6 combinations"):
            ConfigSpace({"a": range(2), "b": range(3)}, constraints=[lambda t: t["a"] > 5])

    def test_rejection_sampling_gives_up(self):
        space = ConfigSpace({"a": range(2), "b": range(3)}, constraints=[lambda t: False], enumerate_limit=1,
                            max_attempts=50)
        assert space.num_tasks is None
        with pytest.raises(ValueError, match="no valid task found in 50 consecutive attempts"):
            space.sample_encoded(1)

    def test_rare_acceptance_succeeds_with_enough_attempts(self):
        space = ConfigSpace({"a": range(30), "b": range(30)}, constraints=[lambda t: t["a"] == t["b"] == 7],
                            enumerate_limit=1, max_attempts=20_000, seed=0)
        assert space.sample_encoded(2) == [(7, 7), (7, 7)]

    @pytest.mark.parametrize("bad", [dict(max_attempts=0), dict(enumerate_limit=-1), dict(num_tasks=0),
                                     dict(constraints=[3])])
    def test_bad_settings(self, bad):
        with pytest.raises((ValueError, TypeError)):
            ConfigSpace({"a": range(2)}, **bad)


class TestHoldout:
    def space(self, **kwargs):
        held = [
            {"backend": "jax", "dataset0": "train", "dataset1": "test", "dataset2": "exclude",
             "module0": "editable", "module1": "editable"},
            {"backend": "torch", "dataset0": "test", "dataset1": "train", "dataset2": "train",
             "module0": "fixed", "module1": "editable"},
        ]
        return discogen_like(3, 2, ["jax", "torch"], holdout=held, **kwargs), held

    def test_heldout_never_sampled(self):
        space, held = self.space(seed=0)
        assert space.num_tasks == 70 and space.holdout == sorted(held, key=space.heldout.encode)
        held_codes = {space.heldout.encode(t) for t in held}
        sampled = set(space.sample_encoded(5000))
        assert sampled.isdisjoint(held_codes) and len(sampled) == 70
        for t in held:
            assert not space.contains(t) and space.is_heldout(t)
            with pytest.raises(ValueError, match="held out"):
                space.encode(t)

    def test_heldout_space_shares_encoding(self):
        space, held = self.space(seed=0)
        test = space.heldout
        assert test.num_tasks == 2
        assert {test.decode(e)["backend"] for e in test.sample_encoded(100)} == {"jax", "torch"}
        for t in held:
            e = test.encode(t)
            assert test.decode(e) == t and not space.contains_encoded(e)
        assert not test.contains(space.sample())

    def test_heldout_non_enumerated(self):
        space, held = self.space(seed=0, enumerate_limit=10)
        codes = {space.heldout.encode(t) for t in held}
        assert codes.isdisjoint(space.sample_encoded(3000))

    def test_holdout_must_be_valid(self):
        with pytest.raises(ValueError, match="held-out task .*violates a constraint"):
            discogen_like(2, 1, ["jax"], holdout=[{"backend": "jax", "dataset0": "train", "dataset1": "train",
                                                     "module0": "fixed"}])
        with pytest.raises(ValueError, match="every valid task is held out"):
            ConfigSpace({"a": range(2)}, holdout=[{"a": 0}, {"a": 1}])

    def test_no_holdout(self):
        with pytest.raises(ValueError, match="no held-out tasks"):
            _ = ConfigSpace({"a": range(2)}).heldout

    def test_split_none_uses_constructor_holdout(self):
        space, held = self.space(seed=0)
        train, test = space.split()
        assert train.num_tasks == 70 and test.num_tasks == 2

    def test_split_fraction_partitions(self):
        space, _ = self.space(seed=0)
        train, test = space.split(0.1, seed=3)
        assert test.num_tasks == 2 + 7 and train.num_tasks == 72 - 9
        tr, te = set(train.encoded_tasks), set(test.encoded_tasks)
        assert tr.isdisjoint(te) and len(tr | te) == 72
        assert te.isdisjoint(train.sample_encoded(3000))
        assert space.split(0.1, seed=3)[1].encoded_tasks == test.encoded_tasks
        with pytest.raises(ValueError, match="held-out space"):
            test.split(0.5)

    def test_split_count_and_explicit(self):
        base = ConfigSpace({"a": range(3), "b": range(2)}, seed=0)
        train, test = base.split(2, seed=0)
        assert (train.num_tasks, test.num_tasks) == (4, 2)
        train, test = base.split([{"a": 2, "b": 1}])
        assert test.tasks == [{"a": 2, "b": 1}] and train.num_tasks == 5
        for bad in [0, 6, 1.0, 0.0, True, "x", []]:
            with pytest.raises((ValueError, TypeError)):
                base.split(bad)

    def test_split_fraction_needs_enumeration(self):
        space = ConfigSpace({"a": range(10)}, constraints=[lambda t: True], enumerate_limit=5)
        with pytest.raises(TypeError, match="not enumerated"):
            space.split(0.5)
        train, test = space.split([{"a": 3}], seed=0)
        assert (3,) not in train.sample_encoded(500) and test.sample_encoded(3) == [(3,)] * 3


class TestDescribeAndMutate:
    def test_describe(self):
        space = ConfigSpace(
            {"lr": [0.001, 0.01], "batch": [32, 64], "opt": ["adam", "sgd"], "seed": range(3)},
            describe={"lr": "learning rate {value}", "batch": lambda v: f"{v} samples per batch",
                      "seed": None},
        )
        task = {"lr": 0.01, "batch": 64, "opt": "sgd", "seed": 1}
        assert space.describe(task) == "learning rate 0.01, 64 samples per batch, opt=sgd."
        with pytest.raises(ValueError):
            space.describe({"lr": 0.01})

    def test_describe_without_a_task_describes_the_space(self):
        # The README lists ConfigSpace's "describe() text": called as written, with no task, it used to
        # raise TypeError (a missing positional argument).
        space = ConfigSpace(
            {"length": [0.25, 0.5, 1.0, 2.0], "masscart": [0.5, 1.0, 2.0]},
            constraints=[lambda t: not (t["length"] == 2.0 and t["masscart"] == 0.5)],
            holdout=[{"length": 0.25, "masscart": 2.0}],
        )
        text = space.describe()
        assert text == ("10 tasks (12 combinations, 1 constraint, 1 held out): "
                        "length in [0.25, 0.5, 1.0, 2.0]; masscart in [0.5, 1.0, 2.0].")
        assert space.heldout.describe().startswith("1 held-out task (12 combinations, 1 constraint): ")
        assert ConfigSpace({"seed": range(10**9)}).describe() == \
            "1000000000 tasks (1000000000 combinations): seed in range(0, 1000000000)."
        big = ConfigSpace({"a": range(10**4), "b": list(range(20))}, constraints=[lambda t: t["b"] > 0],
                          enumerate_limit=10)
        assert big.describe() == ("an unknown number of tasks (200000 combinations, 1 constraint): "
                                  "a in range(0, 10000); b in [0, 1, 2, 3, 4, 5, 6, 7, ... (20 values)].")

    def test_describe_takes_decoded_or_encoded_tasks_and_rejects_others(self):
        space = ConfigSpace({"size": range(5, 9), "doors": [0, 1, 2]},
                            constraints=[lambda t: t["doors"] <= t["size"] - 6],
                            holdout=[{"size": 8, "doors": 2}])
        assert space.describe((2, 1)) == space.describe({"size": 7, "doors": 1}) == "size=7, doors=1."
        assert space.describe(np.array([2, 1])) == "size=7, doors=1."
        assert space.describe({"size": 8, "doors": 2}) == "size=8, doors=2."  # held out: still describable
        assert space.describe((3, 2)) == "size=8, doors=2."
        bad = [{"size": 7}, {"size": 7, "doors": 1, "x": 0}, {"size": 9, "doors": 0},
               {"size": 6, "doors": 2}, (2,), (4, 0), (0, 1), (2.0, 1), "size=7", 7]
        for task in bad:
            with pytest.raises(ValueError, match=r"is not in ConfigSpace\(") as err:
                space.describe(task)
            assert repr(task) in str(err.value)
        with pytest.raises(ValueError, match="not one of the held-out tasks"):
            space.heldout.describe((2, 1))

    @pytest.mark.parametrize("describe,exc", [({"nope": "x"}, ValueError), ({"a": "{val}"}, ValueError),
                                              ({"a": 3}, TypeError), ("a={value}", TypeError),
                                              (str, TypeError)])
    def test_bad_describe(self, describe, exc):
        with pytest.raises(exc):
            ConfigSpace({"a": range(2)}, describe=describe)

    def test_mutate_stays_valid_and_changes_one_axis(self):
        space, held = TestHoldout().space(seed=0)
        held_codes = {space.heldout.encode(t) for t in held}
        rng = np.random.default_rng(0)
        assert space.can_mutate
        for e in space.sample_encoded(300):
            child = space.mutate(e, rng)
            assert space.contains_encoded(child) and child not in held_codes
            assert sum(a != b for a, b in zip(e, child)) == 1

    def test_mutate_range_axes_step_to_neighbours(self):
        space = ConfigSpace({"size": range(3, 10), "colour": ["red", "green", "blue"]})
        rng = np.random.default_rng(0)
        jumps = set()
        for e in space.sample_encoded(400, rng=rng):
            child = space.mutate(e, rng)
            if child[0] != e[0]:
                assert abs(child[0] - e[0]) == 1 and child[1] == e[1]
                jumps.add(child[0] - e[0])
        assert jumps == {-1, 1}
        assert space.mutate((0, 0), rng)[0] in (0, 1) and space.mutate((6, 0), rng)[0] in (5, 6)

    def test_mutate_without_valid_neighbour(self):
        space = ConfigSpace({"a": range(3), "b": range(3)}, constraints=[lambda t: t["a"] == t["b"]],
                            max_attempts=20)
        with pytest.raises(ValueError, match="no valid mutation"):
            space.mutate((1, 1), np.random.default_rng(0))
        single = ConfigSpace({"a": [1]})
        assert not single.can_mutate
        with pytest.raises(NotImplementedError, match="nothing to mutate"):
            single.mutate((0,), np.random.default_rng(0))


def test_product_of_config_and_discrete():
    p = Product((ConfigSpace({"a": range(3)}), ConfigSpace({"b": ["x", "y"]})), seed=0)
    assert not p.indexed and p.num_tasks == 6
    e = p.sample_encoded(3)
    assert all(p.decode(roundtrip(x, use_list=True)) == p.decode(x) for x in e)


def _fewer_doors_than_size(task):
    return task["doors"] < task["size"]


def test_pickle_keeps_enumeration_and_holdout():
    import pickle

    space = ConfigSpace({"size": range(1, 5), "doors": [0, 1, 2]}, constraints=[_fewer_doors_than_size],
                        holdout=[{"size": 4, "doors": 2}], seed=3)
    copy = pickle.loads(pickle.dumps(space))
    assert copy.num_tasks == 8 and copy.encoded_tasks == space.encoded_tasks
    assert copy.sample_encoded(20) == space.sample_encoded(20)
    assert copy.heldout.tasks == [{"size": 4, "doors": 2}]
