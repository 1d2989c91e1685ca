"""``ArrowMDSWriter`` against ``MDSWriter.write``: every Arrow type the schema module maps gives byte-identical
shards and index (also compressed, cut into many shards, and from sliced batches), and a value that does not fit
its column is refused naming the row and the column."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream import MDSWriter
from shardstream.convert import ArrowMDSWriter, arrow_columns, write_batches
from shardstream.errors import EncodeError
from shardstream.format.encodings import get_encoding

N = 37


def _cycle(values, n=N):
    return [values[i % len(values)] for i in range(n)]


def typed_columns() -> dict:
    """name -> pyarrow array of N values: one column per Arrow type the schema module maps."""
    ints = [0, 1, -1, 7, -100, 127, -128, 42]
    cols = {f"i{w}": pa.array(_cycle(ints), getattr(pa, f"int{w}")()) for w in (8, 16, 32, 64)}
    cols |= {f"u{w}": pa.array(_cycle([0, 1, 255, 3, 200]), getattr(pa, f"uint{w}")()) for w in (8, 16, 32, 64)}
    cols["u64big"] = pa.array(_cycle([2**64 - 1, 0, 2**63]), pa.uint64())
    floats = [0.0, -1.5, 3.25, 1e10, float("nan"), float("inf"), -0.0]
    cols["f16"] = pa.array(np.array(_cycle(floats[:3] + floats[4:]), np.float16))
    cols["f32"] = pa.array(_cycle(floats), pa.float32())
    cols["f64"] = pa.array(_cycle(floats), pa.float64())
    cols["flag"] = pa.array(_cycle([True, False, False]), pa.bool_())
    words = ["", "a", "héllo", "多字节", "x" * 300]
    cols["s"] = pa.array(_cycle(words), pa.string())
    cols["ls"] = pa.array(_cycle(words[::-1]), pa.large_string())
    cols["b"] = pa.array(_cycle([b"", b"\x00\x01", b"abc" * 50]), pa.binary())
    cols["lb"] = pa.array(_cycle([b"\xff", b"", b"z" * 9]), pa.large_binary())
    cols["fb"] = pa.array(_cycle([b"abcd", b"\x00\x00\x00\x01"]), pa.binary(4))
    cols["tok"] = pa.array([list(range(i % 11 + 1)) for i in range(N)], pa.list_(pa.int32()))
    cols["big"] = pa.array([[2**40 + i] * (1 + i % 3) for i in range(N)], pa.large_list(pa.int64()))
    cols["long"] = pa.array([list(range(300 + i)) for i in range(N)], pa.list_(pa.uint16()))  # 2-byte shape
    cols["vec"] = pa.array([[i, i + 0.5, -i, 1e-3] for i in range(N)], pa.list_(pa.float32(), 4))
    cols["st"] = pa.array([{"a": i, "b": [f"w{i}"] * (i % 3)} for i in range(N)],
                          pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))]))
    cols["mp"] = pa.array([[("k", i), ("j", -i)] for i in range(N)], pa.map_(pa.string(), pa.int32()))
    cols["strs"] = pa.array([[f"w{i}", "x"] for i in range(N)], pa.list_(pa.string()))
    cols["nested"] = pa.array([[[i], [i, i]] for i in range(N)], pa.list_(pa.list_(pa.int64())))
    cols["dict"] = pa.array(_cycle(["red", "green", "blue", "red"])).dictionary_encode()
    cols["ts"] = pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=97 * i) for i in range(N)],
                          pa.timestamp("us"))
    cols["day"] = pa.array([dt.date(2020, 2, 1) + dt.timedelta(days=i) for i in range(N)], pa.date32())
    cols["dec"] = pa.array([Decimal(f"{i}.{i:02d}") for i in range(N)], pa.decimal128(10, 2))
    return cols


EXPECTED = {"i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
            "u32": "uint32", "u64": "uint64", "u64big": "uint64", "f16": "float16", "f32": "float32",
            "f64": "float64", "flag": "uint8", "s": "str", "ls": "str", "b": "bytes", "lb": "bytes", "fb": "bytes",
            "tok": "ndarray:int32", "big": "ndarray:int64", "long": "ndarray:uint16", "vec": "ndarray:float32:4",
            "st": "json", "mp": "json", "strs": "json", "nested": "json", "dict": "str", "ts": "str",
            "day": "str", "dec": "str_decimal"}


def row_value(value, encoding: str):
    """What a user hands ``MDSWriter.write`` for a value Arrow's ``to_pylist`` gives."""
    if isinstance(value, dict) and set(value) == {"bytes", "path"}:
        return value["bytes"]
    if encoding.startswith("ndarray"):
        return np.asarray(value, dtype=get_encoding(encoding).np_dtype)
    if isinstance(value, bool):
        return int(value)
    if encoding == "str" and isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    return value


