"""Mixed datasets whose streams live on a real (moto) S3 server, next to a stream read in place:
the same epochs as local copies, one cache directory per stream, ``cache_limit`` shared among the
remote streams, and download errors that name the stream's shard and URL."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
import xxhash

from shardstream import InvalidArgumentError, MDSWriter, Stream, StreamingDataset
from shardstream.errors import CacheLimitError, DownloadError
from shardstream.plan import World
from shardstream.testing import write_dataset

SIZES = {"a": 80, "b": 50, "c": 60}
COMPRESSION = {"a": "zstd", "b": None, "c": "zstd"}


def _payload(tag: str, i: int) -> bytes:
    return np.random.default_rng([ord(tag), i]).integers(0, 256, 40 + i % 40, dtype=np.uint8).tobytes()


def _samples(tag: str):
    return ({"id": i, "src": f"stream-{tag}", "payload": _payload(tag, i)} for i in range(SIZES[tag]))


def _keys(samples) -> list[tuple[str, int]]:
    out = []
    for s in samples:
        tag = s["src"].removeprefix("stream-")
        assert s["payload"] == _payload(tag, s["id"]), f"sample {s['id']} of stream {tag} has wrong bytes"
        out.append((tag, s["id"]))
    return out


def _index(dirname: str) -> list[dict]:
    with open(os.path.join(dirname, "index.json")) as f:
        return json.load(f)["shards"]


def _footprints(dirname: str) -> list[int]:
    """Bytes each shard takes in a cache at its peak (compressed and decompressed files together)."""
    return [s["raw_data"]["bytes"] + (s["zip_data"]["bytes"] if s.get("zip_data") else 0) for s in _index(dirname)]


def _minimum(dirname: str) -> int:
    """The smallest cache that streams this dataset (one shard in use plus one arriving)."""
    return max(s["raw_data"]["bytes"] for s in _index(dirname)) + max(_footprints(dirname))


def _disk(dirname: str) -> int:
    """Bytes of the index and the shard files in ``dirname``, downloads in progress included (the
    bookkeeping under ``.shardstream`` aside; a file renamed meanwhile is skipped)."""
    total = 0
    for name in os.listdir(dirname):
        if name != ".shardstream":
            try:
                total += os.path.getsize(os.path.join(dirname, name))
            except FileNotFoundError:
                pass
    return total


@pytest.fixture
def sources(tmp_path) -> dict[str, str]:
    columns = {"id": "int", "src": "str", "payload": "bytes"}
    out = {tag: write_dataset(tmp_path / "src" / tag, columns, _samples(tag), size_limit=600,
                              compression=COMPRESSION[tag], hashes=["xxh64"]) for tag in SIZES}
    for tag, path in out.items():
        assert len(_index(path)) >= 4, tag
    return out


@pytest.fixture
def remotes(s3_server, s3_bucket, sources) -> dict[str, str]:
    """Streams a and b uploaded to S3 (c stays local only)."""
    out = {}
    for tag in "ab":
        out[tag] = f"{s3_bucket}/data/{tag}"
        s3_server.upload_dir(sources[tag], out[tag])
    return out


def _mixture(sources, remotes=None, cache=None, options=None, stream_kwargs=None, **kwargs) -> StreamingDataset:
    """a : b : c = 1 : 2 : 1 over 160 samples (a and b from S3 when ``remotes`` is given)."""
    stream_kwargs = stream_kwargs or {}
    streams = []
    for tag, weight in zip("abc", (1, 2, 1)):
        if remotes is not None and tag in remotes:
            stream = Stream(remote=remotes[tag], local=os.path.join(cache, tag), proportion=weight,
                            **stream_kwargs.get(tag, {}))
        else:
            stream = Stream(local=sources[tag], proportion=weight, **stream_kwargs.get(tag, {}))
        streams.append(stream)
    kwargs.setdefault("shuffle", True)
    kwargs.setdefault("batch_size", 4)
    return StreamingDataset(streams=streams, epoch_size=160, storage_options=options, **kwargs)


def test_remote_streams_give_the_epochs_of_local_copies(s3_server, sources, remotes, tmp_path):
    local = _mixture(sources)
    remote = _mixture(sources, remotes, str(tmp_path / "cache"), s3_server.storage_options)
    for epoch in range(2):
        want = _keys(local)
        assert len(want) == 160
        assert _keys(remote) == want, f"epoch {epoch}"
    assert remote.stream_counts(0).tolist() == [40, 80, 40]
    # random access reaches every stream too
    assert _keys([remote[0], remote[len(remote) - 1]]) == [("a", 0), ("c", SIZES["c"] - 1)]


def test_remote_streams_on_several_ranks(s3_server, sources, remotes, tmp_path):
    want = _keys(_mixture(sources, num_canonical_nodes=2))
    got = []
    for node in range(2):
        ds = _mixture(sources, remotes, str(tmp_path / f"cache{node}"), s3_server.storage_options,
                      batch_size=2, num_canonical_nodes=2)
        got.append(_keys(ds.iterate(World(num_nodes=2, node=node))))
    merged = [k for step in range(len(got[0]) // 2) for rank in got for k in rank[step * 2:step * 2 + 2]]
    assert merged == want


def test_each_remote_stream_caches_only_its_own_shards(s3_server, sources, remotes, tmp_path):
    cache = str(tmp_path / "cache")
    ds = _mixture(sources, remotes, cache, s3_server.storage_options)
    list(ds)
    assert sorted(os.listdir(cache)) == ["a", "b"]
    for tag in "ab":
        digests = {s["raw_data"]["basename"]: s["raw_data"]["hashes"]["xxh64"] for s in _index(sources[tag])}
        files = [f for f in os.listdir(os.path.join(cache, tag)) if f.startswith("shard.")]
        assert set(files) == set(digests), tag  # decompressed shards only (keep_zip=False)
        for name in files:
            with open(os.path.join(cache, tag, name), "rb") as f:
                data = f.read()
            assert xxhash.xxh64(data).hexdigest() == digests[name], f"{tag}/{name} is not stream {tag}'s shard"
            others = [t for t in SIZES if t != tag]
            assert f"stream-{tag}".encode() in data and not any(f"stream-{t}".encode() in data for t in others)
    # the local-only stream is read in place: its directory holds its own files only
    own = {s[k]["basename"] for s in _index(sources["c"]) for k in ("raw_data", "zip_data")} | {"index.json"}
    assert {f for f in os.listdir(sources["c"]) if not f.startswith(".")} <= own


def test_remote_streams_without_local_get_a_cache_directory_each(s3_server, sources, remotes, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "root"))
    ds = StreamingDataset(streams=[Stream(remote=remotes["a"], proportion=1), Stream(remote=remotes["b"], proportion=2),
                                   Stream(local=sources["c"], proportion=1)],
                          epoch_size=160, shuffle=True, batch_size=4, storage_options=s3_server.storage_options)
    assert _keys(ds) == _keys(_mixture(sources))
    dirs = sorted(os.listdir(tmp_path / "root"))
    assert len(dirs) == 2
    for tag in "ab":
        mine = [d for d in dirs if f"-{tag}-" in d]
        assert len(mine) == 1, dirs
        with open(tmp_path / "root" / mine[0] / "index.json") as f:
            assert json.load(f)["shards"] == _index(sources[tag])


def _through_loader(ds, context: str) -> list[tuple[str, int]]:
    from shardstream import StreamingDataLoader

    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=context)
    got = []
    for batch in loader:
        got.extend(zip([s.removeprefix("stream-") for s in batch["src"]], [int(i) for i in batch["id"]]))
    return got


def test_cached_streams_through_forked_dataloader_workers(sources, tmp_path):
    """Streams a and b copied into per-stream caches from another directory (a remote on the local
    filesystem), under a cache_limit, read by two forked workers."""
    pytest.importorskip("torch")
    ds = _mixture(sources, {tag: sources[tag] for tag in "ab"}, str(tmp_path / "cache"), cache_limit="1mb")
    assert _through_loader(ds, "fork") == _keys(_mixture(sources))
    assert sorted(os.listdir(tmp_path / "cache")) == ["a", "b"]


def test_remote_streams_through_forked_dataloader_workers(s3_server, sources, remotes, tmp_path):
    """Workers forked after the index was read through s3fs (DataLoader's default on Linux) open their
    own filesystem: an async filesystem made in the parent refuses to run in a forked child."""
    pytest.importorskip("torch")
    ds = _mixture(sources, remotes, str(tmp_path / "cache"), s3_server.storage_options, download_retry=0)
    assert _through_loader(ds, "fork") == _keys(_mixture(sources))


def test_two_remotes_sharing_one_local_directory(tmp_path):
    """Two streams from different places cannot share a cache directory: their shards have the same
    names, so one stream's samples would be read from the other's files."""
    remotes = {}
    for tag, n in (("x", 40), ("y", 25)):  # same layout, so the shards of both have the same sizes
        remotes[tag] = str(tmp_path / tag)
        with MDSWriter(out=remotes[tag], columns={"id": "int", "src": "str"}, size_limit=250) as w:
            for i in range(n):
                w.write({"id": i, "src": tag})
    cache = str(tmp_path / "cache")
    try:
        ds = StreamingDataset(streams=[Stream(remote=remotes[tag], local=cache) for tag in "xy"],
                              download_timeout=1, download_retry=0)
    except InvalidArgumentError as exc:  # refusing, naming the directory, would do
        assert cache in str(exc)
        return
    got = sorted((s["src"], s["id"]) for s in ds)
    assert got == sorted([("x", i) for i in range(40)] + [("y", i) for i in range(25)])


def test_stream_keep_zip_overrides_the_dataset(s3_server, sources, remotes, tmp_path):
    cache = str(tmp_path / "cache")
    ds = _mixture(sources, remotes, cache, s3_server.storage_options, stream_kwargs={"a": {"keep_zip": True}})
    list(ds)
    zipped = {s["zip_data"]["basename"] for s in _index(sources["a"])}
    assert zipped <= set(os.listdir(os.path.join(cache, "a")))


def test_remote_stream_takes_the_dataset_split(s3_server, s3_bucket, sources, tmp_path):
    s3_server.upload_dir(sources["a"], f"{s3_bucket}/root/train")
    ds = StreamingDataset(streams=[Stream(remote=f"{s3_bucket}/root", local=str(tmp_path / "cache")),
                                   Stream(local=os.path.dirname(sources["b"]), split="b")],
                          split="train", storage_options=s3_server.storage_options)
    assert sorted(_keys(ds)) == sorted([("a", i) for i in range(SIZES["a"])] + [("b", i) for i in range(SIZES["b"])])
    assert os.path.exists(tmp_path / "cache" / "train" / "index.json")


def test_cache_limit_is_split_among_the_remote_streams(s3_server, sources, remotes, tmp_path):
    cache = str(tmp_path / "cache")
    fp = {tag: sum(_footprints(sources[tag])) for tag in "ab"}  # the local stream c takes no share
    total = sum(fp.values())
    index = {tag: os.path.getsize(os.path.join(sources[tag], "index.json")) for tag in "ab"}
    # each stream's share (split by size) has room for its index and about four shards
    limit = max(-(-(index[tag] + 2 * _minimum(sources[tag])) * total // fp[tag]) for tag in "ab")
    share = {tag: limit * fp[tag] // total for tag in "ab"}
    biggest = {tag: max(_footprints(sources[tag])) for tag in "ab"}
    want = _keys(_mixture(sources))
    ds = _mixture(sources, remotes, cache, s3_server.storage_options, cache_limit=limit)
    got, usage, per_dir = [], [], {"a": [], "b": []}
    for s in ds:
        got.append(s)
        usage.append(ds.cache_usage)
        for tag in "ab":
            per_dir[tag].append(_disk(os.path.join(cache, tag)))

    assert _keys(got) == want
    assert max(usage) <= limit + sum(biggest.values()), (max(usage), limit)
    for tag in "ab":  # each stream keeps to its own share (plus one shard beyond it, at worst)
        assert max(per_dir[tag]) <= share[tag] + biggest[tag], (tag, max(per_dir[tag]), share[tag])
    assert ds.cache_usage <= limit
    cached = {tag: [f for f in os.listdir(os.path.join(cache, tag)) if f.startswith("shard.")] for tag in "ab"}
    assert any(len(cached[tag]) < len(_index(sources[tag])) for tag in "ab")  # shards were evicted


def test_cache_limit_without_remote_streams_warns(sources):
    with pytest.warns(UserWarning, match="no stream has a remote"):
        _mixture(sources, cache_limit="1mb")


def test_a_too_small_cache_limit_is_refused(s3_server, sources, remotes, tmp_path):
    with pytest.raises(CacheLimitError, match="cache_limit"):
        _mixture(sources, remotes, str(tmp_path / "cache"), s3_server.storage_options, cache_limit=3000)


def test_the_minimum_named_by_a_cache_limit_error_is_enough(s3_server, sources, remotes, tmp_path):
    """Each error names the limit as given (not a stream's share of it) and the least that is enough: over
    the cached indexes ("Minimum cache usage (N bytes)"), then the smallest limit whose shares are all
    enough ("at least N bytes"); the limit it names is accepted at last, one byte less is not."""
    limit, cache = 3000, str(tmp_path / "cache")
    for _ in range(3):
        try:
            _mixture(sources, remotes, cache, s3_server.storage_options, cache_limit=limit)
            break
        except CacheLimitError as exc:
            text = str(exc)
            assert f"cache limit ({limit} bytes)" in text or f"cache_limit={limit} " in text
            usage = re.search(r"Minimum cache usage \((\d+) bytes\)", text)
            limit = int(usage.group(1)) + 1 if usage else int(re.search(r"at least (\d+) bytes", text).group(1))
            if not usage:
                with pytest.raises(CacheLimitError):
                    _mixture(sources, remotes, str(tmp_path / "cache2"), s3_server.storage_options, cache_limit=limit - 1)
    else:
        pytest.fail(f"cache_limit={limit} is still refused")


def test_a_missing_shard_is_named_with_its_streams_url(s3_server, sources, remotes, tmp_path):
    s3_server.filesystem().rm(f"{remotes['b']}/shard.00002.mds")
    ds = _mixture(sources, remotes, str(tmp_path / "cache"), s3_server.storage_options)
    with pytest.raises(DownloadError, match="does not exist") as info:
        list(ds)
    msg = str(info.value)
    assert "shard.00002.mds" in msg and f"{remotes['b']}/shard.00002.mds" in msg, msg
    assert remotes["a"] + "/" not in msg


@pytest.fixture
def http_remotes(http_server, sources) -> dict[str, str]:
    """Streams a and b served over HTTP (no client-side retries below shardstream's own)."""
    out = {}
    for tag in "ab":
        shutil.copytree(sources[tag], os.path.join(http_server.root, tag))
        out[tag] = f"{http_server.url}/{tag}"
    return out


def test_download_knobs_are_per_stream(http_server, sources, http_remotes, tmp_path):
    """Two failures of one shard of each remote stream: stream a retries (the dataset's
    download_retry=2), stream b is told not to, so the epoch fails on b's shard."""
    http_server.faults.add("/a/shard.00001", "503", "503")
    http_server.faults.add("/b/shard.00003", "503", "503")
    ds = _mixture(sources, http_remotes, str(tmp_path / "cache"), download_retry=2,
                  stream_kwargs={"b": {"download_retry": 0}})
    with pytest.raises(DownloadError) as info:
        list(ds)
    msg = str(info.value)
    assert f"{http_remotes['b']}/shard.00003.mds" in msg and "failed 1 time(s): HTTP 503 x1" in msg, msg

    http_server.faults.clear()
    http_server.faults.add("/a/shard.00001", "503", "503")
    http_server.faults.add("/b/shard.00003", "503", "503")
    ok = _mixture(sources, http_remotes, str(tmp_path / "cache2"), download_retry=2)
    assert _keys(ok) == _keys(_mixture(sources))
    assert http_server.faults.pending() == 0
    assert len(http_server.faults.hits) == 4


def test_a_streams_download_retry_rescues_it_alone(http_server, sources, http_remotes, tmp_path):
    http_server.faults.add("/b/shard.00002", "503", "503")
    ds = _mixture(sources, http_remotes, str(tmp_path / "cache"), download_retry=0,
                  stream_kwargs={"b": {"download_retry": 2}})
    assert _keys(ds) == _keys(_mixture(sources))
    assert http_server.faults.pending() == 0
