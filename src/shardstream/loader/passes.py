"""How a pass is read: this worker's plan rows, decoded sample by sample or step by step.

Local datasets read shards in place. Datasets with a remote go through the shard cache:
a prefetcher pins the shards of upcoming chunks ahead of the loop (see :mod:`.prefetch`).
Step batches decode each shard's samples of a step at once (see :func:`decode_step`).
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional

import numpy as np

from ..format.index import INDEX_BASENAME
from ..format.batch import column_kinds, concat_batches, decode_batch, decode_range, stack_samples, take_rows
from ..format.reader import ShardReader
from .prefetch import Chunk, Prefetcher
from .working_set import upcoming_shards, warn_if_too_small


class PassReading:
    """The reading half of :class:`~shardstream.StreamingDataset` (it supplies the shards,
    the cache, the shard boundaries and the prefetch settings)."""

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        flat = ids.ravel()
        shards = np.searchsorted(self._ends_array, flat, side="right")
        return flat, shards, flat - self._starts_array[shards]

    def _local_samples(self, current, columns=None) -> Iterator[dict[str, Any]]:
        """Samples of a local dataset (with only ``columns`` decoded, if given)."""
        getters = self._getters if columns is None else [None] * len(self.shards)  # of those columns, this pass

        def opener(shard: int):
            if columns is None:
                return self._open_getter(shard)
            getters[shard] = self.reader(shard).decoders(columns)[1]
            return getters[shard]

        for _, ids in current.plan.iter_worker(current.world, current.start):
            flat, shards, local = self._locate(ids)
            bounds = long_runs(flat, shards)
            if bounds is not None:  # long runs of consecutive samples: decode them in order
                for lo, hi in zip(bounds[:-1], bounds[1:]):
                    first = int(local[lo])
                    for sample in self.reader(int(shards[lo])).iter_range(first, first + hi - lo, columns):
                        current.yielded += 1
                        yield sample
                continue
            for shard, off in zip(shards.tolist(), local.tolist()):
                get = getters[shard] or opener(shard)
                sample = get(off)
                current.yielded += 1
                yield sample

    def _local_batches(self, current, columns) -> Iterator[dict[str, Any]]:
        for _, ids in current.plan.iter_worker(current.world, current.start):
            flat, shards, local = self._locate(ids)
            step = ids.shape[1]
            for lo in range(0, len(flat), step):
                batch = decode_step(self.reader, shards[lo:lo + step], local[lo:lo + step], columns)
                current.yielded += step
                yield batch

    def _prefetched(self, current) -> Iterator[tuple[Chunk, set]]:
        """The worker's chunks with their shards pinned ahead (see :mod:`.prefetch`); a chunk's
        pins are dropped once the consumer asks for the next chunk, so shards shared by both stay."""
        if not getattr(self, "_working_set_checked", False):  # once per dataset (and per worker copy)
            self._working_set_checked = True
            self._check_working_set(current)
        step = max(current.plan.device_batch(current.world), 1)
        rows = max(1, min(2048, self.predownload // 4) // step)  # steps per chunk
        prefetcher = Prefetcher(self._cache, self._chunks(current, rows), self.predownload, self.download_threads)
        previous = None
        try:
            for chunk, pinned in prefetcher:
                if previous is not None:
                    prefetcher.done(*previous)
                previous = (chunk, pinned)
                yield chunk, pinned
        finally:
            if previous is not None:
                prefetcher.done(*previous)
            prefetcher.close()

    def _check_working_set(self, current) -> None:
        """Warn when ``cache_limit`` cannot hold the shards this reader's order needs at once."""
        if self.cache_limit is None:
            return
        stores = getattr(self._cache, "stores", [self._cache])
        sizes = np.concatenate([
            np.asarray([store.footprint(i) if store.evictable else 0 for i in range(len(store.shards))], np.int64)
            for store in stores])
        fixed = sum(_size(os.path.join(store.dirname, INDEX_BASENAME)) for store in stores if store.evictable)
        shards, whole = upcoming_shards(current.plan.iter_worker(current.world, current.start), self._locate)
        warn_if_too_small(self.cache_limit, shards, self.predownload, sizes, whole, fixed, self.shuffle)

    def _cached_samples(self, current, columns=None) -> Iterator[dict[str, Any]]:
        """Samples of a remote dataset: shards are downloaded ahead (see :mod:`.prefetch`)."""
        held = {"own": None}  # a shard pinned beyond the limit, kept until the loop leaves it
        try:
            for chunk, pinned in self._prefetched(current):
                yield from self._chunk_samples(current, chunk, pinned, held, columns)
        finally:
            if held["own"] is not None:
                self._cache.unpin(held["own"])

    def _cached_batches(self, current, columns) -> Iterator[dict[str, Any]]:
        """Column batches of a remote dataset; a shard not pinned ahead is pinned for its step only."""
        cache = self._cache
        step = max(current.plan.device_batch(current.world), 1)
        for chunk, pinned in self._prefetched(current):
            for lo in range(0, chunk.size, step):
                shards = chunk.shards[lo:lo + step]
                extra = [s for s in set(shards.tolist()) if s not in pinned]
                for s in extra:
                    cache.pin(s)
                try:
                    batch = decode_step(cache.reader, shards, chunk.local[lo:lo + step], columns)
                finally:
                    for s in extra:
                        cache.unpin(s)
                current.yielded += step
                yield batch

    def _chunks(self, current, rows: int) -> Iterator[Chunk]:
        """The worker's upcoming samples as chunks of ``rows`` steps (the plan is computed in larger blocks)."""
        for _, ids in current.plan.iter_worker(current.world, current.start):
            for lo in range(0, len(ids), rows):
                yield Chunk(*self._locate(ids[lo:lo + rows]))

    def _chunk_samples(self, current, chunk: Chunk, pinned: set, held: dict, columns) -> Iterator[dict[str, Any]]:
        """Decode one prepared chunk. A shard that was not pinned ahead (no room under
        ``cache_limit`` then) is pinned here: for the rest of the chunk if it fits under the
        limit, else only while the loop stays on it (so one such shard at a time goes over)."""
        cache = self._cache
        getters = {shard: cache.reader(shard).decoders(columns)[1] for shard in pinned}
        if held["own"] is not None and held["own"] not in getters:
            getters[held["own"]] = cache.reader(held["own"]).decoders(columns)[1]
        kept: list[int] = []

        def miss(shard: int):  # pin a shard that was not prepared ahead
            cache.pin(shard)
            if cache.over(shard):
                held["own"] = shard
            else:
                kept.append(shard)
            getters[shard] = cache.reader(shard).decoders(columns)[1]
            return getters[shard]

        def leave(shard: int) -> None:  # the loop moved past an over-the-limit shard
            cache.unpin(shard)
            del getters[shard]
            held["own"] = None

        try:
            bounds = long_runs(chunk.flat, chunk.shards)
            if bounds is not None:  # long runs of consecutive samples: decode them in order
                for lo, hi in zip(bounds[:-1], bounds[1:]):
                    shard = int(chunk.shards[lo])
                    if held["own"] is not None and shard != held["own"]:
                        leave(held["own"])
                    if shard not in getters:
                        miss(shard)
                    first = int(chunk.local[lo])
                    for sample in cache.reader(shard).iter_range(first, first + hi - lo, columns):
                        current.yielded += 1
                        yield sample
                return
            own = held["own"]
            for shard, off in zip(chunk.shards.tolist(), chunk.local.tolist()):
                if own is not None and shard != own:
                    leave(own)
                    own = None
                get = getters.get(shard)
                if get is None:
                    get = miss(shard)
                    own = held["own"]
                sample = get(off)
                current.yielded += 1
                yield sample
        finally:
            for shard in kept:
                cache.unpin(shard)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def decode_step(reader, shards: np.ndarray, local: np.ndarray, columns) -> dict[str, Any]:
    """One step's samples (``shards[i]``, ``local[i]``) as a column batch, in order:
    each run of samples from one shard is decoded at once (a range read when consecutive)."""
    cuts = np.flatnonzero(shards[1:] != shards[:-1]) + 1
    if not cuts.size:
        return _decode_run(reader(int(shards[0])), local, columns)
    if bool((shards[cuts] > shards[cuts - 1]).all()):  # each shard in one run: decode the runs in order
        bounds = [0, *cuts.tolist(), len(shards)]
        return concat_batches([_decode_run(reader(int(shards[lo])), local[lo:hi], columns)
                               for lo, hi in zip(bounds[:-1], bounds[1:])])
    order = np.argsort(shards, kind="stable")
    grouped, at = shards[order], local[order]
    cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    if (cuts.size + 1) * 8 > len(shards):  # few samples per shard: decode per sample, then stack
        getters = {s: reader(s).decoders(columns)[1] for s in set(shards.tolist())}
        samples = [getters[s](i) for s, i in zip(shards.tolist(), local.tolist())]
        return stack_samples(samples, column_kinds(reader(int(shards[0])), columns))
    # decode each shard's samples at once, then put the rows back in step order

    bounds = [0, *cuts.tolist(), len(shards)]
    batch = concat_batches([_decode_run(reader(int(grouped[lo])), at[lo:hi], columns)
                            for lo, hi in zip(bounds[:-1], bounds[1:])])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return take_rows(batch, inverse)


def _decode_run(reader: ShardReader, local: np.ndarray, columns) -> dict[str, Any]:
    first, n = int(local[0]), len(local)
    if int(local[-1]) - first == n - 1 and (n < 3 or bool((local[1:] - local[:-1] == 1).all())):
        return decode_range(reader, first, first + n, columns)
    return decode_batch(reader, local, columns)


def long_runs(flat: np.ndarray, shards: np.ndarray) -> Optional[list[int]]:
    """Bounds of the runs of consecutive samples of one shard in ``flat``, if the runs average more
    than 8 samples (then decoding run by run in order beats per-sample lookups); else None."""
    cuts = np.flatnonzero((np.diff(flat) != 1) | (np.diff(shards) != 0)) + 1
    if len(cuts) * 8 >= len(flat):
        return None
    return [0, *cuts.tolist(), len(flat)]