def write_rows(out, table, columns, **kwargs) -> None:
    with MDSWriter(out=str(out), columns=columns, **kwargs) as writer:
        for row in table.to_pylist():
            writer.write({k: row_value(row[k], enc) for k, enc in columns.items()})


def assert_same_files(a, b) -> None:
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    for name in names:
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            assert fa.read() == fb.read(), f"{name} differs"


@pytest.fixture(scope="module")
def table():
    return pa.table(typed_columns())


def test_every_type_maps_as_the_table_says(table):
    assert arrow_columns(table.schema) == EXPECTED


@pytest.mark.parametrize("kwargs", [
    {},
    {"compression": "zstd", "size_limit": 4096},
    {"compression": "gz", "size_limit": 1500, "hashes": ["sha1", "xxh64"]},
], ids=["plain", "zstd-small-shards", "gz-tiny-shards-hashes"])
def test_byte_identical_to_row_by_row(tmp_path, table, kwargs):
    columns = arrow_columns(table.schema)
    with ArrowMDSWriter(str(tmp_path / "batch"), columns, **kwargs) as writer:
        writer.write_batch(table.slice(0, 10))
        writer.write_batch(table.slice(10).to_batches()[0])
    assert writer.rows == N
    write_rows(tmp_path / "rows", table, columns, **kwargs)
    assert_same_files(tmp_path / "batch", tmp_path / "rows")
    if kwargs.get("size_limit"):
        assert len(writer.shards) > 2, "the shard cuts were compared too"


def test_one_column_at_a_time(tmp_path, table):
    """Each type alone (a failure names the type)."""
    for name, encoding in EXPECTED.items():
        one = table.select([name])
        write_batches([one], str(tmp_path / f"b-{name}"), {name: encoding})
        write_rows(tmp_path / f"r-{name}", one, {name: encoding})
        assert_same_files(tmp_path / f"b-{name}", tmp_path / f"r-{name}")


def test_sliced_batches_with_offsets(tmp_path, table):
    """Slices of a batch share its buffers at non-zero offsets; each is written as its own rows."""
    columns = arrow_columns(table.schema)
    batch = table.combine_chunks().to_batches()[0]
    slices = [batch.slice(3, 5), batch.slice(17, 1), batch.slice(20, 17)]
    assert all(s.column(0).offset for s in slices)
    rows = pa.Table.from_batches(slices)
    written = write_batches(slices, str(tmp_path / "batch"), columns, size_limit=2048)
    assert written == rows.num_rows == 23
    write_rows(tmp_path / "rows", rows, columns, size_limit=2048)
    assert_same_files(tmp_path / "batch", tmp_path / "rows")


def test_overrides_and_hf_image(tmp_path):
    jpeg = b"\xff\xd8\xff\xe0" + bytes(range(40))
    image = pa.array([{"bytes": jpeg + bytes([i]), "path": f"{i}.jpg"} for i in range(5)],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    batch = pa.record_batch({"image": image, "n": pa.array(range(5), pa.int64()), "f": pa.array([0.5] * 5)})
    columns = arrow_columns(batch.schema, {"n": "int16", "f": "float16"}, batch)
    assert columns == {"image": "jpeg", "n": "int16", "f": "float16"}
    write_batches([batch], str(tmp_path / "batch"), {**columns, "image": "bytes"})
    write_rows(tmp_path / "rows", pa.Table.from_batches([batch]), {**columns, "image": "bytes"})
    assert_same_files(tmp_path / "batch", tmp_path / "rows")


def test_columns_empty_in_every_row(tmp_path):
    """Values of zero bytes in every row, after a variable-size column and at the end of the row."""
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "b": pa.array([b"x", b"yy", b""]),
                      "e": pa.array([b""] * 3), "z": pa.array([""] * 3)})
    columns = {"a": "int64", "b": "bytes", "e": "bytes", "z": "str"}
    write_batches([table], str(tmp_path / "batch"), columns)
    write_rows(tmp_path / "rows", table, columns)
    assert_same_files(tmp_path / "batch", tmp_path / "rows")


