"""Text files as shards: JSON Lines (``jsonl``), JSON (``json``), CSV (``csv``) and plain text (``text``).

A JSON Lines or text file is described in one pass over its bytes (:mod:`.lineindex`): it is cut
into pieces of whole lines of about 32 MiB, each with its row count, and nothing per row is
kept. Opening a piece reads its bytes (a ranged read of the file in place, or its own file in the
cache), finds its lines with numpy and decodes them all at once; JSON Lines pieces are read and
parsed in blocks of whole lines, keeping only the rows, so blank lines cost no memory.

- ``jsonl``: one JSON object per line; blank lines are not rows. Columns and how rows must fit
  them: :mod:`.jsonvalues`. With ``on_bad_rows="raise"`` describing parses only the first rows (for
  the columns) and counts lines; a bad row is refused, naming its file and line, when its piece is
  read. With ``"skip"`` every line is parsed while describing, so the counts are exact.
- ``json``: a file that is one JSON array of objects is parsed whole, while describing and again
  when read: one piece, whose decoded rows are all in memory at once (several times the file's
  size; split large arrays into JSON Lines files). A ``.json`` file whose first non-blank character
  is not ``[`` is read as JSON Lines.
- ``text``: one sample ``{"text": line}`` per line, without its line ending; as Hugging Face's
  ``load_dataset("text")`` reads a file (Python's universal newlines: ``\\n``, ``\\r\\n`` or a lone
  ``\\r`` ends a line), empty lines are rows (``""``) and a last line without a newline is a row. A
  line that is not UTF-8 is a bad row.
- ``csv``: see :mod:`.csvrows`.

Compressed files (``.gz``, ``.zst``, ``.bz2``, ``.xz``) are one piece each, decompressed into the cache;
describing one refuses it past :func:`.lineindex.max_decompressed` bytes (1 GiB unless
``SHARDSTREAM_MAX_DECOMPRESSED`` says otherwise), and a file cut short (:mod:`.decompress`).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from ..errors import CorruptShardError, InvalidArgumentError
from . import jsonvalues
from .columnrows import Column, ColumnRows, SampleRows
from .csvrows import CSV_FORMAT
from .files import Piece, RangeSource, codec_of
from .jsonvalues import decode_rows, infer_columns, no_gc, parse, parse_lines, parse_many
from .lineindex import TextLineEnds, blocks, head_run, line_ends, line_runs, unit_stops, units
from .textfiles import (TextFormat, bad_row, check_count, first_line, format_extra, index_file, make_pieces,
                        piece_chunks, read_piece, skipped_rows, skips, text_extra, where_of)

__all__ = ["JSONL_FORMAT", "JSON_FORMAT", "CSV_FORMAT", "TEXT_FORMAT", "skipped_rows"]

_NONSPACE = np.ones(256, bool)
_NONSPACE[[9, 10, 13, 32]] = False
_SPACE = b"\t\n\r "  # what a blank line holds
_BOM = b"\xef\xbb\xbf"


def row_lines(buf: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, stops, unit index)`` of the lines of ``buf`` that are not blank."""
    if not len(stops):
        return stops, stops, stops
    starts = np.concatenate(([0], stops[:-1]))
    if _NONSPACE[buf[starts]].all():  # every line starts with a character: none is blank
        return starts, stops, np.arange(len(stops))
    nonspace = _NONSPACE[buf]
    if not nonspace.any():  # only blank lines
        return stops[:0], stops[:0], stops[:0]
    keep = np.flatnonzero(np.logical_or.reduceat(nonspace, starts))
    return starts[keep], stops[keep], keep


class JsonLinesFormat(TextFormat):
    name = "jsonl"
    suffixes = (".jsonl", ".ndjson")

    def describe_text(self, source: RangeSource, columns: Optional[Sequence[str]], skip: bool) -> list[Piece]:
        runs = units(blocks(source), line_ends)
        return self.describe_lines(source, runs, columns, skip)

    def describe_lines(self, source: RangeSource, runs: Any, columns: Optional[Sequence[str]],
                       skip: bool) -> list[Piece]:
        head = head_run(runs, jsonvalues.SCHEMA_BYTES)
        if head is None:
            return []
        window = _window_rows(source, head, skip, jsonvalues.SCHEMA_ROWS)
        names, types, kinds = infer_columns(window, columns)
        strict = columns is None
        count = _json_counter(names, kinds, strict) if skip else _row_counter
        index = index_file(source, itertools.chain([head], runs), count)
        return make_pieces(source, index, names, types, kinds, skip, (strict, "lines"))

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> ColumnRows:
        with no_gc():
            values, invalid, lines = _parsed_rows(piece_chunks(path, piece))
            rows = _json_rows(path, piece, values, invalid, lambda k: first_line(piece) + int(lines[k]) + 1)
            del values  # freed before the collector resumes, whose first pass would walk them all (unless kept)
        return rows


