"""How batches cross from DataLoader workers to the training process.

A worker sends each stamped batch made ready by the loader's ``finish`` (the user's collate,
shaping, a ring slot: see :mod:`.torchring`). With a ring, batches go in *bundles*: up to a
few MB of them, or whatever a worker made in :data:`BUNDLE_SECONDS`, cross torch's worker
queue at once, so the training process pays torch's per-item cost (queues, pickling, its
profiler hooks) once per bundle, not once per batch. :func:`unbundled` then hands the loop
the batches in exactly the order torch would give them one by one (round robin over the
workers still sending), so plan positions, ``state_dict()`` and resumption are unchanged.
"""

from __future__ import annotations

import multiprocessing
import weakref
from collections import deque
from time import perf_counter
from typing import Any, Iterator, Optional

import torch

from ..stats.loaders import rows_of
from ..stats.meter import metered, sent_now, worker_label
from .torchring import bundle_size, plane_for, slots_per_worker, workers_gone

#: A worker sends a bundle once its batches took this long to make, even if it holds fewer than its size.
BUNDLE_SECONDS = 0.05


class Bundle:
    """Batches a worker sends at once, with its id and whether they are its last of the pass."""

    __slots__ = ("items", "worker", "last")

    def __init__(self, items: list, worker: int, last: bool) -> None:
        self.items, self.worker, self.last = items, worker, last

    def __reduce__(self):
        return (Bundle, (self.items, self.worker, self.last))


def sent(it: Iterator[Any], source) -> Iterator[Any]:
    """What a worker sends of ``it`` (stamped batches of ``source``, the loader's IterableDataset): each
    batch with its stats attached (when ``source.stats``), made ready by ``source.finish``, in bundles of up
    to ``source.bundle`` batches when that is more than 1."""
    info = torch.utils.data.get_worker_info()
    if source.stats:
        it = metered(it, worker_label(info), rows_of)
    if source.finish is not None:
        it = map(source.finish, it)
    if source.bundle <= 1 or info is None:
        return it
    return bundles(it, source.bundle, info.id)


def bundles(it: Iterator[Any], size: int, worker: int) -> Iterator[Bundle]:
    """The items of ``it`` in bundles of at most ``size`` and about :data:`BUNDLE_SECONDS` of making (so a
    slow batch still leaves at once), then an empty bundle marked last."""
    group: list = []
    t0 = perf_counter()
    for item in it:
        group.append(item)
        if len(group) >= size or perf_counter() - t0 >= BUNDLE_SECONDS:
            sent_now(group)
            yield Bundle(group, worker, False)
            group = []
            t0 = perf_counter()
    sent_now(group)
    yield Bundle(group, worker, True)


def unbundled(it: Iterator[Any], workers: int) -> Iterator[Any]:
    """The batches of the bundles workers sent, in the order torch gives one batch per crossing: round robin
    over the workers that still send (each pass starts at worker 0), so plan positions come in plan order."""
    queues = [deque() for _ in range(workers)]
    ended = [False] * workers
    cycle = deque(range(workers))
    while cycle:
        w = cycle[0]
        while not queues[w] and not ended[w]:
            got = next(it, None)
            if got is None:  # torch's pass ended early (it raised already, or was closed)
                ended = [True] * workers
                break
            queues[got.worker].extend(got.items)
            ended[got.worker] = ended[got.worker] or got.last
        if queues[w]:
            yield queues[w].popleft()
            cycle.rotate(-1)
        else:
            cycle.popleft()  # this worker sent its last batch: torch skips it too
    for _ in it:  # torch's end of the pass (its workers stop): every worker has sent its last bundle
        pass


class WorkerTransfer:
    """The transfer side of a shardstream DataLoader (a mixin of a ``torch.utils.data.DataLoader`` subclass
    whose ``dataset`` has ``stats``, ``finish`` and ``bundle`` attributes, read by :func:`sent`)."""

    def _plane_for(self, transfer: str, ring_bytes: Optional[int], pin: bool, num_workers: int):
        """Check the transfer keywords; the loader's ring plane (None: torch's queue, or no workers)."""
        self._plane = plane_for(transfer, ring_bytes, pin, num_workers)
        self._pin = pin and torch.cuda.is_available()
        self._torch_it = None  # the last pass's torch iterator, weakly (its workers write into the ring)
        return self._plane

    def _start_transfer(self, finish, transfer_batches: Optional[int], slot_bytes: int, device_depth: int) -> None:
        """After ``DataLoader.__init__``: what workers do last to each batch, and how many they send at once
        (bundles only with a ring: through torch's queue a batch costs per byte, not per crossing)."""
        bundle = bundle_size(transfer_batches, slot_bytes)
        self.dataset.finish = finish
        self.dataset.bundle = bundle if self._plane is not None else 1
        self._slot_bytes = slot_bytes
        self._device_depth = device_depth

    def _prepare_ring(self) -> None:
        """Before fresh workers start: the last pass's workers are stopped, and the ring they wrote into is
        reclaimed (or a new one made) for the new ones."""
        if self._plane is None:
            return
        gone = workers_gone(self._torch_it and self._torch_it())
        slots = slots_per_worker(self.dataset.bundle, self.prefetch_factor or 2, self._device_depth)
        context = self.multiprocessing_context
        method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
        self.dataset.finish.ring = self._plane.prepare(self.num_workers, slots, self._slot_bytes, gone,
                                                       forked=method == "fork")

    def _began(self, it) -> None:
        self._torch_it = weakref.ref(it)

    def _unbundled(self, it: Iterator[Any]) -> Iterator[Any]:
        """The stamped batches of torch's iterator ``it``, one at a time."""
        return it if self.dataset.bundle <= 1 or not self.num_workers else unbundled(it, self.num_workers)

    def _from_worker(self, item: Any) -> tuple[Any, bool]:
        """``(batch, whether it still needs pinning)`` of a stamped batch's item from a worker."""
        pin = self._pin and not self.pin_memory  # torch's pin-memory thread pins when it runs
        if self._plane is not None:
            return self._plane.received(item, pin)
        return item, pin
