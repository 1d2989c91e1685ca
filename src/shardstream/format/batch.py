"""Decoding many samples of a shard at once into column arrays.

Per column, a batch becomes:

- numeric scalars (``int``, ``int8`` ... ``float64``): a 1-D numpy array;
- fixed-shape arrays (``ndarray:<dtype>:<shape>``): an array of shape ``(n, *shape)``;
- variable-length arrays (``ndarray:<dtype>`` or ``ndarray``): a :class:`Ragged`
  (flat values + offsets, optionally padded with :meth:`Ragged.to_padded`);
- anything else (``str``, ``bytes``, ``json``, images ...): a list of decoded values.

Sample headers and column positions are computed with vectorised numpy over the
shard's offset table; payloads are gathered with strided copies when samples have
a constant stride, else one slice copy per sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import CorruptShardError, InvalidArgumentError
from .encodings import NDArray
from .reader import ShardReader


@dataclass
class Ragged:
    """Variable-length rows: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    ``shapes`` (``(n, ndim)``) is set when rows are multi-dimensional arrays; row ``i``
    then has shape ``shapes[i]`` and ``offsets`` count elements, not rows.
    """

    values: np.ndarray
    offsets: np.ndarray
    shapes: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        row = self.values[self.offsets[i]:self.offsets[i + 1]]
        return row.reshape(self.shapes[i]) if self.shapes is not None else row

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def tolist(self) -> list[np.ndarray]:
        return [self[i] for i in range(len(self))]

    def to_padded(self, pad_value: Any = 0, length: Optional[int] = None) -> np.ndarray:
        """Rows as a ``(n, length)`` array, truncated or padded with ``pad_value``."""
        if self.shapes is not None and self.shapes.shape[1] != 1:
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

    @staticmethod
    def concat(parts: Sequence["Ragged"]) -> "Ragged":
        values = np.concatenate([p.values for p in parts])
        lengths = np.concatenate([p.lengths for p in parts])
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shapes = None
        if all(p.shapes is not None for p in parts):
            ndims = {p.shapes.shape[1] for p in parts}
            if len(ndims) == 1:
                shapes = np.concatenate([p.shapes for p in parts])
        return Ragged(values, offsets, shapes)


def _gather_fixed(mv: memoryview, starts: np.ndarray, size: int) -> np.ndarray:
    """Copy ``size`` bytes from each start into an ``(n, size)`` uint8 array."""
    n = len(starts)
    out = np.empty((n, size), np.uint8)
    if n == 0 or size == 0:
        return out
    base = np.frombuffer(mv, np.uint8)
    if size <= 16:
        out[...] = base[starts[:, None] + np.arange(size)]
        return out
    if n > 1:
        steps = np.diff(starts)
        stride = int(steps[0])
        if stride >= size and not (steps != stride).any() and starts[0] + stride * (n - 1) + size <= len(base):
            view = np.lib.stride_tricks.as_strided(base[int(starts[0]):], (n, size), (stride, 1), writeable=False)
            out[...] = view
            return out
    flat = memoryview(out).cast("B")
    for k, s in enumerate(starts.tolist()):
        flat[k * size:(k + 1) * size] = mv[s:s + size]
    return out


def _gather_var(mv: memoryview, starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate variable-size byte ranges; returns (bytes, byte offsets)."""
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    flat = memoryview(out)
    dst = offsets.tolist()
    for a, b, s, e in zip(dst, dst[1:], starts.tolist(), (starts + sizes).tolist()):
        flat[a:b] = mv[s:e]
    return out, offsets


