"""The local shard cache in one process: downloads from a ``file://`` remote, what is fetched,
``cache_limit`` and least-recently-used eviction, pins, hashes, stale files and changed remotes.

Every dataset here has an ``id`` column and a ``payload`` column derived from the id, so a
sample read from the wrong shard, a stale shard or a damaged file shows up as wrong data.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import warnings

import pytest
import xxhash

from shardstream import StreamingDataset
from shardstream.errors import CacheLimitError, DownloadError, HashMismatchError
from shardstream.plan import World

COLUMNS = {"id": "int", "payload": "bytes"}
TMP_PREFIX = ".tmp-"
ROOM = 4  # shards the tightest limits here hold: a cache_limit must hold four times the largest shard


def payload(i: int, version: int = 0) -> bytes:
    """256 bytes that depend on the sample id (and on the dataset version)."""
    return hashlib.sha256(f"{version}:{i}".encode()).digest() * 8


def write_remote(make_dataset, root, n: int = 100, subdir: str = "remote", version: int = 0,
                 size_limit: int = 4096, **kwargs) -> str:
    """An MDS dataset of ``n`` samples (about 14 per 4 KiB shard) written by the real writer."""
    samples = [{"id": i, "payload": payload(i, version)} for i in range(n)]
    return make_dataset(root, COLUMNS, samples, subdir=subdir, size_limit=size_limit, **kwargs)


def url(path: str) -> str:
    return f"file://{path}"


def cached_names(local: str) -> list[str]:
    """The data files in a cache directory (shards and temp files; not the index or metadata)."""
    return sorted(n for n in os.listdir(local) if n not in ("index.json", ".shardstream"))


def shard_files(local: str) -> set[str]:
    return {n for n in cached_names(local) if not n.startswith(TMP_PREFIX)}


def ids_of_shard(ds: StreamingDataset, shard: int) -> range:
    start = sum(s.samples for s in ds.shards[:shard])
    return range(start, start + ds.shards[shard].samples)


def footprint(load_index, remote: str, shard: int) -> int:
    """Raw bytes plus compressed bytes of ``shard``, read from the remote's index.json."""
    entry = load_index(remote)["shards"][shard]
    return entry["raw_data"]["bytes"] + (entry["zip_data"]["bytes"] if entry.get("zip_data") else 0)


def check_sample(sample: dict, i: int, version: int = 0) -> None:
    assert sample["id"] == i
    assert sample["payload"] == payload(i, version), f"sample {i} has the payload of another sample or version"


def disk_bytes(local: str) -> int:
    """Bytes really held by the data files and the index (temp files at their current size)."""
    total = 0
    for name in cached_names(local) + ["index.json"]:
        try:
            total += os.path.getsize(os.path.join(local, name))
        except FileNotFoundError:  # evicted or renamed while we looked
            pass
    return total


# -- full epochs ----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("hashes", [None, ["xxh64"]])
def test_full_epoch_from_file_remote(tmp_path, make_dataset, load_index, compression: str | None,
                                     hashes: list | None) -> None:
    """An epoch from a file:// remote yields every sample once with its own payload, fetches
    every shard exactly once plus the index, and leaves exactly the raw shards in the cache."""
    remote = write_remote(make_dataset, tmp_path, n=100, compression=compression, hashes=hashes)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    n_shards = len(load_index(remote)["shards"])
    assert n_shards >= 5
    assert ds.table.stores[0].fetcher.files == 1  # the index only, so far
    got = list(ds)
    assert [s["id"] for s in got] == list(range(100))
    for i, s in enumerate(got):
        check_sample(s, i)
    assert ds.table.stores[0].fetcher.files == n_shards + 1
    remote_names = sorted(n for n in os.listdir(remote) if n != "index.json")
    fetched = sum(os.path.getsize(os.path.join(remote, n)) for n in remote_names)
    assert ds.table.stores[0].fetcher.bytes == fetched + os.path.getsize(os.path.join(remote, "index.json"))
    raw_names = {e["raw_data"]["basename"] for e in load_index(remote)["shards"]}
    assert shard_files(local) == raw_names  # keep_zip=False: the compressed files are gone
    assert ds.cache_usage == sum(os.path.getsize(os.path.join(local, n)) for n in raw_names) + os.path.getsize(
        os.path.join(local, "index.json"))
    assert [s["id"] for s in ds] == list(range(100))  # a second epoch reads the cache
    assert ds.table.stores[0].fetcher.files == n_shards + 1


