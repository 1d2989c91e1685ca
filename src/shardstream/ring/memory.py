"""A ring of batch slots in memory that a loader's training process and its workers share.

This is a data plane and nothing else: finished batches are written here by the worker
that made them and read in place by the training process. The order of batches, plan
positions and cache state never live here; they travel with each batch as before.

The memory is one ``memfd`` (Linux): a file with no name in any file system, mapped by
each process that holds its descriptor. It is gone when the last process holding it ends,
``kill -9`` included, so nothing can be left behind or collide with another job or
another loader. Where ``memfd_create`` is missing, an anonymous shared mapping serves
workers that are forked (no descriptor can be sent to a spawned one). Its size is not
bounded by ``/dev/shm``.

Layout: a page of state bytes (one per slot), then ``slots`` slots of ``slot_bytes``
each. Worker ``w`` of ``W`` writes only into its own slots ``[w * k, (w + 1) * k)``:
no lock is shared between processes. A slot is ``FREE`` or ``TAKEN``; a worker takes a
free one of its own, writes a batch into it and sends a small descriptor; the training
process releases the slot when the last array viewing it is gone (see :class:`Lease`).
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
import weakref
from typing import Callable, Optional

import numpy as np

from ..errors import InvalidArgumentError, ShardstreamError

FREE, TAKEN = 0, 1
PAGE = 4096
ALIGN = 64  # every array in a slot starts at a multiple of this

_keys = itertools.count()
_rings: "weakref.WeakValueDictionary[str, Ring]" = weakref.WeakValueDictionary()  # this process's rings by key


FORKED_ONLY = ("this platform has no memfd_create, and an anonymous shared mapping reaches forked "
               "workers only; use multiprocessing_context='fork'")


class RingUnavailableError(ShardstreamError, OSError):
    """No ring could be made here (no shared mapping, or not enough memory for it)."""


def round_up(n: int, to: int) -> int:
    return -(-int(n) // to) * to


def ring_size(slots: int, slot_bytes: int) -> int:
    """Bytes of a ring: the state page(s), then the slots."""
    return round_up(slots, PAGE) + slots * slot_bytes


class Ring:
    """``slots`` slots of ``slot_bytes`` (a multiple of 4096) for ``workers`` workers (see the module docstring)."""

    def __init__(self, workers: int, slots_per_worker: int, slot_bytes: int, *, attach=None) -> None:
        if workers < 1 or slots_per_worker < 1 or slot_bytes < PAGE or slot_bytes % PAGE:
            raise InvalidArgumentError(
                f"a ring needs workers >= 1, slots_per_worker >= 1 and slot_bytes a multiple of {PAGE} "
                f"(got {workers}, {slots_per_worker}, {slot_bytes})")
        self.workers = workers
        self.per_worker = slots_per_worker
        self.slots = workers * slots_per_worker
        self.slot_bytes = slot_bytes
        self.size = ring_size(self.slots, slot_bytes)
        if attach is None:  # the training process makes it
            self.fd, self._mm = _map(self.size)
            self.key = f"{os.getpid()}-{next(_keys)}"
            _rings[self.key] = self
        else:  # a spawned worker maps its training process's ring: (descriptor, key)
            fd, self.key = attach
            self.fd = None
            try:
                self._mm = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED)
            finally:
                os.close(fd)
        self.array = np.frombuffer(self._mm, np.uint8)
        self.address = self.array.ctypes.data
        self.flags = self.array[:self.slots]
        self.data_offset = self.size - self.slots * self.slot_bytes
        self._held = np.zeros(self.slots, bool)  # slots with a live lease in this process
        self._owner = os.getpid()  # the process whose leases release slots (a forked worker inherits copies)
        self._fence = threading.Lock()
        # a weak reference to a callable that may defer a release (it returns True if it did)
        self.on_release: Optional[Callable[[], Optional[Callable[[Ring, int], bool]]]] = None
        self._next = 0  # the worker's next slot to look at
        self.pinned = False  # page-locked for an accelerator's copies (in the training process)

    # -- processes -----------------------------------------------------------------------------
    def __reduce__(self):
        """For a spawned worker: the descriptor travels with the process's start (no name anywhere)."""
        if self.fd is None:
            raise RingUnavailableError("this ring is an anonymous mapping: only forked workers can share it")
        from multiprocessing.reduction import DupFd

        return (_attach, (DupFd(self.fd), self.workers, self.per_worker, self.slot_bytes, self.key))

    # -- the worker's side ---------------------------------------------------------------------
    def acquire(self, worker: int) -> Optional[int]:
        """A free slot of ``worker``'s, now taken, or None when all of them are taken."""
        lo, k = worker * self.per_worker, self.per_worker
        flags = self.flags
        start = self._next
        for j in range(k):
            slot = lo + (start + j) % k
            if flags[slot] == FREE:
                with self._fence:  # the flag is read before the slot is written
                    flags[slot] = TAKEN
                self._next = (start + j + 1) % k
                return slot
        return None

    def give_back(self, slot: int) -> None:
        """A slot taken by this worker but not sent (its batch did not fit)."""
        self.flags[slot] = FREE

    def view(self, slot: int) -> np.ndarray:
        """The slot's bytes (for the worker that took it)."""
        start = self.data_offset + slot * self.slot_bytes
        return self.array[start:start + self.slot_bytes]

    # -- the training process's side -----------------------------------------------------------
    def lease(self, slot: int, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of a received slot as a uint8 array; the slot is released when this
        array and every view of it are gone."""
        if not 0 <= slot < self.slots or not 0 <= nbytes <= self.slot_bytes:
            raise InvalidArgumentError(f"slot {slot} / {nbytes} bytes is outside this ring "
                                       f"({self.slots} slots of {self.slot_bytes} bytes)")
        if self._held[slot]:
            raise RingStateError(f"slot {slot} was received twice without being released")
        self._held[slot] = True
        return np.asarray(Lease(self, slot, nbytes))

    def release(self, slot: int) -> None:
        """The slot's batch is gone in this process: its worker may write into it again. Not in a forked
        worker, which may free its copy of a lease of its parent's, whose batch the parent still holds."""
        if os.getpid() != self._owner:
            return
        defer = self.on_release() if self.on_release is not None else None
        if defer is not None and defer(self, slot):
            return  # released later (e.g. once a copy from it has finished)
        self.free(slot)

    def free(self, slot: int) -> None:
        with self._fence:  # every read of the slot comes before the flag says free
            self._held[slot] = False
            self.flags[slot] = FREE

    def held(self) -> int:
        """Slots whose batch is still alive in this process."""
        return int(self._held.sum())

    def reclaim(self) -> None:
        """Free every slot without a live lease here. Only when no worker of this ring is alive: a
        batch taken by a worker that ended, or sent but never received, is then nobody's."""
        with self._fence:
            self.flags[~self._held] = FREE

    def close(self) -> None:
        """Forget the descriptor; the mapping goes with the last array viewing it."""
        fd, self.fd = self.fd, None
        _rings.pop(self.key, None)
        if fd is not None:
            os.close(fd)


class RingStateError(ShardstreamError, RuntimeError):
    """A ring's slots were used out of their rules (a slot received twice)."""


class Lease:
    """The bytes of one received slot, exposed to numpy; releases the slot when numpy lets go of it."""

    __slots__ = ("__array_interface__", "ring", "slot")

    def __init__(self, ring: Ring, slot: int, nbytes: int) -> None:
        self.ring = ring
        self.slot = slot
        start = ring.address + ring.data_offset + slot * ring.slot_bytes
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (start, False), "version": 3}

    def __del__(self) -> None:
        self.ring.release(self.slot)


