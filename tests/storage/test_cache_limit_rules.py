"""The rules a ``cache_limit`` must meet before anything is read, in the order they are checked:

1. above the index files every stream keeps in its directory ("Minimum cache usage"),
2. at least four times the largest shard of any stream, raw and compressed bytes together,
3. in a mixture with several cached streams, each stream's share (the limit split by size) holds one shard
   in use plus the next one arriving; a direct :class:`ShardCache` checks that last rule for itself.

Each refusal is a :class:`CacheLimitError`, also a ``ValueError``, raised whether a stream has a remote or not.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from shardstream import MDSWriter, Stream, StreamingDataset
from shardstream.errors import CacheLimitError
from shardstream.storage.cache import ShardCache

COLUMNS = {"id": "int", "blob": "bytes"}


def write(out, n: int = 120, width: int = 100, size_limit: int = 2048, compression=None) -> str:
    with MDSWriter(out=str(out), columns=COLUMNS, size_limit=size_limit, compression=compression, hashes=[]) as w:
        for i in range(n):
            w.write({"id": i, "blob": bytes([i % 251]) * width})
    return str(out)


def largest(ds: StreamingDataset) -> int:
    """The largest shard's raw plus compressed bytes, as its index entry gives them."""
    return max(s.raw_data.bytes + (s.zip_data.bytes if s.zip_data else 0) for s in ds.shards)


@pytest.mark.parametrize("compression", [None, "zstd:7"])
def test_four_times_the_largest_shard_is_the_least_accepted(tmp_path, compression):
    remote = write(tmp_path / "remote", compression=compression)
    probe = StreamingDataset(remote=remote, local=str(tmp_path / "probe"), batch_size=1)
    need = 4 * largest(probe)
    with pytest.raises(ValueError, match=rf"Cache limit \({need - 1} bytes\) is too low\. Increase the "
                                         rf"`cache_limit` to at-least four times the largest shard size "
                                         rf"\({need // 4} bytes\)") as info:
        StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1, cache_limit=need - 1)
    assert isinstance(info.value, CacheLimitError) and f"at least {need} bytes" in str(info.value)
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1, cache_limit=need)
    assert [s["id"] for s in ds] == list(range(120))
    assert ds.cache_usage <= need


def test_the_index_rule_is_checked_first(tmp_path):
    remote = write(tmp_path / "remote")
    index = os.path.getsize(os.path.join(remote, "index.json"))
    probe = StreamingDataset(remote=remote, local=str(tmp_path / "probe"), batch_size=1)
    assert index < 4 * largest(probe)  # both rules refuse this limit; the index one speaks
    with pytest.raises(CacheLimitError, match=r"Minimum cache usage"):
        StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1, cache_limit=index)


def test_a_limit_without_remote_meets_the_same_rules_then_has_no_effect(tmp_path):
    out = write(tmp_path / "data")
    before = sorted(os.listdir(out))
    probe = StreamingDataset(local=out, batch_size=1)
    need = 4 * largest(probe)
    with pytest.raises(ValueError, match=r"Cache limit \(\d+ bytes\) is too low"):
        StreamingDataset(local=out, batch_size=1, cache_limit=need - 1)
    with pytest.raises(ValueError, match=r"Minimum cache usage"):
        StreamingDataset(local=out, batch_size=1, cache_limit=10)
    with pytest.warns(UserWarning, match="has no effect"):
        ds = StreamingDataset(local=out, batch_size=1, cache_limit=need)
    assert [s["id"] for s in ds] == list(range(120))
    assert sorted(os.listdir(out)) == before  # the only copies: nothing evicted


