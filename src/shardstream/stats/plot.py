"""A loader's timeline as a PNG: batches delivered against the loop's waits, stage time, throughput.

:func:`plot_timeline` draws ``loader.stats_timeline()`` (per batch: arrival time, loop wait,
rows, critical stage seconds) with matplotlib, an optional dependency (``shardstream[plot]``),
on its own figure (no pyplot, so no global state of the caller's plots changes).
``shardstream profile --plot out.png`` calls it.
"""

from __future__ import annotations

import os
import textwrap
from typing import Optional

import numpy as np

from ..errors import InvalidArgumentError, MissingDependencyError
from .report import CRITICAL

BINS = 40  # time bins of the stage and throughput panels


def _figure():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(
            "plotting a loader's timeline needs matplotlib; install it with: pip install 'shardstream[plot]'"
        ) from None
    fig = Figure(figsize=(10, 10), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _check(timeline: dict) -> int:
    missing = [k for k in ("t", "wait", "rows", *CRITICAL) if k not in timeline]
    if missing:
        raise InvalidArgumentError(
            f"the timeline has no {', '.join(missing)}; pass loader.stats_timeline() (keys t, wait, between, rows "
            f"and {', '.join(CRITICAL)})")
    n = len(timeline["t"])
    if any(len(timeline[k]) != n for k in ("wait", "rows", *CRITICAL)):
        raise InvalidArgumentError("the timeline's arrays have different lengths; pass loader.stats_timeline()")
    return n


def time_bins(t: np.ndarray, bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, bin of each batch)``: ``bins`` equal bins from 0 to the last arrival (at least one)."""
    end = float(t.max()) if len(t) else 1.0
    edges = np.linspace(0.0, max(end, 1e-6), max(1, min(bins, len(t))) + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    return edges, which


def plot_timeline(timeline: dict, report: Optional[dict], path: str, title: Optional[str] = None) -> str:
    """Draw ``timeline`` (``loader.stats_timeline()``) into the PNG ``path``; ``report``
    (``loader.stats()``, or None) adds the loader and world to the title, ``title`` (e.g. the verdict)
    heads the figure. Three panels: batches delivered over time with each batch's loop wait, stage
    seconds per time bin (stacked), and samples per second per time bin. Returns ``path``."""
    n = _check(timeline)
    if not n:
        raise InvalidArgumentError("the timeline holds no batches: iterate the loader before plotting it")
    t = np.asarray(timeline["t"], np.float64)
    edges, which = time_bins(t)
    width = np.diff(edges)
    fig = _figure()
    top, middle, bottom = fig.subplots(3, 1, sharex=True)
    _delivered(top, t, np.asarray(timeline["wait"], np.float64))
    _stages(middle, timeline, edges, which, width)
    _throughput(bottom, np.asarray(timeline["rows"], np.float64), edges, which, width)
    bottom.set_xlabel("seconds since the first request")
    head = []
    if report is not None:
        head.append(f"{report.get('loader', 'loader')}, rank {report.get('rank', 0)}/{report.get('world_size', 1)}, "
                    f"{report.get('num_workers', 0)} workers")
    if title:
        head.append(textwrap.fill(title, 110))
    if head:
        fig.suptitle("\n".join(head), fontsize=10)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InvalidArgumentError(f"cannot write the plot to {path!r}: {directory} is not a directory; create it "
                                   "or give another path")
    fig.savefig(path, format="png", dpi=100)
    return path


def _delivered(ax, t: np.ndarray, wait: np.ndarray) -> None:
    ax.plot(t, np.arange(1, len(t) + 1), color="tab:blue", label="batches delivered")
    ax.set_ylabel("batches delivered", color="tab:blue")
    ax.set_title("batches delivered and the training loop's wait for each", fontsize=9)
    waits = ax.twinx()
    waits.vlines(t, 0, wait * 1e3, color="tab:red", alpha=0.6, linewidth=1)
    waits.set_ylabel("loop wait (ms)", color="tab:red")
    waits.set_ylim(bottom=0)


def _stages(ax, timeline: dict, edges: np.ndarray, which: np.ndarray, width: np.ndarray) -> None:
    bottom = np.zeros(len(width))
    for stage in CRITICAL:
        seconds = np.bincount(which, weights=np.asarray(timeline[stage], np.float64), minlength=len(width))
        if not seconds.any():
            continue
        ax.bar(edges[:-1], seconds, width=width, bottom=bottom, align="edge", label=stage)
        bottom += seconds
    ax.set_ylabel("stage seconds per bin\n(all workers)")
    ax.set_title("where the batches' time went", fontsize=9)
    if bottom.any():
        ax.legend(loc="upper right", fontsize=8)


def _throughput(ax, rows: np.ndarray, edges: np.ndarray, which: np.ndarray, width: np.ndarray) -> None:
    samples = np.bincount(which, weights=rows, minlength=len(width))
    ax.stairs(samples / width, edges, color="tab:green")
    ax.set_ylabel("samples/s")
    ax.set_ylim(bottom=0)
    ax.set_title("throughput", fontsize=9)
