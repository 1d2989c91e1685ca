"""Formats whose shards are pieces of ordinary data files: Parquet, Arrow, JSON Lines, CSV, text.

Such a dataset has no index file. Its files are listed (a glob, a directory, a list), and each
file is *described* once from what it says of itself: a Parquet file from its footer, a JSON
Lines file from one pass over its lines. A description is the file's :class:`Piece` list:
the natural seekable parts of the file (a Parquet row group, an Arrow record batch, a byte
range of whole lines), each a shard of the plan with its row count. Descriptions are cached
by the storage layer, keyed by the file's size and version, so a dataset opens without
reading its files again.

A piece is read either **in place** (the file is local: the reader opens it and reads the
piece's part) or **through the cache** (``Piece.cached``): the piece's bytes, one ranged read
of the remote file, are a file of their own in the cache directory, downloaded, pinned and
evicted like an MDS shard. A compressed file cannot be read by ranges: it is one piece,
fetched whole and decompressed once into the cache.

This module holds what every such format shares; :mod:`.parquet`, :mod:`.lines` and
:mod:`.arrowipc` are the formats. Storage (``storage/files.py``) lists the files, reads
their descriptions through :meth:`FileFormat.describe` and keeps them.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ..errors import FileChangedError, ShardNotFoundError
from .index import FileInfo, shard_path
from .source import ShardFormat

#: compressed files are one piece each, decompressed into the cache (suffix -> codec name)
COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
PLAIN_SUFFIX = ".plain"  # a compressed file's decompressed copy in the cache
PIECE_SUFFIX = ".piece"  # a byte range of a file, in the cache


@dataclass(frozen=True)
class SourceFile:
    """One data file: its ``name`` relative to the dataset root ('/'-separated), its size, and what
    identifies this version of it (``version``: ETag / generation / modification time and size)."""

    name: str
    bytes: int
    version: str


@dataclass(frozen=True)
class Piece:
    """One shard of a file format: part ``part`` of file ``file``.

    ``start``/``stop`` is the byte range a ranged read fetches (``-1`` for a whole file);
    ``first`` the file's row number of the piece's first row; ``kinds`` one ``(kind, dtype,
    shape)`` per column, as column batches have them; ``types`` the columns' types as the file
    names them (what must agree between files). ``plain_bytes``: a compressed file's size once
    decompressed. ``cached``: read from the cache (True) or from the file in place. ``extra``: what the
    format keeps of the piece for itself (ints, strings, bools; a text format: its first line's number).
    """

    file: str
    file_bytes: int
    version: str
    part: int
    start: int
    stop: int
    samples: int
    first: int
    column_names: tuple
    types: tuple
    kinds: tuple
    plain_bytes: int = 0
    cached: bool = False
    extra: tuple = ()


class RangeSource(Protocol):
    """How a format reads a file it describes (storage gives one per file, local or remote)."""

    name: str  #: the file's name in the dataset, for errors
    url: str  #: where it is, for errors
    size: int

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one ranged request for a remote file)."""

    def open(self) -> Any:
        """The whole file as a binary stream, decompressed when the file is compressed."""


def codec_of(name: str) -> Optional[str]:
    """The compression of file ``name`` from its suffix (None: not compressed)."""
    return COMPRESSED.get(os.path.splitext(name)[1].lower())


def plain_name(name: str) -> str:
    """``name`` without its compression suffix (``a.jsonl.gz`` -> ``a.jsonl``)."""
    return os.path.splitext(name)[0] if codec_of(name) else name


class FileFormat(ShardFormat):
    """A format of data files (see the module docstring). Subclasses give ``name``, ``suffixes``,
    :meth:`describe` and :meth:`open_piece`."""

    index_name = ""
    listing = "files"
    #: file name endings that select this format when ``format=`` is not given
    suffixes: tuple = ()
    #: whether pieces are byte ranges a ranged read can fetch (False: a piece is its whole file)
    ranged = True
    #: how many opened pieces a directory read in place keeps (each holds its decoded rows)
    open_readers = 16

    def describe(self, source: RangeSource, columns: Optional[Sequence[str]], **options: Any) -> tuple[list, bytes]:
        """``(pieces, metadata)`` of one file: its pieces (``cached`` False) and the bytes a cached
        piece needs besides its own to be read (a Parquet footer; ``b""`` for none)."""
        raise NotImplementedError

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> Any:
        """The reader of ``piece`` from ``path``: the file itself (in place) or the piece's own file
        (cached); ``metadata()`` gives the bytes :meth:`describe` returned for its file."""
        raise NotImplementedError

    # -- the protocol of ShardFormat --------------------------------------------------------
    def read_shards(self, dirname: str) -> list:
        raise NotImplementedError("the pieces of data files are listed by the storage layer")

    def parse_index(self, text: bytes, source: str) -> list:
        raise NotImplementedError("data files have no index file")

    def resident_file(self, piece: Piece) -> FileInfo:
        if not piece.cached:
            return FileInfo(piece.file, piece.file_bytes, version=piece.version)
        if codec_of(piece.file):
            return FileInfo(plain_name(piece.file) + PLAIN_SUFFIX, piece.plain_bytes)
        if piece.start < 0:
            return FileInfo(piece.file, piece.file_bytes, source=piece.file, version=piece.version)
        return FileInfo(f"{piece.file}.{piece.part:05d}{PIECE_SUFFIX}", piece.stop - piece.start,
                        source=piece.file, offset=piece.start, version=piece.version)

    def fetched_files(self, piece: Piece) -> list:
        if piece.cached and codec_of(piece.file):
            return [FileInfo(piece.file, piece.file_bytes, source=piece.file, version=piece.version)]
        return [self.resident_file(piece)]

    def prepare(self, dirname: str, piece: Piece, keep_fetched: bool) -> None:
        if piece.cached and codec_of(piece.file):
            from .decompress import decompress_file

            decompress_file(shard_path(dirname, piece.file), shard_path(dirname, self.resident_file(piece).basename),
                            codec_of(piece.file), piece.plain_bytes, keep_fetched)

    def open(self, dirname: str, piece: Piece, validate_hash: Optional[str] = None):
        path = shard_path(dirname, self.resident_file(piece).basename)
        if not piece.cached:
            check_unchanged(path, piece)
        return self.open_piece(path, piece, lambda: read_metadata(dirname, piece))

    def kinds(self, piece: Piece, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return piece_kinds(piece, columns)

    def layout(self, piece: Piece) -> tuple:
        return tuple(piece.column_names), tuple(piece.types)


def piece_kinds(piece: Piece, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
    """``(name, kind, detail)`` per column as :func:`~shardstream.format.batch.column_kinds` gives them."""
    out = []
    for name, (kind, dtype, shape) in zip(piece.column_names, piece.kinds):
        if columns is not None and name not in columns:
            continue
        if kind == "array":
            out.append((name, kind, (np.dtype(dtype), tuple(shape))))
        elif kind == "ragged":
            out.append((name, kind, np.dtype(dtype)))
        else:
            out.append((name, "list", None))
    return out


def local_version(st: os.stat_result) -> str:
    """The version string of a local file (its size and modification time)."""
    return f"{st.st_size}:{st.st_mtime_ns}"


def check_unchanged(path: str, piece: Piece) -> None:
    """Refuse to read a file in place that is missing, or changed since the dataset listed it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ShardNotFoundError(f"data file {path} is missing; it was listed when the dataset was opened. "
                                 "Restore it, or open the dataset again") from None
    now = local_version(st)
    if now != piece.version:
        raise FileChangedError(
            f"data file {path} changed after the dataset listed it (size:mtime {piece.version} -> {now}), so its "
            "rows are no longer the ones the plan counted; open the dataset again to read the new version")


META_DIR = os.path.join(".shardstream", "files")


def metadata_path(dirname: str, piece: Piece) -> str:
    """Where a cache directory keeps the metadata of ``piece``'s file (a Parquet footer)."""
    key = hashlib.sha1(f"{piece.file}@{piece.version}".encode()).hexdigest()
    return os.path.join(dirname, META_DIR, key + ".meta")


def read_metadata(dirname: str, piece: Piece) -> bytes:
    try:
        with open(metadata_path(dirname, piece), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


class ParsedMetadata:
    """Metadata parsed from data files (Parquet footers, Arrow schemas), kept per process by file and
    version: the pieces of one file share one parse. ``keep`` files at most, the least recent dropped."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self.items: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, path: str, piece: Piece, parse: Callable[[], Any]) -> Any:
        """The parsed metadata of ``piece``'s file, from ``parse()`` the first time."""
        key = (piece.file, piece.version, piece.cached and os.path.dirname(path))
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
                return found
        found = parse()
        with self.lock:
            self.items[key] = found
            while len(self.items) > self.keep:
                self.items.popitem(last=False)
        return found
