"""The teacher-only toy environment of the ALP-GMM paper's code (Portelas et al., CoRL 2019), no RL.

The task space is the unit cube :math:`[0, 1]^d` cut into ``cells`` equal cells per dimension. Each cell has
a competence in ``[0, cap]``. Playing a task adds 1 to the competence of the cell it falls in, but only
when that cell is the origin cell ``(0, ..., 0)`` or when a neighbouring cell (one step along one axis)
already has a competence of at least ``threshold``; the teacher's reward is the cell's competence divided
by ``cap``. So progress spreads outward from the origin, and a teacher that keeps sampling where its reward
changes masters cells faster than uniform sampling, which mostly lands on cells it cannot learn yet. The
score is the share of cells whose competence is above ``threshold``.

The defaults are the reference code's: 10 cells per dimension, cap 100, threshold 75, 20,000 episodes.

The command compares every teacher for continuous spaces with uniform sampling on it, over seeds::

    python -m magister.examples.teacher_toy                      # 10 seeds, 20,000 episodes, 2-D and 3-D
    python -m magister.examples.teacher_toy --seeds 3 --episodes 5000 --teachers random alpgmm
    python -m magister.examples.teacher_toy --write-results      # its section of docs/results.md and a plot

Every run (teacher, dimensions, seed) plays its own toy env with its own teacher, built with
``background=False`` (each refit runs in line, so a run is exact and reproducible); runs go to a process
pool as wide as the machine's cores. An episode's return is the cell's competence over the cap; its
progress is a success drawn with that probability (:func:`play` with a generator), which only GoalGAN
reads by default. The command prints, per number of dimensions, the mastered share at the end for each
teacher with a 95% stratified bootstrap interval over the seeds
(:func:`magister.evaluation.interval_estimates`), the difference from uniform sampling (``random``,
:class:`~magister.curricula.DomainRandomization`) with its interval (:func:`magister.evaluation.difference`),
and every seed's final share. In more dimensions the grid has fewer cells per dimension
(:data:`DEFAULT_CELLS`: 10x10 in 2-D, 5x5x5 in 3-D, 4 per dimension in 4-D), so that the cells stay few
enough to learn in 20,000 episodes.

>>> import numpy as np
>>> env = ToyEnv(dims=2)
>>> env.play(np.array([0.05, 0.05])), env.play(np.array([0.95, 0.95]))  # the origin cell learns; (9, 9) not
(0.01, 0.0)
>>> env.mastered()
0.0
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_CELLS", "TEACHERS", "Run", "ToyEnv", "main", "make_teacher", "play", "run_one"]


class ToyEnv:
    """Competence over a grid of cells in :math:`[0, 1]^d` (see the module docstring).

    Args:
        dims: number of dimensions ``d``.
        cells: cells per dimension.
        cap: the competence a cell can reach.
        threshold: the competence a neighbour needs before a cell can learn, and above which a cell counts
            as mastered.
    """

    def __init__(self, dims: int = 2, cells: int = 10, cap: int = 100, threshold: int = 75) -> None:
        if dims < 1 or cells < 1:
            raise ValueError(f"ToyEnv needs dims >= 1 and cells >= 1, got dims={dims}, cells={cells}")
        if not 0 < threshold < cap:
            raise ValueError(f"ToyEnv needs 0 < threshold < cap, got threshold={threshold}, cap={cap}")
        self.dims, self.cells, self.cap, self.threshold = int(dims), int(cells), int(cap), int(threshold)
        self.competence = np.zeros((self.cells,) * self.dims, dtype=np.int64)

    def cell(self, x: Any) -> tuple[int, ...]:
        """The cell a task falls in."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.shape != (self.dims,) or not np.all((x >= 0.0) & (x <= 1.0)):
            raise ValueError(f"a ToyEnv task is {self.dims} numbers in [0, 1], got {x.tolist()!r}")
        return tuple(np.minimum((x * self.cells).astype(np.int64), self.cells - 1).tolist())

    def _can_learn(self, cell: tuple[int, ...]) -> bool:
        if not any(cell):
            return True
        for axis, step in itertools.product(range(self.dims), (-1, 1)):
            n = list(cell)
            n[axis] += step
            if 0 <= n[axis] < self.cells and self.competence[tuple(n)] >= self.threshold:
                return True
        return False

    def play(self, x: Any) -> float:
        """Play task ``x``: the cell learns if it can; returns its competence over ``cap``."""
        cell = self.cell(x)
        if self._can_learn(cell):
            self.competence[cell] = min(self.cap, self.competence[cell] + 1)
        return float(self.competence[cell]) / self.cap

    def mastered(self) -> float:
        """The share of cells whose competence is above ``threshold``."""
        return float((self.competence > self.threshold).mean())


