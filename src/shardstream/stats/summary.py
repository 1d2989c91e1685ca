"""Adding batch records up, a block of them at a time, with numpy.

The training process keeps each batch as one short tuple: when it arrived, the loop's wait, the
time since the loop's previous request (NaN for a pass's first batch), its rows, its worker's
number, its make seconds, the transfer and training-process collate seconds, and the gains of its
worker's counters (a list in :data:`.record.SLOTS` order, kept apart and only for the batches that
gained some); :func:`table` makes an array of :data:`COLUMNS` columns of them. Rows are added up in blocks by
:func:`partial` into sums that :func:`merge` combines, and :func:`block` turns into the dict of a
report's ``window`` or ``total``. Nothing here runs per batch.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .record import COUNTED, SLOT, SLOTS

#: Stages on a batch's way to the loop, in order; the slowest of them is the one to blame for waits.
CRITICAL = ("download_wait", "decode", "transform", "collate", "transfer")
#: Stages done in the background of the workers (downloading and preparing shards ahead).
BACKGROUND = ("download", "decompress")
STAGES = CRITICAL + BACKGROUND

T, WAIT, BETWEEN, ROWS, WID, MAKE, TRANSFER, MAIN_COLLATE = range(8)
GAINS = 8
COLUMNS = 8 + len(SLOTS)

# Log-spaced buckets for the wait percentiles since the start (1 us .. 1000 s, 20 per decade).
EDGES = 10.0 ** np.arange(-6.0, 3.0001, 0.05)


def _gain(arr: np.ndarray, name: str) -> np.ndarray:
    return arr[:, GAINS + SLOT[name]]


def stage_seconds(arr: np.ndarray) -> dict[str, np.ndarray]:
    """Each stage's seconds per row of ``arr``; ``decode`` is the make time the other worker stages leave."""
    worker_collate = _gain(arr, "collate")
    dw, transform = _gain(arr, "download_wait"), _gain(arr, "transform")
    return {
        "download_wait": dw,
        "decode": np.maximum(arr[:, MAKE] - dw - transform - worker_collate, 0.0),
        "transform": transform,
        "collate": worker_collate + arr[:, MAIN_COLLATE],
        "transfer": arr[:, TRANSFER],
        "download": _gain(arr, "download"),
        "decompress": _gain(arr, "decompress"),
    }


def buckets(waits: np.ndarray) -> np.ndarray:
    """Counts of ``waits`` per bucket: bucket 0 below a microsecond, bucket k ``EDGES[k-1] <= w < EDGES[k]``."""
    k = np.zeros(len(waits), np.int64)
    big = waits >= 1e-6
    k[big] = np.minimum((np.log10(waits[big]) + 6.0) * 20.0 + 1, len(EDGES)).astype(np.int64)
    return np.bincount(k, minlength=len(EDGES) + 1)


def table(rows: list, gains: list) -> np.ndarray:
    """The batch tuples ``rows`` (see the module docstring) as an array of :data:`COLUMNS` columns;
    ``gains``: ``(row, its counter gains)`` for the rows that gained some (the others gained nothing)."""
    arr = np.zeros((len(rows), COLUMNS), np.float64)
    if rows:
        arr[:, :GAINS] = rows
    for i, g in gains:
        arr[i, GAINS:] = g
    return arr


def partial(arr: np.ndarray, exact: bool = False) -> dict[str, Any]:
    """The sums of the batch rows ``arr`` (see :func:`table`); ``exact`` keeps the waits and steps
    themselves (for exact percentiles of a window)."""
    wait, between = arr[:, WAIT], arr[:, BETWEEN]
    steps = ~np.isnan(between)
    stages = stage_seconds(arr)
    workers = {}
    wids = arr[:, WID].astype(np.int64)
    for wid in np.unique(wids).tolist():
        mine = wids == wid
        workers[wid] = np.array([mine.sum(), arr[mine, MAKE].sum(), *(stages[s][mine].sum() for s in STAGES)])
    return {
        "batches": len(arr), "samples": int(arr[:, ROWS].sum()), "wait": float(wait.sum()),
        "max_wait": float(wait.max()) if len(arr) else 0.0, "steps": int(steps.sum()),
        "between": float(between[steps].sum()), "timed_wait": float(wait[steps].sum()),
        "hist": buckets(wait), "workers": workers,
        "counts": arr[:, GAINS + len(SLOTS) - len(COUNTED):].sum(axis=0),
        "waits": wait if exact else None, "step_list": between[steps] if exact else None,
    }


