"""Arrow tables (a Parquet row group, an Arrow record batch) as shardstream samples and column batches.

A sample is a dict with one value per column, as MDS samples are: numeric and boolean scalars
as Python numbers, strings as ``str``, binary as ``bytes``, lists of numbers as numpy arrays
(views of the decoded column, no copy per sample), fixed-size lists of numbers as arrays of
that shape, structs as dicts and other nested values as Python lists; a null is ``None``.
A column batch has numeric columns as 1-D arrays, fixed-size lists as ``(n, k)`` arrays, lists
of numbers as :class:`~shardstream.format.batch.Ragged` and everything else as a list.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import require
from .batch import Ragged


def pyarrow():
    return require("pyarrow", "parquet", "reading Parquet and Arrow files")


def _numeric(t) -> bool:
    pa = pyarrow()
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def kind_of(t) -> tuple:
    """``(kind, dtype, shape)`` of an Arrow type: ``array`` for numbers and fixed-size lists of
    numbers, ``ragged`` for lists of numbers, ``list`` for the rest."""
    pa = pyarrow()
    if _numeric(t) and not pa.types.is_float16(t):
        return "array", np.dtype(t.to_pandas_dtype()).str, ()
    if pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
        return "array", np.dtype(t.value_type.to_pandas_dtype()).str, (t.list_size,)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
        return "ragged", np.dtype(t.value_type.to_pandas_dtype()).str, ()
    return "list", "", ()


def schema_kinds(schema) -> tuple[tuple, tuple, tuple]:
    """``(names, types, kinds)`` of an Arrow schema."""
    return (tuple(schema.names), tuple(str(f.type) for f in schema),
            tuple(kind_of(f.type) for f in schema))


def _column(table, name: str):
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def row_values(table, names: Sequence[str]) -> list[list]:
    """One list of per-row values for each of ``names``."""
    return [_row_values(_column(table, name)) for name in names]


def _row_values(arr) -> list:
    pa = pyarrow()
    t = arr.type
    if arr.null_count == 0:
        if _numeric(t):
            return arr.to_numpy(zero_copy_only=False).tolist()
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
            values, offsets = _flat(arr)
            bounds = offsets.tolist()
            return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        if pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
            return list(_fixed(arr))
    return arr.to_pylist()


def _flat(arr) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets from 0) of a list array without nulls."""
    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    return values[offsets[0]:offsets[-1]], (offsets - offsets[0]).astype(np.int64)


def _fixed(arr) -> np.ndarray:
    k = arr.type.list_size
    values = arr.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(len(arr), k)


def batch_values(table, names: Sequence[str], kinds: Sequence[tuple]) -> dict[str, Any]:
    """The column batch of all rows of ``table``."""
    out: dict[str, Any] = {}
    for name, (kind, dtype, shape) in zip(names, kinds):
        arr = _column(table, name)
        if arr.null_count:
            out[name] = arr.to_pylist() if kind == "list" else _no_nulls(arr, name)
        elif kind == "array":
            out[name] = _fixed(arr) if shape else arr.to_numpy(zero_copy_only=False)
        elif kind == "ragged":
            values, offsets = _flat(arr)
            out[name] = Ragged(values, offsets)
        else:
            out[name] = arr.to_pylist()
    return out


def _no_nulls(arr, name: str):
    from ..errors import InvalidArgumentError

    raise InvalidArgumentError(
        f"column {name!r} has null values, which a numeric column batch cannot hold; read samples "
        "(iterate the dataset) or leave the column out with columns=[...]")


def slice_batch(batch: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """Rows ``lo..hi-1`` of a column batch, copied (a batch never shares memory with the piece)."""
    out: dict[str, Any] = {}
    for name, col in batch.items():
        if isinstance(col, np.ndarray):
            out[name] = col[lo:hi].copy()
        elif isinstance(col, Ragged):
            a, b = int(col.offsets[lo]), int(col.offsets[hi])
            out[name] = Ragged(col.values[a:b].copy(), col.offsets[lo:hi + 1] - a)
        else:
            out[name] = col[lo:hi]
    return out
