"""What the benchmark charts show, read out of the raw results (pure: no matplotlib, no files).

Each function takes the raw results ``bench/run.py --json`` writes and returns the figures of one chart;
a section the results lack (skipped, failed, an older run) gives no panel, and a chart with no panel is
not drawn. ``bench/charts.py`` draws them.

- :func:`throughput_panels`: one panel per section of the report, the rates of every library measured
  side by side (samples/s, rows/s or tokens/s);
- :func:`resume_panels`: time from a checkpoint to the first batch at several positions in the epoch;
- :func:`cache_panels`: streaming from S3 with a cold and a warm local cache (bytes downloaded, epoch
  samples/s, time to first sample).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from common import get

# library key -> (legend name, colour); a bar's or a line's colour says whose it is
LIBRARIES = {
    "shardstream": ("shardstream", "#1f77b4"),
    "mosaic": ("mosaicml-streaming", "#ff7f0e"),
    "litdata": ("litdata", "#2ca02c"),
    "hf": ("HF datasets", "#d62728"),
    "grain": ("Grain", "#9467bd"),
    "baseline": ("baseline (pyarrow, tokenizers)", "#7f7f7f"),
}


@dataclass
class Bars:
    """A panel of horizontal bars: ``bars`` is ``[(label, value, library), ...]``, drawn top to bottom."""
    title: str
    unit: str
    bars: list[tuple[str, float, str]] = field(default_factory=list)
    log: bool = True

    def add(self, label: str, value, library: str) -> None:
        if isinstance(value, (int, float)) and value > 0:
            self.bars.append((label, float(value), library))


@dataclass
class Lines:
    """A panel of lines: ``series`` is ``[(label, library, [(x, y), ...]), ...]``."""
    title: str
    xlabel: str
    ylabel: str
    series: list[tuple[str, str, list[tuple[float, float]]]] = field(default_factory=list)


@dataclass
class Groups:
    """A panel of grouped bars: one group per ``groups`` entry, one bar per library in each;
    ``values[(group, label)]`` (a missing pair leaves a gap); ``line``: an optional reference level."""
    title: str
    unit: str
    groups: list[str]
    members: list[tuple[str, str]]  # (label, library)
    values: dict[tuple[str, str], float] = field(default_factory=dict)
    log: bool = False
    line: tuple[str, float] | None = None


def _kept(panels: list) -> list:
    return [p for p in panels if (p.bars if isinstance(p, Bars) else p.series if isinstance(p, Lines) else p.values)]


# -- throughput ----------------------------------------------------------------------------------
def throughput_panels(R: dict) -> list[Bars]:
    """The side-by-side rates of every section, shardstream's first in each panel."""
    return _kept(_core_panels(R) + _loader_panels(R.get("loader")) + _files_panels(R.get("files"))
                 + _pipeline_panels(R.get("pipeline")) + _convert_panels(R.get("convert"))
                 + _textshards_panels(R.get("textshards")))


def _core_panels(R: dict) -> list[Bars]:
    ss, mo, lit = R.get("shardstream") or {}, R.get("mosaic") or {}, R.get("litdata") or {}
    it = Bars("Dict iteration, one process, warm", "samples/s")
    it.add("shardstream", get(ss, "iterate", "default", "warm", "samples_per_s"), "shardstream")
    it.add("mosaicml-streaming", get(mo, "iterate", "default", "warm", "samples_per_s"), "mosaic")
    tuned = get(mo, "iterate", "best_tuned")
    if tuned:
        it.add(f"mosaicml-streaming {tuned}", get(mo, "iterate", tuned, "warm", "samples_per_s"), "mosaic")
    it.add("litdata", get(lit, "iterate", "default", "warm", "samples_per_s"), "litdata")
    rnd = Bars("Random access ds[i]", "samples/s")
    rnd.add("shardstream", get(ss, "random", "default", "samples_per_s"), "shardstream")
    rnd.add("mosaicml-streaming", get(mo, "random", "default", "samples_per_s"), "mosaic")
    for k in ("default", "batch_decode=False"):
        rnd.add(f"litdata {k}", get(lit, "random", k, "samples_per_s"), "litdata")
    wr = Bars("Writing MDS / chunks, uncompressed", "samples/s")
    wr.add("shardstream MDSWriter", get(ss, "write", "none", "samples_per_s"), "shardstream")
    wr.add("mosaicml-streaming MDSWriter", get(mo, "write", "none", "samples_per_s"), "mosaic")
    wr.add("litdata BinaryWriter", get(lit, "write", "binary_writer", "samples_per_s"), "litdata")
    wr.add("litdata optimize", get(lit, "write", "optimize", "samples_per_s"), "litdata")
    return [it, rnd, wr]


