"""AsyncDataLoader: batches made ahead in a thread, a state that counts only what the loop took."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import InvalidArgumentError


def test_batches_state_and_resume(jsonl_dir):
    def make():
        return ss.AsyncDataLoader(ss.StreamingDataset(local=jsonl_dir), batch_size=8, prefetch_buffer_size=3,
                                  shuffle_buffer_size=50, seed=3, drop_last=True)
    full = [b["id"].tolist() for b in make()]
    assert all(len(b) == 8 for b in full) and len(full) == 600 // 8
    first = make()
    it = iter(first)
    head = [next(it)["id"].tolist() for _ in range(17)]
    assert isinstance(head, list) and head == full[:17]
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = make()
    again.load_state_dict(state)
    assert head + [b["id"].tolist() for b in again] == full


def test_sources_formats_and_bad_arguments(jsonl_dir):
    source = ss.JsonShardedSource(f"{jsonl_dir}/*.jsonl")
    batch = next(iter(ss.AsyncDataLoader(source, batch_size=4, prefetch_enabled=False)))
    assert isinstance(batch["id"], np.ndarray) and batch["id"].shape == (4,)
    chain = ss.StreamingDataset(local=jsonl_dir).filter(lambda r: r["id"] % 2 == 0)
    assert all(i % 2 == 0 for b in ss.AsyncDataLoader(chain, batch_size=16) for i in b["id"].tolist())
    with pytest.raises(InvalidArgumentError, match="prefetch_buffer_size"):
        ss.AsyncDataLoader(chain, prefetch_buffer_size=0)
    with pytest.raises(InvalidArgumentError, match="AsyncDataLoader reads"):
        ss.AsyncDataLoader([1, 2, 3])


def test_errors_reach_the_loop(jsonl_dir):
    def boom(row):
        raise RuntimeError("no")
    loader = ss.AsyncDataLoader(ss.StreamingDataset(local=jsonl_dir).map(boom), batch_size=4)
    with pytest.raises(ss.TransformError, match="no"):
        next(iter(loader))
