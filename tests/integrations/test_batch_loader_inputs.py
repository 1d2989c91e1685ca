"""BatchLoader over each way in: a StreamingDataset, a processing chain (filter + pack, filter + a batched map)
and a sharded source, with real threads; each resumes exactly from a state taken mid-epoch while the thread
has batches made ahead."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import shardstream as ss
from shardstream import BatchLoader, InvalidArgumentError, World
from shardstream.testing.datasets import write_text_rows

BS = 8


@pytest.fixture(scope="module")
def rows_dir(tmp_path_factory) -> str:
    return write_text_rows(tmp_path_factory.mktemp("rows"))  # 600 rows of {"id", "text"} in three files


def keep(row) -> bool:
    return row["id"] % 3 != 0


def tokens(batch) -> dict:
    """Row ``id`` as tokens ``100 * id + [0, words)``: a packed row's tokens say where they came from."""
    return {"input_ids": [np.arange(len(t.split()), dtype=np.int32) + 100 * i
                          for t, i in zip(batch["text"], batch["id"])]}


def doubled(batch) -> dict:
    """A batched map that changes the row count: rows whose id is even come twice."""
    ids = [i for i in batch["id"] for _ in range(1 + (i % 2 == 0))]
    return {"id": ids, "half": [i // 2 for i in ids]}


def dataset(rows_dir, **kwargs):
    return ss.StreamingDataset(local=rows_dir, batch_size=BS, shuffle=True, shuffle_seed=7, **kwargs)


def filter_pack(rows_dir):
    return (dataset(rows_dir).filter(keep).map(tokens, batched=True, batch_size=16, remove_columns=["id", "text"])
            .pack(seq_len=24))


def filter_batched_map(rows_dir):
    return dataset(rows_dir).shuffle(seed=2, buffer_size=40).filter(keep).map(doubled, batched=True, batch_size=10,
                                                                              remove_columns=["text"])


def source(rows_dir):
    return ss.JsonShardedSource(f"{rows_dir}/*.jsonl")


def record(batch) -> list:
    """What a batch holds, comparable across runs: ids, or the packed tokens."""
    if "input_ids" in batch:
        return np.asarray(batch["input_ids"]).ravel().tolist()
    return np.asarray(batch["id"]).tolist()


def straight_then_resumed(make, stop: int):
    """The straight run's batches, and those of a run stopped after ``stop`` batches (its state taken once the
    thread has made batches ahead) then continued by a new loader that loads the state."""
    full = [record(b) for b in make()]
    first = make()
    head = []
    for j, batch in enumerate(first):
        head.append(record(batch))
        if j + 1 == stop:
            time.sleep(0.2)  # the thread fills its queue: batches made and not consumed
            break
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = make()
    again.load_state_dict(state)
    return full, head + [record(b) for b in again]


def test_over_a_dataset_the_steps_of_the_plan(rows_dir):
    want = [b["id"].tolist() for b in dataset(rows_dir).iterate_batches()]
    assert [b["id"].tolist() for b in BatchLoader(dataset(rows_dir), prefetch=3)] == want
    full, resumed = straight_then_resumed(lambda: BatchLoader(dataset(rows_dir), prefetch=4), 5)
    assert resumed == full and len(full) == 600 // BS


@pytest.mark.parametrize("chain", [filter_pack, filter_batched_map], ids=["filter-pack", "filter-batched-map"])
def test_over_a_chain_its_rows_in_numpy_batches_and_exact_resume(rows_dir, chain):
    rows = list(chain(rows_dir))
    got = list(BatchLoader(chain(rows_dir), prefetch=3))
    assert all(isinstance(v, np.ndarray) for b in got for v in b.values())
    assert [len(next(iter(b.values()))) for b in got[:-1]] == [BS] * (len(got) - 1) and set(got[0]) == set(rows[0])
    flat = [x for b in got for x in record(b)]
    if chain is filter_pack:
        assert all(np.asarray(b["input_ids"]).shape[1:] == (24,) for b in got)
        assert flat == [int(x) for r in rows for x in np.asarray(r["input_ids"]).ravel()]
    else:
        assert flat == [r["id"] for r in rows] and all(i % 3 for i in flat)
    full, resumed = straight_then_resumed(lambda: BatchLoader(chain(rows_dir), prefetch=4), 4)
    assert resumed == full and len(full) > 4


def test_over_a_chain_every_epoch_and_a_resume_after_one(rows_dir):
    loader = BatchLoader(filter_batched_map(rows_dir), prefetch=2)
    epochs = [[record(b) for b in loader] for _ in range(2)]
    assert epochs[0] and epochs[0] != epochs[1]  # the next pass is the next epoch (another order)
    end = BatchLoader(filter_batched_map(rows_dir))
    for _ in end:
        pass
    state = json.loads(json.dumps(end.state_dict()))
    assert state["complete"] and state["epoch"] == 0
    later = BatchLoader(filter_batched_map(rows_dir))
    later.load_state_dict(state)
    assert [record(b) for b in later] == epochs[1]


def test_over_a_chain_batch_size_columns_and_world(rows_dir):
    rows = list(dataset(rows_dir).filter(keep))
    got = list(BatchLoader(ss.StreamingDataset(local=rows_dir).filter(keep), batch_size=5, columns=["id"]))
    assert all(list(b) == ["id"] for b in got) and [len(b["id"]) for b in got[:-1]] == [5] * (len(got) - 1)
    assert sorted(i for b in got for i in b["id"].tolist()) == sorted(r["id"] for r in rows)
    batched = BatchLoader(dataset(rows_dir).filter(keep).batch(3))  # a chain of batches keeps its batches
    assert {len(b["id"]) for b in list(batched)[:-1]} == {3}
    halves = [[i for b in BatchLoader(dataset(rows_dir).filter(keep), world=World(num_nodes=2, node=n))
               for i in b["id"].tolist()] for n in (0, 1)]
    assert not set(halves[0]) & set(halves[1]) and sorted(halves[0] + halves[1]) == sorted(r["id"] for r in rows)
    with pytest.raises(TypeError, match="no len"):
        len(BatchLoader(dataset(rows_dir).filter(keep)))
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        BatchLoader(ss.StreamingDataset(local=rows_dir).filter(keep))


def test_over_a_source_the_dataset_of_its_files(rows_dir):
    want = [b["id"].tolist() for b in source(rows_dir).dataset(batch_size=BS).iterate_batches()]
    got = [b["id"].tolist() for b in BatchLoader(source(rows_dir), batch_size=BS)]
    assert got == want and len(got) == 600 // BS
    full, resumed = straight_then_resumed(lambda: BatchLoader(source(rows_dir), batch_size=BS, prefetch=4), 6)
    assert resumed == full
    with pytest.raises(InvalidArgumentError, match="batch_size="):
        BatchLoader(source(rows_dir))


def test_a_chain_loader_stops_its_thread_and_keeps_stats(rows_dir):
    import threading

    def threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "shardstream-batches")

    before = threads()
    loader = BatchLoader(filter_pack(rows_dir), stats=True)
    for j, _ in enumerate(loader):
        if j == 2:
            break
    deadline = time.monotonic() + 5
    while threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads() == before
    report = loader.stats()
    assert report["loader"] == "BatchLoader" and report["total"]["batches"] == 3
    assert list(report["total"]["per_worker"]) == ["thread"]
