"""Property tests over randomly generated task spaces of every kind (hypothesis)."""

from __future__ import annotations

import itertools

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.task_spaces.base import TaskSpace, task_key
from magister.task_spaces.box import Box
from magister.task_spaces.config import ConfigSpace
from magister.task_spaces.discrete import Discrete
from magister.task_spaces.multi_discrete import MultiDiscrete
from magister.task_spaces.open_ended import OpenEnded
from magister.task_spaces.product import Product

seeds = st.integers(0, 2**32 - 1)


def same(a, b) -> bool:
    """Deep equality that understands numpy arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b)) and np.shape(a) == np.shape(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def msgpack_roundtrip(x, use_list):
    return msgpack.unpackb(msgpack.packb(x), use_list=use_list, strict_map_key=False)


@st.composite
def discrete_spaces(draw):
    if draw(st.booleans()):
        return Discrete(draw(st.integers(1, 60)), seed=draw(seeds))
    tasks = draw(st.lists(st.one_of(st.text(max_size=4), st.integers(-50, 50), st.tuples(st.integers(0, 3))),
                          min_size=1, max_size=12, unique=True))
    return Discrete(tasks=tasks, seed=draw(seeds))


@st.composite
def multi_discrete_spaces(draw):
    return MultiDiscrete(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)), seed=draw(seeds))


@st.composite
def box_spaces(draw):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    size = int(np.prod(shape, dtype=np.int64))
    low = np.array(draw(st.lists(st.floats(-100, 100), min_size=size, max_size=size))).reshape(shape)
    width = np.array(draw(st.lists(st.floats(0, 50), min_size=size, max_size=size))).reshape(shape)
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    return Box(low, low + width, shape=shape, dtype=dtype, seed=draw(seeds))


axis_values = st.one_of(
    st.lists(st.integers(-20, 20), min_size=1, max_size=4, unique=True),
    st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=4, unique=True),
    st.builds(lambda start, n: range(start, start + n), st.integers(-5, 5), st.integers(1, 4)),
)


@st.composite
def config_spaces(draw, with_holdout=True):
    names = draw(st.lists(st.sampled_from(["size", "doors", "keys", "mode"]), min_size=1, max_size=3,
                          unique=True))
    axes = {n: draw(axis_values) for n in names}
    constraints = []
    first = axes[names[0]]
    if len(first) > 1 and draw(st.booleans()):
        banned = first[draw(st.integers(0, len(first) - 1))]
        constraints.append(lambda t, n=names[0], v=banned: t[n] != v)
    valid = [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]
    valid = [t for t in valid if all(c(t) for c in constraints)]
    holdout = []
    if with_holdout and len(valid) > 1 and draw(st.booleans()):
        k = draw(st.integers(1, len(valid) - 1))
        holdout = draw(st.permutations(valid))[:k]
    space = ConfigSpace(axes, constraints=constraints, holdout=holdout,
                        enumerate_limit=draw(st.sampled_from([1, 1_000_000])), seed=draw(seeds))
    return space, valid, holdout


@st.composite
def open_ended_spaces(draw):
    width = draw(st.integers(1, 5))

    def gen(rng, width=width):
        return tuple(int(x) for x in rng.integers(0, 4, size=width))

    if draw(st.booleans()):
        return OpenEnded(gen, seed=draw(seeds))
    return OpenEnded(gen, encode_fn=list, decode_fn=tuple, seed=draw(seeds))


leaf_spaces = st.one_of(
    discrete_spaces(), multi_discrete_spaces(), box_spaces(), open_ended_spaces(),
    config_spaces(with_holdout=False).map(lambda x: x[0]),
)


@st.composite
def product_spaces(draw):
    comps = draw(st.lists(leaf_spaces, min_size=1, max_size=3))
    if draw(st.booleans()):
        return Product({f"c{i}": c for i, c in enumerate(comps)}, seed=draw(seeds))
    return Product(comps, seed=draw(seeds))


any_space = st.one_of(leaf_spaces, product_spaces(), config_spaces().map(lambda x: x[0]))


# -- properties ---------------------------------------------------------------------------------------
@given(any_space)
def test_sample_contains_and_roundtrips(space: TaskSpace):
    for _ in range(5):
        task = space.sample()
        assert space.contains(task)
        enc = space.encode(task)
        assert space.contains_encoded(enc)
        assert same(space.decode(enc), task)
        assert task_key(space.encode(space.decode(enc))) == task_key(enc)


@given(any_space, st.integers(1, 20))
def test_sample_encoded_contained_and_survives_msgpack(space: TaskSpace, k: int):
    encs = space.sample_encoded(k)
    assert len(encs) == k
    for enc in encs:
        assert space.contains_encoded(enc)
        if space.indexed:
            assert type(enc) is int and 0 <= enc < space.num_tasks
        decoded = space.decode(enc)
        for use_list in (False, True):
            back = msgpack_roundtrip(enc, use_list)
            assert task_key(back) == task_key(enc)
            assert same(space.decode(back), decoded)


@given(any_space, seeds, st.integers(1, 10))
def test_seeded_sampling_is_reproducible(space: TaskSpace, seed: int, k: int):
    space.seed(seed)
    first = space.sample_encoded(k)
    space.seed(seed)
    assert [task_key(x) for x in space.sample_encoded(k)] == [task_key(x) for x in first]
    a = space.sample_encoded(k, rng=np.random.default_rng(seed))
    b = space.sample_encoded(k, rng=np.random.default_rng(seed))
    assert [task_key(x) for x in a] == [task_key(x) for x in b]


@given(any_space)
def test_invalid_tasks_raise_value_error(space: TaskSpace):
    for bad in [object(), "not-a-task", -1, 2**70, (object(),)]:
        if space.contains_encoded(bad):  # e.g. a Discrete over strings has no encoded "not-a-task"
            continue
        with pytest.raises(ValueError, match="not an encoded task"):
            space.decode(bad)
        with pytest.raises(ValueError, match="not an encoded task"):
            space.check_encoded(bad)
    bad_task = object()
    assert not space.contains(bad_task)
    with pytest.raises(ValueError, match=r"is not in|not an encoded"):
        space.encode(bad_task)


@given(st.integers(2, 80), st.floats(0.05, 0.95), seeds)
def test_discrete_split_never_samples_held_out(n: int, fraction: float, seed: int):
    train, test = Discrete(n, seed=seed).split(fraction, seed=seed)
    held = set(test.tasks)
    assert train.num_tasks + test.num_tasks == n and held.isdisjoint(train.tasks)
    assert all(train.decode(e) not in held for e in train.sample_encoded(200))
    assert all(train.decode(j) == train.parent_index(j) for j in range(train.num_tasks))
    assert all(test.local_index(test.parent_index(j)) == j for j in range(test.num_tasks))


@given(config_spaces())
def test_config_holdout_never_sampled_and_count_exact(args):
    space, valid, holdout = args
    held_keys = {tuple(sorted(t.items(), key=lambda kv: kv[0])) for t in holdout}

    def key(t):
        return tuple(sorted(t.items(), key=lambda kv: kv[0]))

    if space.num_tasks is not None:
        assert space.num_tasks == len(valid) - len(held_keys)
    for e in space.sample_encoded(100):
        assert key(space.decode(e)) not in held_keys
    for t in holdout:
        assert not space.contains(t)
    if holdout:
        test = space.heldout
        assert test.num_tasks == len(held_keys)
        assert {key(test.decode(e)) for e in test.sample_encoded(50)} <= held_keys


@given(st.lists(st.one_of(discrete_spaces(), multi_discrete_spaces()), min_size=1, max_size=3))
def test_flat_index_products_round_trip(components):
    product = Product(components)
    assert product.indexed and product.num_tasks == int(np.prod([c.num_tasks for c in components]))
    radices = [c.num_tasks for c in components]
    for flat in range(min(product.num_tasks, 300)):
        task = product.decode(flat)
        assert product.encode(task) == flat
        digits = [c.encode(t) for c, t in zip(components, task)]
        assert int(np.ravel_multi_index(digits, radices)) == flat


@given(any_space, seeds)
def test_mutate_stays_in_space_and_describe_is_text(space: TaskSpace, seed: int):
    rng = np.random.default_rng(seed)
    for enc in space.sample_encoded(5):
        assert isinstance(space.describe(space.decode(enc)), str)
        if not space.can_mutate:
            with pytest.raises(NotImplementedError):
                space.mutate(enc, rng)
            continue
        try:
            child = space.mutate(enc, rng)
        except ValueError as exc:  # a ConfigSpace task whose every one-axis neighbour is invalid
            assert "no valid mutation" in str(exc)
            continue
        assert space.contains_encoded(child)
        assert task_key(msgpack_roundtrip(child, True)) == task_key(child)
