"""Loader stats over processing chains: AsyncDataLoader and StreamingDataLoader over a chain.

The stats add up to what the chain hands out, a slow map is named as the slowest stage, a loop slower
than the chain hardly waits, resume stays exact with stats on, and stats off refuse to report.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import InvalidArgumentError, StatsDisabledError
from shardstream.testing import write_dataset
from shardstream.testing.servers import RangeHTTPServer


def slow(row):
    time.sleep(0.002)
    return {"words": len(row["text"].split())}


def keep(row):
    return row["id"] % 5 != 0


def slow_chain(jsonl_dir):
    return ss.StreamingDataset(local=jsonl_dir).map(slow).filter(keep)


def pipeline_loader(chain, **kwargs):
    pytest.importorskip("torch")
    return ss.StreamingDataLoader(chain, batch_size=8, num_workers=2, **kwargs)


def async_loader(chain, **kwargs):
    return ss.AsyncDataLoader(chain, batch_size=8, prefetch_buffer_size=2, **kwargs)


LOADERS = [pipeline_loader, async_loader]


def ids(batch) -> list:
    return np.asarray(batch["id"]).tolist()


@pytest.mark.parametrize("make", LOADERS, ids=["pipeline", "async"])
def test_stats_add_up_and_name_a_slow_map(jsonl_dir, make):
    expected = sum(1 for _ in slow_chain(jsonl_dir))  # the chain's own output
    assert expected == 480
    loader = make(slow_chain(jsonl_dir), stats=True)
    delivered = sum(len(ids(b)) for b in loader)
    report = loader.stats()
    total = report["total"]
    assert delivered == expected == total["samples"]
    assert total["batches"] == -(-expected // 8)
    assert report["slowest_stage"] == "transform"
    assert total["stages"]["transform"] > 0.5 * 600 * 0.002  # every row's sleep, in some worker
    assert sum(w["batches"] for w in total["per_worker"].values()) == total["batches"]
    timeline = loader.stats_timeline()
    assert len(timeline["t"]) == total["batches"] and timeline["rows"].sum() == expected
    assert "transform" in str(report)
    json.dumps(dict(report))  # plain data


def test_workers_and_the_prefetch_thread_are_the_workers(jsonl_dir):
    pipe = pipeline_loader(slow_chain(jsonl_dir), stats=True)
    for _ in pipe:
        pass
    assert sorted(pipe.stats()["total"]["per_worker"]) == ["w0", "w1"]
    threaded = async_loader(slow_chain(jsonl_dir), stats=True)
    for _ in threaded:
        pass
    report = threaded.stats()
    assert list(report["total"]["per_worker"]) == ["thread"] and report["prefetch_depth"] <= 2
    inline = async_loader(slow_chain(jsonl_dir), stats=True, prefetch_enabled=False)
    for _ in inline:
        pass
    assert list(inline.stats()["total"]["per_worker"]) == ["main"]
    assert inline.stats()["slowest_stage"] == "transform"


@pytest.mark.parametrize("make", LOADERS, ids=["pipeline", "async"])
def test_a_loop_slower_than_the_chain_hardly_waits(jsonl_dir, make):
    loader = make(ss.StreamingDataset(local=jsonl_dir).map(lambda r: {"n": len(r["text"])}), stats=True)
    batches = 0
    for _ in loader:
        time.sleep(0.03)  # the training step, far longer than making a batch of 8 rows
        batches += 1
    report = loader.stats()
    # 600 rows of 8: the thread's one reader makes 75 batches; two DataLoader workers are dealt 300 rows each
    # and each ends with its own short batch: 2 x 38
    assert report["total"]["batches"] == batches == (76 if make is pipeline_loader else 75)
    assert report["total"]["stall_fraction"] < 0.2
    assert not report["stalled"]


def test_pack_and_batch_are_timed(jsonl_dir):
    def tokens(batch):
        return {"input_ids": [np.arange(3 * len(t.split()), dtype=np.int32) for t in batch["text"]]}

    chain = (ss.StreamingDataset(local=jsonl_dir).map(tokens, batched=True, batch_size=16, remove_columns=["text"])
             .pack(seq_len=64))
    expected = sum(1 for _ in chain)
    loader = async_loader(chain, stats=True, format=None)
    delivered = sum(len(b["input_ids"]) for b in loader)
    stages = loader.stats()["total"]["stages"]
    assert delivered == expected == loader.stats()["total"]["samples"]
    assert stages["transform"] > 0 and stages["collate"] > 0


@pytest.mark.parametrize("make", LOADERS, ids=["pipeline", "async"])
def test_resume_is_exact_with_stats_on(jsonl_dir, make):
    def chain():
        return ss.StreamingDataset(local=jsonl_dir).shuffle(seed=5, buffer_size=50).map(slow)

    full = [ids(b) for b in make(chain(), stats=True)]
    first = make(chain(), stats=True)
    it = iter(first)
    head = [ids(next(it)) for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    assert first.stats()["total"]["batches"] == 7
    del it
    again = make(chain(), stats=True)
    again.load_state_dict(state)
    rest = [ids(b) for b in again]
    assert head + rest == full
    assert again.stats()["total"]["batches"] == len(full) - 7


@pytest.mark.parametrize("make", LOADERS, ids=["pipeline", "async"])
def test_stats_off_refuse_to_report(jsonl_dir, make, monkeypatch):
    monkeypatch.delenv("SHARDSTREAM_STATS", raising=False)
    loader = make(ss.StreamingDataset(local=jsonl_dir).as_iterable())
    next(iter(loader))
    with pytest.raises(StatsDisabledError, match="stats=True"):
        loader.stats()
    with pytest.raises(StatsDisabledError):
        loader.stats_timeline()
    with pytest.raises(InvalidArgumentError, match="stats="):
        make(ss.StreamingDataset(local=jsonl_dir).as_iterable(), stats="yes")
    monkeypatch.setenv("SHARDSTREAM_STATS", "1")
    on = make(ss.StreamingDataset(local=jsonl_dir).as_iterable())
    assert type(on).__name__ in ("StreamingDataLoader", "AsyncDataLoader")
    assert sum(len(ids(b)) for b in on) == on.stats()["total"]["samples"] == 600


def test_a_chain_over_a_remote_dataset_shows_downloads(tmp_path):
    src = write_dataset(tmp_path / "src", {"id": "int", "text": "str"},
                        ({"id": i, "text": "w " * (i % 7)} for i in range(400)), size_limit=1 << 11)
    with RangeHTTPServer(src) as server:
        server.faults.latency_s = 0.02  # every request answered late: the reader waits for shards
        ds = ss.StreamingDataset(remote=server.url, local=str(tmp_path / "cache"))
        loader = async_loader(ds.map(lambda r: {"n": len(r["text"])}), stats=True)
        delivered = sum(len(ids(b)) for b in loader)
    total = loader.stats()["total"]
    assert delivered == total["samples"] == 400
    shards = len([f for f in (tmp_path / "src").iterdir() if f.suffix == ".mds"])
    assert total["files_fetched"] >= shards > 1 and total["bytes_fetched"] > 0
    assert total["cache_misses"] >= shards
    assert total["stages"]["download_wait"] > 0 and total["stages"]["download"] > 0
