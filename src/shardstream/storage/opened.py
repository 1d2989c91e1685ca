"""An opened stream: where it lives, its shards, and the options and format it is read with."""

from __future__ import annotations

from typing import Any, Optional

from ..format.source import ShardFormat, get_format
from .fetch import Fetcher
from .options import StreamOptions


class OpenedStream:
    """An opened stream: where it lives, its shards, and the options and format it is read with.

    ``stream`` is the user's :class:`~shardstream.Stream` (None for a dataset given by
    ``remote=``/``local=``); ``remote`` is None when the dataset is read in place from ``local``;
    ``dirname`` is ``local``'s ``split`` directory, which holds the index and the shards;
    ``fetcher`` downloads from the remote (None without one).
    """

    def __init__(self, stream: Any, remote: Optional[str], local: str, dirname: str, shards: list,
                 fetcher: Optional[Fetcher], options: StreamOptions, fmt: Optional[ShardFormat] = None) -> None:
        self.stream = stream
        self.remote = remote
        self.local = local
        self.dirname = dirname
        self.shards = shards
        self.fetcher = fetcher
        self.options = options
        self.format = fmt if fmt is not None else get_format(options.format or "mds")
        self.samples = sum(s.samples for s in shards)

    def __repr__(self) -> str:
        return f"OpenedStream(remote={self.remote!r}, dirname={self.dirname!r}, shards={len(self.shards)})"
