"""The shards of several streams behind one numbering, for a mixed dataset.

:class:`ShardSet` concatenates the streams' shard lists and sends each call to the
stream's own store: a :class:`~shardstream.storage.cache.ShardCache` for a stream with
a remote (its own directory, locks and share of ``cache_limit``), or a
:class:`LocalShards` for a stream read in place (no locks, nothing ever evicted).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Optional

from ..format.index import ShardInfo
from ..format.reader import ShardReader, open_shard


class LocalShards:
    """Shards read in place from ``dirname``: always present, never evicted, no locks."""

    evictable = False

    def __init__(self, dirname: str, shards: list[ShardInfo], validate_hash: Optional[str]) -> None:
        self.dirname = dirname
        self.shards = shards
        self.validate_hash = validate_hash
        self._readers: list[Optional[ShardReader]] = [None] * len(shards)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_readers"] = [None] * len(self.shards)
        return state

    def reader(self, i: int) -> ShardReader:
        r = self._readers[i]
        if r is None:  # the compressed files are the only copy: never delete them
            r = self._readers[i] = open_shard(self.dirname, self.shards[i], self.validate_hash, keep_zip=True)
        return r

    def hold(self, i: int, keep: int) -> ShardReader:
        return self.reader(i)

    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        return True

    def add_ref(self, i: int) -> bool:
        return True

    def unpin(self, i: int) -> None:
        pass

    def over(self, i: int) -> bool:
        return False

    def release_held(self) -> None:
        pass

    def usage(self) -> int:
        return 0

    def evict(self, i: int) -> bool:
        return False

    def evict_coldest(self) -> Optional[int]:
        return None


class ShardSet:
    """Global shard ``i`` -> ``(store, local index)`` over the stores of several streams."""

    def __init__(self, stores: list) -> None:
        self.stores = stores
        self.shards: list[ShardInfo] = [s for store in stores for s in store.shards]
        self.firsts: list[int] = []
        n = 0
        for store in stores:
            self.firsts.append(n)
            n += len(store.shards)
        self.dirname = ", ".join(store.dirname for store in stores)

    def _at(self, i: int):
        k = bisect_right(self.firsts, i) - 1
        return self.stores[k], i - self.firsts[k]

    def reader(self, i: int) -> ShardReader:
        store, j = self._at(i)
        return store.reader(j)

    def hold(self, i: int, keep: int) -> ShardReader:
        store, j = self._at(i)
        return store.hold(j, keep)

    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        store, j = self._at(i)
        return store.pin(j, must=must, blocking=blocking)

    def add_ref(self, i: int) -> bool:
        store, j = self._at(i)
        return store.add_ref(j)

    def unpin(self, i: int) -> None:
        store, j = self._at(i)
        store.unpin(j)

    def over(self, i: int) -> bool:
        store, j = self._at(i)
        return store.over(j)

    def evict(self, i: int) -> bool:
        store, j = self._at(i)
        return store.evict(j)

    def release_held(self) -> None:
        for store in self.stores:
            store.release_held()

    def usage(self) -> int:
        return sum(store.usage() for store in self.stores)

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used unused shard of the first stream that has one."""
        for first, store in zip(self.firsts, self.stores):
            j = store.evict_coldest()
            if j is not None:
                return first + j
        return None
