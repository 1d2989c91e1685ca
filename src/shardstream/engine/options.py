"""Option groups of :class:`StreamingDataset`, validated once.

The choices and defaults of the order settings live in :mod:`shardstream.plan.settings`; this
module names the rest (download retries and timeout, the largest device batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import InvalidArgumentError
from ..plan.settings import (
    BATCHING_METHODS,
    DEFAULT_BATCHING_METHOD,
    DEFAULT_EPOCH_TAIL,
    DEFAULT_PARTITION_ALGO,
    DEFAULT_SAMPLING_GRANULARITY,
    DEFAULT_SAMPLING_METHOD,
    DEFAULT_SHUFFLE_ALGO,
    DEFAULT_SHUFFLE_SEED,
    EPOCH_TAILS,
    PARTITION_ALGOS,
    SAMPLING_METHODS,
    SHUFFLE_ALGOS,
    check_choice,
)

MAX_BATCH = 2**30  # samples of one device batch: a step's positions alone would take 8 GiB beyond it


def check_batch_size(batch_size, what: str = "batch_size") -> None:
    """A per-device batch: an int in [1, 2**30] (a step's samples are decoded at once in memory)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"{what}={batch_size!r} must be an int >= 1 (samples per device per step)")
    if batch_size > MAX_BATCH:
        raise InvalidArgumentError(
            f"{what}={batch_size} is more samples than one step can hold in memory (at most 2**30 = {MAX_BATCH}); "
            "it is the per-device batch, the samples one rank receives per step: use the size of your training batch")


def _positive(name: str, value, allow_none: bool = True, zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise InvalidArgumentError(f"{name}={value!r} must be an int >= {0 if zero else 1}")


@dataclass(frozen=True)
class DatasetOptions:
    """How a dataset plans and reads its epochs. Where its streams are read from, and how they are
    downloaded, is each stream's :class:`~shardstream.storage.options.StreamOptions`."""

    predownload: Optional[int] = None
    sampling_method: str = DEFAULT_SAMPLING_METHOD
    sampling_granularity: int = DEFAULT_SAMPLING_GRANULARITY
    partition_algo: str = DEFAULT_PARTITION_ALGO
    num_canonical_nodes: Optional[int] = None
    batch_size: Optional[int] = None
    shuffle: bool = False
    shuffle_algo: str = DEFAULT_SHUFFLE_ALGO
    shuffle_seed: int = DEFAULT_SHUFFLE_SEED
    shuffle_block_size: Optional[int] = None
    batching_method: str = DEFAULT_BATCHING_METHOD
    allow_unsafe_types: bool = False
    replication: Optional[int] = None
    epoch_tail: str = DEFAULT_EPOCH_TAIL

    def __post_init__(self) -> None:
        _positive("predownload", self.predownload, zero=True)
        _positive("sampling_granularity", self.sampling_granularity, allow_none=False)
        _positive("num_canonical_nodes", self.num_canonical_nodes)
        if self.batch_size is not None:
            check_batch_size(self.batch_size)
        _positive("shuffle_block_size", self.shuffle_block_size)
        _positive("replication", self.replication)
        check_choice("sampling_method", self.sampling_method, SAMPLING_METHODS)
        check_choice("partition_algo", self.partition_algo, PARTITION_ALGOS)
        check_choice("shuffle_algo", self.shuffle_algo, SHUFFLE_ALGOS)
        check_choice("batching_method", self.batching_method, BATCHING_METHODS)
        check_choice("epoch_tail", self.epoch_tail, EPOCH_TAILS)
        if isinstance(self.shuffle_seed, bool) or not isinstance(self.shuffle_seed, int):
            raise InvalidArgumentError(f"shuffle_seed={self.shuffle_seed!r} must be an int")
