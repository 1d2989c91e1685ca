"""JSON Lines rows that already are the samples (exactly the columns' keys, in order, with values the
columns keep as they are) are handed on as parsed, once; every other row is built as before. Either way a
sample is the same: its keys in the columns' order, the same types, None for a missing key."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.format.columnrows import ColumnRows, SampleRows

from .textdata import write_jsonl


def _rows(n: int) -> list[dict]:
    return [{"id": i, "text": "w" * (i % 7), "score": i / 4, "ok": i % 3 == 0, "note": None if i % 5 else "x"}
            for i in range(n)]


def _same(got: list[dict], want: list[dict]) -> None:
    """Equal, with the same key order and value types (an int is not a float here)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for k in w:
            if isinstance(w[k], np.ndarray):
                assert type(g[k]) is np.ndarray and g[k].dtype == w[k].dtype and g[k].tolist() == w[k].tolist()
            else:
                assert type(g[k]) is type(w[k]) and g[k] == w[k]


def test_rows_that_are_the_samples_are_handed_on_once_then_built_from_the_columns(tmp_path):
    want = _rows(50)
    ds = StreamingDataset(local=write_jsonl(str(tmp_path / "a.jsonl"), want))
    reader = ds.table.reader(0)
    assert isinstance(reader, SampleRows)
    first = reader.rows_range(0, 30)
    _same(first, want[:30])
    first[0]["text"] = "changed"  # what a consumer does to its rows does not reach the piece
    del first[1]["id"]
    again = reader.rows_range(0, 50)  # rows 0..29 were handed on: built from the columns now
    _same(again, want)
    assert not any(a is f for a, f in zip(again, first))
    _same([reader.get(i) for i in (0, 1, 40)], [want[0], want[1], want[40]])
    _same(list(reader.iter_range(10, 20)), want[10:20])
    _same(list(ds), want)
    _same(list(ds), want)  # a second pass over the same piece


@pytest.mark.parametrize("odd, sample", [
    ({"id": 3, "text": "a", "score": 2, "ok": True, "note": None},  # an integer in a float column: a float
     {"id": 3, "text": "a", "score": 2.0, "ok": True, "note": None}),
    ({"text": "a", "id": 3, "score": 0.5, "ok": True, "note": None},  # keys in another order: the columns' order
     {"id": 3, "text": "a", "score": 0.5, "ok": True, "note": None}),
    ({"id": 3, "text": "a", "score": 0.5, "ok": True},  # a key missing: None
     {"id": 3, "text": "a", "score": 0.5, "ok": True, "note": None}),
])
def test_other_rows_are_built_as_before(tmp_path, odd, sample):
    rows = _rows(10)
    rows[3] = odd
    ds = StreamingDataset(local=write_jsonl(str(tmp_path / "a.jsonl"), rows))
    assert type(ds.table.reader(0)) is ColumnRows
    want = _rows(10)
    want[3] = sample
    _same(list(ds), want)
    _same(list(ds), want)


def test_lists_of_numbers_and_objects_are_converted_as_before(tmp_path):
    rows = [{"id": i, "tokens": [i, i + 1], "meta": {"tags": [1.5, 2]}} for i in range(6)]
    ds = StreamingDataset(local=write_jsonl(str(tmp_path / "a.jsonl"), rows))
    assert type(ds.table.reader(0)) is ColumnRows
    got = list(ds)
    _same([{"id": g["id"], "tokens": g["tokens"]} for g in got],
          [{"id": i, "tokens": np.array([i, i + 1])} for i in range(6)])
    assert all(type(g["meta"]["tags"]) is np.ndarray and g["meta"]["tags"].tolist() == [1.5, 2.0] for g in got)


def test_the_parsed_rows_are_freed_before_the_collector_resumes(tmp_path):
    """Parsing runs with the cyclic collector paused; rows that are not kept must be gone when it resumes,
    else its first collection walks every parsed row and list (what slowed reading JSON Lines down)."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"id": i, "tokens": list(range(i % 9 + 1))}) + "\n" for i in range(20000)))
    ds = StreamingDataset(local=str(path))
    young: list[int] = []

    def watch(phase, info):
        if phase == "start" and info["generation"] == 0:
            young.append(len(gc.get_objects(0)))

    gc.collect()
    gc.callbacks.append(watch)
    try:
        reader = ds.table.reader(0)  # opens the piece: parses and decodes its 20,000 rows
        gc.collect(0)
    finally:
        gc.callbacks.remove(watch)
    assert reader.samples == 20000
    assert young and max(young) < 5000, young
