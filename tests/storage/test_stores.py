"""The stores behind the loader: one interface for a cache of a remote and a directory read in place,
the streams opened and their stores made (with cache_limit split before any store exists), and
shards read through their stream's format."""

from __future__ import annotations

import inspect
import os

import pytest

from shardstream import Stream, StreamingDataset
from shardstream.errors import CacheLimitError, InvalidArgumentError
from shardstream.format.mds import MDSFormat
from shardstream.format.source import register_format
from shardstream.storage.cache import ShardCache
from shardstream.storage.local import LocalStore
from shardstream.storage.options import StreamOptions
from shardstream.storage.store import Store, open_stores
from shardstream.storage.streams import open_streams

COLUMNS = {"id": "int", "payload": "bytes"}


def write(make_dataset, root, subdir: str, n: int = 60, **kwargs) -> str:
    samples = [{"id": i, "payload": bytes([i % 251]) * 200} for i in range(n)]
    return make_dataset(root, COLUMNS, samples, subdir=subdir, size_limit=2048, **kwargs)


def snapshot(root: str) -> dict[str, int]:
    """Every file and folder under ``root`` (hidden ones too), with file sizes."""
    out = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(here, name)
            out[os.path.relpath(path, root)] = os.path.getsize(path) if name in files else -1
    return out


def opened(places, storage_options=None):
    return open_streams([(None, remote, local, opts) for remote, local, opts in places], storage_options)


def test_both_stores_have_every_member_of_the_interface(tmp_path, make_dataset):
    data = write(make_dataset, tmp_path, "data")
    local, cached = open_stores(opened([(None, data, StreamOptions()),
                                        (f"file://{data}", str(tmp_path / "cache"), StreamOptions())]), None)
    assert isinstance(local, LocalStore) and isinstance(cached, ShardCache)
    members = [n for n in vars(Store) if not n.startswith("_")] + list(Store.__annotations__)
    for store in (local, cached):
        missing = [n for n in members if not hasattr(store, n)]
        assert missing == [], f"{type(store).__name__} lacks {missing}"
        for name in members:
            if inspect.isfunction(getattr(Store, name, None)):
                want = list(inspect.signature(getattr(Store, name)).parameters)[1:]
                assert list(inspect.signature(getattr(store, name)).parameters) == want, (type(store), name)
        assert store.format.name == "mds" and store.shards and store.dirname


def test_a_local_dataset_is_read_without_writing_into_its_directory(tmp_path, make_dataset):
    """No lock file, no metadata folder: on iteration, random access, prepare_shard, in a mixture too."""
    data = write(make_dataset, tmp_path, "data")
    other = write(make_dataset, tmp_path, "other", n=30)
    before = {d: snapshot(d) for d in (data, other)}
    ds = StreamingDataset(local=data, batch_size=4)
    assert ds.prepare_shard(0) and ds.prepare_shard(len(ds.shards) - 1)
    assert [s["id"] for s in ds] == list(range(60)) and ds[59]["id"] == 59
    mixed = StreamingDataset(streams=[Stream(local=data), Stream(local=other)])
    assert len(list(mixed)) == 90 and mixed.prepare_shard(0)
    assert {d: snapshot(d) for d in (data, other)} == before
    assert ds.cache_usage == 0 and mixed.cache_usage == 0


def test_evicting_a_shard_of_a_local_dataset_is_refused(tmp_path, make_dataset):
    """A local single dataset and a local stream of a mixture answer alike: the only copy is never
    deleted, and asking to delete it is an error that says why; the coldest shard is None."""
    data = write(make_dataset, tmp_path, "data")
    before = snapshot(data)
    single = StreamingDataset(local=data)
    mixed = StreamingDataset(streams=[Stream(local=data, proportion=1)])
    for ds in (single, mixed):
        with pytest.raises(InvalidArgumentError, match="cannot be evicted: this dataset has no remote"):
            ds.evict_shard(0)
        assert ds.evict_coldest_shard() is None
    assert snapshot(data) == before


def test_two_places_sharing_a_directory_from_different_remotes_are_refused(tmp_path, make_dataset):
    a = write(make_dataset, tmp_path, "a")
    b = write(make_dataset, tmp_path, "b")
    cache = str(tmp_path / "cache")
    with pytest.raises(InvalidArgumentError, match="two streams keep their shards in .* different places"):
        opened([(f"file://{a}", cache, StreamOptions()), (f"file://{b}", cache, StreamOptions())])
    assert not os.path.exists(cache)  # refused before anything was opened
    same = opened([(f"file://{a}", cache, StreamOptions()), (f"file://{a}", cache, StreamOptions())])
    assert [o.samples for o in same] == [60, 60]