LOADER_CASES = (("shardstream", "shardstream", "shardstream"),
                ("shardstream-persistent", "shardstream persistent", "shardstream"),
                ("shardstream-per-sample", "shardstream per-sample", "shardstream"),
                ("mosaic", "mosaicml-streaming", "mosaic"), ("litdata", "litdata", "litdata"))


def _loader_panels(L: dict | None) -> list[Bars]:
    out = []
    for order in ("shuffled", "sequential"):
        p = Bars(f"PyTorch DataLoader, {order}, 2 workers", "samples/s")
        for case, label, lib in LOADER_CASES:
            r = get(L, "throughput", order, case)
            if isinstance(r, dict) and r.get("ok", True):
                p.add(label, r.get("steady_samples_per_s"), lib)
        out.append(p)
    return out


def _files_panels(F: dict | None) -> list[Bars]:
    pq = Bars("Parquet rows, sequential", "rows/s")
    for case, label, lib in (("shardstream", "shardstream", "shardstream"),
                             ("shardstream_batches", "shardstream batches", "shardstream"),
                             ("hf", "HF datasets", "hf"), ("pyarrow", "pyarrow loop", "baseline")):
        pq.add(label, get(F, "parquet", case, "rows_per_s"), lib)
    pq.add("litdata ParquetLoader", get(F, "peers", "litdata_parquet", "rows_per_s"), "litdata")
    js = Bars("JSON Lines rows, sequential; shuffled DataLoader", "rows/s")
    js.add("shardstream", get(F, "jsonl", "shardstream", "rows_per_s"), "shardstream")
    js.add("HF datasets", get(F, "jsonl", "hf", "rows_per_s"), "hf")
    js.add("shardstream loader, shuffled", get(F, "shuffled", "shardstream", "rows_per_s"), "shardstream")
    js.add("HF datasets loader, shuffled", get(F, "shuffled", "hf", "rows_per_s"), "hf")
    own = Bars("Each library's own format, sequential rows", "rows/s")
    own.add("shardstream (MDS)", get(F, "peers", "shardstream_mds", "rows_per_s"), "shardstream")
    own.add("mosaicml-streaming (MDS)", get(F, "peers", "mosaic", "rows_per_s"), "mosaic")
    own.add("litdata (optimize)", get(F, "peers", "litdata", "rows_per_s"), "litdata")
    return [pq, js, own]


def _library_of(case: str) -> str:
    for prefix, lib in (("shardstream", "shardstream"), ("mosaic", "mosaic"), ("ours", "shardstream"),
                        ("litdata", "litdata"), ("hf", "hf"), ("grain", "grain")):
        if case.startswith(prefix):
            return lib
    return "baseline"


def _best(runs, key: str):
    """The fastest ok run's ``key`` of a case (a list of runs, as the pipeline and convert sections keep)."""
    vals = [r.get(key) for r in (runs if isinstance(runs, list) else [runs])
            if isinstance(r, dict) and r.get("ok") and isinstance(r.get(key), (int, float))]
    return max(vals) if vals else None


def _pipeline_panels(P: dict | None) -> list[Bars]:
    p = Bars("Text LM pipeline (shuffle, tokenize, pack, batch)", "tokens/s")
    for case, runs in (get(P, "throughput") or {}).items():
        p.add(case, _best(runs, "tokens_per_s"), _library_of(case))
    return [p]


def _convert_panels(C: dict | None) -> list[Bars]:
    p = Bars("Converting Parquet to MDS", "rows/s")
    for case, runs in (get(C, "runs") or {}).items():
        p.add(case, _best(runs, "rows_per_s"), _library_of(case))
    return [p]


def _textshards_panels(T: dict | None) -> list[Bars]:
    p = Bars("JSON / CSV shards, sequential read", "samples/s")
    for case, sides in (get(T, "runs") or {}).items():
        for lib, name in (("shardstream", "shardstream"), ("mosaic", "mosaic")):
            p.add(f"{case} {name}", get(sides, lib, "read", "iterate_samples_per_s"), lib)
    return [p]


