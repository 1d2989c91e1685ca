"""PyTorch: a DataLoader over a processing chain (``StreamingDataLoader(ds.map(...).pack(...))``).

Each DataLoader worker (or the main process, with ``num_workers=0``) runs one reader of the
chain (see :mod:`shardstream.engine.run`) and sends every batch stamped with its reader's
state after it. The main process keeps the last stamp of each of its workers, so
``state_dict()`` counts the batches handed to the training loop, not those prefetched, and
resumes on any world (other ranks, other worker counts) with nothing repeated or lost.

With ``stats=True`` each batch also carries its stats from its worker (see
:mod:`shardstream.stats.meter`) and the loop's waits are timed (docs/stats-pipelines.md).
"""

from __future__ import annotations

import dataclasses
from time import perf_counter
from typing import Any, Iterator, Optional

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory

from ..errors import InvalidArgumentError
from ..engine.agree import Agreed, agreement_for
from ..engine.run import setup
from ..stats.loaders import LoaderStatsMixin, timed_items
from ..runtime.tensors import converter, to_numpy
from .torch import keep
from ..runtime.torchenv import WorkerStart
from .torchring import RingCollate, slot_estimate
from .torchsend import WorkerTransfer, sent

_CHAIN_SLOT = 4 << 20  # the least slot for a chain's batches, whose size the index cannot tell


class Stamp:
    """A batch, ``(reader, reader state after it)`` and its stats (None when the loader keeps none)."""

    __slots__ = ("item", "reader", "state", "stats")

    def __init__(self, item: Any, reader: int, state: dict, stats: Optional[dict] = None) -> None:
        self.item, self.reader, self.state, self.stats = item, reader, state, stats

    def __reduce__(self):
        return (Stamp, (self.item, self.reader, self.state, self.stats))


def restamp(stamp: Stamp, item: Any) -> Stamp:
    """The stamp with another item (what the worker sends)."""
    return Stamp(item, stamp.reader, stamp.state, stamp.stats)


class ChainBatches(IterableDataset):
    """The chain's items, each stamped with its reader's state (see the module docstring)."""

    def __init__(self, chain) -> None:
        self.chain = chain
        self.ticket = None  # the pass to run: (next epoch, loaded state), set by the loader
        self.stats = False  # whether each batch carries its stats (set by the loader)
        self.bundle = 1  # batches a worker sends at once (set by the loader)
        self.finish = None  # what the worker does last to each stamped batch (set by the loader)

    def __iter__(self) -> Iterator[Stamp]:
        return sent(self._stamps(), self)

    def _stamps(self) -> Iterator[Stamp]:
        chain = self.chain
        it = chain.run_pass(self.ticket, agree=False)  # the loader agrees for its workers (see PipelineDataLoader)
        _, run, reader = chain._active
        for item in it:
            yield Stamp(item, reader, run.state())


