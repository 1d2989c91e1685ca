"""shardstream side of the benchmark (runs in the project venv).

    python bench/bench_shardstream.py --work bench/.data --json out.json [--repeats 3]

Reads the workload files written by ``bench/run.py`` from ``--work`` and writes its
results as JSON. Also measures the numpy memcpy baseline for the batch path.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, summarize, timed  # noqa: E402

import shardstream  # noqa: E402
from shardstream import MDSWriter, StreamingDataset  # noqa: E402


def write_mixed(out: str, samples: list, compression) -> None:
    with MDSWriter(out=out, columns=common.MIXED_COLUMNS, compression=compression, exist_ok=True) as w:
        write = w.write
        for s in samples:
            write(s)


def bench_write(work: str, mixed: common.Mixed, samples: list, repeats: int) -> dict:
    return common.bench_writes(work, "ss-mixed", mixed, lambda out, comp: write_mixed(out, samples, comp), repeats)
def bench_iterate(path: str, mixed: common.Mixed, repeats: int) -> dict:
    # No batch_size: one global step per sample, so the epoch is exactly the dataset (with
    # batch_size=256 the epoch would be padded to whole global batches, 64 repeats here).
    ds = StreamingDataset(local=path)
    return {"default": common.first_and_warm(ds, mixed, repeats)}


def bench_random(path: str, indices: np.ndarray, mixed: common.Mixed, repeats: int) -> dict:
    idx = indices.tolist()
    expect = mixed.expect_touch(indices)
    ds = StreamingDataset(local=path, batch_size=256)

    times = common.random_access_times(ds, idx, expect, repeats)
    r = summarize(times, len(idx))
    log(f"random ds[i]: {r['samples_per_s']:,.0f} samples/s")
    return {"default": r}


def _batch_pass(ds, bs: int, columns) -> int:
    n = 0
    for b in ds.batches(bs, columns=columns):
        n += len(b["label"])
    return n


def bench_batches_mixed(path: str, mixed: common.Mixed, bs: int, repeats: int) -> dict:
    ds = StreamingDataset(local=path, batch_size=bs)
    out = {}
    tok_bytes = int(mixed.tokens.nbytes)
    for name, cols, nbytes in (("all", None, mixed.payload_bytes),
                               ("tokens+label", ["tokens", "label"], tok_bytes + 8 * mixed.n)):
        _batch_pass(ds, bs, cols)  # warm-up pass (opens shards)
        times = []
        for _ in range(repeats):
            t, n = timed(lambda: _batch_pass(ds, bs, cols))
            assert n == mixed.n
            times.append(t)
        r = summarize(times, mixed.n, nbytes)
        out[name] = r
        log(f"batches({bs}) mixed {name}: {r['samples_per_s']:,.0f} samples/s, {r['GB_per_s']:.2f} GB/s")
    # Correctness spot check of one batch against the source data.
    b = next(ds.batches(bs, columns=["tokens", "label"]))
    assert np.array_equal(b["tokens"].lengths, np.diff(mixed.tok_offsets[:bs + 1]))
    assert np.array_equal(b["label"], mixed.labels[:bs])
    return out


def write_fixed(out: str, fx: common.Fixed) -> str | None:
    """Write a fixed-shape dataset (not timed)."""
    with MDSWriter(out=out, columns=fx.columns, exist_ok=True) as w:
        for s in fx.samples():
            w.write(s)
    return None


def memcpy_baseline(fx: common.Fixed, bs: int, repeats: int) -> dict:
    """Copy the same bytes (sample payloads + labels) from a preallocated array into a reused
    preallocated output, one batch at a time."""
    src = np.ascontiguousarray(fx.data.reshape(fx.n, -1).view(np.uint8))
    labels = fx.labels
    out = np.empty((bs, src.shape[1]), np.uint8)
    out_l = np.empty(bs, labels.dtype)
    n = fx.n

    def run() -> None:
        for lo in range(0, n, bs):
            hi = min(lo + bs, n)
            np.copyto(out[:hi - lo], src[lo:hi])
            np.copyto(out_l[:hi - lo], labels[lo:hi])

    run()
    times = [timed(run)[0] for _ in range(repeats)]
    return summarize(times, n, fx.payload_bytes)


def bench_batches_fixed(work: str, kind: str, bs: int, repeats: int) -> dict:
    fx = common.Fixed(os.path.join(work, f"{kind}.npz"), kind)
    out = os.path.join(work, f"ss-{kind}")
    shutil.rmtree(out, ignore_errors=True)
    note = write_fixed(out, fx)
    ds = StreamingDataset(local=out, batch_size=bs)
    first_t, n = timed(lambda: _batch_pass(ds, bs, None))
    assert n == fx.n
    times = []
    for _ in range(repeats):
        t, n = timed(lambda: _batch_pass(ds, bs, None))
        times.append(t)
    r = summarize(times, fx.n, fx.payload_bytes)
    r["first"] = summarize([first_t], fx.n, fx.payload_bytes)
    b = next(ds.batches(bs))
    assert np.array_equal(b[fx.key], fx.data[:bs]) and np.array_equal(b["label"], fx.labels[:bs])
    base = memcpy_baseline(fx, bs, repeats)
    r["memcpy"] = base
    r["slowdown_vs_memcpy"] = base["samples_per_s"] / r["samples_per_s"]
    r["sample_bytes"] = fx.sample_bytes
    r["samples"] = fx.n
    if note:
        r["note"] = note
    log(f"batches({bs}) {kind}: {r['samples_per_s']:,.0f} samples/s, {r['GB_per_s']:.2f} GB/s; memcpy "
        f"{base['GB_per_s']:.2f} GB/s ({r['slowdown_vs_memcpy']:.2f}x)")
    del ds, fx
    gc.collect()
    shutil.rmtree(out, ignore_errors=True)
    return r


def main() -> None:
    args = common.side_args(batch_size=256)
    start = time.perf_counter()
    log(f"shardstream {shardstream.__version__} (numpy {np.__version__})")
    mixed = common.Mixed(os.path.join(args.work, "mixed.npz"))
    indices = common.load_indices(os.path.join(args.work, "indices.npz"))
    samples = mixed.samples()
    res = {"library": "shardstream", "version": shardstream.__version__, **common.env_info()}
    res["write"] = bench_write(args.work, mixed, samples, args.repeats)
    del samples
    gc.collect()
    path = os.path.join(args.work, "ss-mixed")
    res["iterate"] = bench_iterate(path, mixed, args.repeats)
    res["random"] = bench_random(path, indices, mixed, args.repeats)
    res["batches_mixed"] = bench_batches_mixed(path, mixed, args.batch_size, args.repeats)
    shutil.rmtree(path, ignore_errors=True)
    res["batches_fixed"] = {kind: bench_batches_fixed(args.work, kind, args.batch_size, args.repeats)
                            for kind in ("vec", "img")}
    res["elapsed_s"] = time.perf_counter() - start
    common.emit(res, args.json)


if __name__ == "__main__":
    main()
