"""Writing datasets: :class:`MDSWriter` (shards into a local directory or any fsspec URL, uploaded
as they are finished) and :func:`merge_index` (one index over sub-datasets written in parallel).

The bytes of a shard and of ``index.json`` are the format's (:mod:`shardstream.format.shardwriter`,
:mod:`shardstream.format.index`); this package adds where they go: staging, uploads, merging.
"""

from .mdswriter import MDSWriter
from .merge import merge_index

__all__ = ["MDSWriter", "merge_index"]
