"""mosaicml-streaming's text shard formats, JSON and XSV (CSV, TSV, any separator): their index
entries, the values their columns hold, and the bytes of one sample.

A text shard is two files: the data file, one line per sample (an XSV shard starts with a header
line of the column names), and a ``.meta`` file::

    uint32 num_samples
    uint32 offsets[num_samples + 1]   byte offsets of each sample in the data file, then its end
    config JSON                       the shard's writing settings (its index entry less the files)

Both files are compressed when the index entry names a compression (``zip_data``, ``zip_meta``).
Columns hold ``str``, ``int`` or ``float``; an XSV value is written as ``str(value)`` and may hold
neither the separator nor the newline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import (
    ColumnTypeError,
    CorruptIndexError,
    DelimiterInValueError,
    MissingColumnError,
    TextColumnsError,
)
from .index import INDEX_VERSION, FileInfo, file_info, shard_settings

#: the ``format`` of a text shard in ``index.json`` -> the name of its shard format in the registry
TEXT_SHARD_FORMATS = {"json": "mds-json", "csv": "mds-csv", "tsv": "mds-tsv", "xsv": "mds-xsv"}
#: the separator CSV and TSV shards imply (their index entries do not record it)
FIXED_SEPARATORS = {"csv": ",", "tsv": "\t"}
_TYPES = {"str": str, "int": int, "float": float}


def check_text_encoding(encoding: Any, name: Any, fmt: str) -> str:
    """``encoding`` if a column of a ``fmt`` shard may use it (``str``, ``int``, ``float``)."""
    if encoding not in _TYPES:
        raise TextColumnsError(
            f"column {name!r}: encoding {encoding!r} is not one of {fmt.upper()} shards' encodings "
            f"({', '.join(_TYPES)}); use MDSWriter for other types")
    return encoding


def check_value(encoding: str, value: Any, name: str) -> Any:
    """``value`` if it has the type of its column (mosaicml-streaming's rule: ``isinstance``)."""
    if not isinstance(value, _TYPES[encoding]):
        raise ColumnTypeError(
            f"column {name!r} ({encoding}) got a {type(value).__name__} ({value!r:.40}); "
            f"convert it to {encoding} first")
    return value


def xsv_field(encoding: str, value: Any, name: str, separator: str, newline: str) -> str:
    """One XSV field: ``str(value)``, refused if it holds the separator or the newline."""
    text = str(check_value(encoding, value, name))
    for what, mark in (("separator", separator), ("newline", newline)):
        if mark in text:
            raise DelimiterInValueError(
                f"column {name!r}: value {text!r:.60} contains the {what} {mark!r}, which would split the "
                "row; remove it, or write a JSON shard (JSONWriter) that quotes text")
    return text


def sample_value(sample: Any, name: str, columns) -> Any:
    try:
        return sample[name]
    except KeyError:
        raise MissingColumnError(f"sample has no column {name!r}; expected columns {sorted(columns)}") from None
    except TypeError:
        raise ColumnTypeError(f"a sample must be a dict of column -> value, got {type(sample).__name__}") from None


def encode_json_sample(columns: dict, sample: Any, newline: str) -> bytes:
    """One JSON shard line: the sample's columns as a JSON object with sorted keys."""
    obj = {name: check_value(enc, sample_value(sample, name, columns), name) for name, enc in columns.items()}
    return (json.dumps(obj, sort_keys=True) + newline).encode("utf-8")


def decode_xsv_field(encoding: str, text: str) -> Any:
    return text if encoding == "str" else _TYPES[encoding](text)


@dataclass(frozen=True)
class TextShardInfo:
    """One JSON, CSV, TSV or XSV shard's index entry. ``columns`` is the name -> encoding mapping;
    ``separator`` is None for JSON shards."""

    format: str
    columns: tuple  # ((name, encoding), ...) sorted by name
    newline: str
    separator: Optional[str]
    compression: Optional[str]
    hashes: tuple
    raw_data: FileInfo
    raw_meta: FileInfo
    samples: int
    size_limit: Optional[int]
    zip_data: Optional[FileInfo]
    zip_meta: Optional[FileInfo]
    version: int = INDEX_VERSION

    @property
    def column_names(self) -> tuple:
        return tuple(name for name, _ in self.columns)

    @property
    def column_encodings(self) -> tuple:
        return tuple(enc for _, enc in self.columns)

    @property
    def stored(self) -> FileInfo:
        return self.zip_data if self.zip_data is not None else self.raw_data

    @property
    def stored_meta(self) -> FileInfo:
        return self.zip_meta if self.zip_meta is not None else self.raw_meta

    def config(self) -> dict:
        """The writing settings, as the ``.meta`` file and the index entry record them."""
        obj = {"version": self.version, "format": self.format, "compression": self.compression,
               "hashes": list(self.hashes), "size_limit": self.size_limit, "newline": self.newline}
        if self.format == "json":
            obj["columns"] = dict(self.columns)
        else:
            obj["column_names"] = list(self.column_names)
            obj["column_encodings"] = list(self.column_encodings)
            if self.format == "xsv":
                obj["separator"] = self.separator
        return obj

    def to_json(self) -> dict:
        files = {"raw_data": self.raw_data, "raw_meta": self.raw_meta, "zip_data": self.zip_data,
                 "zip_meta": self.zip_meta}
        obj = {key: f.to_json() if f is not None else None for key, f in files.items()}
        obj["samples"] = self.samples
        obj.update(self.config())
        return obj


def _text(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise CorruptIndexError(f"{where}: {key!r} must be a non-empty string, got {value!r:.40}")
    return value


def _columns(obj: dict, fmt: str, where: str) -> tuple:
    if fmt == "json":
        columns = obj.get("columns")
        if not isinstance(columns, dict) or not columns:
            raise CorruptIndexError(f"{where}: 'columns' must map column names to encodings")
        pairs = sorted(columns.items())
    else:
        names, encs = obj.get("column_names"), obj.get("column_encodings")
        if not (isinstance(names, list) and isinstance(encs, list)) or len(names) != len(encs) or not names:
            raise CorruptIndexError(f"{where}: column_names and column_encodings must be lists of one length")
        pairs = list(zip(names, encs))
    for name, enc in pairs:
        if not isinstance(name, str) or not isinstance(enc, str) or enc not in _TYPES:
            raise CorruptIndexError(f"{where}: column {name!r} has encoding {enc!r}; "
                                    f"{fmt} shards hold {', '.join(_TYPES)}")
    return tuple(pairs)


def parse_text_shard(obj: dict, where: str) -> TextShardInfo:
    """A JSON/CSV/TSV/XSV shard's index entry (``obj['format']`` is one of those), validated."""
    fmt = obj["format"]
    newline = _text(obj, "newline", where)
    separator = FIXED_SEPARATORS.get(fmt) or (None if fmt == "json" else _text(obj, "separator", where))
    compression, hashes, samples = shard_settings(obj, where)
    files = {}
    for key in ("raw_data", "raw_meta", "zip_data", "zip_meta"):
        files[key] = file_info(obj[key], f"{where} {key}") if obj.get(key) else None
    for key in ("raw_data", "raw_meta"):
        if files[key] is None:
            raise CorruptIndexError(f"{where}: {key!r} is missing; a {fmt} shard has a data and a meta file")
    if compression and (files["zip_data"] is None or files["zip_meta"] is None):
        raise CorruptIndexError(f"{where}: compression is {compression!r} but zip_data or zip_meta is missing")
    size_limit = obj.get("size_limit")
    return TextShardInfo(fmt, _columns(obj, fmt, where), newline, separator, compression, tuple(hashes),
                         files["raw_data"], files["raw_meta"], samples, size_limit, files["zip_data"],
                         files["zip_meta"])
