"""How many shards a reader needs in its cache at once, and a warning when ``cache_limit``
cannot hold them.

A shuffled epoch reads from many shards at a time: py1e and py1b interleave the shards of a
``shuffle_block_size`` window, every canonical node's region is read side by side, and the
prefetcher holds the shards of the next ``predownload`` samples too. A shard evicted between
two of its samples is downloaded again, so with a limit below this *working set* one epoch can
download the dataset many times over. It is measured on the reader's own upcoming order (the
plan is cheap to evaluate), so it holds for every algorithm, world and mixture alike.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .caller import warn_caller

_SAMPLE = 1 << 18  # upcoming positions looked at (the first half are measured exactly)


def working_set(shards: np.ndarray, ahead: int, sizes: np.ndarray, whole: bool) -> tuple[int, int]:
    """(shards, bytes): the most a reader of ``shards`` (the shard of each sample, in read order) needs
    at once: at each position, every shard read both before or at it and after it, plus those first read
    within ``ahead`` positions. ``sizes`` gives each shard's bytes. Unless ``whole`` (``shards`` is the
    entire pass), only the first half is measured: reuse further on is beyond what was looked at."""
    if shards.size == 0:
        return 0, 0
    n = len(shards)
    ids, first = np.unique(shards, return_index=True)
    last = n - 1 - np.unique(shards[::-1], return_index=True)[1]
    start = np.maximum(first - max(ahead, 0), 0)
    horizon = n if whole else max(n // 2, 1)
    weights = sizes[ids].astype(np.int64)
    counts = _most_covered(start, last, np.ones_like(weights), horizon)
    return counts, _most_covered(start, last, weights, horizon)


def _most_covered(start: np.ndarray, end: np.ndarray, weight: np.ndarray, horizon: int) -> int:
    """The largest total ``weight`` of the intervals ``[start, end]`` covering one point below ``horizon``."""
    points = np.concatenate([start, end + 1])
    deltas = np.concatenate([weight, -weight])
    order = np.lexsort((deltas, points))  # at one point, ends (negative) before starts
    points, level = points[order], np.cumsum(deltas[order])
    inside = points < horizon
    return int(level[inside].max()) if inside.any() else 0


def warn_if_too_small(limit: Optional[int], shards: np.ndarray, ahead: int, sizes: np.ndarray, whole: bool,
                      fixed: int = 0, shuffled: bool = True) -> bool:
    """Warn (returns True) when ``limit`` bytes cannot hold the working set of ``shards`` besides the
    ``fixed`` bytes the cache always holds (its ``index.json``): always when it cannot hold the shards
    the reader is between samples of, and for a shuffled order also when it cannot hold those of the
    samples downloaded ahead (a sequential reader then only loses a little prefetch)."""
    if limit is None:
        return False
    core = working_set(shards, 0, sizes, whole)[1] + fixed
    count, need = working_set(shards, ahead, sizes, whole)
    need += fixed
    if need <= limit or (limit >= core and not shuffled):
        return False
    effect = ("shards are evicted between two of their samples and downloaded again, many times per epoch"
              if limit < core else "downloads ahead evict shards still in use, and some are downloaded again")
    warn_caller(
        f"cache_limit={limit} bytes is smaller than this reader's working set: its order reads from up to "
        f"{count} shards at once (those it is between samples of, plus those of the next {ahead} samples it "
        f"downloads ahead), {need} bytes with the index, so {effect}; raise cache_limit to at least {need} bytes "
        "(more when several processes on this machine share the cache), or read from fewer shards at once (a "
        "smaller shuffle_block_size or num_canonical_nodes)")
    return True


def upcoming_shards(id_chunks, locate) -> tuple[np.ndarray, bool]:
    """The shard of each of the next (at most ``_SAMPLE``) samples a reader reads, and whether that is
    all of its pass. ``id_chunks`` yields the reader's sample ids; ``locate`` maps ids."""
    parts, n = [], 0
    for ids in id_chunks:
        parts.append(locate(ids)[1])
        n += parts[-1].size
        if n >= _SAMPLE:
            return np.concatenate(parts)[:_SAMPLE], False
    return (np.concatenate(parts) if parts else np.empty(0, np.int64)), True
