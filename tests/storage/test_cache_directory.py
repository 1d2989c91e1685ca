"""Which directory a remote's cache may use: an empty or new one, or its own earlier cache. A
directory holding another dataset, other files or another remote's cache is refused and left
byte for byte as it was; a ``local=`` that is the remote itself (through a link) or lies inside
it reads in place and never deletes anything.

Datasets are written with ``hashes=[]``: shards without digests are the ones a cache would
once delete as possibly stale.
"""

from __future__ import annotations

import os
import shutil

import pytest

from shardstream import MDSWriter, Stream, StreamingDataset
from shardstream.errors import CacheDirectoryError, NotADatasetError, ShardstreamError

COLUMNS = {"id": "int", "payload": "bytes"}


def write(root, subdir: str, n: int = 60, tag: str = "r", columns=None) -> str:
    """A dataset of ``n`` samples in several small shards, with no digests."""
    out = os.path.join(str(root), subdir)
    with MDSWriter(out=out, columns=columns or COLUMNS, size_limit=1500, hashes=[]) as w:
        for i in range(n):
            w.write({"a": i} if columns else {"id": i, "payload": f"{tag}{i}".encode() * 40})
    return out


def snapshot(root: str) -> dict:
    """Every file under ``root`` (through links) with its bytes."""
    files = {}
    for dirpath, _, names in os.walk(root, followlinks=True):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


def check_epoch(ds, n: int, tag: str = "r") -> None:
    got = sorted((s["id"], s["payload"]) for s in ds)
    assert got == [(i, f"{tag}{i}".encode() * 40) for i in range(n)]


def cache_of(tmp_path, remote: str) -> str:
    """A cache directory filled by a whole epoch of ``remote``."""
    local = str(tmp_path / "cache")
    check_epoch(StreamingDataset(remote=f"file://{remote}", local=local), 60)
    return local


# -- another dataset, other files, another remote's cache: refused, untouched ------------------------


def test_local_holding_another_dataset_is_refused_untouched(tmp_path):
    """A local= directory holding a dataset written by MDSWriter (column ``a``) is not a cache of
    the remote: refused with a typed error naming both, and not one byte of it changes."""
    remote = write(tmp_path, "remote")
    other = write(tmp_path, "other", n=5, columns={"a": "int"})
    before = snapshot(other)
    with pytest.raises(CacheDirectoryError) as info:
        StreamingDataset(remote=f"file://{remote}", local=other)
    assert isinstance(info.value, (ShardstreamError, FileExistsError))
    message = str(info.value)
    assert other in message and remote in message and "another local=" in message and "delete" in message
    assert snapshot(other) == before
    assert sorted(os.listdir(other)) == sorted(before)  # not even a .shardstream folder
    assert [s["a"] for s in StreamingDataset(local=other)] == list(range(5))


def test_local_holding_other_files_is_refused_untouched(tmp_path):
    remote = write(tmp_path, "remote")
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(CacheDirectoryError, match="notes.txt"):
        StreamingDataset(remote=f"file://{remote}", local=str(home))
    assert os.listdir(home) == ["notes.txt"]


def test_local_that_is_a_file_is_refused(tmp_path):
    remote = write(tmp_path, "remote")
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(NotADatasetError, match="is a file"):
        StreamingDataset(remote=f"file://{remote}", local=str(path))
    assert path.read_text() == "x"


def test_cache_of_another_remote_is_refused(tmp_path):
    """A cache records which remote it caches; another remote on it is refused, naming both, and
    the first remote's cache keeps working without a download."""
    first = write(tmp_path, "first", tag="f")
    second = write(tmp_path, "second", tag="s")
    local = str(tmp_path / "cache")
    check_epoch(StreamingDataset(remote=first, local=local), 60, "f")
    before = snapshot(local)
    with pytest.raises(CacheDirectoryError) as info:
        StreamingDataset(remote=second, local=local)
    assert first in str(info.value) and second in str(info.value) and local in str(info.value)
    assert snapshot(local) == before
    again = StreamingDataset(remote=first, local=local)
    check_epoch(again, 60, "f")
    assert again.table.stores[0].fetcher.files == 0
    check_epoch(StreamingDataset(remote=f"file://{first}/", local=local), 60, "f")  # the same, spelt otherwise


def test_stream_on_another_dataset_is_refused(tmp_path):
    """Streams of a mixture go through the same check."""
    remote = write(tmp_path, "remote")
    other = write(tmp_path, "other", n=5, columns={"a": "int"})
    before = snapshot(other)
    with pytest.raises(CacheDirectoryError, match="other"):
        StreamingDataset(streams=[Stream(local=write(tmp_path, "plain", tag="p"), proportion=1),
                                  Stream(remote=f"file://{remote}", local=other, proportion=1)])
    assert snapshot(other) == before


