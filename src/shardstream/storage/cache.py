"""The local shard cache: shared by every process on the machine, capped, crash-safe.

Per shard there is one empty lock file under ``<cache>/.shardstream/locks/``:

- a **reader** holds a shared lock while it uses the shard (a *pin*);
- a **downloader** first queues on the shard's download lock (``<name>.lock.dl``,
  exclusive: one downloader at a time), holding nothing on the shard itself, so it
  never waits behind processes that keep the shard pinned; then it holds the
  exclusive lock while it fetches, so each shard is downloaded once and the others
  wait for it;
- an **evictor** deletes a shard only if it gets the exclusive lock without
  waiting, so a shard in use is never deleted under a reader.

The kernel drops a dead process's locks, so ``kill -9`` leaves nothing to clean up;
its half-written temp files are removed by the next process that downloads or
evicts that shard. Access times for the least-recently-used order are the lock
files' modification times, so every process sees the same order.

With a ``limit``, room is made under one cache-wide lock (``.shardstream/cache.lock``):
the usage is scanned from the directory (shard files, plus in-progress downloads
counted at their full size), then the least recently used shards that nobody pins
are evicted. A download that may wait (prefetch) is skipped when no room can be
made; one that may not (the shard the training loop needs now) goes ahead, so the
cache exceeds the limit by at most one shard per process, and only when everything
else is in use. Shards of a dataset with no remote are never evicted, and nothing is
deleted from a directory without the marker that makes it a cache (see :mod:`.claim`).

With ``validate_hash``, a shard already in the cache is checked against its digest the
first time this process uses that file; one that fails is fetched again.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from ..errors import CacheLimitError, CorruptShardError, DownloadError, HashMismatchError, InvalidArgumentError
from ..format.atomic import TMP_PREFIX, remove_quietly, temp_name
from ..format.index import INDEX_BASENAME, ShardInfo, shard_path
from ..format.reader import ShardReader, open_shard
from .digests import CheckedFiles, check_hashes, identity
from .fetch import Fetcher
from .held import HeldShards
from .locks import FileLock, LockTimeout

META = ".shardstream"
MARKER = "cache.json"  # names the remote a cache directory caches (see claim.py)
_OVER = "over"  # a pin whose download went beyond the limit


class _Slot:
    """This process's hold on one shard: a reference count, the shared lock, the open reader."""

    __slots__ = ("mutex", "refs", "lock", "reader", "over")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.refs = 0
        self.lock: Optional[FileLock] = None
        self.reader: Optional[ShardReader] = None
        self.over = False  # downloaded beyond the limit: evicted as soon as this process is done with it


