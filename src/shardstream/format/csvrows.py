"""CSV files as shards (``.tsv``: tab-separated), parsed with ``pyarrow.csv``.

The first non-empty record is the header: it names the columns. A piece is a byte range of whole
*records*: a newline inside a quoted field ends no record (found by the parity of the quote
characters before it, with numpy), so a piece can be parsed on its own. The columns' types are
inferred once per file, by pyarrow, from the records that end within its first
:data:`INFER_BYTES` (8 MiB; at least its first record), however large the file and however it is
read, then given to pyarrow for every piece (``ConvertOptions(column_types=...)``), so all pieces
agree; a column with no value there is read as strings. A value further on that does not convert
is a bad row, in a file of any size. The files of one dataset must agree on their columns and
types.

A *bad row* has another number of fields than the header, or a value that does not convert to
its column's type (``abc`` where integers were inferred). ``on_bad_rows="raise"`` refuses it
naming its file and line; ``"skip"`` leaves it out and counts it (finding each value that does
not convert takes one more parse of the rest of its piece: at most :data:`MAX_MISFITS` per piece).

Records end with ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac line endings), as pyarrow ends them; the
lines that errors name are counted the same way (Python's universal newlines). A quote character
inside an unquoted field (``5"10``) upsets the quote parity when the record also holds a newline:
that shows as a piece whose rows do not match its count, refused with
:class:`~shardstream.errors.CorruptShardError`, never as wrong rows.
"""

from __future__ import annotations

import io
import re
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from ..errors import CorruptShardError, InvalidArgumentError
from .arrowrows import kind_of, pyarrow
from .files import Piece, RangeSource, plain_name
from .lineindex import QUOTE, BadUnit, RecordEnds, blocks, count_lines, head_run, runs_from, unit_stops, units
from .textfiles import (READ_BLOCK, TextFormat, bad_row, check_count, first_line, format_extra, index_file,
                        make_pieces, piece_bytes, piece_chunks, read_piece, skips, where_of)

MAX_MISFITS = 100  # values that do not convert, skipped in one piece before refusing it
INFER_BYTES = 8 << 20  # the columns' types are inferred from the records that end in a file's first this many bytes
WHOLE_READ = 64 << 20  # a piece up to this size is read at once (see piece_records)
_ROW = re.compile(r"Row #(\d+)")


def _pc():
    pyarrow()
    import pyarrow.csv as pc

    return pc


def delimiter_of(name: str) -> str:
    return "\t" if plain_name(name).lower().endswith(".tsv") else ","


def arrow_type(name: str):
    """The Arrow type a column's type string names (as ``str(type)`` writes it)."""
    pa = pyarrow()
    try:
        return pa.type_for_alias(name)
    except (ValueError, KeyError):
        m = re.fullmatch(r"timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]", name)
        if m:
            return pa.timestamp(m.group(1), m.group(2))
    raise CorruptShardError(f"column type {name!r} is not one a CSV file is read as; open the dataset again")


def records(arr: np.ndarray, stops: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, stops)`` of the non-empty records of ``arr`` (whole records; ``stops``: where each record
    ends, when they were found already)."""
    stops = unit_stops(arr, RecordEnds(QUOTE)) if stops is None else stops
    if not len(stops):
        return stops, stops
    starts = np.concatenate(([0], stops[:-1]))
    size = stops - starts
    last = arr[stops - 1]
    newline = last == 10
    crlf = newline & (size >= 2) & (arr[np.maximum(stops - 2, 0)] == 13)
    keep = (size - newline - crlf - (last == 13)) > 0
    return starts[keep], stops[keep]


class Layout:
    """How a file's records are read: ``n`` fields each, the fields ``sel`` kept, their Arrow types."""

    def __init__(self, n: int, sel: Sequence[int], types: Optional[list], delimiter: str) -> None:
        self.n, self.sel, self.types, self.delimiter = n, list(sel), types, delimiter

    def read(self, data: bytes, handler: Callable, threads: bool, longest: int):
        pc = _pc()
        fields = [f"f{i}" for i in range(self.n)]
        kept = [fields[i] for i in self.sel]
        read = pc.ReadOptions(column_names=fields, use_threads=threads, block_size=max(1 << 20, 2 * longest + 2))
        parse = pc.ParseOptions(delimiter=self.delimiter, newlines_in_values=True, invalid_row_handler=handler)
        types = dict(zip(kept, self.types)) if self.types is not None else None
        convert = pc.ConvertOptions(column_types=types, include_columns=kept)
        return pc.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)

    def empty(self):
        """A table of no rows with the kept columns."""
        pa = pyarrow()
        types = self.types if self.types is not None else [pa.null()] * len(self.sel)
        return pa.table({f"f{i}": pa.array([], type=t) for i, t in zip(self.sel, types)})


