"""What a worker does with one part: read its inputs batch by batch, check them against the first input's
schema, and write them with :class:`~.batches.ArrowMDSWriter` into ``OUTPUT/part-NNNNN``.

A job is a plain dict (it crosses to a worker process); the part's directory is cleared first (a part
left incomplete by a killed run holds shards but no index) and is complete once its ``index.json`` is
written, the writer's last step. Progress goes to the queue given to :func:`init_worker`, at most a few
messages a second.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Optional

from ..errors import SchemaMismatchError
from ..format.arrowrows import pyarrow
from .batches import ArrowMDSWriter
from .inputs import InputFile
from .output import Output, reaching
from .readers import read_batches
from .schema import check_schema
from .schematext import schema_of

_QUEUE: Any = None
REPORT_EVERY = 0.25  # seconds between a worker's progress messages


def init_worker(queue: Any, watch_parent: bool = False) -> None:
    """Process-pool initializer: where :func:`convert_part` reports progress. ``watch_parent``: exit when the
    process that started this one is gone (killed), so no orphan goes on writing a part that the next run
    redoes."""
    global _QUEUE
    _QUEUE = queue
    if watch_parent:  # a worker process: Ctrl-C is the driver's to handle (it stops the workers)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        parent = os.getppid()
        threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="shardstream-parent-watch").start()


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


class _Reporter:
    def __init__(self, part: str) -> None:
        self.part, self.rows, self.bytes, self.files, self.last = part, 0, 0, 0, time.monotonic()

    def add(self, rows: int, nbytes: int, files: int = 0, force: bool = False) -> None:
        self.rows += rows
        self.bytes += nbytes
        self.files += files
        now = time.monotonic()
        if _QUEUE is not None and (self.rows or self.bytes or self.files) and (force or now - self.last >= REPORT_EVERY):
            _QUEUE.put(("progress", self.part, self.rows, self.bytes, self.files))
            self.rows = self.bytes = self.files = 0
            self.last = now


def file_of(job: dict, rec: dict) -> InputFile:
    """The input a manifest record names: relative to ``job['root']``, or by its whole path or URL."""
    root, name = job["root"], rec["name"]
    if "://" in name or os.path.isabs(name):
        url = name
    else:
        url = f"{root.rstrip('/')}/{name}" if "://" in root else os.path.join(root, *name.split("/"))
    return InputFile(name, url, rec["size"], rec["version"])


def convert_part(job: dict) -> dict:
    """Write part ``job['part']``; returns ``{"part", "rows", "shards", "bytes"}`` (bytes: of the shards)."""
    out = Output(job["output"], job.get("storage_options"))
    out.remove(job["part"])
    expected = schema_of(job["schema"])
    report = _Reporter(job["part"])
    writer = ArrowMDSWriter(out.join(job["part"]), job["columns"], exist_ok=True,
                            storage_options=job.get("storage_options"), **job["writer"])
    with writer:
        for rec in job["inputs"]:
            file = file_of(job, rec)
            with reaching(f"converting {file.url} into {job['part']}"):
                _write_file(job, rec, file, expected, writer, report)
    report.add(0, 0, force=True)
    shards = writer.shards
    return {"part": job["part"], "rows": writer.rows, "shards": len(shards),
            "bytes": sum((s.zip_data or s.raw_data).bytes for s in shards)}


def _write_file(job: dict, rec: dict, file: InputFile, expected, writer: ArrowMDSWriter, report: _Reporter) -> None:
    row, seen = 0, 0
    for batch, done in read_batches(job["kind"], file, job.get("storage_options"), schema=expected,
                                    row_groups=_row_groups(rec), label_names=job.get("label_names", ())):
        batch = conform(batch, expected, file.name, job["cast"])
        writer.write_batch(batch, where=file.name, first_row=row)
        row += batch.num_rows
        report.add(batch.num_rows, max(done - seen, 0))
        seen = max(done, seen)
    report.add(0, max(_share(rec, file) - seen, 0), files=0 if rec.get("row_groups") else 1)


def _row_groups(rec: dict) -> Optional[range]:
    run = rec.get("row_groups")
    return range(run[0], run[1]) if run else None


def _share(rec: dict, file: InputFile) -> int:
    """The bytes of ``file`` this record stands for (a run of row groups: counted as the whole file's share
    the reader reported)."""
    return 0 if rec.get("row_groups") else file.size


def conform(batch, expected, where: str, cast: bool):
    """``batch`` with the first input's columns and types (cast when ``cast``), or a typed refusal."""
    target = check_schema(batch.schema, expected, where, cast)
    if target is None:
        return batch
    pa = pyarrow()
    columns = []
    for field in target:
        column = batch.column(batch.schema.get_field_index(field.name))
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(f"{where}: column {field.name!r} of type {column.type} cannot be cast to the "
                                      f"first input's {field.type} ({exc}); fix the file, or convert it on its "
                                      "own") from None
    return pa.RecordBatch.from_arrays(columns, schema=target)
