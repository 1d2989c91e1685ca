"""Where a process's loader time goes: counters filled at a few timing points of the engine.

The points sit where whole shards or whole batches are handled, never per sample: waiting
for a shard's download (``download_wait``), downloading it in the background
(``download``, bytes and files fetched), preparing it (``decompress``), cache hits, misses
and evictions, user transforms (``transform``) and collation (``collate``). A loader with
stats on turns them on in each process that makes its batches (:func:`enable`); each batch
then carries what the counters gained since the previous batch (see :mod:`.meter`). With
no such loader in the process, ``ON`` is False and a point costs one attribute test.

The counters are the process's: two loaders with stats on, running at once in one process,
each see the other's stage time too.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Optional

import numpy as np

ON = False  # whether a loader with stats on runs in this process

#: Stages whose seconds are counted here; ``decode`` is what remains of the time a batch took to make.
TIMED = ("download_wait", "download", "decompress", "transform", "collate")
COUNTED = ("bytes_fetched", "files_fetched", "cache_hits", "cache_misses", "evictions")
#: The counters in the order :func:`values` gives them (and batches carry their gains).
SLOTS = TIMED + COUNTED
SLOT = {name: k for k, name in enumerate(SLOTS)}
_DOWNLOAD, _BYTES, _FILES = SLOT["download"], SLOT["bytes_fetched"], SLOT["files_fetched"]

_lock = threading.Lock()
_values: list = [0.0] * len(TIMED) + [0] * len(COUNTED)
CHANGES = 0  # how many times the counters changed: a batch whose count is the previous one's gained nothing
_gauges = {"shards_in_flight": 0, "prefetch_depth": 0}
_streams: Optional[np.ndarray] = None  # samples handed out per stream (mixtures)
STREAMS = False  # whether samples per stream are counted in this process (a mixture is read)


def enable() -> None:
    """Turn the timing points on in this process (a loader with stats on does, in each of its workers)."""
    global ON
    ON = True


def add_time(stage: str, seconds: float) -> None:
    global CHANGES
    k = SLOT[stage]
    with _lock:
        _values[k] += seconds
        CHANGES += 1


def add_count(name: str, n: int = 1) -> None:
    global CHANGES
    k = SLOT[name]
    with _lock:
        _values[k] += n
        CHANGES += 1


def fetched(nbytes: int, seconds: float) -> None:
    """A file of ``nbytes`` was downloaded in ``seconds``."""
    global CHANGES
    with _lock:
        CHANGES += 1
        _values[_BYTES] += nbytes
        _values[_FILES] += 1
        _values[_DOWNLOAD] += seconds


GAUGES = 0  # how many times a gauge was set: a batch whose count is the previous one's carries none


def set_gauge(name: str, value: int) -> None:
    global GAUGES
    if _gauges[name] != value:
        _gauges[name] = value
        GAUGES += 1


def add_streams(stream_of_samples: np.ndarray, streams: int) -> None:
    """Count handed-out samples per stream (``stream_of_samples``: each sample's stream)."""
    global _streams, STREAMS
    STREAMS = True
    counts = np.bincount(stream_of_samples, minlength=streams)
    with _lock:
        if _streams is None or len(_streams) < len(counts):
            grown = np.zeros(len(counts), np.int64)
            if _streams is not None:
                grown[:len(_streams)] = _streams
            _streams = grown
        _streams[:len(counts)] += counts


class timed:
    """``with timed("collate"): ...`` adds the block's seconds to a stage when the points are on."""

    __slots__ = ("stage", "t0")

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.t0 = 0.0

    def __enter__(self) -> "timed":
        self.t0 = perf_counter() if ON else 0.0
        return self

    def __exit__(self, *exc) -> None:
        if self.t0:
            add_time(self.stage, perf_counter() - self.t0)


def values() -> list:
    """The counters so far in this process, in :data:`SLOTS` order."""
    with _lock:
        return _values.copy()


def gauges() -> tuple[int, int]:
    """``(shards in flight, samples prefetched)`` as last set in this process."""
    return _gauges["shards_in_flight"], _gauges["prefetch_depth"]


def streams() -> Optional[np.ndarray]:
    """Samples handed out per stream so far in this process (None before any, or with one stream)."""
    with _lock:
        return None if _streams is None else _streams.copy()


def snapshot() -> tuple[dict, dict, dict, Optional[np.ndarray]]:
    """``(seconds per stage, counts, gauges, samples per stream)`` so far in this process, by name."""
    now = values()
    return (dict(zip(TIMED, now[:len(TIMED)])), dict(zip(COUNTED, now[len(TIMED):])), dict(_gauges), streams())
