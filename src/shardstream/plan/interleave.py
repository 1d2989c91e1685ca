"""Interleaving streams: which stream fills each slot of an epoch, in closed form.

Stream ``s`` has ``K_s`` elements (samples, device batches or global batches) for the
epoch. Its ``j``-th element gets a *due time* ``x = F_s^-1((j + u) / K_s)`` in
``[0, 1)``: ``u`` is 1/2, or with ``jitter`` a keyed uniform number per element, and
``F_s`` is the identity for constant weights or the stream's share of the epoch due
by time ``x`` under a schedule (:class:`~shardstream.plan.mix.Warp`). The epoch's
slots are all elements sorted by ``(due time, stream)``. So every stretch of slots
holds each stream near its weight there, and each stream's elements come in order
(its sub-plan is read as a prefix, which is what makes resuming exact).

Nothing of size O(slots) exists: the number of elements of each stream due before
time ``x`` has a closed form (corrected against the exact due times), the total due
before ``x`` is within ``S`` of ``M x`` for ``S`` streams and ``M`` slots, so the
elements of any range of slots are found in a window of ``range + 2 S`` candidates.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .keyed import derive, hash_index
from .mix import Warp

_CELLS = 1 << 20  # rows x streams handled at once


class StreamInterleave:
    """Which stream's element fills each slot of an epoch, for ``counts[s]`` elements of stream ``s``."""

    def __init__(self, counts, jitter_key: Optional[int] = None, warp: Optional[Warp] = None) -> None:
        self.counts = np.asarray(counts, np.int64)
        self.streams = self.counts.size
        self.total = int(self.counts.sum())
        self.key = jitter_key
        self.warp = warp
        self._stream_keys = None if jitter_key is None else hash_index(derive(jitter_key, 5), np.arange(self.streams))
        self._live = np.flatnonzero(self.counts > 0)

    # -- due times ---------------------------------------------------------------------------
    def due(self, s: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Due time of element ``j`` of stream ``s`` (arrays of equal shape)."""
        s = np.asarray(s, np.int64)
        j = np.asarray(j, np.int64)
        if self._stream_keys is None:
            u = 0.5
        else:
            u = (hash_index(self._stream_keys[s], j) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        y = (j + u) / np.maximum(self.counts[s], 1)
        return y if self.warp is None else self.warp.inverse(y, s)

    def below(self, x: np.ndarray) -> np.ndarray:
        """Elements of each stream due before time ``x[r]``: shape ``(len(x), streams)``."""
        x = np.asarray(x, np.float64)
        out = np.zeros((x.size, self.streams), np.int64)
        live = self._live
        if not live.size or not x.size:
            return out
        xs = np.broadcast_to(x[:, None], (x.size, live.size))
        ss = np.broadcast_to(live[None, :], xs.shape)
        y = xs if self.warp is None else self.warp.forward(xs, ss)
        k = self.counts[live][None, :]
        j = np.clip(np.floor(y * k).astype(np.int64), 0, k)
        while True:  # correct the estimate against the exact due times (a step or two)
            down = (j > 0) & (self.due(ss, np.maximum(j - 1, 0)) >= xs)
            up = (j < k) & ~down & (self.due(ss, np.minimum(j, k - 1)) < xs)
            if not (down.any() or up.any()):
                break
            j = j - down + up
        out[:, live] = j
        return out

    # -- slots ----------------------------------------------------------------------------------
    def locate(self, starts, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Stream and element index of slots ``starts[r] + i`` for ``i < length``: two ``(rows, length)`` arrays.

        Every ``starts[r] + length`` must be at most the number of slots.
        """
        starts = np.asarray(starts, np.int64).ravel()
        streams = np.empty((starts.size, length), np.int64)
        elems = np.empty((starts.size, length), np.int64)
        rows = max(1, _CELLS // max(self.streams, 1) // max(1, length // 64 + 1))
        for lo in range(0, starts.size, rows):
            streams[lo:lo + rows], elems[lo:lo + rows] = self._locate(starts[lo:lo + rows], length)
        return streams, elems

    def progress(self, slot: int) -> np.ndarray:
        """Elements of each stream in slots ``[0, slot)``."""
        if slot <= 0:
            return np.zeros(self.streams, np.int64)
        if slot >= self.total:
            return self.counts.copy()
        a = np.asarray([slot], np.int64)
        before, row, ss, _, base = self._window(a, 0)
        keep = ss[: slot - int(base[0])]
        return before[0] + np.bincount(keep, minlength=self.streams)

    def _window(self, a: np.ndarray, length: int):
        """The elements due in a window around slots ``[a[r], a[r] + length)``, sorted by
        (row, due time, stream); with the per-row counts due before the window."""
        m, spread = self.total, self.streams + 2
        xa = np.maximum((a - spread) / m, 0.0)
        xb = (a + length + spread) / m + 1e-12
        ca, cb = self.below(xa), self.below(xb)
        for _ in range(64):  # widen where the bound did not hold (rounding)
            bad_a = ca.sum(1) > a
            bad_b = (cb.sum(1) < a + length) & (xb <= 2.0)
            if not (bad_a.any() or bad_b.any()):
                break
            xa = np.where(bad_a, np.maximum(xa - spread / m, 0.0), xa)
            xb = np.where(bad_b, xb + spread / m, xb)
            ca, cb = self.below(xa), self.below(xb)
        n = (cb - ca).ravel()
        row = np.repeat(np.repeat(np.arange(a.size), self.streams), n)
        ss = np.repeat(np.tile(np.arange(self.streams), a.size), n)
        jj = np.repeat(ca.ravel(), n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        order = np.lexsort((ss, self.due(ss, jj), row))
        return ca, row[order], ss[order], jj[order], ca.sum(1)

    def _locate(self, a: np.ndarray, length: int):
        _, row, ss, jj, base = self._window(a, length)
        sizes = np.bincount(row, minlength=a.size)
        rank = np.arange(row.size) - np.repeat(np.cumsum(sizes) - sizes, sizes) + base[row]
        keep = (rank >= a[row]) & (rank < a[row] + length)
        return ss[keep].reshape(a.size, length), jj[keep].reshape(a.size, length)
