"""Writing Arrow record batches into MDS shards, a whole batch at a time.

:class:`ArrowMDSWriter` is an :class:`~shardstream.MDSWriter` that takes ``pyarrow`` record batches
(or tables): each column is encoded at once from Arrow's buffers (:mod:`.columns`), the rows' bytes
are laid out back to back with their headers in one join, and the shard writer cuts shards exactly
where writing the rows one by one would. The shards are byte for byte those of
``MDSWriter.write(row)`` over the same rows, at a fraction of the cost: no Python object per value
for numbers, strings, binary and lists of numbers.

Example::

    import pyarrow.parquet as pq
    from shardstream.convert import ArrowMDSWriter, arrow_columns

    pf = pq.ParquetFile("train.parquet")
    with ArrowMDSWriter("out/train", arrow_columns(pf.schema_arrow), compression="zstd") as out:
        for batch in pf.iter_batches():
            out.write_batch(batch, where="train.parquet")
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from ..errors import EncodeError
from ..format.arrowrows import pyarrow
from ..format.encodings import get_encoding
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT
from ..writing.mdswriter import MDSWriter
from .columns import encode_column


class ArrowMDSWriter:
    """Write Arrow record batches to MDS shards at ``out`` (a local directory or any fsspec URL).

    ``columns`` maps each column to its MDS encoding (:func:`~shardstream.convert.arrow_columns`
    infers them from a schema); a batch's other columns are ignored. The keywords are
    :class:`~shardstream.MDSWriter`'s. Use it as a context manager: the index is written on a clean
    exit only.
    """

    def __init__(self, out: Union[str, tuple[str, str]], columns: dict[str, str], *,
                 compression: Optional[str] = None, hashes: Optional[Sequence[str]] = DEFAULT_HASHES,
                 size_limit: Optional[Union[int, str]] = DEFAULT_SIZE_LIMIT,
                 storage_options: Optional[dict[str, Any]] = None, exist_ok: bool = False,
                 max_workers: Optional[int] = None) -> None:
        self.writer = MDSWriter(columns=columns, out=out, compression=compression, hashes=hashes,
                                size_limit=size_limit, storage_options=storage_options, exist_ok=exist_ok,
                                max_workers=max_workers)
        self.columns = {name: columns[name] for name in self.writer.column_names}  # the shards' order
        self.rows = 0

    @property
    def shards(self) -> list:
        """The :class:`~shardstream.format.index.ShardInfo` of each shard completed so far."""
        return [s for s in self.writer.shards if s is not None]

    def write_batch(self, batch, where: str = "", first_row: Optional[int] = None) -> None:
        """Append the rows of ``batch`` (a ``pyarrow.RecordBatch`` or ``Table``). A value that does not fit
        its column's encoding raises :class:`~shardstream.errors.EncodeError` naming the row (``first_row`` +
        its place in the batch; by default the rows written so far), the column and ``where``."""
        pa = pyarrow()
        if isinstance(batch, pa.Table):
            start = self.rows if first_row is None else first_row
            for part in batch.to_batches():
                self.write_batch(part, where, start)
                start += part.num_rows
            return
        n = batch.num_rows
        if n == 0:
            return
        first = self.rows if first_row is None else first_row
        body, sizes = self.encode(batch, where, first)
        self.writer.write_encoded(body, sizes)
        self.rows += n

    def encode(self, batch, where: str, first_row: int) -> tuple[bytes, np.ndarray]:
        """The rows of ``batch`` as MDS sample bytes back to back, and each row's size."""
        n = batch.num_rows
        names = batch.schema.names
        segments, var_lengths = [], []
        for name, encoding in self.columns.items():
            if name not in names:
                raise EncodeError(f"{where or 'the batch'} has no column {name!r}; its columns are "
                                  f"{', '.join(names)}")
            fail = _row_error(where, name, encoding, first_row)
            segs = encode_column(batch.column(names.index(name)), encoding, fail)
            lengths = sum(np.diff(offsets) for _, offsets in segs)
            if get_encoding(encoding).size is None:
                var_lengths.append(lengths)
            segments += segs
        head = (np.stack(var_lengths, axis=1).astype("<u4") if var_lengths
                else np.zeros((n, 0), "<u4"))
        sizes = head.shape[1] * 4 + sum(np.diff(offsets) for _, offsets in segments)
        return _join(head, segments, n), np.asarray(sizes, dtype=np.int64)

    def finish(self) -> None:
        """Write the last shard and the index."""
        self.writer.finish()

    def __enter__(self) -> "ArrowMDSWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.writer.__exit__(exc_type, exc, tb)


def _row_error(where: str, column: str, encoding: str, first_row: int):
    place = f" of {where}" if where else ""

    def fail(row: int, what: str) -> EncodeError:
        return EncodeError(f"row {first_row + row}{place}: column {column!r} ({encoding}) {what}; fix the input, "
                           f"or name another encoding for the column (--columns {column}:ENCODING)")
    return fail


def _join(head: np.ndarray, segments: list, n: int) -> bytes:
    """Row by row: the header, then each segment's slice; one join for the whole batch. Runs of segments
    of one size per row (the header, scalar columns) are merged with numpy first, so each row costs a
    slice per variable-size segment and one per run."""
    blocks: list = []
    fixed: list = [head.view(np.uint8).reshape(n, -1)] if head.shape[1] else []
    for buf, offsets in segments:
        lengths = np.diff(offsets)
        if n and (lengths == lengths[0]).all():
            width = int(lengths[0])
            if width:  # a column empty in every row (all "" or b"") adds no bytes
                fixed.append(np.frombuffer(buf, np.uint8, n * width, int(offsets[0])).reshape(n, width))
            continue
        if fixed:
            blocks.append(_fixed_block(fixed, n))
            fixed = []
        blocks.append((memoryview(buf), offsets.tolist()))
    if fixed:
        blocks.append(_fixed_block(fixed, n))
    parts: list = [None] * (n * len(blocks))
    for k, (view, offs) in enumerate(blocks):
        parts[k::len(blocks)] = [view[a:b] for a, b in zip(offs, offs[1:])]
    return b"".join(parts)


def _fixed_block(arrays: list, n: int) -> tuple:
    block = np.hstack(arrays) if len(arrays) > 1 else arrays[0]
    width = block.shape[1]
    return memoryview(np.ascontiguousarray(block).reshape(-1)), list(range(0, n * width + 1, width))


def write_batches(batches: Iterable, out: Union[str, tuple[str, str]], columns: dict[str, str],
                  where: str = "", **writer_kwargs: Any) -> int:
    """Write every batch (record batches or tables) of ``batches`` to ``out``; returns the rows written."""
    with ArrowMDSWriter(out, columns, **writer_kwargs) as writer:
        for batch in batches:
            writer.write_batch(batch, where)
    return writer.rows
