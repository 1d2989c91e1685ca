"""zstd files of any size are byte-identical to mosaicml-streaming's: its ``zstd.compress`` compresses
with one worker thread, which cuts inputs past a few MB into jobs; shardstream does the same, so a
large shard (MDS, JSON, CSV ...) compressed by either library has the same bytes."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from shardstream.format.compression import compress, decompress

from .conftest import PEER_TIMEOUT, REPO_ROOT, peer_env, peer_python

PEER_CODE = """
import sys
from streaming.base.compression import compress
with open(sys.argv[1], 'rb') as f:
    data = f.read()
with open(sys.argv[2], 'wb') as f:
    f.write(compress(sys.argv[3], data))
"""


def _text(size: int) -> bytes:
    """Compressible but not trivial: words of random letters, as text shards hold."""
    rng = random.Random(7)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(5000)]
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choices(words, k=20)) + "\n"
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]


def test_large_zstd_file_has_the_bytes_mosaicml_streaming_writes(tmp_path: Path):
    data = _text(20 << 20)  # past the size where a one-thread frame and a one-worker frame differ
    raw = tmp_path / "raw"
    raw.write_bytes(data)
    ours = {level: compress(f"zstd:{level}" if level != 3 else "zstd", data) for level in (3, 7)}
    for level, expected in ours.items():
        out = tmp_path / f"theirs{level}"
        proc = subprocess.run([peer_python(), "-c", PEER_CODE, str(raw), str(out), f"zstd:{level}"],
                              env=peer_env(tmp_path / "tmp"), cwd=str(REPO_ROOT), capture_output=True, text=True,
                              timeout=PEER_TIMEOUT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        theirs = out.read_bytes()
        assert len(theirs) == len(expected) and theirs == expected, f"zstd:{level}"
        assert decompress("zstd", theirs, len(data), "theirs") == data
