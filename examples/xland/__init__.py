"""XLand-style multi-agent games on a grid: worlds, games (goals as DNF over relations), the game toolkit
(measures, generation, probe games), the PettingZoo environment and its co-players.

See :mod:`.game`, :mod:`.world`, :mod:`.env` and :mod:`.task`.
"""