def test_getitem_fetches_only_its_shard(tmp_path, make_dataset) -> None:
    """Random access to one sample downloads the one shard holding it, and nothing else."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    i = ids_of_shard(ds, 3)[2]
    check_sample(ds[i], i)
    assert ds.table.stores[0].fetcher.files == 2  # index + shard 3
    assert shard_files(local) == {ds.shards[3].raw_data.basename}
    j = ids_of_shard(ds, 3)[5]
    check_sample(ds[j], j)  # same shard: nothing more
    assert ds.table.stores[0].fetcher.files == 2


@pytest.mark.parametrize("shuffle", [False, True])
def test_rank_fetches_only_shards_with_its_samples(tmp_path, make_dataset, shuffle: bool) -> None:
    """A rank of a two-node world downloads exactly the shards its samples live in, a strict
    subset of the dataset; the two ranks together read every sample once."""
    remote = write_remote(make_dataset, tmp_path, n=160)
    seen: list[int] = []
    for node in (0, 1):
        local = str(tmp_path / f"cache{node}")
        ds = StreamingDataset(remote=url(remote), local=local, shuffle=shuffle)
        world = World(num_nodes=2, ranks_per_node=1, node=node, local_rank=0, num_workers=1, worker=0,
                      replication=1)
        got = list(ds.iterate(world))
        for s in got:
            check_sample(s, s["id"])
        ids = [s["id"] for s in got]
        seen += ids
        needed = {k for k in range(len(ds.shards)) if set(ids_of_shard(ds, k)) & set(ids)}
        assert len(needed) < len(ds.shards)
        assert shard_files(local) == {ds.shards[k].raw_data.basename for k in needed}
        assert ds.table.stores[0].fetcher.files == len(needed) + 1
    assert sorted(seen) == list(range(160))


def test_rank_from_environment_fetches_only_its_shards(tmp_path, make_dataset, monkeypatch) -> None:
    """The world read from RANK / WORLD_SIZE limits downloads the same way."""
    remote = write_remote(make_dataset, tmp_path, n=160)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    ids = [s["id"] for s in ds]
    assert len(ids) == 80
    needed = {k for k in range(len(ds.shards)) if set(ids_of_shard(ds, k)) & set(ids)}
    assert len(needed) < len(ds.shards)
    assert ds.table.stores[0].fetcher.files == len(needed) + 1


def test_second_dataset_on_same_local_downloads_nothing(tmp_path, make_dataset) -> None:
    """Another dataset object on a filled cache directory reads it without fetching anything,
    not even the index."""
    remote = write_remote(make_dataset, tmp_path, compression="zstd")
    local = str(tmp_path / "cache")
    first = StreamingDataset(remote=url(remote), local=local)
    assert len(list(first)) == 100
    second = StreamingDataset(remote=url(remote), local=local)
    got = list(second)
    for i, s in enumerate(got):
        check_sample(s, i)
    check_sample(second[57], 57)
    assert second.table.stores[0].fetcher.files == 0
    assert second.table.stores[0].fetcher.bytes == 0


# -- cache_limit ----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_cache_limit_bounds_usage_during_an_epoch(tmp_path, make_dataset, load_index,
                                                  compression: str | None) -> None:
    """With room for three shards, an unshuffled epoch never holds more than the limit plus one
    shard (measured by ``cache_usage`` and by the bytes on disk after every sample), evicts as
    it goes, and still yields every sample correctly."""
    remote = write_remote(make_dataset, tmp_path, n=200, compression=compression)
    n_shards = len(load_index(remote)["shards"])
    biggest = max(footprint(load_index, remote, k) for k in range(n_shards))
    local = str(tmp_path / "cache")
    index_bytes = os.path.getsize(os.path.join(remote, "index.json"))
    limit = index_bytes + 3 * biggest
    ds = StreamingDataset(remote=url(remote), local=local, cache_limit=limit)
    usage, on_disk = [], []
    got = []
    for s in ds:
        got.append(s)
        usage.append(ds.cache_usage)
        on_disk.append(disk_bytes(local))
    assert [s["id"] for s in got] == list(range(200))
    for i, s in enumerate(got):
        check_sample(s, i)
    assert max(usage) <= limit + biggest, (max(usage), limit, biggest)
    assert max(on_disk) <= limit + biggest
    assert ds.table.stores[0].fetcher.files >= n_shards + 1
    assert len(shard_files(local)) <= 4 < n_shards  # shards were evicted
    assert ds.cache_usage <= limit


@pytest.mark.parametrize("predownload", [None, 4])
def test_shard_beyond_the_limit_is_downloaded_once_per_pass(tmp_path, make_dataset, predownload) -> None:
    """When every other shard is in use, the shard the loop needs goes over the limit; it must
    stay until the loop has left it, not be deleted and fetched again for each chunk of samples.
    Here another dataset object holds shards 0..3 and the limit has room for four shards (the fewest
    a limit may hold), so shards 4..7 each go over the limit once: four downloads."""
    remote = write_remote(make_dataset, tmp_path, n=112)
    local = str(tmp_path / "cache")
    holder = StreamingDataset(remote=url(remote), local=local)
    assert len(holder.shards) == 8
    for k in range(ROOM):
        assert holder.prepare_shard(k)
        holder.table.pin(k)
    try:
        index_bytes = os.path.getsize(os.path.join(local, "index.json"))
        size = max(s.raw_data.bytes for s in holder.shards)
        limit = index_bytes + ROOM * size
        ds = StreamingDataset(remote=url(remote), local=local, cache_limit=limit, predownload=predownload)
        got = list(ds)
        for i, s in enumerate(got):
            check_sample(s, i)
        assert ds.cache_usage <= limit
        assert ds.table.stores[0].fetcher.files == 4, f"{ds.table.stores[0].fetcher.files} downloads of 4 shards"
    finally:
        for k in range(ROOM):
            holder.table.unpin(k)


def test_shards_pinned_ahead_by_another_reader_do_not_stretch_the_limit(tmp_path, make_dataset) -> None:
    """Two readers of one cache (two dataset objects: separate locks, as two processes have),
    with room for four shards, all held by reader A. Reader B needs shards 4..7 now, so each goes
    over the limit; reader A tries to pin each of them ahead (a prefetch pin, ``must=False``)
    while B uses it. The cache may exceed the limit by one shard per reader, no more: A's
    prefetch is refused while the cache is over, and B's finished shards do not pile up."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    probe = StreamingDataset(remote=url(remote), local=local)
    index_bytes = os.path.getsize(os.path.join(local, "index.json"))
    size = max(s.raw_data.bytes for s in probe.shards)
    limit = index_bytes + ROOM * size
    a = StreamingDataset(remote=url(remote), local=local, cache_limit=limit).table.stores[0]
    b = StreamingDataset(remote=url(remote), local=local, cache_limit=limit).table.stores[0]
    pinned = [k for k in range(ROOM) if a.pin(k)]
    assert pinned == [0, 1, 2, 3]
    peak = probe.cache_usage
    try:
        for k in (4, 5, 6, 7):
            assert b.pin(k)  # must: B's loop needs it now
            assert b.over(k)
            if a.pin(k, must=False):
                pinned.append(k)
            peak = max(peak, probe.cache_usage)
            b.unpin(k)
            peak = max(peak, probe.cache_usage)
        assert pinned == [0, 1, 2, 3]
    finally:
        for k in pinned:
            a.unpin(k)
    assert peak <= limit + 2 * size, f"usage reached {peak} bytes: the limit plus {(peak - limit) / size:g} shards"
    assert probe.cache_usage <= limit
    assert shard_files(local) == {probe.shards[k].raw_data.basename for k in range(ROOM)}


