"""What identifies each remote file of a dataset, so that a file rewritten during a run is refused
instead of read as if the index described it.

An index with digests catches any changed shard on download, and its shards are checked by
digest alone. One without (``hashes=[]``) cannot, so every download of a shard it gives no
digest of is followed by one metadata request (size, ETag or
version, modification time: whatever the store gives) and the download is refused with
:class:`~shardstream.errors.RemoteChangedError` when

- the file differs from what this cache recorded when it first downloaded it (a shard
  fetched again after eviction), or from the size the index gives; or
- it was modified after this machine read the index (by the store's clock, against this
  machine's, allowing :data:`CLOCK_ALLOWANCE_S` for skew), or after the index itself was
  written, whichever is later. A dataset copied file by file in any order (``aws s3 sync``
  uploads ``index.json`` before the shards) is not mistaken for a changed one.

A store that gives only sizes is checked by size alone. The records live under
``<cache>/.shardstream/remote/`` and are dropped whenever the index is fetched again; a
refusal also drops the cached index's record, so the next run reads the index again.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import os
import shutil
from typing import Optional

from ..errors import RemoteChangedError
from ..format.atomic import atomic_write, read_json, remove_quietly

CLOCK_ALLOWANCE_S = 2.0
_IDENTITY = {"ETag": "etag", "etag": "etag", "VersionId": "version", "generation": "generation", "md5Hash": "md5"}
_TIMES = ("LastModified", "Last-Modified", "last_modified", "updated", "mtime")


def object_signature(info: dict) -> dict:
    """What identifies a remote object's current version, from fsspec's ``info``: ``size`` and, where
    the store gives them, ``etag`` / ``version`` / ``generation`` / ``md5`` and ``modified`` (a
    timestamp)."""
    sig: dict = {"size": info.get("size")}
    for key, name in _IDENTITY.items():
        if info.get(key) is not None:
            sig[name] = str(info[key])
    for key in _TIMES:
        when = _timestamp(info.get(key))
        if when is not None:
            sig["modified"] = when
            break
    return sig


def _timestamp(value) -> Optional[float]:
    """Seconds since the epoch from a datetime, an HTTP date, an ISO 8601 string or a number."""
    try:
        if isinstance(value, datetime.datetime):
            return (value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)).timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value:
            if value[:1].isdigit():
                return _timestamp(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
            return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError):
        pass
    return None


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class RemoteVersions:
    """The first-seen signatures of one cached dataset's remote files (see the module docstring).

    ``opened``: when this machine read the index (its clock); ``index_modified``: the index's
    modification time by the store's clock, if known."""

    def __init__(self, meta: str, opened: float, index_modified: Optional[float]) -> None:
        self.dir = os.path.join(meta, "remote")  # see forget()
        self.index_record = os.path.join(meta, "index.source.json")
        self.opened = opened
        self.after = max(opened + CLOCK_ALLOWANCE_S, index_modified or 0.0)

    def check(self, basename: str, url: str, info: dict, size: Optional[int]) -> None:
        """Refuse a download of ``basename`` whose remote file changed; else record it when first seen.
        Called with the file's exclusive cache lock held."""
        now = object_signature(info)
        path = os.path.join(self.dir, basename.replace("/", "%") + ".json")
        first = read_json(path)
        changes = [f"its {key} is {now[key]!r} where it was {first[key]!r} when this cache first downloaded it"
                   for key in ("size", "etag", "version", "generation", "md5", "modified")
                   if first and now.get(key) is not None and first.get(key) is not None and now[key] != first[key]]
        if size is not None and now.get("size") is not None and now["size"] != size:
            changes.append(f"it has {now['size']} bytes where the index says {size}")
        if now.get("modified") is not None and now["modified"] > self.after:
            changes.append(f"it was modified at {_when(now['modified'])}, after this machine read the index "
                           f"(at {_when(self.opened)})")
        if changes:
            remove_quietly(self.index_record)  # the next run reads the index again and drops the old cached files
            raise RemoteChangedError(
                f"{basename!r} at {url} changed after this job read the dataset's index: {'; '.join(changes)}. Its "
                "samples may not be the ones the index describes, so it is not read. Restart the job: it reads "
                "the index again and drops the cached files of the old version. A dataset written with "
                "hashes=['xxh3_64'] (or any digest) has every shard checked against the index on download"
            )
        if first is None and len(now) > 1:
            os.makedirs(self.dir, exist_ok=True)
            atomic_write(path, json.dumps(now).encode(), fsync=False)



def forget(meta: str) -> None:
    """Drop every record of the cache whose metadata directory is ``meta`` (its index was fetched
    again: the files are those of a new version)."""
    shutil.rmtree(os.path.join(meta, "remote"), ignore_errors=True)
