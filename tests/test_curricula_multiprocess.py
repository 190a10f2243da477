"""Every automatic curriculum driven through the sync layer by a real multi-process training loop.

The curriculum lives in the test process behind :func:`magister.sync.zmq_server.serve`; a Gymnasium
``AsyncVectorEnv`` runs 3 worker processes whose envs are ``GymnasiumSyncWrapper(TaskWrapper(env),
server.address)``, exactly the user-facing shape. The env is a one-step bandit whose success depends on
the task (:func:`kind`): *impossible* tasks never succeed, *learnable* ones succeed half the time, *solved*
ones always (when the agent pulls arm 1; arm 0 never pays, which is the control policy of the task
filter). The loop plays a few hundred episodes and then checks, for each algorithm,

* the sync accounting: every sampled task was consumed or returned, nothing is in flight, every update
  the server received was applied, nothing was rejected;
* that the curriculum received every episode the trainer saw finish;
* that the curriculum's state moved the way its algorithm says (where samples concentrate, the train
  flags of evaluation-only episodes, accepted tasks, provenance of mutated tasks).

The whole file runs in a few seconds (fork start method, one-step episodes).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from magister.curricula.accel import ACCEL
from magister.curricula.base import Curriculum
from magister.curricula.interestingness import EmbeddingJudge
from magister.curricula.learning_progress import LearningProgress
from magister.curricula.omni import OMNI
from magister.curricula.plr import PLR, RobustPLR
from magister.curricula.sfl import SFL
from magister.curricula.task_filter import TaskFilter
from magister.env_wrappers.sync_wrappers import GymnasiumSyncWrapper
from magister.env_wrappers.task_wrapper import TaskWrapper
from magister.integrations.scores import feed_scores
from magister.sync.zmq_server import serve
from magister.task_spaces.base import EncodedTask, TaskSpace
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(120)

NUM_TASKS = 40
NUM_ENVS = 3
IMPOSSIBLE, LEARNABLE, SOLVED = 0, 1, 2
SUCCESS_PROB = {IMPOSSIBLE: 0.0, LEARNABLE: 0.5, SOLVED: 1.0}


def kind(task: int) -> int:
    """Tasks ``t % 4 in {0, 1}`` are impossible (50%), ``2`` learnable (25%), ``3`` solved (25%)."""
    return {0: IMPOSSIBLE, 1: IMPOSSIBLE, 2: LEARNABLE, 3: SOLVED}[task % 4]


_THINGS = ["table", "pickaxe", "sword", "furnace", "bridge", "boat", "house", "fence", "ladder", "door"]


def describe(task: int) -> str:
    """Task descriptions for OMNI's judge: the solved tasks are near-copies of each other."""
    k = kind(task)
    if k == IMPOSSIBLE:
        return f"fly to star {task}"
    if k == LEARNABLE:
        return f"build a {_THINGS[task // 4]}"
    return f"collect oak wood logs from forest pile {task // 4}"


def described_space() -> Discrete:
    return Discrete(NUM_TASKS, names=[describe(t) for t in range(NUM_TASKS)])



def bits_kind(task: int) -> int:
    """Kind of a 6-bit task of :class:`Bits`: learnable iff at least 4 bits are set, else impossible."""
    return LEARNABLE if bin(task).count("1") >= 4 else IMPOSSIBLE


class Bandit(gym.Env):
    """One-step episodes: arm 1 pays 1 with the task's success probability, arm 0 never pays."""

    observation_space = spaces.Box(-1.0, 1e6, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self, kind_fn=kind) -> None:
        self.kind_fn = kind_fn
        self.task = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.task], np.float64), {}

    def step(self, action):
        p = SUCCESS_PROB[self.kind_fn(self.task)] if int(action) == 1 else 0.0
        success = float(self.np_random.random() < p)
        return np.array([self.task], np.float64), success, True, False, {"success": success}


class BanditTask(TaskWrapper):
    """Task switching on reset; the task's progress is ``info["success"]`` (the default)."""

    def change_task(self, task):
        self.env.unwrapped.task = int(task)


