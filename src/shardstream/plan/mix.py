"""Mixing several streams: per-epoch counts, up- and down-sampling, weight schedules.

- :func:`apportion` turns weights into exact integer counts (largest remainder).
- :class:`Schedule` gives the streams' weights at every sample of the run: constant,
  or moving between given weight vectors by steps, linearly or along a half cosine.
  Its integral over an epoch gives that epoch's exact per-stream counts.
- :class:`StreamDraw` is one stream's samples of one epoch: ``choose // N`` whole
  copies of every shard, then a deterministic partial copy of ``choose % N``
  samples. The partial copy is spread over the shards by systematic sampling of
  *granules* (``granularity`` consecutive samples of one shard) in a keyed shard
  order, so each shard gives its share, and each shard's part is the first samples
  of a keyed order of its granules. It holds one shuffle unit per copy of a shard
  (O(shards x copies)), and a sample is computed on demand.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from .keyed import derive, hash_index, permute, random_order, uniform_below

SCHEDULE_KINDS = ("step", "linear", "cosine")
PURPOSE_DRAW = 11


def apportion(total: int, weights) -> np.ndarray:
    """Non-negative ints summing to ``total``, proportional to ``weights`` (largest remainder;
    ties go to the lower index). Zero weights get zero."""
    w = np.asarray(weights, np.float64)
    if total >= 1 << 53:
        raise InvalidArgumentError(f"cannot share {total} samples exactly in float64; keep epochs below 2**53")
    out = np.zeros(w.size, np.int64)
    if w.size and np.isfinite(w).all() and w.max() > 0:
        w = w / w.max()  # so that the sum cannot overflow
    s = float(w.sum())
    if total <= 0 or s <= 0:
        return out
    quota = w * (total / s)
    out[:] = np.floor(quota)
    rest = quota - out
    short = int(total - out.sum())
    order = np.lexsort((np.arange(w.size), -rest))
    if short > 0:
        order = order[w[order] > 0]
        out[order[:short]] += 1
    elif short < 0:  # rounding pushed a floor up: take back from the smallest remainders
        for i in order[::-1]:
            if short == 0:
                break
            if out[i] > 0:
                out[i] -= 1
                short += 1
    return out


class Schedule:
    """Stream weights as a function of the run's sample position ``r`` (see the module docstring).

    ``points`` is a list of ``(position, weights)``: before the first point its weights
    hold, after the last point the last; between two points the weights move from one
    vector to the next by ``kind`` (``step``: jump at the next point; ``linear``;
    ``cosine``: a half cosine, flat at both ends). Weight vectors are normalised to sum 1.
    """

    def __init__(self, points, kind: str = "linear") -> None:
        if kind not in SCHEDULE_KINDS:
            raise InvalidArgumentError(f"schedule kind={kind!r} is not one of {', '.join(SCHEDULE_KINDS)}")
        if not points:
            raise InvalidArgumentError("a schedule needs at least one (position, weights) point")
        pos = np.asarray([p for p, _ in points], np.float64)
        if np.any(np.diff(pos) <= 0) or pos.min() < 0:
            raise InvalidArgumentError(f"schedule positions must be >= 0 and increasing, got {pos.tolist()}")
        widths = {len(w) for _, w in points}
        if len(widths) != 1:
            raise InvalidArgumentError(f"every schedule point needs one weight per stream; got lengths {sorted(widths)}")
        vec = np.asarray([np.asarray(w, np.float64) for _, w in points])
        if vec.ndim != 2 or not np.isfinite(vec).all() or (vec < 0).any() or (vec.sum(1) <= 0).any():
            raise InvalidArgumentError("schedule weights must be non-negative finite numbers, one per stream, "
                                       "with a positive sum at every point")
        self.kind = kind
        self.pos = pos
        self.vec = vec / vec.sum(1, keepdims=True)
        self.num_streams = vec.shape[1]
        span = np.diff(pos)
        # integral of the weights from pos[0] to each point
        area = np.zeros_like(self.vec)
        for i, length in enumerate(span):
            area[i + 1] = area[i] + length * (self.vec[i] + _ramp_area(kind, 1.0) * (self.vec[i + 1] - self.vec[i]))
        self.area = area

    @property
    def constant(self) -> bool:
        return bool((self.vec == self.vec[0]).all())

    def weights(self, r) -> np.ndarray:
        """Weights at run positions ``r`` (shape ``r.shape + (streams,)``)."""
        r = np.asarray(r, np.float64)
        i, tau = self._piece(r)
        nxt = np.minimum(i + 1, len(self.pos) - 1)
        alpha = _ramp(self.kind, tau)[..., None]
        return self.vec[i] + alpha * (self.vec[nxt] - self.vec[i])

    def primitive(self, r, s) -> np.ndarray:
        """``integral of w_s`` from the first point to ``r`` (negative before it); ``r``, ``s`` broadcast."""
        r, s = np.broadcast_arrays(np.asarray(r, np.float64), np.asarray(s, np.int64))
        i, tau = self._piece(r)
        nxt = np.minimum(i + 1, len(self.pos) - 1)
        start = self.pos[i]
        base = self.area[i, s]
        v0, v1 = self.vec[i, s], self.vec[nxt, s]
        inside = (r > self.pos[0]) & (i < len(self.pos) - 1)
        length = np.where(inside, self.pos[nxt] - start, 0.0)
        ramp = np.where(inside, length * _ramp_area(self.kind, tau) * (v1 - v0), 0.0)
        return base + (r - start) * v0 + ramp

    def totals(self, r0: float, r1: float) -> np.ndarray:
        """Per-stream integral of the weights over ``[r0, r1)``."""
        s = np.arange(self.num_streams)
        return np.maximum(self.primitive(r1, s) - self.primitive(r0, s), 0.0)

    def _piece(self, r: np.ndarray):
        i = np.clip(np.searchsorted(self.pos, r, side="right") - 1, 0, len(self.pos) - 1)
        nxt = np.minimum(i + 1, len(self.pos) - 1)
        length = self.pos[nxt] - self.pos[i]
        tau = np.where(length > 0, np.clip((r - self.pos[i]) / np.where(length > 0, length, 1.0), 0.0, 1.0), 0.0)
        return i, tau


def _ramp(kind: str, tau):
    if kind == "step":
        return np.zeros_like(tau)
    if kind == "linear":
        return tau
    return (1.0 - np.cos(np.pi * tau)) / 2.0


def _ramp_area(kind: str, tau):
    """``integral_0^tau`` of the ramp."""
    if kind == "step":
        return np.zeros_like(tau) if isinstance(tau, np.ndarray) else 0.0
    if kind == "linear":
        return tau * tau / 2.0
    return (tau - np.sin(np.pi * tau) / np.pi) / 2.0


class Warp:
    """Epoch time ``x`` in [0, 1] -> the share of stream ``s``'s epoch samples due by then (and back).

    For constant weights this is the identity; with a schedule, stream ``s`` is due at the
    rate of its weight, so its samples bunch where its weight is high.
    """

    def __init__(self, schedule: Schedule, r0: float, length: float) -> None:
        self.schedule = schedule
        self.r0 = r0
        self.length = length
        s = np.arange(schedule.num_streams)
        self.start = schedule.primitive(r0, s)
        self.total = np.maximum(schedule.primitive(r0 + length, s) - self.start, 1e-300)

    def forward(self, x, s) -> np.ndarray:
        x = np.clip(np.asarray(x, np.float64), 0.0, 1.0)
        s = np.asarray(s, np.int64)
        return np.clip((self.schedule.primitive(self.r0 + x * self.length, s) - self.start[s]) / self.total[s], 0.0, 1.0)

    def inverse(self, y, s) -> np.ndarray:
        """The earliest x with forward(x) >= y, by bisection (monotone in y for every s)."""
        y = np.asarray(y, np.float64)
        s = np.asarray(s, np.int64)
        lo = np.zeros(y.shape)
        hi = np.ones(y.shape)
        for _ in range(52):
            mid = (lo + hi) / 2.0
            below = self.forward(mid, s) < y
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        return hi


def partial_counts(sizes: np.ndarray, r: int, granularity: int, key: int) -> np.ndarray:
    """How many samples of each shard the partial copy of ``r`` samples takes (sums to ``r`` exactly)."""
    sizes = np.asarray(sizes, np.int64)
    out = np.zeros(sizes.size, np.int64)
    if r <= 0 or sizes.size == 0:
        return out
    g = int(granularity)
    granules = -(-sizes // g)
    order = random_order(sizes.size, derive(key, 1))
    ends = np.cumsum(granules[order])
    q = int(ends[-1])
    k = min(q, -(-r // g))
    off = int(uniform_below(derive(key, 2), 0, q))
    # granule positions floor((i*q + off)/k), i < k, systematically spread over the keyed shard order;
    # how many lie below b: clip(ceil((b*k - off)/q), 0, k)
    if q * k < (1 << 62):
        def below(b):
            return np.clip(-((off - b * k) // q), 0, k)
        picked = np.diff(np.concatenate([[0], below(ends)]))
    else:  # beyond int64 products: exact Python ints
        b = [0] + [int(e) for e in ends]
        picked = np.asarray([min(max(-((off - x * k) // q), 0), k) for x in b], np.int64)
        picked = np.diff(picked)
    take = np.minimum(picked * g, sizes[order])
    diff = int(take.sum()) - r
    if diff > 0:  # too many (granule rounding): give back from the end of the shard order
        rev = take[::-1]
        before = np.cumsum(rev) - rev
        rev -= np.clip(diff - before, 0, rev)
        take = rev[::-1].copy()
    elif diff < 0:  # too few (short last granules): fill shards with room, in shard order
        room = sizes[order] - take
        before = np.cumsum(room) - room
        take += np.clip(-diff - before, 0, room)
    out[order] = take
    return out


class StreamDraw:
    """One stream's samples of one epoch (see the module docstring).

    ``unit_sizes`` are the shuffle units (whole copies and partial parts of shards), which
    the stream's epoch plan orders like shards; :meth:`local_ids` maps the plan's
    unit-space ids to the stream's own sample ids.
    """

    def __init__(self, sizes, choose: int, granularity: int, key: int) -> None:
        sizes = np.asarray(sizes, np.int64)
        self.sizes = sizes
        self.choose = int(choose)
        self.granularity = int(granularity)
        self.key = key
        n = int(sizes.sum())
        if n == 0 and choose > 0:
            raise InvalidArgumentError("a stream with no samples cannot supply any")
        copies, rest = divmod(self.choose, n) if n else (0, 0)
        part = partial_counts(sizes, rest, granularity, key)
        reps = np.full(sizes.size, copies, np.int64) + (part > 0)
        self.unit_shard = np.repeat(np.arange(sizes.size, dtype=np.int64), reps)
        self.unit_size = np.repeat(sizes, reps)
        self.unit_partial = np.zeros(self.unit_shard.size, bool)
        last = np.cumsum(reps) - 1
        has = part > 0
        self.unit_size[last[has]] = part[has]
        self.unit_partial[last[has]] = True
        self.unit_starts = np.concatenate([[0], np.cumsum(self.unit_size)[:-1]]).astype(np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.partial = part

    def local_ids(self, v: np.ndarray) -> np.ndarray:
        """Stream sample ids of unit-space ids ``v``."""
        shard, off, part = self.split(v)
        if part.any():
            off = off.copy()
            off[part] = granule_subset(self.subset_keys(shard[part]), self.sizes[shard[part]], off[part],
                                       self.granularity)
        return self.shard_starts[shard] + off

    def split(self, v: np.ndarray):
        """Shard, offset in the unit, and whether the unit is a partial copy, of unit-space ids ``v``."""
        v = np.asarray(v, np.int64)
        j = np.searchsorted(self.unit_starts, v, side="right") - 1
        return self.unit_shard[j], v - self.unit_starts[j], self.unit_partial[j]

    def subset_keys(self, shard: np.ndarray) -> np.ndarray:
        return hash_index(derive(self.key, 3), shard)

    def subset(self, shard: np.ndarray, m: np.ndarray) -> np.ndarray:
        """The ``m``-th sample of ``shard``'s partial copy (see :func:`granule_subset`)."""
        shard, m = np.asarray(shard, np.int64), np.asarray(m, np.int64)
        return granule_subset(self.subset_keys(shard), self.sizes[shard], m, self.granularity)


def granule_subset(keys: np.ndarray, size: np.ndarray, m: np.ndarray, g: int) -> np.ndarray:
    """The ``m``-th sample of a shard's partial copy (a shard of ``size`` samples, keyed by ``keys``):
    its full granules of ``g`` samples in a keyed order, then its tail. All arrays of equal shape."""
    full = size // g
    q = m // g
    inside = q < full
    out = m.copy()
    if inside.any():
        out[inside] = permute(q[inside], full[inside], keys[inside]) * g + m[inside] % g
    return out


def draw_key(seed: int, stream: int, epoch: int, fixed: bool) -> int:
    """The key of a stream's draw: the same every epoch for ``fixed`` sampling."""
    return derive(seed, PURPOSE_DRAW, stream, 0 if fixed else 1, 0 if fixed else epoch)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["SCHEDULE_KINDS", "Schedule", "StreamDraw", "Warp", "apportion", "ceil_div", "draw_key",
           "granule_subset", "partial_counts"]