# -- resumption ----------------------------------------------------------------------------------
def _median(values) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None


def resume_panels(R: dict) -> list[Lines]:
    """Checkpoint -> first batch (seconds, median of the fresh processes) against the position in the epoch."""
    return _kept([_loader_resume(R.get("loader")), _files_resume(R.get("files")),
                  _pipeline_resume(R.get("pipeline"))])


def _loader_resume(L: dict | None) -> Lines:
    p = Lines("PyTorch DataLoader: constructor -> load_state_dict -> first batch", "position in the epoch (%)",
              "seconds")
    names = {"shardstream": "shardstream", "mosaic": "mosaicml-streaming", "litdata": "litdata"}
    for lib, by_pos in (get(L, "resume") or {}).items():
        pts = []
        for pos, runs in by_pos.items():
            t = _median(r.get("total_s") for r in runs if isinstance(r, dict) and "error" not in r)
            if t is not None:
                pts.append((float(pos.rstrip("%")), t))
        if pts:
            p.series.append((names.get(lib, lib), lib if lib in LIBRARIES else "baseline", sorted(pts)))
    return p


def _files_resume(F: dict | None) -> Lines:
    p = Lines("Parquet rows: load_state_dict -> first row", "position in the epoch (%)", "seconds")
    rows = get(F, "config", "rows") or get(F, "data", "rows")
    names = {"shardstream": "shardstream", "shardstream_shuffled": "shardstream, shuffled", "hf": "HF datasets"}
    for case, r in (get(F, "resume") or {}).items():
        pts = [(100.0 * int(pos) / rows, v["median_s"]) for pos, v in (r.get("positions") or {}).items()
               if rows and isinstance(v, dict) and isinstance(v.get("median_s"), (int, float))]
        if pts:
            p.series.append((names.get(case, case), _library_of(case), sorted(pts)))
    return p


def _pipeline_resume(P: dict | None) -> Lines:
    p = Lines("Text LM pipeline: load_state_dict -> first batch", "position in the epoch (%)", "seconds")
    for case, r in (get(P, "resume") or {}).items():
        pts = [(100.0 * v["fraction"], v["median_s"]) for v in (r.get("positions") or {}).values()
               if isinstance(v, dict) and isinstance(v.get("fraction"), (int, float))
               and isinstance(v.get("median_s"), (int, float))]
        if pts:
            p.series.append((case, _library_of(case), sorted(pts)))
    return p


# -- the cache -----------------------------------------------------------------------------------
REMOTE_SIDES = (("shardstream", "shardstream", "shardstream"),
                ("shardstream-threads1", "shardstream, 1 download thread", "shardstream"),
                ("mosaic", "mosaicml-streaming", "mosaic"))


def cache_panels(R: dict) -> list[Groups]:
    """Streaming from a loopback S3 server: what a cold and a warm cache cost (bench_remote.py)."""
    runs = get(R, "remote", "runs") or {}
    members = [(label, lib) for key, label, lib in REMOTE_SIDES if key in runs]
    dataset_mb = (get(R, "remote", "dataset", "dataset_bytes") or 0) / 1e6
    down = Groups("Downloaded from S3", "MB", ["cold cache", "warm cache", "node 0 of 2, cold"], members,
                  line=("the dataset", dataset_mb) if dataset_mb else None)
    rate = Groups("Epoch throughput", "samples/s", ["cold cache", "warm cache"], members, log=True)
    first = Groups("Time to first sample (median)", "seconds", ["cold cache", "warm cache"], members)
    for key, label, _ in REMOTE_SIDES:
        for phase, group in (("cold", "cold cache"), ("warm", "warm cache")):
            r = get(runs, key, phase)
            if not isinstance(r, dict) or r.get("error"):
                continue
            if isinstance(r.get("server_bytes"), (int, float)):
                down.values[(group, label)] = r["server_bytes"] / 1e6
            if r.get("samples_per_s"):
                rate.values[(group, label)] = r["samples_per_s"]
            t = _median([r.get("first_sample_s"), *r.get("first_runs", [])])
            if t is not None:
                first.values[(group, label)] = t
        node = get(runs, f"{key}-node0of2", "cold")
        if isinstance(node, dict) and not node.get("error") and isinstance(node.get("server_bytes"), (int, float)):
            down.values[("node 0 of 2, cold", label)] = node["server_bytes"] / 1e6
    return _kept([down, rate, first])
