"""Benchmark driver: shardstream vs mosaicml-streaming vs litdata, side by side.

    .venv/bin/python bench/run.py --peer-python .venv-peers/bin/python --out docs/benchmarks.md

Generates the workload once (bench/common.py, fixed seed), then runs each library's
benchmark in its own subprocess and virtualenv, one after the other (never in
parallel), and writes a Markdown report (``--out``) plus the raw results as JSON
(``--json``, default: ``--out`` with ``.json``) and, beside the report, PNG charts of the main ratios
(bench/charts.py: ``<out stem>-throughput.png``, ``-resume.png``, ``-cache.png``), which the report shows.
Data lives under ``--work`` (default bench/.data/work) and is deleted at the end unless ``--keep-data``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_convert
import bench_files
import bench_handoff
import bench_handoff_report
import bench_loader
import bench_loader_stats
import bench_mix
import bench_lightchain
import bench_pipeline
import bench_plan
import bench_remote
import bench_textshards
import charts
import common
from common import get, log

SIDES = ("shardstream", "mosaic", "litdata")
SCRIPTS = {"shardstream": "bench_shardstream.py", "mosaic": "bench_mosaic.py", "litdata": "bench_litdata.py"}
NAMES = {"shardstream": "shardstream", "mosaic": "mosaicml-streaming", "litdata": "litdata"}

TARGET_ITER_MOSAIC = 10.0
TARGET_ITER_LITDATA = 3.0
TARGET_RANDOM_MOSAIC = 8.0
TARGET_BATCH_SPS = 2e6
TARGET_BATCH_MEMCPY = 2.0
TARGET_WRITE_MOSAIC = 3.0


# -- running the sides ---------------------------------------------------------------------
def side_env(side: str, work: str) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if side == "shardstream":
        return env
    tmp = os.path.join(work, f"tmp-{side}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    env["TMPDIR"] = tmp
    if side == "mosaic":
        stubs = os.path.join(ROOT, "tests", "peer_stubs")
        env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    else:
        env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(tmp, "chunks")
        env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(tmp, "data")
        env["LITDATA_CACHE_DIR"] = os.path.join(tmp, "cache")
    return env


def run_side(side: str, python: str, work: str, args) -> dict:
    out_json = os.path.join(work, f"result-{side}.json")
    err_log = os.path.join(work, f"stderr-{side}.log")
    cmd = [python, os.path.join(HERE, SCRIPTS[side]), "--work", work, "--json", out_json,
           "--repeats", str(args.repeats)]
    if side != "litdata":
        cmd += ["--batch-size", str(args.batch_size)]
    log(f"== {NAMES[side]}: {' '.join(shlex.quote(c) for c in cmd)}")
    start = time.perf_counter()
    with open(err_log, "w") as err:
        proc = subprocess.run(cmd, check=False, env=side_env(side, work), cwd=ROOT, stdout=None, stderr=err)
    took = time.perf_counter() - start
    shutil.rmtree(os.path.join(work, f"tmp-{side}"), ignore_errors=True)
    if proc.returncode != 0 or not os.path.exists(out_json):
        with open(err_log) as f:
            tail = f.read()[-4000:]
        log(f"!! {NAMES[side]} failed (exit {proc.returncode}); stderr tail:\n{tail}")
        return {"library": NAMES[side], "error": f"exit status {proc.returncode}", "stderr_tail": tail,
                "wall_s": took}
    with open(out_json) as f:
        res = json.load(f)
    res["wall_s"] = took
    log(f"== {NAMES[side]} done in {took:.1f}s")
    return res


# -- machine ---------------------------------------------------------------------------------
def machine_info() -> dict:
    info = {"cpu": platform.processor() or "unknown", "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    info["ram_gib"] = int(line.split()[1]) / 2**20
                    break
    except OSError:
        pass
    return info


# -- formatting ------------------------------------------------------------------------------
def sps(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def ratio(a, b) -> str:
    return "n/a" if not a or not b else f"{a / b:.1f}x"


def status(ok) -> str:
    return "n/a" if ok is None else ("**MET**" if ok else "**NOT MET**")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def stat_note(r) -> str:
    if not r:
        return ""
    n = r.get("repeats", 1)
    return "1 run" if n == 1 else f"{r.get('stat', 'best')} of {n}"


# -- the report ------------------------------------------------------------------------------
def summarize_targets(R: dict) -> list[dict]:
    ss, mo, lit = R.get("shardstream", {}), R.get("mosaic", {}), R.get("litdata", {})
    rows = []

    ss_iter = get(ss, "iterate", "default", "warm", "samples_per_s")
    mo_cfgs = {k: v for k, v in (get(mo, "iterate") or {}).items() if isinstance(v, dict)}
    mo_best_name = max(mo_cfgs, key=lambda k: mo_cfgs[k]["warm"]["samples_per_s"]) if mo_cfgs else None
    mo_best = mo_cfgs[mo_best_name]["warm"]["samples_per_s"] if mo_best_name else None
    rows.append(_target("Sequential dict iteration vs mosaicml-streaming (its best setting: "
                        f"{mo_best_name}), warm", ss_iter, mo_best, TARGET_ITER_MOSAIC))
    lit_iter = get(lit, "iterate", "default", "warm", "samples_per_s")
    rows.append(_target("Sequential dict iteration vs litdata, warm", ss_iter, lit_iter, TARGET_ITER_LITDATA))

    ss_rand = get(ss, "random", "default", "samples_per_s")
    mo_rand = get(mo, "random", "default", "samples_per_s")
    rows.append(_target("Random access ds[i] vs mosaicml-streaming", ss_rand, mo_rand, TARGET_RANDOM_MOSAIC))

    for key, r in (get(ss, "batches_mixed") or {}).items():
        rows.append({
            "target": f"Batch path ds.batches({R['config']['batch_size']}), mixed ~1 KB samples ({key}): "
                      ">= 2M samples/s",
            "measured": f"{sps(r['samples_per_s'])} samples/s",
            "ratio": f"{r['samples_per_s'] / TARGET_BATCH_SPS:.2f}x of 2M",
            "required": ">= 2,000,000 samples/s",
            "met": r["samples_per_s"] >= TARGET_BATCH_SPS,
        })

    for kind, r in (get(ss, "batches_fixed") or {}).items():
        fast = r["samples_per_s"] >= TARGET_BATCH_SPS
        near = r["slowdown_vs_memcpy"] <= TARGET_BATCH_MEMCPY
        rows.append({
            "target": f"Batch path ds.batches({R['config']['batch_size']}), fixed-shape `{kind}` "
                      f"({r['sample_bytes']:,} B/sample): >= 2M samples/s or within 2x of memcpy",
            "measured": f"{sps(r['samples_per_s'])} samples/s, {r['GB_per_s']:.2f} GB/s; memcpy "
                        f"{r['memcpy']['GB_per_s']:.2f} GB/s",
            "ratio": f"{r['slowdown_vs_memcpy']:.2f}x slower than memcpy",
            "required": ">= 2,000,000 samples/s or <= 2.00x",
            "met": fast or near,
        })

    for comp in ("none", "zstd"):
        a = get(ss, "write", comp, "samples_per_s")
        b = get(mo, "write", comp, "samples_per_s")
        rows.append(_target(f"Writing vs streaming.MDSWriter, compression={comp}", a, b, TARGET_WRITE_MOSAIC))
    return (rows + bench_plan.target_rows(R.get("plan")) + _loader_targets(R.get("loader"))
            + bench_mix.target_rows(R.get("mix")) + bench_files.target_rows(R.get("files"))
            + bench_pipeline.target_rows(R.get("pipeline")) + bench_lightchain.target_rows(R.get("lightchain"))
            + bench_convert.target_rows(R.get("convert"))
            + bench_textshards.target_rows(R.get("textshards"))
            + bench_handoff_report.target_rows(R.get("handoff"))
            + bench_handoff_report.target_rows(R.get("handoff_gpu"))
            + bench_loader_stats.target_rows(R.get("loader_stats")))


def _loader_targets(L: dict | None) -> list[dict]:
    """The DataLoader targets (section of bench_loader.py): throughput ratio and flat, fast resumption."""
    if not L:
        return []
    S = bench_loader.summary(L)
    ss = get(L, "throughput", "shuffled", "shardstream", "steady_samples_per_s")
    mo = get(L, "throughput", "shuffled", "mosaic", "steady_samples_per_s")
    rows = [_target("PyTorch DataLoader, 2 workers, batch 32, ~1 KB samples, shuffled, vs mosaicml-streaming's "
                    "StreamingDataLoader", ss, mo, bench_loader.TARGET_RATIO)]
    mine = S.get("shardstream") or {}
    if mine.get("worst_total") is not None:
        worst = mine["worst_total"]
        rows.append({"target": "load_state_dict at 10/50/90% of an epoch -> first batch (constructor included): "
                               "well under 1 s, flat",
                     "measured": f"slowest {worst:.3f} s, slowest / fastest {mine['spread']:.2f}x",
                     "ratio": f"{worst / bench_loader.TARGET_RESUME_S:.3f} of the limit",
                     "required": f"< {bench_loader.TARGET_RESUME_S:g} s", "met": worst < bench_loader.TARGET_RESUME_S})
    return rows


def _target(name: str, ours, theirs, need: float) -> dict:
    ok = None if not ours or not theirs else ours / theirs >= need
    return {"target": name, "measured": f"{sps(ours)} vs {sps(theirs)} samples/s",
            "ratio": ratio(ours, theirs), "required": f">= {need:g}x", "met": ok}


def render(R: dict, images: list[tuple[str, str]] = ()) -> str:
    """The report; ``images``: ``[(caption, file name), ...]`` of the charts drawn beside it (charts.draw)."""
    cfg, mach = R["config"], R["machine"]
    ss, mo, lit = R.get("shardstream", {}), R.get("mosaic", {}), R.get("litdata", {})
    L = ["# shardstream benchmarks", "",
         f"Generated by `bench/run.py` on {R['date']} (total run time {R['total_s']:.0f} s).", "",
         "## Machine and versions", ""]
    L += [(f"- CPU: {mach['cpu']}, {mach['logical_cpus']} logical CPUs ({mach.get('usable_cpus')} usable), "
           f"RAM {mach.get('ram_gib', 0):.1f} GiB, {mach['os']}"),
          (f"- Load average before / after: {R['loadavg_before']} / {R['loadavg_after']} (the machine is shared; "
           "libraries ran one after the other, never in parallel)"),
          (f"- shardstream {ss.get('version', '?')} (git {R['git']}), Python {ss.get('python', '?')}, "
           f"numpy {ss.get('numpy', '?')} (project venv)"),
          (f"- mosaicml-streaming {mo.get('version', '?')}, litdata {lit.get('version', '?')}, torch "
           f"{mo.get('torch') or lit.get('torch') or '?'} (CPU), "
           f"Python {mo.get('python') or lit.get('python') or '?'}, "
           f"numpy {mo.get('numpy') or lit.get('numpy') or '?'} (peer venv)"), "",
          ("Command: `make bench`, which runs" if R["make_form"] else "Command:"), "", "```", R["command"], "```",
          ""]
    L += charts.markdown(list(images))
    for side in SIDES:
        if R.get(side, {}).get("error"):
            L += [f"**{NAMES[side]} failed** ({R[side]['error']}); its rows are missing. stderr tail:", "",
                  "```", R[side].get("stderr_tail", "")[-1500:], "```", ""]

    L += ["## Workload", "",
          (f"- **mixed** ({cfg['samples']:,} samples, {cfg['mixed_payload_bytes'] / 1e6:,.0f} MB of payload, "
           f"~{cfg['mixed_payload_bytes'] / cfg['samples']:,.0f} B/sample): `tokens` int32 array of random length "
           "64..512 (`ndarray:int32`), `text` str of 30..60 ASCII chars (`str`), `label` int (`int`)."),
          (f"- **vec** ({cfg['vec_samples']:,} samples): `x` `ndarray:float32:1024` + `label` int "
           "(4,104 B/sample incl. the 8-byte label)."),
          (f"- **img** ({cfg['img_samples']:,} samples): `img` `ndarray:uint8:3,64,64` + `label` int "
           "(12,296 B/sample)."),
          f"- Random access: the same {cfg['random']:,} random indices (drawn with replacement) for every library.",
          (f"- All data is generated once from seed {common.SEED} (`bench/common.py`), saved as .npz and loaded by "
           "every library's process, so all libraries write and read identical samples. Every dataset is written "
           "by the library that reads it, uncompressed, default shard size (64 MB) unless stated."), ""]

    # 1. write
    L += ["## 1. Write throughput (mixed)", ""]
    rows = []
    for name, r, comp, what in (
        ("shardstream `MDSWriter`", get(ss, "write", "none"), "none", "none"),
        ("mosaicml-streaming `MDSWriter`", get(mo, "write", "none"), "none", "none"),
        ("shardstream `MDSWriter`", get(ss, "write", "zstd"), "zstd", "zstd (level 3)"),
        ("mosaicml-streaming `MDSWriter`", get(mo, "write", "zstd"), "zstd", "zstd (level 3)"),
        ("litdata `optimize(num_workers=1, chunk_bytes='64MB')`", get(lit, "write", "optimize"), "none", "none"),
        ("litdata `BinaryWriter(chunk_bytes='64MB')` (in-process)", get(lit, "write", "binary_writer"), "none",
         "none"),
    ):
        if not r:
            continue
        rows.append([name, what, sps(r["samples_per_s"]), f"{r['MB_per_s']:,.0f}",
                     f"{r['disk_bytes'] / 1e6:,.0f}", stat_note(r),
                     ratio(get(ss, "write", comp, "samples_per_s"), r["samples_per_s"])])
    L += table(["Writer", "Compression", "samples/s", "MB/s (payload)", "on disk (MB)", "stat",
                "shardstream speed-up"], rows)
    L += ["", ("Timed: from constructing the writer to the end of its `with` block (every shard and `index.json` "
           "written; no fsync), with every sample already built as a dict in memory. For litdata `optimize`, the "
           "whole call is timed: it calls `fn(i)` for each of the inputs `range(N)` in one spawned worker process "
           "(`fn` builds sample `i` from the arrays the worker loads from the .npz), serializes, writes chunks and "
           "merges the index, so it includes process start-up (~2-3 s incl. importing torch). shardstream's "
           "`MDSWriter` hands finished shards (compression, hashing, file write) to 2 background threads; "
           "mosaicml-streaming's does that work inline. The in-process "
           "`BinaryWriter` row (the writer `optimize` uses) is the closest analogue to `MDSWriter`. MB/s counts "
           "payload bytes (token bytes + UTF-8 text bytes + 8 per label), the same for every library."), ""]

    # 2. iterate
    L += ["## 2. Sequential iteration of dict samples (mixed)", ""]
    ss_warm = get(ss, "iterate", "default", "warm", "samples_per_s")
    rows = []

    def it_row(name, settings, r):
        rows.append([name, settings, sps(get(r, "first", "samples_per_s")), sps(get(r, "warm", "samples_per_s")),
                     stat_note(get(r, "warm")), ratio(ss_warm, get(r, "warm", "samples_per_s"))])

    if get(ss, "iterate", "default"):
        it_row("shardstream", "`for s in ds`", ss["iterate"]["default"])
    for k, v in (get(mo, "iterate") or {}).items():
        if isinstance(v, dict):
            label = f"default (predownload={v['predownload']})" if k == "default" else k
            if k == mo["iterate"].get("best_tuned"):
                label += " (best tuned)"
            it_row("mosaicml-streaming", label, v)
    if get(lit, "iterate", "default"):
        it_row("litdata", "default", lit["iterate"]["default"])
    L += table(["Library", "Settings", "first pass samples/s", "warm samples/s", "warm stat",
                "shardstream speed-up (warm)"], rows)
    L += ["", ("Each library iterates its own copy of the mixed dataset in the main process (no DataLoader, no "
           "workers): `for s in ds: acc += len(s['tokens']) + s['label']`, and the sum is checked against the "
           "source data, so a lazy sample must really be decoded. mosaicml-streaming: `StreamingDataset(local=dir, "
           f"remote=None, shuffle=False, batch_size={cfg['batch_size']}, predownload=...)`; litdata: "
           "`StreamingDataset(dir)`; shardstream: `StreamingDataset(local=dir)` (no batch_size, so the epoch is "
           "exactly the dataset in its own order, through the epoch plan; with a batch size the plan pads the "
           "last global batch with repeats). *First pass* = first epoch of a freshly constructed dataset object; "
           "*warm* = "
           "later epochs of the same object. The shard files were just written, so they are in the OS page cache "
           "in both cases (the page cache is never dropped: this machine is shared)."), ""]

    # 3. random
    L += ["## 3. Random access `ds[i]` (mixed)", ""]
    ss_rand = get(ss, "random", "default", "samples_per_s")
    rows = []
    if get(ss, "random", "default"):
        r = ss["random"]["default"]
        rows.append(["shardstream", "default", f"{r['count']:,}", sps(r["samples_per_s"]), stat_note(r), "1.0x"])
    if get(mo, "random", "default"):
        r = mo["random"]["default"]
        rows.append(["mosaicml-streaming", "default", f"{r['count']:,}", sps(r["samples_per_s"]), stat_note(r),
                     ratio(ss_rand, r["samples_per_s"])])
    for k in ("default", "batch_decode=False"):
        r = get(lit, "random", k)
        if r:
            rows.append(["litdata", k, f"{r['count']:,}", sps(r["samples_per_s"]), stat_note(r),
                         ratio(ss_rand, r["samples_per_s"])])
    L += table(["Library", "Settings", "indices", "samples/s", "stat", "shardstream speed-up"], rows)
    L += ["", ("Timed: `for i in indices: acc += len(ds[i]['tokens']) + ds[i]['label']` (one `ds[i]` per index; "
           "the sum is checked). The dataset object is opened before the timer; for litdata one `ds[0]` is read "
           "first. litdata's default `batch_decode='auto'` decodes a window of items around each requested index, "
           f"so its default row uses only the first {get(lit, 'random', 'default', 'count') or 0:,} of the indices "
           "(one run); `batch_decode=False` decodes one item per access."), ""]

    # 4. batches
    L += [f"## 4. Batch path `ds.batches({cfg['batch_size']})`", "", "### Mixed workload", ""]
    rows = []
    for k, label in (("all", "all columns (`tokens` as `Ragged`, `text` as list of str, `label` array)"),
                     ("tokens+label", "`columns=['tokens', 'label']`")):
        r = get(ss, "batches_mixed", k)
        if r:
            rows.append([label, sps(r["samples_per_s"]), f"{r['GB_per_s']:.2f}", stat_note(r),
                         ratio(r["samples_per_s"], ss_warm)])
    L += table(["shardstream columns", "samples/s", "GB/s (payload of the columns)", "stat",
                "vs shardstream dict iteration"], rows)
    L += ["", "### Large fixed-shape samples", ""]
    rows = []
    for kind, r in (get(ss, "batches_fixed") or {}).items():
        m = get(mo, "stack_fixed", kind)
        rows.append([f"`{kind}` ({r['sample_bytes']:,} B)", f"{r['samples']:,}", sps(r["samples_per_s"]),
                     f"{r['GB_per_s']:.2f}", f"{r['memcpy']['GB_per_s']:.2f}", f"{r['slowdown_vs_memcpy']:.2f}x",
                     sps(get(m, "samples_per_s")), "n/a" if not m else f"{m['GB_per_s']:.2f}",
                     ratio(r["samples_per_s"], get(m, "samples_per_s"))])
    L += table(["Dataset", "samples", "shardstream samples/s", "shardstream GB/s", "numpy memcpy GB/s",
                "shardstream time / memcpy time", "mosaic iterate + np.stack samples/s", "mosaic GB/s",
                "shardstream speed-up"], rows)
    L += ["", (f"shardstream: every batch of `ds.batches({cfg['batch_size']})` over the whole dataset (arrays of "
           f"shape `({cfg['batch_size']}, ...)` copied out of the memory-mapped shards), warm (after one untimed "
           "pass). numpy memcpy baseline: the same bytes (sample arrays + labels), copied batch by batch with "
           "`np.copyto` from a preallocated in-memory array into a reused preallocated output, i.e. the cost of "
           "touching every byte once. mosaicml-streaming has no batch decoder: for reference, its "
           f"`StreamingDataset` is iterated in the main process and every {cfg['batch_size']} samples are collated "
           "with `np.stack` (the work a DataLoader collate would do), warm, with the best predownload from "
           "section 2.")]
    notes = [r["note"] for r in (get(ss, "batches_fixed") or {}).values() if r.get("note")]
    for n in notes:
        L += ["", f"**Note:** {n}."]
    L += [""]

    n = 5
    if R.get("plan"):
        L += bench_plan.section(R["plan"], f"## {n}. Epoch planning", targets=False)
        n += 1
    if R.get("remote"):
        L += [bench_remote.markdown(R["remote"]).replace("## Streaming from S3", f"## {n}. Streaming from S3", 1), ""]
        n += 1
    if R.get("loader"):
        L += [bench_loader.markdown(R["loader"]).replace("## PyTorch DataLoader", f"## {n}. PyTorch DataLoader", 1),
              ""]
        if R.get("loader_stats"):
            L += [bench_loader_stats.markdown(R["loader_stats"]), ""]
        n += 1
    if R.get("mix"):
        L += [bench_mix.markdown(R["mix"]).replace("## Mixing many streams", f"## {n}. Mixing many streams", 1), ""]
        n += 1
    if R.get("files"):
        section = bench_files.markdown(R["files"], targets=False)
        L += [section.replace("## Reading Parquet", f"## {n}. Reading Parquet", 1), ""]
        n += 1
    if R.get("pipeline"):
        L += [bench_pipeline.markdown(R["pipeline"]).replace("## Text LM", f"## {n}. Text LM", 1), ""]
        n += 1
    if R.get("lightchain"):
        L += [bench_lightchain.markdown(R["lightchain"]).replace("## Light chain", f"## {n}. Light chain", 1), ""]
        n += 1
    if R.get("convert"):
        L += [bench_convert.markdown(R["convert"]).replace("## Converting", f"## {n}. Converting", 1), ""]
        n += 1
    if R.get("textshards"):
        L += [bench_textshards.markdown(R["textshards"]).replace("## JSON, CSV", f"## {n}. JSON, CSV", 1), ""]
        n += 1
    if R.get("handoff"):
        L += [bench_handoff_report.markdown(R["handoff"]).replace("## Handing", f"## {n}. Handing", 1), ""]
        n += 1
    if R.get("handoff_gpu"):  # measured on a GPU machine (bench/device_handoff.sh), put here with --only handoffgpu
        section = bench_handoff_report.markdown(R["handoff_gpu"])
        L += [section.replace("## Handing batches to the training process",
                              f"## {n}. Handing batches to the training process: a GPU machine", 1), ""]
        n += 1
    L += [f"## {n}. Summary against the targets", ""]
    rows = [[s["target"], s["measured"], s["ratio"], s["required"], status(s["met"])] for s in R["summary"]]
    L += table(["Target", "Measured", "Ratio", "Required", "Status"], rows)
    met = sum(1 for s in R["summary"] if s["met"])
    L += ["", f"{met} of {len(R['summary'])} targets met in this run.", ""]

    L += ["## Method", "",
          "- Each library runs in its own subprocess (shardstream in the project venv, the peers in the peer "
          "venv), sequentially. Per-side wall times: "
          + ", ".join(f"{NAMES[s]} {R[s]['wall_s']:.0f} s" for s in SIDES if s in R) + ".",
          (f"- Repeats: `--repeats {cfg['repeats']}`. Throughput is from the best (minimum-time) repeat; the "
           "\"stat\" columns say how many runs each number is the best of. Most measurements use all repeats; "
           "slower ones (zstd writes, mosaicml-streaming epochs, litdata's writers and its default random access) "
           "use fewer, as listed. Every repeat's time is in `docs/benchmarks.json`."),
          ("- Warm vs cold: nothing here is disk-cold. Files are read right after being written, from the page "
           "cache; \"first pass\" measures a library's start-up work on a new dataset object (opening shards, "
           "mosaicml-streaming's shared-memory set-up, prefetch threads), \"warm\" its steady state."),
          ("- The machine is shared with other work (other processes may run during the benchmark; see the load "
           "averages), so numbers move between runs: by ~10-20 % for most rows and by up to ~40 % for the zstd "
           "write, whose compression runs in background threads that compete for the 2 cores. Ratios near a "
           "threshold (random access, zstd write, iteration vs litdata) can land on either side of it from one "
           "run to the next."),
          ("- Raw results: `docs/benchmarks.json`. Reproduce with `make bench` (or `bench/run.py --help` for "
           "smaller runs, e.g. `--samples 50000`)."), ""]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", help="python of the venv holding mosaicml-streaming and litdata "
                    "(without it only shardstream runs)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--json", help="raw results (default: --out with .json)")
    ap.add_argument("--samples", type=int, default=200_000, help="mixed-workload samples")
    ap.add_argument("--vec-samples", type=int, default=100_000, help="samples of float32[1024]")
    ap.add_argument("--img-samples", type=int, default=40_000, help="samples of uint8[3,64,64]")
    ap.add_argument("--random", type=int, default=100_000, help="random-access indices")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "work"))
    ap.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of " + ",".join(SIDES))
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--plan-sizes", default="1e6,1e8,1e9", help="dataset sizes of the epoch-planning section "
                    "(bench/bench_plan.py; comma-separated, empty to skip)")
    ap.add_argument("--remote-samples", type=int, default=bench_remote.DEFAULT_SAMPLES,
                    help="samples of the streaming-from-S3 section (bench/bench_remote.py; 0 to skip)")
    ap.add_argument("--loader-samples", type=int, default=bench_loader.DEFAULT_SAMPLES,
                    help="samples of the PyTorch DataLoader section (bench/bench_loader.py; 0 to skip)")
    ap.add_argument("--loader-repeats", type=int, default=3,
                    help="timed epochs per DataLoader throughput case (0 skips the throughput part)")
    ap.add_argument("--loader-resume-repeats", type=int, default=3,
                    help="fresh processes per library and position for DataLoader resumption (0 skips it)")
    ap.add_argument("--loader-wait", type=float, default=30.0,
                    help="before each DataLoader measurement, wait up to this many seconds for the CPUs to be "
                    "at most 25%% busy (0: never wait)")
    ap.add_argument("--loader-stats-repeats", type=int, default=bench_loader_stats.DEFAULT_REPEATS,
                    help="rounds of stats off / on processes per loader setting in the DataLoader section's stats "
                    "subsection (bench/bench_loader_stats.py; 0 to skip)")
    ap.add_argument("--mix-streams", default=",".join(map(str, bench_mix.DEFAULT_STREAMS)),
                    help="stream counts of the stream-mixing section (bench/bench_mix.py; comma-separated, empty "
                    "to skip)")
    ap.add_argument("--mix-repeats", type=int, default=3,
                    help="fresh processes per library for the mixing section's start and resume times")
    ap.add_argument("--files-rows-per-file", type=int, default=bench_files.DEFAULT_ROWS,
                    help="rows per file of the Parquet / JSONL section (bench/bench_files.py; 3 files; 0 to skip)")
    ap.add_argument("--files-limit", type=int, default=bench_files.DEFAULT_LIMIT,
                    help="rows per pass in the Parquet / JSONL section, the same on every side (0: all rows)")
    ap.add_argument("--files-repeats", type=int, default=3,
                    help="timed passes per sequential measurement of the Parquet / JSONL section")
    ap.add_argument("--pipeline-docs", type=int, default=bench_pipeline.DEFAULT_DOCS,
                    help="documents of the text LM pipeline section (bench/bench_pipeline.py; 0 to skip)")
    ap.add_argument("--lightchain-rows", type=int, default=bench_lightchain.DEFAULT_ROWS,
                    help="rows of the light chain section (bench/bench_lightchain.py; 0 to skip)")
    ap.add_argument("--lightchain-repeats", type=int, default=5, help="fresh processes per light chain case")
    ap.add_argument("--lightchain-wait", type=float, default=10.0,
                    help="before each light chain measurement, wait up to this many seconds for the CPUs to be at "
                    "most 25%% busy (0: never wait)")
    ap.add_argument("--pipeline-repeats", type=int, default=3, help="epochs (fresh processes) per pipeline case")
    ap.add_argument("--pipeline-resume-repeats", type=int, default=3,
                    help="resumptions per position in the pipeline section (0 skips them)")
    ap.add_argument("--convert-rows", type=int, default=bench_convert.DEFAULT_ROWS,
                    help="Parquet rows of the converting-to-MDS section (bench/bench_convert.py; 8 files; 0 to skip)")
    ap.add_argument("--convert-repeats", type=int, default=1, help="runs (fresh processes) per conversion case")
    ap.add_argument("--textshards-samples", type=int, default=bench_textshards.DEFAULT_SAMPLES,
                    help="samples of the JSON / CSV shards section (bench/bench_textshards.py; 0 to skip)")
    ap.add_argument("--handoff-samples", type=int, default=bench_handoff.DEFAULT_SAMPLES,
                    help="samples of the section on handing batches to the training process (bench/bench_handoff.py; "
                    "0 to skip)")
    ap.add_argument("--handoff-wait", type=float, default=30.0,
                    help="before each handoff measurement, wait up to this many seconds for the CPUs to be at most "
                    "25%% busy (0: never wait)")
    ap.add_argument("--only", choices=sorted(ONLY), help="run only this section, put its results into the raw "
                    "results of the last full run (--json) and re-render --out from them; with --from-json, take "
                    "the section's results from that file (bench/bench_pipeline.py, bench/bench_lightchain.py, "
                    "bench/bench_convert.py, "
                    "bench/bench_textshards.py or bench/bench_handoff.py --json) instead of measuring")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run")
    args = ap.parse_args()
    if args.only:
        run_only(args)
        return
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
        R["summary"] = summarize_targets(R)
        with open(args.out, "w") as f:
            f.write(render(R, draw_charts(R, args.out)))
        log(f"re-rendered {args.out} from {args.from_json}")
        return
    total_start = time.perf_counter()
    sides = [s for s in args.sides.split(",") if s]
    for s in sides:
        if s not in SIDES:
            ap.error(f"unknown side {s!r}")
    if not args.peer_python:
        sides = [s for s in sides if s == "shardstream"]
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    R: dict = {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT)
                                                      if sys.executable.startswith(ROOT) else sys.executable,
                                                      os.path.relpath(os.path.abspath(__file__), ROOT),
                                                      *sys.argv[1:]]),
        "make_form": all(a in ("--peer-python", "--out") for a in sys.argv[1:] if a.startswith("--")),
        "machine": machine_info(), "git": common.git_rev(), "loadavg_before": _load(),
        "config": {"samples": args.samples, "vec_samples": args.vec_samples, "img_samples": args.img_samples,
                   "random": args.random, "repeats": args.repeats, "batch_size": args.batch_size,
                   "seed": common.SEED, "sides": sides},
    }
    try:
        log(f"generating the workload in {work}")
        t = time.perf_counter()
        common.generate_mixed(os.path.join(work, "mixed.npz"), args.samples)
        common.generate_fixed(os.path.join(work, "vec.npz"), "vec", args.vec_samples)
        common.generate_fixed(os.path.join(work, "img.npz"), "img", args.img_samples)
        common.generate_indices(os.path.join(work, "indices.npz"), args.samples, args.random)
        R["config"]["mixed_payload_bytes"] = common.Mixed(os.path.join(work, "mixed.npz")).payload_bytes
        R["generate_s"] = time.perf_counter() - t
        log(f"generated in {R['generate_s']:.1f}s")
        for side in sides:
            python = sys.executable if side == "shardstream" else args.peer_python
            R[side] = run_side(side, python, work, args)
    finally:
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    if args.plan_sizes:
        R["plan"] = bench_plan.run_all(bench_plan.parse_sizes(args.plan_sizes), bench_plan.ALGOS, args.peer_python)
    if args.remote_samples:
        R["remote"] = bench_remote.run_remote(os.path.join(work, "remote"), args.peer_python, args.remote_samples,
                                              keep_data=args.keep_data)
    if args.loader_samples:
        R["loader"] = bench_loader.run_loader(os.path.join(work, "loader"), args.peer_python, args.loader_samples,
                                              repeats=args.loader_repeats,
                                              resume_repeats=args.loader_resume_repeats, wait_s=args.loader_wait,
                                              keep_data=args.keep_data)
        wrong = bench_loader.failed(R["loader"])
        if wrong:
            log(f"!! DataLoader section: failed or wrong: {', '.join(wrong)}")
    if args.loader_samples and args.loader_stats_repeats:
        R["loader_stats"] = _run_loader_stats(args)
    if args.mix_streams:
        R["mix"] = bench_mix.run_mix(os.path.join(work, "mix"), args.peer_python,
                                     bench_mix.parse_streams(args.mix_streams), repeats=args.mix_repeats,
                                     keep_data=args.keep_data)
        wrong = bench_mix.failed(R["mix"])
        if wrong:
            log(f"!! stream-mixing section: failed or wrong: {', '.join(wrong)}")
    if args.files_rows_per_file:
        R["files"] = _run_files(args, work)
    if args.pipeline_docs:
        R["pipeline"] = _run_pipeline(args)
    if args.lightchain_rows:
        R["lightchain"] = _run_lightchain(args)
    if args.convert_rows:
        R["convert"] = _run_convert(args)
    if args.textshards_samples:
        R["textshards"] = _run_textshards(args)
    if args.handoff_samples:
        R["handoff"] = _run_handoff(args)
    R["loadavg_after"] = _load()
    R["summary"] = summarize_targets(R)
    R["total_s"] = time.perf_counter() - total_start
    out_json = args.json or os.path.splitext(args.out)[0] + ".json"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(render(R, draw_charts(R, args.out)))
    with open(out_json, "w") as f:
        json.dump(R, f, indent=1)
    log(f"wrote {args.out} and {out_json} in {R['total_s']:.0f}s total")
    for s in R["summary"]:
        print(f"  {status(s['met']).strip('*'):8s} {s['ratio']:>28s}  {s['target']}")
    if any(R.get(s, {}).get("error") for s in sides):
        sys.exit(1)


def _run_files(args, work: str = "") -> dict:
    R = bench_files.run_files(os.path.join(work or os.path.abspath(args.work), "files"), args.peer_python,
                              args.files_rows_per_file, limit=args.files_limit or None, repeats=args.files_repeats,
                              keep_data=args.keep_data)
    wrong = bench_files.failed(R)
    if wrong:
        log(f"!! Parquet / JSONL section: failed or wrong: {', '.join(wrong)}")
    return R


def _run_pipeline(args) -> dict:
    R = bench_pipeline.run_pipeline(bench_pipeline.DATA, args.peer_python, args.pipeline_docs,
                                    repeats=args.pipeline_repeats, resume_repeats=args.pipeline_resume_repeats)
    wrong = bench_pipeline.failed(R)
    if wrong:
        log(f"!! text LM pipeline section: failed or wrong: {', '.join(wrong)}")
    return R


def _run_lightchain(args) -> dict:
    R = bench_lightchain.run_lightchain(bench_lightchain.DATA, args.lightchain_rows, repeats=args.lightchain_repeats,
                                        wait_s=args.lightchain_wait)
    wrong = bench_lightchain.failed(R)
    if wrong:
        log(f"!! light chain section: failed or wrong: {', '.join(wrong)}")
    return R


def _run_convert(args) -> dict:
    R = bench_convert.run_convert(bench_convert.DATA, args.peer_python, args.convert_rows,
                                  repeats=args.convert_repeats)
    wrong = bench_convert.failed(R)
    if wrong:
        log(f"!! converting-to-MDS section: failed or wrong: {', '.join(wrong)}")
    return R


def _run_textshards(args) -> dict:
    R = bench_textshards.run_textshards(bench_textshards.DATA, args.peer_python, args.textshards_samples)
    wrong = bench_textshards.failed(R)
    if wrong:
        log(f"!! JSON / CSV shards section: failed or wrong: {', '.join(wrong)}")
    return R


def _run_loader_stats(args) -> dict:
    R = bench_loader_stats.run_stats(os.path.join(args.work, "loader-stats"), repeats=args.loader_stats_repeats,
                                     keep_data=args.keep_data)
    wrong = bench_loader_stats.failed(R)
    if wrong:
        log(f"!! DataLoader stats subsection: failed or wrong: {', '.join(wrong)}")
    return R


def _run_handoff(args) -> dict:
    R = bench_handoff.run_handoff(os.path.join(args.work, "handoff"), args.peer_python, args.handoff_samples,
                                  wait_s=args.handoff_wait, peer_path=os.path.join(ROOT, "tests", "peer_stubs"),
                                  keep_data=args.keep_data)
    wrong = bench_handoff.failed(R)
    if wrong:
        log(f"!! handoff section: failed or wrong: {', '.join(wrong)}")
    return R


def _needs_gpu_json(args) -> dict:
    raise SystemExit("--only handoffgpu takes the results of bench/device_handoff.sh, run on a GPU machine: pass "
                     "their handoff.json with --from-json")


# --only SECTION: (key in the raw results, how to measure it, its Markdown alone)
ONLY = {"files": ("files", _run_files, bench_files.markdown),
        "pipeline": ("pipeline", _run_pipeline, bench_pipeline.markdown),
        "lightchain": ("lightchain", _run_lightchain, bench_lightchain.markdown),
        "convert": ("convert", _run_convert, bench_convert.markdown),
        "textshards": ("textshards", _run_textshards, bench_textshards.markdown),
        "loaderstats": ("loader_stats", _run_loader_stats, bench_loader_stats.markdown),
        "handoff": ("handoff", _run_handoff, bench_handoff_report.markdown),
        "handoffgpu": ("handoff_gpu", _needs_gpu_json, bench_handoff_report.markdown)}


def run_only(args) -> None:
    """``--only files`` / ``pipeline`` / ``lightchain`` / ``convert`` / ``textshards`` / ``loaderstats`` /
    ``handoff``: that section alone,
    merged into the raw results of the last full run (the other
    sections are kept as they were measured), then the whole report re-rendered. Without earlier raw
    results, --out gets the section alone."""
    out_json = args.json or os.path.splitext(args.out)[0] + ".json"
    if args.from_json:
        with open(args.from_json) as f:
            section = json.load(f)
    else:
        section = ONLY[args.only][1](args)
    if not os.path.exists(out_json):
        with open(args.out, "w") as f:
            f.write(ONLY[args.only][2](section))
        log(f"no earlier raw results at {out_json}: wrote the section alone to {args.out}")
        return
    with open(out_json) as f:
        R = json.load(f)
    R[ONLY[args.only][0]] = section
    R["summary"] = summarize_targets(R)
    with open(args.out, "w") as f:
        f.write(render(R, draw_charts(R, args.out)))
    with open(out_json, "w") as f:
        json.dump(R, f, indent=1)
    log(f"put the {args.only} section into {out_json} and re-rendered {args.out}")


def draw_charts(R: dict, out: str) -> list[tuple[str, str]]:
    """The charts of ``R`` drawn beside the report ``out`` (``docs/benchmarks.md`` ->
    ``docs/benchmarks-*.png``); without matplotlib, none (the report then links none) and a hint."""
    stem = os.path.splitext(os.path.basename(out))[0]
    try:
        images = charts.draw(R, os.path.dirname(os.path.abspath(out)), stem)
    except ImportError as e:
        log(f"!! no charts: {e}")
        return []
    log(f"drew {', '.join(file for _, file in images) or 'no chart'} beside {out}")
    return images


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


if __name__ == "__main__":
    main()
