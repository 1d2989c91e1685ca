"""``validate_hash`` on shards already in a remote dataset's cache: a damaged cached shard is
noticed the first time a process uses it, on every path, and fetched again; a remote copy that
is damaged too raises ``HashMismatchError``. Each cached file is digested once per process, not
per sample or per pin."""

from __future__ import annotations

import os
import struct

import pytest

import shardstream.storage.digests as digests
from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import HashMismatchError

N = 80


def write(root, compression=None) -> str:
    out = os.path.join(str(root), "remote")
    with MDSWriter(out=out, columns={"id": "int", "payload": "bytes"}, size_limit=2000, hashes=["xxh64"],
                   compression=compression) as w:
        for i in range(N):
            w.write({"id": i, "payload": f"p{i}".encode() * 50})
    return out


def check(sample, i) -> None:
    assert (sample["id"], sample["payload"]) == (i, f"p{i}".encode() * 50)


def damage_first_sample(path: str) -> None:
    """Flip the low bit of sample 0's ``id`` (after its 4-byte size header): it would read as 1."""
    with open(path, "r+b") as f:
        (begin,) = struct.unpack("<I", f.read(8)[4:])
        f.seek(begin + 4)
        byte = f.read(1)[0]
        f.seek(begin + 4)
        f.write(bytes([byte ^ 1]))


def filled_cache(tmp_path, remote: str) -> str:
    local = str(tmp_path / "cache")
    for i, s in enumerate(StreamingDataset(remote=f"file://{remote}", local=local)):
        check(s, i)
    return local


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("path", ["getitem", "iterate", "batches"])
def test_damaged_cached_shard_is_fetched_again(tmp_path, compression, path):
    remote = write(tmp_path, compression)
    local = filled_cache(tmp_path, remote)
    ds = StreamingDataset(remote=f"file://{remote}", local=local, validate_hash="xxh64")
    damage_first_sample(os.path.join(local, ds.shards[0].raw_data.basename))
    if path == "getitem":
        check(ds[0], 0)
    elif path == "iterate":
        for i, s in enumerate(ds):
            check(s, i)
    else:
        assert next(iter(ds.batches(4)))["id"].tolist() == [0, 1, 2, 3]
    assert ds.table.stores[0].fetcher.files == 1  # shard 0 (its compressed file, if any), nothing else
    check(StreamingDataset(local=local, validate_hash="xxh64")[0], 0)  # the file itself is intact again


def test_damaged_remote_copy_raises_hash_mismatch(tmp_path):
    remote = write(tmp_path)
    local = filled_cache(tmp_path, remote)
    name = StreamingDataset(local=remote).shards[0].raw_data.basename
    damage_first_sample(os.path.join(remote, name))
    damage_first_sample(os.path.join(local, name))
    ds = StreamingDataset(remote=f"file://{remote}", local=local, validate_hash="xxh64")
    with pytest.raises(HashMismatchError, match=name) as info:
        ds[0]
    assert remote in str(info.value)
    assert not os.path.exists(os.path.join(local, name))  # nothing damaged is kept


def test_each_cached_file_is_digested_once_per_process(tmp_path, monkeypatch):
    """Two epochs and random access over every sample digest each cached shard file once."""
    remote = write(tmp_path)
    local = filled_cache(tmp_path, remote)
    calls = []

    def counted(algo, path, *args):
        calls.append(os.path.basename(path))
        return real(algo, path, *args)

    real = digests.digest_file
    monkeypatch.setattr(digests, "digest_file", counted)
    ds = StreamingDataset(remote=f"file://{remote}", local=local, validate_hash="xxh64", shuffle=True, batch_size=2)
    for _ in range(2):
        assert sorted(s["id"] for s in ds) == list(range(N))
    for i in range(N):
        check(ds[i], i)
    assert sorted(calls) == sorted(s.raw_data.basename for s in ds.shards)
    assert ds.table.stores[0].fetcher.files == 0