def _parsed_rows(chunks: Iterable[bytes]) -> tuple[list, dict[int, str], np.ndarray]:
    """The parsed rows of a piece read in blocks, ``{row: why}`` of those that are not JSON, and the 0-based
    line of each row in the piece. Only rows are kept: blank lines cost nothing but the block they are in."""
    values: list = []
    invalid: dict[int, str] = {}
    lines: list[np.ndarray] = []
    line = 0  # the run's first line in the piece
    for data in line_runs(chunks):
        got = parse_lines(data)
        if got is not None:  # every line is JSON: none is blank, none is bad (and a run after it ends one)
            values += got
            lines.append(np.arange(line, line + len(got)))
            line += len(got)
            continue
        first, line = line, line + data.count(b"\n")
        if data.isspace() and not data.translate(None, _SPACE):  # only blank lines (isspace stops at a character)
            continue
        buf = np.frombuffer(data, np.uint8)
        units_ = row_lines(buf, unit_stops(buf, line_ends))[2]
        got, bad = parse_many(data, units_, tried=True)
        invalid.update((len(values) + k, why) for k, why in bad.items())
        values += got
        lines.append(units_ + first)
    return values, invalid, np.concatenate(lines) if lines else np.zeros(0, np.int64)


def _window_rows(source: RangeSource, run: Any, skip: bool, want: int) -> list:
    """The first ``want`` rows of a run (the file's first, from byte 0) that are JSON objects, of those that
    end within its first :data:`~.jsonvalues.SCHEMA_BYTES` (at least one): the file's columns come from
    them, whatever the file's size."""
    _, buf, stops = run
    starts, ends, units_ = row_lines(buf, stops)
    within = max(int(np.searchsorted(ends, jsonvalues.SCHEMA_BYTES, "right")), 1)
    values, invalid = parse_many(buf.tobytes(), units_[:min(want, within)])
    for k, v in enumerate(values):
        why = invalid.get(k) or (None if type(v) is dict else f"it is {jsonvalues.type_name(v)}, not a JSON object")
        if why is not None and not skip:
            line = int(np.count_nonzero(buf[:starts[k]] == 10)) + 1
            raise bad_row(source.url, line, why)
    return [v for k, v in enumerate(values) if k not in invalid and type(v) is dict]


def _row_counter(buf: np.ndarray, stops: np.ndarray) -> tuple[int, int, None]:
    return len(row_lines(buf, stops)[0]), 0, None


def _json_counter(names: tuple, kinds: tuple, strict: bool):
    """Counts the rows of a run that fit the columns, and the others (with ``on_bad_rows="skip"``)."""
    def count(buf: np.ndarray, stops: np.ndarray):
        starts, _, rows = row_lines(buf, stops)
        with no_gc():
            values, invalid = parse_many(buf.tobytes(), rows)
            bad = {**decode_rows(values, names, kinds, strict)[1], **invalid}
            n = len(values)
            del values  # freed before the collector resumes
        first = min(bad) if bad else None
        return n - len(bad), len(bad), None if first is None else (int(starts[first]), bad[first])
    return count


def _json_rows(path: str, piece: Piece, values: list, invalid: dict, line_of: Callable[[int], Optional[int]]):
    """The reader of a piece's parsed rows (``invalid``: those that are not JSON): bad rows are refused
    (``on_bad_rows="raise"``) or left out (``"skip"``)."""
    columns, bad, same = decode_rows(values, piece.column_names, piece.kinds, bool(format_extra(piece)[0]))
    bad.update(invalid)
    if bad and not skips(piece):
        first = min(bad)
        raise bad_row(where_of(path, piece), line_of(first), bad[first])
    count = len(values) - len(bad)
    check_count(piece, path, count)
    if same and not bad:  # the parsed rows are the samples: handed on themselves, not rebuilt from the columns
        return SampleRows(piece, columns, count, values)
    return ColumnRows(piece, columns, count)


