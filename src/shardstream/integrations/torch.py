"""PyTorch: ``StreamingDataLoader``, a DataLoader that knows what the training loop consumed.

It runs a :class:`~shardstream.StreamingDataset` like a plain DataLoader does (any
``num_workers``, ``persistent_workers``, fork or spawn, ``pin_memory``, any
``collate_fn``) and adds:

- ``state_dict()`` / ``load_state_dict()`` that record how far the epoch plan was consumed
  by the batches handed to the loop, not by those the workers prefetched: each batch
  crosses from its worker stamped with the global plan position after it (see
  :mod:`shardstream.engine.nodes`), so each rank computes the same position without
  talking to the others. The state resumes on any number of nodes, ranks and workers.
- Epochs that advance by themselves: each ``iter(loader)`` runs the next epoch, with
  or without persistent workers; a ``load_state_dict`` or ``set_epoch`` between two
  epochs restarts persistent workers so that they see it.
- A batch path (``batch_decode``): workers decode each step's samples at once into
  column arrays instead of collating per-sample dicts; the main process turns the
  arrays into tensors without copying. It is on by default unless a ``collate_fn`` is
  given or a dataset subclass makes its own samples.
- A shared ring of batch slots (:mod:`.torchring`, :mod:`.torchsend`): workers write finished
  batches there and send small descriptors in bundles; pinned once for the GPU with
  ``pin_memory=True``, and ``device=`` moves batches ahead onto a device (:mod:`.todevice`).
- Batches in one form on every path without a ``collate_fn``, whatever the columns:
  variable-length arrays padded with their lengths, images and other values as lists
  (see :mod:`.torchform`).
"""

from __future__ import annotations

import dataclasses
import functools
from itertools import islice
from time import perf_counter
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory

from ..errors import InvalidArgumentError
from ..keywords import checked_keywords
from ..engine.nodes import Consumed, PlanNode, Stamped, stamped
from ..engine.options import check_batch_size
from ..stats import record
from ..stats.meter import add_after
from ..stats.loaders import LoaderStatsMixin, timed_items
from .todevice import DevicePrefetcher
from ..runtime.torchenv import WorkerStart
from .torchform import StackSamples, check_ragged, numpy_form, torch_form
from .torchpipe import CHAIN_SLOT, ChainFeed, ChainForm, check_chain_ragged
from .torchpipe import restamp as chain_restamp
from .torchring import RingCollate, slot_estimate
from .torchsend import WorkerTransfer, sent


class TorchStamped(Stamped):
    """A stamped batch that the DataLoader's pin-memory thread pins like the batch itself."""

    __slots__ = ()

    def pin_memory(self, device=None) -> "TorchStamped":
        return TorchStamped(_pin_memory(self.item, device), self.position, self.stats)


class StepBatches(IterableDataset):
    """A dataset's epochs as one stamped column batch per step (see ``StreamingDataset.iterate_batches``)."""

    def __init__(self, dataset, columns: Optional[Sequence[str]] = None, drop_last: bool = False) -> None:
        self.dataset = dataset
        self.columns = None if columns is None else list(columns)
        self.drop_last = drop_last
        self.stats = False  # whether each batch carries its stats (set by the loader)
        self.bundle = 1  # batches a worker sends at once (set by the loader)
        self.finish: Optional[Callable] = None  # what the worker does last to each stamped batch (set by the loader)

    def __iter__(self) -> Iterator[TorchStamped]:
        columns = self.columns
        it = stamped(self.dataset, lambda ds: ds.iterate_batches(columns=columns), TorchStamped)
        return sent(self._drop_short(it) if self.drop_last else it, self)

    def _drop_short(self, it: Iterator[TorchStamped]) -> Iterator[TorchStamped]:
        """With ``drop_last``, a step shorter than the batch (only ``epoch_tail="mosaic"`` makes one)
        crosses as a stamp without a batch: its samples count as consumed, the loop never sees them."""
        size = self.dataset.batch_size
        kept = bool(it.node.head())  # the rest of a step the pass resumed inside: short, not a last step
        for stamp in it:
            yield stamp if kept or batch_rows(stamp.item) >= size else TorchStamped(None, stamp.position)
            kept = False


