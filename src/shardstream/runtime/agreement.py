"""Whether every rank has a batch: the one small collective of :mod:`shardstream.engine.agree`.

``runtime_agreement(ranks)`` picks the job's own runtime, asked only if the process imported it:

- **torch.distributed** (initialised): ``all_reduce(MIN)`` of one int over a gloo process group
  of all ranks that this module makes at the first agreement, which every rank reaches at the
  same point of its program (and again after the process group was destroyed and made anew). A NCCL job thus never syncs its GPU (nor
  waits behind its own queued GPU collectives) for it. Needs torch's gloo backend.
- **jax.distributed** (initialised): the coordination service's key-value store, on the CPU,
  with no device computation: each process adds ``1 + (0 if it has a batch else 2**20)`` to the
  step's counter; the last to arrive publishes the verdict, the others wait for it (two calls to
  the coordinator per step). The keys of a step are deleted at the next one.

A runtime whose number of processes is not the world's (a test simulating ranks in one process)
agrees nothing: None.
"""

from __future__ import annotations

import itertools
import sys
from typing import Optional

from .jaxenv import distributed_world as jax_world

_JAX_WAIT_MS = 30 * 60 * 1000  # torch's default collective timeout for gloo, for a rank that waits on the others
_ABSENT = 1 << 20  # what a process without a batch adds to a step's counter (more than any number of processes)
_passes = itertools.count()  # agreed passes of this process: every process of a job counts them alike
_torch_group: dict = {}  # "group": the gloo group of all ranks (see _gloo_group)


def runtime_agreement(ranks: int):
    """The agreement of ``ranks`` processes through torch.distributed or jax.distributed, or None."""
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return TorchAgreement() if dist.get_world_size() == ranks else None
    found = jax_world()
    if found is not None and found[1] == ranks:
        from jax._src import distributed

        return JaxAgreement(distributed.global_state.client, found[1], next(_passes))
    return None


def _gloo_group():
    """This module's gloo group of all ranks: made at the first agreement, again after the process group was
    destroyed. Only the group is kept (keeping the default group alive past ``destroy_process_group`` would
    have it torn down at interpreter exit, which can abort the process)."""
    import torch.distributed as dist

    group = _torch_group.get("group")
    if group is not None:
        try:
            dist.get_backend(group)  # raises once the group was destroyed
        except (ValueError, RuntimeError):
            group = None
    if group is None:
        group = _torch_group["group"] = dist.new_group(backend="gloo")
    return group


class TorchAgreement:
    """``all_have(flag)``: the MIN of every rank's flag, over this module's gloo group."""

    def __init__(self) -> None:
        import torch

        self.flag = torch.zeros(1, dtype=torch.int32)
        self.group: Optional[object] = None

    def all_have(self, have: bool) -> bool:
        import torch.distributed as dist

        if self.group is None:
            self.group = _gloo_group()
        self.flag.fill_(1 if have else 0)
        dist.all_reduce(self.flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(self.flag.item())


class JaxAgreement:
    """``all_have(flag)`` through the coordination service's key-value store (see the module docstring)."""

    def __init__(self, client, processes: int, number: int) -> None:
        self.client, self.processes = client, processes
        self.prefix = f"shardstream/agree/{number}/"
        self.step = 0

    def all_have(self, have: bool) -> bool:
        step, client = self.step, self.client
        self.step += 1
        key = f"{self.prefix}{step}"
        total = client.key_value_increment(f"{key}/count", 1 if have else 1 + _ABSENT)
        if total % _ABSENT == self.processes:  # the last to arrive: every process has read the step before
            verdict = "1" if total < _ABSENT else "0"
            client.key_value_set(f"{key}/verdict", verdict)
            if step:
                for name in ("count", "verdict"):
                    client.key_value_delete(f"{self.prefix}{step - 1}/{name}")
            return verdict == "1"
        return client.blocking_key_value_get(f"{key}/verdict", _JAX_WAIT_MS) == "1"
