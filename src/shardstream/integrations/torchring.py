"""The ring data plane in a PyTorch DataLoader (``transfer="ring"``, see :mod:`shardstream.ring`).

In each worker, :class:`RingCollate` is the last thing done to a stamped batch: the finished
batch (numpy columns, or whatever a user's ``collate_fn`` made: tensors included) is copied
into a free slot of the worker's and only a :class:`~shardstream.ring.pack.Packed`
descriptor crosses torch's worker queue (in bundles: :mod:`.torchsend`). Unpickling it in the training process gives the
batch back as arrays and tensors that view the slot: nothing is copied there, no memory is
touched for the first time. A batch that finds no free slot, or does not fit in one, crosses
the queue as before (:class:`Spilled`); the next pass's ring is made big enough for it.

With ``pin_memory=True`` (and CUDA) the ring is page-locked once (``cudaHostRegister``), so
batches are pinned where they land and ``.to(device, non_blocking=True)`` copies straight
from the slot; a slot is then handed back to its worker only once the copies enqueued before
its release have run (an event recorded at release, polled at each batch).
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections import deque
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..errors import InvalidArgumentError
from ..ring.memory import FORKED_ONLY, PAGE, Ring, RingUnavailableError, ring_size, round_up, spawn_shareable
from ..ring.pack import pack, register_leaf

TRANSFERS = ("auto", "ring", "queue")
_MIN_SLOT = 64 * 1024
BUNDLE_BYTES = 8 << 20  # a worker sends about this much at once (one crossing of torch's queue)
MAX_BUNDLE = 16


def _tensor_array(t: torch.Tensor):
    """A CPU tensor's data as a numpy array (a uint8 view for dtypes numpy lacks), or None to let torch send it."""
    if t.device.type != "cpu" or t.layout != torch.strided or t.requires_grad or t.is_conj() or t.is_neg():
        return None
    try:
        return t.numpy(), None
    except TypeError:  # bfloat16, float8 ...: bytes, with the dtype and shape to view them as
        flat = t.contiguous().reshape(-1)
        return flat.view(torch.uint8).numpy(), (str(flat.dtype).rsplit(".", 1)[-1], tuple(t.shape))


def _array_tensor(a: np.ndarray, tag) -> torch.Tensor:
    t = torch.from_numpy(a)
    if tag is None:
        return t
    return t.view(getattr(torch, tag[0])).reshape(tag[1])


register_leaf(torch.Tensor, _tensor_array, _array_tensor)


class Spilled:
    """A batch that crossed the queue instead of the ring, and the slot bytes it would have needed
    (0: no slot of its worker was free)."""

    __slots__ = ("item", "nbytes")

    def __init__(self, item: Any, nbytes: int) -> None:
        self.item, self.nbytes = item, nbytes

    def __reduce__(self):
        return (Spilled, (self.item, self.nbytes))


_worker = (-1, -1)  # (pid, worker id) of this process, asked of torch once


def _worker_id() -> int:
    global _worker
    pid = os.getpid()
    if _worker[0] != pid:
        info = torch.utils.data.get_worker_info()
        _worker = (pid, -1 if info is None else int(info.id))
    return _worker[1]


class RingCollate:
    """What a worker does last to each stamped batch: ``inner`` (the stamp's own collate), ``form``
    (numpy-side shaping of the batch, or None), then the stamp's item written into the ring.
    ``rewrap(stamp, item)`` makes the stamp again with another item."""

    def __init__(self, inner: Callable, form: Optional[Callable], rewrap: Callable) -> None:
        self.inner, self.form, self.rewrap = inner, form, rewrap
        self.ring: Optional[Ring] = None  # set by the loader before its workers start

    def __call__(self, stamp):
        stamp = self.inner(stamp)
        item = stamp.item
        if item is None:
            return stamp
        if self.form is not None:
            item = self.form(item)
        ring, worker = self.ring, _worker_id()
        if ring is None or not 0 <= worker < ring.workers:
            return self.rewrap(stamp, item)
        packed, nbytes = pack(ring, worker, item)
        return self.rewrap(stamp, packed if packed is not None else Spilled(item, nbytes))


