"""Checking a converted dataset against its inputs: the same number of rows, and sampled rows equal.

The inputs are read once more, in order (each row's place in them is its place in the dataset); the
rows at ``rows`` positions spread over the dataset (evenly, plus a fixed pseudo-random set) are decoded
from the MDS shards and compared value by value, as the column's encoding stores them (an ``int32``
column compares the input's ints as int32, a ``jpeg`` column the image's size and mode).
"""

from __future__ import annotations

import io
import json
import tempfile
from typing import Any, Optional

import numpy as np

from ..errors import ConvertVerifyError
from ..format.encodings import get_encoding
from ..dataset.streaming import StreamingDataset
from .output import Output
from .plan import manifest_parts
from .schematext import schema_of
from .readers import read_batches
from .work import conform, file_of


def verify_output(out: Output, manifest: dict, rows: int,
                  storage_options: Optional[dict]) -> dict:
    """Compare; returns ``{"rows", "compared"}`` or raises :class:`ConvertVerifyError`."""
    with tempfile.TemporaryDirectory(prefix="shardstream-verify-") as tmp:
        where = dict(remote=out.url, local=tmp) if out.remote else dict(local=out.url)
        ds = StreamingDataset(**where, storage_options=storage_options, batch_size=1)
        total = len(ds)
        picks = _positions(total, rows)
        expected = schema_of(manifest["schema"])
        columns = manifest["columns"]
        cast = manifest["settings"]["on_schema_mismatch"] == "cast"
        job = {"root": manifest["root"]}
        seen, compared = 0, 0
        for part in manifest_parts(manifest):
            for rec in part.inputs:
                file = file_of(job, rec)
                run = rec.get("row_groups")
                for batch, _ in read_batches(manifest["kind"], file, storage_options, schema=expected,
                                             row_groups=range(*run) if run else None,
                                             label_names=manifest["label_names"]):
                    batch = conform(batch, expected, file.name, cast)
                    lo, hi = np.searchsorted(picks, [seen, seen + batch.num_rows])
                    for g in picks[lo:hi].tolist():
                        _compare(batch.slice(g - seen, 1).to_pylist()[0], ds[g], columns, g, file.name)
                        compared += 1
                    seen += batch.num_rows
        if seen != total:
            raise ConvertVerifyError(f"{out.url} holds {total:,} rows, but its inputs hold {seen:,}; convert again "
                                     "with overwrite=True (--overwrite)")
    return {"rows": total, "compared": compared}


def _positions(total: int, rows: int) -> np.ndarray:
    if total == 0 or rows <= 0:
        return np.zeros(0, np.int64)
    even = np.linspace(0, total - 1, num=min(rows // 2 + 1, total)).astype(np.int64)
    spread = np.random.default_rng(0).integers(0, total, size=min(rows - even.size, total))
    return np.unique(np.concatenate([even, spread, [total - 1]]))


def _compare(row: dict, sample: dict, columns: dict, position: int, where: str) -> None:
    for name, encoding in columns.items():
        if not same_value(row[name], sample[name], encoding):
            raise ConvertVerifyError(f"row {position:,} of the dataset (from {where}): column {name!r} ({encoding}) "
                                     f"holds {sample[name]!r:.80}, but the input holds {row[name]!r:.80}; convert again "
                                     "with overwrite=True (--overwrite)")


def same_value(given: Any, stored: Any, encoding: str) -> bool:
    """Whether ``stored`` (decoded from the shard) is ``given`` (the input's value) as ``encoding`` stores it."""
    if isinstance(given, dict) and set(given) == {"bytes", "path"} and encoding in ("jpeg", "png", "bytes"):
        given = given["bytes"]
    if encoding in ("jpeg", "png", "pil"):
        from PIL import Image

        with Image.open(io.BytesIO(given)) as image:
            return (image.size, image.mode) == (stored.size, stored.mode)
    enc = get_encoding(encoding)
    if encoding.startswith("ndarray"):
        stored = np.asarray(stored)
        return np.array_equal(np.asarray(given, dtype=stored.dtype).reshape(stored.shape), stored)
    if enc.np_dtype is not None:
        a, b = np.asarray(given).astype(enc.np_dtype), np.asarray(stored).astype(enc.np_dtype)
        return bool(a == b) or (a.dtype.kind == "f" and bool(np.isnan(a)) and bool(np.isnan(b)))
    if encoding == "str" and hasattr(given, "isoformat"):
        given = given.isoformat()
    if encoding in ("str_decimal", "str_float", "str_int"):
        return str(given) == str(stored)
    if encoding == "json":
        return json.loads(json.dumps(given, default=str)) == stored
    return given == stored
