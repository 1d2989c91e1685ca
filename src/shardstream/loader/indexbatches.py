"""Column batches of a dataset by sample index: any indices (:func:`batch_at`) or a scan in index
order (:func:`index_scan`), decoded by the shards' readers through the shard table (:mod:`.table`)
into column batches (:mod:`shardstream.format.batch`). ``StreamingDataset.get_batch`` and
``StreamingDataset.batches`` are built on them. A scan decodes blocks of several batches of an MDS
shard at once and hands out their slices.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, SampleIndexError, ShardstreamError
from ..format.batch import concat_batches, slice_rows
from ..format.reader import ShardReader
from .options import check_batch_size

#: about how many bytes of samples a scan decodes at once (see :class:`_Blocks`)
BLOCK_BYTES = 2 << 20


def batch_at(table, indices, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """The samples at global ``indices`` (negative count from the end) as one column batch."""
    n = table.num_samples
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise InvalidArgumentError(
            f"get_batch takes a 1-D sequence of int sample indices, got {type(indices).__name__} of "
            f"{idx.dtype} with shape {idx.shape}")
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise SampleIndexError(f"indices must be in [-{n}, {n})")
    shards = np.searchsorted(table.ends_array, idx, side="right")
    starts = table.starts_array
    if idx.size == 0:
        return table.random_reader(0).batch_rows(idx, columns) if table.shards else {}
    # Decode runs of indices that fall in the same shard, in the requested order.
    cuts = np.flatnonzero(np.diff(shards)) + 1
    parts = []
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(idx)]):
        s = int(shards[lo])
        parts.append(table.random_reader(s).batch_rows(idx[lo:hi] - starts[s], columns))
    return concat_batches(parts)


def scan_size(batch_size: Optional[int], given: Optional[int], start, shuffle: bool) -> int:
    """The batch size of a ``batches(given, start=start)`` call on a dataset built with ``batch_size``;
    refuses what it cannot do (a shuffled dataset's batches are the next epoch's steps)."""
    bs = batch_size if given is None else given
    if bs is None:
        raise InvalidArgumentError("batches() needs a batch_size: pass batches(batch_size=N) or build the "
                                   "dataset with StreamingDataset(..., batch_size=N)")
    check_batch_size(bs)
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
        raise InvalidArgumentError(f"start={start!r} must be an int >= 0 (a sample index)")
    if not shuffle:
        return bs
    if batch_size is not None and bs != batch_size:
        raise InvalidArgumentError(
            f"batches({bs}) on a shuffled dataset reads the epoch plan, whose steps hold the dataset's "
            f"batch_size={batch_size} samples per device; leave batch_size out, or build the dataset "
            "with the batch_size you want")
    if start:
        raise InvalidArgumentError(
            f"start={start}: a shuffled dataset's batches() reads the next epoch in plan order; resume "
            "inside it with load_state_dict(state), or build the dataset with shuffle=False to scan from a sample")
    return bs


def index_scan(table, bs: int, columns, drop_last: bool, start: int) -> Iterator[dict[str, Any]]:
    """Batches of ``bs`` samples in index order from sample ``start`` (the last one short unless ``drop_last``)."""
    n = table.num_samples
    blocks = _Blocks(table, columns, bs)
    for lo in range(start, n, bs):
        hi = min(lo + bs, n)
        if hi - lo < bs and drop_last:
            return
        yield _range_batch(table, lo, hi, blocks)


def _range_batch(table, lo: int, hi: int, blocks: "_Blocks") -> dict[str, Any]:
    parts = []
    shard = table.shard_of(lo)
    while lo < hi:
        base = table.starts[shard]
        stop = min(hi, table.ends[shard])
        parts.append(blocks.rows(shard, lo - base, stop - base))
        lo = stop
        shard += 1
    return concat_batches(parts)


class _Blocks:
    """A scan's batches cut from blocks of consecutive samples of an MDS shard, each decoded at once (about
    :data:`BLOCK_BYTES` of samples, whole batches), so that the work of a decode call is shared by
    several batches. A batch is a slice of its block: views of the block's arrays. Where decoding a block
    fails, its batches are decoded one by one, so an error comes with the batch that holds its sample."""

    def __init__(self, table, columns, bs: int) -> None:
        self.table = table
        self.columns = columns
        self.bs = bs
        self.held: Optional[tuple[int, int, int, dict]] = None  # (shard, lo, hi, batch) of the block held
        self.failed: Optional[tuple[int, int]] = None  # (shard, end): batch by batch until there

    def rows(self, shard: int, lo: int, hi: int) -> dict[str, Any]:
        """Samples ``lo..hi-1`` of ``shard`` as a column batch."""
        held = self.held
        if held is not None and held[0] == shard and held[1] <= lo and hi <= held[2]:
            return slice_rows(held[3], lo - held[1], hi - held[1])
        reader = self.table.random_reader(shard)
        end = self._block_end(reader, lo, hi)
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

    def _block_end(self, reader, lo: int, hi: int) -> int:
        """Where a block that starts with samples ``lo..hi-1`` ends: after as many further whole batches as
        fit in :data:`BLOCK_BYTES` (``hi`` for a reader that is not an MDS shard's)."""
        if not isinstance(reader, ShardReader):
            return hi
        offsets = reader.offsets
        fit = int(np.searchsorted(offsets, offsets[lo] + BLOCK_BYTES, "right")) - 1
        more = max(0, (fit - hi) // self.bs)
        return min(reader.samples, hi + more * self.bs)
