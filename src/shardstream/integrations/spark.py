"""Writing a Spark DataFrame as an MDS dataset, each partition by the executor that holds it.

:func:`write_mds` runs one Spark job: ``df.mapInArrow`` hands every task its partition as Arrow record
batches, which it encodes a column at a time into ``OUT/part-<partition id>`` (:mod:`.sparktask`);
only one summary row per partition comes back. The driver then writes ``OUT/index.json`` over the
parts in partition order, so the dataset's order is the DataFrame's. Until that last step there is no
top-level index: a failed job leaves nothing that looks complete.

Example::

    from shardstream.integrations.spark import write_mds
    result = write_mds(df, "s3://bucket/train", compression="zstd",
                       storage_options={"profile": "writer"})

Column encodings come from the Spark schema through Arrow (``to_arrow_schema``, then
:func:`~shardstream.convert.arrow_columns`); ``columns={"name": "encoding"}`` overrides some.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from typing import Any, Callable, Optional, Sequence, Union

from .. import errors
from ..convert.schema import arrow_columns
from ..errors import InvalidArgumentError, ShardstreamError
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT
from ..writing.merge import merge_index
from ..writing.parts import clear_output
from .sparkenv import ensure_java, pyspark
from .sparktask import SUMMARY_SCHEMA, partition_writer

__all__ = ["SparkPart", "SparkWriteResult", "dataframe_to_mds", "ensure_java", "spark_columns", "write_mds"]


def __getattr__(name: str):
    """``dataframe_to_mds`` (mosaicml-streaming's converter, :mod:`.sparkcompat`) is importable from here too."""
    if name == "dataframe_to_mds":
        from .sparkcompat import dataframe_to_mds

        return dataframe_to_mds
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class SparkPart:
    """One written partition: its id, rows, shards and the location of its ``index.json``."""

    partition: int
    rows: int
    shards: int
    index: str


@dataclasses.dataclass(frozen=True)
class SparkWriteResult:
    """What :func:`write_mds` wrote: rows and shards in all, and the parts in partition order
    (empty partitions have none)."""

    out: str
    rows: int
    shards: int
    parts: tuple[SparkPart, ...]


def spark_columns(schema, overrides: Optional[dict[str, str]] = None) -> dict[str, str]:
    """MDS encodings for a Spark schema (a ``StructType`` or a DataFrame): Spark type -> Arrow type ->
    encoding, as :func:`~shardstream.convert.arrow_columns` maps it; ``overrides`` win."""
    pyspark()
    from pyspark.sql.pandas.types import to_arrow_schema

    if hasattr(schema, "schema") and not hasattr(schema, "fields"):
        schema = schema.schema
    if overrides is not None and not isinstance(overrides, dict):
        raise InvalidArgumentError(f"columns={overrides!r} should be a dict of column name -> MDS encoding, "
                                   "e.g. {'tokens': 'ndarray:int32'}")
    # pyspark 4 wants a time zone for timestamps; the encoding (ISO text) does not depend on it
    tz = {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}
    try:
        arrow = to_arrow_schema(schema, **tz)
    except Exception as exc:  # pyspark's own error for a type Arrow cannot hold
        raise errors.SchemaMismatchError(
            f"the DataFrame's schema has a type Arrow cannot hold ({type(exc).__name__}: {exc}); cast that column first "
            "(df.withColumn(name, df[name].cast('string')))") from exc
    return arrow_columns(arrow, overrides)


def write_mds(df, out: Union[str, os.PathLike], *, columns: Optional[dict[str, str]] = None,
              compression: Optional[str] = None, hashes: Optional[Sequence[str]] = DEFAULT_HASHES,
              size_limit: Optional[Union[int, str]] = DEFAULT_SIZE_LIMIT,
              storage_options: Optional[dict[str, Any]] = None, overwrite: bool = False,
              merge: bool = True) -> SparkWriteResult:
    """Write the rows of the Spark DataFrame ``df`` to an MDS dataset at ``out`` (a directory every
    executor can write, or any fsspec URL), one part per non-empty partition, never collecting rows on
    the driver. ``merge=False`` leaves out ``OUT/index.json`` (merge the parts' indexes later with
    :func:`~shardstream.merge_index`). See the module's documentation."""
    out = _check_out(out)
    encodings = spark_columns(df.schema, columns)
    writer_kwargs = {"compression": compression, "hashes": hashes, "size_limit": size_limit,
                     "storage_options": storage_options}
    task = partition_writer(out, encodings, writer_kwargs)
    return write_parts(df.select(*[df[name] for name in encodings]), out, task, storage_options=storage_options,
                       overwrite=overwrite, merge=merge)


def _check_out(out) -> str:
    if not isinstance(out, (str, os.PathLike)):
        raise InvalidArgumentError(f"out={out!r} should be a directory path or a URL (s3://bucket/dir ...)")
    return os.fspath(out)


def write_parts(df, out: str, task: Callable, *, storage_options: Optional[dict] = None,
                overwrite: bool = False, merge: bool = True) -> SparkWriteResult:
    """Run ``task`` (a :mod:`.sparktask` writer) over the partitions of ``df``, then merge the parts."""
    _refuse_speculation(df)
    clear_output(out, overwrite, storage_options)
    try:
        rows = df.mapInArrow(task, SUMMARY_SCHEMA).collect()
    except ShardstreamError:
        raise
    except Exception as exc:
        typed = _task_error(exc)
        if typed is exc:
            raise
        raise typed from exc
    parts = tuple(sorted((SparkPart(r["partition"], r["rows"], r["shards"], r["index"]) for r in rows),
                         key=lambda p: p.partition))
    if merge:
        merge_index([p.index for p in parts], out, storage_options=storage_options)
    return SparkWriteResult(out=out, rows=sum(p.rows for p in parts),
                            shards=sum(p.shards for p in parts), parts=parts)


def _refuse_speculation(df) -> None:
    """Two attempts of one task would write the same part at once; speculative execution is refused."""
    try:
        on = str(df.sparkSession.conf.get("spark.speculation", "false")).lower() == "true"
    except Exception:  # a session that does not expose the setting
        on = False
    if on:
        raise InvalidArgumentError(
            "spark.speculation is on: two attempts of a task would write the same part of the dataset at once; "
            "turn it off for this job (spark.conf.set('spark.speculation', 'false'))")


_TASK_ERROR = re.compile(r"shardstream\.errors\.(\w+): (.+)")


def _task_error(exc: Exception) -> Exception:
    """The shardstream error a Spark task raised (Spark hands the driver its traceback as text), typed
    again; any other failure as it is."""
    match = _TASK_ERROR.search(str(exc))
    cls = getattr(errors, match.group(1), None) if match else None
    if not (isinstance(cls, type) and issubclass(cls, ShardstreamError)):
        return exc
    try:
        return cls(f"{match.group(2).strip()} (raised in a Spark task)")
    except TypeError:  # pragma: no cover - an error class with another constructor
        return exc
