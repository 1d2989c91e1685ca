"""Where samples come from: the protocol of a *format of shards*, and the registry of formats by name.

Everything above this seam sees a dataset as a list of shards, each with a number of
samples, and reads them through a format object:

- the plan needs only each shard's ``samples`` (and, through them, the dataset's
  fingerprint);
- storage asks which files make a shard readable (:meth:`ShardFormat.fetched_files`,
  downloaded in this order), which file a reader maps (:meth:`ShardFormat.resident_file`:
  the shard is ready when it is present at its size), what the shard costs on disk at its
  peak (:meth:`ShardFormat.footprint`) and runs the whole-shard transform once after a
  download (:meth:`ShardFormat.prepare`: MDS decompresses and checks the header there);
- the reader gets an object from :meth:`ShardFormat.open` with the methods of
  :class:`ShardRows` (one sample, a run, a step's rows as a column batch).

A new format is one subclass of :class:`ShardFormat` (and usually of :class:`ShardRows`)
plus ``register_format(MyFormat())``; ``Stream(..., format="name")`` then reads it
through the same plan, cache, mixing and resume as MDS. Built-in formats are listed in
:data:`KNOWN_FORMATS` and imported on first use, as fsspec's ``known_implementations``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterator, Optional, Sequence

from ..errors import InvalidArgumentError, UnsupportedFormatError

# name -> "module:attribute" of a built-in format, imported when first asked for
KNOWN_FORMATS = {
    # index.json: MDS shards, and mosaicml-streaming's JSON / CSV / TSV / XSV shards, each by its entry
    "mds": "shardstream.format.textformat:INDEX_FORMAT",
    "parquet": "shardstream.format.parquet:PARQUET_FORMAT",
    "arrow": "shardstream.format.arrowipc:ARROW_FORMAT",
    "jsonl": "shardstream.format.lines:JSONL_FORMAT",
    "json": "shardstream.format.lines:JSON_FORMAT",
    "csv": "shardstream.format.lines:CSV_FORMAT",
    "text": "shardstream.format.lines:TEXT_FORMAT",
    "mds-json": "shardstream.format.textformat:JSON_SHARDS",
    "mds-csv": "shardstream.format.textformat:CSV_SHARDS",
    "mds-tsv": "shardstream.format.textformat:TSV_SHARDS",
    "mds-xsv": "shardstream.format.textformat:XSV_SHARDS",
}
#: file name endings of the built-in file formats, for ``format=`` left out (a compression suffix is ignored)
SUFFIX_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
    ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
    ".csv": "csv", ".tsv": "csv",
    ".txt": "text", ".text": "text",
}
_REGISTRY: dict[str, "ShardFormat"] = {}


class ShardRows:
    """The reading side of one opened shard. Subclasses give :meth:`get` and ``samples``;
    everything else has a working default that formats with faster paths override."""

    samples: int = 0
    column_names: tuple = ()

    def get(self, i: int) -> dict[str, Any]:
        raise NotImplementedError

    def get_unchecked(self, i: int) -> dict[str, Any]:
        """Sample ``i``, for an ``i`` already known to be in range (the per-sample hot path)."""
        return self.get(i)

    def decoders(self, columns: Optional[Sequence[str]] = None) -> tuple[Optional[Callable], Callable]:
        """``(decode_at or None, get_unchecked)`` decoding only ``columns`` (all if None)."""
        if columns is None:
            return None, self.get_unchecked
        keep = tuple(columns)
        return None, lambda i: {k: v for k, v in self.get_unchecked(i).items() if k in keep}

    def iter_range(self, start: int = 0, stop: Optional[int] = None,
                   columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """Samples ``start..stop-1`` in order."""
        get = self.decoders(columns)[1]
        return map(get, range(start, self.samples if stop is None else stop))

    def batch_rows(self, rows, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """Samples ``rows`` of this shard as one column batch (the form of :mod:`.batch`)."""
        from .batch import stack_samples

        get = self.decoders(columns)[1]
        return stack_samples([get(int(i)) for i in rows], self.kinds(columns))

    def batch_range(self, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        return self.batch_rows(range(lo, hi), columns)

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        """``(name, kind, detail)`` per column, as :func:`~shardstream.format.batch.column_kinds`."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.samples


