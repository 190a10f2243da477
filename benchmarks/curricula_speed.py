"""Curricula speed and memory against the reference library (syllabus-rl 0.7): PLR, Learning Progress, SFL.

Run (magister only; the reference columns show ``n/a``)::

    python benchmarks/curricula_speed.py [--quick]

Run against the reference library, which lives in its own virtualenv (never in the development one)::

    bash benchmarks/_reference_env.sh .venvs/reference
    .venvs/reference/bin/python benchmarks/curricula_speed.py

For each algorithm and each number of tasks ``n`` (10^3, 10^4, 10^5), both libraries get the same call
sequence on a discrete space of ``n`` tasks:

1. **Construction and warm-up** (untimed): every task gets one piece of feedback, so every per-task table
   is filled. The bytes still allocated afterwards (``tracemalloc``, numpy buffers included; torch tensors,
   which only the reference's PLR rollout storage uses, are not traced) divided by ``n`` is the
   *memory per task*.
2. **Timed** (after one untimed round): ``M`` rounds of ``task = sample(1)`` followed by one *episode
   update* for that task. The two calls are timed separately within the same loop, so the sample cost
   includes whatever the preceding updates left to do (cache invalidation, pending refreshes, magister
   PLR's lazy repair of its score order); the block is also timed as a whole, giving *rounds/s*
   (``sample(1)`` + its update together): the total cost, wherever each library defers its work. A block
   of ``M`` rounds is repeated ``--repeats`` times, the two libraries alternating block by block; the
   table shows the median rate of the blocks. ``M`` is 100 (50 at 10^5 tasks, where one reference round takes
   tens of milliseconds), a multiple of 25, the update period of LP and SFL, so every block holds the
   same number of periodic refreshes.

The calls, per algorithm (configured alike: the settings below are the same on both sides):

* **PLR** (value-L1 score, rank prioritisation, ``beta = 0.1``, staleness ``rho = 0.1``, every task
  buffered: magister ``buffer_size = n, min_fill_ratio = 1``; reference ``replay_schedule="fixed"``, whose
  ``rho = 1`` likewise replays only once every task has been seen). Episode update = one finished episode
  of one step handed over as a rollout (reward, value, done, next value, task), the curriculum computing
  its value-L1 score: magister :func:`~magister.integrations.scores.feed_scores` with ``T = N = 1``,
  reference ``CentralPrioritizedLevelReplay.update(...)`` with ``num_steps = num_processes = 1`` (its only
  working score door in 0.7: ``DirectPrioritizedLevelReplay.update`` calls a method that does not exist).
  The row **PLR score write** times just the write of a ready score: magister ``update_scores([t], [s])``
  against the reference's internal ``TaskSampler.update_task_score`` (what its ``update`` ends in). Both
  writes are O(1); both libraries pay at the next ``sample``: the reference sorts all ``n`` scores,
  magister repairs its score order for the entries written since the last sample (one shift here).
  The row **PLR 64 writes** is the asynchronous case, 64 envs finishing episodes between two samples:
  each round's update is 64 single score writes, the sampled task's and 63 other tasks' (pseudo-random,
  the same on both sides), and update/s counts these bursts (magister then repairs its order in one merge
  pass at the next sample).
  Warm-up: magister samples the unbuffered tasks in batches and scores them until all ``n`` are buffered;
  the reference gets one ``update_task_score`` per task (its public ``update`` costs O(n) Python work
  per call, far too slow to call ``n`` times at 10^5).
* **LP** (online learning progress, ``alpha = 0.1``, ``p_theta = 0.1``, EMA step every 25 episodes, uniform
  mix 0.25 = the reference's default ``uniform_prob``): magister ``LearningProgress(variant="online")`` and
  ``update_on_episode``; reference ``OnlineLearningProgress(update_interval=25)`` fed with
  ``update_task_progress`` + ``update_on_episode`` (it needs both calls for one episode). Success is 0 or 1
  (the reference floors fractional progress).
* **SFL** (top-K learnability, ``K = 10``, sample ratio 1, refresh every 25 episodes): magister ``SFL`` with
  the Syllabus-paper defaults (``N = 200`` candidates) fed by ``update_on_episode``; reference
  ``Learnability(sampling="topk", topk=10, eval_interval=25)``, which learns only from an evaluator it
  calls every 25 episodes: here a stub that returns precomputed success rates at no cost, so the
  reference is timed on its curriculum bookkeeping alone (a real evaluation would cost rollouts on all
  ``n`` tasks).

The reference samples with the global ``np.random`` (seeded here); magister with its own generator.
Rates are calls per second on this machine; compare the ratios (magister / reference), measured in one run.

**Teachers on a 2-D Box** (a section of its own: the reference library has none of them). Every teacher
for continuous parameters (ALP-GMM, Covar-GMM, RIAC, ADR, self-paced, GoalGAN where torch is installed)
and domain randomisation over ``Box(0, 1, shape=(2,))``, built as :mod:`magister.examples.teacher_toy`
builds them (the papers' defaults). The feedback is the toy env's reward for each task
(:class:`magister.examples.teacher_toy.ToyEnv`, computed outside the timed calls) as the return, and a
success drawn with that probability as the progress (as the toy command feeds them). Warm-up (untimed):
``--box-episodes`` (10^5) episodes of ``sample(1)`` + its update with the refits in the background (their
default: refits that come due while one runs merge into the next, so the warm-up takes minutes, not
hours), so every history the teacher keeps holds 10^5 episodes. Then the refits run in line (the
teacher's :class:`~magister.curricula._continuous.Refit` switched to ``background=False``), so that a
call's whole cost is timed in the call. Timed: ``--repeats`` blocks of ``M = 1000`` rounds (a multiple of
every teacher's refit period), each ``sample(1)`` and each update timed alone: the mean cost of a sample,
the median cost of an update (an update that triggers no refit: a k-d tree rebuilt, a region split, a
bound moved, a self-paced step included) and its mean (refits included, amortised), the refits in the
timed blocks and the median seconds of one. A served teacher runs its refits in a worker thread instead
(what that costs the workers is ``benchmarks/teacher_refit.py``'s question).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shlex
import sys
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from magister.curricula.learning_progress import LearningProgress
from magister.curricula.plr import PLR
from magister.curricula.sfl import SFL
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording
from magister.integrations.scores import feed_scores
from magister.task_spaces.discrete import Discrete

logger = logging.getLogger(__name__)

try:  # the reference library is optional: only in the separate benchmark virtualenv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import syllabus.curricula as syl
        from syllabus.task_space import DiscreteTaskSpace
    HAVE_REFERENCE = True
except ImportError:  # pragma: no cover - depends on the environment
    syl = None
    DiscreteTaskSpace = None
    HAVE_REFERENCE = False

PERIOD = 25  # update period of LP / refresh period of SFL, the same on both sides
BURST = 64  # score writes per round in the "PLR 64 writes" row (64 asynchronous envs between two samples)


# -- feedback stream ------------------------------------------------------------------------------------
class Feedback:
    """Precomputed pseudo-random feedback, so the timed loops do not measure a random generator."""

    def __init__(self, seed: int, size: int = 1 << 16) -> None:
        rng = np.random.default_rng(seed)
        self.scores = rng.random(size).tolist()
        self.success = (rng.random(size) < 0.5).astype(float).tolist()
        self.uniform = rng.random(size).tolist()
        self.i = 0
        self.j = 0
        self.size = size

    def next(self) -> tuple[float, float]:
        """``(score, success)`` of the next episode."""
        i = self.i
        self.i = (i + 1) % self.size
        return self.scores[i], self.success[i]

    def task(self, n: int) -> int:
        """The next pseudo-random task of ``0 .. n-1`` (the other envs' tasks in a burst of writes)."""
        j = self.j
        self.j = (j + 1) % self.size
        return int(self.uniform[j] * n)


@dataclass
class Case:
    """One library's implementation of one algorithm, as the benchmark drives it."""

    build: Callable[[int], Any]
    warm: Callable[[Any, int, Feedback], None]
    sample: Callable[[Any], Any]
    update: Callable[[Any, Any, Feedback], None]
    extra: dict[str, Any] = field(default_factory=dict)


# -- magister -------------------------------------------------------------------------------------------
def _mag_plr_build(n: int) -> PLR:
    return PLR(Discrete(n), score="value_l1", buffer_size=n, min_fill_ratio=1.0, temperature=0.1,
               staleness_coef=0.1, prioritization="rank", seed=0)


def _mag_plr_warm(plr: PLR, n: int, fb: Feedback) -> None:
    # Before the buffer is full, min_fill_ratio=1 makes every sample a new (unbuffered) task.
    while len(plr) < n:
        tasks = plr.sample(min(4096, n - len(plr)))
        plr.update_scores(tasks, [fb.next()[0] for _ in tasks])


_R = np.array([[1.0]])
_V = np.array([[0.5]])
_D = np.array([[True]])
_NV = np.array([0.0])


def _mag_plr_feed(plr: PLR, task: int, fb: Feedback) -> None:
    score, _ = fb.next()
    feed_scores(plr, _R * score, _V, _D, _NV, np.array([[task]]), done_convention="ended_at")


def _mag_plr_write(plr: PLR, task: int, fb: Feedback) -> None:
    plr.update_scores([task], [fb.next()[0]])


def _mag_plr_burst(plr: PLR, task: int, fb: Feedback) -> None:
    plr.update_scores([task], [fb.next()[0]])
    n = plr.capacity
    for _ in range(BURST - 1):
        plr.update_scores([fb.task(n)], [fb.next()[0]])


def _mag_lp_build(n: int) -> LearningProgress:
    return LearningProgress(Discrete(n), ema_alpha=0.1, p_theta=0.1, update_period=PERIOD, variant="online",
                            uniform_mix=0.25, seed=0)


def _mag_sfl_build(n: int) -> SFL:
    return SFL(Discrete(n), method="topk", batch_size=200, update_period=PERIOD, buffer_size=10,
               sample_ratio=1.0, seed=0)


def _mag_episode(cur: Any, task: int, fb: Feedback) -> None:
    _, success = fb.next()
    cur.update_on_episode(success, 1, task, success)


def _mag_warm_episodes(cur: Any, n: int, fb: Feedback) -> None:
    for t in range(n):
        _mag_episode(cur, t, fb)


def _mag_sample(cur: Any) -> Any:
    return cur.sample(1)[0]


MAGISTER: dict[str, Case] = {
    "PLR": Case(_mag_plr_build, _mag_plr_warm, _mag_sample, _mag_plr_feed),
    "PLR score write": Case(_mag_plr_build, _mag_plr_warm, _mag_sample, _mag_plr_write),
    f"PLR {BURST} writes": Case(_mag_plr_build, _mag_plr_warm, _mag_sample, _mag_plr_burst),
    "LP": Case(_mag_lp_build, _mag_warm_episodes, _mag_sample, _mag_episode),
    "SFL": Case(_mag_sfl_build, _mag_warm_episodes, _mag_sample, _mag_episode),
}


# -- reference (syllabus-rl 0.7) ------------------------------------------------------------------------
def _ref_plr_build(n: int) -> Any:
    return syl.CentralPrioritizedLevelReplay(
        DiscreteTaskSpace(n), num_steps=1, num_processes=1, gamma=0.999, gae_lambda=0.95,
        task_sampler_kwargs_dict={"strategy": "value_l1", "replay_schedule": "fixed", "rho": 1.0,
                                  "score_transform": "rank", "temperature": 0.1, "staleness_coef": 0.1},
    )


def _ref_plr_warm(plr: Any, n: int, fb: Feedback) -> None:
    sampler = plr._task_sampler
    for t in range(n):
        s = fb.next()[0]
        sampler.update_task_score(0, t, s, s, 1)


def _ref_plr_feed(plr: Any, task: int, fb: Feedback) -> None:
    score, _ = fb.next()
    plr.update({"tasks": [task], "dones": [True], "value": [0.5], "rew": [score], "next_value": [0.0]})


def _ref_plr_write(plr: Any, task: int, fb: Feedback) -> None:
    s = fb.next()[0]
    plr._task_sampler.update_task_score(0, task, s, s, 1)


def _ref_plr_burst(plr: Any, task: int, fb: Feedback) -> None:
    sampler = plr._task_sampler
    s = fb.next()[0]
    sampler.update_task_score(0, task, s, s, 1)
    n = len(sampler.tasks)
    for _ in range(BURST - 1):
        s = fb.next()[0]
        sampler.update_task_score(0, fb.task(n), s, s, 1)


def _ref_lp_build(n: int) -> Any:
    return syl.OnlineLearningProgress(DiscreteTaskSpace(n), ema_alpha=0.1, p_theta=0.1,
                                      update_interval=PERIOD, uniform_prob=0.25)


def _ref_lp_episode(cur: Any, task: int, fb: Feedback) -> None:
    _, success = fb.next()
    cur.update_task_progress(task, success)
    cur.update_on_episode(success, 1, task, success)


class _StubEvaluator:
    """Stands in for the reference's evaluator: returns fixed success rates instantly."""

    def __init__(self, n: int, seed: int) -> None:
        self.rates = np.random.default_rng(seed).random(n)

    def evaluate_agent(self, num_episodes: int = 1, verbose: bool = False, **_: Any) -> tuple:
        return None, self.rates, self.rates, None


def _ref_sfl_build(n: int) -> Any:
    return syl.Learnability(_StubEvaluator(n, 1), DiscreteTaskSpace(n), topk=10, learnable_prob=1.0,
                            sampling="topk", eval_interval=PERIOD)


def _ref_sfl_episode(cur: Any, task: int, fb: Feedback) -> None:
    _, success = fb.next()
    cur.update_on_episode(success, 1, task, success)


def _ref_warm_with(episode: Callable[[Any, int, Feedback], None]) -> Callable[[Any, int, Feedback], None]:
    def warm(cur: Any, n: int, fb: Feedback) -> None:
        for t in range(n):
            episode(cur, t, fb)
    return warm


def _ref_sample(cur: Any) -> Any:
    return int(cur.sample(1)[0])


REFERENCE: dict[str, Case] = {
    "PLR": Case(_ref_plr_build, _ref_plr_warm, _ref_sample, _ref_plr_feed),
    "PLR score write": Case(_ref_plr_build, _ref_plr_warm, _ref_sample, _ref_plr_write),
    f"PLR {BURST} writes": Case(_ref_plr_build, _ref_plr_warm, _ref_sample, _ref_plr_burst),
    "LP": Case(_ref_lp_build, _ref_warm_with(_ref_lp_episode), _ref_sample, _ref_lp_episode),
    "SFL": Case(_ref_sfl_build, _ref_warm_with(_ref_sfl_episode), _ref_sample, _ref_sfl_episode),
}


# -- measurement ----------------------------------------------------------------------------------------
def build_and_warm(case: Case, n: int, seed: int) -> tuple[Any, Feedback, float]:
    """Construct and warm up; returns ``(curriculum, feedback stream, traced bytes per task)``."""
    fb = Feedback(seed)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cur = case.build(n)
    case.warm(cur, n, fb)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return cur, fb, used / n


def time_block(case: Case, cur: Any, fb: Feedback, m: int) -> tuple[float, float, float]:
    """``m`` rounds of sample(1) + one episode update; returns (samples/s, updates/s, rounds/s).

    The sample and update calls are timed one by one; rounds/s is ``m`` over the block's total time.
    """
    t_sample = t_update = 0.0
    clock = time.perf_counter
    start = clock()
    for _ in range(m):
        t0 = clock()
        task = case.sample(cur)
        t1 = clock()
        case.update(cur, task, fb)
        t2 = clock()
        t_sample += t1 - t0
        t_update += t2 - t1
    return m / t_sample, m / t_update, m / (clock() - start)


@dataclass
class Row:
    algo: str
    n: int
    rates: dict[str, list[tuple[float, float, float]]]
    mem: dict[str, float]


def measure(algo: str, n: int, m: int, repeats: int, libs: dict[str, Case]) -> Row:
    """Build both libraries' curricula, then time ``repeats`` blocks of each, alternating."""
    state = {}
    mem = {}
    for lib, case in libs.items():
        build_and_warm(case, 64, seed=0)  # first calls import lazily: keep that out of the memory figure
        np.random.seed(0)  # noqa: NPY002 - the reference samples with the global generator
        t0 = time.perf_counter()
        cur, fb, per_task = build_and_warm(case, n, seed=1)
        time_block(case, cur, fb, 1)  # one untimed round: lazily built state is built before the clock
        logger.info("%s %s n=%d: built and warmed in %.1f s", lib, algo, n, time.perf_counter() - t0)
        state[lib] = (cur, fb)
        mem[lib] = per_task
    rates: dict[str, list[tuple[float, float, float]]] = {lib: [] for lib in libs}
    for _ in range(repeats):
        for lib, case in libs.items():
            cur, fb = state[lib]
            rates[lib].append(time_block(case, cur, fb, m))
    return Row(algo, n, rates, mem)


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 1e5:
        return f"{x / 1e3:,.0f}k"
    return f"{x:,.0f}"


def _fmt_ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:,.1f}x"


