"""Reading files people already have: the peers' children of ``bench/bench_files.py`` (peer venv).

    TMPDIR=<own dir> [PYTHONPATH=tests/peer_stubs] python bench/bench_files_peers.py CONFIG.json

Tasks (``CONFIG['library']`` / ``CONFIG['task']``):

- ``litdata`` / ``optimize``: ``litdata.optimize`` writes its own copy of the rows the passes read
  (the first ``limit``; one worker, so the rows keep their order; ``fn`` yields the rows of one
  10,000-row block per input).
- ``litdata`` / ``sequential``: ``litdata.StreamingDataset(that copy)``, dict rows, timed passes.
- ``litdata`` / ``parquet``: litdata's Parquet support over the same Parquet files (symbolic links
  in a directory of their own): ``index_parquet_dataset(dir)``, then
  ``StreamingDataset(dir, item_loader=ParquetLoader())``. Needs polars and pyarrow in the peer venv.
  litdata lists the files in ``os.listdir`` order, so its passes are checked against the rows of
  the files in the order its index names them.
- ``mosaic`` / ``sequential``: mosaicml-streaming's ``StreamingDataset(local=mds)`` over the MDS copy.

``litdata.optimize`` starts its worker with ``spawn``: ``block_rows`` is a top-level function and
finds the rows through ``BENCH_FILES_NPZ``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common  # noqa: E402
from bench_files_sides import Rows, info, load_config, timed_passes  # noqa: E402
from common import log  # noqa: E402

_ROWS = None


def block_rows(start: int):
    """optimize()'s fn: the rows of the block that begins at ``start`` (same dicts as the other copies),
    up to ``BENCH_FILES_ROWS``."""
    global _ROWS
    if _ROWS is None:
        _ROWS = Rows(os.environ["BENCH_FILES_NPZ"])
    stop = min(start + int(os.environ["BENCH_FILES_BLOCK"]), int(os.environ["BENCH_FILES_ROWS"]))
    for i in range(start, stop):
        yield _ROWS.sample(i)


def lit_optimize(cfg: dict) -> dict:
    import litdata

    os.environ["BENCH_FILES_NPZ"] = os.path.abspath(cfg["npz"])
    os.environ["BENCH_FILES_BLOCK"] = str(cfg["block"])
    os.environ["BENCH_FILES_ROWS"] = str(cfg["limit"])
    t = time.perf_counter()
    litdata.optimize(fn=block_rows, inputs=list(range(0, cfg["limit"], cfg["block"])), output_dir=cfg["path"],
                     chunk_bytes="64MB", num_workers=1, verbose=False)
    took = time.perf_counter() - t
    log(f"litdata.optimize: {took:.1f}s")
    return {"write_s": took, "disk_bytes": common.dir_bytes(cfg["path"])}


def lit_sequential(cfg: dict) -> dict:
    import litdata

    return timed_passes(lambda: litdata.StreamingDataset(cfg["path"]), cfg, fresh=False)


def lit_parquet(cfg: dict) -> dict:
    """litdata over the Parquet files: index them, then read through its ParquetLoader."""
    import litdata
    from litdata.streaming.item_loader import ParquetLoader
    from litdata.streaming.writer import index_parquet_dataset

    os.makedirs(cfg["path"], exist_ok=True)
    for f in cfg["files"]:
        os.symlink(os.path.abspath(f), os.path.join(cfg["path"], os.path.basename(f)))
    t = time.perf_counter()
    index_parquet_dataset(cfg["path"], num_workers=1)
    index_s = time.perf_counter() - t
    order = file_order(cfg["path"])
    cfg = dict(cfg, expect=Rows(cfg["npz"]).expect_rows(
        np.concatenate([np.arange(f * cfg["rows_per_file"], (f + 1) * cfg["rows_per_file"]) for f in order])[
            :cfg["limit"]]))
    out = {"index_s": index_s, "file_order": order}
    out.update(timed_passes(lambda: litdata.StreamingDataset(cfg["path"], item_loader=ParquetLoader()), cfg,
                            fresh=False))
    return out


def file_order(path: str) -> list[int]:
    """The order in which litdata's Parquet index lists the files (``os.listdir``'s, not sorted): the
    numbers of their names ``part-NNNNN.parquet``, so the checks expect the rows litdata reads first."""
    with open(os.path.join(path, "index.json")) as f:
        chunks = json.load(f)["chunks"]
    return [int(os.path.basename(c["filename"]).split("-")[1].split(".")[0]) for c in chunks]


def mosaic_sequential(cfg: dict) -> dict:
    from bench_mosaic import clean_shm
    from streaming import StreamingDataset

    clean_shm()
    out = timed_passes(lambda: StreamingDataset(local=cfg["path"], remote=None, shuffle=False,
                                                batch_size=cfg["batch_size"]), cfg, fresh=False)
    clean_shm()
    return out


def main() -> None:
    cfg = load_config(sys.argv[1])
    if cfg["library"] == "mosaic":
        import streaming

        res = info("mosaicml-streaming", streaming.__version__)
        res.update(mosaic_sequential(cfg))
    else:
        import litdata

        res = info("litdata", litdata.__version__)
        res.update({"optimize": lit_optimize, "sequential": lit_sequential, "parquet": lit_parquet}[cfg["task"]](cfg))
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
