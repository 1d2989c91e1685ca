"""What a checkpoint counts: consumed *plan* positions, through a chain of nodes.

A loader reads a pass as a chain of nodes with one contract, that of torchdata.nodes:

- ``next()`` returns the next item (raises ``StopIteration`` at the end of the pass);
- ``get_state()`` returns what resumes the chain right after the items ``next()`` returned;
- ``reset(state=None)`` starts afresh, or from a ``get_state()`` result.

The root, :class:`PlanNode`, hands out the items of one pass of the epoch cursor (samples
or step batches) and its state is the global plan position they consumed (see
:meth:`~.cursor.Pass.position`), never ``batches x batch size``. A processing stage
(a shuffle buffer, a filter, a packer) wraps a node, and its state adds what it holds to
its source's: a pipeline's state is the tuple of its stages' states, rooted at a plan
position.

Items are made where the reading happens (a background thread, a DataLoader worker) and
cross to the training loop as :class:`Stamped` pairs: the item and the state after it.
The loader keeps the stamp of the last item it handed to the loop (see :class:`Consumed`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

class Node:
    """An iterator with a resumable state (see the module docstring)."""

    def next(self) -> Any:
        raise NotImplementedError

    def get_state(self) -> Any:
        raise NotImplementedError

    def reset(self, state: Any = None) -> None:
        raise NotImplementedError

    def __iter__(self) -> "Node":
        return self

    def __next__(self) -> Any:
        return self.next()


class PlanNode(Node):
    """The root: items of a dataset's passes, with the consumed plan position as the state.

    ``items(dataset)`` starts the next pass of ``dataset`` and returns its iterator (for
    example ``lambda ds: ds.iterate_batches()``). ``get_state()`` is the dataset's state dict
    after the items returned so far; ``reset(state)`` loads it (any world size) and starts
    the pass from there.
    """

    def __init__(self, dataset, items: Callable[[Any], Iterator[Any]]) -> None:
        self.dataset = dataset
        self._items = items
        self._it: Optional[Iterator[Any]] = None
        self._pass = None

    def reset(self, state: Optional[dict] = None) -> None:
        if state is not None:
            self.dataset.load_state_dict(state)
        self._start()

    def _start(self) -> None:
        self._it = self._items(self.dataset)  # begins the pass at once
        self._pass = self.dataset.cursor.current

    def next(self) -> Any:
        if self._it is None:
            self._start()
        return next(self._it)

    def items(self) -> Iterator[Any]:
        """The pass's own iterator, for a consumer that reads :meth:`position` only between groups of
        items (a batcher): no per-item overhead."""
        if self._it is None:
            self._start()
        return self._it

    def close(self) -> None:
        """Stop the pass's reading now (its download threads and pins go)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()

    def position(self) -> Optional[int]:
        """The global plan position after the items returned so far (None before the pass starts)."""
        return None if self._pass is None else self._pass.position()

    def head(self) -> Optional[int]:
        """Samples of the step the pass starts inside that this process reads (see
        :meth:`~.cursor.Pass.head`), or None."""
        return None if self._pass is None else self._pass.head()

    def get_state(self) -> dict:
        if self._pass is None:
            return self.dataset.state_dict()
        return self.dataset.cursor.state_at(self._pass, self._pass.position())


class Stamped:
    """An item and the consumed plan position after it; ``stats``: what the item cost to make, when the
    loader keeps stats (see :mod:`shardstream.stats.meter`), else None."""

    __slots__ = ("item", "position", "stats")

    def __init__(self, item: Any, position: Optional[int], stats: Optional[dict] = None) -> None:
        self.item = item
        self.position = position
        self.stats = stats

    def __reduce__(self):
        return (type(self), (self.item, self.position, self.stats))


class stamped:
    """The items of ``dataset``'s next pass, each stamped with the plan position after it. The pass
    begins now, not at the first item; :meth:`close` stops its reading (threads, pins) at once."""

    def __init__(self, dataset, items: Callable[[Any], Iterator[Any]], stamp=Stamped) -> None:
        self.node = PlanNode(dataset, items)
        self.node.reset()
        self.stamp = stamp

    def __iter__(self) -> "stamped":
        return self

    def __next__(self) -> Stamped:
        item = self.node.next()
        return self.stamp(item, self.node.position())

    def close(self) -> None:
        self.node.close()


class Consumed:
    """What a loader handed to the training loop in the pass in progress: the stamp of the last
    item, turned into the dataset's state and the pass's length (shared by every loader)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.cursor = dataset.cursor
        self._pass = None  # the pass the loader runs (as the main process records it)
        self.position: Optional[int] = None
        self.counting = False  # whether `position` belongs to the cursor's current pass
        self.finished = False  # whether that pass has ended

    def begin(self) -> None:
        """A pass began (the cursor's current one): nothing of it was handed out yet."""
        self._pass = self.cursor.current
        self.position = None if self._pass is None else self._pass.start
        self.counting, self.finished = True, False

    def record(self, position: Optional[int]) -> None:
        """An item was handed to the loop; ``position`` is its stamp (None: not known, keep the last)."""
        if position is not None:
            self.position = position

    def reset(self) -> None:
        """A state was loaded: nothing of the new pass has been handed out yet."""
        self._pass, self.position, self.counting, self.finished = None, None, False, False

    def _counted(self):
        cur = self.cursor.current
        if not self.counting or cur is None or cur is not self._pass:
            return None
        return cur

    def state_dict(self) -> dict[str, Any]:
        cur = self._counted()
        if cur is None:
            return self.dataset.state_dict()
        return self.cursor.state_at(cur, self.position)

    def mixture_weights(self):
        """The streams' weights in effect after the items handed out (None with no streams)."""
        cur = self._counted()
        if cur is None:
            return self.dataset.mixture_weights()
        return self.dataset.mixture_weights(min(self.position, cur.plan.end), cur.epoch)

    def length(self, world, drop_last: bool = False) -> int:
        """Global steps of the pass in progress, else of the next one, for ``world``; with
        ``drop_last``, less a short last step (only ``epoch_tail="mosaic"`` makes one)."""
        cur = self._counted() if not self.finished else None
        if cur is None:
            cur = self.cursor.upcoming(world)
        last, batch = getattr(cur.plan, "last", 0), getattr(cur.plan, "batch", 0)
        return cur.steps - int(drop_last and 0 < last < batch)
