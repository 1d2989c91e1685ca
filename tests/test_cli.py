"""The command line, run as a real process: ``python -m shardstream inspect|verify``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import shardstream


def cli(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "shardstream", *map(str, args)],
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
    assert f"{2 * n} digests checked, 100 samples decoded" in proc.stdout
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
    out = make_dataset(tmp_path, {"s": "str"}, [{"s": "abc"}, {"s": b"\xff\xfe"}], hashes=[])  # invalid UTF-8
    proc = cli("verify", out, check_rc=1)
    assert "DAMAGED shard 0 (shard.00000.mds)" in proc.stdout and "CorruptShardError" in proc.stdout
    assert "sample 1: " in proc.stdout and "(1 of 2 samples fail to decode)" in proc.stdout
    # --quick checks files and digests only, so the damaged value goes unnoticed, and nothing is verified
    proc = cli("verify", "--quick", out, check_rc=3)
    assert proc.stdout.startswith("NOT VERIFIED: 1 of 1 shards record no digest") and "--quick" in proc.stdout


def test_unhashed_dataset_with_a_flipped_int_is_not_verified(tmp_path, make_dataset, parse_shard):
    samples = [{"id": i, "text": f"row {i}"} for i in range(50)]
    out = make_dataset(tmp_path, {"id": "int", "text": "str"}, samples, hashes=[])
    shard = parse_shard(open(os.path.join(out, "shard.00000.mds"), "rb").read())
    flip(os.path.join(out, "shard.00000.mds"), shard.offsets[7] + 4)  # inside sample 7's int
    assert shardstream.StreamingDataset(local=out)[7]["id"] != 7  # the damage is there, and undetectable
    proc = cli("verify", out, check_rc=3)
    assert proc.stdout.startswith("NOT VERIFIED: 1 of 1 shards record no digest")
    assert "all 50 samples checked, no problems" in proc.stdout and "0 digests checked" in proc.stdout
    assert "hashes=['xxh3_64']" in proc.stdout and "OK" not in proc.stdout
    # with MDSWriter's default digest the same flip is found
    out = make_dataset(tmp_path, {"id": "int", "text": "str"}, samples, subdir="hashed")
    flip(os.path.join(out, "shard.00000.mds"), shard.offsets[7] + 4)
    proc = cli("verify", out, check_rc=1)
    assert "HashMismatchError" in proc.stdout and "xxh3_64" in proc.stdout


@pytest.mark.parametrize("column, bad, found", [
    ("json", b'{"a": 1', "invalid JSON"),
    ("ndarray:int32", b"\x01\x02\x03\x04\x05", "ndarray:int32 column has a damaged header"),
    ("ndarray", b"\x21\x04\x02\x00\x00\x00", "needs 8 bytes, found 3"),
    ("str_int", b"12x", "not an integer"),
])
def test_verify_decodes_every_sample_of_an_unhashed_dataset(tmp_path, make_dataset, column, bad, found):
    good = {"json": {"a": 1}, "ndarray:int32": np.arange(3, dtype=np.int32),
            "ndarray": np.arange(3, dtype=np.int32), "str_int": 12}[column]
    samples = [{"v": good}] * 5 + [{"v": bad}] + [{"v": good}] * 3 + [{"v": bad}]
    out = make_dataset(tmp_path, {"v": column}, samples, hashes=[])
    proc = cli("verify", out, check_rc=1)
    assert "DAMAGED shard 0" in proc.stdout and "sample 5: " in proc.stdout and found in proc.stdout, proc.stdout
    assert "(2 of 10 samples fail to decode)" in proc.stdout


def test_help_documents_the_exit_codes_and_options():
    for args in (["--help"], ["verify", "--help"]):
        out = cli(*args, check_rc=0).stdout
        assert "exit status" in out and "3  not verified" in out and "1  damage found" in out
    for command in ("inspect", "verify"):
        assert "--storage-option KEY=VALUE" in cli(command, "--help", check_rc=0).stdout


def test_file_url_and_storage_option_parsing(dataset, load_index):
    n = len(load_index(dataset)["shards"])
    url = "file://" + dataset
    info = json.loads(cli("inspect", "--json", url, check_rc=0).stdout)
    assert info["shards"] == n and info["samples"] == 100 and info["path"] == url
    assert cli("verify", url, "--storage-option", "auto_mkdir=false", check_rc=0).stdout.startswith("OK:")
    proc = cli("inspect", url, "--storage-option", "novalue", check_rc=2)
    assert "key=value" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("inspect", "file://" + dataset + "-missing", check_rc=2)
    assert "index.json" in proc.stderr and "Traceback" not in proc.stderr


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


class _Boom:
    """Unpickling this writes a file: proof that reading ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_verify_never_unpickles_a_pkl_column(tmp_path, make_dataset):
    proof = tmp_path / "unpickled"
    ds = make_dataset(tmp_path, {"id": "int", "obj": "pkl"}, [{"id": 0, "obj": _Boom(str(proof))}])
    assert not proof.exists()
    report = shardstream.verify_dataset(ds)
    assert report.verified and report.samples_decoded == 1
    assert not proof.exists(), "verify ran code stored in a pkl column"
