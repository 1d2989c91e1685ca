"""Stats exporters: where a loader's stats go while it runs, without anyone calling ``loader.stats()``.

Give a loader ``stats=[exporter, ...]`` (or ``StatsConfig(exporters=...)``); the training
process calls each exporter's ``export(report)`` every ``exporter.every`` seconds, as batches
reach the loop, and a last time and ``close()`` when the loader's stats are closed
(``loader.close_stats()``). An exporter that raises is logged once and left out from then on:
an exporter never breaks training.

- :class:`LoggingExporter`: one line through :mod:`logging`.
- :class:`JsonLinesExporter`: the whole report as one JSON object per line of a file.
- :class:`TensorBoardExporter`: scalars in a TensorBoard event file (``shardstream[tensorboard]``).
- :class:`PrometheusExporter`: gauges and counters on an HTTP endpoint (``shardstream[prometheus]``).

Any object with ``export(report)`` (and optionally ``every`` and ``close()``) is an exporter too.
See docs/stats-exporters.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Optional, Union

from ..errors import ExportPathError, InvalidArgumentError
from .exporters_common import check_every, headline, plain
from .exporters_prometheus import PrometheusExporter
from .exporters_tensorboard import TensorBoardExporter

__all__ = ["LoggingExporter", "JsonLinesExporter", "TensorBoardExporter", "PrometheusExporter"]


class LoggingExporter:
    """One line per export through :mod:`logging`: samples/s, batches/s, stall fraction, the loop's wait
    p95 and the slowest stage, over the stats window (and the advice when the loop stalls).

    ``logger``: a :class:`logging.Logger` or a logger's name (default ``"shardstream.stats"``);
    ``level``: the records' level."""

    def __init__(self, every: float = 60.0, logger: Union[logging.Logger, str, None] = None,
                 level: int = logging.INFO) -> None:
        self.every = check_every(every, "LoggingExporter")
        if logger is None or isinstance(logger, str):
            logger = logging.getLogger(logger or "shardstream.stats")
        elif not isinstance(logger, logging.Logger):
            raise InvalidArgumentError(
                f"LoggingExporter(logger={logger!r}): logger must be a logging.Logger, a logger's name or None")
        if isinstance(level, bool) or not isinstance(level, int):
            raise InvalidArgumentError(
                f"LoggingExporter(level={level!r}): level must be a logging level such as logging.INFO")
        self.logger = logger
        self.level = level

    def export(self, report: dict) -> None:
        self.logger.log(self.level, "%s", headline(report))


class JsonLinesExporter:
    """Each export appends the whole report (see docs/observability.md for its keys) as one JSON object on
    one line of ``path``, with ``time``: the wall clock (seconds since the epoch). Each line is flushed
    as it is written; the file is opened in append mode, so reruns add to it. Numbers that are not
    finite are written as ``null``."""

    def __init__(self, path: Union[str, os.PathLike], every: float = 10.0) -> None:
        self.every = check_every(every, "JsonLinesExporter")
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"JsonLinesExporter(path={path!r}): path must be a file path")
        self.path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise ExportPathError(
                f"JsonLinesExporter(path={self.path!r}): the directory {folder!r} does not exist; "
                "create it first (os.makedirs(folder, exist_ok=True)) or choose a path in an existing one")
        self._lock = threading.Lock()
        self._file: Optional[object] = open(self.path, "a", encoding="utf-8")

    def export(self, report: dict) -> None:
        line = json.dumps({"time": time.time(), **plain(dict(report))}, allow_nan=False)
        with self._lock:
            if self._file is None:
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file (later exports write nothing)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
