"""Inputs and output on a loopback S3 server (moto) and inputs over HTTP: the converted dataset streams back
from the bucket, a rerun on S3 resumes, and a missing bucket is a clear refusal."""

from __future__ import annotations

import json
import os
import shutil

import shardstream
from shardstream.cli.main import main


def test_s3_to_s3_and_resume(s3_server, s3_bucket, tmp_path, write_parquet, read_rows):
    rows = write_parquet(tmp_path / "in", files=3, rows=40)
    s3_server.upload_dir(str(tmp_path / "in"), f"{s3_bucket}/in")
    opts = s3_server.storage_options
    out = f"{s3_bucket}/out"
    result = shardstream.convert(f"{s3_bucket}/in", out, shard_per_input=True, workers=1, compression="zstd",
                                 storage_options=opts, verify=True)
    assert (result.parts, result.converted, result.rows) == (3, 3, 120)
    assert result.verified == {"rows": 120, "compared": 120}
    assert read_rows(None, remote=out, local=str(tmp_path / "cache"), storage_options=opts) == rows

    fs = s3_server.filesystem()
    bucket = s3_bucket[len("s3://"):]
    names = sorted(p.split("/", 2)[2] for p in fs.find(f"{bucket}/out"))
    assert names == ["index.json", "part-00000/index.json", "part-00000/shard.00000.mds.zstd",
                     "part-00001/index.json", "part-00001/shard.00000.mds.zstd", "part-00002/index.json",
                     "part-00002/shard.00000.mds.zstd", "shardstream-convert.json"]
    shard = fs.cat_file(f"{bucket}/out/part-00002/shard.00000.mds.zstd")
    fs.rm(f"{bucket}/out/part-00001/index.json")  # a part a killed run left unfinished
    again = shardstream.convert(f"{s3_bucket}/in", out, shard_per_input=True, workers=1, compression="zstd",
                                storage_options=opts)
    assert (again.parts, again.converted, again.rows) == (3, 1, 120)
    assert fs.cat_file(f"{bucket}/out/part-00002/shard.00000.mds.zstd") == shard
    done = shardstream.convert(f"{s3_bucket}/in", out, shard_per_input=True, compression="zstd",
                               storage_options=opts)
    assert done.nothing_to_do
    assert read_rows(None, remote=out, local=str(tmp_path / "cache2"), storage_options=opts) == rows


def test_http_inputs(http_server, tmp_path, write_parquet, read_rows):
    rows = write_parquet(tmp_path / "in", files=2, rows=30)
    for name in ("f000.parquet", "f001.parquet"):
        shutil.copy(tmp_path / "in" / name, os.path.join(http_server.root, name))
    urls = [f"{http_server.url}/f001.parquet", f"{http_server.url}/f000.parquet"]
    result = shardstream.convert(urls, str(tmp_path / "out"), workers=1, verify=10)
    assert result.rows == 60 and result.verified["rows"] == 60
    assert read_rows(tmp_path / "out") == rows[30:] + rows[:30]


def test_missing_bucket_refused(s3_server, tmp_path, write_parquet, capsys):
    write_parquet(tmp_path / "in", files=1)
    options = [arg for key, value in s3_server.storage_options.items()
               for arg in ("--storage-option", f"{key}={json.dumps(value)}")]
    assert main(["convert", "s3://no-such-bucket-here/in/*.parquet", str(tmp_path / "out"), *options]) == 2
    err = capsys.readouterr().err
    assert "no-such-bucket-here" in err, err
    assert main(["convert", str(tmp_path / "in"), "s3://no-such-bucket-here/out", *options]) == 2
    err = capsys.readouterr().err
    assert "writing s3://no-such-bucket-here/out/shardstream-convert.json failed" in err, err
    assert "bucket does not exist" in err and "storage_options" in err
