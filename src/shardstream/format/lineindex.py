"""Where the rows of a text file are: one pass over its bytes, cut into pieces of whole lines.

A JSON Lines, CSV or text file has no footer that says where its rows are. Describing it
reads it once, in blocks of :data:`BLOCK` bytes (ranged reads of a plain file; a compressed
file's decompressed stream in blocks of :data:`STREAM_BLOCK`, refused once it passes
:func:`max_decompressed`, since it is one piece), finds the ends of its *units* with numpy
(lines; for CSV, records: a newline inside a quoted field ends nothing) and cuts it into pieces
of whole units of about :data:`PIECE_BYTES` each. A piece keeps only its byte range, its row count, how many bad rows
it skipped and the number of its first line: the description is O(pieces), whatever the
number of rows. Reading a big file (:data:`INDEX_PROGRESS_FROM` bytes or more) shows its progress
(:mod:`shardstream.progress`).

What a unit counts for (a row, nothing, a bad row) is the format's: it gives a *counter*
called on each run of whole units, see :func:`cut_pieces`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from ..errors import DecompressedSizeError, FileChangedError, ShardstreamError
from ..progress import Progress
from ..units import format_bytes, parse_bytes
from .decompress import damaged
from .files import RangeSource, codec_of

BLOCK = 8 << 20  # bytes read at once while describing
STREAM_BLOCK = 1 << 20  # bytes of a decompressed stream taken at once while describing (no request per read)
MAX_DECOMPRESSED = 1 << 30  # the most bytes a compressed text file may decompress to (see max_decompressed)
MAX_DECOMPRESSED_ENV = "SHARDSTREAM_MAX_DECOMPRESSED"
PIECE_BYTES = 32 << 20  # a piece ends at the first unit end at or past this many bytes from its start
INDEX_PROGRESS_FROM = 64 << 20  # bytes of a file from which describing it shows its progress
NEWLINE, RETURN, QUOTE = 10, 13, 34

# a run of whole units: its offset in the (decompressed) file, its bytes, and each unit's end in them
Units = tuple[int, np.ndarray, np.ndarray]
# counter(buf, stops) -> (rows, bad rows, (offset in buf of the first bad one, why) or None)
Counter = Callable[[np.ndarray, np.ndarray], tuple[int, int, Optional[tuple[int, str]]]]


def blocks(source: RangeSource, progress: Optional[bool] = None,
           progress_from: int = INDEX_PROGRESS_FROM) -> Iterator[bytes]:
    """The file's bytes in blocks: ranged reads of a plain file, the stream of a compressed one. A file of
    at least ``progress_from`` bytes shows its progress as ``progress`` says (True, False, None: on a
    terminal or as ``SHARDSTREAM_PROGRESS`` says) and logs a summary line once read."""
    if progress is False or source.size < progress_from:
        yield from _blocks(source)
        return
    total = None if codec_of(source.name) else source.size  # a compressed file: its bytes once decompressed
    shown = Progress(f"index {source.name}", total, "B", show=progress)
    try:
        for block in _blocks(source):
            shown.update(len(block))
            yield block
    except BaseException:
        shown.abandon()
        raise
    shown.finish(f"indexed {source.name}: {format_bytes(shown.done)} read to find its rows in "
                 f"{shown.elapsed():.1f}s ({shown.rate()})")


def _blocks(source: RangeSource) -> Iterator[bytes]:
    codec = codec_of(source.name)
    if codec:
        yield from _decompressed(source, codec)
        return
    for offset in range(0, source.size, BLOCK):
        want = min(BLOCK, source.size - offset)
        block = source.read(offset, want)
        if len(block) != want:
            raise FileChangedError(f"{source.url} changed while it was being described (it was {source.size} bytes "
                                   f"long, but {offset + len(block)} could be read); open the dataset again")
        yield block


def max_decompressed() -> int:
    """The most bytes a compressed text file may decompress to: :data:`MAX_DECOMPRESSED`, or
    ``SHARDSTREAM_MAX_DECOMPRESSED`` (bytes, or a size such as ``"4gb"``) when it is set."""
    raw = os.environ.get(MAX_DECOMPRESSED_ENV)
    return MAX_DECOMPRESSED if not raw else parse_bytes(raw, MAX_DECOMPRESSED_ENV)


def _decompressed(source: RangeSource, codec: str) -> Iterator[bytes]:
    """The decompressed bytes of a compressed file, refused past :func:`max_decompressed` (one piece holds
    them all, and its reader decodes its rows at once)."""
    limit, done = max_decompressed(), 0
    with source.open() as stream:
        while True:
            try:
                block = stream.read(STREAM_BLOCK)
            except ShardstreamError:
                raise
            except Exception as exc:  # each codec has its own error types (gzip: OSError, EOFError; zstd's)
                raise damaged(source.url, codec, exc) from None
            if not block:
                return
            done += len(block)
            if done > limit:
                raise DecompressedSizeError(
                    f"{source.url} decompresses to more than {format_bytes(limit)} ({source.size} bytes compressed); a "
                    "compressed text file is read as one piece, whose rows are decoded at once. Decompress it (a plain "
                    "file is read in pieces of about 32 MiB), split it into smaller files before compressing them, or "
                    f"raise the limit with {MAX_DECOMPRESSED_ENV}")
            yield block


def line_ends(arr: np.ndarray) -> np.ndarray:
    """Positions of the newlines in ``arr``."""
    return np.flatnonzero(arr == NEWLINE)


class TextLineEnds:
    """Positions of the bytes that end lines of text as Python's universal newlines read them: a ``\\n``
    (also of ``\\r\\n``) or a ``\\r`` followed by anything else. A ``\\r`` ending a block is decided by the
    next one; ``-1`` then stands for it (the byte before the block)."""

    def __init__(self) -> None:
        self.cr_last = False

    def __call__(self, arr: np.ndarray) -> np.ndarray:
        newlines = np.flatnonzero(arr == NEWLINE)
        returns = np.flatnonzero(arr == RETURN)
        was, self.cr_last = self.cr_last, bool(len(arr)) and arr[-1] == RETURN
        if was and len(arr) and arr[0] != NEWLINE:
            newlines = np.concatenate(([-1], newlines))
        if not len(returns):
            return newlines
        after = returns + 1
        inside = after < len(arr)
        lone = returns[inside][arr[after[inside]] != NEWLINE]
        return np.union1d(newlines, lone) if len(lone) else newlines


class RecordEnds:
    """Positions of the bytes that end CSV records: a ``\\n`` (also of ``\\r\\n``) or a lone ``\\r`` (old Mac line
    endings) outside quoted fields, found by the parity of the quote characters before them (carried from
    one block to the next). A ``\\r`` ending a block is decided by the next one; ``-1`` then stands for it."""

    def __init__(self, quote: int = QUOTE) -> None:
        self.quote = quote
        self.odd = 0
        self.cr_last = False

    def __call__(self, arr: np.ndarray) -> np.ndarray:
        if not len(arr):
            return np.flatnonzero(arr)
        ends = _line_breaks(arr)
        carried = self.cr_last and arr[0] != NEWLINE  # the last block's \r ended a record
        quotes = np.flatnonzero(arr == self.quote)
        if len(quotes):
            ends = ends[((np.searchsorted(quotes, ends) + self.odd) & 1) == 0]
            self.odd = (self.odd + len(quotes)) & 1
        elif self.odd:
            ends = ends[:0]
        self.cr_last = arr[-1] == RETURN and not self.odd
        return np.concatenate(([-1], ends)) if carried else ends


def _line_breaks(arr: np.ndarray) -> np.ndarray:
    """Positions of the ``\\n`` of ``arr`` and of its ``\\r`` followed by another byte (a last ``\\r`` is not)."""
    newlines = np.flatnonzero(arr == NEWLINE)
    returns = np.flatnonzero(arr[:-1] == RETURN)
    if not len(returns):
        return newlines
    lone = returns[arr[returns + 1] != NEWLINE]
    return np.union1d(newlines, lone) if len(lone) else newlines


def count_lines(arr: np.ndarray) -> int:
    """The lines ``arr`` ends, as Python's universal newlines count them: each ``\\n``, ``\\r\\n`` or lone
    ``\\r`` (a last ``\\r`` too)."""
    lines = int(np.count_nonzero(arr == NEWLINE))
    if len(arr) and RETURN in arr:
        lines += int(np.count_nonzero((arr[:-1] == RETURN) & (arr[1:] != NEWLINE))) + int(arr[-1] == RETURN)
    return lines


def count_newlines(arr: np.ndarray) -> int:
    """The ``\\n`` bytes of ``arr``: the lines it ends, as JSON Lines counts them."""
    return int(np.count_nonzero(arr == NEWLINE))


def unit_stops(arr: np.ndarray, ends: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Where each unit of ``arr`` ends (exclusive): after its newline, or at the end for a last unit without one."""
    stops = ends(arr) + 1
    if len(arr) and (not len(stops) or stops[-1] != len(arr)):
        stops = np.append(stops, len(arr))
    return stops


