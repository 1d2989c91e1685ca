"""Damaged and hostile datasets are refused with typed errors that name what is wrong."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import shardstream
from shardstream import (
    CorruptIndexError,
    CorruptShardError,
    IndexNotFoundError,
    ShardNotFoundError,
    ShardstreamError,
    StreamingDataset,
    UnsafePathError,
    UnsupportedFormatError,
)
from shardstream.format.index import loads_index


def edit_index(dirname, fn):
    path = os.path.join(dirname, "index.json")
    with open(path) as f:
        obj = json.load(f)
    fn(obj)
    with open(path, "w") as f:
        json.dump(obj, f)


def patch_u32(path, offset, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<I", value))


def read_u32s(path, offset, count):
    with open(path, "rb") as f:
        f.seek(offset)
        return list(struct.unpack(f"<{count}I", f.read(4 * count)))


@pytest.fixture
def dataset(tmp_path, make_dataset):
    samples = [{"id": i, "text": f"sample-{i}" * (1 + i % 3), "vec": np.arange(i % 5 + 1, dtype=np.int16)}
               for i in range(40)]
    out = make_dataset(tmp_path, {"id": "int", "text": "str", "vec": "ndarray:int16"}, samples, size_limit=512)
    return out, samples


def open_all(dirname, **kwargs):
    ds = StreamingDataset(local=dirname, **kwargs)
    return [ds[i] for i in range(len(ds))]


# -- index ------------------------------------------------------------------------------
def test_missing_index(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexNotFoundError) as info:
        StreamingDataset(local=str(tmp_path / "empty"))
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ShardstreamError)
    assert "index.json" in str(info.value) and "empty" in str(info.value)
    with pytest.raises(IndexNotFoundError):
        StreamingDataset(local=str(tmp_path / "does-not-exist"))


@pytest.mark.parametrize("text", [b"", b"{", b"not json", b"\xff\xfe\x00", b'{"shards": [}'])
def test_invalid_json_index(dataset, text):
    out, _ = dataset
    with open(os.path.join(out, "index.json"), "wb") as f:
        f.write(text)
    with pytest.raises(CorruptIndexError) as info:
        StreamingDataset(local=out)
    assert "index.json" in str(info.value)


@pytest.mark.parametrize("obj", [[], {}, {"shards": {}}, {"shards": None, "version": 2}, "x", 2,
                                 {"shards": [1], "version": 2}, {"shards": [{}], "version": 2}])
def test_structurally_invalid_index(dataset, obj):
    out, _ = dataset
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(obj, f)
    with pytest.raises((CorruptIndexError, UnsupportedFormatError)):
        StreamingDataset(local=out)


def test_deeply_nested_index_json_is_corrupt_index():
    with pytest.raises(CorruptIndexError):
        loads_index(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize("version", [3, 1, None, "2"])
def test_unsupported_index_version(dataset, version):
    out, _ = dataset
    edit_index(out, lambda o: o.update(version=version))
    with pytest.raises(UnsupportedFormatError) as info:
        StreamingDataset(local=out)
    assert repr(version) in str(info.value)


def test_unsupported_shard_version_and_format(dataset):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][1].update(version=3))
    with pytest.raises(UnsupportedFormatError) as info:
        StreamingDataset(local=out)
    assert "shard 1" in str(info.value)
    edit_index(out, lambda o: o["shards"][1].update(version=2, format="tfrecord"))
    with pytest.raises(UnsupportedFormatError) as info:
        StreamingDataset(local=out)
    assert "tfrecord" in str(info.value)


@pytest.mark.parametrize("encoding", ["varchar", "ndarray:bool", "list[str]", "ndarray:int32:0"])
def test_unknown_encoding_in_index(dataset, encoding):
    out, _ = dataset
    edit_index(out, lambda o: [s["column_encodings"].__setitem__(1, encoding) for s in o["shards"]])
    with pytest.raises(UnsupportedFormatError):
        StreamingDataset(local=out)


@pytest.mark.parametrize("field,value", [
    ("column_encodings", [["str"], "int", "ndarray:int16"]),
    ("column_encodings", [{"a": 1}, "str", "ndarray:int16"]),
    ("column_names", [["id"], "text", "vec"]),
    ("hashes", [["xxh64"]]),
    ("hashes", [{"a": 1}]),
    ("compression", ["zstd"]),
    ("compression", {"zstd": 1}),
])
def test_wrongly_typed_index_fields_are_refused(dataset, field, value):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update({field: value}))
    with pytest.raises((CorruptIndexError, UnsupportedFormatError)):
        StreamingDataset(local=out)


@pytest.mark.parametrize("sizes", [[8, None, 4], [None, None, None], [8, 5, None], [8, None], ["8", None, None]])
def test_inconsistent_column_sizes(dataset, sizes):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update(column_sizes=sizes))
    with pytest.raises(CorruptIndexError) as info:
        StreamingDataset(local=out)
    assert "shard 0" in str(info.value)


def test_mismatched_column_lists_and_duplicates(dataset):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update(column_names=["id", "id", "vec"]))
    with pytest.raises(CorruptIndexError):
        StreamingDataset(local=out)
    edit_index(out, lambda o: o["shards"][0].update(column_names=[], column_encodings=[], column_sizes=[]))
    with pytest.raises(CorruptIndexError):
        StreamingDataset(local=out)


def test_duplicate_basenames(dataset):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][1]["raw_data"].update(basename=o["shards"][0]["raw_data"]["basename"]))
    with pytest.raises(CorruptIndexError) as info:
        StreamingDataset(local=out)
    assert "shard.00000.mds" in str(info.value)


@pytest.mark.parametrize("field,value", [("samples", -1), ("samples", "3"), ("samples", True), ("samples", None),
                                         ("raw_data", None), ("raw_data", "shard.00000.mds")])
def test_invalid_shard_fields(dataset, field, value):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update({field: value}))
    with pytest.raises(CorruptIndexError):
        StreamingDataset(local=out)


@pytest.mark.parametrize("bytes_value", [-1, "10", None, 1.5])
def test_invalid_byte_counts(dataset, bytes_value):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0]["raw_data"].update(bytes=bytes_value))
    with pytest.raises(CorruptIndexError):
        StreamingDataset(local=out)


@pytest.mark.parametrize("basename", ["../evil.mds", "/etc/passwd", "a/../../x", "C:\\x", "C:x", "..", ".",
                                      "a\\..\\..\\x", "x\x00.mds", "", "a/.."])
def test_unsafe_basenames(dataset, basename):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0]["raw_data"].update(basename=basename))
    with pytest.raises((UnsafePathError, CorruptIndexError)) as info:
        StreamingDataset(local=out)
    if basename:
        assert isinstance(info.value, UnsafePathError)
        assert repr(basename) in str(info.value)


def test_unsafe_zip_basename(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}], compression="zstd")
    edit_index(out, lambda o: o["shards"][0]["zip_data"].update(basename="../../escape.zstd"))
    with pytest.raises(UnsafePathError):
        StreamingDataset(local=out)


def test_safe_relative_subdirectory_basenames_are_allowed(dataset):
    out, samples = dataset
    os.makedirs(os.path.join(out, "sub"))
    os.rename(os.path.join(out, "shard.00000.mds"), os.path.join(out, "sub", "shard.00000.mds"))
    edit_index(out, lambda o: o["shards"][0]["raw_data"].update(basename="sub/shard.00000.mds"))
    assert [s["id"] for s in open_all(out)] == list(range(len(samples)))


def test_compression_without_zip_data(dataset):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update(compression="zstd"))
    with pytest.raises(CorruptIndexError):
        StreamingDataset(local=out)


def test_unknown_compression_and_hash_in_index(dataset):
    out, _ = dataset
    edit_index(out, lambda o: o["shards"][0].update(compression="lz4", zip_data={"basename": "x.lz4", "bytes": 3}))
    with pytest.raises(UnsupportedFormatError):
        StreamingDataset(local=out)
    edit_index(out, lambda o: o["shards"][0].update(compression=None, zip_data=None, hashes=["md17"]))
    with pytest.raises(UnsupportedFormatError):
        StreamingDataset(local=out)


# -- shards -----------------------------------------------------------------------------
def test_missing_shard(dataset):
    out, samples = dataset
    os.unlink(os.path.join(out, "shard.00001.mds"))
    ds = StreamingDataset(local=out)
    ds[0]
    with pytest.raises(ShardNotFoundError) as info:
        list(ds)
    assert isinstance(info.value, FileNotFoundError)
    assert "shard.00001.mds" in str(info.value)


def test_missing_compressed_shard(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}], compression="gz")
    os.unlink(os.path.join(out, "shard.00000.mds.gz"))
    with pytest.raises(ShardNotFoundError) as info:
        StreamingDataset(local=out)[0]
    assert "shard.00000.mds.gz" in str(info.value)


def test_directory_in_place_of_a_shard(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    os.unlink(path)
    os.mkdir(path)
    with pytest.raises(ShardstreamError):
        StreamingDataset(local=out)[0]


@pytest.mark.parametrize("keep", [0, 3, 7, 50, -1])
def test_truncated_shard(dataset, keep):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:keep] if keep >= 0 else data[:-1])
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "shard.00000.mds" in str(info.value)


def test_truncated_compressed_shard(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"s": "str"}, [{"s": "x" * i} for i in range(100)], compression="zstd")
    path = os.path.join(out, "shard.00000.mds.zstd")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:-5])
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "shard.00000.mds.zstd" in str(info.value)
    # even with the index 'bytes' fixed up, the frame is incomplete
    edit_index(out, lambda o: o["shards"][0]["zip_data"].update(bytes=len(data) - 5))
    with pytest.raises(CorruptShardError):
        StreamingDataset(local=out)[0]


def test_header_sample_count_differs(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    (n,) = read_u32s(path, 0, 1)
    patch_u32(path, 0, n + 1)
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "shard.00000.mds" in str(info.value)
    patch_u32(path, 0, n)
    edit_index(out, lambda o: o["shards"][0].update(samples=n - 1))
    with pytest.raises(CorruptShardError):
        StreamingDataset(local=out)[0]


def test_header_count_too_large_for_file(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    patch_u32(path, 0, 2**32 - 1)
    edit_index(out, lambda o: o["shards"][0].update(samples=2**32 - 1))
    with pytest.raises(CorruptShardError):
        StreamingDataset(local=out)[0]


@pytest.mark.parametrize("damage", ["first_zero", "first_past_end", "last_short", "last_long", "decreasing",
                                    "middle_past_end"])
def test_bad_offsets(dataset, damage):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    (n,) = read_u32s(path, 0, 1)
    offsets = read_u32s(path, 4, n + 1)
    size = os.path.getsize(path)
    assert n >= 3 and offsets[-1] == size
    if damage == "first_zero":
        offsets[0] = 0
    elif damage == "first_past_end":
        offsets[0] = size + 100
    elif damage == "last_short":
        offsets[-1] = size - 1
    elif damage == "last_long":
        offsets[-1] = size + 1
    elif damage == "decreasing":
        offsets[1], offsets[2] = offsets[2], offsets[1]
    elif damage == "middle_past_end":
        offsets[2] = 2**32 - 1
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(struct.pack(f"<{n + 1}I", *offsets))
    assert os.path.getsize(path) == size  # only the offsets are wrong
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "shard.00000.mds" in str(info.value)


def test_extended_shard_with_fixed_index_bytes(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    with open(path, "ab") as f:
        f.write(b"\x00" * 16)
    edit_index(out, lambda o: o["shards"][0]["raw_data"].update(bytes=os.path.getsize(path)))
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "offsets" in str(info.value)


def test_embedded_config_damaged(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    (n,) = read_u32s(path, 0, 1)
    start = 4 + 4 * (n + 1)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"[")  # '{' -> '[' : no longer valid JSON
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "config" in str(info.value)


def test_embedded_config_names_other_columns(dataset):
    out, _ = dataset
    path = os.path.join(out, "shard.00000.mds")
    data = open(path, "rb").read()
    assert data.count(b'"text"') == 1
    with open(path, "wb") as f:
        f.write(data.replace(b'"text"', b'"txet"'))
    with pytest.raises(CorruptShardError) as info:
        StreamingDataset(local=out)[0]
    assert "columns" in str(info.value)


def test_deeply_nested_embedded_config(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}, {"a": 2}])
    path = os.path.join(out, "shard.00000.mds")
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{n + 1}I", data, 4)
    nested = b"[" * 50_000 + b"]" * 50_000  # valid JSON, deeper than the recursion limit
    shift = 4 + 4 * (n + 1) + len(nested) - offsets[0]
    new = struct.pack(f"<{n + 2}I", n, *[o + shift for o in offsets]) + nested + data[offsets[0]:]
    with open(path, "wb") as f:
        f.write(new)
    edit_index(out, lambda o: o["shards"][0]["raw_data"].update(bytes=len(new)))
    with pytest.raises(CorruptShardError):
        StreamingDataset(local=out)[0]


# -- samples ----------------------------------------------------------------------------
FIXED = {"int": 7, "int32": np.int32(7), "float64": 2.5, "ndarray:int16:1,2": np.array([[1, 2]], np.int16),
         "uint8": 9}


@pytest.mark.parametrize("fixed_encoding", sorted(FIXED))
@pytest.mark.parametrize("delta", [1, -1, 1000, 2**31])
def test_sample_size_header_lies(tmp_path, make_dataset, fixed_encoding, delta):
    # columns sorted: "a" (str, variable), "b" (fixed). The first sample's size header is wrong.
    samples = [{"a": "hello world", "b": FIXED[fixed_encoding]}, {"a": "ok", "b": FIXED[fixed_encoding]}]
    out = make_dataset(tmp_path, {"a": "str", "b": fixed_encoding}, samples)
    path = os.path.join(out, "shard.00000.mds")
    first = read_u32s(path, 4, 1)[0]
    (size_a,) = read_u32s(path, first, 1)
    assert size_a == len("hello world")
    patch_u32(path, first, (size_a + delta) % 2**32)
    ds = StreamingDataset(local=out)
    assert ds[1]["a"] == "ok"
    with pytest.raises(CorruptShardError) as info:
        ds[0]
    assert "shard.00000.mds" in str(info.value)
    with pytest.raises(CorruptShardError):
        list(ds)
    with pytest.raises(CorruptShardError):
        ds.get_batch([0, 1])
    with pytest.raises(CorruptShardError):
        next(ds.batches(2))


def test_two_variable_sizes_that_lie_consistently_are_caught_by_the_payload(tmp_path, make_dataset):
    # Sizes still add up, but the ndarray column's header no longer matches its bytes.
    samples = [{"a": "abcd", "v": np.arange(3, dtype=np.int32)}]
    out = make_dataset(tmp_path, {"a": "str", "v": "ndarray:int32"}, samples)
    path = os.path.join(out, "shard.00000.mds")
    first = read_u32s(path, 4, 1)[0]
    size_a, size_v = read_u32s(path, first, 2)
    patch_u32(path, first, size_a + 1)
    patch_u32(path, first + 4, size_v - 1)
    ds = StreamingDataset(local=out)
    with pytest.raises(CorruptShardError):
        ds[0]
    with pytest.raises(CorruptShardError):
        ds.get_batch([0])


@pytest.mark.parametrize("column,raw", [
    ("str", b"\xff\xfe bad utf-8"),
    ("json", b"{not json"),
    ("json", b"[" * 100_000 + b"]" * 100_000),
    ("str_int", b"12a"),
    ("str_float", b"1.2.3"),
    ("str_decimal", b"one"),
    ("ndarray:int32", b""),
    ("ndarray:int32", b"\x04\x03\x00\x00"),
    ("ndarray", b"\x07\x04\x01\x00"),
    ("ndarray", b""),
    ("pil", b"\x01\x00"),
    ("png", b"not a png"),
    ("jpeg", b"\xff\xd8 not a jpeg"),
    ("list[png]", b"\x00\x00\x00\x00\x05\x00\x00\x00"),
    ("jpeg_array", b"\x01\x00\x00\x00\xff\x00\x00\x00"),
])
def test_corrupt_payloads_raise_corrupt_shard(tmp_path, make_dataset, column, raw):
    # Pre-encoded bytes are stored as given, which lets us plant a damaged value.
    out = make_dataset(tmp_path, {"c": column, "i": "int"}, [{"c": raw, "i": 1}])
    ds = StreamingDataset(local=out)
    with pytest.raises(CorruptShardError) as info:
        ds[0]
    assert isinstance(info.value, ShardstreamError)
    with pytest.raises(CorruptShardError):
        ds.get_batch([0])


def test_all_error_types_derive_from_shardstream_error():
    names = [n for n in shardstream.__all__ if n.endswith("Error")]
    assert len(names) >= 17
    for n in names:
        assert issubclass(getattr(shardstream, n), ShardstreamError), n
    assert issubclass(shardstream.HashMismatchError, CorruptShardError)
    assert issubclass(shardstream.OutputExistsError, FileExistsError)
    assert issubclass(shardstream.UploadError, OSError)
    assert issubclass(shardstream.SampleIndexError, IndexError)
