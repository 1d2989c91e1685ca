"""Opening the streams of a dataset: where each one lives (a remote and its cache directory, or a
local directory read in place), and its list of shards, read from its index (fetched once per
machine for a remote, see :mod:`.index`).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from ..errors import InvalidArgumentError, NotADatasetError
from ..format.source import get_format
from .claim import within
from .fetch import Fetcher
from .fs import default_local, is_remote, join, local_path
from .index import local_index
from .options import StreamOptions

#: ``(stream or None, remote, local, options)``: one stream to open, as the user described it
Place = tuple[Any, Optional[str], Optional[str], StreamOptions]


class OpenedStream:
    """An opened stream: where it lives, its shards, and the options and format it is read with.

    ``stream`` is the user's :class:`~shardstream.Stream` (None for a dataset given by
    ``remote=``/``local=``); ``remote`` is None when the dataset is read in place from ``local``;
    ``dirname`` is ``local``'s ``split`` directory, which holds the index and the shards;
    ``fetcher`` downloads from the remote (None without one).
    """

    def __init__(self, stream: Any, remote: Optional[str], local: str, dirname: str, shards: list,
                 fetcher: Optional[Fetcher], options: StreamOptions) -> None:
        self.stream = stream
        self.remote = remote
        self.local = local
        self.dirname = dirname
        self.shards = shards
        self.fetcher = fetcher
        self.options = options
        self.format = get_format(options.format)
        self.samples = sum(s.samples for s in shards)

    def __repr__(self) -> str:
        return f"OpenedStream(remote={self.remote!r}, dirname={self.dirname!r}, shards={len(self.shards)})"


def open_streams(places: Sequence[Place], storage_options: Optional[dict]) -> list[OpenedStream]:
    """Every place opened with its options; two places from different remotes (or a remote and a
    local dataset) that would share a directory are refused before anything is opened."""
    located: list[tuple[Optional[str], str, str]] = []
    first_at: dict[str, Optional[str]] = {}  # directory -> the remote (or None) of its first stream
    for _, remote, local, options in places:
        remote, local, dirname = locate(remote, local, options.split)
        other_remote = first_at.setdefault(dirname, remote)
        if other_remote != remote:
            raise InvalidArgumentError(
                f"two streams keep their shards in {dirname!r} but come from different places "
                f"({other_remote or 'local'} and {remote or 'local'}); give each its own local directory")
        located.append((remote, local, dirname))
    return [_open(place[0], *where, place[3], storage_options) for place, where in zip(places, located)]


def _open(stream: Any, remote: Optional[str], local: str, dirname: str, options: StreamOptions,
          storage_options: Optional[dict]) -> OpenedStream:
    """Read one located stream's index (fetching it once per machine for a remote)."""
    fmt = get_format(options.format)
    if remote is not None:
        if os.path.isfile(local):
            raise NotADatasetError(
                f"local={local!r} is a file; with remote= it is the directory where the shards are cached (it is "
                "created if missing): give a directory, or leave local out to cache under SHARDSTREAM_CACHE_DIR")
        fetcher = Fetcher(join(remote, options.split), storage_options, options.download_retry,
                          options.download_timeout)
        shards = local_index(dirname, fetcher, fmt=fmt)
    else:
        fetcher, shards = None, fmt.read_shards(dirname)
    return OpenedStream(stream, remote, local, dirname, shards, fetcher, options)


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
