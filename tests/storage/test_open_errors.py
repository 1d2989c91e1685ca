"""Opening a remote MDS dataset when its store misbehaves: every request made at open (the index's
metadata, the index itself) is limited to ``download_timeout`` seconds and tried ``download_retry`` more
times, and the open ends in a :class:`DownloadError` that names the URL and what to change, against
real loopback endpoints: a TCP server that never answers, a closed port, a proxy refusing credentials."""

from __future__ import annotations

import os

import pytest

from shardstream import StreamingDataset
from shardstream.errors import DownloadError
from shardstream.testing import write_dataset
from shardstream.testing.servers import ClosedPort, SilentServer
from shardstream.testing.unreachable import open_in_child

N = 50


def _source(root) -> str:
    return write_dataset(root / "src", {"id": "int"}, ({"id": i} for i in range(N)), size_limit=1 << 9)


def _s3_options(endpoint: str) -> dict:
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


@pytest.mark.parametrize("store", ["s3", "http"])
def test_a_store_that_never_answers_ends_the_open_in_a_download_error(tmp_path, store):
    with SilentServer() as silent:
        remote = "s3://bucket/ds" if store == "s3" else f"{silent.url}/ds"
        options = _s3_options(silent.url) if store == "s3" else None
        got = open_in_child(remote=remote, local=str(tmp_path / "cache"), storage_options=options,
                             download_timeout=1, download_retry=1)
        assert silent.accepted >= 2  # the requests were made, and left unanswered
    assert got["error"] == "DownloadError" and got["typed"], got
    assert f"{remote}/index.json" in got["message"] and "failed 2 time(s): timed out x2" in got["message"], got
    assert "each attempt limited to 1s" in got["message"] and "download_timeout" in got["message"]
    assert got["seconds"] < 30, got  # two attempts of 1 s and a backoff; the clients alone took minutes


def test_an_unreachable_endpoint_is_named_with_the_fix(tmp_path):
    with ClosedPort() as port:
        with pytest.raises(DownloadError) as info:
            StreamingDataset(remote="s3://bucket/ds", local=str(tmp_path / "cache"),
                             storage_options=_s3_options(port.url), download_timeout=2, download_retry=1)
    msg = str(info.value)
    assert "s3://bucket/ds/index.json" in msg and "failed 2 time(s): could not connect x2" in msg, msg
    assert "check the store's address (endpoint_url in storage_options" in msg


def test_refused_credentials_are_named_with_the_fix(s3_server, s3_proxy, s3_bucket, tmp_path):
    remote = f"{s3_bucket}/data"
    s3_server.upload_dir(_source(tmp_path), remote)
    s3_proxy.faults.refuse("403")
    with pytest.raises(DownloadError) as info:
        StreamingDataset(remote=remote, local=str(tmp_path / "cache"), storage_options=s3_proxy.storage_options,
                         download_timeout=5, download_retry=3)
    msg = str(info.value)
    assert f"{remote}/index.json" in msg and "cannot be read with these credentials" in msg, msg
    assert "not retried" in msg and "credentials in storage_options" in msg
    assert len(s3_proxy.faults.hits) == 1  # the first refusal ends the open: nothing is asked again


def test_a_cached_index_opens_while_the_store_cannot_be_reached(s3_server, s3_bucket, tmp_path):
    """Offline: with the index cached by an earlier run, a store that cannot be reached costs the attempts
    of one metadata request and the cached index is read, as before the limits were applied."""
    remote, cache = f"{s3_bucket}/data", str(tmp_path / "cache")
    s3_server.upload_dir(_source(tmp_path), remote)
    ds = StreamingDataset(remote=remote, local=cache, storage_options=s3_server.storage_options)
    assert sorted(s["id"] for s in ds) == list(range(N))
    with ClosedPort() as port:
        again = StreamingDataset(remote=remote, local=cache, storage_options=_s3_options(port.url),
                                 download_timeout=1, download_retry=1)
        assert sorted(s["id"] for s in again) == list(range(N))  # every shard is cached: nothing to download
    assert os.path.exists(os.path.join(cache, "index.json"))
