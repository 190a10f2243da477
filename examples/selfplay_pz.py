"""Self-play on tic-tac-toe with Prioritized Fictitious Self-Play, opponents loaded by id in worker processes.

The analogue of the Syllabus paper's LaserTag experiment (its figure of the probability that PFSP samples
the *first* agent over training), on a real PettingZoo game: ``pettingzoo.classic.tictactoe_v3`` converted to
the parallel API with :class:`~magister.env_wrappers.coplayer.TurnBasedParallelEnv`.

* **Learner** (this process): tabular Q-learning over the 3^9 boards, seen from the side to move (the
  game's own observation: plane 0 the mover's marks, plane 1 the other's) and reduced by the board's 8
  symmetries (:func:`canonical`), epsilon-greedy over legal moves;
  each finished game is also replayed backwards (Q-learning updates from the last move to the first), so
  a result reaches every move of the game at once.
  One table plays both sides; each episode the learner is drawn to move first or second.
* **Curriculum** (this process, served over ZeroMQ by :func:`~magister.sync.zmq_server.serve`):
  :class:`~magister.curricula.pfsp.PFSP` over an :class:`~magister.opponents.OpponentStore`
  of Q-table snapshots. The learner offers its table after every update (``update_agent``); every
  ``snapshot_every`` offers PFSP stores a snapshot. Snapshot 0 (the untrained table, i.e. a uniformly random
  player) is pinned so it is never evicted.
* **Workers** (``gymnasium.vector.AsyncVectorEnv`` processes): each env is
  ``SingleLearnerEnv(PettingZooSyncWrapper(CoPlayerWrapper(TurnBasedParallelEnv(tictactoe_v3.env()),
  store_directory, ...)))``. On reset the sync wrapper receives an opponent *id* from PFSP; the co-player
  wrapper loads that snapshot from the store itself (leased while in use) and plays the opponent's moves
  greedily; at the end of the game the episode update carries the opponent's return, from which PFSP updates
  its win rate against that id. Weights never travel through the curriculum's sockets.

As the learner learns to beat the random first snapshot, its win rate against it approaches 1 and PFSP's
``(1 - x)^2 + 0.01`` weighting sends it less and less often: the run prints that probability over time and
plots it (``--plot``)::

    python -m magister.examples.selfplay_pz --episodes 6000 --plot selfplay_pfsp.png

``--curriculum fsp`` runs the same experiment with uniform Fictitious Self-Play for comparison: its
probability of the first snapshot is ``1 / n`` whatever the win rates.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import gymnasium as gym
import numpy as np

from ..curricula.coplayer import OpponentCurriculum
from ..curricula.fsp import FSP
from ..curricula.pfsp import PFSP
from ..env_wrappers.coplayer import CoPlayerWrapper, SingleLearnerEnv, TurnBasedParallelEnv
from ..env_wrappers.sync_wrappers import PettingZooSyncWrapper
from ..opponents import OpponentStore
from ..sync.zmq_server import serve

logger = logging.getLogger(__name__)

__all__ = [
    "NUM_STATES", "PERMS", "QPolicy", "SelfPlayResult", "canonical", "load_snapshot", "main", "make_env",
    "plot", "save_snapshot", "state_index", "train",
]

#: Boards as base-3 numbers: cell i contributes 3^i times 0 (empty), 1 (mover's mark) or 2 (other's mark).
NUM_STATES = 3**9
_POW3 = 3 ** np.arange(9, dtype=np.int64)


def state_index(board: np.ndarray) -> np.ndarray | int:
    """Index of one ``(3, 3, 2)`` observation plane pair, or of a batch ``(n, 3, 3, 2)``.

    >>> b = np.zeros((3, 3, 2), np.int8); b[0, 0, 0] = 1; b[0, 1, 1] = 1
    >>> int(state_index(b))  # cell 0 is mine (1), cell 1 is theirs (2 * 3)
    7
    """
    b = np.asarray(board)
    flat = b.reshape(*b.shape[:-3], 9, 2).astype(np.int64)
    return (flat[..., 0] + 2 * flat[..., 1]) @ _POW3


def _symmetries() -> np.ndarray:
    cells = np.arange(9).reshape(3, 3)
    perms = []
    for k in range(4):
        r = np.rot90(cells, k)
        perms += [r.ravel(), np.fliplr(r).ravel()]
    return np.array(perms)


#: The 8 symmetries of the board as cell permutations: transformed cell j holds original cell PERMS[g, j].
PERMS = _symmetries()


def canonical(board: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Canonical state indices of a batch of boards ``(n, 3, 3, 2)`` under the board's 8 symmetries.

    Returns ``(index, perm)``: the smallest :func:`state_index` over the symmetric images and, per board, the
    permutation that produced it. Move ``j`` on the canonical board is move ``perm[j]`` on the real one, and
    the real action mask seen canonically is ``mask[perm]``. Symmetric positions share one table row, which
    makes tabular learning several times faster.

    >>> b = np.zeros((2, 3, 3, 2), np.int8); b[0, 0, 0, 0] = 1; b[1, 2, 2, 0] = 1  # opposite corners
    >>> idx, perm = canonical(b)
    >>> bool(idx[0] == idx[1]), int(perm[0][np.argmax(perm[0] == 0)]), int(perm[1][np.argmax(perm[1] == 8)])
    (True, 0, 8)
    """
    b = np.asarray(board).reshape(-1, 9, 2).astype(np.int64)
    codes = b[..., 0] + 2 * b[..., 1]
    images = codes[:, PERMS] @ _POW3  # (n, 8)
    g = images.argmin(axis=1)
    return images[np.arange(len(g)), g], PERMS[g]


