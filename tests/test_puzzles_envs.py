"""Rules, generators, masks and episode handling of the puzzle environments."""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from magister.examples.puzzles.base import PuzzleEnv, split_seed
from magister.examples.puzzles.fifteen import DOWN, LEFT, RIGHT, UP, FifteenEnv, FifteenParams
from magister.examples.puzzles.flip import FlipEnv, FlipParams
from magister.examples.puzzles.flood import FloodEnv, FloodParams, greedy_moves, grow_region
from magister.examples.puzzles.netslide import NetslideEnv, NetslideParams
from magister.examples.puzzles.pegs import PegsEnv, PegsParams, board_layout, solve
from magister.examples.puzzles.samegame import (
    SameGameEnv,
    SameGameParams,
    group_at,
    groups_mask,
    remove_group,
)
from magister.examples.puzzles.sixteen import SixteenEnv, SixteenParams, line_action, permutation_parity
from magister.examples.puzzles.untangle import UntangleEnv, UntangleParams, bad_pairs, lattice_size

# (env class, small parameter strings used across the generic tests)
SMALL = [
    (FlipEnv, ["3x3c", "4x3r", "2x2cp1"]),
    (FloodEnv, ["3x3c6m5", "4x4c3m0", "5x3c4m2"]),
    (SixteenEnv, ["2x3", "3x3", "3x2m3"]),
    (FifteenEnv, ["2x2", "3x2", "3x3m5"]),
    (NetslideEnv, ["2x3b1", "3x3b0.5m2", "3x3wb1"]),
    (PegsEnv, ["4x4random", "5x3cross", "3x5cross"]),
    (SameGameEnv, ["2x3c3s2", "3x3c3s1", "4x3c2s2r"]),
    (UntangleEnv, ["4", "5"]),
]
IDS = [cls.__name__ for cls, _ in SMALL]


def _play_random(env: PuzzleEnv, rng: np.random.Generator, steps: int) -> bool:
    """Random masked play; returns False when the episode ended."""
    for _ in range(steps):
        legal = np.flatnonzero(env.action_masks())
        if len(legal) == 0:
            return True
        *_, term, trunc, _ = env.step(int(rng.choice(legal)))
        if term or trunc:
            return False
    return True


def _key(env: PuzzleEnv) -> bytes:
    return env._state_key()


# -- generic behaviour ---------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:.*not having a spec")
@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_check_env_passes(cls, params):
    env = cls(params[0], render_mode="rgb_array", max_size=5)
    check_env(env, skip_render_check=False)
    img = env.render()
    side = (lattice_size(5) if cls is UntangleEnv else 5) * env.cell_px
    assert img.shape == (side, side, 3) and img.dtype == np.uint8 and img.any()


@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_parameter_strings_round_trip(cls, params):
    for text in params:
        p, seed = cls.parse_params(text + "#42")
        assert seed == 42
        assert cls.format_params(p, 42) == text + "#42"
        assert cls.params_cls.parse(p.format()) == p
        assert cls.params_cls.from_ints(p.to_ints()) == p
        assert all(type(v) is int for v in p.to_ints())


@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_spaces_fixed_across_sizes(cls, params):
    env = cls(params[0], max_size=5)
    space, n = env.observation_space, env.action_space.n
    for text in params:
        obs, info = env.reset(seed=1, options={"params": text})
        assert env.observation_space == space and env.action_space.n == n
        assert space.contains(obs)
        w, h = env.params.size
        assert obs["valid"].sum() == w * h and obs["valid"][:h, :w].all()
        assert env.action_masks().shape == (n,) and env.action_masks().dtype == bool
        assert info["params"].startswith(env.params.format() + "#")


@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_masks_match_state_changes(cls, params):
    """Masked-in actions change the state, masked-out actions leave it unchanged, over random states."""
    rng = np.random.default_rng(0)
    for text in params:
        env = cls(text, max_size=5, max_steps=0)
        env.reset(seed=3)
        for _ in range(4):
            if not _play_random(env, rng, int(rng.integers(0, 4))):
                env.reset()
            mask = env.action_masks()
            before = _key(env)
            for a in range(env.action_space.n):
                trial = copy.deepcopy(env)
                trial.step(a)
                assert (_key(trial) != before) == mask[a], (text, a, mask[a])


