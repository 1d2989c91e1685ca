"""The plan of a dataset mixed from several streams: global position -> sample id, lazily.

A :class:`Mixture` holds what is fixed for the run: each stream's shard sizes, and
either absolute per-epoch counts (``repeat`` / ``choose``) or a weight
:class:`~shardstream.plan.mix.Schedule` with an epoch size (``proportion``, constant or
moving). ``mixture.epoch(e, global_batch, device_batch)`` gives a :class:`MixedEpoch`:

1. Each stream's count for the epoch (exact: :func:`~shardstream.plan.mix.apportion`
   of the schedule's integral over the epoch) is drawn as whole copies plus a partial
   copy (:class:`~shardstream.plan.mix.StreamDraw`), and ordered by the stream's own
   epoch plan (one region, shuffled by the dataset's algorithm:
   :class:`~shardstream.plan.epoch.EpochPlan`) over its copies, which the mixed epoch
   reads as a prefix. ``num_canonical_nodes`` therefore does not change a mixed order.
2. The streams are interleaved by ``method``:

   - ``random``: sample by sample, each stream due at the rate of its weight with keyed
     jitter (:class:`~shardstream.plan.interleave.StreamInterleave`); every stretch of
     the epoch, and so every batch, mixes the streams near their weights there.
   - ``stratified``: every global batch holds each stream's share, rounded by largest
     remainder, as one run per stream in stream order. A stream then supplies steps x
     share samples, which may differ from its drawn count: past its count it starts
     again from its first sample, and what it did not reach is left out.
   - ``per_stream``: every global batch comes from one stream; whole batches interleaved.
   - ``device_per_stream``: every device batch (``device_batch`` samples) comes from one
     stream; whole device batches interleaved. The epoch is the same for any number of
     ranks with that device batch.

Positions depend only on the epoch and, for all but ``random``, on the batch that
defines the unit (the global batch; the device batch for ``device_per_stream``), never
on ranks or workers. Sub-plans are built when first read, so a thousand streams cost
their counts and nothing else until used. Tails: ``pad`` completes the last global
batch (repeating the epoch's first units), ``drop`` leaves out what does not fill one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import InvalidArgumentError
from .epoch import EpochPlan, Plan, PlanSpec
from .interleave import StreamInterleave
from .keyed import derive
from .mix import Schedule, StreamDraw, Warp, apportion, ceil_div, draw_key, granule_subset
from .partition import StepCut
from .settings import (BATCHING_METHODS, DEFAULT_BATCHING_METHOD, DEFAULT_SAMPLING_GRANULARITY,
                       DEFAULT_SAMPLING_METHOD, SAMPLING_METHODS, check_choice)

PURPOSE_STREAM = 12
PURPOSE_INTERLEAVE = 13
_SEED_MASK = (1 << 62) - 1
_CHECKPOINT = 1024  # steps between stored stream progress (stratified batches under a schedule)


@dataclass(frozen=True)
class MixSpec:
    method: str = DEFAULT_BATCHING_METHOD
    sampling: str = DEFAULT_SAMPLING_METHOD
    granularity: int = DEFAULT_SAMPLING_GRANULARITY

    def __post_init__(self) -> None:
        check_choice("batching_method", self.method, BATCHING_METHODS)
        check_choice("sampling_method", self.sampling, SAMPLING_METHODS)
        g = self.granularity
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise InvalidArgumentError(f"sampling_granularity={g!r} must be an int >= 1")


class Mixture:
    """The run-fixed part of a mixed dataset (see the module docstring)."""

    def __init__(self, stream_sizes, spec: PlanSpec, mix: MixSpec, *, choose=None,
                 schedule: Optional[Schedule] = None, epoch_size: Optional[int] = None) -> None:
        self.sizes = [np.asarray(s, np.int64) for s in stream_sizes]
        self.spec = spec
        self.mix = mix
        totals = np.asarray([int(s.sum()) for s in self.sizes], np.int64)
        self.stream_samples = totals
        self.base = np.concatenate([[0], np.cumsum(totals)[:-1]]).astype(np.int64)
        if (choose is None) == (schedule is None):
            raise InvalidArgumentError("a mixture takes either per-stream counts or a weight schedule")
        if choose is not None:
            self.choose = np.asarray(choose, np.int64)
            if self.choose.shape != totals.shape or (self.choose < 0).any():
                raise InvalidArgumentError("choose must hold one non-negative count per stream")
            self.schedule = None
            self.epoch_size = int(self.choose.sum())
        else:
            if schedule.num_streams != totals.size:
                raise InvalidArgumentError(
                    f"the schedule has weights for {schedule.num_streams} streams, the dataset has {totals.size}")
            self.choose = None
            self.schedule = schedule
            self.epoch_size = int(totals.sum() if epoch_size is None else epoch_size)
        empty = [i for i, n in enumerate(totals) if n == 0]
        if empty:
            raise InvalidArgumentError(f"streams {empty} have no samples; remove them from streams=[...]")
        if self.epoch_size >= 1 << 53:
            raise InvalidArgumentError(f"epoch_size={self.epoch_size} must stay below 2**53 samples")

    @property
    def num_streams(self) -> int:
        return len(self.sizes)

    def counts(self, epoch: int) -> np.ndarray:
        """Samples each stream supplies to ``epoch`` (sums to ``epoch_size``)."""
        if self.choose is not None:
            return self.choose.copy()
        n = self.epoch_size
        return apportion(n, self.schedule.totals(epoch * n, (epoch + 1) * n))

    def weights_at(self, epoch: int, position: int) -> np.ndarray:
        """The streams' weights in effect at ``position`` of ``epoch``."""
        if self.choose is not None:
            return self.choose / max(self.epoch_size, 1)
        return self.schedule.weights(float(epoch * self.epoch_size + position))

    def warp(self, epoch: int) -> Optional[Warp]:
        if self.schedule is None or self.schedule.constant:
            return None
        return Warp(self.schedule, float(epoch * self.epoch_size), float(self.epoch_size))

    def epoch(self, epoch: int, global_batch: int, device_batch: Optional[int] = None, origin: int = 0) -> MixedEpoch:
        return MixedEpoch(self, epoch, global_batch, device_batch, origin)

    def stream_plan(self, stream: int, epoch: int, count: int, batch: int) -> tuple[EpochPlan, StreamDraw]:
        """Stream ``stream``'s own epoch plan over its draw of ``count`` samples, read ``batch`` at a time."""
        fixed = self.mix.sampling == "fixed"
        draw = StreamDraw(self.sizes[stream], count, self.mix.granularity,
                          draw_key(self.spec.seed, stream, epoch, fixed))
        seed = derive(self.spec.seed, PURPOSE_STREAM, stream) & _SEED_MASK
        # one region: the mixed epoch reads the stream's plan as a prefix, and only a single region
        # supplies every drawn sample exactly once before it pads
        spec = dataclasses.replace(self.spec, seed=seed, tail="pad", num_canonical_nodes=1,
                                   block_size=self.spec.resolved_block_size)
        return Plan(draw.unit_size, spec).epoch(epoch, batch), draw


