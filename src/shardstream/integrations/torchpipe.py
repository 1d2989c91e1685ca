"""PyTorch: ``StreamingDataLoader`` over a processing chain (``StreamingDataLoader(ds.map(...).pack(...))``).

The loader is the one of :mod:`.torch`; this module is its chain strategy. Each DataLoader worker (or
the main process, with ``num_workers=0``) runs one reader of the chain (see
:mod:`shardstream.engine.run`) and sends every batch stamped with its reader's state after it
(:meth:`~shardstream.dataset.chain.IterableDataset.run_stamped`). The main process keeps the last
stamp of each of its workers (:class:`ChainFeed`), so ``state_dict()`` counts the batches handed to the
training loop, not those prefetched, and resumes on any world (other ranks, other worker counts) with
nothing repeated or lost.

Which pass runs is the chain's *ticket* (next epoch, loaded state), taken once by the loader when it
starts a pass: fresh workers get it with their copy of :class:`ChainBatches`; persistent workers run
their copy's next pass after it, which is the one the loader's chain names too (else the loader
restarts them: a ``load_state_dict`` or ``set_epoch`` in between).

With ``stats=True`` each batch also carries its stats from its worker (see
:mod:`shardstream.stats.meter`) and the loop's waits are timed (docs/stats-pipelines.md).
"""

from __future__ import annotations

import dataclasses
from time import perf_counter
from typing import Any, Callable, Iterator, Optional

import numpy as np
from torch.utils.data import IterableDataset
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory

from ..errors import InvalidArgumentError
from ..format.batch import Ragged
from ..engine.agree import Agreed, agreement_for
from ..engine.run import setup
from ..stats.loaders import timed_items
from ..runtime.tensors import converter, to_numpy
from .torchform import RAGGED_FORMS, lengths_key, numpy_form, to_torch
from .torchsend import sent

CHAIN_SLOT = 4 << 20  # the least slot for a chain's batches, whose size the index cannot tell


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
        self.ticket = None  # the pass the next iteration runs, set by the loader (None: the chain's own next)
        self.stats = False  # whether each batch carries its stats (set by the loader)
        self.bundle = 1  # batches a worker sends at once (set by the loader)
        self.finish = None  # what the worker does last to each stamped batch (set by the loader)

    def __iter__(self) -> Iterator[Stamp]:
        ticket, self.ticket = self.ticket, None
        if ticket is None:  # a persistent worker's next pass: the one after the pass its chain ran last
            ticket = self.chain.take_ticket()
        return sent(self.chain.run_stamped(ticket, Stamp), self)


def check_chain_ragged(ragged: Optional[str]) -> None:
    if ragged is not None and ragged not in RAGGED_FORMS:
        raise InvalidArgumentError(f"ragged={ragged!r} is not one of {', '.join(map(repr, RAGGED_FORMS))} "
                                   "(or None: a chain's batches as its operations made them)")


class ChainForm:
    """What a worker does to a chain's batch without a user's ``collate_fn``: lists of numbers (or of equal-shape
    arrays) become arrays; with ``ragged``, every column whose rows are 1-D sequences of numbers becomes a
    :class:`~shardstream.Ragged` first, then (``"pad"``) a padded array and its ``name_lengths`` (see
    :mod:`.torchform`)."""

    def __init__(self, ragged: Optional[str]) -> None:
        self.ragged = ragged

    def __call__(self, batch: Any) -> Any:
        if self.ragged is None or not isinstance(batch, dict):
            return to_numpy(batch)
        out = {name: _ragged_rows(value) for name, value in batch.items()}
        if self.ragged == "pad":
            for name, value in out.items():
                if isinstance(value, Ragged) and lengths_key(name) in out:
                    raise InvalidArgumentError(
                        f"the variable-length column {name!r} would come padded with its row lengths under "
                        f"{lengths_key(name)!r}, which is a column of the batch too; pass ragged='ragged' or "
                        "rename one of them (ds.rename_column)")
            out = numpy_form(out, "pad")
        return to_numpy(out)


def _ragged_rows(value: Any) -> Any:
    """``value`` as a Ragged when it is a list of 1-D sequences of numbers, else as it is."""
    if not isinstance(value, list) or not value:
        return value
    rows = []
    for row in value:
        if not isinstance(row, (list, tuple, np.ndarray)):
            return value
        a = np.asarray(row)
        if a.ndim != 1 or a.dtype.kind not in "biuf":
            return value
        rows.append(a)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return Ragged(np.concatenate(rows), offsets)


