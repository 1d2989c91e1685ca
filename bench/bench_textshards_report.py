"""The Markdown section, the checks and the targets of ``bench/bench_textshards.py`` (JSON and CSV shards).

:func:`markdown` renders the raw results of :func:`bench_textshards.run_textshards`, :func:`checks` says
per case whether both libraries wrote the same bytes and read the same samples, :func:`target_rows`
gives the rows of ``bench/run.py``'s summary table and :func:`failed` names what failed or was wrong.
"""

from __future__ import annotations

import json
from typing import Optional

from bench_files_report import _n, _table

LABELS = {"shardstream": "shardstream", "mosaic": "mosaicml-streaming"}
# metric -> (step, key in the step's result, label, higher is better)
METRICS = {"write": ("write", "samples_per_s", "write samples/s", True),
           "iterate": ("read", "iterate_samples_per_s", "sequential read samples/s", True),
           "random": ("read", "random_samples_per_s", "random access `ds[i]` samples/s", True),
           "rss_write": ("write", "peak_rss_mb", "peak RSS writing (MB)", False),
           "rss_read": ("read", "peak_rss_mb", "peak RSS reading (MB)", False)}


def _get(R: dict, case: str, lib: str, step: str) -> Optional[dict]:
    r = (((R.get("runs") or {}).get(case) or {}).get(lib) or {}).get(step)
    return None if not r or "error" in r else r


def value(R: dict, case: str, lib: str, metric: str) -> Optional[float]:
    step, key, _, _ = METRICS[metric]
    r = _get(R, case, lib, step)
    return r[key] if r else None


