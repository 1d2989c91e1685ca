"""litdata side of the benchmark (runs in the peer venv).

    TMPDIR=<own dir> DATA_OPTIMIZER_CACHE_FOLDER=... python bench/bench_litdata.py --work bench/.data --json out.json

``litdata.optimize`` starts its workers with ``spawn``: ``make_sample`` must be a
top-level function of an importable module and ``main`` must sit behind the
``__main__`` guard. The worker finds the workload file through ``BENCH_MIXED``.
``bench/run.py`` points TMPDIR and litdata's cache folders at a private directory
(litdata leaves directories there) and removes it afterwards.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, summarize, timed  # noqa: E402

_MIXED = None


def make_sample(i: int) -> dict:
    """optimize()'s fn: input i -> sample i of the mixed workload (same dicts as the MDS writers get)."""
    global _MIXED
    if _MIXED is None:
        _MIXED = common.Mixed(os.environ["BENCH_MIXED"])
    return _MIXED.sample(i)


def bench_write(work: str, mixed: common.Mixed, repeats: int) -> tuple[dict, str]:
    import litdata
    from litdata.streaming.writer import BinaryWriter

    res = {}
    out = os.path.abspath(os.path.join(work, "lit-mixed"))
    shutil.rmtree(out, ignore_errors=True)
    t, _ = timed(lambda: litdata.optimize(fn=make_sample, inputs=list(range(mixed.n)), output_dir=out,
                                          chunk_bytes="64MB", num_workers=1, verbose=False))
    r = summarize([t], mixed.n, mixed.payload_bytes)
    r["disk_bytes"] = common.dir_bytes(out)
    res["optimize"] = r
    log(f"write optimize(num_workers=1): {r['samples_per_s']:,.0f} samples/s, {r['MB_per_s']:,.0f} MB/s")

    # The in-process writer under optimize(): same loop as the MDS writers (samples prebuilt).
    samples = mixed.samples()
    bw_out = os.path.abspath(os.path.join(work, "lit-mixed-bw"))

    def write_bw() -> None:
        w = BinaryWriter(bw_out, chunk_bytes="64MB")
        for i, s in enumerate(samples):
            w.add_item(i, s)
        w.done()
        w.merge()

    times = []
    for _ in range(max(1, repeats - 1)):
        shutil.rmtree(bw_out, ignore_errors=True)
        gc.collect()
        times.append(timed(write_bw)[0])
    r = summarize(times, mixed.n, mixed.payload_bytes)
    r["disk_bytes"] = common.dir_bytes(bw_out)
    res["binary_writer"] = r
    log(f"write BinaryWriter: {r['samples_per_s']:,.0f} samples/s, {r['MB_per_s']:,.0f} MB/s")
    shutil.rmtree(bw_out, ignore_errors=True)
    return res, out


def bench_iterate(path: str, mixed: common.Mixed, warm_repeats: int) -> dict:
    import litdata

    ds = litdata.StreamingDataset(path)
    return {"default": common.first_and_warm(ds, mixed, warm_repeats)}


def bench_random(path: str, indices, mixed: common.Mixed, repeats: int, default_subset: int) -> dict:
    import litdata

    out = {}
    # Default settings decode a window of items around each index (batch_decode="auto"),
    # which makes single-index access slow: time it on a prefix of the same indices.
    # batch_decode=False decodes one item per access.
    for name, kwargs, idx_arr, reps in (("default", {}, indices[:default_subset], 1),
                                        ("batch_decode=False", {"batch_decode": False}, indices, repeats)):
        ds = litdata.StreamingDataset(path, **kwargs)
        ds[0]  # open the dataset outside the timer
        idx = idx_arr.tolist()
        expect = mixed.expect_touch(idx_arr)

        times = common.random_access_times(ds, idx, expect, reps)
        r = summarize(times, len(idx))
        out[name] = r
        log(f"random ds[i] {name} ({len(idx)} indices): {r['samples_per_s']:,.0f} samples/s")
        del ds
        gc.collect()
    out["best"] = max(("default", "batch_decode=False"), key=lambda k: out[k]["samples_per_s"])
    return out


def main() -> None:
    args = common.side_args(default_random_subset=5000)
    start = time.perf_counter()
    import litdata
    import numpy as np
    import torch

    log(f"litdata {litdata.__version__} (numpy {np.__version__}, torch {torch.__version__})")
    res = {"library": "litdata", "version": litdata.__version__, "torch": torch.__version__, **common.env_info()}
    mixed_path = os.path.abspath(os.path.join(args.work, "mixed.npz"))
    os.environ["BENCH_MIXED"] = mixed_path
    mixed = common.Mixed(mixed_path)
    indices = common.load_indices(os.path.join(args.work, "indices.npz"))
    res["write"], path = bench_write(args.work, mixed, args.repeats)
    gc.collect()
    res["iterate"] = bench_iterate(path, mixed, max(1, args.repeats - 1))
    res["random"] = bench_random(path, indices, mixed, args.repeats, args.default_random_subset)
    shutil.rmtree(path, ignore_errors=True)
    res["elapsed_s"] = time.perf_counter() - start
    common.emit(res, args.json)


if __name__ == "__main__":
    main()
