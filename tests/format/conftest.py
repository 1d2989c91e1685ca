"""Fixtures of the format tests: checks of column batches against per-sample decoding.

- ``assert_column(got, want)``: two batch columns are the same (types, dtypes, shapes, values, and a
  :class:`~shardstream.Ragged`'s offsets and ``shapes``);
- ``assert_batch(batch, readers, shards, rows, columns=None)``: ``batch`` is what decoding sample
  ``rows[i]`` of ``readers[shards[i]]`` one by one and stacking them gives.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardstream import Ragged
from shardstream.format.encodings import NDArray


def _expected_column(values: list, enc, fixed):
    """A batch column built from per-sample values as the batch decoder documents it."""
    if enc.np_dtype is not None and enc.shape is not None and fixed is not None:
        return np.array(values, enc.np_dtype).reshape((len(values), *enc.shape))
    if not (isinstance(enc, NDArray) and enc.dtype is not None):
        return values
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum([v.size for v in values], out=offsets[1:])
    shapes = None
    if any(v.ndim != 1 for v in values):
        ndims = {v.ndim for v in values}
        shapes = np.asarray([v.shape for v in values], np.int64) if len(ndims) == 1 else [v.shape for v in values]
    flat = np.concatenate([v.ravel() for v in values]) if values else np.empty(0, enc.np_dtype)
    return Ragged(flat, offsets, shapes)


def _assert_column(got, want) -> None:
    assert type(got) is type(want)
    if isinstance(want, Ragged):
        assert got.values.dtype == want.values.dtype and np.array_equal(got.values, want.values)
        assert got.offsets.dtype == np.int64 and np.array_equal(got.offsets, want.offsets)
        if want.shapes is None or isinstance(want.shapes, list):
            assert got.shapes == want.shapes
        else:
            assert isinstance(got.shapes, np.ndarray) and got.shapes.dtype == np.int64
            assert np.array_equal(got.shapes, want.shapes)
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    else:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert type(g) is type(w)
            assert np.array_equal(g, w) if isinstance(w, np.ndarray) else g == w


def _assert_batch(batch: dict, readers, shards, rows, columns=None) -> None:
    info = readers[0].info
    names = [n for n in info.column_names if columns is None or n in columns]
    assert list(batch) == names
    per_sample = [readers[s].get(int(i)) for s, i in zip(shards, rows)]
    for name, enc, fixed in zip(info.column_names, info.encodings, info.column_sizes):
        if name in names:
            _assert_column(batch[name], _expected_column([p[name] for p in per_sample], enc, fixed))


@pytest.fixture
def assert_column():
    return _assert_column


@pytest.fixture
def assert_batch():
    return _assert_batch