# -- what a cache may use ----------------------------------------------------------------------------


@pytest.mark.parametrize("exists", [False, True])
def test_new_or_empty_local_becomes_the_cache(tmp_path, exists):
    remote = write(tmp_path, "remote")
    local = tmp_path / "cache"
    if exists:
        local.mkdir()
    check_epoch(StreamingDataset(remote=f"file://{remote}", local=str(local)), 60)
    assert os.path.exists(local / ".shardstream" / "cache.json")


def test_earlier_mosaic_cache_of_the_same_remote_is_reused(tmp_path):
    """A directory with no marker whose index.json is the remote's own (as mosaicml-streaming
    leaves its cache: the remote's index and some of its shards) is taken over as the cache: the
    shards in it are read, not downloaded again and not deleted, and the rest are downloaded."""
    remote = write(tmp_path, "remote")
    local = str(tmp_path / "mosaic-cache")
    os.makedirs(local)
    shards = sorted(n for n in os.listdir(remote) if n.endswith(".mds"))
    kept = shards[::2]
    for name in ["index.json"] + kept:
        shutil.copy(os.path.join(remote, name), os.path.join(local, name))
    ds = StreamingDataset(remote=f"file://{remote}", local=local)
    check_epoch(ds, 60)
    assert ds.table.stores[0].fetcher.files == 1 + len(shards) - len(kept)  # the index once, to compare it
    assert sorted(n for n in os.listdir(local) if n.endswith(".mds")) == shards


def test_earlier_mosaic_cache_of_a_changed_remote_is_refused(tmp_path):
    """An index.json that is not the remote's is another dataset, even under the same shard names."""
    remote = write(tmp_path, "remote")
    local = write(tmp_path, "stale", n=70)  # what a cache of an earlier version would hold
    before = snapshot(local)
    with pytest.raises(CacheDirectoryError, match="index.json"):
        StreamingDataset(remote=f"file://{remote}", local=local)
    assert snapshot(local) == before


def test_cache_from_before_markers_is_reused(tmp_path):
    """A cache an earlier shardstream filled (an index record, no marker) is reused as it is."""
    remote = write(tmp_path, "remote")
    local = cache_of(tmp_path, remote)
    os.unlink(os.path.join(local, ".shardstream", "cache.json"))
    before = snapshot(local)
    ds = StreamingDataset(remote=f"file://{remote}", local=local)
    check_epoch(ds, 60)
    assert ds.table.stores[0].fetcher.files == 0
    assert {k: v for k, v in snapshot(local).items() if not k.startswith(".shardstream")} == {
        k: v for k, v in before.items() if not k.startswith(".shardstream")}


# -- local= that is the remote itself -------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_local_linked_to_the_remote_reads_in_place(tmp_path, scheme):
    """local= a symlink to the remote directory: nothing is deleted, at construction or by
    eviction under a small cache_limit, and every sample is read from the only copy."""
    remote = write(tmp_path, "remote")
    link = str(tmp_path / "link")
    os.symlink(remote, link)
    before = snapshot(remote)
    with pytest.warns(UserWarning, match="no effect"):
        ds = StreamingDataset(remote=scheme + remote, local=link, cache_limit=4 * 1500)  # the fewest allowed
    assert ds.remote is None
    check_epoch(ds, 60)
    check_epoch(StreamingDataset(remote=scheme + remote, local=link, shuffle=True), 60)
    assert snapshot(remote) == before


def test_local_inside_the_remote_reads_in_place(tmp_path):
    """local= a directory inside the remote one: the remote is read in place; nothing is written
    into it or deleted from it."""
    remote = write(tmp_path, "remote")
    before = snapshot(remote)
    ds = StreamingDataset(remote=f"file://{remote}", local=os.path.join(remote, "cache"))
    assert ds.remote is None
    check_epoch(ds, 60)
    assert snapshot(remote) == before


def test_nothing_is_evicted_from_a_directory_that_is_not_a_cache(tmp_path):
    """Eviction deletes only from a directory marked as a cache: without the marker, files stay."""
    remote = write(tmp_path, "remote")
    local = cache_of(tmp_path, remote)
    ds = StreamingDataset(remote=f"file://{remote}", local=local)
    os.unlink(os.path.join(local, ".shardstream", "cache.json"))
    name = ds.shards[0].raw_data.basename
    assert ds.evict_shard(0) is False
    assert ds.evict_coldest_shard() is None
    assert os.path.exists(os.path.join(local, name))
