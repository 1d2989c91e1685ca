"""The thread loader: one background thread, a bounded queue, and a state that counts what the loop consumed.

Every loader that makes batches in a thread of the training process (``BatchLoader``, ``JaxLoader``,
``AsyncDataLoader``) is a front end of :class:`ThreadLoader`. What it runs is one of two *runs*:

- :class:`DatasetRun`: a ``StreamingDataset``'s passes, the column batch of each global step (see
  ``StreamingDataset.iterate_batches``), each stamped with the plan position after it (:mod:`.nodes`);
  the loader keeps the stamp of the last batch handed to the loop (:class:`~.nodes.Consumed`);
- :class:`ChainRun`: a processing chain's passes (``ds.map(...).filter(...).batch(n)``), taken from the chain
  with its public ``take_pass`` (the chain's :class:`~shardstream.engine.chainpass.ChainPass`). The thread notes
  the key of every item it makes, under a lock, together with the chain's step; the loop drops it when it
  takes the item, so the state is the chain's plus the keys made and not consumed (a resume makes them again
  and hands them on first). A pass that is not balanced over ranks ends on every rank at the same step
  (``ChainPass.agreed``, :mod:`shardstream.engine.agree`).

A sharded source (``ParquetShardedSource(...)``) is read through its ``dataset(...)``. The thread makes up to
``depth`` items ahead (0: none, they are made in the loop's thread); ``state_dict()`` is the state after the
items handed to the loop, never after those made ahead, so a checkpoint resumes exactly where the loop was.
With loader stats on, the thread stamps each item with what making it cost (:func:`~shardstream.stats.meter.
metered`, worker ``"thread"``, ``"main"`` without one) and the loop's waits are timed
(:func:`~shardstream.stats.loaders.timed_items`).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from time import perf_counter
from typing import Any, Callable, Iterator, Optional

from ..errors import ShardstreamError
from ..stats.loaders import LoaderStatsMixin, rows_of, timed_items
from ..stats.meter import add_after, metered
from ..engine.nodes import Consumed, Stamped, stamped

_END = object()


class LoaderError(ShardstreamError, RuntimeError):
    """The background decoding thread ended without handing over a result or an error."""


class DatasetRun:
    """A StreamingDataset's passes for :class:`ThreadLoader` (see the module docstring)."""

    def __init__(self, dataset, world, columns) -> None:
        self.dataset = self.root = dataset
        self.world, self.columns = world, columns
        self.consumed = Consumed(dataset)

    def begin(self) -> Iterator[Stamped]:
        world, columns = self.world, self.columns
        items = stamped(self.dataset, lambda ds: ds.iterate_batches(world, columns))  # begins the pass now
        self.consumed.begin()
        return items

    def agreed(self, items: Iterator[Stamped]) -> Iterator[Stamped]:
        return items  # the plan cuts every global step among the ranks: they end together

    def took(self, item: Stamped) -> None:
        self.consumed.record(item.position)

    def finished(self) -> None:
        self.consumed.finished = True

    def stop(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return self.consumed.state_dict()

    def load_state_dict(self, state) -> None:
        self.dataset.load_state_dict(state)
        self.consumed.reset()

    def length(self) -> int:
        return self.consumed.length(self.world or self.dataset.detect_world())

    def mixture_weights(self):
        return self.consumed.mixture_weights()


class ChainRun:
    """A processing chain's passes for :class:`ThreadLoader` (see the module docstring)."""

    def __init__(self, chain, world) -> None:
        self.dataset, self.root, self.world = chain, chain.root, world
        self.feed: Optional[_ChainFeed] = None

    def begin(self) -> Iterator[Stamped]:
        self.feed = _ChainFeed(self.dataset.take_pass(self.world))
        return self.feed.items()

    def agreed(self, items: Iterator[Stamped]) -> Iterator[Stamped]:
        return self.feed.chain_pass.agreed(items)

    def took(self, item: Stamped) -> None:
        self.feed.made.popleft()  # only the loop's thread pops (see _ChainFeed)

    def finished(self) -> None:
        pass  # the pass knows it ran out

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.chain_pass.close()

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict() if self.feed is None else self.feed.state()

    def load_state_dict(self, state) -> None:
        self.feed = None
        self.dataset.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.feed = None
        self.dataset.set_epoch(epoch)

    def length(self) -> int:
        raise TypeError(f"a loader over a processing chain has no len(): its operations ({self.dataset!r}) may "
                        "change the number of items; count batches while iterating")

    def mixture_weights(self):
        return None  # a chain's items are not counted per stream


class _ChainFeed:
    """One pass of a chain, made in the loader's thread: the keys made and not yet consumed, under a lock shared
    with the chain's step, so that a state taken at any moment sees both at the same point."""

    def __init__(self, chain_pass) -> None:
        self.chain_pass = chain_pass
        self.lock = threading.Lock()
        self.made: deque = deque()

    def items(self) -> Iterator[Stamped]:
        step, convert, lock, made = self.chain_pass.next, self.chain_pass.convert, self.lock, self.made
        try:
            while True:
                with lock:
                    try:
                        key, value = step()
                    except StopIteration:
                        return
                    made.append(key)
                yield Stamped(convert(value), key)
        finally:
            self.chain_pass.close()

    def state(self) -> dict[str, Any]:
        with self.lock:
            return self.chain_pass.state(list(self.made))


class ThreadLoader(LoaderStatsMixin):
    """The engine under the thread loaders (see the module docstring): a front end calls :meth:`_start_loader`
    with its run, the depth of the queue, a ``transform`` applied to each item in the thread (or None) and its
    stats settings."""

    def _start_loader(self, run, depth: int, transform: Optional[Callable[[Any], Any]], config, world=None) -> None:
        self._run, self._depth, self._transform = run, depth, transform
        self._active: Optional[_Producer] = None
        self._token: Optional[object] = None  # the pass in progress: an iterator of an older one just ends
        self._start_stats(config, run.root, batch_path=None, world=world, num_workers=0, parallel=False)

    def __iter__(self) -> Iterator[Any]:
        self.close()
        run = self._run
        source = run.begin()
        meter = self._loop_stats
        if meter is not None:
            source = metered(source, "thread" if self._depth else "main", rows_of)
        if self._depth:
            self._active = _Producer(source, self._depth, self._transform)
            items = self._active.items()
        else:
            items = _inline(source, self._transform)
        token = self._token = object()
        return self._consume(run.agreed(items), meter, token)

    def _consume(self, items: Iterator[Stamped], meter, token: object) -> Iterator[Any]:
        run = self._run
        try:
            if meter is None:
                for item in items:
                    if self._token is not token:  # a newer pass replaced this one: its iterator just ends
                        return
                    run.took(item)
                    yield item.item
            else:
                for item, asked, got in timed_items(items, meter):
                    if self._token is not token:
                        return
                    run.took(item)
                    meter.batch(asked, got, item.stats)
                    yield item.item
            if self._token is token:  # ran out, not replaced by a newer pass
                run.finished()
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """Stop the pass in progress, if any (its thread and reading)."""
        self._token = None
        if self._active is not None:
            self._active.stop()
            self._active = None
        self._run.stop()

    def __del__(self) -> None:
        try:
            self.close_stats()  # a last export, and the exporters closed
        except Exception:
            pass

    def state_dict(self) -> dict[str, Any]:
        """Where the loop is: the state after the items handed to it (not those made ahead)."""
        return self._run.state_dict()

    def load_state_dict(self, state) -> None:
        """Resume at the state's position on the next ``iter(loader)`` (any world)."""
        self.close()
        self._run.load_state_dict(state)

    def mixture_weights(self):
        """The streams' weights in effect where the loop is (a weight schedule moves them); None over a chain."""
        return self._run.mixture_weights()


def _inline(source: Iterator[Stamped], transform) -> Iterator[Stamped]:
    """The items of ``source`` made in the loop's thread (no prefetch)."""
    try:
        for item in source:
            yield item if transform is None else _transformed(item, transform)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _transformed(item: Stamped, transform) -> Stamped:
    t0 = perf_counter()
    out = transform(item.item)
    add_after(item.stats, "transform", perf_counter() - t0)
    return Stamped(out, item.position, item.stats)


class _Producer:
    """A thread that fills a bounded queue from an iterator; errors and the end travel in order."""

    def __init__(self, source: Iterator[Any], depth: int, transform) -> None:
        self._source = source
        self._transform = transform
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shardstream-batches", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if self._transform is not None:
                    item = _transformed(item, self._transform)
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            self._put(exc)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def items(self) -> Iterator[Any]:
        """The items in order until the end (or until stopped); stops the thread when closed or dropped."""
        try:
            while True:
                item = self.get()
                if item is _END:
                    return
                yield item
        finally:
            self.stop()

    def get(self) -> Any:
        while True:
            if self._stop.is_set():
                return _END  # closed, or replaced by a newer pass: this iterator simply ends
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise LoaderError("the batch decoding thread ended without a result") from None
                continue
            if isinstance(item, BaseException):
                raise item  # the original error, its traceback showing where in the thread it happened
            return item

    def stop(self) -> None:
        self._stop.set()
        while True:  # unblock a thread waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
