"""Processed data cached to MDS: write every row of a dataset once, reuse it while nothing changed.

:func:`cache_to_mds` writes the rows of a dataset (a processing chain, or a ``StreamingDataset``) as
an MDS dataset at ``output`` (a directory or an fsspec URL) and returns the ``StreamingDataset`` over
it. Next to the shards it writes ``shardstream_cache.json``: the dataset's fingerprint (its source and
every stage's description) and a summary (rows, tokens, columns, seconds). That file is written last,
atomically, so an output without it is never taken for a complete cache:

- a complete cache with the same fingerprint is reused: nothing is read or written;
- one with another fingerprint is rebuilt with ``overwrite=True``, else refused
  (:class:`~shardstream.errors.CacheMismatchError`);
- a half-written one (a writer killed before the end: ``.tmp-shardstream_cache.pending`` is there, or
  only shards without ``index.json``) is rebuilt;
- an MDS dataset that is not such a cache is replaced only with ``overwrite=True``.

Columns are taken from the first rows: numpy arrays keep their dtype (``ndarray:int32`` ...; boolean
arrays are stored as ``uint8``), lists of ints become ``ndarray:int64`` and of floats
``ndarray:float64``, Python ints ``int``, floats ``float64``, numpy scalars their dtype, strings
``str``, bytes ``bytes``, anything else (dicts, mixed lists, booleans, None) ``json``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Iterator, Optional

import numpy as np

from ..errors import CacheMismatchError, EncodeError, InvalidArgumentError, OutputExistsError
from ..format.atomic import TMP_PREFIX, atomic_write, read_json, remove_quietly
from ..format.index import INDEX_BASENAME
from ..format.shardwriter import DEFAULT_SIZE_LIMIT
from .streaming import StreamingDataset
from ..storage.fs import filesystem, is_remote, local_path
from ..writing.mdswriter import MDSWriter
from ..engine.run import reader_of

MARKER = "shardstream_cache.json"
PENDING = f"{TMP_PREFIX}shardstream_cache.pending"
#: rows between two progress lines with ``progress=True``
PROGRESS_EVERY = 100_000
#: how many rows the columns' encodings are taken from (the first value that decides, per column)
INFER_ROWS = 256
CACHE_VERSION = 1

log = logging.getLogger("shardstream.cache")


def cache_to_mds(dataset: Any, output: str, *, storage_options: Optional[dict] = None, overwrite: bool = False,
                 size_limit: Optional[int | str] = DEFAULT_SIZE_LIMIT, progress: bool | int = True,
                 compression: Optional[str] = None) -> StreamingDataset:
    """Write the rows of ``dataset`` to MDS at ``output``, or reuse what an earlier call wrote there; return
    the ``StreamingDataset`` of ``output`` (see the module docstring).

    ``dataset`` is read once, from its start, as one reader: call this in one process (rank 0), before
    the training processes read the result (a process that reads only its share is refused). ``progress``: log a line every ``PROGRESS_EVERY`` rows
    (True), every ``progress`` rows (an int), or not (False), on the ``shardstream.cache`` logger.
    ``size_limit`` and ``compression`` are the shards' (as for ``MDSWriter``).
    """
    if not isinstance(output, (str, os.PathLike)) or not os.fspath(output):
        raise InvalidArgumentError(f"output={output!r} should be a directory or a URL (s3://, gs://, ...)")
    every = _progress_every(progress)
    dataset = as_chain(dataset)
    _refuse_batches(dataset)
    _refuse_shares(dataset)
    place = CacheOutput(os.fspath(output), storage_options)
    fingerprint = dataset_fingerprint(dataset)
    summary = place.read_marker()
    if summary is not None:
        if summary.get("fingerprint") == fingerprint:
            log.info("%s holds this dataset already (fingerprint %s, %s rows): reusing it", place.output,
                     fingerprint[:16], summary.get("rows"))
            return place.open()
        if not overwrite:
            raise CacheMismatchError(
                f"{place.output} holds processed data of another source or chain of stages (written with "
                f"fingerprint {str(summary.get('fingerprint'))[:16]}, this dataset's is {fingerprint[:16]}): "
                "the data files, their order, or a stage's settings (the tokenizer, max_length, seq_len ...) "
                "changed since. Pass overwrite=True (save: overwrite: true) to rebuild it, or choose another "
                "output")
        log.info("%s was written from another source or stages: rebuilding it (overwrite=True)", place.output)
    elif place.has_foreign_dataset() and not overwrite:
        raise OutputExistsError(
            f"{place.output} holds an MDS dataset that cache_to_mds did not write (it has index.json but no "
            f"{MARKER}); pass overwrite=True to replace it, or choose another output")
    place.remove_marker()  # first: from here until the end, the output is not a complete cache
    summary = write_rows(dataset, place, fingerprint, size_limit, compression, every)
    place.write_marker(summary)
    place.remove_pending()
    log.info("%s: %d rows written in %.1f s", place.output, summary["rows"], summary["seconds"])
    return place.open()


def read_cache_summary(output: str, storage_options: Optional[dict] = None) -> Optional[dict]:
    """The ``shardstream_cache.json`` of a complete cache at ``output`` (fingerprint, rows, tokens,
    columns ...), or None when there is none."""
    return CacheOutput(os.fspath(output), storage_options).read_marker()


def as_chain(dataset: Any) -> Any:
    """``dataset`` as a processing chain (a ``StreamingDataset`` becomes the chain rooted at it)."""
    if getattr(dataset, "fingerprint", None) is None and callable(getattr(dataset, "as_iterable", None)):
        return dataset.as_iterable()
    return dataset


def dataset_fingerprint(dataset: Any) -> str:
    fingerprint = getattr(dataset, "fingerprint", None)
    if not callable(fingerprint):
        raise InvalidArgumentError(
            f"cache_to_mds writes a dataset of shardstream (a StreamingDataset or what its map, filter, pack ... "
            f"return), whose fingerprint() tells when a cache is stale; got {type(dataset).__name__}")
    return str(fingerprint())


def _refuse_batches(dataset: Any) -> None:
    described = [s.describe() for s in getattr(dataset, "specs", ()) if callable(getattr(s, "describe", None))]
    if any(isinstance(d, dict) and d.get("op") == "batch" for d in described):
        raise InvalidArgumentError("cache_to_mds writes rows, and this chain groups them into batches (.batch / "
                                   ".iter); cache the chain before .batch() and batch what it returns")


def _refuse_shares(dataset: Any) -> None:
    """One reader reads the whole dataset; a rank (or DataLoader worker) would write only its share."""
    root = getattr(dataset, "root", None)
    if root is None or not callable(getattr(root, "detect_world", None)):
        return
    reader, readers, _ = reader_of(root.detect_world())
    if readers > 1:
        raise InvalidArgumentError(
            f"cache_to_mds reads the whole dataset as one reader, but this process is reader {reader} of {readers} "
            "(ranks x DataLoader workers, from RANK / WORLD_SIZE ...), which reads only its share: call it in one "
            "process before the others read the output (on rank 0, then a barrier), or give the dataset "
            "world=shardstream.World()")


def _progress_every(progress: Any) -> int:
    if progress is True:
        return PROGRESS_EVERY
    if progress is False or progress is None:
        return 0
    if isinstance(progress, int) and progress > 0:
        return progress
    raise InvalidArgumentError(f"progress={progress!r} should be True, False or a number of rows between two "
                               "progress lines")


class CacheOutput:
    """Where a cache is written: its marker files and its dataset, local or remote."""

    def __init__(self, output: str, storage_options: Optional[dict]) -> None:
        self.output = output.rstrip("/") if is_remote(output) else local_path(output)
        self.storage_options = storage_options
        self.remote = is_remote(output)
        if self.remote:
            self.fs, self.root = filesystem(self.output, storage_options)

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}" if self.remote else os.path.join(self.output, name)

    def _exists(self, name: str) -> bool:
        if self.remote:
            self.fs.invalidate_cache(self.root)
            return bool(self.fs.exists(self._path(name)))
        return os.path.exists(self._path(name))

    def read_marker(self) -> Optional[dict]:
        if not self.remote:
            data = read_json(self._path(MARKER))
        else:
            try:
                data = json.loads(self.fs.cat_file(self._path(MARKER)))
            except (FileNotFoundError, ValueError):
                data = None
        return data if isinstance(data, dict) and "fingerprint" in data else None

    def has_foreign_dataset(self) -> bool:
        """An ``index.json`` with neither a marker nor the pending file of an interrupted cache."""
        return self._exists(INDEX_BASENAME) and not self._exists(PENDING)

    def write_marker(self, summary: dict, name: str = MARKER) -> None:
        data = json.dumps(summary, indent=2, sort_keys=True).encode()
        if self.remote:
            self.fs.pipe_file(self._path(name), data)  # one PUT: the object appears whole or not at all
        else:
            atomic_write(self._path(name), data)

    def write_pending(self, fingerprint: str) -> None:
        self.write_marker({"writing": fingerprint, "started": time.time()}, PENDING)

    def _remove(self, name: str) -> None:
        if not self.remote:
            remove_quietly(self._path(name))
            return
        try:
            self.fs.rm_file(self._path(name))
        except FileNotFoundError:
            pass

    def remove_marker(self) -> None:
        self._remove(MARKER)

    def remove_pending(self) -> None:
        self._remove(PENDING)

    def open(self) -> StreamingDataset:
        if self.remote:
            return StreamingDataset(remote=self.output, storage_options=self.storage_options)
        return StreamingDataset(local=self.output)


def write_rows(dataset: Any, place: CacheOutput, fingerprint: str, size_limit: Any, compression: Optional[str],
               every: int) -> dict:
    """Write every row of ``dataset`` to ``place``; the summary for the marker."""
    start = time.monotonic()
    rows = iter(dataset)
    head = _head(rows)
    columns, convert = infer_columns(head)
    writer = MDSWriter(out=place.output, columns=columns, exist_ok=True, size_limit=size_limit,
                       compression=compression, storage_options=place.storage_options)
    count = tokens = 0
    with writer:
        place.write_pending(fingerprint)  # after the writer cleared the output, before its first shard
        for row in _chain(head, rows):
            if convert:
                row = _converted(row, convert)
            try:
                writer.write(row)
            except EncodeError as exc:
                raise EncodeError(f"row {count} of the dataset: {exc}{_hint(exc)}") from None
            count += 1
            tokens += row_tokens(row)
            if every and count % every == 0:
                elapsed = time.monotonic() - start
                log.info("%s: %d rows, %d tokens written (%.0f rows/s)", place.output, count, tokens,
                         count / max(elapsed, 1e-9))
    shards = list(writer.shards)
    return {"version": CACHE_VERSION, "fingerprint": fingerprint, "rows": count,
            "tokens": tokens if "input_ids" in columns else None, "columns": columns, "shards": len(shards),
            "bytes": int(sum(s.stored.bytes for s in shards)), "seconds": round(time.monotonic() - start, 3),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _head(rows: Iterator) -> list:
    head = []
    for row in rows:
        if not isinstance(row, dict):
            raise InvalidArgumentError(f"cache_to_mds writes rows (dicts of column -> value); the dataset gave "
                                       f"a {type(row).__name__}. Cache before .batch(), or iterate rows")
        head.append(row)
        if len(head) >= INFER_ROWS:
            break
    if not head:
        raise InvalidArgumentError("the dataset has no rows to cache; check its source and filters")
    return head


def _chain(head: list, rows: Iterator) -> Iterator[dict]:
    yield from head
    yield from rows


def _hint(exc: EncodeError) -> str:
    if "0 elements" in str(exc):
        return "; MDS cannot store empty arrays: drop such rows first (ds.filter(lambda r: len(r[...]) > 0))"
    return "; the columns were taken from the first rows: give every row the same columns and types"


def row_tokens(row: dict) -> int:
    """Real tokens of a row: ``segment_ids != 0`` of a packed row, else the length of ``input_ids``."""
    ids = row.get("input_ids")
    if ids is None:
        return 0
    segments = row.get("segment_ids")
    if segments is not None:
        return int(np.count_nonzero(segments))
    return int(np.size(ids))


def infer_columns(rows: list) -> tuple[dict, dict]:
    """``(column -> encoding, column -> converter)`` from ``rows`` (the first value that decides)."""
    names: list = []
    for row in rows:
        names += [n for n in row if n not in names]
    columns, convert = {}, {}
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"column names must be strings to be cached, got {name!r}")
        encoding = None
        for row in rows:
            encoding = encoding_of(name, row.get(name))
            if encoding is not None:
                break
        columns[name] = encoding or "json"
        if columns[name] == "ndarray:uint8" and any(getattr(r.get(name), "dtype", None) == np.bool_ for r in rows):
            convert[name] = _bools
    return columns, convert


def _bools(value: Any) -> Any:
    return value.astype(np.uint8) if isinstance(value, np.ndarray) and value.dtype == np.bool_ else value


def _converted(row: dict, convert: dict) -> dict:
    row = dict(row)
    for name, fn in convert.items():
        if name in row:
            row[name] = fn(row[name])
    return row


_ARRAY_DTYPES = {"uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "uint64", "int64",
                 "float64"}


def encoding_of(name: str, value: Any) -> Optional[str]:
    """The MDS encoding for ``value`` of column ``name``, or None when it does not decide (None, [])."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.dtype == np.bool_:
            return "ndarray:uint8"
        if value.dtype.name in _ARRAY_DTYPES:
            return f"ndarray:{value.dtype.name}"
        if value.dtype.kind in "OUS":
            return "json"
        raise InvalidArgumentError(f"column {name!r} holds arrays of {value.dtype}, which MDS cannot store; "
                                   f"convert them to one of {', '.join(sorted(_ARRAY_DTYPES))}")
    if isinstance(value, (bool, np.bool_)):
        return "json"
    if isinstance(value, int):
        return "int"
    if isinstance(value, (np.integer, np.floating)):
        return value.dtype.name if value.dtype.name in _ARRAY_DTYPES else "json"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, (list, tuple)):
        return _list_encoding(value)
    return "json"


def _list_encoding(value: Any) -> Optional[str]:
    if not value:
        return None
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value):
        return "ndarray:int64"
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
           for v in value):
        return "ndarray:float64"
    return "json"
