"""The NetHack / MiniHack recipe (magister.examples.nethack), run in its own virtualenv (nle pins gymnasium).

``tests/recipes_inside/nethack_check.py`` runs the recipe's trainer at a tiny budget inside the virtualenv
built by ``benchmarks/_nethack_env.sh`` and checks, from NLE's own reports, that each episode played the
game seed in its ``info["task"]`` (``get_seeds()``) or the MiniHack env id chosen (the env's spec), that the
curriculum got every episode, and that the script resumes from its checkpoint.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from venvs import run_in

from magister.examples.nethack.common import BL_TIME, NoProgressTimeout, make_seed_spaces


@pytest.mark.slow
def test_nethack_recipe_plays_the_chosen_seeds_and_ids(tmp_path):
    proc = run_in("nethack", ["tests/recipes_inside/nethack_check.py", str(tmp_path)], timeout=600)
    ok = [line for line in proc.stdout.splitlines() if line.startswith("OK ")]
    assert len(ok) == 4, proc.stdout
    assert "NLE reported (task, task, reseed=False) every time" in proc.stdout



# -- the parts that need no NetHack: they run in the main environment ---------------------------------------
class _Turns(gym.Env):
    """A stand-in NLE env whose in-game turn counter follows a script (blstats[BL_TIME])."""

    observation_space = gym.spaces.Dict({"blstats": gym.spaces.Box(-1e9, 1e9, (27,), np.int64)})
    action_space = gym.spaces.Discrete(2)

    def __init__(self, turns):
        self.turns, self.t = list(turns), 0

    def _obs(self):
        bl = np.zeros(27, dtype=np.int64)
        bl[BL_TIME] = self.turns[self.t]
        return {"blstats": bl}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def test_no_progress_timeout_counts_steps_without_a_new_turn():
    # turn after reset and steps 1..7: 1 | 1 1 1 2 2 2 2: steps 1-3 stand still (the third truncates), step 4
    # moves (the count restarts), steps 5-7 stand still again (the seventh truncates)
    env = NoProgressTimeout(_Turns([1, 1, 1, 1, 2, 2, 2, 2]), timeout=3)
    env.reset()
    truncs = [env.step(0)[3] for _ in range(7)]
    assert truncs == [False, False, True, False, False, False, True]
    with pytest.raises(ValueError, match="timeout"):
        NoProgressTimeout(_Turns([1]), timeout=0)


@settings(max_examples=20, deadline=None)
@given(x=st.integers(0, 78), y=st.integers(0, 20), seed=st.integers(0, 2**16))
def test_the_crop_is_centred_on_the_hero_and_padded_off_the_map(x, y, seed):
    torch = pytest.importorskip("torch")
    from magister.examples.nethack.train import CROP, MAX_GLYPH, observe

    rng = np.random.default_rng(seed)
    glyphs = rng.integers(0, MAX_GLYPH, size=(1, 21, 79))
    bl = np.zeros((1, 27), dtype=np.int64)
    bl[0, 0], bl[0, 1] = x, y
    row = observe({"glyphs": glyphs, "blstats": bl})
    assert row.shape == (1, CROP * CROP + 27) and row.dtype == torch.float32
    crop = row[0, :CROP * CROP].reshape(CROP, CROP).long().numpy()
    r = CROP // 2
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            inside = 0 <= y + dy < 21 and 0 <= x + dx < 79
            want = glyphs[0, y + dy, x + dx] if inside else MAX_GLYPH
            assert crop[r + dy, r + dx] == want


def test_spaces_and_errors():
    seeds, held = make_seed_spaces(200, 20)
    assert seeds.num_tasks == 200 and held.tasks[0] == 200 and held.tasks[-1] == 219
    with pytest.raises(ValueError, match="num_seeds"):
        make_seed_spaces(0, 1)
