"""What the text formats (JSON Lines, JSON, CSV, text) share: reading a piece's bytes, making the pieces of
a described file, reporting bad rows, and the count of rows skipped.

A piece of a text file keeps in :attr:`~shardstream.format.files.Piece.extra` (see :func:`text_extra`)
the 0-based number of its first line (as its reader sees its bytes), how many bad rows it skipped,
whether bad rows are skipped (``on_bad_rows="skip"``), then what its format adds. A compressed file
is one piece, ``start == stop == -1``: its reader gets the whole decompressed file, at once
(:func:`read_piece`) or in blocks (:func:`piece_chunks`, for readers that keep only their rows).

Rows left out by ``on_bad_rows="skip"`` are counted when a file is described: a warning names the
file, the count and the first such line, and :func:`skipped_rows` gives the counts of a dataset's
files at any time after (``skipped_rows(ds)``), from the pieces alone.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..errors import BadRowError, CorruptShardError, FileChangedError, ShardNotFoundError
from . import lineindex
from .files import FileFormat, Piece, RangeSource, check_unchanged, codec_of
from .lineindex import BadUnit, Index, Units, cut_pieces

SKIP_HINT = "pass on_bad_rows='skip' to leave out the rows that cannot be read (they are counted)"
_READ_AT_ONCE = 1 << 30
READ_BLOCK = 1 << 20  # bytes a streaming reader of a piece takes at once (piece_chunks)


TAG = "lines"  # the first of the extra of a piece of a text file


def text_extra(line: int, skipped: int, skip: bool, tail: tuple = ()) -> tuple:
    """The ``extra`` of a piece of a text file: its first line (0-based), the bad rows it skipped, whether
    bad rows are skipped, then ``tail``, its format's own (:func:`format_extra`)."""
    return (TAG, line, skipped, skip) + tuple(tail)


def is_text_piece(piece: Any) -> bool:
    return isinstance(piece, Piece) and piece.extra[:1] == (TAG,)


def first_line(piece: Piece) -> int:
    """The 0-based number of the first line of ``piece``'s bytes in its (decompressed) file."""
    return int(piece.extra[1])


def skipped_count(piece: Piece) -> int:
    return int(piece.extra[2])


def skips(piece: Piece) -> bool:
    """Whether ``piece`` was described with ``on_bad_rows="skip"``."""
    return bool(piece.extra[3])


def format_extra(piece: Piece) -> tuple:
    """What the piece's format keeps besides (see :func:`text_extra`)."""
    return piece.extra[4:]


def skipped_rows(data: Any) -> dict[str, int]:
    """``{file: rows skipped}`` of a dataset read with ``on_bad_rows="skip"`` (a ``StreamingDataset``, or its
    ``shards``): the bad rows left out of each text file, for files with any (a file none of whose rows
    could be read has no pieces, and is named only by the warning when it is described)."""
    counts: Counter = Counter()
    for piece in getattr(data, "shards", data):
        if is_text_piece(piece) and skipped_count(piece):
            counts[piece.file] += skipped_count(piece)
    return dict(counts)


def make_pieces(source: RangeSource, index: Index, names: tuple, types: tuple, kinds: tuple, skip: bool,
                tail: tuple = ()) -> list[Piece]:
    """The pieces of a described file (one for a compressed file); ``tail`` ends each one's ``extra``."""
    if not index.cuts:
        return []
    if codec_of(source.name):
        rows = sum(c.rows for c in index.cuts)
        return [Piece(source.name, source.size, "", 0, -1, -1, rows, 0, names, types, kinds, index.size,
                      extra=text_extra(0, index.skipped, skip, tail))]
    pieces, first = [], 0
    for k, c in enumerate(index.cuts):
        pieces.append(Piece(source.name, source.size, "", k, c.start, c.stop, c.rows, first, names, types, kinds,
                            extra=text_extra(c.line, c.skipped, skip, tail)))
        first += c.rows
    return pieces


def index_file(source: RangeSource, runs: Iterable[Units], count: Any, start: int = 0, line: int = 0,
               lines: Any = lineindex.count_newlines) -> Index:
    """Cut a file into pieces (a compressed one into one), warning about the bad rows skipped; ``lines``
    counts the lines of some bytes (see :func:`~.lineindex.cut_pieces`)."""
    piece_bytes = None if codec_of(source.name) else lineindex.PIECE_BYTES
    try:
        index = cut_pieces(iter(runs), count, piece_bytes, start, line, lines)
    except BadUnit as bad:
        raise bad_row(source.url, bad.line, bad.why) from None
    if index.skipped:
        where, why = index.first_bad or (0, "")
        warnings.warn(f"{source.url}: {index.skipped} row(s) that cannot be read were left out "
                      f"(on_bad_rows='skip'); the first, at line {where}: {why}", UserWarning, stacklevel=2)
    return index


