"""The PufferLib recipe: magister tasks and feedback through PufferLib's vector envs.

* :mod:`.levels`: MiniGrid levels by seed (:class:`.levels.LevelSeed`), the env's own report of the level
  it generated, and the env creator for ``pufferlib.vector.make`` with the sync wrapper inside it;
* :mod:`.train`: CleanRL's PPO on PufferLib's Serial or Multiprocessing backend with PLR choosing levels.

pufferlib-core pins torch 2.9.0: it lives in a virtualenv of its own (``bash benchmarks/_pufferlib_env.sh``).
Importing this package does not import pufferlib.
"""