class RingPlane:
    """A loader's ring: made before its workers start, sized from the batches, pinned on request."""

    def __init__(self, transfer: str, ring_bytes: Optional[int], pin: bool) -> None:
        if transfer not in TRANSFERS:
            raise InvalidArgumentError(f"transfer={transfer!r} is not one of {', '.join(map(repr, TRANSFERS))}")
        if ring_bytes is not None and (isinstance(ring_bytes, bool) or not isinstance(ring_bytes, int)
                                       or ring_bytes < PAGE):
            raise InvalidArgumentError(f"ring_bytes={ring_bytes!r} must be an int of at least {PAGE} bytes")
        self.transfer = transfer
        self.ring_bytes = ring_bytes if ring_bytes is not None else _env_ring_bytes()
        self.pin = pin
        self.ring: Optional[Ring] = None
        self.spilled = 0  # batches that crossed the queue (no free slot, or too big)
        self.needed = 0  # the largest batch that did not fit in a slot
        self.pending: deque = deque()  # (ring, slot, CUDA event) of pinned slots released, not yet free
        self._said: set = set()

    # -- before the workers start ---------------------------------------------------------------
    def prepare(self, workers: int, per_worker: int, slot_bytes: int, old_workers_gone: bool,
                forked: bool = True) -> Optional[Ring]:
        """The ring for a pass of ``workers`` fresh workers: the last one, reclaimed, when it is big
        enough and its workers are gone; else a new one (None when none can be made). ``forked``: whether
        the workers are forked (else they are sent the ring's descriptor, which an anonymous mapping lacks)."""
        slot_bytes = max(_MIN_SLOT, round_up(max(slot_bytes, self.needed * 5 // 4), PAGE))
        ring = self.ring
        if ring is not None and old_workers_gone and ring.workers >= workers and ring.slot_bytes >= slot_bytes \
                and ring.per_worker >= per_worker:
            self._poll(wait=True)
            ring.reclaim()
            return ring
        if not forked and not spawn_shareable():
            self.ring = None
            self._fallback(FORKED_ONLY)
            return None
        self.ring = self._make(workers, per_worker, slot_bytes)
        return self.ring

    def _make(self, workers: int, per_worker: int, slot_bytes: int) -> Optional[Ring]:
        cap = self.ring_bytes
        while per_worker >= 1 and cap is not None and ring_size(workers * per_worker, slot_bytes) > cap:
            per_worker -= 1
        if per_worker < 1:
            self._fallback(f"ring_bytes={cap:,} cannot hold one slot of {slot_bytes:,} bytes per worker for "
                           f"{workers} workers; raise it to at least {ring_size(workers, slot_bytes):,} "
                           "(or SHARDSTREAM_RING_BYTES)")
            return None
        try:
            ring = Ring(workers, per_worker, slot_bytes)
        except RingUnavailableError as e:
            self._fallback(f"{e}; free memory, or lower num_workers or the batch size")
            return None
        if self.pin:
            _pin(ring, self)
        return ring

    def _fallback(self, why: str) -> None:
        if self.transfer == "ring":
            raise RingUnavailableError(f"transfer='ring': {why}")
        self.say(f"batches cross through torch's worker queue instead of a shared ring: {why}")

    def say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            warnings.warn(message, RingFallbackWarning, stacklevel=4)

    # -- in the training process, per batch ----------------------------------------------------
    def received(self, item: Any, pin: bool) -> tuple[Any, bool]:
        """``(batch, whether it still needs pinning)`` of a received item (a spilled batch is unwrapped and
        noted; a batch in a page-locked ring is pinned already)."""
        if self.pending:
            self._poll()
        if type(item) is not Spilled:
            return item, pin and not (self.ring is not None and self.ring.pinned)
        self.spilled += 1
        if item.nbytes > (self.ring.slot_bytes if self.ring is not None else 0):
            self.needed = max(self.needed, item.nbytes)
            self.say(f"a batch of {item.nbytes:,} bytes did not fit in a ring slot of "
                      f"{self.ring.slot_bytes if self.ring else 0:,} bytes and crossed torch's queue; the ring is made "
                      "bigger when workers next start (each pass, unless persistent_workers=True)")
        return item.item, pin

    def defer(self, ring: Ring, slot: int) -> bool:
        """A pinned slot's release waits for the copies enqueued before it (see the module docstring)."""
        if not torch.cuda.is_initialized():
            return False
        try:
            event = torch.cuda.Event()
            event.record()
        except RuntimeError:  # CUDA is going away (the process is ending): nothing is copying any more
            return False
        self.pending.append((ring, slot, event))
        return True

    def _poll(self, wait: bool = False) -> None:
        pending = self.pending
        while pending and (wait or pending[0][2].query()):
            ring, slot, event = pending.popleft()
            if wait:
                event.synchronize()
            ring.free(slot)


class RingFallbackWarning(UserWarning):
    """Batches cross torch's worker queue rather than the ring (said once per reason)."""


def _pin(ring: Ring, plane: RingPlane) -> None:
    """Page-lock the ring for CUDA copies (once); unregistered when the ring goes."""
    if not torch.cuda.is_available():
        return
    cudart = torch.cuda.cudart()
    err = cudart.cudaHostRegister(ring.address, ring.size, 0)
    if int(err) != 0:
        plane.say(f"the ring could not be page-locked (cudaHostRegister error {int(err)}); pinned batches are "
                   "copied into pinned memory instead")
        return
    ring.pinned = True
    # weakly: a ring <-> plane cycle would outlive the loader until a garbage collection, and a forked worker
    # collecting it would destroy the parent's CUDA events (which aborts the worker)
    ring.on_release = weakref.WeakMethod(plane.defer)
    weakref.finalize(ring, cudart.cudaHostUnregister, ring.address)


def bundle_size(given: Optional[int], slot_bytes: int) -> int:
    """Batches a worker sends at once: ``given`` (``transfer_batches``), else about :data:`BUNDLE_BYTES`
    worth, between 1 and :data:`MAX_BUNDLE`. Torch's queue then costs the training process once per bundle,
    not once per batch."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise InvalidArgumentError(f"transfer_batches={given!r} must be an int >= 1 (batches a worker sends at "
                                       "once) or None (about 8 MB worth)")
        return given
    return max(1, min(MAX_BUNDLE, BUNDLE_BYTES // max(slot_bytes, 1)))


def slots_per_worker(bundle: int, prefetch_factor: int, device_depth: int) -> int:
    """A worker's slots: ``prefetch_factor`` bundles in flight, the bundle the loop is taking batches from and
    the one torch asked for on receiving it, the batch the loop holds, one being released, and the batches
    copied ahead to a device."""
    return bundle * (prefetch_factor + 2) + 2 + device_depth


def plane_for(transfer: str, ring_bytes: Optional[int], pin: bool, num_workers: int) -> Optional[RingPlane]:
    """The ring plane of a loader with ``num_workers`` (None: batches cross torch's queue, or never cross)."""
    plane = RingPlane(transfer, ring_bytes, pin)  # checks the keywords in every case
    if transfer == "queue":
        return None
    if not num_workers:
        if transfer == "ring":
            raise InvalidArgumentError("transfer='ring' needs num_workers >= 1: with no workers, batches are made "
                                       "in the training process and cross nothing")
        return None
    return plane


def workers_gone(torch_it) -> bool:
    """Whether the workers of a torch DataLoader iterator (None: there was none) have all ended; stops
    them first (a pass left before its end keeps its workers until its iterator is collected)."""
    workers = getattr(torch_it, "_workers", None)
    if not workers:
        return True
    if any(w.is_alive() for w in workers):
        torch_it._shutdown_workers()
    return not any(w.is_alive() for w in workers)


def _env_ring_bytes() -> Optional[int]:
    raw = os.environ.get("SHARDSTREAM_RING_BYTES")
    if not raw:
        return None
    try:
        value = int(float(raw))
    except ValueError:
        raise InvalidArgumentError(f"SHARDSTREAM_RING_BYTES={raw!r} is not a number of bytes") from None
    if value < PAGE:
        raise InvalidArgumentError(f"SHARDSTREAM_RING_BYTES={raw!r} must be at least {PAGE} bytes")
    return value


def slot_estimate(dataset, batch_size: int, columns=None) -> int:
    """Bytes a slot needs for a batch of ``dataset``: exact when every column has a fixed shape, else
    twice the shards' raw bytes per sample (variable-length columns padded, headroom)."""
    kinds = dataset.table.kinds(columns) if dataset.shards else []
    per_sample = 0
    if kinds and all(kind == "array" for _, kind, _ in kinds):
        per_sample = sum(np.dtype(d).itemsize * int(np.prod(shape, dtype=np.int64)) for _, _, (d, shape) in kinds)
        return batch_size * per_sample + len(kinds) * 64
    for shard in dataset.shards:
        raw, n = getattr(getattr(shard, "raw_data", None), "bytes", 0), getattr(shard, "samples", 0)
        if raw and n:
            per_sample = max(per_sample, raw // n + 1)
    return 2 * batch_size * max(per_sample, 64) + 64 * 2 * max(len(kinds), 1)
