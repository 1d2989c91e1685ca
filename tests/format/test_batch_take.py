"""Reordering and assembling column batches: Ragged.take, take_rows, column_kinds and
stack_samples, which must give exactly what decode_batch gives for the same samples."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardstream import MDSWriter, Ragged, StreamingDataset
from shardstream.format.batch import column_kinds, decode_batch, stack_samples, take_rows

COLUMNS = {
    "id": "int", "label": "uint8", "score": "float64", "half": "float16", "emb": "ndarray:float32:2,3",
    "vec": "ndarray:int64:1", "tokens": "ndarray:int32", "grid": "ndarray:int16", "mixed": "ndarray:float32",
    "any": "ndarray", "text": "str", "blob": "bytes", "meta": "json", "num": "str_int", "dec": "str_decimal",
}
KINDS = {"id": "array", "label": "array", "score": "array", "half": "array", "emb": "array", "vec": "array",
         "tokens": "ragged", "grid": "ragged", "mixed": "ragged", "any": "list", "text": "list", "blob": "list",
         "meta": "list", "num": "list", "dec": "list"}
N = 80


def _sample(i: int, rng) -> dict:
    ndim = 1 + i % 3
    return {
        "id": i,
        "label": np.uint8(i % 7),
        "score": float(rng.standard_normal()),
        "half": np.float16(i / 3),
        "emb": rng.standard_normal((2, 3)).astype(np.float32),
        "vec": np.array([i * 1000], np.int64),
        # lengths on both sides of 256: the rows' shape headers have two widths
        "tokens": rng.integers(-50, 50, int(rng.choice([1, 3, 255, 256, 400]))).astype(np.int32),
        "grid": rng.integers(0, 9, (int(rng.integers(1, 4)), int(rng.integers(1, 4)))).astype(np.int16),
        "mixed": rng.standard_normal(tuple(int(d) for d in rng.integers(1, 4, ndim))).astype(np.float32),
        "any": np.arange(i % 3 + 1).astype(["uint8", "float64"][i % 2]),
        "text": "ß" * (i % 4),
        "blob": bytes([i]) * (i % 3),
        "meta": {"i": i, "l": [i, None]},
        "num": -i,
        "dec": Decimal(f"{i}.25"),
    }


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    rng = np.random.default_rng(7)
    out = str(tmp_path_factory.mktemp("take") / "ds")
    with MDSWriter(out=out, columns=COLUMNS) as writer:
        for i in range(N):
            writer.write(_sample(i, rng))
    ds = StreamingDataset(local=out)
    assert len(ds.shards) == 1
    return ds.reader(0)


# -- strict comparison -------------------------------------------------------------------------

def _key(v):
    if isinstance(v, (np.ndarray, np.generic)):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    return (type(v).__name__, repr(v))


def assert_same_ragged(got: Ragged, want: Ragged) -> None:
    assert isinstance(got, Ragged)
    assert got.values.dtype == want.values.dtype and np.array_equal(got.values, want.values)
    assert np.asarray(got.offsets).dtype == np.int64
    assert np.array_equal(got.offsets, want.offsets)
    assert type(got.shapes) is type(want.shapes), (got.shapes, want.shapes)
    if isinstance(want.shapes, np.ndarray):
        assert got.shapes.dtype == want.shapes.dtype and np.array_equal(got.shapes, want.shapes)
    else:
        assert got.shapes == want.shapes


def assert_same_batch(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert type(g) is type(w), (name, type(g), type(w))
        if isinstance(w, np.ndarray):
            assert (g.dtype, g.shape) == (w.dtype, w.shape) and np.array_equal(g, w), name
        elif isinstance(w, Ragged):
            assert_same_ragged(g, w)
        else:
            assert [_key(x) for x in g] == [_key(x) for x in w], name


# -- Ragged.take --------------------------------------------------------------------------------

def _ragged(rows: list[np.ndarray]) -> Ragged:
    """Rows packed the way decode_batch packs them."""
    sizes = [r.size for r in rows]
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    values = np.concatenate([r.ravel() for r in rows]) if rows else np.empty(0, np.int32)
    shapes = None
    if any(r.ndim != 1 for r in rows):
        ndims = {r.ndim for r in rows}
        shapes = np.asarray([r.shape for r in rows], np.int64) if len(ndims) == 1 else [r.shape for r in rows]
    return Ragged(values, offsets, shapes)


_shapes_1d = st.tuples(st.integers(1, 6))
_shapes_2d = st.tuples(st.integers(1, 3), st.integers(1, 3))
_shapes_any = st.one_of(_shapes_1d, _shapes_2d, st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), shapes=st.sampled_from([_shapes_1d, _shapes_2d, _shapes_any]))
def test_ragged_take(data, shapes):
    rows = data.draw(st.lists(hnp.arrays(np.int32, shapes, elements=st.integers(-100, 100)), min_size=1, max_size=12))
    r = _ragged(rows)
    n = len(rows)
    picks = data.draw(st.lists(st.integers(-n, n - 1), max_size=20))
    got = r.take(np.asarray(picks, np.int64))
    assert len(got) == len(picks)
    assert got.values.dtype == np.int32 and np.asarray(got.offsets).dtype == np.int64
    assert int(got.offsets[0]) == 0 and int(got.offsets[-1]) == len(got.values)
    for k, i in enumerate(picks):
        assert got[k].shape == rows[i].shape and np.array_equal(got[k], rows[i])
    if r.shapes is None:
        assert got.shapes is None
    # a permutation of the rows (what the step decoder takes) is packed as decode_batch packs it
    perm = data.draw(st.permutations(range(n)))
    assert_same_ragged(r.take(np.asarray(perm)), _ragged([rows[i] for i in perm]))
    assert_same_ragged(r.take(np.arange(n)), r)


def test_ragged_take_empty_and_list_input():
    r = _ragged([np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32)])
    empty = r.take([])
    assert len(empty) == 0 and empty.values.size == 0 and empty.values.dtype == np.int32
    twice = r.take([1, 1, 0])
    assert [row.tolist() for row in twice.tolist()] == [[0, 1], [0, 1], [0, 1, 2]]


# -- column_kinds --------------------------------------------------------------------------------

def test_column_kinds(reader):
    kinds = column_kinds(reader)
    assert [name for name, _, _ in kinds] == list(reader.info.column_names)
    assert {name: kind for name, kind, _ in kinds} == KINDS
    detail = {name: d for name, _, d in kinds}
    assert detail["id"] == (np.dtype("<i8"), ()) and detail["half"] == (np.dtype("<f2"), ())
    assert detail["emb"] == (np.dtype("<f4"), (2, 3)) and detail["vec"] == (np.dtype("<i8"), (1,))
    assert detail["tokens"] == np.dtype("<i4") and detail["text"] is None
    some = column_kinds(reader, ["text", "emb"])
    assert [name for name, _, _ in some] == [n for n in reader.info.column_names if n in ("text", "emb")]
    batch = decode_batch(reader, [0, 1])
    for name, kind, _ in kinds:
        assert isinstance(batch[name], {"array": np.ndarray, "ragged": Ragged, "list": list}[kind]), name


# -- take_rows and stack_samples against decode_batch ------------------------------------------------

_indices = st.lists(st.integers(0, N - 1), min_size=1, max_size=40)
_columns = st.none() | st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, unique=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(idx=_indices, columns=_columns)
def test_stack_samples_equals_decode_batch(reader, idx, columns):
    samples = [reader.get(i) for i in idx]
    got = stack_samples(samples, column_kinds(reader, columns))
    assert_same_batch(got, decode_batch(reader, idx, columns))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(idx=_indices, data=st.data(), columns=_columns)
def test_take_rows_equals_decode_batch_of_the_rows(reader, idx, data, columns):
    batch = decode_batch(reader, idx, columns)
    perm = data.draw(st.permutations(range(len(idx))))
    got = take_rows(batch, np.asarray(perm, np.int64))
    assert_same_batch(got, decode_batch(reader, [idx[r] for r in perm], columns))
    # any rows, repeated or left out: row for row the same values (a Ragged may keep its shapes list)
    rows = data.draw(st.lists(st.integers(0, len(idx) - 1), min_size=1, max_size=50))
    got = take_rows(batch, np.asarray(rows, np.int64))
    want = decode_batch(reader, [idx[r] for r in rows], columns)
    assert list(got) == list(want)
    for name, w in want.items():
        assert type(got[name]) is type(w)
        assert [_key(np.asarray(x) if isinstance(w, Ragged) else x) for x in got[name]] == [
            _key(np.asarray(x) if isinstance(w, Ragged) else x) for x in w], name


def test_take_rows_inverse_permutation(reader):
    """Decoding grouped rows and putting them back with the inverse permutation (as the step decoder does)."""
    idx = np.array([5, 70, 6, 71, 5, 0, 79, 33])
    order = np.argsort(idx % 3, kind="stable")
    grouped = decode_batch(reader, idx[order])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    assert_same_batch(take_rows(grouped, inverse), decode_batch(reader, idx))


def test_stack_samples_of_one_dimensional_rows_has_no_shapes(reader):
    idx = list(range(10))
    got = stack_samples([reader.get(i) for i in idx], column_kinds(reader, ["tokens", "grid", "mixed"]))
    assert got["tokens"].shapes is None
    assert isinstance(got["grid"].shapes, np.ndarray) and got["grid"].shapes.shape == (10, 2)
    assert isinstance(got["mixed"].shapes, list)  # rows of 1, 2 and 3 dimensions


def test_stack_samples_of_no_samples_equals_decode_batch(reader):
    # regression: a fixed-shape column of no samples had shape (0,), not (0, *shape)
    assert_same_batch(stack_samples([], column_kinds(reader)), decode_batch(reader, []))
