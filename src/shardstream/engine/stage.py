"""The contract of a processing stage (torchdata.nodes' ``next`` / ``get_state`` / ``reset``).

A reader runs a chain of stages: the source (this reader's share of the plan, see
:mod:`.source`) and the stages the dataset's operations add, each pulling ``(key, value)``
items from the one before it (``self.source``). Keys say where an item came from (see
:mod:`.keys`); values are rows (dicts of column -> value) or, after ``batch``, batches.

- ``next()`` returns the next ``(key, value)``; ``StopIteration`` ends the reader's pass.
- ``get_state()`` returns what this stage holds and counts, as JSON-able data (keys of the
  items it holds, encoded with :func:`.keys.encode`, never the values).
- ``reset(state)`` restores it; the chain is reset source first, so a stage may call
  ``self.source.recreate(keys)`` to make the values of the items it held again.
- ``recreate(keys)`` returns the values of items this stage emitted with those keys
  (the source reads their positions again; a map applies its function again; a packer
  rebuilds its packs from their pieces).
- ``redistribute(states, n)`` (a static method) pools the states of the readers of a
  run and deals what they held among ``n`` new readers: how a checkpoint resumes on
  another world with nothing repeated or lost (see :mod:`.state`). In a chain that keeps
  the count, ``held_keys(state)`` says instead which items a state holds: a resume on
  another world reads their positions again and starts every stage afresh (see :mod:`.run`).
- ``describe()`` is what the stage does, as JSON-able data, for the pipeline's
  fingerprint: a state is refused when the chain changed, and processed data cached
  on disk is reused only by the same chain.

Every stage knows its reader (``ctx``: the reader index, the readers' count, the resume
generation and the epoch) so that random choices are a function of them and the seed alone.

Loader stats: a stage that does work of its own times it only when ``record.ON`` (one
attribute test otherwise), once per group of items where it can, never counting the
stages before it (:class:`OwnTime` subtracts the time spent in its source's ``next``).
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Optional

from .nodes import Node
from ..stats import record


@dataclass(frozen=True)
class ReaderContext:
    """Which reader runs a chain: ``reader`` of ``readers``, in resume ``generation`` (it grows by one
    each time a checkpoint resumes on another number of readers), in ``epoch``."""

    reader: int = 0
    readers: int = 1
    generation: int = 0
    rank: int = 0
    ranks: int = 1
    epoch: int = 0


class Stage(Node):
    """A processing stage over ``source`` (see the module docstring)."""

    name = "stage"

    def __init__(self, source: "Stage", ctx: ReaderContext) -> None:
        self.source = source
        self.ctx = ctx

    def next(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def next_run(self, n: int) -> tuple[list, list]:
        """Up to ``n`` next items (at least one) as ``(keys, values)``; empty lists once the pass is over.
        The same items, in the same order and with the same state after them, as ``n`` calls of ``next``:
        a stage that holds items ready hands on a run of them at once (a chain's stages pass runs, not
        items, between them); by default, ``next`` item by item."""
        return pull_each(self, n)

    def get_state(self) -> dict:
        return {}

    def reset(self, state: Optional[dict] = None) -> None:
        """Restore ``state`` (a :meth:`get_state` result), or start afresh with None."""

    def recreate(self, keys: list) -> list:
        """Values of items this stage emitted with ``keys``: by default those of the stage before it."""
        return self.source.recreate(keys)

    def locate(self, key: Any) -> str:
        """Where the item with ``key`` came from, in words (for error messages)."""
        return self.source.locate(key)

    def close(self) -> None:
        self.source.close()

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        """The states of ``n`` new readers from those of the old ones (a stage holding nothing: fresh)."""
        return [{} for _ in range(n)]

    @classmethod
    def held_keys(cls, state: dict) -> Optional[list]:
        """The keys of the items ``state`` holds, each of which makes one item of one of its positions (asked of
        the stages of a chain that keeps the count, whose held items a resume on another world reads again
        from the source); None when the stage cannot say (one that holds more than items)."""
        return [] if cls.redistribute is Stage.redistribute else None


def pull(source: Stage, n: int) -> tuple[list, list]:
    """Up to ``n`` items of ``source``, as ``(keys, values)`` (fewer at the end of its pass only)."""
    keys, values = source.next_run(n)
    if len(keys) >= n or not keys:
        return keys, values
    keys, values = list(keys), list(values)
    while len(keys) < n:
        more_keys, more_values = source.next_run(n - len(keys))
        if not more_keys:
            break
        keys += more_keys
        values += more_values
    return keys, values


def pull_each(source: Stage, n: int) -> tuple[list, list]:
    """Up to ``n`` items of ``source``, one ``next`` each."""
    keys, values = [], []
    nxt = source.next
    for _ in range(n):
        try:
            k, v = nxt()
        except StopIteration:
            break
        keys.append(k)
        values.append(v)
    return keys, values


def deal(items: list, n: int) -> list[list]:
    """``items`` dealt round-robin among ``n`` readers, in order."""
    return [items[i::n] for i in range(n)]


class OwnTime:
    """The seconds from its creation to :meth:`done` outside ``source_next`` (a stage's own work in one
    call of its ``next``, the stages before it left out); pull through :meth:`next`, then ``done(stage)``
    adds them to the loader stats' ``stage``, times ``scale`` for a stage that times one call in ``scale``
    (one that pulls an item at a time would otherwise pay a clock reading per item)."""

    __slots__ = ("source_next", "t0", "upstream")

    def __init__(self, source_next: Callable[[], tuple[Any, Any]]) -> None:
        self.source_next = source_next
        self.upstream = 0.0
        self.t0 = perf_counter()

    def next(self) -> tuple[Any, Any]:
        t = perf_counter()
        try:
            return self.source_next()
        finally:
            self.upstream += perf_counter() - t

    def done(self, stage: str, scale: int = 1) -> None:
        record.add_time(stage, scale * max(0.0, perf_counter() - self.t0 - self.upstream))
