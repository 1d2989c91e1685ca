"""Loader stats on vs off: what ``stats=True`` costs shardstream's loaders, measured in one run.

    .venv/bin/python bench/bench_loader_stats.py [--samples 64000] [--repeats 5] [--out stats.md] [--json stats.json]

The data is the DataLoader section's (``bench_loader.py``: ~1 KB samples, ``x``: ``uint8[1000]``,
``label``: int), written once by shardstream. Each case is one loader setting: the
``StreamingDataLoader``'s batch path (``batch_decode=None``, the default) and its per-sample path
(``batch_decode=False``), each with ``num_workers=2`` and ``0``, and ``BatchLoader`` (a background
thread). Every measurement is a fresh process that builds the loader with ``stats=False`` or
``stats=True`` (the only difference), runs one warm-up epoch and ``--epochs`` timed epochs
(shuffled, ``batch_size=32``) and reports the median steady samples/s of its epochs (the first
``--skip-batches`` batches of each left out) and the CPU time per batch. The processes run one
after the other, interleaved so that the machine's noise hits both modes: for each of
``--repeats`` rounds, every case runs off then on (on then off in odd rounds). A process runs one
mode only: with no DataLoader workers the timing points are turned on for the whole process once a
loader with stats runs in it (``stats/record.py``), so an "off" epoch after an "on" one would pay
for them.

With stats on, each process also checks that ``loader.stats()`` counted every batch and sample
the loop received. ``bench/run.py`` calls :func:`run_stats` and renders :func:`markdown` as a
subsection of the DataLoader section (``--only loaderstats`` measures it alone).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_loader
import common
from bench_loader import BATCH, load_config
from common import get, log

DEFAULT_SAMPLES = 64_000  # 2,000 steps of 32, one 64 MB shard
DEFAULT_REPEATS = 5
DEFAULT_EPOCHS = 2
TARGET_OVERHEAD = 0.02  # of the batch path's throughput
RUN_TIMEOUT_S = 600

# name -> (loader, options); the order is the order of the table
CASES = {
    "batch-w2": ("StreamingDataLoader", {"batch_decode": None, "num_workers": 2}),
    "batch-w0": ("StreamingDataLoader", {"batch_decode": None, "num_workers": 0}),
    "per-sample-w2": ("StreamingDataLoader", {"batch_decode": False, "num_workers": 2}),
    "per-sample-w0": ("StreamingDataLoader", {"batch_decode": False, "num_workers": 0}),
    "batchloader": ("BatchLoader", {}),
}
SETTINGS = {
    "batch-w2": "batch path (`batch_decode=None`, default), `num_workers=2`",
    "batch-w0": "batch path, `num_workers=0`",
    "per-sample-w2": "per-sample path (`batch_decode=False`), `num_workers=2`",
    "per-sample-w0": "per-sample path, `num_workers=0`",
    "batchloader": "`BatchLoader(ds)` (a background thread, `prefetch=2`)",
}
HEADLINE = "batch-w2"  # the DataLoader section's default loader: the spec's < 2 % is of its throughput

#: Where an "off" loader pays for stats: one test per batch or per pass, cited in the report.
OFF_COST = [
    ("src/shardstream/integrations/torch.py", "StreamingDataLoader.__iter__",
     "`self._count(it) if self._loop_stats is None else self._count_timed(it)`, once per pass"),
    ("src/shardstream/integrations/torch.py", "_metered", "`if not stats: return it`, once per pass in each worker"),
    ("src/shardstream/integrations/torch.py", "SampleBatches._batches",
     "`with record.timed(\"collate\")`: one small object and a test of `record.ON` per batch (per-sample path)"),
    ("src/shardstream/stats/record.py", "timed.__enter__ / __exit__",
     "`perf_counter() if ON else 0.0` and `if self.t0:`"),
    ("src/shardstream/loaders/batches.py", "BatchLoader._consume", "`if meter is not None` twice per batch"),
    ("src/shardstream/loaders/batches.py", "_Producer._run", "`add_after(batch.stats, ...)` only with a transform"),
    ("src/shardstream/engine/prefetch.py, engine/reading.py, storage/",
     "download, cache and eviction points", "`if record.ON:` (or `perf_counter() if record.ON else 0.0`) per "
     "chunk of the plan, per step or per shard, never per sample"),
]


# -- the child: one loader, one mode ------------------------------------------------------------
def _child(config_path: str) -> None:
    cfg = load_config(config_path)
    if cfg.get("task") == "alone":
        common.emit(stats_work_alone(cfg["batches"], cfg["rounds"]), cfg["out"])
        return
    name, stats = cfg["case"], cfg["stats"]
    kind, opts = CASES[name]
    t = time.perf_counter()
    import numpy as np

    import shardstream
    from shardstream import StreamingDataset

    info: dict[str, Any] = {"library": "shardstream", "version": shardstream.__version__, "case": name,
                            "stats_on": stats, "numpy": np.__version__}
    if kind == "StreamingDataLoader":
        import torch

        from shardstream import StreamingDataLoader
        info["torch"] = torch.__version__
    else:
        from shardstream.loaders.batches import BatchLoader
    info["import_s"] = time.perf_counter() - t
    built: list = []

    def make():
        ds = StreamingDataset(local=cfg["path"], shuffle=True, batch_size=BATCH)
        if kind == "StreamingDataLoader":
            loader = StreamingDataLoader(ds, batch_size=BATCH, stats=stats, **opts)
        else:
            loader = BatchLoader(ds, stats=stats)
        built.append(loader)
        return ds, loader

    res = bench_loader.throughput(dict(cfg, name=f"{name} stats={stats}"), make, info)
    res["steady_median"] = statistics.median(e["steady_samples_per_s"] for e in res["epochs"]
                                             if e.get("steady_samples_per_s"))
    if stats:
        res["stats"] = _stats_check(built[-1], res, cfg)
    common.emit(res, cfg["out"])


def _per_batch_us(run, n: int, rounds: int) -> float:
    """Median over ``rounds`` of ``run()``'s CPU seconds (this process's: a busy machine slows the wall clock,
    not the CPU time), in µs per batch of ``n``."""
    times = []
    for _ in range(rounds):
        t = time.process_time()
        run()
        times.append(time.process_time() - t)
    return statistics.median(times) / n * 1e6


def stats_work_alone(n: int = 20_000, rounds: int = 5) -> dict:
    """The stats work of one batch of 32 x 1 KB, timed alone in a tight loop (µs per batch, median of
    ``rounds``): in the worker (the metered iterator: stamp, counters' deltas, rows), across (pickling the
    stats list there and back), in the training process (the loop's record of the batch), and a timing
    point with stats off and on."""
    import pickle

    import numpy as np

    from shardstream.engine.nodes import Stamped
    from shardstream.stats import StatsConfig, record
    from shardstream.stats.loaders import rows_of
    from shardstream.stats.loop import LoopStats
    from shardstream.stats.meter import metered

    batch = {"x": np.zeros((BATCH, 1000), np.uint8), "label": np.zeros(BATCH, np.int64)}
    stamps = [Stamped(batch, i) for i in range(n)]

    def point():
        for _ in range(n):
            with record.timed("collate"):
                pass

    out = {"batches": n, "rounds": rounds, "point_off_us": _per_batch_us(point, n, rounds)}
    plain = _per_batch_us(lambda: [s for s in iter(stamps)], n, rounds)
    out["worker_us"] = _per_batch_us(lambda: [s for s in metered(iter(stamps), "w0", rows_of)], n, rounds) - plain
    out["point_on_us"] = _per_batch_us(point, n, rounds)
    stats = stamps[-1].stats
    out["stats_dict_bytes"] = len(pickle.dumps(stats, pickle.HIGHEST_PROTOCOL))
    out["transfer_us"] = _per_batch_us(lambda: [pickle.loads(pickle.dumps(stats, pickle.HIGHEST_PROTOCOL))
                                                for _ in range(n)], n, rounds)
    loop = LoopStats(StatsConfig(), "bench", None, 2)

    def main_side():
        loop.begin_pass()
        for s in stamps:
            asked = time.perf_counter()
            got = time.perf_counter()
            loop.batch(asked, got, s.stats, rows_of(s.item), time.perf_counter() - got)

    out["main_us"] = _per_batch_us(main_side, n, rounds)
    return out


def _stats_check(loader, res: dict, cfg: dict) -> dict:
    """What ``loader.stats()`` counted since the start against what the loop received."""
    report = loader.stats()
    total = report["total"]
    epochs = [res["first_epoch"], *res["epochs"]]
    batches, samples = sum(e["batches"] for e in epochs), sum(e["count"] for e in epochs)
    return {"batches": total["batches"], "samples": total["samples"], "expect_batches": batches,
            "expect_samples": samples, "ok": total["batches"] == batches and total["samples"] == samples,
            "stall_fraction": total["stall_fraction"], "slowest_stage": report["slowest_stage"],
            "stages": total["stages"], "wait_p50_s": total["wait_s"]["p50"]}


# -- the driver ---------------------------------------------------------------------------------
def _run(work: str, tag: str, cfg: dict, script: str, wait_s: float, max_busy: float) -> dict:
    out = os.path.join(work, f"result-{tag}.json")
    cfg_path = os.path.join(work, f"config-{tag}.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(cfg, out=out), f)
    cmd = [sys.executable, os.path.join(HERE, script), "--child", cfg_path]
    quiet = bench_loader.wait_quiet(max_busy, wait_s) if wait_s > 0 else {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log(f"== {tag}")
    return bench_loader.measured_run(cmd, env, ROOT, out, os.path.join(work, f"stderr-{tag}.log"), tag, quiet,
                                     RUN_TIMEOUT_S)


def run_stats(work_dir: str, samples_n: int = DEFAULT_SAMPLES, *, repeats: int = DEFAULT_REPEATS,
              epochs: int = DEFAULT_EPOCHS, cases: tuple[str, ...] | None = None, skip: int = bench_loader.DEFAULT_SKIP,
              wait_s: float = 0.0, max_busy: float = 0.25, keep_data: bool = False) -> dict:
    """Measure every case with stats off and on, ``repeats`` interleaved rounds, and return the raw
    results (see :func:`markdown`). ``samples_n`` is rounded up to a multiple of ``2 * 32``."""
    import shutil

    start = time.perf_counter()
    step = 2 * BATCH
    n = -(-samples_n // step) * step
    cases = tuple(cases or CASES)
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": bench_loader.machine_info(), "git": common.git_rev(),
               "loadavg_before": bench_loader._loadavg(),
               "config": {"samples": n, "batch_size": BATCH, "repeats": repeats, "epochs": epochs, "skip_batches": skip,
                          "cases": list(cases), "wait_s": wait_s, "max_busy": max_busy},
               "runs": {c: {"off": [], "on": []} for c in cases}}
    try:
        npz, path = os.path.join(work, "data.npz"), os.path.join(work, "shardstream-data")
        bench_loader.generate(npz, n)
        x, labels = bench_loader.load(npz)
        expect = {"count": n, "label_sum": int(labels.sum()), "x0_sum": int(x[:, 0].astype("int64").sum())}
        del x, labels
        R["write"] = _run(work, "write", {"task": "write", "npz": npz, "path": path}, "bench_loader.py", 0, 1.0)
        if "error" in R["write"]:
            return R
        os.unlink(npz)
        R["alone"] = _run(work, "alone", {"task": "alone", "batches": 20_000, "rounds": 5}, "bench_loader_stats.py",
                          0, 1.0)
        base = {"path": path, "shuffle": True, "repeats": epochs, "skip": skip, "expect": expect}
        for k in range(repeats):
            for case in cases:
                for mode in (("off", "on") if k % 2 == 0 else ("on", "off")):
                    cfg = dict(base, case=case, stats=mode == "on")
                    R["runs"][case][mode].append(_run(work, f"{k}-{case}-{mode}", cfg, "bench_loader_stats.py",
                                                      wait_s, max_busy))
    finally:
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = bench_loader._loadavg()
    R["total_s"] = time.perf_counter() - start
    return R


# -- the figures ----------------------------------------------------------------------------------
def _usable(r: dict) -> bool:
    return "error" not in r and bool(r.get("ok"))


def _good(runs: list[dict]) -> list[dict]:
    return [r for r in runs if _usable(r)]


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def case_summary(by_mode: dict) -> dict:
    """Medians of each mode, the overhead of the medians, and the overhead of each round's pair (the spread)."""
    off, on = _good(by_mode.get("off", [])), _good(by_mode.get("on", []))
    out: dict[str, Any] = {"runs": {"off": len(off), "on": len(on)},
                           "failed": sum(1 for m in ("off", "on") for r in by_mode.get(m, [])
                                         if "error" in r or not r.get("ok"))}
    for mode, runs in (("off", off), ("on", on)):
        out[mode] = {"steady": _median([r.get("steady_median") for r in runs]),
                     "main_us": _median([r.get("main_cpu_us_per_batch") for r in runs]),
                     "workers_us": _median([r.get("workers_cpu_us_per_batch") for r in runs]),
                     "others": _median([get(r, "contention", "others_cpu_share") for r in runs])}
    a, b = out["off"]["steady"], out["on"]["steady"]
    out["overhead"] = 1.0 - b / a if a and b else None
    pairs = [1.0 - y["steady_median"] / x["steady_median"]
             for x, y in zip(by_mode.get("off", []), by_mode.get("on", []))
             if _usable(x) and _usable(y) and x.get("steady_median") and y.get("steady_median")]
    out["pair_overheads"] = pairs
    checks = [get(r, "stats", "ok") for r in on]
    out["stats_ok"] = bool(checks) and all(checks)
    return out


def target_rows(R: dict | None) -> list[dict]:
    """The spec's target: stats on cost < 2 % of the default loader's (batch path) throughput."""
    if not R or HEADLINE not in (R.get("runs") or {}):
        return []
    s = case_summary(R["runs"][HEADLINE])
    over, pairs = s["overhead"], s["pair_overheads"]
    measured, met = "n/a", None
    if over is not None:
        measured = f"{over:+.1%} (median of {s['runs']['on']} vs {s['runs']['off']})"
        met = over < TARGET_OVERHEAD
        if len(pairs) >= 2:
            q25, _, q75 = statistics.quantiles(pairs, n=4, method="inclusive")
            measured += f"; rounds {min(pairs):+.1%} .. {max(pairs):+.1%}"
            if q75 - q25 > TARGET_OVERHEAD:  # the machine's noise is larger than what is to be told apart
                met = None
                measured += ": the rounds' spread is larger than the target, so this run cannot tell"
    return [{"target": "Loader stats on vs off: overhead < 2 % of the DataLoader batch path's throughput "
                       "(2 workers, batch 32, ~1 KB samples, shuffled)",
             "measured": measured,
             "ratio": "n/a" if over is None else f"{over / TARGET_OVERHEAD:.2f} of the limit",
             "required": f"< {TARGET_OVERHEAD:.0%}", "met": met}]


def failed(R: dict) -> list[str]:
    out = ["write"] if "error" in (R.get("write") or {}) else []
    for case, by_mode in (R.get("runs") or {}).items():
        for mode, runs in by_mode.items():
            out += [f"{case}-{mode}-{k}" for k, r in enumerate(runs) if "error" in r or not r.get("ok")
                    or (mode == "on" and not get(r, "stats", "ok"))]
    return out


# -- the report -----------------------------------------------------------------------------------
def _sps(x) -> str:
    return "n/a" if not x else f"{x:,.0f}"


def _us(x) -> str:
    return "n/a" if not x else f"{x:,.0f}"


def _spread(pairs: list[float]) -> str:
    return "n/a" if not pairs else f"{min(pairs):+.1%} .. {max(pairs):+.1%}"


def _cpu_change(off: dict, on: dict) -> str:
    a = (off["main_us"] or 0) + (off["workers_us"] or 0)
    b = (on["main_us"] or 0) + (on["workers_us"] or 0)
    return "n/a" if not a or not b else f"{b / a - 1:+.1%}"


def markdown(R: dict) -> str:
    """The stats on vs off measurement as a Markdown subsection of the DataLoader section."""
    cfg, m = R["config"], R["machine"]
    L = ["### Loader stats: on vs off", "",
         (f"Run on {R['date']} (git {R.get('git')}), total {R.get('total_s', 0):.0f} s; machine: {m['cpu']}, "
          f"{m['logical_cpus']} logical CPUs ({m.get('usable_cpus')} usable), {m['os']}; load average before / "
          f"after: {R.get('loadavg_before')} / {R.get('loadavg_after')} (the machine is shared)."), ""]
    if "error" in (R.get("write") or {}):
        return "\n".join(L + [f"**Writing the data failed** ({R['write']['error']}).", ""])
    header = ["Loader", "Settings", f"steady samples/s, stats off (median of {cfg['repeats']})",
              "stats on (median)", "overhead (of the medians)", "overhead per round (min .. max)",
              "CPU per batch, main: off / on (µs)", "CPU per batch, workers: off / on (µs)",
              "CPU per batch, main + workers: on vs off",
              "`stats()` counted every batch and sample", "other processes' CPU"]
    rows = []
    for case in cfg["cases"]:
        s = case_summary(R["runs"][case])
        off, on = s["off"], s["on"]
        bad = f" (**{s['failed']} failed or wrong**)" if s["failed"] else ""
        rows.append([CASES[case][0] + bad, SETTINGS[case], _sps(off["steady"]), _sps(on["steady"]),
                     "n/a" if s["overhead"] is None else f"{s['overhead']:+.1%}", _spread(s["pair_overheads"]),
                     f"{_us(off['main_us'])} / {_us(on['main_us'])}",
                     f"{_us(off['workers_us'])} / {_us(on['workers_us'])}", _cpu_change(off, on), "yes" if s["stats_ok"] else "**no**",
                     "n/a" if off["others"] is None else f"{off['others']:.0%} / {on['others']:.0%}"])
    L += bench_loader._table(header, rows)
    L += ["", (f"{cfg['samples']:,} samples of the data above (written once by shardstream), shuffled, "
               f"`batch_size={cfg['batch_size']}`. One fresh process per measurement: the loader is built with "
               f"`stats=False` or `stats=True` (nothing else differs), runs one warm-up epoch and {cfg['epochs']} "
               f"timed epochs; its figure is the median steady samples/s of those epochs (the first "
               f"{cfg['skip_batches']} batches of each left out). The processes ran one after the other in "
               f"{cfg['repeats']} rounds; in each round every row ran off then on (on then off in odd rounds), "
               "so the machine's noise hits both modes. *Overhead*: 1 - on / off of the medians (negative: "
               "stats on measured faster, i.e. noise); *per round*: the same of each round's pair. *CPU per "
               "batch*: user + system CPU time per batch of the main process and of the DataLoader workers "
               "(median), less sensitive to other processes than the throughput (a busy machine slows the "
               "wall clock more than the CPU time). With stats on, each process "
               "checked that `loader.stats()` counted every batch and sample the loop received "
               "(warm-up epoch included). *Other processes' CPU*: share of all CPUs used by anything else while "
               "the row's processes ran (median, off / on).")]
    L += _alone(R)
    over = target_rows(R)
    if over:
        verdict = {None: "not decided", True: "**MET**", False: "**NOT MET**"}[over[0]["met"]]
        L += ["", f"Target: stats on cost < {TARGET_OVERHEAD:.0%} of the batch path's throughput: "
                  f"{over[0]['measured']} ({verdict})."]
    L += ["", ("With stats off, a loader does no stats work but a test per pass or per batch (so its cost "
               "cannot be told apart from the code before stats existed, which cannot run side by side in "
               "this run):"), ""]
    L += [f"- `{path}`, {where}: {what}." for path, where, what in OFF_COST]
    return "\n".join(L) + "\n"


def _alone(R: dict) -> list[str]:
    """The stats work per batch timed alone, against the CPU a batch of the default loader costs."""
    a = R.get("alone") or {}
    if "worker_us" not in a:
        return []
    per_batch = a["worker_us"] + a["transfer_us"] + a["main_us"]
    off = case_summary(R["runs"][HEADLINE])["off"] if HEADLINE in R.get("runs", {}) else {}
    cpu = (off.get("main_us") or 0) + (off.get("workers_us") or 0)
    share = (f"; the batch path with 2 workers spends {cpu:,.0f} µs of CPU per batch with stats off (main + "
             f"workers, above), so the stats work alone is {per_batch / cpu:.1%} of it; in place, the CPU per "
             "batch columns above differ by more") if cpu else ""
    return ["", (f"The stats work of one batch, timed alone in one process (CPU time, median of {a['rounds']} rounds "
                 f"of {a['batches']:,} batches): {a['worker_us']:.1f} µs in the worker (the metered iterator: the "
                 f"counters' deltas, the stamp, the rows), {a['transfer_us']:.1f} µs to pickle and unpickle the "
                 f"{a['stats_dict_bytes']}-byte stats list that travels with the batch (an upper bound: it crosses "
                 f"inside the batch's own pickle), {a['main_us']:.1f} µs in the training process (three clock "
                 f"reads and the loop's record of the batch): {per_batch:.1f} µs per batch{share}. A timing point "
                 f"costs {a['point_off_us']:.2f} µs with stats off and {a['point_on_us']:.2f} µs on.")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "loader-stats"))
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="rounds of off/on processes per case")
    ap.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help="timed epochs per process")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--skip-batches", type=int, default=bench_loader.DEFAULT_SKIP,
                    help="batches left out at the start of each epoch for the steady rate")
    ap.add_argument("--max-busy", type=float, default=0.25,
                    help="before each process, wait until the CPUs are at most this busy (share, over 2 s)")
    ap.add_argument("--wait", type=float, default=0.0, help="... but at most this many seconds (0: never wait)")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep-data", action="store_true")
    args = ap.parse_args()
    if args.child:
        _child(args.child)
        return
    cases = tuple(c for c in args.cases.split(",") if c)
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    R = run_stats(args.work, args.samples, repeats=args.repeats, epochs=args.epochs, cases=cases,
                  skip=args.skip_batches, wait_s=args.wait, max_busy=args.max_busy, keep_data=args.keep_data)
    common.publish(R, markdown, __file__, args.out, args.json)
    if failed(R):
        log(f"failed or wrong: {', '.join(failed(R))}")
        sys.exit(1)


if __name__ == "__main__":
    main()
