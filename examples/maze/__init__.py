"""The UED canon on JaxUED's maze: DR, PLR, PLR⊥, ACCEL, PAIRED, REPAIRED and the minimax adversary.

* :mod:`.env`: JaxUED's maze, editor, generator, mutator and held-out mazes (the ``jaxued`` package, kept
  in its own virtualenv: ``bash benchmarks/_jaxued_env.sh``; :func:`.env.require_jaxued` says so when it
  is missing);
* :mod:`.train`: the trainer, one method per run, with the parity arms on JaxUED's ``LevelSampler``;
* :mod:`.canon`: the one command, every method over several seeds, the table and the plot.

Importing this package does not import jaxued.
"""
