"""Summaries of a dataset's index (no shard is read).

A JSON, CSV, TSV or XSV shard is two files, its data and its ``.meta`` file: both count in its bytes."""

from __future__ import annotations

from collections import Counter

from .index import read_index


def _meta_bytes(shard, key: str) -> int:
    meta = getattr(shard, key, None)  # only text shards have a meta file
    return meta.bytes if meta is not None else 0


def inspect_dataset(dirname: str) -> dict:
    shards = read_index(dirname)
    columns = {}
    for s in shards:
        for name, enc in zip(s.column_names, s.column_encodings):
            columns.setdefault(name, enc)
    return {
        "path": dirname,
        "shards": len(shards),
        "samples": sum(s.samples for s in shards),
        "formats": dict(Counter(getattr(s, "format", "mds") for s in shards)),
        "raw_bytes": sum(s.raw_data.bytes + _meta_bytes(s, "raw_meta") for s in shards),
        "stored_bytes": sum(s.stored.bytes + _meta_bytes(s, "stored_meta") for s in shards),
        "columns": columns,
        "compression": dict(Counter(s.compression or "none" for s in shards)),
        "hashes": sorted({h for s in shards for h in s.hashes}),
        "size_limit": shards[0].size_limit if shards else None,
        "samples_per_shard": {
            "min": min((s.samples for s in shards), default=0),
            "max": max((s.samples for s in shards), default=0),
        },
    }
