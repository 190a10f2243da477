"""On-device curricula: the level sampler and PLR / PLR⊥ / ACCEL / SFL / Learning Progress / DR as pure JAX
functions over typed array states (the ``jax`` extra: ``pip install "magister[jax]"``).

These are the twins of the Python classes of :mod:`magister.curricula` for training loops that keep the
environments, the agent and the curriculum on the accelerator (``jax.jit`` / ``jax.vmap`` / ``jax.lax.scan``):
the same algorithm, hyperparameter names and defaults, but no objects, no task space and no host round trip.
A *level* is any pytree of arrays (an xminigrid ruleset, a gymnax env parameter, a seed, ...); a batch of
levels is the same pytree with a leading axis. Each algorithm is a frozen config dataclass (static under
``jit``, validated like the class's ``__init__``), a ``NamedTuple`` state of arrays and functions
``state -> state``:

| Python class | JAX config, state and functions |
|---|---|
| `PLR` | `PLRConfig`, `LevelBuffer`, `init_buffer`, `plr_sample`, `plr_update`, `replay_distribution` |
| `RobustPLR` / `PLRPerp` | `RobustPLRConfig` (the same functions; `robust=True`) |
| `ACCEL` | `ACCELConfig`, `accel_mutate`, `accel_sample`, `child_provenance` |
| `SFL` (`method="topk"`) | `SFLConfig`, `SFLState`, `sfl_refresh`, `sfl_sample`, `sfl_due` |
| `LearningProgress` | `LearningProgressConfig`, `LPState`, `lp_observe`, `lp_evaluate`, `lp_distribution` |
| `DomainRandomization` | `dr_sample` |
| (none) PAIRED, minimax, REPAIRED | `PAIREDConfig`, `REPAIREDConfig`, `regret`, `edit_levels`, ... |

Importing :mod:`magister.curricula` never imports JAX; importing this package without JAX raises an
``ImportError`` that names the extra.
"""

from __future__ import annotations

try:
    import jax  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "magister.curricula.jax needs JAX: install the 'jax' extra, pip install \"magister[jax]\" "
        f"(import failed: {exc})"
    ) from exc

from .accel import ACCELConfig, accel_mutate, accel_sample, child_provenance
from .buffer import LevelBuffer, Sample, hash_levels, init_buffer, level_hash, mark_sampled, update_buffer
from .domain_randomization import dr_sample
from .learning_progress import (
    LearningProgressConfig,
    LPState,
    lp_distribution,
    lp_evaluate,
    lp_init,
    lp_observe,
    lp_sample,
)
from .paired import (
    Editor,
    EditTrajectory,
    EpisodeReturns,
    PAIREDConfig,
    REPAIREDConfig,
    adversary_reward,
    edit_levels,
    editor_advantages,
    episode_returns,
    flexible_regret,
    minimax,
    regret,
    repaired_masks,
)
from .plr import (
    PLRConfig,
    RobustPLRConfig,
    plr_sample,
    plr_update,
    replay_distribution,
    replay_probability,
)
from .scoring import (
    learnability,
    max_mc,
    positive_value_loss,
    power_weights,
    rank_weights,
    rollout_scores,
    staleness_weights,
    value_l1,
)
from .sfl import SFLConfig, SFLState, sfl_distribution, sfl_due, sfl_init, sfl_refresh, sfl_sample

__all__ = [
    "ACCELConfig",
    "EditTrajectory",
    "Editor",
    "EpisodeReturns",
    "LPState",
    "LearningProgressConfig",
    "LevelBuffer",
    "PAIREDConfig",
    "PLRConfig",
    "REPAIREDConfig",
    "RobustPLRConfig",
    "SFLConfig",
    "SFLState",
    "Sample",
    "accel_mutate",
    "accel_sample",
    "adversary_reward",
    "child_provenance",
    "dr_sample",
    "edit_levels",
    "editor_advantages",
    "episode_returns",
    "flexible_regret",
    "hash_levels",
    "init_buffer",
    "learnability",
    "level_hash",
    "lp_distribution",
    "lp_evaluate",
    "lp_init",
    "lp_observe",
    "lp_sample",
    "mark_sampled",
    "max_mc",
    "minimax",
    "plr_sample",
    "plr_update",
    "positive_value_loss",
    "power_weights",
    "rank_weights",
    "regret",
    "repaired_masks",
    "replay_distribution",
    "replay_probability",
    "rollout_scores",
    "sfl_distribution",
    "sfl_due",
    "sfl_init",
    "sfl_refresh",
    "sfl_sample",
    "staleness_weights",
    "update_buffer",
    "value_l1",
]
