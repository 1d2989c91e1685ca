"""``arrow_columns``: the mapping table of convert/schema.py, overrides, refusals that say the fix; and
``check_schema``: later inputs against the first one's schema."""

from __future__ import annotations

import pyarrow as pa
import pytest

from shardstream.convert import arrow_columns, arrow_type_encoding, parse_columns
from shardstream.convert.schema import check_schema
from shardstream.errors import InvalidArgumentError, SchemaMismatchError, ShardstreamError

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])

TABLE = [
    (pa.int8(), "int8"), (pa.int16(), "int16"), (pa.int32(), "int32"), (pa.int64(), "int64"),
    (pa.uint8(), "uint8"), (pa.uint16(), "uint16"), (pa.uint32(), "uint32"), (pa.uint64(), "uint64"),
    (pa.float16(), "float16"), (pa.float32(), "float32"), (pa.float64(), "float64"),
    (pa.bool_(), "uint8"),
    (pa.string(), "str"), (pa.large_string(), "str"), (pa.string_view(), "str"),
    (pa.binary(), "bytes"), (pa.large_binary(), "bytes"), (pa.binary(16), "bytes"),
    (pa.list_(pa.int32()), "ndarray:int32"), (pa.large_list(pa.float64()), "ndarray:float64"),
    (pa.list_(pa.uint8()), "ndarray:uint8"), (pa.list_(pa.float32(), 3), "ndarray:float32:3"),
    (pa.decimal128(12, 3), "str_decimal"),
    (pa.timestamp("ms"), "str"), (pa.timestamp("us", tz="UTC"), "str"), (pa.date32(), "str"),
    (pa.time64("us"), "str"), (pa.duration("s"), "str"),
    (pa.struct([("a", pa.int64())]), "json"), (pa.map_(pa.string(), pa.int64()), "json"),
    (pa.list_(pa.string()), "json"), (pa.list_(pa.list_(pa.int32())), "json"),
    (pa.list_(pa.bool_()), "json"),
    (pa.dictionary(pa.int32(), pa.string()), "str"), (pa.dictionary(pa.int8(), pa.int64()), "int64"),
    (IMAGE, "json"),  # an image struct without rows to look at: named by arrow_columns, not the type alone
]


@pytest.mark.parametrize("arrow_type, encoding", TABLE, ids=[str(t) for t, _ in TABLE])
def test_type_table(arrow_type, encoding):
    assert arrow_type_encoding(arrow_type, "c") == encoding
    assert arrow_columns(pa.schema([("c", arrow_type)])) == {"c": encoding if arrow_type != IMAGE else "bytes"}


def test_columns_keep_schema_order_and_overrides_win():
    schema = pa.schema([("z", pa.int64()), ("a", pa.list_(pa.int64())), ("m", pa.string())])
    assert list(arrow_columns(schema)) == ["z", "a", "m"]
    assert arrow_columns(schema, {"a": "ndarray:int32", "z": "int"}) == {"z": "int", "a": "ndarray:int32", "m": "str"}
    assert arrow_columns(schema, parse_columns(["m:json", "a:pkl"])) == {"z": "int64", "a": "pkl", "m": "json"}


def test_image_struct_from_first_rows():
    def batch(first: bytes):
        return pa.record_batch({"img": pa.array([{"bytes": None, "path": "x"}, {"bytes": first, "path": "y"}], IMAGE)})

    schema = pa.schema([("img", IMAGE)])
    assert arrow_columns(schema, None, batch(b"\xff\xd8\xff\xe0rest")) == {"img": "jpeg"}
    assert arrow_columns(schema, None, batch(b"\x89PNG\r\n\x1a\nrest")) == {"img": "png"}
    assert arrow_columns(schema, None, batch(b"GIF89a")) == {"img": "bytes"}
    assert arrow_columns(schema, {"img": "bytes"}, batch(b"\xff\xd8\xff")) == {"img": "bytes"}


def test_null_column_refused_with_the_fix():
    schema = pa.schema([("id", pa.int64()), ("extra", pa.null())])
    with pytest.raises(SchemaMismatchError) as err:
        arrow_columns(schema)
    assert "'extra'" in str(err.value) and "--columns extra:json" in str(err.value)
    assert arrow_columns(schema, {"extra": "json"}) == {"id": "int64", "extra": "json"}


def test_unmappable_type_refused_naming_column():
    with pytest.raises(SchemaMismatchError, match=r"column 'u'.*--columns u:ENCODING"):
        arrow_columns(pa.schema([("u", pa.dense_union([pa.field("a", pa.int8())]))]))


def test_bad_overrides():
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(InvalidArgumentError, match=r"'nope', which the input does not have; its columns are id"):
        arrow_columns(schema, {"nope": "int64"})
    with pytest.raises(ShardstreamError, match="int99"):
        arrow_columns(schema, {"id": "int99"})
    for spec in ("id", "id:", ":int64"):
        with pytest.raises(InvalidArgumentError, match="NAME:ENCODING"):
            parse_columns([spec])
    assert parse_columns("tokens:ndarray:int32") == {"tokens": "ndarray:int32"}
    assert parse_columns({"a": "str"}) == {"a": "str"} and parse_columns(None) == {}


FIRST = pa.schema([("id", pa.int64()), ("text", pa.string()), ("score", pa.float32())])


def test_check_schema_same_and_reordered_metadata():
    assert check_schema(FIRST, FIRST, "b.parquet", cast=False) is None
    assert check_schema(FIRST.with_metadata({b"k": b"v"}), FIRST, "b.parquet", cast=False) is None


def test_check_schema_missing_column_refused_even_with_cast():
    other = pa.schema([("id", pa.int64()), ("score", pa.float32())])
    for cast in (False, True):
        with pytest.raises(SchemaMismatchError, match=r"b\.parquet has no column 'text'"):
            check_schema(other, FIRST, "b.parquet", cast=cast)


@pytest.mark.parametrize("other, what", [
    (FIRST.append(pa.field("more", pa.int8())), "an extra column 'more'"),
    (pa.schema([("id", pa.int32()), ("text", pa.string()), ("score", pa.float32())]),
     "column 'id' of type int32 where the first input has int64"),
])
def test_check_schema_extra_or_changed(other, what):
    with pytest.raises(SchemaMismatchError) as err:
        check_schema(other, FIRST, "b.parquet", cast=False)
    assert f"b.parquet has {what}" in str(err.value) and "--on-schema-mismatch=cast" in str(err.value)
    assert check_schema(other, FIRST, "b.parquet", cast=True) == FIRST
