"""Handing batches to the training process: how fast they arrive, and what they cost that process.

    .venv/bin/python bench/bench_handoff.py [--samples 256000] [--out handoff.md] [--json handoff.json]
    python3 -u bench/bench_handoff.py --gpu --peer-python python3 --peer-path '' --budget-s 320 ...

(``--help`` lists the options; ``bench/device_handoff.sh`` runs the GPU curve on a fresh GPU machine.)

The driver (this file, project venv) generates ``--samples`` samples of ~1 KB once from a fixed seed
(the DataLoader section's: ``x``: ``uint8[1000]`` random bytes, ``label``: int) and writes them once
with shardstream's ``MDSWriter`` (64 MB shards). Every measurement then runs in a fresh subprocess,
one after the other (``bench_handoff_sides.py``; mosaicml-streaming's in the peer venv,
``bench_handoff_peers.py``):

1. *Handoff* (the default run): shuffled batches of 1,024 and 256 through 2 workers, from
   shardstream's ``StreamingDataLoader`` (default settings, and ``transfer="queue"`` /
   ``transfer="ring"`` where the loader takes that keyword) and from torch's own ``DataLoader`` over
   a map-style dataset whose items are ready-made batches (the reference: no decoding, only torch's
   shared-memory tensors and worker queue). Steady samples/s, GB/s delivered, the training
   process's CPU per MB delivered, the workers' CPU per MB.
2. *Per-sample path with a user collate_fn* (batch 32, 2 workers, shuffled): the same module-level
   ``collate`` for shardstream and for mosaicml-streaming at several ``predownload`` values.
3. *GPU curve* (``--gpu``, instead of 1 and 2): workers 1, 2, 4, 8, 14 and batches of 1,024 and 256;
   shardstream unpinned, pinned and moved with ``.to("cuda", non_blocking=True)``, and with
   ``device="cuda"`` where the loader takes it; mosaicml-streaming and torch's mechanism unpinned
   and pinned + moved, all with persistent workers. Each case runs for a fixed steady window
   (``--window-s``); ``--budget-s`` bounds the whole run, dropping the lowest-priority cases first
   (batches of 1,024 moved to the GPU, then unpinned, then batches of 256). The JSON and the report
   are written again after every case.

``bench/run.py`` calls :func:`run_handoff` (and ``bench_handoff_report.markdown``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import time
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_loader
import common
from common import log

DEFAULT_SAMPLES = 256_000
GPU_SAMPLES = 400_000
BATCHES = (1024, 256)
WORKERS = 2
GPU_WORKERS = (1, 2, 4, 8, 14)
COLLATE_BATCH = 32
PREDOWNLOADS = (None, 1024, 8192, 65536)
RUN_TIMEOUT_S = 600
GPU_BUDGET_S = 320.0
NO_PEER = "no mosaicml-streaming (`--peer-python`)"
GUESS_S = 10.0  # a case's wall time before any case of its library ran
GPU_START_S = 60.0  # a GPU case's time to start (imports, CUDA, workers) before it is taken for hung

# name -> (library, options, the keyword it needs); the order is the order of the table
HANDOFF_CASES = {
    "shardstream": ("shardstream", {}, None),
    "shardstream-queue": ("shardstream", {"transfer": "queue"}, "transfer"),
    "shardstream-ring": ("shardstream", {"transfer": "ring"}, "transfer"),
    "torch": ("torch", {}, None),
}
# name -> (library, mode): unpinned (read on the CPU), pinned (pin_memory=True, moved by the loop), device
GPU_CASES = {
    "shardstream": ("shardstream", "unpinned"),
    "shardstream-pinned": ("shardstream", "pinned"),
    "shardstream-device": ("shardstream", "device"),
    "mosaic": ("mosaic", "unpinned"),
    "mosaic-pinned": ("mosaic", "pinned"),
    "torch": ("torch", "unpinned"),
    "torch-pinned": ("torch", "pinned"),
}


class Runner:
    """Runs one measurement per fresh subprocess, in its library's venv, and records contention."""

    def __init__(self, work: str, peer_python: Optional[str], peer_path: str, wait_s: float,
                 max_busy: float = 0.25, deadline: Optional[float] = None) -> None:
        self.work, self.peer_python, self.peer_path = work, peer_python, peer_path
        self.wait_s, self.max_busy, self.deadline = wait_s, max_busy, deadline
        self.count = 0

    def env(self, library: str) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if library == "mosaic":
            tmp = os.path.join(self.work, "tmp-mosaic")
            os.makedirs(tmp, exist_ok=True)
            env["TMPDIR"] = tmp  # it leaves lock files there
            extra = [p for p in self.peer_path.split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        return env

    def command(self, library: str, cfg_path: str) -> list[str]:
        if library == "write":
            return [sys.executable, os.path.join(HERE, "bench_loader.py"), "--child", cfg_path]
        if library == "mosaic":
            return [self.peer_python, os.path.join(HERE, "bench_handoff_peers.py"), cfg_path]
        return [sys.executable, os.path.join(HERE, "bench_handoff_sides.py"), cfg_path]

    def left_s(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.perf_counter()

    def run(self, library: str, tag: str, cfg: dict, quiet: bool = True, timeout_s: float = RUN_TIMEOUT_S) -> dict:
        """Run one measurement (stopped after ``timeout_s``, or at the budget's end) and return its result."""
        self.count += 1
        tag = f"{self.count:03d}-{tag}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        common.emit(dict(cfg, library=library, out=out), cfg_path)
        waited = bench_loader.wait_quiet(self.max_busy, self.wait_s) if quiet and self.wait_s > 0 else {}
        cmd = self.command(library, cfg_path)
        log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}")
        timeout = max(5.0, min(timeout_s, self.left_s()))
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        return bench_loader.measured_run(cmd, self.env(library), ROOT, out, err_log, tag, waited, timeout)


def size(samples: int, workers: tuple[int, ...], batches: tuple[int, ...]) -> int:
    """``samples`` rounded up so that every worker count and batch size divides an epoch evenly."""
    step = math.lcm(*workers) * math.lcm(*batches)
    return -(-samples // step) * step


def skipped(reason: str) -> dict:
    return {"skipped": reason}


def needs(probe: dict, mode: str, keyword: Optional[str] = None) -> Optional[str]:
    """Why a case cannot run in this checkout or on this machine (None: it can)."""
    if keyword and not probe.get(keyword):
        return f"this checkout's StreamingDataLoader has no `{keyword}` keyword"
    if mode == "device" and not probe.get("device"):
        return "this checkout's StreamingDataLoader has no `device` keyword"
    if mode in ("pinned", "device") and not probe.get("cuda"):
        return "no CUDA device"
    return None


# -- the parts -----------------------------------------------------------------------------------------
def run_cpu_handoff(run: Runner, R: dict, base: dict, save: Callable[[], None]) -> None:
    """Part 1: every handoff case with 2 workers, for each batch size."""
    for batch in R["config"]["batches"]:
        out = R["handoff"].setdefault(str(batch), {})
        for case, (library, options, keyword) in HANDOFF_CASES.items():
            why = needs(R["probe"], "unpinned", keyword)
            if why:
                out[case] = skipped(why)
                continue
            cfg = dict(base, task="handoff", name=f"{case} B={batch}", batch=batch, workers=WORKERS,
                       options=options, warmup=1, epochs=R["config"]["repeats"],
                       skip=_skip(R, WORKERS))
            out[case] = run.run(library, f"{case}-b{batch}", cfg)
            save()


def run_collate(run: Runner, R: dict, base: dict, save: Callable[[], None]) -> None:
    """Part 2: the per-sample path with the shared user collate_fn, shardstream then each predownload."""
    cases = [("shardstream", "shardstream", None)]
    if "mosaic" in R["libraries"]:
        cases += [("mosaic", f"mosaic-{p or 'default'}", p) for p in R["config"]["predownloads"]]
    for library, case, predownload in cases:
        cfg = dict(base, task="collate", name=case, batch=COLLATE_BATCH, workers=WORKERS, shuffle=True,
                   predownload=predownload, repeats=R["config"]["collate_repeats"],
                   skip=R["config"]["collate_skip"])
        R["collate"][case] = run.run(library, f"collate-{case}", cfg)
        save()


def gpu_plan(batches: tuple[int, ...], workers: tuple[int, ...]) -> list[tuple[int, str, int]]:
    """Every (batch, case, workers) of the GPU curve, highest priority first: the largest batch moved to
    the GPU (all three libraries), then unpinned, then the next batch size the same way."""
    plan = []
    for batch in sorted(batches, reverse=True):
        for to_gpu in (True, False):
            for w in workers:
                plan += [(batch, case, w) for case, (_, mode) in GPU_CASES.items()
                         if (mode != "unpinned") == to_gpu]
    return plan


def run_gpu(run: Runner, R: dict, base: dict, save: Callable[[], None]) -> None:
    """Part 3: the GPU curve, in priority order, within the budget."""
    walls: dict[str, list[float]] = {}
    plan = gpu_plan(tuple(R["config"]["batches"]), tuple(R["config"]["workers"]))
    for k, (batch, case, w) in enumerate(plan, 1):
        library, mode = GPU_CASES[case]
        cell = R["gpu"].setdefault(str(batch), {}).setdefault(case, {})
        why = needs(R["probe"], mode) or (None if library in R["libraries"] else NO_PEER)
        guess = statistics.median(walls[library]) if walls.get(library) else GUESS_S
        if not why and run.left_s() < guess:
            why = f"dropped: {run.left_s():.0f} s of the budget left, a case takes ~{guess:.0f} s"
        if why:
            cell[str(w)] = skipped(why)
            continue
        log(f"[{k}/{len(plan)}, {R['config']['budget_s'] - run.left_s():.0f} s of {R['config']['budget_s']:.0f} s]"
            f" {case} B={batch} workers={w}")
        cfg = dict(base, task="handoff", name=f"{case} B={batch} W={w}", batch=batch, workers=w, mode=mode,
                   persistent=True, warmup=0, epochs=0, window_s=R["config"]["window_s"],
                   max_s=4 * R["config"]["window_s"] + 5, skip=_skip(R, w), skip_next=0)
        r = cell[str(w)] = run.run(library, f"gpu-{case}-b{batch}-w{w}", cfg, quiet=False,
                                   timeout_s=cfg["max_s"] + GPU_START_S)
        if "timed out" in r.get("error", "") and run.left_s() <= 0:
            cell[str(w)] = dict(r, skipped="cut off at the end of the budget")
        walls.setdefault(library, []).append(r.get("wall_s", GUESS_S))
        save()


def _skip(R: dict, workers: int) -> int:
    """Batches left out at the start of each epoch: ``--skip-batches``, else 10 + the prefetch fill."""
    given = R["config"]["skip_batches"]
    return given if given is not None else 10 + 2 * workers


# -- the driver ------------------------------------------------------------------------------------------
def run_handoff(work_dir: str, peer_python: Optional[str], samples_n: int = DEFAULT_SAMPLES, *, gpu: bool = False,
                parts: tuple[str, ...] = ("handoff", "collate"), batches: tuple[int, ...] = BATCHES,
                workers: tuple[int, ...] = GPU_WORKERS, repeats: int = 3, collate_repeats: int = 2,
                predownloads: tuple = PREDOWNLOADS, skip_batches: Optional[int] = None,
                collate_skip: int = bench_loader.DEFAULT_SKIP, window_s: float = 1.5,
                budget_s: Optional[float] = None, peer_path: str = "", wait_s: float = 30.0,
                keep_data: bool = False, save: Optional[Callable[[dict], None]] = None) -> dict:
    """Run the handoff benchmark (``gpu``: the GPU curve instead of parts 1 and 2) and return its raw
    results (see ``bench_handoff_report.markdown``). ``peer_python`` None (or missing) leaves
    mosaicml-streaming out; ``peer_path``: extra PYTHONPATH for its processes. ``save(R)`` is called
    after every case. ``samples_n`` is rounded up so that every batch size and worker count divides it."""
    start = time.perf_counter()
    peer = shutil.which(peer_python) if peer_python else None
    used_workers = tuple(workers) if gpu else (WORKERS,)
    n = size(samples_n, used_workers, tuple(batches) + ((COLLATE_BATCH,) if "collate" in parts else ()))
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    R = _skeleton(peer, {
        "samples": n, "sample_bytes": bench_loader.SAMPLE_BYTES, "seed": common.SEED + bench_loader.SEED_OFFSET,
        "gpu": gpu, "parts": ["gpu"] if gpu else list(parts), "batches": list(batches), "workers": list(used_workers),
        "repeats": repeats, "collate_repeats": collate_repeats, "collate_batch": COLLATE_BATCH,
        "predownloads": list(predownloads), "skip_batches": skip_batches, "collate_skip": collate_skip,
        "window_s": window_s, "budget_s": (budget_s or GPU_BUDGET_S) if gpu else budget_s, "wait_s": wait_s,
        "peer_python": peer, "peer_path": peer_path})
    budget = R["config"]["budget_s"]
    run = Runner(work, peer, peer_path, wait_s, deadline=None if budget is None else start + budget)

    def saved() -> None:
        R["total_s"] = time.perf_counter() - start
        if save is not None:
            save(R)

    try:
        base = prepare(run, R, work)
        saved()
        if base is not None:
            for part, fn in (("gpu", run_gpu), ("handoff", run_cpu_handoff), ("collate", run_collate)):
                if part in R["config"]["parts"]:
                    fn(run, R, base, saved)
    finally:
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = bench_loader._loadavg()
    saved()
    return R


def _skeleton(peer: Optional[str], config: dict) -> dict[str, Any]:
    """The raw results before any case: when, where, which libraries, the configuration."""
    return {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "machine": bench_loader.machine_info(), "git": common.git_rev(), "loadavg_before": bench_loader._loadavg(),
            "libraries": ["shardstream", "torch"] + (["mosaic"] if peer else []), "config": config,
            "handoff": {}, "collate": {}, "gpu": {}}


def prepare(run: Runner, R: dict, work: str) -> Optional[dict]:
    """Generate the samples, write them with shardstream's MDSWriter and probe the checkout; the
    configuration every case shares (None when the data could not be written)."""
    t = time.perf_counter()
    n = R["config"]["samples"]
    npz, path = os.path.join(work, "data.npz"), os.path.join(work, "mds")
    bench_loader.generate(npz, n)
    x, labels = bench_loader.load(npz)
    expect = {"count": n, "label_sum": int(labels.sum()), "x0_sum": int(x[:, 0].astype("int64").sum())}
    del x, labels
    R["generate_s"] = time.perf_counter() - t
    R["write"] = run.run("write", "write", {"task": "write", "npz": npz, "path": path}, quiet=False)
    if "error" in R["write"]:
        return None
    R["write"]["disk_bytes"] = common.dir_bytes(path)
    R["write"]["files"] = len(os.listdir(path))
    log(f"wrote {n:,} samples in {R['write']['write_s']:.1f} s ({R['write']['disk_bytes'] / 1e6:,.0f} MB)")
    R["probe"] = run.run("shardstream", "probe", {"task": "probe"}, quiet=False)
    if "error" in R["probe"]:
        return None
    log("probe: " + ", ".join(f"{k}={R['probe'].get(k)}" for k in ("version", "torch", "transfer", "device", "gpu")))
    return {"path": path, "npz": npz, "expect": expect}


def failed(R: dict) -> list[str]:
    """The measurements that failed or whose epochs did not check out."""
    out = [k for k in ("write", "probe") if "error" in (R.get(k) or {})]
    for batch, by_case in (R.get("handoff") or {}).items():
        out += [f"{c}-b{batch}" for c, r in by_case.items() if _bad(r)]
    out += [f"collate-{c}" for c, r in (R.get("collate") or {}).items() if _bad(r)]
    for batch, by_case in (R.get("gpu") or {}).items():
        for case, by_w in by_case.items():
            out += [f"gpu-{case}-b{batch}-w{w}" for w, r in by_w.items() if _bad(r)]
    return out


def _bad(r: dict) -> bool:
    return "skipped" not in r and ("error" in r or not r.get("ok"))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def _predownloads(text: str) -> tuple:
    return tuple(None if v == "default" else int(v) for v in text.split(",") if v)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="the GPU curve (a machine with CUDA; CUDA-only cases are "
                    "skipped without it) instead of the CPU parts")
    ap.add_argument("--samples", type=int, help=f"samples written (default {DEFAULT_SAMPLES:,}; "
                    f"{GPU_SAMPLES:,} with --gpu)")
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "handoff"))
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python with mosaicml-streaming (a path or a command; '' to leave it out)")
    ap.add_argument("--peer-path", default=os.path.join(ROOT, "tests", "peer_stubs"),
                    help="extra PYTHONPATH for mosaicml-streaming's processes (default: the torchvision stand-in; "
                    "'' where the real torchvision is installed)")
    ap.add_argument("--parts", default="handoff,collate", help="CPU parts: handoff, collate (comma-separated)")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes of parts 1 and 3")
    ap.add_argument("--workers", default=",".join(map(str, GPU_WORKERS)), help="worker counts of the GPU curve")
    ap.add_argument("--repeats", type=int, default=3, help="timed epochs per handoff case (after one warm-up)")
    ap.add_argument("--collate-repeats", type=int, default=2, help="timed epochs per collate_fn case")
    ap.add_argument("--predownloads", default="default,1024,8192,65536",
                    help="mosaicml-streaming's predownload values in the collate_fn part")
    ap.add_argument("--skip-batches", type=int, help="batches left out at the start of each epoch "
                    "(default: 10 + twice the workers)")
    ap.add_argument("--window-s", type=float, default=1.5, help="steady seconds measured per GPU-curve case")
    ap.add_argument("--budget-s", type=float, help=f"wall-time budget of the whole run (default {GPU_BUDGET_S:.0f} "
                    "with --gpu, none without): the lowest-priority GPU cases are dropped first")
    ap.add_argument("--wait", type=float, help="before each measurement, wait up to this many seconds for the "
                    "CPUs to be at most 25%% busy (default 30, 0 with --gpu)")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--out", help="Markdown report (written again after every case)")
    ap.add_argument("--json", help="raw results (written again after every case)")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run")
    return ap