def test_one_remote_stream_gets_the_whole_limit_and_the_single_datasets_error(tmp_path, make_dataset):
    data = write(make_dataset, tmp_path, "data")
    local = write(make_dataset, tmp_path, "local")
    streams = opened([(f"file://{data}", str(tmp_path / "cache"), StreamOptions()), (None, local, StreamOptions())])
    cache, store = open_stores(streams, 10**6)
    assert cache.limit == 10**6 and store.limit is None
    largest = max(s.footprint(i) for s in (cache, store) for i in range(len(s.shards)))
    with pytest.raises(CacheLimitError, match=rf"Cache limit \({4 * largest - 1} bytes\) is too low.* at least "
                                              rf"{4 * largest} bytes"):
        open_stores(streams, 4 * largest - 1)
    cache, _ = open_stores(streams, 4 * largest)
    assert cache.limit == 4 * largest  # one cached stream: the whole limit, which covers its own minimum
    assert cache.limit >= cache.minimum_limit()


def test_several_remote_streams_get_their_shares_when_made(tmp_path, make_dataset):
    small = write(make_dataset, tmp_path, "small", n=30)
    big = write(make_dataset, tmp_path, "big", n=90)
    streams = opened([(f"file://{small}", str(tmp_path / "c1"), StreamOptions()),
                      (f"file://{big}", str(tmp_path / "c2"), StreamOptions(download_retry=0, download_timeout=5))])
    limit = 10**6
    a, b = open_stores(streams, limit)
    sizes = [sum(s.footprint(i) for i in range(len(s.shards))) for s in (a, b)]
    assert [a.limit, b.limit] == [limit * size // sum(sizes) for size in sizes]
    assert (a.wait, b.wait) == (StreamOptions().lock_wait, 65)
    # four times the largest shard is enough for the whole limit, but the small stream's share (a quarter of
    # it) cannot hold one shard in use plus the next: the split rule is stricter here, and refuses
    fewest = 4 * max(s.footprint(i) for s in (a, b) for i in range(len(s.shards)))
    with pytest.raises(CacheLimitError, match="too small for 2 streams with a remote"):
        open_stores(streams, fewest)


def test_fixed_bytes_is_a_caches_index_and_nothing_for_a_local_store(tmp_path, make_dataset):
    data = write(make_dataset, tmp_path, "data")
    cache_dir = str(tmp_path / "cache")
    local, cache = open_stores(opened([(None, data, StreamOptions()), (f"file://{data}", cache_dir, StreamOptions())]),
                               None)
    assert local.fixed_bytes() == 0
    assert cache.fixed_bytes() == os.path.getsize(os.path.join(cache_dir, "index.json")) > 0
    assert cache.usage() == cache.fixed_bytes()  # nothing downloaded yet
    assert cache.pin(0)
    assert cache.usage() == cache.fixed_bytes() + cache.shards[0].raw_data.bytes
    cache.unpin(0)


class CountedMDS(MDSFormat):
    """MDS under another name, recording the calls the stores make: (what, directory, shard file)."""

    name = "mds-counted"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def prepare(self, dirname, shard, keep_fetched):
        self.calls.append(("prepare", dirname, shard.raw_data.basename))
        return super().prepare(dirname, shard, keep_fetched)

    def open(self, dirname, shard, validate_hash=None):
        self.calls.append(("open", dirname, shard.raw_data.basename))
        return super().open(dirname, shard, validate_hash)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_shards_are_made_ready_and_read_through_the_streams_format(tmp_path, make_dataset, compression):
    """A downloaded shard is prepared once, after its download, and every shard, downloaded or
    local, is opened by the format its stream names."""
    fmt = register_format(CountedMDS(), replace=True)
    remote = write(make_dataset, tmp_path, "remote", compression=compression)
    local = write(make_dataset, tmp_path, "local", n=30)
    cache = str(tmp_path / "cache")
    ds = StreamingDataset(streams=[Stream(remote=f"file://{remote}", local=cache, format=fmt.name),
                                   Stream(local=local, format=fmt.name)])
    assert sorted(s["id"] for s in ds) == sorted(list(range(60)) + list(range(30)))
    remote_names = [s.raw_data.basename for s in MDSFormat().read_shards(remote)]
    local_names = [s.raw_data.basename for s in MDSFormat().read_shards(local)]
    prepared = [(d, name) for what, d, name in fmt.calls if what == "prepare"]
    assert sorted(prepared) == sorted((cache, name) for name in remote_names)
    read = {(d, name) for what, d, name in fmt.calls if what == "open"}
    assert read == {(cache, name) for name in remote_names} | {(local, name) for name in local_names}
