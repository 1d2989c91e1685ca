"""The source node: a reader's share of a pass, decoded sample by sample or step by step.

A :class:`PassReader` is built from the shard table (:mod:`.table`) and a *share*: which sample ids
this reader reads, in order, as one of the two partition strategies of
:mod:`shardstream.plan.partition` cuts them. A dataset's share is a pass of the epoch cursor
(:class:`~.cursor.Pass`: the plan's global steps cut among ranks and workers, in chunks of whole
steps); a chain's is a :class:`~.source.BlockShare` (the plan dealt in blocks by a grid). A share has
``step`` (samples per step of this reader; 1 without steps), ``id_chunks()`` (its sample ids, in
chunks) and ``yielded`` (the samples handed out, counted here). When some shards come through the cache, a prefetcher pins each
chunk's shards ahead of the loop (see :mod:`.prefetch`); shards read in place need none.
Samples of a chunk are decoded run by run when consecutive samples of one shard are long
(then a range read in order beats lookups), else one by one; step batches decode each
shard's samples of a step at once (see :func:`decode_step`), or are cut from blocks of several
steps decoded at once where the steps read a run of consecutive samples (:mod:`.blocks`).
Every sample handed out counts in the pass's ``yielded``, which the cursor turns into the
consumed plan position.
"""

from __future__ import annotations

from bisect import bisect_right
from contextlib import closing
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..format.batch import concat_batches, stack_samples, take_rows
from ..format.stepbatch import decode_joined, decode_strided, stride_table
from ..stats import record
from .blocks import RunBlocks
from .prefetch import Chunk, Prefetcher
from .working_set import upcoming_shards, warn_if_too_small