def _fmt_mem(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def table(rows: list[Row]) -> str:
    head = ("algorithm", "n", "sample/s mag", "sample/s ref", "ratio", "update/s mag", "update/s ref",
            "ratio", "round/s mag", "round/s ref", "ratio", "B/task mag", "B/task ref")
    lines = []
    for r in rows:
        med = {lib: tuple(float(np.median(col)) for col in zip(*v)) for lib, v in r.rates.items()}
        ms, mu, mr = med["magister"]
        rs, ru, rr = med.get("reference", (None, None, None))
        lines.append((r.algo, f"{r.n:,}", _fmt_rate(ms), _fmt_rate(rs), _fmt_ratio(ms, rs), _fmt_rate(mu),
                      _fmt_rate(ru), _fmt_ratio(mu, ru), _fmt_rate(mr), _fmt_rate(rr), _fmt_ratio(mr, rr),
                      _fmt_mem(r.mem["magister"]), _fmt_mem(r.mem.get("reference"))))
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    out = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    out.append("  ".join("-" * w for w in widths))
    for line in lines:
        out.append("  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                             for i, (x, w) in enumerate(zip(line, widths))))
    return "\n".join(out)


def calls_for(n: int, args: argparse.Namespace) -> int:
    """``M`` for ``n`` tasks: fewer rounds at 10^5, where one reference round takes tens of ms."""
    if args.calls is not None:
        return args.calls
    if args.quick:
        return PERIOD
    return 100 if n <= 10_000 else 50


# -- teachers on a 2-D Box -------------------------------------------------------------------------------
BOX_ROUNDS = 1000  # rounds per timed block: a multiple of every teacher's refit period


def box_teachers() -> list[str]:
    """The toy command's teachers whose modules are installed (``random`` = DomainRandomization)."""
    from magister.examples import teacher_toy

    return [t for t, (_, needs) in teacher_toy.TEACHERS.items() if teacher_toy._has(needs)]


@dataclass
class BoxRow:
    name: str
    episodes: int
    warm_s: float
    samples: np.ndarray  # seconds of each timed sample(1)
    updates: np.ndarray  # seconds of each timed update
    fits: list[float]  # seconds of each refit in the timed blocks


def refits_of(cur: Any) -> list[Any]:
    from magister.curricula._continuous import Refit

    return [v for v in vars(cur).values() if isinstance(v, Refit)]


def time_fits(cur: Any) -> list[tuple[float, float]]:
    """Wrap the fit of every :class:`Refit` the curriculum holds, so each fit's (start, end) is kept."""
    spans: list[tuple[float, float]] = []
    for refit in refits_of(cur):
        fit = refit.fit

        def timed(snapshot: Any, fit: Any = fit) -> Any:
            t0 = time.perf_counter()
            try:
                return fit(snapshot)
            finally:
                spans.append((t0, time.perf_counter()))

        refit.fit = timed
    return spans


def box_rounds(cur: Any, env: Any, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` rounds of ``sample(1)`` + the toy env's reward as its update; the seconds of each call."""
    samples, updates = np.empty(m), np.empty(m)
    clock = time.perf_counter
    for i in range(m):
        t0 = clock()
        task = cur.sample(1)[0]
        t1 = clock()
        reward = env.play(task)
        success = float(rng.random() < reward)
        t2 = clock()
        cur.update_on_episode(reward, 1, task, success)
        t3 = clock()
        samples[i], updates[i] = t1 - t0, t3 - t2
    return samples, updates


def measure_box(name: str, episodes: int, repeats: int) -> BoxRow:
    from magister.examples.teacher_toy import ToyEnv, make_teacher

    cur, env, rng = make_teacher(name, 2, seed=0, background=True), ToyEnv(dims=2), np.random.default_rng(1)
    spans = time_fits(cur)
    t0 = time.perf_counter()
    box_rounds(cur, env, episodes, rng)  # warm-up: the histories fill to `episodes`
    for refit in refits_of(cur):  # the fit in flight finishes; from now on refits run in line
        refit.wait(600)
        refit.background = False
    warm = time.perf_counter() - t0
    logger.info("%s: %d warm-up episodes in %.1f s", name, episodes, warm)
    n_warm = len(spans)
    blocks = [box_rounds(cur, env, BOX_ROUNDS, rng) for _ in range(repeats)]
    samples = np.concatenate([b[0] for b in blocks])
    updates = np.concatenate([b[1] for b in blocks])
    return BoxRow(name, episodes, warm, samples, updates, [b - a for a, b in spans[n_warm:]])


def box_table(rows: list[BoxRow]) -> str:
    head = ("teacher", "episodes", "us/sample", "us/update p50", "us/update mean", "refits", "s/refit",
            "warm-up s")
    lines = []
    for r in rows:
        lines.append((r.name, f"{r.episodes:,}", f"{1e6 * r.samples.mean():,.1f}",
                      f"{1e6 * np.median(r.updates):,.1f}", f"{1e6 * r.updates.mean():,.1f}",
                      str(len(r.fits)), f"{np.median(r.fits):.2f}" if r.fits else "-", f"{r.warm_s:,.1f}"))
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    fmt = lambda row: "  ".join(x.ljust(w) if i == 0 else x.rjust(w)  # noqa: E731
                                for i, (x, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths), *map(fmt, lines)])


def run_box(args: argparse.Namespace) -> None:
    logging.getLogger("magister.curricula").setLevel(logging.WARNING)  # (each refit logs at INFO)
    names = args.box_teachers or box_teachers()
    rows = [measure_box(name, args.box_episodes, args.repeats) for name in names]
    print(f"Teachers on a 2-D Box: {args.box_episodes:,} episodes of warm-up, then {args.repeats} blocks of "
          f"{BOX_ROUNDS} rounds of sample(1) + episode update (the toy env's reward), every call timed; "
          f"refits in line during the timed blocks; random = DomainRandomization")
    print(box_table(rows))
    print("us/sample: mean; us/update p50: an update without a refit; us/update mean: refits included "
          "(amortised); refits: in the timed blocks, s/refit: the median seconds of one; warm-up s: the "
          "warm-up's rounds, refits in the background")
    print(f"end: {machine()}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small n, few calls")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of tasks")
    parser.add_argument("--calls", type=int, default=None, help="M, rounds per timed block (multiple of 25)")
    parser.add_argument("--repeats", type=int, default=3, help="timed blocks per library (median shown)")
    parser.add_argument("--algos", nargs="+", default=list(MAGISTER), choices=list(MAGISTER))
    parser.add_argument("--no-reference", action="store_true", help="time magister only")
    parser.add_argument("--only", choices=["discrete", "box"], default=None,
                        help="run one section: the discrete curricula against the reference, or the teachers "
                             "on a 2-D Box")
    parser.add_argument("--box-episodes", type=lambda s: int(float(s)), default=100_000,
                        help="teachers' warm-up episodes before the timed blocks")
    parser.add_argument("--box-teachers", nargs="+", default=None, help="teachers to time (default: all)")
    parser.add_argument("--write-results", action="store_true",
                        help="write the output into docs/results.md and benchmarks/README.md")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([1000, 10000] if args.quick else [1000, 10000, 100000])
    if args.calls is not None and args.calls % PERIOD:
        parser.error(f"--calls must be a multiple of {PERIOD}, got {args.calls}")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    use_ref = HAVE_REFERENCE and not args.no_reference
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    warnings.filterwarnings("ignore")  # the reference warns on every large-space construction

    if args.only != "discrete":
        with recording("curricula-speed-teachers", enabled=args.write_results,
                       pages=(RESULTS_PAGE, BENCHMARKS_README)):
            run_box(args)
    if args.only == "box":
        return
    with recording("curricula-speed", enabled=args.write_results, pages=(RESULTS_PAGE, BENCHMARKS_README)):
        rows = []
        for algo in args.algos:
            for n in sizes:
                libs = {"magister": MAGISTER[algo]}
                if use_ref:
                    libs["reference"] = REFERENCE[algo]
                rows.append(measure(algo, n, calls_for(n, args), args.repeats, libs))

        argv_used = sys.argv[1:] if argv is None else argv
        ms = ", ".join(str(calls_for(n, args)) for n in sizes)
        ns = ", ".join(f"{n:,}" for n in sizes)
        if use_ref:
            ref = "syllabus-rl 0.7"
        elif HAVE_REFERENCE:
            ref = "n/a (--no-reference)"
        else:
            ref = "n/a (syllabus-rl not installed: see benchmarks/_reference_env.sh)"
        print(f"Curricula speed: magister vs {ref}"
              f"; M rounds of sample(1) + episode update per block (M = {ms} for n = {ns}), "
              f"median of {args.repeats} blocks")
        print(table(rows))
        print("ratio = magister / reference (higher is better for magister); round = sample(1) + its update, "
              "timed together (whatever each library defers to either call); B/task = bytes allocated by "
              "construction + warm-up, per task")
        here = os.path.relpath(sys.executable)  # (the interpreter as the checkout names it, not this machine)
        python = here if not here.startswith("..") else "python"
        print("Reproduce: " + shlex.join([python, "benchmarks/curricula_speed.py", *argv_used]))


if __name__ == "__main__":
    main()