def test_loop_does_not_keep_other_processes_over_limit_shards(tmp_path, make_dataset) -> None:
    """Reader B (a cache object: its own locks, as another process has) holds shards 0..3,
    which fill the limit, and downloads each further shard beyond the limit just before reader A's
    shuffled loop reaches it, then leaves it. A meets every such shard already present. The cache
    may exceed the limit by one shard per reader; here it must stay within the limit plus two
    shards while A reads four of B's shards in one chunk: A's loop holds a present shard it
    pinned while the cache was over the limit only while it reads it, not for the whole chunk."""
    remote = write_remote(make_dataset, tmp_path, n=140)
    local = str(tmp_path / "cache")
    probe = StreamingDataset(remote=url(remote), local=local)
    index_bytes = os.path.getsize(os.path.join(local, "index.json"))
    size = max(s.raw_data.bytes for s in probe.shards)
    limit = index_bytes + ROOM * size
    options = {"shuffle": True, "shuffle_seed": 3, "predownload": 400}
    order = [s["id"] for s in StreamingDataset(remote=url(remote), local=str(tmp_path / "plan"), **options)]
    shard_of = {i: k for k in range(len(probe.shards)) for i in ids_of_shard(probe, k)}
    b = StreamingDataset(remote=url(remote), local=local, cache_limit=limit).table.stores[0]
    assert all(b.pin(k) for k in range(ROOM))
    a = StreamingDataset(remote=url(remote), local=local, cache_limit=limit, **options)
    samples = iter(a)
    seen: set[int] = set()
    peak = probe.cache_usage
    try:
        for i in order:
            k = shard_of[i]
            fresh = k not in seen and k >= ROOM
            if fresh:
                assert b.pin(k)  # must: B's loop needs it now
                assert b.over(k)
            check_sample(next(samples), i)
            if fresh:
                b.unpin(k)
                seen.add(k)
            peak = max(peak, probe.cache_usage)
            if len(seen) == 4:
                break
        assert len(seen) == 4
    finally:
        samples.close()
        for k in range(ROOM):
            b.unpin(k)
    assert peak <= limit + 2 * size, f"usage reached {peak} bytes: the limit plus {(peak - limit) / size:g} shards"