def play(curriculum: Any, env: ToyEnv, episodes: int, every: int = 1000,
         success: np.random.Generator | None = None) -> list[float]:
    """Let ``curriculum`` (over a ``Box`` of ``env.dims`` dimensions in [0, 1]) teach ``env`` for
    ``episodes`` episodes, one task at a time; returns the mastered share after every ``every`` episodes.

    Each episode is one task from ``curriculum.sample()``, played once; its reward goes back as the
    episode's return (length 1), and as its progress, or, with a generator ``success``, a success (1.0)
    drawn with probability the reward, else 0.0: the binary signal a teacher such as GoalGAN needs (the
    competence itself is the same for every play of a cell, so two plays of one goal would always agree)."""
    scores = []
    for n in range(1, episodes + 1):
        task = curriculum.sample(1)[0]
        reward = env.play(task)
        progress = reward if success is None else float(success.random() < reward)
        curriculum.update_on_episode(reward, 1, task, progress)
        if n % every == 0:
            scores.append(env.mastered())
    return scores


# -- the command: every teacher on the toy env, over seeds ------------------------------------------------

#: Cells per dimension for each number of dimensions (the reference code's 10 in 2-D; fewer in more
#: dimensions, so that 20,000 episodes can master a share of them); other dimensions get 3.
DEFAULT_CELLS = {1: 10, 2: 10, 3: 5, 4: 4}
#: The metric and the bootstrap settings of the printed intervals.
CONFIDENCE = 0.95
RESAMPLES = 2000
STATS_SEED = 0


def _random(space: Any, seed: int, background: bool = False) -> Any:
    from magister.curricula import DomainRandomization

    return DomainRandomization(space, seed=seed)


def _teacher(module: str, name: str, **kwargs: Any) -> Callable[..., Any]:
    """A factory of ``magister.curricula.<module>.<name>(space, seed=seed, **kwargs)``, with
    ``background`` passed to a teacher that can refit in the background; a callable value in ``kwargs`` is
    called with the number of dimensions (for settings given per dimension)."""

    def build(space: Any, seed: int, background: bool = False) -> Any:
        import importlib
        import inspect

        cls = getattr(importlib.import_module(f"magister.curricula.{module}"), name)
        dims = int(np.prod(space.shape))
        settings = {k: v(dims) if callable(v) else v for k, v in kwargs.items()}
        if "background" in inspect.signature(cls).parameters:
            settings["background"] = background
        return cls(space, seed=seed, **settings)

    build.__qualname__ = f"build_{name}"
    return build


#: The teachers the command compares, by their command-line names: a factory ``(Box, seed,
#: background=False) -> curriculum`` each, and the modules a teacher needs beyond the core install. The
#: teachers keep their defaults (the papers' or their reference code's) except where the toy env needs
#: prior knowledge they do not default: ADR's calibrated point is the origin cell and its thresholds are on
#: the toy's reward (competence / cap): a bound moves out once its boundary episodes average a mastered
#: cell (0.75) and in when they never learn (0), with TeachMyAgent's queue of 10, boundary share 0.7 and
#: step of 0.1; the self-paced teacher (black-box form, from returns) starts on the origin cell and targets
#: the whole cube.
TEACHERS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "random": (_random, ()),
    "alpgmm": (_teacher("alp_gmm", "ALPGMM"), ("sklearn", "scipy")),
    "covargmm": (_teacher("covar_gmm", "CovarGMM"), ("sklearn", "scipy")),
    "riac": (_teacher("riac", "RIAC"), ()),
    "adr": (_teacher("adr", "ADR", initial=0.0, low_threshold=0.0, high_threshold=0.75, queue_length=10,
                     boundary_prob=0.7, step=0.1), ()),
    "selfpaced": (_teacher("self_paced", "SelfPaced", mode="returns", init_mean=lambda d: [0.05] * d,
                           init_std=0.05, target_mean=lambda d: [0.5] * d, target_std=0.3), ("scipy",)),
    "goalgan": (_teacher("goal_gan", "GoalGAN"), ("torch",)),
}


