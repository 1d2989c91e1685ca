"""Epoch planning at 1M, 100M and 1B samples: shardstream's lazy plan vs mosaicml-streaming's arrays.

    .venv/bin/python bench/bench_plan.py --peer-python .venv-peers/bin/python --json OUT.json --md OUT.md

Shards hold 10,000 samples each. For every size and shuffle algorithm, each library
runs in a fresh subprocess of its own venv, one case at a time (never two at once),
under an address-space cap (``--mem-cap-gib``) and a timeout (``--timeout``); a case
that does not finish is reported with the stage it reached.

- shardstream: the plan (``Plan(...).epoch(0, G)``), then 1M positions mapped at the start
  and from a cold start in the middle of the epoch (plan + ``resume`` + block).
- mosaicml-streaming: ``get_partitions`` (from 0 or the middle), ``get_shuffle`` and
  ``shuffle[ids]``, as ``StreamingDataset`` does; int64 arrays of the whole epoch.

Memory: see ``NOTE_MEMORY``. ``bench/run.py`` calls :func:`run_all` and :func:`section`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALGOS = ("py1e", "py1s")
MOSAIC_ALGOS = ("naive", "py1br", "py1e", "py1s", "py2s")  # mosaicml-streaming 0.13 has no py1b
SHARD = 10_000
CANONICAL = 8
GLOBAL_BATCH = 2048
NODES, RANKS, WORKERS = 2, 8, 4
BLOCK = 1_000_000
SEED = 9176
EPOCH = 0
MOSAIC = "mosaicml-streaming"
TARGET_SAMPLES = 1_000_000_000
TARGET_BUILD_S = 1.0
TARGET_BUILD_MB = 200.0
TARGET_RESUME_RATIO = 1.5
NOTE_MEMORY = (
    "Peak MB = the subprocess's peak resident set (`VmHWM` in `/proc/self/status`) minus its resident set "
    "after the imports, in MB of 10^6 bytes; the peak is reset (`/proc/self/clear_refs`) once the imports are "
    "done, and the run is the first one in the fresh process. No tracemalloc: these are whole-process RSS "
    "numbers (numpy buffers, Python objects, allocator slack). `resource.getrusage(RUSAGE_SELF).ru_maxrss` "
    "is recorded in the JSON too but not used: on Linux a child started by fork/vfork + exec inherits its "
    "parent's peak there (a 1 GB parent makes every child report >= 1 GB), so it cannot measure a "
    "subprocess on its own.")


def block_size() -> int:
    """mosaicml-streaming's default shuffle_block_size, which shardstream's PlanSpec defaults to as well."""
    return max(4_000_000 // CANONICAL, 1 << 18)


def middle(num_positions: int) -> int:
    """The resume point: the global step boundary nearest below the middle of the epoch."""
    return num_positions // 2 // GLOBAL_BATCH * GLOBAL_BATCH


# -- inside a case's subprocess (numpy only at import, so it runs in either venv) -------------
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _peak() -> dict:
    return {"peak_rss": _status_kb("VmHWM") * 1024,
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _emit(**kv) -> None:
    print(json.dumps(kv), flush=True)


def _child_start(cap_bytes: int, **info) -> None:
    """After the imports: reset the peak RSS, record the baseline, cap the address space."""
    import_peak = _status_kb("VmHWM") * 1024
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        info["peak_reset"] = False
    if cap_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
    _emit(stage="baseline", rss=_status_kb("VmRSS") * 1024, import_peak=import_peak,
          python=platform.python_version(), numpy=np.__version__, **info)


def _best(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), times


def child_shardstream(case: dict) -> None:
    import shardstream
    from shardstream.plan import Plan, PlanSpec, World

    sizes = np.full(case["samples"] // SHARD, SHARD, np.int64)
    spec = PlanSpec(shuffle=True, algo=case["algo"], seed=SEED, num_canonical_nodes=CANONICAL, block_size=None)
    world = World(num_nodes=NODES, ranks_per_node=RANKS, node=0, local_rank=0, num_workers=WORKERS, worker=0)
    _child_start(case["cap"], version=shardstream.__version__)

    def build():
        return Plan(sizes, spec).epoch(EPOCH, GLOBAL_BATCH)

    t = time.perf_counter()
    ep = build()
    first_build = time.perf_counter() - t
    _emit(stage="first_build", seconds=first_build, plan_bytes=ep.nbytes(), positions=ep.end, **_peak())
    mid = middle(ep.end)
    n = min(BLOCK, ep.end - mid)
    start, resume = np.arange(n, dtype=np.int64), np.arange(mid, mid + n, dtype=np.int64)
    expect = ep.sample_ids(resume)
    assert np.array_equal(build().resume(mid, GLOBAL_BATCH).sample_ids(resume), expect)
    _emit(stage="check", block=n, middle=mid, resume_matches=True)
    timers = {
        "build": build,
        "block": lambda: ep.sample_ids(start),
        "start": lambda: build().sample_ids(start),
        "resume": lambda: build().resume(mid, GLOBAL_BATCH).sample_ids(resume),
        "resume_new_batch": lambda: _resume_block(build(), mid, GLOBAL_BATCH // 2, n),
        "worker_chunk": lambda: next(build().iter_worker(world)),
    }
    for name, fn in timers.items():
        best, times = _best(fn, case["repeats"])
        _emit(stage=name, seconds=best, times=times, **_peak())
    _emit(stage="done", **_peak())


def _resume_block(ep, position: int, global_batch: int, n: int):
    """Resume ``ep`` at ``position`` with ``global_batch`` and map up to ``n`` positions from there."""
    r = ep.resume(position, global_batch)
    return r.sample_ids(np.arange(position, min(position + n, r.end), dtype=np.int64))


def child_mosaic(case: dict) -> None:
    import streaming
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    sizes = np.full(case["samples"] // SHARD, SHARD, np.int64)
    _child_start(case["cap"], version=streaming.__version__)
    per_device = GLOBAL_BATCH // (NODES * RANKS)
    steps = [("get_partitions", lambda: get_partitions("relaxed", int(sizes.sum()), CANONICAL, NODES, RANKS,
                                                        WORKERS, per_device, case["drop_first"], None)),
             ("get_shuffle", lambda: get_shuffle(case["algo"], sizes, CANONICAL, SEED, EPOCH, block_size()))]
    out = {}
    for name, fn in steps:  # both are tried, so a failure of the first still says how far the second gets
        out[name] = _mosaic_stage(name, fn)
    if all(v is not None for v in out.values()):
        ids, shuffle = out["get_partitions"], out.pop("get_shuffle")
        epoch = _mosaic_stage("index", lambda: np.where(ids != -1, shuffle[ids], -1))
        if epoch is not None:
            _emit(stage="done", epoch_bytes=int(epoch.nbytes), shape=list(epoch.shape), **_peak())


def _mosaic_stage(name: str, fn):
    t = time.perf_counter()
    try:
        result = fn()
    except MemoryError:
        _emit(stage=name, seconds=time.perf_counter() - t, error="out of memory", **_peak())
        return None
    _emit(stage=name, seconds=time.perf_counter() - t, **_peak())
    return result


# -- driving the cases -----------------------------------------------------------------------
def run_case(python: str, case: dict, timeout: float) -> dict:
    """Run one case in a fresh subprocess; its stages as far as they got, and how it ended."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if case["lib"] == "mosaic":
        stubs = os.path.join(ROOT, "tests", "peer_stubs")
        env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [python, os.path.abspath(__file__), "--child", json.dumps(case)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, env=env, cwd=ROOT, timeout=timeout)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or b"", e.stderr or b"", None
    stages = {}
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            stages[rec.pop("stage")] = rec
    res = {**case, "wall_s": time.perf_counter() - t, "stages": stages, "returncode": rc}
    res["status"] = _status(stages, rc, timeout)
    if res["status"] != "ok":
        res["stderr_tail"] = err.decode(errors="replace")[-2000:]
    return res