def _ndarray_column(mv, enc: NDArray, starts, sizes, name) -> Any:
    if enc.dtype is None:
        return None  # untyped: decode per sample
    base = np.frombuffer(mv, np.uint8)
    if len(starts) == 0:
        return Ragged(np.empty(0, enc.np_dtype), np.zeros(1, np.int64))
    if int(sizes.min()) < 1:
        raise CorruptShardError(f"column {name!r}: an empty value has no array header")
    heads = base[starts]
    ndim = int(heads[0]) >> 2
    if ndim == 0 or not np.array_equal(heads >> 2, np.broadcast_to(ndim, heads.shape)):
        return None  # mixed dimensionality: decode per sample
    widths = heads & 3
    groups = [int(widths[0])] if not (widths != widths[0]).any() else np.unique(widths).tolist()
    if len(groups) == 1 and ndim == 1:
        w = 1 << groups[0]
        hdr = 1 + w
        if int(sizes.min()) < hdr:
            raise CorruptShardError(f"column {name!r}: an array header is longer than its column")
        counts = _gather_fixed(mv, starts + 1, w).view(f"<u{w}").reshape(len(starts)).astype(np.int64)
        shapes = None
    else:
        shapes = np.empty((len(starts), ndim), np.int64)
        hdr = np.empty(len(starts), np.int64)
        for width in groups:
            rows = np.flatnonzero(widths == width)
            w = 1 << width
            if int(sizes[rows].min()) < 1 + ndim * w:
                raise CorruptShardError(f"column {name!r}: an array header is longer than its column")
            shape_bytes = _gather_fixed(mv, starts[rows] + 1, ndim * w)
            shapes[rows] = shape_bytes.view(f"<u{w}").reshape(len(rows), ndim)
            hdr[rows] = 1 + ndim * w
        counts = shapes.prod(axis=1)
    item = enc.np_dtype.itemsize
    if not np.array_equal(counts * item, sizes - hdr):
        raise CorruptShardError(f"column {name!r}: an array's shape does not match its byte size")
    data, byte_offsets = _gather_var(mv, starts + hdr, sizes - hdr)
    return Ragged(data.view(enc.np_dtype), byte_offsets // item, shapes if ndim > 1 else None)


def decode_batch(reader: ShardReader, indices, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Decode samples ``indices`` (local to this shard, any order) into per-column arrays."""
    idx = np.asarray(indices, np.int64)
    n = reader.samples
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InvalidArgumentError(f"sample indices must be in [0, {n}) for shard {reader.name!r}")
    return _decode(reader, reader.offsets[idx], reader.offsets[idx + 1], columns)


def decode_range(reader: ShardReader, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Decode the consecutive samples ``lo..hi-1`` of this shard (no index arrays needed)."""
    if not 0 <= lo <= hi <= reader.samples:
        raise InvalidArgumentError(f"range [{lo}, {hi}) is not within shard {reader.name!r} ({reader.samples} samples)")
    offsets = reader.offsets
    return _decode(reader, offsets[lo:hi], offsets[lo + 1:hi + 1], columns)


def _decode(reader: ShardReader, begins: np.ndarray, ends: np.ndarray, columns) -> dict[str, Any]:
    info = reader.info
    if columns is not None:
        unknown = set(columns) - set(info.column_names)
        if unknown:
            raise InvalidArgumentError(
                f"unknown columns {sorted(unknown)}; the dataset has {list(info.column_names)}"
            )
    mv = reader.mv
    count = len(begins)
    n_var = sum(1 for s in info.column_sizes if s is None)
    if count and n_var and int((ends - begins).min()) < 4 * n_var:
        raise CorruptShardError(f"shard {reader.name!r}: a sample is shorter than its size header")
    var_sizes = _gather_fixed(mv, begins, 4 * n_var).view("<u4") if n_var and count else None
    pos = begins + 4 * n_var
    layout = []
    k = 0
    for name, enc, fixed in zip(info.column_names, info.encodings, info.column_sizes):
        if fixed is None:
            size = var_sizes[:, k].astype(np.int64) if count else np.zeros(0, np.int64)
            k += 1
        else:
            size = fixed
        layout.append((name, enc, fixed, pos, size))
        pos = pos + size
    if count and not np.array_equal(pos, ends):
        raise CorruptShardError(f"shard {reader.name!r}: column sizes do not add up to the sample sizes")
    out: dict[str, Any] = {}
    for name, enc, fixed, starts, sizes in layout:
        if columns is not None and name not in columns:
            continue
        value = None
        if enc.np_dtype is not None and enc.shape is not None and fixed is not None:
            raw = _gather_fixed(mv, starts, fixed)
            value = raw.view(enc.np_dtype).reshape((count,) + tuple(enc.shape))
        elif isinstance(enc, NDArray):
            value = _ndarray_column(mv, enc, starts, np.broadcast_to(sizes, starts.shape), name)
        if value is None:
            decode = enc.decode
            stops = (starts + sizes).tolist()
            value = [decode(mv[a:z]) for a, z in zip(starts.tolist(), stops)]
        out[name] = value
    return out


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
