"""A simulated student for behaviour tests of curricula (no RL, no environment, fast and deterministic).

The world: ``num_tasks`` tasks, a fraction ``possible_fraction`` of them possible (chosen at random with
the student's seed), the rest impossible (success probability 0 forever). A possible task ``i`` starts
with a small success probability ``p_i ~ U(init_low, init_high)``. An episode on task ``i`` succeeds with
probability ``p_i`` (``return = progress = success``, length 1). Each time the student *trains* on an
episode of task ``i`` (the curriculum sent it with ``train=True``), ``p_i <- p_i + lr * (1 - p_i)``.
Evaluation-only episodes (``train=False``) give feedback to the curriculum but teach nothing.

The student also keeps a value estimate ``V_i`` per task (an exponential moving average of its observed
returns, updated only on training episodes, rate ``value_lr``). For value-based curricula (PLR with
``value_l1`` / ``positive_value_loss`` / ``max_mc``) the harness scores each one-step episode exactly as the
learner-side helpers would: with one step, ``delta = r - V`` and the GAE score is ``|delta|`` (value L1),
``max(delta, 0)`` (positive value loss) or ``R_max - V`` (MaxMC, with ``R_max`` the best return seen on the
task), and calls ``curriculum.update_scores(tasks, scores)`` in one batch.

Defaults (``lr=0.02``, ``p_i ~ U(0.1, 0.5)``): with ``StudentSpace(200)`` and ``budget=4000``, uniform
sampling (DomainRandomization) reaches a mean success of about 0.52-0.56 on the possible tasks with ~10% of
its samples on them (seeds 0-5), while PLR with its defaults (value L1, or learnability) reaches about
0.63-0.85 with >= 84% of its samples on possible tasks - a comfortable margin for fixed-seed tests.

Typical use in a test::

    from simulated_student import StudentSpace, run_student, uniform_curriculum

    space = StudentSpace(200)
    result = run_student(MyCurriculum(space, seed=0), space, budget=4000, seed=0)
    baseline = run_student(uniform_curriculum(space, seed=0), space, budget=4000, seed=0)
    assert result["frac_possible"] >= 0.8
    assert result["success_possible"] > baseline["success_possible"]

The same ``seed`` gives the same world (which tasks are possible, the initial ``p_i``) for every
curriculum, so results of different curricula are directly comparable.

Returned metrics (:func:`run_student`):

``success_possible``
    mean true success probability ``p_i`` over the possible tasks at the end (the quantity to compare);
``frac_possible``
    fraction of all sampled episodes that were on possible tasks;
``frac_possible_train``
    the same among training (``train=True``) episodes only (``nan`` if there were none);
``frac_train``
    fraction of episodes that were training episodes;
``episodes`` / ``trained``
    number of episodes run / trained on;
``observed_success``
    mean observed success over all episodes;
``num_mastered``
    number of possible tasks with ``p_i >= 0.9`` at the end;
``p``, ``possible``, ``counts``
    the final ``p`` array, the possible-task mask and the number of episodes per task (numpy arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from magister.curricula.base import Curriculum
from magister.task_spaces.base import EncodedTask, TaskSpace, check_k

__all__ = [
    "SimulatedStudent",
    "StudentSpace",
    "run_student",
    "uniform_curriculum",
]


class StudentSpace(TaskSpace):
    """``n`` tasks encoded (and decoded) as the ints ``0 .. n-1``; an indexed space for the harness.

    Use ``magister.task_spaces.discrete.Discrete(n)`` instead where it exists; this stand-in keeps the
    harness independent of other modules.
    """

    def __init__(self, n: int, seed: int | None = None) -> None:
        super().__init__(seed)
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        self.n = int(n)

    @property
    def num_tasks(self) -> int:
        return self.n

    @property
    def indexed(self) -> bool:
        return True

    def sample(self) -> int:
        return int(self._rng.integers(self.n))

    def contains(self, task: Any) -> bool:
        return isinstance(task, (int, np.integer)) and not isinstance(task, bool) and 0 <= task < self.n

    def encode(self, task: int) -> int:
        if not self.contains(task):
            raise ValueError(f"task {task!r} is not in {self!r}")
        return int(task)

    def decode(self, encoded: EncodedTask) -> int:
        if not self.contains(encoded):
            raise ValueError(f"task {encoded!r} is not an encoded task of {self!r}")
        return int(encoded)

    def sample_encoded(self, k: int = 1, rng: np.random.Generator | None = None) -> list[EncodedTask]:
        check_k(k)
        g = self._rng if rng is None else rng
        return g.integers(self.n, size=k).tolist()

    @property
    def tasks(self) -> list[int]:
        return list(range(self.n))


class SimulatedStudent:
    """The learner of the harness: per-task success probabilities that grow with training.

    Args:
        num_tasks: number of tasks.
        possible_fraction: fraction of tasks that can be learned at all.
        lr: per-training-episode improvement rate, ``p <- p + lr * (1 - p)``.
        init_low, init_high: initial success probability of a possible task, ``U(init_low, init_high)``.
        value_lr: rate of the per-task value estimate (EMA of observed returns on training episodes).
        seed: chooses the possible tasks and their initial ``p``.
    """

    def __init__(
        self,
        num_tasks: int,
        *,
        possible_fraction: float = 0.1,
        lr: float = 0.02,
        init_low: float = 0.1,
        init_high: float = 0.5,
        value_lr: float = 0.2,
        seed: int = 0,
    ) -> None:
        if not 0.0 < possible_fraction <= 1.0:
            raise ValueError(f"possible_fraction must be in (0, 1], got {possible_fraction}")
        if not 0.0 < lr <= 1.0:
            raise ValueError(f"lr must be in (0, 1], got {lr}")
        if not 0.0 <= init_low <= init_high <= 1.0:
            raise ValueError(f"need 0 <= init_low <= init_high <= 1, got {init_low}, {init_high}")
        rng = np.random.default_rng(seed)
        self.num_tasks = int(num_tasks)
        n_possible = max(1, round(possible_fraction * self.num_tasks))
        self.possible = np.zeros(self.num_tasks, dtype=bool)
        self.possible[rng.choice(self.num_tasks, size=n_possible, replace=False)] = True
        self.p = np.where(self.possible, rng.uniform(init_low, init_high, size=self.num_tasks), 0.0)
        self.value = np.zeros(self.num_tasks)
        self.max_return = np.full(self.num_tasks, -np.inf)
        self.lr = float(lr)
        self.value_lr = float(value_lr)

    def play(self, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One episode on each task in ``idx``; returns successes as 0/1 floats."""
        return (rng.random(idx.shape[0]) < self.p[idx]).astype(np.float64)

    def train(self, idx: np.ndarray, returns: np.ndarray) -> None:
        """Learn from training episodes (repeated tasks in ``idx`` each count)."""
        for i, r in zip(idx.tolist(), returns.tolist()):  # few per batch; order matters for repeats
            if self.possible[i]:
                self.p[i] += self.lr * (1.0 - self.p[i])
            self.value[i] += self.value_lr * (r - self.value[i])

    def scores(self, idx: np.ndarray, returns: np.ndarray, kind: str) -> np.ndarray:
        """Per-episode value-based scores of one-step episodes (see the module docstring)."""
        delta = returns - self.value[idx]
        if kind == "value_l1":
            return np.abs(delta)
        if kind == "positive_value_loss":
            return np.maximum(delta, 0.0)
        if kind == "max_mc":
            np.maximum.at(self.max_return, idx, returns)
            return self.max_return[idx] - self.value[idx]
        raise ValueError(f"unknown value score {kind!r}; expected value_l1, positive_value_loss or max_mc")


