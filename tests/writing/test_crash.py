"""Crash safety: a writer process killed with SIGKILL mid-write leaves no index.json,
only complete shards and hidden temp files, and the directory can be rewritten."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

import pytest
import zstandard

from shardstream import IndexNotFoundError, MDSWriter, StreamingDataset

CHILD = r"""
import sys, time
import numpy as np
from shardstream import MDSWriter

out, compression = sys.argv[1], (sys.argv[2] or None)
rng = np.random.default_rng(0)
with MDSWriter(out=out, columns={"i": "int", "b": "bytes", "v": "ndarray:int32"}, size_limit="32kb",
               compression=compression, hashes=["xxh64"]) as w:
    for i in range(60_000):  # bounded: at most ~70 MB even if the parent never kills us
        w.write({"i": i, "b": rng.bytes(int(rng.integers(0, 1000))), "v": np.arange(i % 50 + 1, dtype=np.int32)})
    print("wrote everything", flush=True)
    time.sleep(120)  # still inside the with block: no index yet
"""

SHARD_RE = re.compile(r"shard\.(\d{5})\.mds(\.zstd)?")


def wait_for_shards(path, count, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early with {proc.returncode}: {proc.stderr.read()!r}")
        try:
            names = [n for n in os.listdir(path) if SHARD_RE.fullmatch(n)]
        except FileNotFoundError:
            names = []
        if len(names) >= count:
            return
        time.sleep(0.005)
    raise AssertionError(f"no {count} shards in {timeout}s")


def check_complete_shard(path, compressed):
    data = open(path, "rb").read()
    if compressed:
        data = zstandard.ZstdDecompressor().decompress(data)
    (n,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{n + 1}I", data, 4)
    assert n > 0
    assert offsets[-1] == len(data), f"{path}: incomplete shard"
    config = json.loads(data[4 + 4 * (n + 1):offsets[0]])
    assert config["column_names"] == ["b", "i", "v"]
    # the samples of one shard are consecutive
    # sample: u32 size of b, u32 size of v, then b, i (int64), v
    ids = [struct.unpack_from("<q", data, offsets[k] + 8 + struct.unpack_from("<I", data, offsets[k])[0])[0]
           for k in range(n)]
    assert ids == list(range(ids[0], ids[0] + n))


@pytest.mark.parametrize("compression", ["", "zstd"])
def test_sigkill_mid_write(tmp_path, compression):
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out), compression],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_shards(out, 3, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    names = os.listdir(out)
    assert "index.json" not in names
    shards = [n for n in names if SHARD_RE.fullmatch(n)]
    others = [n for n in names if not SHARD_RE.fullmatch(n)]
    assert len(shards) >= 3
    assert all(n.startswith(".tmp-") for n in others), others
    for n in shards:
        assert n.endswith(".zstd") == bool(compression)
        check_complete_shard(os.path.join(out, n), bool(compression))
    with pytest.raises(IndexNotFoundError):
        StreamingDataset(local=str(out))

    # Without exist_ok the leftovers are refused; with it they are replaced.
    with pytest.raises(FileExistsError):
        MDSWriter(out=str(out), columns={"i": "int"})
    with MDSWriter(out=str(out), columns={"i": "int"}, exist_ok=True, size_limit=1024) as w:
        for i in range(500):
            w.write({"i": i})
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")]
    ds = StreamingDataset(local=str(out))
    assert [s["i"] for s in ds] == list(range(500))


def test_index_is_written_atomically_on_clean_exit(tmp_path):
    # A clean run in a subprocess: index.json is the last file and lists every shard on disk.
    out = tmp_path / "ds"
    code = CHILD.replace("range(60_000)", "range(3000)").replace("time.sleep(120)", "pass")
    subprocess.run([sys.executable, "-c", code, str(out), ""], check=True, capture_output=True, timeout=120)
    index = json.loads((out / "index.json").read_text())
    on_disk = sorted(n for n in os.listdir(out) if n != "index.json")
    assert on_disk == [s["raw_data"]["basename"] for s in index["shards"]]
    assert [s["i"] for s in StreamingDataset(local=str(out))] == list(range(3000))


FULL_DISK_CHILD = r"""
import json, resource, signal, sys
from shardstream import MDSWriter, OutputWriteError, WriterError

out, limit = sys.argv[1], int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    with MDSWriter(out=out, columns={"i": "int"}, size_limit=1024) as w:
        for i in range(3000):
            w.write({"i": i})
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc), "errno": getattr(exc, "errno", None),
                      "writer_error": isinstance(exc, WriterError), "os_error": isinstance(exc, OSError),
                      "output_write_error": isinstance(exc, OutputWriteError)}))
else:
    print(json.dumps(None))
"""


@pytest.mark.parametrize("limit, failing", [(4096, "index.json"), (512, "shard.00000.mds")])
def test_full_disk_raises_a_typed_error_and_leaves_no_index(tmp_path, limit, failing):
    # Shards are at most 1 KiB and the index of ~45 shards is ~18 KiB: a 4 KiB file size limit fails
    # the index alone, a 512-byte one the first shard.
    out = tmp_path / "ds"
    proc = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, str(out), str(limit)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result is not None, "the write did not fail"
    assert result["output_write_error"] and result["writer_error"] and result["os_error"], result
    assert result["errno"] == errno.EFBIG
    assert str(out / failing) in result["message"] and "free space" in result["message"], result
    names = os.listdir(out)
    assert "index.json" not in names
    assert not [n for n in names if n.startswith(".tmp-")], names
