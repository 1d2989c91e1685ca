"""Streaming datasets from real loopback stores (moto S3, an HTTP range server, fake-gcs-server),
with faults injected between client and server: every epoch still yields exactly the planned
samples, and permanent failures raise errors that name the shard and its URL."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.errors import DownloadError, HashMismatchError, IndexNotFoundError
from shardstream.plan import World
from shardstream.testing import write_dataset

N = 600


COLUMNS = {"id": "int", "payload": "bytes"}


def _samples():
    return ({"id": i, "payload": _payload(i)} for i in range(N))


def _payload(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, 100 + i % 50, dtype=np.uint8).tobytes()


def _check_epoch(samples, expected_ids=None) -> list[int]:
    ids = [s["id"] for s in samples]
    for s in samples:
        assert s["payload"] == _payload(s["id"]), f"sample {s['id']} has wrong bytes"
    if expected_ids is not None:
        assert ids == expected_ids
    return ids


@pytest.fixture
def dataset_dir(tmp_path):
    return write_dataset(tmp_path / "src", COLUMNS, _samples(), size_limit=1 << 13, compression="zstd",
                         hashes=["xxh64"])


@pytest.fixture
def reference(dataset_dir):
    """The plan-order ids of a shuffled epoch read from the local directory."""
    return [s["id"] for s in StreamingDataset(local=dataset_dir, shuffle=True, batch_size=4)]


@pytest.fixture
def s3_remote(s3_server, s3_bucket, dataset_dir):
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(dataset_dir, url)
    return url


@pytest.fixture
def http_remote(http_server, dataset_dir):
    shutil.copytree(dataset_dir, os.path.join(http_server.root, "data"))
    return f"{http_server.url}/data"


# -- every backend ------------------------------------------------------------------------------
def test_s3_epoch_matches_local(s3_server, s3_remote, reference, tmp_path):
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_server.storage_options,
                          shuffle=True, batch_size=4)
    _check_epoch(list(ds), reference)
    assert ds.table.stores[0].fetcher.files == len(ds.shards) + 1  # every shard once, plus the index


def test_s3_endpoint_from_mosaic_env_var(s3_server, s3_remote, reference, tmp_path, monkeypatch):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), shuffle=True, batch_size=4)
    _check_epoch(list(ds), reference)


def test_http_epoch_matches_local(http_server, http_remote, reference, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), shuffle=True, batch_size=4)
    _check_epoch(list(ds), reference)
    gets = http_server.faults.requests
    assert all(n == 1 for n in gets.values()), gets  # no file fetched twice


def test_gcs_epoch_matches_local(gcs_server, gcs_bucket, dataset_dir, reference, tmp_path):
    url = f"{gcs_bucket}/data"
    gcs_server.upload_dir(dataset_dir, url)
    ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), storage_options=gcs_server.storage_options,
                          shuffle=True, batch_size=4)
    _check_epoch(list(ds), reference)


def test_split_streams_the_subdirectory(s3_server, s3_bucket, dataset_dir, tmp_path):
    s3_server.upload_dir(dataset_dir, f"{s3_bucket}/root/train")
    ds = StreamingDataset(remote=f"{s3_bucket}/root", split="train", local=str(tmp_path / "cache"),
                          storage_options=s3_server.storage_options)
    assert sorted(_check_epoch(list(ds))) == list(range(N))
    assert os.path.exists(tmp_path / "cache" / "train" / "index.json")


def test_missing_index_is_a_clear_error(s3_server, s3_bucket, tmp_path):
    with pytest.raises(IndexNotFoundError, match="index.json"):
        StreamingDataset(remote=f"{s3_bucket}/nothing-here", local=str(tmp_path / "c"),
                         storage_options=s3_server.storage_options)


# -- index once, shards once, only this node's shards --------------------------------------------
def test_index_fetched_once_per_cache(http_server, http_remote, tmp_path):
    local = str(tmp_path / "cache")
    for _ in range(3):
        StreamingDataset(remote=http_remote, local=local)
    assert http_server.faults.requests["/data/index.json"] == 1


def test_a_node_fetches_only_its_own_shards(http_server, http_remote, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), shuffle=True, batch_size=4,
                          num_canonical_nodes=2)
    world = World(num_nodes=2, ranks_per_node=1, node=0, local_rank=0, num_workers=1, worker=0, replication=1)
    got = [s["id"] for s in ds.iterate(world)]
    needed = {int(np.searchsorted(ds.table.ends_array, i, side="right")) for i in got}
    fetched = {p.rsplit("/", 1)[-1] for p in http_server.faults.requests if "shard" in p}
    assert fetched == {ds.shards[i].stored.basename for i in needed}
    assert len(needed) < len(ds.shards)  # the other node's shards were never downloaded


# -- transient faults: the epoch completes with exactly the planned samples ------------------------
FAULTS = [("500",), ("503", "503"), ("reset",), ("corrupt",), ("500", "reset", "corrupt")]


@pytest.mark.parametrize("kinds", FAULTS, ids=["+".join(k) for k in FAULTS])
def test_http_faults_are_retried(http_server, http_remote, reference, tmp_path, kinds):
    http_server.faults.add("shard.00002", *kinds)
    http_server.faults.add("index.json", kinds[0])
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), shuffle=True, batch_size=4,
                          download_retry=len(kinds) + 1)
    _check_epoch(list(ds), reference)
    assert http_server.faults.pending() == 0


@pytest.mark.parametrize("kinds", [("500",), ("503",), ("reset",), ("corrupt",)], ids=lambda k: k[0])
def test_s3_faults_are_retried(s3_proxy, s3_remote, reference, tmp_path, kinds):
    s3_proxy.faults.add("shard.00001", *kinds)
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_proxy.storage_options,
                          shuffle=True, batch_size=4)
    _check_epoch(list(ds), reference)
    assert s3_proxy.faults.pending() == 0


def test_stall_past_the_timeout_is_retried(http_server, http_remote, reference, tmp_path):
    http_server.faults.add("shard.00003", "stall", stall_s=4.0)
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), shuffle=True, batch_size=4,
                          download_timeout=1.0)
    _check_epoch(list(ds), reference)
    assert ("stall", "/data/shard.00003.mds.zstd") in http_server.faults.hits


def test_s3_stall_past_the_timeout_is_retried(s3_proxy, s3_remote, reference, tmp_path):
    s3_proxy.faults.add("shard.00003", "stall", stall_s=4.0)
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_proxy.storage_options,
                          shuffle=True, batch_size=4, download_timeout=1.0)
    _check_epoch(list(ds), reference)
    assert s3_proxy.faults.pending() == 0


# -- permanent failures: clear errors naming shard and URL ---------------------------------------------
def test_permanent_failure_names_shard_and_url(http_server, http_remote, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), download_retry=1)
    http_server.faults.add("shard.00004", "503", "503", "503")
    with pytest.raises(DownloadError) as info:
        list(ds)
    msg = str(info.value)
    assert "shard.00004.mds.zstd" in msg and f"{http_remote}/shard.00004.mds.zstd" in msg
    assert "failed 2 time(s): HTTP 503 x2" in msg
    assert not [n for n in os.listdir(tmp_path / "cache") if n.startswith(".tmp-")]


def test_missing_shard_is_not_retried(s3_server, s3_remote, tmp_path):
    s3_server.filesystem().rm(f"{s3_remote}/shard.00002.mds.zstd")
    ds = StreamingDataset(remote=s3_remote, local=str(tmp_path / "cache"), storage_options=s3_server.storage_options)
    with pytest.raises(DownloadError, match="does not exist") as info:
        list(ds)
    assert "shard.00002.mds.zstd" in str(info.value)


def test_corrupt_twice_is_a_hash_mismatch(http_server, http_remote, tmp_path):
    ds = StreamingDataset(remote=http_remote, local=str(tmp_path / "cache"), validate_hash="xxh64")
    http_server.faults.add("shard.00001", "corrupt", "corrupt")
    with pytest.raises(HashMismatchError) as info:
        list(ds)
    want = ds.shards[1].zip_data.hashes["xxh64"]
    msg = str(info.value)
    assert "shard.00001.mds.zstd" in msg and want in msg and "xxh64 digest is" in msg
    assert not os.path.exists(tmp_path / "cache" / "shard.00001.mds.zstd")  # nothing damaged is kept
    cached = tmp_path / "cache" / "shard.00001.mds"  # a later prefetch may have fetched a good copy
    assert not cached.exists() or StreamingDataset(local=str(tmp_path / "cache"))[ds.table.starts[1]]["id"] == ds.table.starts[1]


def test_corruption_without_recorded_digest_is_caught_and_fetched_again(http_server, tmp_path):
    src = write_dataset(tmp_path / "plain" / "src", COLUMNS, _samples(), size_limit=1 << 13, hashes=[])
    shutil.copytree(src, os.path.join(http_server.root, "plain"))
    ds = StreamingDataset(remote=f"{http_server.url}/plain", local=str(tmp_path / "cache"))
    http_server.faults.add("shard.00000", "corrupt")  # flips the first byte: the sample count in the header
    assert sorted(_check_epoch(list(ds))) == list(range(N))
    assert http_server.faults.requests["/plain/shard.00000.mds"] == 2


def test_corruption_twice_without_digest_is_an_error(http_server, tmp_path):
    src = write_dataset(tmp_path / "plain" / "src", COLUMNS, _samples(), size_limit=1 << 13, hashes=[])
    shutil.copytree(src, os.path.join(http_server.root, "plain"))
    ds = StreamingDataset(remote=f"{http_server.url}/plain", local=str(tmp_path / "cache"))
    http_server.faults.add("shard.00000", "corrupt", "corrupt")
    from shardstream.errors import CorruptShardError

    with pytest.raises(CorruptShardError, match="shard.00000.mds"):
        list(ds)
    cached = tmp_path / "cache" / "shard.00000.mds"  # a later prefetch may have fetched a good copy
    with open(os.path.join(src, "shard.00000.mds"), "rb") as f:
        assert not cached.exists() or cached.read_bytes() == f.read()