@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_seed_reproduces_instance(cls, params):
    env = cls(params[0])
    env.reset(options={"params": params[0] + "#7"})
    a = _key(env)
    env.reset(seed=123)                       # the '#7' is kept: the same instance again
    assert _key(env) == a and env.instance_seed == 7
    env.reset(options={"instance_seed": 7})
    assert _key(env) == a
    other = cls(params[0])
    keys = {_key(other) for s in range(8) if other.reset(options={"instance_seed": s})}
    assert len(keys) > 1


@pytest.mark.parametrize("cls,params", SMALL, ids=IDS)
def test_truncation_at_step_limit(cls, params):
    env = cls(params[0], max_steps=3)
    env.reset(seed=0)
    # an action outside the board is a legal no-op for every puzzle except Flood/Fifteen (always on board)
    masked_out = np.flatnonzero(~env.action_masks())
    a = int(masked_out[0])
    for i in range(3):
        _, rew, term, trunc, info = env.step(a)
        assert rew == 0.0 and not term and trunc == (i == 2) and not info["success"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(a)


def test_bad_inputs_raise():
    env = FlipEnv("3x3c")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(36)
    with pytest.raises(ValueError, match="action"):
        env.step(-1)
    with pytest.raises(ValueError, match="max_size"):
        FlipEnv("7x7c", max_size=6)
    with pytest.raises(KeyError, match="unknown reset options"):
        env.reset(options={"task": 1})
    for bad in ["", "3x", "x3c", "3x3", "3x3q", "3x3cp", "3x3c#-1", "3x3c#a", "1x3c", "3x3cp10"]:
        with pytest.raises(ValueError):
            FlipEnv.parse_params(bad)
    for cls, bad in [(FloodEnv, "3x3c11"), (FloodEnv, "3x3c6m-1"), (NetslideEnv, "3x3b1.5"),
                     (NetslideEnv, "2x2wb1"), (NetslideEnv, "3x3b0.0001"), (PegsEnv, "4x4cross"),
                     (PegsEnv, "5x5cross"), (PegsEnv, "3x3hexagon"), (SameGameEnv, "3x3c3s3"),
                     (SixteenEnv, "1x4"), (FifteenEnv, "3x3m")]:
        with pytest.raises(ValueError):
            cls.parse_params(bad)
    with pytest.raises(TypeError):
        split_seed(5)  # type: ignore[arg-type]


def test_repeated_states_truncate():
    env = SixteenEnv("3x3#1", repeat_limit=2, max_steps=0)
    env.reset()
    right, left = line_action("right", 0, 5, 5), line_action("left", 0, 5, 5)
    results = [env.step(a) for a in (right, left, right, left)]
    # the start state is seen at reset, after step 2 and after step 4 (third visit > limit 2)
    assert [r[3] for r in results] == [False, False, False, True]
    assert results[-1][4]["repeated"] and not results[-1][2]


# -- Flip -------------------------------------------------------------------------------------------------
def test_flip_press_patterns_exact():
    env = FlipEnv("3x3c")
    env.reset(seed=0)
    env.lights[:] = 0
    env.step(1 * 6 + 1)                         # centre of a 3x3 cross board
    assert env._state()["lights"].tolist() == [[0, 1, 0], [1, 1, 1], [0, 1, 0]]
    env.step(0)                                 # corner: itself and two neighbours
    assert env._state()["lights"].tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 0]]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["3x3c", "4x4r", "5x5cp3", "4x3rp2"]))
