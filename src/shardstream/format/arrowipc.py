"""Arrow IPC files as shards: one piece per record batch, found from the messages' headers alone.

Both Arrow IPC layouts are read: the *file* format (``ARROW1`` magic, a footer; what
``pyarrow.feather`` and ``pa.ipc.new_file`` write) and the *stream* format (what
``datasets.Dataset.save_to_disk`` writes as ``data-00000-of-00001.arrow``). The body of the file
format is a stream too, so one walk serves both: each message is a length-prefixed header (a
small flatbuffer, parsed here) followed by a body whose length the header gives, so the walk
reads headers and jumps over bodies. A large batch costs one small read at its start
(:data:`HEADER` bytes: its header and the first bytes of its body, not the rest). Small batches
are read through instead, in windows with their neighbours: :data:`WINDOW` bytes in place, and
:data:`THROUGH` bytes for a remote file, where one request of a few MiB costs about what one of a
few bytes does (``save_to_disk`` writes batches of 1,000 rows, often a few hundred KB: describing
such a file reads most of it, in a few large requests rather than one per batch).

Each non-empty record batch is a piece whose byte range is its whole message, so a cached piece
is one ranged read. The file's *head* (its schema message and the dictionaries sent before the
first batch) is the description's metadata: a cached piece is decoded from the head and its own
bytes, nothing else of the file. Read in place, a file is memory-mapped and a batch decoded
without copying its buffers. A file that replaces or extends a dictionary after its first batch
(rare) is one piece, read whole; so is a compressed file (``.arrow.zst``), decompressed once into
the cache. ``columns=`` selects columns after decoding (a record batch's columns share one body).
Feather V1 files (``FEA1``) are refused with the way to rewrite them.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..errors import (
    CorruptShardError,
    InvalidArgumentError,
    ShardNotFoundError,
    ShardstreamError,
    UnsupportedFormatError,
)
from .arrowrows import pyarrow, schema_kinds
from .files import FileFormat, ParsedMetadata, Piece, RangeSource, codec_of
from .parquet import ParquetRows

FILE_MAGIC = b"ARROW1"
CONTINUATION = b"\xff\xff\xff\xff"
WINDOW = 1 << 16  # bytes read at once after a small message, in place: its header, and small neighbours whole
THROUGH = 8 << 20  # the same for a remote file: requests, not bytes, are what cost there
HEADER = 1 << 12  # bytes read at a message start after a large one: its header (a wide schema's may need more)
# message header kinds (Arrow's MessageHeader union)
SCHEMA, DICTIONARY, RECORD_BATCH = 1, 2, 3
_KIND_NAMES = {4: "a tensor", 5: "a sparse tensor"}


# -- the message headers (a minimal flatbuffer reader: tables, scalars, offsets) ----------------

def _table(buf: bytes, pos: int) -> tuple[int, int, int]:
    """``(table, vtable, vtable length)`` of the table at ``pos``."""
    vt = pos - struct.unpack_from("<i", buf, pos)[0] if 0 <= pos <= len(buf) - 4 else -1
    if not 0 <= vt <= len(buf) - 4:  # a damaged header: refused as one (negative offsets would wrap)
        raise struct.error(f"a table at {pos} with its vtable at {vt} is outside the {len(buf)}-byte header")
    return pos, vt, struct.unpack_from("<H", buf, vt)[0]


def _field(buf: bytes, table: tuple[int, int, int], i: int) -> int:
    """Where field ``i`` of ``table`` is (0: absent, its default applies)."""
    pos, vt, vt_len = table
    if 4 + 2 * i >= vt_len:
        return 0
    off = struct.unpack_from("<H", buf, vt + 4 + 2 * i)[0]
    if off and pos + off >= len(buf):
        raise struct.error(f"field {i} of the table at {pos} is outside the {len(buf)}-byte header")
    return pos + off if off else 0


def _scalar(buf: bytes, table, i: int, fmt: str, default: int = 0) -> int:
    at = _field(buf, table, i)
    return struct.unpack_from(fmt, buf, at)[0] if at else default


def _child(buf: bytes, table, i: int):
    at = _field(buf, table, i)
    return _table(buf, at + struct.unpack_from("<I", buf, at)[0]) if at else None


@dataclass(frozen=True)
class Message:
    """One message of an IPC stream: bytes ``[start, stop)`` of the file, its kind, the rows of a
    record batch, and whether a dictionary batch extends (rather than sets) its dictionary."""

    start: int
    stop: int
    kind: int
    rows: int = 0
    delta: bool = False


def parse_header(meta: bytes) -> tuple[int, int, int, bool]:
    """``(kind, body length, rows, delta)`` of a message's flatbuffer header."""
    msg = _table(meta, struct.unpack_from("<I", meta, 0)[0])
    kind = _scalar(meta, msg, 1, "<B")
    body = _scalar(meta, msg, 3, "<q")
    header = _child(meta, msg, 2)
    rows, delta = 0, False
    if kind == RECORD_BATCH and header is not None:
        rows = _scalar(meta, header, 0, "<q")
    elif kind == DICTIONARY and header is not None:
        delta = bool(_scalar(meta, header, 2, "<B"))
    return kind, body, rows, delta


