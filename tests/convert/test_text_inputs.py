"""Converting text inputs agrees with the streaming reader of the same files: a CSV whose records end with a
lone carriage return gives the same rows, JSON nested hundreds of levels deep converts (its schema kept in
the manifest even when Arrow's IPC reader would refuse it), a bad JSON line is named by its file's path and
its line, as the reader names it, and a dangling symbolic link among the inputs is refused the same way."""

from __future__ import annotations

import json
import os
import re

import pytest

from shardstream import StreamingDataset, convert
from shardstream.convert import readers
from shardstream.errors import BadRowError, EncodeError, ShardNotFoundError

pa = pytest.importorskip("pyarrow")
orjson = pytest.importorskip("orjson")


def test_a_csv_with_lone_carriage_returns_converts_to_the_rows_the_reader_gives(tmp_path, read_rows):
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "mac.csv"
    path.write_bytes(b"id,name,score\r" + b"".join(b'%d,"n\r\n%d",%d.5\r' % (i, i, i) for i in range(200)))
    read = [dict(s) for s in StreamingDataset(local=str(path))]
    assert len(read) == 200 and read[7] == {"id": 7, "name": "n\r\n7", "score": 7.5}
    result = convert(str(tmp_path / "in"), str(tmp_path / "out"), workers=1, verify=True)
    assert result.rows == 200 and read_rows(tmp_path / "out") == read


def nested(depth: int) -> str:
    """Objects holding lists holding objects ... ``depth`` levels deep, each object with a string beside."""
    text = "7"
    for k in range(depth):
        text = f"[{text}]" if k % 2 else f'{{"a": {text}, "tag": "t{k}"}}'
    return text


def test_json_nested_500_levels_deep_converts_and_reads_back(tmp_path, read_rows):
    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "deep.jsonl", "w") as f:
        for i in range(20):
            f.write(f'{{"id": {i}, "x": {nested(500)}}}\n')
    result = convert(str(tmp_path / "in"), str(tmp_path / "out"), workers=1, verify=True)
    assert result.rows == 20 and result.columns == {"id": "int64", "x": "json"}
    with open(tmp_path / "out" / "shardstream-convert.json") as f:
        assert json.load(f)["schema"].startswith("fields:")  # too deep for Arrow's IPC reader
    want = orjson.loads(nested(500))
    assert read_rows(tmp_path / "out") == [{"id": i, "x": want} for i in range(20)]


def test_a_json_value_deeper_than_the_json_encoding_stores_is_refused_naming_its_row(tmp_path):
    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "deeper.jsonl", "w") as f:
        f.write(f'{{"id": 0, "x": {nested(1020)}}}\n')
    with pytest.raises(EncodeError, match=r"row 0 of deeper\.jsonl: column 'x' \(json\) does not fit: encoding "
                                          "'json': the value is nested deeper than Python's json module encodes"):
        convert(str(tmp_path / "in"), str(tmp_path / "out"), workers=1)


def _deep_type(depth: int):
    t = pa.int32()
    for k in range(depth):
        kind = k % 5
        if kind == 0:
            t = pa.list_(pa.field("item", t, metadata={b"level": str(k).encode()}))
        elif kind == 1:
            t = pa.struct([pa.field("v", t), pa.field("s", pa.timestamp("ms", "UTC"), nullable=False)])
        elif kind == 2:
            t = pa.map_(pa.string(), t, keys_sorted=True)
        elif kind == 3:
            t = pa.list_(t, 3)
        else:
            t = pa.large_list(t)
    return t


@pytest.mark.parametrize("depth", [3, 300])
def test_the_manifest_keeps_a_schema_of_any_depth(depth):
    from shardstream.convert.schematext import FIELDS, schema_of, schema_text

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("x", _deep_type(depth)),
                        pa.field("d", pa.dictionary(pa.int8(), pa.string()))], metadata={b"origin": b"test"})
    text = schema_text(schema)
    assert text.startswith(FIELDS) == (depth > 100)  # a schema Arrow's IPC reader reads is kept as IPC
    back = schema_of(text)
    assert back.equals(schema, check_metadata=True)
    assert back.field("x").type.equals(schema.field("x").type, check_metadata=True)


def _reader_says(path: str) -> str:
    """The streaming reader's ``FILE line N: why`` for a file with a bad row."""
    with pytest.raises(BadRowError) as info:
        list(StreamingDataset(local=path))
    return str(info.value).split("; fix or remove the row")[0]


@pytest.mark.parametrize("bad, same", [('{"id": oops, "s": "x"}', True), ('[1, 2]', True),
                                       ('{"id": "abc", "s": "x"}', False)],
                         ids=["not-json", "not-an-object", "another-type"])
def test_a_bad_json_line_is_named_by_path_and_line_as_the_reader_names_it(tmp_path, monkeypatch, bad, same):
    monkeypatch.setattr(readers, "BLOCK_SIZE", 4096)  # pyarrow's "row N" counts from its block's start
    (tmp_path / "in").mkdir()
    path = str(tmp_path / "in" / "bad.jsonl")
    with open(path, "w") as f:
        for i in range(2000):
            f.write(bad + "\n" if i == 1500 else json.dumps({"id": i, "s": "x"}) + "\n")
            if i == 10:
                f.write("\n")  # a blank line counts as a line, not as a row
    said = _reader_says(path)
    with pytest.raises(BadRowError) as info:
        convert(str(tmp_path / "in"), str(tmp_path / "out"), workers=1)
    told, _, fix = str(info.value).partition("; ")
    assert fix == "fix or remove the row, or leave the file out of the inputs"
    if same:  # the reader's words exactly
        assert told == said
    else:  # the type was decided by other rules (pyarrow's for the converter): the same place and value
        lead = f'{path} line 1502: column \'id\' holds "abc" (a string), but '
        assert said.startswith(lead) and told == lead + "a number in the rows before it, which decided its type"


def test_a_dangling_symbolic_link_among_the_inputs_is_refused_as_the_reader_refuses_it(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"id": 1}\n')
    os.symlink(str(tmp_path / "gone.jsonl"), str(tmp_path / "in" / "b.jsonl"))
    said = f"{tmp_path / 'in' / 'b.jsonl'} is a symbolic link to {tmp_path / 'gone.jsonl'}, which does not exist"
    for given in (str(tmp_path / "in"), str(tmp_path / "in" / "*.jsonl")):
        with pytest.raises(ShardNotFoundError, match=re.escape(said)):
            StreamingDataset(local=given)
        with pytest.raises(ShardNotFoundError, match=re.escape(said)):
            convert(given, str(tmp_path / "out"), workers=1)
