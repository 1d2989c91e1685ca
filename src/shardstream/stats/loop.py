"""The training-process side of loader stats: waits, throughput and stage times, windowed and since start.

A loader with stats on calls :meth:`LoopStats.batch` for each batch it hands to the loop, with
the moment the loop asked for it and the moment it was there, and the stats dict the batch
carried from its worker (see :mod:`.meter`). The loop's wait is the time between the two
moments; the time between the loop's requests is its step. The stall fraction is waits over
steps. Stage seconds come from the workers, plus ``transfer``: of a batch the loop waited
for, the part of the wait after the worker sent it (pickling, the pipe, unpickling).

The first batch of each pass waits for the workers to start; it is reported apart
(``first_batch_s``) and left out of the waits.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from time import perf_counter
from typing import Any, Callable, Optional

import numpy as np

from . import summary
from .config import StatsConfig
from .ingest import to_rows
from .report import Report, advice, slowest

log = logging.getLogger("shardstream.stats")

_IN_MEMORY = ("main", "thread")  # batches made in the training process: no transfer between processes
_WINDOW_MAX = 16_384  # rows kept for the window at most (a faster loader's window spans less time)
_TIMELINE_MAX = 100_000  # rows kept for plots; beyond, every other one is dropped
_NAN = math.nan
_EVERY = 0.25  # seconds between two additions of the batches noted (and stall checks)


class LoaderStallWarning(UserWarning):
    """The training loop waited for data more than the configured fraction of the time."""


class LoopStats:
    """Stats of one loader in the training process (see the module docstring).

    ``world``: the rank's world (rank, size) for the report; ``targets``: a callable giving the
    streams' names and weights where the loop is (mixtures), or None; ``batch_path``: whether the loader
    decodes whole steps (for the advice), None where it does not apply; ``workers``: whether the loader
    takes ``num_workers`` (else it makes batches in one thread)."""

    def __init__(self, config: StatsConfig, loader: str, world: Any, num_workers: int,
                 targets: Optional[Callable[[], Optional[tuple]]] = None, batch_path: Optional[bool] = None,
                 workers: bool = True) -> None:
        self.config = config
        self.loader = loader
        self.world = world
        self.num_workers = num_workers
        self.targets = targets
        self.batch_path = batch_path
        self.workers = workers
        self._lock = threading.Lock()  # another thread may ask for a report while batches are added up
        self._start: Optional[float] = None
        self._last_request: Optional[float] = None
        self._notes: list = []  # batches noted and not yet added up
        self._starts: set = set()  # positions in self._notes where a pass began
        self._owner: Optional[int] = None  # the loop's thread, which adds the notes up
        self._due = 0.0  # when the notes are added up next (perf_counter), with exports and stall checks
        self._window: list = []  # arrays of rows (see .summary) of the window, oldest first
        self._capped = False  # whether the window lost rows to _WINDOW_MAX rather than to time
        self._folded: Optional[dict] = None  # the totals of rows that left the window
        self._labels: list = []  # worker labels by number
        self._ids: dict = {}
        self._first: list[float] = []
        self._gauges: dict = {}
        self._streams: Optional[np.ndarray] = None
        self._timeline: list = []  # arrays of timeline columns, every self._stride-th row
        self._timeline_rows = 0
        self._stride = 1
        self._n = 0
        self._next_export = [0.0] * len(config.exporters)
        self._broken: set = set()  # exporters that raised, left out from then on
        self._closed = False
        self._warned_at: Optional[float] = None

    # -- recording ---------------------------------------------------------------------------------
    def begin_pass(self) -> None:
        """A pass begins: its first batch waits for start-up, and the gap since the last pass is no step."""
        self._starts.add(len(self._notes))

    def batch(self, asked: float, got: float, stats: Optional[list], rows: int = 0, collate_s: float = 0.0) -> None:
        """One batch handed to the loop: asked for at ``asked``, there at ``got`` (``perf_counter``);
        ``stats``: what it carried from its worker (see :mod:`.meter`; its rows count, else ``rows``);
        ``collate_s``: seconds the training process spent turning it into the loop's form.

        Only noted here: the notes are added up a few times a second, all at once (see :mod:`.ingest`)."""
        self._notes.append((asked, got, stats, rows, collate_s))
        if got >= self._due:
            self._owner = threading.get_ident()
            self._ingest()
            self._after(got)

    def _ingest(self) -> None:
        """Add up the batches noted since the last time (in the loop's thread)."""
        with self._lock:
            notes, starts = self._notes, self._starts
            if not notes:
                return
            self._notes, self._starts = [], set()
            if self._start is None:
                self._start = notes[0][0]
            made = to_rows(notes, starts, None if 0 in starts else self._last_request, self._start, self._id)
            self._last_request = notes[-1][0]
            self._first += made.firsts
            self._gauges.update(made.gauges)
            for gains in made.streams:
                self._add_streams(gains)
            self._n += len(notes)
            self._window.append(made.arr)
            self._slide(float(made.arr[-1, summary.T]) - self.config.window_s)

    def _id(self, worker: Any) -> int:
        """The number of ``worker`` (a label), new or not."""
        wid = self._ids.get(worker)
        if wid is None:
            wid = self._ids[worker] = len(self._labels)
            self._labels.append(worker)
        return wid

    def _add_streams(self, gains: list) -> None:
        got = np.asarray(gains, np.int64)
        if self._streams is None or len(self._streams) < len(got):
            grown = np.zeros(len(got), np.int64)
            if self._streams is not None:
                grown[:len(self._streams)] = self._streams
            self._streams = grown
        self._streams[:len(got)] += got

    def _slide(self, horizon: float) -> None:
        """Fold into the totals the window's rows older than ``horizon``, or beyond its size (lock held)."""
        window = self._window
        size = sum(len(a) for a in window)
        while window:
            arr = window[0]
            keep = int(np.searchsorted(arr[:, summary.T], horizon, side="left"))
            if size - keep > _WINDOW_MAX:
                keep, self._capped = min(len(arr), size - _WINDOW_MAX), True
            if not keep:
                break
            self._fold(arr[:keep])
            size -= keep
            if keep == len(arr):
                window.pop(0)
            else:
                window[0] = arr[keep:]
                break

    def _window_rows(self) -> np.ndarray:
        """The window's rows in one array (lock held)."""
        window = self._window
        if len(window) > 1:
            window[:] = [np.concatenate(window)]
        return window[0] if window else summary.table([], [])

    def _fold(self, arr: np.ndarray) -> None:
        self._folded = summary.merge(self._folded, summary.partial(arr))
        cols = summary.timeline_columns(arr)[::self._stride]
        self._timeline.append(cols)
        self._timeline_rows += len(cols)
        if self._timeline_rows >= _TIMELINE_MAX:
            kept = np.concatenate(self._timeline)[::2]
            self._timeline, self._timeline_rows = [kept], len(kept)
            self._stride *= 2

    def _after(self, now: float) -> None:
        """Export and check for a stall, when due; the next time the notes are added up."""
        cfg = self.config
        if cfg.exporters and any(now >= due for due in self._next_export):
            report = self.report()
            for k, exp in enumerate(cfg.exporters):
                if now >= self._next_export[k]:
                    self._next_export[k] = now + float(getattr(exp, "every", 10.0))
                    self._export(k, exp, report)
        if cfg.stall_warning is not None and self._n >= max(cfg.warmup_batches, 1) \
                and now - self._start >= cfg.warmup_s \
                and (self._warned_at is None or now - self._warned_at >= cfg.warn_every_s):
            self._check_stall(now)
        self._due = min([now + _EVERY, *self._next_export])

    def _export(self, k: int, exp: Any, report: Report, method: str = "export") -> None:
        """``exp.export(report)`` (or ``exp.close()``); an exporter that raises is logged once and exports
        no more (it is still closed)."""
        if k in self._broken and method == "export":
            return
        try:
            getattr(exp, method)(*(() if method == "close" else (report,)))
        except Exception:
            self._broken.add(k)
            log.error("%s: the stats exporter %r raised in %s(); it is disabled, training goes on",
                      self.loader, exp, method, exc_info=True)

    def _check_stall(self, now: float) -> None:
        with self._lock:
            arr = self._window_rows()
        if not len(arr):
            return
        between = arr[:, summary.BETWEEN]
        steps = ~np.isnan(between)
        spent = float(between[steps].sum())
        if spent <= 0 or float(arr[steps, summary.WAIT].sum()) / spent <= self.config.stall_warning:
            return
        block = self._blocks(now)[0]
        self._warned_at = now
        stage = slowest(block, self.num_workers)
        msg = (f"{self.loader}: the training loop waited for data {block['stall_fraction']:.0%} of the last "
               f"{block['seconds']:.0f} s (median wait {block['wait_s']['p50'] * 1e3:.1f} ms per batch)")
        if stage is not None:
            msg += f"; the slowest stage is {stage}: {advice(stage, self.batch_path, self.workers)}"
        log.warning(msg)
        warnings.warn(msg, LoaderStallWarning, stacklevel=4)

    # -- reading -----------------------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Add up the batches noted so far, if this is the loop's thread (another thread reports what was
        added up, at most a fraction of a second behind)."""
        if self._notes and self._owner in (None, threading.get_ident()):
            self._ingest()

    def _blocks(self, now: float) -> tuple[dict, dict]:
        """The window's block and the totals' block."""
        self._catch_up()
        with self._lock:
            window_rows = self._window_rows()
            folded, capped, labels = self._folded, self._capped, list(self._labels)
        elapsed = (now - self._start) if self._start is not None else 0.0
        window = summary.partial(window_rows, exact=True)
        total = summary.merge(folded, window)
        span = min(self.config.window_s, elapsed)
        if capped and len(window_rows):
            span = min(span, elapsed - float(window_rows[0, summary.T]))
        return summary.block(window, span, labels), summary.block(total, elapsed, labels)

    def report(self) -> Report:
        """The stats as a dict (see docs/observability.md): a sliding window and since the start."""
        now = perf_counter()
        window, total = self._blocks(now)
        start = self._start if self._start is not None else now
        with self._lock:
            gauges = list(self._gauges.values())
            streams = None if self._streams is None else self._streams.copy()
            first = list(self._first)
        stage = slowest(window, self.num_workers) or slowest(total, self.num_workers)
        stalled = self.config.stall_warning is not None and window["stall_fraction"] > self.config.stall_warning
        return Report({
            "loader": self.loader, "rank": getattr(self.world, "rank", 0),
            "world_size": getattr(self.world, "world_size", 1), "node": getattr(self.world, "node", 0),
            "num_workers": self.num_workers, "elapsed_s": now - start,
            "first_batch_s": first[-1] if first else None, "window_s": self.config.window_s,
            "window": window, "total": total,
            "shards_in_flight": int(sum(g[0] for g in gauges)),
            "prefetch_depth": int(sum(g[1] for g in gauges)),
            "streams": self._stream_targets(streams), "slowest_stage": stage, "stalled": bool(stalled),
            "advice": advice(stage, self.batch_path, self.workers),
        })

    def _stream_targets(self, delivered: Optional[np.ndarray]) -> Optional[dict]:
        got = self.targets() if self.targets is not None else None
        if got is None:
            return None
        names, weights = got
        counts = np.zeros(len(names), np.int64)
        if delivered is not None:
            counts[:min(len(names), len(delivered))] = delivered[:len(names)]
        total = int(counts.sum())
        return {name: {"delivered": int(c), "target": float(w) * total}
                for name, c, w in zip(names, counts.tolist(), weights)}

    def timeline(self) -> dict[str, np.ndarray]:
        """Per batch (every batch, or every 2**k-th after very long runs): arrival time since the first
        request, loop wait, time since the previous request (NaN for a pass's first), rows, and each
        critical stage's seconds."""
        self._catch_up()
        with self._lock:
            parts = list(self._timeline)
            recent = summary.timeline_columns(self._window_rows())
        parts.append(recent[::self._stride])
        arr = np.concatenate(parts) if parts else np.zeros((0, 4 + len(summary.CRITICAL)))
        names = ("t", "wait", "between", "rows", *summary.CRITICAL)
        return {name: arr[:, k].copy() for k, name in enumerate(names)}

    def close(self) -> None:
        """Export a last time and close the exporters (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        if self._start is not None and self.config.exporters:
            report = self.report()
            for k, exp in enumerate(self.config.exporters):
                self._export(k, exp, report)
        for k, exp in enumerate(self.config.exporters):
            if getattr(exp, "close", None) is not None:
                self._export(k, exp, None, "close")
