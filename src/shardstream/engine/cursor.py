"""Where the job is: the cursor of a dataset, and of a chain of operations over it.

:class:`EpochCursor` is the one owner of *where the dataset is* in its run: the epoch the
next pass runs, a pending resumption point loaded from a checkpoint, the pass in progress
(its epoch, its segment of the epoch plan, its start and its world) and how far this
process has consumed it. Loaders and integrations use only its public methods.

What an epoch looks like is a strategy behind it: :class:`~.order.SingleOrder` for one
dataset, :class:`~.mixorder.MixedOrder` for a mixture of streams. A strategy turns an epoch
(or a resumption point) into a :class:`Pass` for a world, and a position of a pass into a
state dict; it keeps no notion of "current".

:class:`ChainCursor` is the same for a chain (a dataset with operations), in the same words: the epoch
the next pass runs, a pending state loaded from a checkpoint (validated: see :mod:`.state`), and the
pass in progress in this process (a :class:`~.chainpass.ChainPass`, which every runtime runs: plain
iteration, DataLoader workers, the thread loaders). A chain's pass starts from its root's order (the
dataset's cursor's strategy) and deals it among the readers (:mod:`.run`).

Positions are global *plan* positions: sample ``p`` of an epoch is the ``p``-th of the
global order, whatever the number of ranks and workers. A checkpoint records how far the
plan was consumed (see :mod:`.nodes`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..plan import World
from .chainpass import ChainPass
from .run import setup
from .state import boundary_state, decode_state, operations_of, read_chain_state


@dataclass
class Pass:
    """One pass over an epoch by one process: its epoch, plan segment, start position and world.

    ``yielded`` counts the samples this process's iterator handed out; :meth:`position` turns
    it into the global plan position consumed."""

    epoch: int
    plan: Any
    start: int
    world: World
    yielded: int = 0

    def position(self) -> int:
        """The global plan position after the samples this process yielded.

        With one rank and one worker that is exact to the sample. Otherwise it counts this
        worker's whole steps: after its ``c``-th step (global step ``k``), every step up to ``k``
        has been read by some worker of every rank, so the position is the end of step ``k``
        (a step the pass starts inside counts once its share from ``start`` on is read).
        """
        world, plan = self.world, self.plan
        if world.readers == 1 and world.workers == 1:
            return min(self.start + self.yielded, plan.end)
        done = plan.steps_done(world, self.start, self.yielded)
        if not done:
            return self.start
        step = plan.worker_steps(world, self.start)[done - 1]
        return min(plan.origin + (step + 1) * plan.global_batch, plan.end)

    @property
    def step(self) -> int:
        """Samples per step of this process (its per-device batch): the pass reader's unit."""
        return self.plan.device_batch(self.world)

    def id_chunks(self):
        """This process's sample ids of the pass, in order, a chunk of whole steps at a time (its share)."""
        for _, ids in self.plan.iter_worker(self.world, self.start):
            yield ids

    def head(self) -> Optional[int]:
        """Samples this process reads of the step the pass starts inside (the rest of its share), or
        None (see :meth:`shardstream.plan.partition.StepCut.head`): batches cut by steps make that many their first."""
        head = self.plan.head(self.world, self.start)
        return None if head is None else int(head.size)

    @property
    def steps(self) -> int:
        """Global steps this rank reads from this pass's start to the end of its epoch (a step the pass
        starts inside counts when the rank reads some of it)."""
        start = self.plan.rank_start(self.world, self.start)
        return -(-(self.plan.end - start) // self.plan.global_batch)  # a short last step counts


class EpochCursor:
    """Epoch, pending resume, pass in progress and consumed position of one dataset (see the module
    docstring). ``order``: the strategy (single or mixed)."""

    def __init__(self, order) -> None:
        self.order = order
        self._next_epoch = 0
        self._pending = None  # a validated ResumePoint, applied by the next begin()
        self._current: Optional[Pass] = None

    # -- where the run is ------------------------------------------------------------------
    @property
    def next_epoch(self) -> int:
        """The epoch the next pass runs (unless a pending resume point says otherwise)."""
        return self._next_epoch

    @property
    def pending(self):
        """The resumption point the next pass starts from, or None."""
        return self._pending

    @property
    def current(self) -> Optional[Pass]:
        """The pass in progress in this process, or None."""
        return self._current

    @property
    def ticket(self) -> tuple:
        """What the next :meth:`begin` would run; it changes exactly when that pass changes."""
        return self._next_epoch, self._pending

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass run ``epoch`` from its start, dropping any pending resume point."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"set_epoch({epoch!r}): the epoch must be an int >= 0")
        self._next_epoch, self._pending, self._current = epoch, None, None

    def set_batch_size(self, batch_size: int) -> None:
        """Plan in steps of ``batch_size`` samples per rank from now on."""
        self.order.options = dataclasses.replace(self.order.options, batch_size=batch_size)

    # -- passes ------------------------------------------------------------------------------
    def upcoming(self, world: World) -> Pass:
        """The pass the next :meth:`begin` would start, without starting it."""
        self.order.check(world)
        point = self._pending
        if point is not None:
            resumed = self.order.resume(point, world)
            if resumed is not None:
                return resumed
            return self.order.fresh(point.epoch + 1, world)  # the saved epoch was complete
        return self.order.fresh(self._next_epoch, world)

    def begin(self, world: World) -> Pass:
        """Start the next pass: the pending resume point if any, else the next epoch from its start."""
        current = self.upcoming(world)
        self._pending = None
        self._next_epoch = current.epoch + 1
        self._current = current
        return current

    def epoch_plan(self, epoch: Optional[int], world: World):
        """The plan of ``epoch`` (default: the next) for ``world``."""
        return self.order.epoch_plan(self._next_epoch if epoch is None else epoch, world)

    def where(self) -> tuple[int, int]:
        """``(epoch, position)`` of this process: in its pass (whole global steps), else the next pass's start."""
        cur = self._current
        if cur is not None and cur.world.workers == 1:
            return cur.epoch, cur.position()
        if self._pending is not None:
            return self._pending.epoch, self._pending.position
        return self._next_epoch, 0

    # -- checkpoints ---------------------------------------------------------------------------
    def state_at(self, current: Pass, position: int) -> dict[str, Any]:
        """The state dict at global plan ``position`` of the pass ``current``."""
        return self.order.state(current.epoch, min(position, current.plan.end), current.plan)

    def state_dict(self, num_samples: Optional[int], from_beginning: bool, world: World) -> dict[str, Any]:
        """The state after ``num_samples`` of the pass in progress (or of the upcoming one, in a
        process that does not iterate itself, such as a DataLoader's main process); without
        ``num_samples``, after what this process consumed."""
        cur = self._current
        if cur is None:
            cur = self.upcoming(world)
            if num_samples is None:
                return self.state_at(cur, cur.start)
        if num_samples is None:
            if cur.world.workers > 1:
                raise InvalidArgumentError(
                    "this process cannot see what DataLoader workers consumed; pass num_samples (the number of "
                    "samples the whole job consumed this epoch) to state_dict()")
            return self.state_at(cur, cur.position())
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 0:
            raise InvalidArgumentError(f"num_samples={num_samples!r} must be an int >= 0")
        position = int(num_samples) if from_beginning else cur.start + int(num_samples)
        if position < cur.plan.origin:
            raise InvalidArgumentError(
                f"num_samples={num_samples} puts the position ({position}) before this pass's start "
                f"({cur.plan.origin}); with a resumed run count from_beginning=False or add the start")
        return self.state_at(cur, position)

    def load_state_dict(self, obj, world: World) -> None:
        """Validate a state and make it the next pass's starting point (any world size)."""
        point = self.order.adopt(decode_state(obj), world)
        self._pending = point
        self._next_epoch = point.epoch
        self._current = None


class ChainCursor:
    """Epoch, pending state and pass in progress of a chain ``root`` + ``specs`` (see the module docstring);
    ``fingerprint``: the chain's, asked for when a state is made or checked."""

    def __init__(self, root, specs, fingerprint) -> None:
        self.root, self.specs, self.fingerprint = root, tuple(specs), fingerprint
        self.operations = operations_of(self.specs)
        self._next_epoch = 0
        self._pending: Optional[dict] = None  # a validated chain state, run by the next pass
        self._current: Optional[ChainPass] = None

    @property
    def next_epoch(self) -> int:
        return self._next_epoch

    @property
    def pending(self) -> Optional[dict]:
        return self._pending

    @property
    def current(self) -> Optional[ChainPass]:
        """The pass in progress in this process, or None."""
        return self._current

    @property
    def ticket(self) -> tuple:
        """What the next pass runs: ``(next epoch, pending state or None)``; it changes exactly when that pass
        changes (a pass begun, :meth:`set_epoch`, :meth:`load`)."""
        return self._next_epoch, self._pending

    def take_ticket(self) -> tuple:
        """:attr:`ticket`, taken by whoever runs that pass (a loader that runs it in its workers): the pending
        state is then forgotten here."""
        ticket, self._pending = self.ticket, None
        return ticket

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass run ``epoch`` from its start, dropping any pending state."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"set_epoch({epoch!r}) needs an int >= 0")
        self.close()
        self._next_epoch, self._pending = epoch, None

    def begin(self, world: World, ticket: Optional[tuple] = None, *, convert, agree: bool,
              explicit: bool) -> ChainPass:
        """Start the pass ``ticket`` names (default: the cursor's own, taken) as ``world``'s reader; the cursor
        then stands after it. ``agree``: the ranks end the pass at the same step where they may differ (see
        :mod:`.agree`); ``explicit``: the world was given (no warning when nothing can agree)."""
        self.close()
        ticket = self.take_ticket() if ticket is None else ticket
        made = setup(self.root, self.specs, world, *ticket)
        self._next_epoch = made.epoch + 1
        self._current = ChainPass(self.root, self.specs, made, world, fingerprint=self.fingerprint,
                                  convert=convert, agree=agree, explicit=explicit)
        return self._current

    def hand_over(self) -> Optional[ChainPass]:
        """The pass in progress, now its runner's alone (a thread loader that counts what its loop consumed):
        the cursor forgets it without closing it, and stands after it."""
        current, self._current = self._current, None
        return current

    def state(self) -> dict:
        """The chain's state: of the pass in progress after what this process handed out, else the pending
        one, else the start of the next epoch."""
        if self._current is not None:
            return self._current.state()
        if self._pending is not None:
            return self._pending
        return boundary_state(self.fingerprint(), self._next_epoch, self.operations)

    def load(self, state) -> None:
        """Validate a chain state (or the list of every rank's) and make it the next pass's start."""
        merged = read_chain_state(state, self.operations)
        if merged["fingerprint"] != self.fingerprint():
            raise IncompatibleStateError(
                "the state was saved by another pipeline (its source or operations differ: fingerprint "
                f"{merged['fingerprint']} vs {self.fingerprint()}); resume with the same chain of operations")
        if "grid" in merged:
            n = int(merged["grid"]["readers"])
            missing = sorted(set(range(n)) - {int(j) for j in merged["readers"]})
            if missing:
                raise IncompatibleStateError(
                    f"the state holds {n - len(missing)} of its {n} readers (missing {missing[:8]}); with several "
                    "ranks save every rank's state_dict() and load the list of them")
        self.close()
        self._pending, self._next_epoch = merged, int(merged["epoch"])

    def close(self) -> None:
        """Stop the pass in progress (its threads and pins); the cursor stays after it."""
        current, self._current = self._current, None
        if current is not None:
            current.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_current"] = None  # a pass in progress stays with its process
        return state