def _rounded(n: int, unit: int, tail: str) -> int:
    return ceil_div(n, unit) if tail == "pad" else n // unit


class MixedEpoch(StepCut):
    """One epoch of a :class:`Mixture` (see the module docstring)."""

    def __init__(self, mixture: Mixture, epoch: int, global_batch: int, device_batch: Optional[int] = None,
                 origin: int = 0) -> None:
        for name, value in (("epoch", epoch), ("global batch", global_batch)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (name == "global batch"):
                raise InvalidArgumentError(f"{name}={value!r} must be an int >= {int(name == 'global batch')}")
        self.mixture = mixture
        self.epoch = int(epoch)
        self.global_batch = g = int(global_batch)
        self.origin = origin = int(origin)
        self.device_batch_size = device_batch
        self.plan = mixture  # what the epoch was planned from (its ``spec`` holds the order settings)
        self.method = method = mixture.mix.method
        tail = mixture.spec.tail
        self.counts = counts = mixture.counts(self.epoch)
        self.num_samples = n = int(counts.sum())
        shuffle = mixture.spec.shuffle
        jitter = derive(mixture.spec.seed, self.epoch, PURPOSE_INTERLEAVE) if shuffle else None
        warp = mixture.warp(self.epoch)
        self._subs: dict[int, tuple[EpochPlan, StreamDraw]] = {}
        if method == "device_per_stream":
            if device_batch is None or g % device_batch:
                raise InvalidArgumentError(
                    f"batching_method='device_per_stream' needs a device batch that divides the global batch "
                    f"({device_batch!r} does not divide {g}); set batch_size")
            self.unit = int(device_batch)
        else:
            self.unit = 1 if method == "random" else g
        u = self.unit
        if method == "random":
            self.interleave = StreamInterleave(counts, jitter, warp)
            self.steps = _rounded(n - origin, g, tail)
            self.wrap = n
        elif method == "stratified":
            self.steps = _rounded(n, g, tail) - origin // g
            self.wrap = 0
            self._setup_stratified(g)
        else:
            slots = np.asarray([_rounded(int(c), u, tail) for c in counts], np.int64)
            self.interleave = StreamInterleave(slots, jitter, warp)
            self.wrap = self.interleave.total * u
            self.steps = _rounded(self.wrap - origin, g, tail)
        if n == 0 or self.steps < 0:
            self.steps = 0
        if origin % self.unit:
            raise InvalidArgumentError(f"origin {origin} is not a multiple of the mixing unit {self.unit}")

    # -- sizes ------------------------------------------------------------------------------
    @property
    def end(self) -> int:
        return self.origin + self.steps * self.global_batch

    def resume(self, position: int, global_batch: int) -> MixedEpoch:
        """The plan that continues this epoch at ``position`` with ``global_batch``."""
        if not self.origin <= position <= self.end:
            raise InvalidArgumentError(f"position {position} is outside epoch {self.epoch} [{self.origin}, {self.end}]")
        if global_batch == self.global_batch:  # the same steps, a position inside one included
            return self
        return MixedEpoch(self.mixture, self.epoch, global_batch, self.device_batch_size, position)

    @property
    def resume_unit(self) -> Optional[int]:
        """The batch that must stay the same to resume this epoch mid-way (None: any)."""
        return None if self.method == "random" else self.unit

    def nbytes(self) -> int:
        return int(sum(p.plan.run.sizes.nbytes + d.unit_size.nbytes for p, d in self._subs.values()))

    def iter_whole(self, world, steps: range, chunk: int = 65536):
        """As :meth:`StepCut.iter_whole`, in chunks that start at one step and grow: the first
        sample needs only the streams it touches, and with many streams later chunks are larger,
        so each stream's plan is asked for more samples at a time."""
        bs = max(self.device_batch(world), 1)
        most = max(1, chunk * max(1, min(16, self.mixture.num_streams // 32)) // bs)
        i, per = 0, 1
        while i < len(steps):
            ks = np.asarray(steps[i:i + per], np.int64)
            yield ks, self.sample_ids(self.worker_positions(world, ks))
            i += per
            per = min(per * 4, most)

    def weights_at(self, position: int) -> np.ndarray:
        return self.mixture.weights_at(self.epoch, position)

    # -- position -> sample -----------------------------------------------------------------
    def sample_ids(self, positions) -> np.ndarray:
        p = np.asarray(positions, np.int64)
        if p.size and (p.min() < self.origin or p.max() >= self.end):
            raise InvalidArgumentError(f"positions must lie in [{self.origin}, {self.end}) for epoch {self.epoch}; "
                                       f"got values in [{p.min()}, {p.max()}]")
        flat = p.ravel()
        if flat.size == 0:
            return np.empty(p.shape, np.int64)
        streams, sub = self._route(flat)
        out = np.empty(flat.size, np.int64)
        order = np.argsort(streams, kind="stable")
        bounds = np.searchsorted(streams[order], np.arange(self.mixture.num_streams + 1))
        partial = []  # samples of partial copies, mapped for all streams at once
        for s in np.flatnonzero(np.diff(bounds)):
            sel = order[bounds[s]:bounds[s + 1]]
            plan, draw = self._sub(int(s))
            shard, off, part = draw.split(plan.sample_ids(sub[sel]))
            out[sel] = self.mixture.base[s] + draw.shard_starts[shard] + off
            if part.any():
                partial.append((sel[part], draw.subset_keys(shard[part]), draw.sizes[shard[part]], off[part]))
        if partial:
            at, keys, size, off = (np.concatenate(x) for x in zip(*partial))
            out[at] += granule_subset(keys, size, off, self.mixture.mix.granularity) - off
        return out.reshape(p.shape)

    def _sub(self, s: int) -> tuple[EpochPlan, StreamDraw]:
        sub = self._subs.get(s)
        if sub is None:
            batch = self.unit if self.method in ("per_stream", "device_per_stream") else 1
            sub = self._subs[s] = self.mixture.stream_plan(s, self.epoch, int(self.counts[s]), batch)
        return sub

    def _route(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stream and position in that stream's plan of global positions ``p``."""
        if self.method == "stratified":
            return self._route_stratified(p)
        q = p % self.wrap  # the pad of the last step repeats the epoch's first units
        slot, off = np.divmod(q, self.unit)
        streams, elems = self._lookup(slot)
        return streams, elems * self.unit + off

    def _lookup(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Interleave lookups for arbitrary slots: one range if they are dense, else one row per run."""
        u = np.unique(slots)
        cuts = np.flatnonzero(np.diff(u) != 1) + 1
        span = int(u[-1] - u[0] + 1)
        spread = 2 * self.interleave.streams + 8  # candidates a located row costs beyond its length
        heads = np.concatenate([[0], cuts])
        length = int(np.diff(np.concatenate([heads, [u.size]])).max())
        if span + spread * (span // 65536 + 1) <= heads.size * (length + spread):
            starts, length = _cover(int(u[0]), span, self.interleave.total)
        else:
            starts = np.minimum(u[heads], self.interleave.total - length)
        s, j = self.interleave.locate(starts, length)
        # each slot is read from the row with the largest start at or below it (rows leave no gaps)
        row = np.searchsorted(starts, slots, side="right") - 1
        at = row * length + (slots - starts[row])
        return s.ravel()[at], j.ravel()[at]

    # -- stratified ---------------------------------------------------------------------------
    def _setup_stratified(self, g: int) -> None:
        mixture = self.mixture
        self._varying = mixture.warp(self.epoch) is not None
        if not self._varying:
            share = apportion(g, self.counts) if self.num_samples else np.zeros(self.counts.size, np.int64)
            starved = [int(s) for s in np.flatnonzero((self.counts > 0) & (share == 0))]
            if starved:
                named = ", ".join(map(str, starved[:10])) + (f" and {len(starved) - 10} more" if len(starved) > 10 else "")
                raise InvalidArgumentError(
                    f"Number of samples for stream {starved[0]} is 0 in each global batch: with "
                    f"batching_method='stratified', streams [{named}] get no sample of a global batch of {g}; "
                    "raise the batch size or their proportions")
            self._share = share
        self._checkpoints = [np.zeros(self.counts.size, np.int64)]

    def shares(self, steps: np.ndarray) -> np.ndarray:
        """Samples of each stream in global steps ``steps`` (shape ``(len(steps), streams)``)."""
        steps = np.asarray(steps, np.int64)
        if not self._varying:
            return np.broadcast_to(self._share, (steps.size, self.counts.size))
        g, n = self.global_batch, self.mixture.epoch_size
        centre = self.epoch * n + (steps + 0.5) * g
        return _apportion_rows(g, self.mixture.schedule.weights(centre))

    def _stratified_progress(self, steps: np.ndarray) -> np.ndarray:
        """Samples each stream supplied before each of ``steps``."""
        if not self._varying:
            return steps[:, None] * self._share[None, :]
        need = int(steps.max()) // _CHECKPOINT
        cps = self._checkpoints
        while len(cps) <= need:  # stored every _CHECKPOINT steps, filled on demand
            k0 = (len(cps) - 1) * _CHECKPOINT
            cps.append(cps[-1] + self.shares(np.arange(k0, k0 + _CHECKPOINT)).sum(0))
        out = np.empty((steps.size, self.counts.size), np.int64)
        for i, k in enumerate(steps.tolist()):
            k0 = k - k % _CHECKPOINT
            out[i] = cps[k // _CHECKPOINT] + self.shares(np.arange(k0, k)).sum(0)
        return out

    def _route_stratified(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = self.global_batch
        k, off = np.divmod(p, g)
        steps, inv = np.unique(k, return_inverse=True)
        share = self.shares(steps)
        cum = np.cumsum(share, axis=1)
        before = self._stratified_progress(steps)
        row = inv.ravel()
        s = (off[:, None] >= cum[row]).sum(1)
        within = off - (cum[row, s] - share[row, s])
        pos = before[row, s] + within
        counts = self.counts[s]
        return s, np.where(pos >= counts, pos % np.maximum(counts, 1), pos)  # past a stream's end: from its start


def _cover(first: int, span: int, total: int, block: int = 65536) -> tuple[np.ndarray, int]:
    """Rows of equal length covering ``[first, first + span)`` inside ``[0, total)``."""
    length = min(span, block)
    starts = np.arange(first, first + span, length, dtype=np.int64)
    return np.minimum(starts, total - length), length


def _apportion_rows(total: int, weights: np.ndarray) -> np.ndarray:
    """:func:`apportion` of ``total`` for every row of ``weights`` (rows summing to 1)."""
    quota = weights * total
    out = np.floor(quota).astype(np.int64)
    short = total - out.sum(1)
    rest = quota - out
    rank = np.argsort(np.argsort(-rest, axis=1, kind="stable"), axis=1, kind="stable")
    out += (rank < short[:, None]) & (weights > 0)
    return out


__all__ = ["MixSpec", "MixedEpoch", "Mixture"]
