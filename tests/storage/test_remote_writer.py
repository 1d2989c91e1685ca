"""MDSWriter to a remote ``out`` (moto S3): a killed writer's staging directory is removed by the
next writer to the same out, two live writers to one out are refused, and ``exist_ok`` replaces
only a dataset on the remote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import fsspec
import pytest

from shardstream import MDSWriter, OutputExistsError, StreamingDataset, WriterError
from shardstream.storage.staging import staging_dir

CHILD = r"""
import json, sys, time
from shardstream import MDSWriter

out, options = sys.argv[1], json.loads(sys.argv[2])
with MDSWriter(out=out, columns={"i": "int", "b": "bytes"}, size_limit="8kb", storage_options=options) as w:
    for i in range(20_000):  # bounded: ~20 MB even if the parent never kills us
        w.write({"i": i, "b": bytes(1000)})
    print("wrote everything", flush=True)
    time.sleep(120)  # still inside the with block: no index yet
"""


@pytest.fixture
def private_dirs(tmp_path, monkeypatch):
    """A cache root and a temp directory of this test, for this process and its children."""
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(cache))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return cache, tmp


def remote_files(s3_server, url):
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    root = url.split("://", 1)[1]
    return sorted(p[len(root) + 1:] for p in fs.find(root))


def write(url, s3_server, n, **kwargs):
    with MDSWriter(out=url, columns={"i": "int", "b": "bytes"}, size_limit="8kb",
                   storage_options=s3_server.storage_options, **kwargs) as w:
        for i in range(n):
            w.write({"i": i, "b": bytes(1000)})


def read_ids(url, s3_server, local):
    ds = StreamingDataset(remote=url, local=str(local), storage_options=s3_server.storage_options)
    return [s["i"] for s in ds]


def leftovers(cache, tmp):
    """Staging directories (not lock files) under the cache root, and anything in the temp directory."""
    staging = cache / "staging"
    dirs = [p.name for p in staging.iterdir() if p.is_dir()] if staging.exists() else []
    return dirs + os.listdir(tmp)


def test_killed_remote_writer_leaves_staging_that_the_next_writer_removes(s3_server, s3_bucket, private_dirs,
                                                                           tmp_path):
    cache, tmp = private_dirs
    url = f"{s3_bucket}/out"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, url, json.dumps(s3_server.storage_options)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(remote_files(s3_server, url)) < 3:  # some shards are up: the writer is mid-way
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the writer uploaded no shards"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "index.json" not in remote_files(s3_server, url)
    assert leftovers(cache, tmp), "the killed writer left no staging directory"

    with pytest.raises(OutputExistsError):  # the killed writer's shards are there
        write(url, s3_server, 10)
    write(url, s3_server, 50, exist_ok=True)
    assert leftovers(cache, tmp) == []
    assert read_ids(url, s3_server, tmp_path / "read") == list(range(50))
    files = remote_files(s3_server, url)
    index = json.loads(fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
                       .cat_file(f"{url.split('://', 1)[1]}/index.json"))
    assert files == sorted(["index.json"] + [s["raw_data"]["basename"] for s in index["shards"]])


def test_a_second_live_writer_to_the_same_out_is_refused(s3_server, s3_bucket, private_dirs, tmp_path):
    cache, tmp = private_dirs
    url = f"{s3_bucket}/out"
    first = MDSWriter(out=url, columns={"i": "int", "b": "bytes"}, storage_options=s3_server.storage_options)
    first.write({"i": 0, "b": b"x"})
    with pytest.raises(WriterError) as info:
        MDSWriter(out=url, columns={"i": "int", "b": "bytes"}, storage_options=s3_server.storage_options)
    assert url in str(info.value) and "another writer" in str(info.value)
    assert os.path.isdir(staging_dir(url))  # the refused writer removed nothing of the first one's
    first.write({"i": 1, "b": b"y"})
    first.finish()
    assert read_ids(url, s3_server, tmp_path / "read") == [0, 1]
    assert leftovers(cache, tmp) == []
    write(url, s3_server, 3, exist_ok=True)  # the lock went with the first writer
    assert read_ids(url, s3_server, tmp_path / "read2") == [0, 1, 2]


def test_remote_exist_ok_refuses_other_files_and_deletes_nothing(s3_server, s3_bucket, private_dirs, tmp_path):
    url = f"{s3_bucket}/out"
    write(url, s3_server, 100)
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    fs.pipe_file(f"{url.split('://', 1)[1]}/notes/readme.txt", b"mine")
    before = remote_files(s3_server, url)
    with pytest.raises(OutputExistsError) as info:
        write(url, s3_server, 5)
    assert "not empty" in str(info.value) and url in str(info.value)
    with pytest.raises(OutputExistsError) as info:
        write(url, s3_server, 5, exist_ok=True)
    assert "'notes/readme.txt'" in str(info.value) and "shard." not in str(info.value)
    assert remote_files(s3_server, url) == before
    assert read_ids(url, s3_server, tmp_path / "read") == list(range(100))


def test_remote_exist_ok_replaces_the_dataset(s3_server, s3_bucket, private_dirs, tmp_path):
    url = f"{s3_bucket}/out"
    write(url, s3_server, 100)
    assert len(remote_files(s3_server, url)) > 5
    write(url, s3_server, 3, exist_ok=True)
    assert remote_files(s3_server, url) == ["index.json", "shard.00000.mds"]
    assert read_ids(url, s3_server, tmp_path / "read") == [0, 1, 2]


def test_pair_refused_by_the_remote_keeps_the_local_copy(s3_server, s3_bucket, private_dirs, tmp_path):
    """With out=(local, remote) and exist_ok=True, a remote holding other files refuses the write
    before the local copy of an earlier dataset is touched."""
    url, local = f"{s3_bucket}/pair", tmp_path / "pair"
    with MDSWriter(out=(str(local), url), columns={"i": "int"}, keep_local=True,
                   storage_options=s3_server.storage_options) as w:
        for i in range(10):
            w.write({"i": i})
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    fs.pipe_file(f"{url.split('://', 1)[1]}/notes.txt", b"mine")
    before = sorted(os.listdir(local))
    with pytest.raises(OutputExistsError, match="notes.txt"):
        MDSWriter(out=(str(local), url), columns={"i": "int"}, exist_ok=True,
                  storage_options=s3_server.storage_options)
    assert sorted(os.listdir(local)) == before
    assert [s["i"] for s in StreamingDataset(local=str(local))] == list(range(10))