def _status(stages: dict, rc, timeout: float) -> str:
    if "done" in stages and rc == 0:
        return "ok"
    if rc is None:
        return f"timed out ({timeout:g} s)"
    oom = [name for name, s in stages.items() if s.get("error") == "out of memory"]
    if oom:
        return "out of memory in " + ", ".join(oom)
    if rc < 0:
        return f"killed by signal {-rc}"
    return f"exit status {rc}"


def run_all(sizes, algos, peer_python: str | None, repeats: int = 3, mem_cap_gib: float = 16,
            timeout: float = 300) -> dict:
    """Every case, one subprocess at a time; the raw results for :func:`section`."""
    from common import log

    cases, t0, date = [], time.perf_counter(), time.strftime("%Y-%m-%d %H:%M %Z")
    for n in sizes:
        for algo in algos:
            base = {"samples": n, "shards": n // SHARD, "algo": algo, "repeats": repeats,
                    "cap": int(mem_cap_gib * 2**30)}
            for python, extra in _runs(n, algo, peer_python):
                if extra.get("drop_first") and cases[-1]["status"] != "ok":
                    cases.append({**base, **extra, "status": "not run: the start of the epoch did not finish"})
                    continue
                log(f"plan: {n:,} samples, {algo}, {extra}")
                cases.append(run_case(python, {**base, **extra}, timeout))
                log(f"plan: -> {cases[-1]['status']} in {cases[-1]['wall_s']:.1f}s")
    config = {"sizes": list(sizes), "algos": list(algos), "shard_samples": SHARD, "num_canonical_nodes": CANONICAL,
              "global_batch": GLOBAL_BATCH, "seed": SEED, "world": {"nodes": NODES, "ranks_per_node": RANKS,
                                                                    "workers": WORKERS},
              "block": BLOCK, "shuffle_block_size": block_size(), "repeats": repeats, "mem_cap_gib": mem_cap_gib,
              "timeout_s": timeout, "peer": bool(peer_python)}
    return {"config": config, "cases": cases, "date": date, "total_s": time.perf_counter() - t0}


