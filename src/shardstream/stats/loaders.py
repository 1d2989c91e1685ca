"""What every loader adds for stats: the ``stats=`` keyword's settings, ``stats()`` and ``stats_timeline()``."""

from __future__ import annotations

from time import perf_counter
from typing import Any, Iterator, Optional

from ..errors import StatsDisabledError
from .config import StatsConfig, stats_config
from .loop import LoopStats
from .report import Report


def timed_items(it: Iterator[Any], loop: LoopStats) -> Iterator[tuple[Any, float, float]]:
    """``(item, asked, got)`` for each item of a pass's iterator ``it``: when the training loop asked for it
    and when it was there (``perf_counter``), for ``loop.batch``."""
    loop.begin_pass()
    while True:
        asked = perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        yield item, asked, perf_counter()


def rows_of(batch: Any) -> int:
    """Rows of a batch: a dict's first column, a sequence's length, a tensor's first dimension, else 0."""
    if batch is None:
        return 0
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
        if batch is None:
            return 0
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    try:
        return len(batch)
    except TypeError:
        return 0


def stream_targets(dataset, weights) -> Optional[Any]:
    """A callable giving ``(stream names, weights where the loop is)`` for a mixture, else None.
    ``weights``: the loader's ``mixture_weights`` method."""
    streams = getattr(dataset, "streams", None) or []
    if len(streams) < 2:
        return None
    names = []
    for k, s in enumerate(streams):
        name = getattr(s, "remote", None) or getattr(s, "local", None) or f"stream {k}"
        names.append(name if name not in names else f"{name} ({k})")

    def targets():
        w = weights()
        return None if w is None else (names, [float(x) for x in w])
    return targets


class LoaderStatsMixin:
    """``stats()`` and ``stats_timeline()`` for a loader; it calls :meth:`_start_stats` in its ``__init__``
    and feeds ``self._loop_stats`` (None when stats are off) as batches reach the loop."""

    _loop_stats: Optional[LoopStats] = None

    @staticmethod
    def _stats_config(value) -> Optional[StatsConfig]:
        return stats_config(value)

    def _start_stats(self, config: Optional[StatsConfig], dataset, *, batch_path: Optional[bool] = None,
                     world=None, num_workers: Optional[int] = None, parallel: bool = True) -> None:
        """``parallel``: whether the loader takes ``num_workers`` (else it makes batches in one thread)."""
        if config is None:
            self._loop_stats = None
            return
        if world is None:
            detect = getattr(dataset, "detect_world", None)
            world = detect() if detect is not None else None
        weights = getattr(self, "mixture_weights", None)
        targets = stream_targets(dataset, weights) if weights is not None else None
        workers = getattr(self, "num_workers", 0) if num_workers is None else num_workers
        self._loop_stats = LoopStats(config, type(self).__name__, world, workers, targets, batch_path, parallel)

    def stats(self) -> Report:
        """Loader stats: batches and samples per second, the loop's waits (p50/p95/max) against the time
        between its requests (the stall fraction), per-stage seconds per worker and in all, bytes fetched,
        cache hits, misses and evictions, shards in flight and the prefetch depth, over a sliding window
        and since the start; a dict that prints as a table (see docs/observability.md)."""
        if self._loop_stats is None:
            raise StatsDisabledError(
                f"{type(self).__name__} keeps no stats: build it with stats=True (or a list of exporters, or a "
                "shardstream.stats.StatsConfig), or set SHARDSTREAM_STATS=1 before building it")
        return self._loop_stats.report()

    def stats_timeline(self) -> dict:
        """Per batch: arrival time, loop wait, time between requests, rows and critical stage seconds
        (numpy arrays; see :meth:`shardstream.stats.LoopStats.timeline`)."""
        self.stats()  # refuses when stats are off
        return self._loop_stats.timeline()

    def close_stats(self) -> None:
        """Export a last time and close the exporters (also done when the loader is garbage-collected)."""
        if self._loop_stats is not None:
            self._loop_stats.close()
