"""Parquet files as shards: one piece per row group, found from the file's footer alone.

Describing a file reads its footer with one ranged read of its last 64 KiB (a second one only
when the footer is larger). Each non-empty row group is a piece whose byte range covers the
column chunks of the selected columns, so a remote piece is fetched with one ranged read of
just those bytes, and a resumed reader opens the row group it needs directly. The footer is
kept with the description; a cached piece is read as the row group of a file made of its own
bytes and that footer, so nothing else of the file is ever fetched.
"""

from __future__ import annotations

import io
import os

import numpy as np
from typing import Any, Callable, Optional, Sequence

from ..errors import CorruptShardError, InvalidArgumentError, ShardNotFoundError
from .arrowrows import batch_values, pyarrow, row_values, schema_kinds, slice_batch
from .batch import take_rows
from .files import FileFormat, ParsedMetadata, Piece, RangeSource
from .columnrows import ValueRows

MAGIC = b"PAR1"
TAIL = 1 << 16  # bytes read from the end of a file to find its footer, in one request


def _pq():
    pyarrow()
    import pyarrow.parquet as pq

    return pq


def footer_of(source: RangeSource) -> bytes:
    """The footer of a Parquet file (its metadata, length and magic), in one or two ranged reads."""
    size = source.size
    if size < 12:
        raise CorruptShardError(f"{source.url} is {size} bytes long, too short for a Parquet file; it is empty or "
                                "truncated: write it again or leave it out")
    tail = source.read(max(0, size - TAIL), min(size, TAIL))
    if tail[-4:] != MAGIC:
        raise CorruptShardError(f"{source.url} does not end with the Parquet magic bytes: it is truncated or not a "
                                "Parquet file; write it again, or give format= for another format")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise CorruptShardError(f"{source.url}: its footer claims {length} bytes, more than the file holds "
                                f"({size}); the file is truncated: write it again")
    if length + 8 > len(tail):
        tail = source.read(size - length - 8, length + 8)
    return tail[-(length + 8):]


def parse_footer(footer: bytes, where: str):
    """The ``FileMetaData`` of a footer (as :func:`footer_of` returns it)."""
    pa = pyarrow()
    try:
        return _pq().read_metadata(pa.BufferReader(MAGIC + footer))
    except Exception as exc:  # pyarrow raises OSError / ArrowInvalid for a damaged footer
        raise CorruptShardError(f"{where}: the Parquet footer cannot be read ({exc}); the file is damaged or "
                                "truncated: write it again") from None


def _chunk_range(chunk) -> tuple[int, int]:
    offsets = [o for o in (chunk.dictionary_page_offset if chunk.has_dictionary_page else None,
                           chunk.data_page_offset) if o]
    start = min(offsets) if offsets else chunk.file_offset
    return start, start + chunk.total_compressed_size


def _leaves(meta, names: Sequence[str], where: str) -> list[int]:
    """The leaf column indices of the top-level columns ``names``."""
    found: dict[str, list[int]] = {}
    for j in range(meta.num_columns):
        found.setdefault(meta.schema.column(j).path.split(".")[0], []).append(j)
    out = []
    for name in names:
        if name not in found:
            raise InvalidArgumentError(f"column {name!r} is not in {where} (it has {sorted(found)}); fix columns=")
        out += found[name]
    return out


