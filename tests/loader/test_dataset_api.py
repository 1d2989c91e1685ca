"""StreamingDataset's API at its edges: typed errors for bad arguments, the messages that name
documented methods, ``batches()`` on a shuffled dataset, and a dataset built without batch_size."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from shardstream import (
    IncompatibleStateError,
    InvalidArgumentError,
    MDSWriter,
    ShardstreamError,
    Stream,
    StreamingDataset,
    UnknownKeywordError,
    World,
)

N = 50


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("api") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "tokens": "ndarray:int32"}, size_limit=300) as writer:
        for i in range(N):
            writer.write({"id": i, "tokens": np.arange(i % 5 + 1, dtype=np.int32)})
    return out


# -- typed errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make,wrong,right", [
    (lambda p, kw: StreamingDataset(local=p, **kw), "shufle", "shuffle"),
    (lambda p, kw: StreamingDataset(local=p, **kw), "batchsize", "batch_size"),
    (lambda p, kw: Stream(local=p, **kw), "proportions", "proportion"),
    (lambda p, kw: MDSWriter(out=p + "-new", columns={"a": "int"}, **kw), "hash", "hashes"),
])
def test_unknown_keyword_names_the_closest(path, make, wrong, right):
    with pytest.raises(UnknownKeywordError) as info:
        make(path, {wrong: True})
    assert isinstance(info.value, ShardstreamError) and isinstance(info.value, TypeError)
    assert repr(wrong) in str(info.value) and f"did you mean {right!r}" in str(info.value)


def test_unknown_keyword_with_nothing_close_lists_the_keywords(path):
    with pytest.raises(UnknownKeywordError, match="the keywords it takes are: .*shuffle_seed"):
        StreamingDataset(local=path, zzz=1)


def test_subclass_keywords_pass_through(path):
    class Tagged(StreamingDataset):
        def __init__(self, *, tag: str, **kwargs):
            super().__init__(**kwargs)
            self.tag = tag

    assert Tagged(local=path, tag="x").tag == "x"
    with pytest.raises(UnknownKeywordError, match="'locl'; did you mean 'local'"):
        Tagged(locl=path, tag="x")


@pytest.mark.parametrize("size", [10**12, 2**30 + 1])
def test_huge_batch_size_is_refused_up_front(path, size):
    with pytest.raises(InvalidArgumentError, match=f"batch_size={size} is more samples than one step"):
        StreamingDataset(local=path, batch_size=size)
    with pytest.raises(InvalidArgumentError, match=f"batch_size={size} is more samples than one step"):
        StreamingDataset(local=path).batches(size)


@pytest.mark.parametrize("bad", [["a"], [1.5, 2.0], [[1, 2]]])
def test_get_batch_with_non_int_indices(path, bad):
    with pytest.raises(InvalidArgumentError, match="get_batch takes a 1-D sequence of int sample indices"):
        StreamingDataset(local=path).get_batch(bad)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_batches_names_the_bad_batch_size(path, bad):
    with pytest.raises(InvalidArgumentError, match=f"batch_size={bad!r} must be an int >= 1"):
        StreamingDataset(local=path).batches(bad)  # at the call, not at the first next()


def test_batches_without_any_batch_size(path):
    with pytest.raises(InvalidArgumentError, match="batches\\(\\) needs a batch_size"):
        StreamingDataset(local=path).batches()


# -- messages name the documented method ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_set_epoch_errors_name_set_epoch(path, bad):
    with pytest.raises(InvalidArgumentError) as info:
        StreamingDataset(local=path).set_epoch(bad)
    assert "set_epoch" in str(info.value) and "next_epoch" not in str(info.value)


def test_foreign_state_points_at_set_epoch(path):
    with pytest.raises(IncompatibleStateError) as info:
        StreamingDataset(local=path).load_state_dict({"epoch": 3, "sample_in_epoch": 40})
    assert "set_epoch" in str(info.value) and "next_epoch" not in str(info.value)


# -- batches() on a shuffled dataset follows the plan -------------------------------------------------

def test_shuffled_batches_follow_the_epoch_plan(path):
    world = World(ranks_per_node=2, local_rank=1)
    ds = StreamingDataset(local=path, shuffle=True, batch_size=4, world=world)
    got = [b["id"].tolist() for b in ds.batches(columns=["id"])]
    ref = StreamingDataset(local=path, shuffle=True, batch_size=4, world=world)
    want = [s["id"] for s in ref]
    assert [i for b in got for i in b] == want and all(len(b) == 4 for b in got)
    assert want != sorted(want)
    second = [i for b in ds.batches(4, columns=["id"]) for i in b["id"].tolist()]  # the next epoch
    assert second == [s["id"] for s in ref] and second != want


def test_shuffled_batches_refuse_another_batch_size_or_a_start(path):
    ds = StreamingDataset(local=path, shuffle=True, batch_size=4)
    with pytest.raises(InvalidArgumentError, match="batch_size=4 samples per device"):
        ds.batches(8)
    with pytest.raises(InvalidArgumentError, match="load_state_dict"):
        ds.batches(start=8)


def test_unshuffled_batches_scan_in_index_order(path):
    got = [b["id"].tolist() for b in StreamingDataset(local=path, batch_size=16).batches(start=4)]
    assert got == [list(range(4, 20)), list(range(20, 36)), list(range(36, 50))]


# -- a dataset built without batch_size ---------------------------------------------------------------

def test_missing_batch_size_on_several_ranks_warns_what_happens(path):
    ds = StreamingDataset(local=path, world=World(ranks_per_node=3))
    with pytest.warns(UserWarning, match="built without batch_size") as record:
        got = [s["id"] for s in ds]
    message = str(record[0].message)
    assert "1 sample(s) per rank x 3 rank(s)" in message and "an epoch of 50 samples is read as 51" in message
    assert "mosaicml-streaming refuses" in message and len(got) == 17
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(ds)  # said once


def test_missing_batch_size_in_one_process_stays_quiet(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [s["id"] for s in StreamingDataset(local=path)] == list(range(N))


def test_the_warning_leaves_the_plan_of_the_world_iterated_alone(path):
    world = World(num_nodes=2, node=1)  # not the world detected in this process (one node)
    quiet = StreamingDataset(local=path, batch_size=1)
    with pytest.warns(UserWarning, match="built without batch_size"):
        got = [s["id"] for s in StreamingDataset(local=path).iterate(world)]
    assert got == [s["id"] for s in quiet.iterate(world)]