def _runs(n: int, algo: str, peer_python: str | None) -> list[tuple[str, dict]]:
    """The subprocesses of one case: shardstream, then mosaic's start and resume (if it can run)."""
    runs = [(sys.executable, {"lib": "shardstream"})]
    if peer_python and algo in MOSAIC_ALGOS:
        runs += [(peer_python, {"lib": "mosaic", "drop_first": 0}),
                 (peer_python, {"lib": "mosaic", "drop_first": middle(n)})]
    return runs


# -- the report ------------------------------------------------------------------------------
def _mb(case: dict, stage: str):
    s = case.get("stages", {})
    peak = (s.get(stage) or {}).get("peak_rss")
    base = (s.get("baseline") or {}).get("rss")
    return None if peak is None or base is None else max(peak - base, 0) / 1e6


def _sec(x) -> str:
    return "n/a" if x is None else (f"{x:.4f}" if x < 1 else f"{x:.2f}")


def _stage_s(case: dict, stage: str):
    return (case.get("stages", {}).get(stage) or {}).get("seconds")


def _mosaic_total(case: dict):
    s = case.get("stages", {})
    names = ("get_partitions", "get_shuffle", "index")
    return sum(s[k]["seconds"] for k in names) if all(k in s for k in names) else None


def _mosaic_progress(case: dict) -> str:
    parts = [f"`{k}` {_sec(v['seconds'])} s" + (" (out of memory)" if v.get("error") else "")
             for k, v in case.get("stages", {}).items() if k in ("get_partitions", "get_shuffle", "index")]
    return "; ".join(parts) if parts else "no stage finished"


