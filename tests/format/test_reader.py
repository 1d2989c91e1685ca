"""ShardReader / open_shard: random access, zero-copy arrays, compressed shards, digests."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from shardstream import (
    CorruptShardError,
    HashMismatchError,
    SampleIndexError,
    StreamingDataset,
    UnsupportedFormatError,
)
from shardstream.format.index import read_index
from shardstream.format.reader import ShardReader, open_shard


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_shard_reader_random_access(tmp_path, mixed, make_dataset, assert_same_sample):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples)
    (info,) = read_index(out)
    raw = open(os.path.join(out, info.raw_data.basename), "rb").read()
    reader = ShardReader(info, raw)
    assert len(reader) == len(samples) == reader.samples
    for i in (0, 17, len(samples) - 1):
        assert_same_sample(reader.get(i), samples[i])
    got = list(reader.iter_range(5, 9))
    assert len(got) == 4
    for g, w in zip(got, samples[5:9]):
        assert_same_sample(g, w)
    assert len(list(reader.iter_range())) == len(samples)
    begin, end = struct.unpack_from("<II", raw, 4 + 4 * 3)
    assert bytes(reader.sample_bytes(3)) == raw[begin:end]
    for bad in (-1, len(samples), 10**9):
        with pytest.raises(SampleIndexError):
            reader.get(bad)
        with pytest.raises(IndexError):
            reader.sample_bytes(bad)


def test_open_shard_maps_the_file(tmp_path, mixed, make_dataset, assert_same_sample):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, size_limit=1024)
    shards = read_index(out)
    k = 0
    for info in shards:
        reader = open_shard(out, info)
        for i in range(info.samples):
            assert_same_sample(reader.get(i), samples[k])
            k += 1
    assert k == len(samples)


def _payload_offsets(raw, parse_shard, names, sizes, arrays_of):
    """(file offset of each array column's payload, its array) for every sample."""
    shard = parse_shard(raw)
    rows = []
    n_var = sum(1 for s in sizes if s is None)
    for j in range(shard.num_samples):
        payloads = shard.split_sample(j, names, sizes)
        pos = shard.offsets[j] + 4 * n_var
        row = {}
        for name, size in zip(names, sizes):
            length = len(payloads[name])
            if name in arrays_of:
                row[name] = pos + length - arrays_of[name](j).nbytes  # payload starts after the header
            pos += length
        rows.append(row)
    return rows


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_ndarray_columns_are_zero_copy_views_when_aligned(tmp_path, make_dataset, parse_shard, compression):
    rng = np.random.default_rng(3)
    samples = []
    for i in range(80):
        samples.append({
            "a": "p" * int(rng.integers(0, 9)),                    # shifts the alignment of what follows
            "f": rng.standard_normal((1, 3)),                      # ndarray:float64:1,3 (fixed)
            "u": rng.standard_normal(int(rng.integers(1, 6))),     # ndarray (untyped)
            "v": rng.standard_normal(int(rng.integers(1, 6))),     # ndarray:float64
        })
    columns = {"a": "str", "f": "ndarray:float64:1,3", "u": "ndarray", "v": "ndarray:float64"}
    out = make_dataset(tmp_path, columns, samples, compression=compression)
    ds = StreamingDataset(local=out)
    first = [ds[i] for i in range(len(ds))]  # decompresses the shard on first use when compressed
    reader = ds.reader(0)
    raw = open(os.path.join(out, "shard.00000.mds"), "rb").read()
    names = ["a", "f", "u", "v"]
    sizes = [None, 24, None, None]
    where = _payload_offsets(raw, parse_shard, names, sizes, {c: (lambda j, c=c: samples[j][c]) for c in "fuv"})
    shard_bytes = np.frombuffer(reader.buf, np.uint8)
    seen = {c: {True: 0, False: 0} for c in "fuv"}
    for j, got in enumerate(first):
        for c in "fuv":
            arr = got[c]
            assert arr.dtype == np.float64 and np.array_equal(arr, samples[j][c])
            aligned = where[j][c] % 8 == 0
            seen[c][aligned] += 1
            if aligned:
                assert np.shares_memory(arr, shard_bytes), f"sample {j} column {c}: aligned but copied"
                assert not arr.flags.writeable
            else:
                assert not np.shares_memory(arr, shard_bytes), f"sample {j} column {c}: unaligned view"
                assert arr.flags.aligned
    for c in "fuv":
        assert seen[c][True] and seen[c][False], f"column {c}: test data did not cover both cases {seen[c]}"


@pytest.mark.parametrize("compression", ["zstd", "gz", "br", "snappy", "bz2"])
def test_compressed_shard_is_decompressed_beside_on_first_use(tmp_path, mixed, make_dataset, assert_same_sample,
                                                               compression):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, compression=compression, size_limit=2048)
    shards = read_index(out)
    assert len(shards) > 1
    raw0 = os.path.join(out, shards[0].raw_data.basename)
    raw1 = os.path.join(out, shards[1].raw_data.basename)
    assert not os.path.exists(raw0)
    ds = StreamingDataset(local=out)
    assert_same_sample(ds[0], samples[0])
    assert os.path.exists(raw0) and not os.path.exists(raw1)
    assert os.path.getsize(raw0) == shards[0].raw_data.bytes
    assert os.path.exists(os.path.join(out, shards[0].zip_data.basename))  # the only durable copy stays
    for got, want in zip(ds, samples):
        assert_same_sample(got, want)
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")]
    # A new dataset object reads the decompressed files (and still matches).
    ds2 = StreamingDataset(local=out, validate_hash=None)
    for i in range(len(samples)):
        assert_same_sample(ds2[i], samples[i])


