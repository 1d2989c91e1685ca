"""JSON, CSV, TSV and XSV shard datasets through merge_index, verify_dataset, inspect_dataset and the CLI,
which know their .meta files; a text format named on a Stream refuses an index of another format."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import shardstream
from shardstream import CSVWriter, JSONWriter, MDSWriter, Stream, StreamingDataset, TSVWriter
from shardstream.compat.util import merge_index

COLUMNS = {"n": "int", "word": "str"}


def _write(writer, out, count=30, **kwargs):
    with writer(out=str(out), columns=COLUMNS, size_limit=200, **kwargs) as w:
        for i in range(count):
            w.write({"n": i, "word": f"w{i}"})
    return str(out)


@pytest.fixture
def parts(tmp_path):
    _write(CSVWriter, tmp_path / "a")
    _write(JSONWriter, tmp_path / "b", compression="zstd", hashes=["sha1"])
    _write(MDSWriter, tmp_path / "c", count=10)
    return tmp_path


def test_merged_text_shards_keep_their_meta_files(parts):
    merged = merge_index(str(parts))
    metas = [s.raw_meta.basename for s in merged if hasattr(s, "raw_meta")]
    assert metas and all(m.startswith(("a/", "b/")) and m.endswith(".meta") for m in metas)
    assert all(s.zip_meta.basename.startswith("b/") for s in merged if getattr(s, "zip_meta", None))
    ds = StreamingDataset(local=str(parts), batch_size=1)
    assert sorted(row["n"] for row in ds) == sorted([*range(30), *range(30), *range(10)])
    assert shardstream.verify_dataset(str(parts)).ok


def test_verify_checks_both_files_of_a_text_shard(tmp_path):
    out = _write(JSONWriter, tmp_path / "j", compression="zstd", hashes=["sha1"])
    good = shardstream.verify_dataset(out)
    assert good.verified and good.samples_decoded == 30
    shards = shardstream.StreamingDataset(local=out, batch_size=1).shards
    assert good.hashes_checked == 4 * len(shards)  # data and meta, compressed and not
    os.remove(os.path.join(out, shards[1].zip_meta.basename))
    report = shardstream.verify_dataset(out)
    assert [p.shard for p in report.problems] == [1] and "shard.00001.json.meta.zstd" in report.problems[0].error


def test_verify_decodes_every_line(tmp_path):
    out = _write(TSVWriter, tmp_path / "t")
    data = os.path.join(out, "shard.00000.tsv")
    with open(data, "r+b") as f:  # a number column's digit becomes a letter, same size
        text = f.read()
        at = text.index(b"\t", text.index(b"\n") + 1) - 1
        f.seek(at)
        f.write(b"x")
    report = shardstream.verify_dataset(out)
    assert not report.ok and "fail to decode" in report.problems[0].error
    assert shardstream.verify_dataset(out, decode_samples=False).ok  # unhashed: sizes alone look right


def test_inspect_counts_meta_files_and_formats(parts, capsys):
    merge_index(str(parts))
    info = shardstream.inspect_dataset(str(parts))
    shards = StreamingDataset(local=str(parts), batch_size=1).shards
    metas = [s for s in shards if hasattr(s, "raw_meta")]
    assert info["formats"] == {"csv": sum(s.format == "csv" for s in metas),
                               "json": sum(s.format == "json" for s in metas), "mds": len(shards) - len(metas)}
    assert info["raw_bytes"] == sum(s.raw_data.bytes for s in shards) + sum(s.raw_meta.bytes for s in metas)
    assert info["stored_bytes"] == sum(s.stored.bytes for s in shards) + sum(s.stored_meta.bytes for s in metas)


def test_the_cli_checks_and_inspects_text_shards(tmp_path):
    out = _write(CSVWriter, tmp_path / "c", hashes=["xxh64"])
    run = [sys.executable, "-m", "shardstream"]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(shardstream.__path__[0])}
    verify = subprocess.run(run + ["verify", out], capture_output=True, text=True, env=env)
    assert verify.returncode == 0 and verify.stdout.startswith("OK:") and "30 samples decoded" in verify.stdout
    inspect = subprocess.run(run + ["inspect", out], capture_output=True, text=True, env=env, check=True)
    assert "samples      30" in inspect.stdout


@pytest.mark.parametrize("fmt", ["mds-csv", "mds-json", "mds-tsv"])
def test_a_text_format_refuses_an_index_of_another_format(tmp_path, fmt):
    mds = _write(MDSWriter, tmp_path / "m", count=5)
    with pytest.raises(ValueError, match=rf"format='{fmt}' reads .* lists 'shard.00000.mds' of format 'mds'"):
        StreamingDataset(streams=[Stream(local=mds, format=fmt)], batch_size=1)


def test_a_text_format_reads_its_own_shards(tmp_path):
    csv = _write(CSVWriter, tmp_path / "c", count=5)
    ds = StreamingDataset(streams=[Stream(local=csv, format="mds-csv")], batch_size=1)
    assert [row["n"] for row in ds] == list(range(5))
    with pytest.raises(ValueError, match="pass format='mds-csv'"):
        StreamingDataset(streams=[Stream(local=csv, format="mds-json")], batch_size=1)
