"""Charts of the benchmark results: the PNG images docs/benchmarks.md shows.

    .venv/bin/python bench/charts.py docs/benchmarks.json      # redraws docs/benchmarks-*.png

Reads the raw results ``bench/run.py`` writes (``--json``) and draws, with matplotlib's Agg backend
(imported only to draw: ``pip install 'shardstream[plot]'``):

- ``<stem>-throughput.png``: the rates of every library side by side, one panel per section;
- ``<stem>-resume.png``: checkpoint -> first batch at several positions in the epoch;
- ``<stem>-cache.png``: streaming from S3 with a cold and a warm local cache.

The images go next to the JSON file (or into ``--out-dir``), named after it: ``docs/benchmarks.json`` ->
``docs/benchmarks-throughput.png`` ... ``bench/run.py`` draws them at the end of a run, next to its
``--out`` report, and links them from it. What each chart shows is read in ``charts_data.py``; a chart
whose sections the results lack is not drawn (and not linked).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import charts_data  # noqa: E402
from charts_data import LIBRARIES, Bars, Groups, Lines  # noqa: E402

DPI = 72
# name -> (alt text / caption, panels of the results, columns of the grid)
CHARTS = {
    "throughput": ("Throughput per library, every section (log scale; longer is faster)",
                   charts_data.throughput_panels, 3),
    "resume": ("Resumption: checkpoint to first batch at several positions in the epoch (lower is better)",
               charts_data.resume_panels, 3),
    "cache": ("Streaming from S3: bytes downloaded, throughput and time to first sample, cold and warm cache",
              charts_data.cache_panels, 3),
}


def _figure_class():
    """matplotlib's Figure on the Agg canvas (no pyplot, no global backend), or an install hint."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("drawing the benchmark charts needs matplotlib, which is not installed: "
                          "pip install 'shardstream[plot]' (or matplotlib>=3.5)") from e
    return Figure, FigureCanvasAgg


def human(x: float) -> str:
    """``1234567`` -> ``1.2M``, ``48713`` -> ``48.7k``, ``0.084`` -> ``0.084``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _draw_bars(ax, p: Bars) -> None:
    labels = [b[0] for b in p.bars]
    values = [b[1] for b in p.bars]
    ys = range(len(values))
    ax.barh(ys, values, color=[LIBRARIES[b[2]][1] for b in p.bars])
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    if p.log and min(values) > 0:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 3, max(values) * 6)
    else:
        ax.set_xlim(0, max(values) * 1.35)
    for y, v in zip(ys, values):
        ax.text(v, y, " " + human(v), va="center", fontsize=8)
    ax.set_xlabel(p.unit, fontsize=8)


def _draw_lines(ax, p: Lines) -> None:
    top = 0.0
    for label, lib, pts in p.series:
        xs, ys = [x for x, _ in pts], [y for _, y in pts]
        style = "--" if "shuffled" in label or label.endswith("-parquet") else "-"
        ax.plot(xs, ys, style, marker="o", color=LIBRARIES[lib][1], label=label)
        top = max(top, *ys)
    ax.set_ylim(0, top * 1.4 if top else 1)
    ax.set_xlim(-5, 100)
    ax.set_xlabel(p.xlabel, fontsize=8)
    ax.set_ylabel(p.ylabel, fontsize=8)
    ax.legend(fontsize=7, loc="upper center", ncol=min(3, len(p.series)))
    ax.grid(alpha=0.3)


def _draw_groups(ax, p: Groups) -> None:
    width = 0.8 / max(1, len(p.members))
    for i, (label, lib) in enumerate(p.members):
        # shardstream's variants share a colour; a lighter shade tells the second from the first
        alpha = 0.55 if any(m[1] == lib for m in p.members[:i]) else 1.0
        for g, group in enumerate(p.groups):
            v = p.values.get((group, label))
            if v is None:
                continue
            x = g + (i - (len(p.members) - 1) / 2) * width
            ax.bar(x, v, width, color=LIBRARIES[lib][1], alpha=alpha, label=label if g == 0 or v else None)
            ax.text(x, v, human(v), ha="center", va="bottom", fontsize=7)
    top = max([*p.values.values(), p.line[1] if p.line else 0]) or 1
    if p.line:
        ax.axhline(p.line[1], color="black", linestyle=":", linewidth=1)
        ax.text((len(p.groups) - 1) / 2, p.line[1], p.line[0], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(p.groups)), p.groups, fontsize=8)
    positive = [v for v in p.values.values() if v > 0]
    if p.log and positive:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 2, top * 12)
    else:
        ax.set_ylim(0, top * 1.5)
    ax.set_ylabel(p.unit, fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left")


DRAW = {Bars: _draw_bars, Lines: _draw_lines, Groups: _draw_groups}


def draw_chart(panels: list, path: str, cols: int) -> None:
    """One PNG of ``panels`` in a grid ``cols`` wide."""
    Figure, Canvas = _figure_class()
    rows = math.ceil(len(panels) / cols)
    cols = min(cols, len(panels))
    tall = max((len(p.bars) for p in panels if isinstance(p, Bars)), default=4)
    fig = Figure(figsize=(5.2 * cols, max(3.4, 0.32 * tall + 1.1) * rows))
    Canvas(fig)
    for i, p in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        DRAW[type(p)](ax, p)
        ax.set_title(p.title, fontsize=9)
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})


def draw(R: dict, out_dir: str, stem: str = "benchmarks") -> list[tuple[str, str]]:
    """Draws every chart the results hold into ``out_dir/<stem>-<name>.png``; returns ``[(caption, file
    name), ...]`` of those drawn. A chart without data is not drawn, and an older image of it is removed
    (so a report never links a stale one)."""
    _figure_class()
    os.makedirs(out_dir, exist_ok=True)
    drawn = []
    for name, (caption, panels_of, cols) in CHARTS.items():
        path = os.path.join(out_dir, f"{stem}-{name}.png")
        panels = panels_of(R)
        if not panels:
            if os.path.exists(path):
                os.remove(path)
            continue
        draw_chart(panels, path, cols)
        drawn.append((caption, os.path.basename(path)))
    return drawn


def markdown(images: list[tuple[str, str]]) -> list[str]:
    """The report's lines that show the images (paths relative to the report, which sits beside them)."""
    if not images:
        return []
    L = ["## Charts", "",
         ("Drawn by `bench/charts.py` from the raw results of this report (`bench/charts.py "
          "docs/benchmarks.json` redraws them); the tables below hold the numbers and what each one measures."),
         ""]
    for caption, file in images:
        L += [f"![{caption}]({file})", ""]
    return L


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="raw results of bench/run.py (its --json file, e.g. docs/benchmarks.json)")
    ap.add_argument("--out-dir", help="where the images go (default: beside the results)")
    args = ap.parse_args()
    with open(args.results) as f:
        R = json.load(f)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.results))
    stem = os.path.splitext(os.path.basename(args.results))[0]
    try:
        drawn = draw(R, out_dir, stem)
    except ImportError as e:
        sys.exit(str(e))
    for caption, file in drawn:
        path = os.path.join(out_dir, file)
        print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} KiB): {caption}")
    if not drawn:
        print(f"no chart drawn: {args.results} holds none of the sections the charts show")


if __name__ == "__main__":
    main()
