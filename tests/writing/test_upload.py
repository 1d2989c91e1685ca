"""MDSWriter with remote outputs (fsspec): file://, (local, remote) pairs, memory://, failures."""

from __future__ import annotations

import json
import os
import tempfile
import uuid

import fsspec
import numpy as np
import pytest

from shardstream import InvalidArgumentError, MDSWriter, OutputWriteError, StreamingDataset, UploadError, WriterError


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Point tempfile and the cache root (where remote writes are staged) at directories of this
    test so staging directories can be checked."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "cache"))
    return d


def staging_dirs(tmp_path):
    root = tmp_path / "cache" / "staging"
    return [p.name for p in root.iterdir() if p.is_dir()] if root.exists() else []


def samples(n=60):
    return [{"i": i, "v": np.arange(i % 7 + 1, dtype=np.int32), "s": f"s{i}"} for i in range(n)]


COLUMNS = {"i": "int", "v": "ndarray:int32", "s": "str"}


def write(out, data, **kwargs):
    with MDSWriter(out=out, columns=COLUMNS, size_limit=512, **kwargs) as w:
        for s in data:
            w.write(s)


def check_dataset(dirname, data):
    ds = StreamingDataset(local=str(dirname))
    assert len(ds) == len(data)
    for got, want in zip(ds, data):
        assert got["i"] == want["i"] and got["s"] == want["s"] and np.array_equal(got["v"], want["v"])


def shard_names(dirname):
    return sorted(n for n in os.listdir(dirname) if n != "index.json")


def test_file_url(tmp_path, private_tmp):
    data = samples()
    target = tmp_path / "remote"
    write("file://" + str(target), data)
    index = json.loads((target / "index.json").read_text())
    assert shard_names(target) == [s["raw_data"]["basename"] for s in index["shards"]]
    assert len(index["shards"]) > 2
    check_dataset(target, data)
    assert os.listdir(private_tmp) == []


@pytest.mark.parametrize("keep_local", [False, True])
def test_local_remote_pair(tmp_path, private_tmp, keep_local):
    data = samples()
    local, remote = tmp_path / "local", tmp_path / "remote"
    write((str(local), "file://" + str(remote)), data, keep_local=keep_local, compression="zstd")
    index = json.loads((remote / "index.json").read_text())
    assert shard_names(remote) == [s["zip_data"]["basename"] for s in index["shards"]]
    if keep_local:
        assert sorted(os.listdir(local)) == sorted(os.listdir(remote))
        for name in os.listdir(remote):
            assert (local / name).read_bytes() == (remote / name).read_bytes()
    else:
        assert not local.exists()
    check_dataset(remote, data)
    assert os.listdir(private_tmp) == []


def test_memory_url(tmp_path, private_tmp):
    data = samples(80)
    root = f"/shardstream-test-{uuid.uuid4().hex}"
    write("memory://" + root, data, hashes=["xxh64"])
    fs = fsspec.filesystem("memory")
    try:
        names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(root, detail=False))
        index = json.loads(fs.cat_file(f"{root}/index.json"))
        assert names == sorted(["index.json"] + [s["raw_data"]["basename"] for s in index["shards"]])
        assert len(index["shards"]) > 2
        local = tmp_path / "copy"
        local.mkdir()
        for n in names:
            (local / n).write_bytes(fs.cat_file(f"{root}/{n}"))
        ds = StreamingDataset(local=str(local), validate_hash="xxh64")
        assert [s["i"] for s in ds] == list(range(80))
    finally:
        fs.rm(root, recursive=True)
    assert os.listdir(private_tmp) == [] and staging_dirs(tmp_path) == []  # the staging directory is gone
    assert (tmp_path / "cache" / "staging").is_dir()  # it was staged there


def test_upload_progress_bar(tmp_path):
    pytest.importorskip("tqdm")
    data = samples(10)
    write((str(tmp_path / "l"), "file://" + str(tmp_path / "r")), data, progress_bar=True)
    check_dataset(tmp_path / "r", data)


def blocked_remote(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("a regular file where a directory should be")
    return "file://" + str(blocker / "remote")


@pytest.mark.parametrize("n", [3, 200])
def test_failing_upload_raises_and_uploads_no_index(tmp_path, private_tmp, n):
    remote = blocked_remote(tmp_path)
    local = tmp_path / "local"
    with pytest.raises(WriterError) as info:
        write((str(local), remote), samples(n), retry=0)
    err = info.value
    chain = [err, err.__cause__]
    assert any(isinstance(e, UploadError) for e in chain), chain
    assert "afile" in str(err)
    assert not os.path.exists(tmp_path / "afile" / "remote" / "index.json")
    assert (tmp_path / "afile").read_text().startswith("a regular file")
    if local.exists():
        assert not [x for x in os.listdir(local) if x.startswith(".tmp-")]


def test_failing_upload_from_finish(tmp_path, private_tmp):
    remote = blocked_remote(tmp_path)
    w = MDSWriter(out=(str(tmp_path / "local"), remote), columns=COLUMNS, retry=0)
    w.write(samples(1)[0])
    with pytest.raises(WriterError) as info:
        w.finish()
    assert isinstance(info.value, UploadError) or isinstance(info.value.__cause__, UploadError)
    assert not os.path.exists(tmp_path / "afile" / "remote")
    with pytest.raises(WriterError):
        w.write(samples(1)[0])


def test_upload_error_is_an_os_error():
    assert issubclass(UploadError, OSError) and issubclass(UploadError, WriterError)


def test_unwritable_cache_root_names_the_way_out(tmp_path, monkeypatch):
    blocker = tmp_path / "afile"
    blocker.write_text("a regular file where the cache root should be")
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(blocker))
    with pytest.raises(OutputWriteError) as info:
        MDSWriter(out=f"memory://shardstream-test-{uuid.uuid4().hex}", columns=COLUMNS)
    assert "SHARDSTREAM_CACHE_DIR" in str(info.value) and "out=(local_dir, remote_url)" in str(info.value)


def test_bad_arguments_for_a_remote_out_touch_nothing_and_release_the_staging(tmp_path, private_tmp):
    root = f"/shardstream-test-{uuid.uuid4().hex}"
    write("memory://" + root, samples(5))
    fs = fsspec.filesystem("memory")
    before = sorted(fs.ls(root, detail=False))
    with pytest.raises(InvalidArgumentError):
        MDSWriter(out="memory://" + root, columns=COLUMNS, exist_ok=True, size_limit=-1)
    assert sorted(fs.ls(root, detail=False)) == before  # the remote dataset was not replaced
    write("memory://" + root, samples(3), exist_ok=True)  # nor the staging left locked
    assert staging_dirs(tmp_path) == []
    fs.rm(root, recursive=True)
