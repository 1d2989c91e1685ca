"""The output directory of a Spark write: where each partition's part goes, and what may be replaced.

A Spark-written dataset is ``OUT/part-NNNNN/{index.json, shard.*}`` (one sub-dataset per non-empty
partition, numbered by partition id) and ``OUT/index.json`` over them. Before a job starts the driver
checks ``OUT`` with :func:`~shardstream.writing.parts.clear_output` (the rule every write in parts
follows: refused unless empty or ``overwrite=True``, which replaces only a dataset's files).
"""

from __future__ import annotations

import os

from ..storage.fs import is_remote, join, local_path
from ..writing.parts import part_name


def part_url(out: str, partition: int) -> str:
    """Where partition ``partition``'s part goes (a local path or a URL, as ``out`` is)."""
    if is_remote(out):
        return join(out, part_name(partition))
    return os.path.join(local_path(out), part_name(partition))

