"""Getting a remote dataset's index file (``index.json`` for MDS) into the cache, once per machine.

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
from ..format.index import not_a_dataset
from ..format.source import ShardFormat, get_format
from .claim import META, RECORD, claim
from .eviction import CacheSpace
from .failures import permanent
from .fetch import Fetcher
from .locks import FileLock
from .versions import RemoteVersions, forget, object_signature


def _signature(fetcher: Fetcher, name: str) -> Optional[dict]:
    """What identifies the remote index file ``name``'s current version, from one metadata request
    (None if the store has no metadata requests). A store that cannot be reached or refuses the credentials
    raises :class:`DownloadError` within ``download_timeout`` x ``download_retry`` + 1 attempts."""
    try:
        info = fetcher.request("info", name, keep=(FileNotFoundError, NotADirectoryError, NotImplementedError,
                                                   AttributeError, TypeError))
    except NotADirectoryError:
        raise NotADatasetError(not_a_dataset(fetcher.remote)) from None
    except FileNotFoundError:
        if _is_file(fetcher):
            raise NotADatasetError(not_a_dataset(fetcher.remote)) from None
        raise IndexNotFoundError(
            f"no {name} at {fetcher.url(name)} (No such file or directory); is remote= the dataset directory "
            "(or does it need split=...)?"
        ) from None
    except (NotImplementedError, AttributeError, TypeError):  # a store without metadata requests
        return None
    return {"url": fetcher.url(name), **object_signature(info)}


def _is_file(fetcher: Fetcher) -> bool:
    """Whether the remote dataset location is itself a file (asked only once the index is missing)."""
    try:
        return bool(fetcher.root) and fetcher.request("isfile", "")
    except Exception:  # a store that cannot tell: report the missing index
        return False


def _offline_signature(fetcher: Fetcher, dirname: str, fmt: ShardFormat) -> Optional[dict]:
    """:func:`_signature`, or None where the store cannot be reached but this machine holds the index from an
    earlier run (it is then read as it is: the store cannot say that it changed)."""
    try:
        return _signature(fetcher, fmt.index_name)
    except DownloadError as exc:
        cached = os.path.exists(os.path.join(dirname, fmt.index_name))
        if cached and "opened" in (read_json(os.path.join(dirname, META, RECORD)) or {}) \
                and permanent(exc.__cause__) is None:
            return None
        raise


def local_index(dirname: str, fetcher: Fetcher, wait: float = 600.0, fmt: Optional[ShardFormat] = None) -> list:
    """The shards of the remote dataset behind ``fetcher`` (of format ``fmt``, default MDS), with its
    index file cached in ``dirname`` (which must be empty, new, or already this remote's cache: see
    :mod:`.claim`). From then on ``fetcher`` checks every shard it downloads against this version
    (see :mod:`.versions`)."""
    fmt = get_format("mds") if fmt is None else fmt
    meta = os.path.join(dirname, META)
    record_path = os.path.join(meta, RECORD)
    sig = _offline_signature(fetcher, dirname, fmt)
    adopted = claim(dirname, fetcher, fmt)  # before anything is written into dirname
    with FileLock(os.path.join(meta, "index.lock")) as lock:
        lock.acquire(True, wait)
        cached = os.path.exists(os.path.join(dirname, fmt.index_name))
        record = read_json(record_path) or {}
        current = "opened" in record and (sig is None or record.get("signature") == sig)
        if cached and (current or (adopted and sig is not None)):
            shards = fmt.read_shards(dirname)  # adopted: its index is the remote's current one, so keep its shards
        else:
            shards = _refresh(dirname, fetcher, sig, cached, fmt)
        if not (cached and current):
            record = {"signature": sig, "opened": time.time()}
            forget(meta)
            atomic_write(record_path, json.dumps(record).encode(), fsync=False)
        fetcher.versions = RemoteVersions(meta, record["opened"], (sig or {}).get("modified"))
        return shards


def _refresh(dirname: str, fetcher: Fetcher, sig: Optional[dict], cached: bool, fmt: ShardFormat) -> list:
    """Fetch the index again, evicting the cached shards it no longer vouches for."""
    previous = fmt.read_shards(dirname) if cached else None
    tmp = os.path.join(dirname, META, "index.fetch")
    try:
        shards = _fetch_index(fetcher, tmp, fmt)
    except DownloadError:
        if previous is not None and sig is None:
            return previous  # the store is unreachable and cannot tell us the index changed
        raise
    if previous is not None:
        _evict_changed(dirname, previous, shards, fmt)
    os.replace(tmp, os.path.join(dirname, fmt.index_name))
    return shards


def _fetch_index(fetcher: Fetcher, tmp: str, fmt: ShardFormat) -> list:
    """Fetch and parse the index into ``tmp``; one that arrives damaged (not an index) is fetched once more."""
    for attempt in range(2):
        fetcher.fetch(fmt.index_name, tmp)
        with open(tmp, "rb") as f:
            text = f.read()
        try:
            return fmt.parse_index(text, fetcher.url(fmt.index_name))
        except CorruptIndexError:
            os.unlink(tmp)
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _evict_changed(dirname: str, old: list, new: list, fmt: ShardFormat) -> None:
    """Delete cached shards whose index entries differ between ``old`` and ``new``, and those whose
    downloaded files record no digest (a shard rewritten with the same size would look unchanged)."""
    by_name = {fmt.resident_file(s).basename: s for s in new}
    stale = [s for s in old if by_name.get(fmt.resident_file(s).basename) != s
             or not all(f.hashes for f in fmt.fetched_files(s))]
    if not stale:
        return
    space = CacheSpace(dirname, stale, fmt)
    for i, s in enumerate(stale):
        if not space.try_evict(i):
            raise DownloadError(
                f"the dataset at {dirname} changed on the remote, but a process still uses cached shard "
                f"{fmt.resident_file(s).basename!r} of the old version; stop it, or give this run its own local="
            )
