"""``index.json``: the list of shards of an MDS dataset (version 2).

:func:`parse_index` validates everything a reader relies on (types, encodings,
compression, hashes, sample counts, safe relative basenames) so that a damaged or
hostile index is refused up front with a message that says what is wrong.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import (CorruptIndexError, IndexJSONError, IndexNotFoundError, NotADatasetError, UnsafePathError,
                      UnsupportedFormatError)
from .compression import parse_compression
from .encodings import Encoding, get_encoding
from .hashing import check_hash

INDEX_BASENAME = "index.json"
INDEX_VERSION = 2


@dataclass(frozen=True)
class FileInfo:
    """One file a shard is made of: its ``basename`` (relative, in the dataset or cache directory), its
    size and the digests known of it. A file that is a byte range of a larger remote file (a piece of
    a Parquet or JSON Lines file, see :mod:`.files`) names that file in ``source``, with the range's
    ``offset`` and the ``version`` of the file the range was listed from."""

    basename: str
    bytes: int
    hashes: dict = field(default_factory=dict)
    source: Optional[str] = None
    offset: int = 0
    version: str = ""

    def to_json(self) -> dict:
        return {"basename": self.basename, "bytes": self.bytes, "hashes": dict(self.hashes)}


@dataclass(frozen=True)
class ShardInfo:
    """One shard's index entry."""

    column_encodings: tuple
    column_names: tuple
    column_sizes: tuple
    compression: Optional[str]
    hashes: tuple
    raw_data: FileInfo
    samples: int
    size_limit: Optional[int]
    zip_data: Optional[FileInfo]
    format: str = "mds"
    version: int = INDEX_VERSION

    @property
    def encodings(self) -> tuple[Encoding, ...]:
        return tuple(get_encoding(e) for e in self.column_encodings)

    @property
    def stored(self) -> FileInfo:
        """The file as it lies in the dataset directory (compressed if compression is set)."""
        return self.zip_data if self.zip_data is not None else self.raw_data

    def to_json(self) -> dict:
        return {
            "column_encodings": list(self.column_encodings),
            "column_names": list(self.column_names),
            "column_sizes": list(self.column_sizes),
            "compression": self.compression,
            "format": self.format,
            "hashes": list(self.hashes),
            "raw_data": self.raw_data.to_json(),
            "samples": self.samples,
            "size_limit": self.size_limit,
            "version": self.version,
            "zip_data": self.zip_data.to_json() if self.zip_data else None,
        }


def check_basename(basename: Any, where: str) -> str:
    """Accept a relative POSIX path inside the dataset directory (``shard.00000.mds`` or
    ``part0/shard.00000.mds`` after a merge); refuse absolute paths and ``..``."""
    if not isinstance(basename, str) or not basename:
        raise CorruptIndexError(f"{where}: basename must be a non-empty string, got {basename!r}")
    normal = posixpath.normpath(basename)
    if (
        basename.startswith(("/", "\\"))
        or "\\" in basename
        or os.path.isabs(basename)
        or (len(basename) > 1 and basename[1] == ":")
        or normal == ".."
        or normal.startswith("../")
        or "\x00" in basename
        or normal == "."
    ):
        raise UnsafePathError(
            f"{where}: basename {basename!r} points outside the dataset directory; "
            f"basenames must be relative paths such as 'shard.00000.mds' (the index may be hostile or damaged)"
        )
    return basename


