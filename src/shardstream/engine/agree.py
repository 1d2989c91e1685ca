"""Every rank hands on the same number of batches: the policy, and the loop that keeps it.

A training step with a collective (DDP's gradient all-reduce, a JAX SPMD step) hangs when one
rank has a batch more than another. A pass of a chain therefore ends on every rank at the same
step:

- **Balanced passes need nothing.** A fresh pass deals every reader (rank x DataLoader worker)
  an equally long share of the epoch (:meth:`.source.Grid.even`: padded with fewer than
  ``readers`` repeats), and operations that make one item per item (``map`` row by row,
  ``shuffle``, ``take``/``skip``, ``batch``, column operations: their spec's ``keeps_count``)
  keep the shares equal, so every rank hands on as many batches as every other. A pass continued
  from a state on the same split into ranks and workers stays balanced (:attr:`.run.PassSetup.balanced`),
  and so does one resumed on another world, whose readers are dealt equal shares of what is left.
- **Other passes agree, one small collective per batch.** After ``filter``, ``pack``, a batched
  ``map`` (which may change the row count), or a resume on another world of a chain with ``take`` /
  ``skip``, shares hand on different numbers of items. Before it hands on each batch, the loader on each rank
  asks whether every rank has one (the minimum of a 0/1 flag over the ranks, through the job's
  own runtime: :mod:`shardstream.runtime.agreement`), and the pass ends for every rank at
  the first step at which one of them has none. The batches the other ranks had left are not
  handed out; the state then says the epoch is complete, so a resume starts the next one, as the
  uninterrupted run does.

With several ranks, no runtime to agree through (``RANK`` / ``WORLD_SIZE`` set but neither
``torch.distributed`` nor ``jax.distributed`` initialised) and a pass that is not balanced,
:class:`RankBalanceWarning` says so once per process. Inside a DataLoader worker nothing is
agreed: the loader in the rank's main process agrees for its workers.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from .caller import warn_caller


class RankBalanceWarning(UserWarning):
    """The ranks of a job may hand out different numbers of batches and cannot agree where a pass ends."""


_warned = False


def agreement_for(made, world, explicit: bool) -> Optional[Any]:
    """What this rank's loader agrees through for the pass ``made`` on ``world``: None when the pass is balanced
    (or has one rank of distinct data), or when no runtime can agree (see the module docstring; warned about
    unless the world was given explicitly, as a test in one process gives it)."""
    if made.ranks <= 1 or made.balanced:
        return None
    from ..runtime.agreement import runtime_agreement
    from ..runtime.torchenv import worker_info

    if worker_info() is not None:
        return None
    agreement = runtime_agreement(world.world_size)
    if agreement is None and not explicit:
        _warn(world.world_size)
    return agreement


def _warn(ranks: int) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warn_caller(f"the {ranks} ranks of this job may hand out different numbers of batches: the chain has an "
                "operation that changes the number of items (filter, pack, a batched map) or resumed on another "
                f"world, and no torch.distributed process group or jax.distributed runtime of {ranks} processes "
                "is initialised to agree where the epoch ends, so a collective at each step can hang at the end "
                "of the epoch; initialise one before iterating (torch.distributed.init_process_group, "
                "jax.distributed.initialize), or stop every rank after the same number of steps",
                RankBalanceWarning)


class PassEnd:
    """Whether every rank ended the pass in progress early: what the chain keeps of its :class:`Agreed`
    iterator (keeping the iterator would keep a prefetch thread alive after the loop dropped it)."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


class Agreed:
    """The items of ``it`` while every rank has one (see the module docstring): ``agreement.all_have(flag)``
    once per item, and once more, with False, when this rank runs out. ``ended``: the pass ended here for
    every rank (items this rank had left were not handed out). Other attributes are ``it``'s."""

    def __init__(self, it: Iterator[Any], agreement) -> None:
        self.it, self.agreement, self.end = it, agreement, PassEnd()

    @property
    def ended(self) -> bool:
        return self.end.ended

    @ended.setter
    def ended(self, value: bool) -> None:
        self.end.ended = value

    def __iter__(self) -> "Agreed":
        return self

    def __next__(self) -> Any:
        if self.ended:
            raise StopIteration
        try:
            item = next(self.it)
        except StopIteration:
            self.ended = True
            self.agreement.all_have(False)
            raise
        if not self.agreement.all_have(True):  # another rank has none: this rank's rest is not handed out
            self.ended = True
            self.close()
            raise StopIteration
        return item

    def __getattr__(self, name: str) -> Any:
        if name == "it":
            raise AttributeError(name)
        return getattr(self.it, name)

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()
