"""Where a sample comes from: the table from a global sample id to (store, shard, row).

A local dataset, a cached remote one and a mixture of streams are the same thing here:
a list of *stores* (one per stream; see :mod:`shardstream.storage.stores`), each making
its shards readable, in place or through the shard cache, and each reading them
through its format (:mod:`shardstream.format.source`). The table numbers the shards of
all stores one after the other, and the samples of all shards one after the other,
which is the numbering the plan uses.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import UnsafeEncodingError

_HELD_SHARDS = 8  # shards of a cached store kept pinned for random access (fewer if cache_limit needs)


class ShardTable:
    """Global shard ``i`` -> ``(store, shard of the store)``; global sample -> ``(shard, row)``."""

    def __init__(self, stores: list) -> None:
        self.stores = stores
        self.shards: list = [s for store in stores for s in store.shards]
        self.firsts: list[int] = []
        n = 0
        for store in stores:
            self.firsts.append(n)
            n += len(store.shards)
        self._owner = [k for k, store in enumerate(stores) for _ in store.shards]
        sizes = [s.samples for s in self.shards]
        self.sizes = np.asarray(sizes, np.int64)
        self.ends: list[int] = np.cumsum(sizes).tolist()  # plain ints: bisect on a list is the fastest lookup
        self.starts: list[int] = [0] + self.ends[:-1]
        self.ends_array = np.asarray(self.ends, np.int64)  # for vectorised lookups
        self.starts_array = np.asarray(self.starts, np.int64)
        self.num_samples: int = self.ends[-1] if self.ends else 0
        self.cached = any(store.evictable for store in stores)  # some shards come through the cache
        # shards are pinned while a pass reads them: cached ones, and in-place ones whose readers hold decoded rows
        self.pinned_reads = self.cached or any(getattr(store, "decodes", False) for store in stores)
        self.getters: list = [None] * len(self.shards)  # random access: shard -> row -> sample (in-place stores)

    def __getstate__(self) -> dict:  # a worker process opens its own readers
        state = self.__dict__.copy()
        state["getters"] = [None] * len(self.shards)
        return state

    # -- numbering -----------------------------------------------------------------------------
    def at(self, i: int) -> tuple[Any, int]:
        """``(store, its shard index)`` of global shard ``i``."""
        k = self._owner[i]
        return self.stores[k], i - self.firsts[k]

    def stream_owners(self) -> Optional[np.ndarray]:
        """Each shard's stream (an array), or None for a single stream."""
        if len(self.stores) < 2:
            return None
        owners = self.__dict__.get("_owners")
        if owners is None:
            owners = self.__dict__["_owners"] = np.asarray(self._owner, np.int64)
        return owners

    def shard_of(self, sample: int) -> int:
        return bisect_right(self.ends, sample)

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(flat ids, shard of each, row of each in its shard)``."""
        flat = ids.ravel()
        shards = np.searchsorted(self.ends_array, flat, side="right")
        return flat, shards, flat - self.starts_array[shards]

    def describe(self, i: int) -> str:
        """Shard ``i``'s file and directory, for messages."""
        store, j = self.at(i)
        return f"shard {i} ({store.format.resident_file(store.shards[j]).basename!r}) in {store.dirname}"

    # -- reading -------------------------------------------------------------------------------
    def reader(self, i: int):
        """The reader of shard ``i``, which must be pinned if its store is a cache."""
        store, j = self.at(i)
        return store.reader(j)

    def random_reader(self, i: int):
        """The reader of shard ``i`` for random access: pinned and kept among the recent ones if cached."""
        store, j = self.at(i)
        return store.hold(j, _HELD_SHARDS)

    def getter(self, i: int):
        """``row -> sample`` of shard ``i`` for random access (kept for in-place stores)."""
        store, j = self.at(i)
        get = store.hold(j, _HELD_SHARDS).get_unchecked
        if not store.evictable and not getattr(store, "decodes", False):  # others stay readable only while held
            self.getters[i] = get
        return get

    # -- pins ----------------------------------------------------------------------------------
    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        store, j = self.at(i)
        return store.pin(j, must=must, blocking=blocking)

    def add_ref(self, i: int) -> bool:
        store, j = self.at(i)
        return store.add_ref(j)

    def unpin(self, i: int) -> None:
        store, j = self.at(i)
        store.unpin(j)

    def over(self, i: int) -> bool:
        store, j = self.at(i)
        return store.over(j)

    # -- the cache -----------------------------------------------------------------------------
    def usage(self) -> int:
        return sum(store.usage() for store in self.stores)

    def evict(self, i: int) -> bool:
        store, j = self.at(i)
        return store.evict(j)

    def release_held(self) -> None:
        for store in self.stores:
            store.release_held()

    def evict_coldest(self) -> Optional[int]:
        """Evict the least recently used unused shard of the first store that has one."""
        for first, store in zip(self.firsts, self.stores):
            j = store.evict_coldest()
            if j is not None:
                return first + j
        return None

    def footprints(self) -> np.ndarray:
        """Bytes each shard takes in the cache at its peak (0 for shards read in place)."""
        return np.asarray([store.footprint(j) if store.evictable else 0
                           for store in self.stores for j in range(len(store.shards))], np.int64)

    def fixed_bytes(self) -> int:
        """Bytes the caches keep besides shards (their index files)."""
        return sum(store.fixed_bytes() for store in self.stores)

    # -- what the samples look like ---------------------------------------------------------------
    @property
    def column_names(self) -> tuple:
        return tuple(self.shards[0].column_names) if self.shards else ()

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list:
        """The column kinds of batches (from the first shard's listing)."""
        store = self.stores[self._owner[0]]
        return store.format.kinds(self.shards[0], columns)

    def layouts(self) -> set:
        """The distinct column layouts of the stores (samples of one layout can share a batch)."""
        return {store.format.layout(store.shards[0]) for store in self.stores if store.shards}

    def unsafe_columns(self) -> Iterator[tuple[int, str, str]]:
        """``(shard, column, encoding)`` whose decoding could run code from the data, lazily."""
        for i, shard in enumerate(self.shards):
            for name, enc in self.stores[self._owner[i]].format.unsafe_columns(shard):
                yield i, name, enc

    def refuse_unsafe(self) -> None:
        """Raise :class:`~shardstream.errors.UnsafeEncodingError` for the first column whose decoding could
        run code from the data."""
        for i, name, enc in self.unsafe_columns():
            raise UnsafeEncodingError(
                f"column {name!r} (shard {i}) contains an unsafe type: encoding {enc!r}, which can run arbitrary "
                "code when read; pass allow_unsafe_types=True only if you trust who wrote this dataset"
            )
