"""Opening the streams of a dataset: where each one lives (a remote and its cache directory, or a
local directory read in place), and its list of shards, read from its index (fetched once per
machine for a remote, see :mod:`.index`).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from ..errors import EmptyStreamError, IndexNotFoundError, InvalidArgumentError, LocalIndexMissingError, NotADatasetError
from ..format.source import get_format, is_file_format
from .claim import within
from .fetch import Fetcher
from .opened import OpenedStream
from .filestreams import files_beside, infer_format, open_file_stream
from .fs import default_local, is_remote, join, local_path
from .index import local_index
from .localcopy import local_copy
from .options import StreamOptions

#: ``(stream or None, remote, local, options)``: one stream to open, as the user described it
Place = tuple[Any, Optional[str], Optional[str], StreamOptions]


def open_streams(places: Sequence[Place], storage_options: Optional[dict]) -> list[OpenedStream]:
    """Every place opened with its options; two places from different remotes (or a remote and a
    local dataset) that would share a directory are refused before anything is opened."""
    formats = [infer_format(remote, local, options) for _, remote, local, options in places]
    located: list[Optional[tuple[Optional[str], str, str]]] = []
    first_at: dict[str, Optional[str]] = {}  # directory -> the remote (or None) of its first stream
    for (_, remote, local, options), fmt in zip(places, formats):
        if is_file_format(fmt):
            located.append(None)  # located once its files are listed
            continue
        remote, local, dirname = locate(remote, local, options.split)
        _share(first_at, dirname, remote)
        located.append((remote, local, dirname))
    opened = []
    for place, where, fmt in zip(places, located, formats):
        if where is None:
            o = open_file_stream(place[0], place[1], place[2], place[3], fmt, storage_options)
            _share(first_at, o.dirname, o.remote)
        else:
            o = _open(place[0], *where, place[3], storage_options)
        _refuse_empty(o)
        opened.append(o)
    return opened


def _refuse_empty(o: OpenedStream) -> None:
    """A stream with no samples is refused, as mosaicml-streaming does (its words open the message)."""
    if o.samples == 0:
        index = os.path.join(o.dirname, o.format.index_name) if o.format.index_name else o.dirname
        raise EmptyStreamError(
            f"Stream contains no samples: {index}. It lists {len(o.shards)} shards and 0 samples; write samples "
            "into the dataset, or leave this stream out")


def _share(first_at: dict, dirname: str, remote: Optional[str]) -> None:
    other_remote = first_at.setdefault(dirname, remote)
    if other_remote != remote:
        raise InvalidArgumentError(
            f"two streams keep their shards in {dirname!r} but come from different places "
            f"({other_remote or 'local'} and {remote or 'local'}); give each its own local directory")


def _open(stream: Any, remote: Optional[str], local: str, dirname: str, options: StreamOptions,
          storage_options: Optional[dict]) -> OpenedStream:
    """Read one located stream's index (fetching it once per machine for a remote)."""
    fmt = get_format(options.format or "mds")
    if remote is not None:
        if os.path.isfile(local):
            raise NotADatasetError(
                f"local={local!r} is a file; with remote= it is the directory where the shards are cached (it is "
                "created if missing): give a directory, or leave local out to cache under SHARDSTREAM_CACHE_DIR")
        fetcher = Fetcher(join(remote, options.split), storage_options, options.download_retry,
                          options.download_timeout)
        try:
            shards = local_index(dirname, fetcher, fmt=fmt)
        except IndexNotFoundError as exc:
            if options.format is not None or isinstance(exc, NotADatasetError):
                raise
            found = files_beside(remote, storage_options, options)  # a directory of data files, not of MDS shards
            if found is not None:
                return open_file_stream(stream, remote, None if local == default_local(remote) else local, options,
                                        found, storage_options)
            shards = local_copy(dirname, fetcher, fmt, exc)  # the remote has no index; local has a whole dataset
            if shards is None:
                raise
            remote, fetcher = None, None  # read in place from now on
    else:
        fetcher, shards = None, _read_local(fmt, dirname)
    if options.columns is not None:
        raise InvalidArgumentError(
            f"columns={list(options.columns)} selects the columns of data files (Parquet, Arrow, JSON Lines, CSV); "
            f"the {fmt.name} stream at {remote or local!r} is read whole: leave columns out for it (Stream(..., "
            "columns=...) per stream) and pick columns per pass with iterate(columns=...) or batches(columns=...)")
    return OpenedStream(stream, remote, local, dirname, shards, fetcher, options)


def _read_local(fmt, dirname: str) -> list:
    """The shards of a dataset with no remote; a missing index is also a ``RuntimeError`` (as in
    mosaicml-streaming, whose words open the message)."""
    try:
        return fmt.read_shards(dirname)
    except IndexNotFoundError as exc:
        if isinstance(exc, NotADatasetError):
            raise
        path = os.path.join(dirname, fmt.index_name or "")
        raise LocalIndexMissingError(f"No `remote` provided, but local file {path} does not exist either: {exc}") \
            from None


def locate(remote: Optional[str], local: Optional[str], split: Optional[str]) -> tuple[Optional[str], str, str]:
    """(remote URL or None, local directory, the directory of ``split`` in it): see :func:`locations`."""
    remote, local = locations(remote, local)
    return remote, local, os.path.join(local, split) if split else local


def locations(remote: Optional[str], local: Optional[str]) -> tuple[Optional[str], str]:
    """(remote URL or None, local directory). A remote that is a plain path / ``file://`` URL of the
    local directory (by its real path, through links) or of a directory holding it means no remote:
    the dataset is read in place from the remote's directory. With no ``local`` a remote gets its own
    directory under the cache root."""
    if remote is not None and not isinstance(remote, str):
        raise InvalidArgumentError(f"remote={remote!r} must be a URL string such as 's3://bucket/dataset'")
    if local is not None:
        local = os.path.expanduser(str(local))
        if remote is not None and not is_remote(remote) and within(local, local_path(remote)):
            # local= is the remote's own directory (also through a link) or lies inside it: a cache there
            # would delete the only copy, so the dataset is read in place
            root = local_path(remote)
            return None, local if within(root, local) else root
    if remote is None:
        if local is None:
            raise InvalidArgumentError(
                "local=... is required without remote=...: the directory that holds index.json and the shards"
            )
        return None, local
    return remote.rstrip("/"), local if local is not None else default_local(remote)
