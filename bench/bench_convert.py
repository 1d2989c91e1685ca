"""Converting Parquet to MDS, side by side: ``shardstream convert`` vs mosaicml-streaming vs litdata.

    .venv/bin/python bench/bench_convert.py [--out convert.md] [--json convert.json]
    .venv/bin/python bench/run.py --only convert     # the same, as a section of docs/benchmarks.md

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The workload (``bench_convert_data.py``): 1,000,000 rows (``id`` int64, ``tokens`` list<int32> of
length 64..512, ``text`` 40..120 characters) in 8 Parquet files, generated once from a fixed seed and
kept under ``--data`` (``bench/.data/convert``). Every side turns the same files into MDS with zstd,
its library's default shard size and hashes, each in a fresh process, one after the other:

- ``ours-cli-w2`` / ``ours-cli-w1``: ``shardstream convert FILES... OUT --compression zstd --workers 2|1``, the
  latter pinned to one CPU (a worker also compresses shards in threads, so unpinned it uses every core);
- ``mosaic-loop``: one ``streaming.MDSWriter`` fed ``ParquetFile(f).iter_batches()`` -> ``to_pylist()`` rows;
- ``mosaic-spark``: ``dataframe_to_mds(spark.read.parquet(...))`` on ``local[2]``;
- ``ours-spark``: ``shardstream.integrations.spark.write_mds`` on the same Spark settings;
- ``litdata``: ``litdata.optimize(fn, inputs=files, num_workers=2, compression='zstd')``.

Measured: the conversion's wall time, rows/s, MB/s of Parquet read and of MDS written, the peak memory
of the side's process tree (sum of PSS, sampled every 0.2 s), the output's size; then each output is
read back with its library's reader (row count, rows compared by ``id``) and deleted. ``bench/run.py``
calls :func:`run_convert`, :func:`markdown` and :func:`target_rows`.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_convert_data  # noqa: E402
import bench_convert_report  # noqa: E402
import bench_loader  # noqa: E402
import common  # noqa: E402
from bench_convert_sides import MDS_COLUMNS  # noqa: E402
from common import log  # noqa: E402

DEFAULT_ROWS = 1_000_000
DEFAULT_FILES = 8
DATA = os.path.join(HERE, ".data", "convert")
RUN_TIMEOUT_S = 1800
# case -> (venv, side, extra config); in the order each repeat runs them
CASES: dict[str, tuple[str, str, dict]] = {
    "ours-cli-w2": ("project", "ours-cli", {"workers": 2}),
    "ours-cli-w1": ("project", "ours-cli", {"workers": 1, "cpus": 1}),
    "mosaic-loop": ("peer", "mosaic-loop", {}),
    "litdata": ("peer", "litdata", {"workers": 2}),
    "mosaic-spark": ("peer", "mosaic-spark", {}),
    "ours-spark": ("project", "ours-spark", {}),
}
markdown = bench_convert_report.markdown
target_rows = bench_convert_report.target_rows
failed = bench_convert_report.failed


def env_for(venv: str, work: str) -> dict:
    """A side's environment: a private TMPDIR (the peers leave lock files there), litdata's cache folders
    in it, the torchvision stand-in for ``import streaming``, an empty shardstream cache."""
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=tmp, SHARDSTREAM_CACHE_DIR=os.path.join(work, "ss-cache"))
    if venv == "peer":
        stubs = os.path.join(ROOT, "tests", "peer_stubs")
        env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(DATA_OPTIMIZER_CACHE_FOLDER=os.path.join(tmp, "chunks"),
                   DATA_OPTIMIZER_DATA_CACHE_FOLDER=os.path.join(tmp, "data"),
                   LITDATA_CACHE_DIR=os.path.join(tmp, "cache"))
    else:
        src = os.path.join(ROOT, "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def missing(case: str, peer_python: str | None) -> str | None:
    """Why ``case`` cannot run here (None if it can): no peer venv, or no Spark writer / pyspark in this checkout."""
    venv, side, _ = CASES[case]
    if venv == "peer" and not (peer_python and os.path.exists(peer_python)):
        return "no peer venv (--peer-python)"
    if side == "ours-spark":
        probe = ("import importlib.util as u, sys; sys.exit(0 if u.find_spec('shardstream.integrations.spark') "
                 "and u.find_spec('pyspark') else 1)")
        if subprocess.run([sys.executable, "-c", probe], env=env_for("project", os.getcwd()), check=False).returncode:
            return "shardstream.integrations.spark or pyspark is not installed in the project venv"
    if side == "ours-cli":
        probe = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('shardstream.convert') else 1)"
        if subprocess.run([sys.executable, "-c", probe], env=env_for("project", os.getcwd()), check=False).returncode:
            return "this checkout has no shardstream.convert"
    return None


def run_case(case: str, data: dict, work: str, peer_python: str | None, tag: str, wait_s: float,
             keep: bool = False) -> dict:
    """One measurement of ``case`` in a fresh process; its result, with wall time and contention."""
    venv, side, extra = CASES[case]
    result = os.path.join(work, f"result-{tag}.json")
    cfg_path = os.path.join(work, f"config-{tag}.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(extra, side=side, data=data, out_dir=os.path.join(work, "out", case), result=result,
                       keep=keep), f)
    script = "bench_convert_peers.py" if venv == "peer" else "bench_convert_sides.py"
    cmd = [peer_python if venv == "peer" else sys.executable, os.path.join(HERE, script), cfg_path]
    quiet = bench_loader.wait_quiet(0.25, wait_s) if wait_s > 0 else {}
    log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}"
        + (f" (CPUs {quiet['busy_before']:.0%} busy)" if quiet.get("busy_before") is not None else ""))
    err_log = os.path.join(work, f"stderr-{tag}.log")
    res = bench_loader.measured_run(cmd, env_for(venv, work), ROOT, result, err_log, tag, quiet, RUN_TIMEOUT_S)
    shutil.rmtree(os.path.join(work, "out", case), ignore_errors=True)
    if "error" not in res:
        log(f"   {case}: {res['convert_s']:.1f} s, {res['rows_per_s']:,.0f} rows/s, peak {res['peak_mb']:,.0f} MB, "
            f"check {'ok' if res['ok'] else 'WRONG'}")
    return res


def run_convert(data_root: str, peer_python: str | None, rows: int = DEFAULT_ROWS, *, n_files: int = DEFAULT_FILES,
                repeats: int = 1, cases: tuple[str, ...] = tuple(CASES), wait_s: float = 30.0,
                keep: bool = False) -> dict:
    """Run the section and return its raw results (see :func:`markdown`). The Parquet files are generated under
    ``data_root`` unless they are there already; a case that cannot run here is recorded as not run."""
    total_start = time.perf_counter()
    data = bench_convert_data.prepare(data_root, rows, n_files)
    work = os.path.join(data["dir"], "runs")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
               "git": common.git_rev(), "loadavg_before": bench_loader._loadavg(), "data": data,
               "config": {"rows": rows, "files": n_files, "repeats": repeats, "cases": list(cases),
                          "columns": dict(MDS_COLUMNS), "wait_s": wait_s},
               "runs": {}, "not_run": {}}
    for c in cases:
        why = missing(c, peer_python)
        if why:
            R["not_run"][c] = why
            log(f"-- {c}: not run ({why})")
    for rep in range(repeats):
        for c in cases:
            if c not in R["not_run"]:
                R["runs"].setdefault(c, []).append(run_case(c, data, work, peer_python, f"{c}-{rep}", wait_s, keep))
    R["loadavg_after"] = bench_loader._loadavg()
    R["total_s"] = time.perf_counter() - total_start
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return R


def machine() -> dict:
    """CPU, cores, RAM (as the other sections record them) and the disk the data lives on."""
    import bench_pipeline

    info = bench_pipeline.machine()
    try:
        out = subprocess.run(["df", "-h", "--output=source,fstype,size", DATA if os.path.exists(DATA) else HERE],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        info["disk"] = " ".join(out[-1].split())
    except (OSError, subprocess.CalledProcessError, IndexError):
        pass
    return info


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv holding mosaicml-streaming, litdata, pyspark ('' leaves them out)")
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--files", type=int, default=DEFAULT_FILES)
    ap.add_argument("--repeats", type=int, default=1, help="runs (each in a fresh process) per case")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    common.add_run_options(ap, DATA, "the Parquet files")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    cases = tuple(c for c in args.cases.split(",") if c)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose among {', '.join(CASES)}")
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
    else:
        R = run_convert(args.data, args.peer_python or None, args.rows, n_files=args.files, repeats=args.repeats,
                        cases=cases, wait_s=args.wait, keep=args.keep_data)
    common.publish(R, markdown, __file__, args.out, None if args.from_json else args.json)
    wrong = failed(R)
    if wrong:
        log(f"!! failed or wrong: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