def _ss_row(c: dict) -> list[str]:
    s = c.get("stages", {})
    if c["status"] != "ok":
        return ["n/a"] * 4 + [f"**{c['status']}**"]
    note = (f"plan arrays {s['first_build']['plan_bytes'] / 1e6:.2f} MB; peak of the whole case "
            f"{_mb(c, 'done'):.1f} MB; first build in the process {_sec(s['first_build']['seconds'])} s; resume "
            f"with global batch {GLOBAL_BATCH // 2} {_sec(_stage_s(c, 'resume_new_batch'))} s; worker's first "
            f"chunk {_sec(_stage_s(c, 'worker_chunk'))} s")
    return [_sec(_stage_s(c, "build")), f"{_mb(c, 'first_build'):.1f}", _sec(_stage_s(c, "start")),
            _sec(_stage_s(c, "resume")), note]


def _mosaic_row(start: dict, resume: dict | None) -> list[str]:
    total = _mosaic_total(start)
    peak = _mb(start, "done") if start["status"] == "ok" else _peak_so_far(start)
    if start["status"] != "ok":
        note = f"**{start['status']}** (cap {start['cap'] / 2**30:g} GiB): {_mosaic_progress(start)}"
        return ["n/a", "n/a" if peak is None else f">= {peak:,.0f}", "n/a", "not run", note]
    epoch_mb = start["stages"]["done"]["epoch_bytes"] / 1e6
    r = "n/a" if not resume else (_sec(_mosaic_total(resume)) if resume.get("status") == "ok"
                                  else f"**{resume['status']}**")
    note = f"epoch array {epoch_mb:,.0f} MB; {_mosaic_progress(start)}"
    return [_sec(total), f"{peak:,.0f}", "(in build)", r, note]


def _peak_so_far(case: dict):
    return max((v for k in case.get("stages", {}) if (v := _mb(case, k)) is not None), default=None)


def table_rows(P: dict) -> list[list[str]]:
    rows = []
    for c in P["cases"]:
        label = [f"{c['samples']:,} ({c['shards']:,})", c["algo"]]
        if c["lib"] == "shardstream":
            rows.append(label + ["shardstream"] + _ss_row(c))
        elif not c.get("drop_first"):
            resume = next((r for r in P["cases"] if r["lib"] == "mosaic" and r.get("drop_first")
                           and r["samples"] == c["samples"] and r["algo"] == c["algo"]), None)
            rows.append(label + [MOSAIC] + _mosaic_row(c, resume))
    return rows


def target_rows(P: dict | None) -> list[dict]:
    """The planning targets (they are about 1B samples in 100k shards), in bench/run.py's summary format."""
    big = [c for c in (P or {}).get("cases", []) if c["lib"] == "shardstream" and c["samples"] == TARGET_SAMPLES]
    if not big:
        return []
    ok = [c for c in big if c["status"] == "ok"]
    failed = "; ".join(f"{c['algo']}: {c['status']}" for c in big if c not in ok)
    where = f"{TARGET_SAMPLES:,} samples in {big[0]['shards']:,} shards ({', '.join(c['algo'] for c in big)})"
    rows = [_target(f"Plan build (Plan + epoch) for {where}: < {TARGET_BUILD_S:g} s",
                    [_stage_s(c, "build") for c in ok], TARGET_BUILD_S, " s", "slowest algo"),
            _target(f"Peak memory of the plan build for {where}: < {TARGET_BUILD_MB:g} MB",
                    [_mb(c, "first_build") for c in ok], TARGET_BUILD_MB, " MB", "largest; above the post-import RSS")]
    ratios = [_stage_s(c, "resume") / _stage_s(c, "start") for c in ok]
    block = min((c["stages"]["check"]["block"] for c in ok), default=BLOCK)
    resume = _target(f"Resuming in the middle costs the same as starting ({where}; plan + {block:,} positions)",
                     ratios, TARGET_RESUME_RATIO, "x", "worst", strict=False)
    resume["measured"] = ", ".join(f"{c['algo']} {_stage_s(c, 'resume'):.3f} vs {_stage_s(c, 'start'):.3f} s"
                                   for c in ok) or "n/a"
    resume["ratio"] = f"{max(ratios):.2f}x (worst resume / start)" if ratios else "n/a"
    rows.append(resume)
    for r in rows:
        if failed:
            r["measured"] += f" (failed: {failed})"
            r["met"] = False
    return rows


