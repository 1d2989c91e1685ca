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

A shard's files are its format's (:mod:`shardstream.format.source`): a download fetches
its ``fetched_files``, then runs the format's ``prepare`` once (MDS decompresses there and
checks the header); the shard is present when its ``resident_file`` is there at its size,
and is read through the format's ``open``.

With a ``limit``, room is made under one cache-wide lock (see :mod:`.eviction`, which keeps
the usage, the least-recently-used order and the deletions). A download that may wait
(prefetch) is skipped when no room can be made; one that may not (the shard the training
loop needs now) goes ahead, so the cache exceeds the limit by at most one shard per process,
and only when everything else is in use. Shards of a dataset with no remote are never
evicted, and nothing is deleted from a directory without the marker that makes it a cache
(see :mod:`.claim`).

With ``validate_hash``, a shard already in the cache is checked against its digest the
first time this process uses that file; one that fails is fetched again.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from ..errors import CorruptShardError, DownloadError, HashMismatchError, InvalidArgumentError
from ..format.atomic import remove_quietly
from ..format.index import shard_path
from ..format.source import ShardFormat, ShardRows, get_format
from ..stats import record
from .budget import check_limit, minimum_limit
from .digests import CheckedFiles, check_hashes, identity
from .eviction import CacheSpace
from .fetch import Fetcher
from .held import HeldShards
from .locks import FileLock, LockTimeout

_OVER = "over"  # a pin whose download went beyond the limit


class _Slot:
    """This process's hold on one shard: a reference count, the shared lock, the open reader."""

    __slots__ = ("mutex", "refs", "lock", "reader", "over")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.refs = 0
        self.lock: Optional[FileLock] = None
        self.reader: Optional[ShardRows] = None
        self.over = False  # downloaded beyond the limit: evicted as soon as this process is done with it


