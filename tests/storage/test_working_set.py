"""A cache_limit smaller than what a shuffled reader needs at once warns, once, with the limit that
streams each shard once."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.engine.working_set import working_set

SHARDS = 20


@pytest.fixture
def remote(http_server):
    out = os.path.join(http_server.root, "data")
    with MDSWriter(out=out, columns={"id": "int", "p": "bytes"}, size_limit=1 << 12, hashes=[]) as w:
        for i in range(SHARDS * 40):
            w.write({"id": i, "p": bytes(80)})
    return f"{http_server.url}/data"


def _epoch(ds, samples=None) -> list:
    """The working-set warnings of reading an epoch (its first ``samples`` only, if given)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = iter(ds)
        ids = [s["id"] for _, s in zip(range(samples or len(ds) * 2), it)]
        it.close()
    if samples is None:
        assert sorted(set(ids)) == list(range(len(ds)))
    return [w for w in caught if "working set" in str(w.message)]


def _downloads(http_server) -> int:
    return sum(n for path, n in http_server.faults.requests.items() if "shard." in path)


def test_small_limit_with_shuffle_warns_once_with_the_limit_to_use(http_server, remote, tmp_path):
    probe = StreamingDataset(remote=remote, local=str(tmp_path / "probe"))
    assert len(probe.shards) == SHARDS
    shard = max(s.raw_data.bytes for s in probe.shards)
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "small"), cache_limit=4 * shard, shuffle=True,
                          batch_size=8)
    http_server.faults.clear()
    caught = _epoch(ds, 200)
    assert len(caught) == 1 and _downloads(http_server) > 2 * SHARDS  # the thrash the warning is about, early on
    msg = str(caught[0].message)
    assert f"cache_limit={4 * shard} bytes" in msg
    need = int(re.search(r"raise cache_limit to at least (\d+) bytes", msg).group(1))
    assert need > 4 * shard
    assert _epoch(ds, 1) == []  # once per dataset

    http_server.faults.clear()
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "enough"), cache_limit=need, shuffle=True, batch_size=8)
    assert _epoch(ds) == []
    assert _downloads(http_server) == SHARDS  # with the advised limit, each shard is fetched once


def test_the_same_limit_warns_only_for_a_shuffled_order(http_server, remote, tmp_path):
    probe = StreamingDataset(remote=remote, local=str(tmp_path / "probe"))
    shard = max(s.raw_data.bytes for s in probe.shards)
    limit = 4 * shard + os.path.getsize(tmp_path / "probe" / "index.json")
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "c"), cache_limit=limit, batch_size=8)
    http_server.faults.clear()
    assert _epoch(ds) == []
    assert _downloads(http_server) == SHARDS
    shuffled = StreamingDataset(remote=remote, local=str(tmp_path / "s"), cache_limit=limit, batch_size=8, shuffle=True)
    assert len(_epoch(shuffled, 1)) == 1


def test_no_warning_without_limit(remote, tmp_path):
    assert _epoch(StreamingDataset(remote=remote, local=str(tmp_path / "c"), shuffle=True, batch_size=8)) == []


def test_working_set_counts_shards_between_their_samples_and_ahead():
    sizes = np.array([10, 20, 5, 5])
    order = np.array([0, 1, 0, 1, 2, 2, 3, 3])
    assert working_set(order, 0, sizes, True) == (2, 30)  # shards 0 and 1 interleaved
    assert working_set(order, 2, sizes, True) == (3, 35)  # ... while shard 2 is downloaded ahead
    assert working_set(np.repeat([0, 1, 2, 3], 5), 0, sizes, True) == (1, 20)  # sequential: one at a time
    assert working_set(order[:4], 0, sizes, False) == (2, 30)  # a prefix: reuse in its first half counts
