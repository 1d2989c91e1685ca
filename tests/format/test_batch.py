"""Column batches (get_batch / batches / decode_batch) against per-sample decoding."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream import InvalidArgumentError, Ragged, SampleIndexError, StreamingDataset
from shardstream.format.batch import decode_batch


def rows(column):
    """A batch column as a list of per-sample values (Ragged rows, array rows or list items)."""
    if isinstance(column, Ragged):
        return column.tolist()
    if isinstance(column, np.ndarray):
        return list(column)
    assert isinstance(column, list)
    return column


def assert_batch_matches(ds, batch, indices, same, columns=None):
    names = list(ds.column_names) if columns is None else list(columns)
    assert sorted(batch) == sorted(names)
    for name in names:
        got = rows(batch[name])
        assert len(got) == len(indices), name
        for k, i in enumerate(indices):
            want = ds[int(i)][name]
            g = got[k]
            if isinstance(want, np.ndarray):
                assert isinstance(g, np.ndarray) and g.dtype == want.dtype and g.shape == want.shape, (name, k)
                assert np.array_equal(g, want), (name, k)
            elif isinstance(want, (np.generic, int, float)) and isinstance(g, np.generic):
                assert g == want, (name, k)
            else:
                assert same(g, want), (name, k)


@pytest.fixture
def rich(tmp_path, make_dataset):
    rng = np.random.default_rng(11)
    samples = []
    for i in range(120):
        # lengths below and above 256 so the ragged column mixes shape widths (u1 and u2)
        n = int(rng.choice([1, 5, 255, 256, 300, 700]))
        d0, d1 = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        samples.append({
            "id": i,
            "label": np.uint8(i % 7),
            "score": float(rng.standard_normal()),
            "emb": rng.standard_normal((2, 3)).astype(np.float32),
            "tokens": rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int64).astype(np.int32),
            "grid": rng.integers(0, 100, (d0, d1)).astype(np.int16),
            "any": rng.standard_normal(int(rng.integers(1, 5))).astype(["float32", "int64"][i % 2]),
            "text": f"t{i}" * (i % 4),
            "blob": bytes([i % 256]) * (i % 3),
            "meta": {"i": i, "even": i % 2 == 0},
        })
    columns = {"id": "int", "label": "uint8", "score": "float64", "emb": "ndarray:float32:2,3",
               "tokens": "ndarray:int32", "grid": "ndarray:int16", "any": "ndarray", "text": "str",
               "blob": "bytes", "meta": "json"}
    out = make_dataset(tmp_path, columns, samples, size_limit=16 * 1024)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) >= 4
    return ds, samples


def test_column_types(rich):
    ds, samples = rich
    b = ds.get_batch(range(10))
    assert isinstance(b["id"], np.ndarray) and b["id"].dtype == np.int64 and b["id"].shape == (10,)
    assert b["id"].tolist() == list(range(10))
    assert b["label"].dtype == np.uint8 and b["label"].tolist() == [i % 7 for i in range(10)]
    assert b["score"].dtype == np.float64 and np.array_equal(b["score"], [s["score"] for s in samples[:10]])
    assert b["emb"].shape == (10, 2, 3) and b["emb"].dtype == np.float32
    assert np.array_equal(b["emb"], np.stack([s["emb"] for s in samples[:10]]))
    assert isinstance(b["tokens"], Ragged) and b["tokens"].values.dtype == np.int32
    assert isinstance(b["grid"], Ragged) and b["grid"].shapes.shape == (10, 2)
    assert b["text"] == [s["text"] for s in samples[:10]]
    assert b["blob"] == [s["blob"] for s in samples[:10]]
    assert b["meta"] == [s["meta"] for s in samples[:10]]


def test_ragged_api(rich):
    ds, samples = rich
    idx = list(range(0, 40))
    tok = ds.get_batch(idx, columns=["tokens"])["tokens"]
    want = [samples[i]["tokens"] for i in idx]
    lengths = [len(w) for w in want]
    assert {len(w) < 256 for w in want} == {True, False}
    assert len(tok) == len(idx)
    assert tok.lengths.tolist() == lengths
    assert tok.offsets.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    assert np.array_equal(tok.values, np.concatenate(want))
    for k in range(len(idx)):
        assert np.array_equal(tok[k], want[k])
    assert all(np.array_equal(a, b) for a, b in zip(tok.tolist(), want))
    padded = tok.to_padded(pad_value=-7)
    assert padded.shape == (len(idx), max(lengths)) and padded.dtype == np.int32
    for k, w in enumerate(want):
        assert np.array_equal(padded[k, :len(w)], w) and (padded[k, len(w):] == -7).all()
    short = tok.to_padded(length=3)
    assert short.shape == (len(idx), 3)
    for k, w in enumerate(want):
        assert short[k, :min(3, len(w))].tolist() == w[:3].tolist()
        assert (short[k, len(w):] == 0).all()


def test_ragged_negative_index_is_the_last_row():
    r = Ragged(np.arange(6), np.array([0, 2, 5, 6]))
    assert r[2].tolist() == [5]
    assert r[-1].tolist() == [5]
    assert r[-3].tolist() == [0, 1]


def test_multidim_ragged_shapes(rich):
    ds, samples = rich
    idx = [5, 3, 90, 17]
    grid = ds.get_batch(idx, columns=["grid"])["grid"]
    assert isinstance(grid, Ragged)
    assert grid.shapes.tolist() == [list(samples[i]["grid"].shape) for i in idx]
    for k, i in enumerate(idx):
        assert grid[k].shape == samples[i]["grid"].shape and np.array_equal(grid[k], samples[i]["grid"])
    assert grid.lengths.tolist() == [samples[i]["grid"].size for i in idx]
    with pytest.raises(InvalidArgumentError):
        grid.to_padded()


def test_get_batch_matches_per_sample(rich, same):
    ds, _ = rich
    n = len(ds)
    for idx in ([0], list(range(n)), [n - 1, 0, 57, 57, 3, -1, -n, 100, 2], [40, 41, 42, 10, 11],
                np.array([7, 7, 7]), np.arange(n)[::-1], np.array([-5, 64], np.int32)):
        batch = ds.get_batch(idx)
        norm = [int(i) % n for i in idx]
        assert_batch_matches(ds, batch, norm, same)


def test_get_batch_columns_and_errors(rich, same):
    ds, _ = rich
    b = ds.get_batch([1, 2], columns=["text", "tokens"])
    assert sorted(b) == ["text", "tokens"]
    assert_batch_matches(ds, b, [1, 2], same, ["text", "tokens"])
    with pytest.raises(InvalidArgumentError) as info:
        ds.get_batch([1, 2], columns=["nope"])
    assert "nope" in str(info.value)
    with pytest.raises(InvalidArgumentError):
        list(ds.batches(8, columns=["id", "nope"]))
    for bad in ([len(ds)], [0, -len(ds) - 1], [10**10]):
        with pytest.raises(SampleIndexError):
            ds.get_batch(bad)
    with pytest.raises(InvalidArgumentError):
        ds.get_batch(np.zeros((2, 2), np.int64))


def test_empty_get_batch(rich):
    ds, _ = rich
    b = ds.get_batch([], columns=["id", "tokens", "emb", "text"])
    assert b["id"].shape == (0,)
    assert b["emb"].shape == (0, 2, 3)
    assert len(b["tokens"]) == 0 and len(b["text"]) == 0


@pytest.mark.parametrize("bs", [1, 7, 32, 119, 120, 500])
def test_batches_cover_the_dataset_in_order(rich, same, bs):
    ds, _ = rich
    n = len(ds)
    seen = 0
    for b in ds.batches(bs):
        size = len(b["id"])
        assert size == min(bs, n - seen)
        assert b["id"].tolist() == list(range(seen, seen + size))
        seen += size
    assert seen == n
    batches = list(ds.batches(bs, drop_last=True))
    assert len(batches) == n // bs
    assert all(len(b["id"]) == bs for b in batches)


def test_batches_cross_shard_boundaries(rich, same):
    ds, _ = rich
    ends = np.cumsum([s.samples for s in ds.shards])
    bs = int(ends[0]) + 3  # the first batch straddles shards 0 and 1
    first = next(ds.batches(bs, columns=["tokens", "grid", "emb", "text", "any", "id"]))
    assert_batch_matches(ds, first, list(range(bs)), same, ["tokens", "grid", "emb", "text", "any", "id"])
    for b_idx, b in enumerate(ds.batches(13)):
        lo = b_idx * 13
        assert_batch_matches(ds, b, list(range(lo, min(lo + 13, len(ds)))), same)
    start = int(ends[1]) - 2
    b = next(ds.batches(5, start=start))
    assert b["id"].tolist() == list(range(start, start + 5))


def test_batches_invalid_batch_size(rich):
    ds, _ = rich
    for bad in (0, -1, None):
        with pytest.raises(InvalidArgumentError):
            next(ds.batches(bad))


def test_untyped_ndarray_batch_rows(rich, same):
    ds, samples = rich
    b = ds.get_batch([0, 1, 2, 3], columns=["any"])
    got = rows(b["any"])
    for k in range(4):
        assert got[k].dtype == samples[k]["any"].dtype and np.array_equal(got[k], samples[k]["any"])


def test_decode_batch_on_one_shard(rich, same):
    ds, _ = rich
    reader = ds.reader(1)
    start = ds.shards[0].samples
    local = [0, reader.samples - 1, 2, 2]
    b = decode_batch(reader, local)
    assert_batch_matches(ds, b, [start + i for i in local], same)
    with pytest.raises(InvalidArgumentError):
        decode_batch(reader, [reader.samples])
    with pytest.raises(InvalidArgumentError):
        decode_batch(reader, [-1])


def test_mixed_dimensionality_across_shards_keeps_row_shapes(tmp_path, make_dataset, same):
    # Shard 0 holds 1-D rows, shard 1 holds 2-D rows: a batch spanning both must keep each row's shape.
    samples = [{"a": np.arange(1, 4, dtype=np.int32)} for _ in range(3)]
    samples += [{"a": np.arange(6, dtype=np.int32).reshape(2, 3)} for _ in range(3)]
    out = make_dataset(tmp_path, {"a": "ndarray:int32"}, samples, size_limit=64)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) >= 2
    b = ds.get_batch(range(6))
    got = rows(b["a"])
    for k in range(6):
        assert got[k].shape == samples[k]["a"].shape, k
        assert np.array_equal(got[k], samples[k]["a"])


def test_two_dim_and_three_dim_shards_keep_row_shapes(tmp_path, make_dataset):
    samples = [{"a": np.ones((2, 2), np.int16)}, {"a": np.ones((1, 2, 3), np.int16)}]
    out = make_dataset(tmp_path, {"a": "ndarray:int16"}, samples, size_limit=32)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) == 2
    got = rows(ds.get_batch([0, 1])["a"])
    assert [g.shape for g in got] == [(2, 2), (1, 2, 3)]


def test_mixed_dimensionality_within_a_shard(tmp_path, make_dataset):
    samples = [{"a": np.arange(4, dtype=np.float32)}, {"a": np.ones((2, 2), np.float32)},
               {"a": np.zeros((1, 1, 2), np.float32)}]
    out = make_dataset(tmp_path, {"a": "ndarray:float32"}, samples)
    ds = StreamingDataset(local=out)
    got = rows(ds.get_batch([2, 0, 1])["a"])
    assert [g.shape for g in got] == [(1, 1, 2), (4,), (2, 2)]
    assert np.array_equal(got[1], samples[0]["a"])


def test_mixed_dimensionality_within_a_shard_is_documented_ragged(tmp_path, make_dataset):
    samples = [{"a": np.arange(4, dtype=np.float32)}, {"a": np.ones((2, 2), np.float32)}]
    out = make_dataset(tmp_path, {"a": "ndarray:float32"}, samples)
    assert isinstance(StreamingDataset(local=out).get_batch([0, 1])["a"], Ragged)


def test_all_scalar_dtypes_batch_to_1d_arrays(tmp_path, make_dataset):
    dtypes = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
              "float64", "int"]
    columns = {f"c_{d}": d for d in dtypes}
    samples = [{f"c_{d}": (i if d != "int8" else -i) for d in dtypes} for i in range(20)]
    out = make_dataset(tmp_path, columns, samples, size_limit=300)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) > 2
    b = ds.get_batch(range(20))
    for d in dtypes:
        col = b[f"c_{d}"]
        assert col.shape == (20,)
        assert col.dtype == (np.int64 if d == "int" else np.dtype(d))
        assert col.tolist() == [s[f"c_{d}"] for s in samples]


def test_fixed_shape_batches_equal_stack(tmp_path, make_dataset):
    rng = np.random.default_rng(2)
    samples = [{"x": rng.integers(0, 255, (4, 4, 3)).astype(np.uint8), "pad": "p" * (i % 5)} for i in range(64)]
    out = make_dataset(tmp_path, {"x": "ndarray:uint8:4,4,3", "pad": "str"}, samples, size_limit=600)
    ds = StreamingDataset(local=out)
    assert len(ds.shards) > 2
    want = np.stack([s["x"] for s in samples])
    got = np.concatenate([b["x"] for b in ds.batches(10, columns=["x"])])
    assert got.shape == (64, 4, 4, 3) and np.array_equal(got, want)
    idx = [63, 0, 31, 31]
    assert np.array_equal(ds.get_batch(idx)["x"], want[idx])