def units(chunks: Iterator[bytes], ends: Callable[[np.ndarray], np.ndarray]) -> Iterator[Units]:
    """The bytes of ``chunks`` regrouped into runs of whole units (a unit longer than a block is joined
    from its parts); the last run ends at the end of the file, with or without a newline."""
    pending: list[np.ndarray] = []
    offset = 0
    for chunk in chunks:
        arr = np.frombuffer(chunk, np.uint8)
        found = ends(arr)
        if not len(found):
            pending.append(arr)
            continue
        last = int(found[-1]) + 1
        shift = sum(len(p) for p in pending)
        buf = np.concatenate(pending + [arr[:last]]) if pending else arr[:last]
        yield offset, buf, found + (1 + shift)
        offset += len(buf)
        pending = [arr[last:]] if last < len(arr) else []
    if pending:
        buf = np.concatenate(pending) if len(pending) > 1 else pending[0]
        if len(buf):
            yield offset, buf, np.array([len(buf)], np.int64)


def line_runs(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The bytes of ``chunks`` regrouped into runs of whole lines (the last may lack its newline); a line longer
    than a chunk is joined from its parts. The consumer counts the lines (often it knows them already)."""
    pending: list[bytes] = []
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            pending.append(chunk)
            continue
        run = b"".join(pending + [chunk[:cut]]) if pending else chunk[:cut]
        pending = [chunk[cut:]] if cut < len(chunk) else []
        yield run
    run = b"".join(pending)
    if run:
        yield run


class BadUnit(Exception):
    """A unit that cannot be read: its byte ``offset`` in the bytes given to the counter (None: unknown) and
    why; :func:`cut_pieces` adds its 1-based ``line`` in the file."""

    def __init__(self, offset: Optional[int], why: str, line: Optional[int] = None) -> None:
        super().__init__(why)
        self.offset, self.why, self.line = offset, why, line


@dataclass
class Cut:
    """One piece found: bytes ``start..stop`` of the (decompressed) file, its rows, the bad rows it skipped,
    and the 0-based number of its first line."""

    start: int
    stop: int
    rows: int
    skipped: int
    line: int


@dataclass
class Index:
    """What one pass found: the pieces, the file's (decompressed) size, its bad rows and the first of them
    as ``(1-based line, why)``."""

    cuts: list
    size: int
    skipped: int
    first_bad: Optional[tuple[int, str]]


class _Cutter:
    """The state of :func:`cut_pieces` between runs."""

    def __init__(self, count: Counter, start: int, line: int, lines: Callable[[np.ndarray], int]) -> None:
        self.count, self.count_lines = count, lines
        self.cuts: list[Cut] = []
        self.start = self.end = start
        self.line = self.lines = line  # the current piece's first line; lines seen before self.end
        self.rows = self.skipped = self.bad_total = 0
        self.first_bad: Optional[tuple[int, str]] = None

    def take(self, offset: int, buf: np.ndarray, stops: np.ndarray, lo: int, hi: int) -> None:
        """Count units ``buf[lo:hi]`` (whole units) into the current piece."""
        if hi <= lo:
            return
        seg = buf[lo:hi]
        inner = stops[np.searchsorted(stops, lo, "right"):np.searchsorted(stops, hi, "right")] - lo
        try:
            rows, bad, first = self.count(seg, inner)
        except BadUnit as exc:
            exc.line = None if exc.offset is None else self.line_at(seg, exc.offset)
            raise
        if first is not None and self.first_bad is None:
            self.first_bad = (self.line_at(seg, first[0] or 0), first[1])
        self.rows += rows
        self.skipped += bad
        self.bad_total += bad
        self.lines += self.count_lines(seg)
        self.end = offset + hi

    def line_at(self, seg: np.ndarray, offset: int) -> int:
        """The 1-based line of byte ``offset`` of ``seg``, the run being counted."""
        return self.lines + self.count_lines(seg[:offset]) + 1

    def close(self) -> bool:
        """End the current piece here if it has rows (else it goes on); whether it ended."""
        if not self.rows:
            return False
        self.cuts.append(Cut(self.start, self.end, self.rows, self.skipped, self.line))
        self.start, self.line, self.rows, self.skipped = self.end, self.lines, 0, 0
        return True

    def finish(self) -> None:
        self.close()
        if self.end > self.start and self.cuts:  # trailing units without rows belong to the last piece
            last = self.cuts[-1]
            last.stop, last.skipped = self.end, last.skipped + self.skipped


def cut_pieces(runs: Iterator[Units], count: Counter, piece_bytes: Optional[int], start: int = 0,
               line: int = 0, lines: Callable[[np.ndarray], int] = count_newlines) -> Index:
    """Cut the units of ``runs`` (from byte ``start``, line ``line`` on) into pieces of about ``piece_bytes``
    (None: one piece), counting each piece's rows with ``count`` (called on runs of whole units; see
    :data:`Counter`) and its lines with ``lines`` (newlines; :func:`count_lines` for a format whose lines may
    end with a lone ``\\r``). A piece without rows is never made: its units join the next piece (or the last
    one)."""
    cutter = _Cutter(count, start, line, lines)
    for offset, buf, stops in runs:
        lo = 0
        while lo < len(buf):
            if piece_bytes is None:
                k = len(stops)
            else:
                target = cutter.start + piece_bytes - offset
                k = int(np.searchsorted(stops, max(target, lo + 1)))
            if k == len(stops):
                cutter.take(offset, buf, stops, lo, len(buf))
                break
            hi = int(stops[k])
            cutter.take(offset, buf, stops, lo, hi)
            if not cutter.close():  # no rows yet: the piece takes the rest of this run
                cutter.take(offset, buf, stops, hi, len(buf))
                break
            lo = hi
    cutter.finish()
    return Index(cutter.cuts, cutter.end, cutter.bad_total, cutter.first_bad)


def head_run(runs: Iterator[Units], nbytes: int) -> Optional[Units]:
    """The first runs of ``runs``, at least ``nbytes`` of them (or all), as one run (None for an empty file)."""
    taken: list[Units] = []
    size = 0
    for run in runs:
        taken.append(run)
        size += len(run[1])
        if size >= nbytes:
            break
    if len(taken) <= 1:
        return taken[0] if taken else None
    origin = taken[0][0]
    return (origin, np.concatenate([buf for _, buf, _ in taken]),
            np.concatenate([stops + (offset - origin) for offset, _, stops in taken]))


def runs_from(first: Optional[Units], rest: Iterator[Units], skip: int) -> Iterator[Units]:
    """``first`` without its first ``skip`` bytes (a CSV header), then ``rest``."""
    if first is not None:
        offset, buf, stops = first
        if skip < len(buf):
            yield offset + skip, buf[skip:], stops[stops > skip] - skip
    yield from rest
