"""StreamingDataset: sizes, indexing, iteration, splits, options, pickling."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from shardstream import (
    IndexNotFoundError,
    InvalidArgumentError,
    MDSWriter,
    Stream,
    SampleIndexError,
    ShardstreamError,
    StreamingDataset,
    UnsafeEncodingError,
)


@pytest.fixture
def ds_and_samples(tmp_path, mixed, make_dataset):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, size_limit=1024)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) > 3  # several shards, so indexing crosses shard boundaries
    return ds, samples


def test_len_size_and_iteration_order(ds_and_samples, assert_same_sample):
    ds, samples = ds_and_samples
    assert len(ds) == ds.size == ds.num_samples == len(samples)
    got = list(ds)
    assert len(got) == len(samples)
    for g, w in zip(got, samples):
        assert_same_sample(g, w)
    assert [s["id"] for s in ds] == list(range(len(samples)))  # iterating twice works
    assert ds.column_names == ("id", "score", "text", "tokens")
    assert sum(s.samples for s in ds.shards) == len(samples)


def test_int_and_negative_indexing(ds_and_samples, assert_same_sample):
    ds, samples = ds_and_samples
    n = len(samples)
    for i in range(n):
        assert_same_sample(ds[i], samples[i])
    for i in range(1, n + 1):
        assert_same_sample(ds[-i], samples[n - i])
    assert_same_sample(ds[np.int64(7)], samples[7])
    assert_same_sample(ds[np.uint16(3)], samples[3])
    assert_same_sample(ds.get_item(11), samples[11])
    assert_same_sample(ds.get_item(-2), samples[n - 2])


@pytest.mark.parametrize("bad", [60, 61, 10**12, -61, -(10**12)])
def test_out_of_range(ds_and_samples, bad):
    ds, _ = ds_and_samples
    with pytest.raises(SampleIndexError) as info:
        ds[bad]
    assert isinstance(info.value, IndexError) and isinstance(info.value, ShardstreamError)
    with pytest.raises(SampleIndexError):
        ds.get_item(bad)
    with pytest.raises(SampleIndexError):
        ds[[0, bad]]
    with pytest.raises(SampleIndexError):
        ds[np.array([bad])]


def test_slices(ds_and_samples, same):
    ds, samples = ds_and_samples
    for sl in (slice(None), slice(5, 25), slice(None, None, 7), slice(-10, None), slice(50, 10, -3),
               slice(100, 200), slice(3, 3), slice(None, None, -1)):
        got = ds[sl]
        assert isinstance(got, list)
        assert same(got, samples[sl]), sl


def test_lists_arrays_and_masks(ds_and_samples, same):
    ds, samples = ds_and_samples
    idx = [3, 59, 0, 3, -1, 30]
    assert same(ds[idx], [samples[i] for i in idx])
    arr = np.array([10, 2, 44], np.int32)
    assert same(ds[arr], [samples[i] for i in arr])
    assert same(ds[np.array([], np.int64)], [])
    assert same(ds[[]], [])
    mask = np.zeros(len(samples), bool)
    mask[[1, 4, 33, 59]] = True
    assert same(ds[mask], [samples[i] for i in (1, 4, 33, 59)])
    assert same(ds[mask.tolist()], [samples[i] for i in (1, 4, 33, 59)])
    with pytest.raises(SampleIndexError):
        ds[np.ones(5, bool)]


@pytest.mark.parametrize("bad", [1.5, "3", [1.0, 2.0], np.array([[1, 2]]), None, {"a": 1}])
def test_invalid_index_types(ds_and_samples, bad):
    ds, _ = ds_and_samples
    with pytest.raises((InvalidArgumentError, SampleIndexError)):
        ds[bad]


def test_split_subdirectory(tmp_path, make_dataset):
    make_dataset(tmp_path / "root", {"x": "int"}, [{"x": i} for i in range(5)], subdir="train")
    make_dataset(tmp_path / "root", {"x": "int"}, [{"x": -i} for i in range(3)], subdir="val")
    root = str(tmp_path / "root")
    assert [s["x"] for s in StreamingDataset(local=root, split="train")] == [0, 1, 2, 3, 4]
    assert [s["x"] for s in StreamingDataset(local=root, split="val")] == [0, -1, -2]
    with pytest.raises(IndexNotFoundError) as info:
        StreamingDataset(local=root)
    assert "index.json" in str(info.value)
    with pytest.raises(IndexNotFoundError):
        StreamingDataset(local=root, split="test")


def test_local_is_required():
    with pytest.raises(InvalidArgumentError):
        StreamingDataset()


def test_pkl_needs_allow_unsafe_types(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"obj": "pkl", "i": "int"}, [{"obj": {"k": (1, 2)}, "i": 0}])
    with pytest.raises(UnsafeEncodingError) as info:
        StreamingDataset(local=out)
    assert "obj" in str(info.value) and "allow_unsafe_types" in str(info.value)
    ds = StreamingDataset(local=out, allow_unsafe_types=True)
    assert ds[0] == {"obj": {"k": (1, 2)}, "i": 0}


def test_streams_and_local_together_are_refused(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}])
    with pytest.raises(InvalidArgumentError, match="either streams"):
        StreamingDataset(local=out, streams=[Stream(local=out)])


def test_epoch_size_on_one_dataset_resamples_it(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(10)])
    ds = StreamingDataset(local=out, epoch_size="25")
    got = sorted(s["a"] for s in ds)
    assert len(got) == 25 and all(got.count(i) in (2, 3) for i in range(10))


def test_remote_equal_to_local_is_allowed(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}])
    assert len(StreamingDataset(local=out, remote=out)) == 1


@pytest.mark.parametrize("kwargs", [
    {"shuffle_algo": "bogus"}, {"batch_size": 0}, {"batch_size": -3}, {"batch_size": 2.5},
    {"partition_algo": "x"}, {"sampling_method": "y"}, {"batching_method": "z"}, {"download_retry": -1},
    {"download_timeout": 0}, {"predownload": -1}, {"num_canonical_nodes": 0}, {"shuffle_block_size": 0},
    {"sampling_granularity": 0}, {"shuffle_seed": "seed"}, {"batch_size": True},
])
def test_invalid_option_values(tmp_path, make_dataset, kwargs):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}])
    with pytest.raises(InvalidArgumentError) as info:
        StreamingDataset(local=out, **kwargs)
    assert next(iter(kwargs)) in str(info.value)


def test_valid_mosaic_keywords_are_accepted(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}])
    ds = StreamingDataset(local=out, split=None, download_retry=0, download_timeout=5, keep_zip=True,
                          predownload=4, sampling_method="fixed", partition_algo="orig", num_canonical_nodes=2,
                          batch_size=8, shuffle=False, shuffle_algo="py1s", shuffle_seed=1,
                          shuffle_block_size=100, batching_method="stratified", allow_unsafe_types=False)
    assert ds[0] == {"a": 1} and ds.batch_size == 8


def test_dataset_is_picklable(ds_and_samples, assert_same_sample):
    ds, samples = ds_and_samples
    ds[0]
    ds[len(ds) - 1]  # readers are open
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == len(samples)
    for got, want in zip(clone, samples):
        assert_same_sample(got, want)
    assert_same_sample(clone[-1], samples[-1])
    fresh = pickle.loads(pickle.dumps(StreamingDataset(local=ds.local)))
    assert_same_sample(fresh[5], samples[5])


def test_batch_size_default_for_batches(tmp_path, make_dataset):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": i} for i in range(10)])
    ds = StreamingDataset(local=out, batch_size=4)
    assert [b["a"].tolist() for b in ds.batches()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(InvalidArgumentError):
        next(StreamingDataset(local=out).batches())


def test_tilde_in_local_is_expanded(tmp_path, make_dataset, monkeypatch):
    make_dataset(tmp_path, {"a": "int"}, [{"a": 9}], subdir="home/ds")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert StreamingDataset(local="~/ds")[0] == {"a": 9}


def test_empty_dataset(tmp_path):
    with MDSWriter(out=str(tmp_path / "e"), columns={"a": "int"}):
        pass
    with pytest.raises(RuntimeError, match="Stream contains no samples"):  # refused, as mosaicml-streaming does
        StreamingDataset(local=str(tmp_path / "e"))


def test_sample_values_are_independent_of_access_path(tmp_path, make_dataset, same):
    rng = np.random.default_rng(5)
    samples = [{"v": rng.standard_normal(int(rng.integers(1, 50))).astype(np.float32), "k": i} for i in range(300)]
    out = make_dataset(tmp_path, {"v": "ndarray:float32", "k": "int64"}, samples, size_limit=3000)
    ds = StreamingDataset(local=out)
    by_iter = list(ds)
    by_index = [ds[i] for i in range(len(ds))]
    by_slice = ds[:]
    assert same(by_iter, by_index) and same(by_index, by_slice)
    for got, want in zip(by_index, samples):
        assert np.array_equal(got["v"], want["v"]) and got["k"] == want["k"]


def test_relative_local_path(tmp_path, make_dataset, monkeypatch):
    out = make_dataset(tmp_path, {"a": "int"}, [{"a": 1}])
    monkeypatch.chdir(tmp_path)
    assert StreamingDataset(local="ds")[0] == {"a": 1}
    assert os.path.isdir(out)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_scalar_columns_keep_their_full_range(tmp_path, make_dataset, dtype):
    info = np.iinfo(dtype)
    values = [int(info.min), int(info.max), 0, 1, int(info.max) // 3]
    out = make_dataset(tmp_path, {"v": dtype}, [{"v": v} for v in values])
    ds = StreamingDataset(local=out)
    got = [ds[i]["v"] for i in range(len(values))]
    assert [type(g) for g in got] == [np.dtype(dtype).type] * len(values)
    assert [int(g) for g in got] == values
    assert [int(s["v"]) for s in ds] == values
    assert ds.get_batch(range(len(values)))["v"].tolist() == values