def main() -> None:
    import bench_handoff_report as report

    args = _parser().parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
        common.publish(R, report.markdown, __file__, args.out, None)
        return

    def save(R: dict) -> None:
        R.setdefault("command", common.command_line(__file__))
        if args.json:
            common.emit(R, args.json)
        if args.out:
            with open(args.out, "w") as f:
                f.write(report.markdown(R))

    R = run_handoff(args.work, args.peer_python or None, args.samples or (GPU_SAMPLES if args.gpu else DEFAULT_SAMPLES),
                    gpu=args.gpu, parts=tuple(p for p in args.parts.split(",") if p), batches=_ints(args.batches),
                    workers=_ints(args.workers), repeats=args.repeats, collate_repeats=args.collate_repeats,
                    predownloads=_predownloads(args.predownloads), skip_batches=args.skip_batches,
                    window_s=args.window_s, budget_s=args.budget_s, peer_path=args.peer_path,
                    wait_s=args.wait if args.wait is not None else (0.0 if args.gpu else 30.0),
                    keep_data=args.keep_data, save=save)
    common.publish(R, report.markdown, __file__, args.out, args.json)
    if failed(R):
        log(f"failed or wrong: {', '.join(failed(R))}")
        sys.exit(1)


if __name__ == "__main__":
    main()
