"""Compressed text files (``.zst``, ``.gz`` ...): one cut short is refused naming it, alone or beside good
files; one that decompresses past the documented limit is refused with a typed error; blank lines cost no
memory while a file is described and read; the rows of a piece read in blocks keep their exact lines."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from shardstream import StreamingDataset
from shardstream.errors import BadRowError, CorruptShardError, DecompressedSizeError, InvalidArgumentError
from shardstream.format.zstdframes import TruncatedZstdError, ZstdStream

from .textdata import by_id, jsonl_bytes, rows, write

zstandard = pytest.importorskip("zstandard")


def zstd_frames(data: bytes, frame_bytes: int) -> bytes:
    """``data`` as a zstd stream of one frame per ``frame_bytes`` of it (as streaming compressors write)."""
    compress = zstandard.ZstdCompressor().compress
    return b"".join(compress(data[k:k + frame_bytes]) for k in range(0, len(data), frame_bytes))


def csv_bytes(n: int) -> bytes:
    return b"id,text\n" + b"".join(b'%d,"row %d"\n' % (i, i) for i in range(n))


CUTS = {
    "jsonl, many frames cut in half": ("a.jsonl.zst", lambda: zstd_frames(jsonl_bytes(rows(2000)), 20_000), 0.5),
    "jsonl, one frame cut in half": ("a.jsonl.zst", lambda: zstd_frames(jsonl_bytes(rows(2000)), 1 << 30), 0.5),
    "jsonl, one frame cut after its first bytes": ("a.jsonl.zst", lambda: zstd_frames(jsonl_bytes(rows(50)), 1 << 30),
                                                   0.02),
    "csv, many frames cut in half": ("a.csv.zst", lambda: zstd_frames(csv_bytes(5000), 10_000), 0.5),
}


@pytest.mark.parametrize("case", list(CUTS))
@pytest.mark.parametrize("beside_a_good_file", [False, True])
def test_a_zstd_file_cut_short_is_refused_naming_it(tmp_path, case, beside_a_good_file):
    """Read short, such a file lost the rows past the cut without a word (or all of them, and then alone
    it 'held no rows'); every codec must say that the file is damaged, and which."""
    name, make, keep = CUTS[case]
    blob = make()
    d = tmp_path / "data"
    d.mkdir()
    (d / name).write_bytes(blob[:max(1, int(len(blob) * keep))])
    if beside_a_good_file:
        good = jsonl_bytes(rows(20)) if name.endswith(".jsonl.zst") else csv_bytes(20)
        write(str(d / ("good" + name[1:])), good, codec="zstd")
    with pytest.raises(CorruptShardError, match=rf"{name.replace('.', '[.]')} cannot be read as zstd "
                                                r"\(TruncatedZstdError: .*cut short"):
        StreamingDataset(local=str(d if beside_a_good_file else d / name))


def test_a_zstd_file_of_whole_frames_reads_every_row(tmp_path):
    """Many frames, a skippable frame between them and checksums: all read, nothing refused."""
    data = jsonl_bytes(rows(600))
    compress = zstandard.ZstdCompressor(write_checksum=True).compress
    skippable = (0x184D2A5A).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    (tmp_path / "a.jsonl.zst").write_bytes(compress(data[:5000]) + skippable + compress(data[5000:]))
    assert by_id(StreamingDataset(local=str(tmp_path / "a.jsonl.zst"))) == list(range(600))


def _stream_of_every_kind() -> tuple[bytes, set[int], bytes]:
    """A zstd stream with raw, RLE and compressed blocks, checksums, an empty frame and a skippable frame;
    the offsets where a frame ends; what it decompresses to."""
    parts = [(b"\n" * 300_000, zstandard.ZstdCompressor(write_checksum=True)),  # RLE blocks
             (random.Random(0).randbytes(300), zstandard.ZstdCompressor(write_content_size=False)),  # a raw block
             (b"", zstandard.ZstdCompressor()),
             (jsonl_bytes(rows(12)), zstandard.ZstdCompressor(level=19))]
    blob, ends, plain = b"", {0}, b""
    for data, c in parts:
        blob += c.compress(data)
        plain += data
        ends.add(len(blob))
        blob += (0x184D2A50).to_bytes(4, "little") + (2).to_bytes(4, "little") + b"xy"
        ends.add(len(blob))
    return blob, ends, plain


class _Dribble(io.RawIOBase):
    """``data`` read at most ``step`` bytes at a time."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.step if size is None or size < 0 else min(size, self.step)
        out = self.data[self.pos:self.pos + size]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("step", [3, 1 << 16])
def test_a_zstd_stream_is_refused_at_every_cut_but_between_frames(step):
    blob, ends, plain = _stream_of_every_kind()
    for cut in range(len(blob) + 1):
        stream = ZstdStream(_Dribble(blob[:cut], step))
        if cut in ends:
            assert plain.startswith(stream.read()), cut
            continue
        with pytest.raises((TruncatedZstdError, zstandard.ZstdError)):
            stream.read()
    assert ZstdStream(io.BytesIO(blob)).read() == plain


