"""Download errors that say what happened: permanent failures (missing, forbidden, 4xx, a file
where a dataset directory belongs) are never retried and say what was expected; transient
ones are retried and the final error lists what every attempt ran into."""

from __future__ import annotations

import os
import shutil

import pytest

from shardstream import StreamingDataset
from shardstream.errors import DownloadError, IndexNotFoundError, NotADatasetError
from shardstream.testing import write_dataset

N = 200


def _source(root) -> str:
    return write_dataset(root / "src", {"id": "int"}, ({"id": i} for i in range(N)), size_limit=1 << 10, hashes=[])


@pytest.fixture
def http_remote(http_server, tmp_path):
    shutil.copytree(_source(tmp_path), os.path.join(http_server.root, "data"))
    return f"{http_server.url}/data"


@pytest.fixture
def s3_remote(s3_server, s3_bucket, tmp_path):
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(_source(tmp_path), url)
    return url


# -- permanent failures are not retried ------------------------------------------------------------
@pytest.mark.parametrize("status", ["403", "404"])
def test_http_4xx_is_not_retried(http_server, http_remote, tmp_path, status):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), download_retry=3)
    http_server.faults.add("shard.00001", status)
    with pytest.raises(DownloadError) as info:
        list(ds)
    msg = str(info.value)
    assert f"{http_remote}/shard.00001.mds" in msg and "not retried" in msg and "download_retry" not in msg
    assert http_server.faults.requests["/data/shard.00001.mds"] == 1


def test_http_429_is_retried(http_server, http_remote, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), download_retry=2)
    http_server.faults.add("shard.00001", "429", "429")
    assert [s["id"] for s in ds] == list(range(N))
    assert http_server.faults.requests["/data/shard.00001.mds"] == 3


def test_s3_403_is_not_retried(s3_proxy, s3_remote, tmp_path):
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_proxy.storage_options,
                          download_retry=3)
    s3_proxy.faults.add("shard.00001", "403", "403", "403", "403", "403", "403", "403", "403")
    with pytest.raises(DownloadError, match="cannot be read with these credentials") as info:
        list(ds)
    assert "not retried" in str(info.value) and "download_retry" not in str(info.value)
    assert s3_proxy.faults.pending() == 7  # one request, no retry


# -- transient failures: every attempt is reported ----------------------------------------------------
def test_final_error_lists_every_attempt(http_server, http_remote, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), download_retry=2, download_timeout=1)
    http_server.faults.add("shard.00001", "503", "stall", "503", stall_s=3.0)
    with pytest.raises(DownloadError) as info:
        list(ds)
    msg = str(info.value)
    assert "failed 3 time(s): HTTP 503 x2, timed out x1" in msg, msg
    assert "download_retry" in msg
    assert type(info.value.__cause__).__name__ == "ClientResponseError"  # the last attempt's error, chained


# -- a file where a dataset directory belongs -------------------------------------------------------
def test_local_path_to_a_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_text('{"a": 1}\n')
    for local in (str(path), f"{path}/"):
        with pytest.raises(NotADatasetError, match="is a file; shardstream reads MDS datasets") as info:
            StreamingDataset(local=local)
        assert isinstance(info.value, NotADirectoryError) and isinstance(info.value, IndexNotFoundError)
        assert str(path) in str(info.value)
    with pytest.raises(NotADatasetError, match="data.bin' is a file"):
        StreamingDataset(local=str(path), split="train")


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_remote_path_to_a_local_file(tmp_path, scheme):
    path = tmp_path / "pq" / "part-0.bin"
    path.parent.mkdir()
    path.write_bytes(b"PAR1")
    with pytest.raises(NotADatasetError, match="is a file; shardstream reads MDS datasets") as info:
        StreamingDataset(remote=f"{scheme}{path}", local=str(tmp_path / "cache"), download_retry=2)
    assert "download_retry" not in str(info.value)


def test_remote_url_of_an_object(s3_server, s3_remote, tmp_path):
    with pytest.raises(NotADatasetError, match="shard.00000.mds' is a file"):
        StreamingDataset(remote=f"{s3_remote}/shard.00000.mds", local=str(tmp_path / "cache"),
                         storage_options=s3_server.storage_options)


def test_local_cache_directory_that_is_a_file(http_remote, tmp_path):
    path = tmp_path / "cache"
    path.write_text("")
    with pytest.raises(NotADatasetError, match="local=.* is a file"):
        StreamingDataset(remote=http_remote, local=str(path))


def test_s3_errors_retried_inside_the_client_are_not_hidden_by_the_timeout(s3_proxy, s3_remote, tmp_path):
    """botocore retries 503s by itself, so each of our attempts times out: the message still says 503."""
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_proxy.storage_options,
                          download_retry=1, download_timeout=1)
    s3_proxy.faults.add("shard.00001", *["503"] * 40)
    with pytest.raises(DownloadError) as info:
        list(ds)
    msg = str(info.value)
    assert "failed 2 time(s): timed out x2; in all the store answered HTTP 503 x" in msg, msg
    assert "check that the store is healthy" in msg
