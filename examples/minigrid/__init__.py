"""MiniGrid recipe: PLR over the level seeds of a procedurally generated MiniGrid env.

One task is one level seed: MiniGrid's ``reset(seed=s)`` reseeds the env's generator and regenerates the
grid from it, so the seed alone fixes the level. :mod:`~magister.examples.minigrid.common` holds the task
wrapper, the task spaces, the curricula and the held-out evaluation; two trainers use them:

* :mod:`~magister.examples.minigrid.sb3_plr`: Stable-Baselines3 PPO in a ``SubprocVecEnv``;
* :mod:`~magister.examples.minigrid.cleanrl_plr`: a CleanRL-style PPO loop.
"""