def file_info(obj: Any, where: str) -> FileInfo:
    if not isinstance(obj, dict):
        raise CorruptIndexError(f"{where}: expected an object with basename/bytes/hashes, got {obj!r:.80}")
    basename = check_basename(obj.get("basename"), where)
    size = obj.get("bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CorruptIndexError(f"{where}: 'bytes' must be a non-negative int, got {size!r}")
    hashes = obj.get("hashes") or {}
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise CorruptIndexError(f"{where}: 'hashes' must map algorithm names to hex digests")
    return FileInfo(basename, size, dict(hashes))


def parse_shard(obj: Any, i: int) -> ShardInfo:
    where = f"index.json shard {i}"
    if not isinstance(obj, dict):
        raise CorruptIndexError(f"{where}: expected an object, got {type(obj).__name__}")
    version = obj.get("version", INDEX_VERSION)
    if version != INDEX_VERSION:
        raise UnsupportedFormatError(f"{where}: shard version {version!r} is not supported (expected 2)")
    fmt = obj.get("format")
    if fmt != "mds":
        from .textshards import TEXT_SHARD_FORMATS, parse_text_shard

        if isinstance(fmt, str) and fmt in TEXT_SHARD_FORMATS:  # mosaicml-streaming's JSON, CSV, TSV and XSV shards
            return parse_text_shard(obj, where)
        raise UnsupportedFormatError(
            f"{where}: format {fmt!r} is not supported; shards are 'mds', 'json', 'csv', 'tsv' or 'xsv'"
        )
    names, encs, sizes = obj.get("column_names"), obj.get("column_encodings"), obj.get("column_sizes")
    if not (isinstance(names, list) and isinstance(encs, list) and isinstance(sizes, list)):
        raise CorruptIndexError(f"{where}: column_names, column_encodings and column_sizes must be lists")
    if not all(isinstance(x, str) for x in names + encs):
        raise CorruptIndexError(f"{where}: column names and encodings must be strings")
    if not all(x is None or (isinstance(x, int) and not isinstance(x, bool)) for x in sizes):
        raise CorruptIndexError(f"{where}: column_sizes must be ints or null")
    if not (len(names) == len(encs) == len(sizes)) or not names:
        raise CorruptIndexError(
            f"{where}: {len(names)} column names, {len(encs)} encodings and {len(sizes)} sizes; "
            "they must be equal and non-zero"
        )
    if len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        raise CorruptIndexError(f"{where}: column names must be unique strings, got {names}")
    for name, enc, size in zip(names, encs, sizes):
        coder = get_encoding(enc)
        if size != coder.size:
            raise CorruptIndexError(
                f"{where}: column {name!r} ({enc}) has size {size!r}, but that encoding is "
                f"{'variable-size (null)' if coder.size is None else f'{coder.size} bytes'}"
            )
    compression, hashes, samples = shard_settings(obj, where)
    raw = file_info(obj.get("raw_data"), f"{where} raw_data")
    zip_data = obj.get("zip_data")
    zinfo = file_info(zip_data, f"{where} zip_data") if zip_data else None
    if compression and zinfo is None:
        raise CorruptIndexError(f"{where}: compression is {compression!r} but zip_data is missing")
    size_limit = obj.get("size_limit")
    return ShardInfo(tuple(encs), tuple(names), tuple(sizes), compression, tuple(hashes), raw,
                     samples, size_limit, zinfo, fmt, version)


def parse_index(obj: Any, source: str = "index.json") -> list[ShardInfo]:
    if not isinstance(obj, dict) or not isinstance(obj.get("shards"), list):
        raise CorruptIndexError(f"{source}: expected an object with a 'shards' list")
    version = obj.get("version")
    if version != INDEX_VERSION:
        raise UnsupportedFormatError(
            f"{source}: index version {version!r} is not supported (expected 2); "
            "rewrite the dataset with a current writer"
        )
    shards = [parse_shard(s, i) for i, s in enumerate(obj["shards"])]
    seen = set()
    for s in shards:
        for f in (s.raw_data, s.zip_data):
            if f is not None and f.basename in seen:
                raise CorruptIndexError(f"{source}: basename {f.basename!r} is listed twice")
        seen.update(f.basename for f in (s.raw_data, s.zip_data) if f is not None)
    return shards


def loads_index(text: bytes | str, source: str = "index.json") -> list[ShardInfo]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:  # also what mosaicml-streaming raises, with the same opening words
        raise IndexJSONError(f"Index file at {source} is empty or corrupted: it is not valid JSON ({exc}); "
                             "rewrite or re-download it",
                             exc.doc, exc.pos) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptIndexError(f"{source} is not valid JSON ({exc}); rewrite or re-download it") from None
    return parse_index(obj, source)


def read_index(dirname: str) -> list[ShardInfo]:
    """Read and validate ``<dirname>/index.json``."""
    path = os.path.join(dirname, INDEX_BASENAME)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        raise IndexNotFoundError(
            f"no {INDEX_BASENAME} in {dirname!r}; is this the dataset directory (or does it need split=...)? "
            "A writer that did not finish leaves no index"
        ) from None
    except NotADirectoryError:
        file = dirname
        while not os.path.isfile(file) and os.path.dirname(file) not in ("", file):
            file = os.path.dirname(file)  # the part of the path that is a file (dirname may add a split)
        raise NotADatasetError(not_a_dataset(file)) from None
    return loads_index(text, path)


def not_a_dataset(location: str) -> str:
    """The message for a dataset location that is a file."""
    return (f"{location!r} is a file; shardstream reads MDS datasets: a directory with {INDEX_BASENAME} and the "
            "shards it lists (write one with MDSWriter), so give that directory instead")


def dumps_index(shards: list[ShardInfo]) -> str:
    return json.dumps({"shards": [s.to_json() for s in shards], "version": INDEX_VERSION}, sort_keys=True)


def write_index_atomic(dirname: str, shards: list[ShardInfo]) -> str:
    """Write ``index.json`` via a temp file, fsync and rename: readers never see half of it."""
    from .atomic import atomic_write

    path = os.path.join(dirname, INDEX_BASENAME)
    atomic_write(path, dumps_index(shards).encode("utf-8"))
    return path


def shard_path(dirname: str, basename: str) -> str:
    return os.path.join(dirname, *basename.split("/"))


def shard_settings(obj: dict, where: str) -> tuple[Optional[str], list, int]:
    """``(compression, hashes, samples)`` of a shard's index entry (any shard format), validated."""
    compression = obj.get("compression") or None
    if compression is not None and not isinstance(compression, str):
        raise CorruptIndexError(f"{where}: compression must be a string or null, got {compression!r:.40}")
    if compression is not None:
        parse_compression(compression)
    hashes = obj.get("hashes") or []
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise CorruptIndexError(f"{where}: 'hashes' must be a list of algorithm names")
    for algo in hashes:
        check_hash(algo)
    samples = obj.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise CorruptIndexError(f"{where}: 'samples' must be a non-negative int, got {samples!r}")
    return compression, hashes, samples