class Bits(TaskSpace):
    """The 64 six-bit integers; ``mutate`` flips one random bit (for ACCEL)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)

    @property
    def num_tasks(self) -> int:
        return 64

    @property
    def indexed(self) -> bool:
        return True

    def sample(self) -> int:
        return int(self.rng.integers(64))

    def contains(self, task) -> bool:
        return isinstance(task, (int, np.integer)) and not isinstance(task, bool) and 0 <= task < 64

    def encode(self, task) -> int:
        if not self.contains(task):
            raise ValueError(f"task {task!r} is not in {self!r}")
        return int(task)

    def decode(self, encoded: EncodedTask) -> int:
        return self.encode(encoded)

    @property
    def tasks(self) -> list[int]:
        return list(range(64))

    @property
    def can_mutate(self) -> bool:
        return True

    def mutate(self, encoded: EncodedTask, rng: np.random.Generator) -> int:
        return int(encoded) ^ (1 << int(rng.integers(6)))


def make_env(address: str, space: str) -> gym.Env:
    if space == "bits":
        inner, task_space = Bandit(bits_kind), Bits()
    else:
        inner = Bandit()
        # control: integer-encoded tasks, some of them control episodes of the task filter (a field of the
        # assignment): info["task"] is the plain task and info["task_control"] the flag, so vector envs
        # batch info["task"] as ints
        task_space = Discrete(NUM_TASKS) if space == "control" else described_space()
    return GymnasiumSyncWrapper(BanditTask(inner, task_space), address, timeout=20.0)


@dataclass
class Episode:
    task: EncodedTask
    train: bool
    ret: float
    control: bool


@dataclass
class Run:
    episodes: list[Episode] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def kinds(self, last: float = 1.0) -> np.ndarray:
        """Fraction of the last ``last`` share of episodes on impossible / learnable / solved tasks."""
        eps = self.episodes[int(len(self.episodes) * (1.0 - last)):]
        counts = np.bincount([kind(int(e.task)) for e in eps], minlength=3)
        return counts / counts.sum()


def run_loop(
    curriculum: Curriculum,
    episodes: int,
    *,
    space: str = "discrete",
    scorer=None,
) -> Run:
    """Train-loop stand-in: step ``NUM_ENVS`` worker envs until ``episodes`` episodes finished.

    The agent pulls arm 1, except on control episodes of the task filter (arm 0, the control policy).
    ``scorer(server, records)`` is called after each vector step with the step's finished episodes,
    as a learner computing scores from its rollout would.
    """
    run = Run()
    with serve(curriculum) as server:
        envs = gym.vector.AsyncVectorEnv(
            [functools.partial(make_env, server.address, space) for _ in range(NUM_ENVS)], context="fork"
        )
        ok = False
        try:
            _, info = envs.reset(seed=0)
            control = np.asarray(info["task_control"], dtype=bool)
            prev_done = np.zeros(NUM_ENVS, bool)
            while len(run.episodes) < episodes:
                actions = np.where(control, 0, 1)  # the control policy pulls arm 0
                _, rew, term, trunc, info = envs.step(actions)
                finished = []
                for i in range(NUM_ENVS):
                    task = info["task"][i]
                    if prev_done[i]:  # NEXT_STEP autoreset: this step only reset the env onto a new task
                        control[i] = bool(info["task_control"][i])
                        continue
                    assert bool(info["task_control"][i]) == control[i]
                    ep = Episode(task, bool(info["task_train"][i]), float(rew[i]), bool(control[i]))
                    run.episodes.append(ep)
                    finished.append(ep)
                prev_done = term | trunc
                if scorer is not None and finished:
                    scorer(server, finished)
            ok = True
        finally:
            envs.close(terminate=not ok)  # after a failure, do not wait on the workers
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:  # updates are sent without waiting: let the server apply them
            m = server.metrics()
            if (m["sync/total/updates_received"] == m["sync/total/updates_applied"]
                    and curriculum.num_episodes >= len(run.episodes)):
                break
            time.sleep(0.01)
        run.metrics = server.metrics()
    _check_accounting(curriculum, run)
    return run


def _check_accounting(curriculum: Curriculum, run: Run) -> None:
    m = run.metrics
    assert m["sync/envs"] == NUM_ENVS
    assert m["sync/total/tasks_consumed"] + m["sync/total/tasks_returned"] == m["sync/total/tasks_sampled"]
    assert m["sync/total/tasks_in_flight"] == 0 and m["sync/total/tasks_unsent"] == 0
    assert m["sync/total/updates_rejected"] == 0 and m["sync/total/malformed_frames"] == 0
    assert m["sync/total/updates_received"] == m["sync/total/updates_applied"]
    assert all(m[f"sync/env{e}/connected"] == 0 for e in range(NUM_ENVS))
    # the curriculum received every episode the trainer saw finish, and no other
    assert curriculum.num_episodes == len(run.episodes)
    assert m["curriculum/episodes"] == len(run.episodes)


class ValueCritic:
    """A learner-side stand-in for a critic: per-task EMA of returns, scoring through ``feed_scores``."""

    def __init__(self, rate: float = 0.3) -> None:
        self.value = np.zeros(64)  # indexed by task: the 40 discrete tasks or the 64 bit tasks
        self.rate = rate

    def __call__(self, server, episodes: list[Episode]) -> None:
        tasks = np.array([[int(e.task) for e in episodes]])
        rewards = np.array([[e.ret for e in episodes]])
        values = self.value[tasks]
        dones = np.ones_like(rewards, dtype=bool)  # one-step episodes: every step ends one
        feed_scores(server, rewards, values, dones, np.zeros(len(episodes)), tasks,
                    done_convention="ended_at")
        for e in episodes:  # the critic learns (after scoring, as after a PPO update)
            self.value[int(e.task)] += self.rate * (e.ret - self.value[int(e.task)])


# -- PLR family ------------------------------------------------------------------------------------------
def test_plr_with_learner_side_value_scores():
    # value L1 = |r - V| with a per-task critic: zero on deterministic tasks (impossible, solved) once the
    # critic has learned them, about 0.5 on the stochastic (learnable) ones, which PLR then replays
    cur = PLR(Discrete(NUM_TASKS), score="value_l1", seed=0)
    run = run_loop(cur, 600, scorer=ValueCritic())
    assert set(cur.buffer_tasks()) == set(range(NUM_TASKS))  # every task was scored through feed_scores
    scores = dict(zip(cur.buffer_tasks(), cur.buffer_scores().tolist()))
    learnable = [s for t, s in scores.items() if kind(t) == LEARNABLE]
    other = [s for t, s in scores.items() if kind(t) != LEARNABLE]
    # a critic learns constant outcomes exactly (score 0), never a coin flip's
    assert np.median(other) == 0.0 and np.mean(learnable) > 1.5 * np.mean(other)
    assert run.kinds(last=0.5)[LEARNABLE] >= 0.6  # uniform sampling: 0.25
    assert all(e.train for e in run.episodes)  # plain PLR trains on everything


def test_robust_plr_new_tasks_are_evaluation_only():
    cur = RobustPLR(Discrete(NUM_TASKS), seed=0)  # MaxMC score, from the learner's rollouts
    run = run_loop(cur, 450, scorer=ValueCritic())
    seen: set[int] = set()
    for e in run.episodes:
        if int(e.task) not in seen:  # the first episode of a task is a new task: evaluation-only
            assert not e.train
        seen.add(int(e.task))
    trained = [e for e in run.episodes if e.train]
    assert len(trained) > 0.3 * len(run.episodes) and len(trained) < len(run.episodes)
    assert cur.metrics()["curriculum/episodes"] == len(run.episodes)


def test_accel_children_are_evaluated_with_provenance():
    cur = ACCEL(Bits(seed=0), score="return", min_edits=1, max_edits=2, seed=0)
    run = run_loop(cur, 450, space="bits")
    children = {int(e.task) for e in run.episodes if cur.provenance(int(e.task))["generation"] >= 1}
    assert len(children) >= 5
    for t in children:
        prov = cur.provenance(t)
        assert prov["parent"] is not None and 1 <= prov["num_edits"] <= 2
        assert bin(t ^ prov["parent"]).count("1") <= prov["num_edits"]  # each edit flips one bit
    first: dict[int, bool] = {}
    for e in run.episodes:
        first.setdefault(int(e.task), e.train)
    assert not any(first[t] for t in children)  # a child's first episode is its evaluation
    assert cur.metrics()["accel/buffer_mutated_fraction"] > 0


# -- success-rate curricula (online: success from the training episodes) ---------------------------------
def _success_rate_run(cur: Curriculum, episodes: int = 600) -> tuple[Run, np.ndarray, set[int]]:
    run = run_loop(cur, episodes)
    late = run.kinds(last=0.5)
    assert late[IMPOSSIBLE] <= 0.2  # uniform sampling: 0.5
    base = cur.base if isinstance(cur, OMNI) else cur
    rates = base.success_rates()
    played = {int(e.task) for e in run.episodes}
    assert all(rates[t] == 0.0 for t in played if kind(t) == IMPOSSIBLE)
    assert np.mean([rates[t] for t in played if kind(t) == SOLVED]) > 0.9
    return run, late, played


@pytest.mark.parametrize("method", ["topk", "dist"])
def test_sfl_concentrates_on_learnable_tasks(method):
    cur = SFL(described_space(), method=method, seed=0)
    run, late, played = _success_rate_run(cur, 900)
    if method == "topk":
        # A top-K buffer of 10 refreshed every few updates moves in jumps: one run's late share of learnable
        # tasks spreads widely (0.27-0.71 over seeds 0-9, lower when the machine is busy, where the workers'
        # timing differs), so the claim is made on the mean of ten seeds (0.43-0.49 in two runs side by side
        # on 2 cores, standard error ~0.04; three seeds once gave 0.31 inside the full suite), against
        # uniform sampling's 0.25. Each run takes a fraction of a second.
        others = [SFL(described_space(), method=method, seed=s) for s in range(1, 10)]
        shares = [late[LEARNABLE]] + [_success_rate_run(c, 900)[1][LEARNABLE] for c in others]
        assert np.mean(shares) >= 0.32, shares
    else:
        assert late[LEARNABLE] >= 0.4  # uniform: 0.25; solved tasks seen a few times still look uncertain
    ell, count = cur.learnability(), cur.count
    well_known = [t for t in played if count[t] >= 15]
    assert min(ell[t] for t in well_known if kind(t) == LEARNABLE) > max(
        ell[t] for t in well_known if kind(t) != LEARNABLE)


def test_learning_progress_drops_impossible_tasks():
    cur = LearningProgress(described_space(), seed=0)
    run, late, played = _success_rate_run(cur)
    # constant success (0 or 1) makes no progress; a learnable task's noisy estimate does
    lp = cur.learning_progress()
    assert all(lp[t] == 0.0 for t in played if kind(t) != LEARNABLE)
    assert any(lp[t] > 0.0 for t in played if kind(t) == LEARNABLE)
    # solved tasks stay active (success > 0, as in the paper), so LP spreads over learnable and solved
    assert late[LEARNABLE] > 0.1 and late[LEARNABLE] + late[SOLVED] >= 0.8


def test_omni_masks_mastered_near_copies():
    space = described_space()
    cur = OMNI(space, base=LearningProgress(space, seed=0), judge=EmbeddingJudge("tfidf"), seed=0)
    run, late, played = _success_rate_run(cur)
    # mastered "collect oak wood" tasks are near-copies of each other: judged uninteresting
    assert cur.num_judgements >= 5
    assert all(cur.interesting[t] for t in range(NUM_TASKS) if kind(t) == LEARNABLE)
    assert sum(not cur.interesting[t] for t in range(NUM_TASKS) if kind(t) == SOLVED) >= 5
    assert late[SOLVED] <= 0.1 and late[LEARNABLE] >= 0.7


# -- XLand task filter -------------------------------------------------------------------------------------
def test_task_filter_accepts_learnable_tasks_and_flags_evaluation():
    space = Discrete(NUM_TASKS)  # integer tasks: control episodes must not break vector-env info batching
    cur = TaskFilter(space, return_range=(0.0, 1.0), eval_fraction=0.5, seed=0)  # K = 10 (paper)
    issued = []  # (task, train, whether the accepted set held a task when it was sampled)
    sample_tasks = cur.sample_tasks  # (the server samples each env's tasks through sample_tasks_with)

    def recording(k: int = 1) -> list:
        held = bool(cur.train_tasks)
        out = sample_tasks(k)
        issued.extend((s.task, s.train, held) for s in out)
        return out

    cur.sample_tasks = recording
    # each candidate takes 2K evaluation episodes and a quarter of the proposals are learnable, so the first
    # acceptance may come late in a short run; this one is long enough for some replays after it
    run = run_loop(cur, 1800, space="control")
    assert all(isinstance(e.task, (int, np.integer)) for e in run.episodes)  # plain tasks in info["task"]
    counts = cur.counts
    # learnable tasks are the only kind meeting all criteria (the set may be empty again at the end: the
    # re-validation drops a task whose window happens to hold only successes or only failures)
    assert counts["accepted"] > 0 and all(kind(t) == LEARNABLE for t in cur.train_tasks)
    assert counts["rejected_solved"] > 0 and counts["rejected_control"] > 0
    control = [e for e in run.episodes if e.control]
    assert control and not any(e.train for e in control)  # control episodes are evaluation-only
    assert all(e.ret == 0.0 for e in control)  # played by the control policy (arm 0)
    agent_eval = [e for e in run.episodes if not e.control and not e.train]
    # every evaluation task issued was played, except those still prefetched or in progress at the end
    unplayed = run.metrics["sync/total/tasks_returned"] + NUM_ENVS
    assert counts["eval_agent_issued"] - unplayed <= len(agent_eval) <= counts["eval_agent_issued"]
    # while tasks are accepted, every training episode goes to one of them: a learnable task
    replayed = [int(t) for t, train, held in issued if train and held]
    assert replayed and all(kind(t) == LEARNABLE for t in replayed)
    # before any is accepted, training episodes are fresh proposals: all kinds
    fresh = [int(t) for t, train, held in issued if train and not held]
    assert {kind(t) for t in fresh} == {IMPOSSIBLE, LEARNABLE, SOLVED}
