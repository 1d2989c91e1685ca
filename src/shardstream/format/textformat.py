"""Reading mosaicml-streaming's JSON, CSV, TSV and XSV shards (:mod:`.textshards`) through the engine.

Each is a registered :class:`~shardstream.format.source.ShardFormat` (``mds-json``, ``mds-csv``,
``mds-tsv``, ``mds-xsv``; the data-file formats ``json`` and ``csv`` are another thing). A dataset's
``index.json`` may list shards of several formats, as mosaicml-streaming allows; :data:`INDEX_FORMAT`,
the format registered as ``mds``, hands each shard to the format its entry names, so these shards
stream through the same plan, cache, download, resume and mixing as MDS shards.

A shard is fetched as its meta file, then its data file (each compressed when the entry says so);
the data file is the resident one, decompressed last, so a shard whose data file is present at its
size is whole.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import CorruptShardError, InvalidArgumentError, SampleIndexError, ShardNotFoundError
from .atomic import atomic_write
from .compression import decompress
from .index import FileInfo, shard_path
from .mds import MDS_FORMAT, MDSFormat
from .reader import Buffer, check_digests, map_file
from .source import ShardFormat, ShardRows, get_format
from .textshards import TEXT_SHARD_FORMATS, TextShardInfo, decode_xsv_field

_U32 = struct.Struct("<I")
_KINDS = {"int": ("array", (np.dtype(np.int64), ())), "float": ("array", (np.dtype(np.float64), ())),
          "str": ("list", None)}


class TextRows(ShardRows):
    """Random access to the samples of one JSON/CSV/TSV/XSV shard: its data file and its meta file."""

    def __init__(self, info: TextShardInfo, data: Buffer, meta: Buffer) -> None:
        self.info = info
        self.samples = info.samples
        self.column_names = info.column_names
        self.data = data
        self.offsets = _offsets(info, meta, len(data))
        self._fields = tuple((name, enc, enc == "str") for name, enc in info.columns)

    def get(self, i: int) -> dict[str, Any]:
        if not -self.samples <= i < self.samples:
            raise SampleIndexError(f"sample {i} is out of range for shard {self.info.raw_data.basename!r} "
                                   f"of {self.samples} samples")
        return self.get_unchecked(i % self.samples)

    def get_unchecked(self, i: int) -> dict[str, Any]:
        line = bytes(self.data[int(self.offsets[i]):int(self.offsets[i + 1])]).decode("utf-8")
        info = self.info
        if info.separator is None:
            return json.loads(line)
        parts = line[:len(line) - len(info.newline)].split(info.separator)
        if len(parts) != len(self._fields):
            raise CorruptShardError(f"shard {info.raw_data.basename!r} sample {i} has {len(parts)} fields, "
                                    f"expected {len(self._fields)}; the file is damaged")
        return {name: part if plain else decode_xsv_field(enc, part)
                for (name, enc, plain), part in zip(self._fields, parts)}

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return text_kinds(self.info, columns)


def text_kinds(info: TextShardInfo, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
    """Batches hold ``int`` and ``float`` columns as int64 / float64 arrays, ``str`` columns as lists."""
    return [(name, *_KINDS[enc]) for name, enc in info.columns if columns is None or name in columns]


def _offsets(info: TextShardInfo, meta: Buffer, data_size: int) -> np.ndarray:
    where = f"shard {info.raw_meta.basename!r}"
    if len(meta) < 8 or _U32.unpack_from(meta, 0)[0] != info.samples or len(meta) < 4 * (info.samples + 2):
        raise CorruptShardError(f"{where} does not start with the {info.samples} samples and their offsets the "
                                "index lists; the file is damaged or belongs to another dataset")
    offsets = np.frombuffer(meta, "<u4", info.samples + 1, 4).astype(np.int64)
    if np.any(np.diff(offsets) < 0) or offsets[-1] > data_size:
        raise CorruptShardError(f"{where}: its offsets run past the {data_size} bytes of "
                                f"{info.raw_data.basename!r} or backwards; the files are damaged")
    return offsets


def _decompressed(dirname: str, raw: FileInfo, packed: Optional[FileInfo], info: TextShardInfo,
                  write: bool, keep_zip: bool) -> Buffer:
    """The bytes of ``raw``: the file if present, else decompressed from ``packed`` (and written beside it)."""
    raw_path = shard_path(dirname, raw.basename)
    if os.path.exists(raw_path) or packed is None:
        try:
            return map_file(raw_path)
        except FileNotFoundError:
            raise ShardNotFoundError(f"file {raw.basename!r} listed in the index is missing from {dirname!r}") from None
    zip_path = shard_path(dirname, packed.basename)
    try:
        with open(zip_path, "rb") as f:
            zbuf = f.read()
    except FileNotFoundError:
        raise ShardNotFoundError(f"file {packed.basename!r} listed in the index is missing from {dirname!r}") from None
    data = decompress(info.compression, zbuf, raw.bytes, packed.basename)
    if write:
        try:
            atomic_write(raw_path, data, fsync=False)
        except OSError:
            return data  # a read-only dataset directory: served from memory
        if not keep_zip:
            try:
                os.unlink(zip_path)
            except OSError:
                pass
    return data


def open_text_shard(dirname: str, info: TextShardInfo, validate_hash: Optional[str] = None,
                    keep_zip: bool = True) -> TextRows:
    """Open a text shard of the dataset in ``dirname``, decompressing its files first where only the
    compressed ones are there (meta first, so a present data file means a whole shard)."""
    meta = _decompressed(dirname, info.raw_meta, info.zip_meta, info, True, keep_zip)
    data = _decompressed(dirname, info.raw_data, info.zip_data, info, True, keep_zip)
    if validate_hash:
        check_digests(info.raw_meta.hashes, meta, info.raw_meta.basename, [validate_hash])
        check_digests(info.raw_data.hashes, data, info.raw_data.basename, [validate_hash])
    return TextRows(info, data, meta)


def _name_of(shard_format: str) -> str:
    return TEXT_SHARD_FORMATS.get(shard_format, shard_format)


class TextShardFormat(ShardFormat):
    """One of mosaicml-streaming's text shard formats; ``shard_format`` is its name in ``index.json``."""

    index_name = "index.json"

    def __init__(self, shard_format: str) -> None:
        self.shard_format = shard_format
        self.name = TEXT_SHARD_FORMATS[shard_format]

    def read_shards(self, dirname: str) -> list:
        return self._only_mine(get_format("mds").read_shards(dirname), dirname)

    def parse_index(self, text: bytes, source: str) -> list:
        return self._only_mine(get_format("mds").parse_index(text, source), source)

    def _only_mine(self, shards: list, where: str) -> list:
        """``shards`` if each is of this format; a dataset listing others is refused, not misread."""
        for shard in shards:
            fmt = getattr(shard, "format", "mds")
            if fmt != self.shard_format:
                raise InvalidArgumentError(
                    f"format={self.name!r} reads {self.shard_format.upper()} shards, but the index at {where!r} "
                    f"lists {shard.raw_data.basename!r} of format {fmt!r}; leave format= out (an index.json "
                    f"dataset is read by the format each shard names) or pass format={_name_of(fmt)!r}")
        return shards

    def fetched_files(self, shard: TextShardInfo) -> list[FileInfo]:
        return [shard.stored_meta, shard.stored]

    def resident_file(self, shard: TextShardInfo) -> FileInfo:
        return shard.raw_data

    def owned_files(self, shard: TextShardInfo) -> list[FileInfo]:
        files = [shard.raw_data, shard.raw_meta, shard.zip_data, shard.zip_meta]
        return [f for f in files if f is not None]

    def footprint(self, shard: TextShardInfo, fetched: bool) -> int:
        files = self.owned_files(shard) if fetched else [shard.raw_data, shard.raw_meta]
        return sum(f.bytes for f in files)

    def prepare(self, dirname: str, shard: TextShardInfo, keep_fetched: bool) -> None:
        open_text_shard(dirname, shard, None, keep_zip=keep_fetched)  # decompresses; checks the meta file

    def open(self, dirname: str, shard: TextShardInfo, validate_hash: Optional[str] = None) -> TextRows:
        return open_text_shard(dirname, shard, validate_hash, keep_zip=True)

    def kinds(self, shard: TextShardInfo, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return text_kinds(shard, columns)

    def layout(self, shard: TextShardInfo) -> tuple:
        return shard.column_names, shard.column_encodings


JSON_SHARDS = TextShardFormat("json")
CSV_SHARDS = TextShardFormat("csv")
TSV_SHARDS = TextShardFormat("tsv")
XSV_SHARDS = TextShardFormat("xsv")


class IndexFormat(MDSFormat):
    """``index.json`` datasets: each shard read by the format its entry names (MDS, or a text format)."""

    def _of(self, shard) -> ShardFormat:
        fmt = getattr(shard, "format", "mds")
        return MDS_FORMAT if fmt == "mds" else get_format(TEXT_SHARD_FORMATS[fmt])

    def fetched_files(self, shard) -> list[FileInfo]:
        return self._of(shard).fetched_files(shard)

    def resident_file(self, shard) -> FileInfo:
        return self._of(shard).resident_file(shard)

    def owned_files(self, shard) -> list[FileInfo]:
        return self._of(shard).owned_files(shard)

    def footprint(self, shard, fetched: bool) -> int:
        return self._of(shard).footprint(shard, fetched)

    def prepare(self, dirname: str, shard, keep_fetched: bool) -> None:
        self._of(shard).prepare(dirname, shard, keep_fetched)

    def open(self, dirname: str, shard, validate_hash: Optional[str] = None) -> ShardRows:
        return self._of(shard).open(dirname, shard, validate_hash)

    def kinds(self, shard, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return self._of(shard).kinds(shard, columns)

    def layout(self, shard) -> tuple:
        return self._of(shard).layout(shard)

    def unsafe_columns(self, shard) -> list[tuple[str, str]]:
        return self._of(shard).unsafe_columns(shard)


INDEX_FORMAT = IndexFormat()
