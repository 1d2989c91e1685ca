"""The source stage: one reader's share of a pass of the plan, as ``(position, sample)`` items.

A pipeline reads the plan of its root dataset as ONE global sequence of positions (the
order of the epoch: shuffled, mixed from streams by weight, the same on every world) and
deals it among its readers (ranks x DataLoader workers) in blocks: positions
``[anchor + b*block, anchor + (b+1)*block)`` go to reader ``b % readers`` (:class:`Grid`).
The last round of blocks, which the epoch fills only in part, is split evenly: each reader
takes one run of ``tail`` consecutive positions. A fresh pass (:meth:`Grid.even`) makes
every reader's share equally long: the epoch is padded to a multiple of the readers with
its first samples (fewer than ``readers`` repeats, as torch's ``DistributedSampler`` pads),
or, with the root's ``epoch_tail="drop"``, cut to one (fewer than ``readers`` left out).
A padded position ``end + i`` reads the sample of position ``origin + i`` (:class:`PaddedPlan`).

Each reader reads its positions in increasing order, so its progress is one number, the
*frontier*: every position of its share below it has been read. Positions that an earlier
run on another world had already read are listed in the grid's ``skip`` and left out.

Samples are read through the engine's pass reader (prefetch, pins, run decoding), and
again by position when a stage restores what it held (:meth:`SourceStage.recreate`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Optional

import numpy as np

from .reading import PassReader
from ..plan import World
from .stage import ReaderContext, Stage

DEFAULT_BLOCK = 64  # positions per block: consecutive plan positions share shards
_CHUNK_BLOCKS = 32  # blocks per chunk handed to the pass reader
_SPAN_MAX = 1 << 22  # positions a recreate looks up as one range at most


class Grid:
    """How positions ``[anchor, end)`` are dealt among ``readers`` (see the module docstring): whole rounds of
    ``readers`` blocks of ``block`` positions, then the last, partial round (from ``rounds_end``) in blocks of
    ``tail`` positions, reader ``j``'s being ``[rounds_end + j*tail, rounds_end + (j+1)*tail)`` (cut at ``end``).
    A grid made by :meth:`even` ends where every reader owns as many positions as the others."""

    def __init__(self, anchor: int, end: int, block: int, readers: int, skip=None, tail=None) -> None:
        self.anchor, self.end, self.block, self.readers = int(anchor), int(end), int(block), int(readers)
        self.skip = np.zeros(0, np.int64) if skip is None else np.unique(np.asarray(skip, np.int64))
        span = self.block * self.readers
        self.rounds_end = self.anchor + max(self.end - self.anchor, 0) // span * span
        self.tail = self.block if tail is None else int(tail)

    @classmethod
    def even(cls, anchor: int, end: int, block: int, readers: int, remainder: str = "pad", skip=None) -> "Grid":
        """The grid of ``[anchor, end)`` whose last, partial round is split evenly: ``remainder="pad"`` ends it
        past ``end`` so that every reader owns as many positions (fewer than ``readers`` more), ``"drop"``
        before (fewer than ``readers`` left out), ``"keep"`` at ``end`` (the last readers own up to one
        position less)."""
        span = int(block) * int(readers)
        m = max(int(end) - int(anchor), 0) % span
        if m == 0:
            return cls(anchor, end, block, readers, skip)
        tail = m // readers if remainder == "drop" else -(-m // readers)
        stop = int(end) if remainder == "keep" else int(end) - m + readers * tail
        return cls(anchor, stop, block, readers, skip, tail)

    @property
    def balanced(self) -> bool:
        """Whether every reader owns as many positions as every other (and none is skipped)."""
        return not self.skip.size and (self.rounds_end == self.end
                                       or self.end - self.rounds_end == self.readers * self.tail)

    def first(self, reader: int) -> int:
        """The frontier of ``reader`` before it read anything."""
        if self.rounds_end > self.anchor:
            return self.anchor + reader * self.block
        return min(self.anchor + reader * self.tail, self.end)

    def owned(self, reader: int, lo: int, hi: int) -> np.ndarray:
        """``reader``'s positions in ``[lo, hi)`` (skipped ones included), in order."""
        lo, hi = max(int(lo), self.anchor), min(int(hi), self.end)
        out = self._rounds(reader, lo, min(hi, self.rounds_end)) if lo < self.rounds_end else None
        if hi > self.rounds_end and self.tail > 0:
            a = self.rounds_end + reader * self.tail
            a, b = max(a, lo), min(a + self.tail, hi)
            if b > a:
                last = np.arange(a, b, dtype=np.int64)
                return last if out is None else np.concatenate([out, last])
        return np.zeros(0, np.int64) if out is None else out

    def _rounds(self, reader: int, lo: int, hi: int) -> np.ndarray:
        k, r = self.block, self.readers
        b0 = (lo - self.anchor) // k
        b0 += (reader - b0) % r  # first block of this reader at or after lo's block
        b1 = (hi - self.anchor + k - 1) // k
        blocks = np.arange(b0, b1, r, dtype=np.int64)
        pos = ((self.anchor + blocks * k)[:, None] + np.arange(k, dtype=np.int64)[None, :]).ravel()
        return pos[(pos >= lo) & (pos < hi)]

    def chunks(self, reader: int, frontier: int) -> Iterator[np.ndarray]:
        """``reader``'s positions from ``frontier`` on, skipped ones left out, in chunks."""
        span = self.block * self.readers * _CHUNK_BLOCKS
        lo = max(frontier, self.anchor)
        while lo < self.end:
            hi = min(lo + span, self.end)
            pos = self.owned(reader, lo, hi)
            if self.skip.size and pos.size:
                pos = pos[~_member(pos, self.skip)]
            if pos.size:
                yield pos
            lo = hi

    def describe(self) -> dict:
        return {"anchor": self.anchor, "block": self.block, "readers": self.readers,
                "skip": self.skip.tolist(), "end": self.end, "tail": self.tail}