@pytest.mark.parametrize("kind", ["jsonl", "csv", "txt"])
def test_a_compressed_file_past_the_limit_is_refused_when_opened(tmp_path, monkeypatch, kind):
    """A compressed text file is one piece, read whole: past SHARDSTREAM_MAX_DECOMPRESSED bytes it is refused
    with a typed error naming it and the ways out; at the limit it is read."""
    body = {"jsonl": jsonl_bytes(rows(12_000)), "csv": csv_bytes(80_000), "txt": b"a line\n" * 200_000}[kind]
    assert 1 << 20 < len(body) < 2 << 20
    path = write(str(tmp_path / f"big.{kind}.zst"), body, codec="zstd")
    monkeypatch.setenv("SHARDSTREAM_MAX_DECOMPRESSED", "1mb")
    with pytest.raises(DecompressedSizeError, match=r"big\.\w+\.zst decompresses to more than 1\.0 MiB .*"
                                                    r"Decompress it.*SHARDSTREAM_MAX_DECOMPRESSED"):
        StreamingDataset(local=path)
    monkeypatch.setenv("SHARDSTREAM_MAX_DECOMPRESSED", str(len(body)))
    assert len(StreamingDataset(local=path)) > 0
    monkeypatch.setenv("SHARDSTREAM_MAX_DECOMPRESSED", "lots")
    with pytest.raises(InvalidArgumentError, match="SHARDSTREAM_MAX_DECOMPRESSED='lots'"):
        StreamingDataset(local=write(str(tmp_path / f"other.{kind}.zst"), body, codec="zstd"))


_BOMB = textwrap.dedent("""
    import os, sys, zstandard
    from shardstream import StreamingDataset

    path, head, tail, mib = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode(), int(sys.argv[4])
    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as out:
        out.write(head)
        for _ in range(mib):
            out.write(b"\\n" * (1 << 20))
        out.write(tail)
    print(os.path.getsize(path), len(list(StreamingDataset(local=path))))
    print([int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0] << 10)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak RSS from /proc/self/status")
@pytest.mark.parametrize("kind, head, tail, mib, bound", [
    ("jsonl", '{"a": 1}\n', '{"a": 2}\n', 96, 1 << 30),
    ("csv", "a,b\n1,2\n", "3,4\n", 64, 3 << 29),
])
def test_blank_lines_of_a_compressed_file_cost_no_memory(tmp_path, kind, head, tail, mib, bound):
    """A few KiB of zstd holding ~100 MiB of blank lines between two rows: reading them held every line's
    offsets at once (19 bytes and more per decompressed byte: ~2 GB here); blocks of lines now, so the peak
    stays far below the size of the decompressed file times a few."""
    path = str(tmp_path / f"bomb.{kind}.zst")
    env = {**os.environ, "SHARDSTREAM_CACHE_DIR": str(tmp_path / "cache"), "SHARDSTREAM_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-c", _BOMB, path, head, tail, str(mib)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    size, count, peak = (int(x) for x in proc.stdout.split())
    assert size < 64 << 10 and count == 2
    assert peak < bound, f"peak RSS {peak >> 20} MiB reading {mib} MiB of blank lines"


def test_rows_of_a_piece_read_in_blocks_keep_their_lines(tmp_path):
    """Blank stretches longer than a read block, and rows across block ends: a bad row is still named by
    its exact line, and with on_bad_rows='skip' every other row is read in order."""
    items, line, bad_line = [], 0, None
    for i in range(3000):
        items.append(json.dumps({"id": i, "text": "x" * (i % 300)}))
        line += 1
        if i % 700 == 0:
            items.append("\n" * (1 << 20) + "  \t")  # ~1 MiB of blank lines, then a line of spaces
            line += (1 << 20) + 1
        if i == 2900:
            items.append('{"id": "broken')
            line += 1
            bad_line = line
    path = write(str(tmp_path / "d" / "a.jsonl.zst"), ("\n".join(items) + "\n").encode(), codec="zstd")
    with pytest.raises(BadRowError, match=rf"a\.jsonl\.zst line {bad_line}: it is not valid JSON"):
        list(StreamingDataset(local=path))
    with pytest.warns(UserWarning, match="1 row"):
        skipped = StreamingDataset(local=path, on_bad_rows="skip")
    assert by_id(skipped) == list(range(3000))


def test_csv_records_of_a_piece_read_in_blocks_keep_their_lines(tmp_path):
    """The same for CSV, with records that hold newlines; the bad record lies past the first 8 MiB, which
    describing parses, so the reader of the piece finds it."""
    lines = ["id,text"] + ["\n" * (9 << 20)]
    for i in range(4000):
        lines.append(f'{i},"row {i}\nsecond line"' if i % 3 == 0 else f"{i},row {i}")
        if i % 900 == 0:
            lines.append("\n" * (1 << 20))
    lines.insert(len(lines) - 5, "1,2,3")
    text = "\n".join(lines) + "\n"
    bad_line = text[:text.index("\n1,2,3\n")].count("\n") + 2
    path = write(str(tmp_path / "d" / "a.csv.zst"), text.encode(), codec="zstd")
    with pytest.raises(BadRowError, match=rf"a\.csv\.zst line {bad_line}: it has 3 fields, but the header 2"):
        list(StreamingDataset(local=path))
