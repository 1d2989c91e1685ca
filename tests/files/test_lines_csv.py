"""CSV and TSV files: records with quoted newlines cut into pieces of whole records, column types inferred
once and enforced for every piece, bad rows (another number of fields, a value of another type) raised or
skipped by file and line, columns=, compressed files, and column batches equal to the stacked samples."""

from __future__ import annotations

import csv
import datetime
import io
import os

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.errors import BadRowError, CorruptShardError, InvalidArgumentError
from shardstream.format import csvrows, lineindex
from shardstream.format.batch import stack_samples
from shardstream.format.lines import CSV_FORMAT, skipped_rows

from .textdata import write

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.csv")

HEADER = ["id", "name", "score", "flag", "day"]


def record(i: int) -> list:
    name = [f"plain {i}", f'quoted, "with" a comma {i}', f"two\nlines {i}", f"crlf\r\ninside {i}", ""][i % 5]
    return [i, name, i / 8, ["true", "false"][i % 2], f"2024-01-{i % 28 + 1:02d}"]


def csv_bytes(records, delimiter: str = ",", terminator: str = "\n", header=HEADER, quoting=csv.QUOTE_MINIMAL) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter, lineterminator=terminator, quoting=quoting)
    writer.writerow(header)
    writer.writerows(records)
    return buf.getvalue().encode()


def want(i: int) -> dict:
    r = record(i)
    return {"id": i, "name": r[1], "score": i / 8, "flag": i % 2 == 0,
            "day": datetime.date(2024, 1, i % 28 + 1)}


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(lineindex, "PIECE_BYTES", 300)
    monkeypatch.setattr(lineindex, "BLOCK", 128)


def test_records_with_quoted_newlines_read_exactly_from_many_pieces(tmp_path, small_pieces):
    path = write(str(tmp_path / "t.csv"), csv_bytes([record(i) for i in range(60)], terminator="\r\n"))
    ds = StreamingDataset(local=path, batch_size=6)
    assert len(ds) == 60 and len(ds.shards) > 5 and ds.column_names == tuple(HEADER)
    assert ds.shards[0].types == ("int64", "string", "double", "bool", "date32[day]")
    got = list(ds)
    assert got == [want(i) for i in range(60)]
    assert type(got[3]["id"]) is int and type(got[3]["score"]) is float and type(got[3]["flag"]) is bool
    with open(path, "rb") as f:
        data = f.read()
    whole = pc.read_csv(io.BytesIO(data), parse_options=pc.ParseOptions(newlines_in_values=True))
    assert whole.to_pylist() == got  # as pyarrow reads the whole file
    for p in ds.shards:  # pieces of whole records: each parses on its own to its count
        assert pc.read_csv(io.BytesIO(data[p.start:p.stop]), read_options=pc.ReadOptions(column_names=HEADER),
                           parse_options=pc.ParseOptions(newlines_in_values=True)).num_rows == p.samples
    shuffled = [s["id"] for s in StreamingDataset(local=path, shuffle=True, shuffle_seed=1)]
    assert sorted(shuffled) == list(range(60)) and shuffled != list(range(60))


@pytest.mark.parametrize("shuffle", [False, True])
def test_column_batches_equal_the_stacked_samples(tmp_path, small_pieces, shuffle):
    path = write(str(tmp_path / "t.csv"), csv_bytes([record(i) for i in range(48)]))
    make = lambda: StreamingDataset(local=path, batch_size=8, shuffle=shuffle, shuffle_seed=2)  # noqa: E731
    samples = list(make())
    for j, batch in enumerate(make().iterate_batches()):
        stacked = stack_samples(samples[j * 8:(j + 1) * 8], CSV_FORMAT.kinds(make().shards[0]))
        assert batch["id"].dtype == np.int64 and np.array_equal(batch["id"], stacked["id"])
        assert batch["score"].dtype == np.float64 and np.array_equal(batch["score"], stacked["score"])
        assert batch["flag"].dtype == np.bool_ and np.array_equal(batch["flag"], stacked["flag"])
        assert batch["name"] == stacked["name"] and batch["day"] == stacked["day"]


def test_tsv_columns_and_compressed_files(tmp_path, small_pieces):
    tsv = write(str(tmp_path / "t.tsv"), csv_bytes([record(i) for i in range(20)], delimiter="\t"))
    assert list(StreamingDataset(local=tsv)) == [want(i) for i in range(20)]
    ds = StreamingDataset(local=tsv, columns=["score", "id"])
    assert ds.column_names == ("score", "id") and list(ds) == [{"score": i / 8, "id": i} for i in range(20)]
    with pytest.raises(InvalidArgumentError, match=r"column 'label' is not in .*t\.tsv \(its header has"):
        StreamingDataset(local=tsv, columns=["id", "label"])
    packed = write(str(tmp_path / "z" / "t.csv.gz"), csv_bytes([record(i) for i in range(30)]), "gzip")
    ds = StreamingDataset(local=packed)
    assert len(ds.shards) == 1 and ds.shards[0].start == -1 and list(ds) == [want(i) for i in range(30)]
    assert [s["id"] for s in StreamingDataset(local=packed, columns=["id"])] == list(range(30))