def test_the_largest_shard_of_any_stream_counts(tmp_path):
    small = write(tmp_path / "small", n=60, width=40, size_limit=512)
    big = write(tmp_path / "big", n=20, width=1500, size_limit=1 << 13)
    big_shard = largest(StreamingDataset(local=big, batch_size=1))
    assert big_shard > 4 * largest(StreamingDataset(local=small, batch_size=1))
    streams = [Stream(remote=small, local=str(tmp_path / "c1")), Stream(local=big)]
    with pytest.raises(CacheLimitError, match=rf"largest shard size \({big_shard} bytes\)"):
        StreamingDataset(streams=streams, batch_size=1, cache_limit=4 * big_shard - 1)
    ds = StreamingDataset(streams=streams, batch_size=1, cache_limit=4 * big_shard)
    assert sorted(s["id"] for s in ds) == sorted(list(range(60)) + list(range(20)))


def test_a_small_streams_share_can_be_stricter_than_four_shards(tmp_path):
    """Two cached streams of the same shard size, one with a tenth of the bytes: four times the largest
    shard passes the first two rules, but the small stream's share is less than two of its shards."""
    small = write(tmp_path / "small", n=400, size_limit=1 << 14)
    big = write(tmp_path / "big", n=4000, size_limit=1 << 14)
    streams = [Stream(remote=small, local=str(tmp_path / "c1")), Stream(remote=big, local=str(tmp_path / "c2"))]
    fewest = 4 * largest(StreamingDataset(local=big, batch_size=1))
    with pytest.raises(CacheLimitError, match=r"too small for 2 streams with a remote.* at least (\d+) bytes") as info:
        StreamingDataset(streams=streams, batch_size=1, cache_limit=fewest)
    need = int(str(info.value).split("at least ")[1].split()[0])
    assert need > fewest
    ds = StreamingDataset(streams=streams, batch_size=1, cache_limit=need)
    assert len(list(ds)) == 4400


def test_a_shard_cache_made_directly_needs_one_shard_in_use_plus_the_next(tmp_path):
    remote = write(tmp_path / "remote")
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1)
    cache = ds.table.stores[0]
    need = cache.minimum_limit()
    with pytest.raises(CacheLimitError, match=rf"one shard in use plus the next .* at least {need} bytes"):
        ShardCache(cache.dirname, cache.shards, cache.fetcher, limit=need - 1)
    assert ShardCache(cache.dirname, cache.shards, cache.fetcher, limit=need).limit == need


def test_mosaicml_streaming_draws_the_same_line(tmp_path):
    """The real mosaicml-streaming refuses the limit just below ours and accepts ours, on our shards."""
    from tests.interop.conftest import PEER_STUBS, peer_env, peer_python

    remote = write(tmp_path / "remote", compression="zstd:7")
    need = 4 * largest(StreamingDataset(remote=remote, local=str(tmp_path / "probe"), batch_size=1))
    script = (
        "import sys\n"
        "from streaming import StreamingDataset\n"
        "remote, need = sys.argv[1], int(sys.argv[2])\n"
        "for k, limit in enumerate((need - 1, need)):\n"
        "    try:\n"
        "        StreamingDataset(remote=remote, local=sys.argv[3] + str(k), batch_size=1, cache_limit=limit)\n"
        "        print(limit, 'accepted')\n"
        "    except ValueError as e:\n"
        "        print(limit, 'refused', str(e).split('.')[0])\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    assert PEER_STUBS.is_dir()
    proc = subprocess.run([peer_python(), "-c", script, remote, str(need), str(tmp_path / "peer")],
                          env=peer_env(tmp), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines() == [f"{need - 1} refused Cache limit ({need - 1} bytes) is too low",
                                        f"{need} accepted"]


@pytest.mark.parametrize("none", [None, 0])
def test_a_zero_limit_is_no_limit(tmp_path, none):
    remote = write(tmp_path / "remote")
    ds = StreamingDataset(remote=remote, local=str(tmp_path / f"cache{none}"), batch_size=1, cache_limit=none)
    assert ds.cache_limit is None
    assert sum(1 for _ in ds) == 120
    with pytest.raises(CacheLimitError, match="Minimum cache usage"):  # a string '0' is a limit of 0 bytes
        StreamingDataset(remote=remote, local=str(tmp_path / "cache-str"), batch_size=1, cache_limit="0")
