"""The Markdown section and the targets of ``bench/bench_files.py`` (reading Parquet and JSONL files).

:func:`markdown` renders the raw results of :func:`bench_files.run_files`, :func:`target_rows`
gives the rows of ``bench/run.py``'s summary table, :func:`failed` names the measurements that
failed or read wrong rows.
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

from common import get

TARGET_HF = 3.0
TARGET_PYARROW = 1.0
FLAT_RATIO = 1.5  # resumption is called flat when the slowest position takes at most this x the fastest


def _rate(r: Optional[dict]) -> Optional[float]:
    return None if not r or "error" in r else r.get("rows_per_s")


def _n(x: Optional[float], digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def _x(a: Optional[float], b: Optional[float]) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _check(r: Optional[dict]) -> str:
    if not r:
        return "not run"
    if "error" in r:
        return f"**failed** ({r['error']})"
    return "ok" if r.get("ok") else "**WRONG**"


def _passes(r: Optional[dict]) -> str:
    if not r or "times" not in r:
        return "n/a"
    return ", ".join(f"{t:.2f}" for t in r["times"])


def _versions(R: dict) -> str:
    seen: dict[str, str] = {}
    for part in ("parquet", "jsonl", "peers"):
        for r in (R.get(part) or {}).values():
            for x in r if isinstance(r, list) else [r]:
                if isinstance(x, dict) and x.get("version"):
                    seen.setdefault(x["library"], x["version"])
    return ", ".join(f"{k} {v}" for k, v in seen.items()) or "n/a"


def _others(R: dict) -> str:
    shares = [x["contention"]["others_cpu_share"] for x in _all_results(R)
              if "others_cpu_share" in x.get("contention", {})]
    if not shares:
        return "n/a"
    return f"{statistics.median(shares):.0%} median, {max(shares):.0%} at most"


def _all_results(R: dict) -> list[dict]:
    out = []
    for part in ("parquet", "jsonl", "shuffled", "resume", "peers"):
        for r in (R.get(part) or {}).values():
            out += [x for x in (r if isinstance(r, list) else [r]) if isinstance(x, dict)]
    return out


def _source(R: dict) -> str:
    src = R.get("shardstream_source")
    if not src:
        return f"benchmark code at git {R['git']}"
    return f"shardstream from `{src['path']}` (git {src['git']}); benchmark code at git {R['git']}"


def _busy(results: dict) -> str:
    """A note naming the measurements during which other processes used over 10 % of the CPUs."""
    busy = [f"{k} {x['contention']['others_cpu_share']:.0%}" for k, r in results.items()
            for x in (r if isinstance(r, list) else [r])
            if isinstance(x, dict) and x.get("contention", {}).get("others_cpu_share", 0) > 0.10]
    return "" if not busy else (" Other processes used a share of the CPUs during: " + ", ".join(busy)
                                + " (the machine is shared): those rows are slower than on a quiet machine.")


def _header(R: dict) -> list[str]:
    c, d, m = R["config"], R["data"], R["machine"]
    limit = ("every row" if c["limit"] == c["rows"] else
             f"the first {c['limit']:,} rows (a fixed count, the same on every side)")
    return [
        "## Reading Parquet and JSONL files", "",
        f"Run on {R['date']}, total {R['total_s']:.0f} s." + (f" Command: `{R['command']}`." if R.get("command")
                                                               else ""), "",
        (f"- Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs ({m.get('usable_cpus')} usable), RAM "
         f"{m.get('ram_gib', 0):.1f} GiB, {m['os']}; load average before / after: {R['loadavg_before']} / "
         f"{R['loadavg_after']}. Other processes used {_others(R)} of the CPUs while the measurements ran "
         "(the machine is shared; every measurement ran alone, in a fresh process)."),
        f"- Versions: {_versions(R)}; " + _source(R) + ".",
        (f"- Data: {c['rows']:,} rows from seed {c['seed']} in {c['files']} files of {c['rows_per_file']:,}: "
         f"`id` int64 (the row's position), `tokens` list<int32> of random length 64..512 (mean "
         f"{d['mean_tokens']:.0f}), `text` a 30..60-character sentence; {d['payload_bytes'] / 1e6:,.0f} MB of "
         f"payload. Parquet: row groups of {c['row_group']:,} rows, pyarrow's defaults otherwise (snappy, "
         f"dictionary encoding), {d['parquet_bytes'] / 1e6:,.0f} MB; JSON Lines: the same rows, "
         f"{d['jsonl_bytes'] / 1e6:,.0f} MB; generated and written in {d['generate_s']:.0f} s, read from the page "
         "cache."),
        (f"- Every pass reads {limit} and touches each as a training loop would (`id` and the number of "
         "tokens); each pass is checked (row count, sum of `id`, sum of the token counts). Throughput is the "
         f"median of up to {c['repeats']} passes (none started once a measurement's passes took "
         f"{c['budget_s']:g} s), each from a new iterator; shardstream's passes each over a new dataset object "
         "(a dataset keeps its 16 most recently decoded row groups), the others' over one (they keep no decoded "
         "rows between passes). No untimed warm-up: the files are in the page cache, and the first pass is "
         "listed with the others."), ""]


def _sequential(R: dict) -> list[str]:
    P, c = R.get("parquet") or {}, R["config"]
    ss = _rate(P.get("shardstream"))
    rows = []
    for key, name, how in (
            ("shardstream", "shardstream", "`StreamingDataset(local='dir/*.parquet')`, `for s in ds`"),
            ("hf", "HF `datasets`", "`load_dataset('parquet', data_files=files, split='train', streaming=True)`"),
            ("pyarrow", "pyarrow loop", f"`pq.ParquetFile(f).iter_batches(batch_size={c['pyarrow_batch']:,})` + "
                                        "`to_pylist()`"),
            ("shardstream_batches", "shardstream, column batches",
             f"`StreamingDataset(..., batch_size={c['batch_size']}).iterate_batches()`")):
        r = P.get(key)
        rows.append([name, how, _n(get(r, "open_s"), 3), _n(_rate(r)), _passes(r), _x(ss, _rate(r)), _check(r)])
    return (["### Sequential Parquet, dict rows", ""]
            + _table(["Library", "How", "open (s)", "rows/s", "passes (s)", "shardstream speed-up", "checked"], rows)
            + ["", ("*open*: the constructor (shardstream's with an empty `SHARDSTREAM_CACHE_DIR`: it reads the "
                    "footers). Samples (types of `id`, `tokens`, `text`): " + _types(P) + ". The column-batch row "
                    "counts the rows of dicts of column arrays (`id` an array, `tokens` a `Ragged`, `text` a list)."
                    + _busy(P)),
                  ""])


def _types(P: dict) -> str:
    out = []
    for key, name in (("shardstream", "shardstream"), ("hf", "HF"), ("pyarrow", "pyarrow")):
        t = get(P, key, "sample_types")
        if t:
            out.append(f"{name} " + ", ".join(f"`{t.get(c, '?')}`" for c in ("id", "tokens", "text")))
    return "; ".join(out) or "n/a"


def _shuffled_cells(r: dict, hf: Optional[float]) -> list[str]:
    eps = ", ".join(f"{e['seconds']:.1f}" for e in r.get("epochs", []))
    first = ", ".join(f"{e['first_batch_s']:.2f}" for e in r.get("epochs", []) if e.get("first_batch_s"))
    if r.get("timed_out"):
        return [f"did not finish: {r['rows_read']:,} rows in {r['seconds']:.0f} s (~{r['observed_rows_per_s']:,.0f} "
                "rows/s)", eps, first or "n/a", "n/a", "**did not finish**"]
    return [_n(_rate(r)), eps or "n/a", first or "n/a", _x(_rate(r), hf), _check(r)]


def _shuffled(R: dict) -> list[str]:
    S, c = R.get("shuffled") or {}, R["config"]
    if not S:
        return []
    hf = _rate(S.get("hf"))
    loader = f"`StreamingDataLoader(ds, batch_size={c['batch_size']}, num_workers=2)`"
    rows = []
    for key, name, how in (
            ("shardstream", "shardstream", f"{loader}, `ds` with `shuffle=True` (default: column batches decoded "
                                           "in the workers)"),
            ("shardstream_per_sample", "shardstream", "the same with `batch_decode=False` (per-sample dicts, "
                                                      "stacked in the workers)"),
            ("hf", "HF `datasets`", f"streaming `.shuffle(seed, buffer_size=10_000)` -> `DataLoader(batch_size="
                                    f"{c['batch_size']}, num_workers=2, collate_fn=pad)`")):
        if key in S:
            rows.append([name, how] + _shuffled_cells(S[key] or {}, hf))
    limit = "the whole epoch" if c["limit"] == c["rows"] else f"the first {c['limit']:,} rows of the epoch"
    return (["### Shuffled epoch through a PyTorch DataLoader (2 workers)", ""]
            + _table(["Library", "How", "rows/s", "epochs (s)", "first batch (s)", "vs HF", "checked"], rows)
            + ["", (f"Each epoch reads {limit}; median of up to {c['epochs']} epochs of one loader object (none "
                    f"started once they took {c['budget_s']:g} s), each timed from `iter(loader)` (worker start "
                    f"included) to its last batch; an epoch still running after {c.get('epoch_timeout_s', 120):g} s "
                    "is abandoned and reported as not finished. Both libraries give the same batch: `id` tensor, "
                    "`tokens` padded with zeros to the longest row plus `tokens_lengths`, `text` a list "
                    "(shardstream's default form; for HF a collate that builds it, run in the workers)."
                    + _busy(S)), ""])


def resume_summary(r: Optional[dict]) -> Optional[dict]:
    """Slowest and fastest median load -> first sample over the positions, and their ratio."""
    pos = get(r, "positions")
    if not pos:
        return None
    med = [p["median_s"] for p in pos.values()]
    return {"slowest": max(med), "fastest": min(med), "spread": max(med) / min(med),
            "flat": max(med) / min(med) <= FLAT_RATIO, "ok": all(p["ok"] for p in pos.values())}


def _resume(R: dict) -> list[str]:
    S, c = R.get("resume") or {}, R["config"]
    if not S:
        return []
    keys = [("shardstream", "shardstream, file order"), ("shardstream_shuffled", "shardstream, `shuffle=True`"),
            ("hf", "HF `datasets`, file order")]
    ks = sorted({int(k) for key, _ in keys for k in (get(S, key, "positions") or {})})
    rows = []
    for k in ks:
        cells = [f"{k / c['rows']:.0%}", f"{k:,}"]
        for key, _ in keys:
            p = get(S, key, "positions", str(k))
            cells.append("n/a" if not p else f"{p['median_s'] * 1e3:,.1f} (first {p['first_s'] * 1e3:,.1f})"
                         + ("" if p["ok"] else " **WRONG ROW**"))
        cells.append(_x(get(S, "hf", "positions", str(k), "median_s"),
                        get(S, "shardstream", "positions", str(k), "median_s")))
        rows.append(cells)
    L = ["### Resumption: `load_state_dict` -> first sample", ""]
    L += _table(["Position", "rows consumed"] + [f"{n} (ms)" for _, n in keys] + ["HF / shardstream"], rows)
    verdicts = []
    for key, name in keys:
        s = resume_summary(S.get(key))
        if s:
            verdicts.append(f"{name}: slowest / fastest position {s['spread']:.2f}x ("
                            + ("flat" if s["flat"] else "not flat") + ")")
        elif get(S, key, "error"):
            verdicts.append(f"{name}: failed ({S[key]['error']})")
    L += ["", (f"Median of {c['resume_repeats']} resumptions per position (and the first of them), in one process "
               "per library: a pass in file order records `ds.state_dict()` after k rows; then, per resumption, a "
               "new dataset object (its constructor not timed), `load_state_dict(state)`, `next(iter(ds))`, "
               "which must be row k (checked; for the shuffled row, the row the uninterrupted pass read next). HF "
               "resumes by reading the current file up to the saved row again and skipping it; shardstream "
               f"computes the position from the plan. Flat means slowest <= {FLAT_RATIO}x fastest: "
               + "; ".join(verdicts) + "."), ""]
    return L


def _jsonl(R: dict) -> list[str]:
    J, c = R.get("jsonl") or {}, R["config"]
    if not J:
        return []
    opens = [r for r in J.get("first_open", []) if "error" not in r]
    L = ["### JSON Lines", ""]
    if opens:
        med = {k: statistics.median(r[k] for r in opens) for k in ("construct_s", "first_sample_s")}
        io = {k: statistics.median(r["io"].get(k, 0) for r in opens) for k in ("rchar", "syscr")}
        L += _table(["shardstream first open (empty `SHARDSTREAM_CACHE_DIR`)", "median", "per run"], [
            ["constructor (s)", f"{med['construct_s']:.3f}", ", ".join(f"{r['construct_s']:.3f}" for r in opens)],
            ["constructor + first sample (s)", f"{med['first_sample_s']:.3f}",
             ", ".join(f"{r['first_sample_s']:.3f}" for r in opens)],
            ["bytes read (`rchar`, MB)", f"{io['rchar'] / 1e6:,.1f}",
             ", ".join(f"{r['io'].get('rchar', 0) / 1e6:,.1f}" for r in opens)],
            ["read calls (`syscr`)", f"{io['syscr']:,.0f}", ", ".join(f"{r['io'].get('syscr', 0):,}" for r in opens)],
            ["cache directory afterwards (KB)", f"{statistics.median(r['cache_bytes'] for r in opens) / 1e3:,.1f}",
             ""]])
        L += ["", (f"{len(opens)} fresh processes, each with an empty cache directory, over the "
                   f"{R['data']['jsonl_bytes'] / 1e6:,.0f} MB of JSONL. Bytes and read calls are the process's "
                   "`/proc/self/io` counters around the constructor and first sample (page-cache reads included; "
                   "the whole process, so imports done in that span count too). Local files: no requests."), ""]
    for r in J.get("first_open", []):
        if "error" in r:
            L += [f"A first open failed: {r['error']}.", ""]
    ss, hf = J.get("shardstream"), J.get("hf")
    L += _table(["Library", "How", "open (s)", "rows/s", "passes (s)", "shardstream speed-up", "checked"], [
        ["shardstream", "`StreamingDataset(local='dir/*.jsonl')`, index cached by the first open",
         _n(get(ss, "open_s"), 3), _n(_rate(ss)), _passes(ss), "1.00x" if _rate(ss) else "n/a", _check(ss)],
        ["HF `datasets`", "`load_dataset('json', data_files=files, split='train', streaming=True)`",
         _n(get(hf, "open_s"), 3), _n(_rate(hf)), _passes(hf), _x(_rate(ss), _rate(hf)), _check(hf)]])
    return L + ["", f"Warm: the cache directory the last first open filled; median of {c['repeats']} passes.", ""]


def _peers(R: dict) -> list[str]:
    P, Q = R.get("peers") or {}, R.get("parquet") or {}
    if not P:
        return []
    ss = _rate(Q.get("shardstream"))
    spec = [("shardstream", "shardstream", "the Parquet files (from the first table)", None),
            ("litdata_parquet", "litdata", "the Parquet files: `index_parquet_dataset` + `ParquetLoader()`",
             "index_s"),
            ("litdata", "litdata", "its own copy, written by `litdata.optimize(num_workers=1, chunk_bytes='64MB')`",
             "litdata_optimize"),
            ("mosaic", "mosaicml-streaming", "the MDS copy (shardstream's `MDSWriter`, 64 MB shards)", "write_mds"),
            ("shardstream_mds", "shardstream", "the MDS copy", "write_mds")]
    rows = []
    for key, name, what, prep in spec:
        r = Q.get(key) if key == "shardstream" else P.get(key)
        prep_s = (get(r, prep) if prep == "index_s" else get(P, prep, "write_s")) if prep else None
        rows.append([name, what, _n(prep_s, 1), _n(get(r, "open_s"), 3), _n(_rate(r)), _passes(r),
                     _x(ss, _rate(r)), _check(r)])
    L = ["### Peers: sequential rows/s", ""]
    L += _table(["Library", "Reads", "conversion / indexing (s)", "open (s)", "rows/s", "passes (s)",
                 "shardstream (Parquet) speed-up", "checked"], rows)
    L += ["", ("Same rows and checks as above, dict samples, in the main process (no DataLoader). litdata and "
               "mosaicml-streaming run in the peer venv. The copies hold the rows the passes read: the MDS copy "
               "is written once (uncompressed, columns `id: int64, tokens: ndarray:int32, text: str`) and read "
               "by both libraries. *conversion / indexing*: the one-off cost before the first read (writing the "
               "copy, or litdata's `index_parquet_dataset`)." + _busy(P))]
    for key in ("litdata_parquet", "litdata_optimize", "litdata", "mosaic"):
        if get(P, key, "error"):
            L += ["", f"**{key} failed** ({P[key]['error']}):", "", "```", P[key].get("stderr_tail", "")[-1200:],
                  "```"]
    return L + [""]


def target_rows(R: Optional[dict]) -> list[dict]:
    """Rows for ``bench/run.py``'s summary: sequential Parquet dict rows vs HF streaming and vs pyarrow."""
    if not R:
        return []
    P = R.get("parquet") or {}
    ss = _rate(P.get("shardstream"))
    rows = []
    for key, name, need in (("hf", "HF `datasets` streaming", TARGET_HF), ("pyarrow", "a plain pyarrow loop",
                                                                           TARGET_PYARROW)):
        other = _rate(P.get(key))
        rows.append({"target": f"Sequential Parquet dict rows vs {name}",
                     "measured": f"{_n(ss)} vs {_n(other)} rows/s", "ratio": _x(ss, other),
                     "required": f">= {need:g}x", "met": None if not ss or not other else ss / other >= need})
    return rows


def failed(R: dict) -> list[str]:
    """The measurements that failed or read wrong rows."""
    out = []
    for part in ("parquet", "jsonl", "shuffled", "resume", "peers"):
        for key, r in (R.get(part) or {}).items():
            for i, x in enumerate(r if isinstance(r, list) else [r]):
                if isinstance(x, dict) and ("error" in x or x.get("ok") is False):
                    out.append(f"{part}/{key}" + (f"[{i}]" if isinstance(r, list) else ""))
    return out


def markdown(R: dict, targets: bool = True) -> str:
    """The files section as Markdown (``targets``: with its own table of the targets)."""
    L = _header(R) + _sequential(R) + _shuffled(R) + _resume(R) + _jsonl(R) + _peers(R)
    if not targets:
        return "\n".join(L)
    L += ["### Targets", ""]
    L += _table(["Target", "Measured", "Ratio", "Required", "Status"],
                [[t["target"], t["measured"], t["ratio"], t["required"],
                  "n/a" if t["met"] is None else ("**MET**" if t["met"] else "**NOT MET**")] for t in target_rows(R)])
    return "\n".join(L) + "\n"