class ShardCache:
    """The shards of one dataset directory, downloaded on demand from ``fetcher``'s remote and
    read through ``format`` (default: MDS). One of the stores of :mod:`.store`.

    ``fetcher`` None means the directory holds the only copy: nothing is downloaded or evicted
    (and ``limit`` does not apply). ``limit`` caps the bytes in the directory (refused with
    :class:`~shardstream.errors.CacheLimitError` below the minimum that streams the dataset).
    ``wait`` bounds how long a process waits for another one's download.
    """

    def __init__(self, dirname: str, shards: list, fetcher: Optional[Fetcher] = None,
                 limit: Optional[int] = None, keep_zip: bool = False, validate_hash: Optional[str] = None,
                 wait: float = 600.0, format: Optional[ShardFormat] = None) -> None:
        self.dirname = dirname
        self.shards = shards
        self.fetcher = fetcher
        self.format = get_format("mds" if format is None else format)
        self.limit = limit if fetcher is not None else None
        self.keep_zip = keep_zip or fetcher is None
        self.validate_hash = validate_hash
        self.wait = wait
        self.space = CacheSpace(dirname, shards, self.format, fetched=fetcher is not None, wait=wait)
        self._slots: dict[int, _Slot] = {}  # made on first use: start-up stays O(1) in the shards
        self._held = HeldShards(self)  # random-access pins kept for reuse
        self._checked = CheckedFiles(validate_hash)  # shard files this process found intact
        if self.limit is not None:
            self.check_limit(self.limit)

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
        """Bytes shard ``i`` occupies at its peak (its downloaded and resident files together)."""
        return self.space.footprint(i)

    def minimum_limit(self) -> int:
        """The smallest limit that streams without fetching a shard twice in a sequential pass (see
        :func:`~shardstream.storage.budget.minimum_limit`)."""
        fmt = self.format
        return minimum_limit([fmt.resident_file(s).bytes for s in self.shards],
                             [self.footprint(i) for i in range(len(self.shards))])

    def check_limit(self, limit: int) -> None:
        """Refuse a ``limit`` below :meth:`minimum_limit` with :class:`~shardstream.errors.CacheLimitError`."""
        check_limit(limit, self.minimum_limit())

    def fixed_bytes(self) -> int:
        """Bytes counted against the limit besides the shards: the cached index file."""
        if not self.evictable or not self.format.index_name:
            return 0
        try:
            return os.path.getsize(os.path.join(self.dirname, self.format.index_name))
        except OSError:
            return 0

    @property
    def evictable(self) -> bool:
        return self.fetcher is not None

    @property
    def is_cache(self) -> bool:
        """Whether the directory is a remote's cache (its shards were downloaded there, and may be deleted)."""
        return self.space.is_cache

    # -- paths ---------------------------------------------------------------------------
    def resident_path(self, i: int) -> str:
        return shard_path(self.dirname, self.format.resident_file(self.shards[i]).basename)

    def present(self, i: int) -> bool:
        """Whether shard ``i`` is readable: its resident file is there at its size."""
        try:
            return os.stat(self.resident_path(i)).st_size == self.format.resident_file(self.shards[i]).bytes
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
            lock = self.space.lock(i)
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
        deleted = False
        with slot.mutex:
            if slot.refs <= 0:
                raise InvalidArgumentError(f"shard {i} is not pinned")
            slot.refs -= 1
            if slot.refs == 0:
                slot.reader = None  # the mapping goes when the last sample view of it does
                # held under a shared lock, the file cannot have been evicted: someone deleted it by hand
                deleted = self.fetcher is not None and not slot.over and not self.present(i)
                slot.lock.release()
                slot.lock = None
                if slot.over:
                    slot.over = False
                    self.space.repay(i, self.limit)
        if deleted:
            self._restore(i)

    def _restore(self, i: int) -> None:
        """Fetch again a shard whose cached file was deleted while this process read it (from its mapping),
        as mosaicml-streaming fetches a shard found missing on read; only if the limit leaves room."""
        if self.pin(i, must=False, blocking=False):
            self.unpin(i)  # present now, so this unpin fetches nothing

    def over(self, i: int) -> bool:
        """Whether this process's pin on shard ``i`` went beyond the limit (it is evicted at unpin)."""
        return self._slot(i).over

    def reader(self, i: int) -> ShardRows:
        """The reader of pinned shard ``i``."""
        slot = self._slot(i)
        r = slot.reader
        if r is None:
            with slot.mutex:
                if slot.refs <= 0:
                    raise InvalidArgumentError(f"shard {i} must be pinned before it is read")
                if slot.reader is None:
                    slot.reader = self.format.open(self.dirname, self.shards[i], None)
                r = slot.reader
        return r

    def hold(self, i: int, keep: int) -> ShardRows:
        """Pin shard ``i`` for random access, keeping recent such pins within the limit (see :mod:`.held`)."""
        return self._held.hold(i, keep)

    def release_held(self) -> None:
        self._held.release()

    # -- making a shard present --------------------------------------------------------------
    def _acquire(self, i: int, lock: FileLock, must: bool, blocking: bool):
        """Take the shared lock on a present shard, downloading it first if needed.

        Returns False (gave up), True, or ``_OVER`` (downloaded beyond the limit)."""
        room, fetched, damaged = True, False, None
        if not must and self.limit is not None and self.present(i) and not self.space.fits(self.limit):
            # Over the limit: a prefetch leaves present shards evictable rather than hold more (decided before
            # taking the lock, so that passing by never keeps an evictor from this shard).
            return False
        for _ in range(100):
            if not self._wait(lock, False, blocking, i):
                return False
            if self.present(i):
                damaged = self._damaged(i, fetched)
                if damaged is None:
                    if not fetched and record.ON:
                        record.add_count("cache_hits")
                    if must and not fetched and self.limit is not None and not self.space.fits(self.limit):
                        return _OVER  # held as over the limit, so it is evicted when the loop leaves it
                    return room
            elif self.fetcher is None and not self._derived(i):
                return True  # the reader reports the missing file with its path
            # Never wait for the exclusive lock while others may hold the shard for a long time: first
            # queue on the shard's download lock (one downloader at a time), with no lock on the shard.
            lock.release()
            downloading = FileLock(lock.path + ".dl")
            try:
                if not self._wait(downloading, True, blocking, i):
                    return False
                if self.present(i) and (damaged is None or identity(self.resident_path(i)) != damaged):
                    continue  # the previous downloader brought it (or replaced the damaged file)
                # only processes passing through (a present check, an eviction attempt) hold it now
                if not self._wait(lock, True, blocking, i):
                    return False
                present = self.present(i)
                if not present or identity(self.resident_path(i)) == damaged:
                    self.space.clear(i, keep_files=not present)  # a damaged file goes, with its fetched ones
                    reservation = None
                    if self.limit is not None:
                        fits, reservation = self.space.make_room(i, self.limit, must)
                        if reservation is None:
                            return False
                        room = True if fits else _OVER
                    self._materialise(i, reservation)
                    fetched = True
            finally:
                downloading.release()
            # back to shared at the top of the loop; another process may evict in between, so check again
        raise DownloadError(f"shard {i} ({self._name(i)}) kept disappearing after download; "
                            "the cache limit is far too small for the processes sharing it")

    def _name(self, i: int) -> str:
        return self.format.resident_file(self.shards[i]).basename

    def _derived(self, i: int) -> bool:
        """Whether shard ``i``'s resident file is made from other files (decompressed from them, say)."""
        name = self._name(i)
        return any(f.basename != name for f in self.format.fetched_files(self.shards[i]))

    def _wait(self, lock: FileLock, exclusive: bool, blocking: bool, i: int) -> bool:
        if not blocking:
            return lock.try_acquire(exclusive)
        try:
            lock.acquire(exclusive, self.wait)
        except LockTimeout as exc:
            raise DownloadError(
                f"waited {self.wait:g}s for shard {self._name(i)!r} in {self.dirname}: another "
                "process holds it (downloading, or evicting it)"
            ) from exc
        return True

    def _damaged(self, i: int, fetched: bool) -> Optional[tuple]:
        """The identity of shard ``i``'s file if it fails ``validate_hash`` and can be fetched again
        (called under a lock on it, once per process and file); None if it is intact or unchecked."""
        found = self._checked.mismatch(self.resident_path(i), self.format.resident_file(self.shards[i]))
        if found is None:
            return None
        ident, got, want = found
        name = self._name(i)
        if fetched or self.fetcher is None or not self.is_cache:
            where = (f"even freshly downloaded from {self.fetcher.url(name)}; the remote copy is damaged or the "
                     "index belongs to another version of the dataset" if fetched else
                     f"and {self.dirname} holds its only copy; restore the file or rewrite the dataset")
            raise HashMismatchError(f"shard {name!r}: {self.validate_hash} digest is {got}, the index says "
                                    f"{want}, {where}")
        return ident

    def _materialise(self, i: int, reservation: Optional[str] = None) -> None:
        """Download shard ``i``'s files and prepare it (MDS: decompress); called with its exclusive lock held.
        A shard the format finds damaged (damaged in transit, no digest to catch it) is fetched once more."""
        s = self.shards[i]
        reservation = reservation or self.space.reserve(i)
        try:
            for attempt in range(2):
                try:
                    if record.ON:
                        record.add_count("cache_misses")
                    for info in self.format.fetched_files(s):
                        if not _has_size(shard_path(self.dirname, info.basename), info.bytes):
                            self._fetch(info)
                    with record.timed("decompress"):
                        self.format.prepare(self.dirname, s, keep_fetched=self.keep_zip)
                    return
                except HashMismatchError:
                    raise  # the fetcher already fetched it twice
                except CorruptShardError:
                    if self.fetcher is None:
                        raise
                    self.space.clear(i, keep_files=False)  # never leave a damaged download in the cache
                    if attempt:
                        raise
        finally:
            remove_quietly(reservation)

    def _fetch(self, info) -> None:
        if self.fetcher is None:
            return
        if info.source is not None:  # a byte range (or the whole) of a data file
            self.fetcher.fetch_part(info, shard_path(self.dirname, info.basename))
            return
        self.fetcher.fetch(info.basename, shard_path(self.dirname, info.basename), info.bytes,
                           check_hashes(info.hashes, self.validate_hash))

    # -- usage and eviction (see :mod:`.eviction`) ------------------------------------------
    def usage(self) -> int:
        """Bytes in the directory for this dataset: shards, downloads in progress, the index."""
        return self.space.usage()

    def evict(self, i: int) -> bool:
        """Delete shard ``i`` unless a process is using it; True if it is gone."""
        if not self.evictable:
            raise InvalidArgumentError(
                f"shard {i} cannot be evicted: this dataset has no remote, so {self.dirname} holds its only copy"
            )
        return self.space.try_evict(i)

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used shard that no process is using; its index, or None."""
        if not self.evictable:
            return None
        return self.space.evict_coldest()


def _has_size(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False
