"""Downloading ahead of the training loop, in plan order.

A background thread walks this worker's upcoming samples chunk by chunk and asks a
small pool of download threads to pin each chunk's shards, in order of first use, so
shards arrive before they are needed. It stays at most ``predownload`` samples
ahead. The consumer takes chunks in order, waits for their pins, decodes, then
unpins. A pin that the cache limit did not allow ahead of time is taken by the
consumer itself, one shard at a time, when it reaches that shard.

Errors from the threads reach the consumer when it gets to the chunk concerned,
naming the shard; closing the iterator stops the threads and drops every pin. Closing
never joins the thread it runs on: a consumer's generator left to the garbage collector
may be finalised on the prefetch thread or a download thread (whichever allocates when
the collector runs), and then closes the prefetcher from there; the prefetch thread drops
the pins of what it prepared after that itself.
"""

from __future__ import annotations

import threading
from collections import deque
from functools import partial
from concurrent.futures import Future, ThreadPoolExecutor
from time import perf_counter
from typing import Iterator, Optional

import numpy as np

from ..errors import ShardstreamError
from ..stats import record


class PrefetchError(ShardstreamError, RuntimeError):
    """A background download failed; raised where the training loop needed it."""


class Chunk:
    """Located samples of the plan: ``flat`` ids, the ``shards`` and ``local`` rows they are at."""

    __slots__ = ("flat", "shards", "local", "_order", "pins", "size")

    def __init__(self, flat: np.ndarray, shards: np.ndarray, local: np.ndarray) -> None:
        self.flat, self.shards, self.local = flat, shards, local
        self._order: Optional[list] = None
        self.pins: list[tuple[int, Future]] = []
        self.size = len(flat)

    @property
    def order(self) -> list:
        """The distinct shards, by first use (worked out when prefetching asks)."""
        if self._order is None:
            first = np.unique(self.shards, return_index=True)[1]
            self._order = self.shards[np.sort(first)].tolist()
        return self._order


_here = threading.local()  # the prefetcher whose download pool runs this thread (its token)


def _mark(token: object) -> None:
    _here.token = token


class Prefetcher:
    """Prepares the chunks of ``chunks`` ahead of the consumer (see the module docstring)."""

    def __init__(self, cache, chunks: Iterator[Chunk], predownload: int, threads: int) -> None:
        self.cache = cache
        self._chunks = chunks
        self.predownload = max(0, predownload)
        self._token = object()
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="shardstream-download",
                                        initializer=_mark, initargs=(self._token,))
        self._ready: deque = deque()
        self._ahead = 0  # samples in self._ready
        self._cond = threading.Condition()
        self._stop = False
        self._done = False
        self._inflight: dict[int, Future] = {}  # shard -> its latest pin not yet done
        self._thread = threading.Thread(target=self._run, name="shardstream-prefetch", daemon=True)
        self._thread.start()

    def _pin(self, shard: int) -> bool:
        return self.cache.pin(shard, must=False)

    def _submit(self, shard: int) -> Future:
        """A future pin of ``shard``. A shard this process already holds costs a reference count;
        one whose pin is still under way waits for it instead of tying up another download thread,
        so the threads download different shards in parallel. Every waiter waits on that one pin (never
        on another waiter): however many chunks ask for a shard while it is prepared, its completion
        runs their callbacks one after the other, not nested one inside the next."""
        pending = self._inflight.get(shard)
        if pending is not None and not pending.done():
            out: Future = Future()
            pending.add_done_callback(lambda first: self._chain(first, shard, out))
            return out
        out = Future()
        if self.cache.add_ref(shard):
            out.set_result(True)
            return out
        out = self._pool.submit(self._pin, shard)
        self._inflight[shard] = out
        return out

    def _chain(self, first: Future, shard: int, out: Future) -> None:
        try:
            if first.cancelled() or first.exception() is not None or not first.result() \
                    or not self.cache.add_ref(shard):
                out.set_result(False)  # the consumer pins it itself when it gets there
            else:
                out.set_result(True)
        except BaseException as exc:  # pragma: no cover - add_ref does not raise
            out.set_exception(exc)

    def _run(self) -> None:
        try:
            for chunk in self._chunks:
                with self._cond:
                    while not self._stop and self._ready and self._ahead >= self.predownload:
                        self._cond.wait()
                    if self._stop:
                        return
                for shard in chunk.order:
                    chunk.pins.append((shard, self._submit(shard)))
                with self._cond:
                    self._ready.append(chunk)
                    self._ahead += chunk.size
                    self._cond.notify_all()
        except BaseException as exc:  # the plan failed: hand it to the consumer
            with self._cond:
                self._ready.append(exc)
                self._cond.notify_all()
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()
                stopped = self._stop
            if stopped:  # closed while this thread prepared a chunk (perhaps from this very thread)
                self._drop_ready()

    def __iter__(self) -> Iterator[tuple[Chunk, set]]:
        """Yield ``(chunk, pinned shards)``; the caller must call :meth:`done` after each chunk."""
        while True:
            with self._cond:
                while not self._ready and not self._done:
                    self._cond.wait()
                if not self._ready:
                    return
                item = self._ready.popleft()
                if not isinstance(item, BaseException):
                    self._ahead -= item.size
                self._cond.notify_all()
            if isinstance(item, BaseException):
                raise item
            pinned = set()
            t0 = perf_counter() if record.ON else 0.0
            try:
                for shard, fut in item.pins:
                    if _result(fut, shard, self.cache):
                        pinned.add(shard)
            except BaseException:
                self._unpin(item, pinned)
                raise
            if t0:
                record.add_time("download_wait", perf_counter() - t0)
                record.set_gauge("shards_in_flight", sum(1 for f in list(self._inflight.values()) if not f.done()))
                record.set_gauge("prefetch_depth", self._ahead)
            yield item, pinned

    def done(self, chunk: Chunk, pinned: set) -> None:
        self._unpin(chunk, pinned)

    def _unpin(self, chunk: Chunk, pinned: set) -> None:
        for shard in pinned:
            self.cache.unpin(shard)
        chunk.pins = []

    def close(self) -> None:
        """Stop the threads and drop the pins of every prepared chunk; from any thread, its own included."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        own = threading.current_thread() is self._thread or getattr(_here, "token", None) is self._token
        if not own:
            self._thread.join()
        self._pool.shutdown(wait=not own, cancel_futures=True)
        self._drop_ready()

    def _drop_ready(self) -> None:
        """Drop the pins of the prepared chunks, each once its pin is done (at once after a joined shutdown)."""
        with self._cond:
            items, self._ready = list(self._ready), deque()
        for item in items:
            if isinstance(item, BaseException):
                continue
            for shard, fut in item.pins:
                fut.add_done_callback(partial(self._release, shard))
            item.pins = []

    def _release(self, shard: int, fut: Future) -> None:
        if not fut.cancelled() and fut.exception() is None and fut.result():
            self.cache.unpin(shard)


def _result(fut: Future, shard: int, cache) -> bool:
    try:
        return fut.result()
    except ShardstreamError:
        raise
    except Exception as exc:
        raise PrefetchError(f"preparing {cache.describe(shard)} failed: {type(exc).__name__}: {exc}") from exc


def default_predownload(batch_size: Optional[int], shard_samples: float) -> int:
    """mosaicml-streaming's 8 x batch_size, raised to two average shards so that the next
    shard is on its way long before the current one runs out."""
    return max(8 * (batch_size or 1), int(2 * shard_samples), 1)
