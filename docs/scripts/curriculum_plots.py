"""Draw the behaviour plots of the curriculum pages (docs/img/*.png) on a simulated student.

    python docs/scripts/curriculum_plots.py              # every figure, a few seconds each
    python docs/scripts/curriculum_plots.py --only plr   # one figure

The student is ``tests/simulated_student.py``: 200 tasks, 10% of them learnable (the rest are never solved),
one-step episodes whose success probability grows each time the student trains on the task. Every run is
seeded, so the figures are the same on every machine (up to matplotlib's rendering).

The continuous-space teachers (SelfPaced, GoalGAN) are drawn on the teacher-only toy env of the ALP-GMM
paper's code (examples/teacher_toy.py) instead, 20,000 episodes each; GoalGAN's figure trains its GAN about
90 times and takes a few minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from simulated_student import SimulatedStudent  # noqa: E402

from magister.curricula import (  # noqa: E402
    ACCEL,
    ADR,
    ALPGMM,
    FSP,
    OMNI,
    PFSP,
    PLR,
    RIAC,
    SFL,
    Constant,
    CovarGMM,
    DomainRandomization,
    ExpandingBox,
    GoalGAN,
    LearningProgress,
    Manual,
    OpponentStore,
    RobustPLR,
    SelfPaced,
    SelfPlay,
    Sequential,
    TaskFilter,
)
from magister.curricula.interestingness import InterestingnessJudge  # noqa: E402
from magister.examples.teacher_toy import ToyEnv  # noqa: E402
from magister.task_spaces import Box, Discrete  # noqa: E402

N_TASKS, BUDGET, BATCH, SEED = 200, 4000, 16, 0
COLORS = {"curriculum": "#1565c0", "baseline": "#9e9e9e"}


class MutableDiscrete(Discrete):
    """Discrete tasks with an edit for ACCEL: move to a neighbouring index."""

    can_mutate = True

    def mutate(self, encoded, rng):
        return int(np.clip(encoded + rng.integers(-3, 4), 0, self.num_tasks - 1))


def _plain(sample) -> tuple[int, bool, bool]:
    """(task index, train, control) of a TaskSample."""
    task, control = sample.task, bool(getattr(sample, "control", False))
    if isinstance(task, (tuple, list)) and task and isinstance(task[0], str):  # a tagged control task
        control, task = True, task[1]
    return int(task), bool(sample.train), control


def run(curriculum, budget: int = BUDGET, seed: int = SEED, value_score: str | None = None) -> dict:
    """The student loop of tests/simulated_student.py, recording curves as it goes."""
    student = SimulatedStudent(N_TASKS, seed=seed)
    rng = np.random.default_rng(seed + 1_000_003)
    xs, success, frac_possible, frac_train = [], [], [], []
    window_pos = window_train = window_n = 0
    counts = np.zeros(N_TASKS)
    done = 0
    while done < budget:
        samples = curriculum.sample_tasks(BATCH)
        plain = [_plain(s) for s in samples]
        idx = np.array([p[0] for p in plain])
        train = np.array([p[1] and not p[2] for p in plain])
        control = np.array([p[2] for p in plain])
        returns = np.where(control, 0.0, student.play(idx, rng))  # the control policy (random) never solves
        if value_score is not None:
            curriculum.update_scores([s.task for s in samples], student.scores(idx, returns, value_score))
        for s, r in zip(samples, returns.tolist()):
            curriculum.update_on_episode(r, 1, s.task, r)
        student.train(idx[train], returns[train])
        np.add.at(counts, idx, 1)
        window_pos += int(student.possible[idx].sum())
        window_train += int(train.sum())
        window_n += len(idx)
        done += len(idx)
        if window_n >= 200 or done >= budget:
            xs.append(done)
            success.append(float(student.p[student.possible].mean()))
            frac_possible.append(window_pos / window_n)
            frac_train.append(window_train / window_n)
            window_pos = window_train = window_n = 0
    return {"x": xs, "success": success, "possible": frac_possible, "train": frac_train,
            "counts": counts, "is_possible": student.possible, "p": student.p}


def student_figure(name: str, title: str, make: Callable[[], object], out: Path, **kw) -> None:
    """Left: mean success on learnable tasks vs uniform sampling. Right: where the episodes went."""
    cur, base = run(make(), **kw), run(DomainRandomization(Discrete(N_TASKS), seed=SEED))
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(cur["x"], cur["success"], color=COLORS["curriculum"], label=title)
    a.plot(base["x"], base["success"], color=COLORS["baseline"], label="DomainRandomization")
    a.set(xlabel="episodes", ylabel="mean success, learnable tasks", ylim=(0, 1))
    a.legend(loc="upper left", fontsize=8)
    b.plot(cur["x"], cur["possible"], color=COLORS["curriculum"], label="episodes on learnable tasks")
    if min(cur["train"]) < 1:
        b.plot(cur["x"], cur["train"], color=COLORS["curriculum"], ls="--", label="training episodes")
    b.plot(base["x"], base["possible"], color=COLORS["baseline"], label="uniform: on learnable tasks")
    b.set(xlabel="episodes", ylabel="share of the last 200 episodes", ylim=(0, 1.05))
    b.legend(loc="center right", fontsize=8)
    fig.suptitle(f"{title} on a simulated student (200 tasks, 20 learnable)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=90)
    plt.close(fig)


class NearCopyJudge(InterestingnessJudge):
    """Judges a task uninteresting once a task next to it (index +-1) is mastered (p >= 0.8)."""

    def judge(self, descriptions, success_rates):
        rates = np.asarray(success_rates, dtype=float)
        mastered = np.nan_to_num(rates) >= 0.8
        return ~(mastered | np.roll(mastered, 1) | np.roll(mastered, -1))


def expanding_box_figure(out: Path) -> None:
    cur = ExpandingBox(Box(0.0, 1.0), start_low=0.0, start_high=0.1, duration=3000, seed=SEED)
    xs, ys, highs = [], [], []
    for episode in range(BUDGET):
        (task,) = cur.sample(1)
        xs.append(episode)
        ys.append(task[0])
        highs.append(float(cur.current_range()[1][0]))
        cur.update_on_episode(1.0, 1, task, 1.0)
    fig, a = plt.subplots(figsize=(6, 3.2))
    a.scatter(xs[::4], ys[::4], s=2, color=COLORS["curriculum"], label="sampled task")
    a.plot(xs, highs, color="black", label="upper end of the range")
    a.set(xlabel="episodes", ylabel="task (a Box(0, 1) value)", ylim=(0, 1.02))
    a.legend(loc="lower right", fontsize=8)
    a.set_title("ExpandingBox, duration=3000 episodes, start [0, 0.1]", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "expanding-box.png", dpi=90)
    plt.close(fig)


def toy_teacher_figure(name: str, title: str, make: Callable[[], object], out: Path,
                       episodes: int = 10_000, panels: tuple[int, ...] = (2000, 6000, 10_000)) -> None:
    """A teacher on the toy env of ``examples/teacher_toy.py`` ([0, 1]^2, 10 x 10 cells, competence spreading
    from the cell at the origin): where it sampled in the 1,000 episodes before each of ``panels`` (dots,
    over the cells mastered by then), and the share of cells mastered against uniform sampling."""
    from threadpoolctl import threadpool_limits

    def loop(cur):
        env, tasks, scores, grids = ToyEnv(2), [], [], {}
        for n in range(1, episodes + 1):
            (task,) = cur.sample(1)
            reward = env.play(task)
            cur.update_on_episode(reward, 1, task, reward)
            tasks.append(task)
            if n % 250 == 0:
                scores.append((n, env.mastered()))
            if n in panels:
                grids[n] = env.competence > env.threshold
        return np.array(tasks), np.array(scores), grids

    with threadpool_limits(1):  # the fits are small: BLAS and OpenMP threads would only spin
        tasks, scores, grids = loop(make())
    _, base, _ = loop(DomainRandomization(_unit_square(), seed=SEED))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(3.1 * (len(panels) + 1), 3.2))
    for a, end in zip(axes, panels):
        a.imshow(grids[end].T, origin="lower", extent=(0, 1, 0, 1), cmap="Greys", vmin=0, vmax=2.5)
        window = tasks[end - 1000:end]
        a.scatter(window[:, 0], window[:, 1], s=2, color=COLORS["curriculum"])
        a.set(xlim=(0, 1), ylim=(0, 1), xticks=[0, 1], yticks=[0, 1], aspect="equal")
        a.set_title(f"episodes {end - 1000}-{end}", fontsize=9)
    b = axes[-1]
    b.plot(scores[:, 0], scores[:, 1], color=COLORS["curriculum"], label=title)
    b.plot(base[:, 0], base[:, 1], color=COLORS["baseline"], label="DomainRandomization")
    b.set(xlabel="episodes", ylabel="share of cells mastered", ylim=(0, 1))
    b.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{title} on the toy env (grey: mastered cells; dots: the last 1,000 tasks sampled)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=90)
    plt.close(fig)


def coplayer_figure(name: str, file: str, make: Callable[[OpponentStore], object], out: Path) -> None:
    """The learner's skill grows; each stored snapshot keeps the skill it had. Which opponents are drawn?"""
    with tempfile.TemporaryDirectory() as d:
        store = OpponentStore(d, max_count=None)
        cur = make(store)
        rng = np.random.default_rng(SEED)
        skill, skills, drawn = 0.0, {}, []
        for step in range(60):
            skill += 0.1
            oid = cur.update_agent({"skill": skill})
            if oid is not None:
                skills[oid] = skill
            for _ in range(40):
                (opponent,) = cur.sample(1)
                opp_skill = skills.get(opponent, skill)  # -1: the current agent
                learner_wins = rng.random() < 1.0 / (1.0 + np.exp(-4.0 * (skill - opp_skill)))
                cur.update_winrate(opponent, -1.0 if learner_wins else 1.0)
                drawn.append((step, skill - opp_skill))
    steps, gaps = np.array(drawn).T
    late = steps >= 40  # the last 20 policy updates: 25 stored snapshots or more
    fig, a = plt.subplots(figsize=(6, 3.2))
    a.hist(gaps[late], bins=np.arange(-0.05, 6.05, 0.1), color=COLORS["curriculum"], density=True)
    a.set(xlabel="learner skill − opponent skill (0: as strong as the learner)", ylabel="density of matches",
          xlim=(-0.2, 6.2))
    a.set_title(f"{name}: opponents drawn over the last 20 policy updates", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{file}.png", dpi=90)
    plt.close(fig)


TOY_EPISODES, TOY_WINDOWS = 20_000, ((1_000, 2_000), (9_000, 10_000), (19_000, 20_000))


def toy_figure(file: str, title: str, make: Callable[[], object], out: Path,
               overlay: Callable[[object, object], None]) -> None:
    """A teacher on the teacher-only toy env ([0, 1]^2, 10 x 10 cells; examples/teacher_toy.py), 20,000
    episodes. Left: the share of cells mastered, against uniform sampling. Then the tasks sampled in three
    windows of 1,000 episodes, over the cells mastered by the window's end (grey) and ``overlay(curriculum,
    axes)`` drawn at that moment (e.g. the teacher's boxes or bounds)."""
    teachers = {"teacher": make(), "uniform": DomainRandomization(Box(0.0, 1.0, shape=(2,)), seed=SEED)}
    curves: dict[str, list[float]] = {name: [] for name in teachers}
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
    for name, cur in teachers.items():
        env, window = ToyEnv(2), []
        for episode in range(1, TOY_EPISODES + 1):
            (task,) = cur.sample(1)
            reward = env.play(task)
            cur.update_on_episode(reward, 1, task, reward)
            if episode % 500 == 0:
                curves[name].append(env.mastered())
            if name == "uniform":
                continue
            for panel, (start, end) in enumerate(TOY_WINDOWS, start=1):
                if start < episode <= end:
                    window.append(task)
                if episode == end:
                    _toy_panel(axes[panel], env, np.array(window), f"episodes {start:,}-{end:,}")
                    overlay(cur, axes[panel])
                    window = []
    xs = np.arange(1, len(curves["teacher"]) + 1) * 500
    axes[0].plot(xs, curves["teacher"], color=COLORS["curriculum"], label=title)
    axes[0].plot(xs, curves["uniform"], color=COLORS["baseline"], label="DomainRandomization")
    axes[0].set(xlabel="episodes", ylabel="share of cells mastered", ylim=(0, 1))
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{title} on the teacher-only toy env (10 x 10 cells, seed {SEED})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{file}.png", dpi=90)
    plt.close(fig)


def _toy_panel(ax, env: ToyEnv, tasks: np.ndarray, label: str) -> None:
    mastered = (env.competence > env.threshold).T  # rows: the second dimension
    ax.imshow(mastered, origin="lower", extent=(0, 1, 0, 1), cmap="Greys", vmin=0, vmax=2.5)
    ax.scatter(tasks[:, 0], tasks[:, 1], s=2, color=COLORS["curriculum"], alpha=0.6)
    ax.set(xlim=(0, 1), ylim=(0, 1), xticks=[0, 0.5, 1], yticks=[0, 0.5, 1], aspect="equal")
    ax.set_title(label, fontsize=9)


def _riac_boxes(cur, ax) -> None:
    for low, high, _ in cur.boxes():
        ax.add_patch(plt.Rectangle(low, *(high - low), fill=False, lw=0.6, color="black"))


def _adr_bounds(cur, ax) -> None:
    lower, upper = (np.array(b) for b in cur.bounds())
    ax.add_patch(plt.Rectangle(lower, *np.maximum(upper - lower, 0.005), fill=False, lw=1.2, color="#c62828"))


def _adr_toy() -> ADR:
    # on the toy env: progress = the played cell's competence / 100; start on the origin cell, widen a bound
    # once its cells average half the cap, narrow it when they stay at (almost) nothing
    return ADR(Box(0.0, 1.0, shape=(2,)), initial=[0.0, 0.0], queue_length=20, step=0.05,
               low_threshold=0.05, high_threshold=0.5, signal="progress", seed=SEED)
def toy_run(curriculum, episodes: int, every: int, success: str = "competence") -> dict:
    """Teach the ALP-GMM paper's toy env (examples/teacher_toy.py, [0, 1]^2 in 10x10 cells); record the
    mastered share every ``every`` episodes and the tasks sampled. ``success="bernoulli"``: the episode's
    progress is 1 with probability competence/100, else 0 (a binary signal for GoalGAN)."""
    env, rng = ToyEnv(dims=2), np.random.default_rng(SEED)
    xs, mastered, tasks = [], [], []
    for n in range(1, episodes + 1):
        (task,) = curriculum.sample(1)
        reward = env.play(task)
        progress = float(rng.random() < reward) if success == "bernoulli" else reward
        curriculum.update_on_episode(reward, 1, task, progress)
        tasks.append(task)
        if n % every == 0:
            xs.append(n)
            mastered.append(env.mastered())
    return {"x": xs, "mastered": mastered, "tasks": np.array(tasks), "competence": env.competence.copy()}


def toy_run_figure(name: str, title: str, run: dict, base: dict, out: Path, extra=None, others=()) -> None:
    """Left: mastered share against DomainRandomization (and ``others``: (label, run) pairs). Right: the
    tasks sampled in three periods over the final competence map."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    a.plot(run["x"], run["mastered"], color=COLORS["curriculum"], label=title)
    for label, other in others:
        a.plot(other["x"], other["mastered"], color=COLORS["curriculum"], ls="--", label=label)
    a.plot(base["x"], base["mastered"], color=COLORS["baseline"], label="DomainRandomization")
    a.set(xlabel="episodes", ylabel="share of cells mastered (competence > 75)")
    a.legend(loc="upper left", fontsize=8)
    b.imshow(run["competence"].T, origin="lower", extent=(0, 1, 0, 1), cmap="Greys", vmin=0, vmax=200)
    n = len(run["tasks"])
    for (lo, hi), color in zip(((0, n // 10), (n // 2 - n // 20, n // 2 + n // 20), (n - n // 10, n)),
                               ("#90caf9", "#1e88e5", "#0d47a1")):
        pts = run["tasks"][lo:hi:max(1, (hi - lo) // 400)]
        b.scatter(pts[:, 0], pts[:, 1], s=4, color=color, label=f"episodes {lo}-{hi}")
    if extra is not None:
        extra(b)
    b.set(xlabel="parameter 0", ylabel="parameter 1", xlim=(0, 1), ylim=(0, 1))
    b.legend(loc="upper right", fontsize=7)
    fig.suptitle(f"{title} on the toy env (grey: final competence per cell)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=90)
    plt.close(fig)


def self_paced_figure(out: Path) -> None:
    episodes, space = 20_000, Box(0.0, 1.0, shape=(2,))
    cur = SelfPaced(space, target_mean=[0.95, 0.95], target_std=0.05, init_mean=[0.05, 0.05], init_std=0.1,
                    mode="returns", update_every=100, seed=SEED)
    means = []
    orig = cur._accept

    def record(mean, cov):  # the mean after each update, for the plot
        orig(mean, cov)
        means.append(cur.mean.copy())

    cur._accept = record
    run = toy_run(cur, episodes, 1000)
    base = toy_run(DomainRandomization(space, seed=SEED), episodes, 1000)
    path = np.array(means)

    def extra(ax):
        ax.plot(path[:, 0], path[:, 1], color="#e65100", lw=1, label="mean of p_ν per update")
        ax.scatter([0.95], [0.95], marker="*", s=40, color="#e65100", label="target mean")

    toy_run_figure("self-paced", "SelfPaced (returns mode)", run, base, out, extra)
    print(f"self-paced: mastered {run['mastered'][-1]:.3f} (DR {base['mastered'][-1]:.3f}); final mean "
          f"{cur.mean.round(3).tolist()}, std {np.sqrt(np.diag(cur.cov)).round(3).tolist()}, "
          f"KL to target {cur.kl_to_target():.2f}, alpha {cur.alpha:.3g}")


def goal_gan_figure(out: Path) -> None:
    import torch

    torch.set_num_threads(1)  # small networks: one thread is fastest
    episodes, space = 20_000, Box(0.0, 1.0, shape=(2,))
    cur = GoalGAN(space, state_noise_level=0.1, p_old=0.1, background=False, seed=SEED)  # TMA's benchmark
    run = toy_run(cur, episodes, 1000, success="bernoulli")
    default = GoalGAN(space, background=False, seed=SEED)
    run_default = toy_run(default, episodes, 1000, success="bernoulli")
    base = toy_run(DomainRandomization(space, seed=SEED), episodes, 1000, success="bernoulli")
    toy_run_figure("goal-gan", "GoalGAN (noise 0.1, p_old 0.1)", run, base, out,
               others=[("GoalGAN (defaults: noise 0.01, p_old 0.2)", run_default)])
    for label, c, r in (("noise 0.1, p_old 0.1", cur, run), ("defaults", default, run_default)):
        m = c.metrics()
        print(f"goal-gan ({label}): mastered {r['mastered'][-1]:.3f} (DR {base['mastered'][-1]:.3f}); "
              f"trainings {m['goalgan/trainings']:.0f}, skipped {m['goalgan/skipped_trainings']:.0f}")


def _space() -> Discrete:
    return Discrete(N_TASKS, seed=SEED)


def _unit_square() -> Box:
    return Box(0.0, 1.0, shape=(2,))


def _omni() -> OMNI:
    space = _space()
    return OMNI(space, base=SFL(space, seed=SEED), judge=NearCopyJudge(), seed=SEED)


def _manual():
    easy = np.zeros(N_TASKS)
    easy[:50] = 1 / 50
    return Manual(Discrete(N_TASKS), [(0, easy.tolist()), (2000, [1 / N_TASKS] * N_TASKS)], seed=SEED)


FIGURES: dict[str, Callable[[Path], None]] = {
    "constant": lambda out: student_figure("constant", "Constant(task 0)",
                                           lambda: Constant(_space(), 0), out),
    "domain-randomization": lambda out: student_figure(
        "domain-randomization", "DomainRandomization", lambda: DomainRandomization(_space(), seed=1), out),
    "sequential": lambda out: student_figure(
        "sequential", "Sequential(first 50 tasks, then all)",
        lambda: Sequential([list(range(50)), _space()], ["episodes>=2000"], seed=SEED), out),
    "manual": lambda out: student_figure("manual", "Manual(first 50 tasks, all from 2000)", _manual, out),
    "plr": lambda out: student_figure("plr", "PLR (value L1)", lambda: PLR(_space(), seed=SEED), out,
                                      value_score="value_l1"),
    "robust-plr": lambda out: student_figure("robust-plr", "RobustPLR (MaxMC)",
                                             lambda: RobustPLR(_space(), seed=SEED), out,
                                             value_score="max_mc"),
    "accel": lambda out: student_figure(
        "accel", "ACCEL (MaxMC, 1-2 edits)",
        lambda: ACCEL(MutableDiscrete(N_TASKS, seed=SEED), min_edits=1, max_edits=2, seed=SEED), out,
        value_score="max_mc"),
    "learning-progress": lambda out: student_figure(
        "learning-progress", "LearningProgress (online)", lambda: LearningProgress(_space(), seed=SEED), out),
    "sfl": lambda out: student_figure("sfl", "SFL (top-K)", lambda: SFL(_space(), seed=SEED), out),
    "omni": lambda out: student_figure(
        "omni", "OMNI (SFL base, neighbour judge)",
        lambda: _omni(), out),
    "task-filter": lambda out: student_figure(
        "task-filter", "TaskFilter", lambda: TaskFilter(_space(), num_episodes=4, seed=SEED), out),
    "expanding-box": expanding_box_figure,
    "riac": lambda out: toy_figure("riac", "RIAC", lambda: RIAC(Box(0.0, 1.0, shape=(2,)), seed=SEED), out,
                                   _riac_boxes),
    "adr": lambda out: toy_figure("adr", "ADR", _adr_toy, out, _adr_bounds),
    "self-play": lambda out: coplayer_figure("SelfPlay", "self-play", lambda st: SelfPlay(st, seed=SEED),
                                             out),
    "fsp": lambda out: coplayer_figure("FSP", "fsp", lambda st: FSP(st, checkpoint_interval=5, seed=SEED),
                                       out),
    "pfsp": lambda out: coplayer_figure("PFSP", "pfsp", lambda st: PFSP(st, checkpoint_interval=5, seed=SEED),
                                        out),
    "alp-gmm": lambda out: toy_teacher_figure(
        "alp-gmm", "ALPGMM", lambda: ALPGMM(_unit_square(), background=False, seed=SEED), out),
    "covar-gmm": lambda out: toy_teacher_figure(
        "covar-gmm", "CovarGMM", lambda: CovarGMM(_unit_square(), background=False, seed=SEED), out),
    "self-paced": self_paced_figure,
    "goal-gan": goal_gan_figure,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNGs")
    parser.add_argument("--only", nargs="*", choices=sorted(FIGURES), help="draw only these figures")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIGURES:
        FIGURES[name](args.out)
        print(f"wrote {args.out / name}.png")


if __name__ == "__main__":
    main()
