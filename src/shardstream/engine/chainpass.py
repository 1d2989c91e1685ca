"""One pass of a chain, taken by a loader that runs it itself (``IterableDataset.take_pass``).

The thread loader (:mod:`shardstream.loaders.threadloader`) makes a chain's items in its own thread and
counts what its loop consumed; what it needs of the chain is this object's public methods: the next
``(key, value)`` of this process's reader (:meth:`ChainPass.next`), the chain's format (:meth:`convert`),
the state after the items consumed given the keys made and not consumed (:meth:`state`), and the
agreement of the ranks on where the pass ends (:meth:`agreed`, see :mod:`.agree`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .agree import Agreed, PassEnd, agreement_for
from .run import PassSetup, Run
from .state import boundary_state, operations_of


class ChainPass:
    """This process's reader of the pass ``made`` (a :class:`~.run.PassSetup`) of the chain ``root`` + ``specs``,
    on ``world``. ``agree``: the chain hands on batches, so a pass that is not balanced over ranks ends on every
    rank at the same step; ``explicit``: the world was given (no warning when nothing can agree);
    ``fingerprint``: the chain's, asked for when a state is."""

    def __init__(self, root, specs, made: PassSetup, world, *, fingerprint: Callable[[], str], convert: Callable[[Any], Any],
                 agree: bool, explicit: bool) -> None:
        self.setup, self.fingerprint, self.convert = made, fingerprint, convert
        self.epoch = made.epoch
        self.reader = made.reader_for(world)
        self.run = Run(root, specs, made, self.reader)
        self.operations = operations_of(specs)
        self.agreement = agreement_for(made, world, explicit) if agree else None
        self.end = PassEnd()
        self._closed = False

    def next(self) -> tuple[Any, Any]:
        """The next ``(key, value)`` of this reader (``StopIteration`` at the end of its share)."""
        return self.run.next()

    def agreed(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items`` (one per training step), ending on every rank at the same step where the ranks may differ."""
        if self.agreement is None:
            return items
        agreed = Agreed(items, self.agreement)
        self.end = agreed.end
        return agreed

    def state(self, pending=()) -> dict:
        """The chain's state after the items consumed; ``pending``: keys made and not consumed (made again and
        handed on first by a resume)."""
        if self.end.ended:  # every rank ended the pass here
            return boundary_state(self.fingerprint(), self.epoch, self.operations, complete=True)
        if self.setup.readers == 1 and self.run.done and not pending:
            return boundary_state(self.fingerprint(), self.epoch, self.operations, complete=True)
        return self.setup.full_state({self.reader: self.run.state(pending)}, self.fingerprint(), self.operations)

    def close(self) -> None:
        """Stop the pass's reading (its download threads and pins); the state stays readable."""
        if not self._closed:
            self._closed = True
            self.run.close()
