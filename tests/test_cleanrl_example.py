"""The CleanRL-style examples: a plain PPO (examples/cleanrl_ppo_plain.py) and the same script with a PLR⊥
curriculum (examples/cleanrl_ppo.py) in at most 12 added or changed lines; both train on a tiny budget.
Also :class:`magister.integrations.RolloutTasks`, the recorder the curriculum version uses."""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import magister.examples.cleanrl_ppo as with_curriculum
import magister.examples.cleanrl_ppo_plain as plain
from magister import GymnasiumSyncWrapper
from magister.curricula import DomainRandomization, RobustPLR
from magister.examples.cartpole import CartPoleTask
from magister.integrations import RolloutTasks
from magister.task_spaces import Discrete

ROOT = Path(__file__).resolve().parents[1]
PLAIN, CURRICULUM = "examples/cleanrl_ppo_plain.py", "examples/cleanrl_ppo.py"
GUIDE = ROOT / "docs" / "guides" / "cleanrl.md"
MAX_LINES = 12


@pytest.fixture(autouse=True)
def restore_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _tiny(module, **kw):
    base = dict(total_timesteps=1024, num_envs=2, num_steps=32, update_epochs=1, num_minibatches=2, hidden=16,
                seed=0, progress=False)
    base.update(kw)
    return module.Args(**base)


# -- the diff ------------------------------------------------------------------------------------------------

def _code(rel: str) -> tuple[list[str], int]:
    """The lines of a script below its module docstring, and how many lines the docstring takes."""
    lines = (ROOT / rel).read_text().splitlines()
    end = ast.parse("\n".join(lines)).body[0].end_lineno
    return lines[end:], end


def example_diff() -> str:
    """The unified diff (one line of context) from the plain script to the curriculum version, below their
    docstrings, with the hunk headers giving the files' own line numbers."""
    (a, a_off), (b, b_off) = _code(PLAIN), _code(CURRICULUM)
    out = []
    for line in difflib.unified_diff(a, b, PLAIN, CURRICULUM, n=1, lineterm=""):
        m = re.fullmatch(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", line)
        if m:
            line = f"@@ -{int(m[1]) + a_off}{m[2] or ''} +{int(m[3]) + b_off}{m[4] or ''} @@"
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_curriculum_version_is_the_plain_script_plus_at_most_12_lines():
    diff = example_diff().splitlines()
    added = [line[1:] for line in diff[2:] if line.startswith("+")]
    removed = [line[1:] for line in diff[2:] if line.startswith("-")]
    assert 0 < len(added) <= MAX_LINES, f"{len(added)} added or changed lines:\n" + "\n".join(added)
    assert len(removed) <= len(added)  # every removed line was changed, none dropped
    # every line that differs says so, but the blank line that separates the import groups
    assert all("# magister:" in line for line in added if line.strip()), added
    assert sum(not line.strip() for line in added) <= 1


def test_the_cleanrl_guide_shows_the_real_diff():
    blocks = re.findall(r"^```diff\n(.*?)^```$", GUIDE.read_text(), re.S | re.M)
    assert len(blocks) == 1, "docs/guides/cleanrl.md should hold exactly one ```diff block"
    assert blocks[0] == example_diff(), (
        "docs/guides/cleanrl.md's diff is not the scripts' diff any more; paste this one:\n" + example_diff())


def test_both_scripts_take_the_same_flags():
    args = ["--total-timesteps", "1e3", "--no-anneal-lr", "--num-envs", "3"]
    for module in (plain, with_curriculum):
        parsed = module.parse_args(args)
        assert (parsed.total_timesteps, parsed.anneal_lr, parsed.num_envs) == (1000, False, 3)
        assert module.Args.__dataclass_fields__.keys() == plain.Args.__dataclass_fields__.keys()


# -- both scripts train -------------------------------------------------------------------------------------

def _params(agent) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in agent.parameters()])


def test_the_plain_script_trains():
    torch.manual_seed(0)
    initial = _params(plain.Agent(4, 2, 16))
    r = plain.train(_tiny(plain))
    assert r["global_step"] == 1024 and r["iterations"] == 16
    assert len(r["episode_returns"]) > 10 and all(x >= 1 for x in r["episode_returns"])
    assert not torch.equal(_params(r["agent"]), initial)  # the optimiser stepped


def test_the_curriculum_version_trains_scores_plr_and_masks_evaluation_only_steps(monkeypatch):
    made: list[RobustPLR] = []
    fractions: list[float] = []

    class Kept(RobustPLR):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    train_indices = RolloutTasks.train_indices

    def spy(self):
        idx = train_indices(self)
        assert idx.tolist() == np.flatnonzero(self.train.reshape(-1)).tolist()
        fractions.append(len(idx) / self.train.size)
        return idx

    monkeypatch.setattr(with_curriculum, "RobustPLR", Kept)
    monkeypatch.setattr(RolloutTasks, "train_indices", spy)
    torch.manual_seed(0)
    initial = _params(with_curriculum.Agent(4, 2, 16))
    r = with_curriculum.train(_tiny(with_curriculum))
    (cur,) = made
    assert r["global_step"] == 1024 and len(fractions) == r["iterations"] == 16
    assert cur.num_episodes == len(r["episode_returns"]) > 10  # every finished episode reached PLR⊥
    assert len(cur) > 0 and cur.metrics()["plr/inserted"] > 0  # feed_scores filled its buffer
    # PLR⊥ plays new tasks for evaluation only (no gradient) and trains on replays: the first rollout has
    # nothing to replay, later ones mix both
    assert fractions[0] == 0.0
    assert any(0.0 < f < 1.0 for f in fractions[1:])
    assert not torch.equal(_params(r["agent"]), initial)


