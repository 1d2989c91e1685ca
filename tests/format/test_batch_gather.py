"""The vectorised gathers of the batch decoder against simple per-range and per-sample references:
random byte layouts, random sizes (0 included), random index orders, several shards, fixed and
variable columns, non-ASCII and invalid text; and each of the decoder's corruption checks."""

from __future__ import annotations

import os
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream import CorruptShardError, MDSWriter, StreamingDataset
from shardstream.format.batch import decode_batch, decode_range
from shardstream.format.gather import Windows, gather_spans, gather_strs, rows_at

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# -- the byte gathers ------------------------------------------------------------------------------
@st.composite
def layouts(draw):
    """A buffer and ranges inside it: (buf, starts, sizes), ranges in any order, some at the very end."""
    size = draw(st.integers(1, 3000))
    buf = draw(st.binary(min_size=size, max_size=size))
    n = draw(st.sampled_from([0, 1, 5, 63, 64, 90, 200]))
    floor = draw(st.sampled_from([0, 1, 16, 17, 100, 700]))
    ranges = []
    for _ in range(n):
        width = min(size, floor + draw(st.integers(0, 300)))
        start = draw(st.one_of(st.integers(0, size - width), st.just(size - width)))
        ranges.append((start, width))
    starts = np.array([r[0] for r in ranges], np.int64)
    sizes = np.array([r[1] for r in ranges], np.int64)
    return buf, starts, sizes


@SETTINGS
@given(layout=layouts(), gap=st.sampled_from([0, 1, 3]))
def test_gather_spans_matches_slices(layout, gap):
    buf, starts, sizes = layout
    data, offsets = gather_spans(Windows(buf), starts, sizes, gap)
    want = [buf[a:a + s] for a, s in zip(starts.tolist(), sizes.tolist())]
    assert data.dtype == np.uint8 and data.flags.writeable and data.flags.c_contiguous
    assert offsets.dtype == np.int64 and len(offsets) == len(want) + 1
    assert len(data) == int(offsets[-1]) == sum(map(len, want)) + gap * max(len(want) - 1, 0)
    for i, piece in enumerate(want):
        assert int(offsets[i + 1]) - int(offsets[i]) == len(piece) + (gap if i < len(want) - 1 else 0)
        assert data[offsets[i]:offsets[i] + len(piece)].tobytes() == piece


@SETTINGS
@given(layout=layouts(), width=st.integers(0, 20))
def test_rows_at_matches_slices(layout, width):
    buf, starts, _ = layout
    starts = starts[starts <= len(buf) - width]
    got = rows_at(Windows(buf), starts, width)
    assert got.shape == (len(starts), width) and got.dtype == np.uint8 and got.flags.c_contiguous
    assert [bytes(row) for row in got] == [buf[a:a + width] for a in starts.tolist()]


_text = st.text(st.characters(codec="utf-8"), max_size=40)


@SETTINGS
@given(texts=st.lists(_text, max_size=150), junk=st.binary(max_size=30), order=st.randoms(use_true_random=False))
def test_gather_strs_is_the_decoded_ranges_or_none(texts, junk, order):
    pieces = [t.encode() for t in texts]
    buf = junk + b"".join(pieces) + junk
    spans, at = [], len(junk)
    for p in pieces:
        spans.append((at, len(p)))
        at += len(p)
    order.shuffle(spans)
    starts = np.array([s for s, _ in spans], np.int64)
    sizes = np.array([z for _, z in spans], np.int64)
    got = gather_strs(Windows(buf), starts, sizes)
    want = [str(buf[a:a + z], "utf-8") for a, z in spans]
    if got is None:  # only when a text holds a NUL (the per-range decode is then used)
        assert any("\x00" in t for t in want)
    else:
        assert got == want and all(type(s) is str for s in got)