def _has(modules: Sequence[str]) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in modules)


def make_teacher(name: str, dims: int, seed: int, background: bool = False) -> Any:
    """Teacher ``name`` (a key of :data:`TEACHERS`) over the unit box of ``dims`` dimensions (refitting in
    line unless ``background``)."""
    from magister.task_spaces import Box

    if name not in TEACHERS:
        raise ValueError(f"unknown teacher {name!r}; expected one of {sorted(TEACHERS)}")
    return TEACHERS[name][0](Box(0.0, 1.0, shape=(dims,)), seed, background)


@dataclass
class Run:
    """One run: the mastered share after every ``every`` episodes (``scores[0]`` at episode 0), and its
    wall time in seconds."""

    teacher: str
    dims: int
    cells: int
    seed: int
    every: int
    scores: list[float]
    seconds: float

    @property
    def episodes(self) -> int:
        return (len(self.scores) - 1) * self.every


def run_one(teacher: str, dims: int, cells: int, episodes: int, every: int, seed: int) -> Run:
    """``teacher`` teaches a fresh :class:`ToyEnv` (``dims`` x ``cells``) for ``episodes`` episodes."""
    t0 = time.perf_counter()
    env = ToyEnv(dims=dims, cells=cells)
    success = np.random.default_rng([seed, 1])  # the progress signal's draws, apart from the teacher's
    scores = [env.mastered()] + play(make_teacher(teacher, dims, seed), env, episodes, every, success)
    return Run(teacher, dims, cells, seed, every, scores, time.perf_counter() - t0)


def _one_thread() -> None:
    """Pool initializer: one BLAS / OpenMP / torch thread per worker process (the pool fills the cores)."""
    os.environ["OMP_NUM_THREADS"] = "1"  # read by torch when GoalGAN first imports it
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass


@contextlib.contextmanager
def _one_thread_here() -> Iterator[None]:
    """One BLAS / OpenMP thread in this process while the block runs (small mixtures fit several times
    faster on one thread than on many competing ones)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield
        return
    with threadpool_limits(1):
        yield


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_all(jobs: list[tuple[str, int, int, int, int, int]], workers: int, progress: bool) -> list[Run]:
    """Every job ``(teacher, dims, cells, episodes, every, seed)``: in this process with ``workers == 1``,
    else in a pool of ``workers`` processes; a tqdm bar counts finished runs."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(jobs), unit="run", desc="teacher toy", disable=not progress, dynamic_ncols=True)
    runs: list[Run] = []
    try:
        if workers == 1:
            with _one_thread_here():
                for job in jobs:
                    runs.append(run_one(*job))
                    bar.update()
            return runs
        import multiprocessing as mp

        context = mp.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool:
            futures = [pool.submit(run_one, *job) for job in jobs]
            for f in as_completed(futures):
                runs.append(f.result())
                bar.update()
        return runs
    finally:
        bar.close()


def _finals(runs: list[Run]) -> np.ndarray:
    """Final mastered shares, ``seeds x 1`` (one task: the toy env), in seed order."""
    return np.array([[r.scores[-1]] for r in sorted(runs, key=lambda r: r.seed)])


