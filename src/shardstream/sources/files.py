"""Sharded sources over data files (Parquet, Arrow, JSON Lines, CSV, text): a view of the engine's listing.

A shard is a file. Opening a source lists its files (:mod:`~shardstream.storage.listing`) and
describes them once per machine (:mod:`~shardstream.storage.described`: a Parquet footer, the
headers of an Arrow file's messages, one pass over a text file), which gives each file's pieces
(row groups, record batches, byte ranges of lines) and their row counts. ``open_shard_at_row(name,
row)`` finds the piece holding ``row`` by bisection over those counts and opens it directly:
resuming at row 550,000 of a Parquet file of 100 row groups of 10,000 rows reads row group 55 and
the ones after it, never the 55 before.

Local files are read in place. Remote files (any fsspec URL) are read piece by piece with ranged
reads into a cache directory (``cache_dir``, by default the one a :class:`~shardstream.StreamingDataset`
over the same files uses), shared by every process on the machine and capped by ``cache_limit``;
transient errors are retried ``retries`` times with exponential backoff, permanent ones (a missing
file, refused credentials) raise at once naming the file. ``source.dataset(**kwargs)`` is the
:class:`~shardstream.StreamingDataset` over the same files (shuffled, partitioned, resumable).
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, NotYetSupportedError
from ..format.files import plain_name
from ..format.source import is_file_format
from ..storage.filestreams import infer_format, open_file_stream
from ..storage.fs import is_remote
from ..storage.listing import entries_of
from ..storage.options import StreamOptions
from ..storage.store import open_stores
from ..units import parse_bytes
from .base import ShardedSource, ShardInfo

DEFAULT_RETRIES = 3


class FileShardedSource(ShardedSource):
    """Data files as a :class:`~shardstream.sources.base.ShardedSource`, one shard per file (see the module
    docstring). ``data_files``: a path, URL, directory or glob, or a list of them; ``format`` as
    ``StreamingDataset``'s (from the file names when None); ``columns``: read only these."""

    format_name: Optional[str] = None

    def __init__(self, data_files: Any, storage_options: Optional[dict] = None,
                 columns: Optional[Sequence[str]] = None, *, format: Optional[str] = None,
                 cache_dir: Optional[str] = None, cache_limit: Optional[int | str] = None,
                 retries: int = DEFAULT_RETRIES, timeout: float = 60, on_bad_rows: str = "raise") -> None:
        self.data_files = [os.fspath(e) for e in entries_of(data_files)]
        self.storage_options = storage_options
        self.remote = is_remote(self.data_files[0])
        self.cache_dir = cache_dir
        self.options = StreamOptions(format=format or self.format_name, columns=columns, download_retry=retries,
                                     download_timeout=timeout, on_bad_rows=on_bad_rows)
        remote, local = (self.data_files, cache_dir) if self.remote else (None, self.data_files)
        self.format = infer_format(remote, local, self.options)
        if not is_file_format(self.format):
            raise InvalidArgumentError(f"{type(self).__name__} reads data files; {self.data_files[0]!r} is read as "
                                       f"format {self.format.name!r}: give format= (parquet, arrow, jsonl ...)")
        opened = open_file_stream(None, remote, local, self.options, self.format, storage_options)
        limit = None if cache_limit is None else parse_bytes(cache_limit, "cache_limit")
        self.store = open_stores([opened], limit)[0]
        self.pieces = opened.shards
        self._layout(opened)

    def _layout(self, opened: Any) -> None:
        """Each file's URL, its pieces (a contiguous run of the listing) and their first rows."""
        root = opened.remote if opened.remote is not None else opened.dirname
        names: list[str] = []
        bounds: list[int] = []
        for i, piece in enumerate(self.pieces):
            if not names or piece.file != names[-1]:
                names.append(piece.file)
                bounds.append(i)
        bounds.append(len(self.pieces))
        sizes = np.array([p.samples for p in self.pieces], dtype=np.int64)
        self._files = names
        self._bounds = np.array(bounds, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(sizes)])  # global row of each piece's first row
        self._urls = [_url(root, name) for name in names]
        self._index = {**{n: k for k, n in enumerate(names)}, **{u: k for k, u in enumerate(self._urls)}}

    # -- the protocol -------------------------------------------------------------------------
    @property
    def shard_names(self) -> list[str]:
        """The files' paths (local) or URLs (remote), in dataset order; files without rows are left out."""
        return list(self._urls)

    def shard_index(self, shard_name: str) -> int:
        """The position of ``shard_name`` (a name from :attr:`shard_names`, or the file's name relative to
        the dataset's root) among the shards."""
        k = self._index.get(os.fspath(shard_name)) if isinstance(shard_name, (str, os.PathLike)) else None
        if k is None:
            some = ", ".join(self._urls[:3]) + (" ..." if len(self._urls) > 3 else "")
            raise InvalidArgumentError(f"{shard_name!r} is not a shard of this source; its shards are {some}")
        return k

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict]:
        k = self.shard_index(shard_name)
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or row < 0:
            raise InvalidArgumentError(f"row={row!r} must be an int >= 0")
        lo, hi = int(self._bounds[k]), int(self._bounds[k + 1])
        at = int(self._starts[lo]) + int(row)
        if at >= self._starts[hi]:
            return iter(())
        first = int(np.searchsorted(self._starts, at, side="right")) - 1  # O(log pieces)
        return self._rows(first, hi, at - int(self._starts[first]))

    def _rows(self, first: int, stop: int, skip: int) -> Iterator[dict]:
        """Rows of pieces ``first..stop-1``, from row ``skip`` of the first; each piece pinned while read."""
        for i in range(first, stop):
            self.store.pin(i)
            try:
                reader = self.store.reader(i)
                yield from reader.iter_range(skip if i == first else 0)
            finally:
                self.store.unpin(i)

    def get_shard_info(self, shard_name: str) -> ShardInfo:
        k = self.shard_index(shard_name)
        lo, hi = int(self._bounds[k]), int(self._bounds[k + 1])
        rows = int(self._starts[hi] - self._starts[lo])
        return ShardInfo(k, self._urls[k], rows, self.pieces[lo].file_bytes, self._urls[k])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def num_rows(self) -> int:
        return len(self)

    def dataset(self, **kwargs: Any) -> Any:
        """The :class:`~shardstream.StreamingDataset` over the same files, format, columns and cache
        (``kwargs``: its other settings, e.g. ``batch_size``, ``shuffle``, ``cache_limit``)."""
        from ..dataset.streaming import StreamingDataset

        o = self.options
        where = dict(remote=self.data_files, local=self.cache_dir) if self.remote else dict(local=self.data_files)
        settings = dict(format=self.format.name, columns=o.columns, on_bad_rows=o.on_bad_rows,
                        download_retry=o.download_retry, download_timeout=o.download_timeout,
                        storage_options=self.storage_options)
        return StreamingDataset(**where, **{**settings, **kwargs})

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(files={len(self._files)}, rows={len(self)}, format={self.format.name!r}, "
                f"columns={self.options.columns})")


