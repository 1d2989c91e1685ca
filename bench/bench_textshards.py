"""JSON and CSV shards, side by side: shardstream's ``JSONWriter`` / ``CSVWriter`` / ``StreamingDataset``
vs mosaicml-streaming's, on the same samples.

    .venv/bin/python bench/bench_textshards.py [--out textshards.md] [--json textshards.json]
    .venv/bin/python bench/run.py --only textshards     # the same, as a section of docs/benchmarks.md

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The workload: 200,000 samples ``{"id": int, "text": str of 40..200 letters and spaces, "score": float}``,
generated once from a fixed seed and kept as JSON Lines under ``--data`` (``bench/.data/textshards``),
with 20,000 random indices. For each format (JSON, CSV) and compression (none, zstd), each library
writes the samples (default ``size_limit``) in a fresh process, then reads what it wrote in another
fresh process (``bench_textshards_sides.py``: one pass over every sample, then ``ds[i]`` at the random
indices). The driver checks that both libraries wrote the same bytes (SHA-256 of every file) and read
the same samples (count and checksums). ``bench/run.py`` calls :func:`run_textshards`,
:func:`markdown` and :func:`target_rows`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import shlex
import shutil
import string
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_loader  # noqa: E402
import bench_textshards_report  # noqa: E402
import common  # noqa: E402
from common import log  # noqa: E402

DEFAULT_SAMPLES = 200_000
DEFAULT_RANDOM = 20_000
SEED = 21
MIN_TEXT, MAX_TEXT = 40, 200
DATA = os.path.join(HERE, ".data", "textshards")
RUN_TIMEOUT_S = 900
FORMATS = ("json", "csv")
COMPRESSIONS = (None, "zstd")
LIBRARIES = ("shardstream", "mosaic")
markdown = bench_textshards_report.markdown
target_rows = bench_textshards_report.target_rows
failed = bench_textshards_report.failed


def prepare(root: str, samples: int, n_random: int) -> dict:
    """The samples as JSON Lines and the random indices, generated unless ``root`` holds them already."""
    d = os.path.join(root, f"n{samples}-r{n_random}-seed{SEED}")
    info = {"dir": d, "samples": samples, "random": n_random, "seed": SEED,
            "jsonl": os.path.join(d, "samples.jsonl"), "indices": os.path.join(d, "indices.json")}
    if os.path.exists(os.path.join(d, "done")):
        return dict(info, reused=True, bytes=os.path.getsize(info["jsonl"]))
    os.makedirs(d, exist_ok=True)
    rng = random.Random(SEED)
    alphabet = string.ascii_letters + "      "
    with open(info["jsonl"], "w") as f:
        for i in range(samples):
            text = "".join(rng.choices(alphabet, k=rng.randint(MIN_TEXT, MAX_TEXT))).strip() or "x"
            f.write(json.dumps({"id": i, "text": text, "score": rng.random() * 100}) + "\n")
    with open(info["indices"], "w") as f:
        json.dump([rng.randrange(samples) for _ in range(n_random)], f)
    open(os.path.join(d, "done"), "w").close()
    return dict(info, reused=False, bytes=os.path.getsize(info["jsonl"]))


def env_for(library: str, work: str) -> dict:
    """A side's environment: a private TMPDIR and an empty shardstream cache; for mosaicml-streaming the
    torchvision stand-in that ``import streaming`` needs; for shardstream this checkout's ``src``."""
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=tmp, SHARDSTREAM_CACHE_DIR=os.path.join(work, "ss-cache"))
    extra = os.path.join(ROOT, "tests", "peer_stubs") if library == "mosaic" else os.path.join(ROOT, "src")
    env["PYTHONPATH"] = extra + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def batch_size(samples: int) -> int:
    """The ``batch_size`` both datasets get (mosaicml-streaming iterates only with one): a divisor of the
    sample count, so that no epoch is padded or cut."""
    return math.gcd(samples, 256)


def case_name(fmt: str, compression) -> str:
    return f"{fmt}-{compression or 'none'}"


