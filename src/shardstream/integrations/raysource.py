"""``MDSDatasource`` and ``read_mds``: an MDS dataset (a local directory or any fsspec URL) as a Ray Dataset.

The driver reads ``index.json`` once and cuts the shards into contiguous groups, one read task each
(``override_num_blocks`` sets how many; never more than there are shards). A read task downloads its
shards one at a time through the library's storage layer (retries, size and digest checks) into a
temporary directory, or maps them in place when the dataset is local, and yields one Arrow table per
shard (:mod:`.rayarrow` says which Arrow type each MDS encoding becomes). Rows keep the dataset's order.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import tempfile
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from ..errors import DownloadError, IndexNotFoundError, InvalidArgumentError
from ..format.index import INDEX_BASENAME, ShardInfo, loads_index, read_index
from ..format.reader import open_shard
from ..storage.fetch import Fetcher
from ..storage.fs import cache_root, is_remote, local_path
from .rayarrow import shard_table


#: Ray before 2.10 keeps the schema in BlockMetadata (a required field there)
OLD_METADATA = {"schema": None} if "schema" in {f.name for f in dataclasses.fields(BlockMetadata)} else {}


def read_remote_index(url: str, storage_options: Optional[dict], retry: int) -> list[ShardInfo]:
    fetcher = Fetcher(url, storage_options, retry=retry)
    with tempfile.TemporaryDirectory(prefix="shardstream-ray-index-") as tmp:
        dest = os.path.join(tmp, INDEX_BASENAME)
        try:
            fetcher.fetch(INDEX_BASENAME, dest)
        except DownloadError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                raise IndexNotFoundError(
                    f"no {INDEX_BASENAME} at {fetcher.url(INDEX_BASENAME)}; is {url!r} the dataset directory? "
                    "A write that did not finish leaves no index") from None
            raise
        with open(dest, "rb") as f:
            return loads_index(f.read(), fetcher.url(INDEX_BASENAME))


def group_shards(sizes: Sequence[int], groups: int) -> list[range]:
    """Contiguous runs of shard numbers, ``groups`` of them (at most one per shard), of similar total size."""
    n = len(sizes)
    groups = max(1, min(int(groups), n))
    if n == 0:
        return []
    ends = np.cumsum(np.asarray(sizes, np.float64))
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, groups) / groups, side="left") + 1
    bounds = sorted(set([0, *np.clip(cuts, 1, n - 1).tolist(), n])) if n > 1 else [0, n]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def read_group(url: str, shards: list[ShardInfo], columns: list[str], storage_options: Optional[dict],
               retry: int) -> Iterator[Any]:
    """Read task body: one Arrow table per shard of ``shards``, in order."""
    if not is_remote(url):
        root = local_path(url)
        for info in shards:
            yield shard_table(open_shard(root, info), columns)
        return
    fetcher = Fetcher(url, storage_options, retry=retry)
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="shardstream-ray-read-", dir=cache_root())
    try:
        for info in shards:
            stored = info.stored
            dest = os.path.join(tmp, *stored.basename.split("/"))
            fetcher.fetch(stored.basename, dest, size=stored.bytes, hashes=stored.hashes)
            reader = open_shard(tmp, info)
            table = shard_table(reader, columns)
            del reader
            for name in {stored.basename, info.raw_data.basename}:
                path = os.path.join(tmp, *name.split("/"))
                if os.path.exists(path):
                    os.unlink(path)
            yield table
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class MDSDatasource(Datasource):
    """Read an MDS dataset (``url``: a local directory or any fsspec URL) with Ray Data.

    ``columns`` picks the columns to read (all by default, in the dataset's order). ``storage_options``
    go to fsspec in every read task (credentials, ``endpoint_url`` ...); ``retry`` is how many times a
    failed download is tried again.

    Example::

        ds = ray.data.read_datasource(MDSDatasource("s3://bucket/train"), override_num_blocks=8)
    """

    def __init__(self, url: str, *, columns: Optional[Sequence[str]] = None,
                 storage_options: Optional[dict] = None, retry: int = 2) -> None:
        super().__init__()
        if not isinstance(url, (str, os.PathLike)):
            raise InvalidArgumentError(f"url={url!r} should be a directory or an fsspec URL of an MDS dataset")
        self.url = os.fspath(url).rstrip("/")
        self.storage_options = dict(storage_options) if storage_options else None
        self.retry = retry
        if is_remote(self.url):
            self.shards = read_remote_index(self.url, self.storage_options, retry)
        else:
            self.shards = read_index(local_path(self.url))
        names = list(self.shards[0].column_names) if self.shards else list(columns or [])
        if columns is not None:
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise InvalidArgumentError(f"columns={list(columns)} names {unknown}, which {self.url!r} does not "
                                           f"have; its columns are {names}")
        self.columns = list(columns) if columns is not None else names

    def get_name(self) -> str:
        return "MDS"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return sum(self.shard_bytes())

    def shard_bytes(self) -> list[int]:
        """Each shard's decoded size, estimated from the index: its sample bytes, less the size headers
        of the columns not read."""
        out = []
        for info in self.shards:
            kept = sum(1 for c in info.column_names if c in self.columns) / max(1, len(info.column_names))
            out.append(int(info.raw_data.bytes * kept))
        return out

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Any = None) -> list[ReadTask]:
        sizes = self.shard_bytes()
        tasks = []
        for group in group_shards(sizes, parallelism if parallelism > 0 else len(sizes)):
            shards = [self.shards[i] for i in group]
            meta = BlockMetadata(num_rows=sum(s.samples for s in shards), size_bytes=sum(sizes[i] for i in group),
                                 input_files=[f"{self.url}/{s.stored.basename}" for s in shards], exec_stats=None,
                                 **OLD_METADATA)
            read = functools.partial(read_group, self.url, shards, self.columns, self.storage_options, self.retry)
            limit = {"per_task_row_limit": per_task_row_limit} if per_task_row_limit is not None else {}
            tasks.append(ReadTask(read, meta, **limit))
        return tasks


def read_mds(url: str, *, columns: Optional[Sequence[str]] = None, storage_options: Optional[dict] = None,
             retry: int = 2, **read_args: Any) -> "ray.data.Dataset":
    """``ray.data.read_datasource(MDSDatasource(url, ...), **read_args)``: ``read_args`` are Ray's
    (``override_num_blocks``, ``concurrency``, ``ray_remote_args`` ...)."""
    source = MDSDatasource(url, columns=columns, storage_options=storage_options, retry=retry)
    return ray.data.read_datasource(source, **read_args)
