"""The worker side of loader stats: what each batch cost to make, carried with the batch.

A process that makes batches (a DataLoader worker, a loader's background thread, or the
training process itself with no workers) wraps its stamped batches in :func:`metered`.
Each batch's stamp then carries a short list (see :class:`BatchMeter`): which worker made
it, when it was sent (wall clock, comparable across the processes of one host), the seconds
it took to make, its rows, and what this process's counters (:mod:`.record`) gained since
the previous batch. Nothing else crosses: no shared memory, no extra sockets.
"""

from __future__ import annotations

import time
from operator import sub
from time import perf_counter
from typing import Any, Callable, Iterator, Optional

from . import record

#: Positions in a batch's stats list.
WORKER, SENT, MAKE, ROWS, GAINS, GAUGES, STREAMS = range(7)


class BatchMeter:
    """Per-batch gains of this process's counters for one pass. A batch's stats are the list
    ``[worker, sent, make seconds, rows, gains (record.SLOTS order; None: no gain), (shards in flight,
    samples prefetched) or None when unchanged, samples per stream or None]`` (positions:
    :data:`WORKER` ...); ``sent`` is 0.0 for batches made in the training process."""

    def __init__(self, worker: Any) -> None:
        record.enable()
        self.worker = worker
        self._seen = record.CHANGES
        self._gauged = -1  # the gauges' count last sent (the first batch sends them)
        self._last = record.values()
        self._streams = record.streams()
        self._sent = worker not in ("main", "thread")  # only a worker process's batches are sent

    def stamp(self, make_s: float, rows: int) -> list:
        gains = None  # nothing gained since the previous batch (the usual case: points fire per chunk or shard)
        if record.CHANGES != self._seen:
            self._seen = record.CHANGES
            now = record.values()
            gains = list(map(sub, now, self._last))
            self._last = now
        gauges = None  # unchanged since the previous batch
        if record.GAUGES != self._gauged:
            self._gauged = record.GAUGES
            gauges = record.gauges()
        streams = self._stream_gains() if record.STREAMS else None  # a mixture: samples per stream counted
        return [self.worker, time.time() if self._sent else 0.0, make_s, rows, gains, gauges, streams]

    def _stream_gains(self) -> list:
        now = record.streams()
        last = self._streams
        self._streams = now
        if last is None:
            return now.tolist()
        gains = now.copy()
        gains[:len(last)] -= last
        return gains.tolist()


def metered(stamps: Iterator[Any], worker: Any, rows: Callable[[Any], int]) -> Iterator[Any]:
    """``stamps`` (objects with ``item`` and ``stats`` slots), each given its batch's stats.
    ``rows(item)``: the rows of a batch (0 for a dropped one). The make time of a batch runs from the
    moment its consumer asked for it to the moment it is ready (time blocked handing the previous
    batch over is not counted)."""
    meter = BatchMeter(worker)
    try:
        while True:
            t0 = perf_counter()
            try:
                stamp = next(stamps)
            except StopIteration:
                return
            stamp.stats = meter.stamp(perf_counter() - t0, rows(stamp.item))
            yield stamp
    finally:
        close = getattr(stamps, "close", None)
        if close is not None:
            close()


def add_after(stats: Optional[list], stage: str, seconds: float) -> None:
    """Add ``seconds`` of ``stage`` spent on a batch after it was stamped (a collate or transform applied
    to the stamped batch, just now) to its stats; the batch is sent from now on, not from its stamp."""
    if stats is not None:
        if stats[GAINS] is None:
            stats[GAINS] = [0.0] * len(record.SLOTS)
        stats[GAINS][record.SLOT[stage]] += seconds
        stats[MAKE] += seconds
        stats[SENT] = time.time()  # else the loop's transfer time would count this stage too


def sent_now(stamps: list) -> None:
    """The batches ``stamps`` (a bundle) leave now: their transfer time counts from here, not from when
    each was ready (waiting for the rest of its bundle is not transfer)."""
    now = None
    for stamp in stamps:
        stats = stamp.stats
        if stats is not None and stats[SENT]:
            now = now or time.time()
            stats[SENT] = now


def worker_label(info: Optional[Any]) -> str:
    """``"w<id>"`` for a DataLoader worker (``info``: torch's worker info), ``"main"`` with none."""
    return "main" if info is None else f"w{info.id}"
