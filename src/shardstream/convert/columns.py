"""Encoding a whole Arrow column into MDS payloads at once.

Each column of a record batch becomes one or two *segments*: a buffer and ``n + 1`` offsets into it,
so that row ``i``'s payload is the bytes ``buffer[offsets[i]:offsets[i+1]]`` of each segment in turn.
Numbers, strings, binary and lists of numbers are encoded from Arrow's own buffers with numpy, never a
Python object per value; other columns (``json``, images given as other types, lists of lists) go value
by value through the column's :class:`~shardstream.format.encodings.Encoding`. The bytes are exactly
those :meth:`MDSWriter.write <shardstream.MDSWriter>` writes for the same row.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import EncodeError
from ..format.arrowrows import pyarrow
from ..format.encodings import get_encoding
from .schema import is_image_struct, number_name

Segment = tuple[Any, np.ndarray]  # (a bytes-like buffer, int64 offsets of length n + 1)
RowError = Callable[[int, str], EncodeError]  # (row in the batch, what is wrong) -> the error to raise

_SCALARS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "int")
_MAGIC = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n"}


def encode_column(arr, encoding: str, fail: RowError) -> list[Segment]:
    """The segments of ``arr`` (a ``pyarrow.Array``) encoded as ``encoding``."""
    pa = pyarrow()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if is_image_struct(arr.type) and encoding in ("jpeg", "png", "bytes"):
        _no_nulls(arr, fail)
        arr = arr.field("bytes")
    t = arr.type
    if encoding in _SCALARS and (number_name(t) or pa.types.is_boolean(t)):
        return [_scalars(arr, "int64" if encoding == "int" else encoding, fail)]
    if encoding == "str" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return [_binary(arr, fail)]
    if encoding in ("bytes", "jpeg", "png") and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        seg = _binary(arr, fail)
        if encoding in _MAGIC:
            _check_magic(seg, encoding, fail)
        return [seg]
    if encoding.startswith("ndarray:") and _is_number_list(t):
        enc = get_encoding(encoding)
        if enc.np_dtype is not None and (enc.shape is None or len(enc.shape) == 1):
            return _number_lists(arr, enc, fail)
    return [_values(arr, encoding, fail)]


def _is_number_list(t) -> bool:
    pa = pyarrow()
    listy = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    return listy and (number_name(t.value_type) is not None or pa.types.is_boolean(t.value_type))


def _no_nulls(arr, fail: RowError, what: str = "is null") -> None:
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise fail(row, what)


def _numbers(arr, dtype: np.dtype, fail: RowError, row_of: Callable[[int], int] = lambda i: i) -> np.ndarray:
    """``arr`` (numbers, no nulls) as ``dtype``, refusing a value the cast would change (floats may round)."""
    values = arr.to_numpy(zero_copy_only=False)
    if values.dtype == dtype:
        return values
    with np.errstate(all="ignore"):
        cast = values.astype(dtype)
        if dtype.kind == "f" and values.dtype.kind == "f":
            bad = np.flatnonzero(np.isinf(cast) & ~np.isinf(values))
        else:
            bad = np.flatnonzero((cast.astype(values.dtype) != values) | ((cast < 0) != (values < 0)))
    if bad.size:
        raise fail(row_of(int(bad[0])), f"holds {values[bad[0]]!r}, which does not fit {dtype.name}")
    return cast


def _scalars(arr, name: str, fail: RowError) -> Segment:
    _no_nulls(arr, fail)
    dtype = np.dtype("<" + np.dtype(name).char)
    values = np.ascontiguousarray(_numbers(arr, dtype, fail))
    return values.view(np.uint8).reshape(-1), np.arange(len(arr) + 1, dtype=np.int64) * dtype.itemsize


def _binary(arr, fail: RowError) -> Segment:
    """Strings or binary values: Arrow's data buffer and its offsets, no copy."""
    _no_nulls(arr, fail)
    pa = pyarrow()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offsets, data = arr.buffers()[:3]
    offsets = np.frombuffer(offsets, np.int64 if wide else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    return (data if data is not None else b""), offsets.astype(np.int64)


def _check_magic(seg: Segment, encoding: str, fail: RowError) -> None:
    data, offsets = seg
    magic = np.frombuffer(_MAGIC[encoding], np.uint8)
    buf = np.frombuffer(data, np.uint8)
    lengths = np.diff(offsets)
    short = np.flatnonzero(lengths < magic.size)
    starts = offsets[:-1]
    ok = np.ones(len(starts), bool)
    ok[short] = False
    long_rows = np.flatnonzero(lengths >= magic.size)
    for k, byte in enumerate(magic):
        ok[long_rows] &= buf[starts[long_rows] + k] == byte
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise fail(row, f"is not a {encoding.upper()} image (its bytes do not start as one); store it with "
                        "encoding 'bytes', or convert the image first")


def _number_lists(arr, enc, fail: RowError) -> list[Segment]:
    """Lists of numbers as ``ndarray:<dtype>`` payloads: a shape header per row (unless the encoding fixes
    the shape), then the values, cast to the column's dtype."""
    pa = pyarrow()
    _no_nulls(arr, fail)
    n = len(arr)
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        offsets = np.arange(n + 1, dtype=np.int64) * size
        flat = arr.flatten()
    else:
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        offsets = offsets - offsets[0]
        flat = arr.flatten()
    lengths = np.diff(offsets)

    def row_of(i: int) -> int:  # the row holding element i of the flat values
        return int(np.searchsorted(offsets, i, side="right")) - 1

    _no_nulls(flat, lambda i, what: fail(row_of(i), "holds a null element"))
    values = np.ascontiguousarray(_numbers(flat, enc.np_dtype, fail, row_of))
    buf = values.view(np.uint8).reshape(-1)
    if enc.shape is not None:
        bad = np.flatnonzero(lengths != enc.shape[0])
        if bad.size:
            raise fail(int(bad[0]), f"holds {lengths[bad[0]]} values where {enc.name!r} has shape {enc.shape}")
        return [(buf, offsets * enc.np_dtype.itemsize)]
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise fail(int(empty[0]), "is an empty list, which MDS ndarray columns cannot store; drop such rows "
                                  "or store the column as json")
    return [_shape_headers(lengths), (buf, offsets * enc.np_dtype.itemsize)]


def _shape_headers(lengths: np.ndarray) -> Segment:
    """Per row: the byte ``1 << 2 | width`` then the length at that width (1, 2, 4 or 8 bytes)."""
    width = np.zeros(len(lengths), np.int64)
    width[lengths >= 1 << 8] = 1
    width[lengths >= 1 << 16] = 2
    width[lengths >= 1 << 32] = 3
    nbytes = 1 << width
    sizes = 1 + nbytes
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    starts = offsets[:-1]
    out[starts] = 4 | width
    for k in range(8):
        rows = np.flatnonzero(nbytes > k)
        if not rows.size:
            break
        out[starts[rows] + 1 + k] = (lengths[rows] >> (8 * k)) & 0xFF
    return out, offsets


def _values(arr, encoding: str, fail: RowError) -> Segment:
    """Any column, value by value through its encoding (Python values from ``to_pylist``)."""
    coder = get_encoding(encoding)
    pa = pyarrow()
    temporal = pa.types.is_temporal(arr.type)
    parts = []
    for i, value in enumerate(arr.to_pylist()):
        if value is None and encoding != "json":
            raise fail(i, "is null")
        if temporal and encoding == "str":
            value = value.isoformat() if hasattr(value, "isoformat") else str(value)
        elif encoding.startswith("ndarray") and isinstance(value, list):
            value = np.asarray(value, dtype=coder.np_dtype)
        try:
            parts.append(value if type(value) is bytes and encoding != "json" else coder.encode(value))
        except EncodeError as exc:
            raise fail(i, f"does not fit: {exc}") from None
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return b"".join(parts), offsets