def run_step(step: str, library: str, case: str, data: dict, work: str, python: str, wait_s: float,
             limit: int = 0) -> dict:
    """One write or read of ``case`` by ``library`` in a fresh process; its result."""
    fmt, comp = case.split("-")
    tag = f"{library}-{case}-{step}"
    cfg = {"library": library, "step": step, "format": fmt, "compression": None if comp == "none" else comp,
           "samples": data["jsonl"], "indices": data["indices"], "out": os.path.join(work, "out", library, case),
           "result": os.path.join(work, f"result-{tag}.json"), "limit": limit,
           "batch_size": batch_size(data["samples"])}
    if step == "write":
        shutil.rmtree(cfg["out"], ignore_errors=True)
    cfg_path = os.path.join(work, f"config-{tag}.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    cmd = [python, os.path.join(HERE, "bench_textshards_sides.py"), cfg_path]
    quiet = bench_loader.wait_quiet(0.25, wait_s) if wait_s > 0 else {}
    log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}")
    res = bench_loader.measured_run(cmd, env_for(library, work), ROOT, cfg["result"],
                                    os.path.join(work, f"stderr-{tag}.log"), tag, quiet, RUN_TIMEOUT_S)
    if "error" not in res:
        rate = res["samples_per_s"] if step == "write" else res["iterate_samples_per_s"]
        log(f"   {tag}: {rate:,.0f} samples/s, peak RSS {res['peak_rss_mb']:,.0f} MB")
    return res


def run_textshards(data_root: str, peer_python: str | None, samples: int = DEFAULT_SAMPLES, *,
                   n_random: int = DEFAULT_RANDOM, formats: tuple = FORMATS, compressions: tuple = COMPRESSIONS,
                   wait_s: float = 30.0, limit: int = 0, keep: bool = False) -> dict:
    """Run the section and return its raw results (see :func:`markdown`). Without a peer venv only
    shardstream runs (recorded under ``not_run``)."""
    total_start = time.perf_counter()
    data = prepare(data_root, samples, n_random)
    work = os.path.join(data["dir"], "runs")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pythons = {"shardstream": sys.executable}
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": bench_loader.machine_info(), "git": common.git_rev(),
               "loadavg_before": bench_loader._loadavg(), "data": data,
               "config": {"samples": samples, "random": n_random, "batch_size": batch_size(samples), "limit": limit, "wait_s": wait_s,
                          "cases": [case_name(f, c) for f in formats for c in compressions],
                          "columns": {"id": "int", "text": "str", "score": "float"}},
               "runs": {}, "not_run": {}}
    if peer_python and os.path.exists(peer_python):
        pythons["mosaic"] = peer_python
    else:
        R["not_run"]["mosaic"] = "no peer venv (--peer-python)"
    for case in R["config"]["cases"]:
        for step in ("write", "read"):
            for lib, python in pythons.items():
                res = run_step(step, lib, case, data, work, python, wait_s, limit)
                R["runs"].setdefault(case, {}).setdefault(lib, {})[step] = res
        if not keep:
            shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
    R["loadavg_after"] = bench_loader._loadavg()
    R["total_s"] = time.perf_counter() - total_start
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return R


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv holding mosaicml-streaming ('' leaves it out)")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--random", type=int, default=DEFAULT_RANDOM, help="indices of the random-access pass")
    ap.add_argument("--limit", type=int, default=0, help="samples of the sequential pass (0: all)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset of json,csv")
    ap.add_argument("--compressions", default="none,zstd", help="comma-separated subset of none,zstd")
    common.add_run_options(ap, DATA, "the samples")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    formats = tuple(f for f in args.formats.split(",") if f)
    comps = tuple(None if c == "none" else c for c in args.compressions.split(",") if c)
    if set(formats) - set(FORMATS) or set(comps) - set(COMPRESSIONS):
        ap.error("formats are json and csv; compressions none and zstd")
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
    else:
        R = run_textshards(args.data, args.peer_python or None, args.samples, n_random=args.random,
                           formats=formats, compressions=comps, wait_s=args.wait, limit=args.limit,
                           keep=args.keep_data)
    common.publish(R, markdown, __file__, args.out, None if args.from_json else args.json)
    wrong = failed(R)
    if wrong:
        log(f"!! failed or wrong: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