class SampleBatches(IterableDataset):
    """A dataset's epochs as samples collated in the worker, ``batch_size`` at a time, each batch
    stamped with the plan position after it. The samples are ``iter(dataset)``'s (a subclass's own
    ``__iter__`` included), or with ``columns`` those of ``dataset.iterate(columns=...)``."""

    def __init__(self, dataset, batch_size: int, collate: Callable, columns: Optional[Sequence[str]] = None,
                 drop_last: bool = False) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate = collate
        self.columns = None if columns is None else list(columns)
        self.drop_last = drop_last
        self.stats = False  # whether each batch carries its stats (set by the loader)
        self.bundle = 1  # batches a worker sends at once (set by the loader)
        self.finish: Optional[Callable] = None  # what the worker does last to each stamped batch (set by the loader)

    def __iter__(self) -> Iterator[TorchStamped]:
        columns = self.columns
        node = PlanNode(self.dataset, iter if columns is None else (lambda ds: ds.iterate(columns=columns)))
        node.reset()  # the pass begins now
        return sent(self._batches(node), self)

    def _batches(self, node: PlanNode) -> Iterator[TorchStamped]:
        items, bs, collate = node.items(), self.batch_size, self.collate
        size = node.head() or bs  # a pass resumed inside a step: the rest of it first, then whole steps
        try:
            while True:
                samples = list(islice(items, size))
                if not samples:
                    return
                short = len(samples) < size
                if short and self.drop_last:  # consumed, never seen by the loop
                    yield TorchStamped(None, node.position())
                    return
                with record.timed("collate"):
                    batch = collate(samples)
                yield TorchStamped(batch, node.position())
                if short:
                    return
                size = bs
        finally:
            node.close()


def keep(batch):
    """The identity collate: a step's column batch crosses to the main process as numpy arrays."""
    return batch


def restamp(stamp: TorchStamped, item) -> TorchStamped:
    """The stamp with another item (what the worker's collate sends)."""
    return TorchStamped(item, stamp.position, stamp.stats)


class ThroughStamp:
    """A user's ``collate_fn`` applied to a stamped batch's item (the stamp goes on with the result)."""

    def __init__(self, collate: Callable) -> None:
        self.collate = collate

    def __call__(self, stamp: TorchStamped) -> TorchStamped:
        if stamp.item is None:
            return stamp
        if stamp.stats is None:
            return TorchStamped(self.collate(stamp.item), stamp.position)
        t0 = perf_counter()
        item = self.collate(stamp.item)
        add_after(stamp.stats, "collate", perf_counter() - t0)  # after the batch was stamped
        return TorchStamped(item, stamp.position, stamp.stats)


def batch_rows(batch: dict) -> int:
    """Rows of a column batch (the length of its first column)."""
    return len(next(iter(batch.values()))) if batch else 0


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """The keywords that ``StreamingDataLoader`` takes alike over a dataset and over a chain."""

    num_workers: int
    collate_fn: Optional[Callable]
    pin_memory: bool
    ragged: Optional[str]
    stats: Any
    transfer: str
    ring_bytes: Optional[int]
    transfer_batches: Optional[int]
    device: Any
    device_prefetch: int


class _DefaultBatch:
    """``batch_size``'s default: 1 over a dataset (torch's), None over a chain (its items are the batches)."""

    def __repr__(self) -> str:
        return "1 (a dataset) or None (a chain)"


DEFAULT_BATCH: Any = _DefaultBatch()