def test_flip_scramble_presses_solve(seed, text):
    env = FlipEnv(f"{text}#{seed}")
    obs, _ = env.reset()
    assert obs["board"].any()
    p = FlipParams.parse(text)
    if p.presses:
        assert len(env.scramble) == p.presses
    for i, cell in enumerate(env.scramble):
        _, rew, term, _, info = env.step((cell // p.w) * env.max_w + cell % p.w)
        assert term == (i == len(env.scramble) - 1) and info["success"] == term
    assert rew == 1.0


# -- Flood ------------------------------------------------------------------------------------------------
def test_flood_region_and_solver_exact():
    grid = np.array([[0, 0, 1], [2, 0, 1], [2, 2, 1]])
    start = np.zeros((3, 3), bool)
    start[0, 0] = True
    assert grow_region(grid, start).astype(int).tolist() == [[1, 1, 0], [0, 1, 0], [0, 0, 0]]
    # greedy: colour 2 absorbs 3 cells (region 6), then colour 1 absorbs the rest
    assert greedy_moves(grid, 3) == 2


def test_flood_win_and_failure():
    env = FloodEnv("3x3c3m0", max_colours=4)
    env.reset(seed=0)
    env.grid = np.array([[0, 0, 1], [2, 0, 1], [2, 2, 1]], np.int8)
    env.region = grow_region(env.grid, np.eye(3, dtype=bool) & (np.arange(3) == 0))
    env.moves, env.limit = 0, 2
    assert env.action_masks().tolist() == [False, True, True, False]
    _, rew, term, _, info = env.step(2)
    assert (rew, term, info["state"]["moves"]) == (0.0, False, 1)
    _, rew, term, _, info = env.step(1)
    assert (rew, term, info["success"]) == (1.0, True, True)
    # same start, wrong first move, one move left -> out of moves: irreversible failure
    env.reset(seed=0)
    env.grid = np.array([[0, 0, 1], [2, 0, 1], [2, 2, 1]], np.int8)
    env.region = grow_region(env.grid, np.eye(3, dtype=bool) & (np.arange(3) == 0))
    env.moves, env.limit = 0, 2
    env.step(1)
    _, rew, term, trunc, info = env.step(0)
    assert (rew, term, trunc, info["failure"], info["success"]) == (-1.0, True, False, True, False)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_flood_generated_solvable_within_limit(seed):
    env = FloodEnv(f"6x6c4m0#{seed}")
    obs, info = env.reset()
    assert int(obs["moves_left"][0]) == info["state"]["solver_moves"] == info["state"]["limit"]
    while True:   # replay the greedy solver through the env
        best, best_n = None, -1
        for k in np.flatnonzero(env.action_masks()):
            g = env.grid.copy()
            g[env.region] = k
            n = int(grow_region(g, env.region).sum())
            if n > best_n:
                best, best_n = int(k), n
        _, rew, term, _, info = env.step(best)
        if term:
            break
    assert rew == 1.0 and info["success"]


# -- Sixteen ---------------------------------------------------------------------------------------------
def test_sixteen_known_solution():
    env = SixteenEnv("2x2")
    env.reset(seed=0)
    env.grid = np.array([[2, 1], [3, 4]], np.int16)
    _, rew, term, _, info = env.step(line_action("right", 0, 5, 5))
    assert (rew, term, info["success"]) == (1.0, True, True)
    env.reset(seed=0)
    env.grid = np.array([[1, 4], [3, 2]], np.int16)
    env.step(line_action("up", 1, 5, 5))
    assert env.grid.tolist() == [[1, 2], [3, 4]] and env._solved()


def _bfs_distance(start, goal, moves, limit):
    seen = {start: 0}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        if s == goal:
            return seen[s]
        if seen[s] >= limit:
            continue
        for m in moves:
            t = m(s)
            if t not in seen:
                seen[t] = seen[s] + 1
                queue.append(t)
    return None


def _sixteen_moves(w, h):
    """Row/column shifts on flat tuples (an independent re-statement of the rules)."""

    def make(axis, index, d):
        def move(s):
            g = np.array(s).reshape(h, w)
            if axis == 0:
                g[index] = np.roll(g[index], d)
            else:
                g[:, index] = np.roll(g[:, index], d)
            return tuple(g.ravel().tolist())
        return move

    rows = [make(0, r, d) for r in range(h) for d in (1, -1)]
    return rows + [make(1, c, d) for c in range(w) for d in (1, -1)]


def test_sixteen_reachability_and_parity():
    # 2x3: every one of the 720 arrangements is reachable from the solved grid
    w, h = 3, 2
    moves = _sixteen_moves(w, h)
    seen = {tuple(range(1, 7))}
    frontier = list(seen)
    while frontier:
        nxt = []
        for s in frontier:
            for m in moves:
                t = m(s)
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
        frontier = nxt
    assert len(seen) == 720
    # 3x3 (both odd): every move is even, and the generator only produces even arrangements
    for seed in range(20):
        env = SixteenEnv(f"3x3#{seed}")
        env.reset()
        assert permutation_parity(env.grid) == 0


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3))
def test_sixteen_shuffle_depth_bounds_solution(seed, k):
    env = SixteenEnv(f"3x3m{k}#{seed}")
    env.reset()
    start = tuple(env.grid.ravel().tolist())
    d = _bfs_distance(start, tuple(range(1, 10)), _sixteen_moves(3, 3), k)
    assert d is not None and 1 <= d <= k


