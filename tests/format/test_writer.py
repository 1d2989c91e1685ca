"""MDSWriter: byte-level shard layout, index.json, shard sizing, compression, hashes,
argument validation and clean failure behaviour."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import re
import struct

import brotli
import numpy as np
import pytest
import snappy
import xxhash
import zstandard

import shardstream
from shardstream import (
    EncodeError,
    InvalidArgumentError,
    MDSWriter,
    OutputExistsError,
    StreamingDataset,
    UnsupportedFormatError,
    WriterError,
)
from shardstream.format.encodings import get_encoding

SHARD_KEYS = {"column_encodings", "column_names", "column_sizes", "compression", "format", "hashes",
              "raw_data", "samples", "size_limit", "version", "zip_data"}


def independent_digest(algo: str, data: bytes) -> str:
    if algo.startswith("xxh"):
        return getattr(xxhash, algo)(data).hexdigest()
    return hashlib.new(algo, data).hexdigest()


def independent_decompress(name: str, data: bytes) -> bytes:
    family = name.split(":")[0]
    if family == "zstd":
        return zstandard.ZstdDecompressor().decompress(data)
    if family == "gz":
        return gzip.decompress(data)
    if family == "bz2":
        return bz2.decompress(data)
    if family == "br":
        return brotli.decompress(data)
    if family == "snappy":
        return snappy.decompress(data)
    raise AssertionError(name)


def shard_files(dirname):
    return sorted(n for n in os.listdir(dirname) if n != "index.json")


# -- byte layout ------------------------------------------------------------------------
def test_shard_byte_layout_matches_the_format(tmp_path, mixed, make_dataset, parse_shard, load_index):
    columns, samples = mixed
    columns["blob"] = "bytes"
    columns["fixed"] = "ndarray:float32:2,2"
    for i, s in enumerate(samples):
        s["blob"] = bytes([i % 256]) * (i % 5)
        s["fixed"] = np.full((2, 2), i, np.float32)
    out = make_dataset(tmp_path, columns, samples, size_limit=2048)
    index = load_index(out)
    assert set(index) == {"shards", "version"} and index["version"] == 2
    names = sorted(columns)
    assert len(index["shards"]) > 2
    k = 0
    for entry in index["shards"]:
        assert set(entry) == SHARD_KEYS
        assert entry["column_names"] == names
        assert entry["column_encodings"] == [columns[n] for n in names]
        assert entry["column_sizes"] == [get_encoding(columns[n]).size for n in names]
        assert entry["format"] == "mds" and entry["version"] == 2 and entry["zip_data"] is None
        raw = open(os.path.join(out, entry["raw_data"]["basename"]), "rb").read()
        assert entry["raw_data"]["bytes"] == len(raw)
        shard = parse_shard(raw)
        assert shard.num_samples == entry["samples"] > 0
        config_bytes = raw[4 + 4 * (shard.num_samples + 1):shard.offsets[0]]
        assert shard.offsets[0] == 4 + 4 * (shard.num_samples + 1) + len(config_bytes)
        assert all(a < b for a, b in zip(shard.offsets, shard.offsets[1:]))
        assert shard.offsets[-1] == len(raw)
        # The embedded config is the index entry without samples/raw_data/zip_data, key-sorted JSON.
        assert set(shard.config) == SHARD_KEYS - {"samples", "raw_data", "zip_data"}
        assert shard.config == {key: entry[key] for key in shard.config}
        assert config_bytes == json.dumps(shard.config, sort_keys=True).encode()
        for j in range(shard.num_samples):
            want = samples[k]
            payloads = shard.split_sample(j, entry["column_names"], entry["column_sizes"])
            var_cols = [n for n, s in zip(names, entry["column_sizes"]) if s is None]
            header = struct.unpack_from(f"<{len(var_cols)}I", shard.samples[j])
            assert list(header) == [len(get_encoding(columns[n]).encode(want[n])) for n in var_cols]
            for n in names:
                assert payloads[n] == get_encoding(columns[n]).encode(want[n]), (k, n)
            k += 1
    assert k == len(samples)


def test_sample_bytes_are_sizes_then_payloads_in_sorted_column_order(tmp_path, make_dataset, parse_shard):
    columns = {"zeta": "str", "alpha": "int", "mid": "bytes", "beta": "uint16"}
    out = make_dataset(tmp_path, columns, [{"zeta": "zz", "alpha": 7, "mid": b"MMM", "beta": 513}])
    shard = parse_shard(open(os.path.join(out, "shard.00000.mds"), "rb").read())
    assert shard.config["column_names"] == ["alpha", "beta", "mid", "zeta"]
    # two variable columns (mid, zeta): sizes 3, 2; then alpha int64, beta uint16, mid, zeta
    assert shard.samples[0] == struct.pack("<II", 3, 2) + struct.pack("<q", 7) + b"\x01\x02" + b"MMM" + b"zz"


def test_index_and_shard_names(tmp_path, mixed, make_dataset, load_index):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, size_limit=1024)
    index = load_index(out)
    names = [s["raw_data"]["basename"] for s in index["shards"]]
    assert names == [f"shard.{i:05d}.mds" for i in range(len(names))]
    assert shard_files(out) == names
    assert sum(s["samples"] for s in index["shards"]) == len(samples)
    out = make_dataset(tmp_path, columns, samples, subdir="z", size_limit=1024, compression="zstd:7")
    index = load_index(out)
    for i, s in enumerate(index["shards"]):
        assert s["raw_data"]["basename"] == f"shard.{i:05d}.mds"
        assert s["zip_data"]["basename"] == f"shard.{i:05d}.mds.zstd"
        assert s["compression"] == "zstd:7"
    assert shard_files(out) == [s["zip_data"]["basename"] for s in index["shards"]]


def test_index_json_is_sorted_key_json(tmp_path, mixed, make_dataset):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples[:3])
    text = open(os.path.join(out, "index.json")).read()
    assert text == json.dumps(json.loads(text), sort_keys=True)


# -- shard sizing -----------------------------------------------------------------------
@pytest.mark.parametrize("limit,expected", [(1500, 1500), ("1kb", 1024), ("2KiB", 2048), ("0.5 kb", 512)])
def test_size_limit_packs_greedily(tmp_path, make_dataset, parse_shard, load_index, limit, expected):
    rng = np.random.default_rng(0)
    samples = [{"data": bytes(int(rng.integers(1, 120))), "n": i} for i in range(200)]
    out = make_dataset(tmp_path, {"data": "bytes", "n": "int"}, samples, size_limit=limit)
    index = load_index(out)
    shards = index["shards"]
    assert len(shards) > 3
    assert all(s["size_limit"] == expected for s in shards)
    k = 0
    for i, s in enumerate(shards):
        raw = s["raw_data"]["bytes"]
        assert s["samples"] >= 1
        assert raw <= expected
        k += s["samples"]
        if i + 1 < len(shards):
            # the next sample would not have fit (sample bytes + its 4-byte offset entry)
            nxt = 4 + 8 + len(samples[k]["data"]) + 4
            assert raw + nxt > expected
    assert k == len(samples)


def test_sample_larger_than_size_limit_gets_its_own_shard(tmp_path, make_dataset, load_index):
    samples = [{"b": b"a" * 10}, {"b": b"B" * 5000}, {"b": b"c" * 10}, {"b": b"D" * 6000}, {"b": b"e"}]
    out = make_dataset(tmp_path, {"b": "bytes"}, samples, size_limit=1024)
    shards = load_index(out)["shards"]
    assert [s["samples"] for s in shards] == [1, 1, 1, 1, 1]
    assert shards[1]["raw_data"]["bytes"] > 1024
    ds = StreamingDataset(local=out)
    assert [s["b"] for s in ds] == [s["b"] for s in samples]


def test_no_samples_writes_no_shard(tmp_path, make_dataset, load_index):
    out = make_dataset(tmp_path, {"a": "int"}, [])
    assert load_index(out) == {"shards": [], "version": 2}
    assert shard_files(out) == []
    with pytest.raises(RuntimeError, match="Stream contains no samples"):
        StreamingDataset(local=out)


def test_no_size_limit_means_one_shard(tmp_path, make_dataset, load_index):
    samples = [{"b": bytes(1000)} for _ in range(100)]
    out = make_dataset(tmp_path, {"b": "bytes"}, samples, size_limit=None)
    shards = load_index(out)["shards"]
    assert len(shards) == 1 and shards[0]["samples"] == 100 and shards[0]["size_limit"] is None


@pytest.mark.parametrize("limit", [-1, "0kb", 2**32, "5gb", "64 parsecs", "mb", True, 1.5j, [1]])
def test_invalid_size_limit(tmp_path, limit):
    with pytest.raises(InvalidArgumentError):
        MDSWriter(out=str(tmp_path / "x"), columns={"a": "int"}, size_limit=limit)


# -- compression and hashes -------------------------------------------------------------
COMPRESSIONS = ["zstd", "zstd:7", "gz", "gz:1", "bz2", "bz2:3", "br", "br:5", "snappy"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_compression(tmp_path, mixed, make_dataset, load_index, assert_same_sample, compression):
    columns, samples = mixed
    hashes = ["sha1", "xxh64"]
    out = make_dataset(tmp_path, columns, samples, size_limit=2048, compression=compression, hashes=hashes)
    index = load_index(out)
    ext = compression.split(":")[0]
    assert len(index["shards"]) > 1
    for s in index["shards"]:
        assert s["compression"] == compression
        assert s["zip_data"]["basename"] == s["raw_data"]["basename"] + "." + ext
        data = open(os.path.join(out, s["zip_data"]["basename"]), "rb").read()
        assert len(data) == s["zip_data"]["bytes"]
        raw = independent_decompress(compression, data)
        assert len(raw) == s["raw_data"]["bytes"]
        assert struct.unpack_from("<I", raw)[0] == s["samples"]
        for algo in hashes:
            assert s["zip_data"]["hashes"][algo] == independent_digest(algo, data)
            assert s["raw_data"]["hashes"][algo] == independent_digest(algo, raw)
        assert not os.path.exists(os.path.join(out, s["raw_data"]["basename"]))
    ds = StreamingDataset(local=out, validate_hash="xxh64")
    assert len(ds) == len(samples)
    for got, want in zip(ds, samples):
        assert_same_sample(got, want)


def test_compression_level_changes_output(tmp_path, make_dataset, load_index):
    samples = [{"t": ("lorem ipsum %d " % i) * 50} for i in range(200)]
    fast = load_index(make_dataset(tmp_path, {"t": "str"}, samples, subdir="a", compression="gz:1"))
    best = load_index(make_dataset(tmp_path, {"t": "str"}, samples, subdir="b", compression="gz:9"))
    assert fast["shards"][0]["raw_data"]["bytes"] == best["shards"][0]["raw_data"]["bytes"]
    assert fast["shards"][0]["zip_data"]["bytes"] > best["shards"][0]["zip_data"]["bytes"]


HASHES = ["blake2b", "md5", "sha1", "sha256", "sha3_256", "sha512", "xxh128", "xxh32", "xxh3_128", "xxh3_64", "xxh64"]


@pytest.mark.parametrize("algo", HASHES)
def test_every_hash_matches_an_independent_digest(tmp_path, make_dataset, load_index, algo):
    samples = [{"s": f"value {i}"} for i in range(50)]
    out = make_dataset(tmp_path, {"s": "str"}, samples, hashes=[algo], size_limit=512)
    shards = load_index(out)["shards"]
    assert len(shards) > 1
    for s in shards:
        assert s["hashes"] == [algo]
        raw = open(os.path.join(out, s["raw_data"]["basename"]), "rb").read()
        assert s["raw_data"]["hashes"] == {algo: independent_digest(algo, raw)}
    assert len(StreamingDataset(local=out, validate_hash=algo)) == 50


def test_several_hashes_over_raw_and_compressed(tmp_path, make_dataset, load_index):
    hashes = sorted(["md5", "sha1", "xxh128", "xxh3_64", "xxh64"])
    out = make_dataset(tmp_path, {"s": "str"}, [{"s": "x" * i} for i in range(100)], hashes=hashes,
                       compression="gz")
    for s in load_index(out)["shards"]:
        data = open(os.path.join(out, s["zip_data"]["basename"]), "rb").read()
        raw = gzip.decompress(data)
        assert s["zip_data"]["hashes"] == {a: independent_digest(a, data) for a in hashes}
        assert s["raw_data"]["hashes"] == {a: independent_digest(a, raw) for a in hashes}


def test_default_records_xxh3_64_and_empty_hashes_record_none(tmp_path, make_dataset, load_index):
    samples = [{"s": f"value {i}"} for i in range(50)]
    default = make_dataset(tmp_path, {"s": "str"}, samples, subdir="default", size_limit=512, compression="zstd")
    explicit = make_dataset(tmp_path, {"s": "str"}, samples, subdir="explicit", size_limit=512, compression="zstd",
                            hashes=["xxh3_64"])
    assert load_index(default) == load_index(explicit)
    for s in load_index(default)["shards"]:
        assert s["hashes"] == ["xxh3_64"]
        data = open(os.path.join(default, s["zip_data"]["basename"]), "rb").read()
        assert s["zip_data"]["hashes"] == {"xxh3_64": independent_digest("xxh3_64", data)}
        assert set(s["raw_data"]["hashes"]) == {"xxh3_64"}
    for hashes in ([], None):
        out = make_dataset(tmp_path, {"s": "str"}, samples, subdir=f"none-{hashes}", size_limit=512, hashes=hashes)
        for s in load_index(out)["shards"]:
            assert s["hashes"] == [] and s["raw_data"]["hashes"] == {}


@pytest.mark.parametrize("compression", ["lz4", "zstd:0", "zstd:23", "gz:10", "bz2:0", "br:12", "snappy:1",
                                         "zstd:x", ":3", "ZSTD", 5])
def test_invalid_compression(tmp_path, compression):
    with pytest.raises(UnsupportedFormatError):
        MDSWriter(out=str(tmp_path / "x"), columns={"a": "int"}, compression=compression)
    assert not os.path.exists(tmp_path / "x" / "index.json")


@pytest.mark.parametrize("hashes", [["sha999"], ["shake_128"], ["crc32", "xxh64"]])
def test_unknown_hash(tmp_path, hashes):
    with pytest.raises(UnsupportedFormatError):
        MDSWriter(out=str(tmp_path / "x"), columns={"a": "int"}, hashes=hashes)


@pytest.mark.parametrize("hashes", [["xxh64", "sha1"], ["sha1", "sha1"], ["xxh64", "md5", "sha1"]])
def test_hashes_must_be_sorted_and_unique(tmp_path, hashes):
    with pytest.raises(InvalidArgumentError) as info:
        MDSWriter(out=str(tmp_path / "x"), columns={"a": "int"}, hashes=hashes)
    assert "sorted" in str(info.value)


# -- arguments and output directory -----------------------------------------------------
@pytest.mark.parametrize("columns", [{}, None, [("a", "int")], "a:int"])
def test_invalid_columns(tmp_path, columns):
    with pytest.raises(InvalidArgumentError):
        MDSWriter(out=str(tmp_path / "x"), columns=columns)


def test_non_empty_output_needs_exist_ok(tmp_path, make_dataset):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with pytest.raises(OutputExistsError) as info:
        MDSWriter(out=str(out), columns={"a": "int"})
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, WriterError)
    assert str(out) in str(info.value)
    assert (out / "stale.txt").read_text() == "old"  # nothing was touched


def test_exist_ok_refuses_files_that_are_not_a_datasets(tmp_path, make_dataset, load_index):
    out = tmp_path / "ds"
    make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(300)], size_limit=256, compression="zstd")
    (out / "notes.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "keep.bin").write_bytes(b"x")
    before = sorted(os.listdir(out))
    with pytest.raises(OutputExistsError) as info:
        MDSWriter(out=str(out), columns={"b": "str"}, exist_ok=True)
    message = str(info.value)
    assert "'notes.txt'" in message and "'sub/keep.bin'" in message and "shard." not in message
    assert sorted(os.listdir(out)) == before  # nothing was deleted
    assert (out / "notes.txt").read_text() == "mine" and len(StreamingDataset(local=str(out))) == 300


def test_exist_ok_replaces_a_dataset_and_an_interrupted_writers_files(tmp_path, make_dataset, load_index):
    out = tmp_path / "ds"
    make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(300)], size_limit=256, compression="zstd")
    StreamingDataset(local=str(out))[299]  # reading leaves decompressed copies beside the shards
    (out / "shard.00999.mds").write_bytes(b"from a killed writer")  # not listed in the index
    (out / ".tmp-shard.01000.mds.123.abcd").write_bytes(b"half")
    make_dataset(tmp_path, {"b": "str"}, [{"b": "x"}, {"b": "y"}], exist_ok=True)
    assert sorted(os.listdir(out)) == ["index.json", "shard.00000.mds"]
    assert [s["b"] for s in StreamingDataset(local=str(out))] == ["x", "y"]


def test_exist_ok_replaces_a_streamed_datasets_cache(tmp_path, make_dataset):
    src = make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(300)], size_limit=256, compression="zstd")
    cache = tmp_path / "cache"
    assert len(list(StreamingDataset(remote="file://" + src, local=str(cache)))) == 300
    assert os.path.isdir(cache / ".shardstream")
    make_dataset(tmp_path, {"b": "str"}, [{"b": "x"}], subdir="cache", exist_ok=True)
    assert sorted(os.listdir(cache)) == ["index.json", "shard.00000.mds"]


def test_exist_ok_replaces_a_merged_dataset(tmp_path, make_dataset):
    out = tmp_path / "ds"
    for part in ("p0", "p1"):
        make_dataset(out, {"a": "int"}, [{"a": i} for i in range(50)], subdir=part, size_limit=256)
    shardstream.merge_index(str(out))
    assert len(StreamingDataset(local=str(out))) == 100
    make_dataset(tmp_path, {"b": "str"}, [{"b": "x"}], exist_ok=True)
    assert sorted(os.listdir(out)) == ["index.json", "shard.00000.mds"]  # the emptied parts are gone too


def test_existing_empty_directory_is_fine(tmp_path, make_dataset):
    (tmp_path / "ds").mkdir()
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 5}])
    assert [s["a"] for s in StreamingDataset(local=out)] == [5]


def test_rewrite_with_exist_ok_replaces_previous_dataset(tmp_path, make_dataset, load_index):
    make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(500)], size_limit=256)
    out = make_dataset(tmp_path, {"b": "str"}, [{"b": "x"}], exist_ok=True)
    assert shard_files(out) == ["shard.00000.mds"]
    assert load_index(out)["shards"][0]["column_names"] == ["b"]


def test_out_accepts_pathlike(tmp_path):
    with MDSWriter(out=tmp_path / "p", columns={"a": "int"}) as w:
        w.write({"a": 3})
    assert StreamingDataset(local=str(tmp_path / "p"))[0] == {"a": 3}


# -- values -----------------------------------------------------------------------------
def test_pre_encoded_bytes_pass_through(tmp_path, make_dataset, parse_shard):
    arr = np.array([5, 6, 7], np.int32)
    sample = {
        "s": "ünï".encode("utf-8"),
        "i": struct.pack("<q", -9),
        "a": get_encoding("ndarray:int32").encode(arr),
        "f": struct.pack("<f", 2.5),
    }
    columns = {"s": "str", "i": "int", "a": "ndarray:int32", "f": "float32"}
    out = make_dataset(tmp_path, columns, [sample, {"s": "b", "i": 1, "a": arr, "f": 1.0}])
    ds = StreamingDataset(local=out)
    got = ds[0]
    assert got["s"] == "ünï" and got["i"] == -9 and got["f"] == np.float32(2.5)
    assert np.array_equal(got["a"], arr) and got["a"].dtype == np.int32
    shard = parse_shard(open(os.path.join(out, "shard.00000.mds"), "rb").read())
    payloads = shard.split_sample(0, ["a", "f", "i", "s"], [None, 4, 8, None])
    assert payloads == {"a": sample["a"], "f": sample["f"], "i": sample["i"], "s": sample["s"]}


def test_pre_encoded_bytes_must_match_fixed_size(tmp_path):
    with MDSWriter(out=str(tmp_path / "x"), columns={"i": "int"}) as w:
        with pytest.raises(EncodeError) as info:
            w.write({"i": b"\x01\x02\x03"})
        assert "'i'" in str(info.value)
        w.write({"i": 4})
    assert [s["i"] for s in StreamingDataset(local=str(tmp_path / "x"))] == [4]


def test_missing_column_raises_encode_error(tmp_path):
    with MDSWriter(out=str(tmp_path / "x"), columns={"a": "int", "b": "str"}) as w:
        with pytest.raises(EncodeError) as info:
            w.write({"a": 1})
        assert "'b'" in str(info.value)
        with pytest.raises(EncodeError):
            w.write([1, "x"])
        w.write({"a": 1, "b": "x"})


def test_wrong_type_names_the_column(tmp_path):
    with MDSWriter(out=str(tmp_path / "x"), columns={"count": "int32", "name": "str"}) as w:
        with pytest.raises(EncodeError) as info:
            w.write({"count": "three", "name": "x"})
        assert "'count'" in str(info.value)
        with pytest.raises(EncodeError):
            w.write({"count": 1.5, "name": "x"})
        with pytest.raises(EncodeError):
            w.write({"count": 1, "name": 5})
    # the rejected samples were not written
    assert json.loads((tmp_path / "x" / "index.json").read_text())["shards"] == []


@pytest.mark.parametrize("column,value", [("int", "1"), ("int", True), ("int32", 1.5), ("uint8", 300),
                                          ("ndarray:int32", np.zeros(2, np.int64)),
                                          ("ndarray:int32:2", np.zeros(3, np.int32)),
                                          ("ndarray", np.zeros(0, np.int32)), ("ndarray", np.int32(3))])
def test_writer_refuses_bad_values(tmp_path, column, value):
    with MDSWriter(out=str(tmp_path / "x"), columns={"c": column}) as w:
        with pytest.raises(EncodeError):
            w.write({"c": value})


@pytest.mark.parametrize("column,value", [("ndarray:int32:3", np.arange(3, dtype=np.int32)),
                                          ("ndarray:uint8:4", np.arange(4, dtype=np.uint8)),
                                          ("ndarray:float64:2,2", np.eye(2))])
def test_fixed_shape_columns_write_and_read(tmp_path, make_dataset, column, value):
    out = make_dataset(tmp_path, {"c": column}, [{"c": value}, {"c": value + 1}])
    ds = StreamingDataset(local=out)
    assert np.array_equal(ds[0]["c"], value) and np.array_equal(ds[1]["c"], value + 1)
    assert ds[0]["c"].shape == value.shape and ds[0]["c"].dtype == value.dtype


def test_write_after_finish_raises(tmp_path):
    w = MDSWriter(out=str(tmp_path / "x"), columns={"a": "int"})
    w.write({"a": 1})
    w.finish()
    w.finish()  # idempotent
    with pytest.raises(WriterError):
        w.write({"a": 2})
    with MDSWriter(out=str(tmp_path / "y"), columns={"a": "int"}) as w2:
        w2.write({"a": 1})
    with pytest.raises(WriterError):
        w2.write({"a": 2})
    assert len(StreamingDataset(local=str(tmp_path / "x"))) == 1


def test_exception_in_with_block_leaves_no_index_and_no_temp_files(tmp_path):
    out = tmp_path / "x"

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with MDSWriter(out=str(out), columns={"b": "bytes"}, size_limit=4096) as w:
            for i in range(300):
                w.write({"b": bytes(100)})
            raise Boom()
    names = os.listdir(out)
    assert "index.json" not in names
    assert not [n for n in names if n.startswith(".tmp-")]
    assert all(re.fullmatch(r"shard\.\d{5}\.mds", n) for n in names)
    with pytest.raises(shardstream.IndexNotFoundError):
        StreamingDataset(local=str(out))


def test_encode_error_inside_with_block_aborts(tmp_path):
    out = tmp_path / "x"
    with pytest.raises(EncodeError):
        with MDSWriter(out=str(out), columns={"a": "int"}) as w:
            w.write({"a": 1})
            w.write({"a": "two"})
    assert not os.path.exists(out / "index.json")
    with pytest.raises(WriterError):
        w.write({"a": 3})


def test_many_shards_keep_order(tmp_path, make_dataset, load_index):
    samples = [{"i": i, "pad": bytes(i % 50)} for i in range(3000)]
    out = make_dataset(tmp_path, {"i": "int", "pad": "bytes"}, samples, size_limit=1024)
    shards = load_index(out)["shards"]
    assert len(shards) > 50
    ds = StreamingDataset(local=out)
    assert [s["i"] for s in ds] == list(range(3000))
