"""A remote with no index file, and a ``local=`` directory that already holds a whole dataset.

mosaicml-streaming reads ``local``'s index whenever it is there, without asking the remote. shardstream
asks the remote first, so that a cache is never read in place of a dataset rewritten on the remote
(see docs/storage.md). When the remote answers that it holds no index file at all, there is no newer
version to miss: the dataset in ``local`` is read as it is, in place, with a warning, provided it is
complete (its index and, for every shard, its files) and is not the cache of another remote. It is then
read as a local dataset: nothing is downloaded into the directory and nothing in it is ever evicted.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Optional

from ..errors import CorruptIndexError, IndexNotFoundError
from ..format.source import ShardFormat
from .claim import cache_owner, same_remote
from .fetch import Fetcher


def local_copy(dirname: str, fetcher: Fetcher, fmt: ShardFormat, missing: IndexNotFoundError) -> Optional[list]:
    """The shards of the whole dataset in ``dirname``, read in place because ``fetcher``'s remote has no
    index file (``missing`` says so); None where ``dirname`` holds no such dataset, or another remote's cache."""
    if not fmt.index_name or not os.path.isfile(os.path.join(dirname, fmt.index_name)):
        return None
    owner = cache_owner(dirname)
    if owner is not None and not same_remote(owner, fetcher.remote):
        return None  # the cache of another remote: claim() refuses it once the remote has an index
    try:
        shards = fmt.read_shards(dirname)
    except (CorruptIndexError, IndexNotFoundError):
        return None
    if not all(_present(dirname, fmt, s) for s in shards):
        return None
    _warn_caller(
        f"{missing} The remote holds no index, so the whole dataset already in {dirname} is read as it is, in "
        "place, as mosaicml-streaming does: nothing is downloaded or evicted, and it is not checked against the "
        "remote. Give remote= the directory that holds index.json to stream from it")
    return shards


def _present(dirname: str, fmt: ShardFormat, shard) -> bool:
    """Whether the shard's readable file, or every file it is made from, is in ``dirname`` at its size."""
    def there(f) -> bool:
        try:
            return os.path.getsize(os.path.join(dirname, f.basename)) == f.bytes
        except OSError:
            return False
    fetched = [f for f in fmt.owned_files(shard) if f.basename != fmt.resident_file(shard).basename]
    return there(fmt.resident_file(shard)) or (bool(fetched) and all(there(f) for f in fetched))


def _warn_caller(message: str) -> None:
    """A UserWarning attributed to the first frame outside the shardstream package (the user's line)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 2  # level 1 is this function
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
