"""The Markdown section of the handoff benchmark (``bench_handoff.py``), its targets and their figures."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from common import get

TITLE = "## Handing batches to the training process"
TARGET_CPU_SHARE = 0.2  # shardstream's training-process CPU per MB, of torch's mechanism's
TARGET_GBPS = 1.0
TARGET_COLLATE = 5.0
TARGET_GPU_GBPS = 4.0  # 14 workers, batches of 1,024, into GPU memory
HEADLINE_BATCH = "1024"
NAMES = {"shardstream": "shardstream", "mosaic": "mosaicml-streaming", "torch": "torch's own mechanism"}
HANDOFF_SETTINGS = {
    "shardstream": "`StreamingDataLoader`, defaults",
    "shardstream-queue": '`transfer="queue"` (torch\'s worker queue)',
    "shardstream-ring": '`transfer="ring"` (a shared-memory ring)',
    "torch": "`DataLoader(ReadyBatches, batch_size=None, sampler=RandomSampler)`, no decode",
}
GPU_SETTINGS = {
    "shardstream": "shardstream, unpinned (read on the CPU)",
    "shardstream-pinned": 'shardstream, `pin_memory=True` + `.to("cuda", non_blocking=True)`',
    "shardstream-device": 'shardstream, `device="cuda"`',
    "mosaic": "mosaicml-streaming, unpinned (read on the CPU)",
    "mosaic-pinned": 'mosaicml-streaming, `pin_memory=True` + `.to("cuda", non_blocking=True)`',
    "torch": "torch's mechanism, unpinned (read on the CPU)",
    "torch-pinned": 'torch\'s mechanism, `pin_memory=True` + `.to("cuda", non_blocking=True)`',
}


# -- the figures ---------------------------------------------------------------------------------------
def _value(r: Optional[dict], key: str) -> Optional[float]:
    if not r or "error" in r or "skipped" in r:
        return None
    return r.get(key)


def mosaic_best(R: dict) -> tuple[Optional[str], Optional[float]]:
    """mosaicml-streaming's fastest collate_fn case (steady samples/s) and its name."""
    rates = {c: v for c, r in (R.get("collate") or {}).items()
             if c.startswith("mosaic") and (v := _value(r, "steady_samples_per_s"))}
    if not rates:
        return None, None
    best = max(rates, key=rates.get)
    return best, rates[best]


def summary(R: dict) -> dict[str, Any]:
    """The targets' figures: with batches of 1,024, shardstream's (defaults) training-process CPU per MB
    against torch's mechanism's and its GB/s; the collate_fn path against mosaicml-streaming's best."""
    by_case = get(R, "handoff", HEADLINE_BATCH) or {}
    ours = _value(by_case.get("shardstream"), "main_cpu_us_per_MB")
    theirs = _value(by_case.get("torch"), "main_cpu_us_per_MB")
    out: dict[str, Any] = {"cpu_share": ours / theirs if ours and theirs else None,
                           "gbps": _value(by_case.get("shardstream"), "GB_per_s")}
    best, rate = mosaic_best(R)
    ss = _value(get(R, "collate", "shardstream"), "steady_samples_per_s")
    out.update(mosaic_best=best, collate_ratio=ss / rate if ss and rate else None)
    out.update(gpu_curve(R))
    return out


def gpu_curve(R: dict) -> dict[str, Any]:
    """The GPU targets' figures, batches of 1,024: shardstream's best way into GPU memory (pinned + ``.to``, or
    ``device="cuda"``) at the most workers, and that case's GB/s by workers (whether it keeps growing)."""
    by_case = get(R, "gpu", HEADLINE_BATCH) or {}
    workers = [str(w) for w in (R.get("config") or {}).get("workers", [])]
    best_case, best = None, None
    for case in ("shardstream-pinned", "shardstream-device"):
        value = _value((by_case.get(case) or {}).get(workers[-1]) if workers else None, "GB_per_s")
        if value is not None and (best is None or value > best):
            best_case, best = case, value
    curve = [_value((by_case.get(best_case) or {}).get(w), "GB_per_s") for w in workers] if best_case else []
    return {"gpu_case": best_case, "gpu_gbps": best, "gpu_workers": workers[-1] if workers else None,
            "gpu_curve": curve if curve and None not in curve else None}