class StreamingDataLoader(WorkerTransfer, LoaderStatsMixin, DataLoader):
    """A DataLoader over a :class:`~shardstream.StreamingDataset`, or over any processing chain made from one
    (``ds.map(...).shuffle(...).pack(...)``: see :mod:`.torchpipe`), with checkpointable state.

    Over a dataset, ``batch_size`` is the per-device batch; it must equal the dataset's ``batch_size``
    (adopted from here, with a warning, when the dataset was built without one).
    ``batch_decode``: ``None`` (decode whole steps unless a ``collate_fn`` is given or a
    subclass makes its own samples), ``True`` (always; a ``collate_fn`` receives the numpy
    column batch), or ``False`` (per-sample dicts, through ``collate_fn`` if given).
    Without a ``collate_fn`` every path gives the batches of :mod:`.torchform`;
    ``ragged`` picks the form of variable-length array columns: ``"pad"`` (a padded
    tensor plus ``name_lengths``; the default) or ``"ragged"`` (a :class:`~shardstream.Ragged` of
    tensors). A subclass's own samples go through ``default_collate``. ``columns``:
    decode only those columns, on every path. ``stats``: keep loader stats (``True``, a list of
    exporters, or a :class:`~shardstream.stats.StatsConfig`; see :meth:`stats`).

    Over a chain, ``batch_size`` rows make a batch (default None: the chain's items are already batches, e.g.
    after ``.batch(n)``); batches come as torch tensors (numbers and equal-shape arrays) and lists (other
    values), or through ``collate_fn``. ``ragged`` (default None: as made) gives every column whose rows are
    1-D sequences of numbers the form named above. ``batch_decode`` and ``columns`` are refused (a chain
    makes its own items; ``ds.select_columns`` picks columns).

    How batches cross from the workers (docs/transfer.md): ``transfer`` (``"auto"``: a shared ring of
    slots when there are workers, ``"ring"``, or ``"queue"``: torch's worker queue), ``ring_bytes`` (the
    most the ring may take), ``transfer_batches`` (batches a worker sends at once). ``device``: batches
    arrive on this torch device, moved ``device_prefetch`` batches ahead on a side CUDA stream.
    ``persistent_workers``, ``pin_memory`` and the other DataLoader keywords work on both.
    """

    @checked_keywords(DataLoader.__init__)
    def __init__(self, dataset, batch_size: Optional[int] = DEFAULT_BATCH, *, num_workers: int = 0,
                 collate_fn=None, pin_memory: bool = False, batch_decode: Optional[bool] = None,
                 columns: Optional[Sequence[str]] = None, ragged: Optional[str] = None, stats=None,
                 transfer: str = "auto", ring_bytes: Optional[int] = None, transfer_batches: Optional[int] = None,
                 device=None, device_prefetch: int = 2, **kwargs) -> None:
        from ..dataset.chain import IterableDataset as Chain

        chain = isinstance(dataset, Chain)
        if not chain and (not hasattr(dataset, "iterate_batches") or not hasattr(dataset, "cursor")):
            raise InvalidArgumentError(
                f"StreamingDataLoader reads a shardstream StreamingDataset or a chain made from one "
                f"(ds.map(...)), got {type(dataset).__name__}; use torch.utils.data.DataLoader for other datasets"
            )
        _refuse_orderings(kwargs, chain)
        kwargs["worker_init_fn"] = WorkerStart(kwargs.get("worker_init_fn"))
        options = LoaderOptions(num_workers, collate_fn, pin_memory, ragged, stats, transfer, ring_bytes,
                                transfer_batches, device, device_prefetch)
        self._chain: Optional[ChainFeed] = None  # the chain strategy (None: a dataset's)
        if chain:
            _refuse_dataset_keywords(batch_decode, columns)
            self._init_chain(dataset, None if batch_size is DEFAULT_BATCH else batch_size, options, kwargs)
        else:
            self._init_dataset(dataset, 1 if batch_size is DEFAULT_BATCH else batch_size, batch_decode, columns,
                               options, kwargs)

    def _init_dataset(self, dataset, batch_size: int, batch_decode: Optional[bool],
                      columns: Optional[Sequence[str]], o: "LoaderOptions", kwargs: dict) -> None:
        """``__init__`` over a dataset."""
        check_batch_size(batch_size)
        dataset.check_columns(columns)
        own_samples = dataset.makes_own_samples()  # a subclass's samples, whose keys are its own
        collate_fn = o.collate_fn
        if batch_decode is None:
            if collate_fn is None and len(dataset.table.layouts()) > 1:
                dataset.check_batchable(columns)  # refuses, saying the streams have different columns
            batch_decode = collate_fn is None and not own_samples and bool(dataset.shards)
        elif batch_decode:
            dataset.check_batchable(columns)
        # per-sample dicts of the dataset's own columns are stacked into the batch path's column batch
        stack = (not batch_decode and collate_fn is None and not own_samples and bool(dataset.shards)
                 and len(dataset.table.layouts()) == 1)
        convert = collate_fn is None and bool(batch_decode or stack)  # to the batches of .torchform
        ragged = "pad" if o.ragged is None else o.ragged
        check_ragged(dataset, columns, ragged, convert)
        pin_memory, config = self._start_common(o)
        _adopt_batch_size(dataset, batch_size)  # last: a refused loader leaves the dataset as it was
        self.streaming_dataset = dataset
        self.batch_decode = bool(batch_decode)
        self._convert = convert
        self._ragged = ragged
        self._consumed = Consumed(dataset)
        self._expect: Optional[tuple] = None  # (next epoch, pending) the persistent workers will run
        # torch refuses drop_last without auto-batching; only epoch_tail="mosaic" makes a short step
        self._drop_last = bool(kwargs.pop("drop_last", False))
        if self.batch_decode:
            finish = self._worker_collate(keep if collate_fn is None else ThroughStamp(collate_fn))
            super().__init__(StepBatches(dataset, columns, self._drop_last), batch_size=None,
                             num_workers=o.num_workers, collate_fn=keep, pin_memory=False, **kwargs)
        else:
            if stack:
                collate_fn = StackSamples(dataset.table.kinds(columns))
            samples = SampleBatches(dataset, batch_size, collate_fn or default_collate, columns, self._drop_last)
            torch_pins = pin_memory and not stack and self._plane is None  # torch's thread pins user batches
            finish = self._worker_collate(keep)
            super().__init__(samples, batch_size=None, num_workers=o.num_workers, collate_fn=keep,
                             pin_memory=torch_pins, **kwargs)
        self.dataset.stats = config is not None
        self._start_transfer(finish, o.transfer_batches, slot_estimate(dataset, batch_size, columns),
                             self._device_depth())
        self._start_stats(config, dataset, batch_path=self.batch_decode)

    def _init_chain(self, chain, batch_size: Optional[int], o: "LoaderOptions", kwargs: dict) -> None:
        """``__init__`` over a chain (see :mod:`.torchpipe`)."""
        if batch_size is not None:
            check_batch_size(batch_size)
        check_chain_ragged(o.ragged)
        _, config = self._start_common(o)
        drop_last = bool(kwargs.pop("drop_last", False))
        if batch_size is not None:
            chain = chain.batch(batch_size, drop_last_batch=drop_last)
        self.chain = chain
        self.streaming_dataset = chain.root
        self.batch_decode = False
        self._drop_last = drop_last
        self._chain = feed = ChainFeed(chain, o.collate_fn, o.ragged)
        super().__init__(feed.batches, batch_size=None, num_workers=o.num_workers, collate_fn=keep, **kwargs)
        self.dataset.stats = config is not None
        slot = max(CHAIN_SLOT, slot_estimate(chain.root, batch_size or 1)) if chain.root.shards else CHAIN_SLOT
        # without a collate_fn of the user's, lists of numbers become arrays in the worker (and cross the ring)
        form = ChainForm(o.ragged) if o.collate_fn is None else None
        self._start_transfer(RingCollate(keep, form, chain_restamp), o.transfer_batches, slot, self._device_depth())
        self._start_stats(config, chain.root)

    def _start_common(self, o: "LoaderOptions") -> tuple:
        """What both paths set up alike: the device, the transfer plane, the stats; ``(pin_memory, stats config)``."""
        self._to_device = None if o.device is None else DevicePrefetcher(o.device, o.device_prefetch)
        pin_memory = o.pin_memory or (self._to_device is not None and self._to_device.pins)
        self._plane_for(o.transfer, o.ring_bytes, pin_memory, o.num_workers)
        return pin_memory, self._stats_config(o.stats)

    def _device_depth(self) -> int:
        return self._to_device.depth if self._to_device is not None else 0

    def _worker_collate(self, inner) -> RingCollate:
        """What each worker does last with a batch: shape it (:func:`.torchform.numpy_form`) and, with a ring,
        write it there."""
        form = functools.partial(numpy_form, ragged=self._ragged) if self._convert else None
        return RingCollate(inner, form, restamp)

    # -- iteration -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self._chain is not None:
            return self._iter_chain(self._chain)
        ds = self.streaming_dataset
        cursor = ds.cursor
        if self.num_workers and self._iterator is not None and self._expect != cursor.ticket:
            self._drop_workers()  # persistent workers would run another pass than the one asked for
        world = dataclasses.replace(ds.detect_world(), num_workers=self.num_workers, worker=0)
        if self.num_workers:
            cursor.upcoming(world)  # the plan is built (and cached) once here, before workers fork
        if self._iterator is None or not self.persistent_workers:
            self._prepare_ring()  # fresh workers start now
        it = super().__iter__()  # workers start (or resume) here, from the dataset's state as it is now
        self._began(it)
        if self.num_workers:  # the main process keeps the record of the pass the workers run
            cursor.begin(world)
        self._expect = cursor.ticket
        self._consumed.begin()
        batches = self._count(it) if self._loop_stats is None else self._count_timed(it)
        return batches if self._to_device is None else self._to_device(batches)

    def _iter_chain(self, feed: ChainFeed) -> Iterator[Any]:
        """:meth:`__iter__` over a chain: the same workers, ring and device, the chain's record (:mod:`.torchpipe`)."""
        if self.num_workers and self._iterator is not None and feed.expect != feed.chain.ticket:
            self._drop_workers()  # persistent workers would run another pass than the one asked for
        feed.begin(self.num_workers)
        if self._iterator is None or not self.persistent_workers:
            self._prepare_ring()  # fresh workers start now
        it = super().__iter__()  # fresh workers take the ticket feed.begin gave; persistent ones run their next
        self._began(it)
        stamps = feed.stamps(self._unbundled(it))
        meter = self._loop_stats
        batches = (feed.count(stamps, self._from_worker) if meter is None
                   else feed.count_timed(stamps, self._from_worker, meter))
        return batches if self._to_device is None else self._to_device(batches)

    def _count_timed(self, it) -> Iterator[Any]:
        """:meth:`_count`, timing the loop's waits for the stats."""
        meter = self._loop_stats
        for stamp, asked, got in timed_items(self._unbundled(it), meter):
            self._consumed.record(stamp.position)
            if stamp.item is None:  # a short last step dropped (drop_last=True)
                continue
            batch = self._received(stamp.item)
            if self._convert:
                meter.batch(asked, got, stamp.stats, 0, perf_counter() - got)
            else:
                meter.batch(asked, got, stamp.stats)
            yield batch
        self._consumed.finished = True

    def _count(self, it) -> Iterator[Any]:
        for stamp in self._unbundled(it):
            self._consumed.record(stamp.position)
            if stamp.item is not None:  # else a short last step dropped (drop_last=True)
                yield self._received(stamp.item)
        self._consumed.finished = True

    def _received(self, item) -> Any:
        """A batch from the workers (through the ring or the queue) as the training loop gets it."""
        item, pin = self._from_worker(item)
        if self._convert:
            return torch_form(item, pin, self._ragged)
        return _pin_memory(item) if pin else item

    def _drop_workers(self) -> None:
        it = self._iterator
        self._iterator = None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def __len__(self) -> int:
        """Batches this rank receives in the pass in progress (else in the next one); over a chain, whose
        operations may change the count, a TypeError (as for any iterable without a length)."""
        if self._chain is not None:
            raise TypeError("a StreamingDataLoader over a processing chain has no length: its operations "
                            "(filter, pack, ...) decide how many batches there are as they run")
        return self._consumed.length(self.streaming_dataset.detect_world(), self._drop_last)

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The dataset's (or chain's) state after the batches this loader handed to the training loop."""
        if self._chain is not None:
            return self._chain.state_dict(self.num_workers)
        return self._consumed.state_dict()

    def mixture_weights(self):
        """The streams' weights in effect where the training loop is (a weight schedule moves them); None
        over a chain."""
        if self._chain is not None:
            return None
        return self._consumed.mixture_weights()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at the state's position on the next ``iter(loader)`` (any world size); persistent
        workers are restarted by the next ``iter`` (it sees the pending state)."""
        if self._chain is not None:
            self._chain.load_state_dict(obj)
            return
        self.streaming_dataset.load_state_dict(obj)
        self._consumed.reset()

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter(loader)`` run ``epoch`` from its start (persistent workers are restarted)."""
        if self._chain is not None:
            self._chain.set_epoch(epoch)
        else:
            self.streaming_dataset.set_epoch(epoch)
            self._consumed.reset()

    def __del__(self) -> None:
        try:
            self._drop_workers()
            self.close_stats()
        except Exception:
            pass


def _refuse_orderings(kwargs: dict, chain: bool) -> None:
    """Refuse the DataLoader keywords that would reorder the batches."""
    for key in ("shuffle", "sampler", "batch_sampler"):
        if kwargs.get(key) not in (None, False):
            fix = ("the chain orders its items; use ds.shuffle(...)" if chain else "the dataset's epoch plan orders "
                   "the samples; pass shuffle=True, shuffle_seed=... to StreamingDataset instead")
            raise InvalidArgumentError(f"{key}={kwargs[key]!r}: {fix}")
    if kwargs.get("in_order") is False:
        raise InvalidArgumentError("in_order=False would hand out batches out of plan order; leave it True")


def _refuse_dataset_keywords(batch_decode: Optional[bool], columns: Optional[Sequence[str]]) -> None:
    """Refuse over a chain the keywords that only a dataset's decoding takes."""
    if columns is not None:
        raise InvalidArgumentError(f"columns={columns!r} picks a dataset's columns to decode; over a chain, "
                                   "select them with ds.select_columns([...]) before the other operations")
    if batch_decode is not None:
        raise InvalidArgumentError(f"batch_decode={batch_decode!r} is a dataset's decoding path; a chain makes "
                                   "its own items: leave it out")


def _adopt_batch_size(dataset, batch_size: int) -> None:
    if dataset.batch_size is None:
        if dataset.options.epoch_tail != "mosaic":  # which refuses the epoch, as mosaicml-streaming does
            dataset.adopt_batch_size(batch_size)
    elif dataset.batch_size != batch_size:
        raise InvalidArgumentError(
            f"the loader's batch_size={batch_size} differs from the dataset's batch_size={dataset.batch_size}; "
            "they must be equal (the per-device batch) so that every batch is one step of the epoch plan"
        )
