"""Minigrid levels x reward-machine tasks in JAX: the on-device fast path of magister.

Everything here needs the optional ``jax`` extra (``pip install magister[jax]``). Modules:

* :mod:`.env` - grid dynamics on fixed-shape arrays (jit/vmap friendly), 5x5 egocentric observations;
* :mod:`.propositions` - the 889-proposition alphabet, the labelling function and the literal-only
  labelling the environment step uses;
* :mod:`.reward_machines` - reward machines as arrays, stepping, the sequential and random-walk (DAG)
  samplers;
* :mod:`.levels` - the level sampler and the problem samplers (independent, level-conditioned);
* :mod:`.solvability` - the solvability checker (each edge's whole conjunction, negations included, in one
  env state; door-unlocking order; "unsolvable" is always right);
* :mod:`.mutations` - the 8 level, 3 task and 2 hindsight edits of ATLAS with their preconditions;
* :mod:`.curriculum` - PLR-perp, ACCEL, SFL and DR as pure functions over a fixed-capacity buffer;
* :mod:`.probes` - a small hand-designed evaluation set (MYOPIC, PATROL, CHOICE and simpler problems);
* :mod:`.ppo` - a recurrent PPO trainer (``python -m magister.examples.minigrid_rm.ppo --help``);
* :mod:`.atlas` - DR, PLR-perp and ACCEL over several seeds in one command, ATLAS's qualitative result
  (``python -m magister.examples.minigrid_rm.atlas --help``).
"""
