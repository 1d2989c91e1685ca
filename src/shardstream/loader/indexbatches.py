"""Column batches of a dataset by sample index: any indices (``get_batch``) or a scan (``batches``).

The index side of :class:`~shardstream.StreamingDataset` (it supplies the shard boundaries,
the readers and the order): decoded with the vectorised batch decoder
(:mod:`shardstream.format.batch`).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, SampleIndexError
from ..format.batch import concat_batches, decode_batch, decode_range
from .options import check_batch_size


class IndexBatches:
    """Column batches of :class:`~shardstream.StreamingDataset` by index."""

    def get_batch(self, indices, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """Decode the samples at global ``indices`` into column arrays (see :mod:`shardstream.format.batch`)."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise InvalidArgumentError(
                f"get_batch takes a 1-D sequence of int sample indices, got {type(indices).__name__} of "
                f"{idx.dtype} with shape {idx.shape}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + self.num_samples, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_samples):
            raise SampleIndexError(f"indices must be in [-{self.num_samples}, {self.num_samples})")
        shards = np.searchsorted(self._ends_array, idx, side="right")
        starts = self._starts_array
        if idx.size == 0:
            return decode_batch(self.reader(0), idx, columns) if self.shards else {}
        # Decode runs of indices that fall in the same shard, in the requested order.
        cuts = np.flatnonzero(np.diff(shards)) + 1
        parts = []
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(idx)]):
            s = int(shards[lo])
            parts.append(decode_batch(self.reader(s), idx[lo:hi] - starts[s], columns))
        return concat_batches(parts)

    def batches(self, batch_size: Optional[int] = None, columns: Optional[Sequence[str]] = None,
                drop_last: bool = False, start: int = 0) -> Iterator[dict[str, Any]]:
        """Batches of ``batch_size`` samples (default: the dataset's) as column arrays.

        With ``shuffle=False``: a scan of the whole dataset in index order, from sample ``start``
        (the last batch is short unless ``drop_last``). With ``shuffle=True``: the next epoch in
        plan order, this process's share, like :meth:`iterate_batches` (every batch whole; a
        ``batch_size`` must equal the dataset's, and ``start`` is refused: resume a pass with
        :meth:`load_state_dict`).
        """
        bs = self.batch_size if batch_size is None else batch_size
        if bs is None:
            raise InvalidArgumentError("batches() needs a batch_size: pass batches(batch_size=N) or build the "
                                       "dataset with StreamingDataset(..., batch_size=N)")
        check_batch_size(bs)
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
            raise InvalidArgumentError(f"start={start!r} must be an int >= 0 (a sample index)")
        if self.shuffle:
            return self._shuffled_batches(bs, columns, start)
        return self._scan(bs, columns, drop_last, int(start))

    def _shuffled_batches(self, bs: int, columns, start: int) -> Iterator[dict[str, Any]]:
        if self.batch_size is not None and bs != self.batch_size:
            raise InvalidArgumentError(
                f"batches({bs}) on a shuffled dataset reads the epoch plan, whose steps hold the dataset's "
                f"batch_size={self.batch_size} samples per device; leave batch_size out, or build the dataset "
                "with the batch_size you want")
        if start:
            raise InvalidArgumentError(
                f"start={start}: a shuffled dataset's batches() reads the next epoch in plan order; resume "
                "inside it with load_state_dict(state), or build the dataset with shuffle=False to scan from a sample")
        if self.batch_size is None:
            self._adopt_batch_size(bs)
        return self.iterate_batches(columns=columns)

    def _scan(self, bs: int, columns, drop_last: bool, start: int) -> Iterator[dict[str, Any]]:
        n = self.num_samples
        for lo in range(start, n, bs):
            hi = min(lo + bs, n)
            if hi - lo < bs and drop_last:
                return
            yield self._range_batch(lo, hi, columns)

    def _range_batch(self, lo: int, hi: int, columns) -> dict[str, Any]:
        parts = []
        shard = bisect_right(self._ends, lo)
        while lo < hi:
            base = self._starts[shard]
            stop = min(hi, self._ends[shard])
            parts.append(decode_range(self.reader(shard), lo - base, stop - base, columns))
            lo = stop
            shard += 1
        return concat_batches(parts)
