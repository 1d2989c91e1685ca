"""The Markdown section and the targets of ``bench/bench_pipeline.py`` (the text LM input pipeline).

:func:`markdown` renders the raw results of :func:`bench_pipeline.run_pipeline`, :func:`target_rows`
gives the rows of ``bench/run.py``'s summary table, :func:`failed` names the measurements that
failed or carried wrong tokens.
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

from bench_files_report import _n, _table, _x  # the table helpers both data-file and pipeline reports use

TARGET_HF = 2.0
TARGET_GRAIN = 1.0
LIBRARIES = {"shardstream": "shardstream", "hf": "HF datasets", "grain": "Grain", "baseline": "Baseline"}
LABELS = {
    "shardstream-jsonl": ("shardstream", "`load_dataset('json', split='train')`, in-process iterator"),
    "shardstream-parquet": ("shardstream", "`StreamingDataset(local='*.parquet')`, in-process iterator"),
    "shardstream-jsonl-loader": ("shardstream", "`load_dataset('json', ...)` through `AsyncDataLoader(batch_size=8)` "
                                 "(a background thread)"),
    "hf-jsonl": ("hf", "`load_dataset('json', streaming=True)`, `tokenizers.Tokenizer.encode_batch`"),
    "hf-jsonl-transformers": ("hf", "`load_dataset('json', streaming=True)`, transformers `PreTrainedTokenizerFast`"),
    "grain-batched": ("grain", "`MapDataset.source(list)`, batched `encode_batch`, `ConcatThenSplitIterDataset`"),
    "grain-per-row": ("grain", "`MapDataset.source(list)`, `encode` per document, `ConcatThenSplitIterDataset`"),
    "baseline-tokenize": ("baseline", "the tokenizer alone: `encode_batch` over the documents in memory, batches "
                                      "of 1,000, nothing else"),
}
SAME_INPUT = ("shardstream-jsonl", "shardstream-jsonl-loader", "hf-jsonl", "hf-jsonl-transformers", "grain-batched",
              "grain-per-row")


def _ok(runs: list[dict]) -> list[dict]:
    return [r for r in runs if "error" not in r and r.get("ok")]


def median(runs: list[dict], key: str) -> Optional[float]:
    vals = [r[key] for r in _ok(runs) if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fastest(runs: list[dict], key: str = "tokens_per_s") -> Optional[float]:
    vals = [r[key] for r in _ok(runs) if r.get(key) is not None]
    return max(vals) if vals else None


def best(R: dict, library: str) -> tuple[Optional[str], Optional[float]]:
    """The case of ``library`` (among those reading the JSONL files) with the fastest epoch (tokens/s)."""
    found = [(fastest(runs), case) for case, runs in R.get("throughput", {}).items()
             if LABELS[case][0] == library and case in SAME_INPUT]
    found = [(v, c) for v, c in found if v]
    if not found:
        return None, None
    v, c = max(found)
    return c, v


def best_median(R: dict, library: str) -> Optional[float]:
    vals = [median(runs, "tokens_per_s") for case, runs in R.get("throughput", {}).items()
            if LABELS[case][0] == library and case in SAME_INPUT]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def _check(runs: list[dict]) -> str:
    if not runs:
        return "not run"
    bad = [r for r in runs if "error" in r or not r.get("ok")]
    if not bad:
        return "ok"
    errors = [r["error"] for r in bad if "error" in r]
    return f"**{len(bad)} of {len(runs)} failed**" + (f" ({errors[0]})" if errors else " (wrong tokens)")


def _share(runs: list[dict]) -> str:
    shares = [r.get("contention", {}).get("others_cpu_share") for r in runs]
    shares = [s for s in shares if s is not None]
    return "n/a" if not shares else f"{min(shares):.0%}-{max(shares):.0%}"


def _versions(R: dict) -> str:
    seen: dict[str, str] = {}
    for runs in R.get("throughput", {}).values():
        for r in runs:
            if r.get("version"):
                seen.setdefault(r["library"], r["version"] + (f" (tokenizers {r['tokenizers']})"
                                                              if r.get("tokenizers") else ""))
    if "shardstream" in seen:
        seen["shardstream"] += f" (git {R.get('git', '?')})"
    extra = R.get("project_venv") or {}
    if extra:
        seen["project venv"] = ", ".join(f"{k} {v}" for k, v in extra.items())
    return "; ".join(f"{k} {v}" for k, v in seen.items()) or "n/a"


def throughput_rows(R: dict) -> list[list[Any]]:
    rows = []
    for case, runs in R.get("throughput", {}).items():
        lib, how = LABELS[case]
        ok = _ok(runs)
        cpu = [r["cpu_s"] / r["epoch_s"] for r in ok]
        per_cpu = [r["tokens"] / r["cpu_s"] for r in ok if r.get("cpu_s")]
        rss = max((r["peak_rss_mb"] for r in ok), default=None)
        load = median(runs, "load_s")
        eff = median(runs, "packing_efficiency")
        rows.append([LIBRARIES[lib], how, _n(fastest(runs)), _n(median(runs, "tokens_per_s")),
                     ", ".join(_n(r.get("tokens_per_s")) for r in ok) or "n/a",
                     _n(median(runs, "steady_tokens_per_s")), _n(median(runs, "first_batch_s"), 2)
                     + (f" (+{load:.1f} s reading into memory)" if load else ""),
                     "-" if eff is None else _n(eff, 4), "n/a" if not cpu else f"{statistics.median(cpu):.2f}",
                     "n/a" if not per_cpu else _n(statistics.median(per_cpu)),
                     _n(rss), _share(runs), _check(runs)])
    return rows


def resume_rows(R: dict) -> list[list[Any]]:
    res = R.get("resume", {})
    ours, hf = res.get("shardstream-jsonl") or {}, res.get("hf-jsonl") or {}
    keys = sorted({int(k) for r in (ours, hf) for k in (r.get("positions") or {})})
    rows = []
    for k in keys:
        a, b = (ours.get("positions") or {}).get(str(k)), (hf.get("positions") or {}).get(str(k))
        frac = (a or b)["fraction"]
        rows.append([f"{frac:.0%} ({k:,} batches)",
                     _ms(a), _equal(a), _complete(a, R), _n(a and a["checkpoint_bytes"]),
                     _ms(b), _equal(b), _complete(b, R), _n(b and b["checkpoint_bytes"])])
    return rows


def _ms(r: Optional[dict]) -> str:
    if not r:
        return "n/a"
    secs = [x["load_to_first_s"] for x in r["runs"]]
    return f"{r['median_s'] * 1e3:,.0f} ({', '.join(f'{s * 1e3:,.0f}' for s in secs)})"


def _complete(r: Optional[dict], R: dict) -> str:
    """Whether the batches before the checkpoint and those after the resumption made exactly the epoch."""
    if not r or r.get("epoch_complete") is None:
        return "n/a"
    if r["epoch_complete"]:
        return "yes"
    diff = r["epoch_tokens"] - R["data"]["expect"]["tokens"]
    return f"**no** ({abs(diff):,} tokens {'extra' if diff > 0 else 'missing'})" if diff else "**no** (other tokens)"


def _equal(r: Optional[dict]) -> str:
    if not r:
        return "n/a"
    return f"{r['equal_min']} of {r['compared']}" + ("" if r["equal_min"] == r["compared"] else " **differ**")


def markdown(R: dict) -> str:
    return "\n".join(intro(R) + throughput_part(R) + resume_part(R))


def intro(R: dict) -> list[str]:
    d, cfg, m = R["data"], R["config"], R["machine"]
    lscpu = m.get("lscpu", {})
    return ["## Text LM input pipeline: shuffle, tokenize, pack, batch", "",
         f"`bench/bench_pipeline.py`, {R['date']} (section run time {R['total_s']:.0f} s); machine: "
         f"{lscpu.get('Model name', m.get('cpu'))}, {lscpu.get('CPU(s)', m.get('logical_cpus'))} CPUs, "
         f"RAM {m.get('ram_gib', 0):.1f} GiB; every process pinned to CPUs {cfg['cpus']}; load average before / "
         f"after {R['loadavg_before']} / {R['loadavg_after']}; {_versions(R)}.", "",
         *[f"More epochs added on {a['date']} ({a['repeats']} per case of {', '.join(a['cases'])}; load average "
           f"before / after {a['loadavg_before']} / {a['loadavg_after']})." for a in R.get("added", [])],
         *([""] if R.get("added") else []),
         (f"Data: {d['docs']:,} generated English-like documents (lognormal lengths, mean {d['mean_chars']:,.0f} "
          f"characters, median {d['median_chars']:,.0f}), {d['jsonl_bytes'] / 1e6:.1f} MB of JSON Lines in "
          f"{d['files']} files (the same as Parquet: {d['parquet_bytes'] / 1e6:.1f} MB); a byte-level BPE of "
          f"{d['vocab']:,} tokens trained on them with `tokenizers` (one `tokenizer.json` for every side). An epoch "
          f"is {d['expect']['tokens']:,} tokens (one end-of-document token per document)."), "",
         ("Pipeline on every side: shuffle (buffer 10,000, seed 0; Grain: its global index shuffle) -> tokenize in "
          "batches of 1,000 -> concatenate and chunk into rows of 1,024 tokens (the last one padded) -> batches "
          "of 8. One epoch per process, each in a fresh process, sides interleaved, "
          f"{_runs(R)} processes per case. *Epoch tokens/s* counts the real (non-pad) tokens of the epoch over "
          "the time from `iter()` to its last batch: the warm-up of a process (interpreter start, imports, "
          "loading the tokenizer, building the pipeline) is left out, the shuffle buffer's fill is in. *After the "
          "first batch* leaves the time to the first batch out as well; it flatters a side that prefetches "
          "(Grain's 16 read threads tokenize ahead while the first batch is awaited), so the comparison uses the "
          "epoch rate. The machine is shared and other work comes and goes: it only slows a run down, so the "
          "comparison takes each case's fastest run (the closest to the library alone), and shows the median and "
          "every run beside it. *Tokens per CPU s* divides by the CPU time of the process (all its threads) over "
          "the epoch: it moves less than the wall-clock rates when other work shares the machine. Every epoch is "
          "checked against the generator's token count and id sum."), ""]


def throughput_part(R: dict) -> list[str]:
    ours_case, ours = best(R, "shardstream")
    hf_case, hf = best(R, "hf")
    grain_case, grain = best(R, "grain")
    L = ["### Throughput", ""]
    L += _table(["Library", "Pipeline", "epoch tokens/s, fastest run", "median", "every run",
                 "after the first batch, tokens/s (median)", "first batch (s)", "packing efficiency",
                 "CPU s / wall s", "tokens per CPU s", "peak RSS (MB)", "others' CPU share", "check"],
                throughput_rows(R))
    L += ["", (f"shardstream ({_label(ours_case)}) vs the fastest HF case ({_label(hf_case)}): **{_x(ours, hf)}** "
               f"(target >= {TARGET_HF:g}x); vs the fastest Grain case ({_label(grain_case)}): **{_x(ours, grain)}** "
               f"(target >= {TARGET_GRAIN:g}x). With each library's best median epoch instead: "
               f"{_x(best_median(R, 'shardstream'), best_median(R, 'hf'))} and "
               f"{_x(best_median(R, 'shardstream'), best_median(R, 'grain'))}.")]
    floor = fastest(R.get("throughput", {}).get("baseline-tokenize") or [])
    if floor:
        L += ["", (f"The tokenizer alone, called in a plain loop (`encode_batch` on 1,000 documents, their ids read "
                   f"out, then the next 1,000), makes {_n(floor)} tokens/s (fastest run). The fastest epochs are, of "
                   f"that: shardstream {_pct(ours, floor)}, HF {_pct(hf, floor)}, Grain {_pct(grain, floor)}. On "
                   "these 2 CPUs every side spends nearly all its CPU time in the tokenizer (*tokens per CPU s* is "
                   "about the same on every side and for the loop), so no side can be much faster than another "
                   "here: the rest of a pipeline (reading, shuffling, packing, batching) is a small part of an "
                   "epoch. A side passes the loop's rate only by overlapping that rest (and reading the ids out) "
                   "with the tokenizer's own threads.")]
    L += [""]
    if R.get("profile"):
        L += [f"shardstream misses a target, so one more epoch of `{R.get('profile_case', 'shardstream-jsonl')}` ran "
              "under py-spy: where its main thread spent the epoch's wall time (*own time*: the frame itself; "
              "*under*: shardstream's frames with everything they call; `Condition.wait` is the main thread waiting "
              "for another thread, such as the one in which a batched map tokenizes the next group):", ""]
        L += [f"- {p}" for p in R["profile"]] + [""]
    return L


def resume_part(R: dict) -> list[str]:
    L = ["### Resumption and checkpoint size", ""]
    L += _table(["Position", "shardstream load_state_dict -> first batch, ms (median; runs)", "shardstream next 20 "
                 "batches equal to the uninterrupted epoch's", "shardstream epoch exact", "shardstream checkpoint "
                 "(bytes)", "HF load_state_dict -> first batch, ms", "HF next 20 equal", "HF epoch exact",
                 "HF checkpoint (bytes)"],
                resume_rows(R))
    L += ["", ("States are taken from one uninterrupted epoch after k batches and passed through JSON; each "
               "resumption builds a new pipeline in the same process (not timed), loads the state, and times "
               "`load_state_dict` -> first batch; the first batch and the 19 after it are compared with the "
               "uninterrupted epoch's (real tokens, row by row); the first resumption of each position also reads the "
               "rest of the epoch, and *epoch exact* says whether the tokens before the checkpoint and after it "
               "are the epoch's, each once (count and id sum). shardstream's state is `state_dict()` of the "
               "pipeline. HF's is `IterableDataset.state_dict()` plus the tokens the packing generator has not cut "
               "yet (HF has no packer; a user keeps them by hand). Checkpoint size: `len(json.dumps(state))`."), ""]
    return L + hf_buffer_note(R)


def _pct(a: Optional[float], b: Optional[float]) -> str:
    return "n/a" if not a or not b else f"{a / b:.0%}"


def _runs(R: dict) -> str:
    counts = sorted({len(runs) for runs in R.get("throughput", {}).values()})
    return "/".join(map(str, counts)) or "0"


def _label(case: Optional[str]) -> str:
    return "none" if not case else case


def hf_buffer_note(R: dict) -> list[str]:
    hf = (R.get("resume") or {}).get("hf-jsonl") or {}
    pos = sorted((hf.get("positions") or {}).values(), key=lambda p: p["consumed_batches"])
    if not pos:
        return []
    same = [f"{p['fraction']:.0%}" for p in pos if p["equal_min"] == p["compared"] and p.get("epoch_complete")]
    differ = [f"{p['fraction']:.0%}" for p in pos if f"{p['fraction']:.0%}" not in same]
    if not differ:
        return ["HF `datasets` resumed every position with the batches of the uninterrupted epoch.", ""]
    return [("What HF `datasets` restores: its state holds no shuffle buffer. The buffer fills to 10,000 "
             "documents, then yields them in chunks of half the buffer, keeping the other half; the state points "
             "at where the source was read up to when the chunk being consumed began, and the packing generator "
             "on top must be saved by hand. On resumption HF reads again from there with an empty buffer and a "
             "restarted random generator (it logs a warning saying the buffer will be refilled). "
             + (f"At {', '.join(same)} of the epoch that point was still the start of the files, so HF replayed "
                "from the beginning and the batches matched. " if same else "")
             + f"At {', '.join(differ)} the batches differ from the uninterrupted epoch's: the documents that were "
             "in the buffer are lost for the epoch (see *HF epoch exact*)."), ""]


def target_rows(R: Optional[dict]) -> list[dict]:
    if not R:
        return []
    _, ours = best(R, "shardstream")
    rows = []
    for lib, need in (("hf", TARGET_HF), ("grain", TARGET_GRAIN)):
        case, theirs = best(R, lib)
        ok = None if not ours or not theirs else ours / theirs >= need
        rows.append({"target": f"Text LM pipeline (shuffle 10k, tokenize, pack 1,024, batch 8) tokens/s vs "
                               f"{LIBRARIES[lib]} ({case or 'not run'})",
                     "measured": f"{_n(ours)} vs {_n(theirs)} tokens/s", "ratio": _x(ours, theirs),
                     "required": f">= {need:g}x (fastest epochs)", "met": ok})
    return rows


def failed(R: dict) -> list[str]:
    out = [f"{case} ({_check(runs)})" for case, runs in R.get("throughput", {}).items() if _check(runs) != "ok"]
    out += [f"{case} resume ({r['error']})" for case, r in R.get("resume", {}).items() if "error" in r]
    ours = (R.get("resume") or {}).get("shardstream-jsonl") or {}
    out += [f"shardstream resume after {k} batches (not the uninterrupted epoch's batches)"
            for k, p in (ours.get("positions") or {}).items()
            if p["equal_min"] < p["compared"] or not p.get("epoch_complete")]
    return out
