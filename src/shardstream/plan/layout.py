"""Where every sample sits in an epoch before the in-region shuffle: shards, regions, pieces.

The *virtual sequence* of an epoch is the dataset's shards laid end to end in the
run's shard order. It is cut into ``C`` equal *regions* (one per canonical node,
sizes differing by at most one), and where a shard straddles a region boundary
it is split, so the unit of layout is a *piece*: the part of one shard inside one
region. State is O(shards + regions).

- The shard order is fixed for a whole run (it depends on the seed only), so each
  canonical node owns the same shards in every epoch and a node-local cache stays
  warm across epochs.
- Each epoch, the pieces of every region are put in a new order (seed, epoch).
- With ``shuffle=False`` both orders are the natural one and the virtual sequence
  is the dataset itself.
"""

from __future__ import annotations

import numpy as np

from .keyed import derive, hash_index, random_order

PURPOSE_SHARDS = 1
PURPOSE_PIECES = 2


class RunLayout:
    """The run-fixed part: shard order, region bounds and pieces."""

    def __init__(self, sizes, num_regions: int, shuffle: bool, seed: int) -> None:
        sizes = np.asarray(sizes, np.int64)
        self.sizes = sizes
        self.num_samples = int(sizes.sum())
        n = self.num_samples
        # Never more regions than samples, so that no region is empty.
        self.num_regions = min(int(num_regions), n)
        c = self.num_regions
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else sizes
        self.shard_order = random_order(sizes.size, derive(seed, PURPOSE_SHARDS)) if shuffle else np.arange(sizes.size)
        ends = np.cumsum(sizes[self.shard_order])
        self.region_bounds = (np.arange(c + 1, dtype=np.int64) * n) // max(c, 1)
        cuts = np.unique(np.concatenate([[0], ends, self.region_bounds]))
        lo, hi = cuts[:-1], cuts[1:]
        at = np.searchsorted(ends, lo, side="right")  # position in the shard order
        shard = self.shard_order[at]
        self.piece_len = hi - lo
        self.piece_gid = self.shard_starts[shard] + lo - (ends[at] - sizes[shard])  # global id of first sample
        self.piece_region = np.searchsorted(self.region_bounds, lo, side="right") - 1

    @property
    def num_pieces(self) -> int:
        return int(self.piece_len.size)

    def region_lengths(self) -> np.ndarray:
        return np.diff(self.region_bounds)


class EpochLayout:
    """The pieces of one epoch in their order: virtual index -> global sample id."""

    def __init__(self, run: RunLayout, epoch: int, shuffle: bool, seed: int) -> None:
        self.run = run
        if shuffle and run.num_pieces:
            rank = hash_index(derive(seed, epoch, PURPOSE_PIECES), np.arange(run.num_pieces))
            order = np.lexsort((rank, run.piece_region))
        else:
            order = np.arange(run.num_pieces)
        self.piece_gid = run.piece_gid[order]
        self.piece_region = run.piece_region[order]
        self.piece_start = np.concatenate([[0], np.cumsum(run.piece_len[order])]).astype(np.int64)
        # first piece of each region (regions are contiguous in piece order)
        self.region_first_piece = np.searchsorted(self.piece_start, run.region_bounds, side="left")

    def piece_of(self, v: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.piece_start, v, side="right") - 1

    def sample_ids(self, v: np.ndarray) -> np.ndarray:
        """Global sample ids (the dataset's natural numbering) of virtual indices ``v``."""
        j = self.piece_of(v)
        return self.piece_gid[j] + (v - self.piece_start[j])

    def nbytes(self) -> int:
        arrays = (self.piece_gid, self.piece_region, self.piece_start, self.region_first_piece,
                  self.run.sizes, self.run.shard_starts, self.run.shard_order, self.run.region_bounds,
                  self.run.piece_len, self.run.piece_gid, self.run.piece_region)
        return int(sum(a.nbytes for a in arrays))
