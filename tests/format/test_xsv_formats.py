"""JSON, CSV, TSV and XSV shards (JSONWriter, CSVWriter, TSVWriter, XSVWriter) written and read by
shardstream alone: round trips through StreamingDataset for every writer, compression and size cut,
shuffled and resumed passes, a remote, datasets mixing shard formats, and bad values refused.
Byte compatibility with mosaicml-streaming is checked in tests/interop/test_mosaic_xsv.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from shardstream import (ColumnTypeError, CSVWriter, DelimiterInValueError, EncodeError, JSONWriter, MDSWriter,
                         MissingColumnError, Stream, StreamingDataset, TextColumnsError, TSVWriter,
                         UnknownKeywordError, XSVWriter)
from shardstream.errors import CorruptShardError, InvalidArgumentError

COLUMNS = {"text": "str", "n": "int", "x": "float"}
WRITERS = {"json": (JSONWriter, {}), "csv": (CSVWriter, {}), "tsv": (TSVWriter, {}),
           "xsv": (XSVWriter, {"separator": "|;"})}


def rows(n: int = 40) -> list[dict]:
    return [{"text": "é" * (i % 5) + f"row {i}", "n": i * 7 - 100, "x": i / 3} for i in range(n)]


def write(fmt: str, out, samples, **kw):
    cls, extra = WRITERS[fmt]
    with cls(out=str(out) if not isinstance(out, tuple) else out, columns=kw.pop("columns", COLUMNS),
             **extra, **kw) as writer:
        for sample in samples:
            writer.write(sample)
    return writer


def read(local, **kw) -> list[dict]:
    return [dict(s) for s in StreamingDataset(local=str(local), batch_size=1, shuffle=False, **kw)]


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("compression", [None, "zstd:3", "gz"])
def test_every_writer_round_trips_through_streaming_dataset(tmp_path, fmt, compression):
    data = rows()
    writer = write(fmt, tmp_path / "ds", data, compression=compression, hashes=["sha1", "xxh64"], size_limit=200)
    index = json.loads((tmp_path / "ds" / "index.json").read_text())
    assert len(index["shards"]) == len(writer.shards) > 3
    assert {s["format"] for s in index["shards"]} == {fmt}
    assert sum(s["samples"] for s in index["shards"]) == len(data)
    assert read(tmp_path / "ds", validate_hash="xxh64") == data


def test_the_meta_file_holds_count_offsets_and_settings(tmp_path):
    write("csv", tmp_path / "ds", rows(3), size_limit=None)
    data = (tmp_path / "ds" / "shard.00000.csv").read_bytes()
    meta = (tmp_path / "ds" / "shard.00000.csv.meta").read_bytes()
    assert data.split(b"\n")[0] == b"n,text,x"  # a header of the sorted column names
    count = int(np.frombuffer(meta[:4], "<u4")[0])
    offsets = np.frombuffer(meta[4:4 + 4 * (count + 1)], "<u4")
    assert count == 3 and offsets[0] == len(b"n,text,x\n") and offsets[-1] == len(data)
    assert data[offsets[1]:offsets[2]] == "-93,érow 1,0.3333333333333333\n".encode()
    config = json.loads(meta[4 + 4 * (count + 1):])
    assert config == {"version": 2, "format": "csv", "compression": None, "hashes": [], "size_limit": None,
                      "column_names": ["n", "text", "x"], "column_encodings": ["int", "str", "float"],
                      "newline": "\n"}


def test_a_sample_past_the_size_limit_cuts_before_it_even_an_empty_shard(tmp_path):
    # as mosaicml-streaming does: a first sample larger than size_limit leaves shard 0 with no samples
    data = rows(6)
    write("json", tmp_path / "ds", data, size_limit=10)
    shards = json.loads((tmp_path / "ds" / "index.json").read_text())["shards"]
    assert [s["samples"] for s in shards] == [0, 1, 1, 1, 1, 1, 1]
    assert read(tmp_path / "ds") == data


def test_json_values_keep_their_json_types(tmp_path):
    data = [{"text": "a\nb,\t|c", "n": 2 ** 70, "x": float("inf")}]
    write("json", tmp_path / "ds", data)
    got = StreamingDataset(local=str(tmp_path / "ds"), batch_size=1)[0]
    assert dict(got) == data[0]


def test_shuffled_pass_resumes_where_the_state_says(tmp_path):
    data = rows(60)
    write("tsv", tmp_path / "ds", data, size_limit=150)
    make = lambda: StreamingDataset(local=str(tmp_path / "ds"), batch_size=4, shuffle=True,  # noqa: E731
                                    shuffle_seed=11)
    full = [s["n"] for s in make()]
    assert sorted(full) == sorted(r["n"] for r in data) and full != [r["n"] for r in data]
    first = make()
    it = first.iterate()
    head = [next(it)["n"] for _ in range(12)]
    state = first.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [s["n"] for s in resumed] == full


def test_a_remote_is_downloaded_into_the_cache_and_batches_decode(tmp_path):
    data = rows(30)
    write("xsv", tmp_path / "remote", data, compression="zstd", hashes=["xxh64"], size_limit=120)
    ds = StreamingDataset(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), batch_size=5,
                          shuffle=False, validate_hash="xxh64")
    assert [dict(s) for s in ds] == data
    cached = {p.name for p in (tmp_path / "cache").iterdir()}
    assert {"shard.00000.xsv", "shard.00000.xsv.meta"} <= cached
    batch = next(iter(ds.batches(batch_size=5)))
    assert batch["n"].dtype == np.int64 and batch["n"].tolist() == [r["n"] for r in data[:5]]
    assert batch["text"] == [r["text"] for r in data[:5]]


def test_local_and_remote_pair_uploads_every_file(tmp_path):
    write("json", (str(tmp_path / "local"), str(tmp_path / "remote")), rows(10), compression="bz2", keep_local=True,
          size_limit=100)
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == sorted(
        p.name for p in (tmp_path / "local").iterdir())
    assert read(tmp_path / "remote") == rows(10)


def test_streams_of_several_shard_formats_mix(tmp_path):
    write("csv", tmp_path / "a", rows(10))
    with MDSWriter(out=str(tmp_path / "b"), columns=COLUMNS | {"x": "float64"}) as out:
        for r in rows(10):
            out.write(r)
    ds = StreamingDataset(streams=[Stream(local=str(tmp_path / "a")), Stream(local=str(tmp_path / "b"))],
                          batch_size=1, shuffle=False)
    got = [s["n"] for s in ds]
    assert sorted(got) == sorted(2 * [r["n"] for r in rows(10)])


def test_one_index_may_list_shards_of_several_formats(tmp_path):
    write("tsv", tmp_path / "t", rows(4))
    write("json", tmp_path / "j", rows(6)[4:])
    t = json.loads((tmp_path / "t" / "index.json").read_text())
    j = json.loads((tmp_path / "j" / "index.json").read_text())
    for entry in j["shards"]:
        for key in ("raw_data", "raw_meta"):
            old = entry[key]["basename"]
            entry[key]["basename"] = "j-" + old
            shutil.copy(tmp_path / "j" / old, tmp_path / "t" / ("j-" + old))
    t["shards"] += j["shards"]
    (tmp_path / "t" / "index.json").write_text(json.dumps(t))
    assert read(tmp_path / "t") == rows(6)


def test_exist_ok_replaces_a_text_dataset(tmp_path):
    write("csv", tmp_path / "ds", rows(20), size_limit=100)
    write("csv", tmp_path / "ds", rows(3), exist_ok=True)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "index.json", "shard.00000.csv", "shard.00000.csv.meta"]


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_value_of_another_type_is_refused_as_mosaicml_streaming_does(tmp_path, fmt):
    cls, extra = WRITERS[fmt]
    with pytest.raises(ColumnTypeError, match="column 'n' \\(int\\) got a str") as err:
        with cls(out=str(tmp_path / "ds"), columns=COLUMNS, **extra) as out:
            out.write({"text": "a", "n": "1", "x": 1.0})
    assert isinstance(err.value, AttributeError) and isinstance(err.value, EncodeError)
    assert not (tmp_path / "ds" / "index.json").exists()  # a failed write leaves no index
    with pytest.raises(MissingColumnError, match="no column 'x'") as err:
        with cls(out=str(tmp_path / "ds2"), columns=COLUMNS, **extra) as out:
            out.write({"text": "a", "n": 1})
    assert isinstance(err.value, KeyError)


@pytest.mark.parametrize("value", ["a,b", "a\nb"])
def test_separator_or_newline_inside_a_csv_value_is_refused(tmp_path, value):
    with pytest.raises(DelimiterInValueError, match="would split the row") as err:
        with CSVWriter(out=str(tmp_path / "ds"), columns={"t": "str"}) as out:
            out.write({"t": value})
    assert isinstance(err.value, AssertionError)


def test_bad_columns_and_settings_are_refused_before_anything_is_written(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(TextColumnsError, match="'ndarray' is not one of"):
        CSVWriter(out=out, columns={"t": "ndarray"})
    with pytest.raises(TextColumnsError, match="contains the separator"):
        TSVWriter(out=out, columns={"a\tb": "str"})
    with pytest.raises(InvalidArgumentError, match="separator=''"):
        XSVWriter(out=out, columns={"t": "str"}, separator="")
    with pytest.raises(UnknownKeywordError, match="separator"):
        CSVWriter(out=out, columns={"t": "str"}, separator=";")
    with pytest.raises(InvalidArgumentError, match="less than 2\\*\\*32"):
        JSONWriter(out=out, columns={"t": "str"}, size_limit=2 ** 32)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


def test_a_damaged_meta_file_is_reported(tmp_path):
    write("json", tmp_path / "ds", rows(5))
    meta = tmp_path / "ds" / "shard.00000.json.meta"
    meta.write_bytes(b"\x09\x00\x00\x00" + meta.read_bytes()[4:])
    with pytest.raises(CorruptShardError, match="shard.00000.json.meta"):
        read(tmp_path / "ds")


def test_get_config_is_what_every_meta_file_records(tmp_path):
    writer = write("xsv", tmp_path / "ds", rows(5), hashes=["md5"])
    meta = (tmp_path / "ds" / "shard.00000.xsv.meta").read_bytes()
    assert json.loads(meta[4 + 4 * 6:]) == writer.get_config()
    assert writer.get_config()["separator"] == "|;"