def test_table_of_several_chunks_counts_rows(tmp_path):
    t = pa.concat_tables([pa.table({"x": pa.array([1, 2], pa.int64())}), pa.table({"x": pa.array([3], pa.int64())})])
    assert t.column(0).num_chunks == 2
    with ArrowMDSWriter(str(tmp_path / "o"), {"x": "int64"}) as writer:
        writer.write_batch(t)
        writer.write_batch(pa.record_batch({"x": pa.array([], pa.int64())}))
        assert writer.rows == 3
    assert len(writer.shards) == 1 and writer.shards[0].samples == 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.lists(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=300), min_size=1, max_size=30),
       words=st.lists(st.text(max_size=20), min_size=30, max_size=30),
       start=st.integers(0, 5), size_limit=st.sampled_from([300, 1000, 1 << 20]))
def test_random_rows_byte_identical(tmp_path_factory, tokens, words, start, size_limit):
    n = len(tokens)
    table = pa.table({"tok": pa.array(tokens, pa.list_(pa.int32())), "w": pa.array(words[:n], pa.string()),
                      "i": pa.array(range(n), pa.int64())}).slice(min(start, n - 1))
    columns = {"tok": "ndarray:int32", "w": "str", "i": "int"}
    tmp = tmp_path_factory.mktemp("hyp")
    write_batches([table], str(tmp / "batch"), columns, size_limit=size_limit)
    write_rows(tmp / "rows", table, columns, size_limit=size_limit)
    assert_same_files(tmp / "batch", tmp / "rows")


@pytest.mark.parametrize("column, array, encoding, bad, what", [
    ("id", pa.array([1, 2, None, 4], pa.int64()), "int64", 2, "is null"),
    ("tokens", pa.array([[1], [2, 3], [4], []], pa.list_(pa.int32())), "ndarray:int32", 3, "empty list"),
    ("tokens", pa.array([[1], [2, None], [4], [5]], pa.list_(pa.int32())), "ndarray:int32", 1, "null element"),
    ("small", pa.array([1, 127, 300, -5], pa.int64()), "int8", 2, "300"),
    ("image", pa.array([b"\xff\xd8\xff\x00", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"\xff\xd8\xff"]), "jpeg", 1,
     "not a JPEG"),
    ("text", pa.array(["a", None, "c", "d"], pa.string()), "str", 1, "is null"),
])
def test_bad_value_names_row_and_column(tmp_path, column, array, encoding, bad, what):
    batch = pa.record_batch({column: array})
    for first_row, row in ((10, 10 + bad), (None, 1 + bad)):  # given, or counted from the rows written
        with pytest.raises(EncodeError) as err:
            with ArrowMDSWriter(str(tmp_path / f"o{row}"), {column: encoding}) as writer:
                writer.write_batch(batch.slice(0, 0))
                writer.write_batch(batch.slice(0, 1), where="first.parquet")
                writer.write_batch(batch, where="f.parquet", first_row=first_row)
        message = str(err.value)
        assert f"row {row} of f.parquet" in message, message
        assert repr(column) in message and what in message and f"--columns {column}:" in message, message
        assert not os.path.exists(tmp_path / f"o{row}" / "index.json"), "no index after a failed write"


def test_missing_column_is_refused(tmp_path):
    with pytest.raises(EncodeError, match=r"a\.parquet has no column 'y'; its columns are x"):
        with ArrowMDSWriter(str(tmp_path / "o"), {"x": "int64", "y": "str"}) as writer:
            writer.write_batch(pa.record_batch({"x": pa.array([1], pa.int64())}), where="a.parquet")