class PassReader:
    """One pass of one worker over ``table`` (see the module docstring).

    ``columns``: decode only these. ``predownload``, ``threads``: how far ahead and with how
    many download threads cached shards are prepared. ``limit``: the cache limit, checked
    against this reader's working set once (``check_working_set``)."""

    def __init__(self, table, current, columns=None, *, predownload: int = 0, threads: int = 1,
                 limit: Optional[int] = None, shuffle: bool = False, check_working_set: bool = False) -> None:
        self.table = table
        self.current = current
        self.columns = columns
        self.predownload = predownload
        self.threads = threads
        self.limit = limit
        self.shuffle = shuffle
        self.check_working_set = check_working_set
        self.step = max(current.step, 1)

    # -- what to read ----------------------------------------------------------------------------
    def _plan_chunks(self, rows: Optional[int] = None) -> Iterator[Chunk]:
        """The worker's upcoming samples as located chunks (of ``rows`` steps, else as the plan gives them)."""
        for ids in self.current.id_chunks():
            if rows is None:
                yield Chunk(*self.table.locate(ids))
                continue
            for lo in range(0, len(ids), rows):
                yield Chunk(*self.table.locate(ids[lo:lo + rows]))

    def chunks(self) -> Iterator[tuple[Chunk, Optional[set]]]:
        """``(chunk, pinned shards)``; pinned is None when no shard needs pinning (all read in place).
        A chunk's pins are dropped once the consumer asks for the next chunk, so shards shared by
        both stay pinned."""
        if not self.table.pinned_reads:
            for chunk in self._plan_chunks():
                yield chunk, None
            return
        if self.check_working_set:
            self._warn_working_set()
        rows = max(1, min(2048, self.predownload // 4) // self.step)  # steps per chunk
        prefetcher = Prefetcher(self.table, self._plan_chunks(rows), self.predownload, self.threads)
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

    def _count_streams(self, shards: np.ndarray) -> None:
        """Count handed-out samples per stream (stats on, several streams): ``shards`` are theirs."""
        owners = self.table.stream_owners()
        if owners is not None:
            record.add_streams(owners[shards], len(self.table.stores))

    def _warn_working_set(self) -> None:
        """Warn when the cache limit cannot hold the shards this reader's order needs at once."""
        if self.limit is None:
            return
        shards, whole = upcoming_shards(self.current.id_chunks(), self.table.locate)
        warn_if_too_small(self.limit, shards, self.predownload, self.table.footprints(), whole,
                          self.table.fixed_bytes(), self.shuffle)

    # -- samples ---------------------------------------------------------------------------------
    def _entered(self) -> Iterator[tuple]:
        """``(chunk, its row getters, long runs' bounds or None)`` for each chunk; the getters are done with
        when the consumer asks for the next chunk (or closes this generator)."""
        held = _Held(self.table, self.columns)
        try:
            for chunk, pinned in self.chunks():
                getters = held.enter(pinned)
                if record.ON:
                    self._count_streams(chunk.shards)
                try:
                    yield chunk, getters, long_runs(chunk.flat, chunk.shards)
                finally:
                    getters.done()
        finally:
            held.close()

    def samples(self) -> Iterator[dict[str, Any]]:
        """This worker's samples of the pass, in plan order (one generator: no per-sample layers)."""
        current, columns = self.current, self.columns
        with closing(self._entered()) as entered:
            for chunk, getters, bounds in entered:
                if bounds is not None:  # long runs of consecutive samples: decode them in order
                    for lo, hi in zip(bounds[:-1], bounds[1:]):
                        first = int(chunk.local[lo])
                        reader = getters.run(int(chunk.shards[lo]))
                        for sample in reader.iter_range(first, first + hi - lo, columns):
                            current.yielded += 1
                            yield sample
                    continue
                found, miss, own = getters.found, getters.miss, getters.own
                for shard, off in zip(chunk.shards.tolist(), chunk.local.tolist()):
                    if own is not None and shard != own:
                        getters.leave()
                        own = None
                    get = found.get(shard)
                    if get is None:
                        get = miss(shard)
                        own = getters.own
                    sample = get(off)
                    current.yielded += 1
                    yield sample

    def sample_runs(self) -> Iterator[list]:
        """The samples of :meth:`samples`, in the same order, as lists (a run of one shard, or a chunk's
        lookups), for a consumer that takes many at a time (a processing chain's source). Does not count
        ``yielded``: such a consumer keeps its own position."""
        columns = self.columns
        with closing(self._entered()) as entered:
            for chunk, getters, bounds in entered:
                if bounds is None:
                    yield _looked_up(getters, chunk)
                    continue
                for lo, hi in zip(bounds[:-1], bounds[1:]):  # long runs of consecutive samples: in order
                    first = int(chunk.local[lo])
                    reader = getters.run(int(chunk.shards[lo]))
                    as_list = getattr(reader, "rows_range", None)
                    yield (as_list(first, first + hi - lo, columns) if as_list is not None
                           else list(reader.iter_range(first, first + hi - lo, columns)))

    def made(self, fetch: Callable[[int], Any]) -> Iterator[Any]:
        """``fetch(sample id)`` for each of this worker's samples (shards still prepared ahead)."""
        current = self.current
        for chunk, _ in self.chunks():
            for i in chunk.flat.tolist():
                current.yielded += 1
                yield fetch(i)

    # -- step batches ------------------------------------------------------------------------------
    def batches(self) -> Iterator[dict[str, Any]]:
        """Each step's samples of this worker as one column batch; a cached shard not pinned ahead is
        pinned for its step only."""
        table, step, current = self.table, self.step, self.current
        blocks = RunBlocks(table.reader, self.columns, step)
        for chunk, pinned in self.chunks():
            cuts = run_cuts(chunk.flat, chunk.shards)
            for lo in range(0, chunk.size, step):
                shards = chunk.shards[lo:lo + step]
                extra = [] if pinned is None else [s for s in set(shards.tolist()) if s not in pinned]
                if extra:
                    with record.timed("download_wait"):
                        for s in extra:
                            table.pin(s)
                if record.ON:
                    self._count_streams(shards)
                hi = min(lo + step, chunk.size)
                try:
                    batch = _step_batch(blocks, chunk, lo, hi, cuts[bisect_right(cuts, lo)])
                finally:
                    for s in extra:
                        table.unpin(s)
                current.yielded += hi - lo  # a step resumed in its middle is short
                yield batch


class _Held:
    """The row getters of a pass's shards. Shards read in place keep theirs for the pass; a cached
    shard is readable while pinned: by its chunk (the prefetcher's pins), or by the loop itself
    when it was not pinned ahead (no room under the limit then): for the rest of the chunk if it
    fits under the limit, else only while the loop stays on it (so one such shard at a time goes
    over the limit)."""

    def __init__(self, table, columns) -> None:
        self.table = table
        self.columns = columns
        self.kept: dict = {}  # in-place shards: shard -> getter, for the whole pass
        self.own: Optional[int] = None  # a shard pinned beyond the limit, kept until the loop leaves it
        self.own_get = None

    def enter(self, pinned: Optional[set]) -> "_Getters":
        if pinned is None:
            return _Getters(self, self.kept, None)
        table, columns = self.table, self.columns
        found = {shard: table.reader(shard).decoders(columns)[1] for shard in pinned}
        if self.own is not None and self.own not in found:
            found[self.own] = self.own_get
        return _Getters(self, found, [])

    def close(self) -> None:
        if self.own is not None:
            self.table.unpin(self.own)
            self.own = self.own_get = None


class _Getters:
    """The getters of one chunk (see :class:`_Held`); ``pins`` None: shards are read in place."""

    def __init__(self, held: _Held, found: dict, pins: Optional[list]) -> None:
        self.held = held
        self.found = found
        self.pins = pins  # shards this chunk pinned itself within the limit
        self.own = held.own

    def miss(self, shard: int):
        """Open a shard that was not prepared ahead (pinning it if it is cached)."""
        held, table = self.held, self.held.table
        if self.pins is None:
            get = self.found[shard] = table.reader(shard).decoders(held.columns)[1]
            return get
        with record.timed("download_wait"):
            table.pin(shard)
        get = table.reader(shard).decoders(held.columns)[1]
        if table.over(shard):
            held.own, held.own_get = shard, get
            self.own = shard
        else:
            self.pins.append(shard)
        self.found[shard] = get
        return get

    def leave(self) -> None:
        """The loop moved past the over-the-limit shard."""
        held = self.held
        held.table.unpin(held.own)
        del self.found[held.own]
        held.own = held.own_get = None
        self.own = None

    def run(self, shard: int):
        """The reader for a run of samples of ``shard``."""
        if self.own is not None and shard != self.own:
            self.leave()
        if shard not in self.found:
            self.miss(shard)
        return self.held.table.reader(shard)

    def done(self) -> None:
        for shard in self.pins or ():
            self.held.table.unpin(shard)


def decode_step(reader, shards: np.ndarray, local: np.ndarray, columns) -> dict[str, Any]:
    """One step's samples (``shards[i]``, ``local[i]``) as a column batch, in order: gathered as rows
    of byte tables when the shards' samples have one size (see :mod:`~shardstream.format.stepbatch`);
    else each run of samples from one shard is decoded at once (a range read when consecutive) when
    every shard comes in one run, else the samples are joined and decoded at once, and failing that
    (other formats) each shard's samples are decoded at once and put back in step order."""
    if stride_table(reader(int(shards[0]))) is not None:
        batch = decode_strided(reader, shards, local, columns)
        if batch is not None:
            return batch
    cuts = np.flatnonzero(shards[1:] != shards[:-1]) + 1
    if not cuts.size:
        return _decode_run(reader(int(shards[0])), local, columns)
    if bool((shards[cuts] > shards[cuts - 1]).all()):  # each shard in one run: decode the runs in order
        bounds = [0, *cuts.tolist(), len(shards)]
        return concat_batches([_decode_run(reader(int(shards[lo])), local[lo:hi], columns)
                               for lo, hi in zip(bounds[:-1], bounds[1:])])
    batch = decode_joined(reader, shards, local, columns)
    if batch is not None:
        return batch
    order = np.argsort(shards, kind="stable")
    grouped, at = shards[order], local[order]
    cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    if (cuts.size + 1) * 8 > len(shards):  # few samples per shard: decode per sample, then stack
        getters = {s: reader(s).decoders(columns)[1] for s in set(shards.tolist())}
        samples = [getters[s](i) for s, i in zip(shards.tolist(), local.tolist())]
        return stack_samples(samples, reader(int(shards[0])).kinds(columns))
    # decode each shard's samples at once, then put the rows back in step order
    bounds = [0, *cuts.tolist(), len(shards)]
    batch = concat_batches([_decode_run(reader(int(grouped[lo])), at[lo:hi], columns)
                            for lo, hi in zip(bounds[:-1], bounds[1:])])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return take_rows(batch, inverse)


def _step_batch(blocks: RunBlocks, chunk: Chunk, lo: int, hi: int, run_end: int) -> dict[str, Any]:
    """The step of ``chunk`` at positions ``lo..hi-1``, whose run of consecutive samples of one shard (as
    :func:`run_cuts` finds them) ends at position ``run_end``: cut from a block of the run when the step
    lies in one run, else decoded by :func:`decode_step`."""
    if run_end < hi:
        return decode_step(blocks.reader_of, chunk.shards[lo:hi], chunk.local[lo:hi], blocks.columns)
    first = int(chunk.local[lo])
    return blocks.rows(int(chunk.shards[lo]), first, first + hi - lo, first + run_end - lo)


def _decode_run(reader, local: np.ndarray, columns) -> dict[str, Any]:
    first, n = int(local[0]), len(local)
    if int(local[-1]) - first == n - 1 and (n < 3 or bool((local[1:] - local[:-1] == 1).all())):
        return reader.batch_range(first, first + n, columns)
    return reader.batch_rows(local, columns)


def run_cuts(flat: np.ndarray, shards: np.ndarray) -> list[int]:
    """Where the runs of consecutive samples of one shard in ``flat`` end (positions), the last at ``len(flat)``."""
    cuts = np.flatnonzero((np.diff(flat) != 1) | (np.diff(shards) != 0)) + 1
    return [*cuts.tolist(), len(flat)]


def long_runs(flat: np.ndarray, shards: np.ndarray) -> Optional[list[int]]:
    """Bounds of the runs of consecutive samples of one shard in ``flat``, if the runs average more
    than 8 samples (then decoding run by run in order beats per-sample lookups); else None."""
    cuts = run_cuts(flat, shards)
    if (len(cuts) - 1) * 8 >= len(flat):
        return None
    return [0, *cuts]


def _looked_up(getters, chunk) -> list:
    """A chunk's samples looked up one by one (as :meth:`PassReader.samples` does), as a list."""
    out: list = []
    found, miss, own = getters.found, getters.miss, getters.own
    for shard, off in zip(chunk.shards.tolist(), chunk.local.tolist()):
        if own is not None and shard != own:
            getters.leave()
            own = None
        get = found.get(shard)
        if get is None:
            get = miss(shard)
            own = getters.own
        out.append(get(off))
    return out
