"""Opening a dataset of many Parquet files on the loopback S3 server: time to the first sample, requests
and bytes, cold (no description cached) and warm (descriptions cached), against reading every footer
one by one with pyarrow (what a loader that opens each file in turn pays before its first sample).

    .venv/bin/python bench/bench_files_startup.py --files 10000 --json out.json

Every file holds a few rows in one row group (the cost measured is per file, not per row). The proxy in
front of the server waits ``--latency`` seconds before each answer, as an object store's time to first
byte; without it the loopback server's own CPU (it shares the machine) is what every strategy waits on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def write_files(dirname: str, files: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(dirname, exist_ok=True)
    for k in range(files):
        ids = np.arange(k * rows, (k + 1) * rows, dtype=np.int64)
        tokens = pa.array([np.arange(64, dtype=np.int32) + int(i) for i in ids], pa.list_(pa.int32()))
        pq.write_table(pa.table({"id": ids, "tokens": tokens, "text": [f"row {i}" for i in ids]}),
                       os.path.join(dirname, f"part-{k:06d}.parquet"))


def upload(server, dirname: str, remote: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    bucket, _, prefix = remote.partition("://")[2].partition("/")
    names = sorted(os.listdir(dirname))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: server._put_object(bucket, f"{prefix}/{n}", os.path.join(dirname, n)), names))


def open_and_first(remote: str, cache: str, options: dict) -> tuple[float, object]:
    from shardstream import StreamingDataset

    t0 = time.perf_counter()
    ds = StreamingDataset(remote=f"{remote}/*.parquet", local=cache, storage_options=options, batch_size=1)
    next(iter(ds))
    return time.perf_counter() - t0, ds


def footers_one_by_one(remote: str, options: dict, limit: int) -> tuple[float, int]:
    """Read the footers of the first ``limit`` files in turn with pyarrow over s3fs (extrapolated)."""
    import pyarrow.parquet as pq
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    names = sorted(fs.glob(remote.partition("://")[2] + "/*.parquet"))
    t0 = time.perf_counter()
    for name in names[:limit]:
        with fs.open(name, "rb") as f:
            pq.ParquetFile(f).metadata  # noqa: B018
    return (time.perf_counter() - t0) * len(names) / min(limit, len(names)), len(names)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--one-by-one", type=int, default=500, help="files read one by one (time extrapolated)")
    ap.add_argument("--latency", type=float, default=0.03,
                    help="seconds the proxy waits before answering each request (an object store's first byte)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from shardstream.testing.faults import Faults
    from shardstream.testing.servers import S3Server, unique_name

    work = tempfile.mkdtemp(prefix="startup-")
    os.environ["SHARDSTREAM_CACHE_DIR"] = os.path.join(work, "root")
    out: dict = {"files": args.files, "rows_per_file": args.rows, "latency_s": args.latency}
    try:
        data = os.path.join(work, "data")
        write_files(data, args.files, args.rows)
        out["bytes_per_file"] = int(np.mean([os.path.getsize(os.path.join(data, n)) for n in os.listdir(data)]))
        with S3Server() as server:
            remote = f"{server.make_bucket(unique_name())}/pq"
            upload(server, data, remote)
            with server.proxy(Faults(latency_s=args.latency)) as proxy:
                opts = proxy.storage_options
                for label in ("cold", "warm"):
                    proxy.faults.clear()
                    secs, ds = open_and_first(remote, os.path.join(work, "cache"), opts)
                    gets = sum(proxy.faults.requests.values())
                    out[label] = {"seconds_to_first_sample": round(secs, 3), "get_requests": gets,
                                  "bytes": proxy.faults.bytes_served, "samples": len(ds)}
                    print(label, out[label], flush=True)
                proxy.faults.clear()
                secs, n = footers_one_by_one(remote, opts, args.one_by_one)
                out["one_by_one"] = {"seconds_all_footers_extrapolated": round(secs, 3), "files": n,
                                     "measured_files": min(args.one_by_one, n),
                                     "get_requests_per_file": round(sum(proxy.faults.requests.values())
                                                                    / min(args.one_by_one, n), 2)}
                print("one by one", out["one_by_one"], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