def test_empty_and_header_only_files_have_no_rows(tmp_path):
    d = tmp_path / "d"
    write(str(d / "a.csv"), b"")
    write(str(d / "b.csv"), b"id,name\n")
    write(str(d / "c.csv"), b"\n\nid,name\n\n1,x\n\n")
    ds = StreamingDataset(local=str(d))
    assert list(ds) == [{"id": 1, "name": "x"}]


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    path = write(str(tmp_path / "t.csv"), b"a,b,a\n1,2,3\n")
    with pytest.raises(CorruptShardError, match="the header names column 'a' more than once"):
        StreamingDataset(local=path)


def _bad_file(tmp_path, short: bool = True) -> tuple[str, list[int]]:
    """60 records, with record 31 short of a field and record 44 'x' where the ids are integers."""
    records = [record(i) for i in range(60)]
    if short:
        records[31] = records[31][:3]
    records[44] = ["x"] + records[44][1:]
    path = write(str(tmp_path / ("bad.csv" if short else "misfit.csv")), csv_bytes(records))
    return path, [i for i in range(60) if i not in (31, 44)]


def _line_of(path: str, i: int) -> int:
    """The 1-based line on which record ``i`` starts (records hold newlines)."""
    with open(path, "rb") as f:
        data = f.read()
    ends = [0] + [k + 1 for k in lineindex.RecordEnds()(np.frombuffer(data, np.uint8)).tolist()]
    return data[:ends[i + 1]].count(b"\n") + 1


def test_bad_rows_raise_naming_file_and_line(tmp_path, small_pieces, monkeypatch):
    monkeypatch.setattr(csvrows, "INFER_BYTES", 200)  # the types come from the first records
    path, _ = _bad_file(tmp_path)
    ds = StreamingDataset(local=path)
    assert len(ds) == 60
    with pytest.raises(BadRowError, match=rf"bad\.csv line {_line_of(path, 31)}: it has 3 fields, but the header 5; "
                                          "fix or remove the row, or pass on_bad_rows='skip'"):
        list(ds)
    path, _ = _bad_file(tmp_path, short=False)
    with pytest.raises(BadRowError, match=rf"misfit\.csv line {_line_of(path, 44)}: a value does not convert to its "
                                          r"column's type \(CSV conversion error to int64: invalid value 'x'\)"):
        list(StreamingDataset(local=path, columns=["id"]))


def test_bad_rows_skip_counts_exactly(tmp_path, small_pieces, monkeypatch):
    monkeypatch.setattr(csvrows, "INFER_BYTES", 200)
    path, good = _bad_file(tmp_path)
    with pytest.warns(UserWarning, match=rf"bad\.csv: 2 row\(s\) that cannot be read were left out .*the first, at "
                                         rf"line {_line_of(path, 31)}: it has 3 fields"):
        ds = StreamingDataset(local=path, on_bad_rows="skip")
    assert len(ds) == 58 and skipped_rows(ds) == {"bad.csv": 2}
    assert list(ds) == [want(i) for i in good]
    assert [s["id"] for s in StreamingDataset(local=path, on_bad_rows="skip", shuffle=True)] != good


def test_too_many_values_of_another_type_are_refused_even_when_skipping(tmp_path, small_pieces, monkeypatch):
    monkeypatch.setattr(csvrows, "MAX_MISFITS", 3)
    monkeypatch.setattr(csvrows, "INFER_BYTES", 100)
    records = [[i, "x"] for i in range(60)] + [[f"n{i}", "y"] for i in range(20)]
    path = write(str(tmp_path / "t.csv"), csv_bytes(records, header=["id", "s"]))
    with pytest.raises(BadRowError, match=r"invalid value .n\d+.*after 3 such rows were left out of this part"):
        StreamingDataset(local=path, on_bad_rows="skip")


def test_read_through_the_cache(tmp_path, small_pieces):
    d = tmp_path / "data"
    write(str(d / "a.csv"), csv_bytes([record(i) for i in range(30)]))
    write(str(d / "b.csv.bz2"), csv_bytes([record(i) for i in range(30, 40)]), "bz2")
    cache = str(tmp_path / "cache")
    ds = StreamingDataset(remote=f"file://{d}", local=cache)
    assert list(ds) == [want(i) for i in range(40)]
    assert any(n.endswith(".piece") for n in os.listdir(cache)) and "b.csv.plain" in os.listdir(cache)


def _record_stops(chunks: list[bytes]) -> list[int]:
    """Where the records of ``chunks`` (a file cut into blocks) end, in the whole file."""
    return [offset + int(s) for offset, _, stops in lineindex.units(iter(chunks), lineindex.RecordEnds())
            for s in stops]


