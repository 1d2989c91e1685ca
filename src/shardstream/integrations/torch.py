"""PyTorch bridge: DataLoader worker discovery, without importing torch eagerly."""

from __future__ import annotations

import sys


def worker_info() -> tuple[int, int] | None:
    """``(worker id, number of workers)`` inside a DataLoader worker, else ``None``.

    torch is consulted only if the process has already imported it, so plain numpy
    users never pay for the import.
    """
    if "torch" not in sys.modules:
        return None
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    return None if info is None else (int(info.id), int(info.num_workers))