def _url(root: str, name: str) -> str:
    if root.startswith("file://"):  # local compressed files, read through a cache of their directory
        root = root[len("file://"):]
    if is_remote(root):
        return f"{root.rstrip('/')}/{name}"
    return os.path.join(root, *name.split("/"))


class ParquetShardedSource(FileShardedSource):
    """Parquet files, one shard each; a resumed shard opens the row group holding its row."""

    format_name = "parquet"


class ArrowShardedSource(FileShardedSource):
    """Arrow IPC files (file or stream format, e.g. ``save_to_disk``'s), one shard each; a resumed shard
    opens the record batch holding its row."""

    format_name = "arrow"


class JsonShardedSource(FileShardedSource):
    """JSON Lines files (``jsonl=True``) or files each holding one JSON array of rows (``jsonl=False``)."""

    def __init__(self, data_files: Any, storage_options: Optional[dict] = None, jsonl: bool = True,
                 columns: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        self.format_name = "jsonl" if jsonl else "json"
        super().__init__(data_files, storage_options, columns, **kwargs)


class CsvShardedSource(FileShardedSource):
    """CSV files (a header line, then one row per record). The delimiter is the files': a comma for
    ``.csv``, a tab for ``.tsv``; ``delimiter=`` is checked against it."""

    format_name = "csv"

    def __init__(self, data_files: Any, storage_options: Optional[dict] = None, delimiter: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        super().__init__(data_files, storage_options, columns, **kwargs)
        for name in self._files if delimiter is not None else ():
            theirs = "\t" if plain_name(name).lower().endswith(".tsv") else ","
            if delimiter != theirs:
                raise NotYetSupportedError(
                    f"delimiter={delimiter!r}, but {name} is read with {theirs!r} (a comma for .csv, a tab for "
                    ".tsv files); name the files for their delimiter and leave delimiter out")


class TextShardedSource(FileShardedSource):
    """Text files, one row per line: ``{text_field: line}``."""

    format_name = "text"

    def __init__(self, data_files: Any, storage_options: Optional[dict] = None, text_field: str = "text",
                 **kwargs: Any) -> None:
        self.text_field = text_field
        super().__init__(data_files, storage_options, **kwargs)

    def dataset(self, **kwargs: Any) -> Any:
        if self.text_field != "text":
            raise NotYetSupportedError(f"a StreamingDataset of text files names its column 'text', not "
                                       f"{self.text_field!r}; rename it in your loop, or use text_field='text'")
        return super().dataset(**kwargs)

    def _rows(self, first: int, stop: int, skip: int) -> Iterator[dict]:
        rows = super()._rows(first, stop, skip)
        if self.text_field == "text":
            return rows
        field = self.text_field
        return ({field: r["text"], **{k: v for k, v in r.items() if k != "text"}} for r in rows)