def test_room_granted_to_a_download_is_visible_to_other_processes(tmp_path, make_dataset) -> None:
    """Prefetch downloads (``must=False``) never take the cache over its limit, even when two
    processes make room at the same moment. Reader A is granted room for shard 0; before its
    download starts, reader B prefetches shards 1 to 4. With room for four shards, one of the
    five prefetches is refused: the room granted to A is reserved before the cache lock is
    released."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    probe = StreamingDataset(remote=url(remote), local=local)
    index_bytes = os.path.getsize(os.path.join(local, "index.json"))
    size = max(s.raw_data.bytes for s in probe.shards)
    limit = index_bytes + ROOM * size
    a = StreamingDataset(remote=url(remote), local=local, cache_limit=limit).table.stores[0]
    b = StreamingDataset(remote=url(remote), local=local, cache_limit=limit).table.stores[0]
    materialise = a._materialise
    got_b: list[bool] = []

    def b_meanwhile(i: int, *args) -> None:  # runs after A's room was granted, before A's download
        got_b.extend(b.pin(k, must=False) for k in range(1, ROOM + 1))
        materialise(i, *args)

    a._materialise = b_meanwhile
    got_a = a.pin(0, must=False)
    try:
        assert len(got_b) == ROOM
        assert probe.cache_usage <= limit, (
            f"prefetches granted: A {got_a}, B {got_b}; usage {probe.cache_usage} > limit {limit}")
        assert got_a and got_b == [True, True, True, False]
    finally:
        for cache, k, ok in [(a, 0, got_a)] + [(b, k + 1, ok) for k, ok in enumerate(got_b)]:
            if ok:
                cache.unpin(k)


def test_cache_limit_accepts_strings(tmp_path, make_dataset) -> None:
    """``cache_limit`` takes a human size such as "100kb"."""
    remote = write_remote(make_dataset, tmp_path)
    ds = StreamingDataset(remote=url(remote), local=str(tmp_path / "cache"), cache_limit="100kb")
    assert ds.cache_limit in (100_000, 102_400)
    assert len(list(ds)) == 100


def test_least_recently_used_shard_is_evicted_first(tmp_path, make_dataset, load_index) -> None:
    """When the cache is full, making room deletes the shard used longest ago: using shard 0
    again after 1, 2 and 3 makes shard 1 the victim, then shard 2, then shard 0."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    index_bytes = os.path.getsize(os.path.join(remote, "index.json"))
    size = max(footprint(load_index, remote, k) for k in range(8))
    ds = StreamingDataset(remote=url(remote), local=local, cache_limit=index_bytes + ROOM * size)
    name = [s.raw_data.basename for s in ds.shards]

    def use(k: int) -> None:
        assert ds.prepare_shard(k)
        time.sleep(0.03)  # file times have a resolution of a clock tick

    for k in (0, 1, 2, 3, 0):
        use(k)
    assert shard_files(local) == {name[0], name[1], name[2], name[3]}
    use(4)
    assert shard_files(local) == {name[0], name[2], name[3], name[4]}
    use(5)
    assert shard_files(local) == {name[0], name[3], name[4], name[5]}
    use(3)
    use(6)
    assert shard_files(local) == {name[3], name[4], name[5], name[6]}
    assert ds.cache_usage <= index_bytes + ROOM * size


