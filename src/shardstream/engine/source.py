"""The source stage: one reader's share of a pass of the plan, as ``(position, sample)`` items.

A chain reads the plan of its root dataset as ONE global sequence of positions (the order of the
epoch: shuffled, mixed from streams by weight, the same on every world) and deals it among its
readers (ranks x DataLoader workers) in blocks: the *blocks* strategy of
:mod:`shardstream.plan.partition` (:class:`~shardstream.plan.partition.Grid`), which makes every
reader's share of a fresh pass equally long and lets a checkpoint move to another number of readers.

Each reader reads its positions in increasing order, so its progress is one number, the
*frontier*: every position of its share below it has been read. Positions that an earlier
run on another world had already read are listed in the grid's ``skip`` and left out.

Samples are read through the one source node, :class:`~.reading.PassReader` (prefetch, pins, run
decoding), over the reader's :class:`BlockShare`, and again by position when a stage restores what
it held (:meth:`SourceStage.recreate`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Optional

import numpy as np

from ..plan.partition import Grid, PaddedPlan
from .reading import PassReader
from .stage import ReaderContext, Stage

DEFAULT_BLOCK = 64  # positions per block: consecutive plan positions share shards
_SPAN_MAX = 1 << 22  # positions a recreate looks up as one range at most


class BlockShare:
    """A reader's share of a pass dealt in blocks (a :class:`~shardstream.plan.partition.Grid`), as the pass
    reader reads it (see :class:`~.reading.PassReader`): sample ids in chunks, their positions noted in
    ``seen`` as they go."""

    step = 1  # no steps: a chain's readers hand on items, not step batches

    def __init__(self, plan, positions: Iterator[np.ndarray], seen: deque) -> None:
        self.plan, self.positions, self.seen = plan, positions, seen
        self.yielded = 0

    def id_chunks(self) -> Iterator[np.ndarray]:
        for pos in self.positions:
            self.seen.append(pos)
            yield self.plan.sample_ids(pos)


class SourceStage(Stage):
    """Reader ``ctx.reader``'s positions of ``grid`` in the epoch plan ``plan`` of ``root``."""

    name = "source"

    def __init__(self, root, plan, epoch: int, grid: Grid, ctx: ReaderContext) -> None:
        super().__init__(None, ctx)
        self.root, self.epoch, self.grid = root, epoch, grid
        extent = grid.pads_from(plan.end)  # past every position this epoch's passes padded with (stages hold some)
        self.plan = PaddedPlan(plan, extent) if extent > plan.end else plan
        self.frontier = grid.first(ctx.reader)
        self._it: Optional[Iterator[Any]] = None
        self._keys: list = []  # the run being handed on: positions, samples, and how many were handed on
        self._values: list = []
        self._at = 0
        self._span = None  # (first position, sample ids) of the last range looked up for recreate

    def _open(self) -> Iterator[tuple[list, list]]:
        """Runs of ``(positions, samples)``: the pass reader's runs of samples, with their positions."""
        seen: deque = deque()
        chunks = self.grid.chunks(self.ctx.reader, self.frontier)
        root = self.root
        current = BlockShare(self.plan, chunks, seen)
        reader = PassReader(root.table, current, None, predownload=root.predownload, threads=root.download_threads,
                            limit=root.cache_limit, shuffle=bool(root.options.shuffle))
        runs = reader.sample_runs()
        pos: list = []
        i = 0
        try:
            for run in runs:
                at = 0
                while at < len(run):  # a run lies within one chunk of positions; cut it where one ends
                    if i == len(pos):
                        pos, i = seen.popleft().tolist(), 0
                    k = min(len(run) - at, len(pos) - i)
                    yield pos[i:i + k], (run if k == len(run) else run[at:at + k])
                    at += k
                    i += k
        finally:
            runs.close()

    def _fill(self) -> bool:
        """Make the next run of positions and samples the one handed on; False at the end of the pass."""
        if self._it is None:
            self._it = self._open()
        for keys, values in self._it:
            self._keys, self._values, self._at = keys, values, 0
            return True
        self._keys, self._values, self._at = [], [], 0
        return False

    def next(self) -> tuple[int, Any]:
        at = self._at
        if at == len(self._keys):
            if not self._fill():
                raise StopIteration
            at = 0
        self._at = at + 1
        p = self._keys[at]
        self.frontier = p + 1
        return p, self._values[at]

    def next_run(self, n: int) -> tuple[list, list]:
        at = self._at
        if at == len(self._keys):
            if not self._fill():
                return [], []
            at = 0
        keys, values = self._keys, self._values
        if at == 0 and n >= len(keys):
            self._at = len(keys)
        else:
            self._at = min(at + n, len(keys))
            keys, values = keys[at:self._at], values[at:self._at]
        self.frontier = keys[-1] + 1
        return keys, values

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
        self._keys, self._values, self._at = [], [], 0
        if it is not None:
            it.close()
