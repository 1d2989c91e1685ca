"""A light processing chain over JSON Lines, side by side: shardstream vs Hugging Face ``datasets``.

    .venv/bin/python bench/bench_lightchain.py [--out lightchain.md] [--json lightchain.json]
    .venv/bin/python bench/run.py --only lightchain     # the same, as a section of docs/benchmarks.md

What the chain's own machinery costs when the work in it is cheap: the same JSON Lines files (``--rows``
rows of ``{"id": int, "text": str of 40..200 letters and spaces, "score": float}`` in ``--files`` files,
generated once from a fixed seed and kept under ``--data``), read by each library through::

    load_dataset("json", data_files=files, streaming=True)   # shardstream: split="train" (it always streams)
        .shuffle(seed=0, buffer_size=1000)
        .map(lengths, batched=True)        # {"n": [len(t) for t in batch["text"]]}, batches of 1,000
        .filter(keep)                      # row["n"] % 4 != 0, a row at a time

and, for reference, the plain rows of the same files (no operation). Every measurement is a fresh
process of the project venv (both libraries are installed there), one after the other, the sides
interleaved; each process builds the chain twice and times a pass over each (the chain's
construction left out), and the report takes the second (warm: shardstream's row index is cached by
then, HF has no cache to fill). Rows/s counts the rows read from the files (``--rows``); rows per
CPU second divides them by the process's CPU time during the pass (all its threads), which moves
less than the wall time on a shared machine. Every pass is checked: the rows the filter kept and
the sum of their ``id``. ``bench/run.py`` calls :func:`run_lightchain`, :func:`markdown` and
:func:`target_rows`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

DEFAULT_ROWS = 200_000
DEFAULT_FILES = 4
SEED = 31
FORMAT = 1  # bump when the generator changes: the data directory's key changes with it
DATA = os.path.join(HERE, ".data", "lightchain")
BUFFER = 1000
TARGET = 2.0  # shardstream's chain vs HF's, rows/s
RUN_TIMEOUT_S = 600
# name -> (library, chain): the cases, in the order each repeat runs them
CASES = {"shardstream": ("shardstream", True), "hf": ("hf", True),
         "shardstream-plain": ("shardstream", False), "hf-plain": ("hf", False)}
NAMES = {"shardstream": "shardstream", "hf": "HF `datasets`"}


# -- the workload ------------------------------------------------------------------------------
def prepare(data_root: str, rows: int, n_files: int) -> dict:
    """The JSON Lines files (written once per key) and what the chain must give: kept rows and their id sum."""
    key = f"v{FORMAT}-rows{rows}-files{n_files}-seed{SEED}"
    where = os.path.join(data_root, key)
    meta = os.path.join(where, "meta.json")
    if os.path.exists(meta):
        with open(meta) as f:
            return json.load(f)
    import numpy as np

    from common import log

    t = time.perf_counter()
    os.makedirs(where, exist_ok=True)
    rng = np.random.default_rng(SEED)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", np.uint8)
    lengths = rng.integers(40, 201, rows)
    chars = letters[rng.integers(0, len(letters), int(lengths.sum()))].tobytes().decode()
    scores = rng.random(rows).tolist()
    ends = np.cumsum(lengths).tolist()
    files, per, kept, id_sum = [], -(-rows // n_files), 0, 0
    for f in range(n_files):
        path = os.path.join(where, f"part-{f:02d}.jsonl")
        with open(path, "w") as out:
            for i in range(f * per, min(rows, (f + 1) * per)):
                text = chars[ends[i] - int(lengths[i]):ends[i]]
                out.write(json.dumps({"id": i, "text": text, "score": scores[i]}) + "\n")
                if len(text) % 4:
                    kept, id_sum = kept + 1, id_sum + i
        files.append(path)
    info = {"files": files, "rows": rows, "kept": kept, "id_sum": id_sum,
            "bytes": sum(os.path.getsize(p) for p in files), "generate_s": time.perf_counter() - t}
    with open(meta, "w") as f:
        json.dump(info, f)
    log(f"generated {rows:,} rows in {n_files} JSON Lines files under {where} in {info['generate_s']:.1f} s")
    return info


# -- one side (a child process) ----------------------------------------------------------------
def lengths(batch):
    return {"n": [len(t) for t in batch["text"]]}


def keep(row):
    return row["n"] % 4 != 0


def make(library: str, files: list[str], chain: bool):
    if library == "shardstream":
        from shardstream import load_dataset

        ds = load_dataset("json", data_files=files, split="train")
    else:
        import datasets

        datasets.disable_progress_bars()
        ds = datasets.load_dataset("json", data_files=files, split="train", streaming=True)
    if chain:
        ds = ds.shuffle(seed=0, buffer_size=BUFFER).map(lengths, batched=True).filter(keep)
    return ds


def timed_pass(ds) -> dict:
    t, c = time.perf_counter(), time.process_time()
    n = s = 0
    for row in ds:
        n += 1
        s += row["id"]
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "count": n, "id_sum": s}


def child(cfg: dict) -> dict:
    import importlib.metadata as md

    passes = [timed_pass(make(cfg["library"], cfg["files"], cfg["chain"])) for _ in range(2)]
    package = "shardstream" if cfg["library"] == "shardstream" else "datasets"
    return {"passes": passes, "version": md.version(package)}


# -- the driver --------------------------------------------------------------------------------
def run_lightchain(data_root: str = DATA, rows: int = DEFAULT_ROWS, *, n_files: int = DEFAULT_FILES,
                   repeats: int = 5, cases: tuple[str, ...] = tuple(CASES), wait_s: float = 30.0) -> dict:
    """Every case ``repeats`` times, each in a fresh process, the cases interleaved; the raw results."""
    import bench_loader
    import bench_pipeline
    from common import log

    data = prepare(data_root, rows, n_files)
    work = os.path.join(data_root, "work")
    os.makedirs(work, exist_ok=True)
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": bench_pipeline.machine(), "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
               "config": {"rows": rows, "files": n_files, "repeats": repeats, "buffer": BUFFER, "seed": SEED,
                          "bytes": data["bytes"], "kept": data["kept"]},
               "cases": {c: [] for c in cases}}
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_HOME=os.path.join(work, "hf-home"), SHARDSTREAM_CACHE_DIR=os.path.join(work, "ss-cache"))
    for r in range(repeats):
        for case in cases:
            library, chain = CASES[case]
            tag = f"{r}-{case}"
            cfg_path, out = os.path.join(work, f"config-{tag}.json"), os.path.join(work, f"result-{tag}.json")
            with open(cfg_path, "w") as f:
                json.dump({"library": library, "chain": chain, "files": data["files"], "out": out}, f)
            quiet = bench_loader.wait_quiet(0.25, wait_s) if wait_s > 0 else {}
            cmd = [sys.executable, os.path.abspath(__file__), "--child", cfg_path]
            log(f"== lightchain {tag}: {' '.join(shlex.quote(c) for c in cmd)}")
            got = bench_loader.measured_run(cmd, env, ROOT, out, os.path.join(work, f"stderr-{tag}.log"), tag, quiet,
                                            RUN_TIMEOUT_S)
            got["checked"] = check(got, data, chain)
            R["cases"][case].append(got)
    R["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return R


def check(got: dict, data: dict, chain: bool) -> bool:
    want = (data["kept"], data["id_sum"]) if chain else (data["rows"], data["rows"] * (data["rows"] - 1) // 2)
    return bool(got.get("passes")) and all((p["count"], p["id_sum"]) == want for p in got["passes"])


# -- the report --------------------------------------------------------------------------------
def summary(R: dict) -> dict:
    """Per case: the medians over its processes of the warm pass's rows/s and rows per CPU second."""
    rows = R["config"]["rows"]
    out = {}
    for case, runs in R.get("cases", {}).items():
        warm = [r["passes"][-1] for r in runs if r.get("passes")]
        if not warm:
            continue
        out[case] = {"rows_per_s": statistics.median(rows / p["wall_s"] for p in warm),
                     "rows_per_cpu_s": statistics.median(rows / p["cpu_s"] for p in warm),
                     "runs": [rows / p["wall_s"] for p in warm], "checked": all(r.get("checked") for r in runs),
                     "others": statistics.median((r.get("contention") or {}).get("others_cpu_share") or 0.0
                                                 for r in runs),
                     "version": next((r.get("version") for r in runs if r.get("version")), "?")}
    return out


