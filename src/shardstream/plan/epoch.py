"""The plan of a run and of each epoch: global position -> sample id, lazily.

``Plan(sizes, spec)`` holds the run-fixed layout (O(shards)). ``plan.epoch(e, G)``
gives an :class:`EpochPlan`, which maps any global position of the epoch to the
dataset's sample id in O(1) per position (vectorised over arrays) and cuts every
global step among ranks and workers. Nothing of size O(samples) is ever built, so
starting at position 0 and resuming at position 10**9 cost the same.

An epoch plan is a *segment*: positions from ``origin`` on, in steps of the global
batch ``G``, with every region starting at ``base[c]`` samples in. A fresh epoch is
one segment from 0. Resuming on the same global batch continues the segment, also
from a position inside a step (the same steps, the same padding: the resumed epoch is
the uninterrupted one); resuming with another global batch opens a new segment at the
resume position whose base is what each region had supplied by then, so no sample is
repeated or skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError
from .keyed import derive
from .layout import EpochLayout, RunLayout
from .partition import RegionInterleave, StepCut
from .settings import (DEFAULT_EPOCH_TAIL, DEFAULT_SHUFFLE_ALGO, DEFAULT_SHUFFLE_SEED, EPOCH_TAILS, SHUFFLE_ALGOS,
                       check_choice, default_block_size)
from .shuffle import naive, shuffle_region

PURPOSE_EPOCH = 3
_CHUNK = 65536


@dataclass(frozen=True)
class PlanSpec:
    """Everything the order of an epoch depends on, besides the shard sizes and the global batch."""

    shuffle: bool = False
    algo: str = DEFAULT_SHUFFLE_ALGO
    seed: int = DEFAULT_SHUFFLE_SEED
    num_canonical_nodes: int = 1
    block_size: int | None = None
    tail: str = DEFAULT_EPOCH_TAIL
    resolved_block_size: int = field(init=False)

    def __post_init__(self) -> None:
        check_choice("shuffle_algo", self.algo, SHUFFLE_ALGOS)
        check_choice("tail", self.tail, EPOCH_TAILS)
        for name in ("num_canonical_nodes", "block_size"):
            value = getattr(self, name)
            if value is None and name == "block_size":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name}={value!r} must be an int >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InvalidArgumentError(f"shuffle_seed={self.seed!r} must be an int")
        block = self.block_size or default_block_size(self.num_canonical_nodes)
        object.__setattr__(self, "resolved_block_size", block)


class Plan:
    """The run-fixed plan of a dataset with shard sizes ``sizes``."""

    def __init__(self, sizes, spec: PlanSpec) -> None:
        sizes = np.asarray(sizes, np.int64)
        if sizes.ndim != 1 or (sizes.size and sizes.min() < 0):
            raise InvalidArgumentError("shard sizes must be a 1-D sequence of non-negative ints")
        if int(sizes.sum()) * spec.num_canonical_nodes >= 1 << 62:
            raise InvalidArgumentError("num_samples * num_canonical_nodes must stay below 2**62")
        self.spec = spec
        self.run = RunLayout(sizes, spec.num_canonical_nodes, spec.shuffle, spec.seed)

    @property
    def num_samples(self) -> int:
        return self.run.num_samples

    @property
    def num_regions(self) -> int:
        return self.run.num_regions

    def epoch(self, epoch: int, global_batch: int, origin: int = 0, base=None, world=None) -> EpochPlan:
        """Epoch ``epoch`` at ``global_batch`` from ``origin``; ``epoch_tail="mosaic"`` sizes it for ``world``."""
        if self.spec.tail == "mosaic":
            from .mosaic import MosaicEpoch, partition_shape

            if world is None:
                raise InvalidArgumentError("epoch_tail='mosaic' sizes each epoch for the ranks that read it: pass world=")
            return MosaicEpoch(self, epoch, global_batch, *partition_shape(world), origin)
        return EpochPlan(self, epoch, global_batch, origin, base)


def _check_global_batch(global_batch) -> None:
    if isinstance(global_batch, bool) or not isinstance(global_batch, (int, np.integer)) or global_batch < 1:
        raise InvalidArgumentError(f"global batch size {global_batch!r} must be an int >= 1")


class EpochPlan(StepCut):
    """One epoch (segment) of a :class:`Plan` at global batch ``global_batch``."""

    def __init__(self, plan: Plan, epoch: int, global_batch: int, origin: int = 0, base=None) -> None:
        _check_global_batch(global_batch)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise InvalidArgumentError(f"epoch={epoch!r} must be an int >= 0")
        self.plan = plan
        self.epoch = int(epoch)
        self.global_batch = int(global_batch)
        self.origin = int(origin)
        regions = plan.num_regions
        self.base = np.zeros(regions, np.int64) if base is None else np.asarray(base, np.int64)
        if self.base.shape != (regions,) or (regions and self.base.min() < 0):
            raise InvalidArgumentError(f"base must hold one non-negative count per region ({regions})")
        spec = plan.spec
        self.layout = EpochLayout(plan.run, self.epoch, spec.shuffle, spec.seed)
        self.key = derive(spec.seed, self.epoch, PURPOSE_EPOCH, SHUFFLE_ALGOS.index(spec.algo))
        self.lengths = plan.run.region_lengths()
        self.schedule = RegionInterleave(regions, self.global_batch)
        self.steps = self.schedule.steps(self.lengths - self.base, spec.tail) if spec.tail != "mosaic" else 0

    # -- sizes ------------------------------------------------------------------------
    @property
    def end(self) -> int:
        """One past the last global position of the epoch."""
        return self.origin + self.steps * self.global_batch

    def nbytes(self) -> int:
        """Memory held by the plan's arrays (O(shards + regions))."""
        return self.layout.nbytes() + self.base.nbytes + self.lengths.nbytes

    # -- position -> sample ------------------------------------------------------------
    def sample_ids(self, positions) -> np.ndarray:
        """Dataset sample ids at global positions (ints in ``[origin, end)``), vectorised."""
        p = np.asarray(positions, np.int64)
        if p.size and (p.min() < self.origin or p.max() >= self.end):
            raise InvalidArgumentError(
                f"positions must lie in [{self.origin}, {self.end}) for epoch {self.epoch}; "
                f"got values in [{p.min()}, {p.max()}]"
            )
        flat = p.ravel() - self.origin
        if flat.size > _CHUNK:  # bounded temporaries stay in cache and reuse their memory
            return np.concatenate([self._ids(flat[i:i + _CHUNK]) for i in range(0, flat.size, _CHUNK)]).reshape(p.shape)
        return self._ids(flat).reshape(p.shape)

    def _ids(self, flat: np.ndarray) -> np.ndarray:
        k, o = np.divmod(flat, self.global_batch)
        c, t = self.schedule.locate(k, o)
        t += self.base[c]
        length = self.lengths[c]
        over = t >= length  # padding repeats the region's latest samples, newest first
        if over.any():
            t = np.where(over, length - 1 - (t - length) % length, t)
        return self._shuffled(c, t)

    def _shuffled(self, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        spec = self.plan.spec
        bounds = self.plan.run.region_bounds
        if not spec.shuffle:
            return self.layout.sample_ids(bounds[c] + t)
        if spec.algo == "naive":
            return naive(bounds[c] + t, self.plan.num_samples, self.key)
        v = shuffle_region(spec.algo, self.layout, c, t, self.key, spec.resolved_block_size)
        return self.layout.sample_ids(v)

    # -- resumption ----------------------------------------------------------------------
    def progress(self, position: int) -> np.ndarray:
        """Samples each region has supplied to the epoch before global ``position``."""
        return self.base + self.schedule.progress(position - self.origin)

    def resume(self, position: int, global_batch: int) -> EpochPlan:
        """The plan that continues this epoch at ``position`` with ``global_batch``: this very plan on the
        same global batch (a ``position`` inside a step included: the pass reads the rest of that step
        first, see :meth:`~.partition.StepCut.iter_worker`), else a new segment from ``position``."""
        if not self.origin <= position <= self.end:
            raise InvalidArgumentError(f"position {position} is outside epoch {self.epoch} [{self.origin}, {self.end}]")
        _check_global_batch(global_batch)  # before the shortcut: 1.0 or True equal a batch of 1
        if global_batch == self.global_batch:
            return self
        return EpochPlan(self.plan, self.epoch, global_batch, position, self.progress(position))
