"""Step batches of fixed-size shards (byte tables) and scans cut from decoded blocks: each gives what
per-sample decoding gives, or the same error."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream import CorruptShardError, InvalidArgumentError, MDSWriter, StreamingDataset, register_encoding
from shardstream.format.customencodings import registered_encodings
from shardstream.format.stepbatch import decode_joined, decode_strided
from shardstream.engine import blocks
from shardstream.engine.reading import decode_step

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

FIXED = {"x": "ndarray:uint8:7", "label": "int", "f": "float32", "m": "ndarray:int16:2,3", "h": "float16"}


def _fixed_sample(i: int) -> dict:
    return {"x": np.arange(7, dtype=np.uint8) + i % 200, "label": i * 3 - 50, "f": np.float32(i / 7),
            "m": np.arange(6, dtype=np.int16).reshape(2, 3) * i, "h": np.float16(i % 50)}


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fixed") / "ds")
    with MDSWriter(out=out, columns=FIXED, size_limit=1 << 12) as w:
        for i in range(500):
            w.write(_fixed_sample(i))
    return out


def _step_reference(ds, shards, local, columns):
    table = ds.table
    per = [table.reader(int(s)).get(int(i)) for s, i in zip(shards, local)]
    names = [n for n in table.reader(0).column_names if columns is None or n in columns]
    out = {}
    for name in names:
        enc = table.reader(0).info.encodings[table.reader(0).column_names.index(name)]
        out[name] = np.array([p[name] for p in per], enc.np_dtype).reshape((len(per), *enc.shape))
    return out


@SETTINGS
@given(data=st.data())
def test_strided_steps_match_per_sample(fixed, data, assert_column):
    ds = StreamingDataset(local=fixed)
    table = ds.table
    n_shards = len(ds.shards)
    assert n_shards >= 5 and table.reader(0).stride_rows() is not None
    size = data.draw(st.integers(1, 90))
    shards = np.array(data.draw(st.lists(st.integers(0, n_shards - 1), min_size=size, max_size=size)), np.int64)
    local = np.array([data.draw(st.integers(0, table.reader(int(s)).samples - 1)) for s in shards], np.int64)
    columns = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(sorted(FIXED)), min_size=1, unique=True)))
    got = decode_strided(table.reader, shards, local, columns)
    want = _step_reference(ds, shards, local, columns)
    assert list(got) == list(want)
    for name in want:
        assert_column(got[name], want[name])
        assert got[name].flags.c_contiguous and got[name].flags.writeable
    step = decode_step(table.reader, shards, local, columns)
    for name in want:
        assert_column(step[name], want[name])


def test_shuffled_step_batches_equal_the_samples(fixed):
    batches = StreamingDataset(local=fixed, batch_size=32, shuffle=True, shuffle_seed=5)
    samples = StreamingDataset(local=fixed, batch_size=32, shuffle=True, shuffle_seed=5)
    flat = list(samples)
    got = list(batches.iterate_batches())
    assert sum(len(b["label"]) for b in got) == len(flat)
    at = 0
    for b in got:
        part = flat[at:at + len(b["label"])]
        at += len(part)
        for name, enc in FIXED.items():
            want = np.array([p[name] for p in part])
            assert b[name].shape == want.shape and np.array_equal(b[name], want), name


def test_strided_step_refuses_rows_outside_a_shard(fixed):
    ds = StreamingDataset(local=fixed)
    reader = ds.table.reader(1)
    with pytest.raises(InvalidArgumentError, match="sample indices must be in"):
        decode_strided(ds.table.reader, np.array([0, 1], np.int64), np.array([0, reader.samples], np.int64), None)
    with pytest.raises(InvalidArgumentError, match="sample indices must be in"):
        decode_strided(ds.table.reader, np.array([1, 0], np.int64), np.array([-1, 0], np.int64), None)


def test_strided_step_leaves_unknown_columns_to_the_decoder(fixed):
    ds = StreamingDataset(local=fixed)
    shards, local = np.array([0, 1], np.int64), np.array([2, 3], np.int64)
    assert decode_strided(ds.table.reader, shards, local, ["x", "nope"]) is None
    with pytest.raises(InvalidArgumentError, match="unknown columns"):
        decode_step(ds.table.reader, shards, local, ["x", "nope"])


def _patch_u32(path: str, at: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<I", value))


def test_damaged_offsets_leave_the_byte_table_and_fail_only_their_samples(tmp_path, assert_column):
    out = str(tmp_path / "ds")
    with MDSWriter(out=out, columns=FIXED) as w:
        for i in range(40):
            w.write(_fixed_sample(i))
    path = os.path.join(out, "shard.00000.mds")
    with open(path, "rb") as f:
        offsets = struct.unpack_from("<41I", f.read(), 4)
    _patch_u32(path, 4 + 4 * 21, offsets[21] + 1)  # sample 20 one byte longer, sample 21 one shorter
    ds = StreamingDataset(local=out)
    reader = ds.table.reader(0)
    assert reader.stride_rows() is None
    shards = np.zeros(6, np.int64)
    local = np.array([3, 39, 0, 19, 22, 3], np.int64)
    step = decode_step(ds.table.reader, shards, local, None)
    want = _step_reference(ds, shards, local, None)
    for name in want:
        assert_column(step[name], want[name])
    for bad in (20, 21):
        with pytest.raises(CorruptShardError, match="column sizes do not add up"):
            decode_step(ds.table.reader, shards, np.array([3, bad, 0, 1, 2, 4], np.int64), None)


class _Pair:
    """A fixed-size encoding that decodes to a tuple (a list column in batches)."""

    size = 2

    def encode(self, value):
        return bytes(value)

    def decode(self, data):
        return tuple(data)


@pytest.fixture
def pairs(tmp_path):
    """A dataset of a fixed-size column that is not numeric (an encoding registered for this test only)."""
    register_encoding("batch_steps_pair", _Pair)
    try:
        out = str(tmp_path / "ds")
        with MDSWriter(out=out, columns={"p": "batch_steps_pair", "label": "int"}, size_limit=1 << 10) as w:
            for i in range(300):
                w.write({"p": (i % 256, 7), "label": i})
        yield out
    finally:
        del registered_encodings["batch_steps_pair"]


def test_a_fixed_size_list_column_is_decoded_sample_by_sample(pairs):
    ds = StreamingDataset(local=pairs)
    table = ds.table
    assert table.reader(0).stride_rows() is not None
    shards = np.array([2, 0, 1, 2, 0], np.int64)
    local = np.array([1, 5, 0, 3, 2], np.int64)
    assert decode_strided(table.reader, shards, local, None) is None
    assert decode_strided(table.reader, shards, local, ["label"]) is not None
    step = decode_step(table.reader, shards, local, None)
    want = [table.reader(int(s)).get(int(i)) for s, i in zip(shards, local)]
    assert step["p"] == [w["p"] for w in want]
    assert step["label"].tolist() == [w["label"] for w in want]


# -- scans cut from blocks ---------------------------------------------------------------------------
MIXED = {"id": "int", "text": "str", "tokens": "ndarray:int32", "grid": "ndarray:int16"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    rng = np.random.default_rng(9)
    out = str(tmp_path_factory.mktemp("mixed") / "ds")
    with MDSWriter(out=out, columns=MIXED, size_limit=1 << 14) as w:
        for i in range(400):
            # one 2-D grid in 40: most batches have only 1-D rows, some mix (shapes packed per batch)
            shape = (2, 2) if i % 40 == 7 else (int(rng.integers(1, 5)),)
            w.write({"id": i, "text": "ü" * (i % 9) + str(i), "tokens": np.arange(1 + i % 300, dtype=np.int32),
                     "grid": np.full(shape, i, np.int16)})
    return out


@SETTINGS
@given(bs=st.integers(1, 70), start=st.integers(0, 420), drop_last=st.booleans(),
       block=st.sampled_from([1, 3000, 20000, 1 << 20]), columns=st.sampled_from([None, ["tokens", "grid"], ["text"]]))
def test_scan_blocks_equal_batches_decoded_alone(mixed, monkeypatch, bs, start, drop_last, block, columns,
                                                 assert_column):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", block)
    ds = StreamingDataset(local=mixed)
    n = 400
    got = list(ds.batches(bs, columns=columns, drop_last=drop_last, start=start))
    bounds = [(lo, min(lo + bs, n)) for lo in range(start, n, bs)]
    if drop_last:
        bounds = [(lo, hi) for lo, hi in bounds if hi - lo == bs]
    assert len(got) == len(bounds)
    for batch, (lo, hi) in zip(got, bounds):
        want = ds.get_batch(np.arange(lo, hi), columns=columns)
        assert list(batch) == list(want)
        for name in want:
            assert_column(batch[name], want[name])


@pytest.mark.parametrize("block", [1, 3000, 1 << 21])
@pytest.mark.parametrize("shuffle", [False, True])
def test_pass_steps_cut_from_blocks_equal_the_samples(mixed, monkeypatch, assert_column, block, shuffle):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", block)
    batches = StreamingDataset(local=mixed, batch_size=24, shuffle=shuffle, shuffle_seed=3)
    samples = StreamingDataset(local=mixed, batch_size=24, shuffle=shuffle, shuffle_seed=3)
    flat = list(samples)
    got = list(batches.iterate_batches(columns=["tokens", "text"]))
    assert sum(len(b["text"]) for b in got) == len(flat)
    at = 0
    reader = batches.table.reader(0)
    for batch in got:
        part = flat[at:at + len(batch["text"])]
        at += len(part)
        assert batch["text"] == [p["text"] for p in part]
        tokens = [p["tokens"] for p in part]
        offsets = np.cumsum([0] + [len(t) for t in tokens])
        want = type(batch["tokens"])(np.concatenate(tokens), offsets, None)
        assert_column(batch["tokens"], want)
    assert reader.stride_rows() is None


def test_an_unshuffled_pass_fails_at_the_step_of_a_damaged_sample(tmp_path):
    out = str(tmp_path / "ds")
    with MDSWriter(out=out, columns={"c": "ndarray:int32", "id": "int"}) as w:
        for i in range(40):
            w.write({"c": b"\x04\x03" + b"\x00" * 8 if i == 30 else np.arange(i + 1, dtype=np.int32), "id": i})
    steps = StreamingDataset(local=out, batch_size=8).iterate_batches()
    assert [next(steps)["id"].tolist()[0] for _ in range(3)] == [0, 8, 16]
    with pytest.raises(CorruptShardError, match="shape does not match its byte size"):
        next(steps)


# -- steps of variable-size samples from several shards -----------------------------------------------
@SETTINGS
@given(data=st.data())
def test_joined_steps_match_per_sample(mixed, data, assert_batch):
    ds = StreamingDataset(local=mixed)
    table = ds.table
    n_shards = len(ds.shards)
    size = data.draw(st.integers(1, 150))
    shards = np.array(data.draw(st.lists(st.integers(0, n_shards - 1), min_size=size, max_size=size)), np.int64)
    local = np.array([data.draw(st.integers(0, table.reader(int(s)).samples - 1)) for s in shards], np.int64)
    columns = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(sorted(MIXED)), min_size=1, unique=True)))
    readers = [table.reader(s) for s in range(n_shards)]
    assert_batch(decode_joined(table.reader, shards, local, columns), readers, shards, local, columns)
    assert_batch(decode_step(table.reader, shards, local, columns), readers, shards, local, columns)


def test_a_joined_step_with_a_damaged_sample_fails_as_shard_by_shard_decoding_does(tmp_path):
    out = str(tmp_path / "ds")
    with MDSWriter(out=out, columns={"c": "ndarray:int32", "id": "int"}, size_limit=1 << 9) as w:
        for i in range(60):
            w.write({"c": b"\x04\x03" + b"\x00" * 8 if i == 30 else np.arange(i + 1, dtype=np.int32), "id": i})
    ds = StreamingDataset(local=out)
    table = ds.table
    bad = int(np.searchsorted(table.ends_array, 30, side="right"))
    shards = np.array([0, bad, len(ds.shards) - 1], np.int64)
    local = np.array([0, 30 - table.starts[bad], 0], np.int64)
    assert decode_joined(table.reader, shards, local, None) is None
    with pytest.raises(CorruptShardError, match="shape does not match its byte size"):
        decode_step(table.reader, shards, local, None)
    local[1] = (local[1] + 1) % table.reader(bad).samples
    assert decode_joined(table.reader, shards, local, None)["id"].tolist() == [
        table.starts[int(s)] + int(i) for s, i in zip(shards, local)]
