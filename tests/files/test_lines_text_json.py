"""Text files (one sample per line, as Hugging Face's ``load_dataset("text")`` reads them) and JSON files (an
array of objects parsed whole, or JSON Lines behind a ``.json`` name)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.errors import BadRowError, CorruptShardError, InvalidArgumentError, NoFilesError
from shardstream.format import lineindex
from shardstream.format.lines import skipped_rows
from shardstream.format.textfiles import format_extra

from .textdata import jsonl_bytes, rows, sample, write

TEXT = ("first line\n\n  indented  \r\nwindows\r\nold mac\rnext\n\u00e9t\u00e9 \U0001f680\n\t\n" * 7 + "last").encode()


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(lineindex, "PIECE_BYTES", 100)
    monkeypatch.setattr(lineindex, "BLOCK", 64)


def test_text_lines_are_what_hugging_face_reads(tmp_path, small_pieces, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    d = tmp_path / "text"
    write(str(d / "a.txt"), TEXT)
    write(str(d / "b.txt"), TEXT + b"\n")
    write(str(d / "c.txt"), b"")
    ds = StreamingDataset(local=str(d))
    assert len(ds.shards) > 4 and ds.column_names == ("text",)
    got = [s["text"] for s in ds]
    hf = []
    for name in ("a.txt", "b.txt"):  # (Hugging Face refuses the empty c.txt; it has no rows here)
        hf += list(datasets.load_dataset("text", data_files=str(d / name), split="train")["text"])
    assert got == hf and "" in got and "old mac" in got and "last" in got and len(got) == 2 * 57
    batch = next(iter(StreamingDataset(local=str(d), batch_size=5).iterate_batches()))
    assert batch == {"text": got[:5]}


def test_text_that_is_not_utf8_is_a_bad_row(tmp_path, small_pieces):
    path = write(str(tmp_path / "t.txt"), b"".join(f"line {i}\n".encode() for i in range(30)).replace(
        b"line 17", b"line \xff\xfe"))
    with pytest.raises(BadRowError, match=r"t\.txt line 18: it is not UTF-8 text"):
        list(StreamingDataset(local=path))
    with pytest.warns(UserWarning, match=r"1 row\(s\) .* line 18: it is not UTF-8 text"):
        ds = StreamingDataset(local=path, on_bad_rows="skip")
    assert [s["text"] for s in ds] == [f"line {i}" for i in range(30) if i != 17] and skipped_rows(ds) == {"t.txt": 1}
    with pytest.raises(InvalidArgumentError, match="a text file has one column, 'text'"):
        StreamingDataset(local=path, columns=["line"])


def test_a_json_array_is_parsed_whole(tmp_path, assert_same_sample):
    d = tmp_path / "arrays"
    write(str(d / "a.json"), json.dumps(rows(30), indent=2).encode())
    write(str(d / "b.json.gz"), json.dumps(rows(10, 30)).encode(), "gzip")
    ds = StreamingDataset(local=str(d))
    assert [(p.file, p.start, p.samples) for p in ds.shards] == [("a.json", -1, 30), ("b.json.gz", -1, 10)]
    for got, want in zip(ds, rows(40)):
        assert_same_sample(got, sample(want))
    cached = StreamingDataset(remote=f"file://{d}", local=str(tmp_path / "cache"), shuffle=True)
    assert sorted(s["id"] for s in cached) == list(range(40))
    batch = next(iter(StreamingDataset(local=str(d), batch_size=8).iterate_batches()))
    assert batch["id"].tolist() == list(range(8)) and batch["tokens"].values.dtype == np.int64


def test_a_json_array_with_bad_rows(tmp_path):
    items = rows(12)
    items[4], items[9] = "a string", {**items[9], "id": [1]}
    path = write(str(tmp_path / "a.json"), json.dumps(items).encode())
    with pytest.raises(BadRowError, match=r"a\.json: row 5 of the array: it is a string, not a JSON object"):
        StreamingDataset(local=path)
    with pytest.warns(UserWarning, match=r"a\.json: 1 row\(s\) of the array .* row 5: it is a string"):
        ds = StreamingDataset(local=path, on_bad_rows="skip")  # row 10 is in the first rows: 'id' holds anything
    ids = [s["id"] for s in ds]
    assert len(ids) == 11 and ds.shards[0].types[0] == "json" and skipped_rows(ds) == {"a.json": 1}
    assert ids[:8] == [0, 1, 2, 3, 5, 6, 7, 8] and ids[8].tolist() == [1] and ids[8].dtype == np.int64


def test_a_json_file_that_is_not_an_array_of_objects_is_refused(tmp_path):
    path = write(str(tmp_path / "o.json"), b'  {"a":\n 1}\n')
    with pytest.raises(BadRowError, match=r"o\.json line 1: it is not valid JSON"):  # read as JSON Lines
        StreamingDataset(local=path)
    path = write(str(tmp_path / "n.json"), b"[1, 2")
    with pytest.raises(CorruptShardError, match=r"n\.json: it is not valid JSON .*must hold a JSON array"):
        StreamingDataset(local=path)


def test_a_json_file_of_json_lines_is_read_in_pieces(tmp_path, small_pieces, assert_same_sample):
    path = write(str(tmp_path / "lines.json"), b"\n\n" + jsonl_bytes(rows(20)))
    ds = StreamingDataset(local=path)
    assert len(ds.shards) > 3 and all(p.start >= 0 and format_extra(p)[-1] == "lines" for p in ds.shards)
    for got, want in zip(ds, rows(20)):
        assert_same_sample(got, sample(want))
    empty = write(str(tmp_path / "e" / "empty.json"), b" \n ")
    with pytest.raises(NoFilesError, match="hold no rows"):
        StreamingDataset(local=empty)
    assert os.path.getsize(empty) == 3