def target_rows(R: Optional[dict]) -> list[dict]:
    """The section's rows of the report's summary of targets (none measured: no rows)."""
    if not R:
        return []
    S, rows = summary(R), []
    if S["cpu_share"] is not None:
        rows.append({"target": "Handoff, batches of 1,024, 2 workers: the training process's CPU per MB delivered, "
                               "shardstream (defaults) vs torch's own mechanism (no decode)",
                     "measured": f"{S['cpu_share']:.2f} of torch's", "ratio": f"{S['cpu_share']:.2f}x",
                     "required": f"<= {TARGET_CPU_SHARE:g} of torch's", "met": S["cpu_share"] <= TARGET_CPU_SHARE})
    if S["gbps"] is not None:
        rows.append({"target": "Handoff, batches of 1,024, 2 workers: GB/s delivered to the training process",
                     "measured": f"{S['gbps']:.2f} GB/s", "ratio": f"{S['gbps'] / TARGET_GBPS:.2f}x of 1 GB/s",
                     "required": f">= {TARGET_GBPS:g} GB/s", "met": S["gbps"] >= TARGET_GBPS})
    if S["collate_ratio"] is not None:
        rows.append({"target": "Per-sample path with a user collate_fn, batch 32, 2 workers, vs mosaicml-streaming's "
                               f"best predownload ({S['mosaic_best']})",
                     "measured": f"{S['collate_ratio']:.1f}x", "ratio": f"{S['collate_ratio']:.1f}x",
                     "required": f">= {TARGET_COLLATE:g}x", "met": S["collate_ratio"] >= TARGET_COLLATE})
    if S["gpu_gbps"] is not None:
        how = GPU_SETTINGS[S["gpu_case"]].replace("shardstream, ", "")
        rows.append({"target": f"GPU machine, {S['gpu_workers']} workers, batches of 1,024, into GPU memory ({how})",
                     "measured": f"{S['gpu_gbps']:.2f} GB/s", "ratio": f"{S['gpu_gbps'] / TARGET_GPU_GBPS:.2f}x of "
                     f"{TARGET_GPU_GBPS:g} GB/s", "required": f">= {TARGET_GPU_GBPS:g} GB/s",
                     "met": S["gpu_gbps"] >= TARGET_GPU_GBPS})
    if S["gpu_curve"]:
        curve = S["gpu_curve"]
        rows.append({"target": "GPU machine, batches of 1,024 into GPU memory: GB/s keeps growing with the workers "
                               f"(1 to {S['gpu_workers']})",
                     "measured": " -> ".join(f"{v:.2f}" for v in curve), "ratio": f"{curve[-1] / curve[0]:.1f}x",
                     "required": "each more workers deliver more", "met": all(b > a for a, b in zip(curve, curve[1:]))})
    return rows


