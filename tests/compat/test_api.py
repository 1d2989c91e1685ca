"""mosaicml-streaming's public names that shardstream offers: LocalDataset, num_shards, one-stream
lists, MDSWriter.get_config, the streams registry and registered column encodings."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream import (InvalidArgumentError, LocalDataset, MDSWriter, NotYetSupportedError, Stream,
                         StreamingDataset, register_encoding, streams_registry)
from shardstream.format.customencodings import registered_encodings


@pytest.fixture
def numbers(tmp_path):
    out = tmp_path / "numbers"
    with MDSWriter(out=str(out), columns={"v": "int", "s": "str"}, size_limit=300) as w:
        for i in range(40):
            w.write({"v": i, "s": f"n{i}"})
    return str(out)


def test_local_dataset_reads_by_index(numbers):
    ds = LocalDataset(numbers)
    assert len(ds) == ds.size == ds.num_samples == 40
    assert ds[7] == ds.get_item(7) == {"v": 7, "s": "n7"}
    assert ds[-1]["v"] == 39
    assert [x["v"] for x in ds[3:6]] == [3, 4, 5]
    assert [[x["v"] for x in row] for row in ds[[[1, 2], [3, 4]]]] == [[1, 2], [3, 4]]
    assert [x["v"] for x in ds[np.array([5, 0])]] == [5, 0]
    with pytest.raises(IndexError):
        ds[40]


def test_local_dataset_takes_a_split(tmp_path):
    with MDSWriter(out=str(tmp_path / "train"), columns={"v": "int"}) as w:
        w.write({"v": 1})
    ds = LocalDataset(str(tmp_path), split="train")
    assert (len(ds), ds[0], ds.split) == (1, {"v": 1}, "train")


def test_num_shards_and_a_single_sources_stream(numbers):
    ds = StreamingDataset(local=numbers)
    assert ds.num_shards == len(ds.shards) > 1
    (stream,) = ds.streams
    assert isinstance(stream, Stream) and stream.local == numbers
    assert (stream.samples, stream.choose, stream.repeat, stream.proportion) == (40, 40, 1.0, 1.0)


def test_get_config_is_what_each_shard_records(numbers, load_index):
    with MDSWriter(out=numbers + "-2", columns={"v": "int", "s": "str"}, compression="zstd", size_limit="1kb",
                   hashes=["sha1"]) as w:
        config = w.get_config()
        w.write({"v": 1, "s": "x"})
    assert config == {"version": 2, "format": "mds", "compression": "zstd", "hashes": ["sha1"], "size_limit": 1024,
                      "column_names": ["s", "v"], "column_encodings": ["str", "int"], "column_sizes": [None, 8]}
    shard = load_index(numbers + "-2")["shards"][0]
    assert {k: shard[k] for k in config} == config
    config["hashes"].append("md5")  # the caller's copy
    assert w.get_config()["hashes"] == ["sha1"]


class Bucketed(Stream):
    """A stream that works out where it lives from its own configuration."""

    def __init__(self, *, root, name, **kwargs):
        super().__init__(**{**kwargs, "local": f"{root}/{name}"})


@pytest.fixture
def registered():
    streams_registry.register("bucketed", func=Bucketed)
    yield
    streams_registry.unregister("bucketed")


def test_stream_name_builds_the_stream_from_the_registry(numbers, registered, tmp_path):
    root, name = numbers.rsplit("/", 1)
    ds = StreamingDataset(stream_name="bucketed", stream_config={"root": root, "name": name}, batch_size=4)
    assert len(ds) == 40 and ds[2]["v"] == 2
    (stream,) = ds.streams
    assert type(stream) is Bucketed and stream.local == numbers
    assert streams_registry.get("stream") is Stream and "bucketed" in streams_registry


def test_the_registry_registers_by_decorator(numbers):
    @streams_registry.register("decorated")
    class Decorated(Stream):
        pass

    try:
        ds = StreamingDataset(local=numbers, stream_name="decorated", stream_config={})
        assert type(ds.streams[0]) is Decorated and len(ds) == 40
    finally:
        streams_registry.unregister("decorated")


def test_stream_name_and_config_are_refused_where_they_would_do_nothing(numbers, registered):
    with pytest.raises(ValueError, match="not registered"):
        StreamingDataset(local=numbers, stream_name="nope")
    with pytest.raises(InvalidArgumentError, match="no streams="):
        StreamingDataset(streams=[Stream(local=numbers)], stream_config={"x": 1})
    with pytest.raises(InvalidArgumentError, match="pass them to StreamingDataset"):
        StreamingDataset(local=numbers, stream_config={"local": "/elsewhere"})
    with pytest.raises(TypeError):  # a config keyword the class does not take
        StreamingDataset(local=numbers, stream_config={"bucket": "b"})


def test_a_stream_overriding_download_hooks_is_refused(numbers):
    class Downloading(Stream):
        def _download_file(self, from_basename, to_basename=None):
            return ""

    with pytest.raises(NotYetSupportedError, match="_download_file"):
        StreamingDataset(streams=[Downloading(local=numbers)])


class Complex128:
    size = 16

    def encode(self, obj):
        return np.complex128(obj).tobytes()

    def decode(self, data):
        assert isinstance(data, bytes)
        return np.frombuffer(data, np.complex128)[0]


class Words:
    """A variable-size encoding configured by its name: ``words:<separator>``."""

    def __init__(self, sep=" "):
        self.sep = sep

    @classmethod
    def from_str(cls, config):
        return cls(config)

    def encode(self, obj):
        return self.sep.join(obj).encode()

    def decode(self, data):
        return data.decode().split(self.sep)


@pytest.fixture
def encodings():
    register_encoding("complex128", Complex128)
    registered_encodings["words"] = Words
    yield
    del registered_encodings["complex128"], registered_encodings["words"]


def test_a_registered_encoding_is_written_and_read(tmp_path, encodings):
    out = str(tmp_path / "c")
    with MDSWriter(out=out, columns={"z": "complex128", "w": "words:,"}) as w:
        for i in range(5):
            w.write({"z": complex(i, -i), "w": ["a", str(i)]})
    assert w.get_config()["column_sizes"] == [None, 16]
    ds = StreamingDataset(local=out)
    assert ds[3] == {"z": complex(3, -3), "w": ["a", "3"]}
    assert [s["z"] for s in ds] == [complex(i, -i) for i in range(5)]


def test_encoding_registration_is_checked(encodings, tmp_path):
    with pytest.raises(ValueError, match="built-in"):
        register_encoding("int", Complex128)
    with pytest.raises(ValueError, match="encode"):
        register_encoding("nothing", object)
    with pytest.raises(ValueError, match="from_str"):
        MDSWriter(out=str(tmp_path / "x"), columns={"z": "complex128:4"})
    del registered_encodings["complex128"]
    with pytest.raises(ValueError, match="unknown column encoding"):
        MDSWriter(out=str(tmp_path / "y"), columns={"z": "complex128"})
    register_encoding("complex128", Complex128)  # for the fixture's clean-up