def save_snapshot(table: np.ndarray, f: BinaryIO) -> None:
    """The store's ``save_fn``: the table's non-zero rows and their indices (``np.savez``, no pickle).

    Only a few thousand of the 3^9 boards are reachable, so this is several times smaller than the table.
    """
    table = np.asarray(table, dtype=np.float32)
    if table.shape != (NUM_STATES, 9):
        raise ValueError(f"a tic-tac-toe Q-table has shape {(NUM_STATES, 9)}, got {table.shape}")
    rows = np.flatnonzero(table.any(axis=1)).astype(np.int32)
    np.savez(f, rows=rows, values=table[rows])


def load_snapshot(f: BinaryIO) -> np.ndarray:
    """The store's ``load_fn``: the dense ``(3^9, 9)`` table back from :func:`save_snapshot`'s file.

    >>> import io
    >>> t = np.zeros((NUM_STATES, 9), np.float32); t[5, 2] = 0.5
    >>> buf = io.BytesIO(); save_snapshot(t, buf); _ = buf.seek(0)
    >>> bool((load_snapshot(buf) == t).all())
    True
    """
    with np.load(f, allow_pickle=False) as data:
        rows, values = data["rows"], data["values"]
    if rows.ndim != 1 or values.shape != (rows.size, 9) or rows.size and not (
        0 <= rows.min() and rows.max() < NUM_STATES
    ):
        raise ValueError(f"not a tic-tac-toe Q-table snapshot (rows {rows.shape}, values {values.shape})")
    table = np.zeros((NUM_STATES, 9), dtype=np.float32)
    table[rows] = values
    return table


def _greedy(q_row: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    legal = np.flatnonzero(mask)
    if legal.size == 0:
        raise ValueError("no legal move in the action mask")
    values = q_row[legal]
    best = legal[values == values.max()]
    return int(best[rng.integers(best.size)]) if best.size > 1 else int(best[0])


class QPolicy:
    """A greedy player from a Q-table snapshot (ties broken at random): the opponent inside a worker.

    >>> QPolicy(np.zeros((NUM_STATES, 9), np.float32), seed=0)(
    ...     {"observation": np.zeros((3, 3, 2), np.int8), "action_mask": np.eye(9, dtype=np.int8)[4]})
    4
    """

    def __init__(self, table: np.ndarray, seed: int | None = None) -> None:
        table = np.asarray(table)
        if table.shape != (NUM_STATES, 9):
            raise ValueError(f"a tic-tac-toe Q-table has shape {(NUM_STATES, 9)}, got {table.shape}")
        self.table = table
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: dict[str, np.ndarray]) -> int:
        idx, perm = canonical(obs["observation"])
        return int(perm[0][_greedy(self.table[idx[0]], np.asarray(obs["action_mask"])[perm[0]], self.rng)])


def make_env(address: str, store_directory: str, seed: int | None = None) -> gym.Env:
    """One worker env: tic-tac-toe against an opponent loaded from the store by the id PFSP sent."""
    from pettingzoo.classic import tictactoe_v3

    game = CoPlayerWrapper(
        TurnBasedParallelEnv(tictactoe_v3.env()),
        store_directory,
        load_fn=load_snapshot,
        make_agent=QPolicy,
        fallback_to_latest=True,  # an id evicted between PFSP's choice and this reset: play the newest
        learner_agents="random",
        turn_based=True,
        seed=seed,
    )
    return SingleLearnerEnv(PettingZooSyncWrapper(game, address, timeout=60.0))