class ShardCache:
    """The shards of one dataset directory, downloaded on demand from ``fetcher``'s remote.

    ``fetcher`` None means the directory holds the only copy: nothing is downloaded or
    evicted. ``wait`` bounds how long a process waits for another one's download.
    """

    def __init__(self, dirname: str, shards: list[ShardInfo], fetcher: Optional[Fetcher] = None,
                 limit: Optional[int] = None, keep_zip: bool = False, validate_hash: Optional[str] = None,
                 wait: float = 600.0) -> None:
        self.dirname = dirname
        self.shards = shards
        self.fetcher = fetcher
        self.limit = limit
        self.keep_zip = keep_zip or fetcher is None
        self.validate_hash = validate_hash
        self.wait = wait
        self.meta = os.path.join(dirname, META)
        self._slots: dict[int, _Slot] = {}  # made on first use: start-up stays O(1) in the shards
        self._names = {}  # file path relative to dirname -> shard
        for i, s in enumerate(shards):
            self._names[s.raw_data.basename] = i
            if s.zip_data is not None:
                self._names[s.zip_data.basename] = i
        self._held = HeldShards(self)  # random-access pins kept for reuse
        self._checked = CheckedFiles(validate_hash)  # shard files this process found intact
        if limit is not None:
            self.check_limit(limit)

    def __getstate__(self) -> dict:  # a worker process starts with no pins of its own
        state = self.__dict__.copy()
        state["_slots"] = None
        state["_held"] = None
        state["_checked"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._slots = {}
        self._held = HeldShards(self)
        self._checked = CheckedFiles(self.validate_hash)

    # -- sizes ---------------------------------------------------------------------------
    def footprint(self, i: int) -> int:
        """Bytes shard ``i`` occupies at its peak (compressed and decompressed files together)."""
        s = self.shards[i]
        return s.raw_data.bytes + (s.zip_data.bytes if s.zip_data is not None and self.fetcher is not None else 0)

    def minimum_limit(self) -> int:
        """The smallest limit that streams without fetching a shard twice in a sequential pass: the
        largest shard in use plus the largest one arriving (with its compressed file, while decompressed)."""
        if not self.shards:
            return 0
        raw = max(s.raw_data.bytes for s in self.shards)
        return raw + max(self.footprint(i) for i in range(len(self.shards)))

    def check_limit(self, limit: int) -> None:
        need = self.minimum_limit()
        if limit < need:
            raise CacheLimitError(
                f"cache_limit={limit} bytes is too small: one shard in use plus the next one being downloaded "
                f"and decompressed need up to {need} bytes; raise cache_limit to at least {need} bytes (several "
                "times that for shuffled epochs, which read from several shards at a time)"
            )

    @property
    def evictable(self) -> bool:
        return self.fetcher is not None

    # -- paths ---------------------------------------------------------------------------
    def raw_path(self, i: int) -> str:
        return shard_path(self.dirname, self.shards[i].raw_data.basename)

    def _lock(self, i: int) -> FileLock:
        name = self.shards[i].raw_data.basename.replace("/", "%")
        return FileLock(os.path.join(self.meta, "locks", name + ".lock"))

    def present(self, i: int) -> bool:
        try:
            return os.stat(self.raw_path(i)).st_size == self.shards[i].raw_data.bytes
        except OSError:
            return False

    # -- pins ------------------------------------------------------------------------------
    def _slot(self, i: int) -> _Slot:
        slot = self._slots.get(i)
        return slot if slot is not None else self._slots.setdefault(i, _Slot())  # setdefault is atomic

    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        """Make shard ``i`` present and hold it against eviction until :meth:`unpin`.

        ``must=False`` gives up (returns False) when the limit leaves no room;
        ``blocking=False`` gives up when another process is downloading it.
        """
        slot = self._slot(i)
        with slot.mutex:
            if slot.refs:
                if slot.over and not must:
                    return False  # keep a shard held beyond the limit for as short as possible
                slot.refs += 1
                return True
            lock = self._lock(i)
            try:
                got = self._acquire(i, lock, must, blocking)
            except BaseException:
                lock.release()
                raise
            if not got:
                lock.release()
                return False
            lock.touch()
            slot.lock, slot.refs, slot.over = lock, 1, got == _OVER
            return True

    def add_ref(self, i: int) -> bool:
        """One more reference to a shard this process already holds within the limit (no I/O); False if
        it holds none."""
        slot = self._slot(i)
        with slot.mutex:
            if slot.refs and not slot.over:
                slot.refs += 1
                return True
            return False

    def unpin(self, i: int) -> None:
        slot = self._slot(i)
        with slot.mutex:
            if slot.refs <= 0:
                raise InvalidArgumentError(f"shard {i} is not pinned")
            slot.refs -= 1
            if slot.refs == 0:
                slot.reader = None  # the mapping goes when the last sample view of it does
                slot.lock.release()
                slot.lock = None
                if slot.over:
                    slot.over = False
                    self._repay(i)

    def over(self, i: int) -> bool:
        """Whether this process's pin on shard ``i`` went beyond the limit (it is evicted at unpin)."""
        return self._slot(i).over

    def reader(self, i: int) -> ShardReader:
        """The reader of pinned shard ``i``."""
        slot = self._slot(i)
        r = slot.reader
        if r is None:
            with slot.mutex:
                if slot.refs <= 0:
                    raise InvalidArgumentError(f"shard {i} must be pinned before it is read")
                if slot.reader is None:
                    slot.reader = open_shard(self.dirname, self.shards[i], None, keep_zip=True)
                r = slot.reader
        return r

    def hold(self, i: int, keep: int) -> ShardReader:
        """Pin shard ``i`` for random access, keeping recent such pins within the limit (see :mod:`.held`)."""
        return self._held.hold(i, keep)

    def release_held(self) -> None:
        self._held.release()

    def _acquire(self, i: int, lock: FileLock, must: bool, blocking: bool):
        """Take the shared lock on a present shard, downloading it first if needed.

        Returns False (gave up), True, or ``_OVER`` (downloaded beyond the limit)."""
        room, fetched, damaged = True, False, None
        if not must and self.limit is not None and self.present(i) and not self._fits():
            # Over the limit: a prefetch leaves present shards evictable rather than hold more (decided before
            # taking the lock, so that passing by never keeps an evictor from this shard).
            return False
        for _ in range(100):
            if not self._wait(lock, False, blocking, i):
                return False
            if self.present(i):
                damaged = self._damaged(i, fetched)
                if damaged is None:
                    if must and not fetched and self.limit is not None and not self._fits():
                        return _OVER  # held as over the limit, so it is evicted when the loop leaves it
                    return room
            elif self.fetcher is None and self.shards[i].zip_data is None:
                return True  # the reader reports the missing file with its path
            # Never wait for the exclusive lock while others may hold the shard for a long time: first
            # queue on the shard's download lock (one downloader at a time), with no lock on the shard.
            lock.release()
            downloading = FileLock(self._lock(i).path + ".dl")
            try:
                if not self._wait(downloading, True, blocking, i):
                    return False
                if self.present(i) and (damaged is None or identity(self.raw_path(i)) != damaged):
                    continue  # the previous downloader brought it (or replaced the damaged file)
                # only processes passing through (a present check, an eviction attempt) hold it now
                if not self._wait(lock, True, blocking, i):
                    return False
                present = self.present(i)
                if not present or identity(self.raw_path(i)) == damaged:
                    self._clear(i, keep_files=not present)  # a damaged file goes, with its compressed one
                    reservation = None
                    if self.limit is not None:
                        room, reservation = self._make_room(i, must)
                        if not room:
                            return False
                    self._materialise(i, reservation)
                    fetched = True
            finally:
                downloading.release()
            # back to shared at the top of the loop; another process may evict in between, so check again
        raise DownloadError(f"shard {i} ({self.shards[i].raw_data.basename}) kept disappearing after download; "
                            "the cache limit is far too small for the processes sharing it")

    def _wait(self, lock: FileLock, exclusive: bool, blocking: bool, i: int) -> bool:
        if not blocking:
            return lock.try_acquire(exclusive)
        try:
            lock.acquire(exclusive, self.wait)
        except LockTimeout as exc:
            raise DownloadError(
                f"waited {self.wait:g}s for shard {self.shards[i].raw_data.basename!r} in {self.dirname}: another "
                "process holds it (downloading, or evicting it)"
            ) from exc
        return True

    def _damaged(self, i: int, fetched: bool) -> Optional[tuple]:
        """The identity of shard ``i``'s file if it fails ``validate_hash`` and can be fetched again
        (called under a lock on it, once per process and file); None if it is intact or unchecked."""
        found = self._checked.mismatch(self.raw_path(i), self.shards[i].raw_data)
        if found is None:
            return None
        ident, got, want = found
        name = self.shards[i].raw_data.basename
        if fetched or self.fetcher is None or not self.is_cache:
            where = (f"even freshly downloaded from {self.fetcher.url(name)}; the remote copy is damaged or the "
                     "index belongs to another version of the dataset" if fetched else
                     f"and {self.dirname} holds its only copy; restore the file or rewrite the dataset")
            raise HashMismatchError(f"shard {name!r}: {self.validate_hash} digest is {got}, the index says "
                                    f"{want}, {where}")
        return ident

    @property
    def is_cache(self) -> bool:
        """Whether the directory is a remote's cache (its shards were downloaded there, and may be deleted)."""
        return os.path.exists(os.path.join(self.meta, MARKER))

    def _materialise(self, i: int, reservation: Optional[str] = None) -> None:
        """Download (and decompress) shard ``i``; called with its exclusive lock held. A file whose
        header does not match the index (damaged in transit, no digest to catch it) is fetched once more."""
        s = self.shards[i]
        reservation = reservation or self._reserve(i)
        try:
            for attempt in range(2):
                try:
                    if s.zip_data is not None:
                        zpath = shard_path(self.dirname, s.zip_data.basename)
                        if not _has_size(zpath, s.zip_data.bytes):
                            self._fetch(s.zip_data)
                        open_shard(self.dirname, s, None, keep_zip=self.keep_zip)  # validates, then writes raw
                    else:
                        self._fetch(s.raw_data)
                        open_shard(self.dirname, s, None)  # checks the header against the index
                    return
                except HashMismatchError:
                    raise  # the fetcher already fetched it twice
                except CorruptShardError:
                    if self.fetcher is None:
                        raise
                    self._clear(i, keep_files=False)  # never leave a damaged download in the cache
                    if attempt:
                        raise
        finally:
            remove_quietly(reservation)

    def _fetch(self, info) -> None:
        if self.fetcher is None:
            return
        self.fetcher.fetch(info.basename, shard_path(self.dirname, info.basename), info.bytes,
                           check_hashes(info.hashes, self.validate_hash))

    def _reserve(self, i: int) -> str:
        """An empty temp file that makes every usage scan count shard ``i`` at its full footprint."""
        path = temp_name(self.raw_path(i))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").close()
        return path

    # -- usage and eviction ----------------------------------------------------------------
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
            if rel == INDEX_BASENAME:
                other += size
        for j in busy:
            files[j] = max(files.get(j, 0), self.footprint(j))
        return other + sum(files.values()), files

    def usage(self) -> int:
        return self.scan()[0]

    def _coldest_first(self, per_shard: dict[int, int]) -> list[int]:
        def atime(i: int) -> float:
            try:
                return os.stat(self._lock(i).path).st_mtime_ns
            except OSError:
                return 0

        return sorted(per_shard, key=atime)

    def _make_room(self, i: int, must: bool) -> tuple[object, Optional[str]]:
        """Evict least recently used unpinned shards until shard ``i`` fits, then reserve its space
        (under the cache-wide lock, so every other process's scan sees it). Returns (True, reservation),
        (False, None) when it does not fit and ``must`` is False, or (_OVER, reservation)."""
        need = self.footprint(i)
        with self._cache_lock():
            used, per_shard = self.scan()
            room = used + need <= self.limit
            if not room:
                per_shard.pop(i, None)
                for j in self._coldest_first(per_shard):
                    if self._try_evict(j):
                        used -= per_shard[j]
                        if used + need <= self.limit:
                            room = True
                            break
            if not room and not must:
                return False, None
            return (True if room else _OVER), self._reserve(i)

    def _cache_lock(self) -> FileLock:
        lock = FileLock(os.path.join(self.meta, "cache.lock"))
        lock.acquire(True, self.wait)
        return lock

    def _fits(self) -> bool:
        """Whether the cache is within its limit now (a prefetch may then hold one more present shard)."""
        return self.limit is None or self.scan()[0] <= self.limit

    def _repay(self, i: int) -> None:
        """Evict shard ``i``, which went beyond the limit, if the cache is still over it."""
        with self._cache_lock():
            if self.scan()[0] > self.limit:
                self._try_evict(i)

    def _try_evict(self, j: int) -> bool:
        return self.evictable and self._try_evict_local(j)

    def _try_evict_local(self, j: int) -> bool:
        """Delete shard ``j``'s files if no process holds it (also for stale copies of a changed dataset),
        and only from a cache directory: a file the cache did not download is never deleted."""
        if not self.is_cache:
            return False
        lock = self._lock(j)
        try:
            if not lock.try_acquire(True):
                return False
            self._clear(j, keep_files=False)
            return True
        finally:
            lock.release()

    def _clear(self, i: int, keep_files: bool) -> None:
        """Delete shard ``i``'s temp files (left by a dead process) and, unless ``keep_files``, its files."""
        s = self.shards[i]
        infos = [s.raw_data] + ([s.zip_data] if s.zip_data is not None else [])
        for info in infos:
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

    def evict(self, i: int) -> bool:
        """Delete shard ``i`` unless a process is using it; True if it is gone."""
        if not self.evictable:
            raise InvalidArgumentError(
                f"shard {i} cannot be evicted: this dataset has no remote, so {self.dirname} holds its only copy"
            )
        return self._try_evict(i)

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used shard that no process is using; its index, or None."""
        if not self.evictable:
            return None
        _, per_shard = self.scan()
        for j in self._coldest_first(per_shard):
            if self._try_evict(j):
                return j
        return None


def _has_size(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False


def _walk(root: str, rel: str = ""):
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
