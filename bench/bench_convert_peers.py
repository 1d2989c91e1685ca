"""The peers' sides of ``bench/bench_convert.py`` (peer venv): mosaicml-streaming's ``MDSWriter`` loop over
Parquet batches, its ``dataframe_to_mds`` on a local Spark session, and litdata's ``optimize``.

    .venv-peers/bin/python bench/bench_convert_peers.py CONFIG.json

Each is written as the library's documentation shows it, on the same files and columns as shardstream's
sides (``bench_convert_sides.MDS_COLUMNS``), zstd, each library's default shard size and hashes (none for
either). The output is then counted with the library's own reader and rows compared by ``id`` with the
Parquet's (``bench_convert_data.check_rows``). ``import streaming`` needs ``tests/peer_stubs`` on
``PYTHONPATH`` (the driver sets it).
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_convert_data  # noqa: E402
from bench_convert_sides import MDS_COLUMNS, finish, java_version, main, measure, spark_session, versions  # noqa: E402


def parquet_rows(path: str):
    """Rows of one Parquet file as the dicts both writers take: ``tokens`` as an int32 array."""
    import numpy as np
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches():
        for r in batch.to_pylist():
            r["tokens"] = np.asarray(r["tokens"], np.int32)
            yield r


def mosaic_loop(cfg: dict) -> dict:
    """One ``streaming.MDSWriter`` fed every row of every file, in order."""
    from streaming import MDSWriter

    def convert() -> None:
        with MDSWriter(out=cfg["out_dir"], columns=MDS_COLUMNS, compression="zstd") as out:
            for path in cfg["data"]["files"]:
                for r in parquet_rows(path):
                    out.write(r)

    res = measure(convert, cfg)
    res.update(hashes=[], versions=versions("mosaicml-streaming", "pyarrow", "numpy"))
    return finish(res, cfg, lambda: mosaic_check(cfg))


def mosaic_spark(cfg: dict) -> dict:
    """``streaming.base.converters.dataframe_to_mds`` over ``spark.read.parquet(files)`` (its partitions)."""
    from streaming.base.converters import dataframe_to_mds

    spark_start = time.perf_counter()
    spark = spark_session("mosaic-dataframe-to-mds")
    session_s = time.perf_counter() - spark_start

    def convert() -> dict:
        df = spark.read.parquet(*cfg["data"]["files"])
        dataframe_to_mds(df, merge_index=True,
                         mds_kwargs={"out": cfg["out_dir"], "columns": MDS_COLUMNS, "compression": "zstd"})
        return {"partitions": df.rdd.getNumPartitions()}

    try:
        res = measure(convert, cfg)
    finally:
        spark.stop()
    res.update(session_s=session_s, hashes=[],
               versions=dict(versions("mosaicml-streaming", "pyspark", "pyarrow", "pandas"), java=java_version()))
    return finish(res, cfg, lambda: mosaic_check(cfg))


def mosaic_check(cfg: dict) -> dict:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    ds = StreamingDataset(local=cfg["out_dir"], batch_size=1)
    try:
        return bench_convert_data.check_rows(cfg["data"], ds.num_samples, lambda j: ds[j])
    finally:
        del ds
        clean_stale_shared_memory()


def litdata_optimize(cfg: dict) -> dict:
    """``litdata.optimize(fn, inputs=files, num_workers=2, compression='zstd', chunk_bytes='64MB')``, ``fn``
    yielding each file's rows."""
    import litdata

    def convert() -> None:
        litdata.optimize(fn=parquet_rows, inputs=list(cfg["data"]["files"]), output_dir=cfg["out_dir"],
                         num_workers=cfg.get("workers", 2), compression="zstd", chunk_bytes="64MB")

    res = measure(convert, cfg)
    res.update(hashes=[], versions=versions("litdata", "pyarrow", "numpy", "torch"))
    return finish(res, cfg, lambda: litdata_check(cfg))


def litdata_check(cfg: dict) -> dict:
    import litdata

    ds = litdata.StreamingDataset(cfg["out_dir"])
    return bench_convert_data.check_rows(cfg["data"], len(ds), lambda j: ds[j])


SIDES = {"mosaic-loop": mosaic_loop, "mosaic-spark": mosaic_spark, "litdata": litdata_optimize}

if __name__ == "__main__":
    main(sys.argv[1], SIDES)
