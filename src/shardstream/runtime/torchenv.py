"""What torch knows about this process, asked only if the process has imported torch.

Nothing here imports torch itself, so numpy and JAX users never pay for the import.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable, Optional

_DATASET_MODULE = "torch.utils.data.dataset"


def worker_info() -> tuple[int, int] | None:
    """``(worker id, number of workers)`` inside a DataLoader worker, else ``None``."""
    if "torch" not in sys.modules:
        return None
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    return None if info is None else (int(info.id), int(info.num_workers))


def distributed_world() -> tuple[int, int] | None:
    """``(rank, world size)`` of an initialised ``torch.distributed`` process group, else ``None``.

    Reads the process group's local state only; no collective is ever issued.
    """
    if "torch.distributed" not in sys.modules:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


_pending: list[type] = []  # classes to register once torch.utils.data is imported


def register_iterable(cls: type) -> None:
    """Make ``isinstance(x, torch.utils.data.IterableDataset)`` true for instances of ``cls``
    (and of its subclasses), so a plain DataLoader treats them as iterable datasets.

    If torch is not imported yet, the registration happens right after
    ``torch.utils.data.dataset`` is imported, whenever that is: the order of imports does
    not matter.
    """
    module = sys.modules.get("torch.utils.data.dataset")
    iterable = getattr(module, "IterableDataset", None)
    if iterable is not None:
        _register(iterable, cls)
        return
    if cls not in _pending:
        _pending.append(cls)
    if not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


def _register(iterable: type, cls: type) -> None:
    if not issubclass(cls, iterable):
        iterable.register(cls)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``torch.utils.data.dataset`` so that the classes
    waiting in ``_pending`` are registered as soon as that module has run, then leaves ``sys.meta_path``."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _DATASET_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenRegister(spec.loader)
                return spec
        return None


class _ThenRegister(importlib.abc.Loader):
    """A module loader that runs the wrapped one, then registers the pending classes."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterAfterImport)]
        iterable = getattr(module, "IterableDataset", None)
        if iterable is not None:
            while _pending:
                _register(iterable, _pending.pop(0))

    def __getattr__(self, name: str):  # get_source, get_resource_reader ... of the wrapped loader
        return getattr(self.loader, name)


_PR_SET_PDEATHSIG = 1
_armed_for: int | None = None  # the parent pid the death signal was armed for
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BYTES = 32 << 20  # glibc's largest mmap threshold on 64-bit
_tuned_for: int | None = None  # the pid whose allocator keeps freed memory


def prepare_worker() -> None:
    """In a DataLoader worker: die with the parent (:func:`die_with_parent`) and reuse freed memory
    (:func:`reuse_freed_memory`). A no-op elsewhere."""
    die_with_parent()
    reuse_freed_memory()


class WorkerStart:
    """A DataLoader's ``worker_init_fn``: :func:`prepare_worker` first, before the worker waits for its first
    task (a worker that arms the death signal only when it iterates outlives a rank killed while it starts),
    then the user's own ``worker_init_fn``, if any."""

    def __init__(self, user: Optional[Callable[[int], Any]] = None) -> None:
        self.__wrapped__ = user

    def __call__(self, worker_id: int) -> None:
        prepare_worker()
        if self.__wrapped__ is not None:
            self.__wrapped__(worker_id)


def reuse_freed_memory() -> None:
    """In a DataLoader worker on Linux with glibc, keep freed blocks of up to 32 MB for the next
    allocations instead of returning them to the kernel: a worker allocates batch-sized arrays
    at every step, and memory the kernel must map again costs page faults on first touch, often
    more than decoding. Once per worker process; a no-op elsewhere (the training process is left as it is)."""
    global _tuned_for
    if not sys.platform.startswith("linux") or worker_info() is None:
        return
    import os

    if _tuned_for == os.getpid():
        return
    _tuned_for = os.getpid()
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        if hasattr(libc, "mallopt"):  # glibc (musl has none)
            libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)
            libc.mallopt(_M_TRIM_THRESHOLD, 4 * _KEEP_BYTES)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """In a DataLoader worker, have the kernel kill this process when its parent dies (Linux).

    A worker whose rank process was killed with SIGKILL can otherwise block forever at
    exit (its queue's feeder thread waits on a pipe nobody reads), keeping pins on
    cached shards and the job's output pipes open. Once per worker process; a no-op
    elsewhere.
    """
    global _armed_for
    if not sys.platform.startswith("linux") or worker_info() is None:
        return
    import os

    import multiprocessing

    # the process that started this worker: os.getppid() would name init if it died already
    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None else os.getppid()
    if _armed_for == parent:
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    _armed_for = parent
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