class ChainFeed:
    """The loader's record of a chain's passes (see the module docstring): the pass in progress, the last
    stamp of each of this rank's readers, and how many batches were handed to the loop."""

    def __init__(self, chain, collate: Optional[Callable], ragged: Optional[str]) -> None:
        self.chain = chain
        self.batches = ChainBatches(chain)
        self._collate = collate
        self._ragged = ragged
        self._to_torch = converter("torch")
        self.made = None  # the pass in progress (a PassSetup)
        self.expect: Optional[tuple] = None  # the chain's ticket persistent workers would run next
        self._states: dict = {}
        self._finished = False
        self._handed = 0
        self._agreed: Optional[Agreed] = None  # the pass in progress, when its ranks agree where it ends
        self._world = None

    def begin(self, num_workers: int) -> None:
        """Before torch starts (or resumes) its workers: take the chain's ticket and hand it to fresh workers."""
        chain = self.chain
        chain.close()
        world = dataclasses.replace(chain.root.detect_world(), num_workers=num_workers, worker=0)
        ticket = chain.take_ticket()
        made = setup(chain.root, chain.specs, world, *ticket)
        self.batches.ticket = ticket
        chain.set_epoch(made.epoch + 1)  # what the workers' copies run after this pass too
        self.expect = chain.ticket
        self.made, self._world, self._finished, self._handed = made, world, False, 0
        first = world.reader * max(num_workers, 1)
        n = len(chain.specs)
        self._states = {j: made.states.get(j) or made.fresh_state(j, n)
                        for j in range(first, first + max(num_workers, 1))}

    def stamps(self, stamps: Iterator[Stamp]) -> Iterator[Stamp]:
        """``stamps``, ended on every rank at the same step when the pass's ranks agree on it (see
        :mod:`shardstream.engine.agree`)."""
        agreement = agreement_for(self.made, self._world, self.chain.root.world is not None)
        self._agreed = None if agreement is None else Agreed(stamps, agreement)
        return stamps if self._agreed is None else self._agreed

    def count(self, stamps: Iterator[Stamp], pin: Callable[[Any], tuple]) -> Iterator[Any]:
        """The batches of ``stamps`` as the loop gets them, recording each reader's state; ``pin``: the loader's
        ``(item, whether to pin)`` of a batch from a worker."""
        for stamp in stamps:
            self._states[stamp.reader] = stamp.state
            self._handed += 1
            yield self.received(*pin(stamp.item))
        self._finished = True

    def count_timed(self, stamps: Iterator[Stamp], pin: Callable[[Any], tuple], meter) -> Iterator[Any]:
        """:meth:`count`, timing the loop's waits for the stats."""
        for stamp, asked, got in timed_items(stamps, meter):
            self._states[stamp.reader] = stamp.state
            self._handed += 1
            batch = self.received(*pin(stamp.item))
            meter.batch(asked, got, stamp.stats, 0, perf_counter() - got)
            yield batch
        self._finished = True

    def received(self, item: Any, pin: bool) -> Any:
        if self._collate is not None:
            batch = self._collate(item)
        else:
            batch = self._to_torch(item)
            if self._ragged == "ragged" and isinstance(batch, dict):
                batch = {k: to_torch(v, pin) if isinstance(v, Ragged) else v for k, v in batch.items()}
        return _pin_memory(batch) if pin else batch

    def state_dict(self, num_workers: int) -> dict:
        """The chain's state after the batches handed to the training loop (this rank's readers)."""
        made = self.made
        if made is None:
            return self.chain.state_dict()
        fp = self.chain.fingerprint()
        agreed_end = self._agreed is not None and self._agreed.ended  # every rank ended the pass here
        if agreed_end or (self._finished and made.readers == len(self._states)):
            return {**self.chain.state_dict(), "epoch": made.epoch, "complete": True}
        states = dict(self._states)
        if self._finished:  # this rank's workers all ended their pass
            states = {j: {**s, "done": True} for j, s in states.items()}
        w = max(num_workers, 1)
        return made.full_state(states, fp, self.chain.operations(), (made.turn + self._handed) % w, self._world.reader)

    def load_state_dict(self, state) -> None:
        self.chain.load_state_dict(state)
        self.made = None

    def set_epoch(self, epoch: int) -> None:
        self.chain.set_epoch(epoch)
        self.made = None


def __getattr__(name: str):
    if name == "PipelineDataLoader":  # the former name of the loader over a chain: it is StreamingDataLoader now
        from .torch import StreamingDataLoader

        return StreamingDataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
