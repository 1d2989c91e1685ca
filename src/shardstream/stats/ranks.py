"""Loader stats across the ranks of a job: per-rank summaries, their totals, and the straggler.

Each rank makes a small plain dict with :func:`rank_summary`; the job gathers them the way
it gathers anything (``torch.distributed.all_gather_object``, ``jax.experimental.
multihost_utils.process_allgather`` of a JSON string, files on a shared disk: shardstream
starts no process group); :func:`gather` turns the list into per-rank figures, totals, the
straggler and, for mixtures, each stream's samples against the schedule's target, and
:func:`summary` prints that as a table.

The straggler is the rank the others wait for. Two cases tell it apart:

- ranks that do not step together (they meet only at collectives now and then): the rank
  whose loop takes longest per batch is the one the others wait for. If its own loop is slow
  it waits *least* for data while the others, with nothing else to do, wait for theirs; if
  its input is slow it waits most;
- ranks that step together (a collective every step: the same time per batch everywhere):
  a rank whose input is slower waits for data more than the others, which wait for it in
  their collectives, where the loader cannot see it; it is the one that waits *most*.

A straggler is named only when the spread is meaningful (module constants below); the
``straggler_reason`` says why, or why none was named.
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

from ..errors import InvalidArgumentError

#: Ranks do not step together when the slowest's time per batch is this many times the others' median.
STEP_SPREAD = 1.25
#: Ranks stepping together: the most-waiting rank is a straggler when it waits this many times the least.
STALL_RATIO = 2.0
#: ... and for more than this fraction of its time.
STALL_MIN = 0.05

_KEYS = ("rank", "samples_per_s", "step_s", "stall_fraction", "wait_p50_s", "wait_p95_s", "slowest_stage",
         "batches", "samples")


def rank_summary(source: Any) -> dict:
    """This rank's figures to gather: a plain dict of numbers and strings (picklable, JSON-able).

    ``source``: a loader with stats on, or a report (``loader.stats()``). Rates, waits and the time per
    batch come from the stats window (what the loader does now); batches, samples and per-stream counts
    from the start."""
    report = source.stats() if callable(getattr(source, "stats", None)) else source
    if not isinstance(report, dict) or "window" not in report or "total" not in report:
        raise InvalidArgumentError(
            f"rank_summary() takes a loader built with stats=True or its stats() report, got {type(source).__name__}")
    w, t = report["window"], report["total"]
    streams = report.get("streams")
    return {
        "rank": int(report["rank"]), "world_size": int(report["world_size"]), "node": int(report.get("node", 0)),
        "loader": str(report["loader"]), "batches": int(t["batches"]), "samples": int(t["samples"]),
        "samples_per_s": float(w["samples_per_s"]), "step_s": float(w["step_s"]["mean"]),
        "stall_fraction": float(w["stall_fraction"]), "wait_p50_s": float(w["wait_s"]["p50"]),
        "wait_p95_s": float(w["wait_s"]["p95"]), "slowest_stage": report.get("slowest_stage"),
        "streams": None if not streams else {str(k): {"delivered": int(v["delivered"]), "target": float(v["target"])}
                                             for k, v in streams.items()},
    }


def _checked(reports: Any) -> list[dict]:
    if isinstance(reports, dict) or not isinstance(reports, (list, tuple)) or not reports:
        raise InvalidArgumentError(
            f"gather() takes a non-empty list of rank_summary() dicts (one per rank), got {reports!r:.200}")
    out = []
    for k, r in enumerate(reports):
        if isinstance(r, dict) and "window" in r:  # a whole report
            r = rank_summary(r)
        missing = [key for key in _KEYS if not isinstance(r, dict) or key not in r]
        if missing:
            raise InvalidArgumentError(
                f"gather(): item {k} is not a rank_summary() dict (missing {missing}); gather the dicts that "
                "shardstream.stats.rank_summary(loader) returns on each rank")
        out.append(r)
    ranks = [r["rank"] for r in out]
    if len(set(ranks)) != len(ranks):
        raise InvalidArgumentError(f"gather(): ranks {sorted(ranks)} repeat; gather one summary per rank")
    return sorted(out, key=lambda r: r["rank"])


def gather(reports: list) -> dict:
    """Per-rank figures, totals, the straggler (see the module docstring) and per-stream counts of the
    ``rank_summary()`` dicts of every rank (whole ``stats()`` reports are taken too). A plain dict:
    ``ranks`` {rank: figures}, ``total``, ``straggler`` (a rank or None), ``straggler_reason``, ``streams``
    ({name: {delivered, target}} summed over ranks, or None)."""
    rows = _checked(reports)
    per_rank = {r["rank"]: {k: r[k] for k in _KEYS if k != "rank"} for r in rows}
    stalls = [r["stall_fraction"] for r in rows]
    total = {
        "ranks": len(rows), "batches": sum(r["batches"] for r in rows), "samples": sum(r["samples"] for r in rows),
        "samples_per_s": sum(r["samples_per_s"] for r in rows),
        "stall_fraction_mean": sum(stalls) / len(stalls), "stall_fraction_max": max(stalls),
        "wait_p95_s_max": max(r["wait_p95_s"] for r in rows),
    }
    straggler, reason = _straggler(rows)
    return {"ranks": per_rank, "total": total, "straggler": straggler, "straggler_reason": reason,
            "streams": _streams(rows)}


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def _input_or_loop(r: dict, rows: list[dict]) -> str:
    """Why rank ``r`` is slow: its input (it waits for data most) or its own loop (it waits least)."""
    others = [x["stall_fraction"] for x in rows if x is not r]
    if r["stall_fraction"] >= STALL_MIN and r["stall_fraction"] >= max(others):
        return (f"it waits for data {r['stall_fraction']:.0%} of its time, the most of all ranks: its input is "
                f"slow (slowest stage: {r['slowest_stage'] or '-'})")
    return (f"it waits for data {r['stall_fraction']:.0%} of its time against up to {max(others):.0%} on the "
            "others: its own loop (compute, or work outside the loader) is slow, not its input")


def _straggler(rows: list[dict]) -> tuple[Optional[int], str]:
    if len(rows) < 2:
        return None, "one rank: nobody to wait for"
    if any(r["batches"] < 2 or r["step_s"] <= 0 for r in rows):
        return None, "a rank has handed out fewer than 2 batches: no time per batch to compare yet"
    slow = max(rows, key=lambda r: r["step_s"])
    median = statistics.median(r["step_s"] for r in rows if r is not slow)
    if slow["step_s"] > STEP_SPREAD * median:
        return slow["rank"], (f"rank {slow['rank']} takes {_ms(slow['step_s'])} per batch against "
                              f"{_ms(median)} on the other ranks (median), so they wait for it; "
                              + _input_or_loop(slow, rows))
    most = max(rows, key=lambda r: r["stall_fraction"])
    least = min(rows, key=lambda r: r["stall_fraction"])
    if most["stall_fraction"] > STALL_RATIO * least["stall_fraction"] and most["stall_fraction"] > STALL_MIN:
        return most["rank"], (
            f"the ranks step together ({_ms(median)} per batch) and rank {most['rank']} waits for data "
            f"{most['stall_fraction']:.0%} of its time against {least['stall_fraction']:.0%} on rank "
            f"{least['rank']}: the others wait for its input in their collectives (slowest stage: "
            f"{most['slowest_stage'] or '-'})")
    return None, (f"the ranks keep pace: {_ms(min(r['step_s'] for r in rows))} to {_ms(slow['step_s'])} per batch, "
                  f"waiting for data {least['stall_fraction']:.0%} to {most['stall_fraction']:.0%} of the time")


def _streams(rows: list[dict]) -> Optional[dict]:
    out: dict = {}
    for r in rows:
        for name, s in (r.get("streams") or {}).items():
            got = out.setdefault(name, {"delivered": 0, "target": 0.0})
            got["delivered"] += int(s["delivered"])
            got["target"] += float(s["target"])
    return out or None


def summary(gathered: dict) -> str:
    """A readable table of :func:`gather`'s result."""
    if not isinstance(gathered, dict) or "ranks" not in gathered:
        raise InvalidArgumentError(f"summary() takes what gather() returns, got {type(gathered).__name__}")
    head = f"{'rank':>5}{'samples/s':>12}{'per batch':>12}{'stall':>8}{'wait p50':>11}{'wait p95':>11}  slowest stage"
    lines = [head]
    for rank, r in gathered["ranks"].items():
        mark = " *" if rank == gathered["straggler"] else ""
        lines.append(f"{rank:>5}{r['samples_per_s']:>12,.1f}{_ms(r['step_s']):>12}{r['stall_fraction']:>8.1%}"
                     f"{_ms(r['wait_p50_s']):>11}{_ms(r['wait_p95_s']):>11}  {r['slowest_stage'] or '-'}{mark}")
    t = gathered["total"]
    lines.append(f"{'all':>5}{t['samples_per_s']:>12,.1f}{'':>12}{t['stall_fraction_mean']:>8.1%}"
                 f"{'':>11}{_ms(t['wait_p95_s_max']):>11}  ({t['samples']:,} samples, {t['batches']:,} batches)")
    if gathered["straggler"] is not None:
        lines.append(f"straggler: rank {gathered['straggler']}: {gathered['straggler_reason']}")
    else:
        lines.append(f"no straggler: {gathered['straggler_reason']}")
    if gathered.get("streams"):
        lines.append("streams (delivered / target, all ranks):")
        for name, s in gathered["streams"].items():
            lines.append(f"  {name}: {s['delivered']:,} / {s['target']:,.1f}")
    return "\n".join(lines)
