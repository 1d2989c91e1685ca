"""Opening remote data files (Parquet, JSON Lines, compressed JSON Lines) when the store misbehaves: listing
them and describing each (a Parquet footer, a JSON Lines file's line index) are requests limited to
``download_timeout`` seconds and tried ``download_retry`` more times; a short answer is tried again as a read
is; the open ends in a DownloadError naming the URL and what to change. Real loopback endpoints: moto S3
behind the fault proxy, a TCP server that never answers, a closed port."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream import StreamingDataset
from shardstream.errors import DownloadError, FileChangedError
from shardstream.testing.servers import ClosedPort, SilentServer
from shardstream.testing.unreachable import open_in_child

N = 300


def _rows(start: int, stop: int) -> list[dict]:
    return [{"id": i, "text": f"row {i} " + "x" * (i % 37)} for i in range(start, stop)]


def _write(root) -> dict[str, range]:
    """One file of each kind, and the ids it holds."""
    os.makedirs(root, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(_rows(0, N)), os.path.join(root, "a.parquet"), row_group_size=40)
    lines = "".join(json.dumps(r) + "\n" for r in _rows(N, 2 * N)).encode()
    with open(os.path.join(root, "b.jsonl"), "wb") as f:
        f.write(lines)
    lines = "".join(json.dumps(r) + "\n" for r in _rows(2 * N, 3 * N)).encode()
    with open(os.path.join(root, "c.jsonl.gz"), "wb") as f:
        f.write(gzip.compress(lines))
    return {"a.parquet": range(0, N), "b.jsonl": range(N, 2 * N), "c.jsonl.gz": range(2 * N, 3 * N)}


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def remote(s3_server, tmp_path_factory) -> tuple[str, dict]:
    from shardstream.testing.servers import unique_name

    src = tmp_path_factory.mktemp("files")
    ids = _write(src)
    url = f"{s3_server.make_bucket(unique_name())}/files"
    s3_server.upload_dir(str(src), url)
    return url, ids


def _s3_options(endpoint: str) -> dict:
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


# -- a short answer while a file is described is tried again -------------------------------------------------------
@pytest.mark.parametrize("name", ["a.parquet", "b.jsonl", "c.jsonl.gz"])
def test_a_short_answer_while_describing_is_read_again(s3_server, remote, tmp_path, name):
    url, ids = remote
    with s3_server.proxy() as proxy:
        proxy.faults.add(name, "short")  # the first read of the file (footer, first block) holds half its bytes
        ds = StreamingDataset(remote=f"{url}/{name}", local=str(tmp_path / "cache"),
                              storage_options=proxy.storage_options, download_retry=1, download_timeout=10)
        assert [kind for kind, _ in proxy.faults.hits] == ["short"]
        assert sorted(s["id"] for s in ds) == list(ids[name])


@pytest.mark.parametrize("name", ["a.parquet", "b.jsonl"])
def test_short_answers_on_every_attempt_are_a_changed_file(s3_server, remote, tmp_path, name):
    url, _ = remote
    with s3_server.proxy() as proxy:
        proxy.faults.add(name, "short", "short", "short")
        with pytest.raises(FileChangedError) as info:
            StreamingDataset(remote=f"{url}/{name}", local=str(tmp_path / "cache"),
                             storage_options=proxy.storage_options, download_retry=1, download_timeout=10)
        path = f"/{url[len('s3://'):]}/{name}"
        assert proxy.faults.requests[path] == 2  # download_retry=1: two attempts, no more
    msg = str(info.value)
    assert f"reading {url}/{name} failed 2 time(s): short body x2" in msg, msg
    assert "fewer bytes than asked for" in msg and "open the dataset again" in msg


# -- describing a file within the time limit --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a.parquet", "b.jsonl", "c.jsonl.gz"])
def test_a_stalled_read_while_describing_is_cut_at_the_timeout(s3_server, remote, tmp_path, name):
    url, _ = remote
    with s3_server.proxy() as proxy:
        proxy.faults.add(name, "stall", "stall", stall_s=20)  # longer than the attempts, shorter than the clients'
        with pytest.raises(DownloadError) as info:
            StreamingDataset(remote=f"{url}/{name}", local=str(tmp_path / "cache"),
                             storage_options=proxy.storage_options, download_retry=1, download_timeout=1)
        msg = str(info.value)
        assert f"reading {url}/{name} failed 2 time(s): timed out x2" in msg, msg
        assert "each attempt limited to 1s" in msg and "download_timeout" in msg


# -- listing: a store that never answers, a closed port, refused credentials -----------------------------------------
@pytest.mark.parametrize("how", ["glob", "load_dataset"])
def test_listing_a_store_that_never_answers_ends_in_a_download_error(tmp_path, how):
    with SilentServer() as silent:
        if how == "glob":
            where = "s3://bucket/files/*.parquet"
            got = open_in_child(remote=where, local=str(tmp_path / "cache"),
                                 storage_options=_s3_options(silent.url), download_timeout=1, download_retry=1)
        else:
            where = "s3://bucket/files/b.jsonl"
            got = open_in_child(builder="json", data_files=where, storage_options=_s3_options(silent.url),
                                 download_timeout=1, download_retry=1)
    assert got["error"] == "DownloadError" and got["typed"], got
    assert f"listing {where} failed 2 time(s): timed out x2" in got["message"], got
    assert got["seconds"] < 30, got  # two attempts of 1 s and a backoff; the clients alone took minutes


def test_listing_an_unreachable_endpoint_names_the_fix(tmp_path):
    with ClosedPort() as port:
        with pytest.raises(DownloadError) as info:
            StreamingDataset(remote="s3://bucket/files/*.parquet", local=str(tmp_path / "cache"),
                             storage_options=_s3_options(port.url), download_timeout=2, download_retry=1)
    msg = str(info.value)
    assert "listing s3://bucket/files/*.parquet failed 2 time(s): could not connect x2" in msg, msg
    assert "check the store's address (endpoint_url in storage_options" in msg


@pytest.mark.parametrize("name", ["*.parquet", "b.jsonl"])
def test_refused_credentials_at_open_name_the_url_and_the_fix(s3_server, remote, tmp_path, name):
    url, _ = remote
    with s3_server.proxy() as proxy:
        proxy.faults.refuse("403")
        with pytest.raises(DownloadError) as info:
            StreamingDataset(remote=f"{url}/{name}", local=str(tmp_path / "cache"),
                             storage_options=proxy.storage_options, download_retry=3)
        assert len(proxy.faults.hits) == 1  # refused at the first answer: not retried
    msg = str(info.value)
    assert f"{url}/{name} cannot be read with these credentials" in msg, msg
    assert "not retried" in msg and "credentials in storage_options" in msg