def test_a_lone_carriage_return_ends_a_record_wherever_the_blocks_are_cut():
    data = b'a,b\r1,"x\ry"\r\r2,"p\r\nq"\r\n3,z\n4,"w\r"\r5,v'
    whole = lineindex.unit_stops(np.frombuffer(data, np.uint8), lineindex.RecordEnds()).tolist()
    assert [data[a:b] for a, b in zip([0] + whole, whole)] == [
        b"a,b\r", b'1,"x\ry"\r', b"\r", b'2,"p\r\nq"\r\n', b"3,z\n", b'4,"w\r"\r', b"5,v"]
    for size in range(1, 8):
        assert _record_stops([data[k:k + size] for k in range(0, len(data), size)]) == whole
    for cut in range(1, len(data)):
        assert _record_stops([data[:cut], data[cut:]]) == whole
    assert lineindex.count_lines(np.frombuffer(data, np.uint8)) == 9  # as Python's universal newlines
    assert len(data.decode().splitlines()) == 10  # ... and the last line, which has no ending


def test_records_ending_with_a_lone_carriage_return_are_read_exactly(tmp_path, small_pieces):
    d = tmp_path / "d"
    mac = lambda n: csv_bytes([record(i) for i in range(n)], terminator="\r", quoting=csv.QUOTE_ALL)  # noqa: E731
    old_mac = write(str(d / "a.csv"), mac(60))  # quoted: fields with a newline or a \r\n inside stay one value
    write(str(d / "b.csv"), csv_bytes([record(i) for i in range(60, 70)]))
    alone = StreamingDataset(local=old_mac)
    assert len(alone) == 60 and len(alone.shards) > 3
    with open(old_mac, "rb") as f:
        whole = pc.read_csv(f, parse_options=pc.ParseOptions(newlines_in_values=True)).to_pylist()
    assert list(alone) == whole == [want(i) for i in range(60)]
    assert list(StreamingDataset(local=str(d))) == [want(i) for i in range(70)]  # beside a file ending lines with \n
    packed = write(str(tmp_path / "z" / "a.csv.gz"), mac(60), "gzip")
    assert list(StreamingDataset(local=packed)) == [want(i) for i in range(60)]


def test_bad_rows_of_a_file_with_lone_carriage_returns_are_named_by_line(tmp_path, small_pieces):
    records = [[i, f"n{i}"] for i in range(60)]
    records[41] = [41]
    path = write(str(tmp_path / "mac.csv"), csv_bytes(records, terminator="\r", header=["id", "name"]))
    with pytest.raises(BadRowError, match=r"mac\.csv line 43: it has 1 fields, but the header 2"):
        list(StreamingDataset(local=path))
    with pytest.warns(UserWarning, match=r"mac\.csv: 1 row\(s\) .* at line 43: it has 1 fields"):
        ds = StreamingDataset(local=path, on_bad_rows="skip")
    assert [s["id"] for s in ds] == [i for i in range(60) if i != 41]


def _ids_file(path: str, size: int, text_at: int, text: str = "abc") -> int:
    """A CSV file of about ``size`` bytes, ids and 1 KiB of padding per record, whose first record starting
    at or after byte ``text_at`` holds ``text`` as its id; returns that record's line."""
    pad = "p" * 1000
    out, done, line, at = [b"id,pad\n"], 7, 1, None
    while done < size:
        line += 1
        value = text if at is None and done >= text_at else str(line)
        at = line if value == text else at
        out.append(f"{value},{pad}\n".encode())
        done += len(out[-1])
    write(path, b"".join(out))
    return at


@pytest.mark.parametrize("text_at, types", [(csvrows.INFER_BYTES + 1000, ("int64", "string")),
                                            (csvrows.INFER_BYTES - 3000, ("string", "string"))],
                         ids=["past-the-window", "within-the-window"])
def test_column_types_come_from_the_first_8_mib_whatever_the_file_size(tmp_path, text_at, types):
    lines = {mib: _ids_file(str(tmp_path / f"{mib}.csv"), mib << 20, text_at) for mib in (9, 20)}
    assert lines[9] == lines[20]
    for mib in (9, 20):
        ds = StreamingDataset(local=str(tmp_path / f"{mib}.csv"))
        assert ds.shards[0].types == types
        if types[0] == "string":  # the text was in the window: the column holds strings, read as they are
            assert ds[lines[mib] - 2]["id"] == "abc" and ds[0]["id"] == "2"
            continue
        with pytest.raises(BadRowError, match=rf"{mib}\.csv line {lines[mib]}: a value does not convert to its "
                                              r"column's type \(CSV conversion error to int64: invalid value 'abc'\)"):
            list(ds)
        with pytest.warns(UserWarning, match=rf"1 row\(s\) .* at line {lines[mib]}: a value does not convert"):
            skipping = StreamingDataset(local=str(tmp_path / f"{mib}.csv"), on_bad_rows="skip")
        assert len(skipping) == len(ds) - 1 and skipped_rows(skipping) == {f"{mib}.csv": 1}
