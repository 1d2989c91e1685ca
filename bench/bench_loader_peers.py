"""mosaicml-streaming and litdata sides of the DataLoader benchmark (run in the peer venv).

    PYTHONPATH=tests/peer_stubs TMPDIR=<own dir> .venv-peers/bin/python bench/bench_loader_peers.py CONFIG.json

Started by ``bench/bench_loader.py``, which sets PYTHONPATH (``import streaming`` needs the
torchvision stand-in), a private TMPDIR and litdata's cache folders. ``CONFIG.json`` names the
library, the task (``write``, ``throughput``, ``states`` or ``resume``), the dataset directory
and where to write the result; the measuring itself is shared with shardstream's side
(:func:`bench_loader.throughput`, :func:`bench_loader.build_states`, :func:`bench_loader.resume`).
"""

from __future__ import annotations

import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common
import numpy as np
from bench_loader import BATCH, COLUMNS, WORKERS, build_states, load, load_config, resume, samples, throughput


def mosaic(cfg: dict, import_t0: float) -> dict:
    import streaming
    import torch
    from bench_mosaic import clean_shm
    from streaming import MDSWriter, StreamingDataLoader, StreamingDataset

    import_s = time.perf_counter() - import_t0
    info = {"library": "mosaicml-streaming", "version": streaming.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "numpy": np.__version__}
    clean_shm()
    if cfg["task"] == "write":
        x, labels = load(cfg["npz"])
        t = time.perf_counter()
        with MDSWriter(out=cfg["path"], columns=COLUMNS) as w:
            write = w.write
            for s in samples(x, labels):
                write(s)
        info["write_s"] = time.perf_counter() - t
        return info

    def make():
        ds = StreamingDataset(local=cfg["path"], remote=None, shuffle=cfg.get("shuffle", True), batch_size=BATCH)
        return ds, StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS)

    return _run(cfg, make, info, import_s)


def litdata_side(cfg: dict, import_t0: float) -> dict:
    import litdata
    import torch

    import_s = time.perf_counter() - import_t0
    info = {"library": "litdata", "version": litdata.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "numpy": np.__version__}
    if cfg["task"] == "write":
        from litdata.streaming.writer import BinaryWriter

        x, labels = load(cfg["npz"])
        t = time.perf_counter()
        w = BinaryWriter(cfg["path"], chunk_bytes="64MB")
        for i, s in enumerate(samples(x, labels)):
            w.add_item(i, s)
        w.done()
        w.merge()
        info["write_s"] = time.perf_counter() - t
        return info

    def make():
        ds = litdata.StreamingDataset(cfg["path"], shuffle=cfg.get("shuffle", True))
        return ds, litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS)

    return _run(cfg, make, info, import_s)


def _run(cfg: dict, make, info: dict, import_s: float) -> dict:
    task = cfg["task"]
    if task == "throughput":
        return throughput(cfg, make, info)
    if task == "states":
        return build_states(cfg, make, info)
    if task == "resume":
        return resume(cfg, make, info, import_s)
    raise SystemExit(f"unknown task {task!r}")


def main() -> None:
    cfg = load_config(sys.argv[1])
    t0 = time.perf_counter()
    res = mosaic(cfg, t0) if cfg["library"] == "mosaic" else litdata_side(cfg, t0)
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