class PaddedPlan:
    """``plan`` read through a grid that ends past it: position ``plan.end + i`` is the sample of position
    ``plan.origin + i`` (modulo the plan's length); positions inside the plan are its own."""

    def __init__(self, plan, end: int) -> None:
        self.inner, self.origin, self.end = plan, plan.origin, max(int(end), plan.end)

    def sample_ids(self, positions) -> np.ndarray:
        p = np.asarray(positions, np.int64)
        real = self.inner.end
        over = p >= real
        if over.any():
            p = np.where(over, self.origin + (p - real) % max(real - self.origin, 1), p)
        return self.inner.sample_ids(p)


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    at = np.searchsorted(sorted_set, values)
    at[at == sorted_set.size] = 0
    return sorted_set[at] == values


class _GridPlan:
    """What the pass reader asks of a plan, for a reader's grid positions (recorded as they go)."""

    def __init__(self, plan, positions: Iterator[np.ndarray], seen: deque) -> None:
        self.plan, self.positions, self.seen = plan, positions, seen

    def device_batch(self, world) -> int:
        return 1

    def iter_worker(self, world, start=None):
        for pos in self.positions:
            self.seen.append(pos)
            yield None, self.plan.sample_ids(pos)


class _GridPass:
    def __init__(self, plan) -> None:
        self.plan, self.world, self.start, self.yielded = plan, World(), 0, 0


class SourceStage(Stage):
    """Reader ``ctx.reader``'s positions of ``grid`` in the epoch plan ``plan`` of ``root``."""

    name = "source"

    def __init__(self, root, plan, epoch: int, grid: Grid, ctx: ReaderContext) -> None:
        super().__init__(None, ctx)
        self.root, self.epoch, self.grid = root, epoch, grid
        self.plan = PaddedPlan(plan, grid.end) if grid.end > plan.end else plan
        self.frontier = grid.first(ctx.reader)
        self._it: Optional[Iterator[Any]] = None
        self._span = None  # (first position, sample ids) of the last range looked up for recreate

    def _open(self) -> Iterator[tuple[int, Any]]:
        seen: deque = deque()
        chunks = self.grid.chunks(self.ctx.reader, self.frontier)
        root = self.root
        current = _GridPass(_GridPlan(self.plan, chunks, seen))
        reader = PassReader(root.table, current, None, predownload=root.predownload, threads=root.download_threads,
                            limit=root.cache_limit, shuffle=bool(root.options.shuffle))
        samples = reader.samples()
        pos: list = []
        i = 0
        try:
            for sample in samples:
                if i == len(pos):
                    pos, i = seen.popleft().tolist(), 0
                p = pos[i]
                i += 1
                yield p, sample
        finally:
            samples.close()

    def next(self) -> tuple[int, Any]:
        if self._it is None:
            self._it = self._open()
        p, sample = next(self._it)
        self.frontier = p + 1
        return p, sample

    def get_state(self) -> dict:
        return {"frontier": self.frontier}

    def reset(self, state: Optional[dict] = None) -> None:
        self.close()
        self.frontier = self.grid.first(self.ctx.reader) if not state else int(state["frontier"])

    def recreate(self, keys: list) -> list:
        """The samples at plan positions ``keys``, read again (grouped by shard)."""
        if not keys:
            return []
        ids = self._ids(np.asarray(keys, np.int64))
        table = self.root.table
        flat, shards, local = table.locate(ids)
        out: list = [None] * len(keys)
        order = np.argsort(shards, kind="stable")
        get, last = None, -1
        for i in order.tolist():
            s = int(shards[i])
            if s != last:
                get, last = table.getter(s), s
            out[i] = get(int(local[i]))
        return out

    def _ids(self, pos: np.ndarray) -> np.ndarray:
        """Sample ids of scattered positions: through one vectorised lookup of the range they span, kept
        for the next call (a resume asks several times for positions near the frontier)."""
        lo, hi = int(pos.min()), int(pos.max()) + 1
        span = self._span
        if span is None or lo < span[0] or hi > span[0] + len(span[1]):
            if hi - lo > _SPAN_MAX:
                return self.plan.sample_ids(pos)
            lo = max(lo - 4096, self.plan.origin)
            hi = min(max(hi + 4096, self.frontier), self.plan.end)
            span = self._span = (lo, self.plan.sample_ids(np.arange(lo, hi, dtype=np.int64)))
        return span[1][pos - span[0]]

    def locate(self, key: Any) -> str:
        from .keys import positions

        p = positions(key)[0]
        sid = int(self.plan.sample_ids(np.asarray([p], np.int64))[0])
        table = self.root.table
        shard = table.shard_of(sid)
        return f"plan position {p} of epoch {self.epoch}: row {sid - table.starts[shard]} of {table.describe(shard)}"

    def close(self) -> None:
        it, self._it = self._it, None
        if it is not None:
            it.close()
