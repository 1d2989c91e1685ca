"""mosaicml-streaming side of the benchmark (runs in the peer venv).

    PYTHONPATH=tests/peer_stubs TMPDIR=<own dir> python bench/bench_mosaic.py --work bench/.data --json out.json

``bench/run.py`` sets PYTHONPATH (``import streaming`` needs the torchvision stand-in)
and a private TMPDIR (streaming leaves filelock files there). Datasets are iterated in
the main process (no DataLoader), as a single-process training loop would.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, summarize, timed  # noqa: E402

import streaming  # noqa: E402
from streaming import MDSWriter, StreamingDataset  # noqa: E402
from streaming.base.util import clean_stale_shared_memory  # noqa: E402

PREDOWNLOADS = (16_384, 65_536, 262_144)  # the last one is raised to the dataset size if that is larger


def _shm_in_use_elsewhere() -> bool:
    """Whether another live process maps streaming's shared memory (/dev/shm/NNNNNN_*), e.g. a concurrent
    test run: clean_stale_shared_memory() unlinks every streaming segment, live or not."""
    me = str(os.getpid())
    pattern = re.compile(r"/dev/shm/\d{6}_")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                if pattern.search(f.read()):
                    return True
        except OSError:
            continue
    return False


def clean_shm() -> None:
    if not os.path.isdir("/proc") or not _shm_in_use_elsewhere():
        clean_stale_shared_memory()
    else:
        log("another process maps /dev/shm: not running clean_stale_shared_memory()")


def write(out: str, columns: dict, samples: list, compression=None) -> None:
    with MDSWriter(out=out, columns=columns, compression=compression) as w:
        wr = w.write
        for s in samples:
            wr(s)


def bench_write(work: str, mixed: common.Mixed, samples: list, repeats: int) -> dict:
    return common.bench_writes(work, "mo-mixed", mixed,
                               lambda out, comp: write(out, common.MIXED_COLUMNS, samples, comp), repeats)
def open_ds(path: str, predownload=None, batch_size: int = 256) -> StreamingDataset:
    return StreamingDataset(local=path, remote=None, shuffle=False, batch_size=batch_size, predownload=predownload)


def _drop(ds) -> None:
    del ds
    gc.collect()


def bench_iterate(path: str, mixed: common.Mixed, warm_repeats: int) -> dict:
    expect = mixed.expect_touch()
    out = {}
    for pre in (None, *PREDOWNLOADS[:-1], max(PREDOWNLOADS[-1], mixed.n)):
        ds = open_ds(path, pre)
        name = "default" if pre is None else f"predownload={pre}"
        t, acc = timed(lambda: common.touch_all(ds))
        assert acc == expect, (acc, expect)
        first = summarize([t], mixed.n)
        times = []
        for _ in range(warm_repeats if pre is None else 1):
            t, acc = timed(lambda: common.touch_all(ds))
            assert acc == expect
            times.append(t)
        warm = summarize(times, mixed.n)
        out[name] = {"first": first, "warm": warm, "predownload": ds.predownload}
        log(f"iterate {name} (predownload {ds.predownload}): first {first['samples_per_s']:,.0f}, "
            f"warm {warm['samples_per_s']:,.0f} samples/s")
        _drop(ds)
    tuned = {k: v for k, v in out.items() if k != "default"}
    best = max(tuned, key=lambda k: tuned[k]["warm"]["samples_per_s"])
    out["best_tuned"] = best
    return out


def bench_random(path: str, indices: np.ndarray, mixed: common.Mixed, repeats: int) -> dict:
    idx = indices.tolist()
    expect = mixed.expect_touch(indices)
    ds = open_ds(path)

    times = common.random_access_times(ds, idx, expect, repeats)
    r = summarize(times, len(idx))
    log(f"random ds[i]: {r['samples_per_s']:,.0f} samples/s")
    _drop(ds)
    return {"default": r}


def _stack_pass(ds, key: str, bs: int) -> int:
    """Group samples into batches of ``bs`` and stack them, as a collate function would."""
    n = 0
    xs, ys = [], []
    for s in ds:
        xs.append(s[key])
        ys.append(s["label"])
        if len(xs) == bs:
            x, y = np.stack(xs), np.asarray(ys, np.int64)
            n += len(y)
            xs, ys = [], []
    if xs:
        x, y = np.stack(xs), np.asarray(ys, np.int64)
        n += len(y)
    return n


def bench_stack(work: str, kind: str, bs: int, predownload, warm_repeats: int) -> dict:
    fx = common.Fixed(os.path.join(work, f"{kind}.npz"), kind)
    out = os.path.join(work, f"mo-{kind}")
    shutil.rmtree(out, ignore_errors=True)
    write(out, fx.columns, fx.samples())
    ds = open_ds(out, predownload, bs)
    t, n = timed(lambda: _stack_pass(ds, fx.key, bs))
    assert n == fx.n
    first = summarize([t], fx.n, fx.payload_bytes)
    times = []
    for _ in range(warm_repeats):
        t, n = timed(lambda: _stack_pass(ds, fx.key, bs))
        times.append(t)
    r = summarize(times, fx.n, fx.payload_bytes)
    r["first"] = first
    r["predownload"] = ds.predownload
    log(f"iterate + np.stack({bs}) {kind}: {r['samples_per_s']:,.0f} samples/s, {r['GB_per_s']:.2f} GB/s")
    _drop(ds)
    shutil.rmtree(out, ignore_errors=True)
    return r


def main() -> None:
    args = common.side_args(batch_size=256)
    start = time.perf_counter()
    clean_shm()
    import torch

    log(f"mosaicml-streaming {streaming.__version__} (numpy {np.__version__}, torch {torch.__version__})")
    res = {"library": "mosaicml-streaming", "version": streaming.__version__, "torch": torch.__version__,
           **common.env_info()}
    mixed = common.Mixed(os.path.join(args.work, "mixed.npz"))
    indices = common.load_indices(os.path.join(args.work, "indices.npz"))
    samples = mixed.samples()
    res["write"] = bench_write(args.work, mixed, samples, args.repeats)
    del samples
    gc.collect()
    path = os.path.join(args.work, "mo-mixed")
    res["iterate"] = bench_iterate(path, mixed, max(1, args.repeats - 1))
    res["random"] = bench_random(path, indices, mixed, args.repeats)
    shutil.rmtree(path, ignore_errors=True)
    best_pre = res["iterate"][res["iterate"]["best_tuned"]]["predownload"]
    res["stack_fixed"] = {kind: bench_stack(args.work, kind, args.batch_size, best_pre, max(1, args.repeats - 1))
                          for kind in ("vec", "img")}
    clean_shm()
    res["elapsed_s"] = time.perf_counter() - start
    common.emit(res, args.json)


if __name__ == "__main__":
    main()