def test_evict_shard_refuses_while_pinned(tmp_path, make_dataset) -> None:
    """evict_shard returns False and keeps the file while the shard is pinned, here or by
    another dataset object (its own lock), and deletes it once nobody holds it."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    path = os.path.join(local, ds.shards[0].raw_data.basename)
    assert ds.prepare_shard(0)
    before = ds.cache_usage
    ds.table.pin(0)
    assert ds.evict_shard(0) is False
    assert os.path.exists(path)
    ds.table.unpin(0)
    other = StreamingDataset(remote=url(remote), local=local)
    other.table.pin(0)
    try:
        assert ds.evict_shard(0) is False
        assert os.path.exists(path)
    finally:
        other.table.unpin(0)
    assert ds.evict_shard(0) is True
    assert not os.path.exists(path)
    assert ds.cache_usage == before - ds.shards[0].raw_data.bytes
    check_sample(ds[3], 3)  # random access downloads it again
    assert ds.evict_shard(0) is True  # evicting releases this dataset's own random-access pins
    assert not os.path.exists(path)


def test_evict_shard_without_remote_raises(tmp_path, make_dataset) -> None:
    """A dataset with no remote holds the only copy: evict_shard refuses with an error."""
    from shardstream.errors import InvalidArgumentError

    out = write_remote(make_dataset, tmp_path)
    ds = StreamingDataset(local=out)
    with pytest.raises(InvalidArgumentError):
        ds.evict_shard(0)
    assert ds.evict_coldest_shard() is None
    assert len(shard_files(out)) == len(ds.shards)


def test_evict_coldest_shard_returns_its_index(tmp_path, make_dataset) -> None:
    """evict_coldest_shard deletes shards in least-recently-used order, skips a pinned shard,
    returns each index, then None when nothing evictable is left."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    for k in (2, 0, 4, 1):
        assert ds.prepare_shard(k)
        time.sleep(0.03)
    ds.table.pin(0)
    try:
        assert ds.evict_coldest_shard() == 2
        assert ds.evict_coldest_shard() == 4  # 0 is colder but pinned
        assert ds.evict_coldest_shard() == 1
        assert ds.evict_coldest_shard() is None
        assert shard_files(local) == {ds.shards[0].raw_data.basename}
    finally:
        ds.table.unpin(0)
    assert ds.evict_coldest_shard() == 0
    assert shard_files(local) == set()


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_cache_limit_too_small_names_the_minimum(tmp_path, make_dataset, load_index,
                                                 compression: str | None) -> None:
    """A limit below four times the largest shard's footprint (raw + compressed bytes) is refused
    with a CacheLimitError (also a ValueError) giving that minimum; the minimum itself is accepted."""
    remote = write_remote(make_dataset, tmp_path, compression=compression)
    entries = load_index(remote)["shards"]
    need = ROOM * max(footprint(load_index, remote, k) for k in range(len(entries)))
    with pytest.raises(ValueError, match=r"Cache limit \(\d+ bytes\) is too low") as info:
        StreamingDataset(remote=url(remote), local=str(tmp_path / "cache"), cache_limit=need - 1)
    assert str(need) in str(info.value)
    with pytest.raises(CacheLimitError):
        StreamingDataset(remote=url(remote), local=str(tmp_path / "cache"), cache_limit="1kb")
    ds = StreamingDataset(remote=url(remote), local=str(tmp_path / "cache"), cache_limit=need)
    assert ds.prepare_shard(1)