# -- Fifteen ---------------------------------------------------------------------------------------------
def test_fifteen_known_solution_and_masks():
    env = FifteenEnv("2x2")
    env.reset(seed=0)
    env.grid, env.gap = np.array([[1, 2], [0, 3]], np.int16), (1, 0)
    assert env.action_masks().tolist() == [False, True, True, False]   # no tile below / left of the gap
    _, rew, term, _, _ = env.step(LEFT)
    assert (rew, term) == (1.0, True) and env.grid.tolist() == [[1, 2], [3, 0]]
    env.reset(seed=0)
    env.grid, env.gap = np.array([[1, 0], [3, 2]], np.int16), (0, 1)
    env.step(UP)
    assert env._solved()
    assert {UP, DOWN, LEFT, RIGHT} == {0, 1, 2, 3}


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["3x2", "2x3", "3x3m6", "2x2"]))
def test_fifteen_generated_instances_solvable(seed, text):
    env = FifteenEnv(f"{text}#{seed}")
    env.reset()
    p = FifteenParams.parse(text)

    def neighbours(state):
        s = np.array(state).reshape(p.h, p.w)
        r, c = map(int, np.argwhere(s == 0)[0])
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            if 0 <= r + dr < p.h and 0 <= c + dc < p.w:
                t = s.copy()
                t[r, c], t[r + dr, c + dc] = t[r + dr, c + dc], 0
                yield tuple(t.ravel().tolist())

    start, goal = tuple(env.grid.ravel().tolist()), tuple(env.goal.ravel().tolist())
    seen, queue = {start: 0}, deque([start])
    while queue and goal not in seen:
        s = queue.popleft()
        for t in neighbours(s):
            if t not in seen:
                seen[t] = seen[s] + 1
                queue.append(t)
    assert goal in seen and seen[goal] >= 1
    if p.moves:
        assert seen[goal] <= p.moves


# -- Netslide --------------------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["2x3b1m2", "3x3b0m1", "3x3wb0.5m2"]))
def test_netslide_shuffle_depth_and_solution(seed, text):
    env = NetslideEnv(f"{text}#{seed}")
    obs, _ = env.reset()
    assert not env._solved() and obs["powered"].sum() < env.w * env.h
    p = NetslideParams.parse(text)
    n_act = env.action_space.n
    best = None
    # exhaustive search to depth m over the masked actions finds a solution
    frontier = [copy.deepcopy(env)]
    for depth in range(1, p.moves + 1):
        nxt = []
        for e in frontier:
            for a in np.flatnonzero(e.action_masks()):
                t = copy.deepcopy(e)
                _, rew, term, _, _ = t.step(int(a))
                if term:
                    best = depth
                    break
                nxt.append(t)
            if best:
                break
        if best:
            break
        frontier = nxt
    assert best is not None and best <= p.moves and n_act == 2 * (5 + 5)