def _target(name: str, values: list, limit: float, unit: str, how: str, strict: bool = True) -> dict:
    worst = max(values) if values else None
    met = None if worst is None else (worst < limit if strict else worst <= limit)
    return {"target": name, "measured": "n/a" if worst is None else f"{worst:.4g}{unit} ({how})",
            "ratio": "n/a" if worst is None else f"{worst / limit:.3f} of the limit",
            "required": f"{'<' if strict else '<='} {limit:g}{unit}", "met": met}


def section(P: dict, heading: str = "## Epoch planning", targets: bool = True) -> list[str]:
    """The Markdown section for the results of :func:`run_all` (with its rows of :func:`target_rows`)."""
    cfg = P["config"]
    L = [heading, "", *_setup_text(cfg), ""]
    L += _table(["Samples (shards)", "Algo", "Library", "Plan build s", "Peak MB", "First 1M positions s",
                "Resume in the middle s", "Notes"], table_rows(P))
    L += ["", *_column_text(cfg), ""]
    rows = target_rows(P) if targets else []
    if rows:
        L += ["Against the targets:", ""]
        L += _table(["Target", "Measured", "Ratio", "Required", "Status"],
                    [[r["target"], r["measured"], r["ratio"], r["required"], _met(r["met"])] for r in rows]) + [""]
    how = f" with `{P['command']}`, git {P['git']}" if P.get("command") else ""
    L += [NOTE_MEMORY, "", f"Measured on {P.get('date', '?')}{how}, in {P['total_s']:.0f} s. Versions: "
          + _versions(P) + ".", ""]
    return L


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _met(ok) -> str:
    return "n/a" if ok is None else ("**MET**" if ok else "**NOT MET**")


def _setup_text(cfg: dict) -> list[str]:
    w = cfg["world"]
    return [
        (f"One epoch of a dataset of N samples in shards of {cfg['shard_samples']:,}, shuffled "
         f"(seed {cfg['seed']}, epoch 0), {cfg['num_canonical_nodes']} canonical nodes, shuffle block "
         f"{cfg['shuffle_block_size']:,} (mosaicml-streaming's default for 8 canonical nodes), global batch "
         f"{cfg['global_batch']} over {w['nodes']} nodes x {w['ranks_per_node']} ranks x {w['workers']} "
         "DataLoader workers. Each library runs each case in a fresh subprocess of its own venv, one case at a "
         f"time, with its address space capped at {cfg['mem_cap_gib']:g} GiB (`RLIMIT_AS`) and a "
         f"{cfg['timeout_s']:g} s timeout; a case that does not finish is reported as far as it got."),
        "",
        ("The targets: building the plan for 1B samples in 100k shards takes < 1 s and < 200 MB; resuming in the "
         "middle of an epoch costs the same as starting it."),
    ]


