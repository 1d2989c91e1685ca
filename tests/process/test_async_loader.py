"""AsyncDataLoader: batches made ahead in a thread, a state that counts only what the loop took."""

from __future__ import annotations

import json
import time

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


def _tokens(batch):
    return {"input_ids": [np.arange(len(t.split()), dtype=np.int32) + 100 * i
                          for t, i in zip(batch["text"], batch["id"])]}


def _record(batch) -> list:
    return np.asarray(batch["input_ids"] if "input_ids" in batch else batch["id"]).ravel().tolist()


def _resumed(make, stop: int) -> tuple[list, list]:
    """The straight run's batches, and a run stopped after ``stop`` batches (its state taken with batches made
    ahead) continued by a new loader."""
    full = [_record(b) for b in make()]
    first = make()
    it = iter(first)
    head = [_record(next(it)) for _ in range(stop)]
    time.sleep(0.2)  # the thread fills its buffer
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = make()
    again.load_state_dict(state)
    return full, head + [_record(b) for b in again]


def test_a_filtered_packed_chain_resumes_exactly(jsonl_dir):
    def make():
        chain = (ss.StreamingDataset(local=jsonl_dir).filter(lambda r: r["id"] % 3 != 0)
                 .map(_tokens, batched=True, batch_size=16, remove_columns=["id", "text"]).pack(seq_len=24))
        return ss.AsyncDataLoader(chain, batch_size=4, prefetch_buffer_size=3, shuffle_buffer_size=10, seed=1)
    full, resumed = _resumed(make, 5)
    assert len(full) > 5 and all(len(b) == 4 * 24 for b in full[:-1])
    assert resumed == full


def test_a_source_resumes_exactly_and_set_epoch(jsonl_dir):
    def make():
        return ss.AsyncDataLoader(ss.JsonShardedSource(f"{jsonl_dir}/*.jsonl"), batch_size=8, prefetch_buffer_size=4)
    full, resumed = _resumed(make, 9)
    assert resumed == full and sorted(i for b in full for i in b) == sorted(
        r["id"] for r in ss.StreamingDataset(local=jsonl_dir))
    loader = make()
    next(iter(loader))
    loader.set_epoch(0)  # the pass in progress is dropped: the state is epoch 0's start again
    assert loader.state_dict()["epoch"] == 0 and not loader.state_dict()["complete"]
    assert [_record(b) for b in loader] == full


def test_prefetch_off_makes_batches_in_the_loop_and_resumes(jsonl_dir):
    def make():
        return ss.AsyncDataLoader(ss.StreamingDataset(local=jsonl_dir).filter(lambda r: r["id"] % 2 == 0),
                                  batch_size=8, prefetch_enabled=False)
    full, resumed = _resumed(make, 3)
    assert resumed == full


def test_a_transformed_source_reads_with_its_transforms_and_resumes(jsonl_dir):
    source = ss.JsonShardedSource(f"{jsonl_dir}/*.jsonl")
    kept = source.map(lambda r: {"id": r["id"], "words": len(r["text"].split())}).filter(lambda r: r["words"] > 3)
    direct = [(r["id"], r["words"]) for r in kept]  # the source's own rows, transformed, in file order

    def make():
        return ss.AsyncDataLoader(kept, batch_size=8, format=None)
    full = [list(zip(b["id"], b["words"])) for b in make()]
    assert sorted(p for b in full for p in b) == sorted(direct) and 0 < len(direct) < 600
    assert all(set(b) == {"id", "words"} for b in make())  # the transform's row, not the file's columns
    first = make()
    it = iter(first)
    head = [list(zip(*next(it).values())) for _ in range(5)]
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    del it
    again = make()
    again.load_state_dict(state)
    assert head + [list(zip(b["id"], b["words"])) for b in again] == full


def test_an_expanding_transform_of_a_source_makes_its_rows_through_the_loader(jsonl_dir):
    def twice(row):
        return [{"id": row["id"], "copy": 0}, {"id": row["id"], "copy": 1}]
    twice.is_expand = True
    source = ss.TransformedShardedSource(ss.JsonShardedSource(f"{jsonl_dir}/*.jsonl"), twice)
    rows = [(i, c) for b in ss.AsyncDataLoader(source, batch_size=7, format=None) for i, c in zip(b["id"], b["copy"])]
    assert sorted(rows) == sorted((i, c) for i in {r["id"] for r in source} for c in (0, 1)) and len(rows) == 1200


def test_a_transform_of_a_source_without_a_dataset_is_refused_by_the_loader():
    class Listed(ss.ShardedSource):
        shard_names = ["a"]

        def open_shard_at_row(self, shard_name, row):
            return iter([{"id": 1}][row:])
    with pytest.raises(ss.errors.NotYetSupportedError, match="Listed cannot be read through a loader"):
        ss.AsyncDataLoader(Listed().filter(bool))


def test_a_source_transform_that_returns_no_row_is_named_by_the_loader(jsonl_dir):
    ids = ss.JsonShardedSource(f"{jsonl_dir}/*.jsonl").map(lambda r: r["id"])
    loader = ss.AsyncDataLoader(ids, batch_size=4)
    with pytest.raises(ss.TransformError, match="must return rows .* got int"):
        next(iter(loader))
    loader.close()
