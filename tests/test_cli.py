"""The command line, run as a real process: ``python -m shardstream.cli.main inspect|verify``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import shardstream


def cli(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "shardstream.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def dataset(tmp_path, make_dataset):
    samples = [{"id": i, "text": f"row {i} " * (i % 5 + 1)} for i in range(100)]
    return make_dataset(tmp_path, {"id": "int", "text": "str"}, samples, size_limit=1024, hashes=["sha1", "xxh64"])


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x55]))


def test_inspect_text(dataset, load_index):
    index = load_index(dataset)
    proc = cli("inspect", dataset, check_rc=0)
    out = proc.stdout
    assert f"shards       {len(index['shards'])}" in out
    assert "samples      100 " in out
    assert "id" in out and "int" in out and "text" in out and "str" in out
    assert "none (" in out  # compression summary
    assert "sha1, xxh64" in out


def test_inspect_json(tmp_path, make_dataset, load_index):
    out = make_dataset(tmp_path, {"a": "int", "v": "ndarray:int32"},
                       [{"a": i, "v": np.arange(i + 1, dtype=np.int32)} for i in range(40)],
                       size_limit=512, compression="zstd:5", hashes=["xxh64"])
    index = load_index(out)
    info = json.loads(cli("inspect", "--json", out, check_rc=0).stdout)
    shards = index["shards"]
    assert info["shards"] == len(shards)
    assert info["samples"] == 40
    assert info["raw_bytes"] == sum(s["raw_data"]["bytes"] for s in shards)
    assert info["stored_bytes"] == sum(s["zip_data"]["bytes"] for s in shards)
    assert info["columns"] == {"a": "int", "v": "ndarray:int32"}
    assert info["compression"] == {"zstd:5": len(shards)}
    assert info["hashes"] == ["xxh64"]
    assert info["size_limit"] == 512
    assert info["samples_per_shard"] == {"min": min(s["samples"] for s in shards),
                                         "max": max(s["samples"] for s in shards)}
    assert info == shardstream.inspect_dataset(out) | {"path": out}


def test_verify_good_dataset(dataset, load_index):
    n = len(load_index(dataset)["shards"])
    proc = cli("verify", dataset, check_rc=0)
    assert proc.stdout.startswith("OK:")
    assert f"{n} shards, 100 samples" in proc.stdout
    assert f"{2 * n} digests checked" in proc.stdout
    assert cli("verify", "--quick", dataset, check_rc=0).stdout.startswith("OK:")


def test_verify_good_compressed_dataset(tmp_path, make_dataset, load_index):
    out = make_dataset(tmp_path, {"s": "str"}, [{"s": "x" * i} for i in range(200)], size_limit=2048,
                       compression="gz", hashes=["md5"])
    n = len(load_index(out)["shards"])
    proc = cli("verify", out, check_rc=0)
    assert f"{2 * n} digests checked" in proc.stdout  # compressed and raw


def test_verify_flipped_byte(dataset):
    flip(os.path.join(dataset, "shard.00001.mds"), 200)
    for args in (["verify", dataset], ["verify", "--quick", dataset]):
        proc = cli(*args, check_rc=1)
        assert "DAMAGED shard 1 (shard.00001.mds)" in proc.stdout
        assert "HashMismatchError" in proc.stdout
        assert "shard.00000.mds" not in proc.stdout
        assert "1 damaged shard(s)" in proc.stdout


def test_verify_without_hashes_decodes_samples(tmp_path, make_dataset, load_index):
    out = make_dataset(tmp_path, {"s": "str"}, [{"s": "abc"}, {"s": b"\xff\xfe"}])  # invalid UTF-8 stored raw
    proc = cli("verify", out, check_rc=1)
    assert "DAMAGED shard 0 (shard.00000.mds)" in proc.stdout and "CorruptShardError" in proc.stdout
    # --quick checks files and digests only, so the damaged value goes unnoticed
    cli("verify", "--quick", out, check_rc=0)


def test_verify_missing_and_truncated_shards(dataset):
    os.unlink(os.path.join(dataset, "shard.00002.mds"))
    path = os.path.join(dataset, "shard.00000.mds")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    proc = cli("verify", dataset, check_rc=1)
    assert "DAMAGED shard 0 (shard.00000.mds)" in proc.stdout
    assert "DAMAGED shard 2 (shard.00002.mds)" in proc.stdout and "ShardNotFoundError" in proc.stdout
    assert "2 damaged shard(s)" in proc.stdout


def test_missing_index_exits_2(tmp_path):
    (tmp_path / "nothing").mkdir()
    for command in ("verify", "inspect"):
        proc = cli(command, tmp_path / "nothing", check_rc=2)
        assert proc.stderr.startswith("error: ")
        assert "index.json" in proc.stderr and "nothing" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_corrupt_index_exits_2(dataset):
    with open(os.path.join(dataset, "index.json"), "w") as f:
        f.write("{broken")
    proc = cli("verify", dataset, check_rc=2)
    assert "error: " in proc.stderr and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_progress_and_version(dataset):
    proc = cli("verify", "--progress", dataset, check_rc=0)
    assert "verify [" in proc.stderr and "shards" in proc.stderr
    proc = cli("--version", check_rc=0)
    assert proc.stdout.strip() == f"shardstream {shardstream.__version__}"


def test_usage_errors(dataset):
    assert cli().returncode == 2
    assert cli("frobnicate", dataset).returncode == 2
