"""What torch knows about this process, asked only if the process has imported torch.

Nothing here imports torch itself, so numpy and JAX users never pay for the import.
"""

from __future__ import annotations

import sys


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


def register_iterable(cls: type) -> None:
    """Make ``isinstance(x, torch.utils.data.IterableDataset)`` true for instances of ``cls``,
    so a plain DataLoader treats them as iterable datasets (no-op unless torch is imported)."""
    if "torch" not in sys.modules:
        return
    from torch.utils.data import IterableDataset

    if not issubclass(cls, IterableDataset):
        IterableDataset.register(cls)


_PR_SET_PDEATHSIG = 1
_armed_for: int | None = None  # the parent pid the death signal was armed for


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

    parent = os.getppid()
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