class ShardFormat:
    """How one format lists, stores and opens its shards (see the module docstring).

    A shard is any object with ``samples`` (an int) and ``column_names`` (a tuple). Files are
    :class:`~shardstream.format.index.FileInfo` entries: a relative ``basename``, its ``bytes``
    and the digests the format knows (``hashes``, checked on download when present).
    """

    name: str = ""
    #: the file that lists the shards; a remote dataset is located by it and it is fetched first
    index_name: str = ""

    # -- the listing -------------------------------------------------------------------------
    def read_shards(self, dirname: str) -> list:
        """The shards of the dataset in the local directory ``dirname``."""
        raise NotImplementedError

    def parse_index(self, text: bytes, source: str) -> list:
        """The shards listed by the index file's contents (``source`` names it in errors)."""
        raise NotImplementedError

    # -- storage -----------------------------------------------------------------------------
    def fetched_files(self, shard) -> list:
        """The files a download of ``shard`` brings, in order."""
        return [self.resident_file(shard)]

    def resident_file(self, shard):
        """The file a reader opens; the shard is ready when it is present at its size."""
        raise NotImplementedError

    def owned_files(self, shard) -> list:
        """Every file ``shard`` may leave in a cache directory (counted in its usage, deleted on eviction)."""
        files = [self.resident_file(shard)]
        return files + [f for f in self.fetched_files(shard) if f.basename != files[0].basename]

    def footprint(self, shard, fetched: bool) -> int:
        """Bytes ``shard`` takes at its peak: while ``fetched`` (downloaded) files and the resident one coexist."""
        files = self.owned_files(shard) if fetched else [self.resident_file(shard)]
        return sum(f.bytes for f in files)

    def prepare(self, dirname: str, shard, keep_fetched: bool) -> None:
        """Run once after ``shard``'s files were downloaded into ``dirname`` (default: nothing). Raise
        :class:`~shardstream.errors.CorruptShardError` if they cannot be a good copy of it."""

    # -- reading ------------------------------------------------------------------------------
    def open(self, dirname: str, shard, validate_hash: Optional[str] = None) -> ShardRows:
        """``shard``'s reader over the files in ``dirname`` (checked against ``validate_hash`` if given)."""
        raise NotImplementedError

    def kinds(self, shard, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        """The column kinds of ``shard``'s batches, from its listing (no file opened)."""
        raise NotImplementedError

    def layout(self, shard) -> tuple:
        """What must agree for samples of two shards to share a column batch (names and types)."""
        return tuple(shard.column_names)

    def unsafe_columns(self, shard) -> list[tuple[str, str]]:
        """``(column, encoding)`` pairs whose decoding can run code from the data (refused by default)."""
        return []

    def __repr__(self) -> str:
        return f"<shard format {self.name!r}>"


def register_format(fmt: ShardFormat, replace: bool = False) -> ShardFormat:
    """Make ``fmt`` available as ``format=fmt.name``; refuses a taken name unless ``replace``."""
    if not isinstance(fmt, ShardFormat) or not isinstance(fmt.name, str) or not fmt.name:
        raise InvalidArgumentError(f"register_format takes a ShardFormat instance with a name, got {fmt!r}")
    if not replace and (fmt.name in _REGISTRY or fmt.name in KNOWN_FORMATS):
        raise InvalidArgumentError(f"a format named {fmt.name!r} is already registered; pass replace=True")
    _REGISTRY[fmt.name] = fmt
    return fmt


def get_format(name: Any) -> ShardFormat:
    """The format registered as ``name`` (a :class:`ShardFormat` instance is returned as it is)."""
    if isinstance(name, ShardFormat):
        return name
    fmt = _REGISTRY.get(name) if isinstance(name, str) else None
    if fmt is not None:
        return fmt
    target = KNOWN_FORMATS.get(name) if isinstance(name, str) else None
    if target is None:
        raise UnsupportedFormatError(
            f"format={name!r} is not a known shard format; known: {', '.join(format_names())}")
    module, attr = target.split(":")
    fmt = _REGISTRY[name] = getattr(importlib.import_module(module), attr)
    return fmt


def is_file_format(fmt: "ShardFormat") -> bool:
    """Whether ``fmt`` reads ordinary data files (listed by a path, directory or glob; see :mod:`.files`)
    rather than shards listed by an index file."""
    return getattr(fmt, "listing", "index") == "files"


def format_names() -> list[str]:
    """The names ``format=`` accepts: the built-in formats and those registered."""
    return sorted(set(KNOWN_FORMATS) | set(_REGISTRY))