def statistics(runs: list[Run], baseline: str = "random") -> dict[str, dict[str, Any]]:
    """Per teacher: ``"mastered"`` (mean final share with its interval over seeds) and, when the baseline
    ran too, ``"minus"`` (the difference of the means from the baseline's, with its interval)."""
    from magister.evaluation import difference, interval_estimates

    by: dict[str, list[Run]] = {}
    for r in runs:
        by.setdefault(r.teacher, []).append(r)
    scores = {name: _finals(rs) for name, rs in by.items()}
    est = interval_estimates(scores, ("mean",), confidence=CONFIDENCE, n_resamples=RESAMPLES, seed=STATS_SEED)
    out: dict[str, dict[str, Any]] = {}
    for name, s in scores.items():
        row: dict[str, Any] = {"mastered": est[name]["mean"],
                               "seconds": float(np.mean([r.seconds for r in by[name]]))}
        if baseline in scores and name != baseline:
            row["minus"] = difference(s, scores[baseline], "mean", confidence=CONFIDENCE, seed=STATS_SEED,
                                      n_resamples=RESAMPLES)
        out[name] = row
    return out


def table(runs: list[Run], baseline: str = "random") -> str:
    """The printed block of one setting (dims, cells): a row per teacher, then every seed's final share."""
    from magister.evaluation import format_estimate

    stats = statistics(runs, baseline)
    first = runs[0]
    seeds = len({r.seed for r in runs})
    pct = round(CONFIDENCE * 100)
    lines = [f"{first.dims}-D ({first.cells}^{first.dims} = {first.cells ** first.dims} cells), "
             f"{first.episodes} episodes, {seeds} seeds: mastered share at the end, "
             f"{pct}% stratified bootstrap intervals over seeds ({RESAMPLES} resamples)"]
    head = f"{'teacher':>10} | {'mastered':<21} | {'minus ' + baseline:<24} | {'s/run':>6}"
    lines += [head, "-" * len(head)]
    for name, row in stats.items():
        minus = format_estimate(row["minus"]) if "minus" in row else ""
        mastered = format_estimate(row["mastered"])
        lines.append(f"{name:>10} | {mastered:<21} | {minus:<24} | {row['seconds']:6.1f}")
    lines.append("final mastered share per seed (in seed order):")
    for name in stats:
        finals = _finals([r for r in runs if r.teacher == name])[:, 0]
        lines.append(f"{name:>10}: " + " ".join(f"{v:.3f}" for v in finals))
    return "\n".join(lines)