def decode(data: bytes, layout: Layout, skip: bool) -> tuple[Any, int, Optional[tuple[Optional[int], str]]]:
    """``(table, bad rows left out, (offset, why) of the first or None)`` of whole records ``data``; without
    ``skip`` the first bad row raises :class:`~.lineindex.BadUnit`."""
    pa = pyarrow()
    arr = np.frombuffer(data, np.uint8)
    starts, stops = records(arr)
    if not len(starts):
        return layout.empty(), 0, None
    longest = int((stops - starts).max()) if len(starts) else 0
    found: list = []

    def handler(row) -> str:
        found.append((row.number, f"it has {row.actual_columns} fields, but the header {row.expected_columns}"))
        return "skip" if skip else "error"

    try:
        table = layout.read(data, handler, True, longest)
        if not found:
            return table, 0, None
    except pa.ArrowInvalid:
        pass
    found.clear()  # again on one thread: pyarrow then numbers the rows
    first: Optional[tuple[Optional[int], str]] = None
    misfits = 0
    while True:
        try:
            table = layout.read(data, handler, False, longest)
        except pa.ArrowInvalid as exc:
            number, why = _failure(exc, [] if skip else found)
            if not skip or number is None or misfits == MAX_MISFITS:
                raise BadUnit(_offset(starts, number), why + _stopped(misfits)) from None
            first = first or _first(found, starts, (number, why))
            misfits += 1
            data = data[:int(starts[number - 1])] + data[int(stops[number - 1]):]
            starts, stops = records(np.frombuffer(data, np.uint8))
            found.clear()
            if not len(starts):
                return layout.empty(), misfits, first
            continue
        return table, len(found) + misfits, first or _first(found, starts, None)


def _first(found: list, starts: np.ndarray, misfit: Optional[tuple]) -> Optional[tuple[Optional[int], str]]:
    """The earliest of the bad rows of one parse, as ``(offset, why)``."""
    numbered = [(n or 0, w) for n, w in found] + ([misfit] if misfit else [])
    if not numbered:
        return None
    number, why = min(numbered, key=lambda b: b[0])
    return _offset(starts, number), why


def _failure(exc: Exception, found: list) -> tuple[Optional[int], str]:
    if found:
        return found[-1]
    text = str(exc)
    m = _ROW.search(text)
    why = re.sub(r"^In CSV column #\d+: (Row #\d+: )?", "", text)
    return (int(m.group(1)) if m else None), f"a value does not convert to its column's type ({why})"


def _offset(starts: np.ndarray, number: Optional[int]) -> Optional[int]:
    return None if number is None or not 0 < number <= len(starts) else int(starts[number - 1])


def _stopped(misfits: int) -> str:
    return f" (after {misfits} such rows were left out of this part)" if misfits else ""


class CsvFormat(TextFormat):
    name = "csv"
    suffixes = (".csv", ".tsv")

    def describe_text(self, source: RangeSource, columns: Optional[Sequence[str]], skip: bool) -> list[Piece]:
        runs = units(blocks(source), RecordEnds(QUOTE))
        head = head_run(runs, INFER_BYTES)
        if head is None:
            return []
        buf = head[1]
        starts, stops = records(buf)
        if not len(starts):
            return []
        cut = int(stops[0])  # the header ends here
        delimiter = delimiter_of(source.name)
        header_names = _header(buf[:cut].tobytes(), delimiter, source.url)
        sel = _selected(header_names, columns, source.url)
        layout = Layout(len(header_names), sel, None, delimiter)
        lines = count_lines(buf[:cut])
        table = _parse(buf[cut:_window(stops)].tobytes(), layout, skip, source.url, lines)
        types = [_settled(table.schema.field(k).type) for k in range(table.num_columns)]
        layout.types = [arrow_type(t) for t in types]
        kinds = tuple(kind_of(t) for t in layout.types)
        names = tuple(header_names[i] for i in sel)
        index = index_file(source, runs_from(head, runs, cut), _counter(layout, skip), cut, lines, count_lines)
        return make_pieces(source, index, names, tuple(types), kinds, skip, (len(header_names), *sel))

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]):
        from .parquet import ParquetRows

        data, at, dropped = piece_records(path, piece)
        n, *sel = (int(i) for i in format_extra(piece))
        layout = Layout(n, sel, [arrow_type(t) for t in piece.types], delimiter_of(piece.file))
        try:
            table, _, _ = decode(data, layout, skips(piece))
        except BadUnit as bad:
            line = None
            if bad.offset is not None:
                before = int(dropped[np.searchsorted(at, bad.offset, "right") - 1])
                line = first_line(piece) + before + _lines_before(data, bad.offset) + 1
            raise bad_row(where_of(path, piece), line, bad.why) from None
        check_count(piece, path, table.num_rows)
        return ParquetRows(table.rename_columns(list(piece.column_names)), piece, path)


