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
from .readahead import Prefetched
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
        self.producer = None  # the readahead thread's producer, when the pass runs ahead (items(prefetch=n))
        self._closed = False

    def next(self) -> tuple[Any, Any]:
        """The next ``(key, value)`` of this reader (``StopIteration`` at the end of its share)."""
        return self.run.next()

    def items(self, prefetch: int = 0, meter=None) -> Iterator[Any]:
        """This reader's values, converted: made ``prefetch`` ahead in a background thread that counts what was
        consumed (:mod:`.readahead`; ``meter`` stamps each with its loader stats), or in the loop."""
        if prefetch:
            it = Prefetched(self.run, prefetch, self.convert, meter)
            self.producer = it.producer  # not the iterator: dropping it stops the thread
            return it
        return _values(self.run, self.convert)

    def stamped(self, stamp: Callable[[Any, int, dict], Any], prefetch: int = 0) -> Iterator[Any]:
        """:meth:`items`, each as ``stamp(item, reader, this reader's state after it)``: what a loader that runs
        the chain in its workers sends (``StreamingDataLoader`` over a chain)."""
        items = self.items(prefetch)
        state = self.producer.state if self.producer is not None else self.run.state
        reader = self.reader
        for item in items:
            yield stamp(item, reader, state())

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
        if self.producer is not None:  # it knows the items made ahead and not consumed
            state, done = self.producer.state(), False
        else:
            state, done = self.run.state(pending), self.run.done and not pending
        if self.setup.readers == 1 and done:
            return boundary_state(self.fingerprint(), self.epoch, self.operations, complete=True)
        return self.setup.full_state({self.reader: state}, self.fingerprint(), self.operations)

    def close(self) -> None:
        """Stop the pass's reading (its download threads and pins); the state stays readable."""
        if not self._closed:
            self._closed = True
            (self.producer or self.run).close()


def _values(run: Run, convert: Callable[[Any], Any]) -> Iterator[Any]:
    try:
        if convert is same:
            yield from run.values()
        else:
            for v in run.values():
                yield convert(v)
    finally:
        run.close()


def same(v):
    """The conversion of a chain without a format: the value as made."""
    return v
