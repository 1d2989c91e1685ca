"""merge_index: one index over sub-datasets written in parallel into subdirectories."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from shardstream import IndexNotFoundError, InvalidArgumentError, MDSWriter, StreamingDataset, merge_index


def write_parts(root, parts=3, per_part=25, compression=None):
    expected = []
    for p in range(parts):
        with MDSWriter(out=os.path.join(root, f"part{p}"), columns={"p": "int", "i": "int", "v": "ndarray:int32"},
                       size_limit=300, compression=compression) as w:
            for i in range(per_part):
                sample = {"p": p, "i": i, "v": np.arange(i % 4 + 1, dtype=np.int32) + p}
                w.write(sample)
                expected.append(sample)
    return expected


def check_merged(root, expected):
    ds = StreamingDataset(local=str(root))
    assert len(ds) == len(expected)
    for got, want in zip(ds, expected):
        assert got["p"] == want["p"] and got["i"] == want["i"] and np.array_equal(got["v"], want["v"])
    b = ds.get_batch(range(len(ds)), columns=["p", "i"])
    assert b["p"].tolist() == [s["p"] for s in expected]


def test_merge_by_directory(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root))
    merged = merge_index(str(root))
    index = json.loads((root / "index.json").read_text())
    assert index["version"] == 2 and len(index["shards"]) == len(merged) > 3
    names = [s["raw_data"]["basename"] for s in index["shards"]]
    assert names[0] == "part0/shard.00000.mds"
    assert all(n.split("/")[0] in ("part0", "part1", "part2") for n in names)
    assert names == sorted(names, key=lambda n: (n.split("/")[0], n))
    for n in names:
        assert os.path.isfile(root / n)
    check_merged(root, expected)


def test_merge_by_index_list(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root))
    refs = [str(root / f"part{p}" / "index.json") for p in (0, 1, 2)]
    merge_index(refs, str(root))
    check_merged(root, expected)


def test_merge_list_order_is_kept(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root))
    refs = [str(root / f"part{p}" / "index.json") for p in (2, 0, 1)]
    merge_index(refs, out=str(root))
    order = [s for p in (2, 0, 1) for s in expected if s["p"] == p]
    check_merged(root, order)


def test_merge_with_file_urls_and_pairs(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root), parts=2)
    refs = ["file://" + str(root / "part0" / "index.json"), (str(root / "part1" / "index.json"), "unused://x")]
    merge_index(refs, str(root))
    check_merged(root, expected)


def test_merge_compressed_parts(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root), compression="zstd")
    merge_index(str(root))
    index = json.loads((root / "index.json").read_text())
    assert index["shards"][0]["zip_data"]["basename"] == "part0/shard.00000.mds.zstd"
    assert index["shards"][0]["raw_data"]["basename"] == "part0/shard.00000.mds"
    check_merged(root, expected)


def test_merge_again_ignores_the_top_level_index(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root), parts=2)
    first = merge_index(str(root))
    second = merge_index(str(root))
    assert [s.raw_data.basename for s in first] == [s.raw_data.basename for s in second]
    check_merged(root, expected)


def test_merge_nested_subdirectories(tmp_path):
    root = tmp_path / "out"
    expected = write_parts(str(root / "a"), parts=2)
    merge_index(str(root))
    names = [s["raw_data"]["basename"] for s in json.loads((root / "index.json").read_text())["shards"]]
    assert names[0] == "a/part0/shard.00000.mds"
    check_merged(root, expected)


def test_merge_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexNotFoundError):
        merge_index(str(tmp_path / "empty"))
    root = tmp_path / "out"
    write_parts(str(root), parts=1)
    with pytest.raises(IndexNotFoundError):
        merge_index([str(root / "nope" / "index.json")], str(root))
    other = tmp_path / "elsewhere"
    write_parts(str(other), parts=1)
    with pytest.raises(InvalidArgumentError):
        merge_index([str(other / "part0" / "index.json")], str(root))
    assert not (root / "index.json").exists()


@pytest.mark.parametrize("spelling", ["out", "./out", "out/", "{abs}"])
def test_merge_relative_and_absolute_spellings(tmp_path, monkeypatch, spelling):
    root = tmp_path / "out"
    expected = write_parts(str(root), parts=2)
    monkeypatch.chdir(tmp_path)
    out = spelling.format(abs=str(root))
    merge_index(out)
    check_merged(root, expected)


@pytest.mark.parametrize("spelling", ["out", "./out", "{abs}"])
def test_merge_index_list_with_mixed_relative_and_absolute_paths(tmp_path, monkeypatch, spelling):
    # The index paths name files inside out, spelled absolute or relative to the working directory.
    root = tmp_path / "out"
    expected = write_parts(str(root), parts=2)
    monkeypatch.chdir(tmp_path)
    refs = [str(root / "part0" / "index.json"), "out/part1/index.json"]
    merge_index(refs, spelling.format(abs=str(root)))
    check_merged(root, expected)
