"""What runs on a Spark executor: one partition's Arrow batches written as one part of the dataset.

``df.mapInArrow(partition_writer(...), SUMMARY_SCHEMA)`` hands each task the record batches of its
partition; the task writes them with :class:`~shardstream.convert.ArrowMDSWriter` into
``OUT/part-<partition id>`` (staged locally and uploaded when ``OUT`` is a URL) and yields one summary
row: the partition, its rows, its shards and its index's location. An empty partition writes nothing
and yields nothing. Only these summary rows travel back to the driver, never the data.

A part directory may hold the files of an earlier attempt of the same task (Spark retries failed
tasks): the writer replaces them (``exist_ok=True``); the driver has refused or cleared anything else
in ``OUT`` before the job started. The functions here are pickled by reference, so executors need
shardstream installed (``pip install 'shardstream[s3]'`` or the extra of the store written to).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

from ..convert.batches import ArrowMDSWriter
from ..format.arrowrows import pyarrow
from ..format.index import INDEX_BASENAME
from ..storage.fs import join
from ..writing.mdswriter import MDSWriter
from .sparkout import part_url

#: the DDL of the one row each non-empty partition yields
SUMMARY_SCHEMA = "partition int, rows long, shards int, index string"


def task_partition() -> int:
    """The partition id of the Spark task running this code."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # pragma: no cover - only called inside mapInArrow
        raise RuntimeError("not inside a Spark task")
    return context.partitionId()


def _first_rows(batches: Iterable) -> tuple[Optional[Any], Iterator]:
    """The first batch with rows (or None when there is none) and the batches after it."""
    it = iter(batches)
    for batch in it:
        if batch.num_rows:
            return batch, it
    return None, it


def _summary(partition: int, rows: int, shards: int, part: str):
    """The summary row of a written part."""
    pa = pyarrow()
    return pa.RecordBatch.from_pydict({
        "partition": pa.array([partition], pa.int32()),
        "rows": pa.array([rows], pa.int64()),
        "shards": pa.array([shards], pa.int32()),
        "index": pa.array([join(part, INDEX_BASENAME)], pa.string()),
    })


def partition_writer(out: str, columns: dict[str, str], writer_kwargs: dict) -> Callable[[Iterable], Iterator]:
    """The ``mapInArrow`` function that writes a partition's batches to ``out/part-NNNNN``."""

    def write(batches: Iterable) -> Iterator:
        partition = task_partition()
        first, rest = _first_rows(batches)
        if first is None:
            return
        where = f"partition {partition}"
        part = part_url(out, partition)
        with ArrowMDSWriter(part, columns, exist_ok=True, **writer_kwargs) as writer:
            writer.write_batch(first, where)
            for batch in rest:
                writer.write_batch(batch, where)
        yield _summary(partition, writer.rows, len(writer.shards), part)

    return write


def udf_partition_writer(out: str, columns: dict[str, str], writer_kwargs: dict, udf: Callable,
                         udf_kwargs: dict) -> Callable[[Iterable], Iterator]:
    """The ``mapInArrow`` function for mosaicml-streaming's ``udf_iterable``: each batch, as a pandas
    DataFrame, goes through ``udf(frame, **udf_kwargs)``, whose samples (dicts) are written one by one."""

    def write(batches: Iterable) -> Iterator:
        partition = task_partition()
        writer: Optional[MDSWriter] = None
        rows = 0
        try:
            for batch in batches:
                for sample in udf(batch.to_pandas(), **udf_kwargs):
                    if writer is None:
                        writer = MDSWriter(out=part_url(out, partition), columns=columns, exist_ok=True,
                                           **writer_kwargs)
                    writer.write(sample)
                    rows += 1
        except BaseException as exc:
            if writer is not None:
                writer.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if writer is None:
            return
        writer.finish()
        yield _summary(partition, rows, sum(s is not None for s in writer.shards), part_url(out, partition))

    return write