def target_rows(R: dict | None) -> list[dict]:
    S = summary(R) if R else {}
    if "shardstream" not in S or "hf" not in S:
        return []
    ours, theirs = S["shardstream"]["rows_per_s"], S["hf"]["rows_per_s"]
    return [{"target": f"Light chain (JSONL -> shuffle {BUFFER:,} -> batched map -> filter) rows/s vs HF datasets",
             "measured": f"{ours:,.0f} vs {theirs:,.0f} rows/s", "ratio": f"{ours / theirs:.2f}x",
             "required": f">= {TARGET:g}x (medians)", "met": ours / theirs >= TARGET}]


def failed(R: dict) -> list[str]:
    return [f"{case} run {i}" for case, runs in R.get("cases", {}).items() for i, r in enumerate(runs)
            if not r.get("checked")]


def markdown(R: dict) -> str:
    cfg, S = R["config"], summary(R)
    mach = R.get("machine", {})
    L = ["## Light chain over JSON Lines", "",
         f"Measured {R['date']} on {mach.get('cpu', '?')}, {mach.get('usable_cpus') or mach.get('logical_cpus', '?')} "
         f"CPUs (load average before {R.get('loadavg_before')}, after "
         f"{R.get('loadavg_after')}; the machine is shared, so rates move between runs: the medians below, and "
         "rows per CPU second, which other processes disturb less).", "",
         f"Data: {cfg['rows']:,} rows `{{\"id\": int, \"text\": str of 40..200 letters and spaces, \"score\": float}}` "
         f"in {cfg['files']} JSON Lines files ({cfg['bytes'] / 1e6:.1f} MB, seed {cfg['seed']}). The chain, the same "
         f"on both sides: `load_dataset(\"json\", data_files=files, streaming=True)` `.shuffle(seed=0, "
         f"buffer_size={cfg['buffer']:,})` "
         "`.map(lambda b: {\"n\": [len(t) for t in b[\"text\"]]}, batched=True)` "
         f"`.filter(lambda r: r[\"n\"] % 4 != 0)` ({cfg['kept']:,} rows kept); *plain*: the rows alone.", "",
         "| Case | Library | rows/s (median) | rows per CPU s (median) | per process (rows/s) | others' CPU "
         "| checked |",
         "|---|---|---|---|---|---|---|"]
    for case, s in S.items():
        library = NAMES[CASES[case][0]]
        L.append(f"| {case} | {library} {s['version']} | {s['rows_per_s']:,.0f} | {s['rows_per_cpu_s']:,.0f} | "
                 f"{', '.join(f'{x:,.0f}' for x in s['runs'])} | {s['others']:.0%} | "
                 f"{'ok' if s['checked'] else '**WRONG**'} |")
    if "shardstream" in S and "hf" in S:
        a, b = S["shardstream"], S["hf"]
        L += ["", f"shardstream's chain vs HF's: **{a['rows_per_s'] / b['rows_per_s']:.2f}x** rows/s (target >= "
              f"{TARGET:g}x), {a['rows_per_cpu_s'] / b['rows_per_cpu_s']:.2f}x rows per CPU second."]
        if "shardstream-plain" in S:
            p = S["shardstream-plain"]
            L.append(f"The chain runs at {a['rows_per_s'] / p['rows_per_s']:.0%} of shardstream's plain rows/s "
                     f"({a['rows_per_cpu_s'] / p['rows_per_cpu_s']:.0%} per CPU second).")
    L += ["", f"{cfg['repeats']} fresh processes per case, the cases interleaved; each times two passes (the "
          "chain built anew for each, its construction left out) and the table gives the second. Rows/s counts the "
          "rows read from the files; every pass is checked (rows kept and the sum of their `id`)."]
    return "\n".join(L)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        with open(sys.argv[2]) as f:
            cfg = json.load(f)
        with open(cfg["out"], "w") as f:
            json.dump(child(cfg), f)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--files", type=int, default=DEFAULT_FILES)
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per case")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--wait", type=float, default=30.0, help="before each measurement, wait up to this many "
                    "seconds for the CPUs to be at most 25%% busy (0: never wait)")
    ap.add_argument("--data", default=DATA, help="where the generated files are kept (reused by later runs)")
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run")
    args = ap.parse_args()
    import common

    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
    else:
        cases = tuple(c for c in args.cases.split(",") if c)
        unknown = [c for c in cases if c not in CASES]
        if unknown:
            ap.error(f"unknown case(s) {', '.join(unknown)}; choose among {', '.join(CASES)}")
        R = run_lightchain(args.data, args.rows, n_files=args.files, repeats=args.repeats, cases=cases,
                           wait_s=args.wait)
    common.publish(R, markdown, __file__, args.out, args.json if not args.from_json else None)
    wrong = failed(R)
    if wrong:
        common.log(f"!! failed or wrong: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
