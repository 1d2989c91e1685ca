"""Which MDS encoding each column of an Arrow schema gets, and checking later inputs against it.

==========================================  =================================================
Arrow type                                  MDS encoding
==========================================  =================================================
int8 ... int64, uint8 ... uint64            the same name (``int64`` -> ``int64``)
float16 / float32 / float64                 the same name
bool                                        ``uint8`` (0 or 1)
string, large_string, string_view           ``str``
binary, large_binary, fixed_size_binary     ``bytes``
list / large_list of a number type          ``ndarray:<dtype>`` (``list<int32>`` -> ``ndarray:int32``)
fixed_size_list<number, n>                  ``ndarray:<dtype>:<n>`` (fixed size: no per-row length)
an HF ``Image`` (struct of bytes and path)  ``jpeg`` / ``png`` (from the first image's bytes) or ``bytes``
decimal                                     ``str_decimal``
timestamp, date, time, duration             ``str`` (ISO 8601 text)
struct, map, list of strings or of lists    ``json``
dictionary<index, value>                    the value type's encoding
==========================================  =================================================

A column of the ``null`` type (every value missing in the rows looked at) has no encoding to infer:
name one with ``columns={"name": "json"}`` (``--columns name:json``).
"""

from __future__ import annotations

from typing import Optional

from ..errors import InvalidArgumentError, SchemaMismatchError
from ..format.arrowrows import pyarrow
from ..format.encodings import get_encoding

_NUMBERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64")
#: Arrow's names of the number types whose MDS encoding has another spelling
_HALF = {"halffloat": "float16", "float": "float32", "double": "float64"}
_IMAGE_MAGIC = ((b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"))


def number_name(t) -> Optional[str]:
    """``int32``, ``float64`` ... for an Arrow number type, else None."""
    name = _HALF.get(str(t), str(t))
    return name if name in _NUMBERS else None


def is_image_struct(t) -> bool:
    """True for the struct an HF ``Image`` feature is stored as: ``{bytes: binary, path: string}``."""
    pa = pyarrow()
    if not pa.types.is_struct(t):
        return False
    names = {t.field(i).name for i in range(t.num_fields)}
    return names == {"bytes", "path"} and pa.types.is_binary(t.field("bytes").type)


def image_encoding(first_bytes: Optional[bytes]) -> str:
    """``jpeg`` or ``png`` for an image's stored bytes (kept as they are), else ``bytes``."""
    for magic, name in _IMAGE_MAGIC:
        if first_bytes and first_bytes.startswith(magic):
            return name
    return "bytes"


def arrow_type_encoding(t, name: str = "?") -> str:
    """The MDS encoding for one Arrow type (see the module's table)."""
    pa = pyarrow()
    types = pa.types
    if types.is_dictionary(t):
        return arrow_type_encoding(t.value_type, name)
    number = number_name(t)
    if number is not None:
        return number
    if types.is_boolean(t):
        return "uint8"
    if types.is_string(t) or types.is_large_string(t) or getattr(types, "is_string_view", lambda _: False)(t):
        return "str"
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "bytes"
    if types.is_fixed_size_list(t) and number_name(t.value_type):
        return f"ndarray:{number_name(t.value_type)}:{t.list_size}"
    if (types.is_list(t) or types.is_large_list(t)) and number_name(t.value_type):
        return f"ndarray:{number_name(t.value_type)}"
    if types.is_decimal(t):
        return "str_decimal"
    if types.is_temporal(t):
        return "str"
    if types.is_struct(t) or types.is_map(t) or types.is_list(t) or types.is_large_list(t) or \
            types.is_fixed_size_list(t):
        return "json"
    if types.is_null(t):
        raise SchemaMismatchError(
            f"column {name!r} holds only nulls in the rows looked at, so its type is unknown; name its encoding, "
            f"e.g. columns={{{name!r}: 'json'}} (--columns {name}:json)")
    raise SchemaMismatchError(f"column {name!r} has Arrow type {t}, which has no MDS encoding; convert it first, "
                              f"or name an encoding with --columns {name}:ENCODING")


def arrow_columns(schema, overrides: Optional[dict[str, str]] = None,
                  first_batch=None) -> dict[str, str]:
    """MDS encodings for the columns of ``schema`` (a ``pyarrow.Schema``), in the schema's order.

    ``overrides`` (column -> encoding) win over the inferred ones and are checked to exist. HF
    ``Image`` columns become ``jpeg`` / ``png`` when the first row of ``first_batch`` holds such bytes.
    """
    overrides = dict(overrides or {})
    for col, enc in overrides.items():
        get_encoding(enc)  # an unknown encoding is refused with the list of known ones
        if col not in schema.names:
            raise InvalidArgumentError(f"columns names {col!r}, which the input does not have; its columns are "
                                       f"{', '.join(schema.names)}")
    columns: dict[str, str] = {}
    for field in schema:
        if field.name in overrides:
            columns[field.name] = overrides[field.name]
        elif is_image_struct(field.type):
            columns[field.name] = image_encoding(_first_image(first_batch, field.name))
        else:
            columns[field.name] = arrow_type_encoding(field.type, field.name)
    return columns


def _first_image(batch, name: str) -> Optional[bytes]:
    if batch is None or batch.num_rows == 0:
        return None
    column = batch.column(batch.schema.get_field_index(name)).field("bytes")
    for value in column.slice(0, 16).to_pylist():
        if value:
            return value
    return None


def parse_columns(specs) -> dict[str, str]:
    """``["id:int64", "tokens:ndarray:int32"]`` (the command line's ``--columns``) or a dict -> dict."""
    if specs is None:
        return {}
    if isinstance(specs, dict):
        return {str(k): str(v) for k, v in specs.items()}
    if isinstance(specs, str):
        specs = [specs]
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, enc = str(spec).partition(":")
        if not sep or not name or not enc:
            raise InvalidArgumentError(f"--columns {spec!r} should be NAME:ENCODING, e.g. tokens:ndarray:int32")
        out[name] = enc
    return out


def check_schema(schema, expected, where: str, cast: bool):
    """The Arrow schema to cast ``schema`` to so it matches ``expected`` (the first input's), or None when it
    already does. Refuses, naming ``where`` and the column, a missing column, and (unless ``cast``) an extra
    column or another type."""
    if schema.equals(expected, check_metadata=False):
        return None
    missing = [n for n in expected.names if n not in schema.names]
    if missing:
        raise SchemaMismatchError(f"{where} has no column {missing[0]!r} (the first input has columns "
                                  f"{', '.join(expected.names)}); convert it on its own, or fix the file")
    extra = [n for n in schema.names if n not in expected.names]
    changed = [n for n in expected.names if not schema.field(n).type.equals(expected.field(n).type)]
    if not cast and (extra or changed):
        what = (f"an extra column {extra[0]!r}" if extra else
                f"column {changed[0]!r} of type {schema.field(changed[0]).type} where the first input has "
                f"{expected.field(changed[0]).type}")
        raise SchemaMismatchError(f"{where} has {what}; with on_schema_mismatch='cast' (--on-schema-mismatch=cast) "
                                  "columns are cast to the first input's types and extra columns dropped")
    return expected
