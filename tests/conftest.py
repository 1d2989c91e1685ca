"""Shared fixtures for the shardstream test suite.

Helpers are exposed as fixtures (tests import nothing from this directory, only the
installed ``shardstream`` package):

- ``make_dataset(root, columns, samples, subdir="ds", **writer_kwargs) -> str``
  writes ``samples`` with a real :class:`MDSWriter` into ``root/subdir`` and returns
  that directory (module-scoped fixtures call ``shardstream.testing.write_dataset``);
- ``parse_shard(raw: bytes) -> ParsedShard`` parses an uncompressed MDS shard by hand
  with ``struct`` (independently of the library's reader);
- ``load_index(dirname) -> dict`` is the raw JSON of ``dirname/index.json``;
- ``assert_same_sample(got, want)`` compares decoded sample dicts (numpy-aware).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from shardstream.testing import write_dataset


@pytest.fixture(autouse=True)
def _private_cache_root(tmp_path_factory, monkeypatch):
    """Remote datasets without local= and remote writers' staging use a cache root of the test's own,
    never the user's ~/.cache (a test may set SHARDSTREAM_CACHE_DIR again)."""
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path_factory.mktemp("cache-root")))


def _make_dataset(root, columns: dict, samples, subdir: str = "ds", **writer_kwargs) -> str:
    return write_dataset(os.path.join(str(root), subdir) if subdir else str(root), columns, samples, **writer_kwargs)


@dataclass
class ParsedShard:
    num_samples: int
    offsets: list
    config: dict
    samples: list  # raw bytes of each sample

    def split_sample(self, i: int, column_names: list, column_sizes: list) -> dict:
        """Column name -> payload bytes of sample ``i`` (variable sizes read from its header)."""
        data = self.samples[i]
        n_var = sum(1 for s in column_sizes if s is None)
        var_sizes = list(struct.unpack_from(f"<{n_var}I", data, 0))
        pos = 4 * n_var
        out = {}
        for name, size in zip(column_names, column_sizes):
            size = var_sizes.pop(0) if size is None else size
            out[name] = data[pos:pos + size]
            pos += size
        assert pos == len(data), f"sample {i}: columns take {pos} bytes, the sample has {len(data)}"
        return out


def _parse_shard(raw: bytes) -> ParsedShard:
    (n,) = struct.unpack_from("<I", raw, 0)
    offsets = list(struct.unpack_from(f"<{n + 1}I", raw, 4))
    table_end = 4 + 4 * (n + 1)
    config = json.loads(raw[table_end:offsets[0]])
    samples = [raw[a:b] for a, b in zip(offsets, offsets[1:])]
    return ParsedShard(n, offsets, config, samples)


def _load_index(dirname) -> dict:
    with open(os.path.join(str(dirname), "index.json"), "rb") as f:
        return json.loads(f.read())


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, np.ndarray):
        return (isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
                and np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))
    if isinstance(want, float) and want != want:
        return isinstance(got, float) and got != got
    if isinstance(want, (list, tuple)):
        return isinstance(got, type(want)) and len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, Decimal):
        return isinstance(got, Decimal) and str(got) == str(want)
    return type(got) is type(want) and got == want


def _assert_same_sample(got: dict, want: dict) -> None:
    assert set(got) == set(want), f"columns {sorted(got)} != {sorted(want)}"
    for key in want:
        assert _same(got[key], want[key]), f"column {key!r}: got {got[key]!r:.200}, want {want[key]!r:.200}"


@pytest.fixture
def make_dataset():
    return _make_dataset


@pytest.fixture
def parse_shard():
    return _parse_shard


@pytest.fixture
def load_index():
    return _load_index


@pytest.fixture
def assert_same_sample():
    return _assert_same_sample


@pytest.fixture
def same():
    """``same(got, want) -> bool``: type- and dtype-strict equality, numpy-aware."""
    return _same


def mixed_samples(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 40))
        out.append({
            "id": i,
            "text": f"sample {i} " + "x" * int(rng.integers(0, 30)),
            "tokens": rng.integers(-1000, 1000, length).astype(np.int32),
            "score": np.float32(rng.standard_normal()),
        })
    return out


MIXED_COLUMNS = {"id": "int", "text": "str", "tokens": "ndarray:int32", "score": "float32"}


@pytest.fixture
def mixed():
    """(columns, samples): a small dataset mixing fixed and variable columns."""
    return dict(MIXED_COLUMNS), mixed_samples(60)
