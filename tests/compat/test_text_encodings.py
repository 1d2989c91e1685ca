"""The JSON and XSV encodings modules and the barrier, offered through shardstream.compat."""

from __future__ import annotations

import pytest

from shardstream import CSVWriter, StreamingDataset
from shardstream.compat.streaming.base.distributed import barrier
from shardstream.compat.streaming.base.format.json import encodings as json_enc
from shardstream.compat.streaming.base.format.xsv import encodings as xsv_enc
from shardstream.errors import ColumnTypeError


@pytest.mark.parametrize("module, check", [(json_enc, "is_json_encoding"), (xsv_enc, "is_xsv_encoding")])
def test_the_three_encoding_names(module, check):
    assert [getattr(module, check)(n) for n in ("str", "int", "float", "", "bytes", "pkl")] == [True] * 3 + [False] * 3


def test_json_values_are_checked_by_the_writers_rule():
    assert json_enc.is_json_encoded("str", "text") is True
    assert json_enc.is_json_encoded("int", 10) is True and json_enc.is_json_encoded("float", 9.5) is True
    for enc, value in [("str", 99), ("int", "99"), ("int", 1.25), ("float", 3), ("str", b"raw")]:
        with pytest.raises(AttributeError):  # a ColumnTypeError, caught as mosaicml-streaming's AttributeError
            json_enc.is_json_encoded(enc, value)
    with pytest.raises(KeyError, match="'list' is not an encoding of JSON or XSV shards"):
        json_enc.is_json_encoded("list", [])


def test_xsv_fields_round_trip_as_the_csv_shards_hold_them(tmp_path):
    cases = [("str", "mosaicml", "mosaicml"), ("int", 27, "27"), ("float", 1.25, "1.25"), ("int", -3, "-3")]
    for enc, value, text in cases:
        assert xsv_enc.xsv_encode(enc, value) == text
        decoded = xsv_enc.xsv_decode(enc, text)
        assert decoded == value and type(decoded) is type(value)
    with CSVWriter(out=str(tmp_path), columns={"s": "str", "i": "int", "f": "float"}) as w:
        w.write({"s": "mosaicml", "i": 27, "f": 1.25})
    row = StreamingDataset(local=str(tmp_path), batch_size=1)[0]
    assert row == {name: xsv_enc.xsv_decode(enc, xsv_enc.xsv_encode(enc, row[name]))
                   for name, enc in (("s", "str"), ("i", "int"), ("f", "float"))}
    with pytest.raises(ColumnTypeError, match="got a str"):
        xsv_enc.xsv_encode("int", "27")
    with pytest.raises(ValueError):
        xsv_enc.xsv_decode("int", "twenty")


def test_encoding_classes_have_classmethods():
    assert xsv_enc.Int.encode(5) == "5" and xsv_enc.Float.decode("0.5") == 0.5 and json_enc.Str.is_encoded("x")
    with pytest.raises(AttributeError):
        json_enc.Float().is_encoded(25)


def test_barrier_without_a_process_group_returns():
    assert barrier() is None  # one process: nobody to wait for


def test_barrier_waits_for_a_process_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        assert barrier() is None and dist.is_initialized()
    finally:
        dist.destroy_process_group()
