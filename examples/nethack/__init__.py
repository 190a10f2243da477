"""NetHack / MiniHack recipe: a curriculum over NetHack game seeds or over MiniHack env ids.

``nle`` pins ``gymnasium==1.2.0``, so this recipe runs in a virtualenv of its own
(``bash benchmarks/_nethack_env.sh .venvs/nethack``). :mod:`~magister.examples.nethack.common` holds the two
task spaces and their wrappers; :mod:`~magister.examples.nethack.train` is a small CleanRL-style PPO on them.
"""