# -- formatting --------------------------------------------------------------------------------------
def _n(x, digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _status(r: dict) -> Optional[str]:
    """A cell's text for a case that did not measure (skipped, failed, wrong), else None."""
    if "skipped" in r:
        return f"not run: {r['skipped']}"
    if "error" in r:
        return f"**failed** ({r['error']})"
    return None


def _checked(r: dict) -> str:
    n = r.get("epochs_finished", len(r.get("epochs") or []))
    return f"{n}, ok" if r.get("ok") else f"{n}, **count/checksum mismatch**"


def _met(ok: Optional[bool]) -> str:
    return "n/a" if ok is None else ("**MET**" if ok else "**NOT MET**")


def header(R: dict) -> list[str]:
    """The section's title, when and where it ran, the versions and the data."""
    cfg, m, probe = R["config"], R["machine"], R.get("probe") or {}
    gpu = probe.get("gpu")
    mos = next((r for part in ("collate", "gpu") for r in _results(R.get(part)) if r.get("library") == "mosaic"), {})
    vers = [f"shardstream {probe.get('version', '?')} (git {R.get('git', '?')}), torch {probe.get('torch', '?')}, "
            f"Python {probe.get('python', '?')}, numpy {probe.get('numpy', '?')}"]
    if mos:
        vers.append(f"mosaicml-streaming {mos.get('version')} (Python {mos.get('python')}, numpy {mos.get('numpy')}, "
                    f"torch {mos.get('torch')})")
    w = R.get("write") or {}
    disk = f"{w['disk_bytes'] / 1e6:,.0f} MB in {w['files']} files" if "disk_bytes" in w else "not written"
    return [TITLE, "",
            f"Run on {R['date']}, total {R.get('total_s', 0):.0f} s."
            + (f" Command: `{R['command']}`." if R.get("command") else ""), "",
            (f"- Machine: {m.get('cpu')}, {m.get('logical_cpus')} logical CPUs ({m.get('usable_cpus')} usable), RAM "
             f"{m.get('ram_gib', 0):.1f} GiB, {m.get('os')}; GPU: "
             + (f"{gpu} (CUDA {probe.get('torch_cuda')})" if gpu else "none")
             + f"; load average before / after: {R.get('loadavg_before')} / {R.get('loadavg_after', 'n/a')}"),
            f"- Versions: {'; '.join(vers)}",
            (f"- Data: {cfg['samples']:,} samples of {cfg['sample_bytes'] + 8:,} B (`x`: {cfg['sample_bytes']:,} "
             f"random bytes, `ndarray:uint8:{cfg['sample_bytes']}`; `label`: int), seed {cfg['seed']}, written once by "
             f"shardstream's `MDSWriter` (64 MB shards, uncompressed: {disk}) and read from the page cache by every "
             "loader; torch's mechanism slices the same arrays, held in memory."), ""]


def _results(part: Optional[dict]) -> list[dict]:
    """Every result of a part, however deeply it is keyed."""
    if not isinstance(part, dict):
        return []
    if "library" in part or "error" in part or "skipped" in part:
        return [part]
    return [r for v in part.values() for r in _results(v)]


# -- the parts ------------------------------------------------------------------------------------------
def handoff_part(R: dict) -> list[str]:
    """Part 1: the handoff table, how it was measured, and the targets."""
    cfg = R["config"]
    rows = []
    for batch, by_case in R["handoff"].items():
        torch_cpu = _value(by_case.get("torch"), "main_cpu_us_per_MB")
        for case, r in by_case.items():
            lib = "torch" if case == "torch" else "shardstream"
            bad = _status(r)
            if bad:
                rows.append([NAMES[lib], HANDOFF_SETTINGS[case], f"{int(batch):,}", bad] + [""] * 7)
                continue
            cpu = r.get("main_cpu_us_per_MB")
            rows.append([NAMES[lib], HANDOFF_SETTINGS[case], f"{int(batch):,}", _n(r.get("steady_samples_per_s")),
                         _n(r.get("GB_per_s"), 2), _n(cpu), "n/a" if not cpu or not torch_cpu else
                         f"{cpu / torch_cpu:.2f}", _n(r.get("main_minflt_per_MB"), 1),
                         _n(r.get("workers_cpu_us_per_MB")), _checked(r), _share(r)])
    L = ["### Handing batches over: 2 workers, batches of " + " and ".join(f"{int(b):,}" for b in R["handoff"]), ""]
    L += _table(["Loader", "Settings", "Batch", "steady samples/s", "GB/s delivered",
                 "training process CPU (µs per MB)", "of torch's", "its minor page faults per MB",
                 "workers' CPU (µs per MB)", "epochs checked", "other processes' CPU"], rows)
    L += ["", (f"One fresh process per row, one after the other: the loader (`num_workers=2`, shuffled, fork, "
               f"non-persistent workers) runs one warm-up epoch and {cfg['repeats']} timed epochs; in each, the first "
               + _skip_text(cfg) + " batches are left out (worker start-up, the prefetch fill) and the steady window "
               "runs to the last batch. *GB/s delivered*: payload bytes of the batches the loop received in the "
               "windows (`x` + the 8-byte label), over the windows' time. *Training process CPU*: user + system CPU "
               "time of the main process (`getrusage(RUSAGE_SELF)`, all its threads) over the same windows, per MB "
               "delivered; "
               "*of torch's*: that figure over torch's mechanism's with the same batch size. *Minor page faults*: "
               "the main process's, over the windows. *Workers' CPU*: `getrusage(RUSAGE_CHILDREN)` once the "
               "workers of each epoch have exited, over every batch delivered. The loop reads each batch's label "
               "sum and `x[:, 0].sum()` (every page of `x`), and every epoch is checked against the source data "
               "(count and both sums). torch's mechanism is the reference: a map-style dataset whose item `i` is "
               "batch `i`, sliced out of the arrays in memory and `.clone()`d in the worker, so nothing is decoded "
               "and what is measured is torch's crossing (shared-memory tensors and the worker queue).")]
    L += ["", _cpu_target_line(R)]
    return L


def _skip_text(cfg: dict) -> str:
    given = cfg.get("skip_batches")
    return "10 + twice the workers" if given is None else f"{given:,}"


def _share(r: dict) -> str:
    v = get(r, "contention", "others_cpu_share")
    return "n/a" if v is None else f"{v:.0%}"


def _cpu_target_line(R: dict) -> str:
    S = summary(R)
    share, gbps = S["cpu_share"], S["gbps"]
    return ("Targets (batches of 1,024, 2 workers, shardstream's defaults): the training process's CPU per MB at most "
            f"{TARGET_CPU_SHARE:g} of torch's mechanism's in the same run: "
            + ("n/a" if share is None else f"{share:.2f} ({_met(share <= TARGET_CPU_SHARE)})")
            + f"; at least {TARGET_GBPS:g} GB/s delivered: "
            + ("n/a" if gbps is None else f"{gbps:.2f} GB/s ({_met(gbps >= TARGET_GBPS)})") + ".")


def collate_part(R: dict) -> list[str]:
    """Part 2: the per-sample path with the shared collate_fn, against mosaicml-streaming's predownloads."""
    cfg = R["config"]
    best, best_rate = mosaic_best(R)
    rows = []
    for case, r in R["collate"].items():
        lib = "mosaic" if case.startswith("mosaic") else "shardstream"
        settings = (f"`predownload={case.split('-', 1)[1]}`" + (" (best)" if case == best else "") if lib == "mosaic"
                    else "`StreamingDataLoader(ds, batch_size=32, num_workers=2, collate_fn=collate)`")
        bad = _status(r)
        if bad:
            rows.append([NAMES[lib], settings, bad] + [""] * 5)
            continue
        main, workers = r.get("main_cpu_us_per_batch"), r.get("workers_cpu_us_per_batch")
        rows.append([NAMES[lib], settings, _n(r.get("steady_samples_per_s")), _n(r.get("epoch_samples_per_s")),
                     f"{_n(main)} / {_n(workers)}", "ok" if r.get("ok") else "**count/checksum mismatch**",
                     _share(r), "n/a" if not best_rate else f"{r['steady_samples_per_s'] / best_rate:.1f}x"])
    if "mosaic" not in R.get("libraries", []):
        rows.append([NAMES["mosaic"], "", "not run: no mosaicml-streaming (`--peer-python`)"] + [""] * 5)
    L = ["### Per-sample path with a user `collate_fn`: batch 32, 2 workers, shuffled", ""]
    L += _table(["Library", "Settings", f"steady samples/s (best of {cfg['collate_repeats']})", "epoch samples/s",
                 "CPU per batch: main / workers (µs)", "epochs checked", "other processes' CPU",
                 "vs mosaicml-streaming's best"], rows)
    L += ["", ("The same module-level `collate(samples)` for both libraries: `{'x': torch.from_numpy(np.stack([s['x'] "
               "for s in samples])), 'label': torch.tensor([s['label'] for s in samples])}`. mosaicml-streaming: its "
               "`StreamingDataLoader` over `StreamingDataset(local=..., shuffle=True, batch_size=32, "
               "predownload=P)` reading the same MDS files (`default`: 8 x the batch size, 256). One fresh process "
               f"per row: one warm-up epoch, then {cfg['collate_repeats']} timed epochs; *steady* leaves out the "
               f"first {cfg['collate_skip']} batches of each epoch (best epoch), *epoch* runs from `iter(loader)` to "
               "the last batch. Every epoch is checked (count, label sum, `x[:, 0]` sum).")]
    ratio = summary(R)["collate_ratio"]
    L += ["", f"Target: shardstream >= {TARGET_COLLATE:g}x mosaicml-streaming's best predownload, steady: "
          + ("n/a" if ratio is None else f"{ratio:.1f}x ({_met(ratio >= TARGET_COLLATE)})") + "."]
    return L


def gpu_part(R: dict) -> list[str]:
    """Part 3: the GPU curve, one table per batch size (GB/s and the training process's CPU per MB by workers)."""
    cfg = R["config"]
    workers = [str(w) for w in cfg["workers"]]
    notes: dict[str, int] = {}
    L = ["### GPU curve: GB/s delivered by the number of workers", ""]
    for batch in sorted(R["gpu"], key=int, reverse=True):
        rows = []
        for case in GPU_SETTINGS:
            by_w = R["gpu"][batch].get(case) or {}
            rows.append([GPU_SETTINGS[case]] + [_gpu_cell(by_w.get(w), notes) for w in workers])
        L += [f"Batches of {int(batch):,}:", ""]
        L += _table(["Case"] + [f"{w} worker{'s' if w != '1' else ''}" for w in workers], rows) + [""]
    L += [(f"Each cell: GB/s delivered (payload of the batches the loop received over the steady windows) and, in "
           "brackets, the training process's CPU per MB (µs). One fresh process per cell (persistent workers, "
           "shuffled), one after the other, in priority order (batches of 1,024 moved to the GPU, then unpinned, "
           f"then the next batch size); each runs epochs until its steady windows add up to {cfg['window_s']:g} s "
           f"(the last epoch is left unfinished); the first {_skip_text(cfg)} batches of the first epoch are left "
           "out, and the windows of the later epochs run from `iter(loader)` on (the time between epochs counted). "
           "*Unpinned*: the batches are read on the CPU where they arrived; *pinned*: `pin_memory=True` and the "
           "loop moves each tensor with `.to(\"cuda\", non_blocking=True)`; `device=\"cuda\"`: the loader hands over "
           "batches already on the GPU. With the GPU, each window ends with `torch.cuda.synchronize()` and the "
           f"checksums are summed on the GPU. The whole run had a budget of {cfg.get('budget_s') or 0:.0f} s.")]
    L += [""] + [f"- ({k}) Not run: {why}." for why, k in notes.items()]
    return L


def _gpu_cell(r: Optional[dict], notes: dict[str, int]) -> str:
    if r is None:
        return ""
    if "skipped" in r:
        return f"– ({notes.setdefault(r['skipped'], len(notes) + 1)})"
    if "error" in r:
        return f"**failed** ({r['error']})"
    cell = f"{_n(r.get('GB_per_s'), 2)} ({_n(r.get('main_cpu_us_per_MB'))})"
    return cell if r.get("ok") else cell + " **mismatch**"


def markdown(R: dict) -> str:
    """The handoff benchmark as a Markdown section."""
    L = header(R)
    for key in ("write", "probe"):
        r = R.get(key) or {}
        if "error" in r:
            L += [f"**{key} failed** ({r['error']}):", "", "```", r.get("stderr_tail", "")[-1500:], "```", ""]
    for part, render in (("handoff", handoff_part), ("collate", collate_part), ("gpu", gpu_part)):
        if R.get(part):
            L += render(R) + [""]
    return "\n".join(L)
