"""Gymnasium and PettingZoo wrappers: task switching on reset, feedback, sync wrappers."""
