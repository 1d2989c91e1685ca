"""Combining the indexes of datasets written in parallel into subdirectories."""

from __future__ import annotations

import dataclasses
import posixpath

from .index import ShardInfo, check_basename


def prefix_shards(shards: list[ShardInfo], prefix: str) -> list[ShardInfo]:
    """Shard entries of a sub-dataset as seen from its parent directory."""
    check_basename(prefix, "merge prefix")
    out = []
    for s in shards:
        raw = dataclasses.replace(s.raw_data, basename=posixpath.join(prefix, s.raw_data.basename))
        zipped = s.zip_data and dataclasses.replace(s.zip_data, basename=posixpath.join(prefix, s.zip_data.basename))
        out.append(dataclasses.replace(s, raw_data=raw, zip_data=zipped))
    return out
