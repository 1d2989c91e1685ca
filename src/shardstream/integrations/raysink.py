"""``MDSDatasink``: ``ds.write_datasink(MDSDatasink(out))`` writes a Ray Dataset as one MDS dataset.

Each write task encodes its blocks, as Arrow tables, with :class:`~shardstream.convert.batches.ArrowMDSWriter`
into ``out/part-<task index:05d>/`` (its own ``index.json`` and shards). When every task has finished, the
driver writes ``out/index.json`` over the parts in task order with :func:`~shardstream.merge_index`, so the
dataset reads back in the Ray Dataset's order (with ``DataContext.execution_options.preserve_order``).
A write that fails leaves the parts it wrote and no top-level ``index.json``: no reader takes it for a
dataset, and the next write with ``overwrite=True`` replaces it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterable, Optional, Sequence, Union

from ray.data.block import BlockAccessor
from ray.data.datasource import Datasink

from ..convert.batches import ArrowMDSWriter
from ..convert.schema import arrow_columns, is_image_struct
from ..errors import InvalidArgumentError
from ..format.index import INDEX_BASENAME
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT
from ..storage.fs import join
from ..writing.merge import merge_index
from ..writing.parts import clear_output, part_name
from .raytensors import plain_schema, plain_table

logger = logging.getLogger(__name__)


class MDSDatasink(Datasink):
    """Write a Ray Dataset into MDS shards at ``out`` (a local directory or any fsspec URL).

    ``columns`` (column -> MDS encoding) names the encodings of some or all columns; the others are
    inferred from the Arrow schema (:func:`~shardstream.convert.schema.arrow_columns`: ``int64`` ->
    ``int64``, ``string`` -> ``str``, ``list<int32>`` -> ``ndarray:int32`` ...). ``compression``,
    ``hashes`` and ``size_limit`` are :class:`~shardstream.MDSWriter`'s. ``storage_options`` go to
    fsspec on the driver and in every write task. A non-empty ``out`` is refused
    (:class:`~shardstream.OutputExistsError`) unless ``overwrite=True``, which replaces an MDS
    dataset there (and the parts of a failed write) and still refuses other files.

    After a write, ``.result`` holds ``{"rows", "parts", "shards"}``.
    """

    def __init__(self, out: str, *, columns: Optional[dict[str, str]] = None, compression: Optional[str] = None,
                 hashes: Optional[Sequence[str]] = DEFAULT_HASHES, size_limit: Union[int, str, None] = DEFAULT_SIZE_LIMIT,
                 storage_options: Optional[dict[str, Any]] = None, overwrite: bool = False) -> None:
        if not isinstance(out, str) or not out:
            raise InvalidArgumentError(f"out={out!r} should be a local directory or an fsspec URL (s3://bucket/x)")
        if columns is not None and not isinstance(columns, dict):
            raise InvalidArgumentError(f"columns={columns!r} should be a dict of column -> MDS encoding, "
                                       "e.g. {'tokens': 'ndarray:int32'}")
        self.out = out.rstrip("/")
        self.overrides = dict(columns or {})
        self.writer_kwargs = {"compression": compression, "hashes": hashes, "size_limit": size_limit,
                              "storage_options": dict(storage_options) if storage_options else None}
        self.storage_options = self.writer_kwargs["storage_options"]
        self.overwrite = overwrite
        self.columns: Optional[dict[str, str]] = None  # from the schema, once the write starts
        self.started = False
        self.result: Optional[dict[str, int]] = None

    def get_name(self) -> str:
        return "MDS"

    def on_write_start(self, schema: Any = None) -> None:
        """On the driver, before any write task: check (or clear) ``out``, infer the columns."""
        if schema is not None:
            plain, tensors = plain_schema(schema)  # a column with no encoding fails here, before any write
            columns = arrow_columns(plain, {**tensors, **self.overrides})
            if not any(is_image_struct(f.type) for f in plain if f.name not in self.overrides):
                self.columns = columns  # else each task looks at its first image's bytes: jpeg or png
        clear_output(self.out, self.overwrite, self.storage_options)
        self.started = True

    def columns_for(self, table: Any, plain: Any) -> dict[str, str]:
        """The encodings for a task's first block (``table``; ``plain``: with its tensor columns made plain)."""
        if self.columns is not None:
            return self.columns
        _, tensors = plain_schema(table.schema)
        return arrow_columns(plain.schema, {**tensors, **self.overrides}, first_batch=plain)

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        """One write task: its blocks, in order, into ``out/part-<task index>``."""
        part = part_name(ctx.task_idx)
        rows = 0
        with contextlib.ExitStack() as stack:
            writer = None
            for k, block in enumerate(blocks):
                table = BlockAccessor.for_block(block).to_arrow()
                if table.num_rows == 0:
                    continue
                plain = plain_table(table)
                if writer is None:
                    writer = stack.enter_context(ArrowMDSWriter(join(self.out, part), self.columns_for(table, plain),
                                                                exist_ok=True, **self.writer_kwargs))
                writer.write_batch(plain, where=f"block {k} of write task {ctx.task_idx} ({part})")
                rows += table.num_rows
        return {"task": ctx.task_idx, "part": part if rows else None, "rows": rows}

    def on_write_complete(self, write_result: Any) -> None:
        """On the driver: one ``out/index.json`` over the parts, in task order."""
        if not self.started:  # an empty dataset: no task ran
            clear_output(self.out, self.overwrite, self.storage_options)
        returns = getattr(write_result, "write_returns", write_result)  # a plain list before Ray 2.10
        done = sorted((r for r in returns if r and r["part"]), key=lambda r: r["task"])
        indexes = [join(self.out, r["part"], INDEX_BASENAME) for r in done]
        shards = merge_index(indexes, self.out, storage_options=self.storage_options)
        self.result = {"rows": sum(r["rows"] for r in done), "parts": len(done), "shards": len(shards)}

    def on_write_failed(self, error: Exception) -> None:
        logger.warning("writing MDS to %s failed (%s: %s); no index.json was written there, so the parts "
                       "written are not a dataset: write again with overwrite=True to replace them",
                       self.out, type(error).__name__, error)
