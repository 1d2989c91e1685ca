"""``shardstream inspect|verify`` on a remote dataset (moto S3), run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fsspec
import pytest

import shardstream
from shardstream import MDSWriter


def cli(*args, env=None, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "shardstream", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def s3_dataset(tmp_path, s3_server, s3_bucket):
    local = tmp_path / "src"
    with MDSWriter(out=str(local), columns={"id": "int", "text": "str"}, size_limit=512, compression="zstd") as w:
        for i in range(100):
            w.write({"id": i, "text": f"row {i}"})
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(str(local), url)
    return url


def options_args(s3_server):
    """The moto server's storage options as repeated --storage-option key=value arguments."""
    return [arg for key, value in s3_server.storage_options.items()
            for arg in ("--storage-option", f"{key}={json.dumps(value)}")]


def bare_env(tmp_path):
    """No S3 endpoint or credentials in the environment: they come from --storage-option only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def test_inspect_s3(s3_server, s3_dataset, tmp_path):
    env = bare_env(tmp_path)
    info = json.loads(cli("inspect", "--json", s3_dataset, *options_args(s3_server), env=env, check_rc=0).stdout)
    want = shardstream.inspect_dataset(s3_dataset, storage_options=s3_server.storage_options)
    assert info == want and info["samples"] == 100 and info["shards"] > 3 and info["hashes"] == ["xxh3_64"]
    assert info["path"] == s3_dataset
    out = cli("inspect", s3_dataset, *options_args(s3_server), env=env, check_rc=0).stdout
    assert "samples      100 " in out and "zstd" in out
    assert os.listdir(env["TMPDIR"]) == []


def test_verify_s3_good_and_damaged(s3_server, s3_dataset, tmp_path):
    env = bare_env(tmp_path)
    proc = cli("verify", s3_dataset, *options_args(s3_server), env=env, check_rc=0)
    assert proc.stdout.startswith("OK:") and "100 samples decoded" in proc.stdout
    assert os.listdir(env["TMPDIR"]) == []  # the downloads are gone

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    root = s3_dataset.split("://", 1)[1]
    index = json.loads(fs.cat_file(f"{root}/index.json"))
    damaged = index["shards"][1]["zip_data"]["basename"]
    data = bytearray(fs.cat_file(f"{root}/{damaged}"))
    data[len(data) // 2] ^= 0x55
    fs.pipe_file(f"{root}/{damaged}", bytes(data))
    fs.rm_file(f"{root}/{index['shards'][2]['zip_data']['basename']}")
    cache = tmp_path / "cache"
    proc = cli("verify", s3_dataset, *options_args(s3_server), "--cache", cache, env=env, check_rc=1)
    assert f"DAMAGED shard 1 ({damaged}): HashMismatchError" in proc.stdout
    assert "DAMAGED shard 2" in proc.stdout and "DownloadError" in proc.stdout
    assert "2 damaged shard(s)" in proc.stdout
    assert os.listdir(env["TMPDIR"]) == []
    kept = sorted(os.listdir(cache))
    assert "index.json" in kept and damaged in kept and index["shards"][0]["zip_data"]["basename"] in kept


def test_remote_without_an_index_exits_2(s3_server, s3_bucket, tmp_path):
    env = bare_env(tmp_path)
    for command in ("inspect", "verify"):
        proc = cli(command, f"{s3_bucket}/nothing", *options_args(s3_server), env=env, check_rc=2)
        assert proc.stderr.startswith("error: no index.json at ") and "Traceback" not in proc.stderr
    assert os.listdir(env["TMPDIR"]) == []


def test_http_remote_without_an_index_is_index_not_found(http_server):
    """An HTTP store answers a missing index.json with 404: that is "no index", not a download failure."""
    with pytest.raises(shardstream.IndexNotFoundError, match="no index.json at "):
        shardstream.inspect_dataset(f"{http_server.url}/nothing")
