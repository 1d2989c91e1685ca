"""A pass of a pipeline: which plan segment and grid it reads, each reader's chain, and its state.

:func:`setup` decides, identically in every process of a job (ranks, DataLoader workers,
the main process that only records), what the next pass is: a fresh epoch, or the
continuation of a loaded state. A state saved on the same number of readers continues
each reader exactly where it was (the same order, to the item). A state saved on another
number of readers is *redistributed* first (:func:`redistribute`):

- what no old reader has read (beyond the lowest frontier, less what some reader had read ahead of it)
  is dealt evenly among the new readers (:mod:`shardstream.plan.compact`), padded like a fresh pass;
- in a chain that keeps the count, whose stages can say what they hold (:meth:`.stage.Stage.held_keys`),
  the items they held and those made but not consumed go back to the source (their positions are
  read again) and every stage starts afresh: the new readers begin with equal work, and the pass
  stays balanced (:attr:`PassSetup.even`);
- otherwise what the old readers' stages held (shuffle buffers, partial map groups, partial packs,
  items made but not yet consumed) is pooled stage by stage and dealt among the new readers.
  Random streams are re-seeded for the new generation.

Every source position thus reaches the chain's items once per epoch (beside the padding of each pass, fewer than
its ``readers`` positions that repeat the epoch's first samples: see :mod:`.source`), and every item made
from it is handed to the training loop exactly once, whatever the worlds before and after, unless the
ranks end the pass early together (:mod:`.agree`). The order after such a resume differs from the
uninterrupted run's (readers draw from other buffers); on the same world it is identical.

:class:`Run` is one reader's chain (source, then the stages) with the items to replay
first and the state after what it handed on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from operator import length_hint
from typing import Any, Iterator, Optional

import numpy as np

from ..errors import IncompatibleStateError
from ..plan import World
from ..plan.compact import CompactGrid, deal_unread, grid_of
from .keys import decode_all, encode_all, positions
from .source import DEFAULT_BLOCK, Grid, SourceStage
from .stage import ReaderContext, deal
from .state import chain_state

_RUN = 64  # items Run.values takes from the last stage at once, at most


@dataclass
class PassSetup:
    """What every process agrees the pass is (see the module docstring)."""

    epoch: int
    plan: Any
    source: dict  # the root dataset's state at the plan segment's start
    grid: Grid
    generation: int
    readers: int
    ranks: int
    states: dict = field(default_factory=dict)  # reader -> its state to restore (absent: fresh)
    turn: int = 0  # which of a rank's readers hands on the next batch (DataLoader workers take turns)
    balanced: bool = False  # every rank hands on as many items as every other, by construction (see .agree)
    even: bool = True  # the generation's readers began with equal work (a fresh pass, or an even redistribution)

    def reader_for(self, world: World) -> int:
        """The reader ``world``'s process runs: its rank's readers rotated by ``turn``, so that a resumed
        DataLoader, which starts with worker 0, continues with the reader whose turn it was."""
        w = world.workers
        return world.reader * w + (world.worker + self.turn) % w

    def context(self, reader: int) -> ReaderContext:
        return ReaderContext(reader=reader, readers=self.readers, generation=self.generation,
                             rank=reader // max(self.readers // self.ranks, 1), ranks=self.ranks, epoch=self.epoch)

    def fresh_state(self, reader: int, nstages: int) -> dict:
        return {"frontier": self.grid.first(reader), "stages": [{} for _ in range(nstages)], "pending": []}

    def full_state(self, readers: dict, fingerprint: str, operations: list, turn: int = 0, rank: int = 0) -> dict:
        """The chain's state (see :mod:`.state`) with ``readers``' states."""
        return chain_state(fingerprint=fingerprint, epoch=self.epoch, source=self.source,
                           grid=self.grid.describe() | {"generation": self.generation, "even": self.even},
                           readers={str(j): s for j, s in sorted(readers.items())}, ranks=self.ranks,
                           turns={str(rank): int(turn)}, operations=operations)


def reader_of(world: World) -> tuple[int, int, int]:
    """``(reader index, readers, ranks)`` of ``world``: ranks x workers, rank-major."""
    return world.reader * world.workers + world.worker, world.readers * world.workers, world.readers


def plan_pass(root, epoch: int, source_state: Optional[dict] = None):
    """The root's plan segment for ``epoch`` (one reader's view), or the one ``source_state`` began;
    None when that epoch holds nothing more."""
    order, w1 = root.cursor.order, World()
    order.check(w1)
    if source_state is None:
        p = order.fresh(epoch, w1)
    else:
        p = order.resume(order.adopt(dict(source_state), w1), w1)
        if p is None:
            return None
    return p.plan, order.state(p.epoch, p.start, p.plan)


def setup(root, specs, world: World, next_epoch: int, loaded: Optional[dict]) -> PassSetup:
    """The pass the next iteration runs for ``world`` (a fresh ``next_epoch`` unless ``loaded``)."""
    _, readers, ranks = reader_of(world)
    readers_left = (loaded or {}).get("readers") or {}
    if loaded is not None and "grid" in loaded and readers_left and all(r.get("done") for r in readers_left.values()):
        loaded = {"epoch": loaded["epoch"], "complete": True}  # every reader had ended its pass
    if loaded is not None and "grid" in loaded:
        made = plan_pass(root, int(loaded["epoch"]), loaded["source"])
        if made is not None:
            plan, source = made
            return _continued(loaded, plan, source, specs, readers, ranks, world.reader, remainder_of(root))
        next_epoch = int(loaded["epoch"]) + 1
    elif loaded is not None:  # at an epoch's start, or after a complete one
        next_epoch = int(loaded["epoch"]) + int(bool(loaded.get("complete")))
    plan, source = plan_pass(root, next_epoch)
    grid = Grid.even(plan.origin, plan.end, DEFAULT_BLOCK, readers, remainder_of(root))
    return PassSetup(next_epoch, plan, source, grid, 0, readers, ranks, balanced=keeps_count(specs))


def remainder_of(root) -> str:
    """How a fresh grid evens out the readers' shares: ``"drop"`` with the root's ``epoch_tail="drop"``, else
    ``"pad"`` (see :mod:`.source`)."""
    return "drop" if getattr(root.options, "epoch_tail", "pad") == "drop" else "pad"


def keeps_count(specs) -> bool:
    """Whether every operation makes as many items from equal shares (see each spec's ``keeps_count``): then
    readers dealt equal shares hand on equally many items, and ranks equally many batches."""
    return all(getattr(spec, "keeps_count", False) for spec in specs)


def _continued(loaded: dict, plan, source: dict, specs, readers: int, ranks: int, rank: int,
               remainder: str = "pad") -> PassSetup:
    g = loaded["grid"]
    old = int(g["readers"])
    states = {int(j): s for j, s in loaded["readers"].items()}
    grid = grid_of(g, plan.end)
    generation = int(g.get("generation", 0))
    if old == readers:
        turns = loaded.get("turns") or {}
        turn = int(turns.get(str(rank), 0))
        # the same split into ranks, continued from a pass whose readers began with equal work, stays balanced
        even = generation == 0 or bool(g.get("even"))
        balanced = keeps_count(specs) and even and grid.balanced and int(loaded.get("ranks", 0)) == ranks
        return PassSetup(int(loaded["epoch"]), plan, source, grid, generation, readers, ranks, states, turn,
                         balanced, even)
    new_grid, new_states, even = redistribute(grid, [states[j] for j in range(old)], specs, readers, plan.end,
                                              remainder)
    return PassSetup(int(loaded["epoch"]), plan, source, new_grid, generation + 1, readers, ranks, new_states,
                     balanced=even, even=even)


def returned(states: list[dict], specs) -> Optional[np.ndarray]:
    """The positions of every item ``states`` hold (their stages' and pending) when the chain keeps the count and
    each stage can say what it holds (:meth:`.stage.Stage.held_keys`): what a resume on another world reads
    again; None otherwise."""
    if not keeps_count(specs):
        return None
    keys = [k for s in states for k in decode_all(s.get("pending", []))]
    for i, spec in enumerate(specs):
        for s in states:
            held = spec.stage.held_keys(s["stages"][i] or {})
            if held is None:
                return None
            keys += held
    return np.asarray([p for k in keys for p in positions(k)], np.int64)


def redistribute(grid, states: list[dict], specs, readers: int, plan_end: int,
                 remainder: str = "pad") -> tuple[CompactGrid, dict, bool]:
    """The grid and reader states that continue ``states`` (of ``grid``'s readers) on ``readers``, and whether
    the new readers begin with equal work (see the module docstring)."""
    frontiers = [int(s["frontier"]) for s in states]
    back = returned(states, specs)
    unread = grid.unread(frontiers, () if back is None else back)
    new_grid = deal_unread(unread, min(grid.end, plan_end), grid.pads_from(plan_end), grid.block, readers,
                           remainder)
    out = {j: {"frontier": new_grid.first(j), "stages": [{} for _ in specs], "pending": []} for j in range(readers)}
    if back is not None:  # every stage starts afresh: what they held is read again
        return new_grid, out, True
    for i, spec in enumerate(specs):
        shares = spec.stage.redistribute([s["stages"][i] for s in states], readers)
        for j in range(readers):
            out[j]["stages"][i] = shares[j]
    pending = [k for s in states for k in s.get("pending", [])]
    for j, share in enumerate(deal(pending, readers)):
        out[j]["pending"] = share
    return new_grid, out, False


class Run:
    """Reader ``reader``'s chain for the pass ``setup`` (see the module docstring)."""

    def __init__(self, root, specs, setup_: PassSetup, reader: int) -> None:
        self.setup = setup_
        self.reader = reader
        ctx = setup_.context(reader)
        self.source = SourceStage(root, setup_.plan, setup_.epoch, setup_.grid, ctx)
        self.stages = []
        node = self.source
        for spec in specs:
            node = spec.build(node, ctx)
            self.stages.append(node)
        self.last = node
        state = setup_.states.get(reader)
        if state is not None and len(state.get("stages", [])) != len(specs):
            raise IncompatibleStateError(f"the state was saved by a chain of {len(state.get('stages', []))} "
                                         f"operations and this one has {len(specs)}; resume with the same chain")
        self.source.reset({"frontier": state["frontier"]} if state else None)
        for i, stage in enumerate(self.stages):
            stage.reset(state["stages"][i] if state else None)
        self.replay = deque(decode_all(state.get("pending", [])) if state else [])
        self.replay_values: deque = deque()
        self.done = False
        self.held_keys: list = []  # a run taken from the last stage by values(), and the iterator handing it on
        self.held_values: list = []
        self.held: Iterator[Any] = iter(())
        self.run_size = 1

    def next(self) -> tuple[Any, Any]:
        """The next ``(key, value)`` of this reader (items owed by a resume first)."""
        if self.replay:
            if not self.replay_values:
                self.replay_values.extend(self.last.recreate(list(self.replay)))
            return self.replay.popleft(), self.replay_values.popleft()
        try:
            return self.last.next()
        except StopIteration:
            self.done = True
            raise

    def values(self) -> Iterator[Any]:
        """This reader's values, one by one: taken from the last stage in runs when it can take back what
        was not handed on (``give_back``), which :meth:`state` does first; the runs grow from one item,
        and start again from one after a state, so that a state per item costs no more than ``next``."""
        runs = getattr(self.last, "give_back", None) is not None
        while True:
            if self.replay or not runs:
                try:
                    _, v = self.next()
                except StopIteration:
                    return
                yield v
                continue
            keys, values = self.last.next_run(self.run_size)
            if not keys:
                self.done = True
                return
            self.run_size = min(self.run_size * 2, _RUN)
            self.held_keys, self.held_values = keys, values
            self.held = iter(values)
            yield from self.held  # state() counts what is left of it (length_hint) and ends it

    def _give_back(self) -> None:
        left = length_hint(self.held)
        if left:
            at = len(self.held_keys) - left
            self.last.give_back(self.held_keys[at:], self.held_values[at:])
            self.run_size = 1
            self.held.__setstate__(len(self.held_values))  # a list iterator moved to its end
        self.held_keys, self.held_values = [], []

    def state(self, pending=()) -> dict:
        """This reader's state after what it handed on; ``pending``: keys it made that were not consumed."""
        self._give_back()
        state = {"frontier": self.source.frontier, "stages": [s.get_state() for s in self.stages],
                 "pending": encode_all(list(pending) + list(self.replay))}
        if self.done and not state["pending"]:
            state["done"] = True
        return state

    def close(self) -> None:
        self.last.close()