def expected(R: dict) -> dict:
    """The sequential pass's count, ``id`` sum and order-sensitive ``id`` sum (``id`` k at position k+1)."""
    n = R["config"].get("limit") or R["data"]["samples"]
    return {"count": n, "id_sum": n * (n - 1) // 2, "id_order": (n - 1) * n * (n + 1) // 3}


def checks(R: dict, case: str) -> dict:
    """Per case: ``bytes`` (both outputs' files have the same SHA-256, None without both), ``samples`` (each
    library's sequential pass read what was written, in order, and both read the same samples in both
    passes), and why not (``problems``)."""
    problems, exp = [], expected(R)
    libs = [lib for lib in LABELS if _get(R, case, lib, "read")]
    for lib in LABELS:
        for step in ("write", "read"):
            r = ((R.get("runs") or {}).get(case) or {}).get(lib, {}).get(step)
            if r and "error" in r:
                problems.append(f"{LABELS[lib]} {step} failed ({r['error']})")
    for lib in libs:
        seq = _get(R, case, lib, "read")["sequential"]
        if any(seq[k] != v for k, v in exp.items()):
            problems.append(f"{LABELS[lib]} did not read the {exp['count']:,} samples in written order "
                            f"(it read {seq['count']:,})")
    if len(libs) == 2:
        a, b = (_get(R, case, lib, "read") for lib in libs)
        for p in ("sequential", "random"):
            if a[p] != b[p]:
                problems.append(f"the libraries' {p} passes read different samples")
    ours, theirs = _get(R, case, "shardstream", "write"), _get(R, case, "mosaic", "write")
    same = None if not (ours and theirs) else ours["digests"] == theirs["digests"]
    if same is False:
        problems.append("the libraries wrote different bytes")
    return {"bytes": same, "files": len(ours["digests"]) if ours else 0, "samples": not problems,
            "problems": problems}


def failed(R: dict) -> list[str]:
    return [f"{case} ({'; '.join(c['problems'])})" for case in R["config"]["cases"]
            for c in [checks(R, case)] if c["problems"]]


def ratio(R: dict, case: str, metric: str) -> Optional[float]:
    """ours / mosaicml-streaming for a rate; mosaicml-streaming / ours for memory (above 1: ours is better)."""
    a, b = value(R, case, "shardstream", metric), value(R, case, "mosaic", metric)
    if not a or not b:
        return None
    return a / b if METRICS[metric][3] else b / a


def target_rows(R: Optional[dict]) -> list[dict]:
    """One row per metric: the worst case's ratio, met when shardstream is at least on par (>= 1x)."""
    if not R:
        return []
    out = []
    for metric, (_, _, label, higher) in METRICS.items():
        pairs = [(ratio(R, c, metric), c) for c in R["config"]["cases"]]
        pairs = [p for p in pairs if p[0] is not None]
        worst = min(pairs) if pairs else (None, None)
        ours, theirs = (value(R, worst[1], lib, metric) if worst[1] else None for lib in ("shardstream", "mosaic"))
        better = "" if higher else " (theirs / ours)"
        out.append({"target": f"JSON/CSV shards, {label}, shardstream vs mosaicml-streaming, worst of "
                              f"{len(pairs)} cases ({worst[1] or 'none'})",
                    "measured": f"{_n(ours)} vs {_n(theirs)}", "ratio": (f"{worst[0]:.2f}x" if worst[0] else "n/a")
                    + better, "required": ">= 1x", "met": None if worst[0] is None else worst[0] >= 1.0})
    return out


def _mark(ok: Optional[bool]) -> str:
    return "n/a" if ok is None else ("yes" if ok else "**NO**")


def table_rows(R: dict) -> list[list[str]]:
    rows = []
    for case in R["config"]["cases"]:
        fmt, comp = case.split("-")
        c = checks(R, case)
        for lib in LABELS:
            w, r = _get(R, case, lib, "write"), _get(R, case, lib, "read")
            if not (w or r):
                continue
            rows.append([fmt.upper(), comp, LABELS[lib], _n(value(R, case, lib, "write")),
                         _n(w["MB_per_s"], 1) if w else "n/a", _n(w["out_bytes"] / 1e6, 1) if w else "n/a",
                         _n(value(R, case, lib, "iterate")), _n(value(R, case, lib, "random")),
                         _n(value(R, case, lib, "rss_write")), _n(value(R, case, lib, "rss_read")),
                         _others(w, r), _mark(c["bytes"]) + (f" ({c['files']} files)" if c["bytes"] else ""),
                         _mark(c["samples"])])
    return rows


def _others(*results) -> str:
    shares = [(r.get("contention") or {}).get("others_cpu_share") for r in results if r]
    shares = [s for s in shares if s is not None]
    return "n/a" if not shares else f"{max(shares):.0%}"


def ratio_rows(R: dict) -> list[list[str]]:
    rows = []
    for case in R["config"]["cases"]:
        fmt, comp = case.split("-")
        cells = [f"{x:.2f}x" if x else "n/a" for x in (ratio(R, case, m) for m in METRICS)]
        rows.append([fmt.upper(), comp, *cells])
    return rows


def _versions(R: dict) -> str:
    seen = {}
    for case in (R.get("runs") or {}).values():
        for lib, steps in case.items():
            for r in steps.values():
                if r and "error" not in r:
                    seen[lib] = f"{LABELS[lib]} {r['version']} (Python {r['python']})"
    return ", ".join(seen.values()) or "n/a"


def markdown(R: dict) -> str:
    data, cfg, m = R["data"], R["config"], R.get("machine", {})
    L = ["## JSON, CSV and XSV shards", "",
         f"Measured {R['date']} (git {R['git']}), {R.get('total_s', 0):,.0f} s in all, load average "
         f"{R['loadavg_before']} before and {R.get('loadavg_after', '?')} after. Machine: {m.get('cpu', '?')}, "
         f"{m.get('logical_cpus', '?')} logical CPUs, RAM {m.get('ram_gib', 0):.1f} GiB. Versions: {_versions(R)}.",
         "",
         f"The samples: {data['samples']:,} of `{json.dumps(cfg['columns'])}` (`text` 40..200 letters and spaces, "
         f"{data['bytes'] / 1e6:,.1f} MB as JSON Lines), generated once from seed {data['seed']}. For each format and "
         "compression, each library writes them with its own `JSONWriter` or `CSVWriter` (default `size_limit`, "
         "64 MiB; no hashes) in a fresh process, then reads what it wrote in another fresh process with its own "
         "`StreamingDataset(local=..., shuffle=False, "
         f"batch_size={cfg.get('batch_size')})` (a divisor of the sample count: no epoch padded or cut): one pass over every sample"
         + (f" (the first {cfg['limit']:,})" if cfg.get("limit") else "")
         + f", then `ds[i]` at {data['random']:,} random indices. TSV and XSV shards are CSV shards with another "
         "separator, read and written by the same code."]
    if R.get("not_run"):
        L += ["", "Not run: " + "; ".join(f"{LABELS.get(k, k)}: {v}" for k, v in R["not_run"].items()) + "."]
    L += [""]
    L += _table(["Format", "Compression", "Library", "write samples/s", "write MB/s", "output (MB)",
                 "read samples/s", "`ds[i]` samples/s", "peak RSS write (MB)", "peak RSS read (MB)", "others' CPU",
                 "same bytes", "same samples"], table_rows(R))
    L += ["", "shardstream against mosaicml-streaming (above 1x: shardstream is faster, or needs less memory):", ""]
    L += _table(["Format", "Compression", "write", "sequential read", "random access", "peak RSS write",
                 "peak RSS read"], ratio_rows(R))
    L += ["", "Targets: shardstream at least on par with mosaicml-streaming on every figure (the worst case of each):"]
    for t in target_rows(R):
        status = "n/a" if t["met"] is None else ("**MET**" if t["met"] else "**NOT MET**")
        L.append(f"- {t['target']}: {t['measured']}, {t['ratio']}: {status}.")
    L += ["", "How it is measured: the write time runs from the writer's construction to the end of its `with` block "
          "(every shard and `index.json` written; the samples are loaded from the JSON Lines file before). The read "
          "pass runs from the first sample to the last (the dataset's construction left out); zstd shards are "
          "decompressed during it, by both libraries. *Same bytes*: the SHA-256 of every file both libraries wrote "
          "(data, meta, compressed files, `index.json`) are equal. *Same samples*: each library's pass read every "
          "sample in written order (count, sum and order-weighted sum of `id`), and both libraries' passes agree on "
          "those and on the characters of `text` and the sum of `score`. Peak RSS is the process's own peak (`VmHWM` in `/proc/self/status`): "
          "the interpreter, the library, and when writing the "
          f"{data['samples']:,} samples held in a list. *Others' CPU* is the "
          "share of the CPUs other processes used during the run (the machine is shared).", ""]
    return "\n".join(L)
