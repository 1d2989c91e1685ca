"""Ray Data <-> MDS throughput on a local Ray instance: 200k rows (id, int32 tokens of 64-512, text).

Writes the rows from a materialised Ray Dataset with ``MDSDatasink`` and reads them back with ``read_mds``
(iterating every batch), and prints rows/s and MB/s of each. Also times Ray's own Parquet write and read
of the same rows as a point of reference.

    PYTHONPATH=src python bench/bench_ray.py [--rows 200000] [--cpus 2] [--blocks 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import ray


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, 513, rows)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 50_000, int(offsets[-1]),
                                                                                dtype=np.int32)))
    words = np.array(["stream", "shard", "data", "ray", "token", "batch", "epoch", "model"])
    text = [" ".join(words[rng.integers(0, 8, int(n))]) for n in rng.integers(10, 60, rows)]
    return pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "tokens": tokens, "text": pa.array(text)})


def timed(label: str, nbytes: int, rows: int, fn) -> float:
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    print(f"{label:<28} {took:7.2f} s  {rows / took:>10,.0f} rows/s  {nbytes / took / 1e6:7.1f} MB/s")
    return took


def drain(ds) -> int:
    return sum(len(b["id"]) for b in ds.iter_batches(batch_size=4096, batch_format="pyarrow"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=8)
    args = parser.parse_args()
    from shardstream.integrations.ray import MDSDatasink, read_mds

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    table = make_table(args.rows)
    nbytes = table.nbytes
    print(f"{args.rows:,} rows, {nbytes / 1e6:.0f} MB in Arrow, {args.blocks} blocks, {args.cpus} CPUs")
    ds = ray.data.from_arrow(table).repartition(args.blocks).materialize()
    root = tempfile.mkdtemp(prefix="bench-ray-")
    try:
        out = os.path.join(root, "mds")
        timed("write MDSDatasink", nbytes, args.rows, lambda: ds.write_datasink(MDSDatasink(out)))
        got = []
        timed("read read_mds + iterate", nbytes, args.rows,
              lambda: got.append(drain(read_mds(out, override_num_blocks=args.blocks))))
        assert got == [args.rows], got
        pq = os.path.join(root, "parquet")
        timed("write_parquet (reference)", nbytes, args.rows, lambda: ds.write_parquet(pq))
        timed("read_parquet (reference)", nbytes, args.rows,
              lambda: drain(ray.data.read_parquet(pq, override_num_blocks=args.blocks)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
