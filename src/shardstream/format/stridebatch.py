"""Column batches of samples drawn from shards whose samples all have one size.

When every column of an MDS shard has a fixed size and its samples lie one after another,
the shard's samples are the rows of a ``(samples, stride)`` byte table
(:meth:`~shardstream.format.reader.ShardReader.stride_rows`). A step's samples, from any
shards in any order, are then gathered with one ``numpy.take`` per shard (a C loop of row
copies) into one scratch table grouped by shard, and each column is copied from there into
its array in step order with one more gather: no Python loop per sample, and two copies of
each byte whatever the number of shards.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from .gather import void
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

