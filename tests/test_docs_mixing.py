"""The Python examples of docs/mixing.md run, in order, in one fresh interpreter, and check their own results."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "mixing.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)

# Runs each block in one namespace, as a reader pasting them into one session would; on a failure,
# names the block (its first line in the document) before the traceback.
RUNNER = """
import json, sys, traceback
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for line, code in blocks:
    try:
        exec(compile(code, f"docs/mixing.md:{line}", "exec"), namespace)
    except BaseException:
        print(f"the example at docs/mixing.md line {line} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def blocks() -> list[tuple[int, str]]:
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_mixing_doc_has_examples():
    found = blocks()
    assert len(found) >= 8, f"expected the examples of docs/mixing.md, found {len(found)} python blocks"
    assert "MDSWriter" in found[0][1], "the first example writes the data the others read"


def test_mixing_doc_examples_run(tmp_path):
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks()), capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
