"""JSON Lines files read in place: exact rows and order, pieces of whole lines, column batches, the
columns of a file and how rows must fit them, bad rows (raised or skipped, named by file and line),
odd files (empty, blank lines, no last newline, CRLF, unicode), the description kept between opens,
and a file rewritten after it was listed."""

from __future__ import annotations

import json
import os
import re
import time

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.errors import (BadRowError, FileChangedError, InvalidArgumentError, NoFilesError, SchemaMismatchError,
                               ShardNotFoundError)
from shardstream.format import lineindex, lines
from shardstream.format.batch import Ragged, stack_samples
from shardstream.format.lines import JSONL_FORMAT, skipped_rows
from shardstream.format.textfiles import first_line

from .textdata import by_id, jsonl_bytes, rows, sample, write, write_jsonl

N_FILES, PER_FILE = 3, 40


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of about 600 bytes, described in blocks of 256: many pieces, lines across blocks."""
    monkeypatch.setattr(lineindex, "PIECE_BYTES", 600)
    monkeypatch.setattr(lineindex, "BLOCK", 256)


@pytest.fixture
def jsonl_dir(tmp_path, small_pieces) -> str:
    d = tmp_path / "data"
    for k in range(N_FILES):
        write_jsonl(str(d / f"part-{k}.jsonl"), rows(PER_FILE, start=k * PER_FILE))
    return str(d)


ALL = rows(N_FILES * PER_FILE)


def test_rows_in_order_by_index_and_shuffled(jsonl_dir, assert_same_sample):
    ds = StreamingDataset(local=jsonl_dir, batch_size=8)
    assert len(ds) == len(ALL) and ds.column_names == ("id", "text", "tokens", "score", "meta")
    assert len(ds.shards) > 2 * N_FILES  # several pieces per file
    assert all(p.stop - p.start < 600 + 200 for p in ds.shards)
    for i in (0, 1, 39, 40, 77, len(ALL) - 1):
        assert_same_sample(ds[i], sample(ALL[i]))
    seen = list(ds)
    assert by_id(seen) == list(range(len(ALL)))
    for got, want in zip(seen, ALL):
        assert_same_sample(got, sample(want))
    shuffled = by_id(StreamingDataset(local=jsonl_dir, batch_size=8, shuffle=True, shuffle_seed=3))
    assert sorted(shuffled) == list(range(len(ALL))) and shuffled != list(range(len(ALL)))
    assert sorted(os.listdir(jsonl_dir)) == [f"part-{k}.jsonl" for k in range(N_FILES)]  # read in place


def test_pieces_are_whole_lines_with_their_counts(jsonl_dir):
    ds = StreamingDataset(local=jsonl_dir)
    for p in ds.shards:
        with open(os.path.join(jsonl_dir, p.file), "rb") as f:
            data = f.read()
        chunk = data[p.start:p.stop]
        assert p.start == 0 or data[p.start - 1:p.start] == b"\n"
        assert chunk.endswith(b"\n") and chunk.count(b"\n") == p.samples
        assert first_line(p) == data[:p.start].count(b"\n")  # the number of its first line
        assert json.loads(chunk.split(b"\n")[0])["id"] == p.first + PER_FILE * int(p.file[5])


@pytest.mark.parametrize("shuffle", [False, True])
def test_column_batches_equal_the_stacked_samples(jsonl_dir, shuffle):
    make = lambda: StreamingDataset(local=jsonl_dir, batch_size=8, shuffle=shuffle, shuffle_seed=5)  # noqa: E731
    samples = list(make())
    batches = list(make().iterate_batches())
    assert len(batches) == len(ALL) // 8
    kinds = make().shards[0].kinds
    assert kinds == (("array", "<i8", ()), ("list", "", ()), ("ragged", "<i8", ()), ("array", "<f8", ()),
                     ("list", "", ()))
    for j, batch in enumerate(batches):
        want = stack_samples(samples[j * 8:(j + 1) * 8], JSONL_FORMAT.kinds(make().shards[0]))
        assert batch["id"].dtype == np.int64 and batch["id"].tolist() == want["id"].tolist()
        assert batch["score"].dtype == np.float64 and np.array_equal(batch["score"], want["score"])
        assert isinstance(batch["tokens"], Ragged) and batch["tokens"].values.dtype == np.int64
        assert np.array_equal(batch["tokens"].offsets, want["tokens"].offsets)
        assert np.array_equal(batch["tokens"].values, want["tokens"].values)
        assert batch["text"] == want["text"]
        assert [m["lang"] for m in batch["meta"]] == [m["lang"] for m in want["meta"]]
    only = list(make().iterate_batches(columns=["tokens"]))
    assert all(list(b) == ["tokens"] for b in only)


def test_columns_reads_only_those_and_ignores_other_keys(jsonl_dir, assert_same_sample):
    ds = StreamingDataset(local=jsonl_dir, columns=["score", "id"])
    assert ds.column_names == ("score", "id")
    for got, want in zip(ds, ALL):
        assert_same_sample(got, {"score": want["score"], "id": want["id"]})
    anything = StreamingDataset(local=jsonl_dir, columns=["id", "label"])  # a key no row has: None
    assert [s["label"] for s in anything] == [None] * len(ALL)
    assert anything.shards[0].kinds[1] == ("list", "", ())


def test_odd_files_count_exactly(tmp_path, small_pieces, assert_same_sample):
    d = tmp_path / "odd"
    write(str(d / "a-empty.jsonl"), b"")
    write(str(d / "b-blank.jsonl"), b"\n  \n\r\n\t\n")
    write_jsonl(str(d / "c-no-last-newline.jsonl"), rows(5, 0), trailing=False)
    write_jsonl(str(d / "d-crlf.jsonl"), rows(6, 5), newline="\r\n", blank=[0, 3])
    write_jsonl(str(d / "e-unicode.jsonl"), rows(9, 11, width=40), blank=[2, 8])
    write(str(d / "f-bom.jsonl"), b"\xef\xbb\xbf" + jsonl_bytes(rows(2, 20)))
    ds = StreamingDataset(local=str(d))
    assert len(ds) == 22 and {p.file for p in ds.shards} == {"c-no-last-newline.jsonl", "d-crlf.jsonl",
                                                            "e-unicode.jsonl", "f-bom.jsonl"}
    want = rows(5, 0) + rows(6, 5) + rows(9, 11, width=40) + rows(2, 20)
    for got, w in zip(ds, want):
        assert_same_sample(got, sample(w))
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(NoFilesError, match="hold no rows"):  # nothing to stream is said, not streamed
        StreamingDataset(local=str(empty))


def test_missing_keys_are_none_and_numbers_follow_the_first_rows(tmp_path):
    path = write_jsonl(str(tmp_path / "m.jsonl"), [
        {"a": 1, "b": 0.5, "c": [1, 2], "d": True},
        {"a": None, "c": [3.5], "d": False},  # b missing; a float in a float-list column
        {"b": 2, "c": [], "a": 7},  # an integer in a float column is read as a float
    ])
    ds = StreamingDataset(local=path)
    assert ds.shards[0].types == ("int64", "double", "list<double>", "bool")
    got = list(ds)
    assert got[1]["a"] is None and got[1]["b"] is None and got[2]["d"] is None
    assert type(got[2]["b"]) is float and got[2]["b"] == 2.0
    assert got[0]["c"].dtype == np.float64 and got[2]["c"].shape == (0,)
    with pytest.raises(InvalidArgumentError, match="column 'a' has rows without a value"):
        ds.get_batch([0, 1], columns=["a"])
    assert ds.get_batch([0, 2], columns=["a", "c"])["a"].tolist() == [1, 7]


def test_a_key_or_type_beyond_the_first_rows_is_a_bad_row(tmp_path, monkeypatch):
    monkeypatch.setattr(lines.jsonvalues, "SCHEMA_ROWS", 4)
    base = rows(10)
    path = write_jsonl(str(tmp_path / "k.jsonl"), base[:6] + [{**base[6], "extra": 1}] + base[7:])
    with pytest.raises(BadRowError, match=r"k\.jsonl line 7: it has a key 'extra', which the file's first rows do "
                                          r"not have .*give columns=\[\.\.\.\].*on_bad_rows='skip'"):
        list(StreamingDataset(local=path))
    assert len(list(StreamingDataset(local=path, columns=["id", "text"]))) == 10  # named columns: keys ignored
    path = write_jsonl(str(tmp_path / "t.jsonl"), base[:8] + [{**base[8], "id": "nine"}] + base[9:])
    with pytest.raises(BadRowError, match=r"t\.jsonl line 9: column 'id' holds \"nine\" \(a string\), but an integer "
                                          "in the file's first rows"):
        list(StreamingDataset(local=path))


BAD_LINES = {12: '{"id": 12, "text": ', 25: "[1, 2, 3]", 31: '{"id": 31.5, "text": "x"}'}


def _with_bad_lines(path: str) -> tuple[str, list[dict]]:
    """A file of 40 rows in which the lines ``BAD_LINES`` (1-based) are replaced by bad ones."""
    items: list = list(rows(40))
    for line, text in BAD_LINES.items():
        items[line - 1] = text
    write_jsonl(path, items)
    return path, [r for k, r in enumerate(rows(40)) if k + 1 not in BAD_LINES]


def test_bad_rows_raise_naming_file_and_line(tmp_path, small_pieces, monkeypatch):
    monkeypatch.setattr(lines.jsonvalues, "SCHEMA_ROWS", 8)
    path, _ = _with_bad_lines(str(tmp_path / "bad.jsonl"))
    ds = StreamingDataset(local=path)  # describing parses the first 8 rows and counts the lines
    assert len(ds) == 40
    with pytest.raises(BadRowError, match=r"bad\.jsonl line 12: it is not valid JSON .*on_bad_rows='skip'"):
        list(ds)
    holding = max(k for k, p in enumerate(ds.shards) if first_line(p) < 25)  # the piece of line 25
    with pytest.raises(BadRowError, match=r"bad\.jsonl line 25: it is a list, not a JSON object"):
        ds.reader(holding)
    first = write_jsonl(str(tmp_path / "first.jsonl"), rows(3) + ["not json"] + rows(3))
    with pytest.raises(BadRowError, match=r"first\.jsonl line 4: it is not valid JSON"):  # among the first rows
        StreamingDataset(local=first)


def test_bad_rows_skip_counts_exactly_and_reports(tmp_path, small_pieces, assert_same_sample, monkeypatch):
    monkeypatch.setattr(lines.jsonvalues, "SCHEMA_ROWS", 8)
    path, good = _with_bad_lines(str(tmp_path / "bad.jsonl"))
    with pytest.warns(UserWarning, match=r"bad\.jsonl: 3 row\(s\) that cannot be read were left out .*the first, at "
                                         r"line 12: it is not valid JSON"):
        ds = StreamingDataset(local=path, on_bad_rows="skip", batch_size=4)
    assert len(ds) == 37 and skipped_rows(ds) == {"bad.jsonl": 3}
    for got, want in zip(ds, good):
        assert_same_sample(got, sample(want))
    assert by_id(ds[[10, 11]]) == [10, 12]
    assert {i for b in ds.iterate_batches() for i in b["id"].tolist()} == set(by_id(good))
    again = StreamingDataset(local=path, on_bad_rows="skip")  # from the listing: no warning, the same count
    assert skipped_rows(again) == {"bad.jsonl": 3} and len(again) == 37
    with pytest.warns(UserWarning, match="3 row"):  # described again: other columns
        assert skipped_rows(StreamingDataset(local=path, columns=["id"], on_bad_rows="skip")) == {"bad.jsonl": 3}


def test_the_description_is_kept_and_made_again_for_a_changed_file(jsonl_dir):
    from shardstream.storage.described import DescribeStats
    from shardstream.storage.filestreams import open_file_stream
    from shardstream.storage.options import StreamOptions

    def opened() -> tuple[DescribeStats, list]:
        stats = DescribeStats()
        o = open_file_stream(None, None, jsonl_dir, StreamOptions(), JSONL_FORMAT, None, stats)
        return stats, o.shards

    first, pieces = opened()
    assert first.described == N_FILES and first.bytes == sum(
        os.path.getsize(os.path.join(jsonl_dir, f)) for f in os.listdir(jsonl_dir))
    second, again = opened()
    assert (second.files, second.described, second.requests, second.bytes) == (N_FILES, 0, 0, 0)
    assert again == pieces
    write_jsonl(os.path.join(jsonl_dir, "part-1.jsonl"), rows(3, 500))
    third, changed = opened()
    assert third.described == 1 and sum(p.samples for p in changed) == 2 * PER_FILE + 3


def test_a_file_rewritten_after_it_was_listed_is_refused(tmp_path):
    path = write_jsonl(str(tmp_path / "w.jsonl"), rows(20))
    assert len(list(StreamingDataset(local=path))) == 20
    ds = StreamingDataset(local=path)  # listed (from the kept description), no piece read yet
    time.sleep(0.01)
    write_jsonl(path, rows(20, 100))  # other rows
    with pytest.raises(FileChangedError, match=r"w\.jsonl changed after the dataset listed it"):
        list(ds)
    assert by_id(StreamingDataset(local=path)) == list(range(100, 120))  # opened again: the new rows


def test_files_of_one_dataset_must_agree_on_their_columns(tmp_path):
    d = tmp_path / "two"
    write_jsonl(str(d / "a.jsonl"), [{"x": 1}])
    write_jsonl(str(d / "b.jsonl"), [{"x": 1.5}])
    with pytest.raises(SchemaMismatchError, match=r"column 'x' is double in b\.jsonl but int64 in a\.jsonl"):
        StreamingDataset(local=str(d))


@pytest.mark.parametrize("fast", [True, False])
def test_the_same_rows_with_or_without_orjson(tmp_path, monkeypatch, fast):
    """orjson is only faster: what it refuses (NaN, integers beyond 64 bits) the standard parser reads."""
    if not fast:
        monkeypatch.setattr(lines.jsonvalues, "_orjson", None)
    path = write(str(tmp_path / "n.jsonl"), b'{"x": 1.5, "big": 1}\n{"x": NaN, "big": 100000000000000000000000}\n'
                                             b'{"x": 2, "big": 3}\n')
    got = list(StreamingDataset(local=path))
    assert got[0] == {"x": 1.5, "big": 1} and np.isnan(got[1]["x"]) and got[1]["big"] == 10 ** 23
    assert type(got[2]["x"]) is float and StreamingDataset(local=path).shards[0].types == ("double", "json")


def test_columns_come_from_the_rows_in_the_first_8_mib_whatever_the_file_size(tmp_path):
    """Rows of 9 KiB: fewer than the first 1,000 rows fit in 8 MiB, so those that do decide the columns,
    in a 9 MiB file as in a 20 MiB one; a string in an integer column just past them is a bad row in both."""
    pad = "p" * (9 << 10)
    for mib in (9, 20):
        n = (mib << 20) // (len(pad) + 30)
        with open(tmp_path / f"{mib}.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": i if i != 950 else "abc", "pad": pad}) + "\n")
        assert 950 * (len(pad) + 30) > lines.jsonvalues.SCHEMA_BYTES
        ds = StreamingDataset(local=str(tmp_path / f"{mib}.jsonl"))
        assert ds.shards[0].types == ("int64", "json")
        with pytest.raises(BadRowError, match=rf"{mib}\.jsonl line 951: column 'id' holds \"abc\" \(a string\), "
                                              "but an integer in the file's first rows"):
            list(ds)


def nested(depth: int) -> str:
    """JSON text of a value nested ``depth`` levels deep: objects holding lists holding objects ..."""
    text = "7"
    for k in range(depth):
        text = f"[{text}]" if k % 2 else f'{{"a": {text}, "n": [1, 2]}}'
    return text


def unnest(value, depth: int):
    """The innermost value of :func:`nested`'s, checking each level on the way (lists of numbers are arrays)."""
    for k in reversed(range(depth)):
        if k % 2:
            assert type(value) is list and len(value) == 1
            value = value[0]
        else:
            assert type(value) is dict and np.array_equal(value["n"], [1, 2]) and value["n"].dtype == np.int64
            value = value["a"]
    return value


