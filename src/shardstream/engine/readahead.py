"""``prefetch(n)``: a reader's chain runs in a background thread, ``n`` items ahead of the loop.

The state must count what the loop consumed, not what the thread made: the thread notes
the key of every item it makes (under a lock, together with the chain's step), and the
loop drops it when it takes the item. A state is then the chain's state plus the keys of
the items made but not consumed, which a resume makes again and hands on first.

With loader stats on (a :class:`~shardstream.stats.meter.BatchMeter` given as ``meter``) the thread
times each item it makes and stamps it with its stats (:attr:`Prefetched.stats` after each
``next``); the queue's depth is the ``prefetch_depth`` gauge.

Nothing asks the loop to call ``close()``: an iterator dropped (or garbage-collected) half-way stops its
thread within a tenth of a second (or once the item in the making is made), and the thread closes the
chain's run as it leaves.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import deque
from time import perf_counter
from typing import Any, Callable, Optional

from ..stats import record
from ..stats.loaders import rows_of

_END = object()


class Prefetched:
    """Items of ``run`` (a :class:`~.run.Run`) made ``n`` ahead in a thread; ``convert`` each value.
    ``meter``: stamp each item with its stats (see the module docstring).

    The thread holds only the :class:`Producer` (queue, run, keys made), never this iterator: an iterator
    dropped or garbage-collected without :meth:`close` stops its thread, which then closes the run (and
    with it the engine's download threads). The chain keeps the producer, for its state."""

    def __init__(self, run, n: int, convert: Callable[[Any], Any], meter=None) -> None:
        self.convert = convert
        self.stats: Optional[dict] = None  # the stats of the item the last next() returned (with a meter)
        self.convert_s = 0.0  # seconds that item's conversion took (with a meter)
        self.producer = Producer(run, n, meter)
        weakref.finalize(self, self.producer.stop.set)

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        q = self.producer.q
        v = q.get()
        if v is _END:
            q.put(_END)
            raise StopIteration
        if isinstance(v, _Raised):
            raise v.exc
        # no lock: the producer holds it while it makes the next item; only this thread pops, and state()
        # (which takes the lock, for the chain's state and the keys made to agree) runs in this thread too
        self.producer.made.popleft()
        if type(v) is not _Metered:
            if record.ON:  # the stamp made next in this process reads it
                record.set_gauge("prefetch_depth", q.qsize())
            return self.convert(v)
        t0 = perf_counter()
        out = self.convert(v.item)
        self.stats, self.convert_s = v.stats, perf_counter() - t0
        return out

    def state(self) -> dict:
        return self.producer.state()

    def close(self) -> None:
        self.producer.close()


class Producer:
    """The thread that makes a run's items into a queue, and what it shares with the consumer."""

    def __init__(self, run, n: int, meter=None) -> None:
        self.run, self.meter = run, meter
        self.lock = threading.Lock()
        self.made: deque = deque()  # keys made and not yet consumed
        self.q: queue.Queue = queue.Queue(maxsize=max(int(n), 1))
        self.stop = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        self.thread = threading.Thread(target=self._produce, name="shardstream-prefetch", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        try:
            self._make()
        except BaseException as exc:  # handed to the loop, raised there
            self._put(_Raised(exc))
        else:
            self._put(_END)
        finally:
            if self.stop.is_set():  # closed, or its iterator was dropped: nobody else closes the run
                self._close_run()

    def _make(self) -> None:
        run, lock, made, q, meter, stop = self.run, self.lock, self.made, self.q, self.meter, self.stop
        while not stop.is_set():
            t0 = perf_counter() if meter is not None else 0.0
            with lock:
                try:
                    k, v = run.next()
                except StopIteration:
                    return
                made.append(k)
            if meter is not None:
                record.set_gauge("prefetch_depth", q.qsize())
                v = _Metered(v, meter.stamp(perf_counter() - t0, rows_of(v)))
            self._put(v)

    def _put(self, item) -> None:
        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def state(self) -> dict:
        with self.lock:
            return self.run.state(list(self.made))

    def close(self) -> None:
        self.stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=5)
        self._close_run()

    def _close_run(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.run.close()


class _Metered:
    """An item and its stats (with loader stats on)."""

    __slots__ = ("item", "stats")

    def __init__(self, item: Any, stats: dict) -> None:
        self.item, self.stats = item, stats


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