def find(key: str) -> Ring:
    """This process's ring ``key`` (a batch's descriptor names it)."""
    ring = _rings.get(key)
    if ring is None:
        raise RingStateError(f"a batch names the ring {key!r}, which this process does not have; batches "
                             "written into a ring are read by the process that made it")
    return ring


def spawn_shareable() -> bool:
    """Whether a ring made here can reach spawned workers (a ``memfd`` descriptor can; the anonymous
    mapping that stands in for it where ``memfd_create`` is missing reaches forked workers only)."""
    return hasattr(os, "memfd_create")


def _map(size: int) -> tuple[Optional[int], mmap.mmap]:
    create = getattr(os, "memfd_create", None)
    if not hasattr(mmap, "MAP_SHARED"):  # Windows
        raise RingUnavailableError("this platform has no shared mappings")
    if create is None:
        try:
            return None, mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
        except (OSError, ValueError) as e:
            raise RingUnavailableError(f"no shared mapping of {size:,} bytes could be made: {e}") from e
    fd = -1
    try:
        fd = create("shardstream-ring", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        os.posix_fallocate(fd, 0, size)  # memory now, or an error now (never a SIGBUS later)
        return fd, mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        raise RingUnavailableError(f"a ring of {size:,} bytes could not be made: {e}") from e


def _attach(fd_wrapper, workers: int, per_worker: int, slot_bytes: int, key: str) -> Ring:
    """A spawned worker's view of the ring its training process made."""
    return Ring(workers, per_worker, slot_bytes, attach=(fd_wrapper.detach(), key))
