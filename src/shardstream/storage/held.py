"""Shards held for random access (``ds[i]``, ``get_batch``): pins kept after use, so that the
next sample of a recent shard costs no lock, no file check and no new mapping.

The most recent ``keep`` pins are kept, and with a ``cache_limit`` only as many as it leaves
room for: held shards cannot be evicted, so a shard that does not fit beside them releases
them first (they become evictable), and at most one held shard is ever beyond the limit. The
cache then stays within the limit plus one shard per process on this path too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..format.source import ShardRows


class HeldShards:
    """The random-access pins of one process on a :class:`~shardstream.storage.cache.ShardCache`."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self._held: OrderedDict[int, None] = OrderedDict()
        self._mutex = threading.Lock()

    def hold(self, i: int, keep: int) -> ShardRows:
        """Pin shard ``i`` (unless held already) and keep up to ``keep`` of the most recent pins."""
        cache = self.cache
        with self._mutex:
            if i in self._held:
                self._held.move_to_end(i)
                return cache.reader(i)
        if cache.limit is None:
            cache.pin(i)
        else:
            self.release(over_only=True)  # a shard beyond the limit is held no longer than needed
            if not cache.pin(i, must=False):
                self.release()  # no room beside the held shards: let them go, so they can be evicted
                cache.pin(i)
        with self._mutex:
            if i in self._held:
                cache.unpin(i)  # another thread held it meanwhile
            self._held[i] = None
            while len(self._held) > keep:
                old, _ = self._held.popitem(last=False)
                cache.unpin(old)
        return cache.reader(i)

    def release(self, over_only: bool = False) -> None:
        """Unpin the held shards (with ``over_only``, those beyond the limit only)."""
        with self._mutex:
            held = [i for i in self._held if not over_only or self.cache.over(i)]
            for i in held:
                del self._held[i]
        for i in held:
            self.cache.unpin(i)
