"""``shardstream convert`` on every kind of input it reads: the dataset read back holds the input's rows in
order; and the refusals (exit status 2) say what was wrong and how to fix it.

Starting a process costs more than converting these inputs, so each kind runs through the command line's
entry point (``shardstream.cli.main.main(argv)``: parsing, printing, exit status) in this process, and the
cases about the process itself (progress on stderr, exit statuses, messages) run ``python -m shardstream``."""

from __future__ import annotations

import gzip
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.cli.main import main

FLAT = [{"id": r["id"], "text": r["text"], "score": r["score"]} for r in [
    {"id": i, "text": f"row {i}, \"quoted\"" if i % 7 == 0 else f"row {i}", "score": i / 4} for i in range(40)]]


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _arrow(path, table, stream: bool) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        opener = pa.ipc.new_stream if stream else pa.ipc.new_file
        with opener(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=15):
                writer.write_batch(batch)


def _images(root) -> list[dict]:
    from PIL import Image

    rows = []
    for label, cls in enumerate(["cats", "dogs"]):
        os.makedirs(root / cls)
        for k in range(3):
            image = Image.new("RGB", (8 + k, 5 + label), (40 * k, 100, 20 * label))
            buf = io.BytesIO()
            image.save(buf, format="JPEG")
            (root / cls / f"{k:03d}.jpg").write_bytes(buf.getvalue())
            rows.append({"size": image.size, "label": label})
    return rows


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, write_parquet, rows_of):
    """name -> (input arguments, the rows they hold in order)."""
    import pyarrow.csv as pc
    import zstandard

    root = tmp_path_factory.mktemp("inputs")
    rows = write_parquet(root / "pq")
    table = pa.Table.from_pylist(rows)
    found = {"parquet-glob": ([root / "pq" / "f*.parquet"], rows), "parquet-dir": ([root / "pq"], rows),
             "parquet-list": ([root / "pq" / "f002.parquet", root / "pq" / "f000.parquet"], rows[100:] + rows[:50])}
    for name, data in (("jsonl", _jsonl(rows)), ("jsonl.gz", gzip.compress(_jsonl(rows))),
                       ("jsonl.zst", zstandard.ZstdCompressor().compress(_jsonl(rows))),
                       ("json", json.dumps(rows).encode())):
        (root / f"data.{name}").write_bytes(data)
        found[name] = ([root / f"data.{name}"], rows)
    flat = pa.Table.from_pylist(FLAT)
    pc.write_csv(flat, root / "data.csv")
    pc.write_csv(flat, root / "data.tsv", pc.WriteOptions(delimiter="\t"))
    found |= {"csv": ([root / "data.csv"], FLAT), "tsv": ([root / "data.tsv"], FLAT)}
    _arrow(root / "file.arrow", table, stream=False)
    os.makedirs(root / "stream")
    _arrow(root / "stream" / "data.arrow", table, stream=True)
    found |= {"arrow-file": ([root / "file.arrow"], rows), "arrow-stream": ([root / "stream"], rows)}
    (root / "text").mkdir()
    (root / "text" / "a.txt").write_bytes("first line\nsecond, é\r\n\nlast without newline".encode())
    (root / "text" / "b.txt").write_bytes(b"b1\nb2\n")
    found["text"] = ([root / "text" / "*.txt"], [{"text": t} for t in
                                                 ["first line", "second, é", "", "last without newline", "b1", "b2"]])
    found["imagefolder"] = ([root / "images"], _images(root / "images"))
    return found


@pytest.fixture(scope="module")
def hf_inputs(tmp_path_factory, rows_of):
    import datasets

    root = tmp_path_factory.mktemp("hf")
    train, test = rows_of(30), rows_of(12, start=500)
    datasets.Dataset.from_list(train).save_to_disk(str(root / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(train),
                          "test": datasets.Dataset.from_list(test)}).save_to_disk(str(root / "dict"))
    return {"hf-saved": ([root / "saved"], [], train), "hf-dict-test": ([root / "dict"], ["--split", "test"], test)}


