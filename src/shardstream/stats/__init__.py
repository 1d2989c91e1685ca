"""Where a loader's time goes: ``loader.stats()``, stall warnings, exporters, and rank summaries.

Build any loader with ``stats=True`` (or a list of exporters, or a :class:`StatsConfig`;
``SHARDSTREAM_STATS=1`` turns stats on for loaders built without the keyword) and call
``loader.stats()``: a plain dict, printed as a table, of batches and samples per second, the
time the training loop waited for each batch against the time between its requests (the
stall fraction), and where the workers spent their time, over a sliding window and since the
start. See docs/observability.md. Exporters (:mod:`.exporters`) send the stats to logging, a
JSON Lines file, TensorBoard or Prometheus while the loader runs; :func:`rank_summary`,
:func:`gather` and :func:`summary` compare the ranks of a job and name the straggler (see
docs/stats-exporters.md).
"""

from __future__ import annotations

from .config import StatsConfig
from .loop import LoaderStallWarning, LoopStats
from .ranks import gather, rank_summary, summary
from .report import Report

__all__ = ["StatsConfig", "LoaderStallWarning", "LoopStats", "Report", "gather", "rank_summary", "summary"]
