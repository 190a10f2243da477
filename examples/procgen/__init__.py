"""Procgen + Prioritized Level Replay: the PLR paper's setting (Jiang et al., ICML 2021) on the stock wheel.

* :mod:`.levels`: a Procgen game whose task is a level seed, set at every reset
  (:class:`~.levels.ProcgenLevels`), the task spaces of the training levels and of the full distribution,
  and the Procgen paper's per-game return bounds;
* :mod:`.ppo_plr`: the CleanRL-style PPO trainer with PLR, PLR⊥ or uniform levels.

Procgen needs old versions of numpy and gym: it lives in a virtualenv of its own
(``bash benchmarks/_procgen_env.sh .venvs/procgen``). Importing this package imports neither.
"""