def run_student(
    curriculum: Curriculum,
    task_space: TaskSpace,
    budget: int,
    seed: int = 0,
    *,
    num_envs: int = 16,
    value_score: str | None = None,
    task_to_index: Callable[[EncodedTask], int] | None = None,
    student: SimulatedStudent | None = None,
    **student_kwargs: Any,
) -> dict[str, Any]:
    """Run ``budget`` episodes of a simulated student under ``curriculum``; return metrics.

    Args:
        curriculum: any magister curriculum; the harness calls ``sample_tasks(num_envs)``, then
            ``update_on_episode`` for each episode (and ``update_scores`` when ``value_score`` is set).
        task_space: the curriculum's task space; its ``num_tasks`` sets the number of student tasks.
        budget: total number of episodes (the last batch may be smaller).
        seed: seeds the world (possible tasks, initial ``p``) and the episode outcomes.
        num_envs: episodes per batch (tasks sampled together, feedback sent together).
        value_score: ``None``, or ``"value_l1"`` / ``"positive_value_loss"`` / ``"max_mc"`` to also send
            per-episode value-based scores through ``curriculum.update_scores(tasks, scores)``.
        task_to_index: maps an encoded task to the student's task index; default ``int(task)``.
        student: a prebuilt :class:`SimulatedStudent` (then ``student_kwargs`` must be empty).
        **student_kwargs: passed to :class:`SimulatedStudent` (``possible_fraction``, ``lr``, ...).

    Returns:
        The metrics dict described in the module docstring.
    """
    if task_space.num_tasks is None:
        raise ValueError("run_student needs a finite task space (num_tasks is None)")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    if student is None:
        student = SimulatedStudent(int(task_space.num_tasks), seed=seed, **student_kwargs)
    elif student_kwargs:
        raise TypeError(f"pass either student or student kwargs, not both: {sorted(student_kwargs)}")
    to_index = task_to_index if task_to_index is not None else int
    rng = np.random.default_rng(seed + 1_000_003)
    counts = np.zeros(student.num_tasks, dtype=np.int64)
    n_train = n_possible = n_possible_train = 0
    successes = 0.0
    done = 0
    while done < budget:
        k = min(num_envs, budget - done)
        samples = curriculum.sample_tasks(k)
        idx = np.fromiter((to_index(s.task) for s in samples), dtype=np.int64, count=k)
        train = np.fromiter((bool(s.train) for s in samples), dtype=bool, count=k)
        returns = student.play(idx, rng)
        if value_score is not None:
            scores = student.scores(idx, returns, value_score)
            curriculum.update_scores([s.task for s in samples], scores)
        for s, r in zip(samples, returns.tolist()):
            curriculum.update_on_episode(r, 1, s.task, r)
        student.train(idx[train], returns[train])
        np.add.at(counts, idx, 1)
        pos = student.possible[idx]
        n_possible += int(pos.sum())
        n_possible_train += int((pos & train).sum())
        n_train += int(train.sum())
        successes += float(returns.sum())
        done += k
    return {
        "success_possible": float(student.p[student.possible].mean()),
        "frac_possible": n_possible / done,
        "frac_possible_train": n_possible_train / n_train if n_train else float("nan"),
        "frac_train": n_train / done,
        "episodes": done,
        "trained": n_train,
        "observed_success": successes / done,
        "num_mastered": int((student.p[student.possible] >= 0.9).sum()),
        "p": student.p.copy(),
        "possible": student.possible.copy(),
        "counts": counts,
    }


class _Uniform(Curriculum):
    def sample(self, k: int = 1) -> list[EncodedTask]:
        self._check_k(k)
        self.num_sampled += k
        return self.task_space.sample_encoded(k, rng=self.rng)


def uniform_curriculum(task_space: TaskSpace, seed: int | None = 0) -> Curriculum:
    """The DomainRandomization baseline (the library's own when it exists, else a uniform stand-in)."""
    try:
        from magister.curricula.domain_randomization import DomainRandomization
    except ImportError:
        return _Uniform(task_space, seed=seed)
    return DomainRandomization(task_space, seed=seed)
