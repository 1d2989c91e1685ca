"""EasyDeL's sharded-source API over the engine: named file shards, each opened at any row.

See :mod:`.base` for the protocol, :mod:`.files` for the file sources and :mod:`.hf` for
Hugging Face datasets; every source's ``.dataset(...)`` is the StreamingDataset of its files.
"""

from .base import ShardCount, ShardedDataSource, ShardedSource, ShardInfo, TransformedShardedSource
from .files import (
    ArrowShardedSource,
    CsvShardedSource,
    FileShardedSource,
    JsonShardedSource,
    ParquetShardedSource,
    TextShardedSource,
)
from .hf import HuggingFaceShardedSource

__all__ = [
    "ArrowShardedSource", "CsvShardedSource", "FileShardedSource", "HuggingFaceShardedSource", "JsonShardedSource",
    "ParquetShardedSource", "ShardCount", "ShardInfo", "ShardedDataSource", "ShardedSource", "TextShardedSource",
    "TransformedShardedSource",
]
