"""Task spaces: what a task is (decoded for the env, encoded for curricula and the wire).

>>> from magister.task_spaces import Discrete
>>> space = Discrete(tasks=["MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0"], seed=0)
>>> space.encode("MiniGrid-DoorKey-5x5-v0"), space.decode(0)
(1, 'MiniGrid-Empty-5x5-v0')
"""

from .base import EncodedTask, TaskSpace, stable_hash, task_key
from .box import Box
from .config import ConfigSpace
from .discrete import Discrete, split_indexed
from .multi_discrete import MultiDiscrete
from .open_ended import OpenEnded, content_hash
from .opponent_ids import OpponentIdSpace
from .product import Product

__all__ = [
    "Box",
    "ConfigSpace",
    "Discrete",
    "EncodedTask",
    "MultiDiscrete",
    "OpenEnded",
    "OpponentIdSpace",
    "Product",
    "TaskSpace",
    "content_hash",
    "split_indexed",
    "stable_hash",
    "task_key",
]
