"""Who reads which position after a resume on another number of readers: the unread positions, dealt evenly.

A pass saved by ``R`` readers stands at one frontier per reader; what no reader has read is an
:class:`~.partition.Unread` set (the positions beyond the reader furthest behind, less those some
reader had read ahead, plus what a chain's stages held and hands back to be read again). On
``R'`` readers, :func:`deal_unread` lines up those positions in increasing order, the *compacted
sequence* ``s_0 < s_1 < ...``, and deals its indices as a fresh pass deals positions
(:class:`~.partition.Grid`: blocks of consecutive indices round-robin, the last round split evenly), so:

- every unread position is read exactly once, by one reader, in increasing order (a reader's progress
  stays one number, its frontier: index ``i`` is read once the frontier passes ``s_i``);
- every reader owns as many positions as every other: with ``remainder="pad"`` the sequence is
  lengthened to a multiple of ``R'`` with fewer than ``R'`` padding positions, taken past every position
  an earlier pass of the epoch padded with (a padded plan reads position ``plan end + i`` as the epoch's
  ``i``-th sample); with ``"drop"`` it is cut to one, fewer than ``R'`` of its last positions left out.

The sequence is held as a :class:`CompactGrid`: ``extra`` (positions below ``anchor``), then
``[anchor, end)`` less ``skip``; index ``i`` of the range part is ``anchor + i + #{t: skip_t - anchor - t <= i}``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .partition import Grid, Unread

KIND = "unread"  # the "deal" of a CompactGrid's description


class CompactGrid:
    """The positions ``extra`` then ``[anchor, end)`` less ``skip`` (the compacted sequence, see the module
    docstring), their indices dealt among ``readers`` as :meth:`Grid.even` deals ``[0, size)``. ``pads``: the
    first position past the plan that no pass of the epoch has padded with yet."""

    def __init__(self, anchor: int, end: int, block: int, readers: int, skip=(), extra=(), pads: int = 0) -> None:
        self.anchor, self.end, self.block, self.readers = int(anchor), int(end), int(block), int(readers)
        self.skip = np.unique(np.asarray(skip, np.int64))
        self.extra = np.unique(np.asarray(extra, np.int64))
        self.pads = max(int(pads), self.end)
        self.unread_set = Unread(self.anchor, self.skip, self.extra)
        self.size = self.extra.size + max(self.end - self.anchor, 0) - self.skip.size
        self.inner = Grid.even(0, self.size, self.block, self.readers, "keep")
        self.added = 0  # positions dealt past what was left (> 0: padding) or left out (< 0), when dealt here

    @property
    def balanced(self) -> bool:
        """Whether every reader owns as many positions as every other."""
        return self.size % self.readers == 0

    def positions(self, index) -> np.ndarray:
        """The positions at indices ``index`` of the sequence."""
        i = np.asarray(index, np.int64)
        ne = self.extra.size
        if not ne:
            return self.unread_set.nth(i)
        inside = i < ne
        return np.where(inside, self.extra[np.minimum(i, ne - 1)], self.unread_set.nth(np.maximum(i - ne, 0)))

    def index(self, position: int) -> int:
        """How many positions of the sequence lie below ``position``."""
        p = int(position)
        below = int(np.searchsorted(self.extra, p))
        if p <= self.anchor:
            return below
        q = min(p, self.end)
        return self.extra.size + max(q - self.anchor, 0) - int(np.searchsorted(self.skip, q))

    def first(self, reader: int) -> int:
        """The frontier of ``reader`` before it read anything."""
        i = self.inner.first(reader)
        return int(self.positions([i])[0]) if i < self.size else self.end

    def owned(self, reader: int, lo: int, hi: int) -> np.ndarray:
        """``reader``'s positions in ``[lo, hi)``, in order."""
        return self.positions(self.inner.owned(reader, self.index(lo), self.index(hi)))

    def chunks(self, reader: int, frontier: int) -> Iterator[np.ndarray]:
        """``reader``'s positions from ``frontier`` on, in chunks."""
        for idx in self.inner.chunks(reader, self.index(frontier)):
            yield self.positions(idx)

    def unread(self, frontiers, returned=()) -> Unread:
        """The positions no reader has read when reader ``j`` stands at ``frontiers[j]``, with ``returned``
        among them (see :meth:`Grid.unread`)."""
        at = [self.index(f) for f in frontiers]
        a = min(at) if at else self.size
        ahead = [self.inner.owned(j, a, i) for j, i in enumerate(at)]
        read = self.positions(np.concatenate(ahead)) if ahead else np.zeros(0, np.int64)
        if a < self.extra.size:
            base = Unread(self.anchor, self.skip, self.extra[a:])
        else:
            anchor = int(self.positions([a])[0]) if a < self.size else self.end
            base = Unread(anchor, self.skip[self.skip >= anchor])
        return base.less(read).plus(returned)

    def pads_from(self, plan_end: int) -> int:
        return max(self.pads, int(plan_end))

    def describe(self) -> dict:
        return {"deal": KIND, "anchor": self.anchor, "end": self.end, "block": self.block, "readers": self.readers,
                "skip": self.skip.tolist(), "extra": self.extra.tolist(), "pads": self.pads}


def deal_unread(unread: Unread, limit: int, pads: int, block: int, readers: int,
                remainder: str = "pad") -> CompactGrid:
    """``unread``'s positions below ``limit`` dealt evenly among ``readers`` (see the module docstring); padding
    positions start at ``pads`` (at or past ``limit``)."""
    limit, pads, readers = int(limit), int(pads), int(readers)
    extra = unread.extra[unread.extra < limit]
    anchor = unread.anchor
    real = unread.count(limit)
    n = real - real % readers if remainder == "drop" else -(-real // readers) * readers
    if n <= extra.size:
        grid = CompactGrid(anchor, anchor, block, readers, (), extra[:n], pads)
    elif n <= real:
        skip = unread.skip[unread.skip < limit]
        end = int(unread.nth(n - extra.size - 1)) + 1
        grid = CompactGrid(anchor, end, block, readers, skip[skip < end], extra, pads)
    else:
        skip = unread.skip[unread.skip < limit]
        gap = np.arange(max(anchor, limit), pads, dtype=np.int64)  # past the plan, dealt before: not again
        end = pads + n - real
        grid = CompactGrid(anchor, end, block, readers, np.concatenate([skip, gap]), extra, end)
    grid.added = n - real
    return grid


def grid_of(described: dict, plan_end: int):
    """The grid a state describes (a :class:`CompactGrid`, or a :class:`Grid` in every shape states had before)."""
    g = described
    if g.get("deal") == KIND:
        return CompactGrid(int(g["anchor"]), int(g["end"]), int(g["block"]), int(g["readers"]), g.get("skip") or (),
                           g.get("extra") or (), int(g.get("pads", 0)))
    return Grid(int(g["anchor"]), int(g.get("end", plan_end)), int(g["block"]), int(g["readers"]),
                g.get("skip") or None, g.get("tail"))