def test_netslide_solution_is_solved_and_barriers():
    env = NetslideEnv("3x3b1#4")
    env.reset()
    assert not env._solved()
    env.tiles = env.solution | ((np.arange(9).reshape(3, 3) == 4) << 4).astype(np.uint8)
    env._refresh()
    assert env._solved()
    links = env.solution
    assert sum(bin(int(v)).count("1") for v in links.ravel()) == 2 * (9 - 1)   # a spanning tree
    inner = env.barriers.copy()
    inner[:, -1] &= ~np.uint8(1)
    inner[:, 0] &= ~np.uint8(4)
    inner[0, :] &= ~np.uint8(2)
    inner[-1, :] &= ~np.uint8(8)
    # b1: every internal grid edge not in the tree has a barrier (12 internal edges, 8 in the tree)
    assert sum(bin(int(v)).count("1") for v in inner.ravel()) == 2 * (12 - 8)
    assert not (inner & links).any()
    env0 = NetslideEnv("3x3b0#4")
    env0.reset()
    assert int(env0.barriers[1, 1]) == 0


# -- Pegs ------------------------------------------------------------------------------------------------
def _apply_solution(env, path):
    for i, (r, c, d) in enumerate(path):
        _, rew, term, _, info = env.step(4 * (r * env.max_w + c) + d)
        assert term == (i == len(path) - 1)
    return rew, info


# a solution of the human-easy preset 5x7cross (found once with pegs.solve): (row, column, direction)
SOLUTION_5X7_CROSS = [
    (1, 2, 1), (2, 0, 3), (0, 1, 1), (0, 3, 2), (2, 2, 2), (2, 4, 2), (3, 2, 0), (1, 3, 2), (0, 1, 1),
    (2, 0, 3), (3, 0, 3), (3, 2, 0), (3, 4, 2), (4, 2, 0), (1, 2, 1), (4, 0, 3), (4, 3, 2), (5, 1, 0),
    (3, 1, 3), (6, 3, 0), (3, 3, 1), (6, 1, 3), (6, 3, 0), (4, 4, 2), (4, 2, 1),
]

# a solution of the French board 7x7octagon from its start (vacancy at row 1, column 3)
SOLUTION_7X7_OCTAGON = [
    (1, 1, 3), (1, 4, 2), (3, 1, 0), (1, 1, 3), (2, 3, 2), (0, 3, 1), (2, 0, 3), (2, 3, 2), (2, 5, 2),
    (3, 3, 0), (4, 0, 0), (2, 0, 3), (3, 2, 0), (0, 2, 1), (4, 5, 0), (1, 5, 1), (4, 3, 3), (4, 1, 3),
    (4, 5, 0), (2, 6, 2), (3, 4, 0), (0, 4, 1), (6, 2, 0), (6, 4, 0), (4, 3, 3), (4, 6, 2), (6, 3, 0),
    (4, 3, 3), (5, 5, 0), (3, 6, 2), (3, 4, 0), (1, 4, 2), (1, 2, 1), (3, 2, 1), (5, 1, 3),
]


def test_pegs_known_boards_solvable():
    env = PegsEnv("5x7cross")
    env.reset(seed=0)
    assert (env.board == 1).sum() == 26 and env.board[3, 2] == 0
    rew, info = _apply_solution(env, SOLUTION_5X7_CROSS)
    assert rew == 1.0 and info["success"] and info["state"]["pegs"] == 1
    env = PegsEnv("7x7octagon")
    env.reset(seed=0)
    assert (env.board >= 0).sum() == 37 and env.board[1, 3] == 0
    rew, info = _apply_solution(env, SOLUTION_7X7_OCTAGON)
    assert rew == 1.0 and info["success"]
    env = PegsEnv("3x5cross")
    env.reset(seed=0)
    path = solve(env.board)
    assert path is not None and len(path) == (env.board == 1).sum() - 1
    rew, info = _apply_solution(env, path)
    assert rew == 1.0 and info["success"]
    b = board_layout(PegsParams(7, 7, "cross"))
    assert (b >= 0).sum() == 33 and b[3, 3] == 0
    o = board_layout(PegsParams(7, 7, "octagon"))
    assert (o >= 0).sum() == 37


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["4x4random", "5x4random", "3x3random"]))
def test_pegs_random_boards_solvable(seed, text):
    env = PegsEnv(f"{text}#{seed}")
    env.reset()
    assert (env.board == 1).sum() >= 2
    path = solve(env.board)
    assert path is not None
    rew, info = _apply_solution(env, path)
    assert rew == 1.0


