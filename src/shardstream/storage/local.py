"""A dataset read in place from its own directory, the only copy of its shards: one of the stores of
:mod:`.store`. Nothing is downloaded, locked or evicted, and nothing (no lock file either) is
written into the directory, except what its format writes to open a shard (MDS decompresses a
compressed shard beside its compressed file, which it keeps)."""

from __future__ import annotations

from typing import Optional

from ..errors import InvalidArgumentError
from ..format.source import ShardFormat, ShardRows, get_format


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
        self._readers: list[Optional[ShardRows]] = [None] * len(shards)

    def __getstate__(self) -> dict:  # a worker process opens its own readers
        state = self.__dict__.copy()
        state["_readers"] = [None] * len(self.shards)
        return state

    def reader(self, i: int) -> ShardRows:
        r = self._readers[i]
        if r is None:
            r = self._readers[i] = self.format.open(self.dirname, self.shards[i], self.validate_hash)
        return r

    def hold(self, i: int, keep: int) -> ShardRows:
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
