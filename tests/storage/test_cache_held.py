"""``cache_limit`` on the random-access paths: ``ds[i]`` and a subclass that overrides
``__getitem__`` (mosaicml-streaming's way to add transforms) keep the cache within the limit
plus one shard per process, as plain iteration does, with and without DataLoader workers."""

from __future__ import annotations

import os

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset

N = 120


def write(root) -> str:
    """About a dozen shards of ~2.5 KB (no digests needed here)."""
    out = os.path.join(str(root), "src")
    with MDSWriter(out=out, columns={"id": "int", "payload": "bytes"}, size_limit=2500, hashes=[]) as w:
        for i in range(N):
            w.write({"id": i, "payload": bytes([i % 251]) * 200})
    return out


class Transformed(StreamingDataset):
    """Adds a column after decoding, and records the cache usage the moment each sample is made."""

    def __getitem__(self, i):
        sample = super().__getitem__(i)
        sample["double"] = 2 * sample["id"]
        sample["usage"] = self.cache_usage
        return sample


@pytest.fixture
def remote(s3_server, s3_bucket, tmp_path):
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(write(tmp_path), url)
    return url


def bounds(ds) -> tuple[int, int]:
    """(a cache_limit with room for the index and three shards, the largest shard's footprint)."""
    largest = max(ds.table.stores[0].footprint(i) for i in range(len(ds.shards)))
    return os.path.getsize(os.path.join(ds.dirname, "index.json")) + 3 * largest, largest


def open_remote(cls, remote, s3_server, tmp_path, limit=None, **kwargs):
    return cls(remote=remote, local=str(tmp_path / "cache"), storage_options=s3_server.storage_options,
               cache_limit=limit, **kwargs)


def test_transform_subclass_keeps_the_limit(remote, s3_server, tmp_path):
    """An epoch through a subclass's __getitem__, with no workers, never holds more than the limit
    plus one shard, during the epoch or after it."""
    probe = open_remote(StreamingDataset, remote, s3_server, tmp_path)
    limit, largest = bounds(probe)
    assert len(probe.shards) >= 4 * 3  # the epoch cannot fit in the cache
    ds = open_remote(Transformed, remote, s3_server, tmp_path, limit, shuffle=True, batch_size=4)
    got = list(ds)
    assert sorted(s["id"] for s in got) == list(range(N))
    assert all(s["double"] == 2 * s["id"] and s["payload"] == bytes([s["id"] % 251]) * 200 for s in got)
    assert max(s["usage"] for s in got) <= limit + largest
    assert ds.cache_usage <= limit + largest


def test_transform_subclass_keeps_the_limit_with_dataloader_workers(remote, s3_server, tmp_path):
    """The same through a torch DataLoader with 2 worker processes: the epoch ends within the limit
    plus one shard per worker. (While processes thrash a small cache, its peak can pass that by a
    shard or two on every path, plain iteration too: see test_processes_share_a_capped_cache.)"""
    torch = pytest.importorskip("torch")
    probe = open_remote(StreamingDataset, remote, s3_server, tmp_path)
    limit, largest = bounds(probe)
    ds = open_remote(Transformed, remote, s3_server, tmp_path, limit, shuffle=True, batch_size=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = list(loader)
    assert sorted(int(s["id"]) for s in got) == list(range(N))
    assert all(s["double"] == 2 * s["id"] for s in got)
    assert ds.cache_usage <= limit + 2 * largest


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_random_access_keeps_the_limit(remote, s3_server, tmp_path, order):
    """ds[i] over every index keeps the cache within the limit plus one shard after every access,
    and each sample is right."""
    ds = open_remote(StreamingDataset, remote, s3_server, tmp_path)
    limit, largest = bounds(ds)
    ds = open_remote(StreamingDataset, remote, s3_server, tmp_path, limit)
    indices = np.arange(N) if order == "sequential" else np.random.default_rng(0).permutation(N)
    for i in indices.tolist():
        assert ds[i]["id"] == i
        assert ds.cache_usage <= limit + largest, f"after ds[{i}]"


def test_random_access_without_a_limit_keeps_recent_shards(remote, s3_server, tmp_path):
    """Without a limit, recent shards stay held for reuse: reading them again downloads nothing."""
    ds = open_remote(StreamingDataset, remote, s3_server, tmp_path)
    for i in range(N):
        ds[i]
    fetched = ds.table.stores[0].fetcher.files
    for i in range(N - 1, -1, -1):
        assert ds[i]["id"] == i
    assert ds.table.stores[0].fetcher.files == fetched