class ParquetFormat(FileFormat):
    name = "parquet"
    suffixes = (".parquet", ".pq", ".parq")

    def describe(self, source: RangeSource, columns: Optional[Sequence[str]], **options: Any) -> tuple[list, bytes]:
        footer = footer_of(source)
        meta = parse_footer(footer, source.url)
        schema = meta.schema.to_arrow_schema()
        names, types, kinds = schema_kinds(schema)
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise InvalidArgumentError(
                    f"column {missing[0]!r} is not in {source.url} (it has {list(names)}); fix columns=")
            keep = [names.index(c) for c in columns]
            names, types, kinds = (tuple(x[k] for k in keep) for x in (names, types, kinds))
        leaves = _leaves(meta, names, source.url)
        pieces, first = [], 0
        for k in range(meta.num_row_groups):
            rg = meta.row_group(k)
            if rg.num_rows and leaves:
                ranges = [_chunk_range(rg.column(j)) for j in leaves]
                start, stop = min(r[0] for r in ranges), max(r[1] for r in ranges)
                pieces.append(Piece(source.name, source.size, "", k, start, stop, rg.num_rows, first,
                                    names, types, kinds))
            first += rg.num_rows
        return pieces, footer

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> "ParquetRows":
        pq = _pq()
        meta = _metadata(path, piece, metadata)
        try:
            if piece.cached:
                handle = _RangeFile(path, piece.start, piece.file_bytes)
                table = pq.ParquetFile(handle, metadata=meta).read_row_group(piece.part, list(piece.column_names),
                                                                                  use_threads=False)
            else:
                table = pq.ParquetFile(path, metadata=meta).read_row_group(piece.part, list(piece.column_names),
                                                                           use_threads=False)
        except FileNotFoundError:
            raise ShardNotFoundError(f"{path} is missing; restore it or open the dataset again") from None
        except (OSError, ValueError) as exc:
            raise CorruptShardError(f"row group {piece.part} of {piece.file} cannot be read ({exc}); the file is "
                                    "damaged: write it again") from None
        if table.num_rows != piece.samples:
            raise CorruptShardError(f"row group {piece.part} of {piece.file} has {table.num_rows} rows, but "
                                    f"{piece.samples} when the dataset listed it; open the dataset again")
        return ParquetRows(table, piece, path)


FOOTERS = ParsedMetadata()  # footers parsed in this process, by file and version


def _metadata(path: str, piece: Piece, metadata: Callable[[], bytes]):
    return FOOTERS.get(path, piece, lambda: _parse_metadata(path, piece, metadata))


def _parse_metadata(path: str, piece: Piece, metadata: Callable[[], bytes]):
    if piece.cached:
        footer = metadata()
        if not footer:
            raise ShardNotFoundError(f"the footer of {piece.file} is missing from the cache; open the dataset "
                                     "again (it is read again from the remote)")
        return parse_footer(footer, piece.file)
    try:
        return _pq().read_metadata(path)
    except FileNotFoundError:
        raise ShardNotFoundError(f"{path} is missing; restore it or open the dataset again") from None
    except (OSError, ValueError) as exc:
        raise CorruptShardError(f"{path}: the Parquet footer cannot be read ({exc}); write it again") from None


class _RangeFile(io.RawIOBase):
    """A file of ``size`` bytes of which only ``[start, start + len(local file))`` is here, in ``path``:
    what a cached row group is read through (a read outside it is a damaged cache)."""

    def __init__(self, path: str, start: int, size: int) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY)
        self._start, self._size, self._pos = start, size, 0
        self._stop = start + os.fstat(self._fd).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else (self._pos + offset if whence == 1 else self._size + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self._size - self._pos
        if self._pos < self._start or self._pos + n > self._stop:
            raise OSError(f"bytes {self._pos}..{self._pos + n} are outside the cached range "
                          f"{self._start}..{self._stop}")
        data = os.pread(self._fd, n, self._pos - self._start)
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class ParquetRows(ValueRows):
    """The rows of one row group (or Arrow record batch), decoded once when opened."""

    def __init__(self, table, piece: Piece, path: str) -> None:
        self.table, self.piece, self.path = table, piece, path
        self.samples = table.num_rows
        self.column_names = tuple(piece.column_names)
        self._values: Optional[list] = None  # per-row values, made when samples are first read
        self._whole: Optional[dict] = None  # all rows in batch form, made when batches are first read

    @property
    def row_columns(self) -> list:
        if self._values is None:
            self._values = row_values(self.table, self.column_names)
        return self._values

    def _batch(self, columns: Optional[Sequence[str]]) -> dict[str, Any]:
        """The piece's columns in batch form (numpy arrays, Ragged, lists), made once for all its rows."""
        whole = self._whole if self._whole is not None else {}
        self._whole = whole
        names = [n for n in self.column_names if columns is None or n in columns]
        missing = [(n, k) for n, k in zip(self.column_names, self.piece.kinds) if n in names and n not in whole]
        if missing:
            whole.update(batch_values(self.table, [n for n, _ in missing], [k for _, k in missing]))
        return {n: whole[n] for n in names}

    def batch_rows(self, rows, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        return take_rows(self._batch(columns), np.asarray(rows, np.int64).reshape(-1))

    def batch_range(self, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        return slice_batch(self._batch(columns), lo, hi)


PARQUET_FORMAT = ParquetFormat()
