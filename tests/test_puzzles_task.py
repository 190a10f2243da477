"""The puzzle task space (encoding, ladders, mutate, split) and the puzzle task wrapper."""

from __future__ import annotations

from collections import Counter

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister.examples.puzzles.sixteen import SixteenEnv
from magister.examples.puzzles.task import (
    LADDERS,
    PUZZLE_NAMES,
    PuzzleTask,
    PuzzleTaskSpace,
    PuzzleTaskWrapper,
    depth_ladder,
    ladder,
    make_puzzle_env,
    parse_task,
)
from magister.task_spaces.base import task_key

# easiest setting and human-easy preset of the PUZZLES benchmark (Table 7)
PAPER = {
    "flip": ("3x3c", "3x3c"), "flood": ("3x3c6m5", "12x12c6m5"), "sixteen": ("2x3", "3x3"),
    "fifteen": ("2x2", "4x4"), "netslide": ("2x3b1", "3x3b1"), "pegs": ("4x4random", "5x7cross"),
    "samegame": ("2x3c3s2", "5x5c3s2"), "untangle": ("4", "6"),
}


def _roundtrip(x):
    return msgpack.unpackb(msgpack.packb(x), raw=False)


def test_ladders_follow_the_paper():
    assert set(LADDERS) == set(PUZZLE_NAMES) == set(PAPER)
    for puzzle, (easiest, human) in PAPER.items():
        rungs = ladder(puzzle)
        assert rungs[0] == easiest and human in rungs
        assert rungs.index(human) < len(rungs) - 1 or puzzle == "flood"   # larger sizes after the preset
        space = PuzzleTaskSpace({puzzle: rungs})                  # every rung fits the default max size
        assert len(space.choices) == len(rungs)
    with pytest.raises(ValueError, match="unknown puzzle"):
        ladder("sudoku")


def test_depth_ladders():
    assert depth_ladder("flip", "3x3c") == ["3x3cp1", "3x3cp2", "3x3cp3", "3x3cp5", "3x3cp8"]
    assert depth_ladder("fifteen", "2x3", [1, 4]) == ["2x3m1", "2x3m4", "2x3"]
    assert depth_ladder("netslide", "3x3b1", [2]) == ["3x3b1m2", "3x3b1"]
    assert depth_ladder("flood", "5x5c6m5") == [f"5x5c6m{m}" for m in (10, 5, 3, 2, 1, 0)]
    with pytest.raises(ValueError, match="no scramble-depth knob"):
        depth_ladder("pegs", "4x4random")


def test_encode_decode_roundtrip_and_msgpack():
    space = PuzzleTaskSpace(seed=0)
    for task in [PuzzleTask("flip", "5x5cp3", 17), PuzzleTask("netslide", "4x4wb0.5m2", 0),
                 PuzzleTask("samegame", "5x5c3s2", 2**31 - 2), PuzzleTask("pegs", "7x7cross", 5)]:
        enc = space.encode(task)
        back = _roundtrip(enc)
        assert space.decode(back) == task and task_key(back) == task_key(enc)
        assert str(parse_task(str(task))) == str(task)
    assert space.encode(PuzzleTask("flip", "3x3c", 1)) == (0, (3, 3, 0, 0), 1)


