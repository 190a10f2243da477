"""XLand-style multi-agent games on a grid (after *Open-Ended Learning Leads to Generally Capable Agents*).

* :mod:`.game` - relations, atoms, goals as DNF, games; the game measures (exploration difficulty,
  cooperativeness, competitiveness, balance) over feasible predicate states; random generation and local
  search toward a target balance/competitiveness; recolouring and a canonical hash; probe games.
* :mod:`.world` - grid worlds with heights, ramps, floor colours, objects and players; generation with a
  large playable area, local mutation, conditioning on a game.
* :mod:`.env` - the PettingZoo parallel environment and its task wrapper.
* :mod:`.coplayers` - noop, random, scripted goal-seeker and store-snapshot co-players.
* :mod:`.task` - the generator-backed task space with held-out test/validation sets, and probe tasks.
"""

from .coplayers import LEARNER, NOOP, RANDOM, SEEKER, GoalSeeker
from .env import XLandEnv, XLandTask, XLandTaskWrapper
from .game import (
    ME_ATOMS,
    PROBE_GAMES,
    Game,
    GameMeasures,
    Goal,
    Transforms,
    alike_game,
    balance,
    canonical_game,
    game_distance,
    game_hash,
    game_measures,
    generate_game,
    goal_observation,
    is_player_centric,
    random_game,
    recolour_game,
)
from .task import FixedXLandTasks, XLandTaskSpace, probe_tasks, task_features
from .world import World, condition_world, generate_world, mutate_world, path_entropy

__all__ = [
    "FixedXLandTasks",
    "Game",
    "GameMeasures",
    "GoalSeeker",
    "Goal",
    "LEARNER",
    "ME_ATOMS",
    "NOOP",
    "PROBE_GAMES",
    "RANDOM",
    "SEEKER",
    "Transforms",
    "World",
    "XLandEnv",
    "XLandTask",
    "XLandTaskSpace",
    "XLandTaskWrapper",
    "alike_game",
    "balance",
    "canonical_game",
    "condition_world",
    "game_distance",
    "game_hash",
    "game_measures",
    "generate_game",
    "generate_world",
    "goal_observation",
    "is_player_centric",
    "mutate_world",
    "path_entropy",
    "probe_tasks",
    "random_game",
    "recolour_game",
    "task_features",
]
