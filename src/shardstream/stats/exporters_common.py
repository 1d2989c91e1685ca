"""What the stats exporters share: checking ``every``, a report's headline figures, and its scalars.

A report (see :mod:`.report`) has a sliding-window block and a since-start block. Exporters
take rates, waits, the stall fraction and stage seconds from the window (what the loader
does now) and counts from the start (bytes fetched, cache hits, misses and evictions,
samples per stream), which only grow, so that they read as counters.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgumentError
from .report import STAGES

#: Counts of a report's since-start block that only grow.
COUNTS = ("batches", "samples", "bytes_fetched", "files_fetched", "cache_hits", "cache_misses", "evictions")


def check_every(every: Any, name: str) -> float:
    """``every`` as seconds between exports, or a typed error naming ``name``'s argument."""
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= 0 or math.isinf(every):
        raise InvalidArgumentError(
            f"{name}(every={every!r}): every must be the seconds between exports, a finite number >= 0 "
            "(0 exports after every batch)")
    return float(every)


def headline(report: dict) -> str:
    """One compact line: samples/s, stall fraction, wait p95 and the slowest stage, over the window."""
    w = report["window"]
    line = (f"{report['loader']} rank {report['rank']}/{report['world_size']}: "
            f"{w['samples_per_s']:,.1f} samples/s, {w['batches_per_s']:,.2f} batches/s, "
            f"stall {w['stall_fraction']:.1%}, wait p95 {w['wait_s']['p95'] * 1e3:.1f} ms, "
            f"slowest stage {report.get('slowest_stage') or '-'}")
    if report.get("stalled") and report.get("advice"):
        line += f" (stalled: {report['advice']})"
    return line


def scalars(report: dict) -> dict[str, float]:
    """The report's figures as flat ``name: value`` pairs (names without a prefix): window rates, waits,
    stall fraction and stage seconds; since-start counts; per-stream samples delivered (mixtures)."""
    w, t = report["window"], report["total"]
    out = {
        "samples_per_s": w["samples_per_s"], "batches_per_s": w["batches_per_s"],
        "stall_fraction": w["stall_fraction"],
        "wait_p50_s": w["wait_s"]["p50"], "wait_p95_s": w["wait_s"]["p95"], "wait_max_s": w["wait_s"]["max"],
        "shards_in_flight": report.get("shards_in_flight", 0), "prefetch_depth": report.get("prefetch_depth", 0),
    }
    for stage in STAGES:
        out[f"stage_s/{stage}"] = w["stages"][stage]
    for name in COUNTS:
        out[name] = t[name]
    for name, s in (report.get("streams") or {}).items():
        out[f"stream_delivered/{name}"] = s["delivered"]
        out[f"stream_target/{name}"] = s["target"]
    return {k: float(v) for k, v in out.items()}


def plain(value: Any) -> Any:
    """``value`` with numpy scalars turned into Python numbers and non-finite floats into None (JSON)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (str, bytes)) and getattr(value, "shape", None) == ():
        value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
