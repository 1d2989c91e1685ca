"""A dataset read in place from its own directory, the only copy of its shards: one of the stores of
:mod:`.store`. Nothing is downloaded, locked or evicted, and nothing (no lock file either) is
written into the directory, except what its format writes to open a shard (MDS decompresses a
compressed shard beside its compressed file, which it keeps).

A format whose readers hold decoded rows (a Parquet row group, a piece of a JSON Lines file) is
``decodes``: its pieces are pinned like cached shards, so a pass keeps decoded exactly the pieces
its current and next chunks read (decoded ahead, in the prefetch threads), and a few recent ones."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional

from ..errors import InvalidArgumentError
from ..format.source import ShardFormat, ShardRows, get_format


class DecodedReaders:
    """The open readers of a format whose readers hold decoded rows (data files): those pinned (the
    pieces a pass reads now and next, opened by the prefetch threads ahead of use) and the ``keep``
    most recently used others. Memory stays bounded by what the pass needs at once."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.pinned: dict[int, list] = {}  # shard -> [pins, reader]
        self.recent: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def __reduce__(self):  # a worker process starts with none open
        return DecodedReaders, (self.keep,)

    def get(self, i: int) -> Optional[ShardRows]:
        with self.lock:
            held = self.pinned.get(i)
            if held is not None:
                return held[1]
            r = self.recent.get(i)
            if r is not None:
                self.recent.move_to_end(i)
            return r

    def put(self, i: int, r: ShardRows) -> None:
        with self.lock:
            if i in self.pinned:
                return
            self.recent[i] = r
            self._trim()

    def pin(self, i: int, reader: ShardRows) -> None:
        with self.lock:
            held = self.pinned.get(i)
            if held is None:
                self.pinned[i] = [1, self.recent.pop(i, reader)]
            else:
                held[0] += 1

    def add_ref(self, i: int) -> bool:
        with self.lock:
            held = self.pinned.get(i)
            if held is not None:
                held[0] += 1
            return held is not None

    def unpin(self, i: int) -> None:
        with self.lock:
            held = self.pinned[i]
            held[0] -= 1
            if held[0] == 0:
                del self.pinned[i]
                self.recent[i] = held[1]
                self._trim()

    def _trim(self) -> None:
        while len(self.recent) > self.keep:
            self.recent.popitem(last=False)


class LocalStore:
    """The shards of ``dirname`` (of ``format``, default MDS), always present, never evicted; each
    is checked against ``validate_hash`` when this process first opens it."""

    evictable = False
    limit = None

    def __init__(self, dirname: str, shards: list, validate_hash: Optional[str] = None,
                 format: Optional[ShardFormat] = None) -> None:
        self.dirname = dirname
        self.shards = shards
        self.validate_hash = validate_hash
        self.format = get_format("mds" if format is None else format)
        # formats whose readers hold decoded rows (data files) keep only those pinned and a few recent
        keep = getattr(self.format, "open_readers", None)
        self.decodes = keep is not None
        self._decoded = DecodedReaders(keep) if self.decodes else None
        self._readers: list[Optional[ShardRows]] = [] if self.decodes else [None] * len(shards)

    def __getstate__(self) -> dict:  # a worker process opens its own readers
        state = self.__dict__.copy()
        state["_readers"] = [] if self.decodes else [None] * len(self.shards)
        return state

    def reader(self, i: int) -> ShardRows:
        if self.decodes:
            r = self._decoded.get(i)
            if r is None:
                r = self._open(i)
                self._decoded.put(i, r)
            return r
        r = self._readers[i]
        if r is None:
            r = self._readers[i] = self._open(i)
        return r

    def _open(self, i: int) -> ShardRows:
        return self.format.open(self.dirname, self.shards[i], self.validate_hash)

    def hold(self, i: int, keep: int) -> ShardRows:
        return self.reader(i)

    def pin(self, i: int, must: bool = True, blocking: bool = True) -> bool:
        """Nothing to download; a decoded format's piece is opened (decoded) now and kept until unpinned."""
        if self.decodes and not self._decoded.add_ref(i):
            self._decoded.pin(i, self._decoded.get(i) or self._open(i))
        return True

    def add_ref(self, i: int) -> bool:
        return self._decoded.add_ref(i) if self.decodes else True

    def unpin(self, i: int) -> None:
        if self.decodes:
            self._decoded.unpin(i)

    def over(self, i: int) -> bool:
        return False

    def release_held(self) -> None:
        pass

    def usage(self) -> int:
        return 0  # nothing here is a cache's

    def evict(self, i: int) -> bool:
        raise InvalidArgumentError(
            f"shard {i} cannot be evicted: this dataset has no remote, so {self.dirname} holds its only copy"
        )

    def evict_coldest(self) -> Optional[int]:
        return None

    def footprint(self, i: int) -> int:
        return self.format.footprint(self.shards[i], fetched=False)

    def fixed_bytes(self) -> int:
        return 0
