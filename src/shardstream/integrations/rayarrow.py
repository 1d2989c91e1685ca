"""One MDS shard's samples as an Arrow table, column by column, for Ray Data's read tasks.

=============================================  ==================================================
MDS encoding                                   Arrow column
=============================================  ==================================================
``int``, ``int8`` ... ``float64``, ``uint8``    the same number type (one copy of the shard's bytes)
``ndarray:<dtype>`` (1-D rows)                 ``list<dtype>`` (values and offsets, no copy per row)
``ndarray:<dtype>:<shape>``                    Ray's tensor type of that shape
``ndarray:<dtype>`` (rows of several dims)     Ray's variable-shaped tensor type
``str``                                        ``string``
``bytes``, ``jpeg``, ``png``, ``pil`` ...      ``binary``: the stored bytes (images are not decoded)
``json``                                       the values (structs, lists ...), as Arrow infers them
anything else (``str_int``, ``pkl``, ...)      the decoded values; Python objects if Arrow has no type
=============================================  ==================================================

Strings and bytes are gathered straight from the shard into one Arrow buffer and offsets: no Python
object per row. Everything else goes through the library's column batch decoder (:mod:`..format.batch`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CorruptShardError
from ..format.arrowrows import pyarrow
from ..format.batch import Ragged, decode_range
from ..format.reader import ShardReader

#: encodings whose column is the stored bytes as they are
RAW_ENCODINGS = frozenset({"bytes", "jpeg", "png", "pil", "jpeg_array"})


def is_raw(encoding: str) -> bool:
    return encoding in RAW_ENCODINGS or encoding.startswith("list[")


def column_spans(reader: ShardReader, lo: int, hi: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{column: (starts, sizes)}``: where each column's bytes of samples ``lo..hi-1`` lie in the shard."""
    info = reader.info
    begins = reader.offsets[lo:hi]
    base = np.frombuffer(reader.mv, np.uint8)
    n_var = sum(1 for size in info.column_sizes if size is None)
    if n_var and len(begins):
        heads = base[begins[:, None] + np.arange(4 * n_var)].copy()
        var_sizes = heads.view("<u4").astype(np.int64)
    else:
        var_sizes = np.zeros((len(begins), n_var), np.int64)
    pos = begins + 4 * n_var
    spans, k = {}, 0
    for name, fixed in zip(info.column_names, info.column_sizes):
        if fixed is None:
            size = var_sizes[:, k]
            k += 1
        else:
            size = np.full(len(begins), fixed, np.int64)
        spans[name] = (pos, size)
        pos = pos + size
    if len(begins) and not np.array_equal(pos, reader.offsets[lo + 1:hi + 1]):
        raise CorruptShardError(f"shard {reader.name!r}: column sizes do not add up to the sample sizes; "
                                "the file is damaged: write or download it again")
    return spans


def gather_bytes(reader: ShardReader, starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges concatenated into one array, and their int64 offsets in it."""
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    dst, src = memoryview(out), reader.mv
    for a, b, s in zip(offsets[:-1].tolist(), offsets[1:].tolist(), starts.tolist()):
        dst[a:b] = src[s:s + (b - a)]
    return out, offsets


def binary_column(reader: ShardReader, starts: np.ndarray, sizes: np.ndarray, text: bool) -> Any:
    pa = pyarrow()
    data, offsets = gather_bytes(reader, starts, sizes)
    kind = pa.large_string() if text else pa.large_binary()
    arr = pa.Array.from_buffers(kind, len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if text:
        arr.validate(full=True)  # UTF-8 checked once for the whole column
    small = pa.string() if text else pa.binary()
    return arr.cast(small) if offsets[-1] < 2**31 else arr


def ragged_column(value: Ragged) -> Any:
    pa = pyarrow()
    if value.shapes is not None:
        return tensor_column(value.tolist())
    offsets = pa.array(value.offsets.astype(np.int64 if value.offsets[-1] >= 2**31 else np.int32))
    values = pa.array(np.ascontiguousarray(value.values))
    if offsets.type == pa.int64():
        return pa.LargeListArray.from_arrays(offsets, values)
    return pa.ListArray.from_arrays(offsets, values)


def tensor_column(value: Any) -> Any:
    from ray.data.extensions import ArrowTensorArray

    return ArrowTensorArray.from_numpy(value)


def value_column(values: list) -> Any:
    """Decoded per-row values (``json``, ``str_decimal``, untyped ``ndarray`` ...) as an Arrow column."""
    pa = pyarrow()
    if values and all(isinstance(v, np.ndarray) for v in values):
        try:
            return tensor_column(values)
        except (ValueError, TypeError, pa.ArrowException):
            pass
    try:
        return pa.array(values)
    except (ValueError, TypeError, pa.ArrowException):
        from ray.data.extensions import ArrowPythonObjectArray

        return ArrowPythonObjectArray.from_objects(values)


def to_arrow(value: Any) -> Any:
    """One column of :func:`~shardstream.format.batch.decode_range`'s batch as an Arrow array."""
    pa = pyarrow()
    if isinstance(value, Ragged):
        return ragged_column(value)
    if isinstance(value, np.ndarray):
        if value.ndim == 1:
            return pa.array(value)
        return tensor_column(np.ascontiguousarray(value))
    return value_column(list(value))


def shard_table(reader: ShardReader, columns: list[str], lo: int = 0, hi: int | None = None) -> Any:
    """Samples ``lo..hi-1`` of the shard as a ``pyarrow.Table`` of ``columns`` (in that order)."""
    pa = pyarrow()
    hi = reader.samples if hi is None else hi
    encodings = dict(zip(reader.info.column_names, reader.info.column_encodings))
    direct = [c for c in columns if encodings[c] == "str" or is_raw(encodings[c])]
    decoded = [c for c in columns if c not in direct]
    arrays: dict[str, Any] = {}
    if direct:
        spans = column_spans(reader, lo, hi)
        for name in direct:
            arrays[name] = binary_column(reader, *spans[name], text=encodings[name] == "str")
    if decoded:
        batch = decode_range(reader, lo, hi, decoded)
        for name in decoded:
            arrays[name] = to_arrow(batch[name])
    return pa.table({name: arrays[name] for name in columns})
