"""The settings an epoch's order depends on: their allowed values and defaults, named once.

:class:`~shardstream.plan.epoch.PlanSpec`, :class:`~shardstream.plan.mixed.MixSpec` and the
dataset's options (:class:`~shardstream.engine.options.DatasetOptions`, and the keywords of
``StreamingDataset``) take their choices and defaults from here. The defaults are
mosaicml-streaming's, so the same keywords give the same order.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError

# The position of an algorithm in this tuple keys its shuffles: append new ones, never reorder.
SHUFFLE_ALGOS = ("naive", "py1b", "py1br", "py1e", "py1s", "py2s")
DEFAULT_SHUFFLE_ALGO = "py1e"
DEFAULT_SHUFFLE_SEED = 9176

# What happens to the last global batch of an epoch when the samples do not fill it. ``mosaic``
# sizes the epoch as mosaicml-streaming does, with a short last step (see plan/mosaic.py).
EPOCH_TAILS = ("pad", "drop", "mosaic")
STEP_TAILS = ("pad", "drop")  # the tails of whole global steps, planned without knowing the world
DEFAULT_EPOCH_TAIL = "pad"

# Which worlds may read an order (never the order itself): ``orig`` needs the canonical node count to be
# a multiple or a divisor of the physical node count (whole canonical nodes per node), ``relaxed`` any.
PARTITION_ALGOS = ("orig", "relaxed")
DEFAULT_PARTITION_ALGO = "relaxed"

# Mixed datasets: how each stream's per-epoch count is drawn, and how the streams fill batches.
SAMPLING_METHODS = ("balanced", "fixed")
DEFAULT_SAMPLING_METHOD = "balanced"
DEFAULT_SAMPLING_GRANULARITY = 1
BATCHING_METHODS = ("random", "stratified", "per_stream", "device_per_stream")
DEFAULT_BATCHING_METHOD = "random"


def default_block_size(num_canonical_nodes: int) -> int:
    """mosaicml-streaming's default ``shuffle_block_size``."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def check_choice(name: str, value, allowed: tuple[str, ...]) -> None:
    """Raise :class:`InvalidArgumentError` naming ``name`` and the choices unless ``value`` is one."""
    if value not in allowed:
        raise InvalidArgumentError(f"Invalid {name.replace('_', ' ')}: {value}. {name}={value!r} is not one of "
                                   f"{', '.join(allowed)}")