def test_the_help_runs():
    for module in (plain, with_curriculum):
        with pytest.raises(SystemExit) as exit_info:
            module.parse_args(["--help"])
        assert exit_info.value.code == 0


# -- RolloutTasks -------------------------------------------------------------------------------------------

def test_recorded_tasks_are_the_tasks_the_steps_were_played_on():
    """With SAME_STEP autoreset, the info of an episode's last step already belongs to the next episode:
    the recorder must take the finished episode's task from final_info. The observation carries the task,
    so each step's recorded task is checked against the one the action was taken in."""
    space = Discrete(tasks=[0.0, 0.05, 0.1, 0.15, 0.2], seed=0)
    curriculum = DomainRandomization(space, seed=0)
    envs = gym.make_vec(
        "CartPole-v1", num_envs=3, vectorization_mode="sync",
        wrappers=[lambda e: GymnasiumSyncWrapper(CartPoleTask(e, space, task_observation=True), curriculum)],
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    T = 120
    rec = RolloutTasks(T, 3, done_convention="ended_at")
    obs, _ = envs.reset(seed=0)
    played, ended = np.zeros((T, 3)), np.zeros((T, 3), dtype=bool)
    for t in range(T):
        played[t] = obs["task"][:, 0]  # the (encoded) task of the episode this step's action is taken in
        obs, _, term, trunc, info = envs.step(envs.action_space.sample())
        ended[t] = term | trunc
        rec.record(t, info)
    envs.close()
    assert ended.sum() >= 6  # several episodes ended inside the rollout, some tasks changed
    np.testing.assert_array_equal(rec.tasks, played)
    assert rec.tasks.dtype == np.int64 and rec.train.all()  # DomainRandomization trains on every task
    assert len(set(rec.tasks.ravel().tolist())) >= 3


def test_weights_indices_and_errors():
    rec = RolloutTasks(2, 3, done_convention="before_step")
    with pytest.raises(ValueError, match=r"steps \[0, 1\] of the rollout were never recorded"):
        rec.train_indices()
    rec.record(0, {"task": np.array([1, 2, 3]), "task_train": np.array([True, False, True])})
    with pytest.raises(ValueError, match=r"steps \[1\]"):
        rec.loss_weights()
    rec.record(1, {"task": np.array([1, 2, 3]), "task_train": np.array([False, False, True])})
    assert rec.train_indices().tolist() == [0, 2, 5]
    w = rec.loss_weights()
    np.testing.assert_allclose(w, [[2.0, 0.0, 2.0], [0.0, 0.0, 2.0]])  # B / M = 6 / 3
    assert w.mean() == pytest.approx(1.0)
    rec.record(1, {"task": np.array([1, 2, 3]), "task_train": np.zeros(3, dtype=bool)})
    rec.record(0, {"task": np.array([1, 2, 3]), "task_train": np.zeros(3, dtype=bool)})
    assert rec.train_indices().size == 0 and not rec.loss_weights().any()
    with pytest.raises(KeyError, match="no 'task'.*GymnasiumSyncWrapper"):
        rec.record(0, {"episode": {}})
    with pytest.raises(ValueError, match=r"info\['task'\] has shape \(2,\), expected \(3,\)"):
        rec.record(0, {"task": np.array([1, 2]), "task_train": np.ones(2, bool)})
    with pytest.raises(IndexError, match=r"step must be an int in \[0, 2\), got 2"):
        rec.record(2, {"task": np.array([1, 2, 3]), "task_train": np.ones(3, bool)})
    with pytest.raises(ValueError, match="done_convention must be one of"):
        RolloutTasks(2, 3, done_convention="cleanrl")
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        RolloutTasks(2, 0, done_convention="ended_at")


def test_feed_scores_passes_the_recorded_tasks_and_the_convention():
    """The recorder's feed_scores equals feed_scores called by hand with the same arrays."""
    from magister.curricula import PLR
    from magister.integrations import feed_scores

    def plr():
        cur = PLR(Discrete(6), replay_prob=0.0, seed=0)
        cur.sample(30)
        return cur

    rng = np.random.default_rng(0)
    tasks = np.array([[0, 1], [0, 1], [2, 1], [2, 3]])
    before = np.array([[0, 0], [0, 0], [1, 0], [0, 1]], dtype=np.float32)  # CleanRL's dones
    rewards, values = rng.random((4, 2)), rng.random((4, 2))
    next_value, next_done = rng.random(2), np.array([1.0, 0.0])
    rec = RolloutTasks(4, 2, done_convention="before_step")
    for t in range(4):
        rec.record(t, {"task": tasks[t], "task_train": np.ones(2, bool)})
    a, b = plr(), plr()
    rec.feed_scores(a, rewards, values, before, next_value, next_done)
    feed_scores(b, rewards, values, before, next_value, tasks, done_convention="before_step",
                next_done=next_done)
    assert a.buffer_tasks() == b.buffer_tasks() and sorted(a.buffer_tasks()) == [0, 1, 2, 3]
    assert a.buffer_scores().tolist() == b.buffer_scores().tolist()
    with pytest.raises(TypeError, match="next_done"):
        RolloutTasks(4, 2, done_convention="ended_at").feed_scores(a, rewards, values, before, next_value,
                                                                    next_done)
