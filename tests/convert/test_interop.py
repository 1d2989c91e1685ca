"""A converted dataset (zstd, digests, several parts of several shards) reads with the real mosaicml-streaming
exactly as with shardstream: the peer runs ``tests/interop/peer_mds.py read`` in its own virtualenv."""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

import shardstream

pytestmark = pytest.mark.interop

REPO_ROOT = Path(__file__).resolve().parents[2]
INTEROP = REPO_ROOT / "tests" / "interop"
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")


def peer_python() -> str:
    configured = os.environ.get("SHARDSTREAM_PEER_PYTHON")
    path = Path(configured) if configured else REPO_ROOT / ".venv-peers" / "bin" / "python"
    if not path.exists():
        pytest.fail(f"interop tests need the peer virtualenv with mosaicml-streaming ({path} does not exist): run "
                    "`make peers`, or set SHARDSTREAM_PEER_PYTHON to that venv's python", pytrace=False)
    return str(path)


def norm_sample():
    spec = importlib.util.spec_from_file_location("interop_samples", INTEROP / "samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.norm_sample


def peer_read(datadir: Path, tmp: Path) -> dict:
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"PYTHONPATH": str(REPO_ROOT / "tests" / "peer_stubs"), "TMPDIR": str(tmp)}
    options = tmp / "options.json"
    options.write_text('{"validate_hash": "sha1"}')
    result = tmp / "read.pkl"
    proc = subprocess.run([peer_python(), str(INTEROP / "peer_mds.py"), "read", str(datadir), str(result),
                           str(options)], env=env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(result, "rb") as f:
        return pickle.load(f)


def test_mosaicml_streaming_reads_a_conversion(tmp_path, write_parquet):
    write_parquet(tmp_path / "in", files=3, rows=60, row_group_size=25)
    out = tmp_path / "out"
    result = shardstream.convert(str(tmp_path / "in"), str(out), shard_per_input=True, workers=1,
                                 compression="zstd", hashes=["sha1", "xxh64"], size_limit=2048)
    assert result.parts == 3 and result.shards > 6, "several parts of several shards"
    shutil.copytree(out, tmp_path / "peer")  # the peer may decompress shards in place
    peer = peer_read(tmp_path / "peer", tmp_path / "peer-tmp")

    norm = norm_sample()
    ds = shardstream.StreamingDataset(local=str(out), batch_size=1)
    ours = [norm(ds[i]) for i in range(len(ds))]
    assert peer["len"] == peer["num_samples"] == len(ours) == 180
    assert peer["iter"] == ours
    assert [peer["items"][i] for i in range(len(ours))] == ours