class JsonFormat(JsonLinesFormat):
    """``.json`` files: a JSON array of objects, or JSON Lines (told apart by the first non-blank character)."""

    name = "json"
    suffixes = (".json",)

    def describe_text(self, source: RangeSource, columns: Optional[Sequence[str]], skip: bool) -> list[Piece]:
        runs = units(blocks(source), line_ends)
        head = []
        for run in runs:  # up to the first character that is not blank
            head.append(run)
            buf = run[1][3:] if run[0] == 0 and run[1][:3].tobytes() == _BOM else run[1]
            found = np.flatnonzero(_NONSPACE[buf])
            if len(found):
                break
        else:
            return []
        if buf[found[0]] != ord("["):
            return self.describe_lines(source, itertools.chain(head, runs), columns, skip)
        data = b"".join(bytes(buf) for _, buf, _ in itertools.chain(head, runs))
        rows = _array_of(data, source.url)
        window = [r for r in rows[:jsonvalues.SCHEMA_ROWS] if type(r) is dict]
        names, types, kinds = infer_columns(window, columns)
        bad = decode_rows(rows, names, kinds, columns is None)[1]
        if bad and not skip:
            first_bad = min(bad)
            raise bad_row(source.url, None, f"row {first_bad + 1} of the array: {bad[first_bad]}")
        if len(rows) == len(bad):
            return []
        if bad:
            warnings.warn(f"{source.url}: {len(bad)} row(s) of the array that cannot be read were left out "
                          f"(on_bad_rows='skip'); the first, row {min(bad) + 1}: {bad[min(bad)]}", UserWarning,
                          stacklevel=2)
        plain = len(data) if codec_of(source.name) else 0
        return [Piece(source.name, source.size, "", 0, -1, -1, len(rows) - len(bad), 0, names, types, kinds, plain,
                      extra=text_extra(0, len(bad), skip, (columns is None, "array")))]

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> ColumnRows:
        if format_extra(piece)[1] != "array":
            return super().open_piece(path, piece, metadata)
        with no_gc():
            rows = _array_of(read_piece(path, piece), where_of(path, piece))
            decoded = _json_rows(path, piece, rows, {}, lambda k: None)
            del rows  # freed before the collector resumes (unless kept)
        return decoded


def _array_of(data: bytes, where: str) -> list:
    value, why = parse(data)
    if why is not None:
        raise CorruptShardError(f"{where}: {why}; a .json file must hold a JSON array of objects, or one object "
                                "per line (JSON Lines)")
    if type(value) is not list:
        raise CorruptShardError(f"{where} holds {jsonvalues.type_name(value)}; a .json file must hold a JSON array "
                                "of objects, or one object per line (JSON Lines)")
    return value


class TextLinesFormat(TextFormat):
    """Plain text: one sample ``{"text": line}`` per line (see the module docstring)."""

    name = "text"
    suffixes = (".txt", ".text")

    def describe_text(self, source: RangeSource, columns: Optional[Sequence[str]], skip: bool) -> list[Piece]:
        if columns is not None and list(columns) != ["text"]:
            raise InvalidArgumentError(f"columns={list(columns)!r}: a text file has one column, 'text'; leave "
                                       "columns out or give ['text']")
        index = index_file(source, units(blocks(source), TextLineEnds()), _text_counter(skip))
        return make_pieces(source, index, ("text",), ("string",), (jsonvalues.GENERIC,), skip)

    def open_piece(self, path: str, piece: Piece, metadata: Callable[[], bytes]) -> ColumnRows:
        data = read_piece(path, piece)
        try:
            lines = _split(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            buf = np.frombuffer(data, np.uint8)
            good, _ = _decode_lines(buf, unit_stops(buf, TextLineEnds()))
            if not skips(piece):
                line = first_line(piece) + int(np.count_nonzero(buf[:exc.start] == 10)) + 1
                raise bad_row(where_of(path, piece), line, f"it is not UTF-8 text ({exc.reason})") from None
            lines = good
        check_count(piece, path, len(lines))
        return ColumnRows(piece, [Column("text", lines)], len(lines))


def _split(text: str) -> list[str]:
    """The lines of ``text`` without their endings, as Python's universal newlines read them."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _decode_lines(buf: np.ndarray, stops: np.ndarray) -> tuple[list[str], list[int]]:
    """The lines of ``buf`` that are UTF-8, and the offsets of those that are not."""
    good, bad = [], []
    raw = buf.tobytes()
    for a, b in zip([0] + stops[:-1].tolist(), stops.tolist()):
        try:
            good += _split(raw[a:b].decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(a)
    return good, bad


def _text_counter(skip: bool):
    def count(buf: np.ndarray, stops: np.ndarray):
        if not skip:
            return len(stops), 0, None
        try:
            buf.tobytes().decode("utf-8")
            return len(stops), 0, None
        except UnicodeDecodeError:
            good, bad = _decode_lines(buf, stops)
            return len(good), len(bad), (bad[0], "it is not UTF-8 text")
    return count


JSONL_FORMAT = JsonLinesFormat()
JSON_FORMAT = JsonFormat()
TEXT_FORMAT = TextLinesFormat()
