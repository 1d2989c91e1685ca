"""Loader stats as a plain dict: the slowest stage, what to turn, and the table a report prints as.

The report's blocks are sums of batch records (see :mod:`.summary`); :class:`Report` is the dict,
:func:`render` its table.
"""

from __future__ import annotations

from typing import Optional

from .summary import BACKGROUND, CRITICAL, STAGES

__all__ = ["BACKGROUND", "CRITICAL", "STAGES", "KNOBS", "advice", "slowest", "Report", "render"]

KNOBS = {
    "download_wait": "shards arrive too late: raise predownload (samples downloaded ahead) or download_threads, "
                     "and check that cache_limit holds the shards in use (evictions force downloads again)",
    "decode": "decoding is the bottleneck: {more_workers}{batch_path}",
    "transform": "the transforms / map functions are the bottleneck: {more_workers} (they run where batches are "
                 "made), or make them cheaper",
    "collate": "collation is the bottleneck: use the batch path (batch_decode=True, no per-sample collate_fn) "
               "or a cheaper collate_fn",
    "transfer": "moving batches from the workers to the training process is the bottleneck: keep the batch path "
                "on (column arrays cross without per-sample objects), decode fewer columns (columns=...), or "
                "use fewer, larger batches",
}


def advice(stage: Optional[str], batch_path: Optional[bool], workers: bool = True) -> Optional[str]:
    """What to turn when ``stage`` is the slowest (``batch_path``: whether the loader uses it; None: n/a;
    ``workers``: whether the loader takes ``num_workers``, else it makes batches in one thread)."""
    if stage is None:
        return None
    hint = ", or turn the batch path on (batch_decode=True)" if batch_path is False else ""
    more = ("raise num_workers" if workers else
            "this loader makes batches in one background thread; StreamingDataLoader(..., num_workers=N) makes "
            "them in N processes")
    return KNOBS[stage].format(batch_path=hint, more_workers=more)


#: Critical stages done by the training process itself (the others run in each worker, side by side).
IN_LOOP = ("transfer",)


def slowest(block: dict, workers: int = 0) -> Optional[str]:
    """The critical stage that costs the loop most in ``block`` (None when nothing was timed): a workers'
    stage counts its seconds over the ``workers`` making batches side by side."""
    stages = block["stages"]
    side = max(workers, 1)
    cost = {s: stages[s] if s in IN_LOOP else stages[s] / side for s in CRITICAL}
    name = max(CRITICAL, key=cost.__getitem__)
    return name if cost[name] > 0 else None


class Report(dict):
    """Loader stats: a plain dict (see docs/observability.md for its keys) that prints as a table."""

    def __str__(self) -> str:
        return render(self)


def _ms(s: Optional[float]) -> str:
    return "-" if s is None else f"{s * 1e3:.1f} ms"


def render(r: dict) -> str:
    """A readable table of a report."""
    lines = [f"{r['loader']} rank {r['rank']}/{r['world_size']}, {r['num_workers']} workers, "
             f"{r['elapsed_s']:.1f} s since the first request (first batch after {_ms(r['first_batch_s'])})"]
    head = f"{'':<22}{'window (' + format(r['window']['seconds'], '.1f') + ' s)':>18}{'since start':>18}"
    lines.append(head)
    w, t = r["window"], r["total"]

    def row(label, a, b):
        lines.append(f"{label:<22}{a:>18}{b:>18}")

    row("batches", f"{w['batches']:,}", f"{t['batches']:,}")
    row("samples/s", f"{w['samples_per_s']:,.1f}", f"{t['samples_per_s']:,.1f}")
    row("batches/s", f"{w['batches_per_s']:,.2f}", f"{t['batches_per_s']:,.2f}")
    for q in ("p50", "p95", "max"):
        row(f"loop wait {q}", _ms(w["wait_s"][q]), _ms(t["wait_s"][q]))
    row("time between requests", _ms(w["step_s"]["mean"]), _ms(t["step_s"]["mean"]))
    row("stall fraction", f"{w['stall_fraction']:.1%}", f"{t['stall_fraction']:.1%}")
    lines.append("stage seconds (all workers; download and decompress run ahead, in the background):")
    for stage in STAGES:
        row(f"  {stage}", f"{w['stages'][stage]:.3f}", f"{t['stages'][stage]:.3f}")
    row("bytes fetched", f"{w['bytes_fetched']:,}", f"{t['bytes_fetched']:,}")
    row("cache hits/misses", f"{w['cache_hits']}/{w['cache_misses']}", f"{t['cache_hits']}/{t['cache_misses']}")
    row("evictions", f"{w['evictions']}", f"{t['evictions']}")
    lines.append(f"shards in flight {r['shards_in_flight']}, prefetched samples {r['prefetch_depth']}")
    if r.get("streams"):
        lines.append("streams (delivered / target):")
        for name, s in r["streams"].items():
            lines.append(f"  {name}: {s['delivered']:,} / {s['target']:,.1f}")
    if r.get("slowest_stage"):
        lines.append(f"slowest stage: {r['slowest_stage']}" + (f" ({r['advice']})" if r.get("stalled") else ""))
    return "\n".join(lines)