def test_contains_rejects_bad_tasks():
    space = PuzzleTaskSpace({"flip": ["3x3c"], "sixteen": ["2x3"]}, seed_range=(0, 100))
    assert space.contains(PuzzleTask("flip", "6x6r", 99))
    bad = [PuzzleTask("flip", "7x7c", 1),              # larger than the max size 6x6
           PuzzleTask("flip", "3x3c", 100),            # seed out of range
           PuzzleTask("flood", "3x3c6m5", 1),          # puzzle not in the space
           PuzzleTask("flip", "3x3c#4", 1),            # seed inside the params
           PuzzleTask("flip", "3x3z", 1), ("flip", "3x3c"), "flip:3x3c#1", PuzzleTask("flip", "3x3c", True)]
    for task in bad:
        assert not space.contains(task)
        with pytest.raises(ValueError):
            space.encode(task)  # type: ignore[arg-type]
    for enc in [(1, (3, 3, 0, 0), 1), (0, (3, 3, 2, 0), 1), (0, (3, 3, 0), 1), (0, (3, 3, 0, 0), -1), 7]:
        assert not space.contains_encoded(enc)
    with pytest.raises(ValueError, match="seed_range"):
        PuzzleTaskSpace({"flip": ["3x3c"]}, seed_range=(5, 5))
    with pytest.raises(ValueError, match="max size"):
        PuzzleTaskSpace({"flip": ["8x8c"]})
    with pytest.raises(TypeError):
        PuzzleTaskSpace({"flip": "3x3c"})


def test_sampling_covers_choices_uniformly():
    space = PuzzleTaskSpace(["flip:3x3c", "flip:4x4c", "sixteen:2x3", "pegs:4x4random"], seed_range=(10, 20),
                            seed=1)
    encs = space.sample_encoded(2000)
    counts = Counter((e[0], e[1]) for e in encs)
    assert len(counts) == 4 and all(400 < n < 600 for n in counts.values())
    seeds = Counter(e[2] for e in encs)
    assert set(seeds) == set(range(10, 20))
    again = PuzzleTaskSpace(["flip:3x3c", "flip:4x4c", "sixteen:2x3", "pegs:4x4random"],
                            seed_range=(10, 20), seed=1).sample_encoded(2000)
    assert encs == again
    assert isinstance(space.sample(), PuzzleTask)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([t for rungs in LADDERS.values() for t in rungs]))
def test_mutate_stays_valid(seed, text):
    puzzle = next(p for p, rungs in LADDERS.items() if text in rungs)
    space = PuzzleTaskSpace(seed_range=(0, 50))
    rng = np.random.default_rng(seed)
    enc = space.encode(PuzzleTask(puzzle, text, 3))
    for _ in range(6):
        new = space.mutate(enc, rng)
        assert space.contains_encoded(_roundtrip(new))
        assert new != enc and new[0] == enc[0]
        enc = new


def test_mutate_edits_size_depth_and_seed():
    space = PuzzleTaskSpace({"sixteen": ["3x3m4"]}, seed_range=(0, 1000), depth_step=2)
    rng = np.random.default_rng(0)
    start = space.encode(PuzzleTask("sixteen", "3x3m4", 7))
    kinds = Counter()
    for _ in range(300):
        new = space.decode(space.mutate(start, rng))
        if new.seed != 7:
            assert new.params == "3x3m4"
            kinds["seed"] += 1
        elif new.params in ("2x2m4", "4x4m4"):
            kinds["size"] += 1
        else:
            assert new.params in ("3x3m2", "3x3m3", "3x3m5", "3x3m6")
            kinds["depth"] += 1
    assert min(kinds.values()) > 60 and sum(kinds.values()) == 300


def test_split_seeds_disjoint():
    space = PuzzleTaskSpace({"flip": ["3x3c"]}, seed_range=(0, 100))
    train, test = space.split(0.2)
    assert train.seed_range == (0, 80) and test.seed_range == (80, 100)
    assert all(s[2] < 80 for s in train.sample_encoded(200))
    assert all(s[2] >= 80 for s in test.sample_encoded(200))
    with pytest.raises(ValueError):
        space.split(100)


def test_describe_mentions_puzzle_params_and_knob():
    space = PuzzleTaskSpace()
    text = space.describe(PuzzleTask("sixteen", "3x3m5", 2))
    assert text.startswith("Sixteen:") and "3x3m5" in text and "5 moves" in text and "seed 2" in text
    assert "slack" in space.describe(space.encode(PuzzleTask("flood", "3x3c6m5", 0)))


