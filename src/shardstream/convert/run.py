"""``convert``: data files, a saved HF dataset or an image folder -> one MDS dataset, on every core.

The driver lists the inputs, reads the first one's schema (the columns' encodings come from it), plans
the parts (:mod:`.plan`), writes the manifest, and hands each part still to do to a process pool
(:mod:`.work`); when all are complete it writes the one ``index.json`` over them (``merge_index``), in
input order, so the dataset's rows are the inputs' rows in order. Rows never pass through the driver.

Interrupted (Ctrl-C, ``kill -9``) and run again with the same arguments, it converts only the parts
without an ``index.json``; run on finished output it does nothing and says so; given inputs that were
not there before, it converts them into new parts and rewrites the index (the old one stays valid until
then). Nothing incomplete is ever listed by an index.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from ..errors import InvalidArgumentError, NoFilesError, OutputExistsError
from ..format.index import INDEX_BASENAME
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT
from ..units import parse_bytes
from ..writing.merge import merge_index
from .inputs import Inputs, list_inputs
from .output import MANIFEST, Output, reaching
from .plan import (check_settings, manifest_parts, new_files, new_manifest, next_number, plan_parts, rebased,
                   settings_of)
from .pool import run_jobs
from .progress import Progress
from .readers import parquet_row_groups, read_batches
from .schema import arrow_columns, parse_columns
from .schematext import schema_of
from .work import convert_part, init_worker


@dataclass
class ConvertResult:
    """What a conversion did: ``rows``/``shards`` of the whole output dataset, ``parts`` of it,
    ``converted`` the parts written by this run (0: there was nothing to do)."""

    output: str
    rows: int
    shards: int
    parts: int
    converted: int
    input_bytes: int
    output_bytes: int
    seconds: float
    columns: dict
    label_names: list = field(default_factory=list)
    verified: Optional[dict] = None
    rows_converted: int = 0

    @property
    def nothing_to_do(self) -> bool:
        return self.converted == 0

    def __str__(self) -> str:
        if self.nothing_to_do:
            return (f"{self.output} is already complete: {self.rows:,} rows in {self.shards} shards ({self.parts} "
                    "parts); nothing to do (overwrite=True / --overwrite converts again)")
        rate = self.rows_converted / self.seconds if self.seconds else 0.0
        return (f"converted {self.converted} of {self.parts} parts ({self.rows_converted:,} rows) into {self.output} "
                f"in {self.seconds:.1f}s ({rate:,.0f} rows/s); it holds {self.rows:,} rows in {self.shards} shards")


def convert(inputs: Any, output: str, *, columns: Union[dict, Sequence[str], None] = None,
            format: Optional[str] = None, compression: Optional[str] = None,
            hashes: Optional[Sequence[str]] = DEFAULT_HASHES, size_limit: Union[int, str, None] = DEFAULT_SIZE_LIMIT,
            shard_per_input: bool = False, workers: Optional[int] = None, overwrite: bool = False,
            on_schema_mismatch: str = "error", storage_options: Optional[dict] = None,
            progress: Optional[bool] = None, verify: Union[bool, int] = False,
            split: Optional[str] = None) -> ConvertResult:
    """Convert ``inputs`` into the MDS dataset ``output`` (see the module docstring and docs/convert.md).

    ``inputs``: files, directories, globs or a list of them, local or any fsspec URL (Parquet, JSON Lines,
    JSON, CSV/TSV, Arrow, text, compressed too; a ``save_to_disk`` directory; an image folder). ``output``:
    a local directory or fsspec URL. ``columns``: encodings that override the inferred ones (a dict, or
    ``["name:encoding", ...]``). ``compression``, ``hashes``, ``size_limit``: as ``MDSWriter``'s.
    ``shard_per_input``: each input file gets shards of its own. ``workers``: processes (default: every
    core). ``on_schema_mismatch``: ``"error"`` or ``"cast"`` (to the first input's types). ``progress``:
    True / False, or None for a bar on a terminal only. ``verify``: afterwards compare row counts and
    ``verify`` rows (1000 for True) with the inputs.
    """
    if on_schema_mismatch not in ("error", "cast"):
        raise InvalidArgumentError(f"on_schema_mismatch={on_schema_mismatch!r} must be 'error' or 'cast'")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError(f"workers={workers!r} must be an int >= 1 (default: every core)")
    if size_limit:
        size_limit = parse_bytes(size_limit, "size_limit")  # "64mb" and 67108864 are one setting
    start = time.monotonic()
    overrides = parse_columns(columns)
    with reaching(f"listing the inputs {inputs!r}"):
        found = list_inputs(inputs, format, storage_options, split)
    with reaching(f"opening the output {output!r}"):
        out = Output(output, storage_options)
        out.names()
    settings = settings_of(column_overrides=overrides, compression=compression or None,
                           hashes=sorted(hashes or []), size_limit=size_limit, shard_per_input=shard_per_input,
                           on_schema_mismatch=on_schema_mismatch)
    manifest = _prepared_manifest(out, found, settings, overwrite, storage_options)
    parts = manifest_parts(manifest)
    pending = [p for p in parts if not out.exists(p.name, INDEX_BASENAME)]
    written: list[dict] = []
    if pending or not out.exists(INDEX_BASENAME) or _indexed_parts(out) != [p.name for p in parts]:
        job = {"output": out.url, "root": manifest["root"], "kind": manifest["kind"], "schema": manifest["schema"],
               "columns": manifest["columns"], "cast": on_schema_mismatch == "cast",
               "label_names": manifest["label_names"],
               "storage_options": storage_options,
               "writer": {"compression": compression or None, "hashes": sorted(set(hashes or [])),
                          "size_limit": size_limit}}
        written = _write_parts(job, pending, workers, progress)
        merge_index([out.join(p.name, INDEX_BASENAME) for p in parts], out.url, storage_options=storage_options)
    result = _result(out, parts, len(pending), found, manifest, start)
    result.rows_converted = sum(r["rows"] for r in written)
    if verify:
        from .verify import verify_output

        result.verified = verify_output(out, manifest, 1000 if verify is True else int(verify),
                                        storage_options)
    return result


def _write_parts(job: dict, pending: list, workers: Optional[int], progress: Optional[bool]) -> list[dict]:
    """Write the ``pending`` parts, showing progress; returns what each wrote."""
    todo_bytes = sum(rec["size"] for p in pending for rec in p.inputs if not rec.get("row_groups"))
    todo_bytes += _split_bytes(pending)
    todo_files = len({rec["name"] for p in pending for rec in p.inputs})
    shown = Progress(len(pending), todo_bytes, todo_files, enabled=progress)
    try:
        written = _run_parts([{**job, "part": p.name, "inputs": p.inputs} for p in pending], workers, shown)
    except BaseException:
        shown.abandon()
        raise
    shown.close()
    return written


def _prepared_manifest(out: Output, found: Inputs, settings: dict, overwrite: bool,
                       storage_options: Optional[dict]) -> dict:
    """The manifest for this run: the output's (checked, extended by new inputs) or a new one."""
    manifest = None if overwrite else out.read_json(MANIFEST)
    if manifest is None:
        if out.names():
            if not overwrite:
                raise OutputExistsError(f"{out.url} is not empty and holds no conversion ({MANIFEST} is missing); "
                                        "write to a new or empty output, or pass overwrite=True (--overwrite) to "
                                        "replace the dataset there")
            out.clear()
        schema, first = _probe(found, storage_options)
        columns = arrow_columns(schema, settings["column_overrides"], first)
        if found.kind == "imagefolder" and "image" not in settings["column_overrides"]:
            columns["image"] = _image_folder_encoding(found)
        parts = plan_parts(found, found.files, 0, settings["shard_per_input"],
                           lambda f: parquet_row_groups(f, storage_options))
        manifest = {**new_manifest(settings, found, schema, parts), "columns": columns}
        out.write_json(MANIFEST, manifest)
        return manifest
    check_settings(manifest, settings, out.url)
    found = rebased(found, manifest["root"])
    added = new_files(manifest, found, out.url)
    if added:
        schema_of(manifest["schema"])
        old = manifest_parts(manifest)
        more = plan_parts(found, added, next_number(old), settings["shard_per_input"],
                          lambda f: parquet_row_groups(f, storage_options))
        manifest = {**manifest, "parts": manifest["parts"] + [p.record() for p in more]}
        out.write_json(MANIFEST, manifest)
    return manifest


def _image_folder_encoding(found: Inputs) -> str:
    """``jpeg`` when every image is a .jpg/.jpeg, ``png`` when every one is a .png, else ``bytes``."""
    suffixes = {f.name.lower().rsplit(".", 1)[-1] for f in found.files}
    if suffixes <= {"jpg", "jpeg"}:
        return "jpeg"
    return "png" if suffixes == {"png"} else "bytes"


def _probe(found: Inputs, storage_options: Optional[dict]):
    """The first input's schema and first batch (the next file's when one holds no rows)."""
    for file in found.files:
        for batch, _ in read_batches(found.kind, file, storage_options, label_names=found.label_names):
            return batch.schema, batch
    raise NoFilesError("the inputs hold no rows; there is nothing to convert")


def _split_bytes(parts) -> int:
    """Bytes of the Parquet row-group runs among ``parts``, counted once per file."""
    seen: dict[str, int] = {}
    for p in parts:
        for rec in p.inputs:
            if rec.get("row_groups"):
                seen[rec["name"]] = rec["size"]
    return sum(seen.values())


def _run_parts(jobs: list[dict], workers: Optional[int], shown: Progress) -> list[dict]:
    """Write the parts of ``jobs``, in this process when one worker suffices; returns what each wrote."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(workers or cpus, max(len(jobs), 1))
    threads = max(1, cpus // workers)  # each part's shards are compressed by this many threads
    jobs = [{**job, "writer": {**job["writer"], "max_workers": threads}} for job in jobs]
    if workers == 1:
        written = []
        init_worker(_Inline(shown))
        try:
            for job in jobs:
                written.append(convert_part(job))
                shown.part_done()
        finally:
            init_worker(None)
        return written
    return run_jobs(jobs, workers, shown.add, shown.part_done)


class _Inline:
    """The progress queue of a conversion in this process: messages go straight to the display."""

    def __init__(self, shown: Progress) -> None:
        self.shown = shown

    def put(self, message: tuple) -> None:
        self.shown.add(*message[2:])


def _indexed_parts(out: Output) -> list[str]:
    index = out.read_json(INDEX_BASENAME) or {}
    names = []
    for shard in index.get("shards", []):
        part = (shard.get("raw_data") or {}).get("basename", "").split("/", 1)[0]
        if not names or names[-1] != part:
            names.append(part)
    return names


def _result(out: Output, parts, converted: int, found: Inputs, manifest: dict, start: float) -> ConvertResult:
    index = out.read_json(INDEX_BASENAME) or {}
    shards = index.get("shards", [])
    rows = sum(s.get("samples", 0) for s in shards)
    stored = sum((s.get("zip_data") or s.get("raw_data") or {}).get("bytes", 0) for s in shards)
    return ConvertResult(out.url, rows, len(shards), len(parts), converted, found.total_bytes, stored,
                         time.monotonic() - start, manifest["columns"], manifest.get("label_names", []))
