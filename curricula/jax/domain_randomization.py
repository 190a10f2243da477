"""Domain randomisation on device: every sample a new generated level, trained on.

Paper: J. Tobin, R. Fong, A. Ray, J. Schneider, W. Zaremba, P. Abbeel, "Domain Randomization for
Transferring Deep Neural Networks from Simulation to the Real World", IROS 2017 (uniform ``P(tau) = 1/|T|``).
The twin of :class:`magister.curricula.DomainRandomization`: the uniform draw is your generator's.

>>> import jax.numpy as jnp
>>> smp = dr_sample(jnp.arange(3))
>>> smp.levels.tolist(), smp.train.tolist(), smp.replay.tolist()
([0, 1, 2], [True, True, True], [False, False, False])
"""

from __future__ import annotations

import logging

import jax.numpy as jnp

from .buffer import Level, Sample, batch_size

logger = logging.getLogger(__name__)

__all__ = ["dr_sample"]


def dr_sample(new_levels: Level) -> Sample:
    """A :class:`~magister.curricula.jax.buffer.Sample` of the generated levels, all new and trained on."""
    b = batch_size(new_levels)
    return Sample(new_levels, jnp.zeros(b, bool), jnp.zeros(b, jnp.int32), jnp.ones(b, bool),
                  jnp.zeros(b, bool))
