"""Bundled environments and trainers, runnable as ``python -m magister.examples.<name>``."""