def _column_text(cfg: dict) -> list[str]:
    return [
        (f"- **shardstream** (best of {cfg['repeats']} in the process; every time is in the JSON). *Plan "
         "build*: `Plan(shard_sizes, PlanSpec(shuffle=True, algo=..., num_canonical_nodes=8)).epoch(0, "
         "2048)`; nothing of size O(samples) is built. *First 1M positions*: plan build + `ep.sample_ids` of "
         "global positions 0..1M-1. *Resume in the middle*: a new plan resumed at the step boundary below the "
         "middle of the epoch: plan build + `ep.resume(position, 2048)` + `sample_ids` of the next 1M "
         "positions (checked equal to the uninterrupted epoch's ids there). At 1M samples the block is the "
         "second half of the epoch (~500k positions), for both columns. Notes: the plan's own arrays "
         "(`ep.nbytes()`), the first build in the fresh process (first-use costs included), a resume with "
         "another global batch (1024: a new segment from the regions' progress), and the first chunk of "
         "`ep.iter_worker(World(2, 8, node=0, local_rank=0, num_workers=4, worker=0))` (plan build included). "
         "*Peak MB*: after the first plan build in the process; the notes give the peak of the whole case "
         "(every timer above, repeats included)."),
        (f"- **{MOSAIC}** (one run per process: it is slow and memory-bound). *Plan build*: what "
         "`StreamingDataset` does for each epoch in its local leader, in the same order: "
         "`get_partitions('relaxed', N, 8, 2, 8, 4, 128, drop_first, None)`, `get_shuffle(algo, shard_sizes, "
         "8, 9176, 0, block)` and `np.where(ids != -1, shuffle[ids], -1)`; the result holds every position of "
         "the epoch (*Peak MB* covers all three), so reading positions afterwards costs nothing more (shown "
         "as \"(in build)\"). Not included: its per-shard `resample_streams` loop and copying the epoch to "
         "shared memory. *Resume in the middle*: the same with `drop_first` = the middle position, in another "
         "fresh process (not run when the start did not finish). `get_shuffle` runs while the partition array "
         "is held, as in `StreamingDataset`, and is still tried when `get_partitions` fails, so both stages "
         "show how far they get; *Peak MB* is then the peak reached before failing."),
    ]


def _versions(P: dict) -> str:
    out = []
    for lib, name in (("shardstream", "shardstream"), ("mosaic", MOSAIC)):
        base = next((c["stages"]["baseline"] for c in P["cases"] if c["lib"] == lib
                     and "baseline" in c.get("stages", {})), None)
        if base:
            out.append(f"{name} {base.get('version')} (Python {base['python']}, numpy {base['numpy']})")
    return ", ".join(out) or "n/a"


# -- command line ----------------------------------------------------------------------------
def parse_sizes(text: str) -> list[int]:
    sizes = [int(float(x)) for x in text.split(",") if x.strip()]
    bad = [n for n in sizes if n <= 0 or n % SHARD]
    if bad:
        raise ValueError(f"sizes must be positive multiples of {SHARD:,}: {bad}")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1e6,1e8,1e9", help="samples per case, comma-separated")
    ap.add_argument("--algos", default=",".join(ALGOS), help="shuffle algorithms (mosaic runs those it has)")
    ap.add_argument("--peer-python", help="python of the venv with mosaicml-streaming (without it: skipped)")
    ap.add_argument("--skip-peer", action="store_true", help="run shardstream only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mem-cap-gib", type=float, default=16.0, help="address-space cap of each case")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--md", help="Markdown report")
    args = ap.parse_args()
    if args.child:
        case = json.loads(args.child)
        (child_shardstream if case["lib"] == "shardstream" else child_mosaic)(case)
    else:
        standalone(args)


def standalone(args) -> None:
    sys.path.insert(0, HERE)
    import common
    import run

    peer = None if args.skip_peer else args.peer_python
    P = run_all(parse_sizes(args.sizes), [a for a in args.algos.split(",") if a], peer, args.repeats,
                args.mem_cap_gib, args.timeout)
    P["machine"], P["git"] = run.machine_info(), common.git_rev()
    P["command"] = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT),
                                                      os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(P, f, indent=1)
    text = "\n".join(_header(P) + section(P))
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    print(text)


def _header(P: dict) -> list[str]:
    m = P["machine"]
    return ["# Epoch planning benchmark", "",
            f"Generated by `bench/bench_plan.py` on {P['date']} (git {P['git']}).", "",
            f"- CPU: {m['cpu']}, {m['logical_cpus']} logical CPUs, RAM {m.get('ram_gib', 0):.1f} GiB, {m['os']}",
            "", "```", P["command"], "```", ""]


if __name__ == "__main__":
    main()
