"""Opening a stream of data files (Parquet, Arrow, JSON Lines, CSV, text): which format reads it,
whether it is read in place or through the cache, and its pieces.

- ``local=`` alone (a file, directory, glob or list of local files) is read **in place**: nothing
  is copied, and the files' descriptions are kept under the machine's cache root
  (``SHARDSTREAM_CACHE_DIR``), shared by every process and job.
- ``remote=`` (any fsspec URL, glob or list) is read **through the cache** ``local=`` (default: a
  directory under the cache root named after the remote): each piece is fetched with one ranged
  read into a file of its own, within ``cache_limit``, and the descriptions are kept in the cache
  directory.
- Local compressed files (``.jsonl.gz``, ``.jsonl.zst`` ...) cannot be read by ranges: they are
  read through a cache of their own directory, where each is decompressed once.

``format=`` left out is taken from the files' names (``.parquet``, ``.jsonl`` ...), or is MDS for a
directory with ``index.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from typing import Any, Optional

from ..errors import InvalidArgumentError, NoFilesError
from ..format.files import FileFormat, codec_of, plain_name
from ..format.index import INDEX_BASENAME
from ..format.source import SUFFIX_FORMATS, ShardFormat, get_format
from .claim import META, claim
from .described import DescribeStats, describe_files
from .fetch import Fetcher
from .fs import cache_root, default_local, local_path
from .listing import entries_of, has_glob, list_files
from .opened import OpenedStream
from .options import StreamOptions

LISTINGS = "listings"  # under the cache root: descriptions of files read in place


def suffix_format(name: str) -> Optional[str]:
    """The built-in format a file name selects (a compression suffix is looked through), or None."""
    base = plain_name(name.rstrip("/")).rsplit("/", 1)[-1]
    if base == INDEX_BASENAME:
        return None
    return SUFFIX_FORMATS.get(os.path.splitext(base)[1].lower())


def infer_format(remote: Any, local: Any, options: StreamOptions) -> ShardFormat:
    """The format of a stream: ``options.format``, else from its files' names, else MDS."""
    if options.format is not None:
        return get_format(options.format)
    data = remote if remote is not None else local
    if data is None:
        return get_format("mds")
    entries = entries_of(data)
    named = {suffix_format(e) for e in entries}
    if len(named) == 1 and None not in named:
        return get_format(named.pop())
    if len(named) > 1 and None not in named:
        raise InvalidArgumentError(f"{data!r} names files of several formats ({sorted(named)}); give each format "
                                   "its own Stream(..., format=...)")
    if len(entries) > 1 or any(has_glob(e) for e in entries):
        raise InvalidArgumentError(f"cannot tell the format of {data!r} from its names; give format= "
                                   f"(one of {', '.join(sorted(set(SUFFIX_FORMATS.values())))})")
    if remote is None and os.path.isdir(local_path(entries[0])):
        return get_format(_directory_format(local_path(entries[0]), options.split) or "mds")
    return get_format("mds")


def _directory_format(path: str, split: Optional[str]) -> Optional[str]:
    """For a local directory without ``index.json``: the format of the data files in it, if one."""
    if os.path.exists(os.path.join(path, INDEX_BASENAME)) or (
            split and os.path.exists(os.path.join(path, split, INDEX_BASENAME))):
        return None
    seen: Counter = Counter()
    for top, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        seen.update(f for f in map(suffix_format, names) if f)
        if seen:
            break
    if len(seen) > 1:
        raise InvalidArgumentError(f"{path} holds files of several formats ({sorted(seen)}); give format=")
    return next(iter(seen), None)


def files_beside(remote: str, storage_options: Optional[dict], options: StreamOptions) -> Optional[ShardFormat]:
    """For a remote directory without ``index.json``: the format of the data files in it, or None."""
    try:
        listing = list_files(remote, tuple(SUFFIX_FORMATS), storage_options, options.split, options.download_retry,
                             options.download_timeout)
    except NoFilesError:
        return None
    seen = Counter(suffix_format(f.name) for f in listing.files)
    return get_format(next(iter(seen))) if len(seen) == 1 and None not in seen else None


def format_options(fmt: FileFormat, options: StreamOptions) -> dict:
    """The options a format's description depends on (part of its listing's key)."""
    wanted = getattr(fmt, "option_names", ())
    return {name: getattr(options, name) for name in wanted}


def open_file_stream(stream: Any, remote: Any, local: Any, options: StreamOptions, fmt: ShardFormat,
                     storage_options: Optional[dict], stats: Optional[DescribeStats] = None) -> OpenedStream:
    """List, describe and open one stream of data files (see the module docstring)."""
    if not isinstance(fmt, FileFormat):
        raise InvalidArgumentError(f"format {fmt.name!r} is not a format of data files")
    data = remote if remote is not None else local
    if data is None:
        raise InvalidArgumentError("a stream of data files needs remote= or local= (a file, directory or glob)")
    suffixes = tuple(s for s, name in SUFFIX_FORMATS.items() if name == fmt.name) or tuple(fmt.suffixes)
    retry, timeout = options.download_retry, options.download_timeout
    listing = list_files(data, suffixes, storage_options, options.split, retry, timeout)
    fmt_opts = format_options(fmt, options)
    if remote is None and not any(codec_of(f.name) for f in listing.files):
        meta_dir = os.path.join(cache_root(), LISTINGS)
        pieces = describe_files(listing, fmt, meta_dir, options.columns, fmt_opts, None, retry, timeout, stats)
        _some_rows(data, listing, pieces)
        return OpenedStream(stream, None, listing.root, listing.root, pieces, None, options, fmt)
    if remote is None:  # local compressed files: through a cache of their directory
        remote_root, cache = "file://" + listing.root, None
    else:
        remote_root, cache = listing.root, local
    if cache is None:
        key = json.dumps([remote_root, entries_of(data)])
        cache = default_local(remote_root) + "-" + hashlib.sha1(key.encode()).hexdigest()[:8]
    cache = os.path.expanduser(str(cache))
    if os.path.isfile(cache):
        raise InvalidArgumentError(f"local={cache!r} is a file; with remote= it is the directory where pieces are "
                                   "cached: give a directory")
    fetcher = Fetcher(remote_root, storage_options, options.download_retry, options.download_timeout)
    claim(cache, fetcher, fmt)
    pieces = describe_files(listing, fmt, os.path.join(cache, META), options.columns, fmt_opts, cache, retry,
                            timeout, stats)
    _some_rows(data, listing, pieces)
    return OpenedStream(stream, remote_root, cache, cache, pieces, fetcher, options, fmt)


def _some_rows(data: Any, listing, pieces: list) -> None:
    if not pieces:
        raise NoFilesError(f"{data!r}: its {len(listing.files)} file(s) hold no rows; nothing to stream")
