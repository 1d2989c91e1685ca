"""``TensorBoardExporter``: loader stats as TensorBoard scalars.

Written with the ``tensorboard`` package's own event-file writer (the one PyTorch's
``SummaryWriter`` wraps), so neither TensorFlow nor PyTorch is needed: install
``shardstream[tensorboard]``. A training script that already has a writer (PyTorch's
``SummaryWriter``, tensorboardX's, anything with ``add_scalar(tag, value, global_step)``)
passes it as ``writer=`` instead, and the loader's curves land next to its loss.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Optional, Union

from ..errors import InvalidArgumentError, require
from .exporters_common import check_every, scalars


class _EventFile:
    """Scalars into a new event file of ``log_dir`` through tensorboard's ``EventFileWriter``."""

    def __init__(self, log_dir: str) -> None:
        require("tensorboard", "tensorboard", "TensorBoardExporter(log_dir=...)")
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._pb, self._summary = event_pb2, summary_pb2
        self._writer = EventFileWriter(log_dir, filename_suffix=".shardstream")

    def add_scalars(self, values: dict[str, float], step: int, wall_time: float) -> None:
        summary = self._summary.Summary(value=[self._summary.Summary.Value(tag=tag, simple_value=v)
                                               for tag, v in values.items()])
        self._writer.add_event(self._pb.Event(summary=summary, step=step, wall_time=wall_time))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class _Given:
    """Scalars through a writer the caller owns (``add_scalar(tag, value, global_step)``); closing flushes it."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    def add_scalars(self, values: dict[str, float], step: int, wall_time: float) -> None:
        for tag, v in values.items():
            self._writer.add_scalar(tag, v, step)

    def close(self) -> None:
        flush = getattr(self._writer, "flush", None)
        if flush is not None:
            flush()


class TensorBoardExporter:
    """Each export writes the report's scalars (see :func:`~shardstream.stats.exporters_common.scalars`)
    under ``prefix``, at the global step of the batches handed to the loop so far: samples/s and
    batches/s, the stall fraction, the loop's wait p50/p95/max (seconds) and each stage's seconds, over
    the stats window; bytes fetched, cache hits, misses and evictions, and per stream the samples
    delivered and the schedule's target, since the start.

    Give exactly one of ``log_dir`` (a new event file there, created if missing; needs
    ``shardstream[tensorboard]``) and ``writer`` (an object with ``add_scalar(tag, value, global_step)``,
    such as ``torch.utils.tensorboard.SummaryWriter``; ``close()`` flushes it and leaves it open)."""

    def __init__(self, log_dir: Union[str, os.PathLike, None] = None, every: float = 10.0,
                 prefix: str = "shardstream/", *, writer: Any = None) -> None:
        self.every = check_every(every, "TensorBoardExporter")
        if not isinstance(prefix, str):
            raise InvalidArgumentError(f"TensorBoardExporter(prefix={prefix!r}): prefix must be a str")
        if (log_dir is None) == (writer is None):
            raise InvalidArgumentError(
                f"TensorBoardExporter(log_dir={log_dir!r}, writer={writer!r}): give exactly one of them, a "
                "directory for a new event file or a writer of your own with add_scalar(tag, value, global_step)")
        if writer is not None and not callable(getattr(writer, "add_scalar", None)):
            raise InvalidArgumentError(
                f"TensorBoardExporter(writer={writer!r}): the writer has no add_scalar(tag, value, global_step); "
                "pass a torch.utils.tensorboard.SummaryWriter (or alike), or log_dir=... instead")
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise InvalidArgumentError(f"TensorBoardExporter(log_dir={log_dir!r}): log_dir must be a directory path")
        self.prefix = prefix
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self._out: Optional[Any] = _EventFile(self.log_dir) if writer is None else _Given(writer)
        self._lock = threading.Lock()

    def export(self, report: dict) -> None:
        values = {self.prefix + k: v for k, v in scalars(report).items()}
        with self._lock:
            if self._out is not None:
                self._out.add_scalars(values, int(report["total"]["batches"]), time.time())

    def close(self) -> None:
        """Flush and close the event file (a writer given as ``writer=`` is flushed and left open)."""
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None
