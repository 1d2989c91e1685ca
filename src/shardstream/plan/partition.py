"""Who reads which position: the two ways a pass of the epoch plan is dealt among readers.

- **Steps** (:class:`StepCut`, what a ``StreamingDataset`` reads, mosaicml-streaming's): the plan's
  global steps are cut among ranks and DataLoader workers, below.
- **Blocks** (:class:`Grid`, what a chain of operations reads): the plan's positions are dealt in
  blocks of consecutive positions, round-robin among the readers (ranks x workers, rank-major); a
  fresh pass (:meth:`Grid.even`) gives every reader an equally long share, padding the epoch with
  fewer than ``readers`` of its first samples (:class:`PaddedPlan`: position ``end + i`` reads
  position ``origin + i``) or, with ``epoch_tail="drop"``, leaving out fewer than ``readers``. A
  reader reads its positions in increasing order, so its progress is one number (its frontier), and
  a checkpoint moves to another number of readers by a new grid from the lowest frontier that skips
  the positions read beyond it.

The step cut: how the regions share global batches, and how a global batch is cut among ranks and workers.

With ``C`` regions and a global batch of ``G`` positions, let ``d = gcd(C, G)``.
Every global step is cut into ``d`` equal slices of ``a = G/d`` offsets, and slice
``n`` belongs to the ``b = C/d`` regions ``n*b .. n*b + b - 1``, which take its
positions round-robin, counting across steps: the ``j``-th position the slice
group has ever supplied (``j = k*a + o'`` at offset ``o'`` of step ``k``) is sample
``j // b`` of region ``n*b + j % b``. Hence

- every region moves at the same pace, within one sample;
- when the physical node count ``P`` divides both ``C`` and ``G``, node ``n``'s part
  of every global batch (offsets ``[n*G/P, (n+1)*G/P)``) is served by regions
  ``n*C/P .. (n+1)*C/P - 1`` only, so the node reads only those regions' shards;
- position -> (region, sample of region) is closed-form arithmetic.

Ranks take consecutive per-device batches of every global step, in rank order;
DataLoader workers of a rank take whole steps round-robin, which is the order in
which a PyTorch DataLoader collects them. A pass that starts inside a step (a state
saved mid-step, resumed on the same global batch) reads the rest of that step first,
cut evenly among the ranks in rank order (the worker whose turn that step is), then
whole steps, so the steps and the padding are the epoch's own and every rank has the
same number of steps; only when fewer positions than ranks are left in that step does
a rank without one begin with the next step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError

class RegionInterleave:
    """The region schedule for ``regions`` regions and a global batch of ``g``."""

    def __init__(self, regions: int, g: int) -> None:
        self.regions = regions
        self.g = g
        d = math.gcd(regions, g) if regions else 1
        self.a = g // d  # offsets per slice per step
        self.b = max(regions // d, 1)  # regions per slice

    def locate(self, k: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Region and region-local index of offset ``o`` of step ``k``."""
        n, inner = np.divmod(o, self.a)
        j = k * self.a + inner
        q, r = np.divmod(j, self.b)
        return n * self.b + r, q

    def _count(self, x, c):
        """How many of the first ``x`` positions of ``c``'s slice group went to region ``c``."""
        r = np.asarray(c, np.int64) % self.b
        return np.maximum((np.asarray(x, np.int64) - r + self.b - 1) // self.b, 0)

    def consumed(self, k) -> np.ndarray:
        """Samples each region has supplied after ``k`` whole steps."""
        c = np.arange(self.regions, dtype=np.int64)
        return self._count(np.int64(k) * self.a, c)

    def progress(self, position: int) -> np.ndarray:
        """Samples each region has supplied to positions ``[0, position)``."""
        k, o = divmod(int(position), self.g)
        c = np.arange(self.regions, dtype=np.int64)
        inner = np.clip(o - (c // self.b) * self.a, 0, self.a)
        return self._count(k * self.a + inner, c)

    def steps(self, remaining, tail: str) -> int:
        """Global steps until the regions holding ``remaining`` samples are done.

        ``pad``: the fewest steps after which every region is used up (regions that
        run out first repeat samples). ``drop``: the most steps in which no region
        runs out (the other regions' last samples are left out).
        """
        r = np.maximum(np.asarray(remaining, np.int64), 0)
        if r.size == 0:
            return 0
        c = np.arange(self.regions, dtype=np.int64) % self.b
        if tail == "pad":  # smallest k with k*a >= (r - 1)*b + c + 1
            need = np.where(r > 0, -(-((r - 1) * self.b + c + 1) // self.a), 0)
            return int(need.max())
        return int(((r * self.b + c) // self.a).min())  # largest k with k*a <= r*b + c


@dataclass(frozen=True)
class World:
    """Who is reading: physical nodes, ranks per node, DataLoader workers per rank.

    ``num_workers=0`` means the rank reads in its own process (one reader).
    ``replication`` ranks in a row receive the same samples (tensor parallelism).
    """

    num_nodes: int = 1
    ranks_per_node: int = 1
    node: int = 0
    local_rank: int = 0
    num_workers: int = 0
    worker: int = 0
    replication: int = 1

    def __post_init__(self) -> None:
        for name in ("num_nodes", "ranks_per_node", "replication"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name}={value!r} must be an int >= 1")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise InvalidArgumentError(f"num_workers={self.num_workers!r} must be an int >= 0")
        _index("node", self.node, self.num_nodes)
        _index("local_rank", self.local_rank, self.ranks_per_node)
        _index("worker", self.worker, max(self.num_workers, 1))
        if self.world_size % self.replication:
            raise InvalidArgumentError(
                f"replication={self.replication} must divide the number of ranks ({self.world_size}); "
                "choose a replication factor that divides nodes * ranks_per_node"
            )

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.ranks_per_node

    @property
    def rank(self) -> int:
        return self.node * self.ranks_per_node + self.local_rank

    @property
    def readers(self) -> int:
        """Ranks that read distinct samples."""
        return self.world_size // self.replication

    @property
    def reader(self) -> int:
        return self.rank // self.replication

    @property
    def workers(self) -> int:
        return max(self.num_workers, 1)


def _index(name: str, value, count: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise InvalidArgumentError(f"{name}={value!r} must be an int in [0, {count})")


class StepCut:
    """How a plan's global steps are cut among ranks and workers. A plan supplies
    ``origin``, ``global_batch``, ``steps`` and ``sample_ids(positions)``."""

    origin: int
    global_batch: int
    steps: int

    def device_batch(self, world: World) -> int:
        """Samples per rank per step."""
        if self.global_batch % world.readers:
            raise InvalidArgumentError(
                f"the global batch of {self.global_batch} samples does not split evenly over {world.readers} "
                "ranks; use a per-device batch_size such that batch_size * ranks stays the same"
            )
        return self.global_batch // world.readers

    def rank_start(self, world: World, start: int | None = None) -> int:
        """Where ``world``'s rank begins to read from global position ``start`` on: ``start`` itself, or
        the next step's first position when ``start`` lies inside a step whose rest leaves the rank
        nothing (see :meth:`head`)."""
        start = self.origin if start is None else start
        lo, hi = self._rest_share(world, start)
        if lo == hi:
            return start - (start - self.origin) % self.global_batch + self.global_batch
        return start

    def _rest_share(self, world: World, start: int) -> tuple[int, int]:
        """``[lo, hi)``: ``world``'s rank's share of the rest of the step that ``start`` interrupts, the rest
        cut evenly among the ranks in rank order; ``(start, start + 1)`` at a step boundary."""
        offset = (start - self.origin) % self.global_batch
        if not offset:
            return start, start + 1
        left, r, n = self.global_batch - offset, world.reader, world.readers
        return start + r * left // n, start + (r + 1) * left // n

    def worker_steps(self, world: World, start: int | None = None) -> range:
        """The global steps that ``world``'s worker reads from global position ``start`` on; a step that
        ``start`` interrupts is the first, read from ``start`` on (see :meth:`head`), unless the rank's
        share of it lies before ``start``."""
        first = (self.rank_start(world, start) - self.origin) // self.global_batch
        return range(first + world.worker, self.steps, world.workers)

    def head(self, world: World, start: int | None) -> np.ndarray | None:
        """Global positions of ``world``'s share of the step that ``start`` interrupts (its rest, cut evenly
        among the ranks); None when ``start`` is at a step boundary, the rest leaves the rank nothing, or
        the step is another worker's."""
        start = self.rank_start(world, start)
        first, offset = divmod(start - self.origin, self.global_batch)
        if not offset or world.worker or first >= self.steps:
            return None
        lo, hi = self._rest_share(world, start)
        return np.arange(lo, hi, dtype=np.int64)

    def worker_positions(self, world: World, steps) -> np.ndarray:
        """Global positions of ``world``'s share of ``steps`` (shape ``(len(steps), device_batch)``)."""
        bs = self.device_batch(world)
        ks = np.asarray(steps, np.int64)
        return (self.origin + ks[:, None] * self.global_batch + world.reader * bs
                + np.arange(bs, dtype=np.int64)[None, :])

    def steps_done(self, world: World, start: int, yielded: int) -> int:
        """How many of the worker's steps from ``start`` on are wholly read after ``yielded`` samples
        (an interrupted first step counts once its share from ``start`` on is read)."""
        bs = max(self.device_batch(world), 1)
        head = self.head(world, start)
        if head is None:
            return yielded // bs
        return 0 if yielded < head.size else 1 + (yielded - head.size) // bs

    def iter_worker(self, world: World, start: int | None = None,
                    chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(steps, sample_ids)`` chunks of the worker's share, ``sample_ids`` one row per step; an
        interrupted first step comes alone, as a row of the rest of its share (see :meth:`head`)."""
        steps = self.worker_steps(world, start)
        head = self.head(world, start)
        if head is not None:
            yield np.asarray(steps[:1], np.int64), self.sample_ids(head[None, :])
            steps = steps[1:]
        yield from self.iter_whole(world, steps, chunk)

    def iter_whole(self, world: World, steps: range,
                   chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(steps, sample_ids)`` chunks of ``world``'s share of whole ``steps`` (see :meth:`iter_worker`)."""
        return self.iter_steps(world, steps, chunk)

    def iter_steps(self, world: World, steps: range,
                   chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(steps, sample_ids)`` chunks of ``world``'s share of whole ``steps``."""
        per = max(1, chunk // max(self.device_batch(world), 1))
        for i in range(0, len(steps), per):
            ks = np.asarray(steps[i:i + per], np.int64)
            yield ks, self.sample_ids(self.worker_positions(world, ks))


_CHUNK_BLOCKS = 32  # blocks per chunk of a reader's positions


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
                pos = pos[~member(pos, self.skip)]
            if pos.size:
                yield pos
            lo = hi

    def describe(self) -> dict:
        return {"anchor": self.anchor, "block": self.block, "readers": self.readers,
                "skip": self.skip.tolist(), "end": self.end, "tail": self.tail}

    def unread(self, frontiers, returned=()) -> "Unread":
        """The positions no reader has read when reader ``j`` stands at ``frontiers[j]``, with ``returned``
        (read, but to be read again) among them; unbounded above (see :class:`Unread`)."""
        anchor = min(int(f) for f in frontiers) if len(frontiers) else self.end
        ahead = [self.skip[self.skip >= anchor]] + [self.owned(j, anchor, f) for j, f in enumerate(frontiers)]
        return Unread(anchor).less(np.concatenate(ahead)).plus(returned)

    def pads_from(self, plan_end: int) -> int:
        """The first position past the plan no pass of this epoch has dealt as padding."""
        return max(self.end, int(plan_end))


_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Unread:
    """Positions not read yet: ``extra`` (sorted, every one below ``anchor``), then every position from
    ``anchor`` on that ``skip`` (sorted, each at or above ``anchor``) does not list."""

    anchor: int
    skip: np.ndarray = field(default_factory=lambda: _EMPTY)
    extra: np.ndarray = field(default_factory=lambda: _EMPTY)

    def less(self, read) -> "Unread":
        """Without the positions ``read``."""
        read = np.unique(np.asarray(read, np.int64))
        if not read.size:
            return self
        extra = self.extra[~member(self.extra, read)] if self.extra.size else self.extra
        return Unread(self.anchor, np.union1d(self.skip, read[read >= self.anchor]), extra)

    def plus(self, returned) -> "Unread":
        """With the positions ``returned`` (read before, to be read again)."""
        back = np.unique(np.asarray(returned, np.int64))
        if not back.size:
            return self
        skip = self.skip[~member(self.skip, back)] if self.skip.size else self.skip
        return Unread(self.anchor, skip, np.union1d(self.extra, back[back < self.anchor]))

    def count(self, limit: int) -> int:
        """How many lie below ``limit``."""
        limit = int(limit)
        extra = int(np.searchsorted(self.extra, limit))
        return extra + max(limit - self.anchor, 0) - int(np.searchsorted(self.skip, max(limit, self.anchor)))

    def nth(self, k) -> np.ndarray:
        """The ``k``-th positions from ``anchor`` on (0-based, counted without ``extra``)."""
        k = np.asarray(k, np.int64)
        adj = self.skip - self.anchor - np.arange(self.skip.size, dtype=np.int64)
        return self.anchor + k + np.searchsorted(adj, k, side="right")


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


def member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    at = np.searchsorted(sorted_set, values)
    at[at == sorted_set.size] = 0
    return sorted_set[at] == values
