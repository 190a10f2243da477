"""Glue for trainers: score helpers, SB3 callback, RLlib callbacks, logging."""
