"""Getting a remote dataset's ``index.json`` into the cache, once per machine.

The first process on a machine fetches it under an exclusive lock; the others wait
and read the local copy. The remote file's size and ETag (or modification time) are
recorded beside it; a later run that finds them changed fetches the index again and
evicts the cached shards whose entries changed or record no digest, so a dataset
rewritten in place is never read through stale shards. Shards downloaded afterwards are
checked against the version read (see :mod:`.versions`): a dataset rewritten during a
run is refused with :class:`~shardstream.errors.RemoteChangedError`, not read.
"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

from ..errors import CorruptIndexError, DownloadError, IndexNotFoundError, NotADatasetError
from ..format.atomic import atomic_write, read_json
from ..format.index import INDEX_BASENAME, ShardInfo, loads_index, not_a_dataset, read_index
from .cache import META, ShardCache
from .claim import RECORD, claim
from .fetch import Fetcher
from .locks import FileLock
from .versions import RemoteVersions, forget, object_signature


def _signature(fetcher: Fetcher) -> Optional[dict]:
    """What identifies the remote index's current version, from one metadata request (None if unknown)."""
    try:
        info = fetcher.fs.info(f"{fetcher.root}/{INDEX_BASENAME}" if fetcher.root else INDEX_BASENAME)
    except NotADirectoryError:
        raise NotADatasetError(not_a_dataset(fetcher.remote)) from None
    except FileNotFoundError:
        if _is_file(fetcher):
            raise NotADatasetError(not_a_dataset(fetcher.remote)) from None
        raise IndexNotFoundError(
            f"no {INDEX_BASENAME} at {fetcher.url(INDEX_BASENAME)}; is remote= the dataset directory "
            "(or does it need split=...)?"
        ) from None
    except Exception:  # a store without metadata requests: fall back to the cached copy
        return None
    return {"url": fetcher.url(INDEX_BASENAME), **object_signature(info)}


def _is_file(fetcher: Fetcher) -> bool:
    """Whether the remote dataset location is itself a file (asked only once the index is missing)."""
    try:
        return bool(fetcher.root) and fetcher.fs.isfile(fetcher.root)
    except Exception:  # a store that cannot tell: report the missing index
        return False


def local_index(dirname: str, fetcher: Fetcher, wait: float = 600.0) -> list[ShardInfo]:
    """The shards of the remote dataset behind ``fetcher``, with ``index.json`` cached in ``dirname``
    (which must be empty, new, or already this remote's cache: see :mod:`.claim`). From then on
    ``fetcher`` checks every shard it downloads against this version (see :mod:`.versions`)."""
    meta = os.path.join(dirname, META)
    record_path = os.path.join(meta, RECORD)
    sig = _signature(fetcher)
    adopted = claim(dirname, fetcher)  # before anything is written into dirname
    with FileLock(os.path.join(meta, "index.lock")) as lock:
        lock.acquire(True, wait)
        cached = os.path.exists(os.path.join(dirname, INDEX_BASENAME))
        record = read_json(record_path) or {}
        current = "opened" in record and (sig is None or record.get("signature") == sig)
        if cached and (current or (adopted and sig is not None)):
            shards = read_index(dirname)  # adopted: its index.json is the remote's current one, so keep its shards
        else:
            shards = _refresh(dirname, fetcher, sig, cached)
        if not (cached and current):
            record = {"signature": sig, "opened": time.time()}
            forget(meta)
            atomic_write(record_path, json.dumps(record).encode(), fsync=False)
        fetcher.versions = RemoteVersions(meta, record["opened"], (sig or {}).get("modified"))
        return shards


def _refresh(dirname: str, fetcher: Fetcher, sig: Optional[dict], cached: bool) -> list[ShardInfo]:
    """Fetch the index again, evicting the cached shards it no longer vouches for."""
    previous = read_index(dirname) if cached else None
    tmp = os.path.join(dirname, META, "index.fetch")
    try:
        shards = _fetch_index(fetcher, tmp)
    except DownloadError:
        if previous is not None and sig is None:
            return previous  # the store is unreachable and cannot tell us the index changed
        raise
    if previous is not None:
        _evict_changed(dirname, previous, shards)
    os.replace(tmp, os.path.join(dirname, INDEX_BASENAME))
    return shards


def _fetch_index(fetcher: Fetcher, tmp: str) -> list[ShardInfo]:
    """Fetch and parse the index into ``tmp``; one that arrives damaged (not an index) is fetched once more."""
    for attempt in range(2):
        fetcher.fetch(INDEX_BASENAME, tmp)
        with open(tmp, "rb") as f:
            text = f.read()
        try:
            return loads_index(text, fetcher.url(INDEX_BASENAME))
        except CorruptIndexError:
            os.unlink(tmp)
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _evict_changed(dirname: str, old: list[ShardInfo], new: list[ShardInfo]) -> None:
    """Delete cached shards whose index entries differ between ``old`` and ``new``, and those whose
    entries record no digest (a shard rewritten with the same size would look unchanged)."""
    by_name = {s.raw_data.basename: s for s in new}
    stale = [s for s in old if by_name.get(s.raw_data.basename) != s or not s.stored.hashes]
    if not stale:
        return
    cache = ShardCache(dirname, stale, fetcher=None)
    for i in range(len(stale)):
        if not cache._try_evict_local(i):
            raise DownloadError(
                f"the dataset at {dirname} changed on the remote, but a process still uses cached shard "
                f"{stale[i].raw_data.basename!r} of the old version; stop it, or give this run its own local="
            )
