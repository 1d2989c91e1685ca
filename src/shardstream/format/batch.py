"""Decoding many samples of a shard at once into column arrays.

Per column, a batch becomes:

- numeric scalars (``int``, ``int8`` ... ``float64``): a 1-D numpy array;
- fixed-shape arrays (``ndarray:<dtype>:<shape>``): an array of shape ``(n, *shape)``;
- variable-length arrays of one dtype (``ndarray:<dtype>``): a :class:`Ragged`
  (flat values + offsets, optionally padded with :meth:`Ragged.to_padded`);
- anything else (untyped ``ndarray``, ``str``, ``bytes``, ``json``, images ...): a list.

Sample headers and column positions are computed with vectorised numpy over the
shard's offset table, and payloads are copied by the C loops of :mod:`.gather`: a
``str`` column is decoded as one string and split, other columns that become lists
are decoded value by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import CorruptShardError, InvalidArgumentError
from .encodings import NDArray, Str
from .gather import Windows, decode_each, gather_spans, gather_strs, rows_at
from .reader import ShardReader


@dataclass
class Ragged:
    """Variable-length rows: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    ``shapes`` is set when rows are not all 1-D: an ``(n, ndim)`` int array when every
    row has the same number of dimensions, else a list of shape tuples. Row ``i`` then
    has shape ``shapes[i]``, and ``offsets`` count elements, not rows.
    """

    values: np.ndarray
    offsets: np.ndarray
    shapes: Optional[Any] = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} is out of range for {n} rows")
        row = self.values[self.offsets[i]:self.offsets[i + 1]]
        return row.reshape(tuple(self.shapes[i])) if self.shapes is not None else row

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row_shapes(self) -> list[tuple]:
        if self.shapes is None:
            return [(int(n),) for n in self.lengths.tolist()]
        return [tuple(int(d) for d in shape) for shape in self.shapes]

    def tolist(self) -> list[np.ndarray]:
        return [self[i] for i in range(len(self))]

    def to_padded(self, pad_value: Any = 0, length: Optional[int] = None) -> np.ndarray:
        """Rows as a ``(n, length)`` array, truncated or padded with ``pad_value``."""
        if self.shapes is not None and any(len(shape) != 1 for shape in self.row_shapes()):
            raise InvalidArgumentError("to_padded() works on 1-D rows; these rows are multi-dimensional")
        lengths = self.lengths
        width = int(lengths.max(initial=0)) if length is None else int(length)
        out = np.full((len(self), width), pad_value, dtype=self.values.dtype)
        keep = np.minimum(lengths, width)
        cols = np.arange(width)
        mask = cols[None, :] < keep[:, None]
        src = (self.offsets[:-1, None] + cols[None, :])[mask]
        out[mask] = self.values[src]
        return out

    def take(self, rows: np.ndarray) -> "Ragged":
        """The rows ``rows`` (ints), in that order."""
        rows = np.asarray(rows, np.int64)
        lengths = self.lengths[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = self.offsets[:-1][rows]
        values = self.values
        if values.ndim == 1 and values.flags.c_contiguous and not values.dtype.hasobject:
            item = values.dtype.itemsize
            data, _ = gather_spans(Windows(values.view(np.uint8)), starts * item, lengths * item)
            values = data.view(values.dtype)
        else:
            at = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
            values = values[at]
        shapes = None
        if self.shapes is not None:
            shapes = self.shapes[rows] if isinstance(self.shapes, np.ndarray) else [self.shapes[i] for i in rows.tolist()]
        return Ragged(values, offsets, shapes)

    def slice(self, lo: int, hi: int) -> "Ragged":
        """Rows ``lo..hi-1`` (``0 <= lo <= hi <= len(self)``), their values a view of these; ``shapes`` as
        a decode of only those rows gives them."""
        offsets = self.offsets[lo:hi + 1]
        start = int(offsets[0])
        shapes = None
        if self.shapes is not None and hi > lo:
            rows = self.shapes[lo:hi]
            if isinstance(rows, list):
                shapes = None if all(len(shape) == 1 for shape in rows) else _pack_shapes(rows)
            else:
                shapes = rows
        return Ragged(self.values[start:int(offsets[-1])], offsets - start, shapes)

    @staticmethod
    def concat(parts: Sequence["Ragged"]) -> "Ragged":
        values = np.concatenate([p.values for p in parts])
        lengths = np.concatenate([p.lengths for p in parts])
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shapes = None
        if any(p.shapes is not None for p in parts):
            rows = [shape for p in parts for shape in p.row_shapes()]
            shapes = _pack_shapes(rows)
        return Ragged(values, offsets, shapes)


def _pack_shapes(rows: list[tuple]):
    """Row shapes as an ``(n, ndim)`` array when the ndims agree, else a list of tuples."""
    if rows and len({len(r) for r in rows}) == 1:
        return np.asarray(rows, np.int64).reshape(len(rows), len(rows[0]))
    return rows


_HEADER = np.array([2, 3, 5, 9], np.int64)  # bytes of a 1-D shape header, by its width code
_MASKS = np.array([0xFF, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF], np.uint64)  # a width's bytes of a u8


def _row_lengths(src: Windows, heads: np.ndarray, starts, sizes, name) -> tuple[np.ndarray, np.ndarray]:
    """Element counts and header sizes of 1-D rows (every head byte is ``4 | width code``): the
    widest count of all rows is read at once and masked to each row's width."""
    n = len(starts)
    codes = heads & 3
    top = int(codes.max())
    width = 1 << top
    hdr = _HEADER[codes]
    if (sizes < 1 + width).any():  # a row too short for the widest read: read each width apart
        if (sizes < hdr).any():
            raise CorruptShardError(f"column {name!r}: an array header is longer than its column")
        counts = np.empty(n, np.int64)
        for code in np.unique(codes).tolist():
            rows = np.flatnonzero(codes == code)
            counts[rows] = rows_at(src, starts[rows] + 1, 1 << code).view(f"<u{1 << code}").reshape(len(rows))
        return counts, hdr
    raw = rows_at(src, starts + 1, width).view(f"<u{width}").reshape(n)
    if int(codes.min()) != top:
        raw = raw & _MASKS[codes]
    return raw.astype(np.int64), hdr