KINDS = ["parquet-glob", "parquet-dir", "parquet-list", "jsonl", "jsonl.gz", "jsonl.zst", "json", "csv", "tsv",
         "arrow-file", "arrow-stream", "text"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_input_kind(kind, inputs, tmp_path, capsys, read_rows):
    args, rows = inputs[kind]
    out = tmp_path / "out"
    assert main(["convert", *map(str, args), str(out), "--json", "--verify", "--quiet"]) == 0
    printed = capsys.readouterr()
    result = json.loads(printed.out)
    assert printed.err == ""
    assert result["rows"] == len(rows) and result["converted"] == result["parts"] >= 1
    assert result["verified"] == {"rows": len(rows), "compared": len(rows)}
    assert read_rows(out) == rows
    if kind.startswith("parquet"):
        assert result["columns"] == {"id": "int64", "tokens": "ndarray:int32", "text": "str", "score": "float64",
                                     "flag": "uint8", "meta": "json"}


@pytest.mark.parametrize("kind", ["hf-saved", "hf-dict-test"])
def test_saved_hf_dataset(kind, hf_inputs, tmp_path, capsys, read_rows):
    args, options, rows = hf_inputs[kind]
    out = tmp_path / "out"
    assert main(["convert", *map(str, args), str(out), *options, "--json", "--verify"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == len(rows) and result["verified"]["rows"] == len(rows)
    assert read_rows(out) == rows


def test_image_folder_and_progress(inputs, tmp_path, cli):
    from shardstream import StreamingDataset

    args, rows = inputs["imagefolder"]
    out = tmp_path / "out"
    proc = cli("convert", *args, out, "--progress", "--verify", check_rc=0)
    assert "convert 100.0% | files 6/6 | parts 1/1 | 6 rows" in proc.stderr, proc.stderr
    assert "columns: image:jpeg, label:int64" in proc.stdout and "verified: 6 rows counted" in proc.stdout
    manifest = json.loads((out / "shardstream-convert.json").read_text())
    assert manifest["label_names"] == ["cats", "dogs"]
    ds = StreamingDataset(local=str(out), batch_size=1)
    assert [{"size": ds[i]["image"].size, "label": int(ds[i]["label"])} for i in range(len(ds))] == rows


def test_columns_override(inputs, tmp_path, capsys, read_rows):
    args, rows = inputs["parquet-dir"]
    out = tmp_path / "out"
    assert main(["convert", *map(str, args), str(out), "--json", "--columns", "id:int32", "tokens:ndarray:int16",
                 "meta:pkl"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["columns"] == {"id": "int32", "tokens": "ndarray:int16", "text": "str", "score": "float64",
                                 "flag": "uint8", "meta": "pkl"}
    from shardstream import StreamingDataset

    sample = StreamingDataset(local=str(out), batch_size=1, allow_unsafe_types=True)[7]
    assert sample["id"].dtype.name == "int32" and sample["tokens"].dtype.name == "int16"
    assert read_rows(out, allow_unsafe_types=True) == rows


# ---------------------------------------------------------------------------------------------- refusals

def _mixed(root, write_parquet, rows_of, schema):
    """f000 as the schema says, f001 with id as int32."""
    rows = write_parquet(root, files=1)
    more = rows_of(50, start=50)
    pq.write_table(pa.Table.from_pylist(more, schema=schema.set(0, pa.field("id", pa.int32()))),
                   root / "f001.parquet")
    return rows + more


def test_mixed_schemas_refused_then_cast(tmp_path, cli, write_parquet, rows_of, read_rows, arrow_schema, capsys):
    rows = _mixed(tmp_path / "in", write_parquet, rows_of, arrow_schema)
    out = tmp_path / "out"
    proc = cli("convert", tmp_path / "in", out, "--shard-per-input", "--workers", "1", check_rc=2)
    assert "f001.parquet has column 'id' of type int32 where the first input has int64" in proc.stderr, proc.stderr
    assert "--on-schema-mismatch=cast" in proc.stderr
    out2 = tmp_path / "out2"
    assert main(["convert", str(tmp_path / "in"), str(out2), "--on-schema-mismatch=cast", "--quiet"]) == 0
    printed = capsys.readouterr()
    assert printed.out == printed.err == ""
    assert read_rows(out2) == rows


def test_bad_row_named(tmp_path, capsys, write_parquet, rows_of, arrow_schema):
    write_parquet(tmp_path / "in", files=1)
    bad = pa.Table.from_pylist(rows_of(10, start=50), schema=arrow_schema)
    ids = bad.column("id").to_pylist()
    ids[7] = None
    bad = bad.set_column(0, "id", pa.array(ids, pa.int64()))
    pq.write_table(bad, tmp_path / "in" / "f001.parquet")
    assert main(["convert", str(tmp_path / "in"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "row 7 of f001.parquet: column 'id' (int64) is null" in err, err
    assert not (tmp_path / "out" / "index.json").exists()


def _compressed(codec: str, data: bytes) -> bytes:
    import bz2
    import lzma

    import zstandard

    if codec == "zst":  # one frame per 4 KiB, as streaming compressors write
        compress = zstandard.ZstdCompressor().compress
        return b"".join(compress(data[k:k + 4096]) for k in range(0, len(data), 4096))
    return {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[codec](data)


@pytest.mark.parametrize("name", ["data.jsonl.zst", "data.csv.zst", "data.txt.zst", "data.jsonl.gz", "data.csv.bz2",
                                  "data.txt.xz"])
def test_a_compressed_input_cut_short_is_refused_naming_it(tmp_path, capsys, name):
    """Arrow's decompressing stream said only 'OSError: Truncated compressed stream'; the refusal is typed and
    names the file, whatever the codec."""
    import shardstream
    from shardstream.errors import CorruptShardError

    kind, codec = name.split(".")[1:]
    data = {"jsonl": _jsonl(FLAT * 50), "csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(2000)),
            "txt": b"".join(b"line %d\n" % i for i in range(3000))}[kind]
    blob = _compressed(codec, data)
    path = tmp_path / "in" / name
    path.parent.mkdir()
    path.write_bytes(blob[:len(blob) // 2])
    codec_name = {"zst": "zstd", "gz": "gzip", "bz2": "bz2", "xz": "xz"}[codec]
    assert main(["convert", str(path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path} cannot be read as {codec_name} (" in err and "damaged or truncated" in err, err
    with pytest.raises(CorruptShardError, match=f"{name.replace('.', '[.]')} cannot be read as {codec_name}"):
        shardstream.convert(str(path), str(tmp_path / "out2"))


def test_output_not_ours_refused(parquet_dir, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["convert", parquet_dir[0], str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not empty and holds no conversion" in err and "--overwrite" in err, err
    assert os.listdir(out) == ["notes.txt"]


def test_unreachable_url(tmp_path, cli):
    proc = cli("convert", "http://127.0.0.1:9/x.parquet", tmp_path / "out", check_rc=2)
    assert "http://127.0.0.1:9/x.parquet" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_unknown_encoding(parquet_dir, tmp_path, capsys):
    assert main(["convert", parquet_dir[0], str(tmp_path / "out"), "--columns", "id:int99"]) == 2
    assert "unknown column encoding 'int99'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
