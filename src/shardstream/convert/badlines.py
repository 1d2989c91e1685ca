"""Naming the line of a JSON Lines input that pyarrow refuses, as the streaming reader names it.

pyarrow's JSON reader says only ``in row N`` of the block it was parsing (16 MiB of the file), which is
not the file's row N once the file is longer than a block. When it refuses a file, the converter reads
the file again, line by line, with the streaming reader's parser (:mod:`shardstream.format.jsonvalues`),
and names the first line that is not valid JSON, not an object, or whose value for a column is of
another JSON type than the column's (the first input's, or the first such value in the file):
``FILE line N: why``, with the file's whole path or URL and the line counted from 1 with blank lines,
as :class:`~shardstream.StreamingDataset` names a bad row. A refusal it cannot place (a type change
inside nested values) still names the file's path.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from ..errors import BadRowError, CorruptShardError, ShardstreamError
from ..format.arrowrows import pyarrow
from ..format.jsonvalues import parse, shown, type_name
from .inputs import InputFile

_WORDS = {"number": "a number", "string": "a string", "boolean": "true or false", "list": "a list",
          "object": "an object"}


def json_lines_error(file: InputFile, lines: Iterable[tuple[int, bytes]], schema, exc: Exception) -> ShardstreamError:
    """The typed error for a JSON Lines input pyarrow refused with ``exc``: :class:`BadRowError` naming the
    line when it is found among ``lines`` (the file's, numbered from 1), else :class:`CorruptShardError`."""
    found = first_bad_line(lines, schema)
    if found is None:
        why = re.sub(r" in row \d+$", "", str(exc))  # the row of a block, not of the file
        return CorruptShardError(f"{file.url} could not be read as JSON Lines ({why}); fix or leave out the file")
    line, why = found
    return BadRowError(f"{file.url} line {line}: {why}; fix or remove the row, or leave the file out of the inputs")


def first_bad_line(lines: Iterable[tuple[int, bytes]], schema=None) -> Optional[tuple[int, str]]:
    """``(number, why)`` of the first of ``lines`` that cannot be a row (see the module docstring), or None."""
    kinds: dict[str, str] = {} if schema is None else {
        f.name: k for f in schema if (k := _arrow_kind(f.type)) is not None}
    for number, line in lines:
        if not line.strip():
            continue
        value, why = parse(line)
        if why is None and type(value) is not dict:
            why = f"it is {type_name(value)}, not a JSON object"
        if why is None:
            why = _misfit(value, kinds)
        if why is not None:
            return number, why
    return None


def _misfit(row: dict, kinds: dict[str, str]) -> Optional[str]:
    """Why a value of ``row`` is of another JSON type than its column's (``kinds``, which grows), or None."""
    for key, value in row.items():
        kind = _json_kind(value)
        if kind is None:
            continue
        want = kinds.setdefault(key, kind)
        if want != kind:
            return (f"column {key!r} holds {shown(value)} ({type_name(value)}), but {_WORDS[want]} in the rows "
                    "before it, which decided its type")
    return None


def _json_kind(value: Any) -> Optional[str]:
    t = type(value)
    if t is bool:
        return "boolean"
    if t is int or t is float:
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(t)


def _arrow_kind(t) -> Optional[str]:
    """The JSON type pyarrow reads as Arrow type ``t`` (None: any)."""
    types = pyarrow().types
    if types.is_integer(t) or types.is_floating(t) or types.is_decimal(t):
        return "number"
    if types.is_boolean(t):
        return "boolean"
    if types.is_string(t) or types.is_large_string(t) or types.is_temporal(t):
        return "string"
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        return "list"
    if types.is_struct(t) or types.is_map(t):
        return "object"
    return None
