"""Deterministic epoch planning: pure functions of shard sizes, seed, epoch and world.

See :mod:`shardstream.plan.epoch` for the model and :mod:`shardstream.plan.settings` for the
settings' choices and defaults. This package imports numpy only: no I/O, no clocks, no
environment; every random choice derives from integers.
"""

from .epoch import EpochPlan, Plan, PlanSpec
from .partition import World
from .settings import (BATCHING_METHODS, EPOCH_TAILS, PARTITION_ALGOS, SAMPLING_METHODS, SHUFFLE_ALGOS, STEP_TAILS,
                       default_block_size)
from .shuffle import interleave_shape

__all__ = ["BATCHING_METHODS", "EPOCH_TAILS", "PARTITION_ALGOS", "SAMPLING_METHODS", "SHUFFLE_ALGOS", "STEP_TAILS",
           "EpochPlan", "Plan", "PlanSpec", "World", "default_block_size", "interleave_shape"]