@dataclass
class SelfPlayResult:
    """What :func:`train` measured.

    ``history`` rows are ``(episodes finished, P(first snapshot), win rate against it, snapshots stored)``,
    taken after every learner update that followed a finished episode; ``loaded_ids`` lists, per worker, the
    snapshot ids that worker loaded from disk; ``worker_pids`` their process ids.
    """

    episodes: int
    results: int
    snapshots: int
    history: list[tuple[int, float, float, int]] = field(default_factory=list)
    loaded_ids: list[list[int]] = field(default_factory=list)
    worker_pids: list[int] = field(default_factory=list)
    final_winrates: dict[int, float] = field(default_factory=dict)
    final_distribution: dict[int, float] = field(default_factory=dict)


def train(
    episodes: int = 6000,
    *,
    num_envs: int = 2,
    snapshot_every: int = 600,
    max_snapshots: int = 12,
    memory: int = 32,
    curriculum: str = "pfsp",
    alpha: float = 0.5,
    gamma: float = 0.95,
    epsilon: float = 0.1,
    seed: int = 0,
    store_directory: str | os.PathLike | None = None,
    progress: bool = True,
) -> SelfPlayResult:
    """Train the tabular learner by self-play against PFSP-sampled snapshots (see the module docstring).

    Args:
        episodes: Finished games to train for.
        num_envs: Worker processes (one env each).
        snapshot_every: Learner updates (vector steps) between stored snapshots (PFSP's
            ``checkpoint_interval``).
        max_snapshots: The store's rolling window (the pinned first snapshot is extra).
        memory: Results per opponent behind PFSP's win rates. The paper's 128 suits long runs; a short
            demo needs win rates that follow the learner within a few hundred games.
        curriculum: ``"pfsp"`` (PFSP with its defaults: ``f_hard`` with p = 2, smoothing 0.01) or
            ``"fsp"``.
        alpha, gamma, epsilon: Q-learning step size, discount and exploration rate.
        seed: Seeds the learner, PFSP and the envs.
        store_directory: Where snapshots go (default: a temporary directory, removed afterwards).
        progress: Show a tqdm progress bar.
    """
    for name, value in (("episodes", episodes), ("num_envs", num_envs), ("snapshot_every", snapshot_every),
                        ("max_snapshots", max_snapshots)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    for name, value, lo, hi in (("alpha", alpha, 0, 1), ("gamma", gamma, 0, 1), ("epsilon", epsilon, 0, 1)):
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    if curriculum not in ("pfsp", "fsp"):
        raise ValueError(f"curriculum must be 'pfsp' or 'fsp', got {curriculum!r}")
    tmp = None
    if store_directory is None:
        tmp = tempfile.mkdtemp(prefix="magister-selfplay-")
        store_directory = tmp
    bar = None
    try:
        rng = np.random.default_rng(seed)
        q = np.zeros((NUM_STATES, 9), dtype=np.float32)
        store = OpponentStore(store_directory, max_count=max_snapshots, save_fn=save_snapshot,
                              load_fn=load_snapshot)
        kind = PFSP if curriculum == "pfsp" else FSP
        opp: OpponentCurriculum = kind(store, checkpoint_interval=snapshot_every, memory=memory, seed=seed)
        first = opp.update_agent(q)  # snapshot 0: the untrained table, a uniformly random player
        assert first is not None
        store.pin(first)
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=episodes, desc=f"self-play ({curriculum.upper()})", unit="game",
                       dynamic_ncols=True)
        with serve(opp) as server:
            fns = [functools.partial(make_env, server.address, str(store_directory), seed + 1 + i)
                   for i in range(num_envs)]
            envs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
            try:
                result = _loop(envs, server, opp, q, rng, first, episodes, alpha, gamma, epsilon, bar)
                result.loaded_ids = [list(x) for x in envs.get_attr("loaded_ids")]
                result.worker_pids = [int(p.pid) for p in envs.processes]
            finally:
                envs.close()
            with server.lock:
                result.results = opp.num_results
                result.snapshots = len(store)
                ids = opp.opponent_ids()
                result.final_winrates = {i: float(w) for i, w in zip(ids, opp.winrates(ids))}
                result.final_distribution = {i: float(p) for i, p in zip(ids, opp.distribution())}
    finally:
        if bar is not None:
            bar.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def _loop(
    envs: gym.vector.VectorEnv,
    server: Any,
    opp: OpponentCurriculum,
    q: np.ndarray,
    rng: np.random.Generator,
    first: int,
    episodes: int,
    alpha: float,
    gamma: float,
    epsilon: float,
    bar: Any,
) -> SelfPlayResult:
    obs, _ = envs.reset(seed=int(rng.integers(2**31 - 1)))
    n = envs.num_envs
    done_count = 0
    history: list[tuple[int, float, float, int]] = []
    games: list[list[tuple[int, int, float, int, np.ndarray, bool]]] = [[] for _ in range(n)]
    while done_count < episodes:
        s, perm = canonical(obs["observation"])
        masks = np.take_along_axis(obs["action_mask"].astype(bool), perm, axis=1)  # canonical view
        actions = np.empty(n, dtype=np.int64)  # canonical moves
        for i in range(n):
            if rng.random() < epsilon:
                actions[i] = rng.choice(np.flatnonzero(masks[i]))
            else:
                actions[i] = _greedy(q[s[i]], masks[i], rng)
        obs, rewards, term, trunc, info = envs.step(perm[np.arange(n), actions])  # real moves
        done = term | trunc
        # SAME_STEP autoreset: for finished envs `obs` is already the next game's first observation,
        # and a finished game's target is its final reward.
        s2, perm2 = canonical(obs["observation"])
        next_masks = np.take_along_axis(obs["action_mask"].astype(bool), perm2, axis=1)
        best_next = np.where(next_masks, q[s2], -np.inf).max(axis=1)
        target = rewards + np.where(done, 0.0, gamma * best_next)
        q[s, actions] += alpha * (target - q[s, actions])
        for i in range(n):
            games[i].append(
                (int(s[i]), int(actions[i]), float(rewards[i]), int(s2[i]), next_masks[i], bool(done[i]))
            )
            if done[i]:  # backward replay: the final result reaches every move of the game at once
                for (bs, ba, br, bs2, bmask, bdone) in reversed(games[i]):
                    t = br if bdone else br + gamma * q[bs2][bmask].max()
                    q[bs, ba] += alpha * (t - q[bs, ba])
                games[i] = []
        finished = int(done.sum())
        with server.lock:
            opp.update_agent(q)  # a snapshot is stored every `checkpoint_interval` offers
            if finished:
                ids = opp.opponent_ids()
                p_first = float(opp.distribution()[ids.index(first)])
                history.append((done_count + finished, p_first, opp.winrate(first), len(ids)))
        if finished:
            done_count += finished
            if bar is not None:
                bar.update(finished)
                bar.set_postfix(p_first=f"{history[-1][1]:.3f}", winrate_first=f"{history[-1][2]:.2f}",
                                snapshots=history[-1][3])
    return SelfPlayResult(episodes=done_count, results=0, snapshots=0, history=history)