def test_cache_limit_without_remote_warns(tmp_path, make_dataset, load_index) -> None:
    """cache_limit with no remote (or a remote that is the local directory) has no effect and
    says so with a UserWarning; no shard is ever deleted, even under a limit far below the dataset."""
    out = write_remote(make_dataset, tmp_path)
    with pytest.warns(UserWarning, match="cache_limit"):
        ds = StreamingDataset(local=out, cache_limit=10**9)
    assert len(list(ds)) == 100
    tight = ROOM * max(footprint(load_index, out, k) for k in range(len(ds.shards)))
    assert tight < sum(footprint(load_index, out, k) for k in range(len(ds.shards)))
    with pytest.warns(UserWarning, match="cache_limit"):
        assert len(list(StreamingDataset(remote=url(out), local=out, cache_limit=tight))) == 100
    assert len(shard_files(out)) == len(ds.shards)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamingDataset(remote=url(out), local=str(tmp_path / "cache"), cache_limit=10**9)


@pytest.mark.parametrize("keep_zip", [False, True])
def test_keep_zip(tmp_path, make_dataset, keep_zip: bool) -> None:
    """keep_zip=False deletes each compressed file once decompressed; keep_zip=True keeps it
    (and the usage counts both)."""
    remote = write_remote(make_dataset, tmp_path, compression="zstd")
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local, keep_zip=keep_zip)
    for i, s in enumerate(ds):
        check_sample(s, i)
    raw = {s.raw_data.basename for s in ds.shards}
    zips = {s.zip_data.basename for s in ds.shards}
    assert shard_files(local) == (raw | zips if keep_zip else raw)
    expected = sum(os.path.getsize(os.path.join(local, n)) for n in shard_files(local))
    assert ds.cache_usage == expected + os.path.getsize(os.path.join(local, "index.json"))


