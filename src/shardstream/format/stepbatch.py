"""Column batches of a step's samples drawn from several MDS shards, in any order.

- :func:`decode_strided`: when every column of the shards has a fixed size and their samples lie
  one after another, a shard's samples are the rows of a ``(samples, stride)`` byte table
  (:meth:`~shardstream.format.reader.ShardReader.stride_rows`). The step's rows are gathered with
  one ``numpy.take`` per shard (a C loop of row copies) into a scratch table grouped by shard, and
  each column is copied from there into its array in step order with one more gather: no Python
  loop per sample, and two copies of each byte whatever the number of shards.
- :func:`decode_joined`: otherwise the step's samples are joined, in step order, into one buffer
  (``bytearray.join`` over views of them, a C loop whatever the shards) and decoded at once, as
  the samples of one shard would be.

Both give what decoding each shard's samples and putting the rows in step order gives; where the
joined samples do not decode, None sends the step back to that shard by shard decode, whose errors
name the shard.
"""

from __future__ import annotations

from operator import getitem
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, ShardstreamError
from .batch import decode_spans
from .gather import Windows, span_offsets, void
from .reader import ShardReader


def stride_table(reader) -> Optional[np.ndarray]:
    """``reader``'s stride table, or None when it has none (see the module docstring)."""
    return reader.stride_rows() if isinstance(reader, ShardReader) else None


def decode_strided(reader_of: Callable[[int], Any], shards: np.ndarray, local: np.ndarray,
                   columns: Optional[Sequence[str]]) -> Optional[dict[str, Any]]:
    """Samples ``local[i]`` of shards ``shards[i]`` as one column batch in step order, as
    :func:`~shardstream.format.batch.decode_batch` would give them; None when some shard has no
    stride table, the shards' tables differ in layout, or a column would not become an array."""
    order = np.argsort(shards, kind="stable")
    grouped = shards[order]
    cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    firsts = [0, *cuts.tolist()]
    readers = [reader_of(int(grouped[lo])) for lo in firsts]
    tables = [stride_table(r) for r in readers]
    info = readers[0].info
    if any(t is None for t in tables) or any(r.info.column_sizes != info.column_sizes for r in readers):
        return None
    layout = _array_columns(info, columns)
    if layout is None:
        return None
    at = local[order]
    _check_rows(readers, at, firsts)
    n = len(shards)
    rows = np.empty((n, tables[0].shape[1]), np.uint8)
    for table, lo, hi in zip(tables, firsts, [*firsts[1:], n]):
        np.take(table, at[lo:hi], axis=0, out=rows[lo:hi], mode="clip")  # rows checked above
    step_rows = np.empty(n, np.int64)
    step_rows[order] = np.arange(n)
    out: dict[str, Any] = {}
    for name, offset, size, dtype, shape in layout:
        view = np.ndarray((n,), void(size), buffer=rows, offset=offset, strides=(rows.shape[1],))
        out[name] = view[step_rows].view(np.uint8).reshape(n, size).view(dtype).reshape((n,) + shape)
    return out


def _array_columns(info, columns) -> Optional[list[tuple]]:
    """``(name, offset in the row, size, dtype, shape)`` of each column wanted, or None when one of
    them is not a fixed-shape numeric column (or not a column: the decoder then names it)."""
    if columns is not None and not set(columns) <= set(info.column_names):
        return None
    out = []
    offset = 0
    for name, enc, size in zip(info.column_names, info.encodings, info.column_sizes):
        if columns is None or name in columns:
            if enc.np_dtype is None or enc.shape is None:
                return None
            out.append((name, offset, size, enc.np_dtype, tuple(enc.shape)))
        offset += size
    return out


def _check_rows(readers: list, at: np.ndarray, firsts: list[int]) -> None:
    """Refuse a row that is not a sample of its shard (``at`` grouped by shard from ``firsts``)."""
    lows = np.minimum.reduceat(at, firsts)
    highs = np.maximum.reduceat(at, firsts)
    counts = np.array([r.samples for r in readers], np.int64)
    if (lows < 0).any() or (highs >= counts).any():
        bad = int(np.flatnonzero((lows < 0) | (highs >= counts))[0])
        raise InvalidArgumentError(
            f"sample indices must be in [0, {int(counts[bad])}) for shard {readers[bad].name!r}")


def decode_joined(reader_of: Callable[[int], Any], shards: np.ndarray, local: np.ndarray,
                  columns: Optional[Sequence[str]]) -> Optional[dict[str, Any]]:
    """Samples ``local[i]`` of shards ``shards[i]`` as one column batch in step order, decoded at once
    from their bytes joined in step order (see the module docstring); None when a shard is not an MDS
    shard's reader, the shards' columns differ, or the joined samples do not decode."""
    uniq, which = np.unique(shards, return_inverse=True)
    readers = [reader_of(int(s)) for s in uniq.tolist()]
    if not all(isinstance(r, ShardReader) for r in readers):
        return None
    info = readers[0].info
    if not all(r.info.column_names == info.column_names and r.info.column_encodings == info.column_encodings
               and r.info.column_sizes == info.column_sizes for r in readers):
        return None
    begins = np.empty(len(local), np.int64)
    ends = np.empty(len(local), np.int64)
    for k, reader in enumerate(readers):
        mine = np.flatnonzero(which == k)
        rows = local[mine]
        _check_rows([reader], rows, [0])
        begins[mine] = reader.offsets[rows]
        ends[mine] = reader.offsets[rows + 1]
    views = [r.mv for r in readers]
    data = bytearray().join(map(getitem, map(views.__getitem__, which.tolist()),
                                map(slice, begins.tolist(), ends.tolist())))
    offsets = span_offsets(ends - begins)
    try:
        return decode_spans(_Joined(readers[0], data), offsets[:-1], offsets[1:], columns)
    except ShardstreamError:
        return None


class _Joined:
    """Samples of shards like ``reader``'s joined in one buffer, read as :func:`~.batch.decode_spans` reads a
    shard."""

    def __init__(self, reader: ShardReader, data: bytearray) -> None:
        self.info = reader.info
        self.var_columns = reader.var_columns
        self.name = reader.name
        self.windows = Windows(data)