def test_pegs_failure_when_stuck():
    env = PegsEnv("4x4random")
    env.reset(seed=0)
    env.board = np.zeros((4, 4), np.int8)
    env.board[0, 0] = env.board[0, 1] = env.board[3, 3] = 1
    env._refresh()
    assert np.flatnonzero(env.action_masks()).tolist() == [4 * 0 + 3]   # (0,0) jumps right
    _, rew, term, _, info = env.step(3)
    assert (rew, term, info["failure"], info["state"]["pegs"]) == (-1.0, True, True, 2)


# -- Same Game -------------------------------------------------------------------------------------------
def test_samegame_gravity_and_columns_exact():
    grid = np.array([[0, 2, 0],
                     [1, 3, 0],
                     [1, 3, 2]], np.int8)
    g = group_at(grid, 1, 0)
    assert g.sum() == 2
    assert remove_group(grid, g).tolist() == [[2, 0, 0], [3, 0, 0], [3, 2, 0]]
    g3 = group_at(grid, 2, 1)
    assert remove_group(grid, g3).tolist() == [[0, 0, 0], [1, 0, 0], [1, 2, 2]]
    assert groups_mask(grid).astype(int).tolist() == [[0, 0, 0], [1, 1, 0], [1, 1, 0]]


def test_samegame_score_win_and_failure():
    env = SameGameEnv("2x2c3s1", max_size=4)
    env.reset(seed=0)
    env.grid = np.array([[1, 2], [1, 2]], np.int8)
    env._groups = groups_mask(env.grid)
    _, rew, term, _, info = env.step(0)                   # remove the 1s: (2 - 1)^2 = 1
    assert (rew, term, info["state"]["score"]) == (0.0, False, 1)
    assert env.grid.tolist() == [[2, 0], [2, 0]]
    _, rew, term, _, info = env.step(4)
    assert (rew, term, info["success"], info["state"]["score"]) == (1.0, True, True, 2)
    env.reset(seed=0)
    env.grid = np.array([[2, 3], [1, 1]], np.int8)
    env._groups = groups_mask(env.grid)
    _, rew, term, _, info = env.step(4)
    assert (rew, term, info["failure"]) == (-1.0, True, True)


def _samegame_solvable(grid: np.ndarray) -> bool:
    if not grid.any():
        return True
    seen: set[bytes] = set()
    m = groups_mask(grid)
    for r, c in np.argwhere(m):
        g = group_at(grid, int(r), int(c))
        key = g.tobytes()
        if key in seen:
            continue
        seen.add(key)
        if _samegame_solvable(remove_group(grid, g)):
            return True
    return False


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["2x3c3s2", "3x3c3s2", "4x3c3s2", "3x3c2s2"]))
def test_samegame_generated_boards_soluble(seed, text):
    env = SameGameEnv(f"{text}#{seed}")
    env.reset()
    p = SameGameParams.parse(text)
    assert (env.grid > 0).all() and env.grid.max() <= p.colours
    assert _samegame_solvable(env.grid)