# -- damaged or missing remote files ----------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("validate_hash", ["xxh64", None])
def test_corrupt_remote_shard_raises_hash_mismatch(tmp_path, make_dataset, compression: str | None,
                                                   validate_hash: str | None) -> None:
    """A remote shard with one flipped byte (same size) is fetched twice, then refused with a
    HashMismatchError naming the file and both digests; nothing of it stays in the cache.
    Without validate_hash the recorded fast digest is checked all the same."""
    remote = write_remote(make_dataset, tmp_path, compression=compression, hashes=["sha256", "xxh64"])
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local, validate_hash=validate_hash)
    info = ds.shards[2].zip_data or ds.shards[2].raw_data
    rpath = os.path.join(remote, info.basename)
    with open(rpath, "r+b") as f:
        f.seek(info.bytes // 2)
        byte = f.read(1)
        f.seek(info.bytes // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(rpath, "rb") as f:
        got_digest = xxhash.xxh64(f.read()).hexdigest()
    want_digest = info.hashes["xxh64"]
    assert got_digest != want_digest
    with pytest.raises(HashMismatchError) as exc:
        ds[ids_of_shard(ds, 2)[0]]
    msg = str(exc.value)
    assert info.basename in msg
    assert got_digest in msg and want_digest in msg
    assert ds.table.stores[0].fetcher.files == 1 + 2  # index, then the shard twice
    assert not [n for n in cached_names(local) if n.startswith(ds.shards[2].raw_data.basename)
                or info.basename in n]
    check_sample(ds[ids_of_shard(ds, 1)[0]], ids_of_shard(ds, 1)[0])  # the other shards still work
    with pytest.raises(HashMismatchError, match=info.basename):
        list(StreamingDataset(remote=url(remote), local=local, validate_hash=validate_hash))


def test_missing_remote_shard_raises_download_error(tmp_path, make_dataset) -> None:
    """A shard missing on the remote is a DownloadError naming the file and its URL, and leaves
    no temp file behind."""
    remote = write_remote(make_dataset, tmp_path)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    name = ds.shards[1].raw_data.basename
    os.unlink(os.path.join(remote, name))
    with pytest.raises(DownloadError) as exc:
        ds[ids_of_shard(ds, 1)[0]]
    msg = str(exc.value)
    assert name in msg
    assert os.path.join(remote, name) in msg
    assert cached_names(local) == []
    with pytest.raises(DownloadError, match=name):
        list(ds)


# -- stale files -----------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_stale_temp_file_counted_then_cleared(tmp_path, make_dataset, load_index,
                                              compression: str | None) -> None:
    """A temp file left by a dead downloader counts as the shard's full footprint in the usage,
    and is deleted by the next download (or eviction) of that shard."""
    remote = write_remote(make_dataset, tmp_path, compression=compression)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    index_bytes = os.path.getsize(os.path.join(local, "index.json"))
    assert ds.cache_usage == index_bytes
    downloaded = (ds.shards[0].zip_data or ds.shards[0].raw_data).basename
    stale = os.path.join(local, f"{TMP_PREFIX}{downloaded}.99999.abcd1234")
    with open(stale, "wb") as f:
        f.write(b"partial")
    assert ds.cache_usage == index_bytes + footprint(load_index, remote, 0)
    assert ds.prepare_shard(0)
    assert not os.path.exists(stale)
    assert cached_names(local) == [ds.shards[0].raw_data.basename]
    check_sample(ds[0], 0)

    stale1 = os.path.join(local, f"{TMP_PREFIX}{ds.shards[1].raw_data.basename}.99999.0badf00d")
    open(stale1, "wb").close()
    assert ds.evict_shard(1) is True
    assert not os.path.exists(stale1)


def test_remote_rewritten_in_place_is_detected(tmp_path, make_dataset) -> None:
    """A remote rewritten with different data under the same shard names is noticed by the next
    dataset built on the cache: the stale shards are not read and every sample is the new one."""
    remote = write_remote(make_dataset, tmp_path, n=100, version=0)
    local = str(tmp_path / "cache")
    old = StreamingDataset(remote=url(remote), local=local)
    assert [s["id"] for s in old] == list(range(100))
    shutil.rmtree(remote)
    time.sleep(0.05)
    remote = write_remote(make_dataset, tmp_path, n=120, version=1, size_limit=3000)
    new = StreamingDataset(remote=url(remote), local=local)
    assert len(new) == 120
    got = list(new)
    assert [s["id"] for s in got] == list(range(120))
    for i, s in enumerate(got):
        check_sample(s, i, version=1)


@pytest.mark.parametrize("hashes", [["xxh64"], None])
def test_remote_rewritten_with_same_sizes_is_detected(tmp_path, make_dataset, hashes: list | None) -> None:
    """The same, when the new shards have exactly the sizes of the old ones (only the bytes
    differ): the cached copies of the old version must not be served."""
    remote = write_remote(make_dataset, tmp_path, version=0, hashes=hashes)
    local = str(tmp_path / "cache")
    assert len(list(StreamingDataset(remote=url(remote), local=local))) == 100
    shutil.rmtree(remote)
    time.sleep(0.05)
    remote = write_remote(make_dataset, tmp_path, version=1, hashes=hashes)
    new = StreamingDataset(remote=url(remote), local=local)
    for i, s in enumerate(new):
        check_sample(s, i, version=1)


# -- the default cache directory ---------------------------------------------------------------


def test_default_local_under_cache_dir(tmp_path, make_dataset, monkeypatch) -> None:
    """Without local=, a remote is cached in a directory under $SHARDSTREAM_CACHE_DIR that is the
    same for the same remote (so a second dataset downloads nothing) and differs for another."""
    root = tmp_path / "cache-root"
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(root))
    a = write_remote(make_dataset, tmp_path, subdir="a")
    b = write_remote(make_dataset, tmp_path, subdir="b", n=30)
    first = StreamingDataset(remote=url(a))
    assert os.path.dirname(first.local) == str(root)
    assert [s["id"] for s in first] == list(range(100))
    again = StreamingDataset(remote=url(a) + "/")
    assert again.local == first.local
    assert [s["id"] for s in again] == list(range(100))
    assert again.table.stores[0].fetcher.files == 0
    other = StreamingDataset(remote=url(b))
    assert other.local != first.local
    assert os.path.dirname(other.local) == str(root)
    assert [s["id"] for s in other] == list(range(30))
    assert sorted(os.listdir(root)) == sorted([os.path.basename(first.local), os.path.basename(other.local)])
