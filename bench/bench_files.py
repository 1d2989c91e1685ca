"""Reading files people already have (Parquet, JSONL): shardstream vs Hugging Face ``datasets``,
a plain pyarrow loop, litdata and mosaicml-streaming.

    .venv/bin/python bench/bench_files.py [--rows-per-file 200000] [--out files.md] [--json files.json]

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The driver (this file, project venv) generates the rows once from a fixed seed: ``--files``
Parquet files of ``--rows-per-file`` rows (``id`` int64 = the row's global position,
``tokens`` list<int32> of random length 64..512, ``text`` a short sentence; row groups of
10,000 rows, pyarrow's default snappy compression and dictionary encoding) and the same rows
as as many JSON Lines files (2 processes write them). It converts the rows the passes read once
to MDS (shardstream's ``MDSWriter``) for mosaicml-streaming and once with ``litdata.optimize``
for litdata. Every measurement then
runs in a fresh subprocess, one after the other (never two at once): shardstream, HF
``datasets`` and pyarrow in the project venv (``bench_files_sides.py``), litdata and
mosaicml-streaming in the peer venv (``bench_files_peers.py``). Each shardstream process gets
an empty ``SHARDSTREAM_CACHE_DIR`` of its own unless said otherwise; HF runs offline
(``HF_DATASETS_OFFLINE=1``, ``HF_HUB_OFFLINE=1``) with a private ``HF_HOME``.

Every pass reads the same ``--limit`` rows on every side (default 200,000, the first file's:
reading all 600,000 takes HF ``datasets`` and mosaicml-streaming 30-120 s a pass on 2 cores) and
is checked (row count, sum of ``id``, sum of the token counts). A measurement makes up to
``--repeats`` passes but starts none once its passes took ``--budget`` seconds. ``bench/run.py`` calls
:func:`run_files`, :func:`markdown` and :func:`target_rows`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_files_report  # noqa: E402
import bench_loader  # noqa: E402
import common  # noqa: E402
from bench_files_sides import Rows  # noqa: E402
from common import log  # noqa: E402

DEFAULT_FILES = 3
DEFAULT_ROWS = 200_000  # per file
DEFAULT_LIMIT = 200_000  # rows per pass: all of them take ~20 min on 2 cores (HF and mosaicml-streaming)
DEFAULT_BUDGET_S = 30.0
ROW_GROUP = 10_000
BATCH = 250  # divides the default 600,000 rows: no library pads or drops a last batch
PYARROW_BATCH = 10_000
POSITIONS = (0.1, 0.5, 0.9)
PARTS = ("parquet", "jsonl", "loaders", "peers")
SEED_OFFSET = 16
RUN_TIMEOUT_S = 1200
EPOCH_TIMEOUT_S = 90.0  # a shuffled epoch still running then is reported as not finished
markdown = bench_files_report.markdown
target_rows = bench_files_report.target_rows
failed = bench_files_report.failed


# -- the data ------------------------------------------------------------------------------------
def generate_rows(path: str, n: int) -> None:
    """``n`` rows from the fixed seed, saved as ``.npz`` (every side and venv loads the same arrays)."""
    rng = np.random.default_rng(common.SEED + SEED_OFFSET)
    lengths = rng.integers(64, 513, n).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    encoded = [t.encode("utf-8") for t in common._texts(rng, n)]
    text_offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=text_offsets[1:])
    common._save(path, ids=np.arange(n, dtype=np.int64), tokens=tokens, tok_offsets=offsets,
                 text_bytes=np.frombuffer(b"".join(encoded), np.uint8), text_offsets=text_offsets)


def file_ranges(n_files: int, per_file: int) -> list[tuple[int, int]]:
    return [(f * per_file, (f + 1) * per_file) for f in range(n_files)]


def write_parquet(rows: Rows, path: str, a: int, b: int) -> None:
    """Rows ``a..b`` as one Parquet file (row groups of ``ROW_GROUP`` rows, pyarrow's other defaults)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offs = rows.tok_offsets[a:b + 1]
    tokens = pa.ListArray.from_arrays(pa.array((offs - offs[0]).astype(np.int32)),
                                      pa.array(rows.tokens[offs[0]:offs[-1]]))
    texts = [rows.text_bytes[x:y].decode("utf-8") for x, y in
             zip(rows.text_offsets[a:b].tolist(), rows.text_offsets[a + 1:b + 1].tolist())]
    table = pa.table({"id": pa.array(rows.ids[a:b]), "tokens": tokens, "text": pa.array(texts, pa.string())})
    pq.write_table(table, path, row_group_size=ROW_GROUP)


def write_jsonl(rows: Rows, path: str, a: int, b: int) -> None:
    """Rows ``a..b`` as one JSON Lines file: ``{"id": ..., "tokens": [...], "text": ...}`` per line."""
    offs = (rows.tok_offsets[a:b + 1] - rows.tok_offsets[a]).tolist()
    tokens = rows.tokens[rows.tok_offsets[a]:rows.tok_offsets[b]].tolist()
    t_offs = rows.text_offsets[a:b + 1].tolist()
    with open(path, "w", encoding="utf-8") as out:
        for j, i in enumerate(range(a, b)):
            text = rows.text_bytes[t_offs[j]:t_offs[j + 1]].decode("utf-8")
            out.write(json.dumps({"id": i, "tokens": tokens[offs[j]:offs[j + 1]], "text": text}) + "\n")


def _write_files(job: tuple[str, str, int, int, int]) -> float:
    """One generated file of each format (run in a pool: JSON encoding is the slow part)."""
    npz, work, f, a, b = job
    t = time.perf_counter()
    rows = Rows(npz)
    write_parquet(rows, os.path.join(work, "parquet", f"part-{f:05d}.parquet"), a, b)
    write_jsonl(rows, os.path.join(work, "jsonl", f"part-{f:05d}.jsonl"), a, b)
    return time.perf_counter() - t


def generate(work: str, n_files: int, per_file: int) -> dict:
    """Rows, Parquet and JSONL files under ``work`` (2 processes); what was written and how long it took."""
    import multiprocessing

    t = time.perf_counter()
    npz = os.path.join(work, "rows.npz")
    generate_rows(npz, n_files * per_file)
    rows = Rows(npz)
    for d in ("parquet", "jsonl"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    jobs = [(npz, work, f, f * per_file, (f + 1) * per_file) for f in range(n_files)]
    with multiprocessing.get_context("fork").Pool(min(2, n_files)) as pool:
        pool.map(_write_files, jobs, chunksize=1)
    parquet = [os.path.join(work, "parquet", f"part-{f:05d}.parquet") for f in range(n_files)]
    jsonl = [os.path.join(work, "jsonl", f"part-{f:05d}.jsonl") for f in range(n_files)]
    out = {"npz": npz, "parquet": parquet, "jsonl": jsonl, "rows": rows.n,
           "parquet_bytes": sum(os.path.getsize(p) for p in parquet),
           "jsonl_bytes": sum(os.path.getsize(p) for p in jsonl),
           "payload_bytes": int(rows.tokens.nbytes + len(rows.text_bytes) + 8 * rows.n),
           "mean_tokens": float(rows.tokens.size / rows.n), "generate_s": time.perf_counter() - t}
    log(f"generated {rows.n:,} rows: Parquet {out['parquet_bytes'] / 1e6:,.0f} MB, JSONL "
        f"{out['jsonl_bytes'] / 1e6:,.0f} MB in {out['generate_s']:.1f}s")
    return out


# -- running the children --------------------------------------------------------------------------
class Runner:
    """Runs one measurement per fresh subprocess, in its library's venv, and records contention."""

    PEERS = ("litdata", "mosaic")

    def __init__(self, work: str, peer_python: str | None, peer_path: str = "", wait_s: float = 0.0,
                 max_busy: float = 0.25) -> None:
        self.work, self.peer_python, self.peer_path = work, peer_python, peer_path
        self.wait_s, self.max_busy = wait_s, max_busy
        self.count = 0

    def env(self, library: str, cache: str | None) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if library == "shardstream":
            env["SHARDSTREAM_CACHE_DIR"] = cache or os.path.join(self.work, "ss-cache", f"{self.count:03d}")
        elif library in ("hf", "pyarrow"):
            env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=os.path.join(self.work, "hf-home"),
                       HF_DATASETS_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")
        else:
            tmp = os.path.join(self.work, f"tmp-{library}")
            os.makedirs(tmp, exist_ok=True)
            env["TMPDIR"] = tmp  # the peers leave lock files and cache directories there
            extra = [os.path.join(ROOT, "tests", "peer_stubs")] if library == "mosaic" else []
            extra += [p for p in self.peer_path.split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            env.update(DATA_OPTIMIZER_CACHE_FOLDER=os.path.join(tmp, "chunks"),
                       DATA_OPTIMIZER_DATA_CACHE_FOLDER=os.path.join(tmp, "data"),
                       LITDATA_CACHE_DIR=os.path.join(tmp, "cache"))
        return env

    def command(self, library: str, cfg_path: str) -> list[str]:
        if library in self.PEERS:
            return [self.peer_python, os.path.join(HERE, "bench_files_peers.py"), cfg_path]
        return [sys.executable, os.path.join(HERE, "bench_files_sides.py"), cfg_path]

    def run(self, library: str, tag: str, cfg: dict, cache: str | None = None) -> dict:
        self.count += 1
        tag = f"{self.count:03d}-{library}-{tag}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, library=library, out=out), f)
        quiet = bench_loader.wait_quiet(self.max_busy, self.wait_s) if self.wait_s > 0 else {}
        cmd = self.command(library, cfg_path)
        log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}")
        env = self.env(library, cache)
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        return bench_loader.measured_run(cmd, env, ROOT, out, err_log, tag, quiet, RUN_TIMEOUT_S)


# -- the measurements ----------------------------------------------------------------------------
def _base(data: dict, limit: int, repeats: int, budget_s: float) -> dict:
    rows = Rows(data["npz"])
    return {"limit": limit, "total": rows.n, "repeats": repeats, "budget_s": budget_s, "expect": rows.expect(limit),
            "batch_size": BATCH, "seed": common.SEED + SEED_OFFSET}


def measure_parquet(run: Runner, data: dict, base: dict) -> dict:
    """Sequential dict rows: pyarrow loop, HF streaming, shardstream (dicts, then column batches)."""
    glob = os.path.join(os.path.dirname(data["parquet"][0]), "*.parquet")
    out = {"pyarrow": run.run("pyarrow", "parquet", dict(base, task="sequential", files=data["parquet"],
                                                         batch_rows=PYARROW_BATCH)),
           "hf": run.run("hf", "parquet", dict(base, task="sequential", builder="parquet", files=data["parquet"])),
           "shardstream": run.run("shardstream", "parquet", dict(base, task="sequential", files=glob)),
           "shardstream_batches": run.run("shardstream", "parquet-batches", dict(base, task="batches", files=glob))}
    return out


def measure_jsonl(run: Runner, data: dict, base: dict, opens: int) -> dict:
    """shardstream's first open (index built into an empty cache directory), then warm rows/s; HF json."""
    glob = os.path.join(os.path.dirname(data["jsonl"][0]), "*.jsonl")
    first = []
    for i in range(opens):
        cache = os.path.join(run.work, "ss-cache", f"jsonl-first-{i}")
        shutil.rmtree(cache, ignore_errors=True)
        first.append(run.run("shardstream", "jsonl-first-open", dict(base, task="first_open", files=glob), cache))
    warm_cache = os.path.join(run.work, "ss-cache", f"jsonl-first-{opens - 1}")
    return {"first_open": first,
            "shardstream": run.run("shardstream", "jsonl-warm", dict(base, task="sequential", files=glob), warm_cache),
            "hf": run.run("hf", "jsonl", dict(base, task="sequential", builder="json", files=data["jsonl"]))}


def measure_loaders(run: Runner, data: dict, base: dict, epochs: int, resume_repeats: int) -> dict:
    """Shuffled DataLoader epochs and resumption at 10/50/90 %, shardstream vs HF."""
    glob = os.path.join(os.path.dirname(data["parquet"][0]), "*.parquet")
    out: dict = {"shuffled": {}, "resume": {}}
    if epochs:
        cfg = dict(base, task="shuffled", epochs=epochs, epoch_timeout_s=EPOCH_TIMEOUT_S)
        out["shuffled"]["shardstream"] = run.run("shardstream", "shuffled", dict(cfg, files=glob))
        out["shuffled"]["shardstream_per_sample"] = run.run("shardstream", "shuffled-per-sample", dict(
            cfg, files=glob, loader_options={"batch_decode": False}))
        out["shuffled"]["hf"] = run.run("hf", "shuffled", dict(cfg, files=data["parquet"]))
    if resume_repeats:
        ks = [int(round(p * base["total"])) for p in POSITIONS]
        cfg = dict(base, task="resume", positions=ks, repeats=resume_repeats)
        out["resume"]["shardstream"] = run.run("shardstream", "resume", dict(cfg, files=glob))
        out["resume"]["shardstream_shuffled"] = run.run("shardstream", "resume-shuffled",
                                                        dict(cfg, files=glob, shuffle=True))
        out["resume"]["hf"] = run.run("hf", "resume", dict(cfg, files=data["parquet"]))
    return out


def measure_peers(run: Runner, data: dict, base: dict, have_peer: bool) -> dict:
    """MDS copy (shardstream writes it; mosaicml-streaming and shardstream read it), litdata's copies."""
    mds = os.path.join(run.work, "mds")
    out = {"write_mds": run.run("shardstream", "write-mds", dict(base, task="write_mds", npz=data["npz"], path=mds))}
    if "error" not in out["write_mds"]:
        out["shardstream_mds"] = run.run("shardstream", "mds", dict(base, task="sequential", files=mds))
    if not have_peer:
        return out
    lit = os.path.join(run.work, "litdata")
    out["litdata_optimize"] = run.run("litdata", "optimize", dict(base, task="optimize", npz=data["npz"], path=lit,
                                                                  block=ROW_GROUP))
    if "error" not in out["litdata_optimize"]:
        out["litdata"] = run.run("litdata", "optimized", dict(base, task="sequential", path=lit))
    out["litdata_parquet"] = run.run("litdata", "parquet", dict(
        base, task="parquet", files=data["parquet"], npz=data["npz"], rows_per_file=len(Rows(data["npz"]).ids)
        // len(data["parquet"]), path=os.path.join(run.work, "litdata-parquet")))
    if "error" not in out["write_mds"]:
        out["mosaic"] = run.run("mosaic", "mds", dict(base, task="sequential", path=mds))
    return out


def run_files(work_dir: str, peer_python: str | None, rows_per_file: int = DEFAULT_ROWS, *,
              n_files: int = DEFAULT_FILES, limit: int | None = DEFAULT_LIMIT, repeats: int = 3,
              budget_s: float = DEFAULT_BUDGET_S, epochs: int = 2,
              resume_repeats: int = 3, first_opens: int = 3, peer_path: str = "", wait_s: float = 0.0,
              parts: tuple[str, ...] = PARTS, keep_data: bool = False) -> dict:
    """Run the section and return its raw results (see :func:`markdown`). ``peer_python`` None (or a
    missing file) runs the project venv's sides only; ``limit`` caps the rows of every pass (None: all);
    no measurement starts another pass once its passes took ``budget_s``; ``parts`` picks among ``PARTS``."""
    total_start = time.perf_counter()
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    have_peer = bool(peer_python) and os.path.exists(peer_python)
    n = n_files * rows_per_file
    limit = n if not limit or limit > n else limit
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": bench_loader.machine_info(), "git": common.git_rev(), "loadavg_before": _loadavg(),
               "config": {"files": n_files, "rows_per_file": rows_per_file, "rows": n, "limit": limit,
                          "repeats": repeats, "budget_s": budget_s, "epochs": epochs, "resume_repeats": resume_repeats,
                          "first_opens": first_opens, "parts": list(parts), **_constants(),
                          "peer_python": peer_python if have_peer else None}}
    run = Runner(work, peer_python if have_peer else None, peer_path, wait_s)
    try:
        R["data"] = generate(work, n_files, rows_per_file)
        base = _base(R["data"], limit, repeats, budget_s)
        if "parquet" in parts:
            R["parquet"] = measure_parquet(run, R["data"], base)
        if "jsonl" in parts:
            R["jsonl"] = measure_jsonl(run, R["data"], base, max(1, first_opens))
        if "loaders" in parts:
            R.update(measure_loaders(run, R["data"], base, epochs, resume_repeats))
        if "peers" in parts:
            R["peers"] = measure_peers(run, R["data"], base, have_peer)
    finally:
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = _loadavg()
    R["shardstream_source"] = shardstream_source(R)
    R["total_s"] = time.perf_counter() - total_start
    return R


def shardstream_source(R: dict) -> dict | None:
    """Where the measured shardstream was imported from (its children's ``PYTHONPATH``) and that checkout's
    commit, which may differ from this benchmark's (``R['git']``)."""
    for part in ("parquet", "jsonl", "resume", "peers"):
        for r in (R.get(part) or {}).values():
            for x in r if isinstance(r, list) else [r]:
                if isinstance(x, dict) and x.get("source"):
                    try:
                        rev = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=x["source"], check=True,
                                             capture_output=True, text=True).stdout.strip()
                    except (OSError, subprocess.CalledProcessError):
                        rev = "unknown"
                    return {"path": x["source"], "git": rev}
    return None


def _constants() -> dict:
    return {"row_group": ROW_GROUP, "batch_size": BATCH, "pyarrow_batch": PYARROW_BATCH, "positions": list(POSITIONS),
            "epoch_timeout_s": EPOCH_TIMEOUT_S, "seed": common.SEED + SEED_OFFSET}


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv holding mosaicml-streaming and litdata ('' for the project venv only)")
    ap.add_argument("--peer-path", default="", help="extra PYTHONPATH entries for the peer venv's processes")
    ap.add_argument("--files", type=int, default=DEFAULT_FILES)
    ap.add_argument("--rows-per-file", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="rows per pass on every side (0: all rows)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per sequential measurement, at most")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="no measurement starts another pass "
                    "(or epoch) once its passes took this many seconds")
    ap.add_argument("--epochs", type=int, default=2, help="timed shuffled epochs per library (0 skips)")
    ap.add_argument("--resume-repeats", type=int, default=3, help="resumptions per position (0 skips)")
    ap.add_argument("--first-opens", type=int, default=3, help="JSONL first opens, each with an empty cache")
    ap.add_argument("--wait", type=float, default=0.0, help="before each measurement, wait up to this many "
                    "seconds for the CPUs to be at most 25%% busy")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset of " + ",".join(PARTS))
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "files"))
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
        R.setdefault("shardstream_source", shardstream_source(R))
    else:
        R = run_files(args.work, args.peer_python or None, args.rows_per_file, n_files=args.files,
                      limit=args.limit or None, repeats=args.repeats, budget_s=args.budget, epochs=args.epochs,
                      resume_repeats=args.resume_repeats, first_opens=args.first_opens, peer_path=args.peer_path,
                      wait_s=args.wait, parts=tuple(p for p in args.parts.split(",") if p), keep_data=args.keep_data)
    common.publish(R, markdown, __file__, args.out, None if args.from_json else args.json)
    wrong = failed(R)
    if wrong:
        log(f"!! failed or wrong: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
