"""Pieces of text files over any line lengths, block sizes and piece sizes (hypothesis): every row read
once, in order, from pieces of whole lines (whole records for CSV) that start at the line they say."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.format import lineindex
from shardstream.format.decompress import open_decompressed
from shardstream.format.files import codec_of
from shardstream.format.lines import CSV_FORMAT, JSONL_FORMAT, TEXT_FORMAT
from shardstream.format.textfiles import first_line

from .textdata import write

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class BytesSource:
    """A file's bytes as a format describes them (what storage's FileSource gives, from memory)."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name = self.url = name
        self.data, self.size, self.version = data, len(data), ""
        self.reads = 0

    def read(self, offset: int, length: int) -> bytes:
        self.reads += 1
        return self.data[offset:offset + length]

    def open(self):
        return open_decompressed(io.BytesIO(self.data), codec_of(self.name))


def read_all(fmt, name: str, data: bytes, piece_bytes: int, block: int, **options) -> tuple[list, list]:
    """``(pieces, samples)`` of a file described with these sizes, each piece read from a file of its own."""
    saved = lineindex.PIECE_BYTES, lineindex.BLOCK
    lineindex.PIECE_BYTES, lineindex.BLOCK = piece_bytes, block
    try:
        pieces, _ = fmt.describe(BytesSource(name, data), None, **options)
    finally:
        lineindex.PIECE_BYTES, lineindex.BLOCK = saved
    out = []
    with tempfile.TemporaryDirectory() as d:
        for p in pieces:
            path = os.path.join(d, f"{p.part}.piece")
            chunk = data if p.start < 0 else data[p.start:p.stop]
            write(path, chunk if not codec_of(name) else open_decompressed(io.BytesIO(data), codec_of(name)).read())
            rows = fmt.open_piece(path, _cached(p, len(chunk)), lambda: b"")
            out += list(rows.iter_range())
    return pieces, out


def _cached(piece, size):
    from dataclasses import replace

    return replace(piece, cached=True, file_bytes=size if piece.start < 0 else piece.file_bytes)


def check_pieces(pieces, text: bytes, total_rows: int, lines: bool = True, universal: bool = False) -> None:
    """Pieces are contiguous, non-empty, start after a line's end, and know their first line (lines ended by
    ``\\n``; with ``universal``, as Python's universal newlines end them: ``\\n``, ``\\r\\n`` or a lone ``\\r``)."""
    assert sum(p.samples for p in pieces) == total_rows
    assert all(p.samples > 0 for p in pieces)
    for a, b in zip(pieces, pieces[1:]):
        assert a.stop == b.start and b.first == a.first + a.samples
    for p in pieces:
        if p.start > 0:
            assert text[p.start - 1:p.start] in ((b"\n",) if lines else (b"\n", b"\r"))
            assert text[p.start - 1:p.start + 1] != b"\r\n"  # never between the two bytes of a line end
            before = text[:p.start]
            ended = len(io.StringIO(before.decode(), newline=None).readlines()) if universal else before.count(b"\n")
            assert first_line(p) == ended


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.text("ab\n\r\",  ", max_size=300)
line_items = st.lists(st.tuples(texts, st.booleans()), max_size=30)
sizes = st.tuples(st.integers(1, 400), st.integers(1, 200))


@SETTINGS
@given(items=line_items, sz=sizes, crlf=st.booleans(), trailing=st.booleans())
def test_json_lines_over_any_boundaries(items, sz, crlf, trailing):
    nl = "\r\n" if crlf else "\n"
    lines, want = [], []
    for k, (t, blank) in enumerate(items):
        if blank:
            lines.append(" " * (k % 3))
        lines.append(json.dumps({"k": k, "t": t}))
        want.append({"k": k, "t": t})
    data = (nl.join(lines) + (nl if trailing and lines else "")).encode()
    pieces, got = read_all(JSONL_FORMAT, "x.jsonl", data, *sz)
    assert got == want
    check_pieces(pieces, data, len(want))
    skip_pieces, skip_got = read_all(JSONL_FORMAT, "x.jsonl", data, *sz, on_bad_rows="skip")
    assert skip_got == want and [p.samples for p in skip_pieces] == [p.samples for p in pieces]


@SETTINGS
@given(items=line_items, sz=sizes, trailing=st.booleans(), codec=st.sampled_from([None, "gzip", "zstd"]))
def test_text_lines_over_any_boundaries(items, sz, trailing, codec):
    lines = [t for t, _ in items]  # with \n, \r\n and lone \r inside
    data = ("\n".join(lines) + ("\r\n" if trailing and lines else "")).encode()
    name = "x.txt" + {None: "", "gzip": ".gz", "zstd": ".zst"}[codec]
    stored = data if codec is None else _compress(data, codec)
    pieces, got = read_all(TEXT_FORMAT, name, stored, *sz)
    want = [line.rstrip("\n") for line in io.StringIO(data.decode(), newline=None).readlines()]  # as HF reads it
    assert [r["text"] for r in got] == want
    if codec:
        assert len(pieces) == (1 if want else 0) and all(p.start == -1 and p.plain_bytes == len(data) for p in pieces)
    else:
        check_pieces(pieces, data, len(want), lines=False)


def _compress(data: bytes, codec: str) -> bytes:
    import gzip

    import zstandard

    return gzip.compress(data) if codec == "gzip" else zstandard.ZstdCompressor().compress(data)


cells = st.text("ab,\n\r\" x1", max_size=12)


@SETTINGS
@given(table=st.lists(st.tuples(cells, st.integers(-99, 99), cells), max_size=25), sz=sizes,
       terminator=st.sampled_from(["\n", "\r\n", "\r"]))
def test_csv_records_over_any_boundaries(table, sz, terminator):
    pytest.importorskip("pyarrow")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=terminator, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["a", "n", "b"])
    writer.writerows(table)
    data = buf.getvalue().encode()
    pieces, got = read_all(CSV_FORMAT, "x.csv", data, *sz)
    assert len(got) == len(list(csv.reader(io.StringIO(buf.getvalue(), newline="")))) - 1 == len(table)
    if table:  # the pieces read as the whole file does, with the types inferred
        import pyarrow as pa
        import pyarrow.csv as pc

        types = dict(zip("anb", map(pa.type_for_alias, pieces[0].types)))
        whole = pc.read_csv(io.BytesIO(data), parse_options=pc.ParseOptions(newlines_in_values=True),
                            convert_options=pc.ConvertOptions(column_types=types))
        assert got == whole.to_pylist() and pieces[0].types[1] == "int64"
    check_pieces(pieces, data, len(table), lines=False, universal=True)


def test_a_line_longer_than_a_block_and_a_piece(tmp_path):
    long = {"k": 0, "t": "x" * 5000}
    data = (json.dumps(long) + "\n" + json.dumps({"k": 1, "t": "y"}) + "\n").encode()
    pieces, got = read_all(JSONL_FORMAT, "x.jsonl", data, 100, 64)
    assert got == [long, {"k": 1, "t": "y"}] and len(pieces) == 2 and pieces[0].stop == data.index(b"\n") + 1


def test_describing_reads_a_plain_file_in_blocks_once():
    data = b"".join(json.dumps({"k": k}).encode() + b"\n" for k in range(1000))
    source = BytesSource("x.jsonl", data)
    pieces, _ = JSONL_FORMAT.describe(source, None)
    assert source.reads == -(-len(data) // lineindex.BLOCK) == 1 and [p.samples for p in pieces] == [1000]
    assert np.sum([p.stop - p.start for p in pieces]) == len(data)
