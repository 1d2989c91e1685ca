"""A cache directory's usage and eviction: what its shards take on disk, in which order they go, and
how room is made for a download under a limit.

What :class:`CacheSpace` promises:

- **Usage** is read from the directory itself, so every process sees the same number: the
  files each shard owns (:meth:`~shardstream.format.source.ShardFormat.owned_files`), plus the
  index file; a shard with a download in progress (a temp file of one of its files, or a
  reservation) counts at its full peak footprint from the start. The cache's own metadata
  folder (``.shardstream``) is not counted.
- **Order**: least recently used first, by the modification time of each shard's lock file
  (touched by every pin), so every process sees the same order.
- **A shard is deleted only if nobody holds it**: :meth:`CacheSpace.try_evict` takes the
  shard's exclusive lock *without waiting*; a reader's shared lock (a pin) or a download
  in progress makes it give up. It deletes nothing from a directory without the marker that
  makes it a cache (see :mod:`.claim`), so local-only data is never deleted.
- **Room** for a download is made under the cache-wide lock (``.shardstream/cache.lock``,
  exclusive, waited for up to ``wait`` seconds): the usage is scanned, the coldest unheld
  shards are evicted until the new one fits, and an empty reservation file is written so
  that every other process's scan counts the new shard at its full footprint at once. The
  caller deletes the reservation once the download is done (or failed).
- **Repaying**: a shard downloaded beyond the limit is evicted when its process is done with
  it, if the cache is still over the limit then (also under the cache-wide lock).

Locks taken: the cache-wide lock by :meth:`~CacheSpace.make_room` and :meth:`~CacheSpace.repay`;
a shard's own lock, exclusively and without waiting, by :meth:`~CacheSpace.try_evict` (and so by
everything that evicts). :meth:`~CacheSpace.clear` takes none: its caller holds the shard's
exclusive lock.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

from ..format.atomic import TMP_PREFIX, remove_quietly, temp_name
from ..format.index import shard_path
from ..format.source import ShardFormat
from ..stats import record
from .claim import MARKER, META
from .locks import FileLock


class CacheSpace:
    """Usage and eviction of ``shards`` (of format ``fmt``) in the cache directory ``dirname``.

    ``fetched``: whether shards arrive by download (their downloaded files then count in their
    peak footprint); ``wait``: seconds to wait for the cache-wide lock.
    """

    def __init__(self, dirname: str, shards: list, fmt: ShardFormat, fetched: bool = True,
                 wait: float = 600.0) -> None:
        self.dirname = dirname
        self.shards = shards
        self.format = fmt
        self.fetched = fetched
        self.wait = wait
        self.meta = os.path.join(dirname, META)
        self._names: dict[str, int] = {}  # file path relative to dirname -> shard
        for i, s in enumerate(shards):
            for info in fmt.owned_files(s):
                self._names[info.basename] = i

    # -- a shard's files and lock ------------------------------------------------------------
    def footprint(self, i: int) -> int:
        """Bytes shard ``i`` takes at its peak in this directory."""
        return self.format.footprint(self.shards[i], fetched=self.fetched)

    def lock(self, i: int) -> FileLock:
        """Shard ``i``'s lock (not taken): readers hold it shared, downloads and evictions exclusively."""
        name = self.format.resident_file(self.shards[i]).basename.replace("/", "%")
        return FileLock(os.path.join(self.meta, "locks", name + ".lock"))

    @property
    def is_cache(self) -> bool:
        """Whether the directory is a remote's cache (its shards were downloaded there, and may be deleted)."""
        return os.path.exists(os.path.join(self.meta, MARKER))

    def reserve(self, i: int) -> str:
        """An empty temp file that makes every usage scan count shard ``i`` at its full footprint."""
        path = temp_name(shard_path(self.dirname, self.format.resident_file(self.shards[i]).basename))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").close()
        return path

    def clear(self, i: int, keep_files: bool) -> None:
        """Delete shard ``i``'s temp files (left by a dead process) and, unless ``keep_files``, its
        files. The caller holds the shard's exclusive lock."""
        for info in self.format.owned_files(self.shards[i]):
            path = shard_path(self.dirname, info.basename)
            head, tail = os.path.split(path)
            try:
                names = [n for n in os.listdir(head) if n.startswith(f"{TMP_PREFIX}{tail}.")]
            except OSError:
                names = []
            for n in names:
                remove_quietly(os.path.join(head, n))
            if not keep_files:
                remove_quietly(path)

    # -- usage -------------------------------------------------------------------------------
    def scan(self) -> tuple[int, dict[int, int]]:
        """(bytes used, {shard: bytes}) from the directory; in-progress downloads count in full."""
        files: dict[int, int] = {}
        busy: set[int] = set()
        other = 0
        for rel, size in _walk(self.dirname):
            i = self._names.get(rel)
            if i is not None:
                files[i] = files.get(i, 0) + size
                continue
            head, _, tail = rel.rpartition("/")
            if tail.startswith(TMP_PREFIX):
                base = tail[len(TMP_PREFIX):].rsplit(".", 2)[0]
                j = self._names.get(f"{head}/{base}" if head else base)
                if j is not None:
                    busy.add(j)
                    continue
            if rel == self.format.index_name:
                other += size
        for j in busy:
            files[j] = max(files.get(j, 0), self.footprint(j))
        return other + sum(files.values()), files

    def usage(self) -> int:
        return self.scan()[0]

    def fits(self, limit: Optional[int]) -> bool:
        """Whether the cache is within ``limit`` now (None: no limit)."""
        return limit is None or self.usage() <= limit

    def coldest_first(self, per_shard: dict[int, int]) -> list[int]:
        """The shards of ``per_shard``, least recently used first."""
        def atime(i: int) -> float:
            try:
                return os.stat(self.lock(i).path).st_mtime_ns
            except OSError:
                return 0

        return sorted(per_shard, key=atime)

    # -- eviction ----------------------------------------------------------------------------
    def try_evict(self, j: int) -> bool:
        """Delete shard ``j``'s files if no process holds it (also for stale copies of a changed dataset),
        and only from a cache directory: a file the cache did not download is never deleted."""
        if not self.is_cache:
            return False
        lock = self.lock(j)
        try:
            if not lock.try_acquire(True):
                return False
            self.clear(j, keep_files=False)
            if record.ON:
                record.add_count("evictions")
            return True
        finally:
            lock.release()

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used shard that no process holds; its index, or None."""
        _, per_shard = self.scan()
        for j in self.coldest_first(per_shard):
            if self.try_evict(j):
                return j
        return None

    def make_room(self, i: int, limit: int, must: bool) -> tuple[bool, Optional[str]]:
        """Evict least recently used unheld shards until shard ``i`` fits under ``limit``, then reserve
        its space. Returns ``(fits, reservation)``; the reservation is None (nothing reserved) when it
        does not fit and ``must`` is False, else the file the caller deletes after the download."""
        need = self.footprint(i)
        with self._cache_lock():
            used, per_shard = self.scan()
            room = used + need <= limit
            if not room:
                per_shard.pop(i, None)
                for j in self.coldest_first(per_shard):
                    if self.try_evict(j):
                        used -= per_shard[j]
                        if used + need <= limit:
                            room = True
                            break
            if not room and not must:
                return False, None
            return room, self.reserve(i)

    def repay(self, i: int, limit: int) -> None:
        """Evict shard ``i``, which went beyond ``limit``, if the cache is still over it."""
        with self._cache_lock():
            if self.usage() > limit:
                self.try_evict(i)

    def _cache_lock(self) -> FileLock:
        lock = FileLock(os.path.join(self.meta, "cache.lock"))
        lock.acquire(True, self.wait)
        return lock


def _walk(root: str, rel: str = "") -> Iterator[tuple[str, int]]:
    """(relative path, size) of every file under ``root``, skipping the cache's own metadata."""
    try:
        entries = list(os.scandir(os.path.join(root, rel) if rel else root))
    except OSError:
        return
    for e in entries:
        name = f"{rel}/{e.name}" if rel else e.name
        try:
            if e.is_dir(follow_symlinks=False):
                if name != META:
                    yield from _walk(root, name)
            elif e.is_file(follow_symlinks=False):
                yield name, e.stat(follow_symlinks=False).st_size
        except OSError:  # deleted while we looked
            continue