def test_gather_strs_refuses_invalid_utf8_and_nul():
    buf = b"abc\xff\xfeok\x00zz" + b"y" * 1200
    assert gather_strs(Windows(buf), np.array([0, 3], np.int64), np.array([3, 2], np.int64)) is None
    assert gather_strs(Windows(buf), np.array([5, 8], np.int64), np.array([3, 2], np.int64)) is None
    for n, size in ((40, 1), (100, 1), (100, 20)):
        starts = np.arange(n, dtype=np.int64) * (800 // n) + 10
        assert gather_strs(Windows(buf), starts, np.full(n, size, np.int64)) == ["y" * size] * n
        starts[n // 2] = 3  # one range starts inside the invalid bytes
        assert gather_strs(Windows(buf), starts, np.full(n, size, np.int64)) is None


# -- decode_batch / decode_range against per-sample decoding ----------------------------------------
COLUMNS = {"id": "int", "text": "str", "tokens": "ndarray:int32", "grid": "ndarray:int16", "fix": "ndarray:uint8:3",
           "blob": "bytes", "score": "float32", "any": "ndarray"}


@st.composite
def samples(draw, n):
    out = []
    for i in range(n):
        length = draw(st.sampled_from([0, 1, 2, 5, 63, 64, 255, 256, 300]))
        ndim = draw(st.integers(1, 3))
        out.append({
            "id": i,
            "text": draw(_text),
            # a 1-D array of 0 elements, stored as its header (the writer refuses empty arrays)
            "tokens": np.arange(length, dtype=np.int32) * (i + 1) if length else b"\x04\x00",
            "grid": np.full(tuple(draw(st.integers(1, 3)) for _ in range(ndim)), i, np.int16),
            "fix": np.array([i, i + 1, i + 2], np.uint8),
            "blob": bytes([i % 256]) * draw(st.integers(0, 5)),
            "score": np.float32(i / 3),
            "any": np.arange(1 + i % 3, dtype=["uint8", "float64"][i % 2]),
        })
    return out


@SETTINGS
@given(data=st.data(), n=st.sampled_from([1, 30, 70]))
def test_decode_matches_per_sample(data, n, assert_batch):
    rows = data.draw(samples(n))
    with tempfile.TemporaryDirectory() as tmp:
        with MDSWriter(out=tmp, columns=COLUMNS, size_limit=data.draw(st.sampled_from([1 << 12, 1 << 20]))) as w:
            for s in rows:
                w.write(s)
        ds = StreamingDataset(local=tmp)
        readers = [ds.table.random_reader(s) for s in range(len(ds.shards))]
        for s, reader in enumerate(readers):
            m = reader.samples
            idx = data.draw(st.lists(st.integers(0, m - 1), max_size=60))
            columns = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1,
                                                               unique=True)))
            assert_batch(decode_batch(reader, idx, columns), readers, [s] * len(idx), idx, columns)
            lo = data.draw(st.integers(0, m))
            hi = data.draw(st.integers(lo, m))
            assert_batch(decode_range(reader, lo, hi, columns), readers, [s] * (hi - lo), range(lo, hi), columns)
        picks = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=80))
        got = ds.get_batch(picks)
        shards = np.searchsorted(ds.table.ends_array, picks, side="right")
        assert_batch(got, readers, shards.tolist(), [p - ds.table.starts[s] for p, s in zip(picks, shards)])


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """Enough samples per batch for the chunked copies (ranges of 16 bytes or more)."""
    rng = np.random.default_rng(3)
    rows = [{"id": i, "text": "é" * int(rng.integers(8, 30)) + f"{i}",
             "tokens": rng.integers(-9, 9, int(rng.integers(4, 700))).astype(np.int32)} for i in range(600)]
    out = str(tmp_path_factory.mktemp("large") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "text": "str", "tokens": "ndarray:int32"}, size_limit=1 << 17) as w:
        for s in rows:
            w.write(s)
    return out, rows


def test_large_batches_in_any_order(large):
    out, rows = large
    ds = StreamingDataset(local=out)
    rng = np.random.default_rng(5)
    for idx in (np.arange(600), rng.permutation(600), rng.integers(0, 600, 500), np.arange(599, -1, -1)):
        batch = ds.get_batch(idx)
        assert batch["text"] == [rows[i]["text"] for i in idx.tolist()]
        assert batch["id"].tolist() == idx.tolist()
        for k, i in enumerate(idx.tolist()):
            assert np.array_equal(batch["tokens"][k], rows[i]["tokens"])