def _row_shapes(src: Windows, heads: np.ndarray, starts, sizes, name) -> tuple[np.ndarray, np.ndarray, Any]:
    """Element counts, header sizes and shapes (None when every row is 1-D) of rows of any ndim."""
    n = len(starts)
    hdr = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    row_shapes: list = [None] * n
    for head in np.unique(heads).tolist():
        rows = np.flatnonzero(heads == head)
        ndim, w = head >> 2, 1 << (head & 3)
        if ndim == 0:
            raise CorruptShardError(f"column {name!r}: an array header says 0 dimensions")
        if int(sizes[rows].min()) < 1 + ndim * w:
            raise CorruptShardError(f"column {name!r}: an array header is longer than its column")
        dims = rows_at(src, starts[rows] + 1, ndim * w).view(f"<u{w}").reshape(len(rows), ndim)
        dims = dims.astype(np.int64)
        hdr[rows] = 1 + ndim * w
        counts[rows] = dims.prod(axis=1)
        for r, shape in zip(rows.tolist(), dims.tolist()):
            row_shapes[r] = tuple(shape)
    shapes = None if all(len(shape) == 1 for shape in row_shapes) else _pack_shapes(row_shapes)
    return counts, hdr, shapes


def _ndarray_column(src: Windows, enc: NDArray, starts, sizes, name) -> Any:
    if enc.dtype is None:
        return None  # untyped: decode per sample
    n = len(starts)
    if n == 0:
        return Ragged(np.empty(0, enc.np_dtype), np.zeros(1, np.int64))
    if int(sizes.min()) < 1:
        raise CorruptShardError(f"column {name!r}: an empty value has no array header")
    heads = src(np.uint8)[starts]
    if ((heads >> 2) != 1).any():
        counts, hdr, shapes = _row_shapes(src, heads, starts, sizes, name)
    else:  # the common case: 1-D rows
        counts, hdr = _row_lengths(src, heads, starts, sizes, name)
        shapes = None
    item = enc.np_dtype.itemsize
    payload = sizes - hdr
    if (counts * item != payload).any():
        raise CorruptShardError(f"column {name!r}: an array's shape does not match its byte size")
    data, byte_offsets = gather_spans(src, starts + hdr, payload)
    return Ragged(data.view(enc.np_dtype), byte_offsets // item, shapes)


def decode_batch(reader: ShardReader, indices, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Decode samples ``indices`` (local to this shard, any order) into per-column arrays."""
    idx = np.asarray(indices, np.int64)
    n = reader.samples
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InvalidArgumentError(f"sample indices must be in [0, {n}) for shard {reader.name!r}")
    return decode_spans(reader, reader.offsets[idx], reader.offsets[idx + 1], columns)


def decode_range(reader: ShardReader, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Decode the consecutive samples ``lo..hi-1`` of this shard (no index arrays needed)."""
    if not 0 <= lo <= hi <= reader.samples:
        raise InvalidArgumentError(f"range [{lo}, {hi}) is not within shard {reader.name!r} ({reader.samples} samples)")
    offsets = reader.offsets
    return decode_spans(reader, offsets[lo:hi], offsets[lo + 1:hi + 1], columns)


def decode_spans(reader: ShardReader, begins: np.ndarray, ends: np.ndarray, columns=None) -> dict[str, Any]:
    """Decode the samples at bytes ``begins[i]..ends[i]`` of ``reader``'s buffer (any order) into columns."""
    info = reader.info
    if columns is not None:
        unknown = set(columns) - set(info.column_names)
        if unknown:
            raise InvalidArgumentError(
                f"unknown columns {sorted(unknown)}; the dataset has {list(info.column_names)}"
            )
    src = reader.windows
    out: dict[str, Any] = {}
    for name, enc, fixed, starts, sizes in _layout(reader, begins, ends):
        if columns is None or name in columns:
            out[name] = _column(src, name, enc, fixed, starts, sizes)
    return out


def _layout(reader: ShardReader, begins: np.ndarray, ends: np.ndarray) -> list[tuple]:
    """``(name, encoding, fixed size, starts, sizes)`` per column of the samples ``begins..ends``,
    after checking that each sample's column sizes add up to its size."""
    info = reader.info
    count = len(begins)
    n_var = reader.var_columns
    if count and n_var and int((ends - begins).min()) < 4 * n_var:
        raise CorruptShardError(f"shard {reader.name!r}: a sample is shorter than its size header")
    var_sizes = None
    if n_var and count:
        var_sizes = np.array(rows_at(reader.windows, begins, 4 * n_var).view("<u4").T, np.int64)
    pos = begins + 4 * n_var
    layout = []
    k = 0
    for name, enc, fixed in zip(info.column_names, info.encodings, info.column_sizes):
        if fixed is None:
            size = var_sizes[k] if count else np.zeros(0, np.int64)
            k += 1
        else:
            size = fixed
        layout.append((name, enc, fixed, pos, size))
        pos = pos + size
    if count and (pos != ends).any():
        raise CorruptShardError(f"shard {reader.name!r}: column sizes do not add up to the sample sizes")
    return layout


def _column(src: Windows, name: str, enc, fixed, starts: np.ndarray, sizes) -> Any:
    """One column of a batch from its values' starts and sizes (see the module docstring)."""
    if enc.np_dtype is not None and enc.shape is not None and fixed is not None:
        return rows_at(src, starts, fixed).view(enc.np_dtype).reshape((len(starts),) + tuple(enc.shape))
    if fixed is not None:
        sizes = np.full(len(starts), fixed, np.int64)
    if isinstance(enc, NDArray):
        value = _ndarray_column(src, enc, starts, sizes, name)
        if value is not None:
            return value
    if type(enc) is Str:
        value = gather_strs(src, starts, sizes)
        if value is not None:
            return value
    return decode_each(enc.decode, src, starts, sizes)


def concat_batches(parts: list[dict[str, Any]]) -> dict[str, Any]:
    if len(parts) == 1:
        return parts[0]
    out = {}
    for name, first in parts[0].items():
        values = [p[name] for p in parts]
        if len({type(v) for v in values}) > 1:  # e.g. Ragged in one shard, per-sample list in another
            values = [v.tolist() if isinstance(v, Ragged) else list(v) for v in values]
            first = values[0]
        if isinstance(first, np.ndarray):
            out[name] = np.concatenate(values)
        elif isinstance(first, Ragged):
            out[name] = Ragged.concat(values)
        else:
            out[name] = [v for part in values for v in part]
    return out


def slice_rows(batch: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """Rows ``lo..hi-1`` of every column of a decoded ``batch``: views of its arrays, slices of its lists."""
    return {name: value.slice(lo, hi) if isinstance(value, Ragged) else value[lo:hi] for name, value in batch.items()}


def take_rows(batch: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The rows ``rows`` of every column of ``batch``, in that order."""
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, (np.ndarray, Ragged)):
            out[name] = value[rows] if isinstance(value, np.ndarray) else value.take(rows)
        else:
            out[name] = list(map(value.__getitem__, rows.tolist()))
    return out


def column_kinds(reader: ShardReader, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
    """``(name, kind, detail)`` per column, kind as :func:`decode_batch` returns it: ``array``
    (numeric and fixed-shape; detail ``(dtype, shape)``), ``ragged`` (variable-length typed
    arrays; detail the dtype) or ``list`` (detail None)."""
    return shard_kinds(reader.info, columns)


def shard_kinds(info, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
    """:func:`column_kinds` from a shard's index entry (a ``ShardInfo``; no shard opened)."""
    out = []
    for name, enc, fixed in zip(info.column_names, info.encodings, info.column_sizes):
        if columns is not None and name not in columns:
            continue
        if enc.np_dtype is not None and enc.shape is not None and fixed is not None:
            out.append((name, "array", (enc.np_dtype, tuple(enc.shape))))
        elif isinstance(enc, NDArray) and enc.dtype is not None:
            out.append((name, "ragged", enc.np_dtype))
        else:
            out.append((name, "list", None))
    return out


def stack_samples(samples: list[dict[str, Any]], kinds: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """Decoded samples as the column batch :func:`decode_batch` would give for them."""
    out: dict[str, Any] = {}
    for name, kind, dtype in kinds:
        values = [s[name] for s in samples]
        if kind == "array":
            dtype, shape = dtype
            out[name] = np.stack(values) if values and shape else np.asarray(values, dtype).reshape((-1, *shape))
        elif kind == "ragged":
            sizes = np.fromiter((v.size for v in values), np.int64, len(values))
            offsets = np.zeros(len(values) + 1, np.int64)
            np.cumsum(sizes, out=offsets[1:])
            flat = np.concatenate([v.ravel() for v in values]) if values else np.empty(0, dtype)
            multi = any(v.ndim != 1 for v in values)
            out[name] = Ragged(flat.astype(dtype, copy=False), offsets,
                               _pack_shapes([v.shape for v in values]) if multi else None)
        else:
            out[name] = values
    return out
