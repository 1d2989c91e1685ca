"""Deterministic epoch planning: pure functions of shard sizes, seed, epoch and world.

See :mod:`shardstream.plan.epoch` for the model. This package imports numpy only:
no I/O, no clocks, no environment; every random choice derives from integers.
"""

from .epoch import EpochPlan, Plan, PlanSpec, default_block_size
from .partition import TAILS, World
from .shuffle import ALGOS, interleave_shape

__all__ = ["ALGOS", "TAILS", "EpochPlan", "Plan", "PlanSpec", "World", "default_block_size", "interleave_shape"]
