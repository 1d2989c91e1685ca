"""mosaicml-streaming's side of the handoff benchmark (run in the peer venv).

    PYTHONPATH=tests/peer_stubs TMPDIR=<own dir> .venv-peers/bin/python bench/bench_handoff_peers.py CONFIG.json

Started by ``bench/bench_handoff.py``. Its ``StreamingDataset(local=..., shuffle=True,
batch_size=B, predownload=P)`` reads the MDS files shardstream wrote, through its
``StreamingDataLoader``. ``CONFIG.json`` names the task: ``collate`` (per-sample dicts through the
shared user ``collate_fn``, :func:`bench_handoff_sides.collate`, timed by
:func:`bench_loader.throughput`) or ``handoff`` (``default_collate``, unpinned or pinned and moved
to the GPU by the loop, timed by :func:`bench_handoff_sides.measure`). Stale shared memory of
earlier runs is cleaned first, as in ``bench_mosaic.py``.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_loader
import common
from bench_handoff_sides import collate, measure, versions


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    import streaming
    from bench_mosaic import clean_shm
    from streaming import StreamingDataLoader, StreamingDataset

    info = dict(versions("mosaic"), version=streaming.__version__)
    clean_shm()
    task = cfg["task"]

    def dataset():
        return StreamingDataset(local=cfg["path"], remote=None, shuffle=True, batch_size=cfg["batch"],
                                predownload=cfg.get("predownload"))

    if task == "collate":
        def make_collate():
            ds = dataset()
            return ds, StreamingDataLoader(ds, batch_size=cfg["batch"], num_workers=cfg["workers"],
                                           collate_fn=collate)

        res = bench_loader.throughput(cfg, make_collate, info)
    elif task == "handoff":
        def make():
            return StreamingDataLoader(dataset(), batch_size=cfg["batch"], num_workers=cfg["workers"],
                                       pin_memory=cfg.get("mode") == "pinned",
                                       persistent_workers=cfg.get("persistent", False))

        res = measure(make, cfg, info)
    else:
        raise SystemExit(f"unknown task {task!r}")
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
