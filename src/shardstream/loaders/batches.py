"""``BatchLoader``: column batches of numpy arrays, decoded ahead in a background thread.

For training loops with no PyTorch DataLoader (JAX, plain numpy): each ``iter(loader)``
runs the dataset's next pass and yields this process's ``batch_size`` samples of every
global step as one column batch (see ``StreamingDataset.iterate_batches``). A thread
decodes up to ``prefetch`` batches ahead, each stamped with the plan position after it
(see :mod:`.nodes`); ``state_dict()`` is the stamp of the last batch handed to the loop,
not of those decoded ahead, so a checkpoint resumes exactly where the loop was, on any
world size.
"""

from __future__ import annotations

import queue
import threading
from time import perf_counter
from typing import Any, Callable, Iterator, Optional, Sequence

from ..errors import InvalidArgumentError, ShardstreamError
from ..plan import World
from ..stats.loaders import LoaderStatsMixin, rows_of
from ..stats.meter import add_after, metered
from ..engine.nodes import Consumed, Stamped, stamped

_END = object()


class LoaderError(ShardstreamError, RuntimeError):
    """The background decoding thread ended without handing over a result or an error."""


class BatchLoader(LoaderStatsMixin):
    """Column batches of ``dataset`` for this process (see the module docstring).

    ``world``: this process's place in the job (default: the dataset's ``detect_world``).
    ``columns``: decode only these. ``transform``: applied to each batch in the thread
    (for example to place it on devices). ``prefetch``: batches decoded ahead (>= 1). ``stats``: keep
    loader stats (``True``, a list of exporters, or a :class:`~shardstream.stats.StatsConfig`; see
    :meth:`stats`).
    """

    def __init__(self, dataset, *, world: Optional[World] = None, columns: Optional[Sequence[str]] = None,
                 prefetch: int = 2, transform: Optional[Callable[[dict], Any]] = None, stats=None) -> None:
        if not hasattr(dataset, "iterate_batches"):
            raise InvalidArgumentError(f"BatchLoader reads a shardstream StreamingDataset, got {type(dataset).__name__}")
        if dataset.batch_size is None:
            raise InvalidArgumentError(
                "the dataset has no batch_size; build it with StreamingDataset(..., batch_size=N), N samples "
                "per process per step"
            )
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidArgumentError(f"prefetch={prefetch!r} must be an int >= 1")
        if world is not None and not isinstance(world, World):
            raise InvalidArgumentError(f"world={world!r} must be a shardstream.plan.World or None")
        dataset.check_batchable(columns)
        config = self._stats_config(stats)
        self.dataset = dataset
        self.world = world
        self.columns = None if columns is None else list(columns)
        self.prefetch = prefetch
        self.transform = transform
        self._consumed = Consumed(dataset)
        self._active: Optional[_Producer] = None
        self._start_stats(config, dataset, batch_path=None, world=world, num_workers=0, parallel=False)

    def __iter__(self) -> Iterator[Any]:
        self.close()
        world, columns = self.world, self.columns
        source = stamped(self.dataset, lambda ds: ds.iterate_batches(world, columns))  # begins the pass now
        self._consumed.begin()
        meter = self._loop_stats
        if meter is not None:
            source = metered(source, "thread", rows_of)
            meter.begin_pass()
        producer = _Producer(source, self.prefetch, self.transform)
        self._active = producer
        return self._consume(producer, meter)

    def _consume(self, producer: "_Producer", meter) -> Iterator[Any]:
        try:
            while True:
                asked = perf_counter() if meter is not None else 0.0
                item = producer.get()
                if item is _END:
                    self._consumed.finished = True
                    return
                self._consumed.record(item.position)
                if meter is not None:
                    meter.batch(asked, perf_counter(), item.stats)
                yield item.item
        finally:
            producer.stop()

    def close(self) -> None:
        """Stop the background thread of the pass in progress, if any."""
        if self._active is not None:
            self._active.stop()
            self._active = None

    def __del__(self) -> None:
        try:
            self.close_stats()  # a last export, and the exporters closed
        except Exception:
            pass

    def __len__(self) -> int:
        """Batches this process receives in the pass in progress (else in the next one)."""
        return self._consumed.length(self.world or self.dataset.detect_world())

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state after the batches handed to the loop (every process computes the same)."""
        return self._consumed.state_dict()

    def mixture_weights(self):
        """The streams' weights in effect where the loop is (a weight schedule moves them)."""
        return self._consumed.mixture_weights()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at the state's position on the next ``iter(loader)``."""
        self.close()
        self.dataset.load_state_dict(obj)
        self._consumed.reset()


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
            for batch in self._source:
                if self._transform is not None:
                    t0 = perf_counter()
                    out = self._transform(batch.item)
                    add_after(batch.stats, "transform", perf_counter() - t0)
                    batch = Stamped(out, batch.position, batch.stats)
                if not self._put(batch):
                    return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            self._put(exc)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

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