def merge(a: Optional[dict], b: dict) -> dict:
    """The sums of two blocks of rows (the kept waits are dropped)."""
    if a is None:
        return {**b, "waits": None, "step_list": None}
    workers = dict(a["workers"])
    for wid, sums in b["workers"].items():
        workers[wid] = workers[wid] + sums if wid in workers else sums
    return {
        "batches": a["batches"] + b["batches"], "samples": a["samples"] + b["samples"],
        "wait": a["wait"] + b["wait"], "max_wait": max(a["max_wait"], b["max_wait"]),
        "steps": a["steps"] + b["steps"], "between": a["between"] + b["between"],
        "timed_wait": a["timed_wait"] + b["timed_wait"], "hist": a["hist"] + b["hist"], "workers": workers,
        "counts": a["counts"] + b["counts"], "waits": None, "step_list": None,
    }


def _percentile(p: dict, q: float) -> float:
    if p["waits"] is not None:
        return float(np.percentile(p["waits"], q)) if len(p["waits"]) else 0.0
    hist = p["hist"]
    total = int(hist.sum())
    if not total:
        return 0.0
    k = int(np.searchsorted(np.cumsum(hist), q / 100.0 * total))
    if k == 0:
        return 0.0
    return float(min(EDGES[min(k, len(EDGES) - 1)], p["max_wait"]))


def block(p: Optional[dict], seconds: float, labels: list) -> dict[str, Any]:
    """The sums ``p`` as a report block over ``seconds`` of wall time; ``labels``: worker names by number."""
    p = p if p is not None else partial(table([], []), exact=True)
    seconds = max(seconds, 1e-9)
    stages = dict.fromkeys(STAGES, 0.0)
    per_worker = {}
    for wid, sums in sorted(p["workers"].items(), key=lambda kv: str(labels[kv[0]])):
        values = sums.tolist()
        for stage, s in zip(STAGES, values[2:]):
            stages[stage] += s
        per_worker[str(labels[wid])] = {"batches": int(values[0]), "make_s": values[1],
                                        **{f"{s}_s": v for s, v in zip(STAGES, values[2:])}}
    steps = p["step_list"]
    n = p["batches"]
    return {
        "batches": n, "samples": int(p["samples"]), "seconds": seconds,
        "batches_per_s": n / seconds, "samples_per_s": p["samples"] / seconds,
        "wait_s": {"p50": _percentile(p, 50), "p95": _percentile(p, 95), "max": p["max_wait"],
                   "mean": p["wait"] / n if n else 0.0, "total": p["wait"]},
        "step_s": {"p50": (float(np.median(steps)) if len(steps) else 0.0) if steps is not None else None,
                   "mean": p["between"] / p["steps"] if p["steps"] else 0.0},
        "stall_fraction": p["timed_wait"] / p["between"] if p["between"] > 0 else 0.0,
        "stages": stages, "per_worker": per_worker,
        **{name: int(c) for name, c in zip(COUNTED, p["counts"].tolist())},
    }


def timeline_columns(arr: np.ndarray) -> np.ndarray:
    """The batch rows ``arr`` as the timeline's columns: t, wait, between, rows, then each critical stage's
    seconds."""
    stages = stage_seconds(arr)
    return np.column_stack([arr[:, T], arr[:, WAIT], arr[:, BETWEEN], arr[:, ROWS],
                            *(stages[s] for s in CRITICAL)]) if len(arr) else np.zeros((0, 4 + len(CRITICAL)))
