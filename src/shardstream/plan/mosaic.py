"""Epochs sized as mosaicml-streaming sizes them: ``epoch_tail="mosaic"``.

mosaicml-streaming cuts an epoch of ``N`` samples into ``C`` canonical-node rows of
``ceil(N / C)`` samples (rounded up to a multiple of ``P / C`` when there are more physical
nodes ``P`` than canonical nodes), so its epoch holds ``T = C * rows`` real samples (short
rows repeat a sample). The ``T`` samples are spread over the nodes, each node's share is
padded with repeats to a multiple of its ``R`` ranks, and each rank's list is padded with
placeholders it skips up to whole rounds of ``workers x batch_size``. So every rank reads
``S = ceil(T / (P * R))`` real samples, in ``ceil(S / B)`` batches of which only the last may
be short, and DataLoader workers take those batches in turns.

:class:`MosaicEpoch` gives exactly those counts with this library's plan: global step
``k`` holds ``B`` positions per rank, except the last, which holds the ``S - (steps-1)*B``
real samples each rank has left (rank ``r``'s part of it is positions
``k*G + r*last ... k*G + (r+1)*last - 1``). No position is a placeholder: a plan position is
a sample consumed, as mosaicml-streaming's ``sample_in_epoch`` counts them. Position ``u``
of the epoch is sample ``u // C'`` of region ``u % C'`` (``C' = min(C, N)`` regions), the
regions taking turns one sample at a time; a region used up repeats its latest samples, so
every sample is read at least once. A pass resumed at position ``D`` reads
``ceil((T - D) / (P * R))`` samples per rank, as mosaicml-streaming does after ``drop_first=D``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import InvalidArgumentError
from .epoch import EpochPlan, Plan
from .partition import World


def partition_shape(world: World) -> tuple[int, int]:
    """``(nodes, ranks per node)`` of the ranks that read distinct samples, as mosaicml-streaming
    groups them when ranks are replicated (one node when the ranks do not fill whole nodes)."""
    readers = world.readers
    nodes = readers // world.ranks_per_node if readers % world.ranks_per_node == 0 else 1
    return nodes, readers // nodes


def epoch_total(num_samples: int, num_canonical_nodes: int, nodes: int) -> int:
    """Real samples (repeats included) in a mosaicml-streaming epoch before the ranks' padding."""
    c, p = num_canonical_nodes, nodes
    if (c < p and p % c) or (p < c and c % p):
        raise InvalidArgumentError(
            f"epoch_tail='mosaic' needs num_canonical_nodes ({c}) and the number of physical nodes ({p}) to "
            "divide one another, as mosaicml-streaming does (either canonical or physical nodes must be evenly "
            "divisible by the other); choose num_canonical_nodes accordingly, or use epoch_tail='pad'")
    per_node = -(-num_samples // c)
    if c < p:
        ratio = p // c
        per_node = -(-per_node // ratio) * ratio
    return c * per_node


def rank_samples(num_samples: int, num_canonical_nodes: int, nodes: int, ranks_per_node: int,
                 drop_first: int = 0) -> int:
    """Real samples each rank reads in a mosaicml-streaming epoch resumed after ``drop_first``."""
    left = epoch_total(num_samples, num_canonical_nodes, nodes) - drop_first
    return max(-(-left // (nodes * ranks_per_node)), 0)


class MosaicEpoch(EpochPlan):
    """One epoch (segment from ``origin``) of a :class:`Plan` sized as mosaicml-streaming sizes it,
    for ``nodes`` x ``ranks_per_node`` reading ranks (see the module docstring)."""

    def __init__(self, plan: Plan, epoch: int, global_batch: int, nodes: int, ranks_per_node: int,
                 origin: int = 0) -> None:
        super().__init__(plan, epoch, global_batch, origin)
        readers = nodes * ranks_per_node
        if self.global_batch % readers:
            raise InvalidArgumentError(
                f"the global batch of {self.global_batch} samples does not split evenly over {readers} ranks")
        self.nodes, self.ranks_per_node, self.readers = nodes, ranks_per_node, readers
        self.batch = self.global_batch // readers
        self.total = epoch_total(plan.num_samples, plan.spec.num_canonical_nodes, nodes)
        self.per_rank = rank_samples(plan.num_samples, plan.spec.num_canonical_nodes, nodes, ranks_per_node,
                                     self.origin)
        self.steps = -(-self.per_rank // self.batch)
        self.last = self.per_rank - (self.steps - 1) * self.batch if self.steps else 0

    @property
    def end(self) -> int:
        return self.origin + self.per_rank * self.readers

    def _ids(self, flat: np.ndarray) -> np.ndarray:
        u = flat + self.origin
        regions = max(self.plan.num_regions, 1)
        c, t = np.divmod(u, regions)[::-1]
        length = self.lengths[c]
        over = t >= length  # a region used up repeats its latest samples, newest first
        if over.any():
            t = np.where(over, length - 1 - (t - length) % length, t)
        return self._shuffled(c, t)

    # -- the short last step ------------------------------------------------------------------
    def iter_worker(self, world: World, start: int | None = None,
                    chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        steps = self.worker_steps(world, start)
        full = range(steps.start, min(steps.stop, max(self.steps - 1, 0)), steps.step)
        yield from self.iter_steps(world, full, chunk)
        if self.steps and self.steps - 1 in steps:
            k = self.steps - 1
            first = self.origin + k * self.global_batch + world.reader * self.last
            yield np.asarray([k], np.int64), self.sample_ids(np.arange(first, first + self.last)[None, :])

    def steps_done(self, world: World, start: int, yielded: int) -> int:
        steps = self.worker_steps(world, start)
        full = len(range(steps.start, min(steps.stop, max(self.steps - 1, 0)), steps.step))
        if yielded < full * self.batch:
            return yielded // self.batch
        return full + int(self.steps - 1 in steps and yielded - full * self.batch >= self.last)

    def device_batch(self, world: World) -> int:
        if world.readers != self.readers:
            raise InvalidArgumentError(
                f"this epoch was sized for {self.readers} ranks, not {world.readers}; plan it for the world that "
                "reads it")
        return self.batch

    # -- resumption -------------------------------------------------------------------------------
    def progress(self, position: int) -> np.ndarray:
        raise InvalidArgumentError("an epoch sized with epoch_tail='mosaic' resumes at a sample count: use resume()")

    def resume(self, position: int, global_batch: int, nodes: int | None = None,
               ranks_per_node: int | None = None) -> MosaicEpoch:
        """The epoch continued after ``position`` samples, read by ``nodes`` x ``ranks_per_node`` ranks."""
        if not self.origin <= position <= self.end:
            raise InvalidArgumentError(f"position {position} is outside epoch {self.epoch} [{self.origin}, {self.end}]")
        nodes = self.nodes if nodes is None else nodes
        ranks = self.ranks_per_node if ranks_per_node is None else ranks_per_node
        return MosaicEpoch(self.plan, self.epoch, global_batch, nodes, ranks, position)