class PipelineDataLoader(WorkerTransfer, LoaderStatsMixin, DataLoader):
    """A DataLoader over a processing chain ``chain``; ``batch_size`` rows per batch (None: the chain's
    items are already batches, e.g. after ``.batch(n)``). Batches come as torch tensors (numbers and
    equal-shape arrays) and lists (other values). ``stats``: keep loader stats (``True``, a list of
    exporters, or a :class:`~shardstream.stats.StatsConfig`; see :meth:`stats`). ``transfer``,
    ``ring_bytes``, ``transfer_batches``: how batches cross from the workers, as for ``StreamingDataLoader``."""

    def __init__(self, chain, batch_size: Optional[int] = None, *, num_workers: int = 0, drop_last: bool = False,
                 collate_fn=None, stats=None, pin_memory: bool = False, transfer: str = "auto",
                 ring_bytes: Optional[int] = None, transfer_batches: Optional[int] = None, **kwargs) -> None:
        for key in ("shuffle", "sampler", "batch_sampler"):
            if kwargs.get(key) not in (None, False):
                raise InvalidArgumentError(f"{key}={kwargs[key]!r}: the chain orders its items; use ds.shuffle(...)")
        if kwargs.get("persistent_workers"):
            raise InvalidArgumentError("persistent_workers=True is not supported over a processing chain: each "
                                       "epoch's workers start from the chain's state; leave it False")
        config = self._stats_config(stats)
        kwargs["worker_init_fn"] = WorkerStart(kwargs.get("worker_init_fn"))
        self._plane_for(transfer, ring_bytes, pin_memory, num_workers)
        if batch_size is not None:
            chain = chain.batch(batch_size, drop_last_batch=drop_last)
        self.chain = chain
        self._collate = collate_fn
        self._to_torch = converter("torch")
        self._setup = None
        self._states: dict = {}
        self._finished = False
        self._agreed: Optional[Agreed] = None  # the pass in progress, when its ranks agree where it ends
        super().__init__(ChainBatches(chain), batch_size=None, num_workers=num_workers, collate_fn=keep, **kwargs)
        self.dataset.stats = config is not None
        slot = max(_CHAIN_SLOT, slot_estimate(chain.root, batch_size or 1)) if chain.root.shards else _CHAIN_SLOT
        # without a collate_fn of the user's, lists of numbers become arrays in the worker (and cross the ring)
        self._start_transfer(RingCollate(keep, to_numpy if collate_fn is None else None, restamp), transfer_batches,
                             slot, 0)
        self._start_stats(config, chain.root)

    def __iter__(self) -> Iterator[Any]:
        chain = self.chain
        chain.close()
        world = dataclasses.replace(chain.root.detect_world(), num_workers=self.num_workers, worker=0)
        made = setup(chain.root, chain.specs, world, chain._next_epoch, chain._loaded)
        first = world.reader * max(self.num_workers, 1)
        self.dataset.ticket = (chain._next_epoch, chain._loaded)
        self._prepare_ring()
        it = super().__iter__()  # the workers take the ticket as it is now
        self._began(it)
        chain._loaded, chain._next_epoch = None, made.epoch + 1
        self._setup, self._finished, self._handed = made, False, 0
        n = len(chain.specs)
        self._states = {j: made.states.get(j) or made.fresh_state(j, n)
                        for j in range(first, first + max(self.num_workers, 1))}
        stamps = self._unbundled(it)
        agreement = agreement_for(made, world, chain.root.world is not None)
        self._agreed = None if agreement is None else Agreed(stamps, agreement)
        stamps = stamps if self._agreed is None else self._agreed
        return self._count(stamps) if self._loop_stats is None else self._count_timed(stamps)

    def _count_timed(self, stamps) -> Iterator[Any]:
        """:meth:`_count`, timing the loop's waits for the stats."""
        meter = self._loop_stats
        for stamp, asked, got in timed_items(stamps, meter):
            self._states[stamp.reader] = stamp.state
            self._handed += 1
            batch = self._received(stamp.item)
            meter.batch(asked, got, stamp.stats, 0, perf_counter() - got)
            yield batch
        self._finished = True

    def _count(self, stamps) -> Iterator[Any]:
        for stamp in stamps:
            self._states[stamp.reader] = stamp.state
            self._handed += 1
            yield self._received(stamp.item)
        self._finished = True

    def _received(self, item) -> Any:
        item, pin = self._from_worker(item)
        batch = self._collate(item) if self._collate is not None else self._to_torch(item)
        return _pin_memory(batch) if pin else batch

    def state_dict(self) -> dict:
        """The chain's state after the batches handed to the training loop (this rank's readers)."""
        made = self._setup
        if made is None:
            return self.chain.state_dict()
        fp = self.chain.fingerprint()
        agreed_end = self._agreed is not None and self._agreed.ended  # every rank ended the pass here
        if agreed_end or (self._finished and made.readers == len(self._states)):
            return {**self.chain.state_dict(), "epoch": made.epoch, "complete": True}
        states = dict(self._states)
        if self._finished:  # this rank's workers all ended their pass
            states = {j: {**s, "done": True} for j, s in states.items()}
        w = max(self.num_workers, 1)
        world = self.chain.root.detect_world()
        return made.full_state(states, fp, self.chain.operations(), (made.turn + self._handed) % w, world.reader)

    def load_state_dict(self, state) -> None:
        """Resume at the next ``iter(loader)``, on any world."""
        self.chain.load_state_dict(state)
        self._setup = None

    def set_epoch(self, epoch: int) -> None:
        self.chain.set_epoch(epoch)
        self._setup = None

    def __del__(self) -> None:
        try:
            self.close_stats()
        except Exception:
            pass