class _Window:
    """Reads of a file through one window (one ranged request per window) of ``chunk`` bytes: the walk
    sets it to ``through`` (:data:`WINDOW` or :data:`THROUGH`) after a message whose body is under an
    eighth of that, to :data:`HEADER` after a larger one."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, through: int = WINDOW) -> None:
        self._read, self.size, self.through = read, size, through
        self._at, self._data = 0, b""
        self._first = b""  # the first window, kept: the file's head is read from it at the end
        self.chunk = through

    def after(self, body: int) -> None:
        """Size the next read for what follows a message with a ``body``-byte body."""
        self.chunk = self.through if body < self.through // 8 else HEADER

    def read(self, offset: int, n: int) -> bytes:
        if offset + n <= len(self._first):
            return self._first[offset:offset + n]
        if not (self._at <= offset and offset + n <= self._at + len(self._data)):
            self._at = offset
            self._data = self._read(offset, min(max(n, self.chunk), self.size - offset))
            if offset == 0:
                self._first = self._data
        return self._data[offset - self._at:offset - self._at + n]


def walk(read: Callable[[int, int], bytes], size: int, where: str, until_batch: bool = False) -> list[Message]:
    """The messages of the IPC stream in a file of ``size`` bytes (``read(offset, n)`` reads it), up to
    its end-of-stream marker; ``until_batch``: stop before the first record batch (the head)."""
    return walk_window(_Window(read, size), where, until_batch)


def walk_window(window: "_Window", where: str, until_batch: bool = False) -> list[Message]:
    """:func:`walk` through ``window``, which later reads of the same file can share."""
    size = window.size
    start = window.read(0, min(size, 8))
    if start[:4] == b"FEA1":
        raise UnsupportedFormatError(
            f"{where} is a Feather V1 file, which has no record batches to read by ranges; rewrite it as "
            "Feather V2 / Arrow IPC: pyarrow.feather.write_feather(pyarrow.feather.read_table(path), path)")
    end, pos = size, 0
    if start[:6] == FILE_MAGIC:
        tail = window.read(size - 10, 10) if size >= 18 else b""
        if tail[-6:] != FILE_MAGIC:
            raise CorruptShardError(f"{where} starts like an Arrow IPC file but does not end with its magic "
                                    "bytes: it is truncated; write it again")
        end, pos = size - 10 - struct.unpack_from("<i", tail, 0)[0], 8
    out: list[Message] = []
    while pos + 4 <= end:
        prefix = window.read(pos, min(8, end - pos))
        skip = 4 if prefix[:4] == CONTINUATION else 0
        if len(prefix) < skip + 4:
            break
        length = struct.unpack_from("<i", prefix, skip)[0]
        if length == 0:
            break  # end of stream
        header_at = pos + skip + 4
        if length < 0 or header_at + length > end:
            raise CorruptShardError(f"{where}: the Arrow message at byte {pos} claims a {length}-byte header, past "
                                    f"the end of the stream ({end}); the file is truncated or not Arrow IPC")
        try:
            kind, body, rows, delta = parse_header(window.read(header_at, length))
        except struct.error:
            raise CorruptShardError(f"{where}: the Arrow message at byte {pos} has a damaged header; the file is "
                                    "damaged or not Arrow IPC: write it again") from None
        stop = header_at + length + body
        if body < 0 or stop > end:
            raise CorruptShardError(f"{where}: the Arrow message at byte {pos} claims a {body}-byte body, past the "
                                    f"end of the stream ({end}); the file is truncated: write it again")
        if kind in _KIND_NAMES or not (out or kind == SCHEMA):
            what = _KIND_NAMES.get(kind, f"message kind {kind}")
            raise UnsupportedFormatError(f"{where}: the Arrow stream holds {what} at byte {pos}; only a schema "
                                         "followed by record and dictionary batches can be read")
        if until_batch and kind == RECORD_BATCH:
            break
        out.append(Message(pos, stop, kind, rows, delta))
        window.after(body)
        pos = stop
    if not out:
        raise CorruptShardError(f"{where} holds no Arrow schema message; it is empty, truncated or not Arrow IPC")
    return out


def head_of(messages: Sequence[Message]) -> tuple[int, bool]:
    """``(end of the head, whole)``: the head is the schema and the dictionaries before the first
    batch; ``whole``: a dictionary comes later, so the file is read as one piece."""
    first = next((i for i, m in enumerate(messages) if m.kind == RECORD_BATCH), len(messages))
    return messages[first - 1].stop, any(m.kind == DICTIONARY for m in messages[first:])


# -- the format --------------------------------------------------------------------------------

def _schema(head: bytes, where: str):
    pa = pyarrow()
    try:
        return pa.ipc.read_schema(pa.py_buffer(head))
    except Exception as exc:  # ArrowInvalid / OSError for a damaged schema message
        raise CorruptShardError(f"{where}: the Arrow schema cannot be read ({exc}); write the file again") from None


def _projected(schema, columns: Optional[Sequence[str]], where: str) -> tuple[tuple, tuple, tuple]:
    names, types, kinds = schema_kinds(schema)
    if columns is None:
        return names, types, kinds
    missing = [c for c in columns if c not in names]
    if missing:
        raise InvalidArgumentError(f"column {missing[0]!r} is not in {where} (it has {list(names)}); fix columns=")
    keep = [names.index(c) for c in columns]
    return tuple(tuple(x[k] for k in keep) for x in (names, types, kinds))  # type: ignore[return-value]


class ArrowFormat(FileFormat):
    name = "arrow"
    suffixes = (".arrow", ".feather", ".ipc")

    def describe(self, source: RangeSource, columns: Optional[Sequence[str]], **options: Any) -> tuple[list, bytes]:
        if codec_of(source.name):
            return self._describe_whole(source, columns)
        window = _Window(source.read, source.size, THROUGH if "://" in source.url else WINDOW)
        messages = walk_window(window, source.url)
        head_end, late = head_of(messages)
        head = window.read(messages[0].start, head_end - messages[0].start)
        names, types, kinds = _projected(_schema(head, source.url), columns, source.url)
        batches = [m for m in messages if m.kind == RECORD_BATCH]
        if late:
            rows = sum(m.rows for m in batches)
            pieces = [Piece(source.name, source.size, "", 0, -1, -1, rows, 0, names, types, kinds)] if rows else []
            return pieces, head
        pieces, first = [], 0
        for part, m in enumerate(batches):
            if m.rows:
                pieces.append(Piece(source.name, source.size, "", part, m.start, m.stop, m.rows, first,
                                    names, types, kinds))
            first += m.rows
        return pieces, head

    def _describe_whole(self, source: RangeSource, columns: Optional[Sequence[str]]) -> tuple[list, bytes]:
        """A compressed file: one pass over its decompressed bytes counts its rows and size."""
        pa = pyarrow()
        with source.open() as f:
            counted = _Counted(f)
            magic = counted.read(8)
            stream = counted if magic[:6] == FILE_MAGIC else _Prefixed(magic, counted)
            try:
                reader = pa.ipc.open_stream(stream)
                rows = sum(b.num_rows for b in reader)
            except Exception as exc:  # ArrowInvalid / OSError
                raise CorruptShardError(f"{source.url} cannot be read as Arrow IPC ({exc}); write it again") from None
            while counted.read(1 << 20):
                pass
        names, types, kinds = _projected(reader.schema, columns, source.url)
        pieces = [Piece(source.name, source.size, "", 0, -1, -1, rows, 0, names, types, kinds,
                        plain_bytes=counted.count)] if rows else []
        return pieces, b""

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> ParquetRows:
        try:
            if piece.start < 0:
                table = _read_whole(path)
            else:
                head = _head(path, piece, metadata)
                table = _read_batch(path, piece, head)
        except ShardstreamError:
            raise
        except FileNotFoundError:
            raise ShardNotFoundError(f"{path} is missing; restore it or open the dataset again") from None
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise CorruptShardError(f"record batch {piece.part} of {piece.file} cannot be read ({exc}); the file "
                                    "is damaged: write it again") from None
        if table.num_rows != piece.samples:
            raise CorruptShardError(f"record batch {piece.part} of {piece.file} has {table.num_rows} rows, but "
                                    f"{piece.samples} when the dataset listed it; open the dataset again")
        return ParquetRows(table.select(list(piece.column_names)), piece, path)


# heads read in this process, by file, version and where they were read from
HEADS = ParsedMetadata()  # the heads of files parsed in this process, by file and version


@dataclass(frozen=True)
class Head:
    """A file's head: its bytes (the schema message and the first dictionaries), its schema, and
    whether it has dictionaries (then a batch is decoded as a stream of the head and the batch)."""

    data: bytes
    schema: Any
    dictionaries: bool


def _head(path: str, piece: Piece, metadata: Callable[[], bytes]) -> Head:
    """The head of ``piece``'s file: from the cache's metadata, or read from the file in place."""
    return HEADS.get(path, piece, lambda: _parse_head(path, piece, metadata))


def _parse_head(path: str, piece: Piece, metadata: Callable[[], bytes]) -> Head:
    if piece.cached:
        head = metadata()
        if not head:
            raise ShardNotFoundError(f"the schema of {piece.file} is missing from the cache; open the dataset again "
                                     "(it is read again from the remote)")
    else:
        with open(path, "rb") as f:
            fd, size = f.fileno(), os.fstat(f.fileno()).st_size
            messages = walk(lambda o, n: os.pread(fd, n, o), size, path, until_batch=True)
            head = os.pread(fd, messages[-1].stop - messages[0].start, messages[0].start)
    kinds = {m.kind for m in walk(lambda o, n: head[o:o + n], len(head), f"the schema of {piece.file}")}
    return Head(head, _schema(head, piece.file), DICTIONARY in kinds)


def _read_batch(path: str, piece: Piece, head: Head):
    """The record batch of ``piece`` as a table: its message from the file (in place) or its own file."""
    pa = pyarrow()
    source = pa.memory_map(path)
    try:
        if piece.cached:
            body = source.read_buffer()
        else:
            source.seek(piece.start)
            body = source.read_buffer(piece.stop - piece.start)
        if len(body) != piece.stop - piece.start:
            raise CorruptShardError(f"record batch {piece.part} of {piece.file} is {len(body)} bytes in {path}, "
                                    f"not {piece.stop - piece.start}; the file changed or the cache is damaged")
        if head.dictionaries:  # decoded as a stream of the head and this batch
            return pa.ipc.open_stream(pa.py_buffer(head.data + body.to_pybytes())).read_all()
        batch = pa.ipc.read_record_batch(pa.ipc.read_message(body), head.schema)
        return pa.Table.from_batches([batch], head.schema)
    finally:
        source.close()


def _read_whole(path: str):
    """Every batch of a file read as one piece (decompressed into the cache, or with late dictionaries)."""
    pa = pyarrow()
    source = pa.memory_map(path)
    try:
        if source.read(6) == FILE_MAGIC:
            source.seek(8)
        else:
            source.seek(0)
        return pa.ipc.open_stream(source).read_all()
    finally:
        source.close()


class _Counted:
    """A binary stream that counts the bytes read from it."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.count, self.closed = raw, 0, False

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.count += len(data)
        return data


class _Prefixed:
    """``prefix`` (bytes already read) followed by the rest of ``raw``."""

    def __init__(self, prefix: bytes, raw: Any) -> None:
        self.prefix, self.raw, self.closed = prefix, raw, False

    def read(self, n: int = -1) -> bytes:
        if not self.prefix:
            return self.raw.read(n)
        if n < 0:
            data, self.prefix = self.prefix + self.raw.read(), b""
            return data
        data, self.prefix = self.prefix[:n], self.prefix[n:]
        return data + (self.raw.read(n - len(data)) if len(data) < n else b"")


ARROW_FORMAT = ArrowFormat()
