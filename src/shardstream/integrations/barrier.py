"""A barrier across the processes of an initialised ``torch.distributed`` process group, for scripts
that synchronise their ranks (one writes a dataset, the others wait) as mosaicml-streaming's
``streaming.base.distributed.barrier`` lets them.

shardstream's reading never waits on other ranks (each computes its own part of the plan), except
where a processing chain's ranks agree on where an epoch ends (:mod:`shardstream.engine.agree`);
this is for user code. Without an initialised process group (one process, or torch never imported)
there is nothing to wait for and it returns at once.
"""

from __future__ import annotations

import sys

__all__ = ["barrier"]


def barrier() -> None:
    """Wait until every rank of the ``torch.distributed`` process group gets here; a no-op without one."""
    if "torch.distributed" not in sys.modules:  # a process group needs torch.distributed imported
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
