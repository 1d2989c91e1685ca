"""Writing JSON, CSV, TSV and XSV shards (:mod:`.textshards`) to a local directory, byte for byte as
mosaicml-streaming writes them.

:class:`TextShardWriter` is a :class:`~shardstream.format.shardwriter.ShardWriter` with another
sample encoding and shard layout; it keeps that writer's background shard jobs, atomic files,
``finish`` (the index last) and abort. Shards are cut as mosaicml-streaming cuts them: a sample
starts a new shard when the samples' lines would pass ``size_limit`` (the header line and the
meta file are not counted), even when the current shard is empty, which then is written with
no samples.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import wait
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, TextColumnsError, WriterError
from ..units import parse_bytes
from .index import FileInfo
from .shardwriter import DEFAULT_SIZE_LIMIT, MAX_SHARD_BYTES, ShardWriter, store_file
from .textshards import (FIXED_SEPARATORS, TextShardInfo, check_text_encoding, encode_json_sample, sample_value,
                         xsv_field)


#: one encoder for every JSON line: ``json.dumps(obj, sort_keys=True)`` without building one per call
_JSON = json.JSONEncoder(sort_keys=True)
_TYPES = {"str": str, "int": int, "float": float}


def _text_setting(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name}={value!r} must be a non-empty string")
    return value


class TextShardWriter(ShardWriter):
    """Write samples into JSON / CSV / TSV / XSV shards in a local directory. ``format`` is the shard
    format; ``separator`` and ``newline`` are set on the instance before ``__init__`` runs."""

    format = "json"
    separator: Optional[str] = None
    newline: str = "\n"

    def __init__(self, *, columns: dict[str, str], local: str, compression: Optional[str] = None,
                 hashes: Optional[Sequence[str]] = None, size_limit: Optional[int | str] = DEFAULT_SIZE_LIMIT,
                 exist_ok: bool = False, max_workers: Optional[int] = None,
                 on_file: Optional[Callable[[str, str], None]] = None) -> None:
        self._set_columns(columns)
        self._set_file_settings(compression, hashes)
        limit = parse_bytes(size_limit, "size_limit") if size_limit else None
        if limit is not None and limit > MAX_SHARD_BYTES:
            raise InvalidArgumentError(f"`size_limit` must be less than 2**32 bytes (sample offsets are uint32), "
                                       f"got {size_limit!r}; the default is 67108864 (64 MiB)")
        if limit is not None and limit < 0:
            raise InvalidArgumentError(f"`size_limit` must be greater than zero, got {size_limit!r}; "
                                       "None (or 0) writes one shard")
        self.size_limit = limit
        self._start_output(local, exist_ok, max_workers, on_file)
        self.shards: list[TextShardInfo] = []
        self._lock = threading.Lock()
        self._closed = False
        self._reset()

    def _set_columns(self, columns: Any) -> None:
        if not isinstance(columns, dict) or not columns:
            raise InvalidArgumentError(f"columns must be a non-empty dict of name -> encoding, got {columns!r}")
        self.newline = _text_setting(self.newline, "newline")
        if self.format != "json":
            self.separator = _text_setting(FIXED_SEPARATORS.get(self.format, self.separator), "separator")
        for name, enc in columns.items():
            if not isinstance(name, str):
                raise InvalidArgumentError(f"column names must be strings, got {name!r}")
            check_text_encoding(enc, name, self.format)
            for what, mark in (("separator", self.separator), ("newline", self.newline)):
                if mark is not None and mark in name:
                    raise TextColumnsError(f"column name {name!r} contains the {what} {mark!r}; rename the column")
        self.columns = dict(columns)
        self.column_names = sorted(columns)
        self.column_encodings = [columns[n] for n in self.column_names]
        self._types = tuple(_TYPES[enc] for enc in self.column_encodings)

    def _config(self) -> dict[str, Any]:
        return self._info(0, None, None, None, None).config()

    def _info(self, n, raw_data, raw_meta, zip_data, zip_meta) -> TextShardInfo:
        return TextShardInfo(self.format, tuple(sorted(self.columns.items())), self.newline, self.separator,
                             self.compression, tuple(self.hashes), raw_data, raw_meta, n, self.size_limit,
                             zip_data, zip_meta)

    def _reset(self) -> None:
        self._lines: list[bytes] = []
        self._shard_bytes = 0

    # -- writing --------------------------------------------------------------------
    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        """One sample's line, as it lies in the data file."""
        line = self._encode_fast(sample)
        if line is not None:
            return line
        # a missing column, a value of another type or a delimiter in a value: the checks say which
        if self.separator is None:
            return encode_json_sample(self.columns, sample, self.newline)
        fields = [xsv_field(enc, sample_value(sample, name, self.columns), name, self.separator, self.newline)
                  for name, enc in zip(self.column_names, self.column_encodings)]
        return (self.separator.join(fields) + self.newline).encode("utf-8")

    def _encode_fast(self, sample: Any) -> Optional[bytes]:
        """The line of a well-formed sample, the same bytes as the checked path; None for any other."""
        try:
            values = [sample[name] for name in self.column_names]
        except (KeyError, TypeError, IndexError):
            return None
        for value, typ in zip(values, self._types):
            if not isinstance(value, typ):
                return None
        if self.separator is None:
            return (_JSON.encode(dict(zip(self.column_names, values))) + self.newline).encode("utf-8")
        fields = [v if type(v) is str else str(v) for v in values]
        sep, newline = self.separator, self.newline
        for text in fields:
            if sep in text or newline in text:
                return None
        return (sep.join(fields) + newline).encode("utf-8")

    def write(self, sample: dict[str, Any]) -> None:
        """Add one sample; may complete a shard."""
        if self._closed:
            raise WriterError("this writer is finished; create a new writer to write more")
        line = self.encode_sample(sample)
        if self.size_limit is not None and self.size_limit < self._shard_bytes + len(line):
            self._cut()
        self._lines.append(line)
        self._shard_bytes += len(line)

    def write_encoded(self, body, sizes: np.ndarray) -> None:
        raise WriterError(f"{type(self).__name__} takes samples one by one with write()")

    def flush_shard(self) -> None:
        """Complete the current shard (no-op when it holds no samples)."""
        self._check_jobs()
        if self._lines:
            self._cut()

    def _cut(self) -> None:
        """Complete the current shard, even an empty one (as mosaicml-streaming does at a size cut)."""
        self._check_jobs()
        lines = self._lines
        header = b"" if self.separator is None else (self.separator.join(self.column_names) + self.newline).encode()
        offsets = np.zeros(len(lines) + 1, np.int64)
        np.cumsum([len(x) for x in lines], out=offsets[1:])
        offsets += len(header)
        if offsets[-1] > MAX_SHARD_BYTES:
            raise WriterError(f"a shard of {int(offsets[-1])} bytes is past 4 GiB (offsets are uint32); "
                              "set a smaller size_limit")
        config = json.dumps(self._config(), sort_keys=True).encode("utf-8")
        meta = np.uint32(len(lines)).tobytes() + offsets.astype("<u4").tobytes() + config
        data = b"".join([header, *lines])
        index = len(self.shards)
        self.shards.append(None)  # placeholder, filled in order by the worker
        if len(self._pending) >= self._max_pending:  # bound the memory held by shards in flight
            wait(self._pending[:len(self._pending) - self._max_pending + 1])
            self._check_jobs()
        self._pending.append(self._pool.submit(self._store_text_shard, index, len(lines), data, meta))
        self._reset()

    def _store_file(self, raw: bytes, raw_name: str) -> tuple[FileInfo, Optional[FileInfo]]:
        return store_file(self.local, raw, raw_name, self.hashes, self.compression, self._on_file)

    def _store_text_shard(self, index: int, n: int, data: bytes, meta: bytes) -> None:
        name = f"shard.{index:05d}.{self.format}"
        raw_meta, zip_meta = self._store_file(meta, f"{name}.meta")
        raw_data, zip_data = self._store_file(data, name)
        with self._lock:
            self.shards[index] = self._info(n, raw_data, raw_meta, zip_data, zip_meta)
