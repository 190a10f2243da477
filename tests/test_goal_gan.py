"""GoalGAN: labels by the success band, the generator moving onto the intermediate region of a known success
function, the background training, checkpoints and bad input."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magister import checkpoint
from magister.curricula import GoalGAN, goal_gan
from magister.task_spaces import Box, Discrete

torch = pytest.importorskip("torch")

UNIT2 = Box(0.0, 1.0, shape=(2,))
SMALL = {"generator_layers": (32, 32), "discriminator_layers": (32, 32)}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small networks train fastest on one thread (and far faster than on two busy cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def play_goals(teacher: GoalGAN, successes_per_goal: list[int], rollouts: int) -> list[tuple]:
    """Play one goal at a time: goal i succeeds on its first successes_per_goal[i] rollouts."""
    goals = []
    for wins in successes_per_goal:
        tasks = teacher.sample(rollouts)
        assert len(set(tasks)) == 1  # one goal, n_rollouts times in a row
        goals.append(tasks[0])
        for r, task in enumerate(tasks):
            teacher.update_on_episode(0.0, 1, task, 1.0 if r < wins else 0.0)
    return goals


# -- labels ---------------------------------------------------------------------------------------------
def test_labels_follow_the_success_band_exactly():
    teacher = GoalGAN(UNIT2, n_rollouts=4, update_size=1000, p_old=0.0, background=False, seed=0)
    wins = [0, 1, 2, 3, 4, 4, 3, 0]
    goals = play_goals(teacher, wins, 4)
    points, labels = teacher.labelled_goals()
    assert labels.tolist() == [0.25 <= w / 4 <= 0.75 for w in wins] == [False, True, True, True, False, False,
                                                                         True, False]
    assert np.allclose(points, np.array(goals))
    assert np.allclose(teacher.mastered_goals(), np.array([goals[4], goals[5]]))  # mean success 1 > 0.75
    assert teacher.metrics()["goalgan/pending"] == 0


def test_band_edges_are_inclusive_and_the_threshold_is_the_signal():
    teacher = GoalGAN(UNIT2, n_rollouts=2, goid_lb=0.5, goid_ub=0.5, signal="return", success_threshold=10.0,
                      update_size=1000, p_old=0.0, background=False, seed=1)
    for ret_pair, label in (((10.0, 9.99), True), ((10.0, 10.0), False), ((0.0, 9.0), False)):
        a, b = teacher.sample(2)
        teacher.update_on_episode(ret_pair[0], 1, a, 0.0)
        teacher.update_on_episode(ret_pair[1], 1, b, 0.0)
        assert teacher.labelled_goals()[1][-1] == label
    assert len(teacher.mastered_goals()) == 1


def test_mastered_goals_are_replayed_once_and_not_labelled():
    teacher = GoalGAN(UNIT2, n_rollouts=2, p_old=1.0, state_noise_level=0.0, update_size=1000,
                      background=False, seed=2)
    (goal,) = play_goals(teacher, [2], 2)  # mastered
    replays = teacher.sample(5)
    assert replays == [goal] * 5  # no noise: the mastered goal itself, one episode each
    for task in replays:
        teacher.update_on_episode(0.0, 1, task, 0.0)
    assert teacher.metrics()["goalgan/unlabelled_episodes"] == 5
    assert len(teacher.labelled_goals()[1]) == 1


def test_no_intermediate_goal_skips_the_training():
    teacher = GoalGAN(UNIT2, n_rollouts=1, update_size=4, p_old=0.0, background=False, seed=3)
    play_goals(teacher, [0, 1, 0, 1], 1)
    assert (teacher.trainings, teacher.skipped_trainings) == (0, 1)
    assert len(teacher.labelled_goals()[1]) == 0


# -- the generator learns the intermediate region -------------------------------------------------------
def ring_share(tasks) -> float:
    r = np.hypot(*np.array(tasks).T)
    return float(((r >= 0.3) & (r < 0.6)).mean())


def test_generator_concentrates_on_the_intermediate_ring():
    """Success certain within 0.3 of the corner (0, 0), a coin flip in the ring 0.3–0.6, never beyond.
    Uniform goals land in the ring with probability π/4 (0.6² − 0.3²) ≈ 0.21."""
    rng = np.random.default_rng(100)
    teacher = GoalGAN(UNIT2, **SMALL, gan_iterations=100, background=False, seed=0)
    assert abs(ring_share(teacher.sample(600)) - np.pi / 4 * 0.27) < 0.05  # before training: uniform
    teacher = GoalGAN(UNIT2, **SMALL, update_size=50, gan_iterations=100, background=False, seed=0)
    while teacher.trainings < 3:
        (task,) = teacher.sample(1)
        r = np.hypot(*task)
        p = 1.0 if r < 0.3 else 0.5 if r < 0.6 else 0.0
        teacher.update_on_episode(0.0, 1, task, float(rng.random() < p))
    assert ring_share(teacher.sample(600)) > 0.6


def test_masters_more_toy_env_cells_than_uniform_sampling():
    """The ALP-GMM paper's toy env, each episode a success with probability competence / 100; TeachMyAgent's
    benchmark noise and replay share, small networks, 4,000 episodes, seed 0."""
    from magister.curricula import DomainRandomization
    from magister.examples.teacher_toy import ToyEnv

    def mastered(curriculum) -> float:
        env, rng = ToyEnv(dims=2), np.random.default_rng(0)
        for _ in range(4000):
            (task,) = curriculum.sample(1)
            reward = env.play(task)
            curriculum.update_on_episode(reward, 1, task, float(rng.random() < reward))
        return env.mastered()

    teacher = GoalGAN(UNIT2, **SMALL, update_size=50, gan_iterations=100, state_noise_level=0.1, p_old=0.1,
                      background=False, seed=0)
    assert mastered(teacher) >= mastered(DomainRandomization(UNIT2, seed=0)) + 0.03


# -- the background training ----------------------------------------------------------------------------
def test_background_training_never_blocks_sampling(monkeypatch):
    release, started = threading.Event(), threading.Event()
    real = goal_gan._train_lsgan

    def held(snapshot):
        started.set()
        assert release.wait(60)
        return real(snapshot)

    monkeypatch.setattr(goal_gan, "_train_lsgan", held)
    teacher = GoalGAN(UNIT2, **SMALL, n_rollouts=2, update_size=4, gan_iterations=5, p_old=0.0, seed=0)
    play_goals(teacher, [1, 1, 0, 2], 2)  # two intermediate goals among four: a training starts
    assert started.wait(60)
    for task in teacher.sample(20):  # served by the current (uniform) proposal while the fit waits
        teacher.update_on_episode(0.0, 1, task, 0.0)
    assert teacher.trainings == 0
    release.set()
    deadline = time.monotonic() + 60
    while teacher.trainings == 0 and time.monotonic() < deadline:
        teacher.sample(1)  # a call swaps the finished training in
        time.sleep(0.01)
    assert teacher.trainings == 1


def test_exit_with_a_training_in_flight_is_clean():
    """The interpreter exits normally while a background training runs (it is finished at exit)."""
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        from magister.curricula import GoalGAN
        from magister.task_spaces import Box

        teacher = GoalGAN(Box(0.0, 1.0, shape=(2,)), n_rollouts=1, update_size=4, goid_lb=0.0, goid_ub=1.0,
                          gan_iterations=200, seed=0)
        for i in range(4):
            (task,) = teacher.sample(1)
            teacher.update_on_episode(0.0, 1, task, float(i % 2))
        assert teacher._refit.busy
        print("exiting")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "exiting", proc.stderr[-2000:]


# -- sampling inside the bounds, checkpoints ----------------------------------------------------------------
@settings(max_examples=10)
@given(low=st.lists(st.floats(-50, 50), min_size=1, max_size=3), width=st.floats(0.01, 20),
       noise=st.floats(0.0, 0.5), seed=st.integers(0, 99))
def test_samples_always_inside_the_bounds(low, width, noise, seed):
    low_a = np.array(low)
    space = Box(low_a, low_a + width)
    teacher = GoalGAN(space, generator_layers=(8,), discriminator_layers=(8,), n_rollouts=1, update_size=4,
                      goid_lb=0.0, goid_ub=1.0, gan_iterations=3, state_noise_level=noise, p_old=0.5,
                      background=False, seed=seed)  # (every goal intermediate: a training every 4 goals)
    for i in range(12):  # a training after 4 labelled goals: later goals come from the generator
        (task,) = teacher.sample(1)
        assert space.contains(task)
        teacher.update_on_episode(0.0, 1, task, float(i % 2))
    assert teacher.trainings >= 1
    assert all(space.contains(t) for t in teacher.sample(30))


def test_config_space_axes_are_snapped():
    from magister.task_spaces import ConfigSpace, Product

    space = Product((Box(0.0, 1.0), ConfigSpace({"size": [4, 8, 16]})))
    teacher = GoalGAN(space, **SMALL, n_rollouts=1, update_size=4, goid_lb=0.0, goid_ub=1.0, gan_iterations=3,
                      background=False, seed=0)
    for i in range(12):
        (task,) = teacher.sample(1)
        assert space.contains(space.decode(task))
        teacher.update_on_episode(0.0, 1, task, float(i % 2))
    assert teacher.trainings >= 1
    assert all(space.contains(space.decode(t)) for t in teacher.sample(20))


@settings(max_examples=6)
@given(episodes=st.integers(0, 30), seed=st.integers(0, 99))
def test_checkpoint_round_trip(tmp_path_factory, episodes, seed):
    def make() -> GoalGAN:
        return GoalGAN(UNIT2, generator_layers=(8,), discriminator_layers=(8,), update_size=4,
                       gan_iterations=3, p_old=0.3, background=False, seed=seed)

    def feed(teacher: GoalGAN, n: int, offset: int) -> None:
        for i in range(n):
            (task,) = teacher.sample(1)
            teacher.update_on_episode(0.0, 1, task, float((i + offset) % 3 == 0))

    a = make()
    feed(a, episodes, 0)
    state = a.state_dict()
    assert all(isinstance(w, np.ndarray) for w in state["weights"]["generator"])
    path = tmp_path_factory.mktemp("ckpt") / "goalgan.ckpt"
    checkpoint.save(path, state)
    b = make()
    b.load_state_dict(checkpoint.load(path))
    assert b.sample(8) == a.sample(8)
    feed(a, 20, 1)
    feed(b, 20, 1)
    assert b.sample(8) == a.sample(8)
    assert a.trainings == b.trainings and a.metrics() == b.metrics()


def test_seeded_runs_repeat_exactly():
    def run() -> list:
        teacher = GoalGAN(UNIT2, **SMALL, n_rollouts=2, update_size=6, gan_iterations=10, background=False,
                          seed=5)
        for i in range(30):
            (task,) = teacher.sample(1)
            teacher.update_on_episode(0.0, 1, task, float(i % 2))
        return teacher.sample(10)

    assert run() == run()


# -- bad input ------------------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(TypeError, match="Discrete"):
        GoalGAN(Discrete(4))
    with pytest.raises(ValueError, match="zero width"):
        GoalGAN(Box(np.array([0.0, 1.0]), np.array([1.0, 1.0])))
    with pytest.raises(ValueError, match="success_threshold"):
        GoalGAN(UNIT2, signal="return")
    with pytest.raises(ValueError, match="goid_lb"):
        GoalGAN(UNIT2, goid_lb=0.8, goid_ub=0.2)
    with pytest.raises(ValueError, match="n_rollouts"):
        GoalGAN(UNIT2, n_rollouts=0)
    with pytest.raises(ValueError, match="generator_layers"):
        GoalGAN(UNIT2, generator_layers=())
    teacher = GoalGAN(UNIT2, seed=0)
    (task,) = teacher.sample(1)
    with pytest.raises(ValueError, match="episode_return"):
        teacher.update_on_episode(float("inf"), 1, task, 0.0)
    with pytest.raises(ValueError, match="progress"):
        teacher.update_on_episode(0.0, 1, task, float("nan"))
    assert teacher.num_episodes == 0


def test_missing_torch_names_it_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"torch.*teachers|teachers.*torch"):
        GoalGAN(UNIT2)
