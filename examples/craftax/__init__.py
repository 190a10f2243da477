"""The Craftax-Classic recipe: DR, PLR, PLR⊥ and ACCEL over world seeds, on device.

* :mod:`.worlds`: a level is a world seed and the map Craftax generates from it (ACCEL edits the map);
  Craftax's own reset starts an episode on it;
* :mod:`.train`: PPO (:mod:`magister.examples.jax_ppo`) with the curricula of
  :mod:`magister.curricula.jax`, one jitted update per curriculum round.

Importing this package does not import craftax (``pip install "magister[craftax]"``).
"""