@pytest.mark.parametrize("fast", [True, False])
def test_values_nested_as_deep_as_the_parser_reads_are_read(tmp_path, monkeypatch, fast):
    if not fast:
        monkeypatch.setattr(lines.jsonvalues, "_orjson", None)
    depths = (500, 1000) if fast else (500,)  # orjson reads 1,024 levels, the standard parser fewer
    for depth in depths:
        path = write(str(tmp_path / f"{depth}.jsonl"),
                     "".join(f'{{"id": {i}, "x": {nested(depth)}}}\n' for i in range(3)).encode())
        ds = StreamingDataset(local=path, batch_size=3)
        got = list(ds)
        assert [s["id"] for s in got] == [0, 1, 2] and all(unnest(s["x"], depth) == 7 for s in got)
        assert unnest(next(iter(ds.iterate_batches()))["x"][2], depth) == 7


def test_a_value_nested_deeper_than_the_parser_reads_is_a_bad_row(tmp_path):
    path = write(str(tmp_path / "deep.jsonl"), f'{{"x": 1}}\n{{"x": {nested(1500)}}}\n{{"x": 3}}\n'.encode())
    with pytest.raises(BadRowError, match=r"deep\.jsonl line 2: it is nested deeper than a row may be \(orjson "
                                          "parses 1,024 levels"):
        list(StreamingDataset(local=path))
    with pytest.warns(UserWarning, match="1 row"):
        assert [s["x"] for s in StreamingDataset(local=path, on_bad_rows="skip")] == [1, 3]


def test_a_dangling_symbolic_link_among_the_files_is_refused_naming_it(tmp_path):
    d = tmp_path / "d"
    write_jsonl(str(d / "a.jsonl"), rows(3))
    os.symlink(str(tmp_path / "gone.jsonl"), str(d / "b.jsonl"))
    for given in (str(d), str(d / "*.jsonl"), [str(d / "a.jsonl"), str(d / "b.jsonl")]):
        with pytest.raises(ShardNotFoundError, match=re.escape(f"{d / 'b.jsonl'} is a symbolic link to "
                                                               f"{tmp_path / 'gone.jsonl'}, which does not exist; "
                                                               "restore its target, or remove the link")):
            StreamingDataset(local=given)
    os.remove(d / "b.jsonl")
    os.symlink(str(d / "a.jsonl"), str(d / "b.jsonl"))  # a link to a file is read as the file
    assert len(StreamingDataset(local=str(d))) == 6
