"""Column batches of a dataset by sample index: any indices (:func:`batch_at`) or a scan in index
order (:func:`index_scan`), decoded by the shards' readers through the shard table (:mod:`.table`)
into column batches (:mod:`shardstream.format.batch`). ``StreamingDataset.get_batch`` and
``StreamingDataset.batches`` are built on them. A scan cuts its batches from blocks of several
batches decoded at once (:mod:`.blocks`).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, SampleIndexError
from ..format.batch import concat_batches
from .blocks import RunBlocks
from .options import check_batch_size


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
    blocks = RunBlocks(table.random_reader, columns, bs)
    for lo in range(start, n, bs):
        hi = min(lo + bs, n)
        if hi - lo < bs and drop_last:
            return
        yield _range_batch(table, lo, hi, blocks)


def _range_batch(table, lo: int, hi: int, blocks: RunBlocks) -> dict[str, Any]:
    parts = []
    shard = table.shard_of(lo)
    while lo < hi:
        base = table.starts[shard]
        stop = min(hi, table.ends[shard])
        parts.append(blocks.rows(shard, lo - base, stop - base))
        lo = stop
        shard += 1
    return concat_batches(parts)
