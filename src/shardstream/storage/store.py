"""Stores: where one stream's shards are made readable. The loader reads every stream through
this one interface, :class:`Store`, whatever holds the bytes:

- :class:`~shardstream.storage.cache.ShardCache` for a stream with a remote: shards are
  downloaded into a cache directory shared by every process on the machine, pinned while in
  use, and evicted under a share of ``cache_limit``;
- :class:`~shardstream.storage.local.LocalStore` for a stream read in place: its directory
  holds the only copy, so nothing is locked, downloaded or evicted.

:func:`open_stores` makes one store per opened stream (see :mod:`.streams`), with each cache's
limit decided first (see :mod:`.budget`).
"""

from __future__ import annotations

import os
from typing import Optional, Protocol, Sequence

from ..format.source import ShardFormat, ShardRows
from .budget import check_index_limit, check_shard_limit, minimum_limit, split_limit
from .cache import ShardCache
from .local import LocalStore
from .streams import OpenedStream


class Store(Protocol):
    """The shards of one stream, numbered ``0..len(shards)-1``, and how they are made readable."""

    shards: list  #: the stream's shards, in index order
    dirname: str  #: the directory they are read from
    format: ShardFormat  #: the format that lists, stores and opens them
    evictable: bool  #: whether shards may be deleted (they came from a remote)

    def reader(self, i: int) -> ShardRows:
        """The open reader of shard ``i``, which must be pinned (a local store's always are)."""

    def hold(self, i: int, keep: int) -> ShardRows:
        """Pin shard ``i`` for random access and return its reader, keeping at most ``keep`` such pins."""

    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        """Make shard ``i`` readable and keep it so until :meth:`unpin`. ``must=False`` gives up (False)
        when the limit leaves no room; ``blocking=False`` when another process is downloading it."""

    def add_ref(self, i: int) -> bool:
        """One more pin of a shard this process already holds within the limit, with no I/O; False if none."""

    def unpin(self, i: int) -> None:
        """Drop one pin of shard ``i``."""

    def over(self, i: int) -> bool:
        """Whether this process's pin on shard ``i`` went beyond the limit (it is evicted at unpin)."""

    def release_held(self) -> None:
        """Drop the pins :meth:`hold` keeps."""

    def usage(self) -> int:
        """Bytes counted against the limit now (shards, downloads in progress, the index)."""

    def evict(self, i: int) -> bool:
        """Delete shard ``i`` unless a process is using it; True if it is gone. Refused with
        :class:`~shardstream.errors.InvalidArgumentError` where the store holds the only copy."""

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used shard nobody uses; its index, or None."""

    def footprint(self, i: int) -> int:
        """Bytes shard ``i`` takes in the store at its peak."""

    def fixed_bytes(self) -> int:
        """Bytes the store keeps besides shards that count against ``cache_limit`` (a cache's index file)."""


def open_stores(opened: Sequence[OpenedStream], cache_limit: Optional[int]) -> list[Store]:
    """One store per stream: a :class:`ShardCache` for a stream with a remote, a :class:`LocalStore`
    for one without. ``cache_limit`` (bytes) is split among the streams with a remote by their
    size (:func:`~shardstream.storage.budget.split_limit`). A limit not above every stream's index
    files, below four times the largest shard of any stream, or whose share leaves a cached stream too
    little, is refused with :class:`~shardstream.errors.CacheLimitError` before any store is made."""
    if cache_limit is not None:  # as mosaicml-streaming: every stream counts, with a remote or not
        check_index_limit(cache_limit, sum(_index_bytes(o) for o in opened))
        check_shard_limit(cache_limit, max((o.format.footprint(s, fetched=True) for o in opened
                                            for s in o.shards), default=0))
    sizes: list[Optional[int]] = []
    minimums: list[int] = []
    for o in opened:
        if o.remote is None or cache_limit is None:
            sizes.append(None)
            minimums.append(0)
            continue
        peak = [o.format.footprint(s, fetched=True) for s in o.shards]
        sizes.append(sum(peak))
        minimums.append(minimum_limit([o.format.resident_file(s).bytes for s in o.shards], peak))
    shares = split_limit(cache_limit, sizes, minimums)
    return [_store(o, share) for o, share in zip(opened, shares)]


def _index_bytes(o: OpenedStream) -> int:
    """The size of the stream's index file in its directory (0 for a format without one)."""
    if not o.format.index_name:
        return 0
    try:
        return os.path.getsize(os.path.join(o.dirname, o.format.index_name))
    except OSError:
        return 0


def _store(o: OpenedStream, limit: Optional[int]) -> Store:
    opts = o.options
    if o.remote is None:
        return LocalStore(o.dirname, o.shards, opts.validate_hash, format=o.format)
    return ShardCache(o.dirname, o.shards, o.fetcher, limit, keep_zip=opts.keep_zip,
                      validate_hash=opts.validate_hash, wait=opts.lock_wait, format=o.format)
