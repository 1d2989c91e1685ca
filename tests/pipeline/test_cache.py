"""``cache_to_mds``: processed rows written once to MDS, reused while the chain's fingerprint holds.

Sources are real JSON Lines files read by the engine; chains are real ``map`` stages; the crash test
kills a real writer process with SIGKILL in the middle of its shards.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shardstream
from shardstream import CacheMismatchError, OutputExistsError, cache_to_mds, read_cache_summary
from shardstream.errors import EncodeError, InvalidArgumentError
from shardstream.dataset.cache import MARKER, PENDING, infer_columns

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def write_jsonl(root, n: int = 300, files: int = 3) -> str:
    folder = os.path.join(str(root), "docs")
    os.makedirs(folder, exist_ok=True)
    per = -(-n // files)
    for f in range(files):
        with open(os.path.join(folder, f"part-{f}.jsonl"), "w") as out:
            for i in range(f * per, min(n, (f + 1) * per)):
                out.write(json.dumps({"id": i, "text": f"document {i} " + "word " * (i % 11)}) + "\n")
    return folder


class Lengths:
    """A map function with a description (so its fingerprint follows ``scale``) that counts its calls."""

    calls = 0

    def __init__(self, scale: int = 1) -> None:
        self.scale = scale

    def __call__(self, row: dict) -> dict:
        Lengths.calls += 1
        n = len(row["text"].split()) * self.scale
        return {"input_ids": np.arange(n, dtype=np.int32), "words": n}

    def describe(self) -> dict:
        return {"scale": self.scale}


@pytest.fixture
def docs(tmp_path):
    return shardstream.load_dataset("json", data_files=os.path.join(write_jsonl(tmp_path), "*.jsonl"), split="train")


def test_rows_are_written_once_and_read_back_in_order(docs, tmp_path):
    chain = docs.map(Lengths())
    cached = cache_to_mds(chain, str(tmp_path / "cache"), progress=False)
    want = list(docs.map(Lengths()))
    assert len(cached) == len(want) == 300
    for i, row in enumerate(want):
        got = cached[i]
        assert got["id"] == row["id"] and got["text"] == row["text"] and got["words"] == row["words"]
        assert got["input_ids"].dtype == np.int32 and np.array_equal(got["input_ids"], row["input_ids"])
    summary = read_cache_summary(str(tmp_path / "cache"))
    assert summary["fingerprint"] == chain.fingerprint()
    assert summary["rows"] == 300
    assert summary["tokens"] == sum(int(r["words"]) for r in want)
    assert summary["columns"] == {"id": "int", "input_ids": "ndarray:int32", "text": "str", "words": "int"}


def test_a_second_call_reuses_the_cache_and_reads_nothing(docs, tmp_path, caplog):
    out = str(tmp_path / "cache")
    cache_to_mds(docs.map(Lengths()), out, progress=False)
    calls = Lengths.calls
    stamps = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)}
    with caplog.at_level(logging.INFO, logger="shardstream.cache"):
        again = cache_to_mds(docs.map(Lengths()), out, progress=False)
    assert Lengths.calls == calls, "the map ran again: the cache was not reused"
    assert {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)} == stamps
    assert "reusing" in caplog.text
    assert len(again) == 300


def test_a_changed_chain_is_refused_then_rebuilt_with_overwrite(docs, tmp_path):
    out = str(tmp_path / "cache")
    cache_to_mds(docs.map(Lengths(scale=1)), out, progress=False)
    with pytest.raises(CacheMismatchError, match="overwrite=True") as info:
        cache_to_mds(docs.map(Lengths(scale=2)), out, progress=False)
    assert isinstance(info.value, FileExistsError)
    assert read_cache_summary(out)["fingerprint"] == docs.map(Lengths(scale=1)).fingerprint()  # left as it was
    rebuilt = cache_to_mds(docs.map(Lengths(scale=2)), out, overwrite=True, progress=False)
    assert rebuilt[5]["words"] == 2 * len(docs[5]["text"].split())
    assert read_cache_summary(out)["fingerprint"] == docs.map(Lengths(scale=2)).fingerprint()


def test_a_changed_source_changes_the_fingerprint(tmp_path):
    folder = write_jsonl(tmp_path, n=90)
    before = shardstream.load_dataset("json", data_files=os.path.join(folder, "*.jsonl"), split="train")
    out = str(tmp_path / "cache")
    cache_to_mds(before.map(Lengths()), out, progress=False)
    with open(os.path.join(folder, "part-9.jsonl"), "w") as f:
        f.write(json.dumps({"id": 999, "text": "one more"}) + "\n")
    after = shardstream.load_dataset("json", data_files=os.path.join(folder, "*.jsonl"), split="train")
    with pytest.raises(CacheMismatchError):
        cache_to_mds(after.map(Lengths()), out, progress=False)


def test_a_half_written_output_is_rebuilt(docs, tmp_path, caplog):
    """An interrupted cache: shards and even an index, but the pending file and no marker."""
    out = str(tmp_path / "cache")
    cache_to_mds(docs.map(Lengths()), out, progress=False)
    os.remove(os.path.join(out, MARKER))
    with open(os.path.join(out, PENDING), "w") as f:
        f.write("{}")
    calls = Lengths.calls
    with caplog.at_level(logging.INFO, logger="shardstream.cache"):
        cached = cache_to_mds(docs.map(Lengths()), out, progress=False)
    assert Lengths.calls > calls and "reusing" not in caplog.text
    assert len(cached) == 300 and read_cache_summary(out)["rows"] == 300
    assert not os.path.exists(os.path.join(out, PENDING))


def test_an_mds_dataset_it_did_not_write_is_replaced_only_with_overwrite(docs, tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"x": "int"}, [{"x": i} for i in range(5)], subdir="theirs")
    with pytest.raises(OutputExistsError, match="did not write"):
        cache_to_mds(docs.map(Lengths()), out, progress=False)
    assert len(shardstream.StreamingDataset(local=out)) == 5
    assert len(cache_to_mds(docs.map(Lengths()), out, overwrite=True, progress=False)) == 300


def test_other_files_in_the_output_are_never_deleted(docs, tmp_path):
    out = tmp_path / "cache"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="notes.txt"):
        cache_to_mds(docs.map(Lengths()), str(out), progress=False)
    assert (out / "notes.txt").read_text() == "mine"


CRASHING_WRITER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import shardstream

    source, out, flag = sys.argv[1:]

    def slow_late(row):
        if row["id"] == 290:
            open(flag, "w").close()  # past the first rows (the columns), several shards are on disk
            time.sleep(60)
        return {"input_ids": np.arange(1 + row["id"] % 50, dtype=np.int32)}

    ds = shardstream.load_dataset("json", data_files=source, split="train").map(slow_late)
    shardstream.cache_to_mds(ds, out, size_limit=2048, progress=False)
""")