# -- damaged values fail with their batch ------------------------------------------------------------
def _write_with_bad_sample(tmp_path, column: str, encoding: str, good, bad, bad_at: int = 30, n: int = 40) -> str:
    out = str(tmp_path / "ds")
    with MDSWriter(out=out, columns={column: encoding, "id": "int"}) as w:
        for i in range(n):
            w.write({column: bad if i == bad_at else good(i), "id": i})
    return out


BAD_VALUES = [
    ("ndarray:int32", b"", "an empty value has no array header"),
    ("ndarray:int32", b"\x05\x03", "an array header is longer than its column"),
    ("ndarray:int32", b"\x06\x03\x00\x00", "an array header is longer than its column"),
    ("ndarray:int32", b"\x04\x03" + b"\x00" * 8, "shape does not match its byte size"),
    ("ndarray:int32", b"\x00" + b"\x00" * 8, "an array header says 0 dimensions"),
    ("ndarray:int32", b"\x08\x01\x02" + b"\x00" * 4, "shape does not match its byte size"),
    ("ndarray:int32", b"\x08\x01", "an array header is longer than its column"),
    ("str", "é".encode()[:1] + b"abcdefghijklmnopq", "invalid UTF-8"),
]


@pytest.mark.parametrize("encoding,raw,message", BAD_VALUES)
def test_corrupt_values_fail_with_their_batch(tmp_path, encoding, raw, message, assert_batch):
    def good(i):
        return np.arange(10 + i * 7, dtype=np.int32) if encoding.startswith("ndarray") else f"text number {i:04d}é"

    out = _write_with_bad_sample(tmp_path, "c", encoding, good, raw)
    ds = StreamingDataset(local=out)
    reader = ds.table.reader(0)
    with pytest.raises(CorruptShardError, match=message):
        decode_range(reader, 0, 40)
    with pytest.raises(CorruptShardError, match=message):
        decode_batch(reader, list(range(39, -1, -1)))
    readers = [reader]
    assert_batch(decode_range(reader, 0, 30), readers, [0] * 30, range(30))
    rows = [*range(31, 40), *range(29, -1, -1)]
    assert_batch(decode_batch(reader, rows), readers, [0] * len(rows), rows)
    batches = ds.batches(8)
    for _ in range(3):  # samples 0..23 come before the damaged batch
        next(batches)
    with pytest.raises(CorruptShardError, match=message):
        next(batches)


def test_sizes_that_do_not_add_up_fail_with_their_batch(tmp_path):
    out = _write_with_bad_sample(tmp_path, "c", "str", lambda i: f"text {i}", "a damaged one")
    path = os.path.join(out, "shard.00000.mds")
    with open(path, "rb") as f:
        raw = f.read()
    (at,) = struct.unpack_from("<I", raw, 4 + 4 * 30)
    patch_u32(path, at, 3)  # the size header of sample 30 no longer adds up to its size
    ds = StreamingDataset(local=out)
    with pytest.raises(CorruptShardError, match="column sizes do not add up"):
        decode_range(ds.table.reader(0), 25, 35)
    batches = ds.batches(10)
    for _ in range(3):
        next(batches)
    with pytest.raises(CorruptShardError, match="column sizes do not add up"):
        next(batches)


def test_a_sample_shorter_than_its_size_header(tmp_path):
    out = _write_with_bad_sample(tmp_path, "c", "str", lambda i: f"text {i}", "")
    path = os.path.join(out, "shard.00000.mds")
    with open(path, "rb") as f:
        raw = f.read()
    offsets = struct.unpack_from("<41I", raw, 4)
    # move the start of sample 31 back so that sample 30 (4-byte size header + 8-byte id) keeps 2 bytes
    patch_u32(path, 4 + 4 * 31, offsets[30] + 2)
    ds = StreamingDataset(local=out)
    with pytest.raises(CorruptShardError, match="a sample is shorter than its size header"):
        decode_range(ds.table.reader(0), 0, 40)
    with pytest.raises(CorruptShardError, match="a sample is shorter than its size header"):
        decode_batch(ds.table.reader(0), [30, 1])


def patch_u32(path: str, at: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<I", value))