def test_wrapper_switches_tasks_on_reset():
    space = PuzzleTaskSpace({"sixteen": ["2x3", "3x3"]}, seed=0)
    env = PuzzleTaskWrapper(make_puzzle_env("sixteen", space), space)
    obs, info = env.reset(options={"task": PuzzleTask("sixteen", "2x3", 5)})
    assert info["params"] == "2x3#5" and info["task"] == (2, (2, 3, 0), 5)
    assert obs["valid"].sum() == 6
    first = obs["board"].copy()
    obs, info = env.reset()                                          # autoreset replays the same task
    assert np.array_equal(obs["board"], first)
    obs, info = env.reset(options={"task": PuzzleTask("sixteen", "4x4m3", 1)})   # a mutated task
    assert obs["valid"].sum() == 16 and info["params"] == "4x4m3#1"
    _, _, _, _, info = env.step(0)
    assert info["task"] == (2, (4, 4, 3), 1) and "task_progress" in info
    with pytest.raises(ValueError):
        env.reset(options={"task": PuzzleTask("flip", "3x3c", 1)})
    with pytest.raises(ValueError, match="max size"):
        PuzzleTaskWrapper(SixteenEnv(max_size=3), space)
    with pytest.raises(ValueError, match="plays none"):
        PuzzleTaskWrapper(make_puzzle_env("flip"), space)


def test_solving_reports_progress():
    space = PuzzleTaskSpace({"sixteen": ["2x2m1"]}, seed=0)
    env = PuzzleTaskWrapper(make_puzzle_env("sixteen", space), space)
    env.reset(options={"task": PuzzleTask("sixteen", "2x2m1", 3)})
    inner = env.unwrapped
    for a in np.flatnonzero(env.unwrapped.action_masks()):
        saved = inner.grid.copy()
        _, rew, term, _, info = env.step(int(a))
        if term:
            assert rew == 1.0 and info["task_progress"] == 1.0 and info["success"]
            break
        assert info["task_progress"] == 0.0
        inner.grid = saved
    else:
        pytest.fail("no single shift solved a depth-1 instance")


def test_vector_env_mixes_sizes():
    """Two sub-envs of one vector env play puzzles of different sizes; each step's info names each sub-env's
    own task, and each env really plays it."""
    import gymnasium as gym

    space = PuzzleTaskSpace({"netslide": ["2x3b1", "3x3b1"]}, seed=0)

    def make():
        return PuzzleTaskWrapper(make_puzzle_env("netslide", space), space)

    envs = gym.vector.SyncVectorEnv([make, make])
    envs.reset(seed=0)
    given = [PuzzleTask("netslide", "2x3b1m1", 4), PuzzleTask("netslide", "3x3b1m1", 7)]
    envs.reset(options={"task": given[0], "reset_mask": np.array([True, False])})
    obs, _ = envs.reset(options={"task": given[1], "reset_mask": np.array([False, True])})
    assert obs["links"].shape == (2, 5, 5, 4)
    assert obs["valid"].reshape(2, -1).sum(axis=1).tolist() == [6, 9]  # a 2x3 and a 3x3 board
    assert [(p.w, p.h) for p in (e.unwrapped.params for e in envs.envs)] == [(2, 3), (3, 3)]
    masks = np.stack(envs.call("action_masks"))
    assert masks.shape == (2, envs.single_action_space.n) and masks.any(axis=1).all()
    actions = np.array([np.flatnonzero(m)[0] for m in masks])
    _, rew, term, trunc, info = envs.step(actions)
    assert rew.shape == (2,)
    assert [info["task"][i] for i in range(2)] == [space.encode(t) for t in given]
    envs.close()


def test_info_state_pickles_for_async_vector_envs():
    import pickle

    env = make_puzzle_env("flood")
    _, info = env.reset(seed=0)
    back = pickle.loads(pickle.dumps(info))
    assert back["state"] == info["state"] and back["state"]["limit"] == info["state"]["limit"]
    assert not isinstance(info["state"], dict)     # kept whole by vector envs (see PuzzleState)