def plot(runs: list[Run], path: Path) -> Path:
    """Mastered share over episodes per teacher, one panel per setting: the mean over seeds and its 95%
    bootstrap interval at every scoring point."""
    from magister.evaluation import interval_estimates
    from magister.evaluation.plots import _pyplot

    plt = _pyplot()
    settings = sorted({(r.dims, r.cells) for r in runs})
    fig, axes = plt.subplots(1, len(settings), figsize=(5.2 * len(settings), 3.8), squeeze=False)
    for ax, (dims, cells) in zip(axes[0], settings):
        for name in dict.fromkeys(r.teacher for r in runs):
            rs = [r for r in runs if (r.dims, r.cells, r.teacher) == (dims, cells, name)]
            if not rs:
                continue
            m = np.array([r.scores for r in sorted(rs, key=lambda r: r.seed)])  # seeds x points
            x = np.arange(m.shape[1]) * rs[0].every
            if m.shape[0] > 1:
                est = interval_estimates({str(j): m[:, j:j + 1] for j in range(m.shape[1])}, ("mean",),
                                         confidence=CONFIDENCE, n_resamples=500, seed=STATS_SEED)
                low = [est[str(j)]["mean"].low for j in range(m.shape[1])]
                high = [est[str(j)]["mean"].high for j in range(m.shape[1])]
                ax.fill_between(x, low, high, alpha=0.2)
            ax.plot(x, m.mean(axis=0), label=name)
        ax.set(title=f"{dims}-D, {cells}^{dims} cells", xlabel="episodes", ylabel="mastered share of cells")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(f"toy env: mean over seeds, {round(CONFIDENCE * 100)}% interval bands", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m magister.examples.teacher_toy",
                                description="Every teacher for continuous spaces against uniform sampling on "
                                            "the ALP-GMM paper's toy env, over seeds.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, default=10, help="runs per teacher and setting (seeds 0..N-1)")
    p.add_argument("--episodes", type=lambda s: int(float(s)), default=20_000, help="episodes per run")
    p.add_argument("--every", type=int, default=1000, help="score the env every this many episodes")
    p.add_argument("--dims", type=int, nargs="+", default=[2, 3], help="numbers of dimensions")
    p.add_argument("--cells", type=int, nargs="+", default=None,
                   help=f"cells per dimension, one per --dims value (default: {DEFAULT_CELLS}, else 3)")
    p.add_argument("--teachers", nargs="+", default=list(TEACHERS), choices=list(TEACHERS),
                   help="teachers to run (goalgan only where torch is installed)")
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: one per core)")
    p.add_argument("--out", default="runs/teacher_toy", help="folder of the plot")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--write-results", action="store_true",
                   help="write the tables into docs/results.md and the plot to docs/img/teacher-toy.png")
    p.epilog = ("Needs the 'teachers' extra (scikit-learn, scipy) and the 'examples' extra (tqdm, "
                "matplotlib, torch for GoalGAN): pip install 'magister[teachers,examples]'.")
    ns = p.parse_args(argv)
    if ns.cells is None:
        ns.cells = [DEFAULT_CELLS.get(d, 3) for d in ns.dims]
    if len(ns.cells) != len(ns.dims):
        p.error(f"--cells needs one value per --dims value ({len(ns.dims)}), got {len(ns.cells)}")
    if ns.seeds < 1 or ns.episodes < 1 or ns.every < 1 or ns.episodes % ns.every:
        p.error(f"--seeds and --episodes must be >= 1 and --episodes a multiple of --every, got "
                f"{ns.seeds}, {ns.episodes}, {ns.every}")
    return ns


SECTION = "teacher-toy"
IMAGE = "teacher-toy.png"


def main(argv: list[str] | None = None) -> list[Run]:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ns = parse(argv)
    from magister.examples import results as results_page
    from magister.examples._cli import require

    require({"tqdm": "examples", "matplotlib": "examples", "scipy": "eval"},
            "python -m magister.examples.teacher_toy")
    if ns.write_results:
        results_page.check_section(results_page.RESULTS_PAGE, SECTION)  # before the runs, not after
    teachers = [t for t in ns.teachers if _has(TEACHERS[t][1])]
    skipped = [t for t in ns.teachers if t not in teachers]
    jobs = [(t, d, c, ns.episodes, ns.every, s) for d, c in zip(ns.dims, ns.cells) for t in teachers
            for s in range(ns.seeds)]
    workers = ns.workers or min(_cores(), len(jobs))
    t0 = time.perf_counter()
    runs = run_all(jobs, workers, ns.progress)
    order = {t: i for i, t in enumerate(teachers)}
    runs.sort(key=lambda r: (r.dims, order[r.teacher], r.seed))
    blocks = [table([r for r in runs if (r.dims, r.cells) == (d, c)]) for d, c in zip(ns.dims, ns.cells)]
    text = "\n\n".join(blocks) + (
        f"\n\nteachers built with background=False (refits in line: exact, reproducible); random = "
        f"DomainRandomization; {len(runs)} runs in {time.perf_counter() - t0:.0f} s "
        f"{'in one process' if workers == 1 else f'on {workers} worker processes'} "
        f"({results_page.machine()} at the end)")
    if skipped:
        text += f"\nnot run (a module they need is not installed): {', '.join(skipped)}"
    print(text)
    out = plot(runs, Path(ns.out) / IMAGE)
    print(f"plot: {out}")
    if ns.write_results:
        image = results_page.save_image(out, IMAGE)
        command = results_page.command_line(None if argv is None else ["", *argv],
                                            module="magister.examples.teacher_toy")
        results_page.write_section(results_page.RESULTS_PAGE, SECTION, results_page.text_block(text), command,
                                   images=[image])
    return runs


if __name__ == "__main__":
    main()