def plot(result: SelfPlayResult, path: str | os.PathLike, title: str = "PFSP") -> Path:
    """Write a PNG of P(first snapshot) and the win rate against it over training (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = np.asarray(result.history, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(h[:, 0], h[:, 1], color="tab:blue", label="P(sample first snapshot)")
    ax.set_xlabel("games played")
    ax.set_ylabel(f"{title} probability of the first snapshot", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(h[:, 0], h[:, 2], color="tab:orange", label="win rate vs first snapshot")
    ax2.set_ylabel("learner's win rate vs first", color="tab:orange")
    ax2.set_ylim(0, 1)
    ax.set_title(f"Tic-tac-toe self-play with {title}")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> SelfPlayResult:
    """Command line: train, print P(first snapshot) over time, and plot it."""
    parser = argparse.ArgumentParser(prog="python -m magister.examples.selfplay_pz",
                                     description=__doc__.splitlines()[0],
                                     epilog="Needs the 'examples' extra for its progress bar and plot (tqdm, "
                                            "matplotlib): pip install 'magister[examples]'.",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--episodes", type=int, default=6000)
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--snapshot-every", type=int, default=600)
    parser.add_argument("--max-snapshots", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curriculum", choices=["pfsp", "fsp"], default="pfsp")
    parser.add_argument("--plot", default="selfplay_pfsp.png", help="PNG path ('' to skip)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from magister.examples._cli import require

    require({**({"matplotlib": "examples"} if args.plot else {}),  # now, not after training
             **({} if args.no_progress else {"tqdm": "examples"})}, "python -m magister.examples.selfplay_pz")
    logging.basicConfig(level=logging.WARNING)
    result = train(args.episodes, num_envs=args.num_envs, snapshot_every=args.snapshot_every,
                   max_snapshots=args.max_snapshots, curriculum=args.curriculum, seed=args.seed,
                   progress=not args.no_progress)
    print(f"{'games':>7} {'P(first)':>9} {'winrate(first)':>15} {'snapshots':>10}")
    rows = result.history
    for k in np.linspace(0, len(rows) - 1, num=min(12, len(rows))).astype(int):
        g, p, w, s = rows[k]
        print(f"{g:>7d} {p:>9.3f} {w:>15.2f} {s:>10d}")
    print(f"results recorded by {args.curriculum.upper()}: {result.results}; snapshots loaded per worker: "
          f"{[len(x) for x in result.loaded_ids]}")
    if args.plot:
        print(f"plot written to {plot(result, args.plot, args.curriculum.upper())}")
    return result


if __name__ == "__main__":
    main()
