"""Ray's tensor columns (and Arrow's ``fixed_shape_tensor``) as the plain Arrow lists MDS columns are written from.

Ray Data stores numpy arrays in Arrow blocks as extension types: a fixed-shape tensor type (every row one
shape; its storage a list of each row's values in C order) and a variable-shaped one (a struct of each
row's values and shape). Before encoding, a block's tensor columns become:

=========================================  ===================================  ==========================
tensor column                              Arrow column written                 MDS encoding
=========================================  ===================================  ==========================
fixed shape ``(k,)``                       ``fixed_size_list<dtype, k>``        ``ndarray:<dtype>:<k>``
fixed shape ``(d0, d1, ...)``              nested ``fixed_size_list``           ``ndarray:<dtype>:<d0>,<d1>...``
variable shape, one dimension              ``large_list<dtype>``                ``ndarray:<dtype>``
=========================================  ===================================  ==========================

Rows of several dimensions and varying shapes have no plain Arrow form MDS writes: they are refused,
naming the column and the fix.
"""

from __future__ import annotations

from typing import Any, Optional

from ..convert.schema import number_name
from ..errors import SchemaMismatchError
from ..format.arrowrows import pyarrow


def tensor_shape(t: Any) -> Optional[tuple]:
    """The row shape of a tensor extension type (``None`` in variable dimensions), else None."""
    pa = pyarrow()
    if not isinstance(t, pa.ExtensionType):
        return None
    shape = getattr(t, "shape", None)
    if shape is None:
        ndim = getattr(t, "ndim", None)
        return (None,) * int(ndim) if ndim is not None else None
    return tuple(shape)


def value_type(t: Any) -> Any:
    """The number type of a tensor type's values."""
    storage = t.storage_type
    pa = pyarrow()
    if pa.types.is_struct(storage):  # variable-shaped: {data: list<values>, shape: list<int64>}
        storage = storage.field("data").type
    inner = storage.value_type
    while pa.types.is_fixed_size_list(inner):
        inner = inner.value_type
    return inner


def plain_type(name: str, t: Any) -> tuple[Any, Optional[str]]:
    """``(plain Arrow type, MDS encoding it needs or None)`` for a column type; other types are kept."""
    shape = tensor_shape(t)
    if shape is None:
        return t, None
    pa = pyarrow()
    values = value_type(t)
    dtype = number_name(values)
    if dtype is None:
        raise SchemaMismatchError(f"column {name!r} holds tensors of {values}, which MDS ndarray columns cannot "
                                  "store; cast them to a number type first")
    if None in shape:
        if len(shape) != 1:
            raise SchemaMismatchError(
                f"column {name!r} holds arrays of {len(shape)} dimensions and varying shapes, which MDS writes "
                "only from one-dimensional rows; flatten them (and store the shape in another column), or "
                "pad them to one shape")
        return pa.large_list(values), None
    plain = values
    for d in reversed(shape):
        plain = pa.list_(plain, int(d))
    return plain, (f"ndarray:{dtype}:{','.join(str(int(d)) for d in shape)}" if len(shape) > 1 else None)


def plain_array(arr: Any, t: Any) -> Any:
    """``arr`` (a tensor column's chunk) as an array of :func:`plain_type`'s type."""
    pa = pyarrow()
    storage = arr.storage
    if pa.types.is_struct(storage.type):
        data = storage.field("data")
        return data if pa.types.is_large_list(data.type) else data.cast(pa.large_list(data.type.value_type))
    flat = storage.flatten()  # each row's values in C order (a slice's own rows only)
    while pa.types.is_fixed_size_list(flat.type):
        flat = flat.flatten()
    out = flat
    for d in reversed(tensor_shape(t)):
        out = pa.FixedSizeListArray.from_arrays(out, int(d))
    return out


def plain_schema(schema: Any) -> tuple[Any, dict[str, str]]:
    """The schema with tensor columns made plain, and the encodings those columns need."""
    pa = pyarrow()
    fields, encodings = [], {}
    for field in schema:
        t, encoding = plain_type(field.name, field.type)
        fields.append(pa.field(field.name, t))
        if encoding:
            encodings[field.name] = encoding
    return pa.schema(fields), encodings


def plain_table(table: Any) -> Any:
    """``table`` with its tensor columns made plain (the others untouched, no copy)."""
    pa = pyarrow()
    if not any(tensor_shape(f.type) is not None for f in table.schema):
        return table
    columns = []
    for field, column in zip(table.schema, table.columns):
        if tensor_shape(field.type) is None:
            columns.append(column)
        else:
            columns.append(pa.chunked_array([plain_array(c, field.type) for c in column.chunks],
                                            plain_type(field.name, field.type)[0]))
    return pa.table(columns, names=table.schema.names)