def bad_row(where: str, line: Optional[int], why: str) -> BadRowError:
    at = f" line {line}" if line is not None else ""
    return BadRowError(f"{where}{at}: {why}; fix or remove the row, or {SKIP_HINT}")


def where_of(path: str, piece: Piece) -> str:
    """How errors name a piece's file: its path when read in place, its name in the dataset when cached."""
    return piece.file if piece.cached else path


def _extent(piece: Piece) -> tuple[int, int, bool]:
    """``(offset, bytes, whole)`` of ``piece`` in the file its reader opens: its range of the file (in
    place), or all of its own file (cached, or a whole-file piece)."""
    if piece.cached or piece.start < 0:
        want = piece.plain_bytes if codec_of(piece.file) else (
            piece.file_bytes if piece.start < 0 else piece.stop - piece.start)
        return 0, want, True
    return piece.start, piece.stop - piece.start, False


def piece_bytes(piece: Piece) -> int:
    """How many bytes :func:`read_piece` gives for ``piece``."""
    return _extent(piece)[1]


def _checked(path: str, piece: Piece, got: int, want: int) -> None:
    if not piece.cached:
        check_unchanged(path, piece)  # after the read too: a file rewritten meanwhile is never decoded
    if got != want:
        error = CorruptShardError if piece.cached else FileChangedError
        raise error(f"{where_of(path, piece)}: part {piece.part} should be {want} bytes, but {got} were read; "
                    "the file changed or the cache copy is damaged: open the dataset again")


def read_piece(path: str, piece: Piece) -> bytes:
    """The bytes of ``piece`` (see :func:`_extent`), checked against the size the description gave."""
    offset, want, whole = _extent(piece)
    try:
        with open(path, "rb") as f:
            data = _pread(f.fileno(), want + whole, offset)
    except FileNotFoundError:
        raise ShardNotFoundError(f"{path} is missing; restore it or open the dataset again") from None
    _checked(path, piece, len(data), want)
    return data


def piece_chunks(path: str, piece: Piece, block: int = READ_BLOCK) -> Iterator[bytes]:
    """The bytes of ``piece`` as :func:`read_piece` gives them, in blocks of ``block`` bytes, so that a reader
    keeps only what it makes of them; checked the same way once read."""
    offset, want, whole = _extent(piece)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ShardNotFoundError(f"{path} is missing; restore it or open the dataset again") from None
    got = 0
    with f:
        while got < want:
            data = os.pread(f.fileno(), min(block, want - got), offset + got)
            if not data:
                break
            got += len(data)
            yield data
        if whole and got == want:
            got += len(os.pread(f.fileno(), 1, offset + got))  # a longer file is refused too
    _checked(path, piece, got, want)


def _pread(fd: int, n: int, offset: int) -> bytes:
    if n <= _READ_AT_ONCE:
        return os.pread(fd, n, offset)
    parts = []
    while n > 0:
        part = os.pread(fd, min(n, _READ_AT_ONCE), offset)
        if not part:
            break
        parts.append(part)
        n -= len(part)
        offset += len(part)
    return b"".join(parts)


def check_count(piece: Piece, path: str, got: int) -> None:
    """Refuse a piece whose rows are not as many as the description counted."""
    if got != piece.samples:
        raise CorruptShardError(
            f"{where_of(path, piece)}: part {piece.part} (bytes {piece.start}..{piece.stop}) holds {got} rows, but "
            f"{piece.samples} when the dataset listed it; the file changed or the cache copy is damaged: open the "
            "dataset again")


class TextFormat(FileFormat):
    """A format of text files: its description depends on ``on_bad_rows``."""

    option_names = ("on_bad_rows",)

    def describe(self, source: RangeSource, columns: Optional[Sequence[str]], **options: Any) -> tuple[list, bytes]:
        return self.describe_text(source, columns, options.get("on_bad_rows", "raise") == "skip"), b""

    def describe_text(self, source: RangeSource, columns: Optional[Sequence[str]], skip: bool) -> list[Piece]:
        raise NotImplementedError