# -- Untangle --------------------------------------------------------------------------------------------
def test_untangle_crossing_rules_exact():
    square = np.array([[0, 0], [2, 2], [0, 2], [2, 0]])
    assert bad_pairs(square, np.array([[0, 1], [2, 3]]))[0, 1]                  # the diagonals cross
    assert not bad_pairs(square, np.array([[0, 2], [3, 1]])).any()              # opposite sides do not
    assert not bad_pairs(square, np.array([[0, 1], [0, 2], [0, 3]])).any()      # a shared endpoint is fine
    line = np.array([[0, 0], [1, 1], [2, 2], [0, 2]])
    assert bad_pairs(line, np.array([[0, 2], [1, 3]]))[0, 1]                    # an endpoint on an edge
    assert bad_pairs(line, np.array([[0, 2], [0, 1]]))[0, 1]                    # collinear overlap


def test_untangle_known_moves_solve():
    env = UntangleEnv("4", max_points=4)
    env.reset(seed=0)
    env.pos = np.array([[0, 0], [2, 2], [0, 2], [2, 0]])
    env.edges = np.array([[0, 1], [2, 3]])
    env._refresh()
    assert env.crossings == 1 and env.crossed.all()
    left, up = 2, 0
    _, rew, term, _, info = env.step(4 * 1 + left)           # point 1 -> (1, 2): still crossing
    assert (rew, term, info["state"]["crossings"]) == (0.0, False, 1)
    _, rew, term, _, info = env.step(4 * 1 + up)             # -> (1, 1): lies on the other edge
    # counted twice: a touching pair of edges, and an edge passing through a point
    assert (rew, term, info["state"]["crossings"]) == (0.0, False, 2)
    _, rew, term, _, info = env.step(4 * 1 + up)             # -> (1, 0): untangled
    assert (rew, term, info["success"]) == (1.0, True, True)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["4", "6", "9"]))
def test_untangle_generated_instances(seed, text):
    env = UntangleEnv(f"{text}#{seed}")
    obs, info = env.reset()
    n = int(text)
    assert info["state"]["crossings"] > 0 and obs["crossed"].any()
    assert len({tuple(p) for p in env.pos.tolist()}) == n and env.pos.max() < lattice_size(n)
    degrees = np.bincount(env.edges.ravel(), minlength=n)
    assert (degrees >= 1).all() and obs["edges"].sum() == 2 * len(env.edges)
    env.pos = env.solution.copy()                              # the hidden drawing is crossing-free
    env._refresh()
    assert env._solved()


# -- parameter strings over generated parameters -----------------------------------------------------------
@st.composite
def _any_params(draw):
    kind = draw(st.sampled_from(["flip", "flood", "sixteen", "fifteen", "netslide", "pegs", "samegame",
                                 "untangle"]))
    w, h = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    maybe = draw(st.one_of(st.none(), st.integers(1, 200)))
    try:
        if kind == "flip":
            return FlipParams(w, h, draw(st.sampled_from("cr")), None if maybe is None else min(maybe, w * h))
        if kind == "flood":
            return FloodParams(w, h, draw(st.integers(2, 10)), draw(st.integers(0, 30)))
        if kind == "sixteen":
            return SixteenParams(w, h, maybe)
        if kind == "fifteen":
            return FifteenParams(w, h, maybe)
        if kind == "netslide":
            return NetslideParams(w, h, draw(st.booleans()), draw(st.integers(0, 1000)), maybe)
        if kind == "pegs":
            return PegsParams(w, h, draw(st.sampled_from(["cross", "octagon", "random"])))
        if kind == "samegame":
            colours, scoring = draw(st.integers(2, 10)), draw(st.integers(1, 2))
            return SameGameParams(w, h, colours, scoring, draw(st.booleans()))
        return UntangleParams(draw(st.integers(4, 40)))
    except ValueError:
        assume(False)


@settings(max_examples=150, deadline=None)
@given(_any_params(), st.one_of(st.none(), st.integers(0, 2**40)))
def test_any_parameters_round_trip(p, seed):
    cls = type(p)
    assert cls.parse(p.format()) == p
    assert cls.from_ints(list(p.to_ints())) == p
    text = p.format() + ("" if seed is None else f"#{seed}")
    body, s = split_seed(text)
    assert cls.parse(body) == p and s == seed
