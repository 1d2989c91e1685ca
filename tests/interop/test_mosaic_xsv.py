"""JSON, CSV, TSV and XSV shards against the real mosaicml-streaming 0.13.0, both directions.

For every writer x compression x hashes x size_limit (and a custom newline), both libraries write
the same rows: every file (data, meta, compressed, ``index.json``) must be byte-identical; the
peer's ``StreamingDataset`` must read back our rows and ours must read back its rows. The peer
runs in one subprocess (``peer_xsv.py``) for the whole module.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from shardstream import CSVWriter, JSONWriter, StreamingDataset, TSVWriter, XSVWriter

from .conftest import PEER_TIMEOUT, REPO_ROOT, file_lock, peer_env, peer_python

pytestmark = pytest.mark.interop

WRITERS = {"JSONWriter": (JSONWriter, {}), "CSVWriter": (CSVWriter, {}), "TSVWriter": (TSVWriter, {}),
           "XSVWriter": (XSVWriter, {"separator": "|"})}
COLUMNS = {"word": "str", "count": "int", "score": "float"}


def _case(writer, compression, hashes, size_limit, newline="\n") -> dict:
    name = f"{writer}-{compression}-{'+'.join(hashes) or 'nohash'}-{size_limit}" + ("-crlf" if newline != "\n" else "")
    kwargs = {"columns": COLUMNS, "compression": compression, "hashes": hashes, "size_limit": size_limit,
              **WRITERS[writer][1]}
    if newline != "\n":
        kwargs["newline"] = newline
    return {"name": name.replace(":", "@"), "writer": writer, "kwargs": kwargs}


CASES = [_case(*c) for c in itertools.product(sorted(WRITERS), [None, "zstd:7", "gz", "br", "snappy"],
                                               [[], ["sha1", "xxh64"]], [None, 180])]
CASES += [_case(w, "zstd", ["md5"], 100, newline="\r\n") for w in sorted(WRITERS)]
CASES += [_case(w, None, [], 8) for w in sorted(WRITERS)]  # every sample past the limit: an empty first shard
ROWS = [{"word": "ß" * (i % 4) + f"w{i}", "count": (-1) ** i * i * 1001, "score": i / 7 - 2.5} for i in range(37)]


def _ours(case: dict, out: Path) -> None:
    cls, _ = WRITERS[case["writer"]]
    with cls(out=str(out), **case["kwargs"]) as writer:
        for row in ROWS:
            writer.write(row)


def _peer_reads(case: dict) -> bool:
    """Whether the peer reads our copy of ``case`` (reading does not depend on hashes or on where
    shards are cut, and each read costs the peer seconds): one case per writer and codec, and the odd ones."""
    kw = case["kwargs"]
    return (bool(kw["hashes"]) and kw["size_limit"] != 180) or kw["size_limit"] == 8


READ_CASES = [c for c in CASES if _peer_reads(c)]

def _build(root: Path) -> dict:
    jobs, slots = [], {}
    for case in CASES:
        _ours(case, root / "ours" / case["name"])
        jobs.append({"cmd": "write", "writer": case["writer"], "out": str(root / "theirs" / case["name"]),
                     "kwargs": case["kwargs"], "rows": ROWS})
        slots[case["name"]] = [len(jobs) - 1, None]
        if _peer_reads(case):
            shutil.copytree(root / "ours" / case["name"], root / "peer-read" / case["name"])
            jobs.append({"cmd": "read", "dir": str(root / "peer-read" / case["name"])})
            slots[case["name"]][1] = len(jobs) - 1
    (root / "tmp").mkdir()
    results = []
    for start in range(0, len(jobs), 40):  # the peer keeps files open per dataset read: a few processes
        results += _run_peer(jobs[start:start + 40], root, start)
    return {name: (results[w], None if r is None else results[r]) for name, (w, r) in slots.items()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Both libraries' datasets, built once per test session (xdist workers share them: two peer
    processes at once would collide on mosaicml-streaming's shared-memory names)."""
    peer_python()
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root, done = base / "xsv-interop", base / "xsv-interop.json"
    with file_lock(base / "xsv-interop.lock"):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            done.write_text(json.dumps(_build(root)))
    return root, json.loads(done.read_text())


def _run_peer(jobs: list, root: Path, tag: int) -> list:
    (root / f"jobs{tag}.json").write_text(json.dumps(jobs))
    cmd = [peer_python(), str(Path(__file__).with_name("peer_xsv.py")), str(root / f"jobs{tag}.json"),
           str(root / f"results{tag}.json")]
    proc = subprocess.run(cmd, env=peer_env(root / "tmp"), cwd=str(REPO_ROOT), capture_output=True, text=True,
                          timeout=PEER_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((root / f"results{tag}.json").read_text())


def _comparable(path: Path) -> bytes:
    """A file's bytes, with a gzip member's modification time (when it was written) masked."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        assert gzip.decompress(data) is not None
        data = data[:4] + b"\0\0\0\0" + data[8:]
    return data


def _comparable_index(path: Path) -> dict:
    index = json.loads(path.read_text())
    for shard in index["shards"]:
        for key in ("zip_data", "zip_meta"):
            if shard[key] and shard[key]["basename"].endswith(".gz"):
                shard[key]["hashes"] = {}  # digests of gzip files cover their modification time
    return index


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_same_files_as_mosaicml_streaming(world, case):
    root, results = world
    wrote, _ = results[case["name"]]
    assert wrote["ok"], wrote.get("error")
    ours, theirs = root / "ours" / case["name"], root / "theirs" / case["name"]
    names = sorted(p.name for p in theirs.iterdir())
    assert sorted(p.name for p in ours.iterdir()) == names
    assert _comparable_index(ours / "index.json") == _comparable_index(theirs / "index.json")
    if not case["kwargs"]["compression"] == "gz":
        assert (ours / "index.json").read_bytes() == (theirs / "index.json").read_bytes()
    for name in names:
        if name != "index.json":
            assert _comparable(ours / name) == _comparable(theirs / name), name


@pytest.mark.parametrize("case", READ_CASES, ids=[c["name"] for c in READ_CASES])
def test_mosaicml_streaming_reads_what_we_write(world, case):
    _, results = world
    _, read = results[case["name"]]
    assert read["ok"], read.get("error")
    assert read["result"]["iter"] == ROWS and read["result"]["items"] == ROWS


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_we_read_what_mosaicml_streaming_writes(world, case, tmp_path):
    root, results = world
    assert results[case["name"]][0]["ok"]
    local = tmp_path / "copy"
    shutil.copytree(root / "theirs" / case["name"], local)
    validate = "xxh64" if "xxh64" in case["kwargs"]["hashes"] else None
    ds = StreamingDataset(local=str(local), batch_size=1, shuffle=False, validate_hash=validate)
    assert [dict(s) for s in ds] == ROWS
    assert [dict(ds[i]) for i in range(len(ds))] == ROWS
    cache = StreamingDataset(remote=str(root / "theirs" / case["name"]), local=str(tmp_path / "cache"),
                             batch_size=1, shuffle=True, shuffle_seed=5)
    assert sorted((s["count"] for s in cache)) == sorted(r["count"] for r in ROWS)
