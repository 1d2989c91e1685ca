"""Describing data files once per machine: their pieces (row groups, byte ranges of lines), kept in
a listing file keyed by each file's size and version.

The first process to open a dataset describes the files it has not seen (in parallel threads:
a Parquet footer is one ranged request, a JSON Lines file one pass over its bytes) under an
exclusive lock; the others wait for it and read the listing. A file whose size or version
changed is described again. For a dataset read through the cache, the metadata a cached piece
needs to be read (a Parquet footer) is stored beside the listing, so no piece ever needs another
part of its file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Optional, Sequence

from ..errors import SchemaMismatchError
from ..format.atomic import atomic_write, read_json
from ..format.files import META_DIR, FileFormat, Piece, metadata_path
from .listing import FileSource, Listing
from .locks import FileLock
from .options import DEFAULT_DOWNLOAD_RETRY, DEFAULT_DOWNLOAD_TIMEOUT

LISTING_VERSION = 1
DESCRIBE_THREADS = 32
LOCK_WAIT = 3600.0  # seconds a process waits for another one describing the files
PROGRESS_FROM = 200  # files described at once from which progress is logged
LOG = logging.getLogger("shardstream")


class DescribeStats:
    """What opening cost: files described now (the others came from the listing), requests, bytes."""

    def __init__(self) -> None:
        self.files = self.described = self.requests = self.bytes = 0

    def __repr__(self) -> str:
        return (f"DescribeStats(files={self.files}, described={self.described}, requests={self.requests}, "
                f"bytes={self.bytes})")


def listing_path(meta_dir: str, fmt: FileFormat, listing: Listing, columns: Optional[Sequence[str]],
                 options: dict) -> str:
    """The listing file of these files read this way (the format, the columns, the format's options)."""
    key = json.dumps([LISTING_VERSION, fmt.name, listing.root, list(columns) if columns else None,
                      sorted(options.items())], default=str)
    return os.path.join(meta_dir, f"listing-{fmt.name}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json")


def describe_files(listing: Listing, fmt: FileFormat, meta_dir: str, columns: Optional[Sequence[str]],
                   options: dict, cache_dir: Optional[str] = None, retry: int = DEFAULT_DOWNLOAD_RETRY,
                   timeout: float = DEFAULT_DOWNLOAD_TIMEOUT,
                   stats: Optional[DescribeStats] = None) -> list[Piece]:
    """Every piece of the listed files, in dataset order. ``cache_dir``: the pieces are read through this
    cache directory (marked ``cached``, their files' metadata stored there)."""
    stats = stats if stats is not None else DescribeStats()
    stats.files = len(listing.files)
    os.makedirs(meta_dir, exist_ok=True)
    path = listing_path(meta_dir, fmt, listing, columns, options)
    with FileLock(path + ".lock") as lock:
        lock.acquire(True, LOCK_WAIT)
        known = read_json(path) or {}
        entries = known.get("files", {}) if known.get("version") == LISTING_VERSION else {}
        schemas = [tuple(map(_tuple, s)) for s in known.get("schemas", [])] if entries else []
        todo = [f for f in listing.files if (entries.get(f.name) or {}).get("version") != f.version
                or (cache_dir is not None and not _has_metadata(cache_dir, f, entries))]
        if todo:
            sources = [FileSource(listing, f, retry, timeout) for f in todo]
            results = _describe_all(fmt, sources, columns, options)
            for f, source, (pieces, meta) in zip(todo, sources, results):
                entries[f.name] = _encode(f.version, pieces, schemas, bool(meta))
                stats.requests += source.requests
                stats.bytes += source.bytes_read
                if cache_dir is not None and meta and pieces:
                    os.makedirs(os.path.join(cache_dir, META_DIR), exist_ok=True)
                    atomic_write(metadata_path(cache_dir, replace(pieces[0], version=f.version)), meta, fsync=False)
            stats.described = len(todo)
            doc = {"version": LISTING_VERSION, "format": fmt.name, "schemas": [list(s) for s in schemas],
                   "files": entries}
            atomic_write(path, json.dumps(doc, separators=(",", ":")).encode(), fsync=False)
    return _pieces(listing, entries, schemas, cache_dir is not None)


def _describe_all(fmt: FileFormat, sources: list, columns: Optional[Sequence[str]], options: dict) -> list:
    """Each source's description, in parallel; progress is logged (logger ``shardstream``) for many files."""
    step = max(1, len(sources) // 10) if len(sources) >= PROGRESS_FROM else 0
    started = time.monotonic()

    def one(k_source: tuple) -> tuple:
        k, source = k_source
        out = fmt.describe(source, columns, **options)
        if step and (k + 1) % step == 0:
            LOG.info("described %d of %d %s files in %.1fs", k + 1, len(sources), fmt.name, time.monotonic() - started)
        return out

    with ThreadPoolExecutor(min(DESCRIBE_THREADS, len(sources))) as pool:
        return list(pool.map(one, enumerate(sources)))


def _tuple(x: Any) -> Any:
    return tuple(_tuple(v) for v in x) if isinstance(x, list) else x


def _has_metadata(cache_dir: str, f, entries: dict) -> bool:
    entry = entries.get(f.name) or {}
    if not entry.get("meta") or not entry.get("pieces"):
        return True
    probe = Piece(f.name, f.bytes, f.version, 0, 0, 0, 0, 0, (), (), ())
    return os.path.exists(metadata_path(cache_dir, probe))


def _encode(version: str, pieces: list[Piece], schemas: list, meta: bool) -> dict:
    if not pieces:
        return {"version": version, "schema": -1, "pieces": [], "meta": meta}
    schema = (tuple(pieces[0].column_names), tuple(pieces[0].types), tuple(pieces[0].kinds))
    if schema not in schemas:
        schemas.append(schema)
    rows = [[p.part, p.start, p.stop, p.samples, p.first, p.plain_bytes, list(p.extra)] for p in pieces]
    return {"version": version, "schema": schemas.index(schema), "pieces": rows, "meta": meta}


def _pieces(listing: Listing, entries: dict, schemas: list, cached: bool) -> list[Piece]:
    out: list[Piece] = []
    first_with: Optional[tuple[str, tuple]] = None
    for f in listing.files:
        entry = entries[f.name]
        if entry["schema"] < 0:
            continue  # an empty file: no rows, no pieces
        names, types, kinds = schemas[entry["schema"]]
        if first_with is None:
            first_with = (f.name, (names, types))
        elif (names, types) != first_with[1]:
            raise SchemaMismatchError(_difference(first_with[0], first_with[1], f.name, (names, types)))
        for part, start, stop, samples, first, plain, *extra in entry["pieces"]:
            out.append(Piece(f.name, f.bytes, f.version, part, start, stop, samples, first, names, types, kinds,
                             plain, cached, tuple(extra[0]) if extra else ()))
    return out


def _difference(a: str, sa: tuple, b: str, sb: tuple) -> str:
    ta, tb = dict(zip(*sa)), dict(zip(*sb))
    for col in list(ta) + list(tb):
        if col not in tb:
            why = f"{b} has no column {col!r}, which {a} has"
        elif col not in ta:
            why = f"{b} has a column {col!r} that {a} does not"
        elif ta[col] != tb[col]:
            why = f"column {col!r} is {tb[col]} in {b} but {ta[col]} in {a}"
        else:
            continue
        return (f"the files of one dataset must have the same columns: {why}; give columns=[...] to read the "
                "columns they share, or read the files as separate streams")
    return f"{b} orders its columns {sb[0]} but {a} {sa[0]}; give columns=[...] to fix one order"
