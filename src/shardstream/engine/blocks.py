"""Column batches cut from blocks of consecutive samples, each block decoded at once.

A batch decoder call costs a fixed amount of work (a few dozen numpy calls) besides its work per
sample. When batches are read from a run of consecutive samples of one MDS shard (a scan in index
order, or the steps of an unshuffled pass), :class:`RunBlocks` decodes several batches of the run
at once (about :data:`BLOCK_BYTES` of samples, whole batches) and hands out slices of the block:
views of its arrays, slices of its lists. Where decoding a block fails, its batches are decoded one
by one, so an error still comes with the batch that holds its sample.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..errors import ShardstreamError
from ..format.batch import slice_rows
from ..format.reader import ShardReader

#: about how many bytes of samples a block holds
BLOCK_BYTES = 2 << 20


class RunBlocks:
    """Batches of ``step`` samples from runs of consecutive samples (see the module docstring).
    ``reader_of(shard)`` opens a shard; ``columns``: decode only these."""

    def __init__(self, reader_of: Callable[[int], Any], columns, step: int) -> None:
        self.reader_of = reader_of
        self.columns = columns
        self.step = step
        self.held: Optional[tuple[int, int, int, dict]] = None  # (shard, lo, hi, batch) of the block held
        self.failed: Optional[tuple[int, int]] = None  # (shard, end): batch by batch until there

    def rows(self, shard: int, lo: int, hi: int, run_end: Optional[int] = None) -> dict[str, Any]:
        """Samples ``lo..hi-1`` of ``shard`` as a column batch, read in a run of consecutive samples that
        goes on to ``run_end`` (the end of the shard if None)."""
        held = self.held
        if held is not None and held[0] == shard and held[1] <= lo and hi <= held[2]:
            return slice_rows(held[3], lo - held[1], hi - held[1])
        reader = self.reader_of(shard)
        end = self._block_end(reader, lo, hi, run_end)
        failed = self.failed
        if end > hi and not (failed is not None and failed[0] == shard and lo < failed[1]):
            try:
                block = reader.batch_range(lo, end, self.columns)
            except ShardstreamError:
                self.failed = (shard, end)
            else:
                self.held = (shard, lo, end, block)
                return slice_rows(block, 0, hi - lo)
        return reader.batch_range(lo, hi, self.columns)

    def _block_end(self, reader, lo: int, hi: int, run_end: Optional[int]) -> int:
        """Where a block that starts with samples ``lo..hi-1`` ends: at the end of the run if the rest of it
        fits in :data:`BLOCK_BYTES`, else after as many further whole batches as fit (``hi`` for a reader
        that is not an MDS shard's)."""
        if not isinstance(reader, ShardReader):
            return hi
        offsets = reader.offsets
        fit = int(np.searchsorted(offsets, offsets[lo] + BLOCK_BYTES, "right")) - 1
        stop = reader.samples if run_end is None else min(run_end, reader.samples)
        if fit >= stop:
            return max(hi, stop)
        return hi + max(0, (fit - hi) // self.step) * self.step
