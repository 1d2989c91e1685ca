"""Every ```python block of README.md and docs/*.md runs: each document in its own fresh interpreter
and temporary directory, its blocks in order in one namespace, as a reader pasting them would.

A block runs unless the line before its fence is ``<!-- no-run -->``, which only blocks that need a
cloud account may carry; they are listed in NO_RUN, so that a new one is a decision made here.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^(?:(<!-- no-run -->)\n)?```python\n(.*?)^```$", re.S | re.M)

# (document, first line of the block): blocks that read from a cloud bucket, shown but not run
NO_RUN = {
    ("README.md", "ds = StreamingDataset("),                           # s3://my-bucket/train
    ("README.md", "from shardstream import Stream, StreamingDataset"),  # a stream in s3://my-bucket/code
    ("docs/storage.md", "from shardstream import StreamingDataset"),   # s3://my-bucket with a profile
    ("docs/ray.md", "import ray"),                                     # a Ray cluster writing to s3://my-bucket
    ("docs/spark.md", 'result = write_mds(df, "s3://my-bucket/datasets/train", compression="zstd",'),  # s3://
}

# Runs each block in one namespace; on a failure, names the block (its first line in the document).
RUNNER = """
import json, sys, traceback
doc, blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for line, code in blocks:
    try:
        exec(compile(code, f"{doc}:{line}", "exec"), namespace)
    except BaseException:
        print(f"the example at {doc} line {line} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def blocks(doc: str) -> list[tuple[int, str, bool]]:
    """``(line, code, runs)`` of each python block of ``doc``."""
    text = (ROOT / doc).read_text()
    return [(text.count("\n", 0, m.start(2)) + 1, m.group(2), m.group(1) is None) for m in BLOCK.finditer(text)]


def test_the_documents_have_examples():
    found = {doc: blocks(doc) for doc in DOCS}
    assert len(found["docs/mixing.md"]) >= 8, "expected the examples of docs/mixing.md"
    assert "MDSWriter" in found["docs/mixing.md"][0][1], "the first example writes the data the others read"
    assert sum(len(b) for b in found.values()) >= 30


def test_only_listed_blocks_are_not_run():
    skipped = {(doc, code.splitlines()[0].strip()) for doc in DOCS for _, code, runs in blocks(doc) if not runs}
    assert skipped == NO_RUN


@pytest.mark.parametrize("doc", [doc for doc in DOCS if any(runs for _, _, runs in blocks(doc))])
def test_document_examples_run(doc, tmp_path):
    code = [(line, text) for line, text, runs in blocks(doc) if runs]
    # Ray's sockets live under its temp dir, whose path must stay short (AF_UNIX: 107 bytes)
    env = {**os.environ, "TMPDIR": str(tmp_path), "RAY_TMPDIR": "/tmp"}
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps([doc, code]), capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
