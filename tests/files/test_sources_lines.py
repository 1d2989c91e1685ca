"""The text-file sources (JSON Lines, JSON arrays, CSV, text) of EasyDeL's API over the engine's line
formats: a shard is a file, opened at any row through the byte-range piece holding it."""

from __future__ import annotations

import json
import os

import pytest

lines = pytest.importorskip("shardstream.format.lines", reason="the JSON / CSV / text formats (format/lines.py)")

from shardstream import CsvShardedSource, JsonShardedSource, TextShardedSource  # noqa: E402
from shardstream.errors import NotYetSupportedError  # noqa: E402


def jsonl(path, lo: int, hi: int) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps({"n": n, "word": f"w{n}", "pad": "x" * 40}) + "\n" for n in range(lo, hi))
    return str(path)


def ns(it) -> list[int]:
    out = []
    for r in it:
        assert r["word"] == f"w{r['n']}"
        out.append(r["n"])
    return out


def test_json_lines_shards_open_at_any_row_across_pieces(tmp_path, monkeypatch):
    from shardstream.format import lineindex

    monkeypatch.setattr(lineindex, "PIECE_BYTES", 4096)  # pieces of ~60 lines, so a file has several
    a = jsonl(tmp_path / "d" / "a.jsonl", 0, 1000)
    jsonl(tmp_path / "d" / "b.jsonl", 0, 10)
    source = JsonShardedSource(str(tmp_path / "d" / "*.jsonl"), cache_dir=None)
    assert source.shard_names == [a, str(tmp_path / "d" / "b.jsonl")] and len(source) == 1010
    assert len([p for p in source.pieces if p.file == "a.jsonl"]) > 10
    for row in (0, 1, 59, 60, 61, 500, 999):
        assert ns(source.open_shard_at_row(a, row)) == list(range(row, 1000)), row
    assert ns(source.open_shard_at_row("b.jsonl", 10)) == []
    assert [s["n"] for s in source.dataset()] == [r["n"] for r in source]


def test_a_json_array_file_and_a_json_lines_file_named_json(tmp_path):
    with open(tmp_path / "arr.json", "w") as f:
        json.dump([{"n": n, "word": f"w{n}"} for n in range(5)], f)
    assert ns(JsonShardedSource(str(tmp_path / "arr.json"), jsonl=False)) == list(range(5))
    os.makedirs(tmp_path / "l")
    with open(tmp_path / "l" / "rows.json", "w") as f:
        f.writelines(json.dumps({"n": n, "word": f"w{n}"}) + "\n" for n in range(4))
    assert ns(JsonShardedSource(str(tmp_path / "l" / "rows.json"), jsonl=False).open_shard_at_row(
        str(tmp_path / "l" / "rows.json"), 2)) == [2, 3]


def test_csv_shards_and_their_delimiter(tmp_path):
    (tmp_path / "a.csv").write_text("n,word\n" + "".join(f"{n},w{n}\n" for n in range(20)))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.tsv").write_text("n\tword\n" + "".join(f"{n}\tw{n}\n" for n in range(3)))
    source = CsvShardedSource(str(tmp_path / "a.csv"), delimiter=",")
    assert ns(source.open_shard_at_row(source.shard_names[0], 17)) == [17, 18, 19]
    assert ns(CsvShardedSource(str(tmp_path / "t" / "a.tsv"), delimiter="\t")) == [0, 1, 2]
    with pytest.raises(NotYetSupportedError, match=r"delimiter=';', but .*a\.csv is read with ','"):
        CsvShardedSource(str(tmp_path / "a.csv"), delimiter=";")


def test_text_shards_name_their_field(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"line {n}\n" for n in range(6)))
    source = TextShardedSource(str(tmp_path / "a.txt"), text_field="content")
    assert list(source.open_shard_at_row(source.shard_names[0], 4)) == [{"content": "line 4"}, {"content": "line 5"}]
    assert [s["text"] for s in TextShardedSource(str(tmp_path / "a.txt")).dataset()] == [f"line {n}" for n in range(6)]
    with pytest.raises(NotYetSupportedError, match="names its column 'text', not 'content'"):
        source.dataset()