def test_a_writer_killed_mid_write_leaves_nothing_that_is_reused(tmp_path):
    source = os.path.join(write_jsonl(tmp_path), "*.jsonl")
    out, flag = str(tmp_path / "cache"), str(tmp_path / "flag")
    script = tmp_path / "writer.py"
    script.write_text(CRASHING_WRITER)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    proc = subprocess.Popen([sys.executable, str(script), source, out, flag], env=env)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(flag):
            assert proc.poll() is None, "the writer ended before it got to the crash point"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    names = os.listdir(out)
    assert any(n.startswith("shard.") for n in names), f"no shard was written before the kill: {names}"
    assert MARKER not in names and read_cache_summary(out) is None
    assert PENDING in names

    def fast(row):
        return {"input_ids": np.arange(1 + row["id"] % 50, dtype=np.int32)}

    ds = shardstream.load_dataset("json", data_files=source, split="train").map(fast)
    cached = cache_to_mds(ds, out, size_limit=2048, progress=False)
    assert len(cached) == 300
    assert [int(cached[i]["id"]) for i in range(300)] == [int(r["id"]) for r in ds]
    assert read_cache_summary(out)["rows"] == 300


def test_a_streaming_dataset_is_cached_as_it_is(docs, tmp_path):
    cached = cache_to_mds(docs, str(tmp_path / "cache"), progress=False)
    assert [cached[i]["id"] for i in range(len(cached))] == [r["id"] for r in docs]
    assert read_cache_summary(str(tmp_path / "cache"))["fingerprint"] == docs.as_iterable().fingerprint()


def test_a_remote_output(docs):
    """Any fsspec URL: the shards go up through the writer, the marker last."""
    out = f"memory://cache-test-{os.getpid()}-{time.monotonic_ns()}/packed"
    cached = cache_to_mds(docs.map(Lengths()), out, progress=False)
    assert len(cached) == 300
    assert read_cache_summary(out)["rows"] == 300
    calls = Lengths.calls
    assert len(cache_to_mds(docs.map(Lengths()), out, progress=False)) == 300
    assert Lengths.calls == calls


def test_progress_lines(docs, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="shardstream.cache"):
        cache_to_mds(docs.map(Lengths()), str(tmp_path / "cache"), progress=100)
    lines = [r.getMessage() for r in caplog.records if "rows/s" in r.getMessage()]
    assert len(lines) == 3 and "300 rows" in lines[-1]


def test_column_encodings_are_taken_from_the_first_rows():
    rows = [{"a": None, "b": [], "c": np.zeros(2, bool), "d": np.float32(1), "e": True, "f": b"x", "g": {"k": 1},
             "h": [1.5, 2], "i": 3.0, "j": ["x", 1]},
            {"a": "text", "b": [1, 2], "c": np.ones(2, bool), "d": np.float32(2), "e": False, "f": b"y", "g": {},
             "h": [1.0], "i": 4.0, "j": []}]
    columns, convert = infer_columns(rows)
    assert columns == {"a": "str", "b": "ndarray:int64", "c": "ndarray:uint8", "d": "float32", "e": "json",
                       "f": "bytes", "g": "json", "h": "ndarray:float64", "i": "float64", "j": "json"}
    assert set(convert) == {"c"}


def test_bad_input_is_refused_with_the_fix(docs, tmp_path):
    with pytest.raises(InvalidArgumentError, match="fingerprint"):
        cache_to_mds([{"a": 1}], str(tmp_path / "x"))
    with pytest.raises(InvalidArgumentError, match="rows"):
        cache_to_mds(docs.batch(4), str(tmp_path / "y"), progress=False)
    with pytest.raises(InvalidArgumentError, match="progress"):
        cache_to_mds(docs, str(tmp_path / "z"), progress="often")
    empty = docs.map(lambda r: {"input_ids": np.zeros(r["id"] % 2, np.int32)})
    with pytest.raises(EncodeError, match="empty arrays"):
        cache_to_mds(empty, str(tmp_path / "w"), progress=False)
    assert read_cache_summary(str(tmp_path / "w")) is None


def test_a_process_that_reads_only_its_share_is_refused(docs, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(InvalidArgumentError, match="reader 1 of 2"):
        cache_to_mds(docs.map(Lengths()), str(tmp_path / "cache"), progress=False)
    assert not os.path.exists(tmp_path / "cache")
