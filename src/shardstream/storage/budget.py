"""How much cache a dataset needs, and how ``cache_limit`` is shared among the streams of a mixture.

Plain functions of byte counts: they decide every cache's limit before any cache exists.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..errors import CacheLimitError


def minimum_limit(resident: Sequence[int], peak: Sequence[int]) -> int:
    """The smallest limit that streams a dataset without fetching a shard twice in a sequential pass:
    the largest shard in use (``resident``: bytes each shard is read from) plus the largest one arriving
    (``peak``: bytes each shard takes while it is being made readable, its downloaded files included)."""
    if not resident:
        return 0
    return max(resident) + max(peak)


def check_index_limit(limit: int, index_bytes: int) -> None:
    """Refuse a ``limit`` not above the cached index files' ``index_bytes``, as mosaicml-streaming does
    (its words open the message)."""
    if limit <= index_bytes:
        raise CacheLimitError(
            f"Minimum cache usage ({index_bytes} bytes) is larger than the cache limit ({limit} bytes): the "
            f"cached index files alone take that much. Please raise `cache_limit`, as high as the disk allows")


SHARD_FACTOR = 4  # the limit holds at least this many of the largest shard, as mosaicml-streaming requires


def check_shard_limit(limit: int, largest: int) -> None:
    """Refuse a ``limit`` below :data:`SHARD_FACTOR` times the ``largest`` shard's peak footprint (its raw
    and zip files together), as mosaicml-streaming does (its words open the message)."""
    need = SHARD_FACTOR * largest
    if limit < need:
        raise CacheLimitError(
            f"Cache limit ({limit} bytes) is too low. Increase the `cache_limit` to at-least four times the "
            f"largest shard size ({largest} bytes) which includes raw (decompressed) and zip (compressed) file "
            f"size: at least {need} bytes, so that a shard in use, the next ones arriving and their compressed "
            "copies fit. Recommendation is to provide a `cache_limit` as high as possible to avoid thrashing")


def check_limit(limit: int, need: int) -> None:
    """Refuse a single cache's ``limit`` below ``need`` (its :func:`minimum_limit`)."""
    if limit < need:
        raise CacheLimitError(
            f"cache_limit={limit} bytes is too small: one shard in use plus the next one being downloaded "
            f"and decompressed need up to {need} bytes; raise cache_limit to at least {need} bytes (several "
            "times that for shuffled epochs, which read from several shards at a time)"
        )


def split_limit(limit: Optional[int], sizes: Sequence[Optional[int]],
                minimums: Sequence[int]) -> list[Optional[int]]:
    """Each stream's share of ``limit`` (bytes).

    ``sizes[k]`` is stream ``k``'s bytes in a cache (the sum of its shards' peak footprints), or
    None for a stream read in place, which takes no share (None); ``minimums[k]`` is its
    :func:`minimum_limit`. With one cached stream it gets the whole limit (checked by its cache);
    with several, the limit is split by size, and a limit whose share is too small for any of
    them is refused with the smallest limit that is enough for all.
    """
    cached = [k for k, size in enumerate(sizes) if size is not None]
    shares: list[Optional[int]] = [None] * len(sizes)
    if limit is None or not cached:
        return shares
    if len(cached) == 1:
        shares[cached[0]] = limit
        return shares
    total = max(sum(sizes[k] for k in cached), 1)
    # the smallest limit whose share, for every stream, covers that stream's minimum
    need = max(-(-minimums[k] * total // max(sizes[k], 1)) for k in cached)
    if limit < need:
        raise CacheLimitError(
            f"cache_limit={limit} bytes is too small for {len(cached)} streams with a remote: it is split among "
            f"them by size, and each needs room for one shard in use plus the next one arriving; raise "
            f"cache_limit to at least {need} bytes (several times that for shuffled epochs)")
    for k in cached:
        shares[k] = max(1, limit * sizes[k] // total)
    return shares
