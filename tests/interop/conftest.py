"""Fixtures for the mosaicml-streaming interop tests.

The peer library lives in its own virtualenv (``make peers``); tests drive it
through ``peer_mds.py`` subprocesses. Importing ``streaming`` costs seconds, so
all peer work is done in two batched subprocesses by the session fixture
``world``, which builds every dataset once per test session (shared by the
xdist workers through a lock in the session's temp root) and records what the
peer read back. Tests then read with shardstream and compare.

``world`` layout (under the pytest session temp root)::

    interop-world/
      mosaic/<case>      written by streaming.MDSWriter   (never read in place)
      ours/<case>        written by shardstream.MDSWriter (never read in place)
      peer-read/...      copies read by streaming.StreamingDataset
      merge-ss/          shardstream parts, merged by shardstream.merge_index
      merge-ss-list/     the same parts, merged by merge_index([index files], out)
      merge-ss-by-mds/   the same parts, merged by streaming's merge_index
      merge-mds/         streaming parts, merged by streaming's merge_index
      tmp/               TMPDIR of the peer processes (streaming's filelocks)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import shutil
import subprocess
import traceback
from pathlib import Path

import pytest

from . import samples

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
PEER_SCRIPT = HERE / "peer_mds.py"
PEER_STUBS = REPO_ROOT / "tests" / "peer_stubs"
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "NODE_RANK", "GROUP_RANK", "LOCAL_GROUP_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE")
PEER_TIMEOUT = 600


def peer_python() -> str:
    """The peer interpreter; fails (never skips) when it is not there."""
    configured = os.environ.get("SHARDSTREAM_PEER_PYTHON")
    path = Path(configured) if configured else REPO_ROOT / ".venv-peers" / "bin" / "python"
    if not path.exists():
        how = (f"SHARDSTREAM_PEER_PYTHON={configured!r} does not exist" if configured
               else f"SHARDSTREAM_PEER_PYTHON is unset and {path} does not exist")
        pytest.fail(
            f"interop tests need the peer virtualenv with mosaicml-streaming: {how}. "
            "Run `make peers` (bench/install_peers.sh .venv-peers) and run the tests with `make test`, "
            "or set SHARDSTREAM_PEER_PYTHON to that venv's python.",
            pytrace=False,
        )
    return str(path)


def peer_env(tmpdir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env["PYTHONPATH"] = str(PEER_STUBS)
    env["TMPDIR"] = str(tmpdir)  # streaming leaves NNNN_*_filelock files in the temp dir
    env.pop("PYTHONHOME", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def run_peer(args: list, tmpdir: Path, timeout: int = PEER_TIMEOUT) -> subprocess.CompletedProcess:
    tmpdir.mkdir(parents=True, exist_ok=True)
    cmd = [peer_python(), str(PEER_SCRIPT), *map(str, args)]
    proc = subprocess.run(cmd, env=peer_env(tmpdir), cwd=str(REPO_ROOT), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"peer command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-8000:]}"
        )
    return proc


def run_peer_batch(jobs: list[dict], workdir: Path, tag: str) -> list[dict]:
    jobs_path = workdir / f"{tag}-jobs.json"
    result_path = workdir / f"{tag}-results.pkl"
    jobs_path.write_text(json.dumps(jobs))
    run_peer(["batch", jobs_path, result_path], workdir / "tmp")
    with open(result_path, "rb") as f:
        results = pickle.load(f)
    assert len(results) == len(jobs)
    return results


@contextlib.contextmanager
def file_lock(path: Path):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------------
# Dataset sizes
# ----------------------------------------------------------------------------------

def _config_bytes(spec: dict, size_limit: int) -> int:
    from shardstream.format.encodings import get_encoding

    names = sorted(spec["columns"])
    encs = [spec["columns"][n] for n in names]
    config = {"version": 2, "format": "mds", "compression": spec.get("compression"),
              "hashes": spec.get("hashes") or [], "size_limit": size_limit, "column_names": names,
              "column_encodings": encs, "column_sizes": [get_encoding(e).size for e in encs]}
    return len(json.dumps(config, sort_keys=True))


def choose_size_limit(spec: dict) -> int:
    """A size_limit that cuts the dataset into about four shards, the first sample fitting
    in the first shard (outliers such as a 64 KiB array get a shard of their own)."""
    from shardstream.format.encodings import get_encoding

    sizes = []
    for sample in samples.make_samples(spec):
        n_var = 0
        size = 0
        for col, enc in spec["columns"].items():
            coder = get_encoding(enc)
            value = sample[col]
            size += len(value if type(value) is bytes else coder.encode(value))
            n_var += coder.size is None
        sizes.append(size + 4 * n_var + 4)
    ordered = sorted(sizes)
    body = max((sum(sizes) - ordered[-1]) // 4, ordered[-2], sizes[0])
    limit = body + 8
    for _ in range(4):  # the config embedded in each shard holds the limit itself
        limit = body + 8 + _config_bytes(spec, limit)
    return limit


def sized_grid() -> list[dict]:
    cases = samples.grid()
    for spec in cases:
        if "size_limit" not in spec:
            spec["size_limit"] = choose_size_limit(spec)
    return cases


# ----------------------------------------------------------------------------------
# The world: everything both libraries wrote, and what the peer read back
# ----------------------------------------------------------------------------------

class World:
    def __init__(self, root: Path, data: dict) -> None:
        self.root = root
        self.cases = {spec["name"]: spec for spec in data["cases"]}
        self.mosaic_write = data["mosaic_write"]  # name -> {"ok", ...}
        self.ours_write = data["ours_write"]  # name -> None | error text
        self.peer_read_mosaic = data["peer_read_mosaic"]  # name -> {"ok", "result"|"error"}
        self.peer_read_ours = data["peer_read_ours"]
        self.merge = data["merge"]
        self.peer_info = data["peer_info"]

    def mosaic_dir(self, name: str) -> Path:
        return self.root / "mosaic" / name

    def ours_dir(self, name: str) -> Path:
        return self.root / "ours" / name


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.@+" else "_" for ch in name)


def _write_ours(spec: dict, out: Path) -> None:
    from shardstream import MDSWriter

    with MDSWriter(out=str(out), columns=spec["columns"], compression=spec.get("compression"),
                   hashes=spec.get("hashes"), size_limit=spec["size_limit"]) as writer:
        for sample in samples.make_samples(spec):
            writer.write(sample)


def _read_options(spec: dict) -> dict:
    return {"validate_hash": samples.validate_hash_for(spec)}


def _build_world(root: Path) -> dict:
    import shardstream

    cases = sized_grid()
    for spec in cases:
        spec["dir"] = _safe(spec["name"])
    assert len({s["dir"] for s in cases}) == len(cases), "case names collide as directory names"
    for sub in ("mosaic", "ours", "peer-read/mosaic", "peer-read/ours", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)

    # 1. mosaicml-streaming writes every case and the merge parts, and merges its parts.
    jobs = [{"cmd": "info"}]
    jobs += [{"cmd": "write", "args": [str(root / "mosaic" / s["dir"]), s]} for s in cases]
    mds_parts = [samples.merge_part_spec(p, "mds") for p in (0, 1)]
    ss_parts = [samples.merge_part_spec(p, "ss") for p in (0, 1)]
    for spec in mds_parts + ss_parts:
        spec["size_limit"] = choose_size_limit(spec)
    jobs += [{"cmd": "write", "args": [str(root / "merge-mds" / f"part{p}"), s]} for p, s in enumerate(mds_parts)]
    jobs += [{"cmd": "merge", "args": [str(root / "merge-mds")]}]
    res1 = run_peer_batch(jobs, root, "peer1")
    peer_info = res1[0]["result"] if res1[0]["ok"] else {"error": res1[0]["error"]}
    mosaic_write = {s["name"]: r for s, r in zip(cases, res1[1:1 + len(cases)])}
    mds_merge_results = res1[1 + len(cases):]

    # 2. shardstream writes every case and the merge parts, and merges them.
    ours_write = {}
    for spec in cases:
        try:
            _write_ours(spec, root / "ours" / spec["dir"])
            ours_write[spec["name"]] = None
        except Exception:  # reported by the tests of this case
            ours_write[spec["name"]] = traceback.format_exc()
    merge_errors = {}
    try:
        for p, spec in enumerate(ss_parts):
            _write_ours(spec, root / "merge-ss" / f"part{p}")
        for target in ("merge-ss-list", "merge-ss-by-mds"):
            shutil.copytree(root / "merge-ss", root / target)
        shardstream.merge_index(str(root / "merge-ss"))
        shardstream.merge_index([str(root / "merge-ss-list" / f"part{p}" / "index.json") for p in (0, 1)],
                                str(root / "merge-ss-list"))
    except Exception:
        merge_errors["shardstream"] = traceback.format_exc()

    # 3. mosaicml-streaming reads copies of everything (reading may decompress in place).
    jobs = []
    for spec in cases:
        for who in ("mosaic", "ours"):
            src = root / who / spec["dir"]
            dst = root / "peer-read" / who / spec["dir"]
            if (src / "index.json").exists():
                shutil.copytree(src, dst)
            jobs.append({"cmd": "read", "args": [str(dst), _read_options(spec)]})
    if (root / "merge-ss" / "index.json").exists():
        shutil.copytree(root / "merge-ss", root / "peer-read" / "merge-ss")
    jobs.append({"cmd": "read", "args": [str(root / "peer-read" / "merge-ss"), {"validate_hash": "xxh64"}]})
    jobs.append({"cmd": "merge", "args": [str(root / "merge-ss-by-mds")]})
    res2 = run_peer_batch(jobs, root, "peer2")
    peer_read_mosaic = {s["name"]: res2[2 * k] for k, s in enumerate(cases)}
    peer_read_ours = {s["name"]: res2[2 * k + 1] for k, s in enumerate(cases)}
    return {
        "cases": cases,
        "mosaic_write": mosaic_write,
        "ours_write": ours_write,
        "peer_read_mosaic": peer_read_mosaic,
        "peer_read_ours": peer_read_ours,
        "merge": {
            "mds_parts": mds_parts,
            "ss_parts": ss_parts,
            "mds_write_and_merge": mds_merge_results,
            "ss_errors": merge_errors,
            "peer_read_ss_merged": res2[-2],
            "mds_merge_of_ss_parts": res2[-1],
        },
        "peer_info": peer_info,
    }


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> World:
    peer_python()  # fail early, with the `make peers` hint
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's root, shared by the xdist workers
    root = base / "interop-world"
    done = base / "interop-world.pkl"
    failed = base / "interop-world.error"
    with file_lock(base / "interop-world.lock"):
        if failed.exists():
            pytest.fail(f"building the interop datasets failed (in another worker):\n{failed.read_text()}",
                        pytrace=False)
        if not done.exists():
            if root.exists():
                shutil.rmtree(root)
            root.mkdir(parents=True)
            try:
                data = _build_world(root)
            except BaseException:
                failed.write_text(traceback.format_exc())
                raise
            tmp = done.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                pickle.dump(data, f)
            os.replace(tmp, done)
    with open(done, "rb") as f:
        return World(root, pickle.load(f))

