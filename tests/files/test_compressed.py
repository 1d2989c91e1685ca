"""Compressed text files (``.zst``, ``.gz`` ...): one cut short is refused naming it, alone or beside good
files."""

from __future__ import annotations

import io
import os
import random

import pytest

from shardstream import StreamingDataset
from shardstream.errors import CorruptShardError
from shardstream.format.zstdframes import TruncatedZstdError, ZstdStream

from .textdata import by_id, jsonl_bytes, rows, write, write_jsonl

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
