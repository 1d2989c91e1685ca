"""``shardstream.load_dataset``: ``datasets.load_dataset(..., streaming=True)``'s call for the file builders
(parquet, arrow, json, csv, text) with ``data_files`` as a string, list or split mapping, returning the
engine's ``StreamingDataset``; the real ``datasets`` reading the same files is the oracle.

Rows are ``{"n": n, "word": f"w{n}"}``, so a row from the wrong file, split or offset shows up.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from shardstream import SplitNotFoundError, StreamingDataset, load_dataset  # noqa: E402
from shardstream.errors import InvalidArgumentError, NoFilesError, UnknownKeywordError  # noqa: E402
from shardstream.testing.resume import check_resumes_identically  # noqa: E402

HAS_LINES = importlib.util.find_spec("shardstream.format.lines") is not None
needs_lines = pytest.mark.skipif(not HAS_LINES, reason="the JSON / CSV / text formats (format/lines.py)")


def write(root, name: str, lo: int, hi: int) -> str:
    path = os.path.join(str(root), *name.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows = [{"n": n, "word": f"w{n}"} for n in range(lo, hi)]
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=16)
    elif name.endswith(".arrow"):
        t = pa.Table.from_pylist(rows)
        with pa.ipc.new_stream(path, t.schema) as w:
            w.write_table(t, max_chunksize=16)
    elif name.endswith(".jsonl"):
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    elif name.endswith(".json"):
        with open(path, "w") as f:
            json.dump(rows, f)
    elif name.endswith(".csv"):
        with open(path, "w") as f:
            f.write("n,word\n" + "".join(f"{r['n']},{r['word']}\n" for r in rows))
    else:
        with open(path, "w") as f:
            f.writelines(f"w{n}\n" for n in range(lo, hi))
    return path


def ns(ds) -> list[int]:
    out = []
    for s in ds:
        assert s["word"] == f"w{s['n']}"
        out.append(s["n"])
    return out


@pytest.mark.parametrize("builder,suffix", [
    ("parquet", "parquet"), ("arrow", "arrow"),
    pytest.param("json", "jsonl", marks=needs_lines), pytest.param("json", "json", marks=needs_lines),
    pytest.param("csv", "csv", marks=needs_lines),
])
def test_builders_with_data_files_as_a_string_a_list_and_a_mapping(tmp_path, builder, suffix):
    a = write(tmp_path, f"a.{suffix}", 0, 40)
    b = write(tmp_path, f"b.{suffix}", 40, 70)
    c = write(tmp_path, f"held/c.{suffix}", 0, 9)
    one = load_dataset(builder, data_files=a, split="train")
    assert isinstance(one, StreamingDataset) and ns(one) == list(range(40))
    assert ns(load_dataset(builder, data_files=[b, a], split="train")) == list(range(40, 70)) + list(range(40))
    splits = load_dataset(builder, data_files={"train": os.path.join(str(tmp_path), f"*.{suffix}"), "test": [c]})
    assert list(splits) == ["train", "test"]
    assert ns(splits["train"]) == list(range(70)) and ns(splits["test"]) == list(range(9))
    with pytest.raises(SplitNotFoundError, match="has no split 'validation'; it has train, test"):
        load_dataset(builder, data_files={"train": a, "test": c}, split="validation")


@needs_lines
def test_the_text_builder_gives_a_text_column(tmp_path):
    path = write(tmp_path, "t.txt", 0, 5)
    assert [s["text"] for s in load_dataset("text", data_files=path, split="train")] == [f"w{n}" for n in range(5)]


def test_files_read_as_datasets_reads_them(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cases = [("parquet", "parquet")] + ([("json", "jsonl"), ("csv", "csv"), ("text", "txt")] if HAS_LINES else [])
    for builder, suffix in cases:
        files = [write(tmp_path / builder, f"{k}.{suffix}", 50 * k, 50 * k + 37) for k in range(3)]
        theirs = list(datasets.load_dataset(builder, data_files=files, split="train", streaming=True))
        ours = list(load_dataset(builder, data_files=files, split="train"))
        assert ours == theirs, builder


def test_a_directory_given_to_a_builder_by_data_dir(tmp_path):
    write(tmp_path, "d/train-00000-of-00002.parquet", 0, 20)
    write(tmp_path, "d/train-00001-of-00002.parquet", 20, 30)
    write(tmp_path, "d/test-00000-of-00001.parquet", 0, 4)
    got = load_dataset("parquet", data_dir=str(tmp_path / "d"))
    assert ns(got["train"]) == list(range(30)) and ns(got["test"]) == list(range(4))
    picked = load_dataset("parquet", data_dir=str(tmp_path / "d"), data_files={"x": "test-*"}, split="x")
    assert ns(picked) == [0, 1, 2, 3]


def test_the_result_is_the_engine_s_dataset(tmp_path):
    files = [write(tmp_path, f"{k}.parquet", 32 * k, 32 * k + 32) for k in range(4)]
    ds = load_dataset("parquet", data_files=files, split="train", batch_size=8, shuffle=True, shuffle_seed=2,
                      columns=["n"])
    assert ds.column_names == ("n",) and ds.batch_size == 8 and ds.shuffle
    assert sorted(s["n"] for s in ds) == list(range(128))
    report = check_resumes_identically(
        lambda bs: load_dataset("parquet", data_files=files, split="train", batch_size=bs, shuffle=True), 16,
        [(1, 1, 0), (1, 2, 2)], steps=[0, 3])
    assert report.samples_compared > 0


def test_what_load_dataset_refuses(tmp_path):
    path = write(tmp_path, "a.parquet", 0, 5)
    with pytest.raises(InvalidArgumentError, match="streaming=False.*always streams"):
        load_dataset("parquet", data_files=path, split="train", streaming=False)
    with pytest.raises(InvalidArgumentError, match="num_proc=...\\) is a datasets option"):
        load_dataset("parquet", data_files=path, split="train", num_proc=4)
    with pytest.raises(InvalidArgumentError, match="slicing a split"):
        load_dataset("parquet", data_files=path, split="train[:10%]")
    with pytest.raises(InvalidArgumentError, match="needs data_files="):
        load_dataset("parquet")
    with pytest.raises(InvalidArgumentError, match="name='x' selects a subset"):
        load_dataset("parquet", "x", data_files=path)
    with pytest.raises(InvalidArgumentError, match="read in place: leave local out"):
        load_dataset("parquet", data_files=path, split="train", local=str(tmp_path / "cache"))
    with pytest.raises(InvalidArgumentError, match="is a file; read data files with a builder name"):
        load_dataset(path)
    with pytest.raises(NoFilesError, match="matches no file"):
        load_dataset("parquet", data_files=str(tmp_path / "*.nothing"), split="train")
    with pytest.raises(UnknownKeywordError):
        load_dataset("parquet", data_files=path, split="train", batch_sise=4)


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def test_remote_data_files_through_a_cache_dir(s3_server, tmp_path):
    from shardstream.testing.servers import unique_name

    src = tmp_path / "src"
    for k in range(2):
        write(src, f"train/{k}.parquet", 100 * k, 100 * k + 50)
    write(src, "test/0.parquet", 0, 3)
    remote = f"{s3_server.make_bucket(unique_name())}/ds"
    s3_server.upload_dir(str(src), remote)
    got = load_dataset("parquet", data_files={"train": f"{remote}/train/*.parquet", "test": f"{remote}/test/0.parquet"},
                       storage_options=s3_server.storage_options, cache_dir=str(tmp_path / "c"))
    assert got["train"].remote == f"{remote}/train" and ns(got["train"]) == list(range(50)) + list(range(100, 150))
    assert ns(got["test"]) == [0, 1, 2]
    cached = sorted(sorted({n.split(".")[0] for n in os.listdir(tmp_path / "c" / d) if n.endswith(".piece")})
                    for d in os.listdir(tmp_path / "c"))
    assert cached == [["0"], ["0", "1"]]  # one directory for each split's files
    whole = load_dataset(remote, storage_options=s3_server.storage_options)  # a directory on the store
    assert list(whole) == ["train", "test"] and len(whole["train"]) == 100