def test_validate_hash_passes_on_good_data(tmp_path, mixed, make_dataset, assert_same_sample):
    columns, samples = mixed
    for compression in (None, "zstd"):
        out = make_dataset(tmp_path, columns, samples, subdir=f"d{compression}", hashes=["sha1", "xxh64"],
                           compression=compression, size_limit=2048)
        for algo in ("xxh64", "sha1"):
            ds = StreamingDataset(local=out, validate_hash=algo)
            for got, want in zip(ds, samples):
                assert_same_sample(got, want)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_validate_hash_detects_a_flipped_byte(tmp_path, mixed, make_dataset, compression):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, hashes=["xxh64"], compression=compression, size_limit=2048)
    shards = read_index(out)
    victim = shards[1].stored
    flip_byte(os.path.join(out, victim.basename), victim.bytes - 3)
    ds = StreamingDataset(local=out, validate_hash="xxh64")
    ds[0]  # shard 0 is intact
    first_of_1 = shards[0].samples
    with pytest.raises(HashMismatchError) as info:
        ds[first_of_1]
    assert isinstance(info.value, CorruptShardError)
    assert victim.basename in str(info.value)


def test_validate_hash_without_a_recorded_digest(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}], hashes=["sha1"])
    ds = StreamingDataset(local=out, validate_hash="xxh64")
    with pytest.raises(HashMismatchError) as info:
        ds[0]
    assert "xxh64" in str(info.value)
    with pytest.raises(UnsupportedFormatError):
        StreamingDataset(local=out, validate_hash="bogus")


def test_flipped_byte_in_compressed_shard_without_hashes_is_detected_or_harmless(tmp_path, make_dataset):
    # Without digests a damaged compressed shard must still never crash with a non-library error.
    samples = [{"s": f"text {i}" * 3, "i": i} for i in range(200)]
    out = make_dataset(tmp_path, {"s": "str", "i": "int"}, samples, compression="gz")
    (info,) = read_index(out)
    flip_byte(os.path.join(out, info.zip_data.basename), info.zip_data.bytes // 2)
    ds = StreamingDataset(local=out)
    with pytest.raises(CorruptShardError) as err:
        list(ds)
    assert info.zip_data.basename in str(err.value)