def piece_records(path: str, piece: Piece) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The records of a piece, less the header of a whole file, and where lines were left out of them (see
    :func:`kept_records`): read at once as they are, unless the piece is big or many of its lines are
    empty; then in blocks, keeping the non-empty records only."""
    header = piece.start < 0
    if piece_bytes(piece) > WHOLE_READ:
        return kept_records(piece_chunks(path, piece), header)
    data = read_piece(path, piece)
    if data.count(b"\n\n") * 256 > len(data):
        return kept_records((data[k:k + READ_BLOCK] for k in range(0, len(data), READ_BLOCK)), header)
    cut = 0
    if header:
        stops = records(np.frombuffer(data, np.uint8))[1]
        cut = int(stops[0]) if len(stops) else len(data)
    return data[cut:], np.zeros(1, np.int64), np.array([_lines_before(data, cut)], np.int64)


def kept_records(chunks: Iterable[bytes], header: bool) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The non-empty records of a piece read in blocks, joined (less the header when ``header``), and where
    lines were left out of them: before offset ``at[k]`` of the data, ``dropped[k]`` lines in all. Empty
    lines cost nothing kept."""
    parts: list = []
    at, dropped = [0], [0]
    size = 0
    for _, buf, stops in units(iter(chunks), RecordEnds(QUOTE)):
        if len(stops) * 8 > len(buf) and not buf.tobytes().translate(None, b"\r\n"):  # only empty lines
            _drop(at, dropped, size, buf)
            continue
        starts, stops = records(buf, stops)
        if header and len(starts):
            starts, stops, header = starts[1:], stops[1:], False
        done = 0
        gaps = np.flatnonzero(starts[1:] != stops[:-1]) + 1  # runs of adjacent records are taken at once
        for a, b in zip([0, *gaps.tolist()], [*gaps.tolist(), len(starts)]) if len(starts) else ():
            start, stop = int(starts[a]), int(stops[b - 1])
            _drop(at, dropped, size, buf[done:start])
            parts.append(buf[start:stop].tobytes())
            size += stop - start
            done = stop
        _drop(at, dropped, size, buf[done:])
    return b"".join(parts), np.asarray(at, np.int64), np.asarray(dropped, np.int64)


def _drop(at: list, dropped: list, size: int, left_out: np.ndarray) -> None:
    """Note the lines of ``left_out`` as left out before offset ``size`` of the kept data."""
    n = count_lines(left_out) if len(left_out) else 0
    if not n:
        return
    if at[-1] != size:
        at.append(size)
        dropped.append(dropped[-1])
    dropped[-1] += n


def _header(header: bytes, delimiter: str, where: str) -> list[str]:
    pc = _pc()
    names = pc.read_csv(io.BytesIO(header), parse_options=pc.ParseOptions(delimiter=delimiter, newlines_in_values=True),
                        read_options=pc.ReadOptions(block_size=max(1 << 20, 2 * len(header)))).column_names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CorruptShardError(f"{where}: the header names column {twice[0]!r} more than once; give each column its "
                                "own name")
    return names


def _selected(names: list, columns: Optional[Sequence[str]], where: str) -> list[int]:
    if columns is None:
        return list(range(len(names)))
    missing = [c for c in columns if c not in names]
    if missing:
        raise InvalidArgumentError(f"column {missing[0]!r} is not in {where} (its header has {names}); fix columns=")
    return [names.index(c) for c in columns]


def _parse(data: bytes, layout: Layout, skip: bool, where: str, line: int):
    """The first records, parsed to infer the columns' types."""
    try:
        return decode(data, layout, skip)[0]
    except BadUnit as bad:
        at = None if bad.offset is None else line + _lines_before(data, bad.offset) + 1
        raise bad_row(where, at, bad.why) from None


def _lines_before(data: bytes, offset: int) -> int:
    """The lines that end before byte ``offset`` of ``data`` (the start of a record)."""
    return count_lines(np.frombuffer(data, np.uint8, offset))


def _window(stops: np.ndarray) -> int:
    """Where the records the types are inferred from end (``stops``: the file's first records, the header
    first): at the last one that ends within :data:`INFER_BYTES`, or at the first after the header."""
    k = max(int(np.searchsorted(stops, INFER_BYTES, "right")), min(2, len(stops)))
    return int(stops[k - 1])


def _settled(t) -> str:
    """The type string a column is read as: what pyarrow inferred, strings for a column with no value."""
    pa = pyarrow()
    if pa.types.is_null(t):
        return "string"
    name = str(t)
    try:
        return name if arrow_type(name) == t else "string"
    except CorruptShardError:
        return "string"


def _counter(layout: Layout, skip: bool):
    def count(buf: np.ndarray, stops: np.ndarray):
        if not skip:
            return len(records(buf)[0]), 0, None
        table, bad, first = decode(buf.tobytes(), layout, True)
        return table.num_rows, bad, first
    return count


CSV_FORMAT = CsvFormat()
