"""Turning the batches a loader noted into rows of numbers, many at once.

Per batch the training process only notes ``(asked, got, stats, rows, collate seconds)``
(see :meth:`.loop.LoopStats.batch`); a few times a second :func:`to_rows` turns the notes into
an array of :data:`.summary.COLUMNS` columns with numpy, without a Python step per field.
"""

from __future__ import annotations

import math
import time
from time import perf_counter
from typing import Callable, Optional

import numpy as np

from . import summary


class Rows:
    """What :func:`to_rows` makes of a list of notes: the array, the start-up waits of the passes that
    began in it, and the last gauges and the per-stream gains seen (``streams``)."""

    __slots__ = ("arr", "firsts", "gauges", "streams")

    def __init__(self, arr: np.ndarray, firsts: list, gauges: dict, streams: list) -> None:
        self.arr, self.firsts, self.gauges, self.streams = arr, firsts, gauges, streams


def to_rows(notes: list, starts: set, last_request: Optional[float], start: float,
            number: Callable[[object], int]) -> Rows:
    """The rows of ``notes`` (in order); ``starts``: positions in ``notes`` where a pass began;
    ``last_request``: when the loop asked for the batch before the first note (None: a pass began);
    ``start``: the first request ever (times are counted from it); ``number(label)``: a worker's number."""
    n = len(notes)
    asked, got, stats, rows, collate = zip(*notes)
    asked = np.asarray(asked, np.float64)
    got = np.asarray(got, np.float64)
    arr = np.zeros((n, summary.COLUMNS), np.float64)
    arr[:, summary.T] = got - start
    wait = got - asked
    prev = np.empty(n)
    prev[0] = math.nan if last_request is None else last_request
    prev[1:] = asked[:-1]
    between = asked - prev
    first = sorted(starts)
    if first:
        between[first] = math.nan
    new = np.isnan(between)
    firsts = wait[new].tolist()
    wait[new] = 0.0
    arr[:, summary.WAIT] = wait
    arr[:, summary.BETWEEN] = between
    arr[:, summary.MAIN_COLLATE] = collate
    if None in stats:  # batches with no stats (made in the loop's own thread): rows as the loop counted them
        stats = [s if s is not None else ["main", 0.0, 0.0, r, None, None, None] for s, r in zip(stats, rows)]
    workers, sent, make, counted, gains, gauges, streams = zip(*stats)
    arr[:, summary.ROWS] = counted
    arr[:, summary.MAKE] = make
    arr[:, summary.WID] = [number(w) for w in workers]
    sent = np.asarray(sent, np.float64)
    received = got + (time.time() - perf_counter())  # the wall clock when each batch was there
    crossed = (sent > 0) & (wait > 0)  # from a worker process: the part of the wait after it sent the batch
    arr[crossed, summary.TRANSFER] = np.minimum(wait[crossed], np.maximum(received[crossed] - sent[crossed], 0.0))
    gained = [k for k, g in enumerate(gains) if g is not None]
    if gained:
        arr[gained, summary.GAINS:] = [gains[k] for k in gained]
    return Rows(arr, firsts, {w: g for w, g in zip(workers, gauges) if g is not None},
                [s for s in streams if s is not None])
