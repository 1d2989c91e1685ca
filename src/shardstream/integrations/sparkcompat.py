"""``dataframe_to_mds``: mosaicml-streaming's Spark converter, by name and argument shape, for code moving over.

Calls written for ``streaming.base.converters.dataframe_to_mds`` run unchanged::

    from shardstream.integrations.spark import dataframe_to_mds
    local, remote = dataframe_to_mds(df, merge_index=True,
                                     mds_kwargs={"out": "s3://bucket/train", "columns": {"id": "int64"}})

The work is :func:`~shardstream.integrations.spark.write_mds`'s (Arrow batches, encoded a column at a
time, one part per partition in partition order); the differences are mosaicml-streaming's: columns
named in ``mds_kwargs["columns"]`` are the only ones written, compression defaults to ``zstd``, an
empty DataFrame is refused, and ``udf_iterable(pandas_frame, **udf_kwargs)`` may turn each batch into
samples of other columns (then ``columns`` must be given).
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any, Callable, Optional

from ..errors import InvalidArgumentError, UnknownKeywordError
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT
from ..writing.mdswriter import resolve_out
from .spark import spark_columns, write_parts
from .sparktask import partition_writer, udf_partition_writer


_MDS_KWARGS = {"out": None, "columns": None, "compression": "zstd", "hashes": DEFAULT_HASHES,
               "size_limit": DEFAULT_SIZE_LIMIT, "keep_local": False, "exist_ok": False, "max_workers": None,
               "progress_bar": False, "storage_options": None}


def _mds_kwargs(given: dict) -> dict:
    """``mds_kwargs`` with the defaults filled in: mosaicml-streaming's ``MDSWriter`` keywords, and
    ``storage_options``; an unknown one is refused naming the closest."""
    unknown = sorted(set(given) - set(_MDS_KWARGS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_MDS_KWARGS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"it takes: {', '.join(_MDS_KWARGS)}"
        raise UnknownKeywordError(f"mds_kwargs holds {unknown[0]!r}, which dataframe_to_mds does not take; {hint}")
    return {**_MDS_KWARGS, **given}


def _target(out, keep_local: bool) -> tuple[str, tuple[str, str]]:
    """Where the parts go, and the ``(local, remote)`` pair returned (``''`` for a side not used)."""
    local, remote = resolve_out(out)
    if remote is None:
        return local, (local, "")
    if local is not None and keep_local:
        warnings.warn(f"dataframe_to_mds writes the parts straight to {remote}; no copy is kept in {local}",
                      stacklevel=3)
    return remote, (local or "", remote)


def dataframe_to_mds(dataframe, merge_index: bool = True, mds_kwargs: Optional[dict[str, Any]] = None,
                     udf_iterable: Optional[Callable] = None,
                     udf_kwargs: Optional[dict[str, Any]] = None) -> tuple[str, str]:
    """Write a Spark DataFrame as an MDS dataset, each partition by its executor; returns ``(local, remote)``
    as mosaicml-streaming does (``''`` for a side not used). ``mds_kwargs`` holds ``out`` (a directory,
    a URL, or a ``(local, remote)`` pair: then the parts go to ``remote``), ``columns``, ``compression``
    (default ``zstd``), ``hashes``, ``size_limit``, ``keep_local``, ``exist_ok`` and ``storage_options``.
    ``merge_index=False`` leaves out the top-level ``index.json``."""
    if dataframe is None:
        raise InvalidArgumentError("dataframe is None; pass a Spark DataFrame")
    if not mds_kwargs or "out" not in mds_kwargs:
        raise InvalidArgumentError("mds_kwargs must hold 'out' (where to write), e.g. "
                                   "mds_kwargs={'out': 's3://bucket/train', 'columns': {...}}")
    kw = _mds_kwargs(mds_kwargs)
    if udf_iterable is not None and not kw["columns"]:
        raise InvalidArgumentError("with udf_iterable, mds_kwargs must hold 'columns': the samples it makes may "
                                   "have other columns than the DataFrame")
    if dataframe.isEmpty():
        raise InvalidArgumentError("the DataFrame has no rows; there is nothing to write")
    out, returned = _target(kw["out"], kw["keep_local"])
    writer_kwargs = {"compression": kw["compression"], "hashes": kw["hashes"], "size_limit": kw["size_limit"],
                     "storage_options": kw["storage_options"], "max_workers": kw["max_workers"]}
    if udf_iterable is not None:
        task = udf_partition_writer(out, dict(kw["columns"]), writer_kwargs, udf_iterable, dict(udf_kwargs or {}))
    else:
        given = kw["columns"]
        inferred = spark_columns(dataframe.schema, given)
        columns = {name: inferred[name] for name in given} if given else inferred
        task = partition_writer(out, columns, writer_kwargs)
        dataframe = dataframe.select(*[dataframe[name] for name in columns])
    write_parts(dataframe, out, task, storage_options=kw["storage_options"], overwrite=kw["exist_ok"],
                merge=merge_index)
    return returned
